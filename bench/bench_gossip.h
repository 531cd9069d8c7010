/*
 * Shared by `rumor bench gossip` and `rumor bench scaling`: the cost of
 * simulated gossip steps (all nodes in one process, rumor_sim_step).
 */
#ifndef RUMOR_BENCH_GOSSIP_H
#define RUMOR_BENCH_GOSSIP_H

#include "rumor/gossip.h"
#include "rumor/lowrank.h"

struct bench_algo {
    const char *label, *algo, *codec;
    double gamma;
};

struct bench_model {
    const char *name;
    struct rumor_lowrank_shape *shapes;
    size_t count, numel;
};

/* One algorithm on one model, one node per node of topo, every node's
 * parameters uniform random: the median seconds of `steps` simulated
 * steps after a warm-up step, and the bytes node 0 sends per step
 * (headers included). Returns 0, or 1 after printing why. */
int bench_gossip_cost(const struct bench_algo *a,
                      const struct bench_model *m,
                      const rumor_topology *topo,
                      int steps,
                      double *seconds,
                      double *bytes_per_step);

#endif
