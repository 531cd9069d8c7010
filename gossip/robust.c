/*
 * Robust mixing: what one neighbour can move a node's model by in a step
 * is bounded by self-centered clipping (He, Karimireddy and Jaggi,
 * "Byzantine-robust decentralized learning via self-centered clipping",
 * 2022, ClippedGossip):
 *
 *     x_i += gamma sum_j w_ij CLIP(d_ij, tau_i),
 *     CLIP(z, tau) = z min(1, tau / |z|)
 *
 * d_ij is the step's difference neighbour j contributes (x_j - x_i for
 * D-PSGD, the decoded difference of the compressed algorithms), clipped
 * over the whole model, per neighbour and per step.
 *
 * The radius is adaptive. The reference code (epfml, aggregator.py,
 * SelfCenteredClipping) takes the second largest neighbour distance, so
 * the largest is always clipped, however honest. Here the radius is
 *
 *     r_t   = the clip_quantile (default the lower median) of the step's
 *             finite distances, held to at most GROWTH times the EMA
 *             (GROWTH_WARMUP for the first WARMUP steps with a history);
 *     tau_t = clip_factor (default 3) x max(r_t, ema_{t-1});
 *     ema_t = BETA ema_{t-1} + (1 - BETA) r_t   (ema_t = r_t at first).
 *
 * The quantile keeps one outlier among several neighbours from setting the
 * radius (a ring's two neighbours: the smaller distance); the factor
 * leaves honest neighbours, which sit at comparable distances, unclipped;
 * the growth cap limits how fast the radius follows honest distances an
 * attacker's pull has widened (and a lone neighbour's own), while the
 * warm-up lets distances grow from identical starting models
 * (docs/gossip.md, "Robust mixing"; docs/reliability.md measures both).
 *
 * Clipped and rejected messages are logged with the sender: the first of
 * each sender at once, then counts per sender, written at the first event
 * LOG_EVERY_NS or more after the last line and when the instance ends.
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROBUST_BETA          0.9
#define ROBUST_GROWTH        1.1
#define ROBUST_WARMUP        20 /* steps with history at the warm-up growth cap */
#define ROBUST_GROWTH_WARMUP 2.0
#define ROBUST_QUANTILE      0.5
#define ROBUST_FACTOR        3.0
#define LOG_EVERY_NS         10000000000ull

struct gossip_robust {
    double ema;     /* 0: no history yet */
    uint64_t steps; /* steps with history */
    double *norm;   /* cap: the step's distances */
    double *sorted; /* cap: scratch */
    double *coef;   /* cap: the strict path's clipped weights */
    double **diff;  /* cap: the strict path's differences */
    uint32_t *peer; /* cap: their senders (own_terms: the terms) */
    size_t cap;
    uint64_t *counts; /* nodes: clips and rejections since the last line */
    double *worst;    /* nodes: the largest clipped norm since then */
    bool *seen;       /* nodes: the first clip or rejection was logged */
    uint64_t log_at;  /* when the counts started */
};

rumor_err
gossip_robust_check(const struct rumor_gossip_opts *o, struct rumor_diag *diag)
{
    if (o->robust[0] != '\0' && strcmp(o->robust, "clip") != 0 &&
        strcmp(o->robust, "off") != 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "robust must be clip or off, not '%s'",
                       o->robust);
        return RUMOR_EINVAL;
    }
    if (!(o->clip_quantile >= 0 && o->clip_quantile <= 1) ||
        !(o->clip_factor == 0 || o->clip_factor >= 1) || !(o->clip_norm >= 0)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "clip-quantile must be in (0, 1], clip-factor >= 1 "
                       "and clip-norm >= 0");
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

bool
gossip_robust_on(const rumor_gossip *g)
{
    return g->opts.clip_norm > 0 || strcmp(g->opts.robust, "off") != 0;
}

