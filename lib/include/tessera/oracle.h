/*
 * tessera/oracle.h — verification of a candidate against the reference (docs/architecture.md,
 * "Oracle").
 *
 * The oracle makes probe inputs for a region (seeded standard-normal values; for
 * pointwise regions also special-value probes holding NaN, ±inf, ±0, huge and
 * tiny magnitudes, and values at the edges of each op's domain), runs the
 * candidate through a callback and the reference executor, and compares: NaN and
 * inf positions (and inf signs) must match exactly, and the relative error
 * ||out - ref||_2 / ||ref||_2 over entries finite in both must be within the
 * bound (tsr_dtype_tolerance of the output dtype unless the candidate documents a
 * looser one). A verdict records the first mismatch for a person to read.
 *
 * Threading: reentrant. Blocking: runs the candidate and the reference.
 */
#ifndef TESSERA_ORACLE_H
#define TESSERA_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_verdict {
    bool pass;
    uint64_t elements;       /* elements compared, over all probes */
    int probes;              /* probe sets run */
    double max_abs_error;    /* over entries finite in both */
    double rel_error;        /* worst probe's ||out-ref|| / ||ref|| */
    double bound;            /* the relative bound applied */
    uint64_t nan_mismatches; /* positions where exactly one side is NaN */
    uint64_t inf_mismatches; /* positions where the infinities differ */
    int64_t first_bad_index; /* flat output index of the first mismatch, -1 if none */
    int first_bad_probe;     /* which probe set, -1 if none */
    double first_bad_got;
    double first_bad_want;
    char reason[160]; /* "pass", "NaN mismatch at [3]: got 1 want nan", ... */
} tsr_verdict;

/* Compares count elements of got with want, both dense in dtype. bound <= 0
 * selects tsr_dtype_tolerance(dtype). Accumulates into *v (call
 * tsr_verdict_init first; call once per probe with its probe number). */
void tsr_verdict_init(tsr_verdict *v, double bound, tsr_dtype dtype);
void tsr_oracle_compare(tsr_verdict *v, int probe, tsr_dtype dtype, const void *got,
                        const void *want, size_t count);

/* Probe inputs. tsr_oracle_probe_count says how many probe sets a region gets
 * (random ones plus, for pointwise, special-value ones); tsr_oracle_make_probe
 * fills probe set `index` for seed into arrays it allocates (*inputs[i], one per
 * signature input, malloc'd; free with tsr_oracle_free_probe). */
int tsr_oracle_probe_count(const tsr_region *r, int random_probes);
tsr_status tsr_oracle_make_probe(const tsr_region *r, uint64_t seed, int index, int random_probes,
                                 void **inputs, tsr_error *err);
void tsr_oracle_free_probe(const tsr_region *r, void **inputs);

/* Runs the candidate: inputs per tsr_region_signature, output dense in
 * r->out_dtype. Returns non-OK if the candidate could not run. */
typedef tsr_status (*tsr_candidate_run_fn)(void *ctx, const tsr_region *r,
                                           const void *const *inputs, void *output, tsr_error *err);

typedef struct tsr_oracle_options {
    uint64_t seed;     /* 0 picks a fixed default */
    int random_probes; /* <= 0 picks 2 */
    double bound;      /* <= 0: tsr_dtype_tolerance(out_dtype) */
    int ref_threads;   /* threads for the reference; <= 0 all CPUs */
} tsr_oracle_options;

/* Verifies a candidate. Returns TSR_OK when the check ran (the verdict says pass
 * or fail); an error when probes could not be made or the candidate failed to
 * run (then v->pass is false and the error is in err). */
tsr_status tsr_oracle_verify(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                             const tsr_oracle_options *opts, tsr_verdict *v, tsr_error *err);

/* One line for a person: "PASS rel 3.1e-07 <= 1e-05 (max abs 2.4e-06, 8192
 * elements, 4 probes)" or "FAIL ...". Writes at most size bytes. */
void tsr_verdict_format(const tsr_verdict *v, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
