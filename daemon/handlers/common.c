/*
 * common.c — what the handlers share: handles pinned for a job, wire dtypes
 * and regions with the field named, and the protobuf forms of verdicts and
 * decisions.
 */
#include "handlers/common.h"

#include <stdio.h>
#include <string.h>

#include "serve/devices.h"
#include "serve/handles.h"
#include "serve/scope.h"
#include "serve/session.h"
#include "tessera/region_pb.h"

tsr_status tsrd_job_buffer(tsrd_job *job, uint64_t handle, const char *field, tsrd_buffer **out)
{
    tsrd_buffer *b = tsrd_buffer_lookup(job->d, job->session, handle);
    if (b == NULL)
        return tsr_error_set(&job->err, TSR_NOT_FOUND, "%s: no buffer %#llx", field,
                             (unsigned long long)handle);
    tsrd_buffer_ref(b);
    *out = b;
    return TSR_OK;
}

tsr_status tsrd_job_check_buffer(tsrd_job *job, const tsrd_buffer *b, const tsr_tensor_desc *want,
                                 const char *field, const char *whose)
{
    uint64_t bytes = tsr_tensor_desc_bytes(want);
    if (b->dtype != want->dtype || b->bytes != bytes)
        return tsr_error_set(
            &job->err, TSR_BUFFER_MISMATCH,
            "%s (%s): buffer holds %llu bytes of %s, the %s needs %llu bytes of %s", field,
            want->name, (unsigned long long)b->bytes, tsr_dtype_name(b->dtype), whose,
            (unsigned long long)bytes, tsr_dtype_name(want->dtype));
    return TSR_OK;
}

tsr_status tsrd_job_check_count(tsrd_job *job, const char *what, size_t given,
                                const tsr_tensor_desc *sig, int n, tsr_region_kind kind)
{
    if (given == (size_t)n)
        return TSR_OK;
    char names[256];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < n && used < sizeof names; i++)
        used +=
            (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", sig[i].name);
    return tsr_error_set(&job->err, TSR_BUFFER_MISMATCH,
                         "%s: %zu inputs given, the %s region takes %d (%s)", what, given,
                         tsr_region_kind_name(kind), n, names);
}

/* Looks up and pins a launch's kernel, then its inputs in order (none when
 * there are more than TSR_MAX_REGION_INPUTS), then its output, into *out
 * (cleared first), in one lookup, stopping at the first handle the session
 * does not own. Returns which one that was: -2 the kernel, 0 .. n_inputs - 1
 * an input, n_inputs the output, -1 none. */
static int pin_launch_handles(tsrd_job *job, uint64_t kernel, const uint64_t *inputs,
                              size_t n_inputs, uint64_t output, tsrd_bound_launch *out)
{
    memset(out, 0, sizeof *out);
    uint64_t ids[TSR_MAX_REGION_INPUTS + 2];
    tsrd_handle_type types[TSR_MAX_REGION_INPUTS + 2];
    void *objs[TSR_MAX_REGION_INPUTS + 2];
    int n = n_inputs <= TSR_MAX_REGION_INPUTS ? (int)n_inputs : 0;
    ids[0] = kernel;
    types[0] = TSRD_HANDLE_KERNEL;
    for (int i = 0; i < n; i++) {
        ids[1 + i] = inputs[i];
        types[1 + i] = TSRD_HANDLE_BUFFER;
    }
    ids[1 + n] = output;
    types[1 + n] = TSRD_HANDLE_BUFFER;
    size_t found =
        tsrd_handles_get_each(&job->d->handles, ids, types, (size_t)n + 2, job->session, objs);
    if (found == 0)
        return -2;
    out->kernel = objs[0];
    tsrd_kernel_ref(out->kernel);
    for (int i = 0; i < n && (size_t)i + 1 < found; i++) {
        out->inputs[i] = objs[1 + i];
        tsrd_buffer_ref(out->inputs[i]);
        out->n_inputs = i + 1;
    }
    if (found <= (size_t)n + 1)
        return found - 1 < (size_t)n ? (int)found - 1 : (int)n_inputs;
    out->output = objs[1 + n];
    tsrd_buffer_ref(out->output);
    return -1;
}

