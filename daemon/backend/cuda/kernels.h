/*
 * cuda_kernels.h — what the CUDA backend compiles and how it launches it,
 * without touching a device.
 *
 * Everything here is host-only and needs no driver, so the compile-only path
 * (offline_compile.c) and the unit tests share it with backend_cuda.c:
 *
 *  - The candidates: "tier1" (tier 1, every kind: Tier-1 code generation +
 *    NVRTC), "gemm_wgmma" (tier 3, matmul and fused) and "swiglu_wgmma" (tier 3,
 *    gated), served by the hand-written Hopper kernels of kernels/gemm_sm90.cu,
 *    and "gemm_mma80" / "swiglu_mma80" (tier 3, the same kinds), served by the
 *    Ampere kernels of kernels/gemm_sm80.cu for sm_80 .. sm_89 and, behind the
 *    wgmma pair, on Hopper; and "attention_wgmma" (tier 3, attention), the
 *    flash-attention kernels of kernels/attn_sm90.cu. The build embeds all
 *    three images into the daemon.
 *  - The compiled blob the kernel cache stores: a fixed 128-byte header with the
 *    launch description (entry, grid, block, dynamic shared bytes, parameter
 *    count, image kind) followed by the cubin. A disk-cache hit after a restart
 *    can therefore load and launch without running code generation again. A
 *    tier-3 blob names an entry of the embedded module and carries no cubin.
 *  - The tier-3 launch plan: the kernel entry and grid for a region, the
 *    tsr_gemm_params and the three tensor-map descriptions, as pure functions of
 *    the region and the buffers' device addresses.
 *
 * Threading: pure functions, reentrant; tsrd_cuda_compile blocks while NVRTC
 * runs (call it from a worker thread).
 */
#ifndef TSRD_CUDA_KERNELS_H
#define TSRD_CUDA_KERNELS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../../kernels/attn_params.h"
#include "../../../kernels/gemm80_params.h"
#include "../../../kernels/gemm_params.h"
#include "tessera/codegen.h"
#include "backend/cuda/nvrtc.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/region.h"
#include "tessera/status.h"

/* Version of the CUDA backend's binaries: the blob format and the tier-3 launch
 * contract. Enters every kernel key the backend compiles (with the codegen
 * version folded in, see TSRD_CUDA_CODEGEN_VERSION). */
#define TSRD_CUDA_BLOB_VERSION 3
#define TSRD_CUDA_CODEGEN_VERSION (TSR_CODEGEN_VERSION * 100 + TSRD_CUDA_BLOB_VERSION)
#define TSRD_CUDA_BLOB_HEADER 160

/* Candidate names and versions. A tier-3 version changes with its kernel. */
#define TSRD_CUDA_TIER1 "tier1"
#define TSRD_CUDA_GEMM "gemm_wgmma"
#define TSRD_CUDA_SWIGLU "swiglu_wgmma"
/* Tier 1's kernels are the code generator's, so its version is the
 * generator's: verdicts, kept per candidate version (here and in the fleet
 * cache), never vouch for kernels a newer generator emits. */
#define TSRD_CUDA_TIER1_VERSION TSR_CODEGEN_VERSION
#define TSRD_CUDA_TIER3_VERSION 8
#define TSRD_CUDA_GEMM80 "gemm_mma80"
#define TSRD_CUDA_SWIGLU80 "swiglu_mma80"
#define TSRD_CUDA_MMA80_VERSION 1
#define TSRD_CUDA_ATTN "attention_wgmma"
#define TSRD_CUDA_ATTN_VERSION 2

/* The tier-0 reference on a CUDA device: a launch copies the inputs to the
 * host, runs the CPU reference executor and copies the output back. Rule 3 of
 * the arbiter falls back to it when nothing else verifies and the request
 * allows it; slow, and never chosen otherwise. */
#define TSRD_CUDA_REFERENCE "reference"
#define TSRD_CUDA_REFERENCE_VERSION 1

