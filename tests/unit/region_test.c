/*
 * region_test.c — the region IR: every validation rule of docs/regions.md by its exact
 * status code and the field its message names, the defaults validation fills,
 * constructors, copy/equal/free, signatures, element counts and FLOP counts.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/region.h"

/* The message must start with the field path: that is what a user reads first. */
#define assert_fails(r, want, prefix)                                                              \
    do {                                                                                           \
        tsr_error e_;                                                                              \
        tsr_status st_ = tsr_region_validate((r), &e_);                                            \
        cr_assert_eq(st_, (want), "got %s (%s), want %s", tsr_status_name(st_), e_.message,        \
                     tsr_status_name(want));                                                       \
        cr_assert_eq(e_.code, (want));                                                             \
        cr_assert(strncmp(e_.message, (prefix), strlen(prefix)) == 0,                              \
                  "message '%s' does not start with '%s'", e_.message, (prefix));                  \
    } while (0)

#define assert_valid(r)                                                                            \
    do {                                                                                           \
        tsr_error e_;                                                                              \
        tsr_status st_ = tsr_region_validate((r), &e_);                                            \
        cr_assert_eq(st_, TSR_OK, "got %s: %s", tsr_status_name(st_), e_.message);                 \
    } while (0)

#define assert_message(r, want, text)                                                              \
    do {                                                                                           \
        tsr_error e_;                                                                              \
        cr_assert_eq(tsr_region_validate((r), &e_), (want));                                       \
        cr_assert_str_eq(e_.message, (text));                                                      \
    } while (0)

static tsr_region matmul(int64_t m, int64_t n, int64_t k)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = TSR_KIND_MATMUL;
    r.dtype = r.out_dtype = TSR_BF16;
    r.u.matmul = (tsr_matmul_desc){m, n, k};
    return r;
}

static tsr_region fused(int n_epi, const tsr_op *epi)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = TSR_KIND_FUSED;
    r.dtype = r.out_dtype = TSR_BF16;
    r.u.fused.m = 32;
    r.u.fused.n = 16;
    r.u.fused.k = 8;
    r.u.fused.eps = 1e-6;
    r.u.fused.n_epilogue = n_epi;
    for (int i = 0; i < n_epi; i++)
        r.u.fused.epilogue[i] = epi[i];
    return r;
}

static tsr_attention_desc attention_desc(void)
{
    return (tsr_attention_desc){.batch = 2,
                                .heads = 8,
                                .heads_kv = 0,
                                .seq_q = 16,
                                .seq_k = 24,
                                .head_dim = 64,
                                .head_dim_v = 0,
                                .scale = NAN,
                                .causal = true};
}

static tsr_region attention(void)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = TSR_KIND_ATTENTION;
    r.dtype = r.out_dtype = TSR_BF16;
    r.u.attention = attention_desc();
    return r;
}

/* ---- a small pointwise builder ---- */

static void pw_begin(tsr_region *r)
{
    memset(r, 0, sizeof *r);
    r->kind = TSR_KIND_POINTWISE;
    r->dtype = r->out_dtype = TSR_F32;
}

static void pw_input(tsr_region *r, const char *name, int rank, const int64_t *shape)
{
    tsr_pw_input *in = &r->u.pointwise.inputs[r->u.pointwise.n_inputs++];
    strcpy(in->name, name);
    in->rank = rank;
    if (rank > 0)
        memcpy(in->shape, shape, sizeof(int64_t) * (size_t)rank);
}

static tsr_pw_node *pw_op(tsr_region *r, tsr_op op, const char *out, const char *a0, const char *a1)
{
    tsr_pointwise_desc *pw = &r->u.pointwise;
    pw->nodes = realloc(pw->nodes, sizeof *pw->nodes * (size_t)(pw->n_nodes + 1));
    cr_assert_not_null(pw->nodes);
    tsr_pw_node *node = &pw->nodes[pw->n_nodes++];
    memset(node, 0, sizeof *node);
    node->op = op;
    strcpy(node->out, out);
    if (a0 != NULL)
        strcpy(node->args[node->n_args++], a0);
    if (a1 != NULL)
        strcpy(node->args[node->n_args++], a1);
    return node;
}

/* relu(a + b) * sigmoid(c), c broadcast along the rows. */
static void pw_example(tsr_region *r)
{
    pw_begin(r);
    pw_input(r, "a", 2, (int64_t[]){4, 8});
    pw_input(r, "b", 2, (int64_t[]){4, 8});
    pw_input(r, "c", 1, (int64_t[]){8});
    pw_op(r, TSR_OP_ADD, "s", "a", "b");
    pw_op(r, TSR_OP_RELU, "t", "s", NULL);
    pw_op(r, TSR_OP_SIGMOID, "g", "c", NULL);
    pw_op(r, TSR_OP_MUL, "y", "t", "g");
    strcpy(r->u.pointwise.output, "y");
}

/* ---- names ---- */

