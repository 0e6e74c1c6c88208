/*
 * oracle.c — verification of a candidate against the CPU reference (docs/architecture.md,
 * "Oracle").
 *
 * Probe inputs are made here, deterministically from a seed and a probe index, so
 * that a failing verdict can be reproduced by anyone who has the region, the seed
 * and the index. Random probes are standard-normal values from splitmix64 and the
 * polar form of Box–Muller; the polar form needs only log and sqrt, and since
 * every value is then rounded to the storage dtype, a last-bit difference between
 * two libm implementations of log almost never shows in a probe.
 *
 * Pointwise regions also get special-value probes. Each input element takes one
 * value from a fixed list (NaN, ±inf, ±0, the dtype's largest finite, a value
 * whose square overflows, the smallest normal and subnormal, and the edges of
 * log, sqrt, pow and exp), and the probes are laid out so that every input meets
 * every listed value against every value of every other input: the list length S
 * is prime, probe p shifts input i's cycle by p·(i+1), so two inputs see every
 * offset p·(j−i) mod S between them. When an input has fewer than S elements the
 * probes repeat with the cycle continued (R rounds), which keeps that property for
 * inputs of one shape; broadcast inputs still see every value, and most pairs.
 *
 * Comparison follows oracle.h: NaN and inf positions must agree exactly (inf signs
 * included), and the relative L2 error over entries finite in both must be within
 * the bound. A probe whose reference is all zeros over its finite entries has no
 * scale to be relative to; there the largest absolute error is held against the
 * bound instead.
 */
#include "tessera/oracle.h"
#include "oracle_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/refexec.h"

#define ORACLE_DEFAULT_SEED TSRI_ORACLE_DEFAULT_SEED
#define ORACLE_DEFAULT_RANDOM_PROBES 2

#define ORACLE_SPECIALS TSRI_ORACLE_SPECIALS

_Static_assert(ORACLE_SPECIALS > TSR_MAX_PW_INPUTS, "special list shorter than the inputs");

/* ---- deterministic normal values ---- */

uint64_t tsri_oracle_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* splitmix64: one 64-bit state, good enough for probe data and identical on
 * every platform. */
struct oracle_rng {
    uint64_t state;
    double spare;
    bool has_spare;
};

uint64_t tsri_oracle_next(uint64_t *state)
{
    *state += UINT64_C(0x9e3779b97f4a7c15);
    return tsri_oracle_mix64(*state);
}

static uint64_t oracle_rng_next(struct oracle_rng *g)
{
    return tsri_oracle_next(&g->state);
}

/* A uniform double in (-1, 1), from the top 53 bits. */
static double oracle_rng_signed_unit(struct oracle_rng *g)
{
    double u = (double)(oracle_rng_next(g) >> 11) * 0x1.0p-53; /* [0, 1) */
    return 2.0 * u - 1.0;
}

