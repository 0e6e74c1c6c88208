/*
 * gemm_sm90.cu — tier-3 tensor-core GEMM family for Hopper (sm_90a).
 *
 * C = epilogue(A @ B) for bf16 or f16 inputs with f32 accumulation, and the gated
 * form O = act(A @ Wg) * (A @ Wu) that shares each A tile between both products.
 *
 * Design (docs/kernels.md has the long form):
 *  - One CTA computes a 128 x 256 tile (gated: 128 x 128 of both products) with
 *    three warpgroups: warpgroup 0 produces, 1 and 2 consume 64 rows each.
 *  - The producer's single elected thread streams 64-deep K slices of A and B
 *    through a 4-stage shared-memory ring with the tensor-memory accelerator
 *    (cp.async.bulk.tensor, 128-byte swizzle), completing on "full" mbarriers;
 *    consumers release a stage through its "empty" mbarrier.
 *  - Consumers issue wgmma.m64n256k16 (gated: two m64n128k16) straight from
 *    shared memory: A K-major, B MN-major (row-major (K,N) is N-contiguous, so
 *    the transpose bit of B is set). Accumulators stay in registers (128 f32 per
 *    thread); setmaxnreg moves registers from the producer to the consumers.
 *  - The epilogue applies bias / activations / residual in f32 and stores the
 *    output dtype with predicated stores, so ragged M and N need no padding;
 *    ragged K is zero-filled by the tensor-map loads.
 *  - Products with an epilogue take the ping-pong kernels (_pp) instead: each
 *    consumer owns a whole 64 x 256 tile and the two alternate tiles, so one's
 *    epilogue overlaps the other's products (gemm_pingpong_body). Products
 *    without one keep the cooperative kernel above, whose main loop is faster.
 *  - Products of at most 64 rows (a decode step), gated ones too, take the
 *    small-M kernels (gemm_small_body): the transposed product with the K
 *    dimension split over a cluster, whose CTAs add their partial tiles
 *    through distributed shared memory.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "gemm_params.h"
#include "gemm_common.cuh"
#include "sm90_common.cuh"

namespace
{

constexpr int kBM = TSR_GEMM_BM;
constexpr int kBK = TSR_GEMM_BK;
constexpr int kABytes = kBM * kBK * 2;     /* 16 KiB */
constexpr int kBBytesWide = kBK * 256 * 2; /* 32 KiB: 256 columns of B, or 2 x 128 */
constexpr int kChunkBytes = kBK * 64 * 2;  /* one 64 x 64 tensor-map box */
/* Per-warp epilogue scratch: 16 rows of 32 f32 columns. */
constexpr int kScratchStride = TSR_GEMM_SCRATCH_STRIDE; /* floats */
constexpr int kScratchFloats = 16 * kScratchStride;     /* one warp's 16 x 32 block */

/* ---- wgmma instructions ----
 *
 * wgmma.mma_async m64nNk16 with f32 accumulators: every thread of the
 * warpgroup holds N / 2 of them, and the instruction names each one. Inline asm
 * has no loops, so the preprocessor writes the register list ("%0, %1, ...")
 * and the matching "+f"(d[i]) operands; the two descriptors follow as operands
 * N / 2 and N / 2 + 1. The trailing immediates: accumulate (scale-d 1), A and B
 * not negated, A K-major, B MN-major (the transpose bit). */

/* clang-format off */
#define WGMMA_N16_DESCS "%8, %9"
#define WGMMA_N32_DESCS "%16, %17"
#define WGMMA_N64_DESCS "%32, %33"
#define WGMMA_N128_DESCS "%64, %65"
#define WGMMA_N256_DESCS "%128, %129"

/* The whole asm text for N columns of PTX input type ab (scale-d p is true);
 * trans: the transpose immediates of A and B. */
#define WGMMA_ASM_FORM(n, ab, trans)                                                               \
    "{\n"                                                                                          \
    ".reg .pred p;\n"                                                                              \
    "setp.ne.b32 p, 1, 0;\n"                                                                       \
    "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." ab "." ab " "                                \
    "{" WGMMA_N##n##_REGS "}, " WGMMA_N##n##_DESCS ", p, 1, 1, " trans ";\n"                       \
    "}\n"
/* A K-major, B MN-major (the transpose bit on B). */
#define WGMMA_ASM(n, ab) WGMMA_ASM_FORM(n, ab, "0, 1")
/* A MN-major and B K-major (the transpose bit on A): the small-M kernels'
 * transposed product, whose A operand is a tile of B and whose B operand is a
 * tile of A. */
#define WGMMA_T_ASM(n, ab) WGMMA_ASM_FORM(n, ab, "1, 0")
/* clang-format on */

/* One specialization of fn<n, type> issuing form's asm. */
#define DEFINE_WGMMA_FORM(fn, form, n, type, ab)                                                   \
    template <>                                                                                    \
    __device__ __forceinline__ void fn<n, type>(float *d, uint64_t desc_a, uint64_t desc_b)        \
    {                                                                                              \
        asm volatile(form(n, ab) : WGMMA_N##n##_ACC : "l"(desc_a), "l"(desc_b));                   \
    }

/* def(n, type, PTX type) for both input types. */
#define WGMMA_FOR_TYPES(def, n) def(n, __nv_bfloat16, "bf16") def(n, __half, "f16")

/* d += A (64 x 16, from desc_a) @ B (16 x N, from desc_b) for input type T. */
template <int N, typename T>
__device__ __forceinline__ void wgmma(float *d, uint64_t desc_a, uint64_t desc_b);
#define DEFINE_WGMMA(n, type, ab) DEFINE_WGMMA_FORM(wgmma, WGMMA_ASM, n, type, ab)

WGMMA_FOR_TYPES(DEFINE_WGMMA, 256)
WGMMA_FOR_TYPES(DEFINE_WGMMA, 128)

/* The transposed forms: A MN-major, B K-major. */
template <int N, typename T>
__device__ __forceinline__ void wgmma_t(float *d, uint64_t desc_a, uint64_t desc_b);
#define DEFINE_WGMMA_T(n, type, ab) DEFINE_WGMMA_FORM(wgmma_t, WGMMA_T_ASM, n, type, ab)

WGMMA_FOR_TYPES(DEFINE_WGMMA_T, 16)
WGMMA_FOR_TYPES(DEFINE_WGMMA_T, 32)
WGMMA_FOR_TYPES(DEFINE_WGMMA_T, 64)

/* The residual's and the output's accesses, optionally marked streaming
 * (evict first): their lines are touched once, while other CTAs still read the
 * A and B tiles from L2. Measured within 1% of plain accesses on the H200. */
template <typename TIn, bool Stream>
__device__ __forceinline__ float2 residual_pair(const void *p, size_t i)
{
    if (!Stream)
        return elem<TIn>::load_pair(p, i);
    const unsigned bits =
        __ldcs(reinterpret_cast<const unsigned *>(static_cast<const TIn *>(p) + i));
    TIn two[2];
    memcpy(two, &bits, 4);
    return make_float2(static_cast<float>(two[0]), static_cast<float>(two[1]));
}
template <bool Stream, typename TOut>
__device__ __forceinline__ void output_pair(TOut *out, size_t i, float a, float b)
{
    if (!Stream) {
        store_pair(out, i, a, b);
    } else if (sizeof(TOut) == 4) {
        __stcs(reinterpret_cast<float2 *>(out + i), make_float2(a, b));
    } else {
        TOut two[2] = {static_cast<TOut>(a), static_cast<TOut>(b)};
        unsigned bits;
        memcpy(&bits, two, 4);
        __stcs(reinterpret_cast<unsigned *>(out + i), bits);
    }
}

/* Applies one epilogue op to n values. The switch sits outside the loops, so
 * each case is one unrolled loop of independent values the scheduler can
 * interleave (a switch per value left one dependent chain at a time). */
template <int N> __device__ __forceinline__ void act_apply_all(int op, float *v)
{
    switch (op) {
    case GEMM_OP_GELU:
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = act_apply(GEMM_OP_GELU, v[i]);
        break;
    case GEMM_OP_SILU:
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = act_apply(GEMM_OP_SILU, v[i]);
        break;
    case GEMM_OP_RELU:
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = act_apply(GEMM_OP_RELU, v[i]);
        break;
    default:
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] = act_apply(op, v[i]);
        break;
    }
}

