/* grpc_server: the server on the test's own libuv loop over loopback, driven by a small HTTP/2
 * client written here on nghttp2's client API (plain, or TLS with ALPN through memory BIOs),
 * both sides on one thread. The handler echoes each message, or holds calls, or floods. */
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "net/grpc_server.h"
#include "net_fixture.h"
#include "tls_fixture.h"

#define MAXS 300

/* ---- the client ---- */

typedef struct tclient tclient;

typedef struct tstream {
    tclient *cl;
    int32_t id;
    uint8_t *out; /* request DATA still to go */
    size_t out_len, out_off, frame_max;
    bool out_eos, deferred;
    uint8_t *in; /* response DATA, framed */
    size_t in_len;
    int http_status, grpc_status;
    char grpc_message[256];
    bool closed;
    uint32_t close_code;
} tstream;

struct tclient {
    int fd;
    uv_poll_t poll;
    bool polling, eof, hold, goaway;
    bool manual_window, consume; /* flow control by hand: windows given back only when consume */
    nghttp2_session *ng;
    SSL_CTX *sctx;
    SSL *ssl;
    BIO *rbio, *wbio;
    bool tls_ready, tls_failed;
    uint8_t *w;
    size_t w_len, w_off, w_cap;
    tstream s[MAXS];
    int n;
};

static void cl_pump(tclient *cl);

static void cl_out(tclient *cl, const void *p, size_t n)
{
    if (cl->w_off == cl->w_len)
        cl->w_off = cl->w_len = 0;
    if (cl->w_len + n > cl->w_cap) {
        cl->w_cap = (cl->w_len + n) * 2;
        cl->w = realloc(cl->w, cl->w_cap);
        assert_non_null(cl->w);
    }
    memcpy(cl->w + cl->w_len, p, n);
    cl->w_len += n;
}

static void cl_in(tclient *cl, const uint8_t *p, size_t n)
{
    if (!cl->ng)
        return;
    ssize_t rv = nghttp2_session_mem_recv(cl->ng, p, n);
    assert_true(rv >= 0);
}

static void cl_on_poll(uv_poll_t *p, int status, int events)
{
    tclient *cl = p->data;
    if ((events & UV_READABLE) || status < 0) {
        uint8_t buf[65536];
        for (;;) {
            ssize_t n = recv(cl->fd, buf, sizeof(buf), 0);
            if (n > 0) {
                if (!cl->ssl) {
                    cl_in(cl, buf, (size_t)n);
                    continue;
                }
                BIO_write(cl->rbio, buf, (int)n);
                if (!cl->tls_ready)
                    cl_pump(cl);
                int r;
                uint8_t plain[16384];
                while (cl->tls_ready && (r = SSL_read(cl->ssl, plain, sizeof(plain))) > 0)
                    cl_in(cl, plain, (size_t)r);
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            cl->eof = true;
            break;
        }
    }
    cl_pump(cl);
}

/* Moves what the session (and TLS) has to send into the socket; watches for what is needed. */
static void cl_pump(tclient *cl)
{
    if (!cl->polling)
        return;
    if (cl->ssl && !cl->tls_ready && !cl->tls_failed) {
        int r = SSL_do_handshake(cl->ssl);
        if (r == 1)
            cl->tls_ready = true;
        else if (SSL_get_error(cl->ssl, r) != SSL_ERROR_WANT_READ)
            cl->tls_failed = true;
        ERR_clear_error();
    }
    if (cl->ng && (!cl->ssl || cl->tls_ready)) {
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(cl->ng, &p)) > 0) {
            if (cl->ssl)
                SSL_write(cl->ssl, p, (int)n);
            else
                cl_out(cl, p, (size_t)n);
        }
    }
    if (cl->ssl) {
        char tmp[16384];
        int n;
        while ((n = BIO_read(cl->wbio, tmp, sizeof(tmp))) > 0)
            cl_out(cl, tmp, (size_t)n);
    }
    while (cl->w_off < cl->w_len) {
        ssize_t n = send(cl->fd, cl->w + cl->w_off, cl->w_len - cl->w_off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        cl->w_off += (size_t)n;
    }
    int ev = (cl->eof || cl->hold ? 0 : UV_READABLE) | (cl->w_off < cl->w_len ? UV_WRITABLE : 0);
    if (ev)
        uv_poll_start(&cl->poll, ev, cl_on_poll);
    else
        uv_poll_stop(&cl->poll);
}

static int cl_on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    tstream *t = nghttp2_session_get_stream_user_data(ng, f->hd.stream_id);
    if (!t)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        t->http_status = atoi((const char *)value);
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        t->grpc_status = atoi((const char *)value);
    else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
        snprintf(t->grpc_message, sizeof(t->grpc_message), "%.*s", (int)valuelen, value);
    return 0;
}

static int cl_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *user)
{
    tstream *t = nghttp2_session_get_stream_user_data(ng, id);
    if (!t)
        return 0;
    t->in = realloc(t->in, t->in_len + len + 1);
    assert_non_null(t->in);
    memcpy(t->in + t->in_len, data, len);
    t->in_len += len;
    if (t->cl->manual_window && t->cl->consume)
        nghttp2_session_consume(ng, id, len);
    return 0;
}

static int cl_on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *user)
{
    tstream *t = nghttp2_session_get_stream_user_data(ng, id);
    if (t) {
        t->closed = true;
        t->close_code = code;
    }
    return 0;
}

static int cl_on_frame(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    if (f->hd.type == NGHTTP2_GOAWAY)
        ((tclient *)user)->goaway = true;
    return 0;
}

static ssize_t cl_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                       nghttp2_data_source *src, void *user)
{
    tstream *t = src->ptr;
    size_t n = t->out_len - t->out_off;
    if (n > length)
        n = length;
    if (t->frame_max && n > t->frame_max)
        n = t->frame_max;
    if (n)
        memcpy(buf, t->out + t->out_off, n);
    t->out_off += n;
    if (t->out_off == t->out_len && t->out_eos) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
    }
    if (n == 0) {
        t->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

static int alpn_offer(SSL_CTX *ctx, const char *proto)
{
    unsigned char wire[32];
    size_t l = strlen(proto);
    wire[0] = (unsigned char)l;
    memcpy(wire + 1, proto, l);
    return SSL_CTX_set_alpn_protos(ctx, wire, (unsigned)(l + 1));
}

/* Connects and sends the preface and SETTINGS (with large windows: the server is limited by
 * its own bounds, not the client's). alpn NULL: h2c; else TLS offering that protocol. */
static void cl_connect_opt(uv_loop_t *loop, tclient *cl, uint16_t port, const char *alpn, bool manual_window)
{
    memset(cl, 0, sizeof(*cl));
    cl->manual_window = manual_window;
    cl->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(cl->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(cl->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    int one = 1;
    setsockopt(cl->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    assert_int_equal(uv_poll_init_socket(loop, &cl->poll, cl->fd), 0);
    cl->poll.data = cl;
    cl->polling = true;
    if (alpn) {
        cl->sctx = SSL_CTX_new(TLS_client_method());
        alpn_offer(cl->sctx, alpn);
        cl->ssl = SSL_new(cl->sctx);
        cl->rbio = BIO_new(BIO_s_mem());
        cl->wbio = BIO_new(BIO_s_mem());
        SSL_set_bio(cl->ssl, cl->rbio, cl->wbio);
        SSL_set_connect_state(cl->ssl);
    }
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, cl_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cl_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cl_on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cl_on_frame);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, manual_window);
    assert_int_equal(nghttp2_session_client_new2(&cl->ng, cb, cl, opt), 0);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (!manual_window) {
        nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16 << 20}};
        nghttp2_submit_settings(cl->ng, NGHTTP2_FLAG_NONE, iv, 1);
        nghttp2_session_set_local_window_size(cl->ng, NGHTTP2_FLAG_NONE, 0, 64 << 20);
    } else {
        nghttp2_submit_settings(cl->ng, NGHTTP2_FLAG_NONE, NULL, 0); /* the default 64 KiB windows */
    }
    cl_pump(cl);
}

