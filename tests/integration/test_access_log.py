"""The access log tells the truth: one JSON line per request the client listener reads, every
outcome included (proxied, passed-through errors, the gateway's own errors and refusals, a
client gone while queued), with the request id the client got, its address, method and path;
the counters agree (a gateway 502 is not a "rejected" answer, a stream cut mid-way is not a
2xx). Each test parses the log file the gateway writes."""
import json
import os
import re
import socket
import unittest

from fixtures import Gateway, Upstream, chat_body, free_port, http, read_response, send_request, wait_until

# What a vLLM replica with a long queue reports: every endpoint over flow control's gate.
SATURATED = "vllm:num_requests_waiting 10\nvllm:num_requests_running 4\nvllm:gpu_cache_usage_perc 0.5\n"


def metric_lines(gw, prefix):
    text = http(gw.admin_port, "GET", "/metrics")[2].decode()
    return [l for l in text.splitlines() if l.startswith(prefix)]


class LoggedGateway(unittest.TestCase):
    """A gateway with an access log in front of one scriptable upstream (self.up)."""

    def start(self, endpoints, extra="", pool_yaml=None):
        def files(d):
            self.access_log = os.path.join(d, "access.log")
            return {"access_log": self.access_log}
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": endpoints, "yaml": pool_yaml or []}],
                          extra="access_log: {access_log}\n" + extra, pre_start=files)

    def setUp(self):
        self.up = Upstream("u")
        self.gw = None

    def tearDown(self):
        try:
            if self.gw:
                self.gw.close()
        finally:
            self.up.close()

    def lines(self):
        with open(self.access_log) as f:
            return [json.loads(l) for l in f if l.strip()]


