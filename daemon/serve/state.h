/*
 * state.h — the daemon's state: the context and the objects it serves from.
 *
 * One tsrd_daemon holds everything tesserad serves from: the configuration, the
 * backend, the kernel cache, the arbiter, the handle table, the sessions and
 * tenants, and the counters. It is passed explicitly; there are no globals.
 *
 * Threading: the daemon belongs to the libuv loop thread. Worker threads (the
 * libuv threadpool) may use only what is thread-safe by its own contract — the
 * backend, the kernel cache, the arbiter, the log and the read-only config —
 * and hand their results back to the loop through uv_queue_work's completion
 * callback. nng's threads never touch the daemon: server.c queues what they
 * receive and wakes the loop with uv_async_send.
 *
 * Lifetime: buffers, kernels and sessions are reference-counted on the loop
 * thread. The handle table holds one reference; every request that uses an
 * object pins it for its duration, so a buffer freed (or a session closed) while
 * a launch still reads it lives until that launch completes.
 */
#ifndef TESSERAD_SERVE_STATE_H
#define TESSERAD_SERVE_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend/backend.h"
#include "config.h"
#include "log.h"
#include "serve/handles.h"
#include "serve/replay.h"
#include "tessera.pb-c.h"
#include "tessera/arbiter.h"
#include "tessera/kcache.h"
#include "tessera/oracle.h"

/* Room a reply's envelope needs beyond its payload bytes. */
#define TSRD_REPLY_OVERHEAD 4096
/* Highest request body number plus one: the handler table's length. */
#define TSRD_BODY_CASES 60

typedef struct tsrd_job tsrd_job;
typedef struct tsrd_handler tsrd_handler;

/* Who a request is attributed to (tenant.c). Without tenants in the config
 * there is one, "default", and every request is its. Tenants live until the
 * daemon closes: a reload updates them in place by name and marks the ones no
 * longer configured as removed, so objects that point at them stay valid. */
typedef struct tsrd_tenant {
    char name[TSRD_TENANT_NAME_MAX];
    tsrd_tenant_config conf; /* identities and quotas, replaced on reload */
    bool removed;            /* gone from the config: attributes nothing */
    uint64_t cache_owner;    /* tsrd_scope_owner_of(name) */
    /* Accounting, checked against conf.quota. */
    uint64_t buffers;
    uint64_t buffer_bytes;
    uint64_t kernels;
    uint64_t in_flight;        /* requests admitted, not yet answered */
    uint64_t compiles;         /* compile-class requests admitted */
    uint64_t reserved_buffers; /* buffer_alloc admitted, not yet registered */
    uint64_t reserved_bytes;
    /* Bytes of its buffers on each device, allocations in progress included
     * (serve/devices.h), checked against device_memory_bytes_per_device. */
    uint64_t device_bytes[TSRD_MAX_DEVICES];
    uint64_t refused_quota; /* RESOURCE_EXHAUSTED answers */
    /* Stored replies for resends, counted over all of the tenant's sessions
     * and bounded by replay_bytes_per_tenant (serve/replay.h). */
    tsrd_replay_pool replay;
    /* Fair service: heavy work waits in its tenant's queue, and the tenants
     * with queued work take turns for the worker pool. */
    tsrd_job *work_head, *work_tail;
    bool work_ready; /* on the daemon's ready ring */
    struct tsrd_tenant *ready_next;
    struct tsrd_tenant *next;
} tsrd_tenant;

