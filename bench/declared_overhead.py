#!/usr/bin/env python3
"""What a declared step costs over its target's own time (issue 36): a local server
(`mcp-tasks serve`, the embedded store) runs tasks of two declared tools, one with an `http`
target and one with a `lambda` target, both served by one stand-in on 127.0.0.1 (the `lambda`
one as the Lambda `Invoke` API, `POST /2015-03-31/functions/NAME/invocations`, reached through
`AWS_ENDPOINT_URL_LAMBDA` with dummy credentials, as tests/targets/lambda_api.py is). Each step
the target sleeps `--target-ms` and answers `continue` (a small checkpoint) until the task's
`--steps`th step answers `done`.

The stand-in timestamps every request on its own clock: `in` when the request line has
arrived, `out` once the answer is written. Its own time for a step is `out - in`; the step as
the server sees it runs from one request to the next (`in[k+1] - in[k]`); the overhead per step
is the difference, `in[k+1] - out[k]`: everything the server does between reading one answer
and sending the next request (decoding and checking the answer, the checkpoint save when one is
due, the cancel check, building and signing the next request, the loopback round trip and the
stand-in's wake-up). Each task's first step (creation, lease) is left out. The tasks of the two
targets alternate (`--rounds` of each per binary); the figures are over every step of them.
A third row, `direct`, is the same steps called by this script itself with no server between
(one kept-alive connection): the floor of the measurement, what the loopback, the stand-in and
a Python caller put between two steps.

    python3 bench/declared_overhead.py                   # this tree's release build
    python3 bench/declared_overhead.py --binary before=/tmp/old/mcp-tasks --binary after=...

The figures mean something only on a quiet machine: the script refuses to run (exit 3) when
the 1-minute load average is above half the number of cores, unless `--force` (then the load
is printed beside the figures). Loopback only; every process it starts is stopped.
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
import urllib.request

STEP_PATH = "/step"
LAMBDA_PREFIX = "/2015-03-31/functions/"


class Target(http.server.BaseHTTPRequestHandler):
    """The stand-in: `POST /step` (the http target) and Lambda's Invoke (the lambda target)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as Lambda's endpoint and most APIs do
    # The head and the body go out in two writes: with Nagle's algorithm on, the body waits
    # for the client's delayed ACK of the head (40 ms on Linux), which is the stand-in's cost.
    disable_nagle_algorithm = True
    target_ms = 3.0
    steps = 50
    lock = threading.Lock()
    # task id -> [(in_ns, out_ns), ...] in arrival order
    times = {}

    def handle_one_request(self):
        # The request line has arrived when readline returns (a kept-alive connection waits
        # inside it for the next request): that is the step's `in`.
        self.raw_requestline = self.rfile.readline(65537)
        self.t_in = time.monotonic_ns()
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        getattr(self, "do_" + self.command, self.refuse)()
        self.wfile.flush()

    def refuse(self):
        self.answer(405, b"{}")

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if not (self.path == STEP_PATH or self.path.startswith(LAMBDA_PREFIX)):
            return self.answer(404, b"{}")
        n = (event.get("checkpoint") or {}).get("n", 0) + 1
        time.sleep(Target.target_ms / 1000)
        if n >= Target.steps:
            reply = {"done": {"content": [{"type": "text", "text": f"{n} steps"}]}}
        else:
            reply = {"continue": {"checkpoint": {"n": n}}}
        self.answer(200, json.dumps(reply).encode())
        self.wfile.flush()
        t_out = time.monotonic_ns()
        with Target.lock:
            Target.times.setdefault(event["task"]["id"], []).append((self.t_in, t_out))

    def log_message(self, *_):
        pass


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "declared_overhead", "version": "1"}}


def post(url, body, headers):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2026-07-28"}
    h.update(headers)
    req = urllib.request.Request(url, json.dumps(body).encode(), h)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def run_task(url, tool, timeout_s):
    """Creates one task of `tool` and polls it to its end; returns its id."""
    created = post(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": tool, "arguments": {}, "_meta": META}},
                   {"Mcp-Method": "tools/call", "Mcp-Name": tool})
    result = created.get("result") or sys.exit(f"declared_overhead: creation failed: {created}")
    task = result.get("taskId") or result["task"]["taskId"]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.25)
        got = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                         "params": {"taskId": task, "_meta": META}},
                   {"Mcp-Method": "tasks/get", "Mcp-Name": task})
        status = got["result"]["status"]
        if status == "completed":
            return task
        if status in ("failed", "cancelled"):
            sys.exit(f"declared_overhead: task of {tool} ended {status}: {got['result']}")
    sys.exit(f"declared_overhead: task of {tool} still running after {timeout_s} s")


