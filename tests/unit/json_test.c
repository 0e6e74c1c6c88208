/*
 * json_test.c — the region's JSON form: every examples/ file parses and round
 * trips, keys may come in any order, malformed and truncated text (every prefix
 * of every example) fails with BAD_JSON and never crashes, unknown keys and
 * wrong types are named, integers are exact, floats keep their bits and
 * non-finite op attributes travel as strings.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/regions.h"
#include "tessera/json.h"

static const char *const examples[] = {"examples/matmul.json", "examples/fused.json",
                                       "examples/gated.json", "examples/attention.json",
                                       "examples/pointwise.json"};
#define N_EXAMPLES 5

/* Parses s from an exact-size heap copy with no terminator, so that a read past
 * the length is a real overread (valgrind / ASan see it). */
static tsr_status parse(const char *s, tsr_region *r, tsr_error *e)
{
    size_t len = strlen(s);
    char *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, s, len);
    tsr_status st = tsr_region_from_json(copy, len, r, e);
    free(copy);
    return st;
}

#define assert_parse_fails(text, want, msg)                                                        \
    REGIONS_ASSERT_REFUSED((text), parse((text), &r_, &e_), (want), (msg))

#define assert_parse_code(text, want)                                                              \
    do {                                                                                           \
        tsr_region r_;                                                                             \
        tsr_error e_;                                                                              \
        tsr_status st_ = parse((text), &r_, &e_);                                                  \
        cr_assert_eq(st_, (want), "%s: got %s (%s)", (text), tsr_status_name(st_), e_.message);    \
        tsr_region_free(&r_);                                                                      \
    } while (0)

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static const size_t cap = 1 << 16;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static const char *pw_head = "{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                             "\"inputs\":[{\"name\":\"a\",\"shape\":[2,3]}],";

/* A pointwise region with one op object spliced in, output "y". */
static char *pw_with_op(const char *op)
{
    char *s = malloc(1024);
    cr_assert_not_null(s);
    snprintf(s, 1024, "%s\"ops\":[%s],\"output\":\"y\"}", pw_head, op);
    return s;
}

/* The checks above on a pointwise region with one op object spliced in. */
#define assert_pw_op_fails(op, want, msg)                                                          \
    do {                                                                                           \
        char *text_ = pw_with_op(op);                                                              \
        assert_parse_fails(text_, (want), (msg));                                                  \
        free(text_);                                                                               \
    } while (0)

#define assert_pw_op_code(op, want)                                                                \
    do {                                                                                           \
        char *text_ = pw_with_op(op);                                                              \
        assert_parse_code(text_, (want));                                                          \
        free(text_);                                                                               \
    } while (0)

Test(json, every_example_parses)
{
    for (int i = 0; i < N_EXAMPLES; i++) {
        tsr_region r;
        tsr_error e;
        tsr_status st = tsr_region_from_file(examples[i], &r, &e);
        cr_assert_eq(st, TSR_OK, "%s: %s", examples[i], e.message);
        tsr_region_free(&r);
    }
}

