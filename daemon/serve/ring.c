/*
 * ring.c — submission rings (ring.h): the ring threads and their lifetime.
 *
 * The thread's loop: read `submitted`; while it is ahead of what the thread
 * served, launch each new slot's binding and write its result, then count it
 * in `completed` and wake the client if it sleeps. With nothing to do the
 * thread spins briefly (a client in a loop submits again within
 * microseconds), then says it sleeps and waits on the `submitted` futex, waking
 * every RING_WAIT_MS to look at its stop flag. Every access to the segment
 * runs inside the SIGBUS guard: a segment shrunk under the ring ends that
 * ring, never the daemon.
 */
#include "serve/ring.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend/guard.h"
#include "serve/session.h"
#include "tessera/ring.h"

/* How long the thread spins on `submitted` before it sleeps, and how long one
 * sleep lasts before it looks at its stop flag. */
#define RING_SPIN_NS 50000u
#define RING_WAIT_MS 50

struct tsrd_ring {
    struct tsrd_ring *next; /* in the session's rings (loop) */
    uint64_t id;
    tsrd_daemon *d;
    tsrd_session *session;
    tsrd_tenant *tenant;
    tsrd_shm_map *map;
    uint8_t *base; /* the segment: header, then slots */
    uint64_t bytes;
    uint32_t slots;
    tsrd_ring_binding *bindings;
    int n_bindings;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool ended; /* the thread ended the ring itself */
    _Atomic uint64_t served;
    uint32_t first; /* `submitted` when the ring opened: the thread starts there */
};

static tsr_ring_header *ring_header(const tsrd_ring *r)
{
    return (tsr_ring_header *)r->base;
}

