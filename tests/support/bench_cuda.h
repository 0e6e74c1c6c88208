/*
 * bench_cuda.h — the CUDA benchmarks' start: the backend opened on device 0
 * with a stream, and the device's line, or the benchmark skipped where there
 * is no device.
 *
 * Header-only: the benchmarks link the libraries but no test support objects.
 * Single-threaded; called once at a benchmark's start.
 */
#ifndef TESSERA_BENCH_CUDA_H
#define TESSERA_BENCH_CUDA_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda.h"

/* Opens ops on device 0 into *b with a stream in *stream and the device in
 * *dev. Returns false, after printing "<name>: skipped: <why>", where the
 * backend does not open (no driver, no device); exits with the error after
 * "<name>: device: " where it opens but the device or the stream fails. The
 * caller prints the device's line once the rest of its set-up is done. */
static inline bool bench_cuda_open(const char *name, const tsrd_backend_ops *ops, tsrd_backend **b,
                                   tsrd_device_info *dev, tsrd_stream **stream)
{
    tsr_error e;
    if (ops->open(NULL, b, &e) != TSR_OK) {
        printf("%s: skipped: %s\n", name, e.message);
        return false;
    }
    if (ops->device_info(*b, 0, dev, &e) != TSR_OK ||
        ops->stream_create(*b, 0, stream, &e) != TSR_OK) {
        fprintf(stderr, "%s: device: %s %s\n", name, tsr_status_name(e.code), e.message);
        exit(1);
    }
    return true;
}

/* The device's line: name, arch, multiprocessors, driver and compiler, and a
 * blank line after it. */
static inline void bench_cuda_print_device(const tsrd_backend_ops *ops, tsrd_backend *b,
                                           const tsrd_device_info *dev)
{
    printf("device 0: %s (%s, %d SMs), driver %s, NVRTC %s\n\n", dev->name, dev->arch,
           dev->multiprocessors, ops->driver_version(b), ops->compiler_version(b));
}

#endif
