#!/usr/bin/env python3
"""Checks src/ for include circles and prints net/'s graph.

Two graphs from the #include "..." lines:
  - headers: header -> header it includes (a circle here cannot compile cleanly);
  - units: a unit X (X.c with X.h, and X_internal.h, a module's private header) -> unit Y when
    one of its files includes Y.h. A circle here means two modules need each other (a call
    circle through their headers).
Exits 1 and prints each circle if any; with --net also prints the unit graph of src/net.
Usage: scripts/include_graph.py [--net]
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return [i for i in INC.findall(f.read()) if os.path.exists(os.path.join(ROOT, i))]


def files():
    for d, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, n), ROOT)


def circles(graph):
    """Every elementary circle found by a depth-first search (one per back edge)."""
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def main():
    all_files = sorted(files())
    headers = {f: {i for i in includes(f) if i.endswith(".h")} for f in all_files if f.endswith(".h")}
    units = {}
    for f in all_files:
        u = f[:-2]
        if u.endswith("_internal"):
            u = u[: -len("_internal")]
        deps = {i[:-2] for i in includes(f)} - {u}
        units.setdefault(u, set()).update(deps)
    bad = 0
    for kind, g in (("header", headers), ("unit", units)):
        for c in circles(g):
            print(f"{kind} circle: {' -> '.join(c)}")
            bad += 1
    if "--net" in sys.argv:
        for u in sorted(units):
            if u.startswith("net/"):
                print(f"{u} -> {', '.join(sorted(d for d in units[u] if d.startswith('net/'))) or '-'}")
    print(f"{len(all_files)} files, {bad} circle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
