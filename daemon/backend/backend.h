/*
 * backend.h — the interface between tesserad's serving code and a device.
 *
 * A backend is one const struct of function pointers (tsrd_backend_ops), one per
 * module: cpu.c runs kernels with the reference executor, cuda/cuda.c drives the
 * CUDA driver API and NVRTC, isolated/isolated.c runs either in a device worker
 * process. The serving code never knows which one it holds; registry.c lists
 * the compiled-in ones and picks one by name. Nothing here or below includes
 * the serving code (serve/, handlers/, net/): `make check-layers` says so.
 *
 * The life of a kernel: compile (region + candidate + target arch -> a binary
 * blob, which the kernel cache stores under the kernel key: one per kernel
 * variant, shared by every shape of it) -> load (blob ->
 * kernel object on a device) -> launch (kernel + input buffers + output buffer on
 * a stream) -> synchronize (wait for the stream) -> unload.
 *
 * Errors: every function that can fail returns a tsr_status and fills err; the
 * backend's own error name goes into the message ("cuMemAlloc:
 * CUDA_ERROR_OUT_OF_MEMORY"). A backend whose device died reports
 * TSR_DEVICE_LOST.
 *
 * Faults: a sticky device error (an illegal address in one launch) poisons the
 * whole device context. The backend then reports lost() and answers every call
 * with TSR_DEVICE_LOST until recover() has rebuilt the context. Objects made
 * before a recovery (buffers, kernels, streams, graphs, host registrations)
 * belong to the old context: their device memory is gone, using one answers
 * TSR_DEVICE_LOST saying so, and freeing one releases only its host side. A
 * backend that can tell which device faulted and reset it alone offers
 * device_lost and recover_device: the other devices then keep serving.
 *
 * Threading: open and close are called on the loop thread while nothing else
 * runs. Every other function may be called from any worker thread, concurrently,
 * except that the calls on one stream are serialized by the caller (one session's
 * stream operations never overlap). Buffer writes and reads are synchronous on
 * the caller's thread. Blocking: compile, launch, synchronize and buffer copies
 * block; none is called on the loop thread but the launch and synchronize (or
 * launch_many_sync) of a kernel measured short, while no other device work runs
 * (serve/dispatch.c).
 */
#ifndef TESSERAD_BACKEND_BACKEND_H
#define TESSERAD_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/arbiter.h"
#include "tessera/region.h"
#include "tessera/status.h"

typedef struct tsrd_backend tsrd_backend; /* a backend's open state */
typedef struct tsrd_dbuf tsrd_dbuf;       /* device memory */
typedef struct tsrd_kobj tsrd_kobj;       /* a loaded kernel */
typedef struct tsrd_stream tsrd_stream;   /* an ordered queue of device work */
typedef struct tsrd_graph tsrd_graph;     /* a captured sequence of launches */
typedef struct tsrd_fence tsrd_fence;     /* a point in a stream's work */

typedef struct tsrd_device_info {
    int index;
    char name[128];
    char arch[32]; /* "sm_90a"; "cpu" */
    uint64_t memory_bytes;
    int multiprocessors; /* SMs; online CPUs for the CPU backend */
} tsrd_device_info;

typedef struct tsrd_backend_options {
    int threads;      /* host threads a CPU launch may use; <= 0 = online CPUs */
    bool test_faults; /* register the "test_fault" candidate (forced only): its
                       * launch faults the device, for recovery tests */
    /* The isolated CUDA backend's worker program (tesserad itself); NULL:
     * /proc/self/exe. */
    const char *worker_exe;
    /* Isolated backends: a call to the worker that takes longer stops the
     * worker (the device is then lost and recovered). 0 = wait forever. */
    uint64_t kernel_timeout_ms;
    /* The CPU backend: how many devices it shows (each its own memory and
     * accounting, so that placement can be tested without GPUs); <= 1: one. */
    int cpu_devices;
    /* The CPU backend: the memory of each device; 0: the host's. */
    uint64_t cpu_device_memory_bytes;
} tsrd_backend_options;

