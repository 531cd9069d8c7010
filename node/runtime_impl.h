/*
 * Private to node/: what the runtime, the config parser and the `rumor
 * node | launch | plot` subcommands share but the public API does not
 * need.
 */
#ifndef RUMOR_NODE_RUNTIME_IMPL_H
#define RUMOR_NODE_RUNTIME_IMPL_H

#include "rumor/node.h"

#include "node/elastic.h"

#include <stdio.h>

/* DGC's memory carries the momentum: RUMOR_EINVAL (diag naming flag, the
 * caller's optimizer option) for --ef dgc with a momentum optimizer. */
rumor_err node_ef_optim_check(const struct rumor_gossip_opts *g,
                              rumor_optim_kind kind,
                              const char *flag,
                              struct rumor_diag *diag);

/* --- divergence (diverge.c) --- */

/* True for a non-finite loss or one far above the first step's. */
bool node_diverged(double loss, double first_loss);
/* The error of a diverged run: the step, the loss (NAN: the model was
 * found non-finite), and the options that control it with their values
 * (gamma: the one in use; lr < 0: the caller's optimizer, unknown). */
void node_diverge_message(const struct rumor_gossip_opts *g,
                          double gamma,
                          double lr,
                          uint64_t step,
                          double loss,
                          char *buf,
                          size_t cap);

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
    uint64_t handshake_bytes_sent; /* HELLO, HELLO_OK, REFUSE frames */
    uint64_t handshake_frames_sent;
    uint64_t gossip_bytes_sent; /* wire bytes of gossip messages */
    uint64_t gossip_bytes_recv;
    uint64_t gossip_frames_sent;
    double consensus;              /* probe: mean_j ||x_i - x_j||^2, or NAN */
    uint64_t consensus_bytes_sent; /* wire bytes of the probes sent */
    uint64_t consensus_frames_sent;
    double seconds;         /* since the start of the run */
    double seconds_compute; /* gradient, optimizer, evaluation (cumulative) */
    double seconds_eval;    /* evaluation alone, since the run began */
    double seconds_gossip;  /* encode and decode (emit, absorb) */
    double seconds_wait;    /* sending and waiting for neighbours */
    const rumor_gossip *gossip; /* adapt: its links and layers are
                                   reported ("adapt"); NULL: none */
    bool faults; /* the fields below are written (node/faults.c) */
    uint64_t rejected_nonfinite; /* neighbour messages with NaN or Inf */
    uint64_t rejected_malformed; /* of the wrong size */
    uint64_t clipped;            /* differences clipped (robust mixing) */
    uint64_t screened;           /* differences measured against a radius */
    double clip_radius;          /* the last step's radius (0: none yet) */
    uint64_t rejected_outsized;  /* ring chunks refused as too large */
    uint64_t skipped;            /* (neighbour, step) pairs skipped */
    uint64_t peers_down;         /* neighbours marked down now */
    uint64_t readmitted;         /* handshakes with returning neighbours */
    uint64_t control_bytes_sent; /* acks, syncs, states: wire bytes */
    uint64_t control_frames_sent;
    bool pcie;               /* the peer API's node: the two below */
    uint64_t pcie_h2d_bytes; /* its CUDA tensors' copies, host to device */
    uint64_t pcie_d2h_bytes;
    bool elastic;     /* an elastic ring (node/elastic.c): the two below */
    uint64_t epoch;   /* the installed membership epoch */
    uint32_t members; /* its member count */
};

/* --metrics-listen (node/prometheus.c): the snapshot a scrape sees. */
typedef struct node_prom node_prom;

struct node_prom_peer {
    uint32_t id;
    uint64_t bytes_sent, bytes_recv;
    const char *state; /* rumor_net_state_name: a static string */
};

/* Serves http://SPEC/metrics (SPEC: PORT, :PORT or ADDR:PORT; loopback
 * unless ADDR is given) from a thread; RUMOR_EINVAL with diag when the
 * address cannot be bound. */
