/*
 * arbiter.c — candidate registry and selection policy (arbiter.h, docs/arbiter.md).
 *
 * The registry is one list of candidates in registration order; a candidate that
 * serves several kinds appears once and is filtered per kind at selection time.
 * Entries are allocated one by one and never removed, so tsr_arbiter_find can
 * hand out stable pointers and a selection can read a candidate's fields without
 * the lock once it has taken a snapshot of the list.
 *
 * A selection runs in three phases so that no callback is called with the lock
 * held: (1) under the lock, snapshot the kind's candidates and look up a measured
 * winner; (2) without it, ask `applies`, verify and time through the callbacks,
 * taking the lock only for short verdict-cache lookups and inserts; (3) under
 * the lock again, count the statistics and remember (and persist) a new measured
 * winner. Two concurrent selections may therefore verify the same candidate for
 * the same region twice; the cache keeps the first verdict and both are correct.
 *
 * tsr_arbiter_select and tsr_arbiter_explain share one engine (arbiter_run) that
 * fills a per-candidate slot array; select turns the chosen slot into a
 * decision, explain turns every slot into a report row.
 */
#include "tessera/arbiter.h"
#include "dlist_internal.h"
#include "stream_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARBITER_STORE_FILE "arbiter-winners.json"
#define ARBITER_STORE_FORMAT "tessera-arbiter-winners"
#define ARBITER_STORE_VERSION 1
#define ARBITER_ARCH_MAX 32
#define ARBITER_BUCKET_MAX 96
#define ARBITER_TIER_MAX 3
#define ARBITER_DECLINES "declines: "
#define ARBITER_REFERENCE_VERDICT "reference: not verified against itself"
#define ARBITER_SKIPPED_VERDICT "not verified: verify=false"
/* Verdicts are small (under 300 bytes) but a long-running daemon sees an open
 * set of regions; past this many the oldest verdict is dropped and its candidate
 * is simply verified again if that region comes back. */
#define ARBITER_VERDICT_CACHE_MAX 65536

enum arbiter_stat {
    ARBITER_STAT_WON = 0,
    ARBITER_STAT_FORCED,
    ARBITER_STAT_DECLINED,
    ARBITER_STAT_FAILED_VERIFICATION,
    ARBITER_STAT_UNVERIFIED,
    ARBITER_STAT_COUNT,
};

typedef struct arbiter_entry {
    tsr_candidate cand;
    uint64_t stats[TSR_KIND_COUNT][ARBITER_STAT_COUNT];
} arbiter_entry;

typedef struct arbiter_verdict_node {
    struct arbiter_verdict_node *next;  /* bucket chain */
    struct arbiter_verdict_node *older; /* insertion order, for eviction */
    struct arbiter_verdict_node *newer;
    uint64_t hash;
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version;
    tsr_fingerprint fp;
    char arch[ARBITER_ARCH_MAX];
    tsr_verdict verdict;
} arbiter_verdict_node;

/* A measured winner for (arch, kind, dtype, shape bucket). */
typedef struct arbiter_winner {
    char arch[ARBITER_ARCH_MAX];
    tsr_region_kind kind;
    tsr_dtype dtype;
    char bucket[ARBITER_BUCKET_MAX];
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version;
    double median_ms;
} arbiter_winner;

struct tsr_arbiter {
    pthread_mutex_t lock;
    char *store_dir; /* NULL: winners live in memory only */

    arbiter_entry **entries;
    size_t n_entries, cap_entries;

    arbiter_verdict_node **buckets;
    size_t n_buckets; /* a power of two */
    size_t n_verdicts;
    arbiter_verdict_node *oldest, *newest;

    arbiter_winner *winners;
    size_t n_winners, cap_winners;
    tsr_arbiter_remote remote; /* winner_get NULL: none */
    uint64_t verifications;    /* verify_fn and verify_shape_fn calls that gave a verdict */
};

/* ---- small helpers ---- */

const char *tsr_decision_reason_name(tsr_decision_reason reason)
{
    static const char *const names[] = {[TSR_REASON_FORCED] = "forced",
                                        [TSR_REASON_TIER] = "tier",
                                        [TSR_REASON_MEASURED] = "measured",
                                        [TSR_REASON_FALLBACK] = "fallback"};
    return (unsigned)reason < sizeof names / sizeof *names ? names[reason] : "?";
}

static bool arbiter_name_valid(const char *name, size_t max)
{
    return name[0] != '\0' && memchr(name, '\0', max) != NULL;
}

static void arbiter_copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

/* Appends printf-style text at *used, never past size; the buffer is cut, not
 * overrun, when the text does not fit. */
static void arbiter_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void arbiter_append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used = (size_t)n >= size - *used ? size : *used + (size_t)n;
}

static uint64_t arbiter_pow2(int64_t v)
{
    uint64_t p = 1;
    while (v > 0 && p < (uint64_t)v && p < (UINT64_C(1) << 62))
        p <<= 1;
    return p;
}

void tsr_arbiter_shape_bucket(const tsr_region *r, char *buf, size_t size)
{
    if (buf == NULL || size == 0)
        return;
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        snprintf(buf, size, "m%llun%lluk%llu", (unsigned long long)arbiter_pow2(r->u.matmul.m),
                 (unsigned long long)arbiter_pow2(r->u.matmul.n),
                 (unsigned long long)arbiter_pow2(r->u.matmul.k));
        return;
    case TSR_KIND_FUSED:
        snprintf(buf, size, "m%llun%lluk%llu", (unsigned long long)arbiter_pow2(r->u.fused.m),
                 (unsigned long long)arbiter_pow2(r->u.fused.n),
                 (unsigned long long)arbiter_pow2(r->u.fused.k));
        return;
    case TSR_KIND_GATED:
        snprintf(buf, size, "m%lluk%lluh%llu", (unsigned long long)arbiter_pow2(r->u.gated.m),
                 (unsigned long long)arbiter_pow2(r->u.gated.k),
                 (unsigned long long)arbiter_pow2(r->u.gated.h));
        return;
    case TSR_KIND_ATTENTION: {
        const tsr_attention_desc *d = &r->u.attention;
        snprintf(
            buf, size, "b%lluh%lluhkv%lluq%lluk%llud%lludv%lluc%d",
            (unsigned long long)arbiter_pow2(d->batch), (unsigned long long)arbiter_pow2(d->heads),
            (unsigned long long)arbiter_pow2(d->heads_kv),
            (unsigned long long)arbiter_pow2(d->seq_q), (unsigned long long)arbiter_pow2(d->seq_k),
            (unsigned long long)arbiter_pow2(d->head_dim),
            (unsigned long long)arbiter_pow2(d->head_dim_v), d->causal ? 1 : 0);
        return;
    }
    case TSR_KIND_POINTWISE: {
        const tsr_pointwise_desc *d = &r->u.pointwise;
        int64_t elements = 1;
        for (int i = 0; i < d->out_rank && i < TSR_MAX_RANK; i++)
            elements *= d->out_shape[i];
        snprintf(buf, size, "e%llu", (unsigned long long)arbiter_pow2(elements));
        return;
    }
    }
    snprintf(buf, size, "?");
}