class AccessLogTest(LoggedGateway):
    def line_for(self, request_id):
        """The one line of a request (fails if there are none or several)."""
        wait_until(lambda: any(l["request_id"] == request_id for l in self.lines()), 10, "the log line")
        found = [l for l in self.lines() if l["request_id"] == request_id]
        self.assertEqual(len(found), 1, found)
        return found[0]

    def test_request_id_kept_generated_returned_and_sent_upstream(self):
        self.start([self.up.address])
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                        {"x-request-id": "abc-123.X_y", "X-Forwarded-For": "10.0.0.1"})
        self.assertEqual((st, h["x-request-id"]), (200, "abc-123.X_y"))
        method, path, up_headers, _ = self.up.requests[-1]
        self.assertEqual(up_headers["x-request-id"], "abc-123.X_y")
        self.assertEqual(up_headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1")
        line = self.line_for("abc-123.X_y")
        self.assertEqual((line["method"], line["path"], line["model"], line["pool"], line["outcome"], line["status"],
                          line["upstream_status"], line["endpoint"]),
                         ("POST", "/v1/chat/completions", "m", "p", "ok", 200, 200, self.up.address))
        self.assertTrue(line["client"].startswith("127.0.0.1:"), line)
        self.assertEqual(line["retries"], 0)
        # Not a token (a space, a quote), or too long: replaced by a generated id.
        for bad in ('a b', 'x"y', "z" * 129):
            st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": bad})
            self.assertEqual(st, 200)
            self.assertRegex(h["x-request-id"], r"^[0-9a-f]{32}$")
            self.assertEqual(self.up.requests[-1][2]["x-request-id"], h["x-request-id"])
            self.assertEqual(self.up.requests[-1][2]["x-forwarded-for"], "127.0.0.1")
            self.line_for(h["x-request-id"])
        # The gateway's own answers carry one too, and are logged: 404 unknown model, 404 route.
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("nope"))
        self.assertEqual(st, 404)
        line = self.line_for(h["x-request-id"])
        self.assertEqual((line["outcome"], line["reason"], line["status"], line["path"]),
                         ("rejected", "model_not_found", 404, "/v1/chat/completions"))
        st, h, _ = http(self.gw.port, "GET", "/v2/what")
        self.assertEqual(st, 404)
        self.assertEqual(self.line_for(h["x-request-id"])["method"], "GET")
        st, h, _ = http(self.gw.port, "GET", "/healthz")
        self.assertEqual(self.line_for(h["x-request-id"])["outcome"], "ok")
        ids = [l["request_id"] for l in self.lines()]
        self.assertEqual(len(ids), len(set(ids)), "one line per request, ids unique")

    def test_request_id_on_the_servers_own_refusal_after_the_head(self):
        # The head passes the gateway's checks (it gets its id there); the body then breaks the
        # server's limit: the 413 the HTTP layer answers still carries the id.
        self.start([self.up.address], extra="limits: { max_body_bytes: 1000 }\n")
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", b"x" * 5000, {"x-request-id": "big-1"})
        self.assertEqual((st, h.get("x-request-id")), (413, "big-1"))

    def test_the_servers_own_refusals_get_a_line(self):
        """Requests the HTTP layer answers itself, before the gateway's routes: a malformed
        head (400, nothing parsed: no method or path), a body over the limit after the head
        (413, with its id, method and path): one line each, outcome refused, the code as reason."""
        self.start([self.up.address], extra="limits: { max_body_bytes: 1000 }\n")
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"\x01\x02 not http at all\r\n\r\n")
        st = read_response(s)[0]
        s.close()
        self.assertEqual(st, 400)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", b"x" * 5000, {"x-request-id": "big-2"})
        self.assertEqual(st, 413)
        wait_until(lambda: len(self.lines()) >= 2, 10, "two lines")
        bad, big = self.lines()[:2]
        self.assertEqual((bad["status"], bad["outcome"], bad["method"], bad["path"]), (400, "refused", "", ""))
        self.assertTrue(bad["reason"] and bad["client"].startswith("127.0.0.1:"), bad)
        self.assertEqual((big["status"], big["outcome"], big["method"], big["path"], big["request_id"]),
                         (413, "refused", "POST", "/v1/chat/completions", "big-2"))

    def test_gateway_502_logged_once_and_not_counted_as_rejected(self):
        dead = "127.0.0.1:%d" % free_port()
        self.start([dead])
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))
        self.assertEqual(st, 502)
        line = self.line_for(h["x-request-id"])
        self.assertEqual((line["outcome"], line["status"], line["upstream_status"], line["pool"]),
                         ("upstream_error", 502, 0, "p"))
        self.assertEqual(line["reason"], "upstream_unavailable")
        self.assertEqual(len(self.lines()), 1, self.lines())
        rejected = metric_lines(self.gw, "switchboard_rejected_total{")
        self.assertTrue(rejected and all(l.endswith(" 0") for l in rejected), rejected)
        self.assertIn("switchboard_upstream_errors_total 1", metric_lines(self.gw, "switchboard_upstream_errors_total"))

    def test_replica_500_passed_through_is_not_ok(self):
        self.start([self.up.address])
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                        {"x-fixture-mode": "status", "x-fixture-status": "500"})
        self.assertEqual(st, 500)
        line = self.line_for(h["x-request-id"])
        self.assertEqual((line["outcome"], line["status"], line["upstream_status"]), ("upstream_5xx", 500, 500))
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                        {"x-fixture-mode": "status", "x-fixture-status": "400"})
        self.assertEqual(self.line_for(h["x-request-id"])["outcome"], "upstream_4xx")

    def test_stream_cut_midway_is_its_own_class(self):
        self.start([self.up.address])
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m", stream=True),
                     {"x-fixture-mode": "die", "x-fixture-events": "2", "x-request-id": "cut-1"})
        with self.assertRaises(ConnectionError):
            read_response(s)
        s.close()
        line = self.line_for("cut-1")
        self.assertEqual((line["outcome"], line["status"], line["reason"]), ("midstream_error", 200, "upstream_closed"))
        counts = metric_lines(self.gw, "switchboard_requests_total")
        self.assertIn('switchboard_requests_total{pool="p",model="m",endpoint="%s",code="cut"} 1' % self.up.address,
                      counts)
        self.assertIn('switchboard_requests_total{pool="p",model="m",endpoint="%s",code="2xx"} 0' % self.up.address,
                      counts)

    def test_refusals_and_a_client_gone_while_queued_are_logged_with_who_asked(self):
        self.up.metrics_text = SATURATED
        self.start([self.up.address],
                   extra="flow_control:\n  max_wait_ms: { standard: 60000 }\n"
                         "auth:\n  api_keys:\n    - { key: sk-team, tenant: team-a, band: sheddable }\n"
                         "    - { key: sk-std, tenant: team-b }\n",
                   pool_yaml=["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"])
        wait_until(lambda: self.up.probes >= 2, 10, "the saturated reports")

        def shed():
            st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                            {"Authorization": "Bearer sk-team"})
            return st, h
        wait_until(lambda: shed()[0] == 429, 10, "the gate to see the pool saturated")
        st, h = shed()
        self.assertEqual(st, 429)
        line = self.line_for(h["x-request-id"])
        self.assertEqual((line["outcome"], line["reason"], line["model"], line["pool"], line["band"], line["tenant"]),
                         ("refused", "shed", "m", "p", "sheddable", "team-a"))
        # A standard request waits in the queue; its client leaves: one line, outcome client_abort.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"),
                     {"Authorization": "Bearer sk-std", "x-request-id": "gone-1"})
        wait_until(lambda: any(l.endswith(" 1") for l in metric_lines(self.gw, "switchboard_queue_length{pool=\"p\",band=\"standard\"}")), 10,
                   "the request to be queued")
        s.close()
        line = self.line_for("gone-1")
        self.assertEqual((line["outcome"], line["reason"], line["status"], line["pool"], line["band"],
                          line["tenant"]), ("client_abort", "queued", 499, "p", "standard", "team-b"))
        self.assertEqual(len(self.up.requests), 0)
        # An auth refusal is a line too.
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))
        self.assertEqual(st, 401)
        self.assertEqual(self.line_for(h["x-request-id"])["reason"], "invalid_api_key")