Test(json, examples_have_the_documented_values)
{
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_file("examples/fused.json", &r, &e), TSR_OK);
    cr_assert_eq(r.kind, TSR_KIND_FUSED);
    cr_assert_eq(r.dtype, TSR_BF16);
    cr_assert_eq(r.out_dtype, TSR_F32);
    cr_assert_eq(r.u.fused.n_epilogue, 2);
    cr_assert_eq(r.u.fused.epilogue[0], TSR_OP_BIAS);
    cr_assert_eq(r.u.fused.epilogue[1], TSR_OP_GELU);
    cr_assert(r.u.fused.residual);
    cr_assert_eq(r.u.fused.eps, 1e-6); /* the default */

    cr_assert_eq(tsr_region_from_file("examples/attention.json", &r, &e), TSR_OK);
    cr_assert_eq(r.u.attention.heads, 8);
    cr_assert_eq(r.u.attention.heads_kv, 2);
    cr_assert_eq(r.u.attention.head_dim_v, 64); /* default: head_dim */
    cr_assert_eq(r.u.attention.scale, 0.125);   /* default: 1/sqrt(64) */
    cr_assert(r.u.attention.causal);

    cr_assert_eq(tsr_region_from_file("examples/gated.json", &r, &e), TSR_OK);
    cr_assert_eq(r.u.gated.gate_act, TSR_OP_SILU);
    cr_assert_eq(r.out_dtype, TSR_BF16);

    cr_assert_eq(tsr_region_from_file("examples/pointwise.json", &r, &e), TSR_OK);
    cr_assert_eq(r.u.pointwise.n_inputs, 3);
    cr_assert_eq(r.u.pointwise.n_nodes, 7);
    cr_assert_eq(r.u.pointwise.out_rank, 2);
    cr_assert_eq(r.u.pointwise.out_shape[0], 16);
    cr_assert_eq(r.u.pointwise.out_shape[1], 32);
    cr_assert_eq(r.u.pointwise.nodes[4].op, TSR_OP_CONST);
    cr_assert_eq(r.u.pointwise.nodes[4].attrs.value, 0.5);
    cr_assert(r.u.pointwise.nodes[6].attrs.has_min);
    cr_assert_eq(r.u.pointwise.nodes[6].attrs.max, 2.5);
    tsr_region_free(&r);
}

Test(json, every_example_round_trips)
{
    for (int i = 0; i < N_EXAMPLES; i++) {
        for (int pretty = 0; pretty <= 1; pretty++) {
            tsr_region a, b;
            tsr_error e;
            char *text = NULL, *again = NULL;
            cr_assert_eq(tsr_region_from_file(examples[i], &a, &e), TSR_OK);
            cr_assert_eq(tsr_region_to_json(&a, pretty, &text, &e), TSR_OK);
            cr_assert_eq(tsr_region_from_json(text, strlen(text), &b, &e), TSR_OK, "%s: %s", text,
                         e.message);
            cr_assert(tsr_region_equal(&a, &b), "%s", examples[i]);
            /* emitting is stable: a second pass gives the same text */
            cr_assert_eq(tsr_region_to_json(&b, pretty, &again, &e), TSR_OK);
            cr_assert_str_eq(text, again);
            free(text);
            free(again);
            tsr_region_free(&a);
            tsr_region_free(&b);
        }
    }
}

Test(json, emits_every_field_with_defaults)
{
    tsr_region r;
    tsr_error e;
    char *text;
    cr_assert_eq(tsr_region_from_file("examples/matmul.json", &r, &e), TSR_OK);
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_str_eq(
        text, "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"bf16\",\"m\":128,\"n\":96,"
              "\"k\":64}");
    free(text);
    cr_assert_eq(parse("{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":2,\"n\":3,\"k\":4,"
                       "\"reduction\":\"rmsnorm\"}",
                       &r, &e),
                 TSR_OK);
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_str_eq(text, "{\"kind\":\"fused\",\"dtype\":\"f16\",\"out_dtype\":\"f16\",\"m\":2,"
                           "\"n\":3,\"k\":4,\"prologue\":[],\"epilogue\":[],\"residual\":false,"
                           "\"reduction\":\"rmsnorm\",\"eps\":1e-06}");
    free(text);
    cr_assert_eq(parse("{\"kind\":\"gated\",\"dtype\":\"f32\",\"m\":2,\"k\":3,\"h\":4}", &r, &e),
                 TSR_OK);
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_str_eq(text, "{\"kind\":\"gated\",\"dtype\":\"f32\",\"out_dtype\":\"f32\",\"m\":2,"
                           "\"k\":3,\"h\":4,\"gate_act\":\"silu\"}");
    free(text);
    cr_assert_eq(parse("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":4,"
                       "\"seq_q\":8,\"seq_k\":8,\"head_dim\":16}",
                       &r, &e),
                 TSR_OK);
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_str_eq(text, "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"out_dtype\":\"bf16\","
                           "\"batch\":1,\"heads\":4,\"heads_kv\":4,\"seq_q\":8,\"seq_k\":8,"
                           "\"head_dim\":16,\"head_dim_v\":16,\"scale\":0.25,\"causal\":false}");
    free(text);
}

