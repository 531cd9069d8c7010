/*
 * Error codes and diagnostics. Codes are an append-only enum (nng_err,
 * CURLcode): peers and logs need to tell "malformed" from "unauthenticated"
 * from "too large", which 0/-1 plus errno cannot. Parsers of human-written
 * files add a struct rumor_diag with file, line and column.
 */
#include "rumor/core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *text;
} s_errors[RUMOR_ERR_COUNT] = {
    [RUMOR_OK] = {"RUMOR_OK", "success"},
    [RUMOR_EINVAL] = {"RUMOR_EINVAL", "invalid argument"},
    [RUMOR_EPROTO] = {"RUMOR_EPROTO", "malformed input"},
    [RUMOR_EAUTH] = {"RUMOR_EAUTH", "authentication failed"},
    [RUMOR_ENOTSUP] = {"RUMOR_ENOTSUP", "not supported"},
    [RUMOR_EBACKEND] = {"RUMOR_EBACKEND", "compute backend failure"},
    [RUMOR_ETIMEDOUT] = {"RUMOR_ETIMEDOUT", "timed out"},
    [RUMOR_ENOMEM] = {"RUMOR_ENOMEM", "out of memory"},
    [RUMOR_ENUMERIC] = {"RUMOR_ENUMERIC", "non-finite number"},
    [RUMOR_ETOOBIG] = {"RUMOR_ETOOBIG", "size exceeds its limit"},
    [RUMOR_EIO] = {"RUMOR_EIO", "input/output error"},
    [RUMOR_ENOTFOUND] = {"RUMOR_ENOTFOUND", "not found"},
};

const char *
rumor_strerror(rumor_err err)
{
    if ((unsigned)err >= RUMOR_ERR_COUNT)
        return "unknown error";
    return s_errors[err].text;
}

const char *
rumor_errname(rumor_err err)
{
    if ((unsigned)err >= RUMOR_ERR_COUNT)
        return "RUMOR_E?";
    return s_errors[err].name;
}

/* --- escaping ----------------------------------------------------------- */

/* The length of the valid, printable UTF-8 sequence at in (1..4), or 0
 * (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing past
 * U+10FFFF; C1 controls U+0080..U+009F count as unprintable). */
static size_t
s_utf8_len(const unsigned char *in, size_t len)
{
    unsigned char c = in[0];
    size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (c < 0xc2 || c > 0xf4 || len < n)
        return 0;
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    else if (c == 0xc2)
        lo = 0xa0;
    if (in[1] < lo || in[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (in[i] < 0x80 || in[i] > 0xbf)
            return 0;
    return n;
}

size_t
rumor_escape(char *out, size_t cap, const char *in, size_t len)
{
    if (cap == 0)
        return 0;
    const unsigned char *u = (const unsigned char *)in;
    size_t used = 0;
    for (size_t i = 0; i < len;) {
        size_t n = u[i] >= 0x20 && u[i] < 0x7f ? 1
                   : u[i] >= 0x80              ? s_utf8_len(u + i, len - i)
                                               : 0;
        size_t need = n > 0 ? n : 4;
        if (used + need >= cap)
            break;
        if (n > 0)
            memcpy(out + used, u + i, n);
        else
            snprintf(out + used, 5, "\\x%02x", u[i]);
        used += need;
        i += n > 0 ? n : 1;
    }
    out[used] = '\0';
    return used;
}

/* --- diagnostics --------------------------------------------------------- */

void
rumor_diag_set(struct rumor_diag *diag,
               const char *file,
               int line,
               int col,
               const char *fmt,
               ...)
{
    if (diag == NULL)
        return;
    /* the message often quotes a file's or a peer's bytes: escaped here,
     * once, for every parser */
    char raw[RUMOR_DIAG_TEXT_BYTES];
    const char *name = file ? file : "";
    rumor_escape(diag->file, sizeof diag->file, name, strlen(name));
    diag->line = line;
    diag->col = col;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t len = n < 0                    ? 0
                 : (size_t)n < sizeof raw ? (size_t)n
                                          : sizeof raw - 1;
    rumor_escape(diag->msg, sizeof diag->msg, raw, len);
}

const char *
rumor_errno_name(int err, char buf[16])
{
    static const struct {
        int code;
        const char *name;
    } names[] = {
        {EPERM, "EPERM"},
        {ENOENT, "ENOENT"},
        {EINTR, "EINTR"},
        {EIO, "EIO"},
        {EBADF, "EBADF"},
        {EAGAIN, "EAGAIN"},
        {ENOMEM, "ENOMEM"},
        {EACCES, "EACCES"},
        {EEXIST, "EEXIST"},
        {EXDEV, "EXDEV"},
        {ENOTDIR, "ENOTDIR"},
        {EISDIR, "EISDIR"},
        {EINVAL, "EINVAL"},
        {ENFILE, "ENFILE"},
        {EMFILE, "EMFILE"},
        {EFBIG, "EFBIG"},
        {ENOSPC, "ENOSPC"},
        {EROFS, "EROFS"},
        {EPIPE, "EPIPE"},
        {ELOOP, "ELOOP"},
        {ENAMETOOLONG, "ENAMETOOLONG"},
        {EDQUOT, "EDQUOT"},
        {ENOTEMPTY, "ENOTEMPTY"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].code == err)
            return names[i].name;
    snprintf(buf, 16, "errno %d", err);
    return buf;
}

rumor_err
rumor_diag_errno(struct rumor_diag *diag, const char *path, const char *what)
{
    int err = errno;
    char buf[16];
    rumor_diag_set(diag,
                   path,
                   0,
                   0,
                   "%s: %s (%s)",
                   what,
                   strerror(err),
                   rumor_errno_name(err, buf));
    errno = err;
    return RUMOR_EIO;
}

void
rumor_diag_format(const struct rumor_diag *diag, char *out, size_t cap)
{
    if (cap == 0)
        return;
    out[0] = '\0';
    size_t used = 0;
    if (diag->file[0] != '\0')
        used += (size_t)snprintf(out, cap, "%s:", diag->file);
    if (diag->line > 0 && used < cap)
        used += (size_t)snprintf(out + used, cap - used, "%d:", diag->line);
    if (diag->col > 0 && used < cap)
        used += (size_t)snprintf(out + used, cap - used, "%d:", diag->col);
    if (used < cap)
        snprintf(out + used, cap - used, "%s%s", used ? " " : "", diag->msg);
}
