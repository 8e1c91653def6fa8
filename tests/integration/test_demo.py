"""`switchboard demo`: the quick start's main job. It starts a simulated fleet and a gateway in
one process; this checks the banner's promises (models, a streamed chat, an adapter, the admin
listener, the Llama replicas' KV-cache events reaching the gateway's precise index) and a clean
stop on Ctrl-C, against the built binary."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import unittest

from fixtures import GATEWAY_BIN, free_port, free_run, http, read_head, read_until_eof, send_request, wait_until


class DemoTest(unittest.TestCase):
    def setUp(self):
        self.port, self.admin = free_port(), free_port()
        self.sim = free_run(4)
        self.kv = free_run(3)
        # the runs must not meet each other nor the gateway's ports (all were released)
        while (self.sim <= self.kv + 2 and self.kv <= self.sim + 3) or \
                any(self.kv <= p <= self.kv + 2 for p in (self.port, self.admin)):
            self.kv = free_run(3)
        self.dir = tempfile.mkdtemp(prefix="sb-demo-")
        self.log_path = os.path.join(self.dir, "demo.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.proc = subprocess.Popen([GATEWAY_BIN, "demo", "--port", str(self.port), "--admin-port", str(self.admin),
                                      "--sim-port", str(self.sim), "--kv-port", str(self.kv),
                                      "--speed", "50"],
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        first = self.proc.stdout.readline()
        self.assertEqual(first.strip(), "switchboard demo", open(self.log_path).read())

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.assertEqual(self.proc.wait(15), 0)
        self.log.close()
        out = open(self.log_path).read()
        for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
            self.assertNotIn(bad, out)

    def test_banner_promises(self):
        st, _, body = http(self.port, "GET", "/v1/models")
        self.assertEqual(st, 200)
        ids = {m["id"] for m in json.loads(body)["data"]}
        for want in ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", "sql-lora", "chat-lora", "qwen-7b"):
            self.assertIn(want, ids)
        chat = {"model": "llama-3.1-8b", "stream": True, "max_tokens": 5,
                "messages": [{"role": "user", "content": "Hello!"}]}
        st, _, body = http(self.port, "POST", "/v1/chat/completions", json.dumps(chat).encode(),
                           {"Content-Type": "application/json"})
        self.assertEqual(st, 200)
        self.assertIn(b"data: [DONE]", body)
        comp = {"model": "sql-lora", "prompt": "SELECT", "max_tokens": 3}
        st, _, body = http(self.port, "POST", "/v1/completions", json.dumps(comp).encode(),
                           {"Content-Type": "application/json"})
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["model"], "sql-lora")
        comp["model"] = "no-such-model"
        st, _, _ = http(self.port, "POST", "/v1/completions", json.dumps(comp).encode(),
                        {"Content-Type": "application/json"})
        self.assertEqual(st, 404)
        st, _, body = http(self.admin, "GET", "/metrics")
        self.assertEqual(st, 200)
        self.assertIn(b'switchboard_requests_total', body)
        # The Llama replicas publish their cache events and the llama pool hears them: a long
        # shared system prompt lands in the precise index (ZMQ drops what is published before
        # a subscription is up, so the prompt is sent until it shows).
        system = "You are a careful assistant for the billing team. " * 24
        chat2 = {"model": "llama-3.1-8b", "max_tokens": 3,
                 "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}

        def reported():
            http(self.port, "POST", "/v1/chat/completions", json.dumps(chat2).encode(),
                 {"Content-Type": "application/json"})
            eps = json.loads(http(self.admin, "GET", "/debug/endpoints")[2])["pools"][0]["endpoints"]
            return any(e["kv_events"]["batches"] > 0 and e["kv_index"]["blocks"] > 0 for e in eps)
        wait_until(reported, 20, "the demo's llama pool to hear its replicas' KV events")
        # The admin listener is where the banner says; the public one does not serve /metrics.
        st, _, _ = http(self.port, "GET", "/debug/endpoints")
        self.assertNotEqual(st, 200)
        self.stop()

    def test_sigterm_drains_the_gateway_then_the_fleet(self):
        # A long stream in flight when SIGTERM comes finishes whole; then the process exits 0.
        chat = {"model": "llama-3.1-8b", "stream": True, "max_tokens": 4000, "ignore_eos": True,
                "messages": [{"role": "user", "content": "Tell me everything."}]}
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        send_request(s, "POST", "/v1/chat/completions", chat)
        line, _, rest = read_head(s)
        self.assertIn(" 200 ", line)
        self.proc.send_signal(signal.SIGTERM)
        data = rest + read_until_eof(s)
        s.close()
        self.assertIn(b"data: [DONE]", data)
        self.assertTrue(data.endswith(b"0\r\n\r\n"))
        self.assertEqual(self.proc.wait(15), 0)
        self.log.close()
        out = open(self.log_path).read()
        for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
            self.assertNotIn(bad, out)


if __name__ == "__main__":
    unittest.main()
