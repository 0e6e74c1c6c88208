/*
 * dataplane_test.c — shared-memory tensors, batched launches and CUDA IPC
 * imports against a real tesserad on the CPU backend.
 *
 * The shared-memory path must give the same bytes as the inline one and refuse
 * bad names, ranges and sizes with exact codes; a batch must run its launches
 * in order (each reads the previous output) and fail whole, naming the entry,
 * when any entry is bad; an import is UNSUPPORTED without a GPU.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tessera/region.h"
#include "../support/fixture.h"

TestSuite(dataplane, .init = fixture_suite_start_client, .fini = fixture_suite_stop);

Test(dataplane, shm_buffer_write_then_read_round_trips)
{
    tsr_client_shm *shm;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(1 << 20, &shm, &err), TSR_OK, "%s", err.message);
    float *p = tsr_client_shm_data(shm);
    for (int i = 0; i < 1000; i++)
        p[i] = (float)i * 0.5f;
    tsr_buffer b = fixture_alloc_f32(suite_client, 1000);
    cr_assert_eq(tsr_client_buffer_write_shm(suite_client, b, 0, shm, 0, 4000, 0, &err), TSR_OK,
                 "%s", err.message);
    float back[1000];
    size_t got = 0;
    cr_assert_eq(tsr_client_buffer_read(suite_client, b, 0, back, sizeof back, &got, 0, &err),
                 TSR_OK);
    cr_assert_eq(got, 4000);
    cr_expect_eq(memcmp(back, p, 4000), 0);
    /* And out again, into another place of the segment. */
    cr_assert_eq(tsr_client_buffer_read_shm(suite_client, b, 400, shm, 8192, 400, 0, &err), TSR_OK,
                 "%s", err.message);
    cr_expect_eq(memcmp((char *)p + 8192, (char *)p + 400, 400), 0);
    tsr_client_shm_free(shm);
}

Test(dataplane, run_shm_matches_inline)
{
    tsr_region *r = fixture_affine(4096);
    tsr_client_shm *shm;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(64 << 10, &shm, &err), TSR_OK);
    float *p = tsr_client_shm_data(shm);
    for (int i = 0; i < 4096; i++)
        p[i] = (float)(i - 2000) / 7.0f;
    uint64_t in_off[] = {0};
    tsr_client_decision dec;
    cr_assert_eq(tsr_client_run_shm(suite_client, r, NULL, shm, in_off, 16384, &dec, 0, &err),
                 TSR_OK, "%s", err.message);
    static float inline_out[4096];
    const void *inputs[] = {p};
    cr_assert_eq(tsr_client_run(suite_client, r, NULL, inputs, inline_out, NULL, 0, &err), TSR_OK);
    cr_expect_eq(memcmp(p + 4096, inline_out, sizeof inline_out), 0);
    cr_expect_eq(p[4096], (float)(-2000) / 7.0f * 2.0f + 1.0f);
    tsr_client_shm_free(shm);
    tsr_client_region_free(r);
}

/* Sends a buffer_write naming a segment with a raw request, for what the library
 * never sends (bad names, ranges outside the segment). */
static tsr_status dataplane_raw_write(const char *name, uint64_t offset, uint64_t length, char *msg,
                                      size_t msg_size)
{
    uint32_t sock;
    cr_assert_eq(testd_raw_open(&suite_daemon, &sock), 0);
    Tessera__V1__BufferAllocRequest alloc;
    Tessera__V1__Request req;
    int64_t shape[] = {1024};
    testd_request_alloc_f32(&req, &alloc, 101, shape, 1);
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(testd_raw_request(sock, &req, 10000, &reply), 0);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK);
    uint64_t buf = reply->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(reply, NULL);

    Tessera__V1__SharedMemory ref = TESSERA__V1__SHARED_MEMORY__INIT;
    ref.name = (char *)name;
    ref.offset = offset;
    ref.length = length;
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    w.buffer = buf;
    w.shm = &ref;
    req.id = 102;
    req.body_case = TESSERA__V1__REQUEST__BODY_BUFFER_WRITE;
    req.buffer_write = &w;
    cr_assert_eq(testd_raw_request(sock, &req, 10000, &reply), 0);
    tsr_status st = (tsr_status)reply->status;
    snprintf(msg, msg_size, "%s", reply->message ? reply->message : "");
    tessera__v1__reply__free_unpacked(reply, NULL);
    testd_raw_close(sock);
    return st;
}

