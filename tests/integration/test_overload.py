"""Flow control and the adaptive loop through the live gateway, in front of simulated replicas.

Flow control: once every replica reports a queue over the threshold, requests wait in the
gateway by priority band; sheddable ones are refused with 429, Retry-After and a reason; a
client that leaves while queued is removed without reaching a replica; with no healthy
endpoint at all the answer is 503 at once.
Adaptive: a profile that over-weights prefix affinity herds a hot prefix onto one replica; with
`adaptive: true` the imbalance detector enters its regime, weight moves to the distribution
scorers (visible in /debug/adaptive), and the load evens out compared with the same profile
without the loop."""
import json
import signal
import socket
import threading
import unittest

from fixtures import Gateway, Upstream, http, send_request, wait_until
from test_prefix import system_prompt
from test_sim import MODEL, Sim


def endpoints(gw):
    return json.loads(http(gw.admin_port, "GET", "/debug/endpoints")[2])["pools"][0]["endpoints"]


def metric(gw, name_prefix):
    text = http(gw.admin_port, "GET", "/metrics")[2].decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name_prefix))


def chat(text, max_tokens):
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]}


class FlowControlTest(unittest.TestCase):
    def setUp(self):
        self.sim = Sim("--speed", "1", "--max-num-seqs", "1", replicas=2)
        self.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "least-request",
                            "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports],
                            "yaml": ["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"]}],
                          extra="flow_control:\n  max_queued: { critical: 1 }\n  api_keys: { sk-batch: sheddable }")
        self.results = []
        self.threads = []

    def tearDown(self):
        for t in self.threads:
            t.join()
        try:
            self.gw.close()
        finally:
            self.sim.stop()

    def background(self, text, headers=None, max_tokens=300):
        def run():
            st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat(text, max_tokens), headers, timeout=60)
            self.results.append((text, st))
        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def test_saturated_pool_queues_sheds_and_removes(self):
        # 16 long requests: one running per replica, a queue in each engine up to the gate's
        # threshold (1 waiting: flow_control.queue_threshold's default), the rest held here.
        for i in range(16):
            self.background("load %d" % i)
        wait_until(lambda: all(e["report"]["waiting"] and e["report"]["waiting"] > 1 for e in endpoints(self.gw)),
                   20, "both replicas to report a queue over the gate's threshold")
        # Sheddable: refused at once, with the reason and a Retry-After.
        st, h, body = http(self.gw.port, "POST", "/v1/chat/completions", chat("shed me", 4),
                           {"x-priority": "sheddable", "x-request-id": "shed-1"})
        self.assertEqual(st, 429)
        self.assertEqual(h["x-request-id"], "shed-1", "the gateway's refusals carry the request's id")
        self.assertEqual(h["x-switchboard-refusal"], "shed")
        self.assertGreaterEqual(int(h["retry-after"]), 1)
        self.assertEqual(json.loads(body)["error"]["code"], "shed")
        # The same for a request whose API key the config puts in the sheddable band.
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("batch job", 4),
                        {"Authorization": "Bearer sk-batch"})
        self.assertEqual((st, h["x-switchboard-refusal"]), (429, "shed"))
        # A standard request now waits in the gateway; its client leaves: removed, never sent.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat("leave while queued", 4))
        wait_until(lambda: metric(self.gw, 'switchboard_queue_length{pool="p",band="standard"}') == 1, 10,
                   "the request to be queued")
        s.close()
        wait_until(lambda: metric(self.gw, 'switchboard_queue_removed_total{pool="p",band="standard"}') == 1, 10,
                   "the queued request to be removed")
        # A critical request waits too (ahead of standard ones); the critical band holds one
        # (config), so a second is refused as queue_full. The gate reopens for a moment each
        # time a replica finishes a request (its report shows the queue below the threshold
        # until the next held request reaches it): a critical request that arrives then is
        # dispatched at once, which is right, and the test sends another.
        def dispatched():
            return sum(e["own"]["dispatched"] for e in endpoints(self.gw))

        def released():
            return metric(self.gw, 'switchboard_queue_dispatched_total{pool="p",band="standard"}')

        criticals = 0
        for attempt in range(5):
            r0 = released()  # before d0, as released() after dispatched() below: a release
            d0 = dispatched()  # between two reads is never taken for a direct send
            self.background("critical %d" % attempt, {"x-priority": "critical"}, max_tokens=4)
            criticals += 1
            queued = lambda: metric(self.gw, 'switchboard_queue_length{pool="p",band="critical"}') == 1
            # Sent without queueing: more dispatches than the standard queue released.
            direct = lambda: dispatched() - d0 > released() - r0
            wait_until(lambda: queued() or direct(), 10, "the critical request to be queued or sent")
            if queued():
                break
        self.assertTrue(queued(), "a critical request queued in 5 tries")
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("second critical", 4),
                        {"x-priority": "critical"})
        self.assertEqual((st, h["x-switchboard-refusal"]), (429, "queue_full"))
        self.assertIn("retry-after", h)
        for t in self.threads:
            t.join()
        self.assertEqual({st for _, st in self.results}, {200}, "queued requests all served")
        self.assertEqual(metric(self.gw, 'switchboard_queue_dispatched_total{pool="p",band="critical"}'), 1)
        # 16 background requests and the critical ones reached the replicas; the one whose
        # client left while queued never did.
        self.assertEqual(dispatched(), 16 + criticals)