/* The epilogue of one warp's 16 rows (row0 ..) of a tile, from the wgmma
 * accumulators acc: register 4j + r holds row lane / 4 (+ 8 when r >= 2) and
 * column col0 + 8j + 2 * (lane % 4) (+ 1 when r is odd); gated, acc + 64 holds
 * the up products in the same layout. Pass by pass, 32 columns (gated: 16 of
 * both products) go through the warp's scratch, so that each lane then owns
 * two adjacent columns of two-row steps and the stores are row-contiguous.
 * The residual and bias of the next pass are loaded before this pass's
 * arithmetic, so their latency hides behind it. */
template <typename TIn, typename TOut, bool Gated, int Passes, bool Stream = false,
          bool Plain = false>
__device__ __forceinline__ void epilogue_warp(const tsr_gemm_params &p, const float *acc,
                                              float *scratch, int row0, int col0)
{
    constexpr int cols = Gated ? 16 : 32;
    constexpr int lanes_per_row = cols / 2;
    constexpr int rows_per_step = 32 / lanes_per_row;
    constexpr int steps = 16 / rows_per_step;
    constexpr int js = Gated ? 2 : 4; /* accumulator column groups per pass */
    const int lane = threadIdx.x % 32;
    const int sub_row = lane / lanes_per_row;
    const int c = 2 * (lane % lanes_per_row);
    const int fr = lane / 4, fc = 2 * (lane % 4);
    /* Plain: the accumulators hold the finished values (the row kernels
     * apply the ops in registers); only the transposition and the stores. */
    const bool has_res = !Plain && p.residual != nullptr;
    const bool has_bias = !Plain && !Gated && p.bias != nullptr;
    float2 res_next[steps], bias_next = make_float2(0.0f, 0.0f);
    auto load_inputs = [&](int pass) {
        const int col = col0 + pass * cols + c;
#pragma unroll
        for (int i = 0; i < steps; i++) {
            const int row = row0 + sub_row + i * rows_per_step;
            res_next[i] = make_float2(0.0f, 0.0f);
            if (has_res && row < p.m && col < p.n)
                res_next[i] =
                    residual_pair<TIn, Stream>(p.residual, static_cast<size_t>(row) * p.n + col);
        }
        if (has_bias && col < p.n)
            bias_next = elem<TIn>::load_pair(p.bias, col);
    };
    load_inputs(0);
    TOut *out = static_cast<TOut *>(p.out);
#pragma unroll
    for (int pass = 0; pass < Passes; pass++) {
#pragma unroll
        for (int jj = 0; jj < js; jj++) {
            const int j = pass * js + jj;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float *at = scratch + (fr + 8 * h) * kScratchStride + 8 * jj + fc;
                *reinterpret_cast<float2 *>(at) =
                    make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                if (Gated)
                    *reinterpret_cast<float2 *>(at + 16) =
                        make_float2(acc[64 + 4 * j + 2 * h], acc[64 + 4 * j + 2 * h + 1]);
            }
        }
        float2 res[steps];
#pragma unroll
        for (int i = 0; i < steps; i++)
            res[i] = res_next[i];
        const float2 bias = bias_next;
        if (pass + 1 < Passes)
            load_inputs(pass + 1);
        __syncwarp();
        float v[2 * steps];
#pragma unroll
        for (int i = 0; i < steps; i++) {
            const float2 x = *reinterpret_cast<const float2 *>(
                scratch + (sub_row + i * rows_per_step) * kScratchStride + c);
            v[2 * i] = x.x;
            v[2 * i + 1] = x.y;
        }
        if (Gated) {
            float u[2 * steps];
#pragma unroll
            for (int i = 0; i < steps; i++) {
                const float2 x = *reinterpret_cast<const float2 *>(
                    scratch + (sub_row + i * rows_per_step) * kScratchStride + 16 + c);
                u[2 * i] = x.x;
                u[2 * i + 1] = x.y;
            }
            act_apply_all<2 * steps>(p.gate_act, v);
#pragma unroll
            for (int i = 0; i < 2 * steps; i++)
                v[i] *= u[i];
        } else if (!Plain) {
            for (int o = 0; o < p.n_ops; o++) {
                const int op = p.ops[o];
                if (op == GEMM_OP_BIAS) {
#pragma unroll
                    for (int i = 0; i < steps; i++) {
                        v[2 * i] += bias.x;
                        v[2 * i + 1] += bias.y;
                    }
                } else {
                    act_apply_all<2 * steps>(op, v);
                }
            }
#pragma unroll
            for (int i = 0; i < steps; i++) {
                v[2 * i] += res[i].x;
                v[2 * i + 1] += res[i].y;
            }
        }
        const int col = col0 + pass * cols + c;
        if (col < p.n) {
#pragma unroll
            for (int i = 0; i < steps; i++) {
                const int row = row0 + sub_row + i * rows_per_step;
                if (row < p.m)
                    output_pair<Stream>(out, static_cast<size_t>(row) * p.n + col, v[2 * i],
                                        v[2 * i + 1]);
            }
        }
        __syncwarp();
    }
}

__device__ __forceinline__ void prefetch_l2(const void *addr)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(addr));
}

/* Prefetches a TM x TN tile's residual (128-byte lines, TN / 64 per tile row,
 * spread over Threads threads, of which this is t) and its TN bias values into
 * L2. */
template <typename TIn, int TM, int TN, int Threads>
__device__ __forceinline__ void tile_prefetch(const tsr_gemm_params &p, int m0, int n0, int t)
{
    constexpr int per_row = TN / 64;
    if (p.residual != nullptr) {
#pragma unroll
        for (int line = t; line < TM * per_row; line += Threads) {
            const int row = m0 + line / per_row, col = n0 + (line % per_row) * 64;
            if (row < p.m && col < p.n)
                prefetch_l2(static_cast<const TIn *>(p.residual) + static_cast<size_t>(row) * p.n +
                            col);
        }
    }
    if (p.bias != nullptr && t < per_row && n0 + 64 * t < p.n)
        prefetch_l2(static_cast<const TIn *>(p.bias) + n0 + 64 * t);
}

