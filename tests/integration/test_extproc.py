"""The endpoint picker (`ext_proc:` listener) driven by a client that plays Envoy's part message by
message (tests/extproc/envoy.js: @grpc/grpc-js with Envoy's real message definitions), in front
of a simulated fleet, beside the same gateway's HTTP proxy listener.

Where the test plays Envoy's router too (after the picker's answer it sends the request to the
picked replica itself and feeds the replica's answer back as the response phase), the gateway
sees exactly what it would behind a real Envoy.

The node client needs tests/extproc/node_modules (scripts/deps.sh test installs it). Under
`make test` (SB_REQUIRE_EXTPROC=1) a missing client fails the run; a plain developer run skips
with a loud message."""
import json
import os
import re
import socket
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import extproc_driver as ep
from extproc_driver import (DESTINATION, Driver, from_struct, metadata, request_body, request_headers,
                            response_body, response_headers, set_headers, unb64)
from fixtures import GATEWAY_BIN, Gateway, free_port, http, wait_until
from test_sim import MODEL, Sim

ALIAS = "alias-a"
DRAINED_MODEL = "drained-model"
SESSION_MODEL = "session-model"
CHUNK_BYTES = 1024
FALLBACKS = 2
REQUIRED = os.environ.get("SB_REQUIRE_EXTPROC") == "1"
SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


def skip_reason():
    """Why the node client cannot run here (None: it can), said loudly once per class."""
    why = ep.missing()
    if why:
        sys.stderr.write("\n*** %s the ext_proc tests: %s ***\n" % ("FAILING" if REQUIRED else "SKIPPING", why))
    return why


def require_client(case, why=False):
    """Under make test (SB_REQUIRE_EXTPROC=1) a missing client fails each test; otherwise each
    test skips (per test, not per class, so the runner's counts stay right)."""
    why = skip_reason() if why is False else why
    if why:
        if REQUIRED:
            case.fail("the ext_proc test client cannot run: " + why)
        case.skipTest(why)


def chat(text, model=MODEL, max_tokens=4, stream=False, pad=0):
    msgs = [{"role": "system", "content": "You are terse." + " pad" * pad}, {"role": "user", "content": text}]
    return {"model": model, "messages": msgs, "max_tokens": max_tokens, "stream": stream}


def envoy_headers(body_len, path="/v1/chat/completions", extra=()):
    h = [(":method", "POST"), (":path", path), (":authority", "gateway.example"), (":scheme", "http"),
         ("content-type", "application/json"), ("content-length", str(body_len))]
    return h + list(extra)


def kind(msg):
    for k in ("request_headers", "request_body", "request_trailers", "response_headers", "response_body",
              "response_trailers", "immediate_response"):
        if k in msg:
            return k
    return None


def metrics(gw):
    return http(gw.admin_port, "GET", "/metrics")[2].decode()


def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def endpoints(gw, pool=0):
    return {e["address"]: e for e in json.loads(http(gw.admin_port, "GET", "/debug/endpoints")[2])["pools"][pool]["endpoints"]}


class Picked:
    """What a request phase answered: the destination, metadata, and the body sent on."""

    def __init__(self, responses):
        self.responses = responses
        self.immediate = None
        self.destination = None
        self.metadata = None
        self.headers = {}
        self.body_chunks = []
        self.body_eos = False
        self.clear_route_cache = False
        for r in responses:
            k = kind(r)
            if k == "immediate_response":
                self.immediate = r["immediate_response"]
            common = (r.get(k) or {}).get("response") or {}
            if common.get("header_mutation"):
                self.headers.update(set_headers(common))
            if common.get("clear_route_cache"):
                self.clear_route_cache = True
            bm = common.get("body_mutation") or {}
            if "streamed_response" in bm:
                self.body_chunks.append(unb64(bm["streamed_response"].get("body")))
                self.body_eos = self.body_eos or bool(bm["streamed_response"].get("end_of_stream"))
            elif "body" in bm:
                self.body_chunks.append(unb64(bm["body"]))
                self.body_eos = True
            if r.get("dynamic_metadata"):
                self.metadata = from_struct(r["dynamic_metadata"])
        self.destination = self.headers.get(DESTINATION)

    @property
    def body(self):
        return b"".join(self.body_chunks)

    @property
    def endpoints(self):
        return self.destination.split(",") if self.destination else []

    @property
    def status(self):
        return ep.http_status(self.immediate["status"]["code"]) if self.immediate else None

    def immediate_header_names(self):
        return list(set_headers(self.immediate.get("headers") or {})) if self.immediate else []

    def immediate_headers(self):
        """Keyed by lower-cased name (test_refusal_header_names_lower_case checks the case)."""
        return {k.lower(): v for k, v in set_headers(self.immediate.get("headers") or {}).items()} if self.immediate else {}

    def immediate_json(self):
        return json.loads(unb64(self.immediate.get("body")))


def request_done(msgs):
    """A request phase is over: the last streamed chunk, a buffered body answer, or an immediate
    response."""
    for r in msgs:
        k = kind(r)
        if k == "immediate_response":
            return True
        if k == "request_body":
            bm = (r[k].get("response") or {}).get("body_mutation") or {}
            if "streamed_response" in bm and bm["streamed_response"].get("end_of_stream"):
                return True
            if "streamed_response" not in bm:  # buffered mode: one answer
                return True
    return False


