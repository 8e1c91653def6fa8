"""Hostile connections against the live gateway, on raw sockets where the
wire matters.

- Early answers (413, 431, 400, 408) reach a client that writes its whole request before it
  reads: the gateway lingers (reads and discards) instead of closing on unread bytes, which
  makes the kernel reset the connection and destroy the answer.
- Memory grows with bytes received, not with the Content-Length a client promises.
- A global budget of request-body bytes: past it, 503 with Retry-After; back once they go.
- At max_connections a new client reads a 503 with Retry-After instead of a reset, and
  /metrics shows the open-connection gauge.
- Bytes pipelined past the read-ahead bound (64 KiB) behind a request in flight are read and
  discarded, so a client that leaves is noticed at once (its request aborted, its upstream
  closed); the connection closes after the current answer.
"""
import http.client as httpclient
import json
import socket
import threading
import time
import unittest

from fixtures import Gateway, StatusCounter, Upstream, chat_body, http, read_head, read_response, send_request, wait_until

MODEL = "m1"


def metrics_text(gw):
    """The gateway's Prometheus text, from the admin listener."""
    return http(gw.admin_port, "GET", "/metrics")[2].decode()


CLIENT = '{listener="client"}'


def metric(gw, name):
    for line in metrics_text(gw).splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no " + key)


def vm_data_kib(pid):
    return status_kib(pid, "VmData")


def error_of(body):
    return json.loads(body)["error"]


