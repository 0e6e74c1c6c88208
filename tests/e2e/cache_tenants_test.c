/*
 * cache_tenants_test.c — the kernel cache, shared by tenants, seen by each of
 * them: alice and bob (tokens, no rights beyond their own) and ops (admin).
 *
 * A tenant lists, evicts and counts only the entries it holds; a compile that
 * is served an entry another tenant built reports what a miss would (level,
 * compile time, verdict); its stats carry none of the cache's counters and no
 * other tenant's rows. ops sees and evicts everything.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/fixture.h"

#define TOKEN_ALICE "alice-cache-token"
#define TOKEN_BOB "bob-cache-token"
#define TOKEN_OPS "ops-cache-token"

static testd scope_d;

static void scope_setup(void)
{
    char ha[65], hb[65], ho[65];
    testd_token_sha256(TOKEN_ALICE, ha);
    testd_token_sha256(TOKEN_BOB, hb);
    testd_token_sha256(TOKEN_OPS, ho);
    /* testd waits for a hello, which needs a tenant: it goes as alice. */
    setenv("TESSERA_TOKEN", TOKEN_ALICE, 1);
    cr_assert_eq(testd_start_config(&scope_d, NULL,
                                    "{\"tenants\": ["
                                    "{\"name\": \"alice\", \"token_sha256\": [\"%s\"]},"
                                    "{\"name\": \"bob\", \"token_sha256\": [\"%s\"]},"
                                    "{\"name\": \"ops\", \"token_sha256\": [\"%s\"],"
                                    " \"admin\": true}]}\n",
                                    ha, hb, ho),
                 0, "tesserad did not start");
}

static void scope_teardown(void)
{
    testd_stop(&scope_d);
    testd_remove(&scope_d);
    unsetenv("TESSERA_TOKEN");
}

TestSuite(cache_tenants, .init = scope_setup, .fini = scope_teardown, .timeout = 120);

static tsr_client *scope_client(const char *token)
{
    tsr_client *c = testd_connect(scope_d.url, token, 30000);
    cr_assert_not_null(c);
    return c;
}

/* Compiles the y = 2x + 1 region of n elements on c. */
static tsr_client_compiled scope_compile(tsr_client *c, int64_t n)
{
    tsr_client_compiled out;
    tsr_client_region_free(fixture_affine_compiled(c, n, &out));
    return out;
}

/* c's listing row of key (NULL when it has none), copied into *row. */
static bool scope_lists(tsr_client *c, const char *key, tsr_client_cache_entry *row)
{
    tsr_client_cache_entry *rows = NULL;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_cache_list(c, &rows, &n, 0, &err), TSR_OK, "%s", err.message);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].key, key) == 0) {
            found = true;
            if (row != NULL)
                *row = rows[i];
        }
    tsr_client_cache_free(rows);
    return found;
}

/* The origin c's listing gives key's entry, into origin (NULL when c lists
 * no such entry). */
static const char *scope_origin(tsr_client *c, const char *key, char *origin, size_t size)
{
    tsr_client_cache_row *rows = NULL;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_cache_list_rows(c, &rows, &n, 0, &err), TSR_OK, "%s", err.message);
    const char *found = NULL;
    for (size_t i = 0; i < n && found == NULL; i++)
        if (strcmp(rows[i].entry.key, key) == 0) {
            snprintf(origin, size, "%s", rows[i].origin);
            found = origin;
        }
    tsr_client_cache_rows_free(rows);
    return found;
}

static size_t scope_count(tsr_client *c)
{
    tsr_client_cache_entry *rows = NULL;
    size_t n = 0;
    cr_assert_eq(tsr_client_cache_list(c, &rows, &n, 0, NULL), TSR_OK);
    tsr_client_cache_free(rows);
    return n;
}

