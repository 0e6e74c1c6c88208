/*
 * gpu_bench.c — the CUDA backend measured in process, through the same backend
 * interface the daemon uses: compile latency (NVRTC cold, memory hit, disk hit
 * after reopening the cache), Tier-1 pointwise bandwidth, tier-3 GEMM, fused
 * epilogue and SwiGLU throughput. Device times come from the backend's events
 * (one launch per repeat, median of GPU_BENCH_REPEATS, warm-up excluded).
 *
 *   gpu_bench            prints one table; exits 0 with "skipped" without a GPU
 *
 * Not part of `make test`; tools/gpu-check.sh runs it on the GPU machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/kernels.h"
#include "tessera/arbiter.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/kcache.h"
#include "../support/bench_cuda.h"
#include "../support/bench_stats.h"

#define GPU_BENCH_REPEATS 10
#define GPU_BENCH_WARMUP 3
#define GPU_BENCH_FILL_CHUNK (64u << 20)

typedef struct bench {
    const tsrd_backend_ops *ops;
    tsrd_backend *b;
    tsrd_device_info dev;
    tsrd_stream *stream;
} bench;

static double now_ms(void)
{
    return bench_now_us() / 1e3;
}

static void die(const char *what, const tsr_error *e)
{
    fprintf(stderr, "gpu_bench: %s: %s %s\n", what, tsr_status_name(e->code), e->message);
    exit(1);
}

static void region_json(const char *json, tsr_region *r)
{
    tsr_error e;
    if (tsr_region_from_json(json, strlen(json), r, &e) != TSR_OK)
        die(json, &e);
}

static tsrd_kobj *kernel_build(bench *bn, const tsr_region *r, const char *candidate)
{
    tsr_candidate c;
    if (strcmp(candidate, TSRD_CUDA_TIER1) == 0)
        tsrd_cuda_candidate_tier1(&c);
    else if (r->kind == TSR_KIND_GATED)
        tsrd_cuda_candidate_swiglu(&c);
    else
        tsrd_cuda_candidate_gemm(&c);
    uint8_t *bin = NULL;
    size_t len = 0;
    tsrd_kobj *k = NULL;
    tsr_error e;
    if (bn->ops->compile(bn->b, r, &c, bn->dev.arch, &bin, &len, &e) != TSR_OK)
        die("compile", &e);
    if (bn->ops->load(bn->b, 0, r, &c, bin, len, &k, &e) != TSR_OK)
        die("load", &e);
    free(bin);
    return k;
}

/* Fills a buffer with fresh pseudo-random values in [-1, 1) in dtype, written in
 * chunks. Every element is drawn: a repeated pattern would let the tensor cores
 * run cooler and faster than on real data, and inflate the figures. */
static void buffer_fill(bench *bn, tsrd_dbuf *buf, tsr_dtype dtype, uint64_t elements,
                        uint64_t seed)
{
    size_t esize = tsr_dtype_size(dtype);
    size_t chunk_elems = GPU_BENCH_FILL_CHUNK / esize;
    void *host = malloc(GPU_BENCH_FILL_CHUNK);
    if (host == NULL) {
        fprintf(stderr, "gpu_bench: out of memory\n");
        exit(1);
    }
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    tsr_error e;
    for (uint64_t at = 0; at < elements; at += chunk_elems) {
        uint64_t n = elements - at < chunk_elems ? elements - at : chunk_elems;
        for (uint64_t i = 0; i < n; i++) {
            state ^= state << 13; /* xorshift64 */
            state ^= state >> 7;
            state ^= state << 17;
            tsr_dtype_store(dtype, host, i, (double)(state >> 40) / (double)(1ull << 23) - 1.0);
        }
        if (bn->ops->buffer_write(bn->b, buf, at * esize, host, n * esize, &e) != TSR_OK)
            die("buffer_write", &e);
    }
    free(host);
}

