/*
 * calls.c — one function per request of the protocol.
 *
 * Each call fills its request's body on the stack (strings and arrays borrowed
 * from the caller, the region and options by tsri_client_region_encode) and
 * hands it to call_reply with a copy function of its own, which fills the
 * caller's plain C structs from the reply, so no protobuf type leaks through
 * client.h and only call_reply frees a reply.
 */
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "tessera/region_pb.h"

#define CALL_ARG_CHECK(cond, err, what)                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return tsr_error_set((err), TSR_INVALID_ARGUMENT, "%s", (what));                       \
    } while (0)

static void call_verdict_copy(tsr_client_verdict *dst, const Tessera__V1__Verdict *v)
{
    memset(dst, 0, sizeof *dst);
    dst->first_bad_index = -1;
    dst->first_bad_probe = -1;
    if (!v)
        return;
    dst->state = (tsr_client_verdict_state)v->state;
    dst->elements = v->elements;
    dst->probes = v->probes;
    dst->max_abs_error = v->max_abs_error;
    dst->rel_error = v->rel_error;
    dst->bound = v->bound;
    dst->nan_mismatches = v->nan_mismatches;
    dst->inf_mismatches = v->inf_mismatches;
    dst->first_bad_index = v->first_bad_index;
    dst->first_bad_probe = v->first_bad_probe;
    dst->first_bad_got = v->first_bad_got;
    dst->first_bad_want = v->first_bad_want;
    tsri_client_strcpy(dst->reason, sizeof dst->reason, v->reason);
    dst->cached = v->cached;
    tsri_client_strcpy(dst->method, sizeof dst->method, v->method);
    dst->sampled_elements = v->sampled_elements;
    dst->small_probes = v->small_probes;
}

void tsri_client_decision_copy(tsr_client_decision *dst, const Tessera__V1__Decision *d)
{
    memset(dst, 0, sizeof *dst);
    if (!d) {
        call_verdict_copy(&dst->verdict, NULL);
        return;
    }
    tsri_client_strcpy(dst->candidate, sizeof dst->candidate, d->candidate);
    dst->tier = d->tier;
    dst->version = d->version;
    tsri_client_strcpy(dst->reason, sizeof dst->reason, d->reason);
    call_verdict_copy(&dst->verdict, d->verdict);
    dst->cache_hit = d->cache_hit;
    tsri_client_strcpy(dst->cache_level, sizeof dst->cache_level, d->cache_level);
    dst->verify_skipped = d->verify_skipped;
}

tsr_status tsri_client_region_encode(const tsr_client *c, const tsr_region *r,
                                     const tsr_client_compile_opts *opts,
                                     Tessera__V1__Region **region,
                                     Tessera__V1__CompileOptions *options, tsr_error *err)
{
    tsr_status st = tsr_region_to_pb(r, region, err);
    if (st != TSR_OK)
        return st;
    static const tsr_client_compile_opts none;
    if (!opts)
        opts = &none;
    tessera__v1__compile_options__init(options);
    options->arch = (char *)(opts->arch ? opts->arch : "");
    const char *force = opts->force;
    if (!force || !*force)
        force = tsri_client_forced(c, r->kind);
    options->force = (char *)(force ? force : "");
    options->policy = opts->policy == TSR_CLIENT_POLICY_MEASURE
                          ? TESSERA__V1__POLICY__POLICY_MEASURE
                          : TESSERA__V1__POLICY__POLICY_TIER;
    options->skip_verify = opts->skip_verify;
    options->no_reference = opts->no_reference;
    return TSR_OK;
}

/* Copies a reply into what the call was given (out), or sets err and returns
 * the error when the reply does not fit it. */
typedef tsr_status (*call_copy_fn)(const Tessera__V1__Reply *reply, void *out, tsr_error *err);

/* Sends body, hands the reply to copy and frees it whatever copy returned, so
 * no call holds a reply of its own. A hello's body is conn.c's (it carries
 * this library's versions): kind TESSERA__V1__REQUEST__BODY_HELLO takes body
 * NULL. Errors: the request's, else copy's. */
