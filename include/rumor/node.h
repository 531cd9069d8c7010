/*
 * node: the runtime a user runs, built on the training pieces of
 * rumor/train.h. Three parts, in order:
 *   1. the node process (`rumor node`): its options (by name, from an INI
 *      file), the run (workload, optimizer, gossip algorithm and transport;
 *      steps with deadlines, the fault path, stop and resume) and its
 *      summary;
 *   2. the peer: the same runtime under the caller's own training loop and
 *      tensors (the python/rumor package is built on it);
 *   3. checkpoint files: the crc-checked container the node writes durably
 *      and resumes from.
 *
 * Thread safety: an object is used by one thread at a time; distinct
 * objects may be used concurrently. rumor_node_stop may be called from
 * another thread, it and rumor_peer_stop from a signal handler.
 * Ownership: every object is owned by its creator and freed with its
 * _destroy(&p); borrowed pointers are named in each contract.
 */
#ifndef RUMOR_NODE_H
#define RUMOR_NODE_H

#include "rumor/core.h"
#include "rumor/gossip.h"
#include "rumor/train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================================================================
 * 1. the node process
 * ====================================================================== */

/*
 * A node process (`rumor node`): one workload, one optimizer, one gossip
 * algorithm and one transport, training for a number of steps with its
 * neighbours on the topology and writing metrics. The loop follows the
 * reference: gradient at x_t, gossip, then the optimizer step with that
 * gradient. docs/node.md documents every option and the loop ("The
 * training loop").
 */

#define RUMOR_NODE_PATH_MAX     1024 /* topology, key and metrics paths */
#define RUMOR_NODE_LISTEN_BYTES 280  /* --metrics-listen: host and port */

typedef enum rumor_node_exchange {
    RUMOR_NODE_EXCHANGE_AUTO = 0,    /* gradient for powersgd and allreduce,
                                        model for the others */
    RUMOR_NODE_EXCHANGE_MODEL = 1,   /* gossip the parameters x_t */
    RUMOR_NODE_EXCHANGE_GRADIENT = 2 /* average the gradients (data-parallel;
                                        powersgd and allreduce only) */
} rumor_node_exchange;

struct rumor_node_opts {
    char topology[RUMOR_NODE_PATH_MAX];   /* topology file (endpoints, keys) */
    uint32_t id;                          /* this node */
    char key[RUMOR_NODE_PATH_MAX];        /* key base: DIR/NAME(.key, .pub) */
    bool insecure;                        /* plain TCP, no CURVE */
    struct rumor_workload_opts workload;  /* node, nodes, dataset set by new */
    char dataset[RUMOR_DATASET_SPEC_MAX]; /* rumor_dataset_open spec; "" =
                                             default for the workload */
    struct rumor_optim_opts optim;
    struct rumor_gossip_opts gossip;
    rumor_node_exchange exchange;
    bool overlap;         /* model exchange: compute the gradient in a second
                             thread while the gossip runs (same numbers) */
    uint64_t steps;       /* training steps */
    uint32_t deadline_ms; /* per gossip step */
    uint32_t connect_ms;  /* waiting for the links to come up, and the
                             deadline of the first step */
    uint64_t eval_every; /* held-out evaluation period in steps; 0 = end only */
    uint64_t consensus_every; /* period of the consensus probe (full models
                                 exchanged with the neighbours, counted
                                 apart from the gossip bytes); 0 = off */
    char metrics_dir[RUMOR_NODE_PATH_MAX]; /* "" = no metrics file */
    /* "" (off), or PORT, :PORT or ADDR:PORT: the counters for Prometheus
     * at http://ADDR:PORT/metrics, on loopback unless ADDR is given */
    char metrics_listen[RUMOR_NODE_LISTEN_BYTES];
    rumor_log_level log_level;
    uint64_t rate_bits; /* link shaping: bit/s per link, 0 = none */
    uint32_t delay_ms;  /* link shaping: one-way delay */
    int progress;       /* -1: when stdout is a terminal; 0 off; 1 on */
    char checkpoint_dir[RUMOR_NODE_PATH_MAX]; /* "" = no checkpoints */
    uint64_t checkpoint_every; /* steps between checkpoints; 0 = only the
                                  final one on a stop */
    uint32_t checkpoint_keep;  /* newest files kept (default 3) */
    bool resume;               /* continue from the newest good checkpoint */
    uint32_t down_after;       /* dpsgd: missed steps before a neighbour is
                                  marked down and probed (1..32, default 3) */
    double deadline_factor;    /* adaptive step deadline: min(deadline_ms,
                                  max(2 s, factor * longest recent wait));
                                  0 = always deadline_ms (default 8) */
    bool join; /* fetch the model and step from a live neighbour first */
};

