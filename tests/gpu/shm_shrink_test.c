/*
 * shm_shrink_test.c — a tenant that shrinks its shared-memory segment under
 * the daemon, on cuda (the device worker) and cuda-inprocess (the cases are in
 * tests/support/shm_shrink.c). Small copies are bounced by the daemon, since
 * the driver reads small host-to-device copies by CPU; large ones are DMA from
 * the pinned pages. Without a CUDA driver or device every test skips.
 */
#include <criterion/criterion.h>

#include "backend/cuda/driver.h"
#include "../support/shm_shrink.h"

static void shrink_gpu_check(void)
{
    tsrd_cuda_driver *drv = NULL;
    tsr_error err;
    if (tsrd_cuda_driver_load(&drv, &err) != TSR_OK)
        cr_skip_test("no CUDA driver or device: %s", err.message);
    int count = 0;
    bool none = drv->device_get_count(&count) != CUDA_SUCCESS || count == 0;
    tsrd_cuda_driver_unload(drv);
    if (none)
        cr_skip_test("no CUDA device");
}

TestSuite(shm_shrink_gpu, .init = shrink_gpu_check, .timeout = 300);

Test(shm_shrink_gpu, buffer_write_from_a_segment_cut_to_nothing_cuda)
{
    shrink_buffer_write("cuda");
}

Test(shm_shrink_gpu, buffer_write_from_a_segment_cut_to_nothing_cuda_inprocess)
{
    shrink_buffer_write("cuda-inprocess");
}

Test(shm_shrink_gpu, buffer_read_into_a_segment_cut_to_nothing_cuda)
{
    shrink_buffer_read("cuda");
}

Test(shm_shrink_gpu, buffer_read_into_a_segment_cut_to_nothing_cuda_inprocess)
{
    shrink_buffer_read("cuda-inprocess");
}

Test(shm_shrink_gpu, run_input_in_a_segment_cut_to_nothing_cuda)
{
    shrink_run_input("cuda");
}

Test(shm_shrink_gpu, run_input_in_a_segment_cut_to_nothing_cuda_inprocess)
{
    shrink_run_input("cuda-inprocess");
}

Test(shm_shrink_gpu, run_output_into_a_segment_cut_to_nothing_cuda)
{
    shrink_run_output("cuda");
}

Test(shm_shrink_gpu, run_output_into_a_segment_cut_to_nothing_cuda_inprocess)
{
    shrink_run_output("cuda-inprocess");
}

Test(shm_shrink_gpu, copies_racing_a_shrinking_segment_cuda)
{
    shrink_race("cuda", false);
}

Test(shm_shrink_gpu, copies_racing_a_shrinking_segment_cuda_inprocess)
{
    shrink_race("cuda-inprocess", false);
}
