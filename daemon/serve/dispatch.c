/*
 * dispatch.c — envelope, authenticate, decode, validate, dispatch by table,
 * encode, reply.
 *
 * Nothing of a request's body is decoded before its sender is known: the
 * envelope (id, auth, which body) is read with a bounded walk, the request is
 * attributed to a tenant, and only then is the request-id memory asked and the
 * body checked for size and shape and decoded. The central validation step
 * sits here too, so that a handler may assume its body is present, attributed
 * to a tenant and within the payload limits.
 */
#include "serve/dispatch.h"
#include "serve/devices.h"

#include "serve/envelope.h"
#include "serve/fifo.h"
#include "serve/metrics.h"
#include "serve/recovery.h"
#include "serve/session.h"
#include "serve/tenant.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handler of a body case (the table in handlers/), NULL for none. */
static const tsrd_handler *dispatch_handler(const tsrd_daemon *d, int body_case)
{
    if (d->handlers == NULL || body_case <= 0 || body_case >= TSRD_BODY_CASES)
        return NULL;
    return d->handlers[body_case];
}

/* ---- encoding and sending ---- */

/* Encodes the job's reply. Falls back to a body-less NO_MEMORY reply in buf
 * when the full one cannot be had, so the client always hears back. */
static uint8_t *dispatch_encode(tsrd_job *job, tsr_status status, uint8_t *buf, size_t buf_len,
                                size_t *len)
{
    Tessera__V1__Reply *reply = &job->reply;
    reply->id = job->id;
    reply->status = (Tessera__V1__Status)status;
    if (status != TSR_OK) {
        reply->body_case = TESSERA__V1__REPLY__BODY__NOT_SET;
        if (job->err.code != status || job->err.message[0] == '\0')
            tsr_error_set(&job->err, status, "%s", tsr_strerror(status));
        reply->message = job->err.message;
    }
    size_t size = tessera__v1__reply__get_packed_size(reply);
    uint8_t *out = malloc(size ? size : 1);
    if (out != NULL) {
        *len = tessera__v1__reply__pack(reply, out);
        return out;
    }
    Tessera__V1__Reply fallback = TESSERA__V1__REPLY__INIT;
    fallback.id = job->id;
    fallback.status = TESSERA__V1__STATUS__NO_MEMORY;
    fallback.message = "out of memory while encoding the reply";
    if (tessera__v1__reply__get_packed_size(&fallback) > buf_len)
        abort(); /* cannot happen: the fallback is a few dozen bytes */
    *len = tessera__v1__reply__pack(&fallback, buf);
    return buf;
}

/* Microseconds from a to b, two of a job's stamps; 0 when either was not reached. */
static unsigned long long dispatch_span_us(uint64_t a, uint64_t b)
{
    return a != 0 && b >= a ? (unsigned long long)((b - a) / 1000) : 0;
}

static void dispatch_log(tsrd_job *job, tsr_status status)
{
    tsrd_daemon *d = job->d;
    uint64_t now = uv_hrtime();
    unsigned long long us = (now - job->start_ns) / 1000;
    bool daemon_fault = status == TSR_INTERNAL || status == TSR_IO_ERROR ||
                        status == TSR_DEVICE_LOST || status == TSR_CUDA_ERROR ||
                        status == TSR_NO_MEMORY;
    if (daemon_fault)
        tsrd_log_error(&d->log, "request id=%llu session=%u type=%s status=%s us=%llu: %s",
                       (unsigned long long)job->id, job->session ? job->session->pipe_id : 0,
                       tsrd_body_name(job->body_case), tsr_status_name(status), us,
                       job->err.message);
    else if (job->first_queued_ns != 0) {
        /* A job that went to the pool (or ran in its place on the loop): the
         * time before it was first handed over; then, of its last slice,
         * waiting for a worker, executing, coming back to the loop; and after. */
        char slices[48] = "";
        if (job->slices > 1)
            snprintf(slices, sizeof slices, "; the last of %u slices", job->slices);
        tsrd_log_debug(&d->log,
                       "request id=%llu session=%u type=%s status=%s us=%llu (loop %llu, "
                       "pool wait %llu, execute %llu, back %llu, reply %llu%s)",
                       (unsigned long long)job->id, job->session ? job->session->pipe_id : 0,
                       tsrd_body_name(job->body_case), tsr_status_name(status), us,
                       dispatch_span_us(job->start_ns, job->first_queued_ns),
                       dispatch_span_us(job->queued_ns, job->exec_ns),
                       dispatch_span_us(job->exec_ns, job->exec_end_ns),
                       dispatch_span_us(job->exec_end_ns, job->after_ns),
                       dispatch_span_us(job->after_ns, now), slices);
    } else
        tsrd_log_debug(&d->log, "request id=%llu session=%u type=%s status=%s us=%llu",
                       (unsigned long long)job->id, job->session ? job->session->pipe_id : 0,
                       tsrd_body_name(job->body_case), tsr_status_name(status), us);
}

