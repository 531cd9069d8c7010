/*
 * CHOCO-SGD's gossip step (Koloskova, Stich and Jaggi, ICML 2019,
 * Algorithm 1, "CHOCO-Gossip"; reference: epfml/powergossip ChocoGossip)
 * with any codec C from compress/, in its per-edge form:
 *   q_{i->j} = C(x_i - xhat_{i->j}); send it to j;
 *   xhat_{i->j} += q_{i->j};  xin_{j->i} += q_{j->i};
 *   x_i += gamma sum_j w_ij (xin_{j->i} - xhat_{i->j})
 * where xhat_{i->j} is node i's public copy as neighbour j holds it and
 * xin_{j->i} node i's copy of j's (both ends decode the same bytes, so
 * they are equal). Loss-free every xhat_{i->j} is the paper's single
 * xhat_i (one encoding serves every neighbour whose copy is the same),
 * and sum_j w_ij (xhat_j - xhat_i) is its s_i - xhat_i. One copy per
 * edge is what lets a neighbour be skipped (docs/reliability.md): a
 * step's update of an edge, its two copies and its model term, is staged
 * in the ledger (gossip/edges.c) and becomes the edge's only when both
 * ends hold both messages, so the pair's copies stay equal and the terms
 * w_ij (xin - xhat) at the two ends stay opposite: the network average is
 * kept (the sum form needs every q of every neighbour). An edge whose
 * verdict is open sends and takes nothing until it is known; a restarted
 * neighbour starts the edge over from zero copies, as the paper's first
 * step. Copies are in double: with float copies rounding biased the
 * network average. Payloads are per tensor (payload.c). Static
 * topologies only (the copies belong to fixed edges). The copies, the
 * vectors the codec encodes and decodes, and the mixing live in the
 * instance's backend memory (gossip/backend.h): on a model in GPU memory
 * only the payloads cross (with adaptive compression, each of its own
 * payloads also comes back up once: its C(x) is decoded from the bytes).
 */
#include "gossip/adapt.h"
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct choco_edge {
    double *out, *in;         /* xhat_{i->j}, xin_{j->i} (committed) */
    double *out_new, *in_new; /* what the staged step leaves */
    uint8_t *own;             /* q_{i->j} sent this step */
    size_t own_len, own_cap;
    bool sent;
};

struct choco {
    struct gossip_packer pack;
    struct choco_edge *edge; /* by node id; neighbours only */
    double *acc;             /* absorb: sum_j w_ij CLIP(d_j) */
    const struct rumor_gossip_msg **slot;
};

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct choco *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (rumor_topology_phases(g->topo) > 1) {
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
    s->edge = calloc(g->nodes, sizeof *s->edge);
    if (s->edge == NULL)
        return RUMOR_ENOMEM;
    size_t bytes = g->numel * sizeof(double), peers = 0;
    rc = g->be->alloc(gossip_apply_bytes(g), (void **)&s->acc);
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, NULL);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        struct choco_edge *e = &s->edge[nbr[k]];
        rc = g->be->alloc(bytes, (void **)&e->out);
        if (rc == RUMOR_OK)
            rc = g->be->alloc(bytes, (void **)&e->in);
        if (rc == RUMOR_OK)
            rc = g->be->alloc(bytes, (void **)&e->out_new);
        if (rc == RUMOR_OK)
            rc = g->be->alloc(bytes, (void **)&e->in_new);
    }
    return rc;
}

static void
s_free(rumor_gossip *g)
{
    struct choco *s = g->state;
    if (s == NULL)
        return;
    gossip_codec_free(&s->pack, &s->slot);
    for (size_t i = 0; s->edge != NULL && i < g->nodes; i++) {
        g->be->release(s->edge[i].out);
        g->be->release(s->edge[i].in);
        g->be->release(s->edge[i].out_new);
        g->be->release(s->edge[i].in_new);
        free(s->edge[i].own);
    }
    free(s->edge);
    g->be->release(s->acc);
    free(s);
    g->state = NULL;
}

