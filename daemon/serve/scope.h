/*
 * scope.h — what one tenant may see of the kernel cache, which all tenants
 * share (docs/cache.md, "Tenants").
 *
 * The cache records which tenants hold each entry (tsr_kcache_claim). A tenant
 * lists, evicts and counts only its own entries; an admin tenant, and the one
 * default tenant of a daemon without tenants, see them all. A compile that is
 * served an entry the tenant does not hold yet reports what a miss would have
 * reported, so that no tenant learns that another compiled the same region.
 *
 * Threading: tsrd_scope_sees_all reads the tenant's config, which a reload
 * replaces: loop thread only. The others read only the tenant's name, fixed
 * when it was made, and the thread-safe kernel cache: any thread.
 */
#ifndef TESSERAD_SERVE_SCOPE_H
#define TESSERAD_SERVE_SCOPE_H

#include <stdbool.h>
#include <stdint.h>

#include "serve/compiled.h"
#include "serve/state.h"

/* Whether t may see every tenant's cache entries and per-tenant figures: the
 * default tenant (no tenants configured) and a tenant with "admin": true. */
bool tsrd_scope_sees_all(const tsrd_daemon *d, const tsrd_tenant *t);

/* The owner a tenant's cache entries are held under: a hash of its name, so
 * the same tenant keeps its entries across a reload (never
 * TSR_KCACHE_ALL_OWNERS). Computed once, when the tenant is made. */
uint64_t tsrd_scope_owner_of(const char *tenant_name);

/* The owner t's cache entries are held under (t->cache_owner);
 * TSR_KCACHE_ALL_OWNERS for the default tenant, which holds nothing of its own. */
uint64_t tsrd_scope_cache_owner(const tsrd_daemon *d, const tsrd_tenant *t);

/* The owner a listing or eviction for t is scoped to: TSR_KCACHE_ALL_OWNERS
 * when t sees all, else t's own. Loop thread. */
uint64_t tsrd_scope_cache_view(const tsrd_daemon *d, const tsrd_tenant *t);

/* After a compile for t that ended in st, with c as tsrd_engine_compile left
 * it. On success, records t as a holder of c's key; when t did not hold it
 * before, c is made to say what a miss would: level MISS, the entry's own build
 * time as compile_ms, verdict_cached false, and *hold_ms (otherwise 0) says how
 * long the reply should wait to take as long as a build would have (the job's
 * hold_ms: the dispatcher waits on a loop timer, not on a worker). Returns st.
 * Worker thread. */
tsr_status tsrd_scope_compiled(tsrd_daemon *d, const tsrd_tenant *t, tsrd_compiled *c,
                               tsr_status st, double *hold_ms);

#endif
