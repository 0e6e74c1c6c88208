/*
 * gen_seeds.c — writes the seed corpora of the request and kcache_entry fuzz
 * targets (the two whose inputs are binary and cannot be written by hand).
 *
 *   make fuzz-seeds     (runs build/fuzz/gen_seeds tests/fuzz/corpus)
 *
 * Request seeds are packed tessera.v1.Request messages: one of each body, built
 * from small regions of every kind, plus a few that the daemon must reject.
 * Kernel cache seeds are well-formed entries (the MAC under the fuzz target's
 * key) with payloads of a few sizes, and a few broken ones, among them one of
 * the older format with a plain SHA-256 where the MAC goes. Output is deterministic, so
 * regenerating does not churn the committed files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/kcache_internal.h"
#include "tessera.pb-c.h"
#include "tessera/fingerprint.h"
#include "tessera/json.h"
#include "tessera/region_pb.h"

static const char *seed_dir;

static void seed_write(const char *target, const char *name, const void *data, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", seed_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static void seed_request(const char *name, Tessera__V1__Request *req)
{
    size_t len = tessera__v1__request__get_packed_size(req);
    uint8_t *buf = malloc(len + 1);
    tessera__v1__request__pack(req, buf);
    seed_write("request", name, buf, len);
    free(buf);
}

/* Points req's body at body (its member FIELD, body case CASE) and writes
 * req as the seed name. */
#define SEED_BODY(req, field, CASE, body, name)                                                    \
    do {                                                                                           \
        (req)->body_case = TESSERA__V1__REQUEST__BODY_##CASE;                                      \
        (req)->field = (body);                                                                     \
        seed_request((name), (req));                                                               \
    } while (0)

static Tessera__V1__Region *seed_region(const char *json)
{
    tsr_region r;
    tsr_error err;
    Tessera__V1__Region *pb;
    if (tsr_region_from_json(json, strlen(json), &r, &err) != TSR_OK ||
        tsr_region_to_pb(&r, &pb, &err) != TSR_OK) {
        fprintf(stderr, "%s: %s\n", json, err.message);
        exit(1);
    }
    tsr_region_free(&r);
    return pb;
}

static const char *const seed_regions[] = {
    "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":3,\"n\":4,\"k\":5}",
    "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":4,\"n\":4,\"k\":8,\"prologue\":[\"relu\"],"
    "\"epilogue\":[\"bias\",\"gelu\"],\"residual\":false,\"reduction\":\"rmsnorm\"}",
    "{\"kind\":\"gated\",\"dtype\":\"f16\",\"m\":2,\"k\":8,\"h\":4,\"gate_act\":\"silu\"}",
    "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":2,\"heads_kv\":1,"
    "\"seq_q\":3,\"seq_k\":5,\"head_dim\":4,\"causal\":true}",
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,3]},"
    "{\"name\":\"b\",\"shape\":[3]}],\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":"
    "\"s\"},{\"op\":\"clamp\",\"args\":[\"s\"],\"min\":-1,\"max\":1,\"out\":\"y\"}],"
    "\"output\":\"y\"}",
};
#define SEED_REGIONS (sizeof seed_regions / sizeof seed_regions[0])

