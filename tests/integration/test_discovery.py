"""Membership at run time through the live gateway: the registration API (POST/DELETE/GET
/admin/endpoints, TTL), DNS discovery (`endpoints_from`), static names that do not resolve, and a
SIGHUP that keeps what was registered.

Names that must fail to resolve use the reserved .invalid domain (RFC 6761), with a long retry
interval, so a run asks the resolver once or twice."""
import json
import os
import re
import signal
import socket
import threading
import unittest

from fixtures import ROOT, Gateway, Upstream, chat_body, free_port, http, read_response, send_request, wait_until

TOKEN = "adm-secret-1"
AUTH = {"Authorization": "Bearer " + TOKEN}


def admin(gw, method, path, body=None):
    st, h, b = http(gw.admin_port, method, path, body, AUTH)
    return st, (json.loads(b) if b else None)


def listed(gw):
    """{(pool, address): entry} from GET /admin/endpoints."""
    st, doc = admin(gw, "GET", "/admin/endpoints")
    assert st == 200, doc
    return {(p["pool"], e["address"]): e for p in doc["pools"] for e in p["endpoints"]}


def chat(gw, model="m1", headers=None):
    return http(gw.port, "POST", "/v1/chat/completions", chat_body(model), headers)


class RegistrationTest(unittest.TestCase):
    def setUp(self):
        self.ups = [Upstream("a"), Upstream("b")]
        self.static = Upstream("static")
        self.gw = Gateway([{"name": "p", "models": ["m1", "m1-alias"], "endpoints": []},
                           {"name": "q", "models": ["m2"], "endpoints": [self.static.address]}],
                          admin="token: %s" % TOKEN, extra="discovery: { drain_ms: 20000 }")

    def tearDown(self):
        self.gw.close()
        for u in self.ups + [self.static]:
            u.close()

    def test_register_routes_then_refresh(self):
        st, _, body = chat(self.gw)
        self.assertEqual(st, 503, "a pool with no endpoint yet refuses: %s" % body)
        st, doc = admin(self.gw, "POST", "/admin/endpoints",
                        {"address": self.ups[0].address, "pool": "p", "engine": "llama.cpp",
                         "labels": {"zone": "z1"}})
        self.assertEqual(st, 201, doc)
        self.assertEqual(doc, {"pool": "p", "address": self.ups[0].address, "state": "active", "source": "api",
                               "ttl_ms": None})
        wait_until(lambda: chat(self.gw)[0] == 200, 5, "the registered endpoint to take requests")
        self.assertGreaterEqual(len(self.ups[0].requests), 1)
        e = listed(self.gw)[("p", self.ups[0].address)]
        self.assertEqual((e["source"], e["state"], e["engine"], e["labels"]), ("api", "active", "llama.cpp",
                                                                               {"zone": "z1"}))
        self.assertEqual(listed(self.gw)[("q", self.static.address)]["source"], "config")
        # The same again is a refresh (200), by served model or alias too.
        st, doc = admin(self.gw, "POST", "/admin/endpoints", {"address": self.ups[0].address, "model": "m1-alias"})
        self.assertEqual((st, doc["pool"]), (200, "p"))
        # A second replica joins; both serve, and the first keeps its state across the rebuild.
        def dispatched(addr):
            st, _, b = http(self.gw.admin_port, "GET", "/debug/endpoints", headers=AUTH)
            eps = {e["address"]: e for p in json.loads(b)["pools"] for e in p["endpoints"]}
            return eps[addr]["own"]["dispatched"] if addr in eps else None
        before = dispatched(self.ups[0].address)
        self.assertGreaterEqual(before, 1)
        st, _ = admin(self.gw, "POST", "/admin/endpoints", {"address": self.ups[1].address, "model": "m1"})
        self.assertEqual(st, 201)
        wait_until(lambda: dispatched(self.ups[1].address) is not None, 5, "the second registration applied")
        self.assertGreaterEqual(dispatched(self.ups[0].address), before, "state carried over")
        wait_until(lambda: all(len(u.requests) > 0 for u in self.ups) or chat(self.gw)[0] != 200, 10,
                   "both replicas to serve")
        self.assertTrue(all(len(u.requests) > 0 for u in self.ups))
        st, _, m = http(self.gw.admin_port, "GET", "/metrics", headers=AUTH)
        self.assertRegex(m.decode(), r"switchboard_discovery_dynamic_endpoints 2\n")

    def test_a_join_keeps_what_the_staying_endpoint_holds(self):
        """The router's prefix index survives a membership change, renumbered: the endpoint
        that stays keeps the blocks it was sent (it would otherwise lose its affinity at every
        join or leave)."""
        gw = Gateway([{"name": "d", "models": ["md"], "profile": "default", "endpoints": []}],
                     admin="token: %s" % TOKEN)
        try:
            def blocks(addr):
                st, _, b = http(gw.admin_port, "GET", "/debug/endpoints", headers=AUTH)
                eps = {e["address"]: e for p in json.loads(b)["pools"] for e in p["endpoints"]}
                return eps[addr]["prefix_index"]["blocks"] if addr in eps else None
            a, b = self.ups
            self.assertEqual(admin(gw, "POST", "/admin/endpoints", {"address": a.address, "pool": "d"})[0], 201)
            wait_until(lambda: blocks(a.address) is not None, 5, "the first registration applied")
            st, _, body = http(gw.port, "POST", "/v1/chat/completions", chat_body("md", "a long shared prompt " * 40))
            self.assertEqual(st, 200, body)
            held = blocks(a.address)
            self.assertGreater(held, 0)
            self.assertEqual(admin(gw, "POST", "/admin/endpoints", {"address": b.address, "pool": "d"})[0], 201)
            wait_until(lambda: blocks(b.address) is not None, 5, "the second registration applied")
            self.assertEqual(blocks(a.address), held)
            self.assertEqual(blocks(b.address), 0)
        finally:
            gw.close()

    def test_a_burst_applies_once(self):
        """Five registrations pipelined on one connection arrive together: one rebuild."""
        self.gw.close()
        self.gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": []}], admin="token: %s" % TOKEN,
                          extra="discovery: { apply_ms: 500 }")
        addrs = ["127.0.0.1:%d" % free_port() for _ in range(5)]
        s = socket.create_connection(("127.0.0.1", self.gw.admin_port), timeout=10)
        wire = b""
        for a in addrs:
            body = json.dumps({"address": a, "pool": "p"}).encode()
            wire += (b"POST /admin/endpoints HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (TOKEN.encode(), len(body), body))
        s.sendall(wire)
        buf = b""
        for _ in addrs:
            left = []
            st, _, _ = read_response(s, buf, leftover=left)
            buf = left[0]
            self.assertEqual(st, 201)
        s.close()
        wait_until(lambda: len(listed(self.gw)) == 5, 10, "all five applied")
        st, _, m = http(self.gw.admin_port, "GET", "/metrics", headers=AUTH)
        self.assertRegex(m.decode(), r"switchboard_discovery_applies_total 1\n")

    def test_bad_registrations(self):
        cases = [
            (b"not json", 400), ({"pool": "p"}, 400), ({"address": "nope", "pool": "p"}, 400),
            ({"address": "127.0.0.1:0", "pool": "p"}, 400), ({"address": "127.0.0.1:9", "pool": "zz"}, 404),
            ({"address": "127.0.0.1:9", "model": "unknown"}, 404), ({"address": "127.0.0.1:9"}, 400),
            ({"address": "127.0.0.1:9", "pool": "p", "engine": "tgi"}, 400),
            ({"address": "127.0.0.1:9", "pool": "p", "ttl_ms": -5}, 400),
            ({"address": "127.0.0.1:9", "pool": "p", "labels": {"a": 1}}, 400),
            ({"address": "127.0.0.1:9", "pool": "p", "labels": {"a": "b c"}}, 400),
            ({"address": "127.0.0.1:9", "pool": "p", "labels": {str(i): "v" for i in range(9)}}, 400),
        ]
        for body, want in cases:
            st, _, b = http(self.gw.admin_port, "POST", "/admin/endpoints", body, AUTH)
            self.assertEqual(st, want, "%r -> %s %s" % (body, st, b))
            self.assertIn("error", json.loads(b))
        # A static endpoint of another pool: 409, and the message says which.
        st, doc = admin(self.gw, "POST", "/admin/endpoints", {"address": self.static.address, "pool": "p"})
        self.assertEqual(st, 409)
        self.assertIn("pool 'q'", doc["error"]["message"])
        # Registering a pool's own static endpoint changes nothing.
        st, doc = admin(self.gw, "POST", "/admin/endpoints", {"address": self.static.address, "pool": "q"})
        self.assertEqual((st, doc["source"]), (200, "config"))
        # Without the token: 401; a body over admin.max_body_bytes (64 KiB): 413.
        st, _, _ = http(self.gw.admin_port, "POST", "/admin/endpoints", {"address": "127.0.0.1:9", "pool": "p"})
        self.assertEqual(st, 401)
        big = {"address": "127.0.0.1:9", "pool": "p", "pad": "x" * 70000}
        st, _, _ = http(self.gw.admin_port, "POST", "/admin/endpoints", big, AUTH)
        self.assertEqual(st, 413)
        # Unknown DELETE: 404; a static one: 409; no parameters: 400.
        self.assertEqual(admin(self.gw, "DELETE", "/admin/endpoints?pool=p&address=127.0.0.1:9")[0], 404)
        self.assertEqual(admin(self.gw, "DELETE", "/admin/endpoints?pool=q&address=" + self.static.address)[0], 409)
        self.assertEqual(admin(self.gw, "DELETE", "/admin/endpoints")[0], 400)
        self.assertEqual(admin(self.gw, "PUT", "/admin/endpoints")[0], 405)
        self.assertEqual(chat(self.gw, "m2")[0], 200, "the gateway still serves")

    def test_delete_drains_a_stream_then_removes(self):
        up = self.ups[0]
        st, _ = admin(self.gw, "POST", "/admin/endpoints", {"address": up.address, "pool": "p"})
        self.assertEqual(st, 201)
        wait_until(lambda: chat(self.gw)[0] == 200, 5, "registration applied")
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=15)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m1", stream=True),
                     {"x-fixture-mode": "sse", "x-fixture-events": "6", "x-fixture-lockstep": "1"})
        got = s.recv(4096)
        self.assertIn(b"200", got.split(b"\r\n")[0])
        st, doc = admin(self.gw, "DELETE", "/admin/endpoints?pool=p&address=%s" % up.address.replace(":", "%3A"))
        self.assertEqual((st, doc["state"]), (202, "draining"))
        wait_until(lambda: listed(self.gw)[("p", up.address)]["state"] == "draining", 5, "draining shown")
        e = listed(self.gw)[("p", up.address)]
        self.assertEqual((e["reason"], e["in_flight"]), ("deleted", 1))
        # No new request goes to it while it drains.
        self.assertEqual(chat(self.gw)[0], 503)
        for _ in range(6):
            up.gate.release()
        buf = got
        while b"[DONE]" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        s.close()
        self.assertIn(b"[DONE]", buf, "the stream in flight finished")
        wait_until(lambda: ("p", up.address) not in listed(self.gw), 5, "removed once idle")

    def test_ttl_expiry_removes_and_refresh_keeps(self):
        a, b = self.ups
        admin(self.gw, "POST", "/admin/endpoints", {"address": a.address, "pool": "p", "ttl_ms": 400})
        st, doc = admin(self.gw, "POST", "/admin/endpoints", {"address": b.address, "pool": "p", "ttl_ms": 60000})
        self.assertEqual((st, doc["ttl_ms"]), (201, 60000))
        wait_until(lambda: ("p", a.address) in listed(self.gw), 5, "registered")
        left = listed(self.gw)[("p", b.address)]["ttl_left_ms"]
        self.assertTrue(0 < left <= 60000, left)
        wait_until(lambda: ("p", a.address) not in listed(self.gw), 10, "the expired registration removed")
        self.assertIn(("p", b.address), listed(self.gw))
        self.assertEqual(chat(self.gw)[0], 200)

    def test_sighup_keeps_registered_endpoints(self):
        up = self.ups[0]
        admin(self.gw, "POST", "/admin/endpoints", {"address": up.address, "pool": "p"})
        wait_until(lambda: chat(self.gw)[0] == 200, 5, "registration applied")
        # A file change that rebuilds the gateway: pool q gains an endpoint.
        text = open(self.gw.config_path).read().replace(
            json.dumps([self.static.address]), json.dumps([self.static.address, self.ups[1].address]))
        with open(self.gw.config_path, "w") as f:
            f.write(text)
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: ("q", self.ups[1].address) in listed(self.gw), 5, "reload")
        self.assertEqual(listed(self.gw)[("p", up.address)]["source"], "api")
        n = len(up.requests)
        self.assertEqual(chat(self.gw)[0], 200)
        self.assertEqual(len(up.requests), n + 1)


