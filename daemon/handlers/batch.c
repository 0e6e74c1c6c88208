/*
 * batch.c — batch: a sequence of launches with one reply.
 *
 * A batch is checked whole on the loop before any device work: every kernel
 * and buffer resolved and pinned, every signature matched, so a bad entry fails
 * the request with its index named and nothing runs. The launches then run in
 * order on the session's stream, followed by one synchronize. With graph=true a
 * backend that can capture records the sequence the first time and replays the
 * graph after (serve/graphs.h); one that cannot runs the launches one by one, which
 * gives the same results.
 *
 * A long batch yields: its launches go in chunks planned from what each kernel
 * took when last measured (tsrd_kernel.launch_ns), at most half of
 * BATCH_SLICE_MS of device work per chunk, and a kernel not measured yet goes
 * alone. After each chunk the stream is synchronized (in the same backend
 * call as the chunk's launches where the backend can: one round trip to a
 * device worker), which measures the chunk (and bounds the device work queued
 * ahead of other tenants' copies); once BATCH_SLICE_MS have gone the job goes back to its
 * tenant's queue (job->again) and the worker pool serves the other tenants'
 * work first. The session's stream stays the batch's meanwhile, so its order is
 * kept. A batch whose launches all fit one chunk runs as one backend call and
 * one synchronize, as before. Captured graphs follow the same plan: each chunk
 * is a graph of its own (serve/graphs.h keeps them by their exact launch
 * sequence, and a later batch replays the longest kept one that matches where
 * it stands), so a captured batch yields between graphs just the same. A batch
 * is captured only once every kernel in it has been measured by an earlier
 * batch, so the first batch of new kernels runs uncaptured, the next captures,
 * and replays start with the third.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/devices.h"
#include "serve/graphs.h"
#include "serve/session.h"

/* How long a batch launches before it lets other work run. */
#define BATCH_SLICE_MS 10

typedef struct batch_state {
    size_t n; /* entries resolved (and pinned) so far */
    tsrd_bound_launch *entries;
    size_t next;    /* launches issued so far, over all slices */
    bool started;   /* the first slice ran */
    bool use_graph; /* capture and replay (graph=true on a backend that can) */
    bool all_replayed;
    double device_ms; /* summed over the synchronizes */
    uint32_t fused;   /* launches made and synchronized in one backend call */
} batch_state;

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
    /* Every launch runs on the one device of all the batch's buffers. */
    tsrd_device_pick pick = TSRD_DEVICE_PICK_INIT;
    char field[48];
    for (size_t i = 0; st == TSR_OK && i < req->n_launches; i++) {
        const Tessera__V1__BatchLaunch *l = req->launches[i];
        s->n = i + 1;
        snprintf(field, sizeof field, "batch.launches[%zu]", i);
        st = tsrd_job_bind_launch(job, field, "kernel", l->kernel, l->inputs, l->n_inputs,
                                  l->output, &s->entries[i]);
        if (st == TSR_OK)
            st = tsrd_job_pick_bound(job, &pick, &s->entries[i], field);
    }
    if (st == TSR_OK)
        tsrd_job_set_device(job, pick.device);
    return st;
}

/* Launches [from, from + n) in one backend call. With synced non-NULL the
 * stream is synchronized after them in the same call where the backend can
 * (tsrd_launch_many_wait), *synced saying whether it was and the device time
 * added to the batch's. */
