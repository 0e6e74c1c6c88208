/*
 * engine.c — selection, the kernel cache and the backend, put together.
 *
 * Everything here runs on worker threads. The kernel key carries every input
 * of a build (candidate and version, arch, compiler and driver versions,
 * options, the backend's code-generation version), so a cache hit can never be
 * a binary built from different inputs.
 *
 * The work bound (max_request_work) is checked at the top of each entry point
 * that makes the CPU work: a refusal costs the worker a few arithmetic
 * operations, never a compile, a probe or a reference run.
 */
#include "serve/engine.h"
#include "serve/fleet.h"
#include "serve/offline_compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/oracle.h"
#include "tessera/refexec.h"

#define ENGINE_MEASURE_REPEATS 5

/* Work units a probe costs beyond the runs themselves: a stream, temporary
 * buffers and copies through the backend, the comparison; some microseconds.
 * Without it, a tiny region with a million probes would look free. */
#define ENGINE_PROBE_WORK 65536.0

static double engine_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

tsr_status tsrd_engine_arch(tsrd_daemon *d, const char *requested, char *arch, size_t size,
                            tsr_error *err)
{
    if (requested == NULL || requested[0] == '\0')
        requested = d->devices[0].arch;
    if (!d->bops->serves_arch(d->backend, requested))
        return tsr_error_set(err, TSR_UNSUPPORTED,
                             "arch '%s' is not served by the %s backend (it serves '%s'); "
                             "compiling for another architecture is not supported yet",
                             requested, d->bops->name, d->devices[0].arch);
    snprintf(arch, size, "%s", requested);
    return TSR_OK;
}

/* ---- the work bound ---- */

/* The CPU backend serves the arch "cpu": there a candidate runs on the host. */
static bool engine_arch_is_host(const char *arch)
{
    return arch != NULL && strcmp(arch, "cpu") == 0;
}

tsr_verify_method tsrd_engine_verify_method(const tsr_region *r)
{
    return tsr_ref_work(r) > TSRD_ENGINE_SAMPLE_WORK ? TSR_VERIFY_SAMPLED : TSR_VERIFY_FULL;
}

static tsr_status engine_verify_run_keyed_fn(void *ctx, const tsr_region *r, const uint64_t *keys,
                                             const uint64_t *index, size_t count, void *out,
                                             tsr_error *err);

/* The oracle's options for verifying c on r; with sampling, *small is the
 * small shape when c serves it (*has_small; free it with tsr_region_free). */
static void engine_oracle_options(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                  uint64_t seed, int random_probes, bool shape_only,
                                  bool probe_on_device, tsr_oracle_memo *memo,
                                  tsr_oracle_options *o, tsr_region *small, bool *has_small)
{
    memset(o, 0, sizeof *o);
    o->seed = seed;
    o->random_probes = random_probes;
    o->bound = c != NULL ? c->tolerance : 0;
    o->ref_threads = 0;
    /* A new shape of a completely verified variant: the sampled check at
     * this shape only, whatever its size (docs/arbiter.md, "Variants"). */
    o->method = shape_only ? TSR_VERIFY_SAMPLED : tsrd_engine_verify_method(r);
    o->tile = c != NULL ? c->tile : 0;
    /* A backend that makes the probe inputs where its buffers are spares the
     * host the full-size inputs (docs/arbiter.md, "Verification"). */
    o->run_keyed = probe_on_device ? engine_verify_run_keyed_fn : NULL;
    o->memo = memo;
    *has_small = false;
    if (shape_only || o->method != TSR_VERIFY_SAMPLED ||
        tsr_oracle_small_region(r, o->tile, small, NULL) != TSR_OK)
        return;
    char why[128] = "";
    if (c != NULL && c->applies != NULL && !c->applies(c, small, arch, why, sizeof why)) {
        /* The candidate does not serve the small shape: its sampled check at
         * the real shape is all there is (the verdict says 0 small probes). */
        tsr_region_free(small);
        return;
    }
    *has_small = true;
    o->small = small;
}