Test(region, kind_and_reduction_names_round_trip)
{
    const char *kinds[] = {"matmul", "fused", "gated", "attention", "pointwise"};
    for (int i = 0; i < TSR_KIND_COUNT; i++) {
        tsr_region_kind k;
        cr_assert_str_eq(tsr_region_kind_name((tsr_region_kind)i), kinds[i]);
        cr_assert(tsr_region_kind_parse(kinds[i], &k));
        cr_assert_eq(k, (tsr_region_kind)i);
    }
    tsr_region_kind k = TSR_KIND_GATED;
    cr_assert_not(tsr_region_kind_parse("Matmul", &k));
    cr_assert_not(tsr_region_kind_parse(NULL, &k));
    cr_assert_eq(k, TSR_KIND_GATED);
    cr_assert_str_eq(tsr_region_kind_name((tsr_region_kind)5), "?");
    const char *reds[] = {"none", "rmsnorm", "softmax", "layer_norm"};
    for (int i = 0; i < 4; i++) {
        tsr_reduction red;
        cr_assert_str_eq(tsr_reduction_name((tsr_reduction)i), reds[i]);
        cr_assert(tsr_reduction_parse(reds[i], &red));
        cr_assert_eq(red, (tsr_reduction)i);
    }
    tsr_reduction red;
    cr_assert_not(tsr_reduction_parse("layernorm", &red));
    cr_assert_str_eq(tsr_reduction_name((tsr_reduction)4), "?");
}

/* ---- common fields ---- */

Test(region, rejects_unknown_kind_and_dtypes)
{
    tsr_region r = matmul(4, 4, 4);
    r.kind = (tsr_region_kind)5;
    assert_message(&r, TSR_UNKNOWN_KIND, "kind: unknown kind 5");
    r = matmul(4, 4, 4);
    r.dtype = (tsr_dtype)3;
    assert_message(&r, TSR_BAD_DTYPE, "dtype: unknown dtype 3");
    r = matmul(4, 4, 4);
    r.out_dtype = (tsr_dtype)-1;
    assert_fails(&r, TSR_BAD_DTYPE, "out_dtype: ");
    cr_assert_eq(tsr_region_validate(NULL, NULL), TSR_INVALID_ARGUMENT);
}

Test(region, validate_works_without_an_error_struct)
{
    tsr_region r = matmul(0, 4, 4);
    cr_assert_eq(tsr_region_validate(&r, NULL), TSR_BAD_DIMENSION);
}

/* ---- matmul ---- */

Test(region, matmul_constructor_sets_fields)
{
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_F16, 128, 96, 64, &e), TSR_OK);
    cr_assert_eq(e.code, TSR_OK);
    cr_assert_eq(r.kind, TSR_KIND_MATMUL);
    cr_assert_eq(r.dtype, TSR_F16);
    cr_assert_eq(r.out_dtype, TSR_F16);
    cr_assert_eq(r.u.matmul.m, 128);
    cr_assert_eq(r.u.matmul.n, 96);
    cr_assert_eq(r.u.matmul.k, 64);
    cr_assert_eq(tsr_region_init_matmul(&r, (tsr_dtype)9, 1, 1, 1, &e), TSR_BAD_DTYPE);
}

Test(region, matmul_rejects_non_positive_dimensions)
{
    tsr_region r = matmul(0, 4, 4);
    assert_message(&r, TSR_BAD_DIMENSION, "m: must be > 0 (got 0)");
    r = matmul(4, -3, 4);
    assert_message(&r, TSR_BAD_DIMENSION, "n: must be > 0 (got -3)");
    r = matmul(4, 4, 0);
    assert_message(&r, TSR_BAD_DIMENSION, "k: must be > 0 (got 0)");
    tsr_error e;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1, 0, 1, &e), TSR_BAD_DIMENSION);
    cr_assert_str_eq(e.message, "n: must be > 0 (got 0)");
}

Test(region, matmul_rejects_tensors_past_two_to_the_forty)
{
    tsr_region r = matmul(INT64_C(1) << 20, 1, INT64_C(1) << 20);
    assert_valid(&r); /* exactly 2^40 elements is allowed */
    r = matmul(INT64_C(1) << 21, 1, INT64_C(1) << 20);
    assert_fails(&r, TSR_TOO_LARGE, "a: 2199023255552 elements");
    r = matmul(1, INT64_C(1) << 21, INT64_C(1) << 20);
    assert_fails(&r, TSR_TOO_LARGE, "b: ");
    r = matmul(INT64_C(1) << 30, INT64_C(1) << 11, 1);
    assert_fails(&r, TSR_TOO_LARGE, "output: ");
    r = matmul(INT64_MAX, 1, 3); /* the product overflows int64 */
    assert_fails(&r, TSR_TOO_LARGE, "a: element count overflows");
}

/* ---- fused ---- */

Test(region, fused_accepts_every_epilogue_op)
{
    const tsr_op ok[] = {TSR_OP_BIAS, TSR_OP_RELU,    TSR_OP_GELU,
                         TSR_OP_SILU, TSR_OP_SIGMOID, TSR_OP_TANH};
    tsr_region r = fused(6, ok);
    r.u.fused.residual = true;
    assert_valid(&r);
    const tsr_op bad[] = {TSR_OP_EXP,   TSR_OP_ADD, TSR_OP_CLAMP,
                          TSR_OP_CONST, TSR_OP_NEG, TSR_OP_SOFTPLUS};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tsr_op epi[2] = {TSR_OP_RELU, bad[i]};
        r = fused(2, epi);
        assert_fails(&r, TSR_UNKNOWN_OP, "epilogue[1]: ");
    }
    tsr_op unknown = (tsr_op)99;
    r = fused(1, &unknown);
    assert_message(&r, TSR_UNKNOWN_OP, "epilogue[0]: unknown op 99");
}

