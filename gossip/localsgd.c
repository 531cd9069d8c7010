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
 * The paper's e_bar is the average error of all nodes, which no node
 * knows without sending its error uncompressed; each node uses its own e.
 * The mean of the nodes' look-ahead points is still anchor - e_bar, and
 * for a quadratic loss the averaged gradient is then exactly the one at
 * the virtual model anchor - e_bar.
 */
#include "gossip/gossip_impl.h"

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
    uint8_t **payload; /* codec path: node j's payload */
    size_t *payload_len;
    size_t payload_cap;
    bool compressed_sync; /* this sync uses the codec path */
    float ahead;          /* alpha of the look-ahead applied since the
                             last sync (0: none) */
};

static bool
s_outer(const rumor_gossip *g)
{
    return g->opts.outer_lr != 1.0 || g->opts.outer_momentum != 0.0;
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
    bool exact = false;
    rumor_err rc = rumor_codec_new(g->opts.delta_codec, &s->codec, diag);
    if (rc == RUMOR_OK)
        rc = rumor_ef_new("saef", g->numel, &s->ef, diag);
    if (rc == RUMOR_OK)
        rc = rumor_codec_encoded_size(s->codec,
                                      g->numel,
                                      &s->payload_cap,
                                      &exact);
    if (rc != RUMOR_OK)
        return rc;
    s->payload = calloc(g->nodes, sizeof *s->payload);
    s->payload_len = calloc(g->nodes, sizeof *s->payload_len);
    if (s->payload == NULL || s->payload_len == NULL)
        return RUMOR_ENOMEM;
    for (size_t j = 0; j < g->nodes; j++) {
        s->payload[j] = malloc(s->payload_cap);
        if (s->payload[j] == NULL)
            return RUMOR_ENOMEM;
    }
    return RUMOR_OK;
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
    if (rc != RUMOR_OK)
        return rc;
    s->anchor = malloc(g->numel * sizeof(float));
    s->x = malloc(g->numel * sizeof(float));
    s->velocity = calloc(g->numel, sizeof(float));
    s->acc = malloc(g->numel * sizeof(float));
    if (!s->anchor || !s->x || !s->velocity || !s->acc)
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
    for (size_t j = 0; s->payload != NULL && j < g->nodes; j++)
        free(s->payload[j]);
    free(s->payload);
    free(s->payload_len);
    free(s->anchor);
    free(s->x);
    free(s->velocity);
    free(s->acc);
    free(s);
    g->state = NULL;
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
    if (!s_sync_step(g, step))
        return 0;
    if (s->codec != NULL && s->have_anchor)
        return (uint32_t)(g->nodes - 1);
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
    /* Delta = anchor - x + (1 - alpha) e: e + the local update. */
    rumor_err rc =
        rumor_ef_apply_error(s->ef, 1.0f - s->ahead, s->acc, g->numel);
    if (rc != RUMOR_OK)
        return rc;
    uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, 0x10ca1);
    rc = rumor_ef_encode(s->ef,
                         s->codec,
                         s->acc,
                         g->numel,
                         seed,
                         step,
                         s->payload[g->self],
                         s->payload_cap,
                         &s->payload_len[g->self],
                         NULL);
    if (rc == RUMOR_OK)
        s->ahead = 0;
    return rc;
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
    rumor_err rc = round == 0 ? s_encode_delta(g, step) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_out_reserve(g, 1);
    if (rc != RUMOR_OK)
        return rc;
    size_t n = g->nodes, from = (g->self + n - round % n) % n;
    g->out[0] = (struct rumor_gossip_msg){(uint32_t)((g->self + 1) % n),
                                          s->payload[from],
                                          s->payload_len[from]};
    return RUMOR_OK;
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

/* Every payload decoded in node order: the same bits on every node. */
static rumor_err
s_after_gather(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    memset(s->acc, 0, g->numel * sizeof(float));
    float inv = 1.0f / (float)g->nodes;
    for (size_t j = 0; j < g->nodes; j++) {
        rumor_err rc = rumor_codec_decode_add(s->codec,
                                              s->payload[j],
                                              s->payload_len[j],
                                              inv,
                                              s->acc,
                                              g->numel);
        if (rc != RUMOR_OK) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip localsgd: node %u: the delta of node %zu does "
                      "not decode: %s",
                      g->self,
                      j,
                      rumor_strerror(rc));
            return rc;
        }
    }
    s_outer_step(g);
    return RUMOR_OK;
}

static rumor_err
s_absorb_gathered(rumor_gossip *g,
                  uint32_t round,
                  const struct rumor_gossip_msg *msgs,
                  size_t count)
{
    struct localsgd *s = g->state;
    size_t n = g->nodes;
    uint32_t prev = (uint32_t)((g->self + n - 1) % n);
    size_t from = (prev + n - round % n) % n;
    const struct rumor_gossip_msg *slot = NULL;
    for (size_t m = 0; m < count; m++) {
        if (msgs[m].peer != prev || slot != NULL || msgs[m].len == 0 ||
            msgs[m].len > s->payload_cap) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip localsgd: node %u rejected a message from %u "
                      "(%zu bytes)",
                      g->self,
                      msgs[m].peer,
                      msgs[m].len);
            return RUMOR_EPROTO;
        }
        slot = &msgs[m];
    }
    if (slot == NULL)
        return RUMOR_ETIMEDOUT;
    memcpy(s->payload[from], slot->data, slot->len);
    s->payload_len[from] = slot->len;
    return round + 2 == n ? s_after_gather(g) : RUMOR_OK;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    struct localsgd *s = g->state;
    if (s->compressed_sync)
        return s_absorb_gathered(g, round, msgs, count);
    rumor_err rc = rumor_gossip_absorb(s->mixer, step, round, msgs, count);
    if (rc == RUMOR_OK && round + 1 == s_mixer_rounds(g, step))
        s_after_mix(g);
    return rc;
}

static bool
s_uses_ring(const rumor_gossip *g)
{
    return g->opts.gossip_rounds == 0;
}

static size_t
s_expected(const rumor_gossip *g,
           uint64_t step,
           uint32_t round,
           uint32_t *peers,
           size_t cap)
{
    const struct localsgd *s = g->state;
    if (s->codec != NULL && s->have_anchor)
        return gossip_expected_prev(g, step, round, peers, cap);
    size_t count = 0;
    rumor_gossip_expected(s->mixer, step, round, peers, cap, &count);
    return count;
}

static rumor_err
s_step_ahead(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    float alpha = (float)g->opts.ef_alpha;
    if (s->codec == NULL || !s->have_anchor || alpha == 0 || s->ahead != 0)
        return RUMOR_OK;
    gossip_flat_get(g, 0, g->numel, s->x);
    rumor_err rc = rumor_ef_apply_error(s->ef, -alpha, s->x, g->numel);
    if (rc != RUMOR_OK)
        return rc;
    gossip_flat_put(g, 0, g->numel, s->x);
    s->ahead = alpha;
    return RUMOR_OK;
}

const struct gossip_algo_i gossip_localsgd = {
    .name = "localsgd",
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = s_expected,
    .uses_ring = s_uses_ring,
    .absorb = s_absorb,
    .step_ahead = s_step_ahead,
};
