#!/usr/bin/env bash
# Installs the peer clients that scripts/peers.sh drives against the server, into
# <repo>/.tools/peers (gitignored), from the lock files in tests/peers/lock — every package,
# not only the top-level ones, at a fixed version, so a clean clone installs what CI tested:
#   - ts-sdk1: @modelcontextprotocol/sdk 1.32.2 (TypeScript; legacy lane, 2025-11-25
#     experimental tasks) — npm ci from ts-sdk1/package-lock.json; run on the Node 22 that
#     scripts/install-tools.sh installs.
#   - ts-client2: @modelcontextprotocol/client 2.4.0 (TypeScript; 2026-07-28 with version
#     negotiation) and its companion @modelcontextprotocol/ext-tasks 0.2.2 (the 2.x client has
#     no tasks support of its own) — npm ci from ts-client2/package-lock.json.
#   - py-mcp2: mcp 2.3.0 (Python; 2026-07-28 synchronous calls, and its legacy mode) — a venv
#     from py-mcp2.txt.
#   - py-fastmcp: fastmcp-tasks 4.1.4 + fastmcp 4.1.4 (Python; 2026-07-28 tasks) — a venv from
#     py-fastmcp.txt.
# Idempotent: a peer whose installed lock file equals the repository's is left alone.
#
# To move a peer to another version: edit its package.json (npm; then
# `npm install --package-lock-only` in its lock folder) or reinstall the venv with the new
# top-level pin and `pip freeze` it into the .txt file.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lock="$root/tests/peers/lock"
peers="$root/.tools/peers"
node22="$root/.tools/bin/node22"
[ -x "$node22" ] || bash "$root/scripts/install-tools.sh"

# npm ci of tests/peers/lock/<name>/{package.json,package-lock.json} into .tools/peers/<name>.
install_npm() {
  local name="$1" src="$lock/$1" dir="$peers/$1"
  if [ -d "$dir/node_modules" ] && cmp -s "$src/package-lock.json" "$dir/package-lock.json"; then
    echo "install-peers: $name up to date"
    return
  fi
  command -v npm >/dev/null 2>&1 || { echo "install-peers: npm is required" >&2; exit 1; }
  echo "install-peers: installing $name into $dir (npm ci)"
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
}

# A venv at .tools/peers/<name> with exactly tests/peers/lock/<name>.txt.
install_pip() {
  local name="$1" src="$lock/$1.txt" dir="$peers/$1"
  if [ -x "$dir/bin/python" ] && cmp -s "$src" "$dir/requirements.lock"; then
    echo "install-peers: $name up to date"
    return
  fi
  echo "install-peers: installing $name into $dir (pip, $(wc -l <"$src") pinned packages)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$src"
  "$dir/bin/pip" check --disable-pip-version-check >/dev/null
  cp "$src" "$dir/requirements.lock"
}

install_npm ts-sdk1
install_pip py-mcp2
install_pip py-fastmcp
install_npm ts-client2
