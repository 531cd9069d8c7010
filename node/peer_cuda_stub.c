/* CPU-only build: no CUDA memory to copy (R7.2). rumor_peer_new refuses
 * CUDA tensors, and rumor_peer_set_stream a stream, before anything
 * reaches these; the engine cannot be made, so the others never run. */
#include "node/peer_cuda.h"

rumor_err
node_peer_cuda_new(const void *dev_ptr, size_t marks, node_peer_cuda **out)
{
    (void)dev_ptr;
    (void)marks;
    *out = NULL;
    return RUMOR_ENOTSUP;
}

void
node_peer_cuda_destroy(node_peer_cuda **self_p)
{
    *self_p = NULL;
}

bool
node_peer_cuda_same_device(const node_peer_cuda *cu, const void *dev_ptr)
{
    (void)cu;
    (void)dev_ptr;
    return false;
}

rumor_err
node_peer_cuda_set_stream(node_peer_cuda *cu, void *stream)
{
    (void)cu;
    (void)stream;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_host_alloc(node_peer_cuda *cu, size_t bytes, void **out)
{
    (void)cu;
    (void)bytes;
    *out = NULL;
    return RUMOR_ENOTSUP;
}

void
node_peer_cuda_host_free(node_peer_cuda *cu, void *p)
{
    (void)cu;
    (void)p;
}

rumor_err
node_peer_cuda_read_begin(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_download(node_peer_cuda *cu,
                        size_t mark,
                        void *host,
                        const void *dev,
                        size_t bytes)
{
    (void)cu;
    (void)mark;
    (void)host;
    (void)dev;
    (void)bytes;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_downloaded(node_peer_cuda *cu, size_t mark)
{
    (void)cu;
    (void)mark;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_read_end(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_upload(node_peer_cuda *cu,
                      void *dev,
                      const void *host,
                      size_t bytes)
{
    (void)cu;
    (void)dev;
    (void)host;
    (void)bytes;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_write_end(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_idle(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_direct_begin(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}

rumor_err
node_peer_cuda_direct_end(node_peer_cuda *cu)
{
    (void)cu;
    return RUMOR_ENOTSUP;
}