static tsr_ring_slot *ring_slot(const tsrd_ring *r, uint32_t seq)
{
    return (tsr_ring_slot *)(r->base + sizeof(tsr_ring_header)) + seq % r->slots;
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

/* ---- guarded accesses to the segment ---- */

typedef struct ring_access {
    tsrd_ring *r;
    uint32_t value; /* loaded, or to store */
    uint32_t seq;
    tsr_ring_slot result;
} ring_access;

static void ring_load_submitted(void *arg)
{
    ring_access *a = arg;
    a->value = atomic_load_explicit(&ring_header(a->r)->submitted, memory_order_acquire);
}

static void ring_load_binding(void *arg)
{
    ring_access *a = arg;
    a->value = ring_slot(a->r, a->seq)->binding;
}

static void ring_store_sleeping(void *arg)
{
    ring_access *a = arg;
    atomic_store_explicit(&ring_header(a->r)->daemon_sleeping, a->value, memory_order_seq_cst);
    /* A submission the client made before it could see the flag. */
    if (a->value != 0)
        a->seq = atomic_load_explicit(&ring_header(a->r)->submitted, memory_order_seq_cst);
}

/* Writes the slot's result, counts it, and says whether the client sleeps. */
static void ring_store_result(void *arg)
{
    ring_access *a = arg;
    tsr_ring_slot *slot = ring_slot(a->r, a->seq);
    slot->status = a->result.status;
    slot->device_ns = a->result.device_ns;
    memcpy(slot->message, a->result.message, sizeof slot->message);
    tsr_ring_header *h = ring_header(a->r);
    atomic_store_explicit(&h->completed, a->seq + 1, memory_order_seq_cst);
    a->value = atomic_load_explicit(&h->client_sleeping, memory_order_seq_cst);
}

static void ring_store_closed(void *arg)
{
    ring_access *a = arg;
    tsr_ring_header *h = ring_header(a->r);
    h->close_status = a->result.status;
    memcpy(h->close_message, a->result.message, sizeof h->close_message);
    atomic_store_explicit(&h->closed, 1, memory_order_seq_cst);
}

static bool ring_guarded(tsrd_ring *r, void (*fn)(void *), ring_access *a)
{
    a->r = r;
    return tsrd_guard_run(r->base, r->bytes, fn, a);
}

/* Marks the ring closed in the segment and wakes the client (best effort: a
 * segment that shrank takes nothing). */
static void ring_mark_closed(tsrd_ring *r, tsr_status status, const char *message)
{
    ring_access a = {.result.status = (int32_t)status};
    ring_say(a.result.message, "%s", message);
    if (ring_guarded(r, ring_store_closed, &a)) {
        ring_futex(&ring_header(r)->completed, FUTEX_WAKE, INT_MAX, NULL);
        ring_futex(&ring_header(r)->closed, FUTEX_WAKE, INT_MAX, NULL);
    }
}

/* ---- the ring thread ---- */

static uint64_t ring_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs binding b on stream and fills the slot's result. */
static void ring_launch(tsrd_ring *r, tsrd_stream *stream, uint32_t b, tsr_ring_slot *out)
{
    tsrd_daemon *d = r->d;
    tsr_error err;
    tsr_error_clear(&err);
    tsr_status st;
    uint64_t t0 = ring_now_ns();
    if (b >= (uint32_t)r->n_bindings) {
        st = tsr_error_set(&err, TSR_INVALID_ARGUMENT,
                           "ring slot: binding %u, the ring has %d (0 .. %d)", b, r->n_bindings,
                           r->n_bindings - 1);
    } else {
        const tsrd_ring_binding *rb = &r->bindings[b];
        tsrd_dbuf *in[TSR_MAX_REGION_INPUTS];
        for (int k = 0; k < rb->n_inputs; k++)
            in[k] = rb->inputs[k]->dbuf;
        tsrd_launch_desc desc = {.kernel = rb->kernel->kobj,
                                 .inputs = in,
                                 .n_inputs = rb->n_inputs,
                                 .output = rb->output->dbuf};
        size_t launched = 0;
        st = d->bops->launch_many(d->backend, &desc, 1, stream, &launched, &err);
        double ms = 0;
        tsr_error sync_err;
        tsr_status sync = d->bops->synchronize(d->backend, stream, &ms, &sync_err);
        if (st == TSR_OK && sync != TSR_OK) {
            err = sync_err;
            st = sync;
        }
    }
    out->status = (int32_t)st;
    out->device_ns = ring_now_ns() - t0;
    ring_say(out->message, "%s", st == TSR_OK ? "" : err.message);
}

/* Waits for a submission past `served`: true with *submitted set, false when
 * the ring must end (stop asked, or the segment faulted: *fault set). */
static bool ring_wait(tsrd_ring *r, uint32_t served, uint32_t *submitted, bool *fault)
{
    ring_access a = {0};
    uint64_t spin_start = ring_now_ns();
    for (;;) {
        if (atomic_load_explicit(&r->stop, memory_order_acquire))
            return false;
        if (!ring_guarded(r, ring_load_submitted, &a)) {
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
        if (!ring_guarded(r, ring_store_sleeping, &a)) {
            *fault = true;
            return false;
        }
        if (a.seq == served) {
            struct timespec ts = {0, RING_WAIT_MS * 1000000L};
            ring_futex(&ring_header(r)->submitted, FUTEX_WAIT, served, &ts);
        }
        a.value = 0;
        if (!ring_guarded(r, ring_store_sleeping, &a)) {
            *fault = true;
            return false;
        }
        spin_start = ring_now_ns();
    }
}

static void *ring_main(void *arg)
{
    tsrd_ring *r = arg;
    tsrd_daemon *d = r->d;
    tsrd_stream *stream = NULL;
    tsr_error err;
    tsr_status end = TSR_OK;
    char why[TSR_RING_MESSAGE_MAX] = "";
    if (d->bops->stream_create(d->backend, 0, &stream, &err) != TSR_OK) {
        end = err.code;
        ring_say(why, "ring: no stream: %s", err.message);
    }
    uint32_t served = r->first;
    while (end == TSR_OK) {
        uint32_t submitted = 0;
        bool fault = false;
        if (!ring_wait(r, served, &submitted, &fault)) {
            if (fault) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment %s no longer holds the ring", r->map->name);
            }
            break;
        }
        /* More than a ring's worth ahead is a client that lies: take the
         * slots as they stand, one ring's worth at a time. */
        while (served != submitted && end == TSR_OK &&
               !atomic_load_explicit(&r->stop, memory_order_acquire)) {
            ring_access a = {.seq = served};
            if (!ring_guarded(r, ring_load_binding, &a)) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment %s no longer holds the ring", r->map->name);
                break;
            }
            ring_launch(r, stream, a.value, &a.result);
            if (!ring_guarded(r, ring_store_result, &a)) {
                end = TSR_BUFFER_MISMATCH;
                ring_say(why, "ring: the segment %s no longer holds the ring", r->map->name);
                break;
            }
            if (a.value != 0)
                ring_futex(&ring_header(r)->completed, FUTEX_WAKE, INT_MAX, NULL);
            served++;
            atomic_fetch_add_explicit(&r->served, 1, memory_order_relaxed);
            if (a.result.status == TSR_DEVICE_LOST) {
                end = TSR_DEVICE_LOST;
                ring_say(why, "ring: %s", a.result.message);
            }
        }
    }
    if (stream != NULL)
        d->bops->stream_destroy(d->backend, stream);
    if (end != TSR_OK) {
        atomic_store(&r->ended, true);
        ring_mark_closed(r, end, why);
        tsrd_log_warn(&d->log, "ring %#llx of session %u ended: %s", (unsigned long long)r->id,
                      r->session->pipe_id, why);
    }
    return NULL;
}