/* ---- verdict cache (caller holds the lock) ---- */

static uint64_t arbiter_fnv(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static uint64_t arbiter_verdict_hash(const char *name, uint32_t version, const tsr_fingerprint *fp,
                                     const char *arch)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    h = arbiter_fnv(h, name, strlen(name) + 1);
    h = arbiter_fnv(h, &version, sizeof version);
    h = arbiter_fnv(h, fp->bytes, sizeof fp->bytes);
    return arbiter_fnv(h, arch, strlen(arch) + 1);
}

static arbiter_verdict_node *arbiter_verdict_find(tsr_arbiter *a, uint64_t hash, const char *name,
                                                  uint32_t version, const tsr_fingerprint *fp,
                                                  const char *arch)
{
    if (a->n_buckets == 0)
        return NULL;
    for (arbiter_verdict_node *n = a->buckets[hash & (a->n_buckets - 1)]; n; n = n->next) {
        if (n->hash == hash && n->version == version && strcmp(n->name, name) == 0 &&
            strcmp(n->arch, arch) == 0 && memcmp(n->fp.bytes, fp->bytes, sizeof fp->bytes) == 0)
            return n;
    }
    return NULL;
}

static void arbiter_verdict_unlink(tsr_arbiter *a, arbiter_verdict_node *node)
{
    arbiter_verdict_node **link = &a->buckets[node->hash & (a->n_buckets - 1)];
    while (*link != node)
        link = &(*link)->next;
    *link = node->next;
    TSRI_DLIST_UNLINK(a->oldest, a->newest, node, older, newer);
    a->n_verdicts--;
}

static bool arbiter_verdict_grow(tsr_arbiter *a)
{
    size_t n = a->n_buckets ? a->n_buckets * 2 : 64;
    arbiter_verdict_node **b = calloc(n, sizeof *b);
    if (b == NULL)
        return false;
    for (size_t i = 0; i < a->n_buckets; i++) {
        arbiter_verdict_node *node = a->buckets[i];
        while (node) {
            arbiter_verdict_node *next = node->next;
            node->next = b[node->hash & (n - 1)];
            b[node->hash & (n - 1)] = node;
            node = next;
        }
    }
    free(a->buckets);
    a->buckets = b;
    a->n_buckets = n;
    return true;
}

/* Inserts a verdict unless one is already there (a concurrent selection got
 * there first). A failed allocation only costs a later re-verification. */
static void arbiter_verdict_put(tsr_arbiter *a, const tsr_candidate *c, const tsr_fingerprint *fp,
                                const char *arch, const tsr_verdict *v)
{
    uint64_t hash = arbiter_verdict_hash(c->name, c->version, fp, arch);
    if (arbiter_verdict_find(a, hash, c->name, c->version, fp, arch) != NULL)
        return;
    if (a->n_verdicts >= a->n_buckets && !arbiter_verdict_grow(a))
        return;
    if (a->n_verdicts >= ARBITER_VERDICT_CACHE_MAX) {
        arbiter_verdict_node *old = a->oldest;
        arbiter_verdict_unlink(a, old);
        free(old);
    }
    arbiter_verdict_node *node = calloc(1, sizeof *node);
    if (node == NULL)
        return;
    node->hash = hash;
    arbiter_copy_text(node->name, sizeof node->name, c->name);
    node->version = c->version;
    node->fp = *fp;
    arbiter_copy_text(node->arch, sizeof node->arch, arch);
    node->verdict = *v;
    size_t b = hash & (a->n_buckets - 1);
    node->next = a->buckets[b];
    a->buckets[b] = node;
    TSRI_DLIST_PUSH(a->newest, a->oldest, node, newer, older);
    a->n_verdicts++;
}

/* Replaces whatever is stored under the key (a variant's record, whose
 * failure must win over an earlier pass). */
static void arbiter_verdict_set(tsr_arbiter *a, const tsr_candidate *c, const tsr_fingerprint *fp,
                                const char *arch, const tsr_verdict *v)
{
    uint64_t hash = arbiter_verdict_hash(c->name, c->version, fp, arch);
    arbiter_verdict_node *old = arbiter_verdict_find(a, hash, c->name, c->version, fp, arch);
    if (old != NULL) {
        old->verdict = *v;
        return;
    }
    arbiter_verdict_put(a, c, fp, arch, v);
}

/* ---- variants ---- */

tsr_status tsr_candidate_variant(const tsr_candidate *c, const tsr_region *r, const char *arch,
                                 tsr_variant *v, tsr_fingerprint *out, tsr_error *err)
{
    if (c == NULL || r == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "candidate variant: NULL argument");
    tsr_variant own;
    if (v == NULL)
        v = &own;
    memset(v, 0, sizeof *v);
    if (c->variant != NULL)
        c->variant(c, r, arch != NULL ? arch : "", v);
    return tsr_region_variant_fingerprint(r, v, out, err);
}

/* A variant's record lives in the verdict cache under a key no region's
 * fingerprint can take: the SHA-256 of a tag and the variant's fingerprint. */
static void arbiter_variant_record_key(const tsr_fingerprint *variant, tsr_fingerprint *out)
{
    static const char tag[24] = "tessera verified variant";
    uint8_t buf[sizeof tag + TSR_FINGERPRINT_BYTES];
    memcpy(buf, tag, sizeof tag);
    memcpy(buf + sizeof tag, variant->bytes, TSR_FINGERPRINT_BYTES);
    tsr_sha256(buf, sizeof buf, out->bytes);
}

/* ---- measured winners and their store file ---- */

static arbiter_winner *arbiter_winner_find(tsr_arbiter *a, const char *arch, tsr_region_kind kind,
                                           tsr_dtype dtype, const char *bucket)
{
    for (size_t i = 0; i < a->n_winners; i++) {
        arbiter_winner *w = &a->winners[i];
        if (w->kind == kind && w->dtype == dtype && strcmp(w->arch, arch) == 0 &&
            strcmp(w->bucket, bucket) == 0)
            return w;
    }
    return NULL;
}

