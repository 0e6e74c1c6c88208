/*
 * metrics.c — the daemon's counters, as StatsReply rows and Prometheus text.
 *
 * A metric is named once, here, and appears in both forms: the StatsReply
 * counter is the Prometheus sample without the "tesserad_" prefix
 * ("requests_total{type=\"hello\",status=\"OK\"}"), so the two never disagree.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

void tsrd_metrics_count(tsrd_daemon *d, int body_case, tsr_status status)
{
    if (body_case < 0 || body_case >= TSRD_BODY_CASES)
        body_case = 0;
    if ((unsigned)status >= TSR_STATUS_COUNT)
        status = TSR_INTERNAL;
    d->metrics.requests[body_case][status]++;
}

typedef struct metrics_row {
    char name[160];     /* sample name with labels, without the prefix */
    const char *family; /* for the # TYPE line; NULL continues the previous family */
    const char *type;   /* "counter" or "gauge" */
    const char *help;
    double value;
} metrics_row;

typedef struct metrics_list {
    metrics_row *rows;
    size_t n, cap;
    bool failed;
} metrics_list;

static metrics_row *metrics_add(metrics_list *l, const char *family, const char *type,
                                const char *help, double value)
{
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

static void metrics_requests(tsrd_daemon *d, metrics_list *l)
{
    const char *family = "requests_total";
    for (int c = 0; c < TSRD_BODY_CASES; c++) {
        for (int s = 0; s < TSR_STATUS_COUNT; s++) {
            uint64_t v = d->metrics.requests[c][s];
            if (v == 0 || (c != 0 && tsrd_handler_find(c) == NULL))
                continue;
            metrics_row *row = metrics_add(
                l, family, "counter", "Requests answered, by request type and status.", (double)v);
            if (row != NULL)
                snprintf(row->name, sizeof row->name, "requests_total{type=\"%s\",status=\"%s\"}",
                         c == 0 ? "none" : tsrd_body_name(c), tsr_status_name((tsr_status)s));
            family = NULL;
        }
    }
}

static void metrics_cache(tsrd_daemon *d, metrics_list *l)
{
    tsr_kcache_stats cs;
    tsr_kcache_get_stats(d->kcache, &cs);
    static const char *ctr = "counter", *gauge = "gauge";
    metrics_plain(l, "kcache_memory_hits_total", ctr, "Kernel cache hits in memory.",
                  (double)cs.memory_hits);
    metrics_plain(l, "kcache_disk_hits_total", ctr, "Kernel cache hits on disk.",
                  (double)cs.disk_hits);
    metrics_plain(l, "kcache_shared_waits_total", ctr, "Waits on another request's build.",
                  (double)cs.shared_waits);
    metrics_plain(l, "kcache_misses_total", ctr, "Kernel cache misses.", (double)cs.misses);
    metrics_plain(l, "kcache_builds_total", ctr, "Kernel builds.", (double)cs.builds);
    metrics_plain(l, "kcache_build_failures_total", ctr, "Kernel builds that failed.",
                  (double)cs.build_failures);
    metrics_plain(l, "kcache_memory_evictions_total", ctr, "Entries evicted from memory.",
                  (double)cs.memory_evictions);
    metrics_plain(l, "kcache_disk_evictions_total", ctr, "Entries evicted from disk.",
                  (double)cs.disk_evictions);
    metrics_plain(l, "kcache_corrupt_discarded_total", ctr, "Disk entries failing their check.",
                  (double)cs.corrupt_discarded);
    metrics_plain(l, "kcache_disk_write_failures_total", ctr, "Disk writes that failed.",
                  (double)cs.disk_write_failures);
    metrics_plain(l, "kcache_memory_bytes", gauge, "Bytes held in memory.",
                  (double)cs.memory_bytes);
    metrics_plain(l, "kcache_disk_bytes", gauge, "Bytes held on disk.", (double)cs.disk_bytes);
    metrics_plain(l, "kcache_memory_entries", gauge, "Entries in memory.",
                  (double)cs.memory_entries);
    metrics_plain(l, "kcache_disk_entries", gauge, "Entries on disk.", (double)cs.disk_entries);
}

/* One family per quantity, one sample per tenant ({tenant="name"}). */
static void metrics_tenants(tsrd_daemon *d, metrics_list *l)
{
    static const struct {
        const char *family, *type, *help;
    } fams[] = {
        {"tenant_buffers", "gauge", "Live buffers per tenant."},
        {"tenant_buffer_bytes", "gauge", "Device memory in live buffers per tenant."},
        {"tenant_kernels", "gauge", "Live kernel handles per tenant."},
        {"tenant_inflight_requests", "gauge", "Requests admitted and not yet answered."},
        {"tenant_queued_jobs", "gauge", "Heavy jobs waiting for a worker, per tenant."},
        {"tenant_quota_refusals_total", "counter", "Requests refused RESOURCE_EXHAUSTED."},
    };
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        const char *family = fams[f].family;
        for (tsrd_tenant *t = d->tenants != NULL ? d->tenants : &d->default_tenant; t != NULL;
             t = t == &d->default_tenant ? NULL : t->next) {
            uint64_t queued = 0;
            for (tsrd_job *j = t->work_head; j != NULL; j = j->work_next)
                queued++;
            const uint64_t v[] = {t->buffers,   t->buffer_bytes, t->kernels,
                                  t->in_flight, queued,          t->refused_quota};
            metrics_row *row = metrics_add(l, family, fams[f].type, fams[f].help, (double)v[f]);
            if (row != NULL)
                snprintf(row->name, sizeof row->name, "%s{tenant=\"%s\"}", fams[f].family, t->name);
            family = NULL;
        }
    }
}

