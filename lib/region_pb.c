/*
 * region_pb.c — conversion between the IR and tessera.v1.Region.
 *
 * The daemon feeds tsr_region_from_pb whatever a client sent, so the decoder
 * treats every field as hostile: counts are checked before anything is copied
 * into the IR's fixed arrays, NULL pointers in a hand-built message read as
 * empty, and the result always goes through tsr_region_validate. Fields that
 * do not belong to the region's kind must be left at their proto3 default; a
 * stray value is rejected (as the JSON form rejects an unknown key) rather than
 * ignored, since it most likely means the sender mixed up kinds.
 *
 * The doubles of a pointwise op sit in one-field oneofs, which have presence:
 * the encoder sets every one whose bits are not +0.0, so -0.0 (a const, a clamp
 * bound) keeps its sign on the wire; an unset one decodes as +0.0. A plain
 * proto3 double is left out when it compares equal to 0, sign and all.
 *
 * proto3 cannot tell an absent scalar from a zero one, so the wire form carries
 * explicit values: out_dtype UNSPECIFIED means "same as dtype", reduction "" means
 * none, gate_act "" means silu, and attention heads_kv / head_dim_v 0 and scale NaN
 * mean their defaults, as in the C struct. eps 0 and scale 0 are taken as written.
 *
 * tsr_region_to_pb builds every nested message and string with malloc so that
 * tsr_region_pb_free can release it without the protobuf-c allocator; a message
 * from tessera__v1__region__unpack must be freed with
 * tessera__v1__region__free_unpacked instead.
 */
#include "tessera/region_pb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *pb_str(const char *s)
{
    return s != NULL ? s : "";
}

static tsr_status pb_copy_name(const char *src, const char *field, char *dst, tsr_error *err)
{
    size_t len = strlen(pb_str(src));
    if (len >= TSR_MAX_NAME)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: longer than %d bytes", field,
                             TSR_MAX_NAME - 1);
    memcpy(dst, pb_str(src), len + 1);
    return TSR_OK;
}

static tsr_status pb_dtype(Tessera__V1__DType v, const char *field, tsr_dtype *out, tsr_error *err)
{
    int d = (int)v - 1;
    if (v == TESSERA__V1__DTYPE__DTYPE_UNSPECIFIED)
        return tsr_error_set(err, TSR_BAD_DTYPE, "%s: unspecified", field);
    if (d < 0 || d >= TSR_DTYPE_COUNT)
        return tsr_error_set(err, TSR_BAD_DTYPE, "%s: unknown dtype %d", field, (int)v);
    *out = (tsr_dtype)d;
    return TSR_OK;
}

static tsr_status pb_op(const char *name, const char *field, tsr_op *out, tsr_error *err)
{
    const tsr_op_info *info = tsr_op_info_find(pb_str(name));
    if (info == NULL)
        return tsr_error_set(err, TSR_UNKNOWN_OP, "%s: unknown op '%s'", field, pb_str(name));
    *out = info->op;
    return TSR_OK;
}

static tsr_status pb_op_list(char **names, size_t n, const char *key, tsr_op *ops, int *count,
                             tsr_error *err)
{
    if (n > TSR_MAX_CHAIN)
        return tsr_error_set(err, TSR_TOO_LARGE, "%s: length %zu outside 0..%d", key, n,
                             TSR_MAX_CHAIN);
    if (n > 0 && names == NULL)
        return tsr_error_set(err, TSR_BAD_MESSAGE, "%s: %zu entries but no array", key, n);
    char field[64];
    for (size_t i = 0; i < n; i++) {
        snprintf(field, sizeof field, "%s[%zu]", key, i);
        tsr_status st = pb_op(names[i], field, &ops[i], err);
        if (st != TSR_OK)
            return st;
    }
    *count = (int)n;
    return TSR_OK;
}

