/*
 * loadgen.c — drives a running tesserad with N concurrent clients for a bounded
 * time and checks every answer.
 *
 *   loadgen --url URL [--clients N] [--seconds S] [--seed X] [--pid PID]
 *           [--rss-slack-mb MB] [--timeout-ms MS] [--reconnect-every OPS]
 *           [--mix op=weight,...]
 *
 * Each client is a thread with its own connection (its own session). It picks
 * operations from a fixed mix: compiles that hit the kernel cache, compiles that
 * miss it (a matmul shape never asked before), runs with inline data, buffer
 * churn (alloc, write, read back, free), launches on buffers, verify, stats, and
 * bad requests that must fail with one exact status (--mix changes the
 * weights; --reconnect-every makes each client open a fresh connection every
 * OPS operations, as short-lived callers do). A compile miss and a launch free
 * their kernel handle when done with it (kernel_free), as a long-lived caller
 * must: a connection's handles otherwise live as long as it does, and one
 * handle per never-seen region would grow without bound. Every result is checked:
 * run and launch outputs against the CPU reference computed here
 * (tsr_ref_run), read-backs byte for byte, compile keys against the first key
 * seen for the region, verdicts PASS, bad requests their exact code.
 *
 * With --pid the daemon's resident set (VmRSS) is sampled once a second. The
 * first half of the run is warm-up: the daemon's bounded structures (chiefly
 * the kernel cache's memory level, which the compile misses fill at a few
 * hundred entries a second; on a CUDA daemon also the arbiter's verdict cache
 * of 65536 entries) are allowed to reach their bounds. Memory counts as flat
 * when the last sample is within --rss-slack-mb (default 16) or 10% of the
 * sample taken at half time, whichever is larger; rss_trace_kib shows one
 * sample per tenth of the run.
 *
 * Exit status 0 when every request was answered, every answer was right and
 * memory stayed flat; 1 otherwise; 2 for bad usage or a failed connect. The
 * summary goes to stdout as "key value" lines that tools/soak.sh quotes.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/client.h"
#include "tessera/dtype.h"
#include "tessera/json.h"
#include "tessera/refexec.h"
#include "tessera/region.h"

enum lg_op {
    LG_COMPILE_HIT,
    LG_COMPILE_MISS,
    LG_RUN,
    LG_BUFFER_CHURN,
    LG_LAUNCH,
    LG_VERIFY,
    LG_STATS,
    LG_BAD,
    LG_OPS
};

static const char *const lg_op_names[LG_OPS] = {
    "compile_hit", "compile_miss", "run", "buffer_churn", "launch", "verify", "stats", "bad",
};
/* Default relative weights of the mix, in the order of enum lg_op. */
static const int lg_op_weights_default[LG_OPS] = {20, 8, 24, 16, 10, 5, 2, 15};

/* The small regions the mix works on: one of each kind. */
static const char *const lg_region_json[] = {
    "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":16,\"n\":16,\"k\":16}",
    "{\"kind\":\"pointwise\",\"dtype\":\"f32\",\"inputs\":[{\"name\":\"a\",\"shape\":[8,16]},"
    "{\"name\":\"b\",\"shape\":[16]}],\"ops\":[{\"op\":\"add\",\"args\":[\"a\",\"b\"],\"out\":"
    "\"s\"},{\"op\":\"gelu\",\"args\":[\"s\"],\"out\":\"y\"}],\"output\":\"y\"}",
    "{\"kind\":\"fused\",\"dtype\":\"bf16\",\"m\":8,\"n\":8,\"k\":16,\"epilogue\":[\"bias\","
    "\"silu\"],\"reduction\":\"rmsnorm\"}",
    "{\"kind\":\"gated\",\"dtype\":\"f32\",\"m\":4,\"k\":8,\"h\":8,\"gate_act\":\"silu\"}",
    "{\"kind\":\"attention\",\"dtype\":\"f32\",\"batch\":1,\"heads\":2,\"heads_kv\":1,"
    "\"seq_q\":4,\"seq_k\":6,\"head_dim\":8,\"causal\":true}",
};
#define LG_REGIONS (int)(sizeof lg_region_json / sizeof lg_region_json[0])

