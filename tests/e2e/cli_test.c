/*
 * cli_test.c — the tessera-cli binary against a real tesserad.
 *
 * Runs the built binary with posix_spawn, its stdout and stderr captured in files,
 * and checks exit codes (0 ok, 2 usage, 3 unreachable, 4 daemon error, 5 local
 * file error), the error line format and, for `run`, the .npy it writes against
 * the CPU reference bit for bit.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <glob.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tessera/client.h"
#include "tessera/dtype.h"
#include "tessera/npy.h"
#include "../support/fixture.h"
#include "../support/testdata.h"

TestSuite(cli, .init = fixture_suite_start, .fini = fixture_suite_stop, .timeout = 120);

typedef struct cli_result {
    int code;
    char out[16384];
    char err[4096];
} cli_result;

static void cli_slurp(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

/* Runs tessera-cli with the arguments (NULL-terminated); with_url puts
 * "--url <daemon>" first. */
static void cli_exec(cli_result *res, bool with_url, ...)
{
    char bin[320], out_path[128], err_path[128];
    testd_bin(&suite_daemon, "tessera-cli", bin, sizeof bin);
    snprintf(out_path, sizeof out_path, "%s/cli.out", suite_daemon.dir);
    snprintf(err_path, sizeof err_path, "%s/cli.err", suite_daemon.dir);
    char *argv[64];
    int n = 0;
    argv[n++] = bin;
    if (with_url) {
        argv[n++] = "--url";
        argv[n++] = suite_daemon.url;
    }
    va_list ap;
    va_start(ap, with_url);
    for (char *a; (a = va_arg(ap, char *)) != NULL && n < 63;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    extern char **environ;
    cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, argv, environ), 0, "spawn %s", bin);
    posix_spawn_file_actions_destroy(&fa);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "tessera-cli died (status 0x%x)", status);
    res->code = WEXITSTATUS(status);
    cli_slurp(out_path, res->out, sizeof res->out);
    cli_slurp(err_path, res->err, sizeof res->err);
}

static cJSON *cli_json(const cli_result *res)
{
    cJSON *doc = cJSON_Parse(res->out);
    cr_assert_not_null(doc, "stdout is not JSON: %s", res->out);
    return doc;
}

Test(cli, ping_and_info_answer)
{
    cli_result res;
    cli_exec(&res, true, "ping", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_eq(strncmp(res.out, "ok ", 3), 0, "stdout: %s", res.out);
    cli_exec(&res, true, "--json", "info", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "backend")), "cpu");
    cJSON_Delete(doc);
}

Test(cli, compile_prints_the_decision_and_hits_the_cache_the_second_time)
{
    cli_result res;
    cli_exec(&res, true, "compile", "examples/matmul.json", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "candidate"), "%s", res.out);
    cr_expect_not_null(strstr(res.out, "cache      miss"), "%s", res.out);
    cr_expect_not_null(strstr(res.out, "key"), "%s", res.out);
    cli_exec(&res, true, "--json", "compile", "examples/matmul.json", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cJSON *dec = cJSON_GetObjectItem(doc, "decision");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(dec, "cache_hit")));
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(dec, "cache_level")), "memory");
    cr_expect_eq(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "key"))), 64);
    cJSON_Delete(doc);
}

/* Every example through `tessera-cli run` with .npy files; the float32 output
 * equals the reference output widened to float32, bit for bit. */
