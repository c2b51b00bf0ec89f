"""Reference server for bench/run.sh: fastmcp-tasks (SEP-2663) with a `wait` tool.

The tool mirrors mcp-tasks' built-in `wait` (args {"seconds": N}, task policy "optional":
it runs as a task when the request declares the io.modelcontextprotocol/tasks extension).
Served over stateless Streamable HTTP (protocol 2026-07-28, no initialize, JSON responses)
on 127.0.0.1 only.

    bench/.venv/bin/python bench/reference_server.py --port 8799 [--concurrency N]

--concurrency sets the Docket worker's concurrent-task limit; omitted, the package default
(FASTMCP_DOCKET_CONCURRENCY, 10) applies. Prints "READY http://127.0.0.1:PORT/mcp" once the
listening socket is bound (the HTTP app starts serving right after).
"""

from __future__ import annotations

import argparse
import asyncio
import socket

from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension


def build(concurrency: int | None) -> FastMCP:
    mcp = FastMCP("fastmcp-tasks-reference")
    mcp.add_extension(TasksExtension(concurrency=concurrency))

    @mcp.tool(task=TaskConfig(mode="optional"))
    async def wait(seconds: float) -> str:
        """Waits the given number of seconds, then says so."""
        if not 0 <= seconds <= 86400:
            raise ValueError("seconds must be within 0..=86400")
        await asyncio.sleep(seconds)
        return f"Waited {seconds} s."

    return mcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--concurrency", type=int, default=None)
    args = ap.parse_args()

    # Bind ourselves so "READY" is printed only once the port is really ours.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(2048)
    print(f"READY http://127.0.0.1:{args.port}/mcp", flush=True)

    build(args.concurrency).run(
        transport="http",
        host="127.0.0.1",
        port=args.port,
        sockets=[sock],
        stateless_http=True,
        json_response=True,
        show_banner=False,
        log_level="warning",
        # No per-request access log: the fastest configuration of the reference.
        uvicorn_config={"access_log": False},
    )


if __name__ == "__main__":
    main()
