/*
 * kcache_test.c — the compiled-kernel cache through its public API.
 *
 * Every test that touches the disk works in its own directory made by mkdtemp
 * under /tmp and removes it afterwards. The on-disk layout (DIR/ab/<64 hex>, a
 * 192-byte header, then the payload; the key in DIR/kcache.key) is documented
 * in docs/cache.md; tests that damage or forge entries rely on it. Concurrency tests never sleep
 * for a fixed time to line threads up: the build waits until the cache reports the expected number
 * of waiting callers, so the outcome does not depend on scheduling.
 */
#include "tessera/kcache.h"
#include "../../lib/kcache_internal.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HEADER_BYTES TSRI_KCACHE_HEADER_BYTES

/* ---- fixtures ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void tree_remove(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The test's directory. Each test runs in its own process, so one slot per
 * process suffices; the suite's fini removes it even after a failed assertion,
 * together with the ".moved" name a test may park it under. */
static char test_dir[64];

static const char *dir_make(void)
{
    snprintf(test_dir, sizeof test_dir, "/tmp/kcache-test-XXXXXX");
    cr_assert_not_null(mkdtemp(test_dir));
    return test_dir;
}

/* The name a test may park its directory under. */
static void dir_moved_name(char *out, size_t cap)
{
    snprintf(out, cap, "%s.moved", test_dir);
}

static void dir_cleanup(void)
{
    if (test_dir[0] == '\0')
        return;
    char moved[128];
    dir_moved_name(moved, sizeof moved);
    tree_remove(test_dir);
    tree_remove(moved);
}

TestSuite(kcache, .fini = dir_cleanup);

static tsr_fingerprint key_of(int n)
{
    tsr_fingerprint k;
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        k.bytes[i] = (uint8_t)(n * 37 + i * 11 + 1);
    return k;
}

static void entry_path(const char *dir, const tsr_fingerprint *k, char *path, size_t cap)
{
    char hex[TSR_FINGERPRINT_HEX];
    for (int i = 0; i < TSR_FINGERPRINT_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", k->bytes[i]);
    snprintf(path, cap, "%s/%.2s/%s", dir, hex, hex);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Whether key n's entry file is in dir. */
static bool entry_exists(const char *dir, int n)
{
    tsr_fingerprint k = key_of(n);
    char path[600];
    entry_path(dir, &k, path, sizeof path);
    return file_exists(path);
}

/* The disk bound's count of an entry file: whole 4 KiB blocks. */
#define FOOTPRINT(n) ((((uint64_t)(n)) + 4095) / 4096 * 4096)

static tsr_kcache *cache_open(const char *dir, uint64_t memory_bytes, uint64_t disk_bytes)
{
    tsr_kcache_options o = {.dir = dir, .memory_bytes = memory_bytes, .disk_bytes = disk_bytes};
    tsr_kcache *c = NULL;
    tsr_error err;
    tsr_status st = tsr_kcache_open(&o, &c, &err);
    cr_assert_eq(st, TSR_OK, "open: %s", err.message);
    return c;
}

/* A field of tsr_kcache_stats and the value a test expects of it. */
struct stat_want {
    size_t offset;
    const char *name;
    uint64_t want;
};
#define STAT(field, value)                                                                         \
    {                                                                                              \
        offsetof(tsr_kcache_stats, field), #field, (value)                                         \
    }

/* Expects each of the n fields in want of c's stats, read once, to hold its
 * value; a failure names the field. EXPECT_STATS(c, STAT(field, value), ...)
 * lists them in place. */
static void expect_stats(tsr_kcache *c, const struct stat_want *want, size_t n)
{
    tsr_kcache_stats s;
    tsr_kcache_get_stats(c, &s);
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&s + want[i].offset, sizeof v);
        cr_expect_eq(v, want[i].want, "%s is %llu, not %llu", want[i].name, (unsigned long long)v,
                     (unsigned long long)want[i].want);
    }
}
#define EXPECT_STATS(c, ...)                                                                       \
    expect_stats((c), (const struct stat_want[]){__VA_ARGS__},                                     \
                 sizeof((const struct stat_want[]){__VA_ARGS__}) / sizeof(struct stat_want))

/* What a build makes and how it behaves. */
struct builder {
    atomic_int calls;
    size_t len;
    uint8_t fill;
    tsr_status fail; /* TSR_OK: succeed */
    tsr_kcache *cache;
    uint64_t wait_shared; /* hold the build until this many callers wait on it */
};

static void payload_fill(uint8_t *p, size_t len, uint8_t fill)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(fill + i * 3);
}

static bool payload_is(const tsr_kcache_blob *b, size_t len, uint8_t fill)
{
    if (b == NULL || b->len != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (b->data[i] != (uint8_t)(fill + i * 3))
            return false;
    return true;
}

static tsr_status build_fn(void *ctx, uint8_t **data, size_t *len, tsr_error *err)
{
    struct builder *b = ctx;
    atomic_fetch_add(&b->calls, 1);
    if (b->wait_shared > 0) {
        /* The deadline only keeps a broken cache from hanging the suite; the
         * assertions on levels then fail. */
        for (int i = 0; i < 10000; i++) {
            tsr_kcache_stats s;
            tsr_kcache_get_stats(b->cache, &s);
            if (s.shared_waits >= b->wait_shared)
                break;
            usleep(1000);
        }
    }
    if (b->fail != TSR_OK)
        return tsr_error_set(err, b->fail, "nvrtc: expected ';' at line %d", 7);
    *data = malloc(b->len);
    payload_fill(*data, b->len, b->fill);
    *len = b->len;
    return TSR_OK;
}

static const tsr_kcache_meta meta_tier1 = {"tier1", "matmul", "sm_90a"};

/* Gets key through the cache and checks the bytes; returns the level. */
static tsr_kcache_level get_checked(tsr_kcache *c, int n, struct builder *b)
{
    tsr_fingerprint k = key_of(n);
    const tsr_kcache_blob *blob = NULL;
    tsr_kcache_level level = -1;
    tsr_error err;
    tsr_status st = tsr_kcache_get_or_build(c, &k, &meta_tier1, build_fn, b, &blob, &level, &err);
    cr_assert_eq(st, TSR_OK, "get_or_build: %s", err.message);
    cr_assert(payload_is(blob, b->len, b->fill));
    tsr_kcache_blob_release(blob);
    return level;
}

/* ---- tests ---- */

/* A cache on dir (NULL: memory alone) with the bounds given, that built keys
 * 1..keys with b, each a miss. */
static tsr_kcache *cache_built(const char *dir, uint64_t memory_bytes, uint64_t disk_bytes,
                               struct builder *b, int keys)
{
    tsr_kcache *c = cache_open(dir, memory_bytes, disk_bytes);
    for (int n = 1; n <= keys; n++)
        cr_expect_eq(get_checked(c, n, b), TSR_KCACHE_MISS);
    return c;
}

Test(kcache, names_its_levels)
{
    cr_expect_str_eq(tsr_kcache_level_name(TSR_KCACHE_MISS), "miss");
    cr_expect_str_eq(tsr_kcache_level_name(TSR_KCACHE_MEMORY), "memory");
    cr_expect_str_eq(tsr_kcache_level_name(TSR_KCACHE_DISK), "disk");
    cr_expect_str_eq(tsr_kcache_level_name(TSR_KCACHE_SHARED), "shared");
}

Test(kcache, builds_on_a_miss_then_serves_from_memory)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    struct builder b = {.len = 100, .fill = 5};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MEMORY);
    cr_expect_eq(atomic_load(&b.calls), 1);

    tsr_fingerprint k = key_of(1);
    const tsr_kcache_blob *blob;
    tsr_kcache_level level;
    cr_assert_eq(tsr_kcache_lookup(c, &k, &blob, &level, NULL), TSR_OK);
    cr_expect_eq(level, TSR_KCACHE_MEMORY);
    cr_expect_str_eq(blob->meta.candidate, "tier1");
    cr_expect_str_eq(blob->meta.kind, "matmul");
    cr_expect_str_eq(blob->meta.arch, "sm_90a");
    tsr_kcache_blob_release(blob);

    EXPECT_STATS(c, STAT(misses, 1), STAT(builds, 1), STAT(memory_hits, 2), STAT(memory_entries, 1),
                 STAT(memory_bytes, 100), STAT(disk_entries, 0));
    tsr_kcache_close(c);
}

