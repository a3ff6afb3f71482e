#!/usr/bin/env bash
# Measures how long a swarmd cluster takes to take over a killed node
# (docs/benchmarks.md, Cluster takeover): two nodes on a fresh database of
# the scripts/pg-env.sh cluster; node B runs throughout; node A is started,
# given TASKS running process tasks, and killed with SIGKILL, KILLS times.
# Each sample is from the SIGKILL until B owns all of A's live tasks and
# has started their next attempt (`attempts` rows for attempt 2), read by
# polling the database every POLL_MS.
#
# Usage: scripts/cluster-takeover.sh PATH/TO/swarmd [KILLS] [LEASE_SECS]
# Prints one line per kill, then p50 / p99 / max in ms.
set -euo pipefail

swarmd=$(realpath "$1")
kills=${2:-20}
lease=${3:-2}
tasks=${TASKS:-8}
poll_ms=${POLL_MS:-10}

out=$("$(dirname "$0")/pg-env.sh")
url=$(sed -n 1p <<<"$out")
password_file=$(sed -n 2p <<<"$out")
export PGPASSWORD
PGPASSWORD=$(cat "$password_file")
db="swarmd_takeover_$RANDOM$RANDOM"
psql -q "$url" -c "CREATE DATABASE $db" >/dev/null
db_url="${url%/*}/$db"
sql() { psql -qtAX "$db_url" -c "$1"; }

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$work"
    psql -q "$url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

config() { # $1: node name
    mkdir -p "$work/$1/state"
    cat >"$work/$1/swarmd.toml" <<EOF
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 1

[store]
backend = "postgres"
url = "$db_url"
password_file = "$password_file"
state_dir = "$work/$1/state"

[auth]
keys_file = "$work/keys"
admin_token_file = "$work/admin.token"

[cluster]
node_lease_secs = $lease

[agents.slow_once]
kind = "process"
program = "/bin/sh"
args = ["-c", "if [ \"\$SWARM_ATTEMPT\" = 1 ]; then /bin/sleep 60; fi; printf '{\"type\":\"final\",\"content\":{\"kind\":\"inline\",\"value\":1},\"ok\":true}\\\\n'"]
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
EOF
}

start() { # $1: node name; sets $base and $pid
    : >"$work/$1/log"
    "$swarmd" serve --config "$work/$1/swarmd.toml" 2>"$work/$1/log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 200); do
        base=$(sed -n 's/^listening on //p' "$work/$1/log")
        [ -n "$base" ] && return
        sleep 0.05
    done
    echo "node $1 did not start:" >&2
    cat "$work/$1/log" >&2
    exit 1
}

now_ms() { date +%s%3N; }

config a
config b
start b
b_base=$base
start a
admin=$(cat "$work/admin.token")
node_a=$(cat "$work/a/state/node_id")
samples=()
for kill in $(seq "$kills"); do
    [ "$kill" = 1 ] || start a
    a_pid=$pid
    a_base=$base
    ids=()
    for _ in $(seq "$tasks"); do
        id=$(curl -sf -H "authorization: Bearer $admin" -H 'content-type: application/json' \
            -d '{"agent":"slow_once","prompt":"p","policy":{"max_attempts":2}}' \
            "$a_base/v1/tasks" | jq -r .task_id)
        ids+=("'${id#T-}'")
    done
    list=$(IFS=,; echo "${ids[*]}")
    until [ "$(sql "SELECT count(*) FROM attempts WHERE attempt = 1 AND task IN ($list)")" = "$tasks" ]; do
        sleep 0.02
    done
    # The heartbeat phase at the kill is uniform over a tick.
    sleep "0.$((RANDOM % 9))"
    t0=$(now_ms)
    kill -9 "$a_pid"
    disown "$a_pid" 2>/dev/null || true
    until [ "$(sql "SELECT count(*) FROM attempts WHERE attempt = 2 AND task IN ($list)")" = "$tasks" ]; do
        if [ $(( $(now_ms) - t0 )) -gt 60000 ]; then
            echo "no takeover within 60 s; node B's log:" >&2
            tail -40 "$work/b/log" >&2
            exit 1
        fi
        sleep "$(printf '0.%03d' "$poll_ms")"
    done
    t1=$(now_ms)
    owned=$(sql "SELECT count(*) FROM tasks WHERE owner_node = '$node_a' AND finished_ms IS NULL")
    [ "$owned" = 0 ] || { echo "node A still owns $owned live tasks" >&2; exit 1; }
    samples+=($((t1 - t0)))
    echo "kill $kill: $((t1 - t0)) ms"
    wait "$a_pid" 2>/dev/null || true
done
sorted=$(printf '%s\n' "${samples[@]}" | sort -n)
pick() { sed -n "$1p" <<<"$sorted"; }
n=${#samples[@]}
p50=$(pick $(( (n + 1) / 2 )))
p99=$(pick $(( (n * 99 + 99) / 100 )))
echo "lease ${lease}s, $n kills, $tasks tasks each: p50 ${p50} ms, p99 ${p99} ms, max $(pick "$n") ms (floor: $((2 * lease * 1000)) ms)"
curl -sf -H "authorization: Bearer $admin" "$b_base/v1/tasks?limit=1" >/dev/null
