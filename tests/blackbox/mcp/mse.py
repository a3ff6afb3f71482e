"""Drives the upstream MainAI client `mse mcp` (mlua-swarm-cli) against swarmd.

usage: mse.py MSE_BINARY BASE_URL SCENARIO   (delegated, restart or pool)

`mse mcp` runs as an MCP stdio server (the official Python SDK is its client)
joined to the swarmd at BASE_URL (its `MSE_HTTP`). The scenario also talks to
swarmd over HTTP with the admin token in $SWARMD_TOKEN, to create tasks and
read what became of them. Everything seen is printed as one JSON object on
stdout; the black-box test (`tests/blackbox/mse.rs`) asserts on it. A tool
call `mse` refuses is recorded as `{"error": <message>}`, never raised; a
scenario that cannot go on records `exception` beside what it saw so far.
The `restart` scenario prints `{"restart": sid}` on a line of its own and
waits for a line on stdin: the test restarts swarmd in between.
"""

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

TOOLS = [
    "mse_operator_join",
    "mse_pending_wait",
    "mse_ack",
    "mse_operator_leave",
    "mse_worker_fetch",
    "mse_worker_submit",
]


class Swarmd:
    """swarmd's HTTP API as the admin (the standard library, off the event loop)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token = os.environ["SWARMD_TOKEN"]

    def _request(self, method: str, path: str, body) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return {"status": response.status, "body": json.load(response)}
        except urllib.error.HTTPError as error:
            return {"status": error.code, "body": json.load(error)}

    async def create(self, body: dict) -> dict:
        return await asyncio.to_thread(self._request, "POST", "/v1/tasks", body)

    async def get(self, path: str) -> dict:
        return await asyncio.to_thread(self._request, "GET", path, None)

    async def post(self, path: str, body: dict) -> dict:
        return await asyncio.to_thread(self._request, "POST", path, body)


async def call(client: Client, tool: str, args: dict) -> dict:
    """One tool call: the JSON `mse` answered with, or the error it raised."""
    try:
        result = await client.call_tool(tool, args)
    except MCPError as error:
        return {"error": str(error)}
    text = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if result.is_error:
        return {"error": " ".join(text)}
    return json.loads(text[0])


async def pop(client: Client, sid: str) -> dict:
    """The next frame `mse_pending_wait` hands over, within 20 s."""
    return await call(client, "mse_pending_wait", {"sid": sid, "timeout_ms": 20000})


async def operators(swarmd: Swarmd) -> list:
    listed = await swarmd.get("/v1/operators")
    return listed["body"]


async def delegated(client: Client, swarmd: Swarmd, seen: dict) -> None:
    """Join, take one task's spawn through its SubAgent tools, ack, leave."""
    listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    seen["tools"] = sorted(name for name in TOOLS if name in names)

    joined = await call(client, "mse_operator_join", {"desc": "swarmd black-box test"})
    seen["joined"] = joined
    sid = joined["sid"]
    seen["operators_joined"] = await operators(swarmd)

    created = await swarmd.create(
        {"agent": "helper", "prompt": "count to three", "operator_sid": sid}
    )
    seen["created"] = created
    task = created["body"]["task_id"]

    frame = await pop(client, sid)
    seen["frame"] = frame
    handle = frame["payload"]["worker_handle"]
    seen["fetched"] = await call(client, "mse_worker_fetch", {"worker_handle": handle})
    seen["part"] = await call(
        client,
        "mse_worker_submit",
        {"worker_handle": handle, "body": "# one two three", "name": "plan.md"},
    )
    seen["submitted"] = await call(
        client,
        "mse_worker_submit",
        {
            "worker_handle": handle,
            "body": "one two three\n",
            "stats": {"usage": {"total_tokens": 42}, "model": "m"},
            "degradations": [{"tool": "grep", "error": "timeout", "fallback": "read"}],
        },
    )
    seen["acked"] = await call(
        client,
        "mse_ack",
        {
            "sid": sid,
            "req_id": frame["req_id"],
            "kind": "spawn_ack",
            "ok": True,
            "value": {"note": "the SubAgent submitted"},
        },
    )
    seen["done"] = await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20")
    seen["output"] = await swarmd.get(f"/v1/tasks/{task}/output")

    # A second task with no `operator_sid`: the least-loaded MainAI is this
    # one, the only session there is.
    second = await swarmd.create({"agent": "helper", "prompt": "and again"})
    seen["unpinned"] = second
    frame = await pop(client, sid)
    seen["unpinned_frame"] = frame
    handle = frame["payload"]["worker_handle"]
    seen["unpinned_submitted"] = await call(
        client, "mse_worker_submit", {"worker_handle": handle, "body": "{\"n\": 2}"}
    )
    task = second["body"]["task_id"]
    seen["unpinned_done"] = await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20")

    # Cancelled after its spawn was popped: `mse` does not take `cancel`
    # frames, so the SubAgent learns it when it submits.
    third = await swarmd.create({"agent": "helper", "prompt": "never mind", "operator_sid": sid})
    frame = await pop(client, sid)
    seen["cancelled_frame"] = frame
    task = third["body"]["task_id"]
    seen["cancel"] = await swarmd.post(f"/v1/tasks/{task}/cancel", {"reason": "test says stop"})
    handle = frame["payload"]["worker_handle"]
    seen["cancelled_fetch"] = await call(client, "mse_worker_fetch", {"worker_handle": handle})
    seen["cancelled_submit"] = await call(
        client, "mse_worker_submit", {"worker_handle": handle, "body": "too late"}
    )
    seen["cancelled_ack"] = await call(
        client,
        "mse_ack",
        {"sid": sid, "req_id": frame["req_id"], "kind": "spawn_ack", "value": "late"},
    )
    seen["cancelled_done"] = await swarmd.get(f"/v1/tasks/{task}")
    seen["after_cancel"] = await call(client, "mse_pending_wait", {"sid": sid, "timeout_ms": 500})

    # `spawn_halt` through `mse_ack`: a graceful stop.
    fourth = await swarmd.create({"agent": "helper", "prompt": "stop early", "operator_sid": sid})
    frame = await pop(client, sid)
    seen["halted_ack"] = await call(
        client,
        "mse_ack",
        {
            "sid": sid,
            "req_id": frame["req_id"],
            "kind": "spawn_halt",
            "value": {"partial": 1},
            "error": "enough",
        },
    )
    task = fourth["body"]["task_id"]
    seen["halted_done"] = await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20")

    # A failed attempt: `mse_worker_submit {ok: false}`.
    fifth = await swarmd.create({"agent": "helper", "prompt": "fail", "operator_sid": sid})
    frame = await pop(client, sid)
    handle = frame["payload"]["worker_handle"]
    seen["failed_submit"] = await call(
        client,
        "mse_worker_submit",
        {"worker_handle": handle, "body": "it broke", "ok": False},
    )
    task = fifth["body"]["task_id"]
    seen["failed_done"] = await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20")

    seen["left"] = await call(client, "mse_operator_leave", {"sid": sid})
    seen["operators_left"] = await operators(swarmd)


