/*
 * daemon.c — opening and closing the daemon context.
 *
 * The order matters: the backend first (its devices decide the default arch),
 * then the kernel cache and the arbiter, then the backend's candidates into the
 * arbiter. Closing runs in reverse, after every session has dropped its
 * buffers and kernels, so the backend outlives everything allocated on it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"

#include "backend/registry.h"
#include "handlers/handlers.h"
#include "serve/fleet.h"
#include "serve/nvml.h"
#include "serve/recovery.h"
#include "serve/ring.h"
#include "serve/session.h"
#include "serve/tenant.h"

tsr_status tsrd_mkdirs(const char *path, unsigned mode, tsr_error *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return tsr_error_set(err, TSR_IO_ERROR, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
            return tsr_error_set(err, TSR_IO_ERROR, "mkdir %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return tsr_error_set(err, TSR_IO_ERROR, "%s: not a directory", path);
    return TSR_OK;
}

static tsr_status daemon_open_backend(tsrd_daemon *d, tsr_error *err)
{
    tsrd_backend_options opts = {.threads = 0,
                                 .test_faults = d->config.test_faults,
                                 .kernel_timeout_ms = d->config.kernel_timeout_ms,
                                 .cpu_devices = d->config.cpu_devices,
                                 .cpu_device_memory_bytes = d->config.cpu_device_memory_bytes};
    tsr_status st = tsrd_backend_choose(d->config.backend, &opts, &d->bops, &d->backend, err);
    if (st != TSR_OK)
        return st;
    int n = d->bops->device_count(d->backend);
    d->n_devices = n > TSRD_MAX_DEVICES ? TSRD_MAX_DEVICES : n;
    for (int i = 0; st == TSR_OK && i < d->n_devices; i++)
        st = d->bops->device_info(d->backend, i, &d->devices[i], err);
    if (st == TSR_OK && d->n_devices == 0)
        st = tsr_error_set(err, TSR_UNAVAILABLE, "backend %s: no devices", d->bops->name);
    d->inline_launches = st == TSR_OK && strcmp(d->devices[0].arch, "cpu") == 0;
    snprintf(d->driver_version, sizeof d->driver_version, "%s",
             d->bops->driver_version(d->backend));
    snprintf(d->compiler_version, sizeof d->compiler_version, "%s",
             d->bops->compiler_version(d->backend));
    return st;
}

tsr_status tsrd_daemon_init(tsrd_daemon *d, const tsrd_config *config, uv_loop_t *loop,
                            tsr_error *err)
{
    memset(d, 0, sizeof *d);
    tsr_status st = tsrd_config_copy(&d->config, config, err);
    if (st != TSR_OK)
        return st;
    d->log.level = config->log_level;
    d->log.format = config->log_format;
    d->loop = loop;
    d->handlers = tsrd_handler_table;
    d->start_ns = uv_hrtime();
    d->work_slots = config->workers;
    snprintf(d->default_tenant.name, sizeof d->default_tenant.name, "default");
    tsrd_handles_init(&d->handles);
    st = tsrd_tenants_apply(d, config, err);
    if (st == TSR_OK)
        st = daemon_open_backend(d, err);
    if (st == TSR_OK)
        st = tsrd_mkdirs(d->config.cache_dir, 0755, err);
    /* The fleet cache is optional: without a URL nothing of it exists. */
    tsr_kcache_remote remote = {0};
    if (st == TSR_OK && d->config.fleet.url != NULL) {
        st = tsrd_fleet_open(&d->config.fleet, &d->fleet, err);
        if (st == TSR_OK) {
            remote = tsrd_fleet_remote(d->fleet);
            char where[320];
            tsrd_fleet_describe(d->fleet, where, sizeof where);
            tsrd_log_info(&d->log, "fleet cache on %s", where);
        }
    }
    if (st == TSR_OK) {
        tsr_kcache_options kopts = {.dir = d->config.cache_dir,
                                    .memory_bytes = d->config.cache_memory_bytes,
                                    .disk_bytes = d->config.cache_disk_bytes,
                                    .key_file = d->config.cache_key_file,
                                    .remote = d->fleet != NULL ? &remote : NULL};
        st = tsr_kcache_open(&kopts, &d->kcache, err);
        if (st == TSR_OK && tsr_kcache_key_ephemeral(d->kcache))
            tsrd_log_warn(&d->log,
                          "kernel cache: the key file could not be made (full or read-only "
                          "disk?); entries written now will be rebuilt after a restart");
    }
    if (st == TSR_OK)
        st = tsr_oracle_memo_create(d->config.oracle_memo_bytes, &d->oracle_memo, err);
    if (st == TSR_OK)
        st = tsr_arbiter_create(d->config.cache_dir, &d->arbiter, err);
    if (st == TSR_OK && d->fleet != NULL) {
        /* A verdict holds on the driver and toolkit it was reached with. */
        tsrd_fleet_set_versions(d->fleet, d->driver_version, d->compiler_version);
        tsr_arbiter_remote winners = tsrd_fleet_arbiter_remote(d->fleet);
        tsr_arbiter_set_remote(d->arbiter, &winners);
    }
    if (st == TSR_OK)
        st = d->bops->register_candidates(d->backend, d->arbiter, err);
    if (st != TSR_OK) {
        tsrd_daemon_fini(d);
        return st;
    }
    tsrd_log_info(&d->log, "backend %s, %d device(s), device 0: %s (%s), cache %s", d->bops->name,
                  d->n_devices, d->devices[0].name, d->devices[0].arch, d->config.cache_dir);
    /* GPU gauges are an extra: without NVML the daemon serves all the same. */
    tsr_error nvml_err;
    if (tsrd_nvml_open(&d->nvml, &nvml_err) == TSR_OK)
        tsrd_log_info(&d->log, "GPU gauges from NVML: %d GPU(s)", tsrd_nvml_count(d->nvml));
    else
        tsrd_log_debug(&d->log, "no GPU gauges: %s", nvml_err.message);
    return TSR_OK;
}

void tsrd_daemon_fini(tsrd_daemon *d)
{
    tsrd_rings_end_every(d, TSR_UNAVAILABLE, "tesserad is shutting down");
    tsrd_session_close_all(d);
    tsrd_recovery_fini(d);
    tsrd_nvml_close(d->nvml);
    d->nvml = NULL;
    tsrd_handles_fini(&d->handles);
    tsrd_tenants_fini(d);
    if (d->arbiter != NULL)
        tsr_arbiter_destroy(d->arbiter);
    if (d->kcache != NULL)
        tsr_kcache_close(d->kcache);
    tsr_oracle_memo_destroy(d->oracle_memo);
    d->oracle_memo = NULL;
    tsrd_fleet_close(d->fleet);
    d->fleet = NULL;
    if (d->backend != NULL)
        d->bops->close(d->backend);
    d->arbiter = NULL;
    d->kcache = NULL;
    d->backend = NULL;
    tsrd_config_free(&d->config);
}
