/*
 * fingerprint_test.c — the canonical encoding, the region fingerprint and the
 * kernel cache key.
 *
 * Regions are built from JSON text, as a caller would send them, so the tests
 * cover what reaches the fingerprint through the parser: key order, value names
 * and written-out defaults must not change it; every other field must.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "../support/regions.h"

static tsr_fingerprint fp_of(const char *json)
{
    tsr_region r = regions_parse(json);
    tsr_error err;
    tsr_fingerprint fp;
    tsr_status st = tsr_region_fingerprint(&r, &fp, &err);
    cr_assert_eq(st, TSR_OK, "fingerprint of %s: %s", json, err.message);
    tsr_region_free(&r);
    return fp;
}

static bool fp_equal(tsr_fingerprint a, tsr_fingerprint b)
{
    return memcmp(a.bytes, b.bytes, sizeof a.bytes) == 0;
}

static void assert_same(const char *a, const char *b)
{
    cr_assert(fp_equal(fp_of(a), fp_of(b)), "expected one fingerprint for\n  %s\n  %s", a, b);
}

/* Every text in the list must have a fingerprint of its own. */
static void assert_all_distinct(const char *const *texts, size_t n)
{
    tsr_fingerprint *fps = calloc(n, sizeof *fps);
    cr_assert_not_null(fps);
    for (size_t i = 0; i < n; i++)
        fps[i] = fp_of(texts[i]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            cr_assert(!fp_equal(fps[i], fps[j]), "same fingerprint for\n  %s\n  %s", texts[i],
                      texts[j]);
    free(fps);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- SHA-256 and hex ---- */

static void hex_of(const uint8_t bytes[32], char hex[TSR_FINGERPRINT_HEX])
{
    tsr_fingerprint fp;
    memcpy(fp.bytes, bytes, 32);
    tsr_fingerprint_hex(&fp, hex);
}

Test(fingerprint, sha256_matches_the_fips_test_vectors)
{
    uint8_t out[32];
    char hex[TSR_FINGERPRINT_HEX];
    tsr_sha256("abc", 3, out);
    hex_of(out, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tsr_sha256("", 0, out);
    hex_of(out, hex);
    cr_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    tsr_sha256(two_blocks, strlen(two_blocks), out);
    hex_of(out, hex);
    cr_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(fingerprint, hex_round_trips)
{
    tsr_fingerprint fp, back;
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        fp.bytes[i] = (uint8_t)(i * 37 + 5);
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(&fp, hex);
    cr_assert_eq(strlen(hex), 64);
    cr_assert(tsr_fingerprint_parse(hex, &back));
    cr_assert_arr_eq(back.bytes, fp.bytes, TSR_FINGERPRINT_BYTES);
}

Test(fingerprint, parse_rejects_malformed_hex_and_leaves_output_alone)
{
    const char *good = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    tsr_fingerprint fp;
    memset(&fp, 0xa5, sizeof fp);
    cr_assert_not(tsr_fingerprint_parse("", &fp));
    cr_assert_not(tsr_fingerprint_parse("ba7816", &fp));
    /* 63 digits, 65 digits, a non-digit, a trailing space */
    cr_assert_not(tsr_fingerprint_parse(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a", &fp));
    cr_assert_not(tsr_fingerprint_parse(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad0", &fp));
    cr_assert_not(tsr_fingerprint_parse(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ag", &fp));
    cr_assert_not(tsr_fingerprint_parse(
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad ", &fp));
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        cr_assert_eq(fp.bytes[i], 0xa5);
    cr_assert(tsr_fingerprint_parse(good, &fp));
    cr_assert_eq(fp.bytes[0], 0xba);
    cr_assert_eq(fp.bytes[31], 0xad);
    tsr_fingerprint upper;
    cr_assert(tsr_fingerprint_parse(
        "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", &upper));
    cr_assert_arr_eq(upper.bytes, fp.bytes, TSR_FINGERPRINT_BYTES);
}

/* ---- the canonical encoding ---- */

/* The canonical encoding of json is exactly want[0..n): *r gets the region and
 * *buf the encoding, both the caller's to free. */
static void expect_canonical(const char *json, const uint8_t *want, size_t n, tsr_region *r,
                             uint8_t **buf)
{
    tsr_error err;
    size_t len = 0;
    *r = regions_parse(json);
    cr_assert_eq(tsr_region_canonical(r, buf, &len, &err), TSR_OK);
    cr_assert_eq(len, n);
    cr_assert_arr_eq(*buf, want, n);
}

Test(fingerprint, canonical_matmul_is_version_kind_dtypes_and_shape_little_endian)
{
    const char *json = "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":3,\"n\":258,\"k\":65536}";
    const uint8_t want[] = {
        1, 0, 0, 0,             /* format version */
        0, 0, 0, 0,             /* kind matmul */
        2, 0, 0, 0,             /* dtype bf16 */
        2, 0, 0, 0,             /* out_dtype defaults to dtype */
        3, 0, 0, 0, 0, 0, 0, 0, /* m */
        2, 1, 0, 0, 0, 0, 0, 0, /* n */
        0, 0, 1, 0, 0, 0, 0, 0, /* k */
    };
    tsr_region r;
    uint8_t *buf = NULL;
    expect_canonical(json, want, sizeof want, &r, &buf);

    /* The fingerprint is the SHA-256 of exactly these bytes. */
    uint8_t sha[32];
    tsr_sha256(want, sizeof want, sha);
    tsr_fingerprint fp;
    tsr_error err;
    cr_assert_eq(tsr_region_fingerprint(&r, &fp, &err), TSR_OK);
    cr_assert_arr_eq(fp.bytes, sha, 32);
    free(buf);
    tsr_region_free(&r);
}

Test(fingerprint, canonical_pointwise_holds_indices_not_names)
{
    const char *json = "{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                       "\"inputs\":[{\"name\":\"alpha\",\"shape\":[2]}],"
                       "\"ops\":[{\"op\":\"neg\",\"args\":[\"alpha\"],\"out\":\"beta\"}],"
                       "\"output\":\"beta\"}";
    const uint8_t want[] = {
        1, 0, 0, 0,             /* format version */
        4, 0, 0, 0,             /* kind pointwise */
        0, 0, 0, 0,             /* dtype f32 */
        0, 0, 0, 0,             /* out_dtype */
        1, 0, 0, 0,             /* n_inputs */
        1, 0, 0, 0,             /* rank */
        2, 0, 0, 0, 0, 0, 0, 0, /* shape[0] */
        1, 0, 0, 0,             /* n_nodes */
        7, 0, 0, 0,             /* op neg */
        1, 0, 0, 0,             /* arity */
        0, 0, 0, 0,             /* argument: value 0 (the input) */
        0, 0, 0, 0, 0, 0, 0, 0, /* value bits (neg takes none) */
        0,                      /* has_min */
        0, 0, 0, 0, 0, 0, 0, 0, /* min bits */
        0,                      /* has_max */
        0, 0, 0, 0, 0, 0, 0, 0, /* max bits */
        1, 0, 0, 0,             /* output: value 1 (node 0) */
    };
    tsr_region r;
    uint8_t *buf = NULL;
    expect_canonical(json, want, sizeof want, &r, &buf);
    cr_assert_null(memmem(buf, sizeof want, "alpha", 5));
    free(buf);
    tsr_region_free(&r);
}

Test(fingerprint, canonical_rejects_an_unknown_kind)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = (tsr_region_kind)TSR_KIND_COUNT;
    uint8_t *buf = (uint8_t *)&r;
    size_t len = 99;
    tsr_error err;
    cr_assert_eq(tsr_region_canonical(&r, &buf, &len, &err), TSR_UNKNOWN_KIND);
    cr_assert_null(buf);
    cr_assert_eq(len, 0);
    tsr_fingerprint fp;
    cr_assert_eq(tsr_region_fingerprint(&r, &fp, NULL), TSR_UNKNOWN_KIND);
}

/* ---- invariance ---- */

Test(fingerprint, ignores_json_key_order)
{
    assert_same("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":64,\"n\":32,\"k\":16}",
                "{\"k\":16,\"n\":32,\"dtype\":\"bf16\",\"m\":64,\"kind\":\"matmul\"}");
    assert_same("{\"kind\":\"attention\",\"dtype\":\"f16\",\"batch\":2,\"heads\":4,"
                "\"heads_kv\":2,\"seq_q\":8,\"seq_k\":16,\"head_dim\":32,\"causal\":true}",
                "{\"causal\":true,\"head_dim\":32,\"seq_k\":16,\"seq_q\":8,\"heads_kv\":2,"
                "\"heads\":4,\"batch\":2,\"dtype\":\"f16\",\"kind\":\"attention\"}");
    assert_same("{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                "\"inputs\":[{\"name\":\"a\",\"shape\":[4]}],"
                "\"ops\":[{\"op\":\"clamp\",\"args\":[\"a\"],\"min\":-1,\"max\":2,\"out\":\"y\"}],"
                "\"output\":\"y\"}",
                "{\"output\":\"y\","
                "\"ops\":[{\"out\":\"y\",\"max\":2,\"min\":-1,\"args\":[\"a\"],\"op\":\"clamp\"}],"
                "\"inputs\":[{\"shape\":[4],\"name\":\"a\"}],"
                "\"dtype\":\"f32\",\"kind\":\"pointwise\"}");
}

Test(fingerprint, ignores_every_pointwise_value_name)
{
    assert_same("{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                "\"inputs\":[{\"name\":\"x\",\"shape\":[2,3]},{\"name\":\"b\",\"shape\":[3]}],"
                "\"ops\":[{\"op\":\"add\",\"args\":[\"x\",\"b\"],\"out\":\"t0\"},"
                "{\"op\":\"const\",\"value\":0.5,\"out\":\"h\"},"
                "{\"op\":\"mul\",\"args\":[\"t0\",\"h\"],\"out\":\"t1\"},"
                "{\"op\":\"gelu\",\"args\":[\"t1\"],\"out\":\"y\"}],"
                "\"output\":\"y\"}",
                "{\"kind\":\"pointwise\",\"dtype\":\"f32\","
                "\"inputs\":[{\"name\":\"input\",\"shape\":[2,3]},"
                "{\"name\":\"bias_vector\",\"shape\":[3]}],"
                "\"ops\":[{\"op\":\"add\",\"args\":[\"input\",\"bias_vector\"],\"out\":\"sum\"},"
                "{\"op\":\"const\",\"value\":0.5,\"out\":\"half\"},"
                "{\"op\":\"mul\",\"args\":[\"sum\",\"half\"],\"out\":\"scaled\"},"
                "{\"op\":\"gelu\",\"args\":[\"scaled\"],\"out\":\"result\"}],"
                "\"output\":\"result\"}");
}

Test(fingerprint, written_out_defaults_equal_omitted_ones)
{
    assert_same("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":8,\"k\":8}",
                "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"bf16\",\"m\":8,\"n\":8,"
                "\"k\":8}");
    assert_same("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":4,"
                "\"seq_q\":8,\"seq_k\":8,\"head_dim\":64}",
                "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"out_dtype\":\"bf16\",\"batch\":1,"
                "\"heads\":4,\"heads_kv\":4,\"seq_q\":8,\"seq_k\":8,\"head_dim\":64,"
                "\"head_dim_v\":64,\"scale\":0.125,\"causal\":false}");
    assert_same("{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":4,\"n\":8,\"k\":16,"
                "\"reduction\":\"rmsnorm\"}",
                "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":4,\"n\":8,\"k\":16,"
                "\"prologue\":[],\"epilogue\":[],\"residual\":false,"
                "\"reduction\":\"rmsnorm\",\"eps\":1e-6}");
    assert_same("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":16}",
                "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":16,"
                "\"gate_act\":\"silu\"}");
}

/* ---- sensitivity: each field, one at a time ---- */

Test(fingerprint, matmul_changes_with_each_field)
{
    const char *texts[] = {
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":4,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":9,\"n\":4,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":5,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":4,\"k\":17}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":8,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"f16\",\"m\":8,\"n\":4,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":8,\"n\":4,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"f32\",\"m\":8,\"n\":4,\"k\":16}",
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"f16\",\"m\":8,\"n\":4,\"k\":16}",
    };
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, fused_changes_with_each_field)
{
#define FUSED(rest) "{\"kind\":\"fused\",\"dtype\":\"f32\"," rest "}"
    const char *texts[] = {
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"]"),
        FUSED("\"m\":5,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"]"),
        FUSED("\"m\":4,\"n\":9,\"k\":16,\"epilogue\":[\"bias\",\"relu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":17,\"epilogue\":[\"bias\",\"relu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"relu\",\"bias\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"gelu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\",\"relu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"prologue\":[\"relu\"],\"epilogue\":[\"bias\",\"relu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"prologue\":[\"relu\"]"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],\"residual\":true"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],"
              "\"reduction\":\"rmsnorm\""),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],"
              "\"reduction\":\"softmax\""),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],"
              "\"reduction\":\"layer_norm\""),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],"
              "\"reduction\":\"rmsnorm\",\"eps\":1e-5"),
        /* one ulp above the default 1e-6 */
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],"
              "\"reduction\":\"rmsnorm\",\"eps\":1.0000000000000002e-06"),
        FUSED("\"m\":4,\"n\":8,\"k\":16,\"epilogue\":[\"bias\",\"relu\"],\"out_dtype\":\"bf16\""),
    };
