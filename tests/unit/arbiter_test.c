/*
 * arbiter_test.c — the candidate registry and selection policy (arbiter.h).
 *
 * Every candidate here is a fake: a verifier that passes or fails by candidate
 * name and counts its calls, a timer that returns fixed medians, and `applies`
 * predicates that decline on a rule of the region. That isolates the policy —
 * forced candidates, tiers, fallback, the verdict cache, measured winners and
 * their store file — from any real kernel.
 */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "../support/regions.h"

#define FAKE_MAX 8

typedef struct fake_count {
    char name[TSR_CANDIDATE_NAME_MAX]; /* a copy: candidates die with their arbiter */
    int calls;
} fake_count;

typedef struct fake_time {
    const char *name;
    double ms;
} fake_time;

/* The callbacks' shared context: which names fail, how long each takes, and how
 * often each was asked. */
typedef struct fake_ctx {
    const char *failing[FAKE_MAX];
    const char *broken[FAKE_MAX]; /* verification cannot run at all */
    fake_time times[FAKE_MAX];
    fake_count verified[FAKE_MAX];
    fake_count measured[FAKE_MAX];
} fake_ctx;

static bool fake_listed(const char *const *list, const char *name)
{
    for (int i = 0; i < FAKE_MAX && list[i] != NULL; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

static void fake_bump(fake_count *counts, const char *name)
{
    for (int i = 0; i < FAKE_MAX; i++) {
        if (counts[i].name[0] == '\0')
            snprintf(counts[i].name, sizeof counts[i].name, "%s", name);
        if (strcmp(counts[i].name, name) == 0) {
            counts[i].calls++;
            return;
        }
    }
    cr_assert_fail("too many names counted");
}

static int fake_calls(const fake_count *counts, const char *name)
{
    for (int i = 0; i < FAKE_MAX && counts[i].name[0] != '\0'; i++)
        if (strcmp(counts[i].name, name) == 0)
            return counts[i].calls;
    return 0;
}

static int fake_total(const fake_count *counts)
{
    int total = 0;
    for (int i = 0; i < FAKE_MAX && counts[i].name[0] != '\0'; i++)
        total += counts[i].calls;
    return total;
}

/* Counts a call of verify (or of measure) on the named candidate. */
static fake_ctx *fake_called(void *ctx, bool verify, const char *name)
{
    fake_ctx *f = ctx;
    fake_bump(verify ? f->verified : f->measured, name);
    return f;
}

static tsr_status fake_verify(void *ctx, const tsr_candidate *c, const tsr_region *r,
                              tsr_verdict *v, tsr_error *err)
{
    (void)r;
    fake_ctx *f = fake_called(ctx, true, c->name);
    if (fake_listed(f->broken, c->name))
        return tsr_error_set(err, TSR_COMPILE_FAILED, "%s: nvrtc: syntax error", c->name);
    bool fail = fake_listed(f->failing, c->name);
    memset(v, 0, sizeof *v);
    v->pass = !fail;
    v->probes = 2;
    v->elements = 8192;
    v->bound = 1.6e-2;
    v->rel_error = fail ? 0.5 : 1e-3;
    v->first_bad_index = fail ? 7 : -1;
    v->first_bad_probe = fail ? 0 : -1;
    snprintf(v->reason, sizeof v->reason, "%s", fail ? "rel 0.5 > 0.016" : "pass");
    return TSR_OK;
}

static tsr_status fake_measure(void *ctx, const tsr_candidate *c, const tsr_region *r,
                               double *median_ms, tsr_error *err)
{
    (void)r;
    fake_ctx *f = fake_called(ctx, false, c->name);
    for (int i = 0; i < FAKE_MAX && f->times[i].name != NULL; i++) {
        if (strcmp(f->times[i].name, c->name) == 0) {
            *median_ms = f->times[i].ms;
            return TSR_OK;
        }
    }
    return tsr_error_set(err, TSR_CUDA_ERROR, "%s: CUDA_ERROR_LAUNCH_FAILED", c->name);
}

/* Declines any matmul whose K is not a multiple of 8, the way a tensor-core
 * kernel would. */
static bool fake_applies_k8(const tsr_candidate *c, const tsr_region *r, const char *arch,
                            char *why, size_t why_len)
{
    (void)c;
    (void)arch;
    if (r->u.matmul.k % 8 == 0)
        return true;
    snprintf(why, why_len, "K not a multiple of 8");
    return false;
}

static bool fake_applies_never(const tsr_candidate *c, const tsr_region *r, const char *arch,
                               char *why, size_t why_len)
{
    (void)c;
    (void)r;
    (void)arch;
    snprintf(why, why_len, "needs sm_100");
    return false;
}

#define KIND_BIT(k) (1u << (k))

static tsr_candidate fake_candidate(const char *name, int tier, uint32_t version,
                                    bool (*applies)(const tsr_candidate *, const tsr_region *,
                                                    const char *, char *, size_t))
{
    tsr_candidate c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.tier = tier;
    c.version = version;
    c.kinds = KIND_BIT(TSR_KIND_MATMUL);
    c.applies = applies;
    return c;
}

static void reg(tsr_arbiter *arb, tsr_candidate c)
{
    tsr_error err;
    tsr_status st = tsr_arbiter_register(arb, &c, &err);
    cr_assert_eq(st, TSR_OK, "register %s: %s", c.name, err.message);
}

/* One matmul region, its fingerprint and a default request for it. */
typedef struct fixture {
    tsr_region region;
    tsr_fingerprint fp;
    fake_ctx ctx;
    tsr_select_request req;
} fixture;

static void fixture_init(fixture *fx, int64_t k)
{
    char json[160];
    tsr_error err;
    memset(fx, 0, sizeof *fx);
    snprintf(json, sizeof json,
             "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":64,\"n\":64,\"k\":%lld}", (long long)k);
    fx->region = regions_parse(json);
    cr_assert_eq(tsr_region_fingerprint(&fx->region, &fx->fp, &err), TSR_OK, "%s", err.message);
    fx->req.region = &fx->region;
    fx->req.fingerprint = &fx->fp;
    fx->req.arch = "sm_90a";
    fx->req.policy = TSR_POLICY_TIER;
    fx->req.verify = true;
    fx->req.verify_fn = fake_verify;
    fx->req.measure_fn = fake_measure;
    fx->req.ctx = &fx->ctx;
}

static tsr_arbiter *arbiter_new(const char *dir)
{
    tsr_arbiter *arb = NULL;
    tsr_error err;
    cr_assert_eq(tsr_arbiter_create(dir, &arb, &err), TSR_OK, "%s", err.message);
    cr_assert_not_null(arb);
    return arb;
}

/* reference (0), tier1 (1), gemm_wgmma (3): the hand-tuned kernel comes last. */
static tsr_arbiter *arbiter_standard(void)
{
    tsr_arbiter *arb = arbiter_new(NULL);
    reg(arb, fake_candidate("reference", 0, 1, NULL));
    reg(arb, fake_candidate("tier1", 1, 1, NULL));
    reg(arb, fake_candidate("gemm_wgmma", 3, 1, fake_applies_k8));
    return arb;
}

static tsr_candidate_stats stats_of(tsr_arbiter *arb, tsr_region_kind kind, const char *name)
{
    tsr_candidate_stats *rows = NULL, found;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_arbiter_stats(arb, &rows, &n, &err), TSR_OK);
    memset(&found, 0, sizeof found);
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].kind == kind && strcmp(rows[i].name, name) == 0) {
            found = rows[i];
            seen = true;
        }
    }
    free(rows);
    cr_assert(seen, "no stats row for %s", name);
    return found;
}

#define ASSERT_STATS(arb, name, w, f, d, v)                                                        \
    do {                                                                                           \
        tsr_candidate_stats s_ = stats_of((arb), TSR_KIND_MATMUL, (name));                         \
        cr_expect_eq(s_.won, (w), "%s won %llu", (name), (unsigned long long)s_.won);              \
        cr_expect_eq(s_.forced, (f), "%s forced %llu", (name), (unsigned long long)s_.forced);     \
        cr_expect_eq(s_.declined, (d), "%s declined %llu", (name),                                 \
                     (unsigned long long)s_.declined);                                             \
        cr_expect_eq(s_.failed_verification, (v), "%s failed %llu", (name),                        \
                     (unsigned long long)s_.failed_verification);                                  \
    } while (0)

/* A fresh store directory under /tmp; store_cleanup removes what the arbiter
 * puts there. */