Test(cli, run_matches_the_reference_for_every_example)
{
    glob_t g;
    cr_assert_eq(glob("examples/*.json", 0, NULL, &g), 0);
    for (size_t e = 0; e < g.gl_pathc; e++) {
        tsr_region *r = fixture_region_file(g.gl_pathv[e]);
        tsr_error err;
        testdata t;
        cr_assert_eq(testdata_make(r, 77 + e, &t), 0);
        char args[TSR_MAX_REGION_INPUTS][192];
        char out_path[128];
        for (int i = 0; i < t.n_inputs; i++) {
            char path[128];
            snprintf(path, sizeof path, "%s/in%d.npy", suite_daemon.dir, i);
            cr_assert_eq(testdata_write_npy_f32(&t, i, path), 0);
            snprintf(args[i], sizeof args[i], "%s=%s", t.in[i].name, path);
        }
        snprintf(out_path, sizeof out_path, "%s/out.npy", suite_daemon.dir);
        unlink(out_path);
        char *a[TSR_MAX_REGION_INPUTS];
        for (int i = 0; i < TSR_MAX_REGION_INPUTS; i++)
            a[i] = i < t.n_inputs ? args[i] : NULL;
        cli_result res;
        /* At most five inputs in the examples; unused slots end the list early. */
        cr_assert_leq(t.n_inputs, 5);
        char *v[12] = {0};
        int k = 0;
        for (int i = 0; i < t.n_inputs; i++) {
            v[k++] = "-i";
            v[k++] = a[i];
        }
        cli_exec(&res, true, "run", g.gl_pathv[e], "-o", out_path, v[0], v[1], v[2], v[3], v[4],
                 v[5], v[6], v[7], v[8], v[9], NULL);
        cr_assert_eq(res.code, 0, "%s: stderr: %s", g.gl_pathv[e], res.err);
        tsr_npy npy;
        cr_assert_eq(tsr_npy_read(out_path, &npy, &err), TSR_OK, "%s", err.message);
        cr_expect_eq(npy.type, TSR_NPY_F32);
        cr_expect_eq(npy.rank, t.out.rank);
        size_t count = (size_t)tsr_tensor_desc_elements(&t.out);
        cr_assert_eq(npy.count, count);
        float *want = malloc(count * sizeof *want + 1);
        tsr_dtype_convert(TSR_F32, want, t.out.dtype, t.want, count);
        cr_expect_eq(memcmp(npy.data, want, count * sizeof *want), 0, "%s: output differs",
                     g.gl_pathv[e]);
        free(want);
        tsr_npy_free(&npy);
        testdata_free(&t);
        tsr_client_region_free(r);
    }
    globfree(&g);
}

Test(cli, run_names_a_missing_or_unknown_input)
{
    char a[128], out[128];
    tsr_region *r = fixture_region_file("examples/matmul.json");
    testdata t;
    cr_assert_eq(testdata_make(r, 1, &t), 0);
    snprintf(a, sizeof a, "%s/a.npy", suite_daemon.dir);
    snprintf(out, sizeof out, "%s/o.npy", suite_daemon.dir);
    cr_assert_eq(testdata_write_npy_f32(&t, 0, a), 0);
    char arg_a[160], arg_x[160];
    snprintf(arg_a, sizeof arg_a, "a=%s", a);
    snprintf(arg_x, sizeof arg_x, "x=%s", a);
    cli_result res;
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-o", out, NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_not_null(strstr(res.err, "missing input 'b'"), "stderr: %s", res.err);
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_x, "-o", out, NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_not_null(strstr(res.err, "unknown input 'x'"), "stderr: %s", res.err);
    testdata_free(&t);
    tsr_client_region_free(r);
}

Test(cli, local_file_errors_exit_5)
{
    char bad[128];
    snprintf(bad, sizeof bad, "%s/bad.json", suite_daemon.dir);
    FILE *f = fopen(bad, "w");
    fputs("{\"kind\": \"matmul\", ", f);
    fclose(f);
    cli_result res;
    cli_exec(&res, true, "compile", bad, NULL);
    cr_expect_eq(res.code, 5);
    cr_expect_eq(strncmp(res.err, "tessera-cli: BAD_JSON: ", 23), 0, "stderr: %s", res.err);

    snprintf(bad, sizeof bad, "%s/zero.json", suite_daemon.dir);
    f = fopen(bad, "w");
    fputs("{\"kind\":\"matmul\",\"dtype\":\"f32\",\"m\":0,\"n\":4,\"k\":4}", f);
    fclose(f);
    cli_exec(&res, true, "compile", bad, NULL);
    cr_expect_eq(res.code, 5);
    cr_expect_eq(strncmp(res.err, "tessera-cli: BAD_DIMENSION: ", 28), 0, "stderr: %s", res.err);

    char out[128];
    snprintf(out, sizeof out, "%s/o.npy", suite_daemon.dir);
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", "a=/nonexistent/a.npy", "-i",
             "b=/nonexistent/b.npy", "-o", out, NULL);
    cr_expect_eq(res.code, 5, "stderr: %s", res.err);
    cr_expect_eq(strncmp(res.err, "tessera-cli: IO_ERROR: ", 23), 0, "stderr: %s", res.err);
}