/* The fault-injection candidate registered when the daemon runs with
 * test_faults (TSRD_TEST_FAULT_CANDIDATE in backend.h): forced only; its kernel
 * stores far outside any allocation, so its launch ends in
 * CUDA_ERROR_ILLEGAL_ADDRESS and poisons the context. */
#define TSRD_CUDA_TEST_FAULT "test_fault"
#define TSRD_CUDA_TEST_FAULT_VERSION 1

/* The only architecture the wgmma tier-3 kernels are built for. */
#define TSRD_CUDA_TIER3_ARCH "sm_90a"

/* The cubin of kernels/gemm_sm90.cu embedded at build time; length 0 when the
 * build had no nvcc (the tier-3 candidates then decline everything). */
extern const unsigned char tsrd_gemm_sm90_cubin[];
extern const size_t tsrd_gemm_sm90_cubin_len;

/* The image of kernels/gemm_sm80.cu embedded at build time: a fatbin holding
 * sm_80 code (which every sm_8x runs), sm_90 code from the same source (Hopper
 * does not run sm_8x code) and compute_80 PTX. Length 0 without nvcc. */
extern const unsigned char tsrd_gemm_sm80_image[];
extern const size_t tsrd_gemm_sm80_image_len;

/* The cubin of kernels/attn_sm90.cu (sm_90a); length 0 without nvcc. */
extern const unsigned char tsrd_attn_sm90_cubin[];
extern const size_t tsrd_attn_sm90_cubin_len;

typedef enum tsrd_cuda_image {
    TSRD_CUDA_IMAGE_CUBIN = 1,     /* the blob's payload is a cubin */
    TSRD_CUDA_IMAGE_EMBEDDED = 2,  /* the entry lives in the embedded tier-3 module */
    TSRD_CUDA_IMAGE_REFERENCE = 3, /* the payload is the region's JSON form: the launch
                                    * runs the CPU reference on the buffers' bytes */
} tsrd_cuda_image;

typedef struct tsrd_cuda_launch_desc {
    tsrd_cuda_image image;
    char entry[64];
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_bytes; /* dynamic shared memory per block */
    int32_t n_params;      /* kernel parameters */
    /* The fingerprint of the kernel variant it was made for
     * (tsrd_cuda_variant; the region's own fingerprint for a kernel built per
     * shape): its code holds for that variant only, so a load for a region of
     * another variant refuses it. A variant's grid is the one of the shape it
     * was built at; a load for another shape of it computes its own. */
    tsr_fingerprint region;
} tsrd_cuda_launch_desc;

/* Header + payload into one malloc'd blob (*out, the caller frees). */
tsr_status tsrd_cuda_blob_encode(const tsrd_cuda_launch_desc *desc, const uint8_t *payload,
                                 size_t payload_len, uint8_t **out, size_t *out_len,
                                 tsr_error *err);

/* Checks and reads a blob; *payload points into bin. TSR_CORRUPT for a short,
 * foreign or inconsistent blob. */
tsr_status tsrd_cuda_blob_decode(const uint8_t *bin, size_t len, tsrd_cuda_launch_desc *desc,
                                 const uint8_t **payload, size_t *payload_len, tsr_error *err);

/* The "sm_90a"-style name of a compute capability: "a" is added for 9.0 so that
 * Hopper compiles for its architecture-specific features. */
void tsrd_cuda_arch_name(int major, int minor, char *buf, size_t size);

/* Registers reference (tier 0), tier1, gemm_wgmma, swiglu_wgmma, gemm_mma80,
 * swiglu_mma80 and attention_wgmma, in that order: on Hopper both tier-3 GEMM
 * pairs apply and the tie goes to the wgmma kernels, while the mma80 ones stay
 * forceable. */
tsr_status tsrd_cuda_register_candidates(tsr_arbiter *arbiter, tsr_error *err);

/* Fills *out with the candidate called name, test_fault included, with the
 * values registration uses. False, *out zeroed, for a name the backend lacks. */
