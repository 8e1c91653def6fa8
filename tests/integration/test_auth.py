"""Access control: the admin listener apart from the client listener,
its bearer token, client API keys (inline and from a file reloaded on SIGHUP), a key's band
and tenant reaching flow control, the per-pool upstream key, and no key ever written out."""
import json
import os
import signal
import socket
import unittest

from fixtures import Gateway, Upstream, chat_body, http, read_response, send_request, wait_until

ADMIN_TOKEN = "adm-7f3e9c1b2d"
KEY = "sk-good-4c8e1f"
KEY_CRIT = "sk-crit-9a2b7d"
KEY_FLOW_ONLY = "sk-flowonly-5e6f"
KEY_UP = "sk-upstream-3d1c"
SECRETS = (ADMIN_TOKEN, KEY, KEY_CRIT, KEY_FLOW_ONLY, KEY_UP, "sk-file-one-8c", "sk-file-two-2f")


def bearer(key):
    return {"Authorization": "Bearer " + key}


def reloads(gw, token=None):
    st, _, body = http(gw.admin_port, "GET", "/metrics", headers=bearer(token) if token else None)
    for line in body.decode().splitlines():
        if line.startswith("switchboard_config_reloads_total "):
            return int(float(line.split()[1]))
    return -1


class AdminListenerTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}],
                          admin='token: "%s"' % ADMIN_TOKEN)

    def tearDown(self):
        try:
            out = self.gw.close()
            for s in SECRETS:
                self.assertNotIn(s, out)
        finally:
            self.up.close()

    def test_admin_paths_are_not_on_the_client_port(self):
        for path in ("/metrics", "/debug/endpoints", "/debug/decisions", "/debug/adaptive"):
            st, _, body = http(self.gw.port, "GET", path, headers=bearer(ADMIN_TOKEN))
            self.assertEqual(st, 404, path)
            self.assertEqual(json.loads(body)["error"]["code"], "not_found")
        # The client listener still serves the API and /healthz.
        self.assertEqual(http(self.gw.port, "GET", "/healthz")[0], 200)
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"))[0], 200)

    def test_metrics_open_debug_needs_the_token(self):
        st, h, body = http(self.gw.admin_port, "GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertIn("switchboard_requests_received_total", body.decode())
        for path in ("/debug/endpoints", "/debug/decisions", "/debug/adaptive", "/nowhere"):
            for headers in (None, bearer("wrong-token"), {"Authorization": ADMIN_TOKEN},
                            {"Authorization": "Basic " + ADMIN_TOKEN}):
                st, h, body = http(self.gw.admin_port, "GET", path, headers=headers)
                self.assertEqual(st, 401, (path, headers))
                self.assertTrue(h["www-authenticate"].startswith("Bearer"))
                err = json.loads(body)["error"]
                self.assertEqual(err["code"], "invalid_admin_token")
                self.assertNotIn(ADMIN_TOKEN, body.decode())
        st, _, body = http(self.gw.admin_port, "GET", "/debug/endpoints", headers=bearer(ADMIN_TOKEN))
        self.assertEqual(st, 200)
        self.assertIn("endpoints", json.loads(body)["pools"][0])
        st, _, _ = http(self.gw.admin_port, "GET", "/nowhere", headers=bearer(ADMIN_TOKEN))
        self.assertEqual(st, 404)
        # Refusals are counted per listener.
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn('switchboard_unauthorized_total{listener="admin"} 16', text)

    def test_admin_listener_survives_a_reload_that_rebuilds_the_gateway(self):
        up2 = Upstream("u2")
        try:
            with open(self.gw.config_path) as f:
                text = f.read()
            with open(self.gw.config_path, "w") as f:
                f.write(text.replace('["%s"]' % self.up.address, '["%s", "%s"]' % (self.up.address, up2.address)))
            self.gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: reloads(self.gw) == 1, 10, "reload")
            st, _, body = http(self.gw.admin_port, "GET", "/debug/endpoints", headers=bearer(ADMIN_TOKEN))
            self.assertEqual(st, 200)
            self.assertEqual(len(json.loads(body)["pools"][0]["endpoints"]), 2)
            # A changed admin.listen needs a restart: refused, the old listener stays.
            with open(self.gw.config_path) as f:
                text = f.read()
            with open(self.gw.config_path, "w") as f:
                f.write(text.replace(":%d\"" % self.gw.admin_port, ":%d\"" % (self.gw.admin_port + 1)))
            self.gw.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: "admin.listen changed" in open(self.gw.log_path).read(), 10, "refusal")
            self.assertEqual(reloads(self.gw), 1)
        finally:
            up2.close()


