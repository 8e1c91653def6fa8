"""Decisions you can look up (issue 16, item 5): the gateway keeps a bounded ring of recent
routing decisions (admin.decisions), each found by its request id at /debug/decisions?id=..,
named by pool and endpoint address, with per-scorer scores and how the request ended; the
request id is in every answer's x-request-id and in the access log line, so an operator goes
from a slow request to why it went where it went."""
import json
import os
import time
import unittest

from fixtures import Gateway, Upstream, chat_body, free_port, http, wait_until


def decisions(gw, query="", headers=None):
    st, _, body = http(gw.admin_port, "GET", "/debug/decisions" + query, headers=headers)
    return st, json.loads(body) if body else None


def settled(gw, rid):
    """The decision of request rid once its outcome is recorded: that happens when the exchange
    ends, which may trail the client's answer by a loop turn (a write to an endpoint still
    completing, a connection closing)."""
    wait_until(lambda: decisions(gw, "?id=" + rid)[1]["decisions"][0]["outcome"] is not None,
               what="the outcome of " + rid)
    return decisions(gw, "?id=" + rid)[1]["decisions"][0]


class LookupTest(unittest.TestCase):
    """Two endpoints under `default` (filters, weighted scorers), the access log with decisions."""

    def setUp(self):
        self.ups = [Upstream("u0"), Upstream("u1")]
        self.gw = Gateway([{"name": "chat", "models": ["m"], "profile": "default",
                            "endpoints": [u.address for u in self.ups]},
                           {"name": "other", "models": ["m2"], "profile": "round-robin",
                            "endpoints": [self.ups[0].address]}],
                          extra='access_log: "{log}"\naccess_log_decisions: true',
                          pre_start=lambda d: {"log": os.path.join(d, "access.log")})
        self.addrs = [u.address for u in self.ups]

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            for u in self.ups:
                u.close()

    def access_log(self):
        with open(os.path.join(self.gw.dir, "access.log")) as f:
            return [json.loads(line) for line in f if line.strip()]

    def test_client_id_kept_and_looked_up(self):
        before = time.time() * 1000
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m", "hello"),
                        {"x-request-id": "client-abc-123"})
        self.assertEqual(st, 200)
        self.assertEqual(h["x-request-id"], "client-abc-123", "a client's valid id is kept")
        settled(self.gw, "client-abc-123")
        st, page = decisions(self.gw, "?id=client-abc-123")
        self.assertEqual(st, 200)
        self.assertEqual(len(page["decisions"]), 1)
        d = page["decisions"][0]
        self.assertEqual(d["id"], "client-abc-123")
        self.assertEqual((d["pool"], d["model"], d["profile"]), ("chat", "m", "default"))
        self.assertGreaterEqual(d["at_ms"], before - 1000)
        self.assertLessEqual(d["at_ms"], time.time() * 1000 + 1000)
        self.assertIn(d["picked"], self.addrs)
        self.assertEqual([c["endpoint"] for c in d["candidates"]], self.addrs, "names, in pool order")
        kept = [c for c in d["candidates"] if "removed_by" not in c]
        self.assertTrue(kept)
        for c in kept:
            self.assertIsInstance(c["total"], float)
            self.assertIn("queue", c["scores"], "per-scorer scores by name: %s" % c)
            self.assertIsInstance(c["stale"], bool)
        o = d["outcome"]
        self.assertEqual((o["status"], o["attempts"], o["served_by"]), (200, 1, d["picked"]))
        self.assertGreaterEqual(o["ttft_ms"], 0)
        # The same request in the access log: its id, and the decision by names.
        line = [x for x in self.access_log() if x["request_id"] == "client-abc-123"][0]
        self.assertEqual(line["decision"]["pool"], "chat")
        self.assertEqual(line["decision"]["picked"], d["picked"])
        self.assertEqual(line["decision"]["candidates"][0]["endpoint"], self.addrs[0])

    def test_generated_id_looked_up(self):
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m", "no id"))
        self.assertEqual(st, 200)
        rid = h["x-request-id"]
        self.assertTrue(rid)
        st, page = decisions(self.gw, "?id=" + rid)
        self.assertEqual(st, 200)
        self.assertEqual(page["decisions"][0]["id"], rid)
        # The upstream saw the same id: the model server's logs meet the gateway's.
        seen = [r[2].get("x-request-id") for u in self.ups for r in u.requests]
        self.assertIn(rid, seen)
        wait_until(lambda: any(x["request_id"] == rid for x in self.access_log()), 5, "the access log line")

    def test_newest_first_pool_filter_and_limit(self):
        for i in range(3):
            http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m", "a%d" % i), {"x-request-id": "c%d" % i})
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m2", "b"), {"x-request-id": "o0"})
        st, page = decisions(self.gw)
        self.assertEqual(st, 200)
        self.assertEqual([d["id"] for d in page["decisions"]], ["o0", "c2", "c1", "c0"])
        st, page = decisions(self.gw, "?pool=chat")
        self.assertEqual([d["id"] for d in page["decisions"]], ["c2", "c1", "c0"])
        st, page = decisions(self.gw, "?pool=chat&limit=2")
        self.assertEqual([d["id"] for d in page["decisions"]], ["c2", "c1"])
        st, page = decisions(self.gw, "?limit=1")
        self.assertEqual([d["id"] for d in page["decisions"]], ["o0"])
        self.assertEqual(page["decisions"][0]["pool"], "other")
        st, page = decisions(self.gw, "?pool=nosuch")
        self.assertEqual((st, page["decisions"]), (200, []))

    def test_bad_queries_refused(self):
        for q in ("?verbose=1", "?limit=0", "?limit=abc", "?limit=-3", "?limit=1&limit=2", "?id=",
                  "?id=%zz", "?id=x&limit=2", "?pool"):
            st, page = decisions(self.gw, q)
            self.assertEqual(st, 400, q)
            self.assertEqual(page["error"]["code"], "bad_query", q)
        st, page = decisions(self.gw, "?id=never-seen")
        self.assertEqual(st, 404)
        self.assertIn("unknown, or it has left the ring", page["error"]["message"])

    def test_request_id_on_the_gateways_own_answers(self):
        # 400 (malformed body), 404 (unknown model): the gateway's own errors carry the id too,
        # the client's when it sent a valid one.
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", b"{not json", {"x-request-id": "bad-1"})
        self.assertEqual((st, h.get("x-request-id")), (400, "bad-1"))
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("nope"), {"x-request-id": "nf-1"})
        self.assertEqual((st, h.get("x-request-id")), (404, "nf-1"))
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("nope"))
        self.assertEqual(st, 404)
        self.assertTrue(h.get("x-request-id"))
        # An id that is not sane (a blank, too long) is replaced, never echoed.
        st, h, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "a" * 300})
        self.assertEqual(st, 200)
        self.assertNotEqual(h["x-request-id"], "a" * 300)


