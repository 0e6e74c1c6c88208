/*
 * handlers_info.c — hello, stats, cache list and cache evict.
 *
 * hello and stats answer from what the loop already holds, so they run on the
 * loop and a client's ping never waits behind a compile. The cache requests
 * may read or delete files and go to the worker pool. Stats and the cache
 * requests show a tenant only its own (serve/scope.h), unless it sees all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>
#include <unistd.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/metrics.h"
#include "serve/scope.h"

static tsr_status hello_execute(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    Tessera__V1__HelloReply *r = &job->body.hello;
    tessera__v1__hello_reply__init(r);
    r->daemon_version = TSRD_VERSION;
    r->protocol_version = TSRD_PROTOCOL_VERSION;
    r->backend = (char *)d->bops->name;
    r->driver_version = d->driver_version;
    r->compiler_version = d->compiler_version;
    r->tenant = job->session->tenant->name;
    r->max_message_bytes = d->config.max_message_bytes;
    r->daemon_uid = (uint32_t)geteuid();
    r->nng_version = (char *)nng_version();
    r->n_devices = (size_t)d->n_devices;
    r->devices = tsrd_job_alloc(job, (size_t)d->n_devices * sizeof *r->devices);
    for (int i = 0; i < d->n_devices; i++) {
        Tessera__V1__Device *dev = tsrd_job_alloc(job, sizeof *dev);
        if (dev == NULL || r->devices == NULL)
            return tsr_error_set(&job->err, TSR_NO_MEMORY, "hello: out of memory");
        Tessera__V1__Device dinit = TESSERA__V1__DEVICE__INIT;
        *dev = dinit;
        dev->index = d->devices[i].index;
        dev->name = d->devices[i].name;
        dev->arch = d->devices[i].arch;
        dev->memory_bytes = d->devices[i].memory_bytes;
        dev->multiprocessors = d->devices[i].multiprocessors;
        dev->memory_used_bytes = d->load[i].bytes;
        dev->buffers = (uint32_t)d->load[i].buffers;
        dev->queue_depth = (uint32_t)d->load[i].queued;
        r->devices[i] = dev;
    }
    TSRD_JOB_REPLY(job, hello, HELLO);
    return TSR_OK;
}

const tsrd_handler tsrd_handler_hello = {.execute = hello_execute};

static tsr_status stats_execute(tsrd_job *job)
{
    Tessera__V1__StatsReply *r = &job->body.stats;
    tessera__v1__stats_reply__init(r);
    tsr_status st = tsrd_metrics_fill(job->d, job, r, job->req->stats->prometheus);
    TSRD_JOB_REPLY(job, stats, STATS);
    return st;
}

const tsrd_handler tsrd_handler_stats = {.execute = stats_execute};

/* Where the daemon got an entry, as the listing names it: the cache's own
 * name for a load from disk or the fleet, "compiled" for one built here. */
static const char *cache_origin_name(tsr_kcache_level origin)
{
    if (origin == TSR_KCACHE_DISK || origin == TSR_KCACHE_FLEET)
        return tsr_kcache_level_name(origin);
    return "compiled";
}

/* sees_all: the listing is not scoped to one tenant, which alone may learn
 * where an entry came from (another tenant's request may have brought it). */
static tsr_status cache_entry_fill(tsrd_job *job, const tsr_kcache_entry_info *info, bool sees_all,
                                   Tessera__V1__CacheEntry **out)
{
    Tessera__V1__CacheEntry *e = tsrd_job_alloc(job, sizeof *e);
    char *key = tsrd_job_alloc(job, TSR_FINGERPRINT_HEX);
    char *candidate = tsrd_job_strdup(job, info->meta.candidate);
    char *kind = tsrd_job_strdup(job, info->meta.kind);
    char *arch = tsrd_job_strdup(job, info->meta.arch);
    if (e == NULL || key == NULL || candidate == NULL || kind == NULL || arch == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "cache_list: out of memory");
    Tessera__V1__CacheEntry init = TESSERA__V1__CACHE_ENTRY__INIT;
    *e = init;
    tsr_fingerprint_hex(&info->key, key);
    e->key = key;
    e->candidate = candidate;
    e->kind = kind;
    e->arch = arch;
    e->bytes = info->bytes;
    e->in_memory = info->in_memory != 0;
    e->on_disk = info->on_disk != 0;
    e->last_used_unix_ms = info->last_used_unix_ms;
    e->hits = info->hits;
    e->origin = sees_all ? (char *)cache_origin_name(info->origin) : "";
    *out = e;
    return TSR_OK;
}

/* The owner a cache request is scoped to, decided on the loop: it reads the
 * tenant's config, which a reload replaces. */
static tsr_status cache_scope_prepare(tsrd_job *job)
{
    uint64_t *view = job->state = tsrd_job_alloc(job, sizeof *view);
    if (view == NULL)
        return tsr_error_set(&job->err, TSR_NO_MEMORY, "cache: out of memory");
    *view = tsrd_scope_cache_view(job->d, job->session->tenant);
    return TSR_OK;
}

static tsr_status cache_list_execute(tsrd_job *job)
{
    Tessera__V1__CacheListReply *r = &job->body.cache_list;
    tessera__v1__cache_list_reply__init(r);
    tsr_kcache_entry_info *entries = NULL;
    size_t n = 0;
    const uint64_t *view = job->state;
    tsr_status st = tsr_kcache_list_owned(job->d->kcache, *view, &entries, &n, &job->err);
    if (st == TSR_OK) {
        r->entries = tsrd_job_alloc(job, n * sizeof *r->entries);
        if (r->entries == NULL)
            st = tsr_error_set(&job->err, TSR_NO_MEMORY, "cache_list: out of memory");
    }
    for (size_t i = 0; st == TSR_OK && i < n; i++, r->n_entries++)
        st = cache_entry_fill(job, &entries[i], *view == TSR_KCACHE_ALL_OWNERS, &r->entries[i]);
    free(entries);
    TSRD_JOB_REPLY(job, cache_list, CACHE_LIST);
    return st;
}

const tsrd_handler tsrd_handler_cache_list = {
    .flags = TSRD_HEAVY,
    .prepare = cache_scope_prepare,
    .execute = cache_list_execute,
};

static tsr_status cache_evict_execute(tsrd_job *job)
{
    const char *text = job->req->cache_evict->key;
    tsr_fingerprint key;
    bool all = strcmp(text, "all") == 0;
    if (!all && !tsr_fingerprint_parse(text, &key))
        return tsr_error_set(&job->err, TSR_INVALID_ARGUMENT,
                             "cache_evict.key: '%.80s' is neither 'all' nor 64 hex digits", text);
    Tessera__V1__CacheEvictReply *r = &job->body.cache_evict;
    tessera__v1__cache_evict_reply__init(r);
    /* Another tenant's key answers as an absent one: NOT_FOUND, the same words. */
    const uint64_t *view = job->state;
    tsr_status st =
        tsr_kcache_evict_owned(job->d->kcache, all ? NULL : &key, *view, &r->evicted, &job->err);
    if (st == TSR_NOT_FOUND)
        tsr_error_set(&job->err, TSR_NOT_FOUND, "cache_evict.key: no entry %s", text);
    TSRD_JOB_REPLY(job, cache_evict, CACHE_EVICT);
    return st;
}

const tsrd_handler tsrd_handler_cache_evict = {
    .flags = TSRD_HEAVY,
    .prepare = cache_scope_prepare,
    .execute = cache_evict_execute,
};
