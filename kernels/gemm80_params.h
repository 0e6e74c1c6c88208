/*
 * gemm80_params.h — the launch contract between the daemon and the tier-3 GEMM
 * kernels for Ampere-class GPUs in kernels/gemm_sm80.cu (host C and device CUDA).
 *
 * Every entry point tsr_gemm80_<in>_<out>[_gated] takes four parameters:
 *
 *   const void *a        A (M,K), row-major, the input dtype
 *   const void *b        B (K,N), row-major (the gate weights Wg (K,H) when gated)
 *   const void *b2       the up weights Wu (K,H) of the gated kernels; the plain
 *                        kernels ignore it (pass b again)
 *   tsr_gemm_params p    as for the Hopper kernels (gemm_params.h): sizes, the
 *                        epilogue chain, gate_act, bias, residual, out. b_lbo
 *                        and b_sbo are unused and may be 0.
 *
 * Requirements checked by the host before launch (the candidate declines
 * otherwise): K and N multiples of 8 and every pointer 16-byte aligned, so that
 * each 16-byte cp.async lies wholly inside or wholly outside a row. M, N and K
 * need not be multiples of the tile: out-of-range chunks are zero-filled and the
 * stores are bounds-checked.
 *
 * Launch: TSR_GEMM80_THREADS threads and TSR_GEMM80_SMEM_BYTES of dynamic shared
 * memory per block (above the 48 KiB default: set the function attribute). Any
 * grid size is correct (each block walks tiles blockIdx.x, + gridDim.x, ...);
 * one block per tile is the fast one, two blocks fit on a multiprocessor.
 */
#ifndef TSR_GEMM80_PARAMS_H
#define TSR_GEMM80_PARAMS_H

#include "gemm_params.h"

#define TSR_GEMM80_BM 128
#define TSR_GEMM80_BN 128      /* plain kernels: a 128-wide tile of C */
#define TSR_GEMM80_BN_GATED 64 /* gated kernels: 64 columns of both products */
#define TSR_GEMM80_BK 32
#define TSR_GEMM80_STAGES 4
#define TSR_GEMM80_THREADS 256 /* eight warps, each a 64 x 32 block of products */
/* Padded shared-memory rows (16 bytes past the data) keep ldmatrix free of bank
 * conflicts: A stages are 128 rows of 32 + 8 elements, B stages 32 rows of
 * 128 + 8 elements. */
#define TSR_GEMM80_A_STRIDE (TSR_GEMM80_BK + 8)
#define TSR_GEMM80_B_STRIDE (TSR_GEMM80_BN + 8)
#define TSR_GEMM80_STAGE_BYTES                                                                     \
    (2 * (TSR_GEMM80_BM * TSR_GEMM80_A_STRIDE + TSR_GEMM80_BK * TSR_GEMM80_B_STRIDE))
#define TSR_GEMM80_SMEM_BYTES (TSR_GEMM80_STAGES * TSR_GEMM80_STAGE_BYTES)

#endif
