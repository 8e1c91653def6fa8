/* Tests src/proto/h1.c, the fast path for HTTP/1.x heads: it must never accept what http-parser
 * would not, and what it accepts must be framed and read exactly as http-parser reads it (the
 * gateway answers the rest through http-parser, as before). Every head the fast path takes is
 * run through http-parser here and compared: method or status, target, fields, Content-Length,
 * keep-alive verdict, and where the message ends. */
#include "sb_test.h"

#include <http_parser.h>

#include "proto/h1.h"

#define MAXF 64

/* ---- the reference: http-parser's reading of a whole message ---- */

typedef struct ref {
    char url[4096];
    size_t url_len;
    char names[MAXF][512], values[MAXF][2048];
    size_t nlen[MAXF], vlen[MAXF];
    int n; /* fields */
    bool in_value;
    char body[8192];
    size_t body_len;
    bool headers_done, complete;
} ref;

static int r_url(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    assert_true(r->url_len + len <= sizeof r->url);
    memcpy(r->url + r->url_len, at, len);
    r->url_len += len;
    return 0;
}

static int r_field(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    if (r->in_value || r->n == 0) {
        if (r->n == MAXF)
            return -1;
        r->n++;
        r->nlen[r->n - 1] = r->vlen[r->n - 1] = 0;
        r->in_value = false;
    }
    size_t i = (size_t)r->n - 1;
    assert_true(r->nlen[i] + len <= sizeof r->names[i]);
    memcpy(r->names[i] + r->nlen[i], at, len);
    r->nlen[i] += len;
    return 0;
}

static int r_value(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    if (r->n == 0)
        return -1;
    size_t i = (size_t)r->n - 1;
    r->in_value = true;
    assert_true(r->vlen[i] + len <= sizeof r->values[i]);
    memcpy(r->values[i] + r->vlen[i], at, len);
    r->vlen[i] += len;
    return 0;
}

static int r_headers(http_parser *p)
{
    ((ref *)p->data)->headers_done = true;
    return 0;
}

static int r_body(http_parser *p, const char *at, size_t len)
{
    ref *r = p->data;
    assert_true(r->body_len + len <= sizeof r->body);
    memcpy(r->body + r->body_len, at, len);
    r->body_len += len;
    return 0;
}

