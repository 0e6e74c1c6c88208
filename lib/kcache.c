/*
 * kcache.c — the compiled-kernel cache (kcache.h, docs/cache.md).
 *
 * Two levels behind one mutex. The memory level is a hash map threaded on an LRU
 * list and bounded by payload bytes; its blobs are reference-counted so that an
 * entry evicted while a caller still holds it stays readable. The disk level is a
 * directory of one file per key, fanned out by the key's first two hex digits
 * (DIR/ab/ab12...), bounded by file bytes with least-recently-used eviction by
 * file modification time. Builds, disk reads and disk writes all run outside the
 * mutex; a per-key flight record makes concurrent requests for one key share a
 * single disk read or build.
 *
 * Several processes may share the directory. They coordinate only through the
 * file system: a file appears under its final name by rename(2) after fsync, so a
 * reader sees a whole file or none; every read is checked in full and a bad file
 * is deleted and rebuilt; last use is the file's mtime, which every process
 * updates on a hit, so their evictions agree roughly on what is cold. Byte counts
 * kept here are this process's view, corrected by a rescan whenever the directory
 * has to be trimmed.
 *
 * Whoever can write the directory is not trusted with what runs: every entry
 * carries an HMAC under a key kept in a file only this user can read, and an
 * entry name is opened only after lstat says it is a regular file, without
 * following a link or waiting on a FIFO.
 *
 * Holders (tsr_kcache_claim) live in a map of their own beside the entries, so
 * that an entry evicted from memory but kept on disk keeps them.
 */
#include "tessera/kcache.h"
#include "dlist_internal.h"
#include "kcache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/constant_time.h>
#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>

#define KCACHE_DEFAULT_MEMORY_BYTES (256ull << 20)
#define KCACHE_DEFAULT_DISK_BYTES (4ull << 30)

/* Temporary files younger than this may belong to a live writer in another
 * process; older ones are a crashed writer's leftovers. */
#define KCACHE_STALE_TMP_NS (60ll * 1000000000ll)

/* A memory hit refreshes the disk file's mtime at most this often, so that a key
 * hot in memory does not look cold on disk, without a syscall per hit. */
#define KCACHE_DISK_TOUCH_MS 60000

/* Longest directory name accepted; leaves room for "/ab/<64 hex>" and a
 * temporary suffix inside PATH_MAX. */
#define KCACHE_DIR_MAX (PATH_MAX - 128)

/* On-disk entry layout, all integers little-endian:
 *   0   4  magic "TSRK"
 *   4   4  format version (2)
 *   8   4  header length (192)
 *   12  4  reserved, zero
 *   16  32 key
 *   48  64 candidate, NUL-padded
 *   112 16 kind, NUL-padded
 *   128 16 arch, NUL-padded
 *   144 8  payload length
 *   152 8  build time, microseconds
 *   160 32 HMAC-SHA-256 (the cache's key) over bytes 0..159 followed by the payload
 *   192    payload
 * The MAC covers the header as well as the payload so that neither a stored
 * meta nor the binary can be changed, and is keyed so that it cannot be
 * recomputed by whoever changed them. Version 1 carried a plain SHA-256 in its
 * place, which anyone can recompute: such files are not trusted. */
#define KCACHE_MAGIC "TSRK"
#define KCACHE_FORMAT_VERSION TSRI_KCACHE_FORMAT_VERSION
#define KCACHE_FORMAT_UNAUTHENTICATED 1u
#define KCACHE_OFF_VERSION 4
#define KCACHE_OFF_HEADER_LEN 8
#define KCACHE_OFF_RESERVED 12
#define KCACHE_OFF_KEY 16
#define KCACHE_OFF_CANDIDATE 48
#define KCACHE_OFF_KIND 112
#define KCACHE_OFF_ARCH 128
#define KCACHE_OFF_PAYLOAD_LEN 144
#define KCACHE_OFF_BUILD_US 152
#define KCACHE_OFF_MAC TSRI_KCACHE_OFF_MAC
#define KCACHE_HEADER_BYTES TSRI_KCACHE_HEADER_BYTES
#define KCACHE_KEY_BYTES TSRI_KCACHE_KEY_BYTES
#define KCACHE_KEY_FILE "kcache.key"
_Static_assert(KCACHE_OFF_MAC + 32 == KCACHE_HEADER_BYTES, "the MAC ends the header");

struct kcache_blob {
    tsr_kcache_blob pub; /* first, so a public pointer converts back by a cast */
    atomic_uint refs;
};

struct kcache_entry {
    tsr_fingerprint key;
    struct kcache_blob *blob; /* the cache's own reference */
    uint64_t hits;
    int64_t last_used_ms;
    int64_t disk_touched_ms;
    struct kcache_entry *hash_next;
    struct kcache_entry *lru_prev; /* towards the most recently used */
    struct kcache_entry *lru_next; /* towards the least recently used */
};

/* One disk read or build in progress; callers asking for the same key wait on
 * it. The last thread to leave a finished flight frees it. */
struct kcache_flight {
    tsr_fingerprint key;
    struct kcache_flight *next;
    pthread_cond_t done_cond;
    bool done;
    unsigned waiters;
    tsr_status status;
    tsr_error err;
    struct kcache_blob *blob; /* holds one reference per waiter once done */
};

/* The charge covers both records and two hash slots (the table doubles when
 * entries outnumber buckets); what is left is for the allocator's headers. */
_Static_assert(sizeof(struct kcache_entry) + sizeof(struct kcache_blob) +
                       2 * sizeof(struct kcache_entry *) <=
                   TSRI_KCACHE_ENTRY_COST,
               "TSRI_KCACHE_ENTRY_COST covers an entry's records");

struct kcache_disk_file {
    tsr_fingerprint key;
    uint64_t bytes;
    int64_t mtime_ns;
};

/* One owner's hold on a key, with its own use of it: a listing scoped to the
 * owner shows these rather than the entry's, which count every owner's. */
struct kcache_holder {
    uint64_t owner;
    uint64_t hits;
    int64_t last_used_ms;
};

/* The holders of one key. */
struct kcache_claim {
    tsr_fingerprint key;
    struct kcache_claim *next;
    size_t n, cap;
    struct kcache_holder *holders;
};

struct tsr_kcache {
    pthread_mutex_t lock;
    char *dir;               /* NULL: memory only */
    uint64_t memory_limit;   /* on memory_charged */
    uint64_t memory_charged; /* payload plus TSRI_KCACHE_ENTRY_COST per entry */
    uint64_t disk_limit;
    struct kcache_entry **buckets;
    size_t bucket_count;
    struct kcache_entry *lru_head;
    struct kcache_entry *lru_tail;
    struct kcache_flight *flights;
    struct kcache_claim **claims; /* hash map of holders, claim_buckets slots */
    size_t claim_buckets;
    size_t n_claims;
    uint8_t mac_key[KCACHE_KEY_BYTES]; /* with dir: authenticates the entry files */
    bool key_ephemeral;                /* the key file could not be made */
    tsr_kcache_stats stats;
    tsr_kcache_remote remote; /* fetch NULL: no remote level */
    int64_t last_stamp_ns;
    bool disk_trimming;
};

const char *tsr_kcache_level_name(tsr_kcache_level level)
{
    static const char *const names[] = {[TSR_KCACHE_MISS] = "miss",
                                        [TSR_KCACHE_MEMORY] = "memory",
                                        [TSR_KCACHE_DISK] = "disk",
                                        [TSR_KCACHE_SHARED] = "shared",
                                        [TSR_KCACHE_FLEET] = "fleet"};
    return (unsigned)level < sizeof names / sizeof *names ? names[level] : "?";
}

/* ---- small helpers ---- */

static int64_t kcache_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int64_t kcache_now_ms(void)
{
    return kcache_now_ns() / 1000000;
}

/* A last-use time for a disk file. File systems stamp mtime from a coarse clock
 * (one tick), so this process sets it explicitly and keeps its own stamps
 * strictly increasing: two uses in a row always order correctly. */
static struct timespec kcache_stamp_locked(tsr_kcache *c)
{
    int64_t ns = kcache_now_ns();
    if (ns <= c->last_stamp_ns)
        ns = c->last_stamp_ns + 1;
    c->last_stamp_ns = ns;
    return (struct timespec){.tv_sec = ns / 1000000000ll, .tv_nsec = ns % 1000000000ll};
}

static struct timespec kcache_stamp(tsr_kcache *c)
{
    pthread_mutex_lock(&c->lock);
    struct timespec ts = kcache_stamp_locked(c);
    pthread_mutex_unlock(&c->lock);
    return ts;
}

static int kcache_hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1; /* upper case is not a name this cache writes */
}

