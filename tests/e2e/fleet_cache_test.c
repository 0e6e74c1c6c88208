/*
 * fleet_cache_test.c — daemons sharing compiled kernels through a real
 * redis-server (docs/cache.md, "Fleet level").
 *
 * Each test starts redis-server on a free local port, with no persistence,
 * and daemons whose disk caches are their own but whose fleet_cache names that
 * server and one fleet key file. What is asserted comes from the daemons'
 * counters (kcache_builds_total says whether a node compiled) and from Redis
 * itself, read and changed with hiredis as an operator, or an attacker with
 * write access to Redis, would. Without redis-server the suite skips, saying
 * so.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera/client.h"
#include "../support/fixture.h"
#include "../support/fleet_env.h"

TestSuite(fleet_cache, .timeout = 120);

/* The tests' daemons' config members: before the fleet cache's, and more of
 * the fleet cache's own after its url and key_file. */
#define FLEET_FAULTS "\"test_faults\": true, "
#define FLEET_LEASE_10S ", \"timeout_ms\": 500, \"lease_ms\": 10000"
#define FLEET_TIMEOUT ", \"timeout_ms\": 500"

/* Starts d in e's fleet with the config {top "fleet_cache": {url, key_file
 * cache}}: top is other members, each followed by a comma, and cache more of
 * the fleet cache's, each after one; either may be "". The URL is e's, over
 * TLS with its password where e is. testd_start_config's status. */
static int fleet_start(const fleet_env *e, testd *d, const char *top, const char *cache)
{
    char url[96];
    if (e->tls)
        snprintf(url, sizeof url, "rediss://:sekret@localhost:%d", e->port);
    else
        snprintf(url, sizeof url, "redis://127.0.0.1:%d", e->port);
    return testd_start_config(d, NULL,
                              "{%s\"fleet_cache\": {\"url\": \"%s\", \"key_file\": \"%s\"%s}}\n",
                              top, url, e->key_file, cache);
}

/* A test's Redis and the daemons of its fleet, a and then b, as many as it
 * started. */
typedef struct fleet {
    fleet_env e;
    testd a, b;
    int nodes;
} fleet;

/* Starts f's Redis (over TLS where tls is), with no daemon yet. */
static void fleet_open(fleet *f, bool tls)
{
    fleet_setup_as(&f->e, tls);
    f->nodes = 0;
}

/* Starts the next of f's daemons (a, then b) as fleet_start does, asserted. */
static testd *fleet_join(fleet *f, const char *top, const char *cache)
{
    cr_assert_lt(f->nodes, 2);
    testd *d = f->nodes == 0 ? &f->a : &f->b;
    cr_assert_eq(fleet_start(&f->e, d, top, cache), 0);
    f->nodes++;
    return d;
}

/* Redis, then a and b both started as fleet_start does. */
static void fleet_open_two(fleet *f, const char *top, const char *cache)
{
    fleet_open(f, false);
    fleet_join(f, top, cache);
    fleet_join(f, top, cache);
}

/* Stops f's daemons, checking their exit, and its Redis. */
static void fleet_finish(fleet *f)
{
    if (f->nodes > 0)
        fixture_stop(&f->a, NULL);
    if (f->nodes > 1)
        fixture_stop(&f->b, NULL);
    fleet_teardown(&f->e);
}

/* Gives f's key file another fleet key: a daemon started after this signs and
 * checks under a key the earlier ones do not hold. */
static void fleet_key_replace(const fleet *f)
{
    uint8_t other[32];
    memset(other, 0x5a, sizeof other);
    int fd = open(f->e.key_file, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, other, sizeof other), (ssize_t)sizeof other);
    close(fd);
}

static void fleet_compile(const testd *d, int64_t n, tsr_client_compiled *out)
{
    fixture_compile_affine(d, n, out);
}

static double fleet_counter(const testd *d, const char *name)
{
    tsr_client *c = fixture_client(d, 30000);
    double v = fixture_counter(c, name);
    tsr_client_close(c);
    return v;
}

