/*
 * inline_test.c — a short launch runs on the loop, without the worker pool,
 * exactly when it may, and the request path's guarantees hold around it.
 *
 * requests_inline_total counts the launches executed on the loop. A kernel's
 * first launch on a session goes to the pool (nothing measured yet); every
 * later launch of a kernel measured short, on a session whose stream is idle
 * while no other device work runs, goes inline, on "cpu" and on
 * "cpu-isolated" alike. A resent launch id is answered from the request-id
 * memory, not executed again. A launch behind a long batch on the same
 * session waits for the batch (it reads what the batch's last launch wrote),
 * another session's launch is served during the batch, neither goes inline
 * while the batch runs, and the in_flight quota is held and given back as
 * before.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/region_pb.h"
#include "../support/attack.h"
#include "../support/fixture.h"

TestSuite(inline, .fini = fixture_suite_stop, .timeout = 120);

static double inline_count(tsr_client *c)
{
    return fixture_counter(c, "requests_inline_total");
}

/* y = 2x + 1 over 4 floats, with x = {1, 2, 3, 4} written and y allocated. */
typedef struct inline_tiny {
    tsr_kernel kernel;
    tsr_buffer x, y;
} inline_tiny;

static inline_tiny inline_tiny_make(tsr_client *c)
{
    tsr_region *r = fixture_affine(4);
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, NULL, &k, 60000, &err), TSR_OK, "%s", err.message);
    tsr_client_region_free(r);
    inline_tiny t = {.kernel = k.kernel};
    t.x = fixture_alloc_f32(c, 4);
    t.y = fixture_alloc_f32(c, 4);
    float x[4] = {1, 2, 3, 4};
    cr_assert_eq(tsr_client_buffer_write(c, t.x, 0, x, sizeof x, 30000, &err), TSR_OK, "%s",
                 err.message);
    return t;
}

static void inline_launch(tsr_client *c, tsr_kernel k, tsr_buffer in, tsr_buffer out)
{
    tsr_error err;
    cr_assert_eq(tsr_client_launch(c, k, &in, 1, out, NULL, 30000, &err), TSR_OK, "%s",
                 err.message);
}

