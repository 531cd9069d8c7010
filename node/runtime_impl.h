/*
 * Private to node/: what the runtime, the config parser and the `rumor
 * node | launch | plot` subcommands share but the public API does not
 * need.
 */
#ifndef RUMOR_NODE_RUNTIME_IMPL_H
#define RUMOR_NODE_RUNTIME_IMPL_H

#include "rumor/node.h"

#include <stdio.h>

/* True when the run averages gradients instead of gossiping the model
 * (--exchange, with auto resolved by the algorithm). */
bool node_exchange_gradient(const struct rumor_node_opts *o);

/* Prints every option name (for help text). */
void node_opts_print(FILE *out);

/* --- metrics (metrics.c) --- */

/* One line of DIR/node-N.jsonl. NAN fields are left out. */
struct node_metrics_row {
    uint64_t step;        /* steps completed */
    double loss;          /* minibatch loss at x_t */
    double lr;            /* learning rate used by the step */
    double test_loss;     /* NAN unless evaluated */
    double accuracy;      /* NAN unless evaluated (or lsq) */
    double optimum_error; /* lsq: max |W - W*|, NAN otherwise */
    uint64_t bytes_sent;  /* transport, all frames, headers in */
    uint64_t bytes_recv;
    uint64_t frames_sent;
    uint64_t gossip_bytes_sent; /* wire bytes of gossip messages */
    uint64_t gossip_bytes_recv;
    uint64_t gossip_frames_sent;
    double consensus;              /* probe: mean_j ||x_i - x_j||^2, or NAN */
    uint64_t consensus_bytes_sent; /* wire bytes of the probes sent */
    uint64_t consensus_frames_sent;
    double seconds;         /* since the start of the run */
    double seconds_compute; /* gradient, optimizer, evaluation (cumulative) */
    double seconds_gossip;  /* encode and decode (emit, absorb) */
    double seconds_wait;    /* sending and waiting for neighbours */
};

typedef struct node_metrics node_metrics;

/* Creates DIR (and parents) and opens DIR/node-ID.jsonl for writing
 * (truncated). RUMOR_EIO with diag when that fails. */
rumor_err node_metrics_open(const char *dir,
                            uint32_t id,
                            node_metrics **out,
                            struct rumor_diag *diag);

/* Writes and flushes one line. RUMOR_EIO when the write fails. */
rumor_err node_metrics_write(node_metrics *m,
                             const struct node_metrics_row *row);

void node_metrics_close(node_metrics **self_p);

/* --- the average model of a local run (runtime_average.c) --- */

struct node_average {
    double test_loss;     /* of the average model on the held-out split */
    double accuracy;      /* NAN for lsq */
    double optimum_error; /* lsq: max |x-bar - W*|; NAN otherwise */
};

/* Writes a node's final model to path (format in runtime_average.c).
 * RUMOR_EIO when the write fails. */
rumor_err node_model_save(const char *path, const struct rumor_model *m);

/* Averages DIR/node-0..nodes-1.model (each checked against the model
 * shapes opts give) and evaluates the average on the run's held-out
 * split. RUMOR_EPROTO / RUMOR_ENUMERIC with diag for a file that does not
 * fit, loader errors as they come. */
rumor_err node_average_evaluate(const struct rumor_node_opts *opts,
                                uint32_t nodes,
                                const char *dir,
                                struct node_average *out,
                                struct rumor_diag *diag);

/* Writes DIR/average.json: {"nodes", "test_loss", "accuracy" or
 * "optimum_error"}. */
rumor_err node_average_write(const char *dir,
                             uint32_t nodes,
                             const struct node_average *a);

/* mkdir -p; 0 on success. */
int node_mkdirs(const char *path);

#endif
