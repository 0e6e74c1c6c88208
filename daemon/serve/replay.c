/*
 * replay.c — a small table of recent request ids and their replies.
 *
 * TSRD_REPLAY_ENTRIES is small, so lookups scan the array; an age stamp picks
 * the oldest finished entry to reuse. Executing entries are never evicted:
 * their waiters must still be answered. A pool keeps its tables' stored
 * replies on one list, oldest first, so that the pool's budget evicts across
 * connections in the order the replies were made.
 */
#include "serve/replay.h"

#include <stdlib.h>
#include <string.h>

void tsrd_replay_init(tsrd_replay *r, size_t budget)
{
    memset(r, 0, sizeof *r);
    r->budget = budget ? budget : TSRD_REPLAY_BUDGET;
}

void tsrd_replay_set_pool(tsrd_replay *r, tsrd_replay_pool *pool, size_t budget)
{
    if (r->bytes == 0)
        r->pool = pool;
    r->budget = budget;
}

static void replay_lru_unlink(tsrd_replay_pool *pool, tsrd_replay_entry *e)
{
    if (e->lru_prev != NULL)
        e->lru_prev->lru_next = e->lru_next;
    else if (pool->lru_head == e)
        pool->lru_head = e->lru_next;
    if (e->lru_next != NULL)
        e->lru_next->lru_prev = e->lru_prev;
    else if (pool->lru_tail == e)
        pool->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void replay_entry_clear(tsrd_replay *r, tsrd_replay_entry *e)
{
    if (e->reply != NULL && r->pool != NULL) {
        replay_lru_unlink(r->pool, e);
        r->pool->bytes -= e->len;
    }
    r->bytes -= e->len;
    free(e->reply);
    free(e->waiters);
    memset(e, 0, sizeof *e);
}

void tsrd_replay_fini(tsrd_replay *r)
{
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++)
        replay_entry_clear(r, &r->entries[i]);
}

static const tsrd_replay_entry *replay_find_const(const tsrd_replay *r, uint64_t id)
{
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++)
        if (r->entries[i].id == id)
            return &r->entries[i];
    return NULL;
}

static tsrd_replay_entry *replay_find(tsrd_replay *r, uint64_t id)
{
    return (tsrd_replay_entry *)replay_find_const(r, id);
}

/* The oldest finished entry, or NULL when every entry is executing. */
static tsrd_replay_entry *replay_oldest_done(tsrd_replay *r)
{
    tsrd_replay_entry *oldest = NULL;
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++) {
        tsrd_replay_entry *e = &r->entries[i];
        if (e->id != 0 && e->done && (oldest == NULL || e->age < oldest->age))
            oldest = e;
    }
    return oldest;
}

tsrd_replay_result tsrd_replay_state(const tsrd_replay *r, uint64_t id)
{
    const tsrd_replay_entry *e = id != 0 ? replay_find_const(r, id) : NULL;
    if (e == NULL)
        return TSRD_REPLAY_NEW;
    return e->done ? TSRD_REPLAY_DONE : TSRD_REPLAY_PENDING;
}

tsrd_replay_result tsrd_replay_begin(tsrd_replay *r, uint64_t id, void *waiter, bool may_wait,
                                     const uint8_t **reply, size_t *len, bool *ok)
{
    *ok = true;
    if (id == 0)
        return TSRD_REPLAY_NEW;
    tsrd_replay_entry *e = replay_find(r, id);
    if (e != NULL && e->done) {
        *reply = e->reply;
        *len = e->len;
        return TSRD_REPLAY_DONE;
    }
    if (e != NULL && !may_wait)
        return TSRD_REPLAY_PENDING;
    if (e != NULL) {
        void **grown = realloc(e->waiters, (e->n_waiters + 1) * sizeof *grown);
        if (grown == NULL) {
            *ok = false;
            return TSRD_REPLAY_PENDING;
        }
        e->waiters = grown;
        e->waiters[e->n_waiters++] = waiter;
        return TSRD_REPLAY_PENDING;
    }
    e = replay_find(r, 0);
    if (e == NULL)
        e = replay_oldest_done(r);
    if (e == NULL)
        return TSRD_REPLAY_NEW; /* everything is executing: run unremembered */
    replay_entry_clear(r, e);
    e->id = id;
    e->age = ++r->clock;
    e->owner = r;
    return TSRD_REPLAY_NEW;
}

/* Drops a kept reply to make room for another. */
static void replay_evict(tsrd_replay *r, tsrd_replay_entry *e)
{
    if (r->pool != NULL)
        r->pool->evictions++;
    replay_entry_clear(r, e);
}

void tsrd_replay_finish(tsrd_replay *r, uint64_t id, const uint8_t *reply, size_t len,
                        void ***waiters, size_t *n_waiters)
{
    *waiters = NULL;
    *n_waiters = 0;
    tsrd_replay_entry *e = id != 0 ? replay_find(r, id) : NULL;
    if (e == NULL || e->done)
        return;
    *waiters = e->waiters;
    *n_waiters = e->n_waiters;
    e->waiters = NULL;
    e->n_waiters = 0;
    e->done = true;
    e->age = ++r->clock;
    tsrd_replay_pool *pool = r->pool;
    bool fits = len <= r->budget && (pool == NULL || len <= pool->budget);
    uint8_t *copy = fits ? malloc(len ? len : 1) : NULL;
    if (copy == NULL) {
        replay_entry_clear(r, e); /* too large to keep: a resend executes again */
        return;
    }
    memcpy(copy, reply, len);
    while (r->bytes + len > r->budget) {
        tsrd_replay_entry *old = replay_oldest_done(r);
        if (old == e) /* e is now the newest; anything older went first */
            break;
        replay_evict(r, old);
    }
    /* e holds no reply yet, so it is not on the pool's list. */
    while (pool != NULL && pool->bytes + len > pool->budget && pool->lru_head != NULL)
        replay_evict(pool->lru_head->owner, pool->lru_head);
    e->reply = copy;
    e->len = len;
    r->bytes += len;
    if (pool != NULL) {
        pool->bytes += len;
        e->lru_prev = pool->lru_tail;
        if (pool->lru_tail != NULL)
            pool->lru_tail->lru_next = e;
        else
            pool->lru_head = e;
        pool->lru_tail = e;
    }
}

size_t tsrd_replay_count(const tsrd_replay *r)
{
    size_t n = 0;
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++)
        n += r->entries[i].id != 0;
    return n;
}
