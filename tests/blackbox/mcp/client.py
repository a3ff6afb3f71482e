"""Drives swarmd's MCP server with the official Python SDK and prints what it saw.

usage: client.py TRANSPORT MODE SCENARIO

TRANSPORT is `http:<base url>` (Streamable HTTP at <base url>/mcp, bearer from
$SWARMD_TOKEN, none when it is empty) or `stdio:<swarmd binary>:<base url>`
(`swarmd mcp --url <base url>` as a child, credential in $SWARMD_TOKEN, more
flags as a JSON list in $SWARMD_MCP_ARGS, its stderr appended to the file
$SWARMD_MCP_LOG names, $XDG_STATE_HOME and $RUST_LOG passed on). MODE
is the SDK's connect mode: `legacy` (the initialize handshake) or a modern
revision such as `2026-07-28`. The scenario's observations are printed as one
JSON object on stdout; the black-box test asserts on them.
"""

import asyncio
import json
import os
import sys
import time

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def connect(transport: str, mode: str) -> Client:
    kind, _, rest = transport.partition(":")
    token = os.environ.get("SWARMD_TOKEN", "")
    if kind == "http":
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = create_mcp_http_client(headers=headers)
        return Client(streamable_http_client(f"{rest}/mcp", http_client=http), mode=mode)
    binary, _, url = rest.partition(":")
    args = ["mcp", "--url", url, *json.loads(os.environ.get("SWARMD_MCP_ARGS", "[]"))]
    env = {"SWARMD_TOKEN": token, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for key in ("XDG_STATE_HOME", "RUST_LOG", "SWARMD_MCP_LOG"):
        if key in os.environ:
            env[key] = os.environ[key]
    command = binary
    if "SWARMD_MCP_LOG" in os.environ:
        # The relay's stderr, kept for the test to read.
        command = "/bin/sh"
        args = ["-c", 'exec "$0" "$@" 2>>"$SWARMD_MCP_LOG"', binary, *args]
    params = StdioServerParameters(command=command, args=args, env=env)
    return Client(params, mode=mode)


def outcome(result) -> dict:
    """A tool result as plain data: isError, structured content, text."""
    text = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": text,
    }


async def tools(client: Client) -> dict:
    listed = await client.list_tools()
    return {
        "protocol_version": client.protocol_version,
        "tools": {
            tool.name: {
                "input": tool.input_schema,
                "output": tool.output_schema,
                "description": tool.description,
            }
            for tool in listed.tools
        },
    }


async def fanout(client: Client) -> dict:
    tasks = [{"agent": "cat", "prompt": json.dumps({"n": n})} for n in range(5)]
    spawned = outcome(await client.call_tool("spawn_many", {"tasks": tasks}))
    ids = [r["task_id"] for r in spawned["structured"]["results"]]
    waited = outcome(
        await client.call_tool("wait", {"task_ids": ids, "mode": "all", "timeout_secs": 30})
    )
    first = outcome(await client.call_tool("task", {"task_id": ids[0]}))
    out = outcome(await client.call_tool("output", {"task_id": ids[0]}))
    listed = outcome(await client.call_tool("tasks", {"agent": "cat", "status": "pass"}))
    agents = outcome(await client.call_tool("agents", {}))
    return {
        "protocol_version": client.protocol_version,
        "spawned": spawned,
        "ids": ids,
        "waited": waited,
        "task": first,
        "output": out,
        "tasks": listed,
        "agents": agents,
    }


async def progress(client: Client) -> dict:
    spawned = outcome(await client.call_tool("spawn", {"agent": "slow", "prompt": "{\"slow\": 1}"}))
    task_id = spawned["structured"]["task_id"]
    seen = []

    async def on_progress(value, total, message):
        seen.append({"progress": value, "total": total, "message": message})

    waited = outcome(
        await client.call_tool(
            "wait",
            {"task_ids": [task_id], "timeout_secs": 30},
            progress_callback=on_progress,
        )
    )
    return {"task_id": task_id, "waited": waited, "progress": seen}


async def long_wait(client: Client) -> dict:
    """A 60 s `wait` on a task that runs longer, timing every progress notification."""
    spawned = outcome(await client.call_tool("spawn", {"agent": "long", "prompt": "zz"}))
    task_id = spawned["structured"]["task_id"]
    loop = asyncio.get_running_loop()
    started = loop.time()
    seen = []

    async def on_progress(value, total, message):
        seen.append({"at": loop.time() - started, "progress": value, "total": total, "message": message})

    waited = outcome(
        await client.call_tool(
            "wait",
            {"task_ids": [task_id], "timeout_secs": 60},
            progress_callback=on_progress,
        )
    )
    return {"task_id": task_id, "waited": waited, "progress": seen, "elapsed": loop.time() - started}


async def errors(client: Client) -> dict:
    calls = {
        "unknown_agent": ("spawn", {"agent": "nope", "prompt": "x"}),
        "missing_prompt": ("spawn", {"agent": "cat"}),
        "bad_task_id": ("task", {"task_id": "T-nothex"}),
        "absent_task": ("task", {"task_id": "T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f"}),
        "wait_too_long": ("wait", {"task_ids": ["T-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f"], "timeout_secs": 601}),
        "spawn_many_mixed": ("spawn_many", {"tasks": [{"agent": "cat", "prompt": "1"}, {"agent": "nope", "prompt": "x"}]}),
    }
    seen = {}
    for name, (tool, args) in calls.items():
        seen[name] = outcome(await client.call_tool(tool, args))
    return seen


