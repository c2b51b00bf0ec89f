#!/usr/bin/env bash
# Drives a freshly built `mcp-tasks serve` (built-in tools, throwaway data dir, free localhost
# port) with the pinned official SDK clients (scripts/install-peers.sh). Any failed check fails.
#   bash scripts/peers.sh                 # every peer
#   PEERS="ts-sdk1" bash scripts/peers.sh # some peers (ts-sdk1, py-mcp2, py-fastmcp, ts-client2)
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
die() { echo "peers: $*" >&2; exit 1; }

bash scripts/install-peers.sh || die "installing the peers failed"
cargo build -p mcp-tasks || die "cargo build -p mcp-tasks failed"
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
bin="$target_dir/debug/mcp-tasks"

data_dir="$(mktemp -d "${TMPDIR:-/tmp}/mcp-tasks-peers-data.XXXXXX")"
server_log="$(mktemp "${TMPDIR:-/tmp}/mcp-tasks-peers-server.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$data_dir"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
url="http://127.0.0.1:$port/mcp"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$data_dir" >"$server_log" 2>&1 &
server_pid=$!
deadline=$((SECONDS + 30))
until timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; do
  kill -0 "$server_pid" 2>/dev/null || { tail -n 50 "$server_log"; die "server exited"; }
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 50 "$server_log"; die "server did not listen"; }
  sleep 0.2
done
echo "peers: server pid $server_pid at $url"

# Each peer prints one line per check ("ok   ..." or "FAIL ..."); they are counted for the summary.
peer_cmd() {
  case "$1" in
    ts-sdk1) echo .tools/bin/node22 tests/peers/ts-sdk1-legacy.mjs \
      .tools/peers/ts-sdk1/node_modules/@modelcontextprotocol/sdk "$url" ;;
    py-mcp2) echo .tools/peers/py-mcp2/bin/python tests/peers/py-mcp2-modern.py "$url" ;;
    py-fastmcp) echo .tools/peers/py-fastmcp/bin/python tests/peers/py-fastmcp-tasks.py "$url" ;;
    ts-client2) echo .tools/bin/node22 tests/peers/ts-client2-modern.mjs .tools/peers/ts-client2/node_modules "$url" ;;
    *) return 1 ;;
  esac
}
failed=()
summary=()
total_ok=0
total_fail=0
peer_log="$(mktemp "${TMPDIR:-/tmp}/mcp-tasks-peers-out.XXXXXX")"
for peer in ${PEERS:-ts-sdk1 py-mcp2 py-fastmcp ts-client2}; do
  echo "--- peer $peer"
  if ! cmd="$(peer_cmd "$peer")"; then
    echo "peers: unknown peer $peer"
    failed+=("$peer")
    total_fail=$((total_fail + 1))
    summary+=("$(printf '%-11s FAILED: unknown peer' "$peer")")
    continue
  fi
  # shellcheck disable=SC2086  # the command line is built above from fixed words and the URL
  timeout 180 $cmd 2>&1 | tee "$peer_log"
  rc=${PIPESTATUS[0]}
  ok=$(grep -c '^ok ' "$peer_log")
  bad=$(grep -c '^FAIL ' "$peer_log")
  total_ok=$((total_ok + ok))
  total_fail=$((total_fail + bad))
  if [ "$rc" -ne 0 ]; then
    failed+=("$peer")
    [ "$bad" -gt 0 ] || total_fail=$((total_fail + 1)) # crashed or timed out: count it once
    summary+=("$(printf '%-11s FAILED (exit %s): %s ok, %s failed' "$peer" "$rc" "$ok" "$bad")")
  else
    summary+=("$(printf '%-11s passed: %s checks ok' "$peer" "$ok")")
  fi
done
rm -f "$peer_log"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "--- server log (last 50 lines) ---"
  tail -n 50 "$server_log"
fi
rm -f "$server_log"
echo "--- peers summary"
for line in "${summary[@]}"; do echo "  $line"; done
echo "peers: $total_ok passed, $total_fail failed"
[ "${#failed[@]}" -eq 0 ] || die "failed: ${failed[*]}"
echo "peers: all passed"