/* ---- the stage ring ----
 *
 * Both kernel designs stream A and B through a ring of Stages stages in
 * shared memory: full[s] completes when stage s's loads have landed, empty[s]
 * once its consumers are done with it. The producer (thread 0 of warpgroup 0)
 * walks the CTA's tiles blockIdx.x, + gridDim.x, ... and fills the ring with
 * every tile's K slices in that order; the consumers keep one slice's products
 * in flight. */

/* Thread 0 initialises the barriers; empty[s] takes one arrival per consumer
 * warpgroup that reads the stage. */
template <int Stages>
__device__ __forceinline__ void ring_init(uint64_t *full, uint64_t *empty, unsigned consumers)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < Stages; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], consumers);
        }
        mbar_init_fence();
    }
    __syncthreads();
}

/* One tile's K slices into the ring, from ring position *it on: for each
 * slice kt, A's TM x kBK box at (m0, kt), then B's TN / 64 boxes of 64 columns
 * from n0 (gated: 128 columns of B and of B2). */
template <int Stages, int ABytes, int BBytes, int TN, bool Gated>
__device__ __forceinline__ void
ring_load_tile(const CUtensorMap *map_a, const CUtensorMap *map_b, const CUtensorMap *map_b2,
               unsigned char *smem_a, unsigned char *smem_b, uint64_t *full, uint64_t *empty,
               int m0, int n0, int k_tiles, int &it)
{
    for (int kt = 0; kt < k_tiles; kt++, it++) {
        const int s = it % Stages;
        mbar_wait(&empty[s], ((it / Stages) & 1) ^ 1);
        mbar_expect_tx(&full[s], ABytes + BBytes);
        tma_load_2d(smem_a + s * ABytes, map_a, &full[s], kt * kBK, m0);
        unsigned char *b = smem_b + s * BBytes;
        if (Gated) {
            tma_load_2d(b, map_b, &full[s], n0, kt * kBK);
            tma_load_2d(b + kChunkBytes, map_b, &full[s], n0 + 64, kt * kBK);
            tma_load_2d(b + 2 * kChunkBytes, map_b2, &full[s], n0, kt * kBK);
            tma_load_2d(b + 3 * kChunkBytes, map_b2, &full[s], n0 + 64, kt * kBK);
        } else {
#pragma unroll
            for (int c = 0; c < TN / 64; c++)
                tma_load_2d(b + c * kChunkBytes, map_b, &full[s], n0 + 64 * c, kt * kBK);
        }
    }
}

/* The producer warpgroup: gives its registers up, and its thread 0 walks the
 * tiles, loading each tile at (m0, n0) (ring_load_tile). */
template <int Stages, int TM, int TN, int ABytes, int BBytes, bool Gated>
__device__ __forceinline__ void ring_produce(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                             const CUtensorMap *map_b2, unsigned char *smem_a,
                                             unsigned char *smem_b, uint64_t *full, uint64_t *empty,
                                             int tiles_m, int tiles_n, int k_tiles)
{
    regs_shrink<40>();
    if (threadIdx.x != 0)
        return;
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        ring_load_tile<Stages, ABytes, BBytes, TN, Gated>(
            map_a, map_b, map_b2, smem_a, smem_b, full, empty, tm * TM, tn * TN, k_tiles, it);
    }
}

/* A consumer, once the products of K slice kt (ring position it) are issued:
 * keeps them in flight, retires the previous slice's and hands its stage back
 * to the producer. */
template <int Stages>
__device__ __forceinline__ void ring_retire_previous(uint64_t *empty, int it, int kt)
{
    wgmma_commit();
    wgmma_wait<1>();
    if (kt > 0 && threadIdx.x % 128 == 0)
        mbar_arrive(&empty[(it - 1) % Stages]);
}

/* A consumer, after a tile's last slice (ring position it - 1): retires its
 * products and hands its stage back. */
template <int Stages> __device__ __forceinline__ void ring_retire_last(uint64_t *empty, int it)
{
    wgmma_wait<0>();
    if (threadIdx.x % 128 == 0)
        mbar_arrive(&empty[(it - 1) % Stages]);
}

/* BN: the tile width, 256 for the plain kernels (64 for the narrow design
 * that gemm_check times beside the small-M kernels). Stages: the ring's
 * depth. */
template <typename TIn, typename TOut, bool Gated, int PrefetchAhead = 4, int BN = TSR_GEMM_BN,
          int Stages = TSR_GEMM_STAGES>
__device__ __forceinline__ void gemm_body(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                          const CUtensorMap *map_b2, const tsr_gemm_params &p)
{
    static_assert(!Gated || BN == TSR_GEMM_BN, "the gated kernels have one tile shape");
    constexpr int kStages = Stages;
    constexpr int kBBytes = Gated ? kBBytesWide : kBK * BN * 2;
    unsigned char *smem_a = smem_aligned();
    unsigned char *smem_b = smem_a + kStages * kABytes;
    float *scratch_all = reinterpret_cast<float *>(smem_b + kStages * kBBytes);
    uint64_t *full = reinterpret_cast<uint64_t *>(scratch_all + 8 * kScratchFloats);
    uint64_t *empty = full + kStages;

    constexpr int bn = Gated ? TSR_GEMM_BN_GATED : BN;
    const int tiles_m = (p.m + kBM - 1) / kBM;
    const int tiles_n = (p.n + bn - 1) / bn;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (p.k + kBK - 1) / kBK;
    const int warpgroup = threadIdx.x / 128;

    /* Both consumers read every stage. The ring runs on across tiles, so the
     * producer fills the next tile's stages while the consumers are still
     * storing the last one. */
    ring_init<kStages>(full, empty, 2);
    if (warpgroup == 0) {
        ring_produce<kStages, kBM, bn, kABytes, kBBytes, Gated>(
            map_a, map_b, map_b2, smem_a, smem_b, full, empty, tiles_m, tiles_n, k_tiles);
        return;
    }

    regs_grow<232>();
    const int consumer = warpgroup - 1; /* rows 64 * consumer .. + 63 of each tile */
    const int warp = (threadIdx.x % 128) / 32;
    float *scratch = scratch_all + (consumer * 4 + warp) * kScratchFloats;
    constexpr int kAcc = Gated ? 128 : BN / 2; /* accumulators per thread */
    float acc[kAcc];
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * kBM, n0 = tn * bn;
#pragma unroll
        for (int i = 0; i < kAcc; i++)
            acc[i] = 0.0f;
        if (!Gated && p.residual != nullptr) {
            /* Pull this tile's residual into L2 now, so that the epilogue's
             * loads, which the tensor cores wait for, hit it. 128-byte lines:
             * four per tile row, two per consumer thread. */
            const int t = threadIdx.x - 128;
#pragma unroll
            for (int l = 0; l < 2; l++) {
                const int line = 2 * t + l;
                const int row = m0 + line / 4, col = n0 + (line % 4) * 64;
                if (row < p.m && col < p.n)
                    prefetch_l2(static_cast<const TIn *>(p.residual) +
                                static_cast<size_t>(row) * p.n + col);
            }
        }
        for (int kt = 0; kt < k_tiles; kt++, it++) {
            /* A few K slices before the end, pull the epilogue's residual
             * and bias into L2: issued at the tile's start they were evicted
             * by the A and B streams before the epilogue read them, and the
             * tensor cores wait for those reads. */
            if (!Gated && kt == (k_tiles > PrefetchAhead ? k_tiles - PrefetchAhead : 0))
                tile_prefetch<TIn, kBM, BN, 256>(p, m0, n0, threadIdx.x - 128);
            int s = it % kStages;
            mbar_wait(&full[s], (it / kStages) & 1);
            uint32_t a_base = smem_addr(smem_a + s * kABytes) + consumer * 64 * 128;
            uint32_t b_base = smem_addr(smem_b + s * kBBytes);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 16; kk++) {
                uint64_t da = smem_desc(a_base + kk * 32, 16, 1024);
                if (Gated) {
                    wgmma<128, TIn>(acc, da, smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo));
                    wgmma<128, TIn>(
                        acc + 64, da,
                        smem_desc(b_base + 2 * kChunkBytes + kk * 2048, p.b_lbo, p.b_sbo));
                } else {
                    wgmma<BN, TIn>(acc, da, smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo));
                }
            }
            ring_retire_previous<kStages>(empty, it, kt);
        }
        ring_retire_last<kStages>(empty, it);

        /* Epilogue, each warp through its own scratch. */
        constexpr int passes = Gated ? 8 : BN / 32;
        epilogue_warp<TIn, TOut, Gated, passes>(p, acc, scratch, m0 + consumer * 64 + warp * 16,
                                                n0);
    }
}

