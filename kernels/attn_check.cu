/*
 * attn_check.cu — stand-alone correctness and speed check of the tier-3 Hopper
 * attention kernels (kernels/attn_sm90.cu), outside the daemon.
 *
 *   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 \
 *        -o build/gpu/bin/attn_check kernels/attn_check.cu -lcuda
 *   attn_check          runs the built-in case list and prints one line per case
 *   attn_check N        runs case N only
 *
 * Each case fills Q, K and V with fresh random values (and, where the case says,
 * puts NaN or inf into one row of one of them), poisons the output with NaN,
 * runs the kernel, and compares sampled query rows with a simple f32 reference
 * kernel on the same device that follows the region's definition literally:
 * only the visible keys enter, the maximum propagates NaN, a row that sees no
 * key is 0. Pass: the non-finite positions agree exactly and the relative L2
 * error of the finite ones is below 1e-2. Timing: check_time_ms (events around
 * 30 launches after 5 warm-ups, median of 5 such batches), TFLOP/s =
 * 4·B·H·M·N·D (halved for causal square shapes).
 */
#include <cstring>

#include "attn_params.h"
#include "check_common.cuh"

/* The kernels' source is part of this program, so that it can also build
 * the variant without ping-pong between the consumer warpgroups and time both. */
#include "attn_sm90.cu"

typedef void (*attn_fn)(CUtensorMap, CUtensorMap, CUtensorMap, tsr_attn_params);

/* Without ping-pong between the consumers, and with Q in shared memory. */
TSR_ATTN_KERNEL(check_no_pingpong_d64, __nv_bfloat16, __nv_bfloat16, 64, false, true)
TSR_ATTN_KERNEL(check_no_pingpong_d128, __nv_bfloat16, __nv_bfloat16, 128, false, true)
TSR_ATTN_KERNEL(check_q_in_smem_d64, __nv_bfloat16, __nv_bfloat16, 64, true, false)
TSR_ATTN_KERNEL(check_q_in_smem_d128, __nv_bfloat16, __nv_bfloat16, 128, true, false)
/* Equal rings (the shared memory of the asymmetric ones is enough). */
TSR_ATTN_KERNEL(check_equal_rings_d64, __nv_bfloat16, __nv_bfloat16, 64, true, true, 1, 3, 3)
TSR_ATTN_KERNEL(check_equal_rings_d128, __nv_bfloat16, __nv_bfloat16, 128, true, true, 1, 2, 2)

/* [d128][f16 in][out kind: f32, bf16, f16] */
static const attn_fn kernels[2][2][3] = {
    {{tsr_attn_bf16_f32_d64, tsr_attn_bf16_bf16_d64, tsr_attn_bf16_f16_d64},
     {tsr_attn_f16_f32_d64, tsr_attn_f16_bf16_d64, tsr_attn_f16_f16_d64}},
    {{tsr_attn_bf16_f32_d128, tsr_attn_bf16_bf16_d128, tsr_attn_bf16_f16_d128},
     {tsr_attn_f16_f32_d128, tsr_attn_f16_bf16_d128, tsr_attn_f16_f16_d128}},
};

/* [d128][f16 in][8 splits]: the split-key entries (bf16 -> bf16, f16 -> f16). */
static const attn_fn split_kernels[2][2][2] = {
    {{tsr_attn_bf16_bf16_d64_s4, tsr_attn_bf16_bf16_d64_s8},
     {tsr_attn_f16_f16_d64_s4, tsr_attn_f16_f16_d64_s8}},
    {{tsr_attn_bf16_bf16_d128_s4, tsr_attn_bf16_bf16_d128_s8},
     {tsr_attn_f16_f16_d128_s4, tsr_attn_f16_f16_d128_s8}},
};

template <typename T> __global__ void set_row(T *p, size_t row, int d, float value)
{
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        p[row * d + i] = (T)value;
}

__device__ float nan_max(float a, float b)
{
    return (a > b || a != a) ? a : b;
}

/* One block per sampled row (b, h, m): scores in shared memory, then the
 * output columns. */