static void inline_expect(tsr_client *c, tsr_buffer b, const float want[4])
{
    float got[4] = {0};
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_read(c, b, 0, got, sizeof got, &n, 30000, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(n, sizeof got);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(got[i], want[i], "element %d: %g, want %g", i, got[i], want[i]);
}

/* One kernel's launches on one session: the first on the pool, the other
 * nine on the loop; a run (which compiles) never inline. */
static void inline_launches_count(const char *const *flags)
{
    suite_client = fixture_start_client(&suite_daemon, flags, 60000);
    tsr_client *c = suite_client;
    inline_tiny t = inline_tiny_make(c);
    cr_assert_eq(inline_count(c), 0);
    inline_launch(c, t.kernel, t.x, t.y);
    cr_expect_eq(inline_count(c), 0, "a kernel's first launch is measured on the pool");
    for (int i = 0; i < 9; i++)
        inline_launch(c, t.kernel, t.x, t.y);
    double n = inline_count(c);
    cr_expect_eq(n, 9, "every later launch ran on the loop: %g of 9", n);
    inline_expect(c, t.y, (const float[4]){3, 5, 7, 9});
    tsr_region *r = fixture_affine(4);
    float out[4];
    tsr_error err;
    cr_assert_eq(fixture_affine_run4(c, r, out, 30000, &err), TSR_OK, "%s", err.message);
    tsr_client_region_free(r);
    cr_expect_eq(out[3], 9.0f);
    cr_expect_eq(inline_count(c), 9, "a run is not a launch: it goes to the pool");
    /* A launch the region refuses is answered as before, from prepare. */
    cr_assert_eq(tsr_client_launch(c, t.kernel, NULL, 0, t.y, NULL, 30000, &err),
                 TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message,
                     "launch.inputs: 0 inputs given, the pointwise region takes 1 (x)");
    cr_expect_eq(inline_count(c), 9);
}

Test(inline, later_launches_of_a_short_kernel_run_on_the_loop_cpu)
{
    inline_launches_count(NULL);
}

Test(inline, later_launches_of_a_short_kernel_run_on_the_loop_cpu_isolated)
{
    static const char *const flags[] = {"--backend", "cpu-isolated", NULL};
    inline_launches_count(flags);
}

/* Handles are pinned in one step; a refusal still names the first one the
 * request cannot use, in the order the request names them. */
Test(inline, a_launch_names_the_first_handle_it_cannot_use)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 60000);
    tsr_client *c = suite_client;
    inline_tiny t = inline_tiny_make(c);
    tsr_buffer small = fixture_alloc_f32(c, 2);
    tsr_buffer bogus = 0x5eed1234;
    tsr_error err;
    cr_expect_eq(tsr_client_launch(c, 0x5eed4321, &t.x, 1, t.y, NULL, 30000, &err), TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "launch.kernel: no kernel 0x5eed4321");
    cr_expect_eq(tsr_client_launch(c, t.kernel, &bogus, 1, t.y, NULL, 30000, &err), TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "launch.inputs[0]: no buffer 0x5eed1234");
    cr_expect_eq(tsr_client_launch(c, t.kernel, &t.x, 1, bogus, NULL, 30000, &err), TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "launch.output: no buffer 0x5eed1234");
    /* A misfit input before an unknown output is the misfit. */
    cr_expect_eq(tsr_client_launch(c, t.kernel, &small, 1, bogus, NULL, 30000, &err),
                 TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message, "launch.inputs[0] (x): buffer holds 8 bytes of f32, the region "
                                  "needs 16 bytes of f32");
    /* Every refused launch gave its pins back: a freed buffer goes at once
     * (a pinned one would stay counted until its last pin went). */
    double live = fixture_counter(c, "buffers");
    cr_expect_eq(tsr_client_buffer_free(c, small, 30000, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(fixture_counter(c, "buffers"), live - 1);
    inline_launch(c, t.kernel, t.x, t.y);
    inline_expect(c, t.y, (const float[4]){3, 5, 7, 9});
    cr_expect_eq(inline_count(c), 0, "the kernel's first launch that ran went to the pool");
}

/* ---- the request-id memory ---- */

static Tessera__V1__Reply *inline_raw(uint32_t s, Tessera__V1__Request *req, uint64_t id)
{
    req->id = id;
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(testd_raw_request(s, req, 30000, &reply), 0);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK, "request %llu: %s", (unsigned long long)id,
                 reply->message);
    cr_assert_eq(reply->id, id);
    return reply;
}

static uint64_t inline_raw_alloc(uint32_t s, uint64_t id)
{
    int64_t shape[1] = {4};
    Tessera__V1__BufferAllocRequest body;
    Tessera__V1__Request req;
    testd_request_alloc_f32(&req, &body, id, shape, 1);
    Tessera__V1__Reply *reply = inline_raw(s, &req, id);
    uint64_t handle = reply->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(reply, NULL);
    return handle;
}