/* The kernels with an epilogue for more than TSR_GEMM_NARROW_M rows:
 * ping-pong. The CTA walks its tiles blockIdx.x, + gridDim.x, ... in the
 * grouped order; the producer streams every tile's K slices through one ring
 * in that order, and consumer warpgroup c takes the CTA's tiles c, c + 2, ...,
 * each a whole tile: 64 x 256 for the entry points (one wgmma.m64n256k16 per
 * K step), 128 x 128 as measured beside it (two m64n128k16); 128 accumulators
 * per thread either way. A consumer starts a tile's products only once the other has
 * issued its previous tile's (named barriers 1 and 2), so each one's epilogue
 * runs while the other's products occupy the tensor cores. That order is also
 * what makes the ring's parity waits sound: a consumer never waits on a stage
 * more than one phase ahead of the last one completed. */
template <typename TIn, typename TOut, int TM = TSR_GEMM_BM_PINGPONG, int TN = TSR_GEMM_BN_PINGPONG,
          int Stages = TSR_GEMM_STAGES_PINGPONG, bool Stream = true, int PrefetchAhead = 4>
__device__ __forceinline__ void
gemm_pingpong_body(const CUtensorMap *map_a, const CUtensorMap *map_b, const tsr_gemm_params &p)
{
    /* 128 x 128 (two wgmma.m64n128k16 per K step) or 64 x 256 (one m64n256k16);
     * either way 128 accumulators per thread. A's tensor map has TM-row boxes. */
    static_assert((TM == 128 && TN == 128) || (TM == 64 && TN == 256), "tile shape");
    constexpr int kStages = Stages;
    constexpr int bn = TN;
    constexpr int kTileABytes = TM * kBK * 2;
    constexpr int kBBytes = kBK * bn * 2; /* TN / 64 boxes of 64 columns */
    unsigned char *smem_a = smem_aligned();
    unsigned char *smem_b = smem_a + kStages * kTileABytes;
    float *scratch_all = reinterpret_cast<float *>(smem_b + kStages * kBBytes);
    uint64_t *full = reinterpret_cast<uint64_t *>(scratch_all + 8 * kScratchFloats);
    uint64_t *empty = full + kStages;

    const int tiles_m = (p.m + TM - 1) / TM;
    const int tiles_n = (p.n + bn - 1) / bn;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (p.k + kBK - 1) / kBK;
    const int warpgroup = threadIdx.x / 128;

    ring_init<kStages>(full, empty, 1); /* each stage has one consumer */
    if (warpgroup == 0) {
        ring_produce<kStages, TM, bn, kTileABytes, kBBytes, false>(
            map_a, map_b, nullptr, smem_a, smem_b, full, empty, tiles_m, tiles_n, k_tiles);
        return;
    }

    regs_grow<232>();
    const int consumer = warpgroup - 1;
    const int warp = (threadIdx.x % 128) / 32;
    float *scratch = scratch_all + (consumer * 4 + warp) * kScratchFloats;
    float acc[128]; /* [0, 64): rows 0-63 of the tile; [64, 128): rows 64-127 */
    int local = consumer;
    for (int tile = blockIdx.x + consumer * gridDim.x; tile < tiles;
         tile += 2 * gridDim.x, local += 2) {
        /* Wait for the other consumer to have issued the CTA's previous tile. */
        if (local > 0)
            consumers_wait(1 + consumer);
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * TM, n0 = tn * bn;
#pragma unroll
        for (int i = 0; i < 128; i++)
            acc[i] = 0.0f;
        /* The ring position of this tile's first slice: every tile has k_tiles. */
        int it = local * k_tiles;
        for (int kt = 0; kt < k_tiles; kt++, it++) {
            if (kt == (k_tiles > PrefetchAhead ? k_tiles - PrefetchAhead : 0))
                tile_prefetch<TIn, TM, TN, 128>(p, m0, n0, threadIdx.x % 128);
            const int s = it % kStages;
            mbar_wait(&full[s], (it / kStages) & 1);
            const uint32_t a_base = smem_addr(smem_a + s * kTileABytes);
            const uint32_t b_base = smem_addr(smem_b + s * kBBytes);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 16; kk++) {
                const uint64_t db = smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo);
                if (TM == 64) {
                    wgmma<256, TIn>(acc, smem_desc(a_base + kk * 32, 16, 1024), db);
                } else {
                    wgmma<128, TIn>(acc, smem_desc(a_base + kk * 32, 16, 1024), db);
                    wgmma<128, TIn>(acc + 64, smem_desc(a_base + 64 * 128 + kk * 32, 16, 1024), db);
                }
            }
            ring_retire_previous<kStages>(empty, it, kt);
        }
        /* Every slice of this tile is issued: the other consumer may start the
         * CTA's next tile, if there is one (an arrival nobody waits for would
         * be left on the barrier). */
        if (tile + gridDim.x < tiles)
            consumers_arrive(2 - consumer);
        ring_retire_last<kStages>(empty, it);

        /* Epilogue: warp w stores rows 16w .. 16w + 15 of each 64-row half. */
        epilogue_warp<TIn, TOut, false, bn / 32, Stream>(p, acc, scratch, m0 + warp * 16, n0);
        if (TM == 128)
            epilogue_warp<TIn, TOut, false, bn / 32, Stream>(p, acc + 64, scratch,
                                                             m0 + 64 + warp * 16, n0);
    }
}