static double engine_verify_work(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 int random_probes, bool shape_only, bool probe_on_device)
{
    /* The candidate's own runs are host work on the CPU backend, and for a
     * device backend's tier-0 reference too. */
    bool host = engine_arch_is_host(arch) || (c != NULL && c->tier == 0);
    double run = tsr_ref_work(r);
    if (!shape_only && tsrd_engine_verify_method(r) == TSR_VERIFY_FULL) {
        /* In double: random_probes plus the special probes can pass INT_MAX. */
        int special = tsr_oracle_probe_count(r, 1) - 1;
        double probes =
            random_probes > 0 ? (double)random_probes + special : tsr_oracle_probe_count(r, 0);
        return probes * (run * (host ? 2 : 1) + ENGINE_PROBE_WORK);
    }
    tsr_oracle_options o;
    tsr_region small;
    bool has_small;
    engine_oracle_options(c, r, arch, 0, random_probes, shape_only, probe_on_device, NULL, &o,
                          &small, &has_small);
    tsr_oracle_cost cost;
    tsr_oracle_cost_of(r, &o, &cost);
    double work = cost.work + ((double)cost.real_probes + cost.small_probes) * ENGINE_PROBE_WORK;
    if (host)
        work += cost.real_probes * run + (has_small ? cost.small_probes * tsr_ref_work(&small) : 0);
    if (probe_on_device && engine_arch_is_host(arch)) {
        /* The CPU backend's "device" is the host: it makes every input element
         * (as many steps as a reference reads them) and fills the output. */
        tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
        int n = tsr_region_signature(r, in, &out);
        double made = 0;
        for (int i = 0; i < n; i++)
            made += (double)tsr_tensor_desc_elements(&in[i]);
        work += cost.real_probes *
                (TSR_REF_WORK_ELEMENT * made + (double)tsr_tensor_desc_elements(&out));
    }
    if (has_small)
        tsr_region_free(&small);
    return work;
}

double tsrd_engine_verify_work(const tsr_candidate *c, const tsr_region *r, const char *arch,
                               int random_probes)
{
    return engine_verify_work(c, r, arch, random_probes, false, false);
}

tsr_status tsrd_engine_check_work(const tsrd_daemon *d, const tsr_region *r, const char *what,
                                  double work, tsr_error *err)
{
    uint64_t limit = d->config.max_request_work;
    if (limit == 0 || work <= (double)limit)
        return TSR_OK;
    return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                         "max_request_work: %s of this %s region is estimated at %.0f units of "
                         "CPU work, over the limit of %llu",
                         what, tsr_region_kind_name(r->kind), work, (unsigned long long)limit);
}

/* ---- binaries through the kernel cache ---- */

typedef struct engine_build {
    tsrd_daemon *d;
    const tsr_region *r;
    const tsr_candidate *c;
    const char *arch;
} engine_build;

static tsr_status engine_build_fn(void *ctx, uint8_t **data, size_t *len, tsr_error *err)
{
    engine_build *b = ctx;
    return b->d->bops->compile(b->d->backend, b->r, b->c, b->arch, data, len, err);
}

static tsr_status engine_binary(tsrd_daemon *d, const tsr_region *r, const tsr_candidate *c,
                                const char *arch, tsrd_compiled *out, tsr_error *err)
{
    tsr_kernel_key_parts parts = {
        .candidate = c->name,
        .candidate_version = c->version,
        .arch = arch,
        .compiler_version = d->compiler_version,
        .driver_version = d->driver_version,
        .options = "",
        .codegen_version = d->bops->codegen_version,
    };
    /* Keyed by the candidate's variant: every shape of a kernel that takes
     * its dimensions at run time shares one binary (docs/cache.md). */
    tsr_fingerprint variant;
    tsr_status st = tsr_candidate_variant(c, r, arch, NULL, &variant, err);
    if (st != TSR_OK)
        return st;
    tsr_kernel_key(&variant, &parts, &out->key);
    tsr_kcache_meta meta = tsr_kcache_meta_of(c->name, tsr_region_kind_name(r->kind), arch);
    engine_build build = {.d = d, .r = r, .c = c, .arch = arch};
    st = tsr_kcache_get_or_build(d->kcache, &out->key, &meta, engine_build_fn, &build, &out->blob,
                                 &out->level, err);
    /* The kernel cache timed the build it made (the blob keeps it). */
    out->compile_ms = st == TSR_OK && out->level == TSR_KCACHE_MISS ? out->blob->build_ms : 0;
    return st;
}