/* Parses exactly n lower-case hex digits followed by the end of the string. */
static bool kcache_hex_parse(const char *s, uint8_t *out, size_t nbytes)
{
    for (size_t i = 0; i < nbytes; i++) {
        int hi = kcache_hex_digit(s[2 * i]);
        int lo = hi < 0 ? -1 : kcache_hex_digit(s[2 * i + 1]);
        if (lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return s[2 * nbytes] == '\0';
}

static int kcache_key_cmp(const tsr_fingerprint *a, const tsr_fingerprint *b)
{
    return memcmp(a->bytes, b->bytes, TSR_FINGERPRINT_BYTES);
}

static void kcache_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void kcache_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t kcache_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t kcache_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Copies a meta string into its fixed field, always NUL-terminated. */
static void kcache_meta_copy(tsr_kcache_meta *dst, const tsr_kcache_meta *src)
{
    if (src == NULL) {
        memset(dst, 0, sizeof *dst);
        return;
    }
    *dst = *src;
    dst->candidate[sizeof dst->candidate - 1] = '\0';
    dst->kind[sizeof dst->kind - 1] = '\0';
    dst->arch[sizeof dst->arch - 1] = '\0';
}

/* ---- blobs ---- */

static struct kcache_blob *kcache_blob_new(uint8_t *data, size_t len, const tsr_kcache_meta *meta,
                                           double build_ms)
{
    struct kcache_blob *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->pub.data = data;
    b->pub.len = len;
    b->pub.build_ms = build_ms;
    kcache_meta_copy(&b->pub.meta, meta);
    atomic_init(&b->refs, 1);
    return b;
}

void tsr_kcache_blob_retain(const tsr_kcache_blob *blob)
{
    if (blob == NULL)
        return;
    struct kcache_blob *b = (struct kcache_blob *)blob;
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void tsr_kcache_blob_release(const tsr_kcache_blob *blob)
{
    if (blob == NULL)
        return;
    struct kcache_blob *b = (struct kcache_blob *)blob;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free((void *)b->pub.data);
        free(b);
    }
}

/* ---- holders (callers hold c->lock) ---- */

static uint64_t kcache_key_hash(const tsr_fingerprint *key)
{
    /* Keys are SHA-256 digests in production, but tests and tools may hand in
     * patterned keys; FNV-1a over the whole key spreads either. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        h = (h ^ key->bytes[i]) * 0x100000001b3ull;
    return h;
}

/* The bucket of key in a hash table of count (a power of two) buckets: the
 * memory map's and the claims'. */
static size_t kcache_slot(const tsr_fingerprint *key, size_t count)
{
    return (size_t)(kcache_key_hash(key) & (count - 1));
}

/* Doubles the chained hash table heads (count of them, a power of two) of
 * items of type, each with a key member and its chain link in member next,
 * and moves every item to its bucket under the new count; a failed allocation
 * leaves the table as it was. One macro for the memory map and the claims,
 * whose items differ in type. */
#define KCACHE_TABLE_DOUBLE(type, heads, count, next)                                              \
    do {                                                                                           \
        size_t n_ = (count)*2;                                                                     \
        type **nb_ = calloc(n_, sizeof *nb_);                                                      \
        if (nb_ == NULL)                                                                           \
            break;                                                                                 \
        type **old_ = (heads);                                                                     \
        size_t old_n_ = (count);                                                                   \
        (heads) = nb_;                                                                             \
        (count) = n_;                                                                              \
        for (size_t i_ = 0; i_ < old_n_; i_++) {                                                   \
            type *it_ = old_[i_];                                                                  \
            while (it_) {                                                                          \
                type *next_ = it_->next;                                                           \
                size_t b_ = kcache_slot(&it_->key, n_);                                            \
                it_->next = nb_[b_];                                                               \
                nb_[b_] = it_;                                                                     \
                it_ = next_;                                                                       \
            }                                                                                      \
        }                                                                                          \
        free(old_);                                                                                \
    } while (0)

static struct kcache_claim *kcache_claim_find(tsr_kcache *c, const tsr_fingerprint *key)
{
    for (struct kcache_claim *k = c->claims[kcache_slot(key, c->claim_buckets)]; k; k = k->next)
        if (kcache_key_cmp(&k->key, key) == 0)
            return k;
    return NULL;
}

static struct kcache_holder *kcache_claim_holder(struct kcache_claim *k, uint64_t owner)
{
    for (size_t i = 0; k != NULL && i < k->n; i++)
        if (k->holders[i].owner == owner)
            return &k->holders[i];
    return NULL;
}

/* Doubles the claim buckets when claims outnumber them; a failed allocation
 * only leaves chains longer. */
static void kcache_claims_grow(tsr_kcache *c)
{
    if (c->n_claims < c->claim_buckets)
        return;
    KCACHE_TABLE_DOUBLE(struct kcache_claim, c->claims, c->claim_buckets, next);
}

/* Forgets every holder of key. */
static void kcache_claim_drop(tsr_kcache *c, const tsr_fingerprint *key)
{
    struct kcache_claim **pp = &c->claims[kcache_slot(key, c->claim_buckets)];
    while (*pp != NULL && kcache_key_cmp(&(*pp)->key, key) != 0)
        pp = &(*pp)->next;
    struct kcache_claim *k = *pp;
    if (k == NULL)
        return;
    *pp = k->next;
    free(k->holders);
    free(k);
    c->n_claims--;
}

static void kcache_claims_clear(tsr_kcache *c)
{
    for (size_t i = 0; i < c->claim_buckets; i++) {
        while (c->claims[i] != NULL) {
            struct kcache_claim *k = c->claims[i];
            c->claims[i] = k->next;
            free(k->holders);
            free(k);
        }
    }
    c->n_claims = 0;
}

/* Removes owner from key's holders; the number of holders left (0 when the
 * claim is gone, or owner held nothing). */
static size_t kcache_claim_release(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner)
{
    struct kcache_claim *k = kcache_claim_find(c, key);
    struct kcache_holder *h = kcache_claim_holder(k, owner);
    if (h == NULL)
        return k != NULL ? k->n : 0;
    *h = k->holders[--k->n];
    if (k->n > 0)
        return k->n;
    kcache_claim_drop(c, key);
    return 0;
}

/* ---- memory level (callers hold c->lock) ---- */

static struct kcache_entry *kcache_memory_find(tsr_kcache *c, const tsr_fingerprint *key)
{
    for (struct kcache_entry *e = c->buckets[kcache_slot(key, c->bucket_count)]; e;
         e = e->hash_next)
        if (kcache_key_cmp(&e->key, key) == 0)
            return e;
    return NULL;
}

static void kcache_lru_unlink(tsr_kcache *c, struct kcache_entry *e)
{
    TSRI_DLIST_UNLINK(c->lru_head, c->lru_tail, e, lru_prev, lru_next);
    e->lru_prev = e->lru_next = NULL;
}

static void kcache_lru_push_front(tsr_kcache *c, struct kcache_entry *e)
{
    TSRI_DLIST_PUSH(c->lru_head, c->lru_tail, e, lru_prev, lru_next);
}

/* Doubles the bucket array when entries outnumber buckets; a failed allocation
 * only leaves chains longer. */
static void kcache_memory_grow(tsr_kcache *c)
{
    if (c->stats.memory_entries < c->bucket_count)
        return;
    KCACHE_TABLE_DOUBLE(struct kcache_entry, c->buckets, c->bucket_count, hash_next);
}

/* Unlinks an entry from the map and the list and drops the cache's reference. */
static void kcache_memory_remove(tsr_kcache *c, struct kcache_entry *e)
{
    struct kcache_entry **pp = &c->buckets[kcache_slot(&e->key, c->bucket_count)];
    while (*pp != e)
        pp = &(*pp)->hash_next;
    *pp = e->hash_next;
    kcache_lru_unlink(c, e);
    c->stats.memory_entries--;
    c->stats.memory_bytes -= e->blob->pub.len;
    c->memory_charged -= e->blob->pub.len + TSRI_KCACHE_ENTRY_COST;
    tsr_kcache_blob_release(&e->blob->pub);
    free(e);
}

/* Evicts from the cold end until the charged bytes (payload plus the per-entry
 * bookkeeping) fit the bound. An entry larger than the whole bound is evicted
 * at once; its holder keeps its reference. */
static void kcache_memory_trim(tsr_kcache *c)
{
    while (c->memory_charged > c->memory_limit && c->lru_tail != NULL) {
        /* Without a directory the entry is gone altogether, and so are its
         * holders; with one it stays on disk, held. */
        if (c->dir == NULL)
            kcache_claim_drop(c, &c->lru_tail->key);
        kcache_memory_remove(c, c->lru_tail);
        c->stats.memory_evictions++;
    }
}

/* Adds blob under key (taking a reference for the cache) unless the key is there
 * already, which a concurrent lookup may have done; returns the entry or NULL
 * when it did not stay (no memory, or evicted at once by the bound). */
static struct kcache_entry *kcache_memory_insert(tsr_kcache *c, const tsr_fingerprint *key,
                                                 struct kcache_blob *blob, int64_t now_ms)
{
    struct kcache_entry *e = kcache_memory_find(c, key);
    if (e != NULL)
        return e;
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL; /* the caller still has its blob; only the caching is lost */
    e->key = *key;
    e->blob = blob;
    tsr_kcache_blob_retain(&blob->pub);
    e->last_used_ms = now_ms;
    e->disk_touched_ms = now_ms;
    size_t b = kcache_slot(key, c->bucket_count);
    e->hash_next = c->buckets[b];
    c->buckets[b] = e;
    kcache_lru_push_front(c, e);
    c->stats.memory_entries++;
    c->stats.memory_bytes += blob->pub.len;
    c->memory_charged += blob->pub.len + TSRI_KCACHE_ENTRY_COST;
    kcache_memory_trim(c);
    e = kcache_memory_find(c, key);
    kcache_memory_grow(c);
    return e;
}

/* ---- disk level (no lock held while touching files) ---- */

static void kcache_path(const tsr_kcache *c, const tsr_fingerprint *key, char path[PATH_MAX])
{
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(key, hex);
    snprintf(path, PATH_MAX, "%s/%.2s/%s", c->dir, hex, hex);
}

static void kcache_subdir_path(const tsr_kcache *c, const tsr_fingerprint *key, char path[PATH_MAX])
{
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(key, hex);
    snprintf(path, PATH_MAX, "%s/%.2s", c->dir, hex);
}

static bool kcache_write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads exactly len bytes at off; 1 on success, 0 at a premature end of file,
 * -1 on an I/O error. */
static int kcache_read_at(int fd, uint8_t *p, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            return 0;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 1;
}

static void kcache_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

tsr_status tsri_kcache_entry_mac(const uint8_t mac_key[TSRI_KCACHE_KEY_BYTES],
                                 const uint8_t *header, const uint8_t *payload, size_t payload_len,
                                 uint8_t out[32])
{
    mbedtls_md_context_t ctx;
    mbedtls_md_init(&ctx);
    const mbedtls_md_info_t *info = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    bool ok = info != NULL && mbedtls_md_setup(&ctx, info, 1) == 0 &&
              mbedtls_md_hmac_starts(&ctx, mac_key, KCACHE_KEY_BYTES) == 0 &&
              mbedtls_md_hmac_update(&ctx, header, KCACHE_OFF_MAC) == 0 &&
              (payload_len == 0 || mbedtls_md_hmac_update(&ctx, payload, payload_len) == 0) &&
              mbedtls_md_hmac_finish(&ctx, out) == 0;
    mbedtls_md_free(&ctx);
    return ok ? TSR_OK : TSR_NO_MEMORY; /* setup allocates; nothing else can fail */
}

/* Fills header (zeroed by the caller) for an entry of key, meta, build_ms and
 * payload, its MAC under mac_key included. */
static tsr_status kcache_header_make(const uint8_t mac_key[KCACHE_KEY_BYTES],
                                     const tsr_fingerprint *key, const tsr_kcache_meta *meta,
                                     double build_ms, const uint8_t *payload, size_t len,
                                     uint8_t header[KCACHE_HEADER_BYTES])
{
    memcpy(header, KCACHE_MAGIC, 4);
    kcache_put_u32(header + KCACHE_OFF_VERSION, KCACHE_FORMAT_VERSION);
    kcache_put_u32(header + KCACHE_OFF_HEADER_LEN, KCACHE_HEADER_BYTES);
    memcpy(header + KCACHE_OFF_KEY, key->bytes, TSR_FINGERPRINT_BYTES);
    memcpy(header + KCACHE_OFF_CANDIDATE, meta->candidate, 64);
    memcpy(header + KCACHE_OFF_KIND, meta->kind, 16);
    memcpy(header + KCACHE_OFF_ARCH, meta->arch, 16);
    kcache_put_u64(header + KCACHE_OFF_PAYLOAD_LEN, len);
    kcache_put_u64(header + KCACHE_OFF_BUILD_US, build_ms > 0 ? (uint64_t)(build_ms * 1e3) : 0);
    return tsri_kcache_entry_mac(mac_key, header, payload, len, header + KCACHE_OFF_MAC);
}

/* A header of the format before entries were authenticated: its checksum
 * could have been recomputed by anyone. */
static bool kcache_header_old(const uint8_t *h)
{
    return memcmp(h, KCACHE_MAGIC, 4) == 0 &&
           kcache_get_u32(h + KCACHE_OFF_VERSION) == KCACHE_FORMAT_UNAUTHENTICATED;
}

static bool kcache_field_terminated(const uint8_t *p, size_t n)
{
    return memchr(p, '\0', n) != NULL;
}

/* Checks a header against the file it came from; true when every field holds. */
static bool kcache_header_check(const uint8_t *h, const tsr_fingerprint *key, uint64_t file_bytes)
{
    return memcmp(h, KCACHE_MAGIC, 4) == 0 &&
           kcache_get_u32(h + KCACHE_OFF_VERSION) == KCACHE_FORMAT_VERSION &&
           kcache_get_u32(h + KCACHE_OFF_HEADER_LEN) == KCACHE_HEADER_BYTES &&
           kcache_get_u32(h + KCACHE_OFF_RESERVED) == 0 &&
           memcmp(h + KCACHE_OFF_KEY, key->bytes, TSR_FINGERPRINT_BYTES) == 0 &&
           kcache_field_terminated(h + KCACHE_OFF_CANDIDATE, 64) &&
           kcache_field_terminated(h + KCACHE_OFF_KIND, 16) &&
           kcache_field_terminated(h + KCACHE_OFF_ARCH, 16) &&
           kcache_get_u64(h + KCACHE_OFF_PAYLOAD_LEN) == file_bytes - KCACHE_HEADER_BYTES;
}

/* The header check has made sure every field holds a terminator. */
static void kcache_header_meta(const uint8_t *h, tsr_kcache_meta *meta)
{
    memcpy(meta->candidate, h + KCACHE_OFF_CANDIDATE, sizeof meta->candidate);
    memcpy(meta->kind, h + KCACHE_OFF_KIND, sizeof meta->kind);
    memcpy(meta->arch, h + KCACHE_OFF_ARCH, sizeof meta->arch);
}

tsr_status tsri_kcache_entry_parse(const uint8_t mac_key[TSRI_KCACHE_KEY_BYTES],
                                   const uint8_t *header, const uint8_t *payload,
                                   size_t payload_len, const tsr_fingerprint *key,
                                   tsr_kcache_meta *meta, double *build_ms)
{
    if (kcache_header_old(header))
        return TSR_UNAUTHENTICATED;
    if (!kcache_header_check(header, key, (uint64_t)payload_len + KCACHE_HEADER_BYTES))
        return TSR_CORRUPT;
    uint8_t mac[32];
    tsr_status st = tsri_kcache_entry_mac(mac_key, header, payload, payload_len, mac);
    if (st != TSR_OK)
        return st;
    /* In constant time: how long it takes says nothing of how much of a
     * forged MAC matched. */
    if (mbedtls_ct_memcmp(mac, header + KCACHE_OFF_MAC, sizeof mac) != 0)
        return TSR_UNAUTHENTICATED;
    kcache_header_meta(header, meta);
    if (build_ms != NULL)
        *build_ms = (double)kcache_get_u64(header + KCACHE_OFF_BUILD_US) / 1e3;
    return TSR_OK;
}

tsr_status tsr_kcache_entry_seal(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                 const tsr_fingerprint *key, const tsr_kcache_meta *meta,
                                 double build_ms, const uint8_t *payload, size_t len, uint8_t **out,
                                 size_t *out_len, tsr_error *err)
{
    *out = NULL;
    *out_len = 0;
    uint8_t *e = calloc(1, KCACHE_HEADER_BYTES + len);
    if (e == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "kernel cache entry of %zu bytes", len);
    if (len > 0)
        memcpy(e + KCACHE_HEADER_BYTES, payload, len);
    if (kcache_header_make(mac_key, key, meta, build_ms, payload, len, e) != TSR_OK) {
        free(e);
        return tsr_error_set(err, TSR_NO_MEMORY, "kernel cache entry: HMAC context");
    }
    *out = e;
    *out_len = KCACHE_HEADER_BYTES + len;
    return TSR_OK;
}

tsr_status tsr_kcache_entry_open(const uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES],
                                 const tsr_fingerprint *key, const uint8_t *entry, size_t len,
                                 const uint8_t **payload, size_t *payload_len,
                                 tsr_kcache_meta *meta, double *build_ms, tsr_error *err)
{
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(key, hex);
    if (entry == NULL || len < KCACHE_HEADER_BYTES)
        return tsr_error_set(err, TSR_CORRUPT,
                             "kernel cache entry %s: %zu bytes, shorter than its header", hex,
                             entry == NULL ? (size_t)0 : len);
    size_t plen = len - KCACHE_HEADER_BYTES;
    tsr_status st = tsri_kcache_entry_parse(mac_key, entry, entry + KCACHE_HEADER_BYTES, plen, key,
                                            meta, build_ms);
    if (st == TSR_UNAUTHENTICATED)
        return tsr_error_set(err, st, "kernel cache entry %s: its HMAC does not verify", hex);
    if (st != TSR_OK)
        return tsr_error_set(err, st, "kernel cache entry %s: %s", hex,
                             st == TSR_CORRUPT ? "a header field does not hold (magic, version, "
                                                 "key, names or payload length)"
                                               : tsr_strerror(st));
    *payload = entry + KCACHE_HEADER_BYTES;
    *payload_len = plen;
    return TSR_OK;
}

/* What the disk bound counts for an entry file: its size rounded up to whole
 * 4 KiB blocks, the space a small file really takes (a 300-byte entry holds a
 * block; counting bytes let a 64 MiB bound fill a gigabyte). */
#define KCACHE_DISK_BLOCK 4096u
static uint64_t kcache_disk_footprint(uint64_t file_bytes)
{
    return (file_bytes + KCACHE_DISK_BLOCK - 1) / KCACHE_DISK_BLOCK * KCACHE_DISK_BLOCK;
}

/* Deletes a file that failed its checks (unauthenticated: its MAC, or the lack
 * of one). The file is unlinked only while the name still points at the inode
 * that was read: another process may have just renamed a good entry over it. */
static void kcache_disk_discard(tsr_kcache *c, const char *path, int fd, bool unauthenticated)
{
    struct stat by_fd, by_name;
    bool same = fstat(fd, &by_fd) == 0 && lstat(path, &by_name) == 0 &&
                by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino;
    bool removed = same && unlink(path) == 0;
    pthread_mutex_lock(&c->lock);
    c->stats.corrupt_discarded++;
    if (unauthenticated)
        c->stats.auth_failures++;
    if (removed) {
        uint64_t bytes = kcache_disk_footprint((uint64_t)by_fd.st_size);
        c->stats.disk_bytes -= bytes < c->stats.disk_bytes ? bytes : c->stats.disk_bytes;
        if (c->stats.disk_entries > 0)
            c->stats.disk_entries--;
    }
    pthread_mutex_unlock(&c->lock);
}

/* Opens the entry file at path for reading, only when it is a regular file:
 * a FIFO in its place would block open() (and the worker with it) for ever, a
 * link would serve whatever it points at. lstat first, then an open that
 * neither follows a link nor waits, then the inode opened compared with the
 * one lstat saw. -1 when there is no such file; *st gets its status. */
static int kcache_entry_open(const char *path, struct stat *st)
{
    struct stat by_name;
    if (lstat(path, &by_name) != 0 || !S_ISREG(by_name.st_mode))
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_dev != by_name.st_dev ||
        st->st_ino != by_name.st_ino) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads and checks key's file. TSR_OK with a new blob (one reference) on
 * success; TSR_NOT_FOUND when there is no usable file, including one that failed
 * a check and was discarded, and a name that is not a regular file (skipped: the
 * next write renames a good entry over it). A hit refreshes the file's last-use
 * time. */
static tsr_status kcache_disk_read(tsr_kcache *c, const tsr_fingerprint *key,
                                   struct kcache_blob **out)
{
    char path[PATH_MAX];
    kcache_path(c, key, path);
    struct stat st;
    int fd = kcache_entry_open(path, &st);
    if (fd < 0)
        return TSR_NOT_FOUND;
    uint8_t header[KCACHE_HEADER_BYTES] = {0};
    uint8_t *payload = NULL;
    bool unauthenticated = false;
    uint64_t file_bytes = (uint64_t)st.st_size;
    if (file_bytes < KCACHE_HEADER_BYTES) {
        /* Short for this format, but a small entry of the older one is still
         * counted as what it is. */
        unauthenticated =
            file_bytes >= 8 && kcache_read_at(fd, header, 8, 0) == 1 && kcache_header_old(header);
        goto corrupt;
    }
    int r = kcache_read_at(fd, header, sizeof header, 0);
    if (r < 0)
        goto unusable;
    unauthenticated = r == 1 && kcache_header_old(header);
    if (r == 0 || !kcache_header_check(header, key, file_bytes))
        goto corrupt;
    size_t len = (size_t)(file_bytes - KCACHE_HEADER_BYTES);
    payload = malloc(len > 0 ? len : 1);
    if (payload == NULL)
        goto unusable;
    r = kcache_read_at(fd, payload, len, KCACHE_HEADER_BYTES);
    if (r < 0)
        goto unusable;
    if (r == 0)
        goto corrupt;
    tsr_kcache_meta meta;
    double build_ms = 0;
    tsr_status parsed =
        tsri_kcache_entry_parse(c->mac_key, header, payload, len, key, &meta, &build_ms);
    unauthenticated = parsed == TSR_UNAUTHENTICATED;
    if (parsed == TSR_CORRUPT || parsed == TSR_UNAUTHENTICATED)
        goto corrupt;
    if (parsed != TSR_OK)
        goto unusable;

    struct kcache_blob *b = kcache_blob_new(payload, len, &meta, build_ms);
    if (b == NULL)
        goto unusable;
    b->pub.origin = TSR_KCACHE_DISK;
    struct timespec ts[2];
    ts[0] = ts[1] = kcache_stamp(c);
    futimens(fd, ts); /* best effort: a stale mtime only makes eviction less exact */
    close(fd);
    *out = b;
    return TSR_OK;

corrupt:
    kcache_disk_discard(c, path, fd, unauthenticated);
unusable:
    /* An I/O error or a failed allocation says nothing about the file: keep it. */
    free(payload);
    close(fd);
    return TSR_NOT_FOUND;
}

/* Removes key's file; *bytes gets its size. False when there was none. */
static bool kcache_disk_remove(tsr_kcache *c, const tsr_fingerprint *key, uint64_t *bytes)
{
    char path[PATH_MAX];
    struct stat st;
    kcache_path(c, key, path);
    if (lstat(path, &st) != 0 || unlink(path) != 0)
        return false;
    *bytes = kcache_disk_footprint((uint64_t)st.st_size);
    return true;
}

/* Lists the entry files under the directory (sorted by nothing; none when the
 * cache has no directory). With remove_stale, also deletes temporary files
 * older than KCACHE_STALE_TMP_NS. */
static tsr_status kcache_disk_scan(tsr_kcache *c, bool remove_stale,
                                   struct kcache_disk_file **files, size_t *count, tsr_error *err)
{
    *files = NULL;
    *count = 0;
    if (c->dir == NULL)
        return TSR_OK;
    DIR *top = opendir(c->dir);
    if (top == NULL)
        return tsr_error_set(err, TSR_IO_ERROR, "cache directory '%s': %s", c->dir,
                             strerror(errno));
    int64_t stale_before = kcache_now_ns() - KCACHE_STALE_TMP_NS;
    size_t cap = 0;
    struct dirent *td;
    tsr_status st = TSR_OK;
    while (st == TSR_OK && (td = readdir(top)) != NULL) {
        uint8_t prefix;
        if (!kcache_hex_parse(td->d_name, &prefix, 1))
            continue;
        int sub_fd = openat(dirfd(top), td->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *sub = sub_fd >= 0 ? fdopendir(sub_fd) : NULL;
        if (sub == NULL) {
            if (sub_fd >= 0)
                close(sub_fd);
            continue;
        }
        struct dirent *d;
        while ((d = readdir(sub)) != NULL) {
            struct stat fst;
            tsr_fingerprint key;
            if (strncmp(d->d_name, ".tmp-", 5) == 0) {
                if (remove_stale &&
                    fstatat(dirfd(sub), d->d_name, &fst, AT_SYMLINK_NOFOLLOW) == 0 &&
                    (int64_t)fst.st_mtim.tv_sec * 1000000000ll + fst.st_mtim.tv_nsec < stale_before)
                    unlinkat(dirfd(sub), d->d_name, 0);
                continue;
            }
            /* Only names this cache writes count: a file under the wrong prefix
             * would never be read, so it is not an entry either. */
            if (!kcache_hex_parse(d->d_name, key.bytes, TSR_FINGERPRINT_BYTES) ||
                key.bytes[0] != prefix)
                continue;
            if (fstatat(dirfd(sub), d->d_name, &fst, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(fst.st_mode))
                continue;
            if (*count == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                struct kcache_disk_file *nf = realloc(*files, ncap * sizeof *nf);
                if (nf == NULL) {
                    st = tsr_error_set(err, TSR_NO_MEMORY, "cache directory scan");
                    break;
                }
                *files = nf;
                cap = ncap;
            }
            (*files)[(*count)++] = (struct kcache_disk_file){
                .key = key,
                .bytes = kcache_disk_footprint((uint64_t)fst.st_size),
                .mtime_ns = (int64_t)fst.st_mtim.tv_sec * 1000000000ll + fst.st_mtim.tv_nsec,
            };
        }
        closedir(sub);
    }
    closedir(top);
    if (st != TSR_OK) {
        free(*files);
        *files = NULL;
        *count = 0;
    }
    return st;
}

static int kcache_disk_file_by_age(const void *pa, const void *pb)
{
    const struct kcache_disk_file *a = pa, *b = pb;
    if (a->mtime_ns != b->mtime_ns)
        return a->mtime_ns < b->mtime_ns ? -1 : 1;
    return kcache_key_cmp(&a->key, &b->key);
}

static int kcache_disk_file_by_key(const void *pa, const void *pb)
{
    const struct kcache_disk_file *a = pa, *b = pb;
    return kcache_key_cmp(&a->key, &b->key);
}

/* Brings the directory under its bound. The directory is rescanned rather than
 * trusted to this process's counters, because other processes write to it too;
 * it is trimmed to 90% of the bound so that a full cache is not rescanned on
 * every write. One thread trims at a time; others skip, the trim covers them. */
static void kcache_disk_trim(tsr_kcache *c)
{
    pthread_mutex_lock(&c->lock);
    bool skip = c->disk_trimming || c->stats.disk_bytes <= c->disk_limit;
    if (!skip)
        c->disk_trimming = true;
    pthread_mutex_unlock(&c->lock);
    if (skip)
        return;

    struct kcache_disk_file *files;
    size_t count;
    uint64_t total = 0, evicted = 0;
    bool scanned = kcache_disk_scan(c, false, &files, &count, NULL) == TSR_OK;
    if (scanned) {
        for (size_t i = 0; i < count; i++)
            total += files[i].bytes;
        if (total > c->disk_limit) {
            uint64_t target = c->disk_limit - c->disk_limit / 10;
            qsort(files, count, sizeof *files, kcache_disk_file_by_age);
            for (size_t i = 0; i < count && total > target; i++) {
                char path[PATH_MAX];
                kcache_path(c, &files[i].key, path);
                if (unlink(path) == 0) {
                    total -= files[i].bytes;
                    /* Kept at the front (i >= evicted) for the holders below. */
                    files[evicted++].key = files[i].key;
                }
            }
        }
    }

    pthread_mutex_lock(&c->lock);
    if (scanned) {
        c->stats.disk_bytes = total;
        c->stats.disk_entries = count - evicted;
        c->stats.disk_evictions += evicted;
        /* A key gone from disk and not in memory is gone: so are its holders. */
        for (uint64_t i = 0; i < evicted; i++)
            if (kcache_memory_find(c, &files[i].key) == NULL)
                kcache_claim_drop(c, &files[i].key);
        free(files);
    }
    c->disk_trimming = false;
    pthread_mutex_unlock(&c->lock);
}

/* Writes key's file atomically: a temporary file in the final directory, written,
 * stamped, fsynced, renamed over the final name, then the directory fsynced so
 * the rename survives a crash. Failures are counted, never reported: the entry
 * is still served from memory. */
static void kcache_disk_write(tsr_kcache *c, const tsr_fingerprint *key,
                              const struct kcache_blob *b)
{
    char sub[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX];
    kcache_subdir_path(c, key, sub);
    kcache_path(c, key, path);

    uint8_t header[KCACHE_HEADER_BYTES] = {0};
    if (kcache_header_make(c->mac_key, key, &b->pub.meta, b->pub.build_ms, b->pub.data, b->pub.len,
                           header) != TSR_OK)
        goto failed;

    bool created_sub = false;
    if (mkdir(sub, 0755) == 0)
        created_sub = true;
    else if (errno != EEXIST)
        goto failed;

    uint64_t suffix;
    if (getrandom(&suffix, sizeof suffix, GRND_NONBLOCK) != (ssize_t)sizeof suffix)
        suffix = (uint64_t)kcache_now_ns() ^ (uint64_t)(uintptr_t)b;
    char hex[TSR_FINGERPRINT_HEX];
    tsr_fingerprint_hex(key, hex);
    snprintf(tmp, sizeof tmp, "%s/%.2s/.tmp-%ld-%016" PRIx64, c->dir, hex, (long)getpid(), suffix);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        goto failed;
    struct timespec ts[2];
    ts[0] = ts[1] = kcache_stamp(c);
    bool ok = kcache_write_all(fd, header, sizeof header) &&
              kcache_write_all(fd, b->pub.data, b->pub.len) && futimens(fd, ts) == 0 &&
              fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    struct stat old;
    bool replaced = ok && lstat(path, &old) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        goto failed;
    }
    kcache_fsync_dir(sub);
    if (created_sub)
        kcache_fsync_dir(c->dir);

    uint64_t bytes = kcache_disk_footprint(KCACHE_HEADER_BYTES + (uint64_t)b->pub.len);
    pthread_mutex_lock(&c->lock);
    c->stats.disk_bytes += bytes;
    if (replaced) {
        uint64_t old_bytes = kcache_disk_footprint((uint64_t)old.st_size);
        c->stats.disk_bytes -= old_bytes < c->stats.disk_bytes ? old_bytes : c->stats.disk_bytes;
    } else {
        c->stats.disk_entries++;
    }
    bool over = c->stats.disk_bytes > c->disk_limit;
    pthread_mutex_unlock(&c->lock);
    if (over)
        kcache_disk_trim(c);
    return;

failed:
    pthread_mutex_lock(&c->lock);
    c->stats.disk_write_failures++;
    pthread_mutex_unlock(&c->lock);
}

/* Refreshes the last-use time of key's file on a memory hit. */
static void kcache_disk_touch(tsr_kcache *c, const tsr_fingerprint *key, struct timespec stamp)
{
    char path[PATH_MAX];
    struct timespec ts[2] = {stamp, stamp};
    kcache_path(c, key, path);
    utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW); /* absent or foreign: ignore */
}

/* ---- open and close ---- */

static bool kcache_mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return false;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return false;
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return false;
    }
    return true;
}

