"""An ordinary AWS Lambda function, written with no knowledge of MCP or of the step protocol:
its event is a JSON object, its answer a JSON object. Declared with `protocol = "plain"`
(examples/plain/tools.toml), it becomes a durable MCP tool as it is: the event is exactly the
tool's arguments, the answer the tool's result (`structuredContent`, and its JSON as text).

Run it locally as an HTTP target with
`PYTHONPATH=examples/plain python3 examples/python/serve.py resize:handler --port 8089`, or deploy
it as a Lambda function (Python 3.12, handler `resize.handler`)."""


def handler(event, context=None):
    width, height = event["width"], event["height"]
    scale = min(1.0, event.get("max_side", 1024) / max(width, height))
    return {"width": round(width * scale), "height": round(height * scale), "scale": scale}
