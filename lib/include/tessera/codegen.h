/*
 * tessera/codegen.h — Tier-1 code generation: CUDA C source emitted from the IR.
 *
 * tsr_codegen_emit turns one validated region into one complete CUDA C
 * translation unit holding one kernel, plus the description a launcher needs.
 * Every dimension, stride and attribute is baked into the source as a
 * constant, except the dimensions the target leaves free
 * (tsr_codegen_target.free_dims): those the kernel takes as parameters, so
 * that one binary serves every value of them (a kernel variant,
 * fingerprint.h). Matmul, fused and gated kernels can leave M free;
 * attention kernels batch, seq_q and seq_k (the three together); pointwise
 * kernels their whole shape (TSR_VARIANT_SHAPE): one binary serves every
 * shape of a broadcast pattern (tsr_codegen_pointwise_class), and takes the
 * output's dims merged where the pattern allows.
 *
 * Parameter convention (every kind): the kernel's parameters are device
 * pointers (8 bytes each, CUdeviceptr), first the inputs in tsr_region_signature
 * order, then the output; then one 64-bit signed integer (long long) per free
 * dimension, in TSR_VARIANT_* bit order (launch.n_dims of them). Tensors are dense row-major in the
 * signature's dtypes. Every pointer must be aligned to its element size; the
 * pointwise kernel checks at run time whether all of them are 16-byte aligned
 * and takes its vectorized path only then.
 *
 * The source includes no header at all: 16-bit storage is handled as raw
 * unsigned short bits (f16 through the PTX cvt instructions, bf16 by bit
 * arithmetic rounding to nearest even), so it compiles under NVRTC with no -I
 * option for any sm_70 or newer architecture. Loads widen to f32, all arithmetic
 * runs in f32, stores round to nearest even; NaN stays NaN. The op helpers come
 * from tsr_ops_cuda_prelude() (ops.h). docs/kernels.md describes each kernel's
 * tiling, launch geometry and limits.
 *
 * TSR_CODEGEN_VERSION enters the kernel cache key (fingerprint.h); it changes
 * whenever the emitted code for any region changes.
 *
 * Threading: pure functions of their arguments; reentrant.
 */
#ifndef TESSERA_CODEGEN_H
#define TESSERA_CODEGEN_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/fingerprint.h"
#include "tessera/region.h"
#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_CODEGEN_VERSION 7

/* Default multiprocessor count (H100 SXM / H200) when the target gives none. */
#define TSR_CODEGEN_DEFAULT_SM_COUNT 132

typedef struct tsr_codegen_target {
    const char *arch; /* "sm_90a", "sm_80", ...; NULL means "sm_90a" */
    int sm_count;     /* multiprocessors of the device; 0 means the default */
    /* TSR_VARIANT_* dimensions taken at run time; 0 bakes every one in.
     * TSR_VARIANT_ROWS for matmul, fused and gated regions; BATCH | SEQ_Q |
     * SEQ_K for attention; SHAPE for pointwise. */
    unsigned free_dims;
} tsr_codegen_target;

/* How to launch the emitted kernel. */
typedef struct tsr_codegen_launch {
    char entry[64];    /* extern "C" name of the kernel in the source */
    uint32_t grid[3];  /* blocks; only grid[0] is ever above 1 */
    uint32_t block[3]; /* threads per block; only block[0] is ever above 1 */
    /* Dynamic shared memory in bytes, passed to cuLaunchKernel. Above 48 KiB the
     * launcher must first raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
     * to this value (the attention kernel needs it for large head dims). */
    uint32_t shared_bytes;
    int n_inputs; /* pointer parameters before the output */
    int n_dims;   /* 64-bit dimension parameters after the output */
    int n_params; /* n_inputs + 1 + n_dims */
    /* Their values at the region's shape: M; batch, seq_q, seq_k; or the
     * pointwise output's merged dims, outermost first. */
    long long dims[TSR_MAX_RANK];
} tsr_codegen_launch;

typedef struct tsr_codegen_kernel {
    char *source;      /* malloc'd, NUL-terminated CUDA C */
    size_t source_len; /* strlen(source) */
    tsr_codegen_launch launch;
} tsr_codegen_kernel;

/* Emits the kernel for r (validated) on target (NULL: defaults). On success
 * *out owns a malloc'd source; release it with tsr_codegen_kernel_free.
 * Errors: TSR_INVALID_ARGUMENT for a NULL argument or a misspelt arch;
 * TSR_UNSUPPORTED when the region is valid but past this generator's limits
 * (attention head dims whose tiles do not fit the arch's shared memory, grids
 * past 2^31 - 1 blocks), naming the limit; TSR_NO_MEMORY. *out is zeroed on
 * failure. */
tsr_status tsr_codegen_emit(const tsr_region *r, const tsr_codegen_target *target,
                            tsr_codegen_kernel *out, tsr_error *err);

/* The launch description tsr_codegen_emit would give for r on target,
 * without the source: for a kernel built for another shape of r's variant,
 * the grid of r's own shape. Same errors as tsr_codegen_emit. */
tsr_status tsr_codegen_launch_of(const tsr_region *r, const tsr_codegen_target *target,
                                 tsr_codegen_launch *out, tsr_error *err);

/* The class of a pointwise region's shape-generic kernel (tsr_variant.cls):
 * its broadcast pattern, "pw" and per merged output dim the mask of the inputs
 * broadcasting along it, in hex ("pw.0.2"). Two shapes of one region share a
 * binary exactly when their classes are equal. r must be validated. */
void tsr_codegen_pointwise_class(const tsr_region *r, char cls[TSR_VARIANT_CLASS_MAX]);

/* Frees the source and zeroes *k. Safe on a zeroed kernel and safe to repeat. */
void tsr_codegen_kernel_free(tsr_codegen_kernel *k);

/* Most dynamic shared memory one block may use on arch, in bytes (227 KiB on
 * sm_90, 163 KiB on sm_80, ...); 48 KiB for an architecture it does not know.
 * 0 for a misspelt arch. */
uint32_t tsr_codegen_max_shared_bytes(const char *arch);

#ifdef __cplusplus
}
#endif
#endif