#undef FUSED
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, gated_changes_with_each_field)
{
    const char *texts[] = {
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":16,\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":5,\"k\":8,\"h\":16,\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":9,\"h\":16,\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":17,\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":16,\"gate_act\":\"gelu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":4,\"k\":8,\"h\":16,\"gate_act\":\"relu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"f16\",\"m\":4,\"k\":8,\"h\":16,\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"out_dtype\":\"f32\",\"m\":4,\"k\":8,\"h\":16,"
        "\"gate_act\":\"silu\"}",
        /* the same shape as a matmul is still another region */
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4,\"n\":16,\"k\":8}",
    };
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, attention_changes_with_each_field)
{
#define ATT(b, h, hkv, m, n, d, dv, extra)                                                         \
    "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":" #b ",\"heads\":" #h                    \
    ",\"heads_kv\":" #hkv ",\"seq_q\":" #m ",\"seq_k\":" #n ",\"head_dim\":" #d                    \
    ",\"head_dim_v\":" #dv extra "}"
    const char *texts[] = {
        ATT(2, 4, 2, 8, 16, 32, 32, ""),
        ATT(3, 4, 2, 8, 16, 32, 32, ""),
        ATT(2, 8, 2, 8, 16, 32, 32, ""),
        ATT(2, 4, 4, 8, 16, 32, 32, ""),
        ATT(2, 4, 1, 8, 16, 32, 32, ""),
        ATT(2, 4, 2, 9, 16, 32, 32, ""),
        ATT(2, 4, 2, 8, 17, 32, 32, ""),
        ATT(2, 4, 2, 16, 8, 32, 32, ""),
        ATT(2, 4, 2, 8, 16, 64, 32, ""),
        ATT(2, 4, 2, 8, 16, 32, 64, ""),
        ATT(2, 4, 2, 8, 16, 32, 32, ",\"causal\":true"),
        ATT(2, 4, 2, 8, 16, 32, 32, ",\"scale\":0.25"),
        /* one ulp either side of the default 1/sqrt(32) */
        ATT(2, 4, 2, 8, 16, 32, 32, ",\"scale\":0.1767766952966369"),
        ATT(2, 4, 2, 8, 16, 32, 32, ",\"scale\":0.17677669529663684"),
        ATT(2, 4, 2, 8, 16, 32, 32, ",\"out_dtype\":\"f32\""),
    };
#undef ATT
    assert_all_distinct(texts, N_OF(texts));
    /* The default scale written out is the same region. */
    assert_same("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":2,\"heads\":4,"
                "\"heads_kv\":2,\"seq_q\":8,\"seq_k\":16,\"head_dim\":32,\"head_dim_v\":32}",
                "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":2,\"heads\":4,"
                "\"heads_kv\":2,\"seq_q\":8,\"seq_k\":16,\"head_dim\":32,\"head_dim_v\":32,"
                "\"scale\":0.17677669529663687}");
}