/* Gives back what the job held of its tenant's quotas. By now a buffer_alloc
 * that succeeded has registered its buffer, which the tenant's own counts
 * carry from here on. */
static void dispatch_release(tsrd_job *job)
{
    tsrd_tenant *t = job->tenant;
    if (t == NULL)
        return;
    t->in_flight--;
    if (job->holds_compile)
        t->compiles--;
    if (job->holds_buffer) {
        t->reserved_buffers--;
        t->reserved_bytes -= job->holds_bytes;
    }
    job->tenant = NULL;
}

/* The end of every job that got as far as having one: encode, remember,
 * answer the origin and any waiters, count, release. Returns the job's
 * session with the job's reference, now the caller's to drop. */
static tsrd_session *dispatch_complete_held(tsrd_job *job, tsr_status status)
{
    tsrd_daemon *d = job->d;
    if (job->handler != NULL && job->handler->complete != NULL)
        status = job->handler->complete(job, status);
    uint8_t small[256];
    size_t len = 0;
    uint8_t *bytes = dispatch_encode(job, status, small, sizeof small, &len);
    void **waiters = NULL;
    size_t n_waiters = 0;
    if (job->session != NULL)
        tsrd_replay_finish(&job->session->replay, job->id, bytes, len, &waiters, &n_waiters);
    d->reply_fn(d->reply_sink, job->origin, bytes, len);
    for (size_t i = 0; i < n_waiters; i++)
        d->reply_fn(d->reply_sink, waiters[i], bytes, len);
    d->metrics.bytes_out += len * (1 + n_waiters);
    /* Each waiter held a request of its tenant's in_flight (dispatch_replay). */
    if (n_waiters > 0 && job->session->tenant != NULL)
        job->session->tenant->in_flight -= n_waiters;
    free(waiters);
    if (bytes != small)
        free(bytes);
    tsrd_metrics_record(d, job->body_case, status, uv_hrtime() - job->start_ns);
    dispatch_log(job, status);
    dispatch_release(job);
    tsrd_job_release_device(job);
    d->metrics.launches_fused += job->launches_fused;
    if (job->bound.kernel != NULL)
        tsrd_bound_launch_release(d, &job->bound);
    tsrd_session *s = job->session;
    tsrd_job_free(job);
    d->inflight--;
    if (d->draining && d->inflight == 0 && d->idle_fn != NULL)
        d->idle_fn(d);
    return s;
}

static void dispatch_complete(tsrd_job *job, tsr_status status)
{
    tsrd_daemon *d = job->d;
    tsrd_session *s = dispatch_complete_held(job, status);
    if (s != NULL)
        tsrd_session_unref(d, s);
}

/* An answer with no job behind it (undecodable bytes, a refusal before the
 * body is decoded, no memory for a job), counted under the body it named. */
static void dispatch_reply_bare_as(tsrd_daemon *d, void *origin, uint64_t id, int body_case,
                                   tsr_status status, const char *message)
{
    Tessera__V1__Reply reply = TESSERA__V1__REPLY__INIT;
    reply.id = id;
    reply.status = (Tessera__V1__Status)status;
    reply.message = (char *)message;
    uint8_t buf[TSR_ERROR_MESSAGE_MAX + 64];
    size_t len = tessera__v1__reply__pack(&reply, buf);
    d->reply_fn(d->reply_sink, origin, buf, len);
    d->metrics.bytes_out += len;
    if (!tsrd_body_known(body_case) || dispatch_handler(d, body_case) == NULL)
        body_case = 0;
    tsrd_metrics_count(d, body_case, status);
    tsrd_log_debug(&d->log, "request id=%llu type=%s status=%s: %s", (unsigned long long)id,
                   body_case != 0 ? tsrd_body_name(body_case) : "none", tsr_status_name(status),
                   message);
}

static void dispatch_reply_bare(tsrd_daemon *d, void *origin, uint64_t id, tsr_status status,
                                const char *message)
{
    dispatch_reply_bare_as(d, origin, id, 0, status, message);
}

/* ---- the worker pool and the session streams ---- */

static void dispatch_work(uv_work_t *w)
{
    tsrd_job *job = w->data;
    job->exec_ns = uv_hrtime();
    tsr_status st = job->handler->execute(job);
    if (st != TSR_OK && job->err.code != st)
        tsr_error_set(&job->err, st, "%s", tsr_strerror(st));
    job->err.code = st;
    job->exec_end_ns = uv_hrtime();
}

static void dispatch_stream_next(tsrd_daemon *d, tsrd_session *s, int device);
static void dispatch_queue_work(tsrd_job *job);

