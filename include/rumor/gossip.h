/*
 * gossip: decentralized averaging algorithms (GUIDE section 4), written
 * against a transport-agnostic round structure so the same code runs over
 * net/ and in an in-process simulator.
 *
 * An algorithm instance (rumor_gossip) lives on one node and works on that
 * node's model, a list of float32 tensors the caller owns. One gossip step
 * is a number of rounds; in each round the node first *emits* at most one
 * message per peer, then *absorbs* the messages its peers emitted to it in
 * the same round. A driver moves the bytes: the simulator (this module) by
 * routing buffers between instances in node order, a network driver
 * through net/. Nothing here calls ZeroMQ.
 *
 * Thread safety: one instance is used by one thread at a time.
 * Ownership: the model's tensor memory is borrowed for the instance's
 * life; emitted message buffers are owned by the instance and stay valid
 * until its next emit (absorb never touches them, so a driver may deliver
 * node i's messages after node i has absorbed its own).
 */
#ifndef RUMOR_GOSSIP_H
#define RUMOR_GOSSIP_H

#include "rumor/compress.h"
#include "rumor/core.h"
#include "rumor/lowrank.h"
#include "rumor/topology.h"

#define RUMOR_GOSSIP_MAX_DIMS    8
#define RUMOR_GOSSIP_MAX_TENSORS 65536
#define RUMOR_GOSSIP_ALGO_BYTES  32
#define RUMOR_GOSSIP_GAMMA_MAX   2.0 /* over-relaxation beyond 2 diverges */
#define RUMOR_GOSSIP_GAMMA_AUTO  0.0 /* gamma chosen from topology and codec */
#define RUMOR_GOSSIP_ADAPT_BYTES 16
#define RUMOR_GOSSIP_SAEF_BYTES  (RUMOR_COMPRESS_SPEC_MAX + 16)

/* One tensor of a model: data is borrowed (numel floats, row-major). */
struct rumor_tensor {
    float *data;
    size_t ndim;
    size_t shape[RUMOR_GOSSIP_MAX_DIMS];
};

struct rumor_model {
    struct rumor_tensor *tensors; /* borrowed array */
    size_t count;
};

/* Elements of a tensor (the product of its shape; 1 for ndim == 0). */
RUMOR_API size_t rumor_tensor_numel(const struct rumor_tensor *t);

struct rumor_gossip_opts {
    char algo[RUMOR_GOSSIP_ALGO_BYTES];  /* allreduce allreduce-f64 dpsgd
                               choco powergossip powersgd localsgd
                               deepsqueeze moniqua */
    char codec[RUMOR_COMPRESS_SPEC_MAX]; /* choco, deepsqueeze, and
                               allreduce with compressed: a codec */
    bool compressed; /* allreduce: each node's vector goes as codec's
                        message (with ef), all-gathered and averaged
                        (compressed data-parallel SGD), not exactly; the
                        node sets it when --codec is given; choco and
                        deepsqueeze always compress */
    /* error feedback memory of the compressing sender (rumor_ef_new's
     * spec: ef, ef-decay:BETA, dgc:MOMENTUM[,CLIP][,WARMUP], saef) or ""
     * (none): allreduce with compressed, localsgd with a delta_codec
     * ("" there: saef); rumor_gossip_ef_check says why other algorithms
     * refuse it */
    char ef[RUMOR_COMPRESS_SPEC_MAX];
    double gamma;        /* consensus step size, the reference's diffusion rate
                            (dpsgd, choco, powergossip, deepsqueeze, moniqua),
                            in (0, 2], or RUMOR_GOSSIP_GAMMA_AUTO: chosen by
                            rumor_gossip_new (rumor_gossip_gamma) */
    size_t rank;         /* powergossip, powersgd: rank of the factors */
    unsigned iterations; /* powergossip: power iterations per step */
    unsigned period;     /* localsgd: synchronize every H steps */
    unsigned gossip_rounds; /* localsgd: 0 = exact average, k = k rounds of
                               plain gossip */
    char delta_codec[RUMOR_COMPRESS_SPEC_MAX]; /* localsgd: "" or a codec
                               for the delta since the last sync, sent with
                               error feedback (exact averaging only) */
    double outer_lr;       /* localsgd: outer step on the averaged delta */
    double outer_momentum; /* localsgd: its Nesterov momentum; with
                              outer_lr, DiLoCo's outer optimizer */
    double theta;  /* moniqua: bound on how far neighbours' models are apart */
    uint64_t seed; /* run seed, equal on every node */
    double ef_alpha;  /* localsgd with delta_codec: step-ahead error feedback
                         coefficient in [0, 1]; 0 = plain EF, 1 = SAEF (see
                         rumor_gossip_step_ahead) */
    double clip_norm; /* robust mixing with this fixed radius instead of
                         the adaptive one (see robust below); 0: adaptive */
    /* localsgd with ef_alpha > 0: whose errors the look-ahead uses:
     * "self" (each node its own), "neighbourhood" (the W-weighted average
     * of the neighbours' errors, sent in one extra round, compressed with
     * delta_codec) or "neighbourhood:CODEC" (with that codec); "" is the
     * default */
    char saef_scope[RUMOR_GOSSIP_SAEF_BYTES];
    char adapt[RUMOR_GOSSIP_ADAPT_BYTES]; /* choco: "" (off), "fixed",
                        "rule" or "learned": the adaptive compression
                        controller (docs/adaptive.md); powersgd: "fixed"
                        or "rule" (the rank) */
    double comm_share;    /* adapt: target share of the step time spent
                             communicating, in [0, 1); 0: no link budget */
    double adapt_density; /* adapt without a link budget: message bytes
                             as a fraction of the dense fp32 message */
    double adapt_error;   /* rule: quantization error budget per layer;
                             powersgd: relative approximation error */
    double adapt_lambda;  /* learned: weight of bits in the surrogate loss */

