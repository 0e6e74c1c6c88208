/*
 * gemm_check.cu — stand-alone correctness and speed check of the tier-3 GEMM
 * kernels on a Hopper GPU, outside the daemon.
 *
 *   gemm_check            runs the built-in case list and prints one line per case
 *
 * Each case fills A, B (and bias / residual / Wu) with fresh random values,
 * poisons the output with NaN, runs the kernel, and compares with a simple f32
 * reference kernel on the same device by ||out - ref|| / ||ref|| (bf16 inputs
 * are exact in f32, so the only differences are accumulation order and the
 * output rounding). Timing: events around 30 launches after 5 warm-ups, median
 * of 5 such batches, TFLOP/s = 2*M*N*K / time (gated: 4*M*H*K).
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm_params.h"

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
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, n_);                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

extern "C" __global__ void tsr_gemm_bf16_f32(CUtensorMap, CUtensorMap, CUtensorMap,
                                             tsr_gemm_params);
extern "C" __global__ void tsr_gemm_bf16_bf16(CUtensorMap, CUtensorMap, CUtensorMap,
                                              tsr_gemm_params);
extern "C" __global__ void tsr_gemm_f16_f16(CUtensorMap, CUtensorMap, CUtensorMap, tsr_gemm_params);
extern "C" __global__ void tsr_gemm_bf16_bf16_gated(CUtensorMap, CUtensorMap, CUtensorMap,
                                                    tsr_gemm_params);

typedef void (*gemm_fn)(CUtensorMap, CUtensorMap, CUtensorMap, tsr_gemm_params);

/* Reference: one thread per output, f32 accumulation, same epilogue. */
template <typename T>
__global__ void ref_gemm(const T *a, const T *b, const T *b2, const T *bias, const T *res,
                         float *out, int m, int n, int k, int epi, int gated)
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
        acc = acc / (1.0f + expf(-acc)) * acc2; /* silu */
    } else {
        if (epi == 1 || epi == 2) {
            acc += (float)bias[col];
            float t = 0.7978845608028654f * (acc + 0.044715f * acc * acc * acc);
            t = fminf(fmaxf(t, -30.0f), 30.0f);
            acc = 0.5f * acc * (1.0f + tanhf(t));
        }
        if (epi == 1 || epi == 3)
            acc += (float)res[(size_t)row * n + col];
    }
    out[(size_t)row * n + col] = acc;
}

template <typename T> __global__ void fill_random(T *p, size_t n, unsigned long long seed)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = seed + i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) / (float)(1ull << 24); /* [0,1) */
        p[i] = (T)((u - 0.5f) * 2.0f);
    }
}

template <typename T> __global__ void to_float(const T *p, float *q, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = (float)p[i];
}

