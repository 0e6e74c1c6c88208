/*
 * dlist_internal.h — intrusive doubly linked lists for lib/: items that carry
 * their own two links, between the list's two ends held by the owner. The
 * kernel cache's memory LRU (kcache.c) and the arbiter's verdicts in age order
 * (arbiter.c) are such lists.
 *
 * Not thread-safe: the caller holds whatever lock guards the list. Arguments
 * are evaluated more than once.
 */
#ifndef TSRI_DLIST_INTERNAL_H
#define TSRI_DLIST_INTERNAL_H

#include <stddef.h>

/* Puts item at the list's end `end` (the other end other_end): its link
 * `toward` points past that end (NULL), its link `away` at the item that was
 * there. */
#define TSRI_DLIST_PUSH(end, other_end, item, toward, away)                                        \
    do {                                                                                           \
        (item)->toward = NULL;                                                                     \
        (item)->away = (end);                                                                      \
        if (end)                                                                                   \
            (end)->toward = (item);                                                                \
        else                                                                                       \
            (other_end) = (item);                                                                  \
        (end) = (item);                                                                            \
    } while (0)

/* Takes item out of the list whose ends are first and last, its link prev
 * pointing toward first and next toward last; item's own links are left as
 * they were. */
#define TSRI_DLIST_UNLINK(first, last, item, prev, next)                                           \
    do {                                                                                           \
        if ((item)->prev)                                                                          \
            (item)->prev->next = (item)->next;                                                     \
        else                                                                                       \
            (first) = (item)->next;                                                                \
        if ((item)->next)                                                                          \
            (item)->next->prev = (item)->prev;                                                     \
        else                                                                                       \
            (last) = (item)->prev;                                                                 \
    } while (0)

#endif
