/* CPU-only build: no CUDA model memory. */
#include "gossip/mem.h"

#include <stddef.h>

rumor_err
gossip_mem_cuda(const struct gossip_mem_i **out, const char **why)
{
    *out = NULL;
    *why = "this librumor was built without CUDA (make USE_CUDA=yes)";
    return RUMOR_ENOTSUP;
}
