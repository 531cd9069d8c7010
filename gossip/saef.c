/*
 * Step-ahead error feedback with the neighbourhood's errors (SAEF, Xu, Huo
 * and Huang, AAAI 2021, arXiv 2008.05823; docs/gossip.md).
 *
 * The paper looks ahead by e_bar, the average compression error of all
 * workers, which a parameter server knows. In gossip, e_bar_i is the
 * W-weighted average sum_{j in N(i) + i} w_ij e_j over node i's
 * neighbourhood, and node i can only know its neighbours' errors by
 * receiving them. So after the compressed sync each node sends C_e(e_i)
 * to the neighbours of the step's phase in one extra round (the sync's
 * own messages are a ring all-gather to the successor only, so they
 * cannot carry an error to every neighbour), with C_e the delta's codec
 * or a cheaper one ("neighbourhood:CODEC"). The own term uses e_i
 * exactly. A neighbour whose error is missing gives its weight to the
 * self term, so the weights still sum to 1.
 *
 * Why it helps over each node's own error: for doubly stochastic W the
 * mean over nodes of the look-ahead points is anchor - mean(e) in both
 * forms, but with aggressive codecs the nodes' errors differ a lot, and
 * averaging them over the neighbourhood brings each node's gradient
 * point closer to the network's virtual model anchor - mean(e).
 * Only the look-ahead changes: what the next sync sends is still
 * Delta_i = e_i + the local update (localsgd.c).
 */
#include "gossip/saef.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAEF_PREFIX  "neighbourhood"
#define SAEF_DEFAULT "neighbourhood" /* as rumor_gossip_opts_default */

/* Splits the scope; *codec receives the error codec's spec. */
static rumor_err
s_parse_scope(struct gossip_saef *s,
              const rumor_gossip *g,
              const char **codec,
              struct rumor_diag *diag)
{
    const char *scope = g->opts.saef_scope;
    size_t plen = strlen(SAEF_PREFIX);
    *codec = g->opts.delta_codec;
    if (strcmp(scope, "self") == 0)
        return RUMOR_OK;
    if (scope[0] == '\0')
        scope = SAEF_DEFAULT;
    if (strncmp(scope, SAEF_PREFIX, plen) == 0 &&
        (scope[plen] == '\0' || (scope[plen] == ':' && scope[plen + 1]))) {
        s->neighbourhood = true;
        if (scope[plen] == ':')
            *codec = scope + plen + 1;
        return RUMOR_OK;
    }
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "saef_scope '%s': expected self, neighbourhood or "
                   "neighbourhood:CODEC",
                   scope);
    return RUMOR_EINVAL;
}

rumor_err
gossip_saef_init(struct gossip_saef *s,
                 const rumor_gossip *g,
                 struct rumor_diag *diag)
{
    memset(s, 0, sizeof *s);
    const char *spec = NULL;
    rumor_err rc = s_parse_scope(s, g, &spec, diag);
    if (rc != RUMOR_OK || !s->neighbourhood || g->opts.delta_codec[0] == '\0')
        return rc;
    bool exact = false;
    rc = rumor_codec_new(spec, &s->codec, diag);
    if (rc == RUMOR_OK)
        rc = gossip_codec_on_device(g, s->codec, diag);
    if (rc == RUMOR_OK)
        rc = rumor_codec_encoded_size(s->codec, g->numel, &s->cap, &exact);
    /* zeroed: a state carries e_bar whole, ranges not formed yet too */
    if (rc == RUMOR_OK)
        rc = g->be->alloc(g->numel * sizeof *s->ebar, (void **)&s->ebar);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(g->numel * sizeof *s->scratch, (void **)&s->scratch);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(g->numel * sizeof *s->acc, (void **)&s->acc);
    if (rc != RUMOR_OK)
        return rc;
    s->buf = malloc(s->cap);
    s->slot = malloc(g->nodes * sizeof *s->slot);
    s->peers = malloc(g->nodes * sizeof *s->peers);
    if (!s->buf || !s->slot || !s->peers)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

void
gossip_saef_free(struct gossip_saef *s, const rumor_gossip *g)
{
    rumor_codec_destroy(&s->codec);
    free(s->buf);
    g->be->release(s->ebar);
    g->be->release(s->scratch);
    g->be->release(s->acc);
    free(s->slot);
    free(s->peers);
    memset(s, 0, sizeof *s);
}

bool
gossip_saef_exchanges(const struct gossip_saef *s, const rumor_gossip *g)
{
    return s->codec != NULL && g->opts.ef_alpha > 0;
}

rumor_err
gossip_saef_emit(struct gossip_saef *s,
                 rumor_gossip *g,
                 uint64_t step,
                 const float *e,
                 size_t n)
{
    uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, 0x5aef);
    rumor_err rc =
        g->be->encode(s->codec, e, n, seed, step, s->buf, s->cap, &s->len);
    if (rc != RUMOR_OK)
        return rc;
    s->pcie_d2h += g->be->host_memory ? 0 : s->len;
    size_t peers = gossip_saef_expected(g, step, s->peers, g->nodes);
    rc = gossip_out_reserve(g, peers);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        g->out[k] = (struct rumor_gossip_msg){s->peers[k], s->buf, s->len};
    return rc;
}

