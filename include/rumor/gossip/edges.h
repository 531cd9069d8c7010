/*
 * gossip, part 5 of 6 (include rumor/gossip.h): skipping a neighbour
 * that misses a step's deadline, with the per-edge acknowledgements that
 * keep both ends of an edge applying the same terms.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_EDGES_H
#define RUMOR_PUBLIC_GOSSIP_EDGES_H

#include "rumor/core.h"
#include "rumor/gossip/instance.h"

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

/* Stages one neighbour's message of the step's round (its term, or its
 * refusal) before the round's others have come, so that the ack to that
 * neighbour need not wait for them: its edge's step is decided now.
 * rumor_gossip_absorb_partial then stages the rest of the round and clips
 * the terms of all. RUMOR_EINVAL when the algorithm cannot skip, the
 * sender is not a neighbour at step, or its step is decided already. */
RUMOR_API rumor_err rumor_gossip_absorb_one(rumor_gossip *g,
                                            uint64_t step,
                                            const struct rumor_gossip_msg *m);

/* This node's ack for peer (send it after absorbing the step, or after
 * rumor_gossip_absorb_one of the peer's message). */
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

#endif /* RUMOR_PUBLIC_GOSSIP_EDGES_H */