/* ---- running through the backend ---- */

/* A run's device side: its region's signature, a buffer for each input and
 * the output, and a stream. engine_run_begin makes the stream (the buffers
 * are the caller's to allocate); engine_run_end frees whatever was made. */
typedef struct engine_run {
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS];
    tsr_tensor_desc out_desc;
    int n;
    tsrd_dbuf *bufs[TSR_MAX_REGION_INPUTS];
    tsrd_dbuf *out_buf;
    tsrd_stream *stream;
} engine_run;

static tsr_status engine_run_begin(tsrd_daemon *d, const tsr_region *r, engine_run *run,
                                   tsr_error *err)
{
    memset(run, 0, sizeof *run);
    run->n = tsr_region_signature(r, run->sig, &run->out_desc);
    return d->bops->stream_create(d->backend, 0, &run->stream, err);
}

static void engine_run_end(tsrd_daemon *d, engine_run *run)
{
    const tsrd_backend_ops *ops = d->bops;
    for (int i = 0; i < run->n; i++)
        if (run->bufs[i] != NULL)
            ops->buffer_free(d->backend, run->bufs[i]);
    if (run->out_buf != NULL)
        ops->buffer_free(d->backend, run->out_buf);
    if (run->stream != NULL)
        ops->stream_destroy(d->backend, run->stream);
}

/* engine_run_begin, then a buffer for each input and the output. */
static tsr_status engine_run_make(tsrd_daemon *d, const tsr_region *r, engine_run *run,
                                  tsr_error *err)
{
    const tsrd_backend_ops *ops = d->bops;
    tsr_status st = engine_run_begin(d, r, run, err);
    for (int i = 0; st == TSR_OK && i < run->n; i++)
        st = ops->buffer_alloc(d->backend, 0, tsr_tensor_desc_bytes(&run->sig[i]), &run->bufs[i],
                               err);
    if (st == TSR_OK)
        st = ops->buffer_alloc(d->backend, 0, tsr_tensor_desc_bytes(&run->out_desc), &run->out_buf,
                               err);
    return st;
}

/* Copies the inputs in (and, with poison_out, the caller's output bytes into
 * the output buffer, so that an element the kernel leaves unwritten reads back
 * as the caller filled it), launches k and reads the output back. */
static tsr_status engine_run_on(tsrd_daemon *d, tsrd_kobj *k, engine_run *run,
                                const void *const *inputs, void *output, bool poison_out,
                                double *device_ms, tsr_error *err)
{
    const tsrd_backend_ops *ops = d->bops;
    tsr_status st = TSR_OK;
    for (int i = 0; st == TSR_OK && i < run->n; i++)
        st = ops->buffer_write(d->backend, run->bufs[i], 0, inputs[i],
                               tsr_tensor_desc_bytes(&run->sig[i]), err);
    uint64_t out_bytes = tsr_tensor_desc_bytes(&run->out_desc);
    if (st == TSR_OK && poison_out)
        st = ops->buffer_write(d->backend, run->out_buf, 0, output, out_bytes, err);
    if (st == TSR_OK)
        st = tsrd_launch_wait(ops, d->backend, k, run->stream, run->bufs, run->n, run->out_buf,
                              device_ms, err);
    if (st == TSR_OK)
        st = ops->buffer_read(d->backend, run->out_buf, 0, output, out_bytes, err);
    return st;
}

