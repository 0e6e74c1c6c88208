/*
 * cuda_kernels.c — the CUDA backend's candidates, compiled blobs and tier-3
 * launch plans, as host-only code that runs without a device.
 *
 * The blob header is written field by field in little-endian order rather than
 * as a struct image, so a cache directory stays readable by any build of the
 * daemon with the same TSRD_CUDA_BLOB_VERSION. The tier-3 rules live in one
 * place, kernels_plan_rules behind tsrd_gemm_plan_make (Hopper) and
 * tsrd_gemm80_plan_make (Ampere): the candidates' applies predicates, compile
 * and the launch all ask them, so a region is never accepted by one and refused
 * by another.
 */
#include "backend/cuda/kernels.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/codegen.h"
#include "tessera/json.h"

static const uint8_t kernels_blob_magic[8] = {'T', 'S', 'R', 'C', 'U', 'D', 'A', '1'};

/* ---- blob ---- */

static void kernels_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t kernels_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Header layout: magic[8], version, image, entry[64], grid[3], block[3],
 * shared_bytes, n_params, payload_len (low, high), the region's fingerprint[32],
 * zero padding to 160. */
enum {
    BLOB_OFF_VERSION = 8,
    BLOB_OFF_IMAGE = 12,
    BLOB_OFF_ENTRY = 16,
    BLOB_OFF_GRID = 80,
    BLOB_OFF_BLOCK = 92,
    BLOB_OFF_SHARED = 104,
    BLOB_OFF_NPARAMS = 108,
    BLOB_OFF_PAYLOAD_LEN = 112,
    BLOB_OFF_REGION = 120,
};
_Static_assert(BLOB_OFF_REGION + TSR_FINGERPRINT_BYTES <= TSRD_CUDA_BLOB_HEADER,
               "the fingerprint fits the header");

tsr_status tsrd_cuda_blob_encode(const tsrd_cuda_launch_desc *desc, const uint8_t *payload,
                                 size_t payload_len, uint8_t **out, size_t *out_len, tsr_error *err)
{
    uint8_t *blob = calloc(1, TSRD_CUDA_BLOB_HEADER + payload_len);
    if (blob == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "cuda blob: out of memory");
    memcpy(blob, kernels_blob_magic, sizeof kernels_blob_magic);
    kernels_put32(blob + BLOB_OFF_VERSION, TSRD_CUDA_BLOB_VERSION);
    kernels_put32(blob + BLOB_OFF_IMAGE, (uint32_t)desc->image);
    snprintf((char *)blob + BLOB_OFF_ENTRY, sizeof desc->entry, "%s", desc->entry);
    for (int i = 0; i < 3; i++) {
        kernels_put32(blob + BLOB_OFF_GRID + 4 * i, desc->grid[i]);
        kernels_put32(blob + BLOB_OFF_BLOCK + 4 * i, desc->block[i]);
    }
    kernels_put32(blob + BLOB_OFF_SHARED, desc->shared_bytes);
    kernels_put32(blob + BLOB_OFF_NPARAMS, (uint32_t)desc->n_params);
    kernels_put32(blob + BLOB_OFF_PAYLOAD_LEN, (uint32_t)payload_len);
    kernels_put32(blob + BLOB_OFF_PAYLOAD_LEN + 4, (uint32_t)((uint64_t)payload_len >> 32));
    memcpy(blob + BLOB_OFF_REGION, desc->region.bytes, TSR_FINGERPRINT_BYTES);
    if (payload_len > 0)
        memcpy(blob + TSRD_CUDA_BLOB_HEADER, payload, payload_len);
    *out = blob;
    *out_len = TSRD_CUDA_BLOB_HEADER + payload_len;
    return TSR_OK;
}

tsr_status tsrd_cuda_blob_decode(const uint8_t *bin, size_t len, tsrd_cuda_launch_desc *desc,
                                 const uint8_t **payload, size_t *payload_len, tsr_error *err)
{
    memset(desc, 0, sizeof *desc);
    if (bin == NULL || len < TSRD_CUDA_BLOB_HEADER ||
        memcmp(bin, kernels_blob_magic, sizeof kernels_blob_magic) != 0)
        return tsr_error_set(err, TSR_CORRUPT, "cuda blob: not a tesserad CUDA kernel");
    uint32_t version = kernels_get32(bin + BLOB_OFF_VERSION);
    if (version != TSRD_CUDA_BLOB_VERSION)
        return tsr_error_set(err, TSR_CORRUPT, "cuda blob: format version %u, expected %u", version,
                             TSRD_CUDA_BLOB_VERSION);
    uint64_t plen = (uint64_t)kernels_get32(bin + BLOB_OFF_PAYLOAD_LEN) |
                    (uint64_t)kernels_get32(bin + BLOB_OFF_PAYLOAD_LEN + 4) << 32;
    desc->image = (tsrd_cuda_image)kernels_get32(bin + BLOB_OFF_IMAGE);
    memcpy(desc->entry, bin + BLOB_OFF_ENTRY, sizeof desc->entry);
    for (int i = 0; i < 3; i++) {
        desc->grid[i] = kernels_get32(bin + BLOB_OFF_GRID + 4 * i);
        desc->block[i] = kernels_get32(bin + BLOB_OFF_BLOCK + 4 * i);
    }
    desc->shared_bytes = kernels_get32(bin + BLOB_OFF_SHARED);
    desc->n_params = (int32_t)kernels_get32(bin + BLOB_OFF_NPARAMS);
    memcpy(desc->region.bytes, bin + BLOB_OFF_REGION, TSR_FINGERPRINT_BYTES);
    bool image_ok = (desc->image == TSRD_CUDA_IMAGE_CUBIN && plen > 0) ||
                    (desc->image == TSRD_CUDA_IMAGE_EMBEDDED && plen == 0) ||
                    (desc->image == TSRD_CUDA_IMAGE_REFERENCE && plen > 0);
    if (plen != len - TSRD_CUDA_BLOB_HEADER || !image_ok ||
        memchr(desc->entry, '\0', sizeof desc->entry) == NULL || desc->entry[0] == '\0' ||
        desc->n_params < 1 || desc->n_params > TSR_MAX_REGION_INPUTS + 1)
        return tsr_error_set(err, TSR_CORRUPT, "cuda blob: inconsistent header");
    for (int i = 0; i < 3; i++)
        if (desc->grid[i] == 0 || desc->block[i] == 0)
            return tsr_error_set(err, TSR_CORRUPT, "cuda blob: empty launch geometry");
    *payload = bin + TSRD_CUDA_BLOB_HEADER;
    *payload_len = (size_t)plen;
    return TSR_OK;
}

