/*
 * dispatch_test.c — the request path without sockets: hand-built protobuf
 * requests go through tsrd_dispatch on a real daemon context (CPU backend,
 * kernel cache in a temporary directory) and the replies are captured.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "serve/dispatch.h"
#include "serve/session.h"
#include "tessera/region_pb.h"
#include "../support/unit_daemon.h"

#define ORIGINS 8

typedef struct harness {
    unit_daemon u;
    /* the last reply each origin received, and how many it received */
    Tessera__V1__Reply *last[ORIGINS];
    int count[ORIGINS];
} harness;

static harness *h;

static void capture(void *sink, void *origin, const uint8_t *data, size_t len)
{
    harness *hh = sink;
    int slot = (int)(intptr_t)origin;
    if (hh->last[slot] != NULL)
        tessera__v1__reply__free_unpacked(hh->last[slot], NULL);
    hh->last[slot] = tessera__v1__reply__unpack(NULL, len, data);
    cr_assert_not_null(hh->last[slot], "reply does not decode");
    hh->count[slot]++;
}

static void setup(void)
{
    h = calloc(1, sizeof *h);
    unit_daemon_start(&h->u, "dispatch", 1 << 20);
    h->u.d.reply_fn = capture;
    h->u.d.reply_sink = h;
}

static void teardown(void)
{
    unit_daemon_stop(&h->u);
    for (int i = 0; i < ORIGINS; i++)
        if (h->last[i] != NULL)
            tessera__v1__reply__free_unpacked(h->last[i], NULL);
    free(h);
}

/* Hands len bytes from origin on pipe to the dispatcher; the loop does not run. */
static void dispatch_on(int origin, uint32_t pipe, const uint8_t *data, size_t len)
{
    tsrd_dispatch(&h->u.d, tsrd_session_get(&h->u.d, pipe), (void *)(intptr_t)origin, data, len,
                  NULL, NULL);
}

/* Sends req from origin on pipe 1 and runs the loop until all work is done. */
static Tessera__V1__Reply *send_on(Tessera__V1__Request *req, int origin, uint32_t pipe)
{
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    tessera__v1__request__pack(req, buf);
    dispatch_on(origin, pipe, buf, len);
    free(buf);
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    return h->last[origin];
}

static Tessera__V1__Reply *request(Tessera__V1__Request *req)
{
    return send_on(req, 0, 1);
}

static uint64_t alloc_buffer(Tessera__V1__DType dtype, int64_t d0, int64_t d1)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferAllocRequest alloc = TESSERA__V1__BUFFER_ALLOC_REQUEST__INIT;
    int64_t shape[2] = {d0, d1};
    alloc.dtype = dtype;
    alloc.shape = shape;
    alloc.n_shape = 2;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC;
    req.buffer_alloc = &alloc;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    return r->buffer_alloc->buffer;
}

static Tessera__V1__Reply *write_buffer(uint64_t buffer, uint64_t offset, const void *data,
                                        size_t len)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    w.buffer = buffer;
    w.offset = offset;
    w.data.data = (uint8_t *)data;
    w.data.len = len;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_WRITE;
    req.buffer_write = &w;
    return request(&req);
}

static Tessera__V1__Region *matmul_pb(int64_t m, int64_t n, int64_t k)
{
    tsr_region r;
    Tessera__V1__Region *pb;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F32, m, n, k, NULL), TSR_OK);
    cr_assert_eq(tsr_region_to_pb(&r, &pb, NULL), TSR_OK);
    tsr_region_free(&r);
    return pb;
}

/* A 2x2 f32 buffer holding v. */
static uint64_t buffer_2x2(const float v[4])
{
    uint64_t b = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 2, 2);
    write_buffer(b, 0, v, 4 * sizeof v[0]);
    return b;
}

/* Reads buffer from offset to its end. */
static Tessera__V1__Reply *read_buffer(uint64_t buffer, uint64_t offset)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferReadRequest rd = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    rd.buffer = buffer;
    rd.offset = offset;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
    req.buffer_read = &rd;
    return request(&req);
}

