/* ilist: a doubly linked list threaded through an array by 32-bit indices. For nodes that
 * live in one growable array of the caller's (realloc moves them, so pointers would dangle,
 * and an index is half a pointer): the prefix index's and the precise KV index's
 * per-endpoint LRU lists. Not for lists of separately allocated objects (use pointers).
 *
 * A node embeds an sb_ilist_link; a list is an sb_ilist, its two ends. Functions reach a
 * node's neighbours through an sb_ilist_nodes: the array, its stride and the offset of the
 * link in an element (SB_ILIST_NODES builds one), so several lists, even of different
 * element types, share this code, and one element may sit on more than one list.
 *
 * Everything is static inline: the indexes move an entry to the front on every block a
 * routing decision touches, and inlined with a constant stride and offset this compiles to
 * what a list written for one struct does.
 *
 * Contract: indices are the caller's, below SB_ILIST_NIL; a node is on at most one list per
 * link; the functions never allocate and cannot fail. A removed node's links are left as they
 * were (the caller may reuse the fields, e.g. for a free list). Pure: no I/O. */
#ifndef SB_BASE_ILIST_H
#define SB_BASE_ILIST_H

#include <stddef.h>
#include <stdint.h>

/* The end of a list: no node has this index. */
#define SB_ILIST_NIL UINT32_MAX

/* Embedded in a node. Read-only to the caller: prev is towards the front, next towards the
 * back, SB_ILIST_NIL past either end. */
typedef struct sb_ilist_link {
    uint32_t prev, next;
} sb_ilist_link;

/* A list: its first and last node, both SB_ILIST_NIL when empty. Read-only to the caller
 * (an LRU list keeps the most recently used at the front, its victim at the back). */
typedef struct sb_ilist {
    uint32_t front, back;
} sb_ilist;

#define SB_ILIST_EMPTY ((sb_ilist){SB_ILIST_NIL, SB_ILIST_NIL})

/* Where the links are: node k's link is at base + k * stride + offset. The base is kept apart
 * from the offset so that an array not allocated yet (NULL) can be named. */
typedef struct sb_ilist_nodes {
    char *base;
    size_t stride, offset;
} sb_ilist_nodes;

/* The nodes of `array` (a pointer to elements of `type`), linked through member `field`. */
#define SB_ILIST_NODES(array, type, field) ((sb_ilist_nodes){(char *)(array), sizeof(type), offsetof(type, field)})

static inline sb_ilist_link *sb_ilist_at(sb_ilist_nodes n, uint32_t k)
{
    return (sb_ilist_link *)(n.base + (size_t)k * n.stride + n.offset);
}

/* Takes node k (on l) off l. O(1). */
static inline void sb_ilist_remove(sb_ilist *l, sb_ilist_nodes n, uint32_t k)
{
    sb_ilist_link *x = sb_ilist_at(n, k);
    if (x->prev != SB_ILIST_NIL)
        sb_ilist_at(n, x->prev)->next = x->next;
    else
        l->front = x->next;
    if (x->next != SB_ILIST_NIL)
        sb_ilist_at(n, x->next)->prev = x->prev;
    else
        l->back = x->prev;
}

/* Puts node k (on no list through this link) at the front of l. O(1). */
static inline void sb_ilist_push_front(sb_ilist *l, sb_ilist_nodes n, uint32_t k)
{
    sb_ilist_link *x = sb_ilist_at(n, k);
    x->prev = SB_ILIST_NIL;
    x->next = l->front;
    if (l->front != SB_ILIST_NIL)
        sb_ilist_at(n, l->front)->prev = k;
    l->front = k;
    if (l->back == SB_ILIST_NIL)
        l->back = k;
}

/* Moves node k (on l) to the front of l: an LRU list's "used now". O(1). */
static inline void sb_ilist_move_to_front(sb_ilist *l, sb_ilist_nodes n, uint32_t k)
{
    sb_ilist_remove(l, n, k);
    sb_ilist_push_front(l, n, k);
}

#endif
