/*
 * kernel.c — compile, verify, candidates and kernel_free.
 *
 * The first three decode and validate the region on a worker thread (a
 * pointwise region can be a thousand nodes) and run the arbiter there, since
 * selection may verify candidates. Only compile's complete step touches the
 * loop's state: it turns the loaded kernel into a handle of the session.
 * kernel_free is the way back, answered on the loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/offline_compile.h"
#include "serve/session.h"

/* ---- compile ---- */

typedef struct compile_state {
    tsr_region region;
    tsrd_compiled compiled;
} compile_state;

/* True when the request names a CUDA architecture that the serving backend
 * has no device for: the kernel is compiled and cached but not loaded. */
static bool compile_is_offline(tsrd_job *job, const Tessera__V1__CompileRequest *req)
{
    const char *arch = req->options != NULL ? req->options->arch : NULL;
    return arch != NULL && arch[0] != '\0' && !job->d->bops->serves_arch(job->d->backend, arch) &&
           tsrd_offline_arch_supported(arch);
}

static tsr_status compile_execute(tsrd_job *job)
{
    const Tessera__V1__CompileRequest *req = job->req->compile;
    compile_state *s = job->state = tsrd_job_alloc(job, sizeof *s);
    if (s == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "compile: out of memory");
    tsr_status st = tsrd_job_region(job, req->region, "compile.region", &s->region);
    if (st == TSR_OK)
        st = tsrd_job_compile(job, &s->region, req->options, !compile_is_offline(job, req),
                              &s->compiled);
    if (st != TSR_OK)
        return st;
    Tessera__V1__CompileReply *r = &job->body.compile;
    tessera__v1__compile_reply__init(r);
    r->key = tsrd_job_hex(job, &s->compiled.key);
    r->fingerprint = tsrd_job_hex(job, &s->compiled.fingerprint);
    r->decision = tsrd_decision_pb(job, &s->compiled);
    r->binary_bytes = s->compiled.blob->len;
    r->compile_ms = s->compiled.compile_ms;
    if (r->key == NULL || r->fingerprint == NULL || r->decision == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "compile: out of memory");
    return TSR_OK;
}

/* Turns the loaded kernel into a handle of the session. */
static tsr_status compile_complete(tsrd_job *job, tsr_status status)
{
    compile_state *s = job->state;
    if (status == TSR_OK && s->compiled.kobj == NULL) {
        /* Compiled for an architecture without a local device: cached, not
         * loaded, so there is no kernel handle (0 in the reply). */
        TSRD_JOB_REPLY(job, compile, COMPILE);
        tsrd_compiled_release(job->d, &s->compiled);
        tsr_region_free(&s->region);
        return status;
    }
    uint64_t held = status == TSR_OK ? tsrd_session_kernel_find(job->session, &s->compiled.key,
                                                                &s->compiled.fingerprint)
                                     : 0;
    if (held != 0 && tsrd_kernel_lookup(job->d, job->session, held) != NULL) {
        /* The session compiled this key before: the same handle again, so a
         * framework that recompiles in a loop does not pile up loaded copies. */
        job->body.compile.kernel = held;
        TSRD_JOB_REPLY(job, compile, COMPILE);
        tsrd_compiled_release(job->d, &s->compiled);
        tsr_region_free(&s->region);
        return status;
    }
    tsrd_kernel *k = status == TSR_OK ? calloc(1, sizeof *k) : NULL;
    if (status == TSR_OK && k == NULL)
        status = tsr_error_set(&job->err, TSR_NO_MEMORY, "compile: out of memory");
    if (status == TSR_OK) {
        k->kobj = s->compiled.kobj;
        k->key = s->compiled.key;
        k->fingerprint = s->compiled.fingerprint;
        k->region = s->region;
        snprintf(k->candidate, sizeof k->candidate, "%s", s->compiled.decision.candidate.name);
        status =
            tsrd_kernel_register(job->d, job->session, k, &job->body.compile.kernel, &job->err);
        if (status == TSR_OK) {
            s->compiled.kobj = NULL; /* the kernel owns both now */
            memset(&s->region, 0, sizeof s->region);
            TSRD_JOB_REPLY(job, compile, COMPILE);
        } else {
            free(k);
        }
    }
    if (s != NULL) {
        tsrd_compiled_release(job->d, &s->compiled);
        tsr_region_free(&s->region);
    }
    return status;
}

