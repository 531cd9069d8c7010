// CUDA build: ask the runtime for devices. cudaGetDeviceCount fails with
// cudaErrorNoDevice or cudaErrorInsufficientDriver on a machine without a
// GPU or driver; that is a normal answer, not an error, for the caller.
//
// It also keeps Rumor's stream of each device (core/cuda_stream.h).
#include "core/cuda_stream.h"
#include "core/device_impl.h"
extern "C" {
#include "rumor/core.h"
}

#include <cuda_runtime.h>
#include <pthread.h>

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

// Devices past this many share the legacy stream (never seen: a node
// holds one GPU; a host, at most 16).
#define CORE_CUDA_STREAMS 64

static struct {
    pthread_mutex_t lock;
    bool made[CORE_CUDA_STREAMS];
    cudaStream_t stream[CORE_CUDA_STREAMS];
} s_own = {PTHREAD_MUTEX_INITIALIZER, {false}, {NULL}};

extern "C" void *
core_cuda_stream(void)
{
    int device = -1;
    if (!core_cuda_own_stream_on())
        return NULL;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 ||
        device >= CORE_CUDA_STREAMS) {
        cudaGetLastError(); // answered here, not sticky
        return NULL;
    }
    pthread_mutex_lock(&s_own.lock);
    if (!s_own.made[device]) {
        s_own.made[device] = true;
        cudaError_t err = cudaStreamCreateWithFlags(&s_own.stream[device],
                                                    cudaStreamNonBlocking);
        if (err != cudaSuccess) {
            s_own.stream[device] = NULL;
            rumor_log(RUMOR_LOG_WARN,
                      "cuda: no stream of Rumor's own on device %d (%s): "
                      "Rumor's work goes on the legacy default stream, "
                      "ordered, without overlapping the caller's",
                      device,
                      cudaGetErrorString(err));
        }
    }
    cudaStream_t stream = s_own.stream[device];
    pthread_mutex_unlock(&s_own.lock);
    return stream;
}

extern "C" int
core_cuda_device(void)
{
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return device;
}

extern "C" void
core_cuda_device_set(int device)
{
    if (device >= 0 && core_cuda_device() != device &&
        cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError();
        rumor_log(RUMOR_LOG_WARN,
                  "cuda: cannot make device %d current",
                  device);
    }
}
