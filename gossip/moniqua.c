/*
 * Moniqua (Lu and De Sa, "Moniqua: Modulo quantized communication in
 * decentralized SGD", ICML 2020; reference: epfml/powergossip
 * MoniquaGossip), a 2-bit baseline that needs no error feedback: since
 * neighbours' models are close, x_j is known to i modulo a bound B, so
 * only x mod B needs to be sent, quantized to delta = 1/3 steps:
 *   B = 2 theta / (1 - 2 delta);  v = mod(x / B, 1) + 1/2  in [0, 1)
 *   q = floor(v / delta + u) delta - 1/2   (u uniform: stochastic rounding)
 *   xhat_i = q_i B - mod(x_i, B)
 *   x_i += gamma sum_j w_ij (mod(q_j B - x_i, B) - xhat_i)
 * with mod(x, a) = fmod(x + sign(x) a/2, a) - sign(x) a/2, in [-a/2, a/2).
 * Each element travels as a 2-bit level floor(v / delta + u) in 0..3,
 * packed four to a byte. theta must bound how far neighbours' models are
 * apart (the reference tunes it over 0.1 .. 10). All terms use the model
 * as it was at the start of the step (the reference updates it neighbour
 * by neighbour, which makes its result depend on neighbour order). The
 * rounding noise comes from the node's own Philox stream per step.
 * Nothing is carried per edge, and edge j's term is a function of the
 * step's two messages and x_i, so a neighbour can be skipped as in D-PSGD
 * (gossip/edges.c stages w_ij times the term of s_edge_diff, in double,
 * the products absorb sums; docs/reliability.md). The term is x_j - x_i
 * + xhat_j - xhat_i while neighbours are within B / 2, so the two ends'
 * terms cancel up to float rounding, as in the loss-free step.
 *
 * On the backend table: the snapshot, xhat, the noise, the update and the
 * packed levels are in g->be's memory, the quantization and the decoded
 * term are its kernels (mod and floor in gossip/ref.c), and the noise is
 * drawn there by element index, so a device node sends the host's bytes;
 * only the levels cross (the own message down, each neighbour's up).
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>

/* Model-sized buffers live in g->be's memory, except the one that holds
 * the payload on the host. */
struct moniqua {
    double bound; /* B */
    float *x;     /* the flat model at the start of the step */
    float *xhat;  /* q_i B - mod(x_i, B) */
    float *noise;
    double *acc;     /* sum_j w_ij term_j, the step's update */
    uint8_t *levels; /* the packed message */
    /* device backends: a neighbour's message there, and the host copy of
     * this node's */
    uint8_t *theirs, *sent;
    size_t bytes; /* its length: ceil(numel / 4) */
    const struct rumor_gossip_msg **slot;
};

static rumor_err
s_alloc_state(rumor_gossip *g, struct moniqua *s)
{
    size_t floats = g->numel * sizeof(float);
    rumor_err rc = g->be->alloc(floats, (void **)&s->x);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(floats, (void **)&s->xhat);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(floats, (void **)&s->noise);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(gossip_apply_bytes(g), (void **)&s->acc);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(s->bytes, (void **)&s->levels);
    if (rc != RUMOR_OK || g->be->host_memory)
        return rc;
    rc = g->be->alloc(s->bytes, (void **)&s->theirs);
    s->sent = malloc(s->bytes + 1);
    return rc == RUMOR_OK && s->sent == NULL ? RUMOR_ENOMEM : rc;
}

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct moniqua *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (!(g->opts.gamma > 0 && g->opts.gamma <= RUMOR_GOSSIP_GAMMA_MAX) ||
        !(g->opts.theta > 0 && g->opts.theta < 1e6)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "moniqua: needs gamma in (0, 2] and theta in (0, 1e6)");
        return RUMOR_EINVAL;
    }
    s->bound = 2 * g->opts.theta / (1 - 2 * GOSSIP_MONIQUA_DELTA);
    s->bytes = (g->numel + 3) / 4;
    s->slot = malloc(g->nodes * sizeof *s->slot);
    return s->slot == NULL ? RUMOR_ENOMEM : s_alloc_state(g, s);
}

static void
s_free(rumor_gossip *g)
{
    struct moniqua *s = g->state;
    if (s == NULL)
        return;
    g->be->release(s->x);
    g->be->release(s->xhat);
    g->be->release(s->noise);
    g->be->release(s->acc);
    g->be->release(s->levels);
    g->be->release(s->theirs);
    free(s->sent);
    free(s->slot);
    free(s);
    g->state = NULL;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct moniqua *s = g->state;
    rumor_err rc = gossip_model_read(g, 0, g->numel, s->x, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = g->be->uniform(s->noise,
                            rumor_seed_derive(g->opts.seed, g->self, 0x3),
                            step,
                            0,
                            g->numel);
    if (rc == RUMOR_OK)
        rc = g->be->moniqua_levels(s->levels,
                                   s->xhat,
                                   s->x,
                                   s->noise,
                                   s->bound,
                                   g->numel);
    const uint8_t *payload = s->levels;
    if (rc == RUMOR_OK && !g->be->host_memory) {
        rc = gossip_mem_copy(g, s->sent, s->levels, s->bytes, GOSSIP_TO_HOST);
        payload = s->sent;
    }
    return rc == RUMOR_OK ? gossip_out_to_neighbors(g, step, payload, s->bytes)
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
    struct moniqua *s = g->state;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    /* Every byte is a valid set of levels: the length is the only check. */
    rumor_err rc =
        gossip_match_inbox(g, nbr, peers, msgs, count, s->bytes, s->slot);
    struct gossip_terms terms;
    if (rc == RUMOR_OK) /* each neighbour's term clipped: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, &terms);
    return rc == RUMOR_OK ? gossip_apply_terms(g, s->acc, s->x, &terms) : rc;
}

/* The term of edge m->peer, mod(q_j B - x_i, B) - xhat_i, per element.
 * A message reaches the backend by one copy (on the host, none). */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    (void)step;
    const struct moniqua *s = g->state;
    if (m->len != s->bytes)
        return RUMOR_EPROTO;
    const uint8_t *theirs = m->data;
    rumor_err rc = RUMOR_OK;
    if (!g->be->host_memory) {
        rc = gossip_mem_copy(g, s->theirs, m->data, s->bytes, GOSSIP_TO_DEVICE);
        theirs = s->theirs;
    }
    if (rc == RUMOR_OK)
        rc = g->be->moniqua_term(d, theirs, s->x, s->xhat, s->bound, g->numel);
    return rc == RUMOR_OK ? g->be->norm(d, g->numel, norm) : rc;
}

const struct gossip_algo_i gossip_moniqua = {
    .name = "moniqua",
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .edge_diff = s_edge_diff,
};