tsr_status tsrd_engine_run_host(tsrd_daemon *d, tsrd_kobj *k, const tsr_region *r,
                                const void *const *inputs, void *output, double *device_ms,
                                tsr_error *err)
{
    engine_run run;
    tsr_status st = engine_run_make(d, r, &run, err);
    if (st == TSR_OK)
        st = engine_run_on(d, k, &run, inputs, output, false, device_ms, err);
    engine_run_end(d, &run);
    return st;
}

/* A run on a sampled probe that the backend makes where the buffers are
 * (tsr_candidate_run_keyed_fn): only the sampled outputs come back. */
static tsr_status engine_run_keyed(tsrd_daemon *d, tsrd_kobj *k, const tsr_region *r,
                                   const uint64_t *keys, const uint64_t *index, size_t count,
                                   void *out, tsr_error *err)
{
    const tsrd_backend_ops *ops = d->bops;
    engine_run run;
    double t0 = engine_now_ms();
    tsr_status st = engine_run_begin(d, r, &run, err);
    uint64_t out_bytes = tsr_tensor_desc_bytes(&run.out_desc);
    size_t size = tsr_dtype_size(r->out_dtype);
    for (int i = 0; st == TSR_OK && i < run.n; i++) {
        st =
            ops->buffer_alloc(d->backend, 0, tsr_tensor_desc_bytes(&run.sig[i]), &run.bufs[i], err);
        if (st == TSR_OK)
            st = ops->probe->buffer_fill_probe(d->backend, run.bufs[i], run.sig[i].dtype,
                                               (uint64_t)tsr_tensor_desc_elements(&run.sig[i]),
                                               keys[i], err);
    }
    if (st == TSR_OK)
        st = ops->buffer_alloc(d->backend, 0, out_bytes, &run.out_buf, err);
    if (st == TSR_OK)
        st = ops->probe->buffer_fill_ones(d->backend, run.out_buf, out_bytes, err);
    double t1 = engine_now_ms();
    if (st == TSR_OK)
        st = ops->launch(d->backend, k, run.stream, run.bufs, run.n, run.out_buf, err);
    if (st == TSR_OK)
        st = ops->synchronize(d->backend, run.stream, NULL, err);
    double t2 = engine_now_ms();
    /* Only the sampled outputs come back. */
    if (st == TSR_OK)
        st = ops->probe->buffer_gather(d->backend, run.out_buf, (uint32_t)size, index, count, out,
                                       err);
    double t3 = engine_now_ms();
    engine_run_end(d, &run);
    tsrd_log_debug(&d->log,
                   "probe run: made %.2f ms, ran %.2f ms, gathered %zu outputs %.2f ms, freed "
                   "%.2f ms",
                   t1 - t0, t2 - t1, count, t3 - t2, engine_now_ms() - t3);
    return st;
}

/* Loads the binary of compiled for r. A binary the backend refuses as made for
 * another region (TSR_CORRUPT) is authentic but of no use to any request: its
 * key is evicted, so that the next request rebuilds it. */
static tsr_status engine_load_binary(tsrd_daemon *d, const tsr_region *r, const tsr_candidate *c,
                                     tsrd_compiled *compiled, tsr_error *err)
{
    tsr_status st = d->bops->load(d->backend, 0, r, c, compiled->blob->data, compiled->blob->len,
                                  &compiled->kobj, err);
    if (st == TSR_CORRUPT) {
        tsr_kcache_evict(d->kcache, &compiled->key, NULL, NULL);
        /* One that came from the fleet is deleted there too. */
        if (compiled->blob->origin == TSR_KCACHE_FLEET)
            tsrd_fleet_discard(d->fleet, &compiled->key);
    }
    return st;
}

typedef struct engine_loaded {
    tsrd_daemon *d;
    tsrd_compiled compiled;
    tsr_candidate candidate;
} engine_loaded;