class PickerCase(unittest.TestCase):
    """Helpers shared by the classes below: a request phase, Envoy's proxying, a response phase."""
    gw = drv = sim = None
    seq = 0

    def setUp(self):
        self.opened = []

    def cancel_open(self):
        """Streams a test left open (after an ImmediateResponse, say) are cancelled, as Envoy
        would once it has answered the client."""
        for sid in self.opened:
            if sid not in self.drv.status:
                self.drv.cancel(sid)

    @classmethod
    def next_id(cls, prefix="s"):
        PickerCase.seq += 1
        return "%s%d" % (prefix, PickerCase.seq)

    def request_phase(self, body, chunks=1, headers_eos=False, extra_headers=(), meta=None, protocol=None,
                      sid=None, path="/v1/chat/completions"):
        """Sends headers then the body (in `chunks` pieces) on a new stream; waits for the
        picker's answer to the request phase. Returns (sid, Picked)."""
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        sid = sid or self.next_id()
        self.drv.open(sid)
        self.opened.append(sid)
        self.drv.send(sid, request_headers(envoy_headers(len(body), path, extra_headers), headers_eos, meta, protocol))
        if not headers_eos:
            n = max(1, chunks)
            step = max(1, -(-len(body) // n))
            pieces = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
            for i, p in enumerate(pieces):
                self.drv.send(sid, request_body(p, i == len(pieces) - 1))
        buffered = protocol and protocol.get("request_body_mode") == "BUFFERED"

        def done(msgs):
            if any(kind(r) == "immediate_response" for r in msgs):
                return True
            if headers_eos:
                return any(kind(r) == "request_headers" for r in msgs)
            if buffered:
                return any(kind(r) == "request_body" for r in msgs)
            return request_done(msgs)
        msgs = self.drv.wait_until(sid, done, 30, "the request phase's answer")
        return sid, Picked(msgs)

    def proxy_to(self, endpoint, body, headers=None, stream=False):
        """Envoy's router: the request to the endpoint the picker chose."""
        host, port = endpoint.rsplit(":", 1)
        return http(int(port), "POST", "/v1/chat/completions", body, headers or {}, timeout=60)

    def response_phase(self, sid, status, headers, body, chunks=3, meta=None, body_mode="FULL_DUPLEX_STREAMED",
                       expect=None):
        """Sends response headers and the body in chunks; checks the picker's answers (headers
        CONTINUE, the body chunks echoed: unchanged, or as `expect` when given); half-closes;
        returns the stream's status."""
        before = len(self.drv.responses(sid))
        hdrs = [(":status", str(status))] + [(k, v) for k, v in headers.items() if k not in ("connection",)]
        self.drv.send(sid, response_headers(hdrs, not body, meta))
        msgs = self.drv.wait_responses(sid, before + 1)
        self.assertEqual(kind(msgs[before]), "response_headers", msgs[before:])
        self.assertFalse((msgs[before]["response_headers"].get("response") or {}).get("header_mutation"),
                         "response headers pass through unchanged")
        echoed = []
        if body:
            step = max(1, -(-len(body) // chunks))
            pieces = [body[i:i + step] for i in range(0, len(body), step)]
            for i, p in enumerate(pieces):
                self.drv.send(sid, response_body(p, i == len(pieces) - 1))
            msgs = self.drv.wait_responses(sid, before + 1 + len(pieces))
            for r in msgs[before + 1:]:
                self.assertEqual(kind(r), "response_body", r)
                bm = (r["response_body"].get("response") or {}).get("body_mutation") or {}
                if body_mode == "FULL_DUPLEX_STREAMED":
                    echoed.append(unb64(bm["streamed_response"].get("body")))
            if body_mode == "FULL_DUPLEX_STREAMED":
                self.assertEqual(b"".join(echoed), body if expect is None else expect,
                                 "response body echoed byte for byte")
                last = msgs[-1]["response_body"]["response"]["body_mutation"]["streamed_response"]
                self.assertTrue(last.get("end_of_stream"))
        self.drv.end(sid)
        return self.drv.wait_status(sid)

    def full_request(self, body, extra_headers=(), chunks=1, served=None):
        """A request through the picker, proxied to the pick by the test, its answer fed back.
        Returns (Picked, the replica's answer)."""
        sid, picked = self.request_phase(body, chunks=chunks, extra_headers=extra_headers)
        self.assertIsNone(picked.immediate, picked.responses)
        target = served or picked.endpoints[0]
        st, h, rbody = self.proxy_to(target, picked.body)
        meta = metadata("envoy.lb", {DESTINATION + "-served": served}) if served else None
        status = self.response_phase(sid, st, h, rbody, meta=meta)
        self.assertEqual(status["code"], 0, status)
        return picked, (st, h, rbody)


class SharedGatewayCase(PickerCase):
    """A class whose tests share one fleet, gateway and driver (set up in setUpClass)."""
    why = None

    @classmethod
    def tearDownClass(cls):
        try:
            if cls.drv:
                cls.drv.close()
            if cls.gw:
                cls.gw.close()
        finally:
            if cls.sim:
                cls.sim.stop()

    def setUp(self):
        super().setUp()
        require_client(self, self.why)

    def tearDown(self):
        self.cancel_open()


class ExtProcTest(SharedGatewayCase):
    """One fleet of 3 simulated replicas, one gateway with both listeners, one node driver."""

    @classmethod
    def setUpClass(cls):
        cls.why = skip_reason()
        if cls.why:
            return
        cls.sim = Sim("--speed", "50", replicas=3)
        cls.ext_port = free_port()
        cls.access_dir = None
        eps = ["127.0.0.1:%d" % p for p in cls.sim.ports]
        cls.eps = eps

        def pre(d):
            cls.access_log = os.path.join(d, "access.log")
            return {"log": cls.access_log}
        cls.gw = Gateway(
            # stale_ms well above the scrape interval: a loaded CI machine must not make a
            # replica stale (the gate filter would drop it, and with it a fallback).
            [{"name": "p", "models": [MODEL, ALIAS], "profile": "default", "endpoints": eps,
              "yaml": ["probe: { stale_ms: 10000 }"]},
             {"name": "drained", "models": [DRAINED_MODEL], "profile": "default",
              "endpoints": [{"address": eps[0], "draining": True}]},
             # Decided by the session key alone once nothing is in flight: the same key must
             # give the same endpoint through either listener.
             {"name": "sess", "models": [SESSION_MODEL], "profile": "session-hash", "endpoints": eps}],
            extra=('ext_proc: { listen: "127.0.0.1:%d", fallbacks: %d, chunk_bytes: %d }\n'
                   'limits: { max_body_bytes: 64KiB }\naccess_log: "{log}"') % (cls.ext_port, FALLBACKS, CHUNK_BYTES),
            pre_start=pre)
        # Every replica scraped once: none is stale, so every one is a candidate (and a fallback).
        wait_until(lambda: all(e["report"].get("waiting") is not None for e in endpoints(cls.gw).values()), 15,
                   "a first report from every replica")
        wait_until(lambda: _can_connect(cls.ext_port), 15, "the ext_proc listener")
        cls.drv = Driver(cls.ext_port)


    def assert_destination(self, picked, n=1 + FALLBACKS):
        self.assertIsNone(picked.immediate, picked.responses)
        self.assertTrue(picked.clear_route_cache)
        self.assertEqual(len(picked.endpoints), n, picked.destination)
        self.assertEqual(len(set(picked.endpoints)), n, "fallbacks are distinct")
        self.assertTrue(set(picked.endpoints) <= set(self.eps), picked.destination)
        self.assertEqual(picked.metadata, {"envoy.lb": {DESTINATION: picked.destination}},
                         "the header and the metadata name the same endpoints")

    # ---- request phase, FULL_DUPLEX_STREAMED ----

    def test_one_chunk_streamed_back_identical(self):
        body = json.dumps(chat("one chunk", pad=800)).encode()  # > 3 x chunk_bytes
        sid, p = self.request_phase(body, chunks=1)
        self.assert_destination(p)
        kinds = [kind(r) for r in p.responses]
        self.assertEqual(kinds[0], "request_headers", "the headers' answer comes first")
        self.assertTrue(all(k == "request_body" for k in kinds[1:]), kinds)
        self.assertGreaterEqual(len(p.body_chunks), 3)
        self.assertTrue(all(0 < len(c) <= CHUNK_BYTES for c in p.body_chunks), [len(c) for c in p.body_chunks])
        self.assertEqual(p.body, body, "body streamed back byte for byte")
        self.assertTrue(p.body_eos)
        self.assertEqual(p.headers.get("content-length"), str(len(body)))
        self.drv.cancel(sid)

    def test_many_chunks(self):
        body = json.dumps(chat("many small chunks", pad=50)).encode()
        sid, p = self.request_phase(body, chunks=37)
        self.assert_destination(p)
        self.assertEqual(p.body, body)
        self.drv.cancel(sid)

    def test_headers_with_end_of_stream_needs_a_body(self):
        sid, p = self.request_phase(b"", headers_eos=True)
        self.assertEqual(p.status, 400, p.responses)
        self.assertIn("error", p.immediate_json())
        self.drv.cancel(sid)

    def test_alias_rewritten_in_body(self):
        req = chat("through an alias", model=ALIAS)
        body = json.dumps(req).encode()
        sid, p = self.request_phase(body, chunks=4)
        self.assert_destination(p)
        sent = json.loads(p.body)
        self.assertEqual(sent["model"], MODEL, "the served name goes upstream")
        self.assertEqual({k: v for k, v in sent.items() if k != "model"}, {k: v for k, v in req.items() if k != "model"})
        self.assertEqual(p.headers.get("content-length"), str(len(p.body)))
        self.assertTrue(all(len(c) <= CHUNK_BYTES for c in p.body_chunks))
        self.drv.cancel(sid)

    def test_trailers_end_the_body_and_are_answered(self):
        # A request with trailers: in full-duplex mode Envoy sends the body without
        # end_of_stream, then the trailers; they end the body. Answers keep the order headers,
        # body, trailers; response trailers are answered too.
        body = json.dumps(chat("with trailers")).encode()
        sid = self.next_id("tr")
        self.drv.open(sid)
        self.opened.append(sid)
        self.drv.send(sid, request_headers(envoy_headers(len(body))))
        self.drv.send(sid, request_body(body[:40], False))
        self.drv.send(sid, request_body(body[40:], False))
        self.drv.send(sid, {"request_trailers": {"trailers": ep.header_map([("x-checksum", "abc")])}})
        msgs = self.drv.wait_until(sid, lambda m: any(kind(r) == "request_trailers" for r in m), 30,
                                   "the trailers' answer")
        kinds = [kind(r) for r in msgs]
        self.assertEqual(kinds[0], "request_headers")
        self.assertEqual(kinds[-1], "request_trailers", kinds)
        self.assertTrue(all(k == "request_body" for k in kinds[1:-1]), kinds)
        p = Picked(msgs)
        self.assertEqual(p.body, body)
        # The body came without end_of_stream (trailers end the request): the body sent back
        # mirrors it, or Envoy would end the upstream request before the trailers.
        self.assertFalse(p.body_eos, "no body chunk ends the request: the trailers do")
        self.assertIn(p.endpoints[0], self.eps)
        st, h, rbody = self.proxy_to(p.endpoints[0], p.body)
        n = len(msgs)
        self.drv.send(sid, response_headers([(":status", "200"), ("content-type", "application/json")]))
        self.drv.send(sid, response_body(rbody, False))
        self.drv.send(sid, {"response_trailers": {"trailers": ep.header_map([("grpc-status", "0")])}})
        msgs = self.drv.wait_responses(sid, n + 3)
        self.assertEqual([kind(r) for r in msgs[n:]], ["response_headers", "response_body", "response_trailers"])
        self.drv.end(sid)
        self.assertEqual(self.drv.wait_status(sid)["code"], 0)

    # ---- BUFFERED (a protocol_config on the stream wins over the configured mode) ----

    def test_buffered_mode(self):
        req = chat("buffered", model=ALIAS)
        body = json.dumps(req).encode()
        sid, p = self.request_phase(body, protocol={"request_body_mode": "BUFFERED", "response_body_mode": "BUFFERED"})
        first = p.responses[0]
        self.assertEqual(kind(first), "request_headers")
        self.assertFalse((first["request_headers"].get("response") or {}).get("header_mutation"),
                         "headers answered at once with CONTINUE")
        bodies = [r for r in p.responses if kind(r) == "request_body"]
        self.assertEqual(len(bodies), 1)
        common = bodies[0]["request_body"]["response"]
        dest = set_headers(common).get(DESTINATION)
        self.assertTrue(dest and dest.split(",")[0] in self.eps, common)
        self.assertTrue(common.get("clear_route_cache"))
        self.assertEqual(from_struct(bodies[0]["dynamic_metadata"]), {"envoy.lb": {DESTINATION: dest}})
        replaced = unb64(common["body_mutation"]["body"])
        self.assertEqual(json.loads(replaced)["model"], MODEL)
        self.assertEqual(set_headers(common).get("content-length"), str(len(replaced)))
        # Response phase, buffered: one body message answered with a BodyResponse.
        st, h, rbody = self.proxy_to(dest.split(",")[0], replaced)
        self.assertEqual(st, 200)
        status = self.response_phase(sid, st, h, rbody, chunks=1, body_mode="BUFFERED")
        self.assertEqual(status["code"], 0)

    def test_response_body_mode_none(self):
        # Envoy sends no response body: the exchange's accounting ends at the response headers.
        sid, p = self.request_phase(chat("no response body"),
                                    protocol={"request_body_mode": "FULL_DUPLEX_STREAMED", "response_body_mode": "NONE"})
        ep0 = p.endpoints[0]
        before = endpoints(self.gw)[ep0]["own"]
        self.assertEqual(before["in_flight"], 1)
        n = len(p.responses)
        self.drv.send(sid, response_headers([(":status", "200"), ("content-type", "application/json")]))
        msgs = self.drv.wait_responses(sid, n + 1)
        self.assertEqual(kind(msgs[n]), "response_headers")
        wait_until(lambda: endpoints(self.gw)[ep0]["own"]["completed"] == before["completed"] + 1, 10,
                   "the exchange to be accounted at the response headers")
        self.assertEqual(endpoints(self.gw)[ep0]["own"]["in_flight"], 0)
        self.drv.end(sid)
        self.assertEqual(self.drv.wait_status(sid)["code"], 0)

    def test_buffered_unchanged_body_not_replaced(self):
        body = json.dumps(chat("buffered, served name")).encode()
        sid, p = self.request_phase(body, protocol={"request_body_mode": "BUFFERED"})
        common = [r for r in p.responses if kind(r) == "request_body"][0]["request_body"]["response"]
        self.assertIn(DESTINATION, set_headers(common))
        self.assertNotIn("body", common.get("body_mutation") or {}, "an unchanged body is not sent back")
        self.drv.cancel(sid)

    # ---- the decision is the proxy's ----

    def test_same_pick_as_the_proxy_both_ways(self):
        # Through the proxy first: the prompt's prefix lands on one replica; the picker then
        # picks the same replica for the same prompt.
        prompt = chat("proxy first", pad=300)
        st, h, body = http(self.gw.port, "POST", "/v1/chat/completions", prompt, timeout=60)
        self.assertEqual(st, 200)
        d = self.last_decision()
        p, _ = self.full_request(prompt)
        self.assertEqual(p.endpoints[0], d, "ext_proc picked where the proxy sent the same prompt")
        self.assertEqual(self.last_decision(), p.endpoints[0], "/debug/decisions records the picker's pick")
        # And the other way: the picker first (full response phase), then the proxy.
        prompt2 = chat("picker first", pad=300)
        p2, _ = self.full_request(prompt2)
        st, h, body = http(self.gw.port, "POST", "/v1/chat/completions", prompt2, timeout=60)
        self.assertEqual(st, 200)
        self.assertEqual(self.last_decision(), p2.endpoints[0], "the proxy picked where the picker sent it")

    def test_session_hash_same_pick_as_the_proxy(self):
        picks = []
        for i in range(8):
            key = [("x-session-id", "user-%d" % i)]
            # The replicas do not serve this model name (their 404 passes through): only the
            # decision matters here.
            http(self.gw.port, "POST", "/v1/chat/completions", chat("session", model=SESSION_MODEL), dict(key),
                 timeout=60)
            by_proxy = self.last_decision(pool="sess")
            sid, p = self.request_phase(chat("session", model=SESSION_MODEL), extra_headers=key)
            self.assertEqual(p.endpoints[0], by_proxy, "session %d" % i)
            self.assertEqual(self.last_decision(pool="sess"), by_proxy)
            self.drv.cancel(sid)
            self.drv.wait_status(sid)
            wait_until(lambda: sum(e["own"]["in_flight"] for e in endpoints(self.gw, 2).values()) == 0, 10,
                       "nothing in flight")
            picks.append(by_proxy)
        self.assertGreater(len(set(picks)), 1, "sessions spread over the replicas: %s" % picks)

    def last_decision(self, pool="p"):
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions?pool=%s&limit=1" % pool)
        self.assertEqual(st, 200)
        return json.loads(body)["decisions"][0]["picked"]

    # ---- response phase accounting ----

    def test_response_phase_moves_the_counters(self):
        before = metrics(self.gw)
        rid = "extproc-acct-1"
        p, (st, h, rbody) = self.full_request(chat("count me", max_tokens=5), extra_headers=[("x-request-id", rid)])
        self.assertEqual(st, 200)
        usage = json.loads(rbody)["usage"]
        ep0 = p.endpoints[0]
        after = metrics(self.gw)
        self.assertEqual(metric(after, "switchboard_requests_total", endpoint=ep0) -
                         metric(before, "switchboard_requests_total", endpoint=ep0), 1)
        self.assertEqual(metric(after, "switchboard_completion_tokens_total") -
                         metric(before, "switchboard_completion_tokens_total"), usage["completion_tokens"])
        self.assertEqual(metric(after, "switchboard_prompt_tokens_total") -
                         metric(before, "switchboard_prompt_tokens_total"), usage["prompt_tokens"])
        wait_until(lambda: metric(metrics(self.gw), "switchboard_endpoint_in_flight") == 0, 10, "in-flight back to 0")
        self.assertEqual(endpoints(self.gw)[ep0]["prefix_index"]["pending"], 0)

        def logged():
            try:
                return [json.loads(l) for l in open(self.access_log) if rid in l]
            except OSError:
                return []
        wait_until(lambda: logged(), 10, "the access log line")
        line = logged()[0]
        self.assertEqual((line["endpoint"], line["status"], line["outcome"]), (ep0, 200, "ok"))
        self.assertEqual(line["completion_tokens"], usage["completion_tokens"])
        self.assertEqual(line["path"], "/v1/chat/completions")
        # The picker's decision is kept by the request's id, with how the response phase ended.
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions?id=" + rid)
        self.assertEqual(st, 200)
        d = json.loads(body)["decisions"][0]
        self.assertEqual((d["id"], d["picked"]), (rid, ep0))
        o = d["outcome"]
        self.assertEqual((o["status"], o["attempts"], o["served_by"]), (200, 1, ep0))

    def test_streamed_answer_usage_counted(self):
        before = metrics(self.gw)
        req = chat("stream me", max_tokens=6, stream=True)
        req["stream_options"] = {"include_usage": True}
        p, (st, h, rbody) = self.full_request(req)
        self.assertEqual(st, 200)
        self.assertIn(b"data: [DONE]", rbody)
        after = metrics(self.gw)
        self.assertEqual(metric(after, "switchboard_completion_tokens_total") -
                         metric(before, "switchboard_completion_tokens_total"), 6)
        # The response phase times tokens as the proxy does (net/stats.h's token clock): one
        # first token and one mean gap for the stream, each at or under the whole request's time.
        for name in ("switchboard_time_to_first_token_seconds", "switchboard_inter_token_latency_seconds"):
            self.assertEqual(metric(after, name + "_count") - metric(before, name + "_count"), 1, name)
        self.assertLessEqual(metric(after, "switchboard_time_to_first_token_seconds_sum") -
                             metric(before, "switchboard_time_to_first_token_seconds_sum"),
                             metric(after, "switchboard_request_duration_seconds_sum") -
                             metric(before, "switchboard_request_duration_seconds_sum"))

    def test_stream_usage_asked_and_stripped(self):
        """A stream that did not ask for usage: the body Envoy sends on asks for it (its
        content-length the new length), and the usage-only chunk is taken out of the chunks Envoy
        gets back, whatever the chunking, while the counters learn the usage."""
        req = chat("stream me, no usage", max_tokens=5, stream=True)
        body = json.dumps(req).encode()
        sid, p = self.request_phase(body)
        self.assert_destination(p)
        sent = json.loads(p.body)
        self.assertEqual(sent["stream_options"], {"include_usage": True})
        self.assertEqual(p.body[:len(body) - 1], body[:-1], "the client's bytes, then the splice")
        self.assertEqual(p.headers.get("content-length"), str(len(p.body)))
        st, h, rbody = self.proxy_to(p.endpoints[0], p.body)
        self.assertEqual(st, 200)
        events = rbody.split(b"\n\n")
        usage_ev = [e for e in events if b'"choices":[],"usage"' in e]
        self.assertEqual(len(usage_ev), 1, rbody)
        usage = json.loads(usage_ev[0][len(b"data: "):])["usage"]
        before = metrics(self.gw)
        # 7 chunks: cuts land inside events, the usage chunk's among them.
        status = self.response_phase(sid, st, h, rbody, chunks=7, expect=rbody.replace(usage_ev[0] + b"\n\n", b""))
        self.assertEqual(status["code"], 0, status)
        after = metrics(self.gw)
        for name, key in (("switchboard_prompt_tokens_total", "prompt_tokens"),
                          ("switchboard_completion_tokens_total", "completion_tokens")):
            self.assertEqual(metric(after, name) - metric(before, name), usage[key], name)

    def test_served_endpoint_feedback(self):
        sid, p = self.request_phase(chat("served elsewhere"), extra_headers=[("x-request-id", "served-elsewhere-1")])
        picked, fallback = p.endpoints[0], p.endpoints[1]
        before = endpoints(self.gw)
        st, h, rbody = self.proxy_to(fallback, p.body)
        status = self.response_phase(sid, st, h, rbody,
                                     meta=metadata("envoy.lb", {DESTINATION + "-served": fallback}))
        self.assertEqual(status["code"], 0)
        after = endpoints(self.gw)
        self.assertEqual(after[fallback]["own"]["completed"] - before[fallback]["own"]["completed"], 1,
                         "the endpoint that served is credited")
        self.assertEqual(after[picked]["own"]["completed"], before[picked]["own"]["completed"])
        self.assertEqual(sum(e["own"]["in_flight"] for e in after.values()), 0)
        # The record keeps the pick; its outcome names the fallback Envoy served on.
        st, _, body = http(self.gw.admin_port, "GET", "/debug/decisions?id=served-elsewhere-1")
        d = json.loads(body)["decisions"][0]
        self.assertEqual(d["picked"], picked)
        self.assertEqual((d["outcome"]["attempts"], d["outcome"]["served_by"]), (2, fallback))

    # ---- subset hint ----

    def test_subset_restricts_candidates(self):
        for want in self.eps:
            for form in ([want], want):  # a list of strings, or a comma string
                sid, p = self.request_phase(chat("subset " + want),
                                            meta=metadata("envoy.lb.subset_hint", {DESTINATION + "-subset": form}))
                self.assertIsNone(p.immediate, p.responses)
                self.assertEqual(p.endpoints, [want])
                self.drv.cancel(sid)
        two = self.eps[1:]
        sid, p = self.request_phase(chat("subset of two"), meta=metadata("envoy.lb.subset_hint", {DESTINATION + "-subset": two}))
        self.assertEqual(set(p.endpoints), set(two))
        self.drv.cancel(sid)

    def test_empty_subset_503(self):
        sid, p = self.request_phase(chat("empty subset"), meta=metadata("envoy.lb.subset_hint", {DESTINATION + "-subset": []}))
        self.assertEqual(p.status, 503, p.responses)
        self.assertIn("error", p.immediate_json())
        self.assertRegex(p.immediate_headers().get("x-request-id", ""), r"^[0-9a-f]{32}$")
        self.drv.wait_status(sid)

    # ---- errors ----

    def test_unknown_model_404(self):
        sid, p = self.request_phase(chat("who", model="no-such-model"), extra_headers=[("x-request-id", "rid-404")])
        self.assertEqual(p.status, 404)
        err = p.immediate_json()["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        h = p.immediate_headers()
        self.assertEqual(h.get("content-type"), "application/json")
        self.assertEqual(h.get("x-request-id"), "rid-404")
        self.drv.wait_status(sid)

    def test_bad_json_400(self):
        sid, p = self.request_phase(b'{"model": "' + MODEL.encode() + b'", "messages": [')
        self.assertEqual(p.status, 400)
        self.assertIn("error", p.immediate_json())

    def test_no_endpoint_503(self):
        sid, p = self.request_phase(chat("nobody", model=DRAINED_MODEL))
        self.assertEqual(p.status, 503, p.responses)
        self.assertEqual(p.immediate_headers().get("x-switchboard-refusal"), "no_healthy_endpoint")
        self.assertIn("retry-after", p.immediate_headers())
        self.assertEqual(p.immediate_json()["error"]["code"], "no_healthy_endpoint")

    def test_refusal_header_names_lower_case(self):
        # RFC 9113 8.2.1: field names are lower case in HTTP/2, and Envoy checks the names an
        # external processor sets (a capital makes the mutation invalid).
        sid, p = self.request_phase(chat("nobody", model=DRAINED_MODEL))
        self.assertEqual(p.status, 503)
        keys = p.immediate_header_names()
        self.assertIn("retry-after", [k.lower() for k in keys])
        self.assertEqual(keys, [k.lower() for k in keys])

    def test_body_over_limit_413(self):
        big = json.dumps(chat("x" * (70 * 1024))).encode()
        sid, p = self.request_phase(big, chunks=8)
        self.assertEqual(p.status, 413, [kind(r) for r in p.responses])
        # Answered before the handler ran, still with the request's id (generated: Envoy's
        # headers here carry none).
        self.assertRegex(p.immediate_headers().get("x-request-id", ""), r"^[0-9a-f]{32}$")

    def test_malformed_and_out_of_order_end_the_stream_not_the_server(self):
        cases = {
            "garbage": lambda sid: self.drv.send_hex(sid, "ffffffff0f"),
            "body_first": lambda sid: self.drv.send(sid, request_body(b"{}", True)),
            "two_headers": lambda sid: (self.drv.send(sid, request_headers(envoy_headers(2))),
                                        self.drv.send(sid, request_headers(envoy_headers(2)))),
            "empty_oneof": lambda sid: self.drv.send(sid, {}),
        }
        for name, act in cases.items():
            sid = self.next_id(name)
            self.drv.open(sid, kind="raw" if name == "garbage" else "process")
            act(sid)
            st = self.drv.wait_status(sid)
            self.assertEqual(st["code"], 3, (name, st))
        # The server still serves.
        sid, p = self.request_phase(chat("still here"))
        self.assert_destination(p)
        self.drv.cancel(sid)
        st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat("proxy still here"), timeout=60)
        self.assertEqual(st, 200)

    def test_oversized_messages_end_the_stream(self):
        # More headers than the codec keeps: INVALID_ARGUMENT, not a silent cut.
        sid = self.next_id("many")
        self.drv.open(sid)
        self.drv.send(sid, request_headers(envoy_headers(2, extra=[("x-h%d" % i, "v") for i in range(300)])))
        self.assertEqual(self.drv.wait_status(sid)["code"], 3)
        # A message over the gRPC message bound (derived from limits.max_body_bytes): refused
        # from its length prefix, RESOURCE_EXHAUSTED, before it is buffered.
        for name, msgs in (("body", [request_headers(envoy_headers(5 << 20)), request_body(b"x" * (5 << 20), True)]),
                           ("header", [request_headers(envoy_headers(2, extra=[("x-big", "v" * (200 << 10))]))])):
            sid = self.next_id("big")
            self.drv.open(sid)
            for m in msgs:
                self.drv.send(sid, m)
            st = self.drv.wait_status(sid)
            self.assertEqual(st["code"], 8, (name, st))
            self.assertEqual(self.drv.responses(sid), [])
        sid, p = self.request_phase(chat("after the big ones"))
        self.assert_destination(p)

    def test_unknown_method_unimplemented(self):
        sid = self.next_id("unimpl")
        self.drv.open(sid, kind="raw", path="/envoy.service.ext_proc.v3.ExternalProcessor/Nope")
        self.drv.send_hex(sid, "")
        self.drv.end(sid)
        self.assertEqual(self.drv.wait_status(sid)["code"], 12)

    # ---- health ----

    def test_health_check_and_watch(self):
        for service, want in (("", "SERVING"), (SERVICE, "SERVING")):
            sid = self.next_id("hc")
            self.drv.open(sid, kind="check", service=service)
            st = self.drv.wait_status(sid)
            self.assertEqual(st["code"], 0, st)
            self.assertEqual(self.drv.responses(sid), [{"status": want}])
        sid = self.next_id("hc")
        self.drv.open(sid, kind="check", service="no.such.Service")
        self.assertEqual(self.drv.wait_status(sid)["code"], 5)  # NOT_FOUND
        sid = self.next_id("watch")
        self.drv.open(sid, kind="watch", service="")
        self.assertEqual(self.drv.wait_responses(sid, 1), [{"status": "SERVING"}])
        self.drv.cancel(sid)
        self.assertEqual(self.drv.wait_status(sid)["code"], 1)  # CANCELLED, the client's doing
        # Watch of an unknown service: SERVICE_UNKNOWN, and the call stays open (the service may
        # appear later), as the health protocol says.
        sid = self.next_id("watch")
        self.drv.open(sid, kind="watch", service="no.such.Service")
        self.assertEqual(self.drv.wait_responses(sid, 1), [{"status": "SERVICE_UNKNOWN"}])
        self.assertNotIn(sid, self.drv.status)
        self.drv.cancel(sid)
        self.drv.wait_status(sid)

    # ---- many at once ----

    def test_500_concurrent_streams(self):
        n = 500
        before = metrics(self.gw)
        usage = json.dumps({"id": "x", "object": "chat.completion", "choices": [],
                            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}).encode()
        ids = []
        for i in range(n):
            body = json.dumps(chat("concurrent %d" % i)).encode()
            script = [{"send": request_headers(envoy_headers(len(body)))},
                      {"send": request_body(body, True)},
                      {"await": 2},
                      {"send": response_headers([(":status", "200"), ("content-type", "application/json")])},
                      {"await": 3},
                      {"send": response_body(usage, True)},
                      {"await": 4},
                      {"end": True}]
            sid = self.next_id("c")
            ids.append(sid)
            self.drv.run(sid, script)
        for sid in ids:
            st = self.drv.wait_status(sid, timeout=120)
            self.assertEqual(st["code"], 0, (sid, st, self.drv.responses(sid)))
            p = Picked(self.drv.responses(sid))
            self.assertIn(p.endpoints[0] if p.destination else None, self.eps, self.drv.responses(sid))
        after = metrics(self.gw)
        self.assertEqual(metric(after, "switchboard_completion_tokens_total") -
                         metric(before, "switchboard_completion_tokens_total"), 2 * n)
        wait_until(lambda: metric(metrics(self.gw), "switchboard_endpoint_in_flight") == 0, 10, "in-flight back to 0")
        spread = [sum(1 for sid in ids if Picked(self.drv.responses(sid)).endpoints[0] == e) for e in self.eps]
        self.assertEqual(sum(spread), n)
        # Every stream ended is freed on the loop's next turn, not kept until the picker stops
        # (the reaper once never ran: about 4 KB held per request for good).
        text = metrics(self.gw)
        self.assertEqual(metric(text, "switchboard_extproc_streams_open"), 0)
        self.assertIn("\nswitchboard_extproc_unfreed_streams ", text)
        self.assertEqual(metric(text, "switchboard_extproc_unfreed_streams"), 0)
        # The listener's own figures: the driver's connection, nothing held mid-message.
        self.assertGreaterEqual(metric(text, "switchboard_extproc_connections"), 1)
        self.assertEqual(metric(text, "switchboard_extproc_buffered_bytes"), 0)

    def test_buffered_partial_refused(self):
        # Envoy's BUFFERED_PARTIAL sends part of a large body and waits for an answer: the picker
        # cannot pick from part of a body, so the mode is refused plainly, not left to time out.
        sid = self.next_id("bp")
        self.drv.open(sid)
        self.opened.append(sid)
        body = json.dumps(chat("partial")).encode()
        self.drv.send(sid, request_headers(envoy_headers(len(body)), False, None,
                                           {"request_body_mode": "BUFFERED_PARTIAL"}))
        st = self.drv.wait_status(sid)
        self.assertEqual(st["code"], 9, st)  # FAILED_PRECONDITION
        self.assertIn("FULL_DUPLEX_STREAMED or BUFFERED", st["details"])


class OrcaTest(PickerCase):
    """ORCA load reports in the response headers Envoy shows the picker land in the endpoint's
    load picture (scraping off, so nothing else writes it)."""

    def setUp(self):
        super().setUp()
        require_client(self)
        self.sim = Sim("--speed", "50", replicas=1)
        self.ext_port = free_port()
        self.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                            "endpoints": ["127.0.0.1:%d" % self.sim.port], "yaml": ["probe: { enabled: false }"]}],
                          extra='ext_proc: { listen: "127.0.0.1:%d" }' % self.ext_port)
        wait_until(lambda: _can_connect(self.ext_port), 15, "the ext_proc listener")
        self.drv = Driver(self.ext_port)

    def tearDown(self):
        try:
            self.drv.close()
            self.gw.close()
        finally:
            self.sim.stop()

    def test_orca_header_in_response_headers_applied(self):
        sid, p = self.request_phase(chat("orca"))
        ep0 = p.endpoints[0]
        orca = "TEXT named_metrics.kv_cache_usage_perc=0.42, named_metrics.num_requests_waiting=7"
        status = self.response_phase(sid, 200, {"content-type": "application/json", "endpoint-load-metrics": orca},
                                     json.dumps({"usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                                           "total_tokens": 4}}).encode())
        self.assertEqual(status["code"], 0)
        self.assertEqual(p.headers.get("endpoint-load-metrics-format"), "TEXT",
                         "the picker asks the model server for ORCA reports, as the proxy does")
        rep = endpoints(self.gw)[ep0]["report"]
        self.assertEqual(rep["waiting"], 7, rep)
        self.assertAlmostEqual(rep["kv_cache_usage"], 0.42, places=3)


class TokenTest(PickerCase):
    """ext_proc.token: Process calls carry it (Envoy's grpc_service.initial_metadata); health
    checks need none."""

    def setUp(self):
        super().setUp()
        require_client(self)
        self.sim = Sim("--speed", "50", replicas=1)
        self.ext_port = free_port()
        self.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                            "endpoints": ["127.0.0.1:%d" % self.sim.port]}],
                          extra=('ext_proc: { listen: "127.0.0.1:%d", token: "picker-secret-1" }\n'
                                 'auth: { api_keys: ["sk-client-1"] }') % self.ext_port)
        wait_until(lambda: _can_connect(self.ext_port), 15, "the ext_proc listener")
        self.drv = Driver(self.ext_port)

    def tearDown(self):
        try:
            self.cancel_open()
            self.drv.close()
            self.gw.close()
        finally:
            self.sim.stop()

    def test_token_required(self):
        body = json.dumps(chat("with a token?")).encode()
        for name, md in (("none", {}), ("wrong", {"authorization": "Bearer picker-secret-2"}),
                         ("not bearer", {"authorization": "picker-secret-1"})):
            sid = self.next_id("tok")
            self.drv.open(sid, metadata=md)
            self.drv.send(sid, request_headers(envoy_headers(len(body))))
            self.drv.send(sid, request_body(body, True))
            st = self.drv.wait_status(sid)
            self.assertEqual(st["code"], 16, (name, st))  # UNAUTHENTICATED
            self.assertEqual(self.drv.responses(sid), [], name)
        good = {"authorization": "Bearer picker-secret-1"}
        # With the picker's token, the client's own API key (auth on) still decides: the
        # client's Authorization travels in Envoy's request headers, not in the call's.
        for name, client_key, want in (("no key", [], 401), ("bad key", [("authorization", "Bearer sk-nope")], 401),
                                       ("good key", [("authorization", "Bearer sk-client-1")], None)):
            sid = self.next_id("tok")
            self.drv.open(sid, metadata=good)
            self.opened.append(sid)
            self.drv.send(sid, request_headers(envoy_headers(len(body), extra=client_key)))
            self.drv.send(sid, request_body(body, True))
            p = Picked(self.drv.wait_until(sid, request_done, 30, "the answer"))
            self.assertEqual(p.status, want, name)
            if want == 401:
                self.assertEqual(p.immediate_json()["error"]["code"], "invalid_api_key")
                self.assertIn("www-authenticate", p.immediate_headers())
            else:
                self.assertEqual(p.endpoints, ["127.0.0.1:%d" % self.sim.port])
        sid = self.next_id("hc")
        self.drv.open(sid, kind="check", service="")
        self.assertEqual(self.drv.wait_status(sid)["code"], 0, "health needs no token")


class DrainTest(PickerCase):
    """SIGTERM: health watchers see NOT_SERVING at once; a stream in its response phase finishes
    and is accounted; then the gateway exits 0."""

    def setUp(self):
        super().setUp()
        require_client(self)
        self.sim = Sim("--speed", "50", replicas=1)
        self.ext_port = free_port()
        self.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "default",
                            "endpoints": ["127.0.0.1:%d" % self.sim.port]}],
                          extra='ext_proc: { listen: "127.0.0.1:%d" }\nshutdown: { drain_ms: 20000 }\naccess_log: "-"'
                          % self.ext_port)
        wait_until(lambda: _can_connect(self.ext_port), 15, "the ext_proc listener")
        self.drv = Driver(self.ext_port)

    def tearDown(self):
        try:
            self.cancel_open()
            self.drv.close()
            self.gw.close()
        finally:
            self.sim.stop()

    def test_drain(self):
        watch = self.next_id("watch")
        self.drv.open(watch, kind="watch", service=SERVICE, deadline_ms=60000)
        self.assertEqual(self.drv.wait_responses(watch, 1), [{"status": "SERVING"}])
        sid, p = self.request_phase(chat("in flight through the drain"))
        self.assertTrue(p.endpoints)
        self.gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.drv.wait_responses(watch, 2)[1], {"status": "NOT_SERVING"})
        self.drv.cancel(watch)
        st, h, rbody = self.proxy_to(p.endpoints[0], p.body)
        status = self.response_phase(sid, st, h, rbody)
        self.assertEqual(status["code"], 0, "a stream in flight finishes")
        self.gw.proc.wait(15)
        self.assertEqual(self.gw.proc.returncode, 0)
        with open(self.gw.log_path) as f:
            lines = [json.loads(l) for l in f if l.startswith("{") and '"outcome"' in l]
        self.assertEqual([(l["outcome"], l["status"]) for l in lines], [("ok", 200)], "logged once, not cut")


