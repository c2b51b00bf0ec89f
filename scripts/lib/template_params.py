#!/usr/bin/env python3
"""What CloudFormation checks before it creates anything, offline: parameter values and Rules.

cfn-lint checks the template but not a deployment of it: it evaluates no `Rules` assertion for
given parameter values (its `--parameters` checks only required values and AllowedValues). This
script does that part the way CloudFormation does at change-set creation, so the careless
deploys can be tried without an AWS account:

1. every parameter value against its constraints (a missing value without Default;
   AllowedValues; MinValue/MaxValue of a Number; MinLength/MaxLength and AllowedPattern,
   matched whole, of a String);
2. every `Rules` entry whose RuleCondition holds: each Assert must be true, else the deploy
   fails with its AssertDescription (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Fn::Contains, Ref).

3. the relations between parameters that Rules cannot state (Rules compare strings only, never
   numbers), in RELATIONS below: this script refuses such a deploy; CloudFormation would not.

It is a model, not CloudFormation: AllowedPattern is Java's regex dialect, read here by Python's
`re` (keep patterns to their common ground), and Rules functions beyond those above are refused.

  template_params.py TEMPLATE Key=Value ...   # one deploy: prints what fails, exit 1 if any
  template_params.py --check TEMPLATE [--scenarios] [--verbose]
      # the policy below; with --scenarios also the careless deploys in SCENARIOS (template.yaml),
      # each printed with what CloudFormation would answer when --verbose, and the defences the
      # default deploy must have (`defences`: WAF in front of every stage, access logs, no
      # secret in an environment, the mcp function's reservation, the cost alarms)

The policy: every Number parameter has MinValue and MaxValue (or AllowedValues), every String
parameter AllowedValues or AllowedPattern, and every Default passes its own constraints. And,
since SAM passes over an unknown `ResponseTransferMode` of an `Api` event silently (leaving the
integration buffered) and cfn-lint accepts any value: every such value is RESPONSE_STREAM or
BUFFERED, and every `Api` event of a function with RESPONSE_STREAMING "true" is RESPONSE_STREAM
(that function writes every answer in the streaming format).
Run with the cfn-lint venv's Python (it loads the template with cfn-lint's YAML reader).
"""

from __future__ import annotations

import re
import sys

from cfnlint.decode import cfn_yaml

import template_ops

JWT = {
    "AuthMode": "jwt",
    "AuthIssuer": "https://issuer.example.com",
    "AuthAudience": "https://mcp.example.com/mcp",
    "AuthJwksUrl": "https://issuer.example.com/.well-known/jwks.json",
    "AlarmEmail": "ops@example.com",
}

# Relations between Number parameters (checked when the template has every parameter named):
# (the parameters, whether the values hold, what the failure says).
RELATIONS = [
    (("MaxRunningJobsPerTenant", "WorkerMaxConcurrency"),
     lambda v: v["MaxRunningJobsPerTenant"] < v["WorkerMaxConcurrency"],
     "MaxRunningJobsPerTenant must be below WorkerMaxConcurrency: a running job's step holds "
     "its worker invocation, so one tenant's slow steps would hold every invocation"),
]

