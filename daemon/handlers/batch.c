/*
 * batch.c — batch (a sequence of launches with one reply) and
 * buffer_import (a local process's device allocation by CUDA IPC).
 *
 * A batch is checked whole on the loop before any device work: every kernel
 * and buffer resolved and pinned, every signature matched, so a bad entry fails
 * the request with its index named and nothing runs. The launches then run in
 * order on the session's stream, followed by one synchronize. With graph=true a
 * backend that can capture records the sequence the first time and replays the
 * graph after (serve/graphs.h); one that cannot runs the launches one by one, which
 * gives the same results.
 *
 * Launched one by one, a long batch yields between launches once it has run
 * for BATCH_SLICE_MS: the job goes back to its tenant's queue (job->again) and
 * the worker pool serves the other tenants' work first, so a batch of slow
 * launches delays another tenant's request by one launch, not the whole batch.
 * The session's stream stays the batch's meanwhile, so its order is kept. A
 * captured graph is one device call and is not divided.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/graphs.h"
#include "serve/session.h"

typedef struct batch_entry {
    tsrd_kernel *kernel;
    int n_inputs;
    tsrd_buffer *inputs[TSR_MAX_REGION_INPUTS];
    tsrd_buffer *output;
} batch_entry;

/* How long a batch launches before it lets other work run. */
#define BATCH_SLICE_MS 10

typedef struct batch_state {
    size_t n; /* entries resolved (and pinned) so far */
    batch_entry *entries;
    size_t next;  /* launches issued by earlier slices */
    size_t chunk; /* launches per backend call, grown while calls are quick */
} batch_state;

static tsr_status batch_check_buffer(tsrd_job *job, const tsrd_buffer *b,
                                     const tsr_tensor_desc *want, const char *field)
{
    uint64_t bytes = tsr_tensor_desc_bytes(want);
    if (b->dtype != want->dtype || b->bytes != bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "%s (%s): buffer holds %llu bytes of %s, the kernel needs %llu bytes "
                             "of %s",
                             field, want->name, (unsigned long long)b->bytes,
                             tsr_dtype_name(b->dtype), (unsigned long long)bytes,
                             tsr_dtype_name(want->dtype));
    return TSR_OK;
}

static tsr_status batch_entry_resolve(tsrd_job *job, size_t i, const Tessera__V1__BatchLaunch *l,
                                      batch_entry *e)
{
    char field[64];
    e->kernel = tsrd_kernel_lookup(job->d, job->session, l->kernel);
    if (e->kernel == NULL)
        return tsr_error_set(&job->err, TSR_NOT_FOUND,
                             "batch.launches[%zu].kernel: no kernel %#llx", i,
                             (unsigned long long)l->kernel);
    tsrd_kernel_ref(e->kernel);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(&e->kernel->region, sig, &out);
    if (l->n_inputs != (size_t)n)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "batch.launches[%zu].inputs: %zu buffers, the kernel takes %d", i,
                             l->n_inputs, n);
    tsr_status st = TSR_OK;
    for (int k = 0; st == TSR_OK && k < n; k++) {
        snprintf(field, sizeof field, "batch.launches[%zu].inputs[%d]", i, k);
        st = tsrd_job_buffer(job, l->inputs[k], field, &e->inputs[k]);
        if (st == TSR_OK) {
            e->n_inputs = k + 1;
            st = batch_check_buffer(job, e->inputs[k], &sig[k], field);
        }
    }
    snprintf(field, sizeof field, "batch.launches[%zu].output", i);
    if (st == TSR_OK)
        st = tsrd_job_buffer(job, l->output, field, &e->output);
    if (st == TSR_OK)
        st = batch_check_buffer(job, e->output, &out, field);
    return st;
}

