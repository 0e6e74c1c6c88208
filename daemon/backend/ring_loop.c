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
 * backend call with one wait: at most this many launches, and at most
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

/* A group the loop has sent to the device and not answered yet. */
typedef struct ring_group {
    uint32_t seq;   /* its first submission */
    uint32_t count; /* the slots it answers */
    uint32_t k;     /* the launches planned; count is fewer when one failed to start */
    uint32_t bindings[RING_GROUP_MAX];
    uint32_t went;            /* launches that went */
    tsr_status launch_status; /* the one that did not, else TSR_OK */
    char launch_message[TSR_RING_MESSAGE_MAX];
    tsrd_fence *fence;      /* what to wait for; NULL: waited for already */
    tsr_status done_status; /* the wait's outcome, once waited for */
    char done_message[TSR_RING_MESSAGE_MAX];
    uint64_t issued;  /* ns, when its launches were issued */
    uint64_t done_at; /* ns, when the wait for them returned */
} ring_group;

/* Waits for the work on stream so far: its fence's wait, or a synchronize
 * where the backend has no fences. */
static tsr_status ring_wait_done(tsrd_ring_loop *l, tsrd_stream *stream, tsrd_fence *fence,
                                 tsr_error *err)
{
    if (fence != NULL)
        return l->ops->fence->fence_wait(l->b, fence, err);
    double ms;
    return l->ops->synchronize(l->b, stream, &ms, err);
}

/* Sends the group of the submissions from seq (at most `room` of them) to the
 * device: one backend call for its launches, then a fence to wait for when
 * it queues behind a group in flight or more submissions wait to queue
 * behind it (else, or without fences, a synchronize). Returns the slots the
 * group answers, 0 when the segment faulted. */
static uint32_t ring_issue(tsrd_ring_loop *l, tsrd_stream *stream, uint32_t seq, uint32_t room,
                           uint32_t pending, bool behind, ring_group *g)
{
    memset(g, 0, sizeof *g);
    g->seq = seq;
    g->issued = ring_now_ns();
    g->k = ring_plan(l, seq, room, g->bindings);
    if (g->k == 0)
        return 0;
    tsr_error err;
    tsr_error_clear(&err);
    if (g->bindings[0] >= (uint32_t)l->n) {
        tsr_error_set(&err, TSR_INVALID_ARGUMENT,
                      "ring slot: binding %u, the ring has %d (0 .. %d)", g->bindings[0], l->n,
                      l->n - 1);
        g->launch_status = err.code;
        ring_say(g->launch_message, "%s", err.message);
        g->count = 1;
        g->done_status = TSR_OK;
        g->done_at = ring_now_ns();
        return g->count;
    }
    tsrd_launch_desc descs[RING_GROUP_MAX];
    for (uint32_t i = 0; i < g->k; i++) {
        const ring_launch *rl = &l->launches[g->bindings[i]];
        descs[i] = (tsrd_launch_desc){.kernel = rl->kernel,
                                      .inputs = rl->inputs,
                                      .n_inputs = rl->n_inputs,
                                      .output = rl->output};
    }
    atomic_fetch_add_explicit(&l->groups, 1, memory_order_relaxed);
    size_t launched = 0;
    g->launch_status = l->ops->launch_many(l->b, descs, g->k, stream, &launched, &err);
    /* Bounds against a backend that miscounts: a failure with every launch
     * counted as gone is the last one's, and a success short of the group
     * fails at the first launch it left out. */
    g->went = launched < g->k ? (uint32_t)launched : g->k;
    if (g->launch_status == TSR_OK && g->went < g->k)
        g->launch_status =
            tsr_error_set(&err, TSR_INTERNAL, "ring: the backend launched %u of %u", g->went, g->k);
    if (g->launch_status != TSR_OK) {
        if (g->went == g->k)
            g->went--;
        ring_say(g->launch_message, "%s", err.message);
    }
    g->count = g->went + (g->launch_status != TSR_OK ? 1 : 0);
    /* A fence lets the next group queue behind this one, and a group queued
     * behind another is answered after it: worth the fence's driver calls (an
     * event made, recorded, waited for and destroyed) only then, or when more
     * submissions wait — counted again now, as a client publishes a sequence
     * one submission at a time. A client that submits one launch at a time
     * gets its answer from a synchronize, as before fences (8 such clients on
     * the H200 made a quarter of the launches a second with a fence each).
     * Without fences, or when one could not be recorded, the group is waited
     * for now: nothing may answer its slots while its launches still run. */
    tsr_error done_err;
    tsr_error_clear(&done_err);
    g->done_status = TSR_UNSUPPORTED;
    ring_access now = {.l = l, .value = seq + pending};
    if (!behind && l->ops->fence != NULL && g->went > 0)
        (void)ring_guarded(l->base, l->bytes, ring_load_submitted, &now);
    if (l->ops->fence != NULL && g->went > 0 && (behind || now.value - seq > g->count))
        g->done_status = l->ops->fence->fence_record(l->b, stream, &g->fence, &done_err);
    if (g->done_status != TSR_OK) {
        g->fence = NULL;
        tsr_error_clear(&done_err);
        g->done_status = ring_wait_done(l, stream, NULL, &done_err);
        g->done_at = ring_now_ns();
    }
    if (g->done_status != TSR_OK)
        ring_say(g->done_message, "%s", done_err.message);
    return g->count;
}

/* Waits for g's launches to finish and writes its slots' results (out[0 ..
 * g->count)): every launch that went gets the wait's outcome, one that failed
 * to start its own error, and each slot an equal share of the group's time
 * on the device (from its issue, or from the end of the group before it,
 * whichever came later, to its end). *last_done is that end. */
