/*
 * PowerGossip (Vogels, Karimireddy and Jaggi, NeurIPS 2020; reference code
 * epfml/powergossip algorithms.py, class PowerGossip). For every edge and
 * matrix both ends keep rank-r factors from the pair's shared seed and run
 * power iteration on the *difference* of their two models:
 * each iteration one end's product M^T p (even t) or M q (odd t) is sent,
 * the difference of the two products is formed, and both ends apply
 * x_i += sign w_ij gamma p q^T with opposite signs, so a symmetric W keeps
 * the network average exactly. The per-edge arithmetic lives in lowrank/
 * (rumor_lowrank_edge_*); this file is the protocol around it.
 *
 * One round per power iteration (opts.iterations per step). Which side
 * of the factorization moves follows the edge's own iteration count, not
 * the step: iteration t = (iterations the edge has taken) + 1 computes
 * M q on odd t and M^T p on even t, from the q or p iteration t - 1 left
 * (opts.warm_start, the default) or from one drawn afresh from the pair's
 * seed and t (the reference's warm_start=False; lowrank/ draws it, the
 * same at both ends because t is). Both ends count the same iterations
 * (the ones both applied), so they agree without sending the count. The
 * reference (algorithms.py) takes the parity from its global iteration
 * number, which is the same on its static graphs, where every edge moves
 * every round; on a time-varying graph an edge active every second step
 * would always get the same parity there and one factor would never be
 * refreshed (one-peer-exp:4 stalled at 0.988 relative error). 1-D tensors
 * (biases, norms) travel uncompressed in the same message and are mixed by
 * plain gossip in difference form, x += gamma sum_j w_ij (x_j - x_i). Every
 * message of a round is checked (size, finite values) before any edge
 * state or tensor changes, so a bad neighbour never leaves half an update.
 * Edge state is created the first time a peer appears, which covers
 * time-varying topologies.
 *
 * Skipping a neighbour (docs/reliability.md): an iteration changes the
 * edge's factors at both ends, so they stay equal only if both ends take
 * the same iterations. The edge's model term, sign w_ij p q^T (and the
 * 1-D differences), is staged in the ledger (gossip/edges.c) and the
 * factors it leaves are kept as a candidate; when the ledger applies the
 * term (both ends hold both messages) the candidate becomes the edge's
 * committed factors, otherwise the next iteration starts again from the
 * committed ones. An edge whose verdict is still open sends and takes
 * nothing (the ledger's busy test) until it is known, so both ends' factors
 * are always a function of the same committed iterations, and so are
 * their iteration counts: only a commit advances the count, and the
 * ledger commits an edge's term on both ends or on neither. A restarted
 * neighbour (edge_reset) starts the edge over from the pair's seed at
 * iteration 1.
 * Loss-free, the staged form is what absorb computes: the terms of a
 * step summed in double in node order and rounded once.
 *
 * On host memory (g->own_terms) a term is kept as the factors of its
 * iteration and its 1-D differences, and gossip_apply_terms asks for it a
 * chunk of rows at a time (s_term_add), rebuilt to the bits a written
 * term has: two model-sized passes of doubles (the term written, then
 * read back per neighbour) were most of the exchange's CPU on a
 * 2-core host. A device writes the term as doubles, as the ledger keeps
 * every other algorithm's. Either way its norm comes from the factors.
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pg_peer {
    rumor_lowrank_edge *edge;
    float *msg;       /* what this node sends to the peer */
    size_t msg_cap;   /* floats */
    float *committed; /* the factors of the last iteration both ends took */
    float *cand;      /* the factors the staged iteration leaves */
    size_t state_n;   /* floats in each */
    /* own_terms: the last term made, its factors (state_n floats) and
     * its 1-D differences (vec_floats doubles) */
    float *term;
    double *term_vec;
    bool term_made;
    bool open;       /* product sent, no combine yet */
    bool dirty;      /* the live factors are not the committed ones */
    uint64_t open_t; /* the open iteration */
    uint64_t iters;  /* iterations both ends took: the next is iters + 1 */
};