/* The most devices a backend shows. */
#define TSRD_BACKEND_MAX_DEVICES 16

/* The CPU backend's plan format (its codegen version): bump when the meaning
 * of a stored plan changes. Shared by "cpu" and "cpu-isolated". */
#define TSRD_CPU_PLAN_VERSION 1

/* The candidate registered with test_faults: forced, its launch faults the
 * device like an out-of-bounds store would. */
#define TSRD_TEST_FAULT_CANDIDATE "test_fault"
/* Also with test_faults, on the CPU backend: its launch faults the device as
 * test_fault does, and the device then never comes back (every recover and
 * recover_device of it fails), like a GPU fallen off the bus. */
#define TSRD_TEST_FAULT_FOR_GOOD_CANDIDATE "test_fault_for_good"
/* Also with test_faults, on the CPU backend: its launch never returns, like a
 * kernel stuck in a loop (use it with cpu-isolated and kernel_timeout_ms). */
#define TSRD_TEST_HANG_CANDIDATE "test_hang"
/* Also with test_faults, on the CPU backend: its launch computes the reference
 * and then moves one output far off, the first element of the last tile (of
 * 128) of the output's last row: an edge tile's corner, which sampled
 * verification must catch. */
#define TSRD_TEST_WRONG_ELEMENT_CANDIDATE "test_wrong_element"
/* Also with test_faults, on the CPU backend: right for outputs of at most 64
 * rows (the output's last dimension is a row), wrong past that as
 * test_wrong_element is: a kernel variant that passes its complete
 * verification at a small shape and breaks at a larger one, which the
 * sampled check of the new shape must catch. */
#define TSRD_TEST_WRONG_PAST_64_ROWS_CANDIDATE "test_wrong_past_64_rows"

/* One launch of a sequence (launch_many). */
typedef struct tsrd_launch_desc {
    tsrd_kobj *kernel;
    tsrd_dbuf *const *inputs; /* signature order */
    int n_inputs;
    tsrd_dbuf *output;
} tsrd_launch_desc;

/* Registered host memory (a mapped shared-memory segment): copies to and from
 * it need no staging. */
typedef struct tsrd_backend_hostmem_ops {
    /* Registers len bytes of host memory (a mapped shared-memory segment) so
     * that copies to and from it need no staging: CUDA pins it with
     * cuMemHostRegister; the CPU backend has nothing to do. *token goes back to
     * host_unregister. fd, when not -1, is a descriptor of the memory object
     * that host maps from its offset 0 (the segment): a backend whose device
     * lives in another process maps the object there through it. The
     * descriptor stays the caller's. Worker thread; may take milliseconds per
     * GiB. */
    tsr_status (*host_register)(tsrd_backend *b, void *host, uint64_t len, int fd, void **token,
                                tsr_error *err);
    void (*host_unregister)(tsrd_backend *b, void *token);
    /* buffer_write (to_device) or buffer_read from host memory that lies inside
     * a host_register'ed range: one direct copy at DMA speed. Guarded as
     * buffer_write is; a backend whose device lives in another process guards
     * its copy there and answers TSR_BUFFER_MISMATCH for a shrunk range. */
    tsr_status (*buffer_copy_registered)(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset,
                                         void *host, uint64_t len, int to_device, tsr_error *err);
} tsrd_backend_hostmem_ops;

/* Device memory of another local process, used in place. */
typedef struct tsrd_backend_ipc_ops {
    /* Opens another local process's device allocation from its CUDA IPC handle
     * (handle_len bytes, 64 for CUDA) as a buffer of bytes bytes starting offset
     * bytes into it; launches use it in place and buffer_free closes it (the
     * exporter still owns the memory). One allocation imported several times
     * is opened once and closed with its last buffer. */
    tsr_status (*buffer_import)(tsrd_backend *b, int device, const uint8_t *handle,
                                size_t handle_len, uint64_t offset, uint64_t bytes, tsrd_dbuf **out,
                                tsr_error *err);
} tsrd_backend_ipc_ops;

