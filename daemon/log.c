/*
 * log.c — levelled lines on stderr: text, journald priorities, or JSON.
 *
 * The line is formatted into a local buffer first and written with a single
 * fputs, because stdio locks per call: one call per line keeps lines from
 * concurrent worker threads whole.
 */
#include "log.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

static const char *const log_format_names[] = {"auto", "text", "journal", "json"};

bool tsrd_log_format_parse(const char *name, tsrd_log_format *out)
{
    for (int i = 0; i <= TSRD_LOG_FORMAT_JSON; i++) {
        if (strcmp(name, log_format_names[i]) == 0) {
            *out = (tsrd_log_format)i;
            return true;
        }
    }
    return false;
}

tsrd_log_format tsrd_log_format_resolve(tsrd_log_format format)
{
    if (format != TSRD_LOG_FORMAT_AUTO)
        return format;
    const char *stream = getenv("JOURNAL_STREAM");
    unsigned long long dev = 0, ino = 0;
    struct stat sb;
    if (stream != NULL && sscanf(stream, "%llu:%llu", &dev, &ino) == 2 &&
        fstat(STDERR_FILENO, &sb) == 0 && (unsigned long long)sb.st_dev == dev &&
        (unsigned long long)sb.st_ino == ino)
        return TSRD_LOG_FORMAT_JOURNAL;
    return TSRD_LOG_FORMAT_TEXT;
}

void tsrd_log_write(const tsrd_log *log, tsrd_log_level level, const char *fmt, ...)
{
    if (!tsrd_log_enabled(log, level))
        return;
    tsrd_log_format format = tsrd_log_format_resolve(log != NULL ? log->format : 0);
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    char stamp[64];
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* syslog priorities: err, warning, info, debug. */
    static const int priority[] = {3, 4, 6, 7};
    char line[4096 + 64];
    if (format == TSRD_LOG_FORMAT_JOURNAL) {
        snprintf(line, sizeof line, "<%d>%s\n", priority[level], text);
    } else if (format == TSRD_LOG_FORMAT_JSON) {
        cJSON *o = cJSON_CreateObject();
        char *json = NULL;
        if (o != NULL && cJSON_AddStringToObject(o, "time", stamp) != NULL &&
            cJSON_AddStringToObject(o, "level", tsrd_log_level_name(level)) != NULL &&
            cJSON_AddStringToObject(o, "message", text) != NULL)
            json = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        snprintf(line, sizeof line, "%s\n",
                 json != NULL ? json : "{\"level\":\"error\",\"message\":\"log: out of memory\"}");
        cJSON_free(json);
    } else {
        snprintf(line, sizeof line, "%s %-5s %s\n", stamp, tsrd_log_level_name(level), text);
    }
    fputs(line, stderr);
}
