#!/usr/bin/env python3
"""The slow-reader attack on the local edge, measured (README "The edge under abuse").

    python3 bench/slow_readers.py BIN [BIN ...]      # e.g. an older build, then this tree's

For each `mcp-tasks` binary, in turn and in this one run: start `serve` on a free loopback
port (auth off, the default --max-connections 1024 unless --max-connections is given), open
--conns connections (default: the cap), on each send --bytes of pipelined `GET /nope` requests
(a path that needs no token; each is answered 404) and never read a byte of the answers; then,
--hold seconds (30) after the attack began, print how many connections the server still holds
(its accepted sockets, from /proc/PID/fd, less those it had before) and whether a new
client's request is answered, and how fast (within --answer-within seconds, 15); every 5 s
meanwhile, the connections held and the bytes of answers the kernel holds for them (the
server's send queues, from /proc/net/tcp). The attack is sent once: nothing reconnects.

Needs Linux (/proc) and raises its own soft limit on open files to the hard limit (the child
server inherits it): 1024 connections are 2048 descriptors on one machine.
"""

import argparse
import os
import re
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def start(binary, data_dir, max_connections):
    args = [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir]
    if max_connections:
        args += ["--max-connections", str(max_connections)]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    for line in proc.stdout:
        m = re.match(r"mcp-tasks listening on http://([\d.]+):(\d+)/mcp", line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, (m.group(1), int(m.group(2)))
    raise SystemExit(f"{binary} did not start")


def sockets_held(pid):
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def queued_bytes(port):
    """The bytes of answers in the server's send queues (sent and unacknowledged, or not yet
    sent) over all its connections on `port`, from /proc/net/tcp."""
    total = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                total += int(fields[4].split(":")[0], 16)
    return total


def attack(addr, conns, nbytes):
    """Opens `conns` connections and writes `nbytes` of pipelined requests on each, without
    ever reading; returns the sockets (kept open by the caller) once all is written or the
    server stopped taking bytes."""
    req = f"GET /nope HTTP/1.1\r\nhost: {addr[0]}:{addr[1]}\r\n\r\n".encode()
    payload = req * (nbytes // len(req) + 1)
    payload = payload[:nbytes - nbytes % len(req)]
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(conns):
        s = socket.create_connection(addr)
        s.setblocking(False)
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE, [memoryview(payload)])
    deadline = time.monotonic() + 10
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            left = key.data
            try:
                sent = key.fileobj.send(left[0])
            except BlockingIOError:
                continue
            except OSError:
                sel.unregister(key.fileobj)
                continue
            left[0] = left[0][sent:]
            if not left[0]:
                sel.unregister(key.fileobj)
    unsent = len(sel.get_map())
    sel.close()
    return socks, unsent


def legit_request(addr, within):
    started = time.monotonic()
    try:
        with socket.create_connection(addr, timeout=within) as s:
            s.sendall(
                f"GET /nope HTTP/1.1\r\nhost: {addr[0]}:{addr[1]}\r\nconnection: close\r\n\r\n".encode()
            )
            got = s.recv(64)
        status = got.split(b" ")[1].decode() if got else "nothing"
    except OSError as e:
        status = f"no answer ({type(e).__name__})"
    return status, time.monotonic() - started


def measure(binary, a):
    with tempfile.TemporaryDirectory() as d:
        proc, addr = start(binary, d, a.max_connections)
        try:
            time.sleep(0.5)
            base = sockets_held(proc.pid)
            began = time.monotonic()
            socks, unsent = attack(addr, a.conns, a.bytes)
            print(
                f"  attack: {len(socks)} connections x {a.bytes} bytes of pipelined requests "
                f"sent in {time.monotonic() - began:.1f} s ({unsent} could not send it all)",
                flush=True,
            )
            timeline = []
            while (t := time.monotonic() - began) < a.hold:
                timeline.append((round(t), sockets_held(proc.pid) - base, queued_bytes(addr[1])))
                time.sleep(min(5, a.hold - t))
            held = sockets_held(proc.pid) - base
            timeline.append((round(time.monotonic() - began), held, queued_bytes(addr[1])))
            status, took = legit_request(addr, a.answer_within)
            for s in socks:
                s.close()
            return held, timeline, status, took
        finally:
            proc.kill()
            proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binaries", nargs="+")
    p.add_argument("--conns", type=int, default=1024)
    p.add_argument("--bytes", type=int, default=128 * 1024)
    p.add_argument("--hold", type=float, default=30)
    p.add_argument("--answer-within", type=float, default=15)
    p.add_argument("--max-connections", type=int, default=0, help="0: the server's default")
    a = p.parse_args()
    soft, _ = raise_nofile()
    print(f"open-file limit {soft}; python3 {' '.join(sys.argv)}")
    rows = []
    for b in a.binaries:
        print(f"{b}:", flush=True)
        held, timeline, status, took = measure(b, a)
        print(
            "  connections held, answer bytes queued in the kernel (s: n, MB): "
            + ", ".join(f"{t}: {n}, {q / 1e6:.0f}" for t, n, q in timeline)
        )
        print(f"  a new client at {a.hold:.0f} s: {status} after {took:.2f} s")
        rows.append((b, held, status, took))
    print(f"\nslots held {a.hold:.0f} s after the attack began ({a.conns} connections):")
    for b, held, status, took in rows:
        print(f"  {held:5d} / {a.conns} ({held / a.conns:.0%})  new client: {status} in {took:.2f} s  {b}")


if __name__ == "__main__":
    main()
