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

#include <cstring>

#include "gemm_check_common.cuh"
#include "gemm_params.h"

/* The kernels' source is part of this program, so that it can also build a
 * variant that prefetches the epilogue's inputs at the tile's start (the old
 * placement) and time both. */
#include "gemm_sm90.cu"

extern "C" __global__ void __launch_bounds__(TSR_GEMM_THREADS, 1)
    check_prefetch_at_start(const __grid_constant__ CUtensorMap map_a,
                            const __grid_constant__ CUtensorMap map_b,
                            const __grid_constant__ CUtensorMap map_b2,
                            const __grid_constant__ tsr_gemm_params p)
{
    gemm_body<__nv_bfloat16, __nv_bfloat16, false, 1 << 30>(&map_a, &map_b, &map_b2, p);
}

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
    float acc, acc2;
    ref_products(a, b, b2, row, col, n, k, gated, acc, acc2);
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

template <typename T>
static void fill_all(const gemm_case &c, const check_buffers &d, size_t na, size_t nb, size_t nc,
                     unsigned long long seed)
{
    fill_random<<<1024, 256>>>((T *)d.a, na, seed, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.b, nb, seed + 1, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.b2, nb, seed + 2, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.bias, c.n, seed + 3, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.res, nc, seed + 4, 1.0f);
}

template <typename T> static void run_ref(const gemm_case &c, const check_buffers &d)
{
    ref_gemm<<<dim3((c.n + 255) / 256, c.m), 256>>>((T *)d.a, (T *)d.b, (T *)d.b2, (T *)d.bias,
                                                    (T *)d.res, d.ref, c.m, c.n, c.k, c.epi,
                                                    c.gated);
}

static double run_case(const gemm_case &c, unsigned lbo, unsigned sbo, bool quiet)
{
    const bool f16 = c.out_kind == 2;
    const CUtensorMapDataType dt =
        f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    size_t na = (size_t)c.m * c.k, nb = (size_t)c.k * c.n, nc = (size_t)c.m * c.n;
    const check_buffers d = check_alloc(na, nb, nc, c.n);
    unsigned long long seed = 1234567ull * (c.m + 7 * c.n + 13 * c.k) + lbo;
    if (f16)
        fill_all<__half>(c, d, na, nb, nc, seed);
    else
        fill_all<__nv_bfloat16>(c, d, na, nb, nc, seed);
    CHECK_RT(cudaMemset(d.out, 0xFF, nc * 4)); /* NaN poison */

    CUtensorMap ma = make_map(d.a, dt, c.m, c.k, 64, 128);
    CUtensorMap mb = make_map(d.b, dt, c.k, c.n, 64, 64);
    CUtensorMap mb2 = make_map(d.b2, dt, c.k, c.n, 64, 64);
    tsr_gemm_params p;
    memset(&p, 0, sizeof p);
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.out = d.out;
    p.b_lbo = lbo;
    p.b_sbo = sbo;
    p.gate_act = 19; /* silu */
    if (c.epi == 1 || c.epi == 2) {
        p.n_ops = 2;
        p.ops[0] = 25; /* bias */
        p.ops[1] = 22; /* gelu */
        p.bias = d.bias;
    }
    if (c.epi == 1 || c.epi == 3)
        p.residual = d.res;
    /* At most TSR_GEMM_NARROW_M rows: the narrow kernels, as the daemon plans. */
    const bool narrow = !c.gated && c.m <= TSR_GEMM_NARROW_M;
    gemm_fn fn =
        c.gated ? tsr_gemm_bf16_bf16_gated
        : narrow
            ? (c.out_kind == 0 ? tsr_gemm_bf16_f32_n64
                               : (c.out_kind == 1 ? tsr_gemm_bf16_bf16_n64 : tsr_gemm_f16_f16_n64))
            : (c.out_kind == 0 ? tsr_gemm_bf16_f32
                               : (c.out_kind == 1 ? tsr_gemm_bf16_bf16 : tsr_gemm_f16_f16));
    const int smem = narrow ? TSR_GEMM_SMEM_BYTES_NARROW : TSR_GEMM_SMEM_BYTES;
    CHECK_RT(
        cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int bn = c.gated ? TSR_GEMM_BN_GATED : (narrow ? TSR_GEMM_BN_NARROW : TSR_GEMM_BN);
    int tiles = ((c.m + TSR_GEMM_BM - 1) / TSR_GEMM_BM) * ((c.n + bn - 1) / bn);
    int sms = 0;
    CHECK_RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    /* Persistent kernels: one CTA per multiprocessor walks the tiles. Small
     * cases also run with one CTA per tile to check both walks. */
    if (!c.timed && (c.m & 1))
        sms = tiles;
    tiles = std::min(tiles, sms);
    fn<<<tiles, TSR_GEMM_THREADS, smem>>>(ma, mb, mb2, p);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());

    if (f16)
        run_ref<__half>(c, d);
    else
        run_ref<__nv_bfloat16>(c, d);
    CHECK_RT(cudaGetLastError());
    check_widen_output(d, c.out_kind, nc);
    CHECK_RT(cudaDeviceSynchronize());
    const check_result r = check_compare(d, nc);
    const bool pass = r.bad == 0 && r.rel < 1e-2;

    double tflops = 0;
    if (c.timed) {
        double ms = check_time_ms([&] { fn<<<tiles, TSR_GEMM_THREADS, smem>>>(ma, mb, mb2, p); });
        tflops = check_tflops(c.gated, c.m, c.n, c.k, ms);
        if (!quiet)
            printf("  time %.3f ms\n", ms);
        if (!c.gated && !narrow && c.epi != 0 && c.out_kind == 1 && !quiet) {
            CHECK_RT(cudaFuncSetAttribute((const void *)check_prefetch_at_start,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          TSR_GEMM_SMEM_BYTES));
            double alt = check_time_ms([&] {
                check_prefetch_at_start<<<tiles, TSR_GEMM_THREADS, TSR_GEMM_SMEM_BYTES>>>(ma, mb,
                                                                                          mb2, p);
            });
            printf("  prefetch at the tile's start: %.3f ms, %.1f TFLOP/s\n", alt,
                   check_tflops(c.gated, c.m, c.n, c.k, alt));
        }
    }
    if (!quiet)
        printf("%-28s m %5d n %5d k %5d  lbo %5u sbo %5u  rel %.3e  nonfinite %zu (first %zd)  "
               "%s  %.1f TFLOP/s\n",
               c.name, c.m, c.n, c.k, lbo, sbo, r.rel, r.bad, (ssize_t)r.first_bad,
               pass ? "PASS" : "FAIL", tflops);
    check_free(d);
    return pass ? r.rel : -1.0;
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
        {"narrow_ragged_epilogue", 33, 1000, 520, 1, 1, 0, 0},
        {"narrow_f32out", 64, 776, 264, 0, 0, 0, 0},
        {"narrow_decode_m16_8192", 16, 8192, 8192, 1, 0, 0, 1},
        {"narrow_decode_m64_8192", 64, 8192, 8192, 1, 0, 0, 1},
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
