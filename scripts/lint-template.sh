#!/usr/bin/env bash
# Lints template.yaml, offline (no AWS calls, no credentials), with tools from PyPI pinned and
# installed into venvs under .tools/ (gitignored):
#   1. cfn-lint — expands the SAM transform itself (aws-sam-translator), so the serverless
#      resources are checked as the CloudFormation they become (properties, GetAtts, limits);
#   2. `sam validate --lint` (aws-sam-cli) — SAM's own validation. Large install; skip it with
#      SKIP_SAM=1.
#
#   scripts/lint-template.sh            # lint template.yaml
#   scripts/lint-template.sh other.yaml # lint another template
set -euo pipefail

CFN_LINT_VERSION=1.58.0
SAM_CLI_VERSION=1.170.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
template="${1:-$root/template.yaml}"

# shellcheck source=lib/pyvenv.sh
. "$root/scripts/lib/pyvenv.sh"

cfn="$root/.tools/cfn-lint/venv"
ensure_pyvenv "$cfn" cfn-lint "$CFN_LINT_VERSION"
"$cfn/bin/cfn-lint" "$template"
echo "lint-template: cfn-lint $CFN_LINT_VERSION passes" >&2

if [ "${SKIP_SAM:-0}" != "1" ]; then
  sam="$root/.tools/sam/venv"
  ensure_pyvenv "$sam" aws-sam-cli "$SAM_CLI_VERSION"
  SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" \
    "$sam/bin/sam" validate --lint --template "$template"
  echo "lint-template: sam validate --lint ($SAM_CLI_VERSION) passes" >&2
fi
