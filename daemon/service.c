/*
 * service.c — start-up, the signal handlers and the drain.
 *
 * The daemon context is the first member of the service so that the daemon's
 * idle callback (called when draining and the last request completes) can find
 * the service that has to close the server and the signal handles.
 *
 * systemd: READY=1 goes out only once the backend, the kernel cache and every
 * listener are up and the signal handlers are installed. The watchdog is fed
 * from a loop timer, so a stuck loop stops feeding it, and only while the
 * daemon is ready (not while recovering a device or draining) and every
 * listener has answered its self-probe (net/probe.h) within the last watchdog
 * period: a listener that stops accepting gets the daemon restarted too. The
 * probes run every quarter period (every 5 s without a watchdog, for health
 * alone). Without NOTIFY_SOCKET (not under systemd) sd_notify does nothing.
 *
 * The metrics listener (metrics_listen) starts after the nng listeners and
 * stops before them: scrapes are answered while the daemon drains, and a
 * metrics address that cannot be bound fails start-up like any listener.
 */
#include "service.h"

#include <signal.h>
#include <systemd/sd-daemon.h>
#include <stddef.h>
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/guard.h"
#include "daemon.h"
#include "net/metrics_http.h"
#include "net/probe.h"
#include "net/server.h"
#include "serve/tenant.h"

typedef struct service {
    tsrd_daemon d; /* first: see service_idle */
    tsrd_server *server;
    tsrd_metrics_http *metrics_http; /* NULL without metrics_listen */
    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t watchdog;
    bool watchdog_on;
    uint64_t watchdog_usec; /* systemd's period; 0: no watchdog */
    tsrd_probe *probe;      /* the listeners' self-probes */
    int signals;
    bool closed;
} service;

static void service_close_handles(service *svc)
{
    uv_close((uv_handle_t *)&svc->sigterm, NULL);
    uv_close((uv_handle_t *)&svc->sigint, NULL);
    uv_close((uv_handle_t *)&svc->sighup, NULL);
    if (svc->watchdog_on)
        uv_close((uv_handle_t *)&svc->watchdog, NULL);
}

static void service_shutdown(service *svc)
{
    if (svc->closed)
        return;
    svc->closed = true;
    tsrd_log_info(&svc->d.log, "drained; shutting down");
    tsrd_probe_stop(svc->probe);
    svc->probe = NULL;
    tsrd_metrics_http_close(svc->metrics_http);
    tsrd_server_close(svc->server);
    service_close_handles(svc);
}

static void service_idle(tsrd_daemon *d)
{
    service_shutdown((service *)d);
}

static void service_signal(uv_signal_t *handle, int signum)
{
    service *svc = handle->data;
    if (++svc->signals > 1) {
        tsrd_log_warn(&svc->d.log, "second signal (%d) while draining: exiting now", signum);
        _exit(1);
    }
    tsrd_log_info(&svc->d.log, "signal %d: draining %d request(s) in flight", signum,
                  svc->d.inflight);
    svc->d.draining = true;
    svc->d.idle_fn = service_idle;
    sd_notify(0, "STOPPING=1");
    tsrd_server_stop_accepting(svc->server);
    if (svc->d.inflight == 0)
        service_shutdown(svc);
}

/* SIGHUP: the config file again, of which tenants and quotas take effect at
 * once; connections, sessions and their objects stay. Everything else in the
 * file needs a restart. A file that does not load changes nothing. */
static void service_reload(uv_signal_t *handle, int signum)
{
    service *svc = handle->data;
    tsrd_daemon *d = &svc->d;
    (void)signum;
    if (d->config.config_path == NULL) {
        tsrd_log_warn(&d->log, "SIGHUP: no --config file to reload");
        return;
    }
    sd_notify(0, "RELOADING=1");
    tsrd_config fresh;
    tsr_error err;
    tsr_status st = tsrd_config_defaults(&fresh, &err);
    if (st == TSR_OK)
        st = tsrd_config_load_file(&fresh, d->config.config_path, &err);
    if (st == TSR_OK && (d->tenants == NULL) != (fresh.n_tenants == 0))
        st = tsr_error_set(&err, TSR_CONFLICT,
                           "turning tenants on or off needs a restart (connections are bound "
                           "to the default tenant or to configured ones)");
    if (st == TSR_OK)
        st = tsrd_tenants_apply(d, &fresh, &err);
    if (st == TSR_OK) {
        tsrd_tenant_config *keep = d->config.tenants;
        d->config.tenants = fresh.tenants;
        d->config.n_tenants = fresh.n_tenants;
        fresh.tenants = keep; /* freed with fresh */
        tsrd_log_info(&d->log, "SIGHUP: reloaded %s: %d tenant(s)", d->config.config_path,
                      d->config.n_tenants);
    } else {
        tsrd_log_error(&d->log, "SIGHUP: %s: %s; keeping the running configuration",
                       tsr_status_name(err.code), err.message);
    }
    tsrd_config_free(&fresh);
    sd_notify(0, "READY=1");
}