/* One pinned slot of a launch against its signature entry: NOT_FOUND when it
 * was missing, BUFFER_MISMATCH when its dtype or size is not the entry's.
 * The slot's name ("<field>.inputs[k]", "<field>.output" for slot -1) is
 * written only for an error: a batch binds thousands of buffers a second,
 * and the names cost more than the checks. */
static tsr_status bind_check_slot(tsrd_job *job, const char *field, const char *whose, int slot,
                                  bool missing, uint64_t handle, const tsrd_buffer *b,
                                  const tsr_tensor_desc *want)
{
    if (!missing && b->dtype == want->dtype && b->bytes == tsr_tensor_desc_bytes(want))
        return TSR_OK;
    char name[128];
    if (slot >= 0)
        snprintf(name, sizeof name, "%s.inputs[%d]", field, slot);
    else
        snprintf(name, sizeof name, "%s.output", field);
    if (missing)
        return tsr_error_set(&job->err, TSR_NOT_FOUND, "%s: no buffer %#llx", name,
                             (unsigned long long)handle);
    return tsrd_job_check_buffer(job, b, want, name, whose);
}

tsr_status tsrd_job_bind_launch(tsrd_job *job, const char *field, const char *whose,
                                uint64_t kernel, const uint64_t *inputs, size_t n_inputs,
                                uint64_t output, tsrd_bound_launch *out)
{
    int missing = pin_launch_handles(job, kernel, inputs, n_inputs, output, out);
    if (missing == -2)
        return tsr_error_set(&job->err, TSR_NOT_FOUND, "%s.kernel: no kernel %#llx", field,
                             (unsigned long long)kernel);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], want_out;
    int n = tsr_region_signature(&out->kernel->region, sig, &want_out);
    if (n_inputs != (size_t)n) {
        char what[96];
        snprintf(what, sizeof what, "%s.inputs", field);
        return tsrd_job_check_count(job, what, n_inputs, sig, n, out->kernel->region.kind);
    }
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < n; i++)
        st =
            bind_check_slot(job, field, whose, i, missing == i, inputs[i], out->inputs[i], &sig[i]);
    if (st == TSR_OK)
        st = bind_check_slot(job, field, whose, -1, missing == n, output, out->output, &want_out);
    return st;
}

tsr_status tsrd_job_pin_launch(tsrd_job *job, const char *field, uint64_t kernel,
                               const uint64_t *inputs, size_t n_inputs, uint64_t output,
                               tsrd_bound_launch *out)
{
    tsr_status st =
        tsrd_job_bind_launch(job, field, "region", kernel, inputs, n_inputs, output, out);
    /* It runs on the device of its buffers. */
    tsrd_device_pick pick = TSRD_DEVICE_PICK_INIT;
    if (st == TSR_OK)
        st = tsrd_job_pick_bound(job, &pick, out, field);
    if (st == TSR_OK)
        tsrd_job_set_device(job, pick.device);
    return st;
}

tsr_status tsrd_job_pick_device(tsrd_job *job, tsrd_device_pick *pick, const tsrd_buffer *b,
                                const char *field)
{
    if (pick->device < 0) {
        pick->device = b->device;
        snprintf(pick->first, sizeof pick->first, "%s", field);
        return TSR_OK;
    }
    if (b->device == pick->device)
        return TSR_OK;
    return tsr_error_set(&job->err, TSR_CONFLICT,
                         "%s is on device %d and %s on device %d: a launch runs on one device, "
                         "and buffers are never copied between devices",
                         pick->first, pick->device, field, b->device);
}

tsr_status tsrd_job_pick_bound(tsrd_job *job, tsrd_device_pick *pick, const tsrd_bound_launch *b,
                               const char *field)
{
    char name[96];
    tsr_status st = TSR_OK;
    /* Named only when the pick needs the name: the first buffer, or a
     * conflict. */
    for (int i = 0; st == TSR_OK && i <= b->n_inputs; i++) {
        const tsrd_buffer *buf = i < b->n_inputs ? b->inputs[i] : b->output;
        if (buf == NULL || buf->device == pick->device)
            continue;
        if (i < b->n_inputs)
            snprintf(name, sizeof name, "%s.inputs[%d]", field, i);
        else
            snprintf(name, sizeof name, "%s.output", field);
        st = tsrd_job_pick_device(job, pick, buf, name);
    }
    return st;
}

