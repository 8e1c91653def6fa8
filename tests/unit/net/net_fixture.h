/* net_fixture: a libuv loop and raw loopback client sockets for net/ unit tests.
 *
 * The client is a non-blocking socket watched by a uv_poll_t on the test's own loop, so one
 * thread runs both sides: the test writes bytes, then runs the loop until a condition on what
 * the client has read (a substring, EOF) holds. Nothing waits for time: run_until blocks in
 * the loop (which wakes on socket activity or a module's own timer) and a safety timer fails
 * the test if the condition never comes. */
#ifndef SB_TEST_NET_FIXTURE_H
#define SB_TEST_NET_FIXTURE_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "sb_test.h"

/* The safety net: a condition not met within this long fails the test (it is never waited
 * for when things work: the loop returns as soon as the condition holds). */
#define NETFX_SAFETY_MS 5000

typedef struct netfx_client {
    int fd;
    uv_poll_t poll;
    bool polling;
    char *in;             /* everything read so far, NUL-terminated */
    size_t in_len, in_cap;
    char *out;            /* bytes still to write */
    size_t out_len, out_off;
    bool eof;             /* the peer closed (or reset) */
    bool reset;           /* the read failed with ECONNRESET */
    bool hold_reads;      /* a slow reader: nothing is read while set (netfx_hold) */
} netfx_client;

static bool netfx_timed_out;

static inline void netfx_on_safety(uv_timer_t *t) { netfx_timed_out = true; }

static inline void netfx_client_events(netfx_client *c);

static inline void netfx_on_poll(uv_poll_t *p, int status, int events)
{
    netfx_client *c = p->data;
    if (events & UV_WRITABLE) {
        while (c->out_off < c->out_len) {
            ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
            if (n <= 0)
                break;
            c->out_off += (size_t)n;
        }
    }
    if (events & UV_READABLE || status < 0) {
        for (;;) {
            if (c->in_cap - c->in_len < 65537) {
                c->in_cap = c->in_cap * 2 + 65537;
                c->in = realloc(c->in, c->in_cap);
                assert_non_null(c->in);
            }
            ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
            if (n > 0) {
                c->in_len += (size_t)n;
                c->in[c->in_len] = '\0';
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n < 0 && errno == ECONNRESET)
                c->reset = true;
            c->eof = true;
            break;
        }
    }
    netfx_client_events(c);
}

/* Watches for reads until EOF, for writes while bytes are left. */
static inline void netfx_client_events(netfx_client *c)
{
    int ev = (c->eof || c->hold_reads ? 0 : UV_READABLE) | (c->out_off < c->out_len ? UV_WRITABLE : 0);
    if (ev)
        uv_poll_start(&c->poll, ev, netfx_on_poll);
    else
        uv_poll_stop(&c->poll);
}

/* Connects; rcvbuf_bytes > 0 sets a small receive buffer first (a slow reader whose kernel
 * buffer fills soon), 0 keeps the system's. */
static inline void netfx_connect_rcvbuf(uv_loop_t *loop, netfx_client *c, uint16_t port, int rcvbuf_bytes)
{
    memset(c, 0, sizeof(*c));
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    if (rcvbuf_bytes > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof(rcvbuf_bytes));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    assert_int_equal(uv_poll_init_socket(loop, &c->poll, c->fd), 0);
    c->poll.data = c;
    c->polling = true;
    netfx_client_events(c);
}

static inline void netfx_connect(uv_loop_t *loop, netfx_client *c, uint16_t port)
{
    netfx_connect_rcvbuf(loop, c, port, 0);
}

/* Stops (hold) or resumes reading, as a client that reads slower than it is written to. */
static inline void netfx_hold(netfx_client *c, bool hold)
{
    c->hold_reads = hold;
    netfx_client_events(c);
}

/* Queues bytes; they leave as the socket takes them while the loop runs. */
static inline void netfx_send(netfx_client *c, const char *data, size_t len)
{
    if (c->out_off == c->out_len)
        c->out_len = c->out_off = 0;
    c->out = realloc(c->out, c->out_len + len);
    assert_non_null(c->out);
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    netfx_client_events(c);
}

static inline void netfx_sends(netfx_client *c, const char *s) { netfx_send(c, s, strlen(s)); }

static inline void netfx_on_poll_closed(uv_handle_t *h) {}

/* Closes the client socket (abortively if `reset`: the server sees ECONNRESET). */
static inline void netfx_close(netfx_client *c, bool reset)
{
    if (!c->polling)
        return;
    c->polling = false;
    uv_close((uv_handle_t *)&c->poll, netfx_on_poll_closed);
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(c->fd);
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
}

/* Runs the loop until cond(arg) holds; fails the test after NETFX_SAFETY_MS. */
static inline void netfx_run_until(uv_loop_t *loop, bool (*cond)(void *), void *arg, const char *what)
{
    uv_timer_t safety;
    uv_timer_init(loop, &safety);
    netfx_timed_out = false;
    uv_timer_start(&safety, netfx_on_safety, NETFX_SAFETY_MS, 0);
    while (!cond(arg) && !netfx_timed_out)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&safety, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    if (netfx_timed_out && !cond(arg))
        fail_msg("timed out waiting for %s", what);
}

typedef struct netfx_want {
    netfx_client *c;
    const char *s;
} netfx_want;

static inline bool netfx_has(void *arg)
{
    netfx_want *w = arg;
    return w->c->in && strstr(w->c->in, w->s) != NULL;
}

static inline bool netfx_is_eof(void *arg) { return ((netfx_client *)arg)->eof; }

/* Runs the loop until the client has read `s`. */
static inline void netfx_wait_for(uv_loop_t *loop, netfx_client *c, const char *s)
{
    netfx_want w = {c, s};
    netfx_run_until(loop, netfx_has, &w, s);
}

static inline void netfx_wait_eof(uv_loop_t *loop, netfx_client *c) { netfx_run_until(loop, netfx_is_eof, c, "EOF"); }

/* Occurrences of `s` in what the client read. */
static inline size_t netfx_count(const netfx_client *c, const char *s)
{
    size_t n = 0;
    for (const char *p = c->in; p && (p = strstr(p, s)); p += strlen(s))
        n++;
    return n;
}

/* Runs the loop until nothing is left but closing handles, then checks nothing leaked. */
static inline void netfx_loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

#endif