static rumor_err
s_get(rumor_gossip *g, size_t peers, struct gossip_robust **out)
{
    struct gossip_robust *r = g->robust;
    if (r == NULL) {
        r = g->robust = calloc(1, sizeof *r);
        if (r == NULL)
            return RUMOR_ENOMEM;
        r->counts = calloc(g->nodes, sizeof *r->counts);
        r->worst = calloc(g->nodes, sizeof *r->worst);
        r->seen = calloc(g->nodes, sizeof *r->seen);
        if (!r->counts || !r->worst || !r->seen)
            return RUMOR_ENOMEM;
    }
    if (peers > r->cap) {
        double *n = realloc(r->norm, peers * sizeof *n);
        if (n != NULL)
            r->norm = n;
        double *s = realloc(r->sorted, peers * sizeof *s);
        if (s != NULL)
            r->sorted = s;
        double *c = realloc(r->coef, peers * sizeof *c);
        if (c != NULL)
            r->coef = c;
        uint32_t *p = realloc(r->peer, peers * sizeof *p);
        if (p != NULL)
            r->peer = p;
        double **d = realloc(r->diff, peers * sizeof *d);
        if (d != NULL) {
            r->diff = d;
            for (size_t k = r->cap; k < peers; k++)
                d[k] = NULL;
        }
        if (n == NULL || s == NULL || c == NULL || p == NULL || d == NULL)
            return RUMOR_ENOMEM;
        r->cap = peers;
    }
    *out = r;
    return RUMOR_OK;
}

/* Writes the pending counts, one line per sender. */
static void
s_flush(rumor_gossip *g, struct gossip_robust *r, uint64_t now)
{
    for (size_t j = 0; j < g->nodes; j++) {
        if (r->counts[j] == 0)
            continue;
        rumor_log(RUMOR_LOG_WARN,
                  "gossip %s: node %u clipped or rejected %llu more "
                  "messages of %zu in %.1f s (largest clipped norm %g)",
                  g->algo->name,
                  g->self,
                  (unsigned long long)r->counts[j],
                  j,
                  (double)(now - r->log_at) * 1e-9,
                  r->worst[j]);
        r->counts[j] = 0;
        r->worst[j] = 0;
    }
    r->log_at = now;
}

void
gossip_robust_note(rumor_gossip *g, uint32_t peer, double norm, double tau)
{
    struct gossip_robust *r = NULL;
    if (s_get(g, 0, &r) != RUMOR_OK || peer >= g->nodes)
        return; /* out of memory: the count in the metrics still moves */
    uint64_t now = rumor_clock_ns();
    if (!r->seen[peer]) {
        r->seen[peer] = true;
        if (isfinite(norm))
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u clipped the difference of %u "
                      "from norm %g to radius %g (later ones are counted)",
                      g->algo->name,
                      g->self,
                      peer,
                      norm,
                      tau);
        else
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u rejected the message of %u: "
                      "non-finite values (later ones are counted)",
                      g->algo->name,
                      g->self,
                      peer);
    } else {
        r->counts[peer]++;
        if (isfinite(norm) && norm > r->worst[peer])
            r->worst[peer] = norm;
    }
    if (r->log_at == 0)
        r->log_at = now;
    else if (now - r->log_at >= LOG_EVERY_NS)
        s_flush(g, r, now);
}

static int
s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
gossip_robust_radius(rumor_gossip *g, const double *norm, size_t count)
{
    if (g->opts.clip_norm > 0) {
        g->screen.clip_radius = g->opts.clip_norm;
        return g->opts.clip_norm;
    }
    struct gossip_robust *r = NULL;
    if (!gossip_robust_on(g) || count == 0 || s_get(g, count, &r) != RUMOR_OK)
        return INFINITY;
    memcpy(r->sorted, norm, count * sizeof *norm);
    qsort(r->sorted, count, sizeof *r->sorted, s_cmp);
    double q =
        g->opts.clip_quantile > 0 ? g->opts.clip_quantile : ROBUST_QUANTILE;
    double f = g->opts.clip_factor > 0 ? g->opts.clip_factor : ROBUST_FACTOR;
    double base = r->sorted[(size_t)floor(q * (double)(count - 1))];
    double grow =
        r->steps < ROBUST_WARMUP ? ROBUST_GROWTH_WARMUP : ROBUST_GROWTH;
    if (r->ema > 0 && base > grow * r->ema)
        base = grow * r->ema;
    if (r->ema > 0)
        r->steps++;
    double tau = f * (base > r->ema ? base : r->ema);
    r->ema =
        r->ema > 0 ? ROBUST_BETA * r->ema + (1 - ROBUST_BETA) * base : base;
    g->screen.clip_radius = tau;
    return tau;
}

