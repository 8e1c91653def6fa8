"""The synchronous probe (probe.sync_max_age_ms, issue 14): a request whose best candidates'
reports are older than the bound waits for a scrape of them, then is decided again; an endpoint
whose last scrape failed (a hung /metrics) is never waited on; off by default.

Scrapes are made rare (every 60 s) so that every report is old when a request comes; waits are
for counters, never for time."""
import unittest

from fixtures import Gateway, chat_body, http, wait_until
from test_sim import MODEL, Sim

RARE = "interval_ms: 60000, min_interval_ms: 60000, max_interval_ms: 60000, health_interval_ms: 0"


def metrics(gw):
    st, _, body = http(gw.admin_port, "GET", "/metrics")
    assert st == 200, body
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def value(gw, name):
    return sum(v for k, v in metrics(gw).items() if k == name or k.startswith(name + "{"))


def scrapes(gw, addr):
    return metrics(gw).get('switchboard_probe_scrapes_total{pool="p",endpoint="%s"}' % addr, 0)


def chat(gw):
    return http(gw.port, "POST", "/v1/chat/completions", chat_body(MODEL, "hello", extra={"max_tokens": 4}))


class SyncProbeTest(unittest.TestCase):
    def gateway(self, sim, probe, profile="default"):
        addrs = ["127.0.0.1:%d" % p for p in sim.ports]
        gw = Gateway([{"name": "p", "models": [MODEL], "profile": profile, "endpoints": addrs,
                       "yaml": ["probe: { %s }" % probe]}])
        return gw, addrs

    def test_old_reports_are_scraped_before_the_decision(self):
        sim = Sim("--speed", "50", replicas=2)
        gw, addrs = self.gateway(sim, RARE + ", sync_max_age_ms: 1, sync_timeout_ms: 5000")
        try:
            wait_until(lambda: all(scrapes(gw, a) >= 1 for a in addrs), 10, "the first scrapes")
            before = {a: scrapes(gw, a) for a in addrs}
            for _ in range(3):
                st, _, body = chat(gw)
                self.assertEqual(st, 200, body)
            self.assertEqual(value(gw, "switchboard_sync_probe_waits_total"), 3)
            self.assertEqual(value(gw, "switchboard_sync_probe_timeouts_total"), 0)
            # Each wait scraped the candidates (2 by default) whose report was old: both, or one
            # when the other's came a moment before with the last answer (the sim sends ORCA load
            # headers). No other scrape ran: the regular timer is 60 s away.
            self.assertTrue(3 <= sum(scrapes(gw, a) - before[a] for a in addrs) <= 6)
        finally:
            gw.close()
            sim.stop()

    def test_a_hung_metrics_page_is_not_waited_on(self):
        sim = Sim("--speed", "50", "--metrics-hang", "--fault-replicas", "1", replicas=2)
        # least-request: no filter drops the endpoint without a report, so it is a candidate.
        gw, addrs = self.gateway(sim, RARE + ", timeout_ms: 300, sync_max_age_ms: 1, sync_timeout_ms: 60000",
                                 profile="least-request")
        try:
            hung = addrs[1]
            err = 'switchboard_probe_errors_total{pool="p",endpoint="%s"}' % hung
            wait_until(lambda: metrics(gw).get(err, 0) >= 1, 10, "the hung scrape to fail")
            for _ in range(3):
                st, _, body = chat(gw)  # would wait a minute on the hung page
                self.assertEqual(st, 200, body)
            self.assertEqual(value(gw, "switchboard_sync_probe_timeouts_total"), 0)
            self.assertEqual(metrics(gw).get(err), 1)  # no new scrape of it was started
        finally:
            gw.close()
            sim.stop()

    def test_off_by_default(self):
        sim = Sim("--speed", "50", replicas=2)
        gw, addrs = self.gateway(sim, RARE)
        try:
            wait_until(lambda: all(scrapes(gw, a) >= 1 for a in addrs), 10, "the first scrapes")
            st, _, body = chat(gw)
            self.assertEqual(st, 200, body)
            self.assertEqual(value(gw, "switchboard_sync_probe_waits_total"), 0)
            self.assertEqual(sum(scrapes(gw, a) for a in addrs), 2)
        finally:
            gw.close()
            sim.stop()


if __name__ == "__main__":
    unittest.main()
