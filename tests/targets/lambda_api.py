"""An emulated AWS Lambda Invoke API on 127.0.0.1 for the tests (standard library only): the
`POST /2015-03-31/functions/{name}/invocations` of a synchronous `Invoke`, running the example
handlers in-process (Python) or in a `node` process per call (Node.js), as Lambda would. The
SDK reaches it through `AWS_ENDPOINT_URL_LAMBDA`.

    python3 lambda_api.py --function report=python:examples/python/report.py:handler \
        --function approve=node:examples/node/approve.mjs [--log calls.jsonl] [--node node]

It prints `listening on http://127.0.0.1:PORT` once ready. Besides the functions given, it has
functions that misbehave the ways Lambda can: `throttled` (429 TooManyRequestsException),
`missing` (404 ResourceNotFoundException), `crashing` (an unhandled function error),
`garbage` (a result that is not JSON), `oversize` (a 2 MB result), `slow` (answers after 60 s).
`--log` appends one JSON line per call: {"function": …, "event": …}."""
import argparse, importlib.util, json, subprocess, sys, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--function", action="append", default=[])
p.add_argument("--log")
p.add_argument("--node", default="node")
a = p.parse_args()

NODE_RUNNER = """
import { pathToFileURL } from "node:url";
const m = await import(pathToFileURL(process.argv[1]).href);
let s = ""; for await (const c of process.stdin) s += c;
process.stdout.write(JSON.stringify(await m.handler(JSON.parse(s), {})));
"""

functions = {}
for spec in a.function:
    name, kind, rest = spec.split("=", 1)[0], *spec.split("=", 1)[1].split(":", 1)
    if kind == "python":
        path, fn = rest.rsplit(":", 1)
        mod_spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        functions[name] = lambda event, f=getattr(module, fn): json.dumps(f(event, None))
    elif kind == "node":
        def run(event, path=rest):
            out = subprocess.run([a.node, "--input-type=module", "-e", NODE_RUNNER, path],
                                 input=json.dumps(event).encode(), capture_output=True, check=True)
            return out.stdout.decode()
        functions[name] = run


class Invoke(BaseHTTPRequestHandler):
    def reply(self, status, body, headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, kind, message):
        self.reply(status, json.dumps({"__type": kind, "message": message}),
                   [("x-amzn-ErrorType", kind)])

    def do_POST(self):
        parts = urllib.parse.unquote(self.path.split("?")[0]).split("/")
        if len(parts) != 5 or parts[1:3] != ["2015-03-31", "functions"] or parts[4] != "invocations":
            return self.error(404, "UnknownOperationException", "no such operation")
        name = parts[3].split(":function:")[-1].split(":")[0]
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps({"function": name, "event": event}) + "\n")
        if name == "throttled":
            return self.error(429, "TooManyRequestsException", "Rate exceeded")
        if name == "crashing":
            return self.reply(200, json.dumps({"errorMessage": "boom", "errorType": "Exception"}),
                              [("X-Amz-Function-Error", "Unhandled")])
        if name == "garbage":
            return self.reply(200, "this is not json")
        if name == "oversize":
            return self.reply(200, json.dumps({"done": {"content": [{"type": "text", "text": "x" * (2 << 20)}]}}))
        if name == "slow":
            time.sleep(60)
            return self.reply(200, "{}")
        if name not in functions:
            return self.error(404, "ResourceNotFoundException", f"Function not found: {name}")
        try:
            result = functions[name](event)
        except Exception as e:  # an unhandled error in the function, as Lambda reports it
            return self.reply(200, json.dumps({"errorMessage": str(e), "errorType": type(e).__name__}),
                              [("X-Amz-Function-Error", "Unhandled")])
        self.reply(200, result)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Invoke)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