/* The model-sized buffers (acc, zero, and what a difference reads) live
 * in g->be's memory, the model's device; messages are host memory. */
struct powergossip {
    struct rumor_lowrank_shape *shapes;
    float **params;       /* tensor data pointers */
    struct pg_peer *peer; /* indexed by node id, created lazily */
    float *vec_snap;      /* host: own 1-D tensors as sent this round */
    float *vec_dev;       /* the same on the backend */
    size_t vec_floats;
    size_t *vec_at;    /* by tensor: a 1-D tensor's offset in vec_snap */
    double *acc;       /* gossip_apply_terms's scratch */
    float *zero;       /* without own_terms: where a term is written */
    float **zptr;      /* tensor pointers into zero */
    float *rows;       /* own_terms: the rows term_add rebuilds */
    size_t rows_cap;   /* floats */
    float *theirs;     /* host: an aligned copy of a neighbour's message */
    float *theirs_dev; /* backend: its 1-D part */
    size_t theirs_cap;
    const struct rumor_gossip_msg **slot;
};

static bool
s_is_vector(const struct rumor_tensor *t)
{
    return t->ndim < 2;
}

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct powergossip *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (g->opts.rank == 0 || g->opts.rank > RUMOR_LOWRANK_MAX_RANK ||
        g->opts.iterations == 0 ||
        !(g->opts.gamma > 0 && g->opts.gamma <= RUMOR_GOSSIP_GAMMA_MAX)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "powergossip: needs 1 <= rank <= %d, iterations >= 1 "
                       "and gamma in (0, 2]",
                       RUMOR_LOWRANK_MAX_RANK);
        return RUMOR_EINVAL;
    }
    s->shapes = calloc(g->tensor_count, sizeof *s->shapes);
    s->params = calloc(g->tensor_count, sizeof *s->params);
    s->vec_at = calloc(g->tensor_count + 1, sizeof *s->vec_at);
    s->peer = calloc(g->nodes, sizeof *s->peer);
    s->slot = malloc(g->nodes * sizeof *s->slot);
    if (!s->shapes || !s->params || !s->vec_at || !s->peer || !s->slot)
        return RUMOR_ENOMEM;
    for (size_t t = 0; t < g->tensor_count; t++) {
        s->shapes[t].ndim = g->tensors[t].ndim;
        memcpy(s->shapes[t].dims,
               g->tensors[t].shape,
               g->tensors[t].ndim * sizeof(size_t));
        s->params[t] = g->tensors[t].data;
        s->vec_at[t] = s->vec_floats;
        if (s_is_vector(&g->tensors[t]))
            s->vec_floats += rumor_tensor_numel(&g->tensors[t]);
    }
    s->vec_snap = malloc((s->vec_floats + 1) * sizeof(float));
    s->zptr = calloc(g->tensor_count + 1, sizeof *s->zptr);
    if (!s->vec_snap || !s->zptr)
        return RUMOR_ENOMEM;
    size_t vec_bytes = s->vec_floats * sizeof(float);
    rumor_err rc = g->be->alloc(vec_bytes, (void **)&s->vec_dev);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(vec_bytes, (void **)&s->theirs_dev);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(gossip_apply_bytes(g), (void **)&s->acc);
    /* On host memory a term is kept as its factors and rebuilt a few
     * rows at a time where it is applied (s_term_add): no model-sized
     * term is written or read. */
    g->own_terms = g->be->host_memory;
    if (rc == RUMOR_OK && !g->own_terms)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->zero);
    if (rc != RUMOR_OK || g->own_terms)
        return rc;
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        s->zptr[t] = s->zero + base;
        base += rumor_tensor_numel(&g->tensors[t]);
    }
    return RUMOR_OK;
}

static void
s_peer_free(struct pg_peer *p)
{
    rumor_lowrank_edge_destroy(&p->edge);
    free(p->msg);
    free(p->committed);
    free(p->cand);
    free(p->term);
    free(p->term_vec);
    *p = (struct pg_peer){0};
}