static tsr_status call_reply(tsr_client *c, Tessera__V1__Request__BodyCase kind, void *body,
                             call_copy_fn copy, void *out, int timeout_ms, tsr_error *err)
{
    Tessera__V1__Reply *reply;
    tsr_status st = kind == TESSERA__V1__REQUEST__BODY_HELLO
                        ? tsri_client_hello_reply(c, &reply, timeout_ms, err)
                        : tsri_client_request(c, kind, body, &reply, timeout_ms, err);
    if (st != TSR_OK)
        return st;
    st = copy(reply, out, err);
    tessera__v1__reply__free_unpacked(reply, NULL);
    return st;
}

/* A request whose body carries a region and its compile options (compile,
 * run, verify, candidates): r and opts are encoded into *region and
 * *options (the body's own members) for call_reply and freed after it,
 * whatever happened. */
static tsr_status call_region_request(tsr_client *c, const tsr_region *r,
                                      const tsr_client_compile_opts *opts,
                                      Tessera__V1__Request__BodyCase kind, void *body,
                                      Tessera__V1__Region **region,
                                      Tessera__V1__CompileOptions **options, call_copy_fn copy,
                                      void *out, int timeout_ms, tsr_error *err)
{
    Tessera__V1__CompileOptions encoded;
    tsr_status st = tsri_client_region_encode(c, r, opts, region, &encoded, err);
    if (st != TSR_OK)
        return st;
    *options = &encoded;
    st = call_reply(c, kind, body, copy, out, timeout_ms, err);
    tsr_region_pb_free(*region);
    *region = NULL;
    *options = NULL;
    return st;
}

static tsr_status call_health_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    const Tessera__V1__HealthReply *h = reply->health;
    *(tsr_client_health *)out = (tsr_client_health){
        .state = h->state >= 1 && h->state <= 3 ? (tsr_client_health_state)h->state
                                                : TSR_CLIENT_HEALTH_UNKNOWN,
        .uptime_ms = h->uptime_ms,
        .sessions = h->sessions,
        .recoveries = h->recoveries,
    };
    return TSR_OK;
}

tsr_status tsr_client_health_get(tsr_client *c, tsr_client_health *out, int timeout_ms,
                                 tsr_error *err)
{
    CALL_ARG_CHECK(c, err, "client is NULL");
    CALL_ARG_CHECK(out, err, "health: out is NULL");
    Tessera__V1__HealthRequest body = TESSERA__V1__HEALTH_REQUEST__INIT;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_HEALTH, &body, call_health_copy, out,
                      timeout_ms, err);
}

static void call_device_health_row(tsr_client_device_health *o, const Tessera__V1__DeviceHealth *d)
{
    *o = (tsr_client_device_health){
        .index = (int)d->index,
        .state = d->state >= 1 && d->state <= 3 ? (tsr_client_device_state)d->state
                                                : TSR_CLIENT_DEVICE_UNKNOWN,
        .recoveries = d->recoveries,
        .faults = d->faults,
    };
}

/* tsr_client_device and tsr_client_device_load begin with the same members,
 * by name rather than by type: one copy of them serves both. o and d are
 * evaluated more than once. */
#define CALL_DEVICE_COPY(o, d)                                                                     \
    do {                                                                                           \
        (o)->index = (d)->index;                                                                   \
        tsri_client_strcpy((o)->name, sizeof(o)->name, (d)->name);                                 \
        tsri_client_strcpy((o)->arch, sizeof(o)->arch, (d)->arch);                                 \
        (o)->memory_bytes = (d)->memory_bytes;                                                     \
        (o)->multiprocessors = (d)->multiprocessors;                                               \
    } while (0)

static void call_device_load_row(tsr_client_device_load *o, const Tessera__V1__Device *d)
{
    memset(o, 0, sizeof *o);
    CALL_DEVICE_COPY(o, d);
    o->memory_used_bytes = d->memory_used_bytes;
    o->buffers = d->buffers;
    o->queue_depth = d->queue_depth;
}

