/*
 * codegen_matmul.c — the Tier-1 kernels of matmul, fused and gated regions.
 *
 * All three share one tiled shared-memory main loop (tsr_mainloop): a block of
 * 256 threads owns a BM x BN tile of the output, walks K in steps of BK = 16
 * staging an A tile (stored transposed, padded to BM + 1 so the transposing
 * stores do not collide in a bank) and a B tile in shared memory, and each
 * thread accumulates a TM x TN micro-tile in registers with fmaf. A thread's
 * micro-tile is strided (rows ty + TY*i, columns tx + TX*j) so that shared reads
 * are broadcasts or conflict-free and global stores are coalesced. Ragged M, N
 * and K edges are zero-filled on load and masked on store. A fused prologue runs
 * on each in-range A element as it is staged (out-of-range elements stay 0, so a
 * prologue like exp cannot leak into the sum); gated stages Wg and Wu tiles next
 * to each other and shares the A tile between both products.
 *
 * Without a row reduction the tile is 64 x 64 (4 x 4 per thread) and blocks
 * cover the output one tile each. A row reduction (rmsnorm, softmax,
 * layer_norm) needs whole rows, so there a block owns 16 full rows: tiles of
 * 16 x 128 (2 x 4 per thread) are swept across N twice. The first sweep computes
 * the epilogue values and folds them into per-row statistics (sum of squares;
 * online max and sum of exponentials; Chan's mean / M2 merge), the second sweep
 * recomputes the same values and writes them normalized. Recomputing doubles the
 * arithmetic but needs no workspace and keeps everything in f32 before the
 * single rounding on store. A row's 128 columns of a tile belong to one warp
 * (TX = 32), so the row statistics are warp shuffles.
 */
#include "codegen_emit.h"
#include "codegen_internal.h"

#include <stdio.h>

typedef struct mm_shape {
    int64_t m, n, k;
    bool gated, has_bias, has_residual;
    tsr_reduction reduction;
    int bm, bn, bk, tm, tn;
} mm_shape;

enum { MM_THREADS = 256 };

static void mm_shape_of(const tsr_region *r, mm_shape *s)
{
    *s = (mm_shape){.reduction = TSR_REDUCTION_NONE};
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        s->m = r->u.matmul.m, s->n = r->u.matmul.n, s->k = r->u.matmul.k;
        break;
    case TSR_KIND_FUSED:
        s->m = r->u.fused.m, s->n = r->u.fused.n, s->k = r->u.fused.k;
        for (int i = 0; i < r->u.fused.n_epilogue; i++)
            s->has_bias |= r->u.fused.epilogue[i] == TSR_OP_BIAS;
        s->has_residual = r->u.fused.residual;
        s->reduction = r->u.fused.reduction;
        break;
    default: /* gated */
        s->m = r->u.gated.m, s->n = r->u.gated.h, s->k = r->u.gated.k;
        s->gated = true;
        break;
    }
    if (s->reduction == TSR_REDUCTION_NONE) {
        s->bm = 64, s->bn = 64, s->bk = 16, s->tm = 4, s->tn = 4;
    } else {
        s->bm = 16, s->bn = 128, s->bk = 16, s->tm = 2, s->tn = 4;
    }
}

