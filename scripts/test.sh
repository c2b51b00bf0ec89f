#!/usr/bin/env bash
# The one test command: tools, formatting, lints, the template lint, every Rust test (the AWS
# adapters and Lambda handlers against a local emulator it starts and stops itself), then the
# official conformance suite.
set -euo pipefail

cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

stage() {
  printf '\n==> %s\n' "$*"
}

# Disk is the scarce resource on CI machines (a run once died in pip with ENOSPC). Incremental
# compilation only pays off for repeated edits, never in a one-shot run, and its cache is a large
# share of a build's size; pip's download cache is never read twice in a clean run either.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" PIP_NO_CACHE_DIR=1
stage "prerequisites (scripts/lib/prereqs.sh) and self-containment (scripts/lib/self_contained.py)"
# Before anything is built: what the machine must have, and what is missing and how to get it.
# A run from a clean clone writes about 3.5 GB (target/ 2.5 GB + .tools/ 1 GB: the last line
# this script prints); below 5 GB free it stops here.
bash scripts/lib/prereqs.sh
# Nothing in code, tests or scripts reads above the repository root (a clone alone must pass),
# the copied official schemas match their recorded sums, and the guard itself still catches a
# read planted above the root.
python3 scripts/lib/self_contained.py
python3 scripts/lib/self_contained.py --self-test
# The cost model (docs/costs.md) must keep running on its committed figures.
python3 bench/cost_model.py > /dev/null
python3 bench/capacity_model.py > /dev/null

stage "tools (scripts/install-tools.sh)"
bash scripts/install-tools.sh

stage "format (cargo fmt --all -- --check)"
cargo fmt --all -- --check

stage "lint (cargo clippy --workspace --all-targets --all-features -- -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

stage "template lint (scripts/lint-template.sh: cfn-lint, deploy scenarios, checkov)"
# checkov (~0.3 GB in .tools/checkov) scans the template and its offline SAM transform; every
# finding is fixed or skipped in the template with a reason. sam validate --lint is a second
# opinion with a very large install; run it by hand with `bash scripts/lint-template.sh`.
SKIP_SAM=1 bash scripts/lint-template.sh

stage "AWS emulator (scripts/aws-emulator.sh: moto on 127.0.0.1)"
bash scripts/aws-emulator.sh start
trap 'bash scripts/aws-emulator.sh stop' EXIT
endpoint="$(cat .tools/moto/endpoint)"
export DYNAMODB_ENDPOINT="$endpoint" SQS_ENDPOINT="$endpoint"
# A missing emulator is a failure here, never a skip.
export REQUIRE_EMULATORS=1

# The declared-tool tests run the Node.js example handler with the Node the tools step installed.
export NODE="$PWD/.tools/bin/node22"
stage "tests (cargo test --workspace --all-features)"
cargo test --workspace --all-features

stage "docs (scripts/lib/docs_check.py: links resolve, commands name flags, targets and files that exist)"
python3 scripts/lib/docs_check.py --binary target/debug/mcp-tasks

stage "conformance (tests/conformance/run.sh)"
bash tests/conformance/run.sh

stage "peers (scripts/peers.sh: the official SDK clients against the local server)"
bash scripts/peers.sh

stage "all checks passed"
printf 'disk: target/ %s, .tools/ %s, %s GB still free\n' "$(du -sh target | cut -f1)" \
  "$(du -sh .tools | cut -f1)" "$(( $(df -Pk . | awk 'NR==2 {print $4}') / 1024 / 1024 ))"