async def restart(client: Client, swarmd: Swarmd, seen: dict) -> None:
    """Join, let the test restart swarmd, then take a spawn on the same sid."""
    joined = await call(client, "mse_operator_join", {"desc": "through a restart"})
    seen["joined"] = joined
    sid = joined["sid"]
    # The test restarts the daemon on the same address and state directory
    # when it reads this line, and answers on stdin once it is back.
    print(json.dumps({"restart": sid}), flush=True)
    seen["restarted"] = (await asyncio.to_thread(sys.stdin.readline)).strip()

    created = await swarmd.create({"agent": "helper", "prompt": "after", "operator_sid": sid})
    seen["created"] = created
    # The first call after the drop finds the socket gone and reconnects.
    frame = await pop(client, sid)
    seen["frame"] = frame
    handle = frame["payload"]["worker_handle"]
    seen["submitted"] = await call(
        client, "mse_worker_submit", {"worker_handle": handle, "body": "after a restart"}
    )
    task = created["body"]["task_id"]
    seen["done"] = await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20")
    seen["left"] = await call(client, "mse_operator_leave", {"sid": sid})


async def pool(client: Client, swarmd: Swarmd, seen: dict) -> None:
    """Two sessions of one `mse`: unpinned tasks go to the least loaded."""
    sids = []
    for desc in ["pool one", "pool two"]:
        sids.append((await call(client, "mse_operator_join", {"desc": desc}))["sid"])
    seen["sids"] = sids
    got = {sid: [] for sid in sids}
    tasks = []

    async def take(sid: str, wait_ms: int) -> bool:
        frame = await call(client, "mse_pending_wait", {"sid": sid, "timeout_ms": wait_ms})
        if frame.get("timed_out", True):
            return False
        got[sid].append(frame)
        return True

    first = await swarmd.create({"agent": "helper", "prompt": "part 0"})
    tasks.append(first["body"]["task_id"])
    # Find the session that took it; its spawn stays unanswered (its load).
    for _ in range(40):
        if any([await take(sid, 250) for sid in sids]):
            break
    busy = next(sid for sid in sids if got[sid])
    idle = next(sid for sid in sids if sid != busy)
    second = await swarmd.create({"agent": "helper", "prompt": "part 1"})
    tasks.append(second["body"]["task_id"])
    await take(idle, 20000)
    await take(busy, 500)
    seen["tasks"] = tasks
    seen["got"] = {sid: [f["payload"]["task_id"] for f in frames] for sid, frames in got.items()}
    for sid, frames in got.items():
        for frame in frames:
            handle = frame["payload"]["worker_handle"]
            await call(client, "mse_worker_submit", {"worker_handle": handle, "body": sid})
    seen["done"] = [
        (await swarmd.get(f"/v1/tasks/{task}/wait?timeout_secs=20"))["body"] for task in tasks
    ]
    for sid in sids:
        await call(client, "mse_operator_leave", {"sid": sid})


