#!/usr/bin/env bash
# Installs the pinned peer clients that scripts/peers.sh drives against the server, into
# <repo>/.tools/peers (gitignored). Idempotent: does nothing for a peer already at its version.
#   - TypeScript SDK 1.x client (legacy lane, 2025-11-25 experimental tasks): npm, run on the
#     Node 22 that scripts/install-tools.sh installs.
#   - Python SDK 2.x client (2026-07-28 synchronous calls, and its legacy mode): PyPI, in a venv.
#   - fastmcp-tasks client (2026-07-28 tasks, SEP-2663): PyPI `fastmcp-tasks` + `fastmcp`, in a venv.
#   - TypeScript SDK 2.x client (2026-07-28 with version negotiation) and its companion
#     @modelcontextprotocol/ext-tasks (the 2.x client has no tasks support of its own): npm.
set -euo pipefail

TS_SDK1_VERSION=1.32.2
PY_MCP_VERSION=2.3.0
FASTMCP_VERSION=4.1.4      # fastmcp-tasks and fastmcp are released in lockstep
TS_CLIENT2_VERSION=2.4.0
TS_EXT_TASKS_VERSION=0.2.2

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

# --- fastmcp-tasks (Python) -----------------------------------------------------------------
fm="$peers/py-fastmcp"
have="$([ -x "$fm/bin/python" ] && "$fm/bin/python" -c 'import importlib.metadata as m; print(m.version("fastmcp-tasks"), m.version("fastmcp"))' 2>/dev/null || true)"
if [ "$have" = "$FASTMCP_VERSION $FASTMCP_VERSION" ]; then
  echo "install-peers: fastmcp-tasks==$FASTMCP_VERSION up to date"
else
  echo "install-peers: installing fastmcp-tasks==$FASTMCP_VERSION fastmcp==$FASTMCP_VERSION into $fm"
  rm -rf "$fm"
  python3 -m venv "$fm"
  "$fm/bin/pip" install --quiet --disable-pip-version-check \
    "fastmcp-tasks==$FASTMCP_VERSION" "fastmcp==$FASTMCP_VERSION"
fi

# --- @modelcontextprotocol/client (TypeScript, 2.x) + @modelcontextprotocol/ext-tasks --------
ts2="$peers/ts-client2"
ts2_mods="$ts2/node_modules/@modelcontextprotocol"
have="$( { [ -f "$ts2_mods/client/package.json" ] && [ -f "$ts2_mods/ext-tasks/package.json" ] &&
  "$node22" -p 'process.argv.slice(1).map((p) => require(p).version).join(" ")' \
    "$ts2_mods/client/package.json" "$ts2_mods/ext-tasks/package.json"; } 2>/dev/null || true)"
if [ "$have" = "$TS_CLIENT2_VERSION $TS_EXT_TASKS_VERSION" ]; then
  echo "install-peers: @modelcontextprotocol/client@$TS_CLIENT2_VERSION + ext-tasks@$TS_EXT_TASKS_VERSION up to date"
else
  command -v npm >/dev/null 2>&1 || { echo "install-peers: npm is required" >&2; exit 1; }
  echo "install-peers: installing @modelcontextprotocol/client@$TS_CLIENT2_VERSION + ext-tasks@$TS_EXT_TASKS_VERSION into $ts2"
  rm -rf "$ts2"
  mkdir -p "$ts2"
  cat >"$ts2/package.json" <<JSON
{
  "name": "mcp-tasks-peer-ts-client2",
  "private": true,
  "description": "Pinned peer for scripts/peers.sh; installed by scripts/install-peers.sh",
  "dependencies": {
    "@modelcontextprotocol/client": "$TS_CLIENT2_VERSION",
    "@modelcontextprotocol/ext-tasks": "$TS_EXT_TASKS_VERSION"
  }
}
JSON
  npm install --prefix "$ts2" --no-package-lock --no-audit --no-fund --loglevel=error
fi