static void seed_requests(void)
{
    Tessera__V1__Request req = TESSERA__V1__REQUEST__INIT;
    req.id = 7;

    Tessera__V1__HelloRequest hello = TESSERA__V1__HELLO_REQUEST__INIT;
    hello.client_version = "0.1.0";
    hello.protocol_version = 1;
    SEED_BODY(&req, hello, HELLO, &hello, "hello");

    Tessera__V1__StatsRequest stats = TESSERA__V1__STATS_REQUEST__INIT;
    stats.prometheus = 1;
    SEED_BODY(&req, stats, STATS, &stats, "stats");

    Tessera__V1__CacheListRequest list = TESSERA__V1__CACHE_LIST_REQUEST__INIT;
    SEED_BODY(&req, cache_list, CACHE_LIST, &list, "cache_list");

    Tessera__V1__CacheEvictRequest evict = TESSERA__V1__CACHE_EVICT_REQUEST__INIT;
    evict.key = "all";
    SEED_BODY(&req, cache_evict, CACHE_EVICT, &evict, "cache_evict_all");
    evict.key = "00ff";
    seed_request("cache_evict_bad_key", &req);

    int64_t shape[2] = {2, 3};
    Tessera__V1__BufferAllocRequest alloc = TESSERA__V1__BUFFER_ALLOC_REQUEST__INIT;
    alloc.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    alloc.shape = shape;
    alloc.n_shape = 2;
    SEED_BODY(&req, buffer_alloc, BUFFER_ALLOC, &alloc, "buffer_alloc");

    uint8_t bytes[24] = {0, 0, 0x80, 0x3f};
    Tessera__V1__BufferWriteRequest w = TESSERA__V1__BUFFER_WRITE_REQUEST__INIT;
    w.buffer = 0x1234;
    w.offset = 4;
    w.data.data = bytes;
    w.data.len = sizeof bytes;
    SEED_BODY(&req, buffer_write, BUFFER_WRITE, &w, "buffer_write_unknown");

    Tessera__V1__BufferReadRequest rd = TESSERA__V1__BUFFER_READ_REQUEST__INIT;
    rd.buffer = 0x1234;
    rd.length = 8;
    SEED_BODY(&req, buffer_read, BUFFER_READ, &rd, "buffer_read_unknown");

    Tessera__V1__BufferFreeRequest fr = TESSERA__V1__BUFFER_FREE_REQUEST__INIT;
    fr.buffer = 0x1234;
    SEED_BODY(&req, buffer_free, BUFFER_FREE, &fr, "buffer_free_unknown");

    uint64_t inputs[2] = {1, 2};
    Tessera__V1__LaunchRequest launch = TESSERA__V1__LAUNCH_REQUEST__INIT;
    launch.kernel = 99;
    launch.inputs = inputs;
    launch.n_inputs = 2;
    launch.output = 3;
    SEED_BODY(&req, launch, LAUNCH, &launch, "launch_unknown");

    for (size_t i = 0; i < SEED_REGIONS; i++) {
        Tessera__V1__Region *pb = seed_region(seed_regions[i]);
        char name[64];

        Tessera__V1__CompileRequest compile = TESSERA__V1__COMPILE_REQUEST__INIT;
        compile.region = pb;
        snprintf(name, sizeof name, "compile_%zu", i);
        SEED_BODY(&req, compile, COMPILE, &compile, name);

        Tessera__V1__VerifyRequest verify = TESSERA__V1__VERIFY_REQUEST__INIT;
        verify.region = pb;
        verify.seed = 5;
        verify.random_probes = 1;
        snprintf(name, sizeof name, "verify_%zu", i);
        SEED_BODY(&req, verify, VERIFY, &verify, name);

        Tessera__V1__CandidatesRequest cands = TESSERA__V1__CANDIDATES_REQUEST__INIT;
        cands.region = pb;
        snprintf(name, sizeof name, "candidates_%zu", i);
        SEED_BODY(&req, candidates, CANDIDATES, &cands, name);
        tsr_region_pb_free(pb);
    }

    /* A run with its inputs inline: matmul 3x4 @ 4x2 in f32. */
    Tessera__V1__Region *pb =
        seed_region("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":3,\"n\":2,\"k\":4}");
    float a[12], b[8];
    for (int i = 0; i < 12; i++)
        a[i] = (float)i * 0.5f;
    for (int i = 0; i < 8; i++)
        b[i] = 1.0f - (float)i;
    int64_t sa[2] = {3, 4}, sb[2] = {4, 2};
    Tessera__V1__Tensor ta = TESSERA__V1__TENSOR__INIT, tb = TESSERA__V1__TENSOR__INIT;
    ta.dtype = tb.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ta.shape = sa;
    ta.n_shape = 2;
    tb.shape = sb;
    tb.n_shape = 2;
    ta.data_case = tb.data_case = TESSERA__V1__TENSOR__DATA_INLINE_DATA;
    ta.inline_data.data = (uint8_t *)a;
    ta.inline_data.len = sizeof a;
    tb.inline_data.data = (uint8_t *)b;
    tb.inline_data.len = sizeof b;
    Tessera__V1__Tensor *tensors[2] = {&ta, &tb};
    Tessera__V1__RunRequest run = TESSERA__V1__RUN_REQUEST__INIT;
    run.region = pb;
    run.inputs = tensors;
    run.n_inputs = 2;
    SEED_BODY(&req, run, RUN, &run, "run_matmul");
    run.n_inputs = 1;
    seed_request("run_missing_input", &req);
    tsr_region_pb_free(pb);

    Tessera__V1__Request empty = TESSERA__V1__REQUEST__INIT;
    empty.id = 9;
    seed_request("no_body", &empty);
    seed_write("request", "garbage", "\xff\xff\xff\xff\x0f\x12\x99", 7);
}

