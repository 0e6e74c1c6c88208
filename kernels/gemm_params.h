/*
 * gemm_params.h — the launch contract between the daemon and the tier-3 GEMM
 * kernels in kernels/ (shared by host C and device CUDA code).
 *
 * Every tier-3 GEMM kernel takes three CUtensorMap parameters by value (A, B and
 * — for the gated kernels — the second weight matrix; unused ones may repeat B)
 * and one tsr_gemm_params. Tensors are dense row-major: A (M,K), B (K,N), the
 * output (M,N); bias (N,) and residual (M,N) are in the input dtype. The
 * epilogue ops use the tsr_op numbers of lib/include/tessera/ops.h.
 *
 * Requirements checked by the host before launch (the candidate declines
 * otherwise): K and N multiples of 8 (16-byte global strides for the tensor
 * maps), device pointers 16-byte aligned. M, N and K need not be multiples of
 * the tile: the tensor-map loads fill out-of-range elements with zeros and the
 * stores are predicated.
 *
 * The kernels are persistent: any grid size is correct (each CTA walks tiles
 * blockIdx.x, + gridDim.x, ...); min(tiles, multiprocessors) is the fast one.
 * Except the small-M kernels (below): their grid is exactly column tiles x
 * splits, launched in clusters of `splits` CTAs along x.
 */
#ifndef TSR_GEMM_PARAMS_H
#define TSR_GEMM_PARAMS_H

#define TSR_GEMM_MAX_EPILOGUE 16

/* Tile geometry, fixed at build time. */
#define TSR_GEMM_BM 128
#define TSR_GEMM_BN 256       /* plain kernels without an epilogue: cooperative */
#define TSR_GEMM_BN_GATED 128 /* gated kernels: two 128-wide B tiles */
#define TSR_GEMM_BK 64
#define TSR_GEMM_STAGES 4
#define TSR_GEMM_THREADS 384 /* one producer and two consumer warpgroups */
/* The epilogue's scratch: one 16 x 32 f32 block per consumer warp, rows padded
 * to 40 floats so that in the plain kernels neither the fragment writes nor the
 * row reads of a half-warp meet in a bank. */
#define TSR_GEMM_SCRATCH_STRIDE 40
#define TSR_GEMM_SCRATCH_BYTES (8 * 16 * TSR_GEMM_SCRATCH_STRIDE * 4)
/* Four stages of A (16 KiB) + B (32 KiB), the scratch, 1 KiB of alignment
 * slack, barriers. */
#define TSR_GEMM_SMEM_BYTES                                                                        \
    (TSR_GEMM_STAGES * (16384 + 32768) + TSR_GEMM_SCRATCH_BYTES + 1024 + 256)
/* The kernels with an epilogue (tsr_gemm_<in>_<out>_pp) for more than
 * TSR_GEMM_NARROW_M rows: ping-pong. Each of the two consumer warpgroups owns
 * a whole 64 x 256 output tile and the two take the CTA's tiles in turn, so one's
 * epilogue runs while the other's products keep the tensor cores busy. A's
 * tensor map has 64-row boxes (TSR_GEMM_BM_PINGPONG); five stages of A (8 KiB)
 * + B (32 KiB), the scratch, slack and barriers. */
#define TSR_GEMM_BM_PINGPONG 64
#define TSR_GEMM_BN_PINGPONG 256
#define TSR_GEMM_STAGES_PINGPONG 5
#define TSR_GEMM_SMEM_BYTES_PINGPONG                                                               \
    (TSR_GEMM_STAGES_PINGPONG * (8192 + 32768) + TSR_GEMM_SCRATCH_BYTES + 1024 + 256)