/* The device whose session stream a stream job runs on. */
static int dispatch_device(const tsrd_job *job)
{
    return job->on_device ? job->device : 0;
}

/* Whether any device is out of service (being recovered, or lost). */
static bool dispatch_device_recovering(const tsrd_daemon *d)
{
    for (int i = 0; i < d->n_devices; i++)
        if (d->devrec[i].state != TSRD_DEVICE_SERVING)
            return true;
    return false;
}

/* The end of a heavy job, back on the loop: complete it, let its session's
 * stream go on, and hand out more work. */
static void dispatch_finish(tsrd_job *job, tsr_status st)
{
    tsrd_daemon *d = job->d;
    tsrd_session *s = job->session;
    bool stream = (job->handler->flags & TSRD_STREAM) != 0;
    bool ran_inline = job->ran_inline;
    int device = dispatch_device(job);
    dispatch_complete_held(job, st);
    if (stream) {
        s->stream_busy[device] = false;
        dispatch_stream_next(d, s, device);
    }
    tsrd_session_unref(d, s);
    /* A job off the pool may have faulted the device and still succeed (a
     * candidates or verify that reports a candidate's fault in its answer),
     * so each is followed by a poll, as is a recovery under way. A short
     * launch on the loop ran alone on the device, after the pool's last job
     * polled: its launch and synchronize say whether it faulted. */
    if (!ran_inline || st != TSR_OK || d->recovering || dispatch_device_recovering(d))
        tsrd_recovery_poll(d, tsrd_dispatch_pump);
    tsrd_dispatch_pump(d);
}

static void dispatch_hold_closed(uv_handle_t *h)
{
    free(h);
}

static void dispatch_hold_done(uv_timer_t *timer)
{
    tsrd_job *job = timer->data;
    uv_close((uv_handle_t *)timer, dispatch_hold_closed);
    dispatch_finish(job, job->err.code);
}

/* Holds a finished job's reply for job->hold_ms on a loop timer; false (the
 * reply then goes at once) when no timer could be had. */
static bool dispatch_hold(tsrd_job *job)
{
    uv_timer_t *timer = malloc(sizeof *timer);
    if (timer == NULL || uv_timer_init(job->d->loop, timer) != 0) {
        free(timer);
        return false;
    }
    timer->data = job;
    uv_timer_start(timer, dispatch_hold_done, (uint64_t)job->hold_ms, 0);
    return true;
}

/* A slice of the job goes to the pool (or runs in its place on the loop):
 * the last slice's stamps start again. */
static void dispatch_stamp_queued(tsrd_job *job)
{
    job->queued_ns = uv_hrtime();
    if (job->first_queued_ns == 0)
        job->first_queued_ns = job->queued_ns;
    job->exec_ns = job->exec_end_ns = job->after_ns = 0;
    job->slices++;
}

/* Counts job in (delta 1) or out of (-1) the pool's running work: the total,
 * its device's, and device 0's borrowers (state.h). */
static void dispatch_count(tsrd_daemon *d, const tsrd_job *job, int delta)
{
    d->work_running += delta;
    if (!job->on_device)
        return;
    d->device_running[job->device] += delta;
    if (job->device != 0 && (job->handler->flags & TSRD_COMPILES))
        d->device0_borrowers += delta;
}

static void dispatch_after_work(uv_work_t *w, int uv_status)
{
    tsrd_job *job = w->data;
    tsrd_daemon *d = job->d;
    tsr_status st = job->err.code;
    job->after_ns = uv_hrtime();
    if (uv_status == UV_ECANCELED)
        st = tsr_error_set(&job->err, TSR_CANCELLED, "%s: cancelled",
                           tsrd_body_name(job->body_case));
    dispatch_count(d, job, -1);
    if (job->again && uv_status != UV_ECANCELED && st == TSR_OK) {
        /* A slice of a long job: behind the other tenants' work it goes, and
         * the session's stream stays its own until it completes. */
        job->again = false;
        d->metrics.job_yields++;
        dispatch_queue_work(job);
        /* Its slot is free: a recovery waiting for the pool to drain may go on. */
        tsrd_recovery_poll(d, tsrd_dispatch_pump);
        return;
    }
    job->again = false;
    if (job->hold_ms > 0 && st == TSR_OK && dispatch_hold(job)) {
        tsrd_dispatch_pump(d); /* the worker is free while the reply waits */
        return;
    }
    dispatch_finish(job, st);
}

/* Whether job may take a slot of the pool: with several devices, one bound
 * to a device only while that device holds fewer than its share of the slots
 * (at least one), so that a backlog on one device leaves slots to the
 * others' work. Jobs bound to no device (compiles, verification) take any. */
