/*
 * shm_shrink.c — the cases of a tenant that shrinks its shared-memory segment
 * under the daemon (see shm_shrink.h).
 */
#include "shm_shrink.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "tessera/region_pb.h"

#define SHRINK_TOKEN_A "shrink-tenant-a"
#define SHRINK_TOKEN_B "shrink-tenant-b"
#define SHRINK_SEGMENT (1u << 20)
#define SHRINK_AT (512u << 10)
#define SHRINK_N 1024 /* f32 elements of every buffer: 4 KiB */
#define SHRINK_TIMEOUT_MS 20000

/* A daemon with two tenants: a, which shrinks its segment, and b, which
 * keeps a buffer of known data throughout. */
typedef struct shrink_env {
    testd d;
    tsr_client *a, *b;
    tsr_buffer a_buf, b_buf;
    float b_data[SHRINK_N];
    tsr_client_shm *shm;
} shrink_env;

static void shrink_start(shrink_env *e, const char *backend)
{
    memset(e, 0, sizeof *e);
    char ha[65], hb[65];
    testd_token_sha256(SHRINK_TOKEN_A, ha);
    testd_token_sha256(SHRINK_TOKEN_B, hb);
    setenv("TESSERA_TOKEN", SHRINK_TOKEN_A, 1); /* testd's own hello */
    const char *flags[] = {"--backend", backend, NULL};
    cr_assert_eq(testd_start_config(&e->d, flags,
                                    "{\"tenants\": ["
                                    "{\"name\": \"a\", \"token_sha256\": [\"%s\"]},"
                                    "{\"name\": \"b\", \"token_sha256\": [\"%s\"]}]}\n",
                                    ha, hb),
                 0);
    e->a = testd_connect(e->d.url, SHRINK_TOKEN_A, SHRINK_TIMEOUT_MS);
    e->b = testd_connect(e->d.url, SHRINK_TOKEN_B, SHRINK_TIMEOUT_MS);
    cr_assert(e->a != NULL && e->b != NULL);
    tsr_error err;
    for (int i = 0; i < SHRINK_N; i++)
        e->b_data[i] = (float)i * 0.75f - 9.0f;
    e->b_buf = fixture_alloc_f32(e->b, SHRINK_N);
    cr_assert_eq(tsr_client_buffer_write(e->b, e->b_buf, 0, e->b_data, sizeof e->b_data, 0, &err),
                 TSR_OK, "%s", err.message);
    e->a_buf = fixture_alloc_f32(e->a, SHRINK_N);
    cr_assert_eq(tsr_client_shm_create(SHRINK_SEGMENT, &e->shm, &err), TSR_OK, "%s", err.message);
}

/* A first copy maps the segment in the daemon (a small one: the worker maps
 * it at the first copy the daemon does not bounce). */
static void shrink_map(shrink_env *e)
{
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_write_shm(e->a, e->a_buf, 0, e->shm, 0, SHRINK_N * 4, 0, &err),
                 TSR_OK, "%s", err.message);
}

static void shrink_truncate(const tsr_client_shm *shm, off_t size)
{
    int fd = shm_open(tsr_client_shm_name(shm), O_RDWR, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, size), 0);
    close(fd);
}

static void shrink_expect_refused(tsr_status st, const char *message, const char *field)
{
    cr_expect_eq(st, TSR_BUFFER_MISMATCH, "%s: %s", tsr_status_name(st), message);
    cr_expect(strstr(message, field) != NULL, "'%s' does not name %s", message, field);
    cr_expect(strstr(message, "shrank") != NULL, "'%s' does not say the segment shrank", message);
}

/* Both tenants are still served, b's data is intact, the device never
 * faulted, and the daemon exits cleanly. */