/* The fuzz target's MAC key (fuzz_kcache_entry.c): "kcache-fuzz-key!" and
 * sixteen fixed bytes. */
static const uint8_t seed_mac_key[TSRI_KCACHE_KEY_BYTES] = {
    0x6b, 0x63, 0x61, 0x63, 0x68, 0x65, 0x2d, 0x66, 0x75, 0x7a, 0x7a, 0x2d, 0x6b, 0x65, 0x79, 0x21,
    0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};

/* damage: 0 none, 1 a payload byte flipped after the MAC, 2 the older format
 * (version 1, a plain SHA-256 in the MAC's place). */
static void seed_entry(const char *name, size_t payload_len, const char *candidate, int damage)
{
    uint8_t *e = calloc(1, TSRI_KCACHE_HEADER_BYTES + payload_len);
    memcpy(e, "TSRK", 4);
    e[4] = damage == 2 ? 1 : TSRI_KCACHE_FORMAT_VERSION;
    e[8] = (uint8_t)TSRI_KCACHE_HEADER_BYTES;
    for (int i = 0; i < 32; i++)
        e[16 + i] = (uint8_t)(i * 7 + 3);
    snprintf((char *)e + 48, 64, "%s", candidate);
    snprintf((char *)e + 112, 16, "matmul");
    snprintf((char *)e + 128, 16, "sm_90a");
    for (int i = 0; i < 8; i++)
        e[144 + i] = (uint8_t)((uint64_t)payload_len >> (8 * i));
    for (int i = 0; i < 8; i++)
        e[152 + i] = (uint8_t)(UINT64_C(1500) >> (8 * i)); /* built in 1.5 ms */
    for (size_t i = 0; i < payload_len; i++)
        e[TSRI_KCACHE_HEADER_BYTES + i] = (uint8_t)(i * 13 + 1);
    if (damage == 2) {
        uint8_t *buf = malloc(TSRI_KCACHE_OFF_MAC + payload_len);
        memcpy(buf, e, TSRI_KCACHE_OFF_MAC);
        memcpy(buf + TSRI_KCACHE_OFF_MAC, e + TSRI_KCACHE_HEADER_BYTES, payload_len);
        tsr_sha256(buf, TSRI_KCACHE_OFF_MAC + payload_len, e + TSRI_KCACHE_OFF_MAC);
        free(buf);
    } else if (tsri_kcache_entry_mac(seed_mac_key, e, e + TSRI_KCACHE_HEADER_BYTES, payload_len,
                                     e + TSRI_KCACHE_OFF_MAC) != TSR_OK) {
        fprintf(stderr, "gen_seeds: no MAC\n");
        exit(1);
    }
    if (damage == 1)
        e[TSRI_KCACHE_HEADER_BYTES + payload_len / 2] ^= 0x40;
    seed_write("kcache_entry", name, e, TSRI_KCACHE_HEADER_BYTES + payload_len);
    free(e);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds CORPUS_DIR\n");
        return 2;
    }
    seed_dir = argv[1];
    seed_requests();
    seed_entry("empty_payload", 0, "tier1", 0);
    seed_entry("small", 16, "tier1", 0);
    seed_entry("cubin_sized", 600, "tier3_gemm_sm90", 0);
    seed_entry("flipped_payload", 64, "reference", 1);
    seed_entry("sha256_format_1", 64, "reference", 2);
    return 0;
}
