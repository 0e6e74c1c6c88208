/*
 * log.c — timestamped, levelled lines on stderr.
 *
 * The line is formatted into a local buffer first and written with a single
 * fputs, because stdio locks per call: one call per line keeps lines from
 * concurrent worker threads whole.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const log_level_names[] = {"error", "warn", "info", "debug"};

const char *tsrd_log_level_name(tsrd_log_level level)
{
    if ((unsigned)level > TSRD_LOG_DEBUG)
        return "?";
    return log_level_names[level];
}

bool tsrd_log_level_parse(const char *name, tsrd_log_level *out)
{
    for (int i = 0; i <= TSRD_LOG_DEBUG; i++) {
        if (strcmp(name, log_level_names[i]) == 0) {
            *out = (tsrd_log_level)i;
            return true;
        }
    }
    return false;
}

bool tsrd_log_enabled(const tsrd_log *log, tsrd_log_level level)
{
    return level == TSRD_LOG_ERROR || log == NULL || level <= log->level;
}

void tsrd_log_write(const tsrd_log *log, tsrd_log_level level, const char *fmt, ...)
{
    if (!tsrd_log_enabled(log, level))
        return;
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now.tv_nsec / 1000000, tsrd_log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
