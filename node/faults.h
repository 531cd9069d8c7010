/*
 * Private to node/: riding over slow, dead, stopped and returning
 * neighbours (node/faults.c; docs/reliability.md). The round of
 * node/exchange.c calls it for algorithms that can skip a neighbour
 * (rumor_gossip_can_skip); the wait for one peer's message (node_recv)
 * and the codec check serve every round, strict or skipping.
 */
#ifndef RUMOR_NODE_FAULTS_H
#define RUMOR_NODE_FAULTS_H

#include "rumor/gossip.h"
#include "rumor/net.h"
#include "rumor/node.h"
#include <stdatomic.h>

typedef struct node_faults node_faults;

struct node_faults_opts {
    const rumor_topology *topo; /* borrowed for the object's life */
    uint32_t self, n;
    uint32_t down_after;    /* missed steps before a peer is down */
    uint32_t deadline_ms;   /* the configured step deadline (a cap) */
    double deadline_factor; /* adaptive: factor on the recent waits; 0 off */
    bool join;              /* ask a neighbour for the model before step 0 */
    /* the run's --steps: no peer's step, DONE or STATE at or past it is
     * believed (UINT64_MAX: unknown, the peer API) */
    uint64_t steps;
    /* borrowed, may be NULL: the optimizer whose state a STATE message
     * carries (sent to joiners, taken when joining) */
    rumor_optim *optim;
    /* borrowed: once a stop is requested, the rumor_clock_ns time by which
     * every wait ends (UINT64_MAX until then), so that a stop is never held
     * up by neighbours that have already gone */
    const _Atomic uint64_t *stop_by;
    bool *heard; /* borrowed: per node, the transport saw it alive once */
    /* (may be NULL) a host copy of a model that is not in host memory,
     * for the STATE sent to a joiner (node_model_src.to_host) */
    rumor_err (*to_host)(void *arg, const struct rumor_model **host);
    void *to_host_arg;
};

/* Where a wait for one peer's message (node_recv) looks besides the
 * transport. */
struct node_wait {
    rumor_net *net;
    bool *heard;                     /* per node: the transport saw it alive */
    const _Atomic uint64_t *stop_by; /* see node_faults_opts.stop_by */
    /* NULL: strict, a peer that sends nothing fails the wait; else the
     * fault path of an algorithm that can skip it */
    node_faults *skip;
    /* NULL, or asked after each slice: true ends the wait with
     * RUMOR_ETIMEDOUT (an elastic ring's view change). Set, a missed
     * message is not logged here: the elastic ring says what it does. */
    bool (*interrupted)(void *arg);
    void *arg;
};

/* Waits for peer's message of kind of (step, round) until deadline (or
 * *stop_by), in slices that watch the peer. Strict: RUMOR_EPROTO at once
 * for a refused peer (the caller says why), RUMOR_ETIMEDOUT, logged, at
 * the deadline or when a peer heard before goes down. Skipping: each of
 * these is RUMOR_ETIMEDOUT, not logged (the peer is skipped), and so is
 * a peer that has gone past this step, whose step the fault path keeps
 * to catch up with (node_faults_between). Other transport errors as
 * they come. */
rumor_err node_recv(const struct node_wait *w,
                    uint32_t peer,
                    uint8_t kind,
                    uint64_t step,
                    uint32_t round,
                    uint64_t deadline,
                    struct rumor_net_msg *out);

/* RUMOR_EPROTO, logged, when a gossip message from peer is not in the
 * codec g compresses with (rumor_gossip_codec): a peer of other settings
 * that passed HELLO, or a bug. The round checks it before absorbing:
 * strict, the round fails; skipping, it goes on without the message, as
 * with any malformed message. */
rumor_err node_gossip_codec_check(const rumor_gossip *g,
                                  const struct rumor_net_msg *m,
                                  uint32_t peer);

struct node_faults_stats {
    uint64_t skipped;    /* (peer, step) pairs skipped */
    uint64_t downs;      /* peers marked down */
    uint64_t readmitted; /* handshakes completed */
    uint64_t peers_down; /* now */
    uint64_t acks_late;  /* acks that did not come in the step */
    uint64_t control_bytes_sent, control_frames_sent; /* acks, syncs,
                                                         states */
};

rumor_err node_faults_new(const struct node_faults_opts *o, node_faults **out);
void node_faults_destroy(node_faults **self_p);

/* The deadline span of the next step in ns: the configured one, or with
 * a factor, min(configured, max(floor, factor * the longest wait of the
 * recent steps)). */
uint64_t node_faults_span_ns(const node_faults *f);