rumor_err node_prom_start(const char *spec,
                          uint32_t id,
                          node_prom **out,
                          struct rumor_diag *diag);
/* The step's numbers, for the scrapes until the next call. */
void node_prom_publish(node_prom *p,
                       const struct node_metrics_row *row,
                       const struct node_prom_peer *peers,
                       size_t npeers);
void node_prom_stop(node_prom **self_p);

typedef struct node_metrics node_metrics;

/* Creates DIR (and parents) and opens DIR/node-ID.jsonl for writing
 * (truncated). RUMOR_EIO with diag when that fails. */
rumor_err node_metrics_open(const char *dir,
                            uint32_t id,
                            node_metrics **out,
                            struct rumor_diag *diag);

/* Appends one line with one write(2), so a reader never sees half of it.
 * RUMOR_EIO with diag (the file, errno) when the write fails; the file is
 * then cut back to its last whole line (a full disk leaves no torn line).
 * RUMOR_ENOMEM. */
rumor_err node_metrics_write(node_metrics *m,
                             const struct node_metrics_row *row,
                             struct rumor_diag *diag);

void node_metrics_close(node_metrics **self_p);

/* As node_metrics_open; with append the file is continued, not truncated
 * (a resumed run). */
rumor_err node_metrics_open_mode(const char *dir,
                                 uint32_t id,
                                 bool append,
                                 node_metrics **out,
                                 struct rumor_diag *diag);

/* --- the average model of a local run (runtime_average.c) --- */

struct node_average {
    double test_loss;     /* of the average model on the held-out split */
    double accuracy;      /* NAN for lsq */
    double optimum_error; /* lsq: max |x-bar - W*|; NAN otherwise */
};

/* Writes a node's final model (format in runtime_average.c) into fd,
 * which is the open file tmp and is closed here on every path, fsyncs it
 * and renames tmp to path. RUMOR_EIO with diag (the file, errno) when
 * that fails; tmp is then removed. */
rumor_err node_model_save(int fd,
                          const char *tmp,
                          const char *path,
                          const struct rumor_model *m,
                          struct rumor_diag *diag);

/* Averages DIR/node-I.model over the nodes I < nodes with use[I] (each
 * checked against the model shapes opts give; at least one) and evaluates
 * the average on the run's held-out split. RUMOR_EPROTO / RUMOR_ENUMERIC
 * with diag for a file that does not fit, RUMOR_ENOTFOUND / RUMOR_EIO with
 * diag (the file, errno) for one that cannot be read, loader errors as
 * they come. */
rumor_err node_average_evaluate(const struct rumor_node_opts *opts,
                                uint32_t nodes,
                                const bool *use,
                                const char *dir,
                                struct node_average *out,
                                struct rumor_diag *diag);

/* Writes DIR/average.json: {"nodes" (those averaged), "test_loss",
 * "accuracy" or "optimum_error"}. */
rumor_err node_average_write(const char *dir,
                             uint32_t nodes,
                             const struct node_average *a);

/* mkdir -p; 0 on success. */
int node_mkdirs(const char *path);

/* --- the runtime under the peer API (runtime.c, for node/peer.c) --- */

/* Where a peer's tensors live. With be (gossip/backend.h: CUDA's table,
 * or the reference device in the tests) the node's algorithm runs on them
 * there (gossip_new_in), and what must read them on the host (a STATE for
 * a restarted neighbour) asks to_host for a host copy of the model, valid
 * until the next call; a model that arrives on the host (a join's) goes
 * into them through to_device. be NULL: host memory. */
struct node_model_src {
    const struct gossip_backend_i *be;
    rumor_err (*to_host)(void *arg, const struct rumor_model **host);
    rumor_err (*to_device)(void *arg, const struct rumor_model *host);
    void *arg;
};

