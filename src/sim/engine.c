/* engine: see engine.h for the model and the contract. */
#include "sim/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* ---- parameters ----------------------------------------------------------------------------- */

sb_engine_params sb_engine_params_default(void)
{
    sb_engine_params p = {
        .max_num_seqs = 256,            /* vLLM --max-num-seqs default */
        .max_num_batched_tokens = 8192, /* vLLM V1 default with chunked prefill (online serving) */
        .num_gpu_blocks = 29205,        /* Llama-3.1-8B bf16 on H100-80GB, gpu_memory_util 0.9 */
        .block_size = 16,               /* vLLM --block-size default on CUDA */
        .max_loras = 4,                 /* issue 3 default */
        .enable_prefix_caching = true,  /* vLLM V1 default */
        .lora_load_ns = SB_MS(50),      /* issue 3 default */
        /* Fitted step model for Llama-3.1-8B on one H100 (issue 3; see docs/simulator.md). */
        .step_overhead_ns = 5750000.0,
        .prefill_token_ns = 17250.0,
        .decode_token_ns = 6000.0,
        .context_token_ns = 40.0,
    };
    return p;
}

static bool coef_ok(double x)
{
    return isfinite(x) && x >= 0.0 && x < 1e15;
}

int sb_engine_params_check(const sb_engine_params *p)
{
    if (!p || p->max_num_seqs == 0 || p->max_num_batched_tokens == 0 || p->num_gpu_blocks == 0 || p->block_size == 0 ||
        p->block_size > 4096 || p->max_num_seqs > p->max_num_batched_tokens || p->num_gpu_blocks > (UINT32_MAX >> 2))
        return -EINVAL;
    if (!coef_ok(p->step_overhead_ns) || !coef_ok(p->prefill_token_ns) || !coef_ok(p->decode_token_ns) ||
        !coef_ok(p->context_token_ns))
        return -EINVAL;
    return 0;
}

const sb_engine_params *sb_engine_params_get(const sb_engine *e)
{
    return &e->p;
}

/* ---- request id map ------------------------------------------------------------------------- */

/* The slot of id in m's table, or the empty slot where it would go. */
static size_t ids_slot(const id_map *m, uint64_t id)
{
    sb_table_key64 q = {m->handles, sizeof(id_handle), offsetof(id_handle, id), id};
    size_t steps;
    return sb_table_search(&m->table, sb_table_tag_u64(&m->table, id), sb_table_key64_eq, &q, &steps);
}

static req *ids_find(const id_map *m, uint64_t id)
{
    size_t i = ids_slot(m, id);
    return sb_table_occupied(&m->table, i) ? m->handles[sb_table_val(&m->table, i)].r : NULL;
}

static int ids_init(id_map *m, uint64_t secret)
{
    *m = (id_map){0};
    sb_table_init(&m->table, secret);
    return sb_table_reserve(&m->table, 32) < 0 ? -ENOMEM : 0;
}

static void ids_free(id_map *m)
{
    sb_table_free(&m->table);
    sb_free(m->handles);
    sb_free(m->free);
}

/* Inserts r under r->id, known absent. */
static int ids_put(id_map *m, req *r)
{
    if (!m->n_free) {
        uint32_t cap = m->cap ? m->cap * 2 : 64;
        if (m->cap >= SB_TABLE_VAL_MAX / 2)
            return -ENOMEM;
        id_handle *hs = sb_realloc(m->handles, cap * sizeof *hs);
        if (!hs)
            return -ENOMEM;
        m->handles = hs;
        uint32_t *fr = sb_realloc(m->free, cap * sizeof *fr);
        if (!fr)
            return -ENOMEM; /* handles grew, harmlessly: cap still bounds both */
        m->free = fr;
        for (uint32_t h = cap; h-- > m->cap;) {
            m->handles[h].r = NULL;
            m->free[m->n_free++] = h;
        }
        m->cap = cap;
    }
    if (sb_table_reserve(&m->table, sb_table_count(&m->table) + 1) < 0)
        return -ENOMEM;
    uint32_t h = m->free[--m->n_free];
    size_t slot = ids_slot(m, r->id);
    m->handles[h] = (id_handle){r->id, r};
    sb_table_put(&m->table, slot, sb_table_tag_u64(&m->table, r->id), h);
    return 0;
}

