/*
 * recovery.h — the device-fault scenario, shared by the CPU end-to-end test
 * (tests/e2e/recovery_test.c, where the fault is simulated) and the GPU test
 * (tests/gpu/recovery_test.c, a real illegal address on the device).
 *
 * Two tenants share one tesserad started with test_faults. Bob holds a kernel
 * and buffers and keeps running regions on a second connection; alice forces
 * the faulting candidate. The scenario asserts, with Criterion, that alice
 * gets DEVICE_LOST, the daemon recovers on its own, bob's old buffers answer
 * DEVICE_LOST (and can be freed), bob's kernel handle works on new buffers,
 * bob's concurrent runs only ever succeed with the right values or fail with
 * DEVICE_LOST, and everyone is served after the recovery.
 */
#ifndef TESSERA_TEST_RECOVERY_H
#define TESSERA_TEST_RECOVERY_H

#include <stdint.h>

typedef struct recovery_figures {
    double fault_to_ready_ms;  /* the faulting reply -> health READY, seen by a client */
    double daemon_recovery_ms; /* the daemon's own figure (device_recovery_last_seconds, in ms) */
    uint64_t bob_runs_ok;      /* bob's concurrent runs: right answers */
    uint64_t bob_runs_lost;    /* ... DEVICE_LOST (they were in flight) */
    uint64_t bob_runs_after;   /* right answers after the recovery */
} recovery_figures;

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "tessera/client.h"

/* The scenario's inputs: n values of a pattern chosen by seed, each x with
 * 2x + 1 exactly representable in f32. */
void recovery_fill(float *x, int n, int seed);
/* Whether y is 2x + 1 for every one of the n values, exactly. */
bool recovery_right(const float *x, const float *y, int n);

/* Two f32 buffers of n elements on one device, for a kernel x -> y. */
typedef struct recovery_pair {
    tsr_buffer x, y;
} recovery_pair;

/* Allocates both of p's buffers on device (asserted, and that they were
 * placed there). */
void recovery_pair_alloc(tsr_client *c, int device, int64_t n, recovery_pair *p);

/* Writes x (recovery_fill with seed), launches kernel, reads y back and
 * expects recovery_right of it: the first status that is not TSR_OK, err
 * filled, else TSR_OK. */
tsr_status recovery_pair_launch(tsr_client *c, tsr_kernel kernel, const recovery_pair *p, int n,
                                int seed, tsr_error *err);

/* Runs fixture_affine(4) over {1, 2, 3, 4} on device through c with the test
 * candidate force ("test_fault", "test_fault_for_good") forced and
 * unverified: the run's status (TSR_DEVICE_LOST where it faulted the device),
 * err filled. */
tsr_status recovery_fault(tsr_client *c, int device, const char *force, tsr_error *err);

/* A connection of its own that runs fixture_affine(n) over and over, each
 * round on new inputs, until stopped, counting what it saw. Set url, token
 * (NULL: none), timeout_ms (to connect, and the default of its calls), n,
 * device and lost_until_mark, zero the rest, then recovery_runner_start;
 * recovery_runner_stop stops it and waits for it. */
typedef struct recovery_runner {
    const char *url, *token;
    int timeout_ms, n;
    int device;           /* >= 0: tsr_client_run_on, which must run there; -1: tsr_client_run */
    bool lost_until_mark; /* DEVICE_LOST of a run begun before mark is lost, not other */
    atomic_bool stop;
    atomic_bool mark;    /* set and cleared by the test */
    atomic_ulong ok;     /* right answers */
    atomic_ulong marked; /* ... of runs that began and ended with mark set */
    atomic_ulong lost, wrong, other;
    tsr_status other_status; /* the first other's */
    char other_message[TSR_ERROR_MESSAGE_MAX];
    pthread_t thread;
} recovery_runner;

void recovery_runner_start(recovery_runner *rr);

/* Stops rr, waits for it, and expects it to have seen no wrong answer and no
 * other status; who names its runs in a failure. */
void recovery_runner_stop(recovery_runner *rr, const char *who);

/* Runs the scenario on backend ("cpu" or "cuda"); n is the element count of
 * the regions. Fills *out. */
void recovery_scenario(const char *backend, int n, recovery_figures *out);

#endif
