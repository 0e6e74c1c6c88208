/*
 * metrics.c — the daemon's counters and latency histograms, as StatsReply rows
 * and Prometheus text.
 *
 * A metric is named once, here, and appears in both forms: the StatsReply
 * counter is the Prometheus sample without the "tesserad_" prefix
 * ("requests_total{type=\"hello\",status=\"OK\"}"), so the two never disagree.
 * The one exception is the histogram buckets: StatsReply carries each request
 * type's request_duration_seconds_sum and _count, the Prometheus text also its
 * twenty-one _bucket samples, which would bury the other counters in a plain
 * `tessera-cli stats`.
 *
 * The text follows the exposition format 0.0.4: one HELP and one TYPE line per
 * family, before its samples; label values and HELP text escaped; numbers in
 * their shortest exact form.
 */
#include <nng/nng.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/metrics.h"
#include "serve/fleet.h"
#include "serve/tenant.h"

#include "serve/nvml.h"
#include "serve/ring.h"
#include "serve/scope.h"

/* Bucket bounds: from a cached hello (tens of microseconds) to a cold compile
 * of a large fused region (tens of seconds), about three per decade. The texts
 * are the "le" labels, written once so that they never depend on printf's
 * rounding. */
static const struct {
    uint64_t ns;
    const char *text;
} metrics_bounds[TSRD_LATENCY_BUCKETS] = {
    {50000, "0.00005"},  {100000, "0.0001"},  {250000, "0.00025"}, {500000, "0.0005"},
    {1000000, "0.001"},  {2500000, "0.0025"}, {5000000, "0.005"},  {10000000, "0.01"},
    {25000000, "0.025"}, {50000000, "0.05"},  {100000000, "0.1"},  {250000000, "0.25"},
    {500000000, "0.5"},  {1000000000, "1"},   {2500000000, "2.5"}, {5000000000, "5"},
    {10000000000, "10"}, {20000000000, "20"}, {30000000000, "30"}, {60000000000, "60"},
};

uint64_t tsrd_latency_bound_ns(int i)
{
    return i >= 0 && i < TSRD_LATENCY_BUCKETS ? metrics_bounds[i].ns : UINT64_MAX;
}

const char *tsrd_latency_bound_text(int i)
{
    return i >= 0 && i < TSRD_LATENCY_BUCKETS ? metrics_bounds[i].text : "+Inf";
}

void tsrd_latency_observe(tsrd_latency *h, uint64_t elapsed_ns)
{
    /* Prometheus buckets are "less than or equal": a bound belongs to its own
     * bucket. Twenty rows: a linear scan is as fast as anything cleverer. */
    int i = 0;
    while (i < TSRD_LATENCY_BUCKETS && elapsed_ns > metrics_bounds[i].ns)
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum_ns += elapsed_ns;
}

void tsrd_metrics_count(tsrd_daemon *d, int body_case, tsr_status status)
{
    if (body_case < 0 || body_case >= TSRD_BODY_CASES)
        body_case = 0;
    if ((unsigned)status >= TSR_STATUS_COUNT)
        status = TSR_INTERNAL;
    d->metrics.requests[body_case][status]++;
}

void tsrd_metrics_record(tsrd_daemon *d, int body_case, tsr_status status, uint64_t elapsed_ns)
{
    if (body_case < 0 || body_case >= TSRD_BODY_CASES)
        body_case = 0;
    tsrd_metrics_count(d, body_case, status);
    tsrd_latency_observe(&d->metrics.latency[body_case], elapsed_ns);
}

/* ---- rows: one per sample ---- */

/* Room for the longest sample name: a family, and label values that may be
 * escaped to twice their length (tenant names, candidate names). */
#define METRICS_NAME_MAX 384

typedef struct metrics_row {
    char name[METRICS_NAME_MAX]; /* sample name with labels, without the prefix */
    const char *family;          /* starts a family (HELP, TYPE); NULL continues one */
    const char *type;            /* "counter", "gauge" or "histogram" */
    const char *help;
    double value;
    bool text_only; /* a histogram bucket: Prometheus text only */
} metrics_row;

typedef struct metrics_list {
    metrics_row *rows;
    size_t n, cap;
    bool failed;
} metrics_list;

static metrics_row *metrics_add(metrics_list *l, const char *family, const char *type,
                                const char *help, double value)
{
    if (l->failed)
        return NULL;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        metrics_row *rows = realloc(l->rows, cap * sizeof *rows);
        if (rows == NULL) {
            l->failed = true;
            return NULL;
        }
        l->rows = rows;
        l->cap = cap;
    }
    metrics_row *row = &l->rows[l->n++];
    memset(row, 0, sizeof *row);
    row->family = family;
    row->type = type;
    row->help = help;
    row->value = value;
    return row;
}

