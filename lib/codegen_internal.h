/*
 * codegen_internal.h — the contract between the Tier-1 entry point (codegen.c)
 * and the generators of each kind: codegen_pointwise.c, codegen_matmul.c
 * (matmul, fused, gated) and codegen_attention.c. Each appends one kind's
 * kernel to the buffer, after the common prelude codegen.c has written, and
 * fills the launch description. They write through codegen_emit.h and never
 * call back into codegen.c.
 *
 * Threading: pure functions of their arguments; reentrant.
 */
#ifndef TESSERA_CODEGEN_INTERNAL_H
#define TESSERA_CODEGEN_INTERNAL_H

#include <stdint.h>

#include "codegen_emit.h"
#include "tessera/codegen.h"

/* The resolved target of one emission. */
typedef struct tsri_cg_target {
    const char *arch;
    int sm_count;
    uint32_t max_shared; /* tsr_codegen_max_shared_bytes(arch) */
    unsigned free_dims;  /* TSR_VARIANT_* taken at run time */
} tsri_cg_target;

tsr_status tsri_cg_pointwise(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err);
/* The pointwise kernel's launch alone, for a target with TSR_VARIANT_SHAPE. */
tsr_status tsri_cg_pointwise_launch(const tsr_region *r, const tsri_cg_target *t,
                                    tsr_codegen_launch *l, tsr_error *err);
tsr_status tsri_cg_matmul(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                          tsr_codegen_launch *l, tsr_error *err);
/* The matmul kinds' launch geometry alone (what tsri_cg_matmul fills). */
tsr_status tsri_cg_matmul_launch(const tsr_region *r, tsr_codegen_launch *l, tsr_error *err);
tsr_status tsri_cg_attention(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err);

#endif
