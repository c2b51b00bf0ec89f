#!/usr/bin/env python3
"""What a task costs on AWS, per million tasks, from measured call counts.

    python3 bench/cost_model.py                 # the table (bench/lifecycles.json, list prices)
    python3 bench/cost_model.py --prices p.json # other prices (same keys as PRICES below)
    python3 bench/cost_model.py --markdown      # docs/costs.md's table

Each lifecycle in bench/lifecycles.json gives, per task, what the deployed stack does: API
Gateway requests, Lambda invocations and billed milliseconds per function, DynamoDB read and
write request units, SQS requests — counted on the emulator by tests/aws_functions/ (its
`AWS CALLS` lines, `-- --nocapture`) and, where a lifecycle is longer than a test should run,
scaled from the measured per-second rates of the same code (each entry says which). Beside each,
the same work as AWS Step Functions: a Standard workflow (billed per state transition; a wait is
a Wait state, a CPU job a Lambda task) and an Express one (billed per request and duration, at
most 5 minutes, so not for the long lifecycles).

Prices: us-east-1 list prices as published (Lambda arm64, API Gateway REST, DynamoDB on-demand,
SQS standard, Step Functions); free tiers ignored. Override with --prices.
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
    front = lc["api_requests"] * p["apigw_rest_request"]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = pathlib.Path(__file__).resolve().parent
    ap.add_argument("--lifecycles", default=here / "lifecycles.json", type=pathlib.Path)
    ap.add_argument("--prices", type=pathlib.Path)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    prices = dict(PRICES)
    if args.prices:
        extra = json.loads(args.prices.read_text())
        unknown = set(extra) - set(PRICES)
        if unknown:
            raise SystemExit(f"unknown price keys: {sorted(unknown)}")
        prices.update(extra)
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
        print("| lifecycle | API Gateway | Lambda | DynamoDB | SQS | **total** | Step Functions Standard | Express |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, parts, total, standard, express in rows:
            cells = [f"${parts[k] * million:,.2f}" for k in ("api", "lambda", "dynamodb", "sqs")]
            ex = "—" if express is None else f"${express * million:,.2f}"
            print(f"| {name} | {' | '.join(cells)} | **${total * million:,.2f}** | ${standard * million:,.2f} | {ex} |")
        return
    print(f"{'lifecycle':52} {'api':>9} {'lambda':>10} {'dynamodb':>9} {'sqs':>8} {'TOTAL':>10} {'SFN std':>10} {'SFN expr':>9}   ($ per million tasks)")
    for name, parts, total, standard, express in rows:
        ex = "-" if express is None else f"{express * million:9.2f}"
        print(
            f"{name:52} {parts['api'] * million:9.2f} {parts['lambda'] * million:10.2f} "
            f"{parts['dynamodb'] * million:9.2f} {parts['sqs'] * million:8.2f} "
            f"{total * million:10.2f} {standard * million:10.2f} {ex:>9}"
        )


if __name__ == "__main__":
    main()
