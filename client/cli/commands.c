/*
 * commands.c — the commands of tessera-cli, one function each.
 *
 * Each command parses its own arguments (usage errors exit 2 before anything is
 * sent), loads local files (failures exit 5), then makes its client call and
 * prints the result. Regions are parsed and validated locally first, so a broken
 * region file is reported without a daemon round trip. The steps after parsing
 * are one skeleton (cmd_with_region, cmd_with_daemon): a command brings only its
 * call and its printing, as a cmd_call.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <time.h>

#include "cli.h"
#include "tessera/dtype.h"
#include "tessera/latch.h"
#include "tessera/npy.h"
#include "tessera/region.h"

/* ---- printing and parsing ---- */

static const char *cmd_verdict_state(tsr_client_verdict_state s)
{
    switch (s) {
    case TSR_CLIENT_VERDICT_PASS:
        return "pass";
    case TSR_CLIENT_VERDICT_FAIL:
        return "fail";
    default:
        return "not run";
    }
}

static void cmd_verdict_text(const tsr_client_verdict *v, char *buf, size_t size)
{
    if (v->state == TSR_CLIENT_VERDICT_NOT_RUN) {
        snprintf(buf, size, "not run");
        return;
    }
    char sampled[96] = "";
    if (strcmp(v->method, "sampled") == 0)
        snprintf(sampled, sizeof sampled,
                 ", %" PRIu64 " sampled at the real shape, %d probes at a small shape",
                 v->sampled_elements, v->small_probes);
    snprintf(buf, size, "%s%s rel %.3g (bound %.3g, %" PRIu64 " elements, %d probes%s%s)%s%s",
             v->state == TSR_CLIENT_VERDICT_PASS ? "PASS" : "FAIL", sampled[0] ? " sampled" : "",
             v->rel_error, v->bound, v->elements, v->probes, sampled, v->cached ? ", cached" : "",
             v->reason[0] ? ": " : "", v->reason);
}

static cJSON *cmd_verdict_json(const tsr_client_verdict *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "state", cmd_verdict_state(v->state));
    cJSON_AddNumberToObject(o, "elements", (double)v->elements);
    cJSON_AddNumberToObject(o, "probes", v->probes);
    cJSON_AddNumberToObject(o, "max_abs_error", v->max_abs_error);
    cJSON_AddNumberToObject(o, "rel_error", v->rel_error);
    cJSON_AddNumberToObject(o, "bound", v->bound);
    cJSON_AddNumberToObject(o, "nan_mismatches", (double)v->nan_mismatches);
    cJSON_AddNumberToObject(o, "inf_mismatches", (double)v->inf_mismatches);
    cJSON_AddNumberToObject(o, "first_bad_index", (double)v->first_bad_index);
    cJSON_AddNumberToObject(o, "first_bad_probe", v->first_bad_probe);
    cJSON_AddStringToObject(o, "reason", v->reason);
    cJSON_AddBoolToObject(o, "cached", v->cached);
    cJSON_AddStringToObject(o, "method", v->method);
    cJSON_AddNumberToObject(o, "sampled_elements", (double)v->sampled_elements);
    cJSON_AddNumberToObject(o, "small_probes", v->small_probes);
    return o;
}

static cJSON *cmd_decision_json(const tsr_client_decision *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "candidate", d->candidate);
    cJSON_AddNumberToObject(o, "tier", d->tier);
    cJSON_AddNumberToObject(o, "version", d->version);
    cJSON_AddStringToObject(o, "reason", d->reason);
    cJSON_AddItemToObject(o, "verdict", cmd_verdict_json(&d->verdict));
    cJSON_AddBoolToObject(o, "cache_hit", d->cache_hit);
    cJSON_AddStringToObject(o, "cache_level", d->cache_level);
    /* Whether a verdict was reached for this decision (fresh or cached). */
    cJSON_AddBoolToObject(o, "verified", d->verdict.state != TSR_CLIENT_VERDICT_NOT_RUN);
    cJSON_AddBoolToObject(o, "verify_skipped", d->verify_skipped);
    return o;
}

static void cmd_decision_print(const tsr_client_decision *d)
{
    char verdict[512];
    cmd_verdict_text(&d->verdict, verdict, sizeof verdict);
    printf("candidate  %s (tier %d, version %u)\n", d->candidate, d->tier, d->version);
    printf("reason     %s\n", d->reason);
    if (d->verify_skipped)
        printf("verdict    skipped: not verified (--no-verify)\n");
    else
        printf("verdict    %s\n", verdict);
    if (d->cache_hit)
        printf("cache      hit (%s)\n", d->cache_level[0] ? d->cache_level : "?");
    else
        printf("cache      miss\n");
}

static cJSON *cmd_shape_json(int rank, const int64_t *shape)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < rank; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[i]));
    return a;
}

static void cmd_shape_text(int rank, const int64_t *shape, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, rank == 1 ? ",)" : ")");
}

static int cmd_region_load(const char *path, tsr_region **out)
{
    tsr_error err;
    if (tsr_client_region_load_file(path, out, &err) != TSR_OK)
        return cli_fail_file(&err);
    return CLI_EXIT_OK;
}

static bool cmd_parse_policy(const char *s, tsr_client_policy *out)
{
    if (strcmp(s, "tier") == 0)
        *out = TSR_CLIENT_POLICY_TIER;
    else if (strcmp(s, "measure") == 0)
        *out = TSR_CLIENT_POLICY_MEASURE;
    else
        return false;
    return true;
}

static double cmd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Takes the value of option argv[*i] ("--force NAME"), or fails with usage. */
static const char *cmd_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* ---- the command skeleton ---- */

/* What differs between commands once the daemon is reached: the client call on
 * c->client and the printing of its result. r is the region the command names
 * (NULL for one that names none), args the command's own. Returns the exit code. */
typedef int (*cmd_call)(cli *c, const tsr_region *r, void *args);

/* A line on a terminal's stderr while a call takes more than a second (a
 * verification of a large region, a cold compile), so long work is not silent. */
typedef struct cmd_progress {
    tsr_latch done;
    bool shown;
} cmd_progress;

