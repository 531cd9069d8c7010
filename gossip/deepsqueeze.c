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
 * The mixing is applied in edge form, x_i += gamma sum_j w_ij (C(v_j) -
 * C(v_i)), summed in double and rounded once: each edge's term is exactly
 * minus the other end's, and nothing but the node's own error delta_i is
 * carried (updated when v_i is encoded), so a neighbour can be skipped as
 * in D-PSGD (gossip/edges.c stages the terms; docs/reliability.md).
 * The error, the vectors the codec encodes and decodes and the mixing
 * live in the instance's backend memory (gossip/backend.h): on a model in
 * GPU memory only the payloads cross.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct deepsqueeze {
    struct gossip_packer pack;
    float *delta;    /* compression error, numel */
    double *ds, *cv; /* the absorb's scratch; own C(v) */
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
    rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->delta);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(gossip_apply_bytes(g), (void **)&s->ds);
    if (rc == RUMOR_OK)
        rc = g->be->alloc(g->numel * sizeof(double), (void **)&s->cv);
    return rc;
}

static void
s_free(rumor_gossip *g)
{
    struct deepsqueeze *s = g->state;
    if (s == NULL)
        return;
    gossip_codec_free(&s->pack, &s->slot);
    g->be->release(s->delta);
    g->be->release(s->ds);
    g->be->release(s->cv);
    free(s);
    g->state = NULL;
}

/* v = x + delta for tensor t. */
static rumor_err
s_fill(const rumor_gossip *g, size_t t, size_t base, float *out, void *arg)
{
    const struct deepsqueeze *s = arg;
    return g->be->add(out,
                      g->tensors[t].data,
                      s->delta + base,
                      rumor_tensor_numel(&g->tensors[t]));
}

/* delta = v - C(v), v = x + delta again (in the packer's scratch, free
 * once the message is encoded and staged). */
static rumor_err
s_error_update(rumor_gossip *g)
{
    struct deepsqueeze *s = g->state;
    rumor_err rc = RUMOR_OK;
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        float *v = s->pack.scratch;
        rc = g->be->add(v, g->tensors[t].data, s->delta + base, n);
        if (rc == RUMOR_OK)
            rc = g->be->sub_round(s->delta + base, v, s->cv + base, n);
        base += n;
    }
    return rc;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)round;
    struct deepsqueeze *s = g->state;
    rumor_err rc = gossip_packer_encode(&s->pack, g, step, s_fill, s);
    if (rc != RUMOR_OK)
        return rc; /* RUMOR_ENUMERIC: the model is no longer finite */
    /* own C(v), decoded from the bytes the neighbours get; the new error
     * delta = v - C(v) does not depend on who receives them */
    rc = g->be->zero(s->cv, g->numel * sizeof(double));
    if (rc == RUMOR_OK)
        rc = gossip_packer_stage(&s->pack,
                                 g,
                                 s->pack.buf,
                                 s->pack.len,
                                 1.0,
                                 s->cv);
    if (RUMOR_NEVER(rc != RUMOR_OK))
        return rc; /* own bytes always decode, or the codec has a bug */
    rc = s_error_update(g);
    return rc == RUMOR_OK
               ? gossip_out_to_neighbors(g, step, s->pack.buf, s->pack.len)
               : rc;
}

/* C(v_j) - C(v_i) for message m (edges.c stages w_ij times it). */
static rumor_err
s_edge_diff(rumor_gossip *g,
            uint64_t step,
            const struct rumor_gossip_msg *m,
            double *d,
            double *norm)
{
    (void)step;
    struct deepsqueeze *s = g->state;
    rumor_err rc = g->be->zero(d, g->numel * sizeof(double));
    if (rc == RUMOR_OK)
        rc = gossip_packer_stage(&s->pack, g, m->data, m->len, 1.0, d);
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip deepsqueeze: node %u rejected the message of %u: "
                  "%s",
                  g->self,
                  m->peer,
                  rumor_strerror(rc));
        return rc == RUMOR_ENUMERIC ? rc : RUMOR_EPROTO;
    }
    /* d - cv: d + cv * -1, the same rounding */
    rc = g->be->axpy(d, -1.0, s->cv, g->numel);
    return rc == RUMOR_OK ? g->be->norm(d, g->numel, norm) : rc;
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
    /* The same doubles, order and single rounding as the ledger's commit
     * of a loss-free step (gossip/edges.c). */
    struct gossip_terms terms;
    if (rc == RUMOR_OK) /* each C(v_j) - C(v_i) clipped: robust mixing */
        rc = gossip_robust_mix(g, step, s->slot, w, peers, &terms);
    return rc == RUMOR_OK ? gossip_apply_terms(g, s->ds, NULL, &terms) : rc;
}

/* Between steps DeepSqueeze carries its compression error delta (a
 * device's through host memory at save and load time). */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct deepsqueeze *s = g->state;
    if (g->be->host_memory)
        return gossip_write_f32(out, s->delta, g->numel);
    size_t bytes = g->numel * sizeof(float);
    float *host = malloc(bytes + 1);
    rumor_err rc = host != NULL
                       ? g->be->copy(host, s->delta, bytes, GOSSIP_TO_HOST)
                       : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, host, g->numel);
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
    struct deepsqueeze *s = g->state;
    if (!apply || g->be->host_memory) {
        gossip_read_f32(r, apply ? s->delta : NULL, g->numel);
        return r->err;
    }
    size_t bytes = g->numel * sizeof(float);
    float *host = malloc(bytes + 1);
    if (host == NULL)
        return RUMOR_ENOMEM;
    gossip_read_f32(r, host, g->numel);
    rumor_err rc = r->err == RUMOR_OK
                       ? g->be->copy(s->delta, host, bytes, GOSSIP_TO_DEVICE)
                       : r->err;
    free(host);
    return rc;
}

static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    gossip_packer_pcie(&((const struct deepsqueeze *)g->state)->pack, h2d, d2h);
}

const struct gossip_algo_i gossip_deepsqueeze = {
    .name = "deepsqueeze",
    .pcie = s_pcie,
    .init = s_init,
    .free = s_free,
    .rounds = gossip_one_round,
    .emit = s_emit,
    .expected = gossip_expected_neighbors,
    .absorb = s_absorb,
    .edge_diff = s_edge_diff,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