class AdminBudgetTest(unittest.TestCase):
    def test_admin_answers_while_the_client_listener_is_full(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [up.address]}],
                     # One loop: with several, the fixture's readiness probe may still wait in
                     # another worker's accept queue and take one of the three places later.
                     extra="workers: 1\nlimits: { max_connections: 3 }", admin="max_connections: 2")
        held = []
        try:
            # Fill the client listener: each connection counts once the gateway accepted it.
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
                send_request(s, "GET", "/healthz")
                self.assertEqual(read_response(s)[0], 200)
                held.append(s)
            st, _, body = http(gw.admin_port, "GET", "/metrics")
            self.assertEqual(st, 200)
            self.assertIn("switchboard_requests_received_total 3", body.decode())
        finally:
            for s in held:
                s.close()
            gw.close()
            up.close()

    def test_metrics_auth_protects_metrics(self):
        up = Upstream("u")
        gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [up.address]}],
                     admin='token: "%s", metrics_auth: true' % ADMIN_TOKEN)
        try:
            st, h, _ = http(gw.admin_port, "GET", "/metrics")
            self.assertEqual(st, 401)
            self.assertIn("Bearer", h["www-authenticate"])
            self.assertEqual(http(gw.admin_port, "GET", "/metrics", headers=bearer("nope"))[0], 401)
            self.assertEqual(http(gw.admin_port, "GET", "/metrics", headers=bearer(ADMIN_TOKEN))[0], 200)
        finally:
            gw.close()
            up.close()

    def test_admin_token_from_a_file(self):
        up = Upstream("u")
        gw = None
        try:
            # The file sits next to the config (relative path), with a trailing newline.
            gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [up.address]}],
                         admin="token_file: admin.token", pre_start=lambda d: _write(d, "admin.token",
                                                                                      ADMIN_TOKEN + "\n"))
            self.assertEqual(http(gw.admin_port, "GET", "/debug/endpoints")[0], 401)
            self.assertEqual(http(gw.admin_port, "GET", "/debug/endpoints", headers=bearer(ADMIN_TOKEN))[0], 200)
        finally:
            if gw:
                gw.close()
            up.close()


def _write(directory, name, text):
    with open(os.path.join(directory, name), "w") as f:
        f.write(text)