    size_t adapt_rank_min; /* powersgd rule: lowest rank (0: 1) */
    size_t adapt_rank_max; /* powersgd rule: highest rank (0: 4 x rank) */

    /* powersgd, as PyTorch's PowerSGDState (docs/gossip.md, "PowerSGD
     * options"): */
    uint64_t start_iter;         /* steps of plain all-reduce first (0) */
    double min_compression_rate; /* compress a matrix only where (n + m) r
                                    rate < n m, else all-reduce it (2) */
    bool use_error_feedback;     /* keep e = M - approx per node (true) */
    bool warm_start;             /* reuse Q between steps; false: fresh
                                    from the seed every step (true).
                                    Shared with powergossip, as the same
                                    switch of its reference: each power
                                    iteration starts from the edge's last
                                    factor; false: from one drawn from
                                    the pair's seed and the edge's
                                    iteration count */
    double orth_eps;             /* orthogonalization epsilon (0) */
    bool batch_same_shape;       /* batched kernels per shape group (true) */
    bool one_sided;              /* epfml/powersgd's variant: iterations
                                    averaged products per step, one side
                                    each (false) */
    size_t tensor_base;          /* the model is tensors tensor_base, ... of a
                                    larger one (a bucket of the peer API's tensors,
                                    node/peer.c): per-tensor random streams (the
                                    codecs' seeds of allreduce with compressed,
                                    PowerSGD's Q) are those of the larger model's
                                    tensors, so a bucket's exchange draws what the
                                    whole model's would (0) */

    /* Robust mixing (docs/gossip.md, "Robust mixing"): each gossip
     * algorithm (dpsgd, choco, powergossip, deepsqueeze, moniqua) clips
     * what one neighbour moves the model by in a step, x_i += gamma sum_j
     * w_ij CLIP(x_j - x_i, tau) (the decoded difference for the
     * compressed ones; ClippedGossip), tau adaptive: clip_factor times the
     * clip_quantile of the step's neighbour distances, held back by their
     * history; the ring algorithms reject a non-finite or outsized chunk.
     * clip_norm > 0 fixes tau instead. */
    char robust[8];       /* "clip" (or "": the default) or "off" */
    double clip_quantile; /* in (0, 1]; 0: 0.5, the lower median */
    double clip_factor;   /* >= 1; 0: 3 */
};

/* RUMOR_OK when opts.ef applies to opts.algo (see ef above), else
 * RUMOR_EINVAL with a diag naming the option and why: an algorithm that
 * compresses nothing, or one with its own error compensation (CHOCO's
 * public copies, DeepSqueeze's error, PowerSGD's memory). */
RUMOR_API rumor_err rumor_gossip_ef_check(const struct rumor_gossip_opts *opts,
                                          struct rumor_diag *diag);

