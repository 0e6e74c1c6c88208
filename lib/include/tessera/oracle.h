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
 * A region too large to run the reference over in full is verified by
 * sampling (TSR_VERIFY_SAMPLED, docs/arbiter.md "Verification"): the
 * candidate runs at the real shape and the reference computes only chosen
 * output positions there (every edge line, every edge tile's corners, a seeded
 * grid), and the candidate then runs in full at a small shape of the same
 * tile residues (tsr_oracle_small_region) on random and special-value probes.
 *
 * Threading: reentrant. Blocking: runs the candidate and the reference, the
 * sampled parts on every core.
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

/* How a verdict was reached. */
typedef enum tsr_verify_method {
    TSR_VERIFY_FULL = 0,    /* every output of every probe, at the region's shape */
    TSR_VERIFY_SAMPLED = 1, /* sampled outputs at the real shape, small-shape probes in full */
} tsr_verify_method;

/* "full", "sampled"; "?" when out of range. */
const char *tsr_verify_method_name(tsr_verify_method method);

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
    tsr_verify_method method;
    uint64_t sampled_elements; /* sampled: outputs compared at the real shape (of elements) */
    int small_probes;          /* sampled: probes run in full at the small shape (part of probes) */
    /* The check of a new shape of a variant verified completely at another
     * shape: sampled at this shape, the small-shape and special-value probes
     * reused (docs/arbiter.md, "Variants"). */
    bool variant_reused;
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

/* Runs the candidate at r's shape on the inputs of a sampled probe that it
 * makes itself, where they are (on the device): input i's element e holds
 * tsr_oracle_sampled_value(keys[i], e) rounded to the input dtype
 * (tsr_oracle_sampled_fill), and the output is filled with all-ones bytes
 * before the run. Writes the outputs at the flat positions index[0..count)
 * (ascending) into out, dense in r->out_dtype. Returns non-OK if the
 * candidate could not run. */
typedef tsr_status (*tsr_candidate_run_keyed_fn)(void *ctx, const tsr_region *r,
                                                 const uint64_t *keys, const uint64_t *index,
                                                 size_t count, void *out, tsr_error *err);

/* The tile edge that sampling and the small shape assume when the candidate
 * names none, and the seeded positions per sampled probe. */
#define TSR_ORACLE_TILE 128
#define TSR_ORACLE_SAMPLES 4096

/* Whole probe inputs kept between sampled checks (oracle_memo.c): an input
 * that every shape of a variant shares, such as a GEMM's B while only M
 * changes, is made once instead of at every new shape. Kept from its second
 * request on, up to max_bytes in all (least recently used out first; 0 keeps
 * nothing). Thread-safe; owned by its creator, destroyed after every check
 * that uses it. */
typedef struct tsr_oracle_memo tsr_oracle_memo;
typedef struct tsr_oracle_memo_counts {
    uint64_t hits, misses, evictions;
    uint64_t bytes, entries; /* held now */
} tsr_oracle_memo_counts;
tsr_status tsr_oracle_memo_create(uint64_t max_bytes, tsr_oracle_memo **out, tsr_error *err);
void tsr_oracle_memo_destroy(tsr_oracle_memo *m);
void tsr_oracle_memo_stats(tsr_oracle_memo *m, tsr_oracle_memo_counts *out);

typedef struct tsr_oracle_options {
    uint64_t seed;     /* 0 picks a fixed default */
    int random_probes; /* <= 0 picks 2 (full) or 1 (sampled: probes at the real shape) */
    double bound;      /* <= 0: tsr_dtype_tolerance(out_dtype) */
    int ref_threads;   /* threads for the reference and the probes; <= 0 all CPUs */
    tsr_verify_method method;
    /* Sampled only. */
    int tile;                /* <= 0: TSR_ORACLE_TILE */
    int samples;             /* <= 0: TSR_ORACLE_SAMPLES */
    const tsr_region *small; /* tsr_oracle_small_region of r; NULL: no small-shape probes
                                (the candidate does not serve it) */
    /* The probes at the real shape through this (with the same ctx as run)
     * instead of run: the host then makes only the input elements that the
     * reference reads, never the full-size inputs or output. NULL: they are
     * made on the host and passed to run. */
    tsr_candidate_run_keyed_fn run_keyed;
    /* Sampled only: where the reference's whole inputs are kept between
     * checks; NULL: none. */
    tsr_oracle_memo *memo;
} tsr_oracle_options;

/* Verifies a candidate. Returns TSR_OK when the check ran (the verdict says pass
 * or fail); an error when probes could not be made or the candidate failed to
 * run (then v->pass is false and the error is in err). In sampled mode the
 * candidate's run is called with r for the probes at the real shape and with
 * opts->small for the others. */
tsr_status tsr_oracle_verify(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                             const tsr_oracle_options *opts, tsr_verdict *v, tsr_error *err);

/* ---- sampled verification ---- */

/* The flat output positions that sampled probe `probe` compares, ascending
 * without repeats, into *index (malloc'd; the caller frees) and *count. With
 * the output seen as rows x columns (M x N for the matmul-like kinds; the last
 * dimension for pointwise) and tiles of `tile` (<= 0: TSR_ORACLE_TILE):
 *   - the first and last row and column in full (a line longer than 65536:
 *     its first and last tile, and the coordinates below);
 *   - the corners of every edge tile (every tile when there are at most 512
 *     along a dimension; else the first and last 16 and 480 spread between);
 *   - a grid of seeded rows x seeded columns of about `samples` positions (<=
 *     0: TSR_ORACLE_SAMPLES), some rows and columns inside the first and last
 *     tile; pointwise also its first and last 4 tiles of flat positions.
 * Fused with a row reduction takes whole rows: the first and last two of the
 * first and last tile and max(16, samples / N) seeded ones. Attention takes
 * whole query rows: those rows of the first and last tile of seq_q in the
 * first and last (batch, head) and at the first kv-group boundary, and
 * max(32, samples / head_dim_v) seeded ones, taken a kv group at a time (a
 * seeded row and the same query position in every head of its group). A pure function of its
 * arguments; TSR_NO_MEMORY only. */
