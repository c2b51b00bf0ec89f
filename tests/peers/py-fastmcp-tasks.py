"""Peer: the fastmcp-tasks 4.1.4 *client* (PyPI `fastmcp-tasks` + `fastmcp`, pinned in
scripts/install-peers.sh) drives 2026-07-28 tasks (SEP-2663) on a running mcp-tasks server.

Importing `fastmcp_tasks` registers its client extension on every `fastmcp.Client`: the client
declares `io.modelcontextprotocol/tasks` on each request, resolves `resultType: "task"` by polling
`tasks/get`, answers `input_required` through the client's `elicitation_handler` with
`tasks/update`, and `fastmcp_tasks.call_tool_task` returns an explicit `ToolTask` handle
(status / wait / result / cancel).

Checks: negotiation, a task-augmented `hash_chain` (CreateTaskResult fields, polled to
completion, digest recomputed here), the same through the transparent `call_tool`, a
`confirm_action` task parked in `input_required` answered by the elicitation handler (accept and
decline, each reflected in the result), a cancelled `wait` task, a failed task-only tool, and a
synchronous tool error. Usage: python py-fastmcp-tasks.py <server url>
"""

import asyncio
import hashlib
import sys
import time

import fastmcp_tasks.client as tasks_client  # importing fastmcp_tasks registers the extension
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp.exceptions import ToolError
from fastmcp_tasks import call_tool_task

failures = 0
passed = 0


def check(cond: bool, what: str, detail: object = None) -> None:
    global failures, passed
    if cond:
        passed += 1
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}: {detail!r}")


def hash_chain(seed: str, rounds: int) -> str:
    cur = hashlib.sha256(seed.encode()).digest()
    for _ in range(1, rounds):
        cur = hashlib.sha256(cur).digest()
    return cur.hex()


# The elicitation handler the client uses for a task's `inputRequests`: records each prompt and
# accepts with confirm=true, except for targets named "keep", which it declines.
prompts: list[tuple[str, dict]] = []

# Counts the library's tasks/get requests, to tell a transparently resolved task from an inline
# answer (the extension's poll loop calls this module-level sender).
task_gets = 0
_send_get = tasks_client._send_get


async def counting_send_get(*args, **kwargs):
    global task_gets
    task_gets += 1
    return await _send_get(*args, **kwargs)


tasks_client._send_get = counting_send_get


async def elicit(message, response_type, params, context):
    prompts.append((message, dict(params.requested_schema)))
    if message.endswith("keep?"):
        return ElicitResult(action="decline")
    return {"confirm": True}


