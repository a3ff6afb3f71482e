#!/usr/bin/env bash
# Two swarmd nodes against one on the same PostgreSQL (docs/benchmarks.md,
# Cluster throughput): ws-delegated load at a total concurrency of C, first
# against one node, then split half and half over two nodes (each with its
# own swarmd-bench, run at once), each on a fresh database of the
# scripts/pg-env.sh cluster. Prints each bench's summary line and the sum,
# and each node's write groups over its run (from /metrics): commits per
# finished task and write jobs per commit, which CPU per task follows.
#
# Usage: scripts/cluster-scale.sh BIN_DIR [SECONDS] [C] [ONE_C]
#   BIN_DIR holds release `swarmd` and `swarmd-bench` (target/release).
#   ONE_C is the one node's concurrency (default C): C/2 compares each of
#   two nodes with one node under the same load of its own.
# Two other operating points (docs/benchmarks.md, "The ratio at three
# operating points"):
#   CLUSTER_RATE=R  every bench offers R tasks/s (open loop) instead of
#                   holding C in flight: one node at R against each of two
#                   at R, the same work per node at the same pace;
#   CLUSTER_PIN=1   each node on a CPU of its own (`taskset`): one node on
#                   CPU 0, of two node A on CPU 0 and B on CPU 1, so a node
#                   of two is not also paying for the other's threads on
#                   its core (PostgreSQL and the benches are not pinned).
set -euo pipefail

bin=$(realpath "$1")
seconds=${2:-10}
conc=${3:-32}
one_c=${4:-$conc}

# shellcheck source=scripts/cluster-nodes.sh
source "$(dirname "$0")/cluster-nodes.sh"

load=()
[ -n "${CLUSTER_RATE:-}" ] && load=(--rate "$CLUSTER_RATE")

bench() { # $1: node name, $2: base, $3: pid, $4: concurrency
    "$bin/swarmd-bench" --url "$2" --admin-token-file "$work/$1/admin.token" --pid "$3" \
        ws-delegated "${load[@]}" -c "$4" -m 4 --duration "$seconds" >"$work/$1.full" 2>&1 || {
        tail -3 "$work/$1.full" >&2
        return 1
    }
    grep '^ws-delegated' "$work/$1.full" >"$work/$1.out"
}

pin() { # $1: pid, $2: CPU
    if [ -n "${CLUSTER_PIN:-}" ]; then taskset -acp "$2" "$1" >/dev/null; fi
}

rate() { sed -n 's/.*: \([0-9]*\) tasks\/s.*/\1/p' "$work/$1.out"; }

# Finished tasks, commits and write jobs so far, by /metrics.
counters() {
    curl -sf "$1/metrics" | awk '/^swarmd_tasks_finished_total/ { t += $2 }
        /^swarmd_store_commits_total/ { c += $2 } /^swarmd_store_write_jobs_total/ { j += $2 }
        END { print t + 0, c + 0, j + 0 }'
}

# $1: node name, $2 and $3: its counters before and after its bench.
groups() {
    read -r t1 c1 j1 <<<"$2"
    read -r t2 c2 j2 <<<"$3"
    awk -v n="$1" -v t=$((t2 - t1)) -v c=$((c2 - c1)) -v j=$((j2 - j1)) 'BEGIN {
        if (t > 0 && c > 0) printf "groups %s: %.3f commits/task, %.1f jobs/commit\n", n, c / t, j / c }'
}

echo "== one node, C=$one_c${CLUSTER_RATE:+, $CLUSTER_RATE tasks/s offered}${CLUSTER_PIN:+, pinned}, $seconds s"
fresh_db
start a
pin "$pid" 0
before=$(counters "$base")
bench a "$base" "$pid" "$one_c"
cat "$work/a.out"
groups a "$before" "$(counters "$base")"
kill "$pid"
wait "$pid" 2>/dev/null || true

echo "== two nodes, C=$((conc / 2)) each${CLUSTER_RATE:+, $CLUSTER_RATE tasks/s offered to each}${CLUSTER_PIN:+, pinned}, $seconds s, at once"
fresh_db
start a
a_base=$base a_pid=$pid
start b
b_base=$base b_pid=$pid
pin "$a_pid" 0
pin "$b_pid" 1
a_before=$(counters "$a_base")
b_before=$(counters "$b_base")
bench a "$a_base" "$a_pid" $((conc / 2)) &
first=$!
bench b "$b_base" "$b_pid" $((conc / 2))
wait "$first"
cat "$work/a.out" "$work/b.out"
groups a "$a_before" "$(counters "$a_base")"
groups b "$b_before" "$(counters "$b_base")"
echo "sum: $(($(rate a) + $(rate b))) tasks/s"
