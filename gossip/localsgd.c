/*
 * Local SGD / periodic averaging (Stich, ICLR 2019; Lin et al., "Don't use
 * large mini-batches, use local SGD", ICLR 2020): nodes train alone for H
 * steps, then synchronize. Three ways to synchronize:
 *   - exact: ring all-reduce of the models (an inner "allreduce");
 *   - k rounds of plain gossip (an inner "dpsgd"), for large rings;
 *   - exact, with the delta since the last sync compressed by any codec
 *     with error feedback (the compressed payloads of all nodes travel the
 *     ring in an all-gather; every node decodes them in node order, so all
 *     end with the same bits).
 * With exact averaging an outer optimizer may act on the averaged delta
 * d = anchor - mean(x): v = mu v + d; x = anchor - lr (d + mu v), which is
 * DiLoCo's outer Nesterov step (Douillard et al., 2023); lr = 1, mu = 0 is
 * plain averaging. The anchor is the model of the last sync, identical on
 * every node; the first sync averages the models themselves to make it,
 * so nodes that start from different models work too.
 *
 * Step-ahead error feedback (SAEF, Xu, Huo and Huang, AAAI 2021) on the
 * compressed path: the error e this node still owes is pending in the
 * network's virtual model, so rumor_gossip_step_ahead moves the model to
 * x - alpha e before the gradient is taken, and the sync sends
 * Delta = (anchor - x) + (1 - alpha) e = e + (local update), the same
 * Delta for every alpha (alpha 0: plain EF; 1: SAEF's x_{t+1/2}). The
 * memory is compress/'s "saef" kind, which keeps e = Delta - C(Delta).
 * opts.ef picks another memory for the delta (ef, ef-decay, dgc: the
 * memory adds its own residual, so nothing is added here; look-ahead
 * needs saef, whose e is what the network still owes).
 * The paper's e_bar is the average error of all nodes. With saef_scope
 * "neighbourhood" (saef.c) each sync ends with an extra round sending
 * C(e) to the topology's neighbours, and the look-ahead is
 * alpha * sum_j w_ij e_j; then Delta = anchor - x - alpha e_bar + e,
 * still e + the local update. With "self" each node uses its own e; the
 * mean of the nodes' look-ahead points is anchor - mean(e) either way
 * (W doubly stochastic), the neighbourhood form spreads them less.
 *
 * Exact averaging runs over the instance's ring (rumor_gossip_members_set):
 * the mixer and the all-gather use its members, the mean divides by their
 * count, and the error round reaches only neighbours that are members. A
 * lone member's sync has no round and changes nothing (anchor, memory and
 * outer momentum stay as they were).
 */
#include "gossip/gossip_impl.h"
#include "gossip/saef.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct localsgd {
    rumor_gossip *mixer; /* allreduce or dpsgd on the same model */
    rumor_codec *codec;  /* NULL: deltas go uncompressed */
    rumor_ef *ef;
    float *anchor, *x, *velocity, *acc; /* flat, numel floats each */
    bool have_anchor;
    struct gossip_gather gather; /* codec path: every node's payload */
    bool compressed_sync;        /* this sync uses the codec path */
    float ahead;                 /* alpha of the look-ahead applied since the
                                    last sync (0: none) */
    /* the neighbourhood form (saef.c): the exchange of the errors, the
     * look-ahead alpha e_bar applied since the last sync (shift), and
     * whether it is applied (instead of ahead) */
    struct gossip_saef saef;
    float *shift;
    bool ahead_nbr;
};

static bool
s_outer(const rumor_gossip *g)
{
    return g->opts.outer_lr != 1.0 || g->opts.outer_momentum != 0.0;
}

/* The memory of the delta: opts.ef, saef by default. */
static const char *
s_ef_spec(const rumor_gossip *g)
{
    return g->opts.ef[0] != '\0' ? g->opts.ef : "saef";
}

