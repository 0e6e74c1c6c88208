/*
 * log_test.c — the three line forms, and "auto" choosing the journal's form
 * exactly when stderr is the stream $JOURNAL_STREAM names.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

/* stderr goes to a fresh file for the test; log_take returns what was written. */
static char log_path[] = "/tmp/log-test-XXXXXX";
static int saved_stderr = -1;

static void log_capture(void)
{
    int fd = mkstemp(log_path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    cr_assert_geq(dup2(fd, STDERR_FILENO), 0);
    close(fd);
}

static void log_release(void)
{
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    unlink(log_path);
}

static char *log_take(void)
{
    fflush(stderr);
    FILE *f = fopen(log_path, "r");
    cr_assert_not_null(f);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

TestSuite(log, .init = log_capture, .fini = log_release);

Test(log, journal_lines_carry_syslog_priorities)
{
    tsrd_log log = {.level = TSRD_LOG_DEBUG, .format = TSRD_LOG_FORMAT_JOURNAL};
    tsrd_log_error(&log, "e %d", 1);
    tsrd_log_warn(&log, "w");
    tsrd_log_info(&log, "i");
    tsrd_log_debug(&log, "d");
    cr_expect_str_eq(log_take(), "<3>e 1\n<4>w\n<6>i\n<7>d\n");
}

Test(log, json_lines_are_objects_with_time_level_and_message)
{
    tsrd_log log = {.level = TSRD_LOG_INFO, .format = TSRD_LOG_FORMAT_JSON};
    tsrd_log_warn(&log, "a \"quoted\"\tline");
    tsrd_log_debug(&log, "dropped");
    const char *text = log_take();
    cr_assert_eq(strncmp(text, "{\"time\":\"", 9), 0, "%s", text);
    const char *rest =
        strstr(text, "Z\",\"level\":\"warn\",\"message\":\"a \\\"quoted\\\"\\tline\"}\n");
    cr_expect_not_null(rest, "%s", text);
    cr_expect_eq(strchr(text, '\n'), text + strlen(text) - 1, "one line: %s", text);
}

Test(log, text_lines_start_with_the_time_and_level)
{
    tsrd_log log = {.level = TSRD_LOG_INFO, .format = TSRD_LOG_FORMAT_TEXT};
    tsrd_log_info(&log, "hello");
    const char *text = log_take();
    int y, mo, d, h, mi, s, ms;
    cr_assert_eq(sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &y, &mo, &d, &h, &mi, &s, &ms), 7,
                 "%s", text);
    cr_expect_str_eq(text + 24, " info  hello\n");
}

Test(log, auto_takes_the_journal_form_only_on_the_journal_stream)
{
    struct stat sb;
    cr_assert_eq(fstat(STDERR_FILENO, &sb), 0);
    char stream[64];
    snprintf(stream, sizeof stream, "%llu:%llu", (unsigned long long)sb.st_dev,
             (unsigned long long)sb.st_ino);
    setenv("JOURNAL_STREAM", stream, 1);
    cr_expect_eq(tsrd_log_format_resolve(TSRD_LOG_FORMAT_AUTO), TSRD_LOG_FORMAT_JOURNAL);
    snprintf(stream, sizeof stream, "%llu:%llu", (unsigned long long)sb.st_dev,
             (unsigned long long)sb.st_ino + 1);
    setenv("JOURNAL_STREAM", stream, 1);
    cr_expect_eq(tsrd_log_format_resolve(TSRD_LOG_FORMAT_AUTO), TSRD_LOG_FORMAT_TEXT);
    unsetenv("JOURNAL_STREAM");
    cr_expect_eq(tsrd_log_format_resolve(TSRD_LOG_FORMAT_AUTO), TSRD_LOG_FORMAT_TEXT);
    cr_expect_eq(tsrd_log_format_resolve(TSRD_LOG_FORMAT_JSON), TSRD_LOG_FORMAT_JSON);
}

Test(log, format_names_parse_exactly)
{
    tsrd_log_format f = TSRD_LOG_FORMAT_TEXT;
    cr_expect(tsrd_log_format_parse("json", &f));
    cr_expect_eq(f, TSRD_LOG_FORMAT_JSON);
    cr_expect_not(tsrd_log_format_parse("JSON", &f));
    cr_expect_not(tsrd_log_format_parse("", &f));
    cr_expect_eq(f, TSRD_LOG_FORMAT_JSON, "untouched on failure");
}