async def ask(client: Client, swarmd: Swarmd, seen: dict) -> None:
    """A blocked verdict of a task pinned to the session is asked there; mse answers."""
    sid = (await call(client, "mse_operator_join", {"desc": "answers questions"}))["sid"]
    created = await swarmd.create({"agent": "doubtful", "prompt": "done?", "operator_sid": sid})
    seen["task"] = created["body"]["task_id"]
    frame = await pop(client, sid)
    seen["frame"] = frame
    if frame.get("type") == "ask":
        seen["ack"] = await call(
            client,
            "mse_ack",
            {"sid": sid, "req_id": frame["req_id"], "kind": "answer", "value": "accept: flaky"},
        )
    seen["done"] = (await swarmd.get(f"/v1/tasks/{seen['task']}/wait?timeout_secs=20"))["body"]
    await call(client, "mse_operator_leave", {"sid": sid})


SCENARIOS = {"delegated": delegated, "restart": restart, "pool": pool, "ask": ask}


async def main() -> None:
    binary, base, scenario = sys.argv[1:4]
    home = os.environ["MSE_HOME"]
    params = StdioServerParameters(
        command=binary,
        args=["mcp"],
        env={
            "MSE_HTTP": base,
            "MSE_HOME": home,
            "HOME": home,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
        },
    )
    swarmd = Swarmd(base)
    seen = {}
    try:
        async with Client(params, mode="legacy") as client:
            await SCENARIOS[scenario](client, swarmd, seen)
    except Exception as error:  # what was seen up to here is the evidence
        seen["exception"] = repr(error)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main())
