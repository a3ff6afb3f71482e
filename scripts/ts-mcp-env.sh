#!/usr/bin/env bash
# Installs the official TypeScript MCP SDK (`@modelcontextprotocol/sdk`, the
# client Claude Code and the MCP Inspector are built on) at a pinned version,
# with npm, into a cache outside the clone
# (${SWARMD_TOOLS_DIR:-~/.cache/swarmd-tools}/ts-mcp-sdk-<version>), for the
# black-box test `mcp::ts_client`, which runs tests/blackbox/mcp/ts_client.mjs
# with node against the real daemon. Idempotent and fast when installed;
# prints the directory whose node_modules holds the SDK on stdout
# (everything else goes to stderr). A cold install downloads about 20 MB
# (98 packages, 29 MB on disk) and takes about 5 s.
set -euo pipefail

SDK="@modelcontextprotocol/sdk@1.32.2"
tools="${SWARMD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/swarmd-tools}"
root="$tools/ts-mcp-sdk-1.32.2"
package="$root/node_modules/@modelcontextprotocol/sdk/package.json"

fail() {
    echo "ts-mcp-env: $*" >&2
    exit 1
}

installed() {
    [ -f "$root/.complete" ] && [ -f "$package" ]
}

if installed; then
    echo "$root"
    exit 0
fi

# One installer at a time: test processes may call this at once.
mkdir -p "$tools"
exec 9>"$root.lock"
command -v flock >/dev/null 2>&1 && flock 9

if ! installed; then
    command -v node >/dev/null 2>&1 || fail "node is not installed; it is needed to run $SDK"
    command -v npm >/dev/null 2>&1 || fail "npm is not installed; it is needed to install $SDK"
    echo "ts-mcp-env: installing $SDK into $root" >&2
    started=$(date +%s)
    rm -rf "$root"
    mkdir -p "$root"
    # A package.json of its own keeps npm from walking up to another project.
    echo '{"private": true}' >"$root/package.json"
    npm install --prefix "$root" --no-audit --no-fund --no-update-notifier "$SDK" >&2 ||
        fail "npm install $SDK failed (output above)"
    [ -f "$package" ] || fail "$root/node_modules lacks $SDK after the install"
    touch "$root/.complete"
    echo "ts-mcp-env: installed in $(($(date +%s) - started)) s" >&2
fi
echo "$root"
