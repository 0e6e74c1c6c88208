/*
 * fleet.h — the fleet cache: compiled kernels shared by every tesserad of a
 * fleet through Redis, as a level below the kernel cache's disk
 * (docs/cache.md, "Fleet level").
 *
 * A node that misses memory and disk asks Redis for the entry
 * (<prefix>kernel:<key hex>), in the disk format and authenticated under the
 * fleet key (HMAC-SHA-256, a key file every node of the fleet holds and Redis
 * never sees): an entry that fails any check a disk entry would fail, or whose
 * names differ from the ones asked for, is refused and the node builds. On a
 * miss the node takes a lease (<prefix>lease:<key hex>, SET NX PX lease_ms)
 * and builds; a node that finds the lease taken polls for the entry until the
 * lease's time is up, taking the lease itself should it expire first (its
 * holder died), and builds on its own past that bound. The builder publishes
 * with tsrd_fleet_publish once the kernel passed verification, then drops its
 * lease; a build or verification that fails drops it (tsrd_fleet_abandon).
 *
 * Redis is never needed to serve: a failed or slow command (every one bounded
 * by timeout_ms) is a miss, counted, and marks the fleet cache degraded; for
 * FLEET_RETRY_MS after a failure no command is tried, so that a dead Redis
 * costs requests nothing. The next command that works clears the mark.
 *
 * Measured winners go the same way (tsrd_fleet_arbiter_remote): what one node
 * measured is the others' stored winner.
 *
 * Threading: tsrd_fleet_open and tsrd_fleet_close on the loop thread at start
 * and end; the fetch (through the kernel cache), the winners' calls (through
 * the arbiter), tsrd_fleet_publish,
 * tsrd_fleet_abandon and tsrd_fleet_discard on worker threads, any number at once;
 * tsrd_fleet_get_stats from any thread. Blocking: fetch, publish and discard
 * block on Redis for at most their bounds (fetch: lease_ms plus one command's
 * timeout; the others: a few commands' timeouts); never call them from the
 * event loop. Ownership: the daemon owns the tsrd_fleet.
 */
#ifndef TESSERAD_SERVE_FLEET_H
#define TESSERAD_SERVE_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "tessera/arbiter.h"
#include "tessera/kcache.h"
#include "tessera/status.h"

/* How long after a failed command no other is tried. */
#define TSRD_FLEET_RETRY_MS 1000

/* Fleet cache latency buckets: 50 us to 10 s (fleet.c holds the bounds,
 * metrics.c their texts), and +Inf. */
#define TSRD_FLEET_LATENCY_BUCKETS 18

typedef struct tsrd_fleet tsrd_fleet;

typedef struct tsrd_fleet_stats {
    uint64_t hits;                 /* entries fetched, checked and used */
    uint64_t misses;               /* lookups Redis answered without a usable entry */
    uint64_t rejected;             /* entries refused: MAC, format, key or names */
    uint64_t errors;               /* commands that failed or timed out (connects included) */
    uint64_t skipped;              /* lookups and publishes not tried within TSRD_FLEET_RETRY_MS */
    uint64_t lease_waits;          /* lookups that found another node's lease and waited */
    uint64_t lease_timeouts;       /* of those, waits that ended with neither entry nor lease */
    uint64_t publishes;            /* entries written */
    uint64_t publish_errors;       /* entries that could not be written */
    uint64_t publish_skipped_size; /* entries over max_entry_bytes, not written */
    uint64_t winner_hits;          /* measured winners fetched, checked and handed over */
    uint64_t winner_publishes;     /* measured winners written */
    /* Lookups' time (the whole lookup, waits included), per bucket (not
     * cumulative), their number and sum. */
    uint64_t latency_buckets[TSRD_FLEET_LATENCY_BUCKETS + 1];
    uint64_t latency_count;
    uint64_t latency_sum_ns;
    bool degraded;          /* the last command failed */
    char degraded_why[240]; /* where and its error, "" when not degraded */
} tsrd_fleet_stats;

/* Opens the fleet cache of cfg (cfg->url set): parses the URL, reads the fleet
 * key file (tsr_kcache_key_file_read's rules) and, for rediss://, the CA file.
 * Does not connect: a Redis that is down at start leaves the daemon serving
 * and the fleet cache degraded. TSR_BAD_ATTRIBUTE for a bad URL, TSR_IO_ERROR
 * naming a key or CA file that cannot be read or trusted. */
tsr_status tsrd_fleet_open(const tsrd_fleet_config *cfg, tsrd_fleet **out, tsr_error *err);

/* The kernel cache's remote level backed by f (tsr_kcache_options.remote). */
tsr_kcache_remote tsrd_fleet_remote(tsrd_fleet *f);

/* The arbiter's remote place for measured winners backed by f
 * (tsr_arbiter_set_remote): <prefix>winner:<arch>/<kind>/<dtype>/<bucket> holds
 * the candidate's name, version and median time with an HMAC-SHA-256 under
 * the fleet key; one that does not verify counts as rejected and is not used.
 * A winner still has to apply and pass verification on the node that reads
 * it. */
tsr_arbiter_remote tsrd_fleet_arbiter_remote(tsrd_fleet *f);

/* Publishes blob as key's entry if this node looked key up and found no
 * usable entry (it built it): a node publishes only what it built, once.
 * Call it after the kernel passed verification. Failures are counted, never
 * returned. */
void tsrd_fleet_publish(tsrd_fleet *f, const tsr_fingerprint *key, const tsr_kcache_blob *blob);

/* Gives up publishing key (its build or verification failed): drops this
 * node's lease at once, so that other nodes waiting on it build without
 * waiting out the lease. */
void tsrd_fleet_abandon(tsrd_fleet *f, const tsr_fingerprint *key);

/* Deletes key's entry from Redis: an authenticated entry the backend refused
 * as made for another region (a fleet key that leaked, or a bug), so that no
 * node loads it again. */
void tsrd_fleet_discard(tsrd_fleet *f, const tsr_fingerprint *key);

void tsrd_fleet_get_stats(tsrd_fleet *f, tsrd_fleet_stats *out);

/* Where the fleet cache is, for logs: scheme, host, port and database, never
 * the password. */
void tsrd_fleet_describe(const tsrd_fleet *f, char *out, size_t size);

/* Closes every connection and forgets the key (safe on NULL). */
void tsrd_fleet_close(tsrd_fleet *f);

#endif
