#!/usr/bin/env bash
# The dashboard's numbers under load (docs/benchmarks.md, Dashboard): starts
# a release `swarmd` on SQLite (synchronous = full), fills it with TASKS
# tasks, measures the first render of the overview and of the task list
# (scripts/ui-bench.py render), then runs `swarmd-bench ws-delegated` at
# RATE tasks/s three ways: no dashboard, the overview open, the task list
# open, printing the daemon's CPU per 1 000 tasks from swarmd-bench and the
# browser's CPU from ui-bench.py hold. Needs a release build in
# $CARGO_TARGET_DIR (or target/) and scripts/browser-env.sh's tools.
#
#   scripts/ui-load-bench.sh [RATE] [SECONDS] [TASKS]   (5000 15 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-5000}
SECONDS_EACH=${2:-15}
TASKS=${3:-100000}
BIN=${CARGO_TARGET_DIR:-target}/release
scripts/browser-env.sh >/dev/null

DIR=$(mktemp -d /tmp/swarmd-ui-load.XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$DIR/swarmd.toml" <<EOF
[server]
bind = "127.0.0.1:$PORT"

[store]
backend = "sqlite"
state_dir = "$DIR/state"
synchronous = "full"

[limits]
max_running = 200000

[ws]
park_max = 200000
EOF
"$BIN/swarmd" serve --config "$DIR/swarmd.toml" 2>"$DIR/daemon.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$DIR"' EXIT
URL="http://127.0.0.1:$PORT"
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
TOKEN="$DIR/state/admin.token"
bench() {
    "$BIN/swarmd-bench" --url "$URL" --admin-token-file "$TOKEN" --pid "$DAEMON" "$@"
}

echo "== filling the store with $TASKS tasks"
bench ws-delegated -c 32 --count "$TASKS" | tail -n 3
echo "== first render with $TASKS tasks stored"
python3 scripts/ui-bench.py render "$URL" "$TOKEN" 5

for view in none '#/overview' '#/tasks'; do
    echo "== $RATE tasks/s for ${SECONDS_EACH}s, dashboard: $view"
    if [ "$view" != none ]; then
        python3 scripts/ui-bench.py hold "$URL" "$TOKEN" "$view" $((SECONDS_EACH + 4)) &
        HOLD=$!
        sleep 3
    fi
    bench ws-delegated --rate "$RATE" --duration "$SECONDS_EACH" --warmup 1
    if [ "$view" != none ]; then wait $HOLD; fi
done
