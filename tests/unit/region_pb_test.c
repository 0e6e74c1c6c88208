/*
 * region_pb_test.c — the protobuf form of a region: every example survives
 * region -> message -> packed bytes -> unpacked message -> region, the wire
 * defaults (UNSPECIFIED out_dtype, empty gate_act and reduction) mean what the
 * proto says, -0.0 keeps its sign, bytes of the plain-field form still decode, bad fields are
 * rejected with the right code and field name, and mutated bytes never crash the decoder.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../support/regions.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/region_pb.h"

static const char *const examples[] = {"examples/matmul.json", "examples/fused.json",
                                       "examples/gated.json", "examples/attention.json",
                                       "examples/pointwise.json"};
#define N_EXAMPLES 5

/* region -> pb -> bytes -> pb -> region */
static tsr_status through_wire(const tsr_region *r, tsr_region *back, tsr_error *e)
{
    Tessera__V1__Region *pb;
    cr_assert_eq(tsr_region_to_pb(r, &pb, e), TSR_OK);
    size_t len = tessera__v1__region__get_packed_size(pb);
    uint8_t *buf = malloc(len ? len : 1);
    cr_assert_eq(tessera__v1__region__pack(pb, buf), len);
    tsr_region_pb_free(pb);
    Tessera__V1__Region *un = tessera__v1__region__unpack(NULL, len, buf);
    free(buf);
    cr_assert_not_null(un);
    tsr_status st = tsr_region_from_pb(un, back, e);
    tessera__v1__region__free_unpacked(un, NULL);
    return st;
}

#define assert_pb_fails(pb, want, msg)                                                             \
    REGIONS_ASSERT_REFUSED("protobuf", tsr_region_from_pb((pb), &r_, &e_), (want), (msg),          \
                           cr_assert_null(r_.u.pointwise.nodes))

/* An empty wire region of kind and dtype. */
static Tessera__V1__Region region_pb(Tessera__V1__RegionKind kind, Tessera__V1__DType dtype)
{
    Tessera__V1__Region pb = TESSERA__V1__REGION__INIT;
    pb.kind = kind;
    pb.dtype = dtype;
    return pb;
}

static Tessera__V1__Region matmul_pb(void)
{
    Tessera__V1__Region pb =
        region_pb(TESSERA__V1__REGION_KIND__KIND_MATMUL, TESSERA__V1__DTYPE__DTYPE_BF16);
    pb.m = 4;
    pb.n = 5;
    pb.k = 6;
    return pb;
}

/* Attention over one batch of 8 queries and 8 keys, head_dim 16; heads_kv and
 * head_dim_v left at 0, their defaults. */
static Tessera__V1__Region attention_pb(int64_t heads)
{
    Tessera__V1__Region pb =
        region_pb(TESSERA__V1__REGION_KIND__KIND_ATTENTION, TESSERA__V1__DTYPE__DTYPE_BF16);
    pb.batch = 1;
    pb.heads = heads;
    pb.seq_q = 8;
    pb.seq_k = 8;
    pb.head_dim = 16;
    return pb;
}

Test(region_pb, every_example_survives_the_wire)
{
    for (int i = 0; i < N_EXAMPLES; i++) {
        tsr_region a, b;
        tsr_error e;
        cr_assert_eq(tsr_region_from_file(examples[i], &a, &e), TSR_OK, "%s", e.message);
        cr_assert_eq(through_wire(&a, &b, &e), TSR_OK, "%s: %s", examples[i], e.message);
        cr_assert(tsr_region_equal(&a, &b), "%s", examples[i]);
        tsr_region_free(&a);
        tsr_region_free(&b);
    }
}

