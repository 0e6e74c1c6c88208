/*
 * fingerprint.c — the canonical encoding of a region, its SHA-256 fingerprint and
 * the compiled-kernel cache key (docs/architecture.md, "Fingerprint").
 *
 * The encoding is a flat byte string written field by field in a fixed order:
 * integers little-endian at a fixed width, floats as the bits of their double,
 * booleans as one byte, op lists as a length followed by op numbers. Nothing is
 * written that the region's meaning does not depend on: pointwise value names are
 * replaced by value indices and the derived broadcast shape is left out, so two
 * regions that differ only in names or JSON key order encode identically. Fields
 * are written for every region of a kind even where they are inert (a fused eps
 * without a norm), because a fingerprint that changes when it need not costs one
 * compile, while one that fails to change serves a stale binary.
 *
 * Changing the layout means bumping FP_FORMAT_VERSION, which changes every
 * fingerprint and so retires every cached kernel at once.
 */
#include "tessera/fingerprint.h"

#include <mbedtls/sha256.h>
#include <stdlib.h>
#include <string.h>

/* Written first into every encoding; bump on any layout change. */
#define FP_FORMAT_VERSION 1u
/* Written first into every kernel key; bump on any change of the key layout. */
#define FP_KEY_VERSION 1u

/* A growable byte buffer; a failed allocation latches `failed` so that the
 * encoders can write unconditionally and the caller checks once at the end. */
struct fp_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int failed;
};

