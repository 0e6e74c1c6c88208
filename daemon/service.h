/*
 * service.h — tesserad as a running service: loop, daemon, server, signals.
 *
 * tsrd_service_run owns the libuv loop for the life of the process. SIGTERM or
 * SIGINT (through uv_signal_t, so the handler runs on the loop) stops accepting
 * requests, lets the ones in flight finish and answer, and then returns 0; a
 * second signal while draining exits the process at once with status 1.
 *
 * Threading: call from the main thread, once. Blocking: until shutdown.
 */
#ifndef TESSERAD_SERVICE_H
#define TESSERAD_SERVICE_H

#include "config.h"

/* Returns the process exit status: 0 after a clean drain, 1 when start-up
 * failed (the reason is logged). */
int tsrd_service_run(const tsrd_config *config);

#endif
