"""Latency histograms through the live gateway in front of `switchboard sim` at speed 1:
time to first token as the first SSE data event for streams (not when the head arrives), the
mean inter-token gap per stream, queue wait per request flow control admitted; and the access
log's ttft_ms. The simulator's own histograms (vllm:time_to_first_token_seconds,
vllm:inter_token_latency_seconds) are the reference; the bands are generous: the figures are
compared, never timed."""
import json
import unittest

import socket

from fixtures import Gateway, Upstream, chat_body, http, send_request, read_response, wait_until
from test_sim import MODEL, PROMTOOL, Sim, chat, metric, metrics, promtool_problems, sse_events

# A prompt long enough that prefill, not the loopback, makes the first token's time.
PROMPT = " ".join("word%d" % i for i in range(1500))


def mean(text, name, **labels):
    n = metric(text, name + "_count", **labels)
    return n, (metric(text, name + "_sum", **labels) / n if n else 0.0)


class LatencyMetricsTest(unittest.TestCase):
    def setUp(self):
        self.sim = Sim("--speed", "1")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:%d" % self.sim.port]}],
                          extra='access_log: "-"\nflow_control:\n  max_wait_ms: { standard: 60000 }\n')

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.sim.stop()

    def test_ttft_itl_and_queue_wait_through_the_simulator(self):
        streams = 4
        for i in range(streams):
            st, _, body = http(self.gw.port, "POST", "/v1/chat/completions",
                               chat("%d %s" % (i, PROMPT), max_tokens=12, stream=True, usage=True))
            self.assertEqual(st, 200)
            self.assertEqual(sse_events(body)[-1], "[DONE]")
        gm, sm = metrics(self.gw.admin_port), metrics(self.sim.port)

        n, ttft = mean(gm, "switchboard_time_to_first_token_seconds", pool="p")
        self.assertEqual(n, streams)
        sn, sim_ttft = mean(sm, "vllm:time_to_first_token_seconds")
        self.assertEqual(sn, streams)
        self.assertGreater(sim_ttft, 0.005, "the prompt should take the simulator a while to prefill")
        # The gateway's figure adds the loopback and its own work to the simulator's, never less
        # (10% under for the sim's timer granularity), and nowhere near the stream's end.
        self.assertGreaterEqual(ttft, 0.9 * sim_ttft, (ttft, sim_ttft))
        self.assertLessEqual(ttft, 1.5 * sim_ttft + 0.05, (ttft, sim_ttft))
        _, e2e = mean(gm, "switchboard_request_duration_seconds", pool="p")
        self.assertLess(ttft, e2e)
        # The head comes at once: the old TTFB histogram is headers time, well before the first token.
        _, ttfb = mean(gm, "switchboard_time_to_first_byte_seconds", pool="p")
        self.assertLess(ttfb, ttft)

        # One mean gap per stream. The role chunk and the usage chunk ride with the first and the
        # last token: 14 events, 13 gaps of which 11 are real, so the mean reads ~15% under the
        # sim's (measured: 4.4 ms against 5.9 ms, sanitizer build).
        n, itl = mean(gm, "switchboard_inter_token_latency_seconds", pool="p")
        self.assertEqual(n, streams)
        _, sim_itl = mean(sm, "vllm:inter_token_latency_seconds")
        self.assertGreater(itl, 0.5 * sim_itl, (itl, sim_itl))
        self.assertLess(itl, 1.5 * sim_itl + 0.02, (itl, sim_itl))

        # Unstreamed: the first body byte is the first token; no gap between tokens to see.
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("x " + PROMPT, max_tokens=4))
        self.assertEqual(st, 200)
        gm = metrics(self.gw.admin_port)
        self.assertEqual(metric(gm, "switchboard_time_to_first_token_seconds_count", pool="p"), streams + 1)
        self.assertEqual(metric(gm, "switchboard_inter_token_latency_seconds_count", pool="p"), streams)
        # Flow control admitted every request: one wait each (all dispatched at once here).
        self.assertEqual(metric(gm, "switchboard_queue_wait_seconds_count", pool="p"), streams + 1)
        self.assertEqual(metric(gm, "switchboard_queue_wait_seconds_bucket", pool="p", le="0.001"), streams + 1)

        if PROMTOOL:  # the new families beside switchboard_queue_wait_seconds_total (a counter)
            self.assertEqual(promtool_problems(gm), [])

        # An error answer is no first token.
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", dict(chat("y"), max_tokens=-1))
        self.assertGreaterEqual(st, 400)
        gm = metrics(self.gw.admin_port)
        self.assertEqual(metric(gm, "switchboard_time_to_first_token_seconds_count", pool="p"), streams + 1)

        lines = [json.loads(l) for l in open(self.gw.log_path) if l.startswith("{")]
        ok = [l for l in lines if l["outcome"] == "ok"]
        self.assertEqual(len(ok), streams + 1)
        for l in ok:
            self.assertGreater(l["ttft_ms"], l["ttfb_ms"] if l["stream"] else 0)
            self.assertLessEqual(l["ttft_ms"], l["total_ms"])
            self.assertEqual(l["itl_ms"] > 0, l["stream"])
        bad = [l for l in lines if l["outcome"] != "ok"]
        self.assertTrue(bad and all(l["ttft_ms"] == -1 for l in bad), bad)


class QueueWaitTest(unittest.TestCase):
    """A request flow control holds until the replica's report frees room: one wait observed,
    enqueue to release, not the zero of a request dispatched at once."""

    def setUp(self):
        self.up = Upstream("u")
        self.up.metrics_text = ("vllm:num_requests_waiting 10\nvllm:num_requests_running 4\n"
                                "vllm:gpu_cache_usage_perc 0.5\n")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address],
                            "yaml": ["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"]}],
                          extra="flow_control:\n  max_wait_ms: { standard: 60000 }\n")

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def test_a_queued_request_records_its_wait(self):
        wait_until(lambda: self.up.probes >= 2, 10, "the saturated reports")
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=20)
        try:
            send_request(s, "POST", "/v1/chat/completions", chat_body("m"))
            wait_until(lambda: metric(metrics(self.gw.admin_port), "switchboard_queue_length", pool="p",
                                      band="standard") == 1, 10, "the request to be queued")
            self.assertEqual(metric(metrics(self.gw.admin_port), "switchboard_queue_wait_seconds_count", pool="p"), 0)
            self.up.metrics_text = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
            st, _, _ = read_response(s)
            self.assertEqual(st, 200)
        finally:
            s.close()
        gm = metrics(self.gw.admin_port)
        self.assertEqual(metric(gm, "switchboard_queue_wait_seconds_count", pool="p"), 1)
        # Held across at least one probe of the freed replica: a real wait, not the zero
        # recorded for a request dispatched at once.
        self.assertGreater(metric(gm, "switchboard_queue_wait_seconds_sum", pool="p"), 0)
        self.assertEqual(metric(gm, "switchboard_queue_wait_seconds_bucket", pool="p", le="0.001"), 0)


if __name__ == "__main__":
    unittest.main()