void tsrd_cuda_arch_name(int major, int minor, char *buf, size_t size)
{
    snprintf(buf, size, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
}

/* ---- tier-3 plan ---- */

static const char *kernels_dtype_tag(tsr_dtype dtype)
{
    return dtype == TSR_F32 ? "f32" : dtype == TSR_F16 ? "f16" : "bf16";
}

/* The rules both families share and the plan fields that follow from the
 * region alone; the caller adds the family's geometry and entry name. */
static tsr_status kernels_plan_rules(const tsr_region *r, tsrd_gemm_plan *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    out->bias_input = -1;
    out->residual_input = -1;
    int64_t m, n, k;
    const char *n_name = "N";
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        m = r->u.matmul.m, n = r->u.matmul.n, k = r->u.matmul.k;
        break;
    case TSR_KIND_FUSED: {
        const tsr_fused_desc *f = &r->u.fused;
        if (f->n_prologue > 0)
            return tsr_error_set(err, TSR_UNSUPPORTED, "has a prologue");
        out->reduction = f->reduction == TSR_REDUCTION_RMSNORM      ? TSR_GEMM_REDUCE_RMSNORM
                         : f->reduction == TSR_REDUCTION_LAYER_NORM ? TSR_GEMM_REDUCE_LAYER_NORM
                         : f->reduction == TSR_REDUCTION_SOFTMAX    ? TSR_GEMM_REDUCE_SOFTMAX
                                                                    : TSR_GEMM_REDUCE_NONE;
        out->eps = (float)f->eps;
        /* The kernels add eps in f32: one that f32 turns into 0 or infinity
         * would change the result. */
        if (out->reduction != TSR_GEMM_REDUCE_NONE &&
            (isinf(out->eps) || (f->eps != 0 && out->eps == 0)))
            return tsr_error_set(err, TSR_UNSUPPORTED, "eps %g is not an f32 value", f->eps);
        if (f->n_epilogue > TSR_GEMM_MAX_EPILOGUE)
            return tsr_error_set(err, TSR_UNSUPPORTED, "epilogue longer than %d",
                                 TSR_GEMM_MAX_EPILOGUE);
        int next = 2;
        for (int i = 0; i < f->n_epilogue; i++) {
            out->ops[i] = (int)f->epilogue[i];
            if (f->epilogue[i] == TSR_OP_BIAS && out->bias_input < 0)
                out->bias_input = next++;
        }
        out->n_ops = f->n_epilogue;
        if (f->residual)
            out->residual_input = next;
        m = f->m, n = f->n, k = f->k;
        break;
    }
    case TSR_KIND_GATED:
        m = r->u.gated.m, n = r->u.gated.h, k = r->u.gated.k;
        out->gated = 1;
        out->gate_act = (int)r->u.gated.gate_act;
        n_name = "H";
        break;
    default:
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s regions are not GEMMs",
                             tsr_region_kind_name(r->kind));
    }
    if (r->dtype != TSR_BF16 && r->dtype != TSR_F16)
        return tsr_error_set(err, TSR_UNSUPPORTED, "dtype %s (needs bf16 or f16)",
                             tsr_dtype_name(r->dtype));
    if (k % 8 != 0)
        return tsr_error_set(err, TSR_UNSUPPORTED, "K not a multiple of 8");
    if (n % 8 != 0)
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s not a multiple of 8", n_name);
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return tsr_error_set(err, TSR_UNSUPPORTED, "a dimension past 2^31 - 1");
    out->m = (int)m, out->n = (int)n, out->k = (int)k;
    out->map_dtype =
        r->dtype == TSR_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return TSR_OK;
}

/* Tile count of a bm x bn tiling, which is also each family's grid size before
 * the launch clamps a persistent one. */
static tsr_status kernels_plan_tiles(tsrd_gemm_plan *out, int bm, int bn, tsr_error *err)
{
    int64_t tiles = (((int64_t)out->m + bm - 1) / bm) * (((int64_t)out->n + bn - 1) / bn);
    if (tiles > INT32_MAX)
        return tsr_error_set(err, TSR_UNSUPPORTED, "more than 2^31 - 1 tiles");
    out->grid = (uint32_t)tiles;
    return TSR_OK;
}

