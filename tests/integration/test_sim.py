"""The live simulator (`switchboard sim`): its OpenAI endpoints, metrics in three dialects,
ORCA headers, load behaviour, client disconnects and fault injection, against the built binary.

Each test starts its own `switchboard sim --port 0` (replicas pick free ports and print them)
at a high --speed, and waits for observable state (metrics, responses), never for time."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from fixtures import GATEWAY_BIN, free_port, http, read_head, read_response, send_request, wait_until

MODEL = "sim/model-a"
PROMTOOL = shutil.which("promtool")


class Sim:
    """Runs `switchboard sim` with the given flags; stop() checks it exits cleanly."""

    def __init__(self, *flags, replicas=1, port=0):
        self.dir = tempfile.mkdtemp(prefix="sb-sim-")
        self.log_path = os.path.join(self.dir, "sim.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        args = [GATEWAY_BIN, "sim", "--replicas", str(replicas), "--port", str(port), "--model", MODEL]
        args += [str(f) for f in flags]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, env=env, text=True)
        self.ports = []
        # The banner line, then one line per replica: "  replica I: http://HOST:PORT".
        first = self.proc.stdout.readline()
        if not first.startswith("switchboard sim:"):
            self.proc.wait(5)
            raise AssertionError("sim did not start: %r\n%s" % (first, open(self.log_path).read()))
        for _ in range(replicas):
            m = re.search(r":(\d+)", self.proc.stdout.readline().rsplit("//", 1)[-1])
            self.ports.append(int(m.group(1)))
        self.port = self.ports[0]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # at once (SIGTERM drains: test_drain.py)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("sim did not stop on SIGINT")
        self.proc.stdout.close()
        self.log.close()
        out = open(self.log_path).read()
        shutil.rmtree(self.dir, ignore_errors=True)
        if "ERROR: AddressSanitizer" in out or "runtime error:" in out or "LeakSanitizer" in out:
            raise AssertionError("sanitizer report:\n" + out)
        if self.proc.returncode != 0:
            raise AssertionError("sim exit code %s:\n%s" % (self.proc.returncode, out))


def chat(text, max_tokens=4, stream=False, usage=False, model=MODEL):
    b = {"model": model, "messages": [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": text}],
         "max_tokens": max_tokens, "stream": stream}
    if usage:
        b["stream_options"] = {"include_usage": True}
    return b


def post(port, body, path="/v1/chat/completions", headers=None):
    return http(port, "POST", path, body, headers)


def sse_events(body):
    """The data payloads of an SSE body, in order."""
    out = []
    for ev in body.decode().split("\n\n"):
        if ev.strip():
            assert ev.startswith("data: "), ev
            out.append(ev[len("data: "):])
    return out


def metrics(port):
    st, h, body = http(port, "GET", "/metrics")
    assert st == 200, st
    return body.decode()


def metric(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    assert found, "no sample of %s%s" % (name, labels)
    return total


def promtool_problems(text):
    """Runs promtool check metrics; returns problems other than the ':' naming lint, which real
    vLLM and SGLang output triggers as well (their names are namespaced with a colon)."""
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    lines = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    bad = [l for l in lines if not l.endswith("metric names should not contain ':'")]
    if p.returncode not in (0, 3):  # 3: lint findings only; 1: the text does not parse
        bad.append("promtool exit code %d" % p.returncode)
    return bad


class SimBasicsTest(unittest.TestCase):
    """One replica with two adapters: the OpenAI surface."""

    @classmethod
    def setUpClass(cls):
        cls.sim = Sim("--speed", "50", "--adapters", "lora-x,lora-y", "--num-gpu-blocks", "512")

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def test_models_health_and_unknown_paths(self):
        st, _, body = http(self.sim.port, "GET", "/v1/models")
        self.assertEqual(st, 200)
        data = json.loads(body)["data"]
        self.assertEqual([m["id"] for m in data], [MODEL, "lora-x", "lora-y"])
        self.assertEqual(data[1]["parent"], MODEL)
        self.assertEqual(data[0]["max_model_len"], 512 * 16, "max_model_len is capped by the cache")
        st, _, body = http(self.sim.port, "GET", "/health")
        self.assertEqual((st, body), (200, b""))
        self.assertEqual(http(self.sim.port, "GET", "/nope")[0], 404)
        self.assertEqual(http(self.sim.port, "GET", "/v1/chat/completions")[0], 405)
        self.assertEqual(http(self.sim.port, "GET", "/slots")[0], 404, "/slots is llama.cpp's only")

    def test_tokenize_is_deterministic_and_matches_usage(self):
        st, _, body = post(self.sim.port, {"model": MODEL, "prompt": "Hello world, this is a test"}, "/tokenize")
        self.assertEqual(st, 200)
        j = json.loads(body)
        self.assertEqual(j["count"], len(j["tokens"]))
        self.assertGreaterEqual(j["count"], 6)
        self.assertEqual(j["max_model_len"], 512 * 16)
        again = json.loads(post(self.sim.port, {"prompt": "Hello world, this is a test"}, "/tokenize")[2])
        self.assertEqual(again["tokens"], j["tokens"], "same text, same tokens (model optional)")
        msgs = chat("count me")
        tk = json.loads(post(self.sim.port, {"model": MODEL, "messages": msgs["messages"]}, "/tokenize")[2])
        st, _, body = post(self.sim.port, msgs)
        self.assertEqual(st, 200)
        self.assertEqual(json.loads(body)["usage"]["prompt_tokens"], tk["count"])
        self.assertEqual(post(self.sim.port, {"model": "nope", "prompt": "x"}, "/tokenize")[0], 404)

    def test_errors_are_vllm_shaped(self):
        st, _, body = post(self.sim.port, chat("hi", model="unknown-model"))
        self.assertEqual(st, 404)
        err = json.loads(body)["error"]
        self.assertEqual(err["type"], "NotFoundError")
        self.assertIn("unknown-model", err["message"])
        for bad in (b"{not json", b'{"model": "%s"}' % MODEL.encode(), b'{"model": 3, "messages": []}',
                    json.dumps(chat("hi", max_tokens=0)).encode(), b"[1, 2]"):
            st, _, body = post(self.sim.port, bad)
            self.assertEqual(st, 400, bad)
            self.assertEqual(json.loads(body)["error"]["code"], 400)
        st, _, body = post(self.sim.port, {"model": MODEL, "prompt": "word " * 9000, "max_tokens": 4},
                           "/v1/completions")
        self.assertEqual(st, 400, "a prompt longer than the cache is refused")
        self.assertIn("maximum context length", json.loads(body)["error"]["message"])

    def test_non_streaming_usage_and_prefix_hits(self):
        before = metrics(self.sim.port)
        text = "A long shared system prompt about routing and caches. " * 8
        st, _, body = post(self.sim.port, chat(text, max_tokens=7))
        self.assertEqual(st, 200)
        j = json.loads(body)
        self.assertEqual(j["object"], "chat.completion")
        self.assertEqual(j["choices"][0]["finish_reason"], "length")
        self.assertEqual(j["choices"][0]["message"]["role"], "assistant")
        u = j["usage"]
        self.assertEqual(u["completion_tokens"], 7)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + 7)
        # At most the first block is shared with earlier tests: the template and system prompt
        # ("<|system|>\nYou are terse.\n<|user|>" is 16 tokens, line breaks standing alone).
        self.assertLessEqual(u["prompt_tokens_details"]["cached_tokens"], 16)
        st, _, body = post(self.sim.port, chat(text, max_tokens=7))
        cached = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
        self.assertGreater(cached, 16, "a repeated prompt hits the prefix cache")
        self.assertEqual(cached % 16, 0, "whole blocks are cached")
        after = metrics(self.sim.port)
        self.assertGreaterEqual(metric(after, "vllm:prefix_cache_hits_total") -
                                metric(before, "vllm:prefix_cache_hits_total"), cached)
        self.assertGreater(metric(after, "vllm:prefix_cache_queries_total"),
                           metric(before, "vllm:prefix_cache_queries_total"))

    def test_completions_and_adapter(self):
        st, _, body = post(self.sim.port, {"model": "lora-y", "prompt": "Once upon a time", "max_tokens": 5},
                           "/v1/completions")
        self.assertEqual(st, 200)
        j = json.loads(body)
        self.assertEqual(j["object"], "text_completion")
        self.assertEqual(j["model"], "lora-y")
        self.assertEqual(len(j["choices"][0]["text"].split()), 5)
        self.assertEqual(j["usage"]["completion_tokens"], 5)

    def test_streaming_chunks_usage_and_cache(self):
        text = "Streaming prompt shared across two requests, long enough for blocks. " * 6
        for attempt in range(2):
            st, h, body = post(self.sim.port, chat(text, max_tokens=9, stream=True, usage=True))
            self.assertEqual(st, 200)
            self.assertTrue(h["content-type"].startswith("text/event-stream"))
            self.assertEqual(h.get("transfer-encoding"), "chunked")
            ev = sse_events(body)
            self.assertEqual(ev[-1], "[DONE]")
            chunks = [json.loads(e) for e in ev[:-1]]
            content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
            self.assertEqual(len(content), 9, "one chunk per generated token")
            self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
            self.assertEqual(chunks[0]["choices"][0]["delta"].get("role"), "assistant")
            self.assertEqual(content[-1]["choices"][0]["finish_reason"], "length")
            usage = chunks[-1]
            self.assertEqual(usage["choices"], [])
            self.assertEqual(usage["usage"]["completion_tokens"], 9)
            cached = usage["usage"]["prompt_tokens_details"]["cached_tokens"]
            if attempt == 0:
                self.assertLessEqual(cached, 16, "at most the shared template and system block")
            else:
                self.assertGreater(cached, 16, "the repeat streams from cache")
        # Without include_usage: no usage chunk; completions stream text_completion chunks.
        st, _, body = post(self.sim.port, {"model": MODEL, "prompt": "abc", "max_tokens": 3, "stream": True},
                           "/v1/completions")
        ev = sse_events(body)
        self.assertEqual(ev[-1], "[DONE]")
        chunks = [json.loads(e) for e in ev[:-1]]
        self.assertEqual(len(chunks), 3)
        self.assertTrue(all("usage" not in c and c["object"] == "text_completion" for c in chunks))

    def test_orca_header_only_when_asked(self):
        st, h, _ = post(self.sim.port, chat("orca"))
        self.assertEqual(st, 200)
        self.assertNotIn("endpoint-load-metrics", h)
        st, h, _ = post(self.sim.port, chat("orca"), headers={"endpoint-load-metrics-format": "TEXT"})
        self.assertRegex(h["endpoint-load-metrics"],
                         r"^TEXT named_metrics\.kv_cache_usage_perc=[0-9.e+-]+, "
                         r"named_metrics\.num_requests_waiting=\d+$")
        st, h, _ = post(self.sim.port, chat("orca", stream=True), headers={"endpoint-load-metrics-format": "JSON"})
        self.assertTrue(h["endpoint-load-metrics"].startswith("JSON "))
        nm = json.loads(h["endpoint-load-metrics"][5:])["named_metrics"]
        self.assertEqual(set(nm), {"kv_cache_usage_perc", "num_requests_waiting"})
        st, h, _ = post(self.sim.port, chat("orca"), headers={"endpoint-load-metrics-format": "BIN"})
        self.assertNotIn("endpoint-load-metrics", h, "unsupported formats get no header")

    def test_keep_alive_and_pipelining(self):
        s = socket.create_connection(("127.0.0.1", self.sim.port), timeout=10)
        try:
            # Pipelined: the second request is answered from inside the first one's completion.
            body = json.dumps(chat("pipelined", max_tokens=2)).encode()
            req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            s.sendall(req + req + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            buf, statuses = b"", []
            while len(statuses) < 3:
                line, h, rest = read_head(s, buf)
                n = int(h["content-length"])
                while len(rest) < n:
                    rest += s.recv(65536)
                statuses.append(int(line.split()[1]))
                buf = rest[n:]
            self.assertEqual(statuses, [200, 200, 200])
            for _ in range(3):  # and streams on one kept-alive connection
                send_request(s, "POST", "/v1/chat/completions", chat("again", max_tokens=2, stream=True))
                st, _, b = read_response(s)
                self.assertEqual(st, 200)
                self.assertEqual(sse_events(b)[-1], "[DONE]")
        finally:
            s.close()


class SimLoadTest(unittest.TestCase):
    def test_load_raises_waiting_and_kv_usage_then_drains(self):
        # Two sequences at most and a small cache: six long streams must queue.
        sim = Sim("--speed", "5", "--max-num-seqs", "2", "--num-gpu-blocks", "128", "--max-num-batched-tokens", "512")
        socks = []
        try:
            for i in range(6):
                s = socket.create_connection(("127.0.0.1", sim.port), timeout=20)
                send_request(s, "POST", "/v1/completions",
                             {"model": MODEL, "prompt": "request %d " % i + "filler text " * 40,
                              "max_tokens": 300, "stream": True})
                socks.append(s)
            seen = {}

            def loaded():
                m = metrics(sim.port)
                seen["waiting"] = max(seen.get("waiting", 0), metric(m, "vllm:num_requests_waiting"))
                seen["kv"] = max(seen.get("kv", 0), metric(m, "vllm:kv_cache_usage_perc"))
                seen["running"] = max(seen.get("running", 0), metric(m, "vllm:num_requests_running"))
                return seen["waiting"] >= 1 and seen["kv"] > 0

            wait_until(loaded, 20, "waiting requests and KV usage under load")
            self.assertLessEqual(seen["running"], 2, "max_num_seqs bounds the batch")
            st, h, _ = post(sim.port, {"model": MODEL, "prompt": "x", "max_tokens": 1}, "/v1/completions",
                            headers={"endpoint-load-metrics-format": "TEXT"})
            self.assertEqual(st, 200)
            for s in socks:
                st, _, body = read_response(s)
                self.assertEqual(st, 200)
                self.assertEqual(sse_events(body)[-1], "[DONE]")
            m = metrics(sim.port)
            self.assertEqual(metric(m, "vllm:num_requests_waiting"), 0)
            self.assertEqual(metric(m, "vllm:num_requests_running"), 0)
            self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0)
            self.assertEqual(metric(m, "vllm:request_success_total", finished_reason="length"), 7)
            self.assertGreater(metric(m, "vllm:request_queue_time_seconds_sum"), 0, "queued requests waited")
            self.assertEqual(metric(m, "vllm:e2e_request_latency_seconds_count"), 7)
        finally:
            for s in socks:
                s.close()
            sim.stop()

    def test_client_disconnect_aborts_engine_request(self):
        sim = Sim("--speed", "20")
        try:
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            send_request(s, "POST", "/v1/chat/completions", chat("never read to the end", max_tokens=20000,
                                                                  stream=True))
            _, h, rest = read_head(s)
            while b"content" not in rest:  # the first token has arrived
                rest += s.recv(65536)
            self.assertEqual(metric(metrics(sim.port), "vllm:num_requests_running"), 1)
            s.close()
            wait_until(lambda: metric(metrics(sim.port), "vllm:num_requests_running") == 0, 10,
                       "the engine to drop the abandoned request")
            m = metrics(sim.port)
            self.assertEqual(metric(m, "vllm:request_success_total", finished_reason="abort"), 1)
            self.assertEqual(metric(m, "vllm:request_success_total", finished_reason="length"), 0)
            self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0)
            # Stopping with a stream in flight drops it cleanly (stop() checks exit code and ASan).
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            send_request(s, "POST", "/v1/chat/completions", chat("in flight at exit", max_tokens=20000,
                                                                  stream=True))
            _, h, rest = read_head(s)
            while b"content" not in rest:
                rest += s.recv(65536)
        finally:
            sim.stop()
            s.close()


class SimMetricsFormatTest(unittest.TestCase):
    def check_promtool(self, text):
        if PROMTOOL is None:
            return
        self.assertEqual(promtool_problems(text), [])

    def test_vllm_metrics(self):
        sim = Sim("--speed", "50", "--adapters", "a1", "--max-loras", "2", "--block-size", "32")
        try:
            self.assertEqual(post(sim.port, chat("hello", model="a1"))[0], 200)
            m = metrics(sim.port)
            self.check_promtool(m)
            for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                               ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:prefix_cache_queries_total", "counter"),
                               ("vllm:prefix_cache_hits_total", "counter"), ("vllm:prompt_tokens_total", "counter"),
                               ("vllm:generation_tokens_total", "counter"), ("vllm:request_success_total", "counter"),
                               ("vllm:time_to_first_token_seconds", "histogram"),
                               ("vllm:e2e_request_latency_seconds", "histogram"),
                               ("vllm:request_queue_time_seconds", "histogram"),
                               ("vllm:cache_config_info", "gauge"), ("vllm:lora_requests_info", "gauge")):
                self.assertIn("# TYPE %s %s\n" % (name, kind), m)
                self.assertIn("# HELP %s " % name, m)
            self.assertEqual(metric(m, "vllm:num_requests_running", engine="0", model_name=MODEL), 0)
            self.assertEqual(metric(m, "vllm:generation_tokens_total"), 4)
            self.assertEqual(metric(m, "vllm:cache_config_info", block_size="32"), 1)
            self.assertIn('max_lora="2"', m)
            self.assertGreater(metric(m, "vllm:lora_requests_info"), 1.6e9, "a wall-clock timestamp")
            self.assertEqual(metric(m, "vllm:time_to_first_token_seconds_bucket", le="+Inf"), 1)
            self.assertEqual(metric(m, "vllm:time_to_first_token_seconds_bucket", le="2560.0"), 1)
            self.assertEqual(metric(m, "vllm:e2e_request_latency_seconds_bucket", le="7680.0"), 1)
        finally:
            sim.stop()

    def test_sglang_metrics(self):
        sim = Sim("--speed", "50", "--engine", "sglang")
        try:
            text = "sglang prompt with a few blocks of text to share " * 4
            post(sim.port, chat(text))
            post(sim.port, chat(text))
            m = metrics(sim.port)
            self.check_promtool(m)
            self.assertNotIn("vllm:", m)
            self.assertEqual(metric(m, "sglang:num_running_reqs", model_name=MODEL), 0)
            self.assertEqual(metric(m, "sglang:num_queue_reqs"), 0)
            self.assertEqual(metric(m, "sglang:token_usage"), 0)
            self.assertGreater(metric(m, "sglang:cache_hit_rate"), 0)
            self.assertEqual(metric(m, "sglang:cache_config_info", page_size="16"), 1)
            self.assertEqual(metric(m, "sglang:time_to_first_token_seconds_count"), 2)
        finally:
            sim.stop()

    def test_llamacpp_metrics_and_slots(self):
        sim = Sim("--speed", "5", "--engine", "llamacpp", "--max-num-seqs", "4", "--num-gpu-blocks", "256")
        s = None
        try:
            post(sim.port, chat("llama"))
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            send_request(s, "POST", "/v1/chat/completions", chat("busy slot", max_tokens=3000, stream=True))
            _, _, rest = read_head(s)
            while b"content" not in rest:
                rest += s.recv(65536)
            m = metrics(sim.port)
            self.check_promtool(m)
            self.assertNotIn("vllm:", m)
            self.assertEqual(metric(m, "llamacpp:requests_processing"), 1)
            self.assertEqual(metric(m, "llamacpp:requests_deferred"), 0)
            self.assertGreater(metric(m, "llamacpp:kv_cache_usage_ratio"), 0)
            self.assertGreater(metric(m, "llamacpp:prompt_tokens_total"), 0)
            st, _, body = http(sim.port, "GET", "/slots")
            self.assertEqual(st, 200)
            slots = json.loads(body)
            self.assertEqual(len(slots), 4)
            self.assertEqual([x["id"] for x in slots], [0, 1, 2, 3])
            self.assertEqual(slots[0]["n_ctx"], 256 * 16 // 4)
            self.assertTrue(slots[0]["is_processing"])
            self.assertGreaterEqual(slots[0]["next_token"]["n_decoded"], 1)
            self.assertFalse(slots[1]["is_processing"])
            self.assertIn("params", slots[0])
            st, _, body = http(sim.port, "GET", "/health")
            self.assertEqual(json.loads(body), {"status": "ok"})
        finally:
            if s:
                s.close()
            sim.stop()


class SimFaultTest(unittest.TestCase):
    def test_fail_rate_on_selected_replica(self):
        sim = Sim("--speed", "50", "--fail-rate", "1", "--fault-replicas", "1", replicas=2)
        try:
            self.assertEqual(post(sim.ports[0], chat("ok"))[0], 200)
            for _ in range(3):
                st, _, body = post(sim.ports[1], chat("fails"))
                self.assertEqual(st, 500)
                self.assertEqual(json.loads(body)["error"]["code"], 500)
            self.assertEqual(http(sim.ports[1], "GET", "/health")[0], 200, "health is not failed")
        finally:
            sim.stop()

    def test_die_after_tokens_cuts_streams(self):
        sim = Sim("--speed", "50", "--die-after-tokens", "3")
        try:
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            send_request(s, "POST", "/v1/chat/completions", chat("cut me", max_tokens=10, stream=True))
            with self.assertRaises(ConnectionError):
                read_response(s)  # the chunked body never terminates
            s.close()
            # Read raw to count what arrived before the cut.
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=10)
            send_request(s, "POST", "/v1/chat/completions", chat("cut me", max_tokens=10, stream=True))
            raw = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                raw += c
            s.close()
            self.assertEqual(raw.count(b'"content":"') - raw.count(b'"content":""'), 3)
            self.assertNotIn(b"[DONE]", raw)
            self.assertEqual(post(sim.port, chat("short", max_tokens=3, stream=True))[0], 200,
                             "requests that end by then finish normally")
            wait_until(lambda: metric(metrics(sim.port), "vllm:num_requests_running") == 0, 10, "aborts")
        finally:
            sim.stop()

    def test_refuse_and_metrics_faults(self):
        port = free_port()
        sim = Sim("--speed", "50", "--refuse", "--fault-replicas", "0", port=port, replicas=1)
        try:
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2)
        finally:
            sim.stop()
        sim = Sim("--speed", "50", "--metrics-delay-ms", "150")
        try:
            t0 = time.monotonic()
            self.assertIn("vllm:num_requests_running", metrics(sim.port))
            self.assertGreaterEqual(time.monotonic() - t0, 0.15)
            self.assertEqual(post(sim.port, chat("fast"))[0], 200, "only /metrics is slow")
        finally:
            sim.stop()
        sim = Sim("--speed", "50", "--metrics-hang")
        s = socket.create_connection(("127.0.0.1", sim.port), timeout=0.3)
        try:
            send_request(s, "GET", "/metrics")
            with self.assertRaises(socket.timeout):
                s.recv(1)
            self.assertEqual(post(sim.port, chat("alive"))[0], 200)
        finally:
            sim.stop()  # the hung request is dropped cleanly
            s.close()

    def test_restart_empties_cache(self):
        sim = Sim("--speed", "50", "--restart-every-ms", "1000")
        try:
            text = "restart prompt shared by two requests " * 6
            state = {}

            def refused():
                try:
                    socket.create_connection(("127.0.0.1", sim.port), timeout=1).close()
                    return False
                except ConnectionRefusedError:
                    return True

            def cached_twice():
                try:
                    post(sim.port, chat(text))
                    st, _, body = post(sim.port, chat(text))
                except (ConnectionError, OSError):
                    return False
                return st == 200 and json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

            wait_until(cached_twice, 10, "a cache hit")
            wait_until(refused, 10, "the replica to go down")
            wait_until(lambda: not refused(), 10, "the replica to come back")
            st, _, body = post(sim.port, chat(text))
            self.assertEqual(st, 200)
            m = metrics(sim.port)
            # The new engine's counters start from zero: at most the requests since the restart.
            self.assertLessEqual(metric(m, "vllm:request_success_total", finished_reason="length"), 3)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