Test(region_pb, non_finite_attributes_survive)
{
    const char *text =
        "{\"kind\":\"pointwise\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"inputs\":[{\"name\":"
        "\"a\",\"shape\":[]}],\"ops\":[{\"op\":\"const\",\"value\":\"-inf\",\"out\":\"c\"},"
        "{\"op\":\"clamp\",\"args\":[\"a\"],\"max\":\"inf\",\"out\":\"d\"},{\"op\":\"pow\","
        "\"args\":[\"c\",\"d\"],\"out\":\"y\"}],\"output\":\"y\"}";
    tsr_region a, b;
    tsr_error e;
    cr_assert_eq(tsr_region_from_json(text, strlen(text), &a, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(through_wire(&a, &b, &e), TSR_OK, "%s", e.message);
    cr_assert(tsr_region_equal(&a, &b));
    cr_assert_eq(b.u.pointwise.nodes[0].attrs.value, -INFINITY);
    cr_assert_eq(b.u.pointwise.nodes[1].attrs.max, INFINITY);
    cr_assert_eq(b.out_dtype, TSR_F32);
    tsr_region_free(&a);
    tsr_region_free(&b);
}

static bool fingerprints_equal(const tsr_region *a, const tsr_region *b)
{
    tsr_fingerprint fa, fb;
    cr_assert_eq(tsr_region_fingerprint(a, &fa, NULL), TSR_OK);
    cr_assert_eq(tsr_region_fingerprint(b, &fb, NULL), TSR_OK);
    return memcmp(fa.bytes, fb.bytes, sizeof fa.bytes) == 0;
}

/* A plain proto3 double equal to 0 is left out of the encoding, sign and all;
 * the oneofs around the pointwise doubles carry -0.0 exactly. */
Test(region_pb, negative_zero_keeps_its_sign)
{
    const char *text =
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[3]}],"
        "\"ops\":[{\"op\":\"const\",\"value\":-0.0,\"out\":\"z\"},"
        "{\"op\":\"clamp\",\"args\":[\"a\"],\"min\":-0.0,\"max\":-0.0,\"out\":\"c\"},"
        "{\"op\":\"add\",\"args\":[\"z\",\"c\"],\"out\":\"y\"}],\"output\":\"y\"}";
    tsr_region a, b;
    tsr_error e;
    cr_assert_eq(tsr_region_from_json(text, strlen(text), &a, &e), TSR_OK, "%s", e.message);
    cr_assert(signbit(a.u.pointwise.nodes[0].attrs.value));
    cr_assert(signbit(a.u.pointwise.nodes[1].attrs.min));
    cr_assert(signbit(a.u.pointwise.nodes[1].attrs.max));
    cr_assert_eq(through_wire(&a, &b, &e), TSR_OK, "%s", e.message);
    cr_assert(signbit(b.u.pointwise.nodes[0].attrs.value));
    cr_assert_eq(b.u.pointwise.nodes[0].attrs.value, 0.0);
    cr_assert(b.u.pointwise.nodes[1].attrs.has_min);
    cr_assert(signbit(b.u.pointwise.nodes[1].attrs.min));
    cr_assert(b.u.pointwise.nodes[1].attrs.has_max);
    cr_assert(signbit(b.u.pointwise.nodes[1].attrs.max));
    cr_assert(tsr_region_equal(&a, &b));
    cr_assert(fingerprints_equal(&a, &b));
    tsr_region_free(&a);
    tsr_region_free(&b);
}

/* +0.0 is not sent (an unset oneof means it) and decodes as +0.0; the
 * fingerprint tells the two zeros apart, so the wire must too. */
