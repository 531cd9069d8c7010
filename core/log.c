/*
 * Logging: one line per call, written with a single write(2) so that lines
 * from several threads (or several node processes sharing a terminal) never
 * interleave mid-line. A line is "HH:MM:SS.mmm LEVEL [prefix] message".
 * Lines longer than the local buffer are truncated, never split. The
 * message is escaped (rumor_escape): it may quote a peer's bytes.
 *
 * Rate-limited lines (rumor_log_limited) are for what a stranger can
 * provoke as often as he likes (a refused handshake is one connect away):
 * a small table of keys, each with the start of its interval, the count
 * held back and the last line held back, so that the count is written
 * even when the flood stops (rumor_log_limited_flush). The key, not the
 * text, says what is alike, so the caller decides (reason and address).
 * A flood of distinct keys (many addresses) fills the table, and then the
 * keys without a slot share the last one until a slot's interval passes:
 * at most one line per slot per interval, never one per event.
 */
#include "rumor/core.h"

#include <pthread.h>
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

/* Writes "time LEVEL [prefix] text suffix" with one write(2); text (len
 * bytes) is escaped, suffix is this file's own. */
static void
s_write_line(rumor_log_level level,
             const char *text,
             size_t len,
             const char *suffix)
{
    static const char *const tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
    char line[LOG_LINE_BYTES];
    size_t used = s_format_time(line, sizeof line);
    int n = snprintf(line + used,
                     sizeof line - used,
                     s_prefix[0] ? "%s [%s] " : "%s ",
                     tags[level],
                     s_prefix);
    used += n > 0 ? (size_t)n : 0;
    used += rumor_escape(line + used, sizeof line - used, text, len);
    n = snprintf(line + used, sizeof line - used, "%s", suffix);
    used += n > 0 ? (size_t)n : 0;
    if (used > sizeof line - 2)
        used = sizeof line - 2;
    line[used++] = '\n';
    ssize_t written = write(STDERR_FILENO, line, used);
    (void)written; /* nowhere left to report a failed log write */
}

void
rumor_log(rumor_log_level level, const char *fmt, ...)
{
    if ((int)level > atomic_load(&s_level))
        return;
    char text[LOG_LINE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t len = n < 0                     ? 0
                 : (size_t)n < sizeof text ? (size_t)n
                                           : sizeof text - 1;
    s_write_line(level, text, len, "");
}

/* --- rate-limited lines ---------------------------------------------- */

#define LIMIT_KEYS      64
#define LIMIT_KEY_BYTES 128

struct s_limit {
    char key[LIMIT_KEY_BYTES];     /* "" when the slot is free */
    uint64_t start_ns;             /* when the last line was written */
    uint64_t interval_ns;          /* one line per this, per key */
    uint64_t held;                 /* lines held back since then */
    rumor_log_level level;         /* of the last line held back */
    char last[LOG_LINE_BYTES / 2]; /* its text, for the flush */
};

static pthread_mutex_t s_limit_mu = PTHREAD_MUTEX_INITIALIZER;
static struct s_limit s_limits[LIMIT_KEYS];

/* One line and the count of the others like it held back before it;
 * called with the lock held (the write(2) under it keeps a key's lines in
 * order). */
static void
s_log_text(rumor_log_level level, const char *text, uint64_t more, uint64_t ns)
{
    char suffix[96] = "";
    if (more > 0)
        snprintf(suffix,
                 sizeof suffix,
                 " (and %llu more like it in the last %llu s)",
                 (unsigned long long)more,
                 (unsigned long long)((ns + 999999999ull) / 1000000000ull));
    s_write_line(level, text, strlen(text), suffix);
}

/* Writes a slot's held-back lines: the last one, with the count of the
 * others, and empties it. */
static void
s_limit_drain(struct s_limit *l, uint64_t now)
{
    if (l->held > 0)
        s_log_text(l->level, l->last, l->held - 1, now - l->start_ns);
    l->held = 0;
    l->start_ns = now;
}

/* The key's slot; or a free one, or one whose interval has passed (its
 * count written first); or, with every slot busy within its interval, the
 * last slot, shared by all other keys: a flood of distinct keys then
 * writes at most one line per slot per interval. */
static struct s_limit *
s_limit_slot(const char *key, uint64_t now)
{
    struct s_limit *spare = NULL;
    for (size_t i = 0; i + 1 < LIMIT_KEYS; i++) {
        struct s_limit *l = &s_limits[i];
        if (l->key[0] != '\0' && strncmp(l->key, key, LIMIT_KEY_BYTES - 1) == 0)
            return l;
        bool idle = l->key[0] == '\0' || now - l->start_ns >= l->interval_ns;
        if (spare == NULL && idle)
            spare = l;
    }
    if (spare == NULL) {
        spare = &s_limits[LIMIT_KEYS - 1];
        if (spare->key[0] == '\0')
            snprintf(spare->key, sizeof spare->key, "%s", "(others)");
        return spare;
    }
    s_limit_drain(spare, now);
    snprintf(spare->key, sizeof spare->key, "%s", key);
    spare->start_ns = 0;
    return spare;
}

void
rumor_log_limited(rumor_log_level level,
                  const char *key,
                  uint32_t interval_ms,
                  const char *fmt,
                  ...)
{
    if ((int)level > atomic_load(&s_level))
        return;
    uint64_t now = rumor_clock_ns();
    char text[LOG_LINE_BYTES / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s_limit_mu);
    struct s_limit *l = s_limit_slot(key[0] ? key : "-", now);
    bool fresh = l->start_ns == 0;
    l->interval_ns = (uint64_t)interval_ms * 1000000ull;
    if (fresh || now - l->start_ns >= l->interval_ns) {
        s_log_text(level, text, l->held, now - l->start_ns);
        l->held = 0;
        l->start_ns = now;
    } else {
        l->held++;
        l->level = level;
        snprintf(l->last, sizeof l->last, "%s", text);
    }
    pthread_mutex_unlock(&s_limit_mu);
}

void
rumor_log_limited_flush(void)
{
    uint64_t now = rumor_clock_ns();
    pthread_mutex_lock(&s_limit_mu);
    for (size_t i = 0; i < LIMIT_KEYS; i++) {
        struct s_limit *l = &s_limits[i];
        if (l->held > 0 && now - l->start_ns >= l->interval_ns)
            s_limit_drain(l, now);
    }
    pthread_mutex_unlock(&s_limit_mu);
}
