/*
 * handles.h — random 64-bit handles checked against their owner.
 *
 * Buffers and kernels reach clients as opaque 64-bit ids drawn from getrandom,
 * never 0, so a guessed or stale id is unlikely to name anything. Every lookup
 * names the expected type and owner; an id that is unknown, freed, of another
 * type or owned by someone else is reported the same way (NULL), so a client
 * cannot tell a foreign handle from a missing one.
 *
 * Ownership: the table stores pointers; it never frees the objects.
 * Threading: not thread-safe; the daemon's table belongs to the loop thread.
 */
#ifndef TESSERAD_HANDLES_H
#define TESSERAD_HANDLES_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/status.h"

typedef enum tsrd_handle_type {
    TSRD_HANDLE_BUFFER = 1,
    TSRD_HANDLE_KERNEL = 2,
} tsrd_handle_type;

typedef struct tsrd_handle_slot {
    uint64_t id; /* 0: empty */
    int type;    /* 0 with id 1: a tombstone left by a removal */
    const void *owner;
    void *obj;
} tsrd_handle_slot;

typedef struct tsrd_handles {
    tsrd_handle_slot *slots;
    size_t cap;  /* power of two */
    size_t used; /* live entries plus tombstones */
    size_t live;
} tsrd_handles;

void tsrd_handles_init(tsrd_handles *t);
/* Frees the table (not the objects). */
void tsrd_handles_fini(tsrd_handles *t);

/* Stores obj under a fresh random id. TSR_NO_MEMORY when the table cannot grow,
 * TSR_INTERNAL when the random source fails. */
tsr_status tsrd_handles_add(tsrd_handles *t, tsrd_handle_type type, const void *owner, void *obj,
                            uint64_t *id, tsr_error *err);

/* The object, or NULL when id is absent or not (type, owner). */
void *tsrd_handles_get(const tsrd_handles *t, uint64_t id, tsrd_handle_type type,
                       const void *owner);
/* Looks up ids[0 .. n) (of types[i], owner's) into out[i], in order, stopping
 * at the first that is absent: returns its index, or n when all were found. */
size_t tsrd_handles_get_each(const tsrd_handles *t, const uint64_t *ids,
                             const tsrd_handle_type *types, size_t n, const void *owner,
                             void **out);

/* Removes and returns the object; NULL (and nothing removed) when id is absent or
 * not (type, owner). */
void *tsrd_handles_remove(tsrd_handles *t, uint64_t id, tsrd_handle_type type, const void *owner);

/* Removes every entry of owner, calling fn(obj, type, arg) for each after its
 * removal. Returns how many were removed. */
size_t tsrd_handles_remove_owner(tsrd_handles *t, const void *owner,
                                 void (*fn)(void *obj, tsrd_handle_type type, void *arg),
                                 void *arg);

/* Calls fn(obj, arg) for every live entry of type, in table order. fn must not
 * add or remove entries. */
void tsrd_handles_each(const tsrd_handles *t, tsrd_handle_type type,
                       void (*fn)(void *obj, void *arg), void *arg);

/* Live entries of a type (0 = all types). */
size_t tsrd_handles_count(const tsrd_handles *t, int type);

#endif