Test(kcache, lookup_of_an_absent_key_is_not_found)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    tsr_fingerprint k = key_of(9);
    const tsr_kcache_blob *blob = (const void *)1;
    tsr_error err;
    cr_expect_eq(tsr_kcache_lookup(c, &k, &blob, NULL, &err), TSR_NOT_FOUND);
    cr_expect_eq(err.code, TSR_NOT_FOUND);
    cr_expect_null(blob);
    tsr_kcache_close(c);
}

Test(kcache, open_fails_when_the_directory_is_a_file)
{
    const char *d = dir_make();
    char path[512];
    snprintf(path, sizeof path, "%s/plain", d);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    tsr_kcache_options o = {.dir = path};
    tsr_kcache *c = (void *)1;
    tsr_error err;
    cr_expect_eq(tsr_kcache_open(&o, &c, &err), TSR_IO_ERROR);
    cr_expect_eq(err.code, TSR_IO_ERROR);
    cr_expect_null(c);
}

Test(kcache, creates_missing_directories)
{
    const char *d = dir_make();
    char path[512];
    snprintf(path, sizeof path, "%s/a/b/c", d);
    tsr_kcache *c = cache_open(path, 0, 0);
    struct builder b = {.len = 10, .fill = 1};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect(entry_exists(path, 1));
    tsr_kcache_close(c);
}

/* Builds entry 1 through a cache on d (a miss that writes it to disk), then
 * closes the cache. */
static void disk_entry_made(const char *d, struct builder *b)
{
    tsr_kcache *c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 1, b), TSR_KCACHE_MISS);
    tsr_kcache_close(c);
}

/* disk_entry_made, and the path of key 1's entry file. */
static void entry_built(const char *d, struct builder *b, char *path, size_t cap)
{
    disk_entry_made(d, b);
    tsr_fingerprint k = key_of(1);
    entry_path(d, &k, path, cap);
}

Test(kcache, reopened_directory_serves_from_disk_without_building)
{
    const char *d = dir_make();
    tsr_kcache *c = cache_open(d, 0, 0);
    struct builder b = {.len = 300, .fill = 9};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    tsr_kcache_close(c);

    c = cache_open(d, 0, 0);
    EXPECT_STATS(c, STAT(disk_entries, 1), STAT(disk_bytes, FOOTPRINT(HEADER_BYTES + 300)));

    struct builder never = {.len = 300, .fill = 9, .fail = TSR_INTERNAL};
    tsr_fingerprint k = key_of(1);
    const tsr_kcache_blob *blob;
    tsr_kcache_level level;
    tsr_kcache_meta other = {"other", "fused", "sm_80"};
    cr_assert_eq(tsr_kcache_get_or_build(c, &k, &other, build_fn, &never, &blob, &level, NULL),
                 TSR_OK);
    cr_expect_eq(level, TSR_KCACHE_DISK);
    cr_expect_eq(atomic_load(&never.calls), 0);
    cr_expect(payload_is(blob, 300, 9));
    /* The meta comes from the file, written with the first build. */
    cr_expect_str_eq(blob->meta.candidate, "tier1");
    cr_expect_str_eq(blob->meta.arch, "sm_90a");
    tsr_kcache_blob_release(blob);
    cr_expect_eq(get_checked(c, 1, &never), TSR_KCACHE_MEMORY);

    EXPECT_STATS(c, STAT(disk_hits, 1), STAT(memory_hits, 1), STAT(builds, 0),
                 STAT(corrupt_discarded, 0));

    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list(c, &infos, &count, NULL), TSR_OK);
    cr_assert_eq(count, 1);
    cr_expect_eq(infos[0].hits, 2); /* the disk hit and the memory hit */
    cr_expect_eq(infos[0].in_memory, 1);
    cr_expect_eq(infos[0].on_disk, 1);
    free(infos);
    tsr_kcache_close(c);
}

/* Damages key 1's file between two runs and checks that the second run discards
 * it, rebuilds, and leaves a good file behind. */
/* What a test does to key 1's entry (path) in d: damage it, or forge it as
 * whoever can write the directory could. */
enum damage {
    FLIP_PAYLOAD,
    FLIP_META,
    TRUNCATE_PAYLOAD,
    TRUNCATE_HEADER,
    BAD_MAGIC,
    BAD_VERSION,
    FORGE_UNAUTHENTICATED_FORMAT,
    FORGE_RECOMPUTED_SHA256,
    FORGE_NEW_KEY,
};

static void forge_entry(const char *d, const char *path, enum damage how);

static void damage_file(const char *d, const char *path, enum damage how)
{
    if (how >= FORGE_UNAUTHENTICATED_FORMAT) {
        forge_entry(d, path, how);
        return;
    }
    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    long off = 0;
    switch (how) {
    case FLIP_PAYLOAD:
        off = HEADER_BYTES + 17;
        break;
    case FLIP_META:
        off = 50; /* inside the candidate name */
        break;
    case BAD_MAGIC:
        off = 0;
        break;
    case BAD_VERSION:
        off = 4;
        break;
    default:
        break;
    }
    if (how == TRUNCATE_PAYLOAD || how == TRUNCATE_HEADER) {
        fclose(f);
        cr_assert_eq(truncate(path, how == TRUNCATE_PAYLOAD ? HEADER_BYTES + 100 : 90), 0);
        return;
    }
    cr_assert_eq(fseek(f, off, SEEK_SET), 0);
    int ch = fgetc(f);
    cr_assert_eq(fseek(f, off, SEEK_SET), 0);
    fputc(ch ^ 0x20, f);
    fclose(f);
}

/* Builds key 1's entry in a directory of its own and damages it (how): a
 * cache opened there must discard it, counting auth of those among the
 * unauthenticated, and build the key again; the next one serves the rebuilt
 * file from disk. */
static void check_discarded_and_rebuilt(enum damage how, uint64_t auth)
{
    const char *d = dir_make();
    struct builder b = {.len = 256, .fill = 3};
    char path[512];
    entry_built(d, &b, path, sizeof path);
    damage_file(d, path, how);

    tsr_kcache *c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b.calls), 2);
    EXPECT_STATS(c, STAT(corrupt_discarded, 1), STAT(auth_failures, auth), STAT(disk_hits, 0),
                 STAT(disk_entries, 1), STAT(disk_bytes, FOOTPRINT(HEADER_BYTES + 256)));
    tsr_kcache_close(c);

    /* The rebuilt file is whole again, and authentic. */
    c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_DISK);
    cr_expect_eq(atomic_load(&b.calls), 2);
    tsr_kcache_close(c);
}

Test(kcache, discards_an_entry_with_a_flipped_payload_byte)
{
    check_discarded_and_rebuilt(FLIP_PAYLOAD, 1);
}

Test(kcache, discards_an_entry_with_a_flipped_meta_byte)
{
    check_discarded_and_rebuilt(FLIP_META, 1);
}

Test(kcache, discards_a_truncated_payload)
{
    check_discarded_and_rebuilt(TRUNCATE_PAYLOAD, 0);
}

Test(kcache, discards_a_truncated_header)
{
    check_discarded_and_rebuilt(TRUNCATE_HEADER, 0);
}

Test(kcache, discards_a_wrong_magic)
{
    check_discarded_and_rebuilt(BAD_MAGIC, 0);
}

Test(kcache, discards_an_unknown_format_version)
{
    check_discarded_and_rebuilt(BAD_VERSION, 0);
}