static void ids_remove(id_map *m, uint64_t id)
{
    size_t i = ids_slot(m, id);
    uint32_t h = sb_table_val(&m->table, i);
    sb_table_delete(&m->table, i);
    m->handles[h].r = NULL;
    m->free[m->n_free++] = h;
}

/* ---- lists ---------------------------------------------------------------------------------- */

static void list_remove(req_list *l, req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

static void list_push_back(req_list *l, req *r)
{
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    l->n++;
}

static void list_push_front(req_list *l, req *r)
{
    r->prev = NULL;
    r->next = l->head;
    if (l->head)
        l->head->prev = r;
    else
        l->tail = r;
    l->head = r;
    l->n++;
}

/* ---- adapters ------------------------------------------------------------------------------- */

/* Index of the adapter with `id`, or of where it would be inserted (*found false). */
static uint32_t adapter_pos(const sb_engine *e, uint32_t id, bool *found)
{
    uint32_t lo = 0, hi = e->n_adapters;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (e->adapters[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < e->n_adapters && e->adapters[lo].id == id;
    return lo;
}

static adapter *adapter_find(sb_engine *e, uint32_t id)
{
    bool found;
    uint32_t i = adapter_pos(e, id, &found);
    return found ? &e->adapters[i] : NULL;
}

static adapter *adapter_get(sb_engine *e, uint32_t id)
{
    bool found;
    uint32_t i = adapter_pos(e, id, &found);
    if (found)
        return &e->adapters[i];
    if (e->n_adapters == e->cap_adapters) {
        uint32_t cap = e->cap_adapters ? e->cap_adapters * 2 : 8;
        adapter *a = sb_realloc(e->adapters, cap * sizeof *a);
        if (!a)
            return NULL;
        e->adapters = a;
        e->cap_adapters = cap;
    }
    memmove(&e->adapters[i + 1], &e->adapters[i], (e->n_adapters - i) * sizeof *e->adapters);
    e->adapters[i] = (adapter){.id = id};
    e->n_adapters++;
    return &e->adapters[i];
}

/* Forgets an adapter nobody needs, so the table stays as small as the live set. */
static void adapter_maybe_drop(sb_engine *e, uint32_t id)
{
    bool found;
    uint32_t i = adapter_pos(e, id, &found);
    if (!found)
        return;
    adapter *a = &e->adapters[i];
    if (a->resident || a->running || a->waiting)
        return;
    memmove(a, a + 1, (e->n_adapters - i - 1) * sizeof *a);
    e->n_adapters--;
}

/* Applies one request's change of state to adapter `id`'s running and waiting counts, keeping
 * the numbers of distinct running / waiting adapters that the metrics report. May drop the
 * adapter's record (invalidating adapter pointers). */
static void adapter_count(sb_engine *e, uint32_t id, int run_delta, int wait_delta)
{
    if (id == 0)
        return;
    adapter *a = adapter_find(e, id);
    uint32_t was_r = a->running, was_w = a->waiting;
    a->running = (uint32_t)((int64_t)a->running + run_delta);
    a->waiting = (uint32_t)((int64_t)a->waiting + wait_delta);
    e->n_running_adapters += (a->running > 0) - (was_r > 0);
    e->n_waiting_adapters += (a->waiting > 0) - (was_w > 0);
    adapter_maybe_drop(e, id);
}

/* Can a request for `id` run in the step being formed? 0: resident; 1: must be loaded, into a
 * free slot (*victim NULL) or in place of *victim; -1: every slot is pinned by running work. */
static int lora_check(sb_engine *e, uint32_t id, adapter **victim)
{
    *victim = NULL;
    if (id == 0)
        return 0;
    adapter *a = adapter_find(e, id);
    if (a && a->resident)
        return 0;
    if (e->n_resident < e->p.max_loras)
        return 1;
    for (uint32_t i = 0; i < e->n_adapters; i++) {
        adapter *c = &e->adapters[i];
        if (c->resident && c->running == 0 && (!*victim || c->last_used_step < (*victim)->last_used_step))
            *victim = c;
    }
    return *victim ? 1 : -1;
}

/* ---- events --------------------------------------------------------------------------------- */

static void push_event(sb_engine *e, sb_engine_event_kind kind, const req *r, sb_ns t, sb_ns itl)
{
    if (e->n_ev == e->cap_ev) {
        /* Sized at creation for the worst step; growing is a fallback that cannot fail in
         * practice, and an event lost to ENOMEM is the only alternative to aborting. */
        size_t cap = e->cap_ev * 2;
        sb_engine_event *n = sb_realloc(e->ev, cap * sizeof *n);
        if (!n)
            return;
        e->ev = n;
        e->cap_ev = cap;
    }
    e->ev[e->n_ev++] = (sb_engine_event){.kind = kind, .id = r->id, .time_ns = t, .itl_ns = itl, .usage = r->u};
}

static void deliver(sb_engine *e, sb_engine_event_cb cb, void *ud)
{
    /* By index, on a copy: callbacks may submit or abort, which may append events. */
    for (size_t i = 0; i < e->n_ev; i++) {
        sb_engine_event ev = e->ev[i];
        if (cb)
            cb(ud, &ev);
    }
    e->n_ev = 0;
}

/* ---- request lifecycle ---------------------------------------------------------------------- */

static void req_destroy(sb_engine *e, req *r)
{
    if (r->state == REQ_RUNNING) {
        eng_release_blocks(e, r);
        list_remove(&e->running, r);
        adapter_count(e, r->adapter, -1, 0);
    } else {
        list_remove(&e->waiting, r);
        adapter_count(e, r->adapter, 0, -1);
    }
    ids_remove(&e->ids, r->id);
    sb_free(r);
}

static uint32_t blocks_for(const sb_engine *e, uint32_t tokens)
{
    return (tokens + e->p.block_size - 1) / e->p.block_size;
}

/* Takes r's tokens out of the step being formed. */
static void unschedule(sb_engine *e, req *r)
{
    if (!r->sched)
        return;
    if (r->sched_decode) {
        e->step.decode_tokens -= r->sched;
        e->step.context_tokens -= r->sched_context;
    } else {
        e->step.prefill_tokens -= r->sched;
    }
    e->step.num_seqs--;
    e->budget += r->sched;
    r->sched = 0;
    r->sched_context = 0;
}

static void preempt(sb_engine *e, req *r, sb_ns t)
{
    unschedule(e, r);
    eng_release_blocks(e, r);
    list_remove(&e->running, r);
    list_push_front(&e->waiting, r);
    r->state = REQ_WAITING;
    adapter_count(e, r->adapter, -1, +1);
    r->u.preemptions++;
    e->preemptions++;
    push_event(e, SB_ENGINE_EV_PREEMPTED, r, t, 0);
}

/* Gives running request r the blocks to hold n_new more tokens, preempting the newest running
 * requests while none are free. False if r itself had to go (it was the newest). */
static bool alloc_slots(sb_engine *e, req *r, uint32_t n_new, sb_ns t)
{
    uint32_t need = blocks_for(e, r->n_computed + n_new);
    while (need > r->n_blocks && eng_free_blocks(e) < need - r->n_blocks) {
        req *victim = e->running.tail;
        preempt(e, victim, t);
        if (victim == r)
            return false;
    }
    while (r->n_blocks < need)
        r->table[r->n_blocks++] = eng_take_block(e);
    return true;
}

static void schedule(sb_engine *e, req *r, uint32_t n, bool decode)
{
    r->sched = n;
    r->sched_decode = decode;
    if (decode) {
        r->sched_context = r->n_computed;
        e->step.decode_tokens += n;
        e->step.context_tokens += r->n_computed;
    } else {
        r->sched_context = 0;
        e->step.prefill_tokens += n;
    }
    e->step.num_seqs++;
    e->budget -= n;
}

/* Tries to admit waiting request r into the step starting at t. 1: admitted; 0: not enough
 * free blocks (admission stops, first come first served); -1: its adapter cannot be loaded
 * (skip it, as vLLM does). */
static int admit(sb_engine *e, req *r, sb_ns t)
{
    adapter *victim;
    int lora = lora_check(e, r->adapter, &victim);
    if (lora < 0)
        return -1;

    uint32_t bs = e->p.block_size, known = r->n_prompt + r->n_generated;
    /* At least one token must be computed to produce the next one (vLLM caps hits likewise). */
    uint32_t max_hit = (known - 1) / bs, hits = 0, hits_free = 0;
    if (max_hit > r->n_hashes)
        max_hit = r->n_hashes;
    if (e->p.enable_prefix_caching) {
        for (; hits < max_hit; hits++) {
            uint32_t b = eng_block_find(e, r->hashes[hits]);
            if (b == NIL)
                break;
            hits_free += e->blocks[b].ref == 0;
            r->table[hits] = b; /* tentative; r holds no blocks while waiting */
        }
    }
    uint32_t cached = hits * bs, n_new = known - cached;
    if (n_new > e->budget)
        n_new = e->budget;
    uint32_t need = blocks_for(e, cached + n_new) - hits;
    if (need > eng_free_blocks(e) - hits_free)
        return 0;

    if (lora > 0) {
        if (victim)
            victim->resident = false;
        else
            e->n_resident++;
        adapter *a = adapter_find(e, r->adapter);
        a->resident = true;
        e->step.lora_loads++;
        if (victim)
            adapter_maybe_drop(e, victim->id); /* after the last use of `a` and `victim` */
    }
    if (r->adapter) {
        adapter *a = adapter_find(e, r->adapter);
        a->last_used_step = e->steps;
    }
    for (uint32_t i = 0; i < hits; i++)
        eng_touch_block(e, r->table[i]);
    r->n_blocks = hits;
    r->n_registered = hits;
    r->n_computed = cached;
    while (r->n_blocks < hits + need)
        r->table[r->n_blocks++] = eng_take_block(e);

    list_remove(&e->waiting, r);
    list_push_back(&e->running, r);
    r->state = REQ_RUNNING;
    adapter_count(e, r->adapter, +1, -1);
    if (!r->admitted_once) {
        r->admitted_once = true;
        r->u.queue_ns = t - r->u.arrival_ns;
        r->u.cached_tokens = cached;
        if (e->p.enable_prefix_caching) {
            e->pc_queries += known;
            e->pc_hits += cached;
        }
    }
    schedule(e, r, n_new, false);
    return 1;
}

/* ---- steps ---------------------------------------------------------------------------------- */

/* When the next step would start, or SB_ENGINE_NEVER without work. */
static sb_ns pending_start(const sb_engine *e)
{
    if (e->active)
        return e->step.start_ns;
    if (e->running.n)
        return e->gpu_free_at;
    if (e->waiting.n) {
        sb_ns a = e->waiting.head->u.arrival_ns;
        return a > e->gpu_free_at ? a : e->gpu_free_at;
    }
    return SB_ENGINE_NEVER;
}

static void form_step(sb_engine *e, sb_ns t)
{
    memset(&e->step, 0, sizeof e->step);
    e->step.start_ns = t;
    e->budget = e->p.max_num_batched_tokens;
    uint64_t preempts = e->preemptions;

    /* Running sequences in admission order, so preemption (which takes the tail) only ever
     * removes sequences not yet visited, or the one being visited. Decodes first. */
    for (req *r = e->running.head, *next; r && e->budget; r = next) {
        if (r->n_prompt + r->n_generated - r->n_computed != 1) {
            next = r->next;
            continue;
        }
        if (!alloc_slots(e, r, 1, t))
            break;
        next = r->next;
        schedule(e, r, 1, true);
    }
    for (req *r = e->running.head, *next; r && e->budget; r = next) {
        uint32_t left = r->n_prompt + r->n_generated - r->n_computed;
        if (left <= 1) {
            next = r->next;
            continue;
        }
        uint32_t n = left < e->budget ? left : e->budget;
        if (!alloc_slots(e, r, n, t))
            break;
        next = r->next;
        schedule(e, r, n, false);
    }
    /* Like vLLM V1, a step that had to preempt admits nobody: the cache is full. */
    for (req *r = preempts == e->preemptions ? e->waiting.head : NULL, *next; r && e->budget; r = next) {
        next = r->next;
        if (e->running.n >= e->p.max_num_seqs || r->u.arrival_ns > t)
            break;
        if (admit(e, r, t) == 0)
            break;
    }

    const sb_engine_params *p = &e->p;
    double var = p->prefill_token_ns * e->step.prefill_tokens + p->decode_token_ns * e->step.decode_tokens +
                 p->context_token_ns * (double)e->step.context_tokens;
    /* An empty step cannot happen (an engine with nothing running admits the waiting head);
     * if it ever did, it still costs the overhead, so time advances and no loop spins. */
    e->step.end_ns = t + (sb_ns)llround(p->step_overhead_ns + var) + (sb_ns)e->step.lora_loads * p->lora_load_ns;
    if (e->step.end_ns == t)
        e->step.end_ns = t + 1;
    e->active = true;
}

static void finish(sb_engine *e, req *r, sb_ns t)
{
    r->u.e2e_ns = t - r->u.arrival_ns;
    e->successes++;
    push_event(e, SB_ENGINE_EV_FINISHED, r, t, 0);
    req_destroy(e, r);
}

/* Hashes the blocks that r's newly known (generated) tokens filled, continuing the chain:
 * O(block_size) once per block. */
static void extend_hashes(sb_engine *e, req *r)
{
    uint32_t bs = e->p.block_size, known = r->n_prompt + r->n_generated;
    if (!r->can_extend)
        return;
    while (r->n_hashes < r->max_hashes && (r->n_hashes + 1) * bs <= known) {
        uint32_t blk[bs];
        for (uint32_t i = 0; i < bs; i++)
            blk[i] = eng_token_at(r, r->n_hashes * bs + i);
        r->chain = eng_hash_next(r->chain, blk, bs);
        r->hashes[r->n_hashes++] = sb_table_tag_u64(&e->btab, r->chain);
    }
}

static void complete_step(sb_engine *e)
{
    sb_ns t = e->step.end_ns;
    for (req *r = e->running.head, *next; r; r = next) {
        next = r->next;
        if (!r->sched)
            continue;
        r->n_computed += r->sched;
        r->sched = 0;
        r->sched_context = 0;
        eng_register_blocks(e, r);
        if (r->n_computed < r->n_prompt + r->n_generated)
            continue;
        r->n_generated++;
        extend_hashes(e, r);
        r->u.completion_tokens = r->n_generated;
        e->gen_tokens++;
        if (r->n_generated == 1) {
            r->u.ttft_ns = t - r->u.arrival_ns;
            e->prompt_tokens += r->n_prompt;
            push_event(e, SB_ENGINE_EV_FIRST_TOKEN, r, t, 0);
        } else {
            sb_ns itl = t - r->last_token_ns;
            r->u.itl_sum_ns += itl;
            r->u.itl_count++;
            if (itl > r->u.itl_max_ns)
                r->u.itl_max_ns = itl;
            push_event(e, SB_ENGINE_EV_TOKEN, r, t, itl);
        }
        r->last_token_ns = t;
        if (r->n_generated == r->max_tokens)
            finish(e, r, t);
    }
    e->gpu_free_at = t;
    e->active = false;
    e->steps++;
}

/* Forms the step due before `now`, if one is: time has moved past its start. */
static void settle(sb_engine *e, sb_ns now)
{
    if (!e->active) {
        sb_ns s = pending_start(e);
        if (s != SB_ENGINE_NEVER && s < now)
            form_step(e, s);
    }
}

static sb_ns clamp_now(sb_engine *e, sb_ns now)
{
    if (now < e->now)
        return e->now;
    e->now = now;
    return now;
}

/* ---- public API ----------------------------------------------------------------------------- */

sb_engine *sb_engine_new(const sb_engine_params *p)
{
    if (sb_engine_params_check(p) != 0)
        return NULL;
    sb_engine *e = sb_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->p = *p;
    e->fq_head = e->fq_tail = NIL;
    /* calloc: untouched pages stay unmapped, so a replica costs memory only for the blocks it
     * has used; the table stays at most half full. */
    e->blocks = sb_calloc(p->num_gpu_blocks, sizeof *e->blocks);
    sb_table_init(&e->btab, p->hash_secret);
    /* Worst case between two deliveries: every sequence emits a token and finishes, and a
     * formation preempts them all. */
    e->cap_ev = 4 * (size_t)p->max_num_seqs + 16;
    e->ev = sb_malloc(e->cap_ev * sizeof *e->ev);
    if (!e->blocks || sb_table_reserve(&e->btab, p->num_gpu_blocks) < 0 || !e->ev ||
        ids_init(&e->ids, p->hash_secret) != 0)
        goto fail;
    return e;
fail:
    sb_engine_free(e);
    return NULL;
}

void sb_engine_free(sb_engine *e)
{
    if (!e)
        return;
    req_list *lists[] = {&e->waiting, &e->running};
    for (int i = 0; i < 2; i++)
        for (req *r = lists[i]->head, *next; r; r = next) {
            next = r->next;
            sb_free(r);
        }
    ids_free(&e->ids);
    sb_free(e->kv);
    sb_free(e->kv_hashes);
    sb_free(e->kv_tokens);
    sb_free(e->adapters);
    sb_free(e->ev);
    sb_table_free(&e->btab);
    sb_free(e->blocks);
    sb_free(e);
}

int sb_engine_submit(sb_engine *e, const sb_engine_request *q, sb_ns now)
{
    const sb_engine_params *p = &e->p;
    if (!q || q->n_prompt == 0 || q->max_tokens == 0 || (!q->tokens && !q->block_hashes) ||
        (q->adapter && p->max_loras == 0))
        return -EINVAL;
    uint64_t total = (uint64_t)q->n_prompt + q->max_tokens;
    if (total > (uint64_t)p->num_gpu_blocks * p->block_size)
        return -E2BIG;
    if (ids_find(&e->ids, q->id))
        return -EEXIST;
    now = clamp_now(e, now);
    settle(e, now);

    uint32_t bs = p->block_size, n_hashes = q->n_prompt / bs;
    /* Every token but the last is computed, so that many full blocks can ever be cached. */
    uint32_t max_hashes = (uint32_t)((total - 1) / bs);
    uint32_t max_blocks = blocks_for(e, (uint32_t)total);
    /* Prompt tokens kept: all of them for STORED events, else the partial block's, which
     * generated blocks continue. */
    bool has_tokens = p->kv_events && q->tokens;
    uint32_t tok_base = has_tokens ? 0 : n_hashes * bs;
    uint32_t n_toks = q->tokens ? q->n_prompt - tok_base : 0;
    uint32_t n_out = q->output_tokens ? q->max_tokens : 0;
    req *r =
        sb_malloc(sizeof *r + max_hashes * sizeof(uint64_t) + ((size_t)max_blocks + n_toks + n_out) * sizeof(uint32_t));
    if (!r)
        return -ENOMEM;
    *r = (req){
        .id = q->id,
        .adapter = q->adapter,
        .n_prompt = q->n_prompt,
        .max_tokens = q->max_tokens,
        .n_hashes = n_hashes,
        .max_hashes = max_hashes,
        .can_extend = q->tokens || q->n_prompt % bs == 0,
        .has_tokens = has_tokens,
        .tok_base = tok_base,
        .u = {.arrival_ns = now, .prompt_tokens = q->n_prompt},
    };
    r->hashes = (uint64_t *)(r + 1);
    r->table = (uint32_t *)(r->hashes + max_hashes);
    r->toks = r->table + max_blocks;
    r->out = n_out ? r->toks + n_toks : NULL;
    if (n_toks)
        memcpy(r->toks, q->tokens + tok_base, n_toks * sizeof *r->toks);
    if (n_out)
        memcpy(r->out, q->output_tokens, n_out * sizeof *r->out);
    if (ids_put(&e->ids, r) != 0 || (q->adapter && !adapter_get(e, q->adapter))) {
        if (ids_find(&e->ids, q->id))
            ids_remove(&e->ids, q->id);
        sb_free(r);
        return -ENOMEM;
    }
    if (q->block_hashes)
        memcpy(r->hashes, q->block_hashes, n_hashes * sizeof *r->hashes);
    else
        sb_engine_hash_blocks(q->tokens, q->n_prompt, p->block_size, q->adapter, r->hashes);
    r->chain = n_hashes ? r->hashes[n_hashes - 1] : eng_hash_root(q->adapter);
    /* Keyed once here; the block table only ever sees these. */
    for (uint32_t i = 0; i < n_hashes; i++)
        r->hashes[i] = sb_table_tag_u64(&e->btab, r->hashes[i]);
    r->state = REQ_WAITING;
    list_push_back(&e->waiting, r);
    adapter_count(e, r->adapter, 0, +1);
    return 0;
}

int sb_engine_abort(sb_engine *e, uint64_t id, sb_ns now)
{
    now = clamp_now(e, now);
    settle(e, now);
    req *r = ids_find(&e->ids, id);
    if (!r)
        return -ENOENT;
    if (r->state == REQ_RUNNING && e->active)
        unschedule(e, r); /* the step keeps its duration; only its bookkeeping changes */
    e->aborts++;
    req_destroy(e, r);
    return 0;
}

size_t sb_engine_advance(sb_engine *e, sb_ns now, sb_engine_event_cb cb, void *ud)
{
    size_t steps = 0;
    if (e->in_advance)
        return 0;
    e->in_advance = true;
    if (now < e->now)
        now = e->now;
    for (;;) {
        if (!e->active) {
            sb_ns s = pending_start(e);
            if (s == SB_ENGINE_NEVER || s >= now)
                break;
            form_step(e, s);
        }
        if (e->step.end_ns > now)
            break;
        complete_step(e);
        if (e->now < e->gpu_free_at)
            e->now = e->gpu_free_at; /* callbacks act at the step's end */
        steps++;
        deliver(e, cb, ud);
    }
    deliver(e, cb, ud);
    if (e->now < now)
        e->now = now;
    e->in_advance = false;
    return steps;
}

sb_ns sb_engine_next_event(sb_engine *e)
{
    if (!e->active) {
        sb_ns s = pending_start(e);
        if (s == SB_ENGINE_NEVER)
            return SB_ENGINE_NEVER;
        form_step(e, s);
    }
    return e->step.end_ns;
}

int sb_engine_reset_prefix_cache(sb_engine *e, sb_ns now)
{
    now = clamp_now(e, now);
    settle(e, now);
    if (e->n_used)
        return -EBUSY;
    eng_unhash_all(e);
    eng_kv_record(e, SB_ENGINE_KV_CLEARED, now, NULL, 0, NULL, 0);
    return 0;
}

bool sb_engine_current_step(const sb_engine *e, sb_engine_step *out)
{
    if (!e->active)
        return false;
    *out = e->step;
    return true;
}

void sb_engine_metrics_get(const sb_engine *e, sb_engine_metrics *out)
{
    *out = (sb_engine_metrics){
        .num_requests_running = e->running.n,
        .num_requests_waiting = e->waiting.n,
        .kv_cache_usage = (double)e->n_used / e->p.num_gpu_blocks,
        .num_blocks_used = e->n_used,
        .num_blocks_cached = e->n_cached_free,
        .prefix_cache_queries_total = e->pc_queries,
        .prefix_cache_hits_total = e->pc_hits,
        .request_success_total = e->successes,
        .request_aborted_total = e->aborts,
        .prompt_tokens_total = e->prompt_tokens,
        .generation_tokens_total = e->gen_tokens,
        .num_preemptions_total = e->preemptions,
        .num_steps_total = e->steps,
        .num_running_adapters = e->n_running_adapters,
        .num_waiting_adapters = e->n_waiting_adapters,
        .max_loras = e->p.max_loras,
        .block_size = e->p.block_size,
        .num_gpu_blocks = e->p.num_gpu_blocks,
    };
}

size_t sb_engine_adapters(const sb_engine *e, sb_engine_adapter *out, size_t cap)
{
    for (size_t i = 0; i < e->n_adapters && i < cap; i++) {
        const adapter *a = &e->adapters[i];
        out[i] =
            (sb_engine_adapter){.id = a->id, .running = a->running, .waiting = a->waiting, .resident = a->resident};
    }
    return e->n_adapters;
}
