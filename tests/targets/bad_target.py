"""An `http` step target that misbehaves on purpose, for the tests (standard library only). The
path says how: `/status/NNN` answers that status, `/throttle` 429, `/garbage` a 200 that is not
JSON, `/oversize` a valid answer of 2 MB, `/slow` nothing for 60 s, `/ok` a `done`. It prints `listening on http://127.0.0.1:PORT` once ready; `--log` appends one
JSON line per request: {"path": …, "event": …}."""
import argparse, json, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--log")
a = p.parse_args()


def done(text):
    return json.dumps({"done": {"content": [{"type": "text", "text": text}]}})


class Bad(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps({"path": self.path, "event": json.loads(body)}) + "\n")
        if self.path.startswith("/status/"):
            return self.reply(int(self.path.split("/")[2]), '{"error": "SECRET-BODY"}')
        if self.path == "/throttle":
            return self.reply(429, "slow down")
        if self.path == "/garbage":
            return self.reply(200, "SECRET-BODY is not json")
        if self.path == "/oversize":
            return self.reply(200, done("x" * (2 << 20)))
        if self.path == "/slow":
            time.sleep(60)
            return self.reply(200, done("late"))
        return self.reply(200, done("ok"))

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Bad)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
