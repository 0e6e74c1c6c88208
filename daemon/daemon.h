/*
 * daemon.h — opening and closing the daemon: the parts of tsrd_daemon
 * (serve/state.h) are made here, in order, and released in reverse.
 *
 * Threading: the loop thread, while nothing else runs.
 */
#ifndef TESSERAD_DAEMON_H
#define TESSERAD_DAEMON_H

#include <uv.h>

#include "serve/state.h"

/* Opens the backend, kernel cache and arbiter for config (copied; the caller
 * keeps its own). Creates the cache directory. On failure err says what, and
 * nothing is left open. The loop is borrowed. */
tsr_status tsrd_daemon_init(tsrd_daemon *d, const tsrd_config *config, uv_loop_t *loop,
                            tsr_error *err);
/* Closes every session and releases everything. No job may be in flight. */
void tsrd_daemon_fini(tsrd_daemon *d);

/* mkdir -p with mode for the directories it creates. TSR_IO_ERROR naming the
 * path that failed. */
tsr_status tsrd_mkdirs(const char *path, unsigned mode, tsr_error *err);

#endif
