"""The endpoint picker through a second gRPC implementation (Python grpcio: gRPC's C core), so
framing mistakes the node client might share with the server show up: one whole request with
its response phase, over h2c and over TLS (ALPN h2), the health service, and a 404."""
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import unittest

import extproc_grpcio as eg
from extproc_driver import DESTINATION
from fixtures import Gateway, free_port, http, wait_until
from test_extproc import ALIAS, REQUIRED, _can_connect, chat
from test_sim import MODEL, Sim


def skip_reason():
    why = eg.missing()
    if why:
        sys.stderr.write("\n*** %s the grpcio ext_proc tests: %s ***\n" % ("FAILING" if REQUIRED else "SKIPPING", why))
    return why


class Stream:
    """A Process call fed from a queue, so the test sends each message when Envoy would."""

    def __init__(self, channel):
        T = eg.types()
        self.T = T
        self.q = queue.Queue()
        call = channel.stream_stream(eg.PROCESS, request_serializer=T["ProcessingRequest"].SerializeToString,
                                     response_deserializer=T["ProcessingResponse"].FromString)
        self.call = call(iter(self.q.get, None), timeout=30)

    def send(self, **fields):
        self.q.put(self.T["ProcessingRequest"](**fields))

    def end(self):
        self.q.put(None)

    def next(self):
        return next(self.call)


def headers(pairs, eos=False):
    return {"headers": {"headers": [{"key": k, "raw_value": v.encode()} for k, v in pairs]}, "end_of_stream": eos}


class GrpcioTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.why = skip_reason()
        if cls.why:
            return
        import grpc
        cls.grpc = grpc
        cls.sim = Sim("--speed", "50", replicas=2)
        cls.dir = tempfile.mkdtemp(prefix="sb-grpcio-")
        cls.cert, cls.key = os.path.join(cls.dir, "cert.pem"), os.path.join(cls.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", cls.key, "-out", cls.cert], check=True, capture_output=True)
        cls.h2c_port, cls.tls_port = free_port(), free_port()
        eps = ["127.0.0.1:%d" % p for p in cls.sim.ports]
        cls.eps = eps
        pools = [{"name": "p", "models": [MODEL, ALIAS], "profile": "default", "endpoints": eps}]
        cls.gw = Gateway(pools, extra='ext_proc: { listen: "127.0.0.1:%d", fallbacks: 1 }' % cls.h2c_port)
        cls.gw_tls = Gateway(pools, extra='ext_proc: { listen: "127.0.0.1:%d", tls_cert: "%s", tls_key: "%s" }'
                             % (cls.tls_port, cls.cert, cls.key))
        for port in (cls.h2c_port, cls.tls_port):
            wait_until(lambda: _can_connect(port), 15, "the ext_proc listener")
        cls.h2c = grpc.insecure_channel("127.0.0.1:%d" % cls.h2c_port)
        with open(cls.cert, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        cls.tls = grpc.secure_channel("127.0.0.1:%d" % cls.tls_port, creds,
                                      options=[("grpc.ssl_target_name_override", "localhost")])

    def setUp(self):
        if self.why:
            if REQUIRED:
                self.fail("the grpcio ext_proc client cannot run: " + self.why)
            self.skipTest(self.why)

    @classmethod
    def tearDownClass(cls):
        try:
            for ch in ("h2c", "tls"):
                if getattr(cls, ch, None):
                    getattr(cls, ch).close()
            for g in ("gw", "gw_tls"):
                if getattr(cls, g, None):
                    getattr(cls, g).close()
        finally:
            if getattr(cls, "sim", None):
                cls.sim.stop()
            shutil.rmtree(getattr(cls, "dir", "/nonexistent"), ignore_errors=True)

    def whole_request(self, channel, fallbacks):
        req = chat("grpcio", model=ALIAS, pad=700)
        body = json.dumps(req).encode()
        s = Stream(channel)
        s.send(request_headers=headers([(":method", "POST"), (":path", "/v1/chat/completions"),
                                        (":authority", "gw"), ("content-type", "application/json"),
                                        ("content-length", str(len(body)))]))
        half = len(body) // 2
        s.send(request_body={"body": body[:half], "end_of_stream": False})
        s.send(request_body={"body": body[half:], "end_of_stream": True})
        first = s.next()
        self.assertEqual(first.WhichOneof("response"), "request_headers")
        common = first.request_headers.response
        self.assertTrue(common.clear_route_cache)
        hv = {o.header.key: (o.header.raw_value or o.header.value.encode()).decode() for o in common.header_mutation.set_headers}
        dest = hv[DESTINATION]
        self.assertEqual(len(dest.split(",")), min(1 + fallbacks, len(self.eps)), dest)
        self.assertTrue(set(dest.split(",")) <= set(self.eps))
        lb = first.dynamic_metadata.fields["envoy.lb"].struct_value.fields
        self.assertEqual(lb[DESTINATION].string_value, dest)
        sent = b""
        while True:
            r = s.next()
            self.assertEqual(r.WhichOneof("response"), "request_body")
            sr = r.request_body.response.body_mutation.streamed_response
            sent += sr.body
            if sr.end_of_stream:
                break
        self.assertEqual(json.loads(sent)["model"], MODEL, "alias rewritten")
        self.assertEqual(hv["content-length"], str(len(sent)))
        # Envoy's router: to the pick, then the answer back through the picker.
        host, port = dest.split(",")[0].rsplit(":", 1)
        st, h, rbody = http(int(port), "POST", "/v1/chat/completions", sent, timeout=60)
        self.assertEqual(st, 200)
        s.send(response_headers=headers([(":status", "200"), ("content-type", h["content-type"])]))
        self.assertEqual(s.next().WhichOneof("response"), "response_headers")
        s.send(response_body={"body": rbody, "end_of_stream": True})
        r = s.next()
        self.assertEqual(r.response_body.response.body_mutation.streamed_response.body, rbody)
        s.end()
        with self.assertRaises(StopIteration):
            s.next()
        self.assertEqual(s.call.code(), self.grpc.StatusCode.OK)
        return json.loads(rbody)["usage"]

    def test_whole_request_h2c(self):
        usage = self.whole_request(self.h2c, fallbacks=1)
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn('switchboard_completion_tokens_total{pool="p",model="%s"} %d' % (MODEL, usage["completion_tokens"]),
                      text)

    def test_whole_request_tls(self):
        self.whole_request(self.tls, fallbacks=0)  # the default

    def test_health(self):
        T = eg.types()
        for ch in (self.h2c, self.tls):
            check = ch.unary_unary(eg.CHECK, request_serializer=T["HealthCheckRequest"].SerializeToString,
                                   response_deserializer=T["HealthCheckResponse"].FromString)
            r = check(T["HealthCheckRequest"](service=""), timeout=10)
            self.assertEqual(r.status, 1)  # SERVING
            with self.assertRaises(self.grpc.RpcError) as e:
                check(T["HealthCheckRequest"](service="nope"), timeout=10)
            self.assertEqual(e.exception.code(), self.grpc.StatusCode.NOT_FOUND)

    def test_unknown_model_404(self):
        body = json.dumps(chat("x", model="no-such-model")).encode()
        s = Stream(self.h2c)
        s.send(request_headers=headers([(":method", "POST"), (":path", "/v1/chat/completions"),
                                        ("content-length", str(len(body)))]))
        s.send(request_body={"body": body, "end_of_stream": True})
        r = s.next()
        self.assertEqual(r.WhichOneof("response"), "immediate_response")
        self.assertEqual(r.immediate_response.status.code, 404)
        self.assertEqual(set(json.loads(r.immediate_response.body)["error"]),
                         {"message", "type", "param", "code"})
        s.end()
        for _ in s.call:
            pass
        self.assertEqual(s.call.code(), self.grpc.StatusCode.OK)


if __name__ == "__main__":
    unittest.main()
