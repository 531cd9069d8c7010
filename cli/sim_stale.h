/*
 * `rumor sim --stale S` (docs/gossip.md, "Stale exchanges"): the exchange
 * of step t runs on a copy of the model and lands at the start of step
 * t + S, the steps in between computed meanwhile. Private to the `rumor`
 * binary (cli/sim.c, cli/sim_stale.c).
 */
#ifndef RUMOR_CLI_SIM_STALE_H
#define RUMOR_CLI_SIM_STALE_H

#include "rumor/gossip.h"

/* One node's exchanges in flight. */
struct sim_stale {
    unsigned s;               /* S > 0 */
    size_t numel;             /* of the model */
    struct rumor_model *copy; /* the exchange's tensors: the gossip
                                 instance works on these, never on the
                                 live model */
    float *delta;             /* S slots of numel: G_t - s_t */
    uint64_t *step;           /* per slot: its t, or UINT64_MAX (none) */
};

/* A queue for S > 0 and a model shaped like live. */
rumor_err
sim_stale_init(struct sim_stale *q, unsigned s, const struct rumor_model *live);
void sim_stale_free(struct sim_stale *q);

/* s_t = x_t: copies the live model into the exchange's tensors. */
void sim_stale_snapshot(struct sim_stale *q, const struct rumor_model *live);

/* After the exchange of step t: keeps G_t - s_t (in float) until it
 * lands; live must still be s_t. */
void
sim_stale_take(struct sim_stale *q, const struct rumor_model *live, uint64_t t);

/* At the start of step u: x += G_t - s_t for t = u - S, when step t
 * exchanged. */
void sim_stale_land(struct sim_stale *q, struct rumor_model *live, uint64_t u);

/* After the last optimizer step: every pending exchange, ascending t. */
void sim_stale_land_all(struct sim_stale *q, struct rumor_model *live);

/* Every node (queues q[0..n), live models live[0..n)) at the start of
 * step u: what lands then. */
void sim_stale_land_nodes(struct sim_stale *q,
                          struct rumor_model *const *live,
                          size_t n,
                          uint64_t u);

/* The exchange of step u, when it has one (rumor_gossip_exchanges, as
 * the runtime decides), on the copies of the sim's
 * instances: every snapshot, the rounds, every result. *exchanged says
 * whether there was one. */
rumor_err sim_stale_exchange(struct sim_stale *q,
                             struct rumor_model *const *live,
                             rumor_sim *sim,
                             rumor_gossip *const *nodes,
                             size_t n,
                             uint64_t u,
                             bool *exchanged);

#endif /* RUMOR_CLI_SIM_STALE_H */
