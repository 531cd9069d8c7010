/*
 * Private to node/runtime.c and node/exchange.c: the node runtime's
 * state, which the training loop (runtime.c) and the step exchange
 * (exchange.c) share, and the calls between the two.
 */
#ifndef RUMOR_NODE_RUNTIME_NODE_H
#define RUMOR_NODE_RUNTIME_NODE_H

#include "rumor/node.h"

#include "gossip/backend.h"
#include "node/elastic.h"
#include "node/faults.h"
#include "node/runtime_impl.h"
#include "node/stale.h"

#include <pthread.h>
#include <stdatomic.h>

#define NODE_MS            1000000ull
#define NODE_RECV_SLICE_MS 100  /* how often the link wait looks up */
#define NODE_FLUSH_MS      5000 /* waiting for queued sends at the end */

/* The gradient worker of an overlapped step: computes the gradient of
 * step t at the model while the main thread gossips a copy of it. */
struct node_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, job, done, quit; /* under mu */
    uint64_t t;                    /* the job's step */
    rumor_err rc;                  /* the job's result */
    double loss, seconds;
};

/* The stop plans in one neighbour's gossip messages (UINT64_MAX: none). */
struct node_stop_seen {
    uint64_t last;   /* the step of its latest message */
    uint64_t plan;   /* the plan that message carried */
    uint64_t since;  /* its first message carrying that plan */
    uint64_t before; /* its message before that one */
};

struct rumor_node {
    struct rumor_node_opts opts;
    rumor_topology *topo;
    uint32_t n;
    rumor_net_keypair *keys;
    struct rumor_dataset *data;
    rumor_workload *w;
    struct rumor_model *model; /* borrowed from w */
    struct rumor_model *grad;  /* owned */
    /* the model in a device's memory (issue #31; src.be): the gradient
     * and the overlap's copy are there too (device_grad, device_mix: their
     * blocks), and host is the host copy read for the model file and
     * faults' STATE */
    float *device_grad, *device_mix;
    struct rumor_model *host;
    struct rumor_model *mix; /* overlap: the copy being gossiped */
    /* mix in device memory under stale exchanges of a ring algorithm: the
     * exchange thread's ring packs its STATE from this host copy of its
     * own (node_ring_host) */
    struct rumor_model *mix_host;
    float *mix_host_data;
    struct node_model_src mix_src;
    struct node_worker worker;         /* overlap: the gradient thread */
    node_stale *stale;                 /* stale exchanges, or NULL */
    rumor_buf stale_resume;            /* --resume: the exchanges in
                                          flight its checkpoint held */
    const struct rumor_model *optimum; /* lsq only, borrowed from w */
    rumor_optim *optim;
    rumor_gossip *g;
    rumor_net *net;
    node_metrics *metrics;
    node_faults *faults;   /* skipping algorithms: node/faults.c */
    node_elastic *elastic; /* ring algorithms of rumor node: node/elastic.c */
    node_prom *prom;       /* --metrics-listen, or NULL */
    struct node_prom_peer *prom_peers; /* with prom: nlinked slots */
    uint32_t *linked;                  /* peers this node opens links to */
    size_t nlinked;
    bool *heard;      /* per node: seen alive once (death detection) */
    uint32_t *expect; /* per round scratch: expected senders */
    bool *have;       /* per expected sender: its message came */
    struct rumor_net_msg *got;
    struct rumor_gossip_msg *inbox;
    atomic_bool stop;
    _Atomic uint64_t stop_by; /* see node_faults_opts.stop_by */
    bool progress;
    uint64_t start_ns, progress_ns;
    double t_compute, t_gossip, t_wait;
    double t_eval; /* the part of t_compute spent evaluating, this process */
    double t_land_wait; /* stale: waiting for exchanges to land */
    uint64_t gossip_frames_sent;
    float *probe; /* the model packed for the consensus probe */
    size_t probe_floats;
    uint64_t consensus_bytes_sent, consensus_frames_sent;
    struct rumor_node_summary sum;
    double first_loss; /* the initial model's, on step 0's batch */
    /* the peer API's node (node/peer.c): caller-owned tensors, no
     * workload, optimizer or training loop */
    bool external;
    /* where the external tensors live (node_model_src) */
    struct node_model_src src;
    /* its copies of CUDA tensors, bytes each way (node_pcie_set) */
    uint64_t pcie_h2d, pcie_d2h;
    uint64_t first_step;  /* 0, or the step a resumed run continues at */
    uint64_t stop_at;     /* first step not to run once a stop is agreed
                             (UINT64_MAX: none; see s_stop_plan) */
    uint64_t stop_margin; /* steps a stop request needs to reach every
                             node (s_stop_margin) */
    /* a stop plan heard is checked against every neighbour's messages
     * (exchange.c, s_stop_check): hops[k * n + o], the hops a plan of
     * node o travels to node k (NULL: not checked, n too large); seen[k],
     * the plans in k's gossip messages */
    uint32_t *stop_hops;
    struct node_stop_seen *stop_seen;
    uint64_t stop_doubted_ns;  /* a refused plan was last logged then */
    uint64_t saved_step;       /* step of the last checkpoint written */
    int model_fd;              /* the final model's temporary file, opened
                                  at the start: descriptors used up later
                                  (a flood of idle connections) cannot make
                                  the last write fail; -1 when none */
    struct rumor_diag io_why;  /* why the last metrics line failed */
    bool resumed_together;     /* resumed from the checkpoint of a stop agreed
                                  by every node (not a lone restart) */
    bool rejoining;            /* the peer API: restarted alone from its own
                                  state (node_restarted): no --join fetch */
    const rumor_dtype *dtypes; /* the peer API's dtypes, during _new only */
    uint8_t *desc;             /* what HELLO says of this node (layout.h) */
    uint32_t round_base;       /* added to the round numbers on
                                  the wire (node_gossip_bucket) */
    size_t desc_len;
};