const tsrd_handler tsrd_handler_compile = {
    .flags = TSRD_HEAVY,
    .execute = compile_execute,
    .complete = compile_complete,
};

/* ---- verify ---- */

/* The names of the candidates registered for a kind, for error messages. */
static void verify_candidate_names(tsrd_daemon *d, tsr_region_kind kind, char *buf, size_t size)
{
    tsr_candidate_stats *rows = NULL;
    size_t n = 0, used = 0;
    buf[0] = '\0';
    if (tsr_arbiter_stats(d->arbiter, &rows, &n, NULL) != TSR_OK)
        return;
    for (size_t i = 0; i < n && used < size; i++)
        if (rows[i].kind == kind)
            used +=
                (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", rows[i].name);
    free(rows);
}

static tsr_status verify_pick(tsrd_job *job, const tsr_region *r, const char *arch,
                              tsr_candidate *out)
{
    const Tessera__V1__VerifyRequest *req = job->req->verify;
    if (req->candidate[0] != '\0') {
        const tsr_candidate *c = tsr_arbiter_find(job->d->arbiter, r->kind, req->candidate);
        if (c != NULL) {
            *out = *c;
            return TSR_OK;
        }
        char names[256];
        verify_candidate_names(job->d, r->kind, names, sizeof names);
        return tsr_error_set(&job->err, TSR_ARBITER,
                             "verify.candidate: no candidate '%.64s' for %s regions "
                             "(registered: %s)",
                             req->candidate, tsr_region_kind_name(r->kind), names);
    }
    tsr_fingerprint fp;
    tsr_status st = tsr_region_fingerprint(r, &fp, &job->err);
    tsrd_engine_ctx ctx = {.d = job->d, .arch = arch};
    tsr_select_request sel;
    tsr_decision decision;
    tsrd_engine_select_request(&ctx, r, &fp, req->options, &sel);
    if (st == TSR_OK)
        st = tsr_arbiter_select(job->d->arbiter, &sel, &decision, &job->err);
    if (st == TSR_OK)
        *out = decision.candidate;
    return st;
}

/* The request's region, decoded and validated (field named in errors), and the
 * arch its options ask for. *region is safe to free whatever happened. */
static tsr_status kernel_region_and_arch(tsrd_job *job, const Tessera__V1__Region *pb,
                                         const Tessera__V1__CompileOptions *opts, const char *field,
                                         tsr_region *region, char arch[32])
{
    memset(region, 0, sizeof *region);
    tsr_status st = tsrd_job_region(job, pb, field, region);
    if (st == TSR_OK)
        st = tsrd_engine_arch(job->d, opts ? opts->arch : NULL, arch, 32, &job->err);
    return st;
}

static tsr_status verify_execute(tsrd_job *job)
{
    const Tessera__V1__VerifyRequest *req = job->req->verify;
    tsr_region region;
    char arch[32];
    tsr_candidate cand;
    tsr_verdict v;
    tsr_status st =
        kernel_region_and_arch(job, req->region, req->options, "verify.region", &region, arch);
    if (st == TSR_OK)
        st = verify_pick(job, &region, arch, &cand);
    if (st == TSR_OK)
        st = tsrd_engine_verify(job->d, &cand, &region, arch, req->seed, req->random_probes, &v,
                                &job->err);
    tsr_region_free(&region);
    if (st != TSR_OK)
        return st;
    Tessera__V1__VerifyReply *r = &job->body.verify;
    tessera__v1__verify_reply__init(r);
    r->candidate = tsrd_job_strdup(job, cand.name);
    r->tier = cand.tier;
    r->verdict = tsrd_verdict_pb(job, &v, true, false);
    if (r->candidate == NULL || r->verdict == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "verify: out of memory");
    TSRD_JOB_REPLY(job, verify, VERIFY);
    return TSR_OK;
}

const tsrd_handler tsrd_handler_verify = {.flags = TSRD_HEAVY, .execute = verify_execute};

/* ---- candidates ---- */

static Tessera__V1__CandidateInfo *candidates_row_pb(tsrd_job *job, const tsr_candidate_report *row)
{
    Tessera__V1__CandidateInfo *pb = tsrd_job_alloc(job, sizeof *pb);
    char *name = tsrd_job_strdup(job, row->candidate.name);
    char *why = tsrd_job_strdup(job, row->why);
    Tessera__V1__Verdict *verdict = tsrd_verdict_pb(job, &row->verdict, row->verified, false);
    if (pb == NULL || name == NULL || why == NULL || verdict == NULL)
        return NULL;
    Tessera__V1__CandidateInfo init = TESSERA__V1__CANDIDATE_INFO__INIT;
    *pb = init;
    pb->name = name;
    pb->tier = row->candidate.tier;
    pb->version = row->candidate.version;
    pb->applies = row->applies;
    pb->why = why;
    pb->verdict = verdict;
    pb->selected = row->selected;
    return pb;
}

static tsr_status candidates_execute(tsrd_job *job)
{
    const Tessera__V1__CandidatesRequest *req = job->req->candidates;
    tsr_region region;
    char arch[32];
    tsr_fingerprint fp;
    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status select_status;
    tsr_error select_err;
    tsr_status st =
        kernel_region_and_arch(job, req->region, req->options, "candidates.region", &region, arch);
    if (st == TSR_OK)
        st = tsr_region_fingerprint(&region, &fp, &job->err);
    if (st == TSR_OK) {
        tsrd_engine_ctx ctx = {.d = job->d, .arch = arch};
        tsr_select_request sel;
        tsrd_engine_select_request(&ctx, &region, &fp, req->options, &sel);
        st = tsr_arbiter_explain(job->d->arbiter, &sel, &rows, &n, &select_status, &select_err,
                                 &job->err);
    }
    Tessera__V1__CandidatesReply *r = &job->body.candidates;
    tessera__v1__candidates_reply__init(r);
    if (st == TSR_OK && (r->candidates = tsrd_job_alloc(job, n * sizeof *r->candidates)) == NULL)
        st = tsr_error_set(&job->err, TSR_NO_MEMORY, "candidates: out of memory");
    for (size_t i = 0; st == TSR_OK && i < n; i++, r->n_candidates++)
        if ((r->candidates[i] = candidates_row_pb(job, &rows[i])) == NULL)
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "candidates: out of memory");
    free(rows);
    tsr_region_free(&region);
    TSRD_JOB_REPLY(job, candidates, CANDIDATES);
    return st;
}

