/*
 * Private to node/: what a node's checkpoint holds and how the runtime
 * saves and restores it (checkpoint_state.c). The container format is
 * rumor_checkpoint_* (include/rumor/node.h).
 */
#ifndef RUMOR_NODE_CHECKPOINT_IMPL_H
#define RUMOR_NODE_CHECKPOINT_IMPL_H

#include "rumor/node.h"

/* Counters that continue across a resume, so metrics do not restart. */
struct node_ckpt_counters {
    uint64_t step; /* steps completed */
    double loss;   /* last minibatch loss */
    uint64_t gossip_bytes_sent, gossip_bytes_recv, gossip_frames_sent;
    uint64_t consensus_bytes_sent, consensus_frames_sent;
    double seconds_compute, seconds_gossip, seconds_wait;
    bool stopped; /* written when the run ended for every node at this step
                     (an agreed stop, or --steps): the neighbours hold
                     checkpoints of the same step */
};

/* Everything a checkpoint holds, borrowed from the runtime. The data
 * order needs no state of its own: a minibatch is a pure function of
 * (seed, node, step), so the step restores it. */
struct node_ckpt_parts {
    uint32_t node, nodes;
    uint64_t seed;
    const char *algo;
    struct rumor_model *model;
    rumor_optim *optim;
    rumor_gossip *gossip;
    struct node_ckpt_counters *counters; /* saved; filled by a resume */
    /* --stale: the run's S, the exchanges in flight to save (node/stale.h;
     * NULL or empty: none) and where a resume copies those it reads */
    uint32_t stale;
    const rumor_buf *stale_out;
    rumor_buf *stale_in;
};

/* Writes the checkpoint of counters->step steps into dir (keep newest
 * files). Errors as rumor_checkpoint_write, buffer errors. */
rumor_err node_ckpt_save(const char *dir,
                         uint32_t keep,
                         const struct node_ckpt_parts *p,
                         struct rumor_diag *diag);

/* Restores the newest good checkpoint of p->node in dir into the parts.
 * RUMOR_ENOTFOUND with diag when there is none; RUMOR_EPROTO /
 * RUMOR_ENUMERIC with diag naming the file and section when the newest
 * good file does not fit this run (another model, algorithm, seed). */
rumor_err node_ckpt_resume(const char *dir,
                           const struct node_ckpt_parts *p,
                           struct rumor_diag *diag);

/* Applies a decoded checkpoint to the parts (a pure check of every
 * section first; the parts change only when all fit). diag names the
 * section that does not fit. For resume and the fuzz harness. */
rumor_err node_ckpt_apply(const struct rumor_checkpoint *c,
                          const struct node_ckpt_parts *p,
                          struct rumor_diag *diag);

/* A resumed run continues DIR/node-N.jsonl: lines of steps after the
 * checkpoint's (written before a crash) are dropped, so the file again
 * holds each step once, in order. The file is rewritten through a
 * temporary and a rename. RUMOR_EIO on a failure, with diag naming the
 * file and errno; a missing file is fine. */
rumor_err node_ckpt_trim_metrics(const char *dir,
                                 uint32_t node,
                                 uint64_t step,
                                 struct rumor_diag *diag);

#endif
