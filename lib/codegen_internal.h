/*
 * codegen_internal.h — what the Tier-1 generators of each kind share.
 *
 * codegen.c holds the text buffer, the storage-dtype helpers every kernel uses,
 * float literals and op-expression substitution; codegen_pointwise.c,
 * codegen_matmul.c (matmul, fused, gated) and codegen_attention.c each emit one
 * kind's kernel into the buffer and fill the launch description.
 */
#ifndef TESSERA_CODEGEN_INTERNAL_H
#define TESSERA_CODEGEN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "tessera/codegen.h"

/* A growing text; after an allocation failure it stays failed and drops text. */
typedef struct tsri_cg_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} tsri_cg_buf;

void tsri_cg_puts(tsri_cg_buf *b, const char *s);
void tsri_cg_printf(tsri_cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The resolved target of one emission. */
typedef struct tsri_cg_target {
    const char *arch;
    int sm_count;
    uint32_t max_shared; /* tsr_codegen_max_shared_bytes(arch) */
} tsri_cg_target;

/* Writes the file header comment, the storage helpers (tsr_in_t, tsr_out_t,
 * tsr_load, tsr_store and the raw conversions) and the op prelude. */
void tsri_cg_common(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t);

/* A float constant as exact CUDA C: "__int_as_float(0x3f000000u)". buf holds
 * at least 32 bytes. */
const char *tsri_cg_float(char *buf, double value);

/* Appends op's CUDA expression with $0 / $1 replaced by a0 / a1 and the
 * attributes by float literals (an absent clamp bound by -inf / +inf). */
void tsri_cg_op_expr(tsri_cg_buf *b, tsr_op op, const tsr_op_attrs *attrs, const char *a0,
                     const char *a1);

/* Sets grid and block from one-dimensional counts; fails with TSR_UNSUPPORTED
 * when blocks is past 2^31 - 1. */
tsr_status tsri_cg_geometry(tsr_codegen_launch *l, int64_t blocks, int threads, tsr_error *err);

tsr_status tsri_cg_pointwise(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err);
tsr_status tsri_cg_matmul(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                          tsr_codegen_launch *l, tsr_error *err);
tsr_status tsri_cg_attention(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err);

#endif
