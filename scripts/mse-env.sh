#!/usr/bin/env bash
# Installs the upstream MainAI client the black-box `mse` tests drive swarmd
# with: `mse` from the crate mlua-swarm-cli at a pinned version, built with
# `cargo install --locked` into a cache outside the clone
# (${SWARMD_TOOLS_DIR:-~/.cache/swarmd-tools}/mse-<version>) so every CI run
# and every clone reuses it. The build has its own target directory under
# that cache, removed once the binary is installed, so it never touches the
# project's. Idempotent and fast when the binary is there; prints its path
# on stdout (everything else goes to stderr). A cold install compiles about
# 330 crates: see docs/mcp.md, Upstream client, for how long it takes.
set -euo pipefail

MSE_VERSION="0.32.1"
tools="${SWARMD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/swarmd-tools}"
root="$tools/mse-$MSE_VERSION"
bin="$root/bin/mse"

fail() {
    echo "mse-env: $*" >&2
    exit 1
}

# The installed binary must be the pinned version; `mse --version` prints
# `mse <version>`.
installed() {
    [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "mse $MSE_VERSION" ]
}

if installed; then
    echo "$bin"
    exit 0
fi

# One installer at a time: test processes may call this at once, and the
# second one finds the binary the first one built.
mkdir -p "$tools"
exec 9>"$root.lock"
command -v flock >/dev/null 2>&1 && flock 9

if ! installed; then
    command -v cargo >/dev/null 2>&1 ||
        fail "cargo is not installed; it is needed to build mlua-swarm-cli $MSE_VERSION"
    echo "mse-env: installing mlua-swarm-cli $MSE_VERSION into $root (a cold build takes minutes)" >&2
    started=$(date +%s)
    # Environment a surrounding `cargo test` or CI job may set is not meant
    # for this build: its own target directory, no inherited build target.
    # A test client needs no optimisation: the dev profile without debug
    # info or incremental state builds in about half the time of release.
    env -u CARGO_BUILD_TARGET -u CARGO_BUILD_TARGET_DIR \
        CARGO_TARGET_DIR="$root/target" \
        CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 \
        cargo install mlua-swarm-cli --version "$MSE_VERSION" --locked \
        --debug --root "$root" --force >&2 ||
        fail "cargo install mlua-swarm-cli --version $MSE_VERSION --locked failed (output above)"
    rm -rf "$root/target"
    installed || fail "$bin is not mse $MSE_VERSION after the install"
    echo "mse-env: installed $bin in $(($(date +%s) - started)) s" >&2
fi
echo "$bin"
