/*
 * attn_params.h — the launch contract between the daemon and the tier-3
 * attention kernels of kernels/attn_sm90.cu (shared by host C and device CUDA
 * code).
 *
 * Every kernel takes three CUtensorMap parameters by value — Q as a 2-D tensor
 * {head_dim, batch · heads · seq_q} in boxes of 64 x TSR_ATTN_BM, K and V as 3-D
 * tensors {head_dim, seq_k, batch · heads_kv} in boxes of 64 x TSR_ATTN_BN x 1
 * (so a box never reaches into the next head), all 128-byte swizzled — and one
 * tsr_attn_params. The output (B, H, seq_q, head_dim) is
 * dense in the output dtype and written with ordinary stores.
 *
 * Requirements checked by the host before launch (the candidate declines
 * otherwise): bf16 or f16 inputs, head_dim = head_dim_v ∈ {64, 128}, device
 * pointers 16-byte aligned. seq_q and seq_k are any size: the tensor-map loads
 * fill rows past the end with zeros, keys past seq_k are masked and the stores
 * are predicated.
 *
 * Grid: (ceil(group · seq_q / TSR_ATTN_BM), heads_kv, batch) with group =
 * heads / heads_kv (the query heads of a kv head are packed into its rows),
 * TSR_ATTN_THREADS threads, TSR_ATTN_SMEM_BYTES(head_dim) of dynamic shared
 * memory. The split-key entries (_s4, _s8: input dtype out only) are compiled
 * with clusters of S CTAs along x and take S times as many CTAs in x: the S
 * CTAs of a cluster share a row tile, each takes 1/S of its key tiles.
 */
#ifndef TSR_ATTN_PARAMS_H
#define TSR_ATTN_PARAMS_H

#define TSR_ATTN_BM 128      /* packed query rows per CTA: two consumer warpgroups of 64 */
#define TSR_ATTN_BN 128      /* keys per K / V tile */
#define TSR_ATTN_THREADS 384 /* one producer and two consumer warpgroups */
/* Split keys (the _s4 and _s8 entries) are planned against this many
 * multiprocessors (an H100 or H200 SXM). */
#define TSR_ATTN_SPLIT_SMS 132

/* Stages of the K and V rings in shared memory. K, needed first, has the deeper
 * one: 3 and 2 for head_dim 128, 4 and 3 for 64. */
#define TSR_ATTN_K_STAGES(hd) ((hd) == 128 ? 3 : 4)
#define TSR_ATTN_V_STAGES(hd) ((hd) == 128 ? 2 : 3)
/* Q tile, the K and V stages, 16 zero rows of V, 1 KiB of alignment slack,
 * barriers. */
/* clang-format off */
#define TSR_ATTN_SMEM_BYTES(hd)                                                                    \
    (TSR_ATTN_BM * (hd) * 2 +                                                                      \
     (TSR_ATTN_K_STAGES(hd) + TSR_ATTN_V_STAGES(hd)) * TSR_ATTN_BN * (hd) * 2 +                    \
     16 * (hd) * 2 + 1024 + 256)
/* clang-format on */

typedef struct tsr_attn_params {
    int seq_q, seq_k;
    int heads, heads_kv;
    int causal;       /* bottom-right: key n is visible to query m when n <= m + seq_k - seq_q */
    float scale_log2; /* the region's scale times log2(e): softmax runs in exp2 */
    void *out;        /* (B, H, seq_q, head_dim) in the output dtype */
} tsr_attn_params;

#endif