def send_all_then_read(port, data):
    """Writes every byte of `data` before reading anything, as Python's http.client and the
    OpenAI SDKs do; returns the response. A reset anywhere raises (the hole this pins)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        s.sendall(data)
        return read_response(s)
    finally:
        s.close()


class EarlyAnswersLinger(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u1")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                          extra="limits: { max_body_bytes: 1KiB }\ntimeouts: { header_ms: 300 }")

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def test_413_reaches_a_client_that_writes_its_whole_body_first(self):
        body = b'{"model":"m1","messages":[],"x":"' + b"a" * (8 << 20) + b'"}'
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
               b"Content-Length: %d\r\n\r\n" % len(body)
        for _ in range(5):
            st, h, out = send_all_then_read(self.gw.port, head + body)
            self.assertEqual(st, 413)
            self.assertEqual(h.get("connection"), "close")
            self.assertEqual(error_of(out)["code"], "request_too_large")
        self.assertEqual(len(self.up.requests), 0)

    def test_413_reaches_python_http_client(self):
        body = json.dumps(chat_body(MODEL, text="a" * (1 << 20))).encode()
        for _ in range(5):
            conn = httpclient.HTTPConnection("127.0.0.1", self.gw.port, timeout=20)
            try:
                conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                self.assertEqual(r.status, 413)
                err = error_of(r.read())
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertIn("too large", err["message"])
            finally:
                conn.close()

    def test_chunked_body_over_the_limit_413_with_the_rest_unread(self):
        chunk = b"a" * 4096
        data = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + \
            (b"1000\r\n" + chunk + b"\r\n") * 2048 + b"0\r\n\r\n"
        st, _, out = send_all_then_read(self.gw.port, data)
        self.assertEqual(st, 413)
        self.assertEqual(error_of(out)["code"], "request_too_large")

    def test_431_reaches_a_client_that_writes_a_huge_head(self):
        data = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
        st, h, out = send_all_then_read(self.gw.port, data)
        self.assertEqual(st, 431)
        self.assertEqual(h.get("connection"), "close")
        self.assertEqual(error_of(out)["code"], "request_header_too_large")

    def test_400_smuggling_with_trailing_data(self):
        junk = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 20000  # ~700 KB behind the refused request
        data = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n" \
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + junk
        st, h, out = send_all_then_read(self.gw.port, data)
        self.assertEqual(st, 400)
        self.assertEqual(h.get("connection"), "close")
        self.assertEqual(error_of(out)["code"], "request_smuggling")
        self.assertEqual(len(self.up.requests), 0)

    def test_connection_close_answer_survives_pipelined_junk(self):
        # The gateway's own answer with Connection: close, then bytes it will never parse.
        data = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + b"z" * (8 << 20)
        st, h, _ = send_all_then_read(self.gw.port, data)
        self.assertEqual(st, 200)
        self.assertEqual(h.get("connection"), "close")

    def test_408_reaches_a_client_still_trickling_its_body(self):
        # header_ms is 300: the client sends a head and trickles its body past that, only
        # then reads. It must read the 408, not a reset.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=20)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(40):  # about 800 ms of trickle, never finishing the 1000 bytes
                s.sendall(b"a" * 20)
                time.sleep(0.02)
            st, h, out = read_response(s)
        finally:
            s.close()
        self.assertEqual(st, 408)
        self.assertEqual(error_of(out)["code"], "request_timeout")

    def test_lingering_is_bounded_by_linger_bytes(self):
        # A client that never stops sending after its 413 is cut once linger_bytes are
        # discarded; the gateway keeps serving.
        gw = Gateway([{"name": "q", "models": ["m2"], "endpoints": [self.up.address]}],
                     extra="limits: { max_body_bytes: 1KiB, linger_bytes: 256KiB }")
        try:
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
            cut = False
            try:
                for _ in range(1000):  # up to 64 MiB, far past linger_bytes
                    s.sendall(b"a" * 65536)
            except OSError:
                cut = True
            s.close()
            self.assertTrue(cut, "the gateway stopped discarding after linger_bytes")
            self.assertEqual(http(gw.port, "GET", "/healthz")[0], 200)
        finally:
            gw.close()


class BodyMemory(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u1")

    def tearDown(self):
        self.up.close()

    def test_declared_length_reserves_nothing(self):
        # 64 connections each promise a 16 MiB body (the default max_body_bytes) and send
        # 100 bytes of it. Today's reservation would take 64 x 32 MiB of address space.
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}])
        socks = []
        try:
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", chat_body(MODEL))[0], 200)
            base = vm_data_kib(gw.proc.pid)
            for _ in range(64):
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                socks.append(s)
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                          b"Expect: 100-continue\r\n\r\n" % (16 << 20))
            for s in socks:
                # 100 Continue comes once the head is processed (and, before, reserved for).
                got = b""
                while b"\r\n\r\n" not in got:
                    chunk = s.recv(4096)
                    self.assertTrue(chunk, "gateway closed instead of 100 Continue")
                    got += chunk
                self.assertTrue(got.startswith(b"HTTP/1.1 100"), got)
                s.sendall(b"{" + b" " * 99)
            grown_kib = vm_data_kib(gw.proc.pid) - base
            # Generous: 64 MiB against the 2 GiB the promises would cost.
            self.assertLess(grown_kib, 64 * 1024, "memory followed the declared lengths")
        finally:
            for s in socks:
                s.close()
            gw.close()

    def test_global_body_budget_503_then_back(self):
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                     extra="limits: { max_body_bytes: 1MiB, max_buffered_body_bytes: 256KiB }")
        try:
            # A slow client holds 200 KiB of a 1 MiB body.
            hog = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            hog.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 20)
                        + b"{" + b" " * (200 * 1024))
            wait_until(lambda: (metric(gw, "switchboard_request_body_bytes" + CLIENT) or 0) >= 200 * 1024, 10,
                       "the gateway to hold the slow client's body")
            # A 100 KiB request no longer fits: 503, Retry-After, read by a client that
            # writes everything first.
            body = json.dumps(chat_body(MODEL, text="b" * 100 * 1024)).encode()
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
                   b"Content-Length: %d\r\n\r\n" % len(body)
            st, h, out = send_all_then_read(gw.port, head + body)
            self.assertEqual(st, 503)
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            err = error_of(out)
            self.assertEqual(err["code"], "request_bodies_over_budget")
            self.assertEqual(err["type"], "service_unavailable")
            self.assertEqual(metric(gw, "switchboard_body_budget_refusals_total" + CLIENT), 1)
            self.assertEqual(len(self.up.requests), 0)
            # Small requests without a body still pass meanwhile.
            self.assertEqual(http(gw.port, "GET", "/healthz")[0], 200)
            # The hog leaves: its bytes leave the budget, and the same request succeeds.
            hog.close()
            wait_until(lambda: metric(gw, "switchboard_request_body_bytes" + CLIENT) == 0, 10, "the budget to be released")
            st, _, out = send_all_then_read(gw.port, head + body)
            self.assertEqual(st, 200)
            self.assertEqual(json.loads(out)["body_len"], len(body))
            # Bodies proxied and answered are released too.
            self.assertEqual(metric(gw, "switchboard_request_body_bytes" + CLIENT), 0)
        finally:
            gw.close()

    def test_pipelined_requests_never_read_do_not_pile_up_answers(self):
        # A client pipelines small requests for big answers and never reads: the gateway
        # must stop reading it (answers stay under write_high_water), not buffer every answer.
        models = ["org/model-with-a-rather-long-name-%03d" % i for i in range(300)]
        gw = Gateway([{"name": "p", "models": models, "endpoints": [self.up.address]}])
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        try:
            st, _, out = http(gw.port, "GET", "/v1/models")
            self.assertEqual(st, 200)
            self.assertGreater(len(out), 10000)  # each 40-byte request asks for this much
            base = status_kib(gw.proc.pid, "VmRSS")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(0.5)
            batch = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
            deadline = time.monotonic() + 4
            try:
                while time.monotonic() < deadline:  # until the gateway stops reading (send blocks)
                    s.send(batch)
            except socket.timeout:
                pass
            # The loop still serves others meanwhile.
            self.assertEqual(http(gw.port, "GET", "/healthz")[0], 200)
            grown = status_kib(gw.proc.pid, "VmRSS") - base
            self.assertLess(grown, 64 * 1024, "answers piled up for a client that does not read")
            # Once the client reads, answers flow again, in order.
            s.settimeout(10)
            st, _, out = read_response(s)
            self.assertEqual(st, 200)
            self.assertIn(models[-1].encode(), out)
        finally:
            s.close()
            gw.close()


    def test_long_pipelined_runs_do_not_time_out_the_request_after(self):
        # 20,000 pipelined requests sent at once: thousands are parsed and answered in one loop
        # turn, and one read ends in the middle of a head. Its header_ms deadline was armed
        # against the loop's cached time, older by the whole turn, so under the sanitizers
        # (a turn of ~1 s) the request whose bytes were already there got a 408 and the
        # connection closed (before the fix; the release build's turns were short enough).
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                     extra="timeouts: { header_ms: 300 }")
        n = 20000
        wire = b"".join(b"GET /nope/%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n))
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
        try:
            sender = threading.Thread(target=s.sendall, args=(wire,), daemon=True)
            sender.start()
            seen = StatusCounter()
            while seen.answers < n:
                data = s.recv(1 << 20)
                self.assertTrue(data, "the gateway closed after %d answers: %r" % (seen.answers, seen.tail))
                seen.feed(data)
            self.assertEqual(seen.statuses, {b"404"})
            sender.join(10)
        finally:
            s.close()
            gw.close()

    def test_chunked_body_capacity_stays_within_max_body_bytes(self):
        # A chunked body of exactly max_body_bytes, held open before its last chunk: its buffer
        # (and the budget charge) is max_body_bytes + 1, not the doubling past it (2 MiB).
        gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                     extra="limits: { max_body_bytes: 1MiB }")
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
        try:
            chunk = b"%x\r\n%s\r\n" % (64 * 1024, b" " * (64 * 1024))
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      + chunk * 16)
            wait_until(lambda: (metric(gw, "switchboard_request_body_bytes" + CLIENT) or 0) >= 1 << 20, 10,
                       "the gateway to hold the whole body")
            self.assertEqual(metric(gw, "switchboard_request_body_bytes" + CLIENT), (1 << 20) + 1)
        finally:
            s.close()
            gw.close()


class ReadAheadBound(unittest.TestCase):
    """A request in flight with more than 64 KiB pipelined behind it."""

    def setUp(self):
        self.up = Upstream("u1")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                          extra="limits: { linger_bytes: 32MiB }")

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def stream_head(self, mode, extra=b""):
        body = json.dumps(chat_body(MODEL, stream=True)).encode()
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-fixture-mode: %s\r\n%s"
                b"Content-Length: %d\r\n\r\n%s" % (mode, extra, len(body), body))

    def test_a_client_that_leaves_behind_a_full_read_ahead_aborts_its_request(self):
        # Before: reading stopped at 64 KiB, so the client's close went unseen until the
        # response ended (response_ms, 600 s): connection, body budget and upstream held.
        big = json.dumps(chat_body(MODEL, text="z" * 200000)).encode()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        try:
            s.sendall(self.stream_head(b"hang") + b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(big) + big)
            line, _, _ = read_head(s)  # the stream has begun: the request is in flight
            self.assertIn(" 200 ", line)
        finally:
            s.close()
        wait_until(lambda: self.up.closed_by_peer == 1, 10, "the upstream to be closed")
        wait_until(lambda: metric(self.gw, "switchboard_open_connections" + CLIENT) == 0, 10, "the connection to go")
        self.assertEqual(metric(self.gw, "switchboard_request_body_bytes" + CLIENT), 0)
        self.assertEqual(metric(self.gw, "switchboard_client_aborts_total"), 1)

    def test_past_the_bound_input_is_discarded_and_the_answer_ends_the_connection(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=20)
        try:
            s.sendall(self.stream_head(b"sse", b"x-fixture-lockstep: 1\r\nx-fixture-events: 2\r\n"))
            line, _, rest = read_head(s)
            self.assertIn(" 200 ", line)
            # 16 MiB of pipelined requests: more than every socket buffer on the way holds, so
            # sendall returns only if the gateway reads on (before: it stopped, and this hung).
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * ((16 << 20) // 35))
            self.up.gate.release()
            self.up.gate.release()
            s.settimeout(10)
            st, h, body = read_response(s, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + rest)
            self.assertIn(b"[DONE]", body)
            tail = b""
            while True:  # then the gateway closes: none of the discarded requests is answered
                chunk = s.recv(65536)
                if not chunk:
                    break
                tail += chunk
            self.assertEqual(tail, b"")
        finally:
            s.close()
        wait_until(lambda: self.up.finished_streams == 1, 10, "the stream to finish upstream")

    def test_discarding_is_bounded_by_linger_bytes(self):
        # A client streaming junk behind its request past linger_bytes (32 MiB here) is cut,
        # which aborts its request.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        try:
            s.sendall(self.stream_head(b"hang"))
            read_head(s)
            try:
                for _ in range(2048):  # up to 128 MiB
                    s.sendall(b"z" * 65536)
            except OSError:
                pass
        finally:
            s.close()
        wait_until(lambda: self.up.closed_by_peer == 1, 10, "the upstream to be closed")
        wait_until(lambda: metric(self.gw, "switchboard_open_connections" + CLIENT) == 0, 10, "the connection to go")

    def test_a_client_paused_for_unread_answers_that_resets_is_closed(self):
        # Between requests, paused at write_high_water, the connection is not read (it holds no
        # request, body or upstream); a client that leaves resets the pending write instead.
        models = ["org/model-with-a-rather-long-name-%03d" % i for i in range(300)]
        gw = Gateway([{"name": "q", "models": models, "endpoints": [self.up.address]}])
        try:
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(0.5)
            batch = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
            try:
                for _ in range(1000):  # until the gateway stops reading (send blocks)
                    s.send(batch)
            except socket.timeout:
                pass
            s.close()  # unread answers: the kernel resets the connection
            wait_until(lambda: metric(gw, "switchboard_open_connections" + CLIENT) == 0, 10, "the connection to go")
        finally:
            gw.close()


class ConnectionLimit(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u1")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": [self.up.address]}],
                          extra="limits: { max_connections: 4 }")
        self.held = []

    def tearDown(self):
        for s in self.held:
            s.close()
        try:
            self.gw.close()
        finally:
            self.up.close()

    def hold(self):
        """A keep-alive connection, proved accepted and counted by one answered request
        (retried: the fixture's readiness probe may hold a slot for a moment)."""
        def take():
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
            send_request(s, "GET", "/healthz")
            if read_response(s)[0] == 200:
                self.held.append(s)
                return True
            s.close()
            return False
        wait_until(take, 10, "a connection slot")

    def test_at_the_limit_a_new_client_reads_503_with_retry_after(self):
        for _ in range(4):
            self.hold()
        for _ in range(3):
            st, h, out = http(self.gw.port, "POST", "/v1/chat/completions", chat_body(MODEL))
            self.assertEqual(st, 503)
            self.assertGreaterEqual(int(h["retry-after"]), 1)
            self.assertEqual(h.get("connection"), "close")
            err = error_of(out)
            self.assertEqual(err["code"], "too_many_connections")
            self.assertEqual(err["type"], "service_unavailable")
        self.assertEqual(len(self.up.requests), 0)
        # One leaves: service resumes.
        self.held.pop().close()
        wait_until(lambda: http(self.gw.port, "GET", "/healthz")[0] == 200, 10, "a slot to free up")
        # /metrics is on the admin listener: the client gauge settles at the three held.
        wait_until(lambda: metric(self.gw, "switchboard_open_connections" + CLIENT) == 3, 10, "the gauge to show 3")
        self.assertGreaterEqual(metric(self.gw, 'switchboard_connections_refused_total{listener="client",answer="503"}'), 3)

    def test_refusals_answered_at_once_are_bounded(self):
        # With max_refusing_connections 1, a second client past the limit while the first
        # refusal still lingers is closed unanswered (documented), and counted.
        gw = Gateway([{"name": "q", "models": ["m2"], "endpoints": [self.up.address]}],
                     extra="limits: { max_connections: 1, max_refusing_connections: 1 }")
        held = []
        try:
            def take_the_slot():
                # The fixture's readiness probe may still hold the one slot for a moment.
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                send_request(s, "GET", "/healthz")
                if read_response(s)[0] == 200:
                    held.append(s)
                    return True
                s.close()
                return False
            wait_until(take_the_slot, 10, "the only connection slot")
            for _ in range(5):  # the first refusal lingers 1 s at most: retry if it ended first
                r1 = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                held.append(r1)  # kept open: its refusal lingers
                r1.settimeout(10)
                got = b""
                while b"\r\n\r\n" not in got:
                    got += r1.recv(4096)
                self.assertTrue(got.startswith(b"HTTP/1.1 503"), got)
                r2 = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                try:
                    r2.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    answer = r2.recv(4096)
                except OSError:
                    answer = b""
                r2.close()
                if not answer:
                    break
            self.assertEqual(answer, b"", "the second refusal was closed unanswered")
            for x in held:  # the slot and the refusals free up
                x.close()
            held = []

            def healthy():
                try:
                    return http(gw.port, "GET", "/healthz")[0] == 200
                except OSError:  # still past the limit for a moment: closed unanswered
                    return False
            wait_until(healthy, 10, "service to resume")
            def counted():
                try:
                    return (metric(gw, 'switchboard_connections_refused_total{listener="client",answer="none"}') or 0) >= 1
                except OSError:
                    return False
            wait_until(counted, 10, "the unanswered refusal to be counted")
        finally:
            for x in held:
                x.close()
            gw.close()


if __name__ == "__main__":
    unittest.main()
