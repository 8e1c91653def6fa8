#!/usr/bin/env python3
"""The routing matrix (issue 13): `default` against every peer, cell by cell, in replay.

Sweeps workload class (the five generators, the Mooncake and Azure traces in tests/data/traces)
x cache size (ample, half, a quarter of the working set) x load (light, near capacity, past it)
x gateway replicas (1, 3); runs every policy of POLICIES in every cell over several seeds and
prints, per cell, the medians of p90 and p99 TTFT and the engines' hit ratio for `default`, the
best peer on each figure, and the verdict computed (below). `switchboard replay` runs in
virtual time and is deterministic: the same build, cell and seed give the same figures.

How the cells are derived (printed with the table):
  - working set: `replay --working-set` counts the distinct full engine blocks of every prompt
    the run sends (16-token blocks). --num-gpu-blocks is per replica: ample = the whole working
    set (+ the largest request), so no replica ever evicts; half, quarter and eighth = that
    fraction of the working set on each replica (at least the largest request): the fleet of 8
    holds it four times, twice, or once over, and only if the router partitions it (eighth is
    the issue's pressure regime: long shared prompts, caches holding part of the working set).
  - capacity: a probe per workload and cache size (hits raise capacity, so it is not one
    number): least-request with every request arriving at once (a multi-turn workload without
    think time); capacity = completed / makespan (requests/s). Loads: light = 0.3, near = 0.85,
    past = 1.2 x capacity, given as --rate (a trace is rescaled to that mean rate).
  - gateways: --gateways 1 or 3 (each gateway its own router and policy state; replay's L4
    rule keeps a session on its gateway).
  - seeds: the generators draw arrivals and content from --seed; the router and the policies'
    tie-breaks too. A trace has one sequence of arrivals, so seed s replays its s-th window of
    --requests requests (`replay --trace-skip (s-1) x requests`, each window rescaled to the
    cell's rate): five seeds are five samples of the trace, not one sample replayed five times
    (before session 35 every seed replayed the first window: --same-window). The working set
    and the capacity probe are the first window's, as they are seed 1's for the generators.
default+sync: `default` with gateway sync (`--gateway-sync-ms 0.5`: each gateway's router hears
the others' dispatches half a millisecond late); its verdict against the best peer is printed
apart (with one gateway it is `default`).
Verdict per figure (p90, p99): with m the median over seeds and s half its range (max - min)/2,
`default` is "no worse" when m(default) <= m(best peer) + max(s(default), s(best peer)), and
"better" when m(default) <= 0.9 x m(best peer). The cell: "better" if both figures are better,
"WORSE" if either is worse, else "level". Peers exclude the reference min-predicted-ttft.

usage: bench/routing_matrix.py [--quick] [--seeds 1,2,3,4,5] [--requests N] [--replicas R]
                               [--jobs J] [--out DIR] [--only WORKLOAD,...] [--caches C,...]
                               [--config FILE --candidates NAME,... [--peers-from CSV,...]]
                               [--same-window]
--quick: cache ample and quarter, load near, 2 seeds, 400 requests (about 4 minutes on one
core). The full run: every cell, 5 seeds, 800 requests (measured: see docs/benchmarks.md).
Needs build/switchboard (make), or the binary named by $SB_BIN.

Trying profiles (how `default` is tuned): --config FILE names a gateway config whose `profiles:`
replay runs too, --candidates the ones to compare (NAME+events runs one with the engines' events);
they run in the same replay as `default`, so per cell and seed they see the same arrivals. A
summary per candidate follows the table: cells better / level / WORSE against the best peer, and
the geometric means of p90 and p99 over the best peer's (below 1 is ahead). --peers-from takes the
peers' medians and spreads from earlier runs' matrix.csv instead of running them again (replay
is deterministic and the peers' rows are byte-identical across changes to `default`:
scripts/replay_fingerprint.sh), which makes a candidate round several times cheaper; those
medians are over the earlier run's seeds, so compare candidates with `default` run alongside
(their trace cells must have been sampled as this run samples them: matrix.csv's `traces`
column says how, and a mismatch is refused).
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SB_BIN", os.path.join(ROOT, "build", "switchboard"))
TRACES = os.path.join(ROOT, "tests", "data", "traces")

# (label, replay policy, extra replay arguments). Add a row to compare another configuration.
DEFAULT = ("default", "default", [])
# The same profile with the engines' KV events feeding its precise index (default lag).
EVENTS = ("default+events", "default+events", [])
# The same profile with gateway sync (`sync:`, docs/routing.md): each gateway's router hears the
# others' dispatches 0.5 ms late (a LAN); with one gateway it is `default` itself.
SYNC = ("default+sync", "default", ["--gateway-sync-ms", "0.5"])
PEERS = [
    ("round-robin", "round-robin", []),
    ("least-request", "least-request", []),
    ("session-hash", "session-hash", []),
    ("kubeai-chwbl", "kubeai-chwbl", []),
    ("sglang-cache-aware", "sglang-cache-aware", []),
    ("gie-default", "gie-default", []),
    ("production-stack-prefix", "production-stack-prefix", []),
    ("aibrix-prefix", "aibrix-prefix", []),
    ("dynamo-kv", "dynamo-kv", []),
    ("llm-d-sticky", "llm-d-sticky", []),
    ("llm-d-precise", "llm-d-precise", []),
]
REFERENCES = [("min-predicted-ttft", "min-predicted-ttft", [])]  # shown, never the bar
POLICIES = [DEFAULT, EVENTS, SYNC] + PEERS + REFERENCES

WORKLOADS = {
    # several-thousand-token system prompts, dozens of groups (the pressure case)
    "shared-prefix": ["--workload", "shared-prefix", "groups=32", "prefix=4000"],
    "multi-turn": ["--workload", "multi-turn"],
    "hot-prefix": ["--workload", "hot-prefix"],
    "no-sharing": ["--workload", "no-sharing"],
    "lora-mix": ["--workload", "lora-mix"],
    "mooncake": ["--trace", os.path.join(TRACES, "mooncake", "conversation_trace.jsonl")],
    "azure": ["--trace", os.path.join(TRACES, "azure", "AzureLLMInferenceTrace_conv.csv")],
}
# eighth: the fleet of 8 holds the working set once, and only if the router partitions it
# perfectly (quarter and half hold it two and four times over): the pressure regime.
CACHES = [("ample", None), ("half", 0.5), ("quarter", 0.25), ("eighth", 0.125)]
LOADS = [("light", 0.3), ("near", 0.85), ("past", 1.2)]
GATEWAYS = [1, 3]


def replay(args):
    p = subprocess.run([BIN, "replay"] + [str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("replay %s failed: %s" % (" ".join(map(str, args)), p.stderr.strip()))
    return p.stdout


def read_rows(path):
    with open(path, newline="") as f:
        return {r["policy"]: r for r in csv.DictReader(f)}


def trace_requests(path):
    """A trace's request count: Mooncake's JSON lines, or the Azure CSV's rows after its header."""
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    return sum(1 for l in lines if l.lstrip().startswith("{")) if lines and lines[0].lstrip().startswith("{") \
        else max(len(lines) - 1, 0)


