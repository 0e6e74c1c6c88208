/*
 * fleet.c — the fleet cache (fleet.h): the kernel cache's remote level on Redis,
 * and the arbiter's remote place for measured winners and verdicts (signed
 * text records, each under a key that names everything it depends on).
 *
 * Connections are pooled (taken by one thread for one lookup or publish, put
 * back when it worked, closed when it did not). Which keys this node may
 * publish is a small ring of the keys it looked up and found nothing usable
 * for: a node publishes only what it built, and a key dropped from the ring
 * (many lookups later) is simply not published, which costs other nodes one
 * build. Everything the daemon reads (stats, the degraded mark) sits behind
 * one mutex, never held across a command.
 */
#include "serve/fleet.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/constant_time.h>
#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>

#include "serve/redis.h"

#define FLEET_POOL 16     /* idle connections kept */
#define FLEET_PENDING 256 /* keys this node may publish */
#define FLEET_POLL_MS 20  /* between looks for an entry another node is building */

struct fleet_pending {
    tsr_fingerprint key;
    bool used;
};

struct tsrd_fleet {
    tsrd_redis_url url;
    tsrd_redis_tls *tls; /* rediss:// only */
    uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES];
    char prefix[64];
    char lease_owner[64];         /* this node's lease value: host, pid, random */
    char driver[64], toolkit[64]; /* what a verdict depends on besides region and candidate */
    uint64_t ttl_ms, max_entry_bytes, lease_ms;
    int timeout_ms;

    pthread_mutex_t lock;
    tsrd_redis_conn *idle[FLEET_POOL];
    int n_idle;
    struct fleet_pending pending[FLEET_PENDING];
    unsigned pending_next;
    int64_t retry_at_ms; /* no command before this after a failure */
    tsrd_fleet_stats stats;
};

/* Bucket bounds of the lookup latency, in seconds. */
static const double fleet_bounds[TSRD_FLEET_LATENCY_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     7.5,  10,
};

static int64_t fleet_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t fleet_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

