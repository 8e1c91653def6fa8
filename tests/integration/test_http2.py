"""HTTP/2 toward clients (net/http2.c): h2c with prior knowledge and h2 over TLS by ALPN on the
client listener, HTTP/1.1 on the same port; chat completions, streamed and not, through a
simulated fleet with curl; many streams on one connection (h2load); a client's RST_STREAM
cancelling the upstream request (the simulator's running count falls back); the stream limit
(REFUSED_STREAM); a body over max_body_bytes refused on its stream with the connection still
serving; rapid reset and SETTINGS floods ending the connection; the access log's proto.

Wire-level cases speak raw frames (the H2 class below: literal HPACK headers out, frames in,
nothing decoded beyond frame headers and DATA payloads)."""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import unittest

from fixtures import Gateway, Upstream, chat_body as chat_dict, http, scrape_metric, wait_until
from test_sim import MODEL, Sim, chat, metric as sim_metric, metrics as sim_metrics
from test_tls import make_cert

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
REFUSED_STREAM, CANCEL = 0x7, 0x8


def hpack_int(n, prefix_bits, first=0):
    top = (1 << prefix_bits) - 1
    if n < top:
        return bytes([first | n])
    out = [first | top]
    n -= top
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def hpack_literal(headers):
    """Literal header fields without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    out = b""
    for k, v in headers:
        k, v = k.encode(), v.encode()
        out += b"\x00" + hpack_int(len(k), 7) + k + hpack_int(len(v), 7) + v
    return out


def goaways(gw, reason):
    """switchboard_http2_goaway_total for reason, from gw's /metrics."""
    body = http(gw.admin_port, "GET", "/metrics")[2].decode()
    line = 'switchboard_http2_goaway_total{listener="client",reason="%s"} ' % reason
    return int([l for l in body.splitlines() if l.startswith(line)][0].rsplit(" ", 1)[1])


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


class H2:
    """A raw HTTP/2 client connection (prior knowledge)."""

    def __init__(self, port, settings=b""):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.buf = b""
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))

    def request_frames(self, sid, method, path, body=None, headers=(), end=True, port=0):
        hs = [(":method", method), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1:%d" % port)]
        hs += list(headers)
        if body is None:
            return frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, hpack_literal(hs))
        out = frame(HEADERS, END_HEADERS, sid, hpack_literal(hs))
        for i in range(0, len(body), 16384):
            last = i + 16384 >= len(body)
            out += frame(DATA, END_STREAM if last and end else 0, sid, body[i:i + 16384])
        return out

    def send(self, data):
        self.s.sendall(data)

    def next_frame(self):
        """(type, flags, stream id, payload), or None at EOF. The server's SETTINGS are acked."""
        while True:
            while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
                try:
                    chunk = self.s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    return None
                self.buf += chunk
            n = int.from_bytes(self.buf[:3], "big")
            ftype, flags, sid = self.buf[3], self.buf[4], struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
            if ftype == SETTINGS and not flags & ACK:
                try:
                    self.s.sendall(frame(SETTINGS, ACK, 0))
                except OSError:
                    pass
            return ftype, flags, sid, payload

    def read_stream(self, test, sid, no_goaway=False):
        """The DATA of stream sid up to its END_STREAM (other streams' frames are dropped); the
        test fails if the connection closes, the stream is reset, or (no_goaway) a GOAWAY comes."""
        data = b""
        while True:
            f = self.next_frame()
            test.assertIsNotNone(f, "the connection closed")
            test.assertFalse(no_goaway and f[0] == GOAWAY, "GOAWAY")
            if f[2] == sid and f[0] == DATA:
                data += f[3]
            if f[2] == sid and f[0] in (DATA, HEADERS) and f[1] & END_STREAM:
                return data
            if f[2] == sid and f[0] == RST_STREAM:
                test.fail("stream %d reset" % sid)

    def close(self):
        self.s.close()


def chat_body(**kw):
    return json.dumps(chat_dict(**kw)).encode()


