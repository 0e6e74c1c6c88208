/*
 * tenant.h — who a request is attributed to (tenant.c).
 *
 * Threading: the loop thread.
 */
#ifndef TESSERAD_SERVE_TENANT_H
#define TESSERAD_SERVE_TENANT_H

#include "serve/state.h"

/* Creates or updates the tenants from config->tenants (start-up and SIGHUP):
 * matched by name, updated in place; those no longer listed are marked removed.
 * Accounting is kept. TSR_NO_MEMORY on failure (then nothing changed). */
tsr_status tsrd_tenants_apply(tsrd_daemon *d, const tsrd_config *config, tsr_error *err);
void tsrd_tenants_fini(tsrd_daemon *d);

/* The tenant a request belongs to: with tenants configured, a non-empty auth
 * (auth_len bytes, compared whole: an embedded NUL or a trailing newline makes
 * another token) must be a configured token of at most TSRD_AUTH_MAX bytes;
 * without one the session's ipc peer uid, then gid, must be listed. A session
 * keeps the tenant of its first request; a later one attributed elsewhere is
 * refused. TSR_UNAUTHENTICATED (in err) when no tenant matches. An
 * attributed session's request-id memory is bound to its tenant's budget. */
tsr_status tsrd_tenant_attribute_bytes(tsrd_daemon *d, tsrd_session *s, const uint8_t *auth,
                                       size_t auth_len, tsrd_tenant **out, tsr_error *err);
/* The same for a NUL-terminated token (NULL: none). */
tsr_status tsrd_tenant_attribute(tsrd_daemon *d, tsrd_session *s, const char *auth,
                                 tsrd_tenant **out, tsr_error *err);

/* Whether the caller of a request that is not attributed (health) may see
 * what an admin sees: without tenants everyone; with them, a caller whose
 * token (auth_len bytes), or without one whose ipc peer, is of a tenant that
 * sees all (serve/scope.h). Binds nothing to the session. Loop thread. */
bool tsrd_tenant_caller_sees_all(tsrd_daemon *d, const tsrd_session *s, const uint8_t *auth,
                                 size_t auth_len);

/* The most bytes of stored replies t's connections keep: its replay_bytes
 * quota, else the daemon-wide replay_bytes_per_tenant. */
uint64_t tsrd_tenant_replay_budget(const tsrd_daemon *d, const tsrd_tenant *t);

#endif
