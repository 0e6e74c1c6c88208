/*
 * config_test.c — tesserad's defaults, config file and flags.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "../support/unit_daemon.h"

/* Parses text over the defaults: status st and, where message is not NULL,
 * that error message. */
static void expect_parse(const char *text, tsr_status st, const char *message)
{
    tsrd_config c;
    tsr_error err = {0};
    cr_assert_eq(unit_config_parse(&c, text, &err), st, "%s: %s", text, err.message);
    if (message != NULL)
        cr_assert_str_eq(err.message, message);
    tsrd_config_free(&c);
}

/* Parses text over the defaults into *c, asserted TSR_OK; free *c with
 * tsrd_config_free. */
static void parse_ok(tsrd_config *c, const char *text)
{
    tsr_error err = {0};
    cr_assert_eq(unit_config_parse(c, text, &err), TSR_OK, "%s: %s", text, err.message);
}

/* tsrd_config_from_args on argv (NULL-terminated): status st and, where
 * message is not NULL, that error message. */
static void expect_args(char **argv, tsr_status st, const char *message)
{
    int argc = 0;
    while (argv[argc] != NULL)
        argc++;
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err = {0};
    cr_assert_eq(tsrd_config_from_args(&c, argc, argv, &action, &err), st, "%s: %s", argv[1],
                 err.message);
    if (message != NULL)
        cr_assert_str_eq(err.message, message);
    tsrd_config_free(&c);
}

Test(config, defaults_match_the_documented_values)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(c.n_listen, 1);
    cr_assert_str_eq(c.listen[0], "ipc:///run/tesserad/tesserad.sock");
    cr_assert_str_eq(c.cache_dir, "/var/cache/tesserad");
    cr_assert_str_eq(c.backend, "auto");
    cr_assert_eq(c.log_level, TSRD_LOG_INFO);
    cr_assert_eq(c.max_message_bytes, 64u << 20);
    cr_assert_eq(c.workers, 0);
    tsrd_config_free(&c);
}

Test(config, file_sets_every_key)
{
    tsrd_config c;
    const char *text = "{\"listen\":[\"tcp://127.0.0.1:5555\",\"ipc:///tmp/x.sock\"],"
                       "\"cache_dir\":\"/tmp/c\",\"backend\":\"cpu\",\"log_level\":\"debug\","
                       "\"max_message_bytes\":1048576,\"workers\":3,"
                       "\"cache_memory_bytes\":1000,\"cache_disk_bytes\":2000}";
    parse_ok(&c, text);
    cr_assert_eq(c.n_listen, 2);
    cr_assert_str_eq(c.listen[0], "tcp://127.0.0.1:5555");
    cr_assert_str_eq(c.listen[1], "ipc:///tmp/x.sock");
    cr_assert_str_eq(c.cache_dir, "/tmp/c");
    cr_assert_str_eq(c.backend, "cpu");
    cr_assert_eq(c.log_level, TSRD_LOG_DEBUG);
    cr_assert_eq(c.max_message_bytes, 1048576);
    cr_assert_eq(c.workers, 3);
    cr_assert_eq(c.cache_memory_bytes, 1000);
    cr_assert_eq(c.cache_disk_bytes, 2000);
    tsrd_config_free(&c);
}

Test(config, unknown_key_is_named)
{
    expect_parse("{\"cache_dir\":\"/tmp\",\"listne\":[]}", TSR_BAD_ATTRIBUTE,
                 "config: unknown key 'listne'");
}

Test(config, malformed_and_wrong_types_are_rejected)
{
    expect_parse("{\"workers\": 2", TSR_BAD_JSON, NULL);
    expect_parse("[1,2]", TSR_BAD_JSON, NULL);
    expect_parse("{\"workers\":\"two\"}", TSR_BAD_ATTRIBUTE, "workers: must be a number");
    expect_parse("{\"workers\":1.5}", TSR_BAD_ATTRIBUTE, NULL);
    expect_parse("{\"backend\":\"opencl\"}", TSR_BAD_ATTRIBUTE,
                 "backend: 'opencl' is not one of auto, cpu, cuda, cuda-inprocess, cpu-isolated");
    tsrd_config c;
    parse_ok(&c, "{\"backend\":\"cuda-inprocess\"}");
    cr_assert_str_eq(c.backend, "cuda-inprocess");
    tsrd_config_free(&c);
    parse_ok(&c, "{\"backend\":\"cpu-isolated\"}");
    cr_assert_str_eq(c.backend, "cpu-isolated");
    tsrd_config_free(&c);
    expect_parse("{\"listen\":[\"http://x\"]}", TSR_BAD_ATTRIBUTE,
                 "listen[0]: listen URL 'http://x': must start with ipc://, tcp:// or tls+tcp://");
    expect_parse("{\"max_message_bytes\":100}", TSR_BAD_ATTRIBUTE, NULL);
}