def curl(*args, timeout=30):
    r = subprocess.run(["curl", "-s", "-S"] + list(args), capture_output=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr.decode("latin-1")


class Http2SimTest(unittest.TestCase):
    """Chat completions through a simulated fleet, with curl and raw frames."""

    @classmethod
    def setUpClass(cls):
        for tool in ("curl", "h2load", "openssl"):
            if not shutil.which(tool):
                raise AssertionError(tool + " is missing: scripts/deps.sh test installs it")
        cls.sim = Sim("--speed", "20")
        cls.dir = tempfile.mkdtemp(prefix="sb-h2-")
        cls.access_log = os.path.join(cls.dir, "access.log")
        cls.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                           "endpoints": ["127.0.0.1:%d" % cls.sim.port]}],
                         extra="access_log: %s" % cls.access_log)
        cls.url = "http://127.0.0.1:%d/v1/chat/completions" % cls.gw.port

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.sim.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_chat_over_h2c_streamed_and_not_and_http1_on_the_same_port(self):
        rc, out, err = curl("--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}", "-H",
                            "content-type: application/json", "-d", json.dumps(chat("hello over h2")), self.url)
        self.assertEqual(rc, 0, err)
        body, _, tail = out.rpartition(b"\n")
        self.assertEqual(tail, b"2 200")
        answer = json.loads(body)
        self.assertEqual(answer["object"], "chat.completion")
        self.assertGreater(answer["usage"]["completion_tokens"], 0)

        rc, out, err = curl("--http2-prior-knowledge", "-N", "-w", "\n%{http_version} %{http_code}", "-d",
                            json.dumps(chat("stream over h2", max_tokens=8, stream=True)), self.url)
        self.assertEqual(rc, 0, err)
        body, _, tail = out.rpartition(b"\n")
        self.assertEqual(tail, b"2 200")
        events = [l[6:] for l in body.decode().split("\n") if l.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                       if json.loads(e)["choices"])
        self.assertTrue(text)

        # HTTP/1.1 keeps working on the same port.
        st, _, b = http(self.gw.port, "POST", "/v1/chat/completions", json.dumps(chat("hello over h1")).encode(),
                        {"Content-Type": "application/json"})
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(b)["object"], "chat.completion")

        # The access log says which protocol each request came on.
        def logged():
            with open(self.access_log) as f:
                lines = [json.loads(l) for l in f if l.strip()]
            return [l["proto"] for l in lines if l["path"] == "/v1/chat/completions"]
        wait_until(lambda: len(logged()) >= 3, 10, "three log lines")
        self.assertEqual(logged()[-3:], ["h2", "h2", "http/1.1"])

    def test_client_rst_stream_cancels_the_upstream_request(self):
        c = H2(self.gw.port)
        try:
            body = json.dumps(chat("never read to the end", max_tokens=20000, stream=True)).encode()
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", body, port=self.gw.port))
            got = b""
            while b"content" not in got:  # the first token has arrived
                f = c.next_frame()
                self.assertIsNotNone(f, "closed before the first token")
                if f[0] == DATA and f[2] == 1:
                    got += f[3]
            self.assertEqual(sim_metric(sim_metrics(self.sim.port), "vllm:num_requests_running"), 1)
            c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
            wait_until(lambda: sim_metric(sim_metrics(self.sim.port), "vllm:num_requests_running") == 0, 10,
                       "the engine to drop the cancelled request")
            wait_until(lambda: scrape_metric(self.gw.admin_port, "switchboard_in_flight_requests") == 0, 10,
                       "the gateway to let go of the request")
            # The connection still serves: another stream on it is answered.
            c.send(c.request_frames(3, "GET", "/v1/models", port=self.gw.port))
            data = b""
            while True:
                f = c.next_frame()
                self.assertIsNotNone(f, "the connection closed after the reset")
                if f[2] == 3 and f[0] == DATA:
                    data += f[3]
                if f[2] == 3 and f[1] & END_STREAM:
                    break
            self.assertIn(MODEL, json.loads(data)["data"][0]["id"])
        finally:
            c.close()


