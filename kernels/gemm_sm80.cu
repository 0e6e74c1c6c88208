/*
 * gemm_sm80.cu — tier-3 tensor-core GEMM family for Ampere-class GPUs (sm_80 ..
 * sm_89; the same code runs on Hopper, where the wgmma family is preferred).
 *
 * C = epilogue(A @ B) for bf16 or f16 inputs with f32 accumulation, and the gated
 * form O = act(A @ Wg) * (A @ Wu) that shares each A tile between both products.
 * The semantics are those of gemm_sm90.cu, operation for operation.
 *
 * Design (docs/kernels.md has the long form):
 *  - One block of eight warps computes a 128 x 128 tile of C (gated: 128 x 64 of
 *    both products, the two 64-column weight tiles side by side in one 128-wide
 *    B stage, so the main loop is the same code). Warps are laid out 2 x 4, each
 *    owning a 64 x 32 block: 4 x 4 mma.m16n8k16 tiles, 64 f32 accumulators.
 *  - K advances 32 at a time through a 4-stage cp.async ring (16-byte copies,
 *    .cg so they skip L1). Chunks outside M, N or K are zero-filled through the
 *    src-size operand, so ragged edges need no padding and add no branches to
 *    the math. Shared rows are padded by 16 bytes, which puts the eight rows an
 *    ldmatrix phase reads into eight different 16-byte bank groups.
 *  - Fragments come from ldmatrix.x4 (A, K-contiguous) and ldmatrix.x4.trans
 *    (B, N-contiguous: the transpose hands each thread the K pairs mma's "col"
 *    operand wants) and feed mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.
 *  - The epilogue runs straight from the accumulators: each thread owns pairs of
 *    adjacent columns, applies bias / activations / residual (gated: act(g) * u)
 *    in f32 and stores pairs with row and column checks.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gemm80_params.h"
#include "gemm_common.cuh"

namespace
{

constexpr int kBM = TSR_GEMM80_BM;
constexpr int kBN = TSR_GEMM80_BN; /* columns of a B stage, both variants */
constexpr int kBK = TSR_GEMM80_BK;
constexpr int kStages = TSR_GEMM80_STAGES;
constexpr int kThreads = TSR_GEMM80_THREADS;
constexpr int kAStride = TSR_GEMM80_A_STRIDE * 2; /* bytes per A row in shared memory */
constexpr int kBStride = TSR_GEMM80_B_STRIDE * 2; /* bytes per B row */
constexpr int kABytes = kBM * kAStride;
constexpr int kBBytes = kBK * kBStride;
constexpr int kStageBytes = kABytes + kBBytes;
static_assert(kStageBytes == TSR_GEMM80_STAGE_BYTES, "stage size");
/* 16-byte chunks per stage: A 128 rows x 4, B 32 rows x 16; two of each per thread. */
constexpr int kAChunks = kBM * kBK / 8;
constexpr int kBChunks = kBK * kBN / 8;
static_assert(kAChunks == 2 * kThreads && kBChunks == 2 * kThreads, "loader split");

/* ---- PTX wrappers ---- */

/* 16-byte global -> shared copy; src_bytes 0 writes 16 zero bytes and reads
 * nothing (src must still be a valid address). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, unsigned src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int Pending> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += A (16 x 16) @ B (16 x 8) from ldmatrix fragments, for input type T. */
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float *d, const uint32_t *a, const uint32_t *b);