Test(json, key_order_does_not_matter)
{
    tsr_region a, b;
    tsr_error e;
    cr_assert_eq(parse("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6}", &a, &e),
                 TSR_OK);
    cr_assert_eq(parse("{\"k\":6,\"n\":5,\"dtype\":\"bf16\",\"m\":4,\"kind\":\"matmul\"}", &b, &e),
                 TSR_OK);
    cr_assert(tsr_region_equal(&a, &b));
    cr_assert_eq(parse("{\"output\":\"y\",\"ops\":[{\"out\":\"y\",\"args\":[\"a\"],\"op\":\"neg\"}"
                       "],\"inputs\":[{\"shape\":[3],\"name\":\"a\"}],\"dtype\":\"f32\","
                       "\"kind\":\"pointwise\"}",
                       &a, &e),
                 TSR_OK, "%s", e.message);
    cr_assert_eq(parse("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                       "\"shape\":[3]}],\"ops\":[{\"op\":\"neg\",\"args\":[\"a\"],\"out\":\"y\"}"
                       "],\"output\":\"y\"}",
                       &b, &e),
                 TSR_OK);
    cr_assert(tsr_region_equal(&a, &b));
    tsr_region_free(&a);
    tsr_region_free(&b);
}

Test(json, every_prefix_of_every_example_is_rejected)
{
    for (int i = 0; i < N_EXAMPLES; i++) {
        char *text = read_text(examples[i]);
        size_t end = strrchr(text, '}') - text; /* the text up to its last brace is whole */
        for (size_t len = 0; len <= end; len++) {
            char *copy = malloc(len ? len : 1);
            memcpy(copy, text, len);
            tsr_region r;
            tsr_error e;
            tsr_status st = tsr_region_from_json(copy, len, &r, &e);
            free(copy);
            cr_assert_eq(st, TSR_BAD_JSON, "%s: prefix of %zu bytes gave %s", examples[i], len,
                         tsr_status_name(st));
            cr_assert_eq(r.u.pointwise.nodes, NULL); /* nothing owned after a failure */
        }
        tsr_region r;
        tsr_error e;
        cr_assert_eq(tsr_region_from_json(text, end + 1, &r, &e), TSR_OK);
        tsr_region_free(&r);
        free(text);
    }
}

Test(json, malformed_text_is_bad_json)
{
    const char *bad[] = {"",
                         "   ",
                         "{",
                         "}",
                         "[1, 2]",
                         "42",
                         "\"matmul\"",
                         "null",
                         "{\"kind\":\"matmul\",}",
                         "{\"kind\" \"matmul\"}",
                         "{'kind':'matmul'}",
                         "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6} x",
                         "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6}{}",
                         "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":0x10,\"n\":5,\"k\":6}",
                         "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":NaN,\"n\":5,\"k\":6}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_parse_code(bad[i], TSR_BAD_JSON);
    /* trailing whitespace is fine */
    assert_parse_code("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6} \n\t",
                      TSR_OK);
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_json(NULL, 0, &r, &e), TSR_INVALID_ARGUMENT);
}

Test(json, unknown_keys_are_named)
{
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,\"h\":2}",
                       TSR_BAD_ATTRIBUTE, "h: unknown key for a matmul region");
    assert_parse_fails("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":6,\"h\":2,"
                       "\"epilogue\":[]}",
                       TSR_BAD_ATTRIBUTE, "epilogue: unknown key for a gated region");
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"epilouge\":[\"relu\"]}",
                       TSR_BAD_ATTRIBUTE, "epilouge: unknown key for a fused region");
    assert_pw_op_fails("{\"op\":\"neg\",\"args\":[\"a\"],\"out\":\"y\",\"scale\":2}",
                       TSR_BAD_ATTRIBUTE, "ops[0].scale: unknown key for a pointwise op");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                       "\"shape\":[2],\"dtype\":\"f32\"}],\"ops\":[],\"output\":\"a\"}",
                       TSR_BAD_ATTRIBUTE, "inputs[0].dtype: unknown key for a pointwise input");
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,\"m\":4}",
                       TSR_BAD_JSON, "m: key appears twice");
}