/* Compiles (through the cache) and loads candidate c for r on arch. */
static tsr_status engine_load(tsrd_daemon *d, const tsr_candidate *c, const tsr_region *r,
                              const char *arch, engine_loaded *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    out->d = d;
    out->candidate = *c;
    tsr_status st = tsr_region_fingerprint(r, &out->compiled.fingerprint, err);
    if (st == TSR_OK)
        st = engine_binary(d, r, c, arch, &out->compiled, err);
    if (st == TSR_OK)
        st = engine_load_binary(d, r, c, &out->compiled, err);
    if (st != TSR_OK)
        tsrd_compiled_release(d, &out->compiled);
    return st;
}

/* The work check of a verification; a refusal leaves a failed verdict saying so. */
static tsr_status engine_verify_admit(tsrd_daemon *d, const tsr_candidate *c, const tsr_region *r,
                                      const char *arch, int random_probes, bool shape_only,
                                      tsr_verdict *v, tsr_error *err)
{
    tsr_status st = tsrd_engine_check_work(
        d, r, "the verification",
        engine_verify_work(c, r, arch, random_probes, shape_only, d->bops->probe != NULL), err);
    if (st != TSR_OK) {
        tsr_verdict_init(v, c->tolerance, r->out_dtype);
        v->pass = false;
        snprintf(v->reason, sizeof v->reason, "not run: over max_request_work");
    }
    return st;
}

/* The candidate as the oracle runs it: loaded for the real shape, and for the
 * small shape on first use (a second compile where the kernel is built per
 * shape). Each shape's stream and buffers are made at its first run and kept
 * for the next ones (a small shape's probes run twenty-odd times), each run
 * starting from the oracle's poisoned output; the verification frees them. */
typedef struct engine_verify_run {
    tsrd_daemon *d;
    const tsr_candidate *c;
    const char *arch;
    engine_loaded real, small;
    bool small_loaded;
    const tsr_region *small_region;
    engine_run kept[2]; /* the real shape's, the small shape's */
    bool kept_made[2];
    int runs; /* runs made through the host, and their time */
    double runs_ms;
} engine_verify_run;

static tsr_status engine_verify_run_fn(void *ctx, const tsr_region *r, const void *const *inputs,
                                       void *output, tsr_error *err)
{
    engine_verify_run *v = ctx;
    double t0 = engine_now_ms();
    engine_loaded *l = &v->real;
    const int which = r == v->small_region;
    if (which == 1) {
        if (!v->small_loaded) {
            tsr_status st = engine_load(v->d, v->c, r, v->arch, &v->small, err);
            if (st != TSR_OK)
                return tsr_error_prefix(err, "small shape");
            v->small_loaded = true;
        }
        l = &v->small;
    }
    tsr_status st = TSR_OK;
    if (!v->kept_made[which]) {
        st = engine_run_make(v->d, r, &v->kept[which], err);
        if (st == TSR_OK)
            v->kept_made[which] = true;
        else
            engine_run_end(v->d, &v->kept[which]);
    }
    if (st == TSR_OK)
        st =
            engine_run_on(v->d, l->compiled.kobj, &v->kept[which], inputs, output, true, NULL, err);
    v->runs++;
    v->runs_ms += engine_now_ms() - t0;
    return st;
}

/* The probes at the real shape, on inputs the backend makes (never the small
 * shape's: those are small, and the special-value ones are not keyed). */
static tsr_status engine_verify_run_keyed_fn(void *ctx, const tsr_region *r, const uint64_t *keys,
                                             const uint64_t *index, size_t count, void *out,
                                             tsr_error *err)
{
    engine_verify_run *v = ctx;
    return engine_run_keyed(v->d, v->real.compiled.kobj, r, keys, index, count, out, err);
}

