/*
 * cache_trust_test.c — what a writer of the cache directory can make the daemon
 * run: nothing it did not build itself.
 *
 * Each test lets a daemon write real entries, stops it, changes the directory
 * the way a hostile user with write access would (an entry forged with a
 * recomputed SHA-256; the plan of a 2^22-element region under a 4-element
 * region's key, authenticated with the daemon's own key as if the key file had
 * leaked or a bug had mis-keyed it; a FIFO or a symbolic link in an entry's
 * place), starts it again on the same directory and checks that it serves the
 * right answer, refuses or rebuilds, and keeps answering everyone. The forger
 * works from the entry itself (the header length at offset 8, the MAC in the
 * header's last 32 bytes, the payload length at 144), as an attacker reading
 * docs/cache.md would.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <mbedtls/md.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/client.h"
#include "tessera/fingerprint.h"
#include "../support/fixture.h"

TestSuite(cache_trust, .timeout = 120);

#define SMALL 4
#define LARGE (INT64_C(1) << 22)

/* The entry file of a hex key. */
static void trust_entry_path(const testd *d, const char *key, char *path, size_t size)
{
    snprintf(path, size, "%s/%.2s/%s", d->cache_dir, key, key);
}

static uint8_t *trust_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    uint8_t *p = malloc((size_t)n + 1);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void trust_write(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

static uint32_t trust_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Compiles the y = 2x + 1 region of n elements into *out (its key included). */
static void trust_compile(const testd *d, int64_t n, tsr_client_compiled *out)
{
    fixture_compile_affine(d, n, out);
}

/* Replaces the entry of small_key by one carrying large_key's payload (the
 * plan of the big region) under small_key's header. The MAC slot gets
 * HMAC-SHA-256 under mac_key when it is given, else the plain SHA-256 anyone
 * can compute. */
static void trust_forge(const testd *d, const char *small_key, const char *large_key,
                        const uint8_t *mac_key, size_t mac_key_len)
{
    char small_path[256], large_path[256];
    trust_entry_path(d, small_key, small_path, sizeof small_path);
    trust_entry_path(d, large_key, large_path, sizeof large_path);
    size_t small_len, large_len;
    uint8_t *small = trust_slurp(small_path, &small_len);
    uint8_t *large = trust_slurp(large_path, &large_len);
    uint32_t header = trust_u32(small + 8);
    cr_assert(header >= 184 && header <= small_len && header == trust_u32(large + 8),
              "header length %u", header);
    size_t payload = large_len - header;
    uint8_t *forged = malloc(header + payload);
    memcpy(forged, small, header);
    memcpy(forged + header, large + header, payload);
    for (int i = 0; i < 8; i++)
        forged[144 + i] = (uint8_t)((uint64_t)payload >> (8 * i));
    size_t covered = header - 32;
    const mbedtls_md_info_t *sha = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    mbedtls_md_context_t ctx;
    mbedtls_md_init(&ctx);
    cr_assert_eq(mbedtls_md_setup(&ctx, sha, mac_key != NULL), 0);
    if (mac_key != NULL) {
        mbedtls_md_hmac_starts(&ctx, mac_key, mac_key_len);
        mbedtls_md_hmac_update(&ctx, forged, covered);
        mbedtls_md_hmac_update(&ctx, forged + header, payload);
        mbedtls_md_hmac_finish(&ctx, forged + covered);
    } else {
        mbedtls_md_starts(&ctx);
        mbedtls_md_update(&ctx, forged, covered);
        mbedtls_md_update(&ctx, forged + header, payload);
        mbedtls_md_finish(&ctx, forged + covered);
    }
    mbedtls_md_free(&ctx);
    trust_write(small_path, forged, header + payload);
    free(forged);
    free(small);
    free(large);
}

/* Runs y = 2x + 1 over SMALL elements on c; the status, with the output
 * checked when it is TSR_OK. */
static tsr_status trust_run_small(tsr_client *c, tsr_error *err)
{
    tsr_region *r = fixture_affine(SMALL);
    float y[SMALL] = {0};
    tsr_status st = fixture_affine_run4(c, r, y, 10000, err);
    tsr_client_region_free(r);
    for (int i = 0; st == TSR_OK && i < SMALL; i++)
        cr_expect_eq(y[i], 2 * (i + 1) + 1, "y[%d] = %g", i, (double)y[i]);
    return st;
}

/* A daemon that wrote the small and the large region's entries, stopped. */
static void trust_two_entries(testd *d, tsr_client_compiled *small, tsr_client_compiled *large)
{
    fixture_start(d, NULL);
    trust_compile(d, SMALL, small);
    trust_compile(d, LARGE, large);
    cr_assert_str_neq(small->key, large->key);
    cr_assert_eq(testd_stop(d), 0);
}

Test(cache_trust, an_entry_forged_with_a_recomputed_sha256_is_discarded_not_run)
{
    testd d;
    tsr_client_compiled small, large;
    trust_two_entries(&d, &small, &large);
    trust_forge(&d, small.key, large.key, NULL, 0);

    cr_assert_eq(testd_restart(&d, NULL), 0);
    tsr_client *c = fixture_client(&d, 10000);
    tsr_error err;
    cr_expect_eq(trust_run_small(c, &err), TSR_OK, "run: %s", err.message);
    cr_expect_eq(fixture_counter(c, "kcache_corrupt_discarded_total"), 1.0);
    cr_expect_eq(fixture_counter(c, "kcache_auth_failures_total"), 1.0);
    cr_expect_eq(fixture_counter(c, "kcache_disk_hits_total"), 0.0);
    cr_expect_eq(tsr_client_hello(c, NULL, 10000, &err), TSR_OK, "hello: %s", err.message);
    fixture_stop(&d, c);
}

Test(cache_trust, a_plan_for_a_bigger_region_under_a_small_regions_key_is_refused)
{
    testd d;
    tsr_client_compiled small, large;
    trust_two_entries(&d, &small, &large);
    /* Authentic as far as the MAC goes: signed with the daemon's own key, as a
     * leaked key or a mis-keyed build would make it. Only the check against
     * the region stands between this plan and 16 MiB written into 16 bytes. */
    char key_path[256];
    snprintf(key_path, sizeof key_path, "%s/kcache.key", d.cache_dir);
    size_t key_len = 0;
    uint8_t *key = access(key_path, F_OK) == 0 ? trust_slurp(key_path, &key_len) : NULL;
    trust_forge(&d, small.key, large.key, key, key_len);
    free(key);

    cr_assert_eq(testd_restart(&d, NULL), 0);
    tsr_client *c = fixture_client(&d, 10000);
    tsr_error err;
    cr_expect_eq(trust_run_small(c, &err), TSR_CORRUPT, "run: %s", err.message);
    cr_expect_not_null(strstr(err.message, "stored plan is for another region"), "%s", err.message);
    cr_expect_not_null(strstr(err.message, "refused, not run"), "%s", err.message);
    /* Still serving, and the refused entry was dropped: the next run rebuilds. */
    tsr_client_health h;
    cr_expect_eq(tsr_client_health_get(c, &h, 10000, &err), TSR_OK, "health: %s", err.message);
    cr_expect_eq(trust_run_small(c, &err), TSR_OK, "run: %s", err.message);
    tsr_client_compiled again;
    tsr_region *r = fixture_affine(SMALL);
    fixture_compile_on(c, r, &again);
    tsr_client_region_free(r);
    cr_expect_str_eq(again.key, small.key);
    fixture_stop(&d, c);
}

/* Starts the daemon again with two workers, compiles the small region on two
 * connections at once (which would hold both workers if reading the entry
 * blocked) while a third asks for health; all must answer, the compiles with
 * a rebuilt kernel (a miss), and the entry's name must hold a regular file
 * after. Returns the third connection, for the caller to stop the daemon with. */
static tsr_client *trust_expect_skipped(testd *d, const char *key)
{
    const char *const extra[] = {"--workers", "2", NULL};
    cr_assert_eq(testd_restart(d, extra), 0);
    fixture_compile_job jobs[2];
    for (int i = 0; i < 2; i++)
        fixture_compile_start(&jobs[i], d, SMALL, 10000);
    tsr_client *c = fixture_client(d, 5000);
    tsr_client_health h;
    tsr_error err;
    cr_expect_eq(tsr_client_health_get(c, &h, 5000, &err), TSR_OK, "health: %s", err.message);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(fixture_compile_join(&jobs[i]), TSR_OK, "compile %d: %s", i,
                     jobs[i].err.message);
        cr_expect_str_eq(jobs[i].out.key, key);
        cr_expect_str_neq(jobs[i].out.decision.cache_level, "disk",
                          "compile %d was served what the name leads to", i);
    }
    tsr_error perr;
    cr_expect_eq(trust_run_small(c, &perr), TSR_OK, "run: %s", perr.message);
    char path[256];
    trust_entry_path(d, key, path, sizeof path);
    struct stat st;
    cr_expect_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the rebuilt entry did not replace what was there");
    return c;
}