/* Fields of the wire message, for the per-kind "does not belong here" check. */
enum pb_field {
    PB_M = 1u << 0,
    PB_N = 1u << 1,
    PB_K = 1u << 2,
    PB_H = 1u << 3,
    PB_PROLOGUE = 1u << 4,
    PB_EPILOGUE = 1u << 5,
    PB_RESIDUAL = 1u << 6,
    PB_REDUCTION = 1u << 7,
    PB_EPS = 1u << 8,
    PB_GATE_ACT = 1u << 9,
    PB_BATCH = 1u << 10,
    PB_HEADS = 1u << 11,
    PB_HEADS_KV = 1u << 12,
    PB_SEQ_Q = 1u << 13,
    PB_SEQ_K = 1u << 14,
    PB_HEAD_DIM = 1u << 15,
    PB_HEAD_DIM_V = 1u << 16,
    PB_SCALE = 1u << 17,
    PB_CAUSAL = 1u << 18,
    PB_INPUTS = 1u << 19,
    PB_OPS = 1u << 20,
    PB_OUTPUT = 1u << 21,
};

static const unsigned pb_kind_fields[TSR_KIND_COUNT] = {
    [TSR_KIND_MATMUL] = PB_M | PB_N | PB_K,
    [TSR_KIND_FUSED] =
        PB_M | PB_N | PB_K | PB_PROLOGUE | PB_EPILOGUE | PB_RESIDUAL | PB_REDUCTION | PB_EPS,
    [TSR_KIND_GATED] = PB_M | PB_K | PB_H | PB_GATE_ACT,
    [TSR_KIND_ATTENTION] = PB_BATCH | PB_HEADS | PB_HEADS_KV | PB_SEQ_Q | PB_SEQ_K | PB_HEAD_DIM |
                           PB_HEAD_DIM_V | PB_SCALE | PB_CAUSAL,
    [TSR_KIND_POINTWISE] = PB_INPUTS | PB_OPS | PB_OUTPUT,
};

/* Rejects the first field that is away from its proto3 default but does not
 * belong to the region's kind. */
static tsr_status pb_check_fields(const Tessera__V1__Region *pb, tsr_region_kind kind,
                                  tsr_error *err)
{
    uint64_t zero = 0;
    const struct {
        unsigned bit;
        const char *name;
        bool set;
    } fields[] = {
        {PB_M, "m", pb->m != 0},
        {PB_N, "n", pb->n != 0},
        {PB_K, "k", pb->k != 0},
        {PB_H, "h", pb->h != 0},
        {PB_PROLOGUE, "prologue", pb->n_prologue != 0},
        {PB_EPILOGUE, "epilogue", pb->n_epilogue != 0},
        {PB_RESIDUAL, "residual", pb->residual != 0},
        {PB_REDUCTION, "reduction", pb_str(pb->reduction)[0] != '\0'},
        {PB_EPS, "eps", memcmp(&pb->eps, &zero, sizeof zero) != 0},
        {PB_GATE_ACT, "gate_act", pb_str(pb->gate_act)[0] != '\0'},
        {PB_BATCH, "batch", pb->batch != 0},
        {PB_HEADS, "heads", pb->heads != 0},
        {PB_HEADS_KV, "heads_kv", pb->heads_kv != 0},
        {PB_SEQ_Q, "seq_q", pb->seq_q != 0},
        {PB_SEQ_K, "seq_k", pb->seq_k != 0},
        {PB_HEAD_DIM, "head_dim", pb->head_dim != 0},
        {PB_HEAD_DIM_V, "head_dim_v", pb->head_dim_v != 0},
        {PB_SCALE, "scale", memcmp(&pb->scale, &zero, sizeof zero) != 0},
        {PB_CAUSAL, "causal", pb->causal != 0},
        {PB_INPUTS, "inputs", pb->n_inputs != 0},
        {PB_OPS, "ops", pb->n_ops != 0},
        {PB_OUTPUT, "output", pb_str(pb->output)[0] != '\0'},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fields[i].set && !(pb_kind_fields[kind] & fields[i].bit))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: not a field of a %s region",
                                 fields[i].name, tsr_region_kind_name(kind));
    }
    return TSR_OK;
}