/* FIXTURE_EXPECT_COUNTS on a connection of its own to d. */
#define FLEET_EXPECT_COUNTS(d, ...)                                                                \
    do {                                                                                           \
        tsr_client *counts_client = fixture_client((d), 30000);                                    \
        FIXTURE_EXPECT_COUNTS(counts_client, __VA_ARGS__);                                         \
        tsr_client_close(counts_client);                                                           \
    } while (0)

/* The Redis key of a kernel key's entry or lease. */
static void fleet_key(const char *what, const char *hex, char *out, size_t size)
{
    snprintf(out, size, "tessera:%s:%s", what, hex);
}

Test(fleet_cache, a_compile_on_one_node_is_a_fleet_hit_on_another_without_compiling)
{
    fleet f;
    fleet_open_two(&f, "", FLEET_LEASE_10S);
    tsr_client_compiled first, second;
    fleet_compile(&f.a, 64, &first);
    cr_expect_eq(first.decision.cache_hit, false);
    FLEET_EXPECT_COUNTS(&f.a, {"fleet_cache_publishes_total", 1.0},
                        {"fleet_cache_misses_total", 1.0});

    fleet_compile(&f.b, 64, &second);
    cr_expect_str_eq(second.key, first.key);
    cr_expect_eq(second.decision.cache_hit, true);
    cr_expect_str_eq(second.decision.cache_level, "fleet");
    FLEET_EXPECT_COUNTS(&f.b, {"kcache_builds_total", 0.0}, {"kcache_fleet_hits_total", 1.0},
                        {"fleet_cache_hits_total", 1.0}, {"fleet_cache_publishes_total", 0.0},
                        {"fleet_cache_degraded", 0.0});

    /* What b fetched went to its own disk: a restart finds it there. */
    cr_assert_eq(testd_stop(&f.b), 0);
    cr_assert_eq(testd_restart(&f.b, NULL), 0);
    tsr_client_compiled third;
    fleet_compile(&f.b, 64, &third);
    cr_expect_str_eq(third.decision.cache_level, "disk");
    fleet_finish(&f);
}

/* Expects d's cache listing to say that key's entry came from want. */
static void fleet_expect_origin(const testd *d, const char *key, const char *want)
{
    tsr_client *c = fixture_client(d, 30000);
    tsr_client_cache_row *rows = NULL;
    size_t n = 0;
    tsr_error err;
    cr_assert_eq(tsr_client_cache_list_rows(c, &rows, &n, 0, &err), TSR_OK, "%s", err.message);
    char origin[TSR_CLIENT_NAME_MAX] = "";
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].entry.key, key) == 0)
            snprintf(origin, sizeof origin, "%s", rows[i].origin);
    tsr_client_cache_rows_free(rows);
    tsr_client_close(c);
    cr_assert_neq(origin[0], '\0', "no entry %s listed", key);
    cr_expect_str_eq(origin, want);
}

/* The words of the line `tessera-cli cache ls` prints for key on d. */
static int fleet_cli_ls(const testd *d, const char *key, char words[8][80])
{
    char cli[300], cmd[768], line[512];
    testd_bin(d, "tessera-cli", cli, sizeof cli);
    snprintf(cmd, sizeof cmd, "%s --url %s cache ls 2>&1", cli, d->url);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int n = 0;
    while (fgets(line, sizeof line, p) != NULL)
        if (strncmp(line, key, strlen(key)) == 0)
            n = sscanf(line, "%79s %79s %79s %79s %79s %79s %79s %79s", words[0], words[1],
                       words[2], words[3], words[4], words[5], words[6], words[7]);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    return n;
}

Test(fleet_cache, the_cache_listing_says_where_each_entry_came_from)
{
    fleet f;
    fleet_open_two(&f, "", FLEET_LEASE_10S);
    tsr_client_compiled first, second;
    fleet_compile(&f.a, 56, &first);
    fleet_compile(&f.b, 56, &second);
    cr_assert_str_eq(second.decision.cache_level, "fleet");
    fleet_expect_origin(&f.a, first.key, "compiled");
    fleet_expect_origin(&f.b, first.key, "fleet");
    /* A use from memory keeps the origin. */
    fleet_compile(&f.b, 56, &second);
    cr_expect_str_eq(second.decision.cache_level, "memory");
    fleet_expect_origin(&f.b, first.key, "fleet");

    char words[8][80];
    cr_assert_eq(fleet_cli_ls(&f.b, first.key, words), 8);
    cr_expect_str_eq(words[5], "mem+disk");
    cr_expect_str_eq(words[6], "fleet");

    /* After a restart the entry is b's disk's. */
    cr_assert_eq(testd_stop(&f.b), 0);
    cr_assert_eq(testd_restart(&f.b, NULL), 0);
    fleet_expect_origin(&f.b, first.key, "disk");
    fleet_compile(&f.b, 56, &second);
    cr_expect_str_eq(second.decision.cache_level, "disk");
    fleet_expect_origin(&f.b, first.key, "disk");
    fleet_finish(&f);
}

