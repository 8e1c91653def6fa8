"""Endpoint state and scheduling through the live gateway, in front of simulated replicas
(`switchboard sim`) and scriptable upstreams: pools by model, LoRA placement, moving away
from a slow replica, ORCA before the next scrape, ejection and readmission, SIGHUP reload,
and the admin endpoints (/metrics through promtool, /debug/endpoints, /debug/decisions)."""
import json
import shutil
import signal
import subprocess
import threading
import unittest

from fixtures import Gateway, Upstream, chat_body, free_port, http, wait_until
from test_sim import MODEL, Sim

PROMTOOL = shutil.which("promtool")


def endpoints(gw):
    st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
    assert st == 200, st
    return {e["address"]: e for p in json.loads(body)["pools"] for e in p["endpoints"]}


def chat(model, text="hi", max_tokens=2, stream=False):
    return {"model": model, "max_tokens": max_tokens, "stream": stream,
            "messages": [{"role": "user", "content": text}]}


class PoolsAndLoraTest(unittest.TestCase):
    def setUp(self):
        self.a = Sim("--adapters", "lora-a,lora-b", "--max-loras", "1", "--speed", "1", replicas=2)
        self.b = Sim("--speed", "50", replicas=1)
        addr = lambda p: "127.0.0.1:%d" % p
        self.gw = Gateway([
            {"name": "pa", "models": [MODEL], "adapters": ["lora-a", "lora-b"], "profile": "default",
             "endpoints": [addr(p) for p in self.a.ports]},
            {"name": "pb", "models": ["other-model"], "profile": "default", "endpoints": [addr(self.b.port)]},
        ], extra="access_log: \"-\"")

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.a.stop()
            self.b.stop()

    def test_requests_never_cross_pools(self):
        for i in range(6):
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat(MODEL, "x%d" % i))
            self.assertEqual(st, 200)
        eps = endpoints(self.gw)
        b_addr = "127.0.0.1:%d" % self.b.port
        self.assertEqual(eps[b_addr]["own"]["dispatched"], 0)
        a_total = sum(eps["127.0.0.1:%d" % p]["own"]["dispatched"] for p in self.a.ports)
        self.assertEqual(a_total, 6)
        # The other pool's model is unknown to the simulated replicas of pool a: a request for
        # it reaching them would be a 404 from vLLM; through the gateway it is 200 from pool b.
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat("other-model"))
        self.assertEqual(st, 404, "pool b's replicas serve sim/model-a under another name")
        self.assertEqual(endpoints(self.gw)[b_addr]["own"]["dispatched"], 1)

    def test_adapter_request_lands_where_loaded(self):
        # Hold lora-a on one replica and lora-b on the other (max_loras 1: neither has room
        # for the other adapter), with long streams.
        holders = []

        def hold(model):
            s = __import__("socket").create_connection(("127.0.0.1", self.gw.port), timeout=30)
            body = json.dumps(chat(model, "hold " + model, max_tokens=4000, stream=True)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            s.recv(4096)  # the response has started
            holders.append(s)

        hold("lora-a")
        hold("lora-b")
        # Wait until both replicas' scrapes show their running adapter.
        pool_a = ["127.0.0.1:%d" % p for p in self.a.ports]
        wait_until(lambda: sorted(endpoints(self.gw)[a]["report"]["lora_running_mask"] for a in pool_a) == [1, 2],
                   20, "adapters reported running")
        eps = endpoints(self.gw)
        a_holder = [addr for addr in pool_a if eps[addr]["report"]["lora_running_mask"] == 1][0]
        before = eps[a_holder]["own"]["dispatched"]
        for i in range(5):
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("lora-a", "q%d" % i, max_tokens=1))
            self.assertEqual(st, 200)
        self.assertEqual(endpoints(self.gw)[a_holder]["own"]["dispatched"] - before, 5,
                         "every lora-a request went to the replica that has lora-a loaded")
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions")
        d = [x for x in json.loads(body)["decisions"] if x["pool"] == "pa"][0]
        self.assertIn("lora", [c.get("removed_by") for c in d["candidates"]])
        for s in holders:
            s.close()


