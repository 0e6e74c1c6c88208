/*
 * variants_bench.c — kernels keyed by variant, measured on a GPU.
 *
 *   variants_bench daemon   against a running `tesserad --backend cuda`
 *                           ($TESSERA_URL): one layer sent at 100 batch sizes
 *   variants_bench tier1    in process, through the CUDA backend: the speed
 *                           cost of Tier-1 kernels taking M at run time
 *   variants_bench host     the host's share of a new shape's check (probe
 *                           inputs, sampled positions, the reference at
 *                           them), on any machine
 *   variants_bench          all three (make bench)
 *
 * daemon: for each layer (a bf16 fused bias+gelu+residual GEMM that tier 3
 * serves, the same in f32 that Tier-1 serves, a bf16 decode attention over
 * batch sizes, a bf16 pointwise x·w then silu over rows), for each of 100 batch sizes in order: the
 * shape's buffers are allocated (not timed: a framework has its tensors), then `compile` with
 * default options (the arbiter's own pick, verified) and one launch on those
 * buffers; "first launch" is the wall time from the compile request to the
 * launch's return, "cold compile" the compile request alone. The same compile
 * again is the warm compile. Prints per layer the kernel-cache builds (NVRTC
 * compiles for Tier-1) the 100 shapes cost, the distinct kernel keys, the
 * first shape's times and the median, 90th percentile and largest of the other
 * 99, the same for the first launches of the shapes checked alone (a new
 * shape of a variant verified at another: "shape-only"; the others are the
 * first shape of a variant, verified in full or sampled with its small-shape
 * probes), and the verdicts' methods. -v prints every shape.
 *
 * tier1: each region's Tier-1 kernel built twice, with its free dimensions
 * baked in (as before variants) and as parameters (what the daemon builds
 * now: M of the matmul kinds, batch and lengths of attention, the whole
 * shape of pointwise), both through
 * NVRTC and the backend's load and launch; device time per launch, median of
 * 10 after 3 warm-ups, on the same buffers.
 *
 * Not part of `make test`; exits 0 with "skipped" without a daemon or a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/nvrtc.h"
#include "tessera/client.h"
#include "tessera/codegen.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/oracle.h"
#include "tessera/refexec.h"
#include "../support/bench_cuda.h"
#include "../support/bench_stats.h"

#define SHAPES 100
#define TIMEOUT_MS 600000
#define T1_REPEATS 10
#define T1_WARMUP 3

static double now_ms(void)
{
    return bench_now_us() / 1e3;
}

static void die(const char *what, const tsr_error *e)
{
    fprintf(stderr, "variants_bench: %s: %s %s\n", what, tsr_status_name(e->code), e->message);
    exit(1);
}

/* ---- daemon ---- */

typedef struct layer {
    const char *name;
    const char *fmt; /* JSON with one %lld: the batch dimension */
    long long step;  /* batch sizes step, step * 2, ..., step * 100 */
} layer;

static const layer layers[] = {
    {"fused bf16 bias+gelu+residual N4096 K4096, M = 16..1600",
     "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":%lld,\"n\":4096,\"k\":4096,"
     "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
     16},
    {"fused f32 bias+gelu+residual N1024 K1024, M = 16..1600 (tier1)",
     "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":%lld,\"n\":1024,\"k\":1024,"
     "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
     16},
    {"attention bf16 decode H32 kv8 seq_k 4096 D128, batch 1..100",
     "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":%lld,\"heads\":32,\"heads_kv\":8,"
     "\"seq_q\":1,\"seq_k\":4096,\"head_dim\":128}",
     1},
    {"pointwise bf16 x*w then silu, w (8192), rows 16..1600 (tier1)",
     "{\"kind\":\"pointwise\",\"dtype\":\"bf16\",\"inputs\":[{\"name\":\"x\",\"shape\":[%lld,"
     "8192]},{\"name\":\"w\",\"shape\":[8192]}],\"ops\":[{\"op\":\"mul\",\"args\":[\"x\",\"w\"],"
     "\"out\":\"t\"},{\"op\":\"silu\",\"args\":[\"t\"],\"out\":\"y\"}],\"output\":\"y\"}",
     16},
};