class StaticNameTest(unittest.TestCase):
    def test_unresolvable_name_is_down_not_fatal(self):
        up = Upstream("real")
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": ["no-such-replica.invalid:9000", up.address]}],
                     admin="token: %s" % TOKEN, extra="discovery: { retry_ms: 60000 }")
        try:
            key = ("p", "no-such-replica.invalid:9000")
            wait_until(lambda: listed(gw)[key]["state"] == "down", 10, "the name marked down")
            e = listed(gw)[key]
            self.assertTrue(e["reason"].startswith("dns: "), e)
            st, _, b = http(gw.admin_port, "GET", "/debug/endpoints", headers=AUTH)
            dbg = json.loads(b)["pools"][0]["endpoints"][0]
            self.assertEqual(dbg["health"], "down")
            self.assertTrue(dbg["down_reason"].startswith("dns: "))
            for _ in range(4):
                self.assertEqual(chat(gw)[0], 200, "the other endpoint serves")
        finally:
            gw.close()
            up.close()

    def test_example_config_starts(self):
        """examples/switchboard.yaml names gpu-node-3.internal; it must start with that name down.
        Its IP literals are rewritten to closed loopback ports (nothing here may reach them)."""
        text = open(os.path.join(ROOT, "examples", "switchboard.yaml")).read()
        text = re.sub(r'"\[fd00::[0-9a-f:]+\]:\d+"', lambda m: '"127.0.0.1:%d"' % free_port(), text)
        text = re.sub(r'"10\.\d+\.\d+\.\d+:\d+"', lambda m: '"127.0.0.1:%d"' % free_port(), text)
        port, aport = free_port(), free_port()
        text = text.replace('listen: "0.0.0.0:8080"', 'listen: "127.0.0.1:%d"' % port)
        text = text.replace('listen: "127.0.0.1:8081"', 'listen: "127.0.0.1:%d"' % aport)
        self.assertNotIn("10.0.", text)
        import tempfile, subprocess
        from fixtures import GATEWAY_BIN
        d = tempfile.mkdtemp(prefix="sb-ex-")
        path = os.path.join(d, "switchboard.yaml")
        with open(path, "w") as f:
            f.write(text + "\ndiscovery: { retry_ms: 60000 }\n")
        log = open(os.path.join(d, "log"), "w")
        proc = subprocess.Popen([GATEWAY_BIN, "serve", "-c", path], stdout=log, stderr=subprocess.STDOUT)
        try:
            def up():
                self.assertIsNone(proc.poll(), open(os.path.join(d, "log")).read())
                try:  # both listeners (the admin one starts just after the client one)
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    socket.create_connection(("127.0.0.1", aport), timeout=0.2).close()
                    return True
                except OSError:
                    return False
            wait_until(up, 15, "the example to listen")
            st, _, b = http(aport, "GET", "/debug/endpoints")
            eps = {e["address"]: e for p in json.loads(b)["pools"] for e in p["endpoints"]}
            wait_until(lambda: "down_reason" in json.loads(http(aport, "GET", "/debug/endpoints")[2])["pools"][0]
                       ["endpoints"][2], 10, "gpu-node-3 down")
            self.assertIn("gpu-node-3.internal:8000", eps)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
            log.close()
        self.assertEqual(proc.returncode, 0, open(os.path.join(d, "log")).read())


