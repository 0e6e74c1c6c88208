/*
 * region.c — the region IR: validation, defaults, copy, equality, signature.
 *
 * tsr_region_validate is the one place where the rules of docs/regions.md live; the JSON
 * parser, the protobuf decoder and the constructors all end in it, so every
 * region that reaches a backend has passed the same checks. It stops at the
 * first broken rule, in field order, and names the field in the message
 * ("ops[2].args[1]: undefined name 'x'"), because a person reading a CLI error
 * needs the place more than the rule.
 *
 * Defaults are computed into locals and written back only once every rule has
 * passed, so a failed validation leaves the caller's region as it was (apart from
 * resolved pointwise indices, which are plain outputs).
 */
#include "tessera/region.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const region_kind_names[TSR_KIND_COUNT] = {
    [TSR_KIND_MATMUL] = "matmul",       [TSR_KIND_FUSED] = "fused",
    [TSR_KIND_GATED] = "gated",         [TSR_KIND_ATTENTION] = "attention",
    [TSR_KIND_POINTWISE] = "pointwise",
};

#define REGION_REDUCTION_COUNT 4
static const char *const region_reduction_names[REGION_REDUCTION_COUNT] = {
    [TSR_REDUCTION_NONE] = "none",
    [TSR_REDUCTION_RMSNORM] = "rmsnorm",
    [TSR_REDUCTION_SOFTMAX] = "softmax",
    [TSR_REDUCTION_LAYER_NORM] = "layer_norm",
};

/* The index of name in a name table, or -1 (also for NULL). */
static int region_name_index(const char *const *names, int count, const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < count; i++) {
        if (strcmp(name, names[i]) == 0)
            return i;
    }
    return -1;
}

const char *tsr_region_kind_name(tsr_region_kind kind)
{
    return (unsigned)kind < TSR_KIND_COUNT ? region_kind_names[kind] : "?";
}

bool tsr_region_kind_parse(const char *name, tsr_region_kind *out)
{
    int i = region_name_index(region_kind_names, TSR_KIND_COUNT, name);
    if (i < 0)
        return false;
    *out = (tsr_region_kind)i;
    return true;
}

const char *tsr_reduction_name(tsr_reduction reduction)
{
    return (unsigned)reduction < REGION_REDUCTION_COUNT ? region_reduction_names[reduction] : "?";
}

bool tsr_reduction_parse(const char *name, tsr_reduction *out)
{
    int i = region_name_index(region_reduction_names, REGION_REDUCTION_COUNT, name);
    if (i < 0)
        return false;
    *out = (tsr_reduction)i;
    return true;
}

/* ---- element counts ---- */

/* Product of the dimensions, or -1 when a dimension is negative or the product
 * overflows int64. Validated callers never see -1. */
static int64_t region_product(const int64_t *shape, int rank)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n))
            return -1;
    }
    return n;
}

int64_t tsr_tensor_desc_elements(const tsr_tensor_desc *t)
{
    if (t == NULL || t->rank < 0 || t->rank > TSR_MAX_RANK)
        return -1;
    return region_product(t->shape, t->rank);
}

uint64_t tsr_tensor_desc_bytes(const tsr_tensor_desc *t)
{
    int64_t n = tsr_tensor_desc_elements(t);
    if (n < 0)
        return 0;
    return (uint64_t)n * tsr_dtype_size(t->dtype);
}

/* Checks that a tensor of the given shape stays within TSR_MAX_ELEMENTS. The
 * dimensions are already known to be > 0; the product may still overflow int64,
 * which counts as too large. */
static tsr_status region_check_tensor(tsr_error *err, const char *name, int rank,
                                      const int64_t *shape)
{
    int64_t n = region_product(shape, rank);
    if (n < 0)
        return tsr_error_set(err, TSR_TOO_LARGE, "%s: element count overflows (limit 2^40 = %lld)",
                             name, (long long)TSR_MAX_ELEMENTS);
    if (n > TSR_MAX_ELEMENTS)
        return tsr_error_set(err, TSR_TOO_LARGE, "%s: %lld elements past the limit of 2^40 = %lld",
                             name, (long long)n, (long long)TSR_MAX_ELEMENTS);
    return TSR_OK;
}

static tsr_status region_check_dim(tsr_error *err, const char *field, int64_t value)
{
    if (value <= 0)
        return tsr_error_set(err, TSR_BAD_DIMENSION, "%s: must be > 0 (got %lld)", field,
                             (long long)value);
    return TSR_OK;
}

/* ---- per-kind validation ---- */