/* Defaults: see docs/node.md (mlp 64-32-10 on the digits, momentum SGD
 * lr 0.05, dpsgd, 300 steps, deadline 10 s, connect 30 s, eval every 50). */
RUMOR_API void rumor_node_opts_default(struct rumor_node_opts *opts);

/* Checks that the values fit together: --topology, --key or --insecure,
 * PowerSGD's and error feedback's combinations, --exchange against the
 * algorithm. For callers that fill the struct themselves, so nothing was
 * given by name: the refusals of options that do not apply (and of a
 * missing --id) are rumor_node_config_check's. rumor_node_new and
 * rumor_peer_new run this check. RUMOR_EINVAL with diag naming the
 * options. */
RUMOR_API rumor_err rumor_node_opts_check(const struct rumor_node_opts *opts,
                                          struct rumor_diag *diag);

/* True when name is an option rumor_node_config_set knows. */
RUMOR_API bool rumor_node_opts_known(const char *name);

/* True when name is a flag (an option that takes no value on a command
 * line: insecure, cuda). */
RUMOR_API bool rumor_node_opts_is_flag(const char *name);

/*
 * Options set by name, as the command line, the INI file and the Python
 * binding spell them: a struct rumor_node_opts and which options were
 * given, so an option that does not apply to the chosen workload,
 * optimizer or algorithm is refused rather than ignored.
 */
typedef struct rumor_node_config rumor_node_config;

/* A config with the defaults of rumor_node_opts_default and nothing
 * given. RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_node_config_new(rumor_node_config **out);

/* Frees the config and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_node_config_destroy(rumor_node_config **self_p);

/* The options, borrowed for the config's life: for rumor_node_new,
 * rumor_peer_new and callers that read them. A field written through the
 * pointer counts as not given. */
RUMOR_API struct rumor_node_opts *
rumor_node_config_opts(rumor_node_config *cfg);

/* Sets one option by its long name without the dashes ("lr", "algo",
 * "hidden", ...) from its text value (booleans: "true"/"false"/"1"/"0";
 * "" for a flag means true) and records it as given. "ef" with a dgc
 * value also makes the optimizer plain SGD unless "optimizer" was given
 * (DGC's memory carries the momentum). RUMOR_EINVAL with diag for an
 * unknown name or a bad value; cfg is unchanged then. */
RUMOR_API rumor_err rumor_node_config_set(rumor_node_config *cfg,
                                          const char *name,
                                          const char *value,
                                          struct rumor_diag *diag);

/* Applies an INI file (keys = long option names, an optional [node]
 * section; other sections are refused). Errors: RUMOR_ENOTFOUND /
 * RUMOR_EIO, RUMOR_EINVAL with diag at file:line. */
RUMOR_API rumor_err rumor_node_config_load(rumor_node_config *cfg,
                                           const char *path,
                                           struct rumor_diag *diag);

#define RUMOR_NODE_CONFIG_MAX (1 << 20) /* bytes of a config file */

/* The parse behind rumor_node_config_load, a pure function of the bytes
 * text[0..len) (name is only used in diag): all options applied, or none
 * (cfg unchanged) and RUMOR_EINVAL with diag at name:line. Text with a
 * NUL byte or longer than RUMOR_NODE_CONFIG_MAX is refused. */
RUMOR_API rumor_err rumor_node_config_parse_ini(rumor_node_config *cfg,
                                                const char *name,
                                                const uint8_t *text,
                                                size_t len,
                                                struct rumor_diag *diag);

/* rumor_node_opts_check, and before its checks of the values the
 * refusals that need to know what was given: a missing --id, and an
 * option given that does not apply to the chosen workload, optimizer or
 * algorithm ("--rank does not apply to --algo dpsgd"). RUMOR_EINVAL with
 * diag naming the options of the first problem found. */
RUMOR_API rumor_err rumor_node_config_check(const rumor_node_config *cfg,
                                            struct rumor_diag *diag);

/* True when the run averages gradients instead of gossiping the model
 * (--exchange, with auto resolved by the algorithm: powersgd and
 * allreduce): what a training loop hands the peer. */
RUMOR_API bool
rumor_node_opts_gradient_exchange(const struct rumor_node_opts *opts);

typedef struct rumor_node rumor_node;

