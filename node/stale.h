/*
 * Private to node/: stale exchanges (opts.gossip.stale = S > 0). The
 * exchange of step t runs on a thread of its own, over a snapshot of the
 * model, while the caller goes on with steps t + 1 .. t + S - 1; it lands
 * at the start of step t + S as x += G_t - s_t (docs/gossip.md, "Stale
 * exchanges"). The thread owns everything the exchange touches (the
 * algorithm, the transport, the fault path, the stop plan, node->mix);
 * the caller owns the live model and reads the exchange's counters only
 * as the thread publishes them after each job. The caller is
 * rumor_node_run's loop, or the peer API's gossip() (node/peer.c, through
 * node_stale_step in runtime_impl.h), whose live model is the caller's
 * tensors.
 */
#ifndef RUMOR_NODE_STALE_H
#define RUMOR_NODE_STALE_H

#include "rumor/node.h"

#include "node/faults.h"
#include "node/runtime_impl.h"

typedef struct node_stale node_stale;

/* The exchange's counters as of its last finished job. */
struct node_stale_counters {
    double t_gossip, t_wait;
    uint64_t gossip_bytes_sent, gossip_bytes_recv, gossip_frames_sent;
    struct rumor_gossip_screen_stats screen;
    struct node_faults_stats faults; /* with the fault path */
    uint64_t epoch;                  /* with an elastic ring: its view */
    uint32_t members;
};

/* Starts the exchange thread of node (whose algorithm works on
 * node->mix) for exchanges that land `stale` steps after they start. */
rumor_err node_stale_start(rumor_node *node, uint32_t stale, node_stale **out);

/* Joins the thread; jobs not landed are dropped. NULL-safe. */
void node_stale_stop(node_stale **self_p);

/* Snapshots model as step t's (the caller's model before step t's
 * gradient) and queues its exchange; blocks while S jobs are queued. */
rumor_err
node_stale_push(node_stale *st, const struct rumor_model *model, uint64_t t);

/* Lands, in step order, every exchange due by step t (started at t - S
 * or before; UINT64_MAX: all), waiting for those still under way:
 * model += G - s. *stopped is set when an exchange found the run's stop
 * agreed (the rest are dropped, as they would not have run). The first
 * failed exchange's error is returned. */
rumor_err node_stale_land(node_stale *st,
                          struct rumor_model *model,
                          uint64_t t,
                          bool *stopped);

/* True when no exchange is queued or under way (all landed). */
bool node_stale_idle(const node_stale *st);

void node_stale_counters(node_stale *st, struct node_stale_counters *out);

/* Appends the exchanges in flight to out, for a checkpoint, once every
 * queued one has run (unless the run's stop was agreed: those after it
 * never run, and are saved unrun). */
rumor_err node_stale_save(node_stale *st, rumor_buf *out);

/* Whether bytes saved by node_stale_save fit a model of numel floats, a
 * run with this stale and a checkpoint of step steps (pure; *why says
 * what does not fit). */
rumor_err node_stale_check(const uint8_t *p,
                           size_t len,
                           size_t numel,
                           uint32_t stale,
                           uint64_t step,
                           const char **why);

/* Queues the saved exchanges again before the first push: those that ran
 * land at their steps, the others run first. */
rumor_err
node_stale_restore(node_stale *st, const uint8_t *p, size_t len, uint64_t step);

/* The step of the first exchange in bytes checked by node_stale_check,
 * or none when they hold no exchange. */
uint64_t node_stale_first(const uint8_t *p, size_t len, uint64_t none);

#endif
