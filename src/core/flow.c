#include "core/flow.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/table.h"

#define NIL UINT32_MAX
/* Dispatches remembered for the drain rate: enough to smooth one slow request out, few
 * enough that the estimate follows a change of pace within a few seconds of traffic. */
#define RATE_WINDOW 32
#define DEFAULT_MAX_RETRY_AFTER_S 60

/* One queued request. Indices instead of pointers: the nodes are one array allocated up
 * front, and a handle is (index, generation). */
typedef struct node {
    void *user;
    uint64_t bytes;
    uint64_t seq; /* enqueue order: breaks deadline ties */
    sb_ns enqueued, deadline;
    uint32_t gen; /* bumped when the node leaves the queue: stale handles miss */
    uint32_t tenant;
    uint32_t prev, next;   /* the tenant's FIFO in this band; next is the free-list link */
    uint32_t newer, older; /* the band's arrival list, newest first, for eviction */
    uint32_t heap;         /* position in the deadline heap; NIL when not queued */
    uint8_t band;
} node;

/* One tenant's requests in one band, and its place in that band's round robin. */
typedef struct lane {
    uint32_t head, tail; /* oldest at head */
    uint32_t count;
    uint32_t rprev, rnext; /* ring of the band's tenants with requests */
} lane;

typedef struct tenant {
    uint64_t key;
    uint32_t queued; /* over all bands; the tenant is released at 0 */
    uint32_t next_free;
    lane lanes[SB_BAND_COUNT];
} tenant;

typedef struct band_state {
    sb_flow_band_stats st; /* queued, bytes and tenants are kept live here */
    uint32_t cursor;       /* the tenant whose turn it is; NIL when the band is empty */
    uint32_t newest;       /* head of the arrival list */
} band_state;

struct sb_flow {
    sb_flow_config cfg; /* totals resolved, retry cap resolved */
    node *nodes;
    uint32_t n_nodes, free_node;
    uint32_t *heap; /* min-heap of nodes by (deadline, seq) */
    uint32_t heap_len;
    tenant *tenants; /* max_tenants tracked ones, then the overflow tenant */
    uint32_t overflow, free_tenant, tracked;
    /* Tenant key -> tenant index (base/table.h), sized for max_tenants at creation; keyed by
     * cfg.hash_secret, which reconfiguring keeps. Its probe counters are tenant_probes. */
    sb_table table;
    band_state band[SB_BAND_COUNT];
    uint32_t queued;
    uint64_t bytes;
    uint64_t seq;
    uint64_t tenant_overflow;
    sb_ns drained[RATE_WINDOW];
    uint32_t n_drained, drained_pos;
};

void sb_flow_config_default(sb_flow_config *cfg)
{
    static const sb_ns wait_s[SB_BAND_COUNT] = {30, 10, 2};
    memset(cfg, 0, sizeof(*cfg));
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        cfg->band[b].max_queued = 1024;
        cfg->band[b].max_bytes = 64ull << 20;
        cfg->band[b].max_wait_ns = wait_s[b] * SB_NS_PER_S;
    }
    cfg->max_queued_total = 2048;
    cfg->max_bytes_total = 128ull << 20;
    cfg->max_tenants = 1024;
    cfg->max_retry_after_s = DEFAULT_MAX_RETRY_AFTER_S;
    cfg->gate_queue = 1;
    cfg->gate_kv = -1;
}

static enum sb_band clamp_band(enum sb_band b)
{
    return (unsigned)b < SB_BAND_COUNT ? b : SB_BAND_SHEDDABLE;
}

/* --- tenant table --- */

/* Keyed: tenant keys are hashes of headers a client writes, so an unkeyed slot function
 * would let one client grind header values that share a home slot (base/hash.h). */
static bool is_tenant(const void *ctx, uint32_t t) { return *(const uint32_t *)ctx == t; }

/* The tenant for key, tracking it if it is new; the overflow tenant when the table is full.
 * A key whose earlier requests went to overflow gets its own tenant once a slot frees, so its
 * FIFO order across the two holds only within each. */