static void cl_connect(uv_loop_t *loop, tclient *cl, uint16_t port, const char *alpn)
{
    cl_connect_opt(loop, cl, port, alpn, false);
}

static void cl_close(tclient *cl, bool reset)
{
    if (!cl->polling)
        return;
    cl->polling = false;
    uv_close((uv_handle_t *)&cl->poll, netfx_on_poll_closed);
    if (reset) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(cl->fd);
    nghttp2_session_del(cl->ng);
    cl->ng = NULL;
    if (cl->ssl)
        SSL_free(cl->ssl);
    if (cl->sctx)
        SSL_CTX_free(cl->sctx);
    for (int i = 0; i < cl->n; i++) {
        free(cl->s[i].out);
        free(cl->s[i].in);
    }
    free(cl->w);
}

#define HDR(n, v)                                                                                                      \
    {                                                                                                                  \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                                     \
    }

/* Opens a stream; eos_now: HEADERS with END_STREAM (no body). */
static tstream *cl_open_full(tclient *cl, const char *method, const char *path, const char *ctype, bool eos_now)
{
    assert_true(cl->n < MAXS);
    tstream *t = &cl->s[cl->n++];
    memset(t, 0, sizeof(*t));
    t->cl = cl;
    t->grpc_status = -1;
    nghttp2_nv nv[] = {HDR(":method", method),         HDR(":scheme", "http"),     HDR(":path", path),
                       HDR(":authority", "localhost"), HDR("content-type", ctype), HDR("te", "trailers")};
    nghttp2_data_provider prd = {.source.ptr = t, .read_callback = cl_read};
    t->id = nghttp2_submit_request(cl->ng, NULL, nv, 6, eos_now ? NULL : &prd, t);
    assert_true(t->id > 0);
    cl_pump(cl);
    return t;
}

/* A call with one more request header. */
static tstream *cl_open_with(tclient *cl, const char *path, const char *name, const char *value)
{
    tstream *t = &cl->s[cl->n++];
    memset(t, 0, sizeof(*t));
    t->cl = cl;
    t->grpc_status = -1;
    nghttp2_nv nv[] = {HDR(":method", "POST"),
                       HDR(":scheme", "http"),
                       HDR(":path", path),
                       HDR(":authority", "localhost"),
                       HDR("content-type", "application/grpc"),
                       HDR(name, value)};
    nghttp2_data_provider prd = {.source.ptr = t, .read_callback = cl_read};
    t->id = nghttp2_submit_request(cl->ng, NULL, nv, 6, &prd, t);
    assert_true(t->id > 0);
    cl_pump(cl);
    return t;
}

static tstream *cl_open(tclient *cl, const char *path)
{
    return cl_open_full(cl, "POST", path, "application/grpc", false);
}

/* Queues raw DATA bytes on the stream (eos: the last). */
static void st_write(tstream *t, const void *p, size_t n, bool eos)
{
    t->out = realloc(t->out, t->out_len + n + 1);
    assert_non_null(t->out);
    memcpy(t->out + t->out_len, p, n);
    t->out_len += n;
    t->out_eos = eos;
    if (t->deferred) {
        t->deferred = false;
        nghttp2_session_resume_data(t->cl->ng, t->id);
    }
    cl_pump(t->cl);
}

/* Queues one gRPC message (flag byte as given). */
static void st_msg_flag(tstream *t, const void *msg, size_t n, bool eos, uint8_t flag)
{
    uint8_t pre[5] = {flag, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    st_write(t, pre, 5, false);
    st_write(t, msg, n, eos);
}

static void st_msg(tstream *t, const char *msg, bool eos)
{
    st_msg_flag(t, msg, strlen(msg), eos, 0);
}

/* The i-th message of the stream's response DATA, NUL-terminated into out; false if absent. */
static bool st_reply(const tstream *t, int i, char *out, size_t cap)
{
    size_t off = 0;
    for (;;) {
        if (off + 5 > t->in_len)
            return false;
        size_t len =
            (size_t)t->in[off + 1] << 24 | (size_t)t->in[off + 2] << 16 | (size_t)t->in[off + 3] << 8 | t->in[off + 4];
        if (off + 5 + len > t->in_len)
            return false;
        if (i-- == 0) {
            assert_true(len < cap);
            memcpy(out, t->in + off + 5, len);
            out[len] = '\0';
            return true;
        }
        off += 5 + len;
    }
}

static size_t st_replies(const tstream *t)
{
    size_t n = 0, off = 0;
    while (off + 5 <= t->in_len) {
        size_t len =
            (size_t)t->in[off + 1] << 24 | (size_t)t->in[off + 2] << 16 | (size_t)t->in[off + 3] << 8 | t->in[off + 4];
        if (off + 5 + len > t->in_len)
            break;
        off += 5 + len;
        n++;
    }
    return n;
}

static bool st_is_closed(void *arg)
{
    return ((tstream *)arg)->closed;
}
static void st_wait_closed(uv_loop_t *loop, tstream *t)
{
    netfx_run_until(loop, st_is_closed, t, "stream close");
}
static bool cl_is_eof(void *arg)
{
    return ((tclient *)arg)->eof;
}

/* ---- the server's handler ---- */

enum kind { K_ECHO, K_HOLD, K_FLOOD, K_ONE, K_FAIL, K_BLAST };

typedef struct tcall {
    enum kind kind;
    int cancels;
} tcall;

static struct {
    int calls, messages, half_closes, cancels, drains;
    int finish_in_cancel_rc;
    void *ctx_seen;
    sb_grpc_call *held[MAXS];
    int n_held;
    /* flood */
    size_t flood_sent, flood_limit;
    bool flood_waiting; /* the last send returned 1; no on_drain since */
    int flood_backpressure;
    tcall calls_mem[MAXS * 2];
    int n_calls_mem;
} T;

static void hold_remove(sb_grpc_call *c)
{
    for (int i = 0; i < T.n_held; i++)
        if (T.held[i] == c) {
            T.held[i] = T.held[--T.n_held];
            return;
        }
}

static void flood(sb_grpc_call *c)
{
    static uint8_t chunk[16384];
    while (T.flood_sent < T.flood_limit) {
        int rc = sb_grpc_send(c, chunk, sizeof(chunk));
        assert_true(rc >= 0);
        T.flood_sent += sizeof(chunk);
        if (rc == 1) {
            T.flood_waiting = true;
            T.flood_backpressure++;
            return;
        }
    }
    sb_grpc_finish(c, SB_GRPC_OK, NULL);
    hold_remove(c);
}

static bool is(const char *m, size_t ml, const char *want)
{
    return ml == strlen(want) && memcmp(m, want, ml) == 0;
}

static int h_on_call(sb_grpc_call *c, const char *method, size_t ml, void *ctx)
{
    T.calls++;
    T.ctx_seen = ctx;
    enum kind k;
    if (is(method, ml, "/t.Echo/Echo"))
        k = K_ECHO;
    else if (is(method, ml, "/t.Echo/Hold"))
        k = K_HOLD;
    else if (is(method, ml, "/t.Echo/Flood"))
        k = K_FLOOD;
    else if (is(method, ml, "/t.Echo/One"))
        k = K_ONE;
    else if (is(method, ml, "/t.Echo/Fail"))
        k = K_FAIL;
    else if (is(method, ml, "/t.Echo/Blast"))
        k = K_BLAST;
    else
        return SB_GRPC_UNIMPLEMENTED;
    assert_true(T.n_calls_mem < MAXS * 2);
    tcall *tc = &T.calls_mem[T.n_calls_mem++];
    tc->kind = k;
    sb_grpc_call_set_user(c, tc);
    T.held[T.n_held++] = c;
    if (k == K_FLOOD)
        flood(c);
    if (k == K_BLAST) { /* 256 KiB at once, ignoring backpressure */
        static uint8_t chunk[16384];
        for (int i = 0; i < 16; i++)
            assert_true(sb_grpc_send(c, chunk, sizeof(chunk)) >= 0);
    }
    return SB_GRPC_OK;
}

static void h_on_message(sb_grpc_call *c, const uint8_t *msg, size_t len)
{
    T.messages++;
    tcall *tc = sb_grpc_call_user(c);
    if (tc->kind == K_ECHO)
        assert_true(sb_grpc_send(c, msg, len) >= 0);
    if (tc->kind == K_ONE) { /* answers the first message and ends the call from inside on_message */
        assert_int_equal(sb_grpc_send(c, msg, len), 0);
        assert_int_equal(sb_grpc_finish(c, SB_GRPC_OK, NULL), 0);
        assert_int_equal(sb_grpc_send(c, msg, len), -1);
        hold_remove(c);
    }
}

static void h_on_half_close(sb_grpc_call *c)
{
    T.half_closes++;
    tcall *tc = sb_grpc_call_user(c);
    if (tc->kind == K_ECHO || tc->kind == K_FAIL) {
        if (tc->kind == K_FAIL)
            assert_int_equal(sb_grpc_finish(c, SB_GRPC_NOT_FOUND, "not here: 100% \xc3\xa9"), 0);
        else
            assert_int_equal(sb_grpc_finish(c, SB_GRPC_OK, NULL), 0);
        hold_remove(c);
    }
}

static void h_on_cancel(sb_grpc_call *c)
{
    T.cancels++;
    tcall *tc = sb_grpc_call_user(c);
    tc->cancels++;
    T.finish_in_cancel_rc = sb_grpc_finish(c, SB_GRPC_OK, NULL);
    hold_remove(c);
}

static void h_on_drain(sb_grpc_call *c)
{
    T.drains++;
    T.flood_waiting = false;
    flood(c);
}

static const sb_grpc_handler H = {h_on_call, h_on_message, h_on_half_close, h_on_cancel, h_on_drain};

static uv_loop_t loop;
static int ctx_token;

static sb_grpc_server *start(const sb_grpc_server_opts *o)
{
    memset(&T, 0, sizeof(T));
    T.flood_limit = 256u << 20;
    assert_int_equal(uv_loop_init(&loop), 0);
    sb_grpc_server *s = NULL;
    assert_int_equal(sb_grpc_server_start(&loop, "127.0.0.1", 0, o, &H, &ctx_token, &s), 0);
    return s;
}

static void finish(sb_grpc_server *s)
{
    sb_grpc_server_stop(s), netfx_loop_finish(&loop);
}

static sb_grpc_server_stats stats(sb_grpc_server *s)
{
    sb_grpc_server_stats st;
    sb_grpc_server_get_stats(s, &st);
    return st;
}

/* ---- cases ---- */

static void test_one_message(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "hello", true);
    st_wait_closed(&loop, t);
    char m[64];
    assert_int_equal(t->http_status, 200);
    assert_int_equal(t->grpc_status, 0);
    assert_true(st_reply(t, 0, m, sizeof(m)));
    assert_string_equal(m, "hello");
    assert_int_equal(st_replies(t), 1);
    assert_int_equal(t->close_code, NGHTTP2_NO_ERROR);
    assert_ptr_equal(T.ctx_seen, &ctx_token);
    assert_int_equal(T.half_closes, 1);
    assert_int_equal(T.cancels, 0);
    assert_int_equal(stats(s).calls_total, 1);
    cl_close(&cl, false);
    finish(s);
}

