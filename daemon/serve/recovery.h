/*
 * recovery.h — rebuilding the device after a sticky fault (recovery.c): the
 * whole node, or only the faulted device where the backend can.
 *
 * Threading: the loop thread; the rebuild itself runs on a worker.
 */
#ifndef TESSERAD_SERVE_RECOVERY_H
#define TESSERAD_SERVE_RECOVERY_H

#include "serve/state.h"

/* Called when a recovery ends, whatever its outcome, so that the work it held
 * back is handed out again (the dispatcher's pump). */
typedef void (*tsrd_recovery_resume_fn)(tsrd_daemon *d);

/* After each job off the pool, and after a failed one or any while a device
 * is out of service (serve/dispatch.c): starts a recovery when the backend reports a lost device,
 * and moves a running one on once no job runs; resume is called when it ends.
 * Loop thread. */
void tsrd_recovery_poll(tsrd_daemon *d, tsrd_recovery_resume_fn resume);
/* True once a recovery has failed every attempt and no device serves: the
 * node will not come back without a restart (liveness probes then fail).
 * Loop thread. */
bool tsrd_recovery_gave_up(const tsrd_daemon *d);

/* One device's recovery (backends with recover_device, several devices):
 * the steps tsrd_devrec_poll asks for, as bits. */
#define TSRD_DEVREC_FAULT 1u   /* a fault just noticed: the device stops taking work */
#define TSRD_DEVREC_REBUILD 2u /* none of its jobs runs: drop its objects and rebuild it */

/* Moves r on from what the loop sees: lost, the backend's device_lost (read
 * only while serving); running, the device's jobs on the pool. Serving ->
 * recovering on a fault; a recovering device is rebuilt once, when running
 * reaches 0. Pure: the unit tests drive it. Loop thread. */
unsigned tsrd_devrec_poll(tsrd_devrec *r, bool lost, int running, uint64_t now_ns);
/* The rebuild ended: serving again (ok), or lost for good. Loop thread. */
void tsrd_devrec_done(tsrd_devrec *r, bool ok, uint64_t now_ns);

/* Frees the recovery state (daemon fini; no recovery may be running). */
void tsrd_recovery_fini(tsrd_daemon *d);

#endif
