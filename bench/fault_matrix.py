#!/usr/bin/env python3
"""The fault matrix (issue 14): each fault of the simulator driven through the gateway, with
the current build and a baseline build side by side, and what the clients saw.

Per fault: three simulated replicas behind a gateway (profile default, the config's defaults),
one client sending chat completions one after another for SECONDS (every third one streamed)
for each binary in turn; counted: answers 200, 5xx answers that reached the client, streams cut
with a visible SSE error event, streams cut silently (no [DONE], no error), requests that got no
answer at all, and replica 0's share of the 200s (the faulty one where one is; a third is
fair). Medians over RUNS runs.

    python3 bench/fault_matrix.py [BASELINE_BINARY]     (default: no baseline column)
Environment: SB_BIN (default build/switchboard), FAULT_SECONDS (default 8), FAULT_RUNS (3).
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from soak import free_port, free_run, wait_port  # noqa: E402  (the soak's process helpers)


def exchange(port, raw, timeout):
    """Sends raw bytes (a request with Connection: close) and reads to EOF."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(raw)
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        s.close()


SB_BIN = os.environ.get("SB_BIN", os.path.join(ROOT, "build", "switchboard"))
SECONDS = float(os.environ.get("FAULT_SECONDS", "8"))
RUNS = int(os.environ.get("FAULT_RUNS", "3"))
MODEL = "fault-model"

FAULTS = [
    ("fail-rate 0.3 on 1 of 3", ["--fail-rate", "0.3", "--fault-replicas", "0"]),
    ("refuse on 2 of 3", ["--refuse", "--fault-replicas", "0,1"]),
    ("restart every 3 s, all", ["--restart-every-ms", "3000"]),
    ("metrics hang on 1 of 3", ["--metrics-hang", "--fault-replicas", "0"]),
    ("die after 8 tokens on 1 of 3", ["--die-after-tokens", "8", "--fault-replicas", "0"]),
]


def request(port, n):
    stream = n % 3 == 0
    body = json.dumps({"model": MODEL, "stream": stream, "max_tokens": 24,
                       "messages": [{"role": "user", "content": "question %d" % n}]}).encode()
    try:
        data = exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), 30)
    except OSError:
        return "no answer"
    if not data.startswith(b"HTTP/1.1 "):
        return "no answer"
    status = int(data[9:12])
    if status != 200:
        return "5xx" if status >= 500 else "4xx"
    if not stream:
        return "200"
    if b"data: [DONE]" in data:
        return "200"
    return "cut, visible" if b'"error"' in data else "cut, silent"


def first_replica_share(admin, address):
    """Replica 0's share of the 2xx answers, from the gateway's per-endpoint counters."""
    data = exchange(admin, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10)
    total = mine = 0.0
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("switchboard_requests_total{") and 'code="2xx"' in line:
            v = float(line.rsplit(" ", 1)[1])
            total += v
            if 'endpoint="%s"' % address in line:
                mine += v
    return mine / total if total else 0.0


def run_once(binary, flags):
    work = tempfile.mkdtemp(prefix="sb-fault-")
    log = open(os.path.join(work, "log"), "w")
    first = free_run(3)
    sim = subprocess.Popen([binary, "sim", "--port", str(first), "--replicas", "3", "--model", MODEL, "--speed", "50",
                            "--log-level", "warn"] + flags, stdout=log, stderr=subprocess.STDOUT)
    port, admin = free_port(), free_port()
    cfg = os.path.join(work, "switchboard.yaml")
    eps = ["127.0.0.1:%d" % p for p in range(first, first + 3)]
    with open(cfg, "w") as f:
        f.write('listen: "127.0.0.1:%d"\nadmin: { listen: "127.0.0.1:%d" }\npools:\n  - name: p\n'
                '    models: ["%s"]\n    endpoints: %s\n' % (port, admin, MODEL, json.dumps(eps)))
    gw = subprocess.Popen([binary, "serve", "-c", cfg], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_port(port):
            raise RuntimeError("gateway did not start (%s)" % work)
        for p in range(first, first + 3):
            if "--refuse" not in flags:
                wait_port(p)
        counts = {}
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < SECONDS:
            r = request(port, n)
            counts[r] = counts.get(r, 0) + 1
            n += 1
        counts["share"] = first_replica_share(admin, eps[0])
        return counts
    finally:
        for p in (gw, sim):
            p.send_signal(signal.SIGINT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else None
    bins = [("current", SB_BIN)] + ([("baseline", base)] if base else [])
    classes = ["200", "5xx", "cut, visible", "cut, silent", "no answer", "4xx", "share"]
    print("fault matrix: 3 replicas (sim --speed 50), one client, %.0f s per run, median of %d runs; "
          "every third request streamed" % (SECONDS, RUNS))
    print("| fault | build | " + " | ".join(classes) + " |")
    print("|---|---|" + "---:|" * len(classes))
    for name, flags in FAULTS:
        for label, binary in bins:
            runs = [run_once(binary, flags) for _ in range(RUNS)]
            med = [statistics.median(r.get(c, 0) for r in runs) for c in classes]
            print("| %s | %s | %s |" % (name, label, " | ".join("%.2f" % m if c == "share" else "%g" % m
                                                               for c, m in zip(classes, med))), flush=True)


if __name__ == "__main__":
    main()
