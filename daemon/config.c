/*
 * config.c — defaults, the JSON config file and the command-line flags.
 *
 * Each config key has one row in config_keys with its JSON type and a setter, so
 * the "unknown key" check and the set of accepted keys cannot drift apart. The
 * command line is read in two passes because --config must be applied before
 * the flags that override it, wherever it appears.
 */
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/fingerprint.h"
#include "serve/redis.h"

static tsr_status config_set_string(char **slot, const char *value, tsr_error *err)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
    free(*slot);
    *slot = copy;
    return TSR_OK;
}

static void config_clear_listen(tsrd_config *c)
{
    for (int i = 0; i < c->n_listen; i++)
        free(c->listen[i]);
    c->n_listen = 0;
}

static tsr_status config_add_listen(tsrd_config *c, const char *url, tsr_error *err)
{
    if (c->n_listen >= TSRD_MAX_LISTEN)
        return tsr_error_set(err, TSR_TOO_LARGE, "at most %d listen URLs", TSRD_MAX_LISTEN);
    if (strncmp(url, "ipc://", 6) != 0 && strncmp(url, "tcp://", 6) != 0 &&
        strncmp(url, "tls+tcp://", 10) != 0)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "listen URL '%s': must start with ipc://, tcp:// or tls+tcp://", url);
    c->listen[c->n_listen] = strdup(url);
    if (c->listen[c->n_listen] == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
    c->n_listen++;
    return TSR_OK;
}

static bool config_backend_valid(const char *name)
{
    return strcmp(name, "auto") == 0 || strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 ||
           strcmp(name, "cuda-inprocess") == 0 || strcmp(name, "cpu-isolated") == 0;
}

tsr_status tsrd_config_defaults(tsrd_config *c, tsr_error *err)
{
    memset(c, 0, sizeof *c);
    c->log_level = TSRD_LOG_INFO;
    c->max_message_bytes = TSRD_DEFAULT_MAX_MESSAGE;
    c->ipc_mode = TSRD_DEFAULT_IPC_MODE;
    c->max_request_work = TSRD_DEFAULT_MAX_REQUEST_WORK;
    c->kernel_timeout_ms = TSRD_DEFAULT_KERNEL_TIMEOUT_MS;
    c->max_requests_per_connection = TSRD_DEFAULT_REQUESTS_PER_CONNECTION;
    c->max_unread_replies_per_tenant = TSRD_DEFAULT_UNREAD_REPLIES_PER_TENANT;
    c->replay_bytes_per_connection = TSRD_DEFAULT_REPLAY_BYTES_PER_CONNECTION;
    c->oracle_memo_bytes = TSRD_DEFAULT_ORACLE_MEMO_BYTES;
    c->replay_bytes_per_tenant = TSRD_DEFAULT_REPLAY_BYTES_PER_TENANT;
    c->fleet.ttl_s = TSRD_FLEET_DEFAULT_TTL_S;
    c->fleet.max_entry_bytes = TSRD_FLEET_DEFAULT_MAX_ENTRY_BYTES;
    c->fleet.timeout_ms = TSRD_FLEET_DEFAULT_TIMEOUT_MS;
    c->fleet.lease_ms = TSRD_FLEET_DEFAULT_LEASE_MS;
    c->cpu_devices = 1;
    tsr_status st = config_add_listen(c, TSRD_DEFAULT_LISTEN, err);
    if (st == TSR_OK)
        st = config_set_string(&c->cache_dir, TSRD_DEFAULT_CACHE_DIR, err);
    if (st == TSR_OK)
        st = config_set_string(&c->backend, "auto", err);
    return st;
}

void tsrd_config_free(tsrd_config *c)
{
    config_clear_listen(c);
    free(c->cache_dir);
    free(c->cache_key_file);
    c->cache_key_file = NULL;
    free(c->backend);
    free(c->config_path);
    free(c->tenants);
    free(c->tls_cert_file);
    free(c->tls_key_file);
    free(c->tls_ca_file);
    free(c->metrics_listen);
    c->metrics_listen = NULL;
    c->cache_dir = c->backend = c->config_path = NULL;
    c->tls_cert_file = c->tls_key_file = c->tls_ca_file = NULL;
    c->tenants = NULL;
    c->n_tenants = 0;
    free(c->fleet.url);
    free(c->fleet.key_file);
    free(c->fleet.tls_ca_file);
    free(c->fleet.prefix);
    c->fleet.url = c->fleet.key_file = c->fleet.tls_ca_file = c->fleet.prefix = NULL;
}