#define PW_AB(ops, output)                                                                         \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},"      \
    "{\"name\":\"b\",\"shape\":[4]}],\"ops\":[" ops "],\"output\":\"" output "\"}"

Test(fingerprint, pointwise_changes_with_each_field)
{
    const char *texts[] = {
        PW_AB("{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}", "y"),
        /* arguments swapped */
        PW_AB("{\"op\":\"sub\",\"args\":[\"b\",\"a\"],\"out\":\"y\"}", "y"),
        PW_AB("{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}", "y"),
        PW_AB("{\"op\":\"maximum\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}", "y"),
        /* shapes, rank, input count, dtypes */
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[3,4]},"
        "{\"name\":\"b\",\"shape\":[4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},"
        "{\"name\":\"b\",\"shape\":[1,4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},"
        "{\"name\":\"b\",\"shape\":[2,4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},"
        "{\"name\":\"b\",\"shape\":[4]},{\"name\":\"c\",\"shape\":[4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        "{\"kind\":\"pointwise\",\"dtype\":\"f16\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},"
        "{\"name\":\"b\",\"shape\":[4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"out_dtype\":\"bf16\","
        "\"inputs\":[{\"name\":\"a\",\"shape\":[2,4]},{\"name\":\"b\",\"shape\":[4]}],"
        "\"ops\":[{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
        /* the output index: a node, an earlier node, an input */
        PW_AB("{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"},"
              "{\"op\":\"exp\",\"args\":[\"y\"],\"out\":\"z\"}",
              "z"),
        PW_AB("{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"},"
              "{\"op\":\"exp\",\"args\":[\"y\"],\"out\":\"z\"}",
              "y"),
    };
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, pointwise_changes_with_dag_structure_for_the_same_ops)
{
    const char *texts[] = {
        /* exp(a) + b */
        PW_AB("{\"op\":\"exp\",\"args\":[\"a\"],\"out\":\"t\"},"
              "{\"op\":\"add\",\"args\":[\"t\",\"b\"],\"out\":\"y\"}",
              "y"),
        /* exp(b) + a */
        PW_AB("{\"op\":\"exp\",\"args\":[\"b\"],\"out\":\"t\"},"
              "{\"op\":\"add\",\"args\":[\"t\",\"a\"],\"out\":\"y\"}",
              "y"),
        /* exp(a) + a */
        PW_AB("{\"op\":\"exp\",\"args\":[\"a\"],\"out\":\"t\"},"
              "{\"op\":\"add\",\"args\":[\"t\",\"a\"],\"out\":\"y\"}",
              "y"),
        /* b + exp(a) */
        PW_AB("{\"op\":\"exp\",\"args\":[\"a\"],\"out\":\"t\"},"
              "{\"op\":\"add\",\"args\":[\"b\",\"t\"],\"out\":\"y\"}",
              "y"),
        /* exp(a) + exp(a) */
        PW_AB("{\"op\":\"exp\",\"args\":[\"a\"],\"out\":\"t\"},"
              "{\"op\":\"add\",\"args\":[\"t\",\"t\"],\"out\":\"y\"}",
              "y"),
    };
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, pointwise_changes_with_each_attribute_bit)
{
#define PW_A(ops)                                                                                  \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[4]}],"       \
    "\"ops\":[" ops "],\"output\":\"y\"}"
#define CONST_MUL(v)                                                                               \
    PW_A("{\"op\":\"const\",\"value\":" v ",\"out\":\"c\"},"                                       \
         "{\"op\":\"mul\",\"args\":[\"a\",\"c\"],\"out\":\"y\"}")
#define CLAMP(attrs) PW_A("{\"op\":\"clamp\",\"args\":[\"a\"]," attrs ",\"out\":\"y\"}")
    const char *texts[] = {
        CONST_MUL("0.5"),
        CONST_MUL("0.5000000000000001"),  /* one ulp up */
        CONST_MUL("0.49999999999999994"), /* one ulp down */
        CONST_MUL("0.0"),
        CONST_MUL("-0.0"),
        CONST_MUL("1e30"),
        CLAMP("\"min\":0"),
        CLAMP("\"min\":-0.0"),
        CLAMP("\"max\":0"),
        CLAMP("\"max\":-0.0"),
        CLAMP("\"min\":0,\"max\":1"),
        CLAMP("\"min\":0,\"max\":1.0000000000000002"),
        CLAMP("\"min\":4.9406564584124654e-324,\"max\":1"),
        CLAMP("\"min\":-1,\"max\":1"),
    };
#undef CLAMP
#undef CONST_MUL
#undef PW_A
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, eps_of_minus_zero_and_zero_differ)
{
    const char *texts[] = {
        "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":2,\"n\":2,\"k\":2,"
        "\"reduction\":\"rmsnorm\",\"eps\":0.0}",
        "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":2,\"n\":2,\"k\":2,"
        "\"reduction\":\"rmsnorm\",\"eps\":-0.0}",
    };
    assert_all_distinct(texts, N_OF(texts));
}

