#!/usr/bin/env python3
"""The endpoint picker's cost: decisions per second and the latency the picker adds per request
over an ext_proc stream, at 1 and 32 concurrent streams, beside the proxy mode's figures from
the same gateway in the same run.

One gateway (the release build) with both listeners in front of four simulated replicas
(`switchboard sim`, fast engines, max_tokens 1), a ~4 KiB chat body everywhere:
- picker, h2load: nghttp2's load generator (a C client) opens one Process stream per request on
  one HTTP/2 connection (as Envoy multiplexes) and sends the request headers and the whole body
  (two gRPC messages, then end of stream); the time per stream is the request phase: the body
  in, the decision, the pick and the body streamed back, the call's end. No response phase
  (the gateway counts each as a client abort). This is the picker's capacity and added latency.
- picker, node: tests/extproc/envoy.js plays Envoy over whole streams, response phase included
  (headers, a usage body, end); latency from writing the last body chunk to reading the pick.
  grpc-js is the bottleneck here (the gateway's CPU per stream shows it idles), so these are
  the client's figures as much as the picker's; they show both phases work at that rate.
- proxy, wrk: the same body POSTed through the gateway's HTTP listener to the replicas (so its
  latency includes the replica's own service time, which the picker's does not).
Prints the median of RUNS runs of each figure, and the gateway's CPU time per request (from
/proc, the same process for every mode). Env: RUNS (3), SECONDS_PER_RUN (3), SB_REL (binary)."""
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("SB_BIN", os.environ.get("SB_REL", os.path.join(ROOT, "build", "switchboard")))

import extproc_driver as ep  # noqa: E402
from fixtures import Gateway, free_port, wait_until  # noqa: E402
from test_sim import MODEL, Sim  # noqa: E402

RUNS = int(os.environ.get("RUNS", "3"))
SECONDS = float(os.environ.get("SECONDS_PER_RUN", "3"))
PROCESS_URL = "http://127.0.0.1:%d/envoy.service.ext_proc.v3.ExternalProcessor/Process"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


