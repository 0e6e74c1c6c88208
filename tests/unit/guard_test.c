/*
 * guard_test.c — backend/guard.c: a SIGBUS inside the guarded range becomes a
 * return, and every other SIGBUS still ends the process.
 *
 * The faults are real: a shared-memory object mapped at two pages and cut to
 * one, so that touching the second page raises SIGBUS (BUS_ADRERR).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/guard.h"

/* Two pages mapped, only the first backed: any byte of the second faults. */
static unsigned char *guard_half_mapping(size_t *page)
{
    *page = (size_t)sysconf(_SC_PAGESIZE);
    char name[64];
    snprintf(name, sizeof name, "/tsr-guard-test-%ld", (long)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    shm_unlink(name);
    cr_assert_eq(ftruncate(fd, (off_t)(2 * *page)), 0);
    unsigned char *p = mmap(NULL, 2 * *page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(p, MAP_FAILED);
    cr_assert_eq(ftruncate(fd, (off_t)*page), 0);
    close(fd);
    return p;
}

typedef struct guard_copy {
    unsigned char *dst;
    const unsigned char *src;
    size_t len;
    bool done;
} guard_copy;

static void guard_copy_run(void *arg)
{
    guard_copy *c = arg;
    memcpy(c->dst, c->src, c->len);
    c->done = true;
}

static void guard_setup(void)
{
    cr_assert_eq(tsrd_guard_install(), 0);
}

TestSuite(guard, .init = guard_setup);

Test(guard, a_copy_that_does_not_fault_returns_true)
{
    size_t page;
    unsigned char *p = guard_half_mapping(&page);
    static unsigned char out[64];
    memset(p, 7, 64);
    guard_copy c = {out, p, 64, false};
    cr_expect(tsrd_guard_run(p, 2 * page, guard_copy_run, &c));
    cr_expect(c.done);
    cr_expect_eq(out[63], 7);
}

Test(guard, a_fault_inside_the_range_returns_false_and_the_thread_goes_on)
{
    size_t page;
    unsigned char *p = guard_half_mapping(&page);
    static unsigned char out[8192];
    for (int round = 0; round < 3; round++) {
        guard_copy c = {out, p + page - 16, 32, false};
        cr_expect_not(tsrd_guard_run(p, 2 * page, guard_copy_run, &c), "round %d", round);
        cr_expect_not(c.done, "the copy was cut short");
        /* Stores fault the same way. */
        guard_copy w = {p + page, out, 16, false};
        cr_expect_not(tsrd_guard_run(p, 2 * page, guard_copy_run, &w), "round %d", round);
    }
    /* SIGBUS is not left blocked: a fault outside any guard still kills (below). */
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    cr_expect_not(sigismember(&now, SIGBUS));
}

Test(guard, a_fault_outside_the_guarded_range_ends_the_process, .signal = SIGBUS)
{
    size_t page;
    unsigned char *p = guard_half_mapping(&page);
    static unsigned char out[64];
    /* The guard covers the first page only; the fault is in the second. */
    guard_copy c = {out, p + page, 16, false};
    tsrd_guard_run(p, page, guard_copy_run, &c);
}

Test(guard, a_fault_outside_any_guard_ends_the_process, .signal = SIGBUS)
{
    size_t page;
    volatile unsigned char *p = guard_half_mapping(&page);
    p[page] = 1;
}

static void guard_kill_self(void *arg)
{
    (void)arg;
    raise(SIGBUS);
}

Test(guard, a_sigbus_sent_by_kill_inside_a_guard_ends_the_process, .signal = SIGBUS)
{
    static unsigned char buf[64];
    tsrd_guard_run(buf, sizeof buf, guard_kill_self, NULL);
}