static void store_make(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/arbiter_test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void store_path(const char *dir, char *path, size_t size)
{
    snprintf(path, size, "%s/arbiter-winners.json", dir);
}

static void store_cleanup(const char *dir)
{
    char path[256];
    store_path(dir, path, sizeof path);
    unlink(path);
    rmdir(dir);
}

static char *file_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static void file_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* ---- per-test state ----
 *
 * Criterion runs each test in a process of its own, so one file-scope state
 * serves every test: the test's .init fills it and its .fini releases it. fx is
 * a matmul region (K = 64 unless the init says 60) with its request; a is the
 * arbiter; store_dir a fresh store directory for the tests of the store. */

static fixture fx;
static tsr_arbiter *a;
static char store_dir[64];

/* reference (0), tier1 (1), emit (2), gemm_wgmma (3); emit is the fastest. */
static tsr_arbiter *arbiter_measured(const char *dir, fixture *f)
{
    tsr_arbiter *arb = arbiter_new(dir);
    reg(arb, fake_candidate("reference", 0, 1, NULL));
    reg(arb, fake_candidate("tier1", 1, 1, NULL));
    reg(arb, fake_candidate("emit", 2, 1, NULL));
    reg(arb, fake_candidate("gemm_wgmma", 3, 1, fake_applies_k8));
    f->ctx.times[0] = (fake_time){"tier1", 1.0};
    f->ctx.times[1] = (fake_time){"emit", 0.5};
    f->ctx.times[2] = (fake_time){"gemm_wgmma", 0.8};
    f->ctx.times[3] = (fake_time){"reference", 0.1};
    f->req.policy = TSR_POLICY_MEASURE;
    return arb;
}

static void init_standard_arbiter(void)
{
    a = arbiter_standard();
}

static void init_standard(void)
{
    fixture_init(&fx, 64);
    a = arbiter_standard();
}

static void init_standard_k60(void)
{
    fixture_init(&fx, 60);
    a = arbiter_standard();
}

static void init_empty(void)
{
    fixture_init(&fx, 64);
    a = arbiter_new(NULL);
}

static void init_empty_k60(void)
{
    fixture_init(&fx, 60);
    a = arbiter_new(NULL);
}

static void init_measured(void)
{
    fixture_init(&fx, 64);
    a = arbiter_measured(NULL, &fx);
}

static void init_store_dir(void)
{
    store_make(store_dir, sizeof store_dir);
}

/* A store directory and the region, but no arbiter yet: the test writes a
 * store file for the arbiter it then creates. */
static void init_store(void)
{
    init_store_dir();
    fixture_init(&fx, 64);
}

static void init_store_measured(void)
{
    init_store();
    a = arbiter_measured(store_dir, &fx);
}

static void fini_arbiter(void)
{
    tsr_arbiter_destroy(a);
}

/* tsr_arbiter_select of req on the suite's arbiter, asserted to succeed. */
static tsr_decision select_req(const tsr_select_request *req)
{
    tsr_decision d;
    tsr_error err;
    cr_assert_eq(tsr_arbiter_select(a, req, &d, &err), TSR_OK, "%s", err.message);
    return d;
}

static void fini_store(void)
{
    tsr_arbiter_destroy(a);
    store_cleanup(store_dir);
}

/* Selects for f's request: the selection succeeds and picks name. */
static tsr_decision select_on(fixture *f, const char *name)
{
    tsr_decision d = select_req(&f->req);
    cr_expect_str_eq(d.candidate.name, name);
    return d;
}

static tsr_decision select_ok(const char *name)
{
    return select_on(&fx, name);
}

/* Ends the arbiter within a test (a daemon restart); fini then has none left. */
static void arbiter_drop(void)
{
    tsr_arbiter_destroy(a);
    a = NULL;
}

/* ---- registry ---- */

Test(arbiter, register_rejects_duplicates_and_bad_fields, .init = init_standard_arbiter,
     .fini = fini_arbiter)
{
    tsr_error err;
    tsr_candidate c = fake_candidate("tier1", 2, 1, NULL);
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_CONFLICT);
    cr_expect_str_eq(err.message, "candidate 'tier1' is already registered for matmul");

    c.kinds = KIND_BIT(TSR_KIND_GATED) | KIND_BIT(TSR_KIND_MATMUL);
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_CONFLICT);
    c.kinds = KIND_BIT(TSR_KIND_GATED); /* the same name for another kind is fine */
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_OK);

    c = fake_candidate("hopper", 4, 1, NULL);
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "candidate 'hopper': tier 4 not in 0..3");
    c.tier = -1;
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_INVALID_ARGUMENT);
    c = fake_candidate("", 1, 1, NULL);
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_INVALID_ARGUMENT);
    c = fake_candidate("nokind", 1, 1, NULL);
    c.kinds = 0;
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_INVALID_ARGUMENT);
    c.kinds = 1u << TSR_KIND_COUNT;
    cr_expect_eq(tsr_arbiter_register(a, &c, &err), TSR_INVALID_ARGUMENT);
}

Test(arbiter, find_looks_up_by_kind_and_name, .init = init_standard_arbiter, .fini = fini_arbiter)
{
    const tsr_candidate *c = tsr_arbiter_find(a, TSR_KIND_MATMUL, "gemm_wgmma");
    cr_assert_not_null(c);
    cr_expect_eq(c->tier, 3);
    cr_expect_str_eq(c->name, "gemm_wgmma");
    cr_expect_null(tsr_arbiter_find(a, TSR_KIND_GATED, "gemm_wgmma"));
    cr_expect_null(tsr_arbiter_find(a, TSR_KIND_MATMUL, "gemm"));
}

Test(arbiter, reason_names)
{
    cr_expect_str_eq(tsr_decision_reason_name(TSR_REASON_FORCED), "forced");
    cr_expect_str_eq(tsr_decision_reason_name(TSR_REASON_TIER), "tier");
    cr_expect_str_eq(tsr_decision_reason_name(TSR_REASON_MEASURED), "measured");
    cr_expect_str_eq(tsr_decision_reason_name(TSR_REASON_FALLBACK), "fallback");
    cr_expect_str_eq(tsr_decision_reason_name((tsr_decision_reason)9), "?");
}

/* ---- policy TIER ---- */

Test(arbiter, hand_tuned_tier_wins_by_default_when_registered_last, .init = init_standard,
     .fini = fini_arbiter)
{
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_eq(d.candidate.tier, 3);
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect(d.verified);
    cr_expect_not(d.verdict_cached);
    cr_expect(d.verdict.pass);
    cr_expect_str_eq(d.verdict.reason, "pass");
    /* Lower tiers are not verified once a higher one passes. */
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 1);
    cr_expect_eq(fake_total(fx.ctx.verified), 1);
}

Test(arbiter, ties_go_to_registration_order, .init = init_empty, .fini = fini_arbiter)
{
    reg(a, fake_candidate("emit_a", 2, 1, NULL));
    reg(a, fake_candidate("emit_b", 2, 1, NULL));
    select_ok("emit_a");
    fixture fx2;
    fixture_init(&fx2, 128);
    fx2.ctx.failing[0] = "emit_a";
    select_on(&fx2, "emit_b");
}

Test(arbiter, lower_tier_is_forceable, .init = init_standard, .fini = fini_arbiter)
{
    tsr_decision d;
    tsr_error err;
    fx.req.force = "tier1";
    d = select_ok("tier1");
    cr_expect_eq(d.candidate.tier, 1);
    cr_expect_eq(d.reason, TSR_REASON_FORCED);
    cr_expect(d.verified);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 1);
    cr_expect_eq(fake_total(fx.ctx.verified), 1);

    /* The reference is forceable too and never verified against itself. */
    fx.req.force = "reference";
    d = select_ok("reference");
    cr_expect_eq(d.reason, TSR_REASON_FORCED);
    cr_expect_not(d.verified);
    cr_expect(d.verdict.pass);
    cr_expect_eq(fake_total(fx.ctx.verified), 1);

    /* An empty force string means no forced candidate. */
    fx.req.force = "";
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_OK);
    cr_expect_str_eq(d.candidate.name, "gemm_wgmma");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
}

Test(arbiter, unknown_forced_name_lists_the_registered_candidates, .init = init_standard,
     .fini = fini_arbiter)
{
    tsr_decision d;
    tsr_error err;
    fx.req.force = "foo";
    fx.req.allow_reference = true; /* never a silent substitute */
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message,
                     "forced candidate 'foo' is not registered for matmul; registered: "
                     "reference (tier 0), tier1 (tier 1), gemm_wgmma (tier 3)");
    cr_expect_eq(fake_total(fx.ctx.verified), 0);
}

Test(arbiter, forced_candidate_that_declines_is_an_error, .init = init_standard_k60,
     .fini = fini_arbiter)
{
    tsr_decision d;
    tsr_error err;
    fx.req.force = "gemm_wgmma";
    fx.req.allow_reference = true;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message,
                     "forced candidate 'gemm_wgmma' declines matmul: K not a multiple of 8");
    cr_expect_eq(fake_total(fx.ctx.verified), 0);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 1, 0);
}

