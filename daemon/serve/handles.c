/*
 * handles.c — an open-addressing table from random ids to objects.
 *
 * Ids are already uniformly random, so the low bits index the table directly
 * with linear probing. Removal leaves a tombstone so later probes keep going;
 * the table is rebuilt (dropping tombstones) when live entries plus tombstones
 * pass half its capacity.
 */
#include "serve/handles.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define HANDLES_TOMBSTONE_ID 1u

static bool handles_slot_is_tombstone(const tsrd_handle_slot *s)
{
    return s->id == HANDLES_TOMBSTONE_ID && s->type == 0;
}

void tsrd_handles_init(tsrd_handles *t)
{
    memset(t, 0, sizeof *t);
}

void tsrd_handles_fini(tsrd_handles *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static tsrd_handle_slot *handles_find(const tsrd_handles *t, uint64_t id)
{
    if (t->cap == 0 || id == 0 || id == HANDLES_TOMBSTONE_ID)
        return NULL;
    for (size_t i = id & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        tsrd_handle_slot *s = &t->slots[i];
        if (s->id == 0)
            return NULL;
        if (s->id == id && !handles_slot_is_tombstone(s))
            return s;
    }
}

static void handles_insert_slot(tsrd_handles *t, const tsrd_handle_slot *src)
{
    size_t i = src->id & (t->cap - 1);
    while (t->slots[i].id != 0)
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = *src;
}

static tsr_status handles_grow(tsrd_handles *t, tsr_error *err)
{
    size_t cap = t->cap ? t->cap : 32;
    while ((t->live + 1) * 2 > cap)
        cap *= 2;
    tsrd_handle_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "handle table: out of memory");
    tsrd_handles old = *t;
    t->slots = slots;
    t->cap = cap;
    t->used = t->live;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].id != 0 && !handles_slot_is_tombstone(&old.slots[i]))
            handles_insert_slot(t, &old.slots[i]);
    free(old.slots);
    return TSR_OK;
}

static tsr_status handles_random_id(uint64_t *id, tsr_error *err)
{
    uint64_t v;
    ssize_t n;
    do
        n = getrandom(&v, sizeof v, 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof v)
        return tsr_error_set(err, TSR_INTERNAL, "getrandom failed: %s", strerror(errno));
    *id = v;
    return TSR_OK;
}

tsr_status tsrd_handles_add(tsrd_handles *t, tsrd_handle_type type, const void *owner, void *obj,
                            uint64_t *id, tsr_error *err)
{
    if ((t->used + 1) * 2 > t->cap) {
        tsr_status st = handles_grow(t, err);
        if (st != TSR_OK)
            return st;
    }
    tsrd_handle_slot slot = {.type = type, .owner = owner, .obj = obj};
    do {
        tsr_status st = handles_random_id(&slot.id, err);
        if (st != TSR_OK)
            return st;
    } while (slot.id <= HANDLES_TOMBSTONE_ID || handles_find(t, slot.id) != NULL);
    handles_insert_slot(t, &slot);
    t->used++;
    t->live++;
    *id = slot.id;
    return TSR_OK;
}

void *tsrd_handles_get(const tsrd_handles *t, uint64_t id, tsrd_handle_type type, const void *owner)
{
    const tsrd_handle_slot *s = handles_find(t, id);
    if (s == NULL || s->type != (int)type || s->owner != owner)
        return NULL;
    return s->obj;
}

size_t tsrd_handles_get_each(const tsrd_handles *t, const uint64_t *ids,
                             const tsrd_handle_type *types, size_t n, const void *owner, void **out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = tsrd_handles_get(t, ids[i], types[i], owner);
        if (out[i] == NULL)
            return i;
    }
    return n;
}

static void handles_kill(tsrd_handles *t, tsrd_handle_slot *s)
{
    s->id = HANDLES_TOMBSTONE_ID;
    s->type = 0;
    s->owner = NULL;
    s->obj = NULL;
    t->live--;
}

void *tsrd_handles_remove(tsrd_handles *t, uint64_t id, tsrd_handle_type type, const void *owner)
{
    tsrd_handle_slot *s = handles_find(t, id);
    if (s == NULL || s->type != (int)type || s->owner != owner)
        return NULL;
    void *obj = s->obj;
    handles_kill(t, s);
    return obj;
}

size_t tsrd_handles_remove_owner(tsrd_handles *t, const void *owner,
                                 void (*fn)(void *obj, tsrd_handle_type type, void *arg), void *arg)
{
    size_t removed = 0;
    for (size_t i = 0; i < t->cap; i++) {
        tsrd_handle_slot *s = &t->slots[i];
        if (s->id == 0 || handles_slot_is_tombstone(s) || s->owner != owner)
            continue;
        void *obj = s->obj;
        tsrd_handle_type type = (tsrd_handle_type)s->type;
        handles_kill(t, s);
        removed++;
        if (fn != NULL)
            fn(obj, type, arg);
    }
    return removed;
}

void tsrd_handles_each(const tsrd_handles *t, tsrd_handle_type type,
                       void (*fn)(void *obj, void *arg), void *arg)
{
    for (size_t i = 0; i < t->cap; i++) {
        const tsrd_handle_slot *s = &t->slots[i];
        if (s->id != 0 && !handles_slot_is_tombstone(s) && s->type == (int)type)
            fn(s->obj, arg);
    }
}

size_t tsrd_handles_count(const tsrd_handles *t, int type)
{
    if (type == 0)
        return t->live;
    size_t n = 0;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].id != 0 && !handles_slot_is_tombstone(&t->slots[i]) &&
            t->slots[i].type == type)
            n++;
    return n;
}