typedef struct lg_counts {
    uint64_t sent, ok, wrong, unanswered, unexpected;
    uint64_t lat_max_us;
    uint64_t lat_hist[32]; /* by floor(log2(microseconds)) */
} lg_counts;

typedef struct lg_shared {
    const char *url;
    int timeout_ms;
    uint64_t seed;
    int64_t deadline_ns;
    int weights[LG_OPS];
    int reconnect_every; /* operations per connection; 0: one connection per client */
    tsr_region regions[LG_REGIONS];
    /* The first compile key seen per region: every later compile must agree. */
    pthread_mutex_t key_lock;
    char keys[LG_REGIONS][TSR_CLIENT_KEY_MAX];
    atomic_int failed_connects;
} lg_shared;

typedef struct lg_thread {
    pthread_t thread;
    int index;
    lg_shared *shared;
    uint64_t rng;
    uint64_t misses;
    lg_counts counts[LG_OPS];
    char first_error[TSR_ERROR_MESSAGE_MAX + 256];
} lg_thread;

static int64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t lg_rand(lg_thread *t)
{
    /* xorshift64*: deterministic per thread for a given --seed. */
    t->rng ^= t->rng >> 12;
    t->rng ^= t->rng << 25;
    t->rng ^= t->rng >> 27;
    return t->rng * 2685821657736338717ull;
}