Test(kcache, discards_a_file_renamed_to_another_keys_name)
{
    const char *d = dir_make();
    struct builder b1 = {.len = 64, .fill = 1};
    tsr_kcache *c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 1, &b1), TSR_KCACHE_MISS);
    tsr_kcache_close(c);

    tsr_fingerprint k1 = key_of(1), k2 = key_of(2);
    char p1[512], p2[512], sub2[512];
    entry_path(d, &k1, p1, sizeof p1);
    entry_path(d, &k2, p2, sizeof p2);
    snprintf(sub2, sizeof sub2, "%.*s", (int)(strrchr(p2, '/') - p2), p2);
    mkdir(sub2, 0755);
    cr_assert_eq(rename(p1, p2), 0);

    c = cache_open(d, 0, 0);
    struct builder b2 = {.len = 80, .fill = 2};
    cr_expect_eq(get_checked(c, 2, &b2), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b2.calls), 1);
    EXPECT_STATS(c, STAT(corrupt_discarded, 1));
    const tsr_kcache_blob *blob;
    cr_expect_eq(tsr_kcache_lookup(c, &k1, &blob, NULL, NULL), TSR_NOT_FOUND);
    tsr_kcache_close(c);

    c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 2, &b2), TSR_KCACHE_DISK);
    tsr_kcache_close(c);
}

Test(kcache, memory_eviction_keeps_the_most_recently_used)
{
    /* Room for three 1000-byte entries with their bookkeeping. */
    tsr_kcache *c = cache_open(NULL, 3 * (1000 + TSRI_KCACHE_ENTRY_COST), 0);
    struct builder b = {.len = 1000, .fill = 4};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 2, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 3, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MEMORY);
    cr_expect_eq(get_checked(c, 4, &b), TSR_KCACHE_MISS); /* a fourth: evicts 2 */

    EXPECT_STATS(c, STAT(memory_evictions, 1), STAT(memory_entries, 3), STAT(memory_bytes, 3000));

    const int present[] = {1, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        tsr_fingerprint k = key_of(present[i]);
        const tsr_kcache_blob *blob;
        cr_expect_eq(tsr_kcache_lookup(c, &k, &blob, NULL, NULL), TSR_OK, "key %d", present[i]);
        tsr_kcache_blob_release(blob);
    }
    tsr_fingerprint k2 = key_of(2);
    const tsr_kcache_blob *blob;
    cr_expect_eq(tsr_kcache_lookup(c, &k2, &blob, NULL, NULL), TSR_NOT_FOUND);
    cr_expect_eq(get_checked(c, 2, &b), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b.calls), 5);
    tsr_kcache_close(c);
}

/* Small blobs are bounded by their bookkeeping, not only their payload: 1000
 * bytes of bound hold 100 ten-byte payloads by payload alone, but 3 entries
 * once each is charged TSRI_KCACHE_ENTRY_COST (256) on top. */
Test(kcache, memory_bound_counts_each_entrys_bookkeeping)
{
    struct builder b = {.len = 10, .fill = 9};
    tsr_kcache *c = cache_built(NULL, 1000, 0, &b, 50);
    /* memory_bytes stays payload bytes. */
    EXPECT_STATS(c, STAT(memory_entries, 3), STAT(memory_bytes, 30), STAT(memory_evictions, 47));
    tsr_kcache_close(c);
}

Test(kcache, disk_eviction_removes_the_least_recently_used_file)
{
    const char *d = dir_make();
    /* A one-byte memory bound keeps nothing in memory, so every hit reads the
     * disk and refreshes the file's last use. Files are 1192 bytes, counted as
     * one 4 KiB block each: three fit in 14000, a fourth trims back to 90% of
     * the bound (one file goes). */
    tsr_kcache *c = cache_open(d, 1, 14000);
    struct builder b = {.len = 1000, .fill = 6};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 2, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 3, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_DISK);
    cr_expect_eq(get_checked(c, 4, &b), TSR_KCACHE_MISS);

    EXPECT_STATS(c, STAT(disk_evictions, 1), STAT(disk_entries, 3),
                 STAT(disk_bytes, 3 * FOOTPRINT(HEADER_BYTES + 1000)), STAT(memory_entries, 0));

    for (int n = 1; n <= 4; n++)
        cr_expect_eq(entry_exists(d, n), n != 2, "key %d", n);
    tsr_kcache_close(c);
}

Test(kcache, open_trims_a_directory_over_a_smaller_bound)
{
    const char *d = dir_make();
    struct builder b = {.len = 1000, .fill = 6};
    tsr_kcache *c = cache_built(d, 0, 0, &b, 4);
    tsr_kcache_close(c);

    c = cache_open(d, 0, 5000); /* trims to 4500: keeps the newest one (a 4 KiB block) */
    EXPECT_STATS(c, STAT(disk_evictions, 3), STAT(disk_entries, 1),
                 STAT(disk_bytes, FOOTPRINT(HEADER_BYTES + 1000)));
    cr_expect_eq(get_checked(c, 4, &b), TSR_KCACHE_DISK);
    tsr_kcache_close(c);
}

struct racer {
    tsr_kcache *cache;
    struct builder *builder;
    tsr_status status;
    tsr_error err;
    tsr_kcache_level level;
    const tsr_kcache_blob *blob;
};

static void *race_one(void *arg)
{
    struct racer *r = arg;
    tsr_fingerprint k = key_of(1);
    r->status = tsr_kcache_get_or_build(r->cache, &k, &meta_tier1, build_fn, r->builder, &r->blob,
                                        &r->level, &r->err);
    return NULL;
}

static void race(tsr_kcache *c, struct builder *b, struct racer *r, int n)
{
    pthread_t t[16];
    for (int i = 0; i < n; i++) {
        r[i] = (struct racer){.cache = c, .builder = b, .level = -1};
        cr_assert_eq(pthread_create(&t[i], NULL, race_one, &r[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

Test(kcache, concurrent_requests_share_one_build)
{
    const char *d = dir_make();
    tsr_kcache *c = cache_open(d, 0, 0);
    struct builder b = {.len = 4096, .fill = 8, .cache = c, .wait_shared = 7};
    struct racer r[8];
    race(c, &b, r, 8);

    cr_expect_eq(atomic_load(&b.calls), 1);
    int misses = 0, shared = 0;
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(r[i].status, TSR_OK);
        cr_expect(payload_is(r[i].blob, 4096, 8));
        cr_expect_eq(r[i].blob, r[0].blob);
        misses += r[i].level == TSR_KCACHE_MISS;
        shared += r[i].level == TSR_KCACHE_SHARED;
        tsr_kcache_blob_release(r[i].blob);
    }
    cr_expect_eq(misses, 1);
    cr_expect_eq(shared, 7);

    EXPECT_STATS(c, STAT(builds, 1), STAT(shared_waits, 7), STAT(disk_entries, 1));

    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list(c, &infos, &count, NULL), TSR_OK);
    cr_assert_eq(count, 1);
    cr_expect_eq(infos[0].hits, 7);
    free(infos);
    tsr_kcache_close(c);
}

Test(kcache, a_failed_build_reaches_every_waiter_and_is_not_cached)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    struct builder b = {
        .len = 16, .fill = 2, .cache = c, .wait_shared = 3, .fail = TSR_COMPILE_FAILED};
    struct racer r[4];
    race(c, &b, r, 4);

    cr_expect_eq(atomic_load(&b.calls), 1);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(r[i].status, TSR_COMPILE_FAILED);
        cr_expect_eq(r[i].err.code, TSR_COMPILE_FAILED);
        cr_expect_str_eq(r[i].err.message, "nvrtc: expected ';' at line 7");
        cr_expect_null(r[i].blob);
    }
    EXPECT_STATS(c, STAT(builds, 1), STAT(build_failures, 1), STAT(memory_entries, 0));

    /* The next request builds again. */
    b.fail = TSR_OK;
    b.wait_shared = 0;
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b.calls), 2);
    tsr_kcache_close(c);
}

/* A build that returns a code without filling err. */
static tsr_status build_quietly_failing(void *ctx, uint8_t **data, size_t *len, tsr_error *err)
{
    (void)ctx;
    (void)data;
    (void)len;
    (void)err;
    return TSR_UNSUPPORTED;
}

Test(kcache, a_failing_build_without_a_message_still_explains)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    tsr_fingerprint k = key_of(1);
    const tsr_kcache_blob *blob;
    tsr_error err;
    cr_expect_eq(
        tsr_kcache_get_or_build(c, &k, NULL, build_quietly_failing, NULL, &blob, NULL, &err),
        TSR_UNSUPPORTED);
    cr_expect_eq(err.code, TSR_UNSUPPORTED);
    cr_expect_str_eq(err.message, "kernel build for "
                                  "26313c47525d68737e89949faab5c0cbd6e1ecf7020d18232e39444f5a65707b"
                                  " failed: not supported here");
    tsr_kcache_close(c);
}