/* Captured launch sequences, replayed as one submission. */
typedef struct tsrd_backend_graph_ops {
    /* Graph capture: graph_begin starts capturing s, the launches that follow
     * are recorded instead of run, graph_end makes them one replayable graph
     * (*out) and ends the capture whatever happened. graph_launch replays it on
     * s (synchronize waits for it). TSR_UNSUPPORTED from graph_begin where this
     * stream cannot be captured: callers then launch one by one. */
    tsr_status (*graph_begin)(tsrd_backend *b, tsrd_stream *s, tsr_error *err);
    tsr_status (*graph_end)(tsrd_backend *b, tsrd_stream *s, tsrd_graph **out, tsr_error *err);
    tsr_status (*graph_launch)(tsrd_backend *b, tsrd_graph *g, tsrd_stream *s, tsr_error *err);
    void (*graph_destroy)(tsrd_backend *b, tsrd_graph *g);
} tsrd_backend_graph_ops;

/* Submission rings served where the device is (ring_loop.h). A backend whose
 * device lives in the daemon's process needs none of this: the daemon runs the
 * ring's loop itself. One whose device lives elsewhere runs it there. */
typedef struct tsrd_bring tsrd_bring;
/* The device work a batch's chunk or a ring's group queues at once, as last
 * measured: half of a batch's 10 ms slice, so that a chunk that runs a little
 * over its estimate still ends within the slice, and the stream never holds
 * much more than that ahead of other tenants' work. */
#define TSRD_DEVICE_CHUNK_NS ((uint64_t)5000000u)

/* What a submission ring's loop did: the slots it served, and the backend
 * calls (groups, each one launch_many and one synchronize) it served them in. */
typedef struct tsrd_ring_served {
    uint64_t slots;
    uint64_t groups;
} tsrd_ring_served;

typedef struct tsrd_backend_ring_ops {
    /* Serves the ring in the segment fd (slots slots, bytes long, the header
     * checked, from submission `first` on) over the n launches, whose kernels
     * and buffers the caller keeps until ring_stop. A launch that runs past
     * timeout_ms (0: none) is treated as a hung device. */
    tsr_status (*ring_start)(tsrd_backend *b, int fd, uint64_t bytes, uint32_t slots,
                             uint32_t first, const tsrd_launch_desc *launches, int n,
                             uint64_t timeout_ms, tsrd_bring **out, tsr_error *err);
    /* Stops the ring (its launch in progress finishes first) and frees it;
     * *served gets the slots it served and the groups it served them in (0
     * when the device is gone). */
    void (*ring_stop)(tsrd_backend *b, tsrd_bring *r, tsrd_ring_served *served);
} tsrd_backend_ring_ops;

/* Points in a stream's work that can be waited for while later work runs:
 * a submission ring's loop queues its next group of launches before it waits
 * for the last, so that the device does not idle between groups. */
typedef struct tsrd_backend_fence_ops {
    /* Marks the work queued on s so far; *out is waited for with fence_wait.
     * On failure *out is NULL and nothing marks the work: the caller waits for
     * it another way (synchronize). */
    tsr_status (*fence_record)(tsrd_backend *b, tsrd_stream *s, tsrd_fence **out, tsr_error *err);
    /* Blocks until the device has done the work before f, then frees f
     * (whatever the outcome). A sticky fault marks the backend lost, as
     * synchronize does. */
    tsr_status (*fence_wait)(tsrd_backend *b, tsrd_fence *f, tsr_error *err);
} tsrd_backend_fence_ops;

/* The sampled check's probe inputs made where the buffers are, so that the
 * host makes only the few input elements its reference reads (oracle.h,
 * tsr_candidate_run_keyed_fn). */