static void shrink_finish(shrink_env *e)
{
    tsr_error err;
    float back[SHRINK_N];
    cr_expect_eq(tsr_client_buffer_read(e->a, e->a_buf, 0, back, sizeof back, NULL, 0, &err),
                 TSR_OK, "tenant a after the shrink: %s", err.message);
    memset(back, 0, sizeof back);
    cr_expect_eq(tsr_client_buffer_read(e->b, e->b_buf, 0, back, sizeof back, NULL, 0, &err),
                 TSR_OK, "tenant b after a's shrink: %s", err.message);
    cr_expect_eq(memcmp(back, e->b_data, sizeof back), 0, "tenant b's buffer lost its data");
    cr_expect_eq(fixture_counter(e->b, "device_faults_total"), 0);
    cr_expect_eq(fixture_counter(e->b, "device_recoveries_total"), 0);
    tsr_client_shm_free(e->shm);
    tsr_client_close(e->a);
    tsr_client_close(e->b);
    cr_expect_eq(testd_stop(&e->d), 0, "tesserad did not exit cleanly");
    testd_remove(&e->d);
}

/* A buffer copy from (to_device) or into the segment, after it was cut to
 * nothing, past its new end. */
static void shrink_copy(const char *backend, bool to_device)
{
    shrink_env e;
    shrink_start(&e, backend);
    shrink_map(&e);
    shrink_truncate(e.shm, 0);
    tsr_error err;
    tsr_status st =
        to_device
            ? tsr_client_buffer_write_shm(e.a, e.a_buf, 0, e.shm, SHRINK_AT, SHRINK_N * 4, 0, &err)
            : tsr_client_buffer_read_shm(e.a, e.a_buf, 0, e.shm, SHRINK_AT, SHRINK_N * 4, 0, &err);
    shrink_expect_refused(st, err.message, to_device ? "buffer_write.shm" : "buffer_read.shm");
    shrink_finish(&e);
}

void shrink_buffer_write(const char *backend)
{
    shrink_copy(backend, true);
}

void shrink_buffer_read(const char *backend)
{
    shrink_copy(backend, false);
}

void shrink_run_input(const char *backend)
{
    shrink_env e;
    shrink_start(&e, backend);
    shrink_map(&e);
    shrink_truncate(e.shm, 0);
    tsr_region *r = fixture_affine(SHRINK_N);
    uint64_t in_off[] = {SHRINK_AT};
    tsr_error err;
    tsr_status st =
        tsr_client_run_shm(e.a, r, NULL, e.shm, in_off, SHRINK_AT + SHRINK_N * 4, NULL, 0, &err);
    shrink_expect_refused(st, err.message, "run.inputs[0].shm");
    tsr_client_region_free(r);
    shrink_finish(&e);
}

/* A REQ socket of tenant a's own (a session of its own: the segment is mapped
 * per session), for a run with an inline input and its output in the segment,
 * which the client library does not send. */
static Tessera__V1__Reply *shrink_raw(nng_socket s, Tessera__V1__Request *req)
{
    req->auth = SHRINK_TOKEN_A;
    Tessera__V1__Reply *reply = NULL;
    cr_assert_eq(testd_raw_request((uint32_t)nng_socket_id(s), req, SHRINK_TIMEOUT_MS, &reply), 0,
                 "no reply: the daemon is gone");
    return reply;
}

void shrink_run_output(const char *backend)
{
    shrink_env e;
    shrink_start(&e, backend);
    nng_socket s;
    cr_assert_eq(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    cr_assert_eq(nng_dial(s, e.d.url, NULL, 0), 0);
    /* Map the segment on this session with a first write. */
    Tessera__V1__BufferAllocRequest alloc;
    Tessera__V1__Request req;
    int64_t shape[] = {SHRINK_N};
    testd_request_alloc_f32(&req, &alloc, 1, shape, 1);
    Tessera__V1__Reply *reply = shrink_raw(s, &req);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK, "%s", reply->message);
    uint64_t buf = reply->buffer_alloc->buffer;
    tessera__v1__reply__free_unpacked(reply, NULL);
    Tessera__V1__SharedMemory ref = TESSERA__V1__SHARED_MEMORY__INIT;
    ref.name = (char *)tsr_client_shm_name(e.shm);
    ref.length = SHRINK_N * 4;
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    w.buffer = buf;
    w.shm = &ref;
    testd_request_buffer_write(&req, &w, 2);
    reply = shrink_raw(s, &req);
    cr_assert_eq(reply->status, TESSERA__V1__STATUS__OK, "%s", reply->message);
    tessera__v1__reply__free_unpacked(reply, NULL);

    shrink_truncate(e.shm, 0);
    tsr_region *r = fixture_affine(SHRINK_N);
    Tessera__V1__RunRequest run = TESSERA__V1__RUN_REQUEST__INIT;
    run.region = fixture_region_pb(r);
    static float x[SHRINK_N];
    Tessera__V1__Tensor in, *inputs[] = {&in};
    testd_tensor_f32(&in, shape, 1, x, sizeof x);
    run.n_inputs = 1;
    run.inputs = inputs;
    Tessera__V1__SharedMemory out = ref;
    out.offset = SHRINK_AT;
    run.output_shm = &out;
    testd_request_run(&req, &run, 3);
    reply = shrink_raw(s, &req);
    shrink_expect_refused((tsr_status)reply->status, reply->message ? reply->message : "",
                          "run.output_shm");
    tessera__v1__reply__free_unpacked(reply, NULL);
    tsr_region_pb_free(run.region);
    tsr_client_region_free(r);
    nng_close(s);
    shrink_finish(&e);
}

