#!/usr/bin/env python3
"""Adaptive weights and flow control in replay: the evidence in docs/benchmarks.md, regenerated.

Runs `switchboard replay` (virtual time, deterministic) over the workloads docs/benchmarks.md
sections 1-3 report (medians over seeds: the generators draw arrivals and prompts from --seed) and prints their tables in markdown with the verdicts computed, so the
numbers in the docs can be checked by anyone:

  1. hot-prefix (one 8,000-token system prompt), with and without an opening burst, at 10, 40
     and 80 requests/s: default+adaptive's p99 TTFT against least-request's, and its cache hits
     against prefix-only's;
  2. shared-prefix (below and past capacity), multi-turn and the Mooncake trace: default+adaptive
     against the best of a static sweep of prefix weights;
  3. overload at 1.5x capacity: flow control off, on with the gate at the profile's saturation
     threshold, and on with its own (the default).

usage: bench/adaptive_evidence.py [--seeds 1,2,3,4,5] [--out DIR] [--only hot,sweep,overload]
                                  [--adaptive-param K=V,...]
Takes about 3 minutes on 2 cores. Needs build/switchboard (make).
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "switchboard")
CONF = ["--config", os.path.join(ROOT, "examples", "replay-profiles.yaml")]
MOONCAKE = os.path.join(ROOT, "..", "shared", "data", "traces", "mooncake", "conversation_trace.jsonl")

STATIC = ["prefix-w1", "prefix-w2", "prefix-w3", "prefix-w4", "default", "prefix-w8"]
STATIC_LABEL = {"prefix-w1": "1", "prefix-w2": "2", "prefix-w3": "3", "prefix-w4": "4", "default": "5 (default)",
                "prefix-w8": "8"}


EXTRA = []  # --adaptive-param passed through to every run (tuning)


def run(out, args):
    """One replay run into out/; returns {policy: row} from results.csv."""
    os.makedirs(out, exist_ok=True)
    cmd = [BIN, "replay"] + args + EXTRA + ["--out", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("replay failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
    rows = {}
    with open(os.path.join(out, "results.csv")) as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["policy"], row)
    for p in args[args.index("--policies") + 1].split(","):
        if p not in rows:
            raise RuntimeError("policy %s missing from %s/results.csv" % (p, out))
    return rows


def shown(cmd):
    """A printed command line, with the pass-through options it really ran with."""
    return cmd + ("" if not EXTRA else " " + " ".join(EXTRA))


def fnum(row, key):
    return float(row[key])


def pct(a, b):
    return 100.0 * (a / b - 1.0)


def hot_prefix(tmp, pool, seeds):
    print("## 1. hot-prefix: the thundering herd\n")
    policies = "least-request,prefix-only,default,default+adaptive,latency"
    print("```\n%s\n```\n" % shown("build/switchboard replay --workload hot-prefix burst=B --rate R --requests 2000 "
                                    "--replicas 8 \\\n    --config examples/replay-profiles.yaml --policies %s --seed S"
                                    % policies))
    print("`burst=64` is the generator's default (64 requests in the first 100 ms, then Poisson); `burst=0` is "
          "steady traffic onto one 8,000-token system prompt. Each figure is the median over seeds %s. `default` "
          "is static; `default+adaptive` is what a pool runs unless it says `adaptive: false`.\n" %
          ", ".join(map(str, seeds)))
    jobs = {}
    for b in (64, 0):
        for r in (10, 40, 80):
            for sd in seeds:
                args = ["--workload", "hot-prefix", "--rate", str(r), "--requests", "2000", "--replicas", "8"] + \
                       CONF + ["--policies", policies, "--seed", str(sd), "burst=%d" % b]
                jobs[(b, r, sd)] = pool.submit(run, os.path.join(tmp, "hot_b%d_r%d_s%d" % (b, r, sd)), args)
    verdicts = []
    for b in (64, 0):
        print("**burst=%d** (8 replicas, 2,000 requests)\n" % b)
        print("| rate | policy | TTFT p50 | p90 | p99 | ITL p50 | out tok/s | hit rate | imbalance CV |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in (10, 40, 80):
            runs = [jobs[(b, r, sd)].result() for sd in seeds]

            def med(p, key):
                return statistics.median(fnum(x[p], key) for x in runs)
            for p in policies.split(","):
                print("| %d | %s | %.1f | %.1f | %.1f | %.2f | %.0f | %.4f | %.3f |" % (
                    r, p, med(p, "ttft_p50_ms"), med(p, "ttft_p90_ms"), med(p, "ttft_p99_ms"),
                    med(p, "itl_p50_ms"), med(p, "output_tok_s"), med(p, "hit_rate"), med(p, "imbalance_cv")))
            per_seed = ["%.1f / %.1f" % (fnum(x["default+adaptive"], "ttft_p99_ms"),
                                         fnum(x["least-request"], "ttft_p99_ms")) for x in runs]
            verdicts.append((b, r, med("default+adaptive", "ttft_p99_ms"), med("least-request", "ttft_p99_ms"),
                             med("default+adaptive", "hit_rate") / med("prefix-only", "hit_rate"), per_seed))
        print()
    print("Verdict (requirement: default+adaptive's p99 TTFT no worse than least-request's, at least 90% of "
          "prefix-only's cache hits; medians, and each seed's p99 default+adaptive / least-request):\n")
    print("| burst | rate | default+adaptive p99 | least-request p99 | difference | hits vs prefix-only | per seed |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for b, r, a, lr, h, ps in verdicts:
        print("| %d | %d | %.1f | %.1f | %+.1f%% | %.1f%% | %s |" % (b, r, a, lr, pct(a, lr), 100 * h, ", ".join(ps)))
    print()


def sweep(tmp, pool, seeds):
    print("## 2. shared-prefix, multi-turn, Mooncake: adaptive against a static sweep\n")
    policies = ",".join(["round-robin", "least-request", "latency", "default+adaptive"] + STATIC)
    workloads = [
        ("shared-prefix 20/s", ["--workload", "shared-prefix", "--rate", "20", "--requests", "3000"], True),
        ("shared-prefix 40/s (past capacity)", ["--workload", "shared-prefix", "--rate", "40", "--requests", "3000"],
         True),
        ("multi-turn 400/s", ["--workload", "multi-turn", "--rate", "400", "--requests", "6000", "think_ms=1000"],
         True),
    ]
    if os.path.exists(MOONCAKE):
        workloads.append(("Mooncake x5", ["--trace", MOONCAKE, "--rate-scale", "5"], False))
    else:
        print("(Mooncake trace not found at %s: that workload is left out.)\n" % MOONCAKE)
    print("Static sweep: prefix weight 1, 2, 3 (GIE's), 4, 5 (`default`), 8 against the default profile's load "
          "scorers (examples/replay-profiles.yaml). Each figure is the median over seeds %s (the generators draw "
          "arrivals and prompts from `--seed`; the trace has no seed: one run). 8 replicas.\n" %
          ", ".join(map(str, seeds)))
    print("```")
    for name, args, seeded in workloads:
        a = [x if x != MOONCAKE else "tests/data/traces/mooncake/conversation_trace.jsonl" for x in args]
        print(shown("build/switchboard replay %s --replicas 8 --config examples/replay-profiles.yaml --policies P%s" %
                    (" ".join(a), " --seed S" if seeded else "")))
    print("```\n")
    jobs = {}
    for i, (name, args, seeded) in enumerate(workloads):
        for s in (seeds if seeded else [seeds[0]]):
            full = args[:2] + ["--replicas", "8"] + CONF + ["--policies", policies, "--seed", str(s)] + args[2:]
            jobs[(i, s)] = pool.submit(run, os.path.join(tmp, "sweep_%d_s%d" % (i, s)), full)
    summary = []
    for i, (name, args, seeded) in enumerate(workloads):
        runs = [jobs[(i, s)].result() for s in (seeds if seeded else [seeds[0]])]

        def med(p, key):
            return statistics.median(fnum(r[p], key) for r in runs)
        best_p90 = min(STATIC, key=lambda p: med(p, "ttft_p90_ms"))
        best_tput = max(STATIC, key=lambda p: med(p, "output_tok_s"))
        bp, bt = med(best_p90, "ttft_p90_ms"), med(best_tput, "output_tok_s")
        print("**%s**: best static p90 TTFT %.1f ms (prefix %s), best static throughput %.0f tok/s (prefix %s)\n" %
              (name, bp, STATIC_LABEL[best_p90], bt, STATIC_LABEL[best_tput]))
        print("| policy | TTFT p50 | p90 | p90 vs best static | p99 | out tok/s | vs best static | hit rate |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for p in policies.split(","):
            label = "prefix-w5 = default" if p == "default" else p
            print("| %s | %.1f | %.1f | %+.1f%% | %.1f | %.0f | %+.1f%% | %.4f |" % (
                label, med(p, "ttft_p50_ms"), med(p, "ttft_p90_ms"), pct(med(p, "ttft_p90_ms"), bp),
                med(p, "ttft_p99_ms"), med(p, "output_tok_s"), pct(med(p, "output_tok_s"), bt),
                med(p, "hit_rate")))
        print()
        a = "default+adaptive"
        summary.append((name, pct(med(a, "ttft_p90_ms"), bp), pct(med(a, "output_tok_s"), bt),
                        pct(med("latency", "ttft_p90_ms"), bp), pct(med("latency", "output_tok_s"), bt)))
    print("Verdict (requirement: no more than 3% worse than the best static weights on p90 TTFT and "
          "throughput):\n")
    print("| workload | default+adaptive p90 | throughput | latency (predicted-latency scorer) p90 | throughput |")
    print("|---|---:|---:|---:|---:|")
    for name, ap, at, lp, lt in summary:
        print("| %s | %+.1f%% | %+.1f%% | %+.1f%% | %+.1f%% |" % (name, ap, at, lp, lt))
    print()


def overload(tmp, pool):
    print("## 3. Overload at 1.5x capacity: flow control\n")
    policies = "least-request,default,default+adaptive"
    base = ["--workload", "no-sharing", "--rate", "200", "--requests", "8000", "--replicas", "8",
            "--priority-mix", "critical=0.2,standard=0.5,sheddable=0.3", "--tenants", "4"] + CONF + \
           ["--policies", policies]
    variants = [("without flow control", []),
                ("flow control, gate at the profile's threshold (5 waiting)", ["--flow-control", "--flow-gate",
                                                                              "queue=-1"]),
                ("flow control, default gate (1 waiting)", ["--flow-control"])]
    print("```\nA=\"--workload no-sharing --rate 200 --requests 8000 --replicas 8 \\\n"
          "   --priority-mix critical=0.2,standard=0.5,sheddable=0.3 --tenants 4 \\\n"
          "   --config examples/replay-profiles.yaml --policies %s\"\n"
          "build/switchboard replay $A                                   # without flow control\n"
          "build/switchboard replay $A --flow-control --flow-gate queue=-1  # gate at the profile's 5\n"
          "build/switchboard replay $A --flow-control                    # default gate\n```\n" % policies)
    if EXTRA:
        print("(every run with %s)\n" % " ".join(EXTRA))
    jobs = [pool.submit(run, os.path.join(tmp, "over_%d" % i), base + extra) for i, (_, extra) in enumerate(variants)]
    print("| variant | policy | band | requests | completed | refused 429 | expired 503 | TTFT p50 ms | p90 | p99 "
          "| out tok/s (all bands) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (vname, _), j in zip(variants, jobs):
        rows = j.result()
        for p in policies.split(","):
            x = rows[p]
            for band in ("critical", "standard", "sheddable"):
                print("| %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.0f |" % (
                    vname, p, band, x[band + "_requests"], x[band + "_completed"], x[band + "_refused"],
                    x[band + "_expired"], fnum(x, band + "_ttft_p50_ms"), fnum(x, band + "_ttft_p90_ms"),
                    fnum(x, band + "_ttft_p99_ms"), fnum(x, "output_tok_s")))
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--out", default=None, help="keep every run's results here (default: a temporary directory)")
    ap.add_argument("--only", default="hot,sweep,overload")
    ap.add_argument("--adaptive-param", default=None, help="K=V,... for every run (to try other defaults)")
    a = ap.parse_args()
    if a.adaptive_param:
        EXTRA.extend(["--adaptive-param", a.adaptive_param])
    if not os.access(BIN, os.X_OK):
        sys.exit("build/switchboard not found: run make first")
    seeds = sorted({int(s) for s in a.seeds.split(",")})
    only = set(a.only.split(","))
    if not only <= {"hot", "sweep", "overload"}:
        sys.exit("--only takes hot, sweep and overload")
    tmp = a.out or tempfile.mkdtemp(prefix="sb-evidence-")
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    try:
        if "hot" in only:
            hot_prefix(tmp, pool, seeds)
        if "sweep" in only:
            sweep(tmp, pool, seeds)
        if "overload" in only:
            overload(tmp, pool)
    except (RuntimeError, KeyError) as e:
        pool.shutdown(wait=False, cancel_futures=True)
        sys.exit("adaptive_evidence: %s" % e)
    pool.shutdown()
    print("(runs kept in %s)" % tmp)


if __name__ == "__main__":
    main()
