/*
 * tessera/arbiter.h — candidate registry and selection policy (docs/arbiter.md).
 *
 * Candidates are registered per backend with a name, a tier (0 the CPU
 * reference, 1 Tier-1 generated code, 2 emitted tensor-core variants, 3
 * hand-tuned kernels shipped in kernels/), a version, the region kinds they
 * serve and an `applies` predicate. The arbiter picks one per request:
 *
 *   1. A forced candidate (request->force) is the only one considered. An
 *      unknown name, or one that does not apply, is TSR_ARBITER with a message
 *      listing the registered candidates for the kind; never a silent
 *      substitute. A forced candidate that fails verification is
 *      TSR_VERIFY_FAILED.
 *   2. Otherwise the candidates that apply and pass verification: policy TIER
 *      takes the highest tier (ties go to registration order), policy MEASURE
 *      times them through request->measure and keeps the fastest; the winner is
 *      remembered per (arch, kind, dtype, shape bucket) and, with a store
 *      directory, persisted so that it is reused after a restart.
 *   3. Nothing left: the tier-0 reference when request->allow_reference and
 *      no request->reference_refused, otherwise TSR_ARBITER naming every
 *      candidate and why it was not taken.
 *
 * request->verify false means "do not verify" in every rule: candidates that
 * apply are taken as passing, the decision says verify_skipped and the
 * statistics count it (unverified).
 *
 * Tier-0 candidates are the reference itself and are never verified against
 * it. Verdicts are cached per (candidate name, version, region fingerprint,
 * arch), so a candidate is verified once per region and device kind; with a
 * remote place that shares verdicts (tsr_arbiter_remote), once per fleet. A
 * candidate whose kernel takes dimensions at run time (its variant callback)
 * is verified completely once per variant; a new shape of a variant that
 * passed gets only its sampled check (verify_shape_fn), and any failure
 * withdraws the variant's pass.
 *
 * The arbiter holds no device state: verification and timing are callbacks the
 * backend supplies.
 *
 * Threading: all functions are thread-safe (one internal mutex); callbacks are
 * called without it held and may run concurrently. Blocking: select and explain
 * block for as long as the verify / measure callbacks do.
 */
#ifndef TESSERA_ARBITER_H
#define TESSERA_ARBITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/fingerprint.h"
#include "tessera/oracle.h"
#include "tessera/region.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_CANDIDATE_NAME_MAX 48

typedef struct tsr_candidate tsr_candidate;

struct tsr_candidate {
    char name[TSR_CANDIDATE_NAME_MAX]; /* unique within a kind: "reference", "tier1", ... */
    int tier;                          /* 0..3 */
    uint32_t version;                  /* bump when its output can change */
    unsigned kinds;                    /* bit (1u << tsr_region_kind) per kind served */
    double tolerance;                  /* documented relative bound; 0 = dtype default */
    /* True when the candidate can serve r on arch ("sm_90a", "cpu"). When it
     * declines, it writes a short reason into why. NULL means "applies to every
     * region of its kinds". */
    bool (*applies)(const tsr_candidate *c, const tsr_region *r, const char *arch, char *why,
                    size_t why_len);
    void *impl; /* the backend's own data (code generator, kernel entry, ...) */
    /* The output tile edge the kernel works in, for sampled verification's
     * edge tiles and small shape (oracle.h); 0: TSR_ORACLE_TILE. */
    int tile;
    /* Considered only when forced by name (a test candidate that must never
     * be chosen on its own); declines every other selection. */
    bool forced_only;
    /* The kernel variant that serves r on arch (fingerprint.h): the
     * dimensions its binary takes at run time and a class for whatever else
     * of the shape its code depends on. One binary, and one complete
     * verification, serve every shape of a variant. NULL: every dimension is
     * baked in (the variant is the region). Pure function of its arguments. */
    void (*variant)(const tsr_candidate *c, const tsr_region *r, const char *arch,
                    tsr_variant *out);
};

/* c's variant for r on arch (*v, may be NULL) and its fingerprint: the key
 * its binary is cached under and its verdicts are shared by. */