/* Defaults: algo "dpsgd", codec "qsgd:bits=4", compressed false, ef "", gamma
 * RUMOR_GOSSIP_GAMMA_AUTO, rank 1, iterations 1, period 1, gossip_rounds 0,
 * delta_codec "", outer_lr 1, outer_momentum 0, theta 0.1, seed 1,
 * ef_alpha 0, saef_scope "neighbourhood", start_iter 0,
 * min_compression_rate 2, use_error_feedback, warm_start and
 * batch_same_shape true, orth_eps 0, one_sided false (docs/gossip.md,
 * "Defaults"). */
RUMOR_API void rumor_gossip_opts_default(struct rumor_gossip_opts *opts);

/* One message of a round. data is borrowed (see the header comment). */
struct rumor_gossip_msg {
    uint32_t peer; /* emit: the receiver; absorb: the sender */
    const uint8_t *data;
    size_t len;
};

typedef struct rumor_gossip rumor_gossip;

/* Creates the algorithm on node self of topology t (borrowed: it must
 * outlive the instance) for a model whose tensors stay valid as long as
 * the instance. *out is set on success only. RUMOR_EINVAL with diag for an
 * unknown algorithm or an invalid option. */
RUMOR_API rumor_err rumor_gossip_new(const struct rumor_gossip_opts *opts,
                                     const rumor_topology *t,
                                     uint32_t self,
                                     const struct rumor_model *model,
                                     rumor_gossip **out,
                                     struct rumor_diag *diag);

/* Frees and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_gossip_destroy(rumor_gossip **self_p);

/* Rounds in gossip step `step` (the same on every node). */
RUMOR_API uint32_t rumor_gossip_rounds(const rumor_gossip *g, uint64_t step);

/* Round `round` of step `step`: *msgs receives the messages to send (an
 * array owned by g, valid until the next emit on g) and *count how many. */
RUMOR_API rumor_err rumor_gossip_emit(rumor_gossip *g,
                                      uint64_t step,
                                      uint32_t round,
                                      const struct rumor_gossip_msg **msgs,
                                      size_t *count);

/* Delivers the messages received in that round (any order). A message
 * from a node that is not expected, a duplicate, or a payload of the wrong
 * size is RUMOR_EPROTO; non-finite values are RUMOR_ENUMERIC; a missing
 * one is RUMOR_ETIMEDOUT. On error the model is left unchanged. */
RUMOR_API rumor_err rumor_gossip_absorb(rumor_gossip *g,
                                        uint64_t step,
                                        uint32_t round,
                                        const struct rumor_gossip_msg *msgs,
                                        size_t count);

/* The senders whose messages absorb needs in that round (so a network
 * driver knows whom to wait for): peers[0..*count). RUMOR_ETOOBIG when
 * cap is too small (*count says how many are needed). */
RUMOR_API rumor_err rumor_gossip_expected(const rumor_gossip *g,
                                          uint64_t step,
                                          uint32_t round,
                                          uint32_t *peers,
                                          size_t cap,
                                          size_t *count);

/* Step-ahead error feedback (SAEF, Xu, Huo and Huang, AAAI 2021; GUIDE
 * section 5). Call it before computing the gradient of a training step:
 * it moves the model to the look-ahead point x - alpha e_bar, where e_bar
 * is the W-weighted average of the compression errors the neighbourhood
 * still owes the network (opts.saef_scope "neighbourhood": each sync ends
 * with one extra round that sends the errors to the neighbours; a
 * neighbour whose error did not come gives its weight to the own term) or
 * this node's own error e ("self", and the fallback when the error round
 * failed), and alpha is opts.ef_alpha, so the gradient is taken where the
 * model will be once those errors have been sent. The next
 * synchronization accounts for the move: what is sent is the same
 * Delta = e + (update since the sync) for any alpha; only where the
 * gradient was taken changes. Applies once per synchronization (later
 * calls before the next sync change nothing). A no-op returning RUMOR_OK
 * for algorithms without an error memory (every one but localsgd with a
 * delta_codec) and for alpha 0. */
RUMOR_API rumor_err rumor_gossip_step_ahead(rumor_gossip *g);

/* The consensus step size in use: opts.gamma, or what "auto" chose
 * (docs/gossip.md, "Defaults"). */