tsr_status tsrd_gemm_plan_make(const tsr_region *r, tsrd_gemm_plan *out, tsr_error *err)
{
    tsr_status st = kernels_plan_rules(r, out, err);
    if (st != TSR_OK)
        return st;
    /* At most TSR_GEMM_NARROW_M rows (gated too): the small-M kernels, whose
     * transposed product puts A's few rows on wgmma's N side and whose K is
     * split over a cluster, so that a decode step streams B through every
     * multiprocessor (gemm_params.h). Above that, a product whose epilogue has both ops and a
     * residual takes the ping-pong kernels (the epilogue overlaps the other
     * consumer's products: 7.5% faster with bias+gelu+residual on the H200)
     * and the others the cooperative kernels, whose main loop is 9% faster
     * and which win by 1-4% with ops alone or a residual alone
     * (docs/benchmarks.md). */
    const int small = out->m <= TSR_GEMM_NARROW_M;
    out->family = TSRD_GEMM_WGMMA;
    out->block = TSR_GEMM_THREADS;
    out->splits = 0;
    if (out->reduction != TSR_GEMM_REDUCE_NONE) {
        /* The row kernels: a cluster per row block of 64 rows holds a whole
         * row's statistics (gemm_params.h), so a few rows leave most of the
         * card idle and a row past TSR_GEMM_ROWS_MAX_N columns does not fit. */
        if (small)
            return tsr_error_set(err, TSR_UNSUPPORTED,
                                 "a row reduction over at most %d rows (one row block)",
                                 TSR_GEMM_NARROW_M);
        if (out->n > TSR_GEMM_ROWS_MAX_N)
            return tsr_error_set(err, TSR_UNSUPPORTED, "a row reduction over more than %d columns",
                                 TSR_GEMM_ROWS_MAX_N);
        const int64_t row_blocks =
            ((int64_t)out->m + TSR_GEMM_BM_PINGPONG - 1) / TSR_GEMM_BM_PINGPONG;
        out->splits = tsr_gemm_rows_plan(row_blocks, (out->n + TSR_GEMM_BN_PINGPONG - 1) /
                                                         TSR_GEMM_BN_PINGPONG);
        /* M < 2^31: at most 2^25 blocks of at most 8 CTAs. */
        out->grid = (uint32_t)(row_blocks * out->splits);
        out->shared_bytes = TSR_GEMM_SMEM_BYTES_ROWS;
        out->a_box_rows = TSR_GEMM_BM_PINGPONG;
        snprintf(out->entry, sizeof out->entry, "tsr_gemm_%s_%s_rows", kernels_dtype_tag(r->dtype),
                 kernels_dtype_tag(r->out_dtype));
        return TSR_OK;
    }
    if (small) {
        const int rows = tsr_gemm_small_rows(out->m);
        int tn;
        tsr_gemm_small_plan(out->n, out->k, out->gated, &tn, &out->splits);
        const int64_t tiles_n = ((int64_t)out->n + tn - 1) / tn;
        if (tiles_n * out->splits > INT32_MAX)
            return tsr_error_set(err, TSR_UNSUPPORTED, "more than 2^31 - 1 tiles");
        out->grid = (uint32_t)(tiles_n * out->splits);
        out->shared_bytes = TSR_GEMM_SMEM_BYTES_SMALL(rows, out->gated ? 2 * tn : tn);
        out->a_box_rows = (uint32_t)rows;
        snprintf(out->entry, sizeof out->entry, "tsr_gemm_%s_%s_m%d_n%d%s",
                 kernels_dtype_tag(r->dtype), kernels_dtype_tag(r->out_dtype), rows, tn,
                 out->gated ? "_gated" : "");
        return TSR_OK;
    }
    const int pingpong = !out->gated && out->n_ops > 0 && out->residual_input >= 0;
    const int bm = pingpong ? TSR_GEMM_BM_PINGPONG : TSR_GEMM_BM;
    const int bn = out->gated ? TSR_GEMM_BN_GATED : pingpong ? TSR_GEMM_BN_PINGPONG : TSR_GEMM_BN;
    st = kernels_plan_tiles(out, bm, bn, err);
    if (st != TSR_OK)
        return st;
    out->shared_bytes = pingpong ? TSR_GEMM_SMEM_BYTES_PINGPONG : TSR_GEMM_SMEM_BYTES;
    out->a_box_rows = (uint32_t)bm;
    snprintf(out->entry, sizeof out->entry, "tsr_gemm_%s_%s%s", kernels_dtype_tag(r->dtype),
             kernels_dtype_tag(r->out_dtype), out->gated ? "_gated" : (pingpong ? "_pp" : ""));
    return TSR_OK;
}

tsr_status tsrd_gemm80_plan_make(const tsr_region *r, tsrd_gemm_plan *out, tsr_error *err)
{
    tsr_status st = kernels_plan_rules(r, out, err);
    if (st == TSR_OK && out->reduction != TSR_GEMM_REDUCE_NONE)
        st = tsr_error_set(err, TSR_UNSUPPORTED, "has a row reduction");
    if (st == TSR_OK)
        st = kernels_plan_tiles(out, TSR_GEMM80_BM,
                                out->gated ? TSR_GEMM80_BN_GATED : TSR_GEMM80_BN, err);
    if (st != TSR_OK)
        return st;
    out->family = TSRD_GEMM_MMA80;
    out->block = TSR_GEMM80_THREADS;
    out->shared_bytes = TSR_GEMM80_SMEM_BYTES;
    snprintf(out->entry, sizeof out->entry, "tsr_gemm80_%s_%s%s", kernels_dtype_tag(r->dtype),
             kernels_dtype_tag(r->out_dtype), out->gated ? "_gated" : "");
    return TSR_OK;
}

static int kernels_is_mma80(const tsr_candidate *c)
{
    return strcmp(c->name, TSRD_CUDA_GEMM80) == 0 || strcmp(c->name, TSRD_CUDA_SWIGLU80) == 0;
}

tsr_status tsrd_gemm_plan_for(const tsr_candidate *c, const tsr_region *r, tsrd_gemm_plan *out,
                              tsr_error *err)
{
    if (!tsrd_cuda_candidate_is_tier3(c))
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s is not a tier-3 GEMM", c->name);
    return kernels_is_mma80(c) ? tsrd_gemm80_plan_make(r, out, err)
                               : tsrd_gemm_plan_make(r, out, err);
}

static void kernels_tmap(tsrd_tmap_args *t, CUtensorMapDataType dtype, CUdeviceptr address,
                         int rows, int cols, uint32_t box_cols, uint32_t box_rows)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->rank = 2;
    t->address = (void *)(uintptr_t)address;
    t->dims[0] = (cuuint64_t)cols;
    t->dims[1] = (cuuint64_t)rows;
    t->strides[0] = (cuuint64_t)cols * 2;
    t->box[0] = box_cols;
    t->box[1] = box_rows;
    t->element_strides[0] = 1;
    t->element_strides[1] = 1;
    t->interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
    t->swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
    t->l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    t->oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
}

/* Tensor maps and vector loads need 16-byte aligned operands; a pointer that
 * is not is refused rather than faulting. */
static tsr_status kernels_check_aligned(const char *what, const CUdeviceptr *inputs, int n_inputs,
                                        CUdeviceptr output, tsr_error *err)
{
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] % 16 != 0)
            return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                                 "%s launch: input %d is not 16-byte aligned", what, i);
    if (output % 16 != 0)
        return tsr_error_set(err, TSR_BUFFER_MISMATCH,
                             "%s launch: the output is not 16-byte aligned", what);
    return TSR_OK;
}