Test(dataplane, shm_bad_names_and_ranges_are_refused)
{
    tsr_client_shm *shm;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(8192, &shm, &err), TSR_OK);
    const char *name = tsr_client_shm_name(shm);
    char msg[512];
    cr_expect_eq(dataplane_raw_write("/tsr-no-such-segment", 0, 16, msg, sizeof msg), TSR_NOT_FOUND,
                 "%s", msg);
    cr_expect_eq(dataplane_raw_write("relative", 0, 16, msg, sizeof msg), TSR_INVALID_ARGUMENT);
    cr_expect_eq(dataplane_raw_write("/a/b", 0, 16, msg, sizeof msg), TSR_INVALID_ARGUMENT);
    cr_expect_eq(dataplane_raw_write(name, 8190, 16, msg, sizeof msg), TSR_BUFFER_MISMATCH);
    cr_expect(strstr(msg, "pass the end") != NULL, "%s", msg);
    cr_expect_eq(dataplane_raw_write(name, 1ull << 62, 16, msg, sizeof msg), TSR_BUFFER_MISMATCH);
    /* Inside the segment but past the 4096-byte buffer. */
    cr_expect_eq(dataplane_raw_write(name, 0, 8192, msg, sizeof msg), TSR_BUFFER_MISMATCH);
    cr_expect_eq(dataplane_raw_write(name, 0, 4096, msg, sizeof msg), TSR_OK, "%s", msg);
    tsr_client_shm_free(shm);
}

Test(dataplane, shm_of_another_user_is_refused)
{
    if (geteuid() != 0)
        cr_skip_test("giving a segment to another uid needs root");
    char name[64];
    snprintf(name, sizeof name, "/tsr-test-foreign-%ld", (long)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 8192), 0);
    cr_assert_eq(fchown(fd, 12345, 12345), 0);
    close(fd);
    char msg[512];
    cr_expect_eq(dataplane_raw_write(name, 0, 16, msg, sizeof msg), TSR_UNAUTHENTICATED, "%s", msg);
    cr_expect(strstr(msg, "uid 12345") != NULL, "%s", msg);
    shm_unlink(name);
}

Test(dataplane, run_shm_wrong_output_size_is_mismatch)
{
    tsr_region *r = fixture_affine(1024);
    tsr_client_shm *shm;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(6000, &shm, &err), TSR_OK);
    uint64_t in_off[] = {0};
    /* The output would end past the segment: refused before sending. */
    cr_expect_eq(tsr_client_run_shm(suite_client, r, NULL, shm, in_off, 4096, NULL, 0, &err),
                 TSR_BUFFER_MISMATCH);
    tsr_client_shm_free(shm);
    tsr_client_region_free(r);
}

