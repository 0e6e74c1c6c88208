/*
 * latch.c — a one-shot signal waited on with a monotonic deadline (tessera/latch.h).
 */
#include "tessera/latch.h"

#include <string.h>

tsr_status tsr_latch_init(tsr_latch *l, tsr_error *err)
{
    l->set = false;
    int rc = pthread_mutex_init(&l->mu, NULL);
    if (rc != 0)
        return tsr_error_set(err, TSR_INTERNAL, "latch: pthread_mutex_init: %s", strerror(rc));
    /* The condition variable times its waits on the monotonic clock, which is
     * the clock tsr_latch_deadline reads. */
    pthread_condattr_t attr;
    rc = pthread_condattr_init(&attr);
    if (rc == 0) {
        rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        if (rc == 0)
            rc = pthread_cond_init(&l->cv, &attr);
        pthread_condattr_destroy(&attr);
    }
    if (rc != 0) {
        pthread_mutex_destroy(&l->mu);
        return tsr_error_set(err, TSR_INTERNAL, "latch: pthread_cond_init: %s", strerror(rc));
    }
    return TSR_OK;
}

void tsr_latch_set(tsr_latch *l)
{
    pthread_mutex_lock(&l->mu);
    l->set = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

bool tsr_latch_is_set(tsr_latch *l)
{
    pthread_mutex_lock(&l->mu);
    bool set = l->set;
    pthread_mutex_unlock(&l->mu);
    return set;
}

bool tsr_latch_wait_until(tsr_latch *l, const struct timespec *deadline)
{
    pthread_mutex_lock(&l->mu);
    /* Spurious wake-ups return 0 and go round again; the deadline's passing
     * returns ETIMEDOUT and ends the wait. */
    while (!l->set && pthread_cond_timedwait(&l->cv, &l->mu, deadline) == 0)
        ;
    bool set = l->set;
    pthread_mutex_unlock(&l->mu);
    return set;
}

void tsr_latch_deadline(struct timespec *deadline, long ms)
{
    if (ms < 0)
        ms = 0;
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += ms / 1000;
    deadline->tv_nsec += (ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec++;
        deadline->tv_nsec -= 1000000000L;
    }
}

void tsr_latch_destroy(tsr_latch *l)
{
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}