Test(region, fused_prologue_takes_unary_ops_without_attributes)
{
    tsr_op relu = TSR_OP_RELU;
    tsr_region r = fused(1, &relu);
    const tsr_op ok[] = {TSR_OP_NEG,        TSR_OP_ABS,      TSR_OP_EXP,     TSR_OP_LOG,
                         TSR_OP_SQRT,       TSR_OP_RSQRT,    TSR_OP_LOG1P,   TSR_OP_EXPM1,
                         TSR_OP_RECIPROCAL, TSR_OP_RELU,     TSR_OP_SIGMOID, TSR_OP_TANH,
                         TSR_OP_SILU,       TSR_OP_SOFTPLUS, TSR_OP_SIGN,    TSR_OP_GELU};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        r.u.fused.n_prologue = 1;
        r.u.fused.prologue[0] = ok[i];
        assert_valid(&r);
    }
    const tsr_op bad[] = {TSR_OP_BIAS, TSR_OP_ADD, TSR_OP_CLAMP, TSR_OP_CONST, TSR_OP_MAXIMUM};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r.u.fused.n_prologue = 2;
        r.u.fused.prologue[0] = TSR_OP_ABS;
        r.u.fused.prologue[1] = bad[i];
        assert_fails(&r, TSR_UNKNOWN_OP, "prologue[1]: ");
    }
    r.u.fused.n_prologue = 1;
    r.u.fused.prologue[0] = TSR_OP_BIAS;
    assert_message(&r, TSR_UNKNOWN_OP,
                   "prologue[0]: 'bias' is not allowed in a prologue (unary ops without "
                   "attributes only)");
    /* a prologue alone is enough to make a fused region */
    r = fused(0, NULL);
    r.u.fused.n_prologue = 1;
    r.u.fused.prologue[0] = TSR_OP_EXP;
    assert_valid(&r);
}

Test(region, fused_rejects_bias_twice)
{
    const tsr_op epi[] = {TSR_OP_BIAS, TSR_OP_RELU, TSR_OP_BIAS};
    tsr_region r = fused(3, epi);
    assert_message(&r, TSR_CONFLICT, "epilogue[2]: bias appears twice (first at epilogue[0])");
}

Test(region, fused_rejects_residual_with_reduction)
{
    tsr_region r = fused(0, NULL);
    r.u.fused.residual = true;
    assert_valid(&r);
    r.u.fused.reduction = TSR_REDUCTION_RMSNORM;
    assert_message(&r, TSR_CONFLICT, "residual: cannot be combined with reduction 'rmsnorm'");
    r.u.fused.residual = false;
    assert_valid(&r);
    r.u.fused.reduction = TSR_REDUCTION_LAYER_NORM;
    assert_valid(&r);
    r.u.fused.reduction = (tsr_reduction)4;
    assert_message(&r, TSR_BAD_ATTRIBUTE, "reduction: unknown reduction 4");
}

Test(region, fused_needs_something_to_fuse)
{
    tsr_region r = fused(0, NULL);
    assert_fails(&r, TSR_CONFLICT,
                 "kind: a fused region needs at least one of prologue, "
                 "epilogue, residual, reduction");
    r.u.fused.reduction = TSR_REDUCTION_SOFTMAX;
    assert_valid(&r);
}

Test(region, fused_limits_chains_and_checks_eps)
{
    tsr_op epi[TSR_MAX_CHAIN + 1];
    for (int i = 0; i <= TSR_MAX_CHAIN; i++)
        epi[i] = TSR_OP_RELU;
    tsr_region r = fused(TSR_MAX_CHAIN, epi);
    assert_valid(&r);
    r.u.fused.n_epilogue = TSR_MAX_CHAIN + 1;
    assert_fails(&r, TSR_TOO_LARGE, "epilogue: ");
    r = fused(1, epi);
    r.u.fused.n_prologue = TSR_MAX_CHAIN + 1;
    assert_fails(&r, TSR_TOO_LARGE, "prologue: ");
    r = fused(1, epi);
    r.u.fused.eps = 0;
    assert_valid(&r);
    r.u.fused.eps = -1e-6;
    assert_fails(&r, TSR_BAD_ATTRIBUTE, "eps: ");
    r.u.fused.eps = NAN;
    assert_fails(&r, TSR_BAD_ATTRIBUTE, "eps: ");
    r.u.fused.eps = INFINITY;
    assert_fails(&r, TSR_BAD_ATTRIBUTE, "eps: ");
    r = fused(1, epi);
    r.u.fused.k = 0;
    assert_message(&r, TSR_BAD_DIMENSION, "k: must be > 0 (got 0)");
}

/* ---- gated ---- */

Test(region, gated_accepts_activations_only)
{
    const tsr_op ok[] = {TSR_OP_RELU, TSR_OP_GELU, TSR_OP_SILU, TSR_OP_SIGMOID, TSR_OP_TANH};
    tsr_region r;
    tsr_error e;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 96, ok[i], &e), TSR_OK);
        cr_assert_eq(r.u.gated.gate_act, ok[i]);
    }
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 96, TSR_OP_BIAS, &e), TSR_UNKNOWN_OP);
    cr_assert(strncmp(e.message, "gate_act: 'bias'", 16) == 0, "%s", e.message);
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 96, TSR_OP_EXP, &e), TSR_UNKNOWN_OP);
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 96, (tsr_op)-1, &e), TSR_UNKNOWN_OP);
    cr_assert_str_eq(e.message, "gate_act: unknown op -1");
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 64, 128, 0, TSR_OP_SILU, &e),
                 TSR_BAD_DIMENSION);
    cr_assert_str_eq(e.message, "h: must be > 0 (got 0)");
    cr_assert_eq(
        tsr_region_init_gated(&r, TSR_BF16, INT64_C(1) << 30, 1, INT64_C(1) << 11, TSR_OP_SILU, &e),
        TSR_TOO_LARGE);
    cr_assert(strncmp(e.message, "output: ", 8) == 0, "%s", e.message);
}

