"""TLS on the client listener (`tls: {cert, key}`): curl and `openssl s_client` against a
certificate made here, streams as they arrive, keep-alive and pipelining over TLS, ALPN, the
server's own answers (413) leaving before close_notify, clients that are not TLS or never finish
the handshake, and certificate rotation on SIGHUP (a file that does not load refuses the reload
and the running certificate stays)."""
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import unittest

from fixtures import (Gateway, free_port, StatusCounter, Upstream, chat_body, http, read_response, scrape_metric,
                      send_request, wait_until)


def make_cert(dirname, name, cn):
    """A self-signed P-256 certificate for localhost and 127.0.0.1; returns (cert, key) paths."""
    cert, key = os.path.join(dirname, name + ".pem"), os.path.join(dirname, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def read_lockstep_stream(test, s, up, events=3):
    """Sends a streamed chat on s whose upstream (the fixture) sends each event only once the
    test releases it, and releases each only after the client has read the previous one: the
    gateway forwards events one by one. Returns the bytes read, through [DONE]."""
    send_request(s, "POST", "/v1/chat/completions", chat_body(stream=True),
                 {"x-fixture-mode": "sse", "x-fixture-events": str(events), "x-fixture-lockstep": "1"})
    got = b""
    for i in range(events):
        while got.count(b"data: ") <= i:
            chunk = s.recv(65536)
            test.assertTrue(chunk, "the stream ended early")
            got += chunk
        up.gate.release()
    while b"[DONE]" not in got:
        chunk = s.recv(65536)
        test.assertTrue(chunk, "the stream ended early")
        got += chunk
    return got


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in ("openssl", "curl"):
            if not shutil.which(tool):
                raise AssertionError(tool + " is missing: scripts/deps.sh test installs it")
        cls.dir = tempfile.mkdtemp(prefix="sb-tls-")
        cls.cert, cls.key = make_cert(cls.dir, "a", "switchboard-test-a")
        # Served from copies, so the rotation test can swap them.
        cls.live_cert, cls.live_key = os.path.join(cls.dir, "live.pem"), os.path.join(cls.dir, "live.key")
        shutil.copy(cls.cert, cls.live_cert)
        shutil.copy(cls.key, cls.live_key)
        cls.up = Upstream()
        cls.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["127.0.0.1:%d" % cls.up.port]}],
                         extra="tls: { cert: %s, key: %s }\nlimits: { max_body_bytes: 65536 }\n"
                               "timeouts: { header_ms: 1500 }" % (cls.live_cert, cls.live_key))
        cls.ctx = ssl.create_default_context(cafile=cls.cert)

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def tls(self, ctx=None):
        raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        return (ctx or self.ctx).wrap_socket(raw, server_hostname="localhost")

    def curl(self, *args):
        return subprocess.run(["curl", "-sS", "--max-time", "20", "--cacert", self.cert] + list(args),
                              capture_output=True, text=True)

    def test_curl_models_and_stream(self):
        r = self.curl("https://localhost:%d/v1/models" % self.gw.port)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([m["id"] for m in json.loads(r.stdout)["data"]], ["m1"])
        r = self.curl("-N", "https://127.0.0.1:%d/v1/chat/completions" % self.gw.port, "-H",
                      "Content-Type: application/json", "-H", "x-fixture-mode: sse", "-H", "x-fixture-events: 5",
                      "-d", json.dumps(chat_body(stream=True)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("data: "), 6, r.stdout)  # 5 events and [DONE]
        self.assertIn("data: [DONE]", r.stdout)

    def test_events_leave_one_by_one(self):
        """Each event is encrypted and sent as it arrives: the upstream sends the next only once
        the client has read the previous one through TLS."""
        s = self.tls()
        read_lockstep_stream(self, s, self.up)
        s.close()

    def test_keepalive_and_pipelining(self):
        s = self.tls()
        try:
            self.assertEqual(s.version() in ("TLSv1.2", "TLSv1.3"), True)
            for _ in range(3):
                send_request(s, "GET", "/v1/models")
                st, _, body = read_response(s)
                self.assertEqual(st, 200)
            # two requests in one write: both answered, in order
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
            left = []
            st1, _, _ = read_response(s, leftover=left)
            st2, _, _ = read_response(s, left[0])
            self.assertEqual((st1, st2), (200, 404))
        finally:
            s.close()

    def test_own_answer_then_close_notify(self):
        """A 413 the gateway gives itself leaves whole over TLS, then close_notify: the client
        reads a clean end (no truncation error)."""
        s = self.tls()
        body = b"x" * 100000
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        st, h, _ = read_response(s)
        self.assertEqual(st, 413)
        self.assertEqual(h.get("connection"), "close")
        self.assertEqual(s.recv(100), b"", "close_notify, then EOF (ssl raises on a truncated stream)")
        s.close()

    def test_pipelining_past_the_pause_keeps_order(self):
        """Thousands of pipelined requests sent before any answer is read: the gateway pauses
        (its answers pile up past write_high_water), TLS has decrypted more than the request it
        stopped at, and what follows must queue behind it in order (before de3266a: parsed ahead
        of the queued bytes, so the stream was misframed: 400 and a close). One thread drives the
        socket through memory BIOs, writing until the gateway stops reading, then both ways.
        Answers are counted on the new bytes only (counting the whole buffer each turn made the
        first version of this test quadratic and slow)."""
        import select
        import time
        n = 20000
        reqs = b"".join(b"GET /nope/%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n))
        raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.ctx.wrap_bio(inc, out, server_hostname="localhost")
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                inc.write(raw.recv(65536))
        raw.sendall(out.read())
        obj.write(reqs)
        raw.setblocking(False)
        wire, reading = out.read(), False
        seen = StatusCounter()
        deadline = time.monotonic() + 120
        while seen.answers < n and time.monotonic() < deadline:
            r, w, _ = select.select([raw] if reading else [], [raw] if wire else [], [], 0.5)
            if not r and not w:
                reading = True  # the gateway stopped reading: its answers wait for us
            if w:
                wire = wire[raw.send(wire[:65536]):]
            if r:
                data = raw.recv(1 << 20)
                self.assertTrue(data, "the gateway closed the connection after %d answers" % seen.answers)
                inc.write(data)
                try:
                    while True:
                        plain = obj.read(1 << 20)
                        self.assertTrue(plain, "the gateway ended TLS after %d answers: %r" % (seen.answers, seen.tail))
                        seen.feed(plain)
                except ssl.SSLWantReadError:
                    pass
        raw.close()
        self.assertEqual(seen.answers, n)
        self.assertEqual(seen.statuses, {b"404"})
        self.assertTrue(reading, "the gateway never paused: the test did not reach the case")

    def test_alpn(self):
        # h2 first in the server's order (http2.enabled, the default): test_http2.py serves it.
        for offer, want in (("http/1.1", "http/1.1"), ("h2,http/1.1", "h2"), ("h2", "h2"), ("spdy/3", None)):
            r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.gw.port, "-alpn", offer,
                                "-CAfile", self.cert, "-servername", "localhost", "-verify_return_error"],
                               input="", capture_output=True, text=True, timeout=20)
            self.assertIn("Verify return code: 0 (ok)", r.stdout)
            if want:
                self.assertIn("ALPN protocol: " + want, r.stdout, offer)
            else:
                self.assertIn("No ALPN negotiated", r.stdout, offer)
        # A client that offers nothing we speak still gets HTTP/1.1 (no ALPN: HTTP/1.1 is implied).
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.set_alpn_protocols(["spdy/3"])
        s = self.tls(ctx)
        self.assertIsNone(s.selected_alpn_protocol())
        send_request(s, "GET", "/v1/models")
        self.assertEqual(read_response(s)[0], 200)
        s.close()

    def test_not_tls_and_silent_clients(self):
        before = scrape_metric(self.gw.admin_port, "switchboard_tls_handshake_failures_total")
        # Plain HTTP on the TLS port: not a handshake; closed, counted.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(s.recv(100), b"")
        s.close()
        # Garbage shaped like a record header with an absurd length.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(300))
        try:
            self.assertEqual(s.recv(100)[:1] in (b"", b"\x15"), True)  # closed, or an alert first
        except ConnectionResetError:
            pass
        s.close()
        wait_until(lambda: scrape_metric(self.gw.admin_port, "switchboard_tls_handshake_failures_total") >= before + 2,
                   10, "the failed handshakes counted")
        # A client that connects and never finishes its handshake is closed at header_ms.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        s.sendall(b"\x16\x03\x01")
        self.assertEqual(s.recv(100), b"")
        s.close()
        # The gateway still serves.
        self.assertEqual(self.curl("https://localhost:%d/v1/models" % self.gw.port).returncode, 0)

    def test_sessions_resume_across_a_reload(self):
        """A SIGHUP that keeps the certificate keeps the session-ticket keys: a client resumes
        its session after the reload instead of a full handshake (before: each reload drew new
        keys, so every client paid a full handshake after it)."""
        def session_after_request(session=None):
            raw = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
            s = self.ctx.wrap_socket(raw, server_hostname="localhost", session=session)
            send_request(s, "GET", "/v1/models")
            self.assertEqual(read_response(s)[0], 200)  # TLS 1.3 tickets come after the handshake
            reused, sess = s.session_reused, s.session
            s.close()
            return reused, sess
        reused, sess = session_after_request()
        self.assertFalse(reused)
        self.assertTrue(session_after_request(sess)[0], "no resumption even without a reload")
        before = scrape_metric(self.gw.admin_port, "switchboard_reloads_total") or 0
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: (scrape_metric(self.gw.admin_port, "switchboard_reloads_total") or 0) > before, 10,
                   "the reload applied")
        self.assertTrue(session_after_request(sess)[0], "the session did not resume after the reload")

    def test_zz_rotation_on_sighup(self):
        def subject():
            r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.gw.port,
                                "-servername", "localhost"], input="", capture_output=True, text=True, timeout=20)
            m = re.search(r"subject=.*CN ?= ?([\w-]+)", r.stdout)
            return m.group(1) if m else r.stdout
        self.assertEqual(subject(), "switchboard-test-a")
        b_cert, b_key = make_cert(self.dir, "b", "switchboard-test-b")
        shutil.copy(b_cert, self.live_cert)
        shutil.copy(b_key, self.live_key)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: subject() == "switchboard-test-b", 10, "the rotated certificate served")
        # A key that does not match: the reload is refused, the running certificate stays.
        shutil.copy(self.key, self.live_key)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload refused: the TLS certificate" in open(self.gw.log_path).read(), 10,
                   "the refused reload logged")
        self.assertEqual(subject(), "switchboard-test-b")
        ctx = ssl.create_default_context(cafile=b_cert)
        s = self.tls(ctx)
        send_request(s, "GET", "/v1/models")
        self.assertEqual(read_response(s)[0], 200)
        s.close()
        shutil.copy(b_key, self.live_key)  # leave it loadable for the other tests' order