/* ---- lifetime (loop) ---- */

void tsrd_ring_binding_release(tsrd_daemon *d, tsrd_ring_binding *bindings, int n)
{
    for (int i = 0; i < n; i++) {
        tsrd_ring_binding *b = &bindings[i];
        if (b->kernel != NULL)
            tsrd_kernel_unref(d, b->kernel);
        for (int k = 0; k < b->n_inputs; k++)
            tsrd_buffer_unref(d, b->inputs[k]);
        if (b->output != NULL)
            tsrd_buffer_unref(d, b->output);
    }
    free(bindings);
}

static void ring_release(tsrd_daemon *d, tsrd_ring *r)
{
    tsrd_ring_binding_release(d, r->bindings, r->n_bindings);
    if (r->tenant != NULL)
        r->tenant->in_flight--;
    d->ring_launches_closed += atomic_load(&r->served);
    d->rings_open--;
    free(r);
}

/* Stops r's thread (if it runs) and marks the ring closed with status, unless
 * it ended itself before. */
static void ring_stop(tsrd_ring *r, tsr_status status, const char *message)
{
    if (r->started) {
        atomic_store_explicit(&r->stop, true, memory_order_release);
        ring_futex(&ring_header(r)->submitted, FUTEX_WAKE, INT_MAX, NULL);
        pthread_join(r->thread, NULL);
        r->started = false;
    }
    if (!atomic_load(&r->ended)) {
        atomic_store(&r->ended, true);
        ring_mark_closed(r, status, message);
    }
}

/* ring_stop, then frees it with its pins and quota. */
static void ring_end(tsrd_daemon *d, tsrd_ring *r, tsr_status status, const char *message)
{
    ring_stop(r, status, message);
    ring_release(d, r);
}

static void ring_check_header(void *arg)
{
    ring_access *a = arg;
    const tsr_ring_header *h = ring_header(a->r);
    a->value =
        h->magic == TSR_RING_MAGIC && h->version == TSR_RING_VERSION && h->slots == a->r->slots;
    a->seq = atomic_load(&h->submitted);
    atomic_store(&ring_header(a->r)->completed, a->seq);
    atomic_store(&ring_header(a->r)->closed, 0);
}

