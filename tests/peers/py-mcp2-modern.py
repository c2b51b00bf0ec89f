"""Peer: the Python SDK 2.x client (PyPI `mcp`, pinned in scripts/install-peers.sh) drives a
running mcp-tasks server: auto negotiation lands on 2026-07-28 (server/discover), tools/list,
synchronous tools/call (the client does not declare the tasks extension), progress
notifications on a synchronous call, a tool error, and a
task-only tool refused with -32021. Then the same client forced into its legacy mode
(initialize handshake) is served by the legacy lane.

Usage: python py-mcp2-modern.py <server url>
"""

import asyncio
import hashlib
import sys

from mcp import Client
from mcp.shared.exceptions import MCPError

failures = 0


def check(cond: bool, what: str, detail: object = None) -> None:
    global failures
    if cond:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}: {detail!r}")


def hash_chain(seed: str, rounds: int) -> str:
    cur = hashlib.sha256(seed.encode()).digest()
    for _ in range(1, rounds):
        cur = hashlib.sha256(cur).digest()
    return cur.hex()


async def scenario(url: str, mode: str, expect_version: str) -> None:
    async with Client(url, mode=mode) as client:
        check(client.protocol_version == expect_version, f"[{mode}] negotiated {expect_version}", client.protocol_version)
        info = client.server_info
        check(info is not None and info.name == "mcp-tasks", f"[{mode}] serverInfo", info)
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        check({"hash_chain", "wait", "lint_json"} <= set(names), f"[{mode}] tools/list", names)
        r = await client.call_tool("hash_chain", {"seed": "py", "rounds": 4000})
        digest = (r.structured_content or {}).get("digest")
        check(digest == hash_chain("py", 4000), f"[{mode}] synchronous tools/call", r)
        r = await client.call_tool("wait", {"seconds": 0.2})
        check(not r.is_error and "Waited" in r.content[0].text, f"[{mode}] synchronous wait", r)
        # With a progress callback the client sends _meta.progressToken; the server streams
        # notifications/progress on the call's SSE response before the answer (both lanes).
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        r = await client.call_tool("wait", {"seconds": 2.5}, progress_callback=on_progress)
        check(not r.is_error and r.content[0].text == "Waited 2.5 s.", f"[{mode}] tools/call with progress: answer", r)
        rising = all(b[0] > a[0] for a, b in zip(seen, seen[1:]))
        check(len(seen) >= 2 and rising and all(t == 2500 for _, t, _ in seen),
              f"[{mode}] tools/call with progress: increasing progress notifications", seen)
        r = await client.call_tool("lint_json", {"text": "{nope"})
        check(r.is_error is True, f"[{mode}] tool error is isError", r)
        try:
            r = await client.call_tool("unreliable_upstream", {"after_ms": 10})
            check(False, f"[{mode}] task-only tool refused", r)
        except MCPError as e:
            expected = -32021 if mode == "auto" else -32601
            check(e.error.code == expected, f"[{mode}] task-only tool refused with {expected}", e.error)


async def main() -> None:
    url = sys.argv[1]
    await scenario(url, "auto", "2026-07-28")
    await scenario(url, "legacy", "2025-11-25")
    if failures:
        print(f"py-mcp2 peer: {failures} check(s) failed")
        sys.exit(1)
    print("py-mcp2 peer: all checks passed")


asyncio.run(main())