Test(fleet_cache, a_tampered_entry_is_refused_and_rebuilt)
{
    fleet f;
    fleet_open_two(&f, "", FLEET_LEASE_10S);
    tsr_client_compiled first, second;
    fleet_compile(&f.a, 16, &first);

    /* Flip the payload's last byte in place, keeping the entry's expiry. */
    char rkey[160];
    fleet_key("kernel", first.key, rkey, sizeof rkey);
    redisContext *rc = fleet_redis_client(&f.e);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "GET %s", rkey);
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "no entry %s in Redis", rkey);
    size_t len = r->len;
    char *value = malloc(len);
    memcpy(value, r->str, len);
    freeReplyObject(r);
    value[len - 1] ^= 0x01;
    r = redisCommand(rc, "SET %s %b KEEPTTL", rkey, value, len);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    fleet_compile(&f.b, 16, &second);
    cr_expect_eq(second.decision.cache_hit, false);
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_rejected_total", 1.0}, {"fleet_cache_hits_total", 0.0},
                        {"kcache_builds_total", 1.0});
    /* b's own build, verified, replaced the tampered entry. */
    cr_expect_eq(fleet_counter(&f.b, "fleet_cache_publishes_total"), 1.0);
    r = redisCommand(rc, "GET %s", rkey);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    /* The same payload after the 192-byte header (b's own build time and MAC
     * in it), the flipped byte back. */
    cr_assert_eq(r->len, len);
    value[len - 1] ^= 0x01;
    cr_expect_eq(memcmp(r->str + 192, value + 192, len - 192), 0);
    freeReplyObject(r);
    free(value);
    redisFree(rc);
    fleet_finish(&f);
}

Test(fleet_cache, an_entry_signed_under_another_fleet_key_is_refused)
{
    fleet f;
    fleet_open(&f, false);
    fleet_join(&f, "", FLEET_LEASE_10S);
    tsr_client_compiled first, second;
    fleet_compile(&f.a, 24, &first);
    /* b holds a different fleet key: a's entries do not authenticate. */
    fleet_key_replace(&f);
    fleet_join(&f, "", FLEET_LEASE_10S);
    fleet_compile(&f.b, 24, &second);
    cr_expect_eq(second.decision.cache_hit, false);
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_rejected_total", 1.0}, {"kcache_builds_total", 1.0});
    fleet_finish(&f);
}

