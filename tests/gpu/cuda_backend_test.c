/*
 * cuda_backend_test.c — a real tesserad on the CUDA backend, checked against
 * the CPU reference: every example region in every dtype, random ragged and
 * broadcasting regions (pointwise with NaN / inf probes), verification of the
 * tier1 and tier-3 candidates (both tier-3 families), the ping-pong GEMM with
 * every epilogue and NaN placement, the default choice of the tier-3 GEMM and
 * its escape hatches, a kernel served from the disk cache after a restart, a
 * captured batch that yields to another client's run, and the sampled check's
 * probe inputs made on the device.
 *
 * Without a CUDA driver every test skips; with one, a daemon that does not come
 * up on --backend cuda is a failure.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda.h"
#include "tessera/client.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"
#include "tessera/region.h"
#include "../support/fixture.h"
#include "../support/testd.h"
#include "../support/testdata.h"

#define GPU_TIMEOUT_MS 120000

static testd daemon_;
static tsr_client *client_;

static const char *const cuda_flags[] = {"--backend", "cuda", NULL};

static void gpu_setup(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        cr_skip_test("no CUDA driver on this machine");
    dlclose(lib);
    cr_assert_eq(testd_start(&daemon_, cuda_flags), 0, "tesserad --backend cuda did not start");
    client_ = testd_client(&daemon_, GPU_TIMEOUT_MS);
    cr_assert_not_null(client_);
}

static void gpu_teardown(void)
{
    tsr_client_close(client_);
    client_ = NULL;
    testd_stop(&daemon_);
    testd_remove(&daemon_);
}

TestSuite(cuda_backend, .init = gpu_setup, .fini = gpu_teardown, .timeout = 600);

/* Runs r through the daemon on every probe set and compares with the reference.
 * Returns the decision's candidate in cand (may be NULL). */
static void check_region(const tsr_region *r, const char *force, const char *what, char *cand)
{
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out_desc;
    tsr_region_signature(r, sig, &out_desc);
    size_t count = (size_t)tsr_tensor_desc_elements(&out_desc);
    size_t bytes = (size_t)tsr_tensor_desc_bytes(&out_desc);
    void *got = malloc(bytes), *want = malloc(bytes);
    cr_assert(got != NULL && want != NULL);
    tsr_verdict v;
    tsr_verdict_init(&v, 0, r->out_dtype);
    tsr_client_compile_opts opts = {.force = force};
    int probes = tsr_oracle_probe_count(r, 2);
    tsr_client_decision decision;
    for (int p = 0; p < probes; p++) {
        void *inputs[TSR_MAX_REGION_INPUTS] = {0};
        tsr_error e;
        cr_assert_eq(tsr_oracle_make_probe(r, 1234, p, 2, inputs, &e), TSR_OK, "%s", e.message);
        memset(got, 0xff, bytes);
        tsr_status st =
            tsr_client_run(client_, (const struct tsr_region *)r, &opts,
                           (const void *const *)inputs, got, &decision, GPU_TIMEOUT_MS, &e);
        cr_assert_eq(st, TSR_OK, "%s: run: %s %s", what, tsr_status_name(st), e.message);
        cr_assert_eq(tsr_ref_run(r, (const void *const *)inputs, want, 0, &e), TSR_OK);
        tsr_oracle_compare(&v, p, r->out_dtype, got, want, count);
        tsr_oracle_free_probe(r, inputs);
    }
    char line[256];
    tsr_verdict_format(&v, line, sizeof line);
    cr_expect(v.pass, "%s (%s): %s", what, decision.candidate, line);
    if (cand != NULL)
        snprintf(cand, TSR_CLIENT_NAME_MAX, "%s", decision.candidate);
    free(got);
    free(want);
}

static void load_example(const char *path, tsr_dtype dtype, tsr_region *r)
{
    tsr_error e;
    cr_assert_eq(tsr_region_from_file(path, r, &e), TSR_OK, "%s: %s", path, e.message);
    r->dtype = r->out_dtype = dtype;
    cr_assert_eq(tsr_region_validate(r, &e), TSR_OK, "%s: %s", path, e.message);
}

Test(cuda_backend, every_example_in_every_dtype_matches_the_reference)
{
    const char *files[] = {"examples/matmul.json", "examples/fused.json", "examples/gated.json",
                           "examples/attention.json", "examples/pointwise.json"};
    const tsr_dtype dtypes[] = {TSR_F32, TSR_F16, TSR_BF16};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        for (int j = 0; j < 3; j++) {
            tsr_region r;
            load_example(files[i], dtypes[j], &r);
            char what[128];
            snprintf(what, sizeof what, "%s %s", files[i], tsr_dtype_name(dtypes[j]));
            check_region(&r, NULL, what, NULL);
            check_region(&r, "tier1", what, NULL);
            tsr_region_free(&r);
        }
}

/* The tier-0 reference on the device's buffers: forced, it runs on the host
 * and answers exactly what the CPU reference does. */
Test(cuda_backend, the_reference_is_forceable_on_the_gpu)
{
    const char *files[] = {"examples/pointwise.json", "examples/gated.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        tsr_region r;
        load_example(files[i], TSR_BF16, &r);
        char cand[64] = "";
        check_region(&r, "reference", files[i], cand);
        cr_expect_str_eq(cand, "reference");
        tsr_region_free(&r);
    }
}

/* splitmix64: reproducible shapes. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int64_t rng_dim(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

Test(cuda_backend, random_ragged_gemms_match_the_reference)
{
    uint64_t seed = 42;
    const tsr_dtype dtypes[] = {TSR_F32, TSR_F16, TSR_BF16};
    for (int i = 0; i < 12; i++) {
        tsr_dtype dt = dtypes[i % 3];
        int64_t m = rng_dim(&seed, 1, 300), n = rng_dim(&seed, 1, 300), k = rng_dim(&seed, 1, 300);
        if (i % 2 == 0) { /* shapes the tier-3 kernels take: N, K multiples of 8 */
            n = (n + 7) / 8 * 8;
            k = (k + 7) / 8 * 8;
        }
        tsr_region r;
        tsr_error e;
        cr_assert_eq(tsr_region_init_matmul(&r, dt, m, n, k, &e), TSR_OK, "%s", e.message);
        char what[128];
        snprintf(what, sizeof what, "matmul %s %lldx%lldx%lld", tsr_dtype_name(dt), (long long)m,
                 (long long)n, (long long)k);
        check_region(&r, NULL, what, NULL);

        cr_assert_eq(tsr_region_init_gated(&r, dt, m, k, n, TSR_OP_SILU, &e), TSR_OK);
        snprintf(what, sizeof what, "gated %s %lldx%lldx%lld", tsr_dtype_name(dt), (long long)m,
                 (long long)k, (long long)n);
        check_region(&r, NULL, what, NULL);

        const char *json_fmt =
            "{\"kind\":\"fused\",\"dtype\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
            "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}";
        char json[512];
        snprintf(json, sizeof json, json_fmt, tsr_dtype_name(dt), (long long)m, (long long)n,
                 (long long)k);
        cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
        snprintf(what, sizeof what, "fused %s %lldx%lldx%lld", tsr_dtype_name(dt), (long long)m,
                 (long long)n, (long long)k);
        check_region(&r, NULL, what, NULL);
    }
}

