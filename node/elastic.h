/*
 * Private to node/: elastic rings (issue 23; docs/reliability.md,
 * "Elastic rings"). The view change of node/membership.c carried over
 * the transport for the ring algorithms (all-reduce, PowerSGD, exact
 * local SGD, the compressed all-reduce): MEMBER frames to and from every
 * node, a suspicion when a ring message misses its deadline, the failed
 * step dropped or completed as the decided view says, the ring re-formed
 * over the new members (rumor_gossip_members_set), and the state (model,
 * optimizer, the algorithm's shared state) sent by the view's holder to
 * a member that lacks it: one that missed the completed step, one that
 * joins (a restart, --join, or a node that was removed and came back).
 *
 * node/exchange.c drives it: node_elastic_begin at each step boundary,
 * node_elastic_pump from the waits of a round (node_recv), and
 * node_elastic_recover when a step fails.
 */
#ifndef RUMOR_NODE_ELASTIC_H
#define RUMOR_NODE_ELASTIC_H

#include "rumor/gossip.h"
#include "rumor/net.h"
#include "rumor/train.h"

struct node_model_src; /* node/runtime_impl.h */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct node_elastic node_elastic;

/* What a view change does to a node's algorithms besides the model: for
 * `rumor node` its one instance and optimizer (node_elastic_opts g and
 * optim), for a peer its buckets and its caller's state (node/peer.c). */
struct node_elastic_algo {
    void *arg;
    /* the shared state at a step boundary (the snapshot), and back to it */
    rumor_err (*save)(void *arg, rumor_buf *out);
    rumor_err (*load)(void *arg, const uint8_t *p, size_t len);
    /* a member's saved state, this node's own memories kept */
    rumor_err (*adopt)(void *arg,
                       const uint8_t *p,
                       size_t len,
                       struct rumor_diag *diag);
    rumor_err (*members_set)(void *arg, const uint32_t *ids, size_t count);
    void (*abandon)(void *arg);
    void (*fast_forward)(void *arg, uint64_t step);
    /* what a STATE carries besides the model and the algorithm (the
     * optimizer part): for a member that missed a step, or for a joiner */
    rumor_err (*extra_save)(void *arg, bool joiner, rumor_buf *out);
    rumor_err (*extra_load)(void *arg, const uint8_t *p, size_t len);
    /* opts.model is a host copy of a model kept elsewhere (a peer's on
     * the GPU): model_out refreshes it before a STATE is packed from it,
     * model_in hands it back after one was decoded into it. NULL: the
     * model is opts.model itself. */
    rumor_err (*model_out)(void *arg);
    rumor_err (*model_in)(void *arg);
    /* (optional, NULL: save and load) the snapshot kept where the state
     * is (a model on the GPU: device to device), RUMOR_ENOTSUP where the
     * algorithm has none (then save, for that boundary); back to it; and
     * its bytes as save would have written them, for a STATE only */
    rumor_err (*snapshot)(void *arg);
    rumor_err (*snapshot_restore)(void *arg);
    rumor_err (*snapshot_save)(void *arg, rumor_buf *out);
};

/* What view changes handed this node (node_elastic_taken), as flags. */
enum {
    NODE_ELASTIC_TOOK_RESULT = 1, /* a member's model after steps it missed */
    NODE_ELASTIC_TOOK_JOINED =
        2, /* taken into the ring with a member's state */
};

struct node_elastic_opts {
    uint32_t self, n;
    uint32_t deadline_ms; /* the step deadline: the view change's pace */
    rumor_net *net;       /* borrowed, as are the pointers below */
    /* what a member that lacks it takes, as it is at a step boundary */
    struct rumor_model *model;
    /* with algo NULL, where the node's model is: in device memory, model
     * is its host copy, filled for a STATE sent and copied back from one
     * taken; NULL: model is the node's own */
    const struct node_model_src *src;
    const struct node_elastic_algo *algo; /* NULL: g and optim */
    rumor_gossip *g;
    rumor_optim *optim;              /* may be NULL */
    const _Atomic uint64_t *stop_by; /* a stop ends every wait by then */
    uint64_t first_step;
    uint64_t steps; /* the run's: bounds views and states; 0: none */
    /* the node's identity and the listed keys, which sign and check the
     * membership and state messages; NULL in an insecure ring */
    const rumor_net_keypair *keys;
    const rumor_topology *topo;
    bool join;        /* outside the ring at the start: ask to join */
    uint32_t wait_ms; /* the longest wait to be taken into a ring */
};

rumor_err node_elastic_new(const struct node_elastic_opts *o,
                           node_elastic **out);
void node_elastic_destroy(node_elastic **self_p);

/* The round number on the wire: the installed epoch's low byte on top,
 * so that a message of an abandoned attempt at a step never answers the
 * wait of the step's next attempt in a later epoch. */
uint32_t node_elastic_wire_round(const node_elastic *e, uint32_t round);

/* At the boundary before step t: reports the steps this node holds, takes
 * the snapshot a dropped step goes back to, and handles what came. *change:
 * a view change is under way, the step must not run
 * (node_elastic_recover). */
rumor_err node_elastic_begin(node_elastic *e, uint64_t t, bool *change);

/* Handles what came (MEMBER frames, state requests) and the passing of
 * time; true when the current step must end: a view change is under way
 * or a new epoch was installed. Called by the waits of a round. */
bool node_elastic_pump(node_elastic *e);

/* The wait for peer's message of the current step ran past its
 * deadline: starts (or feeds) the view change. */
void node_elastic_suspect(node_elastic *e, uint32_t peer);

/* After step *t failed: waits for the view change to end (or starts one,
 * suspecting the ring predecessor, when nobody did), puts the new
 * epoch's ring and this node's state in place, and sets *t to the step
 * the new ring runs. A node removed from the ring asks to join again.
 * RUMOR_ETIMEDOUT when a stop request's deadline passes first. */
rumor_err node_elastic_recover(node_elastic *e, uint64_t *t);

/* Before the first step of a joiner: asks to join, waits to be admitted
 * and takes the state; *t receives the step it enters at. */
rumor_err node_elastic_join(node_elastic *e, uint64_t *t);

/* After the run's last step (steps steps done): tells the members, and
 * answers a view change still under way (its promise, and the final state
 * to a member that lacks it) until every member has finished or, with
 * none under way, for two deadlines. */
void node_elastic_finish(node_elastic *e, uint64_t steps);

/* NODE_ELASTIC_TOOK_* of the view changes seen through (by
 * node_elastic_begin, _recover and _join) since the last call. */
unsigned node_elastic_taken(node_elastic *e);

/* Whether node id is a member of the ring's epoch. */
bool node_elastic_member(const node_elastic *e, uint32_t id);

/* True until a node started outside the ring (opts.join) is taken in. */
bool node_elastic_joining(const node_elastic *e);

/* The installed epoch and its member count, for the metrics. */
void
node_elastic_view(const node_elastic *e, uint64_t *epoch, uint32_t *members);

#endif
