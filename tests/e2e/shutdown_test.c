/*
 * shutdown_test.c — SIGTERM while requests are in flight.
 *
 * Four threads keep runs going while the daemon is told to stop. The daemon must
 * exit 0, and every call must come back: answered, or with a clean error
 * (UNAVAILABLE, CANCELLED, or TIMEOUT once nothing is left to answer), never a
 * hang or a wrong result.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/client.h"
#include "tessera/json.h"
#include "../support/fixture.h"
#include "../support/testdata.h"

#define SHUT_THREADS 4

typedef struct shut_worker {
    tsr_client *client;
    const tsr_region *region;
    const testdata *data;
    atomic_int *started;
    int ok;
    int wrong;
    tsr_status bad; /* a status that is not a clean error */
    tsr_status last;
} shut_worker;

static void *shut_worker_main(void *arg)
{
    shut_worker *w = arg;
    void *got = malloc(w->data->out_bytes + 1);
    for (;;) {
        tsr_error err;
        atomic_fetch_add(w->started, 1);
        tsr_status st = tsr_client_run(w->client, w->region, NULL,
                                       (const void *const *)w->data->inputs, got, NULL, 0, &err);
        w->last = st;
        if (st == TSR_OK) {
            w->ok++;
            if (memcmp(got, w->data->want, w->data->out_bytes) != 0)
                w->wrong++;
            continue;
        }
        if (st != TSR_UNAVAILABLE && st != TSR_CANCELLED && st != TSR_TIMEOUT)
            w->bad = st;
        break;
    }
    free(got);
    return NULL;
}

Test(shutdown, sigterm_during_work_exits_zero_and_answers_cleanly, .timeout = 120)
{
    testd d;
    fixture_start(&d, NULL);
    tsr_region *r = fixture_region_json(
        "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":192,\"n\":192,\"k\":192}");
    testdata t;
    cr_assert_eq(testdata_make(r, 3, &t), 0);
    atomic_int started = 0;
    shut_worker w[SHUT_THREADS];
    pthread_t th[SHUT_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < SHUT_THREADS; i++) {
        w[i].client = fixture_client(&d, 3000);
        w[i].region = r;
        w[i].data = &t;
        w[i].started = &started;
        cr_assert_eq(pthread_create(&th[i], NULL, shut_worker_main, &w[i]), 0);
    }
    /* Let every thread get at least a few runs going. */
    while (atomic_load(&started) < 4 * SHUT_THREADS) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    int rc = testd_stop(&d);
    for (int i = 0; i < SHUT_THREADS; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(rc, 0, "tesserad exit status %d", rc);
    for (int i = 0; i < SHUT_THREADS; i++) {
        cr_expect_eq(w[i].bad, TSR_OK, "thread %d ended with %s", i, tsr_status_name(w[i].bad));
        cr_expect_eq(w[i].wrong, 0, "thread %d: wrong results", i);
        cr_expect_gt(w[i].ok, 0, "thread %d: no run answered before the stop", i);
        tsr_client_close(w[i].client);
    }
    testdata_free(&t);
    tsr_client_region_free(r);
    testd_remove(&d);
}
