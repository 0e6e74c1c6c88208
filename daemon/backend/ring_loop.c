/*
 * ring_loop.c — the thread that serves a submission ring (ring_loop.h).
 */
#include "backend/ring_loop.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/guard.h"
#include "tessera/ring.h"

/* How long the thread spins on `submitted` before it sleeps, and how long one
 * sleep lasts before it looks at its stop flag. */
#define RING_SPIN_NS 50000u
#define RING_WAIT_MS 50

/* A group of submissions found waiting together goes to the device in one
 * backend call with one synchronize: at most this many launches, and at most
 * this much device work as last measured (half of a batch's slice, like a
 * batch's chunk), so the ring's stream never holds much more than that ahead
 * of other work. A binding not measured yet goes alone. */
#define RING_GROUP_MAX 64
#define RING_GROUP_NS TSRD_DEVICE_CHUNK_NS

typedef struct ring_launch {
    tsrd_kobj *kernel;
    int n_inputs;
    tsrd_dbuf *inputs[TSR_MAX_REGION_INPUTS];
    tsrd_dbuf *output;
} ring_launch;

struct tsrd_ring_loop {
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    uint8_t *base; /* the segment: header, then slots */
    uint64_t bytes;
    uint32_t slots;
    uint32_t first;
    ring_launch *launches;
    uint64_t *launch_ns; /* per binding: its last measured device time, 0 before */
    int n;
    pthread_t thread;
    atomic_bool stop;
    _Atomic uint64_t served;
    _Atomic uint64_t groups;
    _Atomic uint64_t busy_since; /* ns on CLOCK_MONOTONIC; 0 when no launch runs */
};

static uint64_t ring_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A message for the segment, cut to TSR_RING_MESSAGE_MAX. */
static void ring_say(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ring_say(char *dst, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, TSR_RING_MESSAGE_MAX, fmt, ap);
    va_end(ap);
}

static long ring_futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static tsr_ring_header *ring_header(uint8_t *base)
{
    return (tsr_ring_header *)base;
}

static tsr_ring_slot *ring_slot(const tsrd_ring_loop *l, uint32_t seq)
{
    return (tsr_ring_slot *)(l->base + sizeof(tsr_ring_header)) + seq % l->slots;
}

/* ---- guarded accesses to the segment ---- */

typedef struct ring_access {
    const tsrd_ring_loop *l;
    uint8_t *base;
    uint32_t value; /* loaded, or to store */
    uint32_t seq;
    uint32_t slots;
    tsr_ring_slot result;
    const tsr_ring_slot *results; /* ring_store_results: count of them, from seq */
    uint32_t count;
} ring_access;

static void ring_load_submitted(void *arg)
{
    ring_access *a = arg;
    a->value = atomic_load_explicit(&ring_header(a->base)->submitted, memory_order_acquire);
}

static void ring_load_binding(void *arg)
{
    ring_access *a = arg;
    a->value = ring_slot(a->l, a->seq)->binding;
}

static void ring_store_sleeping(void *arg)
{
    ring_access *a = arg;
    tsr_ring_header *h = ring_header(a->base);
    atomic_store_explicit(&h->daemon_sleeping, a->value, memory_order_seq_cst);
    /* A submission the client made before it could see the flag. */
    if (a->value != 0)
        a->seq = atomic_load_explicit(&h->submitted, memory_order_seq_cst);
}

/* Writes the results of slots seq .. seq + count - 1, counts them at once, and
 * says whether the client sleeps. */
static void ring_store_results(void *arg)
{
    ring_access *a = arg;
    for (uint32_t i = 0; i < a->count; i++) {
        tsr_ring_slot *slot = ring_slot(a->l, a->seq + i);
        slot->status = a->results[i].status;
        slot->device_ns = a->results[i].device_ns;
        memcpy(slot->message, a->results[i].message, sizeof slot->message);
    }
    tsr_ring_header *h = ring_header(a->base);
    atomic_store_explicit(&h->completed, a->seq + a->count, memory_order_seq_cst);
    a->value = atomic_load_explicit(&h->client_sleeping, memory_order_seq_cst);
}