Test(cli, daemon_errors_exit_4_with_the_status_name)
{
    cli_result res;
    cli_exec(&res, true, "compile", "examples/matmul.json", "--force", "no-such-candidate", NULL);
    cr_expect_eq(res.code, 4);
    cr_expect_eq(strncmp(res.err, "tessera-cli: ARBITER: ", 22), 0, "stderr: %s", res.err);
    cli_exec(&res, true, "cache", "evict",
             "0000000000000000000000000000000000000000000000000000000000000000", NULL);
    cr_expect_eq(res.code, 4);
    cr_expect_eq(strncmp(res.err, "tessera-cli: NOT_FOUND: ", 24), 0, "stderr: %s", res.err);
}

Test(cli, unreachable_daemon_exits_3)
{
    cli_result res;
    cli_exec(&res, false, "--url", "ipc:///tmp/tsr-e2e-nonexistent/sock", "ping", NULL);
    cr_expect_eq(res.code, 3);
    cr_expect_eq(strncmp(res.err, "tessera-cli: UNAVAILABLE: ", 26), 0, "stderr: %s", res.err);
}

Test(cli, usage_errors_exit_2_and_help_exits_0)
{
    static const char *const commands[] = {"ping",    "info", "stats",  "cache",
                                           "compile", "run",  "verify", "candidates"};
    cli_result res;
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        cli_exec(&res, true, commands[i], "--help", NULL);
        cr_expect_eq(res.code, 0, "%s --help", commands[i]);
        cr_expect_eq(strncmp(res.out, "usage: tessera-cli ", 19), 0, "%s", res.out);
    }
    cli_exec(&res, true, "--help", NULL);
    cr_expect_eq(res.code, 0);
    cli_exec(&res, true, "frobnicate", NULL);
    cr_expect_eq(res.code, 2);
    cli_exec(&res, true, "compile", NULL);
    cr_expect_eq(res.code, 2);
    cli_exec(&res, true, "compile", "examples/matmul.json", "--policy", "fastest", NULL);
    cr_expect_eq(res.code, 2);
    cli_exec(&res, true, "--timeout", "soon", "ping", NULL);
    cr_expect_eq(res.code, 2);
    cli_exec(&res, false, NULL);
    cr_expect_eq(res.code, 2);
}

Test(cli, stats_cache_verify_and_candidates_succeed)
{
    cli_result res;
    cli_exec(&res, true, "compile", "examples/gated.json", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cli_exec(&res, true, "--json", "cache", "ls", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cr_expect_geq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "entries")), 1);
    cJSON_Delete(doc);
    cli_exec(&res, true, "stats", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cli_exec(&res, true, "stats", "--prometheus", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "tesserad_"), "%s", res.out);
    cli_exec(&res, true, "--json", "verify", "examples/pointwise.json", "--seed", "9", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    doc = cli_json(&res);
    cr_expect_str_eq(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "verdict"), "state")),
        "pass");
    cJSON_Delete(doc);
    cli_exec(&res, true, "candidates", "examples/attention.json", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "reference"), "%s", res.out);
    cli_exec(&res, true, "cache", "evict", "all", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
}

Test(cli, options_anywhere_and_with_equals_handles_as_hex_and_the_version)
{
    cli_result res;
    char url[160];
    snprintf(url, sizeof url, "--url=%s", suite_daemon.url);
    cli_exec(&res, false, "compile", "examples/matmul.json", url, "--json", "--timeout=5000", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    const char *kernel = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "kernel"));
    cr_assert_not_null(kernel, "the kernel handle is a string: %s", res.out);
    cr_expect_eq(strlen(kernel), 16, "%s", kernel);
    cr_expect_eq(strspn(kernel, "0123456789abcdef"), 16, "%s", kernel);
    cJSON_Delete(doc);

    cli_exec(&res, false, "--version", NULL);
    cr_expect_eq(res.code, 0);
    cr_expect_eq(strncmp(res.out, "tessera-cli 0.1.0 (protocol 1, nng ", 35), 0, "%s", res.out);

    cli_exec(&res, true, "ping", "--timeout", NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_str_eq(res.err, "tessera-cli: INVALID_ARGUMENT: --timeout needs a value\n"
                              "try 'tessera-cli --help'\n");
    cli_exec(&res, true, "--json=yes", "ping", NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_eq(strncmp(res.err, "tessera-cli: INVALID_ARGUMENT: --json takes no value\n", 53), 0,
                 "%s", res.err);
}

Test(cli, verify_of_the_reference_says_it_checked_itself)
{
    cli_result res;
    cli_exec(&res, true, "verify", "examples/pointwise.json", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "note       reference is the reference: it was checked "
                                       "against itself"),
                       "%s", res.out);
}

