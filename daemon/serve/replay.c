/*
 * replay.c — a small table of recent request ids and their replies.
 *
 * TSRD_REPLAY_ENTRIES is small, so lookups scan the array; an age stamp picks
 * the oldest finished entry to reuse. Executing entries are never evicted:
 * their waiters must still be answered.
 */
#include "serve/replay.h"

#include <stdlib.h>
#include <string.h>

void tsrd_replay_init(tsrd_replay *r, size_t budget)
{
    memset(r, 0, sizeof *r);
    r->budget = budget ? budget : TSRD_REPLAY_BUDGET;
}

static void replay_entry_clear(tsrd_replay *r, tsrd_replay_entry *e)
{
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

static tsrd_replay_entry *replay_find(tsrd_replay *r, uint64_t id)
{
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++)
        if (r->entries[i].id == id)
            return &r->entries[i];
    return NULL;
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

tsrd_replay_result tsrd_replay_begin(tsrd_replay *r, uint64_t id, void *waiter,
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
    return TSRD_REPLAY_NEW;
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
    uint8_t *copy = len <= r->budget ? malloc(len ? len : 1) : NULL;
    if (copy == NULL) {
        replay_entry_clear(r, e); /* too large to keep: a resend executes again */
        return;
    }
    memcpy(copy, reply, len);
    while (r->bytes + len > r->budget) {
        tsrd_replay_entry *old = replay_oldest_done(r);
        if (old == e) /* e is now the newest; anything older went first */
            break;
        replay_entry_clear(r, old);
    }
    e->reply = copy;
    e->len = len;
    r->bytes += len;
}

size_t tsrd_replay_count(const tsrd_replay *r)
{
    size_t n = 0;
    for (int i = 0; i < TSRD_REPLAY_ENTRIES; i++)
        n += r->entries[i].id != 0;
    return n;
}