/* Every listener answered its probe within the last watchdog period. */
static bool service_listeners_answer(const service *svc)
{
    const tsrd_daemon *d = &svc->d;
    uint64_t now = uv_hrtime(), window = svc->watchdog_usec * 1000u;
    if (d->n_endpoints < d->config.n_listen)
        return false;
    for (int i = 0; i < d->n_endpoints; i++)
        if (d->endpoints[i].last_answer_ns == 0 || now - d->endpoints[i].last_answer_ns > window)
            return false;
    return true;
}

static void service_watchdog(uv_timer_t *timer)
{
    service *svc = timer->data;
    if (tsrd_daemon_health(&svc->d) == TSRD_HEALTH_READY && service_listeners_answer(svc))
        sd_notify(0, "WATCHDOG=1");
}

/* Probes every quarter watchdog period (5 s without one), each waiting at
 * most half a period (2 s at most). */
static int service_start_probe(service *svc)
{
    uint64_t period_ms = svc->watchdog_usec / 1000;
    uint64_t interval = period_ms > 0 ? period_ms / 4 : 5000;
    uint64_t timeout = period_ms > 0 ? period_ms / 2 : 2000;
    interval = interval < 10 ? 10 : interval > 5000 ? 5000 : interval;
    timeout = timeout < 50 ? 50 : timeout > 2000 ? 2000 : timeout;
    tsr_error err;
    if (tsrd_probe_start(&svc->d, svc->server, interval, timeout, &svc->probe, &err) != TSR_OK) {
        tsrd_log_error(&svc->d.log, "%s", err.message);
        return -1;
    }
    return 0;
}

static int service_start_signals(service *svc, uv_loop_t *loop)
{
    uv_signal_init(loop, &svc->sigterm);
    uv_signal_init(loop, &svc->sigint);
    uv_signal_init(loop, &svc->sighup);
    svc->sigterm.data = svc->sigint.data = svc->sighup.data = svc;
    int rc = uv_signal_start(&svc->sigterm, service_signal, SIGTERM);
    if (rc == 0)
        rc = uv_signal_start(&svc->sigint, service_signal, SIGINT);
    if (rc == 0)
        rc = uv_signal_start(&svc->sighup, service_reload, SIGHUP);
    uint64_t usec = 0;
    if (rc == 0 && sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        /* Twice per period, as sd_watchdog_enabled(3) advises. */
        uint64_t ms = usec / 2000 > 0 ? usec / 2000 : 1;
        svc->watchdog_usec = usec;
        uv_timer_init(loop, &svc->watchdog);
        svc->watchdog.data = svc;
        svc->watchdog_on = true;
        rc = uv_timer_start(&svc->watchdog, service_watchdog, ms, ms);
    }
    if (rc == 0)
        rc = service_start_probe(svc);
    return rc;
}

int tsrd_service_run(const tsrd_config *config)
{
    service *svc = calloc(1, sizeof *svc);
    uv_loop_t loop;
    tsrd_log log = {.level = config->log_level, .format = config->log_format};
    tsr_error err;
    signal(SIGPIPE, SIG_IGN);
    /* A client's segment shrunk under a copy raises SIGBUS (serve/shm.c). */
    if (tsrd_guard_install() != 0) {
        tsrd_log_error(&log, "cannot install the SIGBUS handler");
        free(svc);
        return 1;
    }
    if (svc == NULL || uv_loop_init(&loop) != 0) {
        tsrd_log_error(&log, "cannot start the event loop");
        free(svc);
        return 1;
    }
    if (tsrd_daemon_init(&svc->d, config, &loop, &err) != TSR_OK) {
        tsrd_log_error(&log, "start-up failed: %s: %s", tsr_status_name(err.code), err.message);
        uv_loop_close(&loop);
        free(svc);
        return 1;
    }
    int status = 0;
    if (tsrd_server_start(&svc->d, &svc->server, &err) != TSR_OK) {
        tsrd_log_error(&log, "start-up failed: %s: %s", tsr_status_name(err.code), err.message);
        status = 1;
    } else if (tsrd_metrics_http_start(&svc->d, &svc->metrics_http, &err) != TSR_OK) {
        tsrd_log_error(&log, "start-up failed: %s: %s", tsr_status_name(err.code), err.message);
        status = 1;
        tsrd_server_close(svc->server);
    } else if (service_start_signals(svc, &loop) != 0) {
        tsrd_log_error(&log, "cannot install signal handlers");
        status = 1;
        tsrd_metrics_http_close(svc->metrics_http);
        tsrd_server_close(svc->server);
        service_close_handles(svc);
    } else {
        tsrd_log_info(
            &log, "tesserad %s ready (protocol %d, nng %s, %d worker threads, %d tenant(s))",
            TSRD_VERSION, TSRD_PROTOCOL_VERSION, nng_version(), config->workers, config->n_tenants);
        sd_notifyf(0, "READY=1\nSTATUS=serving\nMAINPID=%lu", (unsigned long)getpid());
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    tsrd_daemon_fini(&svc->d);
    uv_loop_close(&loop);
    free(svc);
    return status;
}
