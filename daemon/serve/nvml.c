/*
 * nvml.c — NVML through dlopen. The few types and constants used are those of
 * NVML's stable C interface (nvml.h of the driver's development package, which
 * the CUDA toolkit here does not ship), declared below.
 */
#include "serve/nvml.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_return;                 /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
typedef struct {
    unsigned long long total, free, used;
} nvml_memory; /* nvmlMemory_t */
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization; /* nvmlUtilization_t */

enum {
    NVML_OK = 0,
    NVML_TEMPERATURE_GPU = 0,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
    NVML_VOLATILE_ECC = 0,
};

struct tsrd_nvml {
    void *library;
    int count;
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*device_count)(unsigned int *count);
    nvml_return (*device_by_index)(unsigned int index, nvml_device *device);
    nvml_return (*memory_info)(nvml_device device, nvml_memory *memory);
    nvml_return (*utilization)(nvml_device device, nvml_utilization *utilization);
    nvml_return (*temperature)(nvml_device device, int sensor, unsigned int *celsius);
    nvml_return (*ecc_errors)(nvml_device device, int error_type, int counter_type,
                              unsigned long long *count);
};

tsr_status tsrd_nvml_open(tsrd_nvml **out, tsr_error *err)
{
    *out = NULL;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return tsr_error_set(err, TSR_UNSUPPORTED, "no NVML: %s", dlerror());
    tsrd_nvml *n = calloc(1, sizeof *n);
    if (n == NULL) {
        dlclose(lib);
        return tsr_error_set(err, TSR_NO_MEMORY, "NVML: out of memory");
    }
    n->library = lib;
    static const struct {
        const char *symbol;
        size_t offset;
    } symbols[] = {
        {"nvmlInit_v2", offsetof(tsrd_nvml, init)},
        {"nvmlShutdown", offsetof(tsrd_nvml, shutdown)},
        {"nvmlDeviceGetCount_v2", offsetof(tsrd_nvml, device_count)},
        {"nvmlDeviceGetHandleByIndex_v2", offsetof(tsrd_nvml, device_by_index)},
        {"nvmlDeviceGetMemoryInfo", offsetof(tsrd_nvml, memory_info)},
        {"nvmlDeviceGetUtilizationRates", offsetof(tsrd_nvml, utilization)},
        {"nvmlDeviceGetTemperature", offsetof(tsrd_nvml, temperature)},
        {"nvmlDeviceGetTotalEccErrors", offsetof(tsrd_nvml, ecc_errors)},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *f = dlsym(lib, symbols[i].symbol);
        if (f == NULL) {
            tsrd_nvml_close(n);
            return tsr_error_set(err, TSR_UNSUPPORTED, "NVML lacks %s", symbols[i].symbol);
        }
        memcpy((char *)n + symbols[i].offset, &f, sizeof f);
    }
    unsigned int count = 0;
    int rc = n->init();
    if (rc == NVML_OK)
        rc = n->device_count(&count);
    if (rc != NVML_OK || count == 0) {
        if (rc == NVML_OK)
            n->shutdown();
        tsrd_nvml_close(n); /* count is 0: no second shutdown */
        return tsr_error_set(err, TSR_UNSUPPORTED, "NVML: %s",
                             rc != NVML_OK ? "initialization failed" : "no GPU");
    }
    n->count = (int)count;
    *out = n;
    return TSR_OK;
}

void tsrd_nvml_close(tsrd_nvml *n)
{
    if (n == NULL)
        return;
    if (n->count > 0 && n->shutdown != NULL)
        n->shutdown();
    dlclose(n->library);
    free(n);
}

int tsrd_nvml_count(const tsrd_nvml *n)
{
    return n != NULL ? n->count : 0;
}

static void nvml_set(tsrd_gpu_sample *out, tsrd_gpu_gauge g, double value)
{
    out->has[g] = true;
    out->value[g] = value;
}

void tsrd_nvml_sample(tsrd_nvml *n, int index, tsrd_gpu_sample *out)
{
    memset(out, 0, sizeof *out);
    nvml_device dev;
    if (n == NULL || index < 0 || index >= n->count ||
        n->device_by_index((unsigned)index, &dev) != NVML_OK)
        return;
    nvml_memory mem;
    if (n->memory_info(dev, &mem) == NVML_OK) {
        nvml_set(out, TSRD_GPU_MEMORY_TOTAL, (double)mem.total);
        nvml_set(out, TSRD_GPU_MEMORY_USED, (double)mem.used);
    }
    nvml_utilization u;
    if (n->utilization(dev, &u) == NVML_OK) {
        nvml_set(out, TSRD_GPU_UTILIZATION, u.gpu / 100.0);
        nvml_set(out, TSRD_GPU_MEMORY_UTILIZATION, u.memory / 100.0);
    }
    unsigned int celsius;
    if (n->temperature(dev, NVML_TEMPERATURE_GPU, &celsius) == NVML_OK)
        nvml_set(out, TSRD_GPU_TEMPERATURE, celsius);
    unsigned long long ecc;
    /* NOT_SUPPORTED where ECC is off: the gauge is then absent, not 0. */
    if (n->ecc_errors(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_OK)
        nvml_set(out, TSRD_GPU_ECC_UNCORRECTED, (double)ecc);
}
