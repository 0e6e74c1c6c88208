/*
 * dispatch.h — from request bytes to reply bytes.
 *
 * Every request takes the same path: the envelope (serve/envelope.h: id, auth
 * and which body, read without decoding the body; a message whose top level
 * does not parse is answered BAD_MESSAGE with id 0) -> attribution to a tenant
 * from the auth bytes or the peer (health alone skips it; a refusal costs no
 * decoding) -> the request-id memory (a resent id is answered from memory, or
 * waits for the first copy within the tenant's in_flight quota) -> one request
 * of the tenant's in_flight quota -> the shape check (field count and nesting)
 * and decode, on the loop for bodies up to 4 KiB and on the worker pool for
 * larger ones (the session's later requests wait their turn meanwhile, so a
 * session's requests keep their arrival order) -> one central validation step
 * (body present and known, quotas, payload sizes) -> the handler for the body
 * (d->handlers: the table in handlers/handlers.h) -> encode -> reply. The steps of a
 * handler and where each runs are in serve/job.h.
 *
 * Rows flagged TSRD_STREAM run in order on the session's stream: one such job
 * per session at a time, so a client's writes, launches and reads neither
 * overlap nor pass each other. A stream job its prepare step marks quick
 * (a launch of a kernel measured short on the device) executes on the loop
 * instead, without the two thread hops of the pool, when the session's stream
 * is made and idle with nothing queued on it, and no other device work runs or
 * waits (no heavy job, no submission ring, no recovery): nothing can then hold
 * its launch and synchronize up. Its reply, request-id memory, quotas and
 * metrics are settled exactly as for a job back from the pool, on the same
 * thread; requests_inline_total counts such jobs.
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

/* Serves one received message of session s (tsrd_session_hold; NULL when the
 * connection is already gone, which is answered UNAVAILABLE). origin is handed
 * back to d->reply_fn exactly once (possibly later, when the work completes).
 * The bytes are borrowed for the call. Where they must outlive it (a body
 * decoded on the worker pool, a request parked behind one), the message is
 * handed over when release is set — release(owner) is then called exactly
 * once, on whichever thread is done with it, and true returned — and copied
 * when release is NULL. False: the caller still owns the message and frees it
 * when the call returns. */
bool tsrd_dispatch(tsrd_daemon *d, tsrd_session *s, void *origin, const uint8_t *data, size_t len,
                   void (*release)(void *owner), void *owner);

/* Answers one received message with status and message at once, without
 * serving it (the transport's refusals: a connection past its request cap).
 * The reply carries the request's id when its envelope parses. */
void tsrd_dispatch_refuse(tsrd_daemon *d, void *origin, const uint8_t *data, size_t len,
                          tsr_status status, const char *message);

/* Hands queued heavy work to the worker pool while slots are free (and work is
 * not paused by a device recovery). Loop thread. */
void tsrd_dispatch_pump(tsrd_daemon *d);

#endif
