"""A declared tool's target (docs/step-protocol.md): an AWS Lambda handler that builds a report in
parts, one part per step, with a checkpoint and progress; with `confirm`, it asks the user first."""
import time


def text(t):
    return {"content": [{"type": "text", "text": t}]}


def handler(event, context=None):
    args, cp = event["arguments"], event["checkpoint"] or {"parts": 0, "total": 0}
    month, parts = args["month"], args.get("parts", 3)
    if args.get("confirm") and "go" not in event["input"]:
        ask = {"method": "elicitation/create", "params": {
            "mode": "form", "message": f"Build the {parts}-part report for {month}?",
            "requestedSchema": {"type": "object", "properties": {}}}}
        return {"input": {"requests": {"go": ask}, "checkpoint": cp}}
    if args.get("confirm") and event["input"]["go"].get("action") != "accept":
        return {"done": text(f"The report for {month} was not built.")}
    time.sleep(args.get("pace_ms", 0) / 1000)  # one part's work
    done = cp["parts"] + 1
    total = cp["total"] + done * len(month)
    if done >= parts:
        return {"done": text(f"Report {month}: {done} parts, total {total}")}
    return {"continue": {"checkpoint": {"parts": done, "total": total}, "progress": {
        "progress": done, "total": parts, "message": f"part {done} of {parts}"}}}
