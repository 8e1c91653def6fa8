#!/usr/bin/env python3
"""The endpoint picker's cost: decisions per second and the latency the picker adds per request
over an ext_proc stream, at 1 and 32 concurrent streams, beside the proxy mode's figures from
the same gateway in the same run.

One gateway (the release build) with both listeners in front of a simulated fleet
(`switchboard sim`, fast engines, max_tokens 1, so the fleet is never the bottleneck):
- picker: tests/extproc/envoy.js plays Envoy: a stream per request, request headers, the body
  in one chunk, the picker's answers (headers with the pick, the body streamed back), then a
  response phase (headers, a body with usage, end). The picker does not proxy, so its added
  latency is the time from writing the last body chunk to reading the request_headers answer;
  decisions/s is whole streams (request and response phases) per second.
- proxy: the same client runtime (node's http with keep-alive) POSTs the same body through the
  gateway's HTTP listener, and straight to the replicas; the proxy's added latency is the
  difference of the two at each percentile.
Prints the median of RUNS runs of each figure. Env: RUNS (3), REQUESTS (2000 at 32 streams;
a quarter of it at 1), SB_REL (the binary, default build/switchboard)."""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("SB_BIN", os.environ.get("SB_REL", os.path.join(ROOT, "build", "switchboard")))

import extproc_driver as ep  # noqa: E402
from fixtures import Gateway, free_port, wait_until  # noqa: E402
from test_sim import MODEL, Sim  # noqa: E402

RUNS = int(os.environ.get("RUNS", "3"))
REQUESTS = int(os.environ.get("REQUESTS", "2000"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


def cpu_s(pid):
    """User + system CPU seconds the process has used (/proc/PID/stat fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body():
    # A ~4 KiB chat body, as bench/proxy_overhead.sh uses.
    return json.dumps({"model": MODEL, "max_tokens": 1, "messages": [
        {"role": "system", "content": "You are a careful assistant. " * 100},
        {"role": "user", "content": "Say ok."}]}).encode()


def main():
    why = ep.missing()
    if why:
        print("extproc bench: " + why)
        return 1
    sim = Sim("--speed", "1000", replicas=4)
    ext = free_port()
    gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                   "endpoints": ["127.0.0.1:%d" % p for p in sim.ports]}],
                 extra='ext_proc: { listen: "127.0.0.1:%d", fallbacks: 2 }' % ext)
    try:
        wait_until(lambda: _can_connect(ext), 15, "the ext_proc listener")
        drv = ep.Driver(ext)
        b = body()
        usage = json.dumps({"id": "x", "object": "chat.completion", "choices": [],
                            "usage": {"prompt_tokens": 900, "completion_tokens": 1, "total_tokens": 901}}).encode()
        headers = ep.request_headers(
            [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "bench"),
             ("content-type", "application/json"), ("content-length", str(len(b)))])["request_headers"]
        n = 0
        rows = []
        for conc in (1, 32):
            count = REQUESTS if conc > 1 else max(50, REQUESTS // 4)
            figs = {"picker": [], "proxy": [], "direct": []}
            for _ in range(RUNS):
                n += 1
                for mode, spec in (("picker", dict(headers=headers, body=ep.b64(b), response_body=ep.b64(usage))),
                                   ("proxy", dict(op="bench_http", ports=[gw.port], body=ep.b64(b))),
                                   ("direct", dict(op="bench_http", ports=sim.ports, body=ep.b64(b)))):
                    c0 = cpu_s(gw.proc.pid)
                    r = drv.bench("%s%d" % (mode, n), concurrency=conc, requests=count, **spec)
                    # The gateway's own CPU per request: what the picker costs, whatever the
                    # client's speed (the node client, not the gateway, is the bottleneck here).
                    r["gw_cpu_us"] = (cpu_s(gw.proc.pid) - c0) * 1e6 / max(1, r["ok"])
                    figs[mode].append(r)
            for mode, runs in figs.items():
                failed = sum(r["failed"] for r in runs)
                rate = statistics.median(r["ok"] / (r["wall_ms"] / 1000.0) for r in runs)
                p50 = statistics.median(pct(r["latency_ms"], 50) for r in runs)
                p99 = statistics.median(pct(r["latency_ms"], 99) for r in runs)
                cpu = statistics.median(r["gw_cpu_us"] for r in runs)
                rows.append((conc, mode, rate, p50, p99, failed, cpu))
        drv.close()
    finally:
        gw.close()
        sim.stop()
    print("ext_proc picker vs HTTP proxy, one gateway, 4 simulated replicas, ~4 KiB chat body, "
          "median of %d runs" % RUNS)
    print("%-5s %-8s %10s %10s %10s %7s %16s" % ("conc", "mode", "req/s", "p50 ms", "p99 ms", "failed",
                                                  "gateway CPU/req"))
    by = {}
    for conc, mode, rate, p50, p99, failed, cpu in rows:
        by[(conc, mode)] = (rate, p50, p99, cpu)
        print("%-5d %-8s %10.0f %10.3f %10.3f %7d %13.1f us" % (conc, mode, rate, p50, p99, failed,
                                                               cpu if mode != "direct" else 0.0))
    print("picker: req/s = decisions/s (whole streams, both phases); latency = last body chunk "
          "written -> pick read (the picker's added latency)")
    print("proxy/direct: latency = whole request; the proxy adds proxy - direct")
    for conc in (1, 32):
        pk, px, dr = by[(conc, "picker")], by[(conc, "proxy")], by[(conc, "direct")]
        print("conc %-3d picker adds p50 %.3f ms, p99 %.3f ms; proxy adds p50 %.3f ms, p99 %.3f ms; "
              "req/s picker/proxy %.2fx; gateway CPU per request picker/proxy %.2fx"
              % (conc, pk[1], pk[2], px[1] - dr[1], px[2] - dr[2], pk[0] / px[0], pk[3] / px[3]))
    return 0


def _can_connect(port):
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