tsr_status tsrd_fleet_open(const tsrd_fleet_config *cfg, tsrd_fleet **out, tsr_error *err)
{
    *out = NULL;
    if (cfg->url == NULL || cfg->key_file == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache: url and key_file go together");
    tsrd_fleet *f = calloc(1, sizeof *f);
    if (f == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "fleet cache");
    pthread_mutex_init(&f->lock, NULL);
    tsr_status st = tsrd_redis_url_parse(cfg->url, &f->url, err);
    if (st == TSR_OK) {
        st = tsr_kcache_key_file_read(cfg->key_file, f->mac_key, err);
        if (st != TSR_OK)
            tsr_error_prefix(err, "fleet_cache.key_file");
    }
    if (st == TSR_OK && f->url.tls)
        st = tsrd_redis_tls_open(cfg->tls_ca_file, &f->tls, err);
    if (st != TSR_OK) {
        tsrd_fleet_close(f);
        return st;
    }
    snprintf(f->prefix, sizeof f->prefix, "%s",
             cfg->prefix != NULL ? cfg->prefix : TSRD_FLEET_DEFAULT_PREFIX);
    f->ttl_ms = cfg->ttl_s * 1000;
    f->max_entry_bytes = cfg->max_entry_bytes;
    f->lease_ms = cfg->lease_ms;
    f->timeout_ms = (int)cfg->timeout_ms;
    char host[32] = "";
    gethostname(host, sizeof host - 1);
    uint32_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = (uint32_t)fleet_now_ns();
    snprintf(f->lease_owner, sizeof f->lease_owner, "%s:%ld:%08" PRIx32, host, (long)getpid(),
             nonce);
    *out = f;
    return TSR_OK;
}

void tsrd_fleet_close(tsrd_fleet *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->n_idle; i++)
        tsrd_redis_close(f->idle[i]);
    tsrd_redis_tls_close(f->tls);
    mbedtls_platform_zeroize(f->mac_key, sizeof f->mac_key);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void tsrd_fleet_get_stats(tsrd_fleet *f, tsrd_fleet_stats *out)
{
    pthread_mutex_lock(&f->lock);
    *out = f->stats;
    pthread_mutex_unlock(&f->lock);
}

void tsrd_fleet_describe(const tsrd_fleet *f, char *out, size_t size)
{
    snprintf(out, size, "%s://%s:%s/%d", f->url.tls ? "rediss" : "redis", f->url.host, f->url.port,
             f->url.db);
}

/* ---- connections and failures ---- */

/* Records a failed command or connect: counted, the degraded mark set with
 * where and why, and no command tried for TSRD_FLEET_RETRY_MS. The idle
 * connections are closed too: after a Redis restart or failover they are as
 * dead as the one that failed, and each would cost one more failure. */
static void fleet_failed(tsrd_fleet *f, const tsr_error *err)
{
    char where[320];
    tsrd_fleet_describe(f, where, sizeof where);
    tsrd_redis_conn *idle[FLEET_POOL];
    pthread_mutex_lock(&f->lock);
    f->stats.errors++;
    f->stats.degraded = true;
    snprintf(f->stats.degraded_why, sizeof f->stats.degraded_why, "%.80s: %.140s", where,
             err->message);
    f->retry_at_ms = fleet_now_ms() + TSRD_FLEET_RETRY_MS;
    int n = f->n_idle;
    memcpy(idle, f->idle, (size_t)n * sizeof idle[0]);
    f->n_idle = 0;
    pthread_mutex_unlock(&f->lock);
    for (int i = 0; i < n; i++)
        tsrd_redis_close(idle[i]);
}

/* A connection to use, or NULL (counted) while failures hold commands back or
 * when connecting fails. */
static tsrd_redis_conn *fleet_conn_take(tsrd_fleet *f)
{
    pthread_mutex_lock(&f->lock);
    if (fleet_now_ms() < f->retry_at_ms) {
        f->stats.skipped++;
        pthread_mutex_unlock(&f->lock);
        return NULL;
    }
    tsrd_redis_conn *c = f->n_idle > 0 ? f->idle[--f->n_idle] : NULL;
    pthread_mutex_unlock(&f->lock);
    if (c != NULL)
        return c;
    tsr_error err;
    /* The reply bound: an entry and its header. */
    size_t max_reply = (size_t)f->max_entry_bytes + 256;
    if (tsrd_redis_connect(&f->url, f->tls, f->timeout_ms, max_reply, &c, &err) == TSR_OK)
        return c;
    fleet_failed(f, &err);
    return NULL;
}

/* Puts c back after its commands worked (clearing the degraded mark), or
 * closes it after one failed with err (setting it). */
static void fleet_conn_give(tsrd_fleet *f, tsrd_redis_conn *c, const tsr_error *err)
{
    pthread_mutex_lock(&f->lock);
    if (err == NULL) {
        f->stats.degraded = false;
        f->stats.degraded_why[0] = '\0';
        if (f->n_idle < FLEET_POOL) {
            f->idle[f->n_idle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&f->lock);
    } else {
        pthread_mutex_unlock(&f->lock);
        fleet_failed(f, err);
    }
    tsrd_redis_close(c);
}

static void fleet_count(tsrd_fleet *f, uint64_t *counter)
{
    pthread_mutex_lock(&f->lock);
    (*counter)++;
    pthread_mutex_unlock(&f->lock);
}

static void fleet_redis_key(const tsrd_fleet *f, const char *what, const tsr_fingerprint *key,
                            char out[160])
{
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(key, hex);
    snprintf(out, 160, "%s%s:%s", f->prefix, what, hex);
}

/* One command of up to six arguments, each a string, or bytes where lens
 * (may be NULL) gives a non-zero length. An error reply is a failure. */
static tsr_status fleet_command(tsrd_fleet *f, tsrd_redis_conn *c, int argc, const char **argv,
                                const size_t *lens, redisReply **reply, tsr_error *err)
{
    size_t own[6];
    for (int i = 0; i < argc; i++)
        own[i] = lens != NULL && lens[i] != 0 ? lens[i] : strlen(argv[i]);
    tsr_status st = tsrd_redis_command(c, argc, argv, own, f->timeout_ms, reply, err);
    if (st == TSR_OK && (*reply)->type == REDIS_REPLY_ERROR) {
        st = tsr_error_set(err, TSR_UNAVAILABLE, "redis %s: %.*s", argv[0], (int)(*reply)->len,
                           (*reply)->str);
        freeReplyObject(*reply);
        *reply = NULL;
    }
    return st;
}

/* One command on a pooled connection, which goes back to the pool after it (a
 * failure closing the pool, as fleet_conn_give does): the reply, for the caller
 * to free, or NULL without a connection or when the command failed. */
static redisReply *fleet_pooled(tsrd_fleet *f, int argc, const char **argv, const size_t *lens)
{
    tsrd_redis_conn *c = fleet_conn_take(f);
    if (c == NULL)
        return NULL;
    redisReply *r = NULL;
    tsr_error err;
    tsr_status st = fleet_command(f, c, argc, argv, lens, &r, &err);
    fleet_conn_give(f, c, st == TSR_OK ? NULL : &err);
    if (st != TSR_OK && r != NULL) {
        freeReplyObject(r);
        r = NULL;
    }
    return r;
}

/* ---- what this node may publish ---- */

static void fleet_pending_add(tsrd_fleet *f, const tsr_fingerprint *key)
{
    pthread_mutex_lock(&f->lock);
    struct fleet_pending *p = &f->pending[f->pending_next++ % FLEET_PENDING];
    p->key = *key;
    p->used = true;
    pthread_mutex_unlock(&f->lock);
}

static bool fleet_pending_take(tsrd_fleet *f, const tsr_fingerprint *key)
{
    bool found = false;
    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < FLEET_PENDING && !found; i++) {
        struct fleet_pending *p = &f->pending[i];
        if (p->used && memcmp(p->key.bytes, key->bytes, TSR_FINGERPRINT_BYTES) == 0) {
            p->used = false;
            found = true;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return found;
}

static tsr_status fleet_lease_drop(tsrd_fleet *f, tsrd_redis_conn *c, const tsr_fingerprint *key,
                                   tsr_error *err);
static void fleet_lease_release(tsrd_fleet *f, const tsr_fingerprint *key);

/* ---- lookups ---- */

typedef enum fleet_look {
    FLEET_FOUND,   /* a good entry, in *data */
    FLEET_ABSENT,  /* no entry */
    FLEET_REFUSED, /* an entry that failed a check */
    FLEET_FAILED,  /* the command failed (err set) */
} fleet_look;

/* GETs key's entry and checks it. */
static fleet_look fleet_get(tsrd_fleet *f, tsrd_redis_conn *c, const tsr_fingerprint *key,
                            const tsr_kcache_meta *want, uint8_t **data, size_t *len,
                            tsr_kcache_meta *meta, double *build_ms, tsr_error *err)
{
    char rkey[160];
    fleet_redis_key(f, "kernel", key, rkey);
    const char *argv[] = {"GET", rkey};
    redisReply *r = NULL;
    if (fleet_command(f, c, 2, argv, NULL, &r, err) != TSR_OK)
        return FLEET_FAILED;
    fleet_look look = FLEET_ABSENT;
    if (r->type == REDIS_REPLY_STRING) {
        const uint8_t *payload;
        size_t plen;
        tsr_error why;
        look = FLEET_REFUSED;
        if (tsr_kcache_entry_open(f->mac_key, key, (const uint8_t *)r->str, r->len, &payload, &plen,
                                  meta, build_ms, &why) == TSR_OK &&
            strcmp(meta->candidate, want->candidate) == 0 && strcmp(meta->kind, want->kind) == 0 &&
            strcmp(meta->arch, want->arch) == 0 && plen <= f->max_entry_bytes &&
            (*data = malloc(plen > 0 ? plen : 1)) != NULL) {
            memcpy(*data, payload, plen);
            *len = plen;
            look = FLEET_FOUND;
        }
    } else if (r->type != REDIS_REPLY_NIL) {
        look = FLEET_REFUSED;
    }
    freeReplyObject(r);
    return look;
}

/* SET NX PX on key's lease: 1 taken by this node, 0 held by another, -1 failed. */
static int fleet_lease_take(tsrd_fleet *f, tsrd_redis_conn *c, const tsr_fingerprint *key,
                            tsr_error *err)
{
    char rkey[160], px[24];
    fleet_redis_key(f, "lease", key, rkey);
    snprintf(px, sizeof px, "%" PRIu64, f->lease_ms);
    const char *argv[] = {"SET", rkey, f->lease_owner, "NX", "PX", px};
    redisReply *r = NULL;
    if (fleet_command(f, c, 6, argv, NULL, &r, err) != TSR_OK)
        return -1;
    int taken = r->type == REDIS_REPLY_STATUS ? 1 : r->type == REDIS_REPLY_NIL ? 0 : -1;
    if (taken < 0)
        tsr_error_set(err, TSR_UNAVAILABLE, "redis SET NX: an unexpected reply");
    freeReplyObject(r);
    return taken;
}

static void fleet_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void fleet_latency(tsrd_fleet *f, uint64_t start_ns)
{
    uint64_t ns = fleet_now_ns() - start_ns;
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < TSRD_FLEET_LATENCY_BUCKETS && s > fleet_bounds[i])
        i++;
    pthread_mutex_lock(&f->lock);
    f->stats.latency_buckets[i]++;
    f->stats.latency_count++;
    f->stats.latency_sum_ns += ns;
    pthread_mutex_unlock(&f->lock);
}

static tsr_status fleet_fetch(void *ctx, const tsr_fingerprint *key, const tsr_kcache_meta *want,
                              uint8_t **data, size_t *len, tsr_kcache_meta *meta, double *build_ms)
{
    tsrd_fleet *f = ctx;
    tsrd_redis_conn *c = fleet_conn_take(f);
    if (c == NULL)
        return TSR_UNAVAILABLE;
    uint64_t start = fleet_now_ns();
    int64_t deadline = fleet_now_ms() + (int64_t)f->lease_ms;
    tsr_error err;
    bool failed = false, waited = false;
    tsr_status result = TSR_NOT_FOUND;
    for (;;) {
        fleet_look look = fleet_get(f, c, key, want, data, len, meta, build_ms, &err);
        if (look == FLEET_FAILED) {
            failed = true;
            break;
        }
        if (look == FLEET_FOUND) {
            fleet_count(f, &f->stats.hits);
            result = TSR_OK;
            break;
        }
        if (look == FLEET_REFUSED) {
            /* Built here and published over it once verified. */
            fleet_count(f, &f->stats.rejected);
            fleet_count(f, &f->stats.misses);
            fleet_pending_add(f, key);
            break;
        }
        int taken = fleet_lease_take(f, c, key, &err);
        if (taken < 0) {
            failed = true;
            break;
        }
        /* The entry may have been published between the GET and the lease
         * (its builder dropped the lease after writing it): look once more,
         * so that a node never builds what is already there. */
        if (taken == 1) {
            look = fleet_get(f, c, key, want, data, len, meta, build_ms, &err);
            if (look == FLEET_FAILED) {
                /* This node neither builds for the fleet nor publishes now:
                 * its lease would hold the others back for lease_ms. */
                fleet_lease_release(f, key);
                failed = true;
                break;
            }
            if (look == FLEET_FOUND) {
                fleet_count(f, &f->stats.hits);
                failed = fleet_lease_drop(f, c, key, &err) != TSR_OK;
                result = TSR_OK;
                break;
            }
        }
        if (taken == 1 || fleet_now_ms() >= deadline) {
            if (taken == 0)
                fleet_count(f, &f->stats.lease_timeouts);
            fleet_count(f, &f->stats.misses);
            fleet_pending_add(f, key);
            break;
        }
        if (!waited)
            fleet_count(f, &f->stats.lease_waits);
        waited = true;
        fleet_sleep_ms(FLEET_POLL_MS);
    }
    fleet_conn_give(f, c, failed ? &err : NULL);
    fleet_latency(f, start);
    return result;
}

tsr_kcache_remote tsrd_fleet_remote(tsrd_fleet *f)
{
    tsr_kcache_remote r = {.fetch = fleet_fetch, .ctx = f};
    return r;
}

/* ---- publishing ---- */

/* Deletes key's lease if this node still holds it (another node's, taken
 * after ours expired, stays). */
static tsr_status fleet_lease_drop(tsrd_fleet *f, tsrd_redis_conn *c, const tsr_fingerprint *key,
                                   tsr_error *err)
{
    static const char script[] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
        "return 0";
    char rkey[160];
    fleet_redis_key(f, "lease", key, rkey);
    const char *argv[] = {"EVAL", script, "1", rkey, f->lease_owner};
    redisReply *r = NULL;
    tsr_status st = fleet_command(f, c, 5, argv, NULL, &r, err);
    if (r != NULL)
        freeReplyObject(r);
    return st;
}

/* Drops key's lease if still this node's, on a connection of its own: the
 * one whose command just failed may be mid-reply. */
static void fleet_lease_release(tsrd_fleet *f, const tsr_fingerprint *key)
{
    tsrd_redis_conn *c = fleet_conn_take(f);
    if (c == NULL)
        return;
    tsr_error err;
    tsr_status st = fleet_lease_drop(f, c, key, &err);
    fleet_conn_give(f, c, st == TSR_OK ? NULL : &err);
}

void tsrd_fleet_publish(tsrd_fleet *f, const tsr_fingerprint *key, const tsr_kcache_blob *blob)
{
    if (f == NULL || blob == NULL || !fleet_pending_take(f, key))
        return;
    if (blob->len > f->max_entry_bytes) {
        fleet_count(f, &f->stats.publish_skipped_size);
        return;
    }
    uint8_t *entry = NULL;
    size_t len = 0;
    tsr_error err;
    if (tsr_kcache_entry_seal(f->mac_key, key, &blob->meta, blob->build_ms, blob->data, blob->len,
                              &entry, &len, &err) != TSR_OK) {
        fleet_count(f, &f->stats.publish_errors);
        return;
    }
    tsrd_redis_conn *c = fleet_conn_take(f);
    if (c == NULL) {
        free(entry);
        fleet_count(f, &f->stats.publish_errors);
        return;
    }
    char rkey[160], px[24];
    fleet_redis_key(f, "kernel", key, rkey);
    snprintf(px, sizeof px, "%" PRIu64, f->ttl_ms);
    const char *argv[] = {"SET", rkey, (const char *)entry, "PX", px};
    const size_t lens[] = {0, 0, len, 0, 0};
    redisReply *r = NULL;
    tsr_status st = fleet_command(f, c, 5, argv, lens, &r, &err);
    if (r != NULL)
        freeReplyObject(r);
    free(entry);
    if (st == TSR_OK)
        st = fleet_lease_drop(f, c, key, &err);
    fleet_count(f, st == TSR_OK ? &f->stats.publishes : &f->stats.publish_errors);
    fleet_conn_give(f, c, st == TSR_OK ? NULL : &err);
}

void tsrd_fleet_abandon(tsrd_fleet *f, const tsr_fingerprint *key)
{
    if (f == NULL || !fleet_pending_take(f, key))
        return;
    fleet_lease_release(f, key);
}

/* ---- signed records: measured winners and verdicts ---- */

bool tsrd_fleet_record_mac(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES], const char *tag,
                           const char *rkey, const char *body, size_t len, char hex[65])
{
    uint8_t mac[32];
    mbedtls_md_context_t ctx;
    mbedtls_md_init(&ctx);
    const mbedtls_md_info_t *info = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    bool ok = info != NULL && mbedtls_md_setup(&ctx, info, 1) == 0 &&
              mbedtls_md_hmac_starts(&ctx, mac_key, TSR_KCACHE_MAC_KEY_BYTES) == 0 &&
              mbedtls_md_hmac_update(&ctx, (const uint8_t *)tag, strlen(tag)) == 0 &&
              mbedtls_md_hmac_update(&ctx, (const uint8_t *)rkey, strlen(rkey) + 1) == 0 &&
              mbedtls_md_hmac_update(&ctx, (const uint8_t *)body, len) == 0 &&
              mbedtls_md_hmac_finish(&ctx, mac) == 0;
    mbedtls_md_free(&ctx);
    for (int i = 0; ok && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    return ok;
}

/* ---- measured winners ---- */

/* A winner's value: "NAME VERSION MEDIAN_MS " then 64 hex digits, the
 * HMAC-SHA-256 under the fleet key of a tag, the winner's key and that text,
 * so that a record cannot be moved to another key or changed. */
#define FLEET_WINNER_TAG "tessera winner\n"

static bool fleet_winner_mac(const tsrd_fleet *f, const char *key, const char *body, size_t len,
                             char hex[65])
{
    return tsrd_fleet_record_mac(f->mac_key, FLEET_WINNER_TAG, key, body, len, hex);
}

static bool fleet_winner_get(void *ctx, const char *key, char *name, uint32_t *version,
                             double *median_ms)
{
    tsrd_fleet *f = ctx;
    char rkey[256];
    snprintf(rkey, sizeof rkey, "%swinner:%s", f->prefix, key);
    const char *argv[] = {"GET", rkey};
    redisReply *r = fleet_pooled(f, 2, argv, NULL);
    if (r == NULL)
        return false;
    bool found = false;
    if (r->type == REDIS_REPLY_STRING && r->len > 64 && r->len < 256) {
        char text[256], hex[65], got[TSR_CANDIDATE_NAME_MAX];
        memcpy(text, r->str, r->len);
        text[r->len] = '\0';
        size_t body = r->len - 64;
        unsigned v = 0;
        double ms = 0;
        int used = 0;
        found = fleet_winner_mac(f, key, text, body, hex) &&
                mbedtls_ct_memcmp(hex, text + body, 64) == 0 &&
                sscanf(text, "%47s %u %lf %n", got, &v, &ms, &used) == 3 && (size_t)used == body &&
                ms >= 0;
        if (found) {
            snprintf(name, TSR_CANDIDATE_NAME_MAX, "%s", got);
            *version = v;
            *median_ms = ms;
        }
    }
    fleet_count(f, found                        ? &f->stats.winner_hits
                   : r->type == REDIS_REPLY_NIL ? &f->stats.misses
                                                : &f->stats.rejected);
    freeReplyObject(r);
    return found;
}

static void fleet_winner_put(void *ctx, const char *key, const char *name, uint32_t version,
                             double median_ms)
{
    tsrd_fleet *f = ctx;
    char text[256], rkey[256], px[24];
    int n = snprintf(text, sizeof text, "%s %u %.17g ", name, version, median_ms);
    if (n <= 0 || (size_t)n + 65 > sizeof text ||
        !fleet_winner_mac(f, key, text, (size_t)n, text + n))
        return;
    snprintf(rkey, sizeof rkey, "%swinner:%s", f->prefix, key);
    snprintf(px, sizeof px, "%" PRIu64, f->ttl_ms);
    const char *argv[] = {"SET", rkey, text, "PX", px};
    redisReply *r = fleet_pooled(f, 5, argv, NULL);
    if (r != NULL) {
        fleet_count(f, &f->stats.winner_publishes);
        freeReplyObject(r);
    }
}

/* ---- verdicts ---- */

void tsrd_fleet_set_versions(tsrd_fleet *f, const char *driver, const char *toolkit)
{
    snprintf(f->driver, sizeof f->driver, "%s", driver != NULL ? driver : "");
    snprintf(f->toolkit, sizeof f->toolkit, "%s", toolkit != NULL ? toolkit : "");
}

/* Appends name to out at *used, kept to [A-Za-z0-9._+-] ("-" when empty), so
 * that no name can add a '/' of its own to the key. */
static void fleet_key_part(char *out, size_t *used, const char *name, size_t max)
{
    size_t n = 0;
    for (; name[n] != '\0' && n < max && *used + 1 < TSRD_FLEET_VERDICT_KEY_MAX; n++) {
        char ch = name[n];
        bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '+' || ch == '-';
        out[(*used)++] = keep ? ch : '_';
    }
    if (n == 0 && *used + 1 < TSRD_FLEET_VERDICT_KEY_MAX)
        out[(*used)++] = '-';
    out[*used] = '\0';
}

void tsrd_fleet_verdict_key(const char *prefix, const char *driver, const char *toolkit,
                            const tsr_arbiter_verdict_key *key, char *out)
{
    char hex[TSR_FINGERPRINT_HEX], version[16];
    tsr_fingerprint_hex(key->fingerprint, hex);
    snprintf(version, sizeof version, "%" PRIu32, key->version);
    int n = snprintf(out, TSRD_FLEET_VERDICT_KEY_MAX, "%.63sverdict:", prefix);
    size_t used = n > 0 ? (size_t)n : 0;
    const char *parts[] = {key->arch, key->name, version, NULL, driver, toolkit};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (i > 0 && used + 1 < TSRD_FLEET_VERDICT_KEY_MAX)
            out[used++] = '/';
        if (parts[i] == NULL) {
            n = snprintf(out + used, TSRD_FLEET_VERDICT_KEY_MAX - used, "%c%s",
                         key->variant ? 'v' : 'r', hex);
            used += n > 0 ? (size_t)n : 0;
        } else {
            fleet_key_part(out, &used, parts[i], 63);
        }
    }
    out[used < TSRD_FLEET_VERDICT_KEY_MAX ? used : TSRD_FLEET_VERDICT_KEY_MAX - 1] = '\0';
}

/* The verdict of a complete verification: every output, or sampled with the
 * small-shape probes, and never the sampled check of a new shape alone. */
static bool fleet_verdict_complete(const tsr_verdict *v)
{
    return !v->variant_reused && (v->method == TSR_VERIFY_FULL ||
                                  (v->method == TSR_VERIFY_SAMPLED && v->small_probes > 0));
}

tsr_status tsrd_fleet_verdict_seal(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                   const char *rkey, const tsr_verdict *v, char *out, size_t *len,
                                   tsr_error *err)
{
    if (!fleet_verdict_complete(v))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "verdict record: not of a complete verification");
    size_t rlen = strnlen(v->reason, sizeof v->reason);
    int n =
        snprintf(out, TSRD_FLEET_VERDICT_RECORD_MAX,
                 "%s %d %" PRIu64 " %d %.17g %.17g %.17g %" PRIu64 " %" PRIu64 " %" PRId64
                 " %d %.17g %.17g %d %" PRIu64 " %d %zu:%.*s ",
                 TSRD_FLEET_VERDICT_FORMAT, v->pass ? 1 : 0, v->elements, v->probes,
                 v->max_abs_error, v->rel_error, v->bound, v->nan_mismatches, v->inf_mismatches,
                 v->first_bad_index, v->first_bad_probe, v->first_bad_got, v->first_bad_want,
                 (int)v->method, v->sampled_elements, v->small_probes, rlen, (int)rlen, v->reason);
    if (n <= 0 || (size_t)n + 65 > TSRD_FLEET_VERDICT_RECORD_MAX)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "verdict record: too long");
    if (!tsrd_fleet_record_mac(mac_key, TSRD_FLEET_VERDICT_TAG, rkey, out, (size_t)n, out + n))
        return tsr_error_set(err, TSR_INTERNAL, "verdict record: HMAC failed");
    *len = (size_t)n + 64;
    return TSR_OK;
}