RUMOR_API double rumor_gossip_gamma(const rumor_gossip *g);

/* True when the algorithm sends to node self + 1 mod n (ring all-reduce),
 * whatever the topology: the transport must link that node too. */
RUMOR_API bool rumor_gossip_uses_ring(const rumor_gossip *g);

/* --- elastic rings (docs/reliability.md, "Elastic rings: the design") ---- */

/* Makes the ring of g's next steps members[0..count), the live members of
 * an epoch; by default the ring is every node of the topology. members:
 * node ids, sorted, unique, each < the topology's node count, g's own
 * among them (copied). The ring algorithms (allreduce, allreduce-f64,
 * powersgd, exact localsgd, the compressed all-reduce) then send to the
 * next member and expect the previous one, cut their buffers into count
 * chunks and divide their averages by count; per-node seeds stay those of
 * the node id, and error memories clip for count nodes. With count 1 a
 * step has no round and changes nothing (the node's own average). Call
 * between steps: RUMOR_EINVAL, logged, nothing changed, for a bad list,
 * an algorithm without a ring (rumor_gossip_uses_ring false), or a step in
 * progress (its round 0 emitted, its last round not absorbed, none of its
 * calls failed, not abandoned). */
RUMOR_API rumor_err rumor_gossip_members_set(rumor_gossip *g,
                                             const uint32_t *members,
                                             size_t count);

/* The step in progress will not be finished (a round failed, or a view
 * change ended it, possibly after some rounds went through): g is between
 * steps again, so rumor_gossip_members_set, rumor_gossip_state_load and
 * rumor_gossip_state_adopt are accepted. The caller then loads the state
 * it saved (rumor_gossip_state_save) before the step: that leaves g
 * exactly as it was then (what a step changes outside the state, as an
 * inner instance's step or a model PowerSGD's one-sided iterations wrote
 * mid-way, is undone here; state_load resets the exchange in flight), so
 * that the step run again, on the same or another ring, gives the bits of
 * a run that never had the abandoned attempt. Without that load the state
 * may hold the abandoned step's half-made updates (error memories, the
 * PowerSGD compressor's, which then refuses to start a step). A no-op
 * between steps. */
RUMOR_API void rumor_gossip_step_abandon(rumor_gossip *g);

/* --- state, for checkpoints and state transfer -------------------------- */

/* Cap on one encoded state (and on any length field inside it). */
#define RUMOR_GOSSIP_STATE_MAX ((size_t)1 << 36)

/* Appends to out what the instance carries from one step to the next
 * (CHOCO's public copies, DeepSqueeze's error, PowerGossip's per-edge
 * factors, PowerSGD's warm start and error memories, local SGD's anchor,
 * outer momentum and error feedback), so that a new instance made with the
 * same options, topology, node and model shapes continues exactly. Call
 * between steps only. The format (docs/protocol.md, "Gossip state") is
 * little-endian and starts with the algorithm's name. RUMOR_ETOOBIG /
 * RUMOR_ENOMEM from the buffer. */
RUMOR_API rumor_err rumor_gossip_state_save(const rumor_gossip *g,
                                            struct rumor_buf *out);

/* Restores a state written by rumor_gossip_state_save. A pure,
 * bounds-checked decode first (the bytes may come from a peer): every
 * length is checked against what is left and against the instance, every
 * number must be finite; RUMOR_EPROTO (or RUMOR_ENUMERIC) with diag saying
 * what does not fit, and then the instance is unchanged. */
RUMOR_API rumor_err rumor_gossip_state_load(rumor_gossip *g,
                                            const uint8_t *data,
                                            size_t len,
                                            struct rumor_diag *diag);

/* Takes another member's state (rumor_gossip_state_save of a node of the
 * same ring and options; its header names that node) for a node that
 * rejoins, or that missed a step's result which a member holds: what the
 * ring's members share comes from data (PowerSGD's step counter, warm-
 * start Q and P and the adaptive rank's agreed rank and hold; local SGD's
 * anchor, outer velocity and the look-ahead already applied to the
 * member's model that goes with it), while g keeps its own memories as
 * they are (PowerSGD's error memories and its own error sums, the error
 * feedback memories and e_bar of local SGD and of the compressed
 * all-reduce; zero in a fresh instance). Call between steps (after
 * rumor_gossip_step_abandon, load g's own state first: its memories are
 * kept). The same checks as rumor_gossip_state_load but for the node
 * the header names, then the same errors, with g unchanged; RUMOR_EINVAL
 * for an algorithm without a ring (rumor_gossip_uses_ring false: its
 * state is its own edges'). */
