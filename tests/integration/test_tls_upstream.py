"""TLS toward model servers: a pool whose endpoints are written https:// reaches them over TLS
(SNI, the certificate verified against tls.ca_file and the host's name or IP, an optional
client certificate), proxying and streaming as over plain TCP, with the prober on TLS too. A
server whose certificate does not verify is a connect failure the client hears about (and the
gateway goes on); `verify: false` accepts it. Certificates are made here with openssl."""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import unittest

from fixtures import GATEWAY_BIN, Gateway, Upstream, chat_body, http, wait_until
from test_tls import make_cert, read_lockstep_stream


class TlsUpstream(Upstream):
    """The fixture upstream behind TLS: records the SNI each handshake carried and the client
    certificate's subject (when it asks for one)."""

    def __init__(self, cert, key, client_ca=None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        if client_ca:
            self.ctx.verify_mode = ssl.CERT_REQUIRED
            self.ctx.load_verify_locations(client_ca)
        self.sni = []
        self.client_subjects = []
        self.handshake_failures = 0
        self.resumed = []  # per handshake: was it an abbreviated one (a session resumed)
        self.ctx.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        super().__init__(name="tls-up")

    def _serve(self, c):
        try:
            c.settimeout(10)
            t = self.ctx.wrap_socket(c, server_side=True)
            t.settimeout(None)
        except (ssl.SSLError, OSError):
            self.handshake_failures += 1
            c.close()
            return
        self.resumed.append(t.session_reused)
        peer = t.getpeercert()
        if peer:
            self.client_subjects.append(dict(x[0] for x in peer["subject"]).get("commonName"))
        plain_close = t.close

        def close_notify():  # a TLS server ends with close_notify (Python's close() sends none)
            try:
                t.settimeout(0.5)
                t.unwrap()
            except (ssl.SSLError, OSError, ValueError):
                pass
            plain_close()
        t.close = close_notify
        super()._serve(t)


class ScriptedTlsServer:
    """A TLS server on memory BIOs, one thread per connection, whose bytes the test scripts:
    `on_request(obj, out, sock)` answers each request head (it may write several records into
    one segment); `early` sends an HTTP answer inside the handshake's flight (TLS 1.2: right
    after the server's Finished, in the same segment)."""

    def __init__(self, cert, key, on_request=None, early=False):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        if early:
            self.ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        self.on_request, self.early = on_request, early
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.ctx.wrap_bio(inc, out, server_side=True)
        try:
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if out.pending:
                        c.sendall(out.read())
                    data = c.recv(65536)
                    if not data:
                        return
                    inc.write(data)
            if self.early:
                obj.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
                c.sendall(out.read())  # Finished and the answer in one segment
                c.recv(1)
                return
            c.sendall(out.read())
            buf = b""
            while True:
                try:
                    buf += obj.read(65536)
                except ssl.SSLWantReadError:
                    data = c.recv(65536)
                    if not data:
                        return
                    inc.write(data)
                    continue
                while b"\r\n\r\n" in buf:
                    head, rest = buf.split(b"\r\n\r\n", 1)
                    n = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            n = int(line.split(b":")[1])
                    if len(rest) < n:
                        break
                    buf = rest[n:]
                    if head.split(b" ")[1] in (b"/metrics", b"/health", b"/v1/models"):
                        obj.write(b"HTTP/1.1 404 X\r\nContent-Length: 0\r\n\r\n")
                    else:
                        self.requests += 1
                        self.on_request(self, obj)
                    c.sendall(out.read())
        except (OSError, ssl.SSLError):
            return


def answer(body):
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class TlsUpstreamTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("openssl"):
            raise AssertionError("openssl is missing: scripts/deps.sh test installs it")
        cls.dir = tempfile.mkdtemp(prefix="sb-tlsup-")
        cls.cert, cls.key = make_cert(cls.dir, "server", "model-server")
        cls.other, _ = make_cert(cls.dir, "other", "someone-else")
        cls.ccert, cls.ckey = make_cert(cls.dir, "client", "switchboard-gateway")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def gateway(self, up, host="localhost", tls="", extra=""):
        pool = {"name": "p", "models": ["m1"], "endpoints": ["https://%s:%d" % (host, up.port)],
                "yaml": ["tls: { %s }" % tls] if tls else []}
        return Gateway([pool], extra=extra)

    def chat(self, gw, stream=False, headers=None):
        return http(gw.port, "POST", "/v1/chat/completions", chat_body(stream=stream), headers)

    def test_proxy_stream_and_probe_over_tls(self):
        up = TlsUpstream(self.cert, self.key)
        gw = self.gateway(up, tls="ca_file: %s" % self.cert)
        try:
            st, h, body = self.chat(gw)
            self.assertEqual(st, 200, body)
            self.assertEqual(json.loads(body)["upstream"], "tls-up")
            # Events cross one at a time: the upstream sends the next only once the client read
            # the previous one (decrypted by the gateway, re-framed for the client).
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            read_lockstep_stream(self, s, up)
            s.close()
            self.assertIn("localhost", up.sni, "SNI carries the endpoint's host name")
            # A close-delimited answer ends with the server's close_notify: the end of the body,
            # not an error.
            st, _, body = self.chat(gw, headers={"x-fixture-mode": "close"})
            self.assertEqual((st, body), (200, b"close-delimited body from tls-up"))
            wait_until(lambda: up.probes > 0, 10, "the prober's scrape over TLS")
            # Keep-alive over TLS: more requests than new handshakes.
            for _ in range(5):
                self.assertEqual(self.chat(gw)[0], 200)
            self.assertLess(up.connections, 5, "pooled TLS connections are reused")
        finally:
            gw.close()
            up.close()

    def test_a_new_connection_resumes_the_last_session(self):
        # Each answer closes its connection (close-delimited), so every request connects anew:
        # the first handshake is full, the next ones offer the session the endpoint granted (one
        # worker: each worker keeps its own connections, and so its own session).
        up = TlsUpstream(self.cert, self.key)
        gw = self.gateway(up, tls="ca_file: %s" % self.cert, extra="workers: 1")
        try:
            for _ in range(4):
                st, _, body = self.chat(gw, headers={"x-fixture-mode": "close"})
                self.assertEqual(st, 200, body)

            def handshakes(kind):
                text = http(gw.admin_port, "GET", "/metrics")[2].decode()
                line = 'switchboard_upstream_tls_handshakes_total{kind="%s"} ' % kind
                return int([l for l in text.splitlines() if l.startswith(line)][0].rsplit(" ", 1)[1])
            self.assertEqual((handshakes("full"), handshakes("resumed")), (1, 3))
            self.assertIn(True, up.resumed, "the endpoint saw resumed sessions")
        finally:
            gw.close()
            up.close()

    def test_ip_literal_verified_by_ip(self):
        up = TlsUpstream(self.cert, self.key)
        gw = self.gateway(up, host="127.0.0.1", tls="ca_file: %s" % self.cert)
        try:
            st, _, body = self.chat(gw)
            self.assertEqual(st, 200, body)
            self.assertNotIn("127.0.0.1", [n for n in up.sni if n], "no SNI for an address (RFC 6066)")
        finally:
            gw.close()
            up.close()

    def test_server_name_is_the_host(self):
        """An endpoint by address with tls.server_name: SNI, the certificate check and the Host
        header all name the server (an ingress routes on Host)."""
        up = TlsUpstream(self.cert, self.key)
        gw = self.gateway(up, host="127.0.0.1", tls="ca_file: %s, server_name: localhost" % self.cert)
        try:
            self.assertEqual(self.chat(gw)[0], 200)
            self.assertIn("localhost", up.sni)
            self.assertEqual(up.requests[-1][2].get("host"), "localhost:%d" % up.port)
        finally:
            gw.close()
            up.close()

    def test_unverified_certificate_refused_then_allowed(self):
        up = TlsUpstream(self.cert, self.key)
        gw = self.gateway(up, tls="ca_file: %s" % self.other)
        try:
            st, _, body = self.chat(gw)
            self.assertIn(st, (502, 503), body)
            self.assertIn(b"error", body)
            self.assertEqual(up.requests, [], "nothing was sent to a server that did not verify")
            st, _, _ = http(gw.port, "GET", "/v1/models")
            self.assertEqual(st, 200, "the gateway goes on")
        finally:
            gw.close()
        gw = self.gateway(up, tls="verify: false")
        try:
            self.assertEqual(self.chat(gw)[0], 200)
        finally:
            gw.close()
            up.close()

    def test_client_certificate(self):
        up = TlsUpstream(self.cert, self.key, client_ca=self.ccert)
        gw = self.gateway(up, tls="ca_file: %s" % self.cert)
        try:
            self.assertIn(self.chat(gw)[0], (502, 503), "the server wants a client certificate")
        finally:
            gw.close()
        gw = self.gateway(up, tls="ca_file: %s, cert: %s, key: %s" % (self.cert, self.ccert, self.ckey))
        try:
            self.assertEqual(self.chat(gw)[0], 200)
            self.assertIn("switchboard-gateway", up.client_subjects)
        finally:
            gw.close()
            up.close()

    def test_bytes_after_the_answer_never_reach_the_next_request(self):
        """The answer and a stray record in one segment: the connection is not reused, so the
        next client gets its own answer (before: the stray record, then every client the
        previous one's answer)."""
        def junk(srv, obj):
            obj.write(answer(b'{"id":"resp-%d"}' % srv.requests))
            obj.write(b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"id":"X"}')
        srv = ScriptedTlsServer(self.cert, self.key, on_request=junk)
        gw = self.gateway(srv, tls="ca_file: %s" % self.cert)
        try:
            for i in range(1, 4):
                st, _, body = self.chat(gw)
                self.assertEqual((st, body), (200, b'{"id":"resp-%d"}' % i))
        finally:
            gw.close()
            srv.close()

    def test_data_inside_the_handshake_fails_the_connect(self):
        """A server that answers inside its handshake flight: the connect fails (the client
        hears 502/503 at once), nothing hangs, nothing is freed twice (ASan)."""
        srv = ScriptedTlsServer(self.cert, self.key, early=True)
        gw = self.gateway(srv, tls="ca_file: %s" % self.cert)
        try:
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat_body(), timeout=8)
            self.assertIn(st, (502, 503), body)
        finally:
            gw.close()
            srv.close()

    def test_reload_adds_then_changes_an_https_pool(self):
        """A reload may add a pool of https:// endpoints, and change its TLS: a CA that does not
        verify the server takes effect at once (new connections are refused, nothing is sent),
        and the right one again restores it; the plain pool is served throughout."""
        plain = Upstream("plain")
        up = TlsUpstream(self.cert, self.key)
        gw = Gateway([{"name": "p", "models": ["m0"], "endpoints": [plain.address]}])
        base = open(gw.config_path).read()
        n = [0]

        def reload(tls):
            n[0] += 1
            with open(gw.config_path, "w") as f:
                f.write(base + "  - name: secure\n    models: [m1]\n    profile: round-robin\n"
                        "    endpoints: [\"https://localhost:%d\"]\n    tls: { %s }\n" % (up.port, tls))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "configuration reloaded (%d)" % n[0] in open(gw.log_path).read(), 10, "reload")

        try:
            st, _, body = self.chat(gw)
            self.assertEqual(st, 404, body)  # m1 is no model yet
            reload("ca_file: %s" % self.cert)
            st, _, body = self.chat(gw)
            self.assertEqual(st, 200, body)
            self.assertEqual(json.loads(body)["upstream"], "tls-up")
            self.assertIn("localhost", up.sni)
            sent = len(up.requests)
            reload("ca_file: %s" % self.other)  # the pool's connections start over under the new TLS
            st, _, body = self.chat(gw)
            self.assertIn(st, (502, 503), body)
            self.assertEqual(len(up.requests), sent, "nothing sent to a server the new CA does not verify")
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat_body("m0"))
            self.assertEqual(st, 200, body)
            reload("ca_file: %s" % self.cert)
            wait_until(lambda: self.chat(gw)[0] == 200, 10, "the pool verified again after the reload")
            self.assertEqual(len(up.requests), sent + 1)
        finally:
            log = gw.close()
            up.close()
            plain.close()
        self.assertNotIn("AddressSanitizer", log or "")

    def test_config_errors(self):
        d = tempfile.mkdtemp(prefix="sb-tlsup-cfg-")
        try:
            p = os.path.join(d, "c.yaml")
            cases = (
                ('["https://a:1", "b:2"]', "", "mixes https:// and plain"),
                ('["a:1"]', "tls: { verify: false }", "tls is for https:// endpoints"),
                ('["https://a:1"]', "tls: { cert: c.pem }", "give both cert and key"),
                ('["https://a:1"]', "tls: { ca_file: %s/none.pem }" % d, "none.pem"),
                ('["https://:1"]', "", "bad address"),
            )
            for eps, tls, want in cases:
                with open(p, "w") as f:
                    f.write('listen: "127.0.0.1:1"\npools:\n  - name: p\n    models: [m]\n    endpoints: %s\n'
                            '    %s\n' % (eps, tls))
                r = subprocess.run([GATEWAY_BIN, "check", "-c", p], capture_output=True, text=True)
                self.assertNotEqual(r.returncode, 0, eps + " " + tls)
                self.assertIn(want, r.stderr + r.stdout)
            # https:// without a port is 443; the address is written without its scheme.
            with open(p, "w") as f:
                f.write('listen: "127.0.0.1:1"\npools:\n  - name: p\n    models: [m]\n'
                        '    endpoints: ["https://api.example.com", "https://[::1]"]\n')
            r = subprocess.run([GATEWAY_BIN, "check", "-c", p], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