class FlowControlTest(PickerCase):
    """A saturated pool (long requests through the proxy listener fill both replicas' queues):
    the picker sheds sheddable requests with 429, holds a standard one open while it is queued,
    and takes a cancelled stream out of the queue."""

    def setUp(self):
        super().setUp()
        require_client(self)
        self.sim = Sim("--speed", "1", "--max-num-seqs", "1", replicas=2)
        self.ext_port = free_port()
        self.gw = Gateway([{"name": "p", "models": [MODEL], "profile": "least-request",
                            "endpoints": ["127.0.0.1:%d" % p for p in self.sim.ports],
                            "yaml": ["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"]}],
                          extra=('ext_proc: { listen: "127.0.0.1:%d" }\nflow_control:\n  max_queued: { critical: 1 }\n'
                                 'shutdown: { drain_ms: 1500 }\naccess_log: "-"') % self.ext_port)
        wait_until(lambda: _can_connect(self.ext_port), 15, "the ext_proc listener")
        self.drv = Driver(self.ext_port)
        self.threads = []
        self.results = []

    def tearDown(self):
        for t in self.threads:
            t.join()
        try:
            self.drv.close()
            self.gw.close()
        finally:
            self.sim.stop()

    def background(self, text, max_tokens=300):
        def run():
            st, _, _ = http(self.gw.port, "POST", "/v1/chat/completions", chat(text, max_tokens=max_tokens), timeout=60)
            self.results.append(st)
        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def enqueued(self):
        """Requests the standard band ever took in: dispatched from it, removed, or still there."""
        text = metrics(self.gw)
        return sum(metric(text, name, pool="p", band="standard") for name in (
            "switchboard_queue_dispatched_total", "switchboard_queue_removed_total", "switchboard_queue_length"))

    def saturate(self, n=16):
        for i in range(n):
            self.background("load %d" % i)
        wait_until(lambda: all((e["report"].get("waiting") or 0) > 1 for e in endpoints(self.gw).values()), 20,
                   "both replicas to report a queue over the gate's threshold")
        # Every background request has arrived: sent to a replica or held in the gateway's queue.
        wait_until(lambda: sum(e["own"]["dispatched"] for e in endpoints(self.gw).values()) +
                   metric(metrics(self.gw), "switchboard_queue_length", pool="p", band="standard") >= n, 20,
                   "the background requests to arrive")

    def test_drain_cut_answers_queued_streams(self):
        # A stream still queued when the drain window ends gets its 503 `draining` answer before
        # the connection closes (it was logged but lost: the picker stopped without flushing).
        self.saturate()
        e0 = self.enqueued()
        sid = self.next_id("dq")
        body = json.dumps(chat("queued through the drain")).encode()
        self.drv.open(sid, deadline_ms=60000)
        self.drv.send(sid, request_headers(envoy_headers(len(body))))
        self.drv.send(sid, request_body(body, True))
        wait_until(lambda: self.enqueued() == e0 + 1, 10, "the request to be queued")
        self.gw.proc.send_signal(signal.SIGTERM)
        msgs = self.drv.wait_until(sid, lambda m: any(kind(r) == "immediate_response" for r in m), 30,
                                   "the drain's refusal")
        p = Picked(msgs)
        self.assertEqual(p.status, 503, msgs)
        self.assertEqual(p.immediate_headers().get("x-switchboard-refusal"), "draining")
        self.gw.proc.wait(30)
        with open(self.gw.log_path) as f:
            mine = [json.loads(l) for l in f if l.startswith("{") and "queued through" not in l and
                    '"reason":"draining"' in l]
        self.assertTrue(mine, "the refusal is logged")

    def test_shed_queue_and_cancel(self):
        self.saturate()
        self.assertGreaterEqual(metric(metrics(self.gw), "switchboard_queue_length", pool="p", band="standard"), 1)
        # Sheddable: 429 at once, with the reason header and an OpenAI-shaped body.
        sid, p = self.request_phase(chat("shed me"), extra_headers=[("x-priority", "sheddable")])
        self.assertEqual(p.status, 429, p.responses)
        h = p.immediate_headers()
        self.assertEqual(h.get("x-switchboard-refusal"), "shed")
        self.assertGreaterEqual(int(h.get("retry-after", "0")), 1)
        self.assertEqual(p.immediate_json()["error"]["code"], "shed")
        # Standard: queued behind the background ones; the stream stays open with no answer.
        e0 = self.enqueued()
        r0 = metric(metrics(self.gw), "switchboard_queue_removed_total", pool="p", band="standard")
        sid = self.next_id("q")
        body = json.dumps(chat("queued then cancelled")).encode()
        self.drv.open(sid)
        self.drv.send(sid, request_headers(envoy_headers(len(body))))
        self.drv.send(sid, request_body(body, True))
        wait_until(lambda: self.enqueued() == e0 + 1, 10, "the request to be queued")
        self.assertEqual(self.drv.responses(sid), [], "no answer while queued")
        self.assertNotIn(sid, self.drv.status, "the stream is held open")
        self.drv.cancel(sid)
        wait_until(lambda: metric(metrics(self.gw), "switchboard_queue_removed_total", pool="p", band="standard")
                   == r0 + 1, 10, "the cancelled stream to leave the queue")
        # A critical request queued then released once capacity frees: answered with a pick.
        sid2 = self.next_id("crit")
        body = json.dumps(chat("critical, queued")).encode()
        self.drv.open(sid2, deadline_ms=90000)
        self.drv.send(sid2, request_headers(envoy_headers(len(body), extra=[("x-priority", "critical")])))
        self.drv.send(sid2, request_body(body, True))
        msgs = self.drv.wait_until(sid2, request_done, 90, "the queued critical request's pick")
        p2 = Picked(msgs)
        self.assertIsNone(p2.immediate, msgs)
        self.assertTrue(p2.endpoints)
        self.drv.cancel(sid2)
        for t in self.threads:
            t.join()
        self.assertEqual(set(self.results), {200})