static void *cmd_progress_main(void *arg)
{
    cmd_progress *p = arg;
    struct timespec until;
    tsr_latch_deadline(&until, 1000);
    for (int seconds = 1; !tsr_latch_wait_until(&p->done, &until); seconds++, until.tv_sec++) {
        fprintf(stderr, "\r  waiting for tesserad: %d s\033[K", seconds);
        p->shown = true;
    }
    if (p->shown)
        fprintf(stderr, "\r\033[K");
    return NULL;
}

/* Connects (a failure is reported with its exit code), then runs call, with a
 * progress line on a terminal when it runs long. */
static int cmd_with_daemon(cli *c, cmd_call call, const tsr_region *r, void *args)
{
    int rc = cli_connect(c);
    if (rc)
        return rc;
    cmd_progress p = {.shown = false};
    pthread_t thread;
    bool latch = !c->json && isatty(STDERR_FILENO) && tsr_latch_init(&p.done, NULL) == TSR_OK;
    bool progress = latch && pthread_create(&thread, NULL, cmd_progress_main, &p) == 0;
    rc = call(c, r, args);
    if (progress) {
        tsr_latch_set(&p.done);
        pthread_join(thread, NULL);
    }
    if (latch)
        tsr_latch_destroy(&p.done);
    return rc;
}

/* Loads the region at path first, so an invalid one exits 5 before anything is
 * sent; then as cmd_with_daemon; then frees the region. */
static int cmd_with_region(cli *c, const char *path, cmd_call call, void *args)
{
    tsr_region *r;
    int rc = cmd_region_load(path, &r);
    if (rc)
        return rc;
    rc = cmd_with_daemon(c, call, r, args);
    tsr_client_region_free(r);
    return rc;
}

/* A command that takes no arguments; argv[0] is its name. */
static int cmd_without_args(cli *c, int argc, char **argv, cmd_call call)
{
    if (argc > 1)
        return cli_fail_usage(argv[0], "unexpected argument '%s'", argv[1]);
    return cmd_with_daemon(c, call, NULL, NULL);
}

/* ---- health, ping, info ---- */

static int cmd_health_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    (void)args;
    tsr_client_health h;
    tsr_error err;
    if (tsr_client_health_get(c->client, &h, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    static const char *const names[] = {"unknown", "ready", "recovering", "draining"};
    static const char *const dev_names[] = {"unknown", "serving", "recovering", "lost"};
    const char *state = names[h.state];
    tsr_client_device_health devs[TSR_CLIENT_MAX_DEVICES];
    int n_devs = 0;
    if (tsr_client_health_devices(c->client, devs, TSR_CLIENT_MAX_DEVICES, &n_devs, c->timeout_ms,
                                  &err) != TSR_OK)
        return cli_fail_call(&err);
    if (n_devs > TSR_CLIENT_MAX_DEVICES)
        n_devs = TSR_CLIENT_MAX_DEVICES;
    if (c->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "state", state);
        cJSON_AddNumberToObject(doc, "uptime_ms", (double)h.uptime_ms);
        cJSON_AddNumberToObject(doc, "sessions", h.sessions);
        cJSON_AddNumberToObject(doc, "recoveries", (double)h.recoveries);
        cJSON *arr = cJSON_AddArrayToObject(doc, "devices");
        for (int i = 0; arr != NULL && i < n_devs; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", devs[i].index);
            cJSON_AddStringToObject(o, "state", dev_names[devs[i].state]);
            cJSON_AddNumberToObject(o, "recoveries", (double)devs[i].recoveries);
            cJSON_AddNumberToObject(o, "faults", (double)devs[i].faults);
            cJSON_AddItemToArray(arr, o);
        }
        cli_json_print(doc);
    } else {
        printf("%s (up %.1f s, %u sessions, %llu recoveries)\n", state, h.uptime_ms / 1000.0,
               h.sessions, (unsigned long long)h.recoveries);
        /* Only the devices that do not serve: one device's fault leaves the
         * daemon ready. */
        for (int i = 0; i < n_devs; i++)
            if (devs[i].state != TSR_CLIENT_DEVICE_SERVING)
                printf("device %d: %s\n", devs[i].index, dev_names[devs[i].state]);
    }
    /* Probes read the exit status: only a ready daemon is healthy. */
    return h.state == TSR_CLIENT_HEALTH_READY ? CLI_EXIT_OK : CLI_EXIT_DAEMON;
}

static int cmd_health(cli *c, int argc, char **argv)
{
    return cmd_without_args(c, argc, argv, cmd_health_call);
}

static int cmd_ping_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    (void)args;
    tsr_client_info info;
    tsr_error err;
    double t0 = cmd_now_ms();
    if (tsr_client_hello(c->client, &info, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    double ms = cmd_now_ms() - t0;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", 1);
        cJSON_AddStringToObject(o, "url", tsr_client_url(c->client));
        cJSON_AddStringToObject(o, "daemon_version", info.daemon_version);
        cJSON_AddStringToObject(o, "backend", info.backend);
        cJSON_AddNumberToObject(o, "ms", ms);
        cli_json_print(o);
    } else {
        printf("ok %s: tesserad %s, %s backend, %.3f ms\n", tsr_client_url(c->client),
               info.daemon_version, info.backend, ms);
    }
    return CLI_EXIT_OK;
}

static int cmd_ping(cli *c, int argc, char **argv)
{
    return cmd_without_args(c, argc, argv, cmd_ping_call);
}