/* Compiles a 2x2x2 f32 matmul with a request built in the caller's req and
 * comp (free comp->region with tsr_region_pb_free): the reply, asserted OK. */
static Tessera__V1__Reply *compile_matmul(Tessera__V1__Request *req,
                                          Tessera__V1__CompileRequest *comp)
{
    tessera__v1__request__init(req);
    tessera__v1__compile_request__init(comp);
    comp->region = matmul_pb(2, 2, 2);
    req->body_case = TESSERA__V1__REQUEST__BODY_COMPILE;
    req->compile = comp;
    Tessera__V1__Reply *r = request(req);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    return r;
}

/* A launch request of kernel on inputs[0..1] into out, in the caller's req
 * and launch. */
static void launch_request(Tessera__V1__Request *req, Tessera__V1__LaunchRequest *launch,
                           uint64_t kernel, uint64_t *inputs, uint64_t out)
{
    tessera__v1__request__init(req);
    tessera__v1__launch_request__init(launch);
    launch->kernel = kernel;
    launch->inputs = inputs;
    launch->n_inputs = 2;
    launch->output = out;
    req->body_case = TESSERA__V1__REQUEST__BODY_LAUNCH;
    req->launch = launch;
}

/* A compiled 2x2x2 f32 matmul on the inputs {1, 2, 3, 4} and the identity,
 * its output buffer, and a launch request over them; the request points into
 * the struct, which must stay in place while it is sent. */
struct matmul_launch {
    Tessera__V1__Request req;
    Tessera__V1__LaunchRequest launch;
    uint64_t inputs[2];
    uint64_t out;
};

static void matmul_launch_prepare(struct matmul_launch *ml)
{
    Tessera__V1__Request req;
    Tessera__V1__CompileRequest comp;
    uint64_t kernel = compile_matmul(&req, &comp)->compile->kernel;
    tsr_region_pb_free(comp.region);
    float av[4] = {1, 2, 3, 4}, bv[4] = {1, 0, 0, 1};
    ml->inputs[0] = buffer_2x2(av);
    ml->inputs[1] = buffer_2x2(bv);
    ml->out = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 2, 2);
    launch_request(&ml->req, &ml->launch, kernel, ml->inputs, ml->out);
}

TestSuite(dispatch, .init = setup, .fini = teardown);

Test(dispatch, garbage_bytes_get_bad_message_with_id_zero)
{
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    dispatch_on(0, 1, garbage, sizeof garbage);
    cr_assert_eq(h->count[0], 1);
    cr_assert_eq(h->last[0]->status, TSR_BAD_MESSAGE);
    cr_assert_eq(h->last[0]->id, 0);
    cr_assert_str_eq(h->last[0]->message, "7 bytes do not decode as a tessera.v1.Request");
}

Test(dispatch, unset_body_is_unknown_request)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = 42;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_UNKNOWN_REQUEST);
    cr_assert_eq(r->id, 42);
    cr_assert_eq(r->body_case, TESSERA__V1__REPLY__BODY__NOT_SET);
}

Test(dispatch, hello_reports_backend_and_limits)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__HelloRequest hello = TESSERA__V1__HELLO_REQUEST__INIT;
    req.id = 1;
    req.body_case = TESSERA__V1__REQUEST__BODY_HELLO;
    req.hello = &hello;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_OK);
    cr_assert_eq(r->body_case, TESSERA__V1__REPLY__BODY_HELLO);
    cr_assert_str_eq(r->hello->backend, "cpu");
    cr_assert_eq(r->hello->protocol_version, 1);
    cr_assert_str_eq(r->hello->tenant, "default");
    cr_assert_eq(r->hello->max_message_bytes, 1 << 20);
    cr_assert_eq(r->hello->n_devices, 1);
    cr_assert_str_eq(r->hello->devices[0]->arch, "cpu");
    cr_assert_str_eq(r->hello->driver_version, "");
}