class Http2Test(unittest.TestCase):
    """Limits and hostile clients, against the scriptable upstream."""

    @classmethod
    def setUpClass(cls):
        cls.up = Upstream()
        cls.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % cls.up.port]}],
                         extra="limits: { max_body_bytes: 4096 }\ntimeouts: { idle_ms: 1500 }\n"
                               "http2: { max_concurrent_streams: 4, initial_window_size: 65535 }")

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()

    def test_many_streams_on_one_connection(self):
        before = scrape_metric(self.gw.admin_port, "switchboard_http2_connections_total")
        streams = scrape_metric(self.gw.admin_port, "switchboard_http2_streams_total")
        with tempfile.NamedTemporaryFile("wb", suffix=".json") as f:
            f.write(chat_body())
            f.flush()
            r = subprocess.run(["h2load", "-n", "40", "-c", "1", "-m", "4", "-d", f.name, "-H",
                                "content-type: application/json",
                                "http://127.0.0.1:%d/v1/chat/completions" % self.gw.port],
                               capture_output=True, text=True, timeout=60)
        self.assertIn("40 succeeded", r.stdout, r.stdout + r.stderr)
        self.assertIn("status codes: 40 2xx", r.stdout)
        self.assertEqual(scrape_metric(self.gw.admin_port, "switchboard_http2_connections_total"), before + 1)
        self.assertEqual(scrape_metric(self.gw.admin_port, "switchboard_http2_streams_total"), streams + 40)

    def test_an_upstream_dying_midstream_resets_only_its_stream(self):
        # The upstream cuts its SSE answer: the client gets the events, the gateway's error
        # event, then RST_STREAM INTERNAL_ERROR (never a silent END_STREAM), and the connection
        # serves the next stream.
        c = H2(self.gw.port)
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", chat_body(stream=True),
                                    [("x-fixture-mode", "die"), ("x-fixture-events", "3")], port=self.gw.port))
            data, reset = b"", None
            while reset is None:
                f = c.next_frame()
                self.assertIsNotNone(f, "closed")
                self.assertFalse(f[2] == 1 and f[0] == DATA and f[1] & END_STREAM, "a cut stream ended cleanly")
                if f[2] == 1 and f[0] == DATA:
                    data += f[3]
                if f[2] == 1 and f[0] == RST_STREAM:
                    reset = struct.unpack(">I", f[3])[0]
            self.assertEqual(reset, 0x2)
            self.assertEqual(data.count(b'"upstream"'), 3)
            self.assertIn(b"upstream_failed_midstream", data)
            out = self.exchange(c, 3, "GET", "/v1/models")
            self.assertEqual(json.loads(out)["data"][0]["id"], "m1")
        finally:
            c.close()

    def test_streams_past_the_limit_are_refused(self):
        # Four streams are allowed (max_concurrent_streams: 4); the fifth, sent before the
        # client has seen the server's SETTINGS, is refused with REFUSED_STREAM (safe to retry),
        # while the four are served.
        resets = scrape_metric(self.gw.admin_port, "switchboard_http2_streams_reset_total")
        c = H2(self.gw.port)
        try:
            out = b""
            for sid in (1, 3, 5, 7, 9):
                out += c.request_frames(sid, "POST", "/v1/chat/completions", chat_body(),
                                        [("x-fixture-mode", "sse"), ("x-fixture-events", "2"),
                                         ("x-fixture-head-delay-ms", "300")], port=self.gw.port)
            c.send(out)
            refused, answered = set(), set()
            while len(answered) + len(refused) < 5:
                f = c.next_frame()
                self.assertIsNotNone(f, "closed: refused %s answered %s" % (refused, answered))
                if f[0] == RST_STREAM:
                    self.assertEqual(struct.unpack(">I", f[3])[0], REFUSED_STREAM)
                    refused.add(f[2])
                elif f[0] == GOAWAY:
                    self.fail("GOAWAY: %r" % f[3])
                elif f[0] in (DATA, HEADERS) and f[1] & END_STREAM:
                    answered.add(f[2])
            self.assertEqual(refused, {9})
            self.assertEqual(answered, {1, 3, 5, 7})
            self.assertEqual(scrape_metric(self.gw.admin_port, "switchboard_http2_streams_reset_total"), resets + 1)
        finally:
            c.close()

    def exchange(self, c, sid, *args, **kw):
        """Sends one request on stream sid; returns its DATA (other streams' frames are dropped)."""
        c.send(c.request_frames(sid, *args, port=self.gw.port, **kw))
        return c.read_stream(self, sid, no_goaway=True)

    def test_body_over_max_body_bytes_is_413_on_its_stream_only(self):
        # max_body_bytes is 4096. Declared (content-length, refused from the head) and undeclared
        # (DATA past the limit): each refused on its stream, the connection serving what follows.
        c = H2(self.gw.port)
        try:
            big = b"y" * 8192
            out = self.exchange(c, 1, "POST", "/v1/chat/completions", big, [("content-length", "8192")])
            self.assertEqual(json.loads(out)["error"]["code"], "request_too_large")
            out = self.exchange(c, 3, "POST", "/v1/chat/completions", chat_body())
            self.assertEqual(json.loads(out)["model"], "m1")
            out = self.exchange(c, 5, "POST", "/v1/chat/completions", big)
            self.assertEqual(json.loads(out)["error"]["code"], "request_too_large")
            out = self.exchange(c, 7, "GET", "/v1/models")
            self.assertEqual(json.loads(out)["data"][0]["id"], "m1")
        finally:
            c.close()
        self.assertEqual(len([r for r in self.up.requests if len(r[3]) > 4096]), 0)

    SSE_MANY = [("x-fixture-mode", "sse"), ("x-fixture-events", "4000")]

    def test_a_slow_reader_is_paced_and_gets_the_whole_stream(self):
        # The client's windows are 1 KiB and it opens them only as it reads: the gateway holds
        # the rest back (the handler is told to pause, then on_drain resumes it), and every
        # event arrives, in order.
        c = H2(self.gw.port, settings=struct.pack(">HI", 4, 1024))
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", chat_body(stream=True), self.SSE_MANY,
                                    port=self.gw.port))
            got = b""
            while True:
                f = c.next_frame()
                self.assertIsNotNone(f, "the connection closed")
                if f[0] == DATA and f[2] == 1:
                    got += f[3]
                    if f[3]:
                        inc = struct.pack(">I", len(f[3]))
                        c.send(frame(WINDOW_UPDATE, 0, 1, inc) + frame(WINDOW_UPDATE, 0, 0, inc))
                if f[2] == 1 and f[0] in (DATA, HEADERS) and f[1] & END_STREAM:
                    break
            events = [l for l in got.decode().split("\n") if l.startswith("data: ")]
            self.assertEqual(len(events), 4001)
            self.assertEqual([json.loads(e[6:])["i"] for e in events[:-1]], list(range(4000)))
            self.assertEqual(events[-1], "data: [DONE]")
        finally:
            c.close()

    def test_a_client_that_stops_reading_is_closed_after_idle_ms(self):
        # Windows of 1 KiB never opened: the stream's held answer reaches its bound, the
        # upstream is paused, and after idle_ms without a write the connection is closed and the
        # request let go (nothing holds memory or the upstream for ever).
        c = H2(self.gw.port, settings=struct.pack(">HI", 4, 1024))
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", chat_body(stream=True), self.SSE_MANY,
                                    port=self.gw.port))
            while c.next_frame() is not None:
                pass  # EOF: the gateway closed
        finally:
            c.close()
        wait_until(lambda: scrape_metric(self.gw.admin_port, "switchboard_in_flight_requests") == 0, 10,
                   "the request let go")

    def test_a_finished_answer_never_read_does_not_hold_the_connection(self):
        # A short stream (a few KiB, under the per-stream bound) ends upstream while the client's
        # 1 KiB window stays shut: no backpressure reached the handler, yet the answer waits on
        # the client. After idle_ms without a write it is closed all the same.
        c = H2(self.gw.port, settings=struct.pack(">HI", 4, 1024))
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", chat_body(stream=True),
                                    [("x-fixture-mode", "sse"), ("x-fixture-events", "100")], port=self.gw.port))
            while c.next_frame() is not None:
                pass  # EOF: the gateway closed
        finally:
            c.close()
        wait_until(lambda: self.up.finished_streams >= 1, 10, "the upstream to have finished")

    def goaway_code(self, c):
        """Reads to EOF; the error code of the server's GOAWAY (None: none came)."""
        code = None
        while True:
            f = c.next_frame()
            if f is None:
                return code
            if f[0] == GOAWAY:
                code = struct.unpack(">I", f[3][4:8])[0]

    def test_rapid_reset_flood_ends_the_connection(self):
        # CVE-2023-44487: streams opened and reset at once. Within the budget (a burst of 1000)
        # the connection serves on; far past it nghttp2 ends it (GOAWAY INTERNAL_ERROR, its code
        # for this) and nothing reached the upstream.
        c = H2(self.gw.port)
        before = len(self.up.requests)
        counted = (goaways(self.gw, "internal_error"), goaways(self.gw, "enhance_your_calm"))

        def resets(first, n):
            out = b""
            for sid in range(first, first + 2 * n, 2):
                out += c.request_frames(sid, "POST", "/v1/chat/completions", end=False)
                out += frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
            return out
        try:
            c.send(resets(1, 400))
            out = self.exchange(c, 801, "GET", "/v1/models")
            self.assertEqual(json.loads(out)["data"][0]["id"], "m1")
            try:
                c.send(resets(803, 1500))
            except OSError:
                pass
            self.assertEqual(self.goaway_code(c), 0x2)
        finally:
            c.close()
        self.assertEqual((goaways(self.gw, "internal_error"), goaways(self.gw, "enhance_your_calm")),
                         (counted[0] + 1, counted[1]))
        self.assertEqual(len(self.up.requests), before)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body())
        self.assertEqual(st, 200)

    def test_settings_flood_ends_the_connection(self):
        counted = (goaways(self.gw, "enhance_your_calm"), goaways(self.gw, "internal_error"))
        c = H2(self.gw.port)
        try:
            # The client never reads: each SETTINGS wants an ACK queued, past 1000 of them the
            # connection ends (GOAWAY ENHANCE_YOUR_CALM).
            try:
                c.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100)) * 3000)
            except OSError:
                pass
            self.assertEqual(self.goaway_code(c), 0xb)
        finally:
            c.close()
        self.assertEqual((goaways(self.gw, "enhance_your_calm"), goaways(self.gw, "internal_error")),
                         (counted[0] + 1, counted[1]))

