/*
 * errors_test.c — bad input of every kind gets its exact status, and the daemon
 * keeps serving afterwards.
 *
 * Requests the client library would never send (garbage bytes, a missing body,
 * an invalid region) go through a raw nng REQ socket.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/client.h"
#include "tessera/region_pb.h"
#include "../support/fixture.h"

static void errors_setup(void)
{
    static const char *const extra[] = {"--max-message-bytes", "1048576", NULL};
    suite_client = fixture_start_client(&suite_daemon, extra, 10000);
}

TestSuite(errors, .init = errors_setup, .fini = fixture_suite_stop, .timeout = 120);

/* The daemon still answers a plain hello: the last check of every test (a
 * failure in a suite's .fini would not fail the test). */
static void errors_still_serving(void)
{
    tsr_error err;
    cr_expect_eq(tsr_client_hello(suite_client, NULL, 5000, &err), TSR_OK,
                 "after the bad input: %s", err.message);
}

/* A REQ socket of its own, below the client library, for what it never sends. */
static uint32_t errors_raw_open(void)
{
    uint32_t s;
    cr_assert_eq(testd_raw_open(&suite_daemon, &s), 0);
    return s;
}

/* Sends a compile request for region with id on the raw socket s. */
static Tessera__V1__Reply *errors_compile(uint32_t s, uint64_t id, Tessera__V1__Region *region)
{
    Tessera__V1__CompileOptions opts = TESSERA__V1__COMPILE_OPTIONS__INIT;
    Tessera__V1__CompileRequest body = TESSERA__V1__COMPILE_REQUEST__INIT;
    body.region = region;
    body.options = &opts;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = id;
    req.body_case = TESSERA__V1__REQUEST__BODY_COMPILE;
    req.compile = &body;
    Tessera__V1__Reply *reply;
    cr_assert_eq(testd_raw_request(s, &req, 5000, &reply), 0);
    return reply;
}

Test(errors, garbage_bytes_are_bad_message)
{
    uint32_t s = errors_raw_open();
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34, 0xde, 0xad};
    Tessera__V1__Reply *reply;
    cr_assert_eq(testd_raw_send(s, garbage, sizeof garbage, 5000, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__BAD_MESSAGE);
    cr_expect_str_not_empty(reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);
    testd_raw_close(s);
    errors_still_serving();
}

Test(errors, request_without_a_body_is_unknown_request)
{
    uint32_t s = errors_raw_open();
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = 4242;
    Tessera__V1__Reply *reply;
    cr_assert_eq(testd_raw_request(s, &req, 5000, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__UNKNOWN_REQUEST);
    cr_expect_eq(reply->id, 4242);
    tessera__v1__reply__free_unpacked(reply, NULL);
    testd_raw_close(s);
    errors_still_serving();
}

/* The client learns the daemon's limit and refuses the request itself: the
 * daemon would drop the connection without an answer. */
Test(errors, message_over_the_limit_fails_and_the_next_request_works)
{
    /* A 2 MiB buffer write against a 1 MiB limit. */
    tsr_buffer b = fixture_alloc_f32(suite_client, 1 << 19);
    tsr_error err;
    size_t len = (size_t)2 << 20;
    void *big = calloc(1, len);
    tsr_status st = tsr_client_buffer_write(suite_client, b, 0, big, len, 1500, &err);
    cr_expect_eq(st, TSR_MESSAGE_TOO_LARGE, "got %s: %s", tsr_status_name(st), err.message);
    /* Just under the limit still goes through. */
    cr_expect_eq(tsr_client_buffer_write(suite_client, b, 0, big, (size_t)1 << 19, 5000, &err),
                 TSR_OK, "%s", err.message);
    free(big);
    errors_still_serving();
}

/* The wire form of a valid region, for a test to break one field of. Free with
 * tsr_region_pb_free. */
static Tessera__V1__Region *errors_region_pb(const char *json)
{
    tsr_region *r = fixture_region_json(json);
    Tessera__V1__Region *pb = fixture_region_pb(r);
    tsr_client_region_free(r);
    return pb;
}

Test(errors, invalid_region_gets_the_region_code)
{
    uint32_t s = errors_raw_open();
    Tessera__V1__Region *mm =
        errors_region_pb("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":1,\"n\":4,\"k\":4}");
    mm->m = 0;
    Tessera__V1__Reply *reply = errors_compile(s, 99, mm);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__BAD_DIMENSION, "status %d: %s", reply->status,
                 reply->message);
    cr_expect_not_null(strchr(reply->message, 'm'), "message names the field: %s", reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);
    tsr_region_pb_free(mm);

    /* heads not divisible by heads_kv */
    Tessera__V1__Region *att = errors_region_pb(
        "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":6,\"heads_kv\":2,"
        "\"seq_q\":8,\"seq_k\":8,\"head_dim\":16,\"head_dim_v\":16,\"scale\":0.25}");
    att->heads_kv = 4;
    reply = errors_compile(s, 100, att);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__BAD_HEADS, "status %d: %s", reply->status,
                 reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);
    tsr_region_pb_free(att);
    testd_raw_close(s);
    errors_still_serving();
}