/* ---- attention ---- */

Test(region, attention_fills_defaults)
{
    tsr_region r;
    tsr_error e;
    tsr_attention_desc d = attention_desc();
    cr_assert_eq(tsr_region_init_attention(&r, TSR_BF16, &d, &e), TSR_OK);
    cr_assert_eq(r.u.attention.heads_kv, 8);
    cr_assert_eq(r.u.attention.head_dim_v, 64);
    cr_assert_eq(r.u.attention.scale, 0.125);
    /* explicit values stay */
    d.heads_kv = 2;
    d.head_dim_v = 32;
    d.scale = 0.5;
    cr_assert_eq(tsr_region_init_attention(&r, TSR_BF16, &d, &e), TSR_OK);
    cr_assert_eq(r.u.attention.heads_kv, 2);
    cr_assert_eq(r.u.attention.head_dim_v, 32);
    cr_assert_eq(r.u.attention.scale, 0.5);
    /* validation is idempotent */
    tsr_region again = r;
    assert_valid(&again);
    cr_assert(tsr_region_equal(&again, &r));
}

Test(region, attention_rejects_heads_not_divisible)
{
    tsr_region r = attention();
    r.u.attention.heads = 6;
    r.u.attention.heads_kv = 4;
    assert_message(&r, TSR_BAD_HEADS, "heads: 6 not divisible by heads_kv 4");
    r.u.attention.heads_kv = 12; /* more kv heads than query heads */
    assert_fails(&r, TSR_BAD_HEADS, "heads: ");
    r.u.attention.heads_kv = 3;
    assert_valid(&r);
    r.u.attention.heads_kv = -2;
    assert_message(&r, TSR_BAD_DIMENSION, "heads_kv: must be > 0 (got -2)");
}

Test(region, attention_checks_dimensions_scale_and_size)
{
    const char *fields[] = {"batch", "heads", "seq_q", "seq_k", "head_dim", "head_dim_v"};
    for (int i = 0; i < 6; i++) {
        tsr_region r = attention();
        int64_t *slot[] = {&r.u.attention.batch, &r.u.attention.seq_q, &r.u.attention.seq_k,
                           &r.u.attention.head_dim, &r.u.attention.head_dim_v};
        char want[64];
        if (i == 1) {
            r.u.attention.heads = -1;
        } else {
            *slot[i == 0 ? 0 : i - 1] = -1;
        }
        snprintf(want, sizeof want, "%s: must be > 0 (got -1)", fields[i]);
        assert_message(&r, TSR_BAD_DIMENSION, want);
    }
    tsr_region r = attention();
    r.u.attention.scale = INFINITY;
    assert_fails(&r, TSR_BAD_ATTRIBUTE, "scale: ");
    r.u.attention.scale = -0.25; /* any finite scale is allowed */
    assert_valid(&r);
    r = attention();
    r.u.attention.batch = INT64_C(1) << 20;
    r.u.attention.heads = 1 << 10;
    r.u.attention.seq_q = 1 << 10;
    r.u.attention.head_dim = 2;
    assert_fails(&r, TSR_TOO_LARGE, "q: ");
    r = attention();
    r.u.attention.seq_k = INT64_C(1) << 31;
    r.u.attention.head_dim_v = 1;
    assert_fails(&r, TSR_TOO_LARGE, "k: ");
}

Test(region, failed_validation_leaves_defaults_unset)
{
    tsr_region r = attention();
    r.u.attention.seq_q = 0;
    assert_fails(&r, TSR_BAD_DIMENSION, "seq_q: ");
    cr_assert_eq(r.u.attention.heads_kv, 0);
    cr_assert_eq(r.u.attention.head_dim_v, 0);
    cr_assert(isnan(r.u.attention.scale));
}

/* ---- pointwise ---- */

/* The pointwise tests start from pw_example's region. Criterion runs each test
 * in a process of its own, so one file-scope region serves them all: .init
 * builds it, .fini frees it. */
static tsr_region example;

static void example_init(void)
{
    pw_example(&example);
}

static void example_free(void)
{
    tsr_region_free(&example);
}

Test(region, pointwise_resolves_names_and_broadcasts, .init = example_init, .fini = example_free)
{
    assert_valid(&example);
    const tsr_pointwise_desc *pw = &example.u.pointwise;
    cr_assert_eq(pw->nodes[0].arg_index[0], 0);
    cr_assert_eq(pw->nodes[0].arg_index[1], 1);
    cr_assert_eq(pw->nodes[1].arg_index[0], 3);
    cr_assert_eq(pw->nodes[1].arg_index[1], -1);
    cr_assert_eq(pw->nodes[2].arg_index[0], 2);
    cr_assert_eq(pw->nodes[3].arg_index[0], 4);
    cr_assert_eq(pw->nodes[3].arg_index[1], 5);
    cr_assert_eq(pw->output_index, 6);
    cr_assert_eq(pw->out_rank, 2);
    cr_assert_eq(pw->out_shape[0], 4);
    cr_assert_eq(pw->out_shape[1], 8);
}

