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
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MONIQUA_DELTA (1.0 / 3.0)

struct moniqua {
    double bound; /* B */
    float *x;     /* the flat model at the start of the step */
    float *xhat;  /* q_i B - mod(x_i, B) */
    float *noise;
    double *acc;     /* sum_j w_ij term_j, the step's update */
    uint8_t *levels; /* the packed message */
    size_t bytes;    /* its length: ceil(numel / 4) */
    const struct rumor_gossip_msg **slot;
};

/* mod(x, a) = x - a floor(x/a + 1/2), in [-a/2, a/2): the reference's
 * fmod(x + sign(x) a/2, a) - sign(x) a/2 without fmod and without a branch
 * on the sign (they differ only for x/a exactly half an odd integer below
 * zero, where this gives -a/2 and the reference +a/2, and by the rounding
 * of x/a within an ulp of a bucket edge). glibc's fmod is an exact
 * remainder loop: with it a step of 8 nodes at ResNet-18 size took 5 s. */
/* floor without a libm call (baseline x86-64 has no rounding
 * instruction, so floor() is a call): truncation is exact below 2^52,
 * where every double is already an integer anyway. */
static inline double
s_floor(double v)
{
    if (!(fabs(v) < 4503599627370496.0))
        return v;
    double t = (double)(int64_t)v;
    return t - (double)(t > v); /* branch-free: the sign is random */
}

static inline double
s_mod(double x, double a, double inv_a)
{
    return x - a * s_floor(x * inv_a + 0.5);
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
    s->bound = 2 * g->opts.theta / (1 - 2 * MONIQUA_DELTA);
    s->bytes = (g->numel + 3) / 4;
    s->x = malloc(g->numel * sizeof(float));
    s->xhat = malloc(g->numel * sizeof(float));
    s->noise = malloc(g->numel * sizeof(float));
    s->acc = malloc(g->numel * sizeof(double));
    s->levels = malloc(s->bytes + 1);
    s->slot = malloc(g->nodes * sizeof *s->slot);
    if (!s->x || !s->xhat || !s->noise || !s->acc || !s->levels || !s->slot)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct moniqua *s = g->state;
    if (s == NULL)
        return;
    free(s->x);
    free(s->xhat);
    free(s->noise);
    free(s->acc);
    free(s->levels);
    free(s->slot);
    free(s);
    g->state = NULL;
}

static unsigned
s_level(const uint8_t *levels, size_t e)
{
    return (levels[e / 4] >> (2 * (e % 4))) & 3u;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct moniqua *s = g->state;
    double b = s->bound, inv_b = 1.0 / b;
    gossip_flat_get(g, 0, g->numel, s->x);
    rumor_rng_fill_uniform(rumor_seed_derive(g->opts.seed, g->self, 0x3),
                           step,
                           0,
                           s->noise,
                           g->numel);
    memset(s->levels, 0, s->bytes);
    for (size_t e = 0; e < g->numel; e++) {
        double v = s_mod(s->x[e] * inv_b, 1.0, 1.0) + 0.5;
        double level = s_floor(v * 3.0 + s->noise[e]); /* v / delta */
        level = level > 0 ? level : 0; /* maxsd / minsd, no branches */
        level = level < 3 ? level : 3;
        unsigned l = (unsigned)level;
        s->levels[e / 4] |= (uint8_t)(l << (2 * (e % 4)));
        double q = l * MONIQUA_DELTA - 0.5;
        s->xhat[e] = (float)(q * b - s_mod(s->x[e], b, inv_b));
    }
    return gossip_out_to_neighbors(g, step, s->levels, s->bytes);
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
    if (rc == RUMOR_OK) /* each neighbour's term clipped: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, s->acc);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t e = 0; e < g->numel; e++)
        s->x[e] = (float)(s->x[e] + g->opts.gamma * s->acc[e]);
    gossip_flat_put(g, 0, g->numel, s->x);
    return RUMOR_OK;
}

/* The term of edge m->peer, mod(q_j B - x_i, B) - xhat_i, per element. */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d)
{
    (void)step;
    const struct moniqua *s = g->state;
    if (m->len != s->bytes)
        return RUMOR_EPROTO;
    double b = s->bound, inv_b = 1.0 / b;
    for (size_t e = 0; e < g->numel; e++) {
        double q = s_level(m->data, e) * MONIQUA_DELTA - 0.5;
        d[e] = s_mod(q * b - s->x[e], b, inv_b) - s->xhat[e];
    }
    return RUMOR_OK;
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