Test(region_pb, positive_zero_is_left_out_and_comes_back_positive)
{
    const char *text =
        "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[3]}],"
        "\"ops\":[{\"op\":\"clamp\",\"args\":[\"a\"],\"min\":0.0,\"max\":-0.0,\"out\":\"y\"}],"
        "\"output\":\"y\"}";
    tsr_region a, b, neg;
    tsr_error e;
    Tessera__V1__Region *pb;
    cr_assert_eq(tsr_region_from_json(text, strlen(text), &a, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(tsr_region_to_pb(&a, &pb, &e), TSR_OK);
    cr_assert_eq(pb->ops[0]->min_present_case, TESSERA__V1__POINTWISE_OP__MIN_PRESENT__NOT_SET);
    cr_assert_eq(pb->ops[0]->max_present_case, TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX);
    cr_assert_eq(pb->ops[0]->value_present_case, TESSERA__V1__POINTWISE_OP__VALUE_PRESENT__NOT_SET);
    tsr_region_pb_free(pb);
    cr_assert_eq(through_wire(&a, &b, &e), TSR_OK, "%s", e.message);
    cr_assert_not(signbit(b.u.pointwise.nodes[0].attrs.min));
    cr_assert(signbit(b.u.pointwise.nodes[0].attrs.max));
    cr_assert(fingerprints_equal(&a, &b));
    cr_assert_eq(tsr_region_copy(&neg, &a, &e), TSR_OK);
    neg.u.pointwise.nodes[0].attrs.min = -0.0;
    cr_assert_not(fingerprints_equal(&a, &neg));
    tsr_region_free(&a);
    tsr_region_free(&b);
    tsr_region_free(&neg);
}

Test(region_pb, encodes_numbers_plus_one_and_names_as_strings)
{
    tsr_region r;
    tsr_error e;
    Tessera__V1__Region *pb;
    cr_assert_eq(tsr_region_from_file("examples/fused.json", &r, &e), TSR_OK);
    cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_OK);
    cr_assert_eq(pb->kind, TESSERA__V1__REGION_KIND__KIND_FUSED);
    cr_assert_eq(pb->dtype, TESSERA__V1__DTYPE__DTYPE_BF16);
    cr_assert_eq(pb->out_dtype, TESSERA__V1__DTYPE__DTYPE_F32);
    cr_assert_eq(pb->n_epilogue, 2);
    cr_assert_str_eq(pb->epilogue[0], "bias");
    cr_assert_str_eq(pb->epilogue[1], "gelu");
    cr_assert_eq(pb->n_prologue, 0);
    cr_assert_str_eq(pb->reduction, "");
    cr_assert_eq(pb->eps, 1e-6);
    cr_assert(pb->residual);
    cr_assert_eq(pb->h, 0);
    tsr_region_pb_free(pb);

    cr_assert_eq(tsr_region_from_file("examples/gated.json", &r, &e), TSR_OK);
    cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_OK);
    cr_assert_eq(pb->kind, TESSERA__V1__REGION_KIND__KIND_GATED);
    cr_assert_str_eq(pb->gate_act, "silu");
    cr_assert_eq(pb->h, 96);
    tsr_region_pb_free(pb);
    tsr_region_pb_free(NULL);
}

