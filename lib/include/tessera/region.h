/*
 * tessera/region.h — the region IR: one fusable unit of work (docs/regions.md).
 *
 * A region is a plain value: a tagged union over the five kinds. Only a pointwise
 * region owns heap memory (its node array); tsr_region_free releases it, and
 * tsr_region_copy makes an independent deep copy. Everything else is inline, so
 * a region of any other kind may be copied with `=`.
 *
 * Regions come from tsr_region_from_json (json.h), from the protobuf form
 * (region_pb.h), or from the constructors below. All three leave the region
 * *validated*: tsr_region_validate has run, defaults are filled in (out_dtype,
 * heads_kv, head_dim_v, scale, eps) and pointwise names are resolved to value
 * indices. Code that receives a region may rely on that; code that builds one by
 * hand must call tsr_region_validate before using it.
 *
 * Every rule of docs/regions.md is checked by tsr_region_validate and reported with a
 * precise status (status.h) and a message naming the field, e.g.
 * "ops[3].args[0]: undefined name 'x'". Nothing is silently fixed.
 *
 * Threading: no shared state; a region may be read from many threads at once.
 */
#ifndef TESSERA_REGION_H
#define TESSERA_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/dtype.h"
#include "tessera/ops.h"
#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers are stable (fingerprint and wire use them; proto RegionKind is this + 1). */
typedef enum tsr_region_kind {
    TSR_KIND_MATMUL = 0,
    TSR_KIND_FUSED = 1,
    TSR_KIND_GATED = 2,
    TSR_KIND_ATTENTION = 3,
    TSR_KIND_POINTWISE = 4,
} tsr_region_kind;

#define TSR_KIND_COUNT 5

/* "matmul", "fused", ...; "?" when out of range. */
const char *tsr_region_kind_name(tsr_region_kind kind);
/* Exact-name lookup; false when unknown. */
bool tsr_region_kind_parse(const char *name, tsr_region_kind *out);

/* Limits. Past them a region is rejected with TSR_TOO_LARGE (or BAD_DIMENSION
 * for rank). */
#define TSR_MAX_RANK 8                      /* pointwise input rank */
#define TSR_MAX_PW_INPUTS 16                /* pointwise inputs (docs/regions.md) */
#define TSR_MAX_PW_NODES 1024               /* pointwise ops */
#define TSR_MAX_NAME 64                     /* value name, terminator included */
#define TSR_MAX_CHAIN 16                    /* fused prologue / epilogue length */
#define TSR_MAX_ELEMENTS (INT64_C(1) << 40) /* any one tensor */

typedef enum tsr_reduction {
    TSR_REDUCTION_NONE = 0,
    TSR_REDUCTION_RMSNORM = 1,
    TSR_REDUCTION_SOFTMAX = 2,
    TSR_REDUCTION_LAYER_NORM = 3,
} tsr_reduction;

/* "none" (JSON null), "rmsnorm", "softmax", "layer_norm". */
const char *tsr_reduction_name(tsr_reduction reduction);
/* Exact-name lookup of the names above ("none" included); false when unknown. */
bool tsr_reduction_parse(const char *name, tsr_reduction *out);

typedef struct tsr_matmul_desc {
    int64_t m, n, k;
} tsr_matmul_desc;

/* rmsnorm: y = x / sqrt(mean(x^2) + eps); layer_norm: (x - mean) / sqrt(var + eps)
 * with the biased variance; softmax: exp(x - max) / sum. All per row of (M, N),
 * no learned scale or shift. */
typedef struct tsr_fused_desc {
    int64_t m, n, k;
    int n_prologue;
    tsr_op prologue[TSR_MAX_CHAIN]; /* unary ops applied to A, in order */
    int n_epilogue;
    tsr_op epilogue[TSR_MAX_CHAIN]; /* TSR_OP_BIAS or activations, in order */
    bool residual;                  /* add residual (M, N) after the epilogue */
    tsr_reduction reduction;
    double eps; /* used by rmsnorm / layer_norm; default 1e-6 */
} tsr_fused_desc;

typedef struct tsr_gated_desc {
    int64_t m, k, h;
    tsr_op gate_act; /* an op with TSR_OPF_EPILOGUE other than bias; default silu */
} tsr_gated_desc;

typedef struct tsr_attention_desc {
    int64_t batch, heads, heads_kv, seq_q, seq_k, head_dim, head_dim_v;
    double scale; /* default 1/sqrt(head_dim) */
    bool causal;  /* bottom-right aligned: mask key n for query m when n > m + (N - M) */
} tsr_attention_desc;

typedef struct tsr_pw_input {
    char name[TSR_MAX_NAME];
    int rank; /* 0 (a scalar tensor) .. TSR_MAX_RANK */
    int64_t shape[TSR_MAX_RANK];
} tsr_pw_input;

/* Value indices: 0 .. n_inputs-1 are the inputs, n_inputs + i is node i's result. */
typedef struct tsr_pw_node {
    tsr_op op;
    int n_args;                 /* as written; validation checks the arity */
    char args[2][TSR_MAX_NAME]; /* argument names as written */
    int arg_index[2];           /* resolved by validation */
    char out[TSR_MAX_NAME];
    tsr_op_attrs attrs;
} tsr_pw_node;