/* Builds everything a run needs: loads the topology and this node's key,
 * the dataset and shard, the optimizer, the gossip algorithm, starts the
 * transport and opens DIR/node-N.jsonl. *out is set on success only.
 * Errors: RUMOR_EINVAL (options, with diag), loader and transport errors
 * as they come. */
RUMOR_API rumor_err rumor_node_new(const struct rumor_node_opts *opts,
                                   rumor_node **out,
                                   struct rumor_diag *diag);

/* Stops the transport, closes the metrics file, frees everything and sets
 * *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_node_destroy(rumor_node **self_p);

/* Runs the training: waits for the links (connect_ms), then opts.steps
 * steps, evaluating every eval_every steps and at the end. Every wait has
 * a deadline: a neighbour that misses one gives RUMOR_ETIMEDOUT (logged
 * with the peers and their liveness) and the run stops with the model of
 * the last good step. After rumor_node_stop the run ends after the
 * current step and returns RUMOR_OK with summary.stopped set. Transport
 * errors come back as they are. */
RUMOR_API rumor_err rumor_node_run(rumor_node *node, struct rumor_diag *diag);

/* Asks a running rumor_node_run to stop after its current step. Only sets
 * an atomic flag: safe from a signal handler and from another thread. */
RUMOR_API void rumor_node_stop(rumor_node *node);

struct rumor_node_summary {
    uint64_t steps;       /* steps completed */
    bool stopped;         /* ended early by rumor_node_stop */
    double loss;          /* last minibatch loss */
    double test_loss;     /* last held-out evaluation (NAN if none) */
    double accuracy;      /* last held-out accuracy (NAN if none or lsq) */
    double optimum_error; /* lsq: max |W - W*| of the last evaluation */
    double consensus;     /* last probe: mean over the neighbours j of
                             ||x_i - x_j||^2 (NAN if none) */
    uint64_t bytes_sent;  /* transport totals, headers in */
    uint64_t bytes_recv;
    uint64_t gossip_bytes_sent; /* wire bytes of the gossip messages sent */
    uint64_t gossip_bytes_recv; /* and received */
    bool refused;               /* a neighbour's settings or model differ:
                                   refused at the handshake, before the
                                   first step (a restart cannot help) */
    bool diverged;              /* training diverged (the run's error
                                   names the options that control it) */
};

/* What the run has done so far. */
RUMOR_API void rumor_node_summary(const rumor_node *node,
                                  struct rumor_node_summary *out);

/* ======================================================================
 * 2. peer: Rumor under the caller's own training loop (node/peer.c; the
 *    python/rumor package is built on it, see docs/python.md)
 * ====================================================================== */

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
 * written back after each step.
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
 * it does nothing and rumor_peer_stopped is true. */
RUMOR_API rumor_err rumor_peer_gossip(rumor_peer *peer,
                                      struct rumor_diag *diag);

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
 * rumor_peer_gossip. */
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

/* Nodes in the topology. */
RUMOR_API uint32_t rumor_peer_nodes(const rumor_peer *peer);

/* Appends the peer's state to out: a magic, the next step number and the
 * algorithm's state (rumor_gossip_state_save; with buckets, each
 * bucket's range and state), little-endian. With the
 * caller's tensors saved beside it (e.g. a PyTorch state_dict), a new
 * peer made with the same options and shapes continues exactly. Call
 * between steps. RUMOR_ETOOBIG / RUMOR_ENOMEM from the buffer. */
RUMOR_API rumor_err rumor_peer_state_save(const rumor_peer *peer,
                                          rumor_buf *out);

/* Restores a state written by rumor_peer_state_save (bounds-checked; the
 * peer is unchanged on error): RUMOR_EPROTO with diag for bytes that are
 * not such a state or do not fit this peer's algorithm, shapes and
 * buckets.
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

/* The workload `rumor node` would train with these options: the dataset
 * (opts->dataset), this node's shard among the topology's nodes, the seed.
 * For callers that drive the built-in workloads from their own loop (the
 * Python binding's tests compare such a loop with `rumor node`). */
RUMOR_API rumor_err rumor_node_workload_new(const struct rumor_node_opts *opts,
                                            rumor_workload **out,
                                            struct rumor_diag *diag);

/* ======================================================================
 * 3. checkpoints (node/checkpoint.c; format in docs/protocol.md,
 *    "Checkpoint files", use in docs/node.md)
 * ====================================================================== */