class Http2DrainTest(unittest.TestCase):
    def test_sigterm_sends_goaway_lets_the_stream_finish_and_closes(self):
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % up.port]}],
                     extra="shutdown: { drain_ms: 10000 }")
        try:
            c = H2(gw.port)
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", chat_body(stream=True),
                                    [("x-fixture-mode", "sse"), ("x-fixture-events", "5"),
                                     ("x-fixture-delay-ms", "150")], port=gw.port))
            while True:  # the stream has begun
                f = c.next_frame()
                self.assertIsNotNone(f)
                if f[0] == DATA and f[2] == 1:
                    break
            got = f[3]
            gw.proc.send_signal(signal.SIGTERM)
            goaway, ended = None, False
            while True:
                f = c.next_frame()
                if f is None:
                    break
                if f[0] == GOAWAY:
                    goaway = struct.unpack(">II", f[3][:8])
                    # The admin listener serves through the drain: the GOAWAY is counted as one.
                    self.assertEqual((goaways(gw, "drain"), goaways(gw, "idle")), (1, 0))
                if f[0] == DATA and f[2] == 1:
                    got += f[3]
                    ended = ended or bool(f[1] & END_STREAM)
            self.assertEqual(goaway, (1, 0), "GOAWAY NO_ERROR naming stream 1 as the last")
            self.assertTrue(ended, "the stream finished before the close")
            self.assertIn(b"data: [DONE]", got)
            c.close()
            self.assertEqual(gw.proc.wait(10), 0)
        finally:
            gw.close()
            up.close()

    def test_a_stream_whose_body_never_comes_gets_408_and_the_connection_serves_on(self):
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % up.port]}],
                     extra="timeouts: { header_ms: 400 }")
        c = H2(gw.port)
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", end=False, port=gw.port,
                                    headers=[("content-length", "10")]))
            data = c.read_stream(self, 1)
            self.assertEqual(json.loads(data)["error"]["code"], "request_timeout")
            c.send(c.request_frames(3, "GET", "/v1/models", port=gw.port))
            data = c.read_stream(self, 3)
            self.assertEqual(json.loads(data)["data"][0]["id"], "m1")
            self.assertEqual(len(up.requests), 0)
        finally:
            c.close()
            gw.close()
            up.close()

    def test_http2_disabled_leaves_the_preface_to_http1(self):
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % up.port]}],
                     extra="http2: { enabled: false }")
        try:
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(PREFACE + frame(SETTINGS, 0, 0))
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 400"))
            s.close()
            self.assertEqual(scrape_metric(gw.admin_port, "switchboard_http2_connections_total"), 0)
        finally:
            gw.close()
            up.close()


