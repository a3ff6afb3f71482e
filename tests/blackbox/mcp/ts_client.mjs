//! Drives swarmd's MCP server with the official TypeScript SDK and prints what it saw.
//
// usage: node ts_client.mjs SDK_DIR TRANSPORT
//
// SDK_DIR is the directory whose node_modules holds @modelcontextprotocol/sdk
// (what scripts/ts-mcp-env.sh prints); the SDK is loaded from there, through
// its package exports. TRANSPORT is `http:<base url>` (Streamable HTTP at
// <base url>/mcp, bearer from $SWARMD_TOKEN) or `stdio:<swarmd binary>:<base
// url>` (`swarmd mcp --url <base url>` as a child, credential in
// $SWARMD_TOKEN, $XDG_STATE_HOME passed on, its stderr joined to ours). The
// client lists the tools (the SDK checks the list against its schema and
// compiles every output schema), calls `agents`, spawns a `cat` task and
// waits for it (the SDK checks each structured result against its tool's
// output schema), and prints one JSON object on stdout. Any error exits 1.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [sdkDir, transportArg] = process.argv.slice(2);
const require = createRequire(join(sdkDir, "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { StdioClientTransport, getDefaultEnvironment } = require("@modelcontextprotocol/sdk/client/stdio.js");
const sdkVersion = JSON.parse(
  readFileSync(join(sdkDir, "node_modules/@modelcontextprotocol/sdk/package.json"), "utf8"),
).version;

function transport(spec) {
  const token = process.env.SWARMD_TOKEN ?? "";
  const [kind, ...rest] = spec.split(":");
  if (kind === "http") {
    const base = rest.join(":");
    return new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
  }
  // The binary path holds no colon; the URL after it does.
  const [binary, ...url] = rest;
  const env = { ...getDefaultEnvironment(), SWARMD_TOKEN: token };
  if (process.env.XDG_STATE_HOME) env.XDG_STATE_HOME = process.env.XDG_STATE_HOME;
  return new StdioClientTransport({
    command: binary,
    args: ["mcp", "--url", url.join(":")],
    env,
    stderr: "inherit",
  });
}

/** A tool result as plain data: isError, structured content, text. */
function outcome(result) {
  return {
    is_error: Boolean(result.isError),
    structured: result.structuredContent ?? null,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
  };
}

const client = new Client({ name: "swarmd-blackbox-ts", version: "1.0.0" });
const connection = transport(transportArg);
await client.connect(connection);
const listed = await client.listTools();
const agents = outcome(await client.callTool({ name: "agents", arguments: {} }));
const spawned = outcome(
  await client.callTool({ name: "spawn", arguments: { agent: "cat", prompt: '{"n": 1}' } }),
);
const taskId = spawned.structured?.task_id;
if (!taskId) throw new Error(`spawn returned no task id: ${JSON.stringify(spawned)}`);
const waited = outcome(
  await client.callTool({ name: "wait", arguments: { task_ids: [taskId], timeout_secs: 30 } }),
);
const server = client.getServerVersion();
await client.close();
process.stdout.write(
  JSON.stringify({
    sdk_version: sdkVersion,
    server: server?.name ?? null,
    // Known to the HTTP transport only.
    protocol_version: connection.protocolVersion ?? null,
    tools: listed.tools.map((t) => t.name),
    with_output_schema: listed.tools.filter((t) => t.outputSchema).map((t) => t.name),
    agents,
    spawned,
    waited,
  }) + "\n",
);
