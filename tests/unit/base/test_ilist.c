/* Tests base/ilist: the index-linked list both indexes keep their per-endpoint LRU order in.
 * Each list is checked whole after every step (walked from both ends against the order it
 * should have), with the link not at the start of its element, an element on two lists at
 * once, and a long random run against a plain array model. */
#include "sb_test.h"

#include "base/ilist.h"

/* The link away from offset 0 and a stride that is not the link's size, as in the indexes. */
typedef struct node {
    uint64_t payload;
    sb_ilist_link by_age;
    uint32_t tag;
    sb_ilist_link by_use; /* a second list through the same elements */
} node;

#define N_NODES 64

/* Walks l from the front and from the back and checks both against want[0..n). */
static void check_list(const sb_ilist *l, sb_ilist_nodes nodes, const uint32_t *want, size_t n)
{
    uint32_t k = l->front;
    uint32_t prev = SB_ILIST_NIL;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(k, want[i]);
        assert_int_equal(sb_ilist_at(nodes, k)->prev, prev);
        prev = k;
        k = sb_ilist_at(nodes, k)->next;
    }
    assert_int_equal(k, SB_ILIST_NIL);
    assert_int_equal(l->back, n ? want[n - 1] : SB_ILIST_NIL);
    k = l->back;
    for (size_t i = n; i-- > 0;) {
        assert_int_equal(k, want[i]);
        k = sb_ilist_at(nodes, k)->prev;
    }
    assert_int_equal(k, SB_ILIST_NIL);
}

static void test_push_remove_move(void **state)
{
    (void)state;
    node a[N_NODES];
    memset(a, 0xab, sizeof(a)); /* links start as garbage: pushing must not read them */
    sb_ilist_nodes nodes = SB_ILIST_NODES(a, node, by_age);
    sb_ilist l = SB_ILIST_EMPTY;
    check_list(&l, nodes, NULL, 0);

    sb_ilist_push_front(&l, nodes, 3);
    check_list(&l, nodes, (uint32_t[]){3}, 1);
    sb_ilist_push_front(&l, nodes, 7);
    sb_ilist_push_front(&l, nodes, 1);
    check_list(&l, nodes, (uint32_t[]){1, 7, 3}, 3);

    sb_ilist_move_to_front(&l, nodes, 3); /* the back */
    check_list(&l, nodes, (uint32_t[]){3, 1, 7}, 3);
    sb_ilist_move_to_front(&l, nodes, 1); /* the middle */
    check_list(&l, nodes, (uint32_t[]){1, 3, 7}, 3);
    sb_ilist_move_to_front(&l, nodes, 1); /* already the front */
    check_list(&l, nodes, (uint32_t[]){1, 3, 7}, 3);

    sb_ilist_remove(&l, nodes, 3); /* the middle */
    check_list(&l, nodes, (uint32_t[]){1, 7}, 2);
    sb_ilist_remove(&l, nodes, 1); /* the front */
    check_list(&l, nodes, (uint32_t[]){7}, 1);
    sb_ilist_remove(&l, nodes, 7); /* the only one */
    check_list(&l, nodes, NULL, 0);

    /* A removed node can be pushed again, and the list is usable after emptying. */
    sb_ilist_push_front(&l, nodes, 7);
    sb_ilist_push_front(&l, nodes, 0);
    sb_ilist_remove(&l, nodes, 7); /* the back */
    check_list(&l, nodes, (uint32_t[]){0}, 1);
}

/* Two links in one element, and two lists through each link: none disturbs another, and the
 * payload around the links is untouched. */
static void test_lists_share_elements(void **state)
{
    (void)state;
    node a[N_NODES];
    for (uint32_t k = 0; k < N_NODES; k++)
        a[k] = (node){.payload = 1000 + k, .tag = 2000 + k};
    sb_ilist_nodes age = SB_ILIST_NODES(a, node, by_age), use = SB_ILIST_NODES(a, node, by_use);
    sb_ilist even = SB_ILIST_EMPTY, odd = SB_ILIST_EMPTY, all = SB_ILIST_EMPTY;
    for (uint32_t k = 0; k < 6; k++) {
        sb_ilist_push_front(k % 2 ? &odd : &even, age, k);
        sb_ilist_push_front(&all, use, k);
    }
    sb_ilist_move_to_front(&even, age, 0);
    sb_ilist_remove(&odd, age, 3);
    sb_ilist_move_to_front(&all, use, 2);
    check_list(&even, age, (uint32_t[]){0, 4, 2}, 3);
    check_list(&odd, age, (uint32_t[]){5, 1}, 2);
    check_list(&all, use, (uint32_t[]){2, 5, 4, 3, 1, 0}, 6);
    for (uint32_t k = 0; k < N_NODES; k++) {
        assert_int_equal(a[k].payload, 1000 + k);
        assert_int_equal(a[k].tag, 2000 + k);
    }
}

/* Removes position i of model[0..n). */
static void model_erase(uint32_t *model, size_t *n, size_t i)
{
    memmove(&model[i], &model[i + 1], (*n - i - 1) * sizeof(*model));
    (*n)--;
}

/* Random pushes, removals and moves, as an LRU sees them, against an array in list order. */
static void test_random_against_model(void **state)
{
    (void)state;
    node a[N_NODES];
    memset(a, 0, sizeof(a));
    sb_ilist_nodes nodes = SB_ILIST_NODES(a, node, by_use);
    sb_ilist l = SB_ILIST_EMPTY;
    uint32_t model[N_NODES];
    size_t n = 0;
    bool on[N_NODES] = {false};
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int step = 0; step < 20000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64: fixed seed, same run each time */
        uint32_t k = (uint32_t)(x % N_NODES);
        size_t at = 0;
        while (at < n && model[at] != k)
            at++;
        if (!on[k]) {
            sb_ilist_push_front(&l, nodes, k);
            memmove(&model[1], &model[0], n * sizeof(*model));
            model[0] = k;
            n++;
            on[k] = true;
        } else if ((x >> 32) % 3 == 0) {
            sb_ilist_remove(&l, nodes, k);
            model_erase(model, &n, at);
            on[k] = false;
        } else if ((x >> 32) % 3 == 1 && l.back != SB_ILIST_NIL) {
            uint32_t victim = l.back; /* evict the least recently used */
            assert_int_equal(victim, model[n - 1]);
            sb_ilist_remove(&l, nodes, victim);
            n--;
            on[victim] = false;
        } else {
            sb_ilist_move_to_front(&l, nodes, k);
            model_erase(model, &n, at);
            memmove(&model[1], &model[0], n * sizeof(*model));
            model[0] = k;
            n++;
        }
        check_list(&l, nodes, model, n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_remove_move),
        cmocka_unit_test(test_lists_share_elements),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