/*
 * A checkpoint is a file of sections, each with its length and crc32c,
 * behind a header with a magic, a version, the node and the step. Files
 * are written to a temporary name, fsync'ed, renamed and the directory
 * fsync'ed, so a crash leaves either the previous set of files or the new
 * one, never a torn file under a checkpoint's name; the reader still
 * checks everything, and a damaged file is refused (naming the file and
 * the section) in favour of the previous good one.
 */

#define RUMOR_CHECKPOINT_VERSION       1
#define RUMOR_CHECKPOINT_MAX_SECTIONS  16
#define RUMOR_CHECKPOINT_FILE_MAX      ((size_t)1 << 40) /* read cap */
#define RUMOR_CHECKPOINT_HEADER_BYTES  32
#define RUMOR_CHECKPOINT_SECTION_BYTES 24 /* a section's own header */
#define RUMOR_CHECKPOINT_TRAILER_BYTES 8

/* Section ids written by `rumor node` (others are kept and ignored). */
typedef enum rumor_checkpoint_section_id {
    RUMOR_CHECKPOINT_META = 1,   /* node, nodes, seed, algorithm, sizes */
    RUMOR_CHECKPOINT_MODEL = 2,  /* shapes and float32 tensors */
    RUMOR_CHECKPOINT_OPTIM = 3,  /* rumor_optim_save */
    RUMOR_CHECKPOINT_GOSSIP = 4, /* rumor_gossip_state_save */
    RUMOR_CHECKPOINT_RUNTIME = 5 /* counters for the metrics */
} rumor_checkpoint_section_id;

struct rumor_checkpoint_section {
    uint32_t id;
    const uint8_t *data; /* borrowed */
    size_t len;
};

struct rumor_checkpoint {
    uint32_t node;
    uint64_t step; /* steps completed: the run continues at this step */
    size_t count;
    struct rumor_checkpoint_section sections[RUMOR_CHECKPOINT_MAX_SECTIONS];
};

/* "meta", "model", ... or "unknown". */
RUMOR_API const char *rumor_checkpoint_section_name(uint32_t id);

/* The section with that id, or NULL. */
RUMOR_API const struct rumor_checkpoint_section *
rumor_checkpoint_find(const struct rumor_checkpoint *c, uint32_t id);

/* Appends the file image of c to out. RUMOR_EINVAL for more than
 * RUMOR_CHECKPOINT_MAX_SECTIONS sections; buffer errors as they come. */
RUMOR_API rumor_err rumor_checkpoint_encode(const struct rumor_checkpoint *c,
                                            rumor_buf *out);

/* Decodes a file image: a pure function that checks the magic, version,
 * header crc, every section's header crc, length (against what is left)
 * and payload crc32c, and that nothing follows the trailer. Sections of
 * *out point into data. RUMOR_EPROTO with diag naming the section ("section
 * 2 (model): payload crc32c mismatch") on any damage. */
RUMOR_API rumor_err rumor_checkpoint_decode(const uint8_t *data,
                                            size_t len,
                                            struct rumor_checkpoint *out,
                                            struct rumor_diag *diag);

/* DIR/node-N.step-S.ckpt (S zero-padded to 12 digits) into path. */
RUMOR_API void rumor_checkpoint_path(const char *dir,
                                     uint32_t node,
                                     uint64_t step,
                                     char *path,
                                     size_t cap);

/* Writes c durably as rumor_checkpoint_path(dir, c->node, c->step):
 * creates dir, writes a temporary file, fsyncs it, renames it, fsyncs the
 * directory, then removes this node's oldest checkpoints beyond keep
 * (keep >= 1) and any temporary file a killed writer left. RUMOR_EIO with
 * diag naming the file and the system error. */
RUMOR_API rumor_err rumor_checkpoint_write(const char *dir,
                                           const struct rumor_checkpoint *c,
                                           uint32_t keep,
                                           struct rumor_diag *diag);

/* Reads node's newest checkpoint in dir that decodes, trying older ones
 * when the newest is damaged (each refusal logged as a warning naming the
 * file and the section). buf receives the file (c's sections point into
 * it), path its name. RUMOR_ENOTFOUND with diag when dir holds no good
 * checkpoint of node. */
RUMOR_API rumor_err rumor_checkpoint_read_newest(const char *dir,
                                                 uint32_t node,
                                                 rumor_buf *buf,
                                                 struct rumor_checkpoint *c,
                                                 char *path,
                                                 size_t cap,
                                                 struct rumor_diag *diag);

#endif /* RUMOR_NODE_H */
