/*
 * node, part 3 of 4 (include rumor/node.h): the peer, Rumor under the
 * caller's own training loop (node/peer.c; the python/rumor package is
 * built on it, see docs/python.md).
 */
#ifndef RUMOR_PUBLIC_NODE_PEER_H
#define RUMOR_PUBLIC_NODE_PEER_H

#include "rumor/core.h"
#include "rumor/node/config.h"

/*
 * A peer is a node runtime without workload, optimizer or loop: the
 * caller owns the model (e.g. a PyTorch module's parameters) and calls
 * rumor_peer_gossip after each optimizer step. Its options are those of
 * `rumor node` (struct rumor_node_opts, set by name through a
 * rumor_node_config; the workload, optimizer and step options are
 * unused), its transport, rounds, deadlines and byte counters are the
 * runtime's. Float32 tensors in host memory are gossiped in place
 * (zero-copy); float64, float16 and bfloat16 tensors, and tensors in CUDA
 * memory (CUDA builds only), go through a float32 staging copy that is
 * written back after each step, except float32 CUDA tensors whose
 * algorithm runs on the GPU (every tensor CUDA; dpsgd, choco, deepsqueeze,
 * moniqua or powergossip; no stale, join, resume or probe:
 * docs/python.md), which stay where they are.
 */

typedef enum rumor_dtype {
    RUMOR_DTYPE_F32 = 0,
    RUMOR_DTYPE_F64 = 1,
    RUMOR_DTYPE_F16 = 2, /* IEEE binary16 */
    RUMOR_DTYPE_BF16 = 3 /* bfloat16 */
} rumor_dtype;

/* Bytes of one element of dtype (0 for an unknown value). */
RUMOR_API size_t rumor_dtype_size(rumor_dtype dtype);

/* One caller-owned tensor: data stays the caller's and must stay valid
 * and unmoved for the peer's life; row-major and contiguous. */
struct rumor_peer_tensor {
    void *data; /* host memory, or CUDA device memory */
    rumor_dtype dtype;
    rumor_device device; /* RUMOR_DEVICE_CUDA needs a CUDA build */
    size_t ndim;         /* <= RUMOR_GOSSIP_MAX_DIMS */
    size_t shape[RUMOR_GOSSIP_MAX_DIMS];
};

struct rumor_peer_stats {
    uint64_t steps;      /* gossip and average steps done */
    uint64_t bytes_sent; /* transport totals, headers in */
    uint64_t bytes_recv;
    uint64_t gossip_bytes_sent; /* wire bytes of the gossip messages */
    uint64_t gossip_bytes_recv;
    uint64_t gossip_frames_sent;
    double seconds;        /* since the first step began */
    double seconds_gossip; /* encode and decode (emit, absorb) */
    double seconds_wait;   /* sending and waiting for neighbours */
    double seconds_copy;   /* staging copies and conversions */
    /* bytes of the caller's CUDA tensors copied host to device and device
     * to host (0 without CUDA tensors): each step that stages downloads
     * and uploads them whole, and rumor_peer_new downloads them once; on
     * the GPU, the payloads the algorithms copied */
    uint64_t pcie_h2d_bytes;
    uint64_t pcie_d2h_bytes;
};

typedef struct rumor_peer rumor_peer;

/* Builds a peer for tensors[0..count) (the array is copied, the memory it
 * points to is borrowed): checks the options (rumor_node_opts_check),
 * loads the topology and key, creates the algorithm on the tensors and
 * starts the transport; the links are waited for by the first step.
 * Every node of the run must register the same shapes in the same order
 * (the HELLO fingerprint refuses a peer that does not). Errors:
 * RUMOR_EINVAL with diag (options, shapes, dtypes, NULL data),
 * RUMOR_ENOTSUP with diag for CUDA tensors in a CPU-only build, loader and
 * transport errors as rumor_node_new. *out is set on success only. */
RUMOR_API rumor_err rumor_peer_new(const struct rumor_node_opts *opts,
                                   const struct rumor_peer_tensor *tensors,
                                   size_t count,
                                   rumor_peer **out,
                                   struct rumor_diag *diag);

