#!/usr/bin/env python3
"""What the synchronous probe buys against what it costs (issue 14, the probing discussion's
solution 1.3), in replay.

With the probe on, when one of the best-ranked candidates' report is older than --age-ms, the
gateway scrapes those candidates before committing and decides again: the request waits one
probe round trip (--rtt-ms). Off by default in the gateway; this sweep says when it is worth it.

Cells: workload (routing_matrix.py's) x load (near, past capacity; cache a quarter of the
working set) x scrape interval (how old reports get between scrapes). In each cell `default`
runs with the probe off and on, over several seeds; printed: medians of TTFT p50/p90/p99, the
ratio on/off (below 1: the probe helps), and the share of requests that waited for a probe.

usage: bench/sync_probe.py [--seeds 1,2,3] [--requests 800] [--age-ms 50] [--rtt-ms 1]
                           [--scrapes 100,500,2000] [--only WORKLOAD,...]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routing_matrix as rm  # noqa: E402  (the matrix's workloads, working set and capacity probe)


def run(wl, rate, blocks, scrape, seed, requests, replicas, probe, tmp):
    out = os.path.join(tmp, "%s-%s-%d-%d-%d" % (wl, scrape, seed, int(rate * 1000), 1 if probe else 0))
    args = rm.WORKLOADS[wl] + ["--requests", requests, "--replicas", replicas, "--rate", "%.4f" % rate,
                               "--num-gpu-blocks", blocks, "--seed", seed, "--scrape-ms", scrape,
                               "--policies", "default", "--out", out] + probe
    p = rm.subprocess.run([rm.BIN, "replay"] + [str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("replay failed: %s" % p.stderr.strip())
    probes = 0
    for line in p.stderr.splitlines():
        if "synchronous probe" in line:
            probes = int(line.split()[2])
    r = rm.read_rows(os.path.join(out, "results.csv"))["default"]
    return (float(r["ttft_p50_ms"]), float(r["ttft_p90_ms"]), float(r["ttft_p99_ms"]),
            probes / max(float(r["requests"]), 1.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--age-ms", default="50")
    ap.add_argument("--rtt-ms", default="1")
    ap.add_argument("--candidates", default="2")
    ap.add_argument("--scrapes", default="100,500,2000")
    ap.add_argument("--only", default="shared-prefix,multi-turn,no-sharing,mooncake")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    probe = ["--sync-probe-ms", a.age_ms, "--sync-probe-rtt-ms", a.rtt_ms, "--sync-probe-candidates", a.candidates]
    tmp = tempfile.mkdtemp(prefix="sb-syncprobe-")
    print("synchronous probe: age > %s ms, round trip %s ms, %s candidates; %d replicas, %d requests, "
          "seeds %s, cache a quarter of the working set; medians over seeds" %
          (a.age_ms, a.rtt_ms, a.candidates, a.replicas, a.requests, a.seeds, ))
    print("| workload | load | scrape ms | p50 off | p50 on | p90 off | p90 on | p99 off | p99 on | "
          "p90 on/off | p99 on/off | probed share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for wl in a.only.split(","):
        ws, mx = rm.working_set(wl, a.requests, a.replicas)
        blocks = max(int(ws * 0.25), mx + 1)
        cap = rm.capacity(wl, a.requests, a.replicas, blocks, tmp)
        for load, f in (("near", 0.85), ("past", 1.2)):
            for scrape in a.scrapes.split(","):
                off = [run(wl, cap * f, blocks, scrape, s, a.requests, a.replicas, [], tmp) for s in seeds]
                on = [run(wl, cap * f, blocks, scrape, s, a.requests, a.replicas, probe, tmp) for s in seeds]
                m = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
                r90, r99 = m(on, 1) / max(m(off, 1), 1e-9), m(on, 2) / max(m(off, 2), 1e-9)
                ratios.append((r90, r99))
                print("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.2f |" %
                      (wl, load, scrape, m(off, 0), m(on, 0), m(off, 1), m(on, 1), m(off, 2), m(on, 2), r90, r99,
                       m(on, 3)), flush=True)
    g90 = statistics.geometric_mean(r[0] for r in ratios)
    g99 = statistics.geometric_mean(r[1] for r in ratios)
    print("\ngeomean on/off over %d cells: p90 %.3f, p99 %.3f" % (len(ratios), g90, g99))


if __name__ == "__main__":
    main()