static void mm_emit_constants(tsri_cg_buf *b, const mm_shape *s, bool rows_free)
{
    if (rows_free)
        tsri_cg_puts(b, "/* M is a kernel parameter: one binary serves every M. */\n"
                        "#define TSR_M tsr_m\n"
                        "#define TSR_M_PARAM , const long long tsr_m\n"
                        "#define TSR_M_ARG , tsr_m\n");
    else
        tsri_cg_printf(b, "#define TSR_M %lldLL\n#define TSR_M_PARAM\n#define TSR_M_ARG\n",
                       (long long)s->m);
    tsri_cg_printf(b,
                   "#define TSR_N %lldLL\n#define TSR_K %lldLL\n"
                   "#define TSR_BM %d\n#define TSR_BN %d\n#define TSR_BK %d\n"
                   "#define TSR_TM %d\n#define TSR_TN %d\n",
                   (long long)s->n, (long long)s->k, s->bm, s->bn, s->bk, s->tm, s->tn);
    tsri_cg_puts(b, "#define TSR_TX (TSR_BN / TSR_TN) /* threads along a tile row */\n"
                    "#define TSR_TY (TSR_BM / TSR_TM) /* threads along a tile column */\n"
                    "#define TSR_THREADS (TSR_TX * TSR_TY)\n"
                    "#define TSR_TILES_N ((TSR_N + TSR_BN - 1) / TSR_BN)\n"
                    "#define TSR_NEG_INF __uint_as_float(0xff800000u)\n\n");
}

static void mm_emit_chain(tsri_cg_buf *b, const char *name, const tsr_op *ops, int n_ops,
                          bool with_bias)
{
    tsri_cg_printf(b, "__device__ __forceinline__ float %s(float x%s)\n{\n", name,
                   with_bias ? ", float bias" : "");
    for (int i = 0; i < n_ops; i++) {
        tsri_cg_puts(b, "    x = ");
        tsri_cg_op_expr(b, ops[i], NULL, "x", "bias");
        tsri_cg_printf(b, "; /* %s */\n", tsr_op_name(ops[i]));
    }
    if (with_bias)
        tsri_cg_puts(b, "    (void)bias;\n");
    tsri_cg_puts(b, "    return x;\n}\n");
}

static void mm_emit_functions(tsri_cg_buf *b, const tsr_region *r, const mm_shape *s)
{
    if (r->kind == TSR_KIND_FUSED) {
        const tsr_fused_desc *f = &r->u.fused;
        tsri_cg_puts(b, "/* Prologue, on each element of A as it is staged. */\n");
        mm_emit_chain(b, "tsr_prologue", f->prologue, f->n_prologue, false);
        tsri_cg_puts(b, "/* Epilogue chain; bias is the bias element of the column. */\n");
        mm_emit_chain(b, "tsr_epilogue", f->epilogue, f->n_epilogue, true);
    } else {
        mm_emit_chain(b, "tsr_prologue", NULL, 0, false);
    }
    if (s->gated) {
        tsri_cg_puts(b, "/* Gate activation. */\n");
        mm_emit_chain(b, "tsr_gate", &r->u.gated.gate_act, 1, false);
    }
    if (s->reduction != TSR_REDUCTION_NONE) {
        char eps[32];
        tsri_cg_printf(b, "#define TSR_EPS %s\n", tsri_cg_float(eps, r->u.fused.eps));
        tsri_cg_puts(b, "static_assert(TSR_TX == 32, \"a tile row must be one warp\");\n"
                        "__device__ __forceinline__ float tsr_warp_sum(float x)\n{\n"
                        "#pragma unroll\n"
                        "    for (int o = 16; o > 0; o >>= 1)\n"
                        "        x += __shfl_xor_sync(0xffffffffu, x, o);\n"
                        "    return x;\n}\n"
                        "__device__ __forceinline__ float tsr_warp_max(float x)\n{\n"
                        "#pragma unroll\n"
                        "    for (int o = 16; o > 0; o >>= 1)\n"
                        "        x = tsr_maximum(x, __shfl_xor_sync(0xffffffffu, x, o));\n"
                        "    return x;\n}\n");
    }
    tsri_cg_puts(b, "\n");
}