Test(arbiter, forced_candidate_failing_verification_is_an_error_unless_verify_is_off,
     .init = init_standard, .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "tier1";
    tsr_decision d;
    tsr_error err;
    fx.req.force = "tier1";
    fx.req.allow_reference = true;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_VERIFY_FAILED);
    cr_expect_str_eq(err.message,
                     "forced candidate 'tier1' failed verification for matmul: rel 0.5 > 0.016");
    /* The failing verdict is handed back for the caller to show. */
    cr_expect_str_eq(d.candidate.name, "tier1");
    cr_expect(d.verified);
    cr_expect_not(d.verdict.pass);
    cr_expect_eq(d.verdict.first_bad_index, 7);

    fx.req.verify = false;
    d = select_ok("tier1");
    cr_expect_eq(d.reason, TSR_REASON_FORCED);
    cr_expect_not(d.verified);
    cr_expect_not(d.verdict_cached);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 1);
    ASSERT_STATS(a, "tier1", 0, 1, 0, 1);
}

Test(arbiter, forced_candidate_whose_verification_cannot_run_reports_why, .init = init_standard,
     .fini = fini_arbiter)
{
    fx.ctx.broken[0] = "tier1";
    tsr_decision d;
    tsr_error err;
    fx.req.force = "tier1";
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_COMPILE_FAILED);
    cr_expect_str_eq(err.message, "forced candidate 'tier1' for matmul: not verified: "
                                  "COMPILE_FAILED: tier1: nvrtc: syntax error");
}

Test(arbiter, decliner_never_wins_even_at_tier_3, .init = init_standard, .fini = fini_arbiter)
{
    reg(a, fake_candidate("blackwell", 3, 1, fake_applies_never));
    fixture fx60;
    fixture_init(&fx60, 60); /* gemm_wgmma declines K = 60 as well */
    tsr_decision d = select_on(&fx60, "tier1");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect_eq(fake_calls(fx60.ctx.verified, "blackwell"), 0);
    cr_expect_eq(fake_calls(fx60.ctx.verified, "gemm_wgmma"), 0);
    d = select_ok("gemm_wgmma");
    ASSERT_STATS(a, "blackwell", 0, 0, 2, 0);
    ASSERT_STATS(a, "gemm_wgmma", 1, 0, 1, 0);
    ASSERT_STATS(a, "tier1", 1, 0, 0, 0);
}

Test(arbiter, failing_tier_3_falls_to_tier_1, .init = init_standard, .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "gemm_wgmma";
    tsr_decision d = select_ok("tier1");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect(d.verified);
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 1);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 1);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 0, 1);
    ASSERT_STATS(a, "tier1", 1, 0, 0, 0);
}

Test(arbiter, verification_that_cannot_run_skips_the_candidate, .init = init_standard,
     .fini = fini_arbiter)
{
    fx.ctx.broken[0] = "gemm_wgmma";
    tsr_decision d = select_ok("tier1");
    /* Not cached: the next selection tries again. */
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 2);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 0, 2);
}

Test(arbiter, without_a_verifier_candidates_are_taken_as_verified, .init = init_standard,
     .fini = fini_arbiter)
{
    fx.req.verify_fn = NULL;
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_not(d.verified);
    cr_expect(d.verdict.pass);
}

Test(arbiter, nothing_applies_falls_back_to_the_reference_only_when_allowed,
     .init = init_standard_k60, .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "tier1";
    tsr_decision d;
    tsr_error err;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message, "no candidate applies and passes verification for matmul: "
                                  "reference: tier 0: fallback not allowed by the request; "
                                  "tier1: failed verification: rel 0.5 > 0.016; "
                                  "gemm_wgmma: declines: K not a multiple of 8");

    fx.req.allow_reference = true;
    d = select_ok("reference");
    cr_expect_eq(d.candidate.tier, 0);
    cr_expect_eq(d.reason, TSR_REASON_FALLBACK);
    cr_expect_not(d.verified);
    cr_expect(d.verdict.pass);
    /* tier1's failing verdict was cached by the first selection. */
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 1);
    ASSERT_STATS(a, "reference", 1, 0, 0, 0);
    ASSERT_STATS(a, "tier1", 0, 0, 0, 2);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 2, 0);
}

Test(arbiter, nothing_applies_and_no_reference_applies_is_an_arbiter_error, .init = init_empty,
     .fini = fini_arbiter)
{
    reg(a, fake_candidate("blackwell", 3, 1, fake_applies_never));
    tsr_decision d;
    tsr_error err;
    fx.req.allow_reference = true;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message, "no candidate applies and passes verification for matmul: "
                                  "blackwell: declines: needs sm_100");
    reg(a, fake_candidate("reference", 0, 1, NULL));
    d = select_ok("reference");
    cr_expect_eq(d.reason, TSR_REASON_FALLBACK);
    cr_expect_eq(fake_total(fx.ctx.verified), 0);
    ASSERT_STATS(a, "blackwell", 0, 0, 2, 0);
}

Test(arbiter, no_candidates_for_the_kind_is_an_arbiter_error, .init = init_empty,
     .fini = fini_arbiter)
{
    tsr_decision d;
    tsr_error err;
    fx.req.allow_reference = true;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message, "no candidate applies and passes verification for matmul: "
                                  "no candidates registered");
    fx.req.force = "tier1";
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(err.message,
                     "forced candidate 'tier1' is not registered for matmul; registered: none");
}

Test(arbiter, bad_requests_are_invalid_arguments, .init = init_standard, .fini = fini_arbiter)
{
    tsr_decision d;
    fx.req.arch = "";
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_INVALID_ARGUMENT);
    fx.req.arch = "sm_90a";
    fx.req.fingerprint = NULL;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_INVALID_ARGUMENT);
    fx.req.fingerprint = &fx.fp;
    fx.req.policy = (tsr_policy)7;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_INVALID_ARGUMENT);
    fx.req.policy = TSR_POLICY_TIER;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, NULL, NULL), TSR_INVALID_ARGUMENT);
    cr_expect_eq(tsr_arbiter_select(a, NULL, &d, NULL), TSR_INVALID_ARGUMENT);
}

/* ---- verdict cache ---- */

Test(arbiter, verdict_cache_verifies_once_per_region_version_and_arch, .init = init_standard,
     .fini = fini_arbiter)
{
    tsr_decision d;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect_not(d.verdict_cached);
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect(d.verdict_cached);
    cr_expect(d.verified);
    cr_expect_str_eq(d.verdict.reason, "pass");
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 1);

    /* Another region: another fingerprint, verified again. */
    fixture other;
    fixture_init(&other, 128);
    other.req.ctx = &fx.ctx;
    cr_assert_eq(tsr_arbiter_select(a, &other.req, &d, NULL), TSR_OK);
    cr_expect_not(d.verdict_cached);
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 2);

    /* Another device arch. */
    fx.req.arch = "sm_100a";
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect_not(d.verdict_cached);
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 3);
}

Test(arbiter, verdict_cache_keys_on_the_candidate_version, .init = init_empty, .fini = fini_arbiter)
{
    /* Within one arbiter a name carries two versions only across kinds, so the
     * test hands the same fingerprint with a region of each kind: the version is
     * then the only part of the key that differs. */
    tsr_region gated;
    gated = regions_parse("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":64,\"k\":64,\"h\":64}");
    tsr_candidate for_matmul = fake_candidate("tier1", 1, 1, NULL);
    tsr_candidate for_gated = fake_candidate("tier1", 1, 2, NULL);
    for_gated.kinds = KIND_BIT(TSR_KIND_GATED);
    reg(a, for_matmul);
    reg(a, for_gated);
    tsr_decision d;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 1);
    fx.req.region = &gated;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect_eq(d.candidate.version, 2u);
    cr_expect_not(d.verdict_cached);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 2);
    arbiter_drop();

    /* The same two registrations with equal versions: the second is a hit. */
    for_gated.version = 1;
    a = arbiter_new(NULL);
    reg(a, for_matmul);
    reg(a, for_gated);
    fx.req.region = &fx.region;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    fx.req.region = &gated;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    cr_expect(d.verdict_cached);
    cr_expect_eq(fake_calls(fx.ctx.verified, "tier1"), 3);
    tsr_region_free(&gated);
}

/* ---- policy MEASURE and the winners store ---- */

