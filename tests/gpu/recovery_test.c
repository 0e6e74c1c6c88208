/*
 * recovery_test.c — recovery from a real sticky fault on a GPU.
 *
 * The daemon runs on the cuda backend with test_faults; alice forces the
 * test_fault candidate, whose kernel stores far outside any allocation, so
 * the launch ends in CUDA_ERROR_ILLEGAL_ADDRESS and poisons the context while
 * bob keeps running regions on another connection (tests/support/recovery.c
 * holds the scenario and its assertions). Prints the time to recover. Without
 * a CUDA driver or device the test skips.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "cuda_driver.h"
#include "../support/recovery.h"

Test(gpu_recovery, an_illegal_address_in_one_tenant_is_survived_by_the_daemon, .timeout = 300)
{
    tsrd_cuda_driver *drv = NULL;
    tsr_error err;
    if (tsrd_cuda_driver_load(&drv, &err) != TSR_OK)
        cr_skip_test("no CUDA driver or device: %s", err.message);
    int count = 0;
    bool have = drv->device_get_count(&count) == CUDA_SUCCESS && count > 0;
    tsrd_cuda_driver_unload(drv);
    if (!have)
        cr_skip_test("no CUDA device");
    recovery_figures f;
    recovery_scenario("cuda", 1 << 20, &f);
    printf("gpu recovery: fault -> ready %.1f ms as a client saw it, %.1f ms inside the daemon; "
           "bob's concurrent runs: %llu right, %llu DEVICE_LOST in flight, %llu right after\n",
           f.fault_to_ready_ms, f.daemon_recovery_ms, (unsigned long long)f.bob_runs_ok,
           (unsigned long long)f.bob_runs_lost, (unsigned long long)f.bob_runs_after);
}