/* Reads the key from an existing key file: 1 when read, 0 when there is none,
 * -1 (err set) when there is one that cannot be read or trusted. Trusted means
 * a regular file of exactly the key's size, owned by this user and neither
 * readable nor writable by anyone else: a key others can read lets them forge
 * entries, one others could have written may be theirs. */
static int kcache_key_read(const char *path, uint8_t key[KCACHE_KEY_BYTES], bool own,
                           tsr_error *err)
{
    /* own: the disk level's key, which the cache makes itself when missing;
     * otherwise a key the operator provides (the fleet key). */
    const char *what = own ? "cache key file" : "key file";
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0) {
        tsr_error_set(err, TSR_IO_ERROR, "%s '%s': %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (st.st_uid != geteuid())
        why = "owned by another user";
    else if ((st.st_mode & 077) != 0)
        why = own ? "others may read or write it (it must be mode 0600; delete it to make a new "
                    "key, which discards the cached entries)"
                  : "others may read or write it (it must be mode 0600)";
    else if (st.st_size != KCACHE_KEY_BYTES)
        why = "not a key (wrong size)";
    else if (kcache_read_at(fd, key, KCACHE_KEY_BYTES, 0) != 1)
        why = "cannot be read";
    close(fd);
    if (why == NULL)
        return 1;
    tsr_error_set(err, TSR_IO_ERROR, "%s '%s': %s", what, path, why);
    return -1;
}

tsr_status tsr_kcache_key_file_read(const char *path, uint8_t key[TSR_KCACHE_MAC_KEY_BYTES],
                                    tsr_error *err)
{
    if (path == NULL || path[0] == '\0')
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "key file: empty name");
    int r = kcache_key_read(path, key, false, err);
    if (r == 0)
        return tsr_error_set(err, TSR_IO_ERROR, "key file '%s': %s", path, strerror(ENOENT));
    return r == 1 ? TSR_OK : err != NULL ? err->code : TSR_IO_ERROR;
}

