/*
 * worker.h — the device worker process of the isolated backends (worker.c).
 */
#ifndef TESSERAD_BACKEND_ISOLATED_WORKER_H
#define TESSERAD_BACKEND_ISOLATED_WORKER_H

/* The first argument that makes tesserad a device worker is in wire.h. */
#include "backend/isolated/wire.h"

/* The device worker's main: argv is
 * tesserad --device-worker BACKEND TEST_FAULTS(0|1) CHANNELS CPU_DEVICES
 * CPU_DEVICE_MEMORY_BYTES (the last two: tsrd_backend_options' cpu_devices
 * and cpu_device_memory_bytes, for the CPU backend). Returns the exit
 * status. */
int tsrd_device_worker_main(int argc, char **argv);

#endif