/* Median device milliseconds of one launch of candidate on r. */
static double bench_time(bench *bn, const tsr_region *r, const char *candidate)
{
    tsrd_kobj *k = kernel_build(bn, r, candidate);
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, sig, &out);
    tsrd_dbuf *in[TSR_MAX_REGION_INPUTS], *ob = NULL;
    tsr_error e;
    for (int i = 0; i < n; i++) {
        if (bn->ops->buffer_alloc(bn->b, 0, tsr_tensor_desc_bytes(&sig[i]), &in[i], &e) != TSR_OK)
            die("buffer_alloc", &e);
        buffer_fill(bn, in[i], sig[i].dtype, (uint64_t)tsr_tensor_desc_elements(&sig[i]),
                    (uint64_t)i + 1);
    }
    if (bn->ops->buffer_alloc(bn->b, 0, tsr_tensor_desc_bytes(&out), &ob, &e) != TSR_OK)
        die("buffer_alloc", &e);
    double times[GPU_BENCH_REPEATS];
    for (int i = -GPU_BENCH_WARMUP; i < GPU_BENCH_REPEATS; i++) {
        double ms = 0;
        if (bn->ops->launch(bn->b, k, bn->stream, in, n, ob, &e) != TSR_OK)
            die("launch", &e);
        if (bn->ops->synchronize(bn->b, bn->stream, &ms, &e) != TSR_OK)
            die("synchronize", &e);
        if (i >= 0)
            times[i] = ms;
    }
    for (int i = 0; i < n; i++)
        bn->ops->buffer_free(bn->b, in[i]);
    bn->ops->buffer_free(bn->b, ob);
    bn->ops->unload(bn->b, k);
    return bench_quantile(times, GPU_BENCH_REPEATS, 0.5);
}

typedef struct compile_ctx {
    bench *bn;
    const tsr_region *r;
    const tsr_candidate *c;
} compile_ctx;

static tsr_status compile_build(void *ctx, uint8_t **data, size_t *len, tsr_error *err)
{
    compile_ctx *cc = ctx;
    return cc->bn->ops->compile(cc->bn->b, cc->r, cc->c, cc->bn->dev.arch, data, len, err);
}

/* Milliseconds of one get-or-build through a cache in dir. */
static double compile_once(bench *bn, const char *dir, const tsr_region *r, tsr_kcache_level *level)
{
    tsr_kcache *cache = NULL;
    tsr_kcache_options o = {.dir = dir};
    tsr_error e;
    if (tsr_kcache_open(&o, &cache, &e) != TSR_OK)
        die("kcache_open", &e);
    tsr_candidate c;
    tsrd_cuda_candidate_tier1(&c);
    tsr_fingerprint fp, key;
    tsr_region_fingerprint(r, &fp, NULL);
    tsr_kernel_key_parts parts = {.candidate = c.name,
                                  .candidate_version = c.version,
                                  .arch = bn->dev.arch,
                                  .compiler_version = bn->ops->compiler_version(bn->b),
                                  .driver_version = bn->ops->driver_version(bn->b),
                                  .options = "",
                                  .codegen_version = bn->ops->codegen_version};
    tsr_kernel_key(&fp, &parts, &key);
    compile_ctx cc = {.bn = bn, .r = r, .c = &c};
    tsr_kcache_meta meta = {.candidate = "tier1", .kind = "pointwise"};
    const tsr_kcache_blob *blob = NULL;
    double start = now_ms();
    if (tsr_kcache_get_or_build(cache, &key, &meta, compile_build, &cc, &blob, level, &e) != TSR_OK)
        die("compile", &e);
    double memory_start = now_ms();
    tsr_kcache_blob_release(blob);
    double ms = memory_start - start;
    if (*level == TSR_KCACHE_MISS) {
        /* The same key again from this cache's memory. */
        tsr_kcache_level l2;
        double t0 = now_ms();
        tsr_kcache_get_or_build(cache, &key, &meta, compile_build, &cc, &blob, &l2, &e);
        printf("| compile, memory hit (%s)          | %10.3f ms |\n", tsr_kcache_level_name(l2),
               now_ms() - t0);
        tsr_kcache_blob_release(blob);
    }
    tsr_kcache_close(cache);
    return ms;
}

