#!/usr/bin/env python3
"""What a task costs on AWS, per million tasks, from measured call counts.

    python3 bench/cost_model.py                 # the table (bench/lifecycles.json, list prices)
    python3 bench/cost_model.py --prices p.json # other prices (same keys as PRICES below)
    python3 bench/cost_model.py --markdown      # docs/costs.md's table
    python3 bench/cost_model.py --hostile       # what one hostile tenant costs an hour
    python3 bench/cost_model.py --check-docs    # docs/costs.md's tables are these (--write-docs)

Each lifecycle in bench/lifecycles.json gives, per task, what the deployed stack does: API
Gateway requests, Lambda invocations and billed milliseconds per function, DynamoDB read and
write request units, SQS requests — counted on the emulator by tests/aws_functions/ (its
`AWS CALLS` lines, `-- --nocapture`) and, where a lifecycle is longer than a test should run,
scaled from the measured per-second rates of the same code (each entry says which). Beside each,
the same work as AWS Step Functions: a Standard workflow (billed per state transition; a wait is
a Wait state, a CPU job a Lambda task) and an Express one (billed per request and duration, at
most 5 minutes, so not for the long lifecycles).

Prices: us-east-1 list prices as published (Lambda arm64, API Gateway REST, AWS WAF, DynamoDB
on-demand, SQS standard, Step Functions); free tiers ignored. Override with --prices.
"""
import argparse
import json
import pathlib

PRICES = {
    # Lambda, arm64: per GB-second of billed duration, and per request.
    "lambda_gb_s": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    # API Gateway REST API, first 333 million requests a month.
    "apigw_rest_request": 3.50 / 1e6,
    # AWS WAF (the template's Waf=on, the default): per request the web ACL inspects. The web
    # ACL and its three rules are a fixed $5 + 3 x $1 a month, not per task (README).
    "waf_request": 0.60 / 1e6,
    # DynamoDB on-demand: per write request unit (1 KB) and read request unit (4 KB strongly
    # consistent).
    "ddb_wru": 0.625 / 1e6,
    "ddb_rru": 0.125 / 1e6,
    # SQS standard queue, per request (64 KB).
    "sqs_request": 0.40 / 1e6,
    # Step Functions: Standard per state transition; Express per request and per GB-second
    # (billed in 64 MB steps, 100 ms minimum).
    "sfn_standard_transition": 25.0 / 1e6,
    "sfn_express_request": 1.00 / 1e6,
    "sfn_express_gb_s": 0.00001667,
}

# MemorySize of each function in template.yaml (MB).
MEMORY_MB = {"mcp": 256, "tasks": 256, "worker": 512, "sweep": 256}


# One tasks/get, measured: billed milliseconds of the tasks function.
POLL_MS = 9


def polls(seconds, estimate):
    """How many times Claude Code polls a task that takes `seconds`: once at creation, then
    every pollIntervalMs — 1 s, or a tenth of the time left between 1 s and 30 s when the job
    gives an estimate (`jobs::poll_interval_for`)."""
    n, t = 1, 0.0
    while t < seconds:
        left = seconds - t
        t += min(max(left / 10, 1.0), 30.0) if estimate else 1.0
        n += 1
    return n if seconds > 0 else 0


def with_polling(lc):
    """The lifecycle with its polls added (API requests, tasks invocations, reads)."""
    spec = lc.get("polling") or {"seconds": 0, "estimate": False}
    n = polls(spec["seconds"], spec["estimate"])
    out = json.loads(json.dumps(lc))
    out["polls"] = n
    out["api_requests"] += n
    out["ddb_rru"] += n
    tasks = out["lambda"].setdefault("tasks", {"invocations": 0, "ms": 0})
    tasks["invocations"] += n
    tasks["ms"] += n * POLL_MS
    return out


def lifecycle_cost(lc, p):
    """$ per task of one lifecycle, by component."""
    lam = 0.0
    requests = 0
    for fn, use in lc["lambda"].items():
        gb = MEMORY_MB[fn] / 1024
        lam += use["ms"] / 1000 * gb * p["lambda_gb_s"]
        requests += use["invocations"]
    return {
        "api": lc["api_requests"] * p["apigw_rest_request"],
        "waf": lc["api_requests"] * p["waf_request"],
        "lambda": lam + requests * p["lambda_request"],
        "dynamodb": lc["ddb_wru"] * p["ddb_wru"] + lc["ddb_rru"] * p["ddb_rru"],
        "sqs": lc["sqs_requests"] * p["sqs_request"],
    }