Test(json, missing_keys_are_named)
{
    assert_parse_fails("{\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6}", TSR_BAD_ATTRIBUTE,
                       "kind: missing");
    assert_parse_fails("{\"kind\":\"matmul\",\"m\":4,\"n\":5,\"k\":6}", TSR_BAD_ATTRIBUTE,
                       "dtype: missing");
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"k\":6}",
                       TSR_BAD_ATTRIBUTE, "n: missing");
    assert_parse_fails("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":4,"
                       "\"seq_q\":8,\"head_dim\":16}",
                       TSR_BAD_ATTRIBUTE, "seq_k: missing");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[],\"ops\":[]}",
                       TSR_BAD_ATTRIBUTE, "output: missing");
    assert_pw_op_fails("{\"op\":\"const\",\"out\":\"y\"}", TSR_BAD_ATTRIBUTE,
                       "ops[0].value: missing");
    assert_pw_op_fails("{\"args\":[\"a\"],\"out\":\"y\"}", TSR_BAD_ATTRIBUTE, "ops[0].op: missing");
}

Test(json, wrong_types_are_bad_json)
{
    assert_parse_fails("{\"kind\":5,\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6}", TSR_BAD_JSON,
                       "kind: expected a string");
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":2,\"m\":4,\"n\":5,\"k\":6}", TSR_BAD_JSON,
                       "dtype: expected a string");
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":\"4\",\"n\":5,\"k\":6}",
                       TSR_BAD_JSON, "m: expected an integer");
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                      "\"residual\":1}",
                      TSR_BAD_JSON);
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                      "\"epilogue\":\"relu\"}",
                      TSR_BAD_JSON);
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"epilogue\":[1]}",
                       TSR_BAD_JSON, "epilogue[0]: expected an op name");
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"reduction\":false}",
                       TSR_BAD_JSON, "reduction: expected null or a string");
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"residual\":true,\"eps\":\"small\"}",
                       TSR_BAD_JSON, "eps: expected a number");
    assert_parse_fails("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":4,"
                       "\"seq_q\":8,\"seq_k\":8,\"head_dim\":16,\"causal\":\"yes\"}",
                       TSR_BAD_JSON, "causal: expected true or false");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":{},\"ops\":[],"
                       "\"output\":\"a\"}",
                       TSR_BAD_JSON, "inputs: expected an array");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[[]],\"ops\":[],"
                       "\"output\":\"a\"}",
                       TSR_BAD_JSON, "inputs[0]: expected an object");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                       "\"shape\":[2,\"3\"]}],\"ops\":[],\"output\":\"a\"}",
                       TSR_BAD_JSON, "inputs[0].shape[1]: expected an integer");
    assert_pw_op_fails("{\"op\":\"add\",\"args\":[\"a\",7],\"out\":\"y\"}", TSR_BAD_JSON,
                       "ops[0].args[1]: expected a string");
    assert_pw_op_code("{\"op\":\"const\",\"value\":true,\"out\":\"y\"}", TSR_BAD_JSON);
}

Test(json, integers_must_be_exact)
{
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":1.5,\"n\":5,\"k\":6}",
                       TSR_BAD_JSON, "m: expected an integer of magnitude below 2^53 (got 1.5)");
    assert_parse_code("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":9007199254740993,\"n\":5,"
                      "\"k\":6}",
                      TSR_BAD_JSON);
    assert_parse_code("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":1e300,\"n\":5,\"k\":6}",
                      TSR_BAD_JSON);
    assert_parse_code("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":1e999,\"n\":5,\"k\":6}",
                      TSR_BAD_JSON);
    /* an integral value is an integer however it is written */
    tsr_region r;
    tsr_error e;
    cr_assert_eq(
        parse("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4.0,\"n\":5e0,\"k\":60e-1}", &r, &e),
        TSR_OK);
    cr_assert_eq(r.u.matmul.m, 4);
    cr_assert_eq(r.u.matmul.n, 5);
    cr_assert_eq(r.u.matmul.k, 6);
}

