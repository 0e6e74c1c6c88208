/*
 * cuda_driver.h — the CUDA driver API, loaded at run time with dlopen.
 *
 * tesserad is one binary that runs with or without an NVIDIA driver: nothing
 * links libcuda. tsrd_cuda_driver_load opens libcuda.so.1, resolves every entry
 * point the daemon uses into one struct of function pointers, and calls cuInit.
 * The types come from the toolkit's cuda.h; the symbols are named with their
 * versioned ABI names (cuMemAlloc_v2, ...), which is what cuda.h's macros would
 * have bound at link time.
 *
 * tsrd_cuda_check turns a CUresult into a tsr_status whose message carries the
 * driver's own error name and text ("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out
 * of memory)"); sticky errors map to TSR_DEVICE_LOST.
 *
 * Threading: the struct is immutable after load and may be shared by threads;
 * the driver functions have the driver's own thread-safety. Ownership: the
 * caller owns the struct and calls tsrd_cuda_driver_unload once.
 */
#ifndef TSRD_CUDA_DRIVER_H
#define TSRD_CUDA_DRIVER_H

#include <cuda.h>

#include "tessera/status.h"

/* X(field, symbol, return, params): every driver entry point the daemon uses. */
#define TSRD_CUDA_FUNCTIONS(X)                                                                     \
    X(init, "cuInit", CUresult, (unsigned int))                                                    \
    X(driver_get_version, "cuDriverGetVersion", CUresult, (int *))                                 \
    X(get_error_name, "cuGetErrorName", CUresult, (CUresult, const char **))                       \
    X(get_error_string, "cuGetErrorString", CUresult, (CUresult, const char **))                   \
    X(device_get_count, "cuDeviceGetCount", CUresult, (int *))                                     \
    X(device_get, "cuDeviceGet", CUresult, (CUdevice *, int))                                      \
    X(device_get_name, "cuDeviceGetName", CUresult, (char *, int, CUdevice))                       \
    X(device_get_attribute, "cuDeviceGetAttribute", CUresult,                                      \
      (int *, CUdevice_attribute, CUdevice))                                                       \
    X(device_total_mem, "cuDeviceTotalMem_v2", CUresult, (size_t *, CUdevice))                     \
    X(primary_ctx_retain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext *, CUdevice))           \
    X(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice))                   \
    X(primary_ctx_reset, "cuDevicePrimaryCtxReset_v2", CUresult, (CUdevice))                       \
    X(ctx_set_current, "cuCtxSetCurrent", CUresult, (CUcontext))                                   \
    X(ctx_synchronize, "cuCtxSynchronize", CUresult, (void))                                       \
    X(ctx_get_current, "cuCtxGetCurrent", CUresult, (CUcontext *))                                 \
    X(mem_alloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr *, size_t))                               \
    X(mem_free, "cuMemFree_v2", CUresult, (CUdeviceptr))                                           \
    X(mem_get_info, "cuMemGetInfo_v2", CUresult, (size_t *, size_t *))                             \
    X(mem_alloc_host, "cuMemAllocHost_v2", CUresult, (void **, size_t))                            \
    X(mem_host_alloc, "cuMemHostAlloc", CUresult, (void **, size_t, unsigned int))                 \
    X(mem_free_host, "cuMemFreeHost", CUresult, (void *))                                          \
    X(mem_host_register, "cuMemHostRegister_v2", CUresult, (void *, size_t, unsigned int))         \
    X(mem_host_unregister, "cuMemHostUnregister", CUresult, (void *))                              \
    X(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2", CUresult,                                      \
      (CUdeviceptr *, CUipcMemHandle, unsigned int))                                               \
    X(ipc_close_mem_handle, "cuIpcCloseMemHandle", CUresult, (CUdeviceptr))                        \
    X(ipc_get_mem_handle, "cuIpcGetMemHandle", CUresult, (CUipcMemHandle *, CUdeviceptr))          \
    X(stream_begin_capture, "cuStreamBeginCapture_v2", CUresult, (CUstream, CUstreamCaptureMode))  \
    X(stream_end_capture, "cuStreamEndCapture", CUresult, (CUstream, CUgraph *))                   \
    X(graph_instantiate, "cuGraphInstantiateWithFlags", CUresult,                                  \
      (CUgraphExec *, CUgraph, unsigned long long))                                                \
    X(graph_launch, "cuGraphLaunch", CUresult, (CUgraphExec, CUstream))                            \
    X(graph_exec_destroy, "cuGraphExecDestroy", CUresult, (CUgraphExec))                           \
    X(graph_destroy, "cuGraphDestroy", CUresult, (CUgraph))                                        \
    X(memcpy_htod, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr, const void *, size_t))               \
    X(memcpy_dtoh, "cuMemcpyDtoH_v2", CUresult, (void *, CUdeviceptr, size_t))                     \
    X(memcpy_htod_async, "cuMemcpyHtoDAsync_v2", CUresult,                                         \
      (CUdeviceptr, const void *, size_t, CUstream))                                               \
    X(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", CUresult,                                         \
      (void *, CUdeviceptr, size_t, CUstream))                                                     \
    X(memset_d8_async, "cuMemsetD8Async", CUresult,                                                \
      (CUdeviceptr, unsigned char, size_t, CUstream))                                              \
    X(memset_d32_async, "cuMemsetD32Async", CUresult,                                              \
      (CUdeviceptr, unsigned int, size_t, CUstream))                                               \
    X(stream_create, "cuStreamCreate", CUresult, (CUstream *, unsigned int))                       \
    X(stream_destroy, "cuStreamDestroy_v2", CUresult, (CUstream))                                  \
    X(stream_synchronize, "cuStreamSynchronize", CUresult, (CUstream))                             \
    X(event_create, "cuEventCreate", CUresult, (CUevent *, unsigned int))                          \
    X(event_destroy, "cuEventDestroy_v2", CUresult, (CUevent))                                     \
    X(event_record, "cuEventRecord", CUresult, (CUevent, CUstream))                                \
    X(event_synchronize, "cuEventSynchronize", CUresult, (CUevent))                                \
    X(event_elapsed_time, "cuEventElapsedTime", CUresult, (float *, CUevent, CUevent))             \
    X(module_load_data, "cuModuleLoadData", CUresult, (CUmodule *, const void *))                  \
    X(module_unload, "cuModuleUnload", CUresult, (CUmodule))                                       \
    X(module_get_function, "cuModuleGetFunction", CUresult,                                        \
      (CUfunction *, CUmodule, const char *))                                                      \
    X(func_set_attribute, "cuFuncSetAttribute", CUresult, (CUfunction, CUfunction_attribute, int)) \
    X(launch_kernel, "cuLaunchKernel", CUresult,                                                   \
      (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,           \
       unsigned int, unsigned int, CUstream, void **, void **))                                    \
    X(launch_kernel_ex, "cuLaunchKernelEx", CUresult,                                              \
      (const CUlaunchConfig *, CUfunction, void **, void **))                                      \
    X(tensor_map_encode_tiled, "cuTensorMapEncodeTiled", CUresult,                                 \
      (CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,                 \
       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,          \
       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill))

