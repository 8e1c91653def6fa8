"""Hostile JSON nesting through a real gateway and a real simulator.

Before: a 200 KB body of 100,000 nested arrays took about 10 s of CPU in the request
inspector, and every other request on the loop (a /healthz included) waited as long. Now the
tokenizer is linear and nesting past limits.max_json_depth (default 128) is refused with
400 json_too_deep. The tests assert answers, never durations: a stalled loop fails them only
through the fixtures' generous socket timeouts.
"""
import json
import os
import signal
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixtures import Gateway, Upstream, http, read_response, scrape_metric, send_request, wait_until  # noqa: E402
from test_sim import Sim, post  # noqa: E402


def nested_body(levels, model="m1"):
    """The shape of the reported attack: {"model":"m1","x":[[[...]]],"messages":[]}."""
    return (b'{"model":"%s","x":' % model.encode() + b"[" * levels + b"]" * levels +
            b',"messages":[{"role":"user","content":"hi"}]}')


def mib_body(open_, close_):
    """A 1 MiB body that is nesting from end to end."""
    head, tail = b'{"model":"m1","x":', b',"messages":[]}'
    n = (1 << 20) - len(head) - len(tail)
    return head + open_ * (n // (len(open_) + len(close_))) + close_ * (n // (len(open_) + len(close_))) + tail


class HostileJsonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = Upstream()
        cls.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [cls.up.address]}])

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.up.close()

    def assert_too_deep(self, status, body, limit=128):
        self.assertEqual(status, 400, body)
        err = json.loads(body)["error"]
        self.assertEqual(err["code"], "json_too_deep")
        self.assertEqual(err["type"], "invalid_request_error")
        self.assertIn("limits.max_json_depth", err["message"])
        self.assertIn(str(limit), err["message"])

    def test_issue_body_refused(self):
        before = len(self.up.requests)
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", nested_body(100000))
        self.assert_too_deep(st, body)
        self.assertEqual(len(self.up.requests), before, "a refused body is not forwarded")

    def test_mib_of_nesting_refused(self):
        for open_, close_ in ((b"[", b"]"), (b'{"a":', b"}"), (b'[{"k":', b"}]")):
            st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", mib_body(open_, close_))
            self.assert_too_deep(st, body)

    def test_depth_at_bound_is_forwarded(self):
        # The root object is level 1: "x" may nest 127 more.
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", nested_body(127))
        self.assertEqual(st, 200, body)
        st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", nested_body(128))
        self.assert_too_deep(st, body)

    def test_healthz_answered_behind_hostile_bodies(self):
        """Hostile bodies written whole on several connections, then a /healthz on another:
        every one is answered."""
        hostile = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
            send_request(s, "POST", "/v1/chat/completions", nested_body(100000))
            hostile.append(s)
        h = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        try:
            send_request(h, "GET", "/healthz")
            st, _, _ = read_response(h)
            self.assertEqual(st, 200)
            for s in hostile:
                st, _, body = read_response(s)
                self.assert_too_deep(st, body)
        finally:
            h.close()
            for s in hostile:
                s.close()


class DepthConfigTest(unittest.TestCase):
    def test_configured_bound_and_reload(self):
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                     extra="limits: { max_json_depth: 8 }")
        try:
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", nested_body(7))
            self.assertEqual(st, 200, body)
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", nested_body(8))
            self.assertEqual(st, 400)
            self.assertEqual(json.loads(body)["error"]["code"], "json_too_deep")
            self.assertIn("8 levels", json.loads(body)["error"]["message"])
            # A reload (SIGHUP) applies a new bound to the next request.
            with open(gw.config_path) as f:
                text = f.read()
            with open(gw.config_path, "w") as f:
                f.write(text.replace("max_json_depth: 8", "max_json_depth: 4"))
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: http(gw.port, "POST", "/v1/chat/completions", nested_body(5))[0] == 400,
                       10, "the reloaded bound")
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", nested_body(3))
            self.assertEqual(st, 200, body)
        finally:
            gw.close()
            up.close()


class TokenBoundTest(unittest.TestCase):
    def test_configured_token_bound(self):
        # limits.max_json_tokens bounds the values of one body: 400 json_too_large past it.
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                     extra="limits: { max_json_tokens: 100 }")
        try:
            def body(n):  # the root, model key and value, messages key, array, n numbers
                return {"model": "m1", "messages": [], "x": list(range(n))}
            st, _, out = http(gw.port, "POST", "/v1/chat/completions", body(50))
            self.assertEqual(st, 200, out)
            st, _, out = http(gw.port, "POST", "/v1/chat/completions", body(200))
            self.assertEqual(st, 400)
            err = json.loads(out)["error"]
            self.assertEqual(err["code"], "json_too_large")
            self.assertIn("limits.max_json_tokens", err["message"])
            self.assertEqual(len(up.requests), 1)
        finally:
            gw.close()
            up.close()

    def test_a_large_body_does_not_leave_its_token_array_behind(self):
        # The inspector's token array is kept between requests; one request of ~500,000 values
        # grew it to ~10 MiB for good. Now a request that grew it past 64 Ki tokens frees it.
        up = Upstream()
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}])
        try:
            def held():
                for line in http(gw.admin_port, "GET", "/metrics")[2].decode().splitlines():
                    if line.startswith("switchboard_inspector_token_bytes "):
                        return float(line.split()[1])
                raise AssertionError("no switchboard_inspector_token_bytes")
            small = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", small)[0], 200)
            kept = held()
            self.assertGreater(kept, 0)  # an ordinary request's array is kept for the next
            big = dict(small, x=[0] * 500000)
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", big)[0], 200)
            self.assertLessEqual(held(), 64 * 1024 * 20)
            big["x"] = "not an array"  # refused requests trim it too
            big["messages"] = [0] * 500000
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", big)[0], 400)
            self.assertLessEqual(held(), 64 * 1024 * 20)
            self.assertEqual(http(gw.port, "POST", "/v1/chat/completions", small)[0], 200)
            # Each loop keeps its own array (workers: each reads bodies with its own): at most
            # an ordinary one per worker stays.
            workers = max(1, scrape_metric(gw.admin_port, "switchboard_workers") or 1)
            self.assertGreaterEqual(held(), kept)
            self.assertLessEqual(held(), kept * workers)
        finally:
            gw.close()
            up.close()


class SimNestingTest(unittest.TestCase):
    def test_sim_refuses_deep_bodies(self):
        sim = Sim("--speed", "50")
        try:
            st, _, body = post(sim.port, nested_body(100000, model="sim/model-a"))
            self.assertEqual(st, 400)
            self.assertIn("too deep", json.loads(body)["error"]["message"])
            st, _, _ = http(sim.port, "GET", "/health")
            self.assertEqual(st, 200)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
