/*
 * cuda.h — the CUDA backend in this process (cuda.c).
 */
#ifndef TESSERAD_BACKEND_CUDA_CUDA_H
#define TESSERAD_BACKEND_CUDA_CUDA_H

#include "backend/backend.h"

/* "cuda-inprocess": the lowest latency, but a sticky fault poisons the
 * process, so the daemon can only report it and be restarted. The device
 * worker of the isolated backend runs this one. */
extern const tsrd_backend_ops tsrd_backend_cuda;

#endif