static tsr_status batch_run_range(tsrd_job *job, tsrd_stream *stream, size_t from, size_t n,
                                  bool *synced)
{
    batch_state *s = job->state;
    for (size_t i = from; i < from + n; i++) {
        tsrd_kobj *kobj;
        tsr_status st =
            tsrd_kernel_kobj(job->d, s->entries[i].kernel, job->device, &kobj, &job->err);
        if (st != TSR_OK)
            return tsr_error_prefix(&job->err, "batch.launches[%zu]", i);
    }
    tsrd_launch_desc *descs = tsrd_bound_launch_descs(&s->entries[from], n, job->device);
    if (descs == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    size_t launched = 0;
    tsr_status st;
    if (synced == NULL) {
        st = job->d->bops->launch_many(job->d->backend, descs, n, stream, &launched, &job->err);
    } else {
        double ms = 0;
        st = tsrd_launch_many_wait(job->d->bops, job->d->backend, descs, n, stream, &launched,
                                   synced, &ms, &job->err);
        s->device_ms += ms;
        if (*synced && job->d->bops->launch_many_sync != NULL)
            s->fused += (uint32_t)launched;
    }
    job->body.batch.launched += (uint32_t)launched;
    if (st != TSR_OK && (synced == NULL || !*synced))
        tsr_error_prefix(&job->err, "batch.launches[%zu]", from + launched);
    free(descs);
    return st;
}

/* Half a slice of device work per chunk (backend.h). */
#define BATCH_CHUNK_NS TSRD_DEVICE_CHUNK_NS
_Static_assert(TSRD_DEVICE_CHUNK_NS * 2 == (uint64_t)BATCH_SLICE_MS * 1000000u,
               "a chunk is half a batch's slice");

/* How many launches from `from` make the next chunk: at least one; more while
 * every kernel has been measured and the estimates fit BATCH_CHUNK_NS. */
static size_t batch_plan(const batch_state *s, size_t from)
{
    uint64_t sum = atomic_load_explicit(&s->entries[from].kernel->launch_ns, memory_order_relaxed);
    if (sum == 0)
        return 1;
    size_t n = 1;
    while (from + n < s->n) {
        uint64_t est =
            atomic_load_explicit(&s->entries[from + n].kernel->launch_ns, memory_order_relaxed);
        if (est == 0 || sum + est > BATCH_CHUNK_NS)
            break;
        sum += est;
        n++;
    }
    return n;
}

/* Spreads a chunk's measured time over its kernels: in proportion to their
 * estimates when all had one, else (a chunk of one unmeasured kernel) evenly
 * over its launches. Every new estimate is worked out from the old ones
 * before any is stored, since a kernel appears in many launches of a chunk. */
static void batch_learn(const batch_state *s, size_t from, size_t n, uint64_t took_ns)
{
    uint64_t *now = malloc(n * sizeof *now);
    if (now == NULL)
        return; /* the estimates stay as they were */
    uint64_t sum = 0;
    bool all_known = true;
    for (size_t i = 0; i < n; i++) {
        now[i] =
            atomic_load_explicit(&s->entries[from + i].kernel->launch_ns, memory_order_relaxed);
        sum += now[i];
        all_known = all_known && now[i] != 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t v = all_known && sum > 0
                         ? (uint64_t)((double)now[i] * (double)took_ns / (double)sum)
                         : took_ns / n;
        now[i] = v > 0 ? v : 1;
    }
    for (size_t i = 0; i < n; i++)
        atomic_store_explicit(&s->entries[from + i].kernel->launch_ns, now[i],
                              memory_order_relaxed);
    free(now);
}

/* The handles of launches [from, from + n) as a graph key: per launch the
 * kernel, its inputs and its output (*len words, malloc'd; NULL when out of
 * memory). */
static uint64_t *batch_key(const tsrd_job *job, size_t from, size_t n, size_t *len)
{
    const Tessera__V1__BatchRequest *req = job->req->batch;
    size_t words = 0;
    for (size_t i = from; i < from + n; i++)
        words += 2 + req->launches[i]->n_inputs;
    uint64_t *key = malloc((words ? words : 1) * sizeof *key);
    if (key == NULL)
        return NULL;
    size_t at = 0;
    for (size_t i = from; i < from + n; i++) {
        const Tessera__V1__BatchLaunch *l = req->launches[i];
        key[at++] = l->kernel;
        for (size_t k = 0; k < l->n_inputs; k++)
            key[at++] = l->inputs[k];
        key[at++] = l->output;
    }
    *len = words;
    return key;
}

/* The next chunk as a graph (every kernel of the batch has been measured, so
 * the plan is known): the longest kept graph, of at most twice the planned
 * chunk, whose launches are the ones that come next is replayed when it has at
 * least half the planned chunk (estimates move a little from batch to batch; the kept graphs should
 * not); else the planned chunk is captured, kept and replayed (*captured
 * set). *count gets the launches done. TSR_UNSUPPORTED (err cleared) when the
 * backend cannot capture: the caller goes on without graphs. */
static tsr_status batch_graph_chunk(tsrd_job *job, tsrd_stream *stream, size_t *count,
                                    bool *captured)
{
    tsrd_daemon *d = job->d;
    batch_state *s = job->state;
    size_t n = batch_plan(s, s->next);
    /* Only a kept graph of at most twice the plan is replayed, so the launches
     * past that need no key. */
    size_t ahead = s->n - s->next < 2 * n ? s->n - s->next : 2 * n;
    size_t rest_len = 0;
    uint64_t *rest = batch_key(job, s->next, ahead, &rest_len);
    if (rest == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    size_t launches = 0;
    tsrd_graph *kept = tsrd_graphs_match(job->session, rest, rest_len, &launches);
    free(rest);
    if (kept != NULL && launches * 2 >= n) {
        tsr_status st = d->bops->graph->graph_launch(d->backend, kept, stream, &job->err);
        if (st == TSR_OK) {
            job->body.batch.launched += (uint32_t)launches;
            *count = launches;
        }
        return st;
    }
    s->all_replayed = false;
    *captured = true;
    size_t key_len = 0;
    uint64_t *key = batch_key(job, s->next, n, &key_len);
    if (key == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "batch: out of memory");
    tsr_status st = d->bops->graph->graph_begin(d->backend, stream, &job->err);
    if (st == TSR_UNSUPPORTED) {
        free(key);
        tsr_error_clear(&job->err);
        return TSR_UNSUPPORTED;
    }
    tsrd_graph *graph = NULL;
    uint32_t before = job->body.batch.launched;
    if (st == TSR_OK) {
        st = batch_run_range(job, stream, s->next, n, NULL);
        tsr_error err_end;
        tsr_status end = d->bops->graph->graph_end(d->backend, stream, &graph, &err_end);
        if (st == TSR_OK && end != TSR_OK) {
            job->err = err_end;
            st = end;
        }
    }
    /* Captured launches did not run: the replay below is their execution. */
    job->body.batch.launched = before;
    if (st != TSR_OK) {
        if (graph != NULL)
            d->bops->graph->graph_destroy(d->backend, graph);
        free(key);
        return st;
    }
    st = tsrd_graphs_keep(d, job->session, key, key_len, n, graph, &job->err);
    if (st != TSR_OK)
        return tsr_error_prefix(&job->err, "batch");
    st = d->bops->graph->graph_launch(d->backend, graph, stream, &job->err);
    if (st == TSR_OK) {
        job->body.batch.launched += (uint32_t)n;
        *count = n;
    }
    return st;
}

/* Synchronizes the stream, adding its device time to the batch's. */
static tsr_status batch_sync(tsrd_job *job, tsrd_stream *stream, tsr_error *err)
{
    batch_state *s = job->state;
    double ms = 0;
    tsr_status st = job->d->bops->synchronize(job->d->backend, stream, &ms, err);
    s->device_ms += ms;
    return st;
}

static tsr_status batch_execute(tsrd_job *job)
{
    batch_state *s = job->state;
    tsrd_daemon *d = job->d;
    if (!s->started) {
        s->started = true;
        tessera__v1__batch_reply__init(&job->body.batch);
        TSRD_JOB_REPLY(job, batch, BATCH);
        /* Captured only once every kernel has been measured (by an earlier
         * batch): until then the launches go uncaptured and are measured. */
        /* The session's graphs are device 0's stream's alone: a batch on
         * another device, which runs beside it, launches one by one. */
        s->use_graph = job->req->batch->graph && d->bops->graph != NULL && job->device == 0;
        for (size_t i = 0; s->use_graph && i < s->n; i++)
            if (atomic_load_explicit(&s->entries[i].kernel->launch_ns, memory_order_relaxed) == 0)
                s->use_graph = false;
        s->all_replayed = true;
    }
    tsrd_stream *stream;
    tsr_status st = tsrd_job_stream(job, &stream);
    if (st != TSR_OK)
        return st;
    const uint64_t slice = (uint64_t)BATCH_SLICE_MS * 1000000u;
    uint64_t slice_start = uv_hrtime();
    for (;;) {
        size_t from = s->next, count = 0;
        uint64_t t0 = uv_hrtime();
        bool synced = false, captured = false;
        if (s->use_graph) {
            st = batch_graph_chunk(job, stream, &count, &captured);
            if (st == TSR_UNSUPPORTED) {
                s->use_graph = false;
                continue;
            }
        } else {
            count = batch_plan(s, from);
            st = batch_run_range(job, stream, from, count, &synced);
        }
        s->next += count;
        /* Each chunk is measured to its end before the next one goes, so the
         * device queue never holds more than a chunk of this batch ahead of
         * other tenants' work; the last one (or a failure) ends the batch, its
         * launches finished before the reply. An uncaptured chunk whose
         * launches all went was synchronized with them. */
        if (!synced) {
            tsr_error sync_err;
            tsr_status sync = batch_sync(job, stream, &sync_err);
            if (st == TSR_OK && sync != TSR_OK) {
                job->err = sync_err;
                st = sync;
            }
        }
        if (st != TSR_OK)
            break;
        uint64_t now = uv_hrtime();
        /* A chunk captured here took the capture's time too, often more than
         * its launches: learning from it would cut the next batch's chunks
         * short of the graph just kept, and that batch would capture again. */
        if (!captured)
            batch_learn(s, from, count, now - t0);
        tsrd_log_debug(&d->log, "batch: launches %zu..%zu of %zu took %.3f ms%s; %.3f ms each now",
                       from, from + count - 1, s->n, (double)(now - t0) / 1e6,
                       s->use_graph ? " (graph)" : "",
                       (double)atomic_load_explicit(&s->entries[from].kernel->launch_ns,
                                                    memory_order_relaxed) /
                           1e6);
        if (s->next == s->n)
            break;
        if (now - slice_start >= slice) {
            job->again = true;
            return TSR_OK;
        }
    }
    job->body.batch.device_ms = s->device_ms;
    job->body.batch.graph_replayed = s->use_graph && s->all_replayed;
    return st;
}

static tsr_status batch_complete(tsrd_job *job, tsr_status status)
{
    batch_state *s = job->state;
    for (size_t i = 0; s != NULL && s->entries != NULL && i < s->n; i++)
        tsrd_bound_launch_release(job->d, &s->entries[i]);
    if (s != NULL)
        job->d->metrics.launches_fused += s->fused;
    return status;
}

const tsrd_handler tsrd_handler_batch = {
    .flags = TSRD_HEAVY | TSRD_STREAM,
    .prepare = batch_prepare,
    .execute = batch_execute,
    .complete = batch_complete,
};
