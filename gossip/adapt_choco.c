/*
 * CHOCO-Gossip with a codec per link (issue #12): the per-edge form of
 * Koloskova, Stich and Jaggi (ICML 2019, Algorithm 1) that adaptive
 * compression needs. In plain CHOCO (choco.c) every neighbour decodes the
 * same bytes, so one public copy xhat_i serves them all; when each link
 * gets its own codec settings, neighbour j's copy of x_i is its own,
 * xhat_{i->j}, and node i keeps one per link:
 *   q_{i->j} = C_ij(x_i - xhat_{i->j});  send q_{i->j} to j;
 *   xhat_{i->j} += q_{i->j};  xin_{j->i} += q_{j->i};
 *   x_i += gamma sum_j w_ij (xin_{j->i} - xhat_{i->j})
 * Since both ends decode the same bytes, xin_{j->i} on i equals
 * xhat_{j->i} on j, and for symmetric W the sum over i of the updates is
 * zero: the network average is kept, as in CHOCO. Node i needs only the
 * weighted sums S_in = sum_j w_ij xin_{j->i} and S_out = sum_j w_ij
 * xhat_{i->j}, besides one copy per link to compress against (all in
 * double, as in choco.c). With equal codecs on every link it is CHOCO
 * (the same iterates up to float rounding order). A round is validated
 * whole before it touches anything. Static topologies only. The copies
 * and sums live in the instance's backend memory (gossip/backend.h), as
 * choco.c's, and go through the host only at save and load.
 */
#include "gossip/adapt.h"

#include <stdlib.h>

struct choco_edge {
    double *xout; /* per link: neighbour's copy of x (links * numel) */
    double *s_in, *s_out, *ds;
    const struct rumor_gossip_msg **slot;
    size_t links; /* copies in xout (at least one) */
};

struct s_fill_arg {
    const struct choco_edge *s;
    size_t link;
};

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct choco_edge *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (!(g->opts.gamma > 0 && g->opts.gamma <= RUMOR_GOSSIP_GAMMA_MAX)) {
        rumor_diag_set(diag, "", 0, 0, "choco: gamma must be in (0, 2]");
        return RUMOR_EINVAL;
    }
    if (rumor_topology_phases(g->topo) > 1) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "choco needs a static topology (one phase)");
        return RUMOR_EINVAL;
    }
    s->links = g->adapt->nlinks > 0 ? g->adapt->nlinks : 1;
    size_t bytes = g->numel * sizeof(double);
    s->slot = malloc(g->nodes * sizeof *s->slot);
    rumor_err rc = s->slot != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = g->be->alloc(s->links * bytes, (void **)&s->xout);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(bytes, (void **)&s->s_in);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(bytes, (void **)&s->s_out);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(bytes, (void **)&s->ds);
    return rc;
}

static void
s_free(rumor_gossip *g)
{
    struct choco_edge *s = g->state;
    if (s == NULL)
        return;
    g->be->release(s->xout);
    g->be->release(s->s_in);
    g->be->release(s->s_out);
    g->be->release(s->ds);
    free(s->slot);
    free(s);
    g->state = NULL;
}