/* The row-reduction kernels (tsr_gemm_<in>_<out>_rows): a fused product whose
 * rows are normalized (rmsnorm, layer_norm, softmax) over N <=
 * TSR_GEMM_ROWS_MAX_N columns. A cluster of `splits` CTAs owns one row block
 * of 64 rows (grid = row blocks x splits, not persistent); CTA rank r takes
 * the block's 64 x 256 column tiles r, r + splits, ..., which its two
 * consumers take in turn (ping-pong). Each tile's epilogue keeps per-row
 * statistics in shared memory and stores values scaled by its own
 * statistics; then every CTA combines the cluster's statistics per row
 * (distributed shared memory) and rescales its tiles in place. Sharing a
 * block between CTAs keeps fewer blocks of A live at once, so that the A rows
 * a CTA reads again for each of its tiles stay in L2. Four stages of A
 * (8 KiB) + B (32 KiB), the scratch, the statistics (one float2 per row and
 * tile) and the row scalars, slack and barriers. */
#define TSR_GEMM_ROWS_MAX_N 8192
#define TSR_GEMM_ROWS_MAX_TILES (TSR_GEMM_ROWS_MAX_N / TSR_GEMM_BN_PINGPONG)
#define TSR_GEMM_STAGES_ROWS 4
#define TSR_GEMM_SMEM_BYTES_ROWS                                                                   \
    (TSR_GEMM_STAGES_ROWS * (8192 + 32768) + TSR_GEMM_SCRATCH_BYTES +                              \
     (TSR_GEMM_ROWS_MAX_TILES + 1) * TSR_GEMM_BM_PINGPONG * 8 + 1024 + 256)
/* tsr_gemm_params.reduction */
#define TSR_GEMM_REDUCE_NONE 0
#define TSR_GEMM_REDUCE_RMSNORM 1
#define TSR_GEMM_REDUCE_LAYER_NORM 2
#define TSR_GEMM_REDUCE_SOFTMAX 3
/* The small-M kernels (tsr_gemm_<in>_<out>_m<MW>_n<TN>) for M <=
 * TSR_GEMM_NARROW_M, with or without an epilogue: a decode step's product,
 * bound by the stream of B. They compute the transposed product, Cᵀ = Bᵀ·Aᵀ,
 * so that a tile's TN columns of B (128 or 256) sit on wgmma's 64-row side
 * and the few rows of A on its N side (m64nMWk16, MW = 16, 32 or 64, the
 * smallest that holds M). The K dimension is split over a cluster of up to
 * TSR_GEMM_SPLIT_MAX CTAs, so that a product with few column tiles still
 * streams B through many multiprocessors; the cluster adds its partial tiles
 * through distributed shared memory and applies the epilogue. One tile per
 * cluster (not persistent): grid = column tiles x splits, the cluster's size
 * given at launch. Stages of B (TN x 64 x 2 bytes; gated: TN = 128 columns of
 * both weights, TSR_GEMM_SMALL_STAGE_BYTES(mw, 256)) + A (MW x 64 x 2 bytes),
 * as many as fit 220 KiB, at most 12. */
#define TSR_GEMM_NARROW_M 64
#define TSR_GEMM_SPLIT_MAX 8
/* CTAs resident at once at one CTA per multiprocessor, by cluster size, as
 * the H200 (132 SMs) reports them (cudaOccupancyMaxActiveClusters): 66
 * clusters of 2, but only 30 of 4 and 15 of 8 — a grid of 128 CTAs in
 * clusters of 4 runs in two waves. A split grid stays within these. */
#define TSR_GEMM_SPLIT_CTAS_PAIRS 132
#define TSR_GEMM_SPLIT_CTAS_WIDE 120
/* The CTAs in clusters of `splits` resident at once (the counts above). */
static inline long long tsr_gemm_cluster_cap(int splits)
{
    return splits <= 2 ? TSR_GEMM_SPLIT_CTAS_PAIRS : TSR_GEMM_SPLIT_CTAS_WIDE;
}
#define TSR_GEMM_SMALL_STAGE_BYTES(mw, tn) (64 * (tn)*2 + (mw)*64 * 2)
#define TSR_GEMM_STAGES_SMALL(mw, tn)                                                              \
    (225280 / TSR_GEMM_SMALL_STAGE_BYTES(mw, tn) > 12                                              \
         ? 12                                                                                      \
         : 225280 / TSR_GEMM_SMALL_STAGE_BYTES(mw, tn))