typedef struct tsrd_backend_probe_ops {
    /* Fills elements 0 .. elements of buf (of dtype; the caller has checked
     * the size) with the sampled probe values of key, bit for bit as
     * tsr_oracle_sampled_fill writes them. Synchronous and ordered as
     * buffer_write is. */
    tsr_status (*buffer_fill_probe)(tsrd_backend *b, tsrd_dbuf *buf, tsr_dtype dtype,
                                    uint64_t elements, uint64_t key, tsr_error *err);
    /* Sets bytes 0 .. bytes of buf to 0xff, a NaN in every storage dtype.
     * Synchronous and ordered as buffer_write is. */
    tsr_status (*buffer_fill_ones)(tsrd_backend *b, tsrd_dbuf *buf, uint64_t bytes, tsr_error *err);
    /* Copies the elements at positions index[0..count) of buf (elements of
     * size 2 or 4 bytes) into out, dense: only the sampled outputs travel.
     * TSR_BUFFER_MISMATCH for a position past the buffer, TSR_INVALID_ARGUMENT
     * for another size. Synchronous and ordered as buffer_read is. */
    tsr_status (*buffer_gather)(tsrd_backend *b, tsrd_dbuf *buf, uint32_t size,
                                const uint64_t *index, size_t count, void *out, tsr_error *err);
} tsrd_backend_probe_ops;

/* Every member of the core is set but launch_many_sync, device_lost and
 * recover_device. The six optional groups are NULL where
 * the backend has no such capability, and then callers do without: copies are
 * staged through buffer_write and buffer_read, buffer_import is refused with
 * TSR_UNSUPPORTED, batches are launched one by one, rings are served by the
 * daemon itself, sampled probes are made on the host and copied, a ring's
 * loop synchronizes each group before it queues the next. */