static tsr_status pb_decode_pointwise(const Tessera__V1__Region *pb, tsr_pointwise_desc *pw,
                                      tsr_error *err)
{
    tsr_status st;
    char field[64];
    if (pb->n_inputs > TSR_MAX_PW_INPUTS)
        return tsr_error_set(err, TSR_TOO_LARGE, "inputs: %zu inputs outside 0..%d", pb->n_inputs,
                             TSR_MAX_PW_INPUTS);
    if (pb->n_ops > TSR_MAX_PW_NODES)
        return tsr_error_set(err, TSR_TOO_LARGE, "ops: %zu ops outside 0..%d", pb->n_ops,
                             TSR_MAX_PW_NODES);
    if ((pb->n_inputs > 0 && pb->inputs == NULL) || (pb->n_ops > 0 && pb->ops == NULL))
        return tsr_error_set(err, TSR_BAD_MESSAGE, "%s: entries but no array",
                             pb->inputs == NULL && pb->n_inputs > 0 ? "inputs" : "ops");
    for (size_t i = 0; i < pb->n_inputs; i++) {
        const Tessera__V1__PointwiseInput *in = pb->inputs[i];
        if (in == NULL)
            return tsr_error_set(err, TSR_BAD_MESSAGE, "inputs[%zu]: missing", i);
        snprintf(field, sizeof field, "inputs[%zu].name", i);
        if ((st = pb_copy_name(in->name, field, pw->inputs[i].name, err)))
            return st;
        if (in->n_shape > TSR_MAX_RANK)
            return tsr_error_set(err, TSR_BAD_DIMENSION,
                                 "inputs[%zu].shape: rank %zu outside "
                                 "0..%d",
                                 i, in->n_shape, TSR_MAX_RANK);
        if (in->n_shape > 0 && in->shape == NULL)
            return tsr_error_set(err, TSR_BAD_MESSAGE, "inputs[%zu].shape: no array", i);
        for (size_t d = 0; d < in->n_shape; d++)
            pw->inputs[i].shape[d] = in->shape[d];
        pw->inputs[i].rank = (int)in->n_shape;
    }
    pw->n_inputs = (int)pb->n_inputs;
    if (pb->n_ops > 0) {
        pw->nodes = calloc(pb->n_ops, sizeof *pw->nodes);
        if (pw->nodes == NULL)
            return tsr_error_set(err, TSR_NO_MEMORY, "ops: %zu nodes", pb->n_ops);
    }
    pw->n_nodes = (int)pb->n_ops;
    for (size_t i = 0; i < pb->n_ops; i++) {
        const Tessera__V1__PointwiseOp *op = pb->ops[i];
        tsr_pw_node *node = &pw->nodes[i];
        if (op == NULL)
            return tsr_error_set(err, TSR_BAD_MESSAGE, "ops[%zu]: missing", i);
        snprintf(field, sizeof field, "ops[%zu].op", i);
        if ((st = pb_op(op->op, field, &node->op, err)))
            return st;
        if (op->n_args > 2)
            return tsr_error_set(err, TSR_BAD_ARITY,
                                 "ops[%zu].args: '%s' takes %d argument%s "
                                 "(got %zu)",
                                 i, tsr_op_name(node->op), tsr_op_info_get(node->op)->arity,
                                 tsr_op_info_get(node->op)->arity == 1 ? "" : "s", op->n_args);
        if (op->n_args > 0 && op->args == NULL)
            return tsr_error_set(err, TSR_BAD_MESSAGE, "ops[%zu].args: no array", i);
        for (size_t j = 0; j < op->n_args; j++) {
            snprintf(field, sizeof field, "ops[%zu].args[%zu]", i, j);
            if ((st = pb_copy_name(op->args[j], field, node->args[j], err)))
                return st;
        }
        node->n_args = (int)op->n_args;
        snprintf(field, sizeof field, "ops[%zu].out", i);
        if ((st = pb_copy_name(op->out, field, node->out, err)))
            return st;
        /* An unset oneof is the proto3 default, +0.0, whatever its union
         * member holds in a hand-built message. */
        node->attrs.value = op->value_present_case == TESSERA__V1__POINTWISE_OP__VALUE_PRESENT_VALUE
                                ? op->value
                                : 0.0;
        node->attrs.has_min = op->has_min;
        node->attrs.min =
            op->min_present_case == TESSERA__V1__POINTWISE_OP__MIN_PRESENT_MIN ? op->min : 0.0;
        node->attrs.has_max = op->has_max;
        node->attrs.max =
            op->max_present_case == TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX ? op->max : 0.0;
    }
    return pb_copy_name(pb->output, "output", pw->output, err);
}

