/* event_queue: binary min-heap on (time, seq). */
#include "replay/event_queue.h"

#include <errno.h>

#include "base/alloc.h"

static bool before(const sb_replay_event *x, const sb_replay_event *y)
{
    return x->time_ns < y->time_ns || (x->time_ns == y->time_ns && x->seq < y->seq);
}

int sb_replay_queue_push(sb_replay_queue *q, sb_ns time_ns, uint32_t kind, uint32_t a, uint64_t b)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 256;
        sb_replay_event *h = sb_realloc(q->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        q->heap = h;
        q->cap = cap;
    }
    sb_replay_event ev = {.time_ns = time_ns, .seq = q->next_seq++, .kind = kind, .a = a, .b = b};
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&ev, &q->heap[parent]))
            break;
        q->heap[i] = q->heap[parent];
        i = parent;
    }
    q->heap[i] = ev;
    return 0;
}

const sb_replay_event *sb_replay_queue_peek(const sb_replay_queue *q)
{
    return q->n ? &q->heap[0] : NULL;
}

bool sb_replay_queue_pop(sb_replay_queue *q, sb_replay_event *out)
{
    if (!q->n)
        return false;
    *out = q->heap[0];
    sb_replay_event last = q->heap[--q->n];
    size_t i = 0, n = q->n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const sb_replay_event *best = &last;
        if (l < n && before(&q->heap[l], best))
            m = l, best = &q->heap[l];
        if (l + 1 < n && before(&q->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        q->heap[i] = q->heap[m];
        i = m;
    }
    if (n)
        q->heap[i] = last;
    return true;
}

void sb_replay_queue_free(sb_replay_queue *q)
{
    sb_free(q->heap);
    *q = (sb_replay_queue){0};
}
