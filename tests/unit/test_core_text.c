/*
 * What core/ writes for people (issue 33): text quoted from a file or a
 * peer is escaped (rumor_escape, through rumor_diag_set and rumor_log), a
 * failed system call names its file and errno (rumor_diag_errno), and a
 * line a stranger can provoke at will is rate-limited with the count of
 * what was held back (rumor_log_limited). Log lines are read back from
 * stderr redirected into a temporary file.
 */
#include "tests/cmocka_compat.h"

#include "rumor/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- escaping ------------------------------------------------------------ */

static void
test_escape__control_and_invalid_utf8__hex_escaped_valid_kept(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        const char *out;
        const char *why;
    } rows[] = {
        {"plain text", 10, "plain text", "printable ASCII as it is"},
        {"a\x07"
         "b",
         3,
         "a\\x07b",
         "BEL"},
        {"\x1b[2Jx", 5, "\\x1b[2Jx", "a terminal escape sequence"},
        {"l1\nl2\r\t", 7, "l1\\x0al2\\x0d\\x09", "newline, CR, tab"},
        {"\x7f", 1, "\\x7f", "DEL"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9", "valid 2-byte UTF-8 kept"},
        {"\xe2\x82\xac", 3, "\xe2\x82\xac", "valid 3-byte UTF-8 kept"},
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", "valid 4-byte kept"},
        {"\xc2\x9b", 2, "\\xc2\\x9b", "C1 control CSI"},
        {"\xc0\xaf", 2, "\\xc0\\xaf", "overlong '/'"},
        {"\xed\xa0\x80", 3, "\\xed\\xa0\\x80", "a surrogate"},
        {"\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80", "past U+10FFFF"},
        {"\xe2\x82", 2, "\\xe2\\x82", "a sequence cut short"},
        {"\xff\xfe", 2, "\\xff\\xfe", "bytes never in UTF-8"},
        {"a\0b", 3, "a\\x00b", "NUL inside the length"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char out[64];
        size_t n = rumor_escape(out, sizeof out, rows[i].in, rows[i].len);
        if (strcmp(out, rows[i].out) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"",
                     rows[i].why,
                     out,
                     rows[i].out);
        assert_int_equal(n, strlen(rows[i].out));
    }
    /* truncated at a whole escape, always terminated */
    char small[6];
    assert_int_equal(rumor_escape(small,
                                  sizeof small,
                                  "ab\x01"
                                  "cd",
                                  5),
                     2);
    assert_string_equal(small, "ab");
}

static void
test_diag_set__quoted_binary__escaped_in_file_and_message(void **state)
{
    (void)state;
    struct rumor_diag diag = {0};
    rumor_diag_set(&diag,
                   "bad\x1b.topo",
                   3,
                   1,
                   "unknown keyword '%s'",
                   "\x07\x1b]0;pwned\x07\xff");
    assert_string_equal(diag.file, "bad\\x1b.topo");
    assert_string_equal(diag.msg,
                        "unknown keyword '\\x07\\x1b]0;pwned\\x07\\xff'");
    /* already escaped text goes through unchanged (a diag copied into
     * another one) */
    struct rumor_diag outer = {0};
    rumor_diag_set(&outer, "", 0, 0, "--resume: %s", diag.msg);
    assert_string_equal(outer.msg,
                        "--resume: unknown keyword "
                        "'\\x07\\x1b]0;pwned\\x07\\xff'");
}

static void
test_diag_errno__failed_open__names_path_strerror_and_name(void **state)
{
    (void)state;
    struct rumor_diag diag = {0};
    errno = 0;
    FILE *f = fopen("/nonexistent-rumor-dir/x.model", "w");
    assert_null(f);
    assert_int_equal(rumor_diag_errno(&diag,
                                      "/nonexistent-rumor-dir/x.model",
                                      "cannot open for writing"),
                     RUMOR_EIO);
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    rumor_diag_format(&diag, text, sizeof text);
    assert_string_equal(text,
                        "/nonexistent-rumor-dir/x.model: cannot open for "
                        "writing: No such file or directory (ENOENT)");
    errno = EMFILE;
    (void)rumor_diag_errno(&diag, "m", "cannot create");
    assert_string_equal(diag.msg,
                        "cannot create: Too many open files (EMFILE)");
    assert_int_equal(errno, EMFILE); /* kept for the caller */
    char buf[16];
    assert_string_equal(rumor_errno_name(ENOSPC, buf), "ENOSPC");
    assert_string_equal(rumor_errno_name(4095, buf), "errno 4095");
}

/* --- logging, read back from stderr -------------------------------------- */

struct t_capture {
    int saved; /* the real stderr */
    char path[64];
};

static void
t_capture_begin(struct t_capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/rumor-log-test-XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
}

/* Restores stderr; the captured text (malloc'd) in *text. */
static void
t_capture_end(struct t_capture *c, char **text)
{
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    assert_non_null(f);
    *text = calloc(1, 1 << 20);
    assert_non_null(*text);
    size_t n = fread(*text, 1, (1 << 20) - 1, f);
    (*text)[n] = '\0';
    fclose(f);
    unlink(c->path);
}

/* The lines of text containing needle, and the sum over them of 1 + the
 * N of "(and N more like it". */
static size_t
t_count(const char *text, const char *needle, unsigned long long *events)
{
    size_t lines = 0;
    *events = 0;
    for (const char *at = text; (at = strstr(at, needle)) != NULL;) {
        const char *eol = strchr(at, '\n');
        assert_non_null(eol);
        lines++;
        *events += 1;
        const char *more = strstr(at, "(and ");
        if (more != NULL && more < eol)
            *events += strtoull(more + 5, NULL, 10);
        at = eol;
    }
    return lines;
}

/* Lets a rate limiter's interval of ms pass: the time passing is what
 * the tests below check, so this waits for the clock, not an event. */
static void
s_wait_past(uint32_t ms)
{
    uint64_t until = rumor_clock_ns() + (uint64_t)(ms + 20) * 1000000ull;
    while (rumor_clock_ns() < until)
        usleep(10000);
}

static void
test_log__peer_bytes__escaped_on_one_line(void **state)
{
    (void)state;
    struct t_capture c;
    t_capture_begin(&c);
    rumor_log(RUMOR_LOG_WARN, "refused: %s", "evil\n\x1b[31mred");
    char *text = NULL;
    t_capture_end(&c, &text);
    assert_non_null(strstr(text, "WARN  refused: evil\\x0a\\x1b[31mred\n"));
    assert_null(strchr(text, '\x1b'));
    free(text);
}

/* A flood of 5000 alike lines within one interval gives one line; once the
 * interval has passed, the next one (or the flush) carries the count of
 * the rest, so the lines account for every event. Another key is counted
 * apart. */
static void
test_log_limited__flood__few_lines_exact_count(void **state)
{
    (void)state;
    const uint32_t interval_ms = 200;
    struct t_capture c;
    t_capture_begin(&c);
    for (int i = 0; i < 5000; i++)
        rumor_log_limited(RUMOR_LOG_WARN,
                          "t:flood",
                          interval_ms,
                          "refused flood %d",
                          i);
    rumor_log_limited(RUMOR_LOG_WARN, "t:other", interval_ms, "refused other");
    rumor_log_limited_flush(); /* nothing due yet */
    char *text = NULL;
    t_capture_end(&c, &text);
    unsigned long long events = 0;
    assert_int_equal(t_count(text, "refused flood", &events), 1);
    assert_int_equal(events, 1);
    assert_non_null(strstr(text, "refused flood 0\n"));
    assert_int_equal(t_count(text, "refused other", &events), 1);
    free(text);

    /* the interval passes: the flush writes the last held line with the
     * count of the others */
    s_wait_past(interval_ms);
    t_capture_begin(&c);
    rumor_log_limited_flush();
    rumor_log_limited_flush(); /* nothing left: writes nothing more */
    t_capture_end(&c, &text);
    assert_int_equal(t_count(text, "refused flood", &events), 1);
    assert_int_equal(events, 4999);
    assert_non_null(
        strstr(text, "refused flood 4999 (and 4998 more like it in the last"));
    assert_null(strstr(text, "refused other"));
    free(text);

    /* the next one after a quiet interval is written at once */
    s_wait_past(interval_ms);
    t_capture_begin(&c);
    rumor_log_limited(RUMOR_LOG_WARN,
                      "t:flood",
                      interval_ms,
                      "refused flood x");
    rumor_log_limited(RUMOR_LOG_WARN,
                      "t:flood",
                      interval_ms,
                      "refused flood y");
    t_capture_end(&c, &text);
    assert_int_equal(t_count(text, "refused flood", &events), 1);
    assert_non_null(strstr(text, "refused flood x\n"));
    free(text);
}

/* More keys than the table holds (a flood from many addresses): the lines
 * stay bounded and every event is still counted once the table is
 * flushed. */
static void
test_log_limited__many_keys__bounded_lines_every_event_counted(void **s)
{
    (void)s;
    const uint32_t interval_ms = 100;
    struct t_capture c;
    t_capture_begin(&c);
    unsigned long long sent = 0;
    for (int round = 0; round < 50; round++)
        for (int k = 0; k < 100; k++, sent++) {
            char key[32];
            snprintf(key, sizeof key, "t:many:%d", k);
            rumor_log_limited(RUMOR_LOG_WARN, key, interval_ms, "many %d", k);
        }
    s_wait_past(interval_ms);
    rumor_log_limited_flush();
    char *text = NULL;
    t_capture_end(&c, &text);
    unsigned long long events = 0;
    size_t lines = t_count(text, "WARN  many ", &events);
    assert_int_equal(events, sent);
    if (lines > sent / 4)
        fail_msg("%zu lines for %llu events", lines, sent);
    free(text);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_escape__control_and_invalid_utf8__hex_escaped_valid_kept),
        cmocka_unit_test(
            test_diag_set__quoted_binary__escaped_in_file_and_message),
        cmocka_unit_test(
            test_diag_errno__failed_open__names_path_strerror_and_name),
        cmocka_unit_test(test_log__peer_bytes__escaped_on_one_line),
        cmocka_unit_test(test_log_limited__flood__few_lines_exact_count),
        cmocka_unit_test(
            test_log_limited__many_keys__bounded_lines_every_event_counted),
    };
    return cmocka_run_group_tests_name("core_text", tests, NULL, NULL);
}