void
gossip_robust_history(const rumor_gossip *g, uint64_t *steps, double *ema)
{
    const struct gossip_robust *r = g->robust;
    *steps = r != NULL ? r->steps : 0;
    *ema = r != NULL ? r->ema : 0;
}

rumor_err
gossip_robust_restore(rumor_gossip *g, uint64_t steps, double ema)
{
    struct gossip_robust *r = g->robust;
    if (r == NULL && steps == 0 && ema == 0)
        return RUMOR_OK; /* nothing to restore, nothing to make */
    rumor_err rc = s_get(g, 0, &r);
    if (rc != RUMOR_OK)
        return rc;
    r->steps = steps;
    r->ema = ema;
    return RUMOR_OK;
}

double
gossip_robust_scale(rumor_gossip *g, uint32_t peer, double norm, double tau)
{
    if (!isfinite(tau))
        return 1.0; /* robust mixing off */
    g->screen.screened++;
    if (!(norm > tau))
        return 1.0;
    g->screen.clipped++;
    gossip_robust_note(g, peer, norm, tau);
    return tau / norm;
}

/* Neighbour k's difference into r->diff[k] (backend memory) and its norm
 * into r->norm[k]; RUMOR_ENUMERIC for a non-finite one. */
static rumor_err
s_diff_one(rumor_gossip *g,
           struct gossip_robust *r,
           uint64_t step,
           const struct rumor_gossip_msg *m,
           size_t k)
{
    rumor_err rc = RUMOR_OK;
    r->peer[k] = m->peer;
    if (r->diff[k] == NULL && !g->own_terms)
        rc = g->be->alloc(g->numel * sizeof(double), (void **)&r->diff[k]);
    if (rc == RUMOR_OK)
        rc = g->algo->edge_diff(g, step, m, r->diff[k], &r->norm[k]);
    if (rc == RUMOR_OK && !isfinite(r->norm[k])) {
        gossip_robust_note(g, m->peer, r->norm[k], 0);
        g->screen.nonfinite++;
        rc = RUMOR_ENUMERIC;
    }
    return rc;
}

rumor_err
gossip_robust_mix(rumor_gossip *g,
                  uint64_t step,
                  const struct rumor_gossip_msg *const *slot,
                  const double *w,
                  size_t peers,
                  struct gossip_terms *out)
{
    struct gossip_robust *r = NULL;
    rumor_err rc = s_get(g, peers, &r);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        rc = s_diff_one(g, r, step, slot[k], k);
    if (rc != RUMOR_OK)
        return rc;
    double tau = gossip_robust_radius(g, r->norm, peers);
    for (size_t k = 0; k < peers; k++)
        r->coef[k] =
            w[k] * gossip_robust_scale(g, slot[k]->peer, r->norm[k], tau);
    *out = (struct gossip_terms){(const double *const *)r->diff,
                                 r->coef,
                                 peers,
                                 g->own_terms ? r->peer : NULL};
    return RUMOR_OK;
}

void
gossip_robust_free(rumor_gossip *g)
{
    struct gossip_robust *r = g->robust;
    if (r == NULL)
        return;
    if (r->counts != NULL && r->worst != NULL)
        s_flush(g, r, rumor_clock_ns());
    for (size_t k = 0; k < r->cap; k++)
        g->be->release(r->diff[k]);
    free(r->diff);
    free(r->peer);
    free(r->norm);
    free(r->sorted);
    free(r->coef);
    free(r->counts);
    free(r->worst);
    free(r->seen);
    free(r);
    g->robust = NULL;
}