static tsr_status engine_verify(tsrd_daemon *d, const tsr_candidate *c, const tsr_region *r,
                                const char *arch, uint64_t seed, int random_probes, bool shape_only,
                                tsr_verdict *v, bool *refused, tsr_error *err)
{
    *refused = false;
    tsr_status st = engine_verify_admit(d, c, r, arch, random_probes, shape_only, v, err);
    if (st != TSR_OK) {
        *refused = true;
        return st;
    }
    engine_verify_run run = {.d = d, .c = c, .arch = arch};
    double t0 = engine_now_ms();
    st = engine_load(d, c, r, arch, &run.real, err);
    double t1 = engine_now_ms();
    if (st != TSR_OK) {
        tsrd_fleet_abandon(d->fleet, &run.real.compiled.key);
        tsr_verdict_init(v, c->tolerance, r->out_dtype);
        v->pass = false;
        snprintf(v->reason, sizeof v->reason, "could not build: %.120s", err ? err->message : "");
        return st;
    }
    tsr_oracle_options opts;
    tsr_region small;
    bool has_small;
    engine_oracle_options(c, r, arch, seed, random_probes, shape_only, d->bops->probe != NULL,
                          d->oracle_memo, &opts, &small, &has_small);
    run.small_region = opts.small;
    st = tsr_oracle_verify(r, engine_verify_run_fn, &run, &opts, v, err);
    for (int i = 0; i < 2; i++)
        if (run.kept_made[i])
            engine_run_end(d, &run.kept[i]);
    tsrd_log_debug(&d->log,
                   "verify %s%s: load %.2f ms, oracle %.2f ms (%d runs through the host %.2f "
                   "ms), %s",
                   c->name, shape_only ? " (new shape)" : "", t1 - t0, engine_now_ms() - t1,
                   run.runs, run.runs_ms, st == TSR_OK && v->pass ? "pass" : "fail");
    /* Every candidate that verifies goes to the fleet (a measured selection
     * verifies several), and one that does not frees its lease at once. */
    if (st == TSR_OK && v->pass)
        tsrd_fleet_publish(d->fleet, &run.real.compiled.key, run.real.compiled.blob);
    else
        tsrd_fleet_abandon(d->fleet, &run.real.compiled.key);
    tsrd_compiled_release(d, &run.real.compiled);
    if (run.small_loaded)
        tsrd_compiled_release(d, &run.small.compiled);
    if (has_small)
        tsr_region_free(&small);
    return st;
}

tsr_status tsrd_engine_verify(tsrd_daemon *d, const tsr_candidate *c, const tsr_region *r,
                              const char *arch, uint64_t seed, int random_probes, tsr_verdict *v,
                              tsr_error *err)
{
    bool refused;
    return engine_verify(d, c, r, arch, seed, random_probes, false, v, &refused, err);
}

static tsr_status engine_verify_with(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                     bool shape_only, tsr_verdict *v, tsr_error *err)
{
    tsrd_engine_ctx *e = ctx;
    bool refused;
    tsr_status st = engine_verify(e->d, c, r, e->arch, 0, 0, shape_only, v, &refused, err);
    if (refused && !e->refused && err != NULL) {
        e->refused = true;
        e->refusal = *err;
    }
    return st;
}

static tsr_status engine_verify_cb(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                   tsr_verdict *v, tsr_error *err)
{
    return engine_verify_with(ctx, c, r, false, v, err);
}

/* A new shape of a variant verified completely at another shape. */
static tsr_status engine_verify_shape_cb(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                         tsr_verdict *v, tsr_error *err)
{
    return engine_verify_with(ctx, c, r, true, v, err);
}

static int engine_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median time of ENGINE_MEASURE_REPEATS runs on the first random probe, after
 * one warm-up run. The device time is used when the backend reports one. */