class ClientAuthTest(unittest.TestCase):
    def setUp(self):
        self.up = Upstream("u")
        self.up_keyed = Upstream("k")
        self.dir_files = {"keys.txt": "# file keys\nsk-file-one-8c tenant=filers band=sheddable\n",
                          "up.key": KEY_UP + "\n"}
        extra = ("access_log: %s\n"
                 "auth:\n"
                 "  api_keys:\n"
                 "    - %s\n"
                 "    - { key: %s, tenant: team-a, band: critical }\n"
                 "  api_keys_file: keys.txt\n"
                 "flow_control:\n"
                 "  api_keys: { %s: critical }\n")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]},
                           {"name": "q", "models": ["keyed"], "endpoints": [self.up_keyed.address],
                            "yaml": ["upstream_api_key_file: up.key"]}],
                          extra=extra % ("{access_log}", KEY, KEY_CRIT, KEY_FLOW_ONLY),
                          pre_start=self._files)

    def _files(self, d):
        self.access_log = os.path.join(d, "access.log")
        for name, text in self.dir_files.items():
            _write(d, name, text)
        return {"access_log": self.access_log}

    def tearDown(self):
        try:
            out = self.gw.close()
            logged = out + open(self.access_log).read()
            for s in SECRETS:
                self.assertNotIn(s, logged)
        finally:
            self.up.close()
            self.up_keyed.close()

    def access_lines(self):
        with open(self.access_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def test_requests_without_a_valid_key_get_401(self):
        cases = [(None, "You didn't provide an API key"), (bearer("sk-wrong-1234"), "Incorrect API key provided"),
                 ({"Authorization": KEY}, "You didn't provide an API key"),
                 ({"Authorization": "Basic " + KEY}, "You didn't provide an API key"),
                 (bearer(KEY_FLOW_ONLY), "Incorrect API key provided"), (bearer(KEY + "x"), "Incorrect")]
        for headers, message in cases:
            for method, path, body in (("POST", "/v1/chat/completions", chat_body("m")), ("GET", "/v1/models", None),
                                       ("POST", "/v1/unknown", b"{}")):
                st, h, raw = http(self.gw.port, method, path, body, headers=headers)
                self.assertEqual(st, 401, (headers, path))
                self.assertIn("Bearer", h["www-authenticate"])
                err = json.loads(raw)["error"]
                self.assertEqual(err["type"], "invalid_request_error")
                self.assertEqual(err["code"], "invalid_api_key")
                self.assertIn(message, err["message"])
                for s in SECRETS:
                    self.assertNotIn(s, raw.decode())
        self.assertEqual(len(self.up.requests), 0)
        # /healthz needs no key.
        self.assertEqual(http(self.gw.port, "GET", "/healthz")[0], 200)
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn('switchboard_unauthorized_total{listener="client"} 18', text)

    def test_valid_keys_pass_and_the_client_header_goes_upstream_unchanged(self):
        for key in (KEY, KEY_CRIT, "sk-file-one-8c"):
            st, _, body = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(key))
            self.assertEqual(st, 200, key)
            # Pool p has no upstream key: the client's Authorization passes as it came.
            self.assertEqual(self.up.requests[-1][2]["authorization"], "Bearer " + key)
        self.assertEqual(http(self.gw.port, "GET", "/v1/models", headers=bearer(KEY))[0], 200)

    def test_upstream_api_key_replaces_the_client_header(self):
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat_body("keyed"), headers=bearer(KEY))
        self.assertEqual(st, 200)
        headers = self.up_keyed.requests[-1][2]
        self.assertEqual(headers["authorization"], "Bearer " + KEY_UP)
        # (The client's line, had it passed too, comes later in the head and would win here.)

    def test_probes_carry_the_upstream_api_key(self):
        # A model server that wants a key (llama.cpp --api-key guards /slots and /metrics) gets
        # it on the gateway's scrapes and health checks too; a pool without one sends none.
        wait_until(lambda: self.up_keyed.probe_auth, 10, "a probe of the keyed pool")
        self.assertEqual(set(self.up_keyed.probe_auth), {"Bearer " + KEY_UP})
        wait_until(lambda: self.up.probe_auth, 10, "a probe of the other pool")
        self.assertEqual(set(self.up.probe_auth), {None})

    def test_key_band_and_tenant_reach_flow_control(self):
        # The key names critical: a client header cannot demote (or promote) it.
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
             headers=dict(bearer(KEY_CRIT), **{"x-priority": "sheddable", "x-tenant": "other"}))
        # A key naming no band: x-priority decides, and x-tenant is not logged as the key's.
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
             headers=dict(bearer(KEY), **{"x-priority": "sheddable"}))
        # From the keys file.
        http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer("sk-file-one-8c"))
        wait_until(lambda: len(self.access_lines()) >= 3, 10, "access log")
        lines = self.access_lines()[-3:]
        self.assertEqual((lines[0]["band"], lines[0]["tenant"]), ("critical", "team-a"))
        self.assertEqual(lines[1]["band"], "sheddable")
        self.assertNotIn("tenant", lines[1])
        self.assertEqual((lines[2]["band"], lines[2]["tenant"]), ("sheddable", "filers"))

    def test_keys_file_is_reloaded_on_sighup(self):
        one, two = "sk-file-one-8c", "sk-file-two-2f"
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(two))[0],
                         401)
        _write(self.gw.dir, "keys.txt", two + " band=critical\n")
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"),
                                headers=bearer(two))[0] == 200, 10, "the new key")
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(one))[0],
                         401)
        # A malformed file is refused like a broken config: the running keys stay.
        _write(self.gw.dir, "keys.txt", one + " band=urgent\n")
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "keys.txt:1: band= must be" in open(self.gw.log_path).read(), 10, "refusal")
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(two))[0],
                         200)
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(one))[0],
                         401)
        # So is a missing one.
        os.unlink(os.path.join(self.gw.dir, "keys.txt"))
        self.gw.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "auth.api_keys_file: cannot read" in open(self.gw.log_path).read(), 10, "refusal")
        self.assertEqual(http(self.gw.port, "POST", "/v1/chat/completions", chat_body("m"), headers=bearer(two))[0],
                         200)
        self.assertEqual(reloads(self.gw), 1)


class SecretsTest(unittest.TestCase):
    def test_check_refuses_missing_and_malformed_files_without_printing_secrets(self):
        import subprocess
        from fixtures import GATEWAY_BIN, free_port
        import tempfile
        d = tempfile.mkdtemp(prefix="sb-it-")
        cfg = os.path.join(d, "c.yaml")
        with open(cfg, "w") as f:
            f.write('listen: "127.0.0.1:%d"\nadmin: { listen: "0.0.0.0:%d", token_file: tok }\n'
                    "auth: { api_keys_file: keys.txt }\n"
                    'pools:\n  - name: p\n    models: [m]\n    endpoints: ["127.0.0.1:9"]\n'
                    "    upstream_api_key_file: /nonexistent/up.key\n" % (free_port(), free_port()))
        _write(d, "keys.txt", "%s band=vip\n" % KEY)
        _write(d, "tok", "two words\n")
        p = subprocess.run([GATEWAY_BIN, "check", "-c", cfg], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("keys.txt:1: band= must be critical, standard or sheddable", p.stderr)
        self.assertIn("tok: token must hold one token", p.stderr)
        self.assertIn("pool 'p': upstream_api_key_file: cannot read /nonexistent/up.key", p.stderr)
        self.assertNotIn(KEY, p.stderr + p.stdout)
        self.assertNotIn("two words", p.stderr + p.stdout)
        # A non-loopback admin listener without any token is a config error.
        with open(cfg, "w") as f:
            f.write('admin: { listen: "0.0.0.0:9100" }\npools:\n  - name: p\n    models: [m]\n'
                    '    endpoints: ["127.0.0.1:9"]\n')
        p = subprocess.run([GATEWAY_BIN, "check", "-c", cfg], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("is not a loopback address: set admin.token or admin.token_file", p.stderr)


if __name__ == "__main__":
    unittest.main()
