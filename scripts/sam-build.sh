#!/usr/bin/env bash
# `sam build` for template.yaml on this machine: the four functions cross-compiled for
# Lambda's arm64 (provided.al2023) by SAM's rust-cargolambda builder, which calls
# `cargo lambda build --release --arm64` (cargo-lambda bundles Zig as the cross linker, so no
# Docker and no aarch64 C toolchain are needed). Installs the pinned SAM CLI and cargo-lambda
# from PyPI into .tools/ and needs Rust's aarch64-unknown-linux-gnu target (rustup adds it
# from static.rust-lang.org). Prints the size of each built bootstrap.
#
#   scripts/sam-build.sh            # then: sam deploy --guided (see docs/aws.md)
#
# Output goes to .aws-sam/ (gitignored), where `sam deploy` looks for it.
set -euo pipefail

SAM_CLI_VERSION=1.170.0
CARGO_LAMBDA_VERSION=1.9.2
TARGET=aarch64-unknown-linux-gnu

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=lib/pyvenv.sh
. scripts/lib/pyvenv.sh
ensure_pyvenv .tools/sam/venv aws-sam-cli "$SAM_CLI_VERSION"
ensure_pyvenv .tools/cargo-lambda/venv cargo-lambda "$CARGO_LAMBDA_VERSION"

if ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "sam-build: adding the Rust target $TARGET (rustup)" >&2
  rustup target add "$TARGET"
fi

# SAM finds `cargo lambda` as a cargo subcommand on PATH; the Rust builder is a beta feature.
export PATH="$root/.tools/cargo-lambda/venv/bin:$PATH" SAM_CLI_TELEMETRY=0
.tools/sam/venv/bin/sam build --beta-features --template template.yaml

echo "sam-build: release bootstraps (arm64):"
for fn in .aws-sam/build/*/bootstrap; do
  printf '  %-22s %s bytes\n' "$(basename "$(dirname "$fn")")" "$(stat -c %s "$fn")"
done
