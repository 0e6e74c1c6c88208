/*
 * tenant_test.c — tenants in the config file, token hashing, attribution and
 * reload, on a bare daemon struct (no backend, no sockets).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "config.h"
#include "daemon.h"
#include "serve/session.h"
#include "serve/tenant.h"
#include "../support/unit_daemon.h"

/* sha256("alice") */
#define TENANT_ALICE_HASH "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90"

Test(tenant, token_hash_is_sha256_hex_without_the_newline)
{
    char hex[65];
    tsrd_token_hash("alice\n", 6, hex);
    cr_expect_str_eq(hex, TENANT_ALICE_HASH);
    tsrd_token_hash("alice", 5, hex);
    cr_expect_str_eq(hex, TENANT_ALICE_HASH);
}

Test(tenant, config_reads_identities_and_quotas)
{
    tsrd_config c;
    tsr_error err;
    const char *text = "{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
                       "\"], \"uids\": [1000, 1001], \"gids\": [50], \"quotas\": "
                       "{\"device_memory_bytes\": 1024, \"buffers\": 2, \"in_flight\": 3, "
                       "\"compiles\": 4}}], \"ipc_mode\": \"0600\", \"allow_plain_tcp\": true}";
    cr_assert_eq(unit_config_parse(&c, text, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(c.n_tenants, 1);
    cr_expect_str_eq(c.tenants[0].name, "a");
    cr_expect_eq(c.tenants[0].n_tokens, 1);
    cr_expect_str_eq(c.tenants[0].token_sha256[0], TENANT_ALICE_HASH);
    cr_expect_eq(c.tenants[0].n_uids, 2);
    cr_expect_eq(c.tenants[0].uids[1], 1001);
    cr_expect_eq(c.tenants[0].gids[0], 50);
    cr_expect_eq(c.tenants[0].quota.device_memory_bytes, 1024);
    cr_expect_eq(c.tenants[0].quota.buffers, 2);
    cr_expect_eq(c.tenants[0].quota.in_flight, 3);
    cr_expect_eq(c.tenants[0].quota.compiles, 4);
    cr_expect_eq(c.ipc_mode, 0600);
    cr_expect(c.allow_plain_tcp);
    tsrd_config copy;
    cr_assert_eq(tsrd_config_copy(&copy, &c, &err), TSR_OK);
    cr_expect_eq(copy.n_tenants, 1);
    cr_expect_str_eq(copy.tenants[0].name, "a");
    tsrd_config_free(&copy);
    tsrd_config_free(&c);
}

Test(tenant, config_errors_name_the_tenant_and_key)
{
    static const unit_config_refusal cases[] = {
        {"{\"tenants\": [{\"name\": \"a\"}]}",
         "tenants[0]: tenant 'a' has no identity (token_sha256, uids or gids)"},
        {"{\"tenants\": [{\"uids\": [1]}]}", "tenants[0]: name: missing"},
        {"{\"tenants\": [{\"name\": \"a\", \"uids\": [1]}, {\"name\": \"a\", \"uids\": [2]}]}",
         "tenants[1]: name 'a' appears twice"},
        {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"abc\"]}]}",
         "tenants[0]: token_sha256: each entry must be 64 hex digits (tesserad --hash-token "
         "prints one)"},
        {"{\"tenants\": [{\"name\": \"a\", \"uids\": [1], \"quotas\": {\"gpus\": 1}}]}",
         "tenants[0]: quotas: unknown key 'gpus'"},
        {"{\"tenants\": [{\"name\": \"a\", \"uids\": [1], \"colour\": 1}]}",
         "tenants[0]: unknown key 'colour'"},
        {"{\"tls\": {\"cert_file\": \"/x.pem\"}}", "tls: cert_file and key_file go together"},
        {"{\"tls\": {\"verify_clients\": true}}", "tls: verify_clients needs ca_file"},
        {"{\"ipc_mode\": \"0066\"}",
         "ipc_mode: '0066' is not an octal file mode that lets the owner read and write"},
    };
    unit_config_expect_refused(cases, sizeof cases / sizeof cases[0]);
}

Test(tenant, shm_uid_is_read_and_checked)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(
        unit_config_parse(&c,
                          "{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
                          "\"], \"shm_uid\": 1000}, {\"name\": \"b\", \"uids\": [7]}]}",
                          &err),
        TSR_OK, "%s", err.message);
    cr_expect(c.tenants[0].has_shm_uid);
    cr_expect_eq(c.tenants[0].shm_uid, 1000);
    cr_expect_not(c.tenants[1].has_shm_uid, "no grant unless given");
    tsrd_config_free(&c);
    static const unit_config_refusal cases[] = {
        {"{\"tenants\": [{\"name\": \"a\", \"uids\": [1], \"shm_uid\": 1}]}",
         "tenants[0]: shm_uid: tenant 'a' has no token_sha256, and only a token identifies a "
         "tenant on a connection without peer credentials"},
        {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
         "\"], \"shm_uid\": -1}]}",
         "tenants[0]: shm_uid: must be an integer in [0, 4294967294], got -1"},
        {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
         "\"], \"shm_uid\": 4294967295}]}",
         "tenants[0]: shm_uid: must be an integer in [0, 4294967294], got 4.29497e+09"},
        {"{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
         "\"], \"shm_uid\": \"root\"}]}",
         "tenants[0]: shm_uid: must be a number"},
    };
    unit_config_expect_refused(cases, sizeof cases / sizeof cases[0]);
}

static void tenant_daemon(tsrd_daemon *d, tsrd_config *c, const char *text)
{
    tsr_error err;
    memset(d, 0, sizeof *d);
    snprintf(d->default_tenant.name, sizeof d->default_tenant.name, "default");
    cr_assert_eq(unit_config_parse(c, text, &err), TSR_OK, "%s", err.message);
    cr_assert_eq(tsrd_tenants_apply(d, c, &err), TSR_OK);
}

static const char tenant_two[] =
    "{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH "\"]},"
    " {\"name\": \"b\", \"uids\": [1000], \"gids\": [77]}]}";

Test(tenant, attribution_by_token_then_peer)
{
    tsrd_daemon d;
    tsrd_config c;
    tenant_daemon(&d, &c, tenant_two);
    tsr_error err;
    tsrd_tenant *t = NULL;
    tsrd_session s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0};
    cr_expect_eq(tsrd_tenant_attribute(&d, &s1, "alice", &t, &err), TSR_OK);
    cr_expect_str_eq(t->name, "a");
    cr_expect_eq(s1.tenant, t);
    /* The same connection cannot switch tenants. */
    tsrd_session_set_peer(&s1, 1000, 1000);
    cr_expect_eq(tsrd_tenant_attribute(&d, &s1, "", &t, &err), TSR_UNAUTHENTICATED);
    cr_expect_str_eq(err.message, "this connection belongs to another tenant; open a new one");
    tsrd_session_set_peer(&s2, 1000, 5);
    cr_expect_eq(tsrd_tenant_attribute(&d, &s2, "", &t, &err), TSR_OK);
    cr_expect_str_eq(t->name, "b");
    tsrd_session_set_peer(&s3, 4242, 77);
    cr_expect_eq(tsrd_tenant_attribute(&d, &s3, NULL, &t, &err), TSR_OK);
    cr_expect_str_eq(t->name, "b");
    /* No peer credentials (tcp) and no token. */
    cr_expect_eq(tsrd_tenant_attribute(&d, &s4, "", &t, &err), TSR_UNAUTHENTICATED);
    cr_expect_null(t);
    /* A wrong token is refused even where the peer would match. */
    tsrd_session s5 = {0};
    tsrd_session_set_peer(&s5, 1000, 77);
    cr_expect_eq(tsrd_tenant_attribute(&d, &s5, "mallory", &t, &err), TSR_UNAUTHENTICATED);
    cr_expect_str_eq(err.message, "auth: the token is not recognised");
    tsrd_tenants_fini(&d);
    tsrd_config_free(&c);
}

