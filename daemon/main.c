/*
 * main.c — tesserad's entry point: the command line, the worker pool size,
 * then the service.
 *
 * UV_THREADPOOL_SIZE is read by libuv when the first work item is queued, so
 * it is set here, before any loop exists; it is the one process-wide setting
 * tesserad makes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nng/nng.h>
#include <unistd.h>

#include "config.h"
#include "backend/isolated/worker.h"
#include "service.h"

int main(int argc, char **argv)
{
    /* The isolated CUDA backend's worker is this program, started by itself. */
    if (argc > 1 && strcmp(argv[1], TSRD_DEVICE_WORKER_ARG) == 0)
        return tsrd_device_worker_main(argc, argv);
    tsrd_config config;
    tsrd_config_action action;
    tsr_error err;
    if (tsrd_config_from_args(&config, argc, argv, &action, &err) != TSR_OK) {
        fprintf(stderr, "tesserad: %s\n(see tesserad --help)\n", err.message);
        tsrd_config_free(&config);
        return 2;
    }
    if (action == TSRD_CONFIG_HASH_TOKEN) {
        /* The token comes on stdin so that it never shows in ps or a shell history. */
        char token[4096];
        size_t len = fread(token, 1, sizeof token, stdin);
        tsrd_config_free(&config);
        if (len == 0 || len == sizeof token) {
            fprintf(stderr, "tesserad: --hash-token: give a token of 1 to 4095 bytes on stdin\n");
            return 2;
        }
        char hex[65];
        tsrd_token_hash(token, len, hex);
        printf("%s\n", hex);
        return 0;
    }
    if (action != TSRD_CONFIG_SERVE) {
        if (action == TSRD_CONFIG_HELP)
            fputs(tsrd_config_usage(), stdout);
        else
            printf("tesserad %s (protocol %d, nng %s)\n", TSRD_VERSION, TSRD_PROTOCOL_VERSION,
                   nng_version());
        tsrd_config_free(&config);
        return 0;
    }
    if (config.workers <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        config.workers = cpus > 0 ? (int)(cpus < TSRD_MAX_WORKERS ? cpus : TSRD_MAX_WORKERS) : 4;
    }
    /* One thread more than the jobs the pool runs at once (work_slots): large
     * requests are decoded there and never wait behind long compiles. */
    char workers[16];
    snprintf(workers, sizeof workers, "%d",
             config.workers < TSRD_MAX_WORKERS ? config.workers + 1 : TSRD_MAX_WORKERS);
    setenv("UV_THREADPOOL_SIZE", workers, 1);
    int status = tsrd_service_run(&config);
    tsrd_config_free(&config);
    return status;
}