/* ---- the row-reduction kernels (tsr_gemm_<in>_<out>_rows) ----
 *
 * A row's normalization needs the whole row, which spans many tiles. A
 * cluster of S CTAs owns one row block (64 rows); CTA rank r takes its 64 x
 * 256 tiles r, r + S, ..., its two consumers taking them in turn as in the
 * ping-pong kernels. A tile's epilogue applies the ops in registers, reduces
 * each row over the tile's columns to two numbers kept in shared memory
 * (rmsnorm: Σx²; layer_norm: the mean and Σ(x − mean)²; softmax: the max and
 * Σexp(x − max)), and stores each value relative to them (x / s,
 * (x − mean) / s with s the tile's root mean square or standard deviation;
 * exp(x − max)), so that what is stored stays within the output dtype's range
 * and keeps its precision. When every tile of the block is done, each CTA
 * combines the numbers of all the block's tiles per row (read from the
 * cluster's shared memory; layer_norm by the pairwise update of mean and
 * squared deviations) and rescales its own tiles in place: one multiply and
 * add per element, from L2. */

/* A tile's own scale s (above) from its sum of squares over count columns:
 * 1 where s is 0 or not finite. The store and the rescale compute it from
 * the same two numbers, so they agree to the bit. */
__device__ __forceinline__ float rows_tile_scale(float sum_sq, int count)
{
    const float s = sqrtf(sum_sq / static_cast<float>(count));
    return s > 0.0f && isfinite(s) ? s : 1.0f;
}

/* The larger, NaN winning: the reference's max, under which one NaN makes a
 * softmax row NaN. */
__device__ __forceinline__ float max_nan(float m, float x)
{
    return x > m || x != x ? x : m;
}

/* The four lanes that share a row of the accumulator layout (lane % 4). */
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x)
{
    x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* The ops on a consumer warp's 128 accumulators (layout: rows_tile_values),
 * in place: one bias pair per accumulator column group, each activation over
 * all 128 values (act_apply_all). */
template <typename TIn>
__device__ __forceinline__ void rows_apply_ops(const tsr_gemm_params &p, float *acc, int n0)
{
    const int cq = 2 * (threadIdx.x % 4);
    for (int o = 0; o < p.n_ops; o++) {
        const int op = p.ops[o];
        if (op == GEMM_OP_BIAS) {
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int col = n0 + 8 * j + cq;
                const float2 b =
                    col < p.n ? elem<TIn>::load_pair(p.bias, col) : make_float2(0.0f, 0.0f);
                acc[4 * j] += b.x;
                acc[4 * j + 1] += b.y;
                acc[4 * j + 2] += b.x;
                acc[4 * j + 3] += b.y;
            }
        } else {
            act_apply_all<128>(op, acc);
        }
    }
}

/* One consumer warp's 16 rows (row0 ..) of a 64 x 256 tile at column n0:
 * register 4j + 2h + e holds row lane / 4 + 8h, column n0 + 8j + 2 (lane % 4)
 * + e. Applies the ops, writes the rows' two numbers to stats[row - m0], and
 * leaves the values to store in acc. */
template <typename TIn>
__device__ __forceinline__ void rows_tile_values(const tsr_gemm_params &p, float *acc,
                                                 float2 *stats, int warp, int n0)
{
    const int lane = threadIdx.x % 32;
    rows_apply_ops<TIn>(p, acc, n0);
    /* N is a multiple of 8: a group of 8 columns is all in or all out. */
    const int count = min(TSR_GEMM_BN_PINGPONG, p.n - n0);
    float first[2], second[2];
    if (p.reduction == TSR_GEMM_REDUCE_RMSNORM) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++)
                if (8 * j < count)
                    ss += acc[4 * j + 2 * h] * acc[4 * j + 2 * h] +
                          acc[4 * j + 2 * h + 1] * acc[4 * j + 2 * h + 1];
            first[h] = quad_sum(ss);
            second[h] = 0.0f;
            const float inv = 1.0f / rows_tile_scale(first[h], count);
#pragma unroll
            for (int j = 0; j < 32; j++) {
                acc[4 * j + 2 * h] *= inv;
                acc[4 * j + 2 * h + 1] *= inv;
            }
        }
    } else if (p.reduction == TSR_GEMM_REDUCE_LAYER_NORM) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++)
                if (8 * j < count)
                    sum += acc[4 * j + 2 * h] + acc[4 * j + 2 * h + 1];
            const float mean = quad_sum(sum) / static_cast<float>(count);
            float m2 = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float d = acc[4 * j + 2 * h + e] - mean;
                    if (8 * j < count)
                        m2 += d * d;
                }
            first[h] = mean;
            second[h] = quad_sum(m2);
            const float inv = 1.0f / rows_tile_scale(second[h], count);
#pragma unroll
            for (int j = 0; j < 32; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    acc[4 * j + 2 * h + e] = (acc[4 * j + 2 * h + e] - mean) * inv;
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 32; j++)
                if (8 * j < count)
                    mx = max_nan(max_nan(mx, acc[4 * j + 2 * h]), acc[4 * j + 2 * h + 1]);
            mx = quad_max(mx);
            /* A tile whose row is all -inf (a masked stretch) stores zeros
             * with a sum of 0 (-inf - -inf would be NaN); the row's own max
             * decides later, as in the reference, whether the row is NaN. */
            const float shift = mx == -INFINITY ? 0.0f : mx;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 32; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    acc[4 * j + 2 * h + e] = expf(acc[4 * j + 2 * h + e] - shift);
                    if (8 * j < count)
                        sum += acc[4 * j + 2 * h + e];
                }
            first[h] = mx;
            second[h] = quad_sum(sum);
        }
    }
    if (lane % 4 == 0) {
        stats[16 * warp + lane / 4] = make_float2(first[0], second[0]);
        stats[16 * warp + lane / 4 + 8] = make_float2(first[1], second[1]);
    }
}

/* Row `row` of the block from every tile's two numbers (stats[t * 64 + row]
 * in the shared memory of the cluster's CTA t % splits): rmsnorm
 * (1 / sqrt(Σx² / N + eps), -); layer_norm (mean, 1 / sqrt(var + eps));
 * softmax (max, Σexp(x − max)). */
__device__ __forceinline__ float2 rows_combine(const tsr_gemm_params &p, const float2 *stats,
                                               int tiles_n, int splits, int row)
{
    constexpr int bm = TSR_GEMM_BM_PINGPONG, bn = TSR_GEMM_BN_PINGPONG;
    auto tile_stats = [&](int t) {
        const uint32_t at = cluster_addr(smem_addr(stats + t * bm + row), t % splits);
        return make_float2(cluster_load(at), cluster_load(at + 4));
    };
    if (p.reduction == TSR_GEMM_REDUCE_RMSNORM) {
        float ss = 0.0f;
        for (int t = 0; t < tiles_n; t++)
            ss += tile_stats(t).x;
        return make_float2(rsqrtf(ss / static_cast<float>(p.n) + p.eps), 0.0f);
    }
    if (p.reduction == TSR_GEMM_REDUCE_LAYER_NORM) {
        /* Tiles merged one at a time: (n_a, mean_a, M2_a) with (n_b, mean_b,
         * M2_b) gives mean_a + δ n_b / n and M2_a + M2_b + δ² n_a n_b / n,
         * δ = mean_b − mean_a: no cancellation of large sums. */
        float n_a = 0.0f, mean = 0.0f, m2 = 0.0f;
        for (int t = 0; t < tiles_n; t++) {
            const float n_b = static_cast<float>(min(bn, p.n - t * bn));
            const float2 s = tile_stats(t);
            const float n = n_a + n_b, delta = s.x - mean;
            mean += delta * (n_b / n);
            m2 += s.y + delta * delta * (n_a * n_b / n);
            n_a = n;
        }
        return make_float2(mean, rsqrtf(m2 / static_cast<float>(p.n) + p.eps));
    }
    float mx = -INFINITY;
    for (int t = 0; t < tiles_n; t++)
        mx = max_nan(mx, tile_stats(t).x);
    float sum = 0.0f;
    for (int t = 0; t < tiles_n; t++) {
        const float2 s = tile_stats(t);
        sum += s.y * expf(s.x - mx);
    }
    return make_float2(mx, sum);
}

