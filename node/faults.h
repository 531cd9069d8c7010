/*
 * Private to node/: riding over slow, dead, stopped and returning
 * neighbours (node/faults.c; docs/reliability.md). Used by the runtime's
 * step loop for algorithms that can skip a neighbour
 * (rumor_gossip_can_skip).
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
    /* borrowed, may be NULL: the optimizer whose state a STATE message
     * carries (sent to joiners, taken when joining) */
    rumor_optim *optim;
    /* borrowed: once a stop is requested, the rumor_clock_ns time by which
     * every wait ends (UINT64_MAX until then), so that a stop is never held
     * up by neighbours that have already gone */
    const _Atomic uint64_t *stop_by;
};

/* What a round did, for the metrics. */
struct node_faults_io {
    uint64_t bytes_sent, bytes_recv, frames_sent; /* gossip messages */
    double seconds_gossip, seconds_wait;
    uint32_t stop; /* in: the stop plan of the gossip frames sent */
    /* in: called with the stop plan of every gossip frame received */
    void (*heard)(void *arg, uint64_t step, uint32_t stop);
    void *arg;
};

/* RUMOR_EPROTO, logged, when a gossip message from peer is not in the
 * codec g compresses with (rumor_gossip_codec): a peer of other settings
 * that passed HELLO, or a bug. Both rounds check it before absorbing: the
 * plain round stops, the fault path refuses the message and goes on
 * without it, as with any malformed message. */
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

/* One gossip round of a skipping algorithm: sends to the peers that are
 * up, waits for them until the deadline, stages what arrived, exchanges
 * acknowledgements and commits what both ends hold. Marks peers that
 * missed down_after steps down. */
rumor_err node_faults_round(node_faults *f,
                            rumor_net *net,
                            rumor_gossip *g,
                            uint64_t step,
                            uint32_t round,
                            uint64_t deadline,
                            struct node_faults_io *io);

/* Between steps: answers SYNC from returning peers, probes down peers
 * (exponential backoff), commits what the handshakes settled. *next is
 * the step about to run; it is raised when a peer is ahead (readmission
 * after a stall). */
rumor_err node_faults_between(node_faults *f,
                              rumor_net *net,
                              rumor_gossip *g,
                              const struct rumor_model *model,
                              uint64_t *next);

/* Before step 0 with opts.join: fetches a live neighbour's model into
 * model and sets *next to its step. RUMOR_ETIMEDOUT when none answers
 * before deadline. */
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

#endif
