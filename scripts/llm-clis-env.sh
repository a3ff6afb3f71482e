#!/usr/bin/env bash
# Installs the LLM coding CLIs whose stream formats swarmd reads
# (docs/agents-cli.md) at the versions the adapters were written against,
# with npm, into a cache outside the clone
# (${SWARMD_TOOLS_DIR:-~/.cache/swarmd-tools}/llm-clis-<versions>), so the
# black-box test `cli_streams` can check that the flags the shipped example
# agents use (config/swarmd.toml) still exist. The CLIs are only asked for
# their help: no model is reached. Idempotent and fast when installed;
# prints the directory holding the three executables on stdout (everything
# else goes to stderr). A cold install downloads about 740 MB and takes
# about 15 s.
set -euo pipefail

CLAUDE="@anthropic-ai/claude-code@2.1.197"
CODEX="@openai/codex@0.169.0"
GEMINI="@google/gemini-cli@0.61.0"
tools="${SWARMD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/swarmd-tools}"
root="$tools/llm-clis-claude-2.1.197-codex-0.169.0-gemini-0.61.0"
bin="$root/node_modules/.bin"

fail() {
    echo "llm-clis-env: $*" >&2
    exit 1
}

installed() {
    [ -f "$root/.complete" ] && [ -x "$bin/claude" ] && [ -x "$bin/codex" ] && [ -x "$bin/gemini" ]
}

if installed; then
    echo "$bin"
    exit 0
fi

# One installer at a time: test processes may call this at once.
mkdir -p "$tools"
exec 9>"$root.lock"
command -v flock >/dev/null 2>&1 && flock 9

if ! installed; then
    command -v npm >/dev/null 2>&1 || fail "npm is not installed; it is needed to install $CLAUDE $CODEX $GEMINI"
    echo "llm-clis-env: installing $CLAUDE $CODEX $GEMINI into $root" >&2
    started=$(date +%s)
    rm -rf "$root"
    mkdir -p "$root"
    # A package.json of its own keeps npm from walking up to another project.
    echo '{"private": true}' >"$root/package.json"
    npm install --prefix "$root" --no-audit --no-fund --no-update-notifier \
        "$CLAUDE" "$CODEX" "$GEMINI" >&2 ||
        fail "npm install $CLAUDE $CODEX $GEMINI failed (output above)"
    [ -x "$bin/claude" ] && [ -x "$bin/codex" ] && [ -x "$bin/gemini" ] ||
        fail "$bin lacks one of claude, codex, gemini after the install"
    touch "$root/.complete"
    echo "llm-clis-env: installed in $(($(date +%s) - started)) s" >&2
fi
echo "$bin"