/* The checks both families' launches make, then the shared kernel parameters. */
static tsr_status kernels_launch_params(const tsrd_gemm_plan *plan, const CUdeviceptr *inputs,
                                        int n_inputs, CUdeviceptr output, tsr_gemm_params *params,
                                        tsr_error *err)
{
    int want = plan->gated ? 3 : 2 + (plan->bias_input >= 0) + (plan->residual_input >= 0);
    if (n_inputs != want)
        return tsr_error_set(err, TSR_INTERNAL, "gemm launch: %d inputs, expected %d", n_inputs,
                             want);
    tsr_status st = kernels_check_aligned("gemm", inputs, n_inputs, output, err);
    if (st != TSR_OK)
        return st;
    memset(params, 0, sizeof *params);
    params->m = plan->m;
    params->n = plan->n;
    params->k = plan->k;
    params->n_ops = plan->n_ops;
    memcpy(params->ops, plan->ops, sizeof params->ops);
    params->gate_act = plan->gate_act;
    params->reduction = plan->reduction;
    params->eps = plan->eps;
    params->bias = plan->bias_input >= 0 ? (const void *)(uintptr_t)inputs[plan->bias_input] : NULL;
    params->residual =
        plan->residual_input >= 0 ? (const void *)(uintptr_t)inputs[plan->residual_input] : NULL;
    params->out = (void *)(uintptr_t)output;
    return TSR_OK;
}

tsr_status tsrd_gemm_launch_args(const tsrd_gemm_plan *plan, const CUdeviceptr *inputs,
                                 int n_inputs, CUdeviceptr output, tsrd_tmap_args maps[3],
                                 tsr_gemm_params *params, tsr_error *err)
{
    tsr_status st = kernels_launch_params(plan, inputs, n_inputs, output, params, err);
    if (st != TSR_OK)
        return st;
    /* A (M,K) is K-contiguous: dims {K, M}, boxes of 64 x a_box_rows (128; 64
     * for the ping-pong kernels; 16, 32 or 64 for the small-M ones). B (K,N) is N-contiguous: dims
     * {N, K}, 64 x 64 boxes (the kernel loads two to four per stage). */
    kernels_tmap(&maps[0], plan->map_dtype, inputs[0], plan->m, plan->k, TSR_GEMM_BK,
                 plan->a_box_rows);
    kernels_tmap(&maps[1], plan->map_dtype, inputs[1], plan->k, plan->n, 64, TSR_GEMM_BK);
    kernels_tmap(&maps[2], plan->map_dtype, plan->gated ? inputs[2] : inputs[1], plan->k, plan->n,
                 64, TSR_GEMM_BK);
    /* MN-major B tiles: 64-column chunks of 64 K rows x 128 bytes lie 8 KiB
     * apart; groups of 8 K rows are 1 KiB apart (128-byte swizzle). */
    params->b_lbo = 8192;
    params->b_sbo = 1024;
    return TSR_OK;
}

tsr_status tsrd_gemm80_launch_args(const tsrd_gemm_plan *plan, const CUdeviceptr *inputs,
                                   int n_inputs, CUdeviceptr output, CUdeviceptr operands[3],
                                   tsr_gemm_params *params, tsr_error *err)
{
    tsr_status st = kernels_launch_params(plan, inputs, n_inputs, output, params, err);
    if (st != TSR_OK)
        return st;
    operands[0] = inputs[0];
    operands[1] = inputs[1];
    operands[2] = plan->gated ? inputs[2] : inputs[1];
    return TSR_OK;
}

/* ---- tier-3 attention plan ---- */

tsr_status tsrd_attn_plan_make(const tsr_region *r, tsrd_attn_plan *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    if (r->kind != TSR_KIND_ATTENTION)
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s regions are not attention",
                             tsr_region_kind_name(r->kind));
    const tsr_attention_desc *d = &r->u.attention;
    if (r->dtype != TSR_BF16 && r->dtype != TSR_F16)
        return tsr_error_set(err, TSR_UNSUPPORTED, "dtype %s (needs bf16 or f16)",
                             tsr_dtype_name(r->dtype));
    if (d->head_dim_v != d->head_dim)
        return tsr_error_set(err, TSR_UNSUPPORTED, "head_dim_v %lld differs from head_dim %lld",
                             (long long)d->head_dim_v, (long long)d->head_dim);
    if (d->head_dim != 64 && d->head_dim != 128)
        return tsr_error_set(err, TSR_UNSUPPORTED, "head_dim %lld (serves 64 and 128)",
                             (long long)d->head_dim);
    /* Tensor-map coordinates and the grid are 32-bit; y and z stop at 65535. */
    int64_t group = d->heads / d->heads_kv;
    if (d->batch * d->heads * d->seq_q > INT32_MAX || d->batch * d->heads_kv > INT32_MAX ||
        d->seq_k > INT32_MAX)
        return tsr_error_set(err, TSR_UNSUPPORTED, "more than 2^31 - 1 rows of Q, K or V");
    if (d->heads_kv > 65535 || d->batch > 65535)
        return tsr_error_set(err, TSR_UNSUPPORTED, "batch or heads_kv past 65535");
    double scale_log2 = d->scale * 1.4426950408889634;
    if (!(fabs(scale_log2) <= FLT_MAX))
        return tsr_error_set(err, TSR_UNSUPPORTED, "scale %g out of f32 range", d->scale);
    out->batch = (int)d->batch;
    out->heads = (int)d->heads;
    out->heads_kv = (int)d->heads_kv;
    out->seq_q = (int)d->seq_q;
    out->seq_k = (int)d->seq_k;
    out->head_dim = (int)d->head_dim;
    out->causal = d->causal;
    out->scale_log2 = (float)scale_log2;
    const int64_t row_tiles = (group * d->seq_q + TSR_ATTN_BM - 1) / TSR_ATTN_BM;
    /* Split the keys where the grid would leave multiprocessors idle (a decode
     * step of a small batch), into as many shares as keep the CTAs within two
     * per multiprocessor and two key tiles or more each (measured on the H200:
     * batch 4 of a B·32-head decode at seq_k 8192 runs 0.058 ms in 8 shares,
     * 0.066 in 4, 0.109 unsplit; batch 16 is faster unsplit); the split entries
     * exist for the input dtype out only. */
    const int64_t ctas = row_tiles * d->heads_kv * d->batch;
    const int64_t key_tiles = (d->seq_k + TSR_ATTN_BN - 1) / TSR_ATTN_BN;
    out->splits = 1;
    if (r->out_dtype == r->dtype) {
        if (ctas * 8 <= 2 * TSR_ATTN_SPLIT_SMS && key_tiles >= 16)
            out->splits = 8;
        else if (ctas * 4 <= 2 * TSR_ATTN_SPLIT_SMS && key_tiles >= 8)
            out->splits = 4;
    }
    out->grid[0] = (uint32_t)(row_tiles * out->splits);
    out->grid[1] = (uint32_t)d->heads_kv;
    out->grid[2] = (uint32_t)d->batch;
    out->block = TSR_ATTN_THREADS;
    out->shared_bytes = TSR_ATTN_SMEM_BYTES(out->head_dim);
    out->map_dtype =
        r->dtype == TSR_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    int n = snprintf(out->entry, sizeof out->entry, "tsr_attn_%s_%s_d%d",
                     kernels_dtype_tag(r->dtype), kernels_dtype_tag(r->out_dtype), out->head_dim);
    if (out->splits > 1)
        snprintf(out->entry + n, sizeof out->entry - (size_t)n, "_s%d", out->splits);
    return TSR_OK;
}

