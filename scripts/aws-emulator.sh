#!/usr/bin/env bash
# The local AWS emulator of the tests and `cargo lambda watch`: moto's standalone server (PyPI
# `moto[server]`, pinned, Apache-2.0), installed into a venv under .tools/moto (gitignored),
# bound to 127.0.0.1 on a free port. One process serves both DynamoDB and SQS. No Docker, no
# AWS account.
#
#   scripts/aws-emulator.sh start   # idempotent; prints the endpoint, writes .tools/moto/{endpoint,pid}
#   scripts/aws-emulator.sh stop
#   E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E \
#     cargo test -p mcp-tasks-core --all-features
#
# DynamoDB: moto stores TTL attributes but never expires items; the engine treats expired
# tasks as absent on every read, so nothing here depends on DynamoDB deleting them. Amazon's
# DynamoDB Local (scripts/dynamodb-local.sh) is the real engine and does expire items, but its
# licence requires an AWS account in good standing, so the test command does not use it.
#
# Why moto: it is the long-standing, widely used AWS emulator on PyPI, speaks the AWS JSON
# protocol the current Rust SDK uses for SQS, and implements what the contract exercises
# (DelaySeconds, visibility, ReceiveMessage long polling). It runs as one small Python process.
set -euo pipefail

MOTO_VERSION=5.2.5

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/.tools/moto"
venv="$dir/venv"

# shellcheck source=lib/pyvenv.sh
. "$root/scripts/lib/pyvenv.sh"

install() {
  ensure_pyvenv "$venv" moto "$MOTO_VERSION" "moto[server]==$MOTO_VERSION"
}

running() {
  [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  install
  if running && [ -f "$dir/endpoint" ]; then
    cat "$dir/endpoint"
    return
  fi
  rm -f "$dir/pid" "$dir/endpoint"
  local port endpoint pid
  port="$(free_port)"
  endpoint="http://127.0.0.1:$port"
  # Detached from this shell, output to a log: the caller's pipes are not held open.
  setsid "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$dir/server.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 100); do
    if curl -fs -o /dev/null "$endpoint/moto-api/"; then
      echo "$endpoint" >"$dir/endpoint"
      echo "$endpoint"
      return
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      break
    fi
    sleep 0.2
  done
  echo "aws-emulator: moto did not start; see $dir/server.log" >&2
  tail -n 20 "$dir/server.log" >&2 || true
  kill "$pid" 2>/dev/null || true
  rm -f "$dir/pid"
  exit 1
}

stop() {
  if running; then
    local pid
    pid="$(cat "$dir/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    echo "aws-emulator: stopped (pid $pid)" >&2
  else
    echo "aws-emulator: not running" >&2
  fi
  rm -f "$dir/pid" "$dir/endpoint"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
