/*
 * The host tables of gossip/mem.h: plain host memory, and the reference
 * "device" whose memory is host memory reached only through the table.
 */
#include "gossip/mem.h"

#include <stdlib.h>
#include <string.h>

static rumor_err
s_alloc(size_t bytes, void **out)
{
    /* one byte more: an empty model still gets a real pointer */
    *out = calloc(1, bytes + 1);
    return *out == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

static void
s_release(void *p)
{
    free(p);
}

static rumor_err
s_copy(void *dst, const void *src, size_t bytes, enum gossip_copy kind)
{
    (void)kind;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return RUMOR_OK;
}

const struct gossip_mem_i gossip_mem_host = {
    .name = "host",
    .host_memory = true,
    .alloc = s_alloc,
    .release = s_release,
    .copy = s_copy,
};

const struct gossip_mem_i gossip_mem_ref = {
    .name = "ref",
    .host_memory = false,
    .alloc = s_alloc,
    .release = s_release,
    .copy = s_copy,
};