#define TSRD_CUDA_FIELD(field, symbol, ret, params) ret(*field) params;

typedef struct tsrd_cuda_driver {
    void *library; /* dlopen handle */
    int version;   /* cuDriverGetVersion, e.g. 13000 */
    TSRD_CUDA_FUNCTIONS(TSRD_CUDA_FIELD)
} tsrd_cuda_driver;

#undef TSRD_CUDA_FIELD

/* Opens libcuda.so.1 (then libcuda.so), resolves every function and calls
 * cuInit(0). TSR_UNSUPPORTED with the dlerror text when no driver is installed
 * (the daemon then serves on the CPU backend); TSR_CUDA_ERROR when cuInit fails
 * (e.g. CUDA_ERROR_NO_DEVICE). *out is heap-allocated. Blocking: loads a shared
 * library and initializes the driver (tens of milliseconds). */
tsr_status tsrd_cuda_driver_load(tsrd_cuda_driver **out, tsr_error *err);

/* dlcloses the library and frees the struct. NULL is allowed. */
void tsrd_cuda_driver_unload(tsrd_cuda_driver *drv);

/* OK for CUDA_SUCCESS; otherwise fills err with "what: NAME (text)" and returns
 * TSR_DEVICE_LOST for errors that poison the context (illegal address, launch
 * failure, ...), TSR_RESOURCE_EXHAUSTED for device out-of-memory, TSR_CUDA_ERROR
 * otherwise. */
tsr_status tsrd_cuda_check(const tsrd_cuda_driver *drv, CUresult rc, const char *what,
                           tsr_error *err);

/* True for the "sticky" errors after which the context cannot be used again. */
int tsrd_cuda_error_is_sticky(CUresult rc);

/* "13.0" from the driver's version number. */
void tsrd_cuda_version_string(int version, char *buf, size_t size);

#endif
