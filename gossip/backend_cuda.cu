// The CUDA backend of gossip/backend.h. Copies are synchronous on the
// legacy default stream, and so is every kernel's launch: an algorithm
// reads a payload right after its copy, and the peer orders the stream
// against the caller's before the step starts. Each kernel does, per
// element, what its twin in gossip/ref.c does, with the _rn intrinsics so
// that nvcc contracts nothing into an FMA: the same bits as the host.
#include "gossip/backend.h"

#include <cuda_runtime.h>

static rumor_err
s_alloc(size_t bytes, void **out)
{
    *out = NULL;
    void *p = NULL;
    if (cudaMalloc(&p, bytes + 1) != cudaSuccess) {
        rumor_log(RUMOR_LOG_ERROR,
                  "gossip: cudaMalloc of %zu bytes failed",
                  bytes + 1);
        return RUMOR_ENOMEM;
    }
    if (cudaMemset(p, 0, bytes + 1) != cudaSuccess) {
        cudaFree(p);
        return RUMOR_EBACKEND;
    }
    *out = p;
    return RUMOR_OK;
}

static void
s_release(void *p)
{
    if (p != NULL)
        cudaFree(p);
}

static rumor_err
s_copy(void *dst, const void *src, size_t bytes, enum gossip_copy kind)
{
    if (bytes == 0)
        return RUMOR_OK;
    cudaMemcpyKind k = kind == GOSSIP_TO_DEVICE ? cudaMemcpyHostToDevice
                       : kind == GOSSIP_TO_HOST ? cudaMemcpyDeviceToHost
                                                : cudaMemcpyDeviceToDevice;
    cudaError_t err = cudaMemcpy(dst, src, bytes, k);
    if (err == cudaSuccess)
        return RUMOR_OK;
    rumor_log(RUMOR_LOG_ERROR,
              "gossip: cudaMemcpy: %s",
              cudaGetErrorString(err));
    return RUMOR_EBACKEND;
}

static const struct gossip_backend_i s_cuda = {
    "cuda",
    false,
    true,
    s_alloc,
    s_release,
    s_copy,
};

extern "C" rumor_err
gossip_backend_cuda(const struct gossip_backend_i **out, const char **why)
{
    *out = NULL;
    if (rumor_cuda_device_count(why) == 0)
        return RUMOR_ENOTSUP;
    *out = &s_cuda;
    return RUMOR_OK;
}