#define DEFINE_MMA_M16N8K16(type, ab)                                                              \
    template <>                                                                                    \
    __device__ __forceinline__ void mma_m16n8k16<type>(float *d, const uint32_t *a,                \
                                                       const uint32_t *b)                          \
    {                                                                                              \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ab "." ab ".f32 "                    \
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"             \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                              \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));          \
    }

DEFINE_MMA_M16N8K16(__nv_bfloat16, "bf16")
DEFINE_MMA_M16N8K16(__half, "f16")

/* The epilogue chain on one pair of adjacent outputs (row, col), (row, col + 1)
 * of a plain kernel. Not inlined: the accumulator loop that calls it is
 * unrolled 32 times, and one copy of the op switch is enough. */
template <typename TIn, typename TOut>
__device__ __noinline__ void epilogue_pair(const tsr_gemm_params &p, int row, int col, float x,
                                           float y)
{
    for (int o = 0; o < p.n_ops; o++) {
        const int op = p.ops[o];
        if (op == GEMM_OP_BIAS) {
            x += elem<TIn>::load(p.bias, col);
            y += elem<TIn>::load(p.bias, col + 1);
        } else {
            x = act_apply(op, x);
            y = act_apply(op, y);
        }
    }
    const size_t at = static_cast<size_t>(row) * p.n + col;
    if (p.residual != nullptr) {
        const float2 r = elem<TIn>::load_pair(p.residual, at);
        x += r.x;
        y += r.y;
    }
    store_pair(static_cast<TOut *>(p.out), at, x, y);
}

template <typename TOut>
__device__ __noinline__ void gated_pair(const tsr_gemm_params &p, int row, int col, float g0,
                                        float g1, float u0, float u1)
{
    const size_t at = static_cast<size_t>(row) * p.n + col;
    store_pair(static_cast<TOut *>(p.out), at, act_apply(p.gate_act, g0) * u0,
               act_apply(p.gate_act, g1) * u1);
}

template <typename TIn, typename TOut, bool Gated>
__device__ __forceinline__ void gemm_body(const TIn *__restrict__ a, const TIn *__restrict__ b,
                                          const TIn *__restrict__ b2, const tsr_gemm_params &p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t smem_base = smem_addr(smem);

    constexpr int bn = Gated ? TSR_GEMM80_BN_GATED : TSR_GEMM80_BN;
    const int m = p.m, n = p.n, k = p.k;
    const int tiles_m = (m + kBM - 1) / kBM;
    const int tiles_n = (n + bn - 1) / bn;
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = (k + kBK - 1) / kBK;

    const int tid = threadIdx.x;
    const int lane = tid % 32;
    const int warp = tid / 32;
    const int wm = warp / 4; /* rows 64 * wm .. + 63 of the tile */
    const int wn = warp % 4; /* columns: plain 32 * wn .. + 31; gated 16 * wn .. + 15 of each */

    /* Loader assignment: thread t copies A chunks t and t + 256 (row c / 4, K
     * chunk c % 4) and B chunks t and t + 256 (K row c / 16, column chunk c % 16;
     * gated: chunks 0-7 from Wg, 8-15 from Wu). The K chunk and column chunk are
     * the same for both of a thread's copies. */
    const int a_kc = tid % 4;
    const int a_row0 = tid / 4; /* and a_row0 + 64 */
    const int b_nc = tid % 16;
    const int b_row0 = tid / 16; /* and b_row0 + 16 */
    const TIn *b_src = (Gated && b_nc >= 8) ? b2 : b;
    const int b_col = Gated ? (b_nc % 8) * 8 : b_nc * 8;
    const uint32_t a_dst = smem_base + a_row0 * kAStride + a_kc * 16;
    const uint32_t b_dst = smem_base + kABytes + b_row0 * kBStride + b_nc * 16;

    /* ldmatrix addresses: lane l names row l % 16 and 8-column half l / 16 of a
     * 16 x 16 block, for A (rows M, columns K) and for B (rows K, columns N). */
    const int ld_row = lane % 16, ld_col = (lane / 16) * 8;
    const uint32_t a_frag = smem_base + (wm * 64 + ld_row) * kAStride + ld_col * 2;
    uint32_t b_frag[2];
#pragma unroll
    for (int pr = 0; pr < 2; pr++) {
        const int col = Gated ? pr * 64 + wn * 16 : wn * 32 + pr * 16;
        b_frag[pr] = smem_base + kABytes + ld_row * kBStride + (col + ld_col) * 2;
    }

    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * kBM, n0 = tn * bn;

        const bool a_ok0 = m0 + a_row0 < m, a_ok1 = m0 + a_row0 + 64 < m;
        const bool b_col_ok = n0 + b_col < n;
        const TIn *a_ptr0 = a + static_cast<size_t>(a_ok0 ? m0 + a_row0 : 0) * k + a_kc * 8;
        const TIn *a_ptr1 = a + static_cast<size_t>(a_ok1 ? m0 + a_row0 + 64 : 0) * k + a_kc * 8;
        const TIn *b_ptr = b_src + static_cast<size_t>(b_row0) * n + (b_col_ok ? n0 + b_col : 0);
        const size_t b_step16 = static_cast<size_t>(16) * n; /* 16 K rows */

        /* Issues the copies of K tile kt into stage s (one commit group). */
        auto load_stage = [&](int kt, int s) {
            const int k0 = kt * kBK;
            const uint32_t sa = a_dst + s * kStageBytes, sb = b_dst + s * kStageBytes;
            const bool a_k_ok = k0 + a_kc * 8 < k;
            cp_async16(sa, a_k_ok && a_ok0 ? a_ptr0 + k0 : a, a_k_ok && a_ok0 ? 16 : 0);
            cp_async16(sa + 64 * kAStride, a_k_ok && a_ok1 ? a_ptr1 + k0 : a,
                       a_k_ok && a_ok1 ? 16 : 0);
            const bool b_ok0 = b_col_ok && k0 + b_row0 < k;
            const bool b_ok1 = b_col_ok && k0 + b_row0 + 16 < k;
            const TIn *bp = b_ptr + static_cast<size_t>(k0) * n;
            cp_async16(sb, b_ok0 ? bp : b_src, b_ok0 ? 16 : 0);
            cp_async16(sb + 16 * kBStride, b_ok1 ? bp + b_step16 : b_src, b_ok1 ? 16 : 0);
        };

        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    acc[i][j][r] = 0.0f;

#pragma unroll
        for (int s = 0; s < kStages - 1; s++) {
            if (s < k_tiles)
                load_stage(s, s);
            cp_async_commit();
        }

        for (int kt = 0; kt < k_tiles; kt++) {
            /* Groups 0 .. kt are complete once at most kStages - 2 are pending;
             * the barrier publishes every thread's copies and tells that all
             * warps are done with the stage the next load overwrites (read in
             * iteration kt - 1). */
            cp_async_wait<kStages - 2>();
            __syncthreads();
            const int next = kt + kStages - 1;
            if (next < k_tiles)
                load_stage(next, next % kStages);
            cp_async_commit();

            const uint32_t stage = (kt % kStages) * kStageBytes;
#pragma unroll
            for (int kk = 0; kk < kBK / 16; kk++) {
                uint32_t af[4][4], bf[2][4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    ldmatrix_x4(af[i], a_frag + stage + i * 16 * kAStride + kk * 32);
#pragma unroll
                for (int pr = 0; pr < 2; pr++)
                    ldmatrix_x4_trans(bf[pr], b_frag[pr] + stage + kk * 16 * kBStride);
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        mma_m16n8k16<TIn>(acc[i][j], af[i], &bf[j / 2][(j % 2) * 2]);
            }
        }
        /* The next tile's prologue overwrites stages other warps may still read. */
        cp_async_wait<0>();
        __syncthreads();

        /* Accumulator acc[i][j][r]: row 16 i + lane / 4 (+ 8 when r >= 2) of the
         * warp's 64, column 8 j + 2 (lane % 4) (+ 1 when r is odd) of its 32 B
         * columns (gated: j 0-1 gate, j 2-3 the matching up columns). */
        const int row_base = m0 + wm * 64 + lane / 4;
        const int col_lane = 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = row_base + 16 * i + 8 * h;
                if (row >= m)
                    continue;
                if (Gated) {
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const int col = n0 + wn * 16 + 8 * j + col_lane;
                        if (col < n)
                            gated_pair<TOut>(p, row, col, acc[i][j][2 * h], acc[i][j][2 * h + 1],
                                             acc[i][j + 2][2 * h], acc[i][j + 2][2 * h + 1]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int col = n0 + wn * 32 + 8 * j + col_lane;
                        if (col < n)
                            epilogue_pair<TIn, TOut>(p, row, col, acc[i][j][2 * h],
                                                     acc[i][j][2 * h + 1]);
                    }
                }
            }
        }
    }
}

} // namespace

/* One entry point per (input, output, gated) combination, named for
 * cuModuleGetFunction: tsr_gemm80_<in>_<out>[_gated]. Two blocks per
 * multiprocessor: the register budget (128) holds the 64 accumulators and two
 * k16 steps of fragments. */
#define TSR_GEMM80_KERNEL(name, tin, tout, gated)                                                  \
    extern "C" __global__ void __launch_bounds__(TSR_GEMM80_THREADS, 2) name(                      \
        const void *a, const void *b, const void *b2, const __grid_constant__ tsr_gemm_params p)   \
    {                                                                                              \
        gemm_body<tin, tout, gated>(static_cast<const tin *>(a), static_cast<const tin *>(b),      \
                                    static_cast<const tin *>(b2), p);                              \
    }
#define TSR_GEMM80_ENTRY(name, tin, tout) TSR_GEMM80_KERNEL(name, tin, tout, false)
#define TSR_GEMM80_ENTRY_GATED(name, tin, tout) TSR_GEMM80_KERNEL(name, tin, tout, true)

TSR_GEMM_FAMILY(TSR_GEMM80_ENTRY, tsr_gemm80, )
TSR_GEMM_FAMILY(TSR_GEMM80_ENTRY_GATED, tsr_gemm80, _gated)