Test(kcache, open_removes_stale_temporary_files)
{
    const char *d = dir_make();
    char sub[512], old_tmp[600], new_tmp[600];
    snprintf(sub, sizeof sub, "%s/ab", d);
    cr_assert_eq(mkdir(sub, 0755), 0);
    snprintf(old_tmp, sizeof old_tmp, "%s/.tmp-123-00000000deadbeef", sub);
    snprintf(new_tmp, sizeof new_tmp, "%s/.tmp-124-00000000feedface", sub);
    fclose(fopen(old_tmp, "w"));
    fclose(fopen(new_tmp, "w"));
    struct timespec two_minutes_ago[2];
    clock_gettime(CLOCK_REALTIME, &two_minutes_ago[0]);
    two_minutes_ago[0].tv_sec -= 120;
    two_minutes_ago[1] = two_minutes_ago[0];
    cr_assert_eq(utimensat(AT_FDCWD, old_tmp, two_minutes_ago, 0), 0);

    tsr_kcache *c = cache_open(d, 0, 0);
    cr_expect_not(file_exists(old_tmp));
    cr_expect(file_exists(new_tmp)); /* may belong to a live writer */
    EXPECT_STATS(c, STAT(disk_entries, 0), STAT(disk_bytes, 0));
    tsr_kcache_close(c);
}

Test(kcache, evicts_one_key_or_all)
{
    const char *d = dir_make();
    struct builder b = {.len = 50, .fill = 1};
    tsr_kcache *c = cache_built(d, 0, 0, &b, 3);

    tsr_fingerprint k1 = key_of(1);
    char p1[512];
    entry_path(d, &k1, p1, sizeof p1);
    uint32_t evicted = 99;
    cr_expect_eq(tsr_kcache_evict(c, &k1, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 1);
    cr_expect_not(file_exists(p1));
    const tsr_kcache_blob *blob;
    cr_expect_eq(tsr_kcache_lookup(c, &k1, &blob, NULL, NULL), TSR_NOT_FOUND);
    tsr_error err;
    cr_expect_eq(tsr_kcache_evict(c, &k1, &evicted, &err), TSR_NOT_FOUND);
    cr_expect_eq(err.code, TSR_NOT_FOUND);
    cr_expect_eq(evicted, 0);

    EXPECT_STATS(c, STAT(memory_entries, 2), STAT(disk_entries, 2),
                 STAT(disk_bytes, 2 * FOOTPRINT(HEADER_BYTES + 50)));

    /* A key only on disk (written by another cache) counts once too. */
    tsr_kcache *other = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(other, 4, &b), TSR_KCACHE_MISS);
    tsr_kcache_close(other);

    cr_expect_eq(tsr_kcache_evict(c, NULL, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 3);
    EXPECT_STATS(c, STAT(memory_entries, 0), STAT(memory_bytes, 0), STAT(disk_entries, 0),
                 STAT(disk_bytes, 0));
    for (int n = 1; n <= 4; n++)
        cr_expect_not(entry_exists(d, n), "key %d", n);
    cr_expect_eq(get_checked(c, 2, &b), TSR_KCACHE_MISS);
    tsr_kcache_close(c);
}

Test(kcache, evict_all_of_a_memory_cache_counts_its_entries)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    struct builder b = {.len = 8, .fill = 1};
    for (int n = 1; n <= 3; n++)
        get_checked(c, n, &b);
    uint32_t evicted = 0;
    cr_expect_eq(tsr_kcache_evict(c, NULL, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 3);
    cr_expect_eq(tsr_kcache_evict(c, NULL, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 0);
    tsr_kcache_close(c);
}

static const tsr_kcache_entry_info *info_of(const tsr_kcache_entry_info *infos, size_t count, int n)
{
    tsr_fingerprint k = key_of(n);
    for (size_t i = 0; i < count; i++)
        if (memcmp(infos[i].key.bytes, k.bytes, sizeof k.bytes) == 0)
            return &infos[i];
    return NULL;
}

/* Expects key 1's listed entry, built for tier1, to say what its levels and
 * use say: in_memory, on_disk, bytes and hits. */
static void expect_key1_listed(const tsr_kcache_entry_info *e, int in_memory, int on_disk,
                               uint64_t bytes, uint64_t hits)
{
    cr_expect_eq(e->in_memory, in_memory);
    cr_expect_eq(e->on_disk, on_disk);
    cr_expect_eq(e->bytes, bytes);
    cr_expect_eq(e->hits, hits);
    cr_expect_str_eq(e->meta.candidate, "tier1");
}

Test(kcache, lists_entries_of_both_levels)
{
    const char *d = dir_make();
    tsr_kcache *c = cache_open(d, 0, 0);
    struct builder b100 = {.len = 100, .fill = 1}, b200 = {.len = 200, .fill = 2};
    get_checked(c, 1, &b100);
    get_checked(c, 2, &b200);
    get_checked(c, 1, &b100);
    get_checked(c, 1, &b100);

    int64_t before_ms = (int64_t)time(NULL) * 1000 - 5000;
    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list(c, &infos, &count, NULL), TSR_OK);
    cr_assert_eq(count, 2);
    const tsr_kcache_entry_info *e1 = info_of(infos, count, 1), *e2 = info_of(infos, count, 2);
    cr_assert(e1 && e2);
    expect_key1_listed(e1, 1, 1, 100, 2);
    cr_expect_str_eq(e1->meta.kind, "matmul");
    cr_expect_str_eq(e1->meta.arch, "sm_90a");
    cr_expect_eq(e2->bytes, 200);
    cr_expect_eq(e2->hits, 0);
    cr_expect_gt(e2->last_used_unix_ms, before_ms);
    free(infos);

    /* A second cache on the directory sees the files only. */
    tsr_kcache *other = cache_open(d, 0, 0);
    cr_assert_eq(tsr_kcache_list(other, &infos, &count, NULL), TSR_OK);
    cr_assert_eq(count, 2);
    e1 = info_of(infos, count, 1);
    e2 = info_of(infos, count, 2);
    cr_assert(e1 && e2);
    expect_key1_listed(e1, 0, 1, 100, 0);
    cr_expect_eq(e2->bytes, 200);
    cr_expect_gt(e2->last_used_unix_ms, before_ms);
    free(infos);
    tsr_kcache_close(other);

    tsr_kcache *empty = cache_open(NULL, 0, 0);
    cr_assert_eq(tsr_kcache_list(empty, &infos, &count, NULL), TSR_OK);
    cr_expect_eq(count, 0);
    free(infos);
    tsr_kcache_close(empty);
    tsr_kcache_close(c);
}

Test(kcache, a_held_blob_outlives_eviction_and_close)
{
    tsr_kcache *c = cache_open(NULL, 1500, 0);
    struct builder ba = {.len = 1000, .fill = 1}, bb = {.len = 1000, .fill = 2};
    tsr_fingerprint ka = key_of(1), kb = key_of(2);
    const tsr_kcache_blob *a, *b;
    cr_assert_eq(tsr_kcache_get_or_build(c, &ka, NULL, build_fn, &ba, &a, NULL, NULL), TSR_OK);
    cr_assert_eq(tsr_kcache_get_or_build(c, &kb, NULL, build_fn, &bb, &b, NULL, NULL), TSR_OK);
    /* a went */
    EXPECT_STATS(c, STAT(memory_evictions, 1));
    cr_expect(payload_is(a, 1000, 1));

    tsr_kcache_blob_retain(b);
    uint32_t evicted;
    cr_expect_eq(tsr_kcache_evict(c, NULL, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 1);
    cr_expect(payload_is(b, 1000, 2));
    tsr_kcache_blob_release(b);

    const tsr_kcache_blob *c2;
    cr_assert_eq(tsr_kcache_get_or_build(c, &ka, NULL, build_fn, &ba, &c2, NULL, NULL), TSR_OK);
    tsr_kcache_close(c);
    cr_expect(payload_is(a, 1000, 1));
    cr_expect(payload_is(b, 1000, 2));
    cr_expect(payload_is(c2, 1000, 1));
    tsr_kcache_blob_release(a);
    tsr_kcache_blob_release(b);
    tsr_kcache_blob_release(c2);
}

Test(kcache, two_caches_on_one_directory_see_each_others_entries)
{
    const char *d = dir_make();
    tsr_kcache *c1 = cache_open(d, 0, 0), *c2 = cache_open(d, 0, 0);
    struct builder b1 = {.len = 500, .fill = 1}, b2 = {.len = 700, .fill = 2};
    cr_expect_eq(get_checked(c1, 1, &b1), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c2, 1, &b1), TSR_KCACHE_DISK);
    cr_expect_eq(get_checked(c2, 2, &b2), TSR_KCACHE_MISS);
    tsr_fingerprint k2 = key_of(2);
    const tsr_kcache_blob *blob;
    tsr_kcache_level level;
    cr_expect_eq(tsr_kcache_lookup(c1, &k2, &blob, &level, NULL), TSR_OK);
    cr_expect_eq(level, TSR_KCACHE_DISK);
    cr_expect(payload_is(blob, 700, 2));
    tsr_kcache_blob_release(blob);
    cr_expect_eq(atomic_load(&b1.calls), 1);
    cr_expect_eq(atomic_load(&b2.calls), 1);

    /* An eviction by one is a miss for the other, never a bad read. */
    uint32_t evicted;
    cr_expect_eq(tsr_kcache_evict(c1, &k2, &evicted, NULL), TSR_OK);
    tsr_kcache_close(c2);
    c2 = cache_open(d, 0, 0);
    cr_expect_eq(tsr_kcache_lookup(c2, &k2, &blob, NULL, NULL), TSR_NOT_FOUND);
    EXPECT_STATS(c2, STAT(corrupt_discarded, 0));
    tsr_kcache_close(c1);
    tsr_kcache_close(c2);
}

Test(kcache, a_failed_disk_write_keeps_serving_from_memory)
{
    const char *d = dir_make();
    char moved[128];
    dir_moved_name(moved, sizeof moved);
    tsr_kcache *c = cache_open(d, 0, 0);
    /* Running as root defeats permission bits, so the directory is replaced by a
     * plain file: creating the entry's subdirectory then fails with ENOTDIR. */
    cr_assert_eq(rename(d, moved), 0);
    FILE *f = fopen(d, "w");
    cr_assert_not_null(f);
    fclose(f);

    struct builder b = {.len = 128, .fill = 7};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MEMORY);
    cr_expect_eq(atomic_load(&b.calls), 1);
    EXPECT_STATS(c, STAT(disk_write_failures, 1), STAT(disk_entries, 0), STAT(memory_entries, 1));
    tsr_kcache_close(c);
}