/* Shrinks the segment to nothing and grows it back, over and over, until told
 * to stop; it stays whole for about as long as a copy takes, so that copies
 * both find it cut (before they start) and are cut short (while they run). */
typedef struct shrink_flapper {
    const char *name;
    off_t size;
    atomic_bool stop;
    long flips;
} shrink_flapper;

static void *shrink_flap(void *arg)
{
    shrink_flapper *f = arg;
    int fd = shm_open(f->name, O_RDWR, 0);
    while (fd >= 0 && !atomic_load(&f->stop)) {
        if (ftruncate(fd, 0) != 0)
            break;
        usleep(100);
        if (ftruncate(fd, f->size) != 0)
            break;
        f->flips++;
        usleep(2000);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Large copies to and from a segment that shrinks under them: every answer is
 * OK or BUFFER_MISMATCH naming the field, and the daemon and worker live on. */
void shrink_race(const char *backend, bool faults)
{
    shrink_env e;
    shrink_start(&e, backend);
    const size_t big = 16u << 20;
    tsr_client_shm *seg;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(big, &seg, &err), TSR_OK, "%s", err.message);
    tsr_buffer b = fixture_alloc_f32(e.a, (int64_t)(big / 4));
    cr_assert_eq(tsr_client_buffer_write_shm(e.a, b, 0, seg, 0, big, 0, &err), TSR_OK, "%s",
                 err.message);
    shrink_flapper f = {.name = tsr_client_shm_name(seg), .size = (off_t)big};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, shrink_flap, &f), 0);
    /* At least a second of copies, and on until one was cut short where a
     * shrink can cut one short. */
    int ok = 0, refused = 0, during = 0;
    double start = testd_now_ms();
    for (int i = 0; testd_now_ms() - start < (during > 0 || !faults ? 1000.0 : 20000.0); i++) {
        /* Whole-segment copies, and small ones (which the daemon bounces). */
        int to_device = i % 2 == 0;
        size_t len = i % 4 < 2 ? big : 128u << 10, at = big - len;
        tsr_status st = to_device ? tsr_client_buffer_write_shm(e.a, b, 0, seg, at, len, 0, &err)
                                  : tsr_client_buffer_read_shm(e.a, b, 0, seg, at, len, 0, &err);
        if (st == TSR_OK) {
            ok++;
            continue;
        }
        refused++;
        during += strstr(err.message, "during the copy") != NULL;
        shrink_expect_refused(st, err.message, to_device ? "buffer_write.shm" : "buffer_read.shm");
        if (st != TSR_BUFFER_MISMATCH)
            break;
    }
    atomic_store(&f.stop, true);
    pthread_join(t, NULL);
    cr_log_info("%s: %d copies done, %d refused (%d cut short), %ld shrinks", backend, ok, refused,
                during, f.flips);
    cr_expect_gt(refused, 0, "no copy met a shrunk segment");
    if (faults)
        cr_expect_gt(during, 0, "no shrink raced a copy");
    tsr_client_shm_free(seg);
    shrink_finish(&e);
}