/* saef leaves it to the caller to add the error into Delta. */
static bool
s_saef(const rumor_gossip *g)
{
    return strcmp(s_ef_spec(g), "saef") == 0;
}

static rumor_err
s_check_opts(const rumor_gossip *g, struct rumor_diag *diag)
{
    const struct rumor_gossip_opts *o = &g->opts;
    const char *why = NULL;
    if (o->period == 0)
        why = "period must be at least 1";
    else if (o->gossip_rounds > 0 && (o->delta_codec[0] || s_outer(g)))
        why = "a compressed delta and an outer step need exact averaging "
              "(gossip_rounds 0)";
    else if (!(o->ef_alpha >= 0 && o->ef_alpha <= 1))
        why = "ef_alpha must be in [0, 1]";
    else if (o->ef_alpha > 0 && o->delta_codec[0] == '\0')
        why = "ef_alpha needs a delta_codec (error feedback)";
    else if (o->ef_alpha > 0 && !s_saef(g))
        why = "ef_alpha (the look-ahead) needs ef saef";
    else if (!(o->outer_lr > 0 && o->outer_lr <= 10) ||
             !(o->outer_momentum >= 0 && o->outer_momentum < 1))
        why = "needs 0 < outer_lr <= 10 and 0 <= outer_momentum < 1";
    else if (g->nodes < 2 && o->gossip_rounds == 0)
        why = "exact averaging needs 2 or more nodes";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag, "", 0, 0, "localsgd: %s", why);
    return RUMOR_EINVAL;
}

static rumor_err
s_make_mixer(rumor_gossip *g, struct rumor_diag *diag)
{
    struct localsgd *s = g->state;
    struct rumor_gossip_opts inner;
    rumor_gossip_opts_default(&inner);
    inner.seed = g->opts.seed;
    /* robust mixing screens the mixer's messages as g's own */
    memcpy(inner.robust, g->opts.robust, sizeof inner.robust);
    inner.clip_quantile = g->opts.clip_quantile;
    inner.clip_factor = g->opts.clip_factor;
    inner.clip_norm = g->opts.clip_norm;
    snprintf(inner.algo,
             sizeof inner.algo,
             "%s",
             g->opts.gossip_rounds > 0 ? "dpsgd" : "allreduce");
    struct rumor_model model = {g->tensors, g->tensor_count};
    return rumor_gossip_new(&inner, g->topo, g->self, &model, &s->mixer, diag);
}

static rumor_err
s_make_codec(rumor_gossip *g, struct rumor_diag *diag)
{
    struct localsgd *s = g->state;
    rumor_err rc = rumor_codec_new(g->opts.delta_codec, &s->codec, diag);
    if (rc == RUMOR_OK)
        rc = gossip_codec_unshared(g, s->codec, diag);
    if (rc == RUMOR_OK)
        rc = rumor_ef_new(s_ef_spec(g), g->numel, &s->ef, diag);
    if (rc == RUMOR_OK && !rumor_ef_codec_fits(s->ef, s->codec)) {
        rumor_diag_set(
            diag,
            "",
            0,
            0,
            "localsgd: ef %s selects by count: it needs a topk, randk or "
            "dgc delta codec (dgc with a warm-up), not %s",
            g->opts.ef,
            g->opts.delta_codec);
        return RUMOR_EINVAL;
    }
    size_t cap = 0;
    if (rc == RUMOR_OK)
        rc = rumor_ef_encoded_size(s->ef, s->codec, g->numel, &cap);
    if (rc == RUMOR_OK)
        rc = gossip_gather_init(&s->gather, g, cap);
    return rc;
}

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct localsgd *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    rumor_err rc = s_check_opts(g, diag);
    if (rc == RUMOR_OK)
        rc = s_make_mixer(g, diag);
    if (rc == RUMOR_OK && g->opts.delta_codec[0] != '\0')
        rc = s_make_codec(g, diag);
    if (rc == RUMOR_OK)
        rc = gossip_saef_init(&s->saef, g, diag);
    if (rc != RUMOR_OK)
        return rc;
    s->shift = calloc(g->numel, sizeof(float)); /* saved in checkpoints */
    s->anchor = calloc(g->numel, sizeof(float));
    s->x = malloc(g->numel * sizeof(float));
    s->velocity = calloc(g->numel, sizeof(float));
    s->acc = malloc(g->numel * sizeof(float));
    if (!s->anchor || !s->x || !s->velocity || !s->acc || !s->shift)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    if (s == NULL)
        return;
    rumor_gossip_destroy(&s->mixer);
    rumor_codec_destroy(&s->codec);
    rumor_ef_destroy(&s->ef);
    gossip_saef_free(&s->saef);
    free(s->shift);
    gossip_gather_free(&s->gather);
    free(s->anchor);
    free(s->x);
    free(s->velocity);
    free(s->acc);
    free(s);
    g->state = NULL;
}