Test(tenant, without_tenants_everything_is_default)
{
    tsrd_daemon d;
    tsrd_config c;
    tenant_daemon(&d, &c, "{}");
    tsr_error err;
    tsrd_tenant *t = NULL;
    tsrd_session s = {0};
    cr_expect_eq(tsrd_tenant_attribute(&d, &s, "anything", &t, &err), TSR_OK);
    cr_expect_eq(t, &d.default_tenant);
    tsrd_config_free(&c);
}

Test(tenant, reload_keeps_tenants_by_name_and_retires_the_rest)
{
    tsrd_daemon d;
    tsrd_config c;
    tenant_daemon(&d, &c, tenant_two);
    tsr_error err;
    tsrd_tenant *a = NULL, *t = NULL;
    tsrd_session s = {0};
    cr_assert_eq(tsrd_tenant_attribute(&d, &s, "alice", &a, &err), TSR_OK);
    a->buffers = 3;
    tsrd_config next;
    cr_assert_eq(
        unit_config_parse(&next,
                          "{\"tenants\": [{\"name\": \"a\", \"token_sha256\": [\"" TENANT_ALICE_HASH
                          "\"], \"quotas\": {\"buffers\": 9}}]}",
                          &err),
        TSR_OK);
    cr_assert_eq(tsrd_tenants_apply(&d, &next, &err), TSR_OK);
    tsrd_session s2 = {0};
    cr_expect_eq(tsrd_tenant_attribute(&d, &s2, "alice", &t, &err), TSR_OK);
    cr_expect_eq(t, a, "the same tenant object, updated in place");
    cr_expect_eq(t->buffers, 3);
    cr_expect_eq(t->conf.quota.buffers, 9);
    tsrd_session s3 = {0};
    tsrd_session_set_peer(&s3, 1000, 77);
    cr_expect_eq(tsrd_tenant_attribute(&d, &s3, "", &t, &err), TSR_UNAUTHENTICATED);
    tsrd_tenants_fini(&d);
    tsrd_config_free(&next);
    tsrd_config_free(&c);
}