static void
s_free(rumor_gossip *g)
{
    struct powergossip *s = g->state;
    if (s == NULL)
        return;
    for (size_t i = 0; s->peer != NULL && i < g->nodes; i++)
        s_peer_free(&s->peer[i]);
    free(s->shapes);
    free(s->params);
    free(s->vec_at);
    free(s->rows);
    free(s->peer);
    free(s->slot);
    free(s->vec_snap);
    g->be->release(s->vec_dev);
    g->be->release(s->theirs_dev);
    g->be->release(s->acc);
    g->be->release(s->zero);
    free(s->zptr);
    free(s->theirs);
    free(s);
    g->state = NULL;
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    (void)step;
    return g->opts.iterations;
}

static rumor_err
s_peer(rumor_gossip *g, uint32_t id, struct pg_peer **out)
{
    struct powergossip *s = g->state;
    struct pg_peer *p = &s->peer[id];
    *out = p;
    if (p->edge != NULL)
        return RUMOR_OK;
    struct rumor_lowrank_edge_opts opts;
    rumor_lowrank_edge_opts_default(&opts);
    opts.self_id = g->self;
    opts.peer_id = id;
    opts.seed = g->opts.seed;
    opts.rank = g->opts.rank;
    opts.warm_start = g->opts.warm_start;
    opts.want_cuda = g->be->cuda;
    rumor_err rc =
        rumor_lowrank_edge_new(&p->edge, s->shapes, g->tensor_count, &opts);
    if (rc == RUMOR_OK && g->be->cuda &&
        rumor_lowrank_edge_device(p->edge) != RUMOR_DEVICE_CUDA)
        rc = RUMOR_ENOTSUP; /* the cuda backend failed: it logged why */
    if (rc != RUMOR_OK)
        return rc;
    size_t even = rumor_lowrank_edge_msg_floats(p->edge, 2);
    size_t odd = rumor_lowrank_edge_msg_floats(p->edge, 1);
    p->msg_cap = (even > odd ? even : odd) + s->vec_floats;
    p->msg = malloc((p->msg_cap + 1) * sizeof(float));
    p->state_n = rumor_lowrank_edge_state_floats(p->edge);
    p->committed = malloc((p->state_n + 1) * sizeof(float));
    p->cand = malloc((p->state_n + 1) * sizeof(float));
    if (g->own_terms) {
        p->term = malloc((p->state_n + 1) * sizeof(float));
        p->term_vec = malloc((s->vec_floats + 1) * sizeof(double));
    }
    if (!p->msg || !p->committed || !p->cand ||
        (g->own_terms && (!p->term || !p->term_vec)))
        return RUMOR_ENOMEM;
    if (p->msg_cap > s->theirs_cap) {
        float *th = realloc(s->theirs, (p->msg_cap + 1) * sizeof(float));
        if (th == NULL)
            return RUMOR_ENOMEM;
        s->theirs = th;
        s->theirs_cap = p->msg_cap;
    }
    return rumor_lowrank_edge_state_get(p->edge, p->committed);
}

/* Back to the committed factors: an open iteration (its message never
 * came) is closed by combining zeros and applying them to scratch. */
static rumor_err
s_restore(rumor_gossip *g, struct pg_peer *p)
{
    struct powergossip *s = g->state;
    rumor_err rc = RUMOR_OK;
    if (!p->dirty)
        return RUMOR_OK;
    if (p->open) {
        memset(s->theirs, 0, p->msg_cap * sizeof(float));
        rc = rumor_lowrank_edge_combine(p->edge, s->theirs);
        if (rc == RUMOR_OK)
            rc = rumor_lowrank_edge_close(p->edge);
        p->open = false;
    }
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_edge_state_set(p->edge, p->committed);
    p->dirty = rc != RUMOR_OK;
    return rc;
}

/* The 1-D tensors, packed in tensor order, into the host payload and
 * (a device model) a copy on the device, which the differences read. */