Test(cuda_backend, random_broadcasting_pointwise_matches_with_special_values)
{
    uint64_t seed = 7;
    const char *ops[] = {"add", "mul", "maximum", "div", "minimum", "sub"};
    const char *unary[] = {"relu", "sigmoid", "tanh", "gelu", "exp", "log1p", "sign", "softplus"};
    for (int i = 0; i < 12; i++) {
        int64_t rows = rng_dim(&seed, 1, 2000), cols = rng_dim(&seed, 1, 700);
        const char *dt = i % 3 == 0 ? "f32" : i % 3 == 1 ? "f16" : "bf16";
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"kind\":\"pointwise\",\"dtype\":\"%s\",\"inputs\":["
                 "{\"name\":\"a\",\"shape\":[%lld,%lld]},{\"name\":\"b\",\"shape\":[%lld]},"
                 "{\"name\":\"c\",\"shape\":[%lld,1]}],\"ops\":["
                 "{\"op\":\"%s\",\"args\":[\"a\",\"b\"],\"out\":\"t\"},"
                 "{\"op\":\"%s\",\"args\":[\"t\"],\"out\":\"u\"},"
                 "{\"op\":\"%s\",\"args\":[\"u\",\"c\"],\"out\":\"y\"}],\"output\":\"y\"}",
                 dt, (long long)rows, (long long)cols, (long long)cols, (long long)rows,
                 ops[rng_next(&seed) % 6], unary[rng_next(&seed) % 8], ops[rng_next(&seed) % 6]);
        tsr_region r;
        tsr_error e;
        cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
        check_region(&r, NULL, json, NULL);
        tsr_region_free(&r);
    }
}

static void expect_verified(tsr_region *r, const char *candidate)
{
    tsr_client_verify_opts opts = {.candidate = candidate};
    tsr_client_verified out;
    tsr_error e;
    tsr_status st =
        tsr_client_verify(client_, (const struct tsr_region *)r, &opts, &out, GPU_TIMEOUT_MS, &e);
    cr_assert_eq(st, TSR_OK, "verify %s: %s", candidate, e.message);
    cr_assert_str_eq(out.candidate, candidate);
    cr_expect_eq(out.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s: %s (rel %g bound %g)", candidate,
                 out.verdict.reason, out.verdict.rel_error, out.verdict.bound);
}

Test(cuda_backend, tier1_and_tier3_candidates_verify)
{
    tsr_region r;
    const tsr_dtype dtypes[] = {TSR_F16, TSR_BF16};
    for (int j = 0; j < 2; j++) {
        load_example("examples/matmul.json", dtypes[j], &r);
        expect_verified(&r, "tier1");
        expect_verified(&r, "gemm_wgmma");
        expect_verified(&r, "gemm_mma80");
        load_example("examples/fused.json", dtypes[j], &r);
        expect_verified(&r, "tier1");
        expect_verified(&r, "gemm_wgmma");
        expect_verified(&r, "gemm_mma80");
        load_example("examples/gated.json", dtypes[j], &r);
        expect_verified(&r, "tier1");
        expect_verified(&r, "swiglu_wgmma");
        expect_verified(&r, "swiglu_mma80");
    }
    load_example("examples/attention.json", TSR_F32, &r);
    expect_verified(&r, "tier1");
    load_example("examples/pointwise.json", TSR_F32, &r);
    expect_verified(&r, "tier1");
    tsr_region_free(&r);
}

Test(cuda_backend, tier3_wins_bf16_gemm_by_default_and_tier1_is_forceable)
{
    tsr_region r;
    cr_assert_eq(tsr_region_init_matmul(&r, TSR_BF16, 1024, 1024, 1024, NULL), TSR_OK);
    tsr_client_compiled out;
    tsr_error e;
    cr_assert_eq(
        tsr_client_compile(client_, (const struct tsr_region *)&r, NULL, &out, GPU_TIMEOUT_MS, &e),
        TSR_OK, "%s", e.message);
    cr_assert_str_eq(out.decision.candidate, "gemm_wgmma");
    cr_assert_eq(out.decision.tier, 3);
    cr_assert_str_eq(out.decision.reason, "tier");
    cr_assert_eq(out.decision.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s",
                 out.decision.verdict.reason);
    cr_assert_neq(out.kernel, 0);

    tsr_client_compile_opts forced = {.force = "tier1"};
    cr_assert_eq(tsr_client_compile(client_, (const struct tsr_region *)&r, &forced, &out,
                                    GPU_TIMEOUT_MS, &e),
                 TSR_OK, "%s", e.message);
    cr_assert_str_eq(out.decision.candidate, "tier1");
    cr_assert_str_eq(out.decision.reason, "forced");
    char cand[TSR_CLIENT_NAME_MAX];
    check_region(&r, NULL, "bf16 1024^3", cand);
    cr_assert_str_eq(cand, "gemm_wgmma");
    check_region(&r, "tier1", "bf16 1024^3 forced tier1", cand);
    cr_assert_str_eq(cand, "tier1");
    /* The sm_80 family runs on Hopper too, behind the wgmma kernels. */
    check_region(&r, "gemm_mma80", "bf16 1024^3 forced gemm_mma80", cand);
    cr_assert_str_eq(cand, "gemm_mma80");
}

Test(cuda_backend, kernels_from_the_disk_cache_launch_after_a_restart)
{
    tsr_region r;
    load_example("examples/fused.json", TSR_BF16, &r);
    tsr_client_compiled first, again;
    tsr_error e;
    tsr_client_compile_opts opts = {.force = "tier1", .skip_verify = true};
    cr_assert_eq(tsr_client_compile(client_, (const struct tsr_region *)&r, &opts, &first,
                                    GPU_TIMEOUT_MS, &e),
                 TSR_OK, "%s", e.message);
    tsr_client_close(client_);
    client_ = NULL;
    cr_assert_eq(testd_stop(&daemon_), 0);
    cr_assert_eq(testd_restart(&daemon_, cuda_flags), 0);
    client_ = testd_client(&daemon_, GPU_TIMEOUT_MS);
    cr_assert_not_null(client_);
    cr_assert_eq(tsr_client_compile(client_, (const struct tsr_region *)&r, &opts, &again,
                                    GPU_TIMEOUT_MS, &e),
                 TSR_OK, "%s", e.message);
    cr_assert_str_eq(again.key, first.key);
    cr_assert_str_eq(again.decision.cache_level, "disk");
    check_region(&r, "tier1", "fused bf16 from disk", NULL);
}

/* The tier-3 attention kernels through the daemon's default path: picked for
 * bf16 and f16 at head_dim 64 and 128, and matching the reference on ragged
 * shapes, causal with seq_q above, equal to and below seq_k, GQA ratios 1, 4
 * and 8, and a decode step. */
