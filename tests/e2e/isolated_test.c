/*
 * isolated_test.c — the device in a worker process (backend_isolated.c),
 * end to end with "cpu-isolated", which runs the CPU backend in the worker:
 * the same forwarding, windows, descriptor passing and restart that carry the
 * "cuda" backend on a GPU node.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/fixture.h"

static const char *const iso_flags[] = {"--backend", "cpu-isolated", NULL};

static void iso_setup(void)
{
    suite_client = fixture_start_client(&suite_daemon, iso_flags, 60000);
}

TestSuite(isolated, .init = iso_setup, .fini = fixture_suite_stop, .timeout = 120);

/* y = 2x + 1 over n f32 elements, compiled on suite_client: the kernel handle. */
static tsr_kernel iso_compile_affine(int64_t n, tsr_region **r)
{
    *r = fixture_affine(n);
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(suite_client, *r, NULL, &k, 0, &err), TSR_OK, "%s",
                 err.message);
    return k.kernel;
}

static tsr_buffer iso_alloc(int64_t n)
{
    return fixture_alloc_f32(suite_client, n);
}

/* Polls c's health until the daemon is ready after its first recovery (at
 * most 10 s); the last answer. */
static tsr_client_health iso_wait_recovered(tsr_client *c)
{
    tsr_client_health h;
    for (int i = 0; i < 2000; i++) {
        cr_assert_eq(tsr_client_health_get(c, &h, 0, NULL), TSR_OK);
        if (h.state == TSR_CLIENT_HEALTH_READY && h.recoveries == 1)
            break;
        usleep(5000);
    }
    return h;
}

/* y[i] == 2 x[i] + 1 for every element. */
static void iso_assert_affine(const float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(y[i], 2.0f * x[i] + 1.0f, "element %lld", (long long)i);
}

static void iso_fill(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i % 4093) * 0.25f - 300.0f;
}

Test(isolated, launches_and_copies_larger_than_a_window_are_exact)
{
    const int64_t n = 3 << 20; /* 12 MiB: three windows */
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    cr_assert(x != NULL && y != NULL);
    iso_fill(x, n);
    tsr_region *r;
    tsr_kernel k = iso_compile_affine(n, &r);
    tsr_buffer bx = iso_alloc(n), by = iso_alloc(n);
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_write(suite_client, bx, 0, x, (size_t)n * sizeof *x, 0, &err),
                 TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_launch(suite_client, k, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    size_t got = 0;
    cr_assert_eq(
        tsr_client_buffer_read(suite_client, by, 0, y, (size_t)n * sizeof *y, &got, 0, &err),
        TSR_OK, "%s", err.message);
    cr_assert_eq(got, (size_t)n * sizeof *y);
    iso_assert_affine(x, y, n);
    /* A copy that starts inside one window and ends in the next. */
    float part[1000];
    cr_assert_eq(tsr_client_buffer_read(suite_client, bx, (1u << 20) * sizeof(float) - 2000, part,
                                        sizeof part, NULL, 0, &err),
                 TSR_OK);
    cr_assert_eq(memcmp(part, x + (1 << 20) - 500, sizeof part), 0);
    tsr_client_region_free(r);
    free(x);
    free(y);
}

Test(isolated, shared_memory_is_pinned_in_the_worker_and_copied_exactly)
{
    const int64_t n = 65536;
    tsr_client_shm *shm = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(1 << 20, &shm, &err), TSR_OK, "%s", err.message);
    float *base = tsr_client_shm_data(shm);
    iso_fill(base + 1024, n);
    tsr_buffer bx = iso_alloc(n);
    cr_assert_eq(tsr_client_buffer_write_shm(suite_client, bx, 0, shm, 1024 * sizeof(float),
                                             (size_t)n * sizeof(float), 0, &err),
                 TSR_OK, "%s", err.message);
    float *back = malloc((size_t)n * sizeof *back);
    cr_assert_eq(
        tsr_client_buffer_read(suite_client, bx, 0, back, (size_t)n * sizeof *back, NULL, 0, &err),
        TSR_OK, "%s", err.message);
    cr_assert_eq(memcmp(back, base + 1024, (size_t)n * sizeof *back), 0);
    /* Back out into another place of the segment. */
    cr_assert_eq(tsr_client_buffer_read_shm(suite_client, bx, 0, shm, 128 * 1024 * sizeof(float),
                                            (size_t)n * sizeof(float), 0, &err),
                 TSR_OK, "%s", err.message);
    cr_assert_eq(memcmp(base + 128 * 1024, base + 1024, (size_t)n * sizeof(float)), 0);
    /* A run whose input and output live in the segment. */
    tsr_region *r = fixture_affine(n);
    uint64_t in_off[] = {1024 * sizeof(float)};
    cr_assert_eq(tsr_client_run_shm(suite_client, r, NULL, shm, in_off, 192 * 1024 * sizeof(float),
                                    NULL, 0, &err),
                 TSR_OK, "%s", err.message);
    iso_assert_affine(base + 1024, base + 192 * 1024, n);
    tsr_client_region_free(r);
    free(back);
    tsr_client_shm_free(shm);
}

