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

/* One GPU's readings; a field NVML could not give is marked absent. */
typedef struct tsrd_gpu_sample {
    bool has_memory, has_utilization, has_temperature, has_ecc;
    uint64_t memory_total_bytes, memory_used_bytes;
    unsigned utilization_percent;        /* kernels running, over the last sample period */
    unsigned memory_utilization_percent; /* device memory being read or written */
    unsigned temperature_celsius;
    uint64_t ecc_uncorrected; /* volatile count, since the driver loaded */
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
