#!/usr/bin/env bash
# The long versions of the fault-injection suites (tests/faults.rs) against the real binary
# built with the test-only `fault-injection` feature, on 127.0.0.1 only:
#   - SOAK_KILL_CYCLES random kill -9/restart cycles, SOAK_KILL_TASKS new hash_chain tasks each
#     (kill moments: SOAK_KILL_MIN_MS..SOAK_KILL_MAX_MS after each start);
#   - SOAK_CRASH_ROUNDS batches of SOAK_CRASH_TASKS tasks under `crash-after-checkpoints`
#     (the server aborts right after a checkpoint write and is restarted until all finish);
#   - 2 x SOAK_DUP_TASKS tasks with every work message delivered twice (at once, then late
#     across a kill);
#   - SOAK_CANCEL_TRIALS cancel-vs-complete races, SOAK_CANCEL_PARALLEL at a time.
# The whole run is bounded by SOAK_TIMEOUT seconds (the build is not counted). Prints one
# FIGURES line per suite and a final `soak: trials=… lost=… doubled=…`; exits non-zero on
# any lost or doubled task, a failed suite, or a timeout. FAULTS_SEED replays a run.
#
#   bash scripts/soak.sh                       # defaults: a few minutes
#   SOAK_KILL_CYCLES=200 SOAK_CANCEL_TRIALS=2000 SOAK_TIMEOUT=7200 bash scripts/soak.sh
#   SOAK_RELEASE=1 bash scripts/soak.sh        # the server built with the release profile
set -euo pipefail

cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

export FAULTS_KILL_CYCLES="${SOAK_KILL_CYCLES:-25}"
export FAULTS_KILL_TASKS="${SOAK_KILL_TASKS:-2}"
# Each kill lands SOAK_KILL_MIN_MS..SOAK_KILL_MAX_MS after the start. Kills much more frequent
# than the jobs' progress (a 200k-round step, then >= 1 s to the next checkpoint) let the
# backlog grow: runs die before saving anything.
export FAULTS_KILL_MIN_MS="${SOAK_KILL_MIN_MS:-2500}"
export FAULTS_KILL_MAX_MS="${SOAK_KILL_MAX_MS:-5000}"
export FAULTS_CRASH_ROUNDS="${SOAK_CRASH_ROUNDS:-4}"
export FAULTS_CRASH_TASKS="${SOAK_CRASH_TASKS:-3}"
export FAULTS_DUP_TASKS="${SOAK_DUP_TASKS:-30}"
export FAULTS_CANCEL_TRIALS="${SOAK_CANCEL_TRIALS:-300}"
export FAULTS_CANCEL_PARALLEL="${SOAK_CANCEL_PARALLEL:-10}"
timeout_s="${SOAK_TIMEOUT:-1800}"

cargo=(cargo test -p mcp-tasks --features fault-injection --test faults)
# The release profile (lto, one codegen unit) changes timing and inlining, not the logic:
# worth a run before a release.
# Its hashing is also much faster, so the kill and crash-point jobs are made longer (in steps
# of the same pace) for the kills and crash points to land inside them.
if [[ "${SOAK_RELEASE:-0}" = 1 ]]; then
  cargo+=(--release)
  export FAULTS_STEPS_SCALE="${SOAK_STEPS_SCALE:-4}"
fi
echo "==> building (${cargo[*]} --no-run)"
"${cargo[@]}" --no-run --quiet

# The test binary and the server under test, copied out of target/ so that a concurrent
# cargo build (of other features) cannot swap them during a long run.
work="$(mktemp -d -t soak.XXXXXX)"
trap 'rm -rf "$work"' EXIT
artifacts="$("${cargo[@]}" --no-run --message-format=json 2>/dev/null)"
test_bin="$(sed -n 's/.*"executable":"\([^"]*\/faults-[^"]*\)".*/\1/p' <<<"$artifacts" | tail -1)"
server_bin="$(sed -n 's/.*"executable":"\([^"]*\/mcp-tasks\)".*/\1/p' <<<"$artifacts" | tail -1)"
if [[ ! -x "$test_bin" || ! -x "$server_bin" ]]; then
  echo "soak: cannot find the built binaries" >&2
  exit 1
fi
cp "$test_bin" "$work/faults"
cp "$server_bin" "$work/mcp-tasks"
export MCP_TASKS_BIN="$work/mcp-tasks"
log="$work/log"
echo "==> soak: kill_cycles=$FAULTS_KILL_CYCLES x $FAULTS_KILL_TASKS tasks," \
  "crash_rounds=$FAULTS_CRASH_ROUNDS x $FAULTS_CRASH_TASKS tasks," \
  "dup_tasks=2 x $FAULTS_DUP_TASKS, cancel_trials=$FAULTS_CANCEL_TRIALS, timeout=${timeout_s}s"
start=$(date +%s)
set +e
# timeout signals the whole process group: the test binary and every server it started.
timeout --kill-after=30 "$timeout_s" "$work/faults" --nocapture --test-threads=1 2>&1 \
  | tee "$log" | grep --line-buffered -E '^(FIGURES|test |LOST|DOUBLED|CHANGED|UNLOGGED|[a-z_]+: FAULTS_SEED)'
status=${PIPESTATUS[0]}
set -e
elapsed=$(($(date +%s) - start))

summary="$(awk '
  /^FIGURES / {
    n++
    for (i = 2; i <= NF; i++) {
      split($i, kv, "=")
      if (kv[1] == "test") t = kv[2]
      if (kv[1] == "trials") tr[t] = kv[2]
      if (kv[1] == "tasks") tasks += kv[2]
      if (kv[1] == "lost") lost += kv[2]
      if (kv[1] == "doubled") doubled += kv[2]
    }
    trials += tr[t]
    parts = parts sprintf(" %s=%s", t, tr[t])
  }
  END {
    printf "%d trials=%d (%s) tasks=%d lost=%d doubled=%d", n, trials, substr(parts, 2), tasks, lost, doubled
  }' "$log")"
read -r suites rest <<<"$summary"
echo "soak: $rest elapsed=${elapsed}s"

if [[ "$status" -ne 0 ]]; then
  echo "soak: FAILED (test exit $status$([[ $status -ge 124 ]] && echo ', timed out'))" >&2
  grep -E 'panicked|LOST|DOUBLED|CHANGED|UNLOGGED' "$log" | head -20 >&2 || true
  exit 1
fi
if [[ "$suites" -ne 4 ]]; then
  echo "soak: FAILED (only $suites of 4 suites reported figures)" >&2
  exit 1
fi
if [[ "$rest" != *" lost=0 doubled=0" ]]; then
  echo "soak: FAILED (lost or doubled tasks)" >&2
  exit 1
fi