/* A daemon that wrote the small region's entry, stopped; path the entry's file. */
static void trust_one_entry(testd *d, tsr_client_compiled *small, char *path, size_t size)
{
    fixture_start(d, NULL);
    trust_compile(d, SMALL, small);
    cr_assert_eq(testd_stop(d), 0);
    trust_entry_path(d, small->key, path, size);
}

Test(cache_trust, a_fifo_in_place_of_an_entry_is_skipped_without_blocking)
{
    testd d;
    tsr_client_compiled small;
    char path[256];
    trust_one_entry(&d, &small, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0);
    fixture_stop(&d, trust_expect_skipped(&d, small.key));
}

Test(cache_trust, a_symlink_in_place_of_an_entry_is_not_followed)
{
    testd d;
    tsr_client_compiled small;
    /* The genuine entry moved out of the cache and linked back: following the
     * link would serve whatever file its maker points it at. */
    char path[256], target[256];
    trust_one_entry(&d, &small, path, sizeof path);
    snprintf(target, sizeof target, "%s/elsewhere", d.dir);
    cr_assert_eq(rename(path, target), 0);
    cr_assert_eq(symlink(target, path), 0);
    struct stat before, after;
    cr_assert_eq(stat(target, &before), 0);
    tsr_client *c = trust_expect_skipped(&d, small.key);
    cr_assert_eq(stat(target, &after), 0);
    cr_expect_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec, "the link's target was touched");
    cr_expect_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    fixture_stop(&d, c);
}