static int cmd_info_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    (void)args;
    tsr_client_info info;
    tsr_client_device_load load[TSR_CLIENT_MAX_DEVICES];
    int n_load = 0;
    tsr_error err;
    if (tsr_client_hello(c->client, &info, c->timeout_ms, &err) != TSR_OK ||
        tsr_client_devices(c->client, load, TSR_CLIENT_MAX_DEVICES, &n_load, c->timeout_ms, &err) !=
            TSR_OK)
        return cli_fail_call(&err);
    if (n_load > TSR_CLIENT_MAX_DEVICES)
        n_load = TSR_CLIENT_MAX_DEVICES;
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "url", tsr_client_url(c->client));
        cJSON_AddStringToObject(o, "daemon_version", info.daemon_version);
        cJSON_AddNumberToObject(o, "protocol_version", info.protocol_version);
        cJSON_AddStringToObject(o, "backend", info.backend);
        cJSON_AddStringToObject(o, "driver_version", info.driver_version);
        cJSON_AddStringToObject(o, "compiler_version", info.compiler_version);
        cJSON_AddStringToObject(o, "nng_version", info.nng_version);
        cJSON_AddStringToObject(o, "tenant", info.tenant);
        cJSON_AddNumberToObject(o, "max_message_bytes", (double)info.max_message_bytes);
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        for (int i = 0; i < n_load; i++) {
            const tsr_client_device_load *d = &load[i];
            cJSON *jd = cJSON_CreateObject();
            cJSON_AddNumberToObject(jd, "index", d->index);
            cJSON_AddStringToObject(jd, "name", d->name);
            cJSON_AddStringToObject(jd, "arch", d->arch);
            cJSON_AddNumberToObject(jd, "memory_bytes", (double)d->memory_bytes);
            cJSON_AddNumberToObject(jd, "multiprocessors", d->multiprocessors);
            cJSON_AddNumberToObject(jd, "memory_used_bytes", (double)d->memory_used_bytes);
            cJSON_AddNumberToObject(jd, "buffers", d->buffers);
            cJSON_AddNumberToObject(jd, "queue_depth", d->queue_depth);
            cJSON_AddItemToArray(devs, jd);
        }
        cli_json_print(o);
        return CLI_EXIT_OK;
    }
    printf("url        %s\n", tsr_client_url(c->client));
    printf("daemon     %s (protocol %u)\n", info.daemon_version, info.protocol_version);
    printf("backend    %s\n", info.backend);
    printf("driver     %s\n", info.driver_version[0] ? info.driver_version : "-");
    printf("compiler   %s\n", info.compiler_version[0] ? info.compiler_version : "-");
    printf("nng        %s\n", info.nng_version[0] ? info.nng_version : "-");
    printf("tenant     %s\n", info.tenant[0] ? info.tenant : "-");
    printf("max msg    %" PRIu64 " bytes\n", info.max_message_bytes);
    for (int i = 0; i < n_load; i++) {
        const tsr_client_device_load *d = &load[i];
        printf("device %d   %s, %s, %" PRIu64 " MiB, %d %s; %u buffers, %" PRIu64
               " bytes in use, %u queued\n",
               d->index, d->name, d->arch, d->memory_bytes >> 20, d->multiprocessors,
               strcmp(d->arch, "cpu") == 0 ? "CPUs" : "SMs", d->buffers, d->memory_used_bytes,
               d->queue_depth);
    }
    return CLI_EXIT_OK;
}

static int cmd_info(cli *c, int argc, char **argv)
{
    return cmd_without_args(c, argc, argv, cmd_info_call);
}

/* ---- stats, cache ---- */

/* One counter as {"name", "labels", "value"}: the daemon's row name
 * 'family{label="value",...}' taken apart, so that scripts need no parsing. */
static cJSON *cmd_counter_json(const char *row, double value)
{
    cJSON *o = cJSON_CreateObject();
    const char *brace = strchr(row, '{');
    size_t family = brace != NULL ? (size_t)(brace - row) : strlen(row);
    char name[TSR_CLIENT_NAME_MAX];
    snprintf(name, sizeof name, "%.*s", (int)family, row);
    cJSON_AddStringToObject(o, "name", name);
    cJSON *labels = cJSON_AddObjectToObject(o, "labels");
    const char *p = brace != NULL ? brace + 1 : NULL;
    while (p != NULL && *p != '\0' && *p != '}') {
        const char *eq = strchr(p, '=');
        if (eq == NULL || eq[1] != '"')
            break;
        char key[64], val[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        size_t n = 0;
        const char *q = eq + 2;
        for (; *q != '\0' && *q != '"' && n + 1 < sizeof val; q++) {
            if (*q == '\\' && q[1] != '\0')
                q++; /* the exposition format escapes backslash, quote and newline */
            val[n++] = *q == 'n' && q[-1] == '\\' ? '\n' : *q;
        }
        val[n] = '\0';
        cJSON_AddStringToObject(labels, key, val);
        p = *q == '"' ? q + 1 : q;
        if (*p == ',')
            p++;
    }
    cJSON_AddNumberToObject(o, "value", value);
    return o;
}

static int cmd_stats_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    bool prometheus = *(const bool *)args;
    tsr_client_stats *s;
    tsr_error err;
    if (tsr_client_stats_get(c->client, prometheus, &s, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *counters = cJSON_AddArrayToObject(o, "counters");
        for (size_t i = 0; i < s->n_counters; i++)
            cJSON_AddItemToArray(counters,
                                 cmd_counter_json(s->counters[i].name, s->counters[i].value));
        cJSON *cands = cJSON_AddArrayToObject(o, "candidates");
        for (size_t i = 0; i < s->n_candidates; i++) {
            const tsr_client_candidate_stats *cs = &s->candidates[i];
            cJSON *jc = cJSON_CreateObject();
            cJSON_AddStringToObject(jc, "kind", cs->kind);
            cJSON_AddStringToObject(jc, "name", cs->name);
            cJSON_AddNumberToObject(jc, "won", (double)cs->won);
            cJSON_AddNumberToObject(jc, "forced", (double)cs->forced);
            cJSON_AddNumberToObject(jc, "declined", (double)cs->declined);
            cJSON_AddNumberToObject(jc, "failed_verification", (double)cs->failed_verification);
            cJSON_AddNumberToObject(jc, "unverified", (double)cs->unverified);
            cJSON_AddItemToArray(cands, jc);
        }
        if (prometheus)
            cJSON_AddStringToObject(o, "prometheus", s->prometheus_text);
        cli_json_print(o);
    } else if (prometheus) {
        fputs(s->prometheus_text, stdout);
    } else {
        for (size_t i = 0; i < s->n_counters; i++)
            printf("%-40s %.17g\n", s->counters[i].name, s->counters[i].value);
        if (s->n_candidates)
            printf("\n%-10s %-24s %8s %8s %8s %8s %10s\n", "kind", "candidate", "won", "forced",
                   "declined", "failed", "unverified");
        for (size_t i = 0; i < s->n_candidates; i++) {
            const tsr_client_candidate_stats *cs = &s->candidates[i];
            printf("%-10s %-24s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10" PRIu64
                   "\n",
                   cs->kind, cs->name, cs->won, cs->forced, cs->declined, cs->failed_verification,
                   cs->unverified);
        }
    }
    tsr_client_stats_free(s);
    return CLI_EXIT_OK;
}

static int cmd_stats(cli *c, int argc, char **argv)
{
    bool prometheus = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--prometheus") == 0)
            prometheus = true;
        else
            return cli_fail_usage("stats", "unexpected argument '%s'", argv[i]);
    }
    return cmd_with_daemon(c, cmd_stats_call, NULL, &prometheus);
}

