/*
 * PowerSGD over the ring all-reduce (Vogels, Karimireddy and Jaggi,
 * NeurIPS 2019; PyTorch powerSGD_hook.py). The compressor and its error
 * feedback live in lowrank/ (rumor_lowrank_psgd_*); this file runs its two
 * exchange points over gossip/ring.c:
 *   phase A (2 (n - 1) rounds): [P | the uncompressed tensors] summed;
 *           P is then scaled as the compressor asks, the uncompressed part
 *           divided by n (one reduction for both saves a round trip);
 *   phase B (2 (n - 1) rounds): Q averaged; then every node writes the
 *           same approximation P Q^T into its tensors.
 * Every node ends a step with the same model bits, as data-parallel
 * PowerSGD does; what the approximation misses stays in each node's error
 * memory. The model is written only at the end of phase B, so a failed
 * round leaves it unchanged. Needs at least 2 nodes.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

struct powersgd {
    rumor_lowrank_psgd *psgd;
    struct gossip_ring ring;
    float **data;      /* tensor data pointers, for the compressor */
    float *held;       /* uncompressed tensors' average, until the end */
    size_t unc_floats; /* floats in the uncompressed tensors */
    struct rumor_lowrank_xchg x; /* the exchange in flight */
    bool active;                 /* this step is compressed */
};

static bool
s_compressed(const rumor_gossip *g, size_t t)
{
    const struct powersgd *s = g->state;
    return rumor_lowrank_psgd_compressed(s->psgd, t);
}

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct powersgd *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (g->nodes < 2 || g->opts.rank == 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "powersgd needs 2 or more nodes and "
                       "rank >= 1");
        return RUMOR_EINVAL;
    }
    struct rumor_lowrank_shape *shapes =
        calloc(g->tensor_count, sizeof *shapes);
    s->data = calloc(g->tensor_count, sizeof *s->data);
    if (shapes == NULL || s->data == NULL) {
        free(shapes);
        return RUMOR_ENOMEM;
    }
    for (size_t t = 0; t < g->tensor_count; t++) {
        shapes[t].ndim = g->tensors[t].ndim;
        memcpy(shapes[t].dims,
               g->tensors[t].shape,
               g->tensors[t].ndim * sizeof(size_t));
        s->data[t] = g->tensors[t].data;
    }
    struct rumor_lowrank_psgd_opts opts;
    rumor_lowrank_psgd_opts_default(&opts);
    opts.rank = g->opts.rank;
    opts.seed = g->opts.seed;
    rumor_err rc =
        rumor_lowrank_psgd_new(&s->psgd, shapes, g->tensor_count, &opts);
    free(shapes);
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag, "", 0, 0, "powersgd: %s", rumor_strerror(rc));
        return rc;
    }
    for (size_t t = 0; t < g->tensor_count; t++)
        if (!s_compressed(g, t))
            s->unc_floats += rumor_tensor_numel(&g->tensors[t]);
    s->held = malloc((s->unc_floats + 1) * sizeof(float));
    if (s->held == NULL)
        return RUMOR_ENOMEM;
    return gossip_ring_init(&s->ring, g->self, g->nodes, g->numel);
}

static void
s_free(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    if (s == NULL)
        return;
    rumor_lowrank_psgd_destroy(&s->psgd);
    gossip_ring_free(&s->ring);
    free(s->data);
    free(s->held);
    free(s);
    g->state = NULL;
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    (void)step;
    const struct powersgd *s = g->state;
    uint32_t one = gossip_ring_rounds(&s->ring);
    return rumor_lowrank_psgd_active(s->psgd) ? 2 * one : one;
}

/* Makes the ring hold len floats (P or Q may exceed the model size for
 * tiny tensors at high rank). */
static rumor_err
s_ring_fit(rumor_gossip *g, size_t len)
{
    struct powersgd *s = g->state;
    if (len <= s->ring.cap)
        return RUMOR_OK;
    gossip_ring_free(&s->ring);
    return gossip_ring_init(&s->ring, g->self, g->nodes, len);
}

