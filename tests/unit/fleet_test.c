/*
 * fleet_test.c — the fleet cache's measured winners and verdicts
 * (serve/fleet.h) against a real redis-server: what one node puts another
 * gets, a record changed in Redis or signed under another fleet key is not
 * used, and a Redis that is gone costs a miss, counted. The verdict records'
 * format and keys are tested on their own, without Redis, and a lookup whose
 * look after taking the lease fails against a stand-in that answers so. The
 * kernels' path is tests/e2e/fleet_cache_test.c.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/fleet.h"
#include "../support/fleet_env.h"
#include "../support/testd.h"

TestSuite(fleet, .timeout = 60);

#define WINNER_KEY "sm_90a/matmul/bf16/m64n64k64"

/* A fleet cache on the Redis at 127.0.0.1:port, signing with key_file. */
static tsrd_fleet *fleet_open_at(int port, const char *key_file, int timeout_ms, int lease_ms)
{
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    tsrd_fleet_config cfg = {.url = url,
                             .key_file = (char *)key_file,
                             .ttl_s = 60,
                             .max_entry_bytes = 1 << 20,
                             .timeout_ms = timeout_ms,
                             .lease_ms = lease_ms};
    tsrd_fleet *f = NULL;
    tsr_error err;
    cr_assert_eq(tsrd_fleet_open(&cfg, &f, &err), TSR_OK, "%s", err.message);
    return f;
}

static tsrd_fleet *fleet_open_on(const fleet_env *e)
{
    return fleet_open_at(e->port, e->key_file, 1000, 1000);
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

/* ---- verdicts ---- */

static const uint8_t verdict_mac_key[TSR_KCACHE_MAC_KEY_BYTES] = {
    1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

#define VERDICT_RKEY "tessera:verdict:sm_90a/tier1/3/rab/550.54.15/12.4"

/* A sampled check that failed on a NaN, with every field set. */
static tsr_verdict verdict_failing_sampled(void)
{
    tsr_verdict v;
    memset(&v, 0, sizeof v);
    v.pass = false;
    v.elements = 123456789;
    v.probes = 3;
    v.max_abs_error = 0.1;
    v.rel_error = 1.0 / 3.0;
    v.bound = 0.0078125;
    v.nan_mismatches = 7;
    v.inf_mismatches = 2;
    v.first_bad_index = 4097;
    v.first_bad_probe = 1;
    v.first_bad_got = 1.5;
    v.first_bad_want = NAN;
    snprintf(v.reason, sizeof v.reason, "NaN mismatch at [4097]: got 1.5 want nan");
    v.method = TSR_VERIFY_SAMPLED;
    v.sampled_elements = 8192;
    v.small_probes = 2;
    return v;
}

/* A full check that passed: the fields such a verdict sets. */
static const tsr_verdict verdict_passing_full = {
    .pass = true,
    .elements = 4096,
    .probes = 4,
    .rel_error = 1e-7,
    .bound = 1e-5,
    .first_bad_index = -1,
    .first_bad_probe = -1,
    .reason = "pass",
    .method = TSR_VERIFY_FULL,
};

static void verdict_seal(const tsr_verdict *v, char *record, size_t *len)
{
    tsr_error err;
    cr_assert_eq(tsrd_fleet_verdict_seal(verdict_mac_key, VERDICT_RKEY, v, record, len, &err),
                 TSR_OK, "%s", err.message);
}

Test(fleet, a_verdict_record_round_trips)
{
    const tsr_verdict cases[] = {verdict_failing_sampled(), verdict_passing_full};
    for (size_t i = 0; i < 2; i++) {
        const tsr_verdict *want = &cases[i];
        char record[TSRD_FLEET_VERDICT_RECORD_MAX];
        size_t len = 0;
        verdict_seal(want, record, &len);
        tsr_verdict got;
        tsr_error err;
        cr_assert_eq(
            tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, record, len, &got, &err), TSR_OK,
            "%s", err.message);
        cr_expect_eq(got.pass, want->pass);
        cr_expect_eq(got.elements, want->elements);
        cr_expect_eq(got.probes, want->probes);
        cr_expect_eq(got.max_abs_error, want->max_abs_error);
        cr_expect_eq(got.rel_error, want->rel_error);
        cr_expect_eq(got.bound, want->bound);
        cr_expect_eq(got.nan_mismatches, want->nan_mismatches);
        cr_expect_eq(got.inf_mismatches, want->inf_mismatches);
        cr_expect_eq(got.first_bad_index, want->first_bad_index);
        cr_expect_eq(got.first_bad_probe, want->first_bad_probe);
        cr_expect_eq(got.first_bad_got, want->first_bad_got);
        if (isnan(want->first_bad_want))
            cr_expect(isnan(got.first_bad_want));
        else
            cr_expect_eq(got.first_bad_want, want->first_bad_want);
        cr_expect_str_eq(got.reason, want->reason);
        cr_expect_eq(got.method, want->method);
        cr_expect_eq(got.sampled_elements, want->sampled_elements);
        cr_expect_eq(got.small_probes, want->small_probes);
        cr_expect_eq(got.variant_reused, false);
    }
}

Test(fleet, a_truncated_verdict_record_is_corrupt)
{
    tsr_verdict v = verdict_failing_sampled(), got;
    char record[TSRD_FLEET_VERDICT_RECORD_MAX];
    size_t len = 0;
    verdict_seal(&v, record, &len);
    tsr_error err;
    const size_t cut[] = {len - 1, len - 64, 64, 0};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
        cr_expect_eq(
            tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, record, cut[i], &got, &err),
            TSR_CORRUPT, "cut to %zu", cut[i]);
    /* A byte of the text dropped, the MAC kept. */
    char shorter[TSRD_FLEET_VERDICT_RECORD_MAX];
    memcpy(shorter, record, 10);
    memcpy(shorter + 10, record + 11, len - 11);
    cr_expect_eq(
        tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, shorter, len - 1, &got, &err),
        TSR_CORRUPT);
    cr_expect_str_eq(err.message, "verdict record: the MAC does not verify");
}

