/* decisions: the ring of recent decisions; see the header. */
#include "net/decisions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "proto/config.h"

/* What the configuration lets through fits a record's fields whole: nothing is cut. */
_Static_assert(SB_EXPLAIN_NAME_MAX >= SB_POOL_NAME_MAX && SB_EXPLAIN_NAME_MAX >= SB_PROFILE_NAME_MAX,
               "a pool or profile name the configuration accepts would be cut in decision records");

struct sb_decisions {
    size_t refs;
    size_t capacity;
    size_t max_cands;
    size_t slot_bytes;
    uint64_t next_seq; /* the next record's generation; slot = (seq - 1) % capacity */
    uint64_t *seq;     /* per slot: the generation it holds, 0 for none yet */
    unsigned char *slots;
};

static sb_explain *slot_at(const sb_decisions *r, size_t i)
{
    return (sb_explain *)(r->slots + i * r->slot_bytes);
}

sb_decisions *sb_decisions_new(size_t capacity, size_t max_cands)
{
    if (!capacity || !max_cands)
        return NULL;
    sb_decisions *r = sb_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->refs = 1;
    r->capacity = capacity;
    r->max_cands = max_cands;
    /* Slots keep the record's alignment: sb_explain_size is a multiple of it only by luck. */
    size_t align = _Alignof(sb_explain);
    r->slot_bytes = (sb_explain_size(max_cands) + align - 1) / align * align;
    r->next_seq = 1;
    r->seq = sb_calloc(capacity, sizeof(uint64_t));
    r->slots = sb_calloc(capacity, r->slot_bytes);
    if (!r->seq || !r->slots) {
        sb_free(r->seq);
        sb_free(r->slots);
        sb_free(r);
        return NULL;
    }
    return r;
}

void sb_decisions_hold(sb_decisions *r)
{
    r->refs++;
}

void sb_decisions_release(sb_decisions *r)
{
    if (!r || --r->refs > 0)
        return;
    sb_free(r->seq);
    sb_free(r->slots);
    sb_free(r);
}

size_t sb_decisions_capacity(const sb_decisions *r)
{
    return r->capacity;
}

size_t sb_decisions_max_cands(const sb_decisions *r)
{
    return r->max_cands;
}

sb_decision_ref sb_decisions_record(sb_decisions *r, const sb_decision *d, const char *id, const char *model,
                                    int64_t at_ms)
{
    sb_decision_ref ref = {0};
    if (!r)
        return ref;
    uint64_t seq = r->next_seq++;
    size_t i = (size_t)((seq - 1) % r->capacity);
    sb_explain_fill(slot_at(r, i), r->max_cands, d, id, model, at_ms);
    r->seq[i] = seq;
    r->refs++;
    ref.ring = r;
    ref.slot = (uint32_t)i;
    ref.seq = seq;
    return ref;
}

void sb_decisions_fallback(const sb_decision_ref *ref, const char *from, const char *reason)
{
    sb_decisions *r = ref->ring;
    if (!r || ref->slot >= r->capacity || r->seq[ref->slot] != ref->seq)
        return;
    sb_explain *rec = slot_at(r, ref->slot);
    snprintf(rec->fallback_from, sizeof rec->fallback_from, "%s", from ? from : "");
    rec->fallback_reason = reason;
}

void sb_decisions_finish(sb_decision_ref *ref, int status, double ttft_ms, uint32_t attempts, const char *served_by)
{
    sb_decisions *r = ref->ring;
    if (!r)
        return;
    if (ref->slot < r->capacity && r->seq[ref->slot] == ref->seq) {
        sb_explain_outcome *o = &slot_at(r, ref->slot)->outcome;
        o->set = true;
        o->status = status;
        o->ttft_ms = ttft_ms;
        o->attempts = attempts;
        size_t n = served_by ? strnlen(served_by, sizeof o->served_by - 1) : 0;
        memcpy(o->served_by, served_by ? served_by : "", n);
        o->served_by[n] = '\0';
    }
    memset(ref, 0, sizeof(*ref));
    sb_decisions_release(r);
}

void sb_decisions_drop(sb_decision_ref *ref)
{
    sb_decisions *r = ref->ring;
    memset(ref, 0, sizeof(*ref));
    sb_decisions_release(r);
}

size_t sb_decisions_count(const sb_decisions *r)
{
    uint64_t n = r->next_seq - 1;
    return n < r->capacity ? (size_t)n : r->capacity;
}

