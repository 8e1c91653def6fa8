#!/usr/bin/env python3
"""make soak: a bounded soak of the gateway under a mixed load with faults switched on and off.

A gateway (the release build) fronts four simulated replicas:
  - two healthy ones (always up),
  - one "chaos" replica that the soak cycles through fault modes every phase: clean, killed
    (SIGKILL: connections refused), answering 500 to 30% of requests, cutting every stream after
    a few tokens, /metrics that never answers,
  - one that restarts itself every few seconds (down a tenth of the time, its cache emptied).
Clients (threads) send chat completions, streamed and not, of random lengths, without pause.

Every request is classified by what its client saw:
  ok            200 and a whole answer (non-streamed: JSON with choices; streamed: `data: [DONE]`)
  error         an OpenAI-shaped error answer from the gateway (4xx/5xx with a JSON error) or a
                stream that ended with a visible SSE error event
  lost          no answer at all (connection closed before a status line), a stream that
                ended without [DONE] or an error event, or a client timeout (a hung request)
The gateway's RSS and open descriptors are sampled every second.

Verdict (exit status 1 if any fails): nothing lost; memory flat after warm-up (the last third's
peak RSS within 5% + 2 MiB of the middle third's); descriptors back to their warm-up level once
the load stops. Figures printed: requests by class, 5xx answers that reached a client, RSS and
descriptors over time.

Environment: SOAK_SECONDS (default 180), SOAK_CLIENTS (default 16), SOAK_PHASE_S (default 15),
SB_BIN (default build/switchboard).
"""
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from fixtures import free_port, free_run  # noqa: E402  (the integration tests' port helpers)
BIN = os.environ.get("SB_BIN", os.path.join(ROOT, "build", "switchboard"))
SECONDS = float(os.environ.get("SOAK_SECONDS", "180"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "16"))
PHASE_S = float(os.environ.get("SOAK_PHASE_S", "15"))
MODEL = "soak-model"
CLIENT_TIMEOUT_S = 60.0

CHAOS_MODES = [
    ("clean", []),
    ("killed", None),  # not running: connections refused
    ("fail-rate 0.3", ["--fail-rate", "0.3"]),
    ("die-after-tokens 8", ["--die-after-tokens", "8"]),
    ("metrics-hang", ["--metrics-hang"]),
]