class SlowReplicaTest(unittest.TestCase):
    def test_traffic_moves_away_from_a_slow_replica(self):
        fast = Sim("--speed", "1", "--step-overhead-ms", "2", replicas=2)
        slow = Sim("--speed", "1", "--step-overhead-ms", "60", replicas=1)
        try:
            addrs = ["127.0.0.1:%d" % p for p in fast.ports + slow.ports]
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default", "endpoints": addrs}],
                         extra="")
            try:
                errors = []

                def client(k):
                    for i in range(12):
                        try:
                            st, _, _ = http(gw.port, "POST", "/v1/chat/completions",
                                            chat(MODEL, "c%d-%d" % (k, i), max_tokens=8))
                            if st != 200:
                                errors.append(st)
                        except Exception as e:  # noqa: BLE001 - reported below
                            errors.append(repr(e))

                threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                self.assertEqual(errors, [])
                eps = endpoints(gw)
                counts = [eps[a]["own"]["dispatched"] for a in addrs]
                self.assertEqual(sum(counts), 72)
                # Fair share is 24; the slow replica (30x the step overhead) must get far less.
                self.assertLess(counts[2], 24 * 0.6, counts)
            finally:
                gw.close()
        finally:
            fast.stop()
            slow.stop()


class OrcaAndHealthTest(unittest.TestCase):
    def test_orca_header_updates_state_before_next_scrape(self):
        sim = Sim("--speed", "10", replicas=1)
        try:
            # One scrape at start, then none for a minute: only ORCA can refresh the state.
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                           "endpoints": ["127.0.0.1:%d" % sim.port],
                           "yaml": ["probe: { interval_ms: 60000, min_interval_ms: 60000, "
                                    "max_interval_ms: 60000, stale_ms: 120000 }"]}])
            try:
                wait_until(lambda: endpoints(gw)["127.0.0.1:%d" % sim.port]["probe"]["scrapes"] >= 1, 10,
                           "first scrape")
                self.assertEqual(endpoints(gw)["127.0.0.1:%d" % sim.port]["report"]["source"], "scrape")
                st, h, _ = http(gw.port, "POST", "/v1/chat/completions", chat(MODEL))
                self.assertEqual(st, 200)
                self.assertNotIn("endpoint-load-metrics", h, "the gateway asked; the client did not")
                e = endpoints(gw)["127.0.0.1:%d" % sim.port]
                self.assertEqual(e["report"]["source"], "orca")
                self.assertEqual(e["probe"]["scrapes"], 1)
                # A client that asks for the header itself still gets it.
                st, h, _ = http(gw.port, "POST", "/v1/chat/completions", chat(MODEL),
                                {"endpoint-load-metrics-format": "JSON"})
                self.assertTrue(h.get("endpoint-load-metrics", "").startswith("JSON"))
            finally:
                gw.close()
        finally:
            sim.stop()

    def test_refusing_replica_ejected_then_readmitted(self):
        good = Upstream("good")
        bad_port = free_port()
        bad = Upstream("bad", port=bad_port)
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "least-request",
                       "endpoints": [good.address, "127.0.0.1:%d" % bad_port],
                       "yaml": ["health: { max_failures: 2, base_eject_ms: 300, max_eject_ms: 300 }",
                                "probe: { health_interval_ms: 0 }"]}])
        try:
            bad.close()  # now it refuses connections
            # least-request breaks ties at random: 20 requests make two picks of the dead
            # endpoint all but certain (a miss has probability 21 / 2^20).
            for i in range(20):
                st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "r%d" % i))
                self.assertEqual(st, 200, "retried on the good endpoint")
            e = endpoints(gw)["127.0.0.1:%d" % bad_port]
            self.assertEqual(e["health"], "ejected")
            self.assertGreaterEqual(e["own"]["failed"], 2)
            # While ejected, nothing is sent there: no more failures accumulate.
            failed = e["own"]["failed"]
            for i in range(4):
                http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "s%d" % i))
            self.assertEqual(endpoints(gw)["127.0.0.1:%d" % bad_port]["own"]["failed"], failed)
            # It comes back: after the backoff, one trial request readmits it.
            bad = Upstream("bad", port=bad_port)

            def readmitted():
                http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "t"))
                return endpoints(gw)["127.0.0.1:%d" % bad_port]["health"] == "healthy" and len(bad.requests) > 0
            wait_until(readmitted, 10, "readmission")
        finally:
            gw.close()
            good.close()
            bad.close()