static bool arbiter_winner_put(tsr_arbiter *a, const arbiter_winner *w)
{
    arbiter_winner *old = arbiter_winner_find(a, w->arch, w->kind, w->dtype, w->bucket);
    if (old != NULL) {
        *old = *w;
        return true;
    }
    if (a->n_winners == a->cap_winners) {
        size_t cap = a->cap_winners ? a->cap_winners * 2 : 16;
        arbiter_winner *grown = realloc(a->winners, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        a->winners = grown;
        a->cap_winners = cap;
    }
    a->winners[a->n_winners++] = *w;
    return true;
}

static bool arbiter_json_text(const cJSON *obj, const char *key, char *dst, size_t size)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(item) || item->valuestring[0] == '\0' || strlen(item->valuestring) >= size)
        return false;
    arbiter_copy_text(dst, size, item->valuestring);
    return true;
}

/* Reads one stored winner; false (and the entry is skipped) when any field is
 * missing or out of range, so one bad row does not cost the others. */
static bool arbiter_winner_from_json(const cJSON *row, arbiter_winner *w)
{
    char kind[16], dtype[8];
    memset(w, 0, sizeof *w);
    if (!arbiter_json_text(row, "arch", w->arch, sizeof w->arch) ||
        !arbiter_json_text(row, "kind", kind, sizeof kind) ||
        !arbiter_json_text(row, "dtype", dtype, sizeof dtype) ||
        !arbiter_json_text(row, "bucket", w->bucket, sizeof w->bucket) ||
        !arbiter_json_text(row, "candidate", w->name, sizeof w->name))
        return false;
    if (!tsr_region_kind_parse(kind, &w->kind) || !tsr_dtype_parse(dtype, &w->dtype))
        return false;
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(row, "candidate_version");
    const cJSON *median = cJSON_GetObjectItemCaseSensitive(row, "median_ms");
    if (!cJSON_IsNumber(version) || version->valuedouble < 0 ||
        version->valuedouble > (double)UINT32_MAX ||
        version->valuedouble != floor(version->valuedouble) || !cJSON_IsNumber(median))
        return false;
    w->version = (uint32_t)version->valuedouble;
    w->median_ms = median->valuedouble;
    return true;
}

/* A file that does not parse or has the wrong format is treated as empty: the
 * winners are a cache of measurements, and the next measured winner rewrites
 * the whole file. */
static void arbiter_store_parse(tsr_arbiter *a, const char *text, size_t len)
{
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (root == NULL)
        return;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "winners");
    if (cJSON_IsString(format) && strcmp(format->valuestring, ARBITER_STORE_FORMAT) == 0 &&
        cJSON_IsNumber(version) && version->valuedouble == ARBITER_STORE_VERSION &&
        cJSON_IsArray(rows)) {
        const cJSON *row;
        cJSON_ArrayForEach(row, rows)
        {
            arbiter_winner w;
            if (arbiter_winner_from_json(row, &w))
                arbiter_winner_put(a, &w);
        }
    }
    cJSON_Delete(root);
}

static tsr_status arbiter_store_load(tsr_arbiter *a, tsr_error *err)
{
    struct stat st;
    if (stat(a->store_dir, &st) != 0) {
        if (errno != ENOENT || mkdir(a->store_dir, 0700) != 0)
            return tsr_error_set(err, TSR_IO_ERROR, "arbiter store %s: %s", a->store_dir,
                                 strerror(errno));
        return TSR_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return tsr_error_set(err, TSR_IO_ERROR, "arbiter store %s: not a directory", a->store_dir);

    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->store_dir, ARBITER_STORE_FILE);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (errno == ENOENT)
            return TSR_OK;
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(errno));
    }
    void *text;
    size_t len;
    int read_errno;
    tsr_status st_out = TSR_OK;
    switch (tsri_read_stream(f, 4096, 0, &text, &len, &read_errno)) {
    case TSRI_READ_OK:
        break;
    case TSRI_READ_NO_MEMORY:
    case TSRI_READ_TOO_LARGE: /* no bound was given */
        st_out = tsr_error_set(err, TSR_NO_MEMORY, "%s: out of memory", path);
        break;
    case TSRI_READ_IO_ERROR:
        st_out = tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(read_errno));
        break;
    }
    fclose(f);
    if (st_out == TSR_OK)
        arbiter_store_parse(a, text, len);
    free(text);
    return st_out;
}

static char *arbiter_store_render(const tsr_arbiter *a)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL && cJSON_AddStringToObject(root, "format", ARBITER_STORE_FORMAT) &&
              cJSON_AddNumberToObject(root, "version", ARBITER_STORE_VERSION);
    cJSON *rows = ok ? cJSON_AddArrayToObject(root, "winners") : NULL;
    ok = rows != NULL;
    for (size_t i = 0; ok && i < a->n_winners; i++) {
        const arbiter_winner *w = &a->winners[i];
        cJSON *row = cJSON_CreateObject();
        if (row == NULL || !cJSON_AddItemToArray(rows, row)) {
            cJSON_Delete(row);
            ok = false;
            break;
        }
        ok = cJSON_AddStringToObject(row, "arch", w->arch) &&
             cJSON_AddStringToObject(row, "kind", tsr_region_kind_name(w->kind)) &&
             cJSON_AddStringToObject(row, "dtype", tsr_dtype_name(w->dtype)) &&
             cJSON_AddStringToObject(row, "bucket", w->bucket) &&
             cJSON_AddStringToObject(row, "candidate", w->name) &&
             cJSON_AddNumberToObject(row, "candidate_version", w->version) &&
             cJSON_AddNumberToObject(row, "median_ms", w->median_ms);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* Replaces the store file atomically: a reader (or a crash) sees the old file
 * or the new one, never a half-written one. */
static tsr_status arbiter_store_write(const tsr_arbiter *a, tsr_error *err)
{
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/%s", a->store_dir, ARBITER_STORE_FILE);
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", a->store_dir, ARBITER_STORE_FILE);
    char *text = arbiter_store_render(a);
    if (text == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "%s: out of memory", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(text);
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", tmp, strerror(errno));
    }
    size_t len = strlen(text), done = 0;
    int failure = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            failure = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    free(text);
    if (failure == 0 && fsync(fd) != 0)
        failure = errno;
    if (close(fd) != 0 && failure == 0)
        failure = errno;
    if (failure == 0 && rename(tmp, path) != 0)
        failure = errno;
    if (failure != 0) {
        unlink(tmp);
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(failure));
    }
    /* The rename is durable only once the directory itself is synced. */
    int dfd = open(a->store_dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return TSR_OK;
}

/* ---- lifecycle and registry ---- */

tsr_status tsr_arbiter_create(const char *store_dir, tsr_arbiter **out, tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter: out is NULL");
    *out = NULL;
    tsr_arbiter *a = calloc(1, sizeof *a);
    if (a == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "arbiter: out of memory");
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        return tsr_error_set(err, TSR_INTERNAL, "arbiter: mutex init failed");
    }
    if (store_dir != NULL && store_dir[0] != '\0') {
        a->store_dir = strdup(store_dir);
        if (a->store_dir == NULL) {
            tsr_arbiter_destroy(a);
            return tsr_error_set(err, TSR_NO_MEMORY, "arbiter: out of memory");
        }
        tsr_status st = arbiter_store_load(a, err);
        if (st != TSR_OK) {
            tsr_arbiter_destroy(a);
            return st;
        }
    }
    *out = a;
    return TSR_OK;
}