Test(cuda_backend, tier3_attention_is_the_default_and_matches_the_reference)
{
    const char *shapes[] = {
        "\"batch\":1,\"heads\":2,\"seq_q\":77,\"seq_k\":130,\"head_dim\":128",
        "\"batch\":2,\"heads\":8,\"heads_kv\":2,\"seq_q\":300,\"seq_k\":77,\"head_dim\":64,"
        "\"causal\":true",
        "\"batch\":1,\"heads\":8,\"heads_kv\":1,\"seq_q\":77,\"seq_k\":300,\"head_dim\":128,"
        "\"causal\":true",
        "\"batch\":2,\"heads\":4,\"seq_q\":200,\"seq_k\":200,\"head_dim\":64,\"causal\":true",
        "\"batch\":3,\"heads\":16,\"heads_kv\":4,\"seq_q\":1,\"seq_k\":1000,\"head_dim\":128",
        /* Split keys: 8 ways with a ragged last tile, and 4 ways causal. */
        "\"batch\":1,\"heads\":32,\"heads_kv\":8,\"seq_q\":1,\"seq_k\":2100,\"head_dim\":128",
        "\"batch\":2,\"heads\":8,\"heads_kv\":2,\"seq_q\":5,\"seq_k\":1100,\"head_dim\":64,"
        "\"causal\":true",
        /* Unsplit with few packed rows: a decode step of 128 CTAs, and 64
         * causal rows over 6 key tiles. */
        "\"batch\":16,\"heads\":32,\"heads_kv\":8,\"seq_q\":1,\"seq_k\":1000,\"head_dim\":128",
        "\"batch\":2,\"heads\":8,\"heads_kv\":1,\"seq_q\":8,\"seq_k\":700,\"head_dim\":64,"
        "\"causal\":true",
    };
    const char *dtypes[] = {"bf16", "f16"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int j = 0; j < 2; j++) {
            char json[512];
            snprintf(json, sizeof json, "{\"kind\":\"attention\",\"dtype\":\"%s\",%s}", dtypes[j],
                     shapes[i]);
            tsr_region r;
            tsr_error e;
            cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
            char cand[TSR_CLIENT_NAME_MAX];
            check_region(&r, NULL, json, cand);
            cr_expect_str_eq(cand, "attention_wgmma", "%s", json);
            tsr_region_free(&r);
        }
}

/* A NaN in one row of Q, K or V, with causal masking: the kernels give NaN
 * exactly where the reference does (a masked key's NaN value reaches no row
 * that cannot see it) and the same values elsewhere. Once with one CTA per
 * row tile, once with the keys split 8 ways (16 queries, the poisoned key
 * visible to half of them), once unsplit with 64 packed rows (the poisoned key
 * visible to 10 of each head's 16 queries). */
static void expect_attention_nan_placement(const char *json, const int row[3]);

Test(cuda_backend, tier3_attention_places_nan_like_the_reference)
{
    const int rows[] = {37, 100, 100};
    expect_attention_nan_placement("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,"
                                   "\"heads\":4,\"heads_kv\":2,\"seq_q\":256,\"seq_k\":256,"
                                   "\"head_dim\":128,\"causal\":true}",
                                   rows);
    const int split_rows[] = {5, 2040, 2040};
    expect_attention_nan_placement("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,"
                                   "\"heads\":4,\"heads_kv\":2,\"seq_q\":16,\"seq_k\":2048,"
                                   "\"head_dim\":128,\"causal\":true}",
                                   split_rows);
    const int few_rows[] = {5, 690, 690};
    expect_attention_nan_placement("{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,"
                                   "\"heads\":4,\"heads_kv\":1,\"seq_q\":16,\"seq_k\":700,"
                                   "\"head_dim\":128,\"causal\":true}",
                                   few_rows);
}

/* A bf16 region (from json) run with NaNs in its inputs: its output buffers
 * and count, for nan_run_launch; nan_run_close frees them. */
typedef struct nan_run {
    tsr_region r;
    size_t count, bytes;
    uint16_t *got, *want;
} nan_run;

static void nan_run_open(const char *json, nan_run *nr)
{
    tsr_error e;
    cr_assert_eq(tsr_region_from_json(json, strlen(json), &nr->r, &e), TSR_OK, "%s", e.message);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out_desc;
    tsr_region_signature(&nr->r, sig, &out_desc);
    nr->count = (size_t)tsr_tensor_desc_elements(&out_desc);
    nr->bytes = (size_t)tsr_tensor_desc_bytes(&out_desc);
    nr->got = malloc(nr->bytes);
    nr->want = malloc(nr->bytes);
    cr_assert(nr->got != NULL && nr->want != NULL);
}

/* Runs the region on inputs through the daemon (asserting candidate ran it)
 * and the reference; *nan_want counts the reference's NaNs, *misplaced the
 * outputs that are NaN on one side only. */
static void nan_run_launch(nan_run *nr, void *const *inputs, const char *candidate,
                           size_t *nan_want, size_t *misplaced)
{
    tsr_error e;
    memset(nr->got, 0, nr->bytes);
    tsr_client_decision decision;
    cr_assert_eq(tsr_client_run(client_, (const struct tsr_region *)&nr->r, NULL,
                                (const void *const *)inputs, nr->got, &decision, GPU_TIMEOUT_MS,
                                &e),
                 TSR_OK, "%s", e.message);
    cr_expect_str_eq(decision.candidate, candidate);
    cr_assert_eq(tsr_ref_run(&nr->r, (const void *const *)inputs, nr->want, 0, &e), TSR_OK);
    *nan_want = 0;
    *misplaced = 0;
    for (size_t i = 0; i < nr->count; i++) {
        int gn = isnan(tsr_dtype_load(TSR_BF16, nr->got, i));
        int wn = isnan(tsr_dtype_load(TSR_BF16, nr->want, i));
        *nan_want += (size_t)wn;
        *misplaced += (size_t)(gn != wn);
    }
}

static void nan_run_close(nan_run *nr)
{
    free(nr->got);
    free(nr->want);
    tsr_region_free(&nr->r);
}

static void expect_attention_nan_placement(const char *json, const int row[3])
{
    nan_run nr;
    nan_run_open(json, &nr);
    tsr_error e;
    /* Input, row: a Q row of head 0; a K row and a V row of kv head 0. */
    const int which[] = {0, 1, 2};
    for (int c = 0; c < 3; c++) {
        void *inputs[TSR_MAX_REGION_INPUTS] = {0};
        cr_assert_eq(tsr_oracle_make_probe(&nr.r, 99, 0, 1, inputs, &e), TSR_OK, "%s", e.message);
        uint16_t *x = inputs[which[c]];
        for (int d = 0; d < 128; d++)
            x[row[c] * 128 + d] = 0x7FC0; /* bf16 NaN */
        size_t nan_want, misplaced;
        nan_run_launch(&nr, inputs, "attention_wgmma", &nan_want, &misplaced);
        cr_expect_gt(nan_want, 0, "%s input %d: the reference has no NaN", json, which[c]);
        cr_expect_eq(misplaced, 0, "%s input %d: %zu of %zu NaN positions differ", json, which[c],
                     misplaced, nr.count);
        tsr_verdict v;
        tsr_verdict_init(&v, 0, TSR_BF16);
        tsr_oracle_compare(&v, 0, TSR_BF16, nr.got, nr.want, nr.count);
        char line[256];
        tsr_verdict_format(&v, line, sizeof line);
        cr_expect(v.pass, "input %d: %s", which[c], line);
        tsr_oracle_free_probe(&nr.r, inputs);
    }
    nan_run_close(&nr);
}

