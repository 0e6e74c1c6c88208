/*
 * tenant.c — tenants from the config, and attributing a request to one.
 *
 * A request is attributed by its bearer token (compared as a SHA-256 hash, so
 * the config never holds a token itself) or, without one, by the credentials of
 * its ipc peer. Tenants are never freed before the daemon: buffers, kernels and
 * sessions point at them, and a reload that drops a tenant only stops it from
 * attributing anything new.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/tenant.h"

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

/* Compares two hex hashes without an early exit, so that the time taken says
 * nothing about how much of a guessed token's hash matched. */
static bool tenant_hash_equal(const char *a, const char *b)
{
    unsigned diff = 0;
    for (int i = 0; i < 64; i++)
        diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

static tsrd_tenant *tenant_by_token(tsrd_daemon *d, const char *auth)
{
    char hex[65];
    tsrd_token_hash(auth, strlen(auth), hex);
    tsrd_tenant *found = NULL;
    for (tsrd_tenant *t = d->tenants; t != NULL; t = t->next)
        for (int i = 0; !t->removed && i < t->conf.n_tokens; i++)
            if (tenant_hash_equal(hex, t->conf.token_sha256[i]) && found == NULL)
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

tsr_status tsrd_tenant_attribute(tsrd_daemon *d, tsrd_session *s, const char *auth,
                                 tsrd_tenant **out, tsr_error *err)
{
    *out = NULL;
    if (d->tenants == NULL) {
        /* No tenants configured: everything is the default tenant. */
        s->tenant = &d->default_tenant;
        *out = s->tenant;
        return TSR_OK;
    }
    tsrd_tenant *t = NULL;
    if (auth != NULL && auth[0] != '\0') {
        t = tenant_by_token(d, auth);
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
    return TSR_OK;
}