void tsrd_sha256_hex(const void *data, size_t len, char hex[65])
{
    uint8_t digest[32];
    tsr_sha256(data, len, digest);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

void tsrd_token_hash(const char *token, size_t len, char hex[65])
{
    while (len > 0 && (token[len - 1] == '\n' || token[len - 1] == '\r'))
        len--;
    tsrd_sha256_hex(token, len, hex);
}

/* Copies an optional string (NULL stays NULL). */
static tsr_status config_copy_opt(char **dst, const char *src, tsr_error *err)
{
    *dst = NULL;
    return src != NULL ? config_set_string(dst, src, err) : TSR_OK;
}

tsr_status tsrd_config_copy(tsrd_config *dst, const tsrd_config *src, tsr_error *err)
{
    *dst = *src;
    dst->n_listen = 0;
    dst->cache_dir = dst->backend = dst->config_path = NULL;
    dst->tls_cert_file = dst->tls_key_file = dst->tls_ca_file = NULL;
    dst->metrics_listen = NULL;
    dst->cache_key_file = NULL;
    dst->fleet.url = dst->fleet.key_file = dst->fleet.tls_ca_file = dst->fleet.prefix = NULL;
    dst->tenants = NULL;
    dst->n_tenants = 0;
    tsr_status st = TSR_OK;
    if (src->n_tenants > 0) {
        dst->tenants = malloc((size_t)src->n_tenants * sizeof *dst->tenants);
        if (dst->tenants == NULL)
            st = tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
        else {
            memcpy(dst->tenants, src->tenants, (size_t)src->n_tenants * sizeof *dst->tenants);
            dst->n_tenants = src->n_tenants;
        }
    }
    if (st == TSR_OK)
        st = config_copy_opt(&dst->config_path, src->config_path, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->tls_cert_file, src->tls_cert_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->tls_key_file, src->tls_key_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->tls_ca_file, src->tls_ca_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->metrics_listen, src->metrics_listen, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->cache_key_file, src->cache_key_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->fleet.url, src->fleet.url, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->fleet.key_file, src->fleet.key_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->fleet.tls_ca_file, src->fleet.tls_ca_file, err);
    if (st == TSR_OK)
        st = config_copy_opt(&dst->fleet.prefix, src->fleet.prefix, err);
    for (int i = 0; st == TSR_OK && i < src->n_listen; i++)
        st = config_add_listen(dst, src->listen[i], err);
    if (st == TSR_OK)
        st = config_set_string(&dst->cache_dir, src->cache_dir, err);
    if (st == TSR_OK)
        st = config_set_string(&dst->backend, src->backend, err);
    if (st != TSR_OK)
        tsrd_config_free(dst);
    return st;
}

/* ---- the JSON file ---- */

/* A non-negative integer that a double holds exactly (cJSON keeps numbers as
 * doubles, so anything past 2^53 could not be told apart). */
static tsr_status config_json_u64(const cJSON *v, const char *key, uint64_t min, uint64_t max,
                                  uint64_t *out, tsr_error *err)
{
    if (!cJSON_IsNumber(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must be a number", key);
    double d = v->valuedouble;
    if (d != (double)(uint64_t)d || d < (double)min || d > (double)max || d > 9007199254740992.0)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "%s: must be an integer in [%llu, %llu], got %g", key,
                             (unsigned long long)min, (unsigned long long)max, d);
    *out = (uint64_t)d;
    return TSR_OK;
}

static tsr_status config_json_string(const cJSON *v, const char *key, const char **out,
                                     tsr_error *err)
{
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must be a string", key);
    if (v->valuestring[0] == '\0')
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must not be empty", key);
    *out = v->valuestring;
    return TSR_OK;
}

static tsr_status key_listen(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "listen: must be a non-empty array of URLs");
    config_clear_listen(c);
    int i = 0;
    for (const cJSON *item = v->child; item != NULL; item = item->next, i++) {
        const char *url;
        tsr_status st = config_json_string(item, "listen", &url, err);
        if (st == TSR_OK)
            st = config_add_listen(c, url, err);
        if (st == TSR_INVALID_ARGUMENT) { /* in a file, a bad value is a bad attribute */
            st = TSR_BAD_ATTRIBUTE;
            if (err != NULL)
                err->code = st;
        }
        if (st != TSR_OK)
            return tsr_error_prefix(err, "listen[%d]", i);
    }
    return TSR_OK;
}

static tsr_status key_cache_dir(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "cache_dir", &s, err);
    return st != TSR_OK ? st : config_set_string(&c->cache_dir, s, err);
}

static tsr_status key_cache_key_file(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "cache_key_file", &s, err);
    return st != TSR_OK ? st : config_set_string(&c->cache_key_file, s, err);
}

