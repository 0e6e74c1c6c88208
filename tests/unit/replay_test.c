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
    tsrd_replay_result res = tsrd_replay_begin(&mem, id, waiter, &reply, &len, &ok);
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
