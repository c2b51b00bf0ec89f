#!/usr/bin/env bash
# Checks what the test command needs from the machine before it builds anything, and says
# exactly what is missing and how to get it. Everything else (Node 22, the conformance suite,
# the emulator, the SDK peers, cfn-lint) the test command installs itself from the registries.
#
#   bash scripts/lib/prereqs.sh      # exit 1 with one line per missing thing
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
min_rust="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$root/Cargo.toml" | head -1)"
# A clean run writes about 3.5 GB (target/ 2.5 GB + .tools/ 1 GB); with less than 4 GB free it
# would die part-way with ENOSPC, so stop before building. Below 6 GB, warn. A tree that already
# has target/ needs less: warn only.
need_gb="${NEED_GB:-4}" warn_gb=6
missing=()

# version_ge A B: A >= B for dotted versions.
version_ge() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
  missing+=("Rust: cargo/rustc not found. Install Rust $min_rust or newer: https://rustup.rs (rustup toolchain install stable), then open a new shell")
else
  have_rust="$(rustc --version | awk '{print $2}')"
  if ! version_ge "${have_rust%%-*}" "$min_rust"; then
    missing+=("Rust: rustc $have_rust is older than $min_rust (rust-version in Cargo.toml). Update: rustup update stable")
  fi
  cargo fmt --version >/dev/null 2>&1 ||
    missing+=("rustfmt: 'cargo fmt' not found. Install: rustup component add rustfmt")
  cargo clippy --version >/dev/null 2>&1 ||
    missing+=("clippy: 'cargo clippy' not found. Install: rustup component add clippy")
fi
command -v cc >/dev/null 2>&1 ||
  missing+=("C compiler/linker: 'cc' not found (Rust links with it; aws-lc-rs builds C). Install: apt-get install build-essential (Debian/Ubuntu)")
command -v git >/dev/null 2>&1 ||
  missing+=("git: not found. Install: apt-get install git")
if ! command -v python3 >/dev/null 2>&1; then
  missing+=("python3: not found (the emulator, cfn-lint and the Python SDK peers run in venvs). Install: apt-get install python3 python3-venv")
else
  # The real thing, as the scripts do it: Debian's python3 without python3-venv imports the
  # venv module but fails to create an environment with pip.
  venv_probe="$(mktemp -d)"
  if ! python3 -m venv "$venv_probe/v" >/dev/null 2>&1 || [ ! -x "$venv_probe/v/bin/pip" ]; then
    missing+=("python3 venv: '$(command -v python3) -m venv' cannot create an environment with pip. Install: apt-get install python3-venv (Debian/Ubuntu; python3.X-venv for a non-default python3)")
  fi
  rm -rf "$venv_probe"
fi
command -v jq >/dev/null 2>&1 ||
  missing+=("jq: not found (examples/shell/countdown.sh, the declared-tool example the tests run as a command target). Install: apt-get install jq")
command -v npm >/dev/null 2>&1 ||
  missing+=("npm: not found (it installs Node 22, the conformance suite and the TypeScript SDK peers into .tools/). Install: apt-get install npm (Debian/Ubuntu), or any Node.js with npm")

free_gb=$(($(df -Pk "$root" | awk 'NR==2 {print $4}') / 1024 / 1024))
if ((free_gb < need_gb)) && [ ! -d "$root/target" ]; then
  missing+=("disk: $free_gb GB free under $root; a run from a clean clone writes about 3.5 GB (target/ and .tools/), so free at least $need_gb GB (cargo clean in other checkouts, or clone elsewhere)")
fi

if ((free_gb < warn_gb)); then
  printf 'prerequisites: WARNING: %s GB free; a clean run writes about 3.5 GB\n' "$free_gb" >&2
fi

if ((${#missing[@]})); then
  printf 'prerequisites: missing %d thing(s); nothing was built:\n' "${#missing[@]}" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
printf 'prerequisites: ok (rustc %s >= %s, cargo fmt, clippy, cc, git, %s with venv, jq, npm %s, %s GB free)\n' \
  "$(rustc --version | awk '{print $2}')" "$min_rust" "$(python3 --version 2>&1)" \
  "$(npm --version 2>/dev/null)" "$free_gb"
