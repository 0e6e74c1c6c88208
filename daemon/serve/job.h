/*
 * job.h — one request on its way through the daemon: the job, the handler
 * steps that serve it, and the memory that lives as long as it does.
 *
 * A handler has up to three steps:
 *
 *   prepare   on the loop: resolve handles, pin objects, check what the loop owns
 *   execute   on a worker thread when the row is TSRD_HEAVY, else on the loop
 *   complete  on the loop: register new handles, unpin; runs whatever happened
 *
 * Rows flagged TSRD_STREAM also run in order on the session's stream. An
 * execute step may yield (job->again): it is queued again behind the other
 * tenants' work and runs once more, holding the session's stream meanwhile.
 *
 * A stream row's prepare may also mark the job quick (job->quick): its execute
 * is known to return within microseconds (a launch of a kernel measured short
 * and loaded on its device). The dispatcher then runs execute on the loop
 * itself, without the two thread hops of the worker pool, when the session's
 * stream is idle and no other device work is running (serve/dispatch.h).
 *
 * Threading: a job is touched by one thread at a time: the loop, or the worker
 * running its execute step. Memory: a reply is built in the job; its extra
 * allocations come from the job's arena and go when the job does.
 */
#ifndef TESSERAD_SERVE_JOB_H
#define TESSERAD_SERVE_JOB_H

#include "serve/state.h"

enum tsrd_handler_flags {
    TSRD_HEAVY = 1u << 0,  /* execute runs on the worker pool */
    TSRD_STREAM = 1u << 1, /* ... in order on the session's stream */
    /* execute may compile and check its region on device 0 before its own
     * device's work (run): it waits while device 0 recovers, and device 0's
     * rebuild waits for it, whatever device the job is bound to. */
    TSRD_COMPILES = 1u << 2,
};

typedef struct tsrd_handler {
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
    /* Where a heavy job's time went, for the request's debug log line: first
     * handed to the pool; then, for its last slice (a job that yields runs in
     * several), handed to the pool, its execute begun and ended (worker
     * thread), back on the loop; 0 while not reached. */
    uint64_t first_queued_ns, queued_ns, exec_ns, exec_end_ns, after_ns;
    unsigned slices;
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
        Tessera__V1__RingOpenReply ring_open;
        Tessera__V1__RingCloseReply ring_close;
    } body;
    /* The tenant the request is attributed to and what it holds of the
     * tenant's quotas until it is answered (dispatch.c). */
    tsrd_tenant *tenant;
    /* Health, which is not attributed: its caller may see what an admin
     * does (tsrd_tenant_caller_sees_all). */
    bool sees_all;
    bool holds_compile;
    bool holds_buffer;
    uint64_t holds_bytes;
    /* The device its device work runs on, once prepare bound it
     * (tsrd_job_set_device); else device 0. */
    bool on_device;
    int device;
    tsrd_job *work_next; /* in the tenant's work queue */
    tsrd_arena_block *arena;
    void *state; /* the handler's own, released by its complete step */
    /* Set by a TSRD_HEAVY execute that stopped between steps to let other
     * tenants' work run (a long batch): the job goes to the back of its
     * tenant's queue and execute runs again, on the same stream. */
    bool again;
    /* Set by prepare: execute returns within microseconds, so the loop may
     * run it (serve/dispatch.h). */
    bool quick;
    /* Executed on the loop in the pool's place (serve/dispatch.h). */
    bool ran_inline;
    /* A launch request's kernel and buffers, pinned by its prepare step and
     * released by the dispatcher once the reply has gone. */
    tsrd_bound_launch bound;
    /* Launches made with their synchronize in one backend call, counted into
     * the metrics when the job ends. */
    uint32_t launches_fused;
    /* After execute: how long the reply waits before it goes (a loop timer;
     * the worker is free meanwhile), so that it takes as long as the work it
     * stands for would have (serve/scope.h). */
    double hold_ms;
    uv_work_t work;
    tsrd_job *stream_next;
    /* The request's bytes until it is decoded: released (raw_release, when
     * set, else they were only borrowed) as soon as the decode is done. */
    const uint8_t *raw;
    size_t raw_len;
    void (*raw_release)(void *owner);
    void *raw_owner;
    tsrd_job *parked_next; /* in the session's parked requests */
};

/* Zeroed memory that lives as long as the job; NULL when out of memory. */
void *tsrd_job_alloc(tsrd_job *job, size_t size);
char *tsrd_job_strdup(tsrd_job *job, const char *s);
/* Frees the job, its arena, its request and the request's bytes if it still holds them. */
void tsrd_job_free(tsrd_job *job);

/* Drops the job's count from its device's queue depth (dispatch, at the end). */
static inline void tsrd_job_release_device(tsrd_job *job)
{
    if (!job->on_device)
        return;
    job->d->load[job->device].queued--;
    job->on_device = false;
}

/* Binds job's device work to device (its stream, its place in the device's
 * queue depth until it is answered). Loop thread, prepare step. */
static inline void tsrd_job_set_device(tsrd_job *job, int device)
{
    tsrd_job_release_device(job);
    job->device = device;
    job->on_device = true;
    job->d->load[device].queued++;
}

/* Makes the session's stream on the job's device (tsrd_job_stream). */
tsr_status tsrd_job_stream_make(tsrd_job *job, tsrd_stream **out);

/* The session's stream on the job's device, created on first use (stream jobs
 * only, worker thread; or the loop for a quick job, whose stream is made). */
static inline tsr_status tsrd_job_stream(tsrd_job *job, tsrd_stream **out)
{
    tsrd_stream *s = job->session->streams[job->on_device ? job->device : 0];
    if (s == NULL)
        return tsrd_job_stream_make(job, out);
    *out = s;
    return TSR_OK;
}

/* The largest payload a reply may carry: the message limit less the envelope. */
uint64_t tsrd_reply_payload_max(const tsrd_daemon *d);

/* The name of a request body case as the protocol spells it ("hello",
 * "buffer_alloc", ...), or "unknown"; tsrd_body_known says whether the case is
 * one of the protocol's request bodies. */
const char *tsrd_body_name(int body_case);
bool tsrd_body_known(int body_case);

#endif