static void metrics_plain(metrics_list *l, const char *name, const char *type, const char *help,
                          double value)
{
    metrics_row *row = metrics_add(l, name, type, help, value);
    if (row != NULL)
        snprintf(row->name, sizeof row->name, "%s", name);
}

/* A label value as the exposition format wants it: backslash, double quote
 * and newline escaped. out holds at least 2 * strlen(in) + 1 bytes or the value
 * is cut, never in the middle of an escape. */
static void metrics_escape(char *out, size_t cap, const char *in)
{
    size_t n = 0;
    for (; *in != '\0'; in++) {
        const char *rep = *in == '\\' ? "\\\\" : *in == '"' ? "\\\"" : *in == '\n' ? "\\n" : NULL;
        size_t need = rep != NULL ? 2 : 1;
        if (n + need + 1 > cap)
            break;
        if (rep != NULL)
            memcpy(out + n, rep, 2);
        else
            out[n] = *in;
        n += need;
    }
    out[n] = '\0';
}

static const char *metrics_type_name(int body_case)
{
    return body_case == 0 ? "none" : tsrd_body_name(body_case);
}

/* Body cases the daemon names: 0 ("none") and those with a handler. */
static bool metrics_type_known(int body_case)
{
    return body_case == 0 || tsrd_body_known(body_case);
}

static void metrics_requests(tsrd_daemon *d, metrics_list *l)
{
    const char *family = "requests_total";
    for (int c = 0; c < TSRD_BODY_CASES; c++) {
        for (int s = 0; s < TSR_STATUS_COUNT; s++) {
            uint64_t v = d->metrics.requests[c][s];
            if (v == 0 || !metrics_type_known(c))
                continue;
            metrics_row *row = metrics_add(
                l, family, "counter", "Requests answered, by request type and status.", (double)v);
            if (row != NULL)
                snprintf(row->name, sizeof row->name, "requests_total{type=\"%s\",status=\"%s\"}",
                         metrics_type_name(c), tsr_status_name((tsr_status)s));
            family = NULL;
        }
    }
}

/* One histogram: per-bucket counts buckets[0..n] (the last +Inf) whose
 * bounds' texts le_of gives, as cumulative _bucket rows, _sum and _count.
 * labels is "" or 'type="x",'; family names the first row's family (NULL when
 * an earlier histogram of the same family was written). False when a row
 * could not be added. */
static bool metrics_histogram(metrics_list *l, const char *name, const char *family,
                              const char *help, const char *labels, const uint64_t *buckets, int n,
                              const char *(*le_of)(int i), uint64_t count, double sum_s)
{
    uint64_t cumulative = 0;
    for (int i = 0; i <= n; i++) {
        cumulative += buckets[i];
        metrics_row *row = metrics_add(l, family, "histogram", help, (double)cumulative);
        if (row == NULL)
            return false;
        snprintf(row->name, sizeof row->name, "%s_bucket{%sle=\"%s\"}", name, labels, le_of(i));
        row->text_only = true;
        family = NULL;
    }
    size_t bare = strlen(labels) > 0 ? strlen(labels) - 1 : 0; /* without the last comma */
    metrics_row *sum = metrics_add(l, NULL, "histogram", help, sum_s);
    if (sum != NULL)
        snprintf(sum->name, sizeof sum->name, "%s_sum%s%.*s%s", name, bare ? "{" : "", (int)bare,
                 labels, bare ? "}" : "");
    metrics_row *cnt = metrics_add(l, NULL, "histogram", help, (double)count);
    if (cnt != NULL)
        snprintf(cnt->name, sizeof cnt->name, "%s_count%s%.*s%s", name, bare ? "{" : "", (int)bare,
                 labels, bare ? "}" : "");
    return sum != NULL && cnt != NULL;
}

/* One histogram per request type that has been answered at least once. */
static void metrics_latency(tsrd_daemon *d, metrics_list *l)
{
    const char *family = "request_duration_seconds";
    const char *help = "Time from a request's arrival to its reply, by request type.";
    for (int c = 0; c < TSRD_BODY_CASES; c++) {
        const tsrd_latency *h = &d->metrics.latency[c];
        if (h->count == 0 || !metrics_type_known(c))
            continue;
        char labels[64];
        snprintf(labels, sizeof labels, "type=\"%s\",", metrics_type_name(c));
        if (!metrics_histogram(l, "request_duration_seconds", family, help, labels, h->buckets,
                               TSRD_LATENCY_BUCKETS, tsrd_latency_bound_text, h->count,
                               (double)h->sum_ns / 1e9))
            return;
        family = NULL;
    }
}