static int cmd_cache_ls_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    (void)args;
    tsr_client_cache_row *rows;
    size_t n;
    tsr_error err;
    if (tsr_client_cache_list_rows(c->client, &rows, &n, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->json) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
            const tsr_client_cache_entry *e = &rows[i].entry;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "key", e->key);
            cJSON_AddStringToObject(o, "candidate", e->candidate);
            cJSON_AddStringToObject(o, "kind", e->kind);
            cJSON_AddStringToObject(o, "arch", e->arch);
            cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
            cJSON_AddBoolToObject(o, "in_memory", e->in_memory);
            cJSON_AddBoolToObject(o, "on_disk", e->on_disk);
            cJSON_AddStringToObject(o, "origin", rows[i].origin);
            cJSON_AddNumberToObject(o, "last_used_unix_ms", (double)e->last_used_unix_ms);
            cJSON_AddNumberToObject(o, "hits", (double)e->hits);
            cJSON_AddItemToArray(a, o);
        }
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemToObject(doc, "entries", a);
        cli_json_print(doc);
    } else {
        printf("%-64s  %-20s %-10s %-8s %10s %-9s %-8s %6s\n", "key", "candidate", "kind", "arch",
               "bytes", "where", "origin", "hits");
        for (size_t i = 0; i < n; i++) {
            const tsr_client_cache_entry *e = &rows[i].entry;
            const char *where = e->in_memory && e->on_disk ? "mem+disk"
                                : e->in_memory             ? "mem"
                                                           : "disk";
            /* "-": a daemon or a tenant's listing that does not say. */
            printf("%-64s  %-20s %-10s %-8s %10" PRIu64 " %-9s %-8s %6" PRIu64 "\n", e->key,
                   e->candidate, e->kind, e->arch, e->bytes, where,
                   rows[i].origin[0] != '\0' ? rows[i].origin : "-", e->hits);
        }
    }
    tsr_client_cache_rows_free(rows);
    return CLI_EXIT_OK;
}

/* The full key of the one cache entry whose key starts with prefix (any case),
 * into key; a usage error when several do, NOT_FOUND when none does. */
static int cmd_cache_resolve(cli *c, const char *prefix, char *key, size_t size)
{
    tsr_client_cache_entry *rows = NULL;
    size_t n = 0, found = 0;
    tsr_error err;
    if (tsr_client_cache_list(c->client, &rows, &n, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    char names[3 * 18 + 8] = "";
    for (size_t i = 0; i < n; i++) {
        if (strncasecmp(rows[i].key, prefix, strlen(prefix)) != 0)
            continue;
        if (found++ == 0)
            snprintf(key, size, "%s", rows[i].key);
        if (found <= 3)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%.16s",
                     found > 1 ? ", " : "", rows[i].key);
    }
    tsr_client_cache_free(rows);
    if (found == 1)
        return CLI_EXIT_OK;
    if (found > 1)
        return cli_fail_usage("cache", "'%s' starts %zu keys (%s%s): give more digits", prefix,
                              found, names, found > 3 ? ", ..." : "");
    tsr_error none;
    tsr_error_set(&none, TSR_NOT_FOUND, "no cache entry's key starts with '%s'", prefix);
    return cli_fail_call(&none);
}

/* args: the key (or a prefix of it) to evict, or "all". */
static int cmd_cache_evict_call(cli *c, const tsr_region *r, void *args)
{
    (void)r;
    const char *given = args;
    char key[TSR_CLIENT_KEY_MAX];
    snprintf(key, sizeof key, "%s", given);
    if (strcmp(given, "all") != 0 && strlen(given) < 64) {
        int rc = cmd_cache_resolve(c, given, key, sizeof key);
        if (rc)
            return rc;
    }
    uint32_t evicted = 0;
    tsr_error err;
    if (tsr_client_cache_evict(c->client, key, &evicted, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "evicted", evicted);
        cli_json_print(o);
    } else {
        printf("evicted %u\n", evicted);
    }
    return CLI_EXIT_OK;
}

static int cmd_compile(cli *c, int argc, char **argv);

static int cmd_cache(cli *c, int argc, char **argv)
{
    if (argc < 2)
        return cli_fail_usage("cache", "missing 'ls', 'evict KEY' or 'warm REGION.json...'");
    bool ls = strcmp(argv[1], "ls") == 0;
    bool evict = strcmp(argv[1], "evict") == 0;
    /* warm is compile with one short line per region: the kernels land in the
     * cache (memory and disk) and nothing else is kept. */
    if (strcmp(argv[1], "warm") == 0) {
        c->brief = true;
        return cmd_compile(c, argc - 1, argv + 1);
    }
    if (!ls && !evict)
        return cli_fail_usage("cache", "unknown subcommand '%s'", argv[1]);
    if (ls && argc != 2)
        return cli_fail_usage("cache", "unexpected argument '%s'", argv[2]);
    if (evict && (argc != 3 || argv[2][0] == '\0'))
        return cli_fail_usage("cache", "evict takes exactly one KEY, a prefix of one, or 'all'");
    if (ls)
        return cmd_with_daemon(c, cmd_cache_ls_call, NULL, NULL);
    return cmd_with_daemon(c, cmd_cache_evict_call, NULL, argv[2]);
}

/* ---- compile ---- */

static int cmd_compile_call(cli *c, const tsr_region *r, void *args)
{
    const tsr_client_compile_opts *opts = args;
    tsr_client_compiled out;
    tsr_error err;
    if (tsr_client_compile(c->client, r, opts, &out, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->brief && !c->json) {
        char how[96];
        if (out.decision.cache_hit)
            snprintf(how, sizeof how, "cached (%s)", out.decision.cache_level);
        else
            snprintf(how, sizeof how, "compiled in %.1f ms", out.compile_ms);
        printf("%s: %s, %s\n", c->region_path, out.decision.candidate, how);
        return CLI_EXIT_OK;
    }
    if (c->json) {
        if (c->json_array && c->json_count++ > 0)
            printf(",");
        cJSON *o = cJSON_CreateObject();
        if (c->region_path != NULL)
            cJSON_AddStringToObject(o, "region_file", c->region_path);
        /* A 64-bit handle as text: a JSON number (a double) would lose digits. */
        char kernel[20];
        snprintf(kernel, sizeof kernel, "%016" PRIx64, out.kernel);
        cJSON_AddStringToObject(o, "kernel", kernel);
        cJSON_AddStringToObject(o, "key", out.key);
        cJSON_AddStringToObject(o, "fingerprint", out.fingerprint);
        cJSON_AddItemToObject(o, "decision", cmd_decision_json(&out.decision));
        cJSON_AddNumberToObject(o, "binary_bytes", (double)out.binary_bytes);
        cJSON_AddNumberToObject(o, "compile_ms", out.compile_ms);
        cli_json_print(o);
        return CLI_EXIT_OK;
    }
    cmd_decision_print(&out.decision);
    printf("key        %s\n", out.key);
    printf("region     %s\n", out.fingerprint);
    printf("kernel     %016" PRIx64 "\n", out.kernel);
    printf("binary     %" PRIu64 " bytes, compiled in %.3f ms\n", out.binary_bytes, out.compile_ms);
    return CLI_EXIT_OK;
}

static int cmd_compile(cli *c, int argc, char **argv)
{
    const char *paths[256];
    int n_paths = 0;
    tsr_client_compile_opts opts = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--arch") == 0 || strcmp(a, "--force") == 0 || strcmp(a, "--policy") == 0) {
            const char *v = cmd_value(argc, argv, &i);
            if (!v)
                return cli_fail_usage("compile", "%s needs a value", a);
            if (a[2] == 'a')
                opts.arch = v;
            else if (a[2] == 'f')
                opts.force = v;
            else if (!cmd_parse_policy(v, &opts.policy))
                return cli_fail_usage("compile", "--policy is tier or measure, not '%s'", v);
        } else if (strcmp(a, "--no-verify") == 0) {
            opts.skip_verify = true;
        } else if (a[0] == '-') {
            return cli_fail_usage("compile", "unexpected argument '%s'", a);
        } else if (n_paths == (int)(sizeof paths / sizeof paths[0])) {
            return cli_fail_usage("compile", "at most %zu regions at once",
                                  sizeof paths / sizeof paths[0]);
        } else {
            paths[n_paths++] = a;
        }
    }
    if (n_paths == 0)
        return cli_fail_usage("compile", "missing REGION.json");
    if (n_paths == 1 && !c->brief)
        return cmd_with_region(c, paths[0], cmd_compile_call, &opts);
    /* Several regions (or cache warm): each in turn, a progress line on a
     * terminal, JSON as one array; the exit code is the first failure's. */
    bool progress = !c->json && isatty(STDERR_FILENO);
    int worst = CLI_EXIT_OK;
    c->json_array = c->json;
    c->json_count = 0;
    if (c->json)
        printf("[");
    for (int i = 0; i < n_paths; i++) {
        if (progress)
            fprintf(stderr, "\r[%d/%d] %s\033[K", i + 1, n_paths, paths[i]);
        c->region_path = paths[i];
        if (!c->brief && !c->json)
            printf("%s%s\n", i ? "\n" : "", paths[i]);
        fflush(stdout);
        int rc = cmd_with_region(c, paths[i], cmd_compile_call, &opts);
        if (rc && worst == CLI_EXIT_OK)
            worst = rc;
    }
    if (progress)
        fprintf(stderr, "\r\033[K");
    if (c->json)
        printf("]\n");
    c->region_path = NULL;
    c->json_array = false;
    return worst;
}