void tsr_arbiter_destroy(tsr_arbiter *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n_entries; i++)
        free(a->entries[i]);
    free(a->entries);
    arbiter_verdict_node *node = a->oldest;
    while (node) {
        arbiter_verdict_node *next = node->newer;
        free(node);
        node = next;
    }
    free(a->buckets);
    free(a->winners);
    free(a->store_dir);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

tsr_status tsr_arbiter_register(tsr_arbiter *a, const tsr_candidate *c, tsr_error *err)
{
    if (a == NULL || c == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter register: NULL argument");
    if (!arbiter_name_valid(c->name, sizeof c->name))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "candidate name: must be 1..%d characters",
                             TSR_CANDIDATE_NAME_MAX - 1);
    if (c->tier < 0 || c->tier > ARBITER_TIER_MAX)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "candidate '%s': tier %d not in 0..%d",
                             c->name, c->tier, ARBITER_TIER_MAX);
    if (c->kinds == 0 || (c->kinds >> TSR_KIND_COUNT) != 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "candidate '%s': kinds 0x%x names no region kind or an unknown one",
                             c->name, c->kinds);
    if (!(c->tolerance >= 0) || isinf(c->tolerance))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "candidate '%s': tolerance must be finite and >= 0", c->name);

    arbiter_entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "arbiter register: out of memory");
    e->cand = *c;

    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->n_entries; i++) {
        const tsr_candidate *old = &a->entries[i]->cand;
        unsigned both = old->kinds & c->kinds;
        if (both != 0 && strcmp(old->name, c->name) == 0) {
            pthread_mutex_unlock(&a->lock);
            free(e);
            int kind = 0;
            while (!(both & (1u << kind)))
                kind++;
            return tsr_error_set(err, TSR_CONFLICT, "candidate '%s' is already registered for %s",
                                 c->name, tsr_region_kind_name((tsr_region_kind)kind));
        }
    }
    if (a->n_entries == a->cap_entries) {
        size_t cap = a->cap_entries ? a->cap_entries * 2 : 8;
        arbiter_entry **grown = realloc(a->entries, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&a->lock);
            free(e);
            return tsr_error_set(err, TSR_NO_MEMORY, "arbiter register: out of memory");
        }
        a->entries = grown;
        a->cap_entries = cap;
    }
    a->entries[a->n_entries++] = e;
    pthread_mutex_unlock(&a->lock);
    return TSR_OK;
}

const tsr_candidate *tsr_arbiter_find(tsr_arbiter *a, tsr_region_kind kind, const char *name)
{
    if (a == NULL || name == NULL || (unsigned)kind >= TSR_KIND_COUNT)
        return NULL;
    const tsr_candidate *found = NULL;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->n_entries && found == NULL; i++) {
        const tsr_candidate *c = &a->entries[i]->cand;
        if ((c->kinds & (1u << kind)) && strcmp(c->name, name) == 0)
            found = c;
    }
    pthread_mutex_unlock(&a->lock);
    return found;
}

/* ---- the selection engine ---- */

typedef enum arbiter_check {
    ARBITER_CHECK_NONE = 0, /* not verified in this selection */
    ARBITER_CHECK_PASS,     /* a real verdict that passed */
    ARBITER_CHECK_FAIL,     /* a real verdict that failed */
    ARBITER_CHECK_ERROR,    /* verify_fn could not run */
    ARBITER_CHECK_ASSUMED,  /* taken as passing: tier 0, verify_fn NULL, verify=false */
} arbiter_check;

/* What one selection learned about one candidate of the kind. */
typedef struct arbiter_slot {
    arbiter_entry *entry;
    bool asked; /* applies was called */
    bool applies;
    arbiter_check check;
    tsr_status verify_status; /* verify_fn's status for ARBITER_CHECK_ERROR */
    bool cached;
    bool skipped; /* ARBITER_CHECK_ASSUMED because the request said verify=false */
    tsr_verdict verdict;
    double median_ms; /* when timed */
    char why[160];
} arbiter_slot;

typedef struct arbiter_run_state {
    arbiter_slot *slots;
    size_t n;
    arbiter_slot *chosen; /* NULL when the selection failed */
    arbiter_slot *forced; /* the forced candidate's slot, when registered */
    tsr_decision_reason reason;
    bool have_winner; /* a stored winner for the key */
    arbiter_winner winner;
    bool new_winner;    /* a measurement produced one to remember */
    bool remote_winner; /* winner came from the remote place */
    char bucket[ARBITER_BUCKET_MAX];
} arbiter_run_state;

static const tsr_candidate *slot_cand(const arbiter_slot *s)
{
    return &s->entry->cand;
}