def step_functions_cost(lc, p):
    """The same work on Step Functions: the same API Gateway requests and endpoint functions
    (creating a task and answering the polls, which read the execution instead of a table),
    with the orchestration — queue, worker, task table — replaced by a Standard workflow
    (per state transition, and the Lambda doing the job's CPU work) or an Express one
    (per request and duration, at most 5 minutes). `None` where Express cannot run it."""
    sf = lc["step_functions"]
    front = lc["api_requests"] * (p["apigw_rest_request"] + p["waf_request"])
    for fn in ("mcp", "tasks"):
        use = lc["lambda"].get(fn)
        if use:
            front += use["ms"] / 1000 * MEMORY_MB[fn] / 1024 * p["lambda_gb_s"]
            front += use["invocations"] * p["lambda_request"]
    work = sf["lambda_ms"] / 1000 * MEMORY_MB["worker"] / 1024 * p["lambda_gb_s"]
    work += sf["lambda_invocations"] * p["lambda_request"]
    standard = front + work + sf["transitions"] * p["sfn_standard_transition"]
    express = None
    if sf.get("express_seconds") is not None:
        express = (
            front
            + work
            + p["sfn_express_request"]
            + max(sf["express_seconds"], 0.1) * 64 / 1024 * p["sfn_express_gb_s"]
        )
    return standard, express


# ---------------------------------------------------------------- one hostile tenant, an hour
#
# What one tenant that means to cost the stack as much as it can makes it spend in an hour, at
# the template's defaults, within every bound the stack sets (MaxActiveTasksPerTenant unfinished
# tasks, MaxRunningJobsPerTenant of them running, the API stage's rate). Each term is a count of
# calls times a unit price; the calls are the code's, as the emulator counted them
# (tests/aws_functions/: the `AWS CALLS` lines; record sizes from hostile.rs), and each constant
# below says where it comes from. Two columns: `before`, the code at c58fb92 (the published
# bound of $4.01/h left out the failed conditional writes, the quiet index, logs, WAF, X-Ray and
# the list requests' Lambda time), and `after`, this code (the quiet index key moves once a
# minute, not at every wake; a take reads the `#runs` item first and does not write it when the
# tenant's places are all taken).

RECORD_BYTES = 716  # measured (hostile.rs): a task record, `_meta` padding refused past 16 KiB
LIST_PAGE = 100  # legacy tasks/list: records a page (one consistent BatchGetItem)
LIST_MS = 50  # the mcp function's billed ms for one such page (BatchGetItem of 100 records)
PACE_S = 1.1  # a paced job parks its step for just over a second, then wakes
DEFER_DELAY_S = 5.0  # a waiting job's message comes back every 5 s (one per task: marked)
WAIT_RENEW_S = 150.0  # a waiting job's mark is renewed every 150 s (1 read, 1 write)
RUNS_ITEM_WRU = 3  # a full tenant's `#runs` item, ~2.7 KB (100 runs): 3 write units a write
WAKE_READS_RRU = 3  # a wake reads the task, its arguments and the `#runs` item (1 RRU each)
WAKE_WRITES_WRU = 2 * RUNS_ITEM_WRU + 2  # `#runs` take + release, lease + park of the record
QUIET_MOVE_WRU = 2  # a moved `quiet` index key: the old entry out, the new one in
QUIET_MOVES_BEFORE = 2  # per wake: the lease and the park each moved the exact mark
QUIET_MOVES_AFTER = PACE_S / 60  # per wake: the key (mark rounded to a minute) moves once a minute
DEFER_WRU = RUNS_ITEM_WRU  # before: a deferral's take, a conditional write failing on the item
DEFER_RRU = 1  # after: a consistent read of the item (under 4 KB) finds it full, no write
TAKE_READ_RRU = 1  # after: every take reads the item first, a wake's included
SQS_PER_MESSAGE = 1.2  # a delayed send, and a receive and delete shared with its batch of 10
WORKER_MS_PER_MESSAGE = {"wake": 5.0, "deferral": 2.0}  # its share of a 10-message invocation
LOG_BYTES_PER_MESSAGE = 1400  # the #37 recount: "work message handled" JSON line, its EMF
# line, and its share of the invocation's START/END/REPORT lines (CloudWatch Logs, ingested)
XRAY_TRACE = 5.00 / 1e6  # X-Ray, per trace recorded
WORKER_SAMPLED = 1.0  # Lambda's own sampling of the worker's SQS invocations: 1/s ...
WORKER_SAMPLED_RATE = 0.05  # ... and 5% of the rest
LOG_GB = 0.50  # CloudWatch Logs, per GB ingested
HOURS = 3600.0


