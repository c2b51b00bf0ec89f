#!/usr/bin/env python3
"""What one fast declared job writes: a local server (`mcp-tasks serve`, the embedded store)
runs one task of a declared `http` tool whose target answers `continue` at once, for a fixed
time, and the script counts the target's steps and the server's durable commits (fsync and
fdatasync calls, under strace) and disk writes (/proc/PID/io). Several binaries side by side in
one run give the before/after ratio on the same machine:

    python3 bench/declared_pace.py --seconds 10 --checkpoint-bytes 200,40000 \\
        --binary before=/tmp/old/mcp-tasks --binary after=target/debug/mcp-tasks

Needs strace (apt-get install strace). Loopback only; every process it starts is stopped.
"""
import argparse
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


class Target(http.server.BaseHTTPRequestHandler):
    steps = 0
    pad = ""
    stop_at = 0.0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Target.steps += 1
        if time.monotonic() >= Target.stop_at:
            answer = {"done": {"content": [{"type": "text", "text": "done"}]}}
        else:
            answer = {"continue": {"checkpoint": {"n": Target.steps, "pad": Target.pad}}}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "declared_pace", "version": "1"}}


def post(url, body, headers=None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2026-07-28"}
    h.update(headers or {})
    req = urllib.request.Request(url, json.dumps(body).encode(), h)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run(binary, seconds, pad_bytes):
    Target.steps, Target.pad = 0, "x" * pad_bytes
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    d = tempfile.mkdtemp()
    manifest = os.path.join(d, "tools.toml")
    with open(manifest, "w") as f:
        f.write('[[tool]]\nname = "fast"\ndescription = "answers continue at once"\n'
                'input_schema = { type = "object" }\ntask = "required"\n'
                f'target = {{ http = "http://127.0.0.1:{target.server_port}/" }}\n')
    server = subprocess.Popen(
        ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", os.path.join(d, "strace"),
         binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(d, "data"),
         "--tools", manifest],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pid = None
    try:
        url = None
        for line in server.stdout:
            if line.startswith("mcp-tasks listening on "):
                url = line.split()[-1]
                break
        pid = int(subprocess.check_output(["pgrep", "-P", str(server.pid)]).split()[0])
        io0 = io(pid)
        Target.stop_at = time.monotonic() + seconds
        started = time.monotonic()
        created = post(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "fast", "arguments": {}, "_meta": META}},
                       {"Mcp-Method": "tools/call", "Mcp-Name": "fast"})
        task = created["result"].get("taskId") or created["result"]["task"]["taskId"]
        while True:
            got = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                             "params": {"taskId": task, "_meta": META}},
                       {"Mcp-Method": "tasks/get", "Mcp-Name": task})
            if got["result"]["status"] in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        io1 = io(pid)
    finally:
        if pid:
            os.kill(pid, 15)
        server.terminate()
        server.wait(timeout=30)
        target.shutdown()
    text = open(os.path.join(d, "strace")).read()
    syncs = sum(int(m.group(1)) for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?f(?:data)?sync", text, re.M))
    shutil.rmtree(d, ignore_errors=True)
    return {"steps_per_s": Target.steps / elapsed, "syncs_per_s": syncs / elapsed,
            "disk_mb_per_s": (io1 - io0) / elapsed / 1e6}


def io(pid):
    for line in open(f"/proc/{pid}/io"):
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", action="append", required=True, help="NAME=PATH, repeatable")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--checkpoint-bytes", default="200,40000")
    a = p.parse_args()
    if not shutil.which("strace"):
        sys.exit("declared_pace: strace not found (apt-get install strace)")
    print(f"{'binary':<10} {'checkpoint':>10} {'steps/s':>9} {'commits/s':>10} {'disk MB/s':>10}")
    for size in [int(s) for s in a.checkpoint_bytes.split(",")]:
        for spec in a.binary:
            name, path = spec.split("=", 1)
            r = run(path, a.seconds, size)
            print(f"{name:<10} {size:>10} {r['steps_per_s']:>9.1f} {r['syncs_per_s']:>10.1f} "
                  f"{r['disk_mb_per_s']:>10.2f}")


if __name__ == "__main__":
    main()
