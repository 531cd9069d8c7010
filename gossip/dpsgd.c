/*
 * D-PSGD plain gossip (Lian et al., NeurIPS 2017): after the local step,
 * x_i <- w_ii x_i + sum_{j in N(i)} w_ij x_j. One round per step; every
 * node sends its whole model (float32) to each neighbour of the step's
 * phase, so time-varying topologies work as they are.
 *
 * gamma scales the step as the reference's diffusion rate does (gamma > 1
 * over-relaxes: 1.308 is its tuned value on an 8-ring); gamma = 1 is W x.
 * The update is applied in difference form,
 * x_i += gamma sum_j w_ij (x_j - x_i),
 * summed in double and rounded once: what i takes from j is then exactly
 * minus what j takes from i, so float32 rounding does not bias the network
 * average (the plain form w_ii x_i + sum_j w_ij x_j drifted by 2.6e-6
 * relative over 1000 steps on an 8-ring; this form stays below 1e-6).
 * Neighbours are summed in ascending id order: the same bits on every run.
 * It is the uncompressed baseline the compressed algorithms are measured
 * against.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct dpsgd {
    float *snapshot; /* the model as sent this step */
    double *acc;     /* sum_j w_ij (x_j - x_i), being formed */
    float *mixed;    /* the result; the snapshot stays as peers read it */
    const struct rumor_gossip_msg **slot;
};

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    if (!(g->opts.gamma > 0 && g->opts.gamma <= RUMOR_GOSSIP_GAMMA_MAX)) {
        rumor_diag_set(diag, "", 0, 0, "dpsgd: gamma must be in (0, 2]");
        return RUMOR_EINVAL;
    }
    struct dpsgd *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    s->snapshot = malloc(g->numel * sizeof(float));
    s->acc = malloc(g->numel * sizeof(double));
    s->mixed = malloc(g->numel * sizeof(float));
    s->slot = malloc(g->nodes * sizeof *s->slot);
    if (!s->snapshot || !s->acc || !s->mixed || !s->slot)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct dpsgd *s = g->state;
    if (s == NULL)
        return;
    free(s->snapshot);
    free(s->acc);
    free(s->mixed);
    free(s->slot);
    free(s);
    g->state = NULL;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct dpsgd *s = g->state;
    gossip_flat_get(g, 0, g->numel, s->snapshot);
    return gossip_out_to_neighbors(g,
                                   step,
                                   (const uint8_t *)s->snapshot,
                                   g->numel * sizeof(float));
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)round;
    struct dpsgd *s = g->state;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    rumor_err rc = gossip_match_inbox(g,
                                      nbr,
                                      peers,
                                      msgs,
                                      count,
                                      g->numel * sizeof(float),
                                      s->slot);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        rc = gossip_check_finite(g, s->slot[k]);
    if (rc == RUMOR_OK) /* clipped per neighbour: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, s->acc);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t e = 0; e < g->numel; e++)
        s->mixed[e] = (float)(s->snapshot[e] + g->opts.gamma * s->acc[e]);
    gossip_flat_put(g, 0, g->numel, s->mixed);
    return RUMOR_OK;
}

/* x_j - x_i of the step for edge skipping (edges.c stages w_ij times it):
 * the same doubles the loss-free absorb sums. */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d)
{
    (void)step;
    const struct dpsgd *s = g->state;
    if (m->len != g->numel * sizeof(float))
        return RUMOR_EPROTO;
    for (size_t e = 0; e < g->numel; e++) {
        float v;
        memcpy(&v, m->data + e * sizeof v, sizeof v);
        d[e] = (double)v - s->snapshot[e];
    }
    return RUMOR_OK;
}

const struct gossip_algo_i gossip_dpsgd = {
    .name = "dpsgd",
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .edge_diff = s_edge_diff,
};
