/*
 * service.c — start-up, the signal handlers and the drain.
 *
 * The daemon context is the first member of the service so that the daemon's
 * idle callback (called when draining and the last request completes) can find
 * the service that has to close the server and the signal handles.
 */
#include "service.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"
#include "server.h"

typedef struct service {
    tsrd_daemon d; /* first: see service_idle */
    tsrd_server *server;
    uv_signal_t sigterm, sigint;
    int signals;
    bool closed;
} service;

static void service_shutdown(service *svc)
{
    if (svc->closed)
        return;
    svc->closed = true;
    tsrd_log_info(&svc->d.log, "drained; shutting down");
    tsrd_server_close(svc->server);
    uv_close((uv_handle_t *)&svc->sigterm, NULL);
    uv_close((uv_handle_t *)&svc->sigint, NULL);
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
    tsrd_server_stop_accepting(svc->server);
    if (svc->d.inflight == 0)
        service_shutdown(svc);
}

static int service_start_signals(service *svc, uv_loop_t *loop)
{
    uv_signal_init(loop, &svc->sigterm);
    uv_signal_init(loop, &svc->sigint);
    svc->sigterm.data = svc->sigint.data = svc;
    int rc = uv_signal_start(&svc->sigterm, service_signal, SIGTERM);
    if (rc == 0)
        rc = uv_signal_start(&svc->sigint, service_signal, SIGINT);
    return rc;
}

int tsrd_service_run(const tsrd_config *config)
{
    service *svc = calloc(1, sizeof *svc);
    uv_loop_t loop;
    tsrd_log log = {.level = config->log_level};
    tsr_error err;
    signal(SIGPIPE, SIG_IGN);
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
    } else if (service_start_signals(svc, &loop) != 0) {
        tsrd_log_error(&log, "cannot install signal handlers");
        status = 1;
        tsrd_server_close(svc->server);
        uv_close((uv_handle_t *)&svc->sigterm, NULL);
        uv_close((uv_handle_t *)&svc->sigint, NULL);
    } else {
        tsrd_log_info(&log, "tesserad %s ready (protocol %d, %d worker threads)", TSRD_VERSION,
                      TSRD_PROTOCOL_VERSION, config->workers);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    tsrd_daemon_fini(&svc->d);
    uv_loop_close(&loop);
    free(svc);
    return status;
}