Test(config, missing_file_is_an_io_error)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(tsrd_config_load_file(&c, "/nonexistent/tesserad.json", &err), TSR_IO_ERROR);
    cr_assert(strstr(err.message, "/nonexistent/tesserad.json") != NULL);
    tsrd_config_free(&c);
}

Test(config, flags_override_the_file)
{
    char path[] = "/tmp/tesserad-config-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *text = "{\"listen\":[\"tcp://127.0.0.1:1\"],\"workers\":7,\"log_level\":\"warn\"}";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *argv[] = {"tesserad", "--workers",    "2",        "--config",     path,
                    "--listen", "ipc:///tmp/a", "--listen", "ipc:///tmp/b", NULL};
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err;
    cr_assert_eq(tsrd_config_from_args(&c, 9, argv, &action, &err), TSR_OK, "%s", err.message);
    unlink(path);
    cr_assert_eq(action, TSRD_CONFIG_SERVE);
    cr_assert_eq(c.workers, 2);
    cr_assert_eq(c.log_level, TSRD_LOG_WARN);
    cr_assert_eq(c.n_listen, 2);
    cr_assert_str_eq(c.listen[0], "ipc:///tmp/a");
    cr_assert_str_eq(c.listen[1], "ipc:///tmp/b");
    tsrd_config_free(&c);
}

Test(config, bad_flags_are_rejected)
{
    char *unknown[] = {"tesserad", "--frobnicate", NULL};
    expect_args(unknown, TSR_INVALID_ARGUMENT, "unknown option '--frobnicate'");
    char *missing[] = {"tesserad", "--cache-dir", NULL};
    expect_args(missing, TSR_INVALID_ARGUMENT, "--cache-dir: missing value");
    char *level[] = {"tesserad", "--log-level", "loud", NULL};
    expect_args(level, TSR_INVALID_ARGUMENT, NULL);
    char *workers[] = {"tesserad", "--workers", "-1", NULL};
    expect_args(workers, TSR_INVALID_ARGUMENT, NULL);
}

Test(config, help_and_version_are_actions)
{
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err;
    char *help[] = {"tesserad", "--help", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 2, help, &action, &err), TSR_OK);
    cr_assert_eq(action, TSRD_CONFIG_HELP);
    tsrd_config_free(&c);
    char *version[] = {"tesserad", "--version", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 2, version, &action, &err), TSR_OK);
    cr_assert_eq(action, TSRD_CONFIG_VERSION);
    tsrd_config_free(&c);
}

Test(config, max_request_work_defaults_to_the_documented_bound_and_0_turns_it_off)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(c.max_request_work, UINT64_C(40000000000));
    tsrd_config_free(&c);
    parse_ok(&c, "{\"max_request_work\":0}");
    cr_assert_eq(c.max_request_work, 0);
    tsrd_config_free(&c);
    parse_ok(&c, "{\"max_request_work\":9007199254740992}");
    cr_assert_eq(c.max_request_work, UINT64_C(1) << 53);
    tsrd_config_free(&c);
    expect_parse("{\"max_request_work\":-1}", TSR_BAD_ATTRIBUTE,
                 "max_request_work: must be an integer in [0, 9007199254740992], got -1");
    expect_parse("{\"max_request_work\":\"1e9\"}", TSR_BAD_ATTRIBUTE,
                 "max_request_work: must be a number");
}

Test(config, oracle_memo_bytes_defaults_to_512_mib_and_0_keeps_nothing)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(c.oracle_memo_bytes, UINT64_C(512) << 20);
    tsrd_config_free(&c);
    parse_ok(&c, "{\"oracle_memo_bytes\":0}");
    cr_assert_eq(c.oracle_memo_bytes, 0);
    tsrd_config_free(&c);
    expect_parse("{\"oracle_memo_bytes\":-5}", TSR_BAD_ATTRIBUTE,
                 "oracle_memo_bytes: must be an integer in [0, 1099511627776], got -5");
}