/* Sets the slot's one-line explanation; long verdict or error text is cut. */
static void slot_why(arbiter_slot *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slot_why(arbiter_slot *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
}

static void arbiter_verdict_assumed(tsr_verdict *v, const char *reason)
{
    memset(v, 0, sizeof *v);
    v->pass = true;
    v->first_bad_index = -1;
    v->first_bad_probe = -1;
    arbiter_copy_text(v->reason, sizeof v->reason, reason);
}

static void arbiter_ask_applies(const tsr_select_request *req, arbiter_slot *s)
{
    if (s->asked)
        return;
    const tsr_candidate *c = slot_cand(s);
    char why[sizeof s->why - 16] = "";
    s->asked = true;
    bool forced = req->force != NULL && strcmp(req->force, c->name) == 0;
    if (c->forced_only && !forced) {
        s->applies = false;
        slot_why(s, "%sconsidered only when forced", ARBITER_DECLINES);
        return;
    }
    s->applies = c->applies == NULL || c->applies(c, req->region, req->arch, why, sizeof why);
    if (!s->applies)
        slot_why(s, "%s%s", ARBITER_DECLINES, why[0] ? why : "no reason given");
}

/* Asks the remote place for c's variant record (this arbiter has none) and
 * keeps what it vouches for as the record here: a pass lets this shape get
 * the sampled check (*reuse), a failure withdraws the variant's pass.
 * Outside the lock. */
static void arbiter_remote_record(tsr_arbiter *a, const tsr_candidate *c,
                                  const tsr_fingerprint *vfp, const tsr_fingerprint *record,
                                  const char *arch, bool *reuse)
{
    tsr_arbiter_verdict_key key = {
        .name = c->name, .version = c->version, .fingerprint = vfp, .variant = true, .arch = arch};
    tsr_verdict v;
    if (!a->remote.verdict_get(a->remote.ctx, &key, &v))
        return;
    pthread_mutex_lock(&a->lock);
    if (v.pass)
        arbiter_verdict_put(a, c, record, arch, &v);
    else
        arbiter_verdict_set(a, c, record, arch, &v);
    const arbiter_verdict_node *rec =
        arbiter_verdict_find(a, arbiter_verdict_hash(c->name, c->version, record, arch), c->name,
                             c->version, record, arch);
    *reuse = rec != NULL && rec->verdict.pass;
    pthread_mutex_unlock(&a->lock);
}

/* Verifies one candidate once per selection, through the verdict cache. */
static void arbiter_check_slot(tsr_arbiter *a, const tsr_select_request *req, arbiter_slot *s)
{
    if (s->check != ARBITER_CHECK_NONE)
        return;
    const tsr_candidate *c = slot_cand(s);
    if (c->tier == 0) {
        s->check = ARBITER_CHECK_ASSUMED;
        arbiter_verdict_assumed(&s->verdict, ARBITER_REFERENCE_VERDICT);
        return;
    }
    if (!req->verify) {
        s->check = ARBITER_CHECK_ASSUMED;
        s->skipped = true;
        arbiter_verdict_assumed(&s->verdict, ARBITER_SKIPPED_VERDICT);
        return;
    }
    if (req->verify_fn == NULL) {
        s->check = ARBITER_CHECK_ASSUMED;
        arbiter_verdict_assumed(&s->verdict, "not verified: no verifier");
        return;
    }
    /* A kernel that takes dimensions at run time: its variant's record says
     * whether a complete verification passed at another shape. A variant
     * whose key cannot be made is verified per shape, as a fixed kernel. */
    tsr_variant var;
    tsr_fingerprint vfp, record;
    bool variant = req->verify_shape_fn != NULL && c->variant != NULL &&
                   tsr_candidate_variant(c, req->region, req->arch, &var, &vfp, NULL) == TSR_OK &&
                   var.free_dims != 0;
    if (variant)
        arbiter_variant_record_key(&vfp, &record);

    uint64_t hash = arbiter_verdict_hash(c->name, c->version, req->fingerprint, req->arch);
    pthread_mutex_lock(&a->lock);
    const arbiter_verdict_node *hit =
        arbiter_verdict_find(a, hash, c->name, c->version, req->fingerprint, req->arch);
    if (hit != NULL)
        s->verdict = hit->verdict;
    bool reuse = false, have_record = false;
    if (hit == NULL && variant) {
        const arbiter_verdict_node *rec =
            arbiter_verdict_find(a, arbiter_verdict_hash(c->name, c->version, &record, req->arch),
                                 c->name, c->version, &record, req->arch);
        have_record = rec != NULL;
        reuse = rec != NULL && rec->verdict.pass;
    }
    pthread_mutex_unlock(&a->lock);

    tsr_arbiter_verdict_key rkey = {
        .name = c->name, .version = c->version, .fingerprint = req->fingerprint, .arch = req->arch};
    bool remote = false;
    if (hit == NULL && a->remote.verdict_get != NULL) {
        remote = a->remote.verdict_get(a->remote.ctx, &rkey, &s->verdict);
        if (!remote && variant && !have_record)
            arbiter_remote_record(a, c, &vfp, &record, req->arch, &reuse);
    }
    if (hit != NULL) {
        s->cached = true;
    } else {
        if (remote) {
            /* Another node's complete verification, vouched for by the remote
             * place: this node's verdict from now on. */
            s->cached = true;
            reuse = false;
        } else {
            tsr_error verr;
            tsr_error_clear(&verr);
            arbiter_verdict_assumed(&s->verdict, "");
            s->verdict.pass = false;
            tsr_arbiter_verify_fn fn = reuse ? req->verify_shape_fn : req->verify_fn;
            tsr_status st = fn(req->ctx, c, req->region, &s->verdict, &verr);
            if (st == TSR_OK) {
                pthread_mutex_lock(&a->lock);
                a->verifications++;
                pthread_mutex_unlock(&a->lock);
            }
            if (st != TSR_OK) {
                s->check = ARBITER_CHECK_ERROR;
                s->verify_status = st;
                s->verdict.pass = false;
                slot_why(s, "not verified: %s: %s", tsr_status_name(st), verr.message);
                return;
            }
            s->verdict.variant_reused = reuse;
        }
        /* Only a complete verification (every output, or sampled with the
         * small-shape probes) lets later shapes reuse it; a failure at any
         * shape withdraws that for good. */
        bool complete =
            !reuse && (s->verdict.method == TSR_VERIFY_FULL || s->verdict.small_probes > 0);
        bool record_agrees = true;
        pthread_mutex_lock(&a->lock);
        arbiter_verdict_put(a, c, req->fingerprint, req->arch, &s->verdict);
        if (variant && !s->verdict.pass)
            arbiter_verdict_set(a, c, &record, req->arch, &s->verdict);
        else if (variant && complete)
            arbiter_verdict_put(a, c, &record, req->arch, &s->verdict);
        if (variant) {
            const arbiter_verdict_node *rec = arbiter_verdict_find(
                a, arbiter_verdict_hash(c->name, c->version, &record, req->arch), c->name,
                c->version, &record, req->arch);
            record_agrees = rec != NULL && rec->verdict.pass == s->verdict.pass;
        }
        pthread_mutex_unlock(&a->lock);
        /* Only complete verifications are shared: a sampled check of a new
         * shape leans on a record the other nodes may not hold. A variant
         * whose pass this arbiter withdrew is not vouched for by it again. */
        if (!remote && complete && a->remote.verdict_put != NULL) {
            a->remote.verdict_put(a->remote.ctx, &rkey, &s->verdict);
            if (variant && record_agrees) {
                tsr_arbiter_verdict_key vkey = rkey;
                vkey.fingerprint = &vfp;
                vkey.variant = true;
                a->remote.verdict_put(a->remote.ctx, &vkey, &s->verdict);
            }
        }
    }
    s->check = s->verdict.pass ? ARBITER_CHECK_PASS : ARBITER_CHECK_FAIL;
    if (!s->verdict.pass)
        slot_why(s, "failed verification: %s", s->verdict.reason);
}

uint64_t tsr_arbiter_verifications(tsr_arbiter *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t n = a->verifications;
    pthread_mutex_unlock(&a->lock);
    return n;
}

static bool slot_passes(const arbiter_slot *s)
{
    return s->check == ARBITER_CHECK_PASS || s->check == ARBITER_CHECK_ASSUMED;
}

static void arbiter_list_registered(const arbiter_run_state *rs, char *buf, size_t size)
{
    size_t used = 0;
    if (rs->n == 0)
        arbiter_append(buf, size, &used, "none");
    for (size_t i = 0; i < rs->n; i++)
        arbiter_append(buf, size, &used, "%s%s (tier %d)", i ? ", " : "",
                       slot_cand(&rs->slots[i])->name, slot_cand(&rs->slots[i])->tier);
}

/* Rule 1: the forced candidate is the only one considered. */
static tsr_status arbiter_run_forced(tsr_arbiter *a, const tsr_select_request *req,
                                     arbiter_run_state *rs, tsr_error *err)
{
    const char *kind = tsr_region_kind_name(req->region->kind);
    arbiter_slot *s = NULL;
    for (size_t i = 0; i < rs->n; i++) {
        arbiter_slot *other = &rs->slots[i];
        if (strcmp(slot_cand(other)->name, req->force) == 0)
            s = other;
        else if (other->applies || !other->asked)
            slot_why(other, "not considered: '%s' is forced", req->force);
    }
    if (s == NULL) {
        char names[TSR_ERROR_MESSAGE_MAX];
        arbiter_list_registered(rs, names, sizeof names);
        return tsr_error_set(err, TSR_ARBITER,
                             "forced candidate '%s' is not registered for %s; registered: %s",
                             req->force, kind, names);
    }
    rs->forced = s;
    arbiter_ask_applies(req, s);
    if (!s->applies)
        return tsr_error_set(err, TSR_ARBITER, "forced candidate '%s' declines %s: %s", req->force,
                             kind, s->why + strlen(ARBITER_DECLINES));
    arbiter_check_slot(a, req, s);
    if (s->check == ARBITER_CHECK_ERROR)
        return tsr_error_set(err, s->verify_status, "forced candidate '%s' for %s: %s", req->force,
                             kind, s->why);
    if (s->check == ARBITER_CHECK_FAIL)
        return tsr_error_set(err, TSR_VERIFY_FAILED,
                             "forced candidate '%s' failed verification for %s: %s", req->force,
                             kind, s->verdict.reason);
    rs->chosen = s;
    rs->reason = TSR_REASON_FORCED;
    arbiter_copy_text(s->why, sizeof s->why, "selected: forced");
    return TSR_OK;
}

/* Rule 2, policy TIER: verify from the highest tier down and stop at the first
 * that passes, so lower tiers cost nothing once a better one is known. */
static void arbiter_run_tier(tsr_arbiter *a, const tsr_select_request *req, arbiter_run_state *rs)
{
    for (int tier = ARBITER_TIER_MAX; tier >= 1; tier--) {
        for (size_t i = 0; i < rs->n; i++) {
            arbiter_slot *s = &rs->slots[i];
            if (slot_cand(s)->tier != tier || !s->applies)
                continue;
            if (rs->chosen != NULL) {
                slot_why(s, "not verified: '%s' (tier %d) selected first",
                         slot_cand(rs->chosen)->name, slot_cand(rs->chosen)->tier);
                continue;
            }
            arbiter_check_slot(a, req, s);
            if (slot_passes(s)) {
                rs->chosen = s;
                rs->reason = TSR_REASON_TIER;
                arbiter_copy_text(s->why, sizeof s->why,
                                  s->skipped ? "selected: highest tier that applies, not verified "
                                               "(verify=false)"
                                             : "selected: highest tier that passes");
            }
        }
    }
}

static arbiter_slot *arbiter_slot_of_winner(arbiter_run_state *rs)
{
    for (size_t i = 0; i < rs->n; i++) {
        arbiter_slot *s = &rs->slots[i];
        const tsr_candidate *c = slot_cand(s);
        if (c->tier >= 1 && s->applies && c->version == rs->winner.version &&
            strcmp(c->name, rs->winner.name) == 0)
            return s;
    }
    return NULL;
}

/* Rule 2, policy MEASURE: a stored winner that still applies and passes is
 * reused untimed; otherwise every applicable candidate that passes is timed and
 * the lowest median wins (ties to the higher tier, then registration order). */
static void arbiter_run_measure(tsr_arbiter *a, const tsr_select_request *req,
                                arbiter_run_state *rs)
{
    if (rs->have_winner) {
        arbiter_slot *s = arbiter_slot_of_winner(rs);
        if (s != NULL) {
            arbiter_check_slot(a, req, s);
            if (slot_passes(s)) {
                rs->chosen = s;
                rs->reason = TSR_REASON_MEASURED;
                /* A winner another node measured is remembered here too. */
                rs->new_winner = rs->remote_winner;
                s->median_ms = rs->winner.median_ms;
                slot_why(s, "selected: stored measured winner (%.4g ms)%s", rs->winner.median_ms,
                         s->skipped ? ", not verified (verify=false)" : "");
                return;
            }
        }
    }
    arbiter_slot *best = NULL;
    for (int tier = ARBITER_TIER_MAX; tier >= 1; tier--) {
        for (size_t i = 0; i < rs->n; i++) {
            arbiter_slot *s = &rs->slots[i];
            if (slot_cand(s)->tier != tier || !s->applies)
                continue;
            arbiter_check_slot(a, req, s);
            if (!slot_passes(s))
                continue;
            tsr_error merr;
            tsr_error_clear(&merr);
            double ms = NAN;
            tsr_status st = req->measure_fn(req->ctx, slot_cand(s), req->region, &ms, &merr);
            if (st != TSR_OK || !(ms >= 0) || isinf(ms)) {
                if (st != TSR_OK)
                    slot_why(s, "timing failed: %s: %s", tsr_status_name(st), merr.message);
                else
                    slot_why(s, "timing failed: median %g ms", ms);
                continue;
            }
            s->median_ms = ms;
            slot_why(s, "%s, measured %.4g ms", s->skipped ? "applies, not verified" : "passed",
                     ms);
            if (best == NULL || ms < best->median_ms)
                best = s;
        }
    }
    if (best == NULL)
        return;
    rs->chosen = best;
    rs->reason = TSR_REASON_MEASURED;
    slot_why(best, "selected: fastest measured (%.4g ms)%s", best->median_ms,
             best->skipped ? ", not verified (verify=false)" : "");
    rs->new_winner = true;
    rs->remote_winner = false;
    arbiter_winner *w = &rs->winner;
    arbiter_copy_text(w->arch, sizeof w->arch, req->arch);
    w->kind = req->region->kind;
    w->dtype = req->region->dtype;
    arbiter_copy_text(w->bucket, sizeof w->bucket, rs->bucket);
    arbiter_copy_text(w->name, sizeof w->name, slot_cand(best)->name);
    w->version = slot_cand(best)->version;
    w->median_ms = best->median_ms;
}

/* Rule 3: the reference, where the request allows it; otherwise an error that
 * says, per candidate, why it was not chosen. */
static tsr_status arbiter_run_fallback(const tsr_select_request *req, arbiter_run_state *rs,
                                       tsr_error *err)
{
    for (size_t i = 0; i < rs->n; i++) {
        arbiter_slot *s = &rs->slots[i];
        if (slot_cand(s)->tier != 0 || !s->applies)
            continue;
        if (req->allow_reference && req->reference_refused == NULL && rs->chosen == NULL) {
            rs->chosen = s;
            rs->reason = TSR_REASON_FALLBACK;
            arbiter_copy_text(s->why, sizeof s->why, "selected: fallback to the reference");
        } else if (rs->chosen == NULL && req->allow_reference) {
            slot_why(s, "tier 0: %s", req->reference_refused);
        } else if (rs->chosen == NULL) {
            arbiter_copy_text(s->why, sizeof s->why, "tier 0: fallback not allowed by the request");
        }
    }
    if (rs->chosen != NULL)
        return TSR_OK;
    char detail[TSR_ERROR_MESSAGE_MAX];
    size_t used = 0;
    if (rs->n == 0)
        arbiter_append(detail, sizeof detail, &used, "no candidates registered");
    for (size_t i = 0; i < rs->n; i++)
        arbiter_append(detail, sizeof detail, &used, "%s%s: %s", i ? "; " : "",
                       slot_cand(&rs->slots[i])->name, rs->slots[i].why);
    return tsr_error_set(err, TSR_ARBITER,
                         "no candidate applies and passes verification for %s: %s",
                         tsr_region_kind_name(req->region->kind), detail);
}

static tsr_status arbiter_request_check(const tsr_arbiter *a, const tsr_select_request *req,
                                        tsr_error *err)
{
    if (a == NULL || req == NULL || req->region == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter select: NULL argument");
    if ((unsigned)req->region->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter select: region kind %d",
                             (int)req->region->kind);
    if (req->arch == NULL || !arbiter_name_valid(req->arch, ARBITER_ARCH_MAX))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arch: must be 1..%d characters",
                             ARBITER_ARCH_MAX - 1);
    if (req->verify_fn != NULL && req->fingerprint == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "fingerprint: needed to cache verdicts");
    if (req->policy != TSR_POLICY_TIER && req->policy != TSR_POLICY_MEASURE)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "policy: %d is not tier or measure",
                             (int)req->policy);
    return TSR_OK;
}