static void fp_buf_put(struct fp_buf *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *data = realloc(b->data, cap);
        if (data == NULL) {
            b->failed = 1;
            return;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

/* Explicit byte order, independent of the host's. */
static void fp_buf_u64(struct fp_buf *b, uint64_t v)
{
    uint8_t bytes[8];
    for (int i = 0; i < 8; i++)
        bytes[i] = (uint8_t)(v >> (8 * i));
    fp_buf_put(b, bytes, sizeof bytes);
}

static void fp_buf_u32(struct fp_buf *b, uint32_t v)
{
    uint8_t bytes[4];
    for (int i = 0; i < 4; i++)
        bytes[i] = (uint8_t)(v >> (8 * i));
    fp_buf_put(b, bytes, sizeof bytes);
}

static void fp_buf_i64(struct fp_buf *b, int64_t v)
{
    fp_buf_u64(b, (uint64_t)v);
}

static void fp_buf_i32(struct fp_buf *b, int32_t v)
{
    fp_buf_u32(b, (uint32_t)v);
}

static void fp_buf_bool(struct fp_buf *b, bool v)
{
    uint8_t byte = v ? 1 : 0;
    fp_buf_put(b, &byte, 1);
}

/* The exact bits: -0.0 and 0.0 differ, and so do values one ulp apart. */
static void fp_buf_f64(struct fp_buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    fp_buf_u64(b, bits);
}

static void fp_buf_ops(struct fp_buf *b, int n, const tsr_op *ops)
{
    fp_buf_i32(b, n);
    for (int i = 0; i < n; i++)
        fp_buf_i32(b, (int32_t)ops[i]);
}

static void fp_encode_fused(struct fp_buf *b, const tsr_fused_desc *f)
{
    fp_buf_i64(b, f->m);
    fp_buf_i64(b, f->n);
    fp_buf_i64(b, f->k);
    fp_buf_ops(b, f->n_prologue, f->prologue);
    fp_buf_ops(b, f->n_epilogue, f->epilogue);
    fp_buf_bool(b, f->residual);
    fp_buf_i32(b, (int32_t)f->reduction);
    fp_buf_f64(b, f->eps);
}

static void fp_encode_attention(struct fp_buf *b, const tsr_attention_desc *a)
{
    fp_buf_i64(b, a->batch);
    fp_buf_i64(b, a->heads);
    fp_buf_i64(b, a->heads_kv);
    fp_buf_i64(b, a->seq_q);
    fp_buf_i64(b, a->seq_k);
    fp_buf_i64(b, a->head_dim);
    fp_buf_i64(b, a->head_dim_v);
    fp_buf_f64(b, a->scale);
    fp_buf_bool(b, a->causal);
}

/* Attributes are written at fixed width for every node, with the ones an op does
 * not take (or a clamp bound that is absent) written as zero: whatever a builder
 * left in an unused field must not reach the fingerprint. */
static void fp_encode_attrs(struct fp_buf *b, tsr_op op, const tsr_op_attrs *attrs)
{
    const tsr_op_info *info = tsr_op_info_get(op);
    unsigned flags = info ? info->flags : 0;
    bool has_value = (flags & TSR_OPF_HAS_VALUE) != 0;
    bool has_min = (flags & TSR_OPF_HAS_BOUNDS) && attrs->has_min;
    bool has_max = (flags & TSR_OPF_HAS_BOUNDS) && attrs->has_max;
    fp_buf_f64(b, has_value ? attrs->value : 0.0);
    fp_buf_bool(b, has_min);
    fp_buf_f64(b, has_min ? attrs->min : 0.0);
    fp_buf_bool(b, has_max);
    fp_buf_f64(b, has_max ? attrs->max : 0.0);
}

static void fp_encode_pointwise(struct fp_buf *b, const tsr_pointwise_desc *p)
{
    fp_buf_i32(b, p->n_inputs);
    for (int i = 0; i < p->n_inputs; i++) {
        fp_buf_i32(b, p->inputs[i].rank);
        for (int d = 0; d < p->inputs[i].rank; d++)
            fp_buf_i64(b, p->inputs[i].shape[d]);
    }
    fp_buf_i32(b, p->n_nodes);
    for (int i = 0; i < p->n_nodes; i++) {
        const tsr_pw_node *node = &p->nodes[i];
        fp_buf_i32(b, (int32_t)node->op);
        fp_buf_i32(b, node->n_args);
        for (int a = 0; a < node->n_args; a++)
            fp_buf_i32(b, node->arg_index[a]);
        fp_encode_attrs(b, node->op, &node->attrs);
    }
    fp_buf_i32(b, p->output_index);
}

tsr_status tsr_region_canonical(const tsr_region *r, uint8_t **buf, size_t *len, tsr_error *err)
{
    if (r == NULL || buf == NULL || len == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "canonical: NULL argument");
    *buf = NULL;
    *len = 0;
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: %d out of range", (int)r->kind);
    if (r->kind == TSR_KIND_POINTWISE) {
        const tsr_pointwise_desc *p = &r->u.pointwise;
        /* Only a malformed, never-validated region trips these; reading past the
         * arrays would be worse than refusing. */
        if (p->n_inputs < 0 || p->n_inputs > TSR_MAX_PW_INPUTS || p->n_nodes < 0 ||
            p->n_nodes > TSR_MAX_PW_NODES || (p->n_nodes > 0 && p->nodes == NULL))
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "canonical: region not validated");
        for (int i = 0; i < p->n_inputs; i++)
            if (p->inputs[i].rank < 0 || p->inputs[i].rank > TSR_MAX_RANK)
                return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                     "canonical: inputs[%d] rank not validated", i);
        for (int i = 0; i < p->n_nodes; i++)
            if (p->nodes[i].n_args < 0 || p->nodes[i].n_args > 2)
                return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                     "canonical: ops[%d] arity not validated", i);
    } else if (r->kind == TSR_KIND_FUSED) {
        const tsr_fused_desc *f = &r->u.fused;
        if (f->n_prologue < 0 || f->n_prologue > TSR_MAX_CHAIN || f->n_epilogue < 0 ||
            f->n_epilogue > TSR_MAX_CHAIN)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "canonical: region not validated");
    }

    struct fp_buf b = {0};
    fp_buf_u32(&b, FP_FORMAT_VERSION);
    fp_buf_i32(&b, (int32_t)r->kind);
    fp_buf_i32(&b, (int32_t)r->dtype);
    fp_buf_i32(&b, (int32_t)r->out_dtype);
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        fp_buf_i64(&b, r->u.matmul.m);
        fp_buf_i64(&b, r->u.matmul.n);
        fp_buf_i64(&b, r->u.matmul.k);
        break;
    case TSR_KIND_FUSED:
        fp_encode_fused(&b, &r->u.fused);
        break;
    case TSR_KIND_GATED:
        fp_buf_i64(&b, r->u.gated.m);
        fp_buf_i64(&b, r->u.gated.k);
        fp_buf_i64(&b, r->u.gated.h);
        fp_buf_i32(&b, (int32_t)r->u.gated.gate_act);
        break;
    case TSR_KIND_ATTENTION:
        fp_encode_attention(&b, &r->u.attention);
        break;
    case TSR_KIND_POINTWISE:
        fp_encode_pointwise(&b, &r->u.pointwise);
        break;
    }
    if (b.failed) {
        free(b.data);
        return tsr_error_set(err, TSR_NO_MEMORY, "canonical: out of memory");
    }
    *buf = b.data;
    *len = b.len;
    return TSR_OK;
}