Test(config, metrics_listen_is_off_by_default_and_takes_http_host_port)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_null(c.metrics_listen);
    tsrd_config_free(&c);
    parse_ok(&c, "{\"metrics_listen\":\"http://127.0.0.1:9464\"}");
    cr_assert_str_eq(c.metrics_listen, "http://127.0.0.1:9464");
    tsrd_config copy;
    cr_assert_eq(tsrd_config_copy(&copy, &c, &err), TSR_OK);
    cr_assert_str_eq(copy.metrics_listen, "http://127.0.0.1:9464");
    tsrd_config_free(&copy);
    tsrd_config_free(&c);
    expect_parse("{\"metrics_listen\":\"http://[::1]:9464/\"}", TSR_OK, NULL);
    static const char *const bad[] = {"tcp://127.0.0.1:9464", "http://127.0.0.1", "http://:9464",
                                      "http://127.0.0.1:9464/metrics", "http://127.0.0.1:70000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"metrics_listen\":\"%s\"}", bad[i]);
        char want[160];
        snprintf(want, sizeof want,
                 "metrics_listen: '%s' is not http://HOST:PORT (e.g. http://127.0.0.1:9464)",
                 bad[i]);
        expect_parse(text, TSR_BAD_ATTRIBUTE, want);
    }
    expect_parse("{\"metrics_listen\":9464}", TSR_BAD_ATTRIBUTE,
                 "metrics_listen: must be a string");
}

Test(config, kernel_timeout_ms_defaults_to_five_minutes_and_is_bounded)
{
    tsrd_config c;
    parse_ok(&c, "{}");
    cr_assert_eq(c.kernel_timeout_ms, UINT64_C(300000));
    tsrd_config_free(&c);
    parse_ok(&c, "{\"kernel_timeout_ms\":0}");
    cr_assert_eq(c.kernel_timeout_ms, 0);
    tsrd_config_free(&c);
    expect_parse("{\"kernel_timeout_ms\":86400001}", TSR_BAD_ATTRIBUTE, NULL);
    expect_parse("{\"kernel_timeout_ms\":-1}", TSR_BAD_ATTRIBUTE, NULL);
}

Test(config, cache_key_file_and_a_tenants_admin_flag)
{
    tsrd_config c;
    parse_ok(&c, "{}");
    cr_expect_null(c.cache_key_file, "the key lives in cache_dir by default");
    tsrd_config_free(&c);
    parse_ok(&c, "{\"cache_key_file\":\"/etc/tesserad/cache.key\","
                 "\"tenants\":[{\"name\":\"ops\",\"uids\":[0],\"admin\":true},"
                 "{\"name\":\"lab\",\"gids\":[7]}]}");
    cr_expect_str_eq(c.cache_key_file, "/etc/tesserad/cache.key");
    cr_assert_eq(c.n_tenants, 2);
    cr_expect(c.tenants[0].admin);
    cr_expect_not(c.tenants[1].admin, "admin is off unless given");
    tsrd_config copy;
    tsr_error err;
    cr_assert_eq(tsrd_config_copy(&copy, &c, &err), TSR_OK, "%s", err.message);
    cr_expect_str_eq(copy.cache_key_file, "/etc/tesserad/cache.key");
    cr_expect(copy.tenants[0].admin);
    tsrd_config_free(&copy);
    tsrd_config_free(&c);
    expect_parse("{\"tenants\":[{\"name\":\"ops\",\"uids\":[0],\"admin\":1}]}", TSR_BAD_ATTRIBUTE,
                 "tenants[0]: admin: must be true or false");
    expect_parse("{\"cache_key_file\":7}", TSR_BAD_ATTRIBUTE, NULL);
}

Test(config, a_tenants_replay_bytes_quota)
{
    tsrd_config c;
    parse_ok(&c, "{\"tenants\":[{\"name\":\"a\",\"uids\":[1],"
                 "\"quotas\":{\"replay_bytes\":6291456,\"in_flight\":3}},"
                 "{\"name\":\"b\",\"uids\":[2]}]}");
    cr_assert_eq(c.n_tenants, 2);
    cr_expect_eq(c.tenants[0].quota.replay_bytes, UINT64_C(6291456));
    cr_expect_eq(c.tenants[0].quota.in_flight, 3);
    cr_expect_eq(c.tenants[1].quota.replay_bytes, 0, "absent: the daemon-wide budget applies");
    tsrd_config_free(&c);
    expect_parse("{\"tenants\":[{\"name\":\"a\",\"uids\":[1],"
                 "\"quotas\":{\"replay_bytes\":-1}}]}",
                 TSR_BAD_ATTRIBUTE, NULL);
}

