#!/usr/bin/env python3
"""Prints each crate's production lines and its largest circle of modules.

Production lines: lines of `.rs` files under a crate's `src/`, leaving out
test files (`*tests*`, files under a `tests/` folder), test support gated
on a test feature (`testing.rs`, the store `conformance` cases) and inline
`#[cfg(test)] mod … { … }` blocks. A circle: the largest strongly connected
set of a crate's top-level modules (files and folders directly under
`src/`), linked by the `crate::name` paths their production code (not its
comments) uses, grouped ones (`use crate::{a, b}`) included; a path to an
item the crate root re-exports from a module (`crate::Engine`, defined in
`engine`) links to that module.
With `--check`, exits 1 when a crate passes issue 29's bounds: more than
12 000 production lines, or a circle of more than 3 modules.
Usage: scripts/crate-shape.py [--check] [CRATES_DIR]  (default: crates)
"""

import os
import re
import sys


def production(src):
    """The lines of `src` outside inline `#[cfg(test)]` modules."""
    out, lines, i = [], src.split("\n"), 0
    while i < len(lines):
        if (
            lines[i].strip() == "#[cfg(test)]"
            and i + 1 < len(lines)
            and re.match(r"\s*(pub(\(\w+\))? )?mod \w+ \{", lines[i + 1])
        ):
            depth, j = 0, i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                if depth <= 0:
                    break
                j += 1
            i = j + 1
            continue
        out.append(lines[i])
        i += 1
    return out


def is_test_file(path, name):
    return (
        "tests" in name
        or name == "testing.rs"
        or "conformance" in path
        or f"{os.sep}tests{os.sep}" in path
    )


def largest_circle(graph):
    """Tarjan's strongly connected components; the largest one."""
    index, low, stack, on, best, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > len(best):
                best[:] = component

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return sorted(best)


def group_heads(code, start):
    """The first segment of each path in the `{...}` opening at `start`."""
    depth, item, heads = 0, "", []
    for ch in code[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ",":
            heads.append(item)
            item = ""
        else:
            item += ch
    heads.append(item)
    return [m.group(0) for h in heads if (m := re.match(r"\w+", h.strip()))]


def crate_paths(code):
    """The first segment after every `crate::` in `code`."""
    for m in re.finditer(r"crate::(\{|\w+)", code):
        if m.group(1) == "{":
            yield from group_heads(code, m.start(1))
        else:
            yield m.group(1)


def reexports(src_dir, tops):
    """Items the crate root re-exports from one of its modules: name -> module."""
    owners = {}
    for root_file in ("lib.rs", "main.rs"):
        path = os.path.join(src_dir, root_file)
        if not os.path.isfile(path):
            continue
        code = open(path, encoding="utf-8").read()
        for m in re.finditer(r"pub(?:\(crate\))? use (\w+)::(\{[^;]*\}|\w+)", code):
            module, items = m.group(1), m.group(2)
            if module not in tops:
                continue
            names = group_heads(items, 0) if items.startswith("{") else [items]
            for name in names:
                owners.setdefault(name, module)
    return owners


def crate_shape(src_dir):
    tops = {
        n[:-3] if n.endswith(".rs") else n
        for n in os.listdir(src_dir)
        if n.endswith(".rs") or os.path.isdir(os.path.join(src_dir, n))
    } - {"lib", "main"}
    owners = reexports(src_dir, tops)
    lines, graph = 0, {t: set() for t in tops}
    for root, _, files in os.walk(src_dir):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".rs") or is_test_file(path, name):
                continue
            kept = production(open(path, encoding="utf-8").read())
            lines += len(kept)
            rel = os.path.relpath(path, src_dir).split(os.sep)[0]
            top = rel[:-3] if rel.endswith(".rs") else rel
            if top not in tops:
                continue
            code = "\n".join(l for l in kept if not l.lstrip().startswith("//"))
            for used in crate_paths(code):
                used = used if used in tops else owners.get(used)
                if used is not None and used != top:
                    graph[top].add(used)
    return lines, largest_circle(graph)


MAX_LINES = 12_000
MAX_CIRCLE = 3


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if not a.startswith("--")]
    crates = args[0] if args else "crates"
    rows = []
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if os.path.isdir(src):
            lines, circle = crate_shape(src)
            rows.append((lines, crate, circle))
    print(f"{'crate':14} {'lines':>6}  largest circle of top-level modules")
    for lines, crate, circle in sorted(rows, reverse=True):
        shown = f"{len(circle)}: {' '.join(circle)}" if len(circle) > 1 else "none"
        print(f"{crate:14} {lines:6}  {shown}")
    over = [
        crate
        for lines, crate, circle in rows
        if lines > MAX_LINES or len(circle) > MAX_CIRCLE
    ]
    if check and over:
        print(
            f"over {MAX_LINES} production lines or a circle of more than "
            f"{MAX_CIRCLE}: {' '.join(sorted(over))}",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