tsr_status tsr_oracle_sample(const tsr_region *r, int tile, uint64_t seed, int probe, int samples,
                             uint64_t **index, size_t *count, tsr_error *err);

/* The inputs of sampled probe `index` at r's own shape (nearly normal values
 * from one hash per element; seed 0 picks the default), made on `threads`
 * cores (<= 0: all), into arrays allocated as tsr_oracle_make_probe's (free
 * with tsr_oracle_free_probe). Also what a large region is timed on. */
tsr_status tsr_oracle_make_sampled_probe(const tsr_region *r, uint64_t seed, int index, int threads,
                                         void **inputs, tsr_error *err);

/* The values of sampled probe inputs, element by element, so that a device
 * can make full-size inputs while the host makes only the elements it reads.
 * tsr_oracle_sampled_key is input `input`'s key in probe `probe` (seed 0:
 * the default); element e of it is tsr_oracle_sampled_value(key, e) (nearly
 * normal, bounded by ±3.47, an f32) rounded to nearest even to the input's
 * dtype. tsr_oracle_sampled_fill writes elements first .. first + count of
 * one input at base[first ..], in dtype. tsr_oracle_sampled_fill_source is
 * CUDA C of one kernel, extern "C" TSR_ORACLE_FILL_ENTRY(void *dst, unsigned
 * long long n, unsigned long long key, int dtype (tsr_dtype's number)), that
 * writes elements 0 .. n of dst bit for bit as tsr_oracle_sampled_fill does,
 * from the same text (lib/oracle_gen.c); any 1-D grid covers every element.
 * The same source holds TSR_ORACLE_GATHER_ENTRY(void *dst, const void *src,
 * const unsigned long long *index, unsigned long long n, int size): dst[t] =
 * src[index[t]] for t < n, elements of size 2 or 4 bytes (the sampled
 * outputs). Pure; the source is static. */
#define TSR_ORACLE_FILL_ENTRY "tsr_probe_fill"
#define TSR_ORACLE_GATHER_ENTRY "tsr_probe_gather"
uint64_t tsr_oracle_sampled_key(uint64_t seed, int probe, int input);
float tsr_oracle_sampled_value(uint64_t key, uint64_t e);
void tsr_oracle_sampled_fill(tsr_dtype dtype, void *base, uint64_t first, uint64_t count,
                             uint64_t key);
const char *tsr_oracle_sampled_fill_source(void);

/* The reference at the positions index[0..count) (ascending, as
 * tsr_oracle_sample gives them) of sampled probe `probe`'s inputs, into out
 * (dense in r->out_dtype), bit for bit what tsr_ref_run_at writes on the full
 * inputs of tsr_oracle_make_sampled_probe, but making only the input elements
 * the reference reads: the A rows and the B columns (all of B when a row is
 * wanted whole) of matmul-like kinds, the keys and values of the kv heads the
 * query rows read for attention, the elements pointwise positions read. Uses
 * `threads` cores (<= 0: all). TSR_INVALID_ARGUMENT for a position out of
 * range or order, TSR_NO_MEMORY when memory or address space cannot be had. */
tsr_status tsr_oracle_sampled_reference(const tsr_region *r, uint64_t seed, int probe,
                                        const uint64_t *index, size_t count, void *out, int threads,
                                        tsr_error *err);

/* The small shape that sampled verification runs in full: r with every
 * tiled dimension D above 2·tile cut to tile + (D mod tile) (2·tile when
 * tile divides D), so that the ragged edges, the divisibility and the tile
 * boundaries of the real shape recur; head dims, dtypes and ops unchanged.
 * Attention keeps at most 2 batches and 2 kv heads (with their query-head
 * group) and the causal order of seq_q and seq_k; pointwise cuts its last
 * dimension so and every other to at most 3, keeping broadcast dimensions.
 * *out is a validated region (free with tsr_region_free). */
tsr_status tsr_oracle_small_region(const tsr_region *r, int tile, tsr_region *out, tsr_error *err);

/* What a verification with these options costs the CPU, beyond the
 * candidate's own runs: probe inputs, the reference and the comparison, in
 * tsr_ref_work units (a full verification counts its reference runs only:
 * probes · tsr_ref_work; a sampled one counts its first probe's positions
 * for each probe at the real shape). real_probes and small_probes are the
 * probes it runs at r's shape and at opts->small's. */
typedef struct tsr_oracle_cost {
    int real_probes;
    int small_probes;
    double work;
} tsr_oracle_cost;

void tsr_oracle_cost_of(const tsr_region *r, const tsr_oracle_options *opts, tsr_oracle_cost *out);

/* One line for a person: "PASS rel 3.1e-07 <= 1e-05 (max abs 2.4e-06, 8192
 * elements, 4 probes)" or "FAIL ..."; a sampled verdict says "sampled" after
 * PASS or FAIL and how many elements were sampled at the real shape and how
 * many probes ran at the small one. Writes at most size bytes. */
void tsr_verdict_format(const tsr_verdict *v, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