Test(dataplane, batch_runs_launches_in_order)
{
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(suite_client, 256, &k);
    tsr_error err;
    tsr_buffer b[2];
    for (int i = 0; i < 2; i++)
        b[i] = fixture_alloc_f32(suite_client, 256);
    float x[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)i;
    cr_assert_eq(tsr_client_buffer_write(suite_client, b[0], 0, x, sizeof x, 0, &err), TSR_OK);
    /* Ping-pong 100 times: each launch reads the previous one's output. */
    tsr_client_launch_desc l[100];
    for (int i = 0; i < 100; i++)
        l[i] = (tsr_client_launch_desc){k.kernel, 1, &b[i % 2], b[(i + 1) % 2]};
    tsr_client_batch_result res;
    cr_assert_eq(tsr_client_batch(suite_client, l, 100, true, &res, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(res.launched, 100);
    cr_expect_eq(res.graph_replayed, false, "the CPU backend launches one by one");
    float y[256];
    cr_assert_eq(tsr_client_buffer_read(suite_client, b[0], 0, y, sizeof y, NULL, 0, &err), TSR_OK);
    /* 100 steps of 2x+1 from 0 give 2^100 - 1, which rounds to 2^100 in f32; a
     * lost or reordered launch would give another power of two. */
    cr_expect_eq(y[0], 0x1p100f);
    tsr_client_region_free(r);
}

Test(dataplane, batch_with_a_bad_entry_runs_nothing)
{
    tsr_region *r = fixture_affine(8);
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, r, NULL, &k, 0, &err), TSR_OK);
    tsr_buffer a = fixture_alloc_f32(suite_client, 8), y = fixture_alloc_f32(suite_client, 8);
    tsr_buffer bad = fixture_alloc_f32(suite_client, 4);
    tsr_client_launch_desc l[3] = {
        {k.kernel, 1, &a, y}, {k.kernel, 1, &a, y}, {k.kernel, 1, &bad, y}};
    cr_expect_eq(tsr_client_batch(suite_client, l, 3, false, NULL, 0, &err), TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message, "batch.launches[2].inputs[0] (x): buffer holds 16 bytes of f32, "
                                  "the kernel needs 32 bytes of f32");
    float out[8];
    cr_assert_eq(tsr_client_buffer_read(suite_client, y, 0, out, sizeof out, NULL, 0, &err),
                 TSR_OK);
    cr_expect_eq(out[0], 0.0f, "nothing ran: the output is still the zeroed allocation");
    /* The same buffer as an output, and a buffer that does not exist. */
    l[2] = (tsr_client_launch_desc){k.kernel, 1, &a, bad};
    cr_expect_eq(tsr_client_batch(suite_client, l, 3, false, NULL, 0, &err), TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message, "batch.launches[2].output (y): buffer holds 16 bytes of f32, the "
                                  "kernel needs 32 bytes of f32");
    tsr_buffer gone = 0x7777;
    l[2] = (tsr_client_launch_desc){k.kernel, 1, &gone, y};
    cr_expect_eq(tsr_client_batch(suite_client, l, 3, false, NULL, 0, &err), TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "batch.launches[2].inputs[0]: no buffer 0x7777");
    /* Two inputs for a kernel of one. */
    tsr_buffer two[2] = {a, a};
    l[2] = (tsr_client_launch_desc){k.kernel, 2, two, y};
    cr_expect_eq(tsr_client_batch(suite_client, l, 3, false, NULL, 0, &err), TSR_BUFFER_MISMATCH);
    cr_expect_str_eq(err.message,
                     "batch.launches[2].inputs: 2 inputs given, the pointwise region takes 1 (x)");
    l[1].kernel = 12345;
    cr_expect_eq(tsr_client_batch(suite_client, l, 2, false, NULL, 0, &err), TSR_NOT_FOUND);
    cr_expect_str_eq(err.message, "batch.launches[1].kernel: no kernel 0x3039");
    cr_expect_eq(tsr_client_batch(suite_client, l, 0, false, NULL, 0, &err), TSR_INVALID_ARGUMENT);
    tsr_client_region_free(r);
}

Test(dataplane, import_is_unsupported_on_the_cpu_backend)
{
    unsigned char handle[64] = {1};
    int64_t shape[] = {16};
    tsr_buffer b;
    tsr_error err;
    cr_expect_eq(tsr_client_buffer_import(suite_client, handle, 64, 0, TSR_CLIENT_F32, 1, shape, &b,
                                          0, &err),
                 TSR_UNSUPPORTED);
    cr_expect_eq(tsr_client_buffer_import(suite_client, handle, 96, 64, TSR_CLIENT_F32, 1, shape,
                                          &b, 0, &err),
                 TSR_BUFFER_MISMATCH, "%s", err.message);
}
