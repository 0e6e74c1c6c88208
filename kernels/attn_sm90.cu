/*
 * attn_sm90.cu — tier-3 flash attention for Hopper (sm_90a).
 *
 * O = softmax(s · Q · Kᵀ) · V per (batch, head) for bf16 or f16 inputs, f32
 * accumulation and softmax, head_dim = head_dim_v ∈ {64, 128}, grouped-query
 * and bottom-right causal (docs/kernels.md has the long form).
 *
 *  - The query heads of one kv head are packed: row r of the packed block is
 *    query m = r % seq_q of head kv_head · group + r / seq_q. A CTA owns 128
 *    packed rows, so a decode step (seq_q 1) puts all of a kv head's queries in
 *    one CTA, and each K / V tile is read once for all of them.
 *  - Three warpgroups: warpgroup 0 produces, 1 and 2 consume 64 rows each. The
 *    producer's elected thread brings the Q tile once and 128-key K and V tiles
 *    into separate shared-memory rings with the tensor-memory accelerator
 *    (128-byte swizzle); K and V each have their own full and empty mbarriers,
 *    so a K stage is refilled as soon as S = Q·Kᵀ has read it.
 *  - S = Q·Kᵀ is wgmma m64n128k16 with Q from registers (read once from the
 *    tile as A fragments) and K from shared memory (K-major); P·V takes P from
 *    registers too (the S accumulators, rounded to the input dtype, are already
 *    in wgmma's A-fragment layout) and V MN-major (transpose bit).
 *  - Within a warpgroup, S of tile j is issued before P·V of tile j − 1, so the
 *    softmax of tile j runs while the tensor cores multiply tile j − 1; and
 *    the two consumer warpgroups take turns at issuing (ping-pong), so one's
 *    softmax overlaps the other's products.
 *  - Online softmax in exp2 with the scale folded in; max is NaN-propagating,
 *    so a NaN score makes its row NaN as in the reference; a row that sees no
 *    key is written as 0.
 *  - Exactness on masked keys: the tensor cores compute 0 · v for a masked key,
 *    which is NaN when v is not finite, while the reference skips the key. On
 *    a tile with masked keys (causal diagonal) whose V holds a non-finite
 *    value, the tensor cores multiply P by a block of zeros instead and the
 *    CUDA cores add the tile's products, skipping masked pairs. Keys past
 *    seq_k are zero-filled by the loads and cannot carry one.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "attn_params.h"
#include "sm90_common.cuh"

namespace
{

constexpr int kBM = TSR_ATTN_BM;
constexpr int kBN = TSR_ATTN_BN;

/* ---- element types ---- */

/* The input types differ only in their pair type, its conversions from and to
 * two f32 values, and the exponent bits of one half (Exp). */
template <typename Pair, Pair (*Make)(float, float), float2 (*Widen)(Pair), uint32_t Exp>
struct attn_pair_type {
    /* Two f32 values as one register of the A fragment: lo in the low half. */
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        Pair v = Make(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t v)
    {
        return Widen(*reinterpret_cast<Pair *>(&v));
    }
    /* True when either half of w is inf or NaN (all exponent bits set). */
    static __device__ __forceinline__ bool nonfinite2(uint32_t w)
    {
        return (w & Exp) == Exp || (w & (Exp << 16)) == (Exp << 16);
    }
};

template <typename T> struct attn_type;
template <>
struct attn_type<__nv_bfloat16>
    : attn_pair_type<__nv_bfloat162, __floats2bfloat162_rn, __bfloat1622float2, 0x7F80u> {
};
template <>
struct attn_type<__half> : attn_pair_type<__half2, __floats2half2_rn, __half22float2, 0x7C00u> {
};

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

