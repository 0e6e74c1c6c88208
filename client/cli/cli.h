/*
 * cli.h — what the files of tessera-cli share.
 *
 * main.c parses the global options and finds the command in the table;
 * commands.c holds one function per command; common.c holds what they share
 * (connecting, mapping failures to exit codes, printing JSON). Every command
 * prints either short lines for a person or, with --json, one JSON document on
 * stdout; errors always go to stderr as "tessera-cli: STATUS_NAME: message".
 * The CLI is single-threaded.
 */
#ifndef TESSERA_CLI_H
#define TESSERA_CLI_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "tessera/client.h"

/* Exit codes (the CLI's contract, documented in README.md). */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_USAGE = 2,       /* bad command line */
    CLI_EXIT_UNREACHABLE = 3, /* the daemon could not be reached or did not answer */
    CLI_EXIT_DAEMON = 4,      /* the daemon answered with an error status */
    CLI_EXIT_FILE = 5,        /* a local file: region JSON invalid, .npy unreadable */
};

typedef struct cli {
    const char *url; /* NULL: TESSERA_URL or the default */
    bool json;
    int timeout_ms;     /* 0: the client's default */
    const char *token;  /* --token; NULL: $TESSERA_TOKEN */
    tsr_client *client; /* connected on first use by cli_connect; main closes it */
    /* compile over several regions and cache warm: the region being compiled,
     * one short line per region (brief), and the JSON array being printed. */
    const char *region_path;
    bool brief;
    bool json_array;
    int json_count;
} cli;

typedef struct cli_command {
    const char *name;
    int (*run)(cli *c, int argc, char **argv); /* argv[0] is the command name */
    const char *usage;                         /* the --help text */
} cli_command;

/* The command table (commands.c), terminated by a row with a NULL name. */
extern const cli_command cli_commands[];

/* The helpers below live in common.c. */

/* Connects c->client if not yet connected. Returns CLI_EXIT_OK or an exit code
 * after printing the error. */
int cli_connect(cli *c);

/* Prints "tessera-cli: NAME: message" and returns the exit code for a failed
 * client call: UNREACHABLE for UNAVAILABLE and TIMEOUT, DAEMON otherwise. */
int cli_fail_call(const tsr_error *err);
/* Same for a local file failure (exit 5). */
int cli_fail_file(const tsr_error *err);
/* Prints "tessera-cli: COMMAND: message" plus a hint and returns CLI_EXIT_USAGE. */
int cli_fail_usage(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints a JSON document on stdout and deletes it. */
void cli_json_print(cJSON *doc);

/* True when argv[i] is "--help" or "-h". */
bool cli_is_help(const char *arg);

#endif