Test(dispatch, buffers_round_trip_and_are_bounds_checked)
{
    uint64_t b = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 2, 3);
    cr_assert_eq(h->last[0]->buffer_alloc->bytes, 24);
    float data[6] = {1, 2, 3, 4, 5, 6};
    cr_assert_eq(write_buffer(b, 0, data, sizeof data)->status, TSR_OK);
    Tessera__V1__Reply *r = write_buffer(b, 8, data, 20);
    cr_assert_eq(r->status, TSR_BUFFER_MISMATCH);
    cr_assert_str_eq(r->message,
                     "buffer_write: 20 bytes at offset 8 pass the end of the 24-byte buffer");

    r = read_buffer(b, 4);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    cr_assert_eq(r->buffer_read->data.len, 20);
    cr_assert_eq(memcmp(r->buffer_read->data.data, data + 1, 20), 0);
    cr_assert_eq(read_buffer(b, 25)->status, TSR_BUFFER_MISMATCH);

    Tessera__V1__BufferFreeRequest fr = TESSERA__V1__BUFFER_FREE_REQUEST__INIT;
    fr.buffer = b;
    Tessera__V1__Request freq = TESSERA__V1__REQUEST__INIT;
    freq.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_FREE;
    freq.buffer_free = &fr;
    cr_assert_eq(request(&freq)->status, TSR_OK);
    cr_assert_eq(request(&freq)->status, TSR_NOT_FOUND);
    cr_assert_eq(read_buffer(b, 0)->status, TSR_NOT_FOUND);
}

Test(dispatch, bad_alloc_shapes_and_dtypes_are_named)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferAllocRequest alloc = TESSERA__V1__BUFFER_ALLOC_REQUEST__INIT;
    int64_t shape[2] = {4, 0};
    alloc.shape = shape;
    alloc.n_shape = 2;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC;
    req.buffer_alloc = &alloc;
    cr_assert_eq(request(&req)->status, TSR_BAD_DTYPE);
    alloc.dtype = TESSERA__V1__DTYPE__DTYPE_BF16;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_BAD_DIMENSION);
    cr_assert_str_eq(r->message, "buffer_alloc.shape[1]: must be > 0, got 0");
}

Test(dispatch, foreign_handles_are_not_found)
{
    uint64_t b = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 1, 1);
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferReadRequest rd = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    rd.buffer = b;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
    req.buffer_read = &rd;
    cr_assert_eq(send_on(&req, 1, 2)->status, TSR_NOT_FOUND);
    cr_assert_eq(send_on(&req, 1, 1)->status, TSR_OK);
    /* The owner's pipe goes away: its buffers go with it. */
    tsrd_session_close(&h->u.d, 1);
    cr_assert_eq(h->u.d.default_tenant.buffers, 0);
    cr_assert_eq(send_on(&req, 1, 3)->status, TSR_NOT_FOUND);
}

Test(dispatch, a_resent_id_is_answered_from_memory)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferAllocRequest alloc = TESSERA__V1__BUFFER_ALLOC_REQUEST__INIT;
    int64_t shape[1] = {16};
    alloc.dtype = TESSERA__V1__DTYPE__DTYPE_F16;
    alloc.shape = shape;
    alloc.n_shape = 1;
    req.id = 99;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_ALLOC;
    req.buffer_alloc = &alloc;
    /* The resend arrives while the first copy is still queued. */
    size_t len = tessera__v1__request__get_packed_size(&req);
    uint8_t buf[256];
    tessera__v1__request__pack(&req, buf);
    dispatch_on(0, 1, buf, len);
    dispatch_on(1, 1, buf, len);
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(h->count[0], 1);
    cr_assert_eq(h->count[1], 1);
    cr_assert_eq(h->last[0]->buffer_alloc->buffer, h->last[1]->buffer_alloc->buffer);
    /* And once more after it finished. */
    dispatch_on(2, 1, buf, len);
    cr_assert_eq(h->count[2], 1);
    cr_assert_eq(h->last[2]->buffer_alloc->buffer, h->last[0]->buffer_alloc->buffer);
    cr_assert_eq(h->u.d.default_tenant.buffers, 1, "executed once");
    cr_assert_eq(h->u.d.metrics.replays, 2);
}