/* Reads a whole file into a malloc'd buffer; *len its size. */
static uint8_t *file_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    uint8_t *p = malloc((size_t)n);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* The key the cache in dir authenticates its entries with. */
static void key_read(const char *dir, uint8_t key[TSRI_KCACHE_KEY_BYTES])
{
    char path[512];
    snprintf(path, sizeof path, "%s/kcache.key", dir);
    size_t len;
    uint8_t *k = file_slurp(path, &len);
    cr_assert_eq(len, TSRI_KCACHE_KEY_BYTES);
    memcpy(key, k, len);
    free(k);
}

static void file_write(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

Test(kcache, entry_parse_accepts_a_written_entry_and_rejects_any_changed_byte)
{
    const char *d = dir_make();
    struct builder b = {.len = 40, .fill = 9};
    disk_entry_made(d, &b);

    tsr_fingerprint k = key_of(1), other = key_of(2);
    char path[512];
    entry_path(d, &k, path, sizeof path);
    size_t len;
    uint8_t *img = file_slurp(path, &len);
    cr_assert_eq(len, TSRI_KCACHE_HEADER_BYTES + 40);
    uint8_t *payload = img + TSRI_KCACHE_HEADER_BYTES;
    uint8_t key[TSRI_KCACHE_KEY_BYTES], wrong[TSRI_KCACHE_KEY_BYTES];
    key_read(d, key);
    memcpy(wrong, key, sizeof wrong);
    wrong[5] ^= 0x10;

    tsr_kcache_meta meta;
    memset(&meta, 0, sizeof meta);
    double build_ms = -1;
    cr_assert_eq(tsri_kcache_entry_parse(key, img, payload, 40, &k, &meta, &build_ms), TSR_OK);
    cr_expect_str_eq(meta.candidate, "tier1");
    cr_expect_str_eq(meta.kind, "matmul");
    cr_expect_str_eq(meta.arch, "sm_90a");
    cr_expect_geq(build_ms, 0);

    cr_expect_eq(tsri_kcache_entry_parse(key, img, payload, 40, &other, &meta, NULL), TSR_CORRUPT);
    cr_expect_eq(tsri_kcache_entry_parse(key, img, payload, 39, &k, &meta, NULL), TSR_CORRUPT);
    /* Under any other key the entry is not authentic. */
    cr_expect_eq(tsri_kcache_entry_parse(wrong, img, payload, 40, &k, &meta, NULL),
                 TSR_UNAUTHENTICATED);
    for (size_t i = 0; i < len; i++) {
        img[i] ^= 0x01;
        tsr_status st = tsri_kcache_entry_parse(key, img, payload, 40, &k, &meta, NULL);
        cr_expect(st == TSR_CORRUPT || st == TSR_UNAUTHENTICATED, "byte %zu changed: %s", i,
                  tsr_status_name(st));
        /* A byte under the MAC that leaves the fields well-formed (the payload,
         * a name, the build time, the MAC itself) fails authentication. */
        if (i >= TSRI_KCACHE_HEADER_BYTES || (i >= 144 + 8 && i < TSRI_KCACHE_HEADER_BYTES))
            cr_expect_eq(st, TSR_UNAUTHENTICATED, "byte %zu changed", i);
        img[i] ^= 0x01;
    }
    free(img);
}

/* The format before authentication: the same fields up to the payload length,
 * then SHA-256 over bytes 0..151 and the payload, at 152; a 184-byte header. */
static uint8_t *entry_v1(const tsr_fingerprint *k, const uint8_t *payload, size_t len,
                         size_t *out_len)
{
    uint8_t *e = calloc(1, 184 + len);
    memcpy(e, "TSRK", 4);
    e[4] = 1;
    e[8] = 184;
    memcpy(e + 16, k->bytes, 32);
    snprintf((char *)e + 48, 64, "tier1");
    snprintf((char *)e + 112, 16, "matmul");
    snprintf((char *)e + 128, 16, "sm_90a");
    for (int i = 0; i < 8; i++)
        e[144 + i] = (uint8_t)((uint64_t)len >> (8 * i));
    memcpy(e + 184, payload, len);
    uint8_t *buf = malloc(152 + len);
    memcpy(buf, e, 152);
    memcpy(buf + 152, payload, len);
    tsr_sha256(buf, 152 + len, e + 152);
    free(buf);
    *out_len = 184 + len;
    return e;
}

static void forge_entry(const char *d, const char *path, enum damage how)
{
    if (how == FORGE_NEW_KEY) {
        /* A new key (the old file deleted) makes every entry written before
         * untrustworthy. */
        char key[512];
        snprintf(key, sizeof key, "%s/kcache.key", d);
        cr_assert_eq(unlink(key), 0);
        return;
    }
    size_t len;
    uint8_t *img;
    if (how == FORGE_UNAUTHENTICATED_FORMAT) {
        uint8_t evil[64];
        memset(evil, 0xee, sizeof evil);
        tsr_fingerprint k = key_of(1);
        img = entry_v1(&k, evil, sizeof evil, &len);
    } else {
        /* The payload changed, and a digest anyone can compute where the MAC
         * goes. */
        img = file_slurp(path, &len);
        memset(img + HEADER_BYTES, 0xee, len - HEADER_BYTES);
        uint8_t *buf = malloc(len);
        memcpy(buf, img, TSRI_KCACHE_OFF_MAC);
        memcpy(buf + TSRI_KCACHE_OFF_MAC, img + HEADER_BYTES, len - HEADER_BYTES);
        tsr_sha256(buf, TSRI_KCACHE_OFF_MAC + len - HEADER_BYTES, img + TSRI_KCACHE_OFF_MAC);
        free(buf);
    }
    file_write(path, img, len);
    free(img);
}

Test(kcache, an_entry_of_the_unauthenticated_format_is_discarded)
{
    check_discarded_and_rebuilt(FORGE_UNAUTHENTICATED_FORMAT, 1);
}

Test(kcache, a_forged_entry_with_a_recomputed_sha256_is_discarded)
{
    check_discarded_and_rebuilt(FORGE_RECOMPUTED_SHA256, 1);
}

Test(kcache, an_entry_written_under_another_key_is_discarded)
{
    check_discarded_and_rebuilt(FORGE_NEW_KEY, 1);
}

Test(kcache, the_key_file_is_made_once_private_and_kept)
{
    const char *d = dir_make();
    tsr_kcache *c = cache_open(d, 0, 0);
    tsr_kcache_close(c);
    char path[512];
    snprintf(path, sizeof path, "%s/kcache.key", d);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode));
    cr_expect_eq(st.st_mode & 0777, 0600);
    cr_expect_eq(st.st_size, TSRI_KCACHE_KEY_BYTES);
    uint8_t first[TSRI_KCACHE_KEY_BYTES], again[TSRI_KCACHE_KEY_BYTES];
    key_read(d, first);
    c = cache_open(d, 0, 0);
    tsr_kcache_close(c);
    key_read(d, again);
    cr_expect_eq(memcmp(first, again, sizeof first), 0);
    /* No temporary file is left beside it. */
    DIR *dir = opendir(d);
    cr_assert_not_null(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        cr_expect_null(strstr(e->d_name, ".tmp-"), "left %s", e->d_name);
    closedir(dir);
}