Test(arbiter, measure_picks_the_fastest_and_reuses_it_untimed, .init = init_measured,
     .fini = fini_arbiter)
{
    tsr_decision d = select_ok("emit");
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect(d.verified);
    /* Every applicable candidate above tier 0 is verified and timed once. */
    cr_expect_eq(fake_calls(fx.ctx.measured, "tier1"), 1);
    cr_expect_eq(fake_calls(fx.ctx.measured, "emit"), 1);
    cr_expect_eq(fake_calls(fx.ctx.measured, "gemm_wgmma"), 1);
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
    cr_expect_eq(fake_total(fx.ctx.verified), 3);

    /* K = 60 rounds up to the same shape bucket: the winner is reused. */
    fixture fx60;
    fixture_init(&fx60, 60);
    fx60.req.policy = TSR_POLICY_MEASURE;
    fx60.req.ctx = &fx.ctx;
    d = select_on(&fx60, "emit");
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
    cr_expect_eq(fake_calls(fx.ctx.verified, "emit"), 2); /* a new region: verified */

    /* Another bucket is measured afresh. */
    fixture big;
    fixture_init(&big, 256);
    big.req.policy = TSR_POLICY_MEASURE;
    big.req.ctx = &fx.ctx;
    d = select_req(&big.req);
    cr_expect_eq(fake_total(fx.ctx.measured), 6);
    ASSERT_STATS(a, "emit", 3, 0, 0, 0);
}

Test(arbiter, measure_skips_candidates_that_fail_or_cannot_be_timed, .init = init_measured,
     .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "emit";
    fx.ctx.times[2] = (fake_time){"nobody", 0.0}; /* gemm_wgmma cannot be timed */
    tsr_decision d = select_ok("tier1");
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect_eq(fake_calls(fx.ctx.measured, "emit"), 0);
    cr_expect_eq(fake_calls(fx.ctx.measured, "gemm_wgmma"), 1);
    ASSERT_STATS(a, "emit", 0, 0, 0, 1);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 0, 0);
}

Test(arbiter, measure_without_a_timer_falls_back_to_tier_order, .init = init_measured,
     .fini = fini_arbiter)
{
    fx.req.measure_fn = NULL;
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect_eq(fake_total(fx.ctx.measured), 0);
}

Test(arbiter, stored_winner_that_now_fails_is_measured_again, .init = init_measured,
     .fini = fini_arbiter)
{
    tsr_decision d = select_ok("emit");

    fixture fx2; /* same bucket, another region whose emit fails */
    fixture_init(&fx2, 63);
    fx2.req.policy = TSR_POLICY_MEASURE;
    fx2.ctx.times[0] = (fake_time){"tier1", 1.0};
    fx2.ctx.failing[0] = "emit";
    d = select_on(&fx2, "tier1"); /* gemm_wgmma declines K = 63 */
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect_eq(fake_calls(fx2.ctx.verified, "emit"), 1);
    cr_expect_eq(fake_calls(fx2.ctx.measured, "tier1"), 1);

    /* tier1 is now the bucket's winner: K = 64 reuses it untimed. */
    memset(fx.ctx.measured, 0, sizeof fx.ctx.measured);
    d = select_ok("tier1");
    cr_expect_eq(fake_total(fx.ctx.measured), 0);
}

Test(arbiter, measured_winner_persists_across_restarts, .init = init_store_measured,
     .fini = fini_store)
{
    char path[256];
    store_path(store_dir, path, sizeof path);
    tsr_decision d = select_ok("emit");
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
    arbiter_drop();

    /* The file names the key and the winner. */
    char *text = file_read(path);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "%s", text);
    cr_expect_str_eq(cJSON_GetObjectItem(root, "format")->valuestring, "tessera-arbiter-winners");
    cr_expect_eq(cJSON_GetObjectItem(root, "version")->valueint, 1);
    cJSON *rows = cJSON_GetObjectItem(root, "winners");
    cr_assert_eq(cJSON_GetArraySize(rows), 1);
    cJSON *row = cJSON_GetArrayItem(rows, 0);
    cr_expect_str_eq(cJSON_GetObjectItem(row, "arch")->valuestring, "sm_90a");
    cr_expect_str_eq(cJSON_GetObjectItem(row, "kind")->valuestring, "matmul");
    cr_expect_str_eq(cJSON_GetObjectItem(row, "dtype")->valuestring, "bf16");
    cr_expect_str_eq(cJSON_GetObjectItem(row, "bucket")->valuestring, "m64n64k64");
    cr_expect_str_eq(cJSON_GetObjectItem(row, "candidate")->valuestring, "emit");
    cr_expect_eq(cJSON_GetObjectItem(row, "candidate_version")->valueint, 1);
    cr_expect_eq(cJSON_GetObjectItem(row, "median_ms")->valuedouble, 0.5);
    cJSON_Delete(root);
    free(text);

    fixture again;
    fixture_init(&again, 64);
    a = arbiter_measured(store_dir, &again);
    d = select_on(&again, "emit");
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect(d.verified);
    cr_expect_eq(fake_total(again.ctx.measured), 0);
    cr_expect_eq(fake_total(again.ctx.verified), 1);

    /* Policy TIER ignores the stored winner. */
    again.req.policy = TSR_POLICY_TIER;
    d = select_on(&again, "gemm_wgmma");
}

Test(arbiter, stored_winner_of_another_version_is_measured_again, .init = init_store_measured,
     .fini = fini_store)
{
    tsr_decision d;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    arbiter_drop();

    fixture again;
    fixture_init(&again, 64);
    a = arbiter_new(store_dir);
    reg(a, fake_candidate("tier1", 1, 1, NULL));
    reg(a, fake_candidate("emit", 2, 2, NULL)); /* rebuilt: its output may change */
    again.ctx.times[0] = (fake_time){"tier1", 0.4};
    again.ctx.times[1] = (fake_time){"emit", 0.5};
    again.req.policy = TSR_POLICY_MEASURE;
    d = select_on(&again, "tier1");
    cr_expect_eq(fake_total(again.ctx.measured), 2);
}

Test(arbiter, corrupt_store_file_is_tolerated_and_overwritten, .init = init_store,
     .fini = fini_store)
{
    char path[256];
    store_path(store_dir, path, sizeof path);
    file_write(path, "{\"format\":\"tessera-arbiter-win");
    a = arbiter_measured(store_dir, &fx);
    select_ok("emit");
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
    arbiter_drop();

    char *text = file_read(path);
    cJSON *root = cJSON_Parse(text);
    cr_expect_not_null(root, "%s", text);
    cJSON_Delete(root);
    free(text);

    fixture again;
    fixture_init(&again, 64);
    a = arbiter_measured(store_dir, &again);
    select_on(&again, "emit");
    cr_expect_eq(fake_total(again.ctx.measured), 0);
}

Test(arbiter, malformed_store_rows_are_skipped, .init = init_store, .fini = fini_store)
{
    char path[256];
    store_path(store_dir, path, sizeof path);
    file_write(path, "{\"format\":\"tessera-arbiter-winners\",\"version\":1,\"winners\":["
                     "{\"arch\":\"sm_90a\",\"kind\":\"matmul\",\"dtype\":\"bf99\","
                     "\"bucket\":\"m64n64k64\",\"candidate\":\"tier1\","
                     "\"candidate_version\":1,\"median_ms\":0.1},"
                     "{\"arch\":\"sm_90a\",\"kind\":\"matmul\",\"dtype\":\"bf16\","
                     "\"bucket\":\"m64n64k64\",\"candidate\":\"gemm_wgmma\","
                     "\"candidate_version\":1,\"median_ms\":0.2}]}");
    a = arbiter_measured(store_dir, &fx);
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect_eq(fake_total(fx.ctx.measured), 0);
}

Test(arbiter, unreadable_store_is_an_io_error, .init = init_store_dir, .fini = fini_store)
{
    char path[256];
    store_path(store_dir, path, sizeof path);
    tsr_error err;
    /* The store directory is a plain file. */
    file_write(path, "{}");
    cr_expect_eq(tsr_arbiter_create(path, &a, &err), TSR_IO_ERROR);
    cr_expect_null(a);
    unlink(path);
    /* The store file is a directory. */
    cr_assert_eq(mkdir(path, 0700), 0);
    cr_expect_eq(tsr_arbiter_create(store_dir, &a, &err), TSR_IO_ERROR);
    cr_expect_null(a);
    rmdir(path);
    /* A store directory that does not exist yet is created. */
    char sub[128];
    snprintf(sub, sizeof sub, "%s/winners", store_dir);
    cr_expect_eq(tsr_arbiter_create(sub, &a, &err), TSR_OK, "%s", err.message);
    arbiter_drop();
    rmdir(sub);
}

/* ---- statistics and explain ---- */

