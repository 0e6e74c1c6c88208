/*
 * metrics.h — request counters, latency histograms, and their exposition as
 * Prometheus text and as a StatsReply (metrics.c).
 *
 * Threading: the loop thread.
 */
#ifndef TESSERAD_SERVE_METRICS_H
#define TESSERAD_SERVE_METRICS_H

#include "serve/job.h"
#include "serve/state.h"

/* Counts an answer that had no job (body_case 0: an undecodable request). */
void tsrd_metrics_count(tsrd_daemon *d, int body_case, tsr_status status);
/* Counts a job's answer and records its latency, elapsed_ns from arrival. */
void tsrd_metrics_record(tsrd_daemon *d, int body_case, tsr_status status, uint64_t elapsed_ns);
/* Adds one observation to a histogram. */
void tsrd_latency_observe(tsrd_latency *h, uint64_t elapsed_ns);
/* The upper bound of bucket i in nanoseconds (UINT64_MAX for i =
 * TSRD_LATENCY_BUCKETS, the +Inf bucket) and its Prometheus "le" text. */
uint64_t tsrd_latency_bound_ns(int i);
const char *tsrd_latency_bound_text(int i);
/* The Prometheus text (exposition format 0.0.4) of every metric, in *text
 * (malloc'd, NUL-terminated; the caller frees it) of *len bytes. Loop thread.
 * TSR_NO_MEMORY on failure. */
tsr_status tsrd_metrics_render(tsrd_daemon *d, char **text, size_t *len, tsr_error *err);
/* Fills a StatsReply (memory from the job's arena) with what the job's tenant
 * may see (scope.h): everything for an admin or the default tenant; for any
 * other, the service's figures and its own, without the kernel cache's
 * counters, other tenants' rows or the candidates' outcomes. Loop thread. */
tsr_status tsrd_metrics_fill(tsrd_daemon *d, tsrd_job *job, Tessera__V1__StatsReply *out,
                             bool prometheus);

#endif