static rumor_err
s_vectors_get(rumor_gossip *g)
{
    struct powergossip *s = g->state;
    rumor_err rc = RUMOR_OK;
    size_t at = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        if (!s_is_vector(&g->tensors[t]))
            continue;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        const float *x = g->tensors[t].data;
        size_t bytes = n * sizeof(float);
        rc = gossip_mem_copy(g, s->vec_snap + at, x, bytes, GOSSIP_TO_HOST);
        if (rc == RUMOR_OK)
            rc =
                gossip_mem_copy(g, s->vec_dev + at, x, bytes, GOSSIP_ON_DEVICE);
        at += n;
    }
    return rc;
}

/* The factor bytes the cuda low-rank backend copies for an edge's
 * message: down in _product, up in _combine. */
static void
s_count_factors(rumor_gossip *g, size_t floats, bool up)
{
    if (g->be->cuda)
        *(up ? &g->pcie_h2d : &g->pcie_d2h) += floats * sizeof(float);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    struct powergossip *s = g->state;
    (void)round; /* each edge counts its own iterations */
    size_t phase = rumor_topology_phase_at(g->topo, step), count = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &count, NULL);
    rumor_err rc = gossip_out_start(g, count);
    if (rc == RUMOR_OK)
        rc = s_vectors_get(g);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        struct pg_peer *p = NULL;
        if (gossip_edge_busy(g, nbr[k]))
            continue; /* its last iteration's verdict is not known yet */
        rc = s_peer(g, nbr[k], &p);
        if (rc == RUMOR_OK)
            rc = s_restore(g, p);
        if (rc != RUMOR_OK)
            break;
        uint64_t t = p->iters + 1;
        size_t lr = rumor_lowrank_edge_msg_floats(p->edge, t);
        rc = rumor_lowrank_edge_product(p->edge, s->params, t, p->msg);
        s_count_factors(g, lr, false);
        p->open = true;
        p->dirty = true;
        p->open_t = t;
        memcpy(p->msg + lr, s->vec_snap, s->vec_floats * sizeof(float));
        if (rc == RUMOR_OK) /* sent while the next edge's product runs */
            gossip_out_push(g,
                            (struct rumor_gossip_msg){nbr[k],
                                                      (const uint8_t *)p->msg,
                                                      (lr + s->vec_floats) *
                                                          sizeof(float)});
    }
    return rc;
}

