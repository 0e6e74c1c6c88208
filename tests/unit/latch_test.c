/*
 * latch_test.c — the one-shot latch: set before and during a wait, a deadline
 * that passes first, and the monotonic deadline arithmetic.
 */
#include <criterion/criterion.h>
#include <pthread.h>

#include "tessera/latch.h"

static int64_t latch_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

Test(latch, a_passed_deadline_returns_unset)
{
    tsr_latch l;
    cr_assert_eq(tsr_latch_init(&l, NULL), TSR_OK);
    struct timespec now;
    tsr_latch_deadline(&now, 0);
    cr_expect_not(tsr_latch_wait_until(&l, &now));
    cr_expect_not(tsr_latch_is_set(&l));
    tsr_latch_destroy(&l);
}

Test(latch, set_before_the_wait_stays_set)
{
    tsr_latch l;
    cr_assert_eq(tsr_latch_init(&l, NULL), TSR_OK);
    tsr_latch_set(&l);
    struct timespec now;
    tsr_latch_deadline(&now, 0);
    cr_expect(tsr_latch_wait_until(&l, &now));
    cr_expect(tsr_latch_wait_until(&l, &now));
    tsr_latch_set(&l);
    cr_expect(tsr_latch_is_set(&l));
    tsr_latch_destroy(&l);
}

static void *latch_setter(void *arg)
{
    tsr_latch_set(arg);
    return NULL;
}

Test(latch, a_set_from_another_thread_ends_the_wait)
{
    tsr_latch l;
    cr_assert_eq(tsr_latch_init(&l, NULL), TSR_OK);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, latch_setter, &l), 0);
    /* The deadline is a bound that keeps a broken latch from hanging the suite,
     * not a measurement: the wait must end by the set, long before it. */
    struct timespec far;
    tsr_latch_deadline(&far, 60000);
    cr_expect(tsr_latch_wait_until(&l, &far));
    pthread_join(th, NULL);
    tsr_latch_destroy(&l);
}

Test(latch, deadlines_count_from_the_monotonic_now)
{
    struct timespec before, deadline, after, clamped;
    clock_gettime(CLOCK_MONOTONIC, &before);
    tsr_latch_deadline(&deadline, 2999);
    tsr_latch_deadline(&clamped, -5);
    clock_gettime(CLOCK_MONOTONIC, &after);
    cr_expect_lt(deadline.tv_nsec, 1000000000L);
    cr_expect_geq(latch_ns(&deadline), latch_ns(&before) + 2999000000LL);
    cr_expect_leq(latch_ns(&deadline), latch_ns(&after) + 2999000000LL);
    cr_expect_geq(latch_ns(&clamped), latch_ns(&before));
    cr_expect_leq(latch_ns(&clamped), latch_ns(&after));
}
