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
#include <cstring>

#include "gemm80_params.h"
#include "gemm_check_common.cuh"

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

struct ref_act {
    static __device__ float apply(int op, float x)
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
        case OP_GELU:
            return ref_gelu(x);
        default:
            return x;
        }
    }
};

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
static void run_ref(const gemm_case &c, const ref_epilogue &epi, const check_buffers &d)
{
    ref_gemm<T, ref_act><<<dim3((c.n + 255) / 256, c.m), 256>>>(
        (T *)d.a, (T *)d.b, (T *)d.b2, (T *)d.bias, (T *)d.res, d.ref, c.m, c.n, c.k, epi, c.gated);
}

static int run_case(const gemm_case &c)
{
    size_t na = (size_t)c.m * c.k, nb = (size_t)c.k * c.n, nc = (size_t)c.m * c.n;
    const check_buffers d = check_alloc(na, nb, nc, c.n);
    unsigned long long seed = 1234567ull * (c.m + 7 * c.n + 13 * c.k) + 31 * c.n_ops + c.gated;
    /* Bias spread wide so that the activations see both tails. */
    if (c.f16_in)
        check_fill_inputs<__half>(d, na, nb, c.n, nc, seed, 8.0f);
    else
        check_fill_inputs<__nv_bfloat16>(d, na, nb, c.n, nc, seed, 8.0f);
    CHECK_RT(cudaMemset(d.out, 0xFF, nc * 4)); /* NaN poison */

    tsr_gemm_params p = check_gemm_params(c.m, c.n, c.k, d);
    p.gate_act = c.gate_act;
    p.n_ops = c.n_ops;
    ref_epilogue ops;
    memset(&ops, 0, sizeof ops);
    ops.n_ops = c.n_ops;
    ops.gate_act = c.gate_act;
    ops.residual = c.residual;
    for (int i = 0; i < c.n_ops; i++) {
        p.ops[i] = ops.ops[i] = c.ops[i];
        if (c.ops[i] == OP_BIAS)
            p.bias = d.bias;
    }
    if (c.residual)
        p.residual = d.res;
    gemm_fn fn = kernels[c.f16_in][c.out_kind][c.gated];
    const void *b2_arg = c.gated ? d.b2 : d.b;
    CHECK_RT(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  TSR_GEMM80_SMEM_BYTES));
    int bn = c.gated ? TSR_GEMM80_BN_GATED : TSR_GEMM80_BN;
    int blocks = ((c.m + TSR_GEMM80_BM - 1) / TSR_GEMM80_BM) * ((c.n + bn - 1) / bn);
    if (c.walk)
        blocks = std::max(1, blocks / 3);
    fn<<<blocks, TSR_GEMM80_THREADS, TSR_GEMM80_SMEM_BYTES>>>(d.a, d.b, b2_arg, p);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());

    if (c.f16_in)
        run_ref<__half>(c, ops, d);
    else
        run_ref<__nv_bfloat16>(c, ops, d);
    CHECK_RT(cudaGetLastError());
    check_widen_output(d, c.out_kind, nc);
    CHECK_RT(cudaDeviceSynchronize());
    const check_result r = check_compare(d, nc);
    const bool pass = r.bad == 0 && r.rel < 1e-2;

    double tflops = 0, ms = 0;
    if (c.timed) {
        ms = check_time_ms([&] {
            fn<<<blocks, TSR_GEMM80_THREADS, TSR_GEMM80_SMEM_BYTES>>>(d.a, d.b, b2_arg, p);
        });
        tflops = check_tflops(c.gated, c.m, c.n, c.k, ms);
    }
    printf("%-34s m %5d n %5d k %5d  rel %.3e  nonfinite %zu (first %zd)  %s", c.name, c.m, c.n,
           c.k, r.rel, r.bad, (ssize_t)r.first_bad, pass ? "PASS" : "FAIL");
    if (c.timed)
        printf("  %.3f ms  %.1f TFLOP/s", ms, tflops);
    printf("\n");
    check_free(d);
    return pass ? 0 : 1;
}

int main(int argc, char **argv)
{
    check_device_banner();
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
    int failed = check_cases(check_only_case(argc, argv), (int)(sizeof cases / sizeof cases[0]),
                             [&](int i) { return run_case(cases[i]) != 0; });
    printf("gemm80_check: %d failed\n", failed);
    return failed ? 1 : 0;
}
