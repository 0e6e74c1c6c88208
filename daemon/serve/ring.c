/*
 * ring.c — submission rings (ring.h): their lifetime, pins and quota; the
 * loop that serves one is backend/ring_loop.c, run here or by the backend.

 */
#include "serve/ring.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "backend/ring_loop.h"
#include "serve/session.h"
#include "tessera/ring.h"

struct tsrd_ring {
    struct tsrd_ring *next; /* in the session's rings */
    uint64_t id;
    tsrd_tenant *tenant; /* holds one of its in_flight while the ring exists */
    tsrd_shm_map *map;
    uint32_t slots;
    tsrd_bound_launch *bindings;
    int n_bindings;
    tsrd_ring_loop *loop; /* served here (backends without ring ops) */
    tsrd_bring *remote;   /* served by the backend */
    uint64_t served;      /* once stopped */
    uint64_t groups;      /* the backend calls they went in */
};

void tsrd_ring_bindings_release(tsrd_daemon *d, tsrd_bound_launch *bindings, int n)
{
    for (int i = 0; i < n; i++)
        tsrd_bound_launch_release(d, &bindings[i]);
    free(bindings);
}

static void ring_release(tsrd_daemon *d, tsrd_ring *r)
{
    tsrd_ring_bindings_release(d, r->bindings, r->n_bindings);
    if (r->tenant != NULL)
        r->tenant->in_flight--;
    d->ring_launches_closed += r->served;
    d->ring_groups_closed += r->groups;
    d->rings_open--;
    free(r);
}

/* Stops r's loop where it runs (waiting for its launch in progress) and
 * marks the ring closed with status, unless it ended itself before. */
static void ring_stop(tsrd_daemon *d, tsrd_ring *r, tsr_status status, const char *message)
{
    tsrd_ring_served served = {0, 0};
    if (r->loop != NULL) {
        tsrd_ring_loop_stop(r->loop, &served);
        r->loop = NULL;
    } else if (r->remote != NULL) {
        d->bops->ring->ring_stop(d->backend, r->remote, &served);
        r->remote = NULL;
    }
    r->served += served.slots;
    r->groups += served.groups;
    tsrd_ring_close_segment(r->map->base, r->map->size, status, message);
}

static void ring_end(tsrd_daemon *d, tsrd_ring *r, tsr_status status, const char *message)
{
    ring_stop(d, r, status, message);
    ring_release(d, r);
}

/* Starts the ring's loop: in the backend where it has ring ops, else here. */
static tsr_status ring_start(tsrd_daemon *d, tsrd_ring *r, uint32_t first, tsr_error *err)
{
    tsrd_launch_desc *descs = tsrd_bound_launch_descs(r->bindings, (size_t)r->n_bindings, 0);
    if (descs == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "ring_open: out of memory");
    tsr_status st;
    if (d->bops->ring != NULL)
        st = d->bops->ring->ring_start(d->backend, r->map->fd, r->map->size, r->slots, first, descs,
                                       r->n_bindings, d->config.kernel_timeout_ms, &r->remote, err);
    else
        st = tsrd_ring_loop_start(d->bops, d->backend, r->map->base, r->map->size, r->slots, first,
                                  descs, r->n_bindings, &r->loop, err);
    free(descs);
    return st;
}

tsr_status tsrd_ring_open(tsrd_daemon *d, tsrd_session *s, tsrd_shm_map *map, uint32_t slots,
                          tsrd_bound_launch *bindings, int n, uint64_t *id, tsr_error *err)
{
    tsrd_ring *r = calloc(1, sizeof *r);
    if (r == NULL) {
        tsrd_ring_bindings_release(d, bindings, n);
        return tsr_error_set(err, TSR_NO_MEMORY, "ring_open: out of memory");
    }
    r->map = map;
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
    uint32_t first = 0;
    bool faulted = false;
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
    else if (!tsrd_ring_check_header(map->base, map->size, slots, &first, &faulted))
        st = faulted
                 ? tsr_error_set(err, TSR_BUFFER_MISMATCH, "ring_open.shm: %s shrank", map->name)
                 : tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "ring_open.shm: %s does not begin with a ring header (magic "
                                 "%#x, version %u, %u slots)",
                                 map->name, TSR_RING_MAGIC, TSR_RING_VERSION, slots);
    if (st == TSR_OK && getrandom(&r->id, sizeof r->id, 0) != (ssize_t)sizeof r->id)
        st = tsr_error_set(err, TSR_INTERNAL, "ring_open: getrandom: %s", strerror(errno));
    if (st == TSR_OK) {
        r->tenant = t;
        t->in_flight++;
        st = ring_start(d, r, first, err);
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
        ring_stop(d, r, TSR_CANCELLED, "ring closed");
        *launches = r->served;
        ring_release(d, r);
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

void tsrd_rings_stop_all(tsrd_daemon *d, tsrd_session *s, tsr_status status, const char *message)
{
    for (tsrd_ring *r = s->rings; r != NULL; r = r->next)
        ring_stop(d, r, status, message);
}

/* A ring's launches all run on one device, that of their buffers. */
static bool ring_on_device(const tsrd_ring *r, int device)
{
    for (int i = 0; i < r->n_bindings; i++)
        if (r->bindings[i].output != NULL && r->bindings[i].output->device == device)
            return true;
    return false;
}

void tsrd_rings_stop_device(tsrd_daemon *d, tsrd_session *s, int device, tsr_status status,
                            const char *message)
{
    for (tsrd_ring *r = s->rings; r != NULL; r = r->next)
        if (ring_on_device(r, device))
            ring_stop(d, r, status, message);
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