static tsr_status pb_decode(const Tessera__V1__Region *pb, tsr_region *r, tsr_error *err)
{
    tsr_status st;
    int kind = (int)pb->kind - 1;
    if (pb->kind == TESSERA__V1__REGION_KIND__KIND_UNSPECIFIED)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: unspecified");
    if (kind < 0 || kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: unknown kind %d", (int)pb->kind);
    r->kind = (tsr_region_kind)kind;
    if ((st = pb_dtype(pb->dtype, "dtype", &r->dtype, err)))
        return st;
    r->out_dtype = r->dtype;
    if (pb->out_dtype != TESSERA__V1__DTYPE__DTYPE_UNSPECIFIED &&
        (st = pb_dtype(pb->out_dtype, "out_dtype", &r->out_dtype, err)))
        return st;
    if ((st = pb_check_fields(pb, r->kind, err)))
        return st;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        r->u.matmul = (tsr_matmul_desc){pb->m, pb->n, pb->k};
        return TSR_OK;
    case TSR_KIND_FUSED: {
        tsr_fused_desc *d = &r->u.fused;
        d->m = pb->m;
        d->n = pb->n;
        d->k = pb->k;
        if ((st = pb_op_list(pb->prologue, pb->n_prologue, "prologue", d->prologue, &d->n_prologue,
                             err)) ||
            (st = pb_op_list(pb->epilogue, pb->n_epilogue, "epilogue", d->epilogue, &d->n_epilogue,
                             err)))
            return st;
        d->residual = pb->residual;
        const char *red = pb_str(pb->reduction);
        d->reduction = TSR_REDUCTION_NONE;
        if (red[0] != '\0' && !tsr_reduction_parse(red, &d->reduction))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "reduction: unknown reduction '%s'", red);
        d->eps = pb->eps;
        return TSR_OK;
    }
    case TSR_KIND_GATED: {
        tsr_gated_desc *d = &r->u.gated;
        d->m = pb->m;
        d->k = pb->k;
        d->h = pb->h;
        d->gate_act = TSR_OP_SILU;
        if (pb_str(pb->gate_act)[0] != '\0')
            return pb_op(pb->gate_act, "gate_act", &d->gate_act, err);
        return TSR_OK;
    }
    case TSR_KIND_ATTENTION: {
        tsr_attention_desc *d = &r->u.attention;
        *d = (tsr_attention_desc){
            .batch = pb->batch,
            .heads = pb->heads,
            .heads_kv = pb->heads_kv,
            .seq_q = pb->seq_q,
            .seq_k = pb->seq_k,
            .head_dim = pb->head_dim,
            .head_dim_v = pb->head_dim_v,
            .scale = pb->scale,
            .causal = pb->causal,
        };
        /* 0 is the struct's marker for "default"; a negative count must not be
         * taken for it. */
        if (d->heads_kv < 0)
            return tsr_error_set(err, TSR_BAD_DIMENSION, "heads_kv: must be > 0 (got %lld)",
                                 (long long)d->heads_kv);
        if (d->head_dim_v < 0)
            return tsr_error_set(err, TSR_BAD_DIMENSION, "head_dim_v: must be > 0 (got %lld)",
                                 (long long)d->head_dim_v);
        return TSR_OK;
    }
    case TSR_KIND_POINTWISE:
        return pb_decode_pointwise(pb, &r->u.pointwise, err);
    }
    return tsr_error_set(err, TSR_INTERNAL, "kind: no decoder");
}

