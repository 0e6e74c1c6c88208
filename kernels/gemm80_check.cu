/*
 * gemm80_check.cu — stand-alone correctness and speed check of the tier-3 GEMM
 * kernels for Ampere-class GPUs (kernels/gemm_sm80.cu), outside the daemon.
 *
 *   nvcc -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=sm_90 -O3 -std=c++17 \
 *        -o build/gpu/bin/gemm80_check kernels/gemm80_check.cu kernels/gemm_sm80.cu -lcuda
 *   gemm80_check          runs the built-in case list and prints one line per case
 *   gemm80_check N        runs case N only
 *
 * Each case fills A, B (and bias / residual / Wu) with fresh random values,
 * poisons the output with NaN, runs the kernel, and compares with a simple f32
 * reference kernel on the same device by ||out - ref|| / ||ref|| (bf16 and f16
 * inputs are exact in f32, so the only differences are accumulation order and
 * the output rounding); any non-finite output fails. Timing: events around 30
 * launches after 5 warm-ups, median of 5 such batches, TFLOP/s = 2*M*N*K / time
 * (gated: 4*M*H*K).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm80_params.h"

#define CHECK_RT(x)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef void (*gemm_fn)(const void *, const void *, const void *, tsr_gemm_params);

#define DECLARE(name)                                                                              \
    extern "C" __global__ void name(const void *, const void *, const void *, tsr_gemm_params);
DECLARE(tsr_gemm80_bf16_f32)
DECLARE(tsr_gemm80_bf16_bf16)
DECLARE(tsr_gemm80_bf16_f16)
DECLARE(tsr_gemm80_f16_f32)
DECLARE(tsr_gemm80_f16_bf16)
DECLARE(tsr_gemm80_f16_f16)
DECLARE(tsr_gemm80_bf16_f32_gated)
DECLARE(tsr_gemm80_bf16_bf16_gated)
DECLARE(tsr_gemm80_bf16_f16_gated)
DECLARE(tsr_gemm80_f16_f32_gated)
DECLARE(tsr_gemm80_f16_bf16_gated)
DECLARE(tsr_gemm80_f16_f16_gated)

/* [in f16][out kind][gated] */
static const gemm_fn kernels[2][3][2] = {
    {{tsr_gemm80_bf16_f32, tsr_gemm80_bf16_f32_gated},
     {tsr_gemm80_bf16_bf16, tsr_gemm80_bf16_bf16_gated},
     {tsr_gemm80_bf16_f16, tsr_gemm80_bf16_f16_gated}},
    {{tsr_gemm80_f16_f32, tsr_gemm80_f16_f32_gated},
     {tsr_gemm80_f16_bf16, tsr_gemm80_f16_bf16_gated},
     {tsr_gemm80_f16_f16, tsr_gemm80_f16_f16_gated}},
};

enum { OP_RELU = 16, OP_SIGMOID = 17, OP_TANH = 18, OP_SILU = 19, OP_GELU = 22, OP_BIAS = 25 };

__device__ float ref_sigmoid(float x)
{
    if (x < 0.0f) {
        float e = expf(x);
        return e / (1.0f + e);
    }
    return 1.0f / (1.0f + expf(-x));
}

__device__ float ref_act(int op, float x)
{
    switch (op) {
    case OP_RELU:
        return x > 0.0f ? x : (x != x ? x : 0.0f);
    case OP_SIGMOID:
        return ref_sigmoid(x);
    case OP_TANH:
        return tanhf(x);
    case OP_SILU:
        return x * ref_sigmoid(x);
    case OP_GELU: {
        float t = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        t = fminf(fmaxf(t, -30.0f), 30.0f);
        return 0.5f * x * (1.0f + tanhf(t));
    }
    default:
        return x;
    }
}

struct ref_ops {
    int n_ops;
    int ops[TSR_GEMM_MAX_EPILOGUE];
    int gate_act;
};