static float lg_rand_float(lg_thread *t)
{
    return (float)((double)(lg_rand(t) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* Notes a failure once per thread (the first one is the one worth reading). */
static void lg_note(lg_thread *t, enum lg_op op, const char *what, const tsr_error *err)
{
    if (t->first_error[0] == '\0')
        snprintf(t->first_error, sizeof t->first_error, "%s: %s%s%s", lg_op_names[op], what,
                 err != NULL ? ": " : "", err != NULL ? err->message : "");
}

/* Sorts a call's outcome: a timeout or an unreachable daemon is unanswered. */
static bool lg_answered(lg_thread *t, enum lg_op op, tsr_status st, const tsr_error *err)
{
    if (st == TSR_TIMEOUT || st == TSR_UNAVAILABLE) {
        t->counts[op].unanswered++;
        lg_note(t, op, "no answer", err);
        return false;
    }
    return true;
}

static bool lg_expect_ok(lg_thread *t, enum lg_op op, tsr_status st, const tsr_error *err)
{
    if (!lg_answered(t, op, st, err))
        return false;
    if (st != TSR_OK) {
        t->counts[op].unexpected++;
        lg_note(t, op, tsr_status_name(st), err);
        return false;
    }
    return true;
}

/* Fills n elements of dtype with values in [-2, 2). */
static void lg_fill(lg_thread *t, tsr_dtype dtype, void *data, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = lg_rand_float(t);
        if (dtype == TSR_F32)
            ((float *)data)[i] = v;
        else if (dtype == TSR_F16)
            ((uint16_t *)data)[i] = tsr_f32_to_f16(v);
        else
            ((uint16_t *)data)[i] = tsr_f32_to_bf16(v);
    }
}

static double lg_value(tsr_dtype dtype, const void *data, int64_t i)
{
    if (dtype == TSR_F32)
        return ((const float *)data)[i];
    if (dtype == TSR_F16)
        return tsr_f16_to_f32(((const uint16_t *)data)[i]);
    return tsr_bf16_to_f32(((const uint16_t *)data)[i]);
}

/* The daemon's CPU backend runs the same reference, so results should agree
 * bit for bit; the check allows the dtype's oracle bound so that a backend
 * that legitimately reorders arithmetic is not called wrong. NaN and inf
 * positions must match exactly. */
static bool lg_output_right(const tsr_tensor_desc *out, const void *got, const void *want)
{
    int64_t n = tsr_tensor_desc_elements(out);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = lg_value(out->dtype, got, i), w = lg_value(out->dtype, want, i);
        if (isnan(g) != isnan(w) || (isinf(w) && g != w))
            return false;
        if (isfinite(w)) {
            diff += (g - w) * (g - w);
            norm += w * w;
        }
    }
    return sqrt(diff) <= tsr_dtype_tolerance(out->dtype) * (sqrt(norm) + 1e-30);
}

/* Inputs for region r, random; returns the count. Each inputs[i] is malloc'd. */
static int lg_inputs(lg_thread *t, const tsr_region *r, tsr_tensor_desc *in, tsr_tensor_desc *out,
                     void **inputs)
{
    int n = tsr_region_signature(r, in, out);
    for (int i = 0; i < n; i++) {
        inputs[i] = malloc(tsr_tensor_desc_bytes(&in[i]));
        lg_fill(t, in[i].dtype, inputs[i], tsr_tensor_desc_elements(&in[i]));
    }
    return n;
}

static void lg_inputs_free(void **inputs, int n)
{
    for (int i = 0; i < n; i++)
        free(inputs[i]);
}

static void lg_compile_hit(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    int ri = (int)(lg_rand(t) % LG_REGIONS);
    tsr_client_compiled out;
    tsr_error err;
    tsr_status st = tsr_client_compile(c, &s->regions[ri], NULL, &out, s->timeout_ms, &err);
    if (!lg_expect_ok(t, LG_COMPILE_HIT, st, &err))
        return;
    pthread_mutex_lock(&s->key_lock);
    if (s->keys[ri][0] == '\0')
        snprintf(s->keys[ri], sizeof s->keys[ri], "%s", out.key);
    bool same = strcmp(s->keys[ri], out.key) == 0;
    pthread_mutex_unlock(&s->key_lock);
    if (!same || out.kernel == 0) {
        t->counts[LG_COMPILE_HIT].wrong++;
        lg_note(t, LG_COMPILE_HIT, "key changed or no kernel handle", NULL);
        return;
    }
    t->counts[LG_COMPILE_HIT].ok++;
}

/* Frees a kernel handle the operation is done with; a refusal is unexpected. */
static void lg_kernel_free(lg_thread *t, enum lg_op op, tsr_client *c, tsr_kernel kernel)
{
    if (kernel == 0)
        return;
    tsr_error err;
    tsr_status st = tsr_client_kernel_free(c, kernel, t->shared->timeout_ms, &err);
    if (st != TSR_OK && lg_answered(t, op, st, &err)) {
        t->counts[op].unexpected++;
        lg_note(t, op, "kernel_free", &err);
    }
}

static void lg_compile_miss(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    /* n is unique to this thread (index < 1024) and call, so the key was never
     * built before (n, not m: every m of one n and k is one kernel variant and
     * shares its key); the call count goes in the high bits so that n stays
     * small (a few million) and the region within the daemon's per-request
     * work bound, which a thread index in the high bits passed. */
    int64_t n = ((int64_t)++t->misses << 10 | (int64_t)t->index) + 1;
    tsr_region r;
    tsr_error err;
    if (tsr_region_init_matmul(&r, TSR_F32, 2, n, 2, &err) != TSR_OK) {
        t->counts[LG_COMPILE_MISS].wrong++;
        lg_note(t, LG_COMPILE_MISS, "region", &err);
        return;
    }
    tsr_client_compiled out;
    tsr_status st = tsr_client_compile(c, &r, NULL, &out, s->timeout_ms, &err);
    tsr_region_free(&r);
    if (!lg_expect_ok(t, LG_COMPILE_MISS, st, &err))
        return;
    if (out.decision.cache_hit || out.kernel == 0) {
        t->counts[LG_COMPILE_MISS].wrong++;
        lg_note(t, LG_COMPILE_MISS, "a never-seen key was a cache hit", NULL);
    } else {
        t->counts[LG_COMPILE_MISS].ok++;
    }
    lg_kernel_free(t, LG_COMPILE_MISS, c, out.kernel);
}

static void lg_run(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    const tsr_region *r = &s->regions[lg_rand(t) % LG_REGIONS];
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    void *inputs[TSR_MAX_REGION_INPUTS];
    int n = lg_inputs(t, r, in, &out, inputs);
    size_t out_bytes = tsr_tensor_desc_bytes(&out);
    void *got = malloc(out_bytes), *want = malloc(out_bytes);
    tsr_error err;
    tsr_status st =
        tsr_client_run(c, r, NULL, (const void *const *)inputs, got, NULL, s->timeout_ms, &err);
    if (lg_expect_ok(t, LG_RUN, st, &err)) {
        tsr_status ref = tsr_ref_run(r, (const void *const *)inputs, want, 1, &err);
        if (ref == TSR_OK && lg_output_right(&out, got, want)) {
            t->counts[LG_RUN].ok++;
        } else {
            t->counts[LG_RUN].wrong++;
            lg_note(t, LG_RUN, "output differs from the reference", NULL);
        }
    }
    lg_inputs_free(inputs, n);
    free(got);
    free(want);
}

static void lg_buffer_churn(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    int64_t shape[2] = {(int64_t)(lg_rand(t) % 64) + 1, (int64_t)(lg_rand(t) % 64) + 1};
    size_t bytes = (size_t)(shape[0] * shape[1]) * sizeof(float);
    float *data = malloc(bytes), *back = malloc(bytes);
    lg_fill(t, TSR_F32, data, shape[0] * shape[1]);
    tsr_buffer buf = 0;
    uint64_t got_bytes = 0;
    size_t got = 0;
    tsr_error err;
    tsr_status st =
        tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 2, shape, &buf, &got_bytes, s->timeout_ms, &err);
    if (!lg_expect_ok(t, LG_BUFFER_CHURN, st, &err))
        goto out;
    st = tsr_client_buffer_write(c, buf, 0, data, bytes, s->timeout_ms, &err);
    if (lg_expect_ok(t, LG_BUFFER_CHURN, st, &err)) {
        st = tsr_client_buffer_read(c, buf, 0, back, bytes, &got, s->timeout_ms, &err);
        if (lg_expect_ok(t, LG_BUFFER_CHURN, st, &err)) {
            if (got_bytes == bytes && got == bytes && memcmp(data, back, bytes) == 0) {
                t->counts[LG_BUFFER_CHURN].ok++;
            } else {
                t->counts[LG_BUFFER_CHURN].wrong++;
                lg_note(t, LG_BUFFER_CHURN, "read back differs from what was written", NULL);
            }
        }
    }
    st = tsr_client_buffer_free(c, buf, s->timeout_ms, &err);
    if (st != TSR_OK && lg_answered(t, LG_BUFFER_CHURN, st, &err)) {
        t->counts[LG_BUFFER_CHURN].unexpected++;
        lg_note(t, LG_BUFFER_CHURN, "free", &err);
    }
out:
    free(data);
    free(back);
}