/* max that returns NaN when either side is NaN (fmaxf would drop it). */
__device__ __forceinline__ float max_nan(float a, float b)
{
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float exp2_approx(float x)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* OR of pred over the 128 threads of a warpgroup, on named barrier id. */
__device__ __forceinline__ bool warpgroup_any(bool pred, int id)
{
    uint32_t out;
    asm volatile("{\n"
                 ".reg .pred p, q;\n"
                 "setp.ne.u32 p, %1, 0;\n"
                 "bar.red.or.pred q, %2, 128, p;\n"
                 "selp.u32 %0, 1, 0, q;\n"
                 "}\n"
                 : "=r"(out)
                 : "r"(static_cast<uint32_t>(pred)), "r"(id)
                 : "memory");
    return out != 0;
}

__device__ __forceinline__ void warpgroup_sync(int id)
{
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

/* ---- wgmma ---- */

/* Pins accumulator registers at this point of the program, so that no copy of
 * them lands between a wgmma and the wait that retires it (ptxas would then
 * serialize every wgmma of the kernel). */
template <int N> __device__ __forceinline__ void fence_operands(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* S (64 x 128) (+)= Q (64 x 16) · Kᵀ (16 x 128), both from shared memory,
 * K-major; the first k step overwrites (accumulate 0). */
template <typename T>
__device__ __forceinline__ void wgmma_qk(float *d, uint64_t desc_q, uint64_t desc_k,
                                         int accumulate);

#define ATTN_DEFINE_QK(type, ab)                                                                   \
    template <>                                                                                    \
    __device__ __forceinline__ void wgmma_qk<type>(float *d, uint64_t desc_q, uint64_t desc_k,     \
                                                   int accumulate)                                 \
    {                                                                                              \
        asm volatile("{\n"                                                                         \
                     ".reg .pred p;\n"                                                             \
                     "setp.ne.b32 p, %66, 0;\n"                                                    \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." ab "." ab " "                  \
                     "{" WGMMA_N128_REGS "}, %64, %65, p, 1, 1, 0, 0;\n"                           \
                     "}\n"                                                                         \
                     : WGMMA_N128_ACC                                                              \
                     : "l"(desc_q), "l"(desc_k), "r"(accumulate));                                 \
    }
ATTN_DEFINE_QK(__nv_bfloat16, "bf16")
ATTN_DEFINE_QK(__half, "f16")

/* S (64 x 128) (+)= Q (64 x 16, four registers of A fragment) · Kᵀ (16 x 128,
 * shared memory, K-major). */
template <typename T>
__device__ __forceinline__ void wgmma_qk_rs(float *d, const uint32_t *a, uint64_t desc_k,
                                            int accumulate);

#define ATTN_DEFINE_QK_RS(type, ab)                                                                \
    template <>                                                                                    \
    __device__ __forceinline__ void wgmma_qk_rs<type>(float *d, const uint32_t *a,                 \
                                                      uint64_t desc_k, int accumulate)             \
    {                                                                                              \
        asm volatile("{\n"                                                                         \
                     ".reg .pred p;\n"                                                             \
                     "setp.ne.b32 p, %69, 0;\n"                                                    \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." ab "." ab " "                  \
                     "{" WGMMA_N128_REGS "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"             \
                     "}\n"                                                                         \
                     : WGMMA_N128_ACC                                                              \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_k), "r"(accumulate));  \
    }
ATTN_DEFINE_QK_RS(__nv_bfloat16, "bf16")
ATTN_DEFINE_QK_RS(__half, "f16")

/* O (64 x HD) += P (64 x 16, four registers of A fragment) · V (16 x HD, shared
 * memory, MN-major: the transpose bit). */
template <int HD, typename T>
__device__ __forceinline__ void wgmma_pv(float *d, const uint32_t *a, uint64_t desc_v);

#define ATTN_DEFINE_PV(n, type, ab, a0, a1, a2, a3, dv)                                            \
    template <>                                                                                    \
    __device__ __forceinline__ void wgmma_pv<n, type>(float *d, const uint32_t *a,                 \
                                                      uint64_t desc_v)                             \
    {                                                                                              \
        asm volatile("{\n"                                                                         \
                     ".reg .pred p;\n"                                                             \
                     "setp.ne.b32 p, 1, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." ab "." ab " "               \
                     "{" WGMMA_N##n##_REGS "}, {" a0 ", " a1 ", " a2 ", " a3 "}, " dv              \
                                           ", p, 1, 1, 1;\n"                                       \
                                           "}\n"                                                   \
                     : WGMMA_N##n##_ACC                                                            \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_v));                   \
    }
ATTN_DEFINE_PV(128, __nv_bfloat16, "bf16", "%64", "%65", "%66", "%67", "%68")
ATTN_DEFINE_PV(128, __half, "f16", "%64", "%65", "%66", "%67", "%68")
ATTN_DEFINE_PV(64, __nv_bfloat16, "bf16", "%32", "%33", "%34", "%35", "%36")
ATTN_DEFINE_PV(64, __half, "f16", "%32", "%33", "%34", "%35", "%36")

/* ---- the kernel ---- */

/* Where this CTA's packed rows lie and which keys they see. */
struct attn_tile {
    int rows;      /* packed rows of the kv head: group · seq_q */
    int r0;        /* first packed row of the CTA */
    int diag;      /* seq_k - seq_q: key n is visible to query m when n <= m + seq_k - seq_q */
    int j0;        /* first key tile of the CTA's share (0 unless the keys are split) */
    int n_tiles;   /* key tiles of that share that any row of the CTA sees */
    size_t q_row0; /* the CTA's first row in the (B·H·seq_q, HD) view of Q and O */
};

template <int Splits> __device__ __forceinline__ attn_tile attn_tile_of(const tsr_attn_params &p)
{
    attn_tile t;
    const int group = p.heads / p.heads_kv;
    t.rows = group * p.seq_q;
    /* With split keys, the Splits CTAs of a cluster share one row tile. */
    const int tile = static_cast<int>(blockIdx.x) / Splits;
    const int n_row_tiles = static_cast<int>(gridDim.x) / Splits;
    const int x = p.causal ? n_row_tiles - 1 - tile : tile; /* long tiles first */
    t.r0 = x * kBM;
    t.diag = p.seq_k - p.seq_q;
    t.q_row0 = (static_cast<size_t>(blockIdx.z) * p.heads_kv + blockIdx.y) * t.rows + t.r0;
    int n_end = p.seq_k;
    if (p.causal) {
        /* The largest query index among the CTA's rows. */
        const int last = min(t.r0 + kBM, t.rows) - 1;
        const int m_max = last / p.seq_q == t.r0 / p.seq_q ? last % p.seq_q : p.seq_q - 1;
        n_end = min(p.seq_k, m_max + t.diag + 1);
    }
    const int total = n_end > 0 ? (n_end + kBN - 1) / kBN : 0;
    t.j0 = 0;
    t.n_tiles = total;
    if (Splits > 1) {
        /* Contiguous shares of the key tiles; a share past the end is empty. */
        const int per = (total + Splits - 1) / Splits;
        t.j0 = cluster_rank() * per;
        t.n_tiles = max(0, min(per, total - t.j0));
    }
    return t;
}

/* ---- split keys: the partial results combined across the cluster ---- */

/* Split keys: each CTA of the cluster holds, for the rows of one row tile, the
 * softmax state of its share of the keys (the running maximum m, the sum l and
 * the unnormalized O, both relative to m, or to 0 where m is -inf). The CTAs
 * leave it in their shared memory and then combine it together, each taking
 * its part of the (row, four columns) items and reading every CTA's values
 * through distributed shared memory:
 *   M = max m_c,  w_c = 2^(m_c - M) (0 where m_c is -inf),
 *   O = Σ w_c · O_c / Σ w_c · l_c.
 * A NaN maximum makes the row NaN; a row whose every score is -inf gets
 * 0 / 0 = NaN, and 0 · NaN keeps a non-finite value of V, as the unsplit
 * kernel and the reference do. */
template <typename TOut, int HD, int Splits>
__device__ __forceinline__ void attn_combine(unsigned char *smem, const attn_tile &t,
                                             const tsr_attn_params &p, const float (&o)[HD / 2],
                                             const float (&m_run)[2], const float (&l_run)[2],
                                             const int (&rr)[2], int ct, int quad)
{
    constexpr int kStride = HD + 8; /* floats per row: rows start 8 banks apart */
    float *so = reinterpret_cast<float *>(smem);
    float *sm = so + kBM * kStride;
    float *sl = sm + kBM;
    /* Both consumer warpgroups are past every read of Q, K and V. */
    consumers_wait(5);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = rr[h] - t.r0;
#pragma unroll
        for (int jo = 0; jo < HD / 8; jo++)
            *reinterpret_cast<float2 *>(so + row * kStride + 8 * jo + 2 * quad) =
                make_float2(o[4 * jo + 2 * h], o[4 * jo + 2 * h + 1]);
        if (quad == 0) {
            sm[row] = m_run[h];
            sl[row] = l_run[h];
        }
    }
    cluster_sync();
    const int rank = cluster_rank();
    const int n_rows = min(kBM, t.rows - t.r0);
    const uint32_t so_addr = sm90_smem_addr(so), sm_addr = sm90_smem_addr(sm),
                   sl_addr = sm90_smem_addr(sl);
    TOut *out = static_cast<TOut *>(p.out);
    for (int i = rank * 256 + ct; i < n_rows * (HD / 4); i += Splits * 256) {
        const int row = i / (HD / 4), col = 4 * (i % (HD / 4));
        float m[Splits], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < Splits; c++) {
            m[c] = cluster_load(cluster_addr(sm_addr + 4 * row, c));
            mx = max_nan(mx, m[c]);
        }
        float l = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int c = 0; c < Splits; c++) {
            const float w = m[c] == -INFINITY ? 0.0f : exp2_approx(m[c] - mx);
            l += w * cluster_load(cluster_addr(sl_addr + 4 * row, c));
            const float4 v = cluster_load4(cluster_addr(so_addr + 4 * (row * kStride + col), c));
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        }
        const bool none = p.causal && (t.r0 + row) % p.seq_q + t.diag < 0;
        const float inv = 1.0f / l;
        const size_t at = (t.q_row0 + static_cast<size_t>(row)) * HD + col;
        store_pair(out, at, none ? 0.0f : acc.x * inv, none ? 0.0f : acc.y * inv);
        store_pair(out, at + 2, none ? 0.0f : acc.z * inv, none ? 0.0f : acc.w * inv);
    }
    /* No CTA leaves while another may still read its shared memory. */
    cluster_sync();
}

template <typename T, typename TOut, int HD, bool PingPong, bool QInRegisters, int Splits = 1,
          int kKStages = TSR_ATTN_K_STAGES(HD), int kVStages = TSR_ATTN_V_STAGES(HD)>
__device__ __forceinline__ void attn_body(const CUtensorMap *map_q, const CUtensorMap *map_k,
                                          const CUtensorMap *map_v, const tsr_attn_params &p)
{
    constexpr int kChunks = HD / 64;    /* 128-byte column boxes per row */
    constexpr int kQChunk = kBM * 128;  /* bytes of one Q box */
    constexpr int kKVChunk = kBN * 128; /* bytes of one K or V box */
    constexpr int kQBytes = kChunks * kQChunk;
    constexpr int kKVBytes = kChunks * kKVChunk;
    constexpr int kZeroChunk = 16 * 128; /* one k step (16 keys) of one V box */
    constexpr int kZeroBytes = kChunks * kZeroChunk;
    unsigned char *smem = smem_aligned();
    unsigned char *sq = smem;
    unsigned char *sk = sq + kQBytes;
    unsigned char *sv = sk + kKStages * kKVBytes;
    unsigned char *szero = sv + kVStages * kKVBytes; /* 16 zero rows of V, see issue_pv */
    uint64_t *q_full = reinterpret_cast<uint64_t *>(szero + kZeroBytes);
    uint64_t *k_full = q_full + 1;
    uint64_t *k_empty = k_full + kKStages;
    uint64_t *v_full = k_empty + kKStages;
    uint64_t *v_empty = v_full + kVStages;

    const attn_tile t = attn_tile_of<Splits>(p);
    const int kv_head = blockIdx.z * p.heads_kv + blockIdx.y;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < kKStages; s++) {
            mbar_init(&k_full[s], 1);
            mbar_init(&k_empty[s], 2);
        }
        for (int s = 0; s < kVStages; s++) {
            mbar_init(&v_full[s], 1);
            mbar_init(&v_empty[s], 2);
        }
        mbar_init_fence();
    }
    for (int i = threadIdx.x; i < kZeroBytes / 16; i += blockDim.x)
        reinterpret_cast<uint4 *>(szero)[i] = make_uint4(0, 0, 0, 0);
    /* The tensor cores read the zero block through the async proxy. */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    if (warpgroup == 0) {
        regs_shrink<24>();
        if (threadIdx.x == 0 && t.n_tiles > 0) {
            mbar_expect_tx(q_full, kQBytes);
            for (int c = 0; c < kChunks; c++)
                tma_load_2d(sq + c * kQChunk, map_q, q_full, 64 * c, static_cast<int>(t.q_row0));
            /* K leads V by one tile (K_0, K_1, V_0, K_2, V_1, ...): S of tile
             * j + 1 is issued beside P·V of tile j, and K has the deeper ring. */
            for (int j = 0; j <= t.n_tiles; j++) {
                if (j < t.n_tiles) {
                    const int s = j % kKStages;
                    mbar_wait(&k_empty[s], ((j / kKStages) & 1) ^ 1);
                    mbar_expect_tx(&k_full[s], kKVBytes);
                    for (int c = 0; c < kChunks; c++)
                        tma_load_3d(sk + s * kKVBytes + c * kKVChunk, map_k, &k_full[s], 64 * c,
                                    (t.j0 + j) * kBN, kv_head);
                }
                if (j > 0) {
                    const int v = j - 1, s = v % kVStages;
                    mbar_wait(&v_empty[s], ((v / kVStages) & 1) ^ 1);
                    mbar_expect_tx(&v_full[s], kKVBytes);
                    for (int c = 0; c < kChunks; c++)
                        tma_load_3d(sv + s * kKVBytes + c * kKVChunk, map_v, &v_full[s], 64 * c,
                                    (t.j0 + v) * kBN, kv_head);
                }
            }
        }
        if constexpr (Splits > 1) {
            /* The consumers' two cluster barriers (see the end). */
            cluster_sync();
            cluster_sync();
        }
        return;
    }

    regs_grow<240>();
    const int cw = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const int lane = tid % 32;
    const int quad = lane % 4;
    const int bar_id = 1 + cw; /* this warpgroup's named barrier */
    /* This thread's two rows (accumulator registers 4j + 0/1 and 4j + 2/3). */
    int rr[2], mq[2];
    bool valid[2];
    for (int h = 0; h < 2; h++) {
        rr[h] = t.r0 + cw * 64 + (tid / 32) * 16 + lane / 4 + 8 * h;
        valid[h] = rr[h] < t.rows;
        mq[h] = rr[h] % p.seq_q;
    }
    /* The smallest query index among the warpgroup's rows: keys past
     * min_m + diag are masked for some row. */
    const int wg_first = t.r0 + cw * 64;
    const int wg_last = min(wg_first + 63, t.rows - 1);
    const int wg_min_m =
        wg_first >= t.rows ? 0 : (wg_first / p.seq_q == wg_last / p.seq_q ? wg_first % p.seq_q : 0);

    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++)
        o[i] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    if (t.n_tiles > 0) {
        float s[kBN / 2];
        uint32_t pa[kBN / 4];
        float corr[2], rsum[2];
        mbar_wait(q_full, 0);
        const uint32_t q_base = sm90_smem_addr(sq) + cw * 64 * 128;
        /* Q as A fragments, read once from the swizzled tile: register 4kk + q
         * holds row lane/4 (+8 for q odd) of the warp's 16, columns 16kk +
         * 2(lane%4) (+8 for q >= 2), so S reads only K from shared memory. */
        uint32_t qa[QInRegisters ? HD / 4 : 1];
        if (QInRegisters) {
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int row = cw * 64 + (tid / 32) * 16 + lane / 4 + 8 * (q & 1);
                    const int unit = ((2 * kk + (q >> 1)) % 8) ^ (row % 8);
                    qa[4 * kk + q] = *reinterpret_cast<const uint32_t *>(
                        sq + (kk / 4) * kQChunk + row * 128 + unit * 16 + quad * 4);
                }
        }

        /* S = Q · K_j ᵀ into s, issued and committed (not waited). */
        auto issue_qk = [&](int stage) {
            const uint32_t k_base = sm90_smem_addr(sk + stage * kKVBytes);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                const uint64_t desc_k =
                    smem_desc(k_base + (kk / 4) * kKVChunk + (kk % 4) * 32, 16, 1024);
                if (QInRegisters)
                    wgmma_qk_rs<T>(s, &qa[4 * kk], desc_k, kk > 0);
                else
                    wgmma_qk<T>(s, smem_desc(q_base + (kk / 4) * kQChunk + (kk % 4) * 32, 16, 1024),
                                desc_k, kk > 0);
            }
            wgmma_commit();
        };
        /* O += P · V from pa, issued and committed: V of a stage, or the
         * zero block (exact: the CUDA cores add this tile's products after). */
        auto issue_pv = [&](int stage, bool zero) {
            const uint32_t v_base =
                zero ? sm90_smem_addr(szero) : sm90_smem_addr(sv + stage * kKVBytes);
            const uint32_t step = zero ? 0 : 2048, lbo = zero ? kZeroChunk : kKVChunk;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kBN / 16; kk++)
                wgmma_pv<HD, T>(o, &pa[4 * kk], smem_desc(v_base + kk * step, lbo, 1024));
            wgmma_commit();
        };
        auto visible = [&](int key, int h) {
            return key < p.seq_k && (!p.causal || key <= mq[h] + t.diag);
        };
        /* Masks, scales and exponentiates tile j's scores in s; corr and
         * rsum get each row's rescale factor and partial sum. O is not
         * touched: P·V of the previous tile may still be running. */
        auto softmax = [&](int j) {
            const int n0 = (t.j0 + j) * kBN;
            /* With a positive scale the maximum of the raw scores is the
             * maximum of the scaled ones, and each probability is one fma and
             * one exp2; otherwise the scores are scaled first (and masked
             * after: -inf times a negative or zero scale is not -inf). */
            const bool positive = p.scale_log2 > 0.0f;
            const float c = positive ? p.scale_log2 : 1.0f;
            if (!positive) {
#pragma unroll
                for (int i = 0; i < kBN / 2; i++)
                    s[i] *= p.scale_log2;
            }
            if (n0 + kBN > p.seq_k || (p.causal && n0 + kBN - 1 > wg_min_m + t.diag)) {
#pragma unroll
                for (int i = 0; i < kBN / 2; i++) {
                    const int key = n0 + 8 * (i / 4) + 2 * quad + (i & 1);
                    if (!visible(key, (i >> 1) & 1))
                        s[i] = -INFINITY;
                }
            }
            /* Row maxima as trees (a chain of 32 dependent max would
             * stall a warp that has its sub-partition to itself). */
            float mx[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float t[kBN / 4];
#pragma unroll
                for (int i = 0; i < kBN / 8; i++) {
                    t[2 * i] = s[4 * i + 2 * h];
                    t[2 * i + 1] = s[4 * i + 2 * h + 1];
                }
                static_assert(kBN / 4 == 32, "the tree below folds 32 values");
#pragma unroll
                for (int i = 0; i < 16; i++)
                    t[i] = max_nan(t[i], t[i + 16]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    t[i] = max_nan(t[i], t[i + 8]);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    t[i] = max_nan(t[i], t[i + 4]);
                mx[h] = max_nan(max_nan(t[0], t[2]), max_nan(t[1], t[3]));
            }
            float m_use[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mx[h] = max_nan(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
                mx[h] = max_nan(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
                const float m_new = max_nan(m_run[h], mx[h] * c);
                /* A row with no finite score yet keeps exp2(-inf - 0) = 0. */
                m_use[h] = m_new == -INFINITY ? 0.0f : m_new;
                corr[h] = exp2_approx(m_run[h] - m_use[h]);
                m_run[h] = m_new;
                rsum[h] = 0.0f;
            }
            /* Four partial sums per row, for the same reason. */
            float part[2][4] = {};
#pragma unroll
            for (int i = 0; i < kBN / 2; i++) {
                s[i] = exp2_approx(fmaf(s[i], c, -m_use[(i >> 1) & 1]));
                part[(i >> 1) & 1][(i >> 2) & 3] += s[i];
            }
#pragma unroll
            for (int h = 0; h < 2; h++)
                rsum[h] = (part[h][0] + part[h][1]) + (part[h][2] + part[h][3]);
        };
        /* After P·V of the previous tile: rescale O, fold the sums, and round
         * P into the A fragments (register 4c + q holds s[8c + 2q], s[8c + 2q + 1]). */
        auto rescale_and_pack = [&]() {
            /* Once the row maxima settle, corr is 1 for the whole warp and
             * the rescale is skipped. */
            if (!__all_sync(0xFFFFFFFFu, corr[0] == 1.0f && corr[1] == 1.0f)) {
#pragma unroll
                for (int i = 0; i < HD / 2; i++)
                    o[i] *= corr[(i >> 1) & 1];
            }
#pragma unroll
            for (int h = 0; h < 2; h++)
                l_run[h] = l_run[h] * corr[h] + rsum[h];
#pragma unroll
            for (int i = 0; i < kBN / 4; i++)
                pa[i] = attn_type<T>::pack(s[2 * i], s[2 * i + 1]);
        };
        /* P·V of tile j on the CUDA cores, skipping masked (row, key) pairs:
         * the quad's four lanes hold a row's 128 probabilities between them. */
        auto pv_exact = [&](int stage, int j) {
            const unsigned char *v = sv + stage * kKVBytes;
            const int n0 = (t.j0 + j) * kBN;
            for (int src = 0; src < 4; src++) {
#pragma unroll
                for (int i = 0; i < kBN / 4; i++) {
                    const uint32_t packed = __shfl_sync(0xFFFFFFFFu, pa[i], (lane & ~3) | src);
                    const float2 pr = attn_type<T>::unpack(packed);
                    /* pa[i] holds s[2i], s[2i+1]: register 2i is row (i & 1) of
                     * column group i / 2, columns 2 * src and 2 * src + 1. */
                    const int h = i & 1;
                    const int local = 8 * (i / 2) + 2 * src;
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int key = local + e;
                        if (!visible(n0 + key, h))
                            continue;
                        const float pk = e == 0 ? pr.x : pr.y;
#pragma unroll
                        for (int jo = 0; jo < HD / 8; jo++) {
                            /* V[key][8 jo + 2 quad .. + 1] in the swizzled box. */
                            const int unit = (jo % 8) ^ (key % 8);
                            const uint32_t w = *reinterpret_cast<const uint32_t *>(
                                v + (jo / 8) * kKVChunk + key * 128 + unit * 16 + quad * 4);
                            const float2 vv = attn_type<T>::unpack(w);
                            o[4 * jo + 2 * h] += pk * vv.x;
                            o[4 * jo + 2 * h + 1] += pk * vv.y;
                        }
                    }
                }
            }
        };
        /* Does V of tile j hold an inf or NaN that a masked key could carry? */
        auto v_needs_exact = [&](int stage, int j) {
            const int n0 = (t.j0 + j) * kBN;
            if (!p.causal || n0 + kBN - 1 <= wg_min_m + t.diag)
                return false;
            const uint4 *v = reinterpret_cast<const uint4 *>(sv + stage * kKVBytes);
            bool bad = false;
#pragma unroll 4
            for (int i = tid; i < kKVBytes / 16; i += 128) {
                const uint4 w = v[i];
                bad |= attn_type<T>::nonfinite2(w.x) || attn_type<T>::nonfinite2(w.y) ||
                       attn_type<T>::nonfinite2(w.z) || attn_type<T>::nonfinite2(w.w);
            }
            return warpgroup_any(bad, bar_id);
        };

        /* P·V of tile j issued: with V on the tensor cores, or, when the
         * tile needs the exact path, with the zero block (P is finite in
         * every row that is not already NaN, so O is unchanged). Either way
         * one commit group, so the waits count the same; no wgmma sits in a
         * branch, which would serialize them all. */
        auto pv_issue = [&](int j) {
            const int stage = j % kVStages;
            mbar_wait(&v_full[stage], (j / kVStages) & 1);
            const bool exact = v_needs_exact(stage, j);
            issue_pv(stage, exact);
            return exact;
        };
        /* After P·V of tile j is retired: the exact products, then V's stage
         * goes back to the producer. */
        auto pv_finish = [&](int j, bool exact) {
            if (exact) {
                pv_exact(j % kVStages, j);
                warpgroup_sync(bar_id); /* every thread is done reading V */
            }
            if (tid == 0)
                mbar_arrive(&v_empty[j % kVStages]);
        };

        /* Ping-pong: the consumer warpgroups take turns at issuing their
         * products (named barriers 3 and 4), so that one's softmax runs while
         * the other's products hold the tensor cores. Warpgroup 0 goes first;
         * each takes n_tiles + 1 turns, and warpgroup 1 lets its last one go
         * without handing over, so every arrive meets a wait. */
        auto turn_begin = [&]() {
            if (PingPong)
                consumers_wait(3 + cw);
        };
        auto turn_end = [&](bool last) {
            if (PingPong && !(last && cw == 1))
                consumers_arrive(3 + (1 - cw));
        };
        if (PingPong && cw == 1)
            consumers_arrive(3);

        turn_begin();
        mbar_wait(&k_full[0], 0);
        issue_qk(0);
        turn_end(false);
        wgmma_wait<0>();
        fence_operands(s);
        if (tid == 0)
            mbar_arrive(&k_empty[0]);
        softmax(0);
        rescale_and_pack();
        /* Tile j's S runs beside tile j - 1's P·V; the last P·V runs alone. */
        for (int j = 1; j < t.n_tiles; j++) {
            fence_operands(o);
            fence_operands(s);
            turn_begin();
            mbar_wait(&k_full[j % kKStages], (j / kKStages) & 1);
            issue_qk(j % kKStages);
            const bool exact = pv_issue(j - 1);
            turn_end(false);
            wgmma_wait<1>(); /* S of tile j is done; P·V may run on */
            fence_operands(s);
            if (tid == 0)
                mbar_arrive(&k_empty[j % kKStages]);
            softmax(j);
            wgmma_wait<0>();
            fence_operands(o);
            pv_finish(j - 1, exact);
            rescale_and_pack();
        }
        fence_operands(o);
        turn_begin();
        const bool exact = pv_issue(t.n_tiles - 1);
        turn_end(true);
        wgmma_wait<0>();
        fence_operands(o);
        pv_finish(t.n_tiles - 1, exact);
    }

    /* Normalize and store: the quad's four lanes hold partial row sums. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l_run[h] += __shfl_xor_sync(0xFFFFFFFFu, l_run[h], 1);
        l_run[h] += __shfl_xor_sync(0xFFFFFFFFu, l_run[h], 2);
    }
    if constexpr (Splits > 1) {
        attn_combine<TOut, HD, Splits>(smem, t, p, o, m_run, l_run, rr, cw * 128 + tid, quad);
    } else {
        TOut *out = static_cast<TOut *>(p.out);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!valid[h])
                continue;
            /* A row that sees no key is 0; one whose every score is -inf gets
             * 0 / 0 = NaN, as the reference's exp(-inf - -inf). */
            const bool none = p.causal && mq[h] + t.diag < 0;
            const float inv = 1.0f / l_run[h];
            const size_t row = t.q_row0 - t.r0 + static_cast<size_t>(rr[h]);
#pragma unroll
            for (int jo = 0; jo < HD / 8; jo++) {
                const float a = none ? 0.0f : o[4 * jo + 2 * h] * inv;
                const float b = none ? 0.0f : o[4 * jo + 2 * h + 1] * inv;
                store_pair(out, row * HD + 8 * jo + 2 * quad, a, b);
            }
        }
    }
}

} // namespace