Test(errors, unknown_and_freed_buffers_are_not_found)
{
    tsr_error err;
    uint8_t byte[4];
    cr_expect_eq(
        tsr_client_buffer_read(suite_client, 0x1234567890abcdefULL, 0, byte, 4, NULL, 0, &err),
        TSR_NOT_FOUND);
    cr_expect_eq(err.code, TSR_NOT_FOUND);
    tsr_buffer b = fixture_alloc_f32(suite_client, 4);
    cr_expect_eq(tsr_client_buffer_free(suite_client, b, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(suite_client, b, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(tsr_client_buffer_write(suite_client, b, 0, byte, 4, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(tsr_client_launch(suite_client, 0x77, &b, 1, b, NULL, 0, &err), TSR_NOT_FOUND);
    errors_still_serving();
}

Test(errors, launch_with_wrong_buffer_size_or_dtype_is_buffer_mismatch)
{
    tsr_region *r = fixture_region_file("examples/pointwise.json");
    tsr_client_compiled k;
    tsr_error err;
    fixture_compile_on(suite_client, r, &k);
    tsr_client_tensor in[TSR_CLIENT_MAX_INPUTS], out;
    int n = tsr_client_region_signature(r, in, &out);
    tsr_buffer bufs[TSR_CLIENT_MAX_INPUTS];
    for (int i = 0; i < n; i++)
        bufs[i] = fixture_alloc(suite_client, in[i].dtype, in[i].rank, in[i].shape);
    tsr_buffer ob = fixture_alloc(suite_client, out.dtype, out.rank, out.shape);
    cr_expect_eq(tsr_client_launch(suite_client, k.kernel, bufs, n, ob, NULL, 0, &err), TSR_OK,
                 "%s", err.message);

    /* Too small an output. */
    tsr_buffer bad = fixture_alloc_f32(suite_client, 3);
    cr_expect_eq(tsr_client_launch(suite_client, k.kernel, bufs, n, bad, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    /* Right element count, wrong dtype (f16 for an f32 input). */
    tsr_buffer wrong = fixture_alloc(suite_client, TSR_CLIENT_F16, in[0].rank, in[0].shape);
    tsr_buffer swapped[TSR_CLIENT_MAX_INPUTS];
    memcpy(swapped, bufs, sizeof bufs);
    swapped[0] = wrong;
    cr_expect_eq(tsr_client_launch(suite_client, k.kernel, swapped, n, ob, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    /* Too few inputs. */
    cr_expect_eq(tsr_client_launch(suite_client, k.kernel, bufs, n - 1, ob, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    tsr_client_region_free(r);
    errors_still_serving();
}

Test(errors, unknown_forced_candidate_is_arbiter)
{
    tsr_region *r = fixture_region_file("examples/matmul.json");
    tsr_client_compile_opts opts = {.force = "no-such-candidate"};
    tsr_client_compiled k;
    tsr_error err;
    cr_expect_eq(tsr_client_compile(suite_client, r, &opts, &k, 0, &err), TSR_ARBITER);
    cr_expect_eq(err.code, TSR_ARBITER);
    cr_expect_not_null(strstr(err.message, "reference"), "names the registered candidates: %s",
                       err.message);
    tsr_client_region_free(r);
    errors_still_serving();
}
