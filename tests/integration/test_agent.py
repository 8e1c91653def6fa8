"""Agents beside model servers and the paddler profile, end to end: simulated llama.cpp
replicas (`switchboard sim --engine llamacpp`, one slot each), a `switchboard agent` beside
each reporting to a gateway whose pool lists them statically with `profile: paddler`.

- reports arrive and /debug/endpoints shows them (agent id, slots, age);
- a request goes to the replica with a free slot;
- all slots busy: the next request waits in flow control and is served when a slot frees;
- the buffer (30) full: 503; a request that waited past 10 s: 504;
- the report route refuses bad bodies, unknown addresses and missing tokens;
- an agent stopped with SIGTERM sends its last report and exits 0;
- without agents, a /slots scrape feeds the same slots.

Waits are for observable state (reports, counters), never for time; the one exception is the
504, which is the product's 10 s bound itself."""
import json
import os
import subprocess
import tempfile
import threading
import unittest

from fixtures import GATEWAY_BIN, Gateway, chat_body, http, wait_until
from test_sim import MODEL, Sim

TOKEN = "agent-test-token"
AUTH = {"Authorization": "Bearer " + TOKEN}


class Agent(Sim):
    """`switchboard agent` with the given flags; stop() (Sim's) checks it exits 0, cleanly."""

    def __init__(self, *flags):  # noqa: D107 - Sim's fields, the agent's banner
        self.dir = tempfile.mkdtemp(prefix="sb-agent-")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.proc = subprocess.Popen([GATEWAY_BIN, "agent"] + [str(f) for f in flags], stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("switchboard agent:"):
            self.proc.kill()
            raise AssertionError("agent did not start: %r\n%s" % (first, open(self.log_path).read()))


def start_sims(n):
    sim = Sim("--engine", "llamacpp", "--max-num-seqs", "1", "--speed", "1", replicas=n)
    return sim, sim.ports


def endpoints(gw):
    st, _, body = http(gw.admin_port, "GET", "/debug/endpoints", headers=AUTH)
    assert st == 200, body
    return {e["address"]: e for e in json.loads(body)["pools"][0]["endpoints"]}


def metric(gw, name, labels=""):
    st, _, body = http(gw.admin_port, "GET", "/metrics", headers=AUTH)
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + "{") and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def paddler_gateway(addresses, health=True):
    probe = "probe: { enabled: false%s }" % ("" if health else ", health_interval_ms: 0")
    return Gateway([{"name": "llama", "models": [MODEL], "profile": "paddler", "endpoints": addresses,
                     "yaml": [probe]}], admin="token: %s" % TOKEN)


def post_report(gw, body, headers=AUTH):
    return http(gw.admin_port, "POST", "/admin/agents/report", body=body, headers=headers)


class Background:
    """A request in a thread; result() waits for its (status, body)."""

    def __init__(self, port, body):
        self.out = None
        self.t = threading.Thread(target=self._run, args=(port, body), daemon=True)
        self.t.start()

    def _run(self, port, body):
        try:
            st, _, b = http(port, "POST", "/v1/chat/completions", body=body, timeout=30)
            self.out = (st, b)
        except Exception as e:  # noqa: BLE001 - reported by result()
            self.out = ("error", str(e))

    def done(self):
        return self.out is not None

    def result(self, timeout=30):
        self.t.join(timeout)
        assert self.out is not None, "request still running"
        return self.out


def long_request(tokens):
    return chat_body(MODEL, "hello", extra={"max_tokens": tokens, "ignore_eos": True})


class AgentPaddlerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sim, cls.ports = start_sims(2)
        cls.addrs = ["127.0.0.1:%d" % p for p in cls.ports]
        cls.gw = paddler_gateway(cls.addrs)
        # Pushes on every change (polled each 20 ms); the 1 s interval only sets the staleness
        # (3 intervals): a loaded machine must not let the slots go stale mid-test, or the gate
        # (which needs fresh slots) lets the third request through instead of buffering it.
        cls.agents = [Agent("--server", "http://" + a, "--gateway", "http://127.0.0.1:%d" % cls.gw.admin_port,
                            "--token", TOKEN, "--interval-ms", "1000", "--poll-ms", "20", "--id", "ag%d" % i)
                      for i, a in enumerate(cls.addrs)]

    @classmethod
    def tearDownClass(cls):
        for a in cls.agents:
            a.stop()
        cls.gw.close()
        cls.sim.stop()

    def wait_reported(self):
        wait_until(lambda: all("slots" in e and not e["slots"]["stale"] and e.get("agent")
                               for e in endpoints(self.gw).values()), 10, "agent reports")

    def test_1_reports_arrive(self):
        self.wait_reported()
        eps = endpoints(self.gw)
        for i, a in enumerate(self.addrs):
            e = eps[a]
            self.assertEqual(e["agent"]["id"], "ag%d" % i)
            self.assertEqual(e["slots"]["total"], 1)
            self.assertEqual(e["report"]["source"], "agent")
            self.assertGreater(e["agent"]["reports"], 0)
            self.assertGreaterEqual(e["agent"]["age_ms"], 0)
        self.assertGreater(metric(self.gw, "switchboard_agent_reports_total"), 0)

    def test_2_free_slot_wins_then_buffer(self):
        self.wait_reported()
        wait_until(lambda: all(e["slots"]["idle"] == 1 for e in endpoints(self.gw).values()), 10, "idle slots")
        before = {a: e["own"]["dispatched"] for a, e in endpoints(self.gw).items()}
        first = Background(self.gw.port, long_request(400))
        wait_until(lambda: sum(e["own"]["in_flight"] for e in endpoints(self.gw).values()) == 1, 10, "first")
        busy = [a for a, e in endpoints(self.gw).items() if e["own"]["in_flight"] == 1][0]
        # The second goes to the other replica: the one with a free slot.
        second = Background(self.gw.port, long_request(400))
        wait_until(lambda: sum(e["own"]["in_flight"] for e in endpoints(self.gw).values()) == 2, 10, "second")
        eps = endpoints(self.gw)
        self.assertEqual([e["own"]["in_flight"] for e in eps.values()], [1, 1], eps)
        # Every slot busy: the third waits in the buffer, not on a replica.
        queued_before = metric(self.gw, "switchboard_queue_dispatched_total")
        third = Background(self.gw.port, chat_body(MODEL, "hi", extra={"max_tokens": 5}))
        wait_until(lambda: metric(self.gw, "switchboard_queue_length") == 1, 10, "third queued")
        self.assertFalse(third.done())
        self.assertEqual(sum(e["own"]["in_flight"] for e in endpoints(self.gw).values()), 2)
        # A slot frees: the third is served.
        for r in (first, second, third):
            st, body = r.result()
            self.assertEqual(st, 200, body)
        self.assertEqual(metric(self.gw, "switchboard_queue_dispatched_total"), queued_before + 1)
        after = {a: e["own"]["dispatched"] for a, e in endpoints(self.gw).items()}
        self.assertEqual(sum(after.values()) - sum(before.values()), 3)
        self.assertTrue(all(after[a] > before[a] for a in self.addrs), (before, after, busy))


class PaddlerBufferTest(unittest.TestCase):
    """The buffer's bounds, with the test itself as the agent (the report contract)."""

    def setUp(self):
        self.addr = "127.0.0.1:1"  # never connected to: every slot is reported busy
        self.gw = paddler_gateway([self.addr], health=False)
        self.stop = threading.Event()
        self.reporter = threading.Thread(target=self._report_busy, daemon=True)
        self.reporter.start()
        wait_until(lambda: endpoints(self.gw)[self.addr].get("slots", {}).get("stale") is False, 10, "report")

    def _report_busy(self):
        seq = 0
        while not self.stop.is_set():
            seq += 1
            st, _, b = post_report(self.gw, {"agent": "test", "address": self.addr, "engine": "llama.cpp",
                                             "models": [MODEL], "slots": {"total": 1, "idle": 0}, "seq": seq,
                                             "interval_ms": 200})
            assert st == 200, b
            self.stop.wait(0.1)

    def tearDown(self):
        self.stop.set()
        self.reporter.join(5)
        self.gw.close()

    def test_full_503_and_expired_504(self):
        waiting = [Background(self.gw.port, chat_body(MODEL, "q%d" % i)) for i in range(30)]
        wait_until(lambda: metric(self.gw, "switchboard_queue_length") == 30, 15, "30 buffered")
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", body=chat_body(MODEL, "one too many"))
        self.assertEqual(st, 503, body)
        self.assertIn(b"queue_full", body)
        # Nothing frees a slot: each buffered request is answered 504 once it waited 10 s.
        for r in waiting:
            st, body = r.result(timeout=30)
            self.assertEqual(st, 504, body)
            self.assertIn(b"queue_timeout", body)

    def test_report_route_refusals(self):
        st, _, _ = post_report(self.gw, {"address": self.addr}, headers={})
        self.assertEqual(st, 401)
        st, _, body = post_report(self.gw, {"address": "127.0.0.1:9", "slots": {"total": 1, "idle": 1}})
        self.assertEqual(st, 404, body)
        for bad in (b"{", b"[]", {"address": self.addr, "slots": {"total": 1, "idle": 2}},
                    {"address": self.addr, "kv_usage": 7}, {"address": "x" * 300}):
            st, _, body = post_report(self.gw, bad)
            self.assertEqual(st, 400, (bad, body))
        st, _, _ = post_report(self.gw, b"{" + b" " * (70 << 10) + b"}")
        self.assertEqual(st, 413)
        st, _, _ = http(self.gw.admin_port, "GET", "/admin/agents/report", headers=AUTH)
        self.assertEqual(st, 405)
        self.assertGreaterEqual(metric(self.gw, "switchboard_agent_reports_refused_total", 'reason="bad_body"'), 5)
        self.assertGreaterEqual(metric(self.gw, "switchboard_agent_reports_refused_total",
                                       'reason="unknown_address"'), 1)