static tsr_client_dtype client_dtype(tsr_dtype d)
{
    return d == TSR_F32 ? TSR_CLIENT_F32 : d == TSR_F16 ? TSR_CLIENT_F16 : TSR_CLIENT_BF16;
}

static tsr_buffer alloc_like(tsr_client *c, const tsr_tensor_desc *t)
{
    tsr_buffer b;
    tsr_error e;
    if (tsr_client_buffer_alloc(c, client_dtype(t->dtype), t->rank, t->shape, &b, NULL, TIMEOUT_MS,
                                &e) != TSR_OK)
        die("buffer_alloc", &e);
    return b;
}

static double counter(tsr_client *c, const char *name)
{
    tsr_client_stats *s = NULL;
    tsr_error e;
    if (tsr_client_stats_get(c, false, &s, TIMEOUT_MS, &e) != TSR_OK)
        die("stats", &e);
    double v = tsr_client_stats_counter(s, name, -1);
    tsr_client_stats_free(s);
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_layer(tsr_client *c, const layer *l, bool verbose)
{
    double first[SHAPES], cold[SHAPES], warm[SHAPES];
    double reuse_first[SHAPES]; /* first launches of shapes checked alone (shape-only) */
    char keys[SHAPES][TSR_CLIENT_KEY_MAX];
    int distinct = 0, reused = 0, full = 0, sampled = 0, unverified = 0;
    char candidates[256] = "";
    double builds0 = counter(c, "kcache_builds_total");
    for (int i = 0; i < SHAPES; i++) {
        long long m = l->step * (i + 1);
        char json[512];
        snprintf(json, sizeof json, l->fmt, m);
        tsr_region *r = NULL;
        tsr_error e;
        if (tsr_client_region_load(json, strlen(json), &r, &e) != TSR_OK)
            die(json, &e);
        tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
        int n = tsr_region_signature(r, sig, &out);
        tsr_buffer in[TSR_MAX_REGION_INPUTS], ob;
        for (int j = 0; j < n; j++)
            in[j] = alloc_like(c, &sig[j]);
        ob = alloc_like(c, &out);

        tsr_client_compiled k;
        double t0 = now_ms();
        if (tsr_client_compile(c, r, NULL, &k, TIMEOUT_MS, &e) != TSR_OK)
            die("compile", &e);
        double t1 = now_ms();
        if (tsr_client_launch(c, k.kernel, in, n, ob, NULL, TIMEOUT_MS, &e) != TSR_OK)
            die("launch", &e);
        double t2 = now_ms();
        tsr_client_compiled again;
        if (tsr_client_compile(c, r, NULL, &again, TIMEOUT_MS, &e) != TSR_OK)
            die("compile again", &e);
        double t3 = now_ms();
        cold[i] = t1 - t0;
        first[i] = t2 - t0;
        warm[i] = t3 - t2;
        const tsr_client_verdict *v = &k.decision.verdict;
        bool is_full = strcmp(v->method, "full") == 0;
        bool shape_only = strcmp(v->method, "sampled") == 0 && v->small_probes == 0;
        bool none = v->method[0] == '\0'; /* tier 0, or skip_verify */
        full += is_full;
        sampled += !none && !is_full && !shape_only;
        if (shape_only)
            reuse_first[reused] = first[i];
        reused += shape_only;
        unverified += none;
        bool seen = false;
        for (int j = 0; j < distinct && !seen; j++)
            seen = strcmp(keys[j], k.key) == 0;
        if (!seen)
            snprintf(keys[distinct++], sizeof keys[0], "%s", k.key);
        if (strstr(candidates, k.decision.candidate) == NULL)
            snprintf(candidates + strlen(candidates), sizeof candidates - strlen(candidates),
                     "%s%s", candidates[0] ? ", " : "", k.decision.candidate);
        if (verbose)
            printf("  m/batch %5lld: %-16s %-8s small %d  cold %8.2f ms  first launch %8.2f ms  "
                   "warm %6.2f ms%s\n",
                   m, k.decision.candidate, v->method, v->small_probes, cold[i], first[i], warm[i],
                   k.decision.cache_hit ? "  (binary cached)" : "");
        tsr_client_kernel_free(c, k.kernel, TIMEOUT_MS, NULL);
        tsr_client_kernel_free(c, again.kernel, TIMEOUT_MS, NULL);
        for (int j = 0; j < n; j++)
            tsr_client_buffer_free(c, in[j], TIMEOUT_MS, NULL);
        tsr_client_buffer_free(c, ob, TIMEOUT_MS, NULL);
        tsr_client_region_free(r);
    }
    double builds = counter(c, "kcache_builds_total") - builds0;
    double rest_first[SHAPES - 1], rest_cold[SHAPES - 1];
    memcpy(rest_first, first + 1, sizeof rest_first);
    memcpy(rest_cold, cold + 1, sizeof rest_cold);
    qsort(rest_first, SHAPES - 1, sizeof(double), cmp_double);
    qsort(rest_cold, SHAPES - 1, sizeof(double), cmp_double);
    qsort(warm, SHAPES, sizeof(double), cmp_double);
    qsort(reuse_first, (size_t)reused, sizeof(double), cmp_double);
    char reuse[96] = "none";
    if (reused > 0)
        snprintf(reuse, sizeof reuse, "%.1f / %.1f / %.1f", reuse_first[reused / 2],
                 reuse_first[reused * 9 / 10], reuse_first[reused - 1]);
    printf("| %s | %s | %.0f | %d | %.1f / %.1f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %s | "
           "%.2f | %d full, %d sampled, %d shape-only, %d not verified |\n",
           l->name, candidates, builds, distinct, cold[0], first[0], rest_cold[49], rest_cold[89],
           rest_cold[SHAPES - 2], rest_first[49], rest_first[89], rest_first[SHAPES - 2], reuse,
           warm[SHAPES / 2], full, sampled, reused, unverified);
}

static int bench_daemon(bool verbose)
{
    tsr_client *c = NULL;
    tsr_error e;
    tsr_client_options o;
    tsr_client_options_init(&o);
    o.timeout_ms = TIMEOUT_MS;
    if (tsr_client_connect(&o, &c, &e) != TSR_OK ||
        tsr_client_hello(c, NULL, TIMEOUT_MS, &e) != TSR_OK) {
        printf("variants_bench: skipped: no daemon: %s\n", e.message);
        tsr_client_close(c);
        return 0;
    }
    printf("| layer | candidates | builds for 100 shapes | kernel keys | first shape: cold "
           "compile / first launch (ms) | other 99: cold compile, median / p90 / max (ms) | "
           "other 99: first launch, median / p90 / max (ms) | shape-only: first launch, median "
           "/ p90 / max (ms) | warm compile, median (ms) | verdicts |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        run_layer(c, &layers[i], verbose);
    tsr_client_close(c);
    return 0;
}

/* ---- tier1: the cost of M at run time ---- */

typedef struct t1 {
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    tsrd_device_info dev;
    tsrd_stream *stream;
    tsrd_nvrtc *nv;
} t1;

/* Tier-1 with M baked in: its own blob, keyed by the region, loaded as a
 * candidate without a variant. */
static tsrd_kobj *t1_build(t1 *t, const tsr_region *r, bool rows_free)
{
    tsr_error e;
    tsr_candidate c;
    tsrd_cuda_candidate_tier1(&c);
    uint8_t *bin = NULL;
    size_t len = 0;
    if (rows_free) {
        if (t->ops->compile(t->b, r, &c, t->dev.arch, &bin, &len, &e) != TSR_OK)
            die("compile", &e);
    } else {
        tsr_codegen_target target = {.arch = t->dev.arch, .sm_count = t->dev.multiprocessors};
        tsr_codegen_kernel k;
        if (tsr_codegen_emit(r, &target, &k, &e) != TSR_OK)
            die("codegen", &e);
        uint8_t *cubin = NULL;
        size_t cubin_len = 0;
        if (tsrd_nvrtc_compile(t->nv, k.source, "baked.cu", t->dev.arch, &cubin, &cubin_len, NULL,
                               &e) != TSR_OK)
            die("nvrtc", &e);
        tsrd_cuda_launch_desc desc = {.image = TSRD_CUDA_IMAGE_CUBIN,
                                      .shared_bytes = k.launch.shared_bytes,
                                      .n_params = k.launch.n_params};
        tsr_region_fingerprint(r, &desc.region, NULL);
        snprintf(desc.entry, sizeof desc.entry, "%s", k.launch.entry);
        memcpy(desc.grid, k.launch.grid, sizeof desc.grid);
        memcpy(desc.block, k.launch.block, sizeof desc.block);
        if (tsrd_cuda_blob_encode(&desc, cubin, cubin_len, &bin, &len, &e) != TSR_OK)
            die("blob", &e);
        free(cubin);
        tsr_codegen_kernel_free(&k);
        snprintf(c.name, sizeof c.name, "tier1_baked"); /* no variant: keyed by the region */
    }
    tsrd_kobj *k = NULL;
    if (t->ops->load(t->b, 0, r, &c, bin, len, &k, &e) != TSR_OK)
        die("load", &e);
    free(bin);
    return k;
}

static double t1_time(t1 *t, tsrd_kobj *k, tsrd_dbuf **in, int n, tsrd_dbuf *ob)
{
    double times[T1_REPEATS];
    tsr_error e;
    for (int i = -T1_WARMUP; i < T1_REPEATS; i++) {
        double ms = 0;
        if (t->ops->launch(t->b, k, t->stream, in, n, ob, &e) != TSR_OK ||
            t->ops->synchronize(t->b, t->stream, &ms, &e) != TSR_OK)
            die("launch", &e);
        if (i >= 0)
            times[i] = ms;
    }
    return bench_quantile(times, T1_REPEATS, 0.5);
}

static void t1_fill(t1 *t, tsrd_dbuf *buf, const tsr_tensor_desc *d, uint64_t seed)
{
    uint64_t n = (uint64_t)tsr_tensor_desc_elements(d);
    size_t es = tsr_dtype_size(d->dtype);
    uint8_t *host = malloc((size_t)(n * es));
    if (host == NULL) {
        fprintf(stderr, "variants_bench: out of memory\n");
        exit(1);
    }
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        tsr_dtype_store(d->dtype, host, i, (double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
    tsr_error e;
    if (t->ops->buffer_write(t->b, buf, 0, host, n * es, &e) != TSR_OK)
        die("buffer_write", &e);
    free(host);
}

static void t1_region(t1 *t, const char *name, const char *json)
{
    tsr_region r;
    tsr_error e;
    if (tsr_region_from_json(json, strlen(json), &r, &e) != TSR_OK)
        die(json, &e);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(&r, sig, &out);
    tsrd_dbuf *in[TSR_MAX_REGION_INPUTS], *ob;
    for (int i = 0; i < n; i++) {
        if (t->ops->buffer_alloc(t->b, 0, tsr_tensor_desc_bytes(&sig[i]), &in[i], &e) != TSR_OK)
            die("alloc", &e);
        t1_fill(t, in[i], &sig[i], (uint64_t)i + 1);
    }
    if (t->ops->buffer_alloc(t->b, 0, tsr_tensor_desc_bytes(&out), &ob, &e) != TSR_OK)
        die("alloc", &e);
    tsrd_kobj *baked = t1_build(t, &r, false), *free_m = t1_build(t, &r, true);
    /* Interleaved, twice each, so that clocks and caches treat both alike. */
    double b1 = t1_time(t, baked, in, n, ob), f1 = t1_time(t, free_m, in, n, ob);
    double b2 = t1_time(t, baked, in, n, ob), f2 = t1_time(t, free_m, in, n, ob);
    double b = b1 < b2 ? b1 : b2, f = f1 < f2 ? f1 : f2;
    printf("| %s | %.3f | %.3f | %+.1f%% |\n", name, b, f, (f / b - 1.0) * 100.0);
    t->ops->unload(t->b, baked);
    t->ops->unload(t->b, free_m);
    for (int i = 0; i < n; i++)
        t->ops->buffer_free(t->b, in[i]);
    t->ops->buffer_free(t->b, ob);
    tsr_region_free(&r);
}

static int bench_tier1(void)
{
    t1 t = {.ops = &tsrd_backend_cuda};
    tsr_error e;
    if (!bench_cuda_open("variants_bench", t.ops, &t.b, &t.dev, &t.stream))
        return 0;
    if (tsrd_nvrtc_open(NULL, &t.nv, &e) != TSR_OK)
        die("device", &e);
    bench_cuda_print_device(t.ops, t.b, &t.dev);
    printf("| Tier-1 region | baked in (ms) | parameters (ms) | change |\n");
    printf("| --- | --- | --- | --- |\n");
    t1_region(&t, "matmul f32 2048x4096x4096",
              "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":2048,\"n\":4096,\"k\":4096}");
    t1_region(&t, "matmul bf16 M16 N8192 K8192",
              "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":16,\"n\":8192,\"k\":8192}");
    t1_region(&t, "matmul bf16 M1000 N4096 K4096 (ragged M)",
              "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":1000,\"n\":4096,\"k\":4096}");
    t1_region(&t, "fused f32 bias+gelu+residual 2048x4096x4096",
              "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":2048,\"n\":4096,\"k\":4096,"
              "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}");
    t1_region(&t, "fused f32 rmsnorm 2048x4096x4096",
              "{\"kind\":\"fused\",\"dtype\":\"f32\",\"m\":2048,\"n\":4096,\"k\":4096,"
              "\"reduction\":\"rmsnorm\"}");
    t1_region(&t, "attention f32 B4 H32 S1024 D128 causal",
              "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":4,\"heads\":32,"
              "\"heads_kv\":32,\"seq_q\":1024,\"seq_k\":1024,\"head_dim\":128,"
              "\"causal\":true}");
    t1_region(&t, "attention f32 decode B32 H32 kv8 seq_k 4096 D128",
              "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":32,\"heads\":32,"
              "\"heads_kv\":8,\"seq_q\":1,\"seq_k\":4096,\"head_dim\":128}");
    t1_region(&t, "gated f32 silu M2048 K4096 H4096",
              "{\"kind\":\"gated\",\"dtype\":\"f32\",\"m\":2048,\"k\":4096,\"h\":4096,"
              "\"gate_act\":\"silu\"}");
    /* The pointwise lane's goals: the whole shape a parameter. */
    t1_region(&t, "pointwise f32 relu(a+b)*sigmoid(c) 2^28",
              "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\","
              "\"shape\":[268435456]},{\"name\":\"b\",\"shape\":[268435456]},{\"name\":\"c\","
              "\"shape\":[268435456]}],\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":"
              "\"s\"},{\"op\":\"relu\",\"args\":[\"s\"],\"out\":\"r\"},{\"op\":\"sigmoid\","
              "\"args\":[\"c\"],\"out\":\"g\"},{\"op\":\"mul\",\"args\":[\"r\",\"g\"],\"out\":"
              "\"y\"}],\"output\":\"y\"}");
    t1_region(&t, "pointwise bf16 x*w then silu 16384x8192, w (8192)",
              "{\"kind\":\"pointwise\",\"dtype\":\"bf16\",\"inputs\":[{\"name\":\"x\",\"shape\":["
              "16384,8192]},{\"name\":\"w\",\"shape\":[8192]}],\"ops\":[{\"op\":\"mul\",\"args\":["
              "\"x\",\"w\"],\"out\":\"t\"},{\"op\":\"silu\",\"args\":[\"t\"],\"out\":\"y\"}],"
              "\"output\":\"y\"}");
    tsrd_nvrtc_close(t.nv);
    t.ops->stream_destroy(t.b, t.stream);
    t.ops->close(t.b);
    return 0;
}

/* ---- host: the CPU's share of a new shape's check ---- */

/* What the host does for a new shape of a verified variant, beside the
 * candidate's one launch: the probe's inputs at the shape (every core), the
 * sampled positions, the reference at them; and, where the backend makes the
 * inputs on its device, the reference at the positions making only the input
 * elements it reads (tsr_oracle_sampled_reference). Median of 5 per shape. */
static int bench_host(void)
{
    static const struct {
        const char *name, *fmt;
        long long dims[3];
    } cases[] = {
        {"fused bf16 bias+gelu+residual N4096 K4096",
         "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":%lld,\"n\":4096,\"k\":4096,"
         "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
         {16, 256, 1600}},
        {"attention bf16 decode H32 kv8 seq_k 4096 D128",
         "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":%lld,\"heads\":32,"
         "\"heads_kv\":8,\"seq_q\":1,\"seq_k\":4096,\"head_dim\":128}",
         {1, 16, 100}},
    };
    printf("| region | M or batch | positions | inputs (ms) | positions (ms) | reference at "
           "them (ms) | total (ms) | inputs on the device: total (ms) |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int d = 0; d < 3; d++) {
            char json[512];
            snprintf(json, sizeof json, cases[c].fmt, cases[c].dims[d]);
            tsr_region r;
            tsr_error e;
            if (tsr_region_from_json(json, strlen(json), &r, &e) != TSR_OK)
                die(json, &e);
            tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
            tsr_region_signature(&r, sig, &out);
            double t_in[5], t_pos[5], t_ref[5], t_all[5], t_part[5];
            size_t count = 0;
            for (int rep = 0; rep < 5; rep++) {
                void *inputs[TSR_MAX_REGION_INPUTS] = {0};
                uint64_t *index = NULL;
                double t0 = now_ms();
                if (tsr_oracle_make_sampled_probe(&r, 0, 0, 0, inputs, &e) != TSR_OK)
                    die("probe", &e);
                double t1 = now_ms();
                if (tsr_oracle_sample(&r, 0, 0, 0, 0, &index, &count, &e) != TSR_OK)
                    die("sample", &e);
                double t2 = now_ms();
                void *want = malloc(count * tsr_dtype_size(r.out_dtype) + 1);
                if (want == NULL || tsr_ref_run_at(&r, (const void *const *)inputs, index, count,
                                                   want, 0, &e) != TSR_OK)
                    die("reference", &e);
                double t3 = now_ms();
                if (tsr_oracle_sampled_reference(&r, 0, 0, index, count, want, 0, &e) != TSR_OK)
                    die("reference on inputs made in part", &e);
                double t4 = now_ms();
                t_in[rep] = t1 - t0, t_pos[rep] = t2 - t1, t_ref[rep] = t3 - t2;
                t_all[rep] = t3 - t0;
                t_part[rep] = (t2 - t1) + (t4 - t3);
                free(want);
                free(index);
                tsr_oracle_free_probe(&r, inputs);
            }
            printf("| %s | %lld | %zu | %.1f | %.1f | %.1f | %.1f | %.1f |\n", cases[c].name,
                   cases[c].dims[d], count, bench_quantile(t_in, 5, 0.5),
                   bench_quantile(t_pos, 5, 0.5), bench_quantile(t_ref, 5, 0.5),
                   bench_quantile(t_all, 5, 0.5), bench_quantile(t_part, 5, 0.5));
            tsr_region_free(&r);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    bool verbose = argc > 2 && strcmp(argv[2], "-v") == 0;
    if (argc >= 2 && strcmp(argv[1], "daemon") == 0)
        return bench_daemon(verbose);
    if (argc >= 2 && strcmp(argv[1], "tier1") == 0)
        return bench_tier1();
    if (argc >= 2 && strcmp(argv[1], "host") == 0)
        return bench_host();
    if (argc >= 2) {
        fprintf(stderr, "usage: variants_bench [daemon [-v] | tier1 | host]\n");
        return 2;
    }
    /* make bench: all three, each skipping what is missing. */
    int rc = bench_host();
    printf("\n");
    if (rc == 0)
        rc = bench_tier1();
    printf("\n");
    return rc != 0 ? rc : bench_daemon(false);
}