class NoHealthyEndpointTest(unittest.TestCase):
    def test_503_at_once_when_every_endpoint_is_draining(self):
        sim = Sim("--speed", "10", replicas=1)
        try:
            gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                           "endpoints": [{"address": "127.0.0.1:%d" % sim.port, "draining": True}]}])
            try:
                st, h, body = http(gw.port, "POST", "/v1/chat/completions", chat("x", 2))
                self.assertEqual(st, 503)
                self.assertEqual(h["x-switchboard-refusal"], "no_healthy_endpoint")
                self.assertIn("retry-after", h)
            finally:
                gw.close()
        finally:
            sim.stop()


STICKY = ("profiles:\n  sticky:\n    filters: [healthy]\n"
          "    scorers: { prefix: 10, queue: 1, in-flight: 1 }\n    picker: max-score\n")


def hot_prefix_run(adaptive):
    sim = Sim("--speed", "2", "--max-num-seqs", "4", replicas=4)
    try:
        gw = Gateway([{"name": "p", "models": [MODEL], "profile": "sticky",
                       "endpoints": ["127.0.0.1:%d" % p for p in sim.ports],
                       "yaml": ["adaptive: %s" % ("true" if adaptive else "false"),
                                "probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"]}],
                     extra=STICKY)
        try:
            hot = system_prompt(7, 1000)
            errors = []
            # One request first: the prefix is computed on one replica before the crowd comes
            # (a prefix still being prefilled does not attract requests, so a simultaneous
            # start would spread by itself).
            st, _, _ = http(gw.port, "POST", "/v1/chat/completions", {"model": MODEL, "max_tokens": 4, "messages": [
                {"role": "system", "content": hot}, {"role": "user", "content": "warm"}]}, timeout=60)
            assert st == 200, st

            def client(k):
                for i in range(10):
                    body = {"model": MODEL, "max_tokens": 40, "messages": [
                        {"role": "system", "content": hot}, {"role": "user", "content": "c%d q%d" % (k, i)}]}
                    st, _, _ = http(gw.port, "POST", "/v1/chat/completions", body, timeout=120)
                    if st != 200:
                        errors.append(st)

            threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            counts = [e["own"]["dispatched"] for e in endpoints(gw)]
            state = json.loads(http(gw.admin_port, "GET", "/debug/adaptive")[2])["pools"][0]
            return counts, state
        finally:
            gw.close()
    finally:
        sim.stop()


class AdaptiveTest(unittest.TestCase):
    def test_hot_prefix_triggers_regime_change_and_evens_load(self):
        static_counts, _ = hot_prefix_run(False)
        counts, state = hot_prefix_run(True)
        print("\nhot prefix, sticky profile: static %s, adaptive %s" % (static_counts, counts))
        self.assertEqual(sum(counts), 161)
        self.assertTrue(state["adaptive"])
        changes = state["state"]["changes"]
        self.assertTrue(any(c["detector"] == "imbalance" and c["event"] == "entered" for c in changes), changes)
        # The load evens out: the busiest replica's share falls against the static profile.
        self.assertLess(max(counts), max(static_counts))


class FlowReloadTest(unittest.TestCase):
    def test_reload_applies_flow_control_in_place(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [up.address]}],
                     extra="flow_control:\n  max_queued: { standard: 5 }\n  max_bytes: { standard: 1MiB }\n")

        def log():
            with open(gw.log_path) as f:
                return f.read()

        def reload(old, new, n):
            with open(gw.config_path) as f:
                text = f.read()
            self.assertIn(old, text)
            with open(gw.config_path, "w") as f:
                f.write(text.replace(old, new))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "configuration reloaded (%d)" % n in log(), 10, "reload %d" % n)
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat("after %d" % n, 2))[0], 200)

        try:
            def has_queues():
                return 'switchboard_queue_length{pool="p"' in http(gw.admin_port, "GET", "/metrics")[2].decode()

            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat("a", 2))[0], 200)
            self.assertTrue(has_queues())
            reload("standard: 5", "standard: 0", 1)          # new bounds, in place
            self.assertTrue(has_queues())
            reload("flow_control:\n", "flow_control:\n  enabled: false\n", 2)   # off: no queues
            self.assertFalse(has_queues())
            reload("enabled: false", "enabled: true", 3)     # on again
            self.assertTrue(has_queues())
            # In place: no new gateway took over the listener.
            self.assertNotIn("carried over", log())
        finally:
            gw.close()
            up.close()


if __name__ == "__main__":
    unittest.main()
