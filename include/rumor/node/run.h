/*
 * node, part 2 of 4 (include rumor/node.h): the node process (`rumor
 * node`): one workload, one optimizer, one gossip algorithm and one
 * transport, training for a number of steps with its neighbours on the
 * topology and writing metrics. The loop follows the reference: gradient
 * at x_t, gossip, then the optimizer step with that gradient. docs/node.md
 * documents every option and the loop ("The training loop").
 */
#ifndef RUMOR_PUBLIC_NODE_RUN_H
#define RUMOR_PUBLIC_NODE_RUN_H

#include "rumor/core.h"
#include "rumor/node/config.h"
#include "rumor/train.h"

typedef struct rumor_node rumor_node;

/* Builds everything a run needs: loads the topology and this node's key,
 * the dataset and shard, the optimizer, the gossip algorithm, starts the
 * transport and opens DIR/node-N.jsonl. *out is set on success only.
 * Errors: RUMOR_EINVAL (options, with diag), loader and transport errors
 * as they come. */
RUMOR_API rumor_err rumor_node_new(const struct rumor_node_opts *opts,
                                   rumor_node **out,
                                   struct rumor_diag *diag);

/* Stops the transport, closes the metrics file, frees everything and sets
 * *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_node_destroy(rumor_node **self_p);

/* Runs the training: waits for the links (connect_ms), then opts.steps
 * steps, evaluating every eval_every steps and at the end. Every wait has
 * a deadline: a neighbour that misses one is skipped (algorithms that can
 * skip, rumor_gossip_can_skip) or left out of a re-formed ring (ring
 * algorithms, rumor_gossip_uses_ring); with the others it gives
 * RUMOR_ETIMEDOUT (logged with the peers and their liveness) and the run
 * stops with the model of the last good step. After rumor_node_stop the run
 * ends after the current step and returns RUMOR_OK with summary.stopped set.
 * Transport errors come back as they are. */
RUMOR_API rumor_err rumor_node_run(rumor_node *node, struct rumor_diag *diag);

/* Asks a running rumor_node_run to stop after its current step. Only sets
 * an atomic flag: safe from a signal handler and from another thread. */
RUMOR_API void rumor_node_stop(rumor_node *node);

struct rumor_node_summary {
    uint64_t steps;       /* steps completed */
    bool stopped;         /* ended early by rumor_node_stop */
    double loss;          /* last minibatch loss */
    double test_loss;     /* last held-out evaluation (NAN if none) */
    double accuracy;      /* last held-out accuracy (NAN if none or lsq) */
    double optimum_error; /* lsq: max |W - W*| of the last evaluation */
    double consensus;     /* last probe: mean over the neighbours j of
                             ||x_i - x_j||^2 (NAN if none) */
    uint64_t bytes_sent;  /* transport totals, headers in */
    uint64_t bytes_recv;
    uint64_t gossip_bytes_sent; /* wire bytes of the gossip messages sent */
    uint64_t gossip_bytes_recv; /* and received */
    bool refused;               /* a neighbour's settings or model differ:
                                   refused at the handshake, before the
                                   first step (a restart cannot help) */
    bool diverged;              /* training diverged (the run's error
                                   names the options that control it) */
};

/* What the run has done so far. */
RUMOR_API void rumor_node_summary(const rumor_node *node,
                                  struct rumor_node_summary *out);

/* The workload `rumor node` would train with these options: the dataset
 * (opts->dataset), this node's shard among the topology's nodes, the seed.
 * For callers that drive the built-in workloads from their own loop (the
 * Python binding's tests compare such a loop with `rumor node`). */
RUMOR_API rumor_err rumor_node_workload_new(const struct rumor_node_opts *opts,
                                            rumor_workload **out,
                                            struct rumor_diag *diag);

#endif /* RUMOR_PUBLIC_NODE_RUN_H */