static tsr_status batch_prepare(tsrd_job *job)
{
    const Tessera__V1__BatchRequest *req = job->req->batch;
    batch_state *s = job->state = tsrd_job_alloc(job, sizeof *s);
    if (s == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    if (req->n_launches == 0)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT, "batch.launches: empty");
    if (req->n_launches > TSRD_BATCH_MAX)
        return tsr_error_set(&job->err, TSR_TOO_LARGE, "batch.launches: %zu, at most %d",
                             req->n_launches, TSRD_BATCH_MAX);
    s->entries = tsrd_job_alloc(job, req->n_launches * sizeof *s->entries);
    if (s->entries == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    tsr_status st = TSR_OK;
    for (size_t i = 0; st == TSR_OK && i < req->n_launches; i++) {
        s->n = i + 1;
        st = batch_entry_resolve(job, i, req->launches[i], &s->entries[i]);
    }
    return st;
}

/* Launches [from, from + n) in one backend call. */
static tsr_status batch_run_range(tsrd_job *job, tsrd_stream *stream, size_t from, size_t n)
{
    batch_state *s = job->state;
    tsrd_launch_desc *descs = calloc(n ? n : 1, sizeof *descs);
    tsrd_dbuf **bufs = calloc(n ? n * TSR_MAX_REGION_INPUTS : 1, sizeof *bufs);
    if (descs == NULL || bufs == NULL) {
        free(descs);
        free(bufs);
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        batch_entry *e = &s->entries[from + i];
        tsrd_dbuf **in = bufs + i * TSR_MAX_REGION_INPUTS;
        for (int k = 0; k < e->n_inputs; k++)
            in[k] = e->inputs[k]->dbuf;
        descs[i] = (tsrd_launch_desc){.kernel = e->kernel->kobj,
                                      .inputs = in,
                                      .n_inputs = e->n_inputs,
                                      .output = e->output->dbuf};
    }
    size_t launched = 0;
    tsr_status st =
        job->d->bops->launch_many(job->d->backend, descs, n, stream, &launched, &job->err);
    job->body.batch.launched += (uint32_t)launched;
    if (st != TSR_OK)
        tsr_error_prefix(&job->err, "batch.launches[%zu]", from + launched);
    free(descs);
    free(bufs);
    return st;
}

/* The whole sequence in one backend call (a graph capture). */
static tsr_status batch_run_all(tsrd_job *job, tsrd_stream *stream)
{
    batch_state *s = job->state;
    return batch_run_range(job, stream, 0, s->n);
}

/* Launches from where the last slice stopped until BATCH_SLICE_MS have gone;
 * sets job->again when launches remain. Calls start at one launch and double
 * while they take under a quarter of the slice, so a backend that queues
 * launches without waiting (a GPU) needs few calls, and one that runs them in
 * the call (the CPU) stops after the launch that used up the slice. */
static tsr_status batch_run_slice(tsrd_job *job, tsrd_stream *stream)
{
    batch_state *s = job->state;
    uint64_t start = uv_hrtime();
    const uint64_t slice = (uint64_t)BATCH_SLICE_MS * 1000000u;
    if (s->chunk == 0)
        s->chunk = 1;
    while (s->next < s->n) {
        size_t n = s->n - s->next < s->chunk ? s->n - s->next : s->chunk;
        uint64_t t0 = uv_hrtime();
        tsr_status st = batch_run_range(job, stream, s->next, n);
        if (st != TSR_OK)
            return st;
        s->next += n;
        uint64_t now = uv_hrtime();
        if (now - t0 < slice / 4)
            s->chunk *= 2;
        if (s->next < s->n && now - start >= slice) {
            job->again = true;
            return TSR_OK;
        }
    }
    return TSR_OK;
}

static size_t batch_key_len(const Tessera__V1__BatchRequest *req)
{
    size_t n = 0;
    for (size_t i = 0; i < req->n_launches; i++)
        n += 2 + req->launches[i]->n_inputs;
    return n;
}

static void batch_key_fill(const Tessera__V1__BatchRequest *req, uint64_t *key)
{
    size_t at = 0;
    for (size_t i = 0; i < req->n_launches; i++) {
        const Tessera__V1__BatchLaunch *l = req->launches[i];
        key[at++] = l->kernel;
        for (size_t k = 0; k < l->n_inputs; k++)
            key[at++] = l->inputs[k];
        key[at++] = l->output;
    }
}

/* Replays a captured graph or captures one. TSR_UNSUPPORTED (err cleared)
 * when the backend cannot capture: the caller then launches one by one. */
static tsr_status batch_graph_run(tsrd_job *job, tsrd_stream *stream)
{
    const Tessera__V1__BatchRequest *req = job->req->batch;
    tsrd_daemon *d = job->d;
    batch_state *s = job->state;
    size_t n = batch_key_len(req);
    uint64_t *key = malloc(n * sizeof *key);
    if (key == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    batch_key_fill(req, key);
    tsrd_graph *cached = tsrd_graphs_find(job->session, key, n);
    if (cached != NULL) {
        free(key);
        tsr_status st = d->bops->graph->graph_launch(d->backend, cached, stream, &job->err);
        if (st == TSR_OK) {
            job->body.batch.launched = (uint32_t)s->n;
            job->body.batch.graph_replayed = true;
        }
        return st;
    }
    if (d->bops->graph == NULL)
        return TSR_UNSUPPORTED;
    tsr_status st = d->bops->graph->graph_begin(d->backend, stream, &job->err);
    if (st == TSR_UNSUPPORTED) {
        free(key);
        tsr_error_clear(&job->err);
        return TSR_UNSUPPORTED;
    }
    tsrd_graph *graph = NULL;
    if (st == TSR_OK) {
        st = batch_run_all(job, stream);
        tsr_error err_end;
        tsr_status end = d->bops->graph->graph_end(d->backend, stream, &graph, &err_end);
        if (st == TSR_OK && end != TSR_OK) {
            job->err = err_end;
            st = end;
        }
    }
    /* Captured launches did not run: the replay below is their execution. */
    job->body.batch.launched = 0;
    if (st != TSR_OK) {
        if (graph != NULL)
            d->bops->graph->graph_destroy(d->backend, graph);
        free(key);
        return st;
    }
    st = tsrd_graphs_keep(d, job->session, key, n, graph, &job->err);
    if (st != TSR_OK)
        return tsr_error_prefix(&job->err, "batch");
    st = d->bops->graph->graph_launch(d->backend, graph, stream, &job->err);
    if (st == TSR_OK)
        job->body.batch.launched = (uint32_t)s->n;
    return st;
}

static tsr_status batch_execute(tsrd_job *job)
{
    batch_state *s = job->state;
    bool first = s->next == 0 && s->chunk == 0;
    if (first) {
        Tessera__V1__BatchReply init = TESSERA__V1__BATCH_REPLY__INIT;
        job->body.batch = init;
        job->reply.body_case = TESSERA__V1__REPLY__BODY_BATCH;
        job->reply.batch = &job->body.batch;
    }
    tsrd_stream *stream;
    tsr_status st = tsrd_job_stream(job, &stream);
    if (st != TSR_OK)
        return st;
    st = first && job->req->batch->graph ? batch_graph_run(job, stream) : TSR_UNSUPPORTED;
    if (st == TSR_UNSUPPORTED) {
        st = batch_run_slice(job, stream);
        if (st == TSR_OK && job->again)
            return TSR_OK; /* the rest in a later slice; synchronize then */
    }
    /* Launches already queued finish before the reply, whatever failed. */
    double ms = 0;
    tsr_error sync_err;
    tsr_status sync = job->d->bops->synchronize(job->d->backend, stream, &ms, &sync_err);
    if (st == TSR_OK && sync != TSR_OK) {
        job->err = sync_err;
        st = sync;
    }
    job->body.batch.device_ms = ms;
    return st;
}

static tsr_status batch_complete(tsrd_job *job, tsr_status status)
{
    batch_state *s = job->state;
    for (size_t i = 0; s != NULL && s->entries != NULL && i < s->n; i++) {
        batch_entry *e = &s->entries[i];
        for (int k = 0; k < e->n_inputs; k++)
            tsrd_buffer_unref(job->d, e->inputs[k]);
        if (e->output != NULL)
            tsrd_buffer_unref(job->d, e->output);
        if (e->kernel != NULL)
            tsrd_kernel_unref(job->d, e->kernel);
    }
    return status;
}

const tsrd_handler tsrd_handler_batch = {
    .flags = TSRD_HEAVY | TSRD_STREAM,
    .prepare = batch_prepare,
    .execute = batch_execute,
    .complete = batch_complete,
};

/* ---- buffer_import ---- */

static tsr_status import_prepare(tsrd_job *job)
{
    const Tessera__V1__BufferImportRequest *req = job->req->buffer_import;
    tsrd_buffer *b = calloc(1, sizeof *b);
    if (b == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "buffer_import: out of memory");
    job->state = b;
    tsr_status st = tsrd_dtype_from_pb(job, req->dtype, "buffer_import.dtype", &b->dtype);
    if (st != TSR_OK)
        return st;
    if (req->n_shape > TSR_MAX_RANK)
        return tsr_error_set(&job->err, TSR_BAD_DIMENSION,
                             "buffer_import.shape: rank %zu, at most %d", req->n_shape,
                             TSR_MAX_RANK);
    uint64_t elements = 1;
    b->rank = (int)req->n_shape;
    for (int i = 0; i < b->rank; i++) {
        int64_t dim = req->shape[i];
        if (dim <= 0)
            return tsr_error_set(&job->err, TSR_BAD_DIMENSION,
                                 "buffer_import.shape[%d]: must be > 0, got %lld", i,
                                 (long long)dim);
        if (dim > TSR_MAX_ELEMENTS || elements > (uint64_t)TSR_MAX_ELEMENTS / (uint64_t)dim)
            return tsr_error_set(&job->err, TSR_TOO_LARGE,
                                 "buffer_import.shape: more than 2^40 elements");
        elements *= (uint64_t)dim;
        b->shape[i] = dim;
    }
    b->bytes = elements * tsr_dtype_size(b->dtype);
    /* The allocation may be larger than the tensor, never smaller. */
    if (req->offset > req->bytes || req->bytes - req->offset < b->bytes)
        return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                             "buffer_import: %llu bytes at offset %llu pass the end of the "
                             "%llu-byte allocation",
                             (unsigned long long)b->bytes, (unsigned long long)req->offset,
                             (unsigned long long)req->bytes);
    if (req->ipc_handle.len != 64)
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "buffer_import.ipc_handle: %zu bytes, a CUDA IPC handle has 64",
                             req->ipc_handle.len);
    return TSR_OK;
}