Test(fleet_cache, redis_killed_mid_run_costs_no_request)
{
    fleet f;
    fleet_open(&f, false);
    fleet_join(&f, "", FLEET_LEASE_10S);
    tsr_client_compiled out;
    fleet_compile(&f.a, 8, &out);
    FLEET_EXPECT_COUNTS(&f.a, {"fleet_cache_publishes_total", 1.0}, {"fleet_cache_degraded", 0.0});

    fleet_redis_kill(&f.e);
    for (int64_t n = 9; n < 13; n++) {
        fleet_compile(&f.a, n, &out);
        cr_expect_eq(out.decision.cache_hit, false);
    }
    FLEET_EXPECT_COUNTS(&f.a, {"kcache_builds_total", 5.0}, {"fleet_cache_degraded", 1.0},
                        {"fleet_cache_publishes_total", 1.0});
    cr_expect_geq(fleet_counter(&f.a, "fleet_cache_errors_total"), 1.0);

    /* The health request stays ready and names the fleet cache. */
    Tessera__V1__Reply *reply = testd_health(&f.a, 10000);
    cr_assert_not_null(reply);
    cr_assert_eq(reply->body_case, TESSERA__V1__REPLY__BODY_HEALTH);
    cr_expect_eq(reply->health->state, TESSERA__V1__HEALTH_STATE__HEALTH_STATE_READY);
    cr_assert_eq(reply->health->n_degraded, 1);
    char want[96];
    snprintf(want, sizeof want, "fleet cache: redis://127.0.0.1:%d/0: redis: ", f.e.port);
    cr_expect_eq(strncmp(reply->health->degraded[0], want, strlen(want)), 0, "degraded: '%s'",
                 reply->health->degraded[0]);
    tessera__v1__reply__free_unpacked(reply, NULL);

    /* Redis back (empty, on the same port): the node uses it again once the
     * second without commands has passed, and the mark clears. */
    fleet_redis_start(&f.e);
    int64_t n = 100;
    for (; n < 200 && fleet_counter(&f.a, "fleet_cache_degraded") != 0.0; n++) {
        fleet_compile(&f.a, n, &out);
        usleep(50000);
    }
    cr_assert_lt(n, 200, "the fleet cache stayed degraded after Redis came back");
    fleet_compile(&f.a, 300, &out);
    cr_expect_eq(fleet_counter(&f.a, "fleet_cache_publishes_total"), 3.0,
                 "one publish before the kill, the compile that cleared the mark, and one more");
    fleet_finish(&f);
}

#define FLEET_TOKEN_ALICE "alice-fleet-token"
#define FLEET_TOKEN_OPS "ops-fleet-token"

Test(fleet_cache, health_names_redis_only_to_a_caller_that_sees_all)
{
    fleet f;
    fleet_open(&f, false);
    char ha[65], ho[65];
    testd_token_sha256(FLEET_TOKEN_ALICE, ha);
    testd_token_sha256(FLEET_TOKEN_OPS, ho);
    /* testd's hello, and the compiles below, go as alice. */
    setenv("TESSERA_TOKEN", FLEET_TOKEN_ALICE, 1);
    char tenants[256];
    snprintf(tenants, sizeof tenants,
             "\"tenants\": [{\"name\": \"alice\", \"token_sha256\": [\"%s\"]},"
             "{\"name\": \"ops\", \"token_sha256\": [\"%s\"], \"admin\": true}], ",
             ha, ho);
    fleet_join(&f, tenants, FLEET_TIMEOUT);
    fleet_redis_kill(&f.e);
    tsr_client_compiled out;
    fleet_compile(&f.a, 20, &out);
    cr_expect_eq(out.decision.cache_hit, false);

    char full[128];
    snprintf(full, sizeof full,
             "fleet cache: redis://127.0.0.1:%d/0: redis: connect: Connection refused", f.e.port);
    const struct {
        const char *token;
        const char *line;
    } callers[] = {
        {NULL, "fleet cache: Redis commands fail"},
        {FLEET_TOKEN_ALICE, "fleet cache: Redis commands fail"},
        {"not-a-token", "fleet cache: Redis commands fail"},
        {FLEET_TOKEN_OPS, full},
    };
    for (size_t i = 0; i < sizeof callers / sizeof callers[0]; i++) {
        Tessera__V1__Reply *reply = testd_health_as(&f.a, callers[i].token, 10000);
        cr_assert_not_null(reply);
        cr_assert_eq(reply->body_case, TESSERA__V1__REPLY__BODY_HEALTH);
        cr_expect_eq(reply->health->state, TESSERA__V1__HEALTH_STATE__HEALTH_STATE_READY);
        cr_assert_eq(reply->health->n_degraded, 1);
        cr_expect_str_eq(reply->health->degraded[0], callers[i].line, "caller %zu", i);
        tessera__v1__reply__free_unpacked(reply, NULL);
    }
    fleet_finish(&f);
    unsetenv("TESSERA_TOKEN");
}