static uint32_t tenant_for(sb_flow *f, uint64_t key)
{
    uint64_t tag = sb_table_tag_u64(&f->table, key);
    sb_table_key64 q = {f->tenants, sizeof(tenant), offsetof(tenant, key), key};
    size_t i = sb_table_find(&f->table, tag, sb_table_key64_eq, &q);
    if (sb_table_occupied(&f->table, i))
        return sb_table_val(&f->table, i);
    if (f->free_tenant == NIL) {
        f->tenant_overflow++;
        return f->overflow;
    }
    uint32_t t = f->free_tenant;
    f->free_tenant = f->tenants[t].next_free;
    f->tenants[t].key = key;
    sb_table_put(&f->table, i, tag, t); /* room for every tenant was reserved at creation */
    f->tracked++;
    return t;
}

static void tenant_release(sb_flow *f, uint32_t t)
{
    size_t i = sb_table_find(&f->table, sb_table_tag_u64(&f->table, f->tenants[t].key), is_tenant, &t);
    sb_table_delete(&f->table, i);
    f->tenants[t].next_free = f->free_tenant;
    f->free_tenant = t;
    f->tracked--;
}

/* --- per-band round robin --- */

/* A tenant starting to queue in a band takes its turn just before the cursor: after every
 * tenant already waiting has had one. */
static void ring_join(sb_flow *f, enum sb_band b, uint32_t t)
{
    band_state *bs = &f->band[b];
    lane *l = &f->tenants[t].lanes[b];
    if (bs->cursor == NIL) {
        l->rprev = l->rnext = t;
        bs->cursor = t;
    } else {
        uint32_t c = bs->cursor, p = f->tenants[c].lanes[b].rprev;
        l->rprev = p;
        l->rnext = c;
        f->tenants[p].lanes[b].rnext = t;
        f->tenants[c].lanes[b].rprev = t;
    }
    bs->st.tenants++;
}

static void ring_leave(sb_flow *f, enum sb_band b, uint32_t t)
{
    band_state *bs = &f->band[b];
    lane *l = &f->tenants[t].lanes[b];
    if (l->rnext == t) {
        bs->cursor = NIL;
    } else {
        f->tenants[l->rprev].lanes[b].rnext = l->rnext;
        f->tenants[l->rnext].lanes[b].rprev = l->rprev;
        if (bs->cursor == t)
            bs->cursor = l->rnext;
    }
    bs->st.tenants--;
}

/* --- deadline heap --- */

static bool due_before(const sb_flow *f, uint32_t a, uint32_t b)
{
    const node *x = &f->nodes[a], *y = &f->nodes[b];
    return x->deadline < y->deadline || (x->deadline == y->deadline && x->seq < y->seq);
}

static void heap_put(sb_flow *f, uint32_t pos, uint32_t n)
{
    f->heap[pos] = n;
    f->nodes[n].heap = pos;
}

static void sift_up(sb_flow *f, uint32_t pos)
{
    uint32_t n = f->heap[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!due_before(f, n, f->heap[parent]))
            break;
        heap_put(f, pos, f->heap[parent]);
        pos = parent;
    }
    heap_put(f, pos, n);
}

static void sift_down(sb_flow *f, uint32_t pos)
{
    uint32_t n = f->heap[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= f->heap_len)
            break;
        if (c + 1 < f->heap_len && due_before(f, f->heap[c + 1], f->heap[c]))
            c++;
        if (!due_before(f, f->heap[c], n))
            break;
        heap_put(f, pos, f->heap[c]);
        pos = c;
    }
    heap_put(f, pos, n);
}

static void heap_remove(sb_flow *f, uint32_t pos)
{
    uint32_t last = f->heap[--f->heap_len];
    if (pos < f->heap_len) {
        heap_put(f, pos, last);
        sift_up(f, pos);
        sift_down(f, f->nodes[last].heap);
    }
}

