/*
 * replay.h — the memory of recent request ids, per session.
 *
 * nng's REQ side resends a request it got no answer to, and clients retry; a
 * request id seen again must be answered, not executed twice. Each session keeps
 * the last TSRD_REPLAY_ENTRIES ids with their encoded replies. An id that is
 * still executing collects the later arrivals as waiters, who get the same reply
 * when it finishes. Id 0 means "no id" and is never remembered.
 *
 * Replies are kept within two byte budgets: the table's own (per connection)
 * and, when the table draws on a pool, the pool's (the tenant's, shared by all
 * of its connections). To make room the oldest finished entries go first: the
 * table's own for its budget, then the pool's oldest, whichever connection
 * holds it, for the pool's. An evicted id is forgotten entirely, so a resend
 * of it executes again; so does a resend of a reply larger than either budget,
 * which is never kept (harmless for the only requests with large replies:
 * buffer reads and inline runs). When every entry is still executing, a new id
 * is executed without being remembered.
 *
 * Ownership: stored replies are copies owned by the table. Waiters are opaque
 * pointers the table hands back. A pool outlives every table drawing on it.
 * Threading: not thread-safe; loop thread only.
 */
#ifndef TESSERAD_REPLAY_H
#define TESSERAD_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TSRD_REPLAY_ENTRIES 64
#define TSRD_REPLAY_BUDGET (UINT64_C(16) << 20)

struct tsrd_replay;

typedef struct tsrd_replay_entry {
    uint64_t id; /* 0: free */
    bool done;
    uint64_t age; /* larger is newer */
    uint8_t *reply;
    size_t len;
    void **waiters;
    size_t n_waiters;
    struct tsrd_replay *owner;                     /* the table holding the entry */
    struct tsrd_replay_entry *lru_prev, *lru_next; /* in the pool, while a reply is kept */
} tsrd_replay_entry;

/* The replies of several tables counted together: a tenant's. */
typedef struct tsrd_replay_pool {
    size_t bytes;       /* reply bytes kept by every table drawing on the pool */
    size_t budget;      /* bytes it may keep (0: none) */
    uint64_t evictions; /* kept replies dropped to make room, in any of its tables */
    tsrd_replay_entry *lru_head, *lru_tail; /* kept replies, oldest first */
} tsrd_replay_pool;

typedef struct tsrd_replay {
    tsrd_replay_entry entries[TSRD_REPLAY_ENTRIES];
    uint64_t clock;
    size_t bytes;           /* reply bytes held */
    size_t budget;          /* TSRD_REPLAY_BUDGET unless set otherwise */
    tsrd_replay_pool *pool; /* NULL: none */
} tsrd_replay;

typedef enum tsrd_replay_result {
    TSRD_REPLAY_NEW = 0,     /* execute it; call tsrd_replay_finish afterwards */
    TSRD_REPLAY_DONE = 1,    /* answered before: *reply / *len are the stored bytes */
    TSRD_REPLAY_PENDING = 2, /* still executing: waiter was added */
} tsrd_replay_result;

void tsrd_replay_init(tsrd_replay *r, size_t budget);
/* Frees stored replies and waiter lists (not the waiters), giving their bytes
 * back to the pool. */
void tsrd_replay_fini(tsrd_replay *r);

/* Draws r on pool from now on, with budget as r's own (0: keeps nothing).
 * The pool is taken only before r keeps a reply; a later call changes the
 * budget alone. */
void tsrd_replay_set_pool(tsrd_replay *r, tsrd_replay_pool *pool, size_t budget);

/* What tsrd_replay_begin would answer for id, changing nothing. */
tsrd_replay_result tsrd_replay_state(const tsrd_replay *r, uint64_t id);

/* Looks id up. For DONE, *reply stays valid until the next call on r (or on a
 * table of the same pool). For PENDING, waiter is recorded when may_wait
 * (false returned through *ok when out of memory, then the caller should
 * answer on its own), and nothing is when not (the caller refuses the resend:
 * one call tells the request path whether to answer, wait or execute). */
tsrd_replay_result tsrd_replay_begin(tsrd_replay *r, uint64_t id, void *waiter, bool may_wait,
                                     const uint8_t **reply, size_t *len, bool *ok);

/* Records the reply of an executing id (copied when it fits the budgets) and
 * hands back its waiters: *waiters is malloc'd (caller frees), *n_waiters its
 * length; both are NULL/0 when none. Unknown ids are ignored. */
void tsrd_replay_finish(tsrd_replay *r, uint64_t id, const uint8_t *reply, size_t len,
                        void ***waiters, size_t *n_waiters);

/* Entries currently held (executing or answered). */
size_t tsrd_replay_count(const tsrd_replay *r);

#endif
