/*
 * handles_test.c — random handles checked against type and owner.
 */
#include <criterion/criterion.h>

#include "serve/handles.h"

static int owner_a, owner_b, obj1, obj2;

Test(handles, lookup_needs_the_right_type_and_owner)
{
    tsrd_handles t;
    tsrd_handles_init(&t);
    uint64_t id;
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_BUFFER, &owner_a, &obj1, &id, NULL), TSR_OK);
    cr_assert_neq(id, 0);
    cr_assert_eq(tsrd_handles_get(&t, id, TSRD_HANDLE_BUFFER, &owner_a), &obj1);
    cr_assert_null(tsrd_handles_get(&t, id, TSRD_HANDLE_BUFFER, &owner_b));
    cr_assert_null(tsrd_handles_get(&t, id, TSRD_HANDLE_KERNEL, &owner_a));
    cr_assert_null(tsrd_handles_get(&t, id ^ 1, TSRD_HANDLE_BUFFER, &owner_a));
    cr_assert_null(tsrd_handles_get(&t, 0, TSRD_HANDLE_BUFFER, &owner_a));
    tsrd_handles_fini(&t);
}

Test(handles, get_each_stops_at_the_first_handle_not_found)
{
    tsrd_handles t;
    tsrd_handles_init(&t);
    uint64_t k, b1, b2, other;
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_KERNEL, &owner_a, &obj1, &k, NULL), TSR_OK);
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_BUFFER, &owner_a, &obj2, &b1, NULL), TSR_OK);
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_BUFFER, &owner_a, &obj1, &b2, NULL), TSR_OK);
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_BUFFER, &owner_b, &obj2, &other, NULL), TSR_OK);
    const tsrd_handle_type types[] = {TSRD_HANDLE_KERNEL, TSRD_HANDLE_BUFFER, TSRD_HANDLE_BUFFER};
    void *out[3] = {NULL, NULL, NULL};
    const uint64_t all[] = {k, b1, b2};
    cr_assert_eq(tsrd_handles_get_each(&t, all, types, 3, &owner_a, out), 3);
    cr_assert_eq(out[0], &obj1);
    cr_assert_eq(out[1], &obj2);
    cr_assert_eq(out[2], &obj1);
    /* Another owner's buffer, a kernel asked as a buffer, an unknown id. */
    const uint64_t foreign[] = {k, other, b2};
    cr_assert_eq(tsrd_handles_get_each(&t, foreign, types, 3, &owner_a, out), 1);
    cr_assert_null(out[1]);
    const uint64_t wrong_type[] = {k, b1, k};
    cr_assert_eq(tsrd_handles_get_each(&t, wrong_type, types, 3, &owner_a, out), 2);
    const uint64_t unknown[] = {k ^ 1, b1, b2};
    cr_assert_eq(tsrd_handles_get_each(&t, unknown, types, 3, &owner_a, out), 0);
    cr_assert_eq(tsrd_handles_get_each(&t, all, types, 0, &owner_a, out), 0);
    tsrd_handles_fini(&t);
}

Test(handles, removed_handles_are_gone_and_foreign_removal_fails)
{
    tsrd_handles t;
    tsrd_handles_init(&t);
    uint64_t id;
    cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_KERNEL, &owner_a, &obj1, &id, NULL), TSR_OK);
    cr_assert_null(tsrd_handles_remove(&t, id, TSRD_HANDLE_KERNEL, &owner_b));
    cr_assert_eq(tsrd_handles_count(&t, 0), 1);
    cr_assert_eq(tsrd_handles_remove(&t, id, TSRD_HANDLE_KERNEL, &owner_a), &obj1);
    cr_assert_null(tsrd_handles_get(&t, id, TSRD_HANDLE_KERNEL, &owner_a));
    cr_assert_null(tsrd_handles_remove(&t, id, TSRD_HANDLE_KERNEL, &owner_a));
    cr_assert_eq(tsrd_handles_count(&t, 0), 0);
    tsrd_handles_fini(&t);
}

static void count_removed(void *obj, tsrd_handle_type type, void *arg)
{
    (void)type;
    cr_assert_eq(obj, &obj2);
    (*(int *)arg)++;
}

Test(handles, many_entries_survive_growth_and_owner_removal)
{
    tsrd_handles t;
    tsrd_handles_init(&t);
    uint64_t ids[1000];
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(tsrd_handles_add(&t, TSRD_HANDLE_BUFFER, i % 2 ? &owner_b : &owner_a,
                                      i % 2 ? (void *)&obj2 : (void *)&obj1, &ids[i], NULL),
                     TSR_OK);
    for (int i = 0; i < 1000; i += 4)
        cr_assert_eq(tsrd_handles_remove(&t, ids[i], TSRD_HANDLE_BUFFER, &owner_a), &obj1);
    cr_assert_eq(tsrd_handles_count(&t, TSRD_HANDLE_BUFFER), 750);
    int removed = 0;
    cr_assert_eq(tsrd_handles_remove_owner(&t, &owner_b, count_removed, &removed), 500);
    cr_assert_eq(removed, 500);
    for (int i = 0; i < 1000; i++) {
        void *want = (i % 2 == 0 && i % 4 != 0) ? &obj1 : NULL;
        cr_assert_eq(tsrd_handles_get(&t, ids[i], TSRD_HANDLE_BUFFER, i % 2 ? &owner_b : &owner_a),
                     want, "entry %d", i);
    }
    cr_assert_eq(tsrd_handles_count(&t, 0), 250);
    tsrd_handles_fini(&t);
}