Test(fleet, a_verdict_record_signed_under_another_tag_key_or_format_is_refused)
{
    tsr_verdict v = verdict_passing_full, got;
    char record[TSRD_FLEET_VERDICT_RECORD_MAX];
    size_t len = 0;
    verdict_seal(&v, record, &len);
    size_t body = len - 64;
    tsr_error err;

    /* The same text signed as a measured winner's record. */
    char resigned[TSRD_FLEET_VERDICT_RECORD_MAX];
    memcpy(resigned, record, body);
    cr_assert(tsrd_fleet_record_mac(verdict_mac_key, "tessera winner\n", VERDICT_RKEY, resigned,
                                    body, resigned + body));
    cr_expect_eq(tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, resigned, len, &got, &err),
                 TSR_CORRUPT);
    cr_expect_str_eq(err.message, "verdict record: the MAC does not verify");

    /* Moved to another key (another driver's). */
    cr_expect_eq(tsrd_fleet_verdict_open(verdict_mac_key,
                                         "tessera:verdict:sm_90a/tier1/3/rab/560.28.03/12.4",
                                         record, len, &got, &err),
                 TSR_CORRUPT);

    /* Another format tag, correctly signed: not a record this node reads. */
    memcpy(resigned, record, body);
    resigned[strlen(TSRD_FLEET_VERDICT_FORMAT) - 1] = '2';
    cr_assert(tsrd_fleet_record_mac(verdict_mac_key, TSRD_FLEET_VERDICT_TAG, VERDICT_RKEY, resigned,
                                    body, resigned + body));
    cr_expect_eq(tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, resigned, len, &got, &err),
                 TSR_CORRUPT);
    cr_expect_str_eq(err.message, "verdict record: not a tsr-verdict-1 record");

    /* A sampled verdict without the small-shape probes, correctly signed:
     * not of a complete verification. */
    const char *text = "tsr-verdict-1 1 10 1 0 0 0.01 0 0 -1 -1 0 0 1 10 0 4:pass ";
    body = strlen(text);
    memcpy(resigned, text, body);
    cr_assert(tsrd_fleet_record_mac(verdict_mac_key, TSRD_FLEET_VERDICT_TAG, VERDICT_RKEY, resigned,
                                    body, resigned + body));
    cr_expect_eq(
        tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, resigned, body + 64, &got, &err),
        TSR_CORRUPT);
    cr_expect_str_eq(err.message, "verdict record: not of a complete verification");
    /* The same with one small-shape probe is one. */
    resigned[body - 9] = '1';
    cr_assert(tsrd_fleet_record_mac(verdict_mac_key, TSRD_FLEET_VERDICT_TAG, VERDICT_RKEY, resigned,
                                    body, resigned + body));
    cr_expect_eq(
        tsrd_fleet_verdict_open(verdict_mac_key, VERDICT_RKEY, resigned, body + 64, &got, &err),
        TSR_OK, "%s", err.message);
    cr_expect_eq(got.small_probes, 1);
}