/* Counts the selection's outcome per candidate and remembers a new measured
 * winner. Called with the lock held. A store file that cannot be written does
 * not fail the selection: the winner is kept in memory and the next measured
 * winner tries the file again. */
static void arbiter_record(tsr_arbiter *a, const arbiter_run_state *rs, tsr_region_kind kind,
                           bool count)
{
    for (size_t i = 0; count && i < rs->n; i++) {
        const arbiter_slot *s = &rs->slots[i];
        uint64_t *st = s->entry->stats[kind];
        if (s->asked && !s->applies)
            st[ARBITER_STAT_DECLINED]++;
        if (s->check == ARBITER_CHECK_FAIL || s->check == ARBITER_CHECK_ERROR)
            st[ARBITER_STAT_FAILED_VERIFICATION]++;
        if (s == rs->chosen)
            st[rs->reason == TSR_REASON_FORCED ? ARBITER_STAT_FORCED : ARBITER_STAT_WON]++;
        if (s == rs->chosen && s->skipped)
            st[ARBITER_STAT_UNVERIFIED]++;
    }
    if (rs->new_winner && arbiter_winner_put(a, &rs->winner) && a->store_dir != NULL)
        arbiter_store_write(a, NULL);
}

void tsr_arbiter_set_remote(tsr_arbiter *a, const tsr_arbiter_remote *remote)
{
    if (remote != NULL)
        a->remote = *remote;
}