/* Stops the transport (after waiting, bounded, for queued sends) and
 * frees everything but the caller's tensors; *self_p = NULL; safe twice. */
RUMOR_API void rumor_peer_destroy(rumor_peer **self_p);

/* One step of the configured algorithm over the network on the tensors,
 * in place, as a step of `rumor node`. The first step also waits for the
 * links (connect_ms) and has connect_ms as its deadline (with opts.join it
 * first takes a live neighbour's model and step instead). For algorithms
 * that can skip (rumor_gossip_can_skip) a neighbour that misses the
 * deadline is skipped, marked down after down_after steps and re-admitted
 * when it returns, and the step may jump ahead to meet neighbours
 * (rumor_peer_stats' steps tells where the peer is); for the others it
 * gives RUMOR_ETIMEDOUT with the tensors unchanged. diag says which step
 * failed and why. Once the run's agreed stop is reached (rumor_peer_stop)
 * it does nothing and rumor_peer_stopped is true.
 * With opts.gossip.stale = S > 0 (a model exchange; docs/gossip.md,
 * "Stale exchanges") it returns without waiting for the network: the
 * exchanges of step t - S and before land on the tensors (x += G - s,
 * waiting only for one still under way), then, when the algorithm
 * exchanges at this step (localsgd: its synchronizations), a snapshot s
 * of the tensors is queued and exchanged on a thread of the peer, over a
 * copy the peer owns, into G. An exchange's failure is returned by the
 * call that lands it. rumor_peer_flush lands the rest at the end. */
RUMOR_API rumor_err rumor_peer_gossip(rumor_peer *peer,
                                      struct rumor_diag *diag);

/* Stale exchanges: lands every exchange queued or under way on the
 * tensors now (waiting for them), as the end of a run needs; a no-op
 * without any. rumor_peer_destroy drops those not landed. Errors as
 * rumor_peer_gossip's. */
RUMOR_API rumor_err rumor_peer_flush(rumor_peer *peer, struct rumor_diag *diag);

/* True while a stale exchange is queued or under way (not landed). */
RUMOR_API bool rumor_peer_in_flight(const rumor_peer *peer);

/* opts.gossip.stale of the peer (0: exchanges land within the call). */
RUMOR_API uint32_t rumor_peer_stale(const rumor_peer *peer);

/* Tensors [first, first + count) of the peer's, exchanged as one bucket. */
struct rumor_peer_bucket {
    size_t first;
    size_t count;
};

/* Cuts the exchange into buckets, exchanged in the order given (e.g. the
 * reverse of the tensors', as a backward pass produces gradients), each
 * as the algorithm's own exchange of its tensors: PowerSGD's P and Q
 * all-reduces per bucket, its warm-start Q and the error memories per
 * tensor as before; the random streams are those of the whole model. The
 * result is the whole exchange's bit for bit where the sums do not depend
 * on where the ring cuts its chunks: 2 nodes (a + b = b + a),
 * allreduce-f64 (exact sums) and allreduce with a codec (per element, in
 * node order). With 3 or more nodes the float ring of allreduce and of
 * PowerSGD's P and Q cuts its chunks from the bucket instead of the
 * model, so an element's n terms may be added in another order: a
 * difference of a few float32 roundings, at most about (n - 1) 2^-24
 * times the sum of the terms' magnitudes. Every node must set the same
 * buckets.
 * Call before the first step; then rumor_peer_gossip exchanges every
 * bucket in turn, and rumor_peer_gossip_bucket one at a time. Errors:
 * RUMOR_EINVAL with diag for ranges that do not cover every tensor once,
 * after the first step, and for algorithms that gossip the model through
 * the fault path (rumor_gossip_can_skip) or PowerSGD with adapt (its
 * error is the whole model's); rumor_gossip_new's errors. */
RUMOR_API rumor_err
rumor_peer_buckets_set(rumor_peer *peer,
                       const struct rumor_peer_bucket *buckets,
                       size_t count,
                       struct rumor_diag *diag);

/* The number of buckets (0: none set). */
RUMOR_API size_t rumor_peer_buckets(const rumor_peer *peer);