static void mm_emit_mainloop(tsri_cg_buf *b, const mm_shape *s)
{
    const bool g = s->gated;
    tsri_cg_printf(
        b,
        "/* acc (and accu) = the tile of A @ B (and A @ U) at (m0, n0), over all of K. */\n"
        "__device__ __forceinline__ void tsr_mainloop(const tsr_in_t *__restrict__ A,\n"
        "    const tsr_in_t *__restrict__ B,%s long long m0, long long n0,\n"
        "    float (*As)[TSR_BM + 1], float (*Bs)[TSR_BN],%s\n"
        "    float (&acc)[TSR_TM][TSR_TN]%s TSR_M_PARAM)\n"
        "{\n"
        "    const int tid = threadIdx.x, tx = tid %% TSR_TX, ty = tid / TSR_TX;\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < TSR_TM; i++)\n"
        "#pragma unroll\n"
        "        for (int j = 0; j < TSR_TN; j++)\n"
        "            acc[i][j] = 0.0f;\n",
        g ? " const tsr_in_t *__restrict__ U," : "", g ? " float (*Us)[TSR_BN]," : "",
        g ? ", float (&accu)[TSR_TM][TSR_TN]" : "");
    if (g)
        tsri_cg_puts(b, "#pragma unroll\n"
                        "    for (int i = 0; i < TSR_TM; i++)\n"
                        "#pragma unroll\n"
                        "        for (int j = 0; j < TSR_TN; j++)\n"
                        "            accu[i][j] = 0.0f;\n");
    tsri_cg_printf(b,
                   "    for (long long k0 = 0; k0 < TSR_K; k0 += TSR_BK) {\n"
                   "        for (int e = tid; e < TSR_BM * TSR_BK; e += TSR_THREADS) {\n"
                   "            const int r = e / TSR_BK, c = e %% TSR_BK;\n"
                   "            const long long gm = m0 + r, gk = k0 + c;\n"
                   "            As[c][r] = (gm < TSR_M && gk < TSR_K)\n"
                   "                           ? tsr_prologue(tsr_load(A, gm * TSR_K + gk))\n"
                   "                           : 0.0f;\n"
                   "        }\n"
                   "        for (int e = tid; e < TSR_BK * TSR_BN; e += TSR_THREADS) {\n"
                   "            const int r = e / TSR_BN, c = e %% TSR_BN;\n"
                   "            const long long gk = k0 + r, gn = n0 + c;\n"
                   "            const bool in = gk < TSR_K && gn < TSR_N;\n"
                   "            Bs[r][c] = in ? tsr_load(B, gk * TSR_N + gn) : 0.0f;\n"
                   "%s"
                   "        }\n"
                   "        __syncthreads();\n"
                   "#pragma unroll\n"
                   "        for (int kk = 0; kk < TSR_BK; kk++) {\n"
                   "            float a[TSR_TM], bv[TSR_TN]%s;\n"
                   "#pragma unroll\n"
                   "            for (int i = 0; i < TSR_TM; i++)\n"
                   "                a[i] = As[kk][ty + TSR_TY * i];\n"
                   "#pragma unroll\n"
                   "            for (int j = 0; j < TSR_TN; j++) {\n"
                   "                bv[j] = Bs[kk][tx + TSR_TX * j];\n"
                   "%s"
                   "            }\n"
                   "#pragma unroll\n"
                   "            for (int i = 0; i < TSR_TM; i++)\n"
                   "#pragma unroll\n"
                   "                for (int j = 0; j < TSR_TN; j++) {\n"
                   "                    acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);\n"
                   "%s"
                   "                }\n"
                   "        }\n"
                   "        __syncthreads();\n"
                   "    }\n"
                   "}\n\n",
                   g ? "            Us[r][c] = in ? tsr_load(U, gk * TSR_N + gn) : 0.0f;\n" : "",
                   g ? ", uv[TSR_TN]" : "",
                   g ? "                uv[j] = Us[kk][tx + TSR_TX * j];\n" : "",
                   g ? "                    accu[i][j] = fmaf(a[i], uv[j], accu[i][j]);\n" : "");
}