/* --- queue --- */

/* Takes node n out of every structure and returns it to the free list. Returns its user. */
static void *unlink_node(sb_flow *f, uint32_t n)
{
    node *x = &f->nodes[n];
    enum sb_band b = (enum sb_band)x->band;
    band_state *bs = &f->band[b];
    tenant *t = &f->tenants[x->tenant];
    lane *l = &t->lanes[b];
    void *user = x->user;

    if (x->prev != NIL)
        f->nodes[x->prev].next = x->next;
    else
        l->head = x->next;
    if (x->next != NIL)
        f->nodes[x->next].prev = x->prev;
    else
        l->tail = x->prev;
    if (--l->count == 0)
        ring_leave(f, b, x->tenant);
    if (--t->queued == 0 && x->tenant != f->overflow)
        tenant_release(f, x->tenant);

    if (x->newer != NIL)
        f->nodes[x->newer].older = x->older;
    else
        bs->newest = x->older;
    if (x->older != NIL)
        f->nodes[x->older].newer = x->newer;

    heap_remove(f, x->heap);
    bs->st.queued--;
    bs->st.bytes -= x->bytes;
    f->queued--;
    f->bytes -= x->bytes;

    x->heap = NIL;
    x->user = NULL;
    if (++x->gen == 0) /* generation 0 is what a zeroed handle carries */
        x->gen = 1;
    x->next = f->free_node;
    f->free_node = n;
    return user;
}

/* The totals a config means: 0 = the sum of the bands' bounds. */
static void resolve_totals(const sb_flow_config *cfg, uint64_t *total, uint64_t *total_bytes)
{
    *total = cfg->max_queued_total;
    *total_bytes = cfg->max_bytes_total;
    if (!*total)
        for (int b = 0; b < SB_BAND_COUNT; b++)
            *total += cfg->band[b].max_queued;
    if (!*total_bytes)
        for (int b = 0; b < SB_BAND_COUNT; b++)
            *total_bytes = cfg->band[b].max_bytes > UINT64_MAX - *total_bytes ? UINT64_MAX
                                                                            : *total_bytes + cfg->band[b].max_bytes;
}

sb_flow *sb_flow_new(const sb_flow_config *cfg)
{
    uint64_t total, total_bytes;
    resolve_totals(cfg, &total, &total_bytes);
    if (total > SB_FLOW_MAX_QUEUED || cfg->max_tenants > SB_FLOW_MAX_TENANTS)
        return NULL;

    sb_flow *f = sb_calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->cfg = *cfg;
    f->cfg.max_queued_total = (uint32_t)total;
    f->cfg.max_bytes_total = total_bytes;
    if (!f->cfg.max_retry_after_s)
        f->cfg.max_retry_after_s = DEFAULT_MAX_RETRY_AFTER_S;

    f->n_nodes = (uint32_t)total;
    f->nodes = sb_calloc(f->n_nodes, sizeof(*f->nodes));
    f->heap = sb_calloc(f->n_nodes, sizeof(*f->heap));
    f->overflow = cfg->max_tenants;
    f->tenants = sb_calloc((size_t)cfg->max_tenants + 1, sizeof(*f->tenants));
    sb_table_init(&f->table, cfg->hash_secret);
    if (!f->nodes || !f->heap || !f->tenants || sb_table_reserve(&f->table, cfg->max_tenants) < 0)
        goto fail;

    for (uint32_t i = 0; i < f->n_nodes; i++) {
        f->nodes[i].gen = 1;
        f->nodes[i].heap = NIL;
        f->nodes[i].next = i + 1 < f->n_nodes ? i + 1 : NIL;
    }
    f->free_node = f->n_nodes ? 0 : NIL;
    for (uint32_t t = 0; t <= f->overflow; t++) {
        f->tenants[t].next_free = t + 1 < f->overflow ? t + 1 : NIL;
        for (int b = 0; b < SB_BAND_COUNT; b++)
            f->tenants[t].lanes[b].head = f->tenants[t].lanes[b].tail = NIL;
    }
    f->free_tenant = f->overflow ? 0 : NIL;
    for (int b = 0; b < SB_BAND_COUNT; b++)
        f->band[b].cursor = f->band[b].newest = NIL;
    return f;

fail:
    sb_flow_free(f);
    return NULL;
}

