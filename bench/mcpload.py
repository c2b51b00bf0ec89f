"""Small MCP 2026-07-28 load client for bench/run.sh (stdlib only, HTTP/1.1 keep-alive).

Subcommands (all talk to one server URL on loopback):
  ready      URL [--timeout S]             poll server/discover until it answers 200
  create-one URL [--seconds S]             create one `wait` task, poll it to completion,
                                           print its taskId
  drain      URL --count N --seconds S --concurrency C --timeout T --out FILE
             create N `wait` tasks as fast as possible with C connections, then poll
             every still-pending task once per --poll-period until all are completed;
             writes a JSON report.

Every request carries the full 2026-07-28 header set and `_meta` with the tasks extension.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from urllib.parse import urlsplit

PROTOCOL = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
    "io.modelcontextprotocol/clientInfo": {"name": "mcp-tasks-bench", "version": "1"},
}
ALLOWED_HOSTS = {"127.0.0.1", "localhost", "::1"}


class HttpError(Exception):
    pass


class Conn:
    """One keep-alive HTTP/1.1 connection; reconnects once if the server closed it."""

    def __init__(self, url: str):
        u = urlsplit(url)
        if u.hostname not in ALLOWED_HOSTS:
            raise SystemExit(f"refusing non-loopback target {u.hostname!r}")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.next_id = 0

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:
                pass
        self.reader = self.writer = None

    async def rpc(self, method: str, params: dict, name: str | None) -> tuple[int, dict]:
        self.next_id += 1
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": self.next_id,
                "method": method,
                "params": {**params, "_meta": META},
            },
            separators=(",", ":"),
        ).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: {PROTOCOL}\r\nMcp-Method: {method}\r\n"
            + (f"Mcp-Name: {name}\r\n" if name is not None else "")
            + f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        for attempt in (0, 1):
            fresh = self.writer is None
            if fresh:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            try:
                self.writer.write(head + body)
                await self.writer.drain()
                return await self._read_response()
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                await self.close()
                if fresh or attempt == 1:
                    raise HttpError(f"connection failed: {e!r}") from e
        raise AssertionError("unreachable")

    async def _read_response(self) -> tuple[int, dict]:
        assert self.reader is not None
        status_line = await self.reader.readuntil(b"\r\n")
        parts = status_line.split(b" ", 2)
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            raw = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunks.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            raw = b"".join(c[:-2] for c in chunks)
        else:
            raise HttpError(f"response without length (status {status}, headers {headers})")
        if headers.get("connection", "").lower() == "close":
            await self.close()
        ctype = headers.get("content-type", "")
        if ctype.startswith("text/event-stream"):
            # Take the last `data:` event that is a JSON-RPC response.
            msg: dict = {}
            for line in raw.decode().splitlines():
                if line.startswith("data:"):
                    m = json.loads(line[5:])
                    if "result" in m or "error" in m:
                        msg = m
            return status, msg
        try:
            return status, json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            return status, {"_raw": raw[:200].decode(errors="replace")}


def parse_ts(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def create_task(c: Conn, seconds: float) -> dict:
    status, msg = await c.rpc(
        "tools/call", {"name": "wait", "arguments": {"seconds": seconds}}, "wait"
    )
    r = msg.get("result")
    if status != 200 or not r or r.get("resultType") != "task" or not r.get("taskId"):
        raise HttpError(f"tools/call: HTTP {status}: {json.dumps(msg)[:300]}")
    return r


async def get_task(c: Conn, task_id: str) -> dict:
    status, msg = await c.rpc("tasks/get", {"taskId": task_id}, task_id)
    r = msg.get("result")
    if status != 200 or not r or "status" not in r:
        raise HttpError(f"tasks/get: HTTP {status}: {json.dumps(msg)[:300]}")
    return r


async def cmd_ready(url: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        c = Conn(url)
        try:
            status, msg = await c.rpc("server/discover", {}, None)
            if status == 200 and "result" in msg:
                return 0
            last = f"HTTP {status} {msg}"
        except (OSError, HttpError, asyncio.IncompleteReadError) as e:
            last = repr(e)
        finally:
            await c.close()
        await asyncio.sleep(0.2)
    print(f"server at {url} not ready after {timeout}s: {last}", file=sys.stderr)
    return 1


async def cmd_create_one(url: str, seconds: float, timeout: float) -> int:
    c = Conn(url)
    try:
        t = await create_task(c, seconds)
        tid = t["taskId"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = await get_task(c, tid)
            if r["status"] == "completed":
                print(tid)
                return 0
            if r["status"] != "working":
                print(f"task {tid} ended {r['status']}: {r}", file=sys.stderr)
                return 1
            await asyncio.sleep(0.05)
        print(f"task {tid} not completed after {timeout}s", file=sys.stderr)
        return 1
    finally:
        await c.close()


async def cmd_drain(a: argparse.Namespace) -> int:
    n, conc = a.count, a.concurrency
    conns = [Conn(a.url) for _ in range(conc)]
    errors: list[str] = []
    task_ids: list[str | None] = [None] * n
    create_lat: list[float] = []
    server_created: list[float] = []

    t0 = time.time()
    deadline = time.monotonic() + a.timeout
    next_i = 0

    async def creator(c: Conn) -> None:
        nonlocal next_i
        while next_i < n and time.monotonic() < deadline:
            i = next_i
            next_i += 1
            s = time.perf_counter()
            try:
                r = await create_task(c, a.seconds)
            except (HttpError, OSError, asyncio.IncompleteReadError) as e:
                errors.append(f"create #{i}: {e}")
                await c.close()
                continue
            create_lat.append(time.perf_counter() - s)
            task_ids[i] = r["taskId"]
            ts = parse_ts(r.get("createdAt"))
            if ts is not None:
                server_created.append(ts)

    await asyncio.gather(*(creator(c) for c in conns))
    t_created = time.time()

    pending = [t for t in task_ids if t is not None]
    done_at_client: dict[str, float] = {}
    done_at_server: dict[str, float] = {}
    polls = 0
    rounds = 0
    timed_out = False
    while pending:
        if time.monotonic() >= deadline:
            timed_out = True
            break
        rounds += 1
        rs = time.monotonic()
        queue = list(pending)
        still: list[str] = []

        async def poller(c: Conn) -> None:
            nonlocal polls
            while queue:
                tid = queue.pop()
                try:
                    r = await get_task(c, tid)
                except (HttpError, OSError, asyncio.IncompleteReadError) as e:
                    errors.append(f"get {tid}: {e}")
                    await c.close()
                    still.append(tid)
                    continue
                polls += 1
                st = r["status"]
                if st == "completed":
                    done_at_client[tid] = time.time()
                    ts = parse_ts(r.get("lastUpdatedAt"))
                    if ts is not None:
                        done_at_server[tid] = ts
                elif st in ("working", "input_required"):
                    still.append(tid)
                else:
                    errors.append(f"task {tid} ended {st}: {json.dumps(r)[:200]}")

        await asyncio.gather(*(poller(c) for c in conns))
        pending = still
        if len(errors) > 100:
            break
        if pending:
            await asyncio.sleep(max(0.0, a.poll_period - (time.monotonic() - rs)))
    t_end = time.time()
    for c in conns:
        await c.close()

    completed = len(done_at_client)
    report = {
        "count": n,
        "seconds_per_task": a.seconds,
        "concurrency": conc,
        "created": len(create_lat),
        "completed": completed,
        "errors": len(errors),
        "error_samples": errors[:10],
        "timed_out": timed_out,
        "timeout_s": a.timeout,
        "create_phase_s": t_created - t0,
        "creates_per_s": len(create_lat) / (t_created - t0) if t_created > t0 else None,
        "create_p50_ms": (pct(create_lat, 50) or 0) * 1000,
        "create_p99_ms": (pct(create_lat, 99) or 0) * 1000,
        # Client-observed: first create sent -> the poll that saw the last completion.
        "drain_wall_s": (max(done_at_client.values()) - t0) if completed == n else None,
        # Server-stamped: first create sent -> max(lastUpdatedAt) of the completed tasks
        # (same machine clock; not limited by the poll period).
        "drain_server_s": (max(done_at_server.values()) - t0)
        if completed == n and len(done_at_server) == n
        else None,
        "elapsed_s": t_end - t0,
        "poll_rounds": rounds,
        "polls": polls,
        "poll_period_s": a.poll_period,
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report))
    return 0 if (not errors and completed == n) else 2


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ready")
    p.add_argument("url")
    p.add_argument("--timeout", type=float, default=60)
    p = sub.add_parser("create-one")
    p.add_argument("url")
    p.add_argument("--seconds", type=float, default=0.1)
    p.add_argument("--timeout", type=float, default=60)
    p = sub.add_parser("drain")
    p.add_argument("url")
    p.add_argument("--count", type=int, default=2500)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--timeout", type=float, default=400)
    p.add_argument("--poll-period", type=float, default=1.0)
    p.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "ready":
        return asyncio.run(cmd_ready(a.url, a.timeout))
    if a.cmd == "create-one":
        return asyncio.run(cmd_create_one(a.url, a.seconds, a.timeout))
    return asyncio.run(cmd_drain(a))


if __name__ == "__main__":
    sys.exit(main())
