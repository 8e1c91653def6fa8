"""Regression tests for defects found in review of the data path: each one failed (crash under
ASan, wrong bytes on the wire, or a hang) before its fix."""
import json
import signal
import socket
import threading
import unittest

from fixtures import Gateway, Upstream, chat_body, http, read_head, read_response, send_request, wait_until


def metric(gw, prefix):
    text = http(gw.admin_port, "GET", "/metrics")[2].decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(prefix))


class FramingTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}])

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def test_head_has_no_body_and_keeps_the_connection_in_sync(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        line, h, rest = read_head(s)
        self.assertIn("200", line)
        self.assertEqual(h["content-length"], "15")
        # The next bytes are the second response's head, not a body.
        st, _, body = read_response(s, rest)
        self.assertEqual((st, body), (200, b'{"status":"ok"}'))
        s.close()

    def test_upstream_204_is_forwarded_without_a_body(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"),
                     {"x-fixture-mode": "status", "x-fixture-status": "204"})
        line, h, rest = read_head(s)
        self.assertIn("204", line)
        self.assertNotIn("transfer-encoding", h)
        # Keep-alive still in sync: the next request on the connection gets its own answer.
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"))
        st, _, body = read_response(s, rest)
        self.assertEqual(st, 200)
        s.close()

    def test_chunked_trailers_are_not_request_headers(self):
        body = json.dumps(chat_body("m")).encode()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"%x\r\n%s\r\n0\r\nx-injected: yes\r\nx-priority: critical\r\n\r\n" % (len(body), body))
        st, _, _ = read_response(s)
        self.assertEqual(st, 200)
        self.assertNotIn("x-injected", self.up.requests[-1][2])
        s.close()

    def test_thousands_of_pipelined_requests_do_not_grow_the_stack(self):
        # A slow first request holds the connection while 2,600 small ones queue behind it
        # (as many as the 64 KiB read-ahead bound holds: past it the rest would be discarded
        # and the connection closed after the answer, test_hostile_conn.ReadAheadBound);
        # once it ends they are all answered at once (iteratively, not by recursion).
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        first = json.dumps(chat_body("m", stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                  b"x-fixture-mode: sse\r\nx-fixture-lockstep: 1\r\nx-fixture-events: 2\r\n\r\n%s"
                  % (len(first), first) + b"GET /healthz HTTP/1.1\r\n\r\n" * 2600)
        wait_until(lambda: len(self.up.requests) == 1, 10, "the first request upstream")
        self.up.gate.release()
        self.up.gate.release()
        got = b""
        while got.count(b'{"status":"ok"}') < 2600:
            chunk = s.recv(1 << 20)
            self.assertTrue(chunk, "connection closed early")
            got += chunk
        s.close()


class UpstreamEdgeTest(unittest.TestCase):
    def test_timeout_on_a_reused_connection_is_not_sent_twice(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [up.address],
                       "yaml": ["probe: { enabled: false, health_interval_ms: 0 }"]}],
                     extra="timeouts: { response_ms: 300 }")
        try:
            # A pooled connection, then a request the endpoint takes and never answers.
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "warm"))[0], 200)
            st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "once"),
                            {"x-fixture-mode": "silent"})
            self.assertEqual(st, 504)
            texts = [json.loads(r[3])["messages"][1]["content"] for r in up.requests]
            self.assertEqual(texts.count("once"), 1, "a timed-out request must not run twice: %s" % texts)
        finally:
            gw.close()
            up.close()

    def test_client_leaving_while_the_gateway_connects(self):
        # An endpoint whose accept queue is full: connect() hangs until connect_ms.
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(0)
        port = lsock.getsockname()[1]
        fillers = []
        for _ in range(4):
            f = socket.socket()
            f.setblocking(False)
            try:
                f.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(f)
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": ["127.0.0.1:%d" % port],
                       "yaml": ["probe: { interval_ms: 50, min_interval_ms: 50, max_interval_ms: 50, "
                                "timeout_ms: 200 }"]}],
                     extra="timeouts: { connect_ms: 200 }")
        try:
            c = socket.create_connection(("127.0.0.1", gw.port))
            send_request(c, "POST", "/v1/chat/completions", chat_body("m"))
            wait_until(lambda: metric(gw, "switchboard_in_flight_requests") == 1, 10, "the request in flight")
            c.close()
            wait_until(lambda: metric(gw, "switchboard_in_flight_requests") == 0, 10, "the abort")
            # Probes to the same endpoint time out after the same 200 ms: two of them mean the
            # abandoned connect has timed out too (it used to call back into a freed exchange).
            wait_until(lambda: metric(gw, "switchboard_probe_errors_total") >= 2, 10, "connect timeouts")
            self.assertEqual(http(gw.port, "GET", "/healthz")[0], 200)
        finally:
            gw.close()  # fails on any sanitizer report
            for f in fillers:
                f.close()
            lsock.close()

    def test_reload_raising_max_prompt_blocks(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [up.address]}],
                     extra="limits: { max_prompt_blocks: 4 }")
        try:
            with open(gw.config_path) as f:
                text = f.read()
            with open(gw.config_path, "w") as f:
                f.write(text.replace("max_prompt_blocks: 4", "max_prompt_blocks: 100000"))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: metric(gw, "switchboard_config_reloads_total") == 1, 10, "reload")
            st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body("m", "long " * 20000))
            self.assertEqual(st, 200)
        finally:
            gw.close()
            up.close()


class PendingPrefixTest(unittest.TestCase):
    """A routed prefix counts for its endpoint only once an answer's first bytes came back: an
    error body (400: context too long, 429, 503) computed nothing worth reusing."""

    def setUp(self):
        self.ups = [Upstream("a"), Upstream("b")]
        self.gw = Gateway([{"name": "p", "models": ["m"], "profile": "prefix-only",
                            "endpoints": [u.address for u in self.ups]}])

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            for u in self.ups:
                u.close()

    def prefix_scores(self):
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions")
        d = [x for x in json.loads(body)["decisions"] if x["pool"] == "p"][0]
        return [c["scores"]["prefix"] for c in d["candidates"]]

    def test_error_bodies_do_not_make_a_prefix_count(self):
        body = chat_body("m", "the same long question " * 40)
        for status in (400, 503):
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", body,
                            {"x-fixture-mode": "status", "x-fixture-status": str(status)})
            self.assertEqual(st, status)
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", body,
                            {"x-fixture-mode": "status", "x-fixture-status": "429"})
            # Each pick saw nothing computed anywhere.
            self.assertEqual(self.prefix_scores(), [0, 0])
        # An answer does count: the next identical request finds its endpoint.
        st, _, out = http(self.gw.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(st, 200)
        first = json.loads(out)["upstream"]
        st, _, out = http(self.gw.port, "POST", "/v1/chat/completions", body)
        self.assertEqual(json.loads(out)["upstream"], first)
        self.assertEqual(sorted(self.prefix_scores()), [0, 1])


if __name__ == "__main__":
    unittest.main()
