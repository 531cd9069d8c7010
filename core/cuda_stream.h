/*
 * Rumor's own CUDA stream, and which threads queue on it.
 *
 * A thread queues Rumor's CUDA work (gossip's backend, the device codecs
 * under it, the low-rank backend, the --cuda workload) on the legacy
 * default stream of its current device, as every public entry point
 * promises, unless it has turned the own stream on: then on one stream
 * of Rumor's per device, non-blocking, made at first use and kept for the
 * process. Work on it is ordered in the order the host queued it, from
 * any thread, and neither waits for nor holds up the caller's streams
 * (PyTorch's default stream included): the two meet only through events.
 *
 * The peer turns it on around each entry that reaches its tensors' device
 * with the algorithm's state there (node/peer_cuda.h: direct_begin and
 * direct_end record those events), and a stale exchange runs with the
 * setting of the thread that queued it (node/stale.c), so every piece of
 * one peer's device work goes on the one stream.
 *
 * The flag is host code, in every build; core_cuda_stream is NULL in a
 * CPU-only build.
 */
#ifndef RUMOR_CORE_CUDA_STREAM_H
#define RUMOR_CORE_CUDA_STREAM_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Turns this thread's own stream on or off; returns the setting before,
 * for the caller to restore. Every thread starts with it off. */
bool core_cuda_own_stream(bool on);

/* This thread's setting. */
bool core_cuda_own_stream_on(void);

/* This thread's current CUDA device (-1 when CUDA says none, and in a
 * CPU-only build), and making device current (nothing for -1): a thread
 * that runs another's device work (the stale exchanges' thread) takes
 * the queuing thread's device with its setting. */
int core_cuda_device(void);
void core_cuda_device_set(int device);

/* The stream (a cudaStream_t) this thread queues on now: NULL (the legacy
 * default stream) with the own stream off, else Rumor's stream of the
 * current device. When CUDA cannot make that (logged once per device) or
 * the device is unknown: NULL as well, which orders the same work, only
 * without the overlap. */
void *core_cuda_stream(void);

#ifdef __cplusplus
}
#endif

#endif
