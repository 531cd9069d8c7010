/*
 * Private to the CUDA sources: Rumor's own CUDA stream. Every kernel,
 * copy and library call Rumor queues on a device (gossip's backend, the
 * device codecs under it, the low-rank backend, the --cuda workload) goes
 * on this one stream of the current device, so they are ordered among
 * themselves in the order the host queued them, whatever thread queues
 * them, as the legacy default stream ordered them before. It is
 * non-blocking: unlike the legacy stream it does not wait for, nor hold
 * up, work on the caller's streams (PyTorch's default stream included).
 * The two meet only through events, at the peer's step boundaries
 * (node/peer_cuda.h: direct_begin, direct_end), so a GossipModel's
 * exchange overlaps the backward pass on the GPU too.
 *
 * A host read of device memory is a copy on this stream followed by a
 * wait for this stream alone; nothing synchronises the device.
 */
#ifndef RUMOR_CORE_CUDA_STREAM_H
#define RUMOR_CORE_CUDA_STREAM_H

#ifdef __cplusplus
extern "C" {
#endif

/* The stream (a cudaStream_t) on the calling thread's current device:
 * made at first use and kept for the process. When CUDA cannot make one
 * (logged once per device) or the device is unknown: NULL, the legacy
 * default stream, which orders the same work as before, only without the
 * overlap. */
void *core_cuda_stream(void);

#ifdef __cplusplus
}
#endif

#endif
