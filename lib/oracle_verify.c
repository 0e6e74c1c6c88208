/*
 * oracle_verify.c — tsr_oracle_verify: the caller's options completed, then the
 * full check (oracle.c) or, for a region too large to check in full, the
 * sampled one (oracle_sampled.c).
 */
#include "oracle_internal.h"

tsr_status tsr_oracle_verify(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                             const tsr_oracle_options *opts, tsr_verdict *v, tsr_error *err)
{
    if (r == NULL || run == NULL || v == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "verify: NULL argument");
    tsr_oracle_options o = {0};
    if (opts != NULL)
        o = *opts;
    if (o.seed == 0)
        o.seed = TSRI_ORACLE_DEFAULT_SEED;
    return o.method == TSR_VERIFY_SAMPLED ? tsri_oracle_verify_sampled(r, run, ctx, &o, v, err)
                                          : tsri_oracle_verify_full(r, run, ctx, &o, v, err);
}