static bool dispatch_has_room(const tsrd_daemon *d, const tsrd_job *job, int slots)
{
    /* A recovering device takes no work until it serves again; jobs bound to
     * no device, and those that compile first (TSRD_COMPILES), may load on
     * device 0 and wait for it too. */
    if (d->devrec[job->on_device ? job->device : 0].state == TSRD_DEVICE_RECOVERING)
        return false;
    if ((job->handler->flags & TSRD_COMPILES) && d->devrec[0].state == TSRD_DEVICE_RECOVERING)
        return false;
    if (!job->on_device || d->n_devices <= 1)
        return true;
    int share = slots / d->n_devices;
    return d->device_running[job->device] < (share > 0 ? share : 1);
}

/* The next job for the pool: the first one with room (dispatch_has_room) of
 * the first tenant in the ready ring that has one, unlinked from its
 * tenant's queue; that tenant goes to the back of the ring (or leaves it,
 * its queue empty). NULL when no queued job has room. With one device that
 * is always the first tenant's first job. */
static tsrd_job *dispatch_next_job(tsrd_daemon *d, int slots)
{
    for (tsrd_tenant *t = d->ready_head, *t_prev = NULL; t != NULL; t_prev = t, t = t->ready_next) {
        for (tsrd_job *job = t->work_head, *prev = NULL; job != NULL;
             prev = job, job = job->work_next) {
            if (!dispatch_has_room(d, job, slots))
                continue;
            if (prev == NULL)
                t->work_head = job->work_next;
            else
                prev->work_next = job->work_next;
            if (t->work_tail == job)
                t->work_tail = prev;
            if (t_prev == NULL)
                d->ready_head = t->ready_next;
            else
                t_prev->ready_next = t->ready_next;
            if (d->ready_tail == t)
                d->ready_tail = t_prev;
            if (t->work_head == NULL)
                t->work_ready = false;
            else
                TSRD_FIFO_PUSH(d->ready_head, d->ready_tail, t, ready_next);
            return job;
        }
    }
    return NULL;
}

/* Hands queued heavy work to the worker pool while it has free slots, one job
 * per tenant in turn: the tenant served goes to the back of the ring of
 * tenants with queued work. */
void tsrd_dispatch_pump(tsrd_daemon *d)
{
    if (d->work_paused)
        return;
    int slots = d->work_slots > 0 ? d->work_slots : 4;
    tsrd_job *job;
    while (d->work_running < slots && (job = dispatch_next_job(d, slots)) != NULL) {
        dispatch_count(d, job, 1);
        job->work.data = job;
        job->err.code = TSR_OK;
        dispatch_stamp_queued(job);
        int rc = uv_queue_work(d->loop, &job->work, dispatch_work, dispatch_after_work);
        if (rc != 0) {
            tsr_error_set(&job->err, TSR_INTERNAL, "uv_queue_work: %s", uv_strerror(rc));
            dispatch_after_work(&job->work, 0);
        }
    }
}

static void dispatch_queue_work(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    tsrd_tenant *t = job->tenant != NULL ? job->tenant : &d->default_tenant;
    TSRD_FIFO_PUSH(t->work_head, t->work_tail, job, work_next);
    if (!t->work_ready) {
        t->work_ready = true;
        TSRD_FIFO_PUSH(d->ready_head, d->ready_tail, t, ready_next);
    }
    tsrd_dispatch_pump(d);
}

static void dispatch_stream_next(tsrd_daemon *d, tsrd_session *s, int device)
{
    (void)d;
    if (s->stream_busy[device] || s->stream_head[device] == NULL)
        return;
    tsrd_job *job;
    TSRD_FIFO_POP(job, s->stream_head[device], s->stream_tail[device], stream_next);
    s->stream_busy[device] = true;
    dispatch_queue_work(job);
}

/* Each device's work queues on its own stream of the session. */
static void dispatch_stream_push(tsrd_job *job)
{
    tsrd_session *s = job->session;
    int device = dispatch_device(job);
    TSRD_FIFO_PUSH(s->stream_head[device], s->stream_tail[device], job, stream_next);
    dispatch_stream_next(job->d, s, device);
}

/* ---- short stream jobs on the loop ---- */

/* Whether a prepared stream job may execute on the loop. Its handler must say
 * the job is short (quick: a launch of a kernel measured short); the session's
 * stream must be idle with nothing queued on it and already made, so the job
 * keeps its place in the session's order and its execute makes no stream; and
 * no other device work may be running or waiting (no heavy job on the pool,
 * no submission ring, no recovery), so that nothing on the device, and no
 * other caller of the device worker's channels, can hold the launch and its
 * synchronize up while the loop waits for them. Only where kernels run on
 * the host (d->inline_launches): a GPU can hang under a launch, and then the
 * loop would wait for kernel_timeout_ms with every tenant behind it. */