/* x - xhat_{i->j} for tensor t (arg: the edge's copy). */
static rumor_err
s_fill(const rumor_gossip *g, size_t t, size_t base, float *out, void *arg)
{
    const double *xhat = arg;
    return g->be->sub_round(out,
                            g->tensors[t].data,
                            xhat + base,
                            rumor_tensor_numel(&g->tensors[t]));
}

/* Keeps a copy of the message sent on the edge (the packer's buffer is
 * reused by the next encoding). */
static rumor_err
s_own_set(struct choco_edge *e, const uint8_t *data, size_t len)
{
    if (len > e->own_cap) {
        uint8_t *own = realloc(e->own, len);
        if (own == NULL)
            return RUMOR_ENOMEM;
        e->own = own;
        e->own_cap = len;
    }
    if (len > 0)
        memcpy(e->own, data, len);
    e->own_len = len;
    return RUMOR_OK;
}

/* q for edge e, encoded into e->own. */
static rumor_err
s_encode(struct choco *s, rumor_gossip *g, uint64_t step, struct choco_edge *e)
{
    const uint8_t *data = NULL;
    size_t len = 0;
    rumor_err rc = RUMOR_OK;
    if (g->adapt != NULL) { /* the fixed controller: the same bytes */
        rc = gossip_adapt_encode(g->adapt,
                                 g,
                                 GOSSIP_ADAPT_ALL,
                                 step,
                                 s_fill,
                                 e->out,
                                 &data,
                                 &len);
    } else {
        rc = gossip_packer_encode(&s->pack, g, step, s_fill, e->out);
        data = s->pack.buf;
        len = s->pack.len;
    }
    return rc == RUMOR_OK ? s_own_set(e, data, len) : rc;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct choco *s = g->state;
    size_t peers = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, NULL);
    rumor_err rc = gossip_out_start(g, peers);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        struct choco_edge *e = &s->edge[nbr[k]], *same = NULL;
        e->sent = !gossip_edge_busy(g, nbr[k]);
        if (!e->sent)
            continue; /* its last step's verdict is not known yet */
        /* copies that are equal make the same message: encode once
         * (compared on the host only; on a device each edge encodes) */
        for (size_t k2 = 0; k2 < k && same == NULL && g->be->host_memory;
             k2++) {
            struct choco_edge *o = &s->edge[nbr[k2]];
            if (o->sent &&
                memcmp(o->out, e->out, g->numel * sizeof(double)) == 0)
                same = o;
        }
        rc = same == NULL ? s_encode(s, g, step, e)
                          : s_own_set(e, same->own, same->own_len);
        if (rc == RUMOR_OK) /* sent while the next edge encodes */
            gossip_out_push(
                g,
                (struct rumor_gossip_msg){nbr[k], e->own, e->own_len});
    }
    return rc;
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

/* The step's update of the edge to m->peer: the new copies into
 * out_new / in_new, and d = in_new - out_new (unweighted). */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    (void)step;
    struct choco *s = g->state;
    struct choco_edge *e = &s->edge[m->peer];
    if (e->out == NULL || !e->sent)
        return RUMOR_EINVAL; /* not a neighbour, or nothing sent to it */
    size_t bytes = g->numel * sizeof(double);
    rumor_err rc =
        gossip_mem_copy(g, e->in_new, e->in, bytes, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = s_stage(s, g, m->data, m->len, 1.0, e->in_new);
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip choco: node %u rejected the message of %u: %s",
                  g->self,
                  m->peer,
                  rumor_strerror(rc));
        return rc == RUMOR_ENUMERIC ? rc : RUMOR_EPROTO;
    }
    /* own q, decoded from the bytes the neighbour got */
    rc = gossip_mem_copy(g, e->out_new, e->out, bytes, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = s_stage(s, g, e->own, e->own_len, 1.0, e->out_new);
    if (RUMOR_NEVER(rc != RUMOR_OK))
        return rc; /* own bytes always decode, or the codec has a bug */
    rc = g->be->sub(d, e->in_new, e->out_new, g->numel);
    return rc == RUMOR_OK ? g->be->norm(d, g->numel, norm) : rc;
}

