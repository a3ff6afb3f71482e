# Sourced by the cluster benchmark scripts (cluster-scale.sh,
# pool-cluster.sh): swarmd nodes on fresh databases of the scripts/pg-env.sh
# cluster, every process and database removed on exit. The sourcing script
# sets `bin` (a directory with a release `swarmd`) first.
#
#   fresh_db          a new database: sets $db and $db_url
#   start NAME [TOML] a node on $db_url, TOML appended to its config:
#                     sets $base and $pid, writes $work/NAME/admin.token
#   stop_all          kills the nodes (and whatever else is in $pids), quietly

out=$("$(dirname "${BASH_SOURCE[0]}")/pg-env.sh")
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

fresh_db() {
    db="swarmd_bench_$RANDOM$RANDOM"
    psql -q "$url" -c "CREATE DATABASE $db" >/dev/null
    dbs+=("$db")
    db_url="${url%/*}/$db"
}

start() {
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
${2:-}
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

stop_all() {
    for pid in "${pids[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}
