#!/usr/bin/env bash
# Task creation beside its ceiling (issue 36): creations per second of `mcp-tasks serve` over
# HTTP (`tools/call` of `wait` 0 s with the tasks extension, bench/tasks_create.lua: each
# request creates a task durably, enqueues it, and the job leases, runs and completes it)
# beside the embedded store alone doing the same durable commits through the same group
# commit (functions/local/examples/store_ceiling.rs: the creation awaited, the lease and the
# end written in the background as the worker does; no HTTP, no engine, no queue).
#
#   bash bench/create_ceiling.sh        # ROUNDS=3 DURATION=10 CONNS="1 16"
#
# CONNS lists the concurrencies: wrk connections for the server, writer loops for the store.
# ROUNDS interleaved rounds (per concurrency: store, server, bare store creations); every run
# starts from an empty data directory under DATA_ROOT (default: a fresh directory in
# ${TMPDIR:-/tmp}), the same filesystem for all. The server runs with the creation quotas off
# (--create-per-second 0 --max-active-tasks 1000000) and no metrics listener. The server and
# the store run pinned to SERVER_CPU (default 1), wrk to WRK_CPU (default 0), as
# bench/hotpath.sh does; PIN=0 pins nothing. Medians, their ratio (creation / ceiling) and
# the exact commands are printed. OURS_BIN=/path/to/mcp-tasks measures that build instead of
# this tree's (a before/after comparison: one run per build). Only 127.0.0.1.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNS=${CONNS:-1 16}
SERVER_CPU=${SERVER_CPU:-1}
WRK_CPU=${WRK_CPU:-0}
PIN=${PIN:-1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS=bench/results/create-ceiling-$(date +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS"
log() { echo "create_ceiling: $*" >&2; }
die() { echo "create_ceiling: ERROR: $*" >&2; exit 1; }

command -v wrk >/dev/null || die "no wrk (apt-get install wrk)"
if [ "$PIN" = 1 ]; then
  command -v taskset >/dev/null || die "no taskset (util-linux); PIN=0 runs unpinned"
  ON_SERVER=(taskset -c "$SERVER_CPU")
  ON_WRK=(taskset -c "$WRK_CPU")
else
  ON_SERVER=()
  ON_WRK=()
fi

log "building (release): mcp-tasks and the store_ceiling example"
cargo build -q --release -p mcp-tasks --bin mcp-tasks --example store_ceiling
target=${CARGO_TARGET_DIR:-target}
DATA_ROOT=${DATA_ROOT:-$(mktemp -d "${TMPDIR:-/tmp}/create-ceiling.XXXXXX")}
mkdir -p "$DATA_ROOT/bin"
# Copies: a shared target directory may be rebuilt by someone else while this runs.
cp "${OURS_BIN:-$target/release/mcp-tasks}" "$DATA_ROOT/bin/mcp-tasks"
cp "$target/release/examples/store_ceiling" "$DATA_ROOT/bin/store_ceiling"
OURS=$DATA_ROOT/bin/mcp-tasks
CEIL=$DATA_ROOT/bin/store_ceiling
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$DATA_ROOT"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; die "nothing listens on $1"; }

{
  echo "date: $(date -Is); host: $(uname -srm), nproc=$(nproc); loadavg: $(cat /proc/loadavg)"
  echo "data filesystem: $(df -T "$DATA_ROOT" | awk 'NR==2 {print $1, $2}') ($DATA_ROOT)"
  echo "store:  $([ "$PIN" = 1 ] && echo "taskset -c $SERVER_CPU ")$CEIL DIR CONNS $DURATION [create-only]"
  echo "server: $([ "$PIN" = 1 ] && echo "taskset -c $SERVER_CPU ")$OURS serve --listen 127.0.0.1:PORT --data-dir DIR --create-per-second 0 --max-active-tasks 1000000 --metrics-listen off"
  echo "load:   $([ "$PIN" = 1 ] && echo "taskset -c $WRK_CPU ")wrk -t1 -cCONNS -d${DURATION}s --latency -s bench/tasks_create.lua http://127.0.0.1:PORT/mcp"
} | tee "$RESULTS/commands.txt" >&2

# One run of the store alone; its JSON line appended to NAME-CONNS.jsonl.
store() { # name conns round [create-only]
  local dir=$DATA_ROOT/$1-$2-$3
  "${ON_SERVER[@]}" "$CEIL" "$dir" "$2" "$DURATION" ${4:-} >"$RESULTS/$1-$2-$3.txt" 2>&1 \
    || die "store_ceiling failed: $RESULTS/$1-$2-$3.txt"
  grep '^STORE_CEILING ' "$RESULTS/$1-$2-$3.txt" | sed 's/^STORE_CEILING //' >>"$RESULTS/$1-$2.jsonl"
  rm -rf "$dir"
}

# One run of a fresh server under wrk; wrk's JSON line appended to ours-CONNS.jsonl.
server() { # conns round
  local dir=$DATA_ROOT/ours-$1-$2 port
  port=$(free_port)
  "${ON_SERVER[@]}" "$OURS" serve --listen "127.0.0.1:$port" --data-dir "$dir" --create-per-second 0 \
    --max-active-tasks 1000000 --metrics-listen off >"$RESULTS/server-$1-$2.log" 2>&1 &
  SERVER_PID=$!
  wait_port "$port"
  "${ON_WRK[@]}" wrk -t1 -c"$1" -d"${DURATION}s" --timeout 10s --latency -s bench/tasks_create.lua \
    "http://127.0.0.1:$port/mcp" >"$RESULTS/ours-$1-$2.txt" 2>&1 || die "wrk failed: $RESULTS/ours-$1-$2.txt"
  grep '^WRK_JSON ' "$RESULTS/ours-$1-$2.txt" | sed 's/^WRK_JSON //' >>"$RESULTS/ours-$1.jsonl"
  kill -INT "$SERVER_PID" 2>/dev/null || true   # the server itself: taskset execs it
  for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  rm -rf "$dir"
}

for r in $(seq "$ROUNDS"); do
  for c in $CONNS; do
    log "round $r/$ROUNDS, $c at once: store, server, bare store creations"
    store ceiling "$c" "$r"
    server "$c" "$r"
    store create-only "$c" "$r" create-only
  done
done

python3 - "$RESULTS" "$CONNS" <<'PY'
import json, statistics, sys
d, conns = sys.argv[1], sys.argv[2].split()
def load(n): return [json.loads(l) for l in open(f"{d}/{n}.jsonl")]
print("task creations per second, medians of %s interleaved rounds (each round's figure in brackets)"
      % len(load(f"ours-{conns[0]}")))
print(f"{'at once':>7} {'server':>10} {'store (same commits)':>21} {'ratio':>6} {'store creates only':>19} {'server p99':>11}")
print("(ratio: server / store, of the medians; the disk's fsync time swings between rounds on a\n"
      " shared machine, so each round's own ratio, server beside the store just before it, follows)")
for c in conns:
    ours, ceil, bare = load(f"ours-{c}"), load(f"ceiling-{c}"), load(f"create-only-{c}")
    bad = sum(r["bad"] + r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"] for r in ours)
    if bad:
        sys.exit(f"create_ceiling: the server had {bad} bad answers or errors at {c}: {ours}")
    o = statistics.median(r["rps"] for r in ours)
    s = statistics.median(r["per_s"] for r in ceil)
    b = statistics.median(r["per_s"] for r in bare)
    p99 = statistics.median(r["p99_ms"] for r in ours)
    print(f"{c:>7} {o:>10.0f} {s:>21.0f} {o / s:>5.2f}x {b:>19.0f} {p99:>8.2f} ms")
    print(f"{'':>7} [{', '.join('%.0f' % r['rps'] for r in ours)}] "
          f"[{', '.join('%.0f' % r['per_s'] for r in ceil)}] [{', '.join('%.0f' % r['per_s'] for r in bare)}]")
    paired = [o["rps"] / s["per_s"] for o, s in zip(ours, ceil)]
    print(f"{'':>7} each round's ratio: {', '.join('%.2f' % x for x in paired)} "
          f"(median {statistics.median(paired):.2f}x)")
PY
log "raw output in $RESULTS"