Test(region_pb, wire_defaults)
{
    Tessera__V1__Region pb = matmul_pb();
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_pb(&pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.out_dtype, TSR_BF16); /* UNSPECIFIED: same as dtype */

    pb = region_pb(TESSERA__V1__REGION_KIND__KIND_GATED, TESSERA__V1__DTYPE__DTYPE_F16);
    pb.m = 2;
    pb.k = 3;
    pb.h = 4;
    cr_assert_eq(tsr_region_from_pb(&pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.u.gated.gate_act, TSR_OP_SILU); /* "" means silu */
    pb.gate_act = "tanh";
    cr_assert_eq(tsr_region_from_pb(&pb, &r, &e), TSR_OK);
    cr_assert_eq(r.u.gated.gate_act, TSR_OP_TANH);

    pb = region_pb(TESSERA__V1__REGION_KIND__KIND_FUSED, TESSERA__V1__DTYPE__DTYPE_F32);
    pb.m = 2;
    pb.n = 3;
    pb.k = 4;
    pb.residual = true;
    pb.reduction = "none";
    cr_assert_eq(tsr_region_from_pb(&pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.u.fused.reduction, TSR_REDUCTION_NONE);
    cr_assert_eq(r.u.fused.eps, 0.0); /* taken as written */

    pb = attention_pb(4);
    pb.scale = NAN;
    cr_assert_eq(tsr_region_from_pb(&pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.u.attention.heads_kv, 4);
    cr_assert_eq(r.u.attention.head_dim_v, 16);
    cr_assert_eq(r.u.attention.scale, 0.25);
}

Test(region_pb, rejects_bad_kind_and_dtypes)
{
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_pb(NULL, &r, &e), TSR_INVALID_ARGUMENT);
    Tessera__V1__Region pb = matmul_pb();
    pb.kind = TESSERA__V1__REGION_KIND__KIND_UNSPECIFIED;
    assert_pb_fails(&pb, TSR_UNKNOWN_KIND, "kind: unspecified");
    pb.kind = (Tessera__V1__RegionKind)6;
    assert_pb_fails(&pb, TSR_UNKNOWN_KIND, "kind: unknown kind 6");
    pb.kind = (Tessera__V1__RegionKind)-3;
    assert_pb_fails(&pb, TSR_UNKNOWN_KIND, "kind: unknown kind -3");
    pb = matmul_pb();
    pb.dtype = TESSERA__V1__DTYPE__DTYPE_UNSPECIFIED;
    assert_pb_fails(&pb, TSR_BAD_DTYPE, "dtype: unspecified");
    pb.dtype = (Tessera__V1__DType)4;
    assert_pb_fails(&pb, TSR_BAD_DTYPE, "dtype: unknown dtype 4");
    pb = matmul_pb();
    pb.out_dtype = (Tessera__V1__DType)9;
    assert_pb_fails(&pb, TSR_BAD_DTYPE, "out_dtype: unknown dtype 9");
}

Test(region_pb, rejects_fields_of_another_kind)
{
    Tessera__V1__Region pb = matmul_pb();
    pb.h = 3;
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "h: not a field of a matmul region");
    pb = matmul_pb();
    pb.eps = 1e-6;
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "eps: not a field of a matmul region");
    pb = matmul_pb();
    pb.output = "y";
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "output: not a field of a matmul region");
    pb = matmul_pb();
    pb.kind = TESSERA__V1__REGION_KIND__KIND_GATED;
    pb.h = 3;
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "n: not a field of a gated region");
    pb = matmul_pb();
    pb.causal = true;
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "causal: not a field of a matmul region");
}

Test(region_pb, validation_codes_come_through)
{
    Tessera__V1__Region pb = matmul_pb();
    pb.m = 0;
    assert_pb_fails(&pb, TSR_BAD_DIMENSION, "m: must be > 0 (got 0)");
    pb.m = INT64_C(1) << 40;
    pb.k = 2;
    assert_pb_fails(&pb, TSR_TOO_LARGE,
                    "a: 2199023255552 elements past the limit of 2^40 = "
                    "1099511627776");

    pb = attention_pb(6);
    pb.heads_kv = 4;
    assert_pb_fails(&pb, TSR_BAD_HEADS, "heads: 6 not divisible by heads_kv 4");
    pb.heads_kv = -1; /* not to be read as the default */
    assert_pb_fails(&pb, TSR_BAD_DIMENSION, "heads_kv: must be > 0 (got -1)");
    pb.heads_kv = 0;
    pb.head_dim_v = -16;
    assert_pb_fails(&pb, TSR_BAD_DIMENSION, "head_dim_v: must be > 0 (got -16)");
    pb.head_dim_v = 0;
    pb.scale = INFINITY;
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "scale: must be finite (got inf)");

    char *epi[3] = {"bias", "relu", "bias"};
    pb = region_pb(TESSERA__V1__REGION_KIND__KIND_FUSED, TESSERA__V1__DTYPE__DTYPE_BF16);
    pb.m = pb.n = pb.k = 8;
    pb.n_epilogue = 3;
    pb.epilogue = epi;
    assert_pb_fails(&pb, TSR_CONFLICT, "epilogue[2]: bias appears twice (first at epilogue[0])");
    epi[2] = "swish";
    assert_pb_fails(&pb, TSR_UNKNOWN_OP, "epilogue[2]: unknown op 'swish'");
    epi[2] = NULL; /* a hand-built message with a hole reads as "" */
    assert_pb_fails(&pb, TSR_UNKNOWN_OP, "epilogue[2]: unknown op ''");
    pb.n_epilogue = 17;
    assert_pb_fails(&pb, TSR_TOO_LARGE, "epilogue: length 17 outside 0..16");
    pb.n_epilogue = 1;
    pb.epilogue = NULL;
    assert_pb_fails(&pb, TSR_BAD_MESSAGE, "epilogue: 1 entries but no array");
    pb.n_epilogue = 0;
    pb.reduction = "max";
    assert_pb_fails(&pb, TSR_BAD_ATTRIBUTE, "reduction: unknown reduction 'max'");
    pb.reduction = "softmax";
    pb.residual = true;
    assert_pb_fails(&pb, TSR_CONFLICT, "residual: cannot be combined with reduction 'softmax'");
}

