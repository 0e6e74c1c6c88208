/*
 * fleet_test.c — the fleet cache's measured winners (serve/fleet.h) against a
 * real redis-server: what one node puts another gets, a record changed in
 * Redis or signed under another fleet key is not used, and a Redis that is
 * gone costs a miss, counted. The kernels' path is tests/e2e/fleet_cache_test.c.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "serve/fleet.h"
#include "../support/fleet_env.h"

TestSuite(fleet, .timeout = 60);

#define WINNER_KEY "sm_90a/matmul/bf16/m64n64k64"

static tsrd_fleet *fleet_open_on(const fleet_env *e)
{
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", e->port);
    tsrd_fleet_config cfg = {.url = url,
                             .key_file = (char *)e->key_file,
                             .ttl_s = 60,
                             .max_entry_bytes = 1 << 20,
                             .timeout_ms = 1000,
                             .lease_ms = 1000};
    tsrd_fleet *f = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_fleet_open(&cfg, &f, &err), TSR_OK, "%s", err.message);
    return f;
}

static tsrd_fleet_stats fleet_stats(tsrd_fleet *f)
{
    tsrd_fleet_stats s;
    tsrd_fleet_get_stats(f, &s);
    return s;
}

Test(fleet, a_winner_one_node_puts_is_what_another_gets)
{
    fleet_env e;
    fleet_setup(&e);
    tsrd_fleet *a = fleet_open_on(&e), *b = fleet_open_on(&e);
    tsr_arbiter_remote ra = tsrd_fleet_arbiter_remote(a), rb = tsrd_fleet_arbiter_remote(b);
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version = 0;
    double ms = 0;
    cr_expect_not(rb.winner_get(rb.ctx, WINNER_KEY, name, &version, &ms));
    cr_expect_eq(fleet_stats(b).misses, 1);
    ra.winner_put(ra.ctx, WINNER_KEY, "gemm_wgmma", 3, 0.0421875);
    cr_expect_eq(fleet_stats(a).winner_publishes, 1);
    cr_assert(rb.winner_get(rb.ctx, WINNER_KEY, name, &version, &ms));
    cr_expect_str_eq(name, "gemm_wgmma");
    cr_expect_eq(version, 3);
    cr_expect_eq(ms, 0.0421875);
    cr_expect_eq(fleet_stats(b).winner_hits, 1);
    /* Another key has none. */
    cr_expect_not(rb.winner_get(rb.ctx, "sm_90a/matmul/bf16/m128n64k64", name, &version, &ms));
    tsrd_fleet_close(a);
    tsrd_fleet_close(b);
    fleet_teardown(&e);
}

Test(fleet, a_changed_or_moved_winner_is_not_used)
{
    fleet_env e;
    fleet_setup(&e);
    tsrd_fleet *a = fleet_open_on(&e);
    tsr_arbiter_remote ra = tsrd_fleet_arbiter_remote(a);
    ra.winner_put(ra.ctx, WINNER_KEY, "tier1", 1, 2.5);
    redisContext *rc = fleet_redis_client(&e);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "GET tessera:winner:" WINNER_KEY);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    char value[256];
    snprintf(value, sizeof value, "%.*s", (int)r->len, r->str);
    freeReplyObject(r);
    /* The same record under another key: its MAC names the first. */
    freeReplyObject(redisCommand(rc, "SET tessera:winner:sm_90a/fused/bf16/m64n64k64 %s", value));
    /* A faster time written in. */
    value[strcspn(value, " ") + 3] = '0';
    freeReplyObject(redisCommand(rc, "SET tessera:winner:" WINNER_KEY " %s", value));
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version;
    double ms;
    cr_expect_not(ra.winner_get(ra.ctx, WINNER_KEY, name, &version, &ms));
    cr_expect_not(ra.winner_get(ra.ctx, "sm_90a/fused/bf16/m64n64k64", name, &version, &ms));
    cr_expect_eq(fleet_stats(a).rejected, 2);
    cr_expect_eq(fleet_stats(a).winner_hits, 0);
    redisFree(rc);

    /* Signed under another fleet key: not used either. */
    ra.winner_put(ra.ctx, WINNER_KEY, "tier1", 1, 2.5);
    int fd = open(e.key_file, O_WRONLY | O_TRUNC);
    cr_assert_geq(fd, 0);
    uint8_t other[32];
    memset(other, 0x33, sizeof other);
    cr_assert_eq(write(fd, other, sizeof other), (ssize_t)sizeof other);
    close(fd);
    tsrd_fleet *b = fleet_open_on(&e);
    tsr_arbiter_remote rb = tsrd_fleet_arbiter_remote(b);
    cr_expect_not(rb.winner_get(rb.ctx, WINNER_KEY, name, &version, &ms));
    cr_expect_eq(fleet_stats(b).rejected, 1);
    tsrd_fleet_close(a);
    tsrd_fleet_close(b);
    fleet_teardown(&e);
}

Test(fleet, without_redis_a_winner_is_a_miss_and_the_cache_degraded)
{
    fleet_env e;
    fleet_setup(&e);
    tsrd_fleet *a = fleet_open_on(&e);
    fleet_redis_kill(&e);
    tsr_arbiter_remote ra = tsrd_fleet_arbiter_remote(a);
    char name[TSR_CANDIDATE_NAME_MAX];
    uint32_t version;
    double ms;
    cr_expect_not(ra.winner_get(ra.ctx, WINNER_KEY, name, &version, &ms));
    tsrd_fleet_stats s = fleet_stats(a);
    cr_expect_eq(s.errors, 1);
    cr_expect(s.degraded);
    cr_expect(strstr(s.degraded_why, "Connection refused") != NULL, "%s", s.degraded_why);
    /* Within the second after a failure nothing is tried. */
    ra.winner_put(ra.ctx, WINNER_KEY, "tier1", 1, 2.5);
    cr_expect_eq(fleet_stats(a).skipped, 1);
    cr_expect_eq(fleet_stats(a).errors, 1);
    tsrd_fleet_close(a);
    fleet_teardown(&e);
}

Test(fleet, an_empty_key_file_name_is_refused_naming_the_setting)
{
    tsrd_fleet_config cfg = {.url = "redis://127.0.0.1:1", .key_file = ""};
    tsrd_fleet *f = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_fleet_open(&cfg, &f, &err), TSR_INVALID_ARGUMENT);
    cr_expect_null(f);
    cr_expect_str_eq(err.message, "fleet_cache.key_file: key file: empty name");
}
