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

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Model-sized buffers live in g->be's memory (the model's device), except
 * the two that hold payloads on the host. */
struct dpsgd {
    float *snapshot; /* the model as sent this step */
    double *acc;     /* sum_j w_ij (x_j - x_i), being formed */
    float *theirs;   /* a neighbour's message, on the backend */
    float *sent;     /* host: the snapshot's payload (device backends) */
    const struct rumor_gossip_msg **slot;
};

static rumor_err
s_alloc_state(rumor_gossip *g, struct dpsgd *s)
{
    size_t floats = g->numel * sizeof(float);
    rumor_err rc = g->be->alloc(floats, (void **)&s->snapshot);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(gossip_apply_bytes(g), (void **)&s->acc);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(floats, (void **)&s->theirs);
    if (rc == RUMOR_OK && !g->be->host_memory) {
        s->sent = malloc(floats + 1);
        rc = s->sent == NULL ? RUMOR_ENOMEM : RUMOR_OK;
    }
    return rc;
}

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
    s->slot = malloc(g->nodes * sizeof *s->slot);
    return s->slot == NULL ? RUMOR_ENOMEM : s_alloc_state(g, s);
}

static void
s_free(rumor_gossip *g)
{
    struct dpsgd *s = g->state;
    if (s == NULL)
        return;
    g->be->release(s->snapshot);
    g->be->release(s->acc);
    g->be->release(s->theirs);
    free(s->sent);
    free(s->slot);
    free(s);
    g->state = NULL;
}

/* The snapshot is the payload: on the host as it is, from a device by
 * one copy. */
static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct dpsgd *s = g->state;
    size_t bytes = g->numel * sizeof(float);
    rumor_err rc =
        gossip_model_read(g, 0, g->numel, s->snapshot, GOSSIP_ON_DEVICE);
    const float *payload = s->snapshot;
    if (rc == RUMOR_OK && !g->be->host_memory) {
        rc = gossip_mem_copy(g, s->sent, s->snapshot, bytes, GOSSIP_TO_HOST);
        payload = s->sent;
    }
    return rc == RUMOR_OK ? gossip_out_to_neighbors(g,
                                                    step,
                                                    (const uint8_t *)payload,
                                                    bytes)
                          : rc;
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
    struct gossip_terms terms;
    if (rc == RUMOR_OK) /* clipped per neighbour: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, &terms);
    /* the mix of the snapshot sent, whatever the model is now */
    return rc == RUMOR_OK ? gossip_apply_terms(g, s->acc, s->snapshot, &terms)
                          : rc;
}

/* x_j - x_i of the step for edge skipping (edges.c stages w_ij times it):
 * the same doubles the loss-free absorb sums. A message reaches the
 * backend by one copy (on the host, none when it is aligned). */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    (void)step;
    const struct dpsgd *s = g->state;
    size_t bytes = g->numel * sizeof(float);
    if (m->len != bytes)
        return RUMOR_EPROTO;
    const float *theirs = (const float *)(const void *)m->data;
    rumor_err rc = RUMOR_OK;
    if (!g->be->host_memory || (uintptr_t)m->data % alignof(float) != 0) {
        rc = gossip_mem_copy(g, s->theirs, m->data, bytes, GOSSIP_TO_DEVICE);
        theirs = s->theirs;
    }
    double sq = 0;
    if (rc == RUMOR_OK)
        rc = gossip_term_diff(g, d, theirs, s->snapshot, g->numel, &sq);
    return rc == RUMOR_OK ? gossip_term_norm(g, d, sq, norm) : rc;
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