def working_set(wl, requests, replicas):
    out = replay(WORKLOADS[wl] + ["--requests", requests, "--replicas", replicas, "--working-set"])
    fields = dict(line.split() for line in out.strip().splitlines())
    return int(fields["working_set_blocks"]), int(fields["max_request_blocks"])


def capacity(wl, requests, replicas, blocks, tmp):
    args = list(WORKLOADS[wl])
    if wl == "multi-turn":
        args.append("think_ms=0")
    out = os.path.join(tmp, "probe-%s-%d" % (wl, blocks))
    replay(args + ["--requests", requests, "--replicas", replicas, "--rate", 100000, "--policies", "least-request",
                   "--num-gpu-blocks", blocks, "--out", out])
    r = read_rows(os.path.join(out, "results.csv"))["least-request"]
    return float(r["completed"]) / float(r["makespan_s"])


def run_cell(job):
    wl, cache, blocks, load, rate, gw, seed, requests, replicas, tmp, policies, config, same_window = job
    window = [] if same_window or "--trace" not in WORKLOADS[wl] else ["--trace-skip", (seed - 1) * int(requests)]
    figures = {}
    groups = {}
    for label, name, extra in policies:
        groups.setdefault(tuple(extra), []).append((label, name))
    for extra, members in groups.items():
        out = os.path.join(tmp, "%s-%s-%s-g%d-s%d-%d" % (wl, cache, load, gw, seed, abs(hash(extra)) % 10**6))
        replay(WORKLOADS[wl] + window + list(extra) + [
            "--requests", requests, "--replicas", replicas, "--rate", "%.4f" % rate, "--num-gpu-blocks", blocks,
            "--gateways", gw, "--seed", seed, "--policies", ",".join(n for _, n in members), "--out", out]
            + (["--config", config] if config else []))
        rows = read_rows(os.path.join(out, "results.csv"))
        for label, name in members:
            r = rows[name]
            figures[label] = (float(r["ttft_p90_ms"]), float(r["ttft_p99_ms"]), float(r["hit_rate"]))
    return (wl, cache, load, gw), seed, figures