Test(fleet_cache, a_dead_lease_holder_blocks_no_one_past_its_lease)
{
    fleet f;
    fleet_open(&f, false);
    /* The key, from a node outside the fleet (same backend, same key). */
    testd plain;
    fixture_start(&plain, NULL);
    tsr_client_compiled off;
    fleet_compile(&plain, 32, &off);
    fixture_stop(&plain, NULL);

    /* A node that took the lease and died: it expires in one second. */
    char rkey[160];
    fleet_key("lease", off.key, rkey, sizeof rkey);
    redisContext *rc = fleet_redis_client(&f.e);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "SET %s dead-node NX PX 1000", rkey);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    testd *b = fleet_join(&f, "", ", \"timeout_ms\": 500, \"lease_ms\": 5000");
    tsr_client_compiled out;
    fleet_compile(b, 32, &out);
    cr_expect_str_eq(out.key, off.key);
    cr_expect_eq(fleet_counter(b, "fleet_cache_lease_waits_total"), 1.0);
    /* The wait ended with b taking the expired lease, not at b's bound. */
    FLEET_EXPECT_COUNTS(b, {"fleet_cache_lease_timeouts_total", 0.0}, {"kcache_builds_total", 1.0},
                        {"fleet_cache_publishes_total", 1.0});
    /* b dropped its own lease after publishing. */
    r = redisCommand(rc, "EXISTS %s", rkey);
    cr_expect_eq(r->integer, 0);
    freeReplyObject(r);
    redisFree(rc);
    fleet_finish(&f);
}

/* Neither key's entry nor the lease its lookup took is in Redis. */
static void fleet_expect_nothing_of(const fleet_env *e, const char *key)
{
    char entry[160], lease[160];
    fleet_key("kernel", key, entry, sizeof entry);
    fleet_key("lease", key, lease, sizeof lease);
    redisContext *rc = fleet_redis_client(e);
    cr_assert_not_null(rc);
    redisReply *reply = redisCommand(rc, "EXISTS %s %s", entry, lease);
    cr_expect_eq(reply->integer, 0, "%s or %s is in Redis", entry, lease);
    freeReplyObject(reply);
    redisFree(rc);
}

#define FLEET_PAST64 "{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":%d,\"n\":%d,\"k\":24}"

/* Compiles the matmul of m x n x 24 with the CPU backend's candidate that is
 * wrong past 64 rows forced: its status, and *out on TSR_OK. */
static tsr_status fleet_compile_wrong(const testd *d, int m, int n, bool skip_verify,
                                      tsr_client_compiled *out)
{
    char json[128];
    snprintf(json, sizeof json, FLEET_PAST64, m, n);
    tsr_client *c = fixture_client(d, 30000);
    tsr_region *r = fixture_region_json(json);
    tsr_client_compile_opts opts = {.force = "test_wrong_past_64_rows", .skip_verify = skip_verify};
    tsr_error err;
    tsr_status st = tsr_client_compile(c, r, &opts, out, 0, &err);
    tsr_client_region_free(r);
    tsr_client_close(c);
    return st;
}

/* Changes every verdict record in Redis (one flipped digit of its MAC, the
 * expiry kept); how many it changed. */
static int fleet_tamper_verdicts(const fleet_env *e)
{
    redisContext *rc = fleet_redis_client(e);
    cr_assert_not_null(rc);
    redisReply *keys = redisCommand(rc, "KEYS tessera:verdict:*");
    cr_assert_eq(keys->type, REDIS_REPLY_ARRAY);
    int changed = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        const char *key = keys->element[i]->str;
        redisReply *r = redisCommand(rc, "GET %s", key);
        cr_assert_eq(r->type, REDIS_REPLY_STRING);
        size_t len = r->len;
        char *value = malloc(len);
        memcpy(value, r->str, len);
        freeReplyObject(r);
        value[len - 1] = value[len - 1] == '0' ? '1' : '0';
        r = redisCommand(rc, "SET %s %b KEEPTTL", key, value, len);
        cr_assert_eq(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
        free(value);
        changed++;
    }
    freeReplyObject(keys);
    redisFree(rc);
    return changed;
}