/* Writes a new random key to a temporary file beside path and links it into
 * place, which fails if another process made the key first: then theirs is the
 * one to use. 1 when this call made it, 0 when another did, -1 (err set). */
static int kcache_key_make(const char *path, uint8_t key[KCACHE_KEY_BYTES], tsr_error *err)
{
    char tmp[PATH_MAX];
    uint64_t suffix;
    for (size_t got = 0; got < KCACHE_KEY_BYTES;) {
        ssize_t n = getrandom(key + got, KCACHE_KEY_BYTES - got, 0);
        if (n < 0 && errno != EINTR) {
            tsr_error_set(err, TSR_IO_ERROR, "cache key: getrandom: %s", strerror(errno));
            return -1;
        }
        got += n > 0 ? (size_t)n : 0;
    }
    if (getrandom(&suffix, sizeof suffix, GRND_NONBLOCK) != (ssize_t)sizeof suffix)
        suffix = (uint64_t)kcache_now_ns();
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%016" PRIx64, path, (long)getpid(), suffix) >=
        (int)sizeof tmp) {
        tsr_error_set(err, TSR_INVALID_ARGUMENT, "cache key file '%s': name too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        tsr_error_set(err, TSR_IO_ERROR, "cache key file '%s': %s", tmp, strerror(errno));
        return -1;
    }
    bool ok =
        fchmod(fd, 0600) == 0 && kcache_write_all(fd, key, KCACHE_KEY_BYTES) && fsync(fd) == 0;
    int saved = errno;
    ok = close(fd) == 0 && ok;
    int made = ok && link(tmp, path) == 0 ? 1 : 0;
    if (ok && made == 0 && errno != EEXIST) {
        saved = errno;
        ok = false;
    }
    unlink(tmp);
    if (!ok) {
        tsr_error_set(err, TSR_IO_ERROR, "cache key file '%s': %s", path, strerror(saved));
        return -1;
    }
    if (made) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash != NULL) {
            *slash = '\0';
            kcache_fsync_dir(dir[0] != '\0' ? dir : "/");
        } else {
            kcache_fsync_dir(".");
        }
    }
    return made;
}