void tsr_sha256(const void *data, size_t len, uint8_t out[32])
{
    /* Cannot fail for an in-memory buffer with the software implementation;
     * mbedTLS reports errors only for hardware accelerators. */
    (void)mbedtls_sha256_ret(data, len, out, 0);
}

tsr_status tsr_region_fingerprint(const tsr_region *r, tsr_fingerprint *out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "fingerprint: NULL output");
    uint8_t *buf;
    size_t len;
    tsr_status st = tsr_region_canonical(r, &buf, &len, err);
    if (st != TSR_OK)
        return st;
    tsr_sha256(buf, len, out->bytes);
    free(buf);
    return TSR_OK;
}

static void fp_key_put(mbedtls_sha256_context *ctx, const void *data, size_t len);
static void fp_key_str(mbedtls_sha256_context *ctx, const char *s);
static void fp_key_u32(mbedtls_sha256_context *ctx, uint32_t v);

/* The free bits each kind has. */
static unsigned fp_variant_bits(tsr_region_kind kind)
{
    switch (kind) {
    case TSR_KIND_MATMUL:
    case TSR_KIND_FUSED:
    case TSR_KIND_GATED:
        return TSR_VARIANT_ROWS;
    case TSR_KIND_ATTENTION:
        return TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
    case TSR_KIND_POINTWISE:
        return TSR_VARIANT_SHAPE;
    default:
        return 0;
    }
}

tsr_status tsr_region_variant_fingerprint(const tsr_region *r, const tsr_variant *v,
                                          tsr_fingerprint *out, tsr_error *err)
{
    if (r == NULL || v == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "variant fingerprint: NULL argument");
    if (memchr(v->cls, '\0', sizeof v->cls) == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "variant: class not terminated");
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "kind: %d out of range", (int)r->kind);
    if ((v->free_dims & ~fp_variant_bits(r->kind)) != 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "variant: free dimensions 0x%x are not all dimensions of a %s region",
                             v->free_dims, tsr_region_kind_name(r->kind));
    if (v->free_dims == 0 && v->cls[0] == '\0')
        return tsr_region_fingerprint(r, out, err);
    /* A shallow copy: only dimensions change (the pointwise shapes are held
     * in the struct), the pointwise nodes are never touched. */
    tsr_region erased = *r;
    unsigned f = v->free_dims;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        erased.u.matmul.m = 0;
        break;
    case TSR_KIND_FUSED:
        erased.u.fused.m = 0;
        break;
    case TSR_KIND_GATED:
        erased.u.gated.m = 0;
        break;
    case TSR_KIND_ATTENTION:
        if (f & TSR_VARIANT_BATCH)
            erased.u.attention.batch = 0;
        if (f & TSR_VARIANT_SEQ_Q)
            erased.u.attention.seq_q = 0;
        if (f & TSR_VARIANT_SEQ_K)
            erased.u.attention.seq_k = 0;
        break;
    case TSR_KIND_POINTWISE:
        /* Ranks stay; which dimensions are 1 is the class's to say. */
        for (int i = 0; i < erased.u.pointwise.n_inputs; i++)
            for (int d = 0; d < erased.u.pointwise.inputs[i].rank; d++)
                erased.u.pointwise.inputs[i].shape[d] = 0;
        for (int d = 0; d < erased.u.pointwise.out_rank; d++)
            erased.u.pointwise.out_shape[d] = 0;
        break;
    default:
        break;
    }
    uint8_t *buf;
    size_t len;
    tsr_status st = tsr_region_canonical(&erased, &buf, &len, err);
    if (st != TSR_OK)
        return st;
    static const char tag[] = "tessera kernel variant";
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    (void)mbedtls_sha256_starts_ret(&ctx, 0);
    fp_key_put(&ctx, tag, sizeof tag - 1);
    fp_key_put(&ctx, buf, len);
    fp_key_u32(&ctx, f);
    fp_key_str(&ctx, v->cls);
    (void)mbedtls_sha256_finish_ret(&ctx, out->bytes);
    mbedtls_sha256_free(&ctx);
    free(buf);
    return TSR_OK;
}

