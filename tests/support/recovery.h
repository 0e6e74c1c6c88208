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

/* Runs the scenario on backend ("cpu" or "cuda"); n is the element count of
 * the regions. Fills *out. */
void recovery_scenario(const char *backend, int n, recovery_figures *out);

#endif
