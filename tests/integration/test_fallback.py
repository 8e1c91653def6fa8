"""Fallback pools: a pool's `fallbacks:` take its requests when it cannot, before any byte
reached the client: saturated past flow control's bound (shed, queue full, or the queue wait
expired), no endpoint available, or every endpoint failed before the first byte. The request is
decided again in the first fallback that takes it at once, its body's model rewritten to the
fallback's name; the access log, /debug/decisions and switchboard_fallbacks_total say so. A
fallback that is itself saturated is passed over; with none left the original refusal stands.
An external provider is a pool too: https://, its own key, no probes."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import unittest

from fixtures import GATEWAY_BIN, Gateway, Upstream, chat_body, free_port, http, read_response, send_request, wait_until
from test_extproc import PickerCase, _can_connect, require_client
from test_tls import make_cert
from test_tls_upstream import TlsUpstream
from extproc_driver import Driver

SATURATED = "vllm:num_requests_waiting 10\nvllm:num_requests_running 4\nvllm:gpu_cache_usage_perc 0.5\n"
IDLE = "vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:gpu_cache_usage_perc 0.1\n"
FAST_PROBE = "probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"
NOPROBE = "probe: { enabled: false, health_interval_ms: 0 }"


class Held(Upstream):
    """Holds every proxied request until `gate` is set, then answers 503 to the first `fail`
    requests it (and the fixtures sharing its `shared` counter) saw, as the fixture does to the
    rest. The test orders events by what the fixture saw, never by sleeping."""

    def __init__(self, name, gate, shared, fail=1):
        super().__init__(name)
        self.metrics_text = IDLE
        self.gate, self.shared, self.fail = gate, shared, fail

    def _answer(self, c, headers, body):
        self.gate.wait(20)
        with self.shared["lock"]:
            self.shared["n"] += 1
            failing = self.shared["n"] <= self.fail
        if failing:
            c.sendall(b"HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            return True
        return super()._answer(c, headers, body)


def metric_value(gw, line_prefix):
    text = http(gw.admin_port, "GET", "/metrics")[2].decode()
    for l in text.splitlines():
        if l.startswith(line_prefix + " "):
            return float(l.rsplit(" ", 1)[1])
    return None


class FallbackTest(unittest.TestCase):
    def setUp(self):
        self.ups = []
        self.gw = None

    def tearDown(self):
        try:
            if self.gw:
                self.gw.close()
        finally:
            for u in self.ups:
                u.close()

    def upstream(self, name, metrics=IDLE):
        u = Upstream(name)
        u.metrics_text = metrics
        self.ups.append(u)
        return u

    def start(self, pools, extra=""):
        def files(d):
            self.access_log = os.path.join(d, "access.log")
            return {"access_log": self.access_log}
        self.gw = Gateway(pools, extra="access_log: {access_log}\n" + extra, pre_start=files)

    def line_for(self, request_id):
        def lines():
            with open(self.access_log) as f:
                return [json.loads(l) for l in f if l.strip()]
        wait_until(lambda: any(l["request_id"] == request_id for l in lines()), 10, "the log line")
        found = [l for l in lines() if l["request_id"] == request_id]
        self.assertEqual(len(found), 1, found)
        return found[0]

    def decision(self, request_id):
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions?id=" + request_id)
        self.assertEqual(st, 200, body)
        page = json.loads(body)["decisions"]
        self.assertEqual(len(page), 1, page)
        return page[0]

    def tls_provider(self):
        """An OpenAI-compatible provider over TLS with a certificate made here: (fixture, cert)."""
        cert, key = make_cert(tempfile.mkdtemp(prefix="sb-fb-"), "provider", "provider")
        provider = TlsUpstream(cert, key)
        provider.metrics_text = IDLE
        self.ups.append(provider)
        return provider, cert

    def wait_saturated(self, *ups):
        wait_until(lambda: all(u.probes >= 3 for u in ups), 10, "saturated reports")

    def test_saturated_pool_falls_back_with_the_model_rewritten(self):
        big = self.upstream("big", SATURATED)
        small = self.upstream("small")
        self.start([{"name": "big", "models": ["big-m"], "endpoints": [big.address],
                     "yaml": [FAST_PROBE, "fallbacks: [{pool: small, model: small-served}]"]},
                    {"name": "small", "models": ["small-m"], "endpoints": [small.address], "yaml": [FAST_PROBE]}],
                   extra="flow_control:\n  max_wait_ms: { standard: 300 }\n")
        self.wait_saturated(big)
        # Sheddable: flow control sheds it at once; the fallback serves it, under its own name.
        st, h, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"),
                           {"x-priority": "sheddable", "x-request-id": "shed-fb"})
        self.assertEqual(st, 200, body)
        self.assertEqual((json.loads(body)["upstream"], json.loads(body)["model"]), ("small", "small-served"))
        line = self.line_for("shed-fb")
        self.assertEqual((line["pool"], line["fallback"], line["fallback_reason"], line["endpoint"], line["model"],
                          line["outcome"]), ("big", "small", "saturated", small.address, "big-m", "ok"))
        d = self.decision("shed-fb")
        self.assertEqual((d["pool"], d["fallback"]), ("small", {"from": "big", "reason": "saturated"}))
        self.assertEqual(d["outcome"]["status"], 200)
        # Standard: queued; its wait (300 ms) expires with the pool still saturated: fallback.
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"),
                           {"x-request-id": "queued-fb"})
        self.assertEqual((st, json.loads(body)["upstream"]), (200, "small"))
        self.assertEqual(self.line_for("queued-fb")["fallback_reason"], "saturated")
        # Its wait in big's queue is counted there, as a released request's is (the shed one
        # never waited: it is not).
        self.assertEqual(metric_value(self.gw, 'switchboard_queue_wait_seconds_count{pool="big"}'), 1)
        self.assertGreaterEqual(metric_value(self.gw, 'switchboard_queue_wait_seconds_sum{pool="big"}'), 0.25)
        self.assertEqual(metric_value(self.gw, 'switchboard_queue_wait_seconds_bucket{pool="big",le="0.1"}'), 0)
        self.assertEqual(metric_value(self.gw, 'switchboard_fallbacks_total{pool="big",fallback="small",'
                                               'reason="saturated"}'), 2)
        self.assertEqual(metric_value(self.gw, 'switchboard_fallbacks_total{pool="big",fallback="small",'
                                               'reason="failed"}'), 0)
        self.assertEqual(len(big.requests), 0, "nothing went to the saturated pool")
        # The fallback pool is still routed directly by its own name, unchanged.
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("small-m"),
                           {"x-request-id": "direct"})
        self.assertEqual((st, json.loads(body)["model"]), (200, "small-m"))
        self.assertNotIn("fallback", self.line_for("direct"))

    def test_saturated_fallback_is_skipped_then_the_original_refusal_stands(self):
        big = self.upstream("big", SATURATED)
        mid = self.upstream("mid", SATURATED)
        last = self.upstream("last")
        lone = self.upstream("lone", SATURATED)
        self.start([{"name": "big", "models": ["big-m"], "endpoints": [big.address],
                     "yaml": [FAST_PROBE, "fallbacks: [mid, last]"]},
                    {"name": "mid", "models": ["mid-m"], "endpoints": [mid.address], "yaml": [FAST_PROBE]},
                    {"name": "last", "models": ["last-m"], "endpoints": [last.address], "yaml": [FAST_PROBE]},
                    {"name": "lone", "models": ["lone-m"], "endpoints": [lone.address],
                     "yaml": [FAST_PROBE, "fallbacks: [mid]"]}])
        self.wait_saturated(big, mid, lone)
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"),
                           {"x-priority": "sheddable", "x-request-id": "skip-1"})
        self.assertEqual(st, 200, body)
        self.assertEqual((json.loads(body)["upstream"], json.loads(body)["model"]), ("last", "last-m"))
        self.assertEqual(self.line_for("skip-1")["fallback"], "last")
        # lone's one fallback is saturated too: lone's own refusal, as without fallbacks.
        st, h, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("lone-m"),
                           {"x-priority": "sheddable", "x-request-id": "none-left"})
        self.assertEqual((st, h["x-switchboard-refusal"]), (429, "shed"))
        line = self.line_for("none-left")
        self.assertEqual((line["pool"], line["outcome"], line["reason"]), ("lone", "refused", "shed"))
        self.assertNotIn("fallback", line)
        self.assertEqual(metric_value(self.gw, 'switchboard_fallbacks_total{pool="big",fallback="mid",'
                                               'reason="saturated"}'), 0)
        self.assertEqual(len(mid.requests) + len(big.requests) + len(lone.requests), 0)

    def test_every_endpoint_failing_falls_back_streamed(self):
        backup = self.upstream("backup")
        dead = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
        self.start([{"name": "p", "models": ["m"], "endpoints": dead,
                     "yaml": ["probe: { enabled: false, health_interval_ms: 0 }", "fallbacks: [q]"]},
                    {"name": "q", "models": ["q-m"], "endpoints": [backup.address]}])
        # A stream: both endpoints refuse the connection (retries spent), then the fallback
        # answers, its events passed on as they come.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m", stream=True),
                     {"x-fixture-mode": "sse", "x-fixture-events": "3", "x-request-id": "stream-fb"})
        st, h, body = read_response(s)
        s.close()
        self.assertEqual(st, 200)
        self.assertEqual(h["content-type"], "text/event-stream")
        self.assertEqual(body.count(b'"upstream": "backup"'), 3)
        self.assertIn(b"[DONE]", body)
        self.assertEqual(json.loads(backup.requests[-1][3])["model"], "q-m")
        line = self.line_for("stream-fb")
        self.assertEqual((line["pool"], line["fallback"], line["fallback_reason"], line["status"], line["stream"]),
                         ("p", "q", "failed", 200, True))
        self.assertEqual(line["retries"], 1, "the pool's own retry came first")
        d = self.decision("stream-fb")
        self.assertEqual(d["fallback"], {"from": "p", "reason": "failed"})
        self.assertEqual(metric_value(self.gw, 'switchboard_fallbacks_total{pool="p",fallback="q",reason="failed"}'), 1)

    def test_last_endpoint_answering_5xx_falls_back(self):
        class Failing(Upstream):
            def _answer(self, c, headers, body):
                with self.lock:
                    self.failed = getattr(self, "failed", 0) + 1
                c.sendall(b"HTTP/1.1 503 X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                return True
        bad = Failing("bad")
        bad.metrics_text = IDLE
        self.ups.append(bad)
        good = self.upstream("good")
        self.start([{"name": "p", "models": ["m"], "endpoints": [bad.address],
                     "yaml": ["probe: { enabled: false, health_interval_ms: 0 }", "fallbacks: [q]"]},
                    {"name": "q", "models": ["q-m"], "endpoints": [good.address]}])
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "5xx"})
        self.assertEqual((st, json.loads(body)["upstream"]), (200, "good"))
        self.assertEqual(bad.failed, 1)
        self.assertEqual(self.line_for("5xx")["fallback_reason"], "failed")

    def test_pool_without_available_endpoint_falls_back(self):
        up = self.upstream("up")
        backup = self.upstream("backup")
        self.start([{"name": "p", "models": ["m"], "endpoints": [{"address": up.address, "draining": True}],
                     "yaml": ["fallbacks: [q]"]},
                    {"name": "q", "models": ["q-m"], "endpoints": [backup.address]}])
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "unav"})
        self.assertEqual((st, json.loads(body)["upstream"]), (200, "backup"))
        self.assertEqual(self.line_for("unav")["fallback_reason"], "unavailable")
        self.assertEqual(len(up.requests), 0)

    def test_external_provider_over_https_with_its_own_key(self):
        provider, cert = self.tls_provider()
        dead = "127.0.0.1:%d" % free_port()
        self.start([{"name": "local", "models": ["llama"], "endpoints": [dead],
                     "yaml": ["probe: { enabled: false, health_interval_ms: 0 }",
                              "fallbacks: [{pool: openai, model: gpt-4o-mini}]"]},
                    {"name": "openai", "models": ["openai-fallback"],
                     "endpoints": ["https://localhost:%d" % provider.port],
                     "yaml": ["tls: { ca_file: %s }" % cert, "upstream_api_key: sk-provider-secret",
                              "probe: { enabled: false, health_interval_ms: 0 }"]}])
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("llama"),
                           {"Authorization": "Bearer sk-client-key", "x-request-id": "prov"})
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["model"], "gpt-4o-mini")
        headers = provider.requests[-1][2]
        self.assertEqual(headers["authorization"], "Bearer sk-provider-secret")
        self.assertNotIn(b"sk-client-key", json.dumps(headers).encode() + provider.requests[-1][3])
        self.assertEqual(provider.probes, 0, "a provider pool is never probed")
        self.assertEqual(provider.sni[-1], "localhost")
        line = self.line_for("prov")
        self.assertEqual((line["pool"], line["fallback"], line["fallback_reason"]), ("local", "openai", "failed"))

    def test_kind_provider_pool_is_never_probed_and_routes_least_request(self):
        # `kind: provider` alone says what the probe lines said above: no scrape, no /health;
        # reached by its own model name and as a fallback; with auth on, its own key is sent.
        provider, cert = self.tls_provider()
        dead = "127.0.0.1:%d" % free_port()
        self.start([{"name": "local", "models": ["llama"], "endpoints": [dead],
                     "yaml": [NOPROBE, "fallbacks: [{pool: openai, model: gpt-4o-mini}]"]},
                    {"name": "openai", "models": ["openai-direct"], "profile": None,
                     "endpoints": ["https://localhost:%d" % provider.port],
                     "yaml": ["kind: provider", "tls: { ca_file: %s }" % cert,
                              "upstream_api_key: sk-provider-secret"]}],
                   extra="auth: { api_keys: [sk-client-key] }\n")
        for model, rid in (("openai-direct", "direct"), ("llama", "fb")):
            st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body(model),
                               {"Authorization": "Bearer sk-client-key", "x-request-id": rid})
            self.assertEqual(st, 200, body)
            self.assertEqual(provider.requests[-1][2]["authorization"], "Bearer sk-provider-secret")
        self.assertEqual(json.loads(body)["model"], "gpt-4o-mini")
        self.assertEqual(self.decision("direct")["profile"], "least-request")
        self.assertEqual(self.line_for("fb")["fallback"], "openai")
        # Probes would have come by now: the local pool's dead endpoint was tried twice, and a
        # scrape runs every 100 ms, a health check at start.
        self.assertEqual(provider.probes, 0, "a provider pool is never probed")

    def test_kind_provider_without_its_own_key_is_refused_with_auth_on(self):
        cfg = os.path.join(tempfile.mkdtemp(prefix="sb-fb-"), "gw.yaml")
        with open(cfg, "w") as f:
            f.write("auth: { api_keys: [sk-client-key] }\n"
                    "pools:\n"
                    "  - name: openai\n"
                    "    kind: provider\n"
                    "    models: [gpt]\n"
                    "    endpoints: [\"https://api.example.com\"]\n")
        p = subprocess.run([GATEWAY_BIN, "check", "-c", cfg], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("a provider pool needs its own upstream_api_key", p.stdout + p.stderr)
        self.assertIn(":4:", p.stdout + p.stderr)

    def provider_behind_unavailable_pool(self):
        provider, cert = self.tls_provider()
        up = self.upstream("local")
        self.start([{"name": "local", "models": ["llama"], "endpoints": [{"address": up.address, "draining": True}],
                     "yaml": [NOPROBE, "fallbacks: [{pool: openai, model: gpt-4o-mini}]"]},
                    {"name": "openai", "models": ["openai-fallback"],
                     "endpoints": ["https://localhost:%d" % provider.port],
                     "yaml": ["tls: { ca_file: %s }" % cert, "upstream_api_key: sk-provider-secret", NOPROBE]}])
        return provider, up

    def test_http2_client_falls_back_to_an_https_pool(self):
        # Every HTTP/2 stream carries request ops (not the picker's): it is proxied, so an
        # https:// fallback is open to it as to HTTP/1.1 (before: passed over, 503).
        provider, up = self.provider_behind_unavailable_pool()
        out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "-", "-w", "\n%{http_version} %{http_code}",
                              "-H", "content-type: application/json", "-H", "x-request-id: h2",
                              "--data", json.dumps(chat_body("llama")),
                              "http://127.0.0.1:%d/v1/chat/completions" % self.gw.port],
                             capture_output=True, text=True, timeout=20).stdout
        self.assertTrue(out.endswith("\n2 200"), out)
        self.assertEqual(json.loads(out.rsplit("\n", 1)[0])["model"], "gpt-4o-mini")
        self.assertEqual(len(provider.requests), 1)
        self.assertEqual(len(up.requests), 0)
        line = self.line_for("h2")
        self.assertEqual((line["pool"], line["fallback"], line["fallback_reason"]), ("local", "openai", "unavailable"))

    def timeout_setup(self, retry=""):
        slow = self.upstream("slow")
        backup = self.upstream("backup")
        self.start([{"name": "p", "models": ["m"], "endpoints": [slow.address], "yaml": [NOPROBE, "fallbacks: [q]"]},
                    {"name": "q", "models": ["q-m"], "endpoints": [backup.address], "yaml": [NOPROBE]}],
                   extra="timeouts: { response_ms: 300 }\n" + retry)
        return slow, backup

    def test_response_timeout_is_not_sent_to_a_fallback_unless_retry_on_has_it(self):
        # retry.on without `timeout` (the default): the request may be running on `slow`; a
        # fallback would run it a second time (a paid provider twice). Answered 504 instead.
        slow, backup = self.timeout_setup()
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                           {"x-request-id": "slow", "x-fixture-head-delay-ms": "1000"})
        self.assertEqual(st, 504, body)
        self.assertEqual(len(backup.requests), 0, "sent again after a response timeout")
        line = self.line_for("slow")
        self.assertNotIn("fallback", line)
        self.assertEqual(line["reason"], "upstream_timeout")

    def test_response_timeout_falls_back_when_retry_on_has_it(self):
        slow, backup = self.timeout_setup("retry: { on: [connect-failure, reset, timeout, 503] }\n")
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                           {"x-request-id": "slow-ok", "x-fixture-head-delay-ms": "1000"})
        # backup sleeps as well (the header goes with the request): 1000 ms > response_ms, so
        # the fallback times out too; what matters is that it was asked.
        self.assertEqual(len(backup.requests), 1, body)
        self.assertEqual(st, 504, body)

    def test_reset_is_sent_to_a_fallback_only_when_retry_on_has_it(self):
        class Closing(Upstream):  # reads the request, closes without a byte of answer
            def _answer(self, c, headers, body):
                return False
        for retry_on, want in (("[connect-failure, 503]", 502), ("[connect-failure, reset, 503]", 200)):
            with self.subTest(retry_on=retry_on):
                closing = Closing("closing")
                closing.metrics_text = IDLE
                self.ups.append(closing)
                backup = self.upstream("backup")
                self.start([{"name": "p", "models": ["m"], "endpoints": [closing.address],
                             "yaml": [NOPROBE, "fallbacks: [q]"]},
                            {"name": "q", "models": ["q-m"], "endpoints": [backup.address], "yaml": [NOPROBE]}],
                           extra="retry: { on: %s }\n" % retry_on)
                st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))
                self.assertEqual((st, len(backup.requests)), (want, 1 if want == 200 else 0), body)
                self.gw.close()
                self.gw = None

    def test_malformed_answer_is_not_sent_to_a_fallback(self):
        # The endpoint read the request and answered something that is not HTTP: it may have
        # run it. Never retried, so never resent to a fallback either: 502.
        class Garbage(Upstream):
            def _answer(self, c, headers, body):
                c.sendall(b"this is not HTTP\r\n\r\n")
                return False
        bad = Garbage("bad")
        bad.metrics_text = IDLE
        self.ups.append(bad)
        backup = self.upstream("backup")
        self.start([{"name": "p", "models": ["m"], "endpoints": [bad.address], "yaml": [NOPROBE, "fallbacks: [q]"]},
                    {"name": "q", "models": ["q-m"], "endpoints": [backup.address], "yaml": [NOPROBE]}])
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "junk"})
        self.assertEqual(st, 502, body)
        self.assertEqual(len(backup.requests), 0)
        self.assertEqual(self.line_for("junk")["reason"], "bad_upstream_response")

    def test_retry_in_a_fallback_after_two_reloads(self):
        # The fallback's profile was a pointer into the configuration in force when it fell back,
        # which the exchange does not hold: a second reload freed it, and the retry in the fallback
        # pool read freed memory (AddressSanitizer). Now: the pool's current profile at each pick.
        gate_a, gate_b = threading.Event(), threading.Event()
        shared_a, shared_b = {"lock": threading.Lock(), "n": 0}, {"lock": threading.Lock(), "n": 0}
        a1 = Held("a1", gate_a, shared_a)
        b1, b2 = Held("b1", gate_b, shared_b), Held("b2", gate_b, shared_b)
        self.ups += [a1, b1, b2]
        prof = "profiles:\n  pb:\n    filters: [healthy]\n    scorers: { in-flight: 3, queue: 1 }\n"
        self.start([{"name": "a", "models": ["m"], "endpoints": [a1.address], "yaml": [NOPROBE, "fallbacks: [b]"]},
                    {"name": "b", "models": ["b-m"], "profile": "pb", "endpoints": [b1.address, b2.address],
                     "yaml": [NOPROBE]}], extra=prof)
        cfg = open(self.gw.config_path).read()
        res = {}

        def client():
            try:
                res["r"] = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                                {"x-request-id": "twice"}, timeout=30)
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                res["r"] = repr(e)

        def reload(i):
            with open(self.gw.config_path, "w") as f:
                f.write(cfg.replace("in-flight: 3", "in-flight: %d" % (3 + i)))
            self.gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "configuration reloaded (%d)" % i in open(self.gw.log_path).read(), 10, "reload")

        th = threading.Thread(target=client)
        th.start()
        try:
            wait_until(lambda: len(a1.requests) == 1, 10, "the request in pool a")
            reload(1)
            gate_a.set()  # a answers 503: the request falls back to b under configuration 1
            wait_until(lambda: len(b1.requests) + len(b2.requests) == 1, 10, "the request in pool b")
            reload(2)  # configuration 1 is freed: nothing holds it
            gate_b.set()  # b's first endpoint answers 503: the retry picks in b
        finally:
            gate_a.set()
            gate_b.set()
            th.join(30)
        log = open(self.gw.log_path).read()
        self.assertNotIn("AddressSanitizer", log)
        st, _, body = res["r"]
        self.assertEqual(st, 200, body)
        self.assertEqual(len(b1.requests) + len(b2.requests), 2, "the retry went to b's other endpoint")
        line = self.line_for("twice")
        self.assertEqual((line["fallback"], line["retries"]), ("b", 1))

    def test_fallback_counted_by_name_after_a_reload_reorders_the_list(self):
        # The request runs under its snapshot (fallbacks [b, c]) and falls back to b; the reload
        # made the list [c, b] meanwhile. Counted by position, b's move showed as c's.
        gate, shared = threading.Event(), {"lock": threading.Lock(), "n": 0}
        a1 = Held("a1", gate, shared)
        self.ups.append(a1)
        b, c = self.upstream("b"), self.upstream("c")
        self.start([{"name": "a", "models": ["m"], "endpoints": [a1.address], "yaml": [NOPROBE, "fallbacks: [b, c]"]},
                    {"name": "b", "models": ["b-m"], "endpoints": [b.address], "yaml": [NOPROBE]},
                    {"name": "c", "models": ["c-m"], "endpoints": [c.address], "yaml": [NOPROBE]}])
        res = {}
        th = threading.Thread(target=lambda: res.setdefault("r", http(
            self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "moved"}, timeout=30)))
        th.start()
        try:
            wait_until(lambda: len(a1.requests) == 1, 10, "the request in pool a")
            with open(self.gw.config_path) as f:
                cfg = f.read()
            with open(self.gw.config_path, "w") as f:
                f.write(cfg.replace("fallbacks: [b, c]", "fallbacks: [c, b]"))
            self.gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "configuration reloaded (1)" in open(self.gw.log_path).read(), 10, "the reload")
        finally:
            gate.set()
            th.join(30)
        st, _, body = res["r"]
        self.assertEqual((st, json.loads(body)["upstream"]), (200, "b"))
        self.assertEqual(self.line_for("moved")["fallback"], "b")
        self.assertEqual(metric_value(self.gw, 'switchboard_fallbacks_total{pool="a",fallback="b",reason="failed"}'), 1)
        self.assertIn(metric_value(self.gw, 'switchboard_fallbacks_total{pool="a",fallback="c",reason="failed"}'),
                      (None, 0))

    def test_reload_that_removes_the_fallback_pool(self):
        big = self.upstream("big", SATURATED)
        small = self.upstream("small")
        self.start([{"name": "big", "models": ["big-m"], "endpoints": [big.address],
                     "yaml": [FAST_PROBE, "fallbacks: [small]"]},
                    {"name": "small", "models": ["small-m"], "endpoints": [small.address], "yaml": [FAST_PROBE]}])
        self.wait_saturated(big)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"), {"x-priority": "sheddable"})
        self.assertEqual(st, 200)
        # Without the pool, the fallback naming it is refused at load: the reload keeps the
        # running configuration.
        cfg = open(self.gw.config_path).read()
        lines = cfg.splitlines()
        at = lines.index("  - name: small")
        without_pool = "\n".join(lines[:at]) + "\n"
        with open(self.gw.config_path, "w") as f:
            f.write(without_pool)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "fallback 'small' is not a pool of this file" in open(self.gw.log_path).read(), 10,
                   "the refused reload")
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"), {"x-priority": "sheddable"})
        self.assertEqual(st, 200, "the running configuration still falls back")
        # Both removed: the reload applies, and big's refusal is its own again.
        with open(self.gw.config_path, "w") as f:
            f.write(without_pool.replace("    fallbacks: [small]\n", ""))
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded (1)" in open(self.gw.log_path).read(), 10, "the reload")
        self.wait_saturated(big)
        wait_until(lambda: http(self.gw.port, "POST", "/v1/chat/completions", chat_body("big-m"),
                                {"x-priority": "sheddable"})[0] == 429, 10, "the refusal without fallbacks")
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertNotIn("switchboard_fallbacks_total{", text)
        self.assertEqual(len(big.requests), 0)


class PickerFallbackTest(PickerCase):
    """Through the endpoint picker (Envoy's ext_proc): a pool with no endpoint available falls
    back to another pool of the gateway, Envoy getting that pool's endpoint and the body with
    the fallback's model; a provider pool (https://, its own key) is passed over there, since
    Envoy would reach it with its own cluster and the client's headers."""

    def setUp(self):
        super().setUp()
        self.gw = self.drv = None
        self.up = Upstream("backup")
        require_client(self)
        ext_port = free_port()
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [{"address": self.up.address, "draining": True}],
                            "yaml": ["fallbacks: [{pool: openai, model: gpt-4o-mini}, q]"]},
                           {"name": "openai", "models": ["openai-m"],
                            "endpoints": ["https://localhost:%d" % free_port()],
                            "yaml": ["upstream_api_key: sk-provider", "probe: { enabled: false, health_interval_ms: 0 }"]},
                           {"name": "q", "models": ["q-m"], "endpoints": [self.up.address]}],
                          extra='ext_proc: { listen: "127.0.0.1:%d" }' % ext_port)
        wait_until(lambda: _can_connect(ext_port), 15, "the ext_proc listener")
        self.drv = Driver(ext_port)

    def tearDown(self):
        try:
            self.cancel_open()
            if self.drv:
                self.drv.close()
            if self.gw:
                self.gw.close()
        finally:
            self.up.close()

    def test_picker_falls_back_to_a_pool_of_the_gateway(self):
        sid, picked = self.request_phase(chat_body("m"))
        self.assertIsNone(picked.immediate, picked.responses)
        self.assertEqual(picked.endpoints, [self.up.address])
        self.assertEqual(json.loads(picked.body)["model"], "q-m")
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn('switchboard_fallbacks_total{pool="p",fallback="q",reason="unavailable"} 1', text)
        self.assertIn('switchboard_fallbacks_total{pool="p",fallback="openai",reason="unavailable"} 0', text)


if __name__ == "__main__":
    unittest.main()