/* Compiles the region of json with the default options, asserted. */
static tsr_client_compiled compile_json(const char *json)
{
    tsr_region r;
    tsr_error err;
    cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &err), TSR_OK, "%s", err.message);
    tsr_client_compiled k;
    cr_assert_eq(tsr_client_compile(client_, &r, NULL, &k, GPU_TIMEOUT_MS, &err), TSR_OK, "%s",
                 err.message);
    tsr_region_free(&r);
    return k;
}

static double gpu_counter(const char *name)
{
    tsr_client_stats *s = NULL;
    tsr_error e;
    cr_assert_eq(tsr_client_stats_get(client_, false, &s, GPU_TIMEOUT_MS, &e), TSR_OK, "%s",
                 e.message);
    double v = tsr_client_stats_counter(s, name, -1);
    tsr_client_stats_free(s);
    return v;
}

/* Kernel variants on the GPU: one layer at many batch sizes (and one
 * attention at many batches and lengths) is one build per variant, each shape
 * verified (the first completely, the others by their sampled check) and each
 * result matching the reference. Tier-1 f32 (M and attention's batch and
 * lengths as kernel parameters), the tier-3 GEMM (small-M and wide variants),
 * the tier-3 attention, and Tier-1 pointwise (the whole shape a parameter). */
Test(cuda_backend, every_shape_of_a_variant_runs_one_binary_and_matches_the_reference)
{
    static const struct {
        const char *fmt; /* one %d */
        const char *cand;
        int first, step, count, builds;
    } layers[] = {
        {"{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":%d,\"n\":200,\"k\":136,"
         "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
         "tier1", 1, 37, 12, 1},
        {"{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":%d,\"n\":1000,\"k\":520,"
         "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
         "gemm_wgmma", 16, 24, 12, 3}, /* M 16: m16; 40, 64: m64; 88 ..: ping-pong */
        {"{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":%d,\"heads\":4,\"heads_kv\":2,"
         "\"seq_q\":33,\"seq_k\":130,\"head_dim\":64,\"causal\":true}",
         "tier1", 1, 1, 6, 1},
        {"{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":%d,\"heads\":8,\"heads_kv\":2,"
         "\"seq_q\":1,\"seq_k\":777,\"head_dim\":128}",
         "attention_wgmma", 1, 3, 6, 1},
        /* Pointwise: x·w then silu, rows of a broadcast weight (tiled rows of
         * 4096), and relu(a+b)·sigmoid(c) over ragged lengths (vectors and a
         * scalar tail). One binary each. */
        {"{\"kind\":\"pointwise\",\"dtype\":\"bf16\",\"inputs\":[{\"name\":\"x\",\"shape\":[%d,"
         "4096]},{\"name\":\"w\",\"shape\":[4096]}],\"ops\":[{\"op\":\"mul\",\"args\":[\"x\",\"w\"]"
         ","
         "\"out\":\"t\"},{\"op\":\"silu\",\"args\":[\"t\"],\"out\":\"y\"}],\"output\":\"y\"}",
         "tier1", 2, 37, 12, 1},
        {"{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[%d]},"
         "{\"name\":\"b\",\"shape\":[1]},{\"name\":\"c\",\"shape\":[1]}],\"ops\":[{\"op\":\"add\","
         "\"args\":[\"a\",\"b\"],\"out\":\"s\"},{\"op\":\"relu\",\"args\":[\"s\"],\"out\":\"r\"},"
         "{\"op\":\"sigmoid\",\"args\":[\"c\"],\"out\":\"g\"},{\"op\":\"mul\",\"args\":[\"r\","
         "\"g\"],\"out\":\"y\"}],\"output\":\"y\"}",
         "tier1", 1001, 333, 12, 1},
    };
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        double builds = gpu_counter("kcache_builds_total");
        char key[TSR_CLIENT_KEY_MAX] = "";
        for (int i = 0; i < layers[l].count; i++) {
            char json[768];
            snprintf(json, sizeof json, layers[l].fmt, layers[l].first + i * layers[l].step);
            tsr_region r;
            tsr_error e;
            cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
            tsr_client_compiled out;
            cr_assert_eq(tsr_client_compile(client_, (const struct tsr_region *)&r, NULL, &out,
                                            GPU_TIMEOUT_MS, &e),
                         TSR_OK, "%s: %s", json, e.message);
            cr_expect_str_eq(out.decision.candidate, layers[l].cand, "%s", json);
            cr_expect_eq(out.decision.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s", json);
            if (i > 0 && layers[l].builds == 1)
                cr_expect_str_eq(out.key, key, "%s", json);
            snprintf(key, sizeof key, "%s", out.key);
            char cand[TSR_CLIENT_NAME_MAX];
            check_region(&r, NULL, json, cand);
            tsr_region_free(&r);
        }
        /* Every first shape here is small enough to be verified in full (no
         * small-shape build), so the builds are the variants. */
        double made = gpu_counter("kcache_builds_total") - builds;
        cr_expect_eq(made, (double)layers[l].builds, "%s: %.0f builds", layers[l].fmt, made);
    }
}

/* Each of n regions (JSON) is served by candidate by default and matches the
 * reference on every probe set. */
static void expect_served_by(const char *candidate, const char *const *regions, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tsr_region r;
        tsr_error e;
        cr_assert_eq(tsr_region_from_json(regions[i], strlen(regions[i]), &r, &e), TSR_OK, "%s",
                     e.message);
        char cand[TSR_CLIENT_NAME_MAX];
        check_region(&r, NULL, regions[i], cand);
        cr_expect_str_eq(cand, candidate, "%s", regions[i]);
        tsr_region_free(&r);
    }
}

/* A bf16 product (json, m x n x k) with one NaN in A at (a_row, a_col) and
 * one in B at (b_row, b_col), run by gemm_wgmma: NaN exactly in row a_row and
 * column b_col, as the reference has them. */
static void expect_gemm_nan_cross(const char *json, int m, int n, int k, int a_row, int a_col,
                                  int b_row, int b_col, uint64_t seed)
{
    nan_run nr;
    nan_run_open(json, &nr);
    tsr_error e;
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    cr_assert_eq(tsr_oracle_make_probe(&nr.r, seed, 0, 1, inputs, &e), TSR_OK, "%s", e.message);
    ((uint16_t *)inputs[0])[(size_t)a_row * k + a_col] = 0x7FC0;
    ((uint16_t *)inputs[1])[(size_t)b_row * n + b_col] = 0x7FC0;
    size_t nan_want, misplaced;
    nan_run_launch(&nr, inputs, "gemm_wgmma", &nan_want, &misplaced);
    cr_expect_eq(nan_want, (size_t)m + n - 1, "%s: the reference's NaNs: %zu", json, nan_want);
    cr_expect_eq(misplaced, 0, "%s: %zu of %zu NaN positions differ", json, misplaced, nr.count);
    tsr_oracle_free_probe(&nr.r, inputs);
    nan_run_close(&nr);
}

