"""HTTP/2 toward clients: the bounds a hostile or careless client meets (net/http2.c), each pinned
by the review finding it closes. A client that does not read is not read either, and one that
keeps making the server queue resets is ended (GOAWAY ENHANCE_YOUR_CALM); streams nghttp2 resets
for an invalid frame never reach the handler (MadeYouReset, CVE-2025-8671); decoded heads are
charged per connection (HPACK amplification); cheap frames do not keep an idle connection open;
and the connection window is opened.

Raw frames through test_http2's H2 helpers; small limits in each config keep the floods short."""
import select
import socket
import struct
import threading
import time
import unittest

from fixtures import Gateway, Upstream, http, wait_until
from test_sim import Sim
from test_http2 import (goaways, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING, PREFACE, REFUSED_STREAM, RST_STREAM,
                        SETTINGS, WINDOW_UPDATE, H2, chat_body, frame, hpack_int, hpack_literal)

ENHANCE_YOUR_CALM = 0xB


def goaway_code(c):
    """Reads to EOF; the error code of the server's last GOAWAY (None: none came)."""
    code = None
    while True:
        try:
            f = c.next_frame()
        except socket.timeout:
            return code
        if f is None:
            return code
        if f[0] == GOAWAY:
            code = struct.unpack(">I", f[3][4:8])[0]


def pool(up):
    return [{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % up.port]}]


