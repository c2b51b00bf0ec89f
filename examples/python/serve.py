"""Serves a step handler over HTTP for an `http` target (docs/step-protocol.md), with nothing but
the standard library: each POST's JSON body is one step's request, the answer is the reply.

    python3 serve.py report:handler [--port 8080] [--log steps.jsonl] [--secret-env VAR [--header NAME]]

It listens on 127.0.0.1 only (the manifest may then say http://127.0.0.1:PORT/); put TLS in
front of it for anything else. `--log` appends every request, one JSON line each. With
`--secret-env VAR`, a request whose header NAME (default Authorization) is not exactly the
value of VAR is refused with 401 (the manifest's `secret_env` or `secret_arn` sends it)."""
import argparse, hmac, importlib, json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("handler", help="module:function, e.g. report:handler")
p.add_argument("--port", type=int, default=0)
p.add_argument("--log")
p.add_argument("--secret-env", help="variable holding the header value every request must carry")
p.add_argument("--header", default="Authorization")
a = p.parse_args()
secret = None
if a.secret_env:
    secret = os.environ.get(a.secret_env, "")
    if not secret:
        sys.exit(f"serve.py: {a.secret_env} is not set")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
module, function = a.handler.split(":")
handle = getattr(importlib.import_module(module), function)


class Step(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if secret is not None and not hmac.compare_digest(
            self.headers.get(a.header, "").encode(), secret.encode()
        ):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if a.log:
            with open(a.log, "a") as f:
                f.write(body.decode() + "\n")
        answer = json.dumps(handle(json.loads(body))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):  # quiet: the log file says what was asked
        pass


server = ThreadingHTTPServer(("127.0.0.1", a.port), Step)
print(f"listening on http://127.0.0.1:{server.server_port}/", flush=True)
server.serve_forever()