static tsr_status region_validate_matmul(const tsr_matmul_desc *d, tsr_error *err)
{
    tsr_status st;
    if ((st = region_check_dim(err, "m", d->m)) || (st = region_check_dim(err, "n", d->n)) ||
        (st = region_check_dim(err, "k", d->k)))
        return st;
    int64_t a[2] = {d->m, d->k}, b[2] = {d->k, d->n}, o[2] = {d->m, d->n};
    if ((st = region_check_tensor(err, "a", 2, a)) || (st = region_check_tensor(err, "b", 2, b)) ||
        (st = region_check_tensor(err, "output", 2, o)))
        return st;
    return TSR_OK;
}

/* A prologue op transforms A elementwise before the product, so it must be unary
 * and need nothing but its operand: no clamp (bounds), const or bias. The table's
 * flag says where an op may go; the arity and attribute checks keep a table typo
 * from admitting an op the code generator cannot place. */
static bool region_prologue_allows(const tsr_op_info *info)
{
    return (info->flags & TSR_OPF_PROLOGUE) && info->arity == 1 &&
           !(info->flags & (TSR_OPF_HAS_BOUNDS | TSR_OPF_HAS_VALUE)) && info->op != TSR_OP_BIAS;
}

static bool region_epilogue_allows(const tsr_op_info *info)
{
    return (info->flags & TSR_OPF_EPILOGUE) && info->arity == 1 &&
           !(info->flags & (TSR_OPF_HAS_BOUNDS | TSR_OPF_HAS_VALUE));
}

static tsr_status region_validate_fused(const tsr_fused_desc *d, tsr_error *err)
{
    tsr_status st;
    tsr_matmul_desc mm = {d->m, d->n, d->k};
    if ((st = region_validate_matmul(&mm, err)))
        return st;
    if (d->n_prologue < 0 || d->n_prologue > TSR_MAX_CHAIN)
        return tsr_error_set(err, d->n_prologue < 0 ? TSR_INVALID_ARGUMENT : TSR_TOO_LARGE,
                             "prologue: length %d outside 0..%d", d->n_prologue, TSR_MAX_CHAIN);
    if (d->n_epilogue < 0 || d->n_epilogue > TSR_MAX_CHAIN)
        return tsr_error_set(err, d->n_epilogue < 0 ? TSR_INVALID_ARGUMENT : TSR_TOO_LARGE,
                             "epilogue: length %d outside 0..%d", d->n_epilogue, TSR_MAX_CHAIN);
    for (int i = 0; i < d->n_prologue; i++) {
        const tsr_op_info *info = tsr_op_info_get(d->prologue[i]);
        if (info == NULL)
            return tsr_error_set(err, TSR_UNKNOWN_OP, "prologue[%d]: unknown op %d", i,
                                 (int)d->prologue[i]);
        if (!region_prologue_allows(info))
            return tsr_error_set(err, TSR_UNKNOWN_OP,
                                 "prologue[%d]: '%s' is not allowed in a prologue (unary ops "
                                 "without attributes only)",
                                 i, info->name);
    }
    int bias_at = -1;
    for (int i = 0; i < d->n_epilogue; i++) {
        const tsr_op_info *info = tsr_op_info_get(d->epilogue[i]);
        if (info == NULL)
            return tsr_error_set(err, TSR_UNKNOWN_OP, "epilogue[%d]: unknown op %d", i,
                                 (int)d->epilogue[i]);
        if (!region_epilogue_allows(info))
            return tsr_error_set(err, TSR_UNKNOWN_OP,
                                 "epilogue[%d]: '%s' is not allowed in an epilogue (allowed: "
                                 "bias relu gelu silu sigmoid tanh)",
                                 i, info->name);
        if (info->op == TSR_OP_BIAS) {
            if (bias_at >= 0)
                return tsr_error_set(err, TSR_CONFLICT,
                                     "epilogue[%d]: bias appears twice (first at epilogue[%d])", i,
                                     bias_at);
            bias_at = i;
        }
    }
    if ((unsigned)d->reduction >= REGION_REDUCTION_COUNT)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "reduction: unknown reduction %d",
                             (int)d->reduction);
    if (d->residual && d->reduction != TSR_REDUCTION_NONE)
        return tsr_error_set(err, TSR_CONFLICT, "residual: cannot be combined with reduction '%s'",
                             tsr_reduction_name(d->reduction));
    if (d->n_prologue == 0 && d->n_epilogue == 0 && !d->residual &&
        d->reduction == TSR_REDUCTION_NONE)
        return tsr_error_set(err, TSR_CONFLICT,
                             "kind: a fused region needs at least one of prologue, epilogue, "
                             "residual, reduction (use kind matmul for a plain product)");
    if (!isfinite(d->eps) || d->eps < 0)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "eps: must be finite and >= 0 (got %g)",
                             d->eps);
    return TSR_OK;
}

