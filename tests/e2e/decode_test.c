/*
 * decode_test.c — request bodies over 4 KiB are checked and decoded on the
 * worker pool, never on the loop that serves every tenant, and a session's
 * requests still take effect in the order they arrived.
 *
 * The ordering case pipelines, on one connection (two REQ contexts sharing its
 * pipe), a 4 MiB buffer_write that decodes off the loop and a small
 * buffer_read right behind it that would decode at once on the loop: the read
 * must see what the write wrote, every time. The counter
 * requests_decoded_off_loop_total says exactly which requests went to the
 * pool.
 */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>

#include "../support/fixture.h"

#define DECODE_ELEMENTS (1 << 20) /* 4 MiB of f32 */
#define DECODE_ROUNDS 6

static testd decode_d;
static tsr_client *decode_client;

static void decode_setup(void)
{
    decode_client = fixture_start_client(&decode_d, NULL, 30000);
}

static void decode_teardown(void)
{
    fixture_stop(&decode_d, decode_client);
}

TestSuite(decode, .init = decode_setup, .fini = decode_teardown, .timeout = 120);

static double decode_off_loop(void)
{
    return fixture_counter(decode_client, "requests_decoded_off_loop_total");
}

/* Sends req on ctx without waiting for the reply. */
static void decode_send(nng_ctx ctx, const Tessera__V1__Request *req)
{
    size_t len = 0;
    uint8_t *bytes = testd_request_pack(req, &len);
    nng_msg *msg = NULL;
    cr_assert_eq(nng_msg_alloc(&msg, len), 0);
    memcpy(nng_msg_body(msg), bytes, len);
    free(bytes);
    cr_assert_eq(nng_ctx_sendmsg(ctx, msg, 0), 0);
}

static Tessera__V1__Reply *decode_recv(nng_ctx ctx)
{
    nng_msg *msg = NULL;
    cr_assert_eq(nng_ctx_recvmsg(ctx, &msg, 0), 0);
    Tessera__V1__Reply *r = tessera__v1__reply__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    cr_assert_not_null(r);
    return r;
}

Test(decode, a_large_write_then_a_small_read_keep_their_order)
{
    nng_socket sock;
    cr_assert_eq(nng_req0_open(&sock), 0);
    cr_assert_eq(nng_dial(sock, decode_d.url, NULL, 0), 0);
    nng_ctx write_ctx, read_ctx;
    cr_assert_eq(nng_ctx_open(&write_ctx, sock), 0);
    cr_assert_eq(nng_ctx_open(&read_ctx, sock), 0);
    nng_ctx_set_ms(write_ctx, NNG_OPT_RECVTIMEO, 30000);
    nng_ctx_set_ms(read_ctx, NNG_OPT_RECVTIMEO, 30000);

    Tessera__V1__Request req;
    Tessera__V1__BufferAllocRequest alloc;
    int64_t shape[1] = {DECODE_ELEMENTS};
    testd_request_alloc_f32(&req, &alloc, 1, shape, 1);
    decode_send(write_ctx, &req);
    Tessera__V1__Reply *r = decode_recv(write_ctx);
    cr_assert_eq(r->status, TESSERA__V1__STATUS__OK, "%s", r->message);
    uint64_t buffer = r->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(r, NULL);

    double before = decode_off_loop();
    float *data = malloc(DECODE_ELEMENTS * sizeof *data);
    cr_assert_not_null(data);
    for (int round = 0; round < DECODE_ROUNDS; round++) {
        for (size_t i = 0; i < DECODE_ELEMENTS; i++)
            data[i] = (float)(i % 1000) + 1000.0f * (float)(round + 1);
        Tessera__V1__BufferWriteRequest write = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
        write.buffer = buffer;
        write.data.data = (uint8_t *)data;
        write.data.len = DECODE_ELEMENTS * sizeof *data;
        testd_request_buffer_write(&req, &write, 100 + (uint64_t)round * 2);
        decode_send(write_ctx, &req);

        /* The last 16 elements, asked for before the write is answered. */
        Tessera__V1__BufferReadRequest read = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
        read.buffer = buffer;
        read.offset = (DECODE_ELEMENTS - 16) * sizeof(float);
        read.length = 16 * sizeof(float);
        Tessera__V1__Request rreq = TESSERA__V1__REQUEST__INIT;
        rreq.id = 101 + (uint64_t)round * 2;
        rreq.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
        rreq.buffer_read = &read;
        decode_send(read_ctx, &rreq);

        Tessera__V1__Reply *wr = decode_recv(write_ctx);
        cr_assert_eq(wr->status, TESSERA__V1__STATUS__OK, "write: %s", wr->message);
        tessera__v1__reply__free_unpacked(wr, NULL);
        Tessera__V1__Reply *rd = decode_recv(read_ctx);
        cr_assert_eq(rd->status, TESSERA__V1__STATUS__OK, "read: %s", rd->message);
        cr_assert_eq(rd->buffer_read->data.len, 16 * sizeof(float));
        const float *got = (const float *)rd->buffer_read->data.data;
        for (size_t i = 0; i < 16; i++)
            cr_assert_eq(got[i], data[DECODE_ELEMENTS - 16 + i],
                         "round %d element %zu: read %g, the write before it stored %g", round, i,
                         (double)got[i], (double)data[DECODE_ELEMENTS - 16 + i]);
        tessera__v1__reply__free_unpacked(rd, NULL);
    }
    free(data);
    /* The writes went to the pool; the reads, the alloc and the stats did not. */
    cr_assert_eq(decode_off_loop() - before, (double)DECODE_ROUNDS);
    nng_ctx_close(write_ctx);
    nng_ctx_close(read_ctx);
    nng_close(sock);
}

Test(decode, a_large_body_that_does_not_parse_is_refused_and_the_daemon_serves_on)
{
    /* id 7, then a buffer_write body (field 17) of 8 KiB that is no message:
     * every byte 0xff, a varint that never ends. The envelope walk skips the
     * body; the check on the pool finds it. */
    size_t body = 8192;
    size_t len = 2 + 3 + 2 + body;
    uint8_t *bytes = malloc(len);
    cr_assert_not_null(bytes);
    size_t at = 0;
    bytes[at++] = 0x08; /* field 1, varint */
    bytes[at++] = 7;
    bytes[at++] = 0x8a; /* field 17, length-delimited: (17 << 3) | 2 as a varint */
    bytes[at++] = 0x01;
    bytes[at++] = (uint8_t)(0x80 | (body & 0x7f)); /* 8192 as a varint: 0x80 0x40 */
    bytes[at++] = (uint8_t)(body >> 7);
    memset(bytes + at, 0xff, body);
    len = at + body;

    double before = decode_off_loop();
    uint32_t sock = 0;
    cr_assert_eq(testd_raw_open(&decode_d, &sock), 0);
    Tessera__V1__Reply *r = NULL;
    cr_assert_eq(testd_raw_send(sock, bytes, len, 30000, &r), 0);
    cr_assert_eq(r->id, 7);
    cr_assert_eq(r->status, TESSERA__V1__STATUS__BAD_MESSAGE, "%s", r->message);
    tessera__v1__reply__free_unpacked(r, NULL);
    testd_raw_close(sock);
    free(bytes);
    cr_assert_eq(decode_off_loop() - before, 1.0);

    tsr_error err;
    tsr_client_info info;
    cr_assert_eq(tsr_client_hello(decode_client, &info, 0, &err), TSR_OK, "%s", err.message);
}