static const char *metrics_fleet_le(int i)
{
    static const char *const texts[TSRD_FLEET_LATENCY_BUCKETS + 1] = {
        "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
        "0.1",   "0.25",   "0.5",     "1",      "2.5",   "5",      "7.5",   "10",   "+Inf",
    };
    return texts[i];
}

/* The fleet cache's counters, its degraded mark and its lookups' latency;
 * nothing without one. */
static void metrics_fleet(tsrd_daemon *d, metrics_list *l)
{
#define FLEET_ROW(name, help, field)                                                               \
    {                                                                                              \
        name, help, offsetof(tsrd_fleet_stats, field)                                              \
    }
    static const struct {
        const char *name, *help;
        size_t offset;
    } rows[] = {
        FLEET_ROW("fleet_cache_hits_total", "Fleet cache entries fetched, checked and used.", hits),
        FLEET_ROW("fleet_cache_misses_total", "Fleet cache lookups without a usable entry.",
                  misses),
        FLEET_ROW("fleet_cache_rejected_total",
                  "Fleet cache entries refused (MAC, format, key or names).", rejected),
        FLEET_ROW("fleet_cache_errors_total", "Redis commands and connects that failed.", errors),
        FLEET_ROW("fleet_cache_skipped_total",
                  "Lookups and publishes not tried for a second after a failure.", skipped),
        FLEET_ROW("fleet_cache_lease_waits_total", "Lookups that waited on another node's build.",
                  lease_waits),
        FLEET_ROW("fleet_cache_lease_timeouts_total",
                  "Waits that ended with neither entry nor lease.", lease_timeouts),
        FLEET_ROW("fleet_cache_publishes_total", "Entries written to the fleet cache.", publishes),
        FLEET_ROW("fleet_cache_publish_errors_total", "Entries that could not be written.",
                  publish_errors),
        FLEET_ROW("fleet_cache_publish_skipped_size_total",
                  "Entries over max_entry_bytes, not written.", publish_skipped_size),
        FLEET_ROW("fleet_cache_winner_hits_total",
                  "Measured winners fetched from the fleet cache and handed to the arbiter.",
                  winner_hits),
        FLEET_ROW("fleet_cache_winner_publishes_total",
                  "Measured winners written to the fleet cache.", winner_publishes),
        FLEET_ROW("fleet_cache_verdict_hits_total",
                  "Verdicts of complete verifications fetched from the fleet cache and used "
                  "instead of verifying.",
                  verdict_hits),
        FLEET_ROW("fleet_cache_verdict_publishes_total",
                  "Verdicts of complete verifications written to the fleet cache.",
                  verdict_publishes),
    };
#undef FLEET_ROW
    if (d->fleet == NULL)
        return;
    tsrd_fleet_stats fs;
    tsrd_fleet_get_stats(d->fleet, &fs);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&fs + rows[i].offset, sizeof v);
        metrics_plain(l, rows[i].name, "counter", rows[i].help, (double)v);
    }
    metrics_plain(l, "fleet_cache_degraded", "gauge",
                  "1 while the last Redis command failed (the daemon serves from its own caches).",
                  fs.degraded ? 1.0 : 0.0);
    metrics_histogram(l, "fleet_cache_lookup_seconds", "fleet_cache_lookup_seconds",
                      "Fleet cache lookups' time, waits on another node's build included.", "",
                      fs.latency_buckets, TSRD_FLEET_LATENCY_BUCKETS, metrics_fleet_le,
                      fs.latency_count, (double)fs.latency_sum_ns / 1e9);
}