bool tsrd_cuda_candidate(const char *name, tsr_candidate *out);
/* The same for one name each, for the backends (test_fault, registered only
 * with test_faults) and the GPU benchmark. */
void tsrd_cuda_candidate_tier1(tsr_candidate *out);
void tsrd_cuda_candidate_gemm(tsr_candidate *out);
void tsrd_cuda_candidate_swiglu(tsr_candidate *out);
void tsrd_cuda_candidate_test_fault(tsr_candidate *out);

/* True for the four tier-3 GEMM candidates (not attention_wgmma). */
int tsrd_cuda_candidate_is_tier3(const tsr_candidate *c);
/* True for attention_wgmma. */
int tsrd_cuda_candidate_is_attention(const tsr_candidate *c);

/* The variant of candidate c (one of this backend's, by name) that serves r
 * on arch, and its fingerprint: what a blob is made for and keyed by. */
tsr_status tsrd_cuda_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                             tsr_variant *v, tsr_fingerprint *fp, tsr_error *err);

/* Builds candidate c for r on arch. tier1: code generation for {arch, sm_count}
 * and NVRTC (nv required); tier-3: a blob naming the embedded entry (nv may be
 * NULL). TSR_COMPILE_FAILED with the NVRTC log; TSR_UNSUPPORTED when c does not
 * apply. */
tsr_status tsrd_cuda_compile(const tsrd_nvrtc *nv, int sm_count, const tsr_region *r,
                             const tsr_candidate *c, const char *arch, uint8_t **bin, size_t *len,
                             tsr_error *err);

/* ---- the tier-3 launch plan ---- */

typedef enum tsrd_gemm_family {
    TSRD_GEMM_WGMMA = 0, /* kernels/gemm_sm90.cu: tensor maps, persistent grid (but small M) */
    TSRD_GEMM_MMA80 = 1, /* kernels/gemm_sm80.cu: plain pointers, one block per tile */
} tsrd_gemm_family;

typedef struct tsrd_gemm_plan {
    tsrd_gemm_family family;
    /* tsr_gemm_<in>_<out>[_gated|_pp|_rows|_m<16|32|64>_n<128|256>|_m<16|32|64>_n128_gated]
     * or tsr_gemm80_<in>_<out>[_gated] */
    char entry[64];
    int gated;
    int m, n, k; /* n is H for a gated region */
    /* The wgmma family: grid is the tile count, which the launch clamps to the
     * multiprocessors (persistent kernels), except for the small-M kernels
     * (splits > 0): column tiles x splits CTAs, and the row kernels: row
     * blocks x splits CTAs, each launched as is in clusters of `splits` CTAs.
     * 0 for the persistent kernels and the mma80 family. */
    uint32_t grid, block, shared_bytes;
    int splits;
    uint32_t a_box_rows; /* rows of A's tensor-map box (wgmma family) */
    CUtensorMapDataType map_dtype;
    int n_ops;
    int ops[TSR_GEMM_MAX_EPILOGUE];
    int gate_act;
    int reduction;      /* TSR_GEMM_REDUCE_*: the _rows kernels (wgmma family only) */
    float eps;          /* rmsnorm and layer_norm */
    int bias_input;     /* signature index of bias, or -1 */
    int residual_input; /* signature index of residual, or -1 */
} tsrd_gemm_plan;

/* Plans r (matmul, fused or gated). TSR_UNSUPPORTED naming the rule when the
 * tier-3 kernels cannot serve it (the same rules as the candidates' applies). */
tsr_status tsrd_gemm_plan_make(const tsr_region *r, tsrd_gemm_plan *out, tsr_error *err);

/* The same for the Ampere family (same rules, its own entry names and geometry:
 * grid is the tile count, launched as is). */
tsr_status tsrd_gemm80_plan_make(const tsr_region *r, tsrd_gemm_plan *out, tsr_error *err);

