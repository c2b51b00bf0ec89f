#!/usr/bin/env bash
# Installs the pinned peer clients that scripts/peers.sh drives against the server, into
# <repo>/.tools/peers (gitignored). Idempotent: does nothing for a peer already at its version.
#   - TypeScript SDK 1.x client (legacy lane, 2025-11-25 experimental tasks): npm, run on the
#     Node 22 that scripts/install-tools.sh installs.
#   - Python SDK 2.x client (2026-07-28 synchronous calls, and its legacy mode): PyPI, in a venv.
set -euo pipefail

TS_SDK1_VERSION=1.32.2
PY_MCP_VERSION=2.3.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
peers="$root/.tools/peers"
node22="$root/.tools/bin/node22"
[ -x "$node22" ] || bash "$root/scripts/install-tools.sh"

# --- @modelcontextprotocol/sdk (TypeScript, 1.x) ------------------------------------------
ts="$peers/ts-sdk1"
ts_pkg="$ts/node_modules/@modelcontextprotocol/sdk/package.json"
have="$([ -f "$ts_pkg" ] && "$node22" -p "require(process.argv[1]).version" "$ts_pkg" 2>/dev/null || true)"
if [ "$have" = "$TS_SDK1_VERSION" ]; then
  echo "install-peers: @modelcontextprotocol/sdk@$TS_SDK1_VERSION up to date"
else
  command -v npm >/dev/null 2>&1 || { echo "install-peers: npm is required" >&2; exit 1; }
  echo "install-peers: installing @modelcontextprotocol/sdk@$TS_SDK1_VERSION into $ts"
  mkdir -p "$ts"
  cat >"$ts/package.json" <<JSON
{
  "name": "mcp-tasks-peer-ts-sdk1",
  "private": true,
  "description": "Pinned peer for scripts/peers.sh; installed by scripts/install-peers.sh",
  "dependencies": { "@modelcontextprotocol/sdk": "$TS_SDK1_VERSION" }
}
JSON
  npm install --prefix "$ts" --no-package-lock --no-audit --no-fund --loglevel=error
fi

# --- mcp (Python, 2.x) ----------------------------------------------------------------------
py="$peers/py-mcp2"
have="$([ -x "$py/bin/python" ] && "$py/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)"
if [ "$have" = "$PY_MCP_VERSION" ]; then
  echo "install-peers: mcp==$PY_MCP_VERSION up to date"
else
  echo "install-peers: installing mcp==$PY_MCP_VERSION into $py"
  rm -rf "$py"
  python3 -m venv "$py"
  "$py/bin/pip" install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION"
fi
