/*
 * gemm_check_common.cuh — what the stand-alone GEMM checks (gemm_check.cu for
 * the Hopper family, gemm80_check.cu for the Ampere family) share beyond
 * check_common.cuh: the reference products, the case's device buffers,
 * widening the output and the comparison with the reference. One copy, so both
 * checks judge their kernels the same way.
 *
 * Single-threaded host code; every call works on the current device.
 */
#ifndef TSR_GEMM_CHECK_COMMON_CUH
#define TSR_GEMM_CHECK_COMMON_CUH

#include <cstring>

#include "check_common.cuh"
#include "gemm_params.h"

/* The reference kernels' products, one output (row, col) per thread: A's row
 * times B's column, and times B2's column too when gated, accumulated in f32. */
template <typename T>
__device__ __forceinline__ void ref_products(const T *a, const T *b, const T *b2, int row, int col,
                                             int n, int k, int gated, float &acc, float &acc2)
{
    acc = 0.0f;
    acc2 = 0.0f;
    for (int i = 0; i < k; i++) {
        float x = (float)a[(size_t)row * k + i];
        acc += x * (float)b[(size_t)i * n + col];
        if (gated)
            acc2 += x * (float)b2[(size_t)i * n + col];
    }
}

/* The GELU's tanh form, its argument clamped as the kernels clamp it. */
__device__ __forceinline__ float ref_gelu(float x)
{
    float t = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    t = fminf(fmaxf(t, -30.0f), 30.0f);
    return 0.5f * x * (1.0f + tanhf(t));
}

/* The reference's epilogue: its ops in order (tsr_op numbers, 25 the bias),
 * the gate's activation (gated cases), and whether the residual follows. */
struct ref_epilogue {
    int n_ops;
    int ops[TSR_GEMM_MAX_EPILOGUE];
    int gate_act;
    int residual;
};

/* Reference: one thread per output, f32 accumulation, the same epilogue, its
 * activations Act::apply(op, x) (each check writes its own from the op
 * definitions). */
template <typename T, typename Act>
__global__ void ref_gemm(const T *a, const T *b, const T *b2, const T *bias, const T *res,
                         float *out, int m, int n, int k, ref_epilogue epi, int gated)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col >= n || row >= m)
        return;
    float acc, acc2;
    ref_products(a, b, b2, row, col, n, k, gated, acc, acc2);
    if (gated) {
        acc = Act::apply(epi.gate_act, acc) * acc2;
    } else {
        for (int o = 0; o < epi.n_ops; o++)
            acc = epi.ops[o] == 25 ? acc + (float)bias[col] : Act::apply(epi.ops[o], acc);
        if (epi.residual)
            acc += (float)res[(size_t)row * n + col];
    }
    out[(size_t)row * n + col] = acc;
}

/* One case's device memory: A (na), B and the second weights (nb), bias (n)
 * and residual (nc) in a 16-bit input dtype; the output with room for f32; the
 * reference and the output widened to f32. */
struct check_buffers {
    void *a, *b, *b2, *bias, *res, *out;
    float *ref, *outf;
};

static check_buffers check_alloc(size_t na, size_t nb, size_t nc, int n)
{
    check_buffers d;
    CHECK_RT(cudaMalloc(&d.a, na * 2));
    CHECK_RT(cudaMalloc(&d.b, nb * 2));
    CHECK_RT(cudaMalloc(&d.b2, nb * 2));
    CHECK_RT(cudaMalloc(&d.bias, n * 2));
    CHECK_RT(cudaMalloc(&d.res, nc * 2));
    CHECK_RT(cudaMalloc(&d.out, nc * 4));
    CHECK_RT(cudaMalloc(&d.ref, nc * 4));
    CHECK_RT(cudaMalloc(&d.outf, nc * 4));
    return d;
}

static void check_free(const check_buffers &d)
{
    cudaFree(d.a);
    cudaFree(d.b);
    cudaFree(d.b2);
    cudaFree(d.bias);
    cudaFree(d.res);
    cudaFree(d.out);
    cudaFree(d.ref);
    cudaFree(d.outf);
}

/* A, B, the second weights, the bias (n) and the residual (nc) filled with
 * the random sequences of seed, seed + 1, ... seed + 4, in T; the bias scaled
 * by bias_scale. Asynchronous. */
template <typename T>
static void check_fill_inputs(const check_buffers &d, size_t na, size_t nb, int n, size_t nc,
                              unsigned long long seed, float bias_scale)
{
    fill_random<<<1024, 256>>>((T *)d.a, na, seed, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.b, nb, seed + 1, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.b2, nb, seed + 2, 1.0f);
    fill_random<<<1024, 256>>>((T *)d.bias, n, seed + 3, bias_scale);
    fill_random<<<1024, 256>>>((T *)d.res, nc, seed + 4, 1.0f);
}

/* A case's kernel parameters before its epilogue: all zero but the shape and
 * the output. */
static tsr_gemm_params check_gemm_params(int m, int n, int k, const check_buffers &d)
{
    tsr_gemm_params p;
    memset(&p, 0, sizeof p);
    p.m = m;
    p.n = n;
    p.k = k;
    p.out = d.out;
    return p;
}

/* Widens the output (out_kind 0 f32, 1 bf16, 2 f16) into outf; asynchronous. */
static void check_widen_output(const check_buffers &d, int out_kind, size_t nc)
{
    if (out_kind == 0)
        CHECK_RT(cudaMemcpy(d.outf, d.out, nc * 4, cudaMemcpyDeviceToDevice));
    else if (out_kind == 1)
        to_float<<<1024, 256>>>((__nv_bfloat16 *)d.out, d.outf, nc);
    else
        to_float<<<1024, 256>>>((__half *)d.out, d.outf, nc);
}

struct check_result {
    double rel;       /* ||out - ref|| / ||ref|| where both are finite */
    size_t bad;       /* non-finite outputs */
    size_t first_bad; /* the first one's index, or (size_t)-1 */
    size_t mismatch;  /* outputs finite where the reference is not, or the reverse */
};

/* Copies the widened output and the reference back (after the device is
 * synchronized) and compares them. */
static check_result check_compare(const check_buffers &d, size_t nc)
{
    std::vector<float> h_out(nc), h_ref(nc);
    CHECK_RT(cudaMemcpy(h_out.data(), d.outf, nc * 4, cudaMemcpyDeviceToHost));
    CHECK_RT(cudaMemcpy(h_ref.data(), d.ref, nc * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    check_result r = {0, 0, (size_t)-1, 0};
    for (size_t i = 0; i < nc; i++) {
        double diff = (double)h_out[i] - h_ref[i];
        const bool out_finite = std::isfinite(h_out[i]), ref_finite = std::isfinite(h_ref[i]);
        if (out_finite != ref_finite)
            r.mismatch++;
        if (!out_finite) {
            if (r.first_bad == (size_t)-1)
                r.first_bad = i;
            r.bad++;
            continue;
        }
        if (!ref_finite)
            continue;
        num += diff * diff;
        den += (double)h_ref[i] * h_ref[i];
    }
    r.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return r;
}

/* TFLOP/s of an M x N x K product (gated: two of them) taking ms. */
static double check_tflops(bool gated, int m, int n, int k, double ms)
{
    double flop = (gated ? 4.0 : 2.0) * m * n * (double)k;
    return flop / (ms * 1e-3) / 1e12;
}

#endif
