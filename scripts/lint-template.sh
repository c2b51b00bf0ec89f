#!/usr/bin/env bash
# Lints template.yaml, offline (no AWS calls, no credentials), with tools from PyPI pinned and
# installed into venvs under .tools/ (gitignored):
#   1. cfn-lint — merges the SAM Globals and checks the serverless resources against SAM's own
#      schemas, the rest against CloudFormation's (properties, GetAtts, limits); and again on
#      the offline SAM transform (step 3), where the generated roles, permissions and stages
#      are plain CloudFormation;
#   2. scripts/lib/template_params.py — what CloudFormation checks at deploy time and cfn-lint
#      does not: every parameter bounded (and its Default within bounds), and, for template.yaml,
#      careless deploys (defaults, AuthMode=none without AllowUnauthenticated=yes, out-of-range
#      values) tried against the parameter constraints and the Rules assertions, and what the
#      default deploy must have (template_ops.py: every function's errors and both stages'
#      5xx alarmed and sent where the deploy asked, state and logs kept on deletion; and the Api
#      events' ResponseTransferMode (SAM ignores a misspelt one and buffers; the streaming mcp
#      function needs RESPONSE_STREAM on every event);
#   3. checkov — a security scanner for infrastructure as code, twice: on the SAM template
#      (it reads AWS::Serverless::Function and ::Api itself) and on its offline transform
#      (scripts/lib/sam_transform.py: the REST API stages, execution roles and permissions SAM
#      generates, which the SAM template does not show). Every finding is fixed or skipped in
#      the template with a reason (`Metadata: checkov: skip:`); any other fails the lint.
#      `--skip-download`: nothing is fetched from a vendor's platform; the checks ship in the
#      package;
#   4. `sam validate --lint` (aws-sam-cli) — SAM's own validation. Large install; skip it with
#      SKIP_SAM=1.
#
#   scripts/lint-template.sh            # lint template.yaml
#   scripts/lint-template.sh other.yaml # lint another template
set -euo pipefail

CFN_LINT_VERSION=1.58.0
CHECKOV_VERSION=3.3.30
SAM_CLI_VERSION=1.170.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
template="${1:-$root/template.yaml}"

# shellcheck source=lib/pyvenv.sh
. "$root/scripts/lib/pyvenv.sh"

cfn="$root/.tools/cfn-lint/venv"
ensure_pyvenv "$cfn" cfn-lint "$CFN_LINT_VERSION"
"$cfn/bin/cfn-lint" "$template"
echo "lint-template: cfn-lint $CFN_LINT_VERSION passes" >&2

scenarios=()
[ "$template" -ef "$root/template.yaml" ] && scenarios=(--scenarios)
"$cfn/bin/python" "$root/scripts/lib/template_params.py" --check "$template" "${scenarios[@]}"
echo "lint-template: parameter bounds${scenarios:+ and deploy scenarios (Rules)} pass" >&2

# The cost and capacity tables docs/costs.md publishes are the template's defaults run through
# bench/cost_model.py and bench/capacity_model.py: generated, and checked here, so a changed
# default or price never leaves a stale figure (`python3 bench/cost_model.py --write-docs`).
if [ "$template" -ef "$root/template.yaml" ]; then
  "$cfn/bin/python" "$root/bench/cost_model.py" --check-docs
  echo "lint-template: docs/costs.md's tables are the cost and capacity models' output" >&2
fi

# checkov's venv also holds aws-sam-translator (scripts/lock/checkov.txt) for the transform.
ckv="$root/.tools/checkov/venv"
ensure_pyvenv "$ckv" checkov "$CHECKOV_VERSION"
transformed="$(mktemp -d)"
trap 'rm -rf "$transformed"' EXIT
"$ckv/bin/python" "$root/scripts/lib/sam_transform.py" "$template" "$transformed/template.json"
# cfn-lint again on what SAM generates (its venv has no aws-sam-translator, so on the SAM
# template it checks the serverless resources against SAM's schemas only): the generated
# roles, permissions, stages and deployments against CloudFormation's own.
"$cfn/bin/cfn-lint" "$transformed/template.json"
echo "lint-template: cfn-lint $CFN_LINT_VERSION passes on the SAM transform" >&2
for t in "$template" "$transformed/template.json"; do
  "$ckv/bin/checkov" --file "$t" --framework cloudformation --skip-download --compact --quiet \
    >"$transformed/checkov.out" 2>&1 || {
    cat "$transformed/checkov.out" >&2
    echo "lint-template: checkov $CHECKOV_VERSION finds what the template neither fixes nor skips with a reason ($t)" >&2
    exit 1
  }
done
echo "lint-template: checkov $CHECKOV_VERSION passes (the SAM template and its transform; skips in the template say why)" >&2

if [ "${SKIP_SAM:-0}" != "1" ]; then
  sam="$root/.tools/sam/venv"
  ensure_pyvenv "$sam" aws-sam-cli "$SAM_CLI_VERSION"
  SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" \
    "$sam/bin/sam" validate --lint --template "$template"
  echo "lint-template: sam validate --lint ($SAM_CLI_VERSION) passes" >&2
fi
