/*
 * common.c — what every command of tessera-cli uses: connecting, reporting a
 * failure with its exit code, printing JSON.
 *
 * The mapping from failures to exit codes lives here only, so every command
 * reports errors the same way. main.c and commands.c both use this file; it uses
 * neither.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

bool cli_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int cli_fail_call(const tsr_error *err)
{
    fprintf(stderr, "tessera-cli: %s: %s\n", tsr_status_name(err->code), err->message);
    if (err->code == TSR_UNAVAILABLE || err->code == TSR_TIMEOUT)
        return CLI_EXIT_UNREACHABLE;
    return CLI_EXIT_DAEMON;
}

int cli_fail_file(const tsr_error *err)
{
    fprintf(stderr, "tessera-cli: %s: %s\n", tsr_status_name(err->code), err->message);
    return CLI_EXIT_FILE;
}

int cli_fail_usage(const char *command, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tessera-cli: %s: %s\n", tsr_status_name(TSR_INVALID_ARGUMENT), msg);
    fprintf(stderr, "try 'tessera-cli %s%s--help'\n", command ? command : "", command ? " " : "");
    return CLI_EXIT_USAGE;
}

int cli_connect(cli *c)
{
    if (c->client)
        return CLI_EXIT_OK;
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = c->url;
    opts.timeout_ms = c->timeout_ms;
    opts.auth = c->token;
    tsr_error err;
    tsr_status st = tsr_client_connect(&opts, &c->client, &err);
    if (st == TSR_OK)
        return CLI_EXIT_OK;
    if (st == TSR_INVALID_ARGUMENT) {
        fprintf(stderr, "tessera-cli: %s: %s\n", tsr_status_name(st), err.message);
        return CLI_EXIT_USAGE;
    }
    return cli_fail_call(&err);
}

void cli_json_print(cJSON *doc)
{
    char *text = cJSON_Print(doc);
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        cJSON_free(text);
    }
    cJSON_Delete(doc);
}