static void arbiter_remote_key(const arbiter_winner *w, char key[TSR_ARBITER_WINNER_KEY_MAX])
{
    snprintf(key, TSR_ARBITER_WINNER_KEY_MAX, "%s/%s/%s/%s", w->arch, tsr_region_kind_name(w->kind),
             tsr_dtype_name(w->dtype), w->bucket);
}

/* Asks the remote place for the winner of the request's key (this arbiter
 * has none); outside the lock. */
static void arbiter_remote_winner(tsr_arbiter *a, const tsr_select_request *req,
                                  arbiter_run_state *rs)
{
    if (a->remote.winner_get == NULL)
        return;
    arbiter_winner *w = &rs->winner;
    memset(w, 0, sizeof *w);
    arbiter_copy_text(w->arch, sizeof w->arch, req->arch);
    w->kind = req->region->kind;
    w->dtype = req->region->dtype;
    arbiter_copy_text(w->bucket, sizeof w->bucket, rs->bucket);
    char key[TSR_ARBITER_WINNER_KEY_MAX];
    arbiter_remote_key(w, key);
    char name[TSR_CANDIDATE_NAME_MAX] = "";
    if (!a->remote.winner_get(a->remote.ctx, key, name, &w->version, &w->median_ms))
        return;
    name[sizeof name - 1] = '\0';
    arbiter_copy_text(w->name, sizeof w->name, name);
    rs->have_winner = true;
    rs->remote_winner = true;
}

/* The one selection both select and explain run. explain asks every candidate
 * whether it applies, for the report, and leaves the statistics alone. */
