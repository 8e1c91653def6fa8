"""Retries, ejection, panic routing, fast readmission and stale-but-serving, driven through the
gateway against `switchboard sim` replicas with faults (docs/operations: the fault matrix).

Each test starts its own simulated fleet and gateway and waits for observable state
(answers, /metrics counters), never for time: deadlines only bound a broken run."""
import json
import socket
import time
import unittest

from fixtures import Gateway, free_run, http, send_request, wait_until
from test_auth_head import read_to_eof
from test_sim import Sim, metric

MODEL = "sim/model-a"


def chat(text, max_tokens=4, stream=False):
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "stream": stream}


def gw_metrics(gw):
    st, _, body = http(gw.admin_port, "GET", "/metrics")
    assert st == 200, st
    return body.decode()


def gateway(ports, profile="round-robin", pool_yaml=(), extra=""):
    return Gateway([{"name": "p", "models": [MODEL], "profile": profile,
                     "endpoints": ["127.0.0.1:%d" % p for p in ports], "yaml": list(pool_yaml)}], extra=extra)


def raw_stream(port, body, timeout=20):
    """Sends a streamed request and reads until the gateway closes: the raw bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        send_request(s, "POST", "/v1/chat/completions", body, {"Connection": "close"})
        return read_to_eof(s)
    finally:
        s.close()


class RetryTest(unittest.TestCase):
    def test_failing_replica_is_hidden_and_ejected(self):
        """One of three replicas answers 500 to 30% of requests: no 5xx reaches a client (each
        is retried on another replica before anything is forwarded) and the replica is ejected
        (by the failure rate: 500s rarely come three in a row)."""
        sim = Sim("--speed", "50", "--fail-rate", "0.3", "--fault-replicas", "0", replicas=3)
        gw = gateway(sim.ports)
        try:
            statuses = [http(gw.port, "POST", "/v1/chat/completions", chat("q%d" % i))[0] for i in range(150)]
            self.assertEqual([s for s in statuses if s != 200], [])
            m = gw_metrics(gw)
            bad = "127.0.0.1:%d" % sim.ports[0]
            self.assertGreater(metric(m, "switchboard_retries_total", endpoint=bad, reason="status"), 0)
            self.assertGreater(metric(m, "switchboard_ejections_total", endpoint=bad), 0)
            self.assertEqual(metric(m, "switchboard_ejections_total", endpoint="127.0.0.1:%d" % sim.ports[1]), 0)
        finally:
            gw.close()
            sim.stop()

    def test_two_of_three_dead_every_request_succeeds(self):
        """Two of three replicas refuse connections: every request is answered, the retry
        finding the healthy one (before: 200 502 200 502 ...)."""
        base = free_run(3)
        sim = Sim("--speed", "50", "--refuse", "--fault-replicas", "0,1", replicas=3, port=base)
        gw = gateway([base, base + 1, base + 2], pool_yaml=["probe: { health_interval_ms: 0 }"])
        try:
            statuses = [http(gw.port, "POST", "/v1/chat/completions", chat("q%d" % i))[0] for i in range(30)]
            self.assertEqual(statuses, [200] * 30)
            m = gw_metrics(gw)
            self.assertGreater(metric(m, "switchboard_retries_total", endpoint="127.0.0.1:%d" % base,
                                      reason="connect-failure"), 0)
        finally:
            gw.close()
            sim.stop()

    def test_reset_before_the_answer_is_retried(self):
        """A non-streamed request whose replica cuts the connection before answering (it dies
        after 2 of 8 tokens, and the answer comes whole at the end) is answered by another."""
        sim = Sim("--speed", "50", "--die-after-tokens", "2", "--fault-replicas", "0", replicas=2)
        gw = gateway(sim.ports)
        try:
            for i in range(6):
                st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat("r%d" % i, max_tokens=8))
                self.assertEqual(st, 200, body)
                self.assertIn("choices", json.loads(body))
            m = gw_metrics(gw)
            self.assertGreater(metric(m, "switchboard_retries_total", endpoint="127.0.0.1:%d" % sim.ports[0],
                                      reason="reset"), 0)
        finally:
            gw.close()
            sim.stop()

    def test_stream_cut_midway_ends_with_an_sse_error(self):
        """A stream whose replica dies after some tokens cannot be retried (the client has
        them): it ends with a visible SSE error event, never a silent cut."""
        sim = Sim("--speed", "50", "--die-after-tokens", "3", replicas=1)
        gw = gateway(sim.ports)
        try:
            data = raw_stream(gw.port, chat("s", max_tokens=20, stream=True))
            self.assertIn(b" 200 ", data.split(b"\r\n", 1)[0])
            self.assertIn(b"data: {", data)
            self.assertIn(b"upstream_failed_midstream", data)
            self.assertNotIn(b"[DONE]", data)
        finally:
            gw.close()
            sim.stop()


class PanicAndReadmissionTest(unittest.TestCase):
    def test_all_down_routes_in_panic_then_readmits_at_once(self):
        """Every replica down: requests are still tried on them (panic routing, counted) and
        fail as 502, not 503 at once; one replica coming back is readmitted by its first
        passing health check, long before its ejection backoff (60 s here) would end."""
        base = free_run(2)
        gw = gateway([base, base + 1], pool_yaml=[
            "probe: { health_interval_ms: 100, timeout_ms: 100 }",
            "health: { max_failures: 1, base_eject_ms: 60000, max_eject_ms: 60000, max_eject_percent: 100 }"])
        sim = None
        try:
            wait_until(lambda: "switchboard_health_check_failures_total" in gw_metrics(gw) and
                       metric(gw_metrics(gw), "switchboard_health_check_failures_total") >= 2, 10,
                       "the health checks to fail")
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat("x"))
            self.assertEqual(st, 502, body)
            self.assertGreater(metric(gw_metrics(gw), "switchboard_panic_routing_total", pool="p"), 0)
            sim = Sim("--speed", "50", replicas=1, port=base + 1)
            wait_until(lambda: metric(gw_metrics(gw), "switchboard_readmissions_total",
                                      endpoint="127.0.0.1:%d" % (base + 1)) > 0, 10, "readmission")
            statuses = [http(gw.port, "POST", "/v1/chat/completions", chat("y%d" % i))[0] for i in range(10)]
            self.assertEqual(statuses, [200] * 10)
        finally:
            gw.close()
            if sim:
                sim.stop()


class StaleButServingTest(unittest.TestCase):
    def test_metrics_hang_replica_keeps_a_share(self):
        """A replica whose /metrics never answers but which serves fine keeps a share of the
        traffic under the default profile (whose gate filter drops stale endpoints): its
        passing health checks and its successful requests keep it serving."""
        sim = Sim("--speed", "50", "--metrics-hang", "--fault-replicas", "0", replicas=3)
        gw = gateway(sim.ports, profile="default", pool_yaml=["probe: { health_interval_ms: 200 }"])
        hung = "127.0.0.1:%d" % sim.ports[0]
        try:
            deadline = time.monotonic() + 30
            n = 0
            while metric(gw_metrics(gw), "switchboard_requests_total", endpoint=hung, code="2xx") < 5:
                self.assertLess(time.monotonic(), deadline, "the hung-metrics replica got no share")
                st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat("h%d" % n))
                self.assertEqual(st, 200)
                n += 1
        finally:
            gw.close()
            sim.stop()


class RetryAcrossPartsTest(unittest.TestCase):
    """Where retries meet membership changes and down endpoints (the review of the merge)."""

    def test_retries_survive_a_membership_change(self):
        """Requests waiting to retry while a registration replaces the gateway: afterwards the
        retry budget still counts from zero (its in-flight counts are the old gateway's), so a
        failed first attempt is still retried on the healthy endpoint."""
        failing = Sim("--speed", "50", "--fail-rate", "1", replicas=2)
        healthy = Sim("--speed", "50", replicas=1)
        token = "retry-test-token"
        gw = Gateway([{"name": "p", "models": [MODEL], "profile": "round-robin",
                       "endpoints": ["127.0.0.1:%d" % p for p in failing.ports],
                       "yaml": ["health: { max_failures: 1000, failure_rate: 0 }"]}],
                     extra="retry: { backoff_ms: 400, max_backoff_ms: 400 }", admin="token: " + token)
        auth = {"Authorization": "Bearer " + token}
        try:
            import threading
            results = []
            ts = [threading.Thread(target=lambda i=i: results.append(
                http(gw.port, "POST", "/v1/chat/completions", chat("w%d" % i), timeout=30)[0])) for i in range(3)]
            for t in ts:
                t.start()
            wait_until(lambda: metric(gw_metrics(gw), "switchboard_retries_total") >= 3, 10, "three in backoff (the budget's floor)")
            st, _, body = http(gw.admin_port, "POST", "/admin/endpoints",
                               {"address": "127.0.0.1:%d" % healthy.port, "pool": "p"}, auth)
            self.assertEqual(st, 201, body)
            for t in ts:
                t.join(30)
            denied = metric(gw_metrics(gw), "switchboard_retries_budget_denied_total")
            # Round robin over two failing endpoints and a healthy one: every request whose
            # first pick fails is retried until it reaches the healthy one.
            statuses = [http(gw.port, "POST", "/v1/chat/completions", chat("q%d" % i))[0] for i in range(6)]
            self.assertEqual(statuses, [200] * 6)
            self.assertEqual(metric(gw_metrics(gw), "switchboard_retries_budget_denied_total"), denied)
        finally:
            gw.close()
            failing.stop()
            healthy.stop()

    def test_a_retry_does_not_panic_route_past_a_healthy_endpoint(self):
        """Two replicas failing 30% and an endpoint whose name does not resolve (down): a request
        that failed on both replicas gets the replica's own 500 passed through, not a retry in
        panic on the down endpoint (a 502 naming it), and no panic is counted."""
        sim = Sim("--speed", "50", "--fail-rate", "0.3", replicas=2)
        down = "no-such-replica.invalid:9000"
        gw = Gateway([{"name": "p", "models": [MODEL], "profile": "round-robin",
                       "endpoints": ["127.0.0.1:%d" % p for p in sim.ports] + [down],
                       "yaml": ["health: { max_failures: 1000, failure_rate: 0 }"]}],
                     extra="discovery: { retry_ms: 60000 }")
        try:
            def is_down():
                eps = json.loads(http(gw.admin_port, "GET", "/debug/endpoints")[2])["pools"][0]["endpoints"]
                return [e for e in eps if e["address"] == down][0]["health"] == "down"
            wait_until(is_down, 10, "the name marked down")
            statuses, bodies = [], []
            for i in range(80):
                st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat("p%d" % i))
                statuses.append(st)
                bodies.append(body)
            m = gw_metrics(gw)
            self.assertNotIn(502, statuses, [b for s, b in zip(statuses, bodies) if s == 502][:2])
            self.assertEqual(metric(m, "switchboard_panic_routing_total"), 0)
        finally:
            gw.close()
            sim.stop()


if __name__ == "__main__":
    unittest.main()