static double oracle_rng_normal(struct oracle_rng *g)
{
    if (g->has_spare) {
        g->has_spare = false;
        return g->spare;
    }
    double x, y, s;
    do {
        x = oracle_rng_signed_unit(g);
        y = oracle_rng_signed_unit(g);
        s = x * x + y * y;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    g->spare = y * f;
    g->has_spare = true;
    return x * f;
}

/* One independent stream per (seed, probe, input). */
static void oracle_rng_seed(struct oracle_rng *g, uint64_t seed, int probe, int input)
{
    uint64_t s = tsri_oracle_mix64(seed ^ UINT64_C(0x6a09e667f3bcc908));
    s = tsri_oracle_mix64(s + (uint64_t)(uint32_t)probe * UINT64_C(0x9e3779b97f4a7c15));
    s = tsri_oracle_mix64(s + (uint64_t)(uint32_t)input * UINT64_C(0xd1b54a32d192ed03));
    g->state = s;
    g->has_spare = false;
    g->spare = 0.0;
}

/* ---- special values ---- */

/* The list for a storage dtype. Magnitudes that depend on the format (largest
 * finite, smallest normal and subnormal, a value whose square overflows) are the
 * dtype's own, so that none of them silently rounds to 0 or inf on the way in. */
void tsri_oracle_specials(tsr_dtype dtype, double out[TSRI_ORACLE_SPECIALS])
{
    double max, min_normal, min_sub, big;
    switch (dtype) {
    case TSR_F16:
        max = 65504.0;
        min_normal = ldexp(1.0, -14);
        min_sub = ldexp(1.0, -24);
        big = ldexp(1.0, 8);
        break;
    case TSR_BF16:
        max = ldexp(255.0, 120); /* 0x7f7f */
        min_normal = ldexp(1.0, -126);
        min_sub = ldexp(1.0, -133);
        big = ldexp(1.0, 64);
        break;
    case TSR_F32:
    default:
        max = ldexp(16777215.0, 104); /* FLT_MAX */
        min_normal = ldexp(1.0, -126);
        min_sub = ldexp(1.0, -149);
        big = ldexp(1.0, 64);
        break;
    }
    /* 88.5 keeps exp finite in f32 and 89 overflows it; exp(-100) underflows to
     * 0; -2.5, -0.5 and -1e-3 are outside the domain of log, sqrt and a
     * fractional pow; ±0 make reciprocal, rsqrt and log infinite. */
    const double list[ORACLE_SPECIALS] = {
        NAN, INFINITY, -INFINITY, 0.0,  -0.0, max,  -max, big,  -big, min_normal, min_sub, -min_sub,
        1.0, -1.0,     0.5,       -0.5, 2.0,  -2.5, 3.0,  88.5, 89.0, -100.0,     -1e-3,
    };
    memcpy(out, list, sizeof list);
}

/* The element count of the smallest input (at least 1). */
static int64_t oracle_min_elements(const tsr_tensor_desc *inputs, int n_inputs)
{
    int64_t min_n = INT64_MAX;
    for (int i = 0; i < n_inputs; i++) {
        int64_t n = tsr_tensor_desc_elements(&inputs[i]);
        if (n < min_n)
            min_n = n;
    }
    return min_n < 1 ? 1 : min_n;
}

/* Rounds of the special-value cycle needed so that the smallest input still
 * walks through the whole list: ceil(S / min_elements). */
static int oracle_special_rounds(const tsr_tensor_desc *inputs, int n_inputs)
{
    int64_t min_n = oracle_min_elements(inputs, n_inputs);
    if (min_n >= ORACLE_SPECIALS)
        return 1;
    return (int)((ORACLE_SPECIALS + min_n - 1) / min_n);
}

static int oracle_special_count(const tsr_region *r)
{
    if (r->kind != TSR_KIND_POINTWISE || r->u.pointwise.n_inputs == 0)
        return 0;
    tsr_tensor_desc inputs[TSR_MAX_REGION_INPUTS], output;
    int n = tsr_region_signature(r, inputs, &output);
    return ORACLE_SPECIALS * oracle_special_rounds(inputs, n);
}

int tsr_oracle_probe_count(const tsr_region *r, int random_probes)
{
    if (random_probes <= 0)
        random_probes = ORACLE_DEFAULT_RANDOM_PROBES;
    return random_probes + oracle_special_count(r);
}

void tsr_oracle_free_probe(const tsr_region *r, void **inputs)
{
    if (r == NULL || inputs == NULL)
        return;
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], output;
    int n = tsr_region_signature(r, descs, &output);
    for (int i = 0; i < n; i++) {
        free(inputs[i]);
        inputs[i] = NULL;
    }
}