/* The exchange of bucket `bucket` of the step, in place: every step
 * exchanges buckets 0, 1, ... in order, each once (RUMOR_EINVAL with diag
 * otherwise). Bucket 0 begins the step as rumor_peer_gossip does (the
 * links at the first step, the stop plan; after the agreed stop every
 * bucket does nothing); the last ends it (the step count, metrics). Its
 * messages carry rounds after the earlier buckets' of the step, so a
 * neighbour a bucket ahead is never mistaken for this one. The caller's
 * other tensors are not touched: a thread may exchange bucket k while
 * the caller computes the gradients of the next buckets' tensors (no two
 * calls on one peer may overlap). A failed bucket fails the step (errors
 * as rumor_peer_gossip; the buckets already done keep their result), and
 * the next call is bucket 0 of the same step. */
RUMOR_API rumor_err rumor_peer_gossip_bucket(rumor_peer *peer,
                                             size_t bucket,
                                             struct rumor_diag *diag);

/* Step-ahead error feedback (localsgd with delta_codec and ef_alpha > 0,
 * rumor_gossip_step_ahead): moves the tensors to the look-ahead point
 * where the caller then computes its gradient, as `rumor node` does before
 * each gradient. Call once per step, before the gradient; a no-op for
 * every other configuration (rumor_peer_looks_ahead says which).
 * RUMOR_ENUMERIC with diag for a non-finite model. */
RUMOR_API rumor_err rumor_peer_step_ahead(rumor_peer *peer,
                                          struct rumor_diag *diag);

/* True when rumor_peer_step_ahead moves the tensors. */
RUMOR_API bool rumor_peer_looks_ahead(const rumor_peer *peer);

/* Asks the run to stop as SIGTERM asks `rumor node`: the request travels
 * with the gossip and every node stops after the same step. Safe in a
 * signal handler. */
RUMOR_API void rumor_peer_stop(rumor_peer *peer);

/* True once the agreed stop is reached (rumor_peer_gossip did nothing). */
RUMOR_API bool rumor_peer_stopped(const rumor_peer *peer);

/* --- elastic rings (docs/reliability.md, "Elastic rings") ----------------
 * The ring algorithms (allreduce, allreduce-f64, powersgd, localsgd, a
 * codec's all-reduce) go on without a dead node: the live members agree
 * on a new ring, a step in flight is run again by all of them or settled
 * with the result one of them holds, and a restarted worker (opts.join)
 * or one the ring removed (stalled past the deadline) is taken back in
 * with a member's tensors and algorithm state. The tensors of a gradient
 * exchange are not the model, so a joiner also needs the caller's own
 * state (the parameters and the optimizer's): */

/* save appends the caller's state to out when a joiner asks this node for
 * its state, called from within a step (the thread of rumor_peer_gossip,
 * _gossip_bucket or _average), with the caller's state as it is at that
 * step's start; an error sends none. NULL (the default): none. */
typedef rumor_err (*rumor_peer_state_fn)(void *arg, rumor_buf *out);
RUMOR_API void
rumor_peer_state_source(rumor_peer *peer, rumor_peer_state_fn save, void *arg);

/* Whether a call since the last one took this node into an elastic ring
 * (a join or a re-admission; the step count moved to the ring's); *data
 * and *len then hold what the member's state source wrote (len 0: none),
 * valid until the next step. The caller loads it before its next step. */
RUMOR_API bool
rumor_peer_joined(rumor_peer *peer, const uint8_t **data, size_t *len);

/* The first step's start without a step: the links, and with opts.join
 * the ring's state (or, for an algorithm that skips, a neighbour's model
 * and step) into the tensors. A worker of a gradient exchange joins so
 * before it computes its first gradient (rumor_peer_joined then gives the
 * member's state). A no-op once a step has run. */
RUMOR_API rumor_err rumor_peer_join(rumor_peer *peer, struct rumor_diag *diag);

/* The exact average of the tensors over all nodes (a ring all-reduce,
 * whatever the algorithm), in place: the synchronisation of local SGD.
 * Uses the next step number, like rumor_peer_gossip; every node must make
 * the same sequence of gossip and average calls. Errors as
 * rumor_peer_gossip; RUMOR_EINVAL with diag with stale exchanges (their
 * thread owns the links). */