static tsr_status engine_measure_cb(void *ctx, const tsr_candidate *c, const tsr_region *r,
                                    double *median_ms, tsr_error *err)
{
    tsrd_engine_ctx *e = ctx;
    engine_loaded loaded;
    /* One probe made, and the runs on the host when the device is the CPU. */
    double work =
        ENGINE_PROBE_WORK +
        (engine_arch_is_host(e->arch) ? (ENGINE_MEASURE_REPEATS + 1) * tsr_ref_work(r) : 0);
    tsr_status st = tsrd_engine_check_work(e->d, r, "the timing", work, err);
    if (st == TSR_OK)
        st = engine_load(e->d, c, r, e->arch, &loaded, err);
    if (st != TSR_OK)
        return st;
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out_desc;
    tsr_region_signature(r, sig, &out_desc);
    void *output = malloc((size_t)tsr_tensor_desc_bytes(&out_desc));
    /* A region verified by sampling is large: its inputs are made on every core. */
    bool large = tsrd_engine_verify_method(r) == TSR_VERIFY_SAMPLED;
    st = output == NULL ? tsr_error_set(err, TSR_NO_MEMORY, "measure: out of memory")
         : large        ? tsr_oracle_make_sampled_probe(r, 0, 0, 0, inputs, err)
                        : tsr_oracle_make_probe(r, 0, 0, 1, inputs, err);
    double times[ENGINE_MEASURE_REPEATS];
    for (int i = -1; st == TSR_OK && i < ENGINE_MEASURE_REPEATS; i++) {
        double device_ms = 0, start = engine_now_ms();
        st = tsrd_engine_run_host(e->d, loaded.compiled.kobj, r, (const void *const *)inputs,
                                  output, &device_ms, err);
        if (i >= 0)
            times[i] = device_ms > 0 ? device_ms : engine_now_ms() - start;
    }
    if (st == TSR_OK) {
        qsort(times, ENGINE_MEASURE_REPEATS, sizeof times[0], engine_cmp_double);
        *median_ms = times[ENGINE_MEASURE_REPEATS / 2];
    }
    if (output != NULL && inputs[0] != NULL)
        tsr_oracle_free_probe(r, inputs);
    free(output);
    tsrd_compiled_release(e->d, &loaded.compiled);
    return st;
}

/* ---- selection and compilation ---- */

void tsrd_engine_select_request(tsrd_engine_ctx *ctx, const tsr_region *r,
                                const tsr_fingerprint *fp, const Tessera__V1__CompileOptions *opts,
                                tsr_select_request *out)
{
    memset(out, 0, sizeof *out);
    out->region = r;
    out->fingerprint = fp;
    out->arch = ctx->arch;
    out->force = opts != NULL ? opts->force : NULL;
    out->policy = opts != NULL && opts->policy == TESSERA__V1__POLICY__POLICY_MEASURE
                      ? TSR_POLICY_MEASURE
                      : TSR_POLICY_TIER;
    out->verify = opts == NULL || !opts->skip_verify;
    out->allow_reference = opts == NULL || !opts->no_reference;
    /* A device backend's reference runs on the host at every launch: past the
     * bound it is no fallback, and the error names the device candidates. */
    double launch = tsr_ref_work(r);
    uint64_t limit = ctx->d->config.max_request_work;
    if (!engine_arch_is_host(ctx->arch) && limit != 0 && launch > (double)limit) {
        snprintf(ctx->reference_refusal, sizeof ctx->reference_refusal,
                 "a launch on the host is estimated at %.0f units of CPU work, over "
                 "max_request_work (%llu)",
                 launch, (unsigned long long)limit);
        out->reference_refused = ctx->reference_refusal;
    }
    out->verify_fn = engine_verify_cb;
    out->verify_shape_fn = engine_verify_shape_cb;
    out->measure_fn = engine_measure_cb;
    out->ctx = ctx;
}

