/*
 * handlers_launch.c — launch (a compiled kernel on buffers) and run (compile
 * and launch in one request, with inline or buffer tensors).
 *
 * Both check every tensor against the region's signature before any device
 * work — count, dtype, shape and byte size — and name the offending one in a
 * BUFFER_MISMATCH. Buffers are pinned on the loop in prepare (a launch's in
 * job->bound, released by the dispatcher after the reply; a run's unpinned in
 * complete); the device work runs on the session's stream.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/devices.h"
#include "serve/session.h"
#include "serve/shm.h"

/* A run's state (a launch's is a launch_job): the buffers it pinned,
 * the kernel it compiled, its temporaries. */
typedef struct launch_state {
    tsrd_kernel *kernel;
    int n_inputs;
    tsrd_buffer *inputs[TSR_MAX_REGION_INPUTS];
    tsrd_buffer *output;
    tsr_region region;
    tsrd_compiled compiled;
    tsrd_dbuf *temps[TSR_MAX_REGION_INPUTS + 1];
    bool fused;           /* launched through the backend's launch_many_sync */
    tsrd_kobj *kobj_here; /* loaded on the run's device when it is not 0 */
    /* Shared-memory tensors: inputs by index, the output at the last slot. */
    tsrd_shm_map *maps[TSR_MAX_REGION_INPUTS + 1];
    uint8_t *host[TSR_MAX_REGION_INPUTS + 1];
} launch_state;

#define LAUNCH_SHM_OUT TSR_MAX_REGION_INPUTS

static tsr_status launch_unpin_complete(tsrd_job *job, tsr_status status)
{
    launch_state *s = job->state;
    if (s == NULL)
        return status;
    tsrd_kernel_unref(job->d, s->kernel);
    for (int i = 0; i < s->n_inputs; i++)
        tsrd_buffer_unref(job->d, s->inputs[i]);
    tsrd_buffer_unref(job->d, s->output);
    for (int i = 0; i <= TSR_MAX_REGION_INPUTS; i++)
        if (s->temps[i] != NULL)
            job->d->bops->buffer_free(job->d->backend, s->temps[i]);
    tsrd_compiled_release(job->d, &s->compiled);
    if (s->kobj_here != NULL)
        job->d->bops->unload(job->d->backend, s->kobj_here);
    tsr_region_free(&s->region);
    if (s->fused)
        job->d->metrics.launches_fused++;
    return status;
}

/* ---- launch ---- */

/* A kernel measured at most this long on the device (tsrd_kernel.launch_ns)
 * is launched and synchronized on the loop when the device is otherwise idle:
 * the loop then waits for it about as long as a hand-off to the worker pool
 * and back would take. */
#define LAUNCH_QUICK_NS 100000u

static bool launch_quick(tsrd_kernel *k, int device)
{
    uint64_t ns = atomic_load_explicit(&k->launch_ns, memory_order_relaxed);
    /* Loading on a new device is not quick. */
    return ns != 0 && ns <= LAUNCH_QUICK_NS && tsrd_kernel_kobj_loaded(k, device) != NULL;
}

/* The kernel and buffers pinned, checked and placed in one call
 * (handlers/common.h) into job->bound, which the dispatcher releases when the
 * job ends; the quick mark for the loop. */
static tsr_status launch_prepare(tsrd_job *job)
{
    const Tessera__V1__LaunchRequest *req = job->req->launch;
    tsr_status st = tsrd_job_pin_launch(job, "launch", req->kernel, req->inputs, req->n_inputs,
                                        req->output, &job->bound);
    if (st == TSR_OK)
        job->quick = launch_quick(job->bound.kernel, job->device);
    return st;
}

/* Keeps the kernel's shortest time on the device, which decides whether its
 * later launches may run on the loop (launch_quick). The shortest: one
 * kernel's work does not change from launch to launch, and a launch that took
 * longer was held up by something else (a preempted thread, another process
 * on the device), which must not send the kernel back and forth between the
 * loop and the pool. The calls' round trips to a device worker are not the
 * kernel's and stay out of it. A batch may store its own estimate, which a
 * shorter launch replaces. */
