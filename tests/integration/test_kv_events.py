"""KV-cache events: a gateway pool with `kv_events:` subscribes to a publisher that speaks vLLM's
wire format exactly, and /metrics and /debug/endpoints show what arrived.

The publisher is pyzmq: an XPUB (a PUB that also reports subscriptions, so the test publishes
only once the gateway's filter has arrived) sending [topic, seq (8 bytes big-endian), payload],
and a ROUTER answering replay requests as vllm/distributed/kv_events.py does
(ZmqEventPublisher._service_replay: [identity, "", seq] in; [identity, "", seq, payload] for
each buffered batch from seq on, then [identity, "", -1 (signed, 8 bytes), ""]). Payloads are
built with python3-msgpack in the two shapes vLLM's msgspec encoder has produced: positional
(array_like structs: [ts, events, dp_rank], events ["BlockStored", ...]) and, since the structs
lost array_like, maps ({"ts", "events", "data_parallel_rank"}, events {"type": ..., fields},
omit_defaults dropping the trailing None-defaulted fields).
"""
import hashlib
import json
import os
import re
import signal
import sys
import threading
import unittest

try:
    import msgpack
    import zmq
except ImportError:  # Debian's python3-zmq/python3-msgpack under another python3 of the same version
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import msgpack
        import zmq
    except ImportError:
        msgpack = zmq = None

from fixtures import Gateway, Upstream, free_port, http, wait_until

TOPIC = "kv@pod-0@m1"


class Publisher:
    """vLLM's ZmqEventPublisher, reduced to its wire behaviour."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, repeated ones too
        self.port = free_port()
        self.pub.bind("tcp://127.0.0.1:%d" % self.port)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.replay_port = free_port()
        self.router.bind("tcp://127.0.0.1:%d" % self.replay_port)
        self.buffer = []  # (seq, payload), as vLLM's deque of buffer_steps
        self.seq = 0
        self.lock = threading.Lock()
        self.running = True
        self.replay_requests = 0
        self.thread = threading.Thread(target=self._serve_replay, daemon=True)
        self.thread.start()

    def wait_subscribed(self):
        while True:  # unsubscriptions (a subscriber leaving) are skipped
            assert self.pub.poll(15000), "the gateway never subscribed"
            msg = self.pub.recv()
            if msg[:1] == b"\x01":
                assert msg[1:] == TOPIC.encode(), msg
                return

    def publish(self, payload, send=True, seq=None):
        with self.lock:
            s = self.seq if seq is None else seq
            self.seq = s + 1
            self.buffer.append((s, payload))
        if send:
            self.pub.send_multipart((TOPIC.encode(), s.to_bytes(8, "big"), payload))
        return s

    def restart(self):
        """A new engine process: the count starts at 0 and the buffer is empty."""
        with self.lock:
            self.seq = 0
            self.buffer = []

    def _serve_replay(self):
        while self.running:
            if not self.router.poll(50):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            ident, _, start = frames
            start = int.from_bytes(start, "big")
            self.replay_requests += 1
            with self.lock:
                todo = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in todo:
                self.router.send_multipart((ident, b"", s.to_bytes(8, "big"), p))
            self.router.send_multipart((ident, b"", (-1).to_bytes(8, "big", signed=True), b""))

    def close(self):
        self.running = False
        self.thread.join()
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


def digest(i):
    return hashlib.sha256(b"block-%d" % i).digest()


def int_hash(i):
    """vLLM's int form of the digest: maybe_convert_block_hash."""
    return int.from_bytes(digest(i), "big") & ((1 << 64) - 1)


def array_batch(first, n_blocks, bin_hashes=False):
    """[ts, [BlockStored, BlockRemoved], dp_rank], positional, hashes as uint64 or 32-byte bins."""
    hashes = [digest(first + i) if bin_hashes else int_hash(first + i) for i in range(n_blocks)]
    tokens = list(range(16 * n_blocks))
    stored = ["BlockStored", hashes, None, tokens, 16, None, "GPU", None]
    removed = ["BlockRemoved", hashes[:1], "GPU"]
    return msgpack.packb([1789095808.83, [stored, removed], 0], use_bin_type=True)


