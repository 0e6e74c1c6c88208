/*
 * dispatch.h — from request bytes to reply bytes.
 *
 * Every request takes the same path: decode (a message that does not decode is
 * answered BAD_MESSAGE with id 0) -> the request-id memory (a resent id is
 * answered from memory, or waits for the first copy) -> one central validation
 * step (body present and known, tenant and its quotas, payload sizes) -> the
 * handler for the body (d->handler_find: handlers/handlers.h) -> encode -> reply. The steps of a
 * handler and where each runs are in serve/job.h.
 *
 * Rows flagged TSRD_STREAM run in order on the session's stream: one such job
 * per session at a time, so a client's writes, launches and reads neither
 * overlap nor pass each other.
 *
 * Heavy work is queued per tenant and handed to the worker pool (at most
 * work_slots jobs at once) by taking the tenants with queued work in turn, so a
 * tenant that floods the daemon delays only its own requests.
 *
 * Threading: tsrd_dispatch and everything it calls run on the loop thread;
 * execute runs where the row says.
 */
#ifndef TESSERAD_SERVE_DISPATCH_H
#define TESSERAD_SERVE_DISPATCH_H

#include "serve/job.h"
#include "serve/state.h"

/* Serves one received message of session s (tsrd_session_get; NULL when the
 * connection is already gone, which is answered UNAVAILABLE). origin is handed
 * back to d->reply_fn exactly once (possibly later, when the work completes). */
void tsrd_dispatch(tsrd_daemon *d, tsrd_session *s, void *origin, const uint8_t *data, size_t len);

/* Hands queued heavy work to the worker pool while slots are free (and work is
 * not paused by a device recovery). Loop thread. */
void tsrd_dispatch_pump(tsrd_daemon *d);

#endif