/* One gossip round of a skipping algorithm, as node/exchange.c ran it
 * (send to the peers that are up, wait for them until the deadline, absorb
 * what came with rumor_gossip_absorb_partial): what the fault path needs
 * to settle it. */
struct node_faults_round {
    uint64_t step;
    const uint32_t *expect; /* the round's expected senders */
    size_t expected;
    const bool *have;   /* per expected sender: its message came */
    uint64_t started;   /* rumor_clock_ns when the round began */
    uint64_t deadline;  /* of the round's messages */
    uint64_t waited_ns; /* from started to the last message that came */
};

/* A message of step came from peer (its gossip, taken): it is not past
 * that step, whatever it claimed before. */
void node_faults_heard(node_faults *f, uint32_t peer, uint64_t step);

/* The round gossips with peer: a neighbour from now on (probed while
 * down). False while it is down: no message to or from it. */
bool node_faults_admit(node_faults *f, uint32_t peer);

/* m as this node sends it in step: m itself, or a corrupted copy in the
 * steps the test hook names (RUMOR_FAULTS_POISON, docs/reliability.md);
 * the copy is valid until the next call. */
struct rumor_gossip_msg node_faults_outgoing(node_faults *f,
                                             const struct rumor_gossip_msg *m,
                                             uint64_t step);

/* Sends peer (when up) this node's ACK of r's step now, after its
 * message was absorbed alone (rumor_gossip_absorb_one): the peer's wait
 * for it ends without this node's other messages of the round.
 * node_faults_acks then sends it no other. */
rumor_err node_faults_ack_early(node_faults *f,
                                rumor_net *net,
                                rumor_gossip *g,
                                const struct node_faults_round *r,
                                uint32_t peer);

/* After absorbing: sends the up neighbours this node's ACKs and takes
 * theirs until the round's deadline plus a grace. */
rumor_err node_faults_acks(node_faults *f,
                           rumor_net *net,
                           rumor_gossip *g,
                           const struct node_faults_round *r);

/* After the ACKs: records the round's wait for the adaptive deadline
 * when nobody up was missing, commits what both ends hold, and marks
 * peers that missed down_after steps down. */
rumor_err node_faults_commit(node_faults *f,
                             rumor_gossip *g,
                             const struct node_faults_round *r);

/* Between steps: answers SYNC from returning peers, probes down peers
 * (exponential backoff), commits what the handshakes settled. *next is
 * the step about to run; it is raised to the furthest step that a
 * majority of the up neighbours say they are at, or that a neighbour has
 * said, further on each time, down_after times without belying it
 * (readmission after a stall or a restart, two arcs of a ring that
 * drifted apart); claims
 * beyond it, or past the run's steps, are logged naming the sender. */
rumor_err node_faults_between(node_faults *f,
                              rumor_net *net,
                              rumor_gossip *g,
                              const struct rumor_model *model,
                              uint64_t *next);

/* After the run's last step (last, 0-based): a SYNC marked DONE to every
 * neighbour. A neighbour that has not finished waits for this node no
 * more, and one whose neighbours had all marked it down is no longer
 * held to one step per span (nothing is left to race ahead of): it
 * trains on to the end at its own pace. */
rumor_err node_faults_finish(node_faults *f,
                             rumor_net *net,
                             rumor_gossip *g,
                             uint64_t last);

/* Before step 0 with opts.join: fetches a live neighbour's model into
 * model and sets *next to its step; a STATE of a step past the run's
 * steps is refused (logged) and another answer awaited. RUMOR_ETIMEDOUT
 * when none answers before deadline. */
rumor_err node_faults_join(node_faults *f,
                           rumor_net *net,
                           rumor_gossip *g,
                           struct rumor_model *model,
                           uint64_t deadline,
                           uint64_t *next);

/* After a restart from a checkpoint (--resume): every neighbour starts
 * down and is probed at once with a SYNC marked JOIN, so the edges start
 * afresh and this node meets its neighbours at their step. */
void node_faults_restarted(node_faults *f);

void node_faults_stats(const node_faults *f, struct node_faults_stats *out);

/* False while peer is marked down. */
bool node_faults_up(const node_faults *f, uint32_t peer);

/* True once peer said it ran the run's last step (SYNC with DONE). */
bool node_faults_finished(const node_faults *f, uint32_t peer);

/* After this node's last step (node_flush): takes the SYNCs neighbours
 * sent since, so that one that said it ran the last step counts as
 * finished (node_faults_finished) at once. Nothing else is answered: the
 * run is over. */
void node_faults_heard_done(node_faults *f, rumor_net *net);

#endif
