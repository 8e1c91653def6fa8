"""Stream usage and first-token time through the gateway in front of `switchboard sim`, the
issue's done-when: streaming, the gateway's TTFT median is within 10% of the simulator's own
first-token time, and its token counters equal the simulator's usage for streams that did not ask
for it (the gateway asks upstream: stream_options.include_usage); what the client receives is the
stream it would get without the gateway, byte for byte but for ids and timestamps: no usage chunk
when it did not ask, the chunk kept when it did. Raw sockets: the chunked framing is read strictly.

The tolerance is the claim's (10%), on medians of values each side reports for the same requests
(the gateway's access-log ttft_ms and histogram; the simulator's TTFT histogram sum, scraped
between requests): a comparison of two clocks, not a timing."""
import json
import re
import socket
import statistics
import unittest

from fixtures import Gateway, Upstream, send_request, read_head, wait_until
from test_sim import MODEL, Sim, chat, metric, metrics

PROMPT = " ".join("word%d" % i for i in range(1500))  # prefill, not the loopback, makes the time


def raw_stream(port, body, headers=None):
    """POSTs body; returns (status, headers, body bytes), the chunked framing checked strictly
    (hex size, CRLF after each chunk, the zero chunk and its CRLF last)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:
        send_request(s, "POST", "/v1/chat/completions" if "messages" in body else "/v1/completions", body, headers)
        line, headers, rest = read_head(s)
        status = int(line.split(" ")[1])
        if headers.get("transfer-encoding", "").lower() != "chunked":
            assert "content-length" in headers, headers
            n = int(headers["content-length"])
            while len(rest) < n:
                rest += s.recv(65536)
            return status, headers, rest[:n]
        assert "content-length" not in headers, headers
        out = b""
        while True:
            while b"\r\n" not in rest:
                c = s.recv(65536)
                assert c, "chunked body cut"
                rest += c
            size_line, rest = rest.split(b"\r\n", 1)
            assert re.fullmatch(rb"[0-9a-f]+", size_line), size_line
            size = int(size_line, 16)
            while len(rest) < size + 2:
                c = s.recv(65536)
                assert c, "chunk cut"
                rest += c
            assert rest[size:size + 2] == b"\r\n", rest[size:size + 2]
            if size == 0:
                assert rest == b"\r\n", rest
                return status, headers, out
            out += rest[:size]
            rest = rest[size + 2:]
    finally:
        s.close()


def normalised(body):
    """The stream with what differs between two runs of one request blanked: ids, timestamps,
    and how much of the prompt the cache held (the second run finds the first's blocks)."""
    body = re.sub(rb'"id":"[^"]*"', b'"id":""', body)
    body = re.sub(rb'"created":\d+', b'"created":0', body)
    return re.sub(rb'"cached_tokens":\d+', b'"cached_tokens":0', body)


def histogram_median(text, name, **labels):
    """histogram_quantile(0.5, ...) as Prometheus computes it: linear inside the bucket."""
    buckets = []
    for line in text.splitlines():
        m = re.match(r'%s_bucket\{(.*)\} (\S+)$' % re.escape(name), line)
        if not m:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(got.get(k) == v for k, v in labels.items()):
            buckets.append((float(got["le"]), float(m.group(2))))
    buckets.sort()
    total = buckets[-1][1]
    rank = total / 2
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            return lo + (le - lo) * (rank - below) / (cum - below)
        lo, below = le, cum
    return lo


class StreamUsageTest(unittest.TestCase):
    def setUp(self):
        self.sim = Sim("--speed", "1")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:%d" % self.sim.port]}],
                          extra='access_log: "-"\n')

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.sim.stop()

    def log_lines(self, n):
        """The access log's lines, once n are written (a line follows its answer's last byte)."""
        read = lambda: [json.loads(l) for l in open(self.gw.log_path) if l.startswith("{")]
        wait_until(lambda: len(read()) >= n, 10, "%d access log lines" % n)
        return read()

    def test_ttft_median_and_stream_tokens_match_the_simulator(self):
        n = 9
        sim_ttft = []
        for i in range(n):
            before = metric(metrics(self.sim.port), "vllm:time_to_first_token_seconds_sum")
            st, h, body = raw_stream(self.gw.port, chat("%d %s" % (i, PROMPT), max_tokens=12, stream=True))
            self.assertEqual(st, 200)
            self.assertNotIn(b'"usage"', body)  # not asked, not received
            self.assertTrue(body.endswith(b"data: [DONE]\n\n"))
            sim_ttft.append((metric(metrics(self.sim.port), "vllm:time_to_first_token_seconds_sum") - before) * 1e3)
        lines = [l for l in self.log_lines(n) if l["stream"]]
        self.assertEqual(len(lines), n)
        gw_ttft = [l["ttft_ms"] for l in lines]
        sim_median, gw_median = statistics.median(sim_ttft), statistics.median(gw_ttft)
        self.assertGreater(sim_median, 20, "the prompt should take the simulator a while to prefill")
        # Within 10%, each side's own figures: the access log's values...
        self.assertLessEqual(abs(gw_median - sim_median), 0.1 * sim_median, (gw_ttft, sim_ttft))
        # ...and the histogram's median, as a dashboard reads it from the buckets.
        gm = metrics(self.gw.admin_port)
        hist_median = histogram_median(gm, "switchboard_time_to_first_token_seconds", pool="p") * 1e3
        self.assertLessEqual(abs(hist_median - sim_median), 0.1 * sim_median, (hist_median, sim_ttft))

        # Token counters for streams that never asked equal what the simulator counted.
        sm = metrics(self.sim.port)
        for ours, theirs in (("switchboard_prompt_tokens_total", "vllm:prompt_tokens_total"),
                             ("switchboard_completion_tokens_total", "vllm:generation_tokens_total"),
                             ("switchboard_cached_tokens_total", "vllm:prefix_cache_hits_total")):
            self.assertEqual(metric(gm, ours, pool="p"), metric(sm, theirs), ours)
        self.assertEqual(metric(gm, "switchboard_completion_tokens_total", pool="p"), 12 * n)
        for l in lines:
            self.assertEqual(l["completion_tokens"], 12)
            self.assertGreater(l["prompt_tokens"], 1500)

    def test_client_gets_the_stream_it_asked_for(self):
        cases = [chat("hello there", max_tokens=5, stream=True),
                 chat("hello there", max_tokens=5, stream=True, usage=True),
                 dict(chat("hello there", max_tokens=5, stream=True), stream_options=None),
                 dict(chat("hello there", max_tokens=5, stream=True), stream_options={"include_usage": False}),
                 {"model": MODEL, "prompt": "once upon", "max_tokens": 4, "stream": True}]
        for body in cases:
            st, _, direct = raw_stream(self.sim.port, body)
            self.assertEqual(st, 200)
            st, headers, via = raw_stream(self.gw.port, body)
            self.assertEqual(st, 200)
            self.assertEqual(normalised(via), normalised(direct), body)
            asked = (body.get("stream_options") or {}).get("include_usage") is True
            self.assertEqual(b'"choices":[],"usage"' in via, asked, body)
        # Stripped where the gateway asked (all but the one that asked itself), and only there.
        self.assertEqual(metric(metrics(self.gw.admin_port), "switchboard_stream_usage_stripped_total"),
                         len(cases) - 1)
        # Every stream's usage reached the log, asked or not.
        lines = self.log_lines(len(cases))
        self.assertEqual(len(lines), len(cases))
        for l in lines:
            self.assertGreater(l["prompt_tokens"], 0, l)
            self.assertGreater(l["completion_tokens"], 0, l)


