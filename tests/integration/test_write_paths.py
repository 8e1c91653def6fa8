"""The gateway writes a request upstream, and an answer to its client, at once when the socket
takes it (batched with the loop turn's other writes through io_uring, net/iobatch.h; or
uv_try_write with `io_uring: false`) and queues only what did not fit. These pin the partial case on both
sides: peers with small receive buffers that do not read for a while, so the first write takes
part of the bytes and the rest goes through the queue; every byte must arrive once, in order,
and the connections must stay in sync for the next request."""
import hashlib
import json
import socket
import time
import unittest

from fixtures import Gateway, Upstream, http, read_head, read_response, send_request


class SlowReadingUpstream(Upstream):
    """An upstream whose connections have a small receive buffer and wait before reading."""

    def __init__(self, name="slow"):
        super().__init__(name)
        # Inherited by accepted sockets: the gateway's first write cannot take a large request.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def _serve(self, c):
        time.sleep(0.3)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # then read at speed
        super()._serve(c)


def io_uring_counts(gw):
    # Connection: close: the scrape's own connection is never kept alive, so never a reader.
    st, _, body = http(gw.admin_port, "GET", "/metrics", headers={"Connection": "close"})
    assert st == 200
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("switchboard_io_uring_"):
            name, value = line.split(" ")
            name = name[len("switchboard_io_uring_"):]
            out[name[: -len("_total")] if name.endswith("_total") else name] = float(value)
    return out


class WritePathTest(unittest.TestCase):
    EXTRA = ""  # the top-level configuration the gateway runs with

    def batching(self):
        """Whether this gateway batches its writes: on unless turned off or io_uring refused
        (said in its log, and loudly here)."""
        if self.EXTRA:
            return False
        if "io_uring unavailable" in open(self.gw.log_path).read():
            print("NOTE: io_uring unavailable here: the batched path is not exercised")
            return False
        return True

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def test_a_request_larger_than_the_socket_takes_arrives_whole(self):
        self.up = SlowReadingUpstream()
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}], extra=self.EXTRA)
        text = "".join("%07d " % i for i in range(600000))  # ~4.8 MB, under max_body_bytes
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
        for _ in range(2):  # the second on the reused upstream connection
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
            send_request(s, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            status, _, out = read_response(s)[:3]
            s.close()
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["body_len"], len(body))
        with self.up.lock:
            got = [r[3] for r in self.up.requests]
        self.assertEqual(len(got), 2)
        for g in got:
            self.assertEqual(hashlib.sha256(g).hexdigest(), hashlib.sha256(body).hexdigest())
        io = io_uring_counts(self.gw)
        if self.batching():  # the socket took part of the first request: libuv finished it (the
            self.assertGreaterEqual(io["handed"], 1, io)  # second may fit once the upstream reads)
        else:
            self.assertEqual(io["sends"], 0, io)

    def test_an_answer_larger_than_the_socket_takes_arrives_whole_in_sync(self):
        self.up = Upstream("big")
        big = bytes((i * 7 + 3) % 251 for i in range(1 << 16)) * 64  # 4 MiB
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % len(big)
        self.up.script = (head, [big[i:i + (1 << 20)] for i in range(0, len(big), 1 << 20)])
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}], extra=self.EXTRA)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", self.gw.port))
        req = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        for _ in range(2):  # the second answer on the same client connection: still framed right
            send_request(s, "POST", "/v1/chat/completions", req,
                         {"Content-Type": "application/json", "x-fixture-mode": "script"})
            time.sleep(0.3)  # not reading: the gateway's first write takes part of the answer
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            line, headers, rest = read_head(s)
            self.assertIn(" 200 ", line)
            out = bytearray(rest)
            while len(out) < int(headers["content-length"]):
                chunk = s.recv(1 << 20)
                self.assertTrue(chunk, "answer cut")
                out += chunk
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            self.assertEqual(len(out), len(big))
            self.assertEqual(hashlib.sha256(out).hexdigest(), hashlib.sha256(big).hexdigest())
        s.close()

    def test_small_requests_and_answers_leave_batched(self):
        """Each proxied request makes two writes of the gateway's own (the request upstream,
        the answer to the client): batched, both go through the ring, fewer submissions than
        writes never more; off, none does."""
        self.up = Upstream("small")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}], extra=self.EXTRA)
        before = io_uring_counts(self.gw)
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        req = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        for _ in range(20):
            send_request(s, "POST", "/v1/chat/completions", req, {"Content-Type": "application/json"})
            status, _, out = read_response(s)[:3]
            self.assertEqual(status, 200, out)
        s.close()
        after = io_uring_counts(self.gw)
        sends = after["sends"] - before["sends"]
        if self.batching():
            self.assertGreaterEqual(sends, 40, after)
            self.assertGreaterEqual(after["submits"] - before["submits"], 1, after)
            self.assertLessEqual(after["submits"] - before["submits"], sends, after)
        else:
            self.assertEqual(sends, 0, after)


    def test_a_kept_alive_connection_is_read_through_the_ring(self):
        """A client connection kept alive after its first answer is read through the batcher
        (its first request was libuv's: a connection that closes after one pays nothing for
        the reader), as are the pooled upstream connections; closed, its reader goes."""
        self.up = Upstream("small")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}], extra=self.EXTRA)
        req = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        hdrs = {"Content-Type": "application/json"}
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        for _ in range(2):
            send_request(s, "POST", "/v1/chat/completions", req, hdrs)
            self.assertEqual(read_response(s)[0], 200)
        held = io_uring_counts(self.gw)["readers"]
        s.close()
        if not self.batching():
            self.assertEqual(held, 0)
            return
        self.assertGreaterEqual(held, 2)  # this connection and its upstream one
        for _ in range(100):  # the close reaches the gateway in one of its next turns
            if io_uring_counts(self.gw)["readers"] < held:
                break
            time.sleep(0.02)
        self.assertLess(io_uring_counts(self.gw)["readers"], held)


class WritePathWithoutBatchingTest(WritePathTest):
    """The same with `io_uring: false`: a system call per write, partial writes queued."""
    EXTRA = "io_uring: false"


if __name__ == "__main__":
    unittest.main()