Test(dispatch, compile_then_launch_checks_every_buffer)
{
    Tessera__V1__Request req;
    Tessera__V1__CompileRequest comp;
    Tessera__V1__Reply *r = compile_matmul(&req, &comp);
    cr_assert_str_eq(r->compile->decision->candidate, "reference");
    cr_assert_eq(r->compile->decision->cache_hit, false);
    cr_assert_eq(strlen(r->compile->key), 64);
    uint64_t kernel = r->compile->kernel;
    r = request(&req);
    cr_assert_eq(r->compile->decision->cache_hit, true);
    cr_assert_str_eq(r->compile->decision->cache_level, "memory");
    tsr_region_pb_free(comp.region);

    float av[4] = {1, 2, 3, 4}, bv[4] = {1, 0, 0, 1};
    uint64_t a = buffer_2x2(av);
    uint64_t b = buffer_2x2(bv);
    uint64_t small = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 1, 2);
    uint64_t out = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 2, 2);

    Tessera__V1__Request lreq;
    Tessera__V1__LaunchRequest launch;
    uint64_t inputs[2] = {a, small};
    launch_request(&lreq, &launch, kernel, inputs, out);
    r = request(&lreq);
    cr_assert_eq(r->status, TSR_BUFFER_MISMATCH);
    cr_assert_str_eq(r->message, "launch.inputs[1] (b): buffer holds 8 bytes of f32, the region "
                                 "needs 16 bytes of f32");
    launch.n_inputs = 1;
    r = request(&lreq);
    cr_assert_eq(r->status, TSR_BUFFER_MISMATCH);
    cr_assert_str_eq(r->message, "launch.inputs: 1 inputs given, the matmul region takes 2 (a, b)");
    launch.n_inputs = 2;
    inputs[1] = b;
    r = request(&lreq);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);

    r = read_buffer(out, 0);
    cr_assert_eq(r->buffer_read->data.len, 16);
    cr_assert_eq(memcmp(r->buffer_read->data.data, av, 16), 0);
}

/* A launch pins its kernel when it is dispatched: a kernel_free that arrives
 * while the launch is still queued drops the handle at once, and the kernel
 * itself stays loaded until the launch completes. */