static void ring_store_closed(void *arg)
{
    ring_access *a = arg;
    tsr_ring_header *h = ring_header(a->base);
    a->value = 0;
    if (atomic_load(&h->closed))
        return;
    h->close_status = a->result.status;
    memcpy(h->close_message, a->result.message, sizeof h->close_message);
    atomic_store_explicit(&h->closed, 1, memory_order_seq_cst);
    a->value = 1;
}

static void ring_load_header(void *arg)
{
    ring_access *a = arg;
    const tsr_ring_header *h = ring_header(a->base);
    a->value = h->magic == TSR_RING_MAGIC && h->version == TSR_RING_VERSION && h->slots == a->slots;
    a->seq = atomic_load(&h->submitted);
}

static bool ring_guarded(uint8_t *base, uint64_t bytes, void (*fn)(void *), ring_access *a)
{
    a->base = base;
    return tsrd_guard_run(base, bytes, fn, a);
}

bool tsrd_ring_close_segment(uint8_t *base, uint64_t bytes, tsr_status status, const char *message)
{
    ring_access a = {.result.status = (int32_t)status};
    ring_say(a.result.message, "%s", message);
    if (!ring_guarded(base, bytes, ring_store_closed, &a))
        return false;
    if (a.value != 0) {
        ring_futex(&ring_header(base)->completed, FUTEX_WAKE, INT_MAX, NULL);
        ring_futex(&ring_header(base)->closed, FUTEX_WAKE, INT_MAX, NULL);
    }
    return true;
}

bool tsrd_ring_check_header(uint8_t *base, uint64_t bytes, uint32_t slots, uint32_t *submitted,
                            bool *faulted)
{
    ring_access a = {.slots = slots};
    *faulted = !ring_guarded(base, bytes, ring_load_header, &a);
    if (*faulted)
        return false;
    *submitted = a.seq;
    return a.value != 0;
}

/* ---- the thread ---- */

/* The submissions from `served` that go to the device together (at least
 * one, at most `pending`): their bindings into group[], their count returned;
 * 0 when the segment faulted. A bad binding index goes alone, as does a
 * binding not measured yet; more follow while each has been measured and the
 * group's estimate stays within RING_GROUP_NS. */
static uint32_t ring_plan(const tsrd_ring_loop *l, uint32_t served, uint32_t pending,
                          uint32_t group[RING_GROUP_MAX])
{
    uint64_t sum = 0;
    uint32_t k = 0;
    /* A client never has more than `slots` outstanding; one that says so is
     * served a ring's worth at a time, so no slot is read twice in a group. */
    while (k < pending && k < RING_GROUP_MAX && k < l->slots) {
        ring_access a = {.l = l, .seq = served + k};
        if (!ring_guarded(l->base, l->bytes, ring_load_binding, &a))
            return 0;
        bool known = a.value < (uint32_t)l->n && l->launch_ns[a.value] != 0;
        if (k > 0 && (!known || sum + l->launch_ns[a.value] > RING_GROUP_NS))
            break;
        group[k++] = a.value;
        if (!known)
            break;
        sum += l->launch_ns[a.value];
    }
    return k;
}

/* Spreads a group's measured time over its bindings' estimates: in proportion
 * to them when all had one, else evenly. */
static void ring_learn(tsrd_ring_loop *l, const uint32_t *group, uint32_t k, uint64_t took_ns)
{
    uint64_t sum = 0;
    bool all_known = true;
    for (uint32_t i = 0; i < k; i++) {
        sum += l->launch_ns[group[i]];
        all_known = all_known && l->launch_ns[group[i]] != 0;
    }
    uint64_t now[RING_GROUP_MAX];
    for (uint32_t i = 0; i < k; i++) {
        uint64_t v =
            all_known && sum > 0
                ? (uint64_t)((double)l->launch_ns[group[i]] * (double)took_ns / (double)sum)
                : took_ns / k;
        now[i] = v > 0 ? v : 1;
    }
    for (uint32_t i = 0; i < k; i++)
        l->launch_ns[group[i]] = now[i];
}

/* Runs the group's k launches on stream in one backend call, then
 * synchronizes, and fills the results of the slots it served: every launch
 * that went gets the synchronize's outcome, a launch that failed its own error
 * (the launches after it are not served: the next group takes them up), and
 * each served slot an equal share of the group's time, issue to synchronize.
 * Returns the slots served (at least one). */