tsr_status tsrd_dtype_from_pb(tsrd_job *job, int pb_dtype, const char *field, tsr_dtype *out)
{
    if (pb_dtype < 1 || pb_dtype > TSR_DTYPE_COUNT)
        return tsr_error_set(&job->err, TSR_BAD_DTYPE, "%s: %s dtype %d", field,
                             pb_dtype == 0 ? "unspecified" : "unknown", pb_dtype);
    *out = (tsr_dtype)(pb_dtype - 1);
    return TSR_OK;
}

tsr_status tsrd_job_region(tsrd_job *job, const Tessera__V1__Region *pb, const char *field,
                           tsr_region *out)
{
    tsr_status st = tsr_region_from_pb(pb, out, &job->err);
    if (st != TSR_OK)
        tsr_error_prefix(&job->err, "%s", field);
    return st;
}

tsr_status tsrd_job_compile(tsrd_job *job, const tsr_region *region,
                            const Tessera__V1__CompileOptions *options, bool load,
                            tsrd_compiled *out)
{
    tsr_status st = tsrd_engine_compile(job->d, region, options, load, out, &job->err);
    return tsrd_scope_compiled(job->d, job->session->tenant, out, st, &job->hold_ms);
}

Tessera__V1__Verdict *tsrd_verdict_pb(tsrd_job *job, const tsr_verdict *v, bool ran, bool cached)
{
    Tessera__V1__Verdict *pb = tsrd_job_alloc(job, sizeof *pb);
    char *reason = tsrd_job_strdup(job, ran ? v->reason : "not verified");
    if (pb == NULL || reason == NULL)
        return NULL;
    Tessera__V1__Verdict init = TESSERA__V1__VERDICT__INIT;
    *pb = init;
    if (!ran) {
        pb->reason = reason;
        return pb;
    }
    pb->state = v->pass ? TESSERA__V1__VERDICT_STATE__VERDICT_PASS
                        : TESSERA__V1__VERDICT_STATE__VERDICT_FAIL;
    pb->elements = v->elements;
    pb->probes = v->probes;
    pb->max_abs_error = v->max_abs_error;
    pb->rel_error = v->rel_error;
    pb->bound = v->bound;
    pb->nan_mismatches = v->nan_mismatches;
    pb->inf_mismatches = v->inf_mismatches;
    pb->first_bad_index = v->first_bad_index;
    pb->first_bad_probe = v->first_bad_probe;
    pb->first_bad_got = v->first_bad_got;
    pb->first_bad_want = v->first_bad_want;
    pb->reason = reason;
    pb->cached = cached;
    pb->method = (char *)tsr_verify_method_name(v->method);
    pb->sampled_elements = v->sampled_elements;
    pb->small_probes = v->small_probes;
    return pb;
}

Tessera__V1__Decision *tsrd_decision_pb(tsrd_job *job, const tsrd_compiled *c)
{
    Tessera__V1__Decision *pb = tsrd_job_alloc(job, sizeof *pb);
    char *name = tsrd_job_strdup(job, c->decision.candidate.name);
    Tessera__V1__Verdict *verdict = tsrd_verdict_pb(job, &c->decision.verdict, c->decision.verified,
                                                    c->decision.verdict_cached);
    if (pb == NULL || name == NULL || verdict == NULL)
        return NULL;
    Tessera__V1__Decision init = TESSERA__V1__DECISION__INIT;
    *pb = init;
    pb->candidate = name;
    pb->tier = c->decision.candidate.tier;
    pb->version = c->decision.candidate.version;
    pb->reason = (char *)tsr_decision_reason_name(c->decision.reason);
    pb->verdict = verdict;
    pb->cache_hit = c->level != TSR_KCACHE_MISS;
    pb->cache_level = c->level == TSR_KCACHE_MISS ? "" : (char *)tsr_kcache_level_name(c->level);
    pb->verify_skipped = c->decision.verify_skipped;
    return pb;
}

char *tsrd_job_hex(tsrd_job *job, const tsr_fingerprint *fp)
{
    char *hex = tsrd_job_alloc(job, TSR_FINGERPRINT_HEX);
    if (hex != NULL)
        tsr_fingerprint_hex(fp, hex);
    return hex;
}
