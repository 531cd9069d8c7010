/*
 * gossip, part 2 of 6 (include rumor/gossip.h): an algorithm instance on
 * one node and its rounds. One gossip step is a number of rounds; in each
 * round the node first *emits* at most one message per peer, then
 * *absorbs* the messages its peers emitted to it in the same round. A
 * driver moves the bytes: the simulator (rumor/gossip/sim.h) by routing
 * buffers between instances in node order, the node's exchange
 * (node/exchange.c) over the network.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_INSTANCE_H
#define RUMOR_PUBLIC_GOSSIP_INSTANCE_H

#include "rumor/core.h"
#include "rumor/gossip/options.h"
#include "rumor/topology.h"

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

/* rumor_gossip_new for a model whose tensors' data all live on device:
 * with RUMOR_DEVICE_CUDA the algorithm keeps its state there too and only
 * payloads cross to the host. Every algorithm runs there (docs/gossip.md,
 * "Models on the GPU"); RUMOR_ENOTSUP (diag) without a usable GPU and for
 * an option refused there, with the reason (a codec without device
 * kernels, a memory that steps on the host such as --ef dgc). */
RUMOR_API rumor_err rumor_gossip_new_on(const struct rumor_gossip_opts *opts,
                                        const rumor_topology *t,
                                        uint32_t self,
                                        const struct rumor_model *model,
                                        rumor_device device,
                                        rumor_gossip **out,
                                        struct rumor_diag *diag);

/* True when algo's instances may send over the ring of members whatever
 * the topology (rumor_gossip_uses_ring: the all-reduces, powersgd,
 * localsgd), so that the node runs an elastic ring for them. */
RUMOR_API bool rumor_gossip_algo_rings(const char *algo);

/* Bytes copied host -> model memory (*to_device) and back (*to_host)
 * since g was made, its compressor's copies included; 0 and 0 for a model
 * in host memory. */
RUMOR_API void rumor_gossip_pcie_bytes(const rumor_gossip *g,
                                       uint64_t *to_device,
                                       uint64_t *to_host);

/* Frees and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_gossip_destroy(rumor_gossip **self_p);

/* Rounds in gossip step `step` (the same on every node). */
RUMOR_API uint32_t rumor_gossip_rounds(const rumor_gossip *g, uint64_t step);

/* False for a step whose exchange is known to change nothing from the
 * options alone (localsgd between its synchronizations); true otherwise.
 * It reads only the options: safe while another thread runs g. */
RUMOR_API bool rumor_gossip_exchanges(const rumor_gossip *g, uint64_t step);

/* Round `round` of step `step`: *msgs receives the messages to send (an
 * array owned by g, valid until the next emit on g) and *count how many. */
RUMOR_API rumor_err rumor_gossip_emit(rumor_gossip *g,
                                      uint64_t step,
                                      uint32_t round,
                                      const struct rumor_gossip_msg **msgs,
                                      size_t *count);

/* Receives each of a round's messages once, in the order of emit's *msgs,
 * as soon as the instance has made it (its buffer stays valid until the
 * next emit on the instance). */
typedef void (*rumor_gossip_ready_fn)(void *arg,
                                      const struct rumor_gossip_msg *m);

/* rumor_gossip_emit, handing every message to ready as soon as it is
 * made, before the next is encoded: a driver queues message k to the
 * network while message k + 1 is encoded and, for a model in device
 * memory, copied to the host (CHOCO, its adaptive variant and PowerGossip
 * make a message per neighbour; the others hand theirs when the emit
 * ends). When the emit fails, the messages made before the failure have
 * been handed. ready may be NULL (rumor_gossip_emit). */
RUMOR_API rumor_err rumor_gossip_emit_each(rumor_gossip *g,
                                           uint64_t step,
                                           uint32_t round,
                                           rumor_gossip_ready_fn ready,
                                           void *arg,
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

/* Step-ahead error feedback (SAEF, Xu, Huo and Huang, AAAI 2021;
 * docs/gossip.md). Call it before computing the gradient of a training step:
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

/* The id of the codec the algorithm compresses its messages with (its
 * codec, or localsgd's delta codec), 0 when it sends no codec payloads;
 * the exchange puts it in the header of every gossip frame (a message may
 * still hold raw parts: terngrad's shared scalers; an adaptive controller
 * names its choice in each part). */
RUMOR_API uint8_t rumor_gossip_codec(const rumor_gossip *g);

#endif /* RUMOR_PUBLIC_GOSSIP_INSTANCE_H */
