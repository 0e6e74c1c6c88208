/*
 * nvml.h — the node's GPUs as the NVIDIA management library sees them, for the
 * metrics: memory used and total, utilization, temperature and uncorrected ECC
 * errors, per GPU (nvml.c).
 *
 * The library is loaded with dlopen (libnvidia-ml.so.1 comes with the driver),
 * like the CUDA driver, so tesserad runs where there is none; without it there
 * are simply no GPU gauges. NVML reads the devices without a CUDA context, so
 * the gauges keep answering while the device worker restarts.
 *
 * Threading: open and close on the loop thread; sample from one thread at a time
 * (the loop, rendering metrics). Blocking: a sample costs tens of microseconds
 * per GPU.
 */
#ifndef TESSERAD_SERVE_NVML_H
#define TESSERAD_SERVE_NVML_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/status.h"

typedef struct tsrd_nvml tsrd_nvml;

/* What is read of each GPU, in base units. */
typedef enum tsrd_gpu_gauge {
    TSRD_GPU_MEMORY_TOTAL,       /* bytes */
    TSRD_GPU_MEMORY_USED,        /* bytes, by every process */
    TSRD_GPU_UTILIZATION,        /* share of the last sample period a kernel ran, 0..1 */
    TSRD_GPU_MEMORY_UTILIZATION, /* share of it device memory was read or written */
    TSRD_GPU_TEMPERATURE,        /* degrees Celsius */
    TSRD_GPU_ECC_UNCORRECTED,    /* volatile count, since the driver loaded */
    TSRD_GPU_GAUGES,
} tsrd_gpu_gauge;

/* One GPU's readings; a gauge NVML could not read (ECC off, say) has has false. */
typedef struct tsrd_gpu_sample {
    bool has[TSRD_GPU_GAUGES];
    double value[TSRD_GPU_GAUGES];
} tsrd_gpu_sample;

/* Loads and initializes NVML. TSR_UNSUPPORTED (with the reason) where there is
 * no library or no device; the caller then has no GPU gauges. */
tsr_status tsrd_nvml_open(tsrd_nvml **out, tsr_error *err);
/* Shuts NVML down and unloads it. NULL is a no-op. */
void tsrd_nvml_close(tsrd_nvml *n);

/* GPUs NVML sees (0 for NULL). */
int tsrd_nvml_count(const tsrd_nvml *n);
/* The current readings of GPU index. */
void tsrd_nvml_sample(tsrd_nvml *n, int index, tsrd_gpu_sample *out);

#endif