/* a (2,3) -> neg -> y, built by hand. */
struct pw_msg {
    Tessera__V1__Region pb;
    Tessera__V1__PointwiseInput in, *inputs[1];
    Tessera__V1__PointwiseOp op, *ops[1];
    int64_t shape[9];
    char *args[3];
};

static void pw_msg_init(struct pw_msg *m)
{
    m->pb = region_pb(TESSERA__V1__REGION_KIND__KIND_POINTWISE, TESSERA__V1__DTYPE__DTYPE_F32);
    m->in = (Tessera__V1__PointwiseInput)TESSERA__V1__POINTWISE_INPUT__INIT;
    m->in.name = "a";
    m->shape[0] = 2;
    m->shape[1] = 3;
    m->in.shape = m->shape;
    m->in.n_shape = 2;
    m->inputs[0] = &m->in;
    m->op = (Tessera__V1__PointwiseOp)TESSERA__V1__POINTWISE_OP__INIT;
    m->op.op = "neg";
    m->args[0] = "a";
    m->args[1] = "a";
    m->args[2] = "a";
    m->op.args = m->args;
    m->op.n_args = 1;
    m->op.out = "y";
    m->ops[0] = &m->op;
    m->pb.inputs = m->inputs;
    m->pb.n_inputs = 1;
    m->pb.ops = m->ops;
    m->pb.n_ops = 1;
    m->pb.output = "y";
}