size_t
gossip_saef_expected(const rumor_gossip *g,
                     uint64_t step,
                     uint32_t *peers,
                     size_t cap)
{
    size_t phase = rumor_topology_phase_at(g->topo, step), count = 0, kept = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &count, NULL);
    for (size_t k = 0; k < count; k++) {
        if (!gossip_ring_has(g, nbr[k]))
            continue;
        if (kept < cap)
            peers[kept] = nbr[k];
        kept++;
    }
    return kept;
}

/* A neighbour's error that did not come: its weight w goes to the self
 * term (returned). */
static double
s_missing(const rumor_gossip *g, uint32_t peer, double w)
{
    rumor_log(RUMOR_LOG_INFO,
              "gossip saef: node %u: no error from %u; its weight goes to "
              "the own error",
              g->self,
              peer);
    return w;
}

/* acc += w * C_e(e_j) (n floats) for the message of a neighbour. */
static rumor_err
s_add_neighbour(struct gossip_saef *s,
                const rumor_gossip *g,
                const struct rumor_gossip_msg *msg,
                double w,
                size_t n)
{
    rumor_err rc = g->be->decode(s->codec, msg->data, msg->len, s->scratch, n);
    s->pcie_h2d += g->be->host_memory ? 0 : msg->len;
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip saef: node %u: the error of %u does not decode: %s",
                  g->self,
                  msg->peer,
                  rumor_strerror(rc));
        return rc;
    }
    return g->be->accum(s->acc, w, s->scratch, n);
}

rumor_err
gossip_saef_absorb(struct gossip_saef *s,
                   const rumor_gossip *g,
                   uint64_t step,
                   const float *e,
                   size_t off,
                   size_t n,
                   const struct rumor_gossip_msg *msgs,
                   size_t count)
{
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    /* slot[j] = the message of the j-th member neighbour, NULL when it
     * is missing (which gossip_match_peers reports as RUMOR_ETIMEDOUT) */
    size_t members = gossip_saef_expected(g, step, s->peers, g->nodes);
    rumor_err rc =
        gossip_match_peers(g, s->peers, members, msgs, count, s->slot);
    rc = rc == RUMOR_ETIMEDOUT ? RUMOR_OK : rc;
    double self_w = rumor_topology_self_weight(g->topo, phase, g->self);
    if (rc == RUMOR_OK)
        rc = g->be->zero(s->acc, n * sizeof *s->acc);
    for (size_t k = 0, j = 0; k < peers && rc == RUMOR_OK; k++) {
        if (!gossip_ring_has(g, nbr[k])) {
            self_w += w[k]; /* sent nothing, as a missing neighbour */
            continue;
        }
        const struct rumor_gossip_msg *m = s->slot[j++];
        if (m != NULL)
            rc = s_add_neighbour(s, g, m, w[k], n);
        else
            self_w += s_missing(g, nbr[k], w[k]);
    }
    /* e_bar = (float)(acc + self_w e): rounded by apply from a zero base
     * (0 + acc is acc: a sum from +0 is never -0) */
    if (rc == RUMOR_OK)
        rc = g->be->accum(s->acc, self_w, e, n);
    if (rc == RUMOR_OK)
        rc = g->be->zero(s->scratch, n * sizeof *s->scratch);
    return rc == RUMOR_OK
               ? g->be->apply(s->ebar + off, s->scratch, 1.0, s->acc, n)
               : rc;
}