static tsr_status key_backend(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "backend", &s, err);
    if (st != TSR_OK)
        return st;
    if (!config_backend_valid(s))
        return tsr_error_set(
            err, TSR_BAD_ATTRIBUTE,
            "backend: '%s' is not one of auto, cpu, cuda, cuda-inprocess, cpu-isolated", s);
    return config_set_string(&c->backend, s, err);
}

static tsr_status key_log_level(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "log_level", &s, err);
    if (st == TSR_OK && !tsrd_log_level_parse(s, &c->log_level))
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                           "log_level: '%s' is not one of error, warn, info, debug", s);
    return st;
}

static tsr_status key_log_format(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "log_format", &s, err);
    if (st == TSR_OK && !tsrd_log_format_parse(s, &c->log_format))
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                           "log_format: '%s' is not one of auto, text, journal, json", s);
    return st;
}

static tsr_status key_max_message(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "max_message_bytes", 4096, UINT64_C(1) << 40, &c->max_message_bytes,
                           err);
}

static tsr_status key_workers(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    uint64_t n = 0;
    tsr_status st = config_json_u64(v, "workers", 0, TSRD_MAX_WORKERS, &n, err);
    if (st == TSR_OK)
        c->workers = (int)n;
    return st;
}

static tsr_status key_cache_memory(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "cache_memory_bytes", 0, UINT64_C(1) << 50, &c->cache_memory_bytes,
                           err);
}

static tsr_status key_cache_disk(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "cache_disk_bytes", 0, UINT64_C(1) << 50, &c->cache_disk_bytes, err);
}

static tsr_status key_ipc_mode(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    /* JSON has no octal: the mode is a string of octal digits ("0660"). */
    const char *s = NULL;
    tsr_status st = config_json_string(v, "ipc_mode", &s, err);
    if (st != TSR_OK)
        return st;
    char *end;
    unsigned long mode = strtoul(s, &end, 8);
    if (*end != '\0' || mode > 0777 || (mode & 0600) != 0600)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "ipc_mode: '%s' is not an octal file mode that lets the owner read "
                             "and write",
                             s);
    c->ipc_mode = (unsigned)mode;
    return TSR_OK;
}

static tsr_status config_json_bool(const cJSON *v, const char *key, bool *out, tsr_error *err)
{
    if (!cJSON_IsBool(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must be true or false", key);
    *out = cJSON_IsTrue(v);
    return TSR_OK;
}

static tsr_status key_allow_plain_tcp(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_bool(v, "allow_plain_tcp", &c->allow_plain_tcp, err);
}

static tsr_status key_test_faults(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_bool(v, "test_faults", &c->test_faults, err);
}

static tsr_status key_tls(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    if (!cJSON_IsObject(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "tls: must be an object");
    tsr_status st = TSR_OK;
    for (const cJSON *item = v->child; st == TSR_OK && item != NULL; item = item->next) {
        const char *s = NULL;
        char **slot = NULL;
        if (strcmp(item->string, "cert_file") == 0)
            slot = &c->tls_cert_file;
        else if (strcmp(item->string, "key_file") == 0)
            slot = &c->tls_key_file;
        else if (strcmp(item->string, "ca_file") == 0)
            slot = &c->tls_ca_file;
        else if (strcmp(item->string, "verify_clients") == 0)
            st = config_json_bool(item, "tls.verify_clients", &c->tls_verify_clients, err);
        else
            st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "tls: unknown key '%s'", item->string);
        if (slot != NULL && (st = config_json_string(item, item->string, &s, err)) == TSR_OK)
            st = config_set_string(slot, s, err);
        if (slot != NULL && st == TSR_BAD_ATTRIBUTE)
            tsr_error_prefix(err, "tls");
    }
    if (st == TSR_OK && (c->tls_cert_file == NULL) != (c->tls_key_file == NULL))
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "tls: cert_file and key_file go together");
    if (st == TSR_OK && c->tls_verify_clients && c->tls_ca_file == NULL)
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "tls: verify_clients needs ca_file");
    return st;
}

static tsr_status config_json_ids(const cJSON *v, const char *key, uint32_t *ids, int *n,
                                  tsr_error *err)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > TSRD_MAX_TENANT_IDS)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "%s: must be an array of at most %d ids", key,
                             TSRD_MAX_TENANT_IDS);
    *n = 0;
    for (const cJSON *item = v->child; item != NULL; item = item->next) {
        uint64_t id = 0;
        tsr_status st = config_json_u64(item, key, 0, UINT32_MAX - 1, &id, err);
        if (st != TSR_OK)
            return st;
        ids[(*n)++] = (uint32_t)id;
    }
    return TSR_OK;
}