/* Compile, then launch on buffers and read the output back. */
static void lg_launch(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    const tsr_region *r = &s->regions[lg_rand(t) % LG_REGIONS];
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    void *inputs[TSR_MAX_REGION_INPUTS];
    tsr_buffer bufs[TSR_MAX_REGION_INPUTS + 1] = {0};
    int n = lg_inputs(t, r, in, &out, inputs);
    size_t out_bytes = tsr_tensor_desc_bytes(&out);
    void *got = malloc(out_bytes), *want = malloc(out_bytes);
    tsr_client_compiled k;
    k.kernel = 0;
    tsr_error err;
    bool fine = true;
    tsr_status st = tsr_client_compile(c, r, NULL, &k, s->timeout_ms, &err);
    fine = lg_expect_ok(t, LG_LAUNCH, st, &err);
    if (!fine)
        k.kernel = 0;
    for (int i = 0; i <= n && fine; i++) {
        const tsr_tensor_desc *d = i < n ? &in[i] : &out;
        st = tsr_client_buffer_alloc(c, (tsr_client_dtype)d->dtype, d->rank, d->shape, &bufs[i],
                                     NULL, s->timeout_ms, &err);
        fine = lg_expect_ok(t, LG_LAUNCH, st, &err);
        if (fine && i < n) {
            st = tsr_client_buffer_write(c, bufs[i], 0, inputs[i], tsr_tensor_desc_bytes(d),
                                         s->timeout_ms, &err);
            fine = lg_expect_ok(t, LG_LAUNCH, st, &err);
        }
    }
    if (fine) {
        st = tsr_client_launch(c, k.kernel, bufs, n, bufs[n], NULL, s->timeout_ms, &err);
        fine = lg_expect_ok(t, LG_LAUNCH, st, &err);
    }
    size_t got_len = 0;
    if (fine) {
        st = tsr_client_buffer_read(c, bufs[n], 0, got, out_bytes, &got_len, s->timeout_ms, &err);
        fine = lg_expect_ok(t, LG_LAUNCH, st, &err);
    }
    if (fine) {
        tsr_status ref = tsr_ref_run(r, (const void *const *)inputs, want, 1, &err);
        if (ref == TSR_OK && got_len == out_bytes && lg_output_right(&out, got, want)) {
            t->counts[LG_LAUNCH].ok++;
        } else {
            t->counts[LG_LAUNCH].wrong++;
            lg_note(t, LG_LAUNCH, "output differs from the reference", NULL);
        }
    }
    for (int i = 0; i <= n; i++)
        if (bufs[i] != 0)
            tsr_client_buffer_free(c, bufs[i], s->timeout_ms, NULL);
    /* The next compile of this region on the connection gets a new handle,
     * which the compile_hit check accepts: it compares keys, not handles. */
    lg_kernel_free(t, LG_LAUNCH, c, k.kernel);
    lg_inputs_free(inputs, n);
    free(got);
    free(want);
}

