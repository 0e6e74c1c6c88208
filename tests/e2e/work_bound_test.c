/*
 * work_bound_test.c — max_request_work against a real tesserad: a verify, run
 * or compile whose estimated CPU work (tsr_ref_work, times the probes for a
 * full verification, the work done for a sampled one) is past the limit is
 * answered RESOURCE_EXHAUSTED with the estimate and the limit in the message,
 * without running, and the daemon keeps serving; work up to the limit is
 * served.
 *
 * Each refused request is given a 20 s client timeout: done instead of
 * refused, any of them would take minutes, and the test would see TIMEOUT in
 * place of the status it asserts.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/client.h"
#include "../support/fixture.h"

#define WORK_REFUSE_MS 20000

/* Starts tesserad with max_request_work = limit, or with the default when
 * limit is negative. */
static void work_start(long long limit)
{
    if (limit < 0)
        fixture_start(&suite_daemon, NULL);
    else
        cr_assert_eq(
            testd_start_config(&suite_daemon, NULL, "{\"max_request_work\": %lld}\n", limit), 0,
            "tesserad did not start");
    suite_client = fixture_client(&suite_daemon, 30000);
}

TestSuite(work_bound, .fini = fixture_suite_stop, .timeout = 120);

/* After the refusals, a small run still gets the right answer: the last check
 * of every test (a failure in a suite's .fini would not fail the test). */
static void work_still_serving(void)
{
    tsr_error err;
    cr_expect_eq(tsr_client_hello(suite_client, NULL, 5000, &err), TSR_OK, "%s", err.message);
    tsr_region *r =
        fixture_region_json("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":"
                            "\"a\",\"shape\":[4]}],\"ops\":[{\"op\":\"neg\",\"args\":[\"a\"],"
                            "\"out\":\"y\"}],\"output\":\"y\"}");
    const float a[4] = {1, -2, 3, 0};
    float y[4];
    const void *in[] = {a};
    cr_expect_eq(tsr_client_run(suite_client, r, NULL, in, y, NULL, 10000, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(y[0], -1.0f);
    cr_expect_eq(y[1], 2.0f);
    tsr_client_region_free(r);
}

/* Asserts that a request was refused for its work and, unless want is NULL,
 * that the message is want. */
static void work_expect_refused(tsr_status st, const tsr_error *err, const char *want)
{
    cr_assert_eq(st, TSR_RESOURCE_EXHAUSTED, "%s: %s", tsr_status_name(err->code), err->message);
    if (want != NULL)
        cr_expect_str_eq(err->message, want);
}

/* A verification of r that would be refused, given WORK_REFUSE_MS. */
static tsr_status work_verify(const tsr_region *r, const tsr_client_verify_opts *opts,
                              tsr_error *err)
{
    tsr_client_verified verified;
    return tsr_client_verify(suite_client, r, opts, &verified, WORK_REFUSE_MS, err);
}

/* q, k, v and the output are 65536 floats each (a 1 MiB run request), but
 * every query meets every key: 2^32 pairs. tsr_ref_work = 2·2^32·2 +
 * 32·(4·65536 + 2^32) = 154627211264. */
#define WORK_ATTENTION                                                                             \
    "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":1,\"seq_q\":65536,"           \
    "\"seq_k\":65536,\"head_dim\":1}"
#define WORK_ATTENTION_ELEMENTS 65536
#define WORK_ATTENTION_LAUNCH_REFUSED                                                              \
    "max_request_work: a launch of this attention region is estimated at 154627211264 units of "   \
    "CPU work, over the limit of 40000000000"

Test(work_bound, the_default_refuses_a_huge_verify_run_and_compile_at_once)
{
    work_start(-1);
    tsr_region *r = fixture_region_json(WORK_ATTENTION);
    tsr_error err;

    /* Verification on the CPU backend samples a region this large: the
     * candidate's own run at the real shape (154627211264), its inputs made
     * in the backend's memory and, the elements it reads, for the reference,
     * the reference at the sampled query rows (each meets all 65536 keys),
     * two probes at a small shape and 2^16 per probe; still past the limit. */
    tsr_client_verify_opts vopts = {.candidate = "reference"};
    work_expect_refused(work_verify(r, &vopts, &err), &err,
                        "max_request_work: the verification of this attention region is "
                        "estimated at 180751203168 units of CPU work, over the limit of "
                        "40000000000");
    /* The same without naming the candidate: the arbiter's pick is refused alike. */
    work_expect_refused(work_verify(r, NULL, &err), &err, NULL);

    float *data = calloc(4 * WORK_ATTENTION_ELEMENTS, sizeof *data);
    cr_assert_not_null(data);
    const void *in[] = {data, data + WORK_ATTENTION_ELEMENTS, data + 2 * WORK_ATTENTION_ELEMENTS};
    tsr_status st = tsr_client_run(suite_client, r, NULL, in, data + 3 * WORK_ATTENTION_ELEMENTS,
                                   NULL, WORK_REFUSE_MS, &err);
    work_expect_refused(st, &err, WORK_ATTENTION_LAUNCH_REFUSED);
    free(data);

    /* A kernel compiled on the CPU backend could only be launched past the limit. */
    tsr_client_compiled compiled;
    st = tsr_client_compile(suite_client, r, NULL, &compiled, WORK_REFUSE_MS, &err);
    work_expect_refused(st, &err, WORK_ATTENTION_LAUNCH_REFUSED);
    tsr_client_region_free(r);
    work_still_serving();
}

/* examples/matmul.json: tsr_ref_work = 2·128·96·64 + 32·(8192 + 6144 + 12288)
 * = 2424832; its verification on the CPU backend 2·(2·2424832 + 2^16) =
 * 9830400, the limit here. */
Test(work_bound, work_up_to_the_limit_is_served_and_one_probe_more_is_not)
{
    work_start(9830400);
    tsr_region *r = fixture_region_file("examples/matmul.json");
    tsr_error err;
    tsr_client_verify_opts vopts = {.candidate = "reference"};
    tsr_client_verified verified;
    cr_assert_eq(tsr_client_verify(suite_client, r, &vopts, &verified, 30000, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(verified.verdict.state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_eq(verified.verdict.probes, 2);

    vopts.random_probes = 3;
    work_expect_refused(work_verify(r, &vopts, &err), &err,
                        "max_request_work: the verification of this matmul region is estimated "
                        "at 14745600 units of CPU work, over the limit of 9830400");

    /* The run itself, 2424832, is well inside. */
    float a[128 * 64], b[64 * 96], c[128 * 96];
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        a[i] = 1.0f;
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        b[i] = 0.5f;
    tsr_region *rf =
        fixture_region_json("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":128,\"n\":96,\"k\":64}");
    const void *in[] = {a, b};
    cr_assert_eq(tsr_client_run(suite_client, rf, NULL, in, c, NULL, 30000, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(c[0], 32.0f);
    cr_expect_eq(c[128 * 96 - 1], 32.0f);
    tsr_client_region_free(rf);
    tsr_client_region_free(r);

    /* A pointwise region's verification has 25 probes (the special values):
     * examples/pointwise.json is 25·(2·180224 + 2^16) = 10649600. */
    r = fixture_region_file("examples/pointwise.json");
    work_expect_refused(work_verify(r, &vopts, &err), &err, NULL);
    vopts.random_probes = 0;
    work_expect_refused(work_verify(r, &vopts, &err), &err,
                        "max_request_work: the verification of this pointwise region is "
                        "estimated at 10649600 units of CPU work, over the limit of 9830400");
    tsr_client_region_free(r);
    work_still_serving();
}