def start_server(binary, d, target_port):
    manifest = os.path.join(d, "tools.toml")
    with open(manifest, "w") as f:
        for name, target in (("over_http", f'{{ http = "http://127.0.0.1:{target_port}{STEP_PATH}" }}'),
                             ("over_lambda", '{ lambda = "overhead" }')):
            f.write(f'[[tool]]\nname = "{name}"\ndescription = "answers continue"\n'
                    f'input_schema = {{ type = "object" }}\ntask = "required"\ntarget = {target}\n\n')
    env = dict(os.environ, AWS_ENDPOINT_URL_LAMBDA=f"http://127.0.0.1:{target_port}",
               AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true")
    server = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(d, "data"),
         "--tools", manifest, "--metrics-listen", "off"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(d, "server.log"), "w"), text=True, env=env)
    for line in server.stdout:
        if line.startswith("mcp-tasks listening on "):
            return server, line.split()[-1]
    server.wait(timeout=10)
    sys.exit(f"declared_overhead: {binary} did not start; see {d}/server.log:\n"
             + open(os.path.join(d, "server.log")).read()[-2000:])


def stats_ms(values_ns):
    v = sorted(x / 1e6 for x in values_ns)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    return {"n": len(v), "median": statistics.median(v), "mean": statistics.fmean(v),
            "p90": q(0.90), "p99": q(0.99), "max": v[-1]}


def direct_task(port, task_id):
    """The same steps called straight from this script (one kept-alive connection, no
    server): what the measurement itself puts between two steps (the loopback round trip, the
    stand-in's wake-up, a Python caller), for reading the server's figures against."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    checkpoint = None
    while True:
        event = {"protocol": "mcp-tasks-step/1", "tool": "direct", "arguments": {},
                 "checkpoint": checkpoint, "input": {}, "attempt": 1, "task": {"id": task_id}}
        conn.request("POST", STEP_PATH, json.dumps(event), {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        if "done" in answer:
            break
        checkpoint = answer["continue"]["checkpoint"]
    conn.close()
    return task_id


def measure(binary, rounds, timeout_s):
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    d = tempfile.mkdtemp(prefix="declared-overhead.")
    server, url = start_server(binary, d, target.server_port)
    tasks = {"http": [], "lambda": [], "direct": []}
    try:
        for r in range(rounds):
            for kind in ("http", "lambda"):
                tasks[kind].append(run_task(url, f"over_{kind}", timeout_s))
            tasks["direct"].append(direct_task(target.server_port, f"direct-{r}"))
    finally:
        server.terminate()
        server.wait(timeout=30)
        target.shutdown()
        target.server_close()
    shutil.rmtree(d, ignore_errors=True)
    out = {}
    for kind, ids in tasks.items():
        own, seen, over = [], [], []
        for t in ids:
            steps = Target.times.pop(t)
            if len(steps) != Target.steps:
                sys.exit(f"declared_overhead: task {t} took {len(steps)} steps, not {Target.steps}")
            for (in0, out0), (in1, _) in zip(steps[1:], steps[2:]):
                own.append(out0 - in0)
                seen.append(in1 - in0)
                over.append(in1 - out0)
        out[kind] = {"own": stats_ms(own), "seen": stats_ms(seen), "overhead": stats_ms(over)}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    target_dir = os.environ.get("CARGO_TARGET_DIR", "target")
    p.add_argument("--binary", action="append",
                   help=f"NAME=PATH, repeatable (default: this={target_dir}/release/mcp-tasks)")
    p.add_argument("--steps", type=int, default=1000, help="steps per task")
    p.add_argument("--rounds", type=int, default=3, help="tasks per target and binary")
    p.add_argument("--target-ms", type=float, default=3.0, help="the target's own time per step")
    p.add_argument("--timeout", type=float, default=300, help="seconds one task may take")
    p.add_argument("--force", action="store_true", help="run on a busy machine")
    a = p.parse_args()
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > 0.5 * cores:
        if not a.force:
            print(f"declared_overhead: the machine is busy (1-minute load {load:.2f} on {cores} "
                  f"cores, more than {0.5 * cores:.1f}); its figures would be the other work's. "
                  "Run it on a quiet machine, or pass --force to measure anyway.", file=sys.stderr)
            sys.exit(3)
        print(f"declared_overhead: WARNING: busy machine (1-minute load {load:.2f} on {cores} "
              "cores); --force given, figures skewed", flush=True)
    Target.target_ms, Target.steps = a.target_ms, a.steps
    binaries = [b.split("=", 1) for b in (a.binary or [f"this={target_dir}/release/mcp-tasks"])]
    for _, path in binaries:
        if not os.access(path, os.X_OK):
            sys.exit(f"declared_overhead: no binary {path} (cargo build --release -p mcp-tasks)")
    print(f"load average at start: {' '.join('%.2f' % x for x in os.getloadavg())} ({cores} cores); "
          f"{a.rounds} tasks x {a.steps} steps per target, target's own time {a.target_ms} ms")
    print(f"{'binary':<10} {'target':<7} {'steps':>6} {'own ms':>7} {'seen ms':>8} "
          f"{'overhead ms: median':>20} {'mean':>6} {'p90':>6} {'p99':>6} {'max':>7}")
    for name, path in binaries:
        for kind, r in measure(path, a.rounds, a.timeout).items():
            o = r["overhead"]
            print(f"{name:<10} {kind:<7} {o['n']:>6} {r['own']['median']:>7.2f} "
                  f"{r['seen']['median']:>8.2f} {o['median']:>20.3f} {o['mean']:>6.3f} "
                  f"{o['p90']:>6.3f} {o['p99']:>6.3f} {o['max']:>7.2f}")
    print(f"load average at end: {' '.join('%.2f' % x for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