/* 16 bytes of the output: loaded from L2 (the block's epilogue stored them),
 * y · g + h, stored streaming. */
template <typename TOut> __device__ __forceinline__ void rows_rescale16(TOut *at, float g, float h)
{
    constexpr int n = 16 / sizeof(TOut);
    uint4 raw = __ldcg(reinterpret_cast<const uint4 *>(at));
    TOut v[n];
    memcpy(v, &raw, 16);
#pragma unroll
    for (int i = 0; i < n; i++)
        v[i] = static_cast<TOut>(fmaf(static_cast<float>(v[i]), g, h));
    memcpy(&raw, v, 16);
    __stcs(reinterpret_cast<uint4 *>(at), raw);
}

/* The 256 consumer threads (t) rescale this CTA's tiles (rank, + splits,
 * ...) of the row block at m0 in 16-byte pieces, row-contiguous. */
template <typename TOut>
__device__ __forceinline__ void rows_rescale(const tsr_gemm_params &p, const float2 *stats,
                                             const float2 *row_scalars, int m0, int rank,
                                             int splits, int t)
{
    constexpr int bm = TSR_GEMM_BM_PINGPONG, bn = TSR_GEMM_BN_PINGPONG;
    constexpr int per = 16 / sizeof(TOut);
    const int rows = min(bm, p.m - m0);
    TOut *out = static_cast<TOut *>(p.out);
    for (int tile = rank; tile * bn < p.n; tile += splits) {
        const int count = min(bn, p.n - tile * bn); /* a multiple of 8 */
        const int pieces = count / per;
        for (int q = t; q < rows * pieces; q += 256) {
            const int row = q / pieces, col = tile * bn + (q % pieces) * per;
            const float2 s = stats[tile * bm + row], r = row_scalars[row];
            float g, h = 0.0f;
            if (p.reduction == TSR_GEMM_REDUCE_RMSNORM) {
                g = rows_tile_scale(s.x, count) * r.x;
            } else if (p.reduction == TSR_GEMM_REDUCE_LAYER_NORM) {
                g = rows_tile_scale(s.y, count) * r.y;
                h = (s.x - r.x) * r.y;
            } else {
                g = expf(s.x - r.x) / r.y;
            }
            rows_rescale16(out + static_cast<size_t>(m0 + row) * p.n + col, g, h);
        }
    }
}

template <typename TIn, typename TOut>
__device__ __forceinline__ void gemm_rows_body(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                               const tsr_gemm_params &p)
{
    constexpr int TM = TSR_GEMM_BM_PINGPONG, TN = TSR_GEMM_BN_PINGPONG;
    constexpr int kStages = TSR_GEMM_STAGES_ROWS;
    constexpr int kTileABytes = TM * kBK * 2;
    constexpr int kBBytes = kBK * TN * 2;
    unsigned char *smem_a = smem_aligned();
    unsigned char *smem_b = smem_a + kStages * kTileABytes;
    float *scratch_all = reinterpret_cast<float *>(smem_b + kStages * kBBytes);
    float2 *stats = reinterpret_cast<float2 *>(scratch_all + 8 * kScratchFloats);
    float2 *row_scalars = stats + TSR_GEMM_ROWS_MAX_TILES * TM;
    uint64_t *full = reinterpret_cast<uint64_t *>(row_scalars + TM);
    uint64_t *empty = full + kStages;

    const int splits = cluster_size();
    const int rank = cluster_rank();
    const int m0 = static_cast<int>(blockIdx.x) / splits * TM;
    const int tiles_n = (p.n + TN - 1) / TN;
    const int k_tiles = (p.k + kBK - 1) / kBK;
    /* This CTA's tiles: rank, rank + splits, ... */
    const int own = rank < tiles_n ? (tiles_n - 1 - rank) / splits + 1 : 0;
    const int warpgroup = threadIdx.x / 128;

    ring_init<kStages>(full, empty, 1); /* each stage has one consumer */
    if (warpgroup == 0) {
        regs_shrink<40>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int l = 0; l < own; l++)
                ring_load_tile<kStages, kTileABytes, kBBytes, TN, false>(
                    map_a, map_b, nullptr, smem_a, smem_b, full, empty, m0,
                    (rank + l * splits) * TN, k_tiles, it);
        }
        /* The consumers' two cluster barriers (below). */
        cluster_sync();
        cluster_sync();
        return;
    }

    regs_grow<232>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x - 128; /* 0 .. 255 */
    const int warp = (t % 128) / 32;
    float *scratch = scratch_all + (consumer * 4 + warp) * kScratchFloats;
    float acc[128];
    for (int l = consumer; l < own; l += 2) {
        /* Wait for the other consumer to have issued the CTA's previous tile. */
        if (l > 0)
            consumers_wait(1 + consumer);
        const int tn = rank + l * splits, n0 = tn * TN;
#pragma unroll
        for (int i = 0; i < 128; i++)
            acc[i] = 0.0f;
        int it = l * k_tiles;
        for (int kt = 0; kt < k_tiles; kt++, it++) {
            const int s = it % kStages;
            mbar_wait(&full[s], (it / kStages) & 1);
            const uint32_t a_base = smem_addr(smem_a + s * kTileABytes);
            const uint32_t b_base = smem_addr(smem_b + s * kBBytes);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBK / 16; kk++)
                wgmma<256, TIn>(acc, smem_desc(a_base + kk * 32, 16, 1024),
                                smem_desc(b_base + kk * 2048, p.b_lbo, p.b_sbo));
            ring_retire_previous<kStages>(empty, it, kt);
        }
        if (l + 1 < own)
            consumers_arrive(2 - consumer);
        ring_retire_last<kStages>(empty, it);
        rows_tile_values<TIn>(p, acc, stats + tn * TM, warp, n0);
        epilogue_warp<TIn, TOut, false, TN / 32, false, true>(p, acc, scratch, m0 + warp * 16, n0);
    }
    /* Every CTA's tiles stored and their numbers written; then the row
     * scalars from the whole cluster's numbers; after the second barrier no
     * CTA reads another's shared memory, and each rescales its own tiles. */
    cluster_sync();
    if (t < TM)
        row_scalars[t] = rows_combine(p, stats, tiles_n, splits, t);
    cluster_sync();
    rows_rescale<TOut>(p, stats, row_scalars, m0, rank, splits, t);
}