Test(fleet, only_complete_verifications_are_sealed)
{
    char record[TSRD_FLEET_VERDICT_RECORD_MAX];
    size_t len = 0;
    tsr_error err;
    tsr_verdict v = verdict_failing_sampled();
    v.variant_reused = true;
    cr_expect_eq(tsrd_fleet_verdict_seal(verdict_mac_key, VERDICT_RKEY, &v, record, &len, &err),
                 TSR_INVALID_ARGUMENT);
    v.variant_reused = false;
    v.small_probes = 0;
    cr_expect_eq(tsrd_fleet_verdict_seal(verdict_mac_key, VERDICT_RKEY, &v, record, &len, &err),
                 TSR_INVALID_ARGUMENT);
    cr_expect_str_eq(err.message, "verdict record: not of a complete verification");
}

static tsr_fingerprint verdict_fingerprint(uint8_t fill)
{
    tsr_fingerprint fp;
    memset(fp.bytes, fill, sizeof fp.bytes);
    return fp;
}

Test(fleet, a_verdict_key_holds_everything_the_verdict_depends_on)
{
    tsr_fingerprint fp = verdict_fingerprint(0xab);
    tsr_arbiter_verdict_key k = {
        .name = "tier1", .version = 3, .fingerprint = &fp, .arch = "sm_90a"};
    char key[TSRD_FLEET_VERDICT_KEY_MAX], other[TSRD_FLEET_VERDICT_KEY_MAX];
    tsrd_fleet_verdict_key("tessera:", "550.54.15", "12.4", &k, key);
    cr_expect_str_eq(key, "tessera:verdict:sm_90a/tier1/3/"
                          "rabababababababababababababababababababababababababababababababab/"
                          "550.54.15/12.4");
    /* Another driver, another toolkit: another key. */
    tsrd_fleet_verdict_key("tessera:", "560.28.03", "12.4", &k, other);
    cr_expect_str_neq(other, key);
    tsrd_fleet_verdict_key("tessera:", "550.54.15", "12.6", &k, other);
    cr_expect_str_neq(other, key);
    /* The variant's record and the region's verdict of the same fingerprint. */
    k.variant = true;
    tsrd_fleet_verdict_key("tessera:", "550.54.15", "12.4", &k, other);
    cr_expect_str_eq(other, "tessera:verdict:sm_90a/tier1/3/"
                            "vabababababababababababababababababababababababababababababababab/"
                            "550.54.15/12.4");
    k.variant = false;
    k.version = 4;
    tsrd_fleet_verdict_key("tessera:", "550.54.15", "12.4", &k, other);
    cr_expect_str_neq(other, key);
    /* A name cannot add a part of its own; an empty version is "-". */
    tsrd_fleet_verdict_key("tessera:", "550/54", "", &k, other);
    cr_expect_str_eq(other, "tessera:verdict:sm_90a/tier1/4/"
                            "rabababababababababababababababababababababababababababababababab/"
                            "550_54/-");
}