Test(arbiter, stats_count_exactly, .init = init_standard, .fini = fini_arbiter)
{
    tsr_candidate gated_only = fake_candidate("swiglu", 3, 1, NULL);
    gated_only.kinds = KIND_BIT(TSR_KIND_GATED) | KIND_BIT(TSR_KIND_FUSED);
    reg(a, gated_only);
    fixture fx60;
    fixture_init(&fx60, 60);
    fx60.req.ctx = &fx.ctx;
    fx60.req.allow_reference = true;
    fx.ctx.failing[0] = "tier1";
    tsr_decision d;

    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);   /* gemm_wgmma won */
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);   /* gemm_wgmma won */
    cr_assert_eq(tsr_arbiter_select(a, &fx60.req, &d, NULL), TSR_OK); /* tier1 fails, fallback */
    fx.req.force = "reference";
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);
    fx.req.force = "tier1";
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_VERIFY_FAILED);
    fx.req.verify = false;
    cr_assert_eq(tsr_arbiter_select(a, &fx.req, &d, NULL), TSR_OK);

    tsr_candidate_stats *rows = NULL;
    size_t n = 0;
    cr_assert_eq(tsr_arbiter_stats(a, &rows, &n, NULL), TSR_OK);
    cr_assert_eq(n, 5);
    const struct {
        tsr_region_kind kind;
        const char *name;
        uint64_t won, forced, declined, failed;
    } want[] = {
        {TSR_KIND_MATMUL, "reference", 1, 1, 0, 0},  {TSR_KIND_MATMUL, "tier1", 0, 1, 0, 2},
        {TSR_KIND_MATMUL, "gemm_wgmma", 2, 0, 1, 0}, {TSR_KIND_FUSED, "swiglu", 0, 0, 0, 0},
        {TSR_KIND_GATED, "swiglu", 0, 0, 0, 0},
    };
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(rows[i].kind, want[i].kind, "row %zu", i);
        cr_expect_str_eq(rows[i].name, want[i].name, "row %zu", i);
        cr_expect_eq(rows[i].won, want[i].won, "%s won", want[i].name);
        cr_expect_eq(rows[i].forced, want[i].forced, "%s forced", want[i].name);
        cr_expect_eq(rows[i].declined, want[i].declined, "%s declined", want[i].name);
        cr_expect_eq(rows[i].failed_verification, want[i].failed, "%s failed", want[i].name);
        /* The last selection forced tier1 with verify=false. */
        cr_expect_eq(rows[i].unverified, i == 1 ? 1u : 0u, "%s unverified", want[i].name);
    }
    free(rows);
}

Test(arbiter, explain_reports_every_candidate_of_the_kind, .init = init_empty_k60,
     .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "emit";
    reg(a, fake_candidate("reference", 0, 1, NULL));
    reg(a, fake_candidate("tier1", 1, 1, NULL));
    reg(a, fake_candidate("tier1_b", 1, 1, NULL));
    reg(a, fake_candidate("emit", 2, 1, NULL));
    reg(a, fake_candidate("gemm_wgmma", 3, 1, fake_applies_k8));
    tsr_candidate other = fake_candidate("attn", 3, 1, NULL);
    other.kinds = KIND_BIT(TSR_KIND_ATTENTION);
    reg(a, other);

    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status sst = TSR_INTERNAL;
    tsr_error serr, err;
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err), TSR_OK);
    cr_expect_eq(sst, TSR_OK);
    cr_assert_eq(n, 5);
    const struct {
        const char *name;
        bool applies, selected, verified, pass;
        const char *why;
    } want[] = {
        {"reference", true, false, false, true, "tier 0: used only as a fallback"},
        {"tier1", true, true, true, true, "selected: highest tier that passes"},
        {"tier1_b", true, false, false, false, "not verified: 'tier1' (tier 1) selected first"},
        {"emit", true, false, true, false, "failed verification: rel 0.5 > 0.016"},
        {"gemm_wgmma", false, false, false, false, "declines: K not a multiple of 8"},
    };
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_eq(rows[i].candidate.name, want[i].name);
        cr_expect_eq(rows[i].applies, want[i].applies, "%s applies", want[i].name);
        cr_expect_eq(rows[i].selected, want[i].selected, "%s selected", want[i].name);
        cr_expect_eq(rows[i].verified, want[i].verified, "%s verified", want[i].name);
        cr_expect_eq(rows[i].verdict.pass, want[i].pass, "%s pass", want[i].name);
        cr_expect_str_eq(rows[i].why, want[i].why);
    }
    free(rows);

    /* A failing selection is reported, not returned. */
    fx.req.force = "nope";
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err), TSR_OK);
    cr_expect_eq(sst, TSR_ARBITER);
    cr_expect_eq(serr.code, TSR_ARBITER);
    cr_expect_str_eq(serr.message, "forced candidate 'nope' is not registered for matmul; "
                                   "registered: reference (tier 0), tier1 (tier 1), tier1_b "
                                   "(tier 1), emit (tier 2), gemm_wgmma (tier 3)");
    cr_assert_eq(n, 5);
    for (size_t i = 0; i < n; i++)
        cr_expect_not(rows[i].selected);
    cr_expect_str_eq(rows[1].why, "not considered: 'nope' is forced");
    cr_expect_str_eq(rows[4].why, "declines: K not a multiple of 8");
    free(rows);

    fx.req.force = "tier1_b";
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err), TSR_OK);
    cr_expect_eq(sst, TSR_OK);
    cr_expect(rows[2].selected);
    cr_expect_str_eq(rows[2].why, "selected: forced");
    cr_expect_str_eq(rows[1].why, "not considered: 'tier1_b' is forced");
    free(rows);

    /* explain leaves the dispatch statistics alone. */
    ASSERT_STATS(a, "tier1", 0, 0, 0, 0);
    ASSERT_STATS(a, "emit", 0, 0, 0, 0);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 0, 0);

    fx.req.arch = NULL;
    cr_expect_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err),
                 TSR_INVALID_ARGUMENT);
    cr_expect_null(rows);
}

Test(arbiter, explain_rows_of_a_measured_selection, .init = init_measured, .fini = fini_arbiter)
{
    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status sst;
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, NULL, NULL), TSR_OK);
    cr_expect_eq(sst, TSR_OK);
    cr_assert_eq(n, 4);
    cr_expect_str_eq(rows[0].why, "tier 0: used only as a fallback");
    cr_expect_str_eq(rows[1].why, "passed, measured 1 ms");
    cr_expect_str_eq(rows[2].why, "selected: fastest measured (0.5 ms)");
    cr_expect_str_eq(rows[3].why, "passed, measured 0.8 ms");
    free(rows);
    /* The measurement is remembered: select reuses it. */
    select_ok("emit");
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
}

/* ---- threads ---- */

typedef struct racer {
    tsr_arbiter *a;
    fixture fx[2]; /* two regions, each with this thread's own fake context */
    int failures;
} racer;

static void *racer_main(void *arg)
{
    racer *r = arg;
    for (int i = 0; i < 100; i++) {
        tsr_decision d;
        fixture *fx = &r->fx[i % 2];
        if (tsr_arbiter_select(r->a, &fx->req, &d, NULL) != TSR_OK ||
            strcmp(d.candidate.name, "gemm_wgmma") != 0)
            r->failures++;
    }
    return NULL;
}

Test(arbiter, concurrent_selections_count_every_dispatch, .init = init_standard_arbiter,
     .fini = fini_arbiter)
{
    enum { THREADS = 4 };
    static racer racers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        racers[t].a = a;
        fixture_init(&racers[t].fx[0], 64);
        fixture_init(&racers[t].fx[1], 128);
    }
    for (int t = 0; t < THREADS; t++)
        cr_assert_eq(pthread_create(&threads[t], NULL, racer_main, &racers[t]), 0);
    int verified = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        cr_expect_eq(racers[t].failures, 0);
        verified += fake_calls(racers[t].fx[0].ctx.verified, "gemm_wgmma") +
                    fake_calls(racers[t].fx[1].ctx.verified, "gemm_wgmma");
    }
    /* Once per region, or a few more when threads race to the first verdict. */
    cr_expect(verified >= 2 && verified <= 2 * THREADS, "verified %d times", verified);
    ASSERT_STATS(a, "gemm_wgmma", 400, 0, 0, 0);
    ASSERT_STATS(a, "tier1", 0, 0, 0, 0);
}

/* ---- shape buckets ---- */

static void expect_bucket(const char *json, const char *want)
{
    tsr_region r;
    char buf[96];
    r = regions_parse(json);
    tsr_arbiter_shape_bucket(&r, buf, sizeof buf);
    cr_expect_str_eq(buf, want, "%s", json);
    tsr_region_free(&r);
}

