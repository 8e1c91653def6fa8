"""The live data path: the built gateway in front of scriptable upstreams on loopback."""
import json
import socket
import unittest

from fixtures import (Gateway, Upstream, chat_body, free_port, http, read_head, read_response, send_request,
                      wait_until)


class GatewayTest(unittest.TestCase):
    def setUp(self):
        self.up1 = Upstream("u1")
        self.up2 = Upstream("u2")
        self.up3 = Upstream("q1")
        self.dead_port = free_port()  # nothing listens here
        self.gw = Gateway([
            {"name": "m1", "models": ["org/model-one", "m1"], "adapters": ["lora-a"],
             "endpoints": [self.up1.address, self.up2.address]},
            {"name": "m2", "models": ["org/model-two"], "endpoints": [self.up3.address]},
            {"name": "flaky", "models": ["flaky"], "profile": "round-robin",
             "endpoints": ["127.0.0.1:%d" % self.dead_port, self.up3.address]},
        ], extra="limits: { max_body_bytes: 65536 }\ntimeouts: { connect_ms: 500 }")

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            for u in (self.up1, self.up2, self.up3):
                u.close()

    def post(self, body, headers=None, path="/v1/chat/completions"):
        return http(self.gw.port, "POST", path, body, headers)

    def test_non_streaming_roundtrip(self):
        st, h, body = self.post(chat_body("org/model-one"))
        self.assertEqual(st, 200)
        j = json.loads(body)
        self.assertIn(j["upstream"], ("u1", "u2"))
        self.assertEqual(j["model"], "org/model-one")
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(j["orca"], "TEXT", "gateway asks upstreams for ORCA load reports")

    def test_model_picks_pool(self):
        for _ in range(6):
            st, _, body = self.post(chat_body("org/model-two"))
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(body)["upstream"], "q1")
        seen = {json.loads(self.post(chat_body("m1"))[2])["upstream"] for _ in range(6)}
        self.assertEqual(seen, {"u1", "u2"}, "round robin spreads over the pool, never outside it")

    def test_alias_rewritten_to_served_name(self):
        body = json.dumps(chat_body("m1", text="alias test")).encode()
        st, _, out = self.post(body)
        self.assertEqual(st, 200)
        j = json.loads(out)
        self.assertEqual(j["model"], "org/model-one")
        self.assertEqual(j["body_len"], len(body) + len("org/model-one") - len("m1"))
        up = self.up1 if j["upstream"] == "u1" else self.up2
        sent = json.loads(up.requests[-1][3])
        self.assertEqual(sent["messages"][1]["content"], "alias test")

    def test_adapter_forwarded_as_is(self):
        st, _, out = self.post(chat_body("lora-a"))
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(out)["model"], "lora-a")

    def test_completions_embeddings_responses_routes(self):
        for path, body in (("/v1/completions", {"model": "org/model-two", "prompt": ["a", "b"]}),
                           ("/v1/embeddings", {"model": "org/model-two", "input": "x"}),
                           ("/v1/responses", {"model": "org/model-two", "input": "x", "instructions": "y"})):
            st, _, out = self.post(body, path=path)
            self.assertEqual(st, 200, path)
            self.assertEqual(self.up3.requests[-1][1], path)

    def test_errors_are_openai_shaped(self):
        cases = [
            (b"{not json", 400, "invalid_request_error", None),
            (b'{"messages": []}', 400, "invalid_request_error", None),
            (b'{"model": 5}', 400, "invalid_request_error", None),
            (json.dumps(chat_body("no-such-model")).encode(), 404, "invalid_request_error", "model_not_found"),
        ]
        for body, status, etype, code in cases:
            st, h, out = self.post(body)
            self.assertEqual(st, status, body)
            err = json.loads(out)["error"]
            self.assertEqual(err["type"], etype)
            self.assertEqual(err["code"], code)
            self.assertIn("message", err)
            self.assertIn("param", err)

    def test_body_too_large_is_413(self):
        big = json.dumps(chat_body("m1", text="x" * 70000)).encode()
        st, h, out = self.post(big)
        self.assertEqual(st, 413)
        self.assertIn("too large", json.loads(out)["error"]["message"])
        self.assertEqual(len(self.up1.requests) + len(self.up2.requests), 0)

    def test_unknown_path_404_and_wrong_method_405(self):
        st, _, _ = http(self.gw.port, "POST", "/v1/nope", b"{}")
        self.assertEqual(st, 404)
        st, h, _ = http(self.gw.port, "GET", "/v1/chat/completions")
        self.assertEqual(st, 405)
        self.assertEqual(h["allow"], "POST")

    def test_models_and_healthz(self):
        st, _, out = http(self.gw.port, "GET", "/v1/models")
        self.assertEqual(st, 200)
        ids = {m["id"]: m for m in json.loads(out)["data"]}
        self.assertEqual(set(ids), {"org/model-one", "m1", "lora-a", "org/model-two", "flaky"})
        self.assertEqual(ids["lora-a"]["parent"], "org/model-one")
        self.assertEqual(ids["m1"]["kind"], "alias")
        st, _, out = http(self.gw.port, "GET", "/healthz")
        self.assertEqual((st, json.loads(out)["status"]), (200, "ok"))

    def test_streaming_events_arrive_one_by_one(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("org/model-two", stream=True),
                     {"x-fixture-mode": "sse", "x-fixture-events": "4", "x-fixture-lockstep": "1"})
        line, headers, rest = read_head(s)
        self.assertIn("200", line)
        self.assertEqual(headers["content-type"], "text/event-stream")
        self.assertEqual(headers["transfer-encoding"], "chunked")
        # The upstream sends event i+1 only after we have received event i: if the gateway
        # held events back, this would deadlock and time out.
        got = rest
        for i in range(4):
            while b'"i": %d' % i not in got:
                chunk = s.recv(65536)
                self.assertTrue(chunk, "stream ended early")
                got += chunk
            self.assertEqual(self.up3.finished_streams, 0)
            self.up3.gate.release()
        while not got.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            self.assertTrue(chunk)
            got += chunk
        self.assertIn(b"data: [DONE]", got)
        s.close()

    def test_keepalive_reused_on_both_sides(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        buf = b""
        for i in range(5):
            send_request(s, "POST", "/v1/chat/completions", chat_body("org/model-two", text="q%d" % i))
            st, h, body = read_response(s)
            self.assertEqual(st, 200)
        s.close()
        self.assertEqual(self.up3.connections, 1, "one pooled upstream connection served all five")
        self.assertEqual(len(self.up3.requests), 5)

    def test_pipelined_requests_answered_in_order(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        b1 = json.dumps(chat_body("org/model-two", text="first")).encode()
        b2 = json.dumps({"model": "nope"}).encode()
        raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(b1), b1, len(b2), b2))
        s.sendall(raw)
        left = []
        st1, _, _ = read_response(s, leftover=left)
        st2, _, _ = read_response(s, left[0])
        self.assertEqual((st1, st2), (200, 404))
        s.close()

    def test_chunked_request_body_and_http10_client(self):
        body = json.dumps(chat_body("org/model-two")).encode()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"%x\r\n%s\r\n" % (10, body[:10]) + b"%x\r\n%s\r\n" % (len(body) - 10, body[10:]) + b"0\r\n\r\n")
        st, _, out = read_response(s)
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(out)["body_len"], len(body))
        s.close()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", body, {"x-fixture-mode": "sse"}, version="1.0")
        line, h, rest = read_head(s)
        self.assertTrue(line.startswith("HTTP/1.0 200"))
        self.assertNotIn("transfer-encoding", h, "no chunking for an HTTP/1.0 client")
        while True:
            c = s.recv(65536)
            if not c:
                break
            rest += c
        self.assertIn(b"data: [DONE]", rest)
        s.close()

    def test_expect_100_continue(self):
        body = json.dumps(chat_body("org/model-two")).encode()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        line, _, rest = read_head(s)
        self.assertIn("100", line)
        s.sendall(body)
        st, _, out = read_response(s, rest)
        self.assertEqual(st, 200)
        self.assertNotIn("expect", self.up3.requests[-1][2])
        s.close()

    def test_smuggling_attempts_refused(self):
        body = b'{"model":"org/model-two"}'
        for extra in (b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(body),
                      b"Content-Length: abc\r\n",
                      b"Content-Length: 5\r\nContent-Length: 6\r\n",
                      b"Transfer-Encoding: gzip\r\n"):
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n" + body)
            st, h, out = read_response(s)
            self.assertEqual(st, 400, extra)
            self.assertEqual(h.get("connection"), "close")
            s.close()
        self.assertEqual(len(self.up3.requests), 0)

    def test_oversized_header_is_431(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
        st, _, _ = read_response(s)
        self.assertEqual(st, 431)
        s.close()

    def test_dead_endpoint_retried_on_another(self):
        for i in range(4):
            st, _, out = self.post(chat_body("flaky", text="r%d" % i))
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(out)["upstream"], "q1")
        self.assertEqual(len(self.up3.requests), 4)

    def test_all_endpoints_dead_is_502(self):
        self.up3.close()
        st, _, out = self.post(chat_body("org/model-two"))
        self.assertEqual(st, 502)
        self.assertEqual(json.loads(out)["error"]["type"], "upstream_error")

    def test_upstream_status_passed_through(self):
        st, _, out = self.post(chat_body("org/model-two"), {"x-fixture-mode": "status", "x-fixture-status": "503"})
        self.assertEqual(st, 503)
        self.assertEqual(out, b'{"error":"fixture"}')

    def test_close_delimited_upstream(self):
        st, h, out = self.post(chat_body("org/model-two"), {"x-fixture-mode": "close"})
        self.assertEqual(st, 200)
        self.assertEqual(out, b"close-delimited body from q1")
        self.assertEqual(h.get("transfer-encoding"), "chunked")

    def test_client_disconnect_closes_upstream(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("org/model-two", stream=True),
                     {"x-fixture-mode": "hang"})
        got = b""
        while b"started" not in got:
            got += s.recv(65536)
        s.close()
        wait_until(lambda: self.up3.closed_by_peer == 1, 10, "upstream connection to be closed")
        # The gateway still serves.
        st, _, _ = self.post(chat_body("org/model-two"))
        self.assertEqual(st, 200)

    def test_upstream_dying_midstream_ends_stream_visibly(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("org/model-two", stream=True),
                     {"x-fixture-mode": "die", "x-fixture-events": "2"})
        line, h, got = read_head(s)
        self.assertIn("200", line)
        while True:
            c = s.recv(65536)
            if not c:
                break
            got += c
        s.close()
        self.assertIn(b'"i": 1', got)
        self.assertIn(b'data: {"error":', got, "an SSE error event tells the client")
        self.assertFalse(got.endswith(b"0\r\n\r\n"), "no terminating chunk: the transfer is visibly aborted")


if __name__ == "__main__":
    unittest.main()


class DefaultPoolTest(unittest.TestCase):
    def test_request_without_model_goes_to_default_pool(self):
        up = Upstream("d1")
        gw = Gateway([{"name": "main", "models": ["org/main-model"], "endpoints": [up.address]}],
                     extra="routing: { default_pool: main }")
        try:
            for body in ((b'{"messages":[{"role":"user","content":"hi"}]}'), b"{ }"):
                st, _, out = http(gw.port, "POST", "/v1/chat/completions", body)
                self.assertEqual(st, 200, out)
                sent = json.loads(up.requests[-1][3])  # valid JSON with the model inserted
                self.assertEqual(sent["model"], "org/main-model")
            # A model of the wrong type is still an error, not silently replaced.
            st, _, _ = http(gw.port, "POST", "/v1/chat/completions", b'{"model": null, "messages": []}')
            self.assertEqual(st, 400)
        finally:
            gw.close()
            up.close()