/* ---- run ---- */

typedef struct cmd_run_input {
    const char *name;
    const char *path;
} cmd_run_input;

/* Loads each -i file into the dense tensor of its signature slot. */
static int cmd_run_load(const tsr_tensor_desc *sig, int n, const cmd_run_input *given, int n_given,
                        void **data)
{
    for (int s = 0; s < n; s++) {
        const cmd_run_input *in = NULL;
        for (int g = 0; g < n_given; g++)
            if (strcmp(given[g].name, sig[s].name) == 0)
                in = &given[g];
        tsr_npy npy;
        memset(&npy, 0, sizeof npy);
        tsr_error err;
        /* tsr_npy_read names the file itself; the conversion does not. */
        if (tsr_npy_read(in->path, &npy, &err) != TSR_OK) {
            tsr_error_prefix(&err, "input %s", in->name);
            return cli_fail_file(&err);
        }
        if (tsr_npy_to_tensor(&npy, &sig[s], &data[s], &err) != TSR_OK) {
            tsr_npy_free(&npy);
            tsr_error_prefix(&err, "input %s: %s", in->name, in->path);
            return cli_fail_file(&err);
        }
        tsr_npy_free(&npy);
    }
    return CLI_EXIT_OK;
}

/* Checks the -i names against the signature: each given once, each known. */
static int cmd_run_check_names(const tsr_tensor_desc *sig, int n, const cmd_run_input *given,
                               int n_given)
{
    for (int g = 0; g < n_given; g++) {
        bool known = false;
        for (int s = 0; s < n; s++)
            known |= strcmp(given[g].name, sig[s].name) == 0;
        if (!known) {
            char names[TSR_MAX_REGION_INPUTS * (TSR_MAX_NAME + 2)] = "";
            size_t used = 0;
            for (int s = 0; s < n; s++) {
                size_t len = strlen(sig[s].name);
                if (used + len + 3 > sizeof names)
                    break;
                if (s) {
                    memcpy(names + used, ", ", 2);
                    used += 2;
                }
                memcpy(names + used, sig[s].name, len + 1);
                used += len;
            }
            return cli_fail_usage("run", "unknown input '%s' (the region reads: %s)", given[g].name,
                                  names);
        }
        for (int h = 0; h < g; h++)
            if (strcmp(given[g].name, given[h].name) == 0)
                return cli_fail_usage("run", "input '%s' given twice", given[g].name);
    }
    for (int s = 0; s < n; s++) {
        bool found = false;
        for (int g = 0; g < n_given; g++)
            found |= strcmp(given[g].name, sig[s].name) == 0;
        if (!found)
            return cli_fail_usage("run", "missing input '%s': give -i %s=FILE.npy", sig[s].name,
                                  sig[s].name);
    }
    return CLI_EXIT_OK;
}