/* Copies the uncompressed tensors to or from a packed buffer. */
static void
s_unc_copy(rumor_gossip *g, float *packed, bool to_model)
{
    for (size_t t = 0; t < g->tensor_count; t++) {
        if (s_compressed(g, t))
            continue;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        if (to_model)
            memcpy(g->tensors[t].data, packed, n * sizeof(float));
        else
            memcpy(packed, g->tensors[t].data, n * sizeof(float));
        packed += n;
    }
}

static rumor_err
s_start_step(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    s->active = rumor_lowrank_psgd_active(s->psgd);
    if (!s->active) {
        gossip_ring_start(&s->ring, g->numel, true);
        gossip_flat_get(g, 0, g->numel, s->ring.work);
        return RUMOR_OK;
    }
    rumor_err rc = rumor_lowrank_psgd_begin(s->psgd, s->data, &s->x);
    if (rc == RUMOR_OK)
        rc = s_ring_fit(g, s->x.floats + s->unc_floats);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(s->ring.work, s->x.data, s->x.floats * sizeof(float));
    s_unc_copy(g, s->ring.work + s->x.floats, false);
    gossip_ring_start(&s->ring, s->x.floats + s->unc_floats, false);
    return RUMOR_OK;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)step;
    struct powersgd *s = g->state;
    rumor_err rc = round == 0 ? s_start_step(g) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_out_reserve(g, 1);
    if (rc == RUMOR_OK)
        gossip_ring_emit(&s->ring,
                         round % gossip_ring_rounds(&s->ring),
                         &g->out[0]);
    return rc;
}

/* Phase A is done: keep the uncompressed average, hand P back, get Q. */
static rumor_err
s_phase_a_done(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    float n = (float)g->nodes;
    float *work = s->ring.work;
    for (size_t e = 0; e < s->x.floats; e++)
        s->x.data[e] = s->x.average ? work[e] / n : work[e];
    for (size_t e = 0; e < s->unc_floats; e++)
        s->held[e] = work[s->x.floats + e] / n;
    bool done = false;
    rumor_err rc = rumor_lowrank_psgd_next(s->psgd, &s->x, &done);
    if (rc == RUMOR_OK && done)
        rc = RUMOR_EBACKEND; /* the hook's variant has two exchanges */
    if (rc == RUMOR_OK)
        rc = s_ring_fit(g, s->x.floats);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(s->ring.work, s->x.data, s->x.floats * sizeof(float));
    gossip_ring_start(&s->ring, s->x.floats, s->x.average);
    return RUMOR_OK;
}

static rumor_err
s_phase_b_done(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    memcpy(s->x.data, s->ring.work, s->x.floats * sizeof(float));
    bool done = false;
    rumor_err rc = rumor_lowrank_psgd_next(s->psgd, &s->x, &done);
    if (rc == RUMOR_OK && !done)
        rc = RUMOR_EBACKEND;
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_psgd_end(s->psgd, s->data);
    if (rc == RUMOR_OK)
        s_unc_copy(g, s->held, true);
    return rc;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)step;
    struct powersgd *s = g->state;
    uint32_t one = gossip_ring_rounds(&s->ring);
    rumor_err rc = gossip_ring_absorb(g, &s->ring, round % one, msgs, count);
    if (rc != RUMOR_OK || round % one != one - 1)
        return rc;
    if (!s->active) {
        gossip_flat_put(g, 0, g->numel, s->ring.work);
        rumor_lowrank_psgd_skip(s->psgd);
        return RUMOR_OK;
    }
    return round < one ? s_phase_a_done(g) : s_phase_b_done(g);
}

