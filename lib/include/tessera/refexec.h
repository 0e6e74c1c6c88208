/*
 * tessera/refexec.h — the CPU reference executor (tier 0).
 *
 * Runs any validated region on host memory: inputs are read from their storage
 * dtype, arithmetic is f64, and the result is rounded once to the output dtype.
 * Pointwise DAGs follow numpy's float32 semantics: each op is computed in f64 and
 * rounded to f32 before the next op reads it (what an f32 kernel computes, without
 * its last-bit error); numpy broadcasting. fused: prologue on A -> A@B -> epilogue
 * chain -> + residual -> row reduction, all in f64. attention: grouped-query
 * (query head h reads kv head h / (heads / heads_kv)), bottom-right causal mask,
 * fully masked rows give 0.
 *
 * It is also the daemon's CPU backend, so matmul-like kinds are cache-blocked and
 * split over threads.
 *
 * Threading: reentrant; a call may start up to `threads` worker threads of its
 * own and joins them before it returns. Blocking: runs to completion.
 */
#ifndef TESSERA_REFEXEC_H
#define TESSERA_REFEXEC_H

#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

/* inputs: one dense array per entry of tsr_region_signature, in that order and
 * in r->dtype; output: a dense array of the output shape in r->out_dtype.
 * threads <= 0 picks the number of online CPUs. Returns TSR_NO_MEMORY when
 * scratch space cannot be had; never fails otherwise for a validated region. */
tsr_status tsr_ref_run(const tsr_region *r, const void *const *inputs, void *output, int threads,
                       tsr_error *err);

/* Only the outputs at the flat positions index[0..count) (ascending, no
 * repeats) into out[0..count), dense in r->out_dtype: each the value that
 * tsr_ref_run writes at that position, bit for bit. What a position costs is
 * what the reference needs to compute it alone: one K-long dot product with
 * the prologue and epilogue (two for gated) for matmul, gated and fused
 * without a row reduction; the whole row for fused with one; the whole query
 * row for attention; one element for pointwise. Split over threads like
 * tsr_ref_run. TSR_INVALID_ARGUMENT names a position out of range or out of
 * order; TSR_NO_MEMORY when scratch space cannot be had. */
tsr_status tsr_ref_run_at(const tsr_region *r, const void *const *inputs, const uint64_t *index,
                          size_t count, void *out, int threads, tsr_error *err);

/* ---- work: what one run costs the CPU ---- */

/* What one element-wise step costs next to a multiply or an add (see below). */
#define TSR_REF_WORK_ELEMENT 32

/* The work of one tsr_ref_run of r in work units, the measure of CPU time that
 * the daemon bounds per request. A multiply or an add counts 1; every
 * element-wise step counts TSR_REF_WORK_ELEMENT: reading or writing one element
 * (a broadcast pointwise input is read once per output element), one pointwise
 * op, an activation, a softmax exponent, a row reduction's work per element
 * (4). The weight is what such a step costs the reference next to a
 * multiply-add, so that a unit costs about the same time whatever the kind
 * (measured on one core: 0.04 to 0.3 ns per unit for every kind). Exactly, with
 * E = TSR_REF_WORK_ELEMENT, "io" the elements of every input and the output,
 * and P the (query, key) pairs the causal mask keeps (M·N without it):
 *
 *   matmul     2·M·N·K + E·io
 *   fused      2·M·N·K + E·(io + M·K·prologue + M·N·(epilogue + 4·[reduction]))
 *   gated      4·M·K·H + E·(io + 2·M·H)
 *   attention  2·B·H·P·(D + Dv) + E·(io + B·H·P)
 *   pointwise  E·elements(output)·(inputs + ops + 1)
 *
 * r must be validated. Exact for results below 2^53; never negative. Reentrant. */
double tsr_ref_work(const tsr_region *r);

/* The work of tsr_ref_run_at at these positions, counted the same way: every
 * stored value read where it is used (a matmul row of A once per row, the B
 * columns that lone positions name once, B once for all whole rows), two per
 * multiply-add, E per element-wise step. */
double tsr_ref_work_at(const tsr_region *r, const uint64_t *index, size_t count);

#ifdef __cplusplus
}
#endif
#endif