def hostile_tenant(p, prices):
    """Rows (what, before $/h, after $/h, the calls) for one hostile tenant."""
    running = p["MaxRunningJobsPerTenant"]
    waiting = p["MaxActiveTasksPerTenant"] - running
    rate = p["ApiThrottleRateLimit"]
    wru, rru, sqs = prices["ddb_wru"], prices["ddb_rru"], prices["sqs_request"]
    worker_gb_s = prices["lambda_gb_s"] * MEMORY_MB["worker"] / 1024
    mcp_gb_s = prices["lambda_gb_s"] * MEMORY_MB["mcp"] / 1024
    log = LOG_BYTES_PER_MESSAGE / 1e9 * LOG_GB
    rows = []

    def message(kind):
        return (SQS_PER_MESSAGE * sqs + WORKER_MS_PER_MESSAGE[kind] / 1000 * worker_gb_s
                + 0.1 * prices["lambda_request"])

    # 1. The running places, each parking a paced step and waking every PACE_S.
    wakes = running * HOURS / PACE_S
    base = wakes * (WAKE_READS_RRU * rru + WAKE_WRITES_WRU * wru + message("wake"))
    rows.append(("running places: a paced job's wakes (reads, writes, SQS, worker)", base,
                 base + wakes * TAKE_READ_RRU * rru,
                 f"{running:.0f} jobs x {HOURS / PACE_S:,.0f} wakes/h, each {WAKE_READS_RRU} RRU "
                 f"(task, arguments, #runs) + {WAKE_WRITES_WRU} WRU (#runs take and release at "
                 f"{RUNS_ITEM_WRU}, lease, park) + {SQS_PER_MESSAGE} SQS + "
                 f"{WORKER_MS_PER_MESSAGE['wake']:g} ms of a 512 MB worker; after, + "
                 f"{TAKE_READ_RRU} RRU (the take's read of #runs)"))
    rows.append(("running places: the quiet index key a wake moves",
                 wakes * QUIET_MOVES_BEFORE * QUIET_MOVE_WRU * wru,
                 wakes * QUIET_MOVES_AFTER * QUIET_MOVE_WRU * wru,
                 f"{QUIET_MOVE_WRU} index WRU a move; {QUIET_MOVES_BEFORE} moves a wake (lease, "
                 f"park) before, once a minute ({QUIET_MOVES_AFTER:.3f} a wake) after"))
    # 2. The worker invocations its running jobs hold: at least half a batch each while work
    #    waits (an invocation under half a batch for 10 s hands its jobs over).
    held = min(p["WorkerMaxConcurrency"], -(-running // 5))
    rows.append(("worker invocations held by its running jobs",
                 held * HOURS * worker_gb_s, held * HOURS * worker_gb_s,
                 f"{held:.0f} invocations x 3600 s x 0.5 GB"))
    # 3. The API stage's whole rate spent on legacy tasks/list pages of its records.
    pages = rate * HOURS
    reads = pages * LIST_PAGE * -(-RECORD_BYTES // 4096) * rru
    front = pages * (prices["apigw_rest_request"] + prices["waf_request"])
    mcp = pages * (LIST_MS / 1000 * mcp_gb_s + prices["lambda_request"])
    rows.append(("tasks/list pages at the stage's rate",
                 reads + front + mcp, reads + front + mcp,
                 f"{rate:.0f}/s x ({LIST_PAGE} records x 1 RRU + API Gateway + WAF + "
                 f"{LIST_MS} ms of the 256 MB mcp function and its request)"))
    # 4. The tasks waiting for a place, each deferred every DEFER_DELAY_S, and its mark renewed.
    deferrals = waiting * HOURS / DEFER_DELAY_S
    defer_before = deferrals * (DEFER_WRU * wru + message("deferral"))
    defer_after = deferrals * (DEFER_RRU * rru + message("deferral"))
    renew = waiting * HOURS / WAIT_RENEW_S * (rru + (1 + QUIET_MOVE_WRU) * wru)
    rows.append(("waiting tasks' deferrals and mark renewals", defer_before + renew,
                 defer_after + renew,
                 f"{waiting:.0f} tasks x {HOURS / DEFER_DELAY_S:.0f}/h, each a failed conditional "
                 f"write of the #runs item ({DEFER_WRU} WRU) before, a consistent read of it "
                 f"({DEFER_RRU} RRU) after; + {SQS_PER_MESSAGE} SQS + "
                 f"{WORKER_MS_PER_MESSAGE['deferral']:g} ms; a renewal every {WAIT_RENEW_S:.0f} s "
                 f"(1 RRU + 1 WRU + a quiet key move)"))
    # 5. What the functions log for each of those messages.
    messages = wakes + deferrals
    rows.append(("CloudWatch Logs of wakes and deferrals", messages * log, messages * log,
                 f"{messages:,.0f} messages/h x {LOG_BYTES_PER_MESSAGE} B at ${LOG_GB}/GB"))
    # 6. X-Ray: a client that sends X-Amzn-Trace-Id with Sampled=1 has every request traced;
    #    the worker's SQS invocations are sampled by Lambda (1/s and 5%).
    invocations = messages / 10
    sampled = min(invocations, WORKER_SAMPLED * HOURS
                  + WORKER_SAMPLED_RATE * max(0.0, invocations - WORKER_SAMPLED * HOURS))
    xray = (pages + sampled) * XRAY_TRACE
    rows.append(("X-Ray traces (forced on every request; the worker's sampled)", xray, xray,
                 f"{pages:,.0f} forced + {sampled:,.0f} sampled traces/h at $5/M"))
    # 7. Declared tools' lambda targets: none at the defaults (ToolTargetFunctions is empty);
    #    with them, each running place's step is an invocation of the target besides the worker.
    targets = 0.0 if not p.get("ToolTargetFunctions") else float("nan")
    rows.append(("declared tools' lambda targets (none at the defaults)", targets, targets,
                 "ToolTargetFunctions empty; with targets, add their invocations and duration"))
    return rows


def hostile_markdown(prices):
    """docs/costs.md's hostile-tenant table."""
    import capacity_model  # the template's defaults, as the capacity table reads them

    p = capacity_model.template_defaults(capacity_model.ROOT / "template.yaml")
    rows = hostile_tenant(p, prices)
    tb, ta = sum(r[1] for r in rows), sum(r[2] for r in rows)
    out = ["| what one hostile tenant makes the stack spend | before, $/h | after, $/h | the calls |",
           "|---|---:|---:|---|"]
    out += [f"| {what} | {b:,.2f} | {a:,.2f} | {how} |" for what, b, a, how in rows]
    out.append(f"| **total** | **{tb:,.2f}** | **{ta:,.2f}** | after / before = {ta / tb:.3f} |")
    return "\n".join(out)


def print_hostile(prices, markdown):
    if markdown:
        print(hostile_markdown(prices))
        return
    import capacity_model

    p = capacity_model.template_defaults(capacity_model.ROOT / "template.yaml")
    rows = hostile_tenant(p, prices)
    tb, ta = sum(r[1] for r in rows), sum(r[2] for r in rows)
    for what, b, a, how in rows:
        print(f"{what:66} {b:8.2f} {a:8.2f}   {how}")
    print(f"{'TOTAL ($ per hour)':66} {tb:8.2f} {ta:8.2f}   after / before = {ta / tb:.3f}")


def lifecycle_rows(args, prices):
    lifecycles = [with_polling(lc) for lc in json.loads(args.lifecycles.read_text())["lifecycles"]]
    rows = []
    for lc in lifecycles:
        parts = lifecycle_cost(lc, prices)
        standard, express = step_functions_cost(lc, prices)
        name = lc["name"] + (f' ({lc["polls"]} polls)' if lc["polls"] else "")
        rows.append((name, parts, sum(parts.values()), standard, express))
    return rows


def lifecycle_markdown(rows):
    """docs/costs.md's lifecycle table."""
    million = 1e6
    out = ["| lifecycle | API Gateway | WAF | Lambda | DynamoDB | SQS | **total** | Step Functions Standard | Express |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, parts, total, standard, express in rows:
        cells = [f"${parts[k] * million:,.2f}" for k in ("api", "waf", "lambda", "dynamodb", "sqs")]
        ex = "—" if express is None else f"${express * million:,.2f}"
        out.append(f"| {name} | {' | '.join(cells)} | **${total * million:,.2f}** | ${standard * million:,.2f} | {ex} |")
    return "\n".join(out)


# docs/costs.md holds each generated table between these markers, and no other table row with
# dollar figures: `--check-docs` fails when a table differs from what this script prints (or a
# stale row sits outside one), `--write-docs` rewrites them.
def docs_blocks(args, prices):
    import capacity_model

    defaults = capacity_model.template_defaults(capacity_model.ROOT / "template.yaml")
    return {"lifecycles": lifecycle_markdown(lifecycle_rows(args, prices)),
            "hostile": hostile_markdown(prices),
            "capacity": capacity_model.markdown(capacity_model.bounds(defaults))}


def check_docs(path, blocks, write):
    import re

    text = path.read_text()
    problems = []
    for name, table in blocks.items():
        begin, end = f"<!-- cost_model.py {name}: generated, do not edit -->", f"<!-- end {name} -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            problems.append(f"{path}: needs exactly one {begin} ... {end}")
            continue
        head, rest = text.split(begin)
        body, tail = rest.split(end)
        if body.strip() != table:
            problems.append(f"{path}: the {name} table is not what bench/cost_model.py prints")
        text = head + begin + "\n" + table + "\n" + end + tail
    outside = re.sub(r"<!-- cost_model.py (\w+): generated.*?<!-- end \1 -->", "", text, flags=re.S)
    stale = [line for line in outside.splitlines() if line.startswith("|") and "$" in line]
    problems += [f"{path}: a row with dollar figures outside the generated tables: {line[:60]}"
                 for line in stale]
    if write:
        path.write_text(text)
        return [p for p in problems if "outside" in p]
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = pathlib.Path(__file__).resolve().parent
    ap.add_argument("--lifecycles", default=here / "lifecycles.json", type=pathlib.Path)
    ap.add_argument("--prices", type=pathlib.Path)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--hostile", action="store_true", help="one hostile tenant, an hour")
    ap.add_argument("--check-docs", action="store_true", help="docs/costs.md holds these tables")
    ap.add_argument("--write-docs", action="store_true", help="rewrite docs/costs.md's tables")
    args = ap.parse_args()
    prices = dict(PRICES)
    if args.prices:
        extra = json.loads(args.prices.read_text())
        unknown = set(extra) - set(PRICES)
        if unknown:
            raise SystemExit(f"unknown price keys: {sorted(unknown)}")
        prices.update(extra)
    if args.check_docs or args.write_docs:
        problems = check_docs(here.parent / "docs" / "costs.md", docs_blocks(args, prices),
                              args.write_docs)
        for p in problems:
            print(f"cost_model: {p}", file=__import__("sys").stderr)
        raise SystemExit(1 if problems else 0)
    if args.hostile:
        print_hostile(prices, args.markdown)
        return
    rows = lifecycle_rows(args, prices)
    if args.markdown:
        print(lifecycle_markdown(rows))
        return
    million = 1e6
    print(f"{'lifecycle':52} {'api':>9} {'waf':>8} {'lambda':>10} {'dynamodb':>9} {'sqs':>8} {'TOTAL':>10} {'SFN std':>10} {'SFN expr':>9}   ($ per million tasks)")
    for name, parts, total, standard, express in rows:
        ex = "-" if express is None else f"{express * million:9.2f}"
        print(
            f"{name:52} {parts['api'] * million:9.2f} {parts['waf'] * million:8.2f} {parts['lambda'] * million:10.2f} "
            f"{parts['dynamodb'] * million:9.2f} {parts['sqs'] * million:8.2f} "
            f"{total * million:10.2f} {standard * million:10.2f} {ex:>9}"
        )


if __name__ == "__main__":
    main()
