/*
 * ring_loop_test.c — backend/ring_loop.c over a fake device that runs
 * launches after they are issued, as a GPU does: groups queued behind each
 * other, answered in order, waited for before the loop stops; a fence that
 * cannot be recorded, a backend that miscounts and the watchdog's busy time.
 *
 * The fake keeps one timeline: a launch of kernel k starts when the device is
 * free (or now) and takes k's time; a fence is the moment the device is done
 * with what was queued before it, and waiting for one sleeps until then.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend/guard.h"
#include "backend/ring_loop.h"
#include "tessera/ring.h"

#define SLOTS 32u

struct tsrd_backend {
    _Atomic uint64_t free_at; /* ns when the device is done with what was issued */
    _Atomic int fences_live;
    _Atomic int fences_made;
    _Atomic int launches;
    _Atomic int queued_behind; /* launch_many calls made while a fence was live */
    _Atomic int fail_fence;    /* fence_record calls still to fail */
    _Atomic int short_count;   /* launch_many calls still to under-report */
    _Atomic int order[256];    /* kernel ids in the order they ran */
};

struct tsrd_stream {
    int unused;
};

struct tsrd_fence {
    uint64_t at;
};

/* A kernel is its run time; the fake reads it through the kernel handle. */
typedef struct fake_kernel {
    int id;
    uint64_t ns;
} fake_kernel;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    for (uint64_t n = now_ns(); n < t; n = now_ns()) {
        struct timespec ts = {(time_t)((t - n) / 1000000000u), (long)((t - n) % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

static tsr_status fake_stream_create(tsrd_backend *b, int device, tsrd_stream **out, tsr_error *err)
{
    (void)b, (void)device, (void)err;
    *out = calloc(1, sizeof **out);
    return TSR_OK;
}

static void fake_stream_destroy(tsrd_backend *b, tsrd_stream *s)
{
    (void)b;
    free(s);
}

static tsr_status fake_launch_many(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                   tsrd_stream *s, size_t *launched, tsr_error *err)
{
    (void)s, (void)err;
    if (atomic_load(&b->fences_live) > 0)
        atomic_fetch_add(&b->queued_behind, 1);
    size_t go = n;
    if (atomic_load(&b->short_count) > 0 && n > 1) {
        atomic_fetch_sub(&b->short_count, 1);
        go = n - 1;
    }
    for (size_t i = 0; i < go; i++) {
        const fake_kernel *k = (const fake_kernel *)launches[i].kernel;
        uint64_t start = atomic_load(&b->free_at) > now_ns() ? atomic_load(&b->free_at) : now_ns();
        atomic_store(&b->free_at, start + k->ns);
        int at = atomic_fetch_add(&b->launches, 1);
        if (at < 256)
            atomic_store(&b->order[at], k->id);
    }
    *launched = go;
    return TSR_OK;
}

static tsr_status fake_synchronize(tsrd_backend *b, tsrd_stream *s, double *device_ms,
                                   tsr_error *err)
{
    (void)s, (void)err;
    sleep_until(atomic_load(&b->free_at));
    if (device_ms != NULL)
        *device_ms = 0;
    return TSR_OK;
}

static tsr_status fake_fence_record(tsrd_backend *b, tsrd_stream *s, tsrd_fence **out,
                                    tsr_error *err)
{
    (void)s;
    *out = NULL;
    if (atomic_load(&b->fail_fence) > 0) {
        atomic_fetch_sub(&b->fail_fence, 1);
        return tsr_error_set(err, TSR_CUDA_ERROR, "fake: no event");
    }
    tsrd_fence *f = malloc(sizeof *f);
    f->at = atomic_load(&b->free_at);
    atomic_fetch_add(&b->fences_live, 1);
    atomic_fetch_add(&b->fences_made, 1);
    *out = f;
    return TSR_OK;
}

static tsr_status fake_fence_wait(tsrd_backend *b, tsrd_fence *f, tsr_error *err)
{
    (void)err;
    sleep_until(f->at);
    free(f);
    atomic_fetch_sub(&b->fences_live, 1);
    return TSR_OK;
}

static const tsrd_backend_fence_ops fake_fences = {.fence_record = fake_fence_record,
                                                   .fence_wait = fake_fence_wait};
static const tsrd_backend_ops fake_ops = {.name = "fake",
                                          .stream_create = fake_stream_create,
                                          .stream_destroy = fake_stream_destroy,
                                          .launch_many = fake_launch_many,
                                          .synchronize = fake_synchronize,
                                          .fence = &fake_fences};

/* The client's side: a segment, and the loop serving it over two kernels. */
typedef struct ring_rig {
    tsrd_backend dev;
    fake_kernel kernels[2];
    uint8_t *base;
    tsr_ring_header *h;
    tsr_ring_slot *slots;
    tsrd_ring_loop *loop;
    uint32_t next;
} ring_rig;

static void rig_start(ring_rig *g, uint64_t ns0, uint64_t ns1)
{
    cr_assert_eq(tsrd_guard_install(), 0);
    memset(g, 0, sizeof *g);
    g->kernels[0] = (fake_kernel){0, ns0};
    g->kernels[1] = (fake_kernel){1, ns1};
    uint64_t bytes = tsr_ring_bytes(SLOTS);
    g->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(g->base, MAP_FAILED);
    g->h = (tsr_ring_header *)g->base;
    g->slots = (tsr_ring_slot *)(g->h + 1);
    g->h->magic = TSR_RING_MAGIC;
    g->h->version = TSR_RING_VERSION;
    g->h->slots = SLOTS;
    tsrd_launch_desc launches[2];
    for (int i = 0; i < 2; i++)
        launches[i] = (tsrd_launch_desc){.kernel = (tsrd_kobj *)&g->kernels[i]};
    tsr_error err;
    cr_assert_eq(tsrd_ring_loop_start(&fake_ops, &g->dev, g->base, bytes, SLOTS, 0, launches, 2,
                                      &g->loop, &err),
                 TSR_OK, "%s", err.message);
}

static void rig_submit(ring_rig *g, uint32_t binding)
{
    g->slots[g->next % SLOTS].binding = binding;
    atomic_store(&g->h->submitted, ++g->next);
}

/* The longest busy time the watchdog reads, every millisecond, until the loop
 * has answered everything submitted (at most 10 s). */
static uint64_t rig_most_busy(ring_rig *g)
{
    uint64_t most = 0;
    for (int i = 0; atomic_load(&g->h->completed) != g->next; i++) {
        cr_assert_lt(i, 10000, "the loop answered %u of %u", atomic_load(&g->h->completed),
                     g->next);
        uint64_t busy = tsrd_ring_loop_busy_ns(g->loop);
        most = busy > most ? busy : most;
        usleep(1000);
    }
    return most;
}

/* Waits (at most 10 s) until the loop has answered everything submitted. */
static void rig_wait_all(ring_rig *g)
{
    for (int i = 0; i < 20000 && atomic_load(&g->h->completed) != g->next; i++)
        usleep(500);
    cr_assert_eq(atomic_load(&g->h->completed), g->next, "answered %u of %u",
                 atomic_load(&g->h->completed), g->next);
}

static void rig_stop(ring_rig *g, tsrd_ring_served *served)
{
    tsrd_ring_loop_stop(g->loop, served);
    munmap(g->base, tsr_ring_bytes(SLOTS));
}

Test(ring_loop, groups_queue_behind_each_other_and_answer_in_order)
{
    ring_rig g;
    rig_start(&g, 20 * 1000000u, 1000000u);
    /* Each binding measured alone first. */
    rig_submit(&g, 0);
    rig_submit(&g, 1);
    rig_wait_all(&g);
    uint32_t want[18];
    for (int i = 0; i < 18; i++)
        want[i] = i % 9 == 0 ? 0 : 1;
    for (int i = 0; i < 18; i++)
        rig_submit(&g, want[i]);
    rig_wait_all(&g);
    for (uint32_t i = 0; i < g.next; i++)
        cr_expect_eq(g.slots[i % SLOTS].status, TSR_OK, "slot %u", i);
    cr_assert_eq(atomic_load(&g.dev.launches), 20);
    for (int i = 0; i < 18; i++)
        cr_expect_eq(atomic_load(&g.dev.order[2 + i]), (int)want[i], "launch %d ran out of order",
                     i);
    /* The slow launches hold the device long enough for the next group to
     * be queued behind them. */
    cr_expect_geq(atomic_load(&g.dev.queued_behind), 1);
    tsrd_ring_served served;
    rig_stop(&g, &served);
    cr_expect_eq(served.slots, 20);
    cr_expect_lt(served.groups, 20);
    cr_expect_eq(atomic_load(&g.dev.fences_live), 0);
}

Test(ring_loop, stopping_waits_for_every_group_in_flight)
{
    ring_rig g;
    rig_start(&g, 30 * 1000000u, 1000000u);
    rig_submit(&g, 0);
    rig_wait_all(&g);
    for (int i = 0; i < 4; i++)
        rig_submit(&g, 0);
    for (int i = 0; i < 2000 && atomic_load(&g.dev.launches) < 3; i++)
        usleep(500);
    tsrd_ring_served served;
    rig_stop(&g, &served);
    /* Nothing the loop launched still runs once stop has returned: the owner
     * frees the buffers next. */
    cr_expect_leq(atomic_load(&g.dev.free_at), now_ns());
    cr_expect_eq(atomic_load(&g.dev.fences_live), 0);
}

Test(ring_loop, a_fence_that_cannot_be_recorded_is_a_synchronize)
{
    ring_rig g;
    rig_start(&g, 50 * 1000000u, 1000000u);
    atomic_store(&g.dev.fail_fence, 1);
    /* Two at once: the first (not measured yet) goes alone with the second
     * waiting, so it asks for a fence, which fails. */
    g.slots[0].binding = 0;
    g.slots[1].binding = 0;
    g.next = 2;
    atomic_store(&g.h->submitted, g.next);
    while (atomic_load(&g.h->completed) != g.next)
        usleep(200);
    cr_expect_eq(atomic_load(&g.dev.fail_fence), 0, "no fence was asked for");
    /* Answered only once the launches had run. */
    cr_expect_leq(atomic_load(&g.dev.free_at), now_ns());
    cr_expect_eq(g.slots[0].status, TSR_OK);
    cr_expect_eq(g.slots[1].status, TSR_OK);
    tsrd_ring_served served;
    rig_stop(&g, &served);
    cr_expect_eq(atomic_load(&g.dev.fences_live), 0);
}

Test(ring_loop, a_backend_that_launches_fewer_fails_the_first_it_left)
{
    ring_rig g;
    /* Half-millisecond launches: four stay well within a group's 5 ms even
     * when a loaded machine measures them late. */
    rig_start(&g, 1000000u, 500000u);
    rig_submit(&g, 1);
    rig_wait_all(&g);
    atomic_store(&g.dev.short_count, 1);
    /* Submitted while the loop is busy with nothing: all four go as one
     * group, of which the fake launches three. */
    for (int i = 0; i < 4; i++)
        g.slots[(g.next + (uint32_t)i) % SLOTS].binding = 1;
    g.next += 4;
    atomic_store(&g.h->submitted, g.next);
    rig_wait_all(&g);
    int failed = 0;
    for (uint32_t i = 1; i < g.next; i++)
        if (g.slots[i % SLOTS].status != TSR_OK) {
            failed++;
            cr_expect_eq(g.slots[i % SLOTS].status, TSR_INTERNAL);
            cr_expect_str_eq(g.slots[i % SLOTS].message, "ring: the backend launched 3 of 4");
        }
    cr_expect_eq(failed, 1);
    tsrd_ring_served served;
    rig_stop(&g, &served);
    cr_expect_eq(served.slots, 5);
    cr_expect_eq(atomic_load(&g.dev.fences_live), 0);
}

/* The watchdog reads how long the device has run the group in progress: a
 * group queued behind another counts from the end of that one, so two long
 * launches back to back never read as their sum. */
Test(ring_loop, busy_time_counts_one_group_at_a_time)
{
    ring_rig g;
    const uint64_t ms = 1000000u;
    rig_start(&g, 60 * ms, ms);
    rig_submit(&g, 0);
    rig_wait_all(&g);
    rig_submit(&g, 0);
    rig_submit(&g, 0);
    uint64_t most = rig_most_busy(&g);
    cr_expect_gt(most, 30 * ms);
    cr_expect_lt(most, 100 * ms, "busy read %.1f ms for two 60 ms launches", (double)most / 1e6);
    tsrd_ring_served served;
    rig_stop(&g, &served);
}

/* A client that submits one launch at a time, with nothing else in flight,
 * is answered through a synchronize: a fence would only add driver calls.
 * The watchdog still sees the device busy while the loop waits. */
Test(ring_loop, a_lone_submission_is_waited_for_without_a_fence)
{
    ring_rig g;
    const uint64_t ms = 1000000u;
    rig_start(&g, 40 * ms, ms);
    for (int i = 0; i < 5; i++) {
        rig_submit(&g, 1);
        rig_wait_all(&g);
    }
    cr_expect_eq(atomic_load(&g.dev.fences_made), 0);
    rig_submit(&g, 0);
    uint64_t most = rig_most_busy(&g);
    cr_expect_gt(most, 20 * ms, "busy read %.1f ms during a 40 ms launch", (double)most / 1e6);
    cr_expect_eq(atomic_load(&g.dev.fences_made), 0);
    /* Nothing in flight: the watchdog reads the device idle again. */
    for (int i = 0; i < 1000 && tsrd_ring_loop_busy_ns(g.loop) != 0; i++)
        usleep(1000);
    cr_expect_eq(tsrd_ring_loop_busy_ns(g.loop), 0);
    for (uint32_t i = 0; i < g.next; i++)
        cr_expect_eq(g.slots[i % SLOTS].status, TSR_OK, "slot %u", i);
    tsrd_ring_served served;
    rig_stop(&g, &served);
    cr_expect_eq(served.slots, 6);
}