static bool dispatch_inline_ok(const tsrd_job *job)
{
    const tsrd_daemon *d = job->d;
    const tsrd_session *s = job->session;
    int device = dispatch_device(job);
    return d->inline_launches && (job->handler->flags & TSRD_STREAM) && job->quick &&
           !s->stream_busy[device] && s->stream_head[device] == NULL &&
           s->streams[device] != NULL && d->work_running == 0 && d->ready_head == NULL &&
           d->rings_open == 0 && !d->work_paused && !d->recovering &&
           d->devrec[device].state == TSRD_DEVICE_SERVING;
}

/* Executes the job on the loop, then ends it as if the pool had run it: the
 * same accounting (the session's stream held for the call, the work slot,
 * the reply, the replay memory, the quotas, the recovery poll) on the same
 * thread as always. */
static void dispatch_inline(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    d->metrics.inline_jobs++;
    job->ran_inline = true;
    job->session->stream_busy[dispatch_device(job)] = true;
    dispatch_count(d, job, 1);
    job->work.data = job;
    job->err.code = TSR_OK;
    dispatch_stamp_queued(job);
    dispatch_work(&job->work);
    dispatch_after_work(&job->work, 0);
}

/* ---- validation ---- */

static tsr_status dispatch_check_tensors(tsrd_job *job, Tessera__V1__Tensor **tensors, size_t n,
                                         const char *field)
{
    uint64_t max = tsrd_reply_payload_max(job->d);
    if (n > TSR_MAX_REGION_INPUTS)
        return tsr_error_set(&job->err, TSR_TOO_LARGE, "%s: %zu tensors, at most %d", field, n,
                             TSR_MAX_REGION_INPUTS);
    for (size_t i = 0; i < n; i++) {
        if (tensors[i]->n_shape > TSR_MAX_RANK)
            return tsr_error_set(&job->err, TSR_BAD_DIMENSION,
                                 "%s[%zu].shape: rank %zu, at most %d", field, i,
                                 tensors[i]->n_shape, TSR_MAX_RANK);
        if (tensors[i]->data_case == TESSERA__V1__TENSOR__DATA_INLINE_DATA &&
            tensors[i]->inline_data.len > max)
            return tsr_error_set(&job->err, TSR_MESSAGE_TOO_LARGE,
                                 "%s[%zu]: %zu inline bytes, the limit is %llu; use a buffer",
                                 field, i, tensors[i]->inline_data.len, (unsigned long long)max);
    }
    return TSR_OK;
}

static bool dispatch_is_compile(int body_case)
{
    return body_case == TESSERA__V1__REQUEST__BODY_COMPILE ||
           body_case == TESSERA__V1__REQUEST__BODY_RUN ||
           body_case == TESSERA__V1__REQUEST__BODY_VERIFY ||
           body_case == TESSERA__V1__REQUEST__BODY_CANDIDATES;
}

/* The bytes a buffer_alloc asks for, or 0 when its dtype or shape is bad (its
 * handler then refuses it with the precise reason). */
static uint64_t dispatch_alloc_bytes(const Tessera__V1__BufferAllocRequest *r)
{
    int dt = (int)r->dtype - 1;
    if (dt < 0 || dt >= TSR_DTYPE_COUNT)
        return 0;
    uint64_t n = 1;
    for (size_t i = 0; i < r->n_shape; i++) {
        if (r->shape[i] <= 0 || (uint64_t)r->shape[i] > (UINT64_C(1) << 40) / n)
            return 0;
        n *= (uint64_t)r->shape[i];
    }
    return n * tsr_dtype_size((tsr_dtype)dt);
}

static tsr_status dispatch_exhausted(tsrd_job *job, const char *quota, uint64_t used,
                                     uint64_t asked, uint64_t limit)
{
    job->tenant->refused_quota++;
    return tsr_error_set(&job->err, TSR_RESOURCE_EXHAUSTED,
                         "quota %s of tenant %s: %llu in use, %llu asked, the quota is %llu", quota,
                         job->tenant->name, (unsigned long long)used, (unsigned long long)asked,
                         (unsigned long long)limit);
}

/* Admits the job against its tenant's quotas for what its body asks and takes
 * its share of them (given back by dispatch_release when it is answered). The
 * request itself was counted in in_flight before decoding
 * (dispatch_admit_request). A refused request takes nothing more, so the
 * tenant's other work is untouched. */
