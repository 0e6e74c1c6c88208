/*
 * replay_test.c — the request-id memory.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "serve/replay.h"

static int waiter_a, waiter_b;

static tsrd_replay_result begin(tsrd_replay *r, uint64_t id, void *waiter, const uint8_t **reply,
                                size_t *len)
{
    bool ok;
    tsrd_replay_result res = tsrd_replay_begin(r, id, waiter, reply, len, &ok);
    cr_assert(ok);
    return res;
}

static void finish(tsrd_replay *r, uint64_t id, const char *reply, size_t *n_waiters,
                   void ***waiters)
{
    tsrd_replay_finish(r, id, (const uint8_t *)reply, strlen(reply), waiters, n_waiters);
}

Test(replay, a_finished_id_is_answered_from_memory)
{
    tsrd_replay r;
    tsrd_replay_init(&r, 0);
    const uint8_t *reply;
    size_t len, n;
    void **waiters;
    cr_assert_eq(begin(&r, 7, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    finish(&r, 7, "seven", &n, &waiters);
    cr_assert_eq(n, 0);
    cr_assert_eq(begin(&r, 7, &waiter_b, &reply, &len), TSRD_REPLAY_DONE);
    cr_assert_eq(len, 5);
    cr_assert_eq(memcmp(reply, "seven", 5), 0);
    cr_assert_eq(begin(&r, 8, &waiter_b, &reply, &len), TSRD_REPLAY_NEW);
    tsrd_replay_fini(&r);
}

Test(replay, a_resend_while_executing_waits_for_the_first)
{
    tsrd_replay r;
    tsrd_replay_init(&r, 0);
    const uint8_t *reply;
    size_t len, n;
    void **waiters;
    cr_assert_eq(begin(&r, 9, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    cr_assert_eq(begin(&r, 9, &waiter_b, &reply, &len), TSRD_REPLAY_PENDING);
    cr_assert_eq(begin(&r, 9, &waiter_a, &reply, &len), TSRD_REPLAY_PENDING);
    finish(&r, 9, "nine", &n, &waiters);
    cr_assert_eq(n, 2);
    cr_assert_eq(waiters[0], &waiter_b);
    cr_assert_eq(waiters[1], &waiter_a);
    free(waiters);
    tsrd_replay_fini(&r);
}

Test(replay, id_zero_is_never_remembered)
{
    tsrd_replay r;
    tsrd_replay_init(&r, 0);
    const uint8_t *reply;
    size_t len, n;
    void **waiters;
    cr_assert_eq(begin(&r, 0, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    finish(&r, 0, "zero", &n, &waiters);
    cr_assert_eq(begin(&r, 0, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    cr_assert_eq(tsrd_replay_count(&r), 0);
    tsrd_replay_fini(&r);
}

Test(replay, only_the_last_entries_are_kept)
{
    tsrd_replay r;
    tsrd_replay_init(&r, 0);
    const uint8_t *reply;
    size_t len, n;
    void **waiters;
    for (uint64_t id = 1; id <= TSRD_REPLAY_ENTRIES + 10; id++) {
        cr_assert_eq(begin(&r, id, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
        finish(&r, id, "x", &n, &waiters);
    }
    cr_assert_eq(tsrd_replay_count(&r), TSRD_REPLAY_ENTRIES);
    cr_assert_eq(begin(&r, 10, &waiter_a, &reply, &len), TSRD_REPLAY_NEW, "oldest evicted");
    cr_assert_eq(begin(&r, TSRD_REPLAY_ENTRIES + 10, &waiter_a, &reply, &len), TSRD_REPLAY_DONE);
    tsrd_replay_fini(&r);
}

Test(replay, replies_past_the_budget_are_not_kept)
{
    tsrd_replay r;
    tsrd_replay_init(&r, 8);
    const uint8_t *reply;
    size_t len, n;
    void **waiters;
    cr_assert_eq(begin(&r, 1, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    finish(&r, 1, "123456789", &n, &waiters);
    cr_assert_eq(begin(&r, 1, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    finish(&r, 1, "12345", &n, &waiters);
    cr_assert_eq(begin(&r, 2, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    finish(&r, 2, "6789", &n, &waiters);
    /* 5 + 4 bytes pass the 8-byte budget: the older reply went. */
    cr_assert_eq(begin(&r, 2, &waiter_a, &reply, &len), TSRD_REPLAY_DONE);
    cr_assert_eq(begin(&r, 1, &waiter_a, &reply, &len), TSRD_REPLAY_NEW);
    tsrd_replay_fini(&r);
}