Test(dispatch, a_freed_kernel_lives_until_the_launch_holding_it_completes)
{
    Tessera__V1__Request req;
    Tessera__V1__CompileRequest comp;
    Tessera__V1__Reply *r = compile_matmul(&req, &comp);
    uint64_t kernel = r->compile->kernel;
    cr_assert_eq(h->u.d.default_tenant.kernels, 1);

    float av[4] = {1, 2, 3, 4}, bv[4] = {0, 1, 1, 0}, want[4] = {2, 1, 4, 3};
    uint64_t a = buffer_2x2(av);
    uint64_t b = buffer_2x2(bv);
    uint64_t out = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 2, 2);

    Tessera__V1__Request lreq;
    Tessera__V1__LaunchRequest launch;
    uint64_t inputs[2] = {a, b};
    launch_request(&lreq, &launch, kernel, inputs, out);
    lreq.id = 7;
    Tessera__V1__KernelFreeRequest kf = TESSERA__V1__KERNEL_FREE_REQUEST__INIT;
    kf.kernel = kernel;
    Tessera__V1__Request freq = TESSERA__V1__REQUEST__INIT;
    freq.id = 8;
    freq.body_case = TESSERA__V1__REQUEST__BODY_KERNEL_FREE;
    freq.kernel_free = &kf;
    uint8_t lbuf[256], fbuf[64];
    size_t llen = tessera__v1__request__pack(&lreq, lbuf);
    size_t flen = tessera__v1__request__pack(&freq, fbuf);
    dispatch_on(1, 1, lbuf, llen);
    dispatch_on(2, 1, fbuf, flen);
    /* The free is answered on the loop, before the launch has run. */
    cr_assert_eq(h->count[1], 0);
    cr_assert_eq(h->count[2], 1);
    cr_assert_eq(h->last[2]->status, TSR_OK, "%s", h->last[2]->message);
    cr_assert_eq(h->last[2]->body_case, TESSERA__V1__REPLY__BODY_KERNEL_FREE);
    cr_assert_eq(h->u.d.default_tenant.kernels, 1, "the queued launch still holds the kernel");
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(h->count[1], 1);
    cr_assert_eq(h->last[1]->status, TSR_OK, "%s", h->last[1]->message);
    cr_assert_eq(h->u.d.default_tenant.kernels, 0);

    r = read_buffer(out, 0);
    cr_assert_eq(r->buffer_read->data.len, 16);
    cr_assert_eq(memcmp(r->buffer_read->data.data, want, 16), 0);

    /* The handle is gone for good; a recompile loads a new kernel. */
    lreq.id = 9;
    r = request(&lreq);
    cr_assert_eq(r->status, TSR_NOT_FOUND);
    freq.id = 10;
    r = request(&freq);
    cr_assert_eq(r->status, TSR_NOT_FOUND);
    char msg[96];
    snprintf(msg, sizeof msg, "kernel_free.kernel: no kernel %#llx", (unsigned long long)kernel);
    cr_assert_str_eq(r->message, msg);
    r = request(&req);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    cr_assert_neq(r->compile->kernel, kernel);
    cr_assert_neq(r->compile->kernel, 0);
    cr_assert_eq(h->u.d.default_tenant.kernels, 1);
    tsr_region_pb_free(comp.region);
}

Test(dispatch, run_with_inline_tensors_and_mismatches)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__RunRequest run = TESSERA__V1__RUN_REQUEST__INIT;
    Tessera__V1__Tensor ta, tb;
    tessera__v1__tensor__init(&ta);
    tessera__v1__tensor__init(&tb);
    Tessera__V1__Tensor *tensors[2] = {&ta, &tb};
    int64_t shape[2] = {2, 2};
    float av[4] = {1, 2, 3, 4}, bv[4] = {2, 0, 0, 2};
    ta.dtype = tb.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ta.shape = tb.shape = shape;
    ta.n_shape = tb.n_shape = 2;
    ta.data_case = tb.data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
    ta.inline_data.data = (uint8_t *)av;
    ta.inline_data.len = 16;
    tb.inline_data.data = (uint8_t *)bv;
    tb.inline_data.len = 12;
    run.region = matmul_pb(2, 2, 2);
    run.inputs = tensors;
    run.n_inputs = 2;
    req.body_case = TESSERA__V1__REQUEST__BODY_RUN;
    req.run = &run;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_BUFFER_MISMATCH);
    cr_assert_str_eq(r->message, "run.inputs[1] (b): 12 inline bytes, the region needs 16");
    tb.inline_data.len = 16;
    r = request(&req);
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    cr_assert_eq(r->run->output->data_case, TESSERA__V1__TENSOR__DATA_INLINE_DATA);
    const float want[4] = {2, 4, 6, 8};
    cr_assert_eq(r->run->output->inline_data.len, 16);
    cr_assert_eq(memcmp(r->run->output->inline_data.data, want, 16), 0);
    tsr_region_pb_free(run.region);
}

Test(dispatch, inline_tensors_past_the_limit_are_too_large)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__RunRequest run = TESSERA__V1__RUN_REQUEST__INIT;
    Tessera__V1__Tensor ta;
    tessera__v1__tensor__init(&ta);
    Tessera__V1__Tensor *tensors[1] = {&ta};
    static uint8_t big[1 << 20];
    ta.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ta.data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
    ta.inline_data.data = big;
    ta.inline_data.len = sizeof big;
    run.inputs = tensors;
    run.n_inputs = 1;
    req.body_case = TESSERA__V1__REQUEST__BODY_RUN;
    req.run = &run;
    cr_assert_eq(request(&req)->status, TSR_MESSAGE_TOO_LARGE);
}

