#!/usr/bin/env python3
"""How much one deployment holds, and which bound binds first.

    python3 bench/capacity_model.py                       # the template's defaults
    python3 bench/capacity_model.py WorkerMaxConcurrency=200 ApiThrottleRateLimit=500
    python3 bench/capacity_model.py --markdown            # docs/costs.md's table

The parameters are read from template.yaml (their Default), overridable as NAME=VALUE; the
per-request costs are the ones measured on the emulator for the cost model (bench/lifecycles.json:
a creation holds the mcp function ~30 ms, a poll holds the tasks function ~9 ms, a short worker
run ~40 ms). AWS's own limits are the published defaults of a fresh account: 1,000 concurrent
Lambda executions, API Gateway 10,000 requests/s, a DynamoDB partition ~1,000 writes/s, an SQS
standard queue ~120,000 messages in flight.

Each line is one bound: what it limits, its value for these parameters, and what a client sees
when it is reached. Nothing here is a promise of AWS performance; it is arithmetic on the
deployment's own bounds (Little's law: executions = rate x duration).
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Measured on the emulator (bench/lifecycles.json, "measured").
CREATE_MS = 30  # mcp function, one tools/call that creates a task
POLL_MS = 9  # tasks function, one tasks/get
SHORT_RUN_MS = 40  # worker, one run of a job that finishes or parks at once

# Published defaults of a fresh AWS account / service.
ACCOUNT_CONCURRENCY = 1000
PARTITION_WRITES = 1000  # DynamoDB: writes per second one partition takes
SQS_IN_FLIGHT = 120_000  # standard queue: received, not yet deleted
BATCH = 10  # the worker's SQS batch size (template: BatchSize 10)
# An invocation that runs fewer than half a batch's jobs for UNDERUSED_S while messages wait
# hands its jobs over (aws/lambda/worker.rs), so while work waits each invocation runs at
# least this many; a job that pauses for over a second parks and holds none.
MIN_PER_INVOCATION = BATCH // 2
UNDERUSED_S = 10
POLL_FLOOR_S = 1.0  # pollIntervalMs floor (Claude Code polls at it)
POLL_CEILING_S = 30.0  # the longest interval a job's estimate may ask for


def template_defaults(path):
    """Parameter name -> Default, from the template's Parameters section."""
    text = path.read_text()
    params = text.split("\nParameters:\n", 1)[1].split("\nResources:\n", 1)[0]
    out = {}
    for m in re.finditer(r"^  (\w+):\n((?:    .*\n|\s*\n)+)", params, re.M):
        d = re.search(r"^    Default: (.+)$", m.group(2), re.M)
        if d:
            v = d.group(1).strip().strip('"')
            out[m.group(1)] = float(v) if re.fullmatch(r"\d+(\.\d+)?", v) else v
    return out


