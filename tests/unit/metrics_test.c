/*
 * metrics_test.c — latency histograms and the metrics' two forms.
 *
 * Bucketing is checked on bare histograms; the Prometheus text and the
 * StatsReply counters on a real daemon context (CPU backend, kernel cache in a
 * temporary directory) whose counters the test sets itself.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "serve/metrics.h"
#include "../support/unit_daemon.h"

Test(metrics, a_bound_belongs_to_its_own_bucket)
{
    tsrd_latency h = {0};
    tsrd_latency_observe(&h, 0);
    tsrd_latency_observe(&h, 50000);            /* exactly 50 us: le="0.00005" */
    tsrd_latency_observe(&h, 50001);            /* just past: le="0.0001" */
    tsrd_latency_observe(&h, 1000000000);       /* exactly 1 s */
    tsrd_latency_observe(&h, 60000000000);      /* exactly 60 s: the last finite bucket */
    tsrd_latency_observe(&h, 60000000001);      /* past 60 s: +Inf */
    tsrd_latency_observe(&h, 3600000000000ULL); /* an hour: +Inf */
    cr_assert_eq(h.buckets[0], 2);
    cr_assert_eq(h.buckets[1], 1);
    cr_assert_eq(h.buckets[13], 1);
    cr_assert_str_eq(tsrd_latency_bound_text(13), "1");
    cr_assert_eq(h.buckets[TSRD_LATENCY_BUCKETS - 1], 1);
    cr_assert_eq(h.buckets[TSRD_LATENCY_BUCKETS], 2);
    cr_assert_eq(h.count, 7);
    cr_assert_eq(h.sum_ns,
                 50000ULL + 50001 + 1000000000 + 60000000000 + 60000000001 + 3600000000000ULL);
    uint64_t total = 0;
    for (int i = 0; i <= TSRD_LATENCY_BUCKETS; i++)
        total += h.buckets[i];
    cr_assert_eq(total, h.count);
}

Test(metrics, bounds_rise_from_50us_to_60s_and_their_labels_say_so)
{
    cr_assert_eq(tsrd_latency_bound_ns(0), 50000);
    cr_assert_str_eq(tsrd_latency_bound_text(0), "0.00005");
    cr_assert_eq(tsrd_latency_bound_ns(TSRD_LATENCY_BUCKETS - 1), 60000000000ULL);
    cr_assert_str_eq(tsrd_latency_bound_text(TSRD_LATENCY_BUCKETS - 1), "60");
    cr_assert_eq(tsrd_latency_bound_ns(TSRD_LATENCY_BUCKETS), UINT64_MAX);
    cr_assert_str_eq(tsrd_latency_bound_text(TSRD_LATENCY_BUCKETS), "+Inf");
    for (int i = 0; i < TSRD_LATENCY_BUCKETS; i++) {
        uint64_t ns = tsrd_latency_bound_ns(i);
        if (i > 0)
            cr_assert_gt(ns, tsrd_latency_bound_ns(i - 1), "bucket %d", i);
        /* The label is the bound in seconds. */
        double seconds = strtod(tsrd_latency_bound_text(i), NULL);
        cr_assert_eq((uint64_t)(seconds * 1e9 + 0.5), ns, "bucket %d: %s", i,
                     tsrd_latency_bound_text(i));
    }
}

/* ---- on a daemon context ---- */

TestSuite(metrics_render, .init = unit_suite_start, .fini = unit_suite_stop, .timeout = 60);

