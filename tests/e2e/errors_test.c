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
#include "../support/testd.h"

static testd daemon_;
static tsr_client *client_;

static void errors_setup(void)
{
    static const char *const extra[] = {"--max-message-bytes", "1048576", NULL};
    cr_assert_eq(testd_start(&daemon_, extra), 0, "tesserad did not start");
    client_ = testd_client(&daemon_, 10000);
    cr_assert_not_null(client_);
}

static void errors_teardown(void)
{
    tsr_client_close(client_);
    int rc = testd_stop(&daemon_);
    testd_remove(&daemon_);
    cr_assert_eq(rc, 0, "tesserad exit status %d", rc);
}

TestSuite(errors, .init = errors_setup, .fini = errors_teardown, .timeout = 120);

/* The daemon still answers a plain hello. */
static void errors_still_serving(void)
{
    tsr_error err;
    cr_expect_eq(tsr_client_hello(client_, NULL, 5000, &err), TSR_OK, "after the bad input: %s",
                 err.message);
}

static tsr_region *errors_region(const char *path)
{
    tsr_region *r = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_region_load_file(path, &r, &err), TSR_OK, "%s", err.message);
    return r;
}

Test(errors, garbage_bytes_are_bad_message)
{
    uint32_t s;
    cr_assert_eq(testd_raw_open(&daemon_, &s), 0);
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
    uint32_t s;
    cr_assert_eq(testd_raw_open(&daemon_, &s), 0);
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
    int64_t shape[1] = {1 << 19};
    tsr_buffer b;
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F32, 1, shape, &b, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    size_t len = (size_t)2 << 20;
    void *big = calloc(1, len);
    tsr_status st = tsr_client_buffer_write(client_, b, 0, big, len, 1500, &err);
    cr_expect_eq(st, TSR_MESSAGE_TOO_LARGE, "got %s: %s", tsr_status_name(st), err.message);
    /* Just under the limit still goes through. */
    cr_expect_eq(tsr_client_buffer_write(client_, b, 0, big, (size_t)1 << 19, 5000, &err), TSR_OK,
                 "%s", err.message);
    free(big);
    errors_still_serving();
}

Test(errors, invalid_region_gets_the_region_code)
{
    uint32_t s;
    cr_assert_eq(testd_raw_open(&daemon_, &s), 0);
    Tessera__V1__Region region = TESSERA__V1__REGION__INIT;
    region.kind = TESSERA__V1__REGION_KIND__KIND_MATMUL;
    region.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    region.m = 0;
    region.n = 4;
    region.k = 4;
    Tessera__V1__CompileOptions opts = TESSERA__V1__COMPILE_OPTIONS__INIT;
    Tessera__V1__CompileRequest body = TESSERA__V1__COMPILE_REQUEST__INIT;
    body.region = &region;
    body.options = &opts;
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = 99;
    req.body_case = TESSERA__V1__REQUEST__BODY_COMPILE;
    req.compile = &body;
    Tessera__V1__Reply *reply;
    cr_assert_eq(testd_raw_request(s, &req, 5000, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__BAD_DIMENSION, "status %d: %s", reply->status,
                 reply->message);
    cr_expect_not_null(strchr(reply->message, 'm'), "message names the field: %s", reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);

    /* heads not divisible by heads_kv */
    Tessera__V1__Region att = TESSERA__V1__REGION__INIT;
    att.kind = TESSERA__V1__REGION_KIND__KIND_ATTENTION;
    att.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    att.batch = 1;
    att.heads = 6;
    att.heads_kv = 4;
    att.seq_q = 8;
    att.seq_k = 8;
    att.head_dim = 16;
    att.head_dim_v = 16;
    att.scale = 0.25;
    body.region = &att;
    req.id = 100;
    cr_assert_eq(testd_raw_request(s, &req, 5000, &reply), 0);
    cr_expect_eq(reply->status, TESSERA__V1__STATUS__BAD_HEADS, "status %d: %s", reply->status,
                 reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);
    testd_raw_close(s);
    errors_still_serving();
}

Test(errors, unknown_and_freed_buffers_are_not_found)
{
    tsr_error err;
    uint8_t byte[4];
    cr_expect_eq(tsr_client_buffer_read(client_, 0x1234567890abcdefULL, 0, byte, 4, NULL, 0, &err),
                 TSR_NOT_FOUND);
    cr_expect_eq(err.code, TSR_NOT_FOUND);
    int64_t shape[1] = {4};
    tsr_buffer b;
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F32, 1, shape, &b, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(client_, b, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_buffer_free(client_, b, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(tsr_client_buffer_write(client_, b, 0, byte, 4, 0, &err), TSR_NOT_FOUND);
    cr_expect_eq(tsr_client_launch(client_, 0x77, &b, 1, b, NULL, 0, &err), TSR_NOT_FOUND);
    errors_still_serving();
}

Test(errors, launch_with_wrong_buffer_size_or_dtype_is_buffer_mismatch)
{
    tsr_region *r = errors_region("examples/pointwise.json");
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(client_, r, NULL, &k, 0, &err), TSR_OK, "%s", err.message);
    tsr_client_tensor in[TSR_CLIENT_MAX_INPUTS], out;
    int n = tsr_client_region_signature(r, in, &out);
    tsr_buffer bufs[TSR_CLIENT_MAX_INPUTS], ob;
    for (int i = 0; i < n; i++)
        cr_assert_eq(tsr_client_buffer_alloc(client_, in[i].dtype, in[i].rank, in[i].shape,
                                             &bufs[i], NULL, 0, &err),
                     TSR_OK, "%s", err.message);
    cr_assert_eq(
        tsr_client_buffer_alloc(client_, out.dtype, out.rank, out.shape, &ob, NULL, 0, &err),
        TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_launch(client_, k.kernel, bufs, n, ob, NULL, 0, &err), TSR_OK, "%s",
                 err.message);

    /* Too small an output. */
    int64_t small[1] = {3};
    tsr_buffer bad;
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F32, 1, small, &bad, NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_expect_eq(tsr_client_launch(client_, k.kernel, bufs, n, bad, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    /* Right element count, wrong dtype (f16 for an f32 input). */
    tsr_buffer wrong;
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F16, in[0].rank, in[0].shape, &wrong,
                                         NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    tsr_buffer swapped[TSR_CLIENT_MAX_INPUTS];
    memcpy(swapped, bufs, sizeof bufs);
    swapped[0] = wrong;
    cr_expect_eq(tsr_client_launch(client_, k.kernel, swapped, n, ob, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    /* Too few inputs. */
    cr_expect_eq(tsr_client_launch(client_, k.kernel, bufs, n - 1, ob, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
    tsr_client_region_free(r);
    errors_still_serving();
}

Test(errors, unknown_forced_candidate_is_arbiter)
{
    tsr_region *r = errors_region("examples/matmul.json");
    tsr_client_compile_opts opts = {.force = "no-such-candidate"};
    tsr_client_compiled k;
    tsr_error err;
    cr_expect_eq(tsr_client_compile(client_, r, &opts, &k, 0, &err), TSR_ARBITER);
    cr_expect_eq(err.code, TSR_ARBITER);
    cr_expect_not_null(strstr(err.message, "reference"), "names the registered candidates: %s",
                       err.message);
    tsr_client_region_free(r);
    errors_still_serving();
}
