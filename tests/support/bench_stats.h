/*
 * bench_stats.h — the clock and order statistics the benchmarks share.
 *
 * Header-only: the benchmarks link the libraries but no test support objects.
 * Reentrant.
 */
#ifndef TESSERA_BENCH_STATS_H
#define TESSERA_BENCH_STATS_H

#include <stdlib.h>
#include <time.h>

/* Monotonic time in microseconds. */
static inline double bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-quantile of v[0..n), by nearest rank (0.5 of an even count is the
 * upper median); sorts v. */
static inline double bench_quantile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[(int)(p * (n - 1) + 0.5)];
}

#endif