static void launch_measured(tsrd_kernel *k, double device_ms)
{
    double ns = device_ms * 1e6;
    uint64_t now = ns >= 1.0 ? (uint64_t)ns : 1;
    uint64_t old = atomic_load_explicit(&k->launch_ns, memory_order_relaxed);
    while ((old == 0 || now < old) &&
           !atomic_compare_exchange_weak_explicit(&k->launch_ns, &old, now, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* The launch and its synchronize are one backend call where the backend
 * offers it (launch_many_sync: one round trip to a device worker instead of two),
 * on the pool and on the loop alike. */
static tsr_status launch_execute(tsrd_job *job)
{
    tsrd_bound_launch *b = &job->bound;
    tsrd_dbuf *inputs[TSR_MAX_REGION_INPUTS];
    for (int i = 0; i < b->n_inputs; i++)
        inputs[i] = b->inputs[i]->dbuf;
    tsrd_stream *stream;
    tessera__v1__launch_reply__init(&job->body.launch);
    /* Loaded already but for a launch on a new device. */
    tsrd_kobj *kobj = tsrd_kernel_kobj_loaded(b->kernel, job->device);
    tsr_status st =
        kobj != NULL ? TSR_OK : tsrd_kernel_kobj(job->d, b->kernel, job->device, &kobj, &job->err);
    if (st == TSR_OK)
        st = tsrd_job_stream(job, &stream);
    if (st == TSR_OK) {
        job->launches_fused = job->d->bops->launch_many_sync != NULL;
        st = tsrd_launch_wait(job->d->bops, job->d->backend, kobj, stream, inputs, b->n_inputs,
                              b->output->dbuf, &job->body.launch.device_ms, &job->err);
    }
    if (st == TSR_OK)
        launch_measured(b->kernel, job->body.launch.device_ms);
    TSRD_JOB_REPLY(job, launch, LAUNCH);
    return st;
}

const tsrd_handler tsrd_handler_launch = {
    .flags = TSRD_HEAVY | TSRD_STREAM,
    .prepare = launch_prepare,
    .execute = launch_execute,
};

/* ---- run ---- */

/* The run's device: that of its buffer tensors (one for all), which a
 * device the request names must match; without buffers the one it names,
 * else the least-loaded one the tenant may use. */
static tsr_status run_device(tsrd_job *job)
{
    const Tessera__V1__RunRequest *req = job->req->run;
    launch_state *s = job->state;
    tsrd_device_pick pick = TSRD_DEVICE_PICK_INIT;
    char field[48];
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < s->n_inputs; i++) {
        snprintf(field, sizeof field, "run.inputs[%d]", i);
        if (s->inputs[i] != NULL)
            st = tsrd_job_pick_device(job, &pick, s->inputs[i], field);
    }
    if (st == TSR_OK && s->output != NULL)
        st = tsrd_job_pick_device(job, &pick, s->output, "run.output_buffer");
    if (st != TSR_OK)
        return st;
    bool named = req->device_present_case == TESSERA__V1__RUN_REQUEST__DEVICE_PRESENT_DEVICE;
    int requested = named ? (int)(req->device < INT32_MAX ? req->device : INT32_MAX) : -1;
    if (named && pick.device >= 0 && requested != pick.device)
        return tsr_error_set(&job->err, TSR_CONFLICT,
                             "run.device: device %d, but %s is on device %d; buffers are never "
                             "copied between devices",
                             requested, pick.first, pick.device);
    int device = pick.device;
    if (device < 0)
        st = tsrd_device_choose(job->d, job->session->tenant, requested, 0, "run.device", &device,
                                &job->err);
    if (st == TSR_OK)
        tsrd_job_set_device(job, device);
    return st;
}

static tsr_status run_prepare(tsrd_job *job)
{
    const Tessera__V1__RunRequest *req = job->req->run;
    launch_state *s = job->state = tsrd_job_alloc(job, sizeof *s);
    if (s == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "run: out of memory");
    char field[48];
    for (size_t i = 0; i < req->n_inputs; i++, s->n_inputs++) {
        snprintf(field, sizeof field, "run.inputs[%zu]", i);
        const Tessera__V1__Tensor *t = req->inputs[i];
        if (t->data_case == TESSERA__V1__TENSOR__DATA__NOT_SET)
            return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                                 "%s: no data (inline_data or buffer)", field);
        if (t->data_case == TESSERA__V1__TENSOR__DATA_BUFFER) {
            tsr_status st = tsrd_job_buffer(job, t->buffer, field, &s->inputs[i]);
            if (st != TSR_OK)
                return st;
        }
        if (t->data_case == TESSERA__V1__TENSOR__DATA_SHM && i < TSR_MAX_REGION_INPUTS) {
            strncat(field, ".shm", sizeof field - strlen(field) - 1);
            tsr_status st = tsrd_shm_resolve(job, t->shm, field, 0, &s->maps[i], &s->host[i]);
            if (st != TSR_OK)
                return st;
        }
    }
    tsr_status st = TSR_OK;
    if (req->output_shm != NULL) {
        if (req->output_buffer != 0)
            return tsr_error_set(&job->err, TSR_CONFLICT,
                                 "run: output_buffer and output_shm both given");
        st = tsrd_shm_resolve(job, req->output_shm, "run.output_shm", 0, &s->maps[LAUNCH_SHM_OUT],
                              &s->host[LAUNCH_SHM_OUT]);
    } else if (req->output_buffer != 0) {
        st = tsrd_job_buffer(job, req->output_buffer, "run.output_buffer", &s->output);
    }
    return st == TSR_OK ? run_device(job) : st;
}

/* One run input against its signature slot. */
static tsr_status run_check_input(tsrd_job *job, size_t i, const tsr_tensor_desc *want)
{
    const Tessera__V1__Tensor *t = job->req->run->inputs[i];
    launch_state *s = job->state;
    char field[48], got[160], need[160];
    snprintf(field, sizeof field, "run.inputs[%zu]", i);
    bool shm = t->data_case == TESSERA__V1__TENSOR__DATA_SHM;
    bool inline_data = t->data_case == TESSERA__V1__TENSOR__DATA_INLINE_DATA || shm;
    /* A buffer input's dtype and shape may be left out: the buffer has its own. */
    if (inline_data || t->dtype != TESSERA__V1__DTYPE__DTYPE_UNSPECIFIED) {
        tsr_dtype dtype;
        tsr_status st = tsrd_dtype_from_pb(job, t->dtype, field, &dtype);
        if (st != TSR_OK || dtype != want->dtype)
            return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                                 "%s (%s): dtype %s, the region takes %s", field, want->name,
                                 st == TSR_OK ? tsr_dtype_name(dtype) : "unset",
                                 tsr_dtype_name(want->dtype));
    }
    if (inline_data || t->n_shape > 0) {
        bool same = t->n_shape == (size_t)want->rank;
        for (int d = 0; same && d < want->rank; d++)
            same = t->shape[d] == want->shape[d];
        if (!same) {
            tsr_shape_text(t->shape, (int)(t->n_shape < 8 ? t->n_shape : 8), got, sizeof got);
            tsr_shape_text(want->shape, want->rank, need, sizeof need);
            return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                                 "%s (%s): shape %s, the region takes %s", field, want->name, got,
                                 need);
        }
    }
    if (!inline_data)
        return tsrd_job_check_buffer(job, s->inputs[i], want, field, "region");
    uint64_t bytes = tsr_tensor_desc_bytes(want);
    if (shm && t->shm->length != bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s.shm (%s): %llu bytes, the region needs %llu", field, want->name,
                             (unsigned long long)t->shm->length, (unsigned long long)bytes);
    if (!shm && t->inline_data.len != bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s (%s): %zu inline bytes, the region needs %llu", field, want->name,
                             t->inline_data.len, (unsigned long long)bytes);
    return TSR_OK;
}