static bool
s_uses_ring(const rumor_gossip *g)
{
    return g->opts.gossip_rounds == 0;
}

static bool
s_sync_step(const rumor_gossip *g, uint64_t step)
{
    return step % g->opts.period == 0;
}

/* Rounds of the mixer: k gossip rounds (dpsgd mixes once per round), or
 * the all-reduce's own count. */
static uint32_t
s_mixer_rounds(const rumor_gossip *g, uint64_t step)
{
    const struct localsgd *s = g->state;
    return g->opts.gossip_rounds > 0 ? g->opts.gossip_rounds
                                     : rumor_gossip_rounds(s->mixer, step);
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    const struct localsgd *s = g->state;
    if (!s_sync_step(g, step) || (g->ring_n < 2 && s_uses_ring(g)))
        return 0;
    if (s->codec != NULL && s->have_anchor)
        return (uint32_t)(g->ring_n - 1) +
               (gossip_saef_exchanges(&s->saef, g) ? 1 : 0);
    return s_mixer_rounds(g, step);
}

/* The delta since the last sync, compressed with error feedback. */
static rumor_err
s_encode_delta(rumor_gossip *g, uint64_t step)
{
    struct localsgd *s = g->state;
    gossip_flat_get(g, 0, g->numel, s->x);
    for (size_t e = 0; e < g->numel; e++)
        s->acc[e] = s->anchor[e] - s->x[e];
    /* Delta = anchor - x + (1 - alpha) e, or anchor - x - alpha e_bar + e:
     * e + the local update. */
    for (size_t e = 0; s->ahead_nbr && e < g->numel; e++)
        s->acc[e] -= s->shift[e];
    float own = s->ahead_nbr ? 1.0f : 1.0f - s->ahead;
    rumor_err rc = s_saef(g)
                       ? rumor_ef_apply_error(s->ef, own, s->acc, g->numel)
                       : RUMOR_OK;
    if (rc == RUMOR_OK) /* DGC's clip: N is the ring's */
        rc = rumor_ef_set_nodes(s->ef, g->ring_n);
    if (rc != RUMOR_OK)
        return rc;
    uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, 0x10ca1);
    rc = rumor_ef_encode(s->ef,
                         s->codec,
                         s->acc,
                         g->numel,
                         seed,
                         step,
                         s->gather.payload[g->ring_pos],
                         s->gather.cap,
                         &s->gather.len[g->ring_pos],
                         NULL);
    if (rc == RUMOR_OK) { /* e_bar belonged to the errors just resent */
        s->ahead = 0;
        s->ahead_nbr = false;
        s->saef.have_ebar = false;
    }
    return rc;
}

/* The own error, as encode left it. */
static const float *
s_error(const rumor_gossip *g)
{
    const struct localsgd *s = g->state;
    size_t n = 0;
    return rumor_ef_error(s->ef, &n);
}