/* The plan of tier-3 candidate c (either family) for r; TSR_UNSUPPORTED for a
 * candidate that is not tier 3. */
tsr_status tsrd_gemm_plan_for(const tsr_candidate *c, const tsr_region *r, tsrd_gemm_plan *out,
                              tsr_error *err);

/* The arguments of one cuTensorMapEncodeTiled call (rank 2 or 3). */
typedef struct tsrd_tmap_args {
    CUtensorMapDataType dtype;
    cuuint32_t rank;
    void *address;
    cuuint64_t dims[3];
    cuuint64_t strides[2];
    cuuint32_t box[3];
    cuuint32_t element_strides[3];
    CUtensorMapInterleave interleave;
    CUtensorMapSwizzle swizzle;
    CUtensorMapL2promotion l2_promotion;
    CUtensorMapFloatOOBfill oob_fill;
} tsrd_tmap_args;

/* Fills the three tensor maps' arguments (A, B, B2: B2 repeats B for the plain
 * kernels) and the kernel parameters from the device addresses of the inputs
 * (signature order) and the output. TSR_BUFFER_MISMATCH when an address is not
 * 16-byte aligned. */
tsr_status tsrd_gemm_launch_args(const tsrd_gemm_plan *plan, const CUdeviceptr *inputs,
                                 int n_inputs, CUdeviceptr output, tsrd_tmap_args maps[3],
                                 tsr_gemm_params *params, tsr_error *err);

/* The Ampere family's launch arguments (gemm80_params.h): operands[0..2] are A,
 * B and B2 (B2 repeats B for the plain kernels) and params as above (b_lbo and
 * b_sbo 0). Same alignment and input-count checks as tsrd_gemm_launch_args. */
tsr_status tsrd_gemm80_launch_args(const tsrd_gemm_plan *plan, const CUdeviceptr *inputs,
                                   int n_inputs, CUdeviceptr output, CUdeviceptr operands[3],
                                   tsr_gemm_params *params, tsr_error *err);

/* ---- the tier-3 attention plan ---- */

typedef struct tsrd_attn_plan {
    char entry[64]; /* tsr_attn_<in>_<out>_d<head_dim>, _s<splits> with split keys */
    int splits;     /* CTAs (one cluster) sharing a row tile's keys: 1, 4 or 8 */
    uint32_t grid[3];
    uint32_t block, shared_bytes;
    CUtensorMapDataType map_dtype;
    int batch, heads, heads_kv, seq_q, seq_k, head_dim;
    int causal;
    float scale_log2;
} tsrd_attn_plan;

/* Plans an attention region for kernels/attn_sm90.cu: bf16 or f16, head_dim =
 * head_dim_v ∈ {64, 128}, any output dtype. TSR_UNSUPPORTED naming the rule
 * otherwise (the candidate's applies reads the same message). The grid packs
 * the query heads of each kv head: (splits · ceil(group · seq_q / TSR_ATTN_BM),
 * heads_kv, batch); splits is 8 (or 4) where that many times the CTAs stay
 * within 2 · TSR_ATTN_SPLIT_SMS and the keys give each share two tiles, with
 * the input dtype out, else 1. */
tsr_status tsrd_attn_plan_make(const tsr_region *r, tsrd_attn_plan *out, tsr_error *err);

/* The three tensor maps (Q as {head_dim, batch · heads · seq_q}; K and V as
 * {head_dim, seq_k, batch · heads_kv}; 64-column, 128-byte-swizzled boxes of
 * TSR_ATTN_BM or TSR_ATTN_BN rows) and the kernel parameters, from the inputs'
 * device addresses (q, k, v) and the output's. TSR_BUFFER_MISMATCH when an
 * address is not 16-byte aligned. */
tsr_status tsrd_attn_launch_args(const tsrd_attn_plan *plan, const CUdeviceptr *inputs,
                                 int n_inputs, CUdeviceptr output, tsrd_tmap_args maps[3],
                                 tsr_attn_params *params, tsr_error *err);

#endif
