#!/usr/bin/env python3
"""Live figure for hostile nesting: the latency a small request sees on a running gateway while
other clients send bodies of pure JSON nesting, next to the same request's latency with no
hostile traffic.

Starts the release gateway (build/switchboard, or --bin) in front of the integration tests'
fake upstream, then measures, sequentially on fresh connections:
  GET /healthz                        answered by the gateway itself
  POST /v1/chat/completions (tiny)    inspected, routed, proxied to the fake upstream
first alone, then while --senders threads each send nested bodies back to back (1 MiB of
nesting by default; --levels N sends the hostile body {"model":"m1","x":[[[...]]]} of N levels).
Prints median / p99 / max in ms and how many hostile bodies were answered meanwhile. A control
row sends, the same way, 1 MiB ordinary prompts naming an unknown model (read, inspected,
hashed, answered 404): what receiving 1 MiB bodies at that rate costs by itself, on a machine
whose cores the senders share.
Figures only: a benchmark never decides whether a build passes.

  python3 bench/hostile_latency.py [--bin PATH] [--requests N] [--senders K] [--levels N]
"""
import argparse
import os
import socket
import statistics
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from fixtures import Gateway, Upstream, chat_body, read_response, send_request  # noqa: E402


def mib_nesting():
    head, tail = b'{"model":"m1","x":', b',"messages":[]}'
    n = ((1 << 20) - len(head) - len(tail)) // 2
    return head + b"[" * n + b"]" * n + tail


def levels_body(levels):
    return b'{"model":"m1","x":' + b"[" * levels + b"]" * levels + b',"messages":[]}'


def mib_prompt():
    text = "The quick brown fox jumps over the lazy dog. " * ((1 << 20) // 45)
    return ('{"model":"no-such-model","messages":[{"role":"user","content":"%s"}]}' % text).encode()


def timed(port, method, path, body=None, timeout=120):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        send_request(s, method, path, body)
        st, _, _ = read_response(s)
    finally:
        s.close()
    return st, (time.perf_counter() - t0) * 1e3


def series(port, n, method, path, body=None):
    out = []
    for _ in range(n):
        st, ms = timed(port, method, path, body)
        if st != 200:
            raise SystemExit("%s %s: status %d" % (method, path, st))
        out.append(ms)
    return out


def summary(ms):
    ms = sorted(ms)
    return "median %8.3f ms   p99 %8.3f ms   max %8.3f ms" % (
        statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))], ms[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "switchboard"))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--levels", type=int, default=0, help="send N nested levels instead of 1 MiB")
    a = ap.parse_args()

    hostile = levels_body(a.levels) if a.levels else mib_nesting()
    chat = chat_body(text="hello")
    up = Upstream()
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}], bin_path=a.bin)
    try:
        series(gw.port, 20, "GET", "/healthz")  # warm
        quiet_h = series(gw.port, a.requests, "GET", "/healthz")
        quiet_c = series(gw.port, a.requests, "POST", "/v1/chat/completions", chat)

        def under(body):
            stop = threading.Event()
            answered, statuses = [0], set()

            def sender():
                while not stop.is_set():
                    st, _ = timed(gw.port, "POST", "/v1/chat/completions", body, timeout=600)
                    answered[0] += 1
                    statuses.add(st)

            threads = [threading.Thread(target=sender, daemon=True) for _ in range(a.senders)]
            for t in threads:
                t.start()
            time.sleep(0.2)  # the senders are mid-stream when measuring starts
            t0 = time.perf_counter()
            h = series(gw.port, a.requests, "GET", "/healthz")
            c = series(gw.port, a.requests, "POST", "/v1/chat/completions", chat)
            elapsed = time.perf_counter() - t0
            stop.set()
            for t in threads:
                t.join(600)
            return h, c, answered[0] / elapsed, sorted(statuses)

        busy_h, busy_c, rate, statuses = under(hostile)
        ctl_h, ctl_c, ctl_rate, ctl_statuses = under(mib_prompt())

        what = "%d levels (%d bytes)" % (a.levels, len(hostile)) if a.levels else "1 MiB of nesting"
        print("gateway %s; hostile bodies: %s, %d senders back to back" % (os.path.relpath(a.bin, ROOT), what,
                                                                           a.senders))
        print("  %-44s %s" % ("GET /healthz, quiet", summary(quiet_h)))
        print("  %-44s %s" % ("GET /healthz, under hostile bodies", summary(busy_h)))
        print("  %-44s %s" % ("GET /healthz, under 1 MiB prompts (control)", summary(ctl_h)))
        print("  %-44s %s" % ("tiny chat request, quiet", summary(quiet_c)))
        print("  %-44s %s" % ("tiny chat request, under hostile bodies", summary(busy_c)))
        print("  %-44s %s" % ("tiny chat request, under 1 MiB prompts", summary(ctl_c)))
        print("  bodies answered meanwhile: hostile %.0f/s (statuses %s), control %.0f/s (statuses %s)" % (
            rate, statuses, ctl_rate, ctl_statuses))
    finally:
        gw.close()
        up.close()


if __name__ == "__main__":
    main()