Test(fingerprint, canonical_refuses_a_region_that_was_never_validated)
{
    tsr_region r;
    memset(&r, 0, sizeof r);
    r.kind = TSR_KIND_POINTWISE;
    r.u.pointwise.n_inputs = TSR_MAX_PW_INPUTS + 1;
    uint8_t *buf;
    size_t len;
    tsr_error err;
    cr_assert_eq(tsr_region_canonical(&r, &buf, &len, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(err.message, "canonical: region not validated");
    r.u.pointwise.n_inputs = 0;
    r.u.pointwise.n_nodes = 1; /* and no node array */
    cr_assert_eq(tsr_region_canonical(&r, &buf, &len, NULL), TSR_INVALID_ARGUMENT);
    memset(&r, 0, sizeof r);
    r.kind = TSR_KIND_FUSED;
    r.u.fused.n_epilogue = TSR_MAX_CHAIN + 1;
    cr_assert_eq(tsr_region_canonical(&r, &buf, &len, NULL), TSR_INVALID_ARGUMENT);
    cr_assert_eq(tsr_region_canonical(NULL, &buf, &len, NULL), TSR_INVALID_ARGUMENT);
}

Test(fingerprint, unused_attribute_fields_do_not_reach_the_encoding)
{
    /* A hand-built region may leave junk in attributes its ops do not take. */
    const char *json = PW_AB("{\"op\":\"sub\",\"args\":[\"a\",\"b\"],\"out\":\"y\"}", "y");
    tsr_region r;
    r = regions_parse(json);
    tsr_fingerprint before, after;
    cr_assert_eq(tsr_region_fingerprint(&r, &before, NULL), TSR_OK);
    r.u.pointwise.nodes[0].attrs.value = 42.0;
    r.u.pointwise.nodes[0].attrs.min = -3.0;
    r.u.pointwise.nodes[0].attrs.max = 3.0;
    cr_assert_eq(tsr_region_fingerprint(&r, &after, NULL), TSR_OK);
    cr_assert(fp_equal(before, after));
    /* Names written straight into the struct do not count either. */
    strcpy(r.u.pointwise.inputs[0].name, "zzz");
    strcpy(r.u.pointwise.nodes[0].out, "qqq");
    strcpy(r.u.pointwise.output, "qqq");
    cr_assert_eq(tsr_region_fingerprint(&r, &after, NULL), TSR_OK);
    cr_assert(fp_equal(before, after));
    tsr_region_free(&r);
}

/* ---- the kernel key ---- */

static tsr_kernel_key_parts key_parts_base(void)
{
    tsr_kernel_key_parts p = {
        .candidate = "tier1",
        .candidate_version = 3,
        .arch = "sm_90a",
        .compiler_version = "13.0",
        .driver_version = "580.65",
        .options = "-O3 --use_fast_math",
        .codegen_version = 7,
    };
    return p;
}

static tsr_fingerprint key_of(const tsr_fingerprint *fp, tsr_kernel_key_parts p)
{
    tsr_fingerprint out;
    tsr_kernel_key(fp, &p, &out);
    return out;
}

Test(fingerprint, kernel_key_changes_with_each_part)
{
    tsr_fingerprint fp, fp2;
    tsr_sha256("region", 6, fp.bytes);
    tsr_sha256("region2", 7, fp2.bytes);
    tsr_kernel_key_parts base = key_parts_base();

    tsr_fingerprint keys[10];
    int n = 0;
    keys[n++] = key_of(&fp, base);
    keys[n++] = key_of(&fp2, base);
    tsr_kernel_key_parts p;
    p = base, p.candidate = "tier2";
    keys[n++] = key_of(&fp, p);
    p = base, p.candidate_version = 4;
    keys[n++] = key_of(&fp, p);
    p = base, p.arch = "sm_90";
    keys[n++] = key_of(&fp, p);
    p = base, p.compiler_version = "13.1";
    keys[n++] = key_of(&fp, p);
    p = base, p.driver_version = "";
    keys[n++] = key_of(&fp, p);
    p = base, p.options = "-O3";
    keys[n++] = key_of(&fp, p);
    p = base, p.codegen_version = 8;
    keys[n++] = key_of(&fp, p);
    /* the same value moved to a neighbouring part */
    p = base, p.compiler_version = "", p.driver_version = "13.0";
    keys[n++] = key_of(&fp, p);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_assert(!fp_equal(keys[i], keys[j]), "keys %d and %d collide", i, j);

    /* and it is a function of its inputs */
    tsr_fingerprint again = key_of(&fp, base);
    cr_assert(fp_equal(again, keys[0]));
}

Test(fingerprint, kernel_key_parts_do_not_collide_by_concatenation)
{
    tsr_fingerprint fp;
    tsr_sha256("region", 6, fp.bytes);
    tsr_kernel_key_parts a = key_parts_base(), b = key_parts_base();
    a.compiler_version = "ab", a.driver_version = "c";
    b.compiler_version = "a", b.driver_version = "bc";
    cr_assert_not(fp_equal(key_of(&fp, a), key_of(&fp, b)));
    a = key_parts_base(), b = key_parts_base();
    a.arch = "ab", a.compiler_version = "c";
    b.arch = "a", b.compiler_version = "bc";
    cr_assert_not(fp_equal(key_of(&fp, a), key_of(&fp, b)));
    a = key_parts_base(), b = key_parts_base();
    a.driver_version = "x", a.options = "";
    b.driver_version = "", b.options = "x";
    cr_assert_not(fp_equal(key_of(&fp, a), key_of(&fp, b)));
}

Test(fingerprint, kernel_key_differs_from_the_region_fingerprint)
{
    tsr_fingerprint fp;
    tsr_sha256("region", 6, fp.bytes);
    tsr_kernel_key_parts empty = {"", 0, "", "", "", "", 0};
    tsr_fingerprint key = key_of(&fp, empty);
    cr_assert_not(fp_equal(key, fp));
}

/* ---- kernel variants ---- */

static tsr_fingerprint fp_variant(const char *json, unsigned free_dims, const char *cls)
{
    tsr_region r = regions_parse(json);
    tsr_variant v = {.free_dims = free_dims};
    snprintf(v.cls, sizeof v.cls, "%s", cls);
    tsr_fingerprint out;
    tsr_error err;
    cr_assert_eq(tsr_region_variant_fingerprint(&r, &v, &out, &err), TSR_OK, "%s", err.message);
    tsr_region_free(&r);
    return out;
}

#define FP_FUSED(m, n, k, epi, res, red)                                                           \
    "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":" #m ",\"n\":" #n ",\"k\":" #k                   \
    ",\"epilogue\":" epi ",\"residual\":" res ",\"reduction\":" red "}"

Test(fingerprint, a_variant_with_m_free_is_one_for_every_m)
{
    const unsigned rows = TSR_VARIANT_ROWS;
    tsr_fingerprint a =
        fp_variant(FP_FUSED(1, 4096, 4096, "[\"bias\",\"gelu\"]", "true", "null"), rows, "");
    int64_t ms[] = {2, 7, 64, 65, 100, 4096, 4097, 1 << 20};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":%lld,\"n\":4096,\"k\":4096,"
                 "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true,\"reduction\":null}",
                 (long long)ms[i]);
        cr_expect(fp_equal(a, fp_variant(json, rows, "")), "m %lld", (long long)ms[i]);
    }
    /* matmul and gated the same way */
    cr_expect(fp_equal(
        fp_variant("{\"kind\":\"matmul\",\"dtype\":\"f16\",\"m\":3,\"n\":8,\"k\":16}", rows, ""),
        fp_variant("{\"kind\":\"matmul\",\"dtype\":\"f16\",\"m\":3000,\"n\":8,\"k\":16}", rows,
                   "")));
    cr_expect(fp_equal(fp_variant("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":1,\"k\":64,"
                                  "\"h\":128,\"gate_act\":\"silu\"}",
                                  rows, ""),
                       fp_variant("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":77,\"k\":64,"
                                  "\"h\":128,\"gate_act\":\"silu\"}",
                                  rows, "")));
}