Test(arbiter, shape_bucket_rounds_each_dimension_up_to_a_power_of_two)
{
    expect_bucket("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4096,\"n\":4097,\"k\":1}",
                  "m4096n8192k1");
    expect_bucket("{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":33,\"n\":64,\"k\":17,"
                  "\"epilogue\":[\"relu\"]}",
                  "m64n64k32");
    expect_bucket("{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":5,\"k\":9,\"h\":1000}",
                  "m8k16h1024");
    expect_bucket("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":3,\"heads\":12,"
                  "\"heads_kv\":4,\"seq_q\":100,\"seq_k\":200,\"head_dim\":80,\"causal\":true}",
                  "b4h16hkv4q128k256d128dv128c1");
    expect_bucket("{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":2,"
                  "\"seq_q\":7,\"seq_k\":7,\"head_dim\":64,\"head_dim_v\":32}",
                  "b1h2hkv2q8k8d64dv32c0");
    expect_bucket("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
                  "\"shape\":[3,5]},{\"name\":\"b\",\"shape\":[5]}],\"ops\":[{\"op\":\"add\","
                  "\"args\":[\"a\",\"b\"],\"out\":\"y\"}],\"output\":\"y\"}",
                  "e16");

    tsr_region r;
    char small[6];
    r = regions_parse("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4096,\"n\":4096,\"k\":4096}");
    tsr_arbiter_shape_bucket(&r, small, sizeof small);
    cr_expect_str_eq(small, "m4096");
}

Test(arbiter, a_forced_only_candidate_is_never_chosen_unless_forced, .init = init_empty,
     .fini = fini_arbiter)
{
    fx.req.allow_reference = true;
    reg(a, fake_candidate("reference", 0, 1, NULL));
    tsr_candidate trap = fake_candidate("trap", 3, 1, NULL);
    trap.forced_only = true;
    reg(a, trap);
    tsr_decision d;
    tsr_error err;
    /* Highest tier, applies to everything, yet not taken: the fallback is. */
    d = select_ok("reference");
    cr_expect_eq(d.reason, TSR_REASON_FALLBACK);
    cr_expect_eq(fake_calls(fx.ctx.verified, "trap"), 0);

    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status sel;
    tsr_error sel_err;
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sel, &sel_err, &err), TSR_OK);
    cr_assert_eq(n, 2);
    cr_expect_not(rows[1].applies);
    cr_expect_str_eq(rows[1].why, "declines: considered only when forced");
    free(rows);

    /* Forced by name, it is the one served. */
    fx.req.force = "trap";
    d = select_ok("trap");
    cr_expect_eq(d.reason, TSR_REASON_FORCED);
}

/* ---- verify=false, and a reference the request refuses ---- */

Test(arbiter, skip_verify_means_no_verification_in_the_tier_rule, .init = init_standard,
     .fini = fini_arbiter)
{
    /* Both would fail: not verified, the highest tier that applies is taken. */
    fx.ctx.failing[0] = "gemm_wgmma";
    fx.ctx.failing[1] = "tier1";
    fx.req.verify = false;
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect_not(d.verified);
    cr_expect(d.verify_skipped);
    cr_expect_str_eq(d.verdict.reason, "not verified: verify=false");
    cr_expect_eq(fake_total(fx.ctx.verified), 0);
    tsr_candidate_stats s = stats_of(a, TSR_KIND_MATMUL, "gemm_wgmma");
    cr_expect_eq(s.won, 1);
    cr_expect_eq(s.unverified, 1);
    cr_expect_eq(s.failed_verification, 0);

    /* Nothing was cached: verifying again checks for real, and fails. */
    fx.req.verify = true;
    fx.req.allow_reference = true;
    d = select_ok("reference");
    cr_expect_not(d.verify_skipped);
    cr_expect_eq(fake_calls(fx.ctx.verified, "gemm_wgmma"), 1);
    cr_expect_eq(stats_of(a, TSR_KIND_MATMUL, "gemm_wgmma").unverified, 1);
}

Test(arbiter, skip_verify_means_no_verification_when_measuring, .init = init_measured,
     .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "emit";
    fx.req.verify = false;
    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status sst;
    tsr_error serr, err;
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err), TSR_OK);
    cr_assert_eq(n, 4);
    cr_expect_str_eq(rows[1].why, "applies, not verified, measured 1 ms");
    /* The fastest, though it would fail. */
    cr_expect_str_eq(rows[2].why, "selected: fastest measured (0.5 ms), not verified "
                                  "(verify=false)");
    free(rows);
    cr_expect_eq(fake_total(fx.ctx.measured), 3);

    tsr_decision d = select_ok("emit"); /* the stored winner, not verified either */
    cr_expect_eq(d.reason, TSR_REASON_MEASURED);
    cr_expect(d.verify_skipped);
    cr_expect_eq(fake_total(fx.ctx.verified), 0);
    cr_expect_eq(fake_total(fx.ctx.measured), 3);
    cr_expect_eq(stats_of(a, TSR_KIND_MATMUL, "emit").unverified, 1);
}

Test(arbiter, skip_verify_is_shown_in_explain_for_the_tier_rule, .init = init_standard,
     .fini = fini_arbiter)
{
    fx.req.verify = false;
    tsr_candidate_report *rows = NULL;
    size_t n = 0;
    tsr_status sst;
    tsr_error serr, err;
    cr_assert_eq(tsr_arbiter_explain(a, &fx.req, &rows, &n, &sst, &serr, &err), TSR_OK);
    cr_assert_eq(n, 3);
    cr_expect(rows[2].selected);
    cr_expect_not(rows[2].verified);
    cr_expect_str_eq(rows[2].why, "selected: highest tier that applies, not verified "
                                  "(verify=false)");
    free(rows);
}

#define REFUSED                                                                                    \
    "a launch on the host is estimated at 1.1e+12 units of CPU work, over "                        \
    "max_request_work (40000000000)"

/* An 8192-cube matmul whose host reference the request refuses. */
static void init_large_refused(void)
{
    fixture_init(&fx, 64);
    fx.region =
        regions_parse("{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":8192,\"n\":8192,\"k\":8192}");
    cr_assert_eq(tsr_region_fingerprint(&fx.region, &fx.fp, NULL), TSR_OK);
    fx.req.allow_reference = true;
    fx.req.reference_refused = REFUSED;
    a = arbiter_standard();
}

Test(arbiter, a_large_region_is_served_by_a_device_candidate_when_the_reference_is_refused,
     .init = init_large_refused, .fini = fini_arbiter)
{
    tsr_decision d = select_ok("gemm_wgmma");
    cr_expect_eq(d.reason, TSR_REASON_TIER);
    cr_expect(d.verified);
    cr_expect(d.verdict.pass);
    cr_expect_not(d.verify_skipped);
    ASSERT_STATS(a, "reference", 0, 0, 0, 0);
}

Test(arbiter, a_refused_reference_leaves_the_next_device_tier, .init = init_large_refused,
     .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "gemm_wgmma";
    tsr_decision d = select_ok("tier1");
    cr_expect(d.verified);
    ASSERT_STATS(a, "gemm_wgmma", 0, 0, 0, 1);
}

Test(arbiter, a_refused_reference_is_never_the_fallback_and_the_error_names_every_candidate,
     .init = init_large_refused, .fini = fini_arbiter)
{
    fx.ctx.failing[0] = "gemm_wgmma";
    fx.ctx.broken[0] = "tier1";
    tsr_decision d;
    tsr_error err;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_str_eq(
        err.message,
        "no candidate applies and passes verification for matmul: reference: tier 0: " REFUSED
        "; tier1: not verified: COMPILE_FAILED: tier1: nvrtc: syntax error; "
        "gemm_wgmma: failed verification: rel 0.5 > 0.016");
    ASSERT_STATS(a, "reference", 0, 0, 0, 0);

    /* Without the refusal the same request falls back to it. */
    fx.req.reference_refused = NULL;
    d = select_ok("reference");
    cr_expect_eq(d.reason, TSR_REASON_FALLBACK);
    /* And a request that allows no reference says so, as before. */
    fx.req.allow_reference = false;
    fx.req.reference_refused = REFUSED;
    cr_expect_eq(tsr_arbiter_select(a, &fx.req, &d, &err), TSR_ARBITER);
    cr_expect_neq(strstr(err.message, "reference: tier 0: fallback not allowed by the request"),
                  NULL, "%s", err.message);
}

/* ---- variants: one complete verification per variant ---- */

typedef struct variant_ctx {
    int complete, shape; /* calls of verify_fn and verify_shape_fn */
    int64_t fail_past_m; /* verdicts fail for M above this; 0: never */
    bool no_small;       /* complete verdicts are sampled without small probes */
} variant_ctx;

static void variant_rows(const tsr_candidate *c, const tsr_region *r, const char *arch,
                         tsr_variant *out)
{
    (void)c, (void)arch;
    memset(out, 0, sizeof *out);
    out->free_dims = TSR_VARIANT_ROWS;
    (void)r;
}

