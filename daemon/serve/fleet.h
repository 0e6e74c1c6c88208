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
 * holder died), and builds on its own past that bound; a node whose look after
 * taking the lease fails drops the lease at once. The builder publishes
 * with tsrd_fleet_publish once the kernel passed verification, then drops its
 * lease; a build or verification that fails drops it (tsrd_fleet_abandon).
 *
 * Redis is never needed to serve: a failed or slow command (every one bounded
 * by timeout_ms) is a miss, counted, and marks the fleet cache degraded; for
 * FLEET_RETRY_MS after a failure no command is tried, so that a dead Redis
 * costs requests nothing. The next command that works clears the mark.
 *
 * Measured winners go the same way (tsrd_fleet_arbiter_remote): what one node
 * measured is the others' stored winner. So do the verdicts of complete
 * verifications: what one node verified, on the same driver and toolkit, the
 * others do not verify again.
 *
 * Threading: tsrd_fleet_open, tsrd_fleet_set_versions and tsrd_fleet_close on
 * the loop thread at start and end; the fetch (through the kernel cache), the winners' and
 * verdicts' calls (through the arbiter), tsrd_fleet_publish, tsrd_fleet_abandon and
 * tsrd_fleet_discard on worker threads, any number at once; tsrd_fleet_get_stats from any thread.
 * Blocking: fetch, publish and discard block on Redis for at most their bounds (fetch: lease_ms
 * plus a few commands' timeouts; the others: a few commands' timeouts); never call them from the
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

/* What the health reply says of a degraded fleet cache to a caller that may
 * not see all (serve/tenant.h): neither where Redis is nor the error. */
#define TSRD_FLEET_DEGRADED_SHORT "Redis commands fail"

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
    uint64_t verdict_hits;         /* verdicts fetched, checked and handed over */
    uint64_t verdict_publishes;    /* verdicts written */
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

/* The arbiter's remote place for measured winners and verdicts backed by f
 * (tsr_arbiter_set_remote): <prefix>winner:<arch>/<kind>/<dtype>/<bucket> holds
 * the candidate's name, version and median time with an HMAC-SHA-256 under
 * the fleet key; one that does not verify counts as rejected and is not used.
 * A winner still has to apply and pass verification on the node that reads
 * it. Verdicts: see tsrd_fleet_verdict_key below. */
tsr_arbiter_remote tsrd_fleet_arbiter_remote(tsrd_fleet *f);

/* Sets the versions this node's verdicts depend on besides the region and the
 * candidate: the driver's and the toolkit's (empty strings when the backend
 * has none). Call it once, after tsrd_fleet_open and before the arbiter's
 * first selection; the strings are copied (cut at 63 bytes). */
void tsrd_fleet_set_versions(tsrd_fleet *f, const char *driver, const char *toolkit);

/* Verdicts (through tsrd_fleet_arbiter_remote's verdict_get and verdict_put):
 * <prefix>verdict:<arch>/<name>/<version>/<r|v><fingerprint hex>/<driver>/
 * <toolkit>, r for a region's verdict, v for a variant's record, every name
 * kept to [A-Za-z0-9._+-] (anything else becomes '_'). The value is the
 * record: TSRD_FLEET_VERDICT_FORMAT, the verdict's fields, its reason
 * (length-prefixed), then 64 hex digits, the HMAC-SHA-256 under the fleet key
 * of TSRD_FLEET_VERDICT_TAG, the Redis key with its NUL and the text before the
 * MAC. Only a verdict of a complete verification is written and accepted (a
 * full one, or sampled with the small-shape probes; never variant_reused). A
 * record that does not check out counts as rejected and is not used: the node
 * verifies on its own. */
#define TSRD_FLEET_VERDICT_TAG "tessera verdict\n"
#define TSRD_FLEET_VERDICT_FORMAT "tsr-verdict-1"
#define TSRD_FLEET_VERDICT_KEY_MAX 512
#define TSRD_FLEET_VERDICT_RECORD_MAX 1024

/* key's Redis key under prefix for a node of driver and toolkit, into out
 * (TSRD_FLEET_VERDICT_KEY_MAX bytes). Pure function. */
void tsrd_fleet_verdict_key(const char *prefix, const char *driver, const char *toolkit,
                            const tsr_arbiter_verdict_key *key, char *out);

/* The record of v under the Redis key rkey, signed with mac_key, into out
 * (TSRD_FLEET_VERDICT_RECORD_MAX bytes) and *len. TSR_INVALID_ARGUMENT for a
 * verdict that is not of a complete verification (it is never shared). Pure. */
tsr_status tsrd_fleet_verdict_seal(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                   const char *rkey, const tsr_verdict *v, char *out, size_t *len,
                                   tsr_error *err);

/* Checks the record (len bytes) read from rkey and fills *v. TSR_CORRUPT,
 * saying why, for a record that is too short or long, whose MAC does not
 * verify under mac_key for rkey, whose format tag or fields are wrong, or that
 * is not of a complete verification. Pure. */
tsr_status tsrd_fleet_verdict_open(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                   const char *rkey, const char *record, size_t len, tsr_verdict *v,
                                   tsr_error *err);

/* The HMAC-SHA-256 under mac_key of tag, rkey with its NUL and body[0..len),
 * as 64 hex digits and a NUL into hex: the signature of the winners' and the
 * verdicts' records. False when mbedTLS fails. */
bool tsrd_fleet_record_mac(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES], const char *tag,
                           const char *rkey, const char *body, size_t len, char hex[65]);

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
