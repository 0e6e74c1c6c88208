/*
 * scope.c — what one tenant may see of the shared kernel cache (scope.h).
 */
#include "serve/scope.h"

#include <string.h>

#include "tessera/fingerprint.h"

/* The longest a reply waits to look like a build: more than any compile the
 * cache has timed, and a bound should a stored time be absurd. */
#define SCOPE_MAX_PAD_MS 60000.0

bool tsrd_scope_sees_all(const tsrd_daemon *d, const tsrd_tenant *t)
{
    return t == NULL || t == &d->default_tenant || t->conf.admin;
}

uint64_t tsrd_scope_owner_of(const char *tenant_name)
{
    uint8_t digest[32];
    tsr_sha256(tenant_name, strlen(tenant_name), digest);
    uint64_t owner = 0;
    for (int i = 0; i < 8; i++)
        owner = owner << 8 | digest[i];
    return owner != TSR_KCACHE_ALL_OWNERS ? owner : 1;
}

uint64_t tsrd_scope_cache_owner(const tsrd_daemon *d, const tsrd_tenant *t)
{
    if (t == NULL || t == &d->default_tenant)
        return TSR_KCACHE_ALL_OWNERS;
    return t->cache_owner;
}

uint64_t tsrd_scope_cache_view(const tsrd_daemon *d, const tsrd_tenant *t)
{
    return tsrd_scope_sees_all(d, t) ? TSR_KCACHE_ALL_OWNERS : tsrd_scope_cache_owner(d, t);
}

tsr_status tsrd_scope_compiled(tsrd_daemon *d, const tsrd_tenant *t, tsrd_compiled *c,
                               tsr_status st, double *hold_ms)
{
    *hold_ms = 0;
    uint64_t owner = tsrd_scope_cache_owner(d, t);
    if (st != TSR_OK || owner == TSR_KCACHE_ALL_OWNERS || c->blob == NULL)
        return st;
    bool held = false;
    /* Out of memory leaves held false: the safe answer is the miss's. */
    tsr_kcache_claim(d->kcache, &c->key, owner, &held, NULL);
    if (held)
        return st;
    /* The verdict cache and the kernel cache are shared: whatever another
     * tenant's request left in them reads here as this request's own work. */
    c->decision.verdict_cached = false;
    if (c->level != TSR_KCACHE_MISS) {
        c->level = TSR_KCACHE_MISS;
        c->compile_ms = c->blob->build_ms;
        *hold_ms = c->blob->build_ms < SCOPE_MAX_PAD_MS ? c->blob->build_ms : SCOPE_MAX_PAD_MS;
    }
    return st;
}
