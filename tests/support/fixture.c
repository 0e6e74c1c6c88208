/*
 * fixture.c — asserted set-up steps for the end-to-end suites (see fixture.h).
 */
#include "fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "tessera/region_pb.h"
#include "testdata.h"

testd suite_daemon;
tsr_client *suite_client;

void fixture_suite_start(void)
{
    fixture_start(&suite_daemon, NULL);
}

void fixture_suite_start_client(void)
{
    suite_client = fixture_start_client(&suite_daemon, NULL, 30000);
}

void fixture_suite_stop(void)
{
    fixture_stop(&suite_daemon, suite_client);
    suite_client = NULL;
}

void fixture_start(testd *d, const char *const *extra)
{
    cr_assert_eq(testd_start(d, extra), 0, "tesserad did not start");
}

tsr_client *fixture_client(const testd *d, int timeout_ms)
{
    tsr_client *c = testd_client(d, timeout_ms);
    cr_assert_not_null(c, "no client for %s", d->url);
    return c;
}

tsr_client *fixture_start_client(testd *d, const char *const *extra, int timeout_ms)
{
    fixture_start(d, extra);
    return fixture_client(d, timeout_ms);
}

void fixture_stop(testd *d, tsr_client *client)
{
    if (client != NULL)
        tsr_client_close(client);
    int rc = testd_stop(d);
    testd_remove(d);
    cr_expect_eq(rc, 0, "tesserad exit status %d", rc);
}

tsr_region *fixture_region_file(const char *path)
{
    tsr_region *r = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_region_load_file(path, &r, &err), TSR_OK, "%s: %s", path, err.message);
    return r;
}

tsr_region *fixture_region_json(const char *json)
{
    tsr_region *r = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_region_load(json, strlen(json), &r, &err), TSR_OK, "%s: %s", json,
                 err.message);
    return r;
}

tsr_region *fixture_affine(int64_t n)
{
    tsr_region *r = testdata_affine(n);
    cr_assert_not_null(r, "no affine region of %lld elements", (long long)n);
    return r;
}

tsr_status fixture_affine_run4(tsr_client *c, const tsr_region *r, float out[4], int timeout_ms,
                               tsr_error *err)
{
    static const float x[4] = {1, 2, 3, 4};
    const void *inputs[1] = {x};
    return tsr_client_run(c, r, NULL, inputs, out, NULL, timeout_ms, err);
}

void fixture_compile_on(tsr_client *c, const tsr_region *r, tsr_client_compiled *out)
{
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, NULL, out, 0, &err), TSR_OK, "%s", err.message);
}

tsr_region *fixture_affine_compiled(tsr_client *c, int64_t n, tsr_client_compiled *out)
{
    tsr_region *r = fixture_affine(n);
    fixture_compile_on(c, r, out);
    return r;
}

void fixture_compile(const testd *d, tsr_region *r, tsr_client_compiled *out)
{
    tsr_client *c = fixture_client(d, 30000);
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, NULL, out, 0, &err), TSR_OK, "%s", err.message);
    tsr_client_region_free(r);
    tsr_client_close(c);
}

void fixture_compile_affine(const testd *d, int64_t n, tsr_client_compiled *out)
{
    fixture_compile(d, fixture_affine(n), out);
}

static void *fixture_compile_main(void *arg)
{
    fixture_compile_job *j = arg;
    tsr_client *c = testd_client(j->d, j->timeout_ms);
    tsr_region *r = testdata_affine(j->n);
    j->status =
        c != NULL && r != NULL ? tsr_client_compile(c, r, NULL, &j->out, 0, &j->err) : TSR_INTERNAL;
    if (r != NULL)
        tsr_client_region_free(r);
    if (c != NULL)
        tsr_client_close(c);
    return NULL;
}

void fixture_compile_start(fixture_compile_job *j, const testd *d, int64_t n, int timeout_ms)
{
    *j = (fixture_compile_job){.d = d, .n = n, .timeout_ms = timeout_ms};
    cr_assert_eq(pthread_create(&j->thread, NULL, fixture_compile_main, j), 0);
}

tsr_status fixture_compile_join(fixture_compile_job *j)
{
    pthread_join(j->thread, NULL);
    return j->status;
}

Tessera__V1__Region *fixture_region_pb(const tsr_region *r)
{
    Tessera__V1__Region *pb = NULL;
    tsr_error err;
    cr_assert_eq(tsr_region_to_pb(r, &pb, &err), TSR_OK, "%s", err.message);
    return pb;
}

tsr_buffer fixture_alloc(tsr_client *c, tsr_client_dtype dtype, int rank, const int64_t *shape)
{
    tsr_buffer b = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_buffer_alloc(c, dtype, rank, shape, &b, NULL, 0, &err), TSR_OK, "%s",
                 err.message);
    return b;
}

tsr_buffer fixture_alloc_f32(tsr_client *c, int64_t n)
{
    return fixture_alloc(c, TSR_CLIENT_F32, 1, &n);
}

fixture_mm fixture_matmul(tsr_client *c, int n)
{
    char json[160];
    snprintf(json, sizeof json,
             "{\"kind\": \"matmul\", \"dtype\": \"f32\", \"m\": %d, \"n\": %d, \"k\": %d}", n, n,
             n);
    tsr_region *r = fixture_region_json(json);
    tsr_client_compile_opts opts = {.skip_verify = true};
    tsr_client_compiled compiled;
    tsr_error err;
    cr_assert_eq(tsr_client_compile(c, r, &opts, &compiled, 60000, &err), TSR_OK, "%s",
                 err.message);
    tsr_client_region_free(r);
    fixture_mm mm = {.kernel = compiled.kernel};
    int64_t shape[2] = {n, n};
    mm.in[0] = fixture_alloc(c, TSR_CLIENT_F32, 2, shape);
    mm.in[1] = fixture_alloc(c, TSR_CLIENT_F32, 2, shape);
    mm.out = fixture_alloc(c, TSR_CLIENT_F32, 2, shape);
    return mm;
}

double fixture_counter(tsr_client *c, const char *name)
{
    tsr_client_stats *s = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_stats_get(c, false, &s, 0, &err), TSR_OK, "stats: %s", err.message);
    double v = tsr_client_stats_counter(s, name, -1);
    tsr_client_stats_free(s);
    return v;
}

void fixture_expect_counts(tsr_client *c, const fixture_count *want, size_t n)
{
    tsr_client_stats *s = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_stats_get(c, false, &s, 0, &err), TSR_OK, "stats: %s", err.message);
    for (size_t i = 0; i < n; i++) {
        double v = tsr_client_stats_counter(s, want[i].name, -1);
        cr_expect_eq(v, want[i].want, "%s is %g, not %g", want[i].name, v, want[i].want);
    }
    tsr_client_stats_free(s);
}

/* The daemon's child, the device worker: a child of whichever of its
 * threads started it. */
pid_t fixture_worker_pid(pid_t daemon)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)daemon);
    DIR *tasks = opendir(dir);
    cr_assert_not_null(tasks, "%s", dir);
    int pid = 0;
    for (struct dirent *e; pid == 0 && (e = readdir(tasks)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[400];
        snprintf(path, sizeof path, "%s/%s/children", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    closedir(tasks);
    cr_assert_gt(pid, 0, "tesserad has no child process");
    return (pid_t)pid;
}
