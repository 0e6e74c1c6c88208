/*
 * codegen_attention.c — the Tier-1 kernel of an attention region.
 *
 * FlashAttention's online softmax, in f32 with no tensor cores: one block of
 * 256 threads per (batch, head, tile of BQ queries). The query tile, pre-scaled
 * by `scale`, sits in shared memory for the whole block; key and value tiles of
 * BKV rows stream through shared memory. Each query row belongs to TPR
 * consecutive lanes of one warp: lane g of a row computes the scores of keys
 * g, g + TPR, ... of the tile, the row's running max and sum travel through
 * shuffles inside that group, the probabilities go through a small shared tile,
 * and lane g accumulates output columns g, g + TPR, ... in registers (at most 64
 * per thread, which fixes TPR from head_dim_v). Rows of Q and K in shared memory
 * are padded by one float so that the dot products do not hit one bank.
 *
 * Causal masking is bottom-right aligned: query m sees key n when
 * n <= m + (seq_k - seq_q). Key tiles wholly past a query tile's last visible
 * key are not visited, and query tiles are scheduled last-first so the longest
 * ones start early. A row that sees no key (m < seq_q - seq_k) ends with a zero
 * sum and is written as 0. Grouped-query attention reads kv head
 * h / (heads / heads_kv).
 */
#include "codegen_emit.h"
#include "codegen_internal.h"

#include <stdio.h>

enum { AT_THREADS = 256, AT_MAX_COLS = 64, AT_PREFERRED_SHARED = 100 * 1024 };

static uint32_t at_shared_bytes(int64_t bq, int64_t bkv, int64_t d, int64_t dv)
{
    return (uint32_t)(4 * (bq * (d + 1) + bkv * (d + 1) + bkv * dv + bq * (bkv + 1)));
}