/* Checks every message of the round before anything changes. */
static rumor_err
s_check_round(rumor_gossip *g, const uint32_t *nbr, size_t peers)
{
    struct powergossip *s = g->state;
    for (size_t k = 0; k < peers; k++) {
        struct pg_peer *p = NULL;
        rumor_err rc = s_peer(g, nbr[k], &p);
        if (rc != RUMOR_OK)
            return rc;
        size_t want = (rumor_lowrank_edge_msg_floats(p->edge, p->iters + 1) +
                       s->vec_floats) *
                      sizeof(float);
        if (s->slot[k]->len != want) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip powergossip: node %u rejected the message of "
                      "%u: %zu bytes, expected %zu",
                      g->self,
                      nbr[k],
                      s->slot[k]->len,
                      want);
            return RUMOR_EPROTO;
        }
        rc = gossip_check_finite(g, s->slot[k]);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* d = the applied products (in s->zero) on the matrices, theirs - own on
 * the 1-D tensors (theirs: the message's 1-D part, host), tensor by
 * tensor: the term as numel doubles (a device's model). */
static rumor_err
s_term_write(rumor_gossip *g, const float *theirs, double *d)
{
    struct powergossip *s = g->state;
    rumor_err rc = gossip_mem_copy(g,
                                   s->theirs_dev,
                                   theirs,
                                   s->vec_floats * sizeof(float),
                                   GOSSIP_TO_DEVICE);
    size_t at = 0, base = 0;
    double unused = 0;
    for (size_t ti = 0; ti < g->tensor_count && rc == RUMOR_OK; ti++) {
        size_t n = rumor_tensor_numel(&g->tensors[ti]);
        if (s_is_vector(&g->tensors[ti])) {
            rc = gossip_term_diff(g,
                                  d + base,
                                  s->theirs_dev + at,
                                  s->vec_dev + at,
                                  n,
                                  &unused);
            at += n;
        } else {
            rc =
                gossip_term_diff(g, d + base, s->zero + base, NULL, n, &unused);
        }
        base += n;
    }
    return rc;
}

/* The norm of the edge's term from its factors (p->cand) and the 1-D
 * differences theirs - own, which go to vec where it is not NULL: no
 * pass over the model, and the same bits wherever the model lives. */
static double
s_term_norm(const struct powergossip *s,
            const struct pg_peer *p,
            const float *theirs,
            double *vec)
{
    double sq = 0;
    for (size_t e = 0; e < s->vec_floats; e++) {
        double d = (double)theirs[e] - (double)s->vec_snap[e];
        if (vec != NULL)
            vec[e] = d;
        sq += d * d;
    }
    return sqrt(sq + rumor_lowrank_edge_sq_norm(p->edge, p->cand));
}

/* The term of the edge to m->peer in its next iteration, sign p q^T on
 * the matrices and x_j - x_i on the 1-D tensors, and its norm: kept as
 * the factors and differences (own_terms, d NULL) or written into d
 * (numel doubles, unweighted); its factors are kept as the candidate. */
static rumor_err
s_edge_term(rumor_gossip *g,
            struct pg_peer *p,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    struct powergossip *s = g->state;
    uint64_t t = p->iters + 1;
    size_t lr = rumor_lowrank_edge_msg_floats(p->edge, t);
    if (!p->open || p->open_t != t)
        return RUMOR_EINVAL; /* nothing was sent to it this iteration */
    if (m->len != (lr + s->vec_floats) * sizeof(float))
        return RUMOR_EPROTO;
    /* The message may be unaligned (network buffer): copy it. */
    memcpy(s->theirs, m->data, (lr + s->vec_floats) * sizeof(float));
    for (size_t e = 0; e < lr + s->vec_floats; e++)
        if (!isfinite(s->theirs[e]))
            return RUMOR_ENUMERIC;
    rumor_err rc = rumor_lowrank_edge_combine(p->edge, s->theirs);
    s_count_factors(g, lr, true);
    /* a store: the matrices' part of zero is not cleared first */
    if (rc == RUMOR_OK)
        rc = g->own_terms ? rumor_lowrank_edge_close(p->edge)
                          : rumor_lowrank_edge_write(p->edge, s->zptr, 1.0f);
    p->open = false;
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_edge_state_get(p->edge, p->cand);
    if (rc != RUMOR_OK)
        return rc;
    *norm = s_term_norm(s, p, s->theirs + lr, p->term_vec);
    if (!g->own_terms)
        return s_term_write(g, s->theirs + lr, d);
    memcpy(p->term, p->cand, p->state_n * sizeof(float));
    p->term_made = true;
    return RUMOR_OK;
}

/* term_add: the 1-D differences as kept; a matrix's elements rebuilt
 * from the factors, the rows that cover them at a time. */
static rumor_err
s_term_add(rumor_gossip *g,
           uint32_t peer,
           size_t t,
           size_t at,
           size_t n,
           double c,
           double *acc)
{
    struct powergossip *s = g->state;
    struct pg_peer *p = &s->peer[peer];
    const struct rumor_tensor *x = &g->tensors[t];
    if (!p->term_made)
        return RUMOR_EINVAL;
    if (s_is_vector(x))
        return g->be->axpy(acc, c, p->term_vec + s->vec_at[t] + at, n);
    size_t cols = rumor_tensor_numel(x) / x->shape[0];
    size_t row = at / cols, rows = (at + n + cols - 1) / cols - row;
    if (rows * cols > s->rows_cap) {
        float *r = realloc(s->rows, rows * cols * sizeof(float));
        if (r == NULL)
            return RUMOR_ENOMEM;
        s->rows = r;
        s->rows_cap = rows * cols;
    }
    rumor_err rc =
        rumor_lowrank_edge_rows(p->edge, p->term, t, row, rows, s->rows);
    if (rc == RUMOR_OK)
        gossip_ref_axpy_f(acc, c, s->rows + (at - row * cols), n);
    return rc;
}

static void
s_edge_commit(rumor_gossip *g, uint32_t peer, uint64_t step)
{
    (void)step;
    struct pg_peer *p = &((struct powergossip *)g->state)->peer[peer];
    float *f = p->committed;
    p->committed = p->cand;
    p->cand = f;
    p->dirty = false; /* the live factors are the candidate's */
    p->iters++;
}

static void
s_edge_reset(rumor_gossip *g, uint32_t peer)
{
    s_peer_free(&((struct powergossip *)g->state)->peer[peer]);
}

static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    struct pg_peer *p = &((struct powergossip *)g->state)->peer[m->peer];
    (void)step; /* the edge's own count says which iteration it is */
    if (p->edge == NULL)
        return RUMOR_EINVAL;
    return s_edge_term(g, p, m, d, norm);
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    struct powergossip *s = g->state;
    (void)round;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    /* Lengths differ per edge, so sizes are checked in s_check_round. */
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < peers; k++)
        s->slot[k] = NULL;
    for (size_t m = 0; m < count && rc == RUMOR_OK; m++) {
        size_t k = 0;
        while (k < peers && nbr[k] != msgs[m].peer)
            k++;
        if (k == peers || s->slot[k] != NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip powergossip: node %u: unexpected or duplicate "
                      "message from %u",
                      g->self,
                      msgs[m].peer);
            rc = RUMOR_EPROTO;
        } else {
            s->slot[k] = &msgs[m];
        }
    }
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        if (s->slot[k] == NULL)
            rc = RUMOR_ETIMEDOUT;
    if (rc == RUMOR_OK)
        rc = s_check_round(g, nbr, peers);
    if (rc != RUMOR_OK)
        return rc;
    /* The same doubles, order and single rounding as the ledger's commit
     * of a loss-free step (gossip/edges.c). */
    /* each low-rank difference clipped: robust mixing */
    struct gossip_terms terms;
    rc = gossip_robust_mix(g, step, s->slot, w, peers, &terms);
    if (rc == RUMOR_OK)
        rc = gossip_apply_terms(g, s->acc, NULL, &terms);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++)
        s_edge_commit(g, nbr[k], step);
    return rc;
}

