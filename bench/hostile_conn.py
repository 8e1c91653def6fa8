#!/usr/bin/env python3
"""Hostile connections, measured: prints figures, decides nothing.

For each binary given (default build/switchboard; pass --compare OLD to print an older build
side by side):
  1. memory: N connections each declare a 16 MiB body (the default max_body_bytes) and send
     100 bytes of it; the gateway's VmData and VmRSS growth over its own baseline;
  2. early answers: 10 requests of 1 MiB with max_body_bytes 1 KiB sent by Python's
     http.client (whole body first, then read): how many read their 413;
  3. the connection limit: with max_connections taken, 50 new clients: how many read a 503,
     and the median time to it;
  4. the body budget: slow clients hold max_buffered_body_bytes; the median time for a
     100 KiB request to be refused (503), and for a /healthz meanwhile;
  5. a client pipelining GET /v1/models (a 24 KiB answer for a 40-byte request) for 3 s
     without reading: the gateway's VmRSS growth.

usage: bench/hostile_conn.py [--bin PATH] [--compare PATH] [--conns N]
"""
import argparse
import http.client as httpclient
import json
import os
import socket
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from fixtures import Gateway, Upstream, chat_body, http, read_response  # noqa: E402


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def memory(binary, up, n):
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}], bin_path=binary)
    socks = []
    try:
        http(gw.port, "POST", "/v1/chat/completions", chat_body("m1"))
        base_data, base_rss = status_kib(gw.proc.pid, "VmData"), status_kib(gw.proc.pid, "VmRSS")
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                      b"Expect: 100-continue\r\n\r\n" % (16 << 20))
            socks.append(s)
        for s in socks:
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(4096)
            s.sendall(b"{" + b" " * 99)
        http(gw.port, "GET", "/healthz")  # after the 100-byte writes have been read
        return (status_kib(gw.proc.pid, "VmData") - base_data, status_kib(gw.proc.pid, "VmRSS") - base_rss)
    finally:
        for s in socks:
            s.close()
        gw.close()


def early_413(binary, up):
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                 extra="limits: { max_body_bytes: 1KiB }", bin_path=binary)
    body = json.dumps(chat_body("m1", text="a" * (1 << 20))).encode()
    got = 0
    try:
        for _ in range(10):
            c = httpclient.HTTPConnection("127.0.0.1", gw.port, timeout=20)
            try:
                c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
                if c.getresponse().status == 413:
                    got += 1
            except OSError:
                pass
            finally:
                c.close()
    finally:
        gw.close()
    return got


def at_limit(binary, up):
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                 extra="limits: { max_connections: 8 }", bin_path=binary)
    held, times, answered = [], [], 0
    try:
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            read_response(s)
            held.append(s)
        for _ in range(50):
            t = time.perf_counter()
            try:
                st, _, _ = http(gw.port, "GET", "/v1/models")
                if st == 503:
                    answered += 1
                    times.append(time.perf_counter() - t)
            except OSError:
                pass
    finally:
        for s in held:
            s.close()
        gw.close()
    return answered, statistics.median(times) * 1e3 if times else float("nan")


def budget(binary, up):
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                 extra="limits: { max_body_bytes: 16MiB, max_buffered_body_bytes: 4MiB }", bin_path=binary)
    hogs, refuse, health, codes = [], [], [], []
    body = json.dumps(chat_body("m1", text="b" * 100 * 1024)).encode()
    try:
        for _ in range(4):  # 4 x (1 MiB + 1) of a 16 MiB body each: the budget is spent
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (16 << 20)
                      + b"{" + b" " * (1 << 20))
            hogs.append(s)
        time.sleep(0.5)  # a benchmark, not a test: let the gateway read the hogs' bytes
        for _ in range(20):
            t = time.perf_counter()
            try:
                st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body)
                codes.append(st)
            except OSError:
                codes.append("reset")
            refuse.append(time.perf_counter() - t)
            t = time.perf_counter()
            http(gw.port, "GET", "/healthz")
            health.append(time.perf_counter() - t)
    finally:
        for s in hogs:
            s.close()
        gw.close()
    return codes, statistics.median(refuse) * 1e3, statistics.median(health) * 1e3


def pipelined_flood(binary, up):
    models = ["org/model-with-a-rather-long-name-%03d" % i for i in range(300)]
    gw = Gateway([{"name": "p", "models": models, "endpoints": [up.address]}], bin_path=binary)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        http(gw.port, "GET", "/v1/models")
        base = status_kib(gw.proc.pid, "VmRSS")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(0.5)
        batch = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
        sent, deadline = 0, time.monotonic() + 3
        try:
            while time.monotonic() < deadline:
                sent += s.send(batch)
        except socket.timeout:
            pass
        time.sleep(0.3)
        return sent, status_kib(gw.proc.pid, "VmRSS") - base
    finally:
        s.close()
        gw.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "switchboard"))
    ap.add_argument("--compare", help="another build, printed beside")
    ap.add_argument("--conns", type=int, default=500)
    a = ap.parse_args()
    bins = [("this build", a.bin)] + ([("compared", a.compare)] if a.compare else [])
    up = Upstream("u1")
    try:
        for name, b in bins:
            print("== %s: %s" % (name, b))
            d, r = memory(b, up, a.conns)
            print("memory: %d connections declaring 16 MiB, 100 bytes sent: VmData +%.1f MiB, VmRSS +%.1f MiB"
                  % (a.conns, d / 1024, r / 1024))
            print("early 413: http.client sending 1 MiB over a 1 KiB limit read the 413 %d/10 times" % early_413(b, up))
            n, ms = at_limit(b, up)
            print("connection limit: %d/50 clients past max_connections read a 503 (median %.2f ms)" % (n, ms))
            sent, grown = pipelined_flood(b, up)
            print("pipelined flood, never read: %.1f MiB of requests taken in, VmRSS +%.1f MiB"
                  % (sent / 2**20, grown / 1024))
            try:
                codes, r_ms, h_ms = budget(b, up)
            except AssertionError as e:  # an older build without the key
                print("body budget: n/a (%s)" % str(e).strip().splitlines()[-1])
                continue
            print("body budget spent by slow senders: 100 KiB requests got %s (median %.2f ms); /healthz "
                  "meanwhile median %.2f ms" % (sorted(set(map(str, codes))), r_ms, h_ms))
    finally:
        up.close()


if __name__ == "__main__":
    main()