static tsrd_fleet *fleet_open_versions(const fleet_env *e, const char *driver)
{
    tsrd_fleet *f = fleet_open_on(e);
    tsrd_fleet_set_versions(f, driver, "12.4");
    return f;
}

Test(fleet, a_verdict_is_used_by_nodes_of_the_same_driver_only)
{
    fleet_env e;
    fleet_setup(&e);
    tsrd_fleet *a = fleet_open_versions(&e, "550.54.15"), *b = fleet_open_versions(&e, "550.54.15"),
               *c = fleet_open_versions(&e, "560.28.03");
    tsr_arbiter_remote ra = tsrd_fleet_arbiter_remote(a), rb = tsrd_fleet_arbiter_remote(b),
                       rc = tsrd_fleet_arbiter_remote(c);
    tsr_fingerprint fp = verdict_fingerprint(0x11);
    tsr_arbiter_verdict_key k = {
        .name = "tier1", .version = 3, .fingerprint = &fp, .arch = "sm_90a"};
    tsr_verdict want = verdict_failing_sampled(), got;
    cr_expect_not(rb.verdict_get(rb.ctx, &k, &got));
    ra.verdict_put(ra.ctx, &k, &want);
    cr_expect_eq(fleet_stats(a).verdict_publishes, 1);
    cr_assert(rb.verdict_get(rb.ctx, &k, &got));
    cr_expect_eq(got.pass, false);
    cr_expect_str_eq(got.reason, want.reason);
    cr_expect_eq(fleet_stats(b).verdict_hits, 1);
    cr_expect_eq(fleet_stats(b).rejected, 0);
    /* Another driver asks under another key: nothing there, nothing refused. */
    cr_expect_not(rc.verdict_get(rc.ctx, &k, &got));
    cr_expect_eq(fleet_stats(c).verdict_hits, 0);
    cr_expect_eq(fleet_stats(c).rejected, 0);
    /* Nor is a variant's record the region's verdict. */
    k.variant = true;
    cr_expect_not(rb.verdict_get(rb.ctx, &k, &got));
    cr_expect_eq(fleet_stats(b).verdict_hits, 1);

    /* A sampled check of a new shape is never written. */
    want.variant_reused = true;
    ra.verdict_put(ra.ctx, &k, &want);
    cr_expect_eq(fleet_stats(a).verdict_publishes, 1);
    cr_expect_not(rb.verdict_get(rb.ctx, &k, &got));
    tsrd_fleet_close(a);
    tsrd_fleet_close(b);
    tsrd_fleet_close(c);
    fleet_teardown(&e);
}

Test(fleet, a_changed_verdict_is_refused_and_counted)
{
    fleet_env e;
    fleet_setup(&e);
    tsrd_fleet *a = fleet_open_versions(&e, "550.54.15");
    tsr_arbiter_remote ra = tsrd_fleet_arbiter_remote(a);
    tsr_fingerprint fp = verdict_fingerprint(0x22);
    tsr_arbiter_verdict_key k = {
        .name = "tier1", .version = 3, .fingerprint = &fp, .arch = "sm_90a"};
    tsr_verdict want = verdict_failing_sampled(), got;
    ra.verdict_put(ra.ctx, &k, &want);
    char rkey[TSRD_FLEET_VERDICT_KEY_MAX];
    tsrd_fleet_verdict_key("tessera:", "550.54.15", "12.4", &k, rkey);
    redisContext *rc = fleet_redis_client(&e);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "GET %s", rkey);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    char value[TSRD_FLEET_VERDICT_RECORD_MAX];
    size_t len = r->len;
    memcpy(value, r->str, len);
    freeReplyObject(r);
    /* The failure turned into a pass: "tsr-verdict-1 0 ..." to "... 1 ...". */
    size_t at = strlen(TSRD_FLEET_VERDICT_FORMAT) + 1;
    cr_assert_eq(value[at], '0');
    value[at] = '1';
    freeReplyObject(redisCommand(rc, "SET %s %b", rkey, value, len));
    cr_expect_not(ra.verdict_get(ra.ctx, &k, &got));
    cr_expect_eq(fleet_stats(a).rejected, 1);
    cr_expect_eq(fleet_stats(a).verdict_hits, 0);
    redisFree(rc);
    tsrd_fleet_close(a);
    fleet_teardown(&e);
}

