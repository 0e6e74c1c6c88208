/*
 * ring.c — the client's side of submission rings (client.h, "submission
 * rings"; the segment's layout in tessera/ring.h).
 *
 * A launch writes the binding into the next slot and counts it in
 * `submitted` (waking the ring thread only when it said it sleeps), then waits
 * for `completed` to pass it: spinning first, since a tiny launch comes back
 * within tens of microseconds, then sleeping on the futex after saying so in
 * `client_sleeping`, so that the daemon wakes it. A run submits a sequence
 * the same way without waiting in between (while a slot is free), reading
 * each answer before its slot is used again, and waits once at the end.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"
#include "tessera/ring.h"

/* How long a launch spins on `completed` before it sleeps. */
#define RING_SPIN_NS 200000u

struct tsr_client_ring {
    tsr_client *c;
    tsr_client_shm *shm;
    tsr_ring_header *hdr;
    tsr_ring_slot *slots;
    uint32_t n_slots;
    uint32_t next; /* the next submission's number */
    uint64_t id;
    int timeout_ms;
};

static uint64_t ring_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long ring_futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

tsr_status tsr_client_ring_open(tsr_client *c, const tsr_client_launch_desc *bindings, size_t n,
                                unsigned slots, tsr_client_ring **out, int timeout_ms,
                                tsr_error *err)
{
    if (c == NULL || out == NULL || (n > 0 && bindings == NULL))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "client, bindings and out must not be NULL");
    if (slots < 1 || slots > TSR_RING_SLOTS_MAX)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring: %u slots, 1 .. %u", slots,
                             TSR_RING_SLOTS_MAX);
    /* The daemon takes powers of two (a slot's index then runs on unbroken
     * when the 32-bit counts wrap): round up. */
    while ((slots & (slots - 1)) != 0)
        slots += slots & -slots;
    if (n < 1 || n > TSR_RING_BINDINGS_MAX)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring: %zu bindings, 1 .. %u", n,
                             TSR_RING_BINDINGS_MAX);
    tsr_client_ring *r = calloc(1, sizeof *r);
    if (r == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "ring: out of memory");
    tsr_status st = tsr_client_shm_create(tsr_ring_bytes(slots), &r->shm, err);
    if (st != TSR_OK) {
        free(r);
        return st;
    }
    r->c = c;
    r->timeout_ms = timeout_ms;
    r->n_slots = slots;
    r->hdr = tsr_client_shm_data(r->shm);
    r->slots = (tsr_ring_slot *)(r->hdr + 1);
    r->hdr->magic = TSR_RING_MAGIC;
    r->hdr->version = TSR_RING_VERSION;
    r->hdr->slots = slots;
    st = tsri_client_shm_grant(c, r->shm, timeout_ms, err);

    Tessera__V1__BatchLaunch **ptrs = NULL;
    if (st == TSR_OK)
        st = tsri_client_launches_pb(bindings, n, "ring", &ptrs, err);
    Tessera__V1__SharedMemory ref = TESSERA__V1__SHARED_MEMORY__INIT;
    ref.name = (char *)tsr_client_shm_name(r->shm);
    ref.offset = 0;
    ref.length = tsr_ring_bytes(slots);
    Tessera__V1__RingOpenRequest body = TESSERA__V1__RING_OPEN_REQUEST__INIT;
    body.shm = &ref;
    body.slots = slots;
    body.n_bindings = n;
    body.bindings = ptrs;
    Tessera__V1__Reply *reply = NULL;
    if (st == TSR_OK)
        st = tsri_client_request(c, TESSERA__V1__REQUEST__BODY_RING_OPEN, &body, &reply, timeout_ms,
                                 err);
    free(ptrs);
    if (st != TSR_OK) {
        tsr_client_shm_free(r->shm);
        free(r);
        return st;
    }
    r->id = reply->ring_open->ring;
    tessera__v1__reply__free_unpacked(reply, NULL);
    *out = r;
    return TSR_OK;
}

/* A status and message the daemon wrote into the segment, as an error; a
 * status out of range (the segment is shared memory) becomes fallback. */