Test(inline, a_resent_launch_id_gets_the_stored_reply_and_runs_once)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 60000);
    uint32_t s;
    cr_assert_eq(testd_raw_open(&suite_daemon, &s), 0);
    tsr_region *r = fixture_affine(4);
    Tessera__V1__Region *pb = fixture_region_pb(r);
    Tessera__V1__CompileRequest compile = TESSERA__V1__COMPILE_REQUEST__INIT;
    compile.region = pb;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.body_case = TESSERA__V1__REQUEST__BODY_COMPILE;
    req.compile = &compile;
    Tessera__V1__Reply *reply = inline_raw(s, &req, 0x1a000001);
    uint64_t kernel = reply->compile->kernel;
    tessera__v1__reply__free_unpacked(reply, NULL);
    tsr_region_pb_free(pb);
    tsr_client_region_free(r);
    uint64_t x = inline_raw_alloc(s, 0x1a000002), y = inline_raw_alloc(s, 0x1a000003);

    Tessera__V1__LaunchRequest launch = TESSERA__V1__LAUNCH_REQUEST__INIT;
    launch.kernel = kernel;
    launch.inputs = &x;
    launch.n_inputs = 1;
    launch.output = y;
    req = (Tessera__V1__Request)TESSERA__V1__REQUEST__INIT;
    req.body_case = TESSERA__V1__REQUEST__BODY_LAUNCH;
    req.launch = &launch;
    double inlined = inline_count(suite_client);
    double replays = fixture_counter(suite_client, "replays_total");
    tessera__v1__reply__free_unpacked(inline_raw(s, &req, 0x1a000004), NULL);
    cr_expect_eq(inline_count(suite_client), inlined, "the first launch went to the pool");
    Tessera__V1__Reply *first = inline_raw(s, &req, 0x1a000005);
    cr_expect_eq(inline_count(suite_client), inlined + 1, "the second ran on the loop");
    cr_assert_eq(first->body_case, TESSERA__V1__REPLY__BODY_LAUNCH);
    /* The same id again: the stored reply, byte for byte, and no launch. */
    Tessera__V1__Reply *again = inline_raw(s, &req, 0x1a000005);
    cr_assert_eq(again->body_case, TESSERA__V1__REPLY__BODY_LAUNCH);
    cr_expect_eq(again->launch->device_ms, first->launch->device_ms);
    cr_expect_eq(fixture_counter(suite_client, "replays_total"), replays + 1);
    cr_expect_eq(inline_count(suite_client), inlined + 1, "the resend was not executed");
    tessera__v1__reply__free_unpacked(first, NULL);
    tessera__v1__reply__free_unpacked(again, NULL);
    testd_raw_close(s);
}

/* ---- ordering and quotas around a long batch ---- */

#define INLINE_MM 512
#define INLINE_BATCH 30

typedef struct inline_behind {
    tsr_client *c;
    inline_tiny *t;
    tsr_buffer in, out;
    tsr_status status;
} inline_behind;

static void *inline_behind_main(void *arg)
{
    inline_behind *l = arg;
    tsr_error err;
    l->status = tsr_client_launch(l->c, l->t->kernel, &l->in, 1, l->out, NULL, 60000, &err);
    return NULL;
}

/* The daemon's requests in flight, asked on c (whose stats request is one of
 * them) until there are want of them, for at most 30 s; the last count. */
static double inline_wait_inflight(tsr_client *c, double want)
{
    double n = -1;
    for (int i = 0; i < 3000; i++) {
        n = fixture_counter(c, "inflight_requests");
        if (n == want)
            break;
        testd_sleep_ms(10);
    }
    return n;
}