/* Between steps each edge carries its factors p and q (the warm start;
 * kept without it too, where the next iteration draws its own) and its
 * iteration count (the parity and, without warm start, the fresh
 * factor's stream of its next iteration). Edges
 * appear the first time a peer does, so the state lists the ones that
 * exist: u32 magic, u32 version, u32 count, then per edge u32 peer
 * (ascending), u64 iterations, u64 floats, floats. Version 1 had neither
 * magic nor counts (the parity came from the step, which a time-varying
 * graph breaks); its first word, the count, is at most the node count,
 * so it cannot be taken for the magic. */
#define PG_STATE_MAGIC   0x54534750u /* "PGST" as little-endian bytes */
#define PG_STATE_VERSION 2u

static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct powergossip *s = g->state;
    uint32_t count = 0;
    for (size_t i = 0; i < g->nodes; i++)
        count += s->peer[i].edge != NULL;
    rumor_err rc = gossip_write_u32(out, PG_STATE_MAGIC);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, PG_STATE_VERSION);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, count);
    for (size_t i = 0; i < g->nodes && rc == RUMOR_OK; i++) {
        const rumor_lowrank_edge *edge = s->peer[i].edge;
        if (edge == NULL)
            continue;
        /* the committed factors and count: an iteration still open or
         * waiting for its verdict does not count yet */
        size_t n = rumor_lowrank_edge_state_floats(edge);
        rc = gossip_write_u32(out, (uint32_t)i);
        if (rc == RUMOR_OK)
            rc = gossip_write_u64(out, s->peer[i].iters);
        if (rc == RUMOR_OK)
            rc = gossip_write_u64(out, n);
        if (rc == RUMOR_OK)
            rc = gossip_write_f32(out, s->peer[i].committed, n);
    }
    return rc;
}

/* Floats in the state of the edge to id: of the edge, or (in a check,
 * which must not change the instance) of a scratch one. */