Test(dispatch, cache_evict_checks_its_key)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__CacheEvictRequest ev = TESSERA__V1__CACHE_EVICT_REQUEST__INIT;
    req.body_case = TESSERA__V1__REQUEST__BODY_CACHE_EVICT;
    req.cache_evict = &ev;
    ev.key = "xyz";
    cr_assert_eq(request(&req)->status, TSR_INVALID_ARGUMENT);
    ev.key = "00000000000000000000000000000000000000000000000000000000000000ff";
    cr_assert_eq(request(&req)->status, TSR_NOT_FOUND);
    ev.key = "all";
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_OK);
    cr_assert_eq(r->cache_evict->evicted, 0);
}

Test(dispatch, stats_count_requests_and_render_prometheus)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__StatsRequest st = TESSERA__V1__STATS_REQUEST__INIT;
    req.body_case = TESSERA__V1__REQUEST__BODY_STATS;
    req.stats = &st;
    Tessera__V1__Request empty = TESSERA__V1__REQUEST__INIT;
    request(&empty);
    st.prometheus = true;
    Tessera__V1__Reply *r = request(&req);
    cr_assert_eq(r->status, TSR_OK);
    cr_assert(strstr(r->stats->prometheus_text,
                     "# TYPE tesserad_requests_total counter\n"
                     "tesserad_requests_total{type=\"none\",status=\"UNKNOWN_REQUEST\"} 1\n") !=
              NULL);
    bool found = false;
    for (size_t i = 0; i < r->stats->n_counters; i++)
        if (strcmp(r->stats->counters[i]->name, "sessions") == 0)
            found = r->stats->counters[i]->value == 1;
    cr_assert(found);
}

/* A body over 4 KiB decodes on the worker pool; a small request of the same
 * session that the daemon receives right behind it waits for it (parked), so
 * a read sent after a large write sees what the write wrote. Without parking
 * the read would decode at once and reach the session's stream first. */
/* A buffer_write request of n floats at offset 0, its body in *w. */
static void write_request(Tessera__V1__Request *req, Tessera__V1__BufferWriteRequest *w,
                          uint64_t id, uint64_t buffer, const float *data, size_t n)
{
    Tessera__V1__Request r = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferWriteRequest b = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    *req = r;
    *w = b;
    w->buffer = buffer;
    w->data.data = (uint8_t *)data;
    w->data.len = n * sizeof *data;
    req->id = id;
    req->body_case = TESSERA__V1__REQUEST__BODY_BUFFER_WRITE;
    req->buffer_write = w;
}

Test(dispatch, a_small_read_behind_a_large_write_waits_for_its_decode)
{
    enum { N = 1 << 18 }; /* 1 MiB of f32 */
    uint64_t buffer = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 1, N);
    float *data = malloc(N * sizeof *data);
    for (int i = 0; i < N; i++)
        data[i] = (float)(i % 977) + 0.5f;
    Tessera__V1__Request wreq;
    Tessera__V1__BufferWriteRequest w;
    write_request(&wreq, &w, 11, buffer, data, N);
    Tessera__V1__Request rreq = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferReadRequest rd = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    rd.buffer = buffer;
    rd.offset = (N - 8) * sizeof(float);
    rd.length = 8 * sizeof(float);
    rreq.id = 12;
    rreq.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
    rreq.buffer_read = &rd;
    size_t wlen = tessera__v1__request__get_packed_size(&wreq);
    size_t rlen = tessera__v1__request__get_packed_size(&rreq);
    uint8_t *wbuf = malloc(wlen), *rbuf = malloc(rlen);
    tessera__v1__request__pack(&wreq, wbuf);
    tessera__v1__request__pack(&rreq, rbuf);
    /* Both handed over before the loop runs: the write's decode has not even
     * begun when the read arrives. */
    dispatch_on(1, 1, wbuf, wlen);
    dispatch_on(2, 1, rbuf, rlen);
    free(wbuf);
    free(rbuf);
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(h->count[1], 1);
    cr_assert_eq(h->last[1]->status, TSR_OK, "%s", h->last[1]->message);
    cr_assert_eq(h->count[2], 1);
    Tessera__V1__Reply *r = h->last[2];
    cr_assert_eq(r->status, TSR_OK, "%s", r->message);
    cr_assert_eq(r->buffer_read->data.len, 8 * sizeof(float));
    const float *got = (const float *)r->buffer_read->data.data;
    for (int i = 0; i < 8; i++)
        cr_assert_eq(got[i], data[N - 8 + i], "element %d: read %g, the write stored %g", i,
                     (double)got[i], (double)data[N - 8 + i]);
    free(data);
}

