// node/peer_cuda.cu: the peer API's copy engine between CUDA tensors and
// pinned host staging buffers (the order of its calls: node/peer_cuda.h).
// Gossip algorithms work on float32 host memory (the wire is host memory
// anyway), so a CUDA tensor is downloaded before a step and uploaded
// after it; the copies are asynchronous on a stream of Rumor's own, from
// and to page-locked memory, and ordered against the caller's stream by
// events only: nothing synchronises the device, and the host waits only
// for this engine's stream.
// Limit: compiled by nvcc here but never run on a GPU so far
// (docs/node.md, "CUDA tensors"). Only extern "C" entry points leave
// this file.
extern "C" {
#include "node/peer_cuda.h"
}

#include "core/cuda_check.h"
#include "core/cuda_stream.h"

#include <cuda_runtime.h>
#include <stdlib.h>

#define CUDA_TRY(call, label) CORE_CUDA_TRY("peer cuda", call, label)

struct node_peer_cuda {
    int device;
    cudaStream_t own;    // Rumor's copies
    cudaStream_t caller; // the caller's (0: the legacy default stream)
    bool given;          // caller was handed in (asynchronous write-back)
    cudaEvent_t ready;   // on caller: its writes before the downloads
    cudaEvent_t written; // on own: the uploads, before the caller reads
    bool pending;        // uploads queued since the host last waited
    cudaEvent_t *marks;  // on own: after download k (tensor k's slot)
    size_t nmarks;
};

// Makes the engine's device current for a call and gives the caller's
// back after it (the caller's thread may be on another device).
static rumor_err
s_enter(int device, int *prev)
{
    rumor_err rc = RUMOR_OK;
    CUDA_TRY(cudaGetDevice(prev), done);
    if (*prev != device)
        CUDA_TRY(cudaSetDevice(device), done);
done:
    return rc;
}

static void
s_leave(int device, int prev)
{
    if (prev != device)
        cudaSetDevice(prev);
}

static int
s_device_of(const void *dev_ptr)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, dev_ptr) != cudaSuccess ||
        a.type != cudaMemoryTypeDevice) {
        cudaGetLastError(); // the error is answered here, not sticky
        return -1;
    }
    return a.device;
}

