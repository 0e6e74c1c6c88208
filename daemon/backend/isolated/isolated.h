/*
 * isolated.h — backends whose device lives in a worker process (isolated.c,
 * the worker in worker.c, their messages in wire.h).
 */
#ifndef TESSERAD_BACKEND_ISOLATED_ISOLATED_H
#define TESSERAD_BACKEND_ISOLATED_ISOLATED_H

#include "backend/backend.h"

/* The CUDA backend in a worker process, "cuda": a fault costs the worker,
 * which is restarted, and the daemon keeps serving. */
extern const tsrd_backend_ops tsrd_backend_cuda_isolated;
/* The CPU backend in a worker process, "cpu-isolated": for testing the
 * isolation and recovery without a GPU. */
extern const tsrd_backend_ops tsrd_backend_cpu_isolated;

#endif