/* A cache in d/cache whose key file is d/key_name. */
struct key_elsewhere {
    char cache[512], key_path[512];
    tsr_kcache_options o;
};

static tsr_kcache *key_elsewhere_open(const struct key_elsewhere *k)
{
    tsr_kcache *c = NULL;
    tsr_error err;
    cr_assert_eq(tsr_kcache_open(&k->o, &c, &err), TSR_OK, "%s", err.message);
    return c;
}

static tsr_kcache *key_elsewhere_make(struct key_elsewhere *k, const char *d, const char *key_name)
{
    snprintf(k->cache, sizeof k->cache, "%s/cache", d);
    snprintf(k->key_path, sizeof k->key_path, "%s/%s", d, key_name);
    k->o = (tsr_kcache_options){.dir = k->cache, .key_file = k->key_path};
    return key_elsewhere_open(k);
}

Test(kcache, the_key_file_can_live_elsewhere)
{
    const char *d = dir_make();
    struct key_elsewhere k;
    tsr_kcache *c = key_elsewhere_make(&k, d, "secret.key");
    struct builder b = {.len = 32, .fill = 2};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    tsr_kcache_close(c);
    struct stat st;
    cr_expect_eq(stat(k.key_path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);
    char in_dir[600];
    snprintf(in_dir, sizeof in_dir, "%s/kcache.key", k.cache);
    cr_expect_not(file_exists(in_dir));
    c = key_elsewhere_open(&k);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_DISK);
    tsr_kcache_close(c);
}

Test(kcache, a_key_file_that_cannot_be_made_leaves_a_key_of_this_process)
{
    const char *d = dir_make();
    struct key_elsewhere k;
    tsr_kcache *c = key_elsewhere_make(&k, d, "no-such-dir/cache.key");
    cr_expect(tsr_kcache_key_ephemeral(c));
    struct builder b = {.len = 32, .fill = 2};
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect(entry_exists(k.cache, 1));
    tsr_kcache_close(c);
    /* The next process has another key: the entry is not trusted, but rebuilt. */
    c = key_elsewhere_open(&k);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    EXPECT_STATS(c, STAT(auth_failures, 1));
    tsr_kcache_close(c);
    c = cache_open(k.cache, 0, 0);
    cr_expect_not(tsr_kcache_key_ephemeral(c));
    tsr_kcache_close(c);
}

/* Opening d fails naming the key file and why. */
static void check_key_refused(const char *d, const char *why)
{
    tsr_kcache_options o = {.dir = d};
    tsr_kcache *c = (void *)1;
    tsr_error err;
    cr_expect_eq(tsr_kcache_open(&o, &c, &err), TSR_IO_ERROR);
    cr_expect_null(c);
    cr_expect_not_null(strstr(err.message, "kcache.key"), "%s", err.message);
    cr_expect_not_null(strstr(err.message, why), "%s", err.message);
}

Test(kcache, a_key_file_others_may_read_is_refused)
{
    const char *d = dir_make();
    tsr_kcache_close(cache_open(d, 0, 0));
    char path[512];
    snprintf(path, sizeof path, "%s/kcache.key", d);
    cr_assert_eq(chmod(path, 0644), 0);
    check_key_refused(d, "others may read or write it");
}

Test(kcache, a_key_file_that_is_a_link_or_the_wrong_size_is_refused)
{
    const char *d = dir_make();
    tsr_kcache_close(cache_open(d, 0, 0));
    char path[512], moved[512];
    snprintf(path, sizeof path, "%s/kcache.key", d);
    snprintf(moved, sizeof moved, "%s/elsewhere.key", d);
    cr_assert_eq(rename(path, moved), 0);
    cr_assert_eq(symlink(moved, path), 0);
    check_key_refused(d, strerror(ELOOP));
    cr_assert_eq(unlink(path), 0);
    uint8_t short_key[16] = {0};
    file_write(path, short_key, sizeof short_key);
    cr_assert_eq(chmod(path, 0600), 0);
    check_key_refused(d, "wrong size");
}

/* Key 1's file replaced by something that is not a regular file: the cache
 * must neither block on it nor serve what it leads to, and the next write puts
 * a good entry in its place. */
Test(kcache, a_fifo_in_place_of_an_entry_is_skipped_without_blocking)
{
    const char *d = dir_make();
    struct builder b = {.len = 64, .fill = 4};
    char path[512];
    entry_built(d, &b, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(mkfifo(path, 0644), 0);

    tsr_kcache *c = cache_open(d, 0, 0);
    /* No writer ever opens the FIFO: an open() that waits would hang here. */
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list(c, &infos, &count, NULL), TSR_OK);
    cr_expect_eq(count, 1);
    free(infos);
    tsr_kcache_close(c);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the rebuilt entry replaced the FIFO");
}

Test(kcache, a_link_in_place_of_an_entry_is_not_followed)
{
    const char *d = dir_make();
    struct builder b = {.len = 64, .fill = 4};
    /* A genuine entry, moved away and linked back: following the link would
     * serve whatever file an attacker points it at. */
    char path[512], target[512];
    entry_built(d, &b, path, sizeof path);
    snprintf(target, sizeof target, "%s/elsewhere", d);
    cr_assert_eq(rename(path, target), 0);
    cr_assert_eq(symlink(target, path), 0);
    struct stat before;
    cr_assert_eq(stat(target, &before), 0);

    tsr_kcache *c = cache_open(d, 0, 0);
    cr_expect_eq(get_checked(c, 1, &b), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b.calls), 2);
    tsr_kcache_close(c);
    struct stat after, st;
    cr_assert_eq(stat(target, &after), 0);
    cr_expect_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec, "the target was not touched");
    cr_expect_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode), "the rebuilt entry replaced the link");
}

