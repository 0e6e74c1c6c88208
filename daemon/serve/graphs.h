/*
 * batch.h — the session state of batched launches (handlers_batch.c).
 *
 * A batch request may ask for its launch sequence to be captured into a device
 * graph; the session keeps up to TSRD_BATCH_GRAPHS captured graphs, keyed by
 * the exact sequence of kernel and buffer handles, and replays one when the
 * same sequence comes again. Handles are never reused, so a key can only match
 * the objects it was captured with, and a batch pins them for its duration.
 *
 * Threading: the cache is touched only by the session's stream jobs (which
 * never overlap) and by tsrd_batch_graphs_release on the loop once no job
 * holds the session.
 */
#ifndef TESSERAD_BATCH_H
#define TESSERAD_BATCH_H

#include "daemon.h"

#define TSRD_BATCH_MAX 4096 /* launches in one batch */
#define TSRD_BATCH_GRAPHS 16

/* Destroys every captured graph of s (session teardown). */
void tsrd_batch_graphs_release(tsrd_daemon *d, tsrd_session *s);

#endif