static tsr_status config_json_quotas(const cJSON *v, tsrd_quota *q, tsr_error *err)
{
    if (!cJSON_IsObject(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "quotas: must be an object");
    for (const cJSON *item = v->child; item != NULL; item = item->next) {
        uint64_t *slot = strcmp(item->string, "device_memory_bytes") == 0 ? &q->device_memory_bytes
                         : strcmp(item->string, "device_memory_bytes_per_device") == 0
                             ? &q->device_memory_bytes_per_device
                         : strcmp(item->string, "buffers") == 0      ? &q->buffers
                         : strcmp(item->string, "in_flight") == 0    ? &q->in_flight
                         : strcmp(item->string, "compiles") == 0     ? &q->compiles
                         : strcmp(item->string, "replay_bytes") == 0 ? &q->replay_bytes
                                                                     : NULL;
        if (slot == NULL)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "quotas: unknown key '%s'", item->string);
        tsr_status st = config_json_u64(item, item->string, 0, UINT64_C(1) << 52, slot, err);
        if (st != TSR_OK)
            return tsr_error_prefix(err, "quotas");
    }
    return TSR_OK;
}

static bool config_hex64(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return true;
}

/* A tenant's device set: a non-empty array of distinct device indexes. */
static tsr_status config_json_devices(const cJSON *v, uint32_t *mask, tsr_error *err)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "devices: must be a non-empty array of device indexes");
    *mask = 0;
    for (const cJSON *item = v->child; item != NULL; item = item->next) {
        uint64_t i = 0;
        tsr_status st = config_json_u64(item, "devices", 0, TSRD_MAX_DEVICES - 1, &i, err);
        if (st != TSR_OK)
            return st;
        if (*mask & (UINT32_C(1) << i))
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "devices: %llu appears twice",
                                 (unsigned long long)i);
        *mask |= UINT32_C(1) << i;
    }
    return TSR_OK;
}

static tsr_status config_json_tenant(const cJSON *v, tsrd_tenant_config *t, tsr_error *err)
{
    memset(t, 0, sizeof *t);
    if (!cJSON_IsObject(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "must be an object");
    tsr_status st = TSR_OK;
    for (const cJSON *item = v->child; st == TSR_OK && item != NULL; item = item->next) {
        const char *k = item->string;
        if (strcmp(k, "name") == 0) {
            const char *s = NULL;
            st = config_json_string(item, "name", &s, err);
            if (st == TSR_OK && strlen(s) >= sizeof t->name)
                st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "name: longer than %zu bytes",
                                   sizeof t->name - 1);
            if (st == TSR_OK)
                snprintf(t->name, sizeof t->name, "%s", s);
        } else if (strcmp(k, "token_sha256") == 0) {
            if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) > TSRD_MAX_TENANT_IDS)
                return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                     "token_sha256: must be an array of at most %d hashes",
                                     TSRD_MAX_TENANT_IDS);
            for (const cJSON *h = item->child; h != NULL; h = h->next) {
                if (!cJSON_IsString(h) || !config_hex64(h->valuestring))
                    return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                         "token_sha256: each entry must be 64 hex digits "
                                         "(tesserad --hash-token prints one)");
                char *out = t->token_sha256[t->n_tokens++];
                for (int i = 0; i < 64; i++)
                    out[i] = (char)(h->valuestring[i] | 0x20); /* lower case */
                out[64] = '\0';
            }
        } else if (strcmp(k, "uids") == 0) {
            st = config_json_ids(item, "uids", t->uids, &t->n_uids, err);
        } else if (strcmp(k, "gids") == 0) {
            st = config_json_ids(item, "gids", t->gids, &t->n_gids, err);
        } else if (strcmp(k, "admin") == 0) {
            st = config_json_bool(item, "admin", &t->admin, err);
        } else if (strcmp(k, "shm_uid") == 0) {
            uint64_t uid = 0;
            st = config_json_u64(item, "shm_uid", 0, UINT32_MAX - 1, &uid, err);
            t->shm_uid = (uint32_t)uid;
            t->has_shm_uid = st == TSR_OK;
        } else if (strcmp(k, "devices") == 0) {
            st = config_json_devices(item, &t->devices, err);
        } else if (strcmp(k, "quotas") == 0) {
            st = config_json_quotas(item, &t->quota, err);
        } else {
            st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "unknown key '%s'", k);
        }
    }
    if (st == TSR_OK && t->name[0] == '\0')
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "name: missing");
    if (st == TSR_OK && t->n_tokens + t->n_uids + t->n_gids == 0)
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                           "tenant '%s' has no identity (token_sha256, uids or gids)", t->name);
    /* Without peer credentials a tenant is known by its token alone. */
    if (st == TSR_OK && t->has_shm_uid && t->n_tokens == 0)
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                           "shm_uid: tenant '%s' has no token_sha256, and only a token "
                           "identifies a tenant on a connection without peer credentials",
                           t->name);
    return st;
}

