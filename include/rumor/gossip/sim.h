/*
 * gossip, part 6 of 6 (include rumor/gossip.h): the in-process
 * simulator, which runs one instance per node of a topology in one
 * process, and its modelled links for adaptive compression.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_SIM_H
#define RUMOR_PUBLIC_GOSSIP_SIM_H

#include "rumor/gossip/instance.h"

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

#endif /* RUMOR_PUBLIC_GOSSIP_SIM_H */
