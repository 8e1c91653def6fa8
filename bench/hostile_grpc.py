#!/usr/bin/env python3
"""Hostile gRPC clients against the endpoint picker's listener, measured: prints figures,
decides nothing.

For each binary given (default build/switchboard; --compare OLD prints an older build beside
it), a gateway with `ext_proc:` and the default limits (16 MiB bodies, so 16 MiB + 64 KiB
messages; max_buffered_body_bytes 256 MiB; header_ms 10 s):
  1. memory: --conns connections, 2 Process streams each, each declaring a 16 MiB message and
     sending all of it but one byte (a raw HTTP/2 client here that honours the windows); the
     gateway's VmRSS growth over its baseline, and how many streams the server ended;
  2. silent sockets: max_connections + 6 (1030) TCP connections that send nothing: how many
     the gateway holds (its descriptors over its baseline) once accepted, and 11 s later (past
     header_ms); and whether a gRPC health Check sent meanwhile was answered.

usage: bench/hostile_grpc.py [--bin PATH] [--compare PATH] [--conns N]
"""
import argparse
import os
import select
import socket
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from fixtures import Gateway, Upstream, free_port, wait_until  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 1, 4, 1
PROCESS = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
HEALTH = b"/grpc.health.v1.Health/Check"


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def literal(name, value):
    """HPACK literal header field without indexing, new name, no Huffman (lengths < 127)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_headers(path):
    return b"".join(literal(n, v) for n, v in ((b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
                                               (b":authority", b"x"), (b"content-type", b"application/grpc"),
                                               (b"te", b"trailers")))


class H2:
    """A minimal HTTP/2 client: sends what its send windows allow, acks SETTINGS and PING, and
    notes which streams the server ended (HEADERS with END_STREAM, or RST_STREAM)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setblocking(False)
        self.rbuf = b""
        self.wbuf = PREFACE + frame(SETTINGS, 0, 0) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 30))
        self.conn_win, self.initial, self.win = 65535, 65535, {}
        self.body = {}  # stream id -> bytes still to send
        self.ended, self.goaway, self.closed = set(), False, False
        self.next_id = 1

    def open(self, path, body, end=False):
        sid = self.next_id
        self.next_id += 2
        self.wbuf += frame(HEADERS, END_HEADERS | (END_STREAM if end and not body else 0), sid, request_headers(path))
        self.win[sid] = self.initial
        self.body[sid] = [memoryview(body), 0, end]
        return sid

    def pump(self):
        """Queues what the windows allow (16 KiB frames), writes what the socket takes."""
        for sid, b in self.body.items():
            while b[1] < len(b[0]) and sid not in self.ended and len(self.wbuf) < (1 << 20):
                n = min(16384, len(b[0]) - b[1], self.conn_win, self.win[sid])
                if n <= 0:
                    break
                last = b[2] and b[1] + n == len(b[0])
                self.wbuf += frame(DATA, END_STREAM if last else 0, sid, bytes(b[0][b[1]:b[1] + n]))
                b[1] += n
                self.conn_win -= n
                self.win[sid] -= n
        if self.wbuf and not self.closed:
            try:
                n = self.sock.send(self.wbuf)
                self.wbuf = self.wbuf[n:]
            except BlockingIOError:
                pass
            except OSError:
                self.closed = True

    def on_readable(self):
        try:
            got = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            got = b""
        if not got:
            self.closed = True
            return
        self.rbuf += got
        while len(self.rbuf) >= 9:
            length = int.from_bytes(self.rbuf[:3], "big")
            if len(self.rbuf) < 9 + length:
                break
            ftype, flags, sid = self.rbuf[3], self.rbuf[4], int.from_bytes(self.rbuf[5:9], "big") & 0x7FFFFFFF
            payload, self.rbuf = self.rbuf[9:9 + length], self.rbuf[9 + length:]
            if ftype == SETTINGS and not flags & ACK:
                for i in range(0, len(payload), 6):
                    ident, value = struct.unpack(">HI", payload[i:i + 6])
                    if ident == 4:  # SETTINGS_INITIAL_WINDOW_SIZE
                        for s in self.win:
                            self.win[s] += value - self.initial
                        self.initial = value
                self.wbuf += frame(SETTINGS, ACK, 0)
            elif ftype == PING and not flags & ACK:
                self.wbuf += frame(PING, ACK, 0, payload)
            elif ftype == WINDOW_UPDATE:
                inc = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                if sid == 0:
                    self.conn_win += inc
                elif sid in self.win:
                    self.win[sid] += inc
            elif (ftype == HEADERS and flags & END_STREAM) or ftype == RST_STREAM:
                self.ended.add(sid)
            elif ftype == GOAWAY:
                self.goaway = True

    def close(self):
        self.sock.close()