tsr_status tsri_cg_attention(tsri_cg_buf *b, const tsr_region *r, const tsri_cg_target *t,
                             tsr_codegen_launch *l, tsr_error *err)
{
    const tsr_attention_desc *a = &r->u.attention;
    const int64_t d = a->head_dim, dv = a->head_dim_v;

    /* Threads per query row: enough that each holds at most 64 output columns. */
    int tpr = 4;
    while (tpr < 32 && (dv + tpr - 1) / tpr > AT_MAX_COLS)
        tpr *= 2;
    if ((dv + tpr - 1) / tpr > AT_MAX_COLS)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "head_dim_v: %lld is past this kernel's limit of %d", (long long)dv,
                             32 * AT_MAX_COLS);
    const int bq = AT_THREADS / tpr;

    /* The largest key tile that fits the preferred budget (two blocks per SM on
     * sm_90), else the largest the architecture allows at all. */
    int bkv = 0;
    for (int cand = 64; cand >= tpr; cand /= 2) {
        if (at_shared_bytes(bq, cand, d, dv) <= AT_PREFERRED_SHARED) {
            bkv = cand;
            break;
        }
    }
    if (bkv == 0) {
        for (int cand = 64; cand >= tpr; cand /= 2) {
            if (at_shared_bytes(bq, cand, d, dv) <= t->max_shared) {
                bkv = cand;
                break;
            }
        }
    }
    if (bkv == 0)
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "head_dim %lld / head_dim_v %lld: tiles need %u bytes of shared "
                             "memory, %s allows %u",
                             (long long)d, (long long)dv, at_shared_bytes(bq, tpr, d, dv), t->arch,
                             t->max_shared);

    const int64_t q_tiles = (a->seq_q + bq - 1) / bq;
    tsr_status st = tsri_cg_geometry(l, a->batch * a->heads * q_tiles, AT_THREADS, err);
    if (st != TSR_OK)
        return st;
    l->shared_bytes = at_shared_bytes(bq, bkv, d, dv);

    char scale[32];
    if (t->free_dims != 0)
        tsri_cg_puts(b, "/* batch, seq_q and seq_k are kernel parameters: one binary serves\n"
                        " * every value of them. */\n"
                        "#define TSR_B tsr_b\n#define TSR_SQ tsr_sq\n#define TSR_SK tsr_sk\n"
                        "#define TSR_DIM_PARAMS , const long long tsr_b, const long long tsr_sq, "
                        "const long long tsr_sk\n");
    else
        tsri_cg_printf(b,
                       "#define TSR_B %lldLL\n#define TSR_SQ %lldLL\n#define TSR_SK %lldLL\n"
                       "#define TSR_DIM_PARAMS\n",
                       (long long)a->batch, (long long)a->seq_q, (long long)a->seq_k);
    tsri_cg_printf(b,
                   "#define TSR_H %lldLL\n#define TSR_HKV %lldLL\n"
                   "#define TSR_D %lld\n#define TSR_DV %lld\n"
                   "#define TSR_SCALE %s\n#define TSR_CAUSAL %d\n"
                   "#define TSR_TPR %d /* threads per query row */\n"
                   "#define TSR_BQ %d  /* queries per block */\n"
                   "#define TSR_BKV %d /* keys per tile */\n",
                   (long long)a->heads, (long long)a->heads_kv, (long long)d, (long long)dv,
                   tsri_cg_float(scale, a->scale), a->causal ? 1 : 0, tpr, bq, bkv);
    tsri_cg_puts(b, "#define TSR_GROUP (TSR_H / TSR_HKV)\n"
                    "#define TSR_Q_TILES ((TSR_SQ + TSR_BQ - 1) / TSR_BQ)\n"
                    "#define TSR_DP (TSR_D + 1)    /* padded row of Q and K in shared memory */\n"
                    "#define TSR_PP (TSR_BKV + 1)  /* padded row of P */\n"
                    "#define TSR_SPT (TSR_BKV / TSR_TPR) /* scores per thread */\n"
                    "#define TSR_OPT ((TSR_DV + TSR_TPR - 1) / TSR_TPR) /* outputs per thread */\n"
                    "#define TSR_NEG_INF __uint_as_float(0xff800000u)\n\n");

    tsri_cg_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d)\n", AT_THREADS);
    tsri_cg_printf(
        b,
        "%s(const tsr_in_t *__restrict__ Q, const tsr_in_t *__restrict__ K,\n"
        "    const tsr_in_t *__restrict__ V, tsr_out_t *__restrict__ out TSR_DIM_PARAMS)\n",
        l->entry);
    tsri_cg_puts(
        b, "{\n"
           "    extern __shared__ float tsr_smem[];\n"
           "    float *Qs = tsr_smem;                 /* [BQ][DP] */\n"
           "    float *Ks = Qs + TSR_BQ * TSR_DP;     /* [BKV][DP] */\n"
           "    float *Vs = Ks + TSR_BKV * TSR_DP;    /* [BKV][DV] */\n"
           "    float *Ps = Vs + TSR_BKV * TSR_DV;    /* [BQ][PP] */\n"
           "    (void)TSR_B; /* the grid covers the batch */\n"
           "    const int tid = threadIdx.x, row = tid / TSR_TPR, g = tid % TSR_TPR;\n"
           "    const long long bid = blockIdx.x;\n"
           "    const long long qt = (TSR_Q_TILES - 1) - bid % TSR_Q_TILES;\n"
           "    const long long bh = bid / TSR_Q_TILES;\n"
           "    const long long h = bh % TSR_H, b = bh / TSR_H, hk = h / TSR_GROUP;\n"
           "    const long long q0 = qt * TSR_BQ;\n"
           "    const tsr_in_t *__restrict__ Qb = Q + (b * TSR_H + h) * TSR_SQ * TSR_D;\n"
           "    const tsr_in_t *__restrict__ Kb = K + (b * TSR_HKV + hk) * TSR_SK * TSR_D;\n"
           "    const tsr_in_t *__restrict__ Vb = V + (b * TSR_HKV + hk) * TSR_SK * TSR_DV;\n"
           "    tsr_out_t *__restrict__ Ob = out + (b * TSR_H + h) * TSR_SQ * TSR_DV;\n"
           "\n"
           "    for (int e = tid; e < TSR_BQ * TSR_D; e += blockDim.x) {\n"
           "        const int r = e / TSR_D, c = e % TSR_D;\n"
           "        const long long gq = q0 + r;\n"
           "        Qs[r * TSR_DP + c] = gq < TSR_SQ ? tsr_load(Qb, gq * TSR_D + c) * TSR_SCALE : "
           "0.0f;\n"
           "    }\n"
           "    float o[TSR_OPT];\n"
           "#pragma unroll\n"
           "    for (int j = 0; j < TSR_OPT; j++)\n"
           "        o[j] = 0.0f;\n"
           "    float m_run = TSR_NEG_INF, l_run = 0.0f;\n"
           "    const long long my_q = q0 + row;\n"
           "    long long kv_end = TSR_SK;\n"
           "#if TSR_CAUSAL\n"
           "    /* Past the last key the tile's last query sees, nothing is visible. */\n"
           "    if (q0 + TSR_BQ + (TSR_SK - TSR_SQ) < kv_end)\n"
           "        kv_end = q0 + TSR_BQ + (TSR_SK - TSR_SQ);\n"
           "#endif\n"
           "    for (long long k0 = 0; k0 < kv_end; k0 += TSR_BKV) {\n"
           "        __syncthreads(); /* the previous tile is no longer read */\n"
           "        for (int e = tid; e < TSR_BKV * TSR_D; e += blockDim.x) {\n"
           "            const int r = e / TSR_D, c = e % TSR_D;\n"
           "            const long long gk = k0 + r;\n"
           "            Ks[r * TSR_DP + c] = gk < TSR_SK ? tsr_load(Kb, gk * TSR_D + c) : 0.0f;\n"
           "        }\n"
           "        for (int e = tid; e < TSR_BKV * TSR_DV; e += blockDim.x) {\n"
           "            const int r = e / TSR_DV, c = e % TSR_DV;\n"
           "            const long long gk = k0 + r;\n"
           "            Vs[r * TSR_DV + c] = gk < TSR_SK ? tsr_load(Vb, gk * TSR_DV + c) : 0.0f;\n"
           "        }\n"
           "        __syncthreads();\n"
           "\n"
           "        float s[TSR_SPT];\n"
           "        float m_tile = TSR_NEG_INF;\n"
           "#pragma unroll\n"
           "        for (int jj = 0; jj < TSR_SPT; jj++) {\n"
           "            const int c = g + TSR_TPR * jj;\n"
           "            const long long gk = k0 + c;\n"
           "            float dot = 0.0f;\n"
           "#pragma unroll 8\n"
           "            for (int dd = 0; dd < TSR_D; dd++)\n"
           "                dot = fmaf(Qs[row * TSR_DP + dd], Ks[c * TSR_DP + dd], dot);\n"
           "            bool visible = gk < TSR_SK;\n"
           "#if TSR_CAUSAL\n"
           "            visible = visible && gk <= my_q + (TSR_SK - TSR_SQ);\n"
           "#endif\n"
           "            s[jj] = visible ? dot : TSR_NEG_INF;\n"
           "            m_tile = tsr_maximum(m_tile, s[jj]);\n"
           "        }\n"
           "#pragma unroll\n"
           "        for (int off = TSR_TPR / 2; off > 0; off >>= 1)\n"
           "            m_tile = tsr_maximum(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, off));\n"
           "        const float m_new = tsr_maximum(m_run, m_tile);\n"
           "        /* With nothing visible yet m_new is -inf: keep the (zero) state. */\n"
           "        const float alpha = m_new == TSR_NEG_INF ? 1.0f : expf(m_run - m_new);\n"
           "        float p_sum = 0.0f;\n"
           "#pragma unroll\n"
           "        for (int jj = 0; jj < TSR_SPT; jj++) {\n"
           "            const float p = s[jj] == TSR_NEG_INF ? 0.0f : expf(s[jj] - m_new);\n"
           "            Ps[row * TSR_PP + g + TSR_TPR * jj] = p;\n"
           "            p_sum += p;\n"
           "        }\n"
           "#pragma unroll\n"
           "        for (int off = TSR_TPR / 2; off > 0; off >>= 1)\n"
           "            p_sum += __shfl_xor_sync(0xffffffffu, p_sum, off);\n"
           "        l_run = l_run * alpha + p_sum;\n"
           "        m_run = m_new;\n"
           "        __syncwarp(); /* a row's P is written and read by the lanes of one warp */\n"
           "#pragma unroll\n"
           "        for (int j = 0; j < TSR_OPT; j++)\n"
           "            o[j] *= alpha;\n"
           "        for (int c = 0; c < TSR_BKV; c++) {\n"
           "            const float p = Ps[row * TSR_PP + c];\n"
           "#pragma unroll\n"
           "            for (int j = 0; j < TSR_OPT; j++) {\n"
           "                const int col = g + TSR_TPR * j;\n"
           "                if (TSR_DV % TSR_TPR == 0 || col < TSR_DV)\n"
           "                    o[j] = fmaf(p, Vs[c * TSR_DV + col], o[j]);\n"
           "            }\n"
           "        }\n"
           "    }\n"
           "    if (my_q < TSR_SQ) {\n"
           "        /* A row that saw no key has l_run == 0 and is written as 0. */\n"
           "        const float inv = l_run == 0.0f ? 0.0f : 1.0f / l_run;\n"
           "#pragma unroll\n"
           "        for (int j = 0; j < TSR_OPT; j++) {\n"
           "            const int col = g + TSR_TPR * j;\n"
           "            if (TSR_DV % TSR_TPR == 0 || col < TSR_DV)\n"
           "                tsr_store(Ob, my_q * TSR_DV + col, o[j] * inv);\n"
           "        }\n"
           "    }\n"
           "}\n");
    return TSR_OK;
}