/* ---- a lease whose second look fails ---- */

/* A Redis stand-in: no entry for any GET but an error for every GET after a
 * SET (the look that follows taking the lease), OK for SET, 1 for EVAL. It
 * records each command as its arguments joined by spaces. */
typedef struct lease_server {
    int listen_fd;
    int conns;
    pthread_t threads[2];
    pthread_mutex_t lock;
    bool set_seen;
    char log[8][512];
    int n_log;
} lease_server;

/* Reads one RESP command from fd (buf holds *have bytes read ahead) into
 * line, its arguments joined by spaces: false when the connection ends. */
static bool lease_read_command(int fd, char *buf, size_t *have, char *line, size_t size)
{
    for (;;) {
        /* *N\r\n then N times $len\r\nbytes\r\n */
        size_t pos = 0, used = 0;
        bool whole = false;
        line[0] = '\0';
        if (*have > 0 && buf[0] == '*') {
            long n = strtol(buf + 1, NULL, 10);
            char *eol = memmem(buf, *have, "\r\n", 2);
            pos = eol != NULL ? (size_t)(eol - buf) + 2 : *have + 1;
            long i = 0;
            for (; i < n && pos < *have; i++) {
                if (buf[pos] != '$')
                    break;
                long len = strtol(buf + pos + 1, NULL, 10);
                eol = memmem(buf + pos, *have - pos, "\r\n", 2);
                if (eol == NULL || (size_t)(eol - buf) + 2 + (size_t)len + 2 > *have)
                    break;
                pos = (size_t)(eol - buf) + 2;
                used += (size_t)snprintf(line + used, size - used, "%s%.*s", i > 0 ? " " : "",
                                         (int)len, buf + pos);
                if (used >= size)
                    used = size - 1;
                pos += (size_t)len + 2;
            }
            whole = i == n;
        }
        if (whole) {
            memmove(buf, buf + pos, *have - pos);
            *have -= pos;
            return true;
        }
        ssize_t got = recv(fd, buf + *have, 4096 - *have, 0);
        if (got <= 0)
            return false;
        *have += (size_t)got;
    }
}

typedef struct lease_conn {
    lease_server *s;
    int fd;
} lease_conn;

/* Serves one connection (the lookup's, then the lease's drop on another). */
static void *lease_conn_main(void *arg)
{
    lease_conn *c = arg;
    lease_server *s = c->s;
    char buf[4096], line[512];
    size_t have = 0;
    while (lease_read_command(c->fd, buf, &have, line, sizeof line)) {
        const char *reply = "-ERR unknown\r\n";
        pthread_mutex_lock(&s->lock);
        if (s->n_log < 8)
            snprintf(s->log[s->n_log++], sizeof s->log[0], "%s", line);
        if (strncmp(line, "GET ", 4) == 0) {
            reply = s->set_seen ? "-ERR injected failure\r\n" : "$-1\r\n";
        } else if (strncmp(line, "SET ", 4) == 0) {
            reply = "+OK\r\n";
            s->set_seen = true;
        } else if (strncmp(line, "EVAL ", 5) == 0) {
            reply = ":1\r\n";
        }
        pthread_mutex_unlock(&s->lock);
        send(c->fd, reply, strlen(reply), MSG_NOSIGNAL);
    }
    close(c->fd);
    free(c);
    return NULL;
}