Test(json, validation_codes_come_through)
{
    assert_parse_fails("{\"kind\":\"conv\",\"dtype\":\"bf16\"}", TSR_UNKNOWN_KIND,
                       "kind: unknown kind 'conv' (matmul, fused, gated, attention, pointwise)");
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"f64\",\"m\":4,\"n\":5,\"k\":6}",
                       TSR_BAD_DTYPE, "dtype: unknown dtype 'f64' (f32, f16, bf16)");
    assert_parse_code("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"BF16\",\"m\":4,"
                      "\"n\":5,\"k\":6}",
                      TSR_BAD_DTYPE);
    assert_parse_fails("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":0,\"n\":5,\"k\":6}",
                       TSR_BAD_DIMENSION, "m: must be > 0 (got 0)");
    assert_parse_fails("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":6,"
                       "\"heads_kv\":4,\"seq_q\":8,\"seq_k\":8,\"head_dim\":16}",
                       TSR_BAD_HEADS, "heads: 6 not divisible by heads_kv 4");
    /* an explicit 0 is not "default" */
    assert_parse_fails("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":6,"
                       "\"heads_kv\":0,\"seq_q\":8,\"seq_k\":8,\"head_dim\":16}",
                       TSR_BAD_DIMENSION, "heads_kv: must be > 0 (got 0)");
    assert_parse_fails("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":6,"
                       "\"seq_q\":8,\"seq_k\":8,\"head_dim\":16,\"head_dim_v\":-2}",
                       TSR_BAD_DIMENSION, "head_dim_v: must be > 0 (got -2)");
    assert_parse_code("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":6,"
                      "\"seq_q\":8,\"seq_k\":8,\"head_dim\":16,\"scale\":1e999}",
                      TSR_BAD_ATTRIBUTE);
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"epilogue\":[\"bias\",\"relu\",\"bias\"]}",
                       TSR_CONFLICT, "epilogue[2]: bias appears twice (first at epilogue[0])");
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"residual\":true,\"reduction\":\"softmax\"}",
                       TSR_CONFLICT, "residual: cannot be combined with reduction 'softmax'");
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6}",
                      TSR_CONFLICT);
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"epilogue\":[\"swish\"]}",
                       TSR_UNKNOWN_OP, "epilogue[0]: unknown op 'swish'");
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                      "\"prologue\":[\"bias\"]}",
                      TSR_UNKNOWN_OP);
    assert_parse_fails("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                       "\"reduction\":\"max\"}",
                       TSR_BAD_ATTRIBUTE,
                       "reduction: unknown reduction 'max' (null, rmsnorm, softmax, layer_norm)");
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                      "\"reduction\":\"none\",\"residual\":true}",
                      TSR_OK);
    assert_parse_code("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,\"k\":6,"
                      "\"reduction\":\"layer_norm\",\"eps\":-1}",
                      TSR_BAD_ATTRIBUTE);
    assert_parse_fails("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":6,\"h\":2,"
                       "\"gate_act\":\"gelu_new\"}",
                       TSR_UNKNOWN_OP, "gate_act: unknown op 'gelu_new'");
    assert_parse_code("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":6,\"h\":2,"
                      "\"gate_act\":\"exp\"}",
                      TSR_UNKNOWN_OP);
    assert_pw_op_fails("{\"op\":\"add\",\"args\":[\"a\",\"x\"],\"out\":\"y\"}", TSR_UNDEFINED_NAME,
                       "ops[0].args[1]: undefined name 'x'");
    assert_pw_op_code("{\"op\":\"add\",\"args\":[\"a\",\"y\"],\"out\":\"y\"}", TSR_CYCLE);
    assert_pw_op_code("{\"op\":\"neg\",\"args\":[\"a\"],\"out\":\"a\"}", TSR_DUPLICATE_NAME);
    assert_pw_op_fails("{\"op\":\"neg\",\"args\":[\"a\",\"a\"],\"out\":\"y\"}", TSR_BAD_ARITY,
                       "ops[0].args: 'neg' takes 1 argument (got 2)");
    assert_pw_op_fails("{\"op\":\"add\",\"args\":[\"a\",\"a\",\"a\"],\"out\":\"y\"}", TSR_BAD_ARITY,
                       "ops[0].args: 'add' takes 2 arguments (got 3)");
    assert_pw_op_fails("{\"op\":\"fma\",\"args\":[\"a\"],\"out\":\"y\"}", TSR_UNKNOWN_OP,
                       "ops[0].op: unknown op 'fma'");
    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                       "\"shape\":[2,3]},{\"name\":\"b\",\"shape\":[4]}],\"ops\":[],"
                       "\"output\":\"a\"}",
                       TSR_SHAPE_MISMATCH,
                       "inputs[1].shape: [4] does not broadcast with [2,3] (the earlier inputs' "
                       "shape)");
}