static void lg_verify(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    const tsr_region *r = &s->regions[lg_rand(t) % LG_REGIONS];
    tsr_client_verify_opts o;
    memset(&o, 0, sizeof o);
    o.seed = lg_rand(t) | 1;
    o.random_probes = 1;
    tsr_client_verified v;
    tsr_error err;
    tsr_status st = tsr_client_verify(c, r, &o, &v, s->timeout_ms, &err);
    if (!lg_expect_ok(t, LG_VERIFY, st, &err))
        return;
    if (v.verdict.state != TSR_CLIENT_VERDICT_PASS) {
        t->counts[LG_VERIFY].wrong++;
        lg_note(t, LG_VERIFY, "verdict is not PASS", NULL);
        return;
    }
    t->counts[LG_VERIFY].ok++;
}

static void lg_stats(lg_thread *t, tsr_client *c)
{
    tsr_client_stats *stats = NULL;
    tsr_error err;
    tsr_status st =
        tsr_client_stats_get(c, (lg_rand(t) & 1) != 0, &stats, t->shared->timeout_ms, &err);
    if (!lg_expect_ok(t, LG_STATS, st, &err))
        return;
    if (stats->n_counters == 0) {
        t->counts[LG_STATS].wrong++;
        lg_note(t, LG_STATS, "no counters", NULL);
    } else {
        t->counts[LG_STATS].ok++;
    }
    tsr_client_stats_free(stats);
}

/* One request that must fail, and the exact status it must fail with. */
static void lg_bad(lg_thread *t, tsr_client *c)
{
    lg_shared *s = t->shared;
    int tmo = s->timeout_ms;
    tsr_error err;
    tsr_status st, want;
    uint8_t bytes[64] = {0};
    tsr_buffer buf = 0;
    int64_t shape[1] = {4};
    switch (lg_rand(t) % 7) {
    case 0: /* a handle that never existed */
        want = TSR_NOT_FOUND;
        st = tsr_client_buffer_read(c, lg_rand(t) | 1, 0, bytes, sizeof bytes, NULL, tmo, &err);
        break;
    case 6: /* freeing a kernel handle that never existed */
        want = TSR_NOT_FOUND;
        st = tsr_client_kernel_free(c, lg_rand(t) | 1, tmo, &err);
        break;
    case 1:
        want = TSR_NOT_FOUND;
        st = tsr_client_launch(c, lg_rand(t) | 1, &buf, 1, lg_rand(t) | 1, NULL, tmo, &err);
        break;
    case 2: { /* a forced candidate nobody registered */
        tsr_client_compile_opts o;
        memset(&o, 0, sizeof o);
        o.force = "no_such_candidate";
        tsr_client_compiled out;
        want = TSR_ARBITER;
        st = tsr_client_compile(c, &s->regions[lg_rand(t) % LG_REGIONS], &o, &out, tmo, &err);
        break;
    }
    case 3: /* a zero dimension */
        shape[0] = 0;
        want = TSR_BAD_DIMENSION;
        st = tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &buf, NULL, tmo, &err);
        break;
    default: /* a write past the end of the caller's own buffer, then a double free */
        st = tsr_client_buffer_alloc(c, TSR_CLIENT_F32, 1, shape, &buf, NULL, tmo, &err);
        if (!lg_expect_ok(t, LG_BAD, st, &err))
            return;
        if (lg_rand(t) & 1) {
            want = TSR_BUFFER_MISMATCH;
            st = tsr_client_buffer_write(c, buf, 8, bytes, 16, tmo, &err);
            tsr_client_buffer_free(c, buf, tmo, NULL);
        } else {
            want = TSR_NOT_FOUND;
            tsr_client_buffer_free(c, buf, tmo, NULL);
            st = tsr_client_buffer_free(c, buf, tmo, &err);
        }
        break;
    }
    if (!lg_answered(t, LG_BAD, st, &err))
        return;
    if (st != want) {
        t->counts[LG_BAD].wrong++;
        char what[96];
        snprintf(what, sizeof what, "got %s, want %s", tsr_status_name(st), tsr_status_name(want));
        lg_note(t, LG_BAD, what, &err);
        return;
    }
    t->counts[LG_BAD].ok++;
}

