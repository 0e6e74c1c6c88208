/*
 * recovery.h — rebuilding the device after a sticky fault (recovery.c).
 *
 * Threading: the loop thread; the rebuild itself runs on a worker.
 */
#ifndef TESSERAD_SERVE_RECOVERY_H
#define TESSERAD_SERVE_RECOVERY_H

#include "serve/state.h"

/* Called when a recovery ends, whatever its outcome, so that the work it held
 * back is handed out again (the dispatcher's pump). */
typedef void (*tsrd_recovery_resume_fn)(tsrd_daemon *d);

/* After each job: starts a recovery when the backend reports a lost device,
 * and moves a running one on once no job runs; resume is called when it ends.
 * Loop thread. */
void tsrd_recovery_poll(tsrd_daemon *d, tsrd_recovery_resume_fn resume);
/* True once a recovery has failed every attempt: the device will not come
 * back without a restart (liveness probes then fail). Loop thread. */
bool tsrd_recovery_gave_up(const tsrd_daemon *d);

/* Frees the recovery state (daemon fini; no recovery may be running). */
void tsrd_recovery_fini(tsrd_daemon *d);

#endif