static void *lease_server_main(void *arg)
{
    lease_server *s = arg;
    while (s->conns < 2) {
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        lease_conn *c = malloc(sizeof *c);
        c->s = s;
        c->fd = fd;
        pthread_create(&s->threads[s->conns++], NULL, lease_conn_main, c);
    }
    return NULL;
}

Test(fleet, a_lease_is_dropped_when_the_look_after_taking_it_fails)
{
    int port;
    lease_server s = {.listen_fd = testd_tcp_listen(2, &port), .lock = PTHREAD_MUTEX_INITIALIZER};
    cr_assert_geq(s.listen_fd, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, lease_server_main, &s), 0);

    char dir[] = "/tmp/tsr-lease-XXXXXX", key_file[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(key_file, sizeof key_file, "%s/fleet.key", dir);
    int fd = open(key_file, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    uint8_t fleet_key[32];
    memset(fleet_key, 0x21, sizeof fleet_key);
    cr_assert_eq(write(fd, fleet_key, sizeof fleet_key), (ssize_t)sizeof fleet_key);
    close(fd);
    tsrd_fleet *f = fleet_open_at(port, key_file, 5000, 60000);

    tsr_fingerprint key = verdict_fingerprint(0x5e);
    tsr_kcache_meta want = tsr_kcache_meta_of("tier1", "pointwise", "sm_90a"), meta;
    uint8_t *data = NULL;
    size_t len = 0;
    double build_ms = 0;
    tsr_kcache_remote r = tsrd_fleet_remote(f);
    cr_expect_eq(r.fetch(r.ctx, &key, &want, &data, &len, &meta, &build_ms), TSR_NOT_FOUND);
    cr_expect_null(data);
    tsrd_fleet_stats st = fleet_stats(f);
    cr_expect_eq(st.errors, 1);
    cr_expect_eq(st.hits, 0);
    cr_expect(st.degraded);
    tsrd_fleet_close(f);
    /* Ends the accept of a second connection that never comes. */
    shutdown(s.listen_fd, SHUT_RDWR);
    pthread_join(th, NULL);
    for (int i = 0; i < s.conns; i++)
        pthread_join(s.threads[i], NULL);
    close(s.listen_fd);

    char hex[TSR_FINGERPRINT_HEX], lease[160], kernel[160];
    tsr_fingerprint_hex(&key, hex);
    snprintf(kernel, sizeof kernel, "GET tessera:kernel:%s", hex);
    snprintf(lease, sizeof lease, "SET tessera:lease:%s ", hex);
    cr_assert_eq(s.n_log, 4, "commands: %d", s.n_log);
    cr_expect_str_eq(s.log[0], kernel);
    cr_expect_eq(strncmp(s.log[1], lease, strlen(lease)), 0, "%s", s.log[1]);
    cr_expect_str_eq(s.log[2], kernel);
    /* The lease dropped on a second connection, by the script that deletes it
     * only while it holds the value this node set. */
    const char *owner = s.log[1] + strlen(lease);
    size_t owner_len = strcspn(owner, " ");
    char drop[640];
    snprintf(drop, sizeof drop, "1 tessera:lease:%s %.*s", hex, (int)owner_len, owner);
    static const char script[] = "EVAL if redis.call('GET', KEYS[1]) == ARGV[1] then";
    cr_expect_eq(strncmp(s.log[3], script, strlen(script)), 0, "%s", s.log[3]);
    size_t l3 = strlen(s.log[3]), ld = strlen(drop);
    cr_expect(l3 > ld && strcmp(s.log[3] + l3 - ld, drop) == 0, "%s", s.log[3]);
    cr_expect_eq(s.conns, 2);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}
