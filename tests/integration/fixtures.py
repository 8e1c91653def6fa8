"""Fixtures for integration tests: a scriptable upstream HTTP server, a gateway process
launcher, and small raw-HTTP client helpers.

The upstream is written on raw sockets (not http.server) so tests control framing exactly:
Content-Length, chunked, close-delimited, dying mid-stream, hanging. Each request's
behaviour is chosen by headers the test sends through the gateway (forwarded untouched):
  x-fixture-mode: json | sse | close | die | hang | silent | status
  x-fixture-events: N       (sse/die: number of events)
  x-fixture-delay-ms: D     (sse/die: delay between events)
  x-fixture-status: S       (status mode)
  x-fixture-head-delay-ms: D (any mode: wait D ms before the response head)
The fixture records what it saw (connections, requests, closes) for assertions.
"""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GATEWAY_BIN = os.environ.get("SB_BIN", os.path.join(ROOT, "build", "san", "switchboard"))


_handed = []  # the ports free_port gave lately, not given again while they are this recent


def free_port():
    """A port nothing listens on now. The kernel may hand a just-closed ephemeral port out again
    at once, so two calls in a row could return the same one (a gateway's listen and admin
    ports once did): a port given in the last 64 calls is not given again."""
    for _ in range(100):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _handed:
            break
    _handed.append(port)
    del _handed[:-64]
    return port


def free_run(n):
    """A base port with n consecutive free ports after it (a simulated fleet's replicas, its
    KV-event publishers)."""
    for _ in range(50):
        base = free_port()
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of %d free ports" % n)