static tsr_status region_validate_gated(const tsr_gated_desc *d, tsr_error *err)
{
    tsr_status st;
    if ((st = region_check_dim(err, "m", d->m)) || (st = region_check_dim(err, "k", d->k)) ||
        (st = region_check_dim(err, "h", d->h)))
        return st;
    const tsr_op_info *info = tsr_op_info_get(d->gate_act);
    if (info == NULL)
        return tsr_error_set(err, TSR_UNKNOWN_OP, "gate_act: unknown op %d", (int)d->gate_act);
    if (!region_epilogue_allows(info) || info->op == TSR_OP_BIAS)
        return tsr_error_set(err, TSR_UNKNOWN_OP,
                             "gate_act: '%s' is not an activation (allowed: relu gelu silu "
                             "sigmoid tanh)",
                             info->name);
    int64_t a[2] = {d->m, d->k}, w[2] = {d->k, d->h}, o[2] = {d->m, d->h};
    if ((st = region_check_tensor(err, "a", 2, a)) || (st = region_check_tensor(err, "wg", 2, w)) ||
        (st = region_check_tensor(err, "output", 2, o)))
        return st;
    return TSR_OK;
}

/* Validates a copy of the attention fields with defaults applied; the caller
 * stores *eff back only on success. */
static tsr_status region_validate_attention(const tsr_attention_desc *d, tsr_attention_desc *eff,
                                            tsr_error *err)
{
    tsr_status st;
    *eff = *d;
    if ((st = region_check_dim(err, "batch", d->batch)) ||
        (st = region_check_dim(err, "heads", d->heads)))
        return st;
    if (eff->heads_kv == 0)
        eff->heads_kv = d->heads;
    if ((st = region_check_dim(err, "heads_kv", eff->heads_kv)) ||
        (st = region_check_dim(err, "seq_q", d->seq_q)) ||
        (st = region_check_dim(err, "seq_k", d->seq_k)) ||
        (st = region_check_dim(err, "head_dim", d->head_dim)))
        return st;
    if (eff->head_dim_v == 0)
        eff->head_dim_v = d->head_dim;
    if ((st = region_check_dim(err, "head_dim_v", eff->head_dim_v)))
        return st;
    if (d->heads % eff->heads_kv != 0)
        return tsr_error_set(err, TSR_BAD_HEADS, "heads: %lld not divisible by heads_kv %lld",
                             (long long)d->heads, (long long)eff->heads_kv);
    if (isnan(eff->scale))
        eff->scale = 1.0 / sqrt((double)d->head_dim);
    if (!isfinite(eff->scale))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "scale: must be finite (got %g)", eff->scale);
    int64_t q[4] = {d->batch, d->heads, d->seq_q, d->head_dim};
    int64_t k[4] = {d->batch, eff->heads_kv, d->seq_k, d->head_dim};
    int64_t v[4] = {d->batch, eff->heads_kv, d->seq_k, eff->head_dim_v};
    int64_t o[4] = {d->batch, d->heads, d->seq_q, eff->head_dim_v};
    if ((st = region_check_tensor(err, "q", 4, q)) || (st = region_check_tensor(err, "k", 4, k)) ||
        (st = region_check_tensor(err, "v", 4, v)) ||
        (st = region_check_tensor(err, "output", 4, o)))
        return st;
    return TSR_OK;
}

/* ---- pointwise ---- */

static bool region_name_eq(const char *a, const char *b)
{
    return strncmp(a, b, TSR_MAX_NAME) == 0;
}

/* A name must be terminated inside its array (the struct may have been filled by
 * hand or by a decoder) and non-empty. */
static tsr_status region_check_name(tsr_error *err, const char *field, const char *name)
{
    if (memchr(name, '\0', TSR_MAX_NAME) == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: longer than %d bytes", field,
                             TSR_MAX_NAME - 1);
    if (name[0] == '\0')
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must not be empty", field);
    return TSR_OK;
}

/* Index of the value called name among the inputs and the first n_nodes nodes,
 * -1 when none. */