/* One connection (one nng pipe). Its buffers and kernels die with it. */
typedef struct tsrd_session {
    uint32_t pipe_id;
    tsrd_tenant *tenant; /* bound by the first attributed request */
    bool peer_known;     /* ipc peers: the credentials below are the pipe's */
    uint32_t peer_uid, peer_gid;
    tsrd_replay replay;
    /* The transport's count (net/server.c): requests received and not yet
     * sent (executing, waiting on a first copy, or a reply in nng), the
     * replies of those handed to nng and not yet taken by the peer, and when
     * the peer last took one (or the first began to wait). */
    int net_held, net_waiting;
    uint64_t net_taken_ns;
    bool net_closing; /* closed by the server for replies it leaves unread */
    int refs;         /* the session table's, plus one per job and per held request */
    bool closed;
    /* The session's streams, one per device: the device work of one device
     * runs one job at a time, in arrival order, so a write, a launch and a
     * read of its buffers are never reordered or overlapped, while the work
     * of another device goes on beside it, never waiting behind it. Each is
     * created by the first stream job on its device, on that job's worker
     * thread. */
    tsrd_stream *streams[TSRD_MAX_DEVICES];
    struct tsrd_shm_map *shm_maps;   /* shm.c: segments mapped for this session */
    struct tsrd_graph_cache *graphs; /* handlers_batch.c: captured launch sequences */
    /* Kernel keys this session holds a handle for: compiling a key again returns
     * the same handle instead of loading (and holding) another copy. */
    struct tsrd_session_kernel *kernels;
    bool stream_busy[TSRD_MAX_DEVICES];
    tsrd_job *stream_head[TSRD_MAX_DEVICES], *stream_tail[TSRD_MAX_DEVICES];
    /* Held by stream jobs (of different devices, on worker threads) around
     * what they share: a shared-memory segment's registration. */
    uv_mutex_t worker_lock;
    /* A request decoding on the worker pool holds back the session's later
     * requests (parked here, in arrival order) until it is decoded and
     * dispatched, so that decoding off the loop never reorders a session's
     * requests (dispatch.c). */
    bool decoding;
    tsrd_job *parked_head, *parked_tail;
    struct tsrd_ring *rings; /* ring.c: the session's submission rings */
    struct tsrd_session *next;
} tsrd_session;

typedef struct tsrd_buffer {
    int refs;
    bool lost; /* its device memory went with a recovery: no longer counted against the tenant */
    tsrd_dbuf *dbuf;
    tsr_dtype dtype;
    int rank;
    int64_t shape[TSR_MAX_RANK];
    uint64_t bytes;
    tsrd_tenant *tenant;
    int device; /* where its memory is */
    /* Counted in its device's load and, when not NULL, in this tenant's
     * bytes on the device (serve/devices.h). */
    bool charged;
    tsrd_tenant *charged_tenant;
} tsrd_buffer;

typedef struct tsrd_kernel {
    int refs;
    tsrd_kobj *kobj;
    tsr_fingerprint key; /* kernel cache key of the loaded binary */
    tsr_region region;   /* validated; the signature launches are checked against */
    /* region's fingerprint: one binary (key) serves every shape of a kernel
     * variant, but a loaded kernel serves its own region only. */
    tsr_fingerprint fingerprint;
    char candidate[TSR_CANDIDATE_NAME_MAX];
    tsrd_tenant *tenant;
    /* How long one launch took when a batch last measured it (issue to
     * synchronize, ns; 0: not yet): batches plan their slices with it. Written
     * and read by the session's stream jobs on worker threads. */
    _Atomic uint64_t launch_ns;
    /* Loaded on other devices than 0 on first use there (serve/devices.h);
     * kobj is device 0's. */
    _Atomic(tsrd_kobj *) on_device[TSRD_MAX_DEVICES];
    /* On d->kernels from registration until its last reference goes: a
     * kernel whose handle was freed may still be pinned by queued work, and
     * a recovery must rebuild its objects too. Loop-owned. */
    struct tsrd_kernel *live_prev, *live_next;
} tsrd_kernel;

/* A launch checked and pinned for later (a batch entry, a ring binding): a
 * kernel with its buffers in signature order; what is pinned is set, the
 * rest NULL. Released with tsrd_bound_launch_release (serve/session.h). */
typedef struct tsrd_bound_launch {
    tsrd_kernel *kernel;
    int n_inputs;
    tsrd_buffer *inputs[TSR_MAX_REGION_INPUTS];
    tsrd_buffer *output;
} tsrd_bound_launch;

/* Fixed latency buckets (metrics.c holds the bounds, 50 us to 60 s) plus the
 * overflow bucket, +Inf. */
#define TSRD_LATENCY_BUCKETS 20

/* One latency histogram: counts per bucket (not cumulative: an observation
 * lands in the first bucket whose bound it does not exceed, or in the last,
 * +Inf), their number and their sum. */
