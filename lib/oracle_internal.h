/*
 * oracle_internal.h — what the full verification (oracle.c) and the sampled
 * one (oracle_sampled.c) share, and how oracle_verify.c reaches them: the hash behind every probe
 * value, the special-value list and the comparison.
 *
 * Threading: reentrant.
 */
#ifndef TESSERA_ORACLE_INTERNAL_H
#define TESSERA_ORACLE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "tessera/oracle.h"

/* Used when the caller's seed is 0, so that "no seed" still reproduces. */
#define TSRI_ORACLE_DEFAULT_SEED UINT64_C(0x7e55e7a0c1e5eed5)

/* Length of the special-value list; must be prime (see oracle.c) and larger
 * than TSR_MAX_PW_INPUTS, so that every offset i+1 is invertible mod S. */
#define TSRI_ORACLE_SPECIALS 23

/* splitmix64's finaliser. */
uint64_t tsri_oracle_mix64(uint64_t z);

/* One step of splitmix64 on *state: the oracle's probe data and the sampled
 * oracle's positions draw from it. */
uint64_t tsri_oracle_next(uint64_t *state);

/* The special values of a storage dtype, in the order oracle.c documents:
 * NaN, +inf, -inf, +0, -0, ±largest finite, ±a value whose square overflows,
 * smallest normal, ±smallest subnormal, 1, -1, 0.5, -0.5, 2, -2.5, 3, 88.5,
 * 89, -100, -1e-3. */
void tsri_oracle_specials(tsr_dtype dtype, double out[TSRI_ORACLE_SPECIALS]);

/* tsr_oracle_compare where got[i] and want[i] are the output at flat position
 * index[i] (index NULL: i), and where (", small shape" or "") follows the
 * probe number in the verdict's reason. */
void tsri_oracle_compare(tsr_verdict *v, int probe, tsr_dtype dtype, const void *got,
                         const void *want, size_t count, const uint64_t *index, const char *where);

/* Allocates r's inputs (zero-filled when zeroed, else unset), every one or
 * none: on failure what was made is freed, inputs[] are NULL and err says
 * which input did not fit. descs receives their descriptions, *n their count.
 * The caller frees them with tsr_oracle_free_probe. */
tsr_status tsri_oracle_alloc_inputs(const tsr_region *r, bool zeroed, void **inputs,
                                    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], int *n,
                                    tsr_error *err);

/* The memo (oracle_memo.c). get: the kept input (key, dtype, n elements)
 * with a reader counted, released with tsri_oracle_memo_release; NULL when
 * none is kept, and *keep then says whether it was asked for before (so that
 * the caller should offer it with put once made). put copies bytes of data
 * in, when they fit the budget. Every one a no-op on a NULL memo. */
const void *tsri_oracle_memo_get(tsr_oracle_memo *m, uint64_t key, tsr_dtype dtype, uint64_t n,
                                 bool *keep);
void tsri_oracle_memo_release(tsr_oracle_memo *m, const void *data);
void tsri_oracle_memo_put(tsr_oracle_memo *m, uint64_t key, tsr_dtype dtype, uint64_t n,
                          const void *data, size_t bytes);

/* tsr_oracle_sampled_reference, with the inputs it reads whole kept in and
 * taken from memo (NULL: none). */
tsr_status tsri_oracle_sampled_reference(const tsr_region *r, uint64_t seed, int probe,
                                         const uint64_t *index, size_t count, void *out,
                                         int threads, tsr_oracle_memo *memo, tsr_error *err);

/* tsr_oracle_sampled_fill over `threads` cores (oracle_gen.c). */
void tsri_oracle_fill_parallel(tsr_dtype dtype, void *base, uint64_t first, uint64_t count,
                               uint64_t key, int threads);

/* The f32 to bf16 and f16 roundings of the sampled probe values, as the
 * device runs them (oracle_gen.c): for finite values below 65504 in
 * magnitude. */
uint16_t tsri_oracle_gen_bf16(float v);
uint16_t tsri_oracle_gen_f16(float v);

/* The full verification (oracle.c) and the sampled one (oracle_sampled.c),
 * between which tsr_oracle_verify (oracle_verify.c) chooses; o has its seed
 * filled. */
tsr_status tsri_oracle_verify_full(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                                   const tsr_oracle_options *o, tsr_verdict *v, tsr_error *err);
tsr_status tsri_oracle_verify_sampled(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                                      const tsr_oracle_options *o, tsr_verdict *v, tsr_error *err);

#endif