static int region_pw_lookup(const tsr_pointwise_desc *pw, const char *name, int n_nodes)
{
    for (int i = 0; i < pw->n_inputs; i++) {
        if (region_name_eq(pw->inputs[i].name, name))
            return i;
    }
    for (int i = 0; i < n_nodes; i++) {
        if (region_name_eq(pw->nodes[i].out, name))
            return pw->n_inputs + i;
    }
    return -1;
}

/* "inputs[1].name" or "ops[0].out": where value index v was defined. */
static void region_pw_where(const tsr_pointwise_desc *pw, int v, char *buf, size_t size)
{
    if (v < pw->n_inputs)
        snprintf(buf, size, "inputs[%d].name", v);
    else
        snprintf(buf, size, "ops[%d].out", v - pw->n_inputs);
}

void tsr_shape_text(const int64_t *shape, int rank, char *buf, size_t size)
{
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    used = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < rank && used < size; i++) {
        n = snprintf(buf + used, size - used, "%s%lld", i ? "," : "", (long long)shape[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

/* numpy broadcasting, right-aligned: each pair of dimensions is equal or one of
 * them is 1. Accumulates into (*rank, shape); false when the shapes clash. */
static bool region_broadcast(int *rank, int64_t *shape, int in_rank, const int64_t *in_shape)
{
    int64_t out[TSR_MAX_RANK];
    int r = *rank > in_rank ? *rank : in_rank;
    for (int i = 0; i < r; i++) {
        int ia = *rank - r + i, ib = in_rank - r + i;
        int64_t a = ia >= 0 ? shape[ia] : 1, b = ib >= 0 ? in_shape[ib] : 1;
        if (a != b && a != 1 && b != 1)
            return false;
        out[i] = a == 1 ? b : a;
    }
    memcpy(shape, out, sizeof(int64_t) * (size_t)r);
    *rank = r;
    return true;
}

static tsr_status region_validate_pw_attrs(const tsr_pw_node *node, const tsr_op_info *info, int i,
                                           tsr_error *err)
{
    const tsr_op_attrs *a = &node->attrs;
    uint64_t zero = 0;
    if (info->flags & TSR_OPF_HAS_BOUNDS) {
        if (!a->has_min && !a->has_max)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d]: %s needs min or max", i,
                                 info->name);
        if (a->has_min && isnan(a->min))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].min: must not be NaN", i);
        if (a->has_max && isnan(a->max))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].max: must not be NaN", i);
    }
    /* A bound that is not in use must be zero: two regions that mean the same must
     * compare equal (floats by bits) and fingerprint alike. */
    if ((!(info->flags & TSR_OPF_HAS_BOUNDS) || !a->has_min) &&
        (a->has_min || memcmp(&a->min, &zero, sizeof zero) != 0))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].min: '%s' takes no min", i,
                             info->name);
    if ((!(info->flags & TSR_OPF_HAS_BOUNDS) || !a->has_max) &&
        (a->has_max || memcmp(&a->max, &zero, sizeof zero) != 0))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].max: '%s' takes no max", i,
                             info->name);
    if (info->flags & TSR_OPF_HAS_VALUE) {
        if (isnan(a->value))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].value: must not be NaN", i);
    } else if (memcmp(&a->value, &zero, sizeof zero) != 0) {
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "ops[%d].value: '%s' takes no value", i,
                             info->name);
    }
    return TSR_OK;
}

