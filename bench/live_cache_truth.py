#!/usr/bin/env python3
"""Cache truth, live: the engines' own prefix-cache hit ratio behind a gateway that routes by
its own marks alone (approximate), behind gateway replicas that also tell each other what they
sent where (approximate + sync, with 2 or more gateways: `sync:`), and behind ones that read the
engines' KV events (precise), on the same workload against fresh simulated replicas with small
caches.

For each mode: 4 `switchboard sim` replicas publishing vLLM's KV events (--num-gpu-blocks
small enough that the working set does not fit), then 1 or 2 gateway replicas in front of them
(`default` profile; in precise mode the pool has `kv_events:`), then CLIENTS threads sending
chat requests: GROUPS long system prompts (about SYSTEM_WORDS words each) with a random
question, spread over the gateway replicas. The figure is the fleet's
vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total after the run, read from the
replicas themselves (the engines' truth, not the gateway's belief), plus the clients' TTFT
percentiles (non-streamed: time to the whole answer of a short max_tokens).

Usage: bench/live_cache_truth.py [--requests N] [--gateways G] [--seed S]
Prints one line per mode and the ratio. Takes about a minute per mode at the defaults.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SB_BIN", os.path.join(ROOT, "build", "switchboard"))
MODEL = "sim/model-a"


def free_run(n):
    for _ in range(100):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
        s.close()
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                t = socket.socket()
                t.bind(("127.0.0.1", p))
                socks.append(t)
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    sys.exit("no free port run")


def http(port, method, path, body=None, timeout=60):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                   "Connection: close\r\n\r\n" % (method, path, len(data))).encode() + data)
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
        head, _, rest = buf.partition(b"\r\n\r\n")
        return int(head.split()[1]), rest
    finally:
        s.close()


def wait_port(port, proc, what):
    for _ in range(500):
        if proc.poll() is not None:
            sys.exit("%s exited" % what)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit("%s did not listen" % what)


def engines_hits(ports):
    hits = queries = 0.0
    for p in ports:
        _, body = http(p, "GET", "/metrics")
        text = body.decode()
        hits += sum(float(v) for v in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))
        queries += sum(float(v) for v in re.findall(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$", text, re.M))
    return hits, queries


def peers_alive(admin_port):
    st, text = http(admin_port, "GET", "/metrics")
    m = re.search(r"^switchboard_sync_peers_alive (\d+)$", text.decode(), re.M) if st == 200 else None
    return int(m.group(1)) if m else -1


def run_mode(mode, a, tmp):
    precise, sync = mode == "precise", mode == "sync"
    port, kv_port = free_run(4), free_run(4)
    sync_port = free_run(a.gateways)
    sim = subprocess.Popen([BIN, "sim", "--replicas", "4", "--port", str(port), "--model", MODEL, "--speed",
                            str(a.speed), "--num-gpu-blocks", str(a.blocks), "--kv-events-endpoint",
                            "tcp://*:%d" % kv_port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ports = [port + i for i in range(4)]
    gws = []
    try:
        for p in ports:
            wait_port(p, sim, "sim")
        for g in range(a.gateways):
            gp, ap = free_run(2), None
            ap = gp + 1
            cfg = os.path.join(tmp, "gw-%s-%d.yaml" % (mode, g))
            with open(cfg, "w") as f:
                f.write('listen: "127.0.0.1:%d"\nadmin: { listen: "127.0.0.1:%d" }\n' % (gp, ap))
                if sync:
                    peers = ['"tcp://127.0.0.1:%d"' % (sync_port + h) for h in range(a.gateways) if h != g]
                    f.write('sync: { listen: "tcp://127.0.0.1:%d", peers: [%s] }\n' % (sync_port + g, ", ".join(peers)))
                f.write("tokenize: { wait_ms: 200 }\n")
                f.write("pools:\n  - name: p\n    models: [\"%s\"]\n    profile: default\n" % MODEL)
                f.write("    endpoints: [%s]\n" % ", ".join('"127.0.0.1:%d"' % p for p in ports))
                if precise:
                    f.write('    kv_events: { endpoint: "tcp://{host}:{port%+d}" }\n' % (kv_port - port))
            proc = subprocess.Popen([BIN, "serve", "-c", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            gws.append((proc, gp))
            wait_port(gp, proc, "gateway")
        time.sleep(0.5)  # ZMQ subscriptions settle (a subscriber joining late misses what came before)
        deadline = time.monotonic() + 10
        while sync and any(peers_alive(gp + 1) != a.gateways - 1 for _, gp in gws):
            if time.monotonic() > deadline:
                sys.exit("the gateways did not hear each other's heartbeats")
            time.sleep(0.2)
        rng = random.Random(a.seed)
        words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
        systems = [" ".join("%s%d" % (rng.choice(words), rng.randrange(1000)) for _ in range(a.system_words))
                   for _ in range(a.groups)]
        jobs = [(rng.randrange(a.groups), rng.randrange(10**6), rng.randrange(len(gws))) for _ in range(a.requests)]
        lock = threading.Lock()
        lat, errors = [], [0]

        def worker(k):
            while True:
                with lock:
                    if not jobs:
                        return
                    grp, q, g = jobs.pop()
                body = {"model": MODEL, "max_tokens": 4, "messages": [
                    {"role": "system", "content": systems[grp]}, {"role": "user", "content": "question %d?" % q}]}
                t0 = time.monotonic()
                try:
                    st, _ = http(gws[g][1], "POST", "/v1/chat/completions", body)
                except OSError:
                    st = 0
                with lock:
                    if st == 200:
                        lat.append(time.monotonic() - t0)
                    else:
                        errors[0] += 1

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(a.clients)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.monotonic() - t0
        hits, queries = engines_hits(ports)
        lat.sort()
        pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
        return hits / queries if queries else 0.0, pct(0.5), pct(0.9), pct(0.99), errors[0], wall
    finally:
        for proc, _ in gws:
            proc.terminate()
            proc.wait(10)
        sim.terminate()
        sim.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--gateways", type=int, default=2)
    ap.add_argument("--groups", type=int, default=24)
    ap.add_argument("--system-words", type=int, default=600)
    ap.add_argument("--blocks", type=int, default=400, help="--num-gpu-blocks per replica")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--speed", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit("build/switchboard not found: run make first")
    tmp = tempfile.mkdtemp(prefix="sb-live-truth-")
    try:
        print("live cache truth: 4 replicas x %d blocks, %d groups x ~%d words, %d requests, %d clients, "
              "%d gateway replicas, speed %gx, seed %d" % (a.blocks, a.groups, a.system_words, a.requests, a.clients,
                                                          a.gateways, a.speed, a.seed))
        res = {}
        names = {"approximate": "approximate", "sync": "approximate + sync", "precise": "precise (kv_events)"}
        modes = ["approximate"] + (["sync"] if a.gateways > 1 else []) + ["precise"]
        for mode in modes:
            hit, p50, p90, p99, err, wall = run_mode(mode, a, tmp)
            res[mode] = hit
            print("  %-22s engines' hit ratio %.3f   latency p50 %.0f ms p90 %.0f ms p99 %.0f ms   errors %d   %.1f s" % (
                names[mode], hit, p50, p90, p99, err, wall))
        base = res["approximate"]
        for mode in modes[1:]:
            print("  hit ratio %s/approximate: %.2fx" % (mode, res[mode] / base if base else float("inf")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