def med_spread(values):
    return statistics.median(values), (max(values) - min(values)) / 2


def verdict_of(d, b):
    """d, b: (median, spread) of default and of the best peer."""
    if d[0] <= 0.9 * b[0]:
        return "better"
    if d[0] <= b[0] + max(d[1], b[1]):
        return "level"
    return "WORSE"


def traces_mode(same_window):
    """How a run sampled the traces, as matrix.csv's `traces` column records it."""
    return "first-window" if same_window else "window-per-seed"


def read_stored(paths, same_window, workloads):
    """Earlier runs' matrix.csv: {cell: {label: [(p90 m, s), (p99 m, s), (hit m, s)]}}, every
    label but default's (the candidates are compared with a `default` run alongside them).
    Refuses trace cells sampled otherwise than this run samples them (files written before the
    `traces` column replayed every seed on the first window)."""
    stored = {}
    mode = traces_mode(same_window)
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                got = r.get("traces") or "first-window"
                if r["workload"] in workloads and "--trace" in WORKLOADS.get(r["workload"], []) and got != mode:
                    sys.exit("%s: its trace cells were run %s, this run is %s (--same-window)" % (path, got, mode))
                if r["policy"] == "default":
                    continue
                key = (r["workload"], r["cache"], r["load"], int(r["gateways"]))
                stored.setdefault(key, {})[r["policy"]] = [
                    (float(r[k + "_median_ms" if k != "hit" else "hit_median"]),
                     float(r[k + "_spread_ms" if k != "hit" else "hit_spread"])) for k in ("p90", "p99", "hit")]
    return stored


def cell_verdict(mine, stats, best):
    v90 = verdict_of(mine[0], stats[best[0]][0])
    v99 = verdict_of(mine[1], stats[best[1]][1])
    return "WORSE" if "WORSE" in (v90, v99) else "better" if v90 == v99 == "better" else "level"


def events_verdict(e, d):
    """An event-fed run e against approximate d: WORSE if either figure is, better if either is
    at least 10% lower and neither worse."""
    e90, e99 = verdict_of(e[0], d[0]), verdict_of(e[1], d[1])
    return "WORSE" if "WORSE" in (e90, e99) else "better" if "better" in (e90, e99) else "level"