Test(fleet_cache, a_verdict_one_node_reached_is_used_by_another_without_verifying)
{
    fleet f;
    fleet_open_two(&f, FLEET_FAULTS, FLEET_TIMEOUT);
    tsr_client_compiled first, second;
    cr_assert_eq(fleet_compile_wrong(&f.a, 32, 40, false, &first), TSR_OK);
    cr_expect_eq(first.decision.verdict.state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_eq(first.decision.verdict.cached, false);
    cr_expect_eq(fleet_counter(&f.a, "verifications_total"), 1.0);
    /* The region's verdict and its variant's record. */
    FLEET_EXPECT_COUNTS(&f.a, {"fleet_cache_verdict_publishes_total", 2.0},
                        {"fleet_cache_verdict_hits_total", 0.0});

    cr_assert_eq(fleet_compile_wrong(&f.b, 32, 40, false, &second), TSR_OK);
    cr_expect_str_eq(second.key, first.key);
    cr_expect_str_eq(second.decision.cache_level, "fleet");
    FLEET_EXPECT_COUNTS(&f.b, {"kcache_builds_total", 0.0}, {"fleet_cache_hits_total", 1.0},
                        {"fleet_cache_verdict_hits_total", 1.0}, {"verifications_total", 0.0},
                        {"fleet_cache_verdict_publishes_total", 0.0},
                        {"fleet_cache_rejected_total", 0.0});
    /* b's decision reports a's verdict, as one from a cache. */
    cr_expect_eq(second.decision.verdict.state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_eq(second.decision.verdict.cached, true);
    cr_expect_str_eq(second.decision.verdict.reason, first.decision.verdict.reason);
    cr_expect_str_eq(second.decision.verdict.method, first.decision.verdict.method);
    cr_expect_eq(second.decision.verdict.elements, first.decision.verdict.elements);
    cr_expect_eq(second.decision.verdict.probes, first.decision.verdict.probes);
    cr_expect_eq(second.decision.verdict.rel_error, first.decision.verdict.rel_error);

    /* Kept as b's own: the same region again asks Redis for nothing. */
    cr_assert_eq(fleet_compile_wrong(&f.b, 32, 40, false, &second), TSR_OK);
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_verdict_hits_total", 1.0},
                        {"verifications_total", 0.0});
    fleet_finish(&f);
}

Test(fleet_cache, a_failing_verdict_and_a_variant_record_are_shared_too)
{
    fleet f;
    fleet_open_two(&f, FLEET_FAULTS, FLEET_TIMEOUT);
    tsr_client_compiled out;
    /* Wrong past 64 rows: a's verification fails, b takes a's word for it. */
    cr_expect_eq(fleet_compile_wrong(&f.a, 100, 40, false, &out), TSR_VERIFY_FAILED);
    FLEET_EXPECT_COUNTS(&f.a, {"verifications_total", 1.0},
                        {"fleet_cache_verdict_publishes_total", 2.0});
    cr_expect_eq(fleet_compile_wrong(&f.b, 100, 40, false, &out), TSR_VERIFY_FAILED);
    FLEET_EXPECT_COUNTS(&f.b, {"verifications_total", 0.0},
                        {"fleet_cache_verdict_hits_total", 1.0});

    /* Another shape of a variant a verified completely: b finds no verdict
     * of that region but the variant's record, and runs only the sampled
     * check of the new shape, which it does not share. */
    tsr_client_compiled first, second;
    cr_assert_eq(fleet_compile_wrong(&f.a, 32, 56, false, &first), TSR_OK);
    cr_expect_eq(fleet_counter(&f.a, "fleet_cache_verdict_publishes_total"), 4.0);
    cr_assert_eq(fleet_compile_wrong(&f.b, 48, 56, false, &second), TSR_OK);
    cr_expect_eq(second.decision.verdict.state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_eq(second.decision.verdict.cached, false);
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_verdict_hits_total", 2.0}, {"verifications_total", 1.0},
                        {"fleet_cache_verdict_publishes_total", 0.0});
    fleet_finish(&f);
}

Test(fleet_cache, a_tampered_verdict_is_refused_and_the_node_verifies)
{
    fleet f;
    fleet_open_two(&f, FLEET_FAULTS, FLEET_TIMEOUT);
    tsr_client_compiled first, second;
    cr_assert_eq(fleet_compile_wrong(&f.a, 32, 44, false, &first), TSR_OK);
    cr_assert_eq(fleet_tamper_verdicts(&f.e), 2);

    cr_assert_eq(fleet_compile_wrong(&f.b, 32, 44, false, &second), TSR_OK);
    /* The kernel's entry is good (fetched for b's verification); the
     * region's verdict and the variant's record are not. */
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_hits_total", 1.0}, {"kcache_builds_total", 0.0},
                        {"fleet_cache_rejected_total", 2.0},
                        {"fleet_cache_verdict_hits_total", 0.0}, {"verifications_total", 1.0});
    cr_expect_eq(second.decision.verdict.state, TSR_CLIENT_VERDICT_PASS);
    cr_expect_eq(second.decision.verdict.cached, false);
    /* b's verdict of the region replaced the changed one; a passing record
     * never replaces a variant's record. */
    cr_expect_eq(fleet_counter(&f.b, "fleet_cache_verdict_publishes_total"), 1.0);
    fleet_finish(&f);
}

