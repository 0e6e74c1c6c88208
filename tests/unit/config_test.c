/*
 * config_test.c — tesserad's defaults, config file and flags.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

static tsr_status parse(tsrd_config *c, const char *text, tsr_error *err)
{
    cr_assert_eq(tsrd_config_defaults(c, err), TSR_OK);
    return tsrd_config_parse_json(c, text, strlen(text), err);
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
    tsr_error err;
    const char *text = "{\"listen\":[\"tcp://127.0.0.1:5555\",\"ipc:///tmp/x.sock\"],"
                       "\"cache_dir\":\"/tmp/c\",\"backend\":\"cpu\",\"log_level\":\"debug\","
                       "\"max_message_bytes\":1048576,\"workers\":3,"
                       "\"cache_memory_bytes\":1000,\"cache_disk_bytes\":2000}";
    cr_assert_eq(parse(&c, text, &err), TSR_OK, "%s", err.message);
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
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(parse(&c, "{\"cache_dir\":\"/tmp\",\"listne\":[]}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(err.message, "config: unknown key 'listne'");
    tsrd_config_free(&c);
}

Test(config, malformed_and_wrong_types_are_rejected)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(parse(&c, "{\"workers\": 2", &err), TSR_BAD_JSON);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "[1,2]", &err), TSR_BAD_JSON);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"workers\":\"two\"}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(err.message, "workers: must be a number");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"workers\":1.5}", &err), TSR_BAD_ATTRIBUTE);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"backend\":\"opencl\"}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(
        err.message,
        "backend: 'opencl' is not one of auto, cpu, cuda, cuda-inprocess, cpu-isolated");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"backend\":\"cuda-inprocess\"}", &err), TSR_OK, "%s", err.message);
    cr_assert_str_eq(c.backend, "cuda-inprocess");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"backend\":\"cpu-isolated\"}", &err), TSR_OK, "%s", err.message);
    cr_assert_str_eq(c.backend, "cpu-isolated");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"listen\":[\"http://x\"]}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(
        err.message,
        "listen[0]: listen URL 'http://x': must start with ipc://, tcp:// or tls+tcp://");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"max_message_bytes\":100}", &err), TSR_BAD_ATTRIBUTE);
    tsrd_config_free(&c);
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
    tsrd_config c;
    tsrd_config_action action;
    tsr_error err;
    char *unknown[] = {"tesserad", "--frobnicate", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 2, unknown, &action, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(err.message, "unknown option '--frobnicate'");
    tsrd_config_free(&c);
    char *missing[] = {"tesserad", "--cache-dir", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 2, missing, &action, &err), TSR_INVALID_ARGUMENT);
    cr_assert_str_eq(err.message, "--cache-dir: missing value");
    tsrd_config_free(&c);
    char *level[] = {"tesserad", "--log-level", "loud", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 3, level, &action, &err), TSR_INVALID_ARGUMENT);
    tsrd_config_free(&c);
    char *workers[] = {"tesserad", "--workers", "-1", NULL};
    cr_assert_eq(tsrd_config_from_args(&c, 3, workers, &action, &err), TSR_INVALID_ARGUMENT);
    tsrd_config_free(&c);
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
    cr_assert_eq(parse(&c, "{\"max_request_work\":0}", &err), TSR_OK, "%s", err.message);
    cr_assert_eq(c.max_request_work, 0);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"max_request_work\":9007199254740992}", &err), TSR_OK, "%s",
                 err.message);
    cr_assert_eq(c.max_request_work, UINT64_C(1) << 53);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"max_request_work\":-1}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(err.message, "max_request_work: must be an integer in [0, "
                                  "9007199254740992], got -1");
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"max_request_work\":\"1e9\"}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(err.message, "max_request_work: must be a number");
    tsrd_config_free(&c);
}

Test(config, metrics_listen_is_off_by_default_and_takes_http_host_port)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(tsrd_config_defaults(&c, &err), TSR_OK);
    cr_assert_null(c.metrics_listen);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"metrics_listen\":\"http://127.0.0.1:9464\"}", &err), TSR_OK, "%s",
                 err.message);
    cr_assert_str_eq(c.metrics_listen, "http://127.0.0.1:9464");
    tsrd_config copy;
    cr_assert_eq(tsrd_config_copy(&copy, &c, &err), TSR_OK);
    cr_assert_str_eq(copy.metrics_listen, "http://127.0.0.1:9464");
    tsrd_config_free(&copy);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"metrics_listen\":\"http://[::1]:9464/\"}", &err), TSR_OK, "%s",
                 err.message);
    tsrd_config_free(&c);
    static const char *const bad[] = {"tcp://127.0.0.1:9464", "http://127.0.0.1", "http://:9464",
                                      "http://127.0.0.1:9464/metrics", "http://127.0.0.1:70000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "{\"metrics_listen\":\"%s\"}", bad[i]);
        cr_assert_eq(parse(&c, text, &err), TSR_BAD_ATTRIBUTE, "%s", bad[i]);
        char want[160];
        snprintf(want, sizeof want,
                 "metrics_listen: '%s' is not http://HOST:PORT (e.g. http://127.0.0.1:9464)",
                 bad[i]);
        cr_assert_str_eq(err.message, want);
        tsrd_config_free(&c);
    }
    cr_assert_eq(parse(&c, "{\"metrics_listen\":9464}", &err), TSR_BAD_ATTRIBUTE);
    cr_assert_str_eq(err.message, "metrics_listen: must be a string");
    tsrd_config_free(&c);
}

Test(config, kernel_timeout_ms_defaults_to_five_minutes_and_is_bounded)
{
    tsrd_config c;
    tsr_error err;
    cr_assert_eq(parse(&c, "{}", &err), TSR_OK, "%s", err.message);
    cr_assert_eq(c.kernel_timeout_ms, UINT64_C(300000));
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"kernel_timeout_ms\":0}", &err), TSR_OK, "%s", err.message);
    cr_assert_eq(c.kernel_timeout_ms, 0);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"kernel_timeout_ms\":86400001}", &err), TSR_BAD_ATTRIBUTE);
    tsrd_config_free(&c);
    cr_assert_eq(parse(&c, "{\"kernel_timeout_ms\":-1}", &err), TSR_BAD_ATTRIBUTE);
    tsrd_config_free(&c);
}