RUMOR_API rumor_err rumor_gossip_state_adopt(rumor_gossip *g,
                                             const uint8_t *data,
                                             size_t len,
                                             struct rumor_diag *diag);

/* --- adaptive compression (issue #12, docs/adaptive.md) ---------------- */

/* Feeds one link measurement: the message of peer in some round arrived
 * elapsed_ns after this node sent its own message of that round, and
 * carried recv_bytes payload bytes. The drivers call it (no probes: the
 * gossip traffic itself is measured). A no-op without opts.adapt or for a
 * peer that is not a neighbour. */
RUMOR_API void rumor_gossip_link_observe(rumor_gossip *g,
                                         uint32_t peer,
                                         uint64_t recv_bytes,
                                         uint64_t elapsed_ns);

/* Feeds the compute time of one training step (the part of the step that
 * is not communication): with opts.comm_share it sets the time the link
 * budgets aim for. A no-op without opts.adapt. */
RUMOR_API void rumor_gossip_compute_observe(rumor_gossip *g,
                                            uint64_t compute_ns);

/* One link's view, as of the last emit. */
struct rumor_gossip_link_report {
    uint32_t peer;
    double rate_bytes_s; /* estimated throughput (0: no sample yet) */
    double rtt_s;        /* smallest send-to-reply time in the window */
    uint64_t budget;     /* payload bytes the last message aimed for */
    uint64_t bytes;      /* payload bytes of the last message */
};

/* The links (one per neighbour) into out[0..cap); returns how many there
 * are (0 without opts.adapt). */
RUMOR_API size_t rumor_gossip_adapt_links(const rumor_gossip *g,
                                          struct rumor_gossip_link_report *out,
                                          size_t cap);

/* One layer of the last message on a link. */
struct rumor_gossip_layer_report {
    size_t n;         /* elements of the layer */
    size_t k;         /* elements sent (n: dense) */
    unsigned bits;    /* quantizer bits (32: float32 values; 0: the fixed
                         controller's codec as configured) */
    double rel_error; /* ||v - C(v)|| / ||v|| of that message */
};

/* The layers of the last message sent on link index `link` (an index
 * into rumor_gossip_adapt_links' order) into out[0..cap); returns the
 * layer count (0 without opts.adapt or for a bad index). */
RUMOR_API size_t
rumor_gossip_adapt_layers(const rumor_gossip *g,
                          size_t link,
                          struct rumor_gossip_layer_report *out,
                          size_t cap);

/* PowerSGD's rank under opts.adapt (docs/adaptive.md): "rule" picks it
 * every step from the relative approximation error
 * sqrt(sum ||M - P Q^T||^2 / sum ||M||^2) summed over every node (the
 * sums ride with P, so every node picks the same rank); "fixed" keeps
 * opts.rank and reports this node's own error. */
struct rumor_gossip_rank_report {
    size_t rank;      /* the rank of the next step */
    double rel_error; /* the last error seen (< 0: none yet) */
    uint64_t changes; /* rank changes so far */
};

/* Fills *out and returns true for powersgd with opts.adapt; false (out
 * untouched) otherwise. */
RUMOR_API bool rumor_gossip_adapt_rank(const rumor_gossip *g,
                                       struct rumor_gossip_rank_report *out);

/* --- skipping neighbours (gossip/edges.c; docs/reliability.md) --------- */

/* A neighbour that misses a step's deadline is skipped for that step, and
 * the edge's term of that step is applied by both ends or by neither:
 * rumor_gossip_absorb_partial stages one term per neighbour whose message
 * arrived (it "holds" that step of the edge), acknowledgements tell the
 * peer which steps this node holds, and rumor_gossip_commit applies the
 * terms both ends hold. Protocol: docs/protocol.md, "Edge
 * acknowledgements". Supported by dpsgd, deepsqueeze, moniqua, choco
 * (without an adaptive controller) and powergossip (one iteration per
 * step), whose per-edge state (copies, factors) changes only with a
 * committed term (rumor_gossip_can_skip). */