/* True for the error round that ends a compressed sync (saef.c). */
static bool
s_error_round(const rumor_gossip *g, uint32_t round)
{
    const struct localsgd *s = g->state;
    return round + 1 == g->ring_n && gossip_saef_exchanges(&s->saef, g);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    struct localsgd *s = g->state;
    if (round == 0)
        s->compressed_sync = s->codec != NULL && s->have_anchor;
    if (!s->compressed_sync) {
        const struct rumor_gossip_msg *msgs = NULL;
        size_t count = 0;
        rumor_err rc = rumor_gossip_emit(s->mixer, step, round, &msgs, &count);
        if (rc == RUMOR_OK)
            rc = gossip_out_reserve(g, count);
        if (rc == RUMOR_OK)
            memcpy(g->out, msgs, count * sizeof *msgs);
        return rc;
    }
    if (s_error_round(g, round))
        return gossip_saef_emit(&s->saef, g, step, s_error(g));
    rumor_err rc = round == 0 ? s_encode_delta(g, step) : RUMOR_OK;
    return rc == RUMOR_OK ? gossip_gather_emit(g, &s->gather, round) : rc;
}

/* x = anchor - lr (d + mu v) with v = mu v + d, d the averaged delta
 * (already in s->acc); then the anchor moves to x. */
static void
s_outer_step(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    float lr = (float)g->opts.outer_lr, mu = (float)g->opts.outer_momentum;
    for (size_t e = 0; e < g->numel; e++) {
        s->velocity[e] = mu * s->velocity[e] + s->acc[e];
        s->x[e] = s->anchor[e] - lr * (s->acc[e] + mu * s->velocity[e]);
    }
    gossip_flat_put(g, 0, g->numel, s->x);
    memcpy(s->anchor, s->x, g->numel * sizeof(float));
}

/* After the mixer: mean(x) is in the model. */
static void
s_after_mix(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    gossip_flat_get(g, 0, g->numel, s->x);
    if (s->have_anchor && s_outer(g)) {
        for (size_t e = 0; e < g->numel; e++)
            s->acc[e] = s->anchor[e] - s->x[e];
        s_outer_step(g);
        return;
    }
    memcpy(s->anchor, s->x, g->numel * sizeof(float));
    s->have_anchor = g->opts.gossip_rounds == 0;
}

/* Every payload decoded in node order (the members' positions): the same
 * bits on every member. */
static rumor_err
s_after_gather(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    memset(s->acc, 0, g->numel * sizeof(float));
    float inv = 1.0f / (float)g->ring_n;
    for (size_t j = 0; j < g->ring_n; j++) {
        rumor_err rc = rumor_codec_decode_add(s->codec,
                                              s->gather.payload[j],
                                              s->gather.len[j],
                                              inv,
                                              s->acc,
                                              g->numel);
        if (rc != RUMOR_OK) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip localsgd: node %u: the delta of node %u does "
                      "not decode: %s",
                      g->self,
                      g->ring[j],
                      rumor_strerror(rc));
            return rc;
        }
    }
    s_outer_step(g);
    return RUMOR_OK;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    struct localsgd *s = g->state;
    if (s->compressed_sync && s_error_round(g, round))
        return gossip_saef_absorb(&s->saef, g, step, s_error(g), msgs, count);
    if (s->compressed_sync) {
        bool complete = false;
        rumor_err rc =
            gossip_gather_absorb(g, &s->gather, round, msgs, count, &complete);
        return rc == RUMOR_OK && complete ? s_after_gather(g) : rc;
    }
    rumor_err rc = rumor_gossip_absorb(s->mixer, step, round, msgs, count);
    if (rc == RUMOR_OK && round + 1 == s_mixer_rounds(g, step))
        s_after_mix(g);
    return rc;
}