USAGE_EV = (b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],'
            b'"usage":{"prompt_tokens":17,"completion_tokens":2,"total_tokens":19,'
            b'"prompt_tokens_details":{"cached_tokens":5}}}\r\n\r\n')


class StripHostileTest(unittest.TestCase):
    """A scripted upstream cuts the answer where the test says: the usage chunk across writes
    (inside "data:", between \\r and \\n), an event longer than limits.max_held_event_bytes (passed
    on, counted), a body framed by Content-Length (the client's is re-framed chunked)."""

    def setUp(self):
        self.up = Upstream("u")
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}],
                          extra='access_log: "-"\nlimits: { max_held_event_bytes: 1024 }\n')

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.up.close()

    def run_script(self, chunked):
        big = b'data: {"choices":[{"delta":{"content":"' + b"x" * 3000 + b'"}}]}\n\n'
        body = (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n' + big +
                b'data: {"choices":[{"delta":{"content":"!"}}]}\r\n\r\n' + USAGE_EV + b"data: [DONE]\n\n")
        u = body.index(USAGE_EV)
        # cut inside the big event, inside "data:" of the usage chunk, inside its JSON, and
        # between the \r and \n of its blank line
        cuts = sorted({0, 100, 1500, u + 2, u + 40, u + len(USAGE_EV) - 3, u + len(USAGE_EV) - 1, len(body)})
        pieces = [body[x:y] for x, y in zip(cuts, cuts[1:])]
        if chunked:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            pieces = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]
        else:
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
        self.up.script = (head, pieces)
        req = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        st, headers, got = raw_stream(self.gw.port, req, {"x-fixture-mode": "script"})
        self.assertEqual(st, 200)
        self.assertEqual(headers.get("transfer-encoding"), "chunked")  # the length changed: re-framed
        self.assertEqual(got, body.replace(USAGE_EV, b""))
        sent = json.loads(self.up.requests[-1][3])
        self.assertEqual(sent["stream_options"], {"include_usage": True})

    def test_cut_usage_chunk_oversized_event_and_content_length(self):
        for chunked in (True, False):
            with self.subTest(chunked=chunked):
                self.run_script(chunked)
        gm = metrics(self.gw.admin_port)
        self.assertEqual(metric(gm, "switchboard_stream_usage_stripped_total"), 2)
        self.assertEqual(metric(gm, "switchboard_stream_usage_overflows_total"), 2)  # the big event, twice
        self.assertEqual(metric(gm, "switchboard_prompt_tokens_total", pool="p"), 34)
        self.assertEqual(metric(gm, "switchboard_cached_tokens_total", pool="p"), 10)


class StreamUsageOffTest(unittest.TestCase):
    """upstream.stream_usage: false: the body goes as the client sent it, nothing is stripped,
    and a stream that did not ask has no token counts (as before)."""

    def setUp(self):
        self.sim = Sim("--speed", "100")
        self.gw = Gateway([{"name": "p", "models": [MODEL], "endpoints": ["127.0.0.1:%d" % self.sim.port]}],
                          extra='access_log: "-"\nupstream: { stream_usage: false }\n')

    def tearDown(self):
        try:
            self.gw.close()
        finally:
            self.sim.stop()

    def test_off(self):
        st, _, via = raw_stream(self.gw.port, chat("hi", max_tokens=3, stream=True))
        self.assertEqual(st, 200)
        self.assertNotIn(b'"usage"', via)
        read = lambda: [json.loads(x) for x in open(self.gw.log_path) if x.startswith("{")]
        wait_until(lambda: read(), 10, "the access log line")
        l = read()[0]
        self.assertEqual(l["prompt_tokens"], -1)


if __name__ == "__main__":
    unittest.main()