tsr_status tsrd_fleet_verdict_open(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                   const char *rkey, const char *record, size_t len, tsr_verdict *v,
                                   tsr_error *err)
{
    if (len <= 64 || len >= TSRD_FLEET_VERDICT_RECORD_MAX)
        return tsr_error_set(err, TSR_CORRUPT, "verdict record: %zu bytes", len);
    char text[TSRD_FLEET_VERDICT_RECORD_MAX], hex[65];
    memcpy(text, record, len);
    text[len] = '\0';
    size_t body = len - 64;
    if (!tsrd_fleet_record_mac(mac_key, TSRD_FLEET_VERDICT_TAG, rkey, text, body, hex) ||
        mbedtls_ct_memcmp(hex, text + body, 64) != 0)
        return tsr_error_set(err, TSR_CORRUPT, "verdict record: the MAC does not verify");
    /* Past the MAC the record was written by a holder of the fleet key; its
     * fields are still checked as any input. */
    char format[16];
    int pass = 0, method = 0, used = 0;
    size_t rlen = 0;
    tsr_verdict got;
    memset(&got, 0, sizeof got);
    int fields =
        sscanf(text,
               "%15s %d %" SCNu64 " %d %lf %lf %lf %" SCNu64 " %" SCNu64 " %" SCNd64
               " %d %lf %lf %d %" SCNu64 " %d %zu:%n",
               format, &pass, &got.elements, &got.probes, &got.max_abs_error, &got.rel_error,
               &got.bound, &got.nan_mismatches, &got.inf_mismatches, &got.first_bad_index,
               &got.first_bad_probe, &got.first_bad_got, &got.first_bad_want, &method,
               &got.sampled_elements, &got.small_probes, &rlen, &used);
    if (fields != 17 || used <= 0 || strcmp(format, TSRD_FLEET_VERDICT_FORMAT) != 0)
        return tsr_error_set(err, TSR_CORRUPT, "verdict record: not a %s record",
                             TSRD_FLEET_VERDICT_FORMAT);
    if ((pass != 0 && pass != 1) || (method != TSR_VERIFY_FULL && method != TSR_VERIFY_SAMPLED) ||
        rlen >= sizeof got.reason || (size_t)used + rlen + 1 != body ||
        text[(size_t)used + rlen] != ' ' || memchr(text + used, '\0', rlen) != NULL)
        return tsr_error_set(err, TSR_CORRUPT, "verdict record: a field out of range");
    got.pass = pass == 1;
    got.method = (tsr_verify_method)method;
    memcpy(got.reason, text + used, rlen);
    got.reason[rlen] = '\0';
    if (!fleet_verdict_complete(&got))
        return tsr_error_set(err, TSR_CORRUPT, "verdict record: not of a complete verification");
    *v = got;
    return TSR_OK;
}