static tsr_status import_execute(tsrd_job *job)
{
    const Tessera__V1__BufferImportRequest *req = job->req->buffer_import;
    tsrd_buffer *b = job->state;
    const tsrd_backend_ops *ops = job->d->bops;
    if (ops->ipc == NULL)
        return tsr_error_set(&job->err, TSR_UNSUPPORTED,
                             "%s backend: no device memory to import (CUDA IPC needs the cuda "
                             "backend)",
                             ops->name);
    return ops->ipc->buffer_import(job->d->backend, 0, req->ipc_handle.data, req->ipc_handle.len,
                                   req->offset, b->bytes, &b->dbuf, &job->err);
}

static tsr_status import_complete(tsrd_job *job, tsr_status status)
{
    tsrd_buffer *b = job->state;
    Tessera__V1__BufferImportReply *r = &job->body.buffer_import;
    Tessera__V1__BufferImportReply init = TESSERA__V1__BUFFER_IMPORT_REPLY__INIT;
    *r = init;
    status = tsrd_buffer_adopt(job->d, job->session, status, b, &r->buffer, &job->err);
    if (status != TSR_OK)
        return status;
    r->bytes = b->bytes;
    job->reply.body_case = TESSERA__V1__REPLY__BODY_BUFFER_IMPORT;
    job->reply.buffer_import = r;
    return TSR_OK;
}

const tsrd_handler tsrd_handler_buffer_import = {
    .flags = TSRD_HEAVY,
    .prepare = import_prepare,
    .execute = import_execute,
    .complete = import_complete,
};
