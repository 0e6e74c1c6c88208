/*
 * nvml.c — a stand-in for libnvidia-ml.so.1 with two GPUs and fixed readings,
 * built as $(BUILD)/tests/fake/libnvidia-ml.so.1 so that the daemon's GPU
 * gauges are tested where there is no GPU. GPU 1 reports ECC as not supported
 * (ECC off), so that gauge must be left out for it.
 */
typedef struct {
    unsigned long long total, free, used;
} fake_memory;
typedef struct {
    unsigned int gpu, memory;
} fake_utilization;

enum { FAKE_OK = 0, FAKE_NOT_SUPPORTED = 3, FAKE_INVALID = 2 };

int nvmlInit_v2(void)
{
    return FAKE_OK;
}

int nvmlShutdown(void)
{
    return FAKE_OK;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = 2;
    return FAKE_OK;
}

/* The device handle is the index plus one. */
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
    if (index >= 2)
        return FAKE_INVALID;
    *device = (void *)(unsigned long)(index + 1);
    return FAKE_OK;
}

int nvmlDeviceGetMemoryInfo(void *device, fake_memory *m)
{
    unsigned long g = (unsigned long)device - 1;
    m->total = 150754820096ull;
    m->used = (g + 1) * 1073741824ull;
    m->free = m->total - m->used;
    return FAKE_OK;
}

int nvmlDeviceGetUtilizationRates(void *device, fake_utilization *u)
{
    unsigned long g = (unsigned long)device - 1;
    u->gpu = 37 + (unsigned)g;
    u->memory = 12;
    return FAKE_OK;
}

int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *celsius)
{
    (void)device;
    if (sensor != 0)
        return FAKE_INVALID;
    *celsius = 41;
    return FAKE_OK;
}

int nvmlDeviceGetTotalEccErrors(void *device, int type, int counter, unsigned long long *count)
{
    if ((unsigned long)device == 2)
        return FAKE_NOT_SUPPORTED;
    *count = type == 1 && counter == 0 ? 3 : 0;
    return FAKE_OK;
}
