#!/usr/bin/env bash
# The hot path against its ceiling (issue 14): `tasks/get` on the embedded server vs a bare
# hyper server (functions/local/examples/bare_hyper.rs) that answers the same bytes and does
# nothing else, measured in the same run on this machine; then task creation the same way
# (`tools/call` of `wait` 0 s with the tasks extension, bench/tasks_create.lua: every request
# creates, stores and enqueues a task, which completes at once, on a second server started
# with the creation quota off; its ceiling answers a creation's bytes). PHASES="get create"
# (the default) chooses which.
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
PHASES=${PHASES:-get create}
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

# Creation: a server of its own (the tasks it creates stay out of the tasks/get server's
# store), the per-tenant creation rate and active-task quotas off, and the exact answer it
# gives to one creation for its ceiling.
if [[ " $PHASES " == *" create "* ]]; then
  create_port=$(free_port)
  taskset -c "$SERVER_CPU" "$OURS" serve --listen "127.0.0.1:$create_port" --data-dir "$TMP/data-create" \
    --create-per-second 0 --max-active-tasks 1000000 >"$RESULTS/ours-create.log" 2>&1 &
  PIDS+=($!)
  wait_port "$create_port"
  python3 - "http://127.0.0.1:$create_port/mcp" >"$TMP/create.json" <<'PY'
import json, sys, urllib.request
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
req = urllib.request.Request(sys.argv[1], data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
    "params": {"name": "wait", "arguments": {"seconds": 0}, "_meta": meta}}).encode(), headers={
    "content-type": "application/json", "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "wait"})
answer = urllib.request.urlopen(req).read().decode()
if '"resultType":"task"' not in answer:
    sys.exit(f"hotpath: a creation did not answer a task handle: {answer[:300]}")
sys.stdout.write(answer)
PY
  cp "$TMP/create.json" "$RESULTS/tools-call-answer.json"
  ceil_create_port=$(free_port)
  taskset -c "$SERVER_CPU" "$CEIL" "127.0.0.1:$ceil_create_port" "$TMP/create.json" >"$RESULTS/ceiling-create.log" 2>&1 &
  PIDS+=($!)
  wait_port "$ceil_create_port"
fi

run() { # name port round script
  local out="$RESULTS/$1-$3.txt"
  BENCH_TASK_ID=$tid taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" --timeout 10s --latency \
    -s "$4" "http://127.0.0.1:$2/mcp" >"$out" 2>&1 || die "wrk failed: $out"
  grep '^WRK_JSON ' "$out" | sed 's/^WRK_JSON //' >>"$RESULTS/$1.jsonl"
}
{
  echo "taskset -c $SERVER_CPU <server>; BENCH_TASK_ID=$tid taskset -c $WRK_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency -s bench/tasks_get.lua URL"
  echo "taskset -c $SERVER_CPU <server --create-per-second 0 --max-active-tasks 1000000>; taskset -c $WRK_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency -s bench/tasks_create.lua URL"
} >"$RESULTS/commands.txt"
for r in $(seq "$ROUNDS"); do
  log "round $r/$ROUNDS"
  if [[ " $PHASES " == *" get "* ]]; then
    run ours "$ours_port" "$r" bench/tasks_get.lua
    run ceiling "$ceil_port" "$r" bench/tasks_get.lua
  fi
  if [[ " $PHASES " == *" create "* ]]; then
    run ours-create "$create_port" "$r" bench/tasks_create.lua
    run ceiling-create "$ceil_create_port" "$r" bench/tasks_create.lua
  fi
done

python3 - "$RESULTS" "$PHASES" <<'PY'
import json, statistics, sys
d, phases = sys.argv[1], sys.argv[2].split()
def load(n): return [json.loads(l) for l in open(f"{d}/{n}.jsonl")]
med = lambda runs, k: statistics.median(r[k] for r in runs)
rounds = lambda runs: ", ".join("%.0f" % r["rps"] for r in runs)
for phase, title, suffix in (("get", "tasks/get", ""), ("create", "tools/call creating a task", "-create")):
    if phase not in phases:
        continue
    ours, ceil = load("ours" + suffix), load("ceiling" + suffix)
    for name, runs in (("ours", ours), ("ceiling", ceil)):
        bad = sum(r["bad"] + r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"] for r in runs)
        if bad:
            sys.exit(f"hotpath: {title}: {name} had {bad} bad answers or errors: {runs}")
    o, c = med(ours, "rps"), med(ceil, "rps")
    print(f"{title}, {len(ours)} interleaved rounds, medians:")
    for name, runs in (("ours", ours), ("ceiling", ceil)):
        print("  %-8s %10.0f req/s  p50 %.2f ms  p99 %.2f ms  (rounds: %s)" % (
            name, med(runs, "rps"), med(runs, "p50_ms"), med(runs, "p99_ms"), rounds(runs)))
    print(f"  ratio    {o / c:.2f}x the bare-hyper ceiling")
PY
log "raw output in $RESULTS"