/* The key that authenticates the entry files: read from the key file, made
 * there first when there is none. A key file that cannot be read or trusted
 * fails the open; one that cannot be made (a full or read-only file system)
 * leaves this process with a key of its own, as the disk level is best effort:
 * its entries then fail the next process's check and are rebuilt. */
static tsr_status kcache_key_load(tsr_kcache *c, const char *key_file, tsr_error *err)
{
    char path[PATH_MAX];
    if (key_file != NULL && key_file[0] != '\0')
        snprintf(path, sizeof path, "%s", key_file);
    else
        snprintf(path, sizeof path, "%s/%s", c->dir, KCACHE_KEY_FILE);
    /* Twice at most: a key another process links in between is read next. */
    for (int attempt = 0; attempt < 2; attempt++) {
        int r = kcache_key_read(path, c->mac_key, true, err);
        if (r < 0)
            return err != NULL ? err->code : TSR_IO_ERROR;
        if (r == 0) {
            tsr_error made_err;
            r = kcache_key_make(path, c->mac_key, &made_err);
            if (r < 0) {
                c->key_ephemeral = true;
                return getrandom(c->mac_key, sizeof c->mac_key, 0) == (ssize_t)sizeof c->mac_key
                           ? TSR_OK
                           : tsr_error_set(err, made_err.code, "%s", made_err.message);
            }
        }
        if (r == 1)
            return TSR_OK;
    }
    return tsr_error_set(err, TSR_IO_ERROR, "cache key file '%s': made and removed meanwhile",
                         path);
}