async def cancel(client: Client) -> dict:
    spawned = outcome(await client.call_tool("spawn", {"agent": "sleepy", "prompt": "zz"}))
    task_id = spawned["structured"]["task_id"]
    cancelled = outcome(await client.call_tool("cancel", {"task_id": task_id, "reason": "test says stop"}))
    waited = outcome(await client.call_tool("wait", {"task_ids": [task_id], "timeout_secs": 20}))
    return {"task_id": task_id, "cancelled": cancelled, "waited": waited}


async def abandon(client: Client) -> dict:
    """Cancels a long `wait` from the client side, then checks the connection still serves."""
    spawned = outcome(await client.call_tool("spawn", {"agent": "sleepy", "prompt": "zz"}))
    task_id = spawned["structured"]["task_id"]
    call = asyncio.create_task(
        client.call_tool("wait", {"task_ids": [task_id], "timeout_secs": 300})
    )
    await asyncio.sleep(1)
    call.cancel()
    try:
        await call
        finished = "returned"
    except asyncio.CancelledError:
        finished = "cancelled"
    after = outcome(await client.call_tool("task", {"task_id": task_id}))
    return {"task_id": task_id, "call": finished, "after": after}


async def call(client: Client) -> dict:
    """One call: the tool in $MCP_TOOL with the JSON arguments in $MCP_ARGS."""
    args = json.loads(os.environ.get("MCP_ARGS", "{}"))
    return outcome(await client.call_tool(os.environ["MCP_TOOL"], args))


async def operators() -> list:
    """The daemon's sessions, listed with the admin token in $SWARMD_ADMIN."""
    base = os.environ["SWARMD_BASE"]
    headers = {"Authorization": f"Bearer {os.environ['SWARMD_ADMIN']}"}
    async with create_mcp_http_client(headers=headers) as http:
        answer = await http.get(f"{base}/v1/operators")
        answer.raise_for_status()
        return answer.json()


async def session(client: Client) -> dict:
    """Spawns a `cat` task through the relay and lists the sessions meanwhile."""
    spawned = outcome(await client.call_tool("spawn", {"agent": "cat", "prompt": "{}"}))
    return {"spawned": spawned, "operators": await operators()}


async def restart(client: Client) -> dict:
    """A call, then a pause the test fills with a daemon restart, then calls again.

    The script writes $MCP_PAUSE/ready and waits for $MCP_PAUSE/go; the test
    kills the daemon, writes `go`, and starts the daemon again a little later,
    so the second call is made while the daemon is away."""
    pause = os.environ["MCP_PAUSE"]
    before = outcome(await client.call_tool("spawn", {"agent": "cat", "prompt": "{\"n\": 1}"}))
    listed_before = await operators()
    open(os.path.join(pause, "ready"), "w").close()
    while not os.path.exists(os.path.join(pause, "go")):
        await asyncio.sleep(0.05)
    started = time.monotonic()
    after = outcome(await client.call_tool("spawn", {"agent": "cat", "prompt": "{\"n\": 2}"}))
    after_secs = time.monotonic() - started
    task_id = after["structured"]["task_id"] if not after["is_error"] else None
    waited = None
    if task_id:
        waited = outcome(await client.call_tool("wait", {"task_ids": [task_id], "timeout_secs": 20}))
    try:
        listed_after = await operators()
    except Exception as error:  # the daemon stayed away
        listed_after = repr(error)
    return {
        "before": before,
        "after": after,
        "after_secs": after_secs,
        "waited": waited,
        "operators_before": listed_before,
        "operators_after": listed_after,
    }


async def wait_restart(client: Client) -> dict:
    """A `wait` in flight while the test restarts the daemon.

    Spawns the agent $MCP_AGENT, writes the task's id to $MCP_PAUSE/ready,
    and waits for it (40 s at most); the test kills the daemon and starts it
    again meanwhile. The wait's answer, or the error it failed with, and how
    long it took are printed."""
    pause = os.environ["MCP_PAUSE"]
    spawned = outcome(await client.call_tool("spawn", {"agent": os.environ["MCP_AGENT"], "prompt": "{}"}))
    task_id = spawned["structured"]["task_id"]
    with open(os.path.join(pause, "ready.tmp"), "w") as ready:
        ready.write(task_id)
    os.rename(os.path.join(pause, "ready.tmp"), os.path.join(pause, "ready"))
    started = time.monotonic()
    try:
        waited = outcome(await client.call_tool("wait", {"task_ids": [task_id], "timeout_secs": 40}))
        failed = None
    except Exception as error:
        waited, failed = None, f"{type(error).__name__}: {error}"
    waited_secs = time.monotonic() - started
    # The same client goes on working after the restart.
    listed = outcome(await client.call_tool("agents", {}))
    return {
        "task_id": task_id,
        "waited": waited,
        "failed": failed,
        "waited_secs": waited_secs,
        "agents_after": listed,
    }


SCENARIOS = {
    "session": session,
    "wait_restart": wait_restart,
    "restart": restart,
    "call": call,
    "tools": tools,
    "fanout": fanout,
    "progress": progress,
    "long_wait": long_wait,
    "errors": errors,
    "cancel": cancel,
    "abandon": abandon,
}


async def main() -> None:
    transport, mode, scenario = sys.argv[1:4]
    async with connect(transport, mode) as client:
        seen = await SCENARIOS[scenario](client)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main())
