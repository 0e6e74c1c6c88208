/*
 * concurrency_test.c — many threads, many requests, every answer right.
 *
 * Eight threads make 200 requests each: the first four share one tsr_client
 * (one nng context per call), the other four have a client each. Every thread
 * runs its own inputs, so a reply delivered to the wrong caller would show as a
 * wrong result, not just a wrong status.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/client.h"
#include "../support/fixture.h"
#include "../support/testdata.h"

#define CONC_THREADS 8
#define CONC_REQUESTS 200

typedef struct conc_worker {
    tsr_client *client;
    const tsr_region *region;
    testdata data;
    int ok;
    int wrong;
    tsr_status first_error;
    char message[TSR_ERROR_MESSAGE_MAX];
} conc_worker;

static void *conc_worker_main(void *arg)
{
    conc_worker *w = arg;
    void *got = malloc(w->data.out_bytes + 1);
    for (int i = 0; i < CONC_REQUESTS; i++) {
        tsr_error err;
        tsr_status st;
        if (i % 4 == 3) {
            st = tsr_client_hello(w->client, NULL, 0, &err);
        } else {
            memset(got, 0, w->data.out_bytes);
            st = tsr_client_run(w->client, w->region, NULL, (const void *const *)w->data.inputs,
                                got, NULL, 0, &err);
            if (st == TSR_OK && memcmp(got, w->data.want, w->data.out_bytes) != 0)
                w->wrong++;
        }
        if (st == TSR_OK) {
            w->ok++;
        } else if (w->first_error == TSR_OK) {
            w->first_error = st;
            memcpy(w->message, err.message, sizeof w->message);
        }
    }
    free(got);
    return NULL;
}

Test(concurrency, eight_threads_get_every_answer_right, .timeout = 300)
{
    testd d;
    tsr_client *shared = fixture_start_client(&d, NULL, 60000);
    tsr_region *r = fixture_region_file("examples/pointwise.json");
    conc_worker w[CONC_THREADS];
    pthread_t th[CONC_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < CONC_THREADS; i++) {
        w[i].client = i < CONC_THREADS / 2 ? shared : fixture_client(&d, 60000);
        w[i].region = r;
        cr_assert_eq(testdata_make(r, 5000 + (uint64_t)i, &w[i].data), 0);
    }
    for (int i = 0; i < CONC_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, conc_worker_main, &w[i]), 0);
    for (int i = 0; i < CONC_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CONC_THREADS; i++) {
        cr_expect_eq(w[i].ok, CONC_REQUESTS, "thread %d: %d ok, first error %s: %s", i, w[i].ok,
                     tsr_status_name(w[i].first_error), w[i].message);
        cr_expect_eq(w[i].wrong, 0, "thread %d: %d wrong results", i, w[i].wrong);
        testdata_free(&w[i].data);
        if (i >= CONC_THREADS / 2)
            tsr_client_close(w[i].client);
    }
    tsr_client_region_free(r);
    fixture_stop(&d, shared);
}