tsr_status tsri_oracle_alloc_inputs(const tsr_region *r, bool zeroed, void **inputs,
                                    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], int *n,
                                    tsr_error *err)
{
    tsr_tensor_desc output;
    *n = tsr_region_signature(r, descs, &output);
    for (int i = 0; i < *n; i++)
        inputs[i] = NULL;
    for (int i = 0; i < *n; i++) {
        uint64_t bytes = tsr_tensor_desc_bytes(&descs[i]);
        size_t size = bytes ? (size_t)bytes : 1;
        if (bytes > SIZE_MAX || (inputs[i] = zeroed ? calloc(1, size) : malloc(size)) == NULL) {
            tsr_oracle_free_probe(r, inputs);
            return tsr_error_set(err, TSR_NO_MEMORY, "probe: %llu bytes for input '%s'",
                                 (unsigned long long)bytes, descs[i].name);
        }
    }
    return TSR_OK;
}

tsr_status tsr_oracle_make_probe(const tsr_region *r, uint64_t seed, int index, int random_probes,
                                 void **inputs, tsr_error *err)
{
    if (r == NULL || inputs == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "probe: NULL argument");
    if (seed == 0)
        seed = ORACLE_DEFAULT_SEED;
    if (random_probes <= 0)
        random_probes = ORACLE_DEFAULT_RANDOM_PROBES;
    int count = tsr_oracle_probe_count(r, random_probes);
    if (index < 0 || index >= count)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "probe: index %d outside 0..%d", index,
                             count - 1);

    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS];
    int n;
    tsr_status st = tsri_oracle_alloc_inputs(r, false, inputs, descs, &n, err);
    if (st != TSR_OK)
        return st;

    if (index < random_probes) {
        for (int i = 0; i < n; i++) {
            struct oracle_rng g;
            oracle_rng_seed(&g, seed, index, i);
            int64_t elems = tsr_tensor_desc_elements(&descs[i]);
            for (int64_t e = 0; e < elems; e++)
                tsr_dtype_store(descs[i].dtype, inputs[i], (size_t)e, oracle_rng_normal(&g));
        }
        return TSR_OK;
    }

    /* Special probe q = p + S·round: input i's element e takes list entry
     * (e + min_elements·round + p·(i+1)) mod S. */
    double specials[ORACLE_SPECIALS];
    tsri_oracle_specials(r->dtype, specials);
    int q = index - random_probes;
    uint64_t p = (uint64_t)(q % ORACLE_SPECIALS);
    uint64_t round = (uint64_t)(q / ORACLE_SPECIALS);
    uint64_t base = (uint64_t)oracle_min_elements(descs, n) * round;
    for (int i = 0; i < n; i++) {
        int64_t elems = tsr_tensor_desc_elements(&descs[i]);
        uint64_t shift = base + p * (uint64_t)(i + 1);
        for (int64_t e = 0; e < elems; e++) {
            uint64_t k = ((uint64_t)e + shift) % ORACLE_SPECIALS;
            tsr_dtype_store(descs[i].dtype, inputs[i], (size_t)e, specials[k]);
        }
    }
    return TSR_OK;
}

/* ---- comparison ---- */

void tsr_verdict_init(tsr_verdict *v, double bound, tsr_dtype dtype)
{
    memset(v, 0, sizeof *v);
    v->pass = false; /* nothing compared is nothing verified */
    v->bound = bound > 0 ? bound : tsr_dtype_tolerance(dtype);
    v->first_bad_index = -1;
    v->first_bad_probe = -1;
    snprintf(v->reason, sizeof v->reason, "no probes compared");
}

static bool oracle_has_first(const tsr_verdict *v)
{
    return v->first_bad_probe >= 0;
}

static void oracle_note_first(tsr_verdict *v, int probe, uint64_t index, const char *where,
                              double got, double want, const char *what)
{
    if (oracle_has_first(v))
        return;
    v->first_bad_index = (int64_t)index;
    v->first_bad_probe = probe;
    v->first_bad_got = got;
    v->first_bad_want = want;
    snprintf(v->reason, sizeof v->reason, "%s mismatch at [%llu] (probe %d%s): got %.9g want %.9g",
             what, (unsigned long long)index, probe, where, got, want);
}

