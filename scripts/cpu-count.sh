#!/usr/bin/env bash
# Instructions the daemon executes per delegated task, counted by valgrind's
# callgrind (docs/benchmarks.md, "Counted in instructions"). A count, not a
# timing: the same binary and workload give the same figure within about
# 1 % on any machine, busy or not, so a change of a few per cent on the hot
# path shows here where timings between runs spread by ±15 %.
#
# The daemon runs under callgrind (about 50× slower), driven by BIN_DIR's
# swarmd-bench at a low concurrency. Its instructions are counted over the
# middle half of the run (start-up and the last tasks left out) and divided
# by the tasks `/metrics` saw finish in that window. Prints the
# instructions per finished task, the workspace's functions by inclusive
# instructions per task, then the walk as it ran: how many workspace
# functions ran in the window, by crate, and the calls per task from one
# workspace crate into another.
#
# Valgrind's CPU has no SHA extensions, so SHA-256 (tokens, fingerprints,
# body digests) runs the portable code here, about ten times the
# instructions it takes on a CPU that has them: compare builds with each
# other, not with a profile of the real CPU.
#
# Usage: scripts/cpu-count.sh BIN_DIR [STORE] [SECONDS] [C]
#   BIN_DIR holds release `swarmd` and `swarmd-bench` (target/release);
#   STORE is memory (default) or sqlite. CPU_COUNT_CALLS=N also prints the
#   N most frequent calls between crates, caller and callee by name.
#   CPU_COUNT_BENCH names another `swarmd-bench` to drive it (one generator
#   for two builds), and CPU_COUNT_ARGS adds to ws-delegated's arguments.
set -euo pipefail

bin=$(realpath "$1")
store=${2:-memory}
seconds=${3:-20}
conc=${4:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }

cat >"$work/swarmd" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$work/cg.out "$bin/swarmd" "\$@"
EOF
chmod +x "$work/swarmd"

"${CPU_COUNT_BENCH:-$bin/swarmd-bench}" --spawn-daemon "$work/swarmd" --store "$store" \
    ws-delegated -c "$conc" -m 1 --duration "$seconds" ${CPU_COUNT_ARGS:-} >"$work/bench.out" 2>&1 &
bench=$!
pid= url=
for _ in $(seq 600); do
    pid=$(sed -n 's/.* pid \([0-9]*\),.*/\1/p' "$work/bench.out" | head -1)
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/bench.out" | head -1 || true)
    [ -n "$pid" ] && break
    sleep 0.2
done
[ -n "$pid" ] || { cat "$work/bench.out" >&2; exit 1; }

finished() { # tasks finished so far, by /metrics
    curl -sf "$url/metrics" | awk '/^swarmd_tasks_finished_total/ { n += $2 } END { print n + 0 }'
}
# The middle of the run: from a quarter in to a quarter before its end.
sleep $((seconds / 4))
callgrind_control -z "$pid" >/dev/null 2>&1
first=$(finished)
sleep $((seconds / 2))
callgrind_control -d "$pid" >/dev/null 2>&1
last=$(finished)
wait "$bench"

grep '^ws-delegated' "$work/bench.out"
tasks=$((last - first))
dump=$(ls "$work"/cg.out.* | sort -t. -k3 -n | head -1)
callgrind_annotate --inclusive=yes "$dump" 2>/dev/null >"$work/inclusive.txt"
python3 - "$work/inclusive.txt" "$tasks" "$dump" "${CPU_COUNT_CALLS:-0}" <<'PY'
import collections, re, sys

text = open(sys.argv[1]).read()
tasks = int(sys.argv[2])
total = int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", text)[1].replace(",", ""))
print(f"\n{tasks} tasks, {total / tasks:,.0f} instructions per task\n")
print("inclusive instructions per task, workspace functions:")
shown = 0
for line in text.splitlines():
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:(swarmd_\S+)", line)
    if m and shown < 25:
        print(f"{int(m[1].replace(',', '')) / tasks:10,.0f}  {m[2][:110]}")
        shown += 1

# The walk, as run: which workspace functions ran, and the calls that
# crossed from one workspace crate into another (a trait object's or a
# closure's call counts for the crate that defines it), after inlining.
names = {}
def named(token):
    m = re.match(r"\((\d+)\)(?: (.*))?", token)
    if not m:
        return token
    if m[2]:
        names[m[1]] = m[2]
    return names.get(m[1], "?")
def crate(name):
    m = re.search(r"swarmd_[a-z_]+", name)
    return m[0] if m else None
functions, pairs, edges = set(), collections.Counter(), collections.Counter()
caller = callee = None
for line in open(sys.argv[3]):
    if line.startswith("fn="):
        caller, callee = named(line[3:].rstrip()), None
        if crate(caller):
            functions.add(caller)
    elif line.startswith("cfn="):
        callee = named(line[4:].rstrip())
    elif line.startswith("calls=") and callee:
        a, b = crate(caller), crate(callee)
        if a and b and a != b:
            pairs[(a, b)] += int(line[6:].split()[0])
            edges[(caller, callee)] += int(line[6:].split()[0])
        callee = None
by_crate = collections.Counter(crate(f) for f in functions)
print(f"\nworkspace functions run: {len(functions)} in {len(by_crate)} crates "
      f"({', '.join(f'{c[7:]} {n}' for c, n in by_crate.most_common())})")
print(f"calls between workspace crates: {sum(pairs.values()) / tasks:.1f} per task")
for (a, b), n in pairs.most_common():
    print(f"{n / tasks:10.2f}  {a[7:]} -> {b[7:]}")
shown = int(sys.argv[4])
if shown:
    print(f"\nthe {shown} most frequent calls between crates, per task:")
    short = lambda name: re.sub(r"::\{\{closure\}\}", "::{closure}", name)[:90]
    for (a, b), n in edges.most_common(shown):
        print(f"{n / tasks:10.2f}  {short(a)}\n            -> {short(b)}")
PY