#define RUMOR_GOSSIP_ACK_MAX_STEPS    64 /* held steps listed in one ack */
#define RUMOR_GOSSIP_ACK_HEADER_BYTES 16
#define RUMOR_GOSSIP_ACK_BYTES_MAX \
    (RUMOR_GOSSIP_ACK_HEADER_BYTES + 8 * RUMOR_GOSSIP_ACK_MAX_STEPS)
#define RUMOR_GOSSIP_PENDING_MAX 40 /* staged terms per edge */
/* Largest down-after count: a peer is marked down before a staged term is
 * older than this many steps, so the peer's ack list still covers it. */
#define RUMOR_GOSSIP_DOWN_AFTER_MAX 32

/* What a node tells a neighbour: every step below upto is decided, and of
 * those it holds the neighbour's message of exactly held[0..count)
 * (ascending; the most recent RUMOR_GOSSIP_ACK_MAX_STEPS). */
struct rumor_gossip_ack {
    uint64_t upto;
    uint32_t count;
    uint64_t held[RUMOR_GOSSIP_ACK_MAX_STEPS];
};

/* Encodes an ack (little-endian: u32 magic "RACK", u32 count, u64 upto,
 * count u64 steps). Returns the bytes written, 0 when cap is too small or
 * count too large. */
RUMOR_API size_t rumor_gossip_ack_encode(const struct rumor_gossip_ack *a,
                                         uint8_t *out,
                                         size_t cap);

/* Decodes an ack. Pure and bounds-checked: RUMOR_EPROTO (with *out
 * zeroed) unless the magic is right, count <= the cap, len is exact and
 * the steps ascend strictly below upto. */
RUMOR_API rumor_err rumor_gossip_ack_decode(const uint8_t *buf,
                                            size_t len,
                                            struct rumor_gossip_ack *out);

/* The id of the codec the algorithm compresses its messages with (its
 * codec, or localsgd's delta codec), 0 when it sends no codec payloads;
 * the exchange puts it in the header of every gossip frame (a message may
 * still hold raw parts: terngrad's shared scalers; an adaptive controller
 * names its choice in each part). */
RUMOR_API uint8_t rumor_gossip_codec(const rumor_gossip *g);

/* True when the algorithm can skip a neighbour for a step. */
RUMOR_API bool rumor_gossip_can_skip(const rumor_gossip *g);

/* As rumor_gossip_absorb for a round whose messages may be incomplete:
 * each expected neighbour whose message is present, of the right size and
 * finite, gets its term staged (clipped by robust mixing: opts.robust);
 * the others are skipped (counted in rumor_gossip_screen_stats, logged
 * with the peer id). Nothing touches the model until rumor_gossip_commit.
 * Falls back to rumor_gossip_absorb when the algorithm cannot skip. */
RUMOR_API rumor_err
rumor_gossip_absorb_partial(rumor_gossip *g,
                            uint64_t step,
                            uint32_t round,
                            const struct rumor_gossip_msg *msgs,
                            size_t count);

/* This node's ack for peer (send it after absorbing the step). */
RUMOR_API rumor_err rumor_gossip_ack_make(rumor_gossip *g,
                                          uint32_t peer,
                                          struct rumor_gossip_ack *out);

/* Settles the terms staged with peer for the steps a's upto covers:
 * ready to commit when a lists them, dropped otherwise. */
RUMOR_API rumor_err rumor_gossip_ack_take(rumor_gossip *g,
                                          uint32_t peer,
                                          const struct rumor_gossip_ack *a);

/* Applies every settled term (steps ascending, peers ascending, summed
 * in double and rounded once); *applied says how many. */
RUMOR_API rumor_err rumor_gossip_commit(rumor_gossip *g, size_t *applied);

/* Staged, unsettled terms with peer; *oldest their oldest step
 * (UINT64_MAX when none). */
RUMOR_API size_t rumor_gossip_pending(const rumor_gossip *g,
                                      uint32_t peer,
                                      uint64_t *oldest);

/* The peer restarted (a new incarnation): its held steps mean nothing
 * any more, so the terms staged with it and what this node holds from it
 * are dropped, and the edge's algorithm state starts over from what both
 * ends derive alone (PowerGossip: the pair's seed; CHOCO: zero copies). */
RUMOR_API void rumor_gossip_edge_forget(rumor_gossip *g, uint32_t peer);

