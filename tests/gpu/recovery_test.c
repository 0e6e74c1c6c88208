/*
 * recovery_test.c — recovery from a real sticky fault on a GPU.
 *
 * An illegal address poisons the whole process on current drivers, so the
 * CUDA context lives in a device worker process (backend_isolated.c) and a
 * fault is survived by restarting that worker.
 *
 * The daemon runs on the cuda backend with test_faults; alice forces the
 * test_fault candidate, whose kernel stores far outside any allocation, so
 * the launch ends in CUDA_ERROR_ILLEGAL_ADDRESS and poisons the context while
 * bob keeps running regions on another connection (tests/support/recovery.c
 * holds the scenario and its assertions). Prints the time to recover. A
 * second test drives the CUDA backend directly through two faults and
 * recoveries. Without a CUDA driver or device the tests skip.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/isolated/isolated.h"
#include "tessera/json.h"
#include "../support/gpu.h"
#include "../support/recovery.h"
#include "../support/testd.h"
#include "../support/testdata.h"

#define BACKEND_N 4096

typedef struct backend_env {
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    tsr_region r;
    const tsr_candidate *tier1, *fault;
    uint8_t *bin1, *binf;
    size_t len1, lenf;
    char arch[32];
} backend_env;

/* Loads tier1, runs y = 2x + 1 on fresh buffers and a fresh stream, checks it. */
static void backend_run_ok(backend_env *e)
{
    tsr_error err;
    const tsrd_backend_ops *ops = e->ops;
    tsrd_kobj *k = NULL;
    cr_assert_eq(ops->load(e->b, 0, &e->r, e->tier1, e->bin1, e->len1, &k, &err), TSR_OK, "%s",
                 err.message);
    tsrd_stream *s = NULL;
    tsrd_dbuf *x = NULL, *y = NULL;
    cr_assert_eq(ops->stream_create(e->b, 0, &s, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->buffer_alloc(e->b, 0, BACKEND_N * 4, &x, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->buffer_alloc(e->b, 0, BACKEND_N * 4, &y, &err), TSR_OK, "%s", err.message);
    static float hx[BACKEND_N], hy[BACKEND_N];
    for (int i = 0; i < BACKEND_N; i++)
        hx[i] = (float)(i % 1000) * 0.5f - 17.0f;
    cr_assert_eq(ops->buffer_write(e->b, x, 0, hx, sizeof hx, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->launch(e->b, k, s, &x, 1, y, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->synchronize(e->b, s, NULL, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->buffer_read(e->b, y, 0, hy, sizeof hy, &err), TSR_OK, "%s", err.message);
    for (int i = 0; i < BACKEND_N; i++)
        cr_assert_eq(hy[i], 2.0f * hx[i] + 1.0f, "element %d", i);
    ops->buffer_free(e->b, x);
    ops->buffer_free(e->b, y);
    ops->stream_destroy(e->b, s);
    ops->unload(e->b, k);
}

Test(gpu_recovery, the_isolated_cuda_backend_survives_two_faults, .timeout = 300)
{
    gpu_require_device();
    backend_env e = {.ops = &tsrd_backend_cuda_isolated};
    const tsrd_backend_ops *ops = e.ops;
    tsr_error err;
    /* The worker is tesserad itself (this test program is not). */
    char exe[512];
    const char *build = getenv("BUILD");
    snprintf(exe, sizeof exe, "%s/bin/tesserad", build != NULL && build[0] ? build : "build");
    tsrd_backend_options o = {.test_faults = true, .worker_exe = exe};
    cr_assert_eq(ops->open(&o, &e.b, &err), TSR_OK, "%s", err.message);
    tsr_arbiter *a = NULL;
    cr_assert_eq(tsr_arbiter_create(NULL, &a, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(ops->register_candidates(e.b, a, &err), TSR_OK, "%s", err.message);
    char json[512];
    cr_assert_eq(testdata_affine_json(BACKEND_N, json, sizeof json), 0);
    cr_assert_eq(tsr_region_from_json(json, strlen(json), &e.r, &err), TSR_OK, "%s", err.message);
    tsrd_device_info info;
    cr_assert_eq(ops->device_info(e.b, 0, &info, &err), TSR_OK);
    snprintf(e.arch, sizeof e.arch, "%s", info.arch);
    e.tier1 = tsr_arbiter_find(a, TSR_KIND_POINTWISE, "tier1");
    e.fault = tsr_arbiter_find(a, TSR_KIND_POINTWISE, TSRD_TEST_FAULT_CANDIDATE);
    cr_assert(e.tier1 != NULL && e.fault != NULL);
    cr_assert_eq(ops->compile(e.b, &e.r, e.tier1, e.arch, &e.bin1, &e.len1, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(ops->compile(e.b, &e.r, e.fault, e.arch, &e.binf, &e.lenf, &err), TSR_OK, "%s",
                 err.message);
    backend_run_ok(&e);

    for (int round = 1; round <= 2; round++) {
        tsrd_kobj *kf = NULL;
        tsrd_stream *s = NULL;
        tsrd_dbuf *x = NULL, *y = NULL;
        cr_assert_eq(ops->load(e.b, 0, &e.r, e.fault, e.binf, e.lenf, &kf, &err), TSR_OK, "%s",
                     err.message);
        cr_assert_eq(ops->stream_create(e.b, 0, &s, &err), TSR_OK, "%s", err.message);
        cr_assert_eq(ops->buffer_alloc(e.b, 0, BACKEND_N * 4, &x, &err), TSR_OK);
        cr_assert_eq(ops->buffer_alloc(e.b, 0, BACKEND_N * 4, &y, &err), TSR_OK);
        tsr_status st = ops->launch(e.b, kf, s, &x, 1, y, &err);
        if (st == TSR_OK)
            st = ops->synchronize(e.b, s, NULL, &err);
        cr_assert_eq(st, TSR_DEVICE_LOST, "round %d: the fault answered %s: %s", round,
                     tsr_status_name(st), err.message);
        cr_assert(ops->lost(e.b));
        float probe = 0;
        cr_assert_eq(ops->buffer_write(e.b, x, 0, &probe, sizeof probe, &err), TSR_DEVICE_LOST);

        double t0 = testd_now_ms();
        st = ops->recover(e.b, &err);
        double t1 = testd_now_ms();
        cr_assert_eq(st, TSR_OK, "round %d: recover: %s", round, err.message);
        cr_assert_not(ops->lost(e.b));
        printf("cuda backend recover, round %d: %.1f ms\n", round, t1 - t0);

        /* The old context's objects answer DEVICE_LOST and free cleanly. */
        st = ops->buffer_write(e.b, x, 0, &probe, sizeof probe, &err);
        cr_assert_eq(st, TSR_DEVICE_LOST);
        cr_assert(strstr(err.message, "was recovered after a fault") != NULL, "%s", err.message);
        cr_assert_eq(ops->synchronize(e.b, s, NULL, &err), TSR_DEVICE_LOST);
        ops->buffer_free(e.b, x);
        ops->buffer_free(e.b, y);
        ops->stream_destroy(e.b, s);
        ops->unload(e.b, kf);

        double t2 = testd_now_ms();
        backend_run_ok(&e);
        printf("cuda backend after recover, round %d: first load+launch+read %.1f ms\n", round,
               testd_now_ms() - t2);
    }
    free(e.bin1);
    free(e.binf);
    tsr_region_free(&e.r);
    tsr_arbiter_destroy(a);
    ops->close(e.b);
}

Test(gpu_recovery, an_illegal_address_in_one_tenant_is_survived_by_the_daemon, .timeout = 300)
{
    gpu_require_device();
    recovery_figures f;
    recovery_scenario("cuda", 1 << 20, &f);
    printf("gpu recovery: fault -> ready %.1f ms as a client saw it, %.1f ms inside the daemon; "
           "bob's concurrent runs: %llu right, %llu DEVICE_LOST in flight, %llu right after\n",
           f.fault_to_ready_ms, f.daemon_recovery_ms, (unsigned long long)f.bob_runs_ok,
           (unsigned long long)f.bob_runs_lost, (unsigned long long)f.bob_runs_after);
}
