// CUDA build: ask the runtime for devices. cudaGetDeviceCount fails with
// cudaErrorNoDevice or cudaErrorInsufficientDriver on a machine without a
// GPU or driver; that is a normal answer, not an error, for the caller.
#include "core/device_impl.h"

#include <cuda_runtime.h>

extern "C" const bool core_cuda_built = true;

extern "C" int
core_cuda_probe(const char **reason)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        *reason = cudaGetErrorString(err);
        return 0;
    }
    if (count == 0)
        *reason = "the CUDA runtime reports no devices";
    return count;
}