tsr_status tsr_candidate_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 tsr_variant *v, tsr_fingerprint *out, tsr_error *err);

typedef struct tsr_arbiter tsr_arbiter;

typedef enum tsr_policy {
    TSR_POLICY_TIER = 0,
    TSR_POLICY_MEASURE = 1,
} tsr_policy;

typedef enum tsr_decision_reason {
    TSR_REASON_FORCED = 0,
    TSR_REASON_TIER = 1,
    TSR_REASON_MEASURED = 2,
    TSR_REASON_FALLBACK = 3,
} tsr_decision_reason;

/* "forced", "tier", "measured", "fallback". */
const char *tsr_decision_reason_name(tsr_decision_reason reason);

/* store_dir: where measured winners persist (a file inside it); NULL keeps them
 * in memory only. TSR_IO_ERROR when the store exists but cannot be read. */
tsr_status tsr_arbiter_create(const char *store_dir, tsr_arbiter **out, tsr_error *err);
void tsr_arbiter_destroy(tsr_arbiter *a);

/* Copies *c into the registry. TSR_CONFLICT when a candidate of the same name
 * already serves one of the same kinds; TSR_INVALID_ARGUMENT for a bad tier or
 * an empty name. Registration order matters for tier ties. */
tsr_status tsr_arbiter_register(tsr_arbiter *a, const tsr_candidate *c, tsr_error *err);

/* Runs candidate c on probes and fills *v (see oracle.h); returns non-OK only
 * when verification could not run. */
typedef tsr_status (*tsr_arbiter_verify_fn)(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                            tsr_verdict *v, tsr_error *err);
/* Times candidate c on the device: median milliseconds of repeated runs, warm-up
 * excluded. */
typedef tsr_status (*tsr_arbiter_measure_fn)(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                             double *median_ms, tsr_error *err);

typedef struct tsr_select_request {
    const tsr_region *region;
    const tsr_fingerprint *fingerprint; /* of region */
    const char *arch;                   /* "sm_90a", "cpu" */
    const char *force;                  /* NULL or "" = no forced candidate */
    tsr_policy policy;
    bool verify;          /* false: no candidate is verified, in any rule (skip_verify) */
    bool allow_reference; /* rule 3 may fall back to tier 0 */
    /* Non-NULL: why rule 3 may not take the tier-0 reference even though
     * allow_reference (a device backend's reference launch past the work
     * bound); it is that candidate's reason in the error. */
    const char *reference_refused;
    tsr_arbiter_verify_fn verify_fn; /* NULL: candidates are taken as verified */
    /* The check of a new shape of a variant that passed a complete
     * verification at another shape (docs/arbiter.md, "Variants"): the
     * sampled check at the region's own shape. NULL: every shape gets
     * verify_fn. */
    tsr_arbiter_verify_fn verify_shape_fn;
    tsr_arbiter_measure_fn measure_fn; /* needed for TSR_POLICY_MEASURE */
    void *ctx;                         /* passed to both callbacks */
} tsr_select_request;

typedef struct tsr_decision {
    tsr_candidate candidate; /* a copy of the chosen candidate */
    tsr_decision_reason reason;
    bool verified;       /* verdict holds a real verification */
    bool verdict_cached; /* verdict came from the verdict cache */
    bool verify_skipped; /* chosen without verification because request->verify was false */
    tsr_verdict verdict;
} tsr_decision;

tsr_status tsr_arbiter_select(tsr_arbiter *a, const tsr_select_request *req, tsr_decision *out,
                              tsr_error *err);

/* One row per registered candidate of the region's kind, for `candidates`. */
typedef struct tsr_candidate_report {
    tsr_candidate candidate;
    bool applies;
    bool selected;
    bool verified;
    tsr_verdict verdict;
    char why[160]; /* "declines: K not a multiple of 8", "selected: highest tier", ... */
} tsr_candidate_report;

/* Runs the same selection as tsr_arbiter_select and reports every candidate.
 * *rows is malloc'd (caller frees); *count its length. A selection failure is
 * not an error here: no row is marked selected and *select_status/select_err
 * say why. */
