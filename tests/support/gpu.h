/*
 * gpu.h — the check the GPU suites share before they touch a device.
 *
 * Threading: the calling test's thread.
 */
#ifndef TESSERA_TEST_GPU_H
#define TESSERA_TEST_GPU_H

/* Skips the calling test (cr_skip_test, saying why) when the CUDA driver does
 * not load or sees no device; returns when there is one. The driver is loaded
 * for the check and unloaded again. */
void gpu_require_device(void);

#endif
