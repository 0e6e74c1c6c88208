/*
 * log.h — tesserad's log lines on stderr.
 *
 * One line per event, in one of three forms:
 *   text     an ISO-8601 UTC timestamp with milliseconds, the level and the text
 *            ("2026-12-01T10:20:30.123Z info  listening on ipc:///run/...");
 *   journal  the text behind the syslog priority journald reads ("<6>listening
 *            on ..."; journald stamps the time), so `journalctl -p warning` works;
 *   json     one JSON object per line: {"time": ..., "level": ..., "message": ...}.
 * "auto" takes journal when stderr is the journal's stream (systemd's
 * JOURNAL_STREAM names it), else text. The logger is a small value the daemon
 * context owns; it holds no file of its own and writes each line with one
 * fputs, so lines from worker threads do not interleave.
 *
 * Threading: tsrd_log_write may be called from any thread; the level is set once
 * at start-up, before other threads exist. Blocking: writes to stderr.
 */
#ifndef TESSERAD_LOG_H
#define TESSERAD_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum tsrd_log_level {
    TSRD_LOG_ERROR = 0,
    TSRD_LOG_WARN = 1,
    TSRD_LOG_INFO = 2,
    TSRD_LOG_DEBUG = 3,
} tsrd_log_level;

typedef enum tsrd_log_format {
    TSRD_LOG_FORMAT_AUTO = 0, /* journal under journald, else text */
    TSRD_LOG_FORMAT_TEXT = 1,
    TSRD_LOG_FORMAT_JOURNAL = 2,
    TSRD_LOG_FORMAT_JSON = 3,
} tsrd_log_format;

typedef struct tsrd_log {
    tsrd_log_level level;   /* lines above this level are dropped; errors always pass */
    tsrd_log_format format; /* AUTO is resolved when a line is written */
} tsrd_log;

/* "error", "warn", "info", "debug". */
const char *tsrd_log_level_name(tsrd_log_level level);
/* Exact lower-case names; false (and *out untouched) for anything else. */
bool tsrd_log_level_parse(const char *name, tsrd_log_level *out);

/* "auto", "text", "journal", "json"; false (and *out untouched) for anything else. */
bool tsrd_log_format_parse(const char *name, tsrd_log_format *out);
/* AUTO resolved for this process: JOURNAL when stderr is the stream that
 * $JOURNAL_STREAM ("DEVICE:INODE") names, else TEXT; other formats as given. */
tsrd_log_format tsrd_log_format_resolve(tsrd_log_format format);

/* True when a line at this level would be written (to skip formatting work):
 * inline, as the request path asks it for every request. */
static inline bool tsrd_log_enabled(const tsrd_log *log, tsrd_log_level level)
{
    return level == TSRD_LOG_ERROR || log == NULL || level <= log->level;
}

void tsrd_log_write(const tsrd_log *log, tsrd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define tsrd_log_error(log, ...) tsrd_log_write((log), TSRD_LOG_ERROR, __VA_ARGS__)
#define tsrd_log_warn(log, ...) tsrd_log_write((log), TSRD_LOG_WARN, __VA_ARGS__)
/* Info and debug lines are dropped before their arguments are computed: the
 * request path logs every request at debug. */
#define tsrd_log_info(log, ...)                                                                    \
    do {                                                                                           \
        if (tsrd_log_enabled((log), TSRD_LOG_INFO))                                                \
            tsrd_log_write((log), TSRD_LOG_INFO, __VA_ARGS__);                                     \
    } while (0)
#define tsrd_log_debug(log, ...)                                                                   \
    do {                                                                                           \
        if (tsrd_log_enabled((log), TSRD_LOG_DEBUG))                                               \
            tsrd_log_write((log), TSRD_LOG_DEBUG, __VA_ARGS__);                                    \
    } while (0)

#endif
