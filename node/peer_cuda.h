/*
 * Private to node/: the peer API's copies between CUDA device memory and
 * host staging buffers (node/peer_cuda.cu; node/peer_cuda_stub.c in
 * CPU-only builds answers RUMOR_ENOTSUP).
 */
#ifndef RUMOR_NODE_PEER_CUDA_H
#define RUMOR_NODE_PEER_CUDA_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>

/* Copies bytes from src to dst: host to device when to_device, device to
 * host otherwise; synchronous (it also waits for work queued on the legacy
 * default stream, where PyTorch's default stream runs). RUMOR_EBACKEND
 * when CUDA fails (logged), RUMOR_ENOTSUP without CUDA. */
rumor_err
node_peer_cuda_copy(void *dst, const void *src, size_t bytes, bool to_device);

#endif