/* Between steps the compressor carries its step counter, the warm-start
 * Q (and P, which only the one-sided variant reuses) and one error memory
 * per compressed tensor: u64 step; u64 q floats (0: none yet), Q; u64 p
 * floats, P; then per compressed tensor u64 floats (0: no memory yet) and
 * the memory. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct powersgd *s = g->state;
    size_t qf = rumor_lowrank_psgd_q_floats(s->psgd);
    size_t pf = rumor_lowrank_psgd_p_floats(s->psgd);
    size_t most = qf > pf ? qf : pf;
    for (size_t t = 0; t < g->tensor_count; t++)
        if (rumor_tensor_numel(&g->tensors[t]) > most)
            most = rumor_tensor_numel(&g->tensors[t]);
    float *f = malloc((most + 1) * sizeof *f);
    if (f == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = gossip_write_u64(out, rumor_lowrank_psgd_step(s->psgd));
    bool have_q = rumor_lowrank_psgd_q_get(s->psgd, f) == RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, have_q ? qf : 0);
    if (rc == RUMOR_OK && have_q)
        rc = gossip_write_f32(out, f, qf);
    bool have_p = have_q && rumor_lowrank_psgd_p_get(s->psgd, f) == RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, have_p ? pf : 0);
    if (rc == RUMOR_OK && have_p)
        rc = gossip_write_f32(out, f, pf);
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        if (!s_compressed(g, t))
            continue;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        bool have_e = rumor_lowrank_psgd_error_get(s->psgd, t, f) == RUMOR_OK;
        rc = gossip_write_u64(out, have_e ? n : 0);
        if (rc == RUMOR_OK && have_e)
            rc = gossip_write_f32(out, f, n);
    }
    free(f);
    return rc;
}

/* A block of floats that is either absent (length 0) or exactly n long;
 * with apply, set() takes it. */
static rumor_err
s_state_block(struct gossip_reader *r,
              size_t n,
              bool apply,
              rumor_lowrank_psgd *psgd,
              size_t t,
              rumor_err (*set)(rumor_lowrank_psgd *, size_t, const float *))
{
    uint64_t len = gossip_read_u64(r);
    if (r->err == RUMOR_OK && len != 0 && len != n)
        gossip_reader_fail(r, RUMOR_EPROTO, "a factor of another size");
    if (r->err != RUMOR_OK || len == 0)
        return r->err;
    if (!apply) {
        gossip_read_f32(r, NULL, n);
        return r->err;
    }
    float *f = malloc((n + 1) * sizeof *f);
    if (f == NULL)
        return RUMOR_ENOMEM;
    gossip_read_f32(r, f, n);
    rumor_err rc = r->err == RUMOR_OK ? set(psgd, t, f) : r->err;
    free(f);
    return rc;
}

static rumor_err
s_set_q(rumor_lowrank_psgd *psgd, size_t t, const float *f)
{
    (void)t;
    return rumor_lowrank_psgd_q_set(psgd, f);
}

static rumor_err
s_set_p(rumor_lowrank_psgd *psgd, size_t t, const float *f)
{
    (void)t;
    return rumor_lowrank_psgd_p_set(psgd, f);
}

static rumor_err
s_state_load(rumor_gossip *g, struct gossip_reader *r, bool apply)
{
    struct powersgd *s = g->state;
    uint64_t step = gossip_read_u64(r);
    rumor_err rc = r->err;
    if (rc == RUMOR_OK && apply)
        rc = rumor_lowrank_psgd_step_set(s->psgd, step);
    if (rc == RUMOR_OK)
        rc = s_state_block(r,
                           rumor_lowrank_psgd_q_floats(s->psgd),
                           apply,
                           s->psgd,
                           0,
                           s_set_q);
    if (rc == RUMOR_OK)
        rc = s_state_block(r,
                           rumor_lowrank_psgd_p_floats(s->psgd),
                           apply,
                           s->psgd,
                           0,
                           s_set_p);
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++)
        if (s_compressed(g, t))
            rc = s_state_block(r,
                               rumor_tensor_numel(&g->tensors[t]),
                               apply,
                               s->psgd,
                               t,
                               rumor_lowrank_psgd_error_set);
    return rc;
}

const struct gossip_algo_i gossip_powersgd = {
    .name = "powersgd",
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = gossip_expected_prev,
    .uses_ring = gossip_always_ring,
    .absorb = s_absorb,
    .state_save = s_state_save,
    .state_load = s_state_load,
};