Test(fleet_cache, a_verdict_signed_under_another_fleet_key_is_refused)
{
    fleet f;
    fleet_open(&f, false);
    fleet_join(&f, FLEET_FAULTS, FLEET_TIMEOUT);
    tsr_client_compiled first, second;
    cr_assert_eq(fleet_compile_wrong(&f.a, 32, 48, false, &first), TSR_OK);
    cr_expect_eq(fleet_counter(&f.a, "fleet_cache_verdict_publishes_total"), 2.0);
    fleet_key_replace(&f);
    fleet_join(&f, FLEET_FAULTS, FLEET_TIMEOUT);
    cr_assert_eq(fleet_compile_wrong(&f.b, 32, 48, false, &second), TSR_OK);
    /* The kernel's entry, the region's verdict and the variant's record. */
    FLEET_EXPECT_COUNTS(&f.b, {"fleet_cache_rejected_total", 3.0},
                        {"fleet_cache_verdict_hits_total", 0.0}, {"verifications_total", 1.0});
    cr_expect_eq(second.decision.verdict.cached, false);
    fleet_finish(&f);
}

Test(fleet_cache, only_verified_kernels_are_published_and_failures_free_the_lease)
{
    fleet f;
    fleet_open(&f, false);
    fleet_join(&f, FLEET_FAULTS, "");
    /* Chosen without verification: built, not published, lease dropped. */
    tsr_client_compiled out;
    cr_assert_eq(fleet_compile_wrong(&f.a, 8, 160, true, &out), TSR_OK);
    cr_expect_eq(out.decision.verify_skipped, true);
    fleet_expect_nothing_of(&f.e, out.key);
    /* Failing its verification (100 rows): not published, lease dropped. */
    tsr_client_compiled bad;
    cr_expect_neq(fleet_compile_wrong(&f.a, 100, 168, false, &bad), TSR_OK);
    FLEET_EXPECT_COUNTS(&f.a, {"fleet_cache_misses_total", 2.0},
                        {"fleet_cache_publishes_total", 0.0});
    /* The same kernel passing at 8 rows comes from memory: a node publishes
     * what its lookup missed and it built, so this one stays out. */
    tsr_client_compiled good;
    cr_assert_eq(fleet_compile_wrong(&f.a, 8, 168, false, &good), TSR_OK);
    fleet_expect_nothing_of(&f.e, good.key);
    fleet_finish(&f);
}

Test(fleet_cache, nodes_that_miss_at_once_compile_once)
{
    fleet_env e;
    fleet_setup(&e);
    enum { NODES = 3 };
    testd d[NODES];
    fixture_compile_job racers[NODES];
    for (int i = 0; i < NODES; i++)
        cr_assert_eq(fleet_start(&e, &d[i], "", ", \"timeout_ms\": 500, \"lease_ms\": 20000"), 0);
    for (int i = 0; i < NODES; i++)
        fixture_compile_start(&racers[i], &d[i], 48, 30000);
    for (int i = 0; i < NODES; i++)
        cr_assert_eq(fixture_compile_join(&racers[i]), TSR_OK, "node %d: %s", i,
                     racers[i].err.message);
    double builds = 0, hits = 0;
    for (int i = 0; i < NODES; i++) {
        builds += fleet_counter(&d[i], "kcache_builds_total");
        hits += fleet_counter(&d[i], "fleet_cache_hits_total");
        cr_expect_str_eq(racers[i].out.key, racers[0].out.key);
    }
    cr_expect_eq(builds, 1.0);
    cr_expect_eq(hits, NODES - 1.0);
    for (int i = 0; i < NODES; i++)
        fixture_stop(&d[i], NULL);
    fleet_teardown(&e);
}