/* Wherever the kernel's code can differ, the variants differ: never one key
 * for two codes. */
#define FP_FUSED_AS(dtype, out, prologue)                                                          \
    "{\"kind\":\"fused\",\"dtype\":" dtype ",\"out_dtype\":" out                                   \
    ",\"m\":8,\"n\":64,\"k\":32,\"prologue\":" prologue                                            \
    ",\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}"

Test(fingerprint, variants_differ_wherever_the_code_does)
{
    const unsigned rows = TSR_VARIANT_ROWS;
    const char *base = FP_FUSED(8, 64, 32, "[\"bias\",\"gelu\"]", "true", "null");
    /* Each differs from base in one thing: N, K, an epilogue op, the
     * epilogue's order, residual, two reductions, dtype, out_dtype, a
     * prologue, the kind. */
    const char *others[] = {
        FP_FUSED(8, 72, 32, "[\"bias\",\"gelu\"]", "true", "null"),
        FP_FUSED(8, 64, 40, "[\"bias\",\"gelu\"]", "true", "null"),
        FP_FUSED(8, 64, 32, "[\"bias\",\"relu\"]", "true", "null"),
        FP_FUSED(8, 64, 32, "[\"gelu\",\"bias\"]", "true", "null"),
        FP_FUSED(8, 64, 32, "[\"bias\",\"gelu\"]", "false", "null"),
        FP_FUSED(8, 64, 32, "[\"bias\",\"gelu\"]", "false", "\"rmsnorm\""),
        FP_FUSED(8, 64, 32, "[\"bias\",\"gelu\"]", "false", "\"softmax\""),
        FP_FUSED_AS("\"f16\"", "\"f16\"", "[]"),
        FP_FUSED_AS("\"bf16\"", "\"f32\"", "[]"),
        FP_FUSED_AS("\"bf16\"", "\"bf16\"", "[\"exp\"]"),
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8,\"n\":64,\"k\":32}",
    };
    tsr_fingerprint b = fp_variant(base, rows, "");
    /* The second form, written out with base's values, is base. */
    cr_assert(fp_equal(b, fp_variant(FP_FUSED_AS("\"bf16\"", "\"bf16\"", "[]"), rows, "")));
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_expect_not(fp_equal(b, fp_variant(others[i], rows, "")), "%s", others[i]);
    /* The class (a tile configuration chosen by size) and the free set count. */
    cr_expect_not(fp_equal(b, fp_variant(base, rows, "tsr_gemm_bf16_bf16_n64")));
    cr_expect_not(fp_equal(fp_variant(base, rows, "a"), fp_variant(base, rows, "b")));
    tsr_fingerprint exact = fp_variant(base, 0, "");
    cr_expect_not(fp_equal(b, exact));
    cr_expect_not(fp_equal(exact, fp_variant(base, 0, "x")));
    /* eps only matters with a norm, but is written anyway (a spare compile,
     * never a wrong binary). */
    cr_expect_not(fp_equal(
        fp_variant(FP_FUSED(8, 64, 32, "[]", "false", "\"rmsnorm\""), rows, ""),
        fp_variant("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":8,\"n\":64,\"k\":32,"
                   "\"epilogue\":[],\"residual\":false,\"reduction\":\"rmsnorm\",\"eps\":0.001}",
                   rows, "")));
    cr_expect_not(
        fp_equal(fp_variant("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":1,\"k\":64,\"h\":128,"
                            "\"gate_act\":\"silu\"}",
                            rows, ""),
                 fp_variant("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":1,\"k\":64,\"h\":128,"
                            "\"gate_act\":\"gelu\"}",
                            rows, "")));
}