static tsr_status dispatch_admit(tsrd_job *job)
{
    tsrd_tenant *t = job->tenant;
    const tsrd_quota *q = &t->conf.quota;
    bool compile = dispatch_is_compile(job->body_case);
    uint64_t bytes = 0;
    bool alloc = job->body_case == TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC;
    if (compile && q->compiles != 0 && t->compiles >= q->compiles)
        return dispatch_exhausted(job, "compiles", t->compiles, 1, q->compiles);
    if (alloc) {
        bytes = dispatch_alloc_bytes(job->req->buffer_alloc);
        uint64_t n = t->buffers + t->reserved_buffers;
        uint64_t held = t->buffer_bytes + t->reserved_bytes;
        if (q->buffers != 0 && n >= q->buffers)
            return dispatch_exhausted(job, "buffers", n, 1, q->buffers);
        if (q->device_memory_bytes != 0 && held + bytes > q->device_memory_bytes)
            return dispatch_exhausted(job, "device_memory_bytes", held, bytes,
                                      q->device_memory_bytes);
    }
    job->holds_compile = compile;
    if (compile)
        t->compiles++;
    job->holds_buffer = alloc;
    job->holds_bytes = bytes;
    if (alloc) {
        t->reserved_buffers++;
        t->reserved_bytes += bytes;
    }
    return TSR_OK;
}

/* The one validation step every request passes before its handler. */
static tsr_status dispatch_validate(tsrd_job *job)
{
    const Tessera__V1__Request *req = job->req;
    if (req->body_case == TESSERA__V1__REQUEST__BODY__NOT_SET)
        return tsr_error_set(&job->err, TSR_UNKNOWN_REQUEST,
                             "request %llu has no body this daemon knows (protocol version %d)",
                             (unsigned long long)req->id, TSRD_PROTOCOL_VERSION);
    if (job->handler == NULL)
        return tsr_error_set(&job->err, TSR_UNKNOWN_REQUEST, "request body %d is not known",
                             (int)req->body_case);
    /* health is for probes, which carry no token; it tells only the state. */
    if (req->body_case == TESSERA__V1__REQUEST__BODY_HEALTH)
        return TSR_OK;
    /* Attributed from the envelope's auth before the body was decoded, and
     * already holding its request of the in_flight quota. */
    tsr_status st;
    if ((st = dispatch_admit(job)) != TSR_OK)
        return st;
    if (req->body_case == TESSERA__V1__REQUEST__BODY_RUN)
        return dispatch_check_tensors(job, req->run->inputs, req->run->n_inputs, "run.inputs");
    if (req->body_case == TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC &&
        req->buffer_alloc->n_shape > TSR_MAX_RANK)
        return tsr_error_set(&job->err, TSR_BAD_DIMENSION,
                             "buffer_alloc.shape: rank %zu, at most %d", req->buffer_alloc->n_shape,
                             TSR_MAX_RANK);
    return TSR_OK;
}

/* ---- the entry point ---- */

/* Answers from the request-id memory when it can; true when the request is
 * taken care of (answered, refused, or waiting on its first copy). A resend of
 * a request still executing is one more request of the tenant: it waits only
 * within the in_flight quota. */
static bool dispatch_replay(tsrd_daemon *d, tsrd_session *s, void *origin, uint64_t id,
                            int body_case)
{
    const uint8_t *stored = NULL;
    size_t stored_len = 0;
    bool ok = true;
    tsrd_tenant *t = s->tenant;
    const tsrd_quota *q = &t->conf.quota;
    bool may_wait = q->in_flight == 0 || t->in_flight < q->in_flight;
    switch (tsrd_replay_begin(&s->replay, id, origin, may_wait, &stored, &stored_len, &ok)) {
    case TSRD_REPLAY_DONE:
        d->metrics.replays++;
        d->reply_fn(d->reply_sink, origin, stored, stored_len);
        d->metrics.bytes_out += stored_len;
        return true;
    case TSRD_REPLAY_PENDING:
        if (!may_wait) {
            char msg[256];
            t->refused_quota++;
            snprintf(msg, sizeof msg,
                     "quota in_flight of tenant %s: %llu in use, 1 asked, the quota is %llu (a "
                     "resend of a request still executing counts as one)",
                     t->name, (unsigned long long)t->in_flight, (unsigned long long)q->in_flight);
            dispatch_reply_bare_as(d, origin, id, body_case, TSR_RESOURCE_EXHAUSTED, msg);
        } else if (!ok) {
            dispatch_reply_bare(d, origin, id, TSR_NO_MEMORY, "out of memory queueing a resend");
        } else {
            d->metrics.replays++;
            t->in_flight++; /* given back when the first copy is answered */
        }
        return true;
    case TSRD_REPLAY_NEW:
        break;
    }
    return false;
}

/* A health request needs no token, so it gets no more than this to read. */
#define DISPATCH_HEALTH_MAX 4096

/* Bodies up to this size (at most ~2 000 fields) are checked and decoded on the
 * loop, which takes microseconds; larger ones on the worker pool, so that a
 * tenant's megabytes of fields never hold up the loop that serves the others. */
#define DISPATCH_DECODE_INLINE_MAX 4096

/* The request's bytes are no longer needed. */
static void dispatch_raw_done(tsrd_job *job)
{
    if (job->raw_release != NULL)
        job->raw_release(job->raw_owner);
    job->raw = NULL;
    job->raw_len = 0;
    job->raw_release = NULL;
    job->raw_owner = NULL;
}