static tsr_status key_tenants(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > TSRD_MAX_TENANTS)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "tenants: must be an array of at most %d",
                             TSRD_MAX_TENANTS);
    tsrd_tenant_config *list = n > 0 ? calloc((size_t)n, sizeof *list) : NULL;
    if (n > 0 && list == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
    int i = 0;
    for (const cJSON *item = v->child; item != NULL; item = item->next, i++) {
        tsr_status st = config_json_tenant(item, &list[i], err);
        for (int j = 0; st == TSR_OK && j < i; j++)
            if (strcmp(list[j].name, list[i].name) == 0)
                st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "name '%s' appears twice", list[i].name);
        if (st != TSR_OK) {
            free(list);
            return tsr_error_prefix(err, "tenants[%d]", i);
        }
    }
    free(c->tenants);
    c->tenants = list;
    c->n_tenants = n;
    return TSR_OK;
}

/* Only the shape is checked here (http://, a host, a port, no path); whether
 * the address can be bound is found at start-up (metrics_http.c). */
static tsr_status key_metrics_listen(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    const char *s = NULL;
    tsr_status st = config_json_string(v, "metrics_listen", &s, err);
    if (st != TSR_OK)
        return st;
    const char *host = strncmp(s, "http://", 7) == 0 ? s + 7 : NULL;
    const char *colon = host != NULL ? strrchr(host, ':') : NULL;
    const char *port = colon != NULL ? colon + 1 : NULL;
    size_t digits = port != NULL ? strspn(port, "0123456789") : 0;
    bool trailing_slash = port != NULL && port[digits] == '/' && port[digits + 1] == '\0';
    if (host == NULL || colon == host || digits == 0 || digits > 5 ||
        (port[digits] != '\0' && !trailing_slash) || strtoul(port, NULL, 10) > 65535)
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                             "metrics_listen: '%s' is not http://HOST:PORT (e.g. "
                             "http://127.0.0.1:9464)",
                             s);
    return config_set_string(&c->metrics_listen, s, err);
}

/* 0 turns the bound off; JSON integers stop at 2^53, and so does the key. */
static tsr_status key_kernel_timeout(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "kernel_timeout_ms", 0, UINT64_C(86400000), &c->kernel_timeout_ms,
                           err);
}

static tsr_status key_max_request_work(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    uint64_t max = UINT64_C(1) << 53;
    return config_json_u64(v, "max_request_work", 0, max, &c->max_request_work, err);
}

/* The fleet cache (docs/operations.md, "Fleet cache"): strings name files or
 * the URL, numbers are bounded so that a typo cannot make a lookup wait for
 * minutes or an entry take the daemon's memory. */
static tsr_status key_fleet_cache(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    static const struct {
        const char *name;
        size_t offset;
        uint64_t min, max;
    } numbers[] = {
        {"ttl_s", offsetof(tsrd_fleet_config, ttl_s), 1, UINT64_C(1) << 31},
        {"max_entry_bytes", offsetof(tsrd_fleet_config, max_entry_bytes), 4096, UINT64_C(1) << 30},
        {"timeout_ms", offsetof(tsrd_fleet_config, timeout_ms), 1, 60000},
        {"lease_ms", offsetof(tsrd_fleet_config, lease_ms), 10, 600000},
    };
    if (!cJSON_IsObject(v))
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache: must be an object");
    tsr_status st = TSR_OK;
    for (const cJSON *item = v->child; st == TSR_OK && item != NULL; item = item->next) {
        char **slot = NULL;
        bool known = false;
        if (strcmp(item->string, "url") == 0)
            slot = &c->fleet.url;
        else if (strcmp(item->string, "key_file") == 0)
            slot = &c->fleet.key_file;
        else if (strcmp(item->string, "tls_ca_file") == 0)
            slot = &c->fleet.tls_ca_file;
        else if (strcmp(item->string, "prefix") == 0)
            slot = &c->fleet.prefix;
        for (size_t i = 0; slot == NULL && i < sizeof numbers / sizeof numbers[0]; i++) {
            if (strcmp(item->string, numbers[i].name) != 0)
                continue;
            known = true;
            uint64_t *field = (uint64_t *)((char *)&c->fleet + numbers[i].offset);
            st = config_json_u64(item, item->string, numbers[i].min, numbers[i].max, field, err);
        }
        const char *s = NULL;
        if (slot != NULL && (st = config_json_string(item, item->string, &s, err)) == TSR_OK) {
            if (slot == &c->fleet.prefix && strlen(s) > 48)
                st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "prefix: at most 48 characters");
            else
                st = config_set_string(slot, s, err);
        }
        if (slot == NULL && !known)
            st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "unknown key '%s'", item->string);
        if (st == TSR_BAD_ATTRIBUTE)
            tsr_error_prefix(err, "fleet_cache");
    }
    if (st == TSR_OK && (c->fleet.url == NULL) != (c->fleet.key_file == NULL))
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "fleet_cache: url and key_file go together");
    if (st == TSR_OK && c->fleet.url != NULL && strncmp(c->fleet.url, "redis://", 8) != 0 &&
        strncmp(c->fleet.url, "rediss://", 9) != 0) {
        char shown[256];
        tsrd_redis_url_shown(c->fleet.url, shown, sizeof shown);
        st = tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                           "fleet_cache: url '%s' must start with redis:// or rediss://", shown);
    }
    return st;
}