static tsr_status run_check(tsrd_job *job, const tsr_tensor_desc *sig, int n,
                            const tsr_tensor_desc *out)
{
    launch_state *s = job->state;
    tsr_status st =
        tsrd_job_check_count(job, "run.inputs", job->req->run->n_inputs, sig, n, s->region.kind);
    for (int i = 0; st == TSR_OK && i < n; i++)
        st = run_check_input(job, (size_t)i, &sig[i]);
    if (st == TSR_OK && s->output != NULL)
        st = tsrd_job_check_buffer(job, s->output, out, "run.output_buffer", "region");
    uint64_t out_bytes = tsr_tensor_desc_bytes(out);
    const Tessera__V1__SharedMemory *out_shm = job->req->run->output_shm;
    if (st == TSR_OK && out_shm != NULL && out_shm->length != out_bytes)
        st = tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                           "run.output_shm: %llu bytes, the output needs %llu",
                           (unsigned long long)out_shm->length, (unsigned long long)out_bytes);
    if (st == TSR_OK && s->output == NULL && out_shm == NULL &&
        out_bytes > tsrd_reply_payload_max(job->d))
        st = tsr_error_set(&job->err, TSR_MESSAGE_TOO_LARGE,
                           "run: the %llu-byte output does not fit a reply (limit %llu); give "
                           "output_buffer",
                           (unsigned long long)out_bytes,
                           (unsigned long long)tsrd_reply_payload_max(job->d));
    return st;
}