void tsr_oracle_compare(tsr_verdict *v, int probe, tsr_dtype dtype, const void *got,
                        const void *want, size_t count)
{
    tsri_oracle_compare(v, probe, dtype, got, want, count, NULL, "");
}

void tsri_oracle_compare(tsr_verdict *v, int probe, tsr_dtype dtype, const void *got,
                         const void *want, size_t count, const uint64_t *index, const char *where)
{
    double diff2 = 0.0, want2 = 0.0, max_abs = 0.0;
    uint64_t worst = 0;
    double worst_got = 0.0, worst_want = 0.0;
    for (size_t i = 0; i < count; i++) {
        double g = tsr_dtype_load(dtype, got, i);
        double w = tsr_dtype_load(dtype, want, i);
        uint64_t at = index != NULL ? index[i] : i;
        if (isnan(g) || isnan(w)) {
            if (isnan(g) != isnan(w)) {
                v->nan_mismatches++;
                oracle_note_first(v, probe, at, where, g, w, "NaN");
            }
            continue;
        }
        if (isinf(g) || isinf(w)) {
            if (g != w) {
                v->inf_mismatches++;
                oracle_note_first(v, probe, at, where, g, w, "inf");
            }
            continue;
        }
        double d = fabs(g - w);
        diff2 += d * d;
        want2 += w * w;
        if (d > max_abs) {
            max_abs = d;
            worst = at;
            worst_got = g;
            worst_want = w;
        }
    }
    /* Norms are taken separately rather than as sqrt(diff2 / want2) so that a
     * reference with only subnormal entries does not lose its scale. */
    double rel = want2 > 0.0 ? sqrt(diff2) / sqrt(want2) : max_abs;

    v->elements += count;
    v->probes++;
    if (max_abs > v->max_abs_error)
        v->max_abs_error = max_abs;
    if (rel > v->rel_error)
        v->rel_error = rel;
    if (rel > v->bound && !oracle_has_first(v)) {
        v->first_bad_index = (int64_t)worst;
        v->first_bad_probe = probe;
        v->first_bad_got = worst_got;
        v->first_bad_want = worst_want;
        snprintf(v->reason, sizeof v->reason,
                 "%s %.3g > %.3g (probe %d%s); largest error at [%llu]: got %.9g want %.9g",
                 want2 > 0.0 ? "relative error" : "absolute error (zero reference)", rel, v->bound,
                 probe, where, (unsigned long long)worst, worst_got, worst_want);
    }
    v->pass = v->nan_mismatches == 0 && v->inf_mismatches == 0 && v->rel_error <= v->bound;
    if (v->pass)
        snprintf(v->reason, sizeof v->reason, "pass");
}

const char *tsr_verify_method_name(tsr_verify_method method)
{
    static const char *const names[] = {
        [TSR_VERIFY_FULL] = "full", [TSR_VERIFY_SAMPLED] = "sampled"};
    return (unsigned)method < sizeof names / sizeof *names ? names[method] : "?";
}

void tsr_verdict_format(const tsr_verdict *v, char *buf, size_t size)
{
    if (buf == NULL || size == 0)
        return;
    const char *probes = v->probes == 1 ? "probe" : "probes";
    bool sampled = v->method == TSR_VERIFY_SAMPLED;
    char counts[200];
    if (sampled)
        snprintf(counts, sizeof counts,
                 "%llu elements, %llu of them sampled at the real shape, %d %s, %d at a small "
                 "shape%s",
                 (unsigned long long)v->elements, (unsigned long long)v->sampled_elements,
                 v->probes, probes, v->small_probes,
                 v->variant_reused ? ", the variant's complete check reused" : "");
    else
        snprintf(counts, sizeof counts, "%llu elements, %d %s", (unsigned long long)v->elements,
                 v->probes, probes);
    const char *how = sampled ? " sampled" : "";
    if (v->pass) {
        snprintf(buf, size, "PASS%s rel %.2g <= %.2g (max abs %.2g, %s)", how, v->rel_error,
                 v->bound, v->max_abs_error, counts);
        return;
    }
    snprintf(buf, size,
             "FAIL%s %s (rel %.2g, bound %.2g, max abs %.2g, %llu NaN and %llu inf mismatches, "
             "%s)",
             how, v->reason, v->rel_error, v->bound, v->max_abs_error,
             (unsigned long long)v->nan_mismatches, (unsigned long long)v->inf_mismatches, counts);
}