#define FP_ATTN(b, h, hkv, sq, sk, d, causal)                                                      \
    "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":" #b ",\"heads\":" #h                    \
    ",\"heads_kv\":" #hkv ",\"seq_q\":" #sq ",\"seq_k\":" #sk ",\"head_dim\":" #d                  \
    ",\"causal\":" causal "}"

Test(fingerprint, attention_variants_free_only_the_dimensions_named)
{
    const unsigned all = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
    tsr_fingerprint a = fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 128, "true"), all, "");
    cr_expect(fp_equal(a, fp_variant(FP_ATTN(32, 32, 8, 1, 8192, 128, "true"), all, "")));
    cr_expect(fp_equal(a, fp_variant(FP_ATTN(4, 32, 8, 4096, 4096, 128, "true"), all, "")));
    /* heads, kv heads, head dim and the causal mask stay in */
    cr_expect_not(fp_equal(a, fp_variant(FP_ATTN(1, 16, 8, 1, 4096, 128, "true"), all, "")));
    cr_expect_not(fp_equal(a, fp_variant(FP_ATTN(1, 32, 4, 1, 4096, 128, "true"), all, "")));
    cr_expect_not(fp_equal(a, fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 64, "true"), all, "")));
    cr_expect_not(fp_equal(a, fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 128, "false"), all, "")));
    /* only the batch free: a new length is another variant */
    const unsigned batch = TSR_VARIANT_BATCH;
    cr_expect(fp_equal(fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 128, "true"), batch, ""),
                       fp_variant(FP_ATTN(9, 32, 8, 1, 4096, 128, "true"), batch, "")));
    cr_expect_not(fp_equal(fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 128, "true"), batch, ""),
                           fp_variant(FP_ATTN(1, 32, 8, 1, 4097, 128, "true"), batch, "")));
    cr_expect_not(fp_equal(a, fp_variant(FP_ATTN(1, 32, 8, 1, 4096, 128, "true"), batch, "")));
}