static char *render(void)
{
    char *text = NULL;
    size_t len = 0;
    tsr_error err;
    cr_assert_eq(tsrd_metrics_render(&unit_suite->d, &text, &len, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(strlen(text), len);
    return text;
}

static void expect_line(const char *text, const char *line)
{
    char want[512];
    snprintf(want, sizeof want, "\n%s\n", line);
    cr_expect_not_null(strstr(text, want), "missing line: %s", line);
}

Test(metrics_render, a_histogram_is_cumulative_with_sum_and_count)
{
    tsrd_daemon *d = &unit_suite->d;
    tsrd_metrics_record(d, TESSERA__V1__REQUEST__BODY_HELLO, TSR_OK, 40000);
    tsrd_metrics_record(d, TESSERA__V1__REQUEST__BODY_HELLO, TSR_OK, 50000);
    tsrd_metrics_record(d, TESSERA__V1__REQUEST__BODY_HELLO, TSR_UNAUTHENTICATED, 2000000);
    char *text = render();
    expect_line(text, "# TYPE tesserad_request_duration_seconds histogram");
    expect_line(text, "tesserad_requests_total{type=\"hello\",status=\"OK\"} 2");
    expect_line(text, "tesserad_requests_total{type=\"hello\",status=\"UNAUTHENTICATED\"} 1");
    expect_line(text, "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"0.00005\"} 2");
    expect_line(text, "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"0.001\"} 2");
    expect_line(text, "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"0.0025\"} 3");
    expect_line(text, "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"60\"} 3");
    expect_line(text, "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"+Inf\"} 3");
    expect_line(text, "tesserad_request_duration_seconds_sum{type=\"hello\"} 0.00209");
    expect_line(text, "tesserad_request_duration_seconds_count{type=\"hello\"} 3");
    /* The buckets come in order, each one at least the one before. */
    const char *p = text;
    unsigned long prev = 0;
    for (int i = 0; i <= TSRD_LATENCY_BUCKETS; i++) {
        char sample[160];
        snprintf(sample, sizeof sample,
                 "tesserad_request_duration_seconds_bucket{type=\"hello\",le=\"%s\"} ",
                 tsrd_latency_bound_text(i));
        const char *at = strstr(p, sample);
        cr_assert_not_null(at, "bucket %d missing or out of order", i);
        unsigned long v = strtoul(at + strlen(sample), NULL, 10);
        cr_assert_geq(v, prev, "bucket %d", i);
        prev = v;
        p = at + 1;
    }
    /* Request types never answered have no histogram. */
    cr_expect_null(strstr(text, "type=\"compile\""));
    free(text);
}

Test(metrics_render, each_family_has_one_help_and_one_type_line)
{
    tsrd_metrics_record(&unit_suite->d, TESSERA__V1__REQUEST__BODY_HELLO, TSR_OK, 1000);
    tsrd_metrics_record(&unit_suite->d, TESSERA__V1__REQUEST__BODY_STATS, TSR_OK, 1000);
    tsrd_metrics_count(&unit_suite->d, 0, TSR_BAD_MESSAGE);
    char *text = render();
    int families = 0;
    for (const char *line = text; *line != '\0'; line = strchr(line, '\n') + 1) {
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[128];
            cr_assert_eq(sscanf(line + 7, "%127s", name), 1);
            char help[160];
            snprintf(help, sizeof help, "# HELP %s ", name);
            /* the HELP line sits right before its TYPE line */
            const char *prev = line - 2;
            while (prev > text && prev[-1] != '\n')
                prev--;
            cr_assert_eq(strncmp(prev, help, strlen(help)), 0, "%s", name);
            char type[160];
            snprintf(type, sizeof type, "# TYPE %s ", name);
            cr_assert_eq(strstr(line + 1, type), NULL, "%s has two TYPE lines", name);
            families++;
        } else if (line[0] != '#') {
            cr_assert_eq(strncmp(line, "tesserad_", 9), 0, "%.40s", line);
        }
        cr_assert_not_null(strchr(line, '\n'), "the text ends with a newline");
    }
    cr_assert_gt(families, 30);
    expect_line(text, "tesserad_requests_total{type=\"none\",status=\"BAD_MESSAGE\"} 1");
    expect_line(text, "tesserad_tenant_buffer_bytes{tenant=\"default\"} 0");
    expect_line(text, "tesserad_work_queued 0");
    expect_line(text, "tesserad_sessions 0");
    expect_line(text, "tesserad_kcache_misses_total 0");
    free(text);
}

Test(metrics_render, label_values_are_escaped)
{
    snprintf(unit_suite->d.default_tenant.name, sizeof unit_suite->d.default_tenant.name,
             "a\"b\\c\nd");
    unit_suite->d.default_tenant.buffer_bytes = 4096;
    char *text = render();
    expect_line(text, "tesserad_tenant_buffer_bytes{tenant=\"a\\\"b\\\\c\\nd\"} 4096");
    free(text);
}

/* The StatsReply carries sum and count but not the buckets. */
Test(metrics_render, stats_reply_counters_have_sum_and_count_only)
{
    tsrd_metrics_record(&unit_suite->d, TESSERA__V1__REQUEST__BODY_HELLO, TSR_OK, 1500000000);
    tsrd_job *job = calloc(1, sizeof *job);
    job->d = &unit_suite->d;
    Tessera__V1__StatsReply r = TESSERA__V1__STATS_REPLY__INIT;
    cr_assert_eq(tsrd_metrics_fill(&unit_suite->d, job, &r, true), TSR_OK, "%s", job->err.message);
    double count = -1, sum = -1;
    for (size_t i = 0; i < r.n_counters; i++) {
        const char *name = r.counters[i]->name;
        cr_assert_null(strstr(name, "_bucket"), "%s", name);
        if (strcmp(name, "request_duration_seconds_count{type=\"hello\"}") == 0)
            count = r.counters[i]->value;
        if (strcmp(name, "request_duration_seconds_sum{type=\"hello\"}") == 0)
            sum = r.counters[i]->value;
    }
    cr_assert_eq(count, 1.0);
    cr_assert_eq(sum, 1.5);
    cr_assert_not_null(strstr(r.prometheus_text, "\ntesserad_request_duration_seconds_bucket{"
                                                 "type=\"hello\",le=\"2.5\"} 1\n"));
    cr_assert_not_null(strstr(r.prometheus_text, "\ntesserad_request_duration_seconds_bucket{"
                                                 "type=\"hello\",le=\"1\"} 0\n"));
    while (job->arena != NULL) {
        tsrd_arena_block *next = job->arena->next;
        free(job->arena);
        job->arena = next;
    }
    free(job);
}
