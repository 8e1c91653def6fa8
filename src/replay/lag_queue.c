/* lag_queue: a growable ring of records, each owning a copy of its payload. */
#include "replay/lag_queue.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"

#define DEFAULT_MAX_RECORDS 65536
#define DEFAULT_MAX_BYTES (64u << 20)

typedef struct record {
    sb_ns t;
    uint32_t kind;
    uint64_t id;
    void *payload;
    size_t len;
} record;

struct sb_lag_queue {
    sb_ns lag;
    size_t max_records, max_bytes;
    sb_lag_apply_fn apply;
    void *ctx;
    record *ring;
    size_t cap, head, len, bytes;
    uint64_t early;
};

sb_lag_queue *sb_lag_queue_new(sb_ns lag_ns, size_t max_records, size_t max_bytes, sb_lag_apply_fn apply, void *ctx)
{
    sb_lag_queue *q = sb_calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->lag = lag_ns;
    q->max_records = max_records ? max_records : DEFAULT_MAX_RECORDS;
    q->max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_BYTES;
    q->apply = apply;
    q->ctx = ctx;
    return q;
}

void sb_lag_queue_free(sb_lag_queue *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->len; i++)
        sb_free(q->ring[(q->head + i) % q->cap].payload);
    sb_free(q->ring);
    sb_free(q);
}

/* Applies and drops the oldest record. */
static void pop_apply(sb_lag_queue *q)
{
    record r = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    q->bytes -= r.len;
    q->apply(q->ctx, r.kind, r.id, r.payload, r.len);
    sb_free(r.payload);
}

static int grow(sb_lag_queue *q)
{
    size_t cap = q->cap ? q->cap * 2 : 64;
    record *ring = sb_malloc(cap * sizeof(record));
    if (!ring)
        return -ENOMEM;
    for (size_t i = 0; i < q->len; i++)
        ring[i] = q->ring[(q->head + i) % q->cap];
    sb_free(q->ring);
    q->ring = ring;
    q->cap = cap;
    q->head = 0;
    return 0;
}

int sb_lag_queue_push(sb_lag_queue *q, sb_ns now, uint32_t kind, uint64_t id, const void *payload, size_t len)
{
    sb_lag_queue_advance(q, now);
    if (q->lag == 0) {
        q->apply(q->ctx, kind, id, payload, len);
        return 0;
    }
    while (q->len && (q->len >= q->max_records || q->bytes + len > q->max_bytes)) {
        pop_apply(q);
        q->early++;
    }
    void *copy = NULL;
    if ((q->len == q->cap && grow(q) < 0) || (len && !(copy = sb_malloc(len)))) {
        /* Keep the order: everything older goes first, then this one, all early. */
        while (q->len) {
            pop_apply(q);
            q->early++;
        }
        q->apply(q->ctx, kind, id, payload, len);
        q->early++;
        return -ENOMEM;
    }
    if (len)
        memcpy(copy, payload, len);
    q->ring[(q->head + q->len) % q->cap] = (record){.t = now, .kind = kind, .id = id, .payload = copy, .len = len};
    q->len++;
    q->bytes += len;
    return 0;
}

void sb_lag_queue_advance(sb_lag_queue *q, sb_ns now)
{
    while (q->len && q->ring[q->head].t + q->lag <= now)
        pop_apply(q);
}

size_t sb_lag_queue_len(const sb_lag_queue *q)
{
    return q->len;
}

uint64_t sb_lag_queue_early(const sb_lag_queue *q)
{
    return q->early;
}

sb_ns sb_lag_queue_lag(const sb_lag_queue *q)
{
    return q->lag;
}