static uint32_t ring_run_group(tsrd_ring_loop *l, tsrd_stream *stream, const uint32_t *group,
                               uint32_t k, tsr_ring_slot *out)
{
    tsr_error err;
    tsr_error_clear(&err);
    uint64_t t0 = ring_now_ns();
    /* Whole slots, message bytes past the text included, go to the client's
     * memory: nothing of this thread's stack may ride along. */
    memset(out, 0, (size_t)k * sizeof *out);
    if (group[0] >= (uint32_t)l->n) {
        tsr_error_set(&err, TSR_INVALID_ARGUMENT,
                      "ring slot: binding %u, the ring has %d (0 .. %d)", group[0], l->n, l->n - 1);
        out[0].status = (int32_t)err.code;
        out[0].device_ns = 0;
        ring_say(out[0].message, "%s", err.message);
        return 1;
    }
    tsrd_launch_desc descs[RING_GROUP_MAX];
    for (uint32_t i = 0; i < k; i++) {
        const ring_launch *rl = &l->launches[group[i]];
        descs[i] = (tsrd_launch_desc){.kernel = rl->kernel,
                                      .inputs = rl->inputs,
                                      .n_inputs = rl->n_inputs,
                                      .output = rl->output};
    }
    atomic_store_explicit(&l->busy_since, t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->groups, 1, memory_order_relaxed);
    size_t launched = 0;
    tsr_status st = l->ops->launch_many(l->b, descs, k, stream, &launched, &err);
    double ms = 0;
    tsr_error sync_err;
    tsr_status sync = l->ops->synchronize(l->b, stream, &ms, &sync_err);
    atomic_store_explicit(&l->busy_since, 0, memory_order_relaxed);
    uint64_t took = ring_now_ns() - t0;
    uint32_t went = (uint32_t)launched;
    uint32_t served = went + (st != TSR_OK ? 1 : 0);
    /* Bounds against a backend that miscounts. */
    served = served > k ? k : served > 0 ? served : 1;
    for (uint32_t i = 0; i < served; i++) {
        /* A failure with every launch counted as gone (a backend that
         * miscounts) is every slot's. */
        bool failed_here = st != TSR_OK && (i >= went || went >= k);
        out[i].status = (int32_t)(failed_here ? st : sync);
        out[i].device_ns = took / served;
        ring_say(out[i].message, "%s",
                 failed_here      ? err.message
                 : sync != TSR_OK ? sync_err.message
                                  : "");
    }
    if (st == TSR_OK && sync == TSR_OK)
        ring_learn(l, group, k, took);
    return served;
}

/* Waits for a submission past `served`: true with *submitted set, false when
 * the ring must end (stop asked, or the segment faulted: *fault set). */
static bool ring_wait(tsrd_ring_loop *l, uint32_t served, uint32_t *submitted, bool *fault)
{
    ring_access a = {.l = l};
    uint64_t spin_start = ring_now_ns();
    for (;;) {
        if (atomic_load_explicit(&l->stop, memory_order_acquire))
            return false;
        if (!ring_guarded(l->base, l->bytes, ring_load_submitted, &a)) {
            *fault = true;
            return false;
        }
        if (a.value != served) {
            *submitted = a.value;
            return true;
        }
        if (ring_now_ns() - spin_start < RING_SPIN_NS)
            continue;
        a.value = 1;
        if (!ring_guarded(l->base, l->bytes, ring_store_sleeping, &a)) {
            *fault = true;
            return false;
        }
        if (a.seq == served) {
            struct timespec ts = {0, RING_WAIT_MS * 1000000L};
            ring_futex(&ring_header(l->base)->submitted, FUTEX_WAIT, served, &ts);
        }
        a.value = 0;
        if (!ring_guarded(l->base, l->bytes, ring_store_sleeping, &a)) {
            *fault = true;
            return false;
        }
        spin_start = ring_now_ns();
    }
}

