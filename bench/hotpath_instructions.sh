#!/usr/bin/env bash
# The hot path against its ceiling, counted in instructions (issue 36): `tasks/get` on the
# embedded server vs the bare hyper server of bench/hotpath.sh (functions/local/examples/
# bare_hyper.rs, same runtime, answering the same bytes and doing nothing else), each run
# under valgrind's callgrind. Instructions per request do not swing with the machine's load
# the way CPU time does (bench/hotpath.sh, kept for a quiet machine's throughput and
# latency), so this one is repeatable on a busy, shared machine.
#
#   bash bench/hotpath_instructions.sh        # REQUESTS=2000 WARMUP=300 ROUNDS=3
#
# For each server: start it under callgrind, send WARMUP tasks/get over one keep-alive
# connection, zero the counters (callgrind_control -z), send REQUESTS more, dump; ROUNDS times
# (zero, requests, dump) on that connection (bench/hotpath_instructions.py). Prints the
# median instructions per request of ours and of the bare server and their ratio.
#   SKIP_BUILD=1          reuse the binaries already built
#   PROFILE=profiling     build a copy of the release profile that keeps its symbols (the
#                         same code): the dumps then read with
#                         callgrind_annotate --inclusive=yes bench/results/.../ours.cg.N
#   BASELINE_BIN=path     also measure that mcp-tasks binary (e.g. an older commit's build),
#                         in the same run, against the same bare server
# Needs valgrind (callgrind_control); only 127.0.0.1.
set -euo pipefail

REQUESTS=${REQUESTS:-2000}
WARMUP=${WARMUP:-300}
ROUNDS=${ROUNDS:-3}
PROFILE=${PROFILE:-release}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RESULTS=bench/results/hotpath-instructions-$(date +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS"
log() { echo "hotpath_instructions: $*" >&2; }
die() { echo "hotpath_instructions: ERROR: $*" >&2; exit 1; }

command -v valgrind >/dev/null || die "no valgrind (Debian package valgrind)"
command -v callgrind_control >/dev/null || die "no callgrind_control (Debian package valgrind)"

profile_args=(--release)
if [[ $PROFILE != release ]]; then
  profile_args=(--config "profile.$PROFILE.inherits=\"release\"" --config "profile.$PROFILE.strip=\"none\""
    --profile "$PROFILE")
fi
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  log "building ($PROFILE): mcp-tasks and the bare_hyper ceiling"
  cargo build -q "${profile_args[@]}" -p mcp-tasks --bin mcp-tasks --example bare_hyper
fi
target=${CARGO_TARGET_DIR:-target}/$PROFILE
OURS=$target/mcp-tasks
CEIL=$target/examples/bare_hyper
[[ -x $OURS && -x $CEIL ]] || die "no $OURS or $CEIL (build them, or unset SKIP_BUILD)"

PIDS=()
TMP=$(mktemp -d)
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 600); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.2; done; die "nothing listens on $1"; }
grind() { # name command...: runs it under callgrind in the background; sets PID
  local name=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$RESULTS/$name.cg" --dump-instr=no \
    "$@" >"$RESULTS/$name.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
}
measure() { # name port task_id pid
  python3 bench/hotpath_instructions.py measure "http://127.0.0.1:$2/mcp" "$3" --pid "$4" \
    --out "$RESULTS/$1.cg" --warmup "$WARMUP" --requests "$REQUESTS" --rounds "$ROUNDS" \
    >"$RESULTS/$1.json" || die "measuring $1 failed (see $RESULTS/$1.log)"
}
serve_ours() { # name binary: starts it, creates the probe task; sets PORT, PID, TID
  PORT=$(free_port)
  grind "$1" "$2" serve --listen "127.0.0.1:$PORT" --data-dir "$TMP/$1-data"
  wait_port "$PORT"
  TID=$(python3 bench/mcpload.py create-one "http://127.0.0.1:$PORT/mcp" --seconds 0.1 --timeout 300)
  log "$1: probe task $TID"
}

names=(ours)
serve_ours ours "$OURS"
measure ours "$PORT" "$TID" "$PID"
# The exact answer our server gives, for the bare server to send.
python3 bench/hotpath_instructions.py answer "http://127.0.0.1:$PORT/mcp" "$TID" >"$RESULTS/tasks-get-answer.json"
ours_tid=$TID
kill "$PID"

if [[ -n ${BASELINE_BIN:-} ]]; then
  names+=(baseline)
  serve_ours baseline "$BASELINE_BIN"
  measure baseline "$PORT" "$TID" "$PID"
  kill "$PID"
fi

names+=(bare)
PORT=$(free_port)
grind bare "$CEIL" "127.0.0.1:$PORT" "$RESULTS/tasks-get-answer.json"
wait_port "$PORT"
measure bare "$PORT" "$ours_tid" "$PID"

cat >"$RESULTS/commands.txt" <<EOF
valgrind --tool=callgrind --callgrind-out-file=NAME.cg --dump-instr=no <server>
python3 bench/hotpath_instructions.py measure URL TASK_ID --pid PID --out NAME.cg --warmup $WARMUP --requests $REQUESTS --rounds $ROUNDS
EOF
python3 - "$RESULTS" "${names[@]}" <<'PY'
import json, statistics, sys
d, names = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(f"{d}/{n}.json")) for n in names}
med = {n: statistics.median(r["per_request"] for r in rs) for n, rs in runs.items()}
print(f"tasks/get, instructions per request under callgrind (median of {len(runs['bare'])} rounds):")
for n in names:
    rounds = ", ".join("%.0f" % r["per_request"] for r in runs[n])
    ratio = "" if n == "bare" else "  %.2fx the bare server" % (med[n] / med["bare"])
    print("  %-9s %9.0f%s  (rounds: %s)" % (n, med[n], ratio, rounds))
PY
log "dumps and logs in $RESULTS"