int main(void)
{
    bench bn = {.ops = &tsrd_backend_cuda};
    if (!bench_cuda_open("gpu_bench", bn.ops, &bn.b, &bn.dev, &bn.stream))
        return 0;
    bench_cuda_print_device(bn.ops, bn.b, &bn.dev);
    printf("| measurement                               | result        |\n");
    printf("| ----------------------------------------- | ------------- |\n");

    tsr_region r;
    char dir[] = "/tmp/tsr-gpu-bench-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    region_json("{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":["
                "{\"name\":\"a\",\"shape\":[268435456]},{\"name\":\"b\",\"shape\":[268435456]},"
                "{\"name\":\"c\",\"shape\":[268435456]}],\"ops\":["
                "{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":\"s\"},"
                "{\"op\":\"relu\",\"args\":[\"s\"],\"out\":\"t\"},"
                "{\"op\":\"sigmoid\",\"args\":[\"c\"],\"out\":\"g\"},"
                "{\"op\":\"mul\",\"args\":[\"t\",\"g\"],\"out\":\"y\"}],\"output\":\"y\"}",
                &r);
    tsr_kcache_level level;
    double cold = compile_once(&bn, dir, &r, &level);
    printf("| compile, NVRTC cold (%s)                | %10.3f ms |\n",
           tsr_kcache_level_name(level), cold);
    double disk = compile_once(&bn, dir, &r, &level);
    printf("| compile, disk hit after reopen (%s)     | %10.3f ms |\n",
           tsr_kcache_level_name(level), disk);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "gpu_bench: could not remove %s\n", dir);

    double ms = bench_time(&bn, &r, "tier1");
    printf("| tier1 relu(a+b)*sigmoid(c), 2^28 f32     | %8.1f GB/s |\n",
           4.0 * 4.0 * 268435456.0 / (ms * 1e-3) / 1e9);
    tsr_region_free(&r);

    const int sizes[] = {4096, 8192};
    for (int i = 0; i < 2; i++) {
        tsr_region_init_matmul(&r, TSR_BF16, sizes[i], sizes[i], sizes[i], NULL);
        ms = bench_time(&bn, &r, TSRD_CUDA_GEMM);
        printf("| gemm_wgmma bf16 %5d^3                   | %6.1f TFLOP/s |\n", sizes[i],
               tsr_region_flops(&r) / (ms * 1e-3) / 1e12);
    }
    tsr_region_init_matmul(&r, TSR_BF16, 4096, 4096, 4096, NULL);
    ms = bench_time(&bn, &r, TSRD_CUDA_TIER1);
    printf("| tier1 bf16 4096^3 (for comparison)        | %6.1f TFLOP/s |\n",
           tsr_region_flops(&r) / (ms * 1e-3) / 1e12);

    region_json("{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":8192,\"n\":14336,\"k\":4096,"
                "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":true}",
                &r);
    ms = bench_time(&bn, &r, TSRD_CUDA_GEMM);
    printf("| gemm_wgmma +bias+gelu+residual 8192x14336x4096 | %6.1f TFLOP/s |\n",
           2.0 * 8192 * 14336 * 4096.0 / (ms * 1e-3) / 1e12);
    tsr_region_init_gated(&r, TSR_BF16, 8192, 4096, 14336, TSR_OP_SILU, NULL);
    ms = bench_time(&bn, &r, TSRD_CUDA_SWIGLU);
    printf("| swiglu_wgmma M8192 K4096 H14336          | %6.1f TFLOP/s |\n",
           4.0 * 8192 * 14336 * 4096.0 / (ms * 1e-3) / 1e12);

    bn.ops->stream_destroy(bn.b, bn.stream);
    bn.ops->close(bn.b);
    return 0;
}