void tsr_fingerprint_hex(const tsr_fingerprint *fp, char hex[TSR_FINGERPRINT_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++) {
        hex[2 * i] = digits[fp->bytes[i] >> 4];
        hex[2 * i + 1] = digits[fp->bytes[i] & 0xf];
    }
    hex[2 * TSR_FINGERPRINT_BYTES] = '\0';
}

static int fp_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool tsr_fingerprint_parse(const char *hex, tsr_fingerprint *out)
{
    if (hex == NULL || out == NULL)
        return false;
    tsr_fingerprint fp;
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++) {
        /* A short string stops here at its terminator, which is no digit. */
        int hi = fp_hex_digit(hex[2 * i]);
        if (hi < 0)
            return false;
        int lo = fp_hex_digit(hex[2 * i + 1]);
        if (lo < 0)
            return false;
        fp.bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[2 * TSR_FINGERPRINT_BYTES] != '\0')
        return false;
    *out = fp;
    return true;
}

/* Every part goes in as a 64-bit length and its bytes, integers as four bytes
 * little-endian, so ("ab", "c") and ("a", "bc") cannot hash alike. */
static void fp_key_put(mbedtls_sha256_context *ctx, const void *data, size_t len)
{
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (uint8_t)((uint64_t)len >> (8 * i));
    (void)mbedtls_sha256_update_ret(ctx, prefix, sizeof prefix);
    (void)mbedtls_sha256_update_ret(ctx, data, len);
}

static void fp_key_str(mbedtls_sha256_context *ctx, const char *s)
{
    if (s == NULL)
        s = "";
    fp_key_put(ctx, s, strlen(s));
}

static void fp_key_u32(mbedtls_sha256_context *ctx, uint32_t v)
{
    uint8_t bytes[4];
    for (int i = 0; i < 4; i++)
        bytes[i] = (uint8_t)(v >> (8 * i));
    fp_key_put(ctx, bytes, sizeof bytes);
}

void tsr_kernel_key(const tsr_fingerprint *region_fp, const tsr_kernel_key_parts *parts,
                    tsr_fingerprint *out)
{
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    (void)mbedtls_sha256_starts_ret(&ctx, 0);
    fp_key_u32(&ctx, FP_KEY_VERSION);
    fp_key_put(&ctx, region_fp->bytes, TSR_FINGERPRINT_BYTES);
    fp_key_str(&ctx, parts->candidate);
    fp_key_u32(&ctx, parts->candidate_version);
    fp_key_str(&ctx, parts->arch);
    fp_key_str(&ctx, parts->compiler_version);
    fp_key_str(&ctx, parts->driver_version);
    fp_key_str(&ctx, parts->options);
    fp_key_u32(&ctx, parts->codegen_version);
    (void)mbedtls_sha256_finish_ret(&ctx, out->bytes);
    mbedtls_sha256_free(&ctx);
}