tsr_status tsrd_ring_open(tsrd_daemon *d, tsrd_session *s, tsrd_shm_map *map, uint32_t slots,
                          tsrd_ring_binding *bindings, int n, uint64_t *id, tsr_error *err)
{
    tsrd_ring *r = calloc(1, sizeof *r);
    if (r == NULL) {
        tsrd_ring_binding_release(d, bindings, n);
        return tsr_error_set(err, TSR_NO_MEMORY, "ring_open: out of memory");
    }
    r->d = d;
    r->session = s;
    r->map = map;
    r->base = map->base;
    r->bytes = map->size;
    r->slots = slots;
    r->bindings = bindings;
    r->n_bindings = n;
    d->rings_open++;
    tsr_status st = TSR_OK;
    int count = 0;
    for (tsrd_ring *o = s->rings; o != NULL; o = o->next)
        count++;
    tsrd_tenant *t = s->tenant;
    const tsrd_quota *q = &t->conf.quota;
    struct stat sb;
    if (count >= TSRD_RINGS_PER_SESSION)
        st = tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                           "ring_open: this connection has %d rings open, at most %d", count,
                           TSRD_RINGS_PER_SESSION);
    else if (d->rings_open > TSRD_RINGS_MAX)
        st = tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                           "ring_open: the daemon serves %d rings, at most %d", d->rings_open - 1,
                           TSRD_RINGS_MAX);
    else if (q->in_flight != 0 && t->in_flight >= q->in_flight) {
        t->refused_quota++;
        st = tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                           "quota in_flight of tenant %s: %llu in use, 1 asked, the quota is %llu "
                           "(an open ring holds one)",
                           t->name, (unsigned long long)t->in_flight,
                           (unsigned long long)q->in_flight);
    } else if (map->size != tsr_ring_bytes(slots))
        st = tsr_error_set(err, TSR_BUFFER_MISMATCH,
                           "ring_open.shm: %s holds %llu bytes, a ring of %u slots takes %llu",
                           map->name, (unsigned long long)map->size, slots,
                           (unsigned long long)tsr_ring_bytes(slots));
    else if (fstat(map->fd, &sb) != 0 || (uint64_t)sb.st_size < map->size)
        st = tsr_error_set(err, TSR_BUFFER_MISMATCH, "ring_open.shm: %s shrank to %lld bytes",
                           map->name, (long long)sb.st_size);
    if (st == TSR_OK) {
        ring_access a = {0};
        if (!ring_guarded(r, ring_check_header, &a))
            st = tsr_error_set(err, TSR_BUFFER_MISMATCH, "ring_open.shm: %s shrank", map->name);
        r->first = a.seq;
        if (st == TSR_OK && a.value == 0)
            st = tsr_error_set(err, TSR_INVALID_ARGUMENT,
                               "ring_open.shm: %s does not begin with a ring header (magic %#x, "
                               "version %u, %u slots)",
                               map->name, TSR_RING_MAGIC, TSR_RING_VERSION, slots);
    }
    if (st == TSR_OK && getrandom(&r->id, sizeof r->id, 0) != (ssize_t)sizeof r->id)
        st = tsr_error_set(err, TSR_INTERNAL, "ring_open: getrandom: %s", strerror(errno));
    if (st == TSR_OK) {
        r->tenant = t;
        t->in_flight++;
        int rc = pthread_create(&r->thread, NULL, ring_main, r);
        if (rc != 0)
            st = tsr_error_set(err, TSR_INTERNAL, "ring_open: pthread_create: %s", strerror(rc));
        else
            r->started = true;
    }
    if (st != TSR_OK) {
        ring_release(d, r);
        return st;
    }
    r->next = s->rings;
    s->rings = r;
    *id = r->id;
    return TSR_OK;
}

tsr_status tsrd_ring_close(tsrd_daemon *d, tsrd_session *s, uint64_t id, uint64_t *launches,
                           tsr_error *err)
{
    for (tsrd_ring **p = &s->rings; *p != NULL; p = &(*p)->next) {
        tsrd_ring *r = *p;
        if (r->id != id)
            continue;
        *p = r->next;
        *launches = atomic_load(&r->served);
        ring_end(d, r, TSR_CANCELLED, "ring closed");
        return TSR_OK;
    }
    return tsr_error_set(err, TSR_NOT_FOUND, "ring_close.ring: no ring %#llx",
                         (unsigned long long)id);
}

void tsrd_rings_end_all(tsrd_daemon *d, tsrd_session *s, tsr_status status, const char *message)
{
    while (s->rings != NULL) {
        tsrd_ring *r = s->rings;
        s->rings = r->next;
        ring_end(d, r, status, message);
    }
}

void tsrd_rings_stop_all(tsrd_session *s, tsr_status status, const char *message)
{
    for (tsrd_ring *r = s->rings; r != NULL; r = r->next)
        ring_stop(r, status, message);
}

void tsrd_rings_end_pipe(tsrd_daemon *d, uint32_t pipe_id)
{
    for (tsrd_session *s = d->sessions; s != NULL; s = s->next)
        if (s->pipe_id == pipe_id)
            tsrd_rings_end_all(d, s, TSR_UNAVAILABLE, "the connection that opened the ring closed");
}

void tsrd_rings_end_every(tsrd_daemon *d, tsr_status status, const char *message)
{
    for (tsrd_session *s = d->sessions; s != NULL; s = s->next)
        tsrd_rings_end_all(d, s, status, message);
}

uint64_t tsrd_rings_launches(const tsrd_session *s)
{
    uint64_t n = 0;
    for (const tsrd_ring *r = s->rings; r != NULL; r = r->next)
        n += atomic_load(&r->served);
    return n;
}
