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
#include "rumor/net.h"
#include "rumor/topology.h"

#define RUMOR_GOSSIP_MAX_DIMS    8
#define RUMOR_GOSSIP_MAX_TENSORS 65536
#define RUMOR_GOSSIP_ALGO_BYTES  32
#define RUMOR_GOSSIP_GAMMA_MAX   2.0 /* over-relaxation beyond 2 diverges */

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
    char codec[RUMOR_COMPRESS_SPEC_MAX]; /* choco, deepsqueeze: a codec */
    double gamma;        /* consensus step size, the reference's diffusion rate
                            (dpsgd, choco, powergossip), in (0, 2] */
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
    double ef_alpha; /* localsgd with delta_codec: step-ahead error feedback
                        coefficient in [0, 1]; 0 = plain EF, 1 = SAEF (see
                        rumor_gossip_step_ahead) */
};

/* Defaults: algo "dpsgd", codec "qsgd:bits=4", gamma 1, rank 1,
 * iterations 1, period 1, gossip_rounds 0, delta_codec "", outer_lr 1,
 * outer_momentum 0, theta 2, seed 1, ef_alpha 0. */
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
 * it moves the model to the look-ahead point x - alpha e, where e is the
 * compression error this node still owes the network (its part of the
 * next synchronization) and alpha is opts.ef_alpha, so the gradient is
 * taken where the model will be once that error has been sent. The next
 * synchronization accounts for the move: what is sent is the same
 * Delta = e + (update since the sync) for any alpha; only where the
 * gradient was taken changes. Applies once per synchronization (later
 * calls before the next sync change nothing). A no-op returning RUMOR_OK
 * for algorithms without an error memory (every one but localsgd with a
 * delta_codec) and for alpha 0. */
RUMOR_API rumor_err rumor_gossip_step_ahead(rumor_gossip *g);

/* True when the algorithm sends to node self + 1 mod n (ring all-reduce),
 * whatever the topology: the transport must link that node too. */
RUMOR_API bool rumor_gossip_uses_ring(const rumor_gossip *g);

/* --- over the network ------------------------------------------------- */

/* Runs every round of one gossip step over a started transport (borrowed;
 * it must link every peer the algorithm sends to: the step's neighbours,
 * and node self + 1 when rumor_gossip_uses_ring). Each round sends, then
 * waits for the expected senders until deadline_ns (rumor_clock_ns time).
 * A sender that misses the deadline yields RUMOR_ETIMEDOUT from the
 * algorithm, with the model unchanged; transport errors come back as
 * they are. */
RUMOR_API rumor_err rumor_gossip_net_step(rumor_gossip *g,
                                          rumor_net *net,
                                          uint64_t step,
                                          uint64_t deadline_ns);

/* --- in-process simulator ---------------------------------------------- */

/* Runs one instance per node of a topology in one process, round by
 * round: every node emits (in node order), the messages are routed, every
 * node absorbs (in node order). Deterministic: the same inputs give the
 * same bits. Bytes are counted as net/ puts them on the wire: payload plus
 * one RUMOR_NET_HEADER_BYTES header per chunk of RUMOR_NET_CHUNK_MAX. */

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

/* Wire bytes of one message of len payload bytes (headers included). */
RUMOR_API uint64_t rumor_gossip_wire_bytes(size_t len);

#endif /* RUMOR_GOSSIP_H */