/* The kernel cache's counters and gauges, one row per field of its stats. */
static void metrics_cache(tsrd_daemon *d, metrics_list *l)
{
#define KCACHE_ROW(name, type, help, field)                                                        \
    {                                                                                              \
        name, type, help, offsetof(tsr_kcache_stats, field)                                        \
    }
    static const struct {
        const char *name, *type, *help;
        size_t offset;
    } rows[] = {
        KCACHE_ROW("kcache_memory_hits_total", "counter", "Kernel cache hits in memory.",
                   memory_hits),
        KCACHE_ROW("kcache_disk_hits_total", "counter", "Kernel cache hits on disk.", disk_hits),
        KCACHE_ROW("kcache_fleet_hits_total", "counter",
                   "Kernel cache entries from the fleet cache.", fleet_hits),
        KCACHE_ROW("kcache_shared_waits_total", "counter", "Waits on another request's build.",
                   shared_waits),
        KCACHE_ROW("kcache_misses_total", "counter", "Kernel cache misses.", misses),
        KCACHE_ROW("kcache_builds_total", "counter", "Kernel builds.", builds),
        KCACHE_ROW("kcache_build_failures_total", "counter", "Kernel builds that failed.",
                   build_failures),
        KCACHE_ROW("kcache_memory_evictions_total", "counter", "Entries evicted from memory.",
                   memory_evictions),
        KCACHE_ROW("kcache_disk_evictions_total", "counter", "Entries evicted from disk.",
                   disk_evictions),
        KCACHE_ROW("kcache_corrupt_discarded_total", "counter", "Disk entries failing their check.",
                   corrupt_discarded),
        KCACHE_ROW("kcache_auth_failures_total", "counter",
                   "Disk entries discarded for a MAC that does not verify (or none).",
                   auth_failures),
        KCACHE_ROW("kcache_disk_write_failures_total", "counter", "Disk writes that failed.",
                   disk_write_failures),
        KCACHE_ROW("kcache_memory_bytes", "gauge", "Bytes held in memory.", memory_bytes),
        KCACHE_ROW("kcache_disk_bytes", "gauge", "Bytes held on disk.", disk_bytes),
        KCACHE_ROW("kcache_memory_entries", "gauge", "Entries in memory.", memory_entries),
        KCACHE_ROW("kcache_disk_entries", "gauge", "Entries on disk.", disk_entries),
    };
#undef KCACHE_ROW
    tsr_kcache_stats cs;
    tsr_kcache_get_stats(d->kcache, &cs);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&cs + rows[i].offset, sizeof v);
        metrics_plain(l, rows[i].name, rows[i].type, rows[i].help, (double)v);
    }
}

/* One family per quantity, one sample per tenant ({tenant="name"}); only
 * viewer's when it is not NULL. */
static void metrics_tenants(tsrd_daemon *d, metrics_list *l, const tsrd_tenant *viewer)
{
    static const struct {
        const char *family, *type, *help;
    } fams[] = {
        {"tenant_buffers", "gauge", "Live buffers per tenant."},
        {"tenant_buffer_bytes", "gauge", "Device memory in live buffers per tenant."},
        {"tenant_kernels", "gauge", "Live kernel handles per tenant."},
        {"tenant_inflight_requests", "gauge", "Requests admitted and not yet answered."},
        {"tenant_compiles", "gauge",
         "Compile-class requests (compile, run, verify, candidates) admitted and not yet "
         "answered."},
        {"tenant_queued_jobs", "gauge", "Heavy jobs waiting for a worker, per tenant."},
        {"tenant_quota_refusals_total", "counter", "Requests refused RESOURCE_EXHAUSTED."},
        {"tenant_replay_bytes", "gauge",
         "Bytes of stored replies kept for resends, over the tenant's connections."},
        {"tenant_replay_evictions_total", "counter",
         "Stored replies dropped to keep within the replay budgets."},
        {"tenant_replay_quota_bytes", "gauge",
         "The most bytes of stored replies kept over the tenant's connections (its "
         "replay_bytes quota, else replay_bytes_per_tenant)."},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        const char *family = fams[f].family;
        for (tsrd_tenant *t = d->tenants != NULL ? d->tenants : &d->default_tenant; t != NULL;
             t = t == &d->default_tenant ? NULL : t->next) {
            if (viewer != NULL && t != viewer)
                continue;
            uint64_t queued = 0;
            for (tsrd_job *j = t->work_head; j != NULL; j = j->work_next)
                queued++;
            const uint64_t v[] = {t->buffers,          t->buffer_bytes,
                                  t->kernels,          t->in_flight,
                                  t->compiles,         queued,
                                  t->refused_quota,    t->replay.bytes,
                                  t->replay.evictions, tsrd_tenant_replay_budget(d, t)};
            metrics_row *row = metrics_add(l, family, fams[f].type, fams[f].help, (double)v[f]);
            if (row == NULL)
                return;
            char name[2 * TSRD_TENANT_NAME_MAX];
            metrics_escape(name, sizeof name, t->name);
            snprintf(row->name, sizeof row->name, "%s{tenant=\"%s\"}", fams[f].family, name);
            family = NULL;
        }
    }
}

