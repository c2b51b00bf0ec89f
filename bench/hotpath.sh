#!/usr/bin/env bash
# The hot path against its ceiling (issue 14): `tasks/get` on the embedded server vs a bare
# hyper server (functions/local/examples/bare_hyper.rs) that answers the same bytes and does
# nothing else, measured in the same run on this machine.
#
#   bash bench/hotpath.sh            # ROUNDS=3 DURATION=10 CONNS=64
#
# Each server runs pinned to one core (SERVER_CPU, default 1) and wrk to the other (WRK_CPU,
# default 0), one thread, CONNS connections; ROUNDS interleaved rounds (ours, ceiling, ours,
# ...); the medians and their ratio are printed, with the exact commands. Only 127.0.0.1.
# OURS_BIN=/path/to/mcp-tasks measures that binary instead of this tree's (a before/after
# comparison: run the script once per binary; each ratio is against the ceiling of its run).
# Needs wrk (Debian package `wrk`; installed here if missing and apt is usable) and taskset.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
SERVER_CPU=${SERVER_CPU:-1}
WRK_CPU=${WRK_CPU:-0}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS=bench/results/hotpath-$(date +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS"
log() { echo "hotpath: $*" >&2; }
die() { echo "hotpath: ERROR: $*" >&2; exit 1; }

command -v wrk >/dev/null || { log "installing wrk"; apt-get install -y wrk >"$RESULTS/apt.log" 2>&1 || die "no wrk (apt-get install wrk)"; }
command -v taskset >/dev/null || die "no taskset (util-linux)"

log "building (release): mcp-tasks and the bare_hyper ceiling"
cargo build -q --release -p mcp-tasks --bin mcp-tasks --example bare_hyper
target=${CARGO_TARGET_DIR:-target}
OURS=${OURS_BIN:-$target/release/mcp-tasks}   # OURS_BIN: another build to measure (e.g. an older commit's)
CEIL=$target/release/examples/bare_hyper

PIDS=()
TMP=$(mktemp -d)
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; die "nothing listens on $1"; }

ours_port=$(free_port)
taskset -c "$SERVER_CPU" "$OURS" serve --listen "127.0.0.1:$ours_port" --data-dir "$TMP/data" \
  >"$RESULTS/ours.log" 2>&1 &
PIDS+=($!)
wait_port "$ours_port"
url="http://127.0.0.1:$ours_port/mcp"
tid=$(python3 bench/mcpload.py create-one "$url" --seconds 0.1 --timeout 60)
log "probe task $tid"

# The exact answer our server gives, for the ceiling to send.
body=$(python3 - "$url" "$tid" <<'PY'
import json, sys, urllib.request
url, tid = sys.argv[1], sys.argv[2]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
req = urllib.request.Request(url, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
    "params": {"taskId": tid, "_meta": meta}}).encode(), headers={
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/get", "mcp-name": tid})
sys.stdout.write(urllib.request.urlopen(req).read().decode())
PY
)
printf '%s' "$body" >"$TMP/body.json"
cp "$TMP/body.json" "$RESULTS/tasks-get-answer.json"

ceil_port=$(free_port)
taskset -c "$SERVER_CPU" "$CEIL" "127.0.0.1:$ceil_port" "$TMP/body.json" >"$RESULTS/ceiling.log" 2>&1 &
PIDS+=($!)
wait_port "$ceil_port"

run() { # name port round
  local out="$RESULTS/$1-$3.txt"
  BENCH_TASK_ID=$tid taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --timeout 10s --latency \
    -s bench/tasks_get.lua "http://127.0.0.1:$2/mcp" >"$out" 2>&1 || die "wrk failed: $out"
  grep '^WRK_JSON ' "$out" | sed 's/^WRK_JSON //' >>"$RESULTS/$1.jsonl"
}
echo "taskset -c $SERVER_CPU <server>; BENCH_TASK_ID=$tid taskset -c $WRK_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency -s bench/tasks_get.lua URL" >"$RESULTS/commands.txt"
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS"
  run ours "$ours_port" "$r"
  run ceiling "$ceil_port" "$r"
done

python3 - "$RESULTS" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def load(n): return [json.loads(l) for l in open(f"{d}/{n}.jsonl")]
ours, ceil = load("ours"), load("ceiling")
for name, runs in (("ours", ours), ("ceiling", ceil)):
    bad = sum(r["bad"] + r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"] for r in runs)
    if bad:
        sys.exit(f"hotpath: {name} had {bad} bad answers or errors: {runs}")
med = lambda runs, k: statistics.median(r[k] for r in runs)
o, c = med(ours, "rps"), med(ceil, "rps")
print(f"tasks/get, {len(ours)} interleaved rounds, medians:")
rounds = lambda runs: ", ".join("%.0f" % r["rps"] for r in runs)
for name, runs in (("ours", ours), ("ceiling", ceil)):
    print("  %-8s %10.0f req/s  p50 %.2f ms  p99 %.2f ms  (rounds: %s)" % (
        name, med(runs, "rps"), med(runs, "p50_ms"), med(runs, "p99_ms"), rounds(runs)))
print(f"  ratio    {o / c:.2f}x the bare-hyper ceiling")
PY
log "raw output in $RESULTS"
