#!/usr/bin/env bash
# Side-by-side benchmark: mcp-tasks (embedded) vs fastmcp-tasks 4.1.4 (Python reference).
#
#   bash bench/run.sh
#
# For each server, in one run on this machine (all traffic to 127.0.0.1 only):
#   1. tasks/get throughput: wrk, $CONNS connections, $DURATION s, on one completed `wait` task
#   2. drain: $N_TASKS `wait` tasks of $TASK_SECONDS s created at concurrency $CONNS, then
#      polled until all are completed (bounded by $DRAIN_TIMEOUT s)
#   3. peak RSS of the server process (VmHWM from /proc/PID/status, read before stopping it)
# Servers measured: "ours", "ref" (fastmcp-tasks defaults: worker concurrency 10) and, unless
# REF_TUNED_CONCURRENCY=0, "ref-cN" (the reference with its worker concurrency raised to N,
# default 10000 = mcp-tasks' own max_concurrent_jobs), so the drain ratio is not just a default.
# Raw output goes to bench/results/<timestamp>/; the summary table is printed at the end.
# Exit status: 0 if every measurement was valid, 1 if any run had errors.
set -euo pipefail

DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
WRK_THREADS=${WRK_THREADS:-2}
N_TASKS=${N_TASKS:-2500}
TASK_SECONDS=${TASK_SECONDS:-1}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-400}
POLL_PERIOD=${POLL_PERIOD:-1.0}
QUIET_MAX_BUSY=${QUIET_MAX_BUSY:-0.15}   # max machine CPU busy fraction before each server
QUIET_WAIT=${QUIET_WAIT:-180}            # at most this long (s) waiting for it
REF_TUNED_CONCURRENCY=${REF_TUNED_CONCURRENCY:-10000}
FASTMCP_VERSION=4.1.4

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
VENV=$BENCH_DIR/.venv
PY=$VENV/bin/python
RESULTS=$BENCH_DIR/results/$(date +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS"

die() { echo "bench: ERROR: $*" >&2; exit 1; }
log() { echo "bench: $*" >&2; }

# --- cleanup: stop every server we started, remove their temp dirs -------------------------
SERVER_PIDS=()
TMP_DIRS=()
cleanup() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then kill -INT "$pid" 2>/dev/null || true; fi
  done
  for pid in "${SERVER_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  local d
  for d in "${TMP_DIRS[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools -----------------------------------------------------------------------------------
if ! command -v wrk >/dev/null; then
  log "installing wrk (Debian package)"
  { apt-get update && apt-get install -y wrk; } >"$RESULTS/apt.log" 2>&1 \
    || die "could not install wrk; see $RESULTS/apt.log"
fi
if ! "$PY" -c "import fastmcp_tasks" 2>/dev/null \
   || [ "$("$PY" -c 'import importlib.metadata as m; print(m.version("fastmcp-tasks"), m.version("fastmcp"))')" != "$FASTMCP_VERSION $FASTMCP_VERSION" ]; then
  log "creating $VENV with fastmcp-tasks==$FASTMCP_VERSION"
  python3 -m venv "$VENV"
  "$PY" -m pip install -q "fastmcp-tasks==$FASTMCP_VERSION" "fastmcp==$FASTMCP_VERSION" \
    >"$RESULTS/pip.log" 2>&1 || die "pip install failed; see $RESULTS/pip.log"
fi
log "building mcp-tasks (release)"
(cd "$ROOT" && cargo build --release -p mcp-tasks) >"$RESULTS/cargo-build.log" 2>&1 \
  || die "cargo build failed; see $RESULTS/cargo-build.log"
OURS_BIN=$ROOT/target/release/mcp-tasks
[ -x "$OURS_BIN" ] || die "missing $OURS_BIN"

# Server CPU time (user+sys, all threads) in seconds.
cpu_secs() {
  local hz; hz=$(getconf CLK_TCK)
  sed 's/.*) //' /proc/"$1"/stat | awk -v hz="$hz" '{printf "%.2f", ($12+$13)/hz}'
}

# Other work on this 2-core machine skews everything: wait (bounded) until it is quiet.
wait_quiet() {
  "$PY" - "$QUIET_MAX_BUSY" "$QUIET_WAIT" <<'PYEOF' >&2 || true
import sys, time
max_busy, wait_s = float(sys.argv[1]), float(sys.argv[2])
def snap():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]
deadline = time.monotonic() + wait_s
while True:
    t0, i0 = snap(); time.sleep(2); t1, i1 = snap()
    busy = 1 - (i1 - i0) / max(1, t1 - t0)
    if busy <= max_busy:
        print(f"bench: machine quiet ({busy:.0%} busy)"); break
    if time.monotonic() > deadline:
        print(f"bench: WARNING: machine still {busy:.0%} busy after {wait_s:.0f}s; figures are skewed"); break
    print(f"bench: waiting for a quiet machine ({busy:.0%} busy)")
PYEOF
}

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

{
  echo "date: $(date -Is)"
  echo "host: $(uname -srm), nproc=$(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "mcp-tasks: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet 2>/dev/null || echo ' (dirty tree)')"
  echo "python: $("$PY" --version 2>&1); $("$PY" -m pip list 2>/dev/null | grep -iE '^(fastmcp|fastmcp-tasks|mcp|pydocket|uvicorn) ' | tr -s ' ' | paste -sd, -)"
  echo "wrk: $(wrk -v 2>&1 | head -1)"
  echo "params: QUIET_MAX_BUSY=$QUIET_MAX_BUSY QUIET_WAIT=$QUIET_WAIT DURATION=$DURATION CONNS=$CONNS WRK_THREADS=$WRK_THREADS N_TASKS=$N_TASKS TASK_SECONDS=$TASK_SECONDS DRAIN_TIMEOUT=$DRAIN_TIMEOUT POLL_PERIOD=$POLL_PERIOD REF_TUNED_CONCURRENCY=$REF_TUNED_CONCURRENCY"
  echo "loadavg at start: $(cat /proc/loadavg)"
} >"$RESULTS/env.txt"
cat "$RESULTS/env.txt" >&2

