"""Refusals decided by the request head are answered before the body is read: a client
without a valid API key, a request for an unknown route or with the wrong method, and an
admin request without the token cost the gateway their head only.
Before, the whole body was read and buffered first (charged to the body budget that paying
clients share) and `Expect: 100-continue` was answered 100 before the 401.

An answer given from the head closes the connection (Connection: close): the body it refused
is still on the wire, so the connection cannot carry another request. What the client still
sends is read and discarded (lingering close), so a client that writes its whole body before
reading reads the answer, not a reset. A request without a body is answered by the handler
as before and keeps its connection.
"""
import json
import socket
import unittest

from fixtures import Gateway, Upstream, chat_body, http, read_head, read_response, send_request

KEY = "sk-head-3b9d1e"
ADMIN_TOKEN = "adm-head-6a2c"
MODEL = "m"
BUDGET = 256 * 1024
CLIENT = '{listener="client"}'
ADMIN = '{listener="admin"}'


def bearer(key):
    return {"Authorization": "Bearer " + key}


def metric(gw, name):
    for line in http(gw.admin_port, "GET", "/metrics")[2].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no metric " + name)


def head(method, path, length, extra=b""):
    return (b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (method.encode(), path.encode(), length, extra))


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=8)


def send_all_then_read(port, data):
    """Writes every byte before reading, as Python's http.client and the OpenAI SDKs do."""
    s = connect(port)
    try:
        s.sendall(data)
        return read_response(s)
    finally:
        s.close()


def read_to_eof(s):
    """Bytes after the answer until the gateway closes; raises on timeout (kept alive)."""
    rest = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return rest
        rest += chunk