static size_t
s_expected(const rumor_gossip *g,
           uint64_t step,
           uint32_t round,
           uint32_t *peers,
           size_t cap)
{
    const struct localsgd *s = g->state;
    if (s->codec != NULL && s->have_anchor && s_error_round(g, round))
        return gossip_saef_expected(g, step, peers, cap);
    if (s->codec != NULL && s->have_anchor)
        return gossip_expected_prev(g, step, round, peers, cap);
    size_t count = 0;
    rumor_gossip_expected(s->mixer, step, round, peers, cap, &count);
    return count;
}

/* The mixer's ring is this instance's. */
static rumor_err
s_members(rumor_gossip *g, const uint32_t *members, size_t count)
{
    struct localsgd *s = g->state;
    return rumor_gossip_members_set(s->mixer, members, count);
}

static rumor_err
s_step_ahead(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    float alpha = (float)g->opts.ef_alpha;
    if (s->codec == NULL || !s->have_anchor || alpha == 0 || s->ahead != 0 ||
        s->ahead_nbr)
        return RUMOR_OK;
    gossip_flat_get(g, 0, g->numel, s->x);
    if (s->saef.have_ebar) {
        for (size_t e = 0; e < g->numel; e++) {
            s->shift[e] = alpha * s->saef.ebar[e];
            s->x[e] -= s->shift[e];
        }
        gossip_flat_put(g, 0, g->numel, s->x);
        s->ahead_nbr = true;
        return RUMOR_OK;
    }
    rumor_err rc = rumor_ef_apply_error(s->ef, -alpha, s->x, g->numel);
    if (rc != RUMOR_OK)
        return rc;
    gossip_flat_put(g, 0, g->numel, s->x);
    s->ahead = alpha;
    return RUMOR_OK;
}

/* Between steps: the anchor (the model of the last sync), the outer
 * momentum, the look-ahead applied since the sync (alpha, or the shift of
 * the neighbourhood form), the error memory, the neighbourhood's e_bar and
 * the mixer's own state. Layout: u32 flags (1 have_anchor, 2 ahead_nbr,
 * 4 have_ebar), f32 ahead, anchor, velocity, shift (numel floats each),
 * the error memory as a u64-length blob (rumor_ef_save; empty without a
 * delta codec), u64 ebar floats (0 or numel) and e_bar, the mixer's state
 * as a blob. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct localsgd *s = g->state;
    bool ebar = s->saef.have_ebar && s->saef.ebar != NULL;
    uint32_t flags = (s->have_anchor ? 1u : 0u) | (s->ahead_nbr ? 2u : 0u) |
                     (ebar ? 4u : 0u);
    rumor_err rc = gossip_write_u32(out, flags);
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, &s->ahead, 1);
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, s->anchor, g->numel);
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, s->velocity, g->numel);
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, s->shift, g->numel);
    size_t ef_len = s->ef != NULL ? rumor_ef_state_size(s->ef) : 0;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, ef_len);
    if (rc == RUMOR_OK && ef_len > 0)
        rc = rumor_buf_reserve(out, ef_len);
    size_t written = 0;
    if (rc == RUMOR_OK && ef_len > 0)
        rc = rumor_ef_save(s->ef, out->data + out->len, ef_len, &written);
    out->len += rc == RUMOR_OK ? written : 0;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, ebar ? g->numel : 0);
    if (rc == RUMOR_OK && ebar)
        rc = gossip_write_f32(out, s->saef.ebar, g->numel);
    size_t at = out->len;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, 0); /* the mixer's length, patched */
    if (rc == RUMOR_OK)
        rc = rumor_gossip_state_save(s->mixer, out);
    if (rc == RUMOR_OK) {
        uint64_t len = out->len - at - 8;
        memcpy(out->data + at, &len, 8);
    }
    return rc;
}

/* The error memory's bytes: checked on a scratch memory, or restored
 * (a load; an adopt keeps the own memory). */