static tsr_status arbiter_run(tsr_arbiter *a, const tsr_select_request *req, arbiter_run_state *rs,
                              bool explain, tsr_error *err)
{
    memset(rs, 0, sizeof *rs);
    tsr_status st = arbiter_request_check(a, req, err);
    if (st != TSR_OK)
        return st;
    tsr_region_kind kind = req->region->kind;
    bool forced = req->force != NULL && req->force[0] != '\0';
    bool measure = !forced && req->policy == TSR_POLICY_MEASURE && req->measure_fn != NULL;
    if (measure)
        tsr_arbiter_shape_bucket(req->region, rs->bucket, sizeof rs->bucket);

    pthread_mutex_lock(&a->lock);
    rs->slots = calloc(a->n_entries ? a->n_entries : 1, sizeof *rs->slots);
    if (rs->slots == NULL) {
        pthread_mutex_unlock(&a->lock);
        return tsr_error_set(err, TSR_NO_MEMORY, "arbiter select: out of memory");
    }
    for (size_t i = 0; i < a->n_entries; i++)
        if (a->entries[i]->cand.kinds & (1u << kind))
            rs->slots[rs->n++].entry = a->entries[i];
    if (measure) {
        const arbiter_winner *w =
            arbiter_winner_find(a, req->arch, kind, req->region->dtype, rs->bucket);
        if (w != NULL) {
            rs->winner = *w;
            rs->have_winner = true;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (measure && !rs->have_winner && !explain)
        arbiter_remote_winner(a, req, rs);

    if (!forced || explain)
        for (size_t i = 0; i < rs->n; i++)
            arbiter_ask_applies(req, &rs->slots[i]);
    /* The reference passes by definition; rule 2 never takes it. */
    for (size_t i = 0; i < rs->n; i++) {
        arbiter_slot *s = &rs->slots[i];
        if (s->asked && s->applies && slot_cand(s)->tier == 0) {
            s->check = ARBITER_CHECK_ASSUMED;
            arbiter_verdict_assumed(&s->verdict, ARBITER_REFERENCE_VERDICT);
            slot_why(s, "tier 0: used only as a fallback");
        }
    }

    if (forced) {
        st = arbiter_run_forced(a, req, rs, err);
    } else {
        if (measure)
            arbiter_run_measure(a, req, rs);
        else
            arbiter_run_tier(a, req, rs);
        st = rs->chosen != NULL ? TSR_OK : arbiter_run_fallback(req, rs, err);
    }

    pthread_mutex_lock(&a->lock);
    arbiter_record(a, rs, kind, !explain);
    pthread_mutex_unlock(&a->lock);
    if (rs->new_winner && !rs->remote_winner && !explain && a->remote.winner_put != NULL) {
        char key[TSR_ARBITER_WINNER_KEY_MAX];
        arbiter_remote_key(&rs->winner, key);
        a->remote.winner_put(a->remote.ctx, key, rs->winner.name, rs->winner.version,
                             rs->winner.median_ms);
    }
    return st;
}

static void arbiter_decision_fill(const arbiter_slot *s, tsr_decision_reason reason,
                                  tsr_decision *out)
{
    memset(out, 0, sizeof *out);
    out->candidate = *slot_cand(s);
    out->reason = reason;
    out->verified = s->check == ARBITER_CHECK_PASS || s->check == ARBITER_CHECK_FAIL;
    out->verdict_cached = s->cached;
    out->verify_skipped = s->skipped;
    out->verdict = s->verdict;
}

tsr_status tsr_arbiter_select(tsr_arbiter *a, const tsr_select_request *req, tsr_decision *out,
                              tsr_error *err)
{
    if (out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter select: out is NULL");
    arbiter_run_state rs;
    tsr_status st = arbiter_run(a, req, &rs, false, err);
    if (rs.chosen != NULL)
        arbiter_decision_fill(rs.chosen, rs.reason, out);
    else if (st == TSR_VERIFY_FAILED && rs.forced != NULL)
        arbiter_decision_fill(rs.forced, TSR_REASON_FORCED, out);
    free(rs.slots);
    return st;
}

tsr_status tsr_arbiter_explain(tsr_arbiter *a, const tsr_select_request *req,
                               tsr_candidate_report **rows, size_t *count,
                               tsr_status *select_status, tsr_error *select_err, tsr_error *err)
{
    if (rows == NULL || count == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter explain: NULL argument");
    *rows = NULL;
    *count = 0;
    tsr_error serr;
    tsr_error_clear(&serr);
    arbiter_run_state rs;
    tsr_status st = arbiter_run(a, req, &rs, true, &serr);
    if (rs.slots == NULL) /* the request itself was bad, or memory ran out */
        return tsr_error_set(err, st, "%s", serr.message);
    if (select_status != NULL)
        *select_status = st;
    if (select_err != NULL)
        *select_err = serr;

    tsr_candidate_report *out = calloc(rs.n ? rs.n : 1, sizeof *out);
    if (out == NULL) {
        free(rs.slots);
        return tsr_error_set(err, TSR_NO_MEMORY, "arbiter explain: out of memory");
    }
    for (size_t i = 0; i < rs.n; i++) {
        const arbiter_slot *s = &rs.slots[i];
        tsr_candidate_report *row = &out[i];
        row->candidate = *slot_cand(s);
        row->applies = s->asked && s->applies;
        row->selected = s == rs.chosen;
        row->verified = s->check == ARBITER_CHECK_PASS || s->check == ARBITER_CHECK_FAIL;
        row->verdict = s->verdict;
        if (s->check == ARBITER_CHECK_NONE) {
            row->verdict.first_bad_index = -1;
            row->verdict.first_bad_probe = -1;
        }
        if (s->why[0] != '\0')
            arbiter_copy_text(row->why, sizeof row->why, s->why);
        else
            arbiter_copy_text(row->why, sizeof row->why, "not considered");
    }
    free(rs.slots);
    *rows = out;
    *count = rs.n;
    return TSR_OK;
}

tsr_status tsr_arbiter_stats(tsr_arbiter *a, tsr_candidate_stats **rows, size_t *count,
                             tsr_error *err)
{
    if (a == NULL || rows == NULL || count == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "arbiter stats: NULL argument");
    *rows = NULL;
    *count = 0;
    pthread_mutex_lock(&a->lock);
    size_t n = 0;
    for (size_t i = 0; i < a->n_entries; i++)
        n += (size_t)__builtin_popcount(a->entries[i]->cand.kinds);
    tsr_candidate_stats *out = calloc(n ? n : 1, sizeof *out);
    if (out == NULL) {
        pthread_mutex_unlock(&a->lock);
        return tsr_error_set(err, TSR_NO_MEMORY, "arbiter stats: out of memory");
    }
    /* Grouped by kind, registration order within a kind: the order `stats`
     * prints them in. */
    size_t k = 0;
    for (int kind = 0; kind < TSR_KIND_COUNT; kind++) {
        for (size_t i = 0; i < a->n_entries; i++) {
            const arbiter_entry *e = a->entries[i];
            if (!(e->cand.kinds & (1u << kind)))
                continue;
            tsr_candidate_stats *row = &out[k++];
            row->kind = (tsr_region_kind)kind;
            arbiter_copy_text(row->name, sizeof row->name, e->cand.name);
            row->won = e->stats[kind][ARBITER_STAT_WON];
            row->forced = e->stats[kind][ARBITER_STAT_FORCED];
            row->declined = e->stats[kind][ARBITER_STAT_DECLINED];
            row->failed_verification = e->stats[kind][ARBITER_STAT_FAILED_VERIFICATION];
            row->unverified = e->stats[kind][ARBITER_STAT_UNVERIFIED];
        }
    }
    pthread_mutex_unlock(&a->lock);
    *rows = out;
    *count = n;
    return TSR_OK;
}