Test(json, op_attributes_are_checked_by_presence)
{
    assert_pw_op_fails("{\"op\":\"neg\",\"args\":[\"a\"],\"out\":\"y\",\"value\":0}",
                       TSR_BAD_ATTRIBUTE, "ops[0].value: 'neg' takes no value");
    assert_pw_op_fails("{\"op\":\"relu\",\"args\":[\"a\"],\"out\":\"y\",\"min\":0}",
                       TSR_BAD_ATTRIBUTE, "ops[0].min: 'relu' takes no min");
    assert_pw_op_fails("{\"op\":\"clamp\",\"args\":[\"a\"],\"out\":\"y\"}", TSR_BAD_ATTRIBUTE,
                       "ops[0]: clamp needs min or max");
    char *s = pw_with_op("{\"op\":\"clamp\",\"args\":[\"a\"],\"out\":\"y\",\"max\":0}");
    tsr_region r;
    tsr_error e;
    cr_assert_eq(parse(s, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_not(r.u.pointwise.nodes[0].attrs.has_min);
    cr_assert(r.u.pointwise.nodes[0].attrs.has_max);
    tsr_region_free(&r);
    free(s);
    assert_pw_op_fails("{\"op\":\"clamp\",\"args\":[\"a\"],\"out\":\"y\",\"min\":\"nan\"}",
                       TSR_BAD_ATTRIBUTE, "ops[0].min: must not be NaN");
}

Test(json, non_finite_constants_travel_as_strings)
{
    char *s =
        pw_with_op("{\"op\":\"const\",\"value\":\"-inf\",\"out\":\"c\"},"
                   "{\"op\":\"clamp\",\"args\":[\"a\"],\"min\":\"-inf\",\"max\":\"inf\","
                   "\"out\":\"d\"},{\"op\":\"maximum\",\"args\":[\"c\",\"d\"],\"out\":\"y\"}");
    tsr_region r, back;
    tsr_error e;
    cr_assert_eq(parse(s, &r, &e), TSR_OK, "%s", e.message);
    free(s);
    cr_assert(isinf(r.u.pointwise.nodes[0].attrs.value) && r.u.pointwise.nodes[0].attrs.value < 0);
    cr_assert_eq(r.u.pointwise.nodes[1].attrs.min, -INFINITY);
    cr_assert_eq(r.u.pointwise.nodes[1].attrs.max, INFINITY);
    char *text;
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_not_null(
        strstr(text, "{\"op\":\"const\",\"args\":[],\"out\":\"c\",\"value\":\"-inf\"}"), "%s",
        text);
    cr_assert_not_null(strstr(text, "\"min\":\"-inf\",\"max\":\"inf\""), "%s", text);
    cr_assert_eq(parse(text, &back, &e), TSR_OK);
    cr_assert(tsr_region_equal(&r, &back));
    free(text);
    tsr_region_free(&r);
    tsr_region_free(&back);

    assert_pw_op_fails("{\"op\":\"const\",\"value\":\"nan\",\"out\":\"y\"}", TSR_BAD_ATTRIBUTE,
                       "ops[0].value: must not be NaN");
    assert_pw_op_code("{\"op\":\"const\",\"value\":\"Infinity\",\"out\":\"y\"}", TSR_BAD_JSON);
    /* a literal too large for a double reads as infinity, which a const may be */
    assert_pw_op_code("{\"op\":\"const\",\"value\":1e999,\"out\":\"y\"}", TSR_OK);
}

Test(json, floats_keep_their_bits)
{
    const double values[] = {0.1,
                             1.0 / 3.0,
                             5e-324,
                             -0.0,
                             1e308,
                             -2.5,
                             123456789.125,
                             0.30000000000000004,
                             4503599627370497.0,
                             1e22};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"op\":\"const\",\"value\":%.17g,\"out\":\"y\"}", values[i]);
        char *s = pw_with_op(body);
        tsr_region r, back;
        tsr_error e;
        cr_assert_eq(parse(s, &r, &e), TSR_OK, "%s", e.message);
        free(s);
        cr_assert_eq(memcmp(&r.u.pointwise.nodes[0].attrs.value, &values[i], sizeof(double)), 0,
                     "%.17g", values[i]);
        char *text;
        cr_assert_eq(tsr_region_to_json(&r, 1, &text, &e), TSR_OK);
        cr_assert_eq(parse(text, &back, &e), TSR_OK);
        cr_assert_eq(memcmp(&back.u.pointwise.nodes[0].attrs.value, &values[i], sizeof(double)), 0,
                     "%.17g -> %s", values[i], text);
        free(text);
        tsr_region_free(&r);
        tsr_region_free(&back);
    }
    /* shortest form: 0.1 prints as 0.1, not 0.10000000000000001 */
    char *s = pw_with_op("{\"op\":\"const\",\"value\":0.1,\"out\":\"y\"}");
    tsr_region r;
    tsr_error e;
    char *text;
    cr_assert_eq(parse(s, &r, &e), TSR_OK);
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_OK);
    cr_assert_not_null(strstr(text, "\"value\":0.1}"), "%s", text);
    free(text);
    free(s);
    tsr_region_free(&r);
}