Test(kcache, the_build_time_is_kept_with_the_entry)
{
    const char *d = dir_make();
    struct builder b = {.len = 16, .fill = 1, .wait_shared = 0};
    tsr_kcache *c = cache_open(d, 0, 0);
    tsr_fingerprint k = key_of(1);
    const tsr_kcache_blob *blob;
    tsr_kcache_level level;
    cr_assert_eq(tsr_kcache_get_or_build(c, &k, &meta_tier1, build_fn, &b, &blob, &level, NULL),
                 TSR_OK);
    double built = blob->build_ms;
    cr_expect_gt(built, 0);
    tsr_kcache_blob_release(blob);
    tsr_kcache_close(c);
    c = cache_open(d, 0, 0);
    cr_assert_eq(tsr_kcache_lookup(c, &k, &blob, &level, NULL), TSR_OK);
    cr_expect_eq(level, TSR_KCACHE_DISK);
    /* Kept in whole microseconds. */
    cr_expect_lt(built - blob->build_ms, 0.001);
    cr_expect_geq(built - blob->build_ms, 0);
    tsr_kcache_blob_release(blob);
    tsr_kcache_close(c);
}

/* ---- owners ---- */

#define OWNER_A UINT64_C(0xa1)
#define OWNER_B UINT64_C(0xb2)

static bool claim(tsr_kcache *c, int n, uint64_t owner)
{
    tsr_fingerprint k = key_of(n);
    bool held = true;
    tsr_error err;
    cr_assert_eq(tsr_kcache_claim(c, &k, owner, &held, &err), TSR_OK, "%s", err.message);
    return held;
}

/* The keys owner's listing shows, as a bit set of key numbers 1..31. */
static unsigned listed(tsr_kcache *c, uint64_t owner)
{
    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list_owned(c, owner, &infos, &count, NULL), TSR_OK);
    unsigned set = 0;
    for (int n = 1; n < 32; n++)
        if (info_of(infos, count, n) != NULL)
            set |= 1u << n;
    free(infos);
    return set;
}

/* A cache on d that built keys 1..keys with b; A holds 1 and 3, B 2 and 3. */
static tsr_kcache *owned_cache(const char *d, int keys, struct builder *b)
{
    tsr_kcache *c = cache_open(d, 0, 0);
    for (int n = 1; n <= keys; n++)
        get_checked(c, n, b);
    claim(c, 1, OWNER_A);
    claim(c, 2, OWNER_B);
    claim(c, 3, OWNER_A);
    claim(c, 3, OWNER_B);
    return c;
}

Test(kcache, a_claim_says_whether_the_owner_held_the_key)
{
    tsr_kcache *c = cache_open(NULL, 0, 0);
    struct builder b = {.len = 8, .fill = 1};
    get_checked(c, 1, &b);
    cr_expect_not(claim(c, 1, OWNER_A));
    cr_expect(claim(c, 1, OWNER_A));
    cr_expect_not(claim(c, 1, OWNER_B), "A's hold says nothing to B");
    cr_expect(claim(c, 1, OWNER_B));
    tsr_fingerprint k = key_of(1);
    tsr_error err;
    cr_expect_eq(tsr_kcache_claim(c, &k, TSR_KCACHE_ALL_OWNERS, NULL, &err), TSR_INVALID_ARGUMENT);
    tsr_kcache_close(c);
}

Test(kcache, an_owner_lists_only_what_it_holds_with_its_own_use)
{
    const char *d = dir_make();
    struct builder b = {.len = 8, .fill = 1};
    tsr_kcache *c = owned_cache(d, 3, &b);
    claim(c, 3, OWNER_B);
    get_checked(c, 3, &b); /* hits of the entry's, not B's */
    get_checked(c, 3, &b);
    cr_expect_eq(listed(c, OWNER_A), 1u << 1 | 1u << 3);
    cr_expect_eq(listed(c, OWNER_B), 1u << 2 | 1u << 3);
    cr_expect_eq(listed(c, UINT64_C(0xc3)), 0u);
    cr_expect_eq(listed(c, TSR_KCACHE_ALL_OWNERS), 1u << 1 | 1u << 2 | 1u << 3);

    tsr_kcache_entry_info *infos;
    size_t count;
    cr_assert_eq(tsr_kcache_list_owned(c, OWNER_B, &infos, &count, NULL), TSR_OK);
    const tsr_kcache_entry_info *e3 = info_of(infos, count, 3);
    cr_assert_not_null(e3);
    cr_expect_eq(e3->hits, 1, "B's second claim, not every serve of the entry");
    cr_expect_str_eq(e3->meta.candidate, "tier1");
    cr_expect_eq(e3->in_memory, 1);
    free(infos);
    tsr_kcache_close(c);
}

