/*
 * cache_test.c — the kernel cache seen from outside: a second compile is a memory
 * hit, and a daemon restarted on the same cache directory finds the kernel on
 * disk.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "tessera/client.h"
#include "../support/fixture.h"

TestSuite(cache, .timeout = 120);

static void cache_compile(const testd *d, const char *path, tsr_client_compiled *out)
{
    fixture_compile(d, fixture_region_file(path), out);
}

Test(cache, second_compile_is_a_memory_hit)
{
    testd d;
    fixture_start(&d, NULL);
    tsr_client_compiled first, second;
    cache_compile(&d, "examples/matmul.json", &first);
    cache_compile(&d, "examples/matmul.json", &second);
    cr_expect_eq(first.decision.cache_hit, false);
    cr_expect_eq(second.decision.cache_hit, true);
    cr_expect_str_eq(second.decision.cache_level, "memory");
    cr_expect_str_eq(first.key, second.key);
    cr_expect_eq(second.compile_ms, 0.0);
    fixture_stop(&d, NULL);
}

Test(cache, restart_on_the_same_directory_is_a_disk_hit)
{
    testd d;
    fixture_start(&d, NULL);
    tsr_client_compiled first, again;
    cache_compile(&d, "examples/fused.json", &first);
    cr_expect_eq(first.decision.cache_hit, false);
    cr_assert_eq(testd_stop(&d), 0);
    cr_assert_eq(testd_restart(&d, NULL), 0);
    cache_compile(&d, "examples/fused.json", &again);
    cr_expect_eq(again.decision.cache_hit, true);
    cr_expect_str_eq(again.decision.cache_level, "disk");
    cr_expect_str_eq(first.key, again.key);
    fixture_stop(&d, NULL);
}

/* One connection compiling the same region again gets the same kernel handle
 * back (no second loaded copy); another region gets its own. */
Test(cache, recompiling_on_one_connection_returns_the_same_handle)
{
    testd d;
    tsr_client *c = fixture_start_client(&d, NULL, 0);
    tsr_region *mm = fixture_region_file("examples/matmul.json");
    tsr_region *pw = fixture_region_file("examples/pointwise.json");
    tsr_client_compiled first, again, other;
    fixture_compile_on(c, mm, &first);
    for (int i = 0; i < 5; i++) {
        fixture_compile_on(c, mm, &again);
        cr_expect_eq(again.kernel, first.kernel, "recompile %d", i);
    }
    fixture_compile_on(c, pw, &other);
    cr_expect_neq(other.kernel, first.kernel);
    cr_expect_neq(other.kernel, 0);
    tsr_client_region_free(mm);
    tsr_client_region_free(pw);
    fixture_stop(&d, c);
}