class Http2HeadHookTest(unittest.TestCase):
    def test_a_stream_without_a_key_is_refused_from_its_head(self):
        # The head hook runs when a stream's HEADERS are complete, before any DATA: the 401
        # comes while the body has not been sent, the stream is then reset NO_ERROR (the body is
        # not wanted), and the connection serves a request with the key.
        key = "sk-h2-test-key"
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % up.port]}],
                     extra="auth: { api_keys: [%s] }" % key)
        c = H2(gw.port)
        try:
            c.send(c.request_frames(1, "POST", "/v1/chat/completions", end=False, port=gw.port,
                                    headers=[("content-length", "100000")]))
            data, reset = b"", None
            while reset is None:
                f = c.next_frame()
                self.assertIsNotNone(f, "closed")
                if f[2] == 1 and f[0] == DATA:
                    data += f[3]
                if f[2] == 1 and f[0] == RST_STREAM:
                    reset = struct.unpack(">I", f[3])[0]
            self.assertEqual(json.loads(data)["error"]["code"], "invalid_api_key")
            self.assertEqual(reset, 0)
            c.send(c.request_frames(3, "POST", "/v1/chat/completions", chat_body(), port=gw.port,
                                    headers=[("authorization", "Bearer " + key)]))
            data = c.read_stream(self, 3)
            self.assertEqual(json.loads(data)["model"], "m1")
            self.assertEqual(len(up.requests), 1)
        finally:
            c.close()
            gw.close()
            up.close()