/* The entry points' parameters: the tensor maps of Q, K and V, and the shape. */
#define TSR_ATTN_PARAMS                                                                            \
    const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,          \
        const __grid_constant__ CUtensorMap map_v, const __grid_constant__ tsr_attn_params p

/* An entry point that runs attn_body with the given template arguments; the
 * checks build their variants of the design with it too. */
#define TSR_ATTN_KERNEL(name, ...)                                                                 \
    extern "C" __global__ void __launch_bounds__(TSR_ATTN_THREADS, 1) name(TSR_ATTN_PARAMS)        \
    {                                                                                              \
        attn_body<__VA_ARGS__>(&map_q, &map_k, &map_v, p);                                         \
    }

/* One entry point per (input, output, head_dim), named for cuModuleGetFunction:
 * tsr_attn_<in>_<out>_d<head_dim>. */
#define TSR_ATTN_ENTRY(name, tin, tout, hd) TSR_ATTN_KERNEL(name, tin, tout, hd, true, true)

/* clang-format off */
#define TSR_ATTN_FAMILY(hd)                                                                        \
    TSR_ATTN_ENTRY(tsr_attn_bf16_f32_d##hd, __nv_bfloat16, float, hd)                              \
    TSR_ATTN_ENTRY(tsr_attn_bf16_bf16_d##hd, __nv_bfloat16, __nv_bfloat16, hd)                     \
    TSR_ATTN_ENTRY(tsr_attn_bf16_f16_d##hd, __nv_bfloat16, __half, hd)                             \
    TSR_ATTN_ENTRY(tsr_attn_f16_f32_d##hd, __half, float, hd)                                      \
    TSR_ATTN_ENTRY(tsr_attn_f16_bf16_d##hd, __half, __nv_bfloat16, hd)                             \
    TSR_ATTN_ENTRY(tsr_attn_f16_f16_d##hd, __half, __half, hd)
/* clang-format on */
TSR_ATTN_FAMILY(64)
TSR_ATTN_FAMILY(128)

/* Split keys for grids that would leave most multiprocessors idle (a decode
 * step of a small batch): a cluster of S CTAs shares each row tile, each takes
 * 1/S of its key tiles, and they combine their partial results through
 * distributed shared memory. Same input and output dtype only:
 * tsr_attn_<in>_<in>_d<head_dim>_s<S>, grid (S · row tiles, heads_kv, batch). */
#define TSR_ATTN_SPLIT_ENTRY(name, t, hd, splits)                                                  \
    extern "C" __global__ void __cluster_dims__(splits, 1, 1)                                      \
        __launch_bounds__(TSR_ATTN_THREADS, 1) name(TSR_ATTN_PARAMS)                               \
    {                                                                                              \
        attn_body<t, t, hd, true, true, splits>(&map_q, &map_k, &map_v, p);                        \
    }

TSR_ATTN_SPLIT_ENTRY(tsr_attn_bf16_bf16_d64_s4, __nv_bfloat16, 64, 4)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_bf16_bf16_d64_s8, __nv_bfloat16, 64, 8)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_f16_f16_d64_s4, __half, 64, 4)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_f16_f16_d64_s8, __half, 64, 8)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_bf16_bf16_d128_s4, __nv_bfloat16, 128, 4)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_bf16_bf16_d128_s8, __nv_bfloat16, 128, 8)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_f16_f16_d128_s4, __half, 128, 4)
TSR_ATTN_SPLIT_ENTRY(tsr_attn_f16_f16_d128_s8, __half, 128, 8)