Test(config, the_shipped_configs_validate_and_the_default_declares_no_tenants)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(tsrd_config_load_file(&c, "deploy/tesserad.json", &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(c.n_tenants, 0, "the installed config serves local users as one tenant");
    tsrd_config_free(&c);
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_eq(tsrd_config_load_file(&c, "deploy/tesserad.example.json", &err), TSR_OK, "%s",
                 err.message);
    cr_expect_eq(c.n_tenants, 3);
    cr_expect(c.tenants[2].admin, "the example shows an admin tenant");
    tsrd_config_free(&c);
}

Test(config, flags_take_equals_values_and_allow_plain_tcp_is_a_switch)
{
    char *argv[] = {"tesserad",
                    "--log-level=debug",
                    "--listen=tcp://127.0.0.1:7390",
                    "--allow-plain-tcp",
                    "--workers",
                    "3",
                    NULL};
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err = {0};
    cr_assert_eq(tsrd_config_from_args(&c, 6, argv, &action, &err), TSR_OK, "%s", err.message);
    cr_expect_eq(action, TSRD_CONFIG_SERVE);
    cr_expect_eq(c.log_level, TSRD_LOG_DEBUG);
    cr_expect(c.allow_plain_tcp);
    cr_expect_eq(c.workers, 3);
    cr_assert_eq(c.n_listen, 1);
    cr_expect_str_eq(c.listen[0], "tcp://127.0.0.1:7390");
    tsrd_config_free(&c);
    char *bad[] = {"tesserad", "--log-level=loud", NULL};
    expect_args(bad, TSR_INVALID_ARGUMENT,
                "--log-level: 'loud' is not one of error, warn, info, debug");
}

Test(config, fleet_cache_is_off_by_default_and_takes_its_keys)
{
    tsrd_config c;
    parse_ok(&c, "{}");
    cr_expect_null(c.fleet.url);
    cr_expect_eq(c.fleet.ttl_s, 604800);
    cr_expect_eq(c.fleet.max_entry_bytes, UINT64_C(64) << 20);
    cr_expect_eq(c.fleet.timeout_ms, 100);
    cr_expect_eq(c.fleet.lease_ms, 10000);
    tsrd_config_free(&c);
    parse_ok(&c, "{\"fleet_cache\": {\"url\": \"rediss://redis.internal:6380/2\", \"key_file\": "
                 "\"/etc/tesserad/fleet.key\", \"tls_ca_file\": \"/etc/ssl/ca.pem\", \"prefix\": "
                 "\"gpu-a:\", \"ttl_s\": 3600, \"max_entry_bytes\": 1048576, \"timeout_ms\": 25, "
                 "\"lease_ms\": 2000}}");
    cr_expect_str_eq(c.fleet.url, "rediss://redis.internal:6380/2");
    cr_expect_str_eq(c.fleet.key_file, "/etc/tesserad/fleet.key");
    cr_expect_str_eq(c.fleet.tls_ca_file, "/etc/ssl/ca.pem");
    cr_expect_str_eq(c.fleet.prefix, "gpu-a:");
    cr_expect_eq(c.fleet.ttl_s, 3600);
    cr_expect_eq(c.fleet.max_entry_bytes, 1048576);
    cr_expect_eq(c.fleet.timeout_ms, 25);
    cr_expect_eq(c.fleet.lease_ms, 2000);
    tsrd_config copy;
    cr_assert_eq(tsrd_config_copy(&copy, &c, NULL), TSR_OK);
    cr_expect_str_eq(copy.fleet.key_file, "/etc/tesserad/fleet.key");
    cr_expect_neq(copy.fleet.url, c.fleet.url);
    tsrd_config_free(&copy);
    tsrd_config_free(&c);
}

Test(config, fleet_cache_refuses_what_it_cannot_use_naming_the_key)
{
    expect_parse("{\"fleet_cache\": {\"url\": \"redis://r:6379\"}}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: url and key_file go together");
    expect_parse("{\"fleet_cache\": {\"url\": \"http://r:6379\", \"key_file\": \"/k\"}}",
                 TSR_BAD_ATTRIBUTE,
                 "fleet_cache: url 'http://r:6379' must start with redis:// or rediss://");
    expect_parse("{\"fleet_cache\": {\"url\": \"http://u:s3cret@r:6379\", \"key_file\": \"/k\"}}",
                 TSR_BAD_ATTRIBUTE,
                 "fleet_cache: url 'http://***@r:6379' must start with redis:// or rediss://");
    expect_parse("{\"fleet_cache\": {\"timeout_ms\": 0}}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: timeout_ms: must be an integer in [1, 60000], got 0");
    expect_parse("{\"fleet_cache\": {\"lease_ms\": 600001}}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: lease_ms: must be an integer in [10, 600000], got 600001");
    expect_parse("{\"fleet_cache\": {\"ttl\": 5}}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: unknown key 'ttl'");
    expect_parse("{\"fleet_cache\": {\"key_file\": \"\"}}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: key_file: must not be empty");
    expect_parse("{\"fleet_cache\": \"redis://r\"}", TSR_BAD_ATTRIBUTE,
                 "fleet_cache: must be an object");
}
