/*
 * cuda_driver.c — loading the CUDA driver with dlopen, and its error mapping.
 *
 * The function list lives in cuda_driver.h as an X-macro so that the struct,
 * the symbol names and the loader cannot drift apart.
 */
#include "backend/cuda/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cuda_driver_names[] = {"libcuda.so.1", "libcuda.so"};

tsr_status tsrd_cuda_driver_load(tsrd_cuda_driver **out, tsr_error *err)
{
    *out = NULL;
    void *lib = NULL;
    const char *why = "no candidate name";
    for (size_t i = 0; i < sizeof cuda_driver_names / sizeof cuda_driver_names[0]; i++) {
        lib = dlopen(cuda_driver_names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL)
            break;
        why = dlerror();
    }
    if (lib == NULL)
        return tsr_error_set(err, TSR_UNSUPPORTED, "no CUDA driver: %s", why);

    tsrd_cuda_driver *drv = calloc(1, sizeof *drv);
    if (drv == NULL) {
        dlclose(lib);
        return tsr_error_set(err, TSR_NO_MEMORY, "no memory for the CUDA driver table");
    }
    drv->library = lib;

    /* Resolve every symbol before the first call, so a too-old driver fails here
     * with the missing name rather than later in the middle of a request. */
#define TSRD_CUDA_RESOLVE(field, symbol, ret, params)                                              \
    *(void **)&drv->field = dlsym(lib, symbol);                                                    \
    if (drv->field == NULL) {                                                                      \
        tsrd_cuda_driver_unload(drv);                                                              \
        return tsr_error_set(err, TSR_UNSUPPORTED, "CUDA driver lacks %s", symbol);                \
    }
    TSRD_CUDA_FUNCTIONS(TSRD_CUDA_RESOLVE)
#undef TSRD_CUDA_RESOLVE

    tsr_status st = tsrd_cuda_check(drv, drv->init(0), "cuInit", err);
    if (st == TSR_OK)
        st =
            tsrd_cuda_check(drv, drv->driver_get_version(&drv->version), "cuDriverGetVersion", err);
    if (st != TSR_OK) {
        tsrd_cuda_driver_unload(drv);
        return st;
    }
    *out = drv;
    return TSR_OK;
}

void tsrd_cuda_driver_unload(tsrd_cuda_driver *drv)
{
    if (drv == NULL)
        return;
    if (drv->library != NULL)
        dlclose(drv->library);
    free(drv);
}

int tsrd_cuda_error_is_sticky(CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
        return 1;
    default:
        return 0;
    }
}

tsr_status tsrd_cuda_check(const tsrd_cuda_driver *drv, CUresult rc, const char *what,
                           tsr_error *err)
{
    if (rc == CUDA_SUCCESS)
        return TSR_OK;
    const char *name = NULL;
    const char *text = NULL;
    if (drv == NULL || drv->get_error_name(rc, &name) != CUDA_SUCCESS || name == NULL)
        name = "CUDA_ERROR_UNKNOWN";
    if (drv == NULL || drv->get_error_string(rc, &text) != CUDA_SUCCESS || text == NULL)
        text = "no description";
    tsr_status code = TSR_CUDA_ERROR;
    if (tsrd_cuda_error_is_sticky(rc))
        code = TSR_DEVICE_LOST;
    else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        code = TSR_RESOURCE_EXHAUSTED;
    return tsr_error_set(err, code, "%s: %s (%s)", what, name, text);
}

void tsrd_cuda_version_string(int version, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d", version / 1000, (version % 1000) / 10);
}