/* Makes the job own its bytes (they outlive tsrd_dispatch from here on):
 * borrowed bytes are copied. False when out of memory. */
static bool dispatch_raw_own(tsrd_job *job)
{
    if (job->raw_release != NULL)
        return true;
    uint8_t *copy = malloc(job->raw_len ? job->raw_len : 1);
    if (copy == NULL)
        return false;
    memcpy(copy, job->raw, job->raw_len);
    job->raw = copy;
    job->raw_release = free;
    job->raw_owner = copy;
    return true;
}

/* Checks the shape of the job's bytes and decodes them (any thread: touches
 * the job alone). */
static tsr_status dispatch_decode(tsrd_job *job)
{
    /* Bounded in fields and nesting before protobuf-c allocates for them. */
    tsr_status st = tsrd_request_check_shape(job->raw, job->raw_len, &job->err);
    if (st != TSR_OK)
        return st;
    job->req = tessera__v1__request__unpack(NULL, job->raw_len, job->raw);
    if (job->req == NULL)
        return tsr_error_set(&job->err, TSR_BAD_MESSAGE,
                             "%zu bytes do not decode as a tessera.v1.Request", job->raw_len);
    return TSR_OK;
}

/* A decoded request (or one that failed to decode) goes on: validation, the
 * handler's prepare step, then where its row says. Loop thread. */
static void dispatch_decoded(tsrd_job *job, tsr_status st)
{
    tsrd_daemon *d = job->d;
    if (st != TSR_OK) {
        dispatch_complete(job, st);
        return;
    }
    job->body_case = job->req->body_case;
    job->handler = dispatch_handler(d, job->req->body_case);
    st = dispatch_validate(job);
    if (st != TSR_OK) {
        job->handler = NULL; /* nothing was prepared: no complete step */
        dispatch_complete(job, st);
        return;
    }
    if (job->handler->prepare != NULL)
        st = job->handler->prepare(job);
    if (st == TSR_OK && dispatch_inline_ok(job))
        dispatch_inline(job);
    else if (st == TSR_OK && (job->handler->flags & TSRD_STREAM))
        dispatch_stream_push(job);
    else if (st == TSR_OK && (job->handler->flags & TSRD_HEAVY))
        dispatch_queue_work(job);
    else
        dispatch_complete(job, st == TSR_OK ? job->handler->execute(job) : st);
}

static void dispatch_decode_work(uv_work_t *w)
{
    tsrd_job *job = w->data;
    job->err.code = dispatch_decode(job);
    dispatch_raw_done(job); /* the message goes from this thread too */
}

static void dispatch_start(tsrd_job *job);

/* Starts the session's parked requests in arrival order, until one of them
 * decodes off the loop again. */
static void dispatch_unpark(tsrd_session *s)
{
    while (!s->decoding && s->parked_head != NULL) {
        tsrd_job *job;
        TSRD_FIFO_POP(job, s->parked_head, s->parked_tail, parked_next);
        dispatch_start(job);
    }
}

static void dispatch_decode_after(uv_work_t *w, int uv_status)
{
    tsrd_job *job = w->data;
    tsrd_daemon *d = job->d;
    tsrd_session *s = job->session;
    tsr_status st = job->err.code;
    if (uv_status == UV_ECANCELED) {
        dispatch_raw_done(job);
        st = tsr_error_set(&job->err, TSR_CANCELLED, "request cancelled while being decoded");
    }
    tsrd_session_ref(s);
    s->decoding = false;
    dispatch_decoded(job, st);
    dispatch_unpark(s);
    tsrd_session_unref(d, s);
}

/* Decodes the job on the loop when it is small, else on the worker pool (the
 * session's later requests park until it is back). */
static void dispatch_start(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    tsrd_session *s = job->session;
    if (job->raw_len <= DISPATCH_DECODE_INLINE_MAX) {
        tsr_status st = dispatch_decode(job);
        dispatch_raw_done(job);
        dispatch_decoded(job, st);
        return;
    }
    if (!dispatch_raw_own(job)) {
        dispatch_raw_done(job);
        dispatch_complete(job, tsr_error_set(&job->err, TSR_NO_MEMORY, "out of memory"));
        return;
    }
    s->decoding = true;
    d->metrics.decoded_off_loop++;
    job->work.data = job;
    job->err.code = TSR_OK;
    int rc = uv_queue_work(d->loop, &job->work, dispatch_decode_work, dispatch_decode_after);
    if (rc != 0) {
        s->decoding = false;
        dispatch_raw_done(job);
        dispatch_complete(
            job, tsr_error_set(&job->err, TSR_INTERNAL, "uv_queue_work: %s", uv_strerror(rc)));
        dispatch_unpark(s);
    }
}

