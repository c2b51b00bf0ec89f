#!/usr/bin/env bash
# The one test command: tools, formatting, lints, every Rust test, then the conformance suite.
set -euo pipefail

cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

stage() {
  printf '\n==> %s\n' "$*"
}

stage "tools (scripts/install-tools.sh)"
bash scripts/install-tools.sh

stage "format (cargo fmt --all -- --check)"
cargo fmt --all -- --check

stage "lint (cargo clippy --workspace --all-targets -- -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

stage "tests (cargo test --workspace)"
cargo test --workspace

stage "conformance (tests/conformance/run.sh)"
bash tests/conformance/run.sh

stage "all checks passed"