def bounds(p):
    rate = p["ApiThrottleRateLimit"]
    workers = p["WorkerMaxConcurrency"]
    jobs = workers * BATCH
    per_tenant_jobs = p["MaxRunningJobsPerTenant"]
    unreserved = ACCOUNT_CONCURRENCY - p["McpReservedConcurrency"] - p["TasksReservedConcurrency"]
    mcp_exec = rate * CREATE_MS / 1000
    tasks_exec = rate * POLL_MS / 1000
    stream_exec = rate * p["StreamSeconds"]  # streams opened at the full rate, held to the end
    tenant_jobs = min(per_tenant_jobs, jobs)
    tenant_invocations = min(workers, -(-tenant_jobs // MIN_PER_INVOCATION))
    tenant_full = min(workers, -(-tenant_jobs // BATCH))
    tenant_steps = min(workers, tenant_jobs)
    rows = [
        ("requests per second per API stage, all tenants", f"{rate:.0f}/s (+{p['ApiThrottleBurstLimit']:.0f} burst)",
         "ApiThrottleRateLimit / BurstLimit (tool calls and, without DomainName, polls share the mcp stage)",
         "429 from API Gateway before any function runs"),
        ("creations per second, one tenant, per mcp instance", f"{p['TaskCreatePerSecond']:.0f}/s (+{p['TaskCreateBurst']:.0f} burst)",
         "TaskCreatePerSecond / TaskCreateBurst", "a tool error with retryAfterMs"),
        ("tasks polled at once at the 1 s floor / at 30 s", f"{rate * POLL_FLOOR_S:.0f} / {rate * POLL_CEILING_S:.0f}",
         "the poll rate x pollIntervalMs (a job that says how long it needs is polled less)", "polls beyond the rate get 429"),
        ("jobs running at once, all tenants", f"{jobs:.0f} (at least {workers * MIN_PER_INVOCATION:.0f} while work waits)",
         f"WorkerMaxConcurrency ({workers:.0f}) x batch {BATCH}; an invocation running under half a batch for "
         f"{UNDERUSED_S} s while work waits hands its jobs over, and a job pausing over a second parks",
         "work waits in the queue, never lost (the oldest message ages)"),
        ("jobs running at once, one tenant", f"{min(per_tenant_jobs, jobs):.0f}",
         "MaxRunningJobsPerTenant", "its messages are re-sent with a 5 s delay, one per task (marked: the sweep leaves them); other tenants run"),
        ("worker invocations one tenant's running jobs hold", f"{tenant_invocations:.0f} of {workers:.0f} (at full batches {tenant_full:.0f})",
         f"MaxRunningJobsPerTenant / {MIN_PER_INVOCATION} while work waits, once its jobs reach a step's end and hand over",
         "the rest run the other tenants"),
        ("worker invocations one tenant's slow steps hold", f"{tenant_steps:.0f} of {workers:.0f}",
         "MaxRunningJobsPerTenant, one step a batch: a step in flight cannot hand its invocation over "
         "(the template's checks keep it below WorkerMaxConcurrency)",
         f"{-(-workers // max(tenant_steps, 1)):.0f} such tenants hold every invocation; the others' work waits in the queue up to a step's length"),
        ("worker capacity for jobs of one ~40 ms run", f"{jobs / (SHORT_RUN_MS / 1000):,.0f}/s",
         "running places / run time (far above the request bound: creations bind first)", "queue backlog grows"),
        ("unfinished tasks, one tenant", f"{p['MaxActiveTasksPerTenant']:.0f}",
         "MaxActiveTasksPerTenant", "a tool error (active_tasks): wait or cancel"),
        ("tasks sleeping or waiting for input", "no compute bound",
         "DynamoDB items and delayed SQS messages only (the sweep never reads them)", "—"),
        ("Lambda executions used at the API rate: mcp / tasks / worker", f"{mcp_exec:.1f} / {tasks_exec:.1f} / {workers:.0f}",
         f"rate x duration; {unreserved:.0f} unreserved of {ACCOUNT_CONCURRENCY}", "throttles (Throttles metric), 5xx to the client"),
        ("mcp executions streams hold, all tenants", f"{min(stream_exec, p['MaxStreams']):.0f} of {p['McpReservedConcurrency']:.0f}",
         f"MaxStreams ({p['MaxStreams']:.0f}, below McpReservedConcurrency); MaxStreamsPerTenant {p['MaxStreamsPerTenant']:.0f} per tenant "
         f"(opened at the full rate and held StreamSeconds, streams would want {stream_exec:.0f})",
         f"429 past a tenant's streams or MaxStreams; the other {p['McpReservedConcurrency'] - min(stream_exec, p['MaxStreams']):.0f} executions stay for short requests"),
        ("task starts + ends per second, one tenant", f"~{PARTITION_WRITES // 2}/s",
         "its tenant_active index partition (~1,000 writes/s)", "DynamoDB throttles that tenant's writes"),
        ("work messages in flight", f"{SQS_IN_FLIGHT:,}",
         "SQS standard queue; the worker holds at most " + f"{jobs:.0f}", "— (far above the worker bound)"),
    ]
    return rows


def markdown(rows):
    """docs/costs.md's capacity table."""
    out = ["| what | holds | bounded by | at the bound |", "|---|---:|---|---|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="NAME=VALUE template parameters")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--template", default=str(ROOT / "template.yaml"))
    args = ap.parse_args()
    p = template_defaults(pathlib.Path(args.template))
    for o in args.overrides:
        name, _, value = o.partition("=")
        if name not in p:
            sys.exit(f"unknown template parameter {name!r}")
        p[name] = float(value)
    needed = ["ApiThrottleRateLimit", "ApiThrottleBurstLimit", "WorkerMaxConcurrency",
              "MaxRunningJobsPerTenant", "MaxActiveTasksPerTenant", "TaskCreatePerSecond",
              "TaskCreateBurst", "McpReservedConcurrency", "TasksReservedConcurrency",
              "StreamSeconds", "MaxStreamsPerTenant", "MaxStreams"]
    missing = [n for n in needed if not isinstance(p.get(n), float)]
    if missing:
        sys.exit(f"template.yaml lacks a numeric Default for: {', '.join(missing)}")
    rows = bounds(p)
    if args.markdown:
        print(markdown(rows))
    else:
        w = max(len(r[0]) for r in rows)
        for what, holds, by, at in rows:
            print(f"{what:<{w}}  {holds:>18}  {by}  ->  {at}", flush=True)


if __name__ == "__main__":
    main()