typedef struct tsrd_backend_ops {
    const char *name;         /* "cpu", "cuda" */
    uint32_t codegen_version; /* goes into every kernel key this backend compiles */

    /* Opens the backend. TSR_UNAVAILABLE when its driver cannot be loaded or has no
     * device (so `--backend auto` can try the next one), with the reason. */
    tsr_status (*open)(const tsrd_backend_options *opts, tsrd_backend **out, tsr_error *err);
    /* Releases everything, including buffers and kernels still alive. */
    void (*close)(tsrd_backend *b);

    /* ---- devices and versions ---- */
    int (*device_count)(tsrd_backend *b);
    tsr_status (*device_info)(tsrd_backend *b, int index, tsrd_device_info *out, tsr_error *err);
    /* Driver and compiler versions as text ("13.0"); "" when not applicable. */
    const char *(*driver_version)(tsrd_backend *b);
    const char *(*compiler_version)(tsrd_backend *b);
    /* Nonzero when the backend compiles and runs for arch ("cpu", "sm_90a"). */
    int (*serves_arch)(tsrd_backend *b, const char *arch);

    /* Registers this backend's candidates (with their `applies` predicates and
     * impl pointers) in the arbiter. */
    tsr_status (*register_candidates)(tsrd_backend *b, tsr_arbiter *arbiter, tsr_error *err);

    /* ---- memory ---- */
    tsr_status (*buffer_alloc)(tsrd_backend *b, int device, uint64_t bytes, tsrd_dbuf **out,
                               tsr_error *err);
    void (*buffer_free)(tsrd_backend *b, tsrd_dbuf *buf);
    /* Host <-> device copies of len bytes at a byte offset; the caller has checked
     * the bounds. Synchronous. The host side may be a client's shared memory,
     * which faults if the client shrinks it: the caller then runs the copy in a
     * guard (guard.h) that unwinds at the fault, so a backend touches the host
     * bytes holding no lock. */
    tsr_status (*buffer_write)(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, const void *data,
                               uint64_t len, tsr_error *err);
    tsr_status (*buffer_read)(tsrd_backend *b, tsrd_dbuf *buf, uint64_t offset, void *data,
                              uint64_t len, tsr_error *err);

    /* ---- kernels ---- */
    /* Produces the binary of candidate c for region r on arch. *bin is malloc'd
     * (the kernel cache takes it). TSR_COMPILE_FAILED with the compiler log. */
    tsr_status (*compile)(tsrd_backend *b, const tsr_region *r, const tsr_candidate *c,
                          const char *arch, uint8_t **bin, size_t *len, tsr_error *err);
    /* Makes a launchable kernel of a binary on a device, for region r. The
     * blob is not kept. A binary is trusted only for the kernel variant it was
     * made for (candidate c's variant, tsr_candidate_variant): one made for
     * another variant than r's is refused TSR_CORRUPT, never run; one of r's
     * variant made at another shape runs at r's shape (the grid and the free
     * dimensions are computed for r, never taken from the blob). */
    tsr_status (*load)(tsrd_backend *b, int device, const tsr_region *r, const tsr_candidate *c,
                       const uint8_t *bin, size_t len, tsrd_kobj **out, tsr_error *err);
    void (*unload)(tsrd_backend *b, tsrd_kobj *k);

    /* ---- execution ---- */
    tsr_status (*stream_create)(tsrd_backend *b, int device, tsrd_stream **out, tsr_error *err);
    void (*stream_destroy)(tsrd_backend *b, tsrd_stream *s);
    /* Enqueues k on s. inputs follow tsr_region_signature order and their sizes
     * have been checked by the caller. */
    tsr_status (*launch)(tsrd_backend *b, tsrd_kobj *k, tsrd_stream *s, tsrd_dbuf *const *inputs,
                         int n_inputs, tsrd_dbuf *output, tsr_error *err);
    /* Enqueues n launches on s in order, stopping at the first that fails;
     * *launched gets how many were enqueued. A backend whose every call costs a
     * round trip (the isolated one) pays one for the whole sequence; the others
     * use tsrd_launch_each. */
    tsr_status (*launch_many)(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                              tsrd_stream *s, size_t *launched, tsr_error *err);
    /* Waits for everything enqueued on s; *device_ms gets the device time of the
     * work since the last synchronize when the backend measures it, else 0. */
    tsr_status (*synchronize)(tsrd_backend *b, tsrd_stream *s, double *device_ms, tsr_error *err);
    /* Optional, NULL where the backend has none (callers then call launch_many
     * and synchronize: tsrd_launch_many_wait, tsrd_launch_wait): launch_many,
     * then, when every launch went, synchronize s, in one call, for a backend
     * whose every call costs a round trip (the isolated ones pay one for a
     * launch request's launch and its synchronize, or a batch's chunk and
     * its). A sticky fault in either part marks the backend lost as the two
     * calls would. The outcome is exactly the two calls':
     * when a launch fails, its error with *launched counting those before it,
     * and s is not synchronized; else the synchronize's, with *device_ms
     * (when not NULL) as synchronize gives it. A call that gets no answer (a
     * device worker that timed out or died) counts every launch as gone and
     * answers as the synchronize would have. */
    tsr_status (*launch_many_sync)(tsrd_backend *b, const tsrd_launch_desc *launches, size_t n,
                                   tsrd_stream *s, size_t *launched, double *device_ms,
                                   tsr_error *err);

    /* ---- faults ---- */
    /* Nonzero once a sticky error has poisoned a device context; stays so until
     * recover succeeds. Any thread, lock-free. */
    int (*lost)(tsrd_backend *b);
    /* Rebuilds the context of every lost device: the old context and everything
     * in it are destroyed, a fresh one is made, and the backend's own modules
     * come back. Kernels the caller holds are not reloaded here (the caller
     * loads them again from their binaries). The caller guarantees that only
     * release calls (buffer_free, unload, stream_destroy, graph_destroy,
     * host_unregister) may run meanwhile; those wait for the reset. Worker
     * thread; takes a few hundred milliseconds on a GPU. TSR_DEVICE_LOST when
     * the device cannot be brought back. */
    tsr_status (*recover)(tsrd_backend *b, tsr_error *err);
    /* Optional pair, both NULL where a fault is node-wide (the daemon then
     * stops every device and calls recover). device_lost: nonzero once a
     * sticky error has poisoned that device's context; any thread,
     * lock-free. recover_device: rebuilds that one device's context as
     * recover does, while calls on the other devices go on concurrently; the
     * caller guarantees that nothing but release calls touches this device
     * meanwhile. Host registrations (hostmem) stay valid across it. */
    int (*device_lost)(tsrd_backend *b, int device);
    tsr_status (*recover_device)(tsrd_backend *b, int device, tsr_error *err);

    /* ---- optional capabilities: NULL where the backend has none ---- */
    const tsrd_backend_hostmem_ops *hostmem;
    const tsrd_backend_ipc_ops *ipc;
    const tsrd_backend_graph_ops *graph;
    const tsrd_backend_ring_ops *ring;
    const tsrd_backend_probe_ops *probe;
    const tsrd_backend_fence_ops *fence;
} tsrd_backend_ops;