tsr_status tsr_region_from_pb(const Tessera__V1__Region *pb, tsr_region *out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL output");
    memset(out, 0, sizeof *out);
    if (pb == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: missing");
    tsr_status st = pb_decode(pb, out, err);
    if (st == TSR_OK)
        st = tsr_region_validate(out, err);
    if (st != TSR_OK)
        tsr_region_free(out);
    return st;
}

/* ---- encoding ---- */

static char *pb_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

/* True for +0.0 exactly (by bits; -0.0 is not): the one value that an unset
 * oneof already stands for, so it need not be sent. */
static bool pb_is_plus_zero(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits == 0;
}

static bool pb_encode_op_list(const tsr_op *ops, int n, char ***names, size_t *count)
{
    if (n <= 0)
        return true;
    *names = calloc((size_t)n, sizeof **names);
    if (*names == NULL)
        return false;
    *count = (size_t)n;
    for (int i = 0; i < n; i++) {
        if (((*names)[i] = pb_strdup(tsr_op_name(ops[i]))) == NULL)
            return false;
    }
    return true;
}

static bool pb_encode_pointwise(const tsr_pointwise_desc *pw, Tessera__V1__Region *pb)
{
    if (pw->n_inputs > 0) {
        pb->inputs = calloc((size_t)pw->n_inputs, sizeof *pb->inputs);
        if (pb->inputs == NULL)
            return false;
        pb->n_inputs = (size_t)pw->n_inputs;
        for (int i = 0; i < pw->n_inputs; i++) {
            Tessera__V1__PointwiseInput *in = malloc(sizeof *in);
            if ((pb->inputs[i] = in) == NULL)
                return false;
            tessera__v1__pointwise_input__init(in);
            if ((in->name = pb_strdup(pw->inputs[i].name)) == NULL)
                return false;
            if (pw->inputs[i].rank > 0) {
                in->shape = malloc(sizeof(int64_t) * (size_t)pw->inputs[i].rank);
                if (in->shape == NULL)
                    return false;
                in->n_shape = (size_t)pw->inputs[i].rank;
                memcpy(in->shape, pw->inputs[i].shape, sizeof(int64_t) * in->n_shape);
            }
        }
    }
    if (pw->n_nodes > 0) {
        pb->ops = calloc((size_t)pw->n_nodes, sizeof *pb->ops);
        if (pb->ops == NULL)
            return false;
        pb->n_ops = (size_t)pw->n_nodes;
        for (int i = 0; i < pw->n_nodes; i++) {
            const tsr_pw_node *node = &pw->nodes[i];
            Tessera__V1__PointwiseOp *op = malloc(sizeof *op);
            if ((pb->ops[i] = op) == NULL)
                return false;
            tessera__v1__pointwise_op__init(op);
            if ((op->op = pb_strdup(tsr_op_name(node->op))) == NULL ||
                (op->out = pb_strdup(node->out)) == NULL)
                return false;
            if (node->n_args > 0) {
                op->args = calloc((size_t)node->n_args, sizeof *op->args);
                if (op->args == NULL)
                    return false;
                op->n_args = (size_t)node->n_args;
                for (int j = 0; j < node->n_args; j++) {
                    if ((op->args[j] = pb_strdup(node->args[j])) == NULL)
                        return false;
                }
            }
            if (!pb_is_plus_zero(node->attrs.value)) {
                op->value_present_case = TESSERA__V1__POINTWISE_OP__VALUE_PRESENT_VALUE;
                op->value = node->attrs.value;
            }
            op->has_min = node->attrs.has_min;
            if (!pb_is_plus_zero(node->attrs.min)) {
                op->min_present_case = TESSERA__V1__POINTWISE_OP__MIN_PRESENT_MIN;
                op->min = node->attrs.min;
            }
            op->has_max = node->attrs.has_max;
            if (!pb_is_plus_zero(node->attrs.max)) {
                op->max_present_case = TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX;
                op->max = node->attrs.max;
            }
        }
    }
    return (pb->output = pb_strdup(pw->output)) != NULL;
}

static bool pb_encode(const tsr_region *r, Tessera__V1__Region *pb)
{
    pb->kind = (Tessera__V1__RegionKind)(r->kind + 1);
    pb->dtype = (Tessera__V1__DType)(r->dtype + 1);
    pb->out_dtype = (Tessera__V1__DType)(r->out_dtype + 1);
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        pb->m = r->u.matmul.m;
        pb->n = r->u.matmul.n;
        pb->k = r->u.matmul.k;
        return true;
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *d = &r->u.fused;
        pb->m = d->m;
        pb->n = d->n;
        pb->k = d->k;
        pb->residual = d->residual;
        pb->eps = d->eps;
        return pb_encode_op_list(d->prologue, d->n_prologue, &pb->prologue, &pb->n_prologue) &&
               pb_encode_op_list(d->epilogue, d->n_epilogue, &pb->epilogue, &pb->n_epilogue) &&
               (pb->reduction = pb_strdup(
                    d->reduction == TSR_REDUCTION_NONE ? "" : tsr_reduction_name(d->reduction))) !=
                   NULL;
    }
    case TSR_KIND_GATED:
        pb->m = r->u.gated.m;
        pb->k = r->u.gated.k;
        pb->h = r->u.gated.h;
        return (pb->gate_act = pb_strdup(tsr_op_name(r->u.gated.gate_act))) != NULL;
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        pb->batch = d->batch;
        pb->heads = d->heads;
        pb->heads_kv = d->heads_kv;
        pb->seq_q = d->seq_q;
        pb->seq_k = d->seq_k;
        pb->head_dim = d->head_dim;
        pb->head_dim_v = d->head_dim_v;
        pb->scale = d->scale;
        pb->causal = d->causal;
        return true;
    }
    case TSR_KIND_POINTWISE:
        return pb_encode_pointwise(&r->u.pointwise, pb);
    }
    return false;
}