extern "C" rumor_err
node_peer_cuda_new(const void *dev_ptr, size_t marks, node_peer_cuda **out)
{
    *out = NULL;
    int device = s_device_of(dev_ptr), prev = 0;
    if (device < 0) {
        rumor_log(RUMOR_LOG_ERROR,
                  "peer cuda: %p is not CUDA device memory",
                  dev_ptr);
        return RUMOR_EBACKEND;
    }
    rumor_err rc = s_enter(device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    node_peer_cuda *cu = (node_peer_cuda *)calloc(1, sizeof *cu);
    if (cu == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    cu->device = device;
    CUDA_TRY(cudaStreamCreateWithFlags(&cu->own, cudaStreamNonBlocking), done);
    CUDA_TRY(cudaEventCreateWithFlags(&cu->ready, cudaEventDisableTiming),
             done);
    CUDA_TRY(cudaEventCreateWithFlags(&cu->written, cudaEventDisableTiming),
             done);
    cu->marks = (cudaEvent_t *)calloc(marks + 1, sizeof *cu->marks);
    if (cu->marks == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (; cu->nmarks < marks; cu->nmarks++)
        CUDA_TRY(cudaEventCreateWithFlags(&cu->marks[cu->nmarks],
                                          cudaEventDisableTiming),
                 done);
    *out = cu;
    cu = NULL;
done:
    node_peer_cuda_destroy(&cu);
    s_leave(device, prev);
    return rc;
}

extern "C" void
node_peer_cuda_destroy(node_peer_cuda **self_p)
{
    node_peer_cuda *cu = *self_p;
    if (cu == NULL)
        return;
    int prev = 0;
    if (s_enter(cu->device, &prev) == RUMOR_OK) {
        if (cu->own != NULL)
            cudaStreamSynchronize(cu->own);
        if (cu->ready != NULL)
            cudaEventDestroy(cu->ready);
        if (cu->written != NULL)
            cudaEventDestroy(cu->written);
        for (size_t k = 0; k < cu->nmarks; k++)
            cudaEventDestroy(cu->marks[k]);
        if (cu->own != NULL)
            cudaStreamDestroy(cu->own);
        s_leave(cu->device, prev);
    }
    free(cu->marks);
    free(cu);
    *self_p = NULL;
}

extern "C" bool
node_peer_cuda_same_device(const node_peer_cuda *cu, const void *dev_ptr)
{
    return s_device_of(dev_ptr) == cu->device;
}

extern "C" rumor_err
node_peer_cuda_set_stream(node_peer_cuda *cu, void *stream)
{
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    // a stream handle CUDA does not know fails the query; one with work
    // under way answers cudaErrorNotReady
    cudaError_t q = s != NULL ? cudaStreamQuery(s) : cudaSuccess;
#if CUDART_VERSION >= 12080
    // the events are the engine's device's: a stream of another could
    // not record them (older runtimes say so at the first step)
    int on = cu->device;
    if (s != NULL && (q == cudaSuccess || q == cudaErrorNotReady) &&
        cudaStreamGetDevice(s, &on) == cudaSuccess && on != cu->device)
        q = cudaErrorInvalidDevice;
#endif
    if (q != cudaSuccess && q != cudaErrorNotReady) {
        cudaGetLastError();
        rumor_log(RUMOR_LOG_ERROR,
                  "peer cuda: stream %p: %s",
                  stream,
                  cudaGetErrorString(q));
        rc = RUMOR_EINVAL;
    } else {
        // the copies of the old ordering are done before the new one
        // takes over: its stream no longer waits on them
        rc = node_peer_cuda_idle(cu);
        cu->caller = s;
        cu->given = s != NULL;
    }
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_host_alloc(node_peer_cuda *cu, size_t bytes, void **out)
{
    *out = NULL;
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    cudaError_t err = cudaHostAlloc(out, bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
        rumor_log(RUMOR_LOG_ERROR,
                  "peer cuda: cudaHostAlloc of %zu bytes: %s",
                  bytes,
                  cudaGetErrorString(err));
        *out = NULL;
        rc = RUMOR_ENOMEM;
    }
    s_leave(cu->device, prev);
    return rc;
}

extern "C" void
node_peer_cuda_host_free(node_peer_cuda *cu, void *p)
{
    int prev = 0;
    if (p == NULL || s_enter(cu->device, &prev) != RUMOR_OK)
        return;
    // an upload may still read it
    if (node_peer_cuda_idle(cu) == RUMOR_OK)
        cudaFreeHost(p);
    s_leave(cu->device, prev);
}

extern "C" rumor_err
node_peer_cuda_read_begin(node_peer_cuda *cu)
{
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(cu->ready, cu->caller), done);
    CUDA_TRY(cudaStreamWaitEvent(cu->own, cu->ready, 0), done);
done:
    s_leave(cu->device, prev);
    return rc;
}

static rumor_err
s_copy(node_peer_cuda *cu,
       void *dst,
       const void *src,
       size_t bytes,
       cudaMemcpyKind kind)
{
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, cu->own), done);
done:
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_download(node_peer_cuda *cu,
                        size_t mark,
                        void *host,
                        const void *dev,
                        size_t bytes)
{
    rumor_err rc = s_copy(cu, host, dev, bytes, cudaMemcpyDeviceToHost);
    int prev = 0;
    if (rc == RUMOR_OK)
        rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(cu->marks[mark], cu->own), done);
done:
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_downloaded(node_peer_cuda *cu, size_t mark)
{
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaEventSynchronize(cu->marks[mark]), done);
done:
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_upload(node_peer_cuda *cu,
                      void *dev,
                      const void *host,
                      size_t bytes)
{
    rumor_err rc = s_copy(cu, dev, host, bytes, cudaMemcpyHostToDevice);
    cu->pending = cu->pending || rc == RUMOR_OK;
    return rc;
}

static rumor_err
s_wait(node_peer_cuda *cu)
{
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaStreamSynchronize(cu->own), done);
    cu->pending = false;
done:
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_read_end(node_peer_cuda *cu)
{
    return s_wait(cu);
}

extern "C" rumor_err
node_peer_cuda_write_end(node_peer_cuda *cu)
{
    if (!cu->given)
        return s_wait(cu);
    int prev = 0;
    rumor_err rc = s_enter(cu->device, &prev);
    if (rc != RUMOR_OK)
        return rc;
    CUDA_TRY(cudaEventRecord(cu->written, cu->own), done);
    CUDA_TRY(cudaStreamWaitEvent(cu->caller, cu->written, 0), done);
done:
    s_leave(cu->device, prev);
    return rc;
}

extern "C" rumor_err
node_peer_cuda_direct_begin(node_peer_cuda *cu)
{
    rumor_err rc = RUMOR_OK;
    CUDA_TRY(cudaSetDevice(cu->device), done);
    CUDA_TRY(cudaEventRecord(cu->ready, cu->caller), done);
    // The algorithm reaches the tensors only through gossip's CUDA
    // backend, on Rumor's stream: that stream waits, not the host.
    CUDA_TRY(
        cudaStreamWaitEvent((cudaStream_t)core_cuda_stream(), cu->ready, 0),
        done);
done:
    return rc;
}

extern "C" rumor_err
node_peer_cuda_direct_end(node_peer_cuda *cu)
{
    rumor_err rc = RUMOR_OK;
    CUDA_TRY(cudaSetDevice(cu->device), done);
    CUDA_TRY(cudaEventRecord(cu->written, (cudaStream_t)core_cuda_stream()),
             done);
    if (cu->given)
        CUDA_TRY(cudaStreamWaitEvent(cu->caller, cu->written, 0), done);
    else
        CUDA_TRY(cudaEventSynchronize(cu->written), done);
done:
    return rc;
}

extern "C" rumor_err
node_peer_cuda_idle(node_peer_cuda *cu)
{
    return cu->pending ? s_wait(cu) : RUMOR_OK;
}