def wait_until(pred, timeout=10.0, what="condition"):
    """Polls pred() until true. Waits for an event, not for time: the deadline only bounds
    a broken run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def read_head(sock, buf=b""):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before head")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, rest


class Upstream:
    """A scriptable HTTP/1.1 upstream on 127.0.0.1."""

    def __init__(self, name="up", port=None):
        self.name = name
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port or 0))
        self.port = self.sock.getsockname()[1]
        self.sock.listen(128)
        self.lock = threading.Lock()
        self.connections = 0        # connections that carried proxied (non-probe) requests
        self.requests = []          # (method, path, headers, body)
        self.probe_auth = []        # the Authorization of the last probes (None: absent)
        self.closed_by_peer = 0     # connections the gateway closed while we were answering
        self.probes = 0             # GET /metrics, /health answered
        self.metrics_text = ""      # what GET /metrics answers (Prometheus text)
        self.models_json = None     # what GET /v1/models answers (JSON), or None: 404
        self.health_status = 200
        self.running = True
        # lockstep mode: before each SSE event after the first, the fixture waits for the
        # test to release the gate (proves events are forwarded one by one).
        self.gate = threading.Semaphore(0)
        self.finished_streams = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def close(self):
        self.running = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while self.running:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    PROBE_PATHS = ("/metrics", "/health", "/slots", "/v1/models")

    def _serve(self, c):
        buf = b""
        counted = False
        try:
            while True:
                try:
                    line, headers, rest = read_head(c, buf)
                except ConnectionError:
                    return
                n = int(headers.get("content-length", "0"))
                while len(rest) < n:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                body, buf = rest[:n], rest[n:]
                method, path, _ = line.split(" ", 2)
                if method == "GET" and path in self.PROBE_PATHS:
                    # The gateway's probes: answered, never counted as proxied traffic.
                    with self.lock:
                        self.probes += 1
                        self.probe_auth = (self.probe_auth + [headers.get("authorization")])[-16:]
                    if not self._answer_probe(c, path):
                        return
                    continue
                with self.lock:
                    self.requests.append((method, path, headers, body))
                    if not counted:
                        counted = True
                        self.connections += 1
                if not self._answer(c, headers, body):
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            c.close()

    def _answer_probe(self, c, path):
        if path == "/health":
            st, out = self.health_status, b""
        elif path == "/v1/models":  # the prober's served-name check: none unless a test sets one
            st, out = (404, b"") if self.models_json is None else (200, self.models_json.encode())
        else:
            st, out = 200, self.metrics_text.encode()
        c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (st, len(out), out))
        return True

    def _answer(self, c, headers, body):
        mode = headers.get("x-fixture-mode", "json")
        if headers.get("x-fixture-head-delay-ms"):  # think before answering at all
            time.sleep(int(headers["x-fixture-head-delay-ms"]) / 1000.0)
        events = int(headers.get("x-fixture-events", "3"))
        delay = int(headers.get("x-fixture-delay-ms", "0")) / 1000.0
        try:
            model = json.loads(body).get("model") if body else None
        except ValueError:
            model = None
        if mode == "json":
            out = json.dumps({"upstream": self.name, "port": self.port, "model": model,
                              "body_len": len(body), "orca": headers.get("endpoint-load-metrics-format")}).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(out), out))
            return True
        if mode == "status":
            st = int(headers.get("x-fixture-status", "500"))
            out = b'{"error":"fixture"}'
            c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (st, len(out), out))
            return True
        if mode == "close":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
            c.sendall(b"close-delimited body from " + self.name.encode())
            return False
        if mode in ("sse", "die"):
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            lockstep = headers.get("x-fixture-lockstep") == "1"
            for i in range(events):
                if lockstep and i > 0 and not self.gate.acquire(timeout=10):
                    return False
                ev = b'data: {"i": %d, "upstream": "%s"}\n\n' % (i, self.name.encode())
                c.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
                if delay:
                    time.sleep(delay)
            if mode == "die":
                c.shutdown(socket.SHUT_RDWR)
                return False
            if lockstep and not self.gate.acquire(timeout=10):
                return False
            ev = b"data: [DONE]\n\n"
            c.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev))
            with self.lock:
                self.finished_streams += 1
            return True
        if mode == "script":
            # self.script = (head bytes, [body pieces]): each piece its own write, framed by the
            # test (chunked or not), so a test decides where the network cuts the answer.
            head, pieces = self.script
            c.sendall(head)
            for p in pieces:
                c.sendall(p)
                time.sleep(0.005)
            return True
        if mode == "silent":
            # Reads the request and never answers, until the gateway gives up and closes.
            c.settimeout(30)
            try:
                while c.recv(1):
                    pass
            except (OSError, socket.timeout):
                pass
            with self.lock:
                self.closed_by_peer += 1
            return False
        if mode == "hang":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            ev = b"data: {\"started\": true}\n\n"
            c.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
            c.settimeout(30)
            try:
                while True:  # generate until the gateway closes us
                    if not c.recv(1):
                        break
            except (OSError, socket.timeout):
                pass
            with self.lock:
                self.closed_by_peer += 1
            return False
        return False


class Gateway:
    """Runs the built switchboard with a generated config; stops it on close()."""

    def __init__(self, pools, extra="", bin_path=None, admin="", pre_start=None):
        """`admin`: more entries of the admin mapping ("token: x, metrics_auth: true"); the
        admin listener always gets a free port of its own (admin_port). `pre_start(dir)` runs
        before the config is written (to put files beside it); it may return {name: value}
        to fill "{name}" in `extra`."""
        self.port = free_port()
        self.admin_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sb-it-")
        for k, v in ((pre_start and pre_start(self.dir)) or {}).items():
            extra = extra.replace("{%s}" % k, v)
        self.config_path = os.path.join(self.dir, "switchboard.yaml")
        admin_line = 'admin: { listen: "127.0.0.1:%d"%s }' % (self.admin_port, ", " + admin if admin else "")
        lines = ['listen: "127.0.0.1:%d"' % self.port, admin_line, extra, "pools:"]
        for p in pools:
            lines.append("  - name: %s" % p["name"])
            lines.append("    models: %s" % json.dumps(p["models"]))
            if p.get("adapters"):
                lines.append("    adapters: %s" % json.dumps(p["adapters"]))
            if p.get("profile", "round-robin") is not None:  # None: the pool's own default
                lines.append("    profile: %s" % p.get("profile", "round-robin"))
            lines.append("    endpoints: %s" % json.dumps(p["endpoints"]))
            for extra_line in p.get("yaml", []):  # raw pool-level YAML, e.g. "probe: { ... }"
                lines.append("    " + extra_line)
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.log_path = os.path.join(self.dir, "gateway.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.proc = subprocess.Popen([bin_path or GATEWAY_BIN, "serve", "-c", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self._probed = 0
        wait_until(self._listening, 15, "gateway to listen")
        wait_until(self._probes_gone, 15, "the readiness probes' connections to be closed")

    def _listening(self):
        if self.proc.poll() is not None:
            raise AssertionError("gateway exited: " + open(self.log_path).read())
        try:
            # Both listeners: a test may talk to the admin port first.
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            self._probed += 1
            socket.create_connection(("127.0.0.1", self.admin_port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def _probes_gone(self):
        """With several workers a probe connection may still wait in another worker's accept
        queue, and take a place under a test's connection limit later: wait until every probe
        was accepted and closed. (One loop: accepted in order, nothing to wait for.)"""
        try:
            st, _, body = http(self.admin_port, "GET", "/metrics")
        except OSError:
            return False
        if st != 200:
            return True  # behind the admin token (metrics_auth): not ours to read
        text = body.decode()
        accepted = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                    if l.startswith("switchboard_worker_connections_accepted_total{")]
        if not accepted:
            return True
        open_now = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                    if l.startswith('switchboard_open_connections{listener="client"}')]
        return sum(accepted) >= self._probed and open_now == [0.0]

    def close(self):
        """Stops the gateway; returns its log. Fails if it crashed or ASan complained. SIGINT
        stops at once (SIGTERM would drain: test_drain.py)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("gateway did not stop on SIGINT")
        self.log.close()
        out = open(self.log_path).read()
        if ("ERROR: AddressSanitizer" in out or "runtime error:" in out or "LeakSanitizer" in out
                or "ThreadSanitizer" in out):
            raise AssertionError("sanitizer report:\n" + out)
        if self.proc.returncode not in (0, -signal.SIGTERM):
            raise AssertionError("gateway exit code %s:\n%s" % (self.proc.returncode, out))
        return out