/* rumor_node_new, or with external != NULL a node whose gossip works on
 * the caller's tensors (borrowed for the node's life): no workload,
 * optimizer, overlap thread or progress line, and the ring successor is
 * linked too (for the peer's exact average). dtypes[k] is the dtype of
 * the caller's tensor k, shown when a peer's model differs (NULL: all
 * float32; borrowed during the call only); src says where the tensors
 * are (NULL: host memory). */
rumor_err node_new_model(const struct rumor_node_opts *opts,
                         struct rumor_model *external,
                         const rumor_dtype *dtypes,
                         const struct node_model_src *src,
                         rumor_node **out,
                         struct rumor_diag *diag);

/* rumor_peer_new with the tensors' memory given (node/peer.c): be
 * (gossip/backend.h) NULL as rumor_peer_new decides; the tests give
 * gossip_backend_ref with float32 host tensors, which the peer then
 * treats as device memory and runs its algorithms on where they are, as
 * it does CUDA tensors (RUMOR_EINVAL with diag when it would not). */
rumor_err node_peer_new_in(const struct rumor_node_opts *opts,
                           const struct rumor_peer_tensor *tensors,
                           size_t count,
                           const struct gossip_backend_i *be,
                           rumor_peer **out,
                           struct rumor_diag *diag);

/* Waits until every linked peer is up (the run's first wait). A peer
 * that refused this node or was refused by it (another model, settings
 * or protocol version) ends the wait at once: RUMOR_EPROTO with diag
 * naming the first difference. RUMOR_ETIMEDOUT at the deadline. */
rumor_err
node_wait_links(rumor_node *node, uint64_t deadline, struct rumor_diag *diag);
/* RUMOR_EPROTO with diag when a neighbour was refused at HELLO (or
 * refused this node). Checked while the links come up and again after the
 * first step: a neighbour that links to this node (rather than the other
 * way) is refused during that step, and may have gone before this node
 * waits for it, which the fault path would take for a dead neighbour. */
rumor_err node_check_refusals(rumor_node *node, struct rumor_diag *diag);

/* Starts the clock of the metrics' "seconds". */
void node_start_clock(rumor_node *node);

/* Before the first step, with opts.join on an algorithm that can skip:
 * the model (and optimizer state) and step of a live neighbour
 * (node/faults.c); *t is raised to that step. A no-op otherwise.
 * RUMOR_ETIMEDOUT with diag when no neighbour answers within connect_ms. */
rumor_err node_join(rumor_node *node, uint64_t *t, struct rumor_diag *diag);

/* Before step *t, as rumor_node_run does it: the fault path's handshakes
 * with returning neighbours (*t moves forward when they are ahead; the
 * steps in between are gossiped by no one), then the stop plan. *stop:
 * the run's agreed stop is reached, step *t is not to run. */
rumor_err node_step_begin(rumor_node *node, uint64_t *t, bool *stop);

/* The deadline span of step t in ns (connect_ms for the first step). */
uint64_t node_step_span(const rumor_node *node, uint64_t t);

/* The caller restored a state of step t (from a checkpoint): the run
 * continues at t. With opts.join on the fault path this is a lone restart
 * into a running run, as `rumor node --resume` without an agreed stop:
 * the node meets its neighbours as a restarted process
 * (node_faults_restarted) with its own model, and node_join fetches
 * nothing. Without join every node is taken to resume together. */
void node_restarted(rumor_node *node, uint64_t t);

/* One gossip step of g (NULL: the node's own algorithm) over the node's
 * transport, with the runtime's rounds, deadlines and byte counters: the
 * round skips with the fault path for the node's own algorithm when it
 * can skip, and is strict for another instance (the peer's average()). */
rumor_err node_gossip_step(rumor_node *node,
                           rumor_gossip *g,
                           uint64_t step,
                           uint64_t deadline);