/* Where a listing of the devices goes: the first max into rows (of
 * tsr_client_device_health from a health reply, else of
 * tsr_client_device_load from a hello's), their number into *n. */
typedef struct call_devices {
    bool health;
    void *rows;
    int max;
    int *n;
} call_devices;

static tsr_status call_devices_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    const call_devices *to = out;
    size_t n = to->health ? reply->health->n_devices : reply->hello->n_devices;
    for (size_t i = 0; i < n && (int)i < to->max; i++) {
        if (to->health)
            call_device_health_row((tsr_client_device_health *)to->rows + i,
                                   reply->health->devices[i]);
        else
            call_device_load_row((tsr_client_device_load *)to->rows + i, reply->hello->devices[i]);
    }
    *to->n = (int)n;
    return TSR_OK;
}

tsr_status tsr_client_health_devices(tsr_client *c, tsr_client_device_health *out, int max, int *n,
                                     int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && n && (out || max == 0) && max >= 0, err, "client, out or n invalid");
    Tessera__V1__HealthRequest body = TESSERA__V1__HEALTH_REQUEST__INIT;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_HEALTH, &body, call_devices_copy,
                      &(call_devices){true, out, max, n}, timeout_ms, err);
}

static tsr_status call_hello_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    const Tessera__V1__HelloReply *h = reply->hello;
    tsr_client_info *info = out;
    if (!info)
        return TSR_OK;
    memset(info, 0, sizeof *info);
    tsri_client_strcpy(info->daemon_version, sizeof info->daemon_version, h->daemon_version);
    info->protocol_version = h->protocol_version;
    tsri_client_strcpy(info->backend, sizeof info->backend, h->backend);
    for (size_t i = 0; i < h->n_devices && i < TSR_CLIENT_MAX_DEVICES; i++) {
        tsr_client_device *o = &info->devices[info->n_devices++];
        CALL_DEVICE_COPY(o, h->devices[i]);
    }
    tsri_client_strcpy(info->driver_version, sizeof info->driver_version, h->driver_version);
    tsri_client_strcpy(info->compiler_version, sizeof info->compiler_version, h->compiler_version);
    tsri_client_strcpy(info->tenant, sizeof info->tenant, h->tenant);
    info->max_message_bytes = h->max_message_bytes;
    info->daemon_uid = h->daemon_uid;
    tsri_client_strcpy(info->nng_version, sizeof info->nng_version, h->nng_version);
    return TSR_OK;
}

tsr_status tsr_client_hello(tsr_client *c, tsr_client_info *info, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c, err, "client is NULL");
    return call_reply(c, TESSERA__V1__REQUEST__BODY_HELLO, NULL, call_hello_copy, info, timeout_ms,
                      err);
}

tsr_status tsr_client_devices(tsr_client *c, tsr_client_device_load *out, int max, int *n,
                              int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && n && (out || max == 0) && max >= 0, err, "client, out or n invalid");
    return call_reply(c, TESSERA__V1__REQUEST__BODY_HELLO, NULL, call_devices_copy,
                      &(call_devices){false, out, max, n}, timeout_ms, err);
}

static tsr_status call_compile_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    const Tessera__V1__CompileReply *cr = reply->compile;
    tsr_client_compiled *o = out;
    memset(o, 0, sizeof *o);
    o->kernel = cr->kernel;
    tsri_client_strcpy(o->key, sizeof o->key, cr->key);
    tsri_client_strcpy(o->fingerprint, sizeof o->fingerprint, cr->fingerprint);
    tsri_client_decision_copy(&o->decision, cr->decision);
    o->binary_bytes = cr->binary_bytes;
    o->compile_ms = cr->compile_ms;
    return TSR_OK;
}

