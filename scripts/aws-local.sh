#!/usr/bin/env bash
# The serverless system on this machine — no AWS account, no Docker — in one command:
#   1. moto (DynamoDB and SQS) on 127.0.0.1           (scripts/aws-emulator.sh)
#   2. the table, the queue and its dead-letter queue as template.yaml deploys them (the
#      5400 s visibility timeout, redrive after MAX_RECEIVES=5), made by our own code
#      (mcp-tasks-aws-dev setup): a message the worker fails comes back after 90 minutes, as
#      on AWS (VISIBILITY=60 scripts/aws-local.sh to see retries sooner)
#   3. the Lambda functions under `cargo lambda watch` (cargo-lambda from PyPI, pinned) on
#      127.0.0.1 only
#   4. the SQS event source mapping, played by `mcp-tasks-aws-dev esm`: it long-polls the queue,
#      invokes the worker with SQS batch events and deletes what the worker did not report as
#      failed
# It prints the MCP endpoint URL and the `claude mcp add` line; Ctrl-C stops everything.
#
#   scripts/aws-local.sh                 # invoke port 9000; functions reload on code changes
#   PORT=9100 RELOAD=0 scripts/aws-local.sh
#
# LocalStack users: skip this script, set AWS_ENDPOINT_URL to LocalStack and run the same
# `mcp-tasks-aws-dev setup` and `cargo lambda watch --env-file` steps.
set -euo pipefail

CARGO_LAMBDA_VERSION=1.9.2
PORT=${PORT:-9000}
RELOAD=${RELOAD:-1}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools="$root/.tools/cargo-lambda"

# shellcheck source=lib/pyvenv.sh
. scripts/lib/pyvenv.sh
ensure_pyvenv "$tools/venv" cargo-lambda "$CARGO_LAMBDA_VERSION"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash scripts/aws-emulator.sh stop || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bash scripts/aws-emulator.sh start
endpoint="$(cat .tools/moto/endpoint)"
export AWS_ENDPOINT_URL="$endpoint" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test

cargo build -q -p mcp-tasks-aws-dev
dev="${CARGO_TARGET_DIR:-target}/debug/mcp-tasks-aws-dev"
env_file="$tools/lambda.env"
{
  "$dev" setup --visibility-timeout "${VISIBILITY:-5400}" --max-receives 5
  echo "AWS_ENDPOINT_URL=$endpoint"
  echo "AWS_REGION=us-east-1"
  echo "AWS_ACCESS_KEY_ID=test"
  echo "AWS_SECRET_ACCESS_KEY=test"
  echo "STATE_KEY=local-development-only-state-key-0123456789"
  # Local only: no tokens (the functions refuse to start without this or jwt settings).
  echo "AUTH_MODE=none"
} > "$env_file"
queue_url="$(grep '^QUEUE_URL=' "$env_file" | cut -d= -f2-)"

watch_flags=(--invoke-address 127.0.0.1 --invoke-port "$PORT" --env-file "$env_file")
[ "$RELOAD" = 1 ] || watch_flags+=(--ignore-changes)
"$tools/venv/bin/cargo-lambda" lambda watch "${watch_flags[@]}" &
pids+=($!)
"$dev" esm --queue-url "$queue_url" \
  --invoke "http://127.0.0.1:$PORT/2015-03-31/functions/worker/invocations" &
pids+=($!)

url="http://127.0.0.1:$PORT/lambda-url/mcp/mcp"
echo
echo "mcp-tasks (Lambda functions on the emulator) at $url"
echo "Add it to Claude Code with:"
echo "  claude mcp add --transport http mcp-tasks-aws $url"
echo "(the first request compiles the functions; Ctrl-C stops everything)"
wait
