#!/usr/bin/env python3
"""What a task costs on AWS, per million tasks, from measured call counts.

    python3 bench/cost_model.py                 # the table (bench/lifecycles.json, list prices)
    python3 bench/cost_model.py --prices p.json # other prices (same keys as PRICES below)
    python3 bench/cost_model.py --markdown      # docs/costs.md's table
    python3 bench/cost_model.py --hostile       # what one hostile tenant costs an hour

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
    # ACL and its two rules are a fixed $5 + 2 x $1 a month, not per task (README).
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
# tasks, MaxRunningJobsPerTenant of them running, the API stage's rate), before and after the
# round that bounded `_meta`, marked waiting jobs and released underused invocations. Active-task
# reservations are taken as exact and `#runs` contention as deferring without spending SQS
# deliveries (other rounds). Figures marked "measured" come from tests/aws_functions/hostile.rs.

# Measured: the task record a checkpoint rewrites, with 200 KB of `_meta` padding (before) and
# with any padding (after; refused past 16 KiB, and a task keeps 43 bytes of capabilities).
RECORD_PADDED_BYTES = 200_696
RECORD_BYTES = 716
CHECKPOINT_EVERY_S = 1.0  # a running job's checkpoints: at most one a second
LIST_PAGE = 100  # legacy tasks/list: records a page (one consistent BatchGetItem)
DEFER_DELAY_S = 5.0  # a waiting job's message comes back every 5 s
WAIT_RENEW_S = 150.0  # after: its waiting mark is renewed (1 read, 1 write, 1 index write)
SWEEP_STALE_S = 300.0  # SWEEP_STALE_SECONDS (the template leaves the default)
MAX_SWEEP_BACKOFF = 5  # engine/sweep.rs: re-sends back off up to 2^5 windows
RUNS_ITEM_RRU = 1  # a full tenant's `#runs` item (100 runs, ~3 KB): one consistent read
RUNS_ITEM_WCU = 3  # and each take or release rewrites it
DEFERRAL_WORKER_MS = 2.0  # assumed: a deferral's share of its 10-record invocation
WAKE_WORKER_MS = 5.0  # assumed: a parked job's wake-and-park share of its invocation
HOURS = 3600.0


def sweep_copies(age_s):
    """How many messages a task waiting `age_s` had before this round: its own, plus one for
    every sweep re-send (the first a stale window after its last update, then each one
    window x 2^k later, k up to MAX_SWEEP_BACKOFF), each then deferred on its own."""
    copies, at, k = 1, SWEEP_STALE_S, 1
    while at <= age_s:
        copies += 1
        at += SWEEP_STALE_S * 2 ** min(k, MAX_SWEEP_BACKOFF)
        k += 1
    return copies


def hostile_tenant(p, prices):
    """Rows (what, before $/h, after $/h, arithmetic) for one hostile tenant."""
    running = p["MaxRunningJobsPerTenant"]
    waiting = p["MaxActiveTasksPerTenant"] - running
    rate = p["ApiThrottleRateLimit"]
    workers = p["WorkerMaxConcurrency"]
    ttl = p["TaskTtlSeconds"]
    wru, rru, sqs = prices["ddb_wru"], prices["ddb_rru"], prices["sqs_request"]
    gb_s = prices["lambda_gb_s"] * MEMORY_MB["worker"] / 1024
    rows = []

    def wcu(b):
        return -(-b // 1024)

    def rcu(b):
        return -(-b // 4096)

    # 1. The running places, each either checkpointing every second or, after this round,
    #    parking a paced step just over a second (each wake: task, arguments and `#runs` read;
    #    `#runs` take and release, lease and park written; a message sent, received, deleted).
    ckpt = running * HOURS / CHECKPOINT_EVERY_S
    before = ckpt * wcu(RECORD_PADDED_BYTES) * wru
    after_ckpt = ckpt * wcu(RECORD_BYTES) * wru
    wakes = running * HOURS / 1.1
    after_park = wakes * ((3 * RUNS_ITEM_RRU) * rru + (2 * RUNS_ITEM_WCU + 2) * wru + 1.2 * sqs
                          + WAKE_WORKER_MS / 1000 * gb_s + 0.1 * prices["lambda_request"])
    rows.append(("running places: checkpoints (before: padded records) / paced parks (after)",
                 before, max(after_ckpt, after_park),
                 f"{running:.0f} jobs x 1 checkpoint/s x {wcu(RECORD_PADDED_BYTES)} WCU before; after the "
                 f"dearer of 1 WCU a checkpoint (${after_ckpt:.2f}) and a wake every ~1.1 s "
                 f"(3 RRU + {2 * RUNS_ITEM_WCU + 2} WCU + 1.2 SQS, ${after_park:.2f})"))

    # 2. The worker invocations those jobs hold (one a batch before, at worst; after, at least
    #    half a batch each while work waits).
    held_before = min(workers, running)
    held_after = min(workers, -(-running // 5))
    rows.append(("worker invocations held by its running jobs",
                 held_before * HOURS * gb_s, held_after * HOURS * gb_s,
                 f"{held_before:.0f} then {held_after:.0f} invocations x 3600 s x 0.5 GB"))

    # 3. The API stage's whole rate spent on legacy tasks/list pages of its records.
    pages = rate * HOURS
    api = pages * prices["apigw_rest_request"]
    rows.append(("tasks/list pages at the stage's rate (reads)",
                 pages * LIST_PAGE * rcu(RECORD_PADDED_BYTES) * rru + api,
                 pages * LIST_PAGE * rcu(RECORD_BYTES) * rru + api,
                 f"{rate:.0f}/s x {LIST_PAGE} records x {rcu(RECORD_PADDED_BYTES)} then "
                 f"{rcu(RECORD_BYTES)} RRU, + API Gateway"))

    # 4. The tasks waiting for a place, each deferred every 5 s: before, as many times over as
    #    the sweep had copied it (averaged over a task's life, its TTL); after, once, plus the
    #    renewal of its mark.
    samples = 1000
    mean_copies = sum(sweep_copies(ttl * (i + 0.5) / samples) for i in range(samples)) / samples
    per_deferral = (1.2 * sqs + RUNS_ITEM_RRU * rru + DEFERRAL_WORKER_MS / 1000 * gb_s
                    + 0.1 * prices["lambda_request"])
    deferrals = waiting * HOURS / DEFER_DELAY_S
    renewals = waiting * HOURS / WAIT_RENEW_S * (rru + 2 * wru)
    rows.append(("waiting tasks' deferrals",
                 deferrals * mean_copies * per_deferral, deferrals * per_deferral + renewals,
                 f"{waiting:.0f} tasks x {HOURS / DEFER_DELAY_S:.0f}/h x {mean_copies:.1f} copies "
                 f"(mean over a {ttl / 3600:.0f} h life; {sweep_copies(ttl)} at its end) then 1, "
                 f"each 1.2 SQS + 1 RRU + worker time; after + a renewal every {WAIT_RENEW_S:.0f} s"))
    return rows


def print_hostile(prices, markdown):
    import capacity_model  # the template's defaults, as the capacity table reads them

    p = capacity_model.template_defaults(capacity_model.ROOT / "template.yaml")
    rows = hostile_tenant(p, prices)
    tb, ta = sum(r[1] for r in rows), sum(r[2] for r in rows)
    if markdown:
        print("| what one hostile tenant makes the stack spend | before, $/h | after, $/h | arithmetic |")
        print("|---|---:|---:|---|")
        for what, b, a, how in rows:
            print(f"| {what} | {b:,.2f} | {a:,.2f} | {how} |")
        print(f"| **total** | **{tb:,.2f}** | **{ta:,.2f}** | after / before = {ta / tb:.3f} |")
        return
    for what, b, a, how in rows:
        print(f"{what:78} {b:9.2f} {a:8.2f}   {how}")
    print(f"{'TOTAL ($ per hour)':78} {tb:9.2f} {ta:8.2f}   after / before = {ta / tb:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = pathlib.Path(__file__).resolve().parent
    ap.add_argument("--lifecycles", default=here / "lifecycles.json", type=pathlib.Path)
    ap.add_argument("--prices", type=pathlib.Path)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--hostile", action="store_true", help="one hostile tenant, an hour")
    args = ap.parse_args()
    prices = dict(PRICES)
    if args.prices:
        extra = json.loads(args.prices.read_text())
        unknown = set(extra) - set(PRICES)
        if unknown:
            raise SystemExit(f"unknown price keys: {sorted(unknown)}")
        prices.update(extra)
    if args.hostile:
        print_hostile(prices, args.markdown)
        return
    lifecycles = [with_polling(lc) for lc in json.loads(args.lifecycles.read_text())["lifecycles"]]
    rows = []
    for lc in lifecycles:
        parts = lifecycle_cost(lc, prices)
        total = sum(parts.values())
        standard, express = step_functions_cost(lc, prices)
        name = lc["name"] + (f' ({lc["polls"]} polls)' if lc["polls"] else "")
        rows.append((name, parts, total, standard, express))
    million = 1e6
    if args.markdown:
        print("| lifecycle | API Gateway | WAF | Lambda | DynamoDB | SQS | **total** | Step Functions Standard | Express |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, parts, total, standard, express in rows:
            cells = [f"${parts[k] * million:,.2f}" for k in ("api", "waf", "lambda", "dynamodb", "sqs")]
            ex = "—" if express is None else f"${express * million:,.2f}"
            print(f"| {name} | {' | '.join(cells)} | **${total * million:,.2f}** | ${standard * million:,.2f} | {ex} |")
        return
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
