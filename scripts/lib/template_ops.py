"""What the default deploy must have for the people who run it (template_params.py --check
--scenarios calls `operations`): every function's errors and both stages' 5xx alarmed, the
alarms sent somewhere the deploy asked for (or an output saying they go nowhere), what holds
data or evidence kept when the stack goes, a kept table adoptable by a new stack, and the
checkov skip reasons that can be checked against the template true.
"""

from __future__ import annotations

STATEFUL = ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SecretsManager::Secret",
            "AWS::Logs::LogGroup")


def _alarm_metrics(props: dict) -> list[dict]:
    """Every metric an alarm reads: (namespace, name, dimensions as a dict)."""
    out = []
    if props.get("MetricName"):
        out.append({"ns": props.get("Namespace"), "name": props.get("MetricName"),
                    "dims": {d["Name"]: d["Value"] for d in props.get("Dimensions") or []}})
    for m in props.get("Metrics") or []:
        metric = (m.get("MetricStat") or {}).get("Metric") or {}
        if metric:
            out.append({"ns": metric.get("Namespace"), "name": metric.get("MetricName"),
                        "dims": {d["Name"]: d["Value"] for d in metric.get("Dimensions") or []}})
    return out


def _skips(resource: dict) -> dict[str, str]:
    skip = ((resource.get("Metadata") or {}).get("checkov") or {}).get("skip") or []
    return {s.get("id"): str(s.get("comment", "")) for s in skip}


def operations(template: dict, jwt: dict, default_deploy, refs, evaluate, resolved) -> list[str]:
    """What fails for the people who run the default deploy. template_params.py passes in its
    own functions (default_deploy, refs, evaluate, resolved), so this module imports nothing of it."""
    out = []
    made, values = default_deploy(template, jwt)
    alarms = {n: r for n, r in made.items() if r.get("Type") == "AWS::CloudWatch::Alarm"}
    metrics = [m for r in alarms.values() for m in _alarm_metrics(r.get("Properties", {}))]
    functions = [n for n, r in made.items() if r.get("Type") == "AWS::Serverless::Function"]
    for fn in functions:
        if not any(m["ns"] == "AWS/Lambda" and m["name"] == "Errors"
                   and m["dims"].get("FunctionName") == {"Ref": fn} for m in metrics):
            out.append(f"{fn}: no alarm on its invocation errors (AWS/Lambda Errors): a start-up "
                       "failure is an outage no alarm sees")
    for api, r in made.items():
        if r.get("Type") != "AWS::Serverless::Api":
            continue
        name = r.get("Properties", {}).get("Name")
        if not any(m["ns"] == "AWS/ApiGateway" and m["name"] == "5XXError"
                   and m["dims"].get("ApiName") == name for m in metrics):
            out.append(f"{api}: no alarm on its stage's 5XXError")
    # Where alarms go: the deploy must ask (AlarmEmail without a Default), and every alarm
    # must notify a topic the given address is subscribed to.
    if "Default" in template.get("Parameters", {}).get("AlarmEmail", {"Default": ""}):
        out.append("AlarmEmail: missing, or has a Default: the deploy must ask where alarms go")
    subscribed = {str(r["Properties"].get("TopicArn")) for r in made.values()
                  if r.get("Type") == "AWS::SNS::Subscription"
                  and r["Properties"].get("Endpoint") == jwt.get("AlarmEmail")}
    for n, r in alarms.items():
        actions = r.get("Properties", {}).get("AlarmActions") or []
        if not any(str(a) in subscribed for a in actions):
            out.append(f"{n}: notifies no topic AlarmEmail is subscribed to ({actions!r})")
    nowhere, _ = default_deploy(template, {**jwt, "AlarmEmail": "none"})
    del nowhere
    conds = {**values, "__conditions__": template.get("Conditions", {})}
    silent = {**conds, "AlarmEmail": "none"}
    warned = [o for o in (template.get("Outputs") or {}).values()
              if "Condition" in o and evaluate({"Condition": o["Condition"]}, silent)
              and "NOBODY" in str(o.get("Value", "")).upper()]
    if not warned:
        out.append("AlarmEmail=none: no output says the alarms notify nobody")
    # Kept when the stack goes: data (table, queues, the state key) and evidence (logs).
    for n, r in made.items():
        if r.get("Type") in STATEFUL:
            for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
                if r.get(policy) != "Retain":
                    out.append(f"{n}: {policy} is not Retain: deleting or replacing the stack "
                               "deletes what it holds")
        if r.get("Type") == "AWS::DynamoDB::Table" and \
                r.get("Properties", {}).get("DeletionProtectionEnabled") is not True:
            out.append(f"{n}: no DeletionProtectionEnabled")
    adopted, adopted_values = default_deploy(template, {**jwt, "ExistingTableName": "kept-tasks"})
    if any(r.get("Type") == "AWS::DynamoDB::Table" for r in adopted.values()):
        out.append("ExistingTableName: a new table is still created")
    env = (((template.get("Globals") or {}).get("Function") or {}).get("Environment") or {})
    table = resolved(env, adopted_values).get("Variables", {}).get("TABLE_NAME")
    if table != "kept-tasks":
        out.append(f"ExistingTableName: the functions' TABLE_NAME is {table!r}, not the adopted table")
    dangling = {ref for r in adopted.values() for ref in refs(r)} - set(adopted) - set(adopted_values)
    dangling = {d for d in dangling if not d.startswith("AWS::")}
    if dangling:
        out.append(f"ExistingTableName: resources refer to what is not created: {sorted(dangling)}")
    # Streams (each an mcp execution for up to StreamSeconds) capped across tenants below the
    # mcp reservation, so short requests always find executions.
    mcp = made.get("McpFunction", {}).get("Properties", {})
    env = (mcp.get("Environment") or {}).get("Variables") or {}
    try:
        cap, reserved = int(env.get("MAX_STREAMS", 0)), int(mcp.get("ReservedConcurrentExecutions", 0))
    except (TypeError, ValueError):
        cap, reserved = 0, 0
    if not 0 < cap < reserved:
        out.append(f"McpFunction: streams of all tenants capped at {cap or 'nothing'} (MAX_STREAMS), "
                   f"not below its reservation ({reserved}): streams can hold every execution "
                   "short requests need")
    # The front door against a forged header and a token-less flood (waf_model.py).
    import sys  # noqa: PLC0415

    import waf_model  # noqa: PLC0415
    out += waf_model.front_door(made, values, report=lambda line: print(line, file=sys.stderr))
    # Skip reasons that the template can prove wrong.
    for fn in functions:
        r = made[fn]
        props = r.get("Properties", {})
        http = any(e.get("Type") == "Api" for e in (props.get("Events") or {}).values())
        reason = _skips(r).get("CKV_AWS_117", "")
        if http and "only DynamoDB and SQS" in reason:
            out.append(f"{fn}: CKV_AWS_117 says it reaches only DynamoDB and SQS, but it checks "
                       "tokens (AuthMode=jwt fetches the JWKS over the internet)")
        scheduled = any(e.get("Type") == "Schedule" for e in (props.get("Events") or {}).values())
        if scheduled and not props.get("ReservedConcurrentExecutions"):
            out.append(f"{fn}: scheduled, with no reservation: a flood that takes the account's "
                       "unreserved executions starves it")
    return out