/* The kernels for at most TSR_GEMM_NARROW_M rows (gemm_params.h): the
 * transposed product Cᵀ = Bᵀ·Aᵀ of one TN-column tile (gated: TN columns of
 * both weights), with this CTA's share of the K slices (cluster rank r of S
 * takes slices [r·k/S, (r + 1)·k/S)). Consumer warpgroup c multiplies B's
 * columns (TN/2)·c .. (TN/2)·(c + 1) − 1 (TN / 128 m64nMWk16 per K step and
 * product, B's 64-column boxes as the MN-major A operand) by A's MW rows (the
 * K-major B operand). Then every CTA leaves its partial tiles in its own
 * shared memory (rows of A by columns of B, padded to TN + 4 floats so that a
 * warp's writes meet in no bank), the cluster synchronizes, and the CTAs add
 * the S partial tiles in rank order together, each taking every S-th block of
 * 256 (row, four columns) items, reading them through distributed shared
 * memory, and applying the epilogue to the sums; a last cluster barrier keeps
 * every CTA's shared memory alive until all have read it. */
template <typename TIn, typename TOut, int MW, int TN, bool Gated = false,
          int Stages = TSR_GEMM_STAGES_SMALL(MW, (Gated ? 2 : 1) * TN)>
__device__ __forceinline__ void gemm_small_body(const CUtensorMap *map_a, const CUtensorMap *map_b,
                                                const CUtensorMap *map_b2, const tsr_gemm_params &p)
{
    static_assert(MW == 16 || MW == 32 || MW == 64, "wgmma N of the small-M kernels");
    static_assert(TN == 128 || TN == 256, "one or two 64-column blocks per consumer");
    constexpr int kTN = TN;
    constexpr int kBlocks = TN / 128;        /* m64 blocks per consumer warpgroup and product */
    constexpr int kProducts = Gated ? 2 : 1; /* A·B, or A·Wg and A·Wu */
    constexpr int kStages = Stages;
    constexpr int kBBytes = kProducts * kBK * kTN * 2; /* TN / 64 boxes of 64 x 64 each */
    constexpr int kAStageBytes = MW * kBK * 2;         /* one 64 x MW box */
    constexpr int kStride = kTN + 4;                   /* floats per partial row */
    constexpr int kPartial = MW * kStride;             /* floats of one product's partial */
    static_assert(kProducts * kPartial * 4 <= kStages * kBBytes, "the partial tiles fit the ring");
    unsigned char *smem_b = smem_aligned();
    unsigned char *smem_a = smem_b + kStages * kBBytes;
    uint64_t *full = reinterpret_cast<uint64_t *>(smem_a + kStages * kAStageBytes);
    uint64_t *empty = full + kStages;
    float *partial = reinterpret_cast<float *>(smem_b); /* once the ring is done */

    const int splits = cluster_size();
    const int rank = cluster_rank();
    const int n0 = static_cast<int>(blockIdx.x) / splits * kTN;
    /* Balanced shares: rank r takes slices [r·k/S, (r + 1)·k/S), so with at
     * least two slices per share (the planner's rule) none idles; a forced
     * split past the slice count leaves some shares empty. */
    const int k_tiles = (p.k + kBK - 1) / kBK;
    const int kt0 = static_cast<int>(static_cast<long long>(rank) * k_tiles / splits);
    const int count = static_cast<int>(static_cast<long long>(rank + 1) * k_tiles / splits) - kt0;
    const int warpgroup = threadIdx.x / 128;

    ring_init<kStages>(full, empty, 2);
    if (warpgroup == 0) {
        regs_shrink<40>();
        if (threadIdx.x == 0) {
            for (int i = 0; i < count; i++) {
                const int s = i % kStages;
                const int k = (kt0 + i) * kBK;
                mbar_wait(&empty[s], ((i / kStages) & 1) ^ 1);
                mbar_expect_tx(&full[s], kBBytes + kAStageBytes);
                tma_load_2d(smem_a + s * kAStageBytes, map_a, &full[s], k, 0);
#pragma unroll
                for (int pr = 0; pr < kProducts; pr++)
#pragma unroll
                    for (int c = 0; c < kTN / 64; c++)
                        tma_load_2d(smem_b + s * kBBytes + (pr * (kTN / 64) + c) * kChunkBytes,
                                    pr == 0 ? map_b : map_b2, &full[s], n0 + 64 * c, k);
            }
        }
        /* The consumers' two cluster barriers (below). */
        cluster_sync();
        cluster_sync();
        return;
    }

    regs_grow<232>();
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x - 128; /* 0 .. 255 */
    const int warp = (t % 128) / 32, lane = t % 32;
    /* Product pr's block b, acc[(pr·kBlocks + b)·MW/2 ..]: its columns
     * (TN/2)·c + 64b + 0..63. */
    float acc[kProducts * kBlocks * MW / 2];
    /* Zeroed through asm, so that the compiler cannot move or repeat the
     * constant: a plain 0.0f it rematerialized in front of the loop, a
     * non-wgmma definition of an accumulator inside the wgmma pipeline that
     * made ptxas serialize every wgmma of these kernels (C7515). */
#pragma unroll
    for (int i = 0; i < kProducts * kBlocks * MW / 2; i++)
        asm volatile("mov.b32 %0, 0;" : "=f"(acc[i]));
    for (int i = 0; i < count; i++) {
        const int s = i % kStages;
        mbar_wait(&full[s], (i / kStages) & 1);
        const uint32_t b_base = smem_addr(smem_b + s * kBBytes) + consumer * kBlocks * kChunkBytes;
        const uint32_t a_base = smem_addr(smem_a + s * kAStageBytes);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; kk++) {
            const uint64_t da = smem_desc(a_base + kk * 32, 16, 1024);
#pragma unroll
            for (int pr = 0; pr < kProducts; pr++)
#pragma unroll
                for (int b = 0; b < kBlocks; b++)
                    wgmma_t<MW, TIn>(
                        acc + (pr * kBlocks + b) * (MW / 2),
                        smem_desc(b_base + (pr * (kTN / 64) + b) * kChunkBytes + kk * 2048, p.b_lbo,
                                  p.b_sbo),
                        da);
        }
        ring_retire_previous<kStages>(empty, i, i);
    }
    /* Waited for on every path, even with no slice: a read of the
     * accumulators that some path reaches without this wait makes ptxas
     * serialize every wgmma of the kernel. */
    wgmma_wait<0>();
    if (count > 0 && threadIdx.x % 128 == 0)
        mbar_arrive(&empty[(count - 1) % kStages]);

    /* Both consumers are past every read of the ring; its loads have all
     * landed (each was waited for), so the partial tile may overwrite it.
     * Register 4j + 2h + e of block b holds B's column
     * (TN/2)·c + 64b + 16·warp + lane / 4 + 8h and A's row 8j + 2·(lane % 4) + e. */
    consumers_wait(1);
#pragma unroll
    for (int pr = 0; pr < kProducts; pr++)