/* What a run sends and where its output goes. */
typedef struct cmd_run_job {
    const tsr_client_compile_opts *opts;
    int device; /* -1: placed by the daemon */
    const tsr_tensor_desc *out_desc;
    void **data;          /* the inputs, in signature order */
    const char *out_path; /* the .npy written */
    void *out;            /* the output as the region stores it */
    float *f32;           /* the same as float32, for the file */
} cmd_run_job;

static int cmd_run_call(cli *c, const tsr_region *r, void *args)
{
    const cmd_run_job *job = args;
    const tsr_tensor_desc *out_desc = job->out_desc;
    const char *out_path = job->out_path;
    const float *f32 = job->f32;
    int64_t count = tsr_tensor_desc_elements(out_desc);
    tsr_client_decision d;
    tsr_error err;
    int ran_on = 0;
    if (tsr_client_run_on(c->client, r, job->opts, job->device, (const void *const *)job->data,
                          job->out, &d, &ran_on, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    tsr_dtype_convert(TSR_F32, job->f32, out_desc->dtype, job->out, (size_t)count);
    if (tsr_npy_write(out_path, TSR_NPY_F32, out_desc->rank, out_desc->shape, f32, &err) !=
        TSR_OK) {
        tsr_error_prefix(&err, "%s", out_path);
        return cli_fail_file(&err);
    }
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "output", out_path);
        cJSON_AddItemToObject(o, "shape", cmd_shape_json(out_desc->rank, out_desc->shape));
        cJSON_AddStringToObject(o, "dtype", "f32");
        cJSON_AddStringToObject(o, "region_out_dtype", tsr_dtype_name(out_desc->dtype));
        cJSON_AddItemToObject(o, "decision", cmd_decision_json(&d));
        cJSON_AddNumberToObject(o, "device", ran_on);
        cli_json_print(o);
        return CLI_EXIT_OK;
    }
    double sum = 0, lo = count ? f32[0] : 0, hi = count ? f32[0] : 0;
    for (int64_t i = 0; i < count; i++) {
        sum += f32[i];
        lo = f32[i] < lo ? f32[i] : lo;
        hi = f32[i] > hi ? f32[i] : hi;
    }
    char shape[256];
    cmd_shape_text(out_desc->rank, out_desc->shape, shape, sizeof shape);
    cmd_decision_print(&d);
    printf("output     %s: %s float32 (region %s), min %.6g max %.6g mean %.6g\n", out_path, shape,
           tsr_dtype_name(out_desc->dtype), lo, hi, count ? sum / (double)count : 0);
    printf("device     %d\n", ran_on);
    return CLI_EXIT_OK;
}

/* Allocates the output before connecting, so running out of memory is a local
 * failure (exit 5), then runs on the daemon. */
static int cmd_run_execute(cli *c, const tsr_region *r, const tsr_client_compile_opts *opts,
                           int device, const tsr_tensor_desc *out_desc, void **data,
                           const char *out_path)
{
    int64_t count = tsr_tensor_desc_elements(out_desc);
    cmd_run_job job = {opts,
                       device,
                       out_desc,
                       data,
                       out_path,
                       malloc(tsr_tensor_desc_bytes(out_desc) + 1),
                       malloc((size_t)count * sizeof(float) + 1)};
    int rc;
    if (!job.out || !job.f32) {
        tsr_error err;
        tsr_error_set(&err, TSR_NO_MEMORY, "output of %" PRId64 " elements", count);
        rc = cli_fail_file(&err);
    } else {
        rc = cmd_with_daemon(c, cmd_run_call, r, &job);
    }
    free(job.out);
    free(job.f32);
    return rc;
}

static int cmd_run(cli *c, int argc, char **argv)
{
    const char *path = NULL, *out_path = NULL;
    tsr_client_compile_opts opts = {0};
    cmd_run_input given[TSR_MAX_REGION_INPUTS];
    int n_given = 0, device = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-i") == 0 || strcmp(a, "-o") == 0 || strcmp(a, "--force") == 0 ||
            strcmp(a, "--policy") == 0 || strcmp(a, "--device") == 0) {
            const char *v = cmd_value(argc, argv, &i);
            if (!v)
                return cli_fail_usage("run", "%s needs a value", a);
            char *end = NULL;
            if (strcmp(a, "--device") == 0) {
                long dev = strtol(v, &end, 10);
                if (end == v || *end != '\0' || dev < 0 || dev > 1023)
                    return cli_fail_usage("run", "--device wants a device index, not '%s'", v);
                device = (int)dev;
            } else if (strcmp(a, "-o") == 0) {
                out_path = v;
            } else if (strcmp(a, "--force") == 0) {
                opts.force = v;
            } else if (strcmp(a, "--policy") == 0) {
                if (!cmd_parse_policy(v, &opts.policy))
                    return cli_fail_usage("run", "--policy is tier or measure, not '%s'", v);
            } else {
                const char *eq = strchr(v, '=');
                if (!eq || eq == v || eq[1] == '\0')
                    return cli_fail_usage("run", "-i wants NAME=FILE.npy, not '%s'", v);
                if (n_given == TSR_MAX_REGION_INPUTS)
                    return cli_fail_usage("run", "more than %d inputs", TSR_MAX_REGION_INPUTS);
                /* Split in place: argv strings are ours to modify. */
                argv[i][eq - v] = '\0';
                given[n_given++] = (cmd_run_input){v, eq + 1};
            }
        } else if (a[0] == '-' || path) {
            return cli_fail_usage("run", "unexpected argument '%s'", a);
        } else {
            path = a;
        }
    }
    if (!path)
        return cli_fail_usage("run", "missing REGION.json");
    if (!out_path)
        return cli_fail_usage("run", "missing -o OUT.npy");
    tsr_region *r;
    int rc = cmd_region_load(path, &r);
    if (rc)
        return rc;
    tsr_tensor_desc sig[TSR_MAX_REGION_INPUTS], out_desc;
    int n = tsr_region_signature(r, sig, &out_desc);
    void *data[TSR_MAX_REGION_INPUTS] = {0};
    rc = cmd_run_check_names(sig, n, given, n_given);
    if (rc == CLI_EXIT_OK)
        rc = cmd_run_load(sig, n, given, n_given, data);
    if (rc == CLI_EXIT_OK)
        rc = cmd_run_execute(c, r, &opts, device, &out_desc, data, out_path);
    for (int i = 0; i < n; i++)
        free(data[i]);
    tsr_client_region_free(r);
    return rc;
}