/* Reference: one thread per output, f32 accumulation, the same epilogue. */
template <typename T>
__global__ void ref_gemm(const T *a, const T *b, const T *b2, const T *bias, const T *res,
                         float *out, int m, int n, int k, ref_ops ops, int gated)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col >= n || row >= m)
        return;
    float acc = 0.0f, acc2 = 0.0f;
    for (int i = 0; i < k; i++) {
        float x = (float)a[(size_t)row * k + i];
        acc += x * (float)b[(size_t)i * n + col];
        if (gated)
            acc2 += x * (float)b2[(size_t)i * n + col];
    }
    if (gated) {
        acc = ref_act(ops.gate_act, acc) * acc2;
    } else {
        for (int o = 0; o < ops.n_ops; o++)
            acc = ops.ops[o] == OP_BIAS ? acc + (float)bias[col] : ref_act(ops.ops[o], acc);
        if (res != nullptr)
            acc += (float)res[(size_t)row * n + col];
    }
    out[(size_t)row * n + col] = acc;
}

template <typename T>
__global__ void fill_random(T *p, size_t n, unsigned long long seed, float scale)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) / (float)(1ull << 24); /* [0,1) */
        p[i] = (T)((u - 0.5f) * 2.0f * scale);
    }
}

template <typename T> __global__ void to_float(const T *p, float *q, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = (float)p[i];
}

struct gemm_case {
    const char *name;
    int m, n, k; /* n is H for gated cases */
    int f16_in;
    int out_kind; /* 0 f32, 1 bf16, 2 f16 */
    int gated;
    int n_ops;
    int ops[4];
    int residual;
    int gate_act;
    int timed;
    int walk; /* launch fewer blocks than tiles, so blocks walk several tiles */
};

template <typename T>
static void fill_all(const gemm_case &c, void *a, void *b, void *b2, void *bias, void *res,
                     size_t na, size_t nb, size_t nc, unsigned long long seed)
{
    /* Bias spread wide so that the activations see both tails. */
    fill_random<<<1024, 256>>>((T *)a, na, seed, 1.0f);
    fill_random<<<1024, 256>>>((T *)b, nb, seed + 1, 1.0f);
    fill_random<<<1024, 256>>>((T *)b2, nb, seed + 2, 1.0f);
    fill_random<<<1024, 256>>>((T *)bias, c.n, seed + 3, 8.0f);
    fill_random<<<1024, 256>>>((T *)res, nc, seed + 4, 1.0f);
}

template <typename T>
static void run_ref(const gemm_case &c, const ref_ops &ops, void *a, void *b, void *b2, void *bias,
                    void *res, float *ref)
{
    ref_gemm<<<dim3((c.n + 255) / 256, c.m), 256>>>((T *)a, (T *)b, (T *)b2, (T *)bias,
                                                    c.residual ? (T *)res : nullptr, ref, c.m, c.n,
                                                    c.k, ops, c.gated);
}