/* Products of at most 64 rows take the small-M kernels (a decode step: the
 * transposed product, K split over a cluster of 1, 2, 4 or 8 CTAs); through
 * the default path they match the reference, epilogue included. */
Test(cuda_backend, small_m_gemm_kernels_serve_decode_steps)
{
    const char *regions[] = {
        /* m16, 8 column tiles of 128, 9 K slices: 4 shares */
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":16,\"n\":1000,\"k\":520}",
        /* m64, one K share each of 5 slices: 2 shares */
        "{\"kind\":\"matmul\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"m\":64,\"n\":776,"
        "\"k\":264}",
        /* m64 with the whole epilogue */
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":33,\"n\":1000,\"k\":520,"
        "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
        /* m32, 8 shares of 36 slices */
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":20,\"n\":2056,\"k\":2296,"
        "\"epilogue\":[\"bias\",\"silu\"]}",
        /* one row, one K slice: no split */
        "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"out_dtype\":\"f32\",\"m\":1,\"n\":264,"
        "\"k\":40}",
    };
    expect_served_by("gemm_wgmma", regions, sizeof regions / sizeof regions[0]);

    /* Gated decode steps: 128 columns of both weights, K split 8 ways, and
     * 64 rows with gelu into f32. */
    const char *gated[] = {
        "{\"kind\":\"gated\",\"dtype\":\"bf16\",\"m\":16,\"k\":1040,\"h\":1032,"
        "\"gate_act\":\"silu\"}",
        "{\"kind\":\"gated\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"m\":64,\"k\":264,"
        "\"h\":776,\"gate_act\":\"gelu\"}",
    };
    expect_served_by("swiglu_wgmma", gated, sizeof gated / sizeof gated[0]);

    /* A NaN in A (row 21) and one in B (column 1029, in the last column
     * tile), with the K dimension's 17 slices split 8 ways. */
    expect_gemm_nan_cross("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":24,\"n\":1032,"
                          "\"k\":1040,\"epilogue\":[\"bias\",\"relu\"]}",
                          24, 1032, 1040, 21, 700, 9, 1029, 78);
}

typedef struct gpu_batch {
    tsr_client *c;
    tsr_client_launch_desc *descs;
    size_t n;
    tsr_status status;
    tsr_client_batch_result result;
    int finished; /* order of completion: 1 first, 2 second */
} gpu_batch;

static int gpu_done_order;
static pthread_mutex_t gpu_done_lock = PTHREAD_MUTEX_INITIALIZER;

static int gpu_mark_done(void)
{
    pthread_mutex_lock(&gpu_done_lock);
    int order = ++gpu_done_order;
    pthread_mutex_unlock(&gpu_done_lock);
    return order;
}

static void *gpu_batch_main(void *arg)
{
    gpu_batch *b = arg;
    tsr_error err;
    b->status = tsr_client_batch(b->c, b->descs, b->n, true, &b->result, GPU_TIMEOUT_MS, &err);
    b->finished = gpu_mark_done();
    return NULL;
}

/* A captured batch of 2000 bf16 4096³ products (about 0.4 s of device work)
 * runs as graphs of a few milliseconds each with a synchronize between them:
 * another client's 4-element run, sent while it runs, is answered before the
 * batch, and the batch gave its worker away midway (job_yields_total). As one
 * graph, the run's copy would wait on the device for the whole batch. */
Test(cuda_backend, a_captured_batch_yields_to_another_clients_run)
{
    /* With the batch's chunks in the log. */
    tsr_client_close(client_);
    testd_stop(&daemon_);
    const char *const debug_flags[] = {"--backend", "cuda", "--log-level", "debug", NULL};
    cr_assert_eq(testd_restart(&daemon_, debug_flags), 0);
    client_ = testd_client(&daemon_, GPU_TIMEOUT_MS);
    cr_assert_not_null(client_);
    const char *json = "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":4096,\"n\":4096,\"k\":4096}";
    tsr_error err;
    tsr_client_compiled k = compile_json(json);
    int64_t shape[2] = {4096, 4096};
    tsr_buffer ab[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_BF16, 2, shape, &ab[i], NULL,
                                             GPU_TIMEOUT_MS, &err),
                     TSR_OK, "%s", err.message);
    enum { LAUNCHES = 2000 };
    tsr_client_launch_desc *descs = calloc(LAUNCHES, sizeof *descs);
    for (int i = 0; i < LAUNCHES; i++)
        descs[i] = (tsr_client_launch_desc){k.kernel, 2, ab, ab[2]};

    /* The other client's run, compiled beforehand. */
    tsr_client *other = testd_client(&daemon_, GPU_TIMEOUT_MS);
    cr_assert_not_null(other);
    tsr_region *tiny = testdata_affine(4);
    float in[4] = {1, 2, 3, 4}, out[4];
    const void *inputs[1] = {in};
    cr_assert_eq(tsr_client_run(other, tiny, NULL, inputs, out, NULL, GPU_TIMEOUT_MS, &err), TSR_OK,
                 "%s", err.message);

    /* The first batch measures the kernel, the second captures, the third
     * replays: the one timed against the run. */
    for (int round = 0; round < 2; round++) {
        tsr_client_batch_result res;
        cr_assert_eq(tsr_client_batch(client_, descs, LAUNCHES, true, &res, GPU_TIMEOUT_MS, &err),
                     TSR_OK, "%s", err.message);
        cr_assert_eq(res.launched, LAUNCHES);
    }
    double yields = fixture_counter(client_, "job_yields_total");
    gpu_batch b = {.c = client_, .descs = descs, .n = LAUNCHES};
    gpu_done_order = 0;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, gpu_batch_main, &b), 0);
    struct timespec pause = {0, 30 * 1000 * 1000};
    nanosleep(&pause, NULL);
    cr_expect_eq(tsr_client_run(other, tiny, NULL, inputs, out, NULL, GPU_TIMEOUT_MS, &err), TSR_OK,
                 "%s", err.message);
    int run_finished = gpu_mark_done();
    pthread_join(th, NULL);
    cr_assert_eq(b.status, TSR_OK);
    cr_expect_eq(b.result.launched, LAUNCHES);
    cr_expect(b.result.graph_replayed, "the third batch replays its graphs");
    cr_expect_eq(out[3], 9.0f, "y = 2x + 1");
    cr_log_info("batch of %d launches: %.1f ms of device time", LAUNCHES, b.result.device_ms);
    cr_expect_eq(run_finished, 1, "the run was answered after the whole batch");
    cr_expect_gt(fixture_counter(client_, "job_yields_total"), yields,
                 "the batch never gave its worker away");
    tsr_client_region_free(tiny);
    tsr_client_close(other);
    free(descs);
}

/* Submission rings on the GPU: a kernel launched through shared memory gives
 * what the same launch by request gives, in order, from the device worker. */