Test(json, limits_give_too_large)
{
    char *buf = malloc(1 << 16);
    size_t n = (size_t)snprintf(buf, 1 << 16,
                                "{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                                "\"inputs\":[");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(buf + n, (1 << 16) - n, "%s{\"name\":\"x%d\",\"shape\":[2]}",
                              i ? "," : "", i);
    snprintf(buf + n, (1 << 16) - n, "],\"ops\":[],\"output\":\"x0\"}");
    assert_parse_fails(buf, TSR_TOO_LARGE, "inputs: 17 inputs outside 0..16");

    n = (size_t)snprintf(buf, 1 << 16, "%s\"ops\":[", pw_head);
    for (int i = 0; i < TSR_MAX_PW_NODES + 1; i++)
        n += (size_t)snprintf(buf + n, (1 << 16) - n,
                              "%s{\"op\":\"neg\",\"args\":[\"a\"],"
                              "\"out\":\"t%d\"}",
                              i ? "," : "", i);
    snprintf(buf + n, (1 << 16) - n, "],\"output\":\"t0\"}");
    assert_parse_fails(buf, TSR_TOO_LARGE, "ops: 1025 ops outside 0..1024");

    n = (size_t)snprintf(buf, 1 << 16,
                         "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":5,"
                         "\"k\":6,\"prologue\":[");
    for (int i = 0; i < TSR_MAX_CHAIN + 1; i++)
        n += (size_t)snprintf(buf + n, (1 << 16) - n, "%s\"exp\"", i ? "," : "");
    snprintf(buf + n, (1 << 16) - n, "]}");
    assert_parse_fails(buf, TSR_TOO_LARGE, "prologue: length 17 outside 0..16");
    free(buf);

    assert_parse_fails("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                       "\"shape\":[1,1,1,1,1,1,1,1,1]}],\"ops\":[],\"output\":\"a\"}",
                       TSR_BAD_DIMENSION, "inputs[0].shape: rank 9 outside 0..8");
    char name[100];
    memset(name, 'n', 64);
    name[64] = '\0';
    char text[512];
    snprintf(text, sizeof text,
             "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"%s\","
             "\"shape\":[1]}],\"ops\":[],\"output\":\"a\"}",
             name);
    assert_parse_fails(text, TSR_BAD_ATTRIBUTE, "inputs[0].name: longer than 63 bytes");
    name[63] = '\0'; /* 63 bytes is the longest name */
    snprintf(text, sizeof text,
             "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"%s\","
             "\"shape\":[1]}],\"ops\":[],\"output\":\"%s\"}",
             name, name);
    assert_parse_code(text, TSR_OK);
}