int sb_flow_reconfigure(sb_flow *f, const sb_flow_config *cfg)
{
    uint64_t total, total_bytes;
    resolve_totals(cfg, &total, &total_bytes);
    if (total > SB_FLOW_MAX_QUEUED)
        return -1;
    if (total > f->n_nodes) {
        /* More room: more nodes on the free list (nodes and the heap hold indices, so both
         * arrays can move). */
        node *nn = sb_realloc(f->nodes, (size_t)total * sizeof(*nn));
        if (!nn)
            return -1;
        f->nodes = nn;
        uint32_t *nh = sb_realloc(f->heap, (size_t)total * sizeof(*nh));
        if (!nh)
            return -1; /* the nodes grew, harmlessly: n_nodes still says what is in use */
        f->heap = nh;
        for (uint32_t i = f->n_nodes; i < (uint32_t)total; i++) {
            f->nodes[i] = (node){.gen = 1, .heap = NIL};
            f->nodes[i].next = i + 1 < (uint32_t)total ? i + 1 : f->free_node;
        }
        f->free_node = f->n_nodes;
        f->n_nodes = (uint32_t)total;
    }
    /* Fewer: the nodes stay allocated; the bound applies to what comes next. */
    for (int b = 0; b < SB_BAND_COUNT; b++)
        f->cfg.band[b] = cfg->band[b];
    f->cfg.max_queued_total = (uint32_t)total;
    f->cfg.max_bytes_total = total_bytes;
    f->cfg.max_retry_after_s = cfg->max_retry_after_s ? cfg->max_retry_after_s : DEFAULT_MAX_RETRY_AFTER_S;
    f->cfg.gate_queue = cfg->gate_queue;
    f->cfg.gate_kv = cfg->gate_kv;
    return 0;
}

void sb_flow_free(sb_flow *f)
{
    if (!f)
        return;
    sb_free(f->nodes);
    sb_free(f->heap);
    sb_free(f->tenants);
    sb_table_free(&f->table);
    sb_free(f);
}

int sb_flow_admit(sb_flow *f, bool saturated, enum sb_band band)
{
    enum sb_band b = clamp_band(band);
    uint32_t ahead = 0;
    for (int i = 0; i <= (int)b; i++)
        ahead += f->band[i].st.queued;
    if (!saturated && ahead == 0) {
        f->band[b].st.admitted++;
        return SB_FLOW_DISPATCH;
    }
    if (saturated && b == SB_BAND_SHEDDABLE) {
        f->band[b].st.shed++;
        return SB_FLOW_SHED;
    }
    return SB_FLOW_WAIT;
}

static bool over_total(const sb_flow *f, uint64_t bytes)
{
    return f->queued >= f->cfg.max_queued_total || bytes > f->cfg.max_bytes_total - f->bytes;
}

/* Whether evicting every queued sheddable request would let a request of band b and size
 * bytes in: eviction is all-or-nothing in intent, so none is thrown away for nothing. */
static bool can_evict_for(const sb_flow *f, enum sb_band b, uint64_t bytes)
{
    const sb_flow_band_stats *s = &f->band[SB_BAND_SHEDDABLE].st;
    if (b == SB_BAND_SHEDDABLE || !f->cfg.on_evict || s->queued == 0)
        return false;
    return f->queued - s->queued < f->cfg.max_queued_total && bytes <= f->cfg.max_bytes_total - (f->bytes - s->bytes);
}

