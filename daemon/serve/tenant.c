/*
 * tenant.c — tenants from the config, and attributing a request to one.
 *
 * A request is attributed by its bearer token (compared as a SHA-256 hash of
 * every byte of the field, so the config never holds a token itself and
 * "token\0junk" is not "token") or, without one, by the credentials of its ipc
 * peer. Tenants are never freed before the daemon: buffers, kernels and
 * sessions point at them, and a reload that drops a tenant only stops it from
 * attributing anything new.
 */
#include <mbedtls/constant_time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/envelope.h"
#include "serve/replay.h"
#include "serve/scope.h"
#include "serve/tenant.h"
#include "tessera/fingerprint.h"

static tsrd_tenant *tenant_find(tsrd_daemon *d, const char *name)
{
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

tsr_status tsrd_tenants_apply(tsrd_daemon *d, const tsrd_config *config, tsr_error *err)
{
    /* Allocate every new tenant first so that a failure changes nothing. */
    tsrd_tenant *fresh = NULL;
    for (int i = 0; i < config->n_tenants; i++) {
        if (tenant_find(d, config->tenants[i].name) != NULL)
            continue;
        tsrd_tenant *t = calloc(1, sizeof *t);
        if (t == NULL) {
            while (fresh != NULL) {
                tsrd_tenant *next = fresh->next;
                free(fresh);
                fresh = next;
            }
            return tsr_error_set(err, TSR_NO_MEMORY, "tenants: out of memory");
        }
        snprintf(t->name, sizeof t->name, "%s", config->tenants[i].name);
        t->cache_owner = tsrd_scope_owner_of(t->name);
        t->next = fresh;
        fresh = t;
    }
    tsrd_tenant **tail = &d->tenants;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = fresh;
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        t->removed = true;
    for (int i = 0; i < config->n_tenants; i++) {
        tsrd_tenant *t = tenant_find(d, config->tenants[i].name);
        t->conf = config->tenants[i];
        t->removed = false;
    }
    return TSR_OK;
}

void tsrd_tenants_fini(tsrd_daemon *d)
{
    while (d->tenants != NULL) {
        tsrd_tenant *next = d->tenants->next;
        free(d->tenants);
        d->tenants = next;
    }
}

/* The field's exact bytes: no trailing newline is dropped here (that is for
 * tokens read from a file by --hash-token), and an embedded NUL is hashed. */
static tsrd_tenant *tenant_by_token(tsrd_daemon *d, const uint8_t *auth, size_t len)
{
    char hex[65];
    tsrd_sha256_hex(auth, len, hex);
    tsrd_tenant *found = NULL;
    /* Every hash is compared, each in constant time: how long it takes says
     * nothing about which tenant, or how much of a guessed token's hash, matched. */
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        for (int i = 0; !t->removed && i < t->conf.n_tokens; i++)
            if (mbedtls_ct_memcmp(hex, t->conf.token_sha256[i], 64) == 0 && found == NULL)
                found = t;
    return found;
}

static tsrd_tenant *tenant_by_peer(tsrd_daemon *d, const tsrd_session *s)
{
    if (!s->peer_known)
        return NULL;
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        for (int i = 0; !t->removed && i < t->conf.n_uids; i++)
            if (t->conf.uids[i] == s->peer_uid)
                return t;
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        for (int i = 0; !t->removed && i < t->conf.n_gids; i++)
            if (t->conf.gids[i] == s->peer_gid)
                return t;
    return NULL;
}

/* The session's stored replies draw on its tenant's budget from its first
 * attributed request on: the tenant's replay_bytes quota, else the daemon-wide
 * replay_bytes_per_tenant (taken again on every request, so a reload applies). */
static void tenant_bind_replay(tsrd_daemon *d, tsrd_session *s, tsrd_tenant *t)
{
    t->replay.budget = (size_t)tsrd_tenant_replay_budget(d, t);
    if (s->replay.pool == NULL)
        tsrd_replay_set_pool(&s->replay, &t->replay, (size_t)d->config.replay_bytes_per_connection);
}

tsr_status tsrd_tenant_attribute_bytes(tsrd_daemon *d, tsrd_session *s, const uint8_t *auth,
                                       size_t auth_len, tsrd_tenant **out, tsr_error *err)
{
    *out = NULL;
    if (d->tenants == NULL) {
        /* No tenants configured: everything is the default tenant. */
        s->tenant = &d->default_tenant;
        *out = s->tenant;
        tenant_bind_replay(d, s, s->tenant);
        return TSR_OK;
    }
    tsrd_tenant *t = NULL;
    if (auth != NULL && auth_len > 0) {
        if (auth_len > TSRD_AUTH_MAX)
            return tsr_error_set(err, TSR_UNAUTHENTICATED,
                                 "auth: %zu bytes; a token has at most %d", auth_len,
                                 TSRD_AUTH_MAX);
        t = tenant_by_token(d, auth, auth_len);
        if (t == NULL)
            return tsr_error_set(err, TSR_UNAUTHENTICATED, "auth: the token is not recognised");
    } else {
        t = tenant_by_peer(d, s);
        if (t == NULL)
            return tsr_error_set(err, TSR_UNAUTHENTICATED,
                                 "no token, and the connection's peer credentials match no "
                                 "tenant");
    }
    if (s->tenant != NULL && s->tenant != t)
        return tsr_error_set(err, TSR_UNAUTHENTICATED,
                             "this connection belongs to another tenant; open a new one");
    s->tenant = t;
    *out = t;
    tenant_bind_replay(d, s, t);
    return TSR_OK;
}

tsr_status tsrd_tenant_attribute(tsrd_daemon *d, tsrd_session *s, const char *auth,
                                 tsrd_tenant **out, tsr_error *err)
{
    return tsrd_tenant_attribute_bytes(d, s, (const uint8_t *)auth, auth ? strlen(auth) : 0, out,
                                       err);
}

bool tsrd_tenant_caller_sees_all(tsrd_daemon *d, const tsrd_session *s, const uint8_t *auth,
                                 size_t auth_len)
{
    if (d->tenants == NULL)
        return true;
    const tsrd_tenant *t = NULL;
    if (auth != NULL && auth_len > 0)
        t = auth_len <= TSRD_AUTH_MAX ? tenant_by_token(d, auth, auth_len) : NULL;
    else if (s != NULL)
        t = tenant_by_peer(d, s);
    return t != NULL && tsrd_scope_sees_all(d, t);
}

uint64_t tsrd_tenant_replay_budget(const tsrd_daemon *d, const tsrd_tenant *t)
{
    return t->conf.quota.replay_bytes != 0 ? t->conf.quota.replay_bytes
                                           : d->config.replay_bytes_per_tenant;
}
