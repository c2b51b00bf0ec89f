"""An emulated AWS Step Functions API on 127.0.0.1 for the tests (standard library only): the
AWS JSON 1.0 actions a `step_functions` target calls (`X-Amz-Target:
AWSStepFunctions.ACTION`), over state machines that play scripted workflows. The server reaches
it through `AWS_ENDPOINT_URL_SFN`.

    python3 states_api.py --machine approve=approval --machine quick=quick [--log calls.jsonl]

It prints `listening on http://127.0.0.1:PORT` once ready. Each `--machine NAME=KIND` is the
state machine `arn:aws:states:us-east-1:123456789012:stateMachine:NAME`, playing KIND:
- `quick`: succeeds a second after its start; its output is its input;
- `failing`: fails a second after its start (error `Build.Broken`, a cause that must never
  reach a client);
- `approval`: runs `Plan`, then waits in `Approve` for a task token with an `mcp-tasks/input`
  question; `SendTaskSuccess` with `approve.action == "accept"` runs `Deploy` for a second and
  succeeds with `{"deployed": true, ...}`; any other answer fails it (`Deploy.Rejected`);
- `long`: runs until stopped.
Execution names are unique per machine (`ExecutionAlreadyExists`, as Step Functions answers a
second start of a name). `--log` appends one JSON line per call: {"action": …, "body": …}."""
import argparse, json, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--machine", action="append", default=[])
p.add_argument("--log")
a = p.parse_args()

PREFIX = "arn:aws:states:us-east-1:123456789012:"
machines = dict(m.split("=", 1) for m in a.machine)
executions = {}  # arn -> execution
lock = threading.Lock()


def now():
    return time.time()


class Execution:
    def __init__(self, machine, name, kind, input):
        self.machine, self.name, self.kind, self.input = machine, name, kind, input
        self.arn = f"{PREFIX}execution:{machine}:{name}"
        self.started = now()
        self.status, self.output, self.error, self.cause = "RUNNING", None, None, None
        self.events = [{"type": "ExecutionStarted"}]
        self.token = None
        self.answered_at = None
        if kind == "approval":
            self.enter("Plan")
            self.enter("Approve")
            self.token = f"token-{name}"
            question = {"mcp-tasks/input": {"taskToken": self.token, "inputRequests": {
                "approve": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": f"Deploy {json.loads(input).get('service')}?",
                    "requestedSchema": {"type": "object", "properties": {}}}}}}}
            params = {"Entries": [{"Detail": json.dumps(question)}]}
            self.events.append({"type": "TaskScheduled", "taskScheduledEventDetails": {
                "resourceType": "events", "resource": "putEvents.waitForTaskToken",
                "parameters": json.dumps(params)}})
        elif kind in ("quick", "failing", "long"):
            self.enter("Work")

    def enter(self, state):
        self.events.append({"type": "TaskStateEntered",
                            "stateEnteredEventDetails": {"name": state}})

    def tick(self):
        if self.status != "RUNNING":
            return
        t = now()
        if self.kind == "quick" and t - self.started >= 1:
            self.status, self.output = "SUCCEEDED", self.input
        elif self.kind == "failing" and t - self.started >= 1:
            self.status, self.error = "FAILED", "Build.Broken"
            self.cause = "stack trace with password=hunter2"
        elif self.kind == "approval" and self.answered_at and t - self.answered_at >= 1:
            self.status = "SUCCEEDED"
            self.output = json.dumps({"deployed": True, **json.loads(self.input)})


def log(action, body):
    if a.log:
        with open(a.log, "a") as f:
            f.write(json.dumps({"action": action, "body": body}) + "\n")


class Api(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        if status >= 400:
            self.send_header("x-amzn-ErrorType", body["__type"])
        self.end_headers()
        self.wfile.write(data)

    def refuse(self, kind, message="refused"):
        self.reply(400, {"__type": kind, "message": message})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        action = self.headers.get("X-Amz-Target", "").removeprefix("AWSStepFunctions.")
        if not self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return self.refuse("MissingAuthenticationToken")
        log(action, body)
        with lock:
            for e in executions.values():
                e.tick()
            return getattr(self, action, self.unknown)(body)

    def unknown(self, body):
        self.refuse("UnknownOperationException")

    def StartExecution(self, body):
        machine = body["stateMachineArn"].rsplit(":", 1)[1]
        if machine not in machines:
            return self.refuse("StateMachineDoesNotExist")
        arn = f"{PREFIX}execution:{machine}:{body['name']}"
        if arn in executions:
            return self.refuse("ExecutionAlreadyExists")
        executions[arn] = Execution(machine, body["name"], machines[machine], body["input"])
        self.reply(200, {"executionArn": arn, "startDate": now()})

    def DescribeExecution(self, body):
        e = executions.get(body["executionArn"])
        if e is None:
            return self.refuse("ExecutionDoesNotExist")
        out = {"executionArn": e.arn, "status": e.status, "startDate": e.started,
               "input": e.input}
        for k in ("output", "error", "cause"):
            if getattr(e, k) is not None:
                out[k] = getattr(e, k)
        self.reply(200, out)

    def GetExecutionHistory(self, body):
        e = executions.get(body["executionArn"])
        if e is None:
            return self.refuse("ExecutionDoesNotExist")
        events = list(reversed(e.events)) if body.get("reverseOrder") else list(e.events)
        self.reply(200, {"events": events[: body.get("maxResults", 100)]})

    def StopExecution(self, body):
        e = executions.get(body["executionArn"])
        if e is None:
            return self.refuse("ExecutionDoesNotExist")
        if e.status == "RUNNING":
            e.status, e.error = "ABORTED", body.get("error")
        self.reply(200, {"stopDate": now()})

    def SendTaskSuccess(self, body):
        e = next((e for e in executions.values() if e.token == body["taskToken"]), None)
        if e is None or e.answered_at or e.status != "RUNNING":
            return self.refuse("TaskTimedOut")
        answers = json.loads(body["output"])
        e.answered_at = now()
        e.events.append({"type": "TaskSucceeded"})
        if answers.get("approve", {}).get("action") == "accept":
            e.enter("Deploy")
        else:
            e.status, e.error, e.cause = "FAILED", "Deploy.Rejected", "declined by a person"
        self.reply(200, {})

    def SendTaskFailure(self, body):
        e = next((e for e in executions.values() if e.token == body["taskToken"]), None)
        if e is None or e.status != "RUNNING":
            return self.refuse("TaskTimedOut")
        e.answered_at = now()
        e.status, e.error = "FAILED", body.get("error")
        self.reply(200, {})

    def log_message(self, *_):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
