/*
 * handlers_health.c — the health request.
 *
 * Answered on the loop from three flags the loop owns, without tenant
 * attribution (see dispatch_validate), so a liveness or readiness probe needs
 * no token and never waits behind work.
 */
#include "handlers/handlers.h"

static tsr_status health_execute(tsrd_job *job)
{
    tsrd_daemon *d = job->d;
    Tessera__V1__HealthReply *r = &job->body.health;
    Tessera__V1__HealthReply init = TESSERA__V1__HEALTH_REPLY__INIT;
    *r = init;
    r->state = d->draining     ? TESSERA__V1__HEALTH_STATE__HEALTH_STATE_DRAINING
               : d->recovering ? TESSERA__V1__HEALTH_STATE__HEALTH_STATE_RECOVERING
                               : TESSERA__V1__HEALTH_STATE__HEALTH_STATE_READY;
    r->uptime_ms = (uv_hrtime() - d->start_ns) / 1000000;
    r->sessions = (uint32_t)d->n_sessions;
    r->recoveries = d->recoveries;
    job->reply.body_case = TESSERA__V1__REPLY__BODY_HEALTH;
    job->reply.health = r;
    return TSR_OK;
}

const tsrd_handler tsrd_handler_health = {.execute = health_execute};
