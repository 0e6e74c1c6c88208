/*
 * refexec_internal.h — what the reference executor's full run (refexec.c) and
 * its sampled run (refexec_sampled.c) share: the parallel for, and the
 * per-element and per-row steps of the matmul-like kinds and of pointwise
 * DAGs. Both runs compute an output element with the same steps in the same
 * order, so a sampled value is bit for bit the value the full run writes.
 *
 * Threading: reentrant; tsri_ref_parallel starts and joins its own threads.
 */
#ifndef TESSERA_REFEXEC_INTERNAL_H
#define TESSERA_REFEXEC_INTERNAL_H

#include <stdint.h>

#include "tessera/refexec.h"

/* The thread count for a caller's request: threads > 0 as given, else the
 * online CPUs (at most 256). */
int tsri_ref_threads(int threads);

/* Runs fn over [0, n) split into up to `threads` contiguous ranges, the first
 * on the calling thread; a thread that cannot be started has its range run on
 * the calling thread. Returns the first non-OK status of any range. */
typedef tsr_status (*tsri_range_fn)(void *ctx, int64_t lo, int64_t hi);
tsr_status tsri_ref_parallel(int threads, int64_t n, tsri_range_fn fn, void *ctx);

/* Runs fn over the elements [0, count) in chunks of chunk elements, spread as
 * tsri_ref_parallel spreads them over up to `threads` threads: each call
 * covers the elements [a, b) of a contiguous run of whole chunks (the last
 * one cut at count). */
typedef void (*tsri_span_fn)(void *ctx, uint64_t a, uint64_t b);
void tsri_ref_parallel_chunks(int threads, uint64_t count, uint64_t chunk, tsri_span_fn fn,
                              void *ctx);

/* Loads count elements of a dense dtype array from index first into f64. */
void tsri_ref_load(tsr_dtype dtype, const void *src, int64_t first, int64_t count, double *dst);

/* ---- matmul, fused, gated ---- */

/* The shape and operands of a matmul-like region: C (m, n) = A (m, k) @ B (k, n),
 * gated with a second product by B2, fused with its bias and residual. */
typedef struct tsri_mm_operands {
    int64_t m, n, k;
    const void *a, *b, *b2; /* b2: gated's Wu, else NULL */
    const void *bias;       /* fused: (n,) in the input dtype, or NULL */
    const void *residual;   /* fused: (m, n), or NULL */
} tsri_mm_operands;

void tsri_mm_operands_of(const tsr_region *r, const void *const *inputs, tsri_mm_operands *out);

/* A's prologue applied to one stored value (fused; the identity otherwise). */
double tsri_mm_prologue(const tsr_region *r, double a);

/* Output element (row, col) from its dot products: gated's activation and
 * product, fused's epilogue chain and residual. The row reduction is not
 * applied (tsri_mm_reduce_row does it over a whole row). */
double tsri_mm_element(const tsr_region *r, const tsri_mm_operands *o, int64_t row, int64_t col,
                       double acc, double acc2);

/* Fused's row reduction over a whole row of n values, in place. */
void tsri_mm_reduce_row(const tsr_region *r, double *x, int64_t n);

/* ---- pointwise ---- */

typedef struct tsri_pw_plan {
    const tsr_region *r;
    const void *const *inputs;
    int rank;
    const int64_t *shape;
    int64_t strides[TSR_MAX_PW_INPUTS][TSR_MAX_RANK]; /* 0 on broadcast dimensions */
} tsri_pw_plan;

void tsri_pw_plan_of(const tsr_region *r, const void *const *inputs, tsri_pw_plan *out);

/* Output elements [lo, hi) into out at out_first + (e - lo), in r->out_dtype.
 * TSR_NO_MEMORY when its scratch cannot be had. */
tsr_status tsri_pw_eval(const tsri_pw_plan *p, int64_t lo, int64_t hi, void *out,
                        int64_t out_first);

/* ---- attention ---- */

/* Query row `row` (flat over batch, heads and seq_q) into o[0..head_dim_v),
 * with q, k and v read from their stored dtype; q and p are scratch of
 * head_dim and seq_k doubles. k and v are NULL or f64 copies of the whole K
 * and V; when NULL the stored inputs are read (the same values). */
void tsri_att_row(const tsr_region *r, const void *const *inputs, const double *k, const double *v,
                  int64_t row, double *q, double *p, double *o);

/* ---- what a sampled run reads ---- */

/* Calls fn once or more for every run of input elements that tsr_ref_run_at
 * at these positions reads (input: its signature slot; the elements first ..
 * first + count of it), so that a caller can make only those. A run may be
 * named more than once. index as tsr_ref_run_at's (checked by the caller).
 * TSR_NO_MEMORY when scratch space cannot be had. */
typedef void (*tsri_ref_read_fn)(void *ctx, int input, uint64_t first, uint64_t count);
tsr_status tsri_ref_at_reads(const tsr_region *r, const uint64_t *index, size_t count,
                             tsri_ref_read_fn fn, void *ctx);

#endif