/* Whether any counter of c's stats starts with prefix or contains infix. */
static bool scope_stats_has(tsr_client *c, const char *prefix, const char *infix)
{
    tsr_client_stats *s = NULL;
    tsr_error err;
    cr_assert_eq(tsr_client_stats_get(c, true, &s, 0, &err), TSR_OK, "%s", err.message);
    bool found = false;
    for (size_t i = 0; i < s->n_counters; i++)
        if ((prefix != NULL && strncmp(s->counters[i].name, prefix, strlen(prefix)) == 0) ||
            (infix != NULL && strstr(s->counters[i].name, infix) != NULL))
            found = true;
    if (infix != NULL && strstr(s->prometheus_text, infix) != NULL)
        found = true;
    if (prefix != NULL) {
        char line[128];
        snprintf(line, sizeof line, "tesserad_%s", prefix);
        found = found || strstr(s->prometheus_text, line) != NULL;
    }
    tsr_client_stats_free(s);
    return found;
}

Test(cache_tenants, bob_neither_sees_nor_evicts_alices_entries)
{
    tsr_client *alice = scope_client(TOKEN_ALICE), *bob = scope_client(TOKEN_BOB);
    tsr_client_compiled k = scope_compile(alice, 8);
    cr_expect(scope_lists(alice, k.key, NULL));
    cr_expect_not(scope_lists(bob, k.key, NULL), "bob lists alice's key");
    cr_expect_eq(scope_count(bob), 0);

    /* Her key answers as one that was never there, word for word. */
    tsr_error foreign, unknown;
    uint32_t evicted = 99;
    cr_expect_eq(tsr_client_cache_evict(bob, k.key, &evicted, 0, &foreign), TSR_NOT_FOUND);
    char never[65];
    snprintf(never, sizeof never, "%.63s%c", k.key, k.key[63] == '0' ? '1' : '0');
    cr_expect_eq(tsr_client_cache_evict(bob, never, &evicted, 0, &unknown), TSR_NOT_FOUND);
    char want_foreign[160], want_unknown[160];
    snprintf(want_foreign, sizeof want_foreign, "cache_evict.key: no entry %s", k.key);
    snprintf(want_unknown, sizeof want_unknown, "cache_evict.key: no entry %s", never);
    cr_expect_str_eq(foreign.message, want_foreign);
    cr_expect_str_eq(unknown.message, want_unknown);

    /* "all" is all of bob's: none. */
    cr_expect_eq(tsr_client_cache_evict(bob, "all", &evicted, 0, NULL), TSR_OK);
    cr_expect_eq(evicted, 0);
    cr_expect(scope_lists(alice, k.key, NULL), "bob's evictions took alice's entry");
    tsr_client_compiled again = scope_compile(alice, 8);
    cr_expect_str_eq(again.decision.cache_level, "memory");
    tsr_client_close(alice);
    tsr_client_close(bob);
}

Test(cache_tenants, compiling_alices_region_tells_bob_nothing)
{
    tsr_client *alice = scope_client(TOKEN_ALICE), *bob = scope_client(TOKEN_BOB);
    tsr_client_compiled first = scope_compile(alice, 16);
    cr_expect_not(first.decision.cache_hit);
    cr_expect_gt(first.compile_ms, 0);

    /* Served from the cache, reported as the build it would have been. */
    tsr_client_compiled b1 = scope_compile(bob, 16);
    cr_expect_str_eq(b1.key, first.key);
    cr_expect_not(b1.decision.cache_hit, "bob was told the kernel was cached");
    cr_expect_str_eq(b1.decision.cache_level, "");
    cr_expect_eq(b1.compile_ms, first.compile_ms,
                 "bob is told alice's build time as his own: %.9f vs %.9f", b1.compile_ms,
                 first.compile_ms);
    cr_expect_not(b1.decision.verdict.cached);
    /* His own second compile is his own hit. */
    tsr_client_compiled b2 = scope_compile(bob, 16);
    cr_expect(b2.decision.cache_hit);
    cr_expect_str_eq(b2.decision.cache_level, "memory");
    cr_expect_eq(b2.compile_ms, 0);

    /* Listings count each tenant's own use. */
    tsr_client_cache_entry row;
    cr_assert(scope_lists(bob, first.key, &row));
    cr_expect_eq(row.hits, 1);
    cr_assert(scope_lists(alice, first.key, &row));
    cr_expect_eq(row.hits, 0, "alice's row counts bob's compiles");

    /* Stats: bob's own rows, nobody else's, and no cache counters. */
    cr_expect_eq(fixture_counter(bob, "tenant_kernels{tenant=\"bob\"}"), 1.0);
    cr_expect_not(scope_stats_has(bob, NULL, "tenant=\"alice\""), "bob sees alice's rows");
    cr_expect_not(scope_stats_has(bob, NULL, "tenant=\"ops\""));
    cr_expect_not(scope_stats_has(bob, "kcache_", NULL), "bob sees the cache's counters");
    cr_expect_not(scope_stats_has(bob, "candidate_", NULL));
    cr_expect_eq(fixture_counter(bob, "kernels"), 1.0, "the gauge counts bob's own");
    tsr_client_close(alice);
    tsr_client_close(bob);
}