class WaitAndSilenceTest(SharedGatewayCase):
    """A stream's end while its decision waits for a synchronous probe (a slow /metrics makes the
    wait last), a response phase that starts before the pick, a pick followed by silence, and a
    pool's upstream key. One gateway, slow scrapes: waits are for counters and statuses."""

    @classmethod
    def setUpClass(cls):
        cls.why = skip_reason()
        if cls.why:
            return
        cls.sim = Sim("--speed", "50", "--metrics-delay-ms", "2600", replicas=2)
        cls.ext_port = free_port()
        eps = ["127.0.0.1:%d" % p for p in cls.sim.ports]
        cls.eps = eps
        rare = "interval_ms: 60000, min_interval_ms: 60000, max_interval_ms: 60000, health_interval_ms: 0"
        cls.gw = Gateway(
            [{"name": "p", "models": [MODEL], "profile": "least-request", "endpoints": eps,
              "yaml": ["probe: { %s, timeout_ms: 5000, sync_max_age_ms: 1, sync_timeout_ms: 5000 }" % rare]},
             {"name": "k", "models": ["keyed-model"], "profile": "least-request", "endpoints": eps,
              "yaml": ["upstream_api_key: sk-upstream-key-1"]}],
            extra='ext_proc: { listen: "127.0.0.1:%d" }\ntimeouts: { response_ms: 2500 }' % cls.ext_port)
        wait_until(lambda: _can_connect(cls.ext_port), 15, "the ext_proc listener")
        cls.drv = Driver(cls.ext_port)


    def waits(self):
        return metric(metrics(self.gw), "switchboard_sync_probe_waits_total")

    def start_waiting(self, text):
        """A request whose decision waits for a scrape (2.6 s away)."""
        before = self.waits()
        body = json.dumps(chat(text)).encode()
        sid = self.next_id("w")
        self.drv.open(sid)
        self.opened.append(sid)
        self.drv.send(sid, request_headers(envoy_headers(len(body))))
        self.drv.send(sid, request_body(body, True))
        wait_until(lambda: self.waits() > before, 10, "the decision to wait for a scrape")
        return sid

    def scrapes_done(self):
        text = metrics(self.gw)
        return metric(text, "switchboard_probe_scrapes_total") + metric(text, "switchboard_probe_errors_total")

    def test_stream_closed_while_the_decision_waits(self):
        scraped = self.scrapes_done()
        sid = self.start_waiting("closed while waiting")
        self.drv.end(sid)  # Envoy half-closes: the client went away
        self.assertEqual(self.drv.wait_status(sid)["code"], 0)
        # The scrape the wait asked for ends later: the ended stream must not be decided then
        # (it was: a crash on the freed stream).
        wait_until(lambda: self.scrapes_done() > scraped, 15, "the scrape the wait asked for")
        text = metrics(self.gw)
        self.assertEqual(metric(text, "switchboard_extproc_streams_open"), 0)
        self.assertEqual(metric(text, "switchboard_endpoint_in_flight"), 0)
        sid, p = self.request_phase(chat("still serving"))  # the gateway lives and decides
        self.assertIn(p.endpoints[0], self.eps)

    def test_response_timeout_counts_from_the_pick(self):
        # The decision waited 2.6 s for a scrape, longer than timeouts.response_ms (2.5 s): the
        # silence that counts begins at the pick, not at the request (it did, and the stream was
        # ended at the first deadline check after its pick).
        sid = self.start_waiting("waited, then answered")
        msgs = self.drv.wait_until(sid, request_done, 15, "the pick after the wait")
        p = Picked(msgs)
        self.assertIsNone(p.immediate, msgs)
        # Two deadline checks (every 250 ms) pass, as Envoy connects and sends upstream.
        time.sleep(0.6)
        self.assertNotIn(sid, self.drv.status, "the stream lives on after its pick")
        st, h, rbody = self.proxy_to(p.endpoints[0], p.body)
        self.assertEqual(self.response_phase(sid, st, h, rbody)["code"], 0)

    def test_response_phase_before_the_pick_is_out_of_order(self):
        sid = self.start_waiting("early response")
        self.drv.send(sid, response_headers([(":status", "200")]))
        st = self.drv.wait_status(sid)
        self.assertEqual(st["code"], 3, st)  # INVALID_ARGUMENT
        self.assertFalse(any(kind(r) == "request_headers" for r in self.drv.responses(sid)))

    def test_upstream_key_replaces_authorization_then_silence_times_out(self):
        sid, p = self.request_phase(chat("keyed", model="keyed-model"),
                                    extra_headers=[("authorization", "Bearer client-key")])
        self.assertIsNone(p.immediate, p.responses)
        # The pool's key replaces the client's, as the proxy sends it; the gateway's request id
        # goes along.
        self.assertEqual(p.headers.get("authorization"), "Bearer sk-upstream-key-1")
        self.assertRegex(p.headers.get("x-request-id", ""), r"^[0-9a-zA-Z-]+$")
        errors = metric(metrics(self.gw), "switchboard_upstream_errors_total")
        # Then nothing: after timeouts.response_ms the stream ends and its accounting with it.
        st = self.drv.wait_status(sid, timeout=15)
        self.assertEqual(st["code"], 4, st)  # DEADLINE_EXCEEDED
        text = metrics(self.gw)
        self.assertEqual(metric(text, "switchboard_upstream_errors_total"), errors + 1)
        self.assertEqual(metric(text, "switchboard_endpoint_in_flight"), 0)