int sb_flow_enqueue(sb_flow *f, const sb_flow_item *item, sb_ns now, sb_flow_handle *out)
{
    enum sb_band b = clamp_band(item->band);
    band_state *bs = &f->band[b];
    const sb_flow_band_config *bc = &f->cfg.band[b];
    if (bs->st.queued >= bc->max_queued || item->bytes > bc->max_bytes - bs->st.bytes) {
        bs->st.refused_full++;
        return SB_FLOW_FULL;
    }
    if (over_total(f, item->bytes)) {
        if (!can_evict_for(f, b, item->bytes)) {
            bs->st.refused_full++;
            return SB_FLOW_FULL;
        }
        while (over_total(f, item->bytes)) {
            band_state *shed = &f->band[SB_BAND_SHEDDABLE];
            void *user = unlink_node(f, shed->newest);
            shed->st.evicted++;
            f->cfg.on_evict(f->cfg.evict_ctx, user, SB_BAND_SHEDDABLE, SB_FLOW_SHED);
        }
    }

    /* From here nothing can fail: a free node exists because queued < max_queued_total. */
    uint32_t t = tenant_for(f, item->tenant);
    uint32_t n = f->free_node;
    node *x = &f->nodes[n];
    f->free_node = x->next;

    sb_ns deadline = item->deadline ? item->deadline : UINT64_MAX;
    if (bc->max_wait_ns) {
        sb_ns limit = now > UINT64_MAX - bc->max_wait_ns ? UINT64_MAX : now + bc->max_wait_ns;
        deadline = limit < deadline ? limit : deadline;
    }
    x->user = item->user;
    x->bytes = item->bytes;
    x->seq = f->seq++;
    x->enqueued = now;
    x->deadline = deadline;
    x->tenant = t;
    x->band = (uint8_t)b;

    lane *l = &f->tenants[t].lanes[b];
    x->prev = l->tail;
    x->next = NIL;
    if (l->tail != NIL)
        f->nodes[l->tail].next = n;
    else
        l->head = n;
    l->tail = n;
    if (l->count++ == 0)
        ring_join(f, b, t);
    f->tenants[t].queued++;

    x->newer = NIL;
    x->older = bs->newest;
    if (bs->newest != NIL)
        f->nodes[bs->newest].newer = n;
    bs->newest = n;

    f->heap_len++;
    heap_put(f, f->heap_len - 1, n);
    sift_up(f, f->heap_len - 1);

    bs->st.queued++;
    bs->st.bytes += item->bytes;
    bs->st.enqueued++;
    f->queued++;
    f->bytes += item->bytes;
    if (out) {
        out->slot = n;
        out->gen = x->gen;
    }
    return SB_FLOW_QUEUED;
}

void *sb_flow_next(sb_flow *f, sb_ns now)
{
    int b = 0;
    while (b < SB_BAND_COUNT && f->band[b].st.queued == 0)
        b++;
    if (b == SB_BAND_COUNT)
        return NULL;
    band_state *bs = &f->band[b];
    uint32_t t = bs->cursor;
    lane *l = &f->tenants[t].lanes[b];
    uint32_t n = l->head;
    /* The turn passes before the node leaves, so a tenant that stays in the ring is not
     * served twice in a row while others wait. */
    bs->cursor = l->rnext;
    sb_ns wait = now > f->nodes[n].enqueued ? now - f->nodes[n].enqueued : 0;
    void *user = unlink_node(f, n);

    bs->st.dispatched++;
    bs->st.wait_sum_ns += wait;
    if (wait > bs->st.wait_max_ns)
        bs->st.wait_max_ns = wait;
    f->drained[f->drained_pos] = now;
    f->drained_pos = (f->drained_pos + 1) % RATE_WINDOW;
    if (f->n_drained < RATE_WINDOW)
        f->n_drained++;
    return user;
}

size_t sb_flow_expire(sb_flow *f, sb_ns now, sb_flow_drop_fn drop, void *ctx)
{
    size_t count = 0;
    while (f->heap_len && f->nodes[f->heap[0]].deadline <= now) {
        uint32_t n = f->heap[0];
        enum sb_band b = (enum sb_band)f->nodes[n].band;
        void *user = unlink_node(f, n);
        f->band[b].st.expired++;
        count++;
        drop(ctx, user, b, SB_FLOW_EXPIRED);
    }
    return count;
}

