/*
 * codegen_emit.h — the text-emitting helpers every Tier-1 generator writes with:
 * a growing source buffer, exact float literals, op-expression substitution and
 * one-dimensional launch geometry.
 *
 * The layering runs one way: codegen.c (entry point) calls the kind generators
 * of codegen_<kind>.c (codegen_internal.h), and both write through these
 * helpers; codegen_emit.c calls neither.
 *
 * Ownership: a tsri_cg_buf owns its data (free it with free()).
 * Threading: no shared state; a buffer is used by one thread at a time.
 */
#ifndef TESSERA_CODEGEN_EMIT_H
#define TESSERA_CODEGEN_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/codegen.h"
#include "tessera/ops.h"

/* A growing text; after an allocation failure it stays failed and drops text. */
typedef struct tsri_cg_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} tsri_cg_buf;

void tsri_cg_puts(tsri_cg_buf *b, const char *s);
void tsri_cg_printf(tsri_cg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A float constant as exact CUDA C: "__uint_as_float(0x3f000000u)". buf holds
 * at least 32 bytes. */
const char *tsri_cg_float(char *buf, double value);

/* Appends op's CUDA expression with $0 / $1 replaced by a0 / a1 and the
 * attributes by float literals (an absent clamp bound by -inf / +inf). */
void tsri_cg_op_expr(tsri_cg_buf *b, tsr_op op, const tsr_op_attrs *attrs, const char *a0,
                     const char *a1);

/* Sets grid and block from one-dimensional counts; fails with TSR_UNSUPPORTED
 * when blocks is past 2^31 - 1. */
tsr_status tsri_cg_geometry(tsr_codegen_launch *l, int64_t blocks, int threads, tsr_error *err);

#endif