/* ---- verify ---- */

/* Copies a candidate's failure into err with the probe named, keeping the
 * candidate's own message when it wrote one. */
static tsr_status oracle_candidate_failed(tsr_verdict *v, int probe, tsr_status st,
                                          const tsr_error *cerr, tsr_error *err)
{
    const char *msg = cerr->code == st && cerr->message[0] ? cerr->message : tsr_strerror(st);
    v->pass = false;
    snprintf(v->reason, sizeof v->reason, "candidate failed on probe %d: %s: %.100s", probe,
             tsr_status_name(st), msg);
    return tsr_error_set(err, st, "candidate failed on probe %d: %s", probe, msg);
}

tsr_status tsri_oracle_verify_full(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                                   const tsr_oracle_options *opts, tsr_verdict *v, tsr_error *err)
{
    tsr_oracle_options o = *opts;
    if (o.random_probes <= 0)
        o.random_probes = ORACLE_DEFAULT_RANDOM_PROBES;
    tsr_verdict_init(v, o.bound, r->out_dtype);

    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], out;
    (void)tsr_region_signature(r, descs, &out);
    uint64_t out_bytes = tsr_tensor_desc_bytes(&out);
    uint64_t out_elems = (uint64_t)tsr_tensor_desc_elements(&out);
    if (out_bytes > SIZE_MAX)
        return tsr_error_set(err, TSR_NO_MEMORY, "verify: output of %llu bytes",
                             (unsigned long long)out_bytes);
    void *got = malloc((size_t)out_bytes);
    void *want = malloc((size_t)out_bytes);
    if (got == NULL || want == NULL) {
        free(got);
        free(want);
        return tsr_error_set(err, TSR_NO_MEMORY, "verify: output of %llu bytes",
                             (unsigned long long)out_bytes);
    }

    tsr_status st = TSR_OK;
    int count = tsr_oracle_probe_count(r, o.random_probes);
    for (int probe = 0; probe < count && st == TSR_OK; probe++) {
        void *inputs[TSR_MAX_REGION_INPUTS] = {0};
        st = tsr_oracle_make_probe(r, o.seed, probe, o.random_probes, inputs, err);
        if (st != TSR_OK)
            break;
        const void *const *in = (const void *const *)inputs;
        st = tsr_ref_run(r, in, want, o.ref_threads, err);
        if (st != TSR_OK) {
            tsr_error_prefix(err, "reference on probe %d", probe);
            snprintf(v->reason, sizeof v->reason, "reference failed on probe %d", probe);
        } else {
            /* All-ones bytes are a NaN in every storage dtype, so output the
             * candidate never writes shows up as a NaN mismatch. */
            memset(got, 0xff, (size_t)out_bytes);
            tsr_error cerr;
            tsr_error_clear(&cerr);
            st = run(ctx, r, in, got, &cerr);
            if (st != TSR_OK)
                oracle_candidate_failed(v, probe, st, &cerr, err);
            else
                tsr_oracle_compare(v, probe, r->out_dtype, got, want, (size_t)out_elems);
        }
        tsr_oracle_free_probe(r, inputs);
    }
    free(got);
    free(want);
    if (st != TSR_OK)
        v->pass = false;
    return st;
}
