"""The live simulator's KV-cache events (`switchboard sim --kv-events-*`), read with pyzmq and
msgpack as a vLLM subscriber reads them: the 3-frame messages (topic, 8-byte big-endian seq
from 0, msgpack payload), the batch envelope [ts, events, dp_rank], the events in both
encodings and both hash forms, the replay socket answering a gap left by the drop-every fault,
AllBlocksCleared after /reset_prefix_cache, a port per replica, and the contract the gateway's
precise index rests on: /tokenize returns the token ids that the BlockStored events of the same
chat request carry. Also (no events needed): a follow-up turn hits the previous answer's
blocks, since the answer tokenizes back to the ids the engine generated and cached."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

try:
    import msgpack
    import zmq
except ImportError:  # pyenv interpreters do not see Debian's python3-zmq / python3-msgpack
    sys.path.append("/usr/lib/python3/dist-packages")
    import msgpack
    import zmq

from fixtures import GATEWAY_BIN, free_port, http, wait_until
from test_sim import MODEL, Sim, post

BLOCK = 16


class EventSim(Sim):
    """`switchboard sim` with events on: reads the banner's extra "kv-events" line per replica."""

    def __init__(self, *flags, replicas=1):
        self.dir = tempfile.mkdtemp(prefix="sb-sim-kv-")
        self.log_path = os.path.join(self.dir, "sim.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        args = [GATEWAY_BIN, "sim", "--replicas", str(replicas), "--port", "0", "--model", MODEL]
        self.proc = subprocess.Popen(args + [str(f) for f in flags], stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("switchboard sim:"):
            self.proc.wait(5)
            self.proc.stdout.close()
            self.log.close()
            why = open(self.log_path).read()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise AssertionError("sim did not start: %r\n%s" % (first, why))
        self.ports, self.kv, self.replay = [], [], []
        for _ in range(replicas):
            line = self.proc.stdout.readline()
            self.ports.append(int(re.search(r"http://[^:]+:(\d+)", line).group(1)))
            kv = self.proc.stdout.readline().split()
            assert kv[0] == "kv-events", kv
            self.kv.append(kv[1])
            self.replay.append(kv[3] if len(kv) > 3 else None)
        self.port = self.ports[0]


class Subscriber:
    """A SUB socket on one replica's publisher, and a DEALER on its replay socket."""

    def __init__(self, sim, i=0, topic=b""):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        self.sub.connect(sim.kv[i].replace("0.0.0.0", "127.0.0.1"))
        self.sim, self.i = sim, i
        self.received = []  # (topic, seq, payload bytes)

    def sync(self):
        """Waits until the subscription reaches the publisher (ZMQ drops what a PUB sends before
        it knows the subscriber): resets the cache, which publishes AllBlocksCleared, until
        one arrives; then forgets what arrived."""
        def got_one():
            st, _, _ = http(self.sim.ports[self.i], "POST", "/reset_prefix_cache", {})
            assert st == 200, st
            return self.sub.poll(50)
        wait_until(got_one, what="the subscription to reach the publisher")
        self.drain()
        self.received = []

    def drain(self, wait_ms=200):
        while self.sub.poll(wait_ms):
            frames = self.sub.recv_multipart()
            assert len(frames) == 3, frames
            self.received.append((frames[0], int.from_bytes(frames[1], "big"), frames[2]))

    def replay_from(self, start):
        d = self.ctx.socket(zmq.DEALER)
        d.connect(self.sim.replay[self.i])
        d.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert d.poll(5000), "no replay answer"
            frames = d.recv_multipart()
            assert len(frames) == 3 and frames[0] == b"", frames
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == -1:
                self.assert_equal(frames[2], b"")
                break
            out.append((seq, frames[2]))
        d.close(0)
        return out

    @staticmethod
    def assert_equal(a, b):
        assert a == b, (a, b)

    def close(self):
        self.sub.close(0)
        self.ctx.term()


def free_ports(n):
    """A base port P with P..P+n-1 free (held together while checked, then released)."""
    while True:
        base = free_port()
        socks = []
        try:
            for i in range(n):
                sk = socket.socket()
                socks.append(sk)
                sk.bind(("0.0.0.0", base + i))
            return base
        except OSError:
            continue
        finally:
            for sk in socks:
                sk.close()


def events_of(payload):
    batch = msgpack.unpackb(payload, raw=False)
    assert isinstance(batch, list) and len(batch) == 3, batch
    assert isinstance(batch[0], float) and batch[0] > 1.6e9, batch[0]
    assert batch[2] == 0, batch[2]
    return batch[1]


def as_map(ev):
    """An event in either encoding, as a dict with vLLM's field names."""
    if isinstance(ev, dict):
        return ev
    names = {"BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                             "lora_name"],
             "BlockRemoved": ["block_hashes", "medium"], "AllBlocksCleared": []}[ev[0]]
    assert len(ev) == len(names) + 1, ev
    return dict(zip(["type"] + names, ev))


def fold(h):
    """A hash as an integer: the int form, or the last 8 bytes of the 32-byte form."""
    if isinstance(h, bytes):
        assert len(h) == 32, h
        return int.from_bytes(h[-8:], "big")
    assert isinstance(h, int) and 0 <= h < 1 << 64, h
    return h


def conversation(text):
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


class KvEventsTest(unittest.TestCase):
    def check_stream(self, encoding, hashes):
        topic = "kv@sim-0@" + MODEL
        sim = EventSim("--speed", "20", "--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-replay",
                       "tcp://127.0.0.1:*", "--kv-events-topic", topic, "--kv-events-encoding", encoding,
                       "--kv-events-hashes", hashes)
        sub = Subscriber(sim, topic=topic.encode())
        try:
            sub.sync()
            msgs = conversation("Tell me about prefix caching in paged attention engines. " * 6)
            st, _, body = post(sim.port, {"model": MODEL, "messages": msgs, "max_tokens": 40})
            self.assertEqual(st, 200)
            prompt_tokens = json.loads(body)["usage"]["prompt_tokens"]
            st, _, body = post(sim.port, {"model": MODEL, "messages": msgs}, path="/tokenize")
            self.assertEqual(st, 200)
            tok = json.loads(body)
            self.assertEqual(tok["count"], prompt_tokens)
            self.assertEqual(len(tok["tokens"]), prompt_tokens)
            self.assertIsNone(tok["token_strs"])
            sub.drain()
            self.assertTrue(sub.received)

            # Frames: the topic, seqs contiguous (the reset before took some), envelope, events.
            seqs = [s for _, s, _ in sub.received]
            self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
            stored, hashes_seen = [], []
            for t, _, payload in sub.received:
                self.assertEqual(t, topic.encode())
                for ev in events_of(payload):
                    self.assertIsInstance(ev, dict if encoding == "map" else list)
                    m = as_map(ev)
                    self.assertEqual(m["type"], "BlockStored")
                    self.assertEqual(m["medium"], "GPU")
                    self.assertEqual(m["block_size"], BLOCK)
                    self.assertIsNone(m["lora_id"])
                    self.assertEqual(len(m["token_ids"]), BLOCK * len(m["block_hashes"]))
                    if encoding == "map":
                        self.assertEqual(m["extra_keys"], [None] * len(m["block_hashes"]))
                        self.assertEqual(m["group_idx"], 0)
                    stored.append(m)
                    hashes_seen += [fold(h) for h in m["block_hashes"]]
            # One chain: each run's parent is the block before it.
            self.assertIsNone(stored[0]["parent_block_hash"])
            for a, b in zip(stored, stored[1:]):
                self.assertEqual(fold(b["parent_block_hash"]), fold(a["block_hashes"][-1]))
            # The contract: /tokenize's ids are the BlockStored token ids (then the answer's).
            ids = [t for m in stored for t in m["token_ids"]]
            full = prompt_tokens // BLOCK * BLOCK
            self.assertEqual(ids[:full], tok["tokens"][:full])
            self.assertEqual(len(ids), (prompt_tokens + 40 - 1) // BLOCK * BLOCK)
            self.assertEqual(len(set(hashes_seen)), len(hashes_seen))

            # Replay from the first seq seen gives the same payloads, then the end marker.
            replayed = sub.replay_from(seqs[0])
            self.assertEqual([s for s, _ in replayed], seqs)
            self.assertEqual([p for _, p in replayed], [p for _, _, p in sub.received])
            return sim, sub
        except BaseException:
            sub.close()
            sim.stop()
            raise

    def test_array_events_int_hashes(self):
        sim, sub = self.check_stream("array", "int")
        sub.close()
        sim.stop()

    def test_map_events_bytes_hashes(self):
        sim, sub = self.check_stream("map", "bytes")
        sub.close()
        sim.stop()

    def test_reset_publishes_all_blocks_cleared(self):
        sim = EventSim("--speed", "20", "--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-encoding", "map")
        sub = Subscriber(sim)
        try:
            sub.sync()
            st, _, _ = http(sim.port, "POST", "/reset_prefix_cache", {})
            self.assertEqual(st, 200)
            sub.drain()
            self.assertEqual([events_of(p) for _, _, p in sub.received], [[{"type": "AllBlocksCleared"}]])
        finally:
            sub.close()
            sim.stop()

    def test_gap_recovered_through_replay(self):
        """--kv-events-drop-every 2 leaves every 2nd batch out of the live stream; a subscriber
        that sees the gap asks the replay socket and gets exactly the missing batches."""
        for attempt in range(5):  # fixed ports: another process may take one meanwhile
            port = free_ports(4)
            try:
                sim = EventSim("--speed", "20", "--kv-events-config",
                               json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                                           "endpoint": "tcp://*:%d" % port,
                                           "replay_endpoint": "tcp://127.0.0.1:%d" % (port + 2),
                                           "topic": "kv"}),
                               "--kv-events-drop-every", "2", replicas=2)
                break
            except AssertionError as e:
                if "address already in use" not in str(e) or attempt == 4:
                    raise
        # One port per replica: the configured ones + the replica index, as vLLM offsets ranks.
        # (A PUB endpoint without a wildcard would connect, as vLLM's does: `*` binds.)
        self.assertEqual(sim.kv, ["tcp://0.0.0.0:%d" % port, "tcp://0.0.0.0:%d" % (port + 1)])
        self.assertEqual(sim.replay, ["tcp://127.0.0.1:%d" % (port + 2), "tcp://127.0.0.1:%d" % (port + 3)])
        sub = Subscriber(sim, i=1, topic=b"kv")
        try:
            sub.sync()
            for k in range(6):
                st, _, _ = post(sim.ports[1], {"model": MODEL, "messages": conversation("question %d " % k * 30),
                                               "max_tokens": 2})
                self.assertEqual(st, 200)
            sub.drain()
            live = {s: p for _, s, p in sub.received}
            self.assertTrue(live)
            lo, hi = min(live), max(live)
            missing = [s for s in range(lo, hi + 1) if s not in live]
            self.assertTrue(missing, "the fault left no gap: %s" % sorted(live))
            self.assertTrue(all((s + 1) % 2 == 0 for s in missing), missing)
            replayed = dict(sub.replay_from(lo))
            self.assertTrue(set(range(lo, hi + 1)) <= set(replayed))
            for s, p in live.items():
                self.assertEqual(replayed[s], p)
            for s in missing:
                self.assertTrue(all(as_map(e)["type"] in ("BlockStored", "BlockRemoved")
                                    for e in events_of(replayed[s])))
            # A malformed replay request is dropped without an answer, and the socket still works.
            d = sub.ctx.socket(zmq.DEALER)
            d.connect(sim.replay[1])
            d.send_multipart([b"", b"\x00\x01"])
            self.assertFalse(d.poll(200))
            d.close(0)
            self.assertTrue(sub.replay_from(hi))
        finally:
            sub.close()
            sim.stop()


    def test_restart_starts_sequence_again(self):
        """--restart-every-ms: the replica comes back as a new process would, its seqs from 0."""
        sim = EventSim("--speed", "20", "--kv-events-endpoint", "tcp://127.0.0.1:*", "--restart-every-ms", "400")
        sub = Subscriber(sim)
        seqs = []

        def restarted():
            try:
                http(sim.port, "POST", "/reset_prefix_cache", {})
            except OSError:
                pass  # down between two lives
            sub.drain(wait_ms=20)
            seqs.extend(s for _, s, _ in sub.received)
            sub.received = []
            return any(b < a for a, b in zip(seqs, seqs[1:]))
        try:
            wait_until(restarted, timeout=20, what="a restart to reset the sequence")
            drop = next(i for i, (a, b) in enumerate(zip(seqs, seqs[1:])) if b < a)
            self.assertEqual(seqs[drop + 1], 0, seqs)
        finally:
            sub.close()
            sim.stop()


class FollowUpHitsAnswerTest(unittest.TestCase):
    def test_follow_up_hits_previous_answer(self):
        sim = Sim("--speed", "20")
        try:
            msgs = conversation("Explain continuous batching in two sentences. " * 3)
            st, _, body = post(sim.port, {"model": MODEL, "messages": msgs, "max_tokens": 50})
            self.assertEqual(st, 200)
            r1 = json.loads(body)
            answer = r1["choices"][0]["message"]["content"]
            p1 = r1["usage"]["prompt_tokens"]
            msgs2 = msgs + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And why?"}]
            st, _, body = post(sim.port, {"model": MODEL, "messages": msgs2, "max_tokens": 2})
            self.assertEqual(st, 200)
            cached = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
            # Every full block of prompt + answer but the answer's last token (never computed).
            self.assertEqual(cached, (p1 + 50 - 1) // BLOCK * BLOCK)
            self.assertGreater(cached, p1 // BLOCK * BLOCK)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
