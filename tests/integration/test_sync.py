"""Gateway sync (`sync:`, net/peer_sync.h), live: two gateway replicas in front of one simulated
fleet tell each other what they sent where. A prefix routed by one is known to the other (it
sends the same prompt to the same replica without ever having routed it), a request streaming
through one counts as in flight in the other until it ends, and hostile or lost peer messages
are counted and released, never trusted for long."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from fixtures import GATEWAY_BIN, Gateway, free_port, http, scrape_metric, wait_until
from test_sim import MODEL, Sim

try:
    import zmq
    from zmq.utils import z85
except ImportError:
    zmq = None


def chat(system, question, stream=False, max_tokens=2):
    return {"model": MODEL, "max_tokens": max_tokens, "stream": stream,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def frame(kind, sender, seq, request, pool=b"", endpoint=b"", prompt_tokens=0, hashes=()):
    """One gateway-sync message (proto/peer_msg.h)."""
    head = struct.pack("<4sBBHQQQ", b"SBSY", 1, kind, 0, sender, seq, request)
    if kind != 1:
        return head
    return (head + struct.pack("<IHHI", prompt_tokens, len(pool), len(endpoint), len(hashes)) + pool + endpoint
            + b"".join(struct.pack("<Q", h) for h in hashes))


class SyncTest(unittest.TestCase):
    def setUp(self):
        # Slow enough that a streamed answer of 400 tokens lasts a few seconds.
        self.sim = Sim("--speed", "0.5", replicas=4)
        self.sync_ports = [free_port(), free_port()]
        self.extra_port = free_port()  # a third "peer": the test's own publisher
        pool = {"name": "p", "models": [MODEL], "profile": "prefix-only",
                "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports]}
        self.gws = []
        try:
            for i in range(2):
                peers = ["tcp://127.0.0.1:%d" % self.sync_ports[1 - i], "tcp://127.0.0.1:%d" % self.extra_port]
                extra = ("sync: { listen: \"tcp://127.0.0.1:%d\", peers: %s, heartbeat_ms: 100, "
                         "peer_timeout_ms: 1500, max_tracked: 8 }" % (self.sync_ports[i], json.dumps(peers)))
                self.gws.append(Gateway([pool], extra=extra))
        except Exception:
            for g in self.gws:
                g.close()
            self.sim.stop()
            raise
        # Each hears the other's heartbeats (ZMQ drops what is published before the
        # subscription is up: a test request sent earlier would not be heard).
        for g in self.gws:
            wait_until(lambda g=g: scrape_metric(g.admin_port, "switchboard_sync_peers_alive") == 1, 10,
                       "the peer's heartbeats")

    def tearDown(self):
        for g in self.gws:
            g.close()
        self.sim.stop()

    def endpoints(self, gw):
        st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
        self.assertEqual(st, 200)
        return json.loads(body)["pools"][0]["endpoints"]

    def last_decision(self, gw):
        st, _, body = http(gw.admin_port, "GET", "/debug/decisions")
        return [d for d in json.loads(body)["decisions"] if d["pool"] == "p"][0]

    def test_prefix_routed_by_one_is_known_to_the_other(self):
        a, b = self.gws
        system = "You are a careful assistant for the billing team. " * 24  # ~20 blocks
        st, _, _ = http(a.port, "POST", "/v1/chat/completions", json.dumps(chat(system, "first?")).encode())
        self.assertEqual(st, 200)
        holder = self.last_decision(a)["picked_index"]
        wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_applied_total") >= 1, 5,
                   "b to hear a's dispatch")
        for i in range(3):
            st, _, _ = http(b.port, "POST", "/v1/chat/completions",
                            json.dumps(chat(system, "question %d?" % i)).encode())
            self.assertEqual(st, 200)
            d = self.last_decision(b)
            self.assertEqual(d["picked_index"], holder, "b sends the prefix where a sent it")
            self.assertGreaterEqual(d["candidates"][holder]["prefix"]["blocks"], 16)
        # And back: a hears b's three dispatches; every request ended, so none still counts.
        wait_until(lambda: scrape_metric(a.admin_port, "switchboard_sync_applied_total") >= 3, 5, "a to hear b")
        for g in self.gws:
            wait_until(lambda g=g: scrape_metric(g.admin_port, "switchboard_sync_tracked") == 0, 5,
                       "every peer request released")
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_decode_errors_total"), 0)
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_unknown_total"), 0)

    def test_peer_stream_counts_in_flight_until_it_ends(self):
        a, b = self.gws
        body = json.dumps(chat("Tell a long story. " * 4, "go", stream=True, max_tokens=400)).encode()
        done = {}

        def stream():
            done["result"] = http(a.port, "POST", "/v1/chat/completions", body, timeout=60)
        t = threading.Thread(target=stream)
        t.start()
        try:
            wait_until(lambda: sum(e["own"]["in_flight"] for e in self.endpoints(b)) == 1, 10,
                       "a's stream to count in b's accounting")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_tracked"), 1)
        finally:
            t.join(60)
        self.assertEqual(done["result"][0], 200)
        wait_until(lambda: sum(e["own"]["in_flight"] for e in self.endpoints(b)) == 0, 5,
                   "the stream's end to release it in b")
        self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_tracked"), 0)

    def reloads(self, gw, result):
        st, _, body = http(gw.admin_port, "GET", "/metrics")
        m = re.search(r'^switchboard_reloads_total\{result="%s"\} (\d+)$' % result, body.decode(), re.M)
        return int(m.group(1))

    def test_reloads_keep_the_sync(self):
        """A reload that rebuilds the gateway (an endpoint added) hands the sockets over: the
        peer is still heard and still hears it. One that changes `sync` is refused."""
        a, b = self.gws
        with open(a.config_path) as f:
            text = f.read()
        with open(a.config_path, "w") as f:
            f.write(text.replace('"127.0.0.1:%d"]' % self.sim.ports[-1],
                                 '"127.0.0.1:%d", "127.0.0.1:%d"]' % (self.sim.ports[-1], self.extra_port)))
        ok, failed = self.reloads(a, "success"), self.reloads(a, "failure")
        a.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: self.reloads(a, "success") == ok + 1, 10, "the rebuilding reload")
        self.assertEqual(len(self.endpoints(a)), 5)
        heard_by_b = scrape_metric(b.admin_port, "switchboard_sync_applied_total")
        heard_by_a = scrape_metric(a.admin_port, "switchboard_sync_applied_total")
        body = json.dumps(chat("After the reload. " * 8, "hi")).encode()
        self.assertEqual(http(a.port, "POST", "/v1/chat/completions", body)[0], 200)
        self.assertEqual(http(b.port, "POST", "/v1/chat/completions", body)[0], 200)
        wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_applied_total") == heard_by_b + 1, 5,
                   "b to hear the rebuilt a")
        wait_until(lambda: scrape_metric(a.admin_port, "switchboard_sync_applied_total") == heard_by_a + 1, 5,
                   "the rebuilt a to hear b")
        with open(a.config_path, "w") as f:
            f.write(text.replace("heartbeat_ms: 100", "heartbeat_ms: 200"))
        a.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: self.reloads(a, "failure") == failed + 1, 10, "the refused reload")
        self.assertIn("reload refused: sync changed", open(a.log_path).read())
        self.assertEqual(scrape_metric(a.admin_port, "switchboard_sync_peers_alive"), 1)

    @unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
    def test_hostile_and_lost_peer_messages(self):
        a, b = self.gws
        ctx = zmq.Context()
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind("tcp://127.0.0.1:%d" % self.extra_port)
        try:
            ep = ("127.0.0.1:%d" % self.sim.ports[2]).encode()
            sender = 0x5EED

            # Until the subscription is up, frames are lost: publish heartbeats until b knows
            # this sender as a second peer.
            seq = 0
            deadline = time.monotonic() + 10
            while scrape_metric(b.admin_port, "switchboard_sync_peers_alive") != 2:
                self.assertLess(time.monotonic(), deadline, "b never heard the test's publisher")
                seq += 1
                pub.send(frame(4, sender, seq, 0))
                time.sleep(0.05)
            garbage = [b"", b"SBSY", b"XXXX" + bytes(28), frame(4, sender, seq + 1, 0)[:-1],
                       frame(1, sender, 99, 1, b"p", ep, 10, [1, 2])[:-3],
                       struct.pack("<4sBBHQQQ", b"SBSY", 2, 4, 0, sender, 1, 0),
                       frame(1, sender, 99, 1, b"p", ep, 10, [1]) + b"!"]
            for g in garbage:
                pub.send(g)
            pub.send_multipart([b"two", b"frames"])
            wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_decode_errors_total") == len(garbage) + 1,
                       5, "every bad frame counted")
            # A pool or endpoint b does not have: counted, nothing applied.
            seq += 1
            pub.send(frame(1, sender, seq, 7, b"nope", ep, 100, [1, 2, 3]))
            seq += 1
            pub.send(frame(1, sender, seq, 8, b"p", b"10.9.9.9:1", 100, [1, 2, 3]))
            wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_unknown_total") == 2, 5, "unknown names")
            # Past max_tracked (8): counted as untracked; a gap in the sequence counted.
            for r in range(10):
                seq += 1
                pub.send(frame(1, sender, seq, 100 + r, b"p", ep, 100, [r + 1]))
            seq += 5  # four lost
            pub.send(frame(4, sender, seq, 0))
            wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_untracked_total") == 2, 5, "the bound")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_tracked"), 8)
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_gaps_total"), 4)
            self.assertEqual(self.endpoints(b)[2]["own"]["in_flight"], 8)
            # One ends properly; a stray end is counted; then the peer goes silent and the
            # rest are released (peer_timeout_ms 1500).
            seq += 1
            pub.send(frame(3, sender, seq, 100))
            seq += 1
            pub.send(frame(3, sender, seq, 999))
            wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_stray_total") == 1, 5, "a stray end")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_tracked"), 7)
            wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_peer_timeouts_total") == 1, 5,
                       "the silent peer's timeout")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_tracked"), 0)
            self.assertEqual(self.endpoints(b)[2]["own"]["in_flight"], 0)
            # The real peer is still alive, and b still serves.
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_peers_alive"), 1)
            st, _, _ = http(b.port, "POST", "/v1/chat/completions", json.dumps(chat("hi", "there")).encode())
            self.assertEqual(st, 200)
        finally:
            pub.close()
            ctx.term()


def keygen(path):
    """`switchboard keygen -o path`: the secret into a 0600 file; returns the public key."""
    r = subprocess.run([GATEWAY_BIN, "keygen", "-o", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stderr.split("public key: ")[1].strip()


class SyncCurveTest(unittest.TestCase):
    """sync.key_file: the fleet's gateways share one CURVE key; their traffic is encrypted, and
    neither a subscriber nor a publisher without the secret takes part."""

    def setUp(self):
        self.sim = Sim(replicas=2)
        self.dir = tempfile.mkdtemp(prefix="sb-curve-")
        self.key = os.path.join(self.dir, "sync.key")
        self.public = keygen(self.key)
        self.sync_ports = [free_port(), free_port()]
        self.plain_port, self.forger_port = free_port(), free_port()  # b's two impostor "peers"
        pool = {"name": "p", "models": [MODEL], "profile": "prefix-only",
                "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports]}
        self.gws = []
        try:
            for i in range(2):
                peers = ["tcp://127.0.0.1:%d" % self.sync_ports[1 - i]]
                if i == 1:
                    peers += ["tcp://127.0.0.1:%d" % self.plain_port, "tcp://127.0.0.1:%d" % self.forger_port]
                extra = ('sync: { listen: "tcp://127.0.0.1:%d", peers: %s, key_file: "%s", heartbeat_ms: 100, '
                         "peer_timeout_ms: 1500 }" % (self.sync_ports[i], json.dumps(peers), self.key))
                self.gws.append(Gateway([pool], extra=extra))
        except Exception:
            for g in self.gws:
                g.close()
            self.sim.stop()
            raise
        for g in self.gws:
            wait_until(lambda g=g: scrape_metric(g.admin_port, "switchboard_sync_peers_alive") == 1, 10,
                       "the peer's heartbeats, over CURVE")

    def tearDown(self):
        for g in self.gws:
            g.close()
        self.sim.stop()

    def test_keyed_gateways_share_what_they_sent(self):
        a, b = self.gws
        self.assertEqual(os.stat(self.key).st_mode & 0o777, 0o600)
        for g in self.gws:  # each admitted the other's subscriber by the fleet's key
            self.assertGreaterEqual(scrape_metric(g.admin_port, "switchboard_sync_auth_accepted_total"), 1)
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_auth_refused_total"), 0)
        body = json.dumps(chat("You are the keyed fleet's assistant. " * 24, "hello?")).encode()
        self.assertEqual(http(a.port, "POST", "/v1/chat/completions", body)[0], 200)
        wait_until(lambda: scrape_metric(b.admin_port, "switchboard_sync_applied_total") == 1, 5,
                   "b to hear a's dispatch")
        self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_decode_errors_total"), 0)
        # The key cannot change under a running gateway: a reload that changes it is refused.
        keygen(self.key + ".new")
        with open(a.config_path) as f:
            text = f.read()
        with open(a.config_path, "w") as f:
            f.write(text.replace(self.key, self.key + ".new"))
        st, _, metrics = http(a.admin_port, "GET", "/metrics")
        failed = int(re.search(r'^switchboard_reloads_total\{result="failure"\} (\d+)$', metrics.decode(), re.M)
                     .group(1))
        a.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: int(re.search(r'^switchboard_reloads_total\{result="failure"\} (\d+)$',
                                         http(a.admin_port, "GET", "/metrics")[2].decode(), re.M).group(1))
                   == failed + 1, 10, "the refused reload")
        self.assertIn("reload refused: sync changed", open(a.log_path).read())

    @unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
    def test_outsiders_neither_read_nor_publish(self):
        a, b = self.gws
        ctx = zmq.Context()
        socks = []

        def sock(kind):
            s = ctx.socket(kind)
            s.setsockopt(zmq.LINGER, 0)
            socks.append(s)
            return s
        try:
            a_addr = "tcp://127.0.0.1:%d" % self.sync_ports[0]
            # Readers of a's publisher: one in plain text, one with a key of its own (it knows
            # the fleet's public key, so a proves itself to it, but a's ZAP handler refuses it),
            # and, the control, one holding the fleet's secret.
            plain = sock(zmq.SUB)
            stranger = sock(zmq.SUB)
            stranger.curve_publickey, stranger.curve_secretkey = zmq.curve_keypair()
            stranger.curve_serverkey = self.public.encode()
            member = sock(zmq.SUB)
            secret = open(self.key, "rb").read().strip()
            member.curve_secretkey = secret
            member.curve_publickey = self.public.encode()
            member.curve_serverkey = self.public.encode()
            for s in (plain, stranger, member):
                s.setsockopt(zmq.SUBSCRIBE, b"")
                s.connect(a_addr)
            wait_until(lambda: scrape_metric(a.admin_port, "switchboard_sync_auth_refused_total") >= 1, 10,
                       "a's ZAP handler to refuse the stranger")
            # Publishers b connects to as peers: one in plain text, one a CURVE server with a
            # secret that is not the fleet's. Both send b dispatches it would apply if heard.
            plain_pub = sock(zmq.PUB)
            plain_pub.bind("tcp://127.0.0.1:%d" % self.plain_port)
            forger = sock(zmq.PUB)
            forger.curve_server = True
            forger.curve_secretkey = zmq.curve_keypair()[1]
            forger.bind("tcp://127.0.0.1:%d" % self.forger_port)
            ep = ("127.0.0.1:%d" % self.sim.ports[0]).encode()
            heard = 0
            seq = 0
            start = scrape_metric(b.admin_port, "switchboard_sync_received_total")
            # The member hears a; keep going until it has heard 20 of a's messages and b 20
            # frames (a's heartbeats, every 100 ms) while the impostors published throughout.
            while heard < 20 or scrape_metric(b.admin_port, "switchboard_sync_received_total") < start + 20:
                seq += 1
                for p in (plain_pub, forger):
                    p.send(frame(1, 0xBAD, seq, seq, b"p", ep, 100, [seq]))
                if member.poll(50):
                    member.recv()
                    heard += 1
            for s in (plain, stranger):
                self.assertEqual(s.poll(0), 0, "an outsider read the fleet's messages")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_applied_total"), 0,
                             "b applied an impostor's dispatch")
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_peers_alive"), 1)
            self.assertEqual(scrape_metric(b.admin_port, "switchboard_sync_decode_errors_total"), 0)
            self.assertEqual(self.endpoints_in_flight(b), 0)
        finally:
            for s in socks:
                s.close()
            ctx.term()

    def endpoints_in_flight(self, gw):
        st, _, body = http(gw.admin_port, "GET", "/debug/endpoints")
        return sum(e["own"]["in_flight"] for e in json.loads(body)["pools"][0]["endpoints"])


class SyncConfigTest(unittest.TestCase):
    def test_bind_failure_and_reload(self):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        pool = {"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:1"]}
        try:
            with self.assertRaises(AssertionError) as cm:
                Gateway([pool], extra='sync: { listen: "tcp://127.0.0.1:%d" }' % port)
            self.assertIn("sync: cannot bind", str(cm.exception))
        finally:
            taken.close()

    def test_a_key_file_that_is_not_a_key(self):
        pool = {"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:1"]}

        def bad_key(d):
            with open(os.path.join(d, "sync.key"), "w") as f:
                f.write("not-a-curve-key\n")
            return {}
        with self.assertRaises(AssertionError) as cm:
            Gateway([pool], extra='sync: { listen: "tcp://127.0.0.1:%d", key_file: sync.key }' % free_port(),
                    pre_start=bad_key)
        self.assertIn("sync.key_file must hold one CURVE secret key", str(cm.exception))

    def test_rotation_key_needs_key_file_and_another_key(self):
        pool = {"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:1"]}
        d = tempfile.mkdtemp(prefix="sb-rot-")
        key = os.path.join(d, "k")
        keygen(key)
        with self.assertRaises(AssertionError) as cm:
            Gateway([pool], extra='sync: { listen: "tcp://127.0.0.1:%d", rotation_key_file: "%s" }'
                    % (free_port(), key))
        self.assertIn("sync.rotation_key_file needs sync.key_file", str(cm.exception))
        with self.assertRaises(AssertionError) as cm:
            Gateway([pool], extra='sync: { listen: "tcp://127.0.0.1:%d", key_file: "%s", rotation_key_file: "%s" }'
                    % (free_port(), key, key))
        self.assertIn("sync.rotation_key_file holds the same key as sync.key_file", str(cm.exception))

    @unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
    def test_a_rotation_key_that_is_the_same_key_written_otherwise(self):
        # Curve25519 ignores a secret's three low bits: another text, the same key pair.
        pool = {"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:1"]}
        d = tempfile.mkdtemp(prefix="sb-rot-")
        key, twin = os.path.join(d, "k"), os.path.join(d, "twin")
        keygen(key)
        secret = bytearray(z85.decode(open(key, "rb").read().strip()))
        secret[0] ^= 1
        with open(twin, "wb") as f:
            f.write(z85.encode(bytes(secret)) + b"\n")
        self.assertNotEqual(open(twin, "rb").read().strip(), open(key, "rb").read().strip())
        with self.assertRaises(AssertionError) as cm:
            Gateway([pool], extra='sync: { listen: "tcp://127.0.0.1:%d", key_file: "%s", rotation_key_file: "%s" }'
                    % (free_port(), key, twin))
        self.assertIn("sync.rotation_key_file holds the same key as sync.key_file", str(cm.exception))


class SyncRotationTest(unittest.TestCase):
    """sync.rotation_key_file: a fleet moves from one key to another by two rolling restarts
    (docs/configuration.md, "Rotating the key") without a moment where two of its gateways
    cannot hear each other."""

    def setUp(self):
        self.sim = Sim(replicas=2)
        self.dir = tempfile.mkdtemp(prefix="sb-rotate-")
        self.old = os.path.join(self.dir, "old.key")
        self.new = os.path.join(self.dir, "new.key")
        keygen(self.old)
        keygen(self.new)
        self.gws = []

    def tearDown(self):
        for g in self.gws:
            g.close()
        self.sim.stop()

    def gateway(self, i, key, rotation):
        """Gateway i of two, peers of each other, with these keys (rotation: None for none)."""
        pool = {"name": "p", "models": [MODEL], "profile": "prefix-only",
                "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports]}
        extra = ('sync: { listen: "tcp://127.0.0.1:%d", peers: ["tcp://127.0.0.1:%d"], key_file: "%s", %s'
                 "heartbeat_ms: 100, peer_timeout_ms: 1500 }"
                 % (self.ports[i], self.ports[1 - i], key, 'rotation_key_file: "%s", ' % rotation if rotation else ""))
        return Gateway([pool], extra=extra)

    def start(self, keys):
        """Two gateways; keys[i] = (key_file, rotation_key_file or None)."""
        self.ports = [free_port(), free_port()]
        for i in range(2):
            self.gws.append(self.gateway(i, *keys[i]))
        for g in self.gws:
            wait_until(lambda g=g: scrape_metric(g.admin_port, "switchboard_sync_peers_alive") == 1, 10,
                       "the peer's heartbeats")

    def exchange(self):
        """A request through each gateway: the other counts it, once."""
        a, b = self.gws
        for n, (src, dst) in enumerate(((a, b), (b, a), (a, b), (b, a))):
            body = json.dumps(chat("You are rotation's assistant number %d. " % n * 20, "hi")).encode()
            self.assertEqual(http(src.port, "POST", "/v1/chat/completions", body)[0], 200)
            want = n // 2 + 1
            wait_until(lambda: scrape_metric(dst.admin_port, "switchboard_sync_applied_total") >= want, 5,
                       "the peer to hear the dispatch")
        for g in self.gws:
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_decode_errors_total"), 0)
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_auth_refused_total"), 0)

    def test_first_rollout_a_gateway_that_accepts_the_new_key_hears_one_that_does_not(self):
        # Phase 1 half done: b publishes with the old key and accepts the new one, a is untouched.
        self.start([(self.old, None), (self.old, self.new)])
        self.exchange()
        # b heard a over the old key, its own: nothing came over the rotation key.
        self.assertEqual(scrape_metric(self.gws[1].admin_port, "switchboard_sync_received_rotation_total"), 0)

    def test_second_rollout_gateways_publishing_with_different_keys_hear_each_other(self):
        # Phase 2 half done: a publishes with the new key and still accepts the old one; b is as
        # phase 1 left it. Each hears the other over its rotation key.
        self.start([(self.new, self.old), (self.old, self.new)])
        self.exchange()
        for g in self.gws:
            self.assertGreater(scrape_metric(g.admin_port, "switchboard_sync_received_rotation_total"), 0)

    def test_the_whole_procedure_one_gateway_restarted_at_a_time(self):
        # Both on the old key; then the documented three steps, each a rolling restart of the
        # two gateways. After every restart each gateway counts a dispatch sent through the other.
        self.start([(self.old, None), (self.old, None)])
        steps = [(1, self.old, self.new), (0, self.old, self.new), (1, self.new, self.old), (0, self.new, self.old),
                 (1, self.new, None), (0, self.new, None)]
        for n, (i, key, rotation) in enumerate(steps):
            self.gws[i].close()
            self.gws[i] = self.gateway(i, key, rotation)
            for src, dst in ((self.gws[i], self.gws[1 - i]), (self.gws[1 - i], self.gws[i])):
                before = scrape_metric(dst.admin_port, "switchboard_sync_applied_total")
                body = json.dumps(chat("Step %d's assistant. " % n * 20, "hi")).encode()

                def counted():
                    # The first dispatch may go before the new gateway's connections are up
                    # (ZMQ drops what a PUB sends to no one): send until one is counted.
                    self.assertEqual(http(src.port, "POST", "/v1/chat/completions", body)[0], 200)
                    return scrape_metric(dst.admin_port, "switchboard_sync_applied_total") > before
                wait_until(counted, 15, "step %d: a dispatch through one gateway counted by the other" % n)
        # Rotation done: nothing comes over a rotation key any more (there is none).
        for g in self.gws:
            self.assertEqual(scrape_metric(g.admin_port, "switchboard_sync_received_rotation_total"), 0)

    @unittest.skipIf(zmq is None, "python3-zmq is needed (scripts/deps.sh test)")
    def test_a_publisher_admits_only_holders_of_its_own_key(self):
        # a publishes with the new key and listens with the old one too; a holder of the old key
        # who knows the new public key is not admitted (past step 2, the old key is worth nothing
        # to a publisher), nor a stranger; a holder of the new key is.
        self.start([(self.new, self.old), (self.old, self.new)])
        a = self.gws[0]
        a_server = zmq.curve_public(open(self.new, "rb").read().strip())
        ctx = zmq.Context()
        socks = []
        try:
            accepted = scrape_metric(a.admin_port, "switchboard_sync_auth_accepted_total")
            refused = scrape_metric(a.admin_port, "switchboard_sync_auth_refused_total")
            subs = {}
            for name, secret in (("member", open(self.new, "rb").read().strip()),
                                 ("old holder", open(self.old, "rb").read().strip()),
                                 ("stranger", zmq.curve_keypair()[1])):
                sk = ctx.socket(zmq.SUB)
                socks.append(sk)
                sk.setsockopt(zmq.LINGER, 0)
                sk.curve_secretkey, sk.curve_publickey = secret, zmq.curve_public(secret)
                sk.curve_serverkey = a_server
                sk.setsockopt(zmq.SUBSCRIBE, b"")
                sk.connect("tcp://127.0.0.1:%d" % self.ports[0])
                subs[name] = sk
            self.assertTrue(subs["member"].poll(5000), "the new key's holder heard nothing (a's heartbeats)")
            wait_until(lambda: scrape_metric(a.admin_port, "switchboard_sync_auth_refused_total") >= refused + 2, 5,
                       "the two refusals")
            self.assertEqual(scrape_metric(a.admin_port, "switchboard_sync_auth_accepted_total"), accepted + 1)
            for name in ("old holder", "stranger"):
                self.assertEqual(subs[name].poll(0), 0, "the %s read the fleet's messages" % name)
        finally:
            for sk in socks:
                sk.close()
            ctx.term()

    def test_a_reload_that_changes_the_rotation_key_is_refused(self):
        self.start([(self.old, self.new), (self.old, self.new)])
        a = self.gws[0]
        third = os.path.join(self.dir, "third.key")
        keygen(third)
        with open(a.config_path) as f:
            text = f.read()
        with open(a.config_path, "w") as f:
            f.write(text.replace(self.new, third))

        def failures():
            return int(re.search(r'^switchboard_reloads_total\{result="failure"\} (\d+)$',
                                 http(a.admin_port, "GET", "/metrics")[2].decode(), re.M).group(1))
        failed = failures()
        a.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: failures() == failed + 1, 10, "the refused reload")
        self.assertIn("reload refused: sync changed", open(a.log_path).read())


if __name__ == "__main__":
    unittest.main()