static void mm_emit_signature(tsri_cg_buf *b, const tsr_codegen_launch *l, const mm_shape *s)
{
    tsri_cg_printf(b,
                   "extern \"C\" __global__ void __launch_bounds__(TSR_THREADS)\n"
                   "%s(const tsr_in_t *__restrict__ A, const tsr_in_t *__restrict__ B, ",
                   l->entry);
    if (s->gated)
        tsri_cg_puts(b, "const tsr_in_t *__restrict__ U, ");
    if (s->has_bias)
        tsri_cg_puts(b, "const tsr_in_t *__restrict__ bias, ");
    if (s->has_residual)
        tsri_cg_puts(b, "const tsr_in_t *__restrict__ residual, ");
    tsri_cg_printf(b, "tsr_out_t *__restrict__ out TSR_M_PARAM)\n{\n"
                      "    __shared__ float As[TSR_BK][TSR_BM + 1];\n"
                      "    __shared__ float Bs[TSR_BK][TSR_BN];\n");
    if (s->gated)
        tsri_cg_puts(b, "    __shared__ float Us[TSR_BK][TSR_BN];\n");
    tsri_cg_puts(b, "    const int tx = threadIdx.x % TSR_TX, ty = threadIdx.x / TSR_TX;\n"
                    "    float acc[TSR_TM][TSR_TN];\n");
    if (s->gated)
        tsri_cg_puts(b, "    float accu[TSR_TM][TSR_TN];\n");
}

/* One kernel launch covers the output tile by tile. */
static void mm_emit_tiled_kernel(tsri_cg_buf *b, const tsr_region *r, const tsr_codegen_launch *l,
                                 const mm_shape *s)
{
    mm_emit_signature(b, l, s);
    tsri_cg_printf(b,
                   "    const long long tile = blockIdx.x;\n"
                   "    const long long m0 = (tile / TSR_TILES_N) * TSR_BM;\n"
                   "    const long long n0 = (tile %% TSR_TILES_N) * TSR_BN;\n"
                   "    tsr_mainloop(A, B, %sm0, n0, As, Bs, %sacc%s TSR_M_ARG);\n"
                   "#pragma unroll\n"
                   "    for (int j = 0; j < TSR_TN; j++) {\n"
                   "        const long long gn = n0 + tx + TSR_TX * j;\n"
                   "        if (gn >= TSR_N)\n"
                   "            continue;\n",
                   s->gated ? "U, " : "", s->gated ? "Us, " : "", s->gated ? ", accu" : "");
    if (r->kind == TSR_KIND_FUSED)
        tsri_cg_printf(b, "        const float bias_v = %s;\n",
                       s->has_bias ? "tsr_load(bias, gn)" : "0.0f");
    tsri_cg_puts(b, "#pragma unroll\n"
                    "        for (int i = 0; i < TSR_TM; i++) {\n"
                    "            const long long gm = m0 + ty + TSR_TY * i;\n"
                    "            if (gm >= TSR_M)\n"
                    "                continue;\n");
    if (s->gated)
        tsri_cg_puts(b, "            const float v = tsr_gate(acc[i][j]) * accu[i][j];\n");
    else if (r->kind == TSR_KIND_FUSED)
        tsri_cg_printf(b, "            const float v = tsr_epilogue(acc[i][j], bias_v)%s;\n",
                       s->has_residual ? " + tsr_load(residual, gm * TSR_N + gn)" : "");
    else
        tsri_cg_puts(b, "            const float v = acc[i][j];\n");
    tsri_cg_puts(b, "            tsr_store(out, gm * TSR_N + gn, v);\n"
                    "        }\n"
                    "    }\n"
                    "}\n");
}