# --- one server: start, measure, read RSS, stop ---------------------------------------------
# bench_server NAME -- COMMAND... ; COMMAND gets the port in $PORT (exported before eval).
bench_server() {
  local name=$1; shift
  local out=$RESULTS/$name
  mkdir -p "$out"
  wait_quiet
  echo "$(cat /proc/loadavg)" >"$out/loadavg-start.txt"
  local port; port=$(free_port)
  local url=http://127.0.0.1:$port/mcp
  local cmd=${1//@PORT@/$port}
  log "[$name] starting: $cmd"
  echo "$cmd" >"$out/server-cmd.txt"
  # exec: $! is the server process itself (RSS is read from it).
  bash -c "exec $cmd" >"$out/server.stdout" 2>"$out/server.stderr" &
  local pid=$!
  SERVER_PIDS+=("$pid")
  "$PY" "$BENCH_DIR/mcpload.py" ready "$url" --timeout 60 \
    || { tail -20 "$out/server.stderr" >&2; die "[$name] server did not come up"; }
  kill -0 "$pid" 2>/dev/null || die "[$name] server exited"

  log "[$name] creating one 0.1 s wait task for tasks/get"
  local tid
  tid=$("$PY" "$BENCH_DIR/mcpload.py" create-one "$url" --seconds 0.1 --timeout 60) \
    || die "[$name] could not create/complete the probe task"
  echo "$tid" >"$out/probe-task-id.txt"

  local c0; c0=$(cpu_secs "$pid")
  local wrk_cmd="BENCH_TASK_ID=$tid wrk -t$WRK_THREADS -c$CONNS -d${DURATION}s --timeout 10s --latency -s $BENCH_DIR/tasks_get.lua $url"
  echo "$wrk_cmd" >"$out/wrk-cmd.txt"
  log "[$name] tasks/get throughput: $wrk_cmd"
  BENCH_TASK_ID=$tid wrk -t"$WRK_THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 10s --latency \
    -s "$BENCH_DIR/tasks_get.lua" "$url" >"$out/wrk.txt" 2>&1 || die "[$name] wrk failed; see $out/wrk.txt"
  grep '^WRK_JSON ' "$out/wrk.txt" | sed 's/^WRK_JSON //' >"$out/wrk.json" \
    || die "[$name] wrk printed no summary; see $out/wrk.txt"
  kill -0 "$pid" 2>/dev/null || die "[$name] server died during wrk"
  grep -E '^(VmRSS|VmHWM)' /proc/"$pid"/status >"$out/rss-after-wrk.txt"
  local c1; c1=$(cpu_secs "$pid")

  local drain_cmd="$PY $BENCH_DIR/mcpload.py drain $url --count $N_TASKS --seconds $TASK_SECONDS --concurrency $CONNS --timeout $DRAIN_TIMEOUT --poll-period $POLL_PERIOD --out $out/drain.json"
  echo "$drain_cmd" >"$out/drain-cmd.txt"
  log "[$name] drain: $N_TASKS x ${TASK_SECONDS}s tasks (timeout ${DRAIN_TIMEOUT}s)"
  local rc=0
  $drain_cmd >"$out/drain.txt" 2>&1 || rc=$?
  [ -s "$out/drain.json" ] || die "[$name] drain produced no report (rc=$rc); see $out/drain.txt"
  [ "$rc" -eq 0 ] || log "[$name] drain incomplete or had errors (rc=$rc); see $out/drain.json"

  kill -0 "$pid" 2>/dev/null || die "[$name] server died during drain"
  grep -E '^(VmRSS|VmHWM)' /proc/"$pid"/status >"$out/rss-end.txt"
  local c2; c2=$(cpu_secs "$pid")
  printf '{"wrk_cpu_s": %s, "drain_cpu_s": %s, "total_cpu_s": %s}\n' \
    "$(awk -v a="$c0" -v b="$c1" 'BEGIN{printf "%.2f", b-a}')" \
    "$(awk -v a="$c1" -v b="$c2" 'BEGIN{printf "%.2f", b-a}')" "$c2" >"$out/cpu.json"
  echo "$(cat /proc/loadavg)" >"$out/loadavg-end.txt"
  log "[$name] $(tr '\n' ' ' <"$out/rss-end.txt")"
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

OURS_DATA=$(mktemp -d /tmp/mcp-tasks-bench.XXXXXX); TMP_DIRS+=("$OURS_DATA")
bench_server ours "$OURS_BIN serve --listen 127.0.0.1:@PORT@ --data-dir $OURS_DATA"
bench_server ref "$PY $BENCH_DIR/reference_server.py --port @PORT@"
VARIANTS=(ours ref)
if [ "$REF_TUNED_CONCURRENCY" != 0 ]; then
  bench_server "ref-c$REF_TUNED_CONCURRENCY" \
    "$PY $BENCH_DIR/reference_server.py --port @PORT@ --concurrency $REF_TUNED_CONCURRENCY"
  VARIANTS+=("ref-c$REF_TUNED_CONCURRENCY")
fi

"$PY" "$BENCH_DIR/summarize.py" "$RESULTS" "${VARIANTS[@]}" | tee "$RESULTS/summary.txt"
