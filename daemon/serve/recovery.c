/*
 * recovery.c — bringing the device back after a sticky fault.
 *
 * A kernel fault (an illegal address in one tenant's launch) poisons the whole
 * device context: the jobs running on the device fail with TSR_DEVICE_LOST,
 * and so would every later one. The loop notices when a job completes (the
 * backend reports lost()) and recovers in four steps:
 *
 *   1. stop (loop): health turns RECOVERING and the dispatch pump hands out no
 *      more heavy work (new requests wait in their tenants' queues); the jobs
 *      still running fail fast on the lost device and complete.
 *   2. drop (loop, once nothing runs): every session's stream, captured graphs
 *      and shared-memory pins belonged to the old context; they are released
 *      and the sessions make new ones on first use. Every kernel a session
 *      holds is pinned for step 3.
 *   3. rebuild (worker): the backend resets the context, then each pinned
 *      kernel is loaded again from its binary in the kernel cache (compiled
 *      again when the cache no longer has it), so kernel handles stay valid.
 *   4. resume (loop): the new kernel objects replace the old ones, health turns
 *      READY and the queued work runs.
 *
 * Device buffers cannot come back: their contents died with the context. Their
 * handles stay until freed, no longer counted against the tenant's quotas,
 * and every use answers TSR_DEVICE_LOST saying the memory was lost in a
 * recovery.
 * That is how each tenant learns of it; health and stats count recoveries.
 *
 * A rebuild that fails is tried REBUILD_ATTEMPTS times, a second apart. After
 * that the daemon stops trying: queued work runs and fails with DEVICE_LOST,
 * health stays RECOVERING, and the systemd watchdog is no longer fed, so the
 * service manager restarts the daemon.
 *
 * Threading: everything here runs on the loop thread except recovery_rebuild,
 * which runs on a worker while no other job does and touches only the backend,
 * the kernel cache, the arbiter and the pinned kernels' immutable fields.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/devices.h"
#include "serve/graphs.h"
#include "serve/ring.h"
#include "serve/recovery.h"
#include "serve/session.h"
#include "serve/shm.h"

#define REBUILD_ATTEMPTS 3
#define REBUILD_RETRY_US 1000000

/* One kernel to load again: pinned on the loop, loaded on the worker. */
typedef struct recovery_kernel {
    tsrd_kernel *kernel;
    tsrd_kobj *kobj; /* the new object, or NULL when loading failed */
} recovery_kernel;

struct tsrd_recovery {
    uv_work_t work;
    tsrd_daemon *d;
    tsrd_recovery_resume_fn resume;
    recovery_kernel *kernels;
    size_t n_kernels, cap_kernels;
    size_t kernels_failed;
    bool rebuilding;
    bool gave_up;
    tsr_status status;
    tsr_error err;
};

static void recovery_pin_kernel(void *obj, void *arg)
{
    struct tsrd_recovery *r = arg;
    if (r->n_kernels == r->cap_kernels) {
        size_t cap = r->cap_kernels ? 2 * r->cap_kernels : 16;
        recovery_kernel *k = realloc(r->kernels, cap * sizeof *k);
        if (k == NULL)
            return; /* that kernel is not reloaded; its launches answer DEVICE_LOST */
        r->kernels = k;
        r->cap_kernels = cap;
    }
    tsrd_kernel *k = obj;
    tsrd_kernel_ref(k);
    r->kernels[r->n_kernels++] = (recovery_kernel){.kernel = k};
}

/* Loads one kernel in the new context from the kernel cache, compiling it
 * again when the cache has dropped it. */
static tsr_status recovery_reload(tsrd_daemon *d, recovery_kernel *rk, tsr_error *err)
{
    const tsrd_kernel *k = rk->kernel;
    const tsr_candidate *c = tsr_arbiter_find(d->arbiter, k->region.kind, k->candidate);
    if (c == NULL)
        return tsr_error_set(err, TSR_INTERNAL, "candidate %s is not registered", k->candidate);
    const tsr_kcache_blob *blob = NULL;
    tsr_kcache_level level;
    tsr_status st = tsr_kcache_lookup(d->kcache, &k->key, &blob, &level, err);
    if (st == TSR_OK) {
        st = d->bops->load(d->backend, 0, &k->region, c, blob->data, blob->len, &rk->kobj, err);
        tsr_kcache_blob_release(blob);
        return st;
    }
    uint8_t *bin = NULL;
    size_t len = 0;
    st = d->bops->compile(d->backend, &k->region, c, d->devices[0].arch, &bin, &len, err);
    if (st == TSR_OK)
        st = d->bops->load(d->backend, 0, &k->region, c, bin, len, &rk->kobj, err);
    free(bin);
    return st;
}

static void recovery_rebuild(uv_work_t *w)
{
    struct tsrd_recovery *r = w->data;
    tsrd_daemon *d = r->d;
    r->status = TSR_OK;
    for (int attempt = 1; attempt <= REBUILD_ATTEMPTS; attempt++) {
        r->status = d->bops->recover(d->backend, &r->err);
        if (r->status == TSR_OK)
            break;
        tsrd_log_error(&d->log, "device recovery, attempt %d of %d: %s", attempt, REBUILD_ATTEMPTS,
                       r->err.message);
        if (attempt < REBUILD_ATTEMPTS)
            usleep(REBUILD_RETRY_US);
    }
    r->kernels_failed = 0;
    for (size_t i = 0; r->status == TSR_OK && i < r->n_kernels; i++) {
        tsr_error err;
        if (recovery_reload(d, &r->kernels[i], &err) != TSR_OK) {
            r->kernels_failed++;
            tsrd_log_warn(&d->log, "device recovery: kernel %s (%s) not reloaded: %s",
                          r->kernels[i].kernel->candidate,
                          tsr_region_kind_name(r->kernels[i].kernel->region.kind), err.message);
        }
    }
}