# (what a careless operator tries, the parameters, None if it deploys or a text the failure names)
SCENARIOS = [
    ("sam deploy with every default", {}, "AuthMode"),
    ("AuthMode=none alone", {"AuthMode": "none", "AlarmEmail": "none"}, "AllowUnauthenticated=yes"),
    ("AuthMode=none, AllowUnauthenticated=no", {"AuthMode": "none", "AlarmEmail": "none", "AllowUnauthenticated": "no"},
     "AllowUnauthenticated=yes"),
    ("AuthMode=none, acknowledged", {"AuthMode": "none", "AlarmEmail": "none", "AllowUnauthenticated": "yes"}, None),
    ("AuthMode=none, AllowUnauthenticated=true", {"AuthMode": "none", "AlarmEmail": "none", "AllowUnauthenticated": "true"},
     "AllowUnauthenticated"),
    ("AuthMode=jwt without its settings", {"AuthMode": "jwt", "AlarmEmail": "none"}, "AuthIssuer is required"),
    ("AuthMode=jwt, complete", JWT, None),
    ("jwt with an http issuer", {**JWT, "AuthIssuer": "http://issuer.example.com"}, "AuthIssuer"),
    ("jwt with neither resource nor audience", {**JWT, "AuthAudience": ""},
     "AuthResource or AuthAudience"),
    ("Cognito: resource, client id and scope (docs/identity-providers.md)",
     {**JWT, "AuthAudience": "", "AuthResource": "https://mcp.example.com/mcp",
      "AuthAllowedClientIds": "1example23456789", "AuthRequiredScopes": "https://mcp.example.com/tasks.run"},
     None),
    ("Cognito client id without a scope",
     {**JWT, "AuthAllowedClientIds": "1example23456789"}, "AuthAllowedClientIds needs"),
    ("Entra ID: resource, GUID audience, advertised scope",
     {**JWT, "AuthResource": "https://mcp.example.com/mcp",
      "AuthAudience": "11111111-2222-3333-4444-555555555555",
      "AuthRequiredScopes": "tasks.run",
      "AuthAdvertisedScopes": "https://mcp.example.com/mcp/tasks.run", "AuthTenantClaim": "oid"},
     None),
    ("an audience with a quote", {**JWT, "AuthAudience": 'a"b'}, "AuthAudience"),
    ("declared tools' Lambda targets by ARN",
     {**JWT, "ToolTargetFunctions": "arn:aws:lambda:eu-west-1:123456789012:function:report,"
                                     "arn:aws:lambda:eu-west-1:123456789012:function:approve:live"},
     None),
    ("a Lambda target by name (IAM needs an ARN)", {**JWT, "ToolTargetFunctions": "report"},
     "ToolTargetFunctions"),
    ("a wildcard Lambda target", {**JWT, "ToolTargetFunctions":
                                  "arn:aws:lambda:eu-west-1:123456789012:function:*"},
     "ToolTargetFunctions"),
    ("declared tools' state machines by ARN",
     {**JWT, "ToolStateMachines": "arn:aws:states:eu-west-1:123456789012:stateMachine:approve,"
                                   "arn:aws:states:eu-west-1:123456789012:stateMachine:build"},
     None),
    ("a state machine by name (IAM needs an ARN)", {**JWT, "ToolStateMachines": "approve"},
     "ToolStateMachines"),
    ("a wildcard state machine", {**JWT, "ToolStateMachines":
                                  "arn:aws:states:eu-west-1:123456789012:stateMachine:*"},
     "ToolStateMachines"),
    ("declared tools' http secrets by ARN",
     {**JWT, "ToolSecretArns": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:deploy-key-AbCdEf,"
                               "arn:aws:secretsmanager:eu-west-1:123456789012:secret:team/report-key-a1B2c3"},
     None),
    ("an http secret by name (IAM needs an ARN)", {**JWT, "ToolSecretArns": "deploy-key"},
     "ToolSecretArns"),
    ("a wildcard http secret", {**JWT, "ToolSecretArns":
                                "arn:aws:secretsmanager:eu-west-1:123456789012:secret:*"},
     "ToolSecretArns"),
    ("MaxReceiveCount=2", {**JWT, "MaxReceiveCount": "2"}, "MaxReceiveCount"),
    ("WorkerMaxConcurrency=1", {**JWT, "WorkerMaxConcurrency": "1"}, "WorkerMaxConcurrency"),
    ("WorkerMaxConcurrency=5000", {**JWT, "WorkerMaxConcurrency": "5000"}, "WorkerMaxConcurrency"),
    ("MaxRunningJobsPerTenant=100, the old default, over WorkerMaxConcurrency 50",
     {**JWT, "MaxRunningJobsPerTenant": "100"}, "MaxRunningJobsPerTenant must be below"),
    ("MaxRunningJobsPerTenant equal to WorkerMaxConcurrency",
     {**JWT, "MaxRunningJobsPerTenant": "50"}, "MaxRunningJobsPerTenant must be below"),
    ("WorkerMaxConcurrency=10 at the default MaxRunningJobsPerTenant",
     {**JWT, "WorkerMaxConcurrency": "10"}, "MaxRunningJobsPerTenant must be below"),
    ("MaxRunningJobsPerTenant=100 with WorkerMaxConcurrency=200",
     {**JWT, "MaxRunningJobsPerTenant": "100", "WorkerMaxConcurrency": "200"}, None),
    ("ApiThrottleRateLimit=0", {**JWT, "ApiThrottleRateLimit": "0"}, "ApiThrottleRateLimit"),
    ("McpReservedConcurrency=-1", {**JWT, "McpReservedConcurrency": "-1"}, "McpReservedConcurrency"),
    ("StreamSeconds=900, the whole Lambda timeout", {**JWT, "StreamSeconds": "900"}, "StreamSeconds"),
    ("reservations for both HTTP functions", {**JWT, "McpReservedConcurrency": "200",
                                              "TasksReservedConcurrency": "50"}, None),
    ("SweepSchedule=every 5 minutes", {**JWT, "SweepSchedule": "every 5 minutes"}, "SweepSchedule"),
    ("SweepSchedule=rate(1 minutes)", {**JWT, "SweepSchedule": "rate(1 minutes)"}, "SweepSchedule"),
    ("SweepSchedule=cron", {**JWT, "SweepSchedule": "cron(0/10 * * * ? *)"}, None),
    ("DomainName without a certificate", {**JWT, "DomainName": "mcp.example.com"},
     "CertificateArn is required"),
    ("DomainName with a URL", {**JWT, "DomainName": "https://mcp.example.com"}, "DomainName"),
    ("StateKeyVersionId of a put-secret-value",
     {**JWT, "StateKeyVersionId": "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE"}, None),
    ("McpReservedConcurrency=0, streams bounded by the account only (deliberate)",
     {**JWT, "McpReservedConcurrency": "0"}, None),
    ("McpReservedConcurrency=none", {**JWT, "McpReservedConcurrency": "none"},
     "McpReservedConcurrency"),
    ("Waf=off, deliberately", {**JWT, "Waf": "off"}, None),
    ("Waf=yes", {**JWT, "Waf": "yes"}, "Waf"),
    ("Waf=false", {**JWT, "Waf": "false"}, "Waf"),
    ("WafRequestsPerIpPerMinute=5, under WAF's minimum",
     {**JWT, "WafRequestsPerIpPerMinute": "5"}, "WafRequestsPerIpPerMinute"),
    ("WafRequestsPerIpPerMinute=0 meaning no limit", {**JWT, "WafRequestsPerIpPerMinute": "0"},
     "WafRequestsPerIpPerMinute"),
    ("WafTokenlessPerMinute=0 meaning no limit", {**JWT, "WafTokenlessPerMinute": "0"},
     "WafTokenlessPerMinute"),
    ("WafTokenlessPerMinute raised for a large deployment",
     {**JWT, "WafTokenlessPerMinute": "6000", "WafRequestsPerIpPerMinute": "3000",
      "ApiThrottleRateLimit": "200"}, None),
    ("AuthMode=none behind the WAF (no token-less cap: no request has a token)",
     {"AuthMode": "none", "AlarmEmail": "none", "AllowUnauthenticated": "yes"}, None),
    ("ApiGatewayLogsRole=existing", {**JWT, "ApiGatewayLogsRole": "existing"}, None),
    ("ApiGatewayLogsRole=none (access logs off)", {**JWT, "ApiGatewayLogsRole": "none"},
     "ApiGatewayLogsRole"),
    ("KmsKeyArn, a key ARN", {**JWT, "KmsKeyArn":
                              "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
     None),
    ("KmsKeyArn as an alias (IAM needs the key's ARN)",
     {**JWT, "KmsKeyArn": "alias/mcp-tasks"}, "KmsKeyArn"),
    ("KmsKeyArn as an alias ARN", {**JWT, "KmsKeyArn":
                                   "arn:aws:kms:eu-west-1:123456789012:alias/mcp-tasks"},
     "KmsKeyArn"),
    ("KmsKeyArn as a bare key id", {**JWT, "KmsKeyArn": "1234abcd-12ab-34cd-56ef-1234567890ab"},
     "KmsKeyArn"),
    ("DynamoWriteUnitsAlarmPerHour=0", {**JWT, "DynamoWriteUnitsAlarmPerHour": "0"},
     "DynamoWriteUnitsAlarmPerHour"),
    ("DynamoReadUnitsAlarmPerHour=10, every poll pages", {**JWT, "DynamoReadUnitsAlarmPerHour": "10"},
     "DynamoReadUnitsAlarmPerHour"),
    ("DeferralAlarmPer5Minutes=0, every deferral pages", {**JWT, "DeferralAlarmPer5Minutes": "0"},
     "DeferralAlarmPer5Minutes"),
    ("a budget that tells nobody", {**JWT, "BudgetMonthlyUsd": "100"},
     "BudgetMonthlyUsd needs BudgetEmail or AlarmTopicArn"),
    ("a budget e-mailed", {**JWT, "BudgetMonthlyUsd": "100", "BudgetEmail": "ops@example.com"}, None),
    ("a budget to the alarm topic",
     {**JWT, "BudgetMonthlyUsd": "100",
      "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:mcp-tasks-alarms"}, None),
    ("a budget of -5 dollars", {**JWT, "BudgetMonthlyUsd": "-5", "BudgetEmail": "ops@example.com"},
     "BudgetMonthlyUsd"),
    ("BudgetEmail with two addresses", {**JWT, "BudgetMonthlyUsd": "100",
                                        "BudgetEmail": "a@example.com,b@example.com"},
     "BudgetEmail"),
    ("BudgetEmail without a budget (ignored)", {**JWT, "BudgetEmail": "ops@example.com"}, None),
    ("jwt without AlarmEmail (the deploy asks where alarms go)",
     {k: v for k, v in JWT.items() if k != "AlarmEmail"}, "AlarmEmail"),
    ("AlarmEmail=none, deliberately (the outputs say so)", {**JWT, "AlarmEmail": "none"}, None),
    ("AlarmEmail empty", {**JWT, "AlarmEmail": ""}, "AlarmEmail"),
    ("AlarmEmail with two addresses", {**JWT, "AlarmEmail": "a@example.com,b@example.com"},
     "AlarmEmail"),
    ("ExistingTableName, a table an earlier stack kept", {**JWT, "ExistingTableName": "mcp-tasks-TasksTable-1AB2C3"},
     None),
    ("ExistingTableName as an ARN", {**JWT, "ExistingTableName":
                                     "arn:aws:dynamodb:eu-west-1:123456789012:table/t"},
     "ExistingTableName"),
    ("a parameter the template lacks", {**JWT, "MaxConcurrentJobs": "10"}, "do not exist"),
]


def load(path: str) -> dict:
    return cfn_yaml.load(path)


def check_value(name: str, p: dict, value: str) -> list[str]:
    """The constraint failures of one parameter value, worded like CloudFormation's."""
    out = []
    desc = p.get("ConstraintDescription")
    if "AllowedValues" in p and value not in [str(v) for v in p["AllowedValues"]]:
        out.append(f"Parameter '{name}' must be one of AllowedValues")
    if p.get("Type") == "Number":
        try:
            n = float(value)
        except ValueError:
            return [f"Parameter '{name}' must be a number"]
        if "MinValue" in p and n < float(p["MinValue"]):
            out.append(f"Parameter '{name}' must be a number not less than {p['MinValue']}")
        if "MaxValue" in p and n > float(p["MaxValue"]):
            out.append(f"Parameter '{name}' must be a number not greater than {p['MaxValue']}")
    elif p.get("Type") == "String":
        if "MinLength" in p and len(value) < int(p["MinLength"]):
            out.append(f"Parameter '{name}' must contain at least {p['MinLength']} characters")
        if "MaxLength" in p and len(value) > int(p["MaxLength"]):
            out.append(f"Parameter '{name}' must contain at most {p['MaxLength']} characters")
        if "AllowedPattern" in p and not re.fullmatch(p["AllowedPattern"], value):
            out.append(f"Parameter '{name}' failed to satisfy constraint: "
                       f"{desc or 'Must match pattern ' + p['AllowedPattern']}")
    return out


def evaluate(node, values: dict):
    """A Rules expression's value (a condition function, a Ref, or a literal)."""
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Ref":
            if arg not in values:
                raise ValueError(f"Rules: Ref {arg} is not a parameter")
            return values[arg]
        if fn == "Fn::Equals":
            a, b = (evaluate(x, values) for x in arg)
            return str(a) == str(b)
        if fn == "Fn::Not":
            return not evaluate(arg[0], values)
        if fn == "Fn::And":
            return all(evaluate(x, values) for x in arg)
        if fn == "Fn::Or":
            return any(evaluate(x, values) for x in arg)
        if fn == "Fn::Contains":
            items, item = evaluate(arg[0], values), evaluate(arg[1], values)
            return str(item) in [str(i) for i in items]
        if fn == "Condition" and "__conditions__" in values:
            return evaluate(values["__conditions__"][arg], values)
        raise ValueError(f"Rules: {fn} is not modelled here")
    if isinstance(node, list):
        return [evaluate(x, values) for x in node]
    return node


def deploy(template: dict, given: dict[str, str]) -> list[str]:
    """What stops a deploy with these parameter values (empty: it passes both checks)."""
    params = template.get("Parameters", {})
    unknown = sorted(set(given) - set(params))
    if unknown:
        return [f"Parameters: {unknown} do not exist in the template"]
    missing = sorted(k for k, p in params.items() if k not in given and "Default" not in p)
    if missing:
        return [f"Parameters: {missing} must have values"]
    values = {k: given.get(k, str(p.get("Default"))) for k, p in params.items()}
    errors = [e for k, p in params.items() for e in check_value(k, p, values[k])]
    if errors:
        return errors
    for name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and not evaluate(rule["RuleCondition"], values):
            continue
        for a in rule.get("Assertions", []):
            if not evaluate(a["Assert"], values):
                errors.append(f"Rules/{name}: {a.get('AssertDescription', 'assertion failed')}")
    for names, holds, says in RELATIONS:
        if all(n in params for n in names) and not holds({n: float(values[n]) for n in names}):
            errors.append(f"Relations: {says} (this script's check; CloudFormation has none)")
    return errors


def policy(template: dict) -> list[str]:
    out = []
    for name, p in template.get("Parameters", {}).items():
        kind = p.get("Type")
        if kind == "Number" and "AllowedValues" not in p and not {"MinValue", "MaxValue"} <= set(p):
            out.append(f"{name}: a Number parameter needs MinValue and MaxValue")
        elif kind == "String" and not {"AllowedValues", "AllowedPattern"} & set(p):
            out.append(f"{name}: a String parameter needs AllowedValues or AllowedPattern")
        if "Default" in p:
            out += [f"{name}: its Default fails: {e}" for e in check_value(name, p, str(p["Default"]))]
    return out


def streaming(template: dict) -> list[str]:
    out = []
    for name, r in template.get("Resources", {}).items():
        if r.get("Type") != "AWS::Serverless::Function":
            continue
        props = r.get("Properties", {})
        env = (props.get("Environment") or {}).get("Variables") or {}
        streams = str(env.get("RESPONSE_STREAMING", "")).lower() == "true"
        for ev, e in (props.get("Events") or {}).items():
            if e.get("Type") != "Api":
                continue
            mode = (e.get("Properties") or {}).get("ResponseTransferMode")
            if mode is not None and mode not in ("RESPONSE_STREAM", "BUFFERED"):
                out.append(f"{name}.{ev}: ResponseTransferMode {mode!r} is not RESPONSE_STREAM or "
                           "BUFFERED (SAM would ignore it and buffer)")
            elif streams and mode != "RESPONSE_STREAM":
                out.append(f"{name}.{ev}: the function streams (RESPONSE_STREAMING) but the event "
                           "lacks ResponseTransferMode: RESPONSE_STREAM")
    return out


def resolved(node, values: dict):
    """`node` with Fn::If and Ref resolved for one deploy (`values` as in `deploy`, with the
    template's Conditions under "__conditions__"); AWS::NoValue drops the item. Other
    functions are left as they are."""
    if isinstance(node, dict) and len(node) == 1:
        (fn, arg), = node.items()
        if fn == "Fn::If":
            name, yes, no = arg
            return resolved(yes if evaluate({"Condition": name}, values) else no, values)
        if fn == "Ref" and arg == "AWS::NoValue":
            return NO_VALUE
        if fn == "Ref" and arg in values:
            return values[arg]
    if isinstance(node, dict):
        out = {k: resolved(v, values) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}
    if isinstance(node, list):
        return [x for x in (resolved(v, values) for v in node) if x is not NO_VALUE]
    return node


NO_VALUE = object()


def default_deploy(template: dict, given: dict[str, str]) -> tuple[dict, dict]:
    """The resources a deploy with these values creates (Condition true, Fn::If resolved)."""
    params = template.get("Parameters", {})
    values = {k: given.get(k, str(p.get("Default"))) for k, p in params.items()}
    values["__conditions__"] = template.get("Conditions", {})
    made = {name: resolved(r, values) for name, r in template.get("Resources", {}).items()
            if "Condition" not in r or evaluate({"Condition": r["Condition"]}, values)}
    return made, values


def refs(node) -> set[str]:
    """Every resource or parameter name `node` refers to (Ref, Fn::GetAtt, Fn::Sub)."""
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str):
                out.add(v.split(".")[0])
            elif k == "Fn::GetAtt":
                out.add((v[0] if isinstance(v, list) else v.split(".")[0]))
            elif k == "Fn::Sub":
                text = v[0] if isinstance(v, list) else v
                names = {m.split(".")[0] for m in re.findall(r"\$\{([^!}][^}]*)\}", text)}
                if isinstance(v, list):
                    names -= set(v[1])  # the Sub's own variables
                    out |= refs(v[1])
                out |= names
            else:
                out |= refs(v)
    elif isinstance(node, list):
        for v in node:
            out |= refs(v)
    return out