/* The encoder indexes fixed arrays by the region's counts; a region that skipped
 * validation must not make it read past them. */
static bool pb_counts_fit(const tsr_region *r)
{
    if (r->kind == TSR_KIND_FUSED)
        return r->u.fused.n_prologue >= 0 && r->u.fused.n_prologue <= TSR_MAX_CHAIN &&
               r->u.fused.n_epilogue >= 0 && r->u.fused.n_epilogue <= TSR_MAX_CHAIN;
    if (r->kind != TSR_KIND_POINTWISE)
        return true;
    const tsr_pointwise_desc *pw = &r->u.pointwise;
    if (pw->n_inputs < 0 || pw->n_inputs > TSR_MAX_PW_INPUTS || pw->n_nodes < 0 ||
        (pw->n_nodes > 0 && pw->nodes == NULL))
        return false;
    for (int i = 0; i < pw->n_inputs; i++) {
        if (pw->inputs[i].rank < 0 || pw->inputs[i].rank > TSR_MAX_RANK)
            return false;
    }
    for (int i = 0; i < pw->n_nodes; i++) {
        if (pw->nodes[i].n_args < 0 || pw->nodes[i].n_args > 2)
            return false;
    }
    return true;
}

tsr_status tsr_region_to_pb(const tsr_region *r, Tessera__V1__Region **out, tsr_error *err)
{
    if (r == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "region: NULL argument");
    *out = NULL;
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: unknown kind %d", (int)r->kind);
    if (!pb_counts_fit(r))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "region: counts out of range (not a validated region)");
    Tessera__V1__Region *pb = malloc(sizeof *pb);
    if (pb == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "region: no memory for the message");
    tessera__v1__region__init(pb);
    if (!pb_encode(r, pb)) {
        tsr_region_pb_free(pb);
        return tsr_error_set(err, TSR_NO_MEMORY, "region: no memory for the message");
    }
    *out = pb;
    return TSR_OK;
}

/* Strings left at protobuf_c_empty_string belong to protobuf-c, not to us. */
static void pb_free_str(char *s)
{
    if (s != NULL && s != protobuf_c_empty_string)
        free(s);
}

static void pb_free_strs(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        pb_free_str(v[i]);
    free(v);
}

void tsr_region_pb_free(Tessera__V1__Region *pb)
{
    if (pb == NULL)
        return;
    pb_free_strs(pb->prologue, pb->n_prologue);
    pb_free_strs(pb->epilogue, pb->n_epilogue);
    pb_free_str(pb->reduction);
    pb_free_str(pb->gate_act);
    pb_free_str(pb->output);
    if (pb->inputs != NULL) {
        for (size_t i = 0; i < pb->n_inputs; i++) {
            if (pb->inputs[i] == NULL)
                continue;
            pb_free_str(pb->inputs[i]->name);
            free(pb->inputs[i]->shape);
            free(pb->inputs[i]);
        }
        free(pb->inputs);
    }
    if (pb->ops != NULL) {
        for (size_t i = 0; i < pb->n_ops; i++) {
            if (pb->ops[i] == NULL)
                continue;
            pb_free_str(pb->ops[i]->op);
            pb_free_str(pb->ops[i]->out);
            pb_free_strs(pb->ops[i]->args, pb->ops[i]->n_args);
            free(pb->ops[i]);
        }
        free(pb->ops);
    }
    free(pb);
}
