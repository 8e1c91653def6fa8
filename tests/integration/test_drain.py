"""Graceful drain: SIGTERM closes the listener, /healthz says 503 draining, idle keep-alive
connections close at once, requests and streams in flight finish (up to shutdown.drain_ms),
what is still running at the deadline is cut, queued requests are refused 503 draining, and the
process exits 0. A second SIGTERM, SIGINT or SIGQUIT exits at once. The simulator drains the same
way (its generations in flight finish)."""
import json
import os
import signal
import socket
import subprocess
import unittest

from fixtures import Gateway, Upstream, chat_body, http, read_head, read_response, read_until_eof, send_request, wait_until
from test_access_log import SATURATED, LoggedGateway
from test_sim import MODEL, Sim


def connect_refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except (ConnectionRefusedError, ConnectionResetError):
        # A reset: the connect landed in the backlog as the listening socket closed.
        return True


class GatewayDrainTest(LoggedGateway):
    def start(self, drain_ms, extra="", pool_yaml=None):
        super().start([self.up.address], "shutdown: { drain_ms: %d }\n%s" % (drain_ms, extra), pool_yaml)

    def exited(self, timeout):
        try:
            return self.gw.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("the gateway did not exit: " + open(self.gw.log_path).read())

    def begin_stream(self, events, delay_ms, mode="sse", rid="s-1"):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m", stream=True),
                     {"x-fixture-mode": mode, "x-fixture-events": str(events), "x-fixture-delay-ms": str(delay_ms),
                      "x-request-id": rid})
        line, headers, rest = read_head(s)
        self.assertIn(" 200 ", line)
        return s, headers, rest

    def test_sigterm_lets_a_stream_finish_and_exits_0(self):
        self.start(30000)
        # An idle keep-alive connection: one answer read, nothing in progress.
        idle = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(idle, "GET", "/healthz")
        self.assertEqual(read_response(idle)[0], 200)
        # A 300-event stream, about 3 s long.
        s, headers, rest = self.begin_stream(300, 10)
        self.gw.proc.send_signal(signal.SIGTERM)
        # The idle connection is closed at once (EOF long before the stream ends).
        idle.settimeout(5)
        self.assertEqual(read_until_eof(idle), b"")
        idle.close()
        # New connections are refused; the admin listener says draining.
        wait_until(lambda: connect_refused(self.gw.port), 5, "the listener to close")
        st, _, body = http(self.gw.admin_port, "GET", "/healthz")
        self.assertEqual((st, json.loads(body)), (503, {"status": "draining"}))
        text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
        self.assertIn("switchboard_draining 1", text)
        self.assertIsNone(self.gw.proc.poll(), "exited with a stream in flight")
        # The stream finishes whole: [DONE] and the chunked terminator.
        data = rest + read_until_eof(s)
        s.close()
        self.assertIn(b"data: [DONE]", data)
        self.assertTrue(data.endswith(b"0\r\n\r\n"), data[-40:])
        self.assertEqual(data.count(b'"upstream": "u"'), 300)
        self.assertEqual(self.exited(10), 0)
        line = [l for l in self.lines() if l["request_id"] == "s-1"][0]
        self.assertEqual((line["outcome"], line["status"]), ("ok", 200))

    def test_busy_connection_gets_connection_close_on_its_next_answer(self):
        self.start(30000)
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"), {"x-fixture-head-delay-ms": "1500"})
        wait_until(lambda: len(self.up.requests) == 1, 10, "the request to reach the upstream")
        self.gw.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: connect_refused(self.gw.port), 5, "the listener to close")
        st, headers, _ = read_response(s)
        self.assertEqual((st, headers.get("connection")), (200, "close"))
        self.assertEqual(read_until_eof(s), b"")
        s.close()
        self.assertEqual(self.exited(10), 0)

    def test_second_sigterm_exits_at_once(self):
        self.start(30000)
        s, _, _ = self.begin_stream(0, 0, mode="hang")
        self.gw.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: connect_refused(self.gw.port), 5, "the listener to close")
        self.assertIsNone(self.gw.proc.poll())
        self.gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.exited(5), 0)
        s.close()

    def test_sigquit_during_drain_exits_at_once(self):
        self.start(30000)
        s, _, _ = self.begin_stream(0, 0, mode="hang")
        self.gw.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: connect_refused(self.gw.port), 5, "the listener to close")
        self.gw.proc.send_signal(signal.SIGQUIT)
        self.assertEqual(self.exited(5), 0)
        s.close()

    def test_stream_longer_than_drain_ms_is_cut_and_the_process_exits_0(self):
        self.start(300)
        s, _, rest = self.begin_stream(0, 0, mode="hang", rid="long-1")
        self.gw.proc.send_signal(signal.SIGTERM)
        data = rest + read_until_eof(s)  # the gateway cuts it: EOF without the terminator
        s.close()
        self.assertNotIn(b"0\r\n\r\n", data)
        self.assertEqual(self.exited(10), 0)
        line = [l for l in self.lines() if l["request_id"] == "long-1"][0]
        self.assertEqual((line["outcome"], line["reason"], line["status"]), ("drain_cut", "drain_deadline", 200))
        wait_until(lambda: self.up.closed_by_peer == 1, 5, "the upstream connection to close")

    def test_a_retired_gateways_stream_cut_at_the_deadline_logs_drain_cut(self):
        """A stream that began before a registration replaced the gateway runs on the old one
        to its end; cut by the drain's deadline, it is still a drain_cut, not a client_abort."""
        other = Upstream("v")
        token = "drain-token"

        def files(d):
            self.access_log = os.path.join(d, "access.log")
            return {"access_log": self.access_log}
        self.gw = Gateway([{"name": "p", "models": ["m"], "endpoints": [self.up.address]}],
                          extra="access_log: {access_log}\nshutdown: { drain_ms: 300 }\n", admin="token: " + token,
                          pre_start=files)
        try:
            s, _, rest = self.begin_stream(0, 0, mode="hang", rid="old-1")
            st, _, body = http(self.gw.admin_port, "POST", "/admin/endpoints", {"address": other.address, "pool": "p"},
                               {"Authorization": "Bearer " + token})
            self.assertEqual(st, 201, body)
            wait_until(lambda: "switchboard_config_reloads_total 1" in
                       http(self.gw.admin_port, "GET", "/metrics")[2].decode(), 10, "the gateway replaced")
            self.gw.proc.send_signal(signal.SIGTERM)
            read_until_eof(s)
            s.close()
            self.assertEqual(self.exited(10), 0)
            line = [l for l in self.lines() if l["request_id"] == "old-1"][0]
            self.assertEqual((line["outcome"], line["reason"]), ("drain_cut", "drain_deadline"))
        finally:
            other.close()

    def test_queued_request_refused_503_draining_at_the_deadline(self):
        self.up.metrics_text = SATURATED
        self.start(500, extra="flow_control:\n  max_wait_ms: { standard: 60000 }\n",
                   pool_yaml=["probe: { interval_ms: 50, min_interval_ms: 20, max_interval_ms: 100 }"])
        wait_until(lambda: self.up.probes >= 2, 10, "the saturated reports")

        def queued():
            text = http(self.gw.admin_port, "GET", "/metrics")[2].decode()
            return 'switchboard_queue_length{pool="p",band="standard"} 1' in text
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"), {"x-request-id": "q-1"})
        wait_until(queued, 10, "the request to be queued")
        self.gw.proc.send_signal(signal.SIGTERM)
        st, headers, body = read_response(s)
        s.close()
        self.assertEqual((st, headers["x-switchboard-refusal"], headers["connection"]), (503, "draining", "close"))
        self.assertEqual(json.loads(body)["error"]["code"], "draining")
        self.assertEqual(self.exited(10), 0)
        line = [l for l in self.lines() if l["request_id"] == "q-1"][0]
        self.assertEqual((line["outcome"], line["reason"], line["status"]), ("refused", "draining", 503))
        self.assertEqual(len(self.up.requests), 0)

    def test_request_without_an_answer_at_the_deadline_gets_503_draining(self):
        """A request still waiting for its answer's head when the window ends gets a clear 503
        (not a closed connection) and logs drain_cut."""
        self.start(300)
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        send_request(s, "POST", "/v1/chat/completions", chat_body("m"),
                     {"x-request-id": "w-1", "x-fixture-head-delay-ms": "20000"})
        wait_until(lambda: len(self.up.requests) == 1, 10, "the request upstream")
        self.gw.proc.send_signal(signal.SIGTERM)
        st, headers, body = read_response(s)
        s.close()
        self.assertEqual((st, headers["connection"]), (503, "close"))
        self.assertEqual(json.loads(body)["error"]["code"], "draining")
        self.assertEqual(self.exited(10), 0)
        line = [l for l in self.lines() if l["request_id"] == "w-1"][0]
        self.assertEqual((line["outcome"], line["reason"], line["status"]),
                         ("drain_cut", "drain_deadline_before_response", 503))

    def test_idle_gateway_exits_at_once(self):
        self.start(30000)
        self.gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.exited(5), 0)


class SimDrainTest(unittest.TestCase):
    def test_sigterm_lets_generations_finish(self):
        sim = Sim("--speed", "0.05", replicas=1)
        try:
            s = socket.create_connection(("127.0.0.1", sim.ports[0]), timeout=30)
            send_request(s, "POST", "/v1/chat/completions",
                         {"model": MODEL, "max_tokens": 40, "stream": True,
                          "messages": [{"role": "user", "content": "drain me"}]})
            line, _, rest = read_head(s)
            self.assertIn(" 200 ", line)
            sim.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: connect_refused(sim.ports[0]), 5, "the sim's listener to close")
            data = rest + read_until_eof(s)
            s.close()
            self.assertIn(b"data: [DONE]", data)
            self.assertEqual(sim.proc.wait(10), 0)
        finally:
            sim.stop()


if __name__ == "__main__":
    unittest.main()