Test(cache_tenants, an_entry_both_hold_stays_for_the_other_after_one_evicts_it)
{
    tsr_client *alice = scope_client(TOKEN_ALICE), *bob = scope_client(TOKEN_BOB);
    tsr_client_compiled k = scope_compile(alice, 24);
    scope_compile(bob, 24);
    uint32_t evicted = 0;
    tsr_error err;
    cr_expect_eq(tsr_client_cache_evict(bob, k.key, &evicted, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(evicted, 1);
    cr_expect_not(scope_lists(bob, k.key, NULL));
    cr_expect(scope_lists(alice, k.key, NULL), "bob's eviction took alice's entry");
    tsr_client_compiled a = scope_compile(alice, 24);
    cr_expect_str_eq(a.decision.cache_level, "memory");
    /* For bob it is gone: his next compile reads as a build again. */
    tsr_client_compiled b = scope_compile(bob, 24);
    cr_expect_not(b.decision.cache_hit);
    /* alice's "all" drops hers, and the entry stays while bob holds it. */
    cr_expect_eq(tsr_client_cache_evict(alice, "all", &evicted, 0, NULL), TSR_OK);
    cr_expect_eq(evicted, 1);
    cr_expect_not(scope_lists(alice, k.key, NULL));
    cr_expect(scope_lists(bob, k.key, NULL));
    tsr_client_close(alice);
    tsr_client_close(bob);
}

Test(cache_tenants, ops_sees_and_evicts_every_tenants_entries)
{
    tsr_client *alice = scope_client(TOKEN_ALICE), *bob = scope_client(TOKEN_BOB);
    tsr_client *ops = scope_client(TOKEN_OPS);
    tsr_client_compiled ka = scope_compile(alice, 32), kb = scope_compile(bob, 40);
    cr_expect(scope_lists(ops, ka.key, NULL));
    cr_expect(scope_lists(ops, kb.key, NULL));
    cr_expect(scope_stats_has(ops, NULL, "tenant=\"alice\""));
    cr_expect(scope_stats_has(ops, NULL, "tenant=\"bob\""));
    cr_expect_geq(fixture_counter(ops, "kcache_misses_total"), 2.0);
    /* One of alice's keys, then everything. */
    uint32_t evicted = 0;
    tsr_error err;
    cr_expect_eq(tsr_client_cache_evict(ops, ka.key, &evicted, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(evicted, 1);
    cr_expect_not(scope_lists(alice, ka.key, NULL));
    size_t before = scope_count(ops);
    cr_expect_eq(tsr_client_cache_evict(ops, "all", &evicted, 0, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(evicted, (uint32_t)before);
    cr_expect_eq(scope_count(ops), 0);
    cr_expect_eq(scope_count(bob), 0);
    tsr_client_close(alice);
    tsr_client_close(bob);
    tsr_client_close(ops);
}

Test(cache_tenants, only_a_listing_of_every_entry_says_where_it_came_from)
{
    tsr_client *alice = scope_client(TOKEN_ALICE), *ops = scope_client(TOKEN_OPS);
    tsr_client_compiled k = scope_compile(alice, 48);
    char origin[TSR_CLIENT_NAME_MAX];
    /* alice's own listing: her compile of an entry another tenant brought in
     * reads as a build, which an origin must not contradict. */
    cr_assert_not_null(scope_origin(alice, k.key, origin, sizeof origin));
    cr_expect_str_eq(origin, "");
    cr_assert_not_null(scope_origin(ops, k.key, origin, sizeof origin));
    cr_expect_str_eq(origin, "compiled");
    tsr_client_close(alice);
    tsr_client_close(ops);
}
