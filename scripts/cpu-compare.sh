#!/usr/bin/env bash
# Two builds of the daemon side by side on the delegated hot path
# (docs/benchmarks.md, "Half the CPU per task, against 9f3efec"): one
# generator (NEW_DIR's swarmd-bench) runs ws-delegated against BASE_DIR's
# `swarmd` and NEW_DIR's `swarmd` alternately, ROUNDS times, the order
# flipped every other round, a fresh daemon (and, on PostgreSQL, a fresh
# database) per run, so both builds meet the same minutes of this host.
# Prints each run's line tagged with its build, then each build's medians
# (range) of tasks/s, p50, p99 and server CPU per task, and the ratio of
# the medians' CPU per task, new ÷ base.
#
# Usage: scripts/cpu-compare.sh BASE_DIR NEW_DIR [STORE] [ROUNDS] [SECONDS] [C]
#   each DIR holds a release `swarmd` (target/release); NEW_DIR also holds
#   `swarmd-bench`. STORE is memory, sqlite (default) or postgres; postgres
#   starts or reuses the cluster of scripts/pg-env.sh. CPU_COMPARE_ARGS
#   adds to ws-delegated's arguments (`--prompt-bytes 4096`, say).
set -euo pipefail

base=$(realpath "$1")
new=$(realpath "$2")
store=${3:-sqlite}
rounds=${4:-6}
seconds=${5:-8}
conc=${6:-32}
here=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT

pg=()
if [ "$store" = postgres ]; then
    env_out=$("$here/pg-env.sh")
    pg=(--pg-url "$(sed -n 1p <<<"$env_out")" --pg-password-file "$(sed -n 2p <<<"$env_out")")
fi

run() { # $1: tag, $2: dir
    "$new/swarmd-bench" --spawn-daemon "$2/swarmd" --store "$store" "${pg[@]}" \
        ws-delegated -c "$conc" -m 4 --duration "$seconds" ${CPU_COMPARE_ARGS:-} 2>&1 |
        grep '^ws-delegated' | sed "s/^/$1 /" | tee -a "$out"
}

for round in $(seq "$rounds"); do
    order=(base new)
    [ $((round % 2)) -eq 0 ] && order=(new base)
    for tag in "${order[@]}"; do
        if [ "$tag" = base ]; then run base "$base"; else run new "$new"; fi
    done
done

python3 - "$out" <<'EOF'
import re, statistics, sys

runs = {"base": [], "new": []}
for line in open(sys.argv[1]):
    tag = line.split()[0]
    rate = re.search(r": (\d+) tasks/s", line)
    lat = re.search(r"tasks/s, p50 ([\d.]+) p99 ([\d.]+)", line)
    cpu = re.search(r"srv CPU ([\d.]+) s/1k", line)
    if rate and cpu:
        runs[tag].append((float(rate[1]), float(lat[1]) if lat else None,
                          float(lat[2]) if lat else None, float(cpu[1])))

def col(tag, i):
    return [r[i] for r in runs[tag] if r[i] is not None]

def cell(values, fmt):
    if not values:
        return "-"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"

print()
print("| build | runs | tasks/s | p50 ms | p99 ms | srv CPU ms/task |")
print("|---|--:|--:|--:|--:|--:|")
for tag in ("base", "new"):
    print(f"| {tag} | {len(runs[tag])} | {cell(col(tag, 0), '{:.0f}')} | "
          f"{cell(col(tag, 1), '{:.2f}')} | {cell(col(tag, 2), '{:.2f}')} | "
          f"{cell(col(tag, 3), '{:.3f}')} |")
if col("base", 3) and col("new", 3):
    ratio = statistics.median(col("new", 3)) / statistics.median(col("base", 3))
    print(f"\nnew ÷ base, median CPU per task: {ratio:.2f}")
EOF
