/*
 * CHOCO-SGD's gossip step (Koloskova, Stich and Jaggi, ICML 2019,
 * Algorithm 1, "CHOCO-Gossip"; reference: epfml/powergossip ChocoGossip)
 * with any codec C from compress/:
 *   q_i = C(x_i - xhat_i); send q_i to every neighbour;
 *   xhat_i += q_i;  s_i += sum_{j in N(i) + i} w_ij q_j;
 *   x_i += gamma (s_i - xhat_i)
 * where xhat_i is node i's public copy (the same on every neighbour, since
 * all of them decode the same bytes) and s_i = sum_j w_ij xhat_j, which
 * saves keeping one copy per neighbour. Payloads are per tensor
 * (payload.c). xhat and s are kept in double: with float copies the
 * rounding of the running sums biased the network average, while the
 * exact algorithm preserves it for symmetric W. Own q is decoded from the
 * bytes actually sent, so both ends of an edge hold identical values. A
 * round is validated whole (every payload decoded into a staging sum)
 * before it touches x, xhat or s. Since s is a running sum over a fixed
 * neighbourhood, time-varying topologies are refused.
 */
#include "gossip/adapt.h"
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct choco {
    struct gossip_packer pack;
    double *xhat, *s, *ds; /* public copy, weighted copies, staged update */
    const struct rumor_gossip_msg **slot;
    const uint8_t *own; /* the last message sent (packer's or adapt's) */
    size_t own_len;
};

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct choco *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (rumor_topology_phases(g->topo) > 1) {
        /* s_i = sum_j w_ij xhat_j is kept as a running sum: it is only
         * right while the neighbours and weights stay the same. */
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "choco needs a static topology (one phase)");
        return RUMOR_EINVAL;
    }
    rumor_err rc = gossip_codec_init(g, &s->pack, &s->slot, diag);
    if (rc != RUMOR_OK)
        return rc;
    s->xhat = calloc(g->numel, sizeof(double));
    s->s = calloc(g->numel, sizeof(double));
    s->ds = calloc(g->numel, sizeof(double));
    if (!s->xhat || !s->s || !s->ds)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct choco *s = g->state;
    if (s == NULL)
        return;
    gossip_codec_free(&s->pack, &s->slot);
    free(s->xhat);
    free(s->s);
    free(s->ds);
    free(s);
    g->state = NULL;
}

/* x - xhat for tensor t. */
static void
s_fill(const rumor_gossip *g, size_t t, size_t base, float *out, void *arg)
{
    const struct choco *s = arg;
    const float *x = g->tensors[t].data;
    for (size_t e = 0; e < rumor_tensor_numel(&g->tensors[t]); e++)
        out[e] = (float)(x[e] - s->xhat[base + e]);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct choco *s = g->state;
    rumor_err rc = RUMOR_OK;
    if (g->adapt != NULL) { /* the fixed controller: the same bytes */
        rc = gossip_adapt_encode(g->adapt,
                                 g,
                                 GOSSIP_ADAPT_ALL,
                                 step,
                                 s_fill,
                                 s,
                                 &s->own,
                                 &s->own_len);
    } else {
        rc = gossip_packer_encode(&s->pack, g, step, s_fill, s);
        s->own = s->pack.buf;
        s->own_len = s->pack.len;
    }
    if (rc != RUMOR_OK)
        return rc;
    return gossip_out_to_neighbors(g, step, s->own, s->own_len);
}

/* Decodes a message into `into` (adapt: with the codec its headers name). */
static rumor_err
s_stage(struct choco *s,
        const rumor_gossip *g,
        const uint8_t *data,
        size_t len,
        double weight,
        double *into)
{
    if (g->adapt != NULL)
        return gossip_adapt_stage(g->adapt, g, data, len, weight, into);
    return gossip_packer_stage(&s->pack, g, data, len, weight, into);
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)round;
    struct choco *s = g->state;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    rumor_err rc = gossip_match_peers(g, nbr, peers, msgs, count, s->slot);
    memset(s->ds, 0, g->numel * sizeof(double));
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        rc = s_stage(s, g, s->slot[k]->data, s->slot[k]->len, w[k], s->ds);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "gossip choco: node %u rejected the message of %u: %s",
                      g->self,
                      nbr[k],
                      rumor_strerror(rc));
    }
    if (rc != RUMOR_OK)
        return rc;
    /* Own q, decoded from the bytes the neighbours got. */
    double self_w = rumor_topology_self_weight(g->topo, phase, g->self);
    rc = s_stage(s, g, s->own, s->own_len, self_w, s->ds);
    if (rc == RUMOR_OK)
        rc = s_stage(s, g, s->own, s->own_len, 1.0, s->xhat);
    if (RUMOR_NEVER(rc != RUMOR_OK))
        return rc; /* own bytes always decode, or the codec has a bug */
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        float *x = g->tensors[t].data;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        for (size_t e = 0; e < n; e++) {
            size_t i = base + e;
            s->s[i] += s->ds[i];
            x[e] = (float)(x[e] + g->opts.gamma * (s->s[i] - s->xhat[i]));
        }
        base += n;
    }
    return RUMOR_OK;
}

/* Between steps CHOCO carries its public copy xhat and the weighted sum
 * s of the neighbours' copies; the staged update and the packer's last
 * message are rebuilt every step. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct choco *s = g->state;
    rumor_err rc = gossip_write_f64(out, s->xhat, g->numel);
    return rc == RUMOR_OK ? gossip_write_f64(out, s->s, g->numel) : rc;
}

static rumor_err
s_state_load(rumor_gossip *g, struct gossip_reader *r, bool apply)
{
    struct choco *s = g->state;
    gossip_read_f64(r, apply ? s->xhat : NULL, g->numel);
    gossip_read_f64(r, apply ? s->s : NULL, g->numel);
    return r->err;
}

const struct gossip_algo_i gossip_choco = {
    .name = "choco",
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