static void recovery_resume(tsrd_daemon *d)
{
    d->work_paused = false;
    d->recovery->resume(d);
}

static void recovery_rebuilt(uv_work_t *w, int uv_status)
{
    (void)uv_status;
    struct tsrd_recovery *r = w->data;
    tsrd_daemon *d = r->d;
    r->rebuilding = false;
    for (size_t i = 0; i < r->n_kernels; i++) {
        tsrd_kernel *k = r->kernels[i].kernel;
        if (r->kernels[i].kobj != NULL) {
            tsrd_kobj *old = k->kobj;
            k->kobj = r->kernels[i].kobj;
            d->bops->unload(d->backend, old);
        }
        /* Copies on other devices went with the old context: loaded again on
         * their next use. */
        tsrd_kernel_unload_others(d, k);
        tsrd_kernel_unref(d, k);
    }
    size_t reloaded = r->n_kernels - r->kernels_failed;
    r->n_kernels = 0;
    uint64_t ms = (uv_hrtime() - d->recovery_started_ns) / 1000000;
    if (r->status == TSR_OK) {
        d->recovering = false;
        d->recoveries++;
        d->recovery_last_ms = ms;
        tsrd_log_warn(&d->log,
                      "device recovered in %llu ms (recovery %llu): %zu kernels reloaded, %zu "
                      "not; device buffers made before the fault are lost",
                      (unsigned long long)ms, (unsigned long long)d->recoveries, reloaded,
                      r->kernels_failed);
    } else {
        r->gave_up = true;
        tsrd_log_error(&d->log,
                       "device could not be recovered after %d attempts (%s); every device "
                       "request now fails with DEVICE_LOST: restart tesserad",
                       REBUILD_ATTEMPTS, r->err.message);
    }
    d->inflight--;
    recovery_resume(d);
    if (d->draining && d->inflight == 0 && d->idle_fn != NULL)
        d->idle_fn(d);
}

static void recovery_forget_buffer(void *obj, void *arg)
{
    tsrd_buffer *b = obj;
    tsrd_daemon *d = arg;
    if (b->lost)
        return;
    b->lost = true;
    d->buffers_lost++;
    tsrd_device_uncharge(d, b); /* its device memory is gone */
    if (b->tenant != NULL) {
        b->tenant->buffers--;
        b->tenant->buffer_bytes -= b->bytes;
    }
}

/* Step 2, then step 3 on a worker. */
static void recovery_start_rebuild(tsrd_daemon *d)
{
    struct tsrd_recovery *r = d->recovery;
    for (tsrd_session *s = d->sessions; s != NULL; s = s->next) {
        tsrd_rings_stop_all(d, s, TSR_DEVICE_LOST,
                            "the device was recovered after a fault; open the ring again");
        tsrd_graphs_release(d, s);
        for (int i = 0; i < TSRD_MAX_DEVICES; i++) {
            if (s->streams[i] != NULL) {
                d->bops->stream_destroy(d->backend, s->streams[i]);
                s->streams[i] = NULL;
            }
        }
        tsrd_shm_unpin_all(d, s);
    }
    /* Buffers of the old context: counted for the operators, and no longer
     * against their tenants' quotas (the memory is gone; the handle stays
     * only to say so). */
    tsrd_handles_each(&d->handles, TSRD_HANDLE_BUFFER, recovery_forget_buffer, d);
    tsrd_handles_each(&d->handles, TSRD_HANDLE_KERNEL, recovery_pin_kernel, r);
    r->rebuilding = true;
    r->work.data = r;
    d->inflight++;
    int rc = uv_queue_work(d->loop, &r->work, recovery_rebuild, recovery_rebuilt);
    if (rc != 0) {
        r->status = tsr_error_set(&r->err, TSR_INTERNAL, "uv_queue_work: %s", uv_strerror(rc));
        recovery_rebuilt(&r->work, 0);
    }
}

void tsrd_recovery_poll(tsrd_daemon *d, tsrd_recovery_resume_fn resume)
{
    if (d->bops->lost == NULL || d->bops->recover == NULL)
        return;
    struct tsrd_recovery *r = d->recovery;
    if (!d->recovering) {
        if (r != NULL && r->gave_up)
            return;
        if (!d->bops->lost(d->backend))
            return;
        if (r == NULL) {
            r = calloc(1, sizeof *r);
            if (r == NULL) {
                tsrd_log_error(&d->log, "device lost, and no memory to recover it");
                return;
            }
            r->d = d;
            d->recovery = r;
        }
        r->resume = resume;
        d->recovering = true;
        d->work_paused = true;
        d->device_faults++;
        d->recovery_started_ns = uv_hrtime();
        tsrd_log_warn(&d->log,
                      "device fault: a sticky error poisoned the device context (or its worker "
                      "process died); failing the work in flight with DEVICE_LOST and rebuilding "
                      "the context");
    }
    if (!r->rebuilding && d->work_running == 0 && d->work_paused)
        recovery_start_rebuild(d);
}

bool tsrd_recovery_gave_up(const tsrd_daemon *d)
{
    return d->recovery != NULL && d->recovery->gave_up;
}

void tsrd_recovery_fini(tsrd_daemon *d)
{
    if (d->recovery == NULL)
        return;
    free(d->recovery->kernels);
    free(d->recovery);
    d->recovery = NULL;
}