class PickerOnlyTest(PickerCase):
    """`listen: null`: no HTTP proxy listener, the picker alone (what a picker pod beside Envoy
    runs); it decides, reloads and drains like a gateway with both."""

    def setUp(self):
        super().setUp()
        require_client(self)
        self.sim = Sim("--speed", "50", replicas=2)
        self.ext_port = free_port()
        self.admin_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sb-it-po-")
        self.cfg = os.path.join(self.dir, "picker.yaml")
        self.eps = ["127.0.0.1:%d" % p for p in self.sim.ports]
        self.write_config("round-robin")
        self.log_path = os.path.join(self.dir, "gateway.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([GATEWAY_BIN, "serve", "-c", self.cfg], stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: _can_connect(self.ext_port) and _can_connect(self.admin_port), 15, "the listeners")
        self.drv = Driver(self.ext_port)

    def write_config(self, profile):
        with open(self.cfg, "w") as f:
            f.write('listen: null\nadmin: { listen: "127.0.0.1:%d" }\next_proc: { listen: "127.0.0.1:%d" }\n'
                    'shutdown: { drain_ms: 5000 }\npools:\n  - name: p\n    models: ["%s"]\n    profile: %s\n'
                    '    endpoints: %s\n' % (self.admin_port, self.ext_port, MODEL, profile, json.dumps(self.eps)))

    def tearDown(self):
        try:
            self.cancel_open()
            self.drv.close()
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(10)
            self.log.close()
        finally:
            self.sim.stop()

    def test_picker_alone(self):
        sid, p = self.request_phase(chat("picker only"))
        self.assertIn(p.endpoints[0], self.eps)
        st, h, rbody = self.proxy_to(p.endpoints[0], p.body)
        self.assertEqual(self.response_phase(sid, st, h, rbody)["code"], 0)
        text = http(self.admin_port, "GET", "/metrics")[2].decode()
        self.assertNotIn('switchboard_open_connections{listener="client"}', text, "no client listener")
        self.assertEqual(metric(text, "switchboard_extproc_picks_total"), 1)
        # A reload keeps the picker (and still no client listener); the new profile decides.
        self.write_config("least-request")
        self.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded" in open(self.log_path).read(), 10, "the reload")
        sid, p = self.request_phase(chat("after the reload"))
        self.assertIn(p.endpoints[0], self.eps)
        self.drv.cancel(sid)
        # SIGTERM drains and exits 0 with only the picker's connections to wait for.
        self.proc.send_signal(signal.SIGTERM)
        self.drv.close()
        self.proc.wait(15)
        self.assertEqual(self.proc.returncode, 0, open(self.log_path).read())
        out = open(self.log_path).read()
        self.assertNotIn("ERROR: AddressSanitizer", out)
        self.assertNotIn("runtime error:", out)
        self.assertIn("HTTP proxy listener off", out)


def _can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


if __name__ == "__main__":
    unittest.main()