static tsr_status ring_error(int32_t status, const char *field, tsr_status fallback,
                             const char *otherwise, tsr_error *err)
{
    char message[TSR_RING_MESSAGE_MAX + 1];
    memcpy(message, field, TSR_RING_MESSAGE_MAX);
    message[TSR_RING_MESSAGE_MAX] = '\0';
    tsr_status st = status > 0 && status < TSR_STATUS_COUNT ? (tsr_status)status : fallback;
    return tsr_error_set(err, st, "%s", message[0] ? message : otherwise);
}

/* The reason the daemon ended the ring, as an error. */
static tsr_status ring_closed_error(const tsr_client_ring *r, tsr_error *err)
{
    return ring_error(r->hdr->close_status, r->hdr->close_message, TSR_UNAVAILABLE,
                      "the ring was ended", err);
}

/* The wait for an answer: timeout_ms, else the connection's, else 30 s. */
static int ring_wait_ms(const tsr_client_ring *r, int timeout_ms)
{
    return timeout_ms > 0 ? timeout_ms : r->timeout_ms > 0 ? r->timeout_ms : 30000;
}

/* Writes binding into the next slot and submits it (waking the ring thread
 * when it sleeps); the caller made sure the slot is free. */
static void ring_submit(tsr_client_ring *r, uint32_t binding)
{
    tsr_ring_header *h = r->hdr;
    uint32_t seq = r->next;
    tsr_ring_slot *slot = &r->slots[seq % r->n_slots];
    slot->binding = binding;
    slot->status = -1;
    atomic_store_explicit(&h->submitted, seq + 1, memory_order_seq_cst);
    r->next = seq + 1;
    if (atomic_load_explicit(&h->daemon_sleeping, memory_order_seq_cst))
        ring_futex(&h->submitted, FUTEX_WAKE, INT_MAX, NULL);
}

/* Waits until the daemon has completed submissions up to `target` (spinning,
 * then sleeping on the futex); *done gets the completed count. TSR_TIMEOUT
 * after wait_ms, the ring's end reason when it was ended. */
static tsr_status ring_wait_completed(tsr_client_ring *r, uint32_t target, int wait_ms,
                                      uint32_t *done, tsr_error *err)
{
    tsr_ring_header *h = r->hdr;
    uint64_t start = ring_now_ns();
    uint64_t deadline = start + (uint64_t)wait_ms * 1000000u;
    for (;;) {
        *done = atomic_load_explicit(&h->completed, memory_order_acquire);
        if ((int32_t)(*done - target) >= 0)
            return TSR_OK;
        if (atomic_load_explicit(&h->closed, memory_order_acquire))
            return ring_closed_error(r, err);
        uint64_t now = ring_now_ns();
        if (now >= deadline)
            return tsr_error_set(err, TSR_TIMEOUT, "ring: no answer to launch %u within %d ms",
                                 target - 1, wait_ms);
        if (now - start < RING_SPIN_NS)
            continue;
        atomic_store_explicit(&h->client_sleeping, 1, memory_order_seq_cst);
        uint32_t seen = atomic_load_explicit(&h->completed, memory_order_seq_cst);
        if ((int32_t)(seen - target) < 0 && !atomic_load(&h->closed)) {
            uint64_t left = deadline - now;
            struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
            ring_futex(&h->completed, FUTEX_WAIT, seen, &ts);
        }
        atomic_store_explicit(&h->client_sleeping, 0, memory_order_seq_cst);
    }
}

/* Waits, when the ring has `slots` submissions outstanding (an earlier call
 * that timed out may have left some), until the oldest is answered, so that
 * the next submission never overwrites a slot the daemon has not served;
 * *done gets the completed count. */
static tsr_status ring_wait_room(tsr_client_ring *r, int wait_ms, uint32_t *done, tsr_error *err)
{
    *done = atomic_load_explicit(&r->hdr->completed, memory_order_acquire);
    if (r->next - *done < r->n_slots)
        return TSR_OK;
    return ring_wait_completed(r, r->next - r->n_slots + 1, wait_ms, done, err);
}

/* The answer the daemon wrote into submission seq's slot. */
static tsr_status ring_slot_status(const tsr_client_ring *r, uint32_t seq, tsr_error *err)
{
    const tsr_ring_slot *slot = &r->slots[seq % r->n_slots];
    if (slot->status == TSR_OK)
        return TSR_OK;
    return ring_error(slot->status, slot->message, TSR_INTERNAL, "", err);
}