class OutcomeTest(unittest.TestCase):
    def test_retry_served_elsewhere_and_504(self):
        """A pick whose endpoint refuses connections is retried elsewhere: the record keeps the
        first decision (picked: the dead one) and its outcome says who served, after how many
        attempts. A response timeout answers 504, with the request's id, and records it."""
        dead = "127.0.0.1:%d" % free_port()
        up = Upstream("live")
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin", "endpoints": [dead, up.address]},
                      {"name": "drained", "models": ["md"], "profile": "default",
                       "endpoints": [{"address": up.address, "draining": True}]}],
                     extra="timeouts: { response_ms: 400 }\nretry: { backoff_ms: 1, max_backoff_ms: 1 }")
        try:
            ids = ["rr-%d" % i for i in range(2)]
            for rid in ids:
                st, h, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", rid), {"x-request-id": rid})
                self.assertEqual((st, h["x-request-id"]), (200, rid))
            recs = [settled(gw, rid) for rid in ids]
            # Round robin's cursor moves with the retry's pick too: the dead one may come first
            # every time. Whoever was picked, the outcome names who served.
            self.assertIn(dead, [d["picked"] for d in recs], recs)
            for d in recs:
                o = d["outcome"]
                want = 2 if d["picked"] == dead else 1
                self.assertEqual((o["status"], o["attempts"], o["served_by"]), (200, want, up.address), d)
            # 504: the live endpoint says nothing (the dead one is tried and excluded first, or
            # after: either way the answer is the timeout's).
            for i in range(2):
                st, h, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "slow"),
                                {"x-request-id": "slow-%d" % i, "x-fixture-mode": "silent"}, timeout=15)
                self.assertEqual((st, h.get("x-request-id")), (504, "slow-%d" % i))
                o = settled(gw, "slow-%d" % i)["outcome"]
                self.assertEqual(o["status"], 504)
                self.assertIsNone(o["ttft_ms"])
            # 503: no endpoint may take it (every one draining), with the id.
            st, h, body = http(gw.port, "POST", "/v1/chat/completions", chat_body("md"), {"x-request-id": "none-1"})
            self.assertEqual((st, h.get("x-request-id")), (503, "none-1"), body)
        finally:
            gw.close()
            up.close()

    def test_failed_retry_does_not_name_the_first_endpoint(self):
        """Issue 16: attempt 1 to A answers 503 (retryable: its answer is dropped), the retry to
        B fails to connect. The client gets the gateway's 502; neither the outcome nor the access
        log may say B answered 503 (once A's status was kept while the endpoint was B's)."""
        dead = "127.0.0.1:%d" % free_port()
        up = Upstream("live")
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin", "endpoints": [up.address, dead]}],
                     extra='retry: { on: [connect-failure, 503], backoff_ms: 1, max_backoff_ms: 1 }\n'
                           'access_log: "{log}"',
                     pre_start=lambda d: {"log": os.path.join(d, "access.log")})
        try:
            seen = {}
            for i in range(6):
                rid = "r503-%d" % i
                st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", rid),
                                {"x-request-id": rid, "x-fixture-mode": "status", "x-fixture-status": "503"})
                d = settled(gw, rid)
                seen[rid] = (st, d)
            first_live = [(rid, st, d) for rid, (st, d) in seen.items() if d["picked"] == up.address]
            self.assertTrue(first_live, seen)
            with open(os.path.join(gw.dir, "access.log")) as f:
                log = {x["request_id"]: x for x in (json.loads(l) for l in f if l.strip())}
            for rid, st, d in first_live:
                o = d["outcome"]
                line = log[rid]
                if o["attempts"] == 2:
                    # A's 503 was dropped for the retry, and B never answered.
                    self.assertEqual((st, o["status"], o["served_by"]), (502, 502, None), d)
                    self.assertEqual((line["status"], line["upstream_status"]), (502, 0), line)
                    self.assertEqual(line["endpoint"], dead, line)
                else:
                    # Not retried (B out of the running): A's own 503, passed through, named as A's.
                    self.assertEqual((st, o["status"], o["served_by"]), (503, 503, up.address), d)
                    self.assertEqual((line["status"], line["upstream_status"], line["endpoint"]),
                                     (503, 503, up.address), line)
            self.assertIn(2, [d["outcome"]["attempts"] for _, _, d in first_live], seen)
        finally:
            gw.close()
            up.close()

    def test_eviction_after_capacity(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin", "endpoints": [up.address]}],
                     admin="decisions: 4")
        try:
            for i in range(6):
                self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "e"),
                                      {"x-request-id": "e%d" % i})[0], 200)
            st, page = decisions(gw)
            self.assertEqual([d["id"] for d in page["decisions"]], ["e5", "e4", "e3", "e2"])
            for rid in ("e0", "e1"):
                st, page = decisions(gw, "?id=" + rid)
                self.assertEqual(st, 404, rid)
                self.assertIn("left the ring of the last 4", page["error"]["message"])
            self.assertEqual(decisions(gw, "?id=e2")[0], 200)
            # A limit past the ring is clamped to it (a client cannot know the ring's size: the
            # dashboard asks for 50), and the listing says how many the ring holds.
            for q in ("?limit=4", "?limit=5", "?limit=50", "?limit=100000"):
                st, page = decisions(gw, q)
                self.assertEqual(st, 200, q)
                self.assertEqual([d["id"] for d in page["decisions"]], ["e5", "e4", "e3", "e2"], q)
                self.assertEqual(page["capacity"], 4, q)
            self.assertEqual(decisions(gw, "?limit=0")[0], 400)
        finally:
            gw.close()
            up.close()

    def test_off_and_token(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin", "endpoints": [up.address]}],
                     admin="decisions: 0, token: s3cret")
        try:
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                                  {"x-request-id": "off-1"})[0], 200)
            st, _ = decisions(gw)
            self.assertEqual(st, 401, "the admin token guards the page")
            auth = {"Authorization": "Bearer s3cret"}
            st, page = decisions(gw, headers=auth)
            self.assertEqual((st, page), (200, {"decisions": [], "capacity": 0}))
            # What the dashboard asks, whatever the ring's size: an empty answer, not a 400.
            st, page = decisions(gw, "?limit=50", headers=auth)
            self.assertEqual((st, page), (200, {"decisions": [], "capacity": 0}))
            self.assertEqual(decisions(gw, "?limit=0", headers=auth)[0], 400)
            st, page = decisions(gw, "?id=off-1", headers=auth)
            self.assertEqual(st, 404)
            self.assertIn("admin.decisions: 0", page["error"]["message"])
        finally:
            gw.close()
            up.close()

    def test_reload_keeps_the_ring_and_outcomes(self):
        """A reload that replaces the gateway (an endpoint added) keeps the ring: decisions made
        before it stay, and a request running across it gets its outcome."""
        ups = [Upstream("a"), Upstream("b")]
        gw = Gateway([{"name": "p", "models": ["m"], "profile": "round-robin", "endpoints": [ups[0].address]}])
        try:
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                                  {"x-request-id": "before"})[0], 200)
            import socket
            import signal
            from fixtures import read_response, send_request
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            send_request(s, "POST", "/v1/chat/completions", chat_body("m", stream=True),
                         {"x-request-id": "across", "x-fixture-mode": "sse", "x-fixture-events": "4",
                          "x-fixture-delay-ms": "300"})
            wait_until(lambda: decisions(gw, "?id=across")[0] == 200, 5, "the running request's decision")
            with open(gw.config_path) as f:
                text = f.read()
            with open(gw.config_path, "w") as f:
                f.write(text.replace(json.dumps([ups[0].address]), json.dumps([ups[0].address, ups[1].address])))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: len(decisions(gw, "?pool=p")[1]["decisions"]) >= 2 and
                       http(gw.admin_port, "GET", "/debug/endpoints")[2].count(b"127.0.0.1:") >= 2, 10,
                       "the reload to apply")
            st, _, body = read_response(s)
            s.close()
            self.assertEqual(st, 200)
            self.assertEqual(decisions(gw, "?id=before")[0], 200, "decisions before the reload are kept")
            wait_until(lambda: decisions(gw, "?id=across")[1]["decisions"][0]["outcome"] is not None, 5,
                       "the outcome of the request that ran across the reload")
            self.assertEqual(decisions(gw, "?id=across")[1]["decisions"][0]["outcome"]["status"], 200)
        finally:
            gw.close()
            for u in ups:
                u.close()


if __name__ == "__main__":
    unittest.main()
