"""The client half of bench/hotpath_instructions.sh (stdlib only): drives one server running
under valgrind's callgrind over ONE keep-alive HTTP/1.1 connection and prints the
instructions the server executed per `tasks/get`.

    python3 bench/hotpath_instructions.py measure URL TASK_ID --pid PID --out PREFIX \
        [--warmup 300] [--requests 2000] [--rounds 3]

Warm-up requests first (connection set up, caches filled, lazy statics built), then
`callgrind_control -z PID` (counters zeroed), then --requests identical requests, then
`callgrind_control -d PID` (a dump, PREFIX.N), whose total instruction count (`Ir`) divided
by the requests made is the figure; --rounds times over (zero, requests, dump), on the same
connection. Callgrind takes a command only while the program runs,
so while `callgrind_control` waits, the client keeps sending requests ("nudges"); the
requests counted are the ones sent after the zeroing was acknowledged, up to and including
the one during which the dump was acknowledged: the count is off by at most a request at
each end (0.1 % at 2,000). Each answer is checked (200, the task completed, no error).

    python3 bench/hotpath_instructions.py answer URL TASK_ID   # prints the exact answer body
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import time

PROTOCOL = "2026-07-28"


def request_bytes(host: str, port: int, path: str, task_id: str) -> bytes:
    # The body and headers of bench/tasks_get.lua, byte for byte.
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' + task_id + '",'
        '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientCapabilities":{"extensions":'
        '{"io.modelcontextprotocol/tasks":{}}}}}}'
    ).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {PROTOCOL}\r\nMcp-Method: tasks/get\r\n"
        f"Mcp-Name: {task_id}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


class Conn:
    """One keep-alive connection sending the same request again and again."""

    def __init__(self, url: str, task_id: str):
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.rpartition(":")
        if host not in ("127.0.0.1", "localhost"):
            sys.exit(f"refusing non-loopback target {host!r}")
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.req = request_bytes(host, int(port), "/" + path, task_id)
        self.buf = b""

    def get(self) -> bytes:
        self.sock.sendall(self.req)
        while b"\r\n\r\n" not in self.buf:
            self._read()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ")[1]
        length = next(
            int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")
        )
        while len(self.buf) < length:
            self._read()
        body, self.buf = self.buf[:length], self.buf[length:]
        if status != "200" or b'"status":"completed"' not in body or b'"error":' in body:
            sys.exit(f"hotpath_instructions: bad answer {status}: {body[:300]!r}")
        return body

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            sys.exit("hotpath_instructions: the server closed the connection")
        self.buf += chunk


def control(conn: Conn, args: list[str]) -> int:
    """Runs callgrind_control, sending requests while it waits; returns how many were sent."""
    proc = subprocess.Popen(
        ["callgrind_control", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    sent = 0
    while proc.poll() is None:
        conn.get()
        sent += 1
        time.sleep(0.005)
    if proc.returncode != 0:
        sys.exit(f"hotpath_instructions: callgrind_control {args} failed")
    return sent


def total_ir(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    sys.exit(f"hotpath_instructions: no totals in {path}")


def measure(a: argparse.Namespace) -> None:
    conn = Conn(a.url, a.task_id)
    for _ in range(a.warmup):
        conn.get()
    rounds = []
    for _ in range(a.rounds):
        before = set(glob.glob(a.out + ".*"))
        control(conn, ["-z", str(a.pid)])
        for _ in range(a.requests):
            conn.get()
        # The nudges up to the one after which the dump was acknowledged count (the loop
        # stops there); what ran of the zeroing's last nudge after the zero is the error left.
        count = a.requests + control(conn, ["-d", str(a.pid)])
        dumps = sorted(set(glob.glob(a.out + ".*")) - before, key=os.path.getmtime)
        if not dumps:
            sys.exit(f"hotpath_instructions: no dump {a.out}.N written")
        ir = total_ir(dumps[-1])
        rounds.append({"ir": ir, "requests": count, "per_request": ir / count, "dump": dumps[-1]})
    print(json.dumps(rounds))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("url")
    m.add_argument("task_id")
    m.add_argument("--pid", type=int, required=True)
    m.add_argument("--out", required=True, help="the --callgrind-out-file prefix")
    m.add_argument("--warmup", type=int, default=300)
    m.add_argument("--requests", type=int, default=2000)
    m.add_argument("--rounds", type=int, default=3, help="zero, requests, dump; this many times")
    g = sub.add_parser("answer")
    g.add_argument("url")
    g.add_argument("task_id")
    a = ap.parse_args()
    if a.cmd == "measure":
        measure(a)
    else:
        sys.stdout.write(Conn(a.url, a.task_id).get().decode())


if __name__ == "__main__":
    main()