static void variant_verdict(variant_ctx *f, const tsr_region *r, bool complete, tsr_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->pass = f->fail_past_m == 0 || r->u.matmul.m <= f->fail_past_m;
    v->first_bad_index = v->pass ? -1 : 3;
    v->first_bad_probe = v->pass ? -1 : 0;
    v->method = complete && !f->no_small ? TSR_VERIFY_FULL : TSR_VERIFY_SAMPLED;
    v->probes = complete && !f->no_small ? 2 : 1;
    snprintf(v->reason, sizeof v->reason, "%s", v->pass ? "pass" : "rel 0.5 > 0.016");
}

static tsr_status variant_complete(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                   tsr_verdict *v, tsr_error *err)
{
    (void)c, (void)err;
    variant_ctx *f = ctx;
    f->complete++;
    variant_verdict(f, r, true, v);
    return TSR_OK;
}

static tsr_status variant_shape(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                tsr_verdict *v, tsr_error *err)
{
    (void)c, (void)err;
    variant_ctx *f = ctx;
    f->shape++;
    variant_verdict(f, r, false, v);
    return TSR_OK;
}

/* Selects the forced "t1v" for matmul M x 64 x 64; the status. */
static tsr_status variant_select(tsr_arbiter *arb, variant_ctx *f, int64_t m, bool shape_fn,
                                 tsr_decision *out)
{
    char json[128];
    snprintf(json, sizeof json,
             "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":%lld,\"n\":64,"
             "\"k\":64}",
             (long long)m);
    tsr_region r;
    r = regions_parse(json);
    tsr_fingerprint fp;
    cr_assert_eq(tsr_region_fingerprint(&r, &fp, NULL), TSR_OK);
    tsr_select_request req = {.region = &r,
                              .fingerprint = &fp,
                              .arch = "sm_90a",
                              .force = "t1v",
                              .verify = true,
                              .verify_fn = variant_complete,
                              .verify_shape_fn = shape_fn ? variant_shape : NULL,
                              .ctx = f};
    tsr_status st = tsr_arbiter_select(arb, &req, out, NULL);
    tsr_region_free(&r);
    return st;
}

static tsr_arbiter *variant_arbiter(void)
{
    tsr_arbiter *arb = arbiter_new(NULL);
    tsr_candidate c = fake_candidate("t1v", 1, 1, NULL);
    c.variant = variant_rows;
    reg(arb, c);
    return arb;
}

Test(arbiter_variants, a_new_shape_of_a_verified_variant_gets_the_shape_check)
{
    tsr_arbiter *arb = variant_arbiter();
    variant_ctx f = {0};
    tsr_decision d;
    cr_assert_eq(variant_select(arb, &f, 8, true, &d), TSR_OK);
    cr_expect_eq(f.complete, 1);
    cr_expect_eq(f.shape, 0);
    cr_expect_not(d.verdict.variant_reused);
    for (int64_t m = 9; m <= 20; m++) {
        cr_assert_eq(variant_select(arb, &f, m, true, &d), TSR_OK);
        cr_expect(d.verified);
        cr_expect(d.verdict.variant_reused, "m %lld", (long long)m);
        cr_expect_not(d.verdict_cached);
    }
    cr_expect_eq(f.complete, 1);
    cr_expect_eq(f.shape, 12);
    /* A shape seen before: its own cached verdict, no call. */
    cr_assert_eq(variant_select(arb, &f, 12, true, &d), TSR_OK);
    cr_expect(d.verdict_cached);
    cr_expect(d.verdict.variant_reused);
    cr_expect_eq(f.shape, 12);
    char text[256];
    tsr_verdict_format(&d.verdict, text, sizeof text);
    cr_expect_str_eq(text, "PASS sampled rel 0 <= 0 (max abs 0, 0 elements, 0 of them sampled "
                           "at the real shape, 1 probe, 0 at a small shape, the variant's "
                           "complete check reused)");
    tsr_arbiter_destroy(arb);
}

Test(arbiter_variants, a_failure_at_any_shape_withdraws_the_variants_pass)
{
    tsr_arbiter *arb = variant_arbiter();
    variant_ctx f = {.fail_past_m = 64};
    tsr_decision d;
    cr_assert_eq(variant_select(arb, &f, 8, true, &d), TSR_OK);
    cr_assert_eq(variant_select(arb, &f, 16, true, &d), TSR_OK);
    cr_expect_eq(f.shape, 1);
    /* The shape check catches the breakage... */
    cr_expect_eq(variant_select(arb, &f, 100, true, &d), TSR_VERIFY_FAILED);
    cr_expect_eq(f.shape, 2);
    cr_expect(d.verdict.variant_reused);
    /* ...and every later new shape is verified completely. */
    cr_assert_eq(variant_select(arb, &f, 24, true, &d), TSR_OK);
    cr_expect_eq(f.complete, 2);
    cr_expect_eq(f.shape, 2);
    cr_expect_not(d.verdict.variant_reused);
    cr_assert_eq(variant_select(arb, &f, 25, true, &d), TSR_OK);
    cr_expect_eq(f.complete, 3, "a later pass does not restore it");
    tsr_arbiter_destroy(arb);
}

Test(arbiter_variants, only_a_complete_verification_is_reused)
{
    /* Sampled without small-shape probes (the candidate declined the small
     * shape): not complete, so the next shape is verified completely too. */
    tsr_arbiter *arb = variant_arbiter();
    variant_ctx f = {.no_small = true};
    tsr_decision d;
    cr_assert_eq(variant_select(arb, &f, 8, true, &d), TSR_OK);
    cr_assert_eq(variant_select(arb, &f, 9, true, &d), TSR_OK);
    cr_expect_eq(f.complete, 2);
    cr_expect_eq(f.shape, 0);
    tsr_arbiter_destroy(arb);

    /* Without verify_shape_fn every shape gets verify_fn. */
    arb = variant_arbiter();
    variant_ctx g = {0};
    cr_assert_eq(variant_select(arb, &g, 8, false, &d), TSR_OK);
    cr_assert_eq(variant_select(arb, &g, 9, false, &d), TSR_OK);
    cr_expect_eq(g.complete, 2);
    cr_expect_eq(g.shape, 0);
    tsr_arbiter_destroy(arb);

    /* A candidate built per shape (no variant callback) likewise. */
    arb = arbiter_new(NULL);
    reg(arb, fake_candidate("t1v", 1, 1, NULL));
    variant_ctx h = {0};
    cr_assert_eq(variant_select(arb, &h, 8, true, &d), TSR_OK);
    cr_assert_eq(variant_select(arb, &h, 9, true, &d), TSR_OK);
    cr_expect_eq(h.complete, 2);
    cr_expect_eq(h.shape, 0);
    tsr_arbiter_destroy(arb);
}

/* ---- verdicts shared through a remote place ---- */

/* A remote place of a few verdicts that arbiters share, and its calls. */
typedef struct fake_verdicts {
    struct {
        char name[TSR_CANDIDATE_NAME_MAX];
        uint32_t version;
        tsr_fingerprint fp;
        bool variant;
        tsr_verdict v;
    } rows[8];
    int n, gets, puts;
} fake_verdicts;

static int fake_verdict_find(fake_verdicts *f, const tsr_arbiter_verdict_key *k)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->rows[i].name, k->name) == 0 && f->rows[i].version == k->version &&
            f->rows[i].variant == k->variant &&
            memcmp(f->rows[i].fp.bytes, k->fingerprint->bytes, TSR_FINGERPRINT_BYTES) == 0)
            return i;
    return -1;
}

static bool fake_verdict_get(void *ctx, const tsr_arbiter_verdict_key *k, tsr_verdict *out)
{
    fake_verdicts *f = ctx;
    f->gets++;
    int i = fake_verdict_find(f, k);
    if (i < 0)
        return false;
    *out = f->rows[i].v;
    return true;
}

static void fake_verdict_put(void *ctx, const tsr_arbiter_verdict_key *k, const tsr_verdict *v)
{
    fake_verdicts *f = ctx;
    f->puts++;
    int i = fake_verdict_find(f, k);
    if (i < 0) {
        cr_assert_lt(f->n, 8);
        i = f->n++;
    }
    snprintf(f->rows[i].name, sizeof f->rows[i].name, "%s", k->name);
    f->rows[i].version = k->version;
    f->rows[i].fp = *k->fingerprint;
    f->rows[i].variant = k->variant;
    f->rows[i].v = *v;
}

static tsr_arbiter *variant_arbiter_sharing(fake_verdicts *shared)
{
    tsr_arbiter *arb = variant_arbiter();
    tsr_arbiter_remote remote = {
        .verdict_get = fake_verdict_get, .verdict_put = fake_verdict_put, .ctx = shared};
    tsr_arbiter_set_remote(arb, &remote);
    return arb;
}