bool sb_flow_next_deadline(const sb_flow *f, sb_ns *deadline)
{
    if (!f->heap_len)
        return false;
    *deadline = f->nodes[f->heap[0]].deadline;
    return true;
}

bool sb_flow_remove(sb_flow *f, sb_flow_handle h)
{
    if (h.slot >= f->n_nodes)
        return false;
    node *x = &f->nodes[h.slot];
    if (x->gen != h.gen || x->heap == NIL)
        return false;
    enum sb_band b = (enum sb_band)x->band;
    unlink_node(f, h.slot);
    f->band[b].st.removed++;
    return true;
}

uint32_t sb_flow_retry_after_s(const sb_flow *f, enum sb_band band, sb_ns now)
{
    enum sb_band b = clamp_band(band);
    uint64_t ahead = 0;
    for (int i = 0; i <= (int)b; i++)
        ahead += f->band[i].st.queued;
    double s;
    if (f->n_drained == 0) {
        s = ahead == 0 ? 1.0 : ceil((double)f->cfg.band[b].max_wait_ns / SB_NS_PER_S);
    } else {
        sb_ns oldest = f->drained[f->n_drained < RATE_WINDOW ? 0 : f->drained_pos];
        sb_ns span = now > oldest ? now - oldest : 0;
        if (span < SB_NS_PER_MS) /* a burst of dispatches at one instant is not infinite speed */
            span = SB_NS_PER_MS;
        double rate = f->n_drained / ((double)span / SB_NS_PER_S);
        s = ceil((double)(ahead + 1) / rate);
    }
    if (s < 1.0)
        s = 1.0;
    if (s > f->cfg.max_retry_after_s)
        s = f->cfg.max_retry_after_s;
    return (uint32_t)s;
}

void sb_flow_stats_get(const sb_flow *f, sb_flow_stats *out)
{
    memset(out, 0, sizeof(*out));
    sb_flow_band_stats *t = &out->total;
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        const sb_flow_band_stats *s = &f->band[b].st;
        out->band[b] = *s;
        t->queued += s->queued;
        t->bytes += s->bytes;
        t->tenants += s->tenants;
        t->admitted += s->admitted;
        t->enqueued += s->enqueued;
        t->dispatched += s->dispatched;
        t->refused_full += s->refused_full;
        t->shed += s->shed;
        t->evicted += s->evicted;
        t->expired += s->expired;
        t->removed += s->removed;
        t->wait_sum_ns += s->wait_sum_ns;
        if (s->wait_max_ns > t->wait_max_ns)
            t->wait_max_ns = s->wait_max_ns;
    }
    out->tenants = f->tracked;
    out->tenant_overflow = f->tenant_overflow;
    out->tenant_probes = f->table.probes;
}

static const char *const band_names[SB_BAND_COUNT] = {"critical", "standard", "sheddable"};

int sb_band_parse(const char *s, size_t n)
{
    for (int b = 0; b < SB_BAND_COUNT; b++) {
        const char *name = band_names[b];
        if (strlen(name) != n)
            continue;
        size_t i = 0;
        while (i < n && (s[i] | 0x20) == name[i])
            i++;
        if (i == n)
            return b;
    }
    return -1;
}

const char *sb_band_name(enum sb_band band)
{
    return band_names[clamp_band(band)];
}

const char *sb_flow_result_name(int result)
{
    switch (result) {
    case SB_FLOW_DISPATCH: return "dispatch";
    case SB_FLOW_WAIT: return "wait";
    case SB_FLOW_QUEUED: return "queued";
    case SB_FLOW_FULL: return "queue_full";
    case SB_FLOW_SHED: return "shed";
    case SB_FLOW_EXPIRED: return "queue_timeout";
    default: return "unknown";
    }
}