/* A transport's message handed to the dispatcher: freed by its release. */
static int released;
static void release_counted(void *msg)
{
    free(msg);
    released++;
}

static bool dispatch_owned(int origin, Tessera__V1__Request *req)
{
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    tessera__v1__request__pack(req, buf);
    bool taken = tsrd_dispatch(&h->u.d, tsrd_session_get(&h->u.d, 1), (void *)(intptr_t)origin, buf,
                               len, release_counted, buf);
    if (!taken)
        free(buf); /* still the caller's */
    return taken;
}

/* The bytes are borrowed for the call; only a body decoded on the pool, or a
 * request parked behind one, takes the message over, and releases it once. */
Test(dispatch, a_message_is_taken_over_only_when_it_outlives_the_call)
{
    enum { N = 1 << 12 }; /* 16 KiB of f32: decoded on the pool */
    uint64_t buffer = alloc_buffer(TESSERA__V1__DTYPE__DTYPE_F32, 1, N);
    float *data = calloc(N, sizeof *data);
    Tessera__V1__Request wreq;
    Tessera__V1__BufferWriteRequest w;
    write_request(&wreq, &w, 21, buffer, data, N);
    /* The same envelope, another body. */
    Tessera__V1__HelloRequest hb = TESSERA__V1__HELLO_REQUEST__INIT;
    Tessera__V1__Request hello = wreq;
    hello.body_case = TESSERA__V1__REQUEST__BODY_HELLO;
    hello.hello = &hb;
    released = 0;
    cr_assert(dispatch_owned(1, &wreq), "a 16 KiB body is decoded on the pool");
    hello.id = 22;
    cr_assert(dispatch_owned(2, &hello), "a request parked behind it");
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(released, 2);
    cr_assert_eq(h->count[1], 1);
    cr_assert_eq(h->last[1]->status, TSR_OK, "%s", h->last[1]->message);
    cr_assert_eq(h->count[2], 1);
    cr_assert_eq(h->last[2]->status, TSR_OK, "%s", h->last[2]->message);
    /* Alone, a small one is served from the borrowed bytes. */
    hello.id = 23;
    cr_assert_not(dispatch_owned(3, &hello));
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(released, 2);
    cr_assert_eq(h->count[3], 1);
    cr_assert_eq(h->last[3]->status, TSR_OK, "%s", h->last[3]->message);
    free(data);
}

/* Packs req with id and hands it to the dispatcher from origin on pipe 1,
 * without running the loop: whatever is answered by then was answered on the
 * loop's own call. */
static void dispatch_id(Tessera__V1__Request *req, uint64_t id, int origin)
{
    req->id = id;
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    tessera__v1__request__pack(req, buf);
    dispatch_on(origin, 1, buf, len);
    free(buf);
}

/* The loop runs a launch itself only when the kernel was measured short, the
 * session's stream is idle and made, and no other work holds the device; the
 * session's order and the request-id memory hold around it. */
