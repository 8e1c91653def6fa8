"""Python side of the Envoy-playing ext_proc client (tests/extproc/envoy.js): starts the node
driver, sends it commands, collects its events per stream, and builds ProcessingRequest
messages in the JSON shape the driver takes (proto field names, bytes as base64).

The node driver speaks gRPC with @grpc/grpc-js from Envoy's real message definitions; this
module only orchestrates. Shared by tests/integration/test_extproc.py and bench/extproc.py."""
import base64
import json
import os
import shutil
import subprocess
import threading
import time

from fixtures import ROOT

EXTPROC_DIR = os.path.join(ROOT, "tests", "extproc")
DRIVER = os.path.join(EXTPROC_DIR, "envoy.js")
NODE = shutil.which("node")
DESTINATION = "x-gateway-destination-endpoint"


def http_status(code):
    """ImmediateResponse.status.code as a number: the driver prints enums by name
    (envoy.type.v3.StatusCode: "TooManyRequests"), numbers outside the enum as numbers."""
    if isinstance(code, int) or str(code).isdigit():
        return int(code)
    if not _STATUS_CODES:
        import re
        path = os.path.join(EXTPROC_DIR, "node_modules", "@grpc", "grpc-js-xds", "deps", "envoy-api", "envoy", "type",
                            "v3", "http_status.proto")
        with open(path) as f:
            _STATUS_CODES.update((k, int(v)) for k, v in re.findall(r"^\s+(\w+) = (\d+);", f.read(), re.M))
    return _STATUS_CODES[code]


_STATUS_CODES = {}


def missing():
    """Why the node client cannot run here, or None."""
    if not NODE:
        return "node is not installed (scripts/deps.sh test)"
    if not os.path.isdir(os.path.join(EXTPROC_DIR, "node_modules", "@grpc", "grpc-js-xds")):
        return "tests/extproc/node_modules is missing: run (cd tests/extproc && npm ci) or scripts/deps.sh test"
    return None


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(s):
    return base64.b64decode(s or "")


# ---- ProcessingRequest builders ----

def header_map(headers):
    """Envoy sends keys lower-cased and values in raw_value."""
    return {"headers": [{"key": k.lower(), "raw_value": b64(v)} for k, v in headers]}


def request_headers(headers, eos=False, metadata=None, protocol=None):
    m = {"request_headers": {"headers": header_map(headers), "end_of_stream": eos}}
    if metadata is not None:
        m["metadata_context"] = metadata
    if protocol:
        m["protocol_config"] = protocol
    return m


def request_body(data, eos):
    return {"request_body": {"body": b64(data), "end_of_stream": eos}}


def response_headers(headers, eos=False, metadata=None):
    m = {"response_headers": {"headers": header_map(headers), "end_of_stream": eos}}
    if metadata is not None:
        m["metadata_context"] = metadata
    return m


def response_body(data, eos):
    return {"response_body": {"body": b64(data), "end_of_stream": eos}}


