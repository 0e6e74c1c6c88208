/*
 * daemon.h — the daemon context and the objects it owns.
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
#ifndef TESSERAD_DAEMON_H
#define TESSERAD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend/backend.h"
#include "config.h"
#include "serve/handles.h"
#include "log.h"
#include "serve/replay.h"
#include "tessera.pb-c.h"
#include "tessera/arbiter.h"
#include "tessera/kcache.h"

#define TSRD_MAX_DEVICES 16
/* Room a reply's envelope needs beyond its payload bytes. */
#define TSRD_REPLY_OVERHEAD 4096
/* Highest request body number plus one: the handler table's length. */
#define TSRD_BODY_CASES 60

typedef struct tsrd_job tsrd_job;

/* Who a request is attributed to (tenant.c). Without tenants in the config
 * there is one, "default", and every request is its. Tenants live until the
 * daemon closes: a reload updates them in place by name and marks the ones no
 * longer configured as removed, so objects that point at them stay valid. */
typedef struct tsrd_tenant {
    char name[TSRD_TENANT_NAME_MAX];
    tsrd_tenant_config conf; /* identities and quotas, replaced on reload */
    bool removed;            /* gone from the config: attributes nothing */
    /* Accounting, checked against conf.quota. */
    uint64_t buffers;
    uint64_t buffer_bytes;
    uint64_t kernels;
    uint64_t in_flight;        /* requests admitted, not yet answered */
    uint64_t compiles;         /* compile-class requests admitted */
    uint64_t reserved_buffers; /* buffer_alloc admitted, not yet registered */
    uint64_t reserved_bytes;
    uint64_t refused_quota; /* RESOURCE_EXHAUSTED answers */
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
    int refs; /* the session table's, plus one per job */
    bool closed;
    /* The session's stream: device work runs one job at a time, in arrival
     * order, so a write, a launch and a read are never reordered or overlapped. */
    tsrd_stream *stream;             /* created by the first stream job, on its worker thread */
    struct tsrd_shm_map *shm_maps;   /* shm.c: segments mapped for this session */
    struct tsrd_graph_cache *graphs; /* handlers_batch.c: captured launch sequences */
    /* Kernel keys this session holds a handle for: compiling a key again returns
     * the same handle instead of loading (and holding) another copy. */
    struct tsrd_session_kernel *kernels;
    bool stream_busy;
    tsrd_job *stream_head, *stream_tail;
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
} tsrd_buffer;

typedef struct tsrd_kernel {
    int refs;
    tsrd_kobj *kobj;
    tsr_fingerprint key; /* kernel cache key of the loaded binary */
    tsr_region region;   /* validated; the signature launches are checked against */
    char candidate[TSR_CANDIDATE_NAME_MAX];
    tsrd_tenant *tenant;
} tsrd_kernel;

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
    uint64_t replays;         /* answered from the request-id memory */
    uint64_t sessions_opened; /* ever */
    uint64_t bytes_in, bytes_out;
} tsrd_metrics;

typedef struct tsrd_daemon tsrd_daemon;

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
    char driver_version[64];
    char compiler_version[64];

    tsr_kcache *kcache;
    tsr_arbiter *arbiter;
    tsrd_handles handles;
    tsrd_tenant default_tenant;
    tsrd_tenant *tenants; /* from the config; NULL: everything is default_tenant */
    /* Fair service (dispatch.c): tenants with queued heavy work, served in
     * turn, and how many jobs the worker pool holds of at most work_slots. */
    tsrd_tenant *ready_head, *ready_tail;
    int work_running, work_slots;
    /* Health: the backend is rebuilding its device context (recovery.c). While
     * work_paused the dispatch pump hands out no heavy work. */
    bool recovering;
    bool work_paused;
    uint64_t recoveries;       /* completed */
    uint64_t device_faults;    /* sticky faults noticed */
    uint64_t buffers_lost;     /* buffer handles whose memory a fault took */
    uint64_t recovery_last_ms; /* fault noticed -> serving again, last recovery */
    uint64_t recovery_started_ns;
    struct tsrd_recovery *recovery;
    uint64_t start_ns;
    tsrd_session *sessions;
    size_t n_sessions;
    /* Pipes already gone, so that a message that raced its pipe's removal does
     * not open a session nobody would close. */
    uint32_t removed_pipes[64];
    unsigned removed_next;

    tsrd_metrics metrics;
    tsrd_reply_fn reply_fn;
    void *reply_sink;

    int inflight; /* jobs not yet answered */
    bool draining;
    void (*idle_fn)(tsrd_daemon *d); /* called when draining and inflight hits 0 */
};

/* ---- daemon.c ---- */

/* Opens the backend, kernel cache and arbiter for config (copied; the caller
 * keeps its own). Creates the cache directory. On failure err says what, and
 * nothing is left open. The loop is borrowed. */
tsr_status tsrd_daemon_init(tsrd_daemon *d, const tsrd_config *config, uv_loop_t *loop,
                            tsr_error *err);
/* Closes every session and releases everything. No job may be in flight. */
void tsrd_daemon_fini(tsrd_daemon *d);

/* mkdir -p with mode for the directories it creates. TSR_IO_ERROR naming the
 * path that failed. */
tsr_status tsrd_mkdirs(const char *path, unsigned mode, tsr_error *err);

/* ---- session.c ---- */

