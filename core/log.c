/*
 * Logging: one line per call, written with a single write(2) so that lines
 * from several threads (or several node processes sharing a terminal) never
 * interleave mid-line. A line is "HH:MM:SS.mmm LEVEL [prefix] message".
 * Lines longer than the local buffer are truncated, never split.
 */
#include "rumor/core.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_BYTES   2048
#define LOG_PREFIX_BYTES 64

static _Atomic int s_level = RUMOR_LOG_INFO;
static char s_prefix[LOG_PREFIX_BYTES];

static const char *const s_level_names[] = {"error", "warn", "info", "debug"};

void
rumor_log_set_level(rumor_log_level level)
{
    atomic_store(&s_level, (int)level);
}

rumor_err
rumor_log_parse_level(const char *name, rumor_log_level *out)
{
    for (int i = 0; i <= RUMOR_LOG_DEBUG; i++) {
        if (strcasecmp(name, s_level_names[i]) == 0) {
            *out = (rumor_log_level)i;
            return RUMOR_OK;
        }
    }
    return RUMOR_EINVAL;
}

void
rumor_log_set_prefix(const char *prefix)
{
    snprintf(s_prefix, sizeof s_prefix, "%s", prefix ? prefix : "");
}

static size_t
s_format_time(char *out, size_t cap)
{
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    int n = snprintf(out,
                     cap,
                     "%02d:%02d:%02d.%03ld ",
                     tm.tm_hour,
                     tm.tm_min,
                     tm.tm_sec,
                     now.tv_nsec / 1000000L);
    return n > 0 ? (size_t)n : 0;
}

void
rumor_log(rumor_log_level level, const char *fmt, ...)
{
    if ((int)level > atomic_load(&s_level))
        return;
    static const char *const tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    char line[LOG_LINE_BYTES];
    size_t used = s_format_time(line, sizeof line);
    int n = snprintf(line + used,
                     sizeof line - used,
                     s_prefix[0] ? "%s [%s] " : "%s ",
                     tags[level],
                     s_prefix);
    used += n > 0 ? (size_t)n : 0;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(line + used, sizeof line - used, fmt, ap);
    va_end(ap);
    used += n > 0 ? (size_t)n : 0;
    if (used > sizeof line - 2)
        used = sizeof line - 2;
    line[used++] = '\n';
    ssize_t written = write(STDERR_FILENO, line, used);
    (void)written; /* nowhere left to report a failed log write */
}