#define TSR_GEMM_SMEM_BYTES_SMALL(mw, tn)                                                          \
    (TSR_GEMM_STAGES_SMALL(mw, tn) * TSR_GEMM_SMALL_STAGE_BYTES(mw, tn) + 1024 + 256)

/* The small-M kernel's wgmma N for m rows (1 .. TSR_GEMM_NARROW_M). */
static inline int tsr_gemm_small_rows(int m)
{
    return m <= 16 ? 16 : (m <= 32 ? 32 : 64);
}

/* The small-M kernel's tile width (*tn: 256 or 128; 128 only when gated, whose
 * stages hold 128 columns of both weights) and K split (*splits: 1, 2, 4 or 8)
 * for an n x k product: the most CTAs that are resident at once
 * (TSR_GEMM_SPLIT_CTAS_*), each share two K slices or more; at equal counts
 * the wider tile and the fewer shares. Where no grid fits one wave (N past
 * 33 792), 128-column tiles unsplit, whose last wave is the least empty.
 * Measured on the H200 (docs/benchmarks.md): M 16 N 8192 K 8192 runs 0.037 ms
 * with 128 columns in pairs, against 0.045 in 4-CTA clusters of 256 columns
 * that spill into a second wave. The counts are the H200's (and an H100 SXM's,
 * 132 SMs too); on a part with fewer multiprocessors a grid may take two waves,
 * which costs speed, not correctness. */
static inline void tsr_gemm_small_plan(int n, int k, int gated, int *tn, int *splits)
{
    const long long k_tiles = ((long long)k + 63) / 64;
    long long best = 0;
    *tn = 128;
    *splits = 1;
    for (int w = gated ? 128 : 256; w >= 128; w /= 2) {
        const long long tiles = ((long long)n + w - 1) / w;
        for (int s = 1; s <= TSR_GEMM_SPLIT_MAX; s *= 2) {
            if (s > 1 && k_tiles < 2 * s)
                break;
            const long long ctas = tiles * s;
            if (ctas <= tsr_gemm_cluster_cap(s) && ctas > best) {
                best = ctas;
                *tn = w;
                *splits = s;
            }
        }
    }
}

/* The row kernels' cluster size for row_blocks blocks of tiles_n column
 * tiles: the most CTAs within one wave (TSR_GEMM_SPLIT_CTAS_*) over 2, 4 or 8
 * CTAs per block, at most one per tile; 2 where none fits one wave (a large M,
 * whose blocks then run in waves), 1 for a single column tile. */
static inline int tsr_gemm_rows_plan(long long row_blocks, int tiles_n)
{
    if (tiles_n < 2)
        return 1;
    int best_splits = 2;
    long long best = 0;
    for (int s = 2; s <= TSR_GEMM_SPLIT_MAX && s <= tiles_n; s *= 2) {
        const long long ctas = row_blocks * s;
        if (ctas <= tsr_gemm_cluster_cap(s) && ctas > best) {
            best = ctas;
            best_splits = s;
        }
    }
    return best_splits;
}

typedef struct tsr_gemm_params {
    int m, n, k;
    int n_ops;                      /* epilogue chain length */
    int ops[TSR_GEMM_MAX_EPILOGUE]; /* tsr_op numbers: bias, relu, gelu, silu, sigmoid, tanh */
    int gate_act;                   /* gated kernels: the activation applied to A@Wg */
    const void *bias;               /* (N,) or NULL */
    const void *residual;           /* (M,N) or NULL */
    void *out;                      /* (M,N) in the output dtype */
    /* Shared-memory descriptor strides of the MN-major B tiles, in bytes:
     * lbo between 64-column chunks, sbo between groups of 8 K rows. */
    unsigned b_lbo, b_sbo;
    int reduction; /* TSR_GEMM_REDUCE_*: the _rows kernels only */
    float eps;     /* rmsnorm and layer_norm */
} tsr_gemm_params;

#endif