class Http2BackpressureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream()
        cls.gw = Gateway(pool(cls.up), extra="timeouts: { idle_ms: 30000 }\nhttp2: { max_concurrent_streams: 4 }")

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()

    def test_refused_streams_from_a_client_that_never_reads_end_the_connection(self):
        # The client never reads (so never acknowledges the server's SETTINGS) and opens stream
        # after stream past max_concurrent_streams: each is refused, and each refusal is a frame
        # to write. Before the fix they queued without bound (1.6 GiB after 20 s); now the
        # server's resets are limited (and nghttp2's queue bounded): GOAWAY ENHANCE_YOUR_CALM.
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5)
        s.connect(("127.0.0.1", self.gw.port))
        s.sendall(PREFACE + frame(SETTINGS, 0, 0))
        blk = hpack_literal([(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"),
                             (":authority", "x")])
        try:
            for first in range(1, 12000, 2000):  # 6000 streams, ~400 KiB
                s.sendall(b"".join(frame(HEADERS, END_HEADERS, first + 2 * i, blk) for i in range(1000)))
        except (OSError, socket.timeout):
            pass  # the server stopped reading, or closed
        c = H2.__new__(H2)
        c.s, c.buf = s, b""
        try:
            self.assertEqual(goaway_code(c), ENHANCE_YOUR_CALM)
        finally:
            s.close()
        st, _, _ = http(self.gw.port, "GET", "/v1/models")
        self.assertEqual(st, 200)

    def test_a_client_that_does_not_read_is_not_read_either_then_gets_its_whole_answer(self):
        # An 8 MiB answer the client does not read fills the socket buffers; then the client sends
        # PINGs (with filler frames, so that no single read holds nghttp2's 1000 ACKs). Their ACKs
        # fill write_high_water, and the server stops reading the connection. Before the fix it
        # read on, queued ACKs inside nghttp2 until its flood limit, and ended the connection
        # with the answer cut. Now the client's sending stalls within its socket buffers; when it
        # reads, the whole answer and the ACKs arrive and the connection serves on.
        size = 8 << 20
        self.up.script = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size,
                          [b"x" * (1 << 20)] * 8)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
        s.connect(("127.0.0.1", self.gw.port))
        c = H2.__new__(H2)
        c.s, c.buf = s, b""
        # Windows wide open: only the client's not reading holds the answer back.
        s.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0x7FFFFFFF)) +
                  frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535)) +
                  c.request_frames(1, "POST", "/v1/chat/completions", chat_body(), [("x-fixture-mode", "script")],
                                   port=self.gw.port))
        # A PING and a frame of an unknown type (ignored, RFC 9113 5.5) per 74 bytes.
        unit = frame(PING, 0, 0, b"12345678") + frame(0xFA, 0, 0, b"f" * 48)
        chunk = unit * 512
        sent, cap, rest = 0, 48 << 20, b""
        s.setblocking(False)
        while sent < cap:
            if not rest:
                rest = chunk
            if not select.select([], [s], [], 3)[1]:
                break  # nothing could be written for 3 s: the server has stopped reading
            try:
                n = s.send(rest)
            except BlockingIOError:
                continue
            except OSError as e:
                self.fail("the connection ended while the client sent: %r" % e)
            sent += n
            rest = rest[n:]
        self.assertLess(sent, cap, "the server read everything the client sent")
        s.setblocking(True)
        # The frame cut by the stall is completed while the client reads (a thread: the server
        # reads it only once its answers are read).
        finisher = threading.Thread(target=s.sendall, args=(rest,), daemon=True)
        finisher.start()
        sent += len(rest)
        s.settimeout(20)
        got, acks, done = 0, 0, False
        buf, off = bytearray(), 0
        while not done or acks * len(unit) < sent:
            # Frames parsed in place (H2.next_frame re-slices its buffer per frame: too slow for
            # tens of thousands of ACKs). The server's SETTINGS is not acknowledged: a write now
            # could block behind the stalled sending.
            if len(buf) - off < 9 or len(buf) - off < 9 + int.from_bytes(buf[off:off + 3], "big"):
                chunk = s.recv(1 << 20)
                self.assertTrue(chunk, "closed after %d bytes of the answer, %d ACKs" % (got, acks))
                del buf[:off]
                buf += chunk
                off = 0
                continue
            n = int.from_bytes(buf[off:off + 3], "big")
            ftype, flags = buf[off + 3], buf[off + 4]
            sid = int.from_bytes(buf[off + 5:off + 9], "big") & 0x7FFFFFFF
            self.assertNotEqual(ftype, GOAWAY)
            if ftype == DATA and sid == 1:
                got += n
            acks += ftype == PING
            done = done or (sid == 1 and ftype in (DATA, HEADERS) and bool(flags & END_STREAM))
            off += 9 + n
        c.buf = bytes(buf[off:])
        self.assertEqual(got, size)
        finisher.join(10)
        c.send(c.request_frames(3, "GET", "/v1/models", port=self.gw.port))
        while True:
            f = c.next_frame()
            self.assertIsNotNone(f, "closed after the answer (%d ACKs of %d PINGs)" % (acks, sent // len(unit)))
            self.assertNotEqual(f[0], GOAWAY, f)
            acks += f[0] == PING
            if f[2] == 3 and f[0] in (DATA, HEADERS) and f[1] & END_STREAM:
                break
        s.close()


class Http2MadeYouResetTest(unittest.TestCase):
    def test_streams_nghttp2_resets_never_reach_the_upstream_and_end_the_connection(self):
        # Each stream is complete (HEADERS, DATA END_STREAM) and then made invalid by its client
        # (a WINDOW_UPDATE that overflows its window): nghttp2 resets it, and the server must not
        # route it first. Past the reset budget (reset_burst, here 40) GOAWAY ENHANCE_YOUR_CALM.
        up = Upstream()
        gw = Gateway(pool(up), extra="http2: { max_concurrent_streams: 100, reset_burst: 40, reset_rate: 1 }")
        c = H2(gw.port)
        c.s.settimeout(10)
        try:
            out = b""
            for sid in range(1, 2 * 120, 2):
                out += c.request_frames(sid, "POST", "/v1/chat/completions", chat_body(),
                                        [("x-fixture-head-delay-ms", "1000")], port=gw.port)
                out += frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", 0x7FFFFFFF)) * 2
            try:
                c.send(out)
            except OSError:
                pass
            self.assertEqual(goaway_code(c), ENHANCE_YOUR_CALM)
        finally:
            c.close()
        # A request over HTTP/1.1 after it: the upstream sees it, and none of the reset ones.
        st, _, _ = http(gw.port, "POST", "/v1/chat/completions", chat_body())
        self.assertEqual(st, 200)
        self.assertEqual(len(up.requests), 1, "a reset stream was proxied")
        gw.close()
        up.close()


def hpack_big_then_indexed(value_len):
    """A header block that adds x-a: 'a'*value_len to the dynamic table (RFC 7541 6.2.1), and one
    that names it again by index (62, the newest entry) 15 times: ~16 bytes for 15 x value_len."""
    first = b"\x40" + hpack_int(3, 7) + b"x-a" + hpack_int(value_len, 7) + b"a" * value_len
    return first, b"\xbe" * 15


class Http2HeadBudgetTest(unittest.TestCase):
    def test_decoded_heads_are_bounded_per_connection(self):
        # 16 streams of ~60 KiB decoded head each (HPACK indexing: ~30 bytes on the wire), no body
        # yet. The default bound is 4 x max_header_list_bytes (64 KiB): four are held, the rest
        # refused at once with REFUSED_STREAM, not held until header_ms.
        up = Upstream()
        gw = Gateway(pool(up), extra="timeouts: { header_ms: 4000 }")
        c = H2(gw.port)
        c.s.settimeout(3)
        try:
            pseudo = hpack_literal([(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"),
                                    (":authority", "x")])
            first, again = hpack_big_then_indexed(4000)
            out = frame(HEADERS, END_HEADERS, 1, pseudo + first + again[:14])
            for sid in range(3, 33, 2):
                out += frame(HEADERS, END_HEADERS, sid, pseudo + again)
            c.send(out)
            refused = set()
            try:
                while len(refused) < 12:
                    f = c.next_frame()
                    self.assertIsNotNone(f, "closed")
                    self.assertNotEqual(f[0], GOAWAY)
                    if f[0] == RST_STREAM:
                        self.assertEqual(struct.unpack(">I", f[3])[0], REFUSED_STREAM)
                        refused.add(f[2])
                    self.assertNotEqual(f[0], HEADERS, "a stream was answered (408?) before the refusals")
            except socket.timeout:
                pass
            self.assertEqual(refused, set(range(9, 33, 2)))
        finally:
            c.close()
            gw.close()
            up.close()


class Http2IdleTest(unittest.TestCase):
    def test_pings_do_not_keep_a_connection_without_streams_open(self):
        # idle_ms 1000: a client with no stream that PINGs every 200 ms is still closed (GOAWAY
        # NO_ERROR, or the close itself when the client's next PING meets it), where before every
        # byte refreshed the idle deadline.
        up = Upstream()
        gw = Gateway(pool(up), extra="timeouts: { idle_ms: 1000 }")
        c = H2(gw.port)
        c.s.settimeout(0.2)
        try:
            code, t0 = None, time.time()
            while code is None and time.time() - t0 < 15:
                try:
                    c.send(frame(PING, 0, 0, b"12345678") + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)))
                except OSError:
                    break
                try:
                    while True:
                        f = c.next_frame()
                        if f is None:
                            code = code or -1
                            break
                        if f[0] == GOAWAY:
                            code = struct.unpack(">I", f[3][4:8])[0]
                except socket.timeout:
                    pass
            self.assertIsNotNone(code, "still open while the client pinged")
            # Counted as an idle close (sent even when the client's PING met the close first).
            wait_until(lambda: goaways(gw, "idle") == 1, what="the idle GOAWAY counted")
            self.assertEqual(goaways(gw, "drain"), 0)
        finally:
            c.close()
            gw.close()
            up.close()


class Http2WindowTest(unittest.TestCase):
    def test_the_connection_window_is_opened_at_start(self):
        # initial_window_size 128 KiB: the connection's window is raised to 4 x that (512 KiB)
        # with a WINDOW_UPDATE on stream 0 right after the SETTINGS; configured, it follows the
        # configuration.
        up = Upstream()
        for extra, window in (("http2: { initial_window_size: 128KiB }", 512 << 10),
                              ("http2: { connection_window_size: 3MiB }", 3 << 20)):
            gw = Gateway(pool(up), extra=extra)
            c = H2(gw.port)
            c.s.settimeout(3)
            try:
                inc = None
                while inc is None:
                    f = c.next_frame()
                    self.assertIsNotNone(f, "closed")
                    if f[0] == WINDOW_UPDATE and f[2] == 0:
                        inc = struct.unpack(">I", f[3])[0]
                self.assertEqual(inc, window - 65535)
            finally:
                c.close()
                gw.close()
        up.close()


class Http2SimReplicaTest(unittest.TestCase):
    def test_simulated_replicas_speak_http1_only(self):
        # vLLM's server is HTTP/1.1: a replica answers the h2c preface as HTTP/1.1 does (400),
        # where before it took the connection as HTTP/2.
        sim = Sim()
        try:
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            s.sendall(PREFACE + frame(SETTINGS, 0, 0))
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 400"))
            s.close()
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
