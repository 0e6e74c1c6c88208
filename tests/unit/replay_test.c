/*
 * replay_test.c — the request-id memory.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "serve/replay.h"

static int waiter_a, waiter_b;

/* Each test's memory (no budget for replies unless the test sets one), and
 * what begin and finish hand back. */
static tsrd_replay mem;
static const uint8_t *reply;
static size_t len, n;
static void **waiters;

static void setup(void)
{
    tsrd_replay_init(&mem, 0);
}

static void teardown(void)
{
    tsrd_replay_fini(&mem);
}

TestSuite(replay, .init = setup, .fini = teardown);

/* After the suite's init: the memory again, with an 8-byte budget. */
static void budget_of_8(void)
{
    tsrd_replay_fini(&mem);
    tsrd_replay_init(&mem, 8);
}

/* tsrd_replay_begin for id from waiter; reply and len are set on DONE. */
static tsrd_replay_result begin(uint64_t id, void *waiter)
{
    bool ok;
    tsrd_replay_result res = tsrd_replay_begin(&mem, id, waiter, true, &reply, &len, &ok);
    cr_assert(ok);
    return res;
}

/* tsrd_replay_finish for id with the text of reply; sets waiters and n. */
static void finish(uint64_t id, const char *text)
{
    tsrd_replay_finish(&mem, id, (const uint8_t *)text, strlen(text), &waiters, &n);
}

Test(replay, a_finished_id_is_answered_from_memory)
{
    cr_assert_eq(begin(7, &waiter_a), TSRD_REPLAY_NEW);
    finish(7, "seven");
    cr_assert_eq(n, 0);
    cr_assert_eq(begin(7, &waiter_b), TSRD_REPLAY_DONE);
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(reply, "seven", 5), 0);
    cr_assert_eq(begin(8, &waiter_b), TSRD_REPLAY_NEW);
}

Test(replay, a_resend_while_executing_waits_for_the_first)
{
    cr_assert_eq(begin(9, &waiter_a), TSRD_REPLAY_NEW);
    cr_assert_eq(begin(9, &waiter_b), TSRD_REPLAY_PENDING);
    cr_assert_eq(begin(9, &waiter_a), TSRD_REPLAY_PENDING);
    finish(9, "nine");
    cr_assert_eq(n, 2);
    cr_assert_eq(waiters[0], &waiter_b);
    cr_assert_eq(waiters[1], &waiter_a);
    free(waiters);
}

Test(replay, a_resend_that_may_not_wait_is_told_pending_and_not_recorded)
{
    cr_assert_eq(begin(10, &waiter_a), TSRD_REPLAY_NEW);
    bool ok = false;
    cr_assert_eq(tsrd_replay_begin(&mem, 10, &waiter_b, false, &reply, &len, &ok),
                 TSRD_REPLAY_PENDING);
    cr_assert(ok);
    cr_assert_eq(begin(10, &waiter_a), TSRD_REPLAY_PENDING);
    finish(10, "ten");
    cr_assert_eq(n, 1, "only the resend that may wait is a waiter");
    cr_assert_eq(waiters[0], &waiter_a);
    free(waiters);
    /* Answered: stored bytes for anyone, waiting or not. */
    cr_assert_eq(tsrd_replay_begin(&mem, 10, &waiter_b, false, &reply, &len, &ok),
                 TSRD_REPLAY_DONE);
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(reply, "ten", 3), 0);
}

Test(replay, id_zero_is_never_remembered)
{
    cr_assert_eq(begin(0, &waiter_a), TSRD_REPLAY_NEW);
    finish(0, "zero");
    cr_assert_eq(begin(0, &waiter_a), TSRD_REPLAY_NEW);
    cr_assert_eq(tsrd_replay_count(&mem), 0);
}

Test(replay, only_the_last_entries_are_kept)
{
    for (uint64_t id = 1; id <= TSRD_REPLAY_ENTRIES + 10; id++) {
        cr_assert_eq(begin(id, &waiter_a), TSRD_REPLAY_NEW);
        finish(id, "x");
    }
    cr_assert_eq(tsrd_replay_count(&mem), TSRD_REPLAY_ENTRIES);
    cr_assert_eq(begin(10, &waiter_a), TSRD_REPLAY_NEW, "oldest evicted");
    cr_assert_eq(begin(TSRD_REPLAY_ENTRIES + 10, &waiter_a), TSRD_REPLAY_DONE);
}

