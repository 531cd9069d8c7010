/* CPU-only build: the CUDA backend is not built in (R7.2). */
#include "lowrank/backend.h"

rumor_err
lowrank_cuda_init(struct lowrank_backend_i *iface, void **ctx)
{
    (void)iface;
    *ctx = NULL;
    return RUMOR_ENOTSUP;
}