Test(kcache, an_owner_evicts_only_its_own_and_a_shared_entry_stays)
{
    const char *d = dir_make();
    struct builder b = {.len = 8, .fill = 1};
    tsr_kcache *c = owned_cache(d, 4, &b);
    /* Key 4 is held by no one: only an eviction of every owner's removes it. */

    tsr_fingerprint k2 = key_of(2), k3 = key_of(3);
    uint32_t evicted = 99;
    tsr_error err;
    cr_expect_eq(tsr_kcache_evict_owned(c, &k2, OWNER_A, &evicted, &err), TSR_NOT_FOUND);
    char hex[TSR_FINGERPRINT_HEX], want[200];
    tsr_fingerprint_hex(&k2, hex);
    snprintf(want, sizeof want, "kernel cache: no entry %s", hex);
    cr_expect_str_eq(err.message, want, "the same answer as for an absent key");
    cr_expect(entry_exists(d, 2));

    /* A drops its hold on the shared key 3: B still has it. */
    cr_expect_eq(tsr_kcache_evict_owned(c, &k3, OWNER_A, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 1);
    cr_expect(entry_exists(d, 3));
    cr_expect_eq(listed(c, OWNER_A), 1u << 1);
    cr_expect_eq(listed(c, OWNER_B), 1u << 2 | 1u << 3);
    cr_expect_not(claim(c, 3, OWNER_A), "A holds it no longer");

    /* "all" is all of B's: 2 goes (B alone held it), 3 stays for A. */
    cr_expect_eq(tsr_kcache_evict_owned(c, NULL, OWNER_B, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 2);
    cr_expect_not(entry_exists(d, 2));
    cr_expect(entry_exists(d, 3));
    cr_expect(entry_exists(d, 1));
    cr_expect(entry_exists(d, 4));
    cr_expect_eq(listed(c, OWNER_B), 0u);
    cr_expect_eq(listed(c, OWNER_A), 1u << 1 | 1u << 3);
    const tsr_kcache_blob *blob;
    cr_expect_eq(tsr_kcache_lookup(c, &k2, &blob, NULL, NULL), TSR_NOT_FOUND);

    /* A's "all" removes what it alone holds. */
    cr_expect_eq(tsr_kcache_evict_owned(c, NULL, OWNER_A, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 2);
    cr_expect_not(entry_exists(d, 1));
    cr_expect_not(entry_exists(d, 3));
    cr_expect_eq(listed(c, TSR_KCACHE_ALL_OWNERS), 1u << 4);

    /* Every owner's eviction takes the holders with the entries. */
    claim(c, 4, OWNER_B);
    cr_expect_eq(tsr_kcache_evict_owned(c, NULL, TSR_KCACHE_ALL_OWNERS, &evicted, NULL), TSR_OK);
    cr_expect_eq(evicted, 1);
    get_checked(c, 4, &b);
    cr_expect_not(claim(c, 4, OWNER_B));
    tsr_kcache_close(c);
}

Test(kcache, holders_outlive_a_memory_eviction_but_not_the_entry)
{
    const char *d = dir_make();
    /* Nothing stays in memory; the files hold the entries. */
    tsr_kcache *c = cache_open(d, 1, 0);
    struct builder b = {.len = 8, .fill = 1};
    get_checked(c, 1, &b);
    claim(c, 1, OWNER_A);
    cr_expect_eq(listed(c, OWNER_A), 1u << 1);
    cr_expect(claim(c, 1, OWNER_A));
    /* Gone from disk behind the cache's back: forgotten at the next listing. */
    tsr_fingerprint k = key_of(1);
    char path[512];
    entry_path(d, &k, path, sizeof path);
    cr_assert_eq(unlink(path), 0);
    cr_expect_eq(listed(c, OWNER_A), 0u);
    cr_expect_not(claim(c, 1, OWNER_A));
    tsr_kcache_close(c);

    /* Without a directory, an entry the bound evicts is gone with its holders
     * (one entry, 80 bytes and its bookkeeping, fits in 400; two do not). */
    c = cache_open(NULL, 400, 0);
    struct builder big = {.len = 80, .fill = 2};
    get_checked(c, 1, &big);
    claim(c, 1, OWNER_A);
    get_checked(c, 2, &big); /* evicts key 1 */
    cr_expect_not(claim(c, 1, OWNER_A));
    tsr_kcache_close(c);
}

/* ---- the remote level ---- */

/* A remote level that serves one sealed entry (or none) and counts its calls. */
struct remote {
    atomic_int calls;
    uint8_t mac_key[TSR_KCACHE_MAC_KEY_BYTES];
    uint8_t *entry; /* sealed; NULL: a miss */
    size_t len;
};

static tsr_status remote_fetch(void *ctx, const tsr_fingerprint *key, const tsr_kcache_meta *want,
                               uint8_t **data, size_t *len, tsr_kcache_meta *meta, double *build_ms)
{
    struct remote *r = ctx;
    atomic_fetch_add(&r->calls, 1);
    const uint8_t *payload;
    size_t plen;
    if (r->entry == NULL ||
        tsr_kcache_entry_open(r->mac_key, key, r->entry, r->len, &payload, &plen, meta, build_ms,
                              NULL) != TSR_OK ||
        strcmp(meta->candidate, want->candidate) != 0)
        return TSR_NOT_FOUND;
    *data = malloc(plen);
    memcpy(*data, payload, plen);
    *len = plen;
    return TSR_OK;
}

/* The cache holds one entry, of that origin. */
static void expect_one_entry_from(tsr_kcache *c, tsr_kcache_level origin)
{
    tsr_kcache_entry_info *rows;
    size_t n;
    cr_assert_eq(tsr_kcache_list(c, &rows, &n, NULL), TSR_OK);
    cr_assert_eq(n, 1);
    cr_expect_eq(rows[0].origin, origin);
    free(rows);
}

static tsr_kcache *cache_with_remote(const char *dir, struct remote *r)
{
    tsr_kcache_remote remote = {.fetch = remote_fetch, .ctx = r};
    tsr_kcache_options o = {.dir = dir, .remote = &remote};
    tsr_kcache *c = NULL;
    tsr_error err;
    cr_assert_eq(tsr_kcache_open(&o, &c, &err), TSR_OK, "open: %s", err.message);
    return c;
}

static void remote_seal(struct remote *r, int n, size_t len, uint8_t fill, double build_ms)
{
    memset(r->mac_key, 0x42, sizeof r->mac_key);
    uint8_t *payload = malloc(len);
    payload_fill(payload, len, fill);
    tsr_fingerprint k = key_of(n);
    tsr_error err;
    cr_assert_eq(tsr_kcache_entry_seal(r->mac_key, &k, &meta_tier1, build_ms, payload, len,
                                       &r->entry, &r->len, &err),
                 TSR_OK, "%s", err.message);
    cr_assert_eq(r->len, HEADER_BYTES + len);
    free(payload);
}

Test(kcache, a_disk_miss_is_served_by_the_remote_level_then_from_disk)
{
    const char *d = dir_make();
    struct remote r = {0};
    remote_seal(&r, 5, 300, 9, 12.5);
    tsr_kcache *c = cache_with_remote(d, &r);
    struct builder b = {.len = 300, .fill = 9};
    cr_expect_eq(get_checked(c, 5, &b), TSR_KCACHE_FLEET);
    cr_expect_eq(get_checked(c, 5, &b), TSR_KCACHE_MEMORY);
    cr_expect_eq(atomic_load(&b.calls), 0);
    cr_expect_eq(atomic_load(&r.calls), 1);
    EXPECT_STATS(c, STAT(fleet_hits, 1), STAT(builds, 0));
    cr_expect(entry_exists(d, 5));
    expect_one_entry_from(c, TSR_KCACHE_FLEET);
    tsr_kcache_close(c);

    /* Reopened: the disk has it, the remote level is not asked. */
    c = cache_with_remote(d, &r);
    cr_expect_eq(get_checked(c, 5, &b), TSR_KCACHE_DISK);
    cr_expect_eq(atomic_load(&r.calls), 1);
    const tsr_kcache_blob *blob;
    tsr_fingerprint k = key_of(5);
    cr_assert_eq(tsr_kcache_lookup(c, &k, &blob, NULL, NULL), TSR_OK);
    cr_expect_eq(blob->origin, TSR_KCACHE_DISK);
    cr_expect_eq(blob->build_ms, 12.5);
    tsr_kcache_blob_release(blob);
    tsr_kcache_close(c);
    free(r.entry);
}

Test(kcache, a_remote_miss_builds_and_the_entry_says_so)
{
    struct remote r = {0};
    tsr_kcache *c = cache_with_remote(NULL, &r);
    struct builder b = {.len = 64, .fill = 1};
    cr_expect_eq(get_checked(c, 2, &b), TSR_KCACHE_MISS);
    cr_expect_eq(atomic_load(&b.calls), 1);
    cr_expect_eq(atomic_load(&r.calls), 1);
    expect_one_entry_from(c, TSR_KCACHE_MISS);
    tsr_kcache_close(c);
}

Test(kcache, an_entry_opens_only_under_its_key_and_mac_key_and_whole)
{
    struct remote r = {0};
    remote_seal(&r, 7, 40, 3, 0);
    tsr_fingerprint k = key_of(7), other = key_of(8);
    const uint8_t *payload;
    size_t plen;
    tsr_kcache_meta meta;
    double ms;
    tsr_error err;
    cr_assert_eq(
        tsr_kcache_entry_open(r.mac_key, &k, r.entry, r.len, &payload, &plen, &meta, &ms, &err),
        TSR_OK, "%s", err.message);
    cr_expect_eq(plen, 40);
    cr_expect_eq(payload, r.entry + HEADER_BYTES);
    cr_expect_str_eq(meta.candidate, "tier1");
    cr_expect_eq(tsr_kcache_entry_open(r.mac_key, &other, r.entry, r.len, &payload, &plen, &meta,
                                       NULL, &err),
                 TSR_CORRUPT);
    cr_expect_eq(
        tsr_kcache_entry_open(r.mac_key, &k, r.entry, 100, &payload, &plen, &meta, NULL, &err),
        TSR_CORRUPT);
    cr_expect_eq(tsr_kcache_entry_open(r.mac_key, &k, r.entry, r.len - 1, &payload, &plen, &meta,
                                       NULL, &err),
                 TSR_CORRUPT);
    r.entry[r.len - 1] ^= 0x80;
    cr_expect_eq(
        tsr_kcache_entry_open(r.mac_key, &k, r.entry, r.len, &payload, &plen, &meta, NULL, &err),
        TSR_UNAUTHENTICATED);
    r.entry[r.len - 1] ^= 0x80;
    uint8_t wrong[TSR_KCACHE_MAC_KEY_BYTES];
    memset(wrong, 0x43, sizeof wrong);
    cr_expect_eq(
        tsr_kcache_entry_open(wrong, &k, r.entry, r.len, &payload, &plen, &meta, NULL, &err),
        TSR_UNAUTHENTICATED);
    free(r.entry);
}

Test(kcache, a_key_file_that_must_exist_is_read_under_the_disk_keys_rules)
{
    const char *d = dir_make();
    char path[128];
    snprintf(path, sizeof path, "%s/fleet.key", d);
    uint8_t key[TSR_KCACHE_MAC_KEY_BYTES];
    tsr_error err;
    cr_expect_eq(tsr_kcache_key_file_read(path, key, &err), TSR_IO_ERROR);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    uint8_t want[TSR_KCACHE_MAC_KEY_BYTES];
    memset(want, 0x17, sizeof want);
    cr_assert_eq(write(fd, want, sizeof want), (ssize_t)sizeof want);
    close(fd);
    cr_assert_eq(tsr_kcache_key_file_read(path, key, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(memcmp(key, want, sizeof key), 0);
    cr_assert_eq(chmod(path, 0640), 0);
    cr_expect_eq(tsr_kcache_key_file_read(path, key, &err), TSR_IO_ERROR);
    cr_expect(strstr(err.message, "others may read or write it") != NULL, "%s", err.message);
}