/* What a sequence has read of its answers so far. */
typedef struct ring_run_answers {
    uint32_t first;     /* the sequence's first submission */
    uint32_t read;      /* the next submission whose answer to read */
    bool name_index;    /* a failure's error names its index (ring_run) */
    uint64_t device_ns; /* summed over those read */
    tsr_status failure; /* the first failure read, else TSR_OK */
    tsr_error error;    /* its error */
} ring_run_answers;

/* Reads the answers of the sequence's submissions that `done` (the completed
 * count) has passed, before their slots are used again. */
static void ring_run_collect(const tsr_client_ring *r, ring_run_answers *a, uint32_t done)
{
    for (; a->read != r->next && (int32_t)(done - a->read) > 0; a->read++) {
        a->device_ns += r->slots[a->read % r->n_slots].device_ns;
        if (a->failure == TSR_OK) {
            a->failure = ring_slot_status(r, a->read, &a->error);
            if (a->failure != TSR_OK && a->name_index)
                tsr_error_prefix(&a->error, "ring_run[%u]", a->read - a->first);
        }
    }
}

/* Submits bindings[0 .. n) without waiting in between (at most `slots`
 * outstanding, counting any an earlier call left) and waits for all of them:
 * tsr_client_ring_launch is a sequence of one. */
static tsr_status ring_sequence(tsr_client_ring *r, const uint32_t *bindings, size_t n,
                                bool name_index, double *device_ms, int timeout_ms, tsr_error *err)
{
    if (device_ms != NULL)
        *device_ms = 0;
    if (atomic_load_explicit(&r->hdr->closed, memory_order_acquire))
        return ring_closed_error(r, err);
    int wait_ms = ring_wait_ms(r, timeout_ms);
    ring_run_answers a = {.first = r->next, .read = r->next, .name_index = name_index};
    tsr_error_clear(&a.error);
    uint32_t done;
    for (size_t i = 0; i < n; i++) {
        tsr_status st = ring_wait_room(r, wait_ms, &done, err);
        if (st != TSR_OK)
            return st;
        ring_run_collect(r, &a, done);
        ring_submit(r, bindings[i]);
    }
    tsr_status st = ring_wait_completed(r, r->next, wait_ms, &done, err);
    if (st != TSR_OK)
        return st;
    ring_run_collect(r, &a, r->next);
    if (device_ms != NULL)
        *device_ms = (double)a.device_ns / 1e6;
    if (a.failure != TSR_OK && err != NULL)
        *err = a.error;
    return a.failure;
}

tsr_status tsr_client_ring_launch(tsr_client_ring *r, uint32_t binding, double *device_ms,
                                  int timeout_ms, tsr_error *err)
{
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring must not be NULL");
    return ring_sequence(r, &binding, 1, false, device_ms, timeout_ms, err);
}

tsr_status tsr_client_ring_run(tsr_client_ring *r, const uint32_t *bindings, size_t n,
                               double *device_ms, int timeout_ms, tsr_error *err)
{
    if (device_ms != NULL)
        *device_ms = 0;
    if (r == NULL || (n > 0 && bindings == NULL))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring and bindings must not be NULL");
    if (n > TSR_RING_RUN_MAX)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring_run: %zu launches, at most %u", n,
                             TSR_RING_RUN_MAX);
    return ring_sequence(r, bindings, n, true, device_ms, timeout_ms, err);
}

tsr_status tsr_client_ring_close(tsr_client_ring *r, uint64_t *launches, int timeout_ms,
                                 tsr_error *err)
{
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ring must not be NULL");
    Tessera__V1__RingCloseRequest body = TESSERA__V1__RING_CLOSE_REQUEST__INIT;
    body.ring = r->id;
    Tessera__V1__Reply *reply = NULL;
    tsr_status st = tsri_client_request(r->c, TESSERA__V1__REQUEST__BODY_RING_CLOSE, &body, &reply,
                                        timeout_ms, err);
    if (st == TSR_OK) {
        if (launches != NULL)
            *launches = reply->ring_close->launches;
        tessera__v1__reply__free_unpacked(reply, NULL);
    }
    tsr_client_shm_free(r->shm);
    free(r);
    return st;
}