static enum lg_op lg_pick(lg_thread *t)
{
    const int *w = t->shared->weights;
    int total = 0;
    for (int i = 0; i < LG_OPS; i++)
        total += w[i];
    int x = (int)(lg_rand(t) % (uint64_t)total);
    for (int i = 0; i < LG_OPS; i++) {
        if (x < w[i])
            return (enum lg_op)i;
        x -= w[i];
    }
    return LG_STATS;
}

/* Parses "name=weight,..." over the default mix; false on a bad entry. */
static bool lg_mix_parse(const char *text, int *weights)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL)
            return false;
        *eq = '\0';
        int op = 0;
        while (op < LG_OPS && strcmp(lg_op_names[op], tok) != 0)
            op++;
        if (op == LG_OPS || atoi(eq + 1) < 0)
            return false;
        weights[op] = atoi(eq + 1);
    }
    int total = 0;
    for (int i = 0; i < LG_OPS; i++)
        total += weights[i];
    return total > 0;
}

/* One request of each operation of the mix. */
static void (*const lg_op_send[LG_OPS])(lg_thread *t, tsr_client *c) = {
    [LG_COMPILE_HIT] = lg_compile_hit,
    [LG_COMPILE_MISS] = lg_compile_miss,
    [LG_RUN] = lg_run,
    [LG_BUFFER_CHURN] = lg_buffer_churn,
    [LG_LAUNCH] = lg_launch,
    [LG_VERIFY] = lg_verify,
    [LG_STATS] = lg_stats,
    [LG_BAD] = lg_bad,
};

static void *lg_client_main(void *arg)
{
    lg_thread *t = arg;
    lg_shared *s = t->shared;
    tsr_client_options o;
    tsr_client_options_init(&o);
    o.url = s->url;
    o.timeout_ms = s->timeout_ms;
    o.force = "";
    tsr_client *c = NULL;
    tsr_error err;
    for (uint64_t done = 0; lg_now_ns() < s->deadline_ns; done++) {
        if (c != NULL && s->reconnect_every > 0 && done % (uint64_t)s->reconnect_every == 0) {
            tsr_client_close(c);
            c = NULL;
        }
        if (c == NULL && tsr_client_connect(&o, &c, &err) != TSR_OK) {
            fprintf(stderr, "loadgen: client %d: %s\n", t->index, err.message);
            atomic_fetch_add(&s->failed_connects, 1);
            return NULL;
        }
        enum lg_op op = lg_pick(t);
        int64_t t0 = lg_now_ns();
        t->counts[op].sent++;
        lg_op_send[op](t, c);
        uint64_t us = (uint64_t)(lg_now_ns() - t0) / 1000;
        lg_counts *k = &t->counts[op];
        if (us > k->lat_max_us)
            k->lat_max_us = us;
        int b = 0;
        while (b < 31 && (us >> (b + 1)) != 0)
            b++;
        k->lat_hist[b]++;
    }
    tsr_client_close(c);
    return NULL;
}

