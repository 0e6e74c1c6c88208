/*
 * main.c — tessera-cli, the command line of tesserad (README.md, "Usage";
 * man tessera-cli(1) from deploy/man).
 *
 *   tessera-cli [--url URL] [--json] [--timeout MS] COMMAND ...
 *
 * Parses the global options (anywhere on the line, as --opt VALUE or
 * --opt=VALUE), dispatches to the command table in commands.c and closes the
 * client the command connected.
 */
#include <nng/nng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char main_usage[] =
    "usage: tessera-cli [--url URL] [--token TOKEN] [--json] [--timeout MS] COMMAND ...\n"
    "       tessera-cli --version\n"
    "\n"
    "commands:\n"
    "  ping                      check that the daemon answers\n"
    "  health                    ready, recovering or draining (exit 0 only when ready)\n"
    "  info                      daemon version, backend, devices and their load\n"
    "  stats [--prometheus]      counters and candidate statistics\n"
    "  cache ls | cache evict KEY|PREFIX|all | cache warm REGION.json...\n"
    "  compile REGION.json... [--arch sm_90a] [--force NAME] [--policy tier|measure] "
    "[--no-verify]\n"
    "  run REGION.json -i NAME=FILE.npy ... -o OUT.npy [--force NAME] "
    "[--policy tier|measure] [--device N]\n"
    "  verify REGION.json [--candidate NAME] [--seed N]\n"
    "  candidates REGION.json\n"
    "\n"
    "options:\n"
    "  --url URL      daemon endpoint (default $TESSERA_URL, else " TSR_CLIENT_DEFAULT_URL ")\n"
    "  --token TOKEN  bearer token of a tenant (default $TESSERA_TOKEN)\n"
    "  --json         print machine-readable JSON on stdout\n"
    "  --timeout MS   per-request timeout in milliseconds (default 30000)\n"
    "Options may stand anywhere on the line and take their value as --opt VALUE or\n"
    "--opt=VALUE; an argument '--' ends the options.\n"
    "\n"
    "TESSERA_FORCE=kind=name,... forces candidates. 'tessera-cli COMMAND --help' for more.\n"
    "exit status: 0 ok, 2 usage, 3 daemon unreachable, 4 daemon error, 5 local file error\n";

static bool main_parse_ms(const char *s, int *out);

/* Runs the command args[0] with its arguments (n of them in all). */
static int main_run(cli *c, int n, char **args)
{
    if (n == 0) {
        fputs(main_usage, stderr);
        return CLI_EXIT_USAGE;
    }
    if (cli_is_help(args[0])) {
        fputs(main_usage, stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(args[0], "--version") == 0) {
        printf("tessera-cli %s (protocol %d, nng %s)\n", TSR_CLIENT_VERSION,
               TSR_CLIENT_PROTOCOL_VERSION, nng_version());
        return CLI_EXIT_OK;
    }
    if (args[0][0] == '-')
        return cli_fail_usage(NULL, "unknown or incomplete option '%s'", args[0]);
    const cli_command *cmd = cli_commands;
    while (cmd->name && strcmp(cmd->name, args[0]) != 0)
        cmd++;
    if (!cmd->name)
        return cli_fail_usage(NULL, "unknown command '%s'", args[0]);
    for (int j = 1; j < n; j++) {
        if (cli_is_help(args[j])) {
            fputs(cmd->usage, stdout);
            return CLI_EXIT_OK;
        }
    }
    return cmd->run(c, n, args);
}

static bool main_parse_ms(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0 || v > 24L * 3600 * 1000)
        return false;
    *out = (int)v;
    return true;
}

/* The options of tessera-cli itself, which may stand anywhere on the line. */
static bool main_is_global(const char *a, bool *takes_value)
{
    *takes_value =
        strcmp(a, "--url") == 0 || strcmp(a, "--token") == 0 || strcmp(a, "--timeout") == 0;
    return *takes_value || strcmp(a, "--json") == 0;
}

/* Rewrites argv[1..] into args: --opt=VALUE becomes --opt VALUE, and the global
 * options are taken out into c wherever they stand (up to a "--", after which
 * everything is an argument). args[0] is then the command, if any. Returns the
 * count, or -1 after printing a usage error. */
static int main_arguments(cli *c, int argc, char **argv, char **args, int *exit_code)
{
    int n = 0;
    bool options = true;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        char *eq = options && strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        char *value = NULL;
        if (options && strcmp(a, "--") == 0) {
            options = false;
            continue;
        }
        if (eq != NULL) {
            *eq = '\0';
            value = eq + 1;
        }
        bool takes_value = false;
        if (options && main_is_global(a, &takes_value)) {
            if (takes_value && value == NULL) {
                if (i + 1 >= argc) {
                    *exit_code = cli_fail_usage(NULL, "%s needs a value", a);
                    return -1;
                }
                value = argv[++i];
            } else if (!takes_value && value != NULL) {
                *exit_code = cli_fail_usage(NULL, "%s takes no value", a);
                return -1;
            }
            if (strcmp(a, "--json") == 0) {
                c->json = true;
            } else if (strcmp(a, "--token") == 0) {
                c->token = value;
            } else if (strcmp(a, "--url") == 0) {
                c->url = value;
            } else if (!main_parse_ms(value, &c->timeout_ms)) {
                *exit_code = cli_fail_usage(
                    NULL, "--timeout wants a positive number of ms, not '%s'", value);
                return -1;
            }
            continue;
        }
        args[n++] = a;
        if (value != NULL)
            args[n++] = value;
    }
    args[n] = NULL;
    return n;
}

int main(int argc, char **argv)
{
    cli c = {0};
    /* Every argument may split in two (--opt=VALUE); one more for the NULL. */
    char **args = calloc((size_t)argc * 2 + 1, sizeof *args);
    if (args == NULL) {
        fputs("tessera-cli: out of memory\n", stderr);
        return CLI_EXIT_FILE;
    }
    int exit_code = CLI_EXIT_USAGE;
    int n = main_arguments(&c, argc, argv, args, &exit_code);
    int rc = n < 0 ? exit_code : main_run(&c, n, args);
    free(args);
    tsr_client_close(c.client);
    return rc;
}