Test(arbiter_variants, complete_verdicts_are_shared_and_used_without_verifying)
{
    fake_verdicts shared = {0};
    tsr_decision d;
    tsr_arbiter *one = variant_arbiter_sharing(&shared);
    variant_ctx f1 = {0};
    cr_assert_eq(variant_select(one, &f1, 8, true, &d), TSR_OK);
    /* Asked for the region's verdict and the variant's record; wrote both. */
    cr_expect_eq(shared.gets, 2);
    cr_expect_eq(shared.puts, 2);
    cr_expect_eq(tsr_arbiter_verifications(one), 1);

    /* Another arbiter, the same region: the shared verdict, no verification. */
    tsr_arbiter *two = variant_arbiter_sharing(&shared);
    variant_ctx f2 = {0};
    cr_assert_eq(variant_select(two, &f2, 8, true, &d), TSR_OK);
    cr_expect_eq(f2.complete + f2.shape, 0);
    cr_expect_eq(tsr_arbiter_verifications(two), 0);
    cr_expect(d.verified);
    cr_expect(d.verdict_cached);
    cr_expect(d.verdict.pass);
    cr_expect_eq(shared.gets, 3);
    /* Cached there: asked once. */
    cr_assert_eq(variant_select(two, &f2, 8, true, &d), TSR_OK);
    cr_expect_eq(shared.gets, 3);
    /* A new shape: the record it took with the verdict, the shape check, and
     * nothing shared of that check. */
    cr_assert_eq(variant_select(two, &f2, 9, true, &d), TSR_OK);
    cr_expect_eq(f2.shape, 1);
    cr_expect_eq(f2.complete, 0);
    cr_expect(d.verdict.variant_reused);
    cr_expect_eq(shared.puts, 2);

    /* A third arbiter at a new shape: the variant's record from the place. */
    tsr_arbiter *three = variant_arbiter_sharing(&shared);
    variant_ctx f3 = {0};
    cr_assert_eq(variant_select(three, &f3, 12, true, &d), TSR_OK);
    cr_expect_eq(f3.shape, 1);
    cr_expect_eq(f3.complete, 0);
    cr_expect_eq(tsr_arbiter_verifications(three), 1);
    cr_expect_eq(shared.puts, 2);
    tsr_arbiter_destroy(one);
    tsr_arbiter_destroy(two);
    tsr_arbiter_destroy(three);
}

Test(arbiter_variants, a_shared_failure_is_a_failure_without_verifying)
{
    fake_verdicts shared = {0};
    tsr_decision d;
    tsr_arbiter *one = variant_arbiter_sharing(&shared);
    variant_ctx f1 = {.fail_past_m = 16};
    cr_expect_eq(variant_select(one, &f1, 32, true, &d), TSR_VERIFY_FAILED);
    cr_expect_eq(shared.puts, 2);
    tsr_arbiter *two = variant_arbiter_sharing(&shared);
    variant_ctx f2 = {0};
    cr_expect_eq(variant_select(two, &f2, 32, true, &d), TSR_VERIFY_FAILED);
    cr_expect_eq(f2.complete + f2.shape, 0);
    cr_expect_not(d.verdict.pass);
    /* The variant's failing record came along: another shape is verified
     * completely, not by the shape check. */
    cr_assert_eq(variant_select(two, &f2, 8, true, &d), TSR_OK);
    cr_expect_eq(f2.complete, 1);
    cr_expect_eq(f2.shape, 0);
    tsr_arbiter_destroy(one);
    tsr_arbiter_destroy(two);
}

Test(arbiter_variants, a_variant_whose_pass_was_withdrawn_is_not_vouched_for_again)
{
    fake_verdicts shared = {0};
    tsr_decision d;
    tsr_arbiter *one = variant_arbiter_sharing(&shared);
    variant_ctx f = {.fail_past_m = 16};
    cr_assert_eq(variant_select(one, &f, 8, true, &d), TSR_OK);
    cr_expect_eq(shared.puts, 2);
    /* The shape check fails at 32 rows: the record is withdrawn here, and
     * the check is not shared. */
    cr_expect_eq(variant_select(one, &f, 32, true, &d), TSR_VERIFY_FAILED);
    cr_expect_eq(f.shape, 1);
    cr_expect_eq(shared.puts, 2);
    /* A complete verification that passes at 12 rows shares its region's
     * verdict, not a passing record. */
    cr_assert_eq(variant_select(one, &f, 12, true, &d), TSR_OK);
    cr_expect_eq(f.complete, 2);
    cr_expect_eq(shared.puts, 3);
    tsr_arbiter_destroy(one);
}

Test(arbiter_variants, sampled_verdicts_without_small_probes_are_not_shared)
{
    fake_verdicts shared = {0};
    tsr_decision d;
    tsr_arbiter *one = variant_arbiter_sharing(&shared);
    variant_ctx f1 = {.no_small = true};
    cr_assert_eq(variant_select(one, &f1, 8, true, &d), TSR_OK);
    cr_expect_eq(shared.puts, 0);
    tsr_arbiter_destroy(one);
}

/* ---- winners shared through a remote place ---- */

/* One remote place two arbiters share: the last winner put, and the calls. */
typedef struct fake_remote {
    char key[TSR_ARBITER_WINNER_KEY_MAX];
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version;
    double median_ms;
    int gets, puts;
} fake_remote;

static bool fake_remote_get(void *ctx, const char *key, char *name, uint32_t *version,
                            double *median_ms)
{
    fake_remote *r = ctx;
    r->gets++;
    if (r->puts == 0 || strcmp(key, r->key) != 0)
        return false;
    snprintf(name, TSR_CANDIDATE_NAME_MAX, "%s", r->name);
    *version = r->version;
    *median_ms = r->median_ms;
    return true;
}

static void fake_remote_put(void *ctx, const char *key, const char *name, uint32_t version,
                            double median_ms)
{
    fake_remote *r = ctx;
    r->puts++;
    snprintf(r->key, sizeof r->key, "%s", key);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->version = version;
    r->median_ms = median_ms;
}

Test(arbiter, a_winner_measured_on_one_node_is_used_untimed_on_another, .init = init_measured,
     .fini = fini_arbiter)
{
    fake_remote shared = {0};
    tsr_arbiter_remote remote = {
        .winner_get = fake_remote_get, .winner_put = fake_remote_put, .ctx = &shared};
    tsr_arbiter_set_remote(a, &remote);
    tsr_decision d = select_req(&fx.req);
    cr_expect_str_eq(d.candidate.name, "emit");
    cr_expect_eq(shared.gets, 1);
    cr_expect_eq(shared.puts, 1);
    cr_expect_str_eq(shared.key, "sm_90a/matmul/bf16/m64n64k64");
    cr_expect_str_eq(shared.name, "emit");
    cr_expect_eq(shared.median_ms, 0.5);

    /* A second node: nothing of its own, the shared winner, verified, not
     * timed, and remembered there (its next selection does not ask again). */
    fixture other;
    tsr_arbiter *b = arbiter_measured(NULL, &other);
    fixture_init(&other, 64);
    other.req.policy = TSR_POLICY_MEASURE;
    tsr_arbiter_set_remote(b, &remote);
    tsr_decision db;
    cr_assert_eq(tsr_arbiter_select(b, &other.req, &db, NULL), TSR_OK);
    cr_expect_str_eq(db.candidate.name, "emit");
    cr_expect_eq(db.reason, TSR_REASON_MEASURED);
    cr_expect(db.verified);
    cr_expect_eq(fake_total(other.ctx.measured), 0);
    cr_expect_eq(fake_calls(other.ctx.verified, "emit"), 1);
    cr_expect_eq(shared.gets, 2);
    cr_expect_eq(shared.puts, 1);
    cr_assert_eq(tsr_arbiter_select(b, &other.req, &db, NULL), TSR_OK);
    cr_expect_eq(shared.gets, 2);

    /* A shared winner that fails verification here is measured afresh, and
     * the new winner is shared. */
    tsr_arbiter *c = arbiter_measured(NULL, &other);
    fixture third;
    fixture_init(&third, 64);
    third.req.policy = TSR_POLICY_MEASURE;
    third.ctx.times[0] = (fake_time){"tier1", 1.0};
    third.ctx.times[1] = (fake_time){"emit", 0.5};
    third.ctx.times[2] = (fake_time){"gemm_wgmma", 0.8};
    third.ctx.failing[0] = "emit";
    tsr_arbiter_set_remote(c, &remote);
    cr_assert_eq(tsr_arbiter_select(c, &third.req, &db, NULL), TSR_OK);
    cr_expect_str_eq(db.candidate.name, "gemm_wgmma");
    cr_expect_eq(shared.puts, 2);
    cr_expect_str_eq(shared.name, "gemm_wgmma");
    tsr_arbiter_destroy(b);
    tsr_arbiter_destroy(c);
}