class ReloadAndAdminTest(unittest.TestCase):
    def setUp(self):
        self.up1 = Upstream("u1")
        self.up2 = Upstream("u2")
        self.gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin",
                            "endpoints": [self.up1.address, self.up2.address]}])

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up1.close()
            self.up2.close()

    def test_sighup_reload_changes_profile_without_dropping_requests(self):
        results = []
        stop = threading.Event()

        def client():
            while not stop.is_set():
                st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                                {"x-fixture-mode": "sse", "x-fixture-events": "3", "x-fixture-delay-ms": "5"})
                results.append(st)

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: len(results) >= 10, 20, "traffic")
        with open(self.gw.config_path) as f:
            text = f.read()
        text = text.replace("profile: round-robin", "profile: fast\n") + (
            "profiles:\n  fast:\n    filters: [healthy]\n    scorers: { in-flight: 3, queue: 1 }\n"
            "    picker: p2c\n")
        # The profiles map must come before or after pools; YAML order does not matter.
        with open(self.gw.config_path, "w") as f:
            f.write(text)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: json.loads(http(self.gw.admin_port, "GET", "/debug/endpoints")[2])["pools"][0]["profile"]
                   == "fast", 10, "reload")
        n = len(results)
        wait_until(lambda: len(results) >= n + 10, 20, "traffic after reload")
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(set(results), {200}, "no request dropped across the reload")
        st, _, body = http(self.gw.admin_port, "GET", "/metrics")
        self.assertIn("switchboard_config_reloads_total 1", body.decode())
        # A broken file is refused; the running config stays.
        with open(self.gw.config_path, "w") as f:
            f.write("pools: [oops\n")
        self.gw.proc.send_signal(signal.SIGHUP)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))
        self.assertEqual(st, 200)

    def test_metrics_pass_promtool_and_count_requests(self):
        for i in range(4):
            http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m", "x%d" % i))
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("nope"))
        st, h, body = http(self.gw.admin_port, "GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertTrue(h["content-type"].startswith("text/plain"))
        text = body.decode()
        total = sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                    if l.startswith("switchboard_requests_total{") and 'code="2xx"' in l)
        self.assertEqual(total, 4)
        self.assertIn('switchboard_rejected_total{code="4xx",reason="model_not_found"} 1', text)
        self.assertIn('switchboard_endpoint_healthy{pool="p",endpoint="%s"} 1' % self.up1.address, text)
        if PROMTOOL:
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_decision_explained(self):
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions")
        d = json.loads(body)["decisions"][0]
        self.assertEqual(d["profile"], "round-robin")
        self.assertEqual(d["pool"], "p")
        self.assertEqual(len(d["candidates"]), 2)
        self.assertIn(d["picked"], (self.up1.address, self.up2.address))
        self.assertEqual([c["endpoint"] for c in d["candidates"]], [self.up1.address, self.up2.address])


if __name__ == "__main__":
    unittest.main()


class StructuralReloadTest(unittest.TestCase):
    def test_reload_adds_and_removes_endpoints_keeping_state(self):
        up1, up2, up3 = Upstream("u1"), Upstream("u2"), Upstream("u3")
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin",
                       "endpoints": [up1.address, up2.address]}])
        try:
            for i in range(4):
                self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "a%d" % i))[0], 200)
            # A stream in flight across the reload, on the old configuration.
            s = __import__("socket").create_connection(("127.0.0.1", gw.port), timeout=30)
            body = json.dumps(chat_body("m", "across", stream=True)).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                      b"x-fixture-mode: sse\r\nx-fixture-lockstep: 1\r\nx-fixture-events: 2\r\n\r\n%s"
                      % (len(body), body))
            wait_until(lambda: any(json.loads(r[3])["messages"][1]["content"] == "across"
                                   for u in (up1, up2) for r in u.requests), 10, "the stream upstream")
            before = endpoints(gw)[up1.address]["own"]["dispatched"]
            with open(gw.config_path) as f:
                text = f.read()
            with open(gw.config_path, "w") as f:
                f.write(text.replace(json.dumps([up1.address, up2.address]), json.dumps([up1.address, up3.address])))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: set(endpoints(gw)) == {up1.address, up3.address}, 10, "the new endpoint set")
            # The endpoint that stayed kept its state; the new one starts fresh.
            self.assertEqual(endpoints(gw)[up1.address]["own"]["dispatched"], before)
            # The stream started before the reload finishes on the old configuration.
            for u in (up1, up2):
                u.gate.release()
                u.gate.release()
            got = b""
            while not got.endswith(b"0\r\n\r\n"):
                chunk = s.recv(65536)
                self.assertTrue(chunk, "the stream across the reload was cut")
                got += chunk
            self.assertIn(b"[DONE]", got)
            s.close()
            for i in range(6):
                self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "b%d" % i))[0], 200)
            self.assertEqual(len([r for r in up3.requests]), 3, "round robin over the new set")
            self.assertFalse(any(json.loads(r[3])["messages"][1]["content"].startswith("b") for r in up2.requests))
            st, _, body = http(gw.admin_port, "GET", "/metrics")
            self.assertIn("switchboard_config_reloads_total 1", body.decode())
        finally:
            gw.close()
            for u in (up1, up2, up3):
                u.close()