Test(cuda_backend, ring_launches_match_request_launches)
{
    enum { N = 4096 };
    tsr_region *r = testdata_affine(N);
    cr_assert_not_null(r);
    tsr_client_compiled k;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(client_, r, NULL, &k, GPU_TIMEOUT_MS, &err), TSR_OK, "%s",
                 err.message);
    int64_t shape[1] = {N};
    tsr_buffer x, y;
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F32, 1, shape, &x, NULL, 0, &err),
                 TSR_OK);
    cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_F32, 1, shape, &y, NULL, 0, &err),
                 TSR_OK);
    static float in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (float)(i % 64);
    cr_assert_eq(tsr_client_buffer_write(client_, x, 0, in, sizeof in, 0, &err), TSR_OK);
    /* x -> y, then y -> x: five rounds of both. */
    tsr_client_launch_desc b[2] = {{k.kernel, 1, &x, y}, {k.kernel, 1, &y, x}};
    tsr_client_ring *ring = NULL;
    cr_assert_eq(tsr_client_ring_open(client_, b, 2, 4, &ring, 0, &err), TSR_OK, "%s", err.message);
    for (int i = 0; i < 10; i++) {
        double ms = -1;
        cr_assert_eq(tsr_client_ring_launch(ring, (uint32_t)(i % 2), &ms, 0, &err), TSR_OK, "%s",
                     err.message);
        cr_expect_geq(ms, 0.0);
    }
    /* Four more as one run: submitted together, launched in groups once the
     * bindings have been measured, still in order. */
    uint32_t seq[] = {0, 1, 0, 1};
    double run_ms = -1;
    cr_assert_eq(tsr_client_ring_run(ring, seq, 4, &run_ms, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_geq(run_ms, 0.0);
    uint64_t served = 0;
    cr_assert_eq(tsr_client_ring_close(ring, &served, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(served, 14);
    cr_assert_eq(tsr_client_buffer_read(client_, x, 0, out, sizeof out, NULL, 0, &err), TSR_OK);
    /* 14 steps of 2v+1 from v: 16384 v + 16383, exact in f32. */
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], 16384.0f * in[i] + 16383.0f, "x[%d] = %g", i, (double)out[i]);
    tsr_client_region_free(r);
}

/* Products of more than 64 rows with an epilogue take the ping-pong kernels
 * (tsr_gemm_<in>_<out>_pp): ragged M, N and K, each epilogue op, and a NaN in A
 * and one in B reaching exactly the reference's positions (one row and one
 * column of the output). */
Test(cuda_backend, ping_pong_gemm_serves_every_epilogue_and_places_nan)
{
    const char *regions[] = {
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":1000,\"n\":776,\"k\":520,"
        "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"m\":515,\"n\":392,"
        "\"k\":200,\"epilogue\":[\"bias\",\"silu\",\"tanh\"],\"residual\":true}",
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":1032,\"k\":96,"
        "\"epilogue\":[\"relu\",\"bias\",\"sigmoid\"]}",
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":999,\"n\":264,\"k\":136,\"residual\":true}",
    };
    expect_served_by("gemm_wgmma", regions, sizeof regions / sizeof regions[0]);
    expect_gemm_nan_cross("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":520,"
                          "\"k\":264,\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
                          300, 520, 264, 77, 5, 10, 333, 77);
}

/* A bf16 product with a row reduction (json, m x n x k) whose A holds one
 * value (bits) at (a_row, a_col): a NaN or an infinity there makes the whole
 * row a_row NaN in the reference (its norm or its max is NaN or infinite), and
 * gemm_wgmma's row kernel must place exactly those NaNs. */
static void expect_gemm_row_nan(const char *json, int n, int k, int a_row, int a_col, uint16_t bits,
                                uint64_t seed)
{
    nan_run nr;
    nan_run_open(json, &nr);
    tsr_error e;
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    cr_assert_eq(tsr_oracle_make_probe(&nr.r, seed, 0, 1, inputs, &e), TSR_OK, "%s", e.message);
    ((uint16_t *)inputs[0])[(size_t)a_row * k + a_col] = bits;
    size_t nan_want, misplaced;
    nan_run_launch(&nr, inputs, "gemm_wgmma", &nan_want, &misplaced);
    cr_expect_eq(nan_want, (size_t)n, "%s: the reference's NaNs: %zu", json, nan_want);
    cr_expect_eq(misplaced, 0, "%s: %zu of %zu NaN positions differ", json, misplaced, nr.count);
    tsr_oracle_free_probe(&nr.r, inputs);
    nan_run_close(&nr);
}

/* Two cases the reference decides element by element. A softmax whose bias
 * masks the last 8 columns with -inf (the ragged last tile all -inf) gives 0
 * there and finite values elsewhere, no NaN. An infinity in B at column 300
 * makes that column infinite in every row before an rmsnorm: the reference
 * gives NaN there (inf / inf) and 0 elsewhere (x / inf), one NaN per row. */
static void expect_gemm_rows_special(void)
{
    nan_run nr;
    nan_run_open("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":264,\"k\":64,"
                 "\"epilogue\":[\"bias\"],\"reduction\":\"softmax\"}",
                 &nr);
    tsr_error e;
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    cr_assert_eq(tsr_oracle_make_probe(&nr.r, 31, 0, 1, inputs, &e), TSR_OK, "%s", e.message);
    for (int c = 256; c < 264; c++)
        ((uint16_t *)inputs[2])[c] = 0xFF80; /* -inf */
    size_t nan_want, misplaced;
    nan_run_launch(&nr, inputs, "gemm_wgmma", &nan_want, &misplaced);
    cr_expect_eq(nan_want, 0, "masked softmax: the reference's NaNs: %zu", nan_want);
    cr_expect_eq(misplaced, 0, "masked softmax: %zu NaN positions differ", misplaced);
    size_t nonzero = 0;
    for (int row = 0; row < 300; row++)
        for (int c = 256; c < 264; c++)
            nonzero += tsr_dtype_load(TSR_BF16, nr.got, (size_t)row * 264 + c) != 0.0;
    cr_expect_eq(nonzero, 0, "masked softmax: %zu masked outputs are not 0", nonzero);
    tsr_oracle_free_probe(&nr.r, inputs);
    nan_run_close(&nr);

    nan_run_open("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":776,\"k\":264,"
                 "\"reduction\":\"rmsnorm\"}",
                 &nr);
    cr_assert_eq(tsr_oracle_make_probe(&nr.r, 32, 0, 1, inputs, &e), TSR_OK, "%s", e.message);
    ((uint16_t *)inputs[1])[(size_t)7 * 776 + 300] = 0x7F80; /* B[7][300] = +inf */
    nan_run_launch(&nr, inputs, "gemm_wgmma", &nan_want, &misplaced);
    cr_expect_eq(nan_want, 300, "rmsnorm, inf in B: the reference's NaNs: %zu", nan_want);
    cr_expect_eq(misplaced, 0, "rmsnorm, inf in B: %zu NaN positions differ", misplaced);
    tsr_oracle_free_probe(&nr.r, inputs);
    nan_run_close(&nr);
}

/* Products of more than 64 rows with a row reduction over at most 8192
 * columns take the row kernels (tsr_gemm_<in>_<out>_rows): every reduction,
 * ops before it, ragged M, N and K, one to 32 column tiles, clusters of 1,
 * 2, 4 and 8 CTAs, every output dtype; a NaN or an infinity in A makes
 * exactly its row NaN. */
Test(cuda_backend, row_reduction_gemm_kernels_serve_every_norm_and_place_nan)
{
    const char *regions[] = {
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":1000,\"n\":776,\"k\":520,"
        "\"epilogue\":[\"bias\",\"gelu\"],\"reduction\":\"rmsnorm\"}",
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"m\":515,\"n\":2056,"
        "\"k\":200,\"epilogue\":[\"silu\"],\"reduction\":\"layer_norm\",\"eps\":1e-5}",
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":1032,\"k\":96,"
        "\"epilogue\":[\"bias\"],\"reduction\":\"softmax\"}",
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":129,\"n\":8192,\"k\":64,"
        "\"reduction\":\"rmsnorm\"}",
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"out_dtype\":\"f16\",\"m\":65,\"n\":264,"
        "\"k\":136,\"epilogue\":[\"tanh\"],\"reduction\":\"layer_norm\"}",
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"out_dtype\":\"bf16\",\"m\":777,\"n\":4096,"
        "\"k\":1000,\"epilogue\":[\"relu\"],\"reduction\":\"softmax\"}",
        /* one column tile: no cluster */
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"out_dtype\":\"f32\",\"m\":200,\"n\":256,"
        "\"k\":72,\"reduction\":\"rmsnorm\"}",
        /* 68 blocks in pairs: 136 CTAs, two waves */
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4300,\"n\":512,\"k\":64,"
        "\"epilogue\":[\"sigmoid\"],\"reduction\":\"softmax\"}",
        /* 32 blocks in pairs: three tiles per CTA (an odd count), the last ragged */
        "{\"kind\":\"fused\",\"dtype\":\"f16\",\"m\":2000,\"n\":1288,\"k\":64,"
        "\"epilogue\":[\"bias\",\"gelu\"],\"reduction\":\"layer_norm\"}",
        /* softmax into f32, under f32's bound */
        "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"out_dtype\":\"f32\",\"m\":300,\"n\":520,"
        "\"k\":64,\"reduction\":\"softmax\"}",
    };
    expect_served_by("gemm_wgmma", regions, sizeof regions / sizeof regions[0]);
    static const char *const norms[] = {"rmsnorm", "layer_norm", "softmax"};
    for (int i = 0; i < 3; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":300,\"n\":776,\"k\":264,"
                 "\"epilogue\":[\"bias\"],\"reduction\":\"%s\"}",
                 norms[i]);
        expect_gemm_row_nan(json, 776, 264, 77, 5, 0x7FC0, 10 + (uint64_t)i);    /* NaN */
        expect_gemm_row_nan(json, 776, 264, 250, 100, 0x7F80, 20 + (uint64_t)i); /* +inf */
    }
    expect_gemm_rows_special();
}

