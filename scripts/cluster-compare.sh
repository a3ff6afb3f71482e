#!/usr/bin/env bash
# Two builds side by side on the cluster workload (docs/benchmarks.md,
# Cluster throughput): runs scripts/cluster-scale.sh (one node at C, then
# two nodes at C/2 each, fresh databases) for the base build and the new
# one alternately, ROUNDS times, the order flipped every other round, so
# both builds meet the same minutes of this host. Prints each run's lines
# tagged with its build, then a table of tasks/s, server CPU s/1k, the
# ratios of two nodes to one and the write groups, and their medians.
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

# Each build's runs: one node's tasks/s, CPU and jobs per commit, then
# each of two nodes', with the ratios issue 32 sets targets for (each
# node's CPU per task over one node's, the two nodes' tasks/s over one's);
# then each build's medians of those ratios.
echo
echo "| build | one node tasks/s | one node srv CPU s/1k | two nodes sum tasks/s | two nodes srv CPU s/1k (A, B) | two ÷ one tasks/s | CPU of A, B ÷ one | jobs/commit one; A, B |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|"
awk '
function median(list, count,    i, j, t, a) {
    split(list, a, " ")
    for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return count % 2 ? a[(count + 1) / 2] : (a[count / 2] + a[count / 2 + 1]) / 2
}
/== one node/ { mode[$1] = "one"; next }
/== two nodes/ { mode[$1] = "two"; n[$1] = 0; g[$1] = ""; next }
/groups [ab]:/ {
    tag = $1; match($0, /[0-9.]+ jobs\/commit/); jobs = substr($0, RSTART, RLENGTH - 12)
    if (mode[tag] == "one") onejobs[tag] = jobs
    else g[tag] = g[tag] (g[tag] == "" ? "" : ", ") jobs
    if (mode[tag] == "two" && g[tag] ~ /, /) {
        printf "| %s | %s | %s | %d | %s | %.2f | %.2f, %.2f | %s; %s |\n", tag, one[tag], onecpu[tag], two[tag],
            cpua[tag] ", " cpub[tag], two[tag] / one[tag], cpua[tag] / onecpu[tag], cpub[tag] / onecpu[tag], onejobs[tag], g[tag]
        cpus[tag] = cpus[tag] " " cpua[tag] / onecpu[tag] " " cpub[tag] / onecpu[tag]; ncpu[tag] += 2
        rates[tag] = rates[tag] " " two[tag] / one[tag]; nrate[tag]++
        two[tag] = 0
    }
    next
}
/ws-delegated/ {
    tag = $1
    match($0, /: [0-9]+ tasks\/s/); rate = substr($0, RSTART + 2, RLENGTH - 10)
    match($0, /srv CPU [0-9.]+ s\/1k/); cpu = substr($0, RSTART + 8, RLENGTH - 13)
    if (mode[tag] == "one") { one[tag] = rate; onecpu[tag] = cpu }
    else { n[tag]++; two[tag] += rate; if (n[tag] == 1) cpua[tag] = cpu; else cpub[tag] = cpu }
}
END {
    print ""
    for (tag in nrate) printf "%s: median of each node'"'"'s CPU ÷ one node'"'"'s %.2f (%d nodes), of two ÷ one tasks/s %.2f (%d runs)\n",
        tag, median(cpus[tag], ncpu[tag]), ncpu[tag], median(rates[tag], nrate[tag]), nrate[tag]
}' "$out"
