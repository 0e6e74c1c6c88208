/*
 * gpu.c — skip a GPU suite's test on a machine without a CUDA device (gpu.h).
 */
#include "gpu.h"

#include <criterion/criterion.h>
#include <stdbool.h>

#include "backend/cuda/driver.h"

void gpu_require_device(void)
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
}