def map_batch(first, n_blocks):
    """{"ts", "events", "data_parallel_rank"}, events as tagged maps (vLLM after PR #42892)."""
    hashes = [int_hash(first + i) for i in range(n_blocks)]
    stored = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": int_hash(first - 1),
              "token_ids": list(range(16 * n_blocks)), "block_size": 16, "lora_id": None, "medium": "GPU",
              "lora_name": None}
    cleared = {"type": "AllBlocksCleared"}
    return msgpack.packb({"ts": 1789095809.5, "events": [stored, cleared], "data_parallel_rank": 0},
                         use_bin_type=True)


def metric(text, name, endpoint):
    m = re.search(r'^%s\{pool="p",endpoint="%s"\} (\S+)$' % (re.escape(name), re.escape(endpoint)), text, re.M)
    return float(m.group(1)) if m else None


@unittest.skipIf(zmq is None, "python3-zmq and python3-msgpack are needed (scripts/deps.sh test)")
class KvEventsTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream()
        self.pub = Publisher()
        self.ep = self.up.address
        self.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [self.ep],
                            "yaml": ["kv_events: { port: %d, replay_port: %d, topic: \"%s\", replay_timeout_ms: 2000 }"
                                     % (self.pub.port, self.pub.replay_port, TOPIC)]}])
        self.pub.wait_subscribed()

    def tearDown(self):
        log = self.gw.close()
        self.pub.close()
        self.up.close()
        self.assertNotIn("runtime error", log)

    def metrics(self):
        status, _, body = http(self.gw.admin_port, "GET", "/metrics")
        self.assertEqual(status, 200)
        return body.decode()

    def wait_metric(self, name, value):
        last = {}

        def ok():
            last["v"] = metric(self.metrics(), name, self.ep)
            return last["v"] == value
        try:
            wait_until(ok, 15, "%s == %s" % (name, value))
        except AssertionError:
            raise AssertionError("%s is %s, want %s\n%s" % (name, last.get("v"), value, self.metrics()))

    def test_stream_gap_replay_garbage_restart(self):
        # Both encodings, both hash forms (uint64 above INT64_MAX, 32-byte bins).
        self.assertTrue(any(int_hash(i) > (1 << 63) for i in range(4)))
        self.pub.publish(array_batch(0, 4))
        self.pub.publish(array_batch(4, 2, bin_hashes=True))
        self.pub.publish(map_batch(6, 3))
        self.wait_metric("switchboard_kv_events_batches_total", 3)
        m = self.metrics()
        self.assertEqual(metric(m, "switchboard_kv_events_events_total", self.ep), 6)
        self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 2)
        self.assertEqual(metric(m, "switchboard_kv_events_decode_errors_total", self.ep), 0)
        self.assertEqual(metric(m, "switchboard_kv_events_gaps_total", self.ep), 0)
        self.assertIsNotNone(metric(m, "switchboard_kv_events_lag_seconds", self.ep))

        # Batch 3 is lost on the way; batch 4 shows the gap; the replay brings 3 and 4.
        self.pub.publish(array_batch(10, 1), send=False)
        self.pub.publish(array_batch(11, 1))
        self.wait_metric("switchboard_kv_events_batches_total", 5)
        m = self.metrics()
        self.assertEqual(metric(m, "switchboard_kv_events_gaps_total", self.ep), 1)
        self.assertEqual(metric(m, "switchboard_kv_events_replays_total", self.ep), 1)
        self.assertEqual(metric(m, "switchboard_kv_events_replayed_batches_total", self.ep), 2)
        self.assertEqual(metric(m, "switchboard_kv_events_clears_total", self.ep), 0)
        self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 4)
        self.assertEqual(self.pub.replay_requests, 1)

        # A payload that is not a batch is counted and dropped; the next one is delivered.
        self.pub.publish(b"\x93\xcb\x00\x01")
        self.pub.publish(msgpack.packb(["not", "a", "batch"]))
        self.pub.publish(map_batch(12, 1))
        self.wait_metric("switchboard_kv_events_batches_total", 6)
        m = self.metrics()
        self.assertEqual(metric(m, "switchboard_kv_events_decode_errors_total", self.ep), 2)
        self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 7)

        # The engine restarts: its sequence starts at 0 again, and the endpoint is cleared.
        self.pub.restart()
        self.pub.publish(array_batch(20, 1))
        self.wait_metric("switchboard_kv_events_restarts_total", 1)
        m = self.metrics()
        self.assertEqual(metric(m, "switchboard_kv_events_clears_total", self.ep), 1)
        self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 0)

        status, _, body = http(self.gw.admin_port, "GET", "/debug/endpoints")
        self.assertEqual(status, 200)
        kv = json.loads(body)["pools"][0]["endpoints"][0]["kv_events"]
        self.assertEqual(kv["publisher"], "tcp://127.0.0.1:%d" % self.pub.port)
        self.assertEqual(kv["last_seq"], 0)
        self.assertEqual(kv["restarts"], 1)
        self.assertEqual(kv["gaps"], 1)
        self.assertEqual(kv["decode_errors"], 2)
        self.assertFalse(kv["replaying"])


    def reload(self, n, edit):
        with open(self.gw.config_path) as f:
            text = f.read()
        with open(self.gw.config_path, "w") as f:
            f.write(edit(text))
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded (%d)" % n in open(self.gw.log_path).read(), 10, "reload %d" % n)

    def test_reloads_keep_or_replace_the_subscription(self):
        self.pub.publish(array_batch(0, 1))
        self.pub.publish(array_batch(1, 1))
        self.wait_metric("switchboard_kv_events_batches_total", 2)
        # In place (same pools and endpoints, kv_events unchanged): the stream goes on.
        self.reload(1, lambda t: t.replace("replay_timeout_ms: 2000 }", "replay_timeout_ms: 2000 }\n    probe: { interval_ms: 200 }"))
        self.pub.publish(array_batch(2, 1))
        self.wait_metric("switchboard_kv_events_batches_total", 3)
        # A reload that rebuilds the gateway (a pool added): the subscriber moves over with its
        # sequence and counters (a new one would count from 0, and see batch 3 as its first).
        up2 = Upstream("u2")
        try:
            self.reload(2, lambda t: t + "  - name: q\n    models: [\"m2\"]\n    endpoints: [\"%s\"]\n" % up2.address)
            self.pub.publish(array_batch(3, 1))
            self.wait_metric("switchboard_kv_events_batches_total", 4)
            m = self.metrics()
            self.assertEqual(metric(m, "switchboard_kv_events_gaps_total", self.ep), 0)
            self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 3)
            # Changed kv_events options: a new subscription (it subscribes again, counts anew),
            # which meets the stream at seq 4 and learns batches 0..3 from the replay buffer
            # (replay_on_join): 5 batches, one replay, no gap.
            self.reload(3, lambda t: t.replace("replay_timeout_ms: 2000", "replay_timeout_ms: 3000"))
            self.pub.wait_subscribed()
            self.pub.publish(array_batch(4, 1))
            self.wait_metric("switchboard_kv_events_batches_total", 5)
            m = self.metrics()
            self.assertEqual(metric(m, "switchboard_kv_events_last_seq", self.ep), 4)
            self.assertEqual(metric(m, "switchboard_kv_events_replays_total", self.ep), 1)
            self.assertEqual(metric(m, "switchboard_kv_events_replayed_batches_total", self.ep), 5)
            self.assertEqual(metric(m, "switchboard_kv_events_gaps_total", self.ep), 0)
            self.assertEqual(metric(m, "switchboard_kv_events_clears_total", self.ep), 0)
        finally:
            up2.close()


@unittest.skipIf(zmq is None, "python3-zmq and python3-msgpack are needed (scripts/deps.sh test)")
class KvEventsAbsentTest(unittest.TestCase):
    def test_pool_without_kv_events_has_no_subscription(self):
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}])
        try:
            status, _, body = http(gw.admin_port, "GET", "/metrics")
            self.assertEqual(status, 200)
            self.assertNotIn(b"switchboard_kv_events_", body)
            status, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
            self.assertNotIn(b'"kv_events"', body)
        finally:
            gw.close()
            up.close()


if __name__ == "__main__":
    unittest.main()
