/*
 * handlers_health.c — the health request.
 *
 * Answered on the loop from three flags the loop owns, without tenant
 * attribution (see dispatch_validate), so a liveness or readiness probe needs
 * no token and never waits behind work; it also lists the listeners whose
 * self-probe failed, and the fleet cache while it is degraded (where Redis is
 * and why it fails to a caller that may see all: tsrd_tenant_caller_sees_all),
 * and every device's state, naming one that does not serve in degraded.
 */
#include <stdio.h>

#include "handlers/common.h"
#include "handlers/handlers.h"
#include "serve/fleet.h"

static tsr_status health_execute(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    Tessera__V1__HealthReply *r = &job->body.health;
    tessera__v1__health_reply__init(r);
    r->state = (Tessera__V1__HealthState)tsrd_daemon_health(d);
    r->uptime_ms = (uv_hrtime() - d->start_ns) / 1000000;
    r->sessions = (uint32_t)d->n_sessions;
    r->recoveries = d->recoveries;
    /* Listeners whose self-probe failed (net/probe.c), as "URL: reason". */
    char **failing = tsrd_job_alloc(job, (size_t)TSRD_MAX_LISTEN * sizeof *failing);
    for (int i = 0; failing != NULL && i < d->n_endpoints; i++) {
        const tsrd_endpoint_health *e = &d->endpoints[i];
        if (e->answering)
            continue;
        char *line = tsrd_job_alloc(job, sizeof e->url + sizeof e->error + 2);
        if (line == NULL)
            break;
        snprintf(line, sizeof e->url + sizeof e->error + 2, "%s: %s", e->url, e->error);
        failing[r->n_failing_endpoints++] = line;
    }
    r->failing_endpoints = failing;
    /* The fleet cache while Redis fails: served without, still ready. Where
     * Redis is and why it fails only to a caller that may see all: a probe
     * carries no token. */
    if (d->fleet != NULL) {
        tsrd_fleet_stats fs;
        tsrd_fleet_get_stats(d->fleet, &fs);
        size_t size = sizeof fs.degraded_why + 16;
        char **degraded = fs.degraded ? tsrd_job_alloc(job, sizeof *degraded) : NULL;
        char *line = degraded != NULL ? tsrd_job_alloc(job, size) : NULL;
        if (line != NULL) {
            snprintf(line, size, "fleet cache: %s",
                     job->sees_all ? fs.degraded_why : TSRD_FLEET_DEGRADED_SHORT);
            degraded[0] = line;
            r->degraded = degraded;
            r->n_degraded = 1;
        }
    }
    /* Each device's state; one not serving is named in degraded as well. */
    size_t n_dev = d->n_devices > 0 ? (size_t)d->n_devices : 1;
    Tessera__V1__DeviceHealth *devs = tsrd_job_alloc(job, n_dev * sizeof *devs);
    Tessera__V1__DeviceHealth **dev_ptrs = tsrd_job_alloc(job, n_dev * sizeof *dev_ptrs);
    char **all_degraded = tsrd_job_alloc(job, (r->n_degraded + n_dev) * sizeof *all_degraded);
    if (devs != NULL && dev_ptrs != NULL && all_degraded != NULL) {
        for (size_t j = 0; j < r->n_degraded; j++)
            all_degraded[j] = r->degraded[j];
        r->degraded = all_degraded;
        r->devices = dev_ptrs;
        for (int i = 0; i < d->n_devices; i++) {
            tsrd_device_state state = tsrd_device_state_of(d, i);
            tessera__v1__device_health__init(&devs[i]);
            devs[i].index = (uint32_t)i;
            devs[i].state = (Tessera__V1__DeviceState)(state + 1);
            devs[i].recoveries = d->devrec[i].recoveries;
            devs[i].faults = d->devrec[i].faults;
            dev_ptrs[r->n_devices++] = &devs[i];
            char *line = state != TSRD_DEVICE_SERVING ? tsrd_job_alloc(job, 96) : NULL;
            if (line == NULL)
                continue;
            snprintf(line, 96, "device %d: %s", i,
                     state == TSRD_DEVICE_RECOVERING
                         ? "recovering after a fault"
                         : "lost: every rebuild failed; restart tesserad to bring it back");
            all_degraded[r->n_degraded++] = line;
        }
    }
    TSRD_JOB_REPLY(job, health, HEALTH);
    return TSR_OK;
}

const tsrd_handler tsrd_handler_health = {.execute = health_execute};
