#!/usr/bin/env bash
# Two builds side by side on the cluster workload (docs/benchmarks.md,
# Cluster throughput): runs scripts/cluster-scale.sh (one node at C, then
# two nodes at C/2 each, fresh databases) for the base build and the new
# one alternately, ROUNDS times, the order flipped every other round, so
# both builds meet the same minutes of this host. Prints each run's lines
# tagged with its build, then a table of tasks/s and server CPU s/1k.
#
# Usage: scripts/cluster-compare.sh BASE_DIR NEW_DIR [ROUNDS] [SECONDS] [C] [ONE_C]
#   each DIR holds release `swarmd` and `swarmd-bench` (target/release);
#   ONE_C is the one node's concurrency (default C, see cluster-scale.sh).
set -euo pipefail

base=$(realpath "$1")
new=$(realpath "$2")
rounds=${3:-3}
seconds=${4:-10}
conc=${5:-32}
one_c=${6:-$conc}
here=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # $1: tag, $2: dir
    "$here/cluster-scale.sh" "$2" "$seconds" "$conc" "$one_c" | sed "s/^/$1 /" | tee -a "$out"
}

for round in $(seq "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then
        run base "$base"
        run new "$new"
    else
        run new "$new"
        run base "$base"
    fi
done

# Each build's runs: one node's tasks/s and CPU, then each of two nodes'.
echo
echo "| build | one node tasks/s | one node srv CPU s/1k | two nodes sum tasks/s | two nodes srv CPU s/1k (A, B) |"
echo "|---|--:|--:|--:|--:|"
awk '
/== one node/ { mode[$1] = "one"; next }
/== two nodes/ { mode[$1] = "two"; n[$1] = 0; next }
/ws-delegated/ {
    tag = $1
    match($0, /: [0-9]+ tasks\/s/); rate = substr($0, RSTART + 2, RLENGTH - 10)
    match($0, /srv CPU [0-9.]+ s\/1k/); cpu = substr($0, RSTART + 8, RLENGTH - 13)
    if (mode[tag] == "one") { one[tag] = rate; onecpu[tag] = cpu }
    else { n[tag]++; two[tag] += rate; twocpu[tag] = twocpu[tag] (n[tag] > 1 ? ", " : "") cpu
        if (n[tag] == 2) { printf "| %s | %s | %s | %d | %s |\n", tag, one[tag], onecpu[tag], two[tag], twocpu[tag]; two[tag] = 0; twocpu[tag] = "" } }
}' "$out"