tsr_status tsrd_attn_launch_args(const tsrd_attn_plan *plan, const CUdeviceptr *inputs,
                                 int n_inputs, CUdeviceptr output, tsrd_tmap_args maps[3],
                                 tsr_attn_params *params, tsr_error *err)
{
    if (n_inputs != 3)
        return tsr_error_set(err, TSR_INTERNAL, "attention launch: %d inputs, expected 3",
                             n_inputs);
    tsr_status st = kernels_check_aligned("attention", inputs, n_inputs, output, err);
    if (st != TSR_OK)
        return st;
    cuuint64_t d = (cuuint64_t)plan->head_dim;
    /* Q: {D, B·H·seq_q}; K and V: {D, seq_k, B·Hkv}, so that a K or V box
     * never reaches into the next head: rows past seq_k read as zeros. */
    kernels_tmap(&maps[0], plan->map_dtype, inputs[0], plan->batch * plan->heads * plan->seq_q,
                 plan->head_dim, 64, TSR_ATTN_BM);
    for (int i = 1; i < 3; i++) {
        kernels_tmap(&maps[i], plan->map_dtype, inputs[i], plan->seq_k, plan->head_dim, 64,
                     TSR_ATTN_BN);
        maps[i].rank = 3;
        maps[i].dims[2] = (cuuint64_t)plan->batch * (cuuint64_t)plan->heads_kv;
        maps[i].strides[1] = (cuuint64_t)plan->seq_k * d * 2;
        maps[i].box[2] = 1;
        maps[i].element_strides[2] = 1;
    }
    memset(params, 0, sizeof *params);
    params->seq_q = plan->seq_q;
    params->seq_k = plan->seq_k;
    params->heads = plan->heads;
    params->heads_kv = plan->heads_kv;
    params->causal = plan->causal;
    params->scale_log2 = plan->scale_log2;
    params->out = (void *)(uintptr_t)output;
    return TSR_OK;
}

/* ---- candidates ---- */

static bool kernels_tier1_applies(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                  char *why, size_t why_len)
{
    (void)c;
    (void)r;
    if (tsrd_nvrtc_arch_valid(arch))
        return true;
    snprintf(why, why_len, "arch '%s' is not a CUDA architecture", arch);
    return false;
}

/* The build embedded an image of image_len bytes; why says so otherwise. */
static bool kernels_image_embedded(size_t image_len, char *why, size_t why_len)
{
    if (image_len == 0)
        snprintf(why, why_len, "this tesserad was built without nvcc (no tier-3 kernels)");
    return image_len > 0;
}

/* The checks of the Hopper images: arch sm_90a, and the image embedded. */
static bool kernels_sm90a_image(const char *arch, size_t image_len, char *why, size_t why_len)
{
    if (strcmp(arch, TSRD_CUDA_TIER3_ARCH) != 0) {
        snprintf(why, why_len, "built for %s only, not %s", TSRD_CUDA_TIER3_ARCH, arch);
        return false;
    }
    return kernels_image_embedded(image_len, why, why_len);
}

/* Past the arch and image checks, a GEMM family applies when its plan accepts
 * r; why is then the rule r breaks. */
static bool kernels_gemm_applies(tsr_status (*plan_make)(const tsr_region *, tsrd_gemm_plan *,
                                                         tsr_error *),
                                 const tsr_region *r, char *why, size_t why_len)
{
    tsrd_gemm_plan plan;
    tsr_error err;
    if (plan_make(r, &plan, &err) != TSR_OK) {
        snprintf(why, why_len, "%s", err.message);
        return false;
    }
    return true;
}

static bool kernels_tier3_applies(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                  char *why, size_t why_len)
{
    (void)c;
    return kernels_sm90a_image(arch, tsrd_gemm_sm90_cubin_len, why, why_len) &&
           kernels_gemm_applies(tsrd_gemm_plan_make, r, why, why_len);
}

/* sm_80 .. sm_89 run the image's sm_80 code, Hopper its sm_90 code. */
static bool kernels_mma80_arch(const char *arch)
{
    if (strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0)
        return true;
    return strncmp(arch, "sm_8", 4) == 0 && arch[4] >= '0' && arch[4] <= '9' && arch[5] == '\0';
}

static bool kernels_mma80_applies(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                  char *why, size_t why_len)
{
    (void)c;
    if (!kernels_mma80_arch(arch)) {
        snprintf(why, why_len, "built for sm_80 .. sm_89 and sm_90, not %s", arch);
        return false;
    }
    return kernels_image_embedded(tsrd_gemm_sm80_image_len, why, why_len) &&
           kernels_gemm_applies(tsrd_gemm80_plan_make, r, why, why_len);
}