static void ring_finish(tsrd_ring_loop *l, tsrd_stream *stream, ring_group *g, uint64_t *last_done,
                        tsr_ring_slot *out)
{
    if (g->fence != NULL) {
        tsr_error err;
        tsr_error_clear(&err);
        g->done_status = ring_wait_done(l, stream, g->fence, &err);
        g->fence = NULL;
        g->done_at = ring_now_ns();
        if (g->done_status != TSR_OK)
            ring_say(g->done_message, "%s", err.message);
    }
    uint64_t from = g->issued > *last_done ? g->issued : *last_done;
    uint64_t took = g->done_at > from ? g->done_at - from : 0;
    *last_done = g->done_at > *last_done ? g->done_at : *last_done;
    /* Whole slots, message bytes past the text included, go to the client's
     * memory: nothing of this thread's stack may ride along. */
    memset(out, 0, (size_t)g->count * sizeof *out);
    for (uint32_t i = 0; i < g->count; i++) {
        bool failed_here = g->launch_status != TSR_OK && i >= g->went;
        out[i].status = (int32_t)(failed_here ? g->launch_status : g->done_status);
        out[i].device_ns = took / g->count;
        memcpy(out[i].message, failed_here ? g->launch_message : g->done_message,
               TSR_RING_MESSAGE_MAX);
    }
    if (g->launch_status == TSR_OK && g->done_status == TSR_OK)
        ring_learn(l, g->bindings, g->k, took);
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

/* Answers the oldest group in flight (q[0]): waits for it, writes its slots
 * and counts them, and says in *why when the ring must end. */
static tsr_status ring_answer(tsrd_ring_loop *l, tsrd_stream *stream, ring_group *q, int *nq,
                              uint32_t *served, uint64_t *last_done, char *why)
{
    tsr_ring_slot results[RING_GROUP_MAX];
    ring_finish(l, stream, &q[0], last_done, results);
    ring_access a = {.l = l, .seq = q[0].seq, .results = results, .count = q[0].count};
    tsr_status end = TSR_OK;
    if (!ring_guarded(l->base, l->bytes, ring_store_results, &a)) {
        end = TSR_BUFFER_MISMATCH;
        ring_say(why, "ring: the segment no longer holds the ring");
    } else if (a.value != 0) {
        ring_futex(&ring_header(l->base)->completed, FUTEX_WAKE, INT_MAX, NULL);
    }
    *served += q[0].count;
    atomic_fetch_add_explicit(&l->served, q[0].count, memory_order_relaxed);
    for (uint32_t i = 0; i < q[0].count && end == TSR_OK; i++)
        if (results[i].status == TSR_DEVICE_LOST) {
            end = TSR_DEVICE_LOST;
            ring_say(why, "ring: %s", results[i].message);
        }
    if (--*nq > 0)
        q[0] = q[1];
    /* The group left began on the device when the one before it ended. */
    uint64_t busy = *nq == 0 ? 0 : q[0].issued > *last_done ? q[0].issued : *last_done;
    atomic_store_explicit(&l->busy_since, busy, memory_order_relaxed);
    return end;
}

/* The loop keeps up to two groups in flight: while the device runs one, the
 * next one is queued behind it when it was waiting already, so that the
 * device does not idle between the groups of a sequence; the older one is
 * answered as soon as it ends. */
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
    uint32_t served = l->first, issued = l->first;
    ring_group q[2];
    int nq = 0;
    uint64_t last_done = 0;
    while (end == TSR_OK && !atomic_load_explicit(&l->stop, memory_order_acquire)) {
        ring_access a = {.l = l};
        if (!ring_guarded(l->base, l->bytes, ring_load_submitted, &a)) {
            end = TSR_BUFFER_MISMATCH;
            ring_say(why, "ring: the segment no longer holds the ring");
            break;
        }
        uint32_t submitted = a.value;
        /* A client never has more than `slots` submissions unanswered; one
         * that says it has is served a ring's worth at a time. */
        uint32_t outstanding = issued - served;
        uint32_t room = outstanding < l->slots ? l->slots - outstanding : 0;
        uint32_t pending = submitted - issued;
        if (pending > INT32_MAX) {
            /* `submitted` went back: nothing the ring can serve. */
            end = TSR_INVALID_ARGUMENT;
            ring_say(why, "ring: the segment's submitted count went back");
            break;
        }
        /* A second group queues behind the first only while the first's
         * launches still run (a fence to wait for): on a backend that ran
         * them already it would only delay the first one's answers. */
        bool queue = nq == 0 || (nq == 1 && q[0].fence != NULL);
        if (pending > 0 && room > 0 && queue) {
            /* The device is busy from here: the watchdog sees a launch that
             * hangs while ring_issue waits for it (a group with no fence). */
            if (nq == 0)
                atomic_store_explicit(&l->busy_since, ring_now_ns(), memory_order_relaxed);
            uint32_t count = ring_issue(l, stream, issued, pending < room ? pending : room, pending,
                                        nq > 0, &q[nq]);
            if (count == 0) {
                if (nq == 0)
                    atomic_store_explicit(&l->busy_since, 0, memory_order_relaxed);
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment no longer holds the ring");
                break;
            }
            nq++;
            issued += count;
            continue;
        }
        if (nq > 0) {
            end = ring_answer(l, stream, q, &nq, &served, &last_done, why);
            continue;
        }
        bool fault = false;
        if (!ring_wait(l, served, &submitted, &fault)) {
            if (fault) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment no longer holds the ring");
            }
            break;
        }
    }
    /* Launches in flight finish before the owner lets go of their buffers;
     * their answers go out when the segment still takes them. */
    char ignored[TSR_RING_MESSAGE_MAX];
    while (nq > 0)
        (void)ring_answer(l, stream, q, &nq, &served, &last_done, ignored);
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
