/*
 * fifo.h — the daemon's intrusive first-in first-out queues: a queue is a head
 * and a tail pointer, and each item links to the next through a member of its
 * own, so one item may sit in several queues at once (a job in its session's
 * stream and in its tenant's work queue). The macros touch nothing else;
 * whoever owns the queue's pointers (the loop thread, or the holder of a
 * mutex) is the only one to use them.
 */
#ifndef TESSERAD_SERVE_FIFO_H
#define TESSERAD_SERVE_FIFO_H

#include <stddef.h>

/* Appends item to the queue (head, tail), linking through item->next. */
#define TSRD_FIFO_PUSH(head, tail, item, next)                                                     \
    do {                                                                                           \
        (item)->next = NULL;                                                                       \
        if ((tail) != NULL)                                                                        \
            (tail)->next = (item);                                                                 \
        else                                                                                       \
            (head) = (item);                                                                       \
        (tail) = (item);                                                                           \
    } while (0)

/* Takes the first item of the queue (head, tail), which must not be empty,
 * into out. */
#define TSRD_FIFO_POP(out, head, tail, next)                                                       \
    do {                                                                                           \
        (out) = (head);                                                                            \
        (head) = (out)->next;                                                                      \
        if ((head) == NULL)                                                                        \
            (tail) = NULL;                                                                         \
    } while (0)

#endif
