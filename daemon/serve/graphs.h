/*
 * graphs.h — the captured launch sequences of a session (graphs.c).
 *
 * A batch request may ask for its launch sequence to be captured into device
 * graphs, one per chunk of the batch's plan (handlers/batch.c); the session
 * keeps up to TSRD_BATCH_GRAPHS captured graphs, keyed by the exact sequence of
 * kernel and buffer handles of their launches, and replays one when the same
 * sequence comes again. Handles are never reused, so a key can only match the
 * objects it was captured with, and a batch pins them for its duration. A key
 * is per launch the kernel, its inputs and its output; the kernel fixes how
 * many inputs follow, so a key that equals the start of a sequence ends on a
 * launch boundary of it.
 *
 * Threading: the cache is touched only by the session's stream jobs (which
 * never overlap) and by tsrd_graphs_release on the loop once no job holds the
 * session (or during a recovery, while no work runs).
 */
#ifndef TESSERAD_SERVE_GRAPHS_H
#define TESSERAD_SERVE_GRAPHS_H

#include "serve/state.h"

#define TSRD_BATCH_MAX 4096 /* launches in one batch */
#define TSRD_BATCH_GRAPHS 16

/* The kept graph whose launch sequence is the longest that begins `seq` (the
 * handles of the launches still to run, n_seq words), made the most recently
 * used, with *launches the number of launches it covers; NULL when none
 * matches. The session keeps it. */
tsrd_graph *tsrd_graphs_match(tsrd_session *s, const uint64_t *seq, size_t n_seq, size_t *launches);

/* Keeps a newly captured graph of `launches` launches under key (n_key
 * handles, malloc'd; both are taken whatever happens), dropping the least
 * recently used past TSRD_BATCH_GRAPHS. TSR_NO_MEMORY (graph destroyed, key
 * freed) when it cannot be kept. */
tsr_status tsrd_graphs_keep(tsrd_daemon *d, tsrd_session *s, uint64_t *key, size_t n_key,
                            size_t launches, tsrd_graph *graph, tsr_error *err);

/* Destroys every captured graph of s (session teardown, device recovery). */
void tsrd_graphs_release(tsrd_daemon *d, tsrd_session *s);

#endif