static tsr_status region_validate_pw_node(tsr_pointwise_desc *pw, int i, tsr_error *err)
{
    tsr_pw_node *node = &pw->nodes[i];
    tsr_status st;
    char field[48], where[48];
    const tsr_op_info *info = tsr_op_info_get(node->op);
    if (info == NULL)
        return tsr_error_set(err, TSR_UNKNOWN_OP, "ops[%d].op: unknown op %d", i, (int)node->op);
    if (!(info->flags & TSR_OPF_POINTWISE))
        return tsr_error_set(err, TSR_UNKNOWN_OP, "ops[%d].op: '%s' is not a pointwise op", i,
                             info->name);
    if (node->n_args != info->arity)
        return tsr_error_set(err, TSR_BAD_ARITY, "ops[%d].args: '%s' takes %d argument%s (got %d)",
                             i, info->name, info->arity, info->arity == 1 ? "" : "s", node->n_args);
    if ((st = region_validate_pw_attrs(node, info, i, err)))
        return st;
    for (int j = 0; j < 2; j++)
        node->arg_index[j] = -1;
    for (int j = 0; j < node->n_args; j++) {
        const char *name = node->args[j];
        snprintf(field, sizeof field, "ops[%d].args[%d]", i, j);
        if (memchr(name, '\0', TSR_MAX_NAME) == NULL)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: longer than %d bytes", field,
                                 TSR_MAX_NAME - 1);
        int v = region_pw_lookup(pw, name, i);
        if (v < 0) {
            for (int later = i; later < pw->n_nodes; later++) {
                if (!region_name_eq(pw->nodes[later].out, name))
                    continue;
                if (later == i)
                    return tsr_error_set(err, TSR_CYCLE, "%s: '%s' is defined by this op", field,
                                         name);
                return tsr_error_set(err, TSR_CYCLE,
                                     "%s: '%s' is used before its definition "
                                     "at ops[%d].out",
                                     field, name, later);
            }
            return tsr_error_set(err, TSR_UNDEFINED_NAME, "%s: undefined name '%s'", field, name);
        }
        node->arg_index[j] = v;
    }
    snprintf(field, sizeof field, "ops[%d].out", i);
    if ((st = region_check_name(err, field, node->out)))
        return st;
    int prev = region_pw_lookup(pw, node->out, i);
    if (prev >= 0) {
        region_pw_where(pw, prev, where, sizeof where);
        return tsr_error_set(err, TSR_DUPLICATE_NAME, "%s: '%s' defined twice (first at %s)", field,
                             node->out, where);
    }
    return TSR_OK;
}

static tsr_status region_validate_pointwise(tsr_pointwise_desc *pw, int *out_rank,
                                            int64_t *out_shape, tsr_error *err)
{
    tsr_status st;
    char field[48];
    if (pw->n_inputs < 0 || pw->n_inputs > TSR_MAX_PW_INPUTS)
        return tsr_error_set(err, pw->n_inputs < 0 ? TSR_INVALID_ARGUMENT : TSR_TOO_LARGE,
                             "inputs: %d inputs outside 0..%d", pw->n_inputs, TSR_MAX_PW_INPUTS);
    if (pw->n_nodes < 0 || pw->n_nodes > TSR_MAX_PW_NODES)
        return tsr_error_set(err, pw->n_nodes < 0 ? TSR_INVALID_ARGUMENT : TSR_TOO_LARGE,
                             "ops: %d ops outside 0..%d", pw->n_nodes, TSR_MAX_PW_NODES);
    if (pw->n_nodes > 0 && pw->nodes == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "ops: %d ops but no node array",
                             pw->n_nodes);
    *out_rank = 0;
    for (int i = 0; i < pw->n_inputs; i++) {
        const tsr_pw_input *in = &pw->inputs[i];
        snprintf(field, sizeof field, "inputs[%d].name", i);
        if ((st = region_check_name(err, field, in->name)))
            return st;
        int prev = region_pw_lookup(pw, in->name, 0);
        if (prev < i) {
            return tsr_error_set(err, TSR_DUPLICATE_NAME,
                                 "%s: '%s' defined twice (first at inputs[%d].name)", field,
                                 in->name, prev);
        }
        if (in->rank < 0 || in->rank > TSR_MAX_RANK)
            return tsr_error_set(err, TSR_BAD_DIMENSION, "inputs[%d].shape: rank %d outside 0..%d",
                                 i, in->rank, TSR_MAX_RANK);
        for (int d = 0; d < in->rank; d++) {
            snprintf(field, sizeof field, "inputs[%d].shape[%d]", i, d);
            if ((st = region_check_dim(err, field, in->shape[d])))
                return st;
        }
        snprintf(field, sizeof field, "inputs[%d]", i);
        if ((st = region_check_tensor(err, field, in->rank, in->shape)))
            return st;
        char have[160], got[160];
        tsr_shape_text(out_shape, *out_rank, have, sizeof have);
        if (!region_broadcast(out_rank, out_shape, in->rank, in->shape)) {
            tsr_shape_text(in->shape, in->rank, got, sizeof got);
            return tsr_error_set(err, TSR_SHAPE_MISMATCH,
                                 "inputs[%d].shape: %s does not broadcast with %s (the earlier "
                                 "inputs' shape)",
                                 i, got, have);
        }
    }
    if ((st = region_check_tensor(err, "output", *out_rank, out_shape)))
        return st;
    for (int i = 0; i < pw->n_nodes; i++) {
        if ((st = region_validate_pw_node(pw, i, err)))
            return st;
    }
    if (memchr(pw->output, '\0', TSR_MAX_NAME) == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "output: longer than %d bytes",
                             TSR_MAX_NAME - 1);
    int v = region_pw_lookup(pw, pw->output, pw->n_nodes);
    if (v < 0)
        return tsr_error_set(err, TSR_UNDEFINED_NAME, "output: undefined name '%s'", pw->output);
    pw->output_index = v;
    return TSR_OK;
}