static void *ring_main(void *arg)
{
    tsrd_ring_loop *l = arg;
    tsrd_stream *stream = NULL;
    tsr_error err;
    tsr_status end = TSR_OK;
    char why[TSR_RING_MESSAGE_MAX] = "";
    if (l->ops->stream_create(l->b, 0, &stream, &err) != TSR_OK) {
        end = err.code;
        ring_say(why, "ring: no stream: %s", err.message);
    }
    uint32_t served = l->first;
    while (end == TSR_OK) {
        uint32_t submitted = 0;
        bool fault = false;
        if (!ring_wait(l, served, &submitted, &fault)) {
            if (fault) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment no longer holds the ring");
            }
            break;
        }
        while (served != submitted && end == TSR_OK &&
               !atomic_load_explicit(&l->stop, memory_order_acquire)) {
            uint32_t group[RING_GROUP_MAX];
            uint32_t k = ring_plan(l, served, submitted - served, group);
            tsr_ring_slot results[RING_GROUP_MAX];
            ring_access a = {.l = l, .seq = served, .results = results};
            if (k > 0)
                a.count = ring_run_group(l, stream, group, k, results);
            if (k == 0 || !ring_guarded(l->base, l->bytes, ring_store_results, &a)) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment no longer holds the ring");
                break;
            }
            if (a.value != 0)
                ring_futex(&ring_header(l->base)->completed, FUTEX_WAKE, INT_MAX, NULL);
            served += a.count;
            atomic_fetch_add_explicit(&l->served, a.count, memory_order_relaxed);
            for (uint32_t i = 0; i < a.count && end == TSR_OK; i++)
                if (results[i].status == TSR_DEVICE_LOST) {
                    end = TSR_DEVICE_LOST;
                    ring_say(why, "ring: %s", results[i].message);
                }
        }
    }
    if (stream != NULL)
        l->ops->stream_destroy(l->b, stream);
    if (end != TSR_OK)
        tsrd_ring_close_segment(l->base, l->bytes, end, why);
    return NULL;
}

tsr_status tsrd_ring_loop_start(const tsrd_backend_ops *ops, tsrd_backend *b, uint8_t *base,
                                uint64_t bytes, uint32_t slots, uint32_t first,
                                const tsrd_launch_desc *launches, int n, tsrd_ring_loop **out,
                                tsr_error *err)
{
    tsrd_ring_loop *l = calloc(1, sizeof *l);
    ring_launch *copies = calloc((size_t)(n > 0 ? n : 1), sizeof *copies);
    uint64_t *launch_ns = calloc((size_t)(n > 0 ? n : 1), sizeof *launch_ns);
    if (l == NULL || copies == NULL || launch_ns == NULL) {
        free(l);
        free(copies);
        free(launch_ns);
        return tsr_error_set(err, TSR_NO_MEMORY, "ring: out of memory");
    }
    for (int i = 0; i < n; i++) {
        copies[i].kernel = launches[i].kernel;
        copies[i].n_inputs = launches[i].n_inputs;
        for (int k = 0; k < launches[i].n_inputs && k < TSR_MAX_REGION_INPUTS; k++)
            copies[i].inputs[k] = launches[i].inputs[k];
        copies[i].output = launches[i].output;
    }
    l->ops = ops;
    l->b = b;
    l->base = base;
    l->bytes = bytes;
    l->slots = slots;
    l->first = first;
    l->launches = copies;
    l->launch_ns = launch_ns;
    l->n = n;
    int rc = pthread_create(&l->thread, NULL, ring_main, l);
    if (rc != 0) {
        free(copies);
        free(launch_ns);
        free(l);
        return tsr_error_set(err, TSR_INTERNAL, "ring: pthread_create: %s", strerror(rc));
    }
    *out = l;
    return TSR_OK;
}

void tsrd_ring_loop_stop(tsrd_ring_loop *l, tsrd_ring_served *served)
{
    atomic_store_explicit(&l->stop, true, memory_order_release);
    ring_futex(&ring_header(l->base)->submitted, FUTEX_WAKE, INT_MAX, NULL);
    pthread_join(l->thread, NULL);
    if (served != NULL) {
        served->slots = atomic_load(&l->served);
        served->groups = atomic_load(&l->groups);
    }
    free(l->launches);
    free(l->launch_ns);
    free(l);
}

uint64_t tsrd_ring_loop_busy_ns(const tsrd_ring_loop *l)
{
    uint64_t since = atomic_load_explicit(&l->busy_since, memory_order_relaxed);
    return since == 0 ? 0 : ring_now_ns() - since;
}