tsr_status tsr_client_compile(tsr_client *c, const tsr_region *r,
                              const tsr_client_compile_opts *opts, tsr_client_compiled *out,
                              int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && r && out, err, "client, region and out must not be NULL");
    Tessera__V1__CompileRequest body = TESSERA__V1__COMPILE_REQUEST__INIT;
    return call_region_request(c, r, opts, TESSERA__V1__REQUEST__BODY_COMPILE, &body, &body.region,
                               &body.options, call_compile_copy, out, timeout_ms, err);
}

static tsr_status call_launch_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    if (out)
        *(double *)out = reply->launch->device_ms;
    return TSR_OK;
}

tsr_status tsr_client_launch(tsr_client *c, tsr_kernel kernel, const tsr_buffer *inputs,
                             int n_inputs, tsr_buffer output, double *device_ms, int timeout_ms,
                             tsr_error *err)
{
    CALL_ARG_CHECK(c && n_inputs >= 0 && (inputs || n_inputs == 0), err,
                   "client or inputs invalid");
    Tessera__V1__LaunchRequest body = TESSERA__V1__LAUNCH_REQUEST__INIT;
    body.kernel = kernel;
    body.n_inputs = (size_t)n_inputs;
    body.inputs = (uint64_t *)inputs;
    body.output = output;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_LAUNCH, &body, call_launch_copy, device_ms,
                      timeout_ms, err);
}

tsr_status tsr_client_run(tsr_client *c, const tsr_region *r, const tsr_client_compile_opts *opts,
                          const void *const *inputs, void *output, tsr_client_decision *decision,
                          int timeout_ms, tsr_error *err)
{
    return tsr_client_run_on(c, r, opts, -1, inputs, output, decision, NULL, timeout_ms, err);
}

/* Where a run's reply goes: its output (described by desc) and the optional
 * device and decision. */
typedef struct call_run {
    const tsr_tensor_desc *desc;
    void *output;
    int *ran_on;
    tsr_client_decision *decision;
} call_run;

static tsr_status call_run_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    const Tessera__V1__RunReply *rr = reply->run;
    const call_run *to = out;
    uint64_t want = tsr_tensor_desc_bytes(to->desc);
    const Tessera__V1__Tensor *o = rr->output;
    if (!o || o->data_case != TESSERA__V1__TENSOR__DATA_INLINE_DATA || o->inline_data.len != want ||
        o->dtype != (Tessera__V1__DType)(to->desc->dtype + 1))
        return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                             "run reply: output is not %llu inline bytes of %s",
                             (unsigned long long)want, tsr_dtype_name(to->desc->dtype));
    if (want)
        memcpy(to->output, o->inline_data.data, want);
    if (to->ran_on)
        *to->ran_on = (int)rr->device;
    if (to->decision)
        tsri_client_decision_copy(to->decision, rr->decision);
    return TSR_OK;
}

tsr_status tsr_client_run_on(tsr_client *c, const tsr_region *r,
                             const tsr_client_compile_opts *opts, int device,
                             const void *const *inputs, void *output, tsr_client_decision *decision,
                             int *ran_on, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && r && output, err, "client, region and output must not be NULL");
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out_desc;
    int n = tsr_region_signature(r, in, &out_desc);
    CALL_ARG_CHECK(n == 0 || inputs, err, "inputs is NULL");
    for (int i = 0; i < n; i++)
        CALL_ARG_CHECK(inputs[i], err, "an input pointer is NULL");

    Tessera__V1__RunRequest body = TESSERA__V1__RUN_REQUEST__INIT;
    Tessera__V1__Tensor tensors[TSR_MAX_REGION_INPUTS];
    Tessera__V1__Tensor *tensor_ptrs[TSR_MAX_REGION_INPUTS];
    for (int i = 0; i < n; i++) {
        Tessera__V1__Tensor t;
        tessera__v1__tensor__init(&t);
        t.dtype = (Tessera__V1__DType)(in[i].dtype + 1);
        t.n_shape = (size_t)in[i].rank;
        t.shape = in[i].shape;
        t.data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
        t.inline_data.len = tsr_tensor_desc_bytes(&in[i]);
        t.inline_data.data = (uint8_t *)inputs[i];
        tensors[i] = t;
        tensor_ptrs[i] = &tensors[i];
    }
    body.n_inputs = (size_t)n;
    body.inputs = tensor_ptrs;
    if (device >= 0) {
        body.device_present_case = TESSERA__V1__RUN_REQUEST__DEVICE_PRESENT_DEVICE;
        body.device = (uint32_t)device;
    }
    call_run to = {&out_desc, output, ran_on, decision};
    return call_region_request(c, r, opts, TESSERA__V1__REQUEST__BODY_RUN, &body, &body.region,
                               &body.options, call_run_copy, &to, timeout_ms, err);
}

