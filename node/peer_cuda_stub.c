/* CPU-only build: no CUDA memory to copy (R7.2). rumor_peer_new refuses
 * CUDA tensors before anything reaches this. */
#include "node/peer_cuda.h"

rumor_err
node_peer_cuda_copy(void *dst, const void *src, size_t bytes, bool to_device)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)to_device;
    return RUMOR_ENOTSUP;
}