def cpu_s(pid):
    """User + system CPU seconds the process has used (/proc/PID/stat fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chat_body():
    return json.dumps({"model": MODEL, "max_tokens": 1, "messages": [
        {"role": "system", "content": "You are a careful assistant. " * 100},
        {"role": "user", "content": "Say ok."}]}).encode()


def pb_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(num, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return pb_varint(num << 3 | 2) + pb_varint(len(payload)) + payload


def grpc_requests(body):
    """The two ProcessingRequests of a request phase, gRPC-framed, for h2load's data file. Field
    numbers from Envoy's external_processor.proto and base.proto (../shared/notes/ext-proc.md):
    ProcessingRequest.request_headers 2 / request_body 4; HttpHeaders.headers 1 (HeaderMap,
    headers 1: HeaderValue key 1, raw_value 3); HttpBody body 1, end_of_stream 2."""
    hv = [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "bench"),
          ("content-type", "application/json"), ("content-length", str(len(body)))]
    hmap = b"".join(pb_field(1, pb_field(1, k.encode()) + pb_field(3, v.encode())) for k, v in hv)
    headers = pb_field(2, pb_field(1, hmap))
    req_body = pb_field(4, pb_field(1, body) + b"\x10\x01")
    return b"".join(b"\0" + struct.pack(">I", len(m)) + m for m in (headers, req_body))


def h2load(port, conc, data_path, log_path):
    n = int(max(200, (5000 if conc > 1 else 2500) * SECONDS))
    if os.path.exists(log_path):
        os.unlink(log_path)  # h2load appends
    t0 = time.monotonic()
    p = subprocess.run(["h2load", "-n", str(n), "-c", "1", "-m", str(conc), "-d", data_path,
                        "-H", "content-type: application/grpc", "-H", "te: trailers", "--log-file", log_path,
                        PROCESS_URL % port], capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    lat, failed = [], 0
    with open(log_path) as f:
        for line in f:
            start, status, us = line.split("\t")[:3]
            if status == "200":
                lat.append(int(us) / 1000.0)
            else:
                failed += 1
    rate = None
    for line in p.stdout.splitlines():
        if line.startswith("finished in"):
            rate = float(line.split(",")[1].split()[0])
    return {"ok": len(lat), "failed": n - len(lat), "rate": rate or len(lat) / wall,
            "latency_ms": lat}


def wrk(port, conc, lua):
    p = subprocess.run(["wrk", "-t1", "-c%d" % conc, "-d%ds" % max(1, int(SECONDS)), "-s", lua,
                        "http://127.0.0.1:%d/v1/chat/completions" % port], capture_output=True, text=True, timeout=300)
    line = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not line:
        raise AssertionError("wrk: " + p.stdout + p.stderr)
    j = json.loads(line[0])
    return {"ok": j["requests"], "failed": j["errors"], "rate": j["rps"],
            "p50": j["p50_us"] / 1000.0, "p99": j["p99_us"] / 1000.0}


def main():
    why = ep.missing()
    if why:
        print("extproc bench: " + why)
        return 1
    tools = {t: not subprocess.run(["sh", "-c", "command -v " + t], capture_output=True).returncode
             for t in ("h2load", "wrk")}
    work = tempfile.mkdtemp(prefix="sb-bench-extproc-")
    body = chat_body()
    data = os.path.join(work, "process.bin")
    with open(data, "wb") as f:
        f.write(grpc_requests(body))
    lua = os.path.join(work, "chat.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = %s\n'
                % json.dumps(body.decode()))
        f.write('done = function(s, lat, req)\n  io.write(string.format(\'{"rps":%.1f,"p50_us":%d,"p99_us":%d,'
                '"errors":%d,"requests":%d}\\n\', s.requests / (s.duration / 1e6), lat:percentile(50), '
                'lat:percentile(99), s.errors.connect + s.errors.read + s.errors.write + s.errors.status + '
                's.errors.timeout, s.requests))\nend\n')
    usage = json.dumps({"id": "x", "object": "chat.completion", "choices": [],
                        "usage": {"prompt_tokens": 900, "completion_tokens": 1, "total_tokens": 901}}).encode()
    headers = ep.request_headers(
        [(":method", "POST"), (":path", "/v1/chat/completions"), (":authority", "bench"),
         ("content-type", "application/json"), ("content-length", str(len(body)))])["request_headers"]
    sim = Sim("--speed", "1000", replicas=4)
    ext = free_port()
    gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                   "endpoints": ["127.0.0.1:%d" % p for p in sim.ports]}],
                 extra='ext_proc: { listen: "127.0.0.1:%d", fallbacks: 2 }' % ext)
    rows = []
    try:
        wait_until(lambda: _can_connect(ext), 15, "the ext_proc listener")
        drv = ep.Driver(ext)
        n = 0
        for conc in (1, 32):
            figs = {}
            for _ in range(RUNS):
                n += 1
                modes = []
                if tools["h2load"]:
                    modes.append(("picker/h2load", lambda: h2load(ext, conc, data, os.path.join(work, "h2.log"))))
                count = int((3000 if conc > 1 else 600) * SECONDS / 3)
                modes.append(("picker/node", lambda: drv.bench(
                    "p%d" % n, concurrency=conc, requests=count, headers=headers, body=ep.b64(body),
                    response_body=ep.b64(usage))))
                if tools["wrk"]:
                    modes.append(("proxy/wrk", lambda: wrk(gw.port, conc, lua)))
                    # The baseline: one replica straight, no gateway: proxy minus direct is
                    # the latency the proxy adds, to set beside the picker's.
                    modes.append(("direct/wrk", lambda: wrk(sim.ports[0], conc, lua)))
                for mode, run in modes:
                    c0 = cpu_s(gw.proc.pid) if mode != "direct/wrk" else 0
                    r = run()
                    r["gw_cpu_us"] = (cpu_s(gw.proc.pid) - c0) * 1e6 / max(1, r["ok"]) if c0 else 0
                    if "rate" not in r:
                        r["rate"] = r["ok"] / (r["wall_ms"] / 1000.0)
                    if "p50" not in r:
                        r["p50"], r["p99"] = pct(r["latency_ms"], 50), pct(r["latency_ms"], 99)
                    figs.setdefault(mode, []).append(r)
            for mode, runs in figs.items():
                rows.append((conc, mode, statistics.median(r["rate"] for r in runs),
                             statistics.median(r["p50"] for r in runs), statistics.median(r["p99"] for r in runs),
                             sum(r["failed"] for r in runs), statistics.median(r["gw_cpu_us"] for r in runs)))
        drv.close()
    finally:
        gw.close()
        sim.stop()
    print("endpoint picker (ext_proc) vs HTTP proxy: one gateway, 4 simulated replicas, ~4 KiB chat body, "
          "median of %d runs" % RUNS)
    for t, ok in tools.items():
        if not ok:
            print("(%s not installed: its rows are missing; scripts/deps.sh bench)" % t)
    print("%-5s %-14s %10s %9s %9s %7s %15s" % ("conc", "mode", "req/s", "p50 ms", "p99 ms", "failed", "gateway CPU/req"))
    by = {}
    for conc, mode, rate, p50, p99, failed, cpu in rows:
        by[(conc, mode)] = (rate, p50, p99, cpu)
        print("%-5d %-14s %10.0f %9.3f %9.3f %7d %12.0f us" % (conc, mode, rate, p50, p99, failed, cpu))
    print("picker/h2load: request phase only (body in, pick and body back); picker/node: whole streams, "
          "latency = last body chunk -> pick; proxy/wrk: whole requests, replica time included; "
          "direct/wrk: one replica, no gateway (the baseline)")
    for conc in (1, 32):
        pk, px, dx = by.get((conc, "picker/h2load")), by.get((conc, "proxy/wrk")), by.get((conc, "direct/wrk"))
        if pk and px:
            added = (" (proxy adds p50 %.3f ms over direct)" % (px[1] - dx[1])) if dx else ""
            print("conc %-3d picker: %.0f decisions/s, adds p50 %.3f ms p99 %.3f ms; proxy: %.0f req/s%s; "
                  "gateway CPU per request picker/proxy %.2fx" % (conc, pk[0], pk[1], pk[2], px[0], added,
                                                                  pk[3] / px[3]))
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