def summarize(labels, all_stats, workloads):
    """Per profile: cells better / level / WORSE against the best peer, geometric means of its
    p90 and p99 over the best peer's, overall and per workload; and which cells are WORSE."""
    print()
    print("| profile | better | level | WORSE | geomean p90 / best peer | geomean p99 / best peer | "
          "p90 geomean per workload (%s) |" % ", ".join(workloads))
    print("|---|---:|---:|---:|---:|---:|---|")
    worse = {}
    for label in labels:
        tally = {"better": 0, "level": 0, "WORSE": 0}
        logs = {wl: [] for wl in workloads}
        l90, l99 = [], []
        for key, stats in all_stats.items():
            best = [min(PEERS, key=lambda p: stats[p[0]][k][0])[0] for k in range(2)]
            v = cell_verdict(stats[label], stats, best)
            tally[v] += 1
            if v == "WORSE":
                worse.setdefault(label, []).append("%s/%s/%s/%d" % key)
            r90 = math.log(stats[label][0][0] / stats[best[0]][0][0])
            l90.append(r90)
            l99.append(math.log(stats[label][1][0] / stats[best[1]][1][0]))
            logs[key[0]].append(r90)
        gm = lambda xs: math.exp(sum(xs) / len(xs)) if xs else float("nan")
        print("| %s | %d | %d | %d | %.3f | %.3f | %s |" % (
            label, tally["better"], tally["level"], tally["WORSE"], gm(l90), gm(l99),
            " / ".join("%.3f" % gm(logs[wl]) for wl in workloads)))
    for label in labels:
        print("%s WORSE: %s" % (label, " ".join(worse.get(label, [])) or "none"))
    # Event-fed candidates are also judged as the table's events column is: against approximate
    # `default` in the same run (issue 13: no worse than approximate anywhere).
    for label in [l for l in labels if l.endswith("+events")]:
        tally, worse_ev = {"better": 0, "level": 0, "WORSE": 0}, []
        for key, stats in all_stats.items():
            v = events_verdict(stats[label], stats["default"])
            tally[v] += 1
            if v == "WORSE":
                worse_ev.append("%s/%s/%s/%d" % key)
        print("%s against approximate default: %d better, %d level, %d WORSE: %s" % (
            label, tally["better"], tally["level"], tally["WORSE"], " ".join(worse_ev) or "none"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds")
    ap.add_argument("--requests", type=int)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", help="directory for matrix.csv (every policy's medians per cell)")
    ap.add_argument("--only", help="comma-separated workloads")
    ap.add_argument("--caches", help="comma-separated cache sizes (ample, half, quarter, eighth)")
    ap.add_argument("--config", help="gateway config whose profiles --candidates names")
    ap.add_argument("--candidates", help="comma-separated profiles of --config to compare (NAME+events too)")
    ap.add_argument("--peers-from", help="comma-separated matrix.csv files: the peers' medians, not run again")
    ap.add_argument("--same-window", action="store_true",
                    help="every seed replays a trace's first window (the matrix before session 35)")
    ap.add_argument("--extra", help="replay arguments for default and the candidates only, e.g. --extra=--prefix-share")
    a = ap.parse_args()
    if a.candidates and not a.config:
        sys.exit("--candidates needs --config")
    extra = a.extra.split() if a.extra else []
    candidates = [(c, c, extra) for c in a.candidates.split(",")] if a.candidates else []
    workloads = a.only.split(",") if a.only else list(WORKLOADS)
    stored = read_stored(a.peers_from.split(","), a.same_window, workloads) if a.peers_from else None
    default = (DEFAULT[0], DEFAULT[1], extra)
    run_policies = ([default] + candidates if stored else [default] + POLICIES[1:] + candidates)
    if not os.access(BIN, os.X_OK):
        sys.exit("build/switchboard not found: run make first")
    seeds = [int(s) for s in (a.seeds or ("1,2" if a.quick else "1,2,3,4,5")).split(",")]
    requests = a.requests or (400 if a.quick else 800)
    caches = [c for c in CACHES if (not a.quick or c[0] in ("ample", "quarter"))
              and (not a.caches or c[0] in a.caches.split(","))]
    loads = [l for l in LOADS if not a.quick or l[0] == "near"]
    for wl in workloads:  # seed s replays a trace's s-th window: each must be whole
        args = WORKLOADS.get(wl)
        if args and "--trace" in args and not a.same_window:
            n = trace_requests(args[args.index("--trace") + 1])
            if min(seeds) < 1 or max(seeds) * requests > n:
                sys.exit("%s: seeds %s x %d requests need windows up to request %d; the trace has %d "
                         "(fewer requests or seeds, or --same-window)" % (wl, ",".join(map(str, seeds)), requests,
                                                                        max(seeds) * requests, n))
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="sb-matrix-")
    derived = {}
    for wl in workloads:
        ws, biggest = working_set(wl, requests, a.replicas)
        blocks = {c: ws + biggest if f is None else max(biggest + 1, int(ws * f)) for c, f in caches}
        cap = {c: capacity(wl, requests, a.replicas, blocks[c], tmp) for c, _ in caches}
        derived[wl] = (ws, cap, blocks)
    jobs = [(wl, c, derived[wl][2][c], l, derived[wl][1][c] * lf, gw, s, requests, a.replicas, tmp, run_policies,
             a.config, a.same_window)
            for wl in workloads for c, _ in caches for l, lf in loads for gw in GATEWAYS for s in seeds]
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        results = list(ex.map(run_cell, jobs))
    cells = {}
    for key, seed, figures in results:
        cells.setdefault(key, {})[seed] = figures
    wall = time.time() - t0

    print("Routing matrix: %d replicas, %d requests per run, seeds %s%s; %d cells x %d seeds, %.0f s wall; traces: %s." % (
        a.replicas, requests, ",".join(map(str, seeds)), " (--quick)" if a.quick else "", len(cells), len(seeds),
        wall, "every seed the first window" if a.same_window else "seed s the s-th window"))
    print()
    names = " / ".join(c for c, _ in caches)
    print("| workload | working set (blocks) | --num-gpu-blocks: %s | capacity req/s: %s |" % (names, names))
    print("|---|---:|---|---|")
    for wl in workloads:
        ws, cap, blocks = derived[wl]
        print("| %s | %d | %s | %s |" % (wl, ws, " / ".join(str(blocks[c]) for c, _ in caches),
                                         " / ".join("%.2f" % cap[c] for c, _ in caches)))
    print()
    print("| workload | cache | load | gw | default p90 | p99 | hit | best peer p90 | p99 | hit | "
          "min-pred-ttft p90 | verdict | +events p90 | p99 | hit | events vs default | +sync p90 | p99 | "
          "sync verdict |")
    print("|---|---|---|---:|---:|---:|---:|---|---|---|---:|---|---:|---:|---:|---|---:|---:|---|")
    rows = []
    all_stats = {}
    tally = {"better": 0, "level": 0, "WORSE": 0}
    ev_tally = {"better": 0, "level": 0, "WORSE": 0}
    sync_tally = {"better": 0, "level": 0, "WORSE": 0}
    for wl in workloads:
        for c, _ in caches:
            for l, _ in loads:
                for gw in GATEWAYS:
                    per_seed = cells[(wl, c, l, gw)]
                    stats = dict(stored[(wl, c, l, gw)]) if stored else {}
                    for label, _, _ in run_policies:
                        vals = list(zip(*[per_seed[s][label] for s in seeds]))
                        stats[label] = [med_spread(list(v)) for v in vals]
                    all_stats[(wl, c, l, gw)] = stats
                    best = []
                    for k in range(3):  # p90, p99: lowest; hit: highest
                        pick = (min if k < 2 else max)(PEERS, key=lambda p: stats[p[0]][k][0])[0]
                        best.append(pick)
                    v90 = verdict_of(stats["default"][0], stats[best[0]][0])
                    v99 = verdict_of(stats["default"][1], stats[best[1]][1])
                    cell = "WORSE" if "WORSE" in (v90, v99) else "better" if v90 == v99 == "better" else "level"
                    tally[cell] += 1
                    d, e = stats["default"], stats["default+events"]
                    ev = events_verdict(e, d)
                    ev_tally[ev] += 1
                    sy = stats.get("default+sync", d)
                    s90, s99 = verdict_of(sy[0], stats[best[0]][0]), verdict_of(sy[1], stats[best[1]][1])
                    sv = "WORSE" if "WORSE" in (s90, s99) else "better" if s90 == s99 == "better" else "level"
                    sync_tally[sv] += 1
                    print("| %s | %s | %s | %d | %.0f | %.0f | %.2f | %.0f %s | %.0f %s | %.2f %s | %.0f | %s | "
                          "%.0f | %.0f | %.2f | %s | %.0f | %.0f | %s |" % (
                              wl, c, l, gw, d[0][0], d[1][0], d[2][0], stats[best[0]][0][0], best[0],
                              stats[best[1]][1][0], best[1], stats[best[2]][2][0], best[2],
                              stats["min-predicted-ttft"][0][0], cell, e[0][0], e[1][0], e[2][0], ev,
                              sy[0][0], sy[1][0], sv))
                    for label in stats:
                        s = stats[label]
                        rows.append([wl, c, l, gw, label] + ["%.3f" % x for pair in s for x in pair])
    n = sum(tally.values())
    print()
    print("Cells: %d better (p90 and p99 at least 10%% below the best peer), %d level (within the seed spread), "
          "%d worse. Done-when (no worse anywhere, better in a third): %s." % (
              tally["better"], tally["level"], tally["WORSE"],
              "met" if tally["WORSE"] == 0 and 3 * tally["better"] >= n else "not met"))
    print("With events against default (approximate): %d better (p90 or p99 at least 10%% lower, neither worse), "
          "%d level, %d worse." % (ev_tally["better"], ev_tally["level"], ev_tally["WORSE"]))
    if "default+sync" in all_stats[next(iter(all_stats))]:
        print("With gateway sync (default+sync) against the best peer: %d better, %d level, %d worse (the "
              "one-gateway cells are default's own)." % (sync_tally["better"], sync_tally["level"], sync_tally["WORSE"]))
    if candidates or stored:
        summarize(["default"] + [c for c, _, _ in candidates], all_stats, workloads)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "matrix.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["workload", "cache", "load", "gateways", "policy", "p90_median_ms", "p90_spread_ms",
                        "p99_median_ms", "p99_spread_ms", "hit_median", "hit_spread", "traces"])
            w.writerows([list(r) + [traces_mode(a.same_window)] for r in rows])


if __name__ == "__main__":
    main()