static CUtensorMap make_map(const void *ptr, CUtensorMapDataType type, int rows, int cols,
                            int box_cols, int box_rows)
{
    CUtensorMap map;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    CHECK_DRV(cuTensorMapEncodeTiled(&map, type, 2, const_cast<void *>(ptr), dims, strides, box,
                                     estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

struct gemm_case {
    const char *name;
    int m, n, k;
    int out_kind; /* 0 f32, 1 bf16, 2 f16-in-f16-out */
    int epi;      /* 1 bias + gelu + residual, 2 bias + gelu, 3 residual (timing only) */
    int gated;
    int timed;
};

static double run_case(const gemm_case &c, unsigned lbo, unsigned sbo, bool quiet)
{
    const bool f16 = c.out_kind == 2;
    const CUtensorMapDataType dt =
        f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
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
    unsigned long long seed = 1234567ull * (c.m + 7 * c.n + 13 * c.k) + lbo;
    if (f16) {
        fill_random<<<1024, 256>>>((__half *)a, na, seed);
        fill_random<<<1024, 256>>>((__half *)b, nb, seed + 1);
        fill_random<<<1024, 256>>>((__half *)b2, nb, seed + 2);
        fill_random<<<1024, 256>>>((__half *)bias, c.n, seed + 3);
        fill_random<<<1024, 256>>>((__half *)res, nc, seed + 4);
    } else {
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)a, na, seed);
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)b, nb, seed + 1);
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)b2, nb, seed + 2);
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)bias, c.n, seed + 3);
        fill_random<<<1024, 256>>>((__nv_bfloat16 *)res, nc, seed + 4);
    }
    CHECK_RT(cudaMemset(out, 0xFF, nc * 4)); /* NaN poison */

    CUtensorMap ma = make_map(a, dt, c.m, c.k, 64, 128);
    CUtensorMap mb = make_map(b, dt, c.k, c.n, 64, 64);
    CUtensorMap mb2 = make_map(b2, dt, c.k, c.n, 64, 64);
    tsr_gemm_params p;
    memset(&p, 0, sizeof p);
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.out = out;
    p.b_lbo = lbo;
    p.b_sbo = sbo;
    p.gate_act = 19; /* silu */
    if (c.epi == 1 || c.epi == 2) {
        p.n_ops = 2;
        p.ops[0] = 25; /* bias */
        p.ops[1] = 22; /* gelu */
        p.bias = bias;
    }
    if (c.epi == 1 || c.epi == 3)
        p.residual = res;
    gemm_fn fn =
        c.gated ? tsr_gemm_bf16_bf16_gated
                : (c.out_kind == 0 ? tsr_gemm_bf16_f32
                                   : (c.out_kind == 1 ? tsr_gemm_bf16_bf16 : tsr_gemm_f16_f16));
    CHECK_RT(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  TSR_GEMM_SMEM_BYTES));
    int bn = c.gated ? TSR_GEMM_BN_GATED : TSR_GEMM_BN;
    int tiles = ((c.m + TSR_GEMM_BM - 1) / TSR_GEMM_BM) * ((c.n + bn - 1) / bn);
    int sms = 0;
    CHECK_RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    /* Persistent kernels: one CTA per multiprocessor walks the tiles. Small
     * cases also run with one CTA per tile to check both walks. */
    if (!c.timed && (c.m & 1))
        sms = tiles;
    tiles = std::min(tiles, sms);
    fn<<<tiles, TSR_GEMM_THREADS, TSR_GEMM_SMEM_BYTES>>>(ma, mb, mb2, p);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());

    if (f16)
        ref_gemm<<<dim3((c.n + 255) / 256, c.m), 256>>>((__half *)a, (__half *)b, (__half *)b2,
                                                        (__half *)bias, (__half *)res, ref, c.m,
                                                        c.n, c.k, c.epi, c.gated);
    else
        ref_gemm<<<dim3((c.n + 255) / 256, c.m), 256>>>(
            (__nv_bfloat16 *)a, (__nv_bfloat16 *)b, (__nv_bfloat16 *)b2, (__nv_bfloat16 *)bias,
            (__nv_bfloat16 *)res, ref, c.m, c.n, c.k, c.epi, c.gated);
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

    double tflops = 0;
    if (c.timed) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        for (int i = 0; i < 5; i++)
            fn<<<tiles, TSR_GEMM_THREADS, TSR_GEMM_SMEM_BYTES>>>(ma, mb, mb2, p);
        std::vector<float> ms;
        for (int rep = 0; rep < 5; rep++) {
            cudaEventRecord(e0);
            for (int i = 0; i < 30; i++)
                fn<<<tiles, TSR_GEMM_THREADS, TSR_GEMM_SMEM_BYTES>>>(ma, mb, mb2, p);
            cudaEventRecord(e1);
            CHECK_RT(cudaEventSynchronize(e1));
            float t;
            cudaEventElapsedTime(&t, e0, e1);
            ms.push_back(t / 30);
        }
        CHECK_RT(cudaGetLastError());
        std::sort(ms.begin(), ms.end());
        double flop = (c.gated ? 4.0 : 2.0) * c.m * c.n * (double)c.k;
        tflops = flop / (ms[2] * 1e-3) / 1e12;
        if (!quiet)
            printf("  time %.3f ms\n", ms[2]);
    }
    if (!quiet)
        printf("%-28s m %5d n %5d k %5d  lbo %5u sbo %5u  rel %.3e  nonfinite %zu (first %zd)  "
               "%s  %.1f TFLOP/s\n",
               c.name, c.m, c.n, c.k, lbo, sbo, rel, bad, (ssize_t)first_bad,
               (bad == 0 && rel < 1e-2) ? "PASS" : "FAIL", tflops);
    cudaFree(a);
    cudaFree(b);
    cudaFree(b2);
    cudaFree(bias);
    cudaFree(res);
    cudaFree(out);
    cudaFree(ref);
    cudaFree(outf);
    return (bad == 0 && rel < 1e-2) ? rel : -1.0;
}

int main(int argc, char **argv)
{
    CHECK_DRV(cuInit(0));
    CHECK_RT(cudaFree(0));
    unsigned lbo = 8192, sbo = 1024;
    /* Find the B descriptor strides that give correct results (they are a
     * property of the layout, fixed once found; the search documents it). */
    const unsigned cand[][2] = {{8192, 1024}, {1024, 8192}};
    int found = 0;
    for (auto &cs : cand) {
        gemm_case probe = {"probe", 256, 512, 128, 0, 0, 0, 0};
        double r = run_case(probe, cs[0], cs[1], false);
        if (r >= 0 && !found) {
            lbo = cs[0];
            sbo = cs[1];
            found = 1;
        }
    }
    if (!found) {
        printf("no descriptor layout passed\n");
        return 1;
    }
    printf("B descriptor: lbo %u sbo %u\n", lbo, sbo);
    const gemm_case cases[] = {
        {"square_f32out", 512, 512, 512, 0, 0, 0, 0},
        {"ragged_bf16out", 1000, 1000, 1000, 1, 0, 0, 0},
        {"ragged_small", 77, 136, 40, 1, 0, 0, 0},
        {"f16", 1000, 520, 264, 2, 0, 0, 0},
        {"epilogue_bias_gelu_res", 1000, 776, 512, 1, 1, 0, 0},
        {"gated_silu", 1000, 776, 512, 1, 0, 1, 0},
        {"bf16_8192", 8192, 8192, 8192, 1, 0, 0, 1},
        {"bf16_8192_f32out", 8192, 8192, 8192, 0, 0, 0, 1},
        {"fused_bias_gelu_8192x14336x4096", 8192, 14336, 4096, 1, 1, 0, 1},
        {"gated_8192x14336x4096", 8192, 14336, 4096, 1, 0, 1, 1},
        {"bf16_4096", 4096, 4096, 4096, 1, 0, 0, 1},
        {"plain_8192x14336x4096", 8192, 14336, 4096, 1, 0, 0, 1},
        {"bias_gelu_only_8192x14336x4096", 8192, 14336, 4096, 1, 2, 0, 1},
        {"residual_only_8192x14336x4096", 8192, 14336, 4096, 1, 3, 0, 1},
    };
    int failed = 0;
    int only = argc > 1 ? atoi(argv[1]) : -1;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        if (only >= 0 && i != only)
            continue;
        if (run_case(cases[i], lbo, sbo, false) < 0)
            failed++;
    }
    printf("gemm_check: %d failed\n", failed);
    return failed ? 1 : 0;
}
