"""Several workers (`workers: N`, net/workers.h): event loops that each accept client connections
on the same port (SO_REUSEPORT) and share one routing state under one lock (net/guard.h).

What must hold with workers as with one loop: one fleet-wide view (the prefix index, flow
control's queues, the listener's limits), reloads and drains reaching every worker, whole
access-log lines. `make tsan` runs this file under ThreadSanitizer (the fixture fails a test whose
gateway log holds a report)."""
import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

from fixtures import (Gateway, Upstream, chat_body, free_port, http, read_response, read_until_eof, send_request,
                      wait_until)

WORKERS = "workers: 2\n"
SATURATED = "vllm:num_requests_waiting 10\nvllm:num_requests_running 4\nvllm:gpu_cache_usage_perc 0.5\n"
IDLE = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:gpu_cache_usage_perc 0.1\n"


def metric_values(gw, prefix):
    text = http(gw.admin_port, "GET", "/metrics")[2].decode()
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(prefix)}


def metric(gw, name):
    return sum(metric_values(gw, name).values())


def until_both_workers_accepted(gw, make_connection, limit=200):
    """Opens fresh connections until each worker accepted at least one (the kernel hashes each
    connection's addresses to a listener). Returns how many were opened."""
    for n in range(1, limit + 1):
        make_connection()
        per = metric_values(gw, "switchboard_worker_connections_accepted_total")
        if len(per) == 2 and all(v > 0 for v in per.values()):
            return n
    raise AssertionError("one worker never accepted a connection in %d: %s" % (limit, per))