/* ---- verify, candidates ---- */

static int cmd_verify_call(cli *c, const tsr_region *r, void *args)
{
    const tsr_client_verify_opts *opts = args;
    tsr_client_verified out;
    tsr_error err;
    if (tsr_client_verify(c->client, r, opts, &out, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "candidate", out.candidate);
        cJSON_AddNumberToObject(o, "tier", out.tier);
        cJSON_AddItemToObject(o, "verdict", cmd_verdict_json(&out.verdict));
        cJSON_AddBoolToObject(o, "checked_against_itself", out.tier == 0);
        cli_json_print(o);
    } else {
        char verdict[512];
        cmd_verdict_text(&out.verdict, verdict, sizeof verdict);
        printf("candidate  %s (tier %d)\n", out.candidate, out.tier);
        printf("verdict    %s\n", verdict);
        /* Tier 0 is the reference itself: its verdict compares it with itself. */
        if (out.tier == 0)
            printf("note       %s is the reference: it was checked against itself, so this "
                   "verdict says nothing about another kernel\n",
                   out.candidate);
    }
    if (out.verdict.state == TSR_CLIENT_VERDICT_FAIL) {
        fprintf(stderr, "tessera-cli: %s: %s fails verification: %s\n",
                tsr_status_name(TSR_VERIFY_FAILED), out.candidate, out.verdict.reason);
        return CLI_EXIT_DAEMON;
    }
    return CLI_EXIT_OK;
}

static int cmd_verify(cli *c, int argc, char **argv)
{
    const char *path = NULL;
    tsr_client_verify_opts opts = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--candidate") == 0 || strcmp(a, "--seed") == 0) {
            const char *v = cmd_value(argc, argv, &i);
            if (!v)
                return cli_fail_usage("verify", "%s needs a value", a);
            if (a[2] == 'c') {
                opts.candidate = v;
            } else {
                char *end;
                opts.seed = strtoull(v, &end, 10);
                if (*v == '\0' || *end != '\0' || *v == '-')
                    return cli_fail_usage("verify", "--seed wants a number, not '%s'", v);
            }
        } else if (a[0] == '-' || path) {
            return cli_fail_usage("verify", "unexpected argument '%s'", a);
        } else {
            path = a;
        }
    }
    if (!path)
        return cli_fail_usage("verify", "missing REGION.json");
    return cmd_with_region(c, path, cmd_verify_call, &opts);
}

static int cmd_candidates_call(cli *c, const tsr_region *r, void *args)
{
    (void)args;
    tsr_client_candidate *rows;
    size_t n;
    tsr_error err;
    if (tsr_client_candidates(c->client, r, NULL, &rows, &n, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    if (c->json) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", rows[i].name);
            cJSON_AddNumberToObject(o, "tier", rows[i].tier);
            cJSON_AddNumberToObject(o, "version", rows[i].version);
            cJSON_AddBoolToObject(o, "applies", rows[i].applies);
            cJSON_AddBoolToObject(o, "selected", rows[i].selected);
            cJSON_AddStringToObject(o, "why", rows[i].why);
            cJSON_AddItemToObject(o, "verdict", cmd_verdict_json(&rows[i].verdict));
            cJSON_AddItemToArray(a, o);
        }
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddItemToObject(doc, "candidates", a);
        cli_json_print(doc);
    } else {
        printf("%-3s %-24s %4s %7s %-8s %-8s %s\n", "", "candidate", "tier", "version", "applies",
               "verdict", "why");
        for (size_t i = 0; i < n; i++)
            printf("%-3s %-24s %4d %7u %-8s %-8s %s\n", rows[i].selected ? "*" : "", rows[i].name,
                   rows[i].tier, rows[i].version, rows[i].applies ? "yes" : "no",
                   cmd_verdict_state(rows[i].verdict.state), rows[i].why);
    }
    tsr_client_candidates_free(rows);
    return CLI_EXIT_OK;
}

static int cmd_candidates(cli *c, int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' || path)
            return cli_fail_usage("candidates", "unexpected argument '%s'", argv[i]);
        path = argv[i];
    }
    if (!path)
        return cli_fail_usage("candidates", "missing REGION.json");
    return cmd_with_region(c, path, cmd_candidates_call, NULL);
}

/* ---- ring: the same-node fast path, timed ---- */

typedef struct cmd_ring_args {
    long launches;
} cmd_ring_args;

static int cmd_double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Compiles the region, gives it zeroed buffers, opens a submission ring over
 * that one launch and times args->launches launches through it. */