Test(cli, cache_warm_compiles_every_region_and_evict_takes_a_unique_prefix)
{
    cli_result res;
    cli_exec(&res, true, "cache", "warm", "examples/matmul.json", "examples/gated.json", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "examples/matmul.json: "), "%s", res.out);
    cr_expect_not_null(strstr(res.out, "examples/gated.json: "), "%s", res.out);
    cli_exec(&res, true, "--json", "compile", "examples/gated.json", "examples/missing.json",
             "examples/matmul.json", NULL);
    cr_expect_eq(res.code, 5, "the first failure's exit status: %s", res.err);
    cJSON *doc = cli_json(&res);
    cr_assert(cJSON_IsArray(doc), "%s", res.out);
    cr_assert_eq(cJSON_GetArraySize(doc), 2);
    const char *key = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(doc, 0), "key"));
    cr_assert_not_null(key);
    char prefix[13];
    snprintf(prefix, sizeof prefix, "%.12s", key);
    cr_expect_str_eq(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(doc, 1), "region_file")),
        "examples/matmul.json");
    cJSON_Delete(doc);
    cli_exec(&res, true, "cache", "evict", prefix, NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_str_eq(res.out, "evicted 1\n");
    cli_exec(&res, true, "cache", "evict", prefix, NULL);
    cr_expect_eq(res.code, 4);
    char want[160];
    snprintf(want, sizeof want, "tessera-cli: NOT_FOUND: no cache entry's key starts with '%s'\n",
             prefix);
    cr_expect_str_eq(res.err, want);
}

Test(cli, stats_json_counters_carry_their_labels_as_fields)
{
    cli_result res;
    cli_exec(&res, true, "ping", NULL);
    cli_exec(&res, true, "--json", "stats", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cJSON *counters = cJSON_GetObjectItem(doc, "counters");
    cr_assert(cJSON_IsArray(counters), "%s", res.out);
    bool hello_ok = false, build_info = false;
    cJSON *row;
    cJSON_ArrayForEach(row, counters)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(row, "name"));
        cJSON *labels = cJSON_GetObjectItem(row, "labels");
        cr_assert_not_null(name);
        cr_assert(cJSON_IsObject(labels), "%s has no labels object", name);
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(labels, "type"));
        const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(labels, "status"));
        if (strcmp(name, "requests_total") == 0 && type != NULL && strcmp(type, "hello") == 0 &&
            status != NULL && strcmp(status, "OK") == 0)
            hello_ok = cJSON_GetNumberValue(cJSON_GetObjectItem(row, "value")) >= 1;
        if (strcmp(name, "build_info") == 0)
            build_info =
                strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "backend")), "cpu") == 0;
    }
    cr_expect(hello_ok, "requests_total{type=hello,status=OK} >= 1: %s", res.out);
    cr_expect(build_info, "build_info names the cpu backend: %s", res.out);
    cJSON_Delete(doc);
}

/* Outputs go where a person expects and inputs are read only as far as their
 * header says: a device stays a device, a link stays a link, an endless input
 * is refused at its header. */
Test(cli, run_writes_devices_in_place_keeps_links_and_bounds_inputs)
{
    char a[128], b[128], target[128], link[128];
    tsr_region *r = fixture_region_file("examples/matmul.json");
    testdata t;
    cr_assert_eq(testdata_make(r, 1, &t), 0);
    snprintf(a, sizeof a, "%s/a.npy", suite_daemon.dir);
    snprintf(b, sizeof b, "%s/b.npy", suite_daemon.dir);
    snprintf(target, sizeof target, "%s/target.npy", suite_daemon.dir);
    snprintf(link, sizeof link, "%s/link.npy", suite_daemon.dir);
    cr_assert_eq(testdata_write_npy_f32(&t, 0, a), 0);
    cr_assert_eq(testdata_write_npy_f32(&t, 1, b), 0);
    char arg_a[160], arg_b[160];
    snprintf(arg_a, sizeof arg_a, "a=%s", a);
    snprintf(arg_b, sizeof arg_b, "b=%s", b);
    cli_result res;
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_b, "-o", "/dev/full",
             NULL);
    cr_expect_eq(res.code, 5, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.err, "/dev/full: No space left on device"), "%s", res.err);
    struct stat sb;
    cr_assert_eq(stat("/dev/full", &sb), 0);
    cr_expect(S_ISCHR(sb.st_mode), "/dev/full is still a device");

    FILE *f = fopen(target, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(symlink("target.npy", link), 0);
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_b, "-o", link, NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_assert_eq(lstat(link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode), "the output link stays a link");
    cr_assert_eq(stat(target, &sb), 0);
    /* A 128 × 96 float32 array behind numpy's 128-byte header. */
    cr_expect_eq(sb.st_size, 128 + 128 * 96 * 4, "the link's target holds the output");

    cli_exec(&res, true, "run", "examples/matmul.json", "-i", "a=/dev/zero", "-i", arg_b, "-o",
             target, NULL);
    cr_expect_eq(res.code, 5);
    cr_expect_str_eq(res.err, "tessera-cli: CORRUPT: input a: /dev/zero: npy: bad magic (not a "
                              ".npy file)\n");
    unlink(link);
    testdata_free(&t);
    tsr_client_region_free(r);
}