/* Device buffers for every tensor: the client's own, or temporaries holding
 * the inline data (temps[n] is the inline output). */
static tsr_status run_device_buffers(tsrd_job *job, int n, const tsr_tensor_desc *out,
                                     tsrd_dbuf **inputs, tsrd_dbuf **output)
{
    launch_state *s = job->state;
    const tsrd_backend_ops *ops = job->d->bops;
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < n; i++) {
        const Tessera__V1__Tensor *t = job->req->run->inputs[i];
        if (s->inputs[i] != NULL) {
            inputs[i] = s->inputs[i]->dbuf;
            continue;
        }
        if (s->host[i] != NULL) {
            st = ops->buffer_alloc(job->d->backend, job->device, t->shm->length, &s->temps[i],
                                   &job->err);
            char field[48];
            snprintf(field, sizeof field, "run.inputs[%d].shm", i);
            if (st == TSR_OK)
                st = tsrd_shm_copy(job, s->maps[i], field, s->temps[i], 0, s->host[i],
                                   t->shm->length, 1);
            inputs[i] = s->temps[i];
            continue;
        }
        st = ops->buffer_alloc(job->d->backend, job->device, t->inline_data.len, &s->temps[i],
                               &job->err);
        if (st == TSR_OK)
            st = ops->buffer_write(job->d->backend, s->temps[i], 0, t->inline_data.data,
                                   t->inline_data.len, &job->err);
        inputs[i] = s->temps[i];
    }
    if (st == TSR_OK && s->output != NULL)
        *output = s->output->dbuf;
    else if (st == TSR_OK)
        st = ops->buffer_alloc(job->d->backend, job->device, tsr_tensor_desc_bytes(out),
                               &s->temps[n], &job->err);
    if (st == TSR_OK && s->output == NULL)
        *output = s->temps[n];
    return st;
}