/* The sampled check's probe inputs made on the device hold, element for
 * element, what the host reference makes of the same keys: every dtype, a
 * length that no block or grid divides, and a fill of all-ones bytes; the
 * device's gather of sampled positions returns their bytes. */
Test(cuda_backend, device_probe_inputs_equal_the_host_formula_element_for_element)
{
    const tsrd_backend_ops *ops = &tsrd_backend_cuda;
    tsrd_backend *b = NULL;
    tsr_error e;
    cr_assert_eq(ops->open(NULL, &b, &e), TSR_OK, "%s", e.message);
    cr_assert_not_null(ops->probe);
    const tsr_dtype dtypes[] = {TSR_F32, TSR_BF16, TSR_F16};
    const uint64_t n = 5000011; /* past 132 SMs x 16 blocks x 256 threads: the loop strides */
    for (int j = 0; j < 3; j++) {
        size_t size = tsr_dtype_size(dtypes[j]);
        tsrd_dbuf *buf = NULL;
        cr_assert_eq(ops->buffer_alloc(b, 0, n * size + 64, &buf, &e), TSR_OK, "%s", e.message);
        uint8_t *got = malloc(n * size + 64), *want = malloc(n * size + 64);
        cr_assert(got != NULL && want != NULL);
        for (int k = 0; k < 2; k++) {
            uint64_t key = tsr_oracle_sampled_key(77, k, j);
            cr_assert_eq(ops->probe->buffer_fill_ones(b, buf, n * size + 64, &e), TSR_OK, "%s",
                         e.message);
            cr_assert_eq(ops->probe->buffer_fill_probe(b, buf, dtypes[j], n, key, &e), TSR_OK, "%s",
                         e.message);
            cr_assert_eq(ops->buffer_read(b, buf, 0, got, n * size + 64, &e), TSR_OK, "%s",
                         e.message);
            tsr_oracle_sampled_fill(dtypes[j], want, 0, n, key);
            memset(want + n * size, 0xff, 64);
            for (uint64_t x = 0; x < n * size + 64; x++)
                cr_assert_eq(got[x], want[x], "%s key %d: byte %llu", tsr_dtype_name(dtypes[j]), k,
                             (unsigned long long)x);
        }
        /* Gathered on the device: every 997th element and the last. */
        size_t count = 0;
        uint64_t *index = malloc((n / 997 + 2) * sizeof *index);
        cr_assert_not_null(index);
        for (uint64_t x = 0; x < n; x += 997)
            index[count++] = x;
        index[count++] = n - 1;
        uint8_t *picked = malloc(count * size);
        cr_assert_not_null(picked);
        cr_assert_eq(ops->probe->buffer_gather(b, buf, (uint32_t)size, index, count, picked, &e),
                     TSR_OK, "%s", e.message);
        for (size_t t = 0; t < count; t++)
            cr_assert_eq(memcmp(picked + t * size, got + index[t] * size, size), 0, "[%llu]",
                         (unsigned long long)index[t]);
        index[0] = (n * size + 64) / size;
        cr_expect_eq(ops->probe->buffer_gather(b, buf, (uint32_t)size, index, 1, picked, &e),
                     TSR_BUFFER_MISMATCH);
        free(index);
        free(picked);
        /* Past the buffer: refused, the buffer untouched. */
        cr_expect_eq(ops->probe->buffer_fill_probe(b, buf, dtypes[j], n + 64, 1, &e),
                     TSR_BUFFER_MISMATCH);
        cr_expect_eq(ops->probe->buffer_fill_ones(b, buf, n * size + 65, &e), TSR_BUFFER_MISMATCH);
        free(got);
        free(want);
        ops->buffer_free(b, buf);
    }
    ops->close(b);
}

/* Decode attention large enough to be checked by sampling, through the
 * daemon, its inputs made on the device: it passes, sampled, at two batch
 * sizes. */
Test(cuda_backend, sampled_decode_attention_verifies_with_inputs_made_on_the_device)
{
    const int batches[] = {64, 100};
    for (int i = 0; i < 2; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":%d,\"heads\":32,"
                 "\"heads_kv\":8,\"seq_q\":1,\"seq_k\":4096,\"head_dim\":128}",
                 batches[i]);
        tsr_region r;
        tsr_error e;
        cr_assert_eq(tsr_region_from_json(json, strlen(json), &r, &e), TSR_OK, "%s", e.message);
        tsr_client_verify_opts opts = {.candidate = "attention_wgmma"};
        tsr_client_verified out;
        cr_assert_eq(tsr_client_verify(client_, (const struct tsr_region *)&r, &opts, &out,
                                       GPU_TIMEOUT_MS, &e),
                     TSR_OK, "%s", e.message);
        cr_expect_str_eq(out.verdict.method, "sampled", "%s", json);
        cr_expect_eq(out.verdict.state, TSR_CLIENT_VERDICT_PASS, "%s: %s", json,
                     out.verdict.reason);
        cr_expect_gt(out.verdict.sampled_elements, 0);
        tsr_region_free(&r);
    }
}