/* VmRSS of pid in KiB; 0 when it cannot be read (the daemon is gone). */
static uint64_t lg_rss_kib(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    uint64_t kib = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* The upper edge, in microseconds, of the histogram bucket holding quantile q. */
static uint64_t lg_quantile_us(const lg_counts *k, double q)
{
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < 32; b++)
        total += k->lat_hist[b];
    for (int b = 0; b < 32; b++) {
        seen += k->lat_hist[b];
        if (total > 0 && (double)seen >= q * (double)total)
            return 2ull << b;
    }
    return 0;
}

static void lg_usage(void)
{
    fprintf(stderr, "usage: loadgen --url URL [--clients N] [--seconds S] [--seed X] [--pid PID]\n"
                    "               [--rss-slack-mb MB] [--timeout-ms MS] [--reconnect-every OPS]\n"
                    "               [--mix op=weight,...]   (ops: compile_hit compile_miss run\n"
                    "               buffer_churn launch verify stats bad)\n");
}

int main(int argc, char **argv)
{
    lg_shared s;
    memset(&s, 0, sizeof s);
    int clients = 8, seconds = 30;
    long pid = 0;
    uint64_t slack_mb = 16;
    const char *mix = NULL;
    s.timeout_ms = 60000;
    s.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            lg_usage();
            return 2;
        }
        if (strcmp(a, "--url") == 0)
            s.url = v;
        else if (strcmp(a, "--clients") == 0)
            clients = atoi(v);
        else if (strcmp(a, "--seconds") == 0)
            seconds = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            s.seed = strtoull(v, NULL, 0);
        else if (strcmp(a, "--pid") == 0)
            pid = atol(v);
        else if (strcmp(a, "--rss-slack-mb") == 0)
            slack_mb = strtoull(v, NULL, 0);
        else if (strcmp(a, "--timeout-ms") == 0)
            s.timeout_ms = atoi(v);
        else if (strcmp(a, "--reconnect-every") == 0)
            s.reconnect_every = atoi(v);
        else if (strcmp(a, "--mix") == 0)
            mix = v;
        else {
            lg_usage();
            return 2;
        }
        i++;
    }
    memcpy(s.weights, lg_op_weights_default, sizeof s.weights);
    if (s.url == NULL || clients < 1 || clients > 1024 || seconds < 1 || s.reconnect_every < 0 ||
        (mix != NULL && !lg_mix_parse(mix, s.weights))) {
        lg_usage();
        return 2;
    }
    for (int i = 0; i < LG_REGIONS; i++) {
        tsr_error err;
        if (tsr_region_from_json(lg_region_json[i], strlen(lg_region_json[i]), &s.regions[i],
                                 &err) != TSR_OK) {
            fprintf(stderr, "loadgen: region %d: %s\n", i, err.message);
            return 2;
        }
    }
    pthread_mutex_init(&s.key_lock, NULL);
    int64_t start = lg_now_ns();
    s.deadline_ns = start + (int64_t)seconds * 1000000000;

    lg_thread *threads = calloc((size_t)clients, sizeof *threads);
    for (int i = 0; i < clients; i++) {
        threads[i].index = i;
        threads[i].shared = &s;
        threads[i].rng =
            (s.seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i + 1) * 0xbf58476d1ce4e5b9ull;
        if (threads[i].rng == 0)
            threads[i].rng = 1;
        pthread_create(&threads[i].thread, NULL, lg_client_main, &threads[i]);
    }

    /* Sample the daemon's memory while the clients run. */
    int warm_s = seconds / 2;
    uint64_t rss_first = 0, rss_warm = 0, rss_max = 0, rss_last = 0;
    /* One sample per tenth of the run, for the shape of the curve. */
    uint64_t rss_trace[10] = {0};
    bool daemon_gone = false;
    if (pid > 0) {
        for (int sec = 0; lg_now_ns() < s.deadline_ns; sec++) {
            uint64_t kib = lg_rss_kib(pid);
            if (kib == 0) {
                daemon_gone = true;
                break;
            }
            if (rss_first == 0)
                rss_first = kib;
            if (sec == warm_s || rss_warm == 0)
                rss_warm = sec >= warm_s ? kib : rss_warm;
            rss_max = kib > rss_max ? kib : rss_max;
            rss_last = kib;
            int tenth = (int)((int64_t)sec * 10 / seconds);
            if (tenth < 10 && rss_trace[tenth] == 0)
                rss_trace[tenth] = kib;
            sleep(1);
        }
    }
    for (int i = 0; i < clients; i++)
        pthread_join(threads[i].thread, NULL);
    if (pid > 0 && !daemon_gone) {
        uint64_t kib = lg_rss_kib(pid);
        daemon_gone = kib == 0;
        if (kib != 0) {
            rss_last = kib;
            rss_max = kib > rss_max ? kib : rss_max;
        }
    }
    double elapsed = (double)(lg_now_ns() - start) / 1e9;

    lg_counts total;
    memset(&total, 0, sizeof total);
    printf("%-13s %9s %9s %6s %10s %10s %9s %9s %9s\n", "op", "sent", "ok", "wrong", "unanswered",
           "unexpected", "p50_us", "p99_us", "max_us");
    for (int op = 0; op < LG_OPS; op++) {
        lg_counts k;
        memset(&k, 0, sizeof k);
        for (int i = 0; i < clients; i++) {
            const lg_counts *c = &threads[i].counts[op];
            k.sent += c->sent;
            k.ok += c->ok;
            k.wrong += c->wrong;
            k.unanswered += c->unanswered;
            k.unexpected += c->unexpected;
            k.lat_max_us = c->lat_max_us > k.lat_max_us ? c->lat_max_us : k.lat_max_us;
            for (int b = 0; b < 32; b++)
                k.lat_hist[b] += c->lat_hist[b];
        }
        printf("%-13s %9" PRIu64 " %9" PRIu64 " %6" PRIu64 " %10" PRIu64 " %10" PRIu64 " %9" PRIu64
               " %9" PRIu64 " %9" PRIu64 "\n",
               lg_op_names[op], k.sent, k.ok, k.wrong, k.unanswered, k.unexpected,
               lg_quantile_us(&k, 0.5), lg_quantile_us(&k, 0.99), k.lat_max_us);
        total.sent += k.sent;
        total.ok += k.ok;
        total.wrong += k.wrong;
        total.unanswered += k.unanswered;
        total.unexpected += k.unexpected;
    }
    for (int i = 0; i < clients; i++)
        if (threads[i].first_error[0] != '\0')
            printf("client %d first problem: %s\n", i, threads[i].first_error);

    int failed_connects = atomic_load(&s.failed_connects);
    bool flat = true;
    printf("clients %d\nseconds %.1f\noperations %" PRIu64 "\nops_per_second %.1f\n", clients,
           elapsed, total.sent, (double)total.sent / elapsed);
    printf("ok %" PRIu64 "\nwrong %" PRIu64 "\nunanswered %" PRIu64 "\nunexpected %" PRIu64
           "\nfailed_connects %d\n",
           total.ok, total.wrong, total.unanswered, total.unexpected, failed_connects);
    if (pid > 0) {
        uint64_t base = rss_warm != 0 ? rss_warm : rss_first;
        uint64_t slack = slack_mb * 1024 > base / 10 ? slack_mb * 1024 : base / 10;
        flat = !daemon_gone && rss_last <= base + slack;
        printf("rss_start_kib %" PRIu64 "\nrss_after_warmup_kib %" PRIu64 "\nrss_max_kib %" PRIu64
               "\nrss_end_kib %" PRIu64 "\nrss_flat %s\ndaemon_alive %s\n",
               rss_first, base, rss_max, rss_last, flat ? "yes" : "no", daemon_gone ? "no" : "yes");
        printf("rss_trace_kib");
        for (int i = 0; i < 10; i++)
            printf("%s%" PRIu64, i == 0 ? " " : ",", rss_trace[i]);
        printf(",%" PRIu64 "\n", rss_last);
    }
    bool pass = total.wrong == 0 && total.unanswered == 0 && total.unexpected == 0 &&
                failed_connects == 0 && total.sent > 0 && flat;
    printf("result %s\n", pass ? "PASS" : "FAIL");

    for (int i = 0; i < LG_REGIONS; i++)
        tsr_region_free(&s.regions[i]);
    pthread_mutex_destroy(&s.key_lock);
    free(threads);
    return pass ? 0 : 1;
}