static bool kernels_attn_applies(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 char *why, size_t why_len)
{
    (void)c;
    if (!kernels_sm90a_image(arch, tsrd_attn_sm90_cubin_len, why, why_len))
        return false;
    tsrd_attn_plan plan;
    tsr_error err;
    if (tsrd_attn_plan_make(r, &plan, &err) != TSR_OK) {
        snprintf(why, why_len, "%s", err.message);
        return false;
    }
    return true;
}

/* ---- variants: what one binary serves ---- */

static bool kernels_rows_kind(const tsr_region *r)
{
    return r->kind == TSR_KIND_MATMUL || r->kind == TSR_KIND_FUSED || r->kind == TSR_KIND_GATED;
}

/* The reference, and Tier-1's matmul, fused and gated kernels (M),
 * attention kernels (batch, seq_q, seq_k) and pointwise kernels (the whole
 * shape), take these dimensions at run time: their tiles and code do not
 * depend on them. A pointwise kernel's code does depend on which dimensions
 * broadcast, which is its class. */
static void kernels_run_time_dims_variant(const tsr_candidate *c, const tsr_region *r,
                                          const char *arch, tsr_variant *out)
{
    (void)c, (void)arch;
    memset(out, 0, sizeof *out);
    if (kernels_rows_kind(r)) {
        out->free_dims = TSR_VARIANT_ROWS;
    } else if (r->kind == TSR_KIND_ATTENTION) {
        out->free_dims = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
    } else if (r->kind == TSR_KIND_POINTWISE) {
        out->free_dims = TSR_VARIANT_SHAPE;
        tsr_codegen_pointwise_class(r, out->cls);
    }
}

/* The tier-3 GEMMs read M, N and K from their parameter block and tensor
 * maps; the entry (its tile configuration, the small-M kernels by their
 * wgmma N for at most TSR_GEMM_NARROW_M rows, ping-pong for ops with a
 * residual) depends on M, so it is the variant's class, with the row
 * kernels' cluster size. */
static void kernels_gemm_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 tsr_variant *out)
{
    (void)arch;
    memset(out, 0, sizeof *out);
    tsrd_gemm_plan plan;
    if (tsrd_gemm_plan_for(c, r, &plan, NULL) != TSR_OK)
        return;
    out->free_dims = TSR_VARIANT_ROWS;
    /* The row kernels' cluster size follows M: another size shares the
     * cluster's statistics differently, so it is another variant. */
    if (plan.reduction != TSR_GEMM_REDUCE_NONE)
        snprintf(out->cls, sizeof out->cls, "%.48s_s%d", plan.entry, plan.splits);
    else
        snprintf(out->cls, sizeof out->cls, "%s", plan.entry);
}

/* The attention kernel reads batch and both lengths from its parameters and
 * tensor maps; its entry (dtypes, head dim) is the class. */
static void kernels_attn_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 tsr_variant *out)
{
    (void)c, (void)arch;
    memset(out, 0, sizeof *out);
    tsrd_attn_plan plan;
    if (tsrd_attn_plan_make(r, &plan, NULL) != TSR_OK)
        return;
    out->free_dims = TSR_VARIANT_BATCH | TSR_VARIANT_SEQ_Q | TSR_VARIANT_SEQ_K;
    snprintf(out->cls, sizeof out->cls, "%s", plan.entry);
}

#define KERNELS_ALL_KINDS ((1u << TSR_KIND_COUNT) - 1)
#define KERNELS_GEMM_KINDS (1u << TSR_KIND_MATMUL | 1u << TSR_KIND_FUSED)
#define KERNELS_GATED_KINDS (1u << TSR_KIND_GATED)
#define KERNELS_ATTENTION_KINDS (1u << TSR_KIND_ATTENTION)

/* What tells one candidate from another; the rest of a tsr_candidate is 0. */
typedef struct kernels_candidate_row {
    const char *name;
    int tier;
    uint32_t version;
    unsigned kinds;
    bool (*applies)(const tsr_candidate *c, const tsr_region *r, const char *arch, char *why,
                    size_t why_len);
    /* test_fault: forced only, and left to the backend to register (with
     * test_faults) rather than to tsrd_cuda_register_candidates. */
    bool test_only;
    /* The output tile edge, whose boundaries sampled verification checks
     * (0: the oracle's 128): Tier-1's 64 x 64 tiles, the wgmma kernels' 128
     * rows (and 256 or 2 x 128 columns; the ping-pong kernels' 64-row tiles
     * pair up inside them), mma80's 128 x 128, 64 columns
     * of both products for its gated kernels, and attention's 128 query rows. */
    int tile;
    /* The kernel variant (arbiter.h); NULL: built per shape. */
    void (*variant)(const tsr_candidate *c, const tsr_region *r, const char *arch,
                    tsr_variant *out);
} kernels_candidate_row;

/* In registration order, which breaks tier ties: the mma80 pair follows the
 * wgmma pair so that Hopper picks the latter. Name and version enter every
 * kernel cache key. */
static const kernels_candidate_row kernels_candidates[] = {
    {TSRD_CUDA_REFERENCE, 0, TSRD_CUDA_REFERENCE_VERSION, KERNELS_ALL_KINDS, NULL, false, 0,
     kernels_run_time_dims_variant},
    {TSRD_CUDA_TIER1, 1, TSRD_CUDA_TIER1_VERSION, KERNELS_ALL_KINDS, kernels_tier1_applies, false,
     64, kernels_run_time_dims_variant},
    {TSRD_CUDA_GEMM, 3, TSRD_CUDA_TIER3_VERSION, KERNELS_GEMM_KINDS, kernels_tier3_applies, false,
     128, kernels_gemm_variant},
    {TSRD_CUDA_SWIGLU, 3, TSRD_CUDA_TIER3_VERSION, KERNELS_GATED_KINDS, kernels_tier3_applies,
     false, 128, kernels_gemm_variant},
    {TSRD_CUDA_GEMM80, 3, TSRD_CUDA_MMA80_VERSION, KERNELS_GEMM_KINDS, kernels_mma80_applies, false,
     128, kernels_gemm_variant},
    {TSRD_CUDA_SWIGLU80, 3, TSRD_CUDA_MMA80_VERSION, KERNELS_GATED_KINDS, kernels_mma80_applies,
     false, 64, kernels_gemm_variant},
    {TSRD_CUDA_ATTN, 3, TSRD_CUDA_ATTN_VERSION, KERNELS_ATTENTION_KINDS, kernels_attn_applies,
     false, TSR_ATTN_BM, kernels_attn_variant},
    {TSRD_CUDA_TEST_FAULT, 1, TSRD_CUDA_TEST_FAULT_VERSION, KERNELS_ALL_KINDS, NULL, true, 0, NULL},
};
#define KERNELS_N_CANDIDATES (sizeof kernels_candidates / sizeof kernels_candidates[0])

