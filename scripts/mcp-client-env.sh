#!/usr/bin/env bash
# Prepares the Python MCP client the black-box MCP tests drive swarmd with:
# a venv under target/ with the official `mcp` SDK at a pinned version.
# Idempotent and fast when the venv already holds that version; prints the
# venv's python path on stdout (everything else goes to stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

MCP_VERSION="2.3.0"
venv="${SWARMD_MCP_VENV:-${CARGO_TARGET_DIR:-target}/mcp-venv}"
python="$venv/bin/python"
stamp="$venv/.swarmd-mcp-$MCP_VERSION"

# One installer at a time: test processes may call this at once.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
command -v flock >/dev/null 2>&1 && flock 9

if [ ! -f "$stamp" ]; then
    command -v python3 >/dev/null 2>&1 || {
        echo "mcp-client-env: python3 is not installed; the MCP black-box tests need it" >&2
        exit 1
    }
    [ -x "$python" ] || python3 -m venv "$venv" >&2
    "$python" -m pip install --disable-pip-version-check --quiet "mcp==$MCP_VERSION" >&2
    touch "$stamp"
fi
echo "$(cd "$(dirname "$python")" && pwd)/python"
