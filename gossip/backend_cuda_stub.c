/* CPU-only build: no CUDA model memory. */
#include "gossip/backend.h"

#include <stddef.h>

rumor_err
gossip_backend_cuda(const struct gossip_backend_i **out, const char **why)
{
    *out = NULL;
    *why = "this librumor was built without CUDA (make USE_CUDA=yes)";
    return RUMOR_ENOTSUP;
}