async def main(url: str) -> None:
    async with Client(url, elicitation_handler=elicit, name="fastmcp-tasks-peer") as client:
        check(client.session.protocol_version == "2026-07-28", "negotiated 2026-07-28",
              client.session.protocol_version)
        names = {t.name for t in await client.list_tools()}
        check({"hash_chain", "wait", "confirm_action", "lint_json", "unreliable_upstream"} <= names,
              "tools/list", sorted(names))

        # 1. A task-augmented call through the explicit handle: CreateTaskResult, polled, result.
        rounds = 400_000
        task = await call_tool_task(client, "hash_chain", {"seed": "fastmcp", "rounds": rounds})
        created = task.create_result
        check(created.result_type == "task" and created.status == "working"
              and created.task_id.startswith("tsk_"),
              "hash_chain: tools/call answered with a CreateTaskResult (working)", created)
        check("ttl_ms" in created.model_fields_set and (created.poll_interval_ms or 0) > 0,
              "hash_chain: CreateTaskResult carries ttlMs and pollIntervalMs", created)
        first = await task.status()
        check(first.task_id == created.task_id and first.status in ("working", "completed")
              and first.result_type == "complete",
              "hash_chain: tasks/get right after creation", first)
        final = await task.wait(timeout=120)
        check(final.status == "completed" and final.result is not None
              and final.result.get("isError") is False,
              "hash_chain: polled to completed with an inlined result", final)
        res = await task.result()
        want = hash_chain("fastmcp", rounds)
        check(res.structured_content is not None
              and res.structured_content.get("digest") == want
              and res.structured_content.get("rounds") == rounds,
              "hash_chain: task result digest recomputed exactly", res.structured_content)
        check(want in res.content[0].text, "hash_chain: text content names the digest", res.content)

        # 2. The transparent path: call_tool on an optional-task tool; the extension polls.
        gets_before = task_gets
        res = await client.call_tool("hash_chain", {"seed": "transparent", "rounds": 250_000})
        check((res.structured_content or {}).get("digest") == hash_chain("transparent", 250_000)
              and task_gets > gets_before,
              "hash_chain via call_tool (task resolved by the client extension's tasks/get polls)",
              (task_gets - gets_before, res))

        # 3. input_required: the task parks, the elicitation handler answers, tasks/update resumes.
        prompts.clear()
        task = await call_tool_task(client, "confirm_action", {"action": "deploy", "target": "prod"})
        parked = await task.wait(state="input_required", timeout=30)
        reqs = parked.input_requests or {}
        req = next(iter(reqs.values()), {})
        check(len(reqs) == 1 and req.get("method") == "elicitation/create"
              and req.get("params", {}).get("message") == "deploy prod?"
              and "confirm" in req.get("params", {}).get("requestedSchema", {}).get("properties", {}),
              "confirm_action: task parked in input_required with an elicitation request", parked)
        res = await task.result()
        check(len(prompts) == 1 and prompts[0][0] == "deploy prod?",
              "confirm_action: the client's elicitation handler was asked once", prompts)
        check(not res.is_error and res.content[0].text == "Confirmed: deploy prod.",
              "confirm_action: accepted answer reflected in the task result", res)
        done = await task.status()
        check(done.status == "completed" and not done.input_requests,
              "confirm_action: task completed, no outstanding input requests", done)

        # Declined through the transparent call_tool path.
        prompts.clear()
        res = await client.call_tool("confirm_action", {"action": "delete", "target": "keep"})
        check(len(prompts) == 1 and res.content[0].text == "Not confirmed: delete keep was not done.",
              "confirm_action via call_tool: declined answer reflected in the result", (prompts, res))

        # 4. Cancel a running task.
        t0 = time.monotonic()
        task = await call_tool_task(client, "wait", {"seconds": 60})
        running = await task.status()
        check(running.status == "working", "wait: task running before cancel", running)
        await task.cancel()
        final = await task.wait(timeout=15)
        check(final.status == "cancelled" and final.result is None and time.monotonic() - t0 < 15,
              "wait: tasks/cancel ends the task as cancelled", final)
        try:
            r = await task.result()
            check(False, "wait: result of a cancelled task raises ToolError", r)
        except ToolError as e:
            check("cancelled" in str(e), "wait: result of a cancelled task raises ToolError", str(e))
        again = await task.status()
        check(again.status == "cancelled", "wait: cancelled is terminal", again)

        # 5. A task-only tool that fails upstream: status failed with a JSON-RPC error.
        task = await call_tool_task(client, "unreliable_upstream", {"after_ms": 50})
        final = await task.wait(timeout=30)
        err = final.error or {}
        check(final.status == "failed" and err.get("code") == -32603
              and "Upstream service unavailable" in err.get("message", ""),
              "unreliable_upstream: task failed with a JSON-RPC error", final)

        # 6. A synchronous (never-task) tool still answers inline, tool errors as isError.
        res = await client.call_tool("lint_json", {"text": "{nope"}, raise_on_error=False)
        check(res.is_error is True, "lint_json: tool error is isError", res)
        res = await client.call_tool("lint_json", {"text": '{"ok": true}'})
        check(res.is_error is False, "lint_json: valid JSON is not an error", res)

    total = passed + failures
    if failures:
        print(f"py-fastmcp-tasks peer: {failures} of {total} check(s) failed")
        sys.exit(1)
    print(f"py-fastmcp-tasks peer: all {total} checks passed")


asyncio.run(main(sys.argv[1]))
