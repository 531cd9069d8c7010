/*
 * Byte buffers with a hard cap fixed at init (curl's dynbuf "toobig"): a
 * size that came from a peer or a file can never make us allocate more than
 * the caller allowed. Growth doubles, clamped to the cap.
 */
#include "rumor/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
rumor_buf_init(rumor_buf *buf, size_t cap)
{
    buf->data = NULL;
    buf->len = 0;
    buf->alloc = 0;
    buf->cap = cap;
}

rumor_err
rumor_buf_reserve(rumor_buf *buf, size_t extra)
{
    if (extra > buf->cap - buf->len)
        return RUMOR_ETOOBIG;
    size_t need = buf->len + extra;
    if (need <= buf->alloc)
        return RUMOR_OK;
    size_t grow = buf->alloc ? buf->alloc : 64;
    while (grow < need)
        grow = grow > buf->cap / 2 ? buf->cap : grow * 2;
    uint8_t *data = realloc(buf->data, grow);
    if (data == NULL)
        return RUMOR_ENOMEM;
    buf->data = data;
    buf->alloc = grow;
    return RUMOR_OK;
}

rumor_err
rumor_buf_append(rumor_buf *buf, const void *src, size_t n)
{
    if (n == 0)
        return RUMOR_OK;
    rumor_err rc = rumor_buf_reserve(buf, n);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(buf->data + buf->len, src, n);
    buf->len += n;
    return RUMOR_OK;
}

void
rumor_buf_reset(rumor_buf *buf)
{
    buf->len = 0;
}

void
rumor_buf_free(rumor_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = 0;
    buf->alloc = 0;
}

rumor_err
rumor_buf_read_file(rumor_buf *buf, const char *path)
{
    rumor_err rc = RUMOR_OK;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT ? RUMOR_ENOTFOUND : RUMOR_EIO;
    uint8_t chunk[4096];
    for (;;) {
        size_t got = fread(chunk, 1, sizeof chunk, f);
        if (got == 0)
            break;
        rc = rumor_buf_append(buf, chunk, got);
        if (rc != RUMOR_OK)
            goto done;
    }
    if (ferror(f))
        rc = RUMOR_EIO;
done:;
    int err = errno; /* the reason, for rumor_diag_errno */
    fclose(f);
    errno = err;
    return rc;
}
