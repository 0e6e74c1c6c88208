/*
 * check_common.cuh — what the stand-alone kernel checks (gemm_check.cu,
 * gemm80_check.cu, attn_check.cu) share: the error checks, the device line and
 * the loop over the cases, the random inputs, widening a 16-bit output and the
 * timing. One copy, so every check draws its data and times its kernels the
 * same way.
 *
 * Single-threaded host code; every call works on the current device.
 */
#ifndef TSR_CHECK_COMMON_CUH
#define TSR_CHECK_COMMON_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_RT(x)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK_DRV(x)                                                                               \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = "?";                                                                  \
            cuGetErrorString(r_, &s_);                                                             \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Starts the runtime on device 0 and prints its name, arch and multiprocessors,
 * the first line of a check's output. */
static inline void check_device_banner(void)
{
    CHECK_RT(cudaFree(0));
    cudaDeviceProp prop;
    CHECK_RT(cudaGetDeviceProperties(&prop, 0));
    printf("device %s sm_%d%d, %d multiprocessors\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
}

/* The one case a check was asked to run (its index, the first argument), or -1
 * for all of them. */
static inline int check_only_case(int argc, char **argv)
{
    return argc > 1 ? atoi(argv[1]) : -1;
}

/* Runs failed(i) for each case i of n_cases, or only case only when it is not
 * negative; failed(i) says whether case i failed. Returns how many did. */
template <typename Failed> static int check_cases(int only, int n_cases, Failed failed)
{
    int n_failed = 0;
    for (int i = 0; i < n_cases; i++)
        if (only < 0 || i == only)
            n_failed += failed(i) ? 1 : 0;
    return n_failed;
}

/* Element i of a fixed random sequence, uniform in [-1, 1): splitmix64 of
 * seed + i times the golden ratio, its top 24 bits. */
__device__ __forceinline__ float random_signed_unit(unsigned long long seed, size_t i)
{
    unsigned long long z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) / (float)(1ull << 24); /* [0,1) */
    return (u - 0.5f) * 2.0f;
}

/* p[0 .. n) = scale times the random sequence of seed, in T. */
template <typename T>
__global__ void fill_random(T *p, size_t n, unsigned long long seed, float scale)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (T)(random_signed_unit(seed, i) * scale);
}

template <typename T> __global__ void to_float(const T *p, float *q, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = (float)p[i];
}

/* Milliseconds per launch: events around 30 launches after 5 warm-ups, the
 * median of 5 such batches. */
template <typename Launch> static double check_time_ms(Launch launch)
{
    cudaEvent_t e0, e1;
    CHECK_RT(cudaEventCreate(&e0));
    CHECK_RT(cudaEventCreate(&e1));
    for (int i = 0; i < 5; i++)
        launch();
    std::vector<float> ms;
    for (int rep = 0; rep < 5; rep++) {
        CHECK_RT(cudaEventRecord(e0));
        for (int i = 0; i < 30; i++)
            launch();
        CHECK_RT(cudaEventRecord(e1));
        CHECK_RT(cudaEventSynchronize(e1));
        float t;
        CHECK_RT(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / 30);
    }
    CHECK_RT(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms[2];
}

#endif