class WorkersTest(unittest.TestCase):
    def setUp(self):
        self.ups = [Upstream("a"), Upstream("b")]
        self.gw = None

    def tearDown(self):
        try:
            if self.gw:
                self.gw.close()
        finally:
            for u in self.ups:
                u.close()

    def start(self, profile="round-robin", extra="", pool_yaml=None, endpoints=None):
        self.gw = Gateway([{"name": "p", "models": ["m"], "profile": profile,
                            "endpoints": endpoints or [u.address for u in self.ups], "yaml": pool_yaml or []}],
                          extra=WORKERS + extra)
        return self.gw

    def test_both_workers_serve_and_the_metrics_say_so(self):
        gw = self.start()
        self.assertEqual(metric(gw, "switchboard_workers "), 2)

        def one():
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m"))[0], 200)
        n = until_both_workers_accepted(gw, one)
        self.assertEqual(len(self.ups[0].requests) + len(self.ups[1].requests), n)
        # The lock's figures: taken by every request, held for some time.
        self.assertGreaterEqual(metric(gw, "switchboard_lock_acquisitions_total"), n)
        self.assertGreater(metric(gw, 'switchboard_lock_held_seconds_total{by="workers"}'), 0)
        # Requests counted once, wherever they were served.
        self.assertEqual(metric(gw, "switchboard_requests_received_total"), n)

    def test_one_prefix_index_for_every_worker(self):
        """The same long prompt, on connections that land on both workers, goes to one endpoint:
        the prefix index is one fleet-wide view, not one per worker."""
        gw = self.start(profile="default")
        prompt = "You are a careful assistant. " * 200
        body = chat_body("m", prompt)

        def one():
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", body)[0], 200)
        until_both_workers_accepted(gw, one)
        for _ in range(6):
            one()
        counts = sorted(len(u.requests) for u in self.ups)
        self.assertEqual(counts[0], 0, "requests of one prompt split across endpoints: %s" % counts)

    def test_limits_hold_for_all_workers_together(self):
        """max_connections bounds the workers' connections together: the fifth of four gets 503
        whichever worker it lands on."""
        gw = self.start(extra="limits: { max_connections: 4 }\n")
        held = []
        try:
            for _ in range(4):
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                send_request(s, "GET", "/healthz")
                self.assertEqual(read_response(s)[0], 200)
                held.append(s)
            wait_until(lambda: metric(gw, 'switchboard_open_connections{listener="client"}') == 4, 10,
                       "four connections counted")
            for _ in range(6):  # whichever worker the kernel picks
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                st, h, _ = read_response(s)
                s.close()
                self.assertEqual((st, h["retry-after"]), (503, "1"))
        finally:
            for s in held:
                s.close()
        wait_until(lambda: metric(gw, 'switchboard_open_connections{listener="client"}') == 0, 10,
                   "the connections closed")
        self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m"))[0], 200)

    def test_queued_requests_released_across_workers(self):
        """Flow control's queue is one: requests from both workers wait in it while the replicas
        report a queue; when the reports clear, the main loop's tick releases them and each is
        sent from its own worker (a decision made on one thread, connected on another)."""
        for u in self.ups:
            u.metrics_text = SATURATED
        gw = self.start(profile="least-request", extra="flow_control:\n  max_wait_ms: { standard: 30000 }\n",
                        pool_yaml=["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"])
        wait_until(lambda: all(u.probes >= 2 for u in self.ups), 10, "the saturated reports")
        socks = []
        results = []

        def queue_one(i):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
            send_request(s, "POST", "/v1/chat/completions", chat_body("m", "q%d" % i), {"x-request-id": "q-%d" % i})
            socks.append(s)
        try:
            i = 0
            while i < 200:
                queue_one(i)
                i += 1
                per = metric_values(gw, "switchboard_worker_connections_accepted_total")
                if i >= 6 and len(per) == 2 and all(v > 0 for v in per.values()):
                    break
            wait_until(lambda: metric(gw, 'switchboard_queue_length{pool="p",band="standard"}') == i, 10,
                       "every request queued")
            self.assertEqual(len(self.ups[0].requests) + len(self.ups[1].requests), 0)
            for u in self.ups:
                u.metrics_text = IDLE
            for s in socks:
                st, _, body = read_response(s)
                results.append(st)
        finally:
            for s in socks:
                s.close()
        self.assertEqual(results, [200] * len(socks))
        self.assertEqual(len(self.ups[0].requests) + len(self.ups[1].requests), len(socks))

    def test_refusals_decided_elsewhere_reach_each_worker(self):
        """A queued request whose wait expires is refused by the main loop's tick: the 503 is
        written by the request's own worker."""
        for u in self.ups:
            u.metrics_text = SATURATED
        gw = self.start(extra="flow_control:\n  max_wait_ms: { standard: 300 }\n",
                        pool_yaml=["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"])
        wait_until(lambda: all(u.probes >= 2 for u in self.ups), 10, "the saturated reports")
        statuses = []

        def one():
            st, h, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m"), timeout=20)
            statuses.append((st, h.get("x-switchboard-refusal")))
        until_both_workers_accepted(gw, one, limit=60)
        self.assertTrue(statuses)
        self.assertEqual(set(statuses), {(503, "queue_timeout")})

    def test_reloads_reach_every_worker(self):
        gw = self.start(endpoints=[self.ups[0].address])
        stop = threading.Event()
        bad = []

        def load():
            while not stop.is_set():
                try:
                    st = http(gw.port, "POST", "/v1/chat/completions", chat_body("m"), timeout=10)[0]
                except OSError as e:
                    bad.append(repr(e))
                    continue
                if st != 200:
                    bad.append(st)
        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            with open(gw.config_path) as f:
                cfg = f.read()
            # In place: a timeout changes, the gateway stays.
            with open(gw.config_path, "w") as f:
                f.write(cfg.replace(WORKERS, WORKERS + "timeouts: { response_ms: 20000 }\n"))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: metric(gw, "switchboard_config_reloads_total") >= 1, 10, "the in-place reload")
            # Replacing: an endpoint added; the workers' requests reach the new gateway.
            with open(gw.config_path, "w") as f:
                f.write(cfg.replace(json.dumps([self.ups[0].address]),
                                    json.dumps([self.ups[0].address, self.ups[1].address])))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: len(self.ups[1].requests) >= 10, 15, "requests on the endpoint the reload added")
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(bad, [])

    def test_drain_lets_every_worker_finish_its_streams(self):
        gw = self.start(extra="shutdown: { drain_ms: 10000 }\n")
        socks = []
        for i in range(12):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            send_request(s, "POST", "/v1/chat/completions", chat_body("m", stream=True),
                         {"x-fixture-mode": "sse", "x-fixture-events": "5", "x-fixture-delay-ms": "100"})
            socks.append(s)
        per = metric_values(gw, "switchboard_worker_connections_accepted_total")
        wait_until(lambda: len(self.ups[0].requests) + len(self.ups[1].requests) == 12, 10, "the streams upstream")
        gw.proc.send_signal(signal.SIGTERM)
        for s in socks:
            out = read_until_eof(s)
            s.close()
            self.assertIn(b"data: [DONE]", out)
        self.assertEqual(gw.proc.wait(15), 0)
        out = gw.close()
        self.gw = None
        self.assertIn("drain: done", out)
        self.assertEqual(len(per), 2)

    def test_access_log_lines_stay_whole(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "sb-workers-%d.log" % os.getpid())
        if os.path.exists(path):
            os.unlink(path)
        gw = self.start(extra='access_log: "%s"\n' % path)
        n_threads, per_thread = 6, 25

        def load(k):
            for i in range(per_thread):
                st = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "t%d-%d" % (k, i)),
                          {"x-request-id": "w-%d-%d" % (k, i)})[0]
                self.assertEqual(st, 200)
        threads = [threading.Thread(target=load, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gw.close()
        self.gw = None
        with open(path, "rb") as f:
            lines = f.read().splitlines()
        os.unlink(path)
        ids = sorted(json.loads(l)["request_id"] for l in lines)
        self.assertEqual(ids, sorted("w-%d-%d" % (k, i) for k in range(n_threads) for i in range(per_thread)))

    def test_a_second_gateway_on_the_same_address_is_refused(self):
        """SO_REUSEPORT would let it share the port and split the clients; the workers bind the
        address plainly first, so the second fails as a single listener would."""
        gw = self.start()
        with open(gw.config_path) as f:
            cfg = f.read()
        other = os.path.join(gw.dir, "second.yaml")
        with open(other, "w") as f:
            f.write(cfg.replace("127.0.0.1:%d" % gw.admin_port, "127.0.0.1:%d" % free_port()))
        p = subprocess.run([gw.proc.args[0], "serve", "-c", other], capture_output=True, text=True, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("address already in use", p.stdout + p.stderr)
        self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m"))[0], 200)

    def test_stop_with_a_retired_gateway_still_sending(self):
        """A replacing reload leaves the old gateway finishing a request whose body the endpoint
        never reads; a stop then frees both gateways' per-worker pools and exits at once (the
        worker set lives while any gateway holds it)."""
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # never accepted: the kernel takes the connection, nobody reads
        try:
            addr = "127.0.0.1:%d" % silent.getsockname()[1]
            gw = self.start(endpoints=[addr])
            big = json.dumps(chat_body("m", "x" * (8 << 20))).encode()
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: %d\r\n\r\n" % len(big)).encode()
            threading.Thread(target=lambda: s.sendall(head + big), daemon=True).start()
            wait_until(lambda: metric(gw, "switchboard_in_flight_requests") == 1, 20, "the request sent upstream")
            with open(gw.config_path) as f:
                cfg = f.read()
            with open(gw.config_path, "w") as f:
                f.write(cfg.replace(json.dumps([addr]), json.dumps([addr, self.ups[0].address])))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: metric(gw, "switchboard_config_reloads_total") >= 1, 10, "the replacing reload")
            t0 = time.time()
            out = gw.close()  # SIGINT; fails on a sanitizer report
            self.gw = None
            self.assertLess(time.time() - t0, 5, "the stop waited for the retired gateway's pools")
            self.assertNotIn("stay open", out)
            s.close()
        finally:
            silent.close()


if __name__ == "__main__":
    unittest.main()
