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
/* The narrow plain kernels (tsr_gemm_<in>_<out>_n64) for M <= TSR_GEMM_NARROW_M:
 * 128 x 64 tiles, so that a decode-size product's few row tiles still make
 * enough tiles for every multiprocessor, and eight stages of A (16 KiB) + B
 * (8 KiB) in flight, as such a product is bound by the weights' stream. */
#define TSR_GEMM_NARROW_M 64
#define TSR_GEMM_BN_NARROW 64
#define TSR_GEMM_STAGES_NARROW 8
#define TSR_GEMM_SMEM_BYTES_NARROW                                                                 \
    (TSR_GEMM_STAGES_NARROW * (16384 + 8192) + TSR_GEMM_SCRATCH_BYTES + 1024 + 256)

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
} tsr_gemm_params;

#endif
