"""Client requests read by either parser on one connection (issue 17, item 1): the fast path
for plainly well-formed heads (src/proto/h1.c) and http-parser for the rest take turns on a
keep-alive connection, pipelined or not, with bodies whole or in pieces, and each request is
framed exactly: the upstream sees every body at its length. What http-parser refuses stays
refused (a name beginning Transfer-Encoding, both framings at once)."""
import json
import socket
import unittest

from fixtures import Gateway, Upstream, chat_body, read_response


def chat(text):
    return json.dumps(chat_body("m1", text)).encode()


def head(body, extra=""):
    return ("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n%s\r\n" % (len(body), extra)).encode()


def chunked(body):
    half = len(body) // 2
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:]))


class H1PathsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream("u")
        cls.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [cls.up.address]}])

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def answered(self, s, body, buf=b"", leftover=None):
        st, _, out = read_response(s, buf, leftover)
        self.assertEqual(st, 200, out)
        self.assertEqual(json.loads(out)["body_len"], len(body), "the upstream got the whole body, no more")

    def test_blank_lines_after_each_request_never_add_up_to_a_refusal(self):
        # CR/LF between messages is skipped by http-parser, which counts it toward its head
        # limit (80 KiB) until it completes a head itself. With every head read by the fast
        # path, nothing ever completed one: 2 KiB of blank lines after each of 60 requests used
        # to end in 431 at the 41st. Each request waits for its answer first, so the blank lines
        # arrive alone, between messages.
        s = self.connect()
        try:
            for i in range(60):
                body = chat("blank %d" % i)
                s.sendall(head(body) + body + b"\r\n" * 1024)
                self.answered(s, body)
        finally:
            s.close()

    def test_parsers_take_turns_on_one_connection(self):
        s = self.connect()
        try:
            bodies = [chat("fast %d" % i) for i in range(5)]
            s.sendall(head(bodies[0]) + bodies[0])                 # fast path
            self.answered(s, bodies[0])
            s.sendall(chunked(bodies[1]))                          # http-parser (chunked)
            self.answered(s, bodies[1])
            s.sendall(head(bodies[2]))                             # fast path, body in pieces
            s.sendall(bodies[2][:7])
            s.sendall(bodies[2][7:])
            self.answered(s, bodies[2])
            s.sendall(head(bodies[3], "X-Note: caf\u00e9\r\n") + bodies[3])  # obs-text (UTF-8 bytes)
            self.answered(s, bodies[3])                            # ... is http-parser's
            s.sendall(head(bodies[4]) + bodies[4])                 # fast path again
            self.answered(s, bodies[4])
        finally:
            s.close()

    def test_pipelined_mix(self):
        s = self.connect()
        try:
            b = [chat("pipelined %d" % i) for i in range(4)]
            s.sendall(head(b[0]) + b[0] + chunked(b[1]) + head(b[2]) + b[2] + head(b[3], "X-Pad:  two spaces \r\n") + b[3])
            rest = []
            self.answered(s, b[0], leftover=rest)
            for body in b[1:]:
                buf, rest = rest[0], []
                self.answered(s, body, buf, rest)
        finally:
            s.close()

    def refused(self, raw):
        s = self.connect()
        try:
            s.sendall(raw)
            st, _, _ = read_response(s)
            return st
        finally:
            s.close()

    def test_what_http_parser_refuses_stays_refused(self):
        body = chat("x")
        self.assertEqual(self.refused(head(body, "Transfer-Encodingx: 3\r\n") + body), 400)
        self.assertEqual(self.refused(head(body, "Transfer-Encoding: chunked\r\n") + b"0\r\n\r\n"), 400)
        self.assertEqual(self.refused(head(body, "Content-Length: %d\r\n" % (len(body) + 1)) + body), 400)


if __name__ == "__main__":
    unittest.main()