Test(region, pointwise_broadcasts_like_numpy)
{
    tsr_region r;
    pw_begin(&r);
    pw_input(&r, "a", 3, (int64_t[]){4, 1, 3});
    pw_input(&r, "b", 2, (int64_t[]){5, 1});
    pw_input(&r, "s", 0, NULL);
    pw_op(&r, TSR_OP_ADD, "t", "a", "b");
    pw_op(&r, TSR_OP_MUL, "y", "t", "s");
    strcpy(r.u.pointwise.output, "y");
    assert_valid(&r);
    cr_assert_eq(r.u.pointwise.out_rank, 3);
    cr_assert_eq(r.u.pointwise.out_shape[0], 4);
    cr_assert_eq(r.u.pointwise.out_shape[1], 5);
    cr_assert_eq(r.u.pointwise.out_shape[2], 3);
    tsr_region_free(&r);

    pw_begin(&r);
    pw_input(&r, "a", 2, (int64_t[]){3, 4});
    pw_input(&r, "b", 1, (int64_t[]){5});
    pw_op(&r, TSR_OP_ADD, "y", "a", "b");
    strcpy(r.u.pointwise.output, "y");
    assert_message(&r, TSR_SHAPE_MISMATCH,
                   "inputs[1].shape: [5] does not broadcast with [3,4] (the earlier inputs' "
                   "shape)");
    tsr_region_free(&r);
}

Test(region, pointwise_output_may_name_an_input_or_a_scalar_const)
{
    tsr_region r;
    pw_begin(&r);
    pw_input(&r, "x", 1, (int64_t[]){7});
    strcpy(r.u.pointwise.output, "x");
    assert_valid(&r);
    cr_assert_eq(r.u.pointwise.output_index, 0);
    cr_assert_eq(r.u.pointwise.out_rank, 1);
    tsr_region_free(&r);

    pw_begin(&r);
    pw_op(&r, TSR_OP_CONST, "c", NULL, NULL)->attrs.value = 2.5;
    strcpy(r.u.pointwise.output, "c");
    assert_valid(&r);
    cr_assert_eq(r.u.pointwise.output_index, 0);
    cr_assert_eq(r.u.pointwise.out_rank, 0);
    tsr_region_free(&r);
}

Test(region, pointwise_rejects_undefined_names, .init = example_init, .fini = example_free)
{
    strcpy(example.u.pointwise.nodes[2].args[0], "x");
    assert_message(&example, TSR_UNDEFINED_NAME, "ops[2].args[0]: undefined name 'x'");
    strcpy(example.u.pointwise.nodes[2].args[0], "c");
    strcpy(example.u.pointwise.nodes[3].args[1], "x");
    assert_message(&example, TSR_UNDEFINED_NAME, "ops[3].args[1]: undefined name 'x'");
    strcpy(example.u.pointwise.nodes[3].args[1], "g");
    strcpy(example.u.pointwise.output, "zz");
    assert_message(&example, TSR_UNDEFINED_NAME, "output: undefined name 'zz'");
    example.u.pointwise.output[0] = '\0';
    assert_message(&example, TSR_UNDEFINED_NAME, "output: undefined name ''");
}

Test(region, pointwise_rejects_cycles, .init = example_init, .fini = example_free)
{
    strcpy(example.u.pointwise.nodes[1].args[0], "y"); /* defined later by ops[3] */
    assert_message(&example, TSR_CYCLE,
                   "ops[1].args[0]: 'y' is used before its definition at ops[3].out");
    strcpy(example.u.pointwise.nodes[1].args[0], "t"); /* defined by ops[1] itself */
    assert_message(&example, TSR_CYCLE, "ops[1].args[0]: 't' is defined by this op");
}

Test(region, pointwise_rejects_duplicate_names, .init = example_init, .fini = example_free)
{
    strcpy(example.u.pointwise.nodes[2].out, "a"); /* reuses an input's name */
    assert_message(&example, TSR_DUPLICATE_NAME,
                   "ops[2].out: 'a' defined twice (first at inputs[0].name)");
    strcpy(example.u.pointwise.nodes[2].out, "s"); /* reuses ops[0]'s output */
    assert_message(&example, TSR_DUPLICATE_NAME,
                   "ops[2].out: 's' defined twice (first at ops[0].out)");
    strcpy(example.u.pointwise.nodes[2].out, "g");
    strcpy(example.u.pointwise.inputs[2].name, "b");
    assert_message(&example, TSR_DUPLICATE_NAME,
                   "inputs[2].name: 'b' defined twice (first at inputs[1].name)");
}

Test(region, pointwise_checks_arity, .init = example_init, .fini = example_free)
{
    example.u.pointwise.nodes[0].n_args = 1;
    assert_message(&example, TSR_BAD_ARITY, "ops[0].args: 'add' takes 2 arguments (got 1)");
    example.u.pointwise.nodes[0].n_args = 2;
    example.u.pointwise.nodes[1].n_args = 2;
    strcpy(example.u.pointwise.nodes[1].args[1], "a");
    assert_message(&example, TSR_BAD_ARITY, "ops[1].args: 'relu' takes 1 argument (got 2)");
    example.u.pointwise.nodes[1].n_args = 1;
    example.u.pointwise.nodes[1].n_args = 3;
    assert_fails(&example, TSR_BAD_ARITY, "ops[1].args: ");
    example.u.pointwise.nodes[1].n_args = 1;
    tsr_pw_node *c = pw_op(&example, TSR_OP_CONST, "k", "a", NULL);
    (void)c;
    assert_message(&example, TSR_BAD_ARITY, "ops[4].args: 'const' takes 0 arguments (got 1)");
}

