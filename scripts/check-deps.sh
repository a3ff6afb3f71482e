#!/usr/bin/env bash
# Checks that crate dependencies point one way (docs/ARCHITECTURE.md, Invariants):
# server -> mcp -> api -> cluster, sessions, config, client and flow-run;
# cluster -> sessions, postgres, config and flow-run; server -> worker ->
# client and spawner; client -> types; spawner -> git -> engine ->
# output-store -> types; flow-run -> engine and flow; sessions
# and spawner -> wire -> types; sessions -> spawner; config ->
# flow-run, spawner and postgres; with the PostgreSQL backend
# (swarmd-postgres) between the server and the engine; that the engine
# knows no HTTP, WebSocket or Lua crate; and that only swarmd-postgres (and
# the bench, which makes its databases) use the PostgreSQL driver directly.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
forbid() {
    local crate=$1
    shift
    local tree
    tree=$(cargo tree --locked -p "$crate" -e normal,build --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    for bad in "$@"; do
        if grep -qx "$bad" <<<"$tree"; then
            echo "dependency direction violated: $crate depends on $bad" >&2
            fail=1
        fi
    done
}

# Like `forbid`, for the crate's own (direct) dependencies only.
forbid_direct() {
    local crate=$1
    shift
    local tree
    tree=$(cargo tree --locked -p "$crate" -e normal,build --depth 1 --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    for bad in "$@"; do
        if grep -qx "$bad" <<<"$tree"; then
            echo "dependency direction violated: $crate depends directly on $bad" >&2
            fail=1
        fi
    done
}

# The vocabulary is plain data: no swarmd crate, no runtime, no store, no
# transport.
forbid swarmd-types swarmd-git swarmd-output-store swarmd-engine swarmd-wire swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-spawner swarmd-server swarmd-sessions swarmd-postgres swarmd-client swarmd-flow swarmd-flow-run axum mlua tokio rusqlite tokio-tungstenite hyper tower reqwest tokio-postgres
forbid swarmd-output-store swarmd-git swarmd-api swarmd-mcp swarmd-config swarmd-engine swarmd-spawner swarmd-server swarmd-postgres swarmd-sessions axum mlua tokio-tungstenite hyper tokio-postgres
forbid swarmd-engine swarmd-git swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-spawner swarmd-server swarmd-postgres swarmd-sessions axum mlua tokio-tungstenite hyper tower reqwest tokio-postgres
forbid swarmd-postgres swarmd-git swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-spawner swarmd-server swarmd-sessions axum mlua tokio-tungstenite hyper reqwest
# The client speaks HTTP to a daemon: it never links the daemon, its engine,
# its stores, its spawner or its servers, so a program that calls the API
# builds no SQLite and no Lua.
forbid swarmd-client swarmd-git swarmd-engine swarmd-output-store swarmd-spawner swarmd-worker swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-server swarmd-sessions swarmd-postgres swarmd-flow swarmd-flow-run axum rusqlite mlua tokio-postgres tokio-tungstenite
# The worker wrapper and pools run children through the spawner, over the
# client: no daemon surface, session, store driver or configuration.
forbid swarmd-worker swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-server swarmd-sessions swarmd-postgres axum tokio-postgres tokio-tungstenite
# The flow IR is data: no swarmd crate, no transport, no interpreter.
forbid swarmd-flow swarmd-git swarmd-api swarmd-mcp swarmd-config swarmd-output-store swarmd-engine swarmd-spawner swarmd-server swarmd-sessions swarmd-postgres axum mlua tokio tokio-tungstenite hyper reqwest tokio-postgres
forbid swarmd-spawner swarmd-api swarmd-mcp swarmd-config swarmd-server swarmd-sessions swarmd-postgres axum tokio-tungstenite hyper reqwest tokio-postgres
# The git work of attempts (worktrees, branches, the merge agent) runs git
# for the engine's attempts: no layer, spawner, interpreter, session, API
# surface or transport.
forbid swarmd-git swarmd-spawner swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-server swarmd-sessions swarmd-postgres swarmd-client swarmd-worker swarmd-wire swarmd-flow swarmd-flow-run axum mlua tokio-tungstenite hyper reqwest tokio-postgres
# The flow runner is a client of the engine, like the spawner stack: no
# transport, no store driver, no interpreter (Lua flows are evaluated by
# the daemon and handed over as IR).
forbid swarmd-flow-run swarmd-api swarmd-mcp swarmd-config swarmd-spawner swarmd-server swarmd-sessions swarmd-postgres swarmd-client axum mlua tokio-tungstenite hyper reqwest tokio-postgres
# The wire is plain serde data over the vocabulary: no engine, no store, no
# runtime, no transport, so any client can take it.
forbid swarmd-wire swarmd-git swarmd-output-store swarmd-engine swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-spawner swarmd-server swarmd-sessions swarmd-postgres swarmd-client swarmd-flow swarmd-flow-run axum mlua tokio tokio-util futures-util rusqlite tokio-tungstenite hyper tower reqwest tokio-postgres
# The API surfaces serve the engine and the sessions; the MCP server is a
# client of their functions, and the daemon binary sits above both.
forbid swarmd-api swarmd-server swarmd-mcp
forbid swarmd-mcp swarmd-server
# The configuration is data read from files: no server, session, API
# surface, client or transport.
forbid swarmd-config swarmd-api swarmd-cluster swarmd-mcp swarmd-server swarmd-sessions swarmd-client axum hyper reqwest tokio-tungstenite rmcp
# The MainAI side (sessions, outboxes, frame encoding, a session's home in
# a cluster) knows no API surface: no HTTP routes, MCP, client or flows;
# and no database: it reaches other nodes through the `SessionPeers` it is
# given. It links axum only for the socket's text type.
forbid swarmd-sessions swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-server swarmd-client swarmd-flow swarmd-flow-run swarmd-postgres tokio-postgres reqwest rmcp
# The cluster runs a node among its peers, gives the sessions their
# interface to the other nodes, and decides where a request goes: no API
# surface, client or socket of its own (axum and its WebSocket crate come
# only through the sessions' text type); the bytes are relayed above it,
# and the SQL is swarmd-postgres'.
forbid swarmd-cluster swarmd-api swarmd-mcp swarmd-server swarmd-client rmcp
forbid_direct swarmd-cluster axum tokio-tungstenite tokio-postgres
# The bench measures the protocol as any client sees it: the wire, the
# client's bodies and the vocabulary, no other swarmd crate.
forbid swarmd-bench swarmd-git swarmd-api swarmd-cluster swarmd-mcp swarmd-config swarmd-output-store swarmd-engine swarmd-spawner swarmd-server swarmd-sessions swarmd-postgres swarmd-worker swarmd-flow swarmd-flow-run

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "dependency direction ok"
