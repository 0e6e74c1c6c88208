/*
 * tessera/ops.h — the pointwise op table, the single source of truth for ops.
 *
 * Each op has one row: its JSON name, arity, where it may appear (pointwise DAG,
 * matmul prologue, matmul epilogue / gate activation), its attributes, its
 * reference implementation and its CUDA C expression for the code generator.
 * Meaning is numpy's on float32 (docs/regions.md, "Ops"); NaN propagates through every op,
 * including maximum, minimum, relu, clamp and sign, which bare CUDA fmaxf/fminf
 * would not do — so the CUDA expressions call the NaN-preserving helpers that
 * tsr_ops_cuda_prelude() defines.
 *
 * Threading: the table is immutable; every function is reentrant.
 */
#ifndef TESSERA_OPS_H
#define TESSERA_OPS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers are stable: the fingerprint encodes ops by these numbers. Append only. */
typedef enum tsr_op {
    /* binary */
    TSR_OP_ADD = 0,
    TSR_OP_SUB = 1,
    TSR_OP_MUL = 2,
    TSR_OP_DIV = 3,
    TSR_OP_MAXIMUM = 4,
    TSR_OP_MINIMUM = 5,
    TSR_OP_POW = 6,
    /* unary */
    TSR_OP_NEG = 7,
    TSR_OP_ABS = 8,
    TSR_OP_EXP = 9,
    TSR_OP_LOG = 10,
    TSR_OP_SQRT = 11,
    TSR_OP_RSQRT = 12,
    TSR_OP_LOG1P = 13,
    TSR_OP_EXPM1 = 14,
    TSR_OP_RECIPROCAL = 15,
    TSR_OP_RELU = 16,
    TSR_OP_SIGMOID = 17,
    TSR_OP_TANH = 18,
    TSR_OP_SILU = 19,
    TSR_OP_SOFTPLUS = 20,
    TSR_OP_SIGN = 21,
    TSR_OP_GELU = 22,
    /* unary with attributes "min" and/or "max" (np.clip) */
    TSR_OP_CLAMP = 23,
    /* nullary: a scalar constant, attribute "value" */
    TSR_OP_CONST = 24,
    /* epilogue only: add the bias vector (N,) of a fused region */
    TSR_OP_BIAS = 25,
} tsr_op;

#define TSR_OP_COUNT 26

/* Where an op may appear. */
enum tsr_op_flags {
    TSR_OPF_POINTWISE = 1u << 0,  /* in a pointwise DAG */
    TSR_OPF_PROLOGUE = 1u << 1,   /* in a fused region's prologue (unary, on A) */
    TSR_OPF_EPILOGUE = 1u << 2,   /* in a fused epilogue and as a gated gate_act */
    TSR_OPF_HAS_BOUNDS = 1u << 3, /* takes "min"/"max" (clamp) */
    TSR_OPF_HAS_VALUE = 1u << 4,  /* takes "value" (const) */
};

/* Attributes an op node may carry. */
typedef struct tsr_op_attrs {
    double value; /* const */
    double min;   /* clamp, when has_min */
    double max;   /* clamp, when has_max */
    bool has_min;
    bool has_max;
} tsr_op_attrs;

typedef struct tsr_op_info {
    tsr_op op;
    const char *name; /* JSON name: "add", "relu", ... */
    int arity;        /* 0, 1 or 2 arguments (bias counts as 1: the accumulator) */
    unsigned flags;   /* enum tsr_op_flags */
    /* Reference semantics in f64. a and b are the arguments (b unused when unary,
     * both unused for const); the result is what numpy's float32 op gives, before
     * rounding. NULL only for bias, whose operand comes from a tensor. */
    double (*reference)(double a, double b, const tsr_op_attrs *attrs);
    /* CUDA C expression over float operands written $0 and $1, attributes written
     * $min, $max and $value (substituted as float literals by the generator), e.g.
     * "tsr_maximum($0, $1)". Uses only helpers from tsr_ops_cuda_prelude(). */
    const char *cuda_expr;
} tsr_op_info;

/* The row for an op; NULL for an out-of-range value. */
const tsr_op_info *tsr_op_info_get(tsr_op op);

/* Looks an op up by its JSON name (exact match). NULL when unknown. */
const tsr_op_info *tsr_op_info_find(const char *name);

/* Convenience: the JSON name of op, "?" when out of range. */
const char *tsr_op_name(tsr_op op);

/* CUDA C source (device functions, all __device__ __forceinline__ float) that
 * every cuda_expr may call: tsr_maximum, tsr_minimum, tsr_relu, tsr_clamp,
 * tsr_sign, tsr_gelu, tsr_silu, tsr_sigmoid, tsr_softplus, ... Static string. */
const char *tsr_ops_cuda_prelude(void);

#ifdef __cplusplus
}
#endif
#endif
