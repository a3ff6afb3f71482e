#!/usr/bin/env bash
# Checks that crate dependencies point one way (docs/ARCHITECTURE.md, Invariants):
# server -> spawner -> engine -> output-store, and that the engine knows no
# HTTP, WebSocket or Lua crate.
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

forbid swarmd-output-store swarmd-engine swarmd-spawner swarmd-server axum mlua tokio-tungstenite hyper
forbid swarmd-engine swarmd-spawner swarmd-server axum mlua tokio-tungstenite hyper tower reqwest
forbid swarmd-spawner swarmd-server axum tokio-tungstenite hyper reqwest

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "dependency direction ok"