Test(json, from_file_reports_io_errors)
{
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_file("examples/no-such-region.json", &r, &e), TSR_IO_ERROR);
    cr_assert_str_eq(e.message, "examples/no-such-region.json: No such file or directory");
    cr_assert_eq(tsr_region_from_file("examples", &r, &e), TSR_IO_ERROR);
    /* a parse error names the file first */
    char path[] = "/tmp/json_test_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":5}", f);
    fclose(f);
    cr_assert_eq(tsr_region_from_file(path, &r, &e), TSR_BAD_ATTRIBUTE);
    char want[128];
    snprintf(want, sizeof want, "%s: k: missing", path);
    cr_assert_str_eq(e.message, want);
    remove(path);
}

Test(json, to_json_rejects_a_bad_kind)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = (tsr_region_kind)7;
    char *text = (char *)1;
    tsr_error e;
    cr_assert_eq(tsr_region_to_json(&r, 0, &text, &e), TSR_UNKNOWN_KIND);
    cr_assert_null(text);
    cr_assert_eq(tsr_region_to_json(NULL, 0, &text, &e), TSR_INVALID_ARGUMENT);
}

/* Mutated examples: whatever parses must be a valid region that round trips;
 * everything else fails with a status and a message. A fixed LCG makes any
 * failure replay. */
Test(json, mutated_text_never_crashes)
{
    static const char alphabet[] = "{}[]\",:0123456789.-eE+ \\u\0tfnaxyz";
    uint64_t seed = 0x2545F4914F6CDD1Du;
    int parsed = 0, rejected = 0;
    for (int i = 0; i < N_EXAMPLES; i++) {
        char *text = read_text(examples[i]);
        size_t len = strlen(text);
        char *buf = malloc(len);
        for (int round = 0; round < 1500; round++) {
            memcpy(buf, text, len);
            for (int f = 0; f <= round % 3; f++) {
                seed = seed * 6364136223846793005u + 1442695040888963407u;
                buf[(seed >> 33) % len] = alphabet[(seed >> 17) % (sizeof alphabet - 1)];
            }
            tsr_region r, back;
            tsr_error e;
            if (tsr_region_from_json(buf, len, &r, &e) != TSR_OK) {
                rejected++;
                cr_assert_neq(e.code, TSR_OK);
                cr_assert_neq(e.message[0], '\0');
                continue;
            }
            parsed++;
            char *out;
            cr_assert_eq(tsr_region_to_json(&r, 0, &out, &e), TSR_OK);
            cr_assert_eq(tsr_region_from_json(out, strlen(out), &back, &e), TSR_OK, "%s", out);
            cr_assert(tsr_region_equal(&r, &back), "%s", out);
            free(out);
            tsr_region_free(&r);
            tsr_region_free(&back);
        }
        free(buf);
        free(text);
    }
    cr_assert_gt(parsed, 0);
    cr_assert_gt(rejected, 0);
}

Test(json, a_nul_escape_in_a_key_or_name_is_refused_by_position)
{
    const char *text =
        "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2,\"m\\u0000x\":3,\"n\":2,\"k\":2}";
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_from_json(text, strlen(text), &r, &err), TSR_BAD_JSON);
    cr_expect_str_eq(err.message,
                     "region: a string holds \\u0000 at byte 39 (NUL is not allowed in names or "
                     "keys)");
    /* An escaped backslash before "u0000" is text, not a NUL. */
    const char *ok =
        "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2,\"n\":2,\"k\":2,\"x\\\\u0000\":1}";
    cr_assert_eq(tsr_region_from_json(ok, strlen(ok), &r, &err), TSR_BAD_ATTRIBUTE);
    cr_expect_str_eq(err.message, "x\\u0000: unknown key for a matmul region");
}
