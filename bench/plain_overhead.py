#!/usr/bin/env python3
"""What a `plain` Lambda target costs over a direct Invoke (issue 38): a local server
(`mcp-tasks serve`) serves one declared tool, `protocol = "plain"` on a `lambda` target, whose
Invoke goes to a stand-in on 127.0.0.1 (`AWS_ENDPOINT_URL_LAMBDA`, dummy credentials, as
tests/targets/lambda_api.py is reached) that waits `--target-ms` and answers a small object.
This script times, alternately over two kept-alive connections:

- `through`: a synchronous `tools/call` of the tool (no tasks extension: the server checks the
  arguments, signs and sends the Invoke, reads the answer and writes the result back);
- `direct`: the same Invoke request sent by this script straight to the stand-in.

The overhead per call is the difference of the two medians: everything the server puts
between a client and its function, the MCP round trip included.

    python3 bench/plain_overhead.py                      # this tree's release build
    python3 bench/plain_overhead.py --binary /tmp/old/mcp-tasks --calls 2000

Like bench/declared_overhead.py it refuses to run (exit 3) when the 1-minute load average is
above half the number of cores, unless `--force`. Loopback only; every process it starts is
stopped.
"""
import argparse
import http.client
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

INVOKE = "/2015-03-31/functions/plain/invocations"


class Invoke(http.server.BaseHTTPRequestHandler):
    """The stand-in Invoke API: waits, then answers the arguments' `n` back."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    target_ms = 3.0

    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        time.sleep(Invoke.target_ms / 1000)
        body = json.dumps({"n": event.get("n")}).encode()
        self.send_response(200 if self.path == INVOKE else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


def connect(host_port):
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def start_server(binary, d, target_port):
    manifest = os.path.join(d, "tools.toml")
    with open(manifest, "w") as f:
        f.write('[[tool]]\nname = "plain"\ndescription = "an unmodified function"\n'
                'input_schema = { type = "object", properties = { n = { type = "integer" } } }\n'
                'protocol = "plain"\ntarget = { lambda = "plain" }\n')
    env = dict(os.environ, AWS_ENDPOINT_URL_LAMBDA=f"http://127.0.0.1:{target_port}",
               AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true")
    server = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(d, "data"),
         "--tools", manifest, "--metrics-listen", "off"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(d, "server.log"), "w"), text=True, env=env)
    for line in server.stdout:
        if line.startswith("mcp-tasks listening on "):
            return server, line.split()[-1].split("//")[-1].split("/")[0]
    server.wait(timeout=10)
    sys.exit(f"plain_overhead: {binary} did not start; see {d}/server.log")


def call_through(conn, n):
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "plain", "arguments": {"n": n}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "plain_overhead", "version": "1"}}}}
    conn.request("POST", "/mcp", json.dumps(body), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "plain"})
    answer = json.loads(conn.getresponse().read())
    got = ((answer.get("result") or {}).get("structuredContent") or {}).get("n")
    if got != n:
        sys.exit(f"plain_overhead: unexpected answer: {answer}")


def call_direct(conn, n):
    conn.request("POST", INVOKE, json.dumps({"n": n}), {"Content-Type": "application/json"})
    if json.loads(conn.getresponse().read()).get("n") != n:
        sys.exit("plain_overhead: the stand-in answered something else")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default="target/release/mcp-tasks")
    p.add_argument("--calls", type=int, default=1000, help="calls of each kind")
    p.add_argument("--target-ms", type=float, default=3.0, help="the function's own time")
    p.add_argument("--force", action="store_true", help="run on a busy machine")
    a = p.parse_args()
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1) / 2 and not a.force:
        print(f"plain_overhead: the machine is busy (load {load:.2f} on {os.cpu_count()} cores): "
              "figures would mean nothing; --force to run anyway", file=sys.stderr)
        sys.exit(3)
    Invoke.target_ms = a.target_ms
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Invoke)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    d = tempfile.mkdtemp(prefix="plain-overhead.")
    server, addr = start_server(a.binary, d, target.server_port)
    times = {"through": [], "direct": []}
    try:
        through, direct = connect(addr), connect(f"127.0.0.1:{target.server_port}")
        for n in range(a.calls + 50):
            for kind, conn, call in (("through", through, call_through),
                                     ("direct", direct, call_direct)):
                t0 = time.monotonic_ns()
                call(conn, n)
                if n >= 50:  # warm-up left out
                    times[kind].append(time.monotonic_ns() - t0)
    finally:
        server.terminate()
        server.wait(timeout=30)
        target.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    med = {k: statistics.median(v) / 1e6 for k, v in times.items()}
    p99 = {k: sorted(v)[int(0.99 * len(v))] / 1e6 for k, v in times.items()}
    print(f"plain lambda target, {a.calls} calls each, target {a.target_ms} ms, load {load:.2f}")
    for k in ("through", "direct"):
        print(f"  {k:8} median {med[k]:.3f} ms  p99 {p99[k]:.3f} ms")
    print(f"  overhead per call (median through - median direct): {med['through'] - med['direct']:.3f} ms")


if __name__ == "__main__":
    main()