/* Takes one request of the tenant's in_flight quota for the job, before
 * anything of its body is decoded: a flood of large requests waits within
 * the quota, decoding included. */
static tsr_status dispatch_admit_request(tsrd_job *job, tsrd_tenant *t)
{
    const tsrd_quota *q = &t->conf.quota;
    if (q->in_flight != 0 && t->in_flight >= q->in_flight) {
        job->tenant = t;
        tsr_status st = dispatch_exhausted(job, "in_flight", t->in_flight, 1, q->in_flight);
        job->tenant = NULL;
        return st;
    }
    t->in_flight++;
    job->tenant = t;
    return TSR_OK;
}

bool tsrd_dispatch(tsrd_daemon *d, tsrd_session *s, void *origin, const uint8_t *data, size_t len,
                   void (*release)(void *owner), void *owner)
{
    uint64_t start = uv_hrtime();
    d->metrics.bytes_in += len;
    tsrd_envelope env;
    tsr_error err;
    if (tsrd_envelope_parse(data, len, &env, &err) != TSR_OK) {
        dispatch_reply_bare(d, origin, 0, err.code, err.message);
        return false;
    }
    tsr_status refused = TSR_OK;
    if (s == NULL || d->draining) {
        refused = TSR_UNAVAILABLE;
        snprintf(err.message, sizeof err.message, "%s",
                 s == NULL ? "connection is closing" : "tesserad is shutting down");
    }
    bool health = env.body_case == TESSERA__V1__REQUEST__BODY_HEALTH;
    if (refused == TSR_OK && health && len > DISPATCH_HEALTH_MAX) {
        refused = TSR_MESSAGE_TOO_LARGE;
        snprintf(err.message, sizeof err.message,
                 "health: a %zu-byte request; a health request carries no data (at most %d "
                 "bytes)",
                 len, DISPATCH_HEALTH_MAX);
    }
    if (refused != TSR_OK) {
        dispatch_reply_bare_as(d, origin, env.id, env.body_case, refused, err.message);
        return false;
    }
    tsrd_job *job = calloc(1, sizeof *job);
    if (job == NULL) {
        dispatch_reply_bare_as(d, origin, env.id, env.body_case, TSR_NO_MEMORY, "out of memory");
        return false;
    }
    /* Borrowed: decoded on the loop and done with before this call returns,
     * unless the request parks or decodes on the pool (below). */
    job->raw = data;
    job->raw_len = len;
    /* Who is asking comes before anything else, the request-id memory
     * included: a stored reply goes only to the session's own tenant. */
    if (!health) {
        tsrd_tenant *tenant = NULL;
        if (tsrd_tenant_attribute_bytes(d, s, env.auth, env.auth_len, &tenant, &err) != TSR_OK) {
            free(job);
            dispatch_reply_bare_as(d, origin, env.id, env.body_case, err.code, err.message);
            return false;
        }
        if (dispatch_replay(d, s, origin, env.id, env.body_case)) {
            free(job);
            return false;
        }
    }
    Tessera__V1__Reply init = TESSERA__V1__REPLY__INIT;
    job->reply = init;
    job->d = d;
    job->session = s;
    tsrd_session_ref(s);
    job->origin = origin;
    job->id = env.id;
    job->start_ns = start;
    job->body_case = env.body_case;
    if (health)
        job->sees_all = tsrd_tenant_caller_sees_all(d, s, env.auth, env.auth_len);
    d->inflight++;
    if (!health) {
        tsr_status st = dispatch_admit_request(job, s->tenant);
        if (st != TSR_OK) {
            dispatch_raw_done(job);
            dispatch_complete(job, st);
            return false;
        }
    }
    /* A request of this session is decoding off the loop: this one waits its
     * turn, so that the session's requests are served in arrival order. */
    bool parks = s->decoding || s->parked_head != NULL;
    bool taken = false;
    if ((parks || len > DISPATCH_DECODE_INLINE_MAX) && release != NULL) {
        job->raw_release = release;
        job->raw_owner = owner;
        taken = true;
    }
    if (parks) {
        if (!dispatch_raw_own(job)) {
            dispatch_raw_done(job);
            dispatch_complete(job, tsr_error_set(&job->err, TSR_NO_MEMORY, "out of memory"));
            return taken;
        }
        TSRD_FIFO_PUSH(s->parked_head, s->parked_tail, job, parked_next);
        return taken;
    }
    dispatch_start(job);
    return taken;
}

void tsrd_dispatch_refuse(tsrd_daemon *d, void *origin, const uint8_t *data, size_t len,
                          tsr_status status, const char *message)
{
    tsrd_envelope env;
    if (tsrd_envelope_parse(data, len, &env, NULL) != TSR_OK)
        memset(&env, 0, sizeof env);
    d->metrics.bytes_in += len;
    dispatch_reply_bare_as(d, origin, env.id, env.body_case, status, message);
}