Test(region, pointwise_rejects_unknown_and_misplaced_ops, .init = example_init,
     .fini = example_free)
{
    example.u.pointwise.nodes[1].op = (tsr_op)TSR_OP_COUNT;
    assert_message(&example, TSR_UNKNOWN_OP, "ops[1].op: unknown op 26");
    example.u.pointwise.nodes[1].op = TSR_OP_BIAS;
    assert_message(&example, TSR_UNKNOWN_OP, "ops[1].op: 'bias' is not a pointwise op");
}

Test(region, pointwise_checks_attributes, .init = example_init, .fini = example_free)
{
    tsr_pw_node *n = pw_op(&example, TSR_OP_CLAMP, "z", "y", NULL);
    strcpy(example.u.pointwise.output, "z");
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[4]: clamp needs min or max");
    n->attrs.has_max = true;
    n->attrs.max = INFINITY;
    assert_valid(&example);
    n->attrs.has_min = true;
    n->attrs.min = NAN;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[4].min: must not be NaN");
    n->attrs.min = 3; /* min above max is np.clip's business: the result is max */
    n->attrs.max = 1;
    assert_valid(&example);
    n->attrs.max = NAN;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[4].max: must not be NaN");
    n->attrs.max = 1;
    n->attrs.has_max = false; /* a bound not in use must be zero */
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[4].max: 'clamp' takes no max");
    n->attrs.max = 0;
    assert_valid(&example);
    n->attrs.value = 1;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[4].value: 'clamp' takes no value");
    n->attrs.value = 0;

    example.u.pointwise.nodes[1].attrs.has_min = true;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[1].min: 'relu' takes no min");
    example.u.pointwise.nodes[1].attrs.has_min = false;
    example.u.pointwise.nodes[0].attrs.value = 0.5;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[0].value: 'add' takes no value");
    example.u.pointwise.nodes[0].attrs.value = 0;

    tsr_pw_node *c = pw_op(&example, TSR_OP_CONST, "k", NULL, NULL);
    c->attrs.value = NAN;
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[5].value: must not be NaN");
    example.u.pointwise.nodes[5].attrs.value = -INFINITY;
    assert_valid(&example);
}

Test(region, pointwise_checks_names, .init = example_init, .fini = example_free)
{
    example.u.pointwise.inputs[1].name[0] = '\0';
    assert_message(&example, TSR_BAD_ATTRIBUTE, "inputs[1].name: must not be empty");
    memset(example.u.pointwise.inputs[1].name, 'b', TSR_MAX_NAME); /* no terminator */
    assert_message(&example, TSR_BAD_ATTRIBUTE, "inputs[1].name: longer than 63 bytes");
    strcpy(example.u.pointwise.inputs[1].name, "b");
    example.u.pointwise.nodes[0].out[0] = '\0';
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[0].out: must not be empty");
    strcpy(example.u.pointwise.nodes[0].out, "s");
    memset(example.u.pointwise.nodes[1].args[0], 's', TSR_MAX_NAME);
    assert_message(&example, TSR_BAD_ATTRIBUTE, "ops[1].args[0]: longer than 63 bytes");
    strcpy(example.u.pointwise.nodes[1].args[0], "s");
    memset(example.u.pointwise.output, 'y', TSR_MAX_NAME);
    assert_message(&example, TSR_BAD_ATTRIBUTE, "output: longer than 63 bytes");
}

Test(region, pointwise_checks_shapes_and_limits, .init = example_init, .fini = example_free)
{
    example.u.pointwise.inputs[0].shape[1] = 0;
    assert_message(&example, TSR_BAD_DIMENSION, "inputs[0].shape[1]: must be > 0 (got 0)");
    example.u.pointwise.inputs[0].shape[1] = 8;
    example.u.pointwise.inputs[2].rank = TSR_MAX_RANK + 1;
    assert_message(&example, TSR_BAD_DIMENSION, "inputs[2].shape: rank 9 outside 0..8");
    example.u.pointwise.inputs[2].rank = -1;
    assert_fails(&example, TSR_BAD_DIMENSION, "inputs[2].shape: ");
    example.u.pointwise.inputs[2].rank = 1;
    assert_valid(&example);

    /* an input past 2^40, and an output past it built from two inputs under it */
    example.u.pointwise.inputs[0].shape[0] = INT64_C(1) << 21;
    example.u.pointwise.inputs[0].shape[1] = INT64_C(1) << 20;
    assert_fails(&example, TSR_TOO_LARGE, "inputs[0]: ");
    tsr_region_free(&example);
    pw_begin(&example);
    pw_input(&example, "a", 2, (int64_t[]){INT64_C(1) << 21, 1});
    pw_input(&example, "b", 2, (int64_t[]){1, INT64_C(1) << 20});
    pw_op(&example, TSR_OP_ADD, "y", "a", "b");
    strcpy(example.u.pointwise.output, "y");
    assert_fails(&example, TSR_TOO_LARGE, "output: ");
    tsr_region_free(&example);

    pw_begin(&example);
    for (int i = 0; i <= TSR_MAX_PW_INPUTS; i++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", i);
        if (i < TSR_MAX_PW_INPUTS)
            pw_input(&example, name, 1, (int64_t[]){2});
    }
    strcpy(example.u.pointwise.output, "x0");
    assert_valid(&example); /* 16 inputs is the limit */
    example.u.pointwise.n_inputs = TSR_MAX_PW_INPUTS + 1;
    assert_message(&example, TSR_TOO_LARGE, "inputs: 17 inputs outside 0..16");
    example.u.pointwise.n_inputs = 1;
    for (int i = 0; i < TSR_MAX_PW_NODES; i++) {
        char name[16], prev[16];
        snprintf(name, sizeof name, "t%d", i);
        snprintf(prev, sizeof prev, "t%d", i - 1);
        pw_op(&example, TSR_OP_NEG, name, i == 0 ? "x0" : prev, NULL); /* a chain of negations */
    }
    assert_valid(&example); /* 1024 ops is the limit */
    pw_op(&example, TSR_OP_NEG, "one_more", "x0", NULL);
    assert_message(&example, TSR_TOO_LARGE, "ops: 1025 ops outside 0..1024");
}