def http(port, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection; returns (status, headers, body bytes). De-chunks."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        send_request(s, method, path, body, headers)
        return read_response(s)
    finally:
        s.close()


def scrape_metric(port, name):
    """The first sample of a metric family from the admin listener at port (any labels), as an
    int; None when absent."""
    st, _, body = http(port, "GET", "/metrics")
    m = re.search(r"^%s(?:\{[^}]*\})? (\d+)$" % re.escape(name), body.decode(), re.M)
    return int(m.group(1)) if m else None


def send_request(s, method, path, body=None, headers=None, version="1.1"):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    body = body or b""
    h = {"Host": "localhost", "Content-Length": str(len(body))}
    if body:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    req = "%s %s HTTP/%s\r\n" % (method, path, version) + "".join("%s: %s\r\n" % kv for kv in h.items() if kv[1] is not None) + "\r\n"
    s.sendall(req.encode() + body)


def read_response(s, buf=b"", leftover=None):
    """Reads one response from s; returns (status, headers, body). Bytes read past the
    response (a pipelined next response) are appended to the `leftover` list if given."""
    line, headers, rest = read_head(s, buf)
    status = int(line.split(" ")[1])
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("short body")
            rest += chunk
        if leftover is not None:
            leftover.append(rest[n:])
        return status, headers, rest[:n]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("chunked body cut")
                rest += chunk
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("chunk cut")
                rest += chunk
            if size == 0:
                if leftover is not None:
                    leftover.append(rest[2:])
                return status, headers, body
            body += rest[:size]
            rest = rest[size + 2:]
    body = rest
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return status, headers, body
        body += chunk


class StatusCounter:
    """Counts HTTP/1.1 status lines in a byte stream fed piece by piece, looking at new bytes
    only (counting over everything read so far each time is quadratic). `answers` and
    `statuses` (the set of status codes seen, as bytes); `tail` for messages."""

    def __init__(self):
        self.answers, self.statuses, self.tail = 0, set(), b""

    def feed(self, data):
        buf = self.tail + data
        found = list(re.finditer(rb"HTTP/1\.1 (\d{3}) ", buf))
        self.answers += len(found)
        self.statuses.update(m.group(1) for m in found)
        # A status line cut by this piece is at most 12 bytes: keep 13, never bytes of a line
        # already counted.
        self.tail = buf[max(found[-1].end() if found else 0, len(buf) - 13):]


def read_until_eof(s):
    """Everything s still delivers until the peer closes (a reset counts as the close)."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def chat_body(model="m1", text="hello", stream=False, extra=None):
    b = {"model": model, "messages": [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": text}], "stream": stream}
    b.update(extra or {})
    return b


def run_replay(*args, check=True, timeout=120):
    """Runs `switchboard replay` (the ASan build); fails on a non-zero exit (with check) or any
    sanitizer report. Returns the CompletedProcess."""
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    p = subprocess.run([GATEWAY_BIN, "replay"] + [str(a) for a in args], capture_output=True, text=True,
                       env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("replay failed (%d): %s" % (p.returncode, p.stderr))
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
        if bad in p.stderr:
            raise AssertionError("sanitizer report:\n" + p.stderr)
    return p
