/*
 * gemm_common.cuh — device code shared by the tier-3 GEMM families
 * (gemm_sm90.cu, gemm_sm80.cu): the epilogue's activations with the op table's
 * exact semantics, the input loads, the paired output stores and the tile order.
 * One copy, so the two families cannot drift apart in what a fused region means.
 */
#ifndef TSR_GEMM_COMMON_CUH
#define TSR_GEMM_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

/* tsr_op numbers used by the epilogue (lib/include/tessera/ops.h). */
enum {
    GEMM_OP_RELU = 16,
    GEMM_OP_SIGMOID = 17,
    GEMM_OP_TANH = 18,
    GEMM_OP_SILU = 19,
    GEMM_OP_GELU = 22,
    GEMM_OP_BIAS = 25,
};

/* Shared-memory address of a generic pointer, for the PTX operands. */
__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Loads of the input dtype (bias, residual) widened to f32: one element, or
 * two adjacent ones in one 4-byte access. */
template <typename T> struct elem;
template <> struct elem<__nv_bfloat16> {
    static __device__ __forceinline__ float load(const void *p, size_t i)
    {
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    }
    static __device__ __forceinline__ float2 load_pair(const void *p, size_t i)
    {
        return __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162 *>(static_cast<const __nv_bfloat16 *>(p) + i));
    }
};
template <> struct elem<__half> {
    static __device__ __forceinline__ float load(const void *p, size_t i)
    {
        return __half2float(static_cast<const __half *>(p)[i]);
    }
    static __device__ __forceinline__ float2 load_pair(const void *p, size_t i)
    {
        return __half22float2(
            *reinterpret_cast<const __half2 *>(static_cast<const __half *>(p) + i));
    }
};

/* Stores a pair of adjacent outputs (col, col + 1), both in range. */
__device__ __forceinline__ void store_pair(float *out, size_t i, float a, float b)
{
    *reinterpret_cast<float2 *>(out + i) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16 *out, size_t i, float a, float b)
{
    *reinterpret_cast<__nv_bfloat162 *>(out + i) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half *out, size_t i, float a, float b)
{
    *reinterpret_cast<__half2 *>(out + i) = __floats2half2_rn(a, b);
}

/* The op table's sigmoid: e / (1 + e) below 0 keeps the tiny results that
 * 1 / (1 + inf) would flush to 0. One exp of -|x| and one quotient serve both
 * signs, so a warp of mixed signs does not take a branch both ways. The
 * quotient is a product with the correctly rounded reciprocal of 1 + e (in
 * [1, 2]): an IEEE division takes a slow path whenever e is subnormal, that
 * is for every x below about -87, which made silu several times slower on
 * such values; the product is within one more rounding. */
__device__ __forceinline__ float sigmoid(float x)
{
    const float e = expf(-fabsf(x));
    return (x < 0.0f ? e : 1.0f) * __frcp_rn(1.0f + e);
}

/* Activations with the op table's semantics: NaN propagates (no bare fmaxf). */
__device__ __forceinline__ float act_apply(int op, float x)
{
    switch (op) {
    case GEMM_OP_RELU:
        return x > 0.0f ? x : (x != x ? x : 0.0f);
    case GEMM_OP_SIGMOID:
        return sigmoid(x);
    case GEMM_OP_TANH:
        return tanhf(x);
    case GEMM_OP_SILU:
        return x * sigmoid(x);
    case GEMM_OP_GELU: {
        float t = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        t = t > 30.0f ? 30.0f : (t < -30.0f ? -30.0f : t);
        return 0.5f * x * (1.0f + tanhf(t));
    }
    default:
        return x;
    }
}

/* Each family of entry points has one kernel per (input, output) pair,
 * prefix_<in>_<out>suffix, e.g. tsr_gemm_bf16_f32_pp; entry(name, tin, tout)
 * defines one. */
/* clang-format off */
#define TSR_GEMM_FAMILY(entry, prefix, suffix)                                                     \
    entry(prefix##_bf16_f32##suffix, __nv_bfloat16, float)                                         \
    entry(prefix##_bf16_bf16##suffix, __nv_bfloat16, __nv_bfloat16)                                \
    entry(prefix##_bf16_f16##suffix, __nv_bfloat16, __half)                                        \
    entry(prefix##_f16_f32##suffix, __half, float)                                                 \
    entry(prefix##_f16_bf16##suffix, __half, __nv_bfloat16)                                        \
    entry(prefix##_f16_f16##suffix, __half, __half)
/* clang-format on */

/* Tile order: groups of M-tiles walk N together, so the B tiles in use stay in
 * L2: 16 M-tiles when there are 32 or more (a wave of 132 tiles then spans
 * about 8 N-tiles, half the B of groups of 8), else 8. Measured on the H200
 * (gemm_check, three interleaved runs): at 8192 x 14336 x 4096 the fused
 * ping-pong product 3% faster and the plain one 1% than with groups of 8,
 * 8192^3, 4096^3 and the gated product the same within 0.5%.
 * TSR_GEMM_TILE_GROUP fixes the size (for such comparisons). */
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int &tm, int &tn)
{
#ifdef TSR_GEMM_TILE_GROUP
    const int group = TSR_GEMM_TILE_GROUP;
#else
    const int group = tiles_m >= 32 ? 16 : 8;
#endif
    int per_group = group * tiles_n;
    int first_m = (tile / per_group) * group;
    int rows = min(tiles_m - first_m, group);
    tm = first_m + (tile % per_group) % rows;
    tn = (tile % per_group) / rows;
}

#endif