static tsr_status key_cpu_devices(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    uint64_t n = 0;
    tsr_status st = config_json_u64(v, "cpu_devices", 1, TSRD_MAX_DEVICES, &n, err);
    if (st == TSR_OK)
        c->cpu_devices = (int)n;
    return st;
}

static tsr_status key_cpu_device_memory(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "cpu_device_memory_bytes", 0, UINT64_C(1) << 50,
                           &c->cpu_device_memory_bytes, err);
}

/* Admission limits (docs/operations.md, "Limits"). */
static tsr_status key_max_connections(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "max_connections", 0, UINT64_C(1) << 24, &c->max_connections, err);
}

static tsr_status key_max_requests_per_connection(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "max_requests_per_connection", 1, 4096,
                           &c->max_requests_per_connection, err);
}

static tsr_status key_max_unread_replies_per_tenant(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "max_unread_replies_per_tenant", 1, UINT64_C(1) << 20,
                           &c->max_unread_replies_per_tenant, err);
}

static tsr_status key_replay_bytes_per_connection(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "replay_bytes_per_connection", 0, UINT64_C(1) << 40,
                           &c->replay_bytes_per_connection, err);
}

static tsr_status key_replay_bytes_per_tenant(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "replay_bytes_per_tenant", 0, UINT64_C(1) << 40,
                           &c->replay_bytes_per_tenant, err);
}

static tsr_status key_oracle_memo_bytes(tsrd_config *c, const cJSON *v, tsr_error *err)
{
    return config_json_u64(v, "oracle_memo_bytes", 0, UINT64_C(1) << 40, &c->oracle_memo_bytes,
                           err);
}

static const struct config_key {
    const char *name;
    tsr_status (*set)(tsrd_config *c, const cJSON *v, tsr_error *err);
} config_keys[] = {
    {"listen", key_listen},
    {"cache_dir", key_cache_dir},
    {"cache_key_file", key_cache_key_file},
    {"backend", key_backend},
    {"log_level", key_log_level},
    {"log_format", key_log_format},
    {"max_message_bytes", key_max_message},
    {"workers", key_workers},
    {"cache_memory_bytes", key_cache_memory},
    {"cache_disk_bytes", key_cache_disk},
    {"tenants", key_tenants},
    {"ipc_mode", key_ipc_mode},
    {"allow_plain_tcp", key_allow_plain_tcp},
    {"tls", key_tls},
    {"metrics_listen", key_metrics_listen},
    {"max_request_work", key_max_request_work},
    {"kernel_timeout_ms", key_kernel_timeout},
    {"test_faults", key_test_faults},
    {"max_connections", key_max_connections},
    {"max_requests_per_connection", key_max_requests_per_connection},
    {"max_unread_replies_per_tenant", key_max_unread_replies_per_tenant},
    {"replay_bytes_per_connection", key_replay_bytes_per_connection},
    {"replay_bytes_per_tenant", key_replay_bytes_per_tenant},
    {"oracle_memo_bytes", key_oracle_memo_bytes},
    {"fleet_cache", key_fleet_cache},
    {"cpu_devices", key_cpu_devices},
    {"cpu_device_memory_bytes", key_cpu_device_memory},
};

static const struct config_key *config_key_find(const char *name)
{
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++)
        if (strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    return NULL;
}

tsr_status tsrd_config_parse_json(tsrd_config *c, const char *text, size_t len, tsr_error *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root == NULL)
        return tsr_error_set(err, TSR_BAD_JSON, "config: malformed JSON near byte %ld",
                             end != NULL ? (long)(end - text) : 0L);
    tsr_status st = TSR_OK;
    if (!cJSON_IsObject(root))
        st = tsr_error_set(err, TSR_BAD_JSON, "config: must be a JSON object");
    for (const cJSON *item = root->child; st == TSR_OK && item != NULL; item = item->next) {
        const struct config_key *key = config_key_find(item->string);
        if (key == NULL)
            st = tsr_error_set(err, TSR_BAD_ATTRIBUTE, "config: unknown key '%s'", item->string);
        else
            st = key->set(c, item, err);
    }
    cJSON_Delete(root);
    return st;
}