/* ---- ownership, copy, equality ---- */

Test(region, free_is_safe_to_repeat_and_on_zeroed_regions)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    tsr_region_free(&r);
    tsr_region_free(&r);
    tsr_region_free(NULL);
    pw_example(&r);
    tsr_region_free(&r);
    cr_assert_null(r.u.pointwise.nodes);
    cr_assert_eq(r.kind, TSR_KIND_MATMUL); /* zeroed */
    tsr_region_free(&r);
}

Test(region, copy_is_deep_and_equal)
{
    tsr_region a, b;
    tsr_error e;
    pw_example(&a);
    assert_valid(&a);
    cr_assert_eq(tsr_region_copy(&b, &a, &e), TSR_OK);
    cr_assert_neq(a.u.pointwise.nodes, b.u.pointwise.nodes);
    cr_assert(tsr_region_equal(&a, &b));
    strcpy(b.u.pointwise.nodes[0].out, "s2");
    strcpy(b.u.pointwise.nodes[1].args[0], "s2");
    assert_valid(&b);
    cr_assert_not(tsr_region_equal(&a, &b)); /* names count */
    cr_assert_str_eq(a.u.pointwise.nodes[0].out, "s");
    tsr_region_free(&a);
    tsr_region_free(&b);

    tsr_region m = matmul(4, 5, 6), m2;
    cr_assert_eq(tsr_region_copy(&m2, &m, &e), TSR_OK);
    cr_assert(tsr_region_equal(&m, &m2));
    cr_assert_eq(tsr_region_copy(NULL, &m, &e), TSR_INVALID_ARGUMENT);
}

Test(region, equal_compares_every_field_and_floats_by_bits)
{
    tsr_region a = matmul(4, 5, 6), b = matmul(4, 5, 6);
    cr_assert(tsr_region_equal(&a, &b));
    b.u.matmul.k = 7;
    cr_assert_not(tsr_region_equal(&a, &b));
    b = matmul(4, 5, 6);
    b.out_dtype = TSR_F32;
    cr_assert_not(tsr_region_equal(&a, &b));
    b = matmul(4, 5, 6);
    b.kind = TSR_KIND_GATED;
    cr_assert_not(tsr_region_equal(&a, &b));

    tsr_region x = attention(), y = attention();
    assert_valid(&x);
    assert_valid(&y);
    cr_assert(tsr_region_equal(&x, &y));
    y.u.attention.causal = false;
    cr_assert_not(tsr_region_equal(&x, &y));
    y = x;
    y.u.attention.scale = nextafter(x.u.attention.scale, 1.0);
    cr_assert_not(tsr_region_equal(&x, &y));

    tsr_region p, q;
    pw_begin(&p);
    pw_op(&p, TSR_OP_CONST, "c", NULL, NULL)->attrs.value = 0.0;
    strcpy(p.u.pointwise.output, "c");
    pw_begin(&q);
    pw_op(&q, TSR_OP_CONST, "c", NULL, NULL)->attrs.value = -0.0;
    strcpy(q.u.pointwise.output, "c");
    assert_valid(&p);
    assert_valid(&q);
    cr_assert_not(tsr_region_equal(&p, &q)); /* 0.0 and -0.0 differ by bits */
    q.u.pointwise.nodes[0].attrs.value = 0.0;
    cr_assert(tsr_region_equal(&p, &q));
    tsr_region_free(&p);
    tsr_region_free(&q);

    const tsr_op epi[] = {TSR_OP_BIAS, TSR_OP_GELU};
    tsr_region f = fused(2, epi), g = fused(2, epi);
    cr_assert(tsr_region_equal(&f, &g));
    g.u.fused.epilogue[1] = TSR_OP_SILU;
    cr_assert_not(tsr_region_equal(&f, &g));
    g = f;
    g.u.fused.eps = 1e-5;
    cr_assert_not(tsr_region_equal(&f, &g));
}

/* ---- signature, sizes, flops ---- */

static void assert_tensor(const tsr_tensor_desc *t, const char *name, tsr_dtype dtype, int rank,
                          const int64_t *shape)
{
    cr_assert_str_eq(t->name, name);
    cr_assert_eq(t->dtype, dtype, "%s dtype", name);
    cr_assert_eq(t->rank, rank, "%s rank", name);
    for (int i = 0; i < rank; i++)
        cr_assert_eq(t->shape[i], shape[i], "%s shape[%d]", name, i);
}

