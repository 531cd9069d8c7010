/*
 * gossip, part 3 of 6 (include rumor/gossip.h): what an instance carries
 * between steps, saved for checkpoints, loaded, and adopted from another
 * member; and the member list of the ring algorithms, which the node's
 * elastic rings (node/elastic.c) change between steps.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_STATE_H
#define RUMOR_PUBLIC_GOSSIP_STATE_H

#include "rumor/core.h"
#include "rumor/gossip/instance.h"

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

/* A snapshot of the state between steps kept where the state lives (a
 * model on the GPU: device to device, nothing crosses PCIe), for a ring
 * that may drop a step and go back to its boundary (elastic rings).
 * RUMOR_ENOTSUP for an algorithm or configuration without one (then use
 * rumor_gossip_state_save); RUMOR_EINVAL during a step. A new snapshot
 * replaces the last one. */
RUMOR_API rumor_err rumor_gossip_snapshot(rumor_gossip *g);

/* Back to the snapshot, as rumor_gossip_state_load of the state saved at
 * it (a step in flight abandoned first); the snapshot stays. RUMOR_EINVAL
 * without one. */
RUMOR_API rumor_err rumor_gossip_snapshot_restore(rumor_gossip *g);

/* Appends the bytes rumor_gossip_state_save wrote at the snapshot, from
 * it (host copies made now, counted), whatever the steps since did;
 * RUMOR_EINVAL without a snapshot. */
RUMOR_API rumor_err rumor_gossip_snapshot_save(const rumor_gossip *g,
                                               struct rumor_buf *out);

#endif /* RUMOR_PUBLIC_GOSSIP_STATE_H */
