/* CPU-only build: the CUDA probe always answers "none" (R7.2), and there
 * is no stream of Rumor's own (core/cuda_stream.h). */
#include "core/cuda_stream.h"
#include "core/device_impl.h"

#include <stddef.h>

const bool core_cuda_built = false;

int
core_cuda_probe(const char **reason)
{
    *reason = "this build has no CUDA backend (USE_CUDA=no or no nvcc)";
    return 0;
}

void *
core_cuda_stream(void)
{
    return NULL;
}

int
core_cuda_device(void)
{
    return -1;
}

void
core_cuda_device_set(int device)
{
    (void)device;
}