typedef struct tsrd_latency {
    uint64_t buckets[TSRD_LATENCY_BUCKETS + 1];
    uint64_t count;
    uint64_t sum_ns;
} tsrd_latency;

/* Request counters, by body case and status, and request latency (arrival to
 * reply) by body case (the loop's own). */
typedef struct tsrd_metrics {
    uint64_t requests[TSRD_BODY_CASES][TSR_STATUS_COUNT];
    tsrd_latency latency[TSRD_BODY_CASES];
    uint64_t replays;          /* answered from the request-id memory */
    uint64_t decoded_off_loop; /* request bodies checked and decoded on the worker pool */
    uint64_t inline_jobs;      /* stream jobs executed on the loop, without the worker pool */
    uint64_t launches_fused;   /* launches and their synchronize made in one backend call */
    uint64_t job_yields;       /* long jobs that gave their worker to other work midway */
    /* The transport (net/server.c): connections open, those closed at once
     * past max_connections, those closed for replies left unread, requests
     * refused past max_requests_per_connection, and the nng contexts open. */
    uint64_t connections;
    uint64_t connections_refused;
    uint64_t connections_closed_unread;
    uint64_t requests_refused_connection;
    uint64_t contexts;
    uint64_t sessions_opened; /* ever */
    uint64_t bytes_in, bytes_out;
} tsrd_metrics;

/* What a device carries (serve/devices.h), on the loop: requests bound to it
 * that are queued or running, and its live buffers (with allocations in
 * progress). */
typedef struct tsrd_device_load {
    uint64_t queued;
    uint64_t bytes;
    uint64_t buffers;
} tsrd_device_load;

/* A device's part in recovery (serve/recovery.h), for backends that recover
 * one device at a time: serving, recovering after a fault of its own, or lost
 * for good (every rebuild failed). Loop-owned. */
typedef enum tsrd_device_state {
    TSRD_DEVICE_SERVING = 0,
    TSRD_DEVICE_RECOVERING = 1,
    TSRD_DEVICE_LOST = 2,
} tsrd_device_state;

typedef struct tsrd_devrec {
    tsrd_device_state state;
    bool rebuilding; /* its rebuild is on a worker */
    uint64_t faults, recoveries;
    uint64_t started_ns; /* the fault noticed */
    uint64_t last_ms;    /* fault noticed -> serving again, last time */
} tsrd_devrec;

typedef struct tsrd_daemon tsrd_daemon;

/* What the self-probe (net/probe.c) last learnt of one listener: a hello sent
 * through it from a thread of its own, answered or not. Loop-owned copy. */
typedef struct tsrd_endpoint_health {
    char url[256];           /* the listen URL probed */
    bool answering;          /* the last probe was answered */
    uint64_t last_answer_ns; /* uv_hrtime of the last answer; 0: never */
    char error[160];         /* why the last probe failed; "" when answering */
} tsrd_endpoint_health;

/* Where replies go: server.c sends them on the nng context the request came in
 * on (origin); tests capture them. Called on the loop thread, exactly once per
 * origin handed to tsrd_dispatch. data is only valid during the call. */
typedef void (*tsrd_reply_fn)(void *sink, void *origin, const uint8_t *data, size_t len);

struct tsrd_daemon {
    tsrd_config config;
    tsrd_log log;
    uv_loop_t *loop;

    const tsrd_backend_ops *bops;
    tsrd_backend *backend;
    int n_devices;
    tsrd_device_info devices[TSRD_MAX_DEVICES];
    tsrd_device_load load[TSRD_MAX_DEVICES];
    char driver_version[64];
    char compiler_version[64];