static tsr_status call_verify_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    tsr_client_verified *o = out;
    memset(o, 0, sizeof *o);
    tsri_client_strcpy(o->candidate, sizeof o->candidate, reply->verify->candidate);
    o->tier = reply->verify->tier;
    call_verdict_copy(&o->verdict, reply->verify->verdict);
    return TSR_OK;
}

tsr_status tsr_client_verify(tsr_client *c, const tsr_region *r, const tsr_client_verify_opts *opts,
                             tsr_client_verified *out, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && r && out, err, "client, region and out must not be NULL");
    static const tsr_client_verify_opts none;
    if (!opts)
        opts = &none;
    Tessera__V1__VerifyRequest body = TESSERA__V1__VERIFY_REQUEST__INIT;
    const char *candidate = opts->candidate;
    if (!candidate || !*candidate)
        candidate = tsri_client_forced(c, r->kind);
    body.candidate = (char *)(candidate ? candidate : "");
    body.seed = opts->seed;
    body.random_probes = opts->random_probes;
    return call_region_request(c, r, &opts->compile, TESSERA__V1__REQUEST__BODY_VERIFY, &body,
                               &body.region, &body.options, call_verify_copy, out, timeout_ms, err);
}

/* Where a listing's reply goes: a malloc'd array and its length. */
typedef struct call_list {
    void **rows;
    size_t *count;
} call_list;

static tsr_status call_candidates_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    const Tessera__V1__CandidatesReply *cr = reply->candidates;
    const call_list *to = out;
    tsr_client_candidate *rows = calloc(cr->n_candidates ? cr->n_candidates : 1, sizeof *rows);
    if (!rows)
        return tsr_error_set(err, TSR_NO_MEMORY, "candidates: out of memory");
    for (size_t i = 0; i < cr->n_candidates; i++) {
        const Tessera__V1__CandidateInfo *ci = cr->candidates[i];
        tsri_client_strcpy(rows[i].name, sizeof rows[i].name, ci->name);
        rows[i].tier = ci->tier;
        rows[i].version = ci->version;
        rows[i].applies = ci->applies;
        tsri_client_strcpy(rows[i].why, sizeof rows[i].why, ci->why);
        call_verdict_copy(&rows[i].verdict, ci->verdict);
        rows[i].selected = ci->selected;
    }
    *to->rows = rows;
    *to->count = cr->n_candidates;
    return TSR_OK;
}

tsr_status tsr_client_candidates(tsr_client *c, const tsr_region *r,
                                 const tsr_client_compile_opts *opts, tsr_client_candidate **rows,
                                 size_t *count, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && r && rows && count, err, "client, region, rows and count must be set");
    *rows = NULL;
    *count = 0;
    Tessera__V1__CandidatesRequest body = TESSERA__V1__CANDIDATES_REQUEST__INIT;
    return call_region_request(c, r, opts, TESSERA__V1__REQUEST__BODY_CANDIDATES, &body,
                               &body.region, &body.options, call_candidates_copy,
                               &(call_list){(void **)rows, count}, timeout_ms, err);
}

void tsr_client_candidates_free(tsr_client_candidate *rows)
{
    free(rows);
}