const sb_explain *sb_decisions_newest(const sb_decisions *r, size_t k)
{
    if (k >= sb_decisions_count(r))
        return NULL;
    uint64_t seq = r->next_seq - 1 - k;
    return slot_at(r, (size_t)((seq - 1) % r->capacity));
}

const sb_explain *sb_decisions_find(const sb_decisions *r, const char *id, size_t len)
{
    if (len > SB_EXPLAIN_ID_MAX)
        return NULL; /* longer than any id kept */
    for (size_t k = 0, n = sb_decisions_count(r); k < n; k++) {
        const sb_explain *e = sb_decisions_newest(r, k);
        if (strnlen(e->id, sizeof e->id) == len && !memcmp(e->id, id, len))
            return e;
    }
    return NULL;
}

int64_t sb_decisions_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double sb_decisions_ttft_ms(const sb_exchange_log *log)
{
    return log->t_first_token && log->t_first_token >= log->t_start ? (double)(log->t_first_token - log->t_start) / 1e6
                                                                    : -1.0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes v[0..n) into out[cap] (NUL-terminated). Returns the length, or -1 (bad
 * escape or NUL) or -2 (too long). */
static long decode(const char *v, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)v[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            int hi = i + 1 < n ? hexval(v[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(v[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0)
            return -1;
        if (k + 1 >= cap)
            return -2;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return (long)k;
}

int sb_decisions_query_parse(const char *q, size_t len, size_t max_limit, sb_decisions_query *out, char *err,
                             size_t cap)
{
    memset(out, 0, sizeof(*out));
    out->limit = max_limit < SB_DECISIONS_DEFAULT_LIMIT ? max_limit : SB_DECISIONS_DEFAULT_LIMIT;
    bool has_id = false, has_limit = false;
    char limit[16];
    for (size_t i = 0; i < len;) {
        const char *amp = memchr(q + i, '&', len - i);
        size_t end = amp ? (size_t)(amp - q) : len;
        const char *p = q + i;
        size_t n = end - i;
        i = end + 1;
        const char *eq = memchr(p, '=', n);
        size_t klen = eq ? (size_t)(eq - p) : n;
        const char *v = eq ? eq + 1 : NULL;
        size_t vlen = eq ? n - klen - 1 : 0;
        bool *seen;
        char *dst;
        size_t dcap;
        if (klen == 2 && !memcmp(p, "id", 2))
            seen = &has_id, dst = out->id, dcap = sizeof out->id;
        else if (klen == 4 && !memcmp(p, "pool", 4))
            seen = &out->has_pool, dst = out->pool, dcap = sizeof out->pool;
        else if (klen == 5 && !memcmp(p, "limit", 5))
            seen = &has_limit, dst = limit, dcap = sizeof limit;
        else {
            snprintf(err, cap, "unknown parameter '%.*s': /debug/decisions takes id, pool and limit",
                     (int)(klen > 32 ? 32 : klen), p);
            return -1;
        }
        if (*seen) {
            snprintf(err, cap, "parameter '%.*s' given twice", (int)klen, p);
            return -1;
        }
        *seen = true;
        if (!v || vlen == 0) {
            snprintf(err, cap, "parameter '%.*s' needs a value", (int)klen, p);
            return -1;
        }
        long m = decode(v, vlen, dst, dcap);
        if (m == -1) {
            snprintf(err, cap, "parameter '%.*s': malformed percent-escape or NUL", (int)klen, p);
            return -1;
        }
        if (m == -2) {
            snprintf(err, cap, "parameter '%.*s' is longer than %zu bytes", (int)klen, p, dcap - 1);
            return -1;
        }
        if (dst == out->id)
            out->id_len = (size_t)m;
    }
    if (has_limit) {
        char *e;
        unsigned long long v = strtoull(limit, &e, 10);
        if (*e || limit[0] < '0' || limit[0] > '9' || v < 1) {
            snprintf(err, cap, "limit must be a positive integer");
            return -1;
        }
        /* Clamped, not refused: the ring's size is the server's configuration, which a client
         * (the dashboard asks for 50) cannot know; asking for more than is kept gets all. */
        out->limit = v > max_limit ? max_limit : (size_t)v;
    }
    if (has_id && (has_limit || out->has_pool)) {
        snprintf(err, cap, "id looks up one decision: give it alone");
        return -1;
    }
    return 0;
}
