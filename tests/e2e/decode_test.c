/*
 * decode_test.c — request bodies over 4 KiB are checked and decoded on the
 * worker pool, never on the loop that serves every tenant.
 *
 * One connection pipelines 4 MiB buffer_writes, which decode off the loop, and
 * small buffer_reads, which decode on it; the counter
 * requests_decoded_off_loop_total says exactly which requests went to the
 * pool. That a session's later request waits for an earlier one's decode is
 * checked in tests/unit/dispatch_test.c, where the order of arrival is the
 * test's to set.
 */
#include <criterion/criterion.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "../support/attack.h"
#include "../support/fixture.h"

#define DECODE_ELEMENTS (1 << 20) /* 4 MiB of f32 */
#define DECODE_ROUNDS 6

TestSuite(decode, .init = fixture_suite_start_client, .fini = fixture_suite_stop, .timeout = 120);

static double decode_off_loop(void)
{
    return fixture_counter(suite_client, "requests_decoded_off_loop_total");
}

/* Sends req on the raw connection fd (framed as nng frames it; the frames go
 * out in this order, so the daemon receives them in this order), waiting for
 * the socket while the daemon still reads a 4 MiB write sent before. */
static void decode_send(int fd, uint32_t req_id, const Tessera__V1__Request *req)
{
    size_t len = 0;
    uint8_t *bytes = testd_request_pack(req, &len);
    cr_assert_eq(attack_sp_send_wait(fd, req_id, bytes, len, 30000), 0);
    free(bytes);
}

/* The next reply on fd, whichever request it answers. */
static Tessera__V1__Reply *decode_recv(int fd)
{
    Tessera__V1__Reply *r = NULL;
    cr_assert_eq(attack_sp_recv(fd, 30000, &r), 0);
    return r;
}

Test(decode, large_bodies_decode_on_the_pool_and_small_ones_on_the_loop)
{
    int fd = attack_sp_connect(suite_daemon.url, 5000);
    cr_assert_geq(fd, 0);
    Tessera__V1__Request req;
    Tessera__V1__BufferAllocRequest alloc;
    int64_t shape[1] = {DECODE_ELEMENTS};
    testd_request_alloc_f32(&req, &alloc, 1, shape, 1);
    decode_send(fd, 1, &req);
    Tessera__V1__Reply *r = decode_recv(fd);
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
        uint64_t write_id = 100 + (uint64_t)round * 2, read_id = write_id + 1;
        testd_request_buffer_write(&req, &write, write_id);
        decode_send(fd, (uint32_t)write_id, &req);

        /* The last 16 elements, asked for right behind the write, before its
         * answer (nng hands the two to different contexts, which may reach the
         * loop in either order; tests/unit/dispatch_test.c checks the order
         * the loop keeps). */
        Tessera__V1__BufferReadRequest read = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
        read.buffer = buffer;
        read.offset = (DECODE_ELEMENTS - 16) * sizeof(float);
        read.length = 16 * sizeof(float);
        Tessera__V1__Request rreq = TESSERA__V1__REQUEST__INIT;
        rreq.id = read_id;
        rreq.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_READ;
        rreq.buffer_read = &read;
        decode_send(fd, (uint32_t)read_id, &rreq);

        for (int k = 0; k < 2; k++) {
            Tessera__V1__Reply *rep = decode_recv(fd);
            cr_assert_eq(rep->status, TESSERA__V1__STATUS__OK, "reply %llu: %s",
                         (unsigned long long)rep->id, rep->message);
            cr_assert(rep->id == read_id || rep->id == write_id, "reply %llu",
                      (unsigned long long)rep->id);
            if (rep->id == read_id)
                cr_assert_eq(rep->buffer_read->data.len, 16 * sizeof(float));
            tessera__v1__reply__free_unpacked(rep, NULL);
        }
    }
    free(data);
    /* The writes went to the pool; the reads, the alloc and the stats did not. */
    cr_assert_eq(decode_off_loop() - before, (double)DECODE_ROUNDS);
    close(fd);
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
    cr_assert_eq(testd_raw_open(&suite_daemon, &sock), 0);
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
    cr_assert_eq(tsr_client_hello(suite_client, &info, 0, &err), TSR_OK, "%s", err.message);
}