static void
s_edge_commit(rumor_gossip *g, uint32_t peer, uint64_t step)
{
    (void)step;
    struct choco_edge *e = &((struct choco *)g->state)->edge[peer];
    double *out = e->out, *in = e->in;
    e->out = e->out_new;
    e->in = e->in_new;
    e->out_new = out;
    e->in_new = in;
}

static void
s_edge_reset(rumor_gossip *g, uint32_t peer)
{
    struct choco_edge *e = &((struct choco *)g->state)->edge[peer];
    if (e->out == NULL)
        return;
    /* a device that fails here fails the next step's copies too */
    (void)g->be->zero(e->out, g->numel * sizeof(double));
    (void)g->be->zero(e->in, g->numel * sizeof(double));
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
    size_t peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, &w);
    rumor_err rc = gossip_match_peers(g, nbr, peers, msgs, count, s->slot);
    /* The same doubles, order and single rounding as the ledger's commit
     * of a loss-free step (gossip/edges.c); nothing changes before every
     * message decoded. */
    struct gossip_terms terms;
    if (rc == RUMOR_OK) /* each x_hat difference clipped: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, &terms);
    if (rc == RUMOR_OK)
        rc = gossip_apply_terms(g, s->acc, NULL, &terms);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        s_edge_commit(g, nbr[k], step);
    return rc;
}

/* Between steps CHOCO carries, per neighbour in the topology's order,
 * the edge's two copies xhat_{i->j} and xin_{j->i}; the staged update and
 * the last message are rebuilt every step. A device's copies go through
 * host memory at save and load time. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct choco *s = g->state;
    size_t peers = 0, bytes = g->numel * sizeof(double);
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, NULL);
    double *host = g->be->host_memory ? NULL : malloc(bytes + 1);
    rumor_err rc = g->be->host_memory || host != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; k < 2 * peers && rc == RUMOR_OK; k++) {
        const struct choco_edge *e = &s->edge[nbr[k / 2]];
        const double *copy = k % 2 == 0 ? e->out : e->in;
        if (host != NULL)
            rc = g->be->copy(host, copy, bytes, GOSSIP_TO_HOST);
        if (rc == RUMOR_OK)
            rc = gossip_write_f64(out, host != NULL ? host : copy, g->numel);
    }
    free(host);
    return rc;
}

static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    /* no ring: rumor_gossip_state_adopt refuses it before */
    bool apply = mode == GOSSIP_STATE_LOAD;
    struct choco *s = g->state;
    size_t peers = 0, bytes = g->numel * sizeof(double);
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, NULL);
    bool via_host = apply && !g->be->host_memory;
    double *host = via_host ? malloc(bytes + 1) : NULL;
    if (via_host && host == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < 2 * peers && rc == RUMOR_OK; k++) {
        struct choco_edge *e = &s->edge[nbr[k / 2]];
        double *copy = k % 2 == 0 ? e->out : e->in;
        gossip_read_f64(r, via_host ? host : apply ? copy : NULL, g->numel);
        rc = r->err;
        if (rc == RUMOR_OK && via_host)
            rc = g->be->copy(copy, host, bytes, GOSSIP_TO_DEVICE);
    }
    free(host);
    return rc;
}

static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    gossip_packer_pcie(&((const struct choco *)g->state)->pack, h2d, d2h);
    if (g->adapt != NULL)
        gossip_adapt_pcie(g->adapt, h2d, d2h);
}

const struct gossip_algo_i gossip_choco = {
    .name = "choco",
    .pcie = s_pcie,
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .edge_diff = s_edge_diff,
    .edge_commit = s_edge_commit,
    .edge_reset = s_edge_reset,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