/* A chain through the worker in one request: each launch reads the previous
 * one's output, so the order is checked too. */
Test(isolated, a_batch_runs_in_the_worker_in_order)
{
    const int64_t n = 1024;
    tsr_region *r;
    tsr_kernel k = iso_compile_affine(n, &r);
    tsr_error err;
    enum { LINKS = 12 };
    tsr_buffer b[LINKS + 1];
    for (int i = 0; i <= LINKS; i++)
        b[i] = iso_alloc(n);
    float x[1024], y[1024];
    for (int i = 0; i < n; i++)
        x[i] = (float)(i % 7) - 3.0f;
    cr_assert_eq(tsr_client_buffer_write(suite_client, b[0], 0, x, sizeof x, 0, &err), TSR_OK);
    tsr_client_launch_desc l[LINKS];
    for (int i = 0; i < LINKS; i++)
        l[i] = (tsr_client_launch_desc){
            .kernel = k, .n_inputs = 1, .inputs = &b[i], .output = b[i + 1]};
    tsr_client_batch_result res;
    cr_assert_eq(tsr_client_batch(suite_client, l, LINKS, false, &res, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(res.launched, LINKS);
    cr_assert_eq(tsr_client_buffer_read(suite_client, b[LINKS], 0, y, sizeof y, NULL, 0, &err),
                 TSR_OK);
    for (int i = 0; i < n; i++) {
        float want = x[i];
        for (int j = 0; j < LINKS; j++)
            want = 2.0f * want + 1.0f;
        cr_assert_eq(y[i], want, "element %d", i);
    }
    tsr_client_region_free(r);
}

Test(isolated, a_killed_worker_is_replaced_and_serving_resumes)
{
    const int64_t n = 4096;
    tsr_region *r;
    tsr_kernel k = iso_compile_affine(n, &r);
    tsr_buffer bx = iso_alloc(n), by = iso_alloc(n);
    /* A segment pinned in the old worker must be pinned again in the new one. */
    tsr_error err;
    tsr_client_shm *shm = NULL;
    cr_assert_eq(tsr_client_shm_create(1 << 16, &shm, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsr_client_buffer_write_shm(suite_client, bx, 0, shm, 0, 4096, 0, &err), TSR_OK,
                 "%s", err.message);

    pid_t worker = fixture_worker_pid(suite_daemon.pid);
    cr_assert_eq(kill(worker, SIGKILL), 0);
    /* The first device call after the crash answers DEVICE_LOST and starts
     * the recovery. */
    tsr_status st = tsr_client_launch(suite_client, k, &bx, 1, by, NULL, 0, &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    tsr_client_health h = iso_wait_recovered(suite_client);
    cr_assert_eq(h.state, TSR_CLIENT_HEALTH_READY);
    cr_assert_eq(h.recoveries, 1);
    cr_assert_neq(fixture_worker_pid(suite_daemon.pid), worker, "the worker was not replaced");

    /* Old buffers are gone; the kernel handle was reloaded into the new worker. */
    st = tsr_client_launch(suite_client, k, &bx, 1, by, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    tsr_buffer old_x = bx;
    bx = iso_alloc(n);
    by = iso_alloc(n);
    float x[4096], y[4096];
    iso_fill(x, n);
    cr_assert_eq(tsr_client_buffer_write(suite_client, bx, 0, x, sizeof x, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_client_launch(suite_client, k, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_client_buffer_read(suite_client, by, 0, y, sizeof y, NULL, 0, &err), TSR_OK);
    iso_assert_affine(x, y, n);
    /* A batch whose second launch names a buffer of the old worker runs the
     * first and stops there. */
    tsr_buffer bz = iso_alloc(n);
    tsr_client_launch_desc l[3] = {
        {.kernel = k, .n_inputs = 1, .inputs = &bx, .output = by},
        {.kernel = k, .n_inputs = 1, .inputs = &old_x, .output = bz},
        {.kernel = k, .n_inputs = 1, .inputs = &by, .output = bz},
    };
    st = tsr_client_batch(suite_client, l, 3, false, NULL, 0, &err);
    cr_expect_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    cr_expect(strstr(err.message, "batch.launches[1]") != NULL, "%s", err.message);
    /* The segment goes through the new worker, exactly. */
    float *sp = tsr_client_shm_data(shm);
    for (int i = 0; i < 1024; i++)
        sp[i] = (float)i - 512.0f;
    cr_assert_eq(tsr_client_buffer_write_shm(suite_client, bz, 0, shm, 0, 4096, 0, &err), TSR_OK,
                 "%s", err.message);
    float zb[1024];
    cr_assert_eq(tsr_client_buffer_read(suite_client, bz, 0, zb, sizeof zb, NULL, 0, &err), TSR_OK);
    cr_assert_eq(memcmp(zb, sp, sizeof zb), 0);
    tsr_client_shm_free(shm);
    tsr_client_region_free(r);
}

/* systemd sends SIGTERM to every process of the unit, and the daemon still
 * needs its worker while it drains: the worker leaves stop signals alone. */
Test(isolated, the_worker_ignores_stop_signals_meant_for_the_daemon)
{
    pid_t worker = fixture_worker_pid(suite_daemon.pid);
    cr_assert_eq(kill(worker, SIGTERM), 0);
    cr_assert_eq(kill(worker, SIGINT), 0);
    usleep(200000);
    cr_assert_eq(kill(worker, 0), 0, "the worker died of a stop signal");
    cr_assert_eq(fixture_worker_pid(suite_daemon.pid), worker);
    tsr_buffer b = iso_alloc(16);
    float v[16] = {1, 2, 3};
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_write(suite_client, b, 0, v, sizeof v, 0, &err), TSR_OK, "%s",
                 err.message);
}

/* A kernel that never ends: past kernel_timeout_ms the worker is stopped and
 * replaced, the hung request answers DEVICE_LOST, and serving resumes. */
Test(isolated, a_kernel_that_never_ends_costs_its_worker_after_the_timeout)
{
    testd d;
    cr_assert_eq(
        testd_start_config(&d, iso_flags, "{\"test_faults\": true, \"kernel_timeout_ms\": 500}\n"),
        0, "tesserad did not start");
    tsr_client *c = fixture_client(&d, 60000);
    const int64_t n = 256;
    tsr_region *r = fixture_affine(n);
    float x[256], y[256];
    iso_fill(x, n);
    const void *in[] = {x};
    tsr_client_compile_opts hang = {.force = "test_hang", .skip_verify = true};
    tsr_error err;
    tsr_status st = tsr_client_run(c, r, &hang, in, y, NULL, 0, &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    cr_expect(strstr(err.message, "kernel_timeout_ms (500 ms)") != NULL, "%s", err.message);
    cr_assert_eq(iso_wait_recovered(c).recoveries, 1);
    cr_assert_eq(tsr_client_run(c, r, NULL, in, y, NULL, 0, &err), TSR_OK, "%s", err.message);
    iso_assert_affine(x, y, n);
    tsr_client_region_free(r);
    fixture_stop(&d, c);
}

/* ---- a launch and its synchronize in one message to the worker ---- */

/* A daemon of its own on backend with test_faults, and a client of it. */
static tsr_client *iso_start_own(testd *d, const char *backend)
{
    const char *const flags[] = {"--backend", backend, NULL};
    cr_assert_eq(testd_start_config(d, flags, "{\"test_faults\": true}\n"), 0,
                 "tesserad did not start");
    return fixture_client(d, 60000);
}

/* Every launch and run goes to the worker as one LAUNCH_SYNC, on the pool
 * (the first launch, not yet measured) and on the loop (the later ones)
 * alike, and a batch's chunk as one LAUNCH_MANY with its synchronize; the
 * in-process CPU backend has no such call and counts none. */
Test(isolated, each_launch_run_and_batch_chunk_is_one_message_to_the_worker)
{
    testd d;
    tsr_client *c = iso_start_own(&d, "cpu-isolated");
    const int64_t n = 256;
    tsr_client_compiled k;
    tsr_region *r = fixture_affine_compiled(c, n, &k);
    tsr_error err;
    tsr_buffer bx = fixture_alloc_f32(c, n), by = fixture_alloc_f32(c, n);
    float x[256], y[256];
    iso_fill(x, n);
    cr_assert_eq(tsr_client_buffer_write(c, bx, 0, x, sizeof x, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 0);
    for (int i = 0; i < 7; i++) {
        memset(y, 0, sizeof y);
        cr_assert_eq(tsr_client_launch(c, k.kernel, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                     err.message);
        cr_assert_eq(tsr_client_buffer_read(c, by, 0, y, sizeof y, NULL, 0, &err), TSR_OK);
        iso_assert_affine(x, y, n);
    }
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 7);
    const void *in[] = {x};
    memset(y, 0, sizeof y);
    cr_assert_eq(tsr_client_run(c, r, NULL, in, y, NULL, 0, &err), TSR_OK, "%s", err.message);
    iso_assert_affine(x, y, n);
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 8);
    /* A batch's chunk goes with its synchronize too: three launches, each
     * measured already, in one chunk and one message. */
    tsr_client_launch_desc l[3];
    for (int i = 0; i < 3; i++)
        l[i] = (tsr_client_launch_desc){
            .kernel = k.kernel, .n_inputs = 1, .inputs = &bx, .output = by};
    memset(y, 0, sizeof y);
    tsr_client_batch_result res;
    cr_assert_eq(tsr_client_batch(c, l, 3, false, &res, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(res.launched, 3);
    cr_assert_eq(tsr_client_buffer_read(c, by, 0, y, sizeof y, NULL, 0, &err), TSR_OK);
    iso_assert_affine(x, y, n);
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 11);
    fixture_stop(&d, c);

    c = iso_start_own(&d, "cpu");
    fixture_compile_on(c, r, &k);
    bx = fixture_alloc_f32(c, n);
    by = fixture_alloc_f32(c, n);
    cr_assert_eq(tsr_client_launch(c, k.kernel, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 0);
    tsr_client_region_free(r);
    fixture_stop(&d, c);
}

/* A launch that fails in the worker answers with the launch's own error,
 * not the synchronize's: test_fault's simulated illegal address, word for
 * word as the in-process CPU backend says it. The fault is sticky, so the
 * worker is replaced as for any fault, the kernel handle is loaded into the
 * new worker and launches again as one message. */
Test(isolated, a_fault_in_the_fused_launch_says_the_launch_error_and_starts_recovery)
{
    testd d;
    tsr_client *c = iso_start_own(&d, "cpu-isolated");
    const int64_t n = 256;
    tsr_region *r = fixture_affine(n);
    tsr_client_compile_opts fault = {.force = "test_fault", .skip_verify = true};
    tsr_client_compiled kf, k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, &fault, &kf, 0, &err), TSR_OK, "%s", err.message);
    fixture_compile_on(c, r, &k);
    tsr_buffer bx = fixture_alloc_f32(c, n), by = fixture_alloc_f32(c, n);
    tsr_status st = tsr_client_launch(c, kf.kernel, &bx, 1, by, NULL, 0, &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    cr_assert_str_eq(err.message,
                     "cpu backend: test_fault faulted the device (simulated illegal address)");
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 1);
    tsr_client_health h = iso_wait_recovered(c);
    cr_assert_eq(h.state, TSR_CLIENT_HEALTH_READY);
    cr_assert_eq(h.recoveries, 1);
    cr_assert_eq(fixture_counter(c, "device_faults_total"), 1);
    cr_assert_eq(fixture_counter(c, "device_recoveries_total"), 1);

    /* The old buffers went with the worker; new ones serve the reloaded kernel. */
    st = tsr_client_launch(c, k.kernel, &bx, 1, by, NULL, 0, &err);
    cr_assert_eq(st, TSR_DEVICE_LOST, "%s: %s", tsr_status_name(st), err.message);
    cr_assert_str_eq(err.message, "input buffer 0's device memory was lost when device 0 was "
                                  "recovered after a fault; free it and allocate it again");
    bx = fixture_alloc_f32(c, n);
    by = fixture_alloc_f32(c, n);
    float x[256], y[256];
    iso_fill(x, n);
    cr_assert_eq(tsr_client_buffer_write(c, bx, 0, x, sizeof x, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_client_launch(c, k.kernel, &bx, 1, by, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(tsr_client_buffer_read(c, by, 0, y, sizeof y, NULL, 0, &err), TSR_OK);
    iso_assert_affine(x, y, n);
    cr_assert_eq(fixture_counter(c, "launches_fused_total"), 3);
    tsr_client_region_free(r);
    fixture_stop(&d, c);
}