/* Pass-1 update of the row statistics st0 / st1 from the tile values v. */
static const char *mm_reduction_update(tsr_reduction red)
{
    switch (red) {
    case TSR_REDUCTION_RMSNORM:
        return "            float ss = 0.0f;\n"
               "#pragma unroll\n"
               "            for (int j = 0; j < TSR_TN; j++)\n"
               "                if (ok[j])\n"
               "                    ss = fmaf(v[j], v[j], ss);\n"
               "            st0[i] += tsr_warp_sum(ss);\n";
    case TSR_REDUCTION_SOFTMAX:
        /* Online max and sum of exponentials; a value equal to the tile max
         * contributes exactly 1 so that a tile of -inf does not make NaN. */
        return "            float mt = TSR_NEG_INF;\n"
               "#pragma unroll\n"
               "            for (int j = 0; j < TSR_TN; j++)\n"
               "                if (ok[j])\n"
               "                    mt = tsr_maximum(mt, v[j]);\n"
               "            mt = tsr_warp_max(mt);\n"
               "            float se = 0.0f;\n"
               "#pragma unroll\n"
               "            for (int j = 0; j < TSR_TN; j++)\n"
               "                if (ok[j])\n"
               "                    se += v[j] == mt ? 1.0f : expf(v[j] - mt);\n"
               "            se = tsr_warp_sum(se);\n"
               "            const float nm = tsr_maximum(st0[i], mt);\n"
               "            st1[i] = st1[i] * (st0[i] == nm ? 1.0f : expf(st0[i] - nm)) +\n"
               "                     se * (mt == nm ? 1.0f : expf(mt - nm));\n"
               "            st0[i] = nm;\n";
    default: /* layer_norm: Chan et al.'s merge of (count, mean, M2) */
        return "            float sum = 0.0f;\n"
               "#pragma unroll\n"
               "            for (int j = 0; j < TSR_TN; j++)\n"
               "                if (ok[j])\n"
               "                    sum += v[j];\n"
               "            const float mean_t = tsr_warp_sum(sum) / cnt;\n"
               "            float m2 = 0.0f;\n"
               "#pragma unroll\n"
               "            for (int j = 0; j < TSR_TN; j++)\n"
               "                if (ok[j])\n"
               "                    m2 = fmaf(v[j] - mean_t, v[j] - mean_t, m2);\n"
               "            m2 = tsr_warp_sum(m2);\n"
               "            const float total = seen + cnt, delta = mean_t - st0[i];\n"
               "            st0[i] += delta * (cnt / total);\n"
               "            st1[i] += m2 + delta * delta * (seen * cnt / total);\n";
    }
}

