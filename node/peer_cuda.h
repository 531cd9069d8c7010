/*
 * Private to node/: the peer API's copies between CUDA device memory and
 * its host staging buffers (node/peer_cuda.cu; node/peer_cuda_stub.c in
 * CPU-only builds answers RUMOR_ENOTSUP, and rumor_peer_new refuses CUDA
 * tensors before anything reaches it).
 *
 * A node_peer_cuda is one peer's copy engine: a copy stream of its own on
 * the tensors' device (non-blocking: it orders itself only through the
 * events below, so a download never waits for unrelated work queued on
 * the legacy default stream or on Rumor's stream of core/cuda_stream.h,
 * which a direct step uses) and two events. The caller's stream (NULL:
 * the legacy default stream, PyTorch's default) orders the copies:
 *
 *   read_begin   records an event on the caller's stream and makes
 *                the copy stream wait on it: the downloads that follow
 *                read what the caller's queued work wrote;
 *   download...  queued on the copy stream into pinned host memory, each
 *                followed by an event (downloaded: its own wait);
 *   read_end     waits for the downloads (that stream alone), so the host
 *                may read the staging buffers;
 *   upload...    queued on the copy stream from pinned host memory;
 *   write_end    with a caller's stream: records an event after the
 *                uploads and makes the caller's stream wait on it, without
 *                waiting on the host; without one: waits for the uploads,
 *                so the tensors are written when the call returns, as a
 *                synchronous cudaMemcpy left them (any stream may read);
 * Before the host writes a staging buffer an upload may still read:
 * node_peer_cuda_idle.
 *
 * Nothing here synchronises the device. The entry points make the
 * engine's device current for their calls and restore the caller's.
 */
#ifndef RUMOR_NODE_PEER_CUDA_H
#define RUMOR_NODE_PEER_CUDA_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct node_peer_cuda node_peer_cuda;

/* The engine on the device that holds dev_ptr (a device pointer), with
 * marks download marks (0 .. marks - 1). RUMOR_EBACKEND (logged) when
 * CUDA fails; RUMOR_ENOTSUP without CUDA. */
rumor_err
node_peer_cuda_new(const void *dev_ptr, size_t marks, node_peer_cuda **out);

/* Frees it (after its pinned buffers); *self_p = NULL; safe twice. */
void node_peer_cuda_destroy(node_peer_cuda **self_p);

/* True when dev_ptr is device memory of the engine's device. */
bool node_peer_cuda_same_device(const node_peer_cuda *cu, const void *dev_ptr);

/* The caller's stream (a cudaStream_t; NULL: the legacy default stream
 * with synchronous write-back). RUMOR_EINVAL (logged) for a stream CUDA
 * does not know or, with CUDA 12.8 and later, of another device. */
rumor_err node_peer_cuda_set_stream(node_peer_cuda *cu, void *stream);

/* Page-locked host memory (cudaHostAlloc) of bytes, for the staging
 * buffers: asynchronous copies need it. Made with the engine's device
 * current, so that no context is made on another. RUMOR_ENOMEM (logged).
 * host_free waits for the uploads first; NULL is a no-op. */
rumor_err
node_peer_cuda_host_alloc(node_peer_cuda *cu, size_t bytes, void **out);
void node_peer_cuda_host_free(node_peer_cuda *cu, void *p);

rumor_err node_peer_cuda_read_begin(node_peer_cuda *cu);
/* Queues a download and records mark after it; downloaded(mark) waits
 * for that one alone, so the host can process it while later ones run. */
rumor_err node_peer_cuda_download(node_peer_cuda *cu,
                                  size_t mark,
                                  void *host,
                                  const void *dev,
                                  size_t bytes);
rumor_err node_peer_cuda_downloaded(node_peer_cuda *cu, size_t mark);
rumor_err node_peer_cuda_read_end(node_peer_cuda *cu);
rumor_err node_peer_cuda_upload(node_peer_cuda *cu,
                                void *dev,
                                const void *host,
                                size_t bytes);
rumor_err node_peer_cuda_write_end(node_peer_cuda *cu);

/* Waits until no upload reads the staging buffers (the copy stream only;
 * free when it has nothing queued). */
rumor_err node_peer_cuda_idle(node_peer_cuda *cu);

/* A step whose algorithm runs on the tensors where they are (gossip's
 * CUDA backend, which works on Rumor's stream of the current device: the
 * peer turns it on for the call, core/cuda_stream.h): direct_begin makes the
 * engine's device current on the calling thread (and leaves it so: the
 * algorithm's calls follow) and makes Rumor's stream wait on an event recorded
 * on the caller's stream after its writes (the host does not wait); direct_end
 * records an event on Rumor's stream after the algorithm's work and makes the
 * caller's stream wait on it (no stream given: waits for it on the host, so the
 * tensors are written when the call returns). Rumor's stream is
 * non-blocking: these two events are the only order between the
 * algorithm's work and the caller's, the legacy default stream included. */
rumor_err node_peer_cuda_direct_begin(node_peer_cuda *cu);
rumor_err node_peer_cuda_direct_end(node_peer_cuda *cu);

#endif