/* launch_many for a backend whose launches cost no round trip: one launch
 * after another through launch, stopping at the first that fails. */
static inline tsr_status
tsrd_launch_each(tsr_status (*launch)(tsrd_backend *, tsrd_kobj *, tsrd_stream *,
                                      tsrd_dbuf *const *, int, tsrd_dbuf *, tsr_error *),
                 tsrd_backend *b, const tsrd_launch_desc *launches, size_t n, tsrd_stream *s,
                 size_t *launched, tsr_error *err)
{
    *launched = 0;
    for (size_t i = 0; i < n; i++) {
        tsr_status st = launch(b, launches[i].kernel, s, launches[i].inputs, launches[i].n_inputs,
                               launches[i].output, err);
        if (st != TSR_OK)
            return st;
        *launched = i + 1;
    }
    return TSR_OK;
}

/* Launches and their synchronize: through launch_many_sync where the backend
 * has it, else the two calls, the synchronize only after every launch went.
 * *synced says whether s was synchronized (then the status is the
 * synchronize's; else it is the failed launch's, *launched counting those
 * before it). Blocking, worker thread. */
static inline tsr_status tsrd_launch_many_wait(const tsrd_backend_ops *ops, tsrd_backend *b,
                                               const tsrd_launch_desc *launches, size_t n,
                                               tsrd_stream *s, size_t *launched, bool *synced,
                                               double *device_ms, tsr_error *err)
{
    if (ops->launch_many_sync != NULL) {
        tsr_status st = ops->launch_many_sync(b, launches, n, s, launched, device_ms, err);
        *synced = *launched == n;
        return st;
    }
    if (device_ms != NULL)
        *device_ms = 0;
    *synced = false;
    tsr_status st = ops->launch_many(b, launches, n, s, launched, err);
    if (st != TSR_OK)
        return st;
    *synced = true;
    return ops->synchronize(b, s, device_ms, err);
}

/* One launch and its synchronize, as tsrd_launch_many_wait does them: when
 * the launch fails, its error, and s is not synchronized. Blocking, worker
 * thread (or the loop for a launch measured short). */
static inline tsr_status tsrd_launch_wait(const tsrd_backend_ops *ops, tsrd_backend *b,
                                          tsrd_kobj *k, tsrd_stream *s, tsrd_dbuf *const *inputs,
                                          int n_inputs, tsrd_dbuf *output, double *device_ms,
                                          tsr_error *err)
{
    tsrd_launch_desc one = {.kernel = k, .inputs = inputs, .n_inputs = n_inputs, .output = output};
    size_t launched;
    bool synced;
    return tsrd_launch_many_wait(ops, b, &one, 1, s, &launched, &synced, device_ms, err);
}

#endif