tsr_status tsr_region_validate(tsr_region *r, tsr_error *err)
{
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL");
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: unknown kind %d", (int)r->kind);
    if ((unsigned)r->dtype >= TSR_DTYPE_COUNT)
        return tsr_error_set(err, TSR_BAD_DTYPE, "dtype: unknown dtype %d", (int)r->dtype);
    if ((unsigned)r->out_dtype >= TSR_DTYPE_COUNT)
        return tsr_error_set(err, TSR_BAD_DTYPE, "out_dtype: unknown dtype %d", (int)r->out_dtype);
    tsr_status st = TSR_OK;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        st = region_validate_matmul(&r->u.matmul, err);
        break;
    case TSR_KIND_FUSED:
        st = region_validate_fused(&r->u.fused, err);
        break;
    case TSR_KIND_GATED:
        st = region_validate_gated(&r->u.gated, err);
        break;
    case TSR_KIND_ATTENTION: {
        tsr_attention_desc eff;
        st = region_validate_attention(&r->u.attention, &eff, err);
        if (st == TSR_OK)
            r->u.attention = eff;
        break;
    }
    case TSR_KIND_POINTWISE: {
        int rank = 0;
        int64_t shape[TSR_MAX_RANK] = {0};
        st = region_validate_pointwise(&r->u.pointwise, &rank, shape, err);
        if (st == TSR_OK) {
            r->u.pointwise.out_rank = rank;
            memset(r->u.pointwise.out_shape, 0, sizeof r->u.pointwise.out_shape);
            memcpy(r->u.pointwise.out_shape, shape, sizeof(int64_t) * (size_t)rank);
        }
        break;
    }
    }
    if (st == TSR_OK)
        tsr_error_clear(err);
    return st;
}

/* ---- ownership, copy, equality ---- */

void tsr_region_free(tsr_region *r)
{
    if (r == NULL)
        return;
    if (r->kind == TSR_KIND_POINTWISE)
        free(r->u.pointwise.nodes);
    memset(r, 0, sizeof *r);
}

tsr_status tsr_region_copy(tsr_region *dst, const tsr_region *src, tsr_error *err)
{
    if (dst == NULL || src == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region copy: NULL argument");
    tsr_region tmp = *src;
    if (src->kind == TSR_KIND_POINTWISE) {
        const tsr_pointwise_desc *pw = &src->u.pointwise;
        tmp.u.pointwise.nodes = NULL;
        if (pw->n_nodes > 0 && pw->nodes != NULL) {
            size_t bytes = sizeof(tsr_pw_node) * (size_t)pw->n_nodes;
            tmp.u.pointwise.nodes = malloc(bytes);
            if (tmp.u.pointwise.nodes == NULL) {
                memset(dst, 0, sizeof *dst);
                return tsr_error_set(err, TSR_NO_MEMORY, "region copy: %zu bytes", bytes);
            }
            memcpy(tmp.u.pointwise.nodes, pw->nodes, bytes);
        }
    }
    *dst = tmp;
    return TSR_OK;
}

static bool region_bits_eq(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static bool region_pw_equal(const tsr_pointwise_desc *a, const tsr_pointwise_desc *b)
{
    if (a->n_inputs != b->n_inputs || a->n_nodes != b->n_nodes ||
        !region_name_eq(a->output, b->output))
        return false;
    for (int i = 0; i < a->n_inputs; i++) {
        const tsr_pw_input *x = &a->inputs[i], *y = &b->inputs[i];
        if (!region_name_eq(x->name, y->name) || x->rank != y->rank ||
            memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)x->rank) != 0)
            return false;
    }
    for (int i = 0; i < a->n_nodes; i++) {
        const tsr_pw_node *x = &a->nodes[i], *y = &b->nodes[i];
        if (x->op != y->op || x->n_args != y->n_args || !region_name_eq(x->out, y->out) ||
            !region_bits_eq(x->attrs.value, y->attrs.value) ||
            x->attrs.has_min != y->attrs.has_min || x->attrs.has_max != y->attrs.has_max ||
            !region_bits_eq(x->attrs.min, y->attrs.min) ||
            !region_bits_eq(x->attrs.max, y->attrs.max))
            return false;
        for (int j = 0; j < x->n_args && j < 2; j++) {
            if (!region_name_eq(x->args[j], y->args[j]))
                return false;
        }
    }
    return true;
}