Test(region_pb, pointwise_fields_are_checked)
{
    struct pw_msg m;
    tsr_region r;
    tsr_error e;
    pw_msg_init(&m);
    cr_assert_eq(tsr_region_from_pb(&m.pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.u.pointwise.out_rank, 2);
    tsr_region_free(&r);

    m.op.n_args = 3;
    assert_pb_fails(&m.pb, TSR_BAD_ARITY, "ops[0].args: 'neg' takes 1 argument (got 3)");
    m.op.n_args = 2;
    assert_pb_fails(&m.pb, TSR_BAD_ARITY, "ops[0].args: 'neg' takes 1 argument (got 2)");
    pw_msg_init(&m);
    m.op.op = "bias";
    assert_pb_fails(&m.pb, TSR_UNKNOWN_OP, "ops[0].op: 'bias' is not a pointwise op");
    pw_msg_init(&m);
    m.op.value_present_case = TESSERA__V1__POINTWISE_OP__VALUE_PRESENT_VALUE;
    m.op.value = 1.5;
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "ops[0].value: 'neg' takes no value");
    pw_msg_init(&m);
    m.op.min_present_case = TESSERA__V1__POINTWISE_OP__MIN_PRESENT_MIN;
    m.op.min = 1.0; /* a min without has_min */
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "ops[0].min: 'neg' takes no min");
    pw_msg_init(&m);
    m.op.min_present_case = TESSERA__V1__POINTWISE_OP__MIN_PRESENT_MIN;
    m.op.min = -0.0; /* -0.0 is a value too */
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "ops[0].min: 'neg' takes no min");
    pw_msg_init(&m);
    m.op.min = 1.0; /* the union member of an unset oneof is not read */
    cr_assert_eq(tsr_region_from_pb(&m.pb, &r, &e), TSR_OK, "%s", e.message);
    cr_assert_eq(r.u.pointwise.nodes[0].attrs.min, 0.0);
    tsr_region_free(&r);
    pw_msg_init(&m);
    m.op.op = "clamp";
    m.op.has_max = true;
    m.op.max_present_case = TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX;
    m.op.max = NAN;
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "ops[0].max: must not be NaN");
    pw_msg_init(&m);
    m.args[0] = "b";
    assert_pb_fails(&m.pb, TSR_UNDEFINED_NAME, "ops[0].args[0]: undefined name 'b'");
    m.args[0] = "y";
    assert_pb_fails(&m.pb, TSR_CYCLE, "ops[0].args[0]: 'y' is defined by this op");
    pw_msg_init(&m);
    m.op.out = "a";
    assert_pb_fails(&m.pb, TSR_DUPLICATE_NAME,
                    "ops[0].out: 'a' defined twice (first at inputs[0].name)");
    pw_msg_init(&m);
    m.pb.output = NULL;
    assert_pb_fails(&m.pb, TSR_UNDEFINED_NAME, "output: undefined name ''");
    pw_msg_init(&m);
    m.in.n_shape = 9;
    assert_pb_fails(&m.pb, TSR_BAD_DIMENSION, "inputs[0].shape: rank 9 outside 0..8");
    m.in.n_shape = 2;
    m.shape[1] = -3;
    assert_pb_fails(&m.pb, TSR_BAD_DIMENSION, "inputs[0].shape[1]: must be > 0 (got -3)");
    pw_msg_init(&m);
    m.in.shape = NULL;
    assert_pb_fails(&m.pb, TSR_BAD_MESSAGE, "inputs[0].shape: no array");
    pw_msg_init(&m);
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    m.in.name = long_name;
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "inputs[0].name: longer than 63 bytes");
    pw_msg_init(&m);
    m.in.name = NULL;
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "inputs[0].name: must not be empty");
    pw_msg_init(&m);
    m.inputs[0] = NULL;
    assert_pb_fails(&m.pb, TSR_BAD_MESSAGE, "inputs[0]: missing");
    pw_msg_init(&m);
    m.ops[0] = NULL;
    assert_pb_fails(&m.pb, TSR_BAD_MESSAGE, "ops[0]: missing");
    pw_msg_init(&m);
    m.pb.n_inputs = 17;
    assert_pb_fails(&m.pb, TSR_TOO_LARGE, "inputs: 17 inputs outside 0..16");
    pw_msg_init(&m);
    m.pb.n_ops = 1025;
    assert_pb_fails(&m.pb, TSR_TOO_LARGE, "ops: 1025 ops outside 0..1024");
    pw_msg_init(&m);
    m.pb.m = 3;
    assert_pb_fails(&m.pb, TSR_BAD_ATTRIBUTE, "m: not a field of a pointwise region");
}

/* Mutated encodings of every example: whatever unpacks must decode to a valid
 * region or fail with a status, and a region that decodes must survive the
 * wire again unchanged. The generator is a fixed LCG, so failures replay. */
/* The bytes an encoder of the plain-field form made decode as they always did:
 * field numbers and types are unchanged, and such an encoder left a 0 bound out. */
Test(region_pb, bytes_of_the_plain_field_form_still_decode)
{
    /* PointwiseOp{op:"clamp", args:["a"], out:"y", has_min:true, has_max:true,
     * max:2.5}: min = 0 was left out. */
    static const uint8_t op_bytes[] = {0x0a, 0x05, 'c',  'l',  'a',  'm',  'p',  0x12, 0x01,
                                       'a',  0x1a, 0x01, 'y',  0x28, 0x01, 0x38, 0x01, 0x41,
                                       0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40};
    Tessera__V1__PointwiseOp *op =
        tessera__v1__pointwise_op__unpack(NULL, sizeof op_bytes, op_bytes);
    cr_assert_not_null(op);
    cr_assert(op->has_min);
    cr_assert_eq(op->min_present_case, TESSERA__V1__POINTWISE_OP__MIN_PRESENT__NOT_SET);
    cr_assert_eq(op->max_present_case, TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX);
    cr_assert_eq(op->max, 2.5);
    struct pw_msg m;
    pw_msg_init(&m);
    m.ops[0] = op;
    tsr_region r;
    tsr_error e;
    cr_assert_eq(tsr_region_from_pb(&m.pb, &r, &e), TSR_OK, "%s", e.message);
    const tsr_op_attrs *at = &r.u.pointwise.nodes[0].attrs;
    cr_assert(at->has_min && at->has_max);
    cr_assert_eq(at->min, 0.0);
    cr_assert_not(signbit(at->min));
    cr_assert_eq(at->max, 2.5);
    tsr_region_free(&r);
    tessera__v1__pointwise_op__free_unpacked(op, NULL);

    /* A -0.0 max now goes out as field 8 with the sign bit set, which a
     * plain-field decoder reads bit for bit. */
    pw_msg_init(&m);
    m.op.op = "clamp";
    m.op.has_max = true;
    m.op.max_present_case = TESSERA__V1__POINTWISE_OP__MAX_PRESENT_MAX;
    m.op.max = -0.0;
    m.op.args = NULL;
    m.op.n_args = 0;
    m.op.out = "";
    uint8_t buf[32];
    size_t len = tessera__v1__pointwise_op__pack(&m.op, buf);
    static const uint8_t want[] = {0x0a, 0x05, 'c',  'l',  'a',  'm',  'p',  0x38, 0x01,
                                   0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80};
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(buf, want, sizeof want);
}