if __name__ == "__main__":
    unittest.main()


class AccessLogAcrossReload(LoggedGateway):
    def test_lines_stay_whole_when_old_and_new_gateway_write_at_once(self):
        """A reload that replaces the gateway (a pool added) leaves the old one finishing its
        streams beside the new one, each with its own buffered FILE on the same file. Every
        write must hold whole lines: before, glibc kept its own 4 KiB buffer (the 64 KiB size
        was given with a NULL buffer, which glibc ignores) while lines were counted against
        64 KiB, so writes ended mid-line and the other gateway's lines landed in the gap
        (unparseable lines)."""
        self.start([self.up.address])
        n = 80
        socks = []
        hdrs = {"Content-Type": "application/json", "x-fixture-mode": "hang"}

        def open_streams():
            for _ in range(n):
                c = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
                send_request(c, "POST", "/v1/chat/completions", chat_body("m", "s" * 10, stream=True), hdrs)
                socks.append(c)
        keep = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        try:
            send_request(keep, "POST", "/v1/chat/completions", chat_body("m", "k", stream=True), hdrs)
            open_streams()
            wait_until(lambda: len(self.up.requests) >= n + 1, 10, "the old gateway's streams upstream")
            before = int(metric_lines(self.gw, "switchboard_reloads_total{result=\"success\"}")[0].split()[-1])
            with open(self.gw.config_path) as f:
                cfg = f.read()
            with open(self.gw.config_path, "w") as f:
                f.write(cfg + "  - name: q\n    models: [\"m2\"]\n    endpoints: [\"%s\"]\n" % self.up.address)
            self.gw.proc.send_signal(__import__("signal").SIGHUP)
            wait_until(lambda: int(metric_lines(self.gw, "switchboard_reloads_total{result=\"success\"}")[0]
                                   .split()[-1]) > before, 10, "the reload applied")
            open_streams()
            wait_until(lambda: len(self.up.requests) >= 2 * n + 1, 10, "the new gateway's streams upstream")
            for c in socks:  # both gateways log their aborted streams in the same loop turns
                c.close()
            wait_until(lambda: sum(1 for _ in open(self.access_log)) >= 2 * n, 10, "the lines written")
        finally:
            for c in socks:
                c.close()
            keep.close()
        self.gw.close()
        self.gw = None
        with open(self.access_log, "rb") as f:
            raw = f.read().split(b"\n")
        bad = []
        for l in raw:
            if l.strip():
                try:
                    json.loads(l)
                except ValueError:
                    bad.append(l[:120])
        self.assertEqual(bad, [])
        self.assertGreaterEqual(len([l for l in raw if l.strip()]), 2 * n)
