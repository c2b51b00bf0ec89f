"""An IAM-protected HTTP API on 127.0.0.1 for the tests: every request's AWS Signature Version 4
is checked with botocore's signer (an implementation independent of the server's, run by the
moto venv's Python), as API Gateway's IAM authorizer would; a request without one, with one
for another key, region or service, older than 5 minutes, or whose signature differs, is
answered 403. A request that passes gets a step answer `done` whose text is `signed`, except
on a path containing `/slow`, which it answers only after 60 s (a call to cancel).

    .tools/moto/venv/bin/python sigv4_api.py --access-key AK --secret-key SK \
        --region us-east-1 --service execute-api [--log calls.jsonl]

It prints `listening on http://127.0.0.1:PORT` once ready. `--log` appends one JSON line per
request: {"path", "verdict", "traceparent", "signed_headers", "event"}."""
import argparse, datetime, hmac, json, re, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

p = argparse.ArgumentParser()
p.add_argument("--access-key", required=True)
p.add_argument("--secret-key", required=True)
p.add_argument("--region", required=True)
p.add_argument("--service", required=True)
p.add_argument("--log")
a = p.parse_args()

AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)


def verdict(handler, body):
    """'ok' or why the request is refused."""
    m = AUTH.match(handler.headers.get("Authorization", ""))
    if not m:
        return "no signature"
    key, day, region, service, signed, signature = m.groups()
    if (key, region, service) != (a.access_key, a.region, a.service):
        return "wrong scope"
    stamp = handler.headers.get("X-Amz-Date", "")
    try:
        at = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "no date"
    if stamp[:8] != day or abs((datetime.datetime.now(datetime.timezone.utc) - at).total_seconds()) > 300:
        return "stale"
    names = signed.split(";")
    if "host" not in names:
        return "host not signed"
    headers = {n: handler.headers.get(n, "") for n in names}
    request = AWSRequest(method=handler.command,
                         url=f"http://{handler.headers['Host']}{handler.path}",
                         data=body, headers=headers)
    request.context["timestamp"] = stamp
    auth = SigV4Auth(Credentials(a.access_key, a.secret_key), a.service, a.region)
    if auth.signed_headers(auth.headers_to_sign(request)) != signed:
        return "signed headers differ"
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return "ok" if hmac.compare_digest(expected, signature) else "signature mismatch"


class Api(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        v = verdict(self, body)
        if a.log:
            try:
                event = json.loads(body)
            except ValueError:
                event = None
            with open(a.log, "a") as f:
                f.write(json.dumps({"path": self.path, "verdict": v,
                                    "traceparent": self.headers.get("traceparent"),
                                    "event": event}) + "\n")
        if v == "ok" and "/slow" in self.path:
            time.sleep(60)
        if v == "ok":
            status, out = 200, {"done": {"content": [{"type": "text", "text": "signed"}]}}
        else:
            status, out = 403, {"message": "Forbidden: SECRET-BODY " + v}
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
