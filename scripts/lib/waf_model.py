"""A model of the front door's WAF rules, evaluated against requests, for the template lint
(template_params.py --check --scenarios calls `front_door`).

AWS WAF itself cannot run offline; this reads the web ACL's rule JSON as the default deploy
resolves it and evaluates the statements the template uses (ByteMatchStatement on a single
header or the URI path, with LOWERCASE or NONE; NotStatement, AndStatement, OrStatement;
RateBasedStatement keyed on IP, CONSTANT or CUSTOM_KEYS of headers and IP, with a scope-down
statement). Anything else is refused, so the model never silently passes a rule it cannot
read. A flood sends as fast as it can: every rate bucket its requests fall in is full, and a
source gets through at most its even share of the tightest bucket it falls in.
"""

from __future__ import annotations


class Unmodelled(ValueError):
    pass


def _field(stmt: dict, req: dict) -> str | None:
    field = stmt.get("FieldToMatch") or {}
    if "SingleHeader" in field:
        return req["headers"].get(field["SingleHeader"]["Name"].lower())
    if "UriPath" in field:
        return req["path"]
    raise Unmodelled(f"FieldToMatch {field!r}")


def _transform(value: str, transforms: list[dict]) -> str:
    for t in sorted(transforms or [], key=lambda t: t.get("Priority", 0)):
        kind = t.get("Type")
        if kind == "LOWERCASE":
            value = value.lower()
        elif kind != "NONE":
            raise Unmodelled(f"TextTransformation {kind}")
    return value


def matches(stmt: dict, req: dict) -> bool:
    (kind, body), = stmt.items()
    if kind == "NotStatement":
        return not matches(body["Statement"], req)
    if kind == "AndStatement":
        return all(matches(s, req) for s in body["Statements"])
    if kind == "OrStatement":
        return any(matches(s, req) for s in body["Statements"])
    if kind == "ByteMatchStatement":
        value = _field(body, req)
        if value is None:
            return False
        value = _transform(value, body.get("TextTransformations"))
        want = str(body["SearchString"])
        return {
            "EXACTLY": value == want,
            "STARTS_WITH": value.startswith(want),
            "ENDS_WITH": value.endswith(want),
            "CONTAINS": want in value,
        }[body["PositionalConstraint"]]
    raise Unmodelled(kind)


def bucket(rule: dict, req: dict):
    """The rate bucket `req` counts in under `rule`, or None when the rule does not count it."""
    rate = (rule.get("Statement") or {}).get("RateBasedStatement")
    if rate is None:
        raise Unmodelled(f"rule {rule.get('Name')}: not rate-based")
    scope = rate.get("ScopeDownStatement")
    if scope is not None and not matches(scope, req):
        return None
    kind = rate.get("AggregateKeyType")
    if kind == "IP":
        return (rule["Name"], req["ip"])
    if kind == "CONSTANT":
        return (rule["Name"],)
    if kind == "CUSTOM_KEYS":
        parts = []
        for key in rate.get("CustomKeys") or []:
            if "IP" in key:
                parts.append(req["ip"])
            elif "Header" in key:
                v = req["headers"].get(key["Header"]["Name"].lower())
                if v is None:
                    return None  # WAF skips a request without the key
                parts.append(_transform(v, key["Header"].get("TextTransformations")))
            else:
                raise Unmodelled(f"CustomKey {key!r}")
        return (rule["Name"], *parts)
    raise Unmodelled(f"AggregateKeyType {kind}")


def _limit(rule: dict) -> float:
    return float(rule["Statement"]["RateBasedStatement"]["Limit"])


def flood(rules: list[dict], sources: list[dict]) -> tuple[float, set]:
    """Requests a minute a flood of `sources` (each sending without pause) gets through, and
    the buckets it fills."""
    counted = [[(r, bucket(r, s)) for r in rules] for s in sources]
    sharers: dict = {}
    for per_source in counted:
        for r, b in per_source:
            if b is not None:
                sharers[b] = sharers.get(b, 0) + 1
    total, full = 0.0, set()
    for per_source in counted:
        shares = [_limit(r) / sharers[b] for r, b in per_source if b is not None]
        if not shares:
            return float("inf"), full
        total += min(shares)
        full |= {b for _, b in per_source if b is not None}
    return total, full


def request(ip: str, path: str = "/mcp", authorization: str | None = None) -> dict:
    headers = {} if authorization is None else {"authorization": authorization}
    return {"ip": ip, "path": path, "headers": headers}


def front_door(made: dict, values: dict, report=None) -> list[str]:
    """The default deploy's web ACL against the floods README "The front door" names."""
    out = []
    acls = [r for r in made.values() if r.get("Type") == "AWS::WAFv2::WebACL"]
    if not acls:
        return ["no web ACL in the default deploy"]
    rules = acls[0]["Properties"].get("Rules", [])
    for r in rules:
        lim = r["Statement"]["RateBasedStatement"]["Limit"]
        r["Statement"]["RateBasedStatement"]["Limit"] = float(lim)
    stage = float(values["ApiThrottleRateLimit"])
    attackers = [f"203.0.113.{i}" for i in range(1, 5)]
    try:
        forged, _ = flood(rules, [request(ip, authorization="Bearer x") for ip in attackers])
        varied, _ = flood(rules, [request(ip, authorization=f"Bearer forged-{ip}-{n}")
                                  for ip in attackers for n in range(50)])
        _, filled = flood(rules, [request("198.51.100.7")])
        discovery = request("192.0.2.99", "/.well-known/oauth-protected-resource")
        first = request("192.0.2.99")
        blocked = [b for req in (discovery, first) for r in rules
                   if (b := bucket(r, req)) is not None and b in filled]
    except Unmodelled as e:
        return [f"WebAcl: the lint's WAF model cannot read a rule ({e})"]
    for what, per_minute in (("a forged constant header", forged),
                             ("forged headers, a new one each request", varied)):
        per_second = min(per_minute / 60, stage)
        if report:
            report(f"front door: {what} from 4 addresses takes {per_second:g}/s of the stage's "
                   f"{stage:g}/s; the tenants keep {stage - per_second:g}/s")
        if per_second > stage / 2:
            out.append(f"WebAcl: {what} from 4 addresses gets {per_second:g}/s through, over "
                       f"half the stage's {stage:g}/s: the tenants' requests are throttled")
    if blocked:
        out.append("WebAcl: a token-less flood from one address blocks a new client's discovery "
                   f"from another (shared buckets: {sorted(map(str, blocked))})")
    return out