def turn(conns, timeout):
    for c in conns:
        c.pump()
    live = {c.sock.fileno(): c for c in conns if not c.closed}
    if not live:
        return
    p = select.poll()  # not select(): descriptors past 1024 here
    for fd, c in live.items():
        p.register(fd, select.POLLIN | (select.POLLOUT if c.wbuf else 0))
    for fd, ev in p.poll(timeout * 1000):
        if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
            live[fd].on_readable()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def gateway(binary, up):
    port = free_port()
    gw = Gateway([{"name": "p", "models": ["m1"], "endpoints": [up.address]}],
                 extra='ext_proc: { listen: "127.0.0.1:%d" }' % port, bin_path=binary)

    def can_connect():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False
    wait_until(can_connect, 15, "the ext_proc listener")
    return gw, port


def memory(binary, up, n):
    gw, port = gateway(binary, up)
    conns = []
    try:
        time.sleep(0.5)  # the gateway settles (first scrapes) before the baseline
        base = rss_kib(gw.proc.pid)
        declared = 16 << 20
        body = struct.pack(">BI", 0, declared) + b"\x00" * (declared - 1)  # all but the last byte
        conns = [H2(port) for _ in range(n)]
        sids = [(c, c.open(PROCESS, body)) for c in conns for _ in range(2)]
        start = still = time.monotonic()
        sent = -1
        while time.monotonic() - start < 60 and time.monotonic() - still < 1:  # until nothing moves for 1 s
            turn(conns, 0.05)
            now_sent = sum(b[1] for c in conns for b in c.body.values()) - sum(len(c.wbuf) for c in conns)
            if now_sent != sent:
                sent, still = now_sent, time.monotonic()
        grown = rss_kib(gw.proc.pid) - base
        ended = sum(1 for c, s in sids if s in c.ended)
        return grown, ended, len(sids), time.monotonic() - start
    finally:
        for c in conns:
            c.close()
        gw.close()


def silent_sockets(binary, up, n):
    """Returns (silent connections the gateway holds once it has accepted them, held 11 s
    later (past header_ms), whether a health Check was answered meanwhile)."""
    gw, port = gateway(binary, up)
    socks = []
    try:
        def fds():
            return len(os.listdir("/proc/%d/fd" % gw.proc.pid))
        base = fds()
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        # All accepted (a fixed sleep raced this); past max_connections they are closed at once.
        start = time.monotonic()
        while time.monotonic() - start < 5:
            held = fds() - base
            time.sleep(0.2)
            if fds() - base == held:
                break
        c = H2(port)
        sid = c.open(HEALTH, struct.pack(">BI", 0, 0), end=True)
        t0 = time.monotonic()
        while not c.closed and sid not in c.ended and time.monotonic() - t0 < 2:
            turn([c], 0.05)
        answered = sid in c.ended
        c.close()
        time.sleep(11)
        return held, fds() - base, answered
    finally:
        for s in socks:
            s.close()
        gw.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "switchboard"))
    ap.add_argument("--compare", help="an older build to measure beside it")
    ap.add_argument("--conns", type=int, default=8)
    a = ap.parse_args()
    bins = [("this build", a.bin)] + ([("compared", a.compare)] if a.compare else [])
    up = Upstream()
    try:
        for name, b in bins:
            grown, ended, streams, secs = memory(b, up, a.conns)
            print("%-10s memory: %d conns x 2 streams, 16 MiB messages less a byte: VmRSS +%d MB in %.1f s; "
                  "%d of %d streams ended by the server" % (name, a.conns, grown // 1024, secs, ended, streams))
        for name, b in bins:
            held, later, answered = silent_sockets(b, up, 1030)
            print("%-10s 1030 silent sockets: the gateway holds %d, %d of them 11 s later; a health Check "
                  "meanwhile %s" % (name, held, later, "answered" if answered else "refused"))
    finally:
        up.close()


if __name__ == "__main__":
    main()
