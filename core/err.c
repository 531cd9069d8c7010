/*
 * Error codes and diagnostics. Codes are an append-only enum (nng_err,
 * CURLcode): peers and logs need to tell "malformed" from "unauthenticated"
 * from "too large", which 0/-1 plus errno cannot. Parsers of human-written
 * files add a struct rumor_diag with file, line and column.
 */
#include "rumor/core.h"

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
    snprintf(diag->file, sizeof diag->file, "%s", file ? file : "");
    diag->line = line;
    diag->col = col;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(diag->msg, sizeof diag->msg, fmt, ap);
    va_end(ap);
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