static int r_complete(http_parser *p)
{
    ((ref *)p->data)->complete = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings ref_settings = {.on_url = r_url,
                                                  .on_header_field = r_field,
                                                  .on_header_value = r_value,
                                                  .on_headers_complete = r_headers,
                                                  .on_body = r_body,
                                                  .on_message_complete = r_complete};

/* Feeds msg[0..len) to http-parser, split at `split` (0: whole); returns bytes consumed. */
static size_t ref_run(enum http_parser_type type, const char *msg, size_t len, size_t split, http_parser *p, ref *r)
{
    memset(r, 0, sizeof *r);
    http_parser_init(p, type);
    p->data = r;
    size_t used = 0;
    if (split && split < len) {
        used = http_parser_execute(p, &ref_settings, msg, split);
        if (used < split || HTTP_PARSER_ERRNO(p) != HPE_OK)
            return used;
    }
    return used + http_parser_execute(p, &ref_settings, msg + used, len - used);
}

/* The fast path took msg as a head: http-parser must agree on everything. `len` covers the
 * head and at least its Content-Length of body. */
static void agree(enum http_parser_type type, const char *msg, size_t len, const sb_h1_head *h, const sb_h1_field *f,
                  size_t split)
{
    static http_parser p;
    static ref r;
    int64_t cl = h->content_length < 0 ? 0 : h->content_length;
    assert_true(h->head_len + (size_t)cl <= len);
    size_t end = h->head_len + (size_t)cl;
    size_t used = ref_run(type, msg, end, split, &p, &r);
    if (!r.complete || used != end) {
        fprintf(stderr, "http-parser disagrees (%s, used %zu of %zu, complete %d) on:\n%.*s\n",
                http_errno_name(HTTP_PARSER_ERRNO(&p)), used, end, r.complete, (int)end, msg);
        fail();
    }
    if (type == HTTP_REQUEST) {
        assert_int_equal(p.method, h->method);
        assert_int_equal(r.url_len, h->target_len);
        assert_memory_equal(r.url, msg + h->target_off, r.url_len);
    } else {
        assert_int_equal(p.status_code, h->status);
    }
    assert_int_equal(p.http_major, 1);
    assert_int_equal(p.http_minor, h->http_minor);
    assert_int_equal(r.n, (int)h->n_fields);
    for (int i = 0; i < r.n; i++) {
        assert_int_equal(r.nlen[i], f[i].name_len);
        assert_memory_equal(r.names[i], msg + f[i].name_off, f[i].name_len);
        assert_int_equal(r.vlen[i], f[i].value_len);
        assert_memory_equal(r.values[i], msg + f[i].value_off, f[i].value_len);
    }
    assert_int_equal(r.body_len, (size_t)cl);
    assert_memory_equal(r.body, msg + h->head_len, (size_t)cl);
    assert_int_equal(http_should_keep_alive(&p) != 0, h->keep_alive);
    /* One byte short of the body: http-parser has not ended the message either. */
    if (end > h->head_len) {
        ref_run(type, msg, end - 1, 0, &p, &r);
        assert_false(r.complete);
    }
}

static int fast(enum http_parser_type type, const char *msg, size_t len, sb_h1_head *h, sb_h1_field *f)
{
    return type == HTTP_REQUEST ? sb_h1_request(msg, len, 65536, f, MAXF, h)
                                : sb_h1_response(msg, len, 65536, f, MAXF, h);
}

static void take(enum http_parser_type type, const char *msg)
{
    sb_h1_head h;
    sb_h1_field f[MAXF];
    size_t len = strlen(msg);
    if (fast(type, msg, len, &h, f) != SB_H1_OK)
        fail_msg("deferred: %s", msg);
    agree(type, msg, len, &h, f, 0);
    agree(type, msg, len, &h, f, h.head_len / 2);
}

static void defer(enum http_parser_type type, const char *msg)
{
    sb_h1_head h;
    sb_h1_field f[MAXF];
    if (fast(type, msg, strlen(msg), &h, f) != SB_H1_DEFER)
        fail_msg("taken: %s", msg);
}

/* ---- cases ---- */

static void test_class_table(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool token = alnum || (c && strchr("!#$%&'*+-.^_`|~", c));
        bool value = (c >= 0x20 && c < 0x7f) || c == '\t';
        bool target = alnum || (c && strchr("-._~!$&'()*+,;=:@/?%", c));
        assert_int_equal((sb_h1_class[c] & SB_H1_TOKEN) != 0, token);
        assert_int_equal((sb_h1_class[c] & SB_H1_VALUE) != 0, value);
        assert_int_equal((sb_h1_class[c] & SB_H1_TARGET) != 0, target);
    }
}

