/*
 * dispatch.h — from request bytes to reply bytes.
 *
 * Every request takes the same path: decode (a message that does not decode is
 * answered BAD_MESSAGE with id 0) -> the request-id memory (a resent id is
 * answered from memory, or waits for the first copy) -> one central validation
 * step (body present and known, tenant and its quotas, payload sizes) -> the
 * handler for the
 * body from a table -> encode -> reply. A handler has up to three steps:
 *
 *   prepare   on the loop: resolve handles, pin objects, check what the loop owns
 *   execute   on a worker thread when the row is TSRD_HEAVY, else on the loop
 *   complete  on the loop: register new handles, unpin; runs whatever happened
 *
 * Rows flagged TSRD_STREAM also run in order on the session's stream: one such
 * job per session at a time, so a client's writes, launches and reads neither
 * overlap nor pass each other.
 *
 * Heavy work is queued per tenant and handed to the worker pool (at most
 * work_slots jobs at once) by taking the tenants with queued work in turn, so a
 * tenant that floods the daemon delays only its own requests.
 *
 * Threading: tsrd_dispatch and everything it calls run on the loop thread;
 * execute runs where the row says. Memory: a reply is built in the job, its
 * extra allocations come from the job's arena and go when the job does.
 */
#ifndef TESSERAD_DISPATCH_H
#define TESSERAD_DISPATCH_H

#include "daemon.h"

enum tsrd_handler_flags {
    TSRD_HEAVY = 1u << 0,  /* execute runs on the worker pool */
    TSRD_STREAM = 1u << 1, /* ... in order on the session's stream */
};

typedef struct tsrd_handler {
    const char *name; /* "hello", "buffer_alloc", ...: logs and metrics */
    unsigned flags;
    tsr_status (*prepare)(tsrd_job *job);
    tsr_status (*execute)(tsrd_job *job);
    /* status is the outcome so far; the return value replaces it. */
    tsr_status (*complete)(tsrd_job *job, tsr_status status);
} tsrd_handler;

typedef struct tsrd_arena_block {
    struct tsrd_arena_block *next;
    max_align_t data[];
} tsrd_arena_block;

struct tsrd_job {
    tsrd_daemon *d;
    tsrd_session *session;
    void *origin;
    uint64_t id;
    uint64_t start_ns;
    int body_case;
    const tsrd_handler *handler;
    Tessera__V1__Request *req;
    tsr_error err;
    Tessera__V1__Reply reply;
    union {
        Tessera__V1__HelloReply hello;
        Tessera__V1__CompileReply compile;
        Tessera__V1__LaunchReply launch;
        Tessera__V1__RunReply run;
        Tessera__V1__VerifyReply verify;
        Tessera__V1__CandidatesReply candidates;
        Tessera__V1__BufferAllocReply buffer_alloc;
        Tessera__V1__BufferWriteReply buffer_write;
        Tessera__V1__BufferReadReply buffer_read;
        Tessera__V1__BufferFreeReply buffer_free;
        Tessera__V1__StatsReply stats;
        Tessera__V1__CacheListReply cache_list;
        Tessera__V1__CacheEvictReply cache_evict;
        Tessera__V1__BatchReply batch;
        Tessera__V1__BufferImportReply buffer_import;
        Tessera__V1__HealthReply health;
    } body;
    /* The tenant the request is attributed to and what it holds of the
     * tenant's quotas until it is answered (dispatch.c). */
    tsrd_tenant *tenant;
    bool holds_compile;
    bool holds_buffer;
    uint64_t holds_bytes;
    tsrd_job *work_next; /* in the tenant's work queue */
    tsrd_arena_block *arena;
    void *state; /* the handler's own, released by its complete step */
    uv_work_t work;
    tsrd_job *stream_next;
};

/* Serves one received message. origin is handed back to d->reply_fn exactly
 * once (possibly later, when the work completes). pipe_id names the session. */
void tsrd_dispatch(tsrd_daemon *d, uint32_t pipe_id, void *origin, const uint8_t *data, size_t len);

/* Hands queued heavy work to the worker pool while slots are free (and work is
 * not paused by a device recovery). Loop thread. */
void tsrd_dispatch_pump(tsrd_daemon *d);

/* The handler row of a request body case; NULL for an unknown case. */
const tsrd_handler *tsrd_handler_find(int body_case);
/* The row's name, or "unknown". */
const char *tsrd_body_name(int body_case);

/* Zeroed memory that lives as long as the job; NULL when out of memory. */
void *tsrd_job_alloc(tsrd_job *job, size_t size);
char *tsrd_job_strdup(tsrd_job *job, const char *s);

/* The largest payload a reply may carry: the message limit less the envelope. */
uint64_t tsrd_reply_payload_max(const tsrd_daemon *d);

/* ---- the handlers (handlers_*.c) ---- */
extern const tsrd_handler tsrd_handler_hello, tsrd_handler_stats, tsrd_handler_cache_list,
    tsrd_handler_cache_evict;
extern const tsrd_handler tsrd_handler_buffer_alloc, tsrd_handler_buffer_write,
    tsrd_handler_buffer_read, tsrd_handler_buffer_free;
extern const tsrd_handler tsrd_handler_compile, tsrd_handler_launch, tsrd_handler_run,
    tsrd_handler_verify, tsrd_handler_candidates, tsrd_handler_kernel_free;
/* The data plane (handlers_batch.c). */
extern const tsrd_handler tsrd_handler_batch, tsrd_handler_buffer_import;
extern const tsrd_handler tsrd_handler_health;

/* Looks a buffer handle up for the job's session and pins it (the caller
 * unpins with tsrd_buffer_unref in its complete step). TSR_NOT_FOUND naming
 * field when the handle is unknown, freed or foreign. Loop thread. */
tsr_status tsrd_job_buffer(tsrd_job *job, uint64_t handle, const char *field, tsrd_buffer **out);

/* The proto dtype as a tsr_dtype; TSR_BAD_DTYPE naming field when unset or
 * unknown. */
tsr_status tsrd_dtype_from_pb(tsrd_job *job, int pb_dtype, const char *field, tsr_dtype *out);

/* The session's stream, created on first use (stream jobs only, worker thread). */
tsr_status tsrd_job_stream(tsrd_job *job, tsrd_stream **out);

#endif