bool tsr_region_equal(const tsr_region *a, const tsr_region *b)
{
    if (a->kind != b->kind || a->dtype != b->dtype || a->out_dtype != b->out_dtype)
        return false;
    switch (a->kind) {
    case TSR_KIND_MATMUL: {
        const tsr_matmul_desc *x = &a->u.matmul, *y = &b->u.matmul;
        return x->m == y->m && x->n == y->n && x->k == y->k;
    }
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *x = &a->u.fused, *y = &b->u.fused;
        return x->m == y->m && x->n == y->n && x->k == y->k && x->n_prologue == y->n_prologue &&
               x->n_epilogue == y->n_epilogue &&
               memcmp(x->prologue, y->prologue, sizeof(tsr_op) * (size_t)x->n_prologue) == 0 &&
               memcmp(x->epilogue, y->epilogue, sizeof(tsr_op) * (size_t)x->n_epilogue) == 0 &&
               x->residual == y->residual && x->reduction == y->reduction &&
               region_bits_eq(x->eps, y->eps);
    }
    case TSR_KIND_GATED: {
        const tsr_gated_desc *x = &a->u.gated, *y = &b->u.gated;
        return x->m == y->m && x->k == y->k && x->h == y->h && x->gate_act == y->gate_act;
    }
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *x = &a->u.attention, *y = &b->u.attention;
        return x->batch == y->batch && x->heads == y->heads && x->heads_kv == y->heads_kv &&
               x->seq_q == y->seq_q && x->seq_k == y->seq_k && x->head_dim == y->head_dim &&
               x->head_dim_v == y->head_dim_v && region_bits_eq(x->scale, y->scale) &&
               x->causal == y->causal;
    }
    case TSR_KIND_POINTWISE:
        return region_pw_equal(&a->u.pointwise, &b->u.pointwise);
    }
    return false;
}

/* ---- constructors ---- */

static tsr_status region_finish(tsr_region *r, tsr_error *err)
{
    tsr_status st = tsr_region_validate(r, err);
    if (st != TSR_OK)
        tsr_region_free(r);
    return st;
}

tsr_status tsr_region_init_matmul(tsr_region *r, tsr_dtype dtype, int64_t m, int64_t n, int64_t k,
                                  tsr_error *err)
{
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL");
    memset(r, 0, sizeof *r);
    r->kind = TSR_KIND_MATMUL;
    r->dtype = dtype;
    r->out_dtype = dtype;
    r->u.matmul = (tsr_matmul_desc){m, n, k};
    return region_finish(r, err);
}

tsr_status tsr_region_init_gated(tsr_region *r, tsr_dtype dtype, int64_t m, int64_t k, int64_t h,
                                 tsr_op gate_act, tsr_error *err)
{
    if (r == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL");
    memset(r, 0, sizeof *r);
    r->kind = TSR_KIND_GATED;
    r->dtype = dtype;
    r->out_dtype = dtype;
    r->u.gated = (tsr_gated_desc){m, k, h, gate_act};
    return region_finish(r, err);
}

tsr_status tsr_region_init_attention(tsr_region *r, tsr_dtype dtype, const tsr_attention_desc *desc,
                                     tsr_error *err)
{
    if (r == NULL || desc == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL argument");
    memset(r, 0, sizeof *r);
    r->kind = TSR_KIND_ATTENTION;
    r->dtype = dtype;
    r->out_dtype = dtype;
    r->u.attention = *desc;
    return region_finish(r, err);
}

/* ---- signature and cost ---- */

static void region_tensor(tsr_tensor_desc *t, const char *name, tsr_dtype dtype, int rank,
                          const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->rank = rank;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)rank);
}

static bool region_fused_has_bias(const tsr_fused_desc *d)
{
    for (int i = 0; i < d->n_epilogue; i++) {
        if (d->epilogue[i] == TSR_OP_BIAS)
            return true;
    }
    return false;
}

