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

# Installs `$2==$3` into the venv `$1` unless that version is already there.
ensure() {
  local venv="$1" pkg="$2" version="$3" have=""
  if [ -x "$venv/bin/python" ]; then
    have="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$pkg'))" 2>/dev/null || true)"
  fi
  if [ "$have" != "$version" ]; then
    echo "lint-template: installing $pkg==$version into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$pkg==$version"
  fi
}

cfn="$root/.tools/cfn-lint/venv"
ensure "$cfn" cfn-lint "$CFN_LINT_VERSION"
"$cfn/bin/cfn-lint" "$template"
echo "lint-template: cfn-lint $CFN_LINT_VERSION passes" >&2

if [ "${SKIP_SAM:-0}" != "1" ]; then
  sam="$root/.tools/sam/venv"
  ensure "$sam" aws-sam-cli "$SAM_CLI_VERSION"
  SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" \
    "$sam/bin/sam" validate --lint --template "$template"
  echo "lint-template: sam validate --lint ($SAM_CLI_VERSION) passes" >&2
fi