class DnsDiscoveryTest(unittest.TestCase):
    def test_localhost_addresses_become_endpoints(self):
        ups = [Upstream("d1"), Upstream("d2")]
        want = sorted({ai[4][0] for ai in socket.getaddrinfo("localhost", ups[0].port, type=socket.SOCK_STREAM)})
        if want != ["127.0.0.1"] and "127.0.0.1" not in want:
            self.skipTest("this resolver gives %s for localhost; the test needs 127.0.0.1 among them" % want)
        fmt = lambda ip, port: ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [],
                       "yaml": ['endpoints_from: { dns: "localhost:%d", interval_ms: 200 }' % ups[0].port]}],
                     admin="token: %s" % TOKEN)
        try:
            wait_until(lambda: {a for (p, a) in listed(gw)} == {fmt(ip, ups[0].port) for ip in want}, 10,
                       "every address of localhost an endpoint")
            self.assertEqual({e["source"] for e in listed(gw).values()}, {"dns"})
            if want == ["127.0.0.1"]:
                self.assertEqual(chat(gw)[0], 200)
                self.assertEqual(len(ups[0].requests), 1)
            else:
                print("note: localhost gives %s here; routing checked by membership only" % want)
            st, doc = admin(gw, "GET", "/admin/endpoints")
            self.assertEqual(doc["discovery"][0]["dns"], "localhost:%d" % ups[0].port)
            self.assertEqual(doc["discovery"][0]["failures"], 0)
            # The file moves the name to another port: the old members drain away, new ones join.
            text = open(gw.config_path).read().replace("localhost:%d" % ups[0].port, "localhost:%d" % ups[1].port)
            with open(gw.config_path, "w") as f:
                f.write(text)
            gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: {a for (p, a) in listed(gw)} == {fmt(ip, ups[1].port) for ip in want}, 10,
                       "membership follows the new name")
            if want == ["127.0.0.1"]:
                self.assertEqual(chat(gw)[0], 200)
                self.assertEqual(len(ups[1].requests), 1)
        finally:
            gw.close()
            for u in ups:
                u.close()

    def test_failed_resolution_is_counted_and_not_fatal(self):
        up = Upstream("static")
        gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address],
                       "yaml": ['endpoints_from: { dns: "no-such-service.invalid:8000", interval_ms: 60000 }']}],
                     admin="token: %s" % TOKEN)
        try:
            wait_until(lambda: admin(gw, "GET", "/admin/endpoints")[1]["discovery"][0]["failures"] >= 1, 10,
                       "the failed answer counted")
            d = admin(gw, "GET", "/admin/endpoints")[1]["discovery"][0]
            self.assertEqual((d["addresses"], d["resolutions"]), (0, 1))
            self.assertIsNotNone(d["last_error"])
            self.assertEqual(set(listed(gw)), {("p", up.address)}, "the file's endpoint serves alone")
            self.assertEqual(chat(gw)[0], 200)
            st, _, m = http(gw.admin_port, "GET", "/metrics", headers=AUTH)
            self.assertIn('switchboard_dns_failures_total{pool="p"} 1\n', m.decode())
        finally:
            log = gw.close()
            up.close()
        self.assertIn("keeping the last known 0 addresses", log)

    def test_bad_endpoints_from_is_refused(self):
        import subprocess, tempfile
        from fixtures import GATEWAY_BIN
        d = tempfile.mkdtemp(prefix="sb-dns-")
        path = os.path.join(d, "c.yaml")
        with open(path, "w") as f:
            f.write('pools:\n  - name: p\n    models: [m]\n    endpoints_from: { dns: "nohostport", interval_ms: 5 }\n')
        out = subprocess.run([GATEWAY_BIN, "check", "-c", path], capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("endpoints_from.dns: bad address", out.stdout + out.stderr)
        self.assertIn("endpoints_from.interval_ms must be an integer from 100", out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
