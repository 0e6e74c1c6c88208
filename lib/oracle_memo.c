/*
 * oracle_memo.c — whole probe inputs kept between sampled checks (oracle.h,
 * tsr_oracle_memo).
 *
 * A sampled probe's input is a pure function of its key, dtype and element
 * count (oracle_gen.c), so an input that every shape of a variant shares (a
 * GEMM's B when only M changes) comes out the same bits at every shape. The
 * sampled reference reads such an input whole when it computes whole output
 * rows; making it is most of a new shape's check (a 4096 x 4096 bf16 B is 16.7
 * million hashes). The memo keeps it for the next shape.
 *
 * A product's weights (B, Wu, the bias: their sizes do not follow M) are
 * offered at once by the sampled reference. Any other input is kept only when
 * asked for a second time (the first sighting is remembered in a small ring
 * of recent requests), so that an input whose size changes with every shape
 * (A, whose rows are M) is not kept for one shape alone; it is when the same
 * shape is checked again (several candidates verified for one selection, two
 * tenants sending one new shape at once), and then ages out behind the inputs
 * that repeat. Entries are immutable once made and counted by
 * their readers; the least recently used ones that no reader holds go first when the budget is
 * exceeded. One mutex guards the table; no lock is held while an input is made or read.
 */
#include <stdlib.h>
#include <string.h>

#include "oracle_internal.h"

#define MEMO_SEEN 64 /* recent first sightings remembered */

typedef struct memo_entry {
    struct memo_entry *next;
    uint64_t key, n;
    tsr_dtype dtype;
    size_t bytes;
    void *data;
    int readers;
    uint64_t used; /* the memo's clock at the last hit or insert */
} memo_entry;

struct tsr_oracle_memo {
    pthread_mutex_t lock;
    uint64_t max_bytes, bytes, clock;
    uint64_t hits, misses, evictions;
    memo_entry *entries;
    uint64_t seen[MEMO_SEEN]; /* hashes of inputs asked for once */
    size_t seen_next;
};

static uint64_t memo_hash(uint64_t key, tsr_dtype dtype, uint64_t n)
{
    return tsri_oracle_mix64(key ^ tsri_oracle_mix64(n * 4 + (uint64_t)dtype + 1));
}

tsr_status tsr_oracle_memo_create(uint64_t max_bytes, tsr_oracle_memo **out, tsr_error *err)
{
    *out = NULL;
    tsr_oracle_memo *m = calloc(1, sizeof *m);
    if (m == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "oracle memo: out of memory");
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return tsr_error_set(err, TSR_INTERNAL, "oracle memo: pthread_mutex_init failed");
    }
    m->max_bytes = max_bytes;
    *out = m;
    return TSR_OK;
}

void tsr_oracle_memo_destroy(tsr_oracle_memo *m)
{
    if (m == NULL)
        return;
    for (memo_entry *e = m->entries, *next; e != NULL; e = next) {
        next = e->next;
        free(e->data);
        free(e);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void tsr_oracle_memo_stats(tsr_oracle_memo *m, tsr_oracle_memo_counts *out)
{
    memset(out, 0, sizeof *out);
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    out->hits = m->hits;
    out->misses = m->misses;
    out->evictions = m->evictions;
    out->bytes = m->bytes;
    for (const memo_entry *e = m->entries; e != NULL; e = e->next)
        out->entries++;
    pthread_mutex_unlock(&m->lock);
}

const void *tsri_oracle_memo_get(tsr_oracle_memo *m, uint64_t key, tsr_dtype dtype, uint64_t n,
                                 bool *keep)
{
    *keep = false;
    if (m == NULL || m->max_bytes == 0)
        return NULL;
    pthread_mutex_lock(&m->lock);
    const void *data = NULL;
    for (memo_entry *e = m->entries; e != NULL; e = e->next)
        if (e->key == key && e->dtype == dtype && e->n == n) {
            e->readers++;
            e->used = ++m->clock;
            m->hits++;
            data = e->data;
            break;
        }
    if (data == NULL) {
        m->misses++;
        uint64_t h = memo_hash(key, dtype, n);
        for (size_t i = 0; i < MEMO_SEEN && !*keep; i++)
            *keep = m->seen[i] == h;
        if (!*keep) {
            m->seen[m->seen_next] = h;
            m->seen_next = (m->seen_next + 1) % MEMO_SEEN;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return data;
}

void tsri_oracle_memo_release(tsr_oracle_memo *m, const void *data)
{
    if (m == NULL || data == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    for (memo_entry *e = m->entries; e != NULL; e = e->next)
        if (e->data == data) {
            e->readers--;
            break;
        }
    pthread_mutex_unlock(&m->lock);
}

void tsri_oracle_memo_put(tsr_oracle_memo *m, uint64_t key, tsr_dtype dtype, uint64_t n,
                          const void *data, size_t bytes)
{
    if (m == NULL || bytes == 0 || bytes > m->max_bytes)
        return;
    memo_entry *e = malloc(sizeof *e);
    void *copy = malloc(bytes);
    if (e == NULL || copy == NULL) {
        free(e);
        free(copy);
        return; /* a memo that cannot grow only costs the next check its time */
    }
    memcpy(copy, data, bytes);
    *e = (memo_entry){.key = key, .n = n, .dtype = dtype, .bytes = bytes, .data = copy};
    pthread_mutex_lock(&m->lock);
    bool present = false;
    uint64_t unread = 0; /* bytes of entries nobody reads: what eviction can free */
    for (const memo_entry *x = m->entries; x != NULL && !present; x = x->next) {
        present = x->key == key && x->dtype == dtype && x->n == n;
        if (x->readers == 0)
            unread += x->bytes;
    }
    /* Room: the least recently used entries that nobody reads go first, and
     * none at all when even they would not make room. */
    bool fits = m->bytes - unread + bytes <= m->max_bytes;
    while (!present && fits && m->bytes + bytes > m->max_bytes) {
        memo_entry **victim = NULL;
        for (memo_entry **p = &m->entries; *p != NULL; p = &(*p)->next)
            if ((*p)->readers == 0 && (victim == NULL || (*p)->used < (*victim)->used))
                victim = p;
        if (victim == NULL)
            break;
        memo_entry *v = *victim;
        *victim = v->next;
        m->bytes -= v->bytes;
        m->evictions++;
        free(v->data);
        free(v);
    }
    if (!present && m->bytes + bytes <= m->max_bytes) {
        e->used = ++m->clock;
        e->next = m->entries;
        m->entries = e;
        m->bytes += bytes;
        e = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    if (e != NULL) {
        free(e->data);
        free(e);
    }
}