tsr_status tsrd_config_load_file(tsrd_config *c, const char *path, tsr_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return tsr_error_set(err, TSR_IO_ERROR, "config %s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    tsr_status st = TSR_OK;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            char *grown = cap <= (1u << 24) ? realloc(text, cap) : NULL;
            if (grown == NULL) {
                st = tsr_error_set(err, TSR_TOO_LARGE, "config %s: too large", path);
                break;
            }
            text = grown;
        }
        size_t n = fread(text + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f))
                st = tsr_error_set(err, TSR_IO_ERROR, "config %s: read failed", path);
            break;
        }
    }
    fclose(f);
    if (st == TSR_OK) {
        st = tsrd_config_parse_json(c, text, len, err);
        if (st != TSR_OK)
            tsr_error_prefix(err, "%s", path);
    }
    free(text);
    return st;
}

/* ---- the command line ---- */

const char *tsrd_config_usage(void)
{
    return "usage: tesserad [--config FILE] [--listen URL]... [--cache-dir DIR]\n"
           "                [--backend auto|cpu|cuda|...] [--log-level error|warn|info|debug]\n"
           "                [--log-format auto|text|journal|json]\n"
           "                [--max-message-bytes N] [--workers N] [--cpu-devices N]\n"
           "                [--allow-plain-tcp]\n"
           "                [--help] [--version]\n"
           "       tesserad --hash-token < token-file\n"
           "\n"
           "  --config FILE           JSON config file; flags override its values\n"
           "  --listen URL            ipc://PATH, tls+tcp://HOST:PORT (with the config's tls\n"
           "                          settings) or tcp://HOST:PORT (with --allow-plain-tcp);\n"
           "                          repeatable\n"
           "                          (default " TSRD_DEFAULT_LISTEN ")\n"
           "  --cache-dir DIR         kernel cache directory (default " TSRD_DEFAULT_CACHE_DIR ")\n"
           "  --backend NAME          auto (cuda when a driver loads, else cpu), cpu, cuda (device "
           "in\n"
           "                          a worker process), cuda-inprocess, cpu-isolated\n"
           "  --log-level LEVEL       error, warn, info (default) or debug (one line per "
           "request)\n"
           "  --log-format FORMAT     auto (journal under journald, else text), text, journal\n"
           "                          (syslog priorities) or json (one object per line)\n"
           "  --max-message-bytes N   largest request accepted (default 67108864)\n"
           "  --workers N             worker threads for compiles and launches (default: "
           "CPUs)\n"
           "  --cpu-devices N         the cpu backend shows N devices (1 to 16; config key\n"
           "                          cpu_devices), for placement tests without GPUs\n"
           "  --allow-plain-tcp       let tcp:// listeners serve (requests, tokens and data\n"
           "                          unencrypted; config key allow_plain_tcp)\n"
           "  --hash-token            print the SHA-256 of the token on stdin, for the\n"
           "                          token_sha256 list of a tenant in the config file\n"
           "\n"
           "Flags take their value as --flag VALUE or --flag=VALUE.\n"
           "Signals: SIGTERM/SIGINT drain and exit; SIGHUP reloads tenants and quotas from\n"
           "the config file without dropping connections.\n";
}

static tsr_status config_arg_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                                 uint64_t *out, tsr_error *err)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] == '\0' || text[0] == '-' || *end != '\0' || errno != 0 || v < min || v > max)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                             "%s: '%s' is not an integer in [%llu, %llu]", flag, text,
                             (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return TSR_OK;
}

/* Applies one flag that takes a value. */
static tsr_status config_apply_flag(tsrd_config *c, const char *flag, const char *value,
                                    bool *listen_from_args, tsr_error *err)
{
    uint64_t n = 0;
    tsr_status st;
    if (strcmp(flag, "--listen") == 0) {
        if (!*listen_from_args)
            config_clear_listen(c);
        *listen_from_args = true;
        return config_add_listen(c, value, err);
    }
    if (strcmp(flag, "--cache-dir") == 0)
        return config_set_string(&c->cache_dir, value, err);
    if (strcmp(flag, "--backend") == 0) {
        if (!config_backend_valid(value))
            return tsr_error_set(
                err, TSR_INVALID_ARGUMENT,
                "--backend: '%s' is not one of auto, cpu, cuda, cuda-inprocess, cpu-isolated",
                value);
        return config_set_string(&c->backend, value, err);
    }
    if (strcmp(flag, "--log-level") == 0) {
        if (!tsrd_log_level_parse(value, &c->log_level))
            return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "--log-level: '%s' is not one of error, warn, info, debug", value);
        return TSR_OK;
    }
    if (strcmp(flag, "--log-format") == 0) {
        if (!tsrd_log_format_parse(value, &c->log_format))
            return tsr_error_set(err, TSR_INVALID_ARGUMENT,
                                 "--log-format: '%s' is not one of auto, text, journal, json",
                                 value);
        return TSR_OK;
    }
    if (strcmp(flag, "--max-message-bytes") == 0)
        return config_arg_u64(flag, value, 4096, UINT64_C(1) << 40, &c->max_message_bytes, err);
    if (strcmp(flag, "--cpu-devices") == 0) {
        st = config_arg_u64(flag, value, 1, TSRD_MAX_DEVICES, &n, err);
        if (st == TSR_OK)
            c->cpu_devices = (int)n;
        return st;
    }
    if (strcmp(flag, "--workers") == 0) {
        st = config_arg_u64(flag, value, 0, TSRD_MAX_WORKERS, &n, err);
        if (st == TSR_OK)
            c->workers = (int)n;
        return st;
    }
    return tsr_error_set(err, TSR_INVALID_ARGUMENT, "unknown option '%s'", flag);
}