/* What is running: a constant 1 whose labels say it (the Prometheus idiom). */
static void metrics_build_info(tsrd_daemon *d, metrics_list *l)
{
    metrics_row *row = metrics_add(l, "build_info", "gauge",
                                   "The daemon's version, protocol, transport and backend.", 1.0);
    if (row != NULL)
        snprintf(row->name, sizeof row->name,
                 "build_info{version=\"%s\",protocol=\"%d\",nng=\"%s\",backend=\"%s\"}",
                 TSRD_VERSION, TSRD_PROTOCOL_VERSION, nng_version(), d->bops->name);
}

/* One sample per GPU of each family ({gpu="index"}), read from NVML now; a
 * reading NVML cannot give (ECC off, say) is left out rather than shown as 0. */
static void metrics_gpus(tsrd_daemon *d, metrics_list *l)
{
    /* One row per tsrd_gpu_gauge, in its order. */
    static const struct {
        const char *family, *type, *help;
    } fams[TSRD_GPU_GAUGES] = {
        {"gpu_memory_total_bytes", "gauge", "Device memory of the GPU."},
        {"gpu_memory_used_bytes", "gauge", "Device memory in use, by every process."},
        {"gpu_utilization_ratio", "gauge", "Share of the last sample period a kernel ran."},
        {"gpu_memory_utilization_ratio", "gauge",
         "Share of the last sample period device memory was read or written."},
        {"gpu_temperature_celsius", "gauge", "GPU core temperature."},
        {"gpu_ecc_uncorrected_errors_total", "counter",
         "Uncorrected ECC errors since the driver loaded."},
    };
    int n = tsrd_nvml_count(d->nvml);
    if (n == 0)
        return;
    tsrd_gpu_sample *samples = calloc((size_t)n, sizeof *samples);
    if (samples == NULL) {
        l->failed = true;
        return;
    }
    for (int g = 0; g < n; g++)
        tsrd_nvml_sample(d->nvml, g, &samples[g]);
    for (int f = 0; f < TSRD_GPU_GAUGES; f++) {
        const char *family = fams[f].family;
        for (int g = 0; g < n; g++) {
            if (!samples[g].has[f])
                continue;
            metrics_row *row =
                metrics_add(l, family, fams[f].type, fams[f].help, samples[g].value[f]);
            if (row != NULL)
                snprintf(row->name, sizeof row->name, "%s{gpu=\"%d\"}", fams[f].family, g);
            family = NULL;
        }
    }
    free(samples);
}

/* One sample per device of each family ({device="index"}): the load placement
 * weighs (serve/devices.h), which info shows every tenant too, and each
 * device's recovery state and count. */
static void metrics_devices(tsrd_daemon *d, metrics_list *l)
{
    static const struct {
        const char *family, *type, *help;
    } fams[] = {
        {"device_queue_depth", "gauge", "Requests bound to the device, queued or running."},
        {"device_buffers", "gauge", "Live buffers on the device."},
        {"device_buffer_bytes", "gauge", "Bytes of live buffers on the device."},
        {"device_memory_bytes", "gauge", "Memory of the device."},
        {"device_state", "gauge",
         "0 serving, 1 recovering after a fault, 2 lost (every rebuild failed)."},
        {"device_recoveries_per_device_total", "counter",
         "Recoveries that rebuilt this device (a node-wide one rebuilds every device)."},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        const char *family = fams[f].family;
        for (int i = 0; i < d->n_devices; i++) {
            const uint64_t v[] = {d->load[i].queued,
                                  d->load[i].buffers,
                                  d->load[i].bytes,
                                  d->devices[i].memory_bytes,
                                  (uint64_t)tsrd_device_state_of(d, i),
                                  d->devrec[i].recoveries};
            metrics_row *row = metrics_add(l, family, fams[f].type, fams[f].help, (double)v[f]);
            if (row == NULL)
                return;
            snprintf(row->name, sizeof row->name, "%s{device=\"%d\"}", fams[f].family, i);
            family = NULL;
        }
    }
}

/* The probe inputs sampled checks keep between shapes: node-wide, like the
 * kernel cache's rows, and shown only to callers who see everything (a
 * tenant would learn from them that another verified shapes). */
