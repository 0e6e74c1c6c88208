/*
 * refexec_bench.c — times the CPU reference executor on a few representative
 * regions with one thread and with every online CPU, printing GFLOP/s (from
 * tsr_region_flops). Not part of `make test`; `make bench` runs it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/json.h"
#include "tessera/refexec.h"
#include "../support/bench_stats.h"

static void *random_tensor(const tsr_tensor_desc *t, unsigned *seed)
{
    size_t n = (size_t)tsr_tensor_desc_elements(t);
    void *p = malloc(n * tsr_dtype_size(t->dtype));
    if (p == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        tsr_dtype_store(t->dtype, p, i, (double)rand_r(seed) / RAND_MAX - 0.5);
    return p;
}

static void bench(const char *label, tsr_region *r)
{
    tsr_tensor_desc ins[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, ins, &out);
    void *bufs[TSR_MAX_REGION_INPUTS] = {0};
    unsigned seed = 1;
    for (int i = 0; i < n; i++)
        bufs[i] = random_tensor(&ins[i], &seed);
    void *o = malloc(tsr_tensor_desc_bytes(&out));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int pass = 0; pass < 2; pass++) {
        int threads = pass == 0 ? 1 : 0;
        tsr_error err;
        double t0 = bench_now_us();
        tsr_status st = tsr_ref_run(r, (const void *const *)bufs, o, threads, &err);
        double dt = (bench_now_us() - t0) * 1e-6;
        if (st != TSR_OK) {
            printf("%-28s %s\n", label, err.message);
            break;
        }
        printf("%-28s threads=%-3ld %9.3f ms %8.2f GFLOP/s\n", label, threads == 1 ? 1L : cpus,
               dt * 1e3, tsr_region_flops(r) / dt * 1e-9);
    }
    for (int i = 0; i < n; i++)
        free(bufs[i]);
    free(o);
    tsr_region_free(r);
}

/* The regions timed, each as its JSON form. */
static const struct {
    const char *label, *json;
} refexec_regions[] = {
    {"matmul 512^3 f32", "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":512,\"n\":512,\"k\":512}"},
    {"matmul 512^3 bf16", "{\"kind\":\"matmul\",\"dtype\":\"bf16\",\"m\":512,\"n\":512,\"k\":512}"},
    {"attention 1x8x512x64 causal",
     "{\"kind\":\"attention\",\"dtype\":\"bf16\",\"batch\":1,\"heads\":8,\"seq_q\":512,"
     "\"seq_k\":512,\"head_dim\":64,\"causal\":true}"},
    {"pointwise 16M add+gelu",
     "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":"
     "[{\"name\":\"x\",\"shape\":[4096,4096]},{\"name\":\"b\",\"shape\":[4096]}],"
     "\"ops\":[{\"op\":\"add\",\"args\":[\"x\",\"b\"],\"out\":\"t\"},"
     "{\"op\":\"gelu\",\"args\":[\"t\"],\"out\":\"y\"}],\"output\":\"y\"}"},
};

int main(void)
{
    for (size_t i = 0; i < sizeof refexec_regions / sizeof refexec_regions[0]; i++) {
        const char *json = refexec_regions[i].json;
        tsr_region r;
        tsr_error err;
        if (tsr_region_from_json(json, strlen(json), &r, &err) == TSR_OK)
            bench(refexec_regions[i].label, &r);
        else
            printf("%s: %s\n", refexec_regions[i].label, err.message);
    }
    return 0;
}