class TlsConfigTest(unittest.TestCase):
    def test_check_errors(self):
        from fixtures import GATEWAY_BIN
        d = tempfile.mkdtemp(prefix="sb-tls-cfg-")
        try:
            p = os.path.join(d, "c.yaml")
            for tls, want in (("tls: { cert: a.pem }", "give both cert and key"),
                              ("tls: { cert: a.pem, key: b.pem, alpn: x }", "unknown key")):
                with open(p, "w") as f:
                    f.write('listen: "127.0.0.1:1"\n%s\npools:\n  - name: p\n    models: [m]\n'
                            '    endpoints: ["127.0.0.1:2"]\n' % tls)
                r = subprocess.run([GATEWAY_BIN, "check", "-c", p], capture_output=True, text=True)
                self.assertNotEqual(r.returncode, 0)
                self.assertIn(want, r.stderr + r.stdout)
            # Files that do not load: check fails (systemctl reload runs it first) and serve
            # refuses to start, each saying which.
            with open(p, "w") as f:
                f.write('listen: "127.0.0.1:%d"\nadmin: { listen: null }\ntls: { cert: %s/none.pem, key: %s/none.key }\n'
                        'pools:\n  - name: p\n    models: [m]\n    endpoints: ["127.0.0.1:2"]\n' % (free_port(), d, d))
            r = subprocess.run([GATEWAY_BIN, "check", "-c", p], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("none.pem", r.stderr)
            r = subprocess.run([GATEWAY_BIN, "serve", "-c", p], capture_output=True, text=True, timeout=20)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("none.pem", r.stderr + r.stdout)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
