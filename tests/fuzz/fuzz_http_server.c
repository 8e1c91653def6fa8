/* fuzz_http_server: libFuzzer target for the gateway's client-facing HTTP server, HTTP/1.1
 * (src/net/http_parse.c: the proto/h1.c fast path and http-parser) and HTTP/2 (src/net/http2.c
 * over nghttp2, with the gateway's own stream, header, reset and flood bounds), on one port as
 * the gateway runs it (outside input: every byte a client sends).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each); by hand:
 *   make fuzz-build && build/fuzz/fuzz_http_server -max_total_time=300 /tmp/corpus_srv \
 *       tests/fuzz/corpus/http_server
 *
 * Each input is one client connection: a real sb_http_server on a libuv loop in this thread,
 * a loopback socket connected to it, the input written (an h2c preface makes it HTTP/2, anything
 * else HTTP/1.1), the client's write side shut, and the loop run until the server has closed the
 * connection. The handler answers every request it is given at once (a streamed answer for
 * paths under /s, a plain one otherwise), so requests, pipelining, streams and the answers' frames
 * are all exercised. Besides crashes and sanitizer reports (ASan, UBSan, leaks), it checks that
 * the server always ends the connection once the client's bytes are over (a stall would hold a
 * connection forever), and that no connection is left open between inputs. */
#include "net/http_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_http_server: %s (line %d)\n", #cond, __LINE__);                                      \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

static uv_loop_t loop;
static sb_http_server *srv;
static uint16_t port;

static void handler(sb_http_req *req, void *ctx)
{
    (void)ctx;
    static const char body[] = "{\"ok\":true}";
    if (req->path_len >= 2 && req->path[0] == '/' && req->path[1] == 's') {
        if (sb_http_stream_begin(req, 200, "Content-Type: text/event-stream\r\n", 33, -1) < 0)
            return;
        (void)sb_http_stream_write(req, "data: 1\n\n", 9);
        sb_http_stream_end(req);
        return;
    }
    (void)sb_http_respond(req, 200, "application/json", NULL, body, sizeof body - 1);
}

static void setup(void)
{
    CHECK(uv_loop_init(&loop) == 0);
    /* Small bounds, so inputs of a few kilobytes reach them. */
    sb_http_server_opts o = {.max_header_bytes = 2048,
                             .max_body_bytes = 4096,
                             .header_ms = 60000,
                             .idle_ms = 60000,
                             .linger_ms = SB_HTTP_LINGER_OFF,
                             .h2_max_streams = 8,
                             .h2_window_bytes = 4096,
                             .h2_stream_buffer_bytes = 1024,
                             .h2_reset_burst = 20,
                             .h2_reset_rate = 1};
    CHECK(sb_http_server_start(&loop, "127.0.0.1", 0, &o, handler, NULL, &srv) == 0);
    port = sb_http_server_port(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv)
        setup();
    if (size > 65536)
        return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    /* From a new loopback address each time (127.1.0.0/16): a closed connection's 4-tuple stays
     * in TIME_WAIT for a minute, and from one address the ephemeral ports ran out within one. */
    static uint32_t next_src;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f010000u | (next_src++ & 0xffffu))};
    CHECK(bind(fd, (struct sockaddr *)&src, sizeof src) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    /* Non-blocking: libFuzzer's timer signal may interrupt a blocking connect. On loopback the
     * kernel completes it without the server's accept. */
    CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        CHECK(errno == EINPROGRESS || errno == EINTR);
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        while (poll(&pf, 1, 5000) < 0)
            CHECK(errno == EINTR);
        int err = -1;
        socklen_t len = sizeof err;
        CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    }
    int rcv = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    size_t off = 0;
    bool shut = false, eof = false;
    char sink[65536];
    /* The server must close within a bounded number of loop turns once the input is over
     * (each turn either reads the client's bytes or answers; nothing waits for a timer). */
    for (int turn = 0; turn < 20000 && !eof; turn++) {
        if (off < size) {
            ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                off = size; /* the server is gone already */
        }
        if (off == size && !shut) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        for (;;) {
            ssize_t n = recv(fd, sink, sizeof sink, 0);
            if (n > 0)
                continue;
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                eof = true;
            break;
        }
    }
    CHECK(eof);
    close(fd);
    sb_http_server_stats st;
    for (int turn = 0; turn < 1000; turn++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        sb_http_server_get_stats(srv, &st);
        if (st.open_connections == 0 && st.lingering_connections == 0)
            break;
    }
    CHECK(st.open_connections == 0 && st.lingering_connections == 0);
    return 0;
}