def wait_port(port, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def start_sim(port, replicas, extra, log):
    args = [BIN, "sim", "--port", str(port), "--replicas", str(replicas), "--model", MODEL,
            "--speed", "4", "--log-level", "warn"] + extra
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.status = {}
        self.examples = {}

    def add(self, cls, status, detail=""):
        with self.lock:
            self.counts[cls] = self.counts.get(cls, 0) + 1
            self.status[status] = self.status.get(status, 0) + 1
            if cls == "lost" and len(self.examples) < 8:
                self.examples[len(self.examples)] = detail


def one_request(port, stream, tally, rng):
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega"]) for _ in range(rng.randint(5, 400)))
    body = {"model": MODEL, "stream": stream, "max_tokens": rng.randint(8, 120),
            "messages": [{"role": "system", "content": "You are soak tester number %d." % rng.randint(0, 20)},
                         {"role": "user", "content": words}]}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    except socket.timeout:
        tally.add("lost", "timeout", "client timeout (hung)")
        return
    except http.client.IncompleteRead as e:
        # The connection closed inside a chunked answer: a cut stream. Visible to an SSE client
        # only if an error event came before the cut.
        partial = e.partial.decode("utf-8", "replace")
        if '"error"' in partial:
            tally.add("error", "stream-error")
        else:
            tally.add("lost", "stream-cut", "connection closed inside the answer, no error event: %r" % partial[-100:])
        return
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        tally.add("lost", "no-answer", "%s: %s" % (type(e).__name__, e))
        return
    finally:
        conn.close()
    st = resp.status
    if st != 200:
        try:
            ok = "error" in json.loads(data)
        except ValueError:
            ok = False
        tally.add("error" if ok else "lost", st, "status %d without a JSON error: %r" % (st, data[:120]))
        return
    if not stream:
        try:
            ok = "choices" in json.loads(data)
        except ValueError:
            ok = False
        tally.add("ok" if ok else "lost", st, "200 without a whole JSON answer: %r" % data[-120:])
        return
    text = data.decode("utf-8", "replace")
    if text.rstrip().endswith("data: [DONE]"):
        tally.add("ok", st)
    elif '"error"' in text:
        tally.add("error", "stream-error")
    else:
        tally.add("lost", "stream-cut", "stream ended without [DONE] or an error: %r" % text[-120:])


def client_loop(port, stop, tally, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        one_request(port, rng.random() < 0.6, tally, rng)


def gateway_counters(admin_port):
    """What the gateway says it did: retries, retries the budget refused, ejections, panics."""
    names = ["switchboard_retries_total", "switchboard_retries_budget_denied_total", "switchboard_ejections_total",
             "switchboard_readmissions_total", "switchboard_panic_routing_total"]
    out = dict.fromkeys((n[len("switchboard_"):] for n in names), 0.0)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
    except (OSError, http.client.HTTPException):
        return out
    for line in text.splitlines():
        for n in names:
            if line.startswith(n + " ") or line.startswith(n + "{"):
                out[n[len("switchboard_"):]] += float(line.rsplit(" ", 1)[1])
    return out


def proc_figures(pid):
    rss = 0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None
    return rss, fds


def main():
    if not os.path.exists(BIN):
        print("soak: %s is missing (make build/switchboard)" % BIN, file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="sb-soak-")
    log = open(os.path.join(work, "sims.log"), "w")
    healthy = free_run(2)
    chaos = free_port()
    restarting = free_port()
    gw_port = free_port()
    admin_port = free_port()
    procs = [start_sim(healthy, 2, [], log),
             start_sim(restarting, 1, ["--restart-every-ms", "4000"], log)]
    chaos_proc = [None]
    cfg = os.path.join(work, "switchboard.yaml")
    eps = ["127.0.0.1:%d" % p for p in (healthy, healthy + 1, chaos, restarting)]
    with open(cfg, "w") as f:
        f.write('listen: "127.0.0.1:%d"\nadmin: { listen: "127.0.0.1:%d" }\n'
                'access_log: "%s"\npools:\n  - name: soak\n    models: ["%s"]\n'
                '    endpoints: %s\n' % (gw_port, admin_port, os.path.join(work, "access.log"), MODEL,
                                         json.dumps(eps)))
    gw_log = open(os.path.join(work, "gateway.log"), "w")
    gw = subprocess.Popen([BIN, "serve", "-c", cfg], stdout=gw_log, stderr=subprocess.STDOUT)
    for p in (healthy, healthy + 1, restarting, gw_port):
        if not wait_port(p):
            print("soak: port %d did not open (see %s)" % (p, work), file=sys.stderr)
            return 2

    def set_chaos(extra):
        if chaos_proc[0]:
            chaos_proc[0].send_signal(signal.SIGKILL)
            chaos_proc[0].wait()
            chaos_proc[0] = None
        if extra is not None:
            chaos_proc[0] = start_sim(chaos, 1, extra, log)
            wait_port(chaos)

    tally = Tally()
    stop = threading.Event()
    samples = []  # (t, rss, fds)
    t0 = time.monotonic()
    base = proc_figures(gw.pid)
    threads = [threading.Thread(target=client_loop, args=(gw_port, stop, tally, 1000 + i), daemon=True)
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    phase = -1
    print("soak: %d clients for %.0f s, chaos replica cycles %s every %.0f s; work dir %s" %
          (CLIENTS, SECONDS, ", ".join(m for m, _ in CHAOS_MODES), PHASE_S, work))
    while True:
        el = time.monotonic() - t0
        if el >= SECONDS:
            break
        if int(el // PHASE_S) != phase:
            phase = int(el // PHASE_S)
            name, extra = CHAOS_MODES[phase % len(CHAOS_MODES)]
            set_chaos(extra)
            with tally.lock:
                done = sum(tally.counts.values())
            print("  %5.0f s  chaos: %-20s requests so far %d" % (el, name, done), flush=True)
        fig = proc_figures(gw.pid)
        if fig:
            samples.append((el, fig[0], fig[1]))
        time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(CLIENT_TIMEOUT_S + 5)
    hung_threads = sum(t.is_alive() for t in threads)
    # Idle: upstream keep-alive connections may stay; client ones close with the clients.
    time.sleep(3.0)
    end = proc_figures(gw.pid)
    counters = gateway_counters(admin_port)
    gw.send_signal(signal.SIGTERM)
    try:
        gw.wait(40)
    except subprocess.TimeoutExpired:
        gw.kill()
    set_chaos(None)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()

    total = sum(tally.counts.values())
    print("\nrequests: %d in %.0f s (%.1f/s)" % (total, SECONDS, total / SECONDS))
    for cls in ("ok", "error", "lost"):
        print("  %-6s %d" % (cls, tally.counts.get(cls, 0)))
    print("  by status: %s" % ", ".join("%s=%d" % (k, v) for k, v in sorted(tally.status.items(), key=str)))
    five = sum(v for k, v in tally.status.items() if isinstance(k, int) and k >= 500) + tally.status.get("stream-error", 0)
    print("  5xx answers or stream errors that reached a client: %d (%.2f%%)" % (five, 100.0 * five / max(total, 1)))
    for d in tally.examples.values():
        print("  lost: %s" % d)
    print("  gateway: %s" % ", ".join("%s %g" % kv for kv in counters.items()))
    verdicts = []
    lost = tally.counts.get("lost", 0) + hung_threads
    verdicts.append(("nothing lost", lost == 0, "%d lost, %d clients hung" % (tally.counts.get("lost", 0), hung_threads)))
    if len(samples) >= 9 and base:
        third = len(samples) // 3
        mid = max(s[1] for s in samples[third:2 * third])
        last = max(s[1] for s in samples[2 * third:])
        flat = last <= mid * 1.05 + 2 * 1024 * 1024
        verdicts.append(("memory flat after warm-up", flat,
                         "RSS start %.1f MiB, middle-third peak %.1f MiB, last-third peak %.1f MiB" %
                         (base[0] / 2**20, mid / 2**20, last / 2**20)))
        warm_fds = max(s[2] for s in samples[:third])
        peak_fds = max(s[2] for s in samples)
        ok_fds = end is not None and end[1] <= warm_fds
        verdicts.append(("descriptors back to their warm-up level", ok_fds,
                         "start %d, warm-up peak %d, peak %d, idle after the load %s" %
                         (base[1], warm_fds, peak_fds, end[1] if end else "?")))
    else:
        verdicts.append(("enough samples", False, "%d samples" % len(samples)))
    print("\nverdict:")
    failed = False
    for name, ok, why in verdicts:
        print("  %-42s %s  (%s)" % (name, "PASS" if ok else "FAIL", why))
        failed |= not ok
    print("gateway exit status: %s; logs in %s" % (gw.returncode, work))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