/* The session of a pipe, opened on first use. NULL when the pipe is already
 * known to be gone (or out of memory): the request is then not served. */
tsrd_session *tsrd_session_get(tsrd_daemon *d, uint32_t pipe_id);
/* The pipe went away: drop the session's handles and its table reference. */
void tsrd_session_close(tsrd_daemon *d, uint32_t pipe_id);
void tsrd_session_ref(tsrd_session *s);
void tsrd_session_unref(tsrd_daemon *d, tsrd_session *s);
/* Closes every session (shutdown). */
void tsrd_session_close_all(tsrd_daemon *d);

/* Handle lookups for a session: NULL for unknown, freed or foreign handles. */
tsrd_buffer *tsrd_buffer_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
tsrd_kernel *tsrd_kernel_lookup(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
/* Registers a new object (refs 1, held by the table) and returns its handle. */
tsr_status tsrd_buffer_register(tsrd_daemon *d, tsrd_session *s, tsrd_buffer *b, uint64_t *handle,
                                tsr_error *err);
/* The completion of a job that made a buffer (alloc, import): registers b when
 * status is OK, and otherwise, or when registration fails, frees its device
 * memory and b itself. Returns the final status. */
tsr_status tsrd_buffer_adopt(tsrd_daemon *d, tsrd_session *s, tsr_status status, tsrd_buffer *b,
                             uint64_t *handle, tsr_error *err);
tsr_status tsrd_kernel_register(tsrd_daemon *d, tsrd_session *s, tsrd_kernel *k, uint64_t *handle,
                                tsr_error *err);
/* The handle of a kernel with this cache key that the session already holds,
 * or 0. Kernel handles live until kernel_free or the session's close. */
uint64_t tsrd_session_kernel_find(const tsrd_session *s, const tsr_fingerprint *key);
/* Removes a buffer handle; false when it is not the session's. */
bool tsrd_buffer_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
/* Removes a kernel handle and the session's note of its key (a later compile of
 * the key loads a new kernel); false when it is not the session's. A launch
 * that pinned the kernel keeps it loaded until it completes. */
bool tsrd_kernel_release_handle(tsrd_daemon *d, tsrd_session *s, uint64_t handle);
void tsrd_buffer_ref(tsrd_buffer *b);
void tsrd_buffer_unref(tsrd_daemon *d, tsrd_buffer *b);
void tsrd_kernel_ref(tsrd_kernel *k);
void tsrd_kernel_unref(tsrd_daemon *d, tsrd_kernel *k);

/* Records an ipc peer's credentials on its session (server.c, before the
 * session's first dispatch). */
void tsrd_session_set_peer(tsrd_session *s, uint32_t uid, uint32_t gid);

/* ---- recovery.c ---- */

/* After each job: starts a recovery when the backend reports a lost device,
 * and moves a running one on once no job runs. Loop thread. */
void tsrd_recovery_poll(tsrd_daemon *d);
/* Frees the recovery state (daemon fini; no recovery may be running). */
void tsrd_recovery_fini(tsrd_daemon *d);

/* ---- tenant.c ---- */

/* Creates or updates the tenants from config->tenants (start-up and SIGHUP):
 * matched by name, updated in place; those no longer listed are marked removed.
 * Accounting is kept. TSR_NO_MEMORY on failure (then nothing changed). */
tsr_status tsrd_tenants_apply(tsrd_daemon *d, const tsrd_config *config, tsr_error *err);
void tsrd_tenants_fini(tsrd_daemon *d);

/* The tenant a request belongs to: with tenants configured, a non-empty auth
 * must be a configured token; without one the session's ipc peer uid, then gid,
 * must be listed. A session keeps the tenant of its first request; a later one
 * attributed elsewhere is refused. TSR_UNAUTHENTICATED (in err) when no tenant
 * matches. */
tsr_status tsrd_tenant_attribute(tsrd_daemon *d, tsrd_session *s, const char *auth,
                                 tsrd_tenant **out, tsr_error *err);

/* ---- metrics.c ---- */

/* Counts an answer that had no job (body_case 0: an undecodable request). */
void tsrd_metrics_count(tsrd_daemon *d, int body_case, tsr_status status);
/* Counts a job's answer and records its latency, elapsed_ns from arrival. */
void tsrd_metrics_record(tsrd_daemon *d, int body_case, tsr_status status, uint64_t elapsed_ns);
/* Adds one observation to a histogram. */
void tsrd_latency_observe(tsrd_latency *h, uint64_t elapsed_ns);
/* The upper bound of bucket i in nanoseconds (UINT64_MAX for i =
 * TSRD_LATENCY_BUCKETS, the +Inf bucket) and its Prometheus "le" text. */
uint64_t tsrd_latency_bound_ns(int i);
const char *tsrd_latency_bound_text(int i);
/* The Prometheus text (exposition format 0.0.4) of every metric, in *text
 * (malloc'd, NUL-terminated; the caller frees it) of *len bytes. Loop thread.
 * TSR_NO_MEMORY on failure. */
tsr_status tsrd_metrics_render(tsrd_daemon *d, char **text, size_t *len, tsr_error *err);
/* Fills a StatsReply (memory from the job's arena). */
tsr_status tsrd_metrics_fill(tsrd_daemon *d, tsrd_job *job, Tessera__V1__StatsReply *out,
                             bool prometheus);

#endif