/* True when steps' exchanges run stale (node/stale.h): the exchange's
 * thread then works on node->mix alone (the peer API's too). */
static inline bool
node_stale_mode(const rumor_node *node)
{
    return node->opts.gossip.stale > 0;
}

/* The model the exchange (and the fault path's, the ring's state
 * transfers) reads and writes. */
static inline struct rumor_model *
node_exchanged(const rumor_node *node)
{
    return node_stale_mode(node) ? node->mix : node->model;
}

/* --- exchange.c, for runtime.c --- */

/* The exchange's part of node_new_model, once the algorithm and the
 * transport exist: the stop margin, and the fault path for algorithms
 * that can skip. */
rumor_err node_exchange_init(rumor_node *node);

/* --- runtime.c, for exchange.c --- */

void node_copy_model(struct rumor_model *dst, const struct rumor_model *src);
/* node_copy_model between the node's model and node->mix, wherever they
 * live (src.be's memory for a device-resident node). */
void node_copy_mix(const rumor_node *node,
                   struct rumor_model *dst,
                   const struct rumor_model *src);
/* dst = src tensor by tensor through be (the stale queue's copies within
 * its memory, GOSSIP_ON_DEVICE, and the host copies of a device model). */
rumor_err node_model_copy(const struct gossip_backend_i *be,
                          struct rumor_model *dst,
                          const struct rumor_model *src,
                          enum gossip_copy kind);
/* Where rumor node's own elastic ring packs a STATE from when the model
 * it exchanges is in device memory (src.be): *host, filled and read back
 * through *src only for a STATE (node->host for the model; for the stale
 * exchange thread's node->mix a copy of its own, which the main thread
 * never writes). */
rumor_err node_ring_host(rumor_node *node,
                         struct rumor_model **host,
                         const struct node_model_src **src);
/* *out: a model shaped as shape whose tensors are consecutive in data
 * (any memory; rumor_model_free frees the view, not data). */
rumor_err node_model_view(const struct rumor_model *shape,
                          float *data,
                          struct rumor_model **out);

#endif