static void metrics_oracle_memo(tsrd_daemon *d, metrics_list *l)
{
    tsr_oracle_memo_counts m;
    tsr_oracle_memo_stats(d->oracle_memo, &m);
    const struct {
        const char *name, *type, *help;
        double value;
    } rows[] = {
        {"oracle_memo_bytes", "gauge",
         "Host bytes of probe inputs kept between sampled checks (oracle_memo_bytes).",
         (double)m.bytes},
        {"oracle_memo_hits_total", "counter",
         "Whole probe inputs a sampled check took from the memo instead of making them.",
         (double)m.hits},
        {"oracle_memo_misses_total", "counter",
         "Whole probe inputs a sampled check made (a product's weights kept at once, other "
         "inputs from their second request on).",
         (double)m.misses},
        {"oracle_memo_evictions_total", "counter",
         "Probe inputs dropped from the memo to keep it within oracle_memo_bytes.",
         (double)m.evictions},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        metrics_plain(l, rows[i].name, rows[i].type, rows[i].help, rows[i].value);
}

/* viewer NULL: everything. Otherwise what that tenant may see: the service's
 * own figures, and of the objects and queues only its own; not the kernel
 * cache's counters (a hit there would tell that another tenant compiled the
 * region, which the compile's reply does not) nor other tenants' rows. */
static void metrics_collect(tsrd_daemon *d, metrics_list *l, const tsrd_tenant *viewer)
{
    tsrd_tenant all = viewer != NULL ? *viewer : d->default_tenant;
    uint64_t queued = 0;
    for (tsrd_tenant *t = d->tenants; viewer == NULL && t != NULL; t = t->next) {
        all.buffers += t->buffers;
        all.buffer_bytes += t->buffer_bytes;
        all.kernels += t->kernels;
        all.replay.bytes += t->replay.bytes;
    }
    for (tsrd_tenant *t = d->ready_head; t != NULL; t = t->ready_next)
        for (tsrd_job *j = t->work_head; j != NULL && (viewer == NULL || t == viewer);
             j = j->work_next)
            queued++;
    metrics_build_info(d, l);
    metrics_requests(d, l);
    metrics_latency(d, l);
    /* The daemon's own figures, one row each. */
    const struct {
        const char *name, *type, *help;
        double value;
    } plain[] = {
        {"replays_total", "counter", "Requests answered from the request-id memory.",
         (double)d->metrics.replays},
        {"verifications_total", "counter",
         "Verifications this node ran (complete, and sampled checks of a new shape); verdicts "
         "from the verdict cache or the fleet cache not counted.",
         (double)tsr_arbiter_verifications(d->arbiter)},
        {"rings", "gauge", "Submission rings open.", (double)d->rings_open},
        {"ring_launches_total", "counter",
         "Slots served by submission rings that stopped, failed ones included.",
         (double)d->ring_launches_closed},
        {"ring_groups_total", "counter",
         "Backend calls (one launch_many and one synchronize each) in which submission rings "
         "that stopped served their launches: launches found waiting together go in one.",
         (double)d->ring_groups_closed},
        {"job_yields_total", "counter",
         "Times a long job (a batch) gave its worker to other tenants' work midway.",
         (double)d->metrics.job_yields},
        {"requests_decoded_off_loop_total", "counter",
         "Request bodies over 4 KiB, checked and decoded on the worker pool.",
         (double)d->metrics.decoded_off_loop},
        {"requests_inline_total", "counter",
         "Short stream jobs (launches of kernels measured short) executed on the loop (host "
         "backends only), their session's stream idle and no other device work running.",
         (double)d->metrics.inline_jobs},
        {"launches_fused_total", "counter",
         "Launches (launch and run requests, a batch's uncaptured chunks) made and "
         "synchronized in one backend call: one "
         "round trip to the device worker instead of two on the isolated backends.",
         (double)d->metrics.launches_fused},
        {"replay_bytes", "gauge", "Bytes of stored replies kept for resends.",
         (double)all.replay.bytes},
        {"sessions", "gauge", "Open sessions (connections).", (double)d->n_sessions},
        {"connections", "gauge",
         "Connections open (nng pipes), the daemon's own probes not counted.",
         (double)d->metrics.connections},
        {"connections_refused_total", "counter",
         "Connections closed as they came, past max_connections.",
         (double)d->metrics.connections_refused},
        {"connections_closed_unread_total", "counter",
         "Connections closed for replies they left unread.",
         (double)d->metrics.connections_closed_unread},
        {"requests_refused_connection_total", "counter",
         "Requests refused past max_requests_per_connection.",
         (double)d->metrics.requests_refused_connection},
        {"server_contexts", "gauge", "nng contexts open (receiving, serving a request, or idle).",
         (double)d->metrics.contexts},
        {"sessions_opened_total", "counter", "Sessions ever opened.",
         (double)d->metrics.sessions_opened},
        {"inflight_requests", "gauge", "Requests being executed.", (double)d->inflight},
        {"buffers", "gauge", "Live buffers.", (double)all.buffers},
        {"buffer_bytes", "gauge", "Bytes in live buffers.", (double)all.buffer_bytes},
        {"kernels", "gauge", "Live kernel handles.", (double)all.kernels},
        {"work_queued", "gauge", "Heavy jobs (compiles, launches, copies) waiting for a worker.",
         (double)queued},
        {"work_running", "gauge", "Jobs on the worker pool.", (double)d->work_running},
        /* The same default as the dispatch pump's. */
        {"work_slots", "gauge", "Jobs the worker pool runs at once, at most.",
         (double)(d->work_slots > 0 ? d->work_slots : 4)},
        {"recovering", "gauge",
         "1 while no device serves (the device context is being rebuilt); device_state says "
         "which devices recover.",
         tsrd_daemon_serves(d) ? 0.0 : 1.0},
        {"device_recoveries_total", "counter", "Device context rebuilds.", (double)d->recoveries},
        {"device_faults_total", "counter", "Sticky device faults noticed (each starts a recovery).",
         (double)d->device_faults},
        {"device_buffers_lost_total", "counter", "Buffer handles whose device memory a fault took.",
         (double)d->buffers_lost},
        {"device_recovery_last_seconds", "gauge",
         "Fault noticed to serving again, in the last recovery.",
         (double)d->recovery_last_ms / 1e3},
        {"received_bytes_total", "counter", "Request bytes received.", (double)d->metrics.bytes_in},
        {"sent_bytes_total", "counter", "Reply bytes sent.", (double)d->metrics.bytes_out},
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        metrics_plain(l, plain[i].name, plain[i].type, plain[i].help, plain[i].value);
    if (viewer == NULL) {
        metrics_cache(d, l);
        metrics_oracle_memo(d, l);
        metrics_fleet(d, l);
        metrics_gpus(d, l);
    }
    metrics_devices(d, l);
    metrics_tenants(d, l, viewer);
}

static void metrics_candidate_rows(metrics_list *l, const tsr_candidate_stats *rows, size_t n)
{
    static const char *const families[] = {
        "candidate_won_total", "candidate_forced_total", "candidate_declined_total",
        "candidate_failed_verification_total", "candidate_unverified_total"};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        for (size_t i = 0; i < n; i++) {
            const uint64_t values[] = {rows[i].won, rows[i].forced, rows[i].declined,
                                       rows[i].failed_verification, rows[i].unverified};
            metrics_row *row = metrics_add(l, i == 0 ? families[f] : NULL, "counter",
                                           "Arbiter outcomes per candidate.", (double)values[f]);
            if (row == NULL)
                return;
            char name[2 * TSR_CANDIDATE_NAME_MAX];
            metrics_escape(name, sizeof name, rows[i].name);
            snprintf(row->name, sizeof row->name, "%s{kind=\"%s\",name=\"%s\"}", families[f],
                     tsr_region_kind_name(rows[i].kind), name);
        }
    }
}

/* ---- the text ---- */

typedef struct metrics_text {
    char *buf;
    size_t len, cap;
    bool failed;
} metrics_text;

static void metrics_printf(metrics_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void metrics_printf(metrics_text *t, const char *fmt, ...)
{
    for (int attempt = 0; !t->failed && attempt < 2; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 > t->len + (size_t)n + 1 ? t->cap * 2 : t->len + (size_t)n + 1;
        char *buf = realloc(t->buf, cap);
        if (buf == NULL) {
            t->failed = true;
            return;
        }
        t->buf = buf;
        t->cap = cap;
    }
}

/* The shortest text that reads back as the same double, as Prometheus'
 * own clients write values ("3", "0.00125", not "0.0012500000000000000"). */
static void metrics_number(char *out, size_t cap, double v)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* HELP text escapes backslash and newline (quotes stay). */
static void metrics_help(metrics_text *t, const char *help)
{
    for (; *help != '\0'; help++) {
        if (*help == '\\')
            metrics_printf(t, "\\\\");
        else if (*help == '\n')
            metrics_printf(t, "\\n");
        else
            metrics_printf(t, "%c", *help);
    }
}

static char *metrics_text_of(const metrics_list *l, size_t *len)
{
    metrics_text t = {.cap = 4096 + l->n * 96};
    t.buf = malloc(t.cap);
    if (t.buf == NULL)
        return NULL;
    t.buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        const metrics_row *row = &l->rows[i];
        if (row->family != NULL) {
            metrics_printf(&t, "# HELP tesserad_%s ", row->family);
            metrics_help(&t, row->help);
            metrics_printf(&t, "\n# TYPE tesserad_%s %s\n", row->family, row->type);
        }
        char value[40];
        metrics_number(value, sizeof value, row->value);
        metrics_printf(&t, "tesserad_%s %s\n", row->name, value);
    }
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    *len = t.len;
    return t.buf;
}

/* Every row viewer may see (NULL: all), the candidates' last; *n_plain of them
 * come before those. The arbiter's outcomes count every tenant's selections:
 * a viewer gets none. */
static tsr_status metrics_gather(tsrd_daemon *d, metrics_list *l, bool candidates,
                                 const tsrd_tenant *viewer, tsr_candidate_stats **cand,
                                 size_t *n_cand, size_t *n_plain, tsr_error *err)
{
    metrics_collect(d, l, viewer);
    *n_plain = l->n;
    tsr_status st = viewer != NULL ? TSR_OK : tsr_arbiter_stats(d->arbiter, cand, n_cand, err);
    if (st == TSR_OK && candidates)
        metrics_candidate_rows(l, *cand, *n_cand);
    if (st == TSR_OK && l->failed)
        st = tsr_error_set(err, TSR_NO_MEMORY, "stats: out of memory");
    return st;
}

tsr_status tsrd_metrics_render(tsrd_daemon *d, char **text, size_t *len, tsr_error *err)
{
    metrics_list l = {0};
    tsr_candidate_stats *cand = NULL;
    size_t n_cand = 0, n_plain = 0;
    *text = NULL;
    *len = 0;
    tsr_status st = metrics_gather(d, &l, true, NULL, &cand, &n_cand, &n_plain, err);
    if (st == TSR_OK && (*text = metrics_text_of(&l, len)) == NULL)
        st = tsr_error_set(err, TSR_NO_MEMORY, "metrics: out of memory");
    free(cand);
    free(l.rows);
    return st;
}

tsr_status tsrd_metrics_fill(tsrd_daemon *d, tsrd_job *job, Tessera__V1__StatsReply *out,
                             bool prometheus)
{
    metrics_list l = {0};
    tsr_candidate_stats *cand = NULL;
    size_t n_cand = 0, n_plain = 0;
    const tsrd_tenant *caller = job->session != NULL ? job->session->tenant : NULL;
    const tsrd_tenant *viewer = tsrd_scope_sees_all(d, caller) ? NULL : caller;
    tsr_status st = metrics_gather(d, &l, prometheus, viewer, &cand, &n_cand, &n_plain, &job->err);
    size_t n_counters = 0;
    for (size_t i = 0; i < n_plain; i++)
        n_counters += l.rows[i].text_only ? 0 : 1;
    out->n_counters = 0;
    out->counters = st == TSR_OK ? tsrd_job_alloc(job, n_counters * sizeof *out->counters) : NULL;
    for (size_t i = 0; st == TSR_OK && i < n_plain; i++) {
        if (l.rows[i].text_only)
            continue;
        Tessera__V1__Counter *c = tsrd_job_alloc(job, sizeof *c);
        char *name = tsrd_job_strdup(job, l.rows[i].name);
        if (c == NULL || name == NULL || out->counters == NULL) {
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "stats: out of memory");
            break;
        }
        Tessera__V1__Counter init = TESSERA__V1__COUNTER__INIT;
        *c = init;
        c->name = name;
        c->value = l.rows[i].value;
        out->counters[out->n_counters++] = c;
    }
    out->n_candidates = n_cand;
    out->candidates = st == TSR_OK ? tsrd_job_alloc(job, n_cand * sizeof *out->candidates) : NULL;
    for (size_t i = 0; st == TSR_OK && i < n_cand; i++) {
        Tessera__V1__CandidateStats *c = tsrd_job_alloc(job, sizeof *c);
        char *name = tsrd_job_strdup(job, cand[i].name);
        if (c == NULL || name == NULL || out->candidates == NULL) {
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "stats: out of memory");
            break;
        }
        Tessera__V1__CandidateStats init = TESSERA__V1__CANDIDATE_STATS__INIT;
        *c = init;
        c->kind = (char *)tsr_region_kind_name(cand[i].kind);
        c->name = name;
        c->won = cand[i].won;
        c->forced = cand[i].forced;
        c->declined = cand[i].declined;
        c->failed_verification = cand[i].failed_verification;
        c->unverified = cand[i].unverified;
        out->candidates[i] = c;
    }
    if (st == TSR_OK && prometheus) {
        size_t len = 0;
        char *text = metrics_text_of(&l, &len);
        out->prometheus_text = text != NULL ? tsrd_job_alloc(job, len + 1) : NULL;
        if (out->prometheus_text != NULL)
            memcpy(out->prometheus_text, text, len + 1);
        else
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "stats: out of memory");
        free(text);
    }
    if (st != TSR_OK) {
        out->n_counters = 0;
        out->n_candidates = 0;
    }
    free(cand);
    free(l.rows);
    return st;
}
