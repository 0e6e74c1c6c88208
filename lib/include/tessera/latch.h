/*
 * tessera/latch.h — a one-shot signal between two threads, waited on with a
 * deadline.
 *
 * One thread finishes something and sets the latch; another waits for that, but
 * only until a deadline, and does something else (prints a progress line, gives
 * up on a close that hangs) each time the deadline passes first. A latch once set
 * stays set. Deadlines are on CLOCK_MONOTONIC, so a change of the wall clock
 * neither cuts a wait short nor stretches it.
 *
 * The struct is public only so that a latch can live inside its user's state;
 * its fields are private to latch.c.
 *
 * Threading: tsr_latch_set and the waits may be called from any threads at
 * once; init and destroy by one thread, before and after every other use.
 */
#ifndef TESSERA_LATCH_H
#define TESSERA_LATCH_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "tessera/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
} tsr_latch;

/* Makes l an unset latch. TSR_INTERNAL, saying which call failed, when the
 * mutex or the condition variable cannot be made (l is then not a latch and
 * must not be destroyed). */
tsr_status tsr_latch_init(tsr_latch *l, tsr_error *err);

/* Sets l and wakes every waiter. Never blocks for long (the latch's own mutex). */
void tsr_latch_set(tsr_latch *l);

/* Whether l has been set, without waiting. */
bool tsr_latch_is_set(tsr_latch *l);

/* Blocks until l is set or CLOCK_MONOTONIC reaches *deadline, whichever comes
 * first; true when l is set (also when it was set before the call). */
bool tsr_latch_wait_until(tsr_latch *l, const struct timespec *deadline);

/* *deadline = now (CLOCK_MONOTONIC) + ms; ms < 0 counts as 0. */
void tsr_latch_deadline(struct timespec *deadline, long ms);

/* Releases l's mutex and condition variable; no thread may be waiting on it. */
void tsr_latch_destroy(tsr_latch *l);

#ifdef __cplusplus
}
#endif

#endif