class Http2TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sb-h2tls-")
        cls.cert, cls.key = make_cert(cls.dir, "a", "switchboard-h2")
        cls.up = Upstream()
        cls.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % cls.up.port]}],
                         extra="tls: { cert: %s, key: %s }" % (cls.cert, cls.key))
        cls.url = "https://localhost:%d/v1/chat/completions" % cls.gw.port

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_h2_by_alpn_and_http1_by_alpn(self):
        rc, out, err = curl("--http2", "--cacert", self.cert, "-w", "\n%{http_version} %{http_code}", "-d",
                            chat_body().decode(), self.url)
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.endswith(b"\n2 200"), out)
        rc, out, err = curl("-N", "--http2", "--cacert", self.cert, "-w", "\n%{http_version} %{http_code}",
                            "-H", "x-fixture-mode: sse", "-H", "x-fixture-events: 3", "-d",
                            chat_body(stream=True).decode(), self.url)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.count(b"data: "), 4)
        self.assertTrue(out.endswith(b"\n2 200"), out)
        rc, out, err = curl("--http1.1", "--cacert", self.cert, "-w", "\n%{http_version} %{http_code}", "-d",
                            chat_body().decode(), self.url)
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.endswith(b"\n1.1 200"), out)
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.gw.port, "-alpn", "h2,http/1.1",
                            "-CAfile", self.cert], input=b"", capture_output=True, timeout=30)
        self.assertIn(b"ALPN protocol: h2", r.stdout)


if __name__ == "__main__":
    unittest.main()
