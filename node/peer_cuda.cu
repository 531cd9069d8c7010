// node/peer_cuda.cu: the peer API's staging copies between CUDA tensors
// and host memory. Gossip algorithms work on float32 host memory (the
// wire is host memory anyway), so a CUDA tensor is copied to a host
// staging buffer before a gossip step and back after it. cudaMemcpy on
// pageable memory is synchronous and ordered after the legacy default
// stream, which is PyTorch's default stream; the Python binding also
// synchronises the current stream before the step, for callers on
// another stream. Pinned staging buffers would make the copies faster;
// the copies are small next to the network time for the models the peer
// API is used with so far. Only extern "C" entry points leave this file.
extern "C" {
#include "node/peer_cuda.h"
}

#include <cuda_runtime.h>

extern "C" rumor_err
node_peer_cuda_copy(void *dst, const void *src, size_t bytes, bool to_device)
{
    cudaError_t err =
        cudaMemcpy(dst,
                   src,
                   bytes,
                   to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
        rumor_log(RUMOR_LOG_ERROR,
                  "peer: cudaMemcpy of %zu bytes: %s",
                  bytes,
                  cudaGetErrorString(err));
        return RUMOR_EBACKEND;
    }
    return RUMOR_OK;
}
