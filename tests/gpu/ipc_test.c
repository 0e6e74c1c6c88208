/*
 * ipc_test.c — the data plane on a real GPU: CUDA IPC imports, shared memory
 * through pinned copies, and batches captured into CUDA graphs.
 *
 * This test process plays the framework: it allocates device memory with the
 * driver API, fills it, exports it with cuIpcGetMemHandle, and a tesserad on
 * the cuda backend computes into that memory in place; the result is read back
 * here with cuMemcpyDtoH. Without a CUDA driver or device every test skips.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/driver.h"
#include "../support/testd.h"
#include "../support/testdata.h"

#define IPC_TIMEOUT_MS 120000
#define IPC_N 4096

static testd ipc_d;
static tsr_client *ipc_c;
static tsrd_cuda_driver *ipc_drv;
static CUcontext ipc_ctx;
static CUdevice ipc_dev;

static const char *const ipc_flags[] = {"--backend", "cuda", NULL};

static void ipc_setup(void)
{
    tsr_error err;
    if (tsrd_cuda_driver_load(&ipc_drv, &err) != TSR_OK)
        cr_skip_test("no CUDA driver or device: %s", err.message);
    int count = 0;
    if (ipc_drv->device_get_count(&count) != CUDA_SUCCESS || count == 0)
        cr_skip_test("no CUDA device");
    cr_assert_eq(ipc_drv->device_get(&ipc_dev, 0), CUDA_SUCCESS);
    cr_assert_eq(ipc_drv->primary_ctx_retain(&ipc_ctx, ipc_dev), CUDA_SUCCESS);
    cr_assert_eq(ipc_drv->ctx_set_current(ipc_ctx), CUDA_SUCCESS);
    cr_assert_eq(testd_start(&ipc_d, ipc_flags), 0, "tesserad --backend cuda did not start");
    ipc_c = testd_client(&ipc_d, IPC_TIMEOUT_MS);
    cr_assert_not_null(ipc_c);
}

static void ipc_teardown(void)
{
    tsr_client_close(ipc_c);
    testd_stop(&ipc_d);
    testd_remove(&ipc_d);
    if (ipc_drv != NULL) {
        ipc_drv->primary_ctx_release(ipc_dev);
        tsrd_cuda_driver_unload(ipc_drv);
    }
}

TestSuite(ipc, .init = ipc_setup, .fini = ipc_teardown, .timeout = 600);

/* y = 2x + 1 */
static tsr_region *ipc_affine(void)
{
    tsr_region *r = testdata_affine(IPC_N);
    cr_assert_not_null(r);
    return r;
}

static tsr_buffer ipc_export(CUdeviceptr p, uint64_t bytes, uint64_t offset)
{
    CUipcMemHandle h;
    cr_assert_eq(ipc_drv->ipc_get_mem_handle(&h, p), CUDA_SUCCESS);
    int64_t shape[] = {IPC_N};
    tsr_buffer b;
    tsr_error err;
    tsr_status st = tsr_client_buffer_import(ipc_c, h.reserved, bytes, offset, TSR_CLIENT_F32, 1,
                                             shape, &b, 0, &err);
    cr_assert_eq(st, TSR_OK, "%s: %s", tsr_status_name(st), err.message);
    return b;
}

Test(ipc, daemon_computes_into_imported_memory)
{
    tsr_region *r = ipc_affine();
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(ipc_c, r, NULL, &k, 0, &err), TSR_OK, "%s", err.message);
    /* One allocation holds input and output, as a caching allocator would. */
    const uint64_t bytes = IPC_N * sizeof(float);
    CUdeviceptr block;
    cr_assert_eq(ipc_drv->mem_alloc(&block, 2 * bytes), CUDA_SUCCESS);
    static float x[IPC_N], y[IPC_N];
    for (int i = 0; i < IPC_N; i++)
        x[i] = (float)(i - 1000) * 0.25f;
    cr_assert_eq(ipc_drv->memcpy_htod(block, x, bytes), CUDA_SUCCESS);
    tsr_buffer in = ipc_export(block, 2 * bytes, 0);
    tsr_buffer out = ipc_export(block, 2 * bytes, bytes);
    cr_assert_eq(tsr_client_launch(ipc_c, k.kernel, &in, 1, out, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(ipc_drv->memcpy_dtoh(y, block + bytes, bytes), CUDA_SUCCESS);
    for (int i = 0; i < IPC_N; i++)
        cr_assert_eq(y[i], x[i] * 2.0f + 1.0f, "element %d: %g", i, (double)y[i]);
    cr_expect_eq(tsr_client_buffer_free(ipc_c, in, 0, &err), TSR_OK);
    cr_expect_eq(tsr_client_buffer_free(ipc_c, out, 0, &err), TSR_OK);
    /* The memory stays ours after the daemon let go of it. */
    cr_expect_eq(ipc_drv->memcpy_dtoh(y, block, bytes), CUDA_SUCCESS);
    cr_expect_eq(y[5], x[5]);
    ipc_drv->mem_free(block);
    tsr_client_region_free(r);
}

/* The first batch of a new kernel runs uncaptured and measures it, the second
 * captures its plan, the third replays. */
Test(ipc, batch_with_graph_replays_once_its_kernels_are_measured)
{
    tsr_region *r = ipc_affine();
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(ipc_c, r, NULL, &k, 0, &err), TSR_OK, "%s", err.message);
    int64_t shape[] = {IPC_N};
    tsr_buffer b[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(tsr_client_buffer_alloc(ipc_c, TSR_CLIENT_F32, 1, shape, &b[i], NULL, 0, &err),
                     TSR_OK);
    static float zero[IPC_N], y[IPC_N];
    tsr_client_launch_desc l[10];
    for (int i = 0; i < 10; i++)
        l[i] = (tsr_client_launch_desc){k.kernel, 1, &b[i % 2], b[(i + 1) % 2]};
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(tsr_client_buffer_write(ipc_c, b[0], 0, zero, sizeof zero, 0, &err), TSR_OK);
        tsr_client_batch_result res;
        cr_assert_eq(tsr_client_batch(ipc_c, l, 10, true, &res, 0, &err), TSR_OK, "%s",
                     err.message);
        cr_expect_eq(res.launched, 10);
        cr_expect_eq(res.graph_replayed, round == 2, "round %d", round);
        cr_assert_eq(tsr_client_buffer_read(ipc_c, b[0], 0, y, sizeof y, NULL, 0, &err), TSR_OK);
        cr_expect_eq(y[0], 1023.0f, "ten steps of 2x+1 from 0, round %d", round);
    }
    tsr_client_region_free(r);
}

Test(ipc, shared_memory_goes_through_pinned_copies)
{
    tsr_region *r = ipc_affine();
    tsr_client_shm *shm;
    tsr_error err;
    cr_assert_eq(tsr_client_shm_create(1 << 20, &shm, &err), TSR_OK);
    float *p = tsr_client_shm_data(shm);
    for (int i = 0; i < IPC_N; i++)
        p[i] = (float)i;
    uint64_t in_off[] = {0};
    cr_assert_eq(tsr_client_run_shm(ipc_c, r, NULL, shm, in_off, 65536, NULL, 0, &err), TSR_OK,
                 "%s", err.message);
    for (int i = 0; i < IPC_N; i++)
        cr_assert_eq(p[16384 + i], (float)i * 2.0f + 1.0f, "element %d", i);
    tsr_client_shm_free(shm);
    tsr_client_region_free(r);
}