/* The node jumps to step (readmission): steps below it count as decided,
 * none of them held. */
RUMOR_API void rumor_gossip_fast_forward(rumor_gossip *g, uint64_t step);

struct rumor_gossip_screen_stats {
    uint64_t nonfinite; /* messages refused for NaN or Inf */
    uint64_t malformed; /* messages refused for their size */
    uint64_t clipped;   /* differences clipped (robust mixing) */
    uint64_t screened;  /* differences (ring: chunks) measured */
    double clip_radius; /* the last step's radius (0: none yet) */
    uint64_t outsized;  /* ring chunks refused as too large */
};

RUMOR_API void rumor_gossip_screen_stats(const rumor_gossip *g,
                                         struct rumor_gossip_screen_stats *out);

/* --- in-process simulator ---------------------------------------------- */

/* Runs one instance per node of a topology in one process, round by
 * round: every node emits (in node order), the messages are routed, every
 * node absorbs (in node order). Deterministic: the same inputs give the
 * same bits. Bytes are counted as net/ puts them on the wire: payload plus
 * one RUMOR_FRAME_HEADER_BYTES header per chunk of RUMOR_FRAME_CHUNK_MAX. */

typedef struct rumor_sim rumor_sim;

/* Takes the n instances (n = nodes of the topology), node i at index i.
 * The instances stay owned by the caller and must outlive the sim. */
RUMOR_API rumor_err rumor_sim_new(rumor_gossip *const *nodes,
                                  size_t n,
                                  rumor_sim **out);
RUMOR_API void rumor_sim_destroy(rumor_sim **self_p);

/* Runs every round of one gossip step. */
RUMOR_API rumor_err rumor_sim_step(rumor_sim *sim, uint64_t step);

/* Bytes node i has sent so far, headers included. */
RUMOR_API uint64_t rumor_sim_bytes_sent(const rumor_sim *sim, size_t node);

/* Bytes sent so far on the directed edge from -> to (headers included;
 * 0 for a pair that never exchanged anything, or out of range). The sum
 * over `to` is rumor_sim_bytes_sent(sim, from). */
RUMOR_API uint64_t rumor_sim_bytes_edge(const rumor_sim *sim,
                                        size_t from,
                                        size_t to);

/* Messages sent so far on that edge (one per emitted message, however
 * many chunks net/ cuts it into). */
RUMOR_API uint64_t rumor_sim_messages_edge(const rumor_sim *sim,
                                           size_t from,
                                           size_t to);

/* Modelled links for adaptive compression in the simulator
 * (docs/adaptive.md): after each rumor_sim_step it feeds every node the
 * link timings a network with these rates would show (the bytes each
 * neighbour sent over rate, plus latency per message; all nodes start a
 * step together) and the compute time, and keeps the modelled wall clock:
 * a step takes compute_s plus its slowest link. */
struct rumor_simlink_opts {
    double compute_s;   /* compute time per step */
    double latency_s;   /* one-way latency per message */
    double rates[8];    /* bit/s; edge {i, j} gets rates[(i + j) % count] */
    size_t rate_count;  /* 1..8 */
    uint64_t drop_step; /* from this step on (0: never) ... */
    double drop_factor; /* ... every rate is divided by this */
};

typedef struct rumor_simlink rumor_simlink;

/* For the sim's n instances (borrowed: both must outlive it).
 * RUMOR_EINVAL for a rate count outside 1..8, a rate or time <= 0. */
RUMOR_API rumor_err rumor_simlink_new(const rumor_sim *sim,
                                      rumor_gossip *const *nodes,
                                      size_t n,
                                      const struct rumor_simlink_opts *opts,
                                      rumor_simlink **out);
RUMOR_API void rumor_simlink_destroy(rumor_simlink **self_p);

/* Call after rumor_sim_step(step): feeds the step's timings to every node
 * and returns the step's modelled seconds. */
RUMOR_API double rumor_simlink_step(rumor_simlink *s, uint64_t step);

/* Rate of edge {i, j} at step (bit/s). */
RUMOR_API double
rumor_simlink_rate(const rumor_simlink *s, size_t i, size_t j, uint64_t step);

/* Wire bytes of one message of len payload bytes (headers included). */
RUMOR_API uint64_t rumor_gossip_wire_bytes(size_t len);

#endif /* RUMOR_GOSSIP_H */