static void test_requests_taken(void **state)
{
    (void)state;
    /* wrk's, curl's and the openai client's shapes. */
    take(HTTP_REQUEST, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 5\r\n"
                       "Content-Type: application/json\r\n\r\n{\"a\":1}");
    take(HTTP_REQUEST, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n");
    take(HTTP_REQUEST, "POST /v1/completions?x=1&y=%20 HTTP/1.1\r\nhost: h\r\naccept-encoding: gzip, deflate\r\n"
                       "connection: keep-alive\r\nauthorization: Bearer sk-abc.def\r\ncontent-length: 2\r\n"
                       "x-stainless-os: Linux\r\n\r\n{}");
    take(HTTP_REQUEST, "GET / HTTP/1.0\r\n\r\n");
    take(HTTP_REQUEST, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    take(HTTP_REQUEST, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    take(HTTP_REQUEST, "HEAD /a HTTP/1.1\r\nX:\t y\r\n\r\n");
    take(HTTP_REQUEST, "DELETE /admin/endpoints/a:1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    take(HTTP_REQUEST, "PUT /x HTTP/1.1\r\nContent-Length: 0003\r\n\r\nabc");
    take(HTTP_REQUEST, "OPTIONS /x HTTP/1.1\r\n\r\n");
    take(HTTP_REQUEST, "PATCH /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz");
    /* Pipelined: the head ends where it ends, whatever follows. */
    take(HTTP_REQUEST, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
}

static void test_requests_deferred(void **state)
{
    (void)state;
    /* Incomplete heads. */
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: x\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: x\r\n\r");
    defer(HTTP_REQUEST, "GET / HTT");
    /* Framing that needs judgement: request smuggling vectors among them. */
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nTransfer-Encodingx: 3\r\n\r\n"); /* http-parser refuses it */
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 1 \r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nContent-Length : 1\r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\n Content-Length: 1\r\n\r\na");
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nX: a\r\n b\r\n\r\n");   /* obs-fold */
    defer(HTTP_REQUEST, "POST / HTTP/1.1\nContent-Length: 1\n\na"); /* bare LF */
    defer(HTTP_REQUEST, "POST / HTTP/1.1\r\nX: a\rb\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n");
    defer(HTTP_REQUEST, "CONNECT h:443 HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "get / HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET  / HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET http://h/ HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET /a#b HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET /a\"b HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/2.0\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1 \r\n\r\n");
    defer(HTTP_REQUEST, "\r\nGET / HTTP/1.1\r\n\r\n");
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nX: \xc3\xa9\r\n\r\n"); /* obs-text: http-parser's to judge */
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nX:\r\n\r\n");          /* empty value */
    defer(HTTP_REQUEST, "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n");
    char nul[] = "GET / HTTP/1.1\r\nX: a_b\r\n\r\n";
    nul[20] = '\0';
    sb_h1_head h;
    sb_h1_field f[MAXF];
    assert_int_equal(sb_h1_request(nul, sizeof nul - 1, 65536, f, MAXF, &h), SB_H1_DEFER);
}

/* Long values are checked sixteen bytes at a time: a bad byte anywhere in one defers it. */
static void test_long_values(void **state)
{
    (void)state;
    static const unsigned char bad[] = {0x00, 0x01, 0x0d, 0x0a, 0x1f, 0x7f, 0x80, 0xff};
    char m[256];
    for (size_t pos = 0; pos < 40; pos++) {
        char v[41];
        memset(v, 'a', 40);
        v[40] = '\0';
        if (pos > 0 && pos < 39)
            v[pos] = '\t'; /* inside the value: whitespace at its ends is http-parser's */
        snprintf(m, sizeof m, "GET / HTTP/1.1\r\nX-Long: %s\r\n\r\n", v);
        take(HTTP_REQUEST, m);
        for (size_t b = 0; b < sizeof bad; b++) {
            size_t len = (size_t)snprintf(m, sizeof m, "GET / HTTP/1.1\r\nX-Long: b%s\r\n\r\n", v + 1);
            m[24 + pos] = (char)bad[b]; /* "GET / HTTP/1.1\r\nX-Long: " is 24 bytes */
            sb_h1_head h;
            sb_h1_field f[MAXF];
            if (sb_h1_request(m, len, 65536, f, MAXF, &h) != SB_H1_DEFER)
                fail_msg("byte 0x%02x at %zu taken", bad[b], pos);
        }
    }
}

static void test_limits(void **state)
{
    (void)state;
    const char *m = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    size_t len = strlen(m);
    sb_h1_head h;
    sb_h1_field f[3];
    assert_int_equal(sb_h1_request(m, len, 65536, f, 3, &h), SB_H1_OK);
    assert_int_equal(h.n_fields, 3);
    assert_int_equal(sb_h1_request(m, len, 65536, f, 2, &h), SB_H1_DEFER); /* too many fields */
    assert_int_equal(sb_h1_request(m, len, len, f, 3, &h), SB_H1_OK);
    assert_int_equal(sb_h1_request(m, len, len - 1, f, 3, &h), SB_H1_DEFER); /* past max_head */
    /* Never reads past len: every prefix of a head defers. */
    for (size_t k = 0; k < len; k++) {
        char *cut = malloc(k ? k : 1);
        memcpy(cut, m, k);
        assert_int_equal(sb_h1_request(cut, k, 65536, f, 3, &h), SB_H1_DEFER);
        free(cut);
    }
}

static void test_responses(void **state)
{
    (void)state;
    /* nginx's, uvicorn's (vLLM, SGLang) and llama.cpp's heads. */
    take(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Wed, 02 Dec 2026 23:00:00 GMT\r\n"
                        "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}");
    take(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 23:00:00 GMT\r\nserver: uvicorn\r\n"
                        "content-length: 3\r\ncontent-type: application/json\r\n\r\nabc");
    take(HTTP_RESPONSE, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    take(HTTP_RESPONSE, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx");
    take(HTTP_RESPONSE, "HTTP/1.1 404 \r\nContent-Length: 1\r\n\r\nx");
    /* Streams are chunked or read to the end: http-parser's. */
    defer(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    defer(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n");
    defer(HTTP_RESPONSE, "HTTP/1.1 100 Continue\r\n\r\n");
    defer(HTTP_RESPONSE, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
    defer(HTTP_RESPONSE, "HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\n");
    defer(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab");
    defer(HTTP_RESPONSE, "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nab");
    defer(HTTP_RESPONSE, "HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nab");
    defer(HTTP_RESPONSE, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n");
}

/* ---- generated heads: the fast path and http-parser over many variations ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static size_t pick(size_t n)
{
    return (size_t)(rnd() % n);
}

static const char *const some_names[] = {"Host",       "Content-Length",     "content-length",   "Transfer-Encoding",
                                         "Connection", "connection",         "Proxy-Connection", "Upgrade",
                                         "Expect",     "X-Request-Id",       "Authorization",    "a",
                                         "X_y",        "Content-Lengt",      "Keep-Alive",       "Te",
                                         "Trailer",    "Transfer-Encodingx", "Content-Lengthx"};
static const char *const some_values[] = {"5",
                                          "05",
                                          "0",
                                          "1",
                                          " 1",
                                          "1 ",
                                          "1,1",
                                          "-1",
                                          "+1",
                                          "99999999999999999999",
                                          "chunked",
                                          "gzip, chunked",
                                          "keep-alive",
                                          "Keep-Alive",
                                          "close",
                                          "CLOSE",
                                          "upgrade",
                                          "keep-alive, close",
                                          "100-continue",
                                          "h2c",
                                          "x",
                                          "a b",
                                          "a\tb",
                                          "\t",
                                          "",
                                          "\xff",
                                          "a\rb",
                                          "a\nb",
                                          "\x01"};
static const char some_bytes[] = "aZ09 \t:/?#%\"<>\\^`{|}[]\r\n\x01\x7f\x80-._~!$&'()*+,;=@";

static void append(char *buf, size_t *n, size_t cap, const char *s, size_t len)
{
    if (*n + len < cap) {
        memcpy(buf + *n, s, len);
        *n += len;
    }
}
static void appends(char *buf, size_t *n, size_t cap, const char *s)
{
    append(buf, n, cap, s, strlen(s));
}

/* Half of the messages are noisy (any variation), half clean but for the values and names. */
static bool noisy;
static bool odd(size_t k)
{
    return noisy && pick(k) == 0;
}

static size_t gen(enum http_parser_type type, char *buf, size_t cap)
{
    static const char *const methods[] = {"GET",   "POST",    "HEAD", "PUT", "DELETE", "OPTIONS",
                                          "PATCH", "CONNECT", "get",  "POS", "TRACE"};
    static const char *const eols[] = {"\r\n", "\r\n", "\r\n", "\r\n", "\n", "\r", " \r\n"};
    size_t n = 0;
    noisy = pick(2);
    if (type == HTTP_REQUEST) {
        appends(buf, &n, cap, methods[odd(2) ? pick(sizeof methods / sizeof *methods) : pick(7)]);
        appends(buf, &n, cap, odd(10) ? "  /" : " /");
        for (size_t k = pick(12); k--;)
            append(buf, &n, cap, odd(3) ? &some_bytes[pick(sizeof some_bytes - 1)] : &"abc/?=&%"[pick(8)], 1);
        appends(buf, &n, cap, odd(10) ? " HTTP/2." : " HTTP/1.");
        appends(buf, &n, cap, pick(2) ? "1" : "0");
    } else {
        appends(buf, &n, cap, pick(5) ? "HTTP/1.1 " : "HTTP/1.0 ");
        static const char *const st[] = {"200 OK", "404 Not Found", "500 ", "100 Continue", "204 No Content",
                                         "304 X",  "2000 X",        "20 X", "299 A\x01"};
        appends(buf, &n, cap, st[odd(2) ? pick(sizeof st / sizeof *st) : pick(3)]);
    }
    appends(buf, &n, cap, odd(2) ? eols[pick(sizeof eols / sizeof *eols)] : "\r\n");
    if (pick(2)) {
        char cl[40];
        snprintf(cl, sizeof cl, "%s: %zu\r\n", pick(2) ? "Content-Length" : "content-length", pick(41));
        appends(buf, &n, cap, cl);
    }
    for (size_t k = pick(6); k--;) {
        if (odd(4)) {
            for (size_t j = pick(6); j--;)
                append(buf, &n, cap, &some_bytes[pick(sizeof some_bytes - 1)], 1);
        } else {
            appends(buf, &n, cap, some_names[pick(sizeof some_names / sizeof *some_names)]);
        }
        appends(buf, &n, cap, odd(6) ? " :" : ":");
        appends(buf, &n, cap, pick(3) ? " " : pick(2) ? "" : "\t ");
        if (odd(3)) {
            for (size_t j = pick(8); j--;)
                append(buf, &n, cap, &some_bytes[pick(sizeof some_bytes - 1)], 1);
        } else {
            const char *v = some_values[pick(sizeof some_values / sizeof *some_values)];
            appends(buf, &n, cap, v);
        }
        appends(buf, &n, cap, odd(3) ? eols[pick(sizeof eols / sizeof *eols)] : "\r\n");
    }
    appends(buf, &n, cap, odd(4) ? "\n" : "\r\n");
    /* A body longer than any length above, so framing is what is compared. */
    for (size_t k = 0; k < 40; k++)
        append(buf, &n, cap, "b", 1);
    return n;
}

static void test_generated(void **state)
{
    (void)state;
    static char buf[8192];
    size_t taken[2] = {0, 0};
    for (int i = 0; i < 200000; i++) {
        enum http_parser_type type = i & 1 ? HTTP_RESPONSE : HTTP_REQUEST;
        size_t len = gen(type, buf, sizeof buf);
        sb_h1_head h;
        sb_h1_field f[MAXF];
        if (fast(type, buf, len, &h, f) != SB_H1_OK)
            continue;
        if (h.content_length > 40)
            continue; /* a length past what was generated: nothing to compare against */
        taken[i & 1]++;
        agree(type, buf, len, &h, f, i % 3 ? 0 : 1 + (size_t)i % h.head_len);
    }
    /* The generator must reach the fast path often enough for this to mean something. */
    fprintf(stderr, "generated heads taken: %zu requests, %zu responses of 100000 each\n", taken[0], taken[1]);
    assert_true(taken[0] > 2000);
    assert_true(taken[1] > 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_table),
        cmocka_unit_test(test_requests_taken),
        cmocka_unit_test(test_requests_deferred),
        cmocka_unit_test(test_long_values),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_generated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