static void mm_emit_reduction_kernel(tsri_cg_buf *b, const tsr_codegen_launch *l, const mm_shape *s)
{
    const tsr_reduction red = s->reduction;
    mm_emit_signature(b, l, s);
    tsri_cg_printf(b,
                   "    const long long m0 = (long long)blockIdx.x * TSR_BM;\n"
                   "    float st0[TSR_TM], st1[TSR_TM];\n"
                   "#pragma unroll\n"
                   "    for (int i = 0; i < TSR_TM; i++) {\n"
                   "        st0[i] = %s;\n"
                   "        st1[i] = 0.0f;\n"
                   "    }\n"
                   "    float seen = 0.0f;\n"
                   "    /* Pass 1: row statistics over every column tile. */\n"
                   "    for (long long n0 = 0; n0 < TSR_N; n0 += TSR_BN) {\n"
                   "        tsr_mainloop(A, B, m0, n0, As, Bs, acc TSR_M_ARG);\n"
                   "        const float cnt = (float)(TSR_N - n0 < TSR_BN ? TSR_N - n0 : TSR_BN);\n"
                   "        float bv[TSR_TN];\n"
                   "        bool ok[TSR_TN];\n"
                   "#pragma unroll\n"
                   "        for (int j = 0; j < TSR_TN; j++) {\n"
                   "            const long long gn = n0 + tx + TSR_TX * j;\n"
                   "            ok[j] = gn < TSR_N;\n"
                   "            bv[j] = %s;\n"
                   "        }\n"
                   "#pragma unroll\n"
                   "        for (int i = 0; i < TSR_TM; i++) {\n"
                   "            float v[TSR_TN];\n"
                   "#pragma unroll\n"
                   "            for (int j = 0; j < TSR_TN; j++)\n"
                   "                v[j] = tsr_epilogue(acc[i][j], bv[j]);\n"
                   "%s"
                   "        }\n"
                   "        seen += cnt;\n"
                   "    }\n",
                   red == TSR_REDUCTION_SOFTMAX ? "TSR_NEG_INF" : "0.0f",
                   s->has_bias ? "ok[j] ? tsr_load(bias, gn) : 0.0f" : "0.0f",
                   mm_reduction_update(red));
    tsri_cg_puts(b, "    (void)seen;\n    (void)st1;\n");
    if (red == TSR_REDUCTION_RMSNORM)
        tsri_cg_puts(b, "#pragma unroll\n"
                        "    for (int i = 0; i < TSR_TM; i++)\n"
                        "        st0[i] = 1.0f / sqrtf(st0[i] / (float)TSR_N + TSR_EPS);\n");
    else if (red == TSR_REDUCTION_LAYER_NORM)
        tsri_cg_puts(b, "#pragma unroll\n"
                        "    for (int i = 0; i < TSR_TM; i++)\n"
                        "        st1[i] = 1.0f / sqrtf(st1[i] / (float)TSR_N + TSR_EPS);\n");
    const char *normalize = red == TSR_REDUCTION_RMSNORM   ? "v * st0[i]"
                            : red == TSR_REDUCTION_SOFTMAX ? "expf(v - st0[i]) / st1[i]"
                                                           : "(v - st0[i]) * st1[i]";
    tsri_cg_printf(b,
                   "    /* Pass 2: the same values again, normalized and stored. */\n"
                   "    for (long long n0 = 0; n0 < TSR_N; n0 += TSR_BN) {\n"
                   "        tsr_mainloop(A, B, m0, n0, As, Bs, acc TSR_M_ARG);\n"
                   "#pragma unroll\n"
                   "        for (int j = 0; j < TSR_TN; j++) {\n"
                   "            const long long gn = n0 + tx + TSR_TX * j;\n"
                   "            if (gn >= TSR_N)\n"
                   "                continue;\n"
                   "            const float bias_v = %s;\n"
                   "#pragma unroll\n"
                   "            for (int i = 0; i < TSR_TM; i++) {\n"
                   "                const long long gm = m0 + ty + TSR_TY * i;\n"
                   "                if (gm >= TSR_M)\n"
                   "                    continue;\n"
                   "                const float v = tsr_epilogue(acc[i][j], bias_v);\n"
                   "                tsr_store(out, gm * TSR_N + gn, %s);\n"
                   "            }\n"
                   "        }\n"
                   "    }\n"
                   "}\n",
                   s->has_bias ? "tsr_load(bias, gn)" : "0.0f", normalize);
}

tsr_status tsri_cg_matmul_launch(const tsr_region *r, tsr_codegen_launch *l, tsr_error *err)
{
    mm_shape s;
    mm_shape_of(r, &s);
    const int64_t tiles_m = (s.m + s.bm - 1) / s.bm;
    const int64_t tiles_n = (s.n + s.bn - 1) / s.bn;
    const int64_t blocks = s.reduction != TSR_REDUCTION_NONE ? tiles_m : tiles_m * tiles_n;
    tsr_status st = tsri_cg_geometry(l, blocks, MM_THREADS, err);
    l->shared_bytes = 0; /* the tiles are static shared memory, under 16 KiB */
    return st;
}

tsr_status tsri_cg_matmul(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                          tsr_codegen_launch *l, tsr_error *err)
{
    mm_shape s;
    mm_shape_of(r, &s);
    tsr_status st = tsri_cg_matmul_launch(r, l, err);
    if (st != TSR_OK)
        return st;

    mm_emit_constants(b, &s, (t->free_dims & TSR_VARIANT_ROWS) != 0);
    mm_emit_functions(b, r, &s);
    mm_emit_mainloop(b, &s);
    if (s.reduction != TSR_REDUCTION_NONE)
        mm_emit_reduction_kernel(b, l, &s);
    else
        mm_emit_tiled_kernel(b, r, l, &s);
    return TSR_OK;
}