def struct_value(v):
    # protobufjs names google.protobuf.Value's fields in camelCase (its built-in copy of
    # struct.proto); the wire is the same.
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, (int, float)):
        return {"numberValue": v}
    if isinstance(v, list):
        return {"listValue": {"values": [struct_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"structValue": {"fields": {k: struct_value(x) for k, x in v.items()}}}
    return {"nullValue": "NULL_VALUE"}


def metadata(ns, fields):
    """config.core.v3.Metadata {filter_metadata: {ns: Struct(fields)}}."""
    return {"filter_metadata": {ns: {"fields": {k: struct_value(v) for k, v in fields.items()}}}}


def from_struct_value(v):
    for k, x in v.items():
        if k in ("stringValue", "string_value", "numberValue", "number_value", "boolValue", "bool_value"):
            return x
        if k in ("structValue", "struct_value"):
            return from_struct(x)
        if k in ("listValue", "list_value"):
            return [from_struct_value(y) for y in x.get("values", [])]
        if k in ("nullValue", "null_value"):
            return None
    return None


def from_struct(s):
    return {k: from_struct_value(v) for k, v in (s or {}).get("fields", {}).items()}


def set_headers(common):
    """{name: value} of a CommonResponse's (or HeaderMutation's) set_headers; raw_value wins."""
    hm = common.get("header_mutation", common) or {}
    out = {}
    for o in hm.get("set_headers", []):
        h = o.get("header", {})
        out[h.get("key")] = unb64(h["raw_value"]).decode() if h.get("raw_value") else h.get("value", "")
    return out


class Driver:
    """One node process; many streams, each named by an id. Thread-safe reads of events."""

    def __init__(self, port, channels=1):
        self.proc = subprocess.Popen([NODE, DRIVER, "--target", "127.0.0.1:%d" % port, "--channels", str(channels)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.cv = threading.Condition()
        self.events = {}     # id -> [event]
        self.status = {}     # id -> status event
        self.syncs = set()
        self.benches = {}    # id -> bench event
        self.errors = []
        self.stderr = []
        self.ready = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self._wait(lambda: self.ready, 30, "the node driver to start")
        self._sync_n = 0

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cv:
                kind = ev.get("event")
                if kind == "ready":
                    self.ready = True
                elif kind == "sync":
                    self.syncs.add(ev["tag"])
                elif kind == "error":
                    self.errors.append(ev)
                elif kind == "status":
                    self.status[ev["id"]] = ev
                elif kind == "bench":
                    self.benches[ev["id"]] = ev
                else:
                    self.events.setdefault(ev["id"], []).append(ev)
                self.cv.notify_all()
        with self.cv:
            self.ready = self.ready or None
            self.cv.notify_all()

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def _wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cv:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not pred():
                    raise AssertionError("timed out waiting for %s; driver stderr: %s; errors: %s"
                                         % (what, "".join(self.stderr[-20:]), self.errors[-5:]))
                self.cv.wait(min(left, 0.2))

    def cmd(self, **c):
        self.proc.stdin.write(json.dumps(c) + "\n")
        self.proc.stdin.flush()

    def open(self, sid, kind="process", **kw):
        self.cmd(op="open", id=sid, kind=kind, **kw)

    def send(self, sid, msg):
        self.cmd(op="send", id=sid, msg=msg)

    def send_hex(self, sid, hexstr):
        self.cmd(op="send", id=sid, hex=hexstr)

    def end(self, sid):
        self.cmd(op="end", id=sid)

    def cancel(self, sid):
        self.cmd(op="cancel", id=sid)

    def run(self, sid, script, deadline_ms=60000):
        self.cmd(op="run", id=sid, script=script, deadline_ms=deadline_ms)

    def bench(self, bid, timeout=600, **spec):
        """Runs a bench op (envoy.js) and returns its result event."""
        self.cmd(op=spec.pop("op", "bench"), id=bid, **spec)
        self._wait(lambda: bid in self.benches, timeout, "bench " + bid)
        return self.benches[bid]

    def sync(self):
        """Returns once the driver has read every earlier command."""
        self._sync_n += 1
        tag = self._sync_n
        self.cmd(op="sync", tag=tag)
        self._wait(lambda: tag in self.syncs, 30, "driver sync")

    def responses(self, sid):
        with self.cv:
            return [e["msg"] for e in self.events.get(sid, [])]

    def timed(self, sid):
        with self.cv:
            return list(self.events.get(sid, []))

    def wait_responses(self, sid, n, timeout=30):
        """Waits for n responses on sid (or its end); returns the responses."""
        self._wait(lambda: len(self.events.get(sid, [])) >= n or sid in self.status, timeout,
                   "%d responses on %s" % (n, sid))
        return self.responses(sid)

    def wait_until(self, sid, pred, timeout=30, what="a response"):
        self._wait(lambda: pred([e["msg"] for e in self.events.get(sid, [])]) or sid in self.status, timeout,
                   what + " on " + sid)
        return self.responses(sid)

    def wait_status(self, sid, timeout=30):
        self._wait(lambda: sid in self.status, timeout, "the end of " + sid)
        return self.status[sid]

    def close(self):
        try:
            self.cmd(op="quit")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