tsr_status tsr_kcache_open(const tsr_kcache_options *opts, tsr_kcache **out, tsr_error *err)
{
    static const tsr_kcache_options defaults = {0};
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_open: out is NULL");
    *out = NULL;
    if (opts == NULL)
        opts = &defaults;
    if (opts->dir != NULL && (opts->dir[0] == '\0' || strlen(opts->dir) > KCACHE_DIR_MAX))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "cache directory: %s",
                             opts->dir[0] == '\0' ? "empty name" : "name too long");

    tsr_kcache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "kcache_open");
    c->memory_limit = opts->memory_bytes ? opts->memory_bytes : KCACHE_DEFAULT_MEMORY_BYTES;
    c->disk_limit = opts->disk_bytes ? opts->disk_bytes : KCACHE_DEFAULT_DISK_BYTES;
    c->bucket_count = 64;
    c->buckets = calloc(c->bucket_count, sizeof *c->buckets);
    c->claim_buckets = 64;
    c->claims = calloc(c->claim_buckets, sizeof *c->claims);
    if (opts->dir != NULL)
        c->dir = strdup(opts->dir);
    if (c->buckets == NULL || c->claims == NULL || (opts->dir != NULL && c->dir == NULL)) {
        free(c->buckets);
        free(c->claims);
        free(c->dir);
        free(c);
        return tsr_error_set(err, TSR_NO_MEMORY, "kcache_open");
    }
    pthread_mutex_init(&c->lock, NULL);
    if (opts->remote != NULL)
        c->remote = *opts->remote;

    if (c->dir != NULL) {
        if (!kcache_mkdir_p(c->dir)) {
            tsr_status st = tsr_error_set(err, TSR_IO_ERROR, "cache directory '%s': %s", c->dir,
                                          strerror(errno));
            tsr_kcache_close(c);
            return st;
        }
        tsr_status st = kcache_key_load(c, opts->key_file, err);
        if (st != TSR_OK) {
            tsr_kcache_close(c);
            return st;
        }
        struct kcache_disk_file *files;
        size_t count;
        st = kcache_disk_scan(c, true, &files, &count, err);
        if (st != TSR_OK) {
            tsr_kcache_close(c);
            return st;
        }
        for (size_t i = 0; i < count; i++)
            c->stats.disk_bytes += files[i].bytes;
        c->stats.disk_entries = count;
        free(files);
        /* A smaller bound than the last run's applies at once. */
        kcache_disk_trim(c);
    }
    *out = c;
    return TSR_OK;
}