static bool config_flag_takes_value(const char *flag)
{
    static const char *const with_value[] = {
        "--config",     "--listen",     "--cache-dir",         "--backend",
        "--log-level",  "--log-format", "--max-message-bytes", "--workers",
        "--cpu-devices"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(flag, with_value[i]) == 0)
            return true;
    return false;
}

/* Flags that take no value. */
static bool config_flag_is_switch(const char *flag)
{
    return strcmp(flag, "--allow-plain-tcp") == 0;
}

/* Splits --flag=VALUE into two arguments (the flag part copied into names, which
 * the caller frees), so both spellings parse alike. args holds 2 * argc slots. */
static int config_split_args(int argc, char **argv, char **args, char **names)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
        names[i] = eq != NULL ? strndup(argv[i], (size_t)(eq - argv[i])) : NULL;
        if (names[i] != NULL) {
            args[n++] = names[i];
            args[n++] = (char *)eq + 1;
        } else {
            args[n++] = argv[i];
        }
    }
    return n;
}

static tsr_status config_from_split_args(tsrd_config *c, int argc, char **argv,
                                         tsrd_config_action *action, tsr_error *err)
{
    *action = TSRD_CONFIG_SERVE;
    tsr_status st = tsrd_config_defaults(c, err);
    /* Pass 1: help, version, argument shape and the config file. */
    const char *config_path = NULL;
    for (int i = 0; st == TSR_OK && i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *action = TSRD_CONFIG_HELP;
            return TSR_OK;
        }
        if (strcmp(argv[i], "--version") == 0) {
            *action = TSRD_CONFIG_VERSION;
            return TSR_OK;
        }
        if (strcmp(argv[i], "--hash-token") == 0) {
            *action = TSRD_CONFIG_HASH_TOKEN;
            return TSR_OK;
        }
        if (config_flag_is_switch(argv[i]))
            continue;
        if (!config_flag_takes_value(argv[i]))
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "unknown option '%s'", argv[i]);
        if (i + 1 >= argc)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "%s: missing value", argv[i]);
        if (strcmp(argv[i], "--config") == 0)
            config_path = argv[i + 1];
        i++;
    }
    if (st == TSR_OK && config_path != NULL)
        st = tsrd_config_load_file(c, config_path, err);
    if (st == TSR_OK && config_path != NULL)
        st = config_set_string(&c->config_path, config_path, err);
    /* Pass 2: every other flag overrides the file. */
    bool listen_from_args = false;
    for (int i = 0; st == TSR_OK && i < argc; i++) {
        if (strcmp(argv[i], "--allow-plain-tcp") == 0) {
            c->allow_plain_tcp = true;
            continue;
        }
        if (strcmp(argv[i], "--config") != 0)
            st = config_apply_flag(c, argv[i], argv[i + 1], &listen_from_args, err);
        i++; /* the flag's value */
    }
    return st;
}

tsr_status tsrd_config_from_args(tsrd_config *c, int argc, char **argv, tsrd_config_action *action,
                                 tsr_error *err)
{
    char **args = calloc((size_t)argc * 2 + 1, sizeof *args);
    char **names = calloc((size_t)argc + 1, sizeof *names);
    tsr_status st;
    if (args == NULL || names == NULL) {
        *action = TSRD_CONFIG_SERVE;
        st = tsr_error_set(err, TSR_NO_MEMORY, "arguments: out of memory");
    } else {
        int n = config_split_args(argc, argv, args, names);
        st = config_from_split_args(c, n, args, action, err);
    }
    for (int i = 0; names != NULL && i < argc; i++)
        free(names[i]);
    free(names);
    free(args);
    return st;
}