static int cmd_ring_call(cli *c, const tsr_region *r, void *args)
{
    const cmd_ring_args *a = args;
    tsr_client_tensor sig[TSR_CLIENT_MAX_INPUTS], out;
    int n = tsr_client_region_signature(r, sig, &out);
    tsr_client_compiled k;
    tsr_error err;
    if (tsr_client_compile(c->client, r, NULL, &k, c->timeout_ms, &err) != TSR_OK)
        return cli_fail_call(&err);
    tsr_buffer bufs[TSR_CLIENT_MAX_INPUTS + 1] = {0};
    int made = 0, rc = CLI_EXIT_OK;
    for (int i = 0; i <= n && rc == CLI_EXIT_OK; i++) {
        const tsr_client_tensor *t = i < n ? &sig[i] : &out;
        if (tsr_client_buffer_alloc(c->client, t->dtype, t->rank, t->shape, &bufs[i], NULL,
                                    c->timeout_ms, &err) != TSR_OK)
            rc = cli_fail_call(&err);
        else
            made = i + 1;
    }
    double *rt = rc == CLI_EXIT_OK ? malloc((size_t)a->launches * sizeof *rt) : NULL;
    double *dev = rc == CLI_EXIT_OK ? malloc((size_t)a->launches * sizeof *dev) : NULL;
    if (rc == CLI_EXIT_OK && (rt == NULL || dev == NULL))
        rc = cli_fail_call(&(tsr_error){.code = TSR_NO_MEMORY, .message = "out of memory"});
    tsr_client_ring *ring = NULL;
    tsr_client_launch_desc bind = {
        .kernel = k.kernel, .n_inputs = n, .inputs = bufs, .output = bufs[n]};
    if (rc == CLI_EXIT_OK &&
        tsr_client_ring_open(c->client, &bind, 1, 1, &ring, c->timeout_ms, &err) != TSR_OK)
        rc = cli_fail_call(&err);
    for (long i = 0; rc == CLI_EXIT_OK && i < a->launches; i++) {
        double t0 = cmd_now_ms();
        if (tsr_client_ring_launch(ring, 0, &dev[i], c->timeout_ms, &err) != TSR_OK)
            rc = cli_fail_call(&err);
        rt[i] = (cmd_now_ms() - t0) * 1000.0;
        dev[i] *= 1000.0;
    }
    uint64_t served = 0;
    if (ring != NULL && tsr_client_ring_close(ring, &served, c->timeout_ms, &err) != TSR_OK &&
        rc == CLI_EXIT_OK)
        rc = cli_fail_call(&err);
    if (rc == CLI_EXIT_OK) {
        qsort(rt, (size_t)a->launches, sizeof *rt, cmd_double_cmp);
        qsort(dev, (size_t)a->launches, sizeof *dev, cmd_double_cmp);
        double p50 = rt[a->launches / 2], p99 = rt[(a->launches * 99) / 100];
        double dev50 = dev[a->launches / 2];
        if (c->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "candidate", k.decision.candidate);
            cJSON_AddNumberToObject(o, "launches", (double)served);
            cJSON_AddNumberToObject(o, "round_trip_us_p50", p50);
            cJSON_AddNumberToObject(o, "round_trip_us_p99", p99);
            cJSON_AddNumberToObject(o, "daemon_us_p50", dev50);
            cli_json_print(o);
        } else {
            printf("%llu launches of %s through a submission ring: round trip p50 %.1f us, p99 "
                   "%.1f us; in the daemon p50 %.1f us\n",
                   (unsigned long long)served, k.decision.candidate, p50, p99, dev50);
        }
    }
    free(rt);
    free(dev);
    for (int i = 0; i < made; i++)
        tsr_client_buffer_free(c->client, bufs[i], c->timeout_ms, NULL);
    tsr_client_kernel_free(c->client, k.kernel, c->timeout_ms, NULL);
    return rc;
}

static int cmd_ring(cli *c, int argc, char **argv)
{
    const char *path = NULL;
    cmd_ring_args args = {.launches = 1000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--launches") == 0) {
            const char *v = cmd_value(argc, argv, &i);
            char *end;
            long n = v ? strtol(v, &end, 10) : 0;
            if (!v || *v == '\0' || *end != '\0' || n < 1 || n > 10000000)
                return cli_fail_usage("ring", "--launches wants a number from 1 to 10000000");
            args.launches = n;
        } else if (a[0] == '-' || path) {
            return cli_fail_usage("ring", "unexpected argument '%s'", a);
        } else {
            path = a;
        }
    }
    if (!path)
        return cli_fail_usage("ring", "missing REGION.json");
    return cmd_with_region(c, path, cmd_ring_call, &args);
}

const cli_command cli_commands[] = {
    {"ping", cmd_ping,
     "usage: tessera-cli ping\n"
     "Sends a hello and prints the round trip time.\n"},
    {"health", cmd_health,
     "usage: tessera-cli health\n"
     "Prints ready, recovering or draining; exits 0 only when ready (4 otherwise).\n"
     "Needs no token.\n"},
    {"info", cmd_info,
     "usage: tessera-cli info\n"
     "Prints the daemon's version, backend, devices and limits.\n"},
    {"stats", cmd_stats,
     "usage: tessera-cli stats [--prometheus]\n"
     "Prints the daemon's counters and per-candidate dispatch statistics;\n"
     "--prometheus prints the Prometheus text form instead.\n"},
    {"cache", cmd_cache,
     "usage: tessera-cli cache ls\n"
     "       tessera-cli cache evict KEY|PREFIX|all\n"
     "       tessera-cli cache warm REGION.json... [--arch sm_90a] [--force NAME]\n"
     "Lists the compiled-kernel cache; evicts one entry, named by its key or by a\n"
     "prefix that starts no other key, or every entry; or compiles each region into\n"
     "the cache, one line per region (kernels for a deployment, before traffic).\n"
     "With tenants, ls and evict see the caller's tenant's entries only (an admin\n"
     "tenant's: every entry).\n"},
    {"compile", cmd_compile,
     "usage: tessera-cli compile REGION.json... [--arch sm_90a] [--force NAME]\n"
     "                           [--policy tier|measure] [--no-verify]\n"
     "With several regions each is compiled in turn (a progress line on a terminal;\n"
     "with --json one array, each object naming its region_file); the exit status\n"
     "is the first failure's.\n"
     "Compiles the kernel the arbiter picks for the region (or NAME with --force)\n"
     "and prints the decision: candidate, tier, reason, verdict, cache hit or miss\n"
     "and the cache key. --arch compiles for an architecture without its device;\n"
     "--no-verify verifies no candidate (the decision says it was skipped).\n"},
    {"run", cmd_run,
     "usage: tessera-cli run REGION.json -i NAME=FILE.npy ... -o OUT.npy\n"
     "                       [--force NAME] [--policy tier|measure] [--device N]\n"
     "Runs the region on the given inputs, one -i per input the region reads.\n"
     "Inputs are .npy files of float32, float64, or float16 for an f16 region;\n"
     "bf16 regions take float32 data, rounded to nearest even. The output is\n"
     "written as float32. --device runs on device N (info lists them); without\n"
     "it the daemon picks the least-loaded device the tenant may use.\n"},
    {"verify", cmd_verify,
     "usage: tessera-cli verify REGION.json [--candidate NAME] [--seed N]\n"
     "Checks a candidate (default: the arbiter's pick) against the CPU reference\n"
     "on probe inputs. Exits 4 when the candidate fails.\n"},
    {"candidates", cmd_candidates,
     "usage: tessera-cli candidates REGION.json\n"
     "Lists every candidate for the region's kind: tier, version, whether it\n"
     "applies, its verdict and why it was or was not selected (* = selected).\n"},
    {"ring", cmd_ring,
     "usage: tessera-cli ring REGION.json [--launches N]\n"
     "Compiles the region, gives it zeroed buffers and launches it N times (default\n"
     "1000) through a submission ring, the same-node fast path (a local daemon and\n"
     "shared memory); prints the round trip's p50 and p99 and the time in the daemon.\n"},
    {NULL, NULL, NULL},
};
