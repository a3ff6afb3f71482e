#!/usr/bin/env bash
# Two swarmd nodes against one on the same PostgreSQL (docs/benchmarks.md,
# Cluster throughput): ws-delegated load at a total concurrency of C, first
# against one node, then split half and half over two nodes (each with its
# own swarmd-bench, run at once), each on a fresh database of the
# scripts/pg-env.sh cluster. Prints each bench's summary line and the sum.
#
# Usage: scripts/cluster-scale.sh BIN_DIR [SECONDS] [C] [ONE_C]
#   BIN_DIR holds release `swarmd` and `swarmd-bench` (target/release).
#   ONE_C is the one node's concurrency (default C): C/2 compares each of
#   two nodes with one node under the same load of its own.
set -euo pipefail

bin=$(realpath "$1")
seconds=${2:-10}
conc=${3:-32}
one_c=${4:-$conc}

out=$("$(dirname "$0")/pg-env.sh")
url=$(sed -n 1p <<<"$out")
password_file=$(sed -n 2p <<<"$out")
export PGPASSWORD
PGPASSWORD=$(cat "$password_file")

work=$(mktemp -d)
pids=()
dbs=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$work"
    for db in "${dbs[@]}"; do
        psql -q "$url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    done
}
trap cleanup EXIT

fresh_db() { # sets $db_url
    local db="swarmd_scale_$RANDOM$RANDOM"
    psql -q "$url" -c "CREATE DATABASE $db" >/dev/null
    dbs+=("$db")
    db_url="${url%/*}/$db"
}

start() { # $1: node name; sets $base and $pid
    mkdir -p "$work/$1/state"
    cat >"$work/$1/swarmd.toml" <<EOF
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 2

[store]
backend = "postgres"
url = "$db_url"
password_file = "$password_file"
state_dir = "$work/$1/state"

[limits]
max_running = 200000

[ws]
park_max = 200000

[cluster]
node_lease_secs = 10
EOF
    : >"$work/$1/log"
    RUST_LOG=warn "$bin/swarmd" serve --config "$work/$1/swarmd.toml" 2>"$work/$1/log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 200); do
        base=$(sed -n 's/^listening on //p' "$work/$1/log")
        [ -n "$base" ] && break
        sleep 0.05
    done
    if [ -z "$base" ]; then
        echo "node $1 did not start:" >&2
        cat "$work/$1/log" >&2
        exit 1
    fi
    "$bin/swarmd" admin-token --config "$work/$1/swarmd.toml" >"$work/$1/admin.token"
}

bench() { # $1: node name, $2: base, $3: pid, $4: concurrency
    "$bin/swarmd-bench" --url "$2" --admin-token-file "$work/$1/admin.token" --pid "$3" \
        ws-delegated -c "$4" -m 4 --duration "$seconds" 2>&1 | grep '^ws-delegated' >"$work/$1.out"
}

rate() { sed -n 's/.*: \([0-9]*\) tasks\/s.*/\1/p' "$work/$1.out"; }

echo "== one node, C=$one_c, $seconds s"
fresh_db
start a
bench a "$base" "$pid" "$one_c"
cat "$work/a.out"
kill "$pid"
wait "$pid" 2>/dev/null || true

echo "== two nodes, C=$((conc / 2)) each, $seconds s, at once"
fresh_db
start a
a_base=$base a_pid=$pid
start b
b_base=$base b_pid=$pid
bench a "$a_base" "$a_pid" $((conc / 2)) &
first=$!
bench b "$b_base" "$b_pid" $((conc / 2))
wait "$first"
cat "$work/a.out" "$work/b.out"
echo "sum: $(($(rate a) + $(rate b))) tasks/s"