/* One message's prefix and body cut into 7-byte DATA frames; then 50 messages in one frame. */
static void test_split_and_coalesced_messages(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    t->frame_max = 7;
    char big[3000];
    for (size_t i = 0; i < sizeof(big) - 1; i++)
        big[i] = (char)('a' + i % 26);
    big[sizeof(big) - 1] = '\0';
    st_msg(t, big, true);
    st_wait_closed(&loop, t);
    char m[4096];
    assert_true(st_reply(t, 0, m, sizeof(m)));
    assert_string_equal(m, big);

    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    uint8_t all[50 * 16];
    size_t n = 0;
    for (int i = 0; i < 50; i++) {
        char one[16];
        int l = snprintf(one, sizeof(one), "m%d", i);
        uint8_t pre[5] = {0, 0, 0, 0, (uint8_t)l};
        memcpy(all + n, pre, 5);
        memcpy(all + n + 5, one, (size_t)l);
        n += 5 + (size_t)l;
    }
    st_write(u, all, n, true); /* one DATA frame (well under 16 KiB) */
    st_wait_closed(&loop, u);
    assert_int_equal(st_replies(u), 50);
    for (int i = 0; i < 50; i++) {
        char want[16];
        snprintf(want, sizeof(want), "m%d", i);
        assert_true(st_reply(u, i, m, sizeof(m)));
        assert_string_equal(m, want);
    }
    assert_int_equal(u->grpc_status, 0);
    cl_close(&cl, false);
    finish(s);
}

static bool n_held_is(void *arg)
{
    return T.n_held == *(int *)arg;
}

/* 250 calls open at once on one connection, then all answered. */
static void test_concurrent_streams(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    int want = 250;
    for (int i = 0; i < want; i++) {
        tstream *t = cl_open(&cl, "/t.Echo/Hold");
        char m[16];
        snprintf(m, sizeof(m), "s%d", i);
        st_msg(t, m, true);
    }
    netfx_run_until(&loop, n_held_is, &want, "250 held calls");
    assert_int_equal(stats(s).open_calls, 250);
    while (T.n_held) {
        sb_grpc_call *c = T.held[--T.n_held];
        assert_int_equal(sb_grpc_send(c, (const uint8_t *)"ok", 2), 0);
        assert_int_equal(sb_grpc_finish(c, SB_GRPC_OK, NULL), 0);
    }
    for (int i = 0; i < want; i++) {
        st_wait_closed(&loop, &cl.s[i]);
        assert_int_equal(cl.s[i].grpc_status, 0);
        assert_int_equal(st_replies(&cl.s[i]), 1);
    }
    assert_int_equal(T.messages, 250);
    assert_int_equal(T.cancels, 0);
    cl_close(&cl, false);
    finish(s);
}

/* A prefix declaring more than max_message_bytes ends that call only; the application that
 * held it hears on_cancel; the connection serves the next call. */
static void test_message_over_limit(void **state)
{
    sb_grpc_server_opts o = {.max_message_bytes = 1024};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    static char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    st_msg(t, big, false); /* the client keeps its side open: the server resets it */
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, SB_GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(t->grpc_message, "over the limit"));
    assert_int_equal(T.messages, 0);
    assert_int_equal(T.cancels, 1);
    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    st_msg(u, "after", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    assert_int_equal(st_replies(u), 1);
    assert_false(cl.eof);
    assert_int_equal(stats(s).calls_refused, 1);
    cl_close(&cl, false);
    finish(s);
}

static void test_unknown_method(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Nope");
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->http_status, 200);
    assert_int_equal(t->grpc_status, SB_GRPC_UNIMPLEMENTED);
    assert_int_equal(t->in_len, 0);
    assert_int_equal(T.messages, 0);
    assert_int_equal(stats(s).calls_refused, 1);
    cl_close(&cl, false);
    finish(s);
}

static bool cancels_are(void *arg)
{
    return T.cancels == *(int *)arg;
}

static bool conn_window_closed(void *arg)
{
    return nghttp2_session_get_remote_window_size(arg) == 0;
}
static bool messages_are(void *arg)
{
    return T.messages == *(int *)arg;
}

/* Unfinished messages hold the connection window: five streams each half-way through a
 * 1 MiB message stop the client at the connection window (4 MiB here), not at 4.5 MB, and
 * nothing is handed over; resetting three of them gives their bytes back, and the other two
 * complete. (With windows given back as bytes arrive, the server would hold whatever the
 * streams chose to send.) */
