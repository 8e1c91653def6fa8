"""Cache truth, live: a gateway pool with `kv_events:` in front of simulated replicas that
publish vLLM's KV events and answer /tokenize. The precise index fills from the events, the
gateway learns each request's token ids from the engines (cached), and routes by what the
engines report: a second gateway replica, which never routed a request, sends a prompt that
shares a prefix with one the first gateway routed to the replica that holds it, and says so
("reported") in its decision."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from fixtures import GATEWAY_BIN, Gateway, free_run, http, wait_until
from test_sim import MODEL, Sim

try:
    import zmq  # noqa: F401 (the simulator's publisher needs nothing from Python; the check
    #                 keeps this file's requirements with the other event tests')
except ImportError:
    zmq = None


class PublishingSim:
    """`switchboard sim` with replicas on consecutive ports from `port` and publishers on
    consecutive ports from `kv_port` (replica i: port + i, kv_port + i)."""

    def __init__(self, replicas, port, kv_port):
        self.dir = tempfile.mkdtemp(prefix="sb-precise-")
        self.log_path = os.path.join(self.dir, "sim.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        args = [GATEWAY_BIN, "sim", "--replicas", str(replicas), "--port", str(port), "--model", MODEL,
                "--speed", "20", "--kv-events-endpoint", "tcp://*:%d" % kv_port]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("switchboard sim:"):
            self.proc.wait(5)
            raise AssertionError("sim did not start: %r\n%s" % (first, open(self.log_path).read()))
        self.ports = []
        for _ in range(replicas):
            self.ports.append(int(re.search(r"http://[^:]+:(\d+)", self.proc.stdout.readline()).group(1)))
            assert self.proc.stdout.readline().split()[0] == "kv-events"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()
        self.log.close()
        out = open(self.log_path).read()
        shutil.rmtree(self.dir, ignore_errors=True)
        for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
            if bad in out:
                raise AssertionError("sanitizer report:\n" + out)


def chat(system, question):
    return {"model": MODEL, "max_tokens": 2,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


class TwoGateways(unittest.TestCase):
    """Two gateway replicas of one pool in front of self.sim (set by setUp first)."""

    def start_two(self, pool, **kw):
        self.gws = []
        try:
            self.gws = [Gateway([pool], **kw), Gateway([pool], **kw)]
        except Exception:
            self.sim.stop()
            raise

    def tearDown(self):
        for g in self.gws:
            g.close()
        self.sim.stop()


@unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
class PreciseRoutingTest(TwoGateways):
    def setUp(self):
        port, kv_port = free_run(4), free_run(4)
        self.sim = PublishingSim(4, port, kv_port)
        pool = {"name": "p", "models": [MODEL], "profile": "prefix-only",
                "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports],
                "yaml": ['kv_events: { endpoint: "tcp://{host}:{port%+d}" }' % (kv_port - port)]}
        self.start_two(pool, extra="tokenize: { wait_ms: 2000 }")

    def endpoints(self, gw):
        st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
        self.assertEqual(st, 200)
        return json.loads(body)["pools"][0]["endpoints"]

    def last_decision(self, gw):
        st, _, body = http(gw.admin_port, "GET", "/debug/decisions")
        return [d for d in json.loads(body)["decisions"] if d["pool"] == "p"][0]

    def wait_subscribed(self):
        """ZMQ drops what a publisher sends before a subscription is up: prompt each replica
        directly (as traffic that bypasses the gateways) until both gateways hear all four."""
        sent = [0] * len(self.sim.ports)

        def heard():
            ok = True
            for i, port in enumerate(self.sim.ports):
                if all(self.endpoints(g)[i]["kv_events"]["batches"] > 0 for g in self.gws):
                    continue
                ok = False
                sent[i] += 1
                warm = chat("Warm-up %d of replica %d, long enough for whole blocks. " % (sent[i], i) * 4, "hi")
                http(port, "POST", "/v1/chat/completions", json.dumps(warm).encode())
            return ok
        wait_until(heard, 20, "both gateways to hear every replica")

    def test_second_gateway_routes_by_reports(self):
        a, b = self.gws
        self.wait_subscribed()
        system = "You are a careful assistant for the billing team. " * 24  # ~20 blocks
        st, _, _ = http(a.port, "POST", "/v1/chat/completions", json.dumps(chat(system, "first?")).encode())
        self.assertEqual(st, 200)
        holder = self.last_decision(a)["picked_index"]
        # The holder's engine reported the prompt's blocks; gateway b heard it too.
        wait_until(lambda: self.endpoints(b)[holder]["kv_index"]["blocks"] >= 16, 10, "b's index to fill")
        for i in range(3):
            st, _, _ = http(b.port, "POST", "/v1/chat/completions",
                            json.dumps(chat(system, "question %d?" % i)).encode())
            self.assertEqual(st, 200)
            d = self.last_decision(b)
            self.assertEqual(d["picked_index"], holder, "b sends the shared prefix where the engine holds it")
            c = d["candidates"][holder]
            self.assertGreaterEqual(c["prefix"]["blocks"], 16)
            # b's first request knows the prefix from the engine's reports alone; later ones
            # also match b's own marks (whichever is longer names itself).
            if i == 0:
                self.assertEqual(c["prefix"]["source"], "reported")
        st, _, text = http(b.admin_port, "GET", "/metrics")
        text = text.decode()
        self.assertRegex(text, r"switchboard_tokenize_requests_total [1-9]")
        self.assertRegex(text, r"switchboard_tokenize_failures_total 0\b")
        self.assertRegex(text, r"switchboard_kv_index_blocks\{pool=\"p\",endpoint=\"[^\"]+\"\} [1-9]")


@unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
class DefaultWithEventsTest(unittest.TestCase):
    """A pool that names no profile routes with `default`; with kv_events, the built-in
    `default` becomes `default-events` (its prefix weight suits the precise index), and the
    decision record names the one that decided (a user's profile cannot be named `default`)."""

    def setUp(self):
        port, kv_port = free_run(2), free_run(2)
        self.sim = PublishingSim(2, port, kv_port)
        self.port, self.kv_port = port, kv_port
        self.gw = None

    def tearDown(self):
        if self.gw:
            self.gw.close()
        self.sim.stop()

    def profiles_used(self):
        eps = ["127.0.0.1:%d" % p for p in self.sim.ports]
        events = ['kv_events: { endpoint: "tcp://{host}:{port%+d}" }' % (self.kv_port - self.port)]
        self.gw = Gateway([{"name": "ev", "models": [MODEL], "profile": None, "endpoints": eps, "yaml": events},
                           {"name": "plain", "models": [MODEL + "-b"], "profile": None, "endpoints": eps},
                           {"name": "named", "models": [MODEL + "-c"], "profile": "default", "endpoints": eps,
                            "yaml": events}])
        used = {}
        for model, pool in ((MODEL, "ev"), (MODEL + "-b", "plain"), (MODEL + "-c", "named")):
            body = chat("A system prompt long enough for a few whole blocks. " * 8, "hi")
            body["model"] = model
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", json.dumps(body).encode())
            self.assertIn(st, (200, 404))  # the sim serves one model name; routing happened either way
            st, _, raw = http(self.gw.admin_port, "GET", "/debug/decisions")
            self.assertEqual(st, 200)
            used[pool] = [d for d in json.loads(raw)["decisions"] if d["pool"] == pool][0]["profile"]
        return used

    def test_default_with_events_is_default_events(self):
        self.assertEqual(self.profiles_used(), {"ev": "default-events", "plain": "default",
                                                "named": "default-events"})


class HotPrefixTest(unittest.TestCase):
    """`default-events` spreads a prefix every request shares (profile hot_prefix,
    core/hot_prefix.h): once the pool has seen 4 requests an endpoint, the decision names the
    hot run and the holders its demand needs (every request shares it: both endpoints). A pool
    without events (`default`) counts too (the simulator serves only the first pool's model, so
    the second's requests are 404s the engines never count: its share stays whole;
    HotPrefixShareTest measures the share)."""

    def setUp(self):
        port, kv_port = free_run(2), free_run(2)
        self.sim = PublishingSim(2, port, kv_port)
        eps = ["127.0.0.1:%d" % p for p in self.sim.ports]
        events = ['kv_events: { endpoint: "tcp://{host}:{port%+d}" }' % (kv_port - port)]
        self.gw = Gateway([{"name": "ev", "models": [MODEL], "profile": None, "endpoints": eps, "yaml": events},
                           {"name": "plain", "models": [MODEL + "-b"], "profile": None, "endpoints": eps}])

    def tearDown(self):
        self.gw.close()
        self.sim.stop()

    def last_decision(self, model, i):
        body = chat("You are a careful assistant who answers in one short paragraph. " * 6, "question %d" % i)
        body["model"] = model
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", json.dumps(body).encode())
        self.assertIn(st, (200, 404))
        st, _, raw = http(self.gw.admin_port, "GET", "/debug/decisions")
        self.assertEqual(st, 200)
        pool = "ev" if model == MODEL else "plain"
        return [d for d in json.loads(raw)["decisions"] if d["pool"] == pool][0]

    def test_shared_system_prompt_is_hot_with_events(self):
        for i in range(12):
            d = self.last_decision(MODEL, i)
            self.assertEqual(d["profile"], "default-events")
            if i < 7 or i >= 9:  # hot once the pool saw 4 requests an endpoint (decayed: the 9th)
                self.assertEqual("hot_prefix" in d, i >= 9, d)
        self.assertGreaterEqual(d["hot_prefix"]["blocks"], 4)
        self.assertAlmostEqual(d["hot_prefix"]["needed"], 2.0, places=2)
        for i in range(12):
            d = self.last_decision(MODEL + "-b", i)
            self.assertEqual(d["profile"], "default")
            if i < 7 or i >= 9:
                self.assertEqual("hot_prefix" in d, i >= 9, d)
        self.assertAlmostEqual(d["hot_prefix"]["needed"], 2.0, places=2)


class HotPrefixShareTest(TwoGateways):
    """Two gateway replicas in front of one fleet, `default` without events: each knows only the
    holders it made, so each plans holders for its share of what the engines serve (their
    request counters, scraped against its own answers): about half of the whole demand's 4."""

    def setUp(self):
        self.sim = Sim(replicas=4, port=free_run(4))
        pool = {"name": "p", "models": [MODEL], "profile": None,
                "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports]}
        self.start_two(pool)

    def hot(self, gw, i):
        body = chat("You are a careful assistant who answers in one short paragraph. " * 6, "question %d" % i)
        st, _, _ = http(gw.port, "POST", "/v1/chat/completions", json.dumps(body).encode())
        self.assertEqual(st, 200)
        st, _, raw = http(gw.admin_port, "GET", "/debug/decisions")
        return [d for d in json.loads(raw)["decisions"] if d["pool"] == "p"][0].get("hot_prefix")

    def test_each_gateway_plans_for_its_share(self):
        turns = iter(range(1000))
        seen = []

        def both_planned_for_a_share():
            i = next(turns)
            h = [self.hot(g, i) for g in self.gws]  # one request to each: half the traffic each
            seen.append(h)
            return all(x is not None and x["needed"] < 3.0 for x in h)

        # Alone, a gateway would plan 4 (every request shares the prompt: all 4 endpoints).
        wait_until(both_planned_for_a_share, 30, "both gateways to plan for half the demand")
        self.assertTrue(all(0.5 < x["needed"] < 3.0 for x in seen[-1]), seen[-1])


if __name__ == "__main__":
    unittest.main()