Test(inline, a_launch_behind_a_long_batch_waits_for_it_and_another_session_does_not)
{
    cr_assert_eq(attack_start_tenants(&suite_daemon, "", "\"in_flight\": 2", "", 0, NULL), 0);
    tsr_client *alice = testd_connect(suite_daemon.url, ATTACK_TOKEN_ALICE, 60000);
    tsr_client *alice2 = testd_connect(suite_daemon.url, ATTACK_TOKEN_ALICE, 60000);
    tsr_client *bob = testd_connect(suite_daemon.url, ATTACK_TOKEN_BOB, 60000);
    cr_assert(alice != NULL && alice2 != NULL && bob != NULL);

    /* Alice: a slow product, a relu of x into r (the batch's last launch) and
     * the affine kernel, measured short by two launches. */
    fixture_mm mm = fixture_matmul(alice, INLINE_MM);
    tsr_error err;
    tsr_region *relu_region = fixture_region_json(
        "{\"kind\": \"pointwise\", \"dtype\": \"f32\", \"inputs\": [{\"name\": \"x\", "
        "\"shape\": [4]}], \"ops\": [{\"op\": \"relu\", \"args\": [\"x\"], \"out\": \"y\"}], "
        "\"output\": \"y\"}");
    tsr_client_compiled relu;
    cr_assert_eq(tsr_client_compile(alice, relu_region, NULL, &relu, 60000, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_region_free(relu_region);
    inline_tiny a = inline_tiny_make(alice);
    tsr_buffer r = fixture_alloc_f32(alice, 4), z = fixture_alloc_f32(alice, 4);
    inline_launch(alice, a.kernel, a.x, a.y);
    inline_launch(alice, a.kernel, a.x, a.y);
    inline_tiny b = inline_tiny_make(bob);
    inline_launch(bob, b.kernel, b.x, b.y);
    inline_launch(bob, b.kernel, b.x, b.y);
    double inlined = inline_count(bob);
    cr_expect_eq(inlined, 2, "the second launch of each session ran on the loop");

    /* One product alone, for the figures. */
    uint64_t t0 = attack_now_ms();
    cr_assert_eq(tsr_client_launch(alice, mm.kernel, mm.in, 2, mm.out, NULL, 60000, &err), TSR_OK,
                 "%s", err.message);
    uint64_t mm_ms = attack_now_ms() - t0;

    tsr_client_launch_desc descs[INLINE_BATCH + 1];
    for (int i = 0; i < INLINE_BATCH; i++)
        descs[i] = (tsr_client_launch_desc){
            .kernel = mm.kernel, .n_inputs = 2, .inputs = mm.in, .output = mm.out};
    descs[INLINE_BATCH] =
        (tsr_client_launch_desc){.kernel = relu.kernel, .n_inputs = 1, .inputs = &a.x, .output = r};
    cr_expect_eq(inline_wait_inflight(bob, 1), 1, "bob's stats request alone is in flight");
    attack_batch batch = {.c = alice, .descs = descs, .n = INLINE_BATCH + 1};
    pthread_t behind_th;
    uint64_t batch_t0 = attack_now_ms();
    cr_assert_eq(attack_batch_start(&batch), 0);
    cr_assert_eq(inline_wait_inflight(bob, 2), 2, "the batch was received");
    /* z = 2r + 1 on alice's session, behind the batch that writes r. */
    inline_behind behind = {.c = alice, .t = &a, .in = r, .out = z};
    cr_assert_eq(pthread_create(&behind_th, NULL, inline_behind_main, &behind), 0);
    cr_assert_eq(inline_wait_inflight(bob, 3), 3, "the launch behind it was received");
    /* Alice's two requests fill her in_flight quota. */
    cr_expect_eq(tsr_client_hello(alice2, NULL, 30000, &err), TSR_RESOURCE_EXHAUSTED);
    cr_expect_str_eq(err.message,
                     "quota in_flight of tenant alice: 2 in use, 1 asked, the quota is 2");
    /* Bob's launch is served meanwhile, on the pool: alice's two requests are
     * still in flight after it. */
    inline_launch(bob, b.kernel, b.x, b.y);
    uint64_t bob_done = attack_now_ms();
    cr_expect_eq(fixture_counter(bob, "inflight_requests"), 3,
                 "bob's launch waited for alice's batch");
    cr_expect_eq(inline_count(bob), inlined, "nothing ran on the loop during the batch");
    attack_batch_join(&batch);
    pthread_join(behind_th, NULL);
    cr_assert_eq(batch.status, TSR_OK);
    cr_expect_eq(batch.result.launched, INLINE_BATCH + 1);
    cr_expect_eq(behind.status, TSR_OK);
    cr_log_info("batch of %d products of %llu ms: %llu ms; bob's launch finished %lld ms before it",
                INLINE_BATCH, (unsigned long long)mm_ms,
                (unsigned long long)(batch.done_ms - batch_t0),
                (long long)batch.done_ms - (long long)bob_done);
    cr_expect_eq(inline_count(bob), inlined, "nor did the launch behind the batch");
    /* The launch behind the batch read what the batch's last launch wrote. */
    inline_expect(alice, z, (const float[4]){3, 5, 7, 9});

    /* Both quotas given back: alice's next requests are served, on the loop. */
    cr_expect_eq(tsr_client_hello(alice2, NULL, 30000, &err), TSR_OK, "%s", err.message);
    inline_launch(alice, a.kernel, a.x, a.y);
    inline_launch(bob, b.kernel, b.x, b.y);
    cr_expect_eq(inline_count(bob), inlined + 2);
    inline_expect(alice, a.y, (const float[4]){3, 5, 7, 9});
    tsr_client_close(alice);
    tsr_client_close(alice2);
    tsr_client_close(bob);
}