tsr_status tsr_client_buffer_alloc(tsr_client *c, tsr_client_dtype dtype, int rank,
                                   const int64_t *shape, tsr_buffer *out, uint64_t *bytes,
                                   int timeout_ms, tsr_error *err)
{
    return tsr_client_buffer_alloc_on(c, dtype, rank, shape, -1, out, bytes, NULL, timeout_ms, err);
}

/* Where a new buffer's reply goes: its handle, and its size and device when
 * asked for (a buffer import's reply names no device). */
typedef struct call_buffer {
    bool imported;
    tsr_buffer *out;
    uint64_t *bytes;
    int *placed;
} call_buffer;

static tsr_status call_buffer_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    const call_buffer *to = out;
    *to->out = to->imported ? reply->buffer_import->buffer : reply->buffer_alloc->buffer;
    if (to->bytes)
        *to->bytes = to->imported ? reply->buffer_import->bytes : reply->buffer_alloc->bytes;
    if (to->placed)
        *to->placed = (int)reply->buffer_alloc->device;
    return TSR_OK;
}

tsr_status tsr_client_buffer_alloc_on(tsr_client *c, tsr_client_dtype dtype, int rank,
                                      const int64_t *shape, int device, tsr_buffer *out,
                                      uint64_t *bytes, int *placed, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && out && rank >= 0 && (shape || rank == 0), err,
                   "client, shape or out invalid");
    Tessera__V1__BufferAllocRequest body = TESSERA__V1__BUFFER_ALLOC_REQUEST__INIT;
    body.dtype = (Tessera__V1__DType)(dtype + 1);
    body.n_shape = (size_t)rank;
    body.shape = (int64_t *)shape;
    if (device >= 0) {
        body.device_present_case = TESSERA__V1__BUFFER_ALLOC_REQUEST__DEVICE_PRESENT_DEVICE;
        body.device = (uint32_t)device;
    }
    return call_reply(c, TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC, &body, call_buffer_copy,
                      &(call_buffer){false, out, bytes, placed}, timeout_ms, err);
}

tsr_status tsri_client_buffer_new(tsr_client *c, Tessera__V1__Request__BodyCase kind, void *body,
                                  tsr_buffer *out, uint64_t *bytes, int timeout_ms, tsr_error *err)
{
    bool imported = kind == TESSERA__V1__REQUEST__BODY_BUFFER_IMPORT;
    return call_reply(c, kind, body, call_buffer_copy, &(call_buffer){imported, out, bytes, NULL},
                      timeout_ms, err);
}

tsr_status tsr_client_buffer_write(tsr_client *c, tsr_buffer buf, uint64_t offset, const void *data,
                                   size_t len, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && (data || len == 0), err, "client or data is NULL");
    Tessera__V1__BufferWriteRequest body = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    body.buffer = buf;
    body.offset = offset;
    body.data.len = len;
    body.data.data = (uint8_t *)data;
    return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_BUFFER_WRITE, &body, NULL, timeout_ms,
                               err);
}

/* Where a buffer read's bytes go: len bytes at data, the count into *got. */
typedef struct call_read {
    void *data;
    size_t len;
    size_t *got;
} call_read;

static tsr_status call_read_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    const call_read *to = out;
    size_t n = reply->buffer_read->data.len;
    if (n > to->len)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "read returned %zu bytes, asked for %zu", n,
                             to->len);
    if (n)
        memcpy(to->data, reply->buffer_read->data.data, n);
    if (to->got)
        *to->got = n;
    return TSR_OK;
}

tsr_status tsr_client_buffer_read(tsr_client *c, tsr_buffer buf, uint64_t offset, void *data,
                                  size_t len, size_t *got, int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && data && len > 0, err, "client, data or len invalid");
    Tessera__V1__BufferReadRequest body = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    body.buffer = buf;
    body.offset = offset;
    body.length = len;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_BUFFER_READ, &body, call_read_copy,
                      &(call_read){data, len, got}, timeout_ms, err);
}