#pragma unroll
        for (int b = 0; b < kBlocks; b++) {
            const int col = consumer * (kTN / 2) + b * 64 + warp * 16 + lane / 4;
#pragma unroll
            for (int j = 0; j < MW / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        partial[pr * kPartial + (8 * j + 2 * (lane % 4) + e) * kStride + col +
                                8 * h] = acc[(pr * kBlocks + b) * (MW / 2) + 4 * j + 2 * h + e];
        }
    cluster_sync();

    const uint32_t partial_addr = smem_addr(partial);
    const bool has_res = p.residual != nullptr;
    TOut *out = static_cast<TOut *>(p.out);
    for (int item = rank * 256 + t; item < MW * (kTN / 4); item += splits * 256) {
        const int row = item / (kTN / 4), col = 4 * (item % (kTN / 4));
        const int n = n0 + col;
        if (row >= p.m || n >= p.n) /* N is a multiple of 8: all four or none */
            continue;
        float v[kProducts][4] = {};
        for (int c = 0; c < splits; c++)
#pragma unroll
            for (int pr = 0; pr < kProducts; pr++) {
                const float4 x = cluster_load4(
                    cluster_addr(partial_addr + 4 * (pr * kPartial + row * kStride + col), c));
                v[pr][0] += x.x;
                v[pr][1] += x.y;
                v[pr][2] += x.z;
                v[pr][3] += x.w;
            }
        const size_t at = static_cast<size_t>(row) * p.n + n;
        if constexpr (Gated) {
            /* act(A·Wg) · (A·Wu), as the gated kernels' epilogue. */
#pragma unroll
            for (int i = 0; i < 4; i++)
                v[0][i] = act_apply(p.gate_act, v[0][i]) * v[1][i];
        } else {
            for (int o = 0; o < p.n_ops; o++) {
                const int op = p.ops[o];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[0][i] = op == GEMM_OP_BIAS ? v[0][i] + elem<TIn>::load(p.bias, n + i)
                                                 : act_apply(op, v[0][i]);
            }
            if (has_res) {
                const float2 r0 = elem<TIn>::load_pair(p.residual, at);
                const float2 r1 = elem<TIn>::load_pair(p.residual, at + 2);
                v[0][0] += r0.x;
                v[0][1] += r0.y;
                v[0][2] += r1.x;
                v[0][3] += r1.y;
            }
        }
        store_pair(out, at, v[0][0], v[0][1]);
        store_pair(out, at + 2, v[0][2], v[0][3]);
    }
    /* No CTA leaves while another may still read its shared memory. */
    cluster_sync();
}

} // namespace

/* An entry point whose body is the given call; every kernel takes the same
 * parameters (map_b2 only when gated), and the checks build their variants of
 * the design with it too. */
#define TSR_GEMM_KERNEL(name, ...)                                                                 \
    extern "C" __global__ void __launch_bounds__(TSR_GEMM_THREADS, 1) name(                        \
        const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,      \
        const __grid_constant__ CUtensorMap map_b2, const __grid_constant__ tsr_gemm_params p)     \
    {                                                                                              \
        __VA_ARGS__;                                                                               \
    }

/* The plain products without an epilogue: tsr_gemm_<in>_<out>, cooperative
 * (both consumers on one 128 x 256 tile, which reads B from shared memory once
 * for 256 rows: measured the faster main loop). */
#define TSR_GEMM_ENTRY(name, tin, tout)                                                            \
    TSR_GEMM_KERNEL(name, gemm_body<tin, tout, false>(&map_a, &map_b, &map_b2, p))
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY, tsr_gemm, )

/* The products with an epilogue (bias, activations, residual):
 * tsr_gemm_<in>_<out>_pp, ping-pong, so that the epilogue overlaps the
 * tensor cores. */
#define TSR_GEMM_ENTRY_PINGPONG(name, tin, tout)                                                   \
    TSR_GEMM_KERNEL(name, gemm_pingpong_body<tin, tout>(&map_a, &map_b, p))
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_PINGPONG, tsr_gemm, _pp)

/* The products with a row reduction (rmsnorm, layer_norm, softmax) over at
 * most TSR_GEMM_ROWS_MAX_N columns: tsr_gemm_<in>_<out>_rows. */
#define TSR_GEMM_ENTRY_ROWS(name, tin, tout)                                                       \
    TSR_GEMM_KERNEL(name, gemm_rows_body<tin, tout>(&map_a, &map_b, p))
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_ROWS, tsr_gemm, _rows)

/* The gated products: tsr_gemm_<in>_<out>_gated. */
#define TSR_GEMM_ENTRY_GATED(name, tin, tout)                                                      \
    TSR_GEMM_KERNEL(name, gemm_body<tin, tout, true>(&map_a, &map_b, &map_b2, p))
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_GATED, tsr_gemm, _gated)

/* The small-M products (at most TSR_GEMM_NARROW_M rows, with or without an
 * epilogue): tsr_gemm_<in>_<out>_m<16|32|64>_n<128|256>. */
#define TSR_GEMM_SMALL(name, tin, tout, mw, tn)                                                    \
    TSR_GEMM_KERNEL(name, gemm_small_body<tin, tout, mw, tn>(&map_a, &map_b, &map_b2, p))
#define TSR_GEMM_SMALL_GATED(name, tin, tout, mw)                                                  \
    TSR_GEMM_KERNEL(name, gemm_small_body<tin, tout, mw, 128, true>(&map_a, &map_b, &map_b2, p))
#define TSR_GEMM_ENTRY_M16_N128(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 16, 128)
#define TSR_GEMM_ENTRY_M16_N256(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 16, 256)
#define TSR_GEMM_ENTRY_M32_N128(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 32, 128)
#define TSR_GEMM_ENTRY_M32_N256(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 32, 256)
#define TSR_GEMM_ENTRY_M64_N128(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 64, 128)
#define TSR_GEMM_ENTRY_M64_N256(name, tin, tout) TSR_GEMM_SMALL(name, tin, tout, 64, 256)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M16_N128, tsr_gemm, _m16_n128)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M16_N256, tsr_gemm, _m16_n256)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M32_N128, tsr_gemm, _m32_n128)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M32_N256, tsr_gemm, _m32_n256)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M64_N128, tsr_gemm, _m64_n128)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M64_N256, tsr_gemm, _m64_n256)

/* The gated products of at most TSR_GEMM_NARROW_M rows:
 * tsr_gemm_<in>_<out>_m<16|32|64>_n128_gated, 128 columns of both weights. */
#define TSR_GEMM_ENTRY_M16_GATED(name, tin, tout) TSR_GEMM_SMALL_GATED(name, tin, tout, 16)
#define TSR_GEMM_ENTRY_M32_GATED(name, tin, tout) TSR_GEMM_SMALL_GATED(name, tin, tout, 32)
#define TSR_GEMM_ENTRY_M64_GATED(name, tin, tout) TSR_GEMM_SMALL_GATED(name, tin, tout, 64)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M16_GATED, tsr_gemm, _m16_n128_gated)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M32_GATED, tsr_gemm, _m32_n128_gated)
TSR_GEMM_FAMILY(TSR_GEMM_ENTRY_M64_GATED, tsr_gemm, _m64_n128_gated)