template <typename T>
__global__ void ref_rows(const T *q, const T *k, const T *v, float *out, const long long *rows,
                         int B, int H, int Hkv, int M, int N, int D, float scale, int causal)
{
    extern __shared__ float sc[];
    __shared__ float red[32];
    const long long row = rows[blockIdx.x];
    const int m = (int)(row % M);
    const long long bh = row / M;
    const int b = (int)(bh / H), h = (int)(bh % H);
    const long long kv0 = ((long long)b * Hkv + h / (H / Hkv)) * N;
    int visible = causal ? m + (N - M) + 1 : N;
    visible = visible < N ? visible : N;
    float *o = out + (size_t)blockIdx.x * D;
    if (visible <= 0) {
        for (int x = threadIdx.x; x < D; x += blockDim.x)
            o[x] = 0.0f;
        return;
    }
    for (int n = threadIdx.x; n < visible; n += blockDim.x) {
        float s = 0;
        for (int x = 0; x < D; x++)
            s += (float)q[row * D + x] * (float)k[(kv0 + n) * D + x];
        sc[n] = scale * s;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int n = threadIdx.x; n < visible; n += blockDim.x)
        mx = nan_max(mx, sc[n]);
    for (int off = 16; off > 0; off /= 2)
        mx = nan_max(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
        mx = nan_max(mx, red[w]);
    __syncthreads();
    float sum = 0;
    for (int n = threadIdx.x; n < visible; n += blockDim.x) {
        sc[n] = expf(sc[n] - mx);
        sum += sc[n];
    }
    for (int off = 16; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = sum;
    __syncthreads();
    sum = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++)
        sum += red[w];
    for (int x = threadIdx.x; x < D; x += blockDim.x) {
        float acc = 0;
        for (int n = 0; n < visible; n++)
            acc += sc[n] / sum * (float)v[(kv0 + n) * D + x];
        o[x] = acc;
    }
}

static CUtensorMap tensor_map(CUtensorMapDataType dt, void *base, int rank, const cuuint64_t *dims,
                              const cuuint32_t *box)
{
    CUtensorMap map;
    cuuint64_t strides[2] = {dims[0] * 2, dims[0] * dims[1] * 2};
    cuuint32_t estr[3] = {1, 1, 1};
    CHECK_DRV(cuTensorMapEncodeTiled(&map, dt, rank, base, dims, strides, box, estr,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    return map;
}

struct attn_case {
    const char *name;
    int b, h, hkv, m, n, d;
    int causal;
    int f16_in;
    int out_kind;   /* 0 f32, 1 bf16, 2 f16 */
    float scale;    /* 0 here means 1/sqrt(d); see zero_scale */
    int zero_scale; /* scale exactly 0 */
    int poison;     /* 0 none, 1 NaN in a Q row, 2 NaN in a K row, 3 NaN in a V row, 4 inf in V */
    long long poison_row; /* row of the (B·H(kv)·seq) view */
    int timed;
    int splits; /* 0: the unsplit entry; 4 or 8: the split-key entry (same in and out dtype) */
};

template <typename T>
static void fill_inputs(const attn_case &c, void *q, void *k, void *v, size_t nq, size_t nkv,
                        unsigned long long seed)
{
    fill_random<<<1024, 256>>>((T *)q, nq, seed, 1.0f);
    fill_random<<<1024, 256>>>((T *)k, nkv, seed + 1, 1.0f);
    fill_random<<<1024, 256>>>((T *)v, nkv, seed + 2, 1.0f);
    float bad = c.poison == 4 ? INFINITY : NAN;
    if (c.poison == 1)
        set_row<T><<<1, 128>>>((T *)q, c.poison_row, c.d, bad);
    else if (c.poison == 2)
        set_row<T><<<1, 128>>>((T *)k, c.poison_row, c.d, bad);
    else if (c.poison >= 3)
        set_row<T><<<1, 128>>>((T *)v, c.poison_row, c.d, bad);
}

static int run_case(const attn_case &c, double *ms_out)
{
    const size_t nq = (size_t)c.b * c.h * c.m * c.d;
    const size_t nkv = (size_t)c.b * c.hkv * c.n * c.d;
    void *q, *k, *v, *out;
    float *outf, *ref;
    CHECK_RT(cudaMalloc(&q, nq * 2));
    CHECK_RT(cudaMalloc(&k, nkv * 2));
    CHECK_RT(cudaMalloc(&v, nkv * 2));
    CHECK_RT(cudaMalloc(&out, nq * 4));
    CHECK_RT(cudaMalloc(&outf, nq * 4));
    unsigned long long seed = 7919ull * (c.m + 3 * c.n + 11 * c.h + 17 * c.d) + c.poison;
    if (c.f16_in)
        fill_inputs<__half>(c, q, k, v, nq, nkv, seed);
    else
        fill_inputs<__nv_bfloat16>(c, q, k, v, nq, nkv, seed);
    CHECK_RT(cudaMemset(out, 0xFF, nq * 4));

    const float scale =
        c.zero_scale ? 0.0f : (c.scale != 0.0f ? c.scale : 1.0f / sqrtf((float)c.d));
    tsr_attn_params p;
    memset(&p, 0, sizeof p);
    p.seq_q = c.m;
    p.seq_k = c.n;
    p.heads = c.h;
    p.heads_kv = c.hkv;
    p.causal = c.causal;
    p.scale_log2 = scale * 1.4426950408889634f;
    p.out = out;
    CUtensorMapDataType dt =
        c.f16_in ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    cuuint64_t qdims[2] = {(cuuint64_t)c.d, (cuuint64_t)c.b * c.h * c.m};
    cuuint32_t qbox[2] = {64, TSR_ATTN_BM};
    cuuint64_t kvdims[3] = {(cuuint64_t)c.d, (cuuint64_t)c.n, (cuuint64_t)c.b * c.hkv};
    cuuint32_t kvbox[3] = {64, TSR_ATTN_BN, 1};
    CUtensorMap mq = tensor_map(dt, q, 2, qdims, qbox);
    CUtensorMap mk = tensor_map(dt, k, 3, kvdims, kvbox);
    CUtensorMap mv = tensor_map(dt, v, 3, kvdims, kvbox);
    attn_fn fn = kernels[c.d == 128][c.f16_in][c.out_kind];
    const attn_fn unsplit = fn;
    if (c.splits) {
        if (c.out_kind != (c.f16_in ? 2 : 1) || (c.splits != 4 && c.splits != 8)) {
            printf("%s: split entries are 4 or 8 with the input dtype out\n", c.name);
            return 1;
        }
        fn = split_kernels[c.d == 128][c.f16_in][c.splits == 8];
    }
    const int smem = TSR_ATTN_SMEM_BYTES(c.d);
    CHECK_RT(
        cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CHECK_RT(cudaFuncSetAttribute((const void *)unsplit,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int group = c.h / c.hkv;
    const unsigned row_tiles = (group * c.m + TSR_ATTN_BM - 1) / TSR_ATTN_BM;
    dim3 grid(row_tiles * (c.splits ? c.splits : 1), c.hkv, c.b);
    dim3 unsplit_grid(row_tiles, c.hkv, c.b);
    fn<<<grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p);
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());
    if (c.out_kind == 0)
        CHECK_RT(cudaMemcpy(outf, out, nq * 4, cudaMemcpyDeviceToDevice));
    else if (c.out_kind == 1)
        to_float<<<1024, 256>>>((__nv_bfloat16 *)out, outf, nq);
    else
        to_float<<<1024, 256>>>((__half *)out, outf, nq);

    /* Sampled rows: every row when small, else a spread of rows plus the
     * poisoned row's neighbourhood and the last row. */
    const long long rows_total = (long long)c.b * c.h * c.m;
    std::vector<long long> rows;
    long long stride = rows_total <= 4096 ? 1 : rows_total / 2039;
    for (long long r = 0; r < rows_total; r += stride)
        rows.push_back(r);
    rows.push_back(rows_total - 1);
    if (c.poison)
        for (long long r = 0; r < std::min<long long>(rows_total, 512); r++)
            rows.push_back(r);
    long long *drows;
    CHECK_RT(cudaMalloc(&drows, rows.size() * sizeof(long long)));
    CHECK_RT(
        cudaMemcpy(drows, rows.data(), rows.size() * sizeof(long long), cudaMemcpyHostToDevice));
    CHECK_RT(cudaMalloc(&ref, rows.size() * c.d * 4));
    const size_t ref_smem = (size_t)c.n * 4;
    if (c.f16_in) {
        CHECK_RT(cudaFuncSetAttribute((const void *)ref_rows<__half>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, 200000));
        ref_rows<__half><<<rows.size(), 128, ref_smem>>>((__half *)q, (__half *)k, (__half *)v, ref,
                                                         drows, c.b, c.h, c.hkv, c.m, c.n, c.d,
                                                         scale, c.causal);
    } else {
        CHECK_RT(cudaFuncSetAttribute((const void *)ref_rows<__nv_bfloat16>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, 200000));
        ref_rows<__nv_bfloat16><<<rows.size(), 128, ref_smem>>>(
            (__nv_bfloat16 *)q, (__nv_bfloat16 *)k, (__nv_bfloat16 *)v, ref, drows, c.b, c.h, c.hkv,
            c.m, c.n, c.d, scale, c.causal);
    }
    CHECK_RT(cudaGetLastError());
    CHECK_RT(cudaDeviceSynchronize());
    std::vector<float> hr(rows.size() * c.d), ho(nq);
    CHECK_RT(cudaMemcpy(hr.data(), ref, hr.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_RT(cudaMemcpy(ho.data(), outf, nq * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    size_t mismatched = 0, nonfinite = 0;
    long long first_bad = -1;
    for (size_t i = 0; i < rows.size(); i++)
        for (int x = 0; x < c.d; x++) {
            float want = hr[i * c.d + x], got = ho[(size_t)rows[i] * c.d + x];
            bool wf = std::isfinite(want), gf = std::isfinite(got);
            if (!wf)
                nonfinite++;
            if (wf != gf || (!wf && (std::isnan(want) != std::isnan(got) ||
                                     (!std::isnan(want) && want != got)))) {
                if (mismatched++ == 0)
                    first_bad = rows[i];
                continue;
            }
            if (wf) {
                num += (double)(got - want) * (got - want);
                den += (double)want * want;
            }
        }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    bool pass = mismatched == 0 && rel < 1e-2;

    double ms = 0;
    if (c.timed)
        ms = check_time_ms([&] { fn<<<grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p); });
    /* The variants (no ping-pong; Q read from shared memory by every S), for
     * the bf16 -> bf16 timed cases. */
    double ms_nopp = 0, ms_qsmem = 0, ms_rings = 0, ms_unsplit = 0;
    if (c.timed && c.splits)
        ms_unsplit = check_time_ms(
            [&] { unsplit<<<unsplit_grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p); });
    if (c.timed && !c.splits && !c.f16_in && c.out_kind == 1) {
        attn_fn alt = c.d == 128 ? check_no_pingpong_d128 : check_no_pingpong_d64;
        CHECK_RT(cudaFuncSetAttribute((const void *)alt,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        ms_nopp = check_time_ms([&] { alt<<<grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p); });
        alt = c.d == 128 ? check_q_in_smem_d128 : check_q_in_smem_d64;
        CHECK_RT(cudaFuncSetAttribute((const void *)alt,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        ms_qsmem = check_time_ms([&] { alt<<<grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p); });
        alt = c.d == 128 ? check_equal_rings_d128 : check_equal_rings_d64;
        CHECK_RT(cudaFuncSetAttribute((const void *)alt,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        ms_rings = check_time_ms([&] { alt<<<grid, TSR_ATTN_THREADS, smem>>>(mq, mk, mv, p); });
    }
    double flop = 4.0 * c.b * c.h * (double)c.m * c.n * c.d;
    if (c.causal && c.m == c.n)
        flop /= 2;
    printf("%-30s B%-3d H%-3d Hkv%-3d M%-5d N%-5d D%-3d %s%s rows %zu rel %.3e nonfinite %zu "
           "mismatched %zu (first row %lld) %s",
           c.name, c.b, c.h, c.hkv, c.m, c.n, c.d, c.causal ? "causal " : "",
           c.f16_in ? "f16" : "bf16", rows.size(), rel, nonfinite, mismatched, first_bad,
           pass ? "PASS" : "FAIL");
    if (c.timed)
        printf("  %.3f ms  %.1f TFLOP/s", ms, flop / (ms * 1e-3) / 1e12);
    if (ms_unsplit > 0)
        printf("  (unsplit %.3f ms)", ms_unsplit);
    if (ms_nopp > 0)
        printf("  (no ping-pong %.1f; Q in shared memory %.1f; equal K and V rings %.1f TFLOP/s)",
               flop / (ms_nopp * 1e-3) / 1e12, flop / (ms_qsmem * 1e-3) / 1e12,
               flop / (ms_rings * 1e-3) / 1e12);
    printf("\n");
    fflush(stdout);
    *ms_out = ms;
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(out);
    cudaFree(outf);
    cudaFree(ref);
    cudaFree(drows);
    return pass ? 0 : 1;
}

int main(int argc, char **argv)
{
    check_device_banner();
    /* name, b, h, hkv, m, n, d, causal, f16_in, out_kind, scale, zero_scale, poison,
     * poison_row, timed */
    const attn_case cases[] = {
        {"one_tile", 1, 2, 2, 128, 128, 128, 0, 0, 1, 0, 0, 0, 0, 0},
        {"ragged_d64", 2, 4, 4, 100, 77, 64, 0, 0, 1, 0, 0, 0, 0, 0},
        {"causal_q_gt_k_gqa4", 2, 4, 1, 300, 77, 64, 1, 0, 1, 0, 0, 0, 0, 0},
        {"causal_q_lt_k_gqa8", 1, 8, 1, 77, 300, 128, 1, 0, 1, 0, 0, 0, 0, 0},
        {"causal_square_ragged", 2, 4, 2, 1000, 1000, 128, 1, 0, 0, 0, 0, 0, 0, 0},
        {"f16_in_f32_out", 1, 4, 4, 513, 700, 128, 0, 1, 0, 0, 0, 0, 0, 0},
        {"f16_out", 1, 4, 4, 256, 256, 64, 1, 1, 2, 0, 0, 0, 0, 0},
        {"bf16_in_f16_out", 1, 2, 2, 130, 130, 128, 0, 0, 2, 0, 0, 0, 0, 0},
        {"decode_gqa4", 2, 32, 8, 1, 2000, 128, 0, 0, 1, 0, 0, 0, 0, 0},
        {"decode_causal_m5", 2, 8, 2, 5, 1000, 128, 1, 0, 1, 0, 0, 0, 0, 0},
        {"negative_scale", 1, 2, 2, 200, 200, 64, 1, 0, 0, -0.3f, 0, 0, 0, 0},
        {"zero_scale", 1, 2, 2, 200, 200, 64, 1, 0, 0, 0, 1, 0, 0, 0},
        {"nan_q_row", 1, 2, 2, 256, 256, 128, 1, 0, 0, 0, 0, 1, 37, 0},
        {"nan_k_row", 1, 2, 2, 256, 256, 128, 1, 0, 0, 0, 0, 2, 100, 0},
        {"nan_v_row_masked_above", 1, 2, 2, 256, 256, 128, 1, 0, 0, 0, 0, 3, 100, 0},
        {"inf_v_row_masked_above", 1, 2, 2, 256, 256, 64, 1, 0, 1, 0, 0, 4, 200, 0},
        {"nan_v_row_plain", 1, 2, 2, 200, 300, 128, 0, 0, 0, 0, 0, 3, 5, 0},
        {"prefill_b4h32s4096", 4, 32, 32, 4096, 4096, 128, 0, 0, 1, 0, 0, 0, 0, 1},
        {"prefill_causal_gqa8", 4, 32, 8, 4096, 4096, 128, 1, 0, 1, 0, 0, 0, 0, 1},
        {"prefill_d64", 4, 32, 32, 4096, 4096, 64, 0, 0, 1, 0, 0, 0, 0, 1},
        {"prefill_causal_d64", 4, 32, 32, 4096, 4096, 64, 1, 0, 1, 0, 0, 0, 0, 1},
        {"decode_b32h32kv8_8192", 32, 32, 8, 1, 8192, 128, 0, 0, 1, 0, 0, 0, 0, 1},
        /* Split keys (name, ..., timed, splits). */
        {"split8_decode_b1h32kv8_8192", 1, 32, 8, 1, 8192, 128, 0, 0, 1, 0, 0, 0, 0, 1, 8},
        {"split4_decode_b4h32kv8_8192", 4, 32, 8, 1, 8192, 128, 0, 0, 1, 0, 0, 0, 0, 1, 4},
        {"split8_decode_d64_f16", 1, 16, 4, 1, 4096, 64, 0, 1, 2, 0, 0, 0, 0, 1, 8},
        {"split8_causal_m5_ragged", 2, 8, 2, 5, 1000, 128, 1, 0, 1, 0, 0, 0, 0, 0, 8},
        {"split8_empty_shares", 1, 8, 8, 3, 300, 128, 1, 0, 1, 0, 0, 0, 0, 0, 8},
        {"split4_causal_q_gt_k", 1, 4, 1, 300, 77, 64, 1, 1, 2, 0, 0, 0, 0, 0, 4},
        {"split4_nan_v_masked_for_some", 1, 2, 2, 64, 700, 128, 1, 0, 1, 0, 0, 3, 650, 0, 4},
        {"split4_inf_v_masked_for_some", 1, 2, 2, 64, 700, 64, 1, 1, 2, 0, 0, 4, 1350, 0, 4},
        {"split8_nan_q_row", 1, 8, 2, 1, 3000, 128, 0, 0, 1, 0, 0, 1, 3, 0, 8},
        {"split8_nan_k_row", 1, 8, 2, 1, 3000, 64, 0, 0, 1, 0, 0, 2, 2500, 0, 8},
        {"split8_negative_scale", 1, 4, 4, 2, 2000, 128, 0, 0, 1, -0.3f, 0, 0, 0, 0, 8},
    };
    const int n_cases = sizeof cases / sizeof cases[0];
    int only = check_only_case(argc, argv);
    int failed = check_cases(only, n_cases, [&](int i) {
        double ms;
        return run_case(cases[i], &ms) != 0;
    });
    printf("%d of %d cases failed\n", failed, only >= 0 ? 1 : n_cases);
    return failed ? 1 : 0;
}