/* Frees one of the daemon's handles: a kernel's, else a buffer's. */
static tsr_status call_handle_free(tsr_client *c, bool kernel, uint64_t handle, int timeout_ms,
                                   tsr_error *err)
{
    CALL_ARG_CHECK(c, err, "client is NULL");
    Tessera__V1__KernelFreeRequest kernel_body = TESSERA__V1__KERNEL_FREE_REQUEST__INIT;
    Tessera__V1__BufferFreeRequest buffer_body = TESSERA__V1__BUFFER_FREE_REQUEST__INIT;
    kernel_body.kernel = handle;
    buffer_body.buffer = handle;
    if (kernel)
        return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_KERNEL_FREE, &kernel_body, NULL,
                                   timeout_ms, err);
    return tsri_client_request(c, TESSERA__V1__REQUEST__BODY_BUFFER_FREE, &buffer_body, NULL,
                               timeout_ms, err);
}

tsr_status tsr_client_buffer_free(tsr_client *c, tsr_buffer buf, int timeout_ms, tsr_error *err)
{
    return call_handle_free(c, false, buf, timeout_ms, err);
}

tsr_status tsr_client_kernel_free(tsr_client *c, tsr_kernel kernel, int timeout_ms, tsr_error *err)
{
    return call_handle_free(c, true, kernel, timeout_ms, err);
}

static tsr_status call_stats_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    const Tessera__V1__StatsReply *sr = reply->stats;
    tsr_client_stats *s = calloc(1, sizeof *s);
    if (s) {
        s->counters = calloc(sr->n_counters + 1, sizeof *s->counters);
        s->candidates = calloc(sr->n_candidates + 1, sizeof *s->candidates);
        s->prometheus_text = strdup(sr->prometheus_text ? sr->prometheus_text : "");
    }
    if (!s || !s->counters || !s->candidates || !s->prometheus_text) {
        tsr_client_stats_free(s);
        return tsr_error_set(err, TSR_NO_MEMORY, "stats: out of memory");
    }
    s->n_counters = sr->n_counters;
    for (size_t i = 0; i < sr->n_counters; i++) {
        tsri_client_strcpy(s->counters[i].name, sizeof s->counters[i].name, sr->counters[i]->name);
        s->counters[i].value = sr->counters[i]->value;
    }
    s->n_candidates = sr->n_candidates;
    for (size_t i = 0; i < sr->n_candidates; i++) {
        const Tessera__V1__CandidateStats *cs = sr->candidates[i];
        tsr_client_candidate_stats *o = &s->candidates[i];
        *o = (tsr_client_candidate_stats){
            .won = cs->won,
            .forced = cs->forced,
            .declined = cs->declined,
            .failed_verification = cs->failed_verification,
            .unverified = cs->unverified,
        };
        tsri_client_strcpy(o->kind, sizeof o->kind, cs->kind);
        tsri_client_strcpy(o->name, sizeof o->name, cs->name);
    }
    *(tsr_client_stats **)out = s;
    return TSR_OK;
}

tsr_status tsr_client_stats_get(tsr_client *c, bool prometheus, tsr_client_stats **out,
                                int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && out, err, "client or out is NULL");
    *out = NULL;
    Tessera__V1__StatsRequest body = TESSERA__V1__STATS_REQUEST__INIT;
    body.prometheus = prometheus;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_STATS, &body, call_stats_copy, out, timeout_ms,
                      err);
}

void tsr_client_stats_free(tsr_client_stats *s)
{
    if (!s)
        return;
    free(s->counters);
    free(s->candidates);
    free(s->prometheus_text);
    free(s);
}

double tsr_client_stats_counter(const tsr_client_stats *s, const char *name, double def)
{
    if (!s || !name)
        return def;
    for (size_t i = 0; i < s->n_counters; i++)
        if (strcmp(s->counters[i].name, name) == 0)
            return s->counters[i].value;
    return def;
}

