#!/usr/bin/env python3
"""Checks src/ for call circles between modules, from the compiled objects' symbols.

scripts/include_graph.py reads #include lines; a module can also reach another through an
`extern` declaration or a header it does not include directly, which only the linker sees. Here
each object's defined and undefined global symbols (nm) give the graph: unit X -> unit Y when X
calls (or reads) a symbol Y defines. A unit is a .c file, or the module whose private header
(X_internal.h) it includes: the files of one module may call each other freely.
Exits 1 and prints each circle if any.
Usage: scripts/call_graph.py OBJDIR   (e.g. build/san, after the library is built)
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from include_graph import ROOT, circles, includes  # noqa: E402


def unit_of(src):
    """src/-relative path of a .c file -> its unit name."""
    for i in includes(src):
        if i.endswith("_internal.h"):
            return i[: -len("_internal.h")]
    return src[:-2]


def main():
    objdir = sys.argv[1] if len(sys.argv) > 1 else "build/san"
    defined, used = {}, {}
    n = 0
    for d, _, names in os.walk(objdir):
        for name in names:
            if not name.endswith(".o"):
                continue
            obj = os.path.join(d, name)
            src = os.path.relpath(obj, objdir)[:-2] + ".c"
            if not os.path.exists(os.path.join(ROOT, src)):
                continue  # tests, benches: not in src/
            n += 1
            u = unit_of(src)
            out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                m = re.match(r"^\s*(?:[0-9a-f]+\s+)?([A-Za-z])\s+(\S+)$", line)
                if not m:
                    continue
                kind, sym = m.groups()
                if kind == "U":
                    used.setdefault(u, set()).add(sym)
                elif kind in "TDRB":
                    defined[sym] = u
    if not n:
        print(f"call_graph: no objects for src/ under {objdir}", file=sys.stderr)
        return 2
    graph = {}
    for u, syms in used.items():
        graph[u] = {defined[s] for s in syms if s in defined and defined[s] != u}
    bad = 0
    for c in circles(graph):
        print(f"call circle: {' -> '.join(c)}")
        bad += 1
    print(f"{n} objects, {bad} call circle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