class ScrapedSlotsTest(unittest.TestCase):
    """Without agents, the prober's /slots scrape feeds the same slots (their staleness is the
    pool's stale_ms)."""

    def test_probe_slots(self):
        sim, ports = start_sims(1)
        addr = "127.0.0.1:%d" % ports[0]
        gw = Gateway([{"name": "llama", "models": [MODEL], "profile": "paddler", "endpoints": [addr],
                       "yaml": ["engine: llamacpp", "probe: { path: /slots }"]}], admin="token: %s" % TOKEN)
        try:
            wait_until(lambda: "slots" in endpoints(gw)[addr], 10, "scraped slots")
            e = endpoints(gw)[addr]
            self.assertEqual(e["slots"]["total"], 1)
            self.assertNotIn("agent", e)
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", body=chat_body(MODEL, "hi"))
            self.assertEqual(st, 200, body)
        finally:
            gw.close()
            sim.stop()


class AgentStopTest(unittest.TestCase):
    def test_sigterm_last_report_exit_0(self):
        sim, ports = start_sims(1)
        addr = "127.0.0.1:%d" % ports[0]
        gw = paddler_gateway([addr])
        try:
            ag = Agent("--server", "http://" + addr, "--gateway", "http://127.0.0.1:%d" % gw.admin_port,
                       "--token", TOKEN, "--interval-ms", "60000")
            wait_until(lambda: endpoints(gw)[addr].get("agent", {}).get("reports", 0) >= 1, 10, "first report")
            n = endpoints(gw)[addr]["agent"]["reports"]
            ag.stop()  # exit 0 and no sanitizer report, checked
            self.assertEqual(endpoints(gw)[addr]["agent"]["reports"], n + 1)
        finally:
            gw.close()
            sim.stop()


class AgentJoinLeaveTest(unittest.TestCase):
    """An agent beside a replica the gateway's file does not list: its registration heartbeat
    (POST /admin/endpoints with a TTL) makes the model routable; killed (no last word), its
    registration lapses, the endpoint is drained and removed, and the model has no endpoint."""

    def test_agent_joins_then_vanishes(self):
        sim, ports = start_sims(1)
        addr = "127.0.0.1:%d" % ports[0]
        gw = Gateway([{"name": "llama", "models": [MODEL], "profile": "default", "endpoints": [],
                       "yaml": ["probe: { enabled: false, health_interval_ms: 0 }"]}], admin="token: %s" % TOKEN)
        ag = None
        try:
            def members():
                st, _, body = http(gw.admin_port, "GET", "/admin/endpoints", headers=AUTH)
                assert st == 200, body
                return {e["address"]: e for p in json.loads(body)["pools"] for e in p["endpoints"]}

            st, _, body = http(gw.port, "POST", "/v1/chat/completions", body=chat_body(MODEL, "hi"))
            self.assertEqual(st, 503, body)  # nothing serves the model yet
            ag = Agent("--server", "http://" + addr, "--gateway", "http://127.0.0.1:%d" % gw.admin_port,
                       "--token", TOKEN, "--interval-ms", "200", "--poll-ms", "50")
            wait_until(lambda: addr in members(), 10, "the agent's registration")
            m = members()[addr]
            self.assertEqual(m["source"], "api")
            wait_until(lambda: http(gw.port, "POST", "/v1/chat/completions",
                                    body=chat_body(MODEL, "hi"))[0] == 200, 10, "the model routable")
            ag.proc.kill()  # vanishes: no last report, no DELETE
            ag.proc.wait()
            ag = None
            wait_until(lambda: addr not in members(), 15, "the registration to lapse and the endpoint to go")
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", body=chat_body(MODEL, "hi"))
            self.assertEqual(st, 503, body)
        finally:
            if ag:
                ag.proc.kill()
                ag.proc.wait()
            gw.close()
            sim.stop()


if __name__ == "__main__":
    unittest.main()