/* Where a cache listing's reply goes: a call_list whose rows are stride
 * bytes apart, each starting with a tsr_client_cache_entry, with the origin
 * (when origin_at is not 0) at origin_at bytes into each: both public row
 * types in one place. */
typedef struct call_cache_rows {
    call_list list;
    size_t stride, origin_at;
} call_cache_rows;

static tsr_status call_cache_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    const Tessera__V1__CacheListReply *cl = reply->cache_list;
    const call_cache_rows *to = out;
    uint8_t *rows = calloc(cl->n_entries + 1, to->stride);
    if (!rows)
        return tsr_error_set(err, TSR_NO_MEMORY, "cache list: out of memory");
    for (size_t i = 0; i < cl->n_entries; i++) {
        const Tessera__V1__CacheEntry *e = cl->entries[i];
        tsr_client_cache_entry *row = (tsr_client_cache_entry *)(rows + i * to->stride);
        tsri_client_strcpy(row->key, sizeof row->key, e->key);
        tsri_client_strcpy(row->candidate, sizeof row->candidate, e->candidate);
        tsri_client_strcpy(row->kind, sizeof row->kind, e->kind);
        tsri_client_strcpy(row->arch, sizeof row->arch, e->arch);
        row->bytes = e->bytes;
        row->in_memory = e->in_memory;
        row->on_disk = e->on_disk;
        row->last_used_unix_ms = e->last_used_unix_ms;
        row->hits = e->hits;
        if (to->origin_at != 0)
            tsri_client_strcpy((char *)row + to->origin_at, TSR_CLIENT_NAME_MAX, e->origin);
    }
    *to->list.rows = rows;
    *to->list.count = cl->n_entries;
    return TSR_OK;
}

static tsr_status calls_cache_list(tsr_client *c, void **rows, size_t stride, size_t origin_at,
                                   size_t *count, int timeout_ms, tsr_error *err)
{
    *rows = NULL;
    *count = 0;
    Tessera__V1__CacheListRequest body = TESSERA__V1__CACHE_LIST_REQUEST__INIT;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_CACHE_LIST, &body, call_cache_copy,
                      &(call_cache_rows){{rows, count}, stride, origin_at}, timeout_ms, err);
}

tsr_status tsr_client_cache_list(tsr_client *c, tsr_client_cache_entry **rows, size_t *count,
                                 int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && rows && count, err, "client, rows or count is NULL");
    return calls_cache_list(c, (void **)rows, sizeof **rows, 0, count, timeout_ms, err);
}

void tsr_client_cache_free(tsr_client_cache_entry *rows)
{
    free(rows);
}

tsr_status tsr_client_cache_list_rows(tsr_client *c, tsr_client_cache_row **rows, size_t *count,
                                      int timeout_ms, tsr_error *err)
{
    CALL_ARG_CHECK(c && rows && count, err, "client, rows or count is NULL");
    return calls_cache_list(c, (void **)rows, sizeof **rows, offsetof(tsr_client_cache_row, origin),
                            count, timeout_ms, err);
}

void tsr_client_cache_rows_free(tsr_client_cache_row *rows)
{
    free(rows);
}

static tsr_status call_evict_copy(const Tessera__V1__Reply *reply, void *out, tsr_error *err)
{
    (void)err;
    if (out)
        *(uint32_t *)out = reply->cache_evict->evicted;
    return TSR_OK;
}

tsr_status tsr_client_cache_evict(tsr_client *c, const char *key, uint32_t *evicted, int timeout_ms,
                                  tsr_error *err)
{
    CALL_ARG_CHECK(c && key && *key, err, "client or key missing");
    Tessera__V1__CacheEvictRequest body = TESSERA__V1__CACHE_EVICT_REQUEST__INIT;
    body.key = (char *)key;
    return call_reply(c, TESSERA__V1__REQUEST__BODY_CACHE_EVICT, &body, call_evict_copy, evicted,
                      timeout_ms, err);
}