Test(region_pb, mutated_bytes_never_crash)
{
    uint64_t seed = 0x9E3779B97F4A7C15u;
    int decoded = 0, rejected = 0;
    for (int i = 0; i < N_EXAMPLES; i++) {
        tsr_region r;
        tsr_error e;
        Tessera__V1__Region *pb;
        cr_assert_eq(tsr_region_from_file(examples[i], &r, &e), TSR_OK);
        cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_OK);
        size_t len = tessera__v1__region__get_packed_size(pb);
        uint8_t *orig = malloc(len), *buf = malloc(len);
        tessera__v1__region__pack(pb, orig);
        tsr_region_pb_free(pb);
        tsr_region_free(&r);
        for (int round = 0; round < 2000; round++) {
            memcpy(buf, orig, len);
            int flips = 1 + round % 4;
            for (int f = 0; f < flips; f++) {
                seed = seed * 6364136223846793005u + 1442695040888963407u;
                buf[(seed >> 33) % len] = (uint8_t)(seed >> 13);
            }
            size_t cut = round % 7 == 0 ? (size_t)((seed >> 20) % len) : len;
            Tessera__V1__Region *un = tessera__v1__region__unpack(NULL, cut, buf);
            if (un == NULL)
                continue;
            tsr_region got, again;
            if (tsr_region_from_pb(un, &got, &e) == TSR_OK) {
                decoded++;
                cr_assert_eq(through_wire(&got, &again, &e), TSR_OK, "%s", e.message);
                cr_assert(tsr_region_equal(&got, &again));
                tsr_region_free(&again);
                tsr_region_free(&got);
            } else {
                rejected++;
                cr_assert_neq(e.code, TSR_OK);
                cr_assert_neq(e.message[0], '\0');
            }
            tessera__v1__region__free_unpacked(un, NULL);
        }
        free(orig);
        free(buf);
    }
    cr_assert_gt(decoded, 0);
    cr_assert_gt(rejected, 0);
}

Test(region_pb, to_pb_refuses_regions_it_cannot_encode)
{
    tsr_region r;
    tsr_error e;
    Tessera__V1__Region *pb = (Tessera__V1__Region *)1;
    memset(&r, 0, sizeof r);
    r.kind = (tsr_region_kind)9;
    cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_UNKNOWN_KIND);
    cr_assert_null(pb);
    r.kind = TSR_KIND_POINTWISE;
    r.u.pointwise.n_inputs = TSR_MAX_PW_INPUTS + 1;
    cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_INVALID_ARGUMENT);
    r.kind = TSR_KIND_FUSED;
    r.u.fused.n_epilogue = -1;
    cr_assert_eq(tsr_region_to_pb(&r, &pb, &e), TSR_INVALID_ARGUMENT);
    cr_assert_eq(tsr_region_to_pb(NULL, &pb, &e), TSR_INVALID_ARGUMENT);
}