/* node_gossip_step of another instance g whose rounds travel as rounds
 * round_base, round_base + 1, ... of the step: the peer API's buckets
 * (node/peer.c), several exchanges in one step that must never take each
 * other's messages. round_base + rumor_gossip_rounds(g, step) must fit
 * in the header's 32-bit round (control messages have their own kinds). */
rumor_err node_gossip_bucket(rumor_node *node,
                             rumor_gossip *g,
                             uint64_t step,
                             uint32_t round_base,
                             uint64_t deadline);

/* Whether step *t, which failed with *rc, is to be run again: in an
 * elastic ring, after the view change (node_elastic_recover), with *t the
 * step the new ring runs and *rc its outcome; false otherwise. */
bool node_step_retry(rumor_node *node, rumor_err *rc, uint64_t *t);

/* Whether the node's algorithm re-forms its ring around a dead node: it
 * uses a ring, over more than one node. Elastic rings link every node
 * (the view change talks to all members). */
bool node_elastic_wanted(const rumor_node *node);

/* A peer's elastic ring (node_elastic_wanted): model is what a member that
 * lacks it takes (the peer keeps its tensors of the last step there), algo the
 * peer's instances and its caller's state (node/elastic.h). Once, before the
 * first step. */
rumor_err node_elastic_attach(rumor_node *node,
                              struct rumor_model *model,
                              const struct node_elastic_algo *algo);

/* The node's elastic ring, or NULL. */
node_elastic *node_elastic_of(rumor_node *node);

/* Stale exchanges (opts.gossip.stale > 0, node/stale.h) for a caller
 * that owns the loop; the node's algorithm works on a copy of model that
 * only the exchange's thread touches. node_stale_step is the start of
 * step t: the exchanges due land on model (waiting for those still under
 * way), then step t's own is queued on a snapshot of model when the
 * algorithm exchanges at t; the thread starts at the first call. *stop:
 * an exchange found the run's agreed stop (no later one runs). */
rumor_err node_stale_step(rumor_node *node,
                          struct rumor_model *model,
                          uint64_t t,
                          bool *stop);
/* Lands every exchange queued or under way on model (the end of a run). */
rumor_err
node_stale_land_all(rumor_node *node, struct rumor_model *model, bool *stop);
/* True while an exchange is queued or under way (not landed). */
bool node_stale_busy(const rumor_node *node);
/* Joins the exchange's thread (before the links close); the exchanges
 * not landed are dropped. A no-op without one. */
void node_stale_end(rumor_node *node);

/* What the caller of the peer API measured (NAN: not measured). */
struct node_report {
    double loss;      /* minibatch loss */
    double test_loss; /* held-out evaluation */
    double accuracy;
};

/* Refreshes the summary's transport totals after `steps` steps; with r,
 * also writes a metrics line with r's numbers when the node has a metrics
 * file (RUMOR_EIO when that fails). */
rumor_err
node_report_step(rumor_node *node, uint64_t steps, const struct node_report *r);

/* The peer API's copies of CUDA tensors so far (cumulative bytes), for
 * its metrics lines and scrapes. */
void node_pcie_set(rumor_node *node, uint64_t h2d, uint64_t d2h);

/* Waits (bounded) until queued sends have left. */
void node_flush(rumor_node *node);

/* The end of a run after its last step t (`rumor node`): the fault
 * path's end-of-run notice to the neighbours, then node_flush. */
void node_finish(rumor_node *node, uint64_t t);

/* The exchange's counters; with stale exchanges as their thread last
 * published them, and the wait is that of landing. */
struct node_counters {
    uint64_t gossip_frames_sent, gossip_bytes_sent, gossip_bytes_recv;
    double seconds;        /* since node_start_clock */
    double seconds_gossip; /* emit and absorb */
    double seconds_wait;   /* sending and waiting for neighbours */
};
void node_counters(const rumor_node *node, struct node_counters *out);

/* The node's algorithm and topology (owned by the node). */
rumor_gossip *node_gossip(rumor_node *node);
const rumor_topology *node_topology(const rumor_node *node);

#endif