Test(region, signature_of_matmul_and_fused)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region r = matmul(128, 96, 64);
    r.out_dtype = TSR_F32;
    assert_valid(&r);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 2);
    assert_tensor(&in[0], "a", TSR_BF16, 2, (int64_t[]){128, 64});
    assert_tensor(&in[1], "b", TSR_BF16, 2, (int64_t[]){64, 96});
    assert_tensor(&out, "out", TSR_F32, 2, (int64_t[]){128, 96});

    const tsr_op epi[] = {TSR_OP_RELU, TSR_OP_BIAS};
    r = fused(2, epi);
    r.u.fused.residual = true;
    assert_valid(&r);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 4);
    assert_tensor(&in[0], "a", TSR_BF16, 2, (int64_t[]){32, 8});
    assert_tensor(&in[1], "b", TSR_BF16, 2, (int64_t[]){8, 16});
    assert_tensor(&in[2], "bias", TSR_BF16, 1, (int64_t[]){16});
    assert_tensor(&in[3], "residual", TSR_BF16, 2, (int64_t[]){32, 16});
    assert_tensor(&out, "out", TSR_BF16, 2, (int64_t[]){32, 16});
    r = fused(1, epi);
    r.u.fused.residual = true;
    cr_assert_eq(tsr_region_signature(&r, in, &out), 3);
    assert_tensor(&in[2], "residual", TSR_BF16, 2, (int64_t[]){32, 16});
    r = fused(2, epi);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 3);
    assert_tensor(&in[2], "bias", TSR_BF16, 1, (int64_t[]){16});
}

Test(region, signature_of_gated_attention_and_pointwise)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_init_gated(&r, TSR_F16, 64, 128, 96, TSR_OP_SILU, &e), TSR_OK);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 3);
    assert_tensor(&in[0], "a", TSR_F16, 2, (int64_t[]){64, 128});
    assert_tensor(&in[1], "wg", TSR_F16, 2, (int64_t[]){128, 96});
    assert_tensor(&in[2], "wu", TSR_F16, 2, (int64_t[]){128, 96});
    assert_tensor(&out, "out", TSR_F16, 2, (int64_t[]){64, 96});

    tsr_attention_desc d = attention_desc();
    d.heads_kv = 2;
    d.head_dim_v = 32;
    cr_assert_eq(tsr_region_init_attention(&r, TSR_BF16, &d, &e), TSR_OK);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 3);
    assert_tensor(&in[0], "q", TSR_BF16, 4, (int64_t[]){2, 8, 16, 64});
    assert_tensor(&in[1], "k", TSR_BF16, 4, (int64_t[]){2, 2, 24, 64});
    assert_tensor(&in[2], "v", TSR_BF16, 4, (int64_t[]){2, 2, 24, 32});
    assert_tensor(&out, "out", TSR_BF16, 4, (int64_t[]){2, 8, 16, 32});

    pw_example(&r);
    r.out_dtype = TSR_F16;
    assert_valid(&r);
    cr_assert_eq(tsr_region_signature(&r, in, &out), 3);
    assert_tensor(&in[0], "a", TSR_F32, 2, (int64_t[]){4, 8});
    assert_tensor(&in[1], "b", TSR_F32, 2, (int64_t[]){4, 8});
    assert_tensor(&in[2], "c", TSR_F32, 1, (int64_t[]){8});
    assert_tensor(&out, "y", TSR_F16, 2, (int64_t[]){4, 8});
    tsr_region_free(&r);
}

Test(region, tensor_elements_and_bytes)
{
    tsr_tensor_desc t = {.name = "x", .dtype = TSR_BF16, .rank = 0};
    cr_assert_eq(tsr_tensor_desc_elements(&t), 1);
    cr_assert_eq(tsr_tensor_desc_bytes(&t), 2);
    t.rank = 3;
    t.shape[0] = 2;
    t.shape[1] = 3;
    t.shape[2] = 5;
    cr_assert_eq(tsr_tensor_desc_elements(&t), 30);
    cr_assert_eq(tsr_tensor_desc_bytes(&t), 60);
    t.dtype = TSR_F32;
    cr_assert_eq(tsr_tensor_desc_bytes(&t), 120);
    t.shape[1] = INT64_MAX; /* overflow reads as invalid, not as a wrapped count */
    cr_assert_eq(tsr_tensor_desc_elements(&t), -1);
    cr_assert_eq(tsr_tensor_desc_bytes(&t), 0);
    t.rank = TSR_MAX_RANK + 1;
    cr_assert_eq(tsr_tensor_desc_elements(&t), -1);
}

Test(region, flops_per_kind)
{
    tsr_region r = matmul(128, 96, 64);
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 128 * 96 * 64);

    const tsr_op epi[] = {TSR_OP_BIAS, TSR_OP_GELU};
    r = fused(2, epi); /* 32 x 16 x 8 */
    r.u.fused.residual = true;
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 32 * 16 * 8 + 32 * 16 * 3);

    tsr_error e;
    cr_assert_eq(tsr_region_init_gated(&r, TSR_BF16, 4, 8, 16, TSR_OP_SILU, &e), TSR_OK);
    cr_assert_eq(tsr_region_flops(&r), 4.0 * 4 * 16 * 8 + 2.0 * 4 * 16);

    tsr_attention_desc d = {
        .batch = 1, .heads = 2, .seq_q = 4, .seq_k = 4, .head_dim = 8, .scale = NAN};
    cr_assert_eq(tsr_region_init_attention(&r, TSR_BF16, &d, &e), TSR_OK);
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 2 * 16 * 16);
    r.u.attention.causal = true; /* 1 + 2 + 3 + 4 = 10 visible pairs */
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 2 * 10 * 16);
    r.u.attention.seq_q = 2; /* bottom-right: rows see 3 and 4 keys */
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 2 * 7 * 16);
    r.u.attention.seq_q = 4;
    r.u.attention.seq_k = 2; /* rows see 0, 0, 1, 2 keys */
    cr_assert_eq(tsr_region_flops(&r), 2.0 * 2 * 3 * 16);

    pw_example(&r);
    assert_valid(&r);
    cr_assert_eq(tsr_region_flops(&r), 4.0 * 32);
    tsr_region_free(&r);
}
