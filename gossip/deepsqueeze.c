/*
 * DeepSqueeze's gossip step (Tang et al., "DeepSqueeze: Decentralization
 * meets error-compensated compression", 2019; reference: epfml/powergossip
 * DeepSqueezeGossip), a baseline with any codec C from compress/:
 *   v_i = x_i + delta_i; send C(v_i); delta_i = v_i - C(v_i);
 *   x_i += gamma (sum_{j in N(i)} w_ij C(v_j) - (1 - w_ii) C(v_i))
 * Unlike CHOCO it keeps no public copies, only the compression error;
 * with symmetric W the C(v) terms cancel over the network, so the average
 * moves only by the rounding of float arithmetic. Payloads are per tensor
 * (payload.c); the round is staged whole before anything changes.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct deepsqueeze {
    struct gossip_packer pack;
    float *delta;    /* compression error, numel */
    double *ds, *cv; /* staged update; own C(v) */
    const struct rumor_gossip_msg **slot;
};

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct deepsqueeze *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    rumor_err rc = gossip_codec_init(g, &s->pack, &s->slot, diag);
    if (rc != RUMOR_OK)
        return rc;
    s->delta = calloc(g->numel, sizeof(float));
    s->ds = calloc(g->numel, sizeof(double));
    s->cv = calloc(g->numel, sizeof(double));
    if (!s->delta || !s->ds || !s->cv)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct deepsqueeze *s = g->state;
    if (s == NULL)
        return;
    gossip_codec_free(&s->pack, &s->slot);
    free(s->delta);
    free(s->ds);
    free(s->cv);
    free(s);
    g->state = NULL;
}

/* v = x + delta for tensor t. */
static void
s_fill(const rumor_gossip *g, size_t t, size_t base, float *out, void *arg)
{
    const struct deepsqueeze *s = arg;
    const float *x = g->tensors[t].data;
    for (size_t e = 0; e < rumor_tensor_numel(&g->tensors[t]); e++)
        out[e] = x[e] + s->delta[base + e];
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct deepsqueeze *s = g->state;
    rumor_err rc = gossip_packer_encode(&s->pack, g, step, s_fill, s);
    if (rc != RUMOR_OK)
        return rc;
    return gossip_out_to_neighbors(g, step, s->pack.buf, s->pack.len);
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)round;
    struct deepsqueeze *s = g->state;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    rumor_err rc = gossip_match_peers(g, nbr, peers, msgs, count, s->slot);
    memset(s->ds, 0, g->numel * sizeof(double));
    memset(s->cv, 0, g->numel * sizeof(double));
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        rc = gossip_packer_stage(&s->pack,
                                 g,
                                 s->slot[k]->data,
                                 s->slot[k]->len,
                                 w[k],
                                 s->ds);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "gossip deepsqueeze: node %u rejected the message of "
                      "%u: %s",
                      g->self,
                      nbr[k],
                      rumor_strerror(rc));
    }
    if (rc == RUMOR_OK)
        rc = gossip_packer_stage(&s->pack,
                                 g,
                                 s->pack.buf,
                                 s->pack.len,
                                 1.0,
                                 s->cv);
    if (rc != RUMOR_OK)
        return rc;
    double others = 1.0 - rumor_topology_self_weight(g->topo, phase, g->self);
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        float *x = g->tensors[t].data;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        for (size_t e = 0; e < n; e++) {
            size_t i = base + e;
            float v = x[e] + s->delta[i];
            s->delta[i] = (float)(v - s->cv[i]);
            x[e] =
                (float)(x[e] + g->opts.gamma * (s->ds[i] - others * s->cv[i]));
        }
        base += n;
    }
    return RUMOR_OK;
}

/* Between steps DeepSqueeze carries its compression error delta. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct deepsqueeze *s = g->state;
    return gossip_write_f32(out, s->delta, g->numel);
}

static rumor_err
s_state_load(rumor_gossip *g, struct gossip_reader *r, bool apply)
{
    struct deepsqueeze *s = g->state;
    gossip_read_f32(r, apply ? s->delta : NULL, g->numel);
    return r->err;
}

const struct gossip_algo_i gossip_deepsqueeze = {
    .name = "deepsqueeze",
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