Test(dispatch, a_short_launch_runs_on_the_loop_only_with_its_stream_and_the_device_free)
{
    struct matmul_launch ml;
    matmul_launch_prepare(&ml);
    const tsrd_metrics *m = &h->u.d.metrics;

    /* The first launch measures the kernel, on the pool. */
    dispatch_id(&ml.req, 0x1a01, 1);
    cr_assert_eq(h->count[1], 0, "the first launch waits for the pool");
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(h->count[1], 1);
    cr_assert_eq(h->last[1]->status, TSR_OK, "%s", h->last[1]->message);
    cr_assert_eq(m->inline_jobs, 0);

    /* The second is answered before the loop runs at all. */
    dispatch_id(&ml.req, 0x1a02, 2);
    cr_assert_eq(h->count[2], 1, "answered on the dispatcher's own call");
    cr_assert_eq(h->last[2]->status, TSR_OK, "%s", h->last[2]->message);
    cr_assert_eq(h->last[2]->id, 0x1a02);
    cr_assert_eq(m->inline_jobs, 1);

    /* A write holds the session's stream on the pool: the launch behind it
     * waits for it there, and reads what it wrote. */
    float av2[4] = {5, 6, 7, 8};
    Tessera__V1__Request wreq = TESSERA__V1__REQUEST__INIT;
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    w.buffer = ml.inputs[0];
    w.data.data = (uint8_t *)av2;
    w.data.len = sizeof av2;
    wreq.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_WRITE;
    wreq.buffer_write = &w;
    dispatch_id(&wreq, 0x1a03, 3);
    dispatch_id(&ml.req, 0x1a04, 4);
    cr_assert_eq(h->count[3], 0);
    cr_assert_eq(h->count[4], 0, "the launch waits behind the write");
    uv_run(&h->u.loop, UV_RUN_DEFAULT);
    cr_assert_eq(h->count[3], 1);
    cr_assert_eq(h->count[4], 1);
    cr_assert_eq(h->last[4]->status, TSR_OK, "%s", h->last[4]->message);
    cr_assert_eq(m->inline_jobs, 1);
    Tessera__V1__Reply *r = read_buffer(ml.out, 0);
    cr_assert_eq(r->buffer_read->data.len, 16);
    cr_assert_eq(memcmp(r->buffer_read->data.data, av2, 16), 0, "the launch read the write");

    /* A resend of the launch answered on the loop is answered from memory,
     * and not run again. */
    uint64_t replays = m->replays;
    dispatch_id(&ml.req, 0x1a02, 5);
    cr_assert_eq(h->count[5], 1);
    cr_assert_eq(h->last[5]->id, 0x1a02);
    cr_assert_eq(h->last[5]->status, TSR_OK);
    cr_assert_eq(m->replays, replays + 1);
    cr_assert_eq(m->inline_jobs, 1);

    /* With the stream idle again, the next launch is back on the loop; its
     * tenant's in_flight is given back each time. */
    dispatch_id(&ml.req, 0x1a05, 6);
    cr_assert_eq(h->count[6], 1);
    cr_assert_eq(m->inline_jobs, 2);
    cr_assert_eq(h->u.d.default_tenant.in_flight, 0);
    cr_assert_eq(h->u.d.inflight, 0);
}

/* Where kernels run on a device rather than the host (inline_launches false,
 * as on the CUDA backends), a short launch still goes to the pool: a device
 * that hangs under it must not hold the loop. */
Test(dispatch, a_short_launch_stays_on_the_pool_where_kernels_run_on_a_device)
{
    cr_assert(h->u.d.inline_launches, "the cpu backend runs kernels on the host");
    h->u.d.inline_launches = false;
    struct matmul_launch ml;
    matmul_launch_prepare(&ml);
    for (int i = 1; i <= 2; i++) {
        dispatch_id(&ml.req, 0x1b00 + (uint64_t)i, i);
        cr_assert_eq(h->count[i], 0, "launch %d waits for the pool", i);
        uv_run(&h->u.loop, UV_RUN_DEFAULT);
        cr_assert_eq(h->count[i], 1);
        cr_assert_eq(h->last[i]->status, TSR_OK, "%s", h->last[i]->message);
    }
    cr_assert_eq(h->u.d.metrics.inline_jobs, 0);
}