static bool fleet_verdict_get(void *ctx, const tsr_arbiter_verdict_key *key, tsr_verdict *out)
{
    tsrd_fleet *f = ctx;
    char rkey[TSRD_FLEET_VERDICT_KEY_MAX];
    tsrd_fleet_verdict_key(f->prefix, f->driver, f->toolkit, key, rkey);
    const char *argv[] = {"GET", rkey};
    redisReply *r = fleet_pooled(f, 2, argv, NULL);
    if (r == NULL)
        return false;
    /* A verdict nobody published is not a miss of the kernels' counters: the
     * node verifies, as it would without a fleet cache. */
    bool found = false;
    if (r->type == REDIS_REPLY_STRING) {
        tsr_error why;
        found = tsrd_fleet_verdict_open(f->mac_key, rkey, r->str, r->len, out, &why) == TSR_OK;
        fleet_count(f, found ? &f->stats.verdict_hits : &f->stats.rejected);
    } else if (r->type != REDIS_REPLY_NIL) {
        fleet_count(f, &f->stats.rejected);
    }
    freeReplyObject(r);
    return found;
}

static void fleet_verdict_put(void *ctx, const tsr_arbiter_verdict_key *key, const tsr_verdict *v)
{
    tsrd_fleet *f = ctx;
    char rkey[TSRD_FLEET_VERDICT_KEY_MAX], record[TSRD_FLEET_VERDICT_RECORD_MAX], px[24];
    size_t len = 0;
    tsr_error err;
    tsrd_fleet_verdict_key(f->prefix, f->driver, f->toolkit, key, rkey);
    if (tsrd_fleet_verdict_seal(f->mac_key, rkey, v, record, &len, &err) != TSR_OK)
        return;
    snprintf(px, sizeof px, "%" PRIu64, f->ttl_ms);
    /* A variant's failure at any shape withdraws its pass for good, as in one
     * node's verdict cache: a passing record never replaces a record. */
    bool only_new = key->variant && v->pass;
    const char *argv[] = {"SET", rkey, record, "PX", px, "NX"};
    const size_t lens[] = {0, 0, len, 0, 0, 0};
    redisReply *r = fleet_pooled(f, only_new ? 6 : 5, argv, lens);
    if (r == NULL)
        return;
    if (r->type == REDIS_REPLY_STATUS)
        fleet_count(f, &f->stats.verdict_publishes);
    freeReplyObject(r);
}

tsr_arbiter_remote tsrd_fleet_arbiter_remote(tsrd_fleet *f)
{
    tsr_arbiter_remote r = {.winner_get = fleet_winner_get,
                            .winner_put = fleet_winner_put,
                            .ctx = f,
                            .verdict_get = fleet_verdict_get,
                            .verdict_put = fleet_verdict_put};
    return r;
}

void tsrd_fleet_discard(tsrd_fleet *f, const tsr_fingerprint *key)
{
    if (f == NULL)
        return;
    char rkey[160];
    fleet_redis_key(f, "kernel", key, rkey);
    const char *argv[] = {"DEL", rkey};
    redisReply *r = fleet_pooled(f, 2, argv, NULL);
    if (r != NULL)
        freeReplyObject(r);
}