static void kernels_candidate_fill(const kernels_candidate_row *row, tsr_candidate *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", row->name);
    out->tier = row->tier;
    out->version = row->version;
    out->kinds = row->kinds;
    out->applies = row->applies;
    out->forced_only = row->test_only;
    out->tile = row->tile;
    out->variant = row->variant;
}

static const kernels_candidate_row *kernels_candidate_find(const char *name)
{
    for (size_t i = 0; i < KERNELS_N_CANDIDATES; i++)
        if (strcmp(kernels_candidates[i].name, name) == 0)
            return &kernels_candidates[i];
    return NULL;
}

bool tsrd_cuda_candidate(const char *name, tsr_candidate *out)
{
    const kernels_candidate_row *row = kernels_candidate_find(name);
    if (row == NULL) {
        memset(out, 0, sizeof *out);
        return false;
    }
    kernels_candidate_fill(row, out);
    return true;
}

void tsrd_cuda_candidate_tier1(tsr_candidate *out)
{
    tsrd_cuda_candidate(TSRD_CUDA_TIER1, out);
}

void tsrd_cuda_candidate_gemm(tsr_candidate *out)
{
    tsrd_cuda_candidate(TSRD_CUDA_GEMM, out);
}

void tsrd_cuda_candidate_swiglu(tsr_candidate *out)
{
    tsrd_cuda_candidate(TSRD_CUDA_SWIGLU, out);
}

void tsrd_cuda_candidate_test_fault(tsr_candidate *out)
{
    tsrd_cuda_candidate(TSRD_CUDA_TEST_FAULT, out);
}

int tsrd_cuda_candidate_is_tier3(const tsr_candidate *c)
{
    return strcmp(c->name, TSRD_CUDA_GEMM) == 0 || strcmp(c->name, TSRD_CUDA_SWIGLU) == 0 ||
           kernels_is_mma80(c);
}

int tsrd_cuda_candidate_is_attention(const tsr_candidate *c)
{
    return strcmp(c->name, TSRD_CUDA_ATTN) == 0;
}

tsr_status tsrd_cuda_register_candidates(tsr_arbiter *arbiter, tsr_error *err)
{
    tsr_status st = TSR_OK;
    for (size_t i = 0; i < KERNELS_N_CANDIDATES && st == TSR_OK; i++) {
        if (kernels_candidates[i].test_only)
            continue;
        tsr_candidate c;
        kernels_candidate_fill(&kernels_candidates[i], &c);
        st = tsr_arbiter_register(arbiter, &c, err);
    }
    return st;
}

/* ---- compile ---- */

static tsr_status kernels_compile_tier1(const tsrd_nvrtc *nv, int sm_count, const tsr_region *r,
                                        const tsr_variant *variant, const tsr_fingerprint *fp,
                                        const char *arch, uint8_t **bin, size_t *len,
                                        tsr_error *err)
{
    if (nv == NULL)
        return tsr_error_set(err, TSR_UNSUPPORTED, "tier1: NVRTC is not available");
    tsr_codegen_target target = {
        .arch = arch, .sm_count = sm_count, .free_dims = variant->free_dims};
    tsr_codegen_kernel kernel;
    tsr_status st = tsr_codegen_emit(r, &target, &kernel, err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "tier1: codegen");
    uint8_t *cubin = NULL;
    size_t cubin_len = 0;
    st = tsrd_nvrtc_compile(nv, kernel.source, "tier1.cu", arch, &cubin, &cubin_len, NULL, err);
    if (st == TSR_OK) {
        tsrd_cuda_launch_desc desc = {.image = TSRD_CUDA_IMAGE_CUBIN,
                                      .shared_bytes = kernel.launch.shared_bytes,
                                      .n_params = kernel.launch.n_params,
                                      .region = *fp};
        snprintf(desc.entry, sizeof desc.entry, "%s", kernel.launch.entry);
        memcpy(desc.grid, kernel.launch.grid, sizeof desc.grid);
        memcpy(desc.block, kernel.launch.block, sizeof desc.block);
        st = tsrd_cuda_blob_encode(&desc, cubin, cubin_len, bin, len, err);
    } else {
        tsr_error_prefix(err, "tier1");
    }
    free(cubin);
    tsr_codegen_kernel_free(&kernel);
    return st;
}

/* The reference's blob: the region's JSON form, which the launch runs on the
 * host. */
static tsr_status kernels_compile_reference(const tsr_region *r, const tsr_fingerprint *fp,
                                            uint8_t **bin, size_t *len, tsr_error *err)
{
    char *json = NULL;
    tsr_status st = tsr_region_to_json(r, 0, &json, err);
    if (st != TSR_OK)
        return tsr_error_prefix(err, "%s", TSRD_CUDA_REFERENCE);
    tsr_tensor_desc inputs[TSR_MAX_REGION_INPUTS], output;
    tsrd_cuda_launch_desc desc = {.image = TSRD_CUDA_IMAGE_REFERENCE,
                                  .grid = {1, 1, 1},
                                  .block = {1, 1, 1},
                                  .n_params = tsr_region_signature(r, inputs, &output) + 1,
                                  .region = *fp};
    snprintf(desc.entry, sizeof desc.entry, "tsr_reference");
    st = tsrd_cuda_blob_encode(&desc, (const uint8_t *)json, strlen(json), bin, len, err);
    free(json);
    return st;
}