/* ring: a region launched through a submission ring, timed; its usage errors. */
Test(cli, ring_launches_through_shared_memory_and_checks_its_arguments)
{
    cli_result res;
    cli_exec(&res, true, "--json", "ring", "examples/pointwise.json", "--launches", "50", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "launches")), 50.0);
    cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "candidate")), "reference");
    cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "round_trip_us_p50")), 0.0);
    cJSON_Delete(doc);
    cli_exec(&res, true, "ring", "examples/pointwise.json", "--launches", "0", NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_not_null(strstr(res.err, "--launches wants a number from 1 to 10000000"), "%s",
                       res.err);
    cli_exec(&res, true, "ring", NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_not_null(strstr(res.err, "missing REGION.json"), "%s", res.err);
    /* No ring, buffer or kernel outlives the command. */
    cli_exec(&res, true, "--json", "stats", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    doc = cli_json(&res);
    const cJSON *row, *rows = cJSON_GetObjectItem(doc, "counters");
    double rings = -1;
    cJSON_ArrayForEach(row, rows)
    {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(row, "name")), "rings") == 0)
            rings = cJSON_GetNumberValue(cJSON_GetObjectItem(row, "value"));
    }
    cr_expect_eq(rings, 0.0, "%s", res.out);
    cJSON_Delete(doc);
}

Test(cli, run_on_a_device_and_info_with_the_devices_load)
{
    tsr_region *r = fixture_region_file("examples/matmul.json");
    testdata t;
    cr_assert_eq(testdata_make(r, 5, &t), 0);
    char a[128], b[128], out[128], arg_a[160], arg_b[160];
    snprintf(a, sizeof a, "%s/a.npy", suite_daemon.dir);
    snprintf(b, sizeof b, "%s/b.npy", suite_daemon.dir);
    snprintf(out, sizeof out, "%s/o.npy", suite_daemon.dir);
    cr_assert_eq(testdata_write_npy_f32(&t, 0, a), 0);
    cr_assert_eq(testdata_write_npy_f32(&t, 1, b), 0);
    snprintf(arg_a, sizeof arg_a, "a=%s", a);
    snprintf(arg_b, sizeof arg_b, "b=%s", b);
    cli_result res;
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_b, "-o", out,
             "--device", "0", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "device     0\n"), "stdout: %s", res.out);
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_b, "-o", out,
             "--device=1", NULL);
    cr_expect_eq(res.code, 4, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.err, "NOT_FOUND"), "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.err, "run.device: no device 1 (this node has 1)"), "stderr: %s",
                       res.err);
    cli_exec(&res, true, "run", "examples/matmul.json", "-i", arg_a, "-i", arg_b, "-o", out,
             "--device", "first", NULL);
    cr_expect_eq(res.code, 2);
    cr_expect_not_null(strstr(res.err, "--device wants a device index, not 'first'"), "stderr: %s",
                       res.err);
    cli_exec(&res, true, "info", NULL);
    cr_expect_eq(res.code, 0, "stderr: %s", res.err);
    cr_expect_not_null(strstr(res.out, "device 0   "), "stdout: %s", res.out);
    cr_expect_not_null(strstr(res.out, " buffers, "), "stdout: %s", res.out);
    cli_exec(&res, true, "--json", "info", NULL);
    cr_assert_eq(res.code, 0, "stderr: %s", res.err);
    cJSON *doc = cli_json(&res);
    cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "devices"), 0);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(dev, "queue_depth")), 0);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(dev, "memory_used_bytes")));
    cJSON_Delete(doc);
    testdata_free(&t);
    tsr_client_region_free(r);
}