/* tessera-cli cache warm of one example region on d: its one output line. */
static void fleet_cli_warm(const testd *d, const char *region, char *line, size_t size)
{
    char cli[300], cmd[768];
    testd_bin(d, "tessera-cli", cli, sizeof cli);
    snprintf(cmd, sizeof cmd, "%s --url %s cache warm %s 2>&1", cli, d->url, region);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    line[0] = '\0';
    cr_assert_not_null(fgets(line, (int)size, p));
    line[strcspn(line, "\n")] = '\0';
    cr_assert_eq(pclose(p), 0, "%s: %s", cmd, line);
}

Test(fleet_cache, cache_warm_says_where_each_kernel_came_from)
{
    fleet f;
    fleet_open_two(&f, "", FLEET_LEASE_10S);
    char line[256];
    fleet_cli_warm(&f.a, "examples/pointwise.json", line, sizeof line);
    cr_expect(strstr(line, "examples/pointwise.json: reference, compiled in ") == line, "%s", line);
    fleet_cli_warm(&f.b, "examples/pointwise.json", line, sizeof line);
    cr_expect_str_eq(line, "examples/pointwise.json: reference, cached (fleet)");
    fleet_cli_warm(&f.b, "examples/pointwise.json", line, sizeof line);
    cr_expect_str_eq(line, "examples/pointwise.json: reference, cached (memory)");
    fleet_finish(&f);
}

Test(fleet_cache, nodes_share_through_redis_over_tls_with_a_password)
{
    fleet f;
    fleet_open(&f, true);
    char cache[256];
    snprintf(cache, sizeof cache, ", \"tls_ca_file\": \"%s/redis.crt\", \"timeout_ms\": 1000",
             f.e.dir);
    fleet_join(&f, "", cache);
    fleet_join(&f, "", cache);
    tsr_client_compiled first, second;
    fleet_compile(&f.a, 40, &first);
    cr_expect_eq(fleet_counter(&f.a, "fleet_cache_publishes_total"), 1.0);
    fleet_compile(&f.b, 40, &second);
    cr_expect_str_eq(second.decision.cache_level, "fleet");
    FLEET_EXPECT_COUNTS(&f.b, {"kcache_builds_total", 0.0}, {"fleet_cache_errors_total", 0.0});
    fleet_finish(&f);
}

Test(fleet_cache, a_server_whose_certificate_does_not_verify_is_not_used)
{
    fleet f;
    fleet_open(&f, true);
    /* A CA file that does not hold the server's certificate. */
    char other[128], cmd[512];
    snprintf(other, sizeof other, "%s/other.crt", f.e.dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
             "-subj /CN=localhost -keyout %s/other.key -out %s 2>/dev/null",
             f.e.dir, other);
    cr_assert_eq(system(cmd), 0);
    char cache[256];
    snprintf(cache, sizeof cache, ", \"tls_ca_file\": \"%s\", \"timeout_ms\": 1000", other);
    fleet_join(&f, "", cache);
    tsr_client_compiled out;
    fleet_compile(&f.a, 44, &out);
    cr_expect_eq(out.decision.cache_hit, false);
    FLEET_EXPECT_COUNTS(&f.a, {"fleet_cache_errors_total", 1.0}, {"fleet_cache_degraded", 1.0},
                        {"fleet_cache_publishes_total", 0.0});
    fleet_finish(&f);
}

Test(fleet_cache, a_bad_fleet_key_file_stops_the_start_with_its_reason)
{
    fleet_env e;
    fleet_setup(&e);
    cr_assert_eq(chmod(e.key_file, 0644), 0);
    testd d;
    cr_expect_neq(fleet_start(&e, &d, "", ""), 0);
    testd_stop(&d);
    testd_remove(&d);
    fleet_teardown(&e);
}