typedef struct tsr_pointwise_desc {
    int n_inputs;
    tsr_pw_input inputs[TSR_MAX_PW_INPUTS];
    int n_nodes;
    tsr_pw_node *nodes; /* owned; malloc'd array of n_nodes */
    char output[TSR_MAX_NAME];
    int output_index; /* resolved by validation; may name an input directly */
    /* The broadcast output shape, computed by validation. */
    int out_rank;
    int64_t out_shape[TSR_MAX_RANK];
} tsr_pointwise_desc;

typedef struct tsr_region {
    tsr_region_kind kind;
    tsr_dtype dtype;     /* storage dtype of every input */
    tsr_dtype out_dtype; /* storage dtype of the output; defaults to dtype */
    union {
        tsr_matmul_desc matmul;
        tsr_fused_desc fused;
        tsr_gated_desc gated;
        tsr_attention_desc attention;
        tsr_pointwise_desc pointwise;
    } u;
} tsr_region;

/* Releases what the region owns (the pointwise node array) and zeroes it.
 * Safe on a zeroed region and safe to repeat. Does not free r itself. */
void tsr_region_free(tsr_region *r);

/* Deep copy of src into *dst (dst is overwritten, not freed first). */
tsr_status tsr_region_copy(tsr_region *dst, const tsr_region *src, tsr_error *err);

/* True when a and b describe the same region: every field equal, names included,
 * floats compared by bits. Both must be validated. */
bool tsr_region_equal(const tsr_region *a, const tsr_region *b);

/* Checks every rule of docs/regions.md, fills defaults that are still unset (see the
 * constructors) and resolves pointwise names. On failure the region is left
 * as it was apart from resolved indices, and err says which field is wrong.
 * Idempotent. */
tsr_status tsr_region_validate(tsr_region *r, tsr_error *err);

/* Constructors: zero *r, set the fields, apply defaults, validate. On failure *r
 * owns nothing. The optional attention fields take 0 for "default"
 * (heads_kv = heads, head_dim_v = head_dim) and scale NaN for 1/sqrt(head_dim). */
tsr_status tsr_region_init_matmul(tsr_region *r, tsr_dtype dtype, int64_t m, int64_t n, int64_t k,
                                  tsr_error *err);
tsr_status tsr_region_init_gated(tsr_region *r, tsr_dtype dtype, int64_t m, int64_t k, int64_t h,
                                 tsr_op gate_act, tsr_error *err);
tsr_status tsr_region_init_attention(tsr_region *r, tsr_dtype dtype, const tsr_attention_desc *desc,
                                     tsr_error *err);
/* fused and pointwise are built field by field: zero the region, set kind, dtype,
 * out_dtype and the desc (for pointwise, nodes from malloc, owned by r once
 * validation passes or fails — tsr_region_free releases them either way), then
 * call tsr_region_validate. */

/* ---- signature: the tensors a region reads and writes ---- */

#define TSR_MAX_REGION_INPUTS TSR_MAX_PW_INPUTS

typedef struct tsr_tensor_desc {
    char name[TSR_MAX_NAME];
    tsr_dtype dtype;
    int rank;
    int64_t shape[TSR_MAX_RANK];
} tsr_tensor_desc;

/* Element count of a tensor (1 for rank 0). */
int64_t tsr_tensor_desc_elements(const tsr_tensor_desc *t);
/* Bytes of a dense tensor. */
uint64_t tsr_tensor_desc_bytes(const tsr_tensor_desc *t);

/* The region's inputs in their fixed order, and its output. Order:
 *   matmul  a (M,K), b (K,N)
 *   fused   a, b, [bias (N,)], [residual (M,N)]   (bias when the epilogue has it)
 *   gated   a (M,K), wg (K,H), wu (K,H)
 *   attention q (B,H,M,D), k (B,Hkv,N,D), v (B,Hkv,N,Dv)
 *   pointwise the declared inputs, in order
 * Inputs have dtype r->dtype, the output r->out_dtype. inputs must hold
 * TSR_MAX_REGION_INPUTS entries. Returns the input count. r must be validated. */
int tsr_region_signature(const tsr_region *r, tsr_tensor_desc *inputs, tsr_tensor_desc *output);

/* A shape as error messages write it, "[2,3,4]" ("[]" for a scalar), cut to
 * fit size bytes (always terminated when size > 0). */
void tsr_shape_text(const int64_t *shape, int rank, char *buf, size_t size);

/* Multiply-adds or elementwise ops performed, for FLOP/s figures (2*M*N*K for a
 * matmul, ...). */
double tsr_region_flops(const tsr_region *r);

/* The (query, key) pairs an attention region computes: seq_q * seq_k, or with
 * the bottom-right causal mask only those it keeps (query m sees keys
 * 0 .. m + (seq_k - seq_q), clipped to [0, seq_k)). A causal kernel skips the
 * masked pairs, so work and FLOP figures count these. */
double tsr_attention_pairs(const tsr_attention_desc *d);

#ifdef __cplusplus
}
#endif
#endif
