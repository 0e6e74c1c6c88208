/*
 * main.c — tessera-cli, the command line of tesserad (README.md, "Usage";
 * man tessera-cli(1) from deploy/man).
 *
 *   tessera-cli [--url URL] [--json] [--timeout MS] COMMAND ...
 *
 * Parses the global options, dispatches to the command table in commands.c and
 * closes the client the command connected.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char main_usage[] =
    "usage: tessera-cli [--url URL] [--token TOKEN] [--json] [--timeout MS] COMMAND ...\n"
    "\n"
    "commands:\n"
    "  ping                      check that the daemon answers\n"
    "  health                    ready, recovering or draining (exit 0 only when ready)\n"
    "  info                      daemon version, backend and devices\n"
    "  stats [--prometheus]      counters and candidate statistics\n"
    "  cache ls | cache evict KEY\n"
    "  compile REGION.json [--arch sm_90a] [--force NAME] [--policy tier|measure] "
    "[--no-verify]\n"
    "  run REGION.json -i NAME=FILE.npy ... -o OUT.npy [--force NAME] "
    "[--policy tier|measure]\n"
    "  verify REGION.json [--candidate NAME] [--seed N]\n"
    "  candidates REGION.json\n"
    "\n"
    "options:\n"
    "  --url URL      daemon endpoint (default $TESSERA_URL, else " TSR_CLIENT_DEFAULT_URL ")\n"
    "  --token TOKEN  bearer token of a tenant (default $TESSERA_TOKEN)\n"
    "  --json         print machine-readable JSON on stdout\n"
    "  --timeout MS   per-request timeout in milliseconds (default 30000)\n"
    "\n"
    "TESSERA_FORCE=kind=name,... forces candidates. 'tessera-cli COMMAND --help' for more.\n"
    "exit status: 0 ok, 2 usage, 3 daemon unreachable, 4 daemon error, 5 local file error\n";

static bool main_parse_ms(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0 || v > 24L * 3600 * 1000)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    cli c = {0};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(main_usage, stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--json") == 0) {
            c.json = true;
        } else if (strcmp(a, "--token") == 0 && i + 1 < argc) {
            c.token = argv[++i];
        } else if (strcmp(a, "--url") == 0 && i + 1 < argc) {
            c.url = argv[++i];
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            if (!main_parse_ms(argv[++i], &c.timeout_ms))
                return cli_fail_usage(NULL, "--timeout wants a positive number of ms, not '%s'",
                                      argv[i]);
        } else {
            return cli_fail_usage(NULL, "unknown or incomplete option '%s'", a);
        }
    }
    if (i >= argc) {
        fputs(main_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    const cli_command *cmd = cli_commands;
    while (cmd->name && strcmp(cmd->name, argv[i]) != 0)
        cmd++;
    if (!cmd->name)
        return cli_fail_usage(NULL, "unknown command '%s'", argv[i]);
    for (int j = i + 1; j < argc; j++) {
        if (cli_is_help(argv[j])) {
            fputs(cmd->usage, stdout);
            return CLI_EXIT_OK;
        }
    }
    int rc = cmd->run(&c, argc - i, argv + i);
    tsr_client_close(c.client);
    return rc;
}