/* The test_fault kernel: the region's parameters (so that launches pass the
 * usual checks) and one store through an index no allocation reaches. */
static tsr_status kernels_compile_test_fault(const tsrd_nvrtc *nv, const tsr_region *r,
                                             const tsr_fingerprint *fp, const char *arch,
                                             uint8_t **bin, size_t *len, tsr_error *err)
{
    if (nv == NULL)
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s: NVRTC is not available",
                             TSRD_CUDA_TEST_FAULT);
    tsr_tensor_desc inputs[TSR_MAX_REGION_INPUTS], output;
    int n_params = tsr_region_signature(r, inputs, &output) + 1;
    char source[1024];
    int at = snprintf(source, sizeof source, "extern \"C\" __global__ void tsr_test_fault(");
    for (int i = 0; i < n_params; i++)
        at += snprintf(source + at, sizeof source - (size_t)at, "%sfloat *p%d", i ? ", " : "", i);
    snprintf(source + at, sizeof source - (size_t)at,
             ")\n{\n"
             "    /* 2^40 elements past the output: no allocation is there. */\n"
             "    if (blockIdx.x == 0 && threadIdx.x == 0)\n"
             "        ((volatile float *)p%d)[1ull << 40] = 1.0f;\n"
             "}\n",
             n_params - 1);
    uint8_t *cubin = NULL;
    size_t cubin_len = 0;
    tsr_status st =
        tsrd_nvrtc_compile(nv, source, "test_fault.cu", arch, &cubin, &cubin_len, NULL, err);
    if (st == TSR_OK) {
        tsrd_cuda_launch_desc desc = {.image = TSRD_CUDA_IMAGE_CUBIN,
                                      .grid = {1, 1, 1},
                                      .block = {32, 1, 1},
                                      .n_params = n_params,
                                      .region = *fp};
        snprintf(desc.entry, sizeof desc.entry, "tsr_test_fault");
        st = tsrd_cuda_blob_encode(&desc, cubin, cubin_len, bin, len, err);
    } else {
        tsr_error_prefix(err, "%s", TSRD_CUDA_TEST_FAULT);
    }
    free(cubin);
    return st;
}

/* A tier-3 blob: the embedded entry and its launch geometry, no payload (the
 * kernels take three operands and a parameter block). */
static tsr_status kernels_embedded_blob(const char *entry, const uint32_t grid[3], uint32_t block,
                                        uint32_t shared_bytes, const tsr_fingerprint *fp,
                                        uint8_t **bin, size_t *len, tsr_error *err)
{
    tsrd_cuda_launch_desc desc = {.image = TSRD_CUDA_IMAGE_EMBEDDED,
                                  .grid = {grid[0], grid[1], grid[2]},
                                  .block = {block, 1, 1},
                                  .shared_bytes = shared_bytes,
                                  .n_params = 4,
                                  .region = *fp};
    snprintf(desc.entry, sizeof desc.entry, "%s", entry);
    return tsrd_cuda_blob_encode(&desc, NULL, 0, bin, len, err);
}

tsr_status tsrd_cuda_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                             tsr_variant *v, tsr_fingerprint *fp, tsr_error *err)
{
    /* The table's callback, which c (perhaps a caller's copy) need not carry. */
    const kernels_candidate_row *row = kernels_candidate_find(c->name);
    tsr_candidate own = *c;
    own.variant = row != NULL ? row->variant : NULL;
    return tsr_candidate_variant(&own, r, arch, v, fp, err);
}

tsr_status tsrd_cuda_compile(const tsrd_nvrtc *nv, int sm_count, const tsr_region *r,
                             const tsr_candidate *c, const char *arch, uint8_t **bin, size_t *len,
                             tsr_error *err)
{
    char why[160] = "";
    tsr_fingerprint fp;
    tsr_variant variant;
    tsr_status st = tsrd_cuda_variant(c, r, arch, &variant, &fp, err);
    if (st != TSR_OK)
        return st;
    if (strcmp(c->name, TSRD_CUDA_TEST_FAULT) == 0)
        return kernels_compile_test_fault(nv, r, &fp, arch, bin, len, err);
    if (strcmp(c->name, TSRD_CUDA_REFERENCE) == 0)
        return kernels_compile_reference(r, &fp, bin, len, err);
    if (strcmp(c->name, TSRD_CUDA_TIER1) == 0) {
        if (!kernels_tier1_applies(c, r, arch, why, sizeof why))
            return tsr_error_set(err, TSR_UNSUPPORTED, "tier1: %s", why);
        return kernels_compile_tier1(nv, sm_count, r, &variant, &fp, arch, bin, len, err);
    }
    if (!tsrd_cuda_candidate_is_tier3(c) && !tsrd_cuda_candidate_is_attention(c))
        return tsr_error_set(err, TSR_UNSUPPORTED, "cuda backend: no candidate '%s'", c->name);
    if ((c->kinds & (1u << r->kind)) == 0)
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s: does not serve %s regions", c->name,
                             tsr_region_kind_name(r->kind));
    /* The table's predicate, which c (perhaps a caller's copy) need not carry. */
    if (!kernels_candidate_find(c->name)->applies(c, r, arch, why, sizeof why))
        return tsr_error_set(err, TSR_UNSUPPORTED, "%s: %s", c->name, why);
    if (tsrd_cuda_candidate_is_attention(c)) {
        tsrd_attn_plan plan;
        st = tsrd_attn_plan_make(r, &plan, err);
        return st != TSR_OK ? st
                            : kernels_embedded_blob(plan.entry, plan.grid, plan.block,
                                                    plan.shared_bytes, &fp, bin, len, err);
    }
    tsrd_gemm_plan plan;
    st = tsrd_gemm_plan_for(c, r, &plan, err);
    const uint32_t grid[3] = {plan.grid, 1, 1};
    return st != TSR_OK ? st
                        : kernels_embedded_blob(plan.entry, grid, plan.block, plan.shared_bytes,
                                                &fp, bin, len, err);
}
