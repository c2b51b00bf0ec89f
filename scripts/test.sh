#!/usr/bin/env bash
# The one test command: tools, formatting, lints, the template lint, every Rust test (the AWS
# adapters and Lambda handlers against a local emulator it starts and stops itself), then the
# official conformance suite.
set -euo pipefail

cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

stage() {
  printf '\n==> %s\n' "$*"
}

stage "tools (scripts/install-tools.sh)"
bash scripts/install-tools.sh

stage "format (cargo fmt --all -- --check)"
cargo fmt --all -- --check

stage "lint (cargo clippy --workspace --all-targets --all-features -- -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

stage "template lint (scripts/lint-template.sh, cfn-lint)"
# sam validate --lint is a second opinion with a very large install; run it by hand with
# `bash scripts/lint-template.sh`.
SKIP_SAM=1 bash scripts/lint-template.sh

stage "AWS emulator (scripts/aws-emulator.sh: moto on 127.0.0.1)"
bash scripts/aws-emulator.sh start
trap 'bash scripts/aws-emulator.sh stop' EXIT
endpoint="$(cat .tools/moto/endpoint)"
export DYNAMODB_ENDPOINT="$endpoint" SQS_ENDPOINT="$endpoint"
# A missing emulator is a failure here, never a skip.
export REQUIRE_EMULATORS=1

stage "tests (cargo test --workspace --all-features)"
cargo test --workspace --all-features

stage "conformance (tests/conformance/run.sh)"
bash tests/conformance/run.sh

stage "peers (scripts/peers.sh: the official SDK clients against the local server)"
bash scripts/peers.sh

stage "all checks passed"