/* x - xhat_{i->j} for tensor t of link j. */
static rumor_err
s_fill(const rumor_gossip *g, size_t t, size_t base, float *out, void *arg)
{
    const struct s_fill_arg *fa = arg;
    const double *xo = fa->s->xout + fa->link * g->numel + base;
    return g->be->sub_round(out,
                            g->tensors[t].data,
                            xo,
                            rumor_tensor_numel(&g->tensors[t]));
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct choco_edge *s = g->state;
    struct gossip_adapt *a = g->adapt;
    rumor_err rc = gossip_out_start(g, a->nlinks);
    for (size_t l = 0; l < a->nlinks && rc == RUMOR_OK; l++) {
        struct s_fill_arg fa = {s, l};
        const uint8_t *data = NULL;
        size_t len = 0;
        rc = gossip_adapt_encode(a, g, l, step, s_fill, &fa, &data, &len);
        if (rc == RUMOR_OK) /* sent while the next link encodes */
            gossip_out_push(
                g,
                (struct rumor_gossip_msg){a->links[l].peer, data, len});
    }
    return rc;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)round;
    (void)step;
    struct choco_edge *s = g->state;
    struct gossip_adapt *a = g->adapt;
    const double *w = NULL;
    size_t peers = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, &w);
    rumor_err rc = gossip_match_peers(g, nbr, peers, msgs, count, s->slot);
    if (rc == RUMOR_OK)
        rc = g->be->zero(s->ds, g->numel * sizeof(double));
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        const uint8_t *body = NULL;
        size_t blen = 0;
        rc = gossip_adapt_body(s->slot[k]->data, s->slot[k]->len, &body, &blen);
        if (rc == RUMOR_OK)
            rc = gossip_adapt_stage(a, g, body, blen, w[k], s->ds);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "gossip choco: node %u rejected the message of %u: %s",
                      g->self,
                      nbr[k],
                      rumor_strerror(rc));
    }
    if (rc != RUMOR_OK)
        return rc;
    for (size_t k = 0; k < peers; k++)
        gossip_adapt_peer_report(a, k, s->slot[k]->data, s->slot[k]->len);
    /* Own q per link, decoded from the bytes that neighbour got. */
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        const uint8_t *body = NULL;
        size_t blen = 0;
        rc = gossip_adapt_body(a->links[k].buf, a->links[k].len, &body, &blen);
        if (rc == RUMOR_OK)
            rc = gossip_adapt_stage(a, g, body, blen, w[k], s->s_out);
        if (rc == RUMOR_OK)
            rc = gossip_adapt_stage(a,
                                    g,
                                    body,
                                    blen,
                                    1.0,
                                    s->xout + k * g->numel);
    }
    if (RUMOR_NEVER(rc != RUMOR_OK))
        return rc; /* own bytes always decode, or the codec has a bug */
    /* s_in += ds, then x += gamma (s_in - s_out), ds holding the
     * difference: each rounding the per-element loop's */
    rc = g->be->axpy(s->s_in, 1.0, s->ds, g->numel);
    if (rc == RUMOR_OK)
        rc = g->be->sub(s->ds, s->s_in, s->s_out, g->numel);
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        float *x = g->tensors[t].data;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        rc = g->be->apply(x, x, g->opts.gamma, s->ds + base, n);
        base += n;
    }
    return rc;
}

/* Between steps: each link's copy, the two weighted sums, then the
 * controller's state (gossip_adapt_state_save), so that a resumed run
 * chooses the same settings as an uninterrupted one. */
/* The doubles of s's vector k (the links' copies, then s_in, then s_out)
 * and their count. */
static double *
s_vector(const struct choco_edge *s, size_t numel, size_t k, size_t *n)
{
    *n = numel;
    if (k < s->links)
        return s->xout + k * numel;
    return k == s->links ? s->s_in : s->s_out;
}

static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct choco_edge *s = g->state;
    size_t bytes = g->numel * sizeof(double), n = 0;
    double *host = g->be->host_memory ? NULL : malloc(bytes + 1);
    rumor_err rc = g->be->host_memory || host != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; k < s->links + 2 && rc == RUMOR_OK; k++) {
        const double *v = s_vector(s, g->numel, k, &n);
        if (host != NULL)
            rc = g->be->copy(host, v, bytes, GOSSIP_TO_HOST);
        if (rc == RUMOR_OK)
            rc = gossip_write_f64(out, host != NULL ? host : v, n);
    }
    free(host);
    return rc == RUMOR_OK ? gossip_adapt_state_save(g->adapt, out) : rc;
}

/* The model part is read into place only after the controller's part
 * checked too (apply runs after a successful check pass). */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    /* no ring: rumor_gossip_state_adopt refuses it before */
    bool apply = mode == GOSSIP_STATE_LOAD;
    struct choco_edge *s = g->state;
    size_t bytes = g->numel * sizeof(double), n = 0;
    bool via_host = apply && !g->be->host_memory;
    double *host = via_host ? malloc(bytes + 1) : NULL;
    if (via_host && host == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < s->links + 2 && rc == RUMOR_OK; k++) {
        double *v = s_vector(s, g->numel, k, &n);
        gossip_read_f64(r, via_host ? host : apply ? v : NULL, n);
        rc = r->err;
        if (rc == RUMOR_OK && via_host)
            rc = g->be->copy(v, host, bytes, GOSSIP_TO_DEVICE);
    }
    free(host);
    return rc == RUMOR_OK ? gossip_adapt_state_load(g->adapt, r, apply) : rc;
}

static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    gossip_adapt_pcie(g->adapt, h2d, d2h);
}

const struct gossip_algo_i gossip_choco_edge = {
    .name = "choco",
    .pcie = s_pcie,
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