tsr_status tsrd_engine_compile(tsrd_daemon *d, const tsr_region *r,
                               const Tessera__V1__CompileOptions *opts, bool load,
                               tsrd_compiled *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    /* A compile for a CUDA architecture that the serving backend has no device
     * for (a build machine, CI) produces and caches the binary without loading
     * it; a run needs a device and gets UNSUPPORTED below. */
    const char *want = opts != NULL ? opts->arch : NULL;
    if (!load && want != NULL && want[0] != '\0' && !d->bops->serves_arch(d->backend, want) &&
        tsrd_offline_arch_supported(want)) {
        /* Nothing verifies an offline build: it is not published, and the
         * lease its lookup took is dropped at once. */
        tsr_status st = tsrd_offline_compile(d->kcache, r, want, opts->force, out, err);
        tsrd_fleet_abandon(d->fleet, &out->key);
        return st;
    }
    tsr_status st = tsrd_engine_arch(d, want, out->arch, sizeof out->arch, err);
    /* A kernel loaded on the CPU backend runs on the host at every launch. */
    if (st == TSR_OK && load && engine_arch_is_host(out->arch))
        st = tsrd_engine_check_work(d, r, "a launch", tsr_ref_work(r), err);
    if (st == TSR_OK)
        st = tsr_region_fingerprint(r, &out->fingerprint, err);
    if (st != TSR_OK)
        return st;
    tsrd_engine_ctx ctx = {.d = d, .arch = out->arch};
    tsr_select_request req;
    tsrd_engine_select_request(&ctx, r, &out->fingerprint, opts, &req);
    double t0 = engine_now_ms();
    st = tsr_arbiter_select(d->arbiter, &req, &out->decision, err);
    double t1 = engine_now_ms();
    if (st == TSR_ARBITER && err != NULL && (ctx.refused || req.reference_refused != NULL)) {
        /* Nothing passed, and the bound refused what was left (a
         * verification, the host reference): say so, then every candidate. */
        char detail[TSR_ERROR_MESSAGE_MAX];
        snprintf(detail, sizeof detail, "%s", err->message);
        if (ctx.refused)
            tsr_error_set(err, TSR_RESOURCE_EXHAUSTED, "%s; %s", ctx.refusal.message, detail);
        else
            err->code = TSR_RESOURCE_EXHAUSTED;
        st = TSR_RESOURCE_EXHAUSTED;
    } else if (st != TSR_OK && ctx.refused && err != NULL) {
        /* A forced candidate's verification was refused by the bound. */
        *err = ctx.refusal;
        st = ctx.refusal.code;
    }
    /* A device backend's tier-0 reference also runs on the host at every
     * launch: a forced one is checked here (the arbiter never falls back to
     * one the bound refuses). */
    if (st == TSR_OK && load && !engine_arch_is_host(out->arch) &&
        out->decision.candidate.tier == 0)
        st = tsrd_engine_check_work(d, r, "a launch of the reference", tsr_ref_work(r), err);
    if (st == TSR_OK)
        st = engine_binary(d, r, &out->decision.candidate, out->arch, out, err);
    /* The fleet gets a kernel this node built only once it verified (a
     * verdict from the verdict cache counts; verification itself publishes
     * too), or when it is the reference, which verification is measured
     * against; never one chosen with verification skipped. */
    const tsr_decision *dec = &out->decision;
    if (st == TSR_OK && !dec->verify_skipped &&
        ((dec->verified && dec->verdict.pass) || dec->candidate.tier == 0))
        tsrd_fleet_publish(d->fleet, &out->key, out->blob);
    else
        tsrd_fleet_abandon(d->fleet, &out->key);
    double t2 = engine_now_ms();
    if (st == TSR_OK && load)
        st = engine_load_binary(d, r, &out->decision.candidate, out, err);
    tsrd_log_debug(&d->log, "compile %s: select %.2f ms, binary %.2f ms, load %.2f ms",
                   out->decision.candidate.name, t1 - t0, t2 - t1, engine_now_ms() - t2);
    if (st != TSR_OK)
        tsrd_compiled_release(d, out);
    return st;
}

void tsrd_compiled_release(tsrd_daemon *d, tsrd_compiled *c)
{
    if (c->kobj != NULL)
        d->bops->unload(d->backend, c->kobj);
    if (c->blob != NULL)
        tsr_kcache_blob_release(c->blob);
    c->kobj = NULL;
    c->blob = NULL;
}