static int run_case(const gemm_case &c)
{
    size_t na = (size_t)c.m * c.k, nb = (size_t)c.k * c.n, nc = (size_t)c.m * c.n;
    void *a, *b, *b2, *bias, *res, *out;
    float *ref, *outf;
    CHECK_RT(cudaMalloc(&a, na * 2));
    CHECK_RT(cudaMalloc(&b, nb * 2));
    CHECK_RT(cudaMalloc(&b2, nb * 2));
    CHECK_RT(cudaMalloc(&bias, c.n * 2));
    CHECK_RT(cudaMalloc(&res, nc * 2));
    CHECK_RT(cudaMalloc(&out, nc * 4));
    CHECK_RT(cudaMalloc(&ref, nc * 4));
    CHECK_RT(cudaMalloc(&outf, nc * 4));
    unsigned long long seed = 1234567ull * (c.m + 7 * c.n + 13 * c.k) + 31 * c.n_ops + c.gated;
    if (c.f16_in)
        fill_all<__half>(c, a, b, b2, bias, res, na, nb, nc, seed);
    else
        fill_all<__nv_bfloat16>(c, a, b, b2, bias, res, na, nb, nc, seed);
    CHECK_RT(cudaMemset(out, 0xFF, nc * 4)); /* NaN poison */

    tsr_gemm_params p;
    memset(&p, 0, sizeof p);
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.out = out;
    p.gate_act = c.gate_act;
    p.n_ops = c.n_ops;
    ref_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.n_ops = c.n_ops;
    ops.gate_act = c.gate_act;
    for (int i = 0; i < c.n_ops; i++) {
        p.ops[i] = ops.ops[i] = c.ops[i];
        if (c.ops[i] == OP_BIAS)
            p.bias = bias;
    }
    if (c.residual)
        p.residual = res;
    gemm_fn fn = kernels[c.f16_in][c.out_kind][c.gated];
    const void *b2_arg = c.gated ? b2 : b;
    CHECK_RT(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  TSR_GEMM80_SMEM_BYTES));
    int bn = c.gated ? TSR_GEMM80_BN_GATED : TSR_GEMM80_BN;
    int blocks = ((c.m + TSR_GEMM80_BM - 1) / TSR_GEMM80_BM) * ((c.n + bn - 1) / bn);
    if (c.walk)
        blocks = std::max(1, blocks / 3);
    fn<<<blocks, TSR_GEMM80_THREADS, TSR_GEMM80_SMEM_BYTES>>>(a, b, b2_arg, p);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());

    if (c.f16_in)
        run_ref<__half>(c, ops, a, b, b2, bias, res, ref);
    else
        run_ref<__nv_bfloat16>(c, ops, a, b, b2, bias, res, ref);
    CHECK_RT(cudaGetLastError());
    if (c.out_kind == 0)
        CHECK_RT(cudaMemcpy(outf, out, nc * 4, cudaMemcpyDeviceToDevice));
    else if (c.out_kind == 1)
        to_float<<<1024, 256>>>((__nv_bfloat16 *)out, outf, nc);
    else
        to_float<<<1024, 256>>>((__half *)out, outf, nc);
    CHECK_RT(cudaDeviceSynchronize());
    std::vector<float> h_out(nc), h_ref(nc);
    CHECK_RT(cudaMemcpy(h_out.data(), outf, nc * 4, cudaMemcpyDeviceToHost));
    CHECK_RT(cudaMemcpy(h_ref.data(), ref, nc * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    size_t bad = 0, first_bad = (size_t)-1;
    for (size_t i = 0; i < nc; i++) {
        double d = (double)h_out[i] - h_ref[i];
        if (!std::isfinite(h_out[i])) {
            if (first_bad == (size_t)-1)
                first_bad = i;
            bad++;
            continue;
        }
        num += d * d;
        den += (double)h_ref[i] * h_ref[i];
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    bool pass = bad == 0 && rel < 1e-2;

    double tflops = 0, ms_med = 0;
    if (c.timed) {
        cudaEvent_t e0, e1;
        CHECK_RT(cudaEventCreate(&e0));
        CHECK_RT(cudaEventCreate(&e1));
        for (int i = 0; i < 5; i++)
            fn<<<blocks, TSR_GEMM80_THREADS, TSR_GEMM80_SMEM_BYTES>>>(a, b, b2_arg, p);
        std::vector<float> ms;
        for (int rep = 0; rep < 5; rep++) {
            CHECK_RT(cudaEventRecord(e0));
            for (int i = 0; i < 30; i++)
                fn<<<blocks, TSR_GEMM80_THREADS, TSR_GEMM80_SMEM_BYTES>>>(a, b, b2_arg, p);
            CHECK_RT(cudaEventRecord(e1));
            CHECK_RT(cudaEventSynchronize(e1));
            float t;
            CHECK_RT(cudaEventElapsedTime(&t, e0, e1));
            ms.push_back(t / 30);
        }
        CHECK_RT(cudaGetLastError());
        std::sort(ms.begin(), ms.end());
        ms_med = ms[2];
        double flop = (c.gated ? 4.0 : 2.0) * c.m * c.n * (double)c.k;
        tflops = flop / (ms_med * 1e-3) / 1e12;
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    printf("%-34s m %5d n %5d k %5d  rel %.3e  nonfinite %zu (first %zd)  %s", c.name, c.m, c.n,
           c.k, rel, bad, (ssize_t)first_bad, pass ? "PASS" : "FAIL");
    if (c.timed)
        printf("  %.3f ms  %.1f TFLOP/s", ms_med, tflops);
    printf("\n");
    cudaFree(a);
    cudaFree(b);
    cudaFree(b2);
    cudaFree(bias);
    cudaFree(res);
    cudaFree(out);
    cudaFree(ref);
    cudaFree(outf);
    return pass ? 0 : 1;
}

int main(int argc, char **argv)
{
    CHECK_RT(cudaFree(0));
    cudaDeviceProp prop;
    CHECK_RT(cudaGetDeviceProperties(&prop, 0));
    printf("device %s sm_%d%d, %d multiprocessors\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    /* name, m, n, k, f16_in, out_kind, gated, n_ops, ops, residual, gate_act, timed, walk */
    const gemm_case cases[] = {
        {"square_f32out", 512, 512, 512, 0, 0, 0, 0, {0}, 0, 0, 0, 0},
        {"ragged_bf16out", 1000, 1000, 1000, 0, 1, 0, 0, {0}, 0, 0, 0, 0},
        {"ragged_small", 77, 136, 40, 0, 1, 0, 0, {0}, 0, 0, 0, 0},
        {"tiny", 1, 8, 8, 0, 0, 0, 0, {0}, 0, 0, 0, 0},
        {"ragged_walk", 999, 520, 264, 0, 0, 0, 0, {0}, 0, 0, 0, 1},
        {"f16_f16out", 1000, 520, 264, 1, 2, 0, 0, {0}, 0, 0, 0, 0},
        {"f16_bf16out", 333, 264, 136, 1, 1, 0, 0, {0}, 0, 0, 0, 0},
        {"bf16_f16out", 333, 264, 136, 0, 2, 0, 0, {0}, 0, 0, 0, 0},
        {"epilogue_bias_gelu_res", 1000, 776, 512, 0, 1, 0, 2, {OP_BIAS, OP_GELU}, 1, 0, 0, 0},
        {"epilogue_bias_relu_f32", 1000, 776, 512, 0, 0, 0, 2, {OP_BIAS, OP_RELU}, 0, 0, 0, 0},
        {"epilogue_bias_sigmoid_f32", 515, 392, 200, 0, 0, 0, 2, {OP_BIAS, OP_SIGMOID}, 0, 0, 0, 0},
        {"epilogue_bias_silu_tanh_res_f16",
         515,
         392,
         200,
         1,
         2,
         0,
         3,
         {OP_BIAS, OP_SILU, OP_TANH},
         1,
         0,
         0,
         0},
        {"epilogue_residual_only", 300, 1032, 96, 0, 1, 0, 0, {0}, 1, 0, 0, 0},
        {"gated_silu", 1000, 776, 512, 0, 1, 1, 0, {0}, 0, OP_SILU, 0, 0},
        {"gated_gelu_f32", 333, 200, 264, 0, 0, 1, 0, {0}, 0, OP_GELU, 0, 0},
        {"gated_sigmoid_f16_walk", 999, 136, 96, 1, 2, 1, 0, {0}, 0, OP_SIGMOID, 0, 1},
        {"gated_relu_f16_bf16out", 130, 72, 56, 1, 1, 1, 0, {0}, 0, OP_RELU, 0, 0},
        {"bf16_4096", 4096, 4096, 4096, 0, 1, 0, 0, {0}, 0, 0, 1, 0},
        {"bf16_8192", 8192, 8192, 8192, 0, 1, 0, 0, {0}, 0, 0, 1, 0},
        {"bf16_8192_f32out", 8192, 8192, 8192, 0, 0, 0, 0, {0}, 0, 0, 1, 0},
        {"f16_8192", 8192, 8192, 8192, 1, 2, 0, 0, {0}, 0, 0, 1, 0},
        {"plain_8192x14336x4096", 8192, 14336, 4096, 0, 1, 0, 0, {0}, 0, 0, 1, 0},
        {"fused_bias_gelu_res_8192x14336x4096",
         8192,
         14336,
         4096,
         0,
         1,
         0,
         2,
         {OP_BIAS, OP_GELU},
         1,
         0,
         1,
         0},
        {"gated_silu_8192x14336x4096", 8192, 14336, 4096, 0, 1, 1, 0, {0}, 0, OP_SILU, 1, 0},
    };
    int failed = 0;
    int only = argc > 1 ? atoi(argv[1]) : -1;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        if (only >= 0 && i != only)
            continue;
        failed += run_case(cases[i]);
    }
    printf("gemm80_check: %d failed\n", failed);
    return failed ? 1 : 0;
}