Test(fingerprint, a_variant_without_free_dimensions_is_the_region)
{
    tsr_region r = regions_parse(FP_FUSED(8, 64, 32, "[\"bias\"]", "false", "null"));
    tsr_fingerprint region, variant;
    tsr_variant none = {0};
    cr_assert_eq(tsr_region_fingerprint(&r, &region, NULL), TSR_OK);
    cr_assert_eq(tsr_region_variant_fingerprint(&r, &none, &variant, NULL), TSR_OK);
    cr_expect(fp_equal(region, variant));
    /* With M free it is no region's fingerprint, not even of M 0's encoding. */
    tsr_variant rows = {.free_dims = TSR_VARIANT_ROWS};
    cr_assert_eq(tsr_region_variant_fingerprint(&r, &rows, &variant, NULL), TSR_OK);
    cr_expect_not(fp_equal(region, variant));
    r.u.fused.m = 0;
    cr_assert_eq(tsr_region_fingerprint(&r, &region, NULL), TSR_OK);
    cr_expect_not(fp_equal(region, variant));
    tsr_region_free(&r);
}

Test(fingerprint, a_variant_names_only_dimensions_of_its_kind)
{
    tsr_error err;
    tsr_fingerprint out;
    tsr_region mm =
        regions_parse("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2,\"n\":3,\"k\":4}");
    tsr_variant v = {.free_dims = TSR_VARIANT_BATCH};
    cr_expect_eq(tsr_region_variant_fingerprint(&mm, &v, &out, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message,
                     "variant: free dimensions 0x2 are not all dimensions of a matmul region");
    v.free_dims = 1u << 9;
    cr_expect_eq(tsr_region_variant_fingerprint(&mm, &v, &out, &err), TSR_INVALID_ARGUMENT);
    v.free_dims = TSR_VARIANT_ROWS;
    memset(v.cls, 'x', sizeof v.cls);
    cr_expect_eq(tsr_region_variant_fingerprint(&mm, &v, &out, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "variant: class not terminated");
    cr_expect_eq(tsr_region_variant_fingerprint(&mm, NULL, &out, &err), TSR_INVALID_ARGUMENT);
    tsr_region_free(&mm);
    tsr_region pw =
        regions_parse("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":"
                      "\"x\",\"shape\":[4]}],\"ops\":[{\"op\":\"relu\",\"args\":[\"x\"],"
                      "\"out\":\"y\"}],\"output\":\"y\"}");
    tsr_variant rows = {.free_dims = TSR_VARIANT_ROWS};
    cr_expect_eq(tsr_region_variant_fingerprint(&pw, &rows, &out, &err), TSR_INVALID_ARGUMENT);
    tsr_region_free(&pw);
}

/* Pointwise: every dimension free, ranks and ops kept, the class carries the
 * broadcast pattern; the bit belongs to no other kind. */
#define FP_PW(sa, sb)                                                                              \
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[" sa "]},"   \
    "{\"name\":\"b\",\"shape\":[" sb "]}],\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],"        \
    "\"out\":\"y\"}],\"output\":\"y\"}"

Test(fingerprint, a_pointwise_variant_is_one_for_every_shape_of_its_ranks_and_class)
{
    const unsigned shape = TSR_VARIANT_SHAPE;
    tsr_fingerprint a = fp_variant(FP_PW("3,5", "5"), shape, "pw.2");
    cr_expect(fp_equal(a, fp_variant(FP_PW("3000,17", "17"), shape, "pw.2")));
    cr_expect_not(fp_equal(a, fp_of(FP_PW("3,5", "5"))));
    /* Another class, another rank, another op: other variants. */
    cr_expect_not(fp_equal(a, fp_variant(FP_PW("3,5", "5"), shape, "pw.0")));
    cr_expect_not(fp_equal(a, fp_variant(FP_PW("3,5", "1,5"), shape, "pw.2")));
    cr_expect_not(fp_equal(
        a, fp_variant("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                      "\"shape\":[3,5]},{\"name\":\"b\",\"shape\":[5]}],\"ops\":[{\"op\":\"mul\","
                      "\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
                      shape, "pw.2")));
    tsr_region r;
    tsr_error err;
    const char *mm = "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":4,\"n\":4,\"k\":4}";
    cr_assert_eq(tsr_region_from_json(mm, strlen(mm), &r, &err), TSR_OK);
    tsr_variant v = {.free_dims = shape};
    tsr_fingerprint out;
    cr_expect_eq(tsr_region_variant_fingerprint(&r, &v, &out, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message,
                     "variant: free dimensions 0x10 are not all dimensions of a matmul region");
    tsr_region_free(&r);
}
