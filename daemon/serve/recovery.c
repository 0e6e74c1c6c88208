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
 *      and the sessions make new ones on first use. Every live kernel (one a
 *      session holds, or one queued work still pins after its handle was
 *      freed) is pinned for step 3.
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
 * Where the backend recovers one device at a time (device_lost and
 * recover_device) and shows several, a fault stops only its device: the
 * dispatch pump holds that device's work (and work bound to no device while
 * device 0 recovers), step 2 waits for that device's jobs alone and drops only
 * its rings, streams, buffers and kernel copies, step 3 resets only it, and
 * the other devices serve throughout; health stays READY while one device
 * serves (tsrd_devrec_poll, tsrd_devrec_done hold each device's state).
 *
 * A rebuild that fails is tried REBUILD_ATTEMPTS times, a second apart. After
 * that the daemon stops trying: queued work runs and fails with DEVICE_LOST,
 * health stays RECOVERING with each device that did not come back LOST, and
 * the systemd watchdog is no longer fed, so the service manager restarts the
 * daemon.
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

/* One rebuild: of the whole node (device -1) or of one device. */
typedef struct recovery_run {
    uv_work_t work;
    tsrd_daemon *d;
    int device;
    recovery_kernel *kernels; /* device 0's kernels, to load again */
    size_t n_kernels, cap_kernels;
    size_t kernels_failed;
    tsr_status status;
    tsr_error err;
} recovery_run;

struct tsrd_recovery {
    tsrd_recovery_resume_fn resume;
    recovery_run node;
    bool rebuilding; /* the node's */
    bool gave_up;    /* the node's */
    recovery_run dev[TSRD_MAX_DEVICES];
};

static void recovery_pin_kernel(void *obj, void *arg)
{
    recovery_run *r = arg;
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

/* Loads one kernel in device 0's new context (tsrd_kernel_load_from_cache). */
static tsr_status recovery_reload(tsrd_daemon *d, recovery_kernel *rk, tsr_error *err)
{
    return tsrd_kernel_load_from_cache(d, rk->kernel, 0, &rk->kobj, err);
}

static void recovery_rebuild(uv_work_t *w)
{
    recovery_run *r = w->data;
    tsrd_daemon *d = r->d;
    r->status = TSR_OK;
    for (int attempt = 1; attempt <= REBUILD_ATTEMPTS; attempt++) {
        r->status = r->device < 0 ? d->bops->recover(d->backend, &r->err)
                                  : d->bops->recover_device(d->backend, r->device, &r->err);
        if (r->status == TSR_OK)
            break;
        if (r->device < 0)
            tsrd_log_error(&d->log, "device recovery, attempt %d of %d: %s", attempt,
                           REBUILD_ATTEMPTS, r->err.message);
        else
            tsrd_log_error(&d->log, "device %d recovery, attempt %d of %d: %s", r->device, attempt,
                           REBUILD_ATTEMPTS, r->err.message);
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

/* The reloaded kernels replace the old device-0 objects; with everything == true
 * (the node) the copies on the other devices go too, loaded again on their
 * next use. Returns how many were reloaded. */
static size_t recovery_swap_kernels(tsrd_daemon *d, recovery_run *r, bool everything)
{
    for (size_t i = 0; i < r->n_kernels; i++) {
        tsrd_kernel *k = r->kernels[i].kernel;
        if (r->kernels[i].kobj != NULL) {
            tsrd_kobj *old = k->kobj;
            k->kobj = r->kernels[i].kobj;
            d->bops->unload(d->backend, old);
        }
        if (everything)
            tsrd_kernel_unload_others(d, k);
        tsrd_kernel_unref(d, k);
    }
    size_t reloaded = r->n_kernels - r->kernels_failed;
    r->n_kernels = 0;
    return reloaded;
}

static void recovery_after(tsrd_daemon *d)
{
    d->inflight--;
    recovery_resume(d);
    if (d->draining && d->inflight == 0 && d->idle_fn != NULL)
        d->idle_fn(d);
}

static void recovery_rebuilt(uv_work_t *w, int uv_status)
{
    (void)uv_status;
    recovery_run *run = w->data;
    tsrd_daemon *d = run->d;
    struct tsrd_recovery *r = d->recovery;
    r->rebuilding = false;
    size_t reloaded = recovery_swap_kernels(d, run, true);
    uint64_t ms = (uv_hrtime() - d->recovery_started_ns) / 1000000;
    if (run->status == TSR_OK) {
        d->recovering = false;
        d->recoveries++;
        d->recovery_last_ms = ms;
        for (int i = 0; i < d->n_devices; i++)
            d->devrec[i].recoveries++;
        tsrd_log_warn(&d->log,
                      "device recovered in %llu ms (recovery %llu): %zu kernels reloaded, %zu "
                      "not; device buffers made before the fault are lost",
                      (unsigned long long)ms, (unsigned long long)d->recoveries, reloaded,
                      run->kernels_failed);
    } else {
        r->gave_up = true;
        /* Health tells the truth from now on: a device the rebuild did not
         * bring back is lost, not recovering (every device where the backend
         * cannot tell them apart). */
        for (int i = 0; i < d->n_devices; i++)
            if (d->bops->device_lost == NULL || d->bops->device_lost(d->backend, i))
                d->devrec[i].state = TSRD_DEVICE_LOST;
        tsrd_log_error(&d->log,
                       "device could not be recovered after %d attempts (%s); every device "
                       "request now fails with DEVICE_LOST: restart tesserad",
                       REBUILD_ATTEMPTS, run->err.message);
    }
    recovery_after(d);
}

static void recovery_forget(tsrd_daemon *d, tsrd_buffer *b)
{
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

static void recovery_forget_buffer(void *obj, void *arg)
{
    recovery_forget(arg, obj);
}

/* One device's recovery: what it visits. */
typedef struct recovery_scope {
    tsrd_daemon *d;
    int device;
    recovery_run *run;
} recovery_scope;

static void recovery_forget_device_buffer(void *obj, void *arg)
{
    recovery_scope *sc = arg;
    tsrd_buffer *b = obj;
    if (b->device == sc->device)
        recovery_forget(sc->d, b);
}

/* Device 0's object is kobj, loaded again by the rebuild; another device's
 * copy is dropped and loaded again on its next use there. */
static void recovery_device_kernel(void *obj, void *arg)
{
    recovery_scope *sc = arg;
    tsrd_kernel *k = obj;
    if (sc->device == 0) {
        recovery_pin_kernel(k, sc->run);
        return;
    }
    tsrd_kobj *o = atomic_exchange(&k->on_device[sc->device], NULL);
    if (o != NULL)
        sc->d->bops->unload(sc->d->backend, o);
}

static void recovery_queue(tsrd_daemon *d, recovery_run *run, uv_after_work_cb after)
{
    run->work.data = run;
    d->inflight++;
    int rc = uv_queue_work(d->loop, &run->work, recovery_rebuild, after);
    if (rc != 0) {
        run->status = tsr_error_set(&run->err, TSR_INTERNAL, "uv_queue_work: %s", uv_strerror(rc));
        after(&run->work, 0);
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
    /* Every live kernel, not only those with a handle: queued work may pin
     * one whose handle was freed, and must not meet its old objects. */
    for (tsrd_kernel *k = d->kernels; k != NULL; k = k->live_next)
        recovery_pin_kernel(k, &r->node);
    r->rebuilding = true;
    r->node.d = d;
    r->node.device = -1;
    recovery_queue(d, &r->node, recovery_rebuilt);
}

/* ---- one device at a time ---- */

unsigned tsrd_devrec_poll(tsrd_devrec *r, bool lost, int running, uint64_t now_ns)
{
    unsigned step = 0;
    if (r->state == TSRD_DEVICE_SERVING) {
        if (!lost)
            return 0;
        r->state = TSRD_DEVICE_RECOVERING;
        r->faults++;
        r->started_ns = now_ns;
        step = TSRD_DEVREC_FAULT;
    }
    if (r->state == TSRD_DEVICE_RECOVERING && !r->rebuilding && running == 0) {
        r->rebuilding = true;
        step |= TSRD_DEVREC_REBUILD;
    }
    return step;
}

void tsrd_devrec_done(tsrd_devrec *r, bool ok, uint64_t now_ns)
{
    r->rebuilding = false;
    if (!ok) {
        r->state = TSRD_DEVICE_LOST;
        return;
    }
    r->state = TSRD_DEVICE_SERVING;
    r->recoveries++;
    r->last_ms = (now_ns - r->started_ns) / 1000000;
}

static void recovery_device_rebuilt(uv_work_t *w, int uv_status)
{
    (void)uv_status;
    recovery_run *run = w->data;
    tsrd_daemon *d = run->d;
    tsrd_devrec *dr = &d->devrec[run->device];
    size_t reloaded = recovery_swap_kernels(d, run, false);
    tsrd_devrec_done(dr, run->status == TSR_OK, uv_hrtime());
    if (run->status == TSR_OK) {
        d->recoveries++;
        d->recovery_last_ms = dr->last_ms;
        tsrd_log_warn(&d->log,
                      "device %d recovered in %llu ms (its recovery %llu): %zu kernels reloaded, "
                      "%zu not; its buffers made before the fault are lost; the other devices "
                      "served throughout",
                      run->device, (unsigned long long)dr->last_ms,
                      (unsigned long long)dr->recoveries, reloaded, run->kernels_failed);
    } else {
        tsrd_log_error(&d->log,
                       "device %d could not be recovered after %d attempts (%s); its requests "
                       "now fail with DEVICE_LOST, the other devices serve: restart tesserad to "
                       "bring it back",
                       run->device, REBUILD_ATTEMPTS, run->err.message);
    }
    recovery_after(d);
}

/* Steps 2 and 3 for one device, once none of its jobs runs: only its own
 * rings, streams, buffers and kernel copies go. Captured graphs stay: each
 * names buffers of one device, which are lost with it, so none can match a
 * launch that could run again; host registrations survive recover_device. */
static void recovery_device_start(tsrd_daemon *d, int device)
{
    recovery_run *run = &d->recovery->dev[device];
    run->d = d;
    run->device = device;
    run->n_kernels = 0;
    run->kernels_failed = 0;
    for (tsrd_session *s = d->sessions; s != NULL; s = s->next) {
        tsrd_rings_stop_device(d, s, device, TSR_DEVICE_LOST,
                               "the device was recovered after a fault; open the ring again");
        if (s->streams[device] != NULL) {
            d->bops->stream_destroy(d->backend, s->streams[device]);
            s->streams[device] = NULL;
        }
    }
    recovery_scope sc = {.d = d, .device = device, .run = run};
    tsrd_handles_each(&d->handles, TSRD_HANDLE_BUFFER, recovery_forget_device_buffer, &sc);
    for (tsrd_kernel *k = d->kernels; k != NULL; k = k->live_next)
        recovery_device_kernel(k, &sc);
    recovery_queue(d, run, recovery_device_rebuilt);
}

static bool recovery_per_device(const tsrd_daemon *d)
{
    return d->bops->device_lost != NULL && d->bops->recover_device != NULL && d->n_devices > 1;
}

static void recovery_poll_devices(tsrd_daemon *d)
{
    /* Jobs bound to no device, and runs on other devices (which compile on
     * device 0 first), may use device 0's kernel objects: its rebuild waits
     * for them too. */
    int unbound = d->work_running;
    for (int i = 0; i < d->n_devices; i++)
        unbound -= d->device_running[i];
    /* Every device's flag first: a fault that took them all (an isolated
     * backend's worker died) must stop them all before the first rebuild,
     * which replaces the worker, clears the flags. */
    bool lost[TSRD_MAX_DEVICES];
    for (int i = 0; i < d->n_devices; i++)
        lost[i] = d->devrec[i].state == TSRD_DEVICE_SERVING && d->bops->device_lost(d->backend, i);
    for (int i = 0; i < d->n_devices; i++) {
        tsrd_devrec *dr = &d->devrec[i];
        int running = d->device_running[i] + (i == 0 ? unbound + d->device0_borrowers : 0);
        unsigned step = tsrd_devrec_poll(dr, lost[i], running, uv_hrtime());
        if (step & TSRD_DEVREC_FAULT) {
            d->device_faults++;
            tsrd_log_warn(&d->log,
                          "device %d fault: a sticky error poisoned its context; failing its "
                          "work in flight with DEVICE_LOST and rebuilding it while the other "
                          "devices serve",
                          i);
        }
        if (step & TSRD_DEVREC_REBUILD)
            recovery_device_start(d, i);
    }
}

static struct tsrd_recovery *recovery_get(tsrd_daemon *d)
{
    if (d->recovery == NULL) {
        d->recovery = calloc(1, sizeof *d->recovery);
        if (d->recovery == NULL)
            tsrd_log_error(&d->log, "device lost, and no memory to recover it");
    }
    return d->recovery;
}

void tsrd_recovery_poll(tsrd_daemon *d, tsrd_recovery_resume_fn resume)
{
    if (d->bops->lost == NULL || d->bops->recover == NULL)
        return;
    if (recovery_per_device(d)) {
        /* Cheap when nothing is lost: one atomic load per device. */
        bool any = false;
        for (int i = 0; i < d->n_devices && !any; i++)
            any =
                d->devrec[i].state == TSRD_DEVICE_RECOVERING ||
                (d->devrec[i].state == TSRD_DEVICE_SERVING && d->bops->device_lost(d->backend, i));
        if (!any)
            return;
        struct tsrd_recovery *r = recovery_get(d);
        if (r == NULL)
            return;
        r->resume = resume;
        recovery_poll_devices(d);
        return;
    }
    struct tsrd_recovery *r = d->recovery;
    if (!d->recovering) {
        if (r != NULL && r->gave_up)
            return;
        if (!d->bops->lost(d->backend))
            return;
        r = recovery_get(d);
        if (r == NULL)
            return;
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
    if (d->recovery != NULL && d->recovery->gave_up)
        return true;
    /* One device at a time: given up once every device is lost. */
    for (int i = 0; i < d->n_devices; i++)
        if (d->devrec[i].state != TSRD_DEVICE_LOST)
            return false;
    return d->n_devices > 0;
}

void tsrd_recovery_fini(tsrd_daemon *d)
{
    if (d->recovery == NULL)
        return;
    free(d->recovery->node.kernels);
    for (int i = 0; i < TSRD_MAX_DEVICES; i++)
        free(d->recovery->dev[i].kernels);
    free(d->recovery);
    d->recovery = NULL;
}
