"""Engine auto-detection and loud mismatches (issue 16, item 4): with `engine: auto` (the
default) each endpoint's mapping is chosen from the families its /metrics exposes; a scrape that
answers 200 with none of the configured engine's families is counted, shown in /debug/endpoints
with the engine the page looks like, and logged once per endpoint, not once per scrape.

Waits are for counters (scrapes seen), never for time."""
import json
import os
import unittest

from fixtures import Gateway, Upstream, http, wait_until
from test_sim import MODEL, Sim

PROBE = "probe: { interval_ms: 50, min_interval_ms: 50, max_interval_ms: 100, health_interval_ms: 0 }"


def endpoints(gw):
    st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
    assert st == 200, body
    return {p["pool"]: p["endpoints"] for p in json.loads(body)["pools"]}


def metric(gw, name, pool, addr):
    st, _, body = http(gw.admin_port, "GET", "/metrics")
    assert st == 200, body
    key = '%s{pool="%s",endpoint="%s"} ' % (name, pool, addr)
    for line in body.decode().splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    raise AssertionError("no %s in /metrics" % key)


def log_of(gw):
    with open(gw.log_path) as f:
        return f.read()


class EngineDetectTest(unittest.TestCase):
    def test_wrong_engine_is_reported(self):
        sim = Sim("--engine", "sglang")
        addr = "127.0.0.1:%d" % sim.port
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [addr], "yaml": ["engine: vllm", PROBE]}])
        try:
            # The first scrape is the one that reports it: never a scrape without the error.
            wait_until(lambda: metric(gw, "switchboard_probe_scrapes_total", "p", addr) >= 1, 10, "a scrape")
            ep = endpoints(gw)["p"][0]
            self.assertEqual(ep["report"].get("error"), "no vllm: families in /metrics; this looks like sglang", ep)
            self.assertEqual(ep["report"]["engine"]["configured"], "vllm")
            self.assertGreaterEqual(metric(gw, "switchboard_probe_mismatch_total", "p", addr), 1)
            # Logged once per endpoint however many scrapes keep failing.
            wait_until(lambda: metric(gw, "switchboard_probe_mismatch_total", "p", addr) >= 4, 10, "more scrapes")
            warned = [l for l in log_of(gw).splitlines() if "looks like sglang" in l]
            self.assertEqual(len(warned), 1, log_of(gw))
            self.assertIn(addr, warned[0])
            self.assertTrue(ep["stale"], ep)
            self.assertIsNone(ep["report"]["running"])
        finally:
            gw.close()
            sim.stop()

    def test_auto_detects_each_engine(self):
        sims = {e: Sim("--engine", e) for e in ("sglang", "llamacpp", "vllm")}
        addrs = {e: "127.0.0.1:%d" % s.port for e, s in sims.items()}
        # No engine: key: auto is the default.
        pools = [{"name": e, "models": ["m-" + e], "endpoints": [addrs[e]], "yaml": [PROBE]} for e in sims]
        gw = Gateway(pools)
        try:
            def detected():
                eps = endpoints(gw)
                return all(eps[e][0]["report"]["source"] == "scrape" for e in sims)
            wait_until(detected, 10, "every endpoint's report from a scrape")
            eps = endpoints(gw)
            for e in sims:
                ep = eps[e][0]
                self.assertEqual(ep["report"]["engine"], {"configured": "auto", "in_use": e, "mismatches": 0}, ep)
                self.assertNotIn("error", ep["report"])
                self.assertFalse(ep["stale"], ep)
                self.assertIsNotNone(ep["report"]["running"])
                self.assertIsNotNone(ep["report"]["kv_cache_usage"])
                self.assertEqual(metric(gw, "switchboard_probe_mismatch_total", e, addrs[e]), 0)
            self.assertNotIn("looks like", log_of(gw))
        finally:
            gw.close()
            for s in sims.values():
                s.stop()

    def test_auto_says_why_when_nothing_matches(self):
        """auto with nothing to read: an empty page, and a TensorRT-LLM release that exports only
        request histograms (its prefix, none of the load families)."""
        empty, histo = Upstream("empty"), Upstream("histo")
        histo.metrics_text = ("# TYPE trtllm_time_to_first_token_seconds histogram\n"
                              "trtllm_time_to_first_token_seconds_count 3\n")
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [empty.address, histo.address], "yaml": [PROBE]}])
        try:
            wait_until(lambda: all(metric(gw, "switchboard_probe_mismatch_total", "p", u.address) >= 1
                                   for u in (empty, histo)), 10, "both mismatches")
            eps = {e["address"]: e for e in endpoints(gw)["p"]}
            self.assertEqual(eps[empty.address]["report"]["error"],
                             "no vllm:, sglang:, trtllm_ or llamacpp: families in /metrics (engine auto; another "
                             "server needs engine: custom)")
            self.assertIsNone(eps[empty.address]["report"]["engine"]["in_use"])
            self.assertEqual(eps[histo.address]["report"]["error"],
                             "trtllm_ families in /metrics, but none of the load metrics read (running, waiting, "
                             "KV use)")
            self.assertEqual(eps[histo.address]["report"]["engine"]["in_use"], "trtllm")
            # The page gets fixed: the error goes, the report arrives.
            empty.metrics_text = "sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\nsglang:token_usage 0.5\n"
            wait_until(lambda: "error" not in {e["address"]: e for e in endpoints(gw)["p"]}[empty.address]["report"],
                       10, "the fixed page to be read")
            ep = {e["address"]: e for e in endpoints(gw)["p"]}[empty.address]
            self.assertEqual(ep["report"]["engine"]["in_use"], "sglang")
            self.assertEqual(ep["report"]["kv_cache_usage"], 0.5)
            self.assertEqual(log_of(gw).count("(engine auto; another"), 1, log_of(gw))
        finally:
            gw.close()
            empty.close()
            histo.close()

    def test_auto_with_slots_reads_llamacpp(self):
        sim = Sim("--engine", "llamacpp")
        addr = "127.0.0.1:%d" % sim.port
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [addr], "yaml": ["probe: { path: /slots }"]}])
        try:
            wait_until(lambda: endpoints(gw)["p"][0]["report"]["source"] == "scrape", 10, "a /slots report")
            ep = endpoints(gw)["p"][0]
            self.assertEqual(ep["report"]["engine"], {"configured": "auto", "in_use": "llamacpp", "mismatches": 0})
            self.assertNotIn("error", ep["report"])
        finally:
            gw.close()
            sim.stop()

    def test_mistyped_served_name_is_reported(self):
        sim = Sim()
        addr = "127.0.0.1:%d" % sim.port
        # The first model of a pool is the name sent upstream: "sim/model-A" is a typo.
        gw = Gateway([{"name": "typo", "models": ["sim/model-A", "alias"], "endpoints": [addr], "yaml": [PROBE]},
                      {"name": "good", "models": [MODEL], "endpoints": [addr], "yaml": [PROBE]}])
        try:
            gauge = "switchboard_endpoint_served_model_missing"
            wait_until(lambda: metric(gw, gauge, "typo", addr) == 1, 10, "the missing served name")
            eps = endpoints(gw)
            self.assertEqual(eps["typo"][0]["report"].get("models_error"),
                             "/v1/models lists '%s', not 'sim/model-A' (the pool's first model, the name sent "
                             "upstream)" % MODEL, eps["typo"][0])
            self.assertNotIn("models_error", eps["good"][0]["report"])
            self.assertEqual(metric(gw, gauge, "good", addr), 0)
            # Once, not per scrape.
            wait_until(lambda: metric(gw, "switchboard_probe_scrapes_total", "typo", addr) >= 4, 10, "more scrapes")
            warned = [l for l in log_of(gw).splitlines() if "not 'sim/model-A'" in l]
            self.assertEqual(len(warned), 1, log_of(gw))
        finally:
            gw.close()
            sim.stop()


if __name__ == "__main__":
    unittest.main()
