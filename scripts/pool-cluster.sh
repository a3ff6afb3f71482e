#!/usr/bin/env bash
# One worker pool against two swarmd nodes on one PostgreSQL database
# (docs/benchmarks.md, Worker pools on a cluster): N remote tasks are
# queued on each node, then a `swarmd worker pool` (running /bin/true per
# attempt) is started given node A alone (it learns node B from A), then
# on fresh nodes and a fresh database given both nodes, then given node A
# with --through-server (every claim for B goes through A). Prints, per
# run, the seconds from the pool's start until every task passed, the
# tasks/s, how many attempts each node handed out and how many requests
# node A forwarded.
#
# Usage: scripts/pool-cluster.sh BIN_DIR [N] [CONCURRENCY]
#   BIN_DIR holds a release `swarmd` (target/release).
set -euo pipefail

bin=$(realpath "$1")
per_node=${2:-200}
concurrency=${3:-16}
# A run that has not finished by then says how far it got.
give_up=30

# shellcheck source=scripts/cluster-nodes.sh
source "$(dirname "$0")/cluster-nodes.sh"

remote='[agents.remote]
kind = "remote"
stdin = "none"'

queue() { # $1: node name, $2: base
    local admin
    admin=$(cat "$work/$1/admin.token")
    seq "$per_node" | xargs -P 8 -I{} curl -sf -o /dev/null -X POST "$2/v1/tasks" \
        -H "authorization: Bearer $admin" -H 'content-type: application/json' \
        -d '{"agent": "remote", "prompt": "p{}"}'
}

passed() { psql -qtA "$db_url" -c "SELECT count(*) FROM tasks WHERE status = 'pass'"; }

claimed() { # $1: base
    curl -sf "$1/metrics" | sed -n 's/^swarmd_remote_attempts_claimed_total //p'
}

forwarded() { # $1: base
    local n
    n=$(curl -sf "$1/metrics" |
        sed -n 's/^swarmd_cluster_forwarded_requests_total{outcome="forwarded"} //p')
    echo "${n:-0}"
}

run() { # $1: the pool's id, $2: label, then the nodes it is given (a, b) and `through`
    local id=$1 label=$2
    shift 2
    fresh_db
    start a "$remote"
    a_base=$base
    start b "$remote"
    b_base=$base
    queue a "$a_base"
    queue b "$b_base"
    token=$("$bin/swarmd" token mint --role worker-pool --agent remote \
        --config "$work/a/swarmd.toml")
    local servers=()
    for node in "$@"; do
        case $node in
            a) servers+=(--server "$a_base") ;;
            b) servers+=(--server "$b_base") ;;
            through) servers+=(--through-server) ;;
        esac
    done
    local started
    started=$(date +%s.%N)
    SWARMD_TOKEN=$token RUST_LOG=warn "$bin/swarmd" worker pool "${servers[@]}" \
        --agent remote --concurrency "$concurrency" --pool-id "$id" \
        -- /bin/true 2>"$work/pool-$id.log" &
    pids+=($!)
    local total=$((2 * per_node))
    while [ "$(passed)" -lt "$total" ]; do
        if [ "$(echo "$(date +%s.%N) - $started > $give_up" | bc)" = 1 ]; then
            printf '%s: only %d of %d tasks passed in %d s; claimed from A %s, from B %s\n' \
                "$label" "$(passed)" "$total" "$give_up" "$(claimed "$a_base")" "$(claimed "$b_base")"
            tail -3 "$work/pool-$id.log" >&2
            stop_all
            return
        fi
        sleep 0.05
    done
    local secs
    secs=$(echo "$(date +%s.%N) - $started" | bc)
    printf '%s: %d tasks in %.2f s, %.0f tasks/s; claimed from A %s, from B %s; A forwarded %s\n' \
        "$label" "$total" "$secs" "$(echo "$total / $secs" | bc -l)" \
        "$(claimed "$a_base")" "$(claimed "$b_base")" "$(forwarded "$a_base")"
    stop_all
}

run one-url "one URL (A)" a
run both-urls "both URLs" a b
run through-a "one URL (A), through it" a through
