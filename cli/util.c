/* Shared by subcommands: the message of a failed file operation (path,
 * errno), and number parsing: whole-token, range-checked, with
 * a message naming the option, since atoi-style parsing (banned, R1.4)
 * silently turns "8x" into 8. */
#include "cli/cli.h"

#include "rumor/core.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int
cli_io_error(const char *cmd, const char *path, const char *what)
{
    struct rumor_diag diag = {0};
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    (void)rumor_diag_errno(&diag, path, what);
    rumor_diag_format(&diag, text, sizeof text);
    fprintf(stderr, "rumor %s: %s\n", cmd, text);
    return -1;
}

int
cli_parse_u64(const char *text,
              const char *what,
              unsigned long long min,
              unsigned long long max,
              unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 ||
        v < min || v > max) {
        fprintf(
            stderr,
            "rumor: %s: expected a whole number in [%llu, %llu], got '%s'\n",
            what,
            min,
            max,
            text);
        return -1;
    }
    *out = v;
    return 0;
}

int
cli_parse_double(const char *text,
                 const char *what,
                 double min,
                 double max,
                 double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(v) || v < min ||
        v > max) {
        fprintf(stderr,
                "rumor: %s: expected a number in [%g, %g], got '%s'\n",
                what,
                min,
                max,
                text);
        return -1;
    }
    *out = v;
    return 0;
}