RUMOR_API rumor_err rumor_peer_average(rumor_peer *peer,
                                       struct rumor_diag *diag);

/* Writes a metrics line (the node's JSON-lines format, with the caller's
 * minibatch loss and held-out loss and accuracy; NAN leaves a number out)
 * when metrics_dir was set, and refreshes the transport totals
 * rumor_peer_stats reports. RUMOR_EIO when the write fails. */
RUMOR_API rumor_err rumor_peer_report(rumor_peer *peer,
                                      double loss,
                                      double test_loss,
                                      double accuracy);

/* Counters so far (transport totals as of the last step or report). */
RUMOR_API void rumor_peer_stats(const rumor_peer *peer,
                                struct rumor_peer_stats *out);

/* Orders the copies of the peer's CUDA tensors against the caller's CUDA
 * stream (a cudaStream_t of the tensors' device, e.g. PyTorch's
 * torch.cuda.current_stream().cuda_stream) instead of waiting on the
 * host: a call that reads the tensors (every step, average, join, flush,
 * step ahead) first makes the peer's own stream wait on an event recorded
 * on cuda_stream, so the work queued there before the call has written
 * them; one that writes them back queues the copies and makes cuda_stream
 * wait on an event recorded after them, and returns without waiting for
 * them: work queued on cuda_stream afterwards reads the new values, work
 * on other streams must wait on cuda_stream first. Nothing synchronises
 * the device. NULL (the default): the copies wait for the work queued on
 * the legacy default stream (PyTorch's default stream) and are done when
 * the call returns. Call between steps (not while another thread runs a
 * bucket), and again when the caller's stream changes; the stream must
 * outlive the peer or be replaced first. Errors, with diag:
 * RUMOR_ENOTSUP for a stream in a CPU-only build (NULL is accepted
 * there: there is nothing to order); RUMOR_EINVAL for a stream when the
 * peer has no CUDA tensor, for a handle CUDA does not know, for one of
 * another device (CUDA 12.8 and later; before, the next step fails with
 * RUMOR_EBACKEND), and during a step of buckets. */
RUMOR_API rumor_err rumor_peer_set_stream(rumor_peer *peer,
                                          void *cuda_stream,
                                          struct rumor_diag *diag);

/* Nodes in the topology. */
RUMOR_API uint32_t rumor_peer_nodes(const rumor_peer *peer);

/* Appends the peer's state to out: a magic, the next step number and the
 * algorithm's state (rumor_gossip_state_save; with buckets, each
 * bucket's range and state), little-endian. With the
 * caller's tensors saved beside it (e.g. a PyTorch state_dict), a new
 * peer made with the same options and shapes continues exactly. Call
 * between steps. RUMOR_ETOOBIG / RUMOR_ENOMEM from the buffer;
 * RUMOR_EINVAL (logged) while a stale exchange is in flight
 * (rumor_peer_in_flight): its correction is in no state yet. */
RUMOR_API rumor_err rumor_peer_state_save(const rumor_peer *peer,
                                          rumor_buf *out);

/* Restores a state written by rumor_peer_state_save (bounds-checked; the
 * peer is unchanged on error): RUMOR_EPROTO with diag for bytes that are
 * not such a state or do not fit this peer's algorithm, shapes and
 * buckets; RUMOR_EINVAL with diag while a stale exchange is in flight.
 * Without opts.join every node is taken to resume together, and the run
 * continues exactly. With opts.join (and an algorithm that can skip) the
 * peer is one restarted worker coming back into a running run, as
 * `rumor node --resume` after a crash: it keeps its restored model,
 * fetches none, and a handshake before its next step settles the edges
 * and jumps to the neighbours' step. */
RUMOR_API rumor_err rumor_peer_state_load(rumor_peer *peer,
                                          const uint8_t *data,
                                          size_t len,
                                          struct rumor_diag *diag);

#endif /* RUMOR_PUBLIC_NODE_PEER_H */