int tsr_region_signature(const tsr_region *r, tsr_tensor_desc *inputs, tsr_tensor_desc *output)
{
    tsr_dtype dt = r->dtype, odt = r->out_dtype;
    int n = 0;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED: {
        int64_t m = r->kind == TSR_KIND_MATMUL ? r->u.matmul.m : r->u.fused.m;
        int64_t nn = r->kind == TSR_KIND_MATMUL ? r->u.matmul.n : r->u.fused.n;
        int64_t k = r->kind == TSR_KIND_MATMUL ? r->u.matmul.k : r->u.fused.k;
        region_tensor(&inputs[n++], "a", dt, 2, (int64_t[]){m, k});
        region_tensor(&inputs[n++], "b", dt, 2, (int64_t[]){k, nn});
        if (r->kind == TSR_KIND_FUSED && region_fused_has_bias(&r->u.fused))
            region_tensor(&inputs[n++], "bias", dt, 1, (int64_t[]){nn});
        if (r->kind == TSR_KIND_FUSED && r->u.fused.residual)
            region_tensor(&inputs[n++], "residual", dt, 2, (int64_t[]){m, nn});
        region_tensor(output, "out", odt, 2, (int64_t[]){m, nn});
        break;
    }
    case TSR_KIND_GATED: {
        const tsr_gated_desc *d = &r->u.gated;
        region_tensor(&inputs[n++], "a", dt, 2, (int64_t[]){d->m, d->k});
        region_tensor(&inputs[n++], "wg", dt, 2, (int64_t[]){d->k, d->h});
        region_tensor(&inputs[n++], "wu", dt, 2, (int64_t[]){d->k, d->h});
        region_tensor(output, "out", odt, 2, (int64_t[]){d->m, d->h});
        break;
    }
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        region_tensor(&inputs[n++], "q", dt, 4,
                      (int64_t[]){d->batch, d->heads, d->seq_q, d->head_dim});
        region_tensor(&inputs[n++], "k", dt, 4,
                      (int64_t[]){d->batch, d->heads_kv, d->seq_k, d->head_dim});
        region_tensor(&inputs[n++], "v", dt, 4,
                      (int64_t[]){d->batch, d->heads_kv, d->seq_k, d->head_dim_v});
        region_tensor(output, "out", odt, 4,
                      (int64_t[]){d->batch, d->heads, d->seq_q, d->head_dim_v});
        break;
    }
    case TSR_KIND_POINTWISE: {
        const tsr_pointwise_desc *pw = &r->u.pointwise;
        for (int i = 0; i < pw->n_inputs; i++)
            region_tensor(&inputs[n++], pw->inputs[i].name, dt, pw->inputs[i].rank,
                          pw->inputs[i].shape);
        region_tensor(output, pw->output, odt, pw->out_rank, pw->out_shape);
        break;
    }
    }
    return n;
}

double tsr_attention_pairs(const tsr_attention_desc *d)
{
    double M = (double)d->seq_q, N = (double)d->seq_k;
    if (!d->causal)
        return M * N;
    double off = N - M;
    double first_m = off < 0 ? -off : 0; /* first query that sees any key */
    if (first_m >= M)
        return 0;
    double count = M - first_m;
    double first = first_m + off + 1, last = N; /* keys seen by the first and last rows */
    return count * (first + last) / 2;
}

double tsr_region_flops(const tsr_region *r)
{
    switch (r->kind) {
    case TSR_KIND_MATMUL: {
        const tsr_matmul_desc *d = &r->u.matmul;
        return 2.0 * (double)d->m * (double)d->n * (double)d->k;
    }
    case TSR_KIND_FUSED: {
        /* The product dominates; elementwise work counts one op per element per
         * step, and a row reduction a nominal four. */
        const tsr_fused_desc *d = &r->u.fused;
        double mn = (double)d->m * (double)d->n;
        double f = 2.0 * mn * (double)d->k;
        f += (double)d->m * (double)d->k * d->n_prologue;
        f += mn * (d->n_epilogue + (d->residual ? 1 : 0));
        if (d->reduction != TSR_REDUCTION_NONE)
            f += 4.0 * mn;
        return f;
    }
    case TSR_KIND_GATED: {
        const tsr_gated_desc *d = &r->u.gated;
        double mh = (double)d->m * (double)d->h;
        return 4.0 * mh * (double)d->k + 2.0 * mh;
    }
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        double bh = (double)d->batch * (double)d->heads;
        return 2.0 * bh * tsr_attention_pairs(d) * (double)(d->head_dim + d->head_dim_v);
    }
    case TSR_KIND_POINTWISE: {
        const tsr_pointwise_desc *pw = &r->u.pointwise;
        double elements = 1;
        for (int i = 0; i < pw->out_rank; i++)
            elements *= (double)pw->out_shape[i];
        int ops = 0;
        for (int i = 0; i < pw->n_nodes; i++)
            ops += pw->nodes[i].op != TSR_OP_CONST;
        return elements * ops;
    }
    }
    return 0;
}
