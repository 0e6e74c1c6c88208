/*
 * cpu.h — the CPU backend (cpu.c): kernels are plans run by the reference
 * executor on host memory.
 */
#ifndef TESSERAD_BACKEND_CPU_H
#define TESSERAD_BACKEND_CPU_H

#include "backend/backend.h"

/* The CPU backend, "cpu". */
extern const tsrd_backend_ops tsrd_backend_cpu;

#endif