static void metrics_collect(tsrd_daemon *d, metrics_list *l)
{
    tsrd_tenant all = d->default_tenant;
    uint64_t queued = 0;
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next) {
        all.buffers += t->buffers;
        all.buffer_bytes += t->buffer_bytes;
        all.kernels += t->kernels;
    }
    for (tsrd_tenant *t = d->ready_head; t != NULL; t = t->ready_next)
        for (tsrd_job *j = t->work_head; j != NULL; j = j->work_next)
            queued++;
    metrics_requests(d, l);
    metrics_plain(l, "replays_total", "counter", "Requests answered from the request-id memory.",
                  (double)d->metrics.replays);
    metrics_plain(l, "sessions", "gauge", "Open sessions (connections).", (double)d->n_sessions);
    metrics_plain(l, "sessions_opened_total", "counter", "Sessions ever opened.",
                  (double)d->metrics.sessions_opened);
    metrics_plain(l, "inflight_requests", "gauge", "Requests being executed.", (double)d->inflight);
    metrics_plain(l, "buffers", "gauge", "Live buffers.", (double)all.buffers);
    metrics_plain(l, "buffer_bytes", "gauge", "Bytes in live buffers.", (double)all.buffer_bytes);
    metrics_plain(l, "kernels", "gauge", "Live kernel handles.", (double)all.kernels);
    metrics_plain(l, "work_queued", "gauge",
                  "Heavy jobs (compiles, launches, copies) waiting for a worker.", (double)queued);
    metrics_plain(l, "work_running", "gauge", "Jobs on the worker pool.", (double)d->work_running);
    metrics_plain(l, "recovering", "gauge", "1 while the device context is being rebuilt.",
                  d->recovering ? 1.0 : 0.0);
    metrics_plain(l, "device_recoveries_total", "counter", "Device context rebuilds.",
                  (double)d->recoveries);
    metrics_plain(l, "received_bytes_total", "counter", "Request bytes received.",
                  (double)d->metrics.bytes_in);
    metrics_plain(l, "sent_bytes_total", "counter", "Reply bytes sent.",
                  (double)d->metrics.bytes_out);
    metrics_cache(d, l);
    metrics_tenants(d, l);
}

static void metrics_candidate_rows(metrics_list *l, const tsr_candidate_stats *rows, size_t n)
{
    static const char *const families[] = {"candidate_won_total", "candidate_forced_total",
                                           "candidate_declined_total",
                                           "candidate_failed_verification_total"};
    for (size_t f = 0; f < 4; f++) {
        for (size_t i = 0; i < n; i++) {
            const uint64_t values[] = {rows[i].won, rows[i].forced, rows[i].declined,
                                       rows[i].failed_verification};
            metrics_row *row = metrics_add(l, i == 0 ? families[f] : NULL, "counter",
                                           "Arbiter outcomes per candidate.", (double)values[f]);
            if (row == NULL)
                return;
            snprintf(row->name, sizeof row->name, "%s{kind=\"%s\",name=\"%s\"}", families[f],
                     tsr_region_kind_name(rows[i].kind), rows[i].name);
        }
    }
}

/* Prometheus text exposition format, version 0.0.4. */
static char *metrics_render(tsrd_job *job, const metrics_list *l)
{
    size_t cap = 256 + l->n * 400, used = 0;
    char *text = tsrd_job_alloc(job, cap);
    if (text == NULL)
        return NULL;
    for (size_t i = 0; i < l->n; i++) {
        const metrics_row *row = &l->rows[i];
        if (row->family != NULL) {
            char family[160];
            snprintf(family, sizeof family, "%s", row->family);
            family[strcspn(family, "{")] = '\0';
            used += (size_t)snprintf(text + used, cap - used,
                                     "# HELP tesserad_%s %s\n# TYPE tesserad_%s %s\n", family,
                                     row->help, family, row->type);
        }
        used +=
            (size_t)snprintf(text + used, cap - used, "tesserad_%s %.17g\n", row->name, row->value);
    }
    return text;
}

tsr_status tsrd_metrics_fill(tsrd_daemon *d, tsrd_job *job, Tessera__V1__StatsReply *out,
                             bool prometheus)
{
    metrics_list l = {0};
    metrics_collect(d, &l);
    tsr_candidate_stats *cand = NULL;
    size_t n_cand = 0;
    tsr_status st = tsr_arbiter_stats(d->arbiter, &cand, &n_cand, &job->err);
    size_t n_plain = l.n;
    if (st == TSR_OK && prometheus)
        metrics_candidate_rows(&l, cand, n_cand);
    if (st == TSR_OK && l.failed)
        st = tsr_error_set(&job->err, TSR_NO_MEMORY, "stats: out of memory");
    out->n_counters = n_plain;
    out->counters = st == TSR_OK ? tsrd_job_alloc(job, n_plain * sizeof *out->counters) : NULL;
    for (size_t i = 0; st == TSR_OK && i < n_plain; i++) {
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
        out->counters[i] = c;
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
        out->candidates[i] = c;
    }
    if (st == TSR_OK && prometheus) {
        out->prometheus_text = metrics_render(job, &l);
        if (out->prometheus_text == NULL)
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "stats: out of memory");
    }
    free(cand);
    free(l.rows);
    return st;
}