static void test_unfinished_messages_hold_the_connection_window(void **state)
{
    sb_grpc_server_opts o = {.max_message_bytes = 1 << 20};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    static uint8_t body[1 << 20];
    memset(body, 'm', sizeof(body));
    const size_t first = 900 * 1000;
    uint8_t pre[5] = {0, 0, 0x10, 0, 0}; /* 1 MiB */
    for (int i = 0; i < 5; i++) {
        tstream *t = cl_open(&cl, "/t.Echo/Hold");
        st_write(t, pre, 5, false);
        st_write(t, body, first, false);
    }
    netfx_run_until(&loop, conn_window_closed, cl.ng, "the connection window closed");
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(nghttp2_session_get_remote_window_size(cl.ng), 0);
    size_t sent = 0;
    for (int i = 0; i < 5; i++)
        sent += cl.s[i].out_off;
    assert_int_equal(sent, 4 << 20); /* exactly the connection window */
    assert_int_equal(T.messages, 0);
    for (int i = 0; i < 3; i++)
        nghttp2_submit_rst_stream(cl.ng, NGHTTP2_FLAG_NONE, cl.s[i].id, NGHTTP2_CANCEL);
    for (int i = 3; i < 5; i++)
        st_write(&cl.s[i], body, sizeof(body) - first, true);
    int two = 2;
    netfx_run_until(&loop, messages_are, &two, "the two remaining messages");
    assert_int_equal(T.cancels, 3);
    while (T.n_held)
        assert_int_equal(sb_grpc_finish(T.held[--T.n_held], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, &cl.s[3]);
    st_wait_closed(&loop, &cl.s[4]);
    assert_int_equal(cl.s[4].grpc_status, 0);
    cl_close(&cl, false);
    finish(s);
}

/* The client resets a call: on_cancel once; a finish from inside it returns -1. */
static void test_client_reset(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Hold");
    st_msg(t, "x", false);
    int one = 1;
    netfx_run_until(&loop, n_held_is, &one, "held call");
    nghttp2_submit_rst_stream(cl.ng, NGHTTP2_FLAG_NONE, t->id, NGHTTP2_CANCEL);
    cl_pump(&cl);
    netfx_run_until(&loop, cancels_are, &one, "on_cancel");
    assert_int_equal(T.finish_in_cancel_rc, -1);
    /* A later call on the connection: the reset one is never heard of again. */
    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    st_msg(u, "y", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    assert_int_equal(T.cancels, 1);
    assert_int_equal(T.calls_mem[0].cancels, 1);
    cl_close(&cl, false);
    finish(s);
}

static bool no_connections(void *arg)
{
    return sb_grpc_server_connections(arg) == 0;
}

/* The connection drops: every open call hears on_cancel, once. */
static void test_connection_drop(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    for (int i = 0; i < 5; i++)
        st_msg(cl_open(&cl, "/t.Echo/Hold"), "x", i % 2 == 0);
    int five = 5;
    netfx_run_until(&loop, n_held_is, &five, "5 held calls");
    cl_close(&cl, true);
    netfx_run_until(&loop, cancels_are, &five, "5 cancels");
    netfx_run_until(&loop, no_connections, s, "connection closed");
    for (int i = 0; i < 5; i++)
        assert_int_equal(T.calls_mem[i].cancels, 1);
    assert_int_equal(stats(s).open_calls, 0);
    finish(s);
}

static void test_compressed_flag(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg_flag(t, "zz", 2, true, 1);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, SB_GRPC_UNIMPLEMENTED);
    assert_int_equal(T.messages, 0);
    assert_int_equal(T.cancels, 1);
    cl_close(&cl, false);
    finish(s);
}

/* Not gRPC: another content-type gets HTTP 415, another method 405; each with a grpc-status;
 * the application never sees them. application/grpc+proto is gRPC. */
static void test_not_grpc_requests(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open_full(&cl, "POST", "/t.Echo/Echo", "application/json", false);
    st_msg(t, "x", true);
    tstream *u = cl_open_full(&cl, "GET", "/t.Echo/Echo", "application/grpc", true);
    tstream *v = cl_open_full(&cl, "POST", "/t.Echo/Echo", "application/grpc+proto", false);
    st_msg(v, "ok", true);
    st_wait_closed(&loop, t);
    st_wait_closed(&loop, u);
    st_wait_closed(&loop, v);
    assert_int_equal(t->http_status, 415);
    assert_int_equal(t->grpc_status, SB_GRPC_INVALID_ARGUMENT);
    assert_int_equal(u->http_status, 405);
    assert_int_equal(u->grpc_status, SB_GRPC_UNIMPLEMENTED);
    assert_int_equal(v->grpc_status, 0);
    assert_int_equal(T.calls, 1);
    assert_int_equal(stats(s).calls_refused, 2);
    cl_close(&cl, false);
    finish(s);
}

/* A call whose request has no body at all (END_STREAM on HEADERS): on_call, then on_half_close. */
static void test_headers_only_request(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open_full(&cl, "POST", "/t.Echo/Echo", "application/grpc", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(t->http_status, 200);
    assert_int_equal(T.half_closes, 1);
    cl_close(&cl, false);
    finish(s);
}

static bool cl_has_goaway(void *arg)
{
    return ((tclient *)arg)->goaway;
}

/* Drain: GOAWAY to the client; the call in flight completes; the connection then closes; new
 * connections are not taken. */
static void test_drain(void **state)
{
    sb_grpc_server *s = start(NULL);
    uint16_t port = sb_grpc_server_port(s);
    tclient cl;
    cl_connect(&loop, &cl, port, NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Hold");
    st_msg(t, "x", true);
    int one = 1;
    netfx_run_until(&loop, n_held_is, &one, "held call");
    sb_grpc_server_drain(s);
    sb_grpc_server_drain(s); /* idempotent */
    netfx_run_until(&loop, cl_has_goaway, &cl, "GOAWAY");
    assert_false(t->closed);
    assert_int_equal(sb_grpc_server_connections(s), 1);
    sb_grpc_call *c = T.held[0];
    assert_int_equal(sb_grpc_send(c, (const uint8_t *)"late", 4), 0);
    assert_int_equal(sb_grpc_finish(c, SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(st_replies(t), 1);
    netfx_run_until(&loop, cl_is_eof, &cl, "connection closed after the last call");
    assert_int_equal(sb_grpc_server_connections(s), 0);
    assert_int_equal(T.cancels, 0);
    cl_close(&cl, false);
    /* The listener is closed: a new connection is refused by the kernel. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_not_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    close(fd);
    finish(s);
}

/* The application ends a call from inside on_message: the other messages of the same DATA
 * frame are dropped, never handed over. */
static void test_finish_inside_on_message(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/One");
    uint8_t all[5 * 6];
    for (int i = 0; i < 5; i++) {
        uint8_t m[6] = {0, 0, 0, 0, 1, (uint8_t)('a' + i)};
        memcpy(all + 6 * i, m, 6);
    }
    st_write(t, all, sizeof(all), false);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(st_replies(t), 1);
    assert_int_equal(T.messages, 1);
    assert_int_equal(T.cancels, 0);
    /* The connection goes on. */
    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    st_msg(u, "z", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    cl_close(&cl, false);
    finish(s);
}

/* The client ends its side inside a message: INTERNAL, and the application hears on_cancel. */
static void test_truncated_message(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    uint8_t part[8] = {0, 0, 0, 0, 10, 'a', 'b', 'c'};
    st_write(t, part, sizeof(part), true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, SB_GRPC_INTERNAL);
    assert_int_equal(T.messages, 0);
    assert_int_equal(T.half_closes, 0);
    assert_int_equal(T.cancels, 1);
    cl_close(&cl, false);
    finish(s);
}

/* Request headers over max_header_bytes: RESOURCE_EXHAUSTED before the application sees the
 * call; the connection (and its HPACK state) serves the next call. */
static void test_headers_over_limit(void **state)
{
    sb_grpc_server_opts o = {.max_header_bytes = 512};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    char big[1200];
    memset(big, 'v', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    tstream *t = cl_open_with(&cl, "/t.Echo/Echo", "x-big", big);
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, SB_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(T.calls, 0);
    tstream *u = cl_open_with(&cl, "/t.Echo/Echo", "x-small", "v");
    st_msg(u, "y", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    assert_int_equal(T.calls, 1);
    cl_close(&cl, false);
    finish(s);
}

static bool calls_are(void *arg)
{
    return T.calls == *(int *)arg;
}

/* Headers reach the application by lower-case name; the peer is "ip:port"; set_ctx moves new
 * calls to the new owner while a call begun before keeps its own. */
static void test_headers_peer_and_set_ctx(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open_with(&cl, "/t.Echo/Hold", "x-request-id", "r-1");
    st_msg(t, "x", false);
    int one = 1, two = 2;
    netfx_run_until(&loop, n_held_is, &one, "held call");
    size_t len = 0;
    const char *v = sb_grpc_call_header(T.held[0], "x-request-id", &len);
    assert_non_null(v);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "r-1", 3);
    assert_null(sb_grpc_call_header(T.held[0], "x-absent", NULL));
    assert_non_null(strstr(sb_grpc_call_peer(T.held[0]), "127.0.0.1:"));
    assert_ptr_equal(T.ctx_seen, &ctx_token);
    int other;
    sb_grpc_server_set_ctx(s, &other);
    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    st_msg(u, "y", true);
    netfx_run_until(&loop, calls_are, &two, "second call");
    assert_ptr_equal(T.ctx_seen, &other);
    st_wait_closed(&loop, u);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_NOT_FOUND, "gone 100%\n"), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, SB_GRPC_NOT_FOUND);
    assert_string_equal(t->grpc_message, "gone 100%25%0A"); /* percent-encoded on the wire */
    cl_close(&cl, false);
    finish(s);
}

static bool n_cancels_at_least(void *arg)
{
    return T.cancels >= *(int *)arg;
}

/* stop: every call not finished hears on_cancel (once), and nothing after. */
static void test_stop_cancels_calls(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    for (int i = 0; i < 3; i++)
        st_msg(cl_open(&cl, "/t.Echo/Hold"), "x", false);
    int three = 3;
    netfx_run_until(&loop, n_held_is, &three, "3 held calls");
    sb_grpc_server_stop(s);
    assert_int_equal(T.cancels, 3);
    assert_int_equal(T.finish_in_cancel_rc, -1);
    netfx_run_until(&loop, cl_is_eof, &cl, "connection closed");
    cl_close(&cl, false);
    netfx_loop_finish(&loop);
    assert_int_equal(T.cancels, 3);
    (void)n_cancels_at_least;
}

/* Not HTTP/2 (an HTTP/1.1 request), or a valid preface then a frame that breaks the protocol:
 * that connection closes (GOAWAY first for the latter), counted; the server goes on. */
static void test_protocol_errors(void **state)
{
    sb_grpc_server *s = start(NULL);
    uint16_t port = sb_grpc_server_port(s);
    netfx_client h1;
    netfx_connect(&loop, &h1, port);
    netfx_sends(&h1, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    netfx_wait_eof(&loop, &h1);
    netfx_close(&h1, false);
    assert_int_equal(stats(s).protocol_errors, 1);

    netfx_client bad;
    netfx_connect(&loop, &bad, port);
    netfx_sends(&bad, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    /* SETTINGS, then DATA on stream 0: a connection error (RFC 9113 6.1). */
    static const char frames[] = "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                                 "\x00\x00\x02\x00\x00\x00\x00\x00\x00hi";
    netfx_send(&bad, frames, sizeof(frames) - 1);
    netfx_wait_eof(&loop, &bad);
    netfx_close(&bad, false);
    assert_int_equal(stats(s).protocol_errors, 2);

    tclient cl;
    cl_connect(&loop, &cl, port, NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "still", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(T.calls, 1);
    cl_close(&cl, false);
    finish(s);
}

/* A PING flood (thousands in one read, more ACKs than nghttp2 queues): nghttp2's guard ends
 * the session; the connection is closed and counted, other connections go on. */
static void test_ping_flood(void **state)
{
    sb_grpc_server *s = start(NULL);
    uint16_t port = sb_grpc_server_port(s);
    tclient good;
    cl_connect(&loop, &good, port, NULL);
    tstream *held = cl_open(&good, "/t.Echo/Hold");
    st_msg(held, "x", false);
    int one = 1;
    netfx_run_until(&loop, n_held_is, &one, "held call");
    netfx_client bad;
    netfx_connect(&loop, &bad, port);
    static char flood[24 + 9 + 3000 * 17];
    size_t n = 0;
    memcpy(flood, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    n += 24;
    memcpy(flood + n, "\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9); /* SETTINGS, empty */
    n += 9;
    for (int i = 0; i < 3000; i++) {
        memcpy(flood + n,
               "\x00\x00\x08\x06\x00\x00\x00\x00\x00"
               "12345678",
               17); /* PING */
        n += 17;
    }
    netfx_send(&bad, flood, n);
    netfx_wait_eof(&loop, &bad);
    netfx_close(&bad, false);
    assert_int_equal(stats(s).protocol_errors, 1);
    assert_int_equal(T.cancels, 0);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, held);
    assert_int_equal(held->grpc_status, 0);
    cl_close(&good, false);
    finish(s);
}

static bool all_closed_or_held(void *arg)
{
    tclient *cl = arg;
    int closed = 0;
    for (int i = 0; i < cl->n; i++)
        closed += cl->s[i].closed;
    return T.n_held + closed == cl->n;
}

/* max_concurrent_streams goes out in SETTINGS and holds even before the client has applied
 * them: the streams past it are refused (REFUSED_STREAM, safe to retry), never seen. */
static void test_max_concurrent_streams(void **state)
{
    sb_grpc_server_opts o = {.max_concurrent_streams = 10};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    for (int i = 0; i < 15; i++)
        st_msg(cl_open(&cl, "/t.Echo/Hold"), "x", false);
    netfx_run_until(&loop, all_closed_or_held, &cl, "15 streams held or refused");
    assert_int_equal(T.n_held, 10);
    assert_int_equal(stats(s).open_calls, 10);
    for (int i = 0; i < cl.n; i++)
        if (cl.s[i].closed)
            assert_int_equal(cl.s[i].close_code, NGHTTP2_REFUSED_STREAM);
    assert_int_equal(stats(s).protocol_errors, 0);
    while (T.n_held)
        assert_int_equal(sb_grpc_finish(T.held[--T.n_held], SB_GRPC_OK, NULL), 0);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "room again", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    cl_close(&cl, false);
    finish(s);
}

/* Past max_connections a new connection is closed at once and counted. */
static void test_max_connections(void **state)
{
    sb_grpc_server_opts o = {.max_connections = 2};
    sb_grpc_server *s = start(&o);
    uint16_t port = sb_grpc_server_port(s);
    tclient a, b;
    cl_connect(&loop, &a, port, NULL);
    cl_connect(&loop, &b, port, NULL);
    tstream *r = cl_open(&a, "/t.Echo/Echo"); /* both have opened a stream: neither makes room */
    st_msg(r, "x", true);
    st_wait_closed(&loop, r);
    tstream *t = cl_open(&b, "/t.Echo/Echo");
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    assert_int_equal(sb_grpc_server_connections(s), 2);
    netfx_client c;
    netfx_connect(&loop, &c, port);
    netfx_wait_eof(&loop, &c);
    netfx_close(&c, false);
    assert_int_equal(stats(s).connections_refused, 1);
    assert_int_equal(sb_grpc_server_connections(s), 2);
    cl_close(&a, false);
    cl_close(&b, false);
    finish(s);
}

/* A connection with no call open for idle_ms gets GOAWAY and is closed (the loop waits on the
 * server's own timer, nothing sleeps). */
static void test_idle_close(void **state)
{
    sb_grpc_server_opts o = {.idle_ms = 30};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    netfx_run_until(&loop, cl_is_eof, &cl, "idle close");
    assert_true(cl.goaway);
    assert_int_equal(sb_grpc_server_connections(s), 0);
    assert_int_equal(stats(s).protocol_errors, 0);
    cl_close(&cl, false);
    finish(s);
}

/* TLS with ALPN h2 serves calls; a client that offers only http/1.1, or speaks plain h2c to
 * the TLS port, is closed and counted; the server goes on. */
static void test_tls(void **state)
{
    char cert[64], key[64];
    make_cert(cert, key);
    sb_grpc_server_opts o = {.tls_cert_file = cert, .tls_key_file = key};
    sb_grpc_server *s = start(&o);
    uint16_t port = sb_grpc_server_port(s);

    tclient cl;
    cl_connect(&loop, &cl, port, "h2");
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    static char big[100000];
    memset(big, 'q', sizeof(big) - 1);
    st_msg(t, big, true);
    st_wait_closed(&loop, t);
    assert_true(cl.tls_ready);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(t->in_len, 5 + sizeof(big) - 1);

    tclient h1;
    cl_connect(&loop, &h1, port, "http/1.1");
    netfx_run_until(&loop, cl_is_eof, &h1, "closed without h2");
    assert_false(h1.tls_ready);
    assert_int_equal(stats(s).protocol_errors, 1);

    tclient plain;
    cl_connect(&loop, &plain, port, NULL);
    netfx_run_until(&loop, cl_is_eof, &plain, "closed: not TLS");
    assert_int_equal(stats(s).protocol_errors, 2);

    tstream *u = cl_open(&cl, "/t.Echo/Echo");
    st_msg(u, "again", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    cl_close(&cl, false);
    cl_close(&h1, false);
    cl_close(&plain, false);
    finish(s);
    unlink(cert);
    unlink(key);
}

/* A certificate without its key (or a file that is not there) fails start, never a crash. */
static void test_tls_bad_config(void **state)
{
    assert_int_equal(uv_loop_init(&loop), 0);
    sb_grpc_server *s = NULL;
    sb_grpc_server_opts o = {.tls_cert_file = "/nonexistent.pem", .tls_key_file = "/nonexistent.key"};
    assert_int_equal(sb_grpc_server_start(&loop, "127.0.0.1", 0, &o, &H, NULL, &s), -1);
    sb_grpc_server_opts half = {.tls_cert_file = "/nonexistent.pem"};
    assert_int_equal(sb_grpc_server_start(&loop, "127.0.0.1", 0, &half, &H, NULL, &s), -1);
    assert_null(s);
    netfx_loop_finish(&loop);
}

typedef struct got_bytes {
    tstream *t;
    size_t n;
} got_bytes_t;

static bool has_bytes(void *arg)
{
    got_bytes_t *g = arg;
    return g->t->in_len >= g->n;
}

/* A large message goes out whole (its buffer is given back after it), and only later does
 * the application finish: the trailers follow from an empty buffer. (Found by the grpcio
 * client: the data source copied from a freed, NULL buffer.) */
static void test_finish_after_large_message(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Hold");
    st_msg(t, "x", false);
    int one = 1;
    netfx_run_until(&loop, n_held_is, &one, "held call");
    static uint8_t big[200000];
    memset(big, 'b', sizeof(big));
    assert_int_equal(sb_grpc_send(T.held[0], big, sizeof(big)), 0);
    got_bytes_t g = {t, 5 + sizeof(big)};
    netfx_run_until(&loop, has_bytes, &g, "the large message");
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(st_replies(t), 1);
    cl_close(&cl, false);
    finish(s);
}

static bool flood_stalled(void *arg)
{
    got_bytes_t *g = arg;
    return g->t->in_len >= g->n && T.flood_waiting;
}

/* A client that does not take what it is sent (its HTTP/2 window closed: what a peer that
 * does not read comes to): sends pass write_high_water (send returns 1) and no on_drain comes
 * while it takes nothing; once it does, on_drain comes, the application sends on, and the
 * answer arrives whole and in order. The stall is the window's, not the kernel's, so the test
 * does not depend on socket buffer sizes. */
static void test_backpressure(void **state)
{
    sb_grpc_server_opts o = {.write_high_water = 64 * 1024};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect_opt(&loop, &cl, sb_grpc_server_port(s), NULL, true);
    tstream *t = cl_open(&cl, "/t.Echo/Flood");
    got_bytes_t g = {t, 65535}; /* the default stream window, all of it */
    netfx_run_until(&loop, flood_stalled, &g, "a closed window and a waiting sender");
    assert_int_equal(t->in_len, 65535);
    assert_true(T.flood_backpressure >= 1);
    int drains = T.drains;
    size_t sent = T.flood_sent;
    /* Nothing can move: turning the loop changes nothing. */
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(T.drains, drains);
    assert_int_equal(T.flood_sent, sent);
    assert_true(sent < 4 * 64 * 1024); /* the application stopped near the mark */
    /* Now it reads: takes what it has and opens wide windows, and the application sends
     * 512 KiB more through it (a small write_high_water makes for small writes, each waiting
     * on the receiver's delayed ACK on loopback: enough to show the flow, not a bulk test). */
    T.flood_limit = T.flood_sent + (512u << 10);
    cl.consume = true;
    nghttp2_session_consume(cl.ng, t->id, t->in_len);
    nghttp2_session_set_local_window_size(cl.ng, NGHTTP2_FLAG_NONE, t->id, 16 << 20);
    nghttp2_session_set_local_window_size(cl.ng, NGHTTP2_FLAG_NONE, 0, 64 << 20);
    cl_pump(&cl);
    st_wait_closed(&loop, t);
    assert_true(T.drains > drains);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(T.flood_sent, T.flood_limit);
    assert_int_equal(t->in_len, T.flood_sent / 16384 * (16384 + 5));
    assert_int_equal(st_replies(t), T.flood_sent / 16384);
    cl_close(&cl, false);
    finish(s);
}

/* An application that ignores backpressure while the peer's HTTP/2 window is closed: the
 * queue passes twice write_high_water, yet the connection goes on being read (a call opened
 * meanwhile is served, and the WINDOW_UPDATE that lets the queue out is seen): a server that
 * stopped reading here would never hear the window open. */
static void test_window_blocked_queue_keeps_reading(void **state)
{
    sb_grpc_server_opts o = {.write_high_water = 64 * 1024};
    sb_grpc_server *s = start(&o);
    tclient cl;
    cl_connect_opt(&loop, &cl, sb_grpc_server_port(s), NULL, true);
    tstream *blast = cl_open(&cl, "/t.Echo/Blast");
    got_bytes_t g = {blast, 65535};
    netfx_run_until(&loop, has_bytes, &g, "a full window");
    tstream *later = cl_open(&cl, "/t.Echo/Echo");
    st_msg(later, "later", true);
    int two = 2; /* its answer waits for the connection window too; its request was read */
    netfx_run_until(&loop, calls_are, &two, "the later call");
    netfx_run_until(&loop, messages_are, &(int){1}, "the later call's message");
    assert_int_equal(blast->in_len, 65535); /* the window is still closed */
    cl.consume = true;
    nghttp2_session_consume(cl.ng, blast->id, blast->in_len);
    nghttp2_session_set_local_window_size(cl.ng, NGHTTP2_FLAG_NONE, blast->id, 16 << 20);
    nghttp2_session_set_local_window_size(cl.ng, NGHTTP2_FLAG_NONE, 0, 64 << 20);
    cl_pump(&cl);
    st_wait_closed(&loop, later);
    assert_int_equal(later->grpc_status, 0);
    assert_int_equal(st_replies(later), 1);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, blast);
    assert_int_equal(blast->in_len, 16 * (16384 + 5));
    cl_close(&cl, false);
    finish(s);
}

typedef struct server_bytes {
    sb_grpc_server *s;
    size_t n;
} server_bytes;

static bool buffered_at_least(void *arg)
{
    server_bytes *b = arg;
    return stats(b->s).buffered_bytes >= b->n;
}
static bool buffered_is(void *arg)
{
    server_bytes *b = arg;
    return stats(b->s).buffered_bytes == b->n;
}

/* Starts a call on the client whose first message declares len bytes and sends the first
 * `first` of them. */
static tstream *partial_message(tclient *cl, size_t len, size_t first)
{
    static uint8_t body[1 << 20];
    memset(body, 'p', sizeof(body));
    assert_true(first <= sizeof(body));
    tstream *t = cl_open(cl, "/t.Echo/Hold");
    uint8_t pre[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    st_write(t, pre, 5, false);
    st_write(t, body, first, false);
    return t;
}

/* Unfinished messages are bounded over all connections (max_buffered_bytes), not only per
 * connection by its window: two connections each hold 300 KB of a 400 KB message; a third
 * whose bytes would pass the 1 MiB budget has its call ended RESOURCE_EXHAUSTED (its
 * application hears on_cancel), its connection lives on, and the first two are untouched.
 * The charge is the buffers' capacity (at least the bytes held, never past the message), and
 * it is released as messages are handed over or their calls end. */
static void test_buffered_budget_over_all_connections(void **state)
{
    sb_grpc_server_opts o = {.max_message_bytes = 1 << 20, .max_buffered_bytes = 1 << 20};
    sb_grpc_server *s = start(&o);
    uint16_t port = sb_grpc_server_port(s);
    tclient a, b, c;
    cl_connect(&loop, &a, port, NULL);
    cl_connect(&loop, &b, port, NULL);
    cl_connect(&loop, &c, port, NULL);
    const size_t len = 400000, first = 300000;
    tstream *ta = partial_message(&a, len, first);
    server_bytes held = {s, first};
    netfx_run_until(&loop, buffered_at_least, &held, "a's 300 KB held");
    tstream *tb = partial_message(&b, len, first);
    held.n = 2 * first;
    netfx_run_until(&loop, buffered_at_least, &held, "b's 300 KB held");
    size_t two = stats(s).buffered_bytes;
    assert_true(two <= 2 * (len + 1));
    tstream *tc = partial_message(&c, len, first);
    st_wait_closed(&loop, tc);
    assert_int_equal(tc->grpc_status, SB_GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(tc->grpc_message, "limit"));
    assert_int_equal(T.cancels, 1);
    assert_int_equal(stats(s).calls_over_budget, 1);
    assert_int_equal(stats(s).calls_refused, 1);
    assert_int_equal(stats(s).buffered_bytes, two); /* c's partial buffer is gone, not charged */
    assert_false(ta->closed);
    assert_false(tb->closed);
    /* a's message completes: handed over, its charge released. */
    static uint8_t rest[100000];
    memset(rest, 'p', sizeof(rest));
    st_write(ta, rest, len - first, false);
    netfx_run_until(&loop, messages_are, &(int){1}, "a's message");
    assert_true(stats(s).buffered_bytes >= first && stats(s).buffered_bytes <= len + 1);
    /* c's connection serves the next call. */
    tstream *tc2 = cl_open(&c, "/t.Echo/Echo");
    st_msg(tc2, "after", true);
    st_wait_closed(&loop, tc2);
    assert_int_equal(tc2->grpc_status, 0);
    assert_false(c.eof);
    /* b gives up: its charge goes with its call. */
    nghttp2_submit_rst_stream(b.ng, NGHTTP2_FLAG_NONE, tb->id, NGHTTP2_CANCEL);
    cl_pump(&b);
    held.n = 0;
    netfx_run_until(&loop, buffered_is, &held, "nothing held");
    assert_int_equal(T.cancels, 2);
    assert_int_equal(T.n_held, 1);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, ta);
    assert_int_equal(ta->grpc_status, 0);
    cl_close(&a, false);
    cl_close(&b, false);
    cl_close(&c, false);
    finish(s);
}

static bool handshake_timeouts_are(void *arg)
{
    server_bytes *b = arg;
    return stats(b->s).handshake_timeouts == b->n;
}

/* A connection must open its first stream within handshake_ms: a bare socket that sends
 * nothing, and a client that sends the preface and SETTINGS but opens no stream, are closed
 * (the latter with GOAWAY) and counted; a connection that opened a stream before is not
 * touched by the deadline (idle_ms is long). (Before, each held its max_connections slot for
 * idle_ms.) */
static void test_handshake_deadline(void **state)
{
    sb_grpc_server_opts o = {.handshake_ms = 50};
    sb_grpc_server *s = start(&o);
    uint16_t port = sb_grpc_server_port(s);
    tclient good;
    cl_connect(&loop, &good, port, NULL);
    tstream *t = cl_open(&good, "/t.Echo/Hold");
    st_msg(t, "x", false);
    netfx_run_until(&loop, n_held_is, &(int){1}, "held call");
    netfx_client bare;
    netfx_connect(&loop, &bare, port);
    tclient silent;
    cl_connect(&loop, &silent, port, NULL);
    netfx_wait_eof(&loop, &bare);
    netfx_run_until(&loop, cl_is_eof, &silent, "the silent client closed");
    assert_true(silent.goaway);
    server_bytes two = {s, 2};
    netfx_run_until(&loop, handshake_timeouts_are, &two, "two handshake timeouts");
    assert_int_equal(sb_grpc_server_connections(s), 1);
    assert_int_equal(stats(s).protocol_errors, 0);
    /* The good connection (older than both) goes on. */
    assert_false(good.eof);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    assert_int_equal(T.cancels, 0);
    netfx_close(&bare, false);
    cl_close(&silent, false);
    cl_close(&good, false);
    finish(s);
}

/* On the TLS port: a socket that never sends its ClientHello is closed at the deadline too. */
static void test_handshake_deadline_tls(void **state)
{
    char cert[64], key[64];
    make_cert(cert, key);
    sb_grpc_server_opts o = {.tls_cert_file = cert, .tls_key_file = key, .handshake_ms = 50};
    sb_grpc_server *s = start(&o);
    netfx_client bare;
    netfx_connect(&loop, &bare, sb_grpc_server_port(s));
    netfx_wait_eof(&loop, &bare);
    assert_int_equal(stats(s).handshake_timeouts, 1);
    assert_int_equal(bare.in_len, 0); /* nothing was sent: no TLS, no HTTP/2 */
    /* A client that does its part is served. */
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), "h2");
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    netfx_close(&bare, false);
    cl_close(&cl, false);
    finish(s);
    unlink(cert);
    unlink(key);
}

static bool connections_are(void *arg)
{
    server_bytes *b = arg;
    return sb_grpc_server_connections(b->s) == b->n;
}

/* At max_connections, the oldest connection that has opened no stream makes room for the new
 * one (a held call elsewhere is untouched); once every connection has opened a stream, a new
 * one is refused. */
static void test_max_connections_evicts_fresh(void **state)
{
    sb_grpc_server_opts o = {.max_connections = 2};
    sb_grpc_server *s = start(&o);
    uint16_t port = sb_grpc_server_port(s);
    tclient a;
    cl_connect(&loop, &a, port, NULL);
    tstream *t = cl_open(&a, "/t.Echo/Hold");
    st_msg(t, "x", false);
    netfx_run_until(&loop, n_held_is, &(int){1}, "held call");
    netfx_client fresh;
    netfx_connect(&loop, &fresh, port);
    server_bytes two = {s, 2};
    netfx_run_until(&loop, connections_are, &two, "two connections");
    tclient c;
    cl_connect(&loop, &c, port, NULL);
    tstream *u = cl_open(&c, "/t.Echo/Echo");
    st_msg(u, "room made", true);
    st_wait_closed(&loop, u);
    assert_int_equal(u->grpc_status, 0);
    netfx_wait_eof(&loop, &fresh);
    assert_int_equal(stats(s).connections_evicted, 1);
    assert_int_equal(stats(s).connections_refused, 0);
    assert_int_equal(sb_grpc_server_connections(s), 2);
    netfx_client d;
    netfx_connect(&loop, &d, port);
    netfx_wait_eof(&loop, &d);
    assert_int_equal(stats(s).connections_refused, 1);
    assert_int_equal(stats(s).connections_evicted, 1);
    assert_int_equal(T.cancels, 0);
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    netfx_close(&fresh, false);
    netfx_close(&d, false);
    cl_close(&a, false);
    cl_close(&c, false);
    finish(s);
}

/* Drain: a stream the client opened while the server's GOAWAY was on its way (the client
 * has not read it yet) is served, not refused: the first GOAWAY is a notice naming no stream,
 * and the final one (naming the last stream processed) follows the ack of the PING sent
 * with it. Then the connection closes once its calls are done. */
static void test_drain_serves_streams_in_flight(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Hold");
    st_msg(t, "x", false);
    netfx_run_until(&loop, n_held_is, &(int){1}, "held call");
    cl.hold = true; /* the client reads nothing for now */
    cl_pump(&cl);
    sb_grpc_server_drain(s);
    for (int i = 0; i < 20; i++) /* the server writes what drain queued */
        uv_run(&loop, UV_RUN_NOWAIT);
    tstream *u = cl_open(&cl, "/t.Echo/Echo"); /* in flight: opened before the GOAWAY is read */
    st_msg(u, "in flight", true);
    cl.hold = false;
    cl_pump(&cl);
    st_wait_closed(&loop, u);
    assert_true(cl.goaway);
    assert_int_equal(u->close_code, NGHTTP2_NO_ERROR);
    assert_int_equal(u->grpc_status, 0);
    assert_int_equal(st_replies(u), 1);
    assert_int_equal(sb_grpc_server_connections(s), 1); /* t is still held */
    assert_int_equal(sb_grpc_finish(T.held[0], SB_GRPC_OK, NULL), 0);
    st_wait_closed(&loop, t);
    assert_int_equal(t->grpc_status, 0);
    netfx_run_until(&loop, cl_is_eof, &cl, "closed after the last call");
    assert_int_equal(sb_grpc_server_connections(s), 0);
    assert_int_equal(T.cancels, 0);
    assert_int_equal(stats(s).protocol_errors, 0);
    cl_close(&cl, false);
    finish(s);
}

/* Drain with a peer that never acks the PING (it reads nothing): the final GOAWAY goes after
 * the drain timer (a second) and the connection, with no call open, closes. */
static void test_drain_without_ping_ack(void **state)
{
    sb_grpc_server *s = start(NULL);
    tclient cl;
    cl_connect(&loop, &cl, sb_grpc_server_port(s), NULL);
    tstream *t = cl_open(&cl, "/t.Echo/Echo");
    st_msg(t, "x", true);
    st_wait_closed(&loop, t);
    cl.hold = true;
    cl_pump(&cl);
    sb_grpc_server_drain(s);
    server_bytes none = {s, 0};
    netfx_run_until(&loop, connections_are, &none, "closed without an ack");
    cl.hold = false;
    cl_pump(&cl);
    netfx_run_until(&loop, cl_is_eof, &cl, "EOF");
    assert_true(cl.goaway);
    cl_close(&cl, false);
    finish(s);
}

/* ---- an independent implementation: Python's grpcio (gRPC core, C++) as the client ---- */

static const char PY_CLIENT[] =
    "import sys\n"
    "try:\n"
    "    import grpc\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "port = sys.argv[1]\n"
    "if len(sys.argv) > 2:\n"
    "    creds = grpc.ssl_channel_credentials(open(sys.argv[2], 'rb').read())\n"
    "    ch = grpc.secure_channel('127.0.0.1:' + port, creds,\n"
    "                             options=[('grpc.ssl_target_name_override', 'localhost')])\n"
    "else:\n"
    "    ch = grpc.insecure_channel('127.0.0.1:' + port)\n"
    "msgs = [b'a', b'', b'x' * 300000, b'end']\n"
    "got = list(ch.stream_stream('/t.Echo/Echo')(iter(msgs), timeout=20))\n"
    "assert got == msgs, [len(g) for g in got]\n"
    "unary = ch.unary_unary('/t.Echo/Echo')\n"
    "futs = [unary.future(b'n%d' % i, timeout=20) for i in range(100)]\n"
    "assert [f.result() for f in futs] == [b'n%d' % i for i in range(100)]\n"
    "for method, code, details in (('/t.Echo/Nope', grpc.StatusCode.UNIMPLEMENTED, None),\n"
    "                              ('/t.Echo/Fail', grpc.StatusCode.NOT_FOUND, 'not here: 100% \\u00e9')):\n"
    "    try:\n"
    "        ch.unary_unary(method)(b'x', timeout=20)\n"
    "        sys.exit('no error from ' + method)\n"
    "    except grpc.RpcError as e:\n"
    "        assert e.code() == code, (method, e.code())\n"
    "        assert details is None or e.details() == details, e.details()\n"
    "ch.close()\n";

static bool py_done;
static int64_t py_status;

static void on_py_exit(uv_process_t *p, int64_t status, int sig)
{
    py_done = true;
    py_status = sig ? 128 + sig : status;
    uv_close((uv_handle_t *)p, NULL);
}

static void on_py_safety(uv_timer_t *t)
{
    netfx_timed_out = true;
}

/* Runs the Python client against the server on this loop; skips if grpcio is not installed. */
static void run_python_client(sb_grpc_server *s, const char *cert)
{
    char port[8];
    snprintf(port, sizeof(port), "%u", sb_grpc_server_port(s));
    char *args[] = {"python3", "-c", (char *)PY_CLIENT, port, (char *)cert, NULL};
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE}, {.flags = UV_INHERIT_FD, .data.fd = 1}, {.flags = UV_INHERIT_FD, .data.fd = 2}};
    uv_process_options_t po = {
        .file = "/usr/bin/python3", .args = args, .exit_cb = on_py_exit, .stdio = stdio, .stdio_count = 3};
    uv_process_t proc;
    py_done = false;
    int rc = uv_spawn(&loop, &proc, &po);
    if (rc < 0) {
        finish(s);
        skip();
    }
    /* Python and gRPC core start slowly on a loaded machine: a longer safety net here. */
    uv_timer_t safety;
    uv_timer_init(&loop, &safety);
    netfx_timed_out = false;
    uv_timer_start(&safety, on_py_safety, 60000, 0);
    while (!py_done && !netfx_timed_out)
        uv_run(&loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&safety, NULL);
    if (!py_done) {
        uv_process_kill(&proc, SIGKILL);
        while (!py_done)
            uv_run(&loop, UV_RUN_ONCE);
        fail_msg("the Python gRPC client did not finish");
    }
    if (py_status == 77) {
        finish(s);
        skip();
    }
    assert_int_equal(py_status, 0);
    assert_int_equal(T.cancels, 0);
    finish(s);
}

static void test_python_grpcio_client(void **state)
{
    run_python_client(start(NULL), NULL);
}

static void test_python_grpcio_client_tls(void **state)
{
    char cert[64], key[64];
    make_cert(cert, key);
    sb_grpc_server_opts o = {.tls_cert_file = cert, .tls_key_file = key};
    run_python_client(start(&o), cert);
    unlink(cert);
    unlink(key);
}

int main(void)
{
    if (getenv("TEST_FILTER")) /* one case by name, for debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_message),
        cmocka_unit_test(test_split_and_coalesced_messages),
        cmocka_unit_test(test_concurrent_streams),
        cmocka_unit_test(test_message_over_limit),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_unfinished_messages_hold_the_connection_window),
        cmocka_unit_test(test_client_reset),
        cmocka_unit_test(test_connection_drop),
        cmocka_unit_test(test_compressed_flag),
        cmocka_unit_test(test_not_grpc_requests),
        cmocka_unit_test(test_headers_only_request),
        cmocka_unit_test(test_drain),
        cmocka_unit_test(test_finish_inside_on_message),
        cmocka_unit_test(test_truncated_message),
        cmocka_unit_test(test_headers_over_limit),
        cmocka_unit_test(test_headers_peer_and_set_ctx),
        cmocka_unit_test(test_stop_cancels_calls),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_ping_flood),
        cmocka_unit_test(test_max_concurrent_streams),
        cmocka_unit_test(test_max_connections),
        cmocka_unit_test(test_idle_close),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_tls_bad_config),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_finish_after_large_message),
        cmocka_unit_test(test_window_blocked_queue_keeps_reading),
        cmocka_unit_test(test_buffered_budget_over_all_connections),
        cmocka_unit_test(test_handshake_deadline),
        cmocka_unit_test(test_handshake_deadline_tls),
        cmocka_unit_test(test_max_connections_evicts_fresh),
        cmocka_unit_test(test_drain_serves_streams_in_flight),
        cmocka_unit_test(test_drain_without_ping_ack),
        cmocka_unit_test(test_python_grpcio_client),
        cmocka_unit_test(test_python_grpcio_client_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