static tsr_status run_reply(tsrd_job *job, const tsr_tensor_desc *out, tsrd_dbuf *out_buf)
{
    launch_state *s = job->state;
    Tessera__V1__RunReply *r = &job->body.run;
    tessera__v1__run_reply__init(r);
    r->decision = tsrd_decision_pb(job, &s->compiled);
    r->key = tsrd_job_hex(job, &s->compiled.key);
    r->device = (uint32_t)job->device;
    r->output = tsrd_job_alloc(job, sizeof *r->output);
    int64_t *shape = tsrd_job_alloc(job, sizeof out->shape);
    if (r->decision == NULL || r->key == NULL || r->output == NULL || shape == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "run: out of memory");
    tessera__v1__tensor__init(r->output);
    r->output->dtype = (Tessera__V1__DType)(out->dtype + 1);
    memcpy(shape, out->shape, sizeof out->shape);
    r->output->shape = shape;
    r->output->n_shape = (size_t)out->rank;
    if (s->output != NULL) {
        r->output->data_case = TESSERA__V1__TENSOR__DATA_BUFFER;
        r->output->buffer = job->req->run->output_buffer;
    } else if (s->host[LAUNCH_SHM_OUT] != NULL) {
        r->output->data_case = TESSERA__V1__TENSOR__DATA_SHM;
        r->output->shm = job->req->run->output_shm;
        tsr_status st = tsrd_shm_copy(job, s->maps[LAUNCH_SHM_OUT], "run.output_shm", out_buf, 0,
                                      s->host[LAUNCH_SHM_OUT], tsr_tensor_desc_bytes(out), 0);
        if (st != TSR_OK)
            return st;
    } else {
        uint64_t bytes = tsr_tensor_desc_bytes(out);
        r->output->data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
        r->output->inline_data.len = (size_t)bytes;
        r->output->inline_data.data = tsrd_job_alloc(job, (size_t)bytes);
        if (r->output->inline_data.data == NULL)
            return tsr_error_set(&job->err, TSR_NO_MEMORY, "run: out of memory");
        tsr_status st = job->d->bops->buffer_read(job->d->backend, out_buf, 0,
                                                  r->output->inline_data.data, bytes, &job->err);
        if (st != TSR_OK)
            return st;
    }
    TSRD_JOB_REPLY(job, run, RUN);
    return TSR_OK;
}

/* The compiled kernel is loaded on device 0; a run elsewhere loads the same
 * binary on its own device. */
static tsr_status run_kobj(tsrd_job *job)
{
    launch_state *s = job->state;
    if (job->device == 0)
        return TSR_OK;
    const tsr_candidate *c =
        tsr_arbiter_find(job->d->arbiter, s->region.kind, s->compiled.decision.candidate.name);
    if (c == NULL)
        return tsr_error_set(&job->err, TSR_INTERNAL, "run: candidate %s is not registered",
                             s->compiled.decision.candidate.name);
    return job->d->bops->load(job->d->backend, job->device, &s->region, c, s->compiled.blob->data,
                              s->compiled.blob->len, &s->kobj_here, &job->err);
}

static tsr_status run_execute(tsrd_job *job)
{
    const Tessera__V1__RunRequest *req = job->req->run;
    launch_state *s = job->state;
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    tsrd_dbuf *inputs[TSR_MAX_REGION_INPUTS] = {0}, *output = NULL;
    tsrd_stream *stream = NULL;
    tsr_status st = tsrd_job_region(job, req->region, "run.region", &s->region);
    int n = st == TSR_OK ? tsr_region_signature(&s->region, sig, &out) : 0;
    if (st == TSR_OK)
        st = run_check(job, sig, n, &out);
    if (st == TSR_OK)
        st = tsrd_job_compile(job, &s->region, req->options, true, &s->compiled);
    if (st == TSR_OK)
        st = run_device_buffers(job, n, &out, inputs, &output);
    if (st == TSR_OK)
        st = run_kobj(job);
    if (st == TSR_OK)
        st = tsrd_job_stream(job, &stream);
    if (st == TSR_OK) {
        s->fused = job->d->bops->launch_many_sync != NULL;
        tsrd_kobj *kobj = s->kobj_here != NULL ? s->kobj_here : s->compiled.kobj;
        st = tsrd_launch_wait(job->d->bops, job->d->backend, kobj, stream, inputs, n, output, NULL,
                              &job->err);
    }
    if (st == TSR_OK)
        st = run_reply(job, &out, output);
    return st;
}

const tsrd_handler tsrd_handler_run = {
    .flags = TSRD_HEAVY | TSRD_STREAM | TSRD_COMPILES,
    .prepare = run_prepare,
    .execute = run_execute,
    .complete = launch_unpin_complete,
};