static rumor_err
s_edge_floats(rumor_gossip *g, uint32_t id, size_t *n)
{
    const struct powergossip *s = g->state;
    if (s->peer[id].edge != NULL) {
        *n = rumor_lowrank_edge_state_floats(s->peer[id].edge);
        return RUMOR_OK;
    }
    struct rumor_lowrank_edge_opts opts;
    rumor_lowrank_edge_opts_default(&opts);
    opts.self_id = g->self;
    opts.peer_id = id;
    opts.rank = g->opts.rank;
    rumor_lowrank_edge *edge = NULL;
    rumor_err rc =
        rumor_lowrank_edge_new(&edge, s->shapes, g->tensor_count, &opts);
    if (rc == RUMOR_OK)
        *n = rumor_lowrank_edge_state_floats(edge);
    rumor_lowrank_edge_destroy(&edge);
    return rc;
}

/* One edge of the state: checked, or set (the edge is made from the seed
 * first if it does not exist yet, which is what its first use would do). */
static rumor_err
s_state_edge(rumor_gossip *g, struct gossip_reader *r, bool apply, long *last)
{
    uint32_t id = gossip_read_u32(r);
    if (r->err == RUMOR_OK &&
        (id >= g->nodes || id == g->self || (long)id <= *last))
        gossip_reader_fail(r, RUMOR_EPROTO, "a bad or repeated edge peer");
    if (r->err != RUMOR_OK)
        return r->err;
    *last = (long)id;
    uint64_t iters = gossip_read_u64(r);
    if (r->err == RUMOR_OK && iters == UINT64_MAX)
        gossip_reader_fail(r, RUMOR_EPROTO, "an iteration count past the end");
    if (r->err != RUMOR_OK)
        return r->err;
    size_t n = 0;
    rumor_err rc = s_edge_floats(g, id, &n);
    if (rc != RUMOR_OK)
        return rc;
    gossip_read_len(r, n, "an edge of another size");
    if (!apply) {
        gossip_read_f32(r, NULL, n);
        return r->err;
    }
    struct pg_peer *p = NULL;
    rc = s_peer(g, id, &p);
    if (rc != RUMOR_OK)
        return rc;
    float *f = malloc((n + 1) * sizeof *f);
    if (f == NULL)
        return RUMOR_ENOMEM;
    gossip_read_f32(r, f, n);
    rc = r->err == RUMOR_OK ? rumor_lowrank_edge_state_set(p->edge, f) : r->err;
    if (rc == RUMOR_OK) {
        memcpy(p->committed, f, n * sizeof(float));
        p->iters = iters;
    }
    free(f);
    return rc;
}

static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    /* no ring: rumor_gossip_state_adopt refuses it before */
    bool apply = mode == GOSSIP_STATE_LOAD;
    struct powergossip *s = g->state;
    uint32_t magic = gossip_read_u32(r);
    if (r->err == RUMOR_OK && magic != PG_STATE_MAGIC)
        gossip_reader_fail(r,
                           RUMOR_EPROTO,
                           magic <= g->nodes
                               ? "powergossip state version 1 (no per-edge "
                                 "iteration counts), refused: version 2 "
                                 "is needed; resume with the build that "
                                 "wrote it or start over"
                               : "not a powergossip state (magic)");
    if (gossip_read_u32(r) != PG_STATE_VERSION && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "an unknown powergossip version");
    uint32_t count = gossip_read_u32(r);
    if (r->err == RUMOR_OK && count > g->nodes)
        gossip_reader_fail(r, RUMOR_EPROTO, "more edges than nodes");
    if (apply) /* edges the state does not list start over from the seed */
        for (size_t i = 0; i < g->nodes; i++)
            s_peer_free(&s->peer[i]);
    long last = -1;
    rumor_err rc = r->err;
    for (uint32_t k = 0; k < count && rc == RUMOR_OK; k++)
        rc = s_state_edge(g, r, apply, &last);
    return rc;
}

const struct gossip_algo_i gossip_powergossip = {
    .name = "powergossip",
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .edge_diff = s_edge_diff,
    .edge_commit = s_edge_commit,
    .edge_reset = s_edge_reset,
    .term_add = s_term_add,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