/* One tier-3 GEMM kernel launched in batches on buffers that change from
 * launch to launch: each launch's tensor maps follow its own buffers. All-ones
 * B, A of ones or twos, K 128: every output element is 128 or 256, exact in
 * bf16. */
static void expect_bf16_fill(tsr_buffer buf, uint16_t want, size_t count, const char *what)
{
    uint16_t *got = malloc(count * 2);
    cr_assert_not_null(got);
    tsr_error err;
    size_t n = 0;
    cr_assert_eq(tsr_client_buffer_read(client_, buf, 0, got, count * 2, &n, GPU_TIMEOUT_MS, &err),
                 TSR_OK, "%s", err.message);
    cr_assert_eq(n, count * 2);
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
        wrong += got[i] != want;
    cr_expect_eq(wrong, 0, "%s: %zu of %zu elements are not 0x%04x (first 0x%04x)", what, wrong,
                 count, want, got[0]);
    free(got);
}

/* A bf16 product m x n x k compiled by default, with B all ones, A of ones
 * (a1) or twos (a2) and two outputs: every output of A·B is k or 2k. */
typedef struct ones_twos {
    tsr_client_compiled k;
    tsr_buffer a1, a2, b, o1, o2;
    tsr_buffer in1[2], in2[2]; /* {a1, b}, {a2, b} */
} ones_twos;

static void ones_twos_make(ones_twos *t, int64_t m, int64_t n, int64_t k)
{
    char json[160];
    snprintf(json, sizeof json,
             "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":%lld,\"n\":%lld,\"k\":%lld}",
             (long long)m, (long long)n, (long long)k);
    t->k = compile_json(json);
    cr_expect_str_eq(t->k.decision.candidate, "gemm_wgmma", "%s", json);
    int64_t a_shape[2] = {m, k}, b_shape[2] = {k, n}, o_shape[2] = {m, n};
    const struct {
        tsr_buffer *buf;
        int64_t *shape;
        uint16_t fill;
    } bufs[] = {{&t->a1, a_shape, 0x3F80},
                {&t->a2, a_shape, 0x4000},
                {&t->b, b_shape, 0x3F80},
                {&t->o1, o_shape, 0},
                {&t->o2, o_shape, 0}};
    tsr_error err;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        cr_assert_eq(tsr_client_buffer_alloc(client_, TSR_CLIENT_BF16, 2, bufs[i].shape,
                                             bufs[i].buf, NULL, GPU_TIMEOUT_MS, &err),
                     TSR_OK, "%s", err.message);
        size_t count = (size_t)(bufs[i].shape[0] * bufs[i].shape[1]);
        uint16_t *fill = malloc(count * 2);
        cr_assert_not_null(fill);
        for (size_t j = 0; j < count; j++)
            fill[j] = bufs[i].fill;
        cr_assert_eq(tsr_client_buffer_write(client_, *bufs[i].buf, 0, fill, count * 2,
                                             GPU_TIMEOUT_MS, &err),
                     TSR_OK, "%s", err.message);
        free(fill);
    }
    t->in1[0] = t->a1;
    t->in1[1] = t->b;
    t->in2[0] = t->a2;
    t->in2[1] = t->b;
}

Test(cuda_backend, batched_gemm_launches_follow_their_own_buffers)
{
    enum { M = 256, N = 256, K = 128 };
    ones_twos t;
    ones_twos_make(&t, M, N, K);
    tsr_error err;
    tsr_client_batch_result res;
    /* Ones into t.o1, twos into t.o2, twice over (the second batch's first launch
     * follows a launch with other buffers on the same stream). */
    tsr_client_launch_desc two[4] = {{t.k.kernel, 2, t.in1, t.o1},
                                     {t.k.kernel, 2, t.in2, t.o2},
                                     {t.k.kernel, 2, t.in1, t.o1},
                                     {t.k.kernel, 2, t.in2, t.o2}};
    cr_assert_eq(tsr_client_batch(client_, two, 4, false, &res, GPU_TIMEOUT_MS, &err), TSR_OK, "%s",
                 err.message);
    expect_bf16_fill(t.o1, 0x4300, M * N, "o1 = ones · ones"); /* 128 */
    expect_bf16_fill(t.o2, 0x4380, M * N, "o2 = twos · ones"); /* 256 */
    /* Then the outputs swapped: the last launch into t.o1 is the twos'. */
    tsr_client_launch_desc swapped[2] = {{t.k.kernel, 2, t.in1, t.o2},
                                         {t.k.kernel, 2, t.in2, t.o1}};
    cr_assert_eq(tsr_client_batch(client_, swapped, 2, false, &res, GPU_TIMEOUT_MS, &err), TSR_OK,
                 "%s", err.message);
    expect_bf16_fill(t.o1, 0x4380, M * N, "o1 = twos · ones");
    expect_bf16_fill(t.o2, 0x4300, M * N, "o2 = ones · ones");
}

/* A small-M product split over clusters of 8 CTAs (M 16, 8 column tiles of
 * 256, 64 K slices), launched in batches with graph=true, which the daemon
 * captures once the kernel is measured: through the capture each launch
 * follows its own buffers. All-ones B, A of ones or twos, K 4096: every
 * output is 4096 or 8192, exact in bf16. */
Test(cuda_backend, split_small_m_launches_in_graph_batches_follow_their_buffers)
{
    enum { M = 16, N = 2048, K = 4096 };
    ones_twos t;
    ones_twos_make(&t, M, N, K);
    tsr_error err;
    tsr_client_launch_desc descs[4] = {{t.k.kernel, 2, t.in1, t.o1},
                                       {t.k.kernel, 2, t.in2, t.o2},
                                       {t.k.kernel, 2, t.in2, t.o1},
                                       {t.k.kernel, 2, t.in1, t.o2}};
    /* The first batch measures the kernel, the second is captured and the
     * later ones replay its graph; each ends with o1 = twos · ones and o2 =
     * ones · ones. */
    tsr_client_batch_result res;
    for (int round = 0; round < 4; round++) {
        cr_assert_eq(tsr_client_batch(client_, descs, 4, true, &res, GPU_TIMEOUT_MS, &err), TSR_OK,
                     "%s", err.message);
        cr_assert_eq(res.launched, 4);
        expect_bf16_fill(t.o1, 0x4600, M * N, "o1 = twos · ones"); /* 8192 */
        expect_bf16_fill(t.o2, 0x4580, M * N, "o2 = ones · ones"); /* 4096 */
        cr_expect_eq(res.graph_replayed, round >= 2, "batch %d: graph replayed %d", round,
                     (int)res.graph_replayed);
    }
}
