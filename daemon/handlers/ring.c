/*
 * ring.c — ring_open and ring_close: the control side of submission rings
 * (serve/ring.h; protocol.md, "Submission rings").
 *
 * ring_open checks every binding as a launch checks its request — the kernel
 * and buffers are the session's own, the buffers fit the kernel's signature —
 * pins them, maps the segment for the session, and starts the ring. Both run
 * on the loop: nothing here waits on the device except ring_close, which joins
 * the ring's thread after its launch in progress.
 */
#include <stdio.h>
#include <stdlib.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/dispatch.h"
#include "serve/recovery.h"
#include "serve/ring.h"
#include "serve/session.h"
#include "serve/shm.h"
#include "tessera/ring.h"

static tsr_status ring_open_execute(tsrd_job *job)
{
    const Tessera__V1__RingOpenRequest *req = job->req->ring_open;
    /* A power of two, so that a slot's index (the 32-bit submission count
     * modulo slots) runs on unbroken when the count wraps. */
    if (req->slots < 1 || req->slots > TSR_RING_SLOTS_MAX || (req->slots & (req->slots - 1)) != 0)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "ring_open.slots: %u, a power of two from 1 to %u", req->slots,
                             TSR_RING_SLOTS_MAX);
    if (req->n_bindings < 1 || req->n_bindings > TSR_RING_BINDINGS_MAX)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT, "ring_open.bindings: %zu, 1 .. %u",
                             req->n_bindings, TSR_RING_BINDINGS_MAX);
    if (req->shm == NULL)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "ring_open.shm: the ring's segment is required");
    if (req->shm->offset != 0)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "ring_open.shm.offset: %llu; a ring is a whole segment (offset 0)",
                             (unsigned long long)req->shm->offset);
    tsrd_bound_launch *bindings = calloc(req->n_bindings, sizeof *bindings);
    if (bindings == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "ring_open: out of memory");
    tsr_status st = TSR_OK;
    size_t resolved = 0;
    for (size_t i = 0; st == TSR_OK && i < req->n_bindings; i++) {
        const Tessera__V1__BatchLaunch *b = req->bindings[i];
        char field[48];
        snprintf(field, sizeof field, "ring_open.bindings[%zu]", i);
        resolved = i + 1;
        st = tsrd_job_bind_launch(job, field, "kernel", b->kernel, b->inputs, b->n_inputs,
                                  b->output, &bindings[i]);
    }
    /* A ring is served on device 0's stream with the kernels loaded there. */
    tsrd_device_pick pick = TSRD_DEVICE_PICK_INIT;
    for (size_t i = 0; st == TSR_OK && i < resolved; i++) {
        char field[48];
        snprintf(field, sizeof field, "ring_open.bindings[%zu]", i);
        st = tsrd_job_pick_bound(job, &pick, &bindings[i], field);
    }
    if (st == TSR_OK && pick.device > 0)
        st = tsr_error_set(&job->err, TSR_UNSUPPORTED,
                           "ring_open: the bindings' buffers are on device %d; rings serve "
                           "device 0 only",
                           pick.device);
    tsrd_shm_map *map = NULL;
    uint8_t *ptr = NULL;
    if (st == TSR_OK)
        st = tsrd_shm_resolve(job, req->shm, "ring_open.shm", tsr_ring_bytes(req->slots), &map,
                              &ptr);
    uint64_t id = 0;
    if (st == TSR_OK) {
        /* The ring owns the bindings from here, whatever happens. */
        st = tsrd_ring_open(job->d, job->session, map, req->slots, bindings, (int)resolved, &id,
                            &job->err);
    } else {
        tsrd_ring_bindings_release(job->d, bindings, (int)resolved);
    }
    if (st != TSR_OK)
        return st;
    tessera__v1__ring_open_reply__init(&job->body.ring_open);
    job->body.ring_open.ring = id;
    TSRD_JOB_REPLY(job, ring_open, RING_OPEN);
    return TSR_OK;
}

static tsr_status ring_close_execute(tsrd_job *job)
{
    uint64_t launches = 0;
    tsr_status st =
        tsrd_ring_close(job->d, job->session, job->req->ring_close->ring, &launches, &job->err);
    /* A ring's device can be lost with no request in flight (its launch hung
     * and the device worker ended itself): stopping the ring is how the daemon
     * learns it, and the recovery starts here. */
    tsrd_recovery_poll(job->d, tsrd_dispatch_pump);
    if (st != TSR_OK)
        return st;
    tessera__v1__ring_close_reply__init(&job->body.ring_close);
    job->body.ring_close.launches = launches;
    TSRD_JOB_REPLY(job, ring_close, RING_CLOSE);
    return TSR_OK;
}

const tsrd_handler tsrd_handler_ring_open = {.execute = ring_open_execute};
const tsrd_handler tsrd_handler_ring_close = {.execute = ring_close_execute};