static rumor_err
s_state_ef(rumor_gossip *g,
           const uint8_t *p,
           size_t len,
           enum gossip_state_mode mode)
{
    struct localsgd *s = g->state;
    if ((s->ef == NULL) != (len == 0))
        return RUMOR_EPROTO;
    if (len == 0 || mode == GOSSIP_STATE_ADOPT)
        return RUMOR_OK;
    if (mode == GOSSIP_STATE_LOAD)
        return rumor_ef_restore(s->ef, p, len);
    rumor_ef *scratch = NULL;
    rumor_err rc = rumor_ef_new(s_ef_spec(g), g->numel, &scratch, NULL);
    if (rc == RUMOR_OK)
        rc = rumor_ef_restore(scratch, p, len);
    rumor_ef_destroy(&scratch);
    return rc;
}

/* An adopt takes what goes with the member's model (anchor, outer
 * velocity, the look-ahead applied to it) and keeps the own error memory
 * and e_bar (the neighbourhood's errors as this node weighs them). */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct localsgd *s = g->state;
    uint32_t flags = gossip_read_u32(r);
    float ahead = 0;
    gossip_read_f32(r, &ahead, 1);
    if (r->err == RUMOR_OK && flags > 7)
        gossip_reader_fail(r, RUMOR_EPROTO, "unknown flags");
    struct gossip_reader vectors = *r; /* read again once all fits */
    gossip_read_f32(r, NULL, 3 * g->numel);
    size_t ef_len = 0;
    const uint8_t *ef = gossip_read_blob(r, &ef_len);
    uint64_t ebar_len = gossip_read_u64(r);
    bool ebar = (flags & 4u) != 0;
    if (r->err == RUMOR_OK &&
        (ebar_len != (ebar ? g->numel : 0) || (ebar && s->saef.ebar == NULL)))
        gossip_reader_fail(r, RUMOR_EPROTO, "an e_bar that does not fit");
    struct gossip_reader ebar_at = *r;
    gossip_read_f32(r, NULL, ebar ? g->numel : 0);
    size_t mix_len = 0;
    const uint8_t *mix = gossip_read_blob(r, &mix_len);
    if (r->err != RUMOR_OK)
        return r->err;
    const char *why = "";
    rumor_err rc = s_state_ef(g, ef, ef_len, mode);
    if (rc == RUMOR_OK)
        rc = gossip_state_read(s->mixer, mix, mix_len, mode, r->peer, &why);
    if (rc != RUMOR_OK)
        gossip_reader_fail(r, rc, "an error memory or mixer that does not fit");
    if (rc != RUMOR_OK || mode == GOSSIP_STATE_CHECK)
        return rc;
    gossip_read_f32(&vectors, s->anchor, g->numel);
    gossip_read_f32(&vectors, s->velocity, g->numel);
    gossip_read_f32(&vectors, s->shift, g->numel);
    s->have_anchor = (flags & 1u) != 0;
    s->ahead_nbr = (flags & 2u) != 0;
    s->ahead = ahead;
    if (mode == GOSSIP_STATE_ADOPT)
        return RUMOR_OK;
    if (ebar)
        gossip_read_f32(&ebar_at, s->saef.ebar, g->numel);
    s->saef.have_ebar = ebar;
    return RUMOR_OK;
}

/* The mixer's step ends with this one's. */
static void
s_abandon(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    rumor_gossip_step_abandon(s->mixer);
    s->compressed_sync = false;
}

const rumor_gossip *
gossip_localsgd_mixer(const rumor_gossip *g)
{
    const struct localsgd *s = g->state;
    return s != NULL ? s->mixer : NULL;
}

const struct gossip_algo_i gossip_localsgd = {
    .name = "localsgd",
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .exchanges = s_sync_step,
    .emit = s_emit,
    .expected = s_expected,
    .uses_ring = s_uses_ring,
    .absorb = s_absorb,
    .step_ahead = s_step_ahead,
    .members = s_members,
    .state_save = s_state_save,
    .state_load = s_state_load,
    .abandon = s_abandon,
};