tsr_status tsr_arbiter_explain(tsr_arbiter *a, const tsr_select_request *req,
                               tsr_candidate_report **rows, size_t *count,
                               tsr_status *select_status, tsr_error *select_err, tsr_error *err);

/* Looks a registered candidate up by kind and name; NULL when absent. The
 * pointer stays valid until tsr_arbiter_destroy. */
const tsr_candidate *tsr_arbiter_find(tsr_arbiter *a, tsr_region_kind kind, const char *name);

/* Dispatch statistics per (kind, candidate). */
typedef struct tsr_candidate_stats {
    tsr_region_kind kind;
    char name[TSR_CANDIDATE_NAME_MAX];
    uint64_t won, forced, declined, failed_verification;
    uint64_t unverified; /* chosen (won or forced) without verification: verify=false */
} tsr_candidate_stats;

/* *rows is malloc'd (caller frees). One row per (kind served, candidate). */
tsr_status tsr_arbiter_stats(tsr_arbiter *a, tsr_candidate_stats **rows, size_t *count,
                             tsr_error *err);

/* Shape bucket used to key measured winners: each dimension rounded up to a
 * power of two. Written as "m4096n4096k4096"-style text into buf. */
void tsr_arbiter_shape_bucket(const tsr_region *r, char *buf, size_t size);

/* A place measured winners and verdicts are shared through (tesserad's fleet
 * cache). A winner's key is
 * "ARCH/KIND/DTYPE/BUCKET" (at most TSR_ARBITER_WINNER_KEY_MAX bytes with its
 * NUL). winner_get fills name (TSR_CANDIDATE_NAME_MAX bytes), *version and
 * *median_ms and returns true when it has a winner for key; it is asked when
 * this arbiter has none, and what it returns is used as a stored winner (it
 * must still apply and pass verification, and is remembered here once it is
 * chosen). winner_put is told every winner this arbiter measures. Both are
 * called without the arbiter's lock, on the selecting thread, and may block
 * (briefly). */
#define TSR_ARBITER_WINNER_KEY_MAX 160

/* What a verdict shared through the remote place is about: a candidate (name
 * and version) on a region (its fingerprint) or, for a variant's record (the
 * complete verification every shape of the variant leans on), on a variant
 * (the variant's fingerprint, variant true), on arch. The place adds what else
 * of the node a verdict depends on (tesserad: the driver and toolkit
 * versions). */
typedef struct tsr_arbiter_verdict_key {
    const char *name;
    uint32_t version;
    const tsr_fingerprint *fingerprint;
    bool variant;
    const char *arch;
} tsr_arbiter_verdict_key;

/* verdict_get fills *out and returns true when the place holds a verdict for
 * key that it vouches for; it is asked when this arbiter's verdict cache has
 * none, before verifying, and what it returns is used, and cached here, as if
 * this arbiter had verified. verdict_put is told the verdict of every complete
 * verification this arbiter runs (passing or failing; never the sampled check
 * of a new shape of a variant, never verify=false). Both may be NULL; the
 * winners' rules on threads and blocking hold for them too. */
typedef struct tsr_arbiter_remote {
    bool (*winner_get)(void *ctx, const char *key, char *name, uint32_t *version,
                       double *median_ms);
    void (*winner_put)(void *ctx, const char *key, const char *name, uint32_t version,
                       double median_ms);
    bool (*verdict_get)(void *ctx, const tsr_arbiter_verdict_key *key, tsr_verdict *out);
    void (*verdict_put)(void *ctx, const tsr_arbiter_verdict_key *key, const tsr_verdict *v);
    void *ctx;
} tsr_arbiter_remote;

/* How many verifications this arbiter ran (verify_fn and verify_shape_fn
 * calls that gave a verdict, passing or failing; one that could not run, and
 * verdicts from its cache or the remote place, are not counted). */
uint64_t tsr_arbiter_verifications(tsr_arbiter *a);

/* Sets the remote place (copied; ctx must outlive the arbiter). Call it before
 * the first selection: it is not synchronised with them. */
void tsr_arbiter_set_remote(tsr_arbiter *a, const tsr_arbiter_remote *remote);

#ifdef __cplusplus
}
#endif
#endif