def statements(resource: dict) -> list[dict]:
    """The IAM statements of a function's inline Policies."""
    out = []
    for pol in (resource.get("Properties", {}).get("Policies") or []):
        if isinstance(pol, dict):
            out += pol.get("Statement") or []
    return out


# What the default deploy (every default, AuthMode=jwt) must have against a hostile tenant's
# bill and callers without a token; each line names what it checks. A template that loses one
# fails the lint, whatever cfn-lint and the scenarios say.
def defences(template: dict) -> list[str]:
    out = []
    made, values = default_deploy(template, JWT)
    apis = [n for n, r in made.items() if r.get("Type") == "AWS::Serverless::Api"]
    fronted = {a for r in made.values() if r.get("Type") == "AWS::WAFv2::WebACLAssociation"
               for a in refs(r.get("Properties", {}).get("ResourceArn"))}
    for api in apis:
        if api not in fronted:
            out.append(f"{api}: no WAF web ACL in front of its stage by default: a token-less "
                       "flood spends the stage's throttle before any token is checked")
        if "AccessLogSetting" not in made[api].get("Properties", {}):
            out.append(f"{api}: no access logs (AccessLogSetting)")
    acls = [r for r in made.values() if r.get("Type") == "AWS::WAFv2::WebACL"]
    rules = [rule for acl in acls for rule in acl["Properties"].get("Rules", [])]
    keys = {rule.get("Statement", {}).get("RateBasedStatement", {}).get("AggregateKeyType")
            for rule in rules}
    if acls and "IP" not in keys:
        out.append("WebAcl: no rate-based rule per source address (AggregateKeyType IP)")
    if acls and not any("NotStatement" in (rule.get("Statement", {}).get("RateBasedStatement", {})
                                           .get("ScopeDownStatement") or {}) for rule in rules):
        out.append("WebAcl: no cap on requests without a bearer token")
    for name, r in made.items():
        if r.get("Type") != "AWS::Serverless::Function":
            continue
        props = r.get("Properties", {})
        env = (props.get("Environment") or {}).get("Variables") or {}
        for var, v in env.items():
            text = str(v)
            if "{{resolve:secretsmanager" in text or "{{resolve:ssm-secure" in text:
                out.append(f"{name}: {var} resolves a secret into the environment, readable by "
                           "whoever may read the function's configuration")
        for st in statements(r):
            acts = st.get("Action")
            acts = [acts] if isinstance(acts, str) else acts or []
            if any(a.startswith("secretsmanager:") for a in acts):
                res = st.get("Resource")
                if not isinstance(res, dict) or "Ref" not in res:
                    out.append(f"{name}: a secretsmanager statement on {res!r}, not one secret")
    mcp = made.get("McpFunction", {}).get("Properties", {})
    try:
        reserved = int(mcp.get("ReservedConcurrentExecutions", 0))
    except (TypeError, ValueError):
        reserved = 0
    if reserved <= 0:
        out.append("McpFunction: no reserved concurrency by default: streams (each up to "
                   "StreamSeconds) can take the whole account's executions")
    watched = set()
    for r in made.values():
        if r.get("Type") != "AWS::CloudWatch::Alarm":
            continue
        props = r.get("Properties", {})
        watched.add(str(props.get("MetricName")))
        for m in props.get("Metrics") or []:
            watched.add(str(m.get("Expression")))
            watched.add(str(((m.get("MetricStat") or {}).get("Metric") or {}).get("MetricName")))
    text = " ".join(watched)
    for metric in ("ThrottledRequests", "ConsumedWriteCapacityUnits", "ConsumedReadCapacityUnits",
                   "jobs_deferred"):
        if metric not in text:
            out.append(f"no alarm watches {metric}")
    budgeted, _ = default_deploy(template, {**JWT, "BudgetMonthlyUsd": "100",
                                            "BudgetEmail": "ops@example.com"})
    if any(r.get("Type") == "AWS::Budgets::Budget" for r in made.values()):
        out.append("a budget is deployed by default (BudgetMonthlyUsd should default to 0: off)")
    if not any(r.get("Type") == "AWS::Budgets::Budget" for r in budgeted.values()):
        out.append("BudgetMonthlyUsd=100 deploys no AWS::Budgets::Budget")
    return out + template_ops.operations(template, JWT, default_deploy, refs, evaluate, resolved)


def main(argv: list[str]) -> int:
    verbose = "--verbose" in argv
    argv = [a for a in argv if a != "--verbose"]
    if argv[:1] == ["--check"] and len(argv) in (2, 3):
        template = load(argv[1])
        failures = policy(template) + streaming(template)
        if argv[2:] == ["--scenarios"]:
            failures += defences(template)
            for what, given, expect in SCENARIOS:
                errors = deploy(template, given)
                ok = not errors if expect is None else any(expect in e for e in errors)
                seen = "; ".join(errors) or "deploys"
                if verbose:
                    print(f"  {'ok  ' if ok else 'FAIL'} {what}: {seen}")
                if not ok:
                    failures.append(f"scenario '{what}': expected "
                                    f"{'a deploy' if expect is None else repr(expect)}, got: {seen}")
        for f in failures:
            print(f"template_params: {f}", file=sys.stderr)
        return 1 if failures else 0
    if len(argv) >= 1 and not argv[0].startswith("-"):
        given = dict(a.split("=", 1) for a in argv[1:])
        errors = deploy(load(argv[0]), given)
        for e in errors:
            print(e)
        if not errors:
            print("passes parameter validation and Rules")
        return 1 if errors else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