const tsrd_handler tsrd_handler_candidates = {.flags = TSRD_HEAVY, .execute = candidates_execute};

/* ---- kernel_free ---- */

/* Like buffer_free: an unknown, foreign or already freed handle is NOT_FOUND,
 * the same answer for each so that a client cannot probe another's handles. A
 * launch in flight holds its own reference, so the kernel is unloaded when the
 * last of them completes. */
static tsr_status kernel_free_execute(tsrd_job *job)
{
    uint64_t handle = job->req->kernel_free->kernel;
    /* The reply body comes from the job's arena (the body union in dispatch.h
     * need not grow for an empty message), allocated first so that an answer
     * of NO_MEMORY never follows a free that happened. */
    Tessera__V1__KernelFreeReply *r = tsrd_job_alloc(job, sizeof *r);
    if (r == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "kernel_free: out of memory");
    if (!tsrd_kernel_release_handle(job->d, job->session, handle))
        return tsr_error_set(&job->err, TSR_NOT_FOUND, "kernel_free.kernel: no kernel %#llx",
                             (unsigned long long)handle);
    tessera__v1__kernel_free_reply__init(r);
    job->reply.body_case = TESSERA__V1__REPLY__BODY_KERNEL_FREE;
    job->reply.kernel_free = r;
    return TSR_OK;
}

const tsrd_handler tsrd_handler_kernel_free = {.execute = kernel_free_execute};
