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

#ifdef __cplusplus
}
#endif
#endif
