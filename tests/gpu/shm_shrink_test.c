/*
 * shm_shrink_test.c — a tenant that shrinks its shared-memory segment under
 * the daemon, on cuda (the device worker) and cuda-inprocess (the cases are in
 * tests/support/shm_shrink.c). Small copies are bounced by the daemon, since
 * the driver reads small host-to-device copies by CPU; large ones are DMA from
 * the pinned pages. Without a CUDA driver or device every test skips.
 */
#include <criterion/criterion.h>

#include "../support/gpu.h"
#include "../support/shm_shrink.h"

TestSuite(shm_shrink_gpu, .init = gpu_require_device, .timeout = 300);

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