void tsr_kcache_close(tsr_kcache *c)
{
    if (c == NULL)
        return;
    while (c->lru_head != NULL)
        kcache_memory_remove(c, c->lru_head);
    kcache_claims_clear(c);
    free(c->claims);
    free(c->buckets);
    free(c->dir);
    /* The key is gone with the cache, not left in freed memory. */
    mbedtls_platform_zeroize(c->mac_key, sizeof c->mac_key);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- lookups ---- */

/* The memory level of a lookup, called with c->lock held. On a hit: bumps the
 * entry, hands out a reference in *out, releases the lock, refreshes the disk
 * file's last use when that is due (outside the lock: it is a file system call)
 * and returns true. On a miss: returns false with the lock still held, so that
 * the caller can go on under it. */
static bool kcache_memory_hit_unlock(tsr_kcache *c, const tsr_fingerprint *key,
                                     const tsr_kcache_blob **out, tsr_kcache_level *level)
{
    struct kcache_entry *e = kcache_memory_find(c, key);
    if (e == NULL)
        return false;
    int64_t now = kcache_now_ms();
    kcache_lru_unlink(c, e);
    kcache_lru_push_front(c, e);
    e->hits++;
    e->last_used_ms = now;
    c->stats.memory_hits++;
    bool touch = c->dir != NULL && now - e->disk_touched_ms >= KCACHE_DISK_TOUCH_MS;
    struct timespec stamp = {0, 0};
    if (touch) {
        e->disk_touched_ms = now;
        stamp = kcache_stamp_locked(c);
    }
    tsr_kcache_blob_retain(&e->blob->pub);
    *out = &e->blob->pub;
    pthread_mutex_unlock(&c->lock);
    if (touch)
        kcache_disk_touch(c, key, stamp);
    if (level)
        *level = TSR_KCACHE_MEMORY;
    return true;
}

tsr_status tsr_kcache_lookup(tsr_kcache *c, const tsr_fingerprint *key, const tsr_kcache_blob **out,
                             tsr_kcache_level *level, tsr_error *err)
{
    if (c == NULL || key == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_lookup: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&c->lock);
    if (kcache_memory_hit_unlock(c, key, out, level))
        return TSR_OK;
    pthread_mutex_unlock(&c->lock);

    struct kcache_blob *b = NULL;
    tsr_status st = c->dir != NULL ? kcache_disk_read(c, key, &b) : TSR_NOT_FOUND;
    pthread_mutex_lock(&c->lock);
    if (st == TSR_OK) {
        c->stats.disk_hits++;
        struct kcache_entry *e = kcache_memory_insert(c, key, b, kcache_now_ms());
        if (e != NULL)
            e->hits++;
    } else {
        c->stats.misses++;
    }
    pthread_mutex_unlock(&c->lock);
    if (st != TSR_OK) {
        char hex[TSR_FINGERPRINT_HEX];
        tsr_fingerprint_hex(key, hex);
        return tsr_error_set(err, TSR_NOT_FOUND, "kernel cache: no entry %s", hex);
    }
    *out = &b->pub;
    if (level)
        *level = TSR_KCACHE_DISK;
    return TSR_OK;
}

static struct kcache_flight *kcache_flight_find(tsr_kcache *c, const tsr_fingerprint *key)
{
    for (struct kcache_flight *f = c->flights; f; f = f->next)
        if (kcache_key_cmp(&f->key, key) == 0)
            return f;
    return NULL;
}

static void kcache_flight_free(struct kcache_flight *f)
{
    pthread_cond_destroy(&f->done_cond);
    free(f);
}

/* Waits for another thread's flight; called and returns with c->lock held. */
static tsr_status kcache_flight_wait(tsr_kcache *c, struct kcache_flight *f,
                                     const tsr_kcache_blob **out, tsr_error *err)
{
    f->waiters++;
    c->stats.shared_waits++;
    while (!f->done)
        pthread_cond_wait(&f->done_cond, &c->lock);
    tsr_status st = f->status;
    if (st == TSR_OK)
        *out = &f->blob->pub; /* the leader took this waiter's reference */
    else if (err != NULL)
        *err = f->err;
    if (--f->waiters == 0)
        kcache_flight_free(f);
    return st;
}

/* Finishes a flight: caches a successful result, hands one reference to each
 * waiter and wakes them. Called with c->lock held. */
static void kcache_flight_finish(tsr_kcache *c, struct kcache_flight *f, tsr_status st,
                                 const tsr_error *berr, struct kcache_blob *b, bool leader_hit)
{
    struct kcache_flight **pp = &c->flights;
    while (*pp != f)
        pp = &(*pp)->next;
    *pp = f->next;

    f->done = true;
    f->status = st;
    if (st == TSR_OK) {
        f->blob = b;
        for (unsigned i = 0; i < f->waiters; i++)
            tsr_kcache_blob_retain(&b->pub);
        struct kcache_entry *e = kcache_memory_insert(c, &f->key, b, kcache_now_ms());
        if (e != NULL)
            e->hits += f->waiters + (leader_hit ? 1 : 0);
    } else {
        f->err = *berr;
    }
    if (f->waiters == 0)
        kcache_flight_free(f);
    else
        pthread_cond_broadcast(&f->done_cond);
}

/* Calls the build function and wraps its result; the error is always filled in
 * on failure, so that waiters get a message even from a terse builder. */
static tsr_status kcache_build(const tsr_fingerprint *key, const tsr_kcache_meta *meta,
                               tsr_kcache_build_fn build, void *ctx, struct kcache_blob **out,
                               tsr_error *berr)
{
    uint8_t *data = NULL;
    size_t len = 0;
    tsr_error_clear(berr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tsr_status st = build(ctx, &data, &len, berr);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double build_ms =
        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (st == TSR_OK && data == NULL && len > 0)
        st = tsr_error_set(berr, TSR_INTERNAL, "kernel build returned no data");
    if (st != TSR_OK) {
        if (berr->code != st || berr->message[0] == '\0') {
            char hex[TSR_FINGERPRINT_HEX];
            tsr_fingerprint_hex(key, hex);
            tsr_error_set(berr, st, "kernel build for %s failed: %s", hex, tsr_strerror(st));
        }
        return st;
    }
    if (data == NULL && (data = malloc(1)) == NULL)
        return tsr_error_set(berr, TSR_NO_MEMORY, "kernel cache blob");
    *out = kcache_blob_new(data, len, meta, build_ms);
    if (*out == NULL) {
        free(data);
        return tsr_error_set(berr, TSR_NO_MEMORY, "kernel cache blob");
    }
    return TSR_OK;
}

/* Asks the remote level for key after a disk miss: true with *out (origin
 * fleet) on a hit. */
static bool kcache_remote_fetch(tsr_kcache *c, const tsr_fingerprint *key,
                                const tsr_kcache_meta *meta, struct kcache_blob **out)
{
    if (c->remote.fetch == NULL)
        return false;
    uint8_t *data = NULL;
    size_t len = 0;
    tsr_kcache_meta got;
    double build_ms = 0;
    if (c->remote.fetch(c->remote.ctx, key, meta, &data, &len, &got, &build_ms) != TSR_OK)
        return false;
    if (data == NULL && (data = malloc(1)) == NULL)
        return false;
    *out = kcache_blob_new(data, len, &got, build_ms);
    if (*out == NULL) {
        free(data);
        return false;
    }
    (*out)->pub.origin = TSR_KCACHE_FLEET;
    return true;
}

tsr_status tsr_kcache_get_or_build(tsr_kcache *c, const tsr_fingerprint *key,
                                   const tsr_kcache_meta *meta, tsr_kcache_build_fn build,
                                   void *ctx, const tsr_kcache_blob **out, tsr_kcache_level *level,
                                   tsr_error *err)
{
    if (c == NULL || key == NULL || build == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_get_or_build: NULL argument");
    *out = NULL;

    pthread_mutex_lock(&c->lock);
    if (kcache_memory_hit_unlock(c, key, out, level))
        return TSR_OK;
    struct kcache_flight *f = kcache_flight_find(c, key);
    if (f != NULL) {
        tsr_status st = kcache_flight_wait(c, f, out, err);
        pthread_mutex_unlock(&c->lock);
        if (st == TSR_OK && level)
            *level = TSR_KCACHE_SHARED;
        return st;
    }
    f = calloc(1, sizeof *f);
    if (f == NULL) {
        pthread_mutex_unlock(&c->lock);
        return tsr_error_set(err, TSR_NO_MEMORY, "kernel cache flight");
    }
    f->key = *key;
    pthread_cond_init(&f->done_cond, NULL);
    f->next = c->flights;
    c->flights = f;
    pthread_mutex_unlock(&c->lock);

    /* This thread leads the flight: disk first, then the remote level, then
     * the build. */
    struct kcache_blob *b = NULL;
    tsr_kcache_level got = TSR_KCACHE_DISK;
    tsr_error berr;
    tsr_error_clear(&berr);
    tsr_status st = c->dir != NULL ? kcache_disk_read(c, key, &b) : TSR_NOT_FOUND;
    if (st != TSR_OK && kcache_remote_fetch(c, key, meta, &b)) {
        got = TSR_KCACHE_FLEET;
        st = TSR_OK;
    }
    if (st != TSR_OK) {
        got = TSR_KCACHE_MISS;
        st = kcache_build(key, meta, build, ctx, &b, &berr);
    }

    pthread_mutex_lock(&c->lock);
    if (got == TSR_KCACHE_DISK) {
        c->stats.disk_hits++;
    } else if (got == TSR_KCACHE_FLEET) {
        c->stats.fleet_hits++;
    } else {
        c->stats.misses++;
        c->stats.builds++;
        if (st != TSR_OK)
            c->stats.build_failures++;
    }
    kcache_flight_finish(c, f, st, &berr, b, got != TSR_KCACHE_MISS);
    pthread_mutex_unlock(&c->lock);

    if (st != TSR_OK) {
        if (err != NULL)
            *err = berr;
        return st;
    }
    /* Waiters are already served; the file is written after they wake. */
    if (got != TSR_KCACHE_DISK && c->dir != NULL)
        kcache_disk_write(c, key, b);
    *out = &b->pub;
    if (level)
        *level = got;
    return TSR_OK;
}

/* ---- listing, eviction, stats ---- */

static int kcache_fingerprint_cmp(const void *pa, const void *pb)
{
    return kcache_key_cmp(pa, pb);
}

static int kcache_info_by_key(const void *pa, const void *pb)
{
    const tsr_kcache_entry_info *a = pa, *b = pb;
    return kcache_key_cmp(&a->key, &b->key);
}

static int kcache_info_by_recency(const void *pa, const void *pb)
{
    const tsr_kcache_entry_info *a = pa, *b = pb;
    if (a->last_used_unix_ms != b->last_used_unix_ms)
        return a->last_used_unix_ms > b->last_used_unix_ms ? -1 : 1;
    return kcache_key_cmp(&a->key, &b->key);
}

/* Reads the header of a listed file for its meta and payload size; false when
 * it is not a well-formed header for key (a full check happens on use). */
static bool kcache_disk_peek(tsr_kcache *c, const struct kcache_disk_file *df,
                             tsr_kcache_meta *meta, uint64_t *payload_bytes)
{
    char path[PATH_MAX];
    uint8_t header[KCACHE_HEADER_BYTES];
    kcache_path(c, &df->key, path);
    struct stat st;
    int fd = kcache_entry_open(path, &st);
    if (fd < 0)
        return false;
    bool ok = (uint64_t)st.st_size >= KCACHE_HEADER_BYTES &&
              kcache_read_at(fd, header, sizeof header, 0) == 1 &&
              kcache_header_check(header, &df->key, (uint64_t)st.st_size);
    close(fd);
    if (ok) {
        kcache_header_meta(header, meta);
        *payload_bytes = (uint64_t)st.st_size - KCACHE_HEADER_BYTES;
    }
    return ok;
}

tsr_status tsr_kcache_list(tsr_kcache *c, tsr_kcache_entry_info **entries, size_t *count,
                           tsr_error *err)
{
    if (c == NULL || entries == NULL || count == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_list: NULL argument");
    *entries = NULL;
    *count = 0;

    struct kcache_disk_file *files;
    size_t nfiles;
    tsr_status st = kcache_disk_scan(c, false, &files, &nfiles, err);
    if (st != TSR_OK)
        return st;

    pthread_mutex_lock(&c->lock);
    size_t nmem = c->stats.memory_entries;
    tsr_kcache_entry_info *infos = calloc(nmem + nfiles + 1, sizeof *infos);
    if (infos == NULL) {
        pthread_mutex_unlock(&c->lock);
        free(files);
        return tsr_error_set(err, TSR_NO_MEMORY, "kcache_list");
    }
    size_t n = 0;
    for (struct kcache_entry *e = c->lru_head; e; e = e->lru_next, n++) {
        infos[n].key = e->key;
        infos[n].meta = e->blob->pub.meta;
        infos[n].bytes = e->blob->pub.len;
        infos[n].in_memory = 1;
        infos[n].last_used_unix_ms = e->last_used_ms;
        infos[n].hits = e->hits;
        infos[n].origin = e->blob->pub.origin;
    }
    pthread_mutex_unlock(&c->lock);

    /* Merge the disk's view; the memory rows stay sorted by key for the search. */
    qsort(infos, nmem, sizeof *infos, kcache_info_by_key);
    for (size_t i = 0; i < nfiles; i++) {
        int64_t mtime_ms = files[i].mtime_ns / 1000000;
        tsr_kcache_entry_info probe = {.key = files[i].key};
        tsr_kcache_entry_info *hit =
            bsearch(&probe, infos, nmem, sizeof *infos, kcache_info_by_key);
        if (hit != NULL) {
            hit->on_disk = 1;
            if (mtime_ms > hit->last_used_unix_ms)
                hit->last_used_unix_ms = mtime_ms;
            continue;
        }
        tsr_kcache_entry_info *row = &infos[n];
        row->key = files[i].key;
        if (!kcache_disk_peek(c, &files[i], &row->meta, &row->bytes)) {
            memset(row, 0, sizeof *row);
            continue;
        }
        row->on_disk = 1;
        row->origin = TSR_KCACHE_DISK;
        row->last_used_unix_ms = mtime_ms;
        n++;
    }
    free(files);
    qsort(infos, n, sizeof *infos, kcache_info_by_recency);
    *entries = infos;
    *count = n;
    return TSR_OK;
}

tsr_status tsr_kcache_evict(tsr_kcache *c, const tsr_fingerprint *key, uint32_t *evicted,
                            tsr_error *err)
{
    if (c == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_evict: NULL cache");
    if (evicted)
        *evicted = 0;
    uint64_t bytes;

    if (key != NULL) {
        pthread_mutex_lock(&c->lock);
        struct kcache_entry *e = kcache_memory_find(c, key);
        bool found = e != NULL;
        if (found)
            kcache_memory_remove(c, e);
        kcache_claim_drop(c, key);
        pthread_mutex_unlock(&c->lock);
        if (c->dir != NULL && kcache_disk_remove(c, key, &bytes)) {
            found = true;
            pthread_mutex_lock(&c->lock);
            c->stats.disk_bytes -= bytes < c->stats.disk_bytes ? bytes : c->stats.disk_bytes;
            if (c->stats.disk_entries > 0)
                c->stats.disk_entries--;
            pthread_mutex_unlock(&c->lock);
        }
        if (!found) {
            char hex[TSR_FINGERPRINT_HEX];
            tsr_fingerprint_hex(key, hex);
            return tsr_error_set(err, TSR_NOT_FOUND, "kernel cache: no entry %s", hex);
        }
        if (evicted)
            *evicted = 1;
        return TSR_OK;
    }

    /* Everything: the count is of distinct keys, so a key held in memory and on
     * disk counts once. */
    struct kcache_disk_file *files;
    size_t nfiles;
    tsr_status st = kcache_disk_scan(c, false, &files, &nfiles, err);
    if (st != TSR_OK)
        return st;
    /* Files this call removed keep their rows, sorted by key; the others are
     * dropped so that a memory entry is counted against removed files only. */
    size_t nremoved = 0;
    for (size_t i = 0; i < nfiles; i++)
        if (kcache_disk_remove(c, &files[i].key, &bytes))
            files[nremoved++] = files[i];
    if (nremoved > 0)
        qsort(files, nremoved, sizeof *files, kcache_disk_file_by_key);
    uint32_t removed = (uint32_t)nremoved;
    pthread_mutex_lock(&c->lock);
    while (c->lru_head != NULL) {
        struct kcache_entry *e = c->lru_head;
        struct kcache_disk_file probe = {.key = e->key};
        if (nremoved == 0 ||
            bsearch(&probe, files, nremoved, sizeof *files, kcache_disk_file_by_key) == NULL)
            removed++;
        kcache_memory_remove(c, e);
    }
    kcache_claims_clear(c);
    if (c->dir != NULL) {
        c->stats.disk_bytes = 0;
        c->stats.disk_entries = 0;
    }
    pthread_mutex_unlock(&c->lock);
    free(files);
    if (evicted)
        *evicted = removed;
    return TSR_OK;
}

/* ---- owners ---- */

tsr_status tsr_kcache_claim(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner, bool *held,
                            tsr_error *err)
{
    if (held != NULL)
        *held = false;
    if (c == NULL || key == NULL || owner == TSR_KCACHE_ALL_OWNERS)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_claim: %s",
                             owner == TSR_KCACHE_ALL_OWNERS ? "owner 0" : "NULL argument");
    int64_t now = kcache_now_ms();
    pthread_mutex_lock(&c->lock);
    struct kcache_claim *k = kcache_claim_find(c, key);
    struct kcache_holder *h = kcache_claim_holder(k, owner);
    if (h != NULL) {
        h->hits++;
        h->last_used_ms = now;
        pthread_mutex_unlock(&c->lock);
        if (held != NULL)
            *held = true;
        return TSR_OK;
    }
    if (k == NULL && (k = calloc(1, sizeof *k)) != NULL) {
        k->key = *key;
        size_t b = kcache_slot(key, c->claim_buckets);
        k->next = c->claims[b];
        c->claims[b] = k;
        c->n_claims++;
        kcache_claims_grow(c);
    }
    if (k != NULL && k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 2;
        struct kcache_holder *nh = realloc(k->holders, cap * sizeof *nh);
        if (nh != NULL) {
            k->holders = nh;
            k->cap = cap;
        }
    }
    bool added = k != NULL && k->n < k->cap;
    if (added)
        k->holders[k->n++] = (struct kcache_holder){.owner = owner, .last_used_ms = now};
    else if (k != NULL && k->n == 0)
        kcache_claim_drop(c, key);
    pthread_mutex_unlock(&c->lock);
    return added ? TSR_OK : tsr_error_set(err, TSR_NO_MEMORY, "kernel cache: out of memory");
}

tsr_status tsr_kcache_list_owned(tsr_kcache *c, uint64_t owner, tsr_kcache_entry_info **entries,
                                 size_t *count, tsr_error *err)
{
    tsr_status st = tsr_kcache_list(c, entries, count, err);
    if (st != TSR_OK || owner == TSR_KCACHE_ALL_OWNERS)
        return st;
    tsr_kcache_entry_info *rows = *entries;
    size_t n = *count, kept = 0;
    /* The keys present, sorted, for the pruning below. */
    tsr_fingerprint *present = malloc((n ? n : 1) * sizeof *present);
    if (present == NULL) {
        free(rows);
        *entries = NULL;
        *count = 0;
        return tsr_error_set(err, TSR_NO_MEMORY, "kcache_list");
    }
    for (size_t i = 0; i < n; i++)
        present[i] = rows[i].key;
    qsort(present, n, sizeof *present, kcache_fingerprint_cmp);

    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        struct kcache_holder *h = kcache_claim_holder(kcache_claim_find(c, &rows[i].key), owner);
        if (h == NULL)
            continue;
        rows[kept] = rows[i];
        rows[kept].hits = h->hits;
        rows[kept].last_used_unix_ms = h->last_used_ms;
        kept++;
    }
    /* Holders of keys in neither level (evicted by a bound, deleted by another
     * process) are forgotten here, so that the map stays about as large as the
     * cache. A key put into memory since the listing's snapshot stays held. */
    for (size_t b = 0; b < c->claim_buckets; b++) {
        struct kcache_claim *k = c->claims[b];
        while (k != NULL) {
            struct kcache_claim *next = k->next;
            if (bsearch(&k->key, present, n, sizeof *present, kcache_fingerprint_cmp) == NULL &&
                kcache_memory_find(c, &k->key) == NULL)
                kcache_claim_drop(c, &k->key);
            k = next;
        }
    }
    pthread_mutex_unlock(&c->lock);
    free(present);
    qsort(rows, kept, sizeof *rows, kcache_info_by_recency);
    *count = kept;
    return TSR_OK;
}

/* Whether key is in memory or has a regular file on disk. */
static bool kcache_present(tsr_kcache *c, const tsr_fingerprint *key)
{
    pthread_mutex_lock(&c->lock);
    bool found = kcache_memory_find(c, key) != NULL;
    pthread_mutex_unlock(&c->lock);
    if (found || c->dir == NULL)
        return found;
    char path[PATH_MAX];
    struct stat st;
    kcache_path(c, key, path);
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Drops owner's hold on one key; removes the key when no one holds it any
 * longer. True when owner held a key that was there. */
static bool kcache_release_one(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner)
{
    pthread_mutex_lock(&c->lock);
    bool held = kcache_claim_holder(kcache_claim_find(c, key), owner) != NULL;
    size_t left = held ? kcache_claim_release(c, key, owner) : 0;
    pthread_mutex_unlock(&c->lock);
    if (!held)
        return false;
    if (left > 0)
        return kcache_present(c, key);
    return tsr_kcache_evict(c, key, NULL, NULL) == TSR_OK;
}

tsr_status tsr_kcache_evict_owned(tsr_kcache *c, const tsr_fingerprint *key, uint64_t owner,
                                  uint32_t *evicted, tsr_error *err)
{
    if (owner == TSR_KCACHE_ALL_OWNERS)
        return tsr_kcache_evict(c, key, evicted, err);
    if (c == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "kcache_evict: NULL cache");
    if (evicted)
        *evicted = 0;
    if (key != NULL) {
        if (!kcache_release_one(c, key, owner)) {
            char hex[TSR_FINGERPRINT_HEX];
            tsr_fingerprint_hex(key, hex);
            return tsr_error_set(err, TSR_NOT_FOUND, "kernel cache: no entry %s", hex);
        }
        if (evicted)
            *evicted = 1;
        return TSR_OK;
    }
    /* Every key owner holds, collected first: releasing one changes the map. */
    pthread_mutex_lock(&c->lock);
    size_t n = 0;
    tsr_fingerprint *keys = malloc((c->n_claims ? c->n_claims : 1) * sizeof *keys);
    for (size_t b = 0; keys != NULL && b < c->claim_buckets; b++)
        for (struct kcache_claim *k = c->claims[b]; k != NULL; k = k->next)
            if (kcache_claim_holder(k, owner) != NULL)
                keys[n++] = k->key;
    pthread_mutex_unlock(&c->lock);
    if (keys == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "kcache_evict");
    uint32_t removed = 0;
    for (size_t i = 0; i < n; i++)
        removed += kcache_release_one(c, &keys[i], owner) ? 1 : 0;
    free(keys);
    if (evicted)
        *evicted = removed;
    return TSR_OK;
}

bool tsr_kcache_key_ephemeral(const tsr_kcache *c)
{
    return c != NULL && c->key_ephemeral;
}

void tsr_kcache_get_stats(tsr_kcache *c, tsr_kcache_stats *out)
{
    if (c == NULL || out == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

tsr_kcache_meta tsr_kcache_meta_of(const char *candidate, const char *kind, const char *arch)
{
    tsr_kcache_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.candidate, sizeof meta.candidate, "%s", candidate);
    snprintf(meta.kind, sizeof meta.kind, "%s", kind);
    snprintf(meta.arch, sizeof meta.arch, "%s", arch);
    return meta;
}