Test(replay, replies_past_the_budget_are_not_kept, .init = budget_of_8)
{
    cr_assert_eq(begin(1, &waiter_a), TSRD_REPLAY_NEW);
    finish(1, "123456789");
    cr_assert_eq(begin(1, &waiter_a), TSRD_REPLAY_NEW);
    finish(1, "12345");
    cr_assert_eq(begin(2, &waiter_a), TSRD_REPLAY_NEW);
    finish(2, "6789");
    /* 5 + 4 bytes pass the 8-byte budget: the older reply went. */
    cr_assert_eq(begin(2, &waiter_a), TSRD_REPLAY_DONE);
    cr_assert_eq(begin(1, &waiter_a), TSRD_REPLAY_NEW);
}

/* A table of its own in pool, keeping up to budget bytes of replies. */
static void pooled_init(tsrd_replay *t, tsrd_replay_pool *pool, size_t budget)
{
    tsrd_replay_init(t, 0);
    tsrd_replay_set_pool(t, pool, budget);
}

/* tsrd_replay_begin for a new id on t, from no waiter. */
static void pooled_begin(tsrd_replay *t, uint64_t id)
{
    bool ok;
    const uint8_t *r;
    size_t l;
    cr_assert_eq(tsrd_replay_begin(t, id, NULL, true, &r, &l, &ok), TSRD_REPLAY_NEW);
}

/* tsrd_replay_finish for id on t with the text of a reply. */
static void pooled_finish(tsrd_replay *t, uint64_t id, const char *text)
{
    void **w;
    size_t nw;
    tsrd_replay_finish(t, id, (const uint8_t *)text, strlen(text), &w, &nw);
}

Test(replay, a_pool_evicts_the_oldest_reply_of_any_of_its_tables)
{
    tsrd_replay_pool pool = {.budget = 10};
    tsrd_replay a, b;
    pooled_init(&a, &pool, 8);
    pooled_init(&b, &pool, 8);
    pooled_begin(&a, 1);
    pooled_finish(&a, 1, "aaaaaa");
    cr_assert_eq(pool.bytes, 6);
    /* b's reply needs room in the pool: a's older one goes. */
    pooled_begin(&b, 2);
    pooled_finish(&b, 2, "bbbbbb");
    cr_expect_eq(pool.bytes, 6);
    cr_expect_eq(pool.evictions, 1);
    cr_expect_eq(a.bytes, 0);
    cr_expect_eq(tsrd_replay_state(&a, 1), TSRD_REPLAY_NEW, "the evicted id is forgotten");
    cr_expect_eq(tsrd_replay_state(&b, 2), TSRD_REPLAY_DONE);
    /* Larger than a table's own budget: not kept, nothing evicted. */
    pooled_begin(&a, 3);
    pooled_finish(&a, 3, "123456789");
    cr_expect_eq(tsrd_replay_state(&a, 3), TSRD_REPLAY_NEW);
    cr_expect_eq(pool.bytes, 6);
    /* A table that goes gives its bytes back. */
    tsrd_replay_fini(&b);
    cr_expect_eq(pool.bytes, 0);
    cr_expect_null(pool.lru_head);
    tsrd_replay_fini(&a);
}

Test(replay, a_budget_of_zero_keeps_nothing)
{
    tsrd_replay_pool pool = {.budget = 1 << 20};
    tsrd_replay t;
    pooled_init(&t, &pool, 0);
    pooled_begin(&t, 5);
    cr_expect_eq(tsrd_replay_state(&t, 5), TSRD_REPLAY_PENDING,
                 "still deduplicated while executing");
    pooled_finish(&t, 5, "x");
    cr_expect_eq(tsrd_replay_state(&t, 5), TSRD_REPLAY_NEW);
    cr_expect_eq(pool.bytes, 0);
    tsrd_replay_fini(&t);
}