    tsr_kcache *kcache;
    tsr_oracle_memo *oracle_memo; /* probe inputs kept between sampled checks */
    /* The kernel cache's level on Redis (serve/fleet.h); NULL: none. Its
     * calls are thread-safe. */
    struct tsrd_fleet *fleet;
    tsr_arbiter *arbiter;
    tsrd_handles handles;
    /* Every live kernel, with a handle or only pinned by work (tsrd_kernel's
     * live_next); loop-owned. */
    struct tsrd_kernel *kernels;
    tsrd_tenant default_tenant;
    tsrd_tenant *tenants; /* from the config; NULL: everything is default_tenant */
    /* Fair service (dispatch.c): tenants with queued heavy work, served in
     * turn, and how many jobs the worker pool holds of at most work_slots. */
    tsrd_tenant *ready_head, *ready_tail;
    int work_running, work_slots;
    /* Of work_running, the jobs bound to each device: with several devices
     * each holds at most its share of the slots (dispatch.c). */
    int device_running[TSRD_MAX_DEVICES];
    /* Of those, the jobs bound to another device that may also use device 0
     * (TSRD_COMPILES): device 0's rebuild waits for them. */
    int device0_borrowers;
    /* Health: the backend is rebuilding its device context (recovery.c). While
     * work_paused the dispatch pump hands out no heavy work. */
    bool recovering;
    bool work_paused;
    uint64_t recoveries;       /* completed */
    uint64_t device_faults;    /* sticky faults noticed */
    uint64_t buffers_lost;     /* buffer handles whose memory a fault took */
    uint64_t recovery_last_ms; /* fault noticed -> serving again, last recovery */
    uint64_t recovery_started_ns;
    /* Each device's own recovery, where the backend has recover_device and
     * shows several devices (recovery.c); else the node-wide fields above. */
    tsrd_devrec devrec[TSRD_MAX_DEVICES];
    struct tsrd_recovery *recovery;
    struct tsrd_nvml *nvml; /* the GPU gauges' source (serve/nvml.h); NULL: none */
    uint64_t start_ns;
    tsrd_session *sessions;
    size_t n_sessions;
    /* Submission rings open (serve/ring.c), and the launches of those closed. */
    int rings_open;
    /* Short launches may execute on the loop (serve/dispatch.c): only where
     * kernels run on the host (the cpu backends), whose calls return in about
     * their measured time; a GPU call can hang with the device, and the loop
     * must not wait on that. Set at open, read on the loop. */
    bool inline_launches;
    uint64_t ring_launches_closed;
    uint64_t ring_groups_closed; /* the backend calls those launches went in */
    /* Pipes already gone, so that a message that raced its pipe's removal does
     * not open a session nobody would close. */
    uint32_t removed_pipes[64];
    unsigned removed_next;

    tsrd_metrics metrics;
    /* The handler of each request body case, NULL for none: the table in
     * handlers/, handed in by tsrd_daemon_init so that the request path names
     * no handler. */
    const tsrd_handler *const *handlers; /* TSRD_BODY_CASES rows */
    tsrd_reply_fn reply_fn;
    void *reply_sink;

    /* The listeners' self-probes (net/probe.c), one per listen URL; 0 until
     * the first round. */
    tsrd_endpoint_health endpoints[TSRD_MAX_LISTEN];
    int n_endpoints;

    int inflight; /* jobs not yet answered */
    bool draining;
    void (*idle_fn)(tsrd_daemon *d); /* called when draining and inflight hits 0 */
};

/* What the health request, /readyz and their kin report; the values are the
 * protocol's HealthState numbers. Draining wins over recovering. Loop thread. */
typedef enum tsrd_health {
    TSRD_HEALTH_READY = 1,
    TSRD_HEALTH_RECOVERING = 2,
    TSRD_HEALTH_DRAINING = 3,
} tsrd_health;

/* Whether some device serves: the node is ready while one does, the others
 * recovering or lost. */
static inline bool tsrd_daemon_serves(const tsrd_daemon *d)
{
    if (d->recovering)
        return false;
    for (int i = 0; i < d->n_devices; i++)
        if (d->devrec[i].state == TSRD_DEVICE_SERVING)
            return true;
    return d->n_devices == 0;
}

static inline tsrd_health tsrd_daemon_health(const tsrd_daemon *d)
{
    return d->draining              ? TSRD_HEALTH_DRAINING
           : !tsrd_daemon_serves(d) ? TSRD_HEALTH_RECOVERING
                                    : TSRD_HEALTH_READY;
}

/* A device's state as health shows it: recovering too while the whole node
 * recovers. */
static inline tsrd_device_state tsrd_device_state_of(const tsrd_daemon *d, int device)
{
    if (d->devrec[device].state == TSRD_DEVICE_SERVING && d->recovering)
        return TSRD_DEVICE_RECOVERING;
    return d->devrec[device].state;
}

#endif
