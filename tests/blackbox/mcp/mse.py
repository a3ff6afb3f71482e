"""Drives the upstream MainAI client `mse mcp` (mlua-swarm-cli) against swarmd.

usage: mse.py MSE_BINARY BASE_URL SCENARIO

`mse mcp` runs as an MCP stdio server (the official Python SDK is its client)
joined to the swarmd at BASE_URL (its `MSE_HTTP`). The scenario also talks to
swarmd over HTTP with the admin token in $SWARMD_TOKEN, to create tasks and
read what became of them. Everything seen is printed as one JSON object on
stdout; the black-box test (`tests/blackbox/mse.rs`) asserts on it. A tool
call `mse` refuses is recorded as `{"error": <message>}`, never raised.
"""

import asyncio
import json
import os
import sys

import httpx
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import McpError

TOOLS = [
    "mse_operator_join",
    "mse_pending_wait",
    "mse_ack",
    "mse_operator_leave",
    "mse_worker_fetch",
    "mse_worker_submit",
]


class Swarmd:
    """swarmd's HTTP API as the admin."""

    def __init__(self, base: str) -> None:
        token = os.environ["SWARMD_TOKEN"]
        self.http = httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    async def create(self, body: dict) -> dict:
        response = await self.http.post("/v1/tasks", json=body)
        return {"status": response.status_code, "body": response.json()}

    async def get(self, path: str) -> dict:
        response = await self.http.get(path)
        return {"status": response.status_code, "body": response.json()}

    async def post(self, path: str, body: dict) -> dict:
        response = await self.http.post(path, json=body)
        return {"status": response.status_code, "body": response.json()}


async def call(client: Client, tool: str, args: dict) -> dict:
    """One tool call: the JSON `mse` answered with, or the error it raised."""
    try:
        result = await client.call_tool(tool, args)
    except McpError as error:
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


async def delegated(client: Client, swarmd: Swarmd) -> dict:
    """Join, take one task's spawn through its SubAgent tools, ack, leave."""
    seen = {}
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
    seen["submitted"] = await call(
        client, "mse_worker_submit", {"worker_handle": handle, "body": "one two three\n"}
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
    # frames, so the SubAgent learns it when it fetches or submits.
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

    seen["left"] = await call(client, "mse_operator_leave", {"sid": sid})
    seen["operators_left"] = await operators(swarmd)
    return seen


SCENARIOS = {"delegated": delegated}


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
    async with Client(params, mode="legacy") as client:
        seen = await SCENARIOS[scenario](client, swarmd)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main())