class RefusedFromTheHead(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u")
        # max_body_bytes well above the budget: a large body is refused by the budget (503)
        # if the gateway reads it, and by nothing else.
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                          extra="limits: { max_body_bytes: 4MiB, max_buffered_body_bytes: 256KiB }\n"
                                "auth: { api_keys: [%s] }" % KEY,
                          admin='token: "%s"' % ADMIN_TOKEN)

    def tearDown(self):
        try:
            out = self.gw.close()
            self.assertNotIn(KEY, out)
            self.assertNotIn(ADMIN_TOKEN, out)
        finally:
            self.up.close()

    def assert_401(self, st, h, body, code="invalid_api_key"):
        self.assertEqual(st, 401)
        self.assertTrue(h["www-authenticate"].startswith("Bearer"))
        self.assertEqual(json.loads(body)["error"]["code"], code)

    def test_expect_100_continue_without_a_key_gets_401_and_never_100(self):
        s = connect(self.gw.port)
        try:
            s.sendall(head("POST", "/v1/chat/completions", 100000, b"Expect: 100-continue\r\n"))
            line, h, body = read_head(s)  # the first answer: 401, not "100 Continue"
            self.assertTrue(line.startswith("HTTP/1.1 401 "), line)
            while len(body) < int(h["content-length"]):
                body += s.recv(65536)
            self.assert_401(401, h, body)
            self.assertEqual(h["connection"], "close")
            self.assertEqual(read_to_eof(s), b"")
        finally:
            s.close()
        # With a key, 100 Continue still comes first, then the answer.
        s = connect(self.gw.port)
        try:
            data = json.dumps(chat_body(MODEL)).encode()
            s.sendall(head("POST", "/v1/chat/completions", len(data),
                           b"Expect: 100-continue\r\nAuthorization: Bearer %s\r\n" % KEY.encode()))
            line = s.recv(64)
            self.assertTrue(line.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), line)
            s.sendall(data)
            self.assertEqual(read_response(s, line[len(b"HTTP/1.1 100 Continue\r\n\r\n"):])[0], 200)
        finally:
            s.close()

    def test_a_body_over_the_budget_written_first_gets_401_not_503_nor_a_reset(self):
        body = b"{" + b" " * (2 << 20) + b"}"
        st, h, out = send_all_then_read(self.gw.port, head("POST", "/v1/chat/completions", len(body)) + body)
        self.assert_401(st, h, out)
        self.assertEqual(h["connection"], "close")
        # Chunked: no length declared, refused from the head all the same.
        chunk = b"%x\r\n%s\r\n" % (64 * 1024, b" " * (64 * 1024))
        st, h, out = send_all_then_read(self.gw.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                                      b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 16 + b"0\r\n\r\n")
        self.assert_401(st, h, out)
        self.assertEqual(metric(self.gw, "switchboard_body_budget_refusals_total" + CLIENT), 0)
        self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
        self.assertEqual(len(self.up.requests), 0)

    def test_unauthenticated_bodies_in_flight_hold_no_budget(self):
        # Three strangers each start a 1 MiB body and stop after 200 KiB, connections open: read
        # whole, one of them would hold most of the 256 KiB budget.
        hogs = []
        try:
            for _ in range(3):
                s = connect(self.gw.port)
                s.sendall(head("POST", "/v1/chat/completions", 1 << 20) + b"[" + b" " * (200 * 1024))
                hogs.append(s)
            for s in hogs:  # each is answered from its head, while its body is still coming
                st, h, body = read_response(s)
                self.assert_401(st, h, body)
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
            # A paying client's 150 KiB request fits the budget meanwhile.
            data = json.dumps(chat_body(MODEL, text="b" * 150 * 1024)).encode()
            st, _, out = send_all_then_read(self.gw.port, head("POST", "/v1/chat/completions", len(data),
                                                               b"Authorization: Bearer %s\r\n" % KEY.encode()) + data)
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(out)["body_len"], len(data))
            # The strangers may go on sending: discarded, never charged.
            for s in hogs:
                s.sendall(b" " * (100 * 1024))
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
            self.assertEqual(metric(self.gw, "switchboard_body_budget_refusals_total" + CLIENT), 0)
        finally:
            for s in hogs:
                s.close()
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn('switchboard_unauthorized_total{listener="client"} 3', text)

    def test_after_a_head_answer_the_connection_closes(self):
        s = connect(self.gw.port)
        try:
            # A body and a pipelined request behind it: neither is read as a request.
            send_request(s, "POST", "/v1/chat/completions", chat_body(MODEL))
            send_request(s, "GET", "/healthz")
            st, h, body = read_response(s)
            self.assert_401(st, h, body)
            self.assertEqual(h["connection"], "close")
            self.assertEqual(read_to_eof(s), b"")
        finally:
            s.close()
        # A refusal without a body is the handler's, as before: the connection stays.
        s = connect(self.gw.port)
        try:
            send_request(s, "GET", "/v1/models")
            st, h, body = read_response(s)
            self.assert_401(st, h, body)
            self.assertNotIn("connection", h)
            send_request(s, "GET", "/healthz")
            self.assertEqual(read_response(s)[0], 200)
        finally:
            s.close()

    def test_unknown_route_and_wrong_method_with_a_body_are_answered_from_the_head(self):
        body = b"x" * (1 << 20)  # over the budget: 503 if the gateway read it
        key = b"Authorization: Bearer %s\r\n" % KEY.encode()
        for method, path, extra, status in (("POST", "/nowhere", b"", 404), ("PUT", "/healthz", b"", 405),
                                            ("PUT", "/v1/chat/completions", key, 405),
                                            ("POST", "/v1/models", key, 405)):
            st, h, out = send_all_then_read(self.gw.port, head(method, path, len(body), extra) + body)
            self.assertEqual(st, status, (method, path))
            self.assertEqual(h["connection"], "close")
            json.loads(out)
        self.assertEqual(metric(self.gw, "switchboard_body_budget_refusals_total" + CLIENT), 0)
        self.assertEqual(len(self.up.requests), 0)

    def test_admin_without_the_token_is_answered_from_the_head(self):
        s = connect(self.gw.admin_port)
        try:
            s.sendall(head("POST", "/debug/endpoints", 100000, b"Expect: 100-continue\r\n"))
            st, h, body = read_response(s)
            self.assert_401(st, h, body, "invalid_admin_token")
            self.assertEqual(read_to_eof(s), b"")
        finally:
            s.close()
        # A stranger's body in progress holds nothing of the admin listener's body budget.
        s = connect(self.gw.admin_port)
        try:
            s.sendall(head("POST", "/debug/endpoints", 1 << 20) + b"x" * (200 * 1024))
            self.assert_401(*read_response(s), code="invalid_admin_token")
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + ADMIN), 0)
        finally:
            s.close()
        body = b"x" * (1 << 20)
        st, h, out = send_all_then_read(self.gw.admin_port, head("POST", "/debug/endpoints", len(body)) + body)
        self.assert_401(st, h, out, "invalid_admin_token")
        # With the token, the wrong method is refused from the head too.
        st, _, _ = send_all_then_read(self.gw.admin_port, head("POST", "/metrics", len(body),
                                                               b"Authorization: Bearer %s\r\n"
                                                               % ADMIN_TOKEN.encode()) + body)
        self.assertEqual(st, 405)
        self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + ADMIN), 0)
        self.assertEqual(metric(self.gw, "switchboard_body_budget_refusals_total" + ADMIN), 0)

    def test_a_body_where_none_is_taken_is_refused_from_the_head(self):
        # GET /healthz needs no key: a stranger sending it a 1 MiB body (200 KiB of it, the
        # connection held) would hold the client body budget; before, a paying client's
        # 150 KiB request then got 503. Now 400 body_not_allowed from the head, budget untouched.
        hog = connect(self.gw.port)
        try:
            hog.sendall(head("GET", "/healthz", 1 << 20) + b" " * (200 * 1024))
            st, h, out = read_response(hog)
            self.assertEqual(st, 400)
            self.assertEqual(json.loads(out)["error"]["code"], "body_not_allowed")
            self.assertEqual(json.loads(out)["error"]["type"], "invalid_request_error")
            self.assertEqual(h["connection"], "close")
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
            data = json.dumps(chat_body(MODEL, text="b" * 150 * 1024)).encode()
            st, _, out = send_all_then_read(self.gw.port, head("POST", "/v1/chat/completions", len(data),
                                                               b"Authorization: Bearer %s\r\n" % KEY.encode()) + data)
            self.assertEqual(st, 200)
            hog.sendall(b" " * (100 * 1024))  # discarded by the lingering close, never charged
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
        finally:
            hog.close()
        # GET /v1/models with a key, chunked: the same.
        st, h, out = send_all_then_read(self.gw.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                                        b"Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        b"5\r\nhello\r\n0\r\n\r\n" % KEY.encode())
        self.assertEqual((st, json.loads(out)["error"]["code"]), (400, "body_not_allowed"))
        self.assertEqual(h["connection"], "close")
        # Without a body both are served as before, on a kept connection.
        s = connect(self.gw.port)
        try:
            send_request(s, "GET", "/healthz")
            st, h, _ = read_response(s)
            self.assertEqual(st, 200)
            self.assertNotIn("connection", h)
            send_request(s, "GET", "/v1/models", headers=bearer(KEY))
            self.assertEqual(read_response(s)[0], 200)
        finally:
            s.close()

    def test_admin_pages_refuse_a_body_from_the_head(self):
        # /metrics is open without the token: before, 16 strangers each holding 8 MiB of a
        # GET /metrics body grew the gateway by 128 MiB, in a budget /metrics did not show
        # (declared within max_body_bytes, 4 MiB here, so only the route can refuse it).
        socks = []
        try:
            for _ in range(4):
                s = connect(self.gw.admin_port)
                socks.append(s)
                s.sendall(head("GET", "/metrics", 2 << 20) + b"x" * (1 << 20))
            for s in socks:
                st, h, out = read_response(s)
                self.assertEqual((st, json.loads(out)["error"]["code"]), (400, "body_not_allowed"))
                self.assertEqual(h["connection"], "close")
            self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + ADMIN), 0)
        finally:
            for s in socks:
                s.close()
        # With the token, a debug page with a body too.
        st, _, out = send_all_then_read(self.gw.admin_port, head("GET", "/debug/endpoints", 10,
                                                                 b"Authorization: Bearer %s\r\n"
                                                                 % ADMIN_TOKEN.encode()) + b"x" * 10)
        self.assertEqual((st, json.loads(out)["error"]["code"]), (400, "body_not_allowed"))


if __name__ == "__main__":
    unittest.main()
