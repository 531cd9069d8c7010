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
 * every node. Without a delta codec the first sync averages the models
 * themselves to make it. With one, the model the instance is made with is
 * a tentative anchor, and the first sync is already a compressed one:
 * every payload ends with the crc32c of its sender's anchor (over the
 * syncing fragment), every node sees every payload, so all reach the same
 * verdict with no extra round: equal checksums apply the sync (the anchor
 * is confirmed); any difference (nodes that started from different
 * models) discards it on every node (model, error memory and look-ahead
 * as before it) and the fragment's next sync averages the models exactly,
 * as the first one does without a codec.
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
 * Streaming fragments (opts.fragments F; Douillard et al., "Streaming
 * DiLoCo", 2025): the flat model is cut into F contiguous element ranges,
 * fragment f = [f numel / F, (f + 1) numel / F), and fragment f syncs at
 * the steps t with t % period == f period / F, so one sync carries about
 * 1/F of the model. Each fragment is a local SGD of its own: anchor and
 * outer velocity over its range, its "have anchor", its error memory, its
 * mixer (an inner instance over a private copy of its elements), its
 * look-ahead (the neighbourhood's error round carries its error, and
 * e_bar is formed over its range); the codec's all-gather buffer and the
 * error exchange are shared, as no two fragments sync at the same step.
 * F = 1 is the whole model at t % period == 0.
 *
 * Exact averaging runs over the instance's ring (rumor_gossip_members_set):
 * the mixer and the all-gather use its members, the mean divides by their
 * count, and the error round reaches only neighbours that are members. A
 * lone member's sync has no round and changes nothing (anchor, memory and
 * outer momentum stay as they were).
 *
 * The flat vectors, SAEF's e_bar and the mixers' models live in the
 * instance's backend memory (gossip/backend.h) and the arithmetic runs
 * through its table, in the float roundings of the host code: on a model
 * in GPU memory an exact sync moves its fragment to the host and back
 * (the all-reduce's payload), a compressed one its payloads and the
 * anchor's chunk checksums. On every backend the delta's memory is kept
 * here (its residual in backend memory, its parameters and saved record a
 * rumor_ef's), for the kinds whose update is p - C(p): saef, ef and
 * ef-decay; and dgc, whose momentum u is kept there too (the compressed
 * all-reduce's steps, gossip/ef_table.c: the clip's sumsq_add, dgc_step,
 * the warm-up's count, e = v - C(v), u zeroed at the payload's own index
 * list).
 */
#include "gossip/ef_table.h"
#include "gossip/gossip_impl.h"
#include "gossip/saef.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One fragment: elements [off, off + len) of the flat model. */
struct frag {
    size_t off, len;
    rumor_gossip *mixer; /* allreduce or dpsgd on buf */
    float *buf;          /* the mixer's model: a copy of the elements */
    rumor_ef *ef;        /* the delta's memory (NULL without a codec) */
    /* On a device, the memory's residual (backend memory) and step count:
     * ef then only saves and restores them. */
    float *e;
    float *u; /* dgc: its momentum (backend memory); or NULL */
    uint64_t e_steps;
    bool have_anchor;
    bool tentative; /* the anchor is the initial model, not yet confirmed
                       by a sync's checksums */
    float ahead;    /* alpha of the look-ahead applied since the fragment's
                       last sync (0: none) */
    /* the neighbourhood form: e_bar over the fragment belongs to its last
     * sync; the look-ahead by it (shift) is applied */
    bool have_ebar, ahead_nbr;
};

/* What a compressed sync changes before its verdict, restored when the
 * anchors' checksums differ: the error memory and the fragment's
 * look-ahead flags. */
struct undo {
    float *e; /* the residual (largest fragment), and its steps */
    float *u; /* dgc's momentum (largest fragment), or NULL */
    uint64_t e_steps;
    float ahead;
    bool ahead_nbr, have_ebar;
    bool discard; /* this sync's verdict: the anchors differ */
};

/* Bytes of the anchor's crc32c that end every compressed payload. */
#define ANCHOR_CRC 4u

struct localsgd {
    rumor_codec *codec; /* NULL: deltas go uncompressed */
    struct frag *frag;
    size_t frag_n;
    size_t last; /* the fragment of the last sync (its mixer's radius) */
    /* flat, numel floats each, in the model's memory (g->be) */
    float *anchor, *x, *velocity, *acc;
    float ef_c;                  /* p = Delta + ef_c e (not saef, dgc) */
    float *un;                   /* dgc: u' (largest fragment) */
    struct gossip_gather gather; /* codec path: every node's payload */
    bool compressed_sync;        /* this sync uses the codec path */
    /* the neighbourhood form (saef.c): the exchange of the errors, and the
     * look-ahead alpha e_bar applied since each fragment's last sync */
    struct gossip_saef saef;
    float *shift;
    struct undo undo; /* the compressed sync in flight */
    bool warned;      /* "started from different models" said */
    /* rumor_gossip_snapshot's: the vectors (g->be's memory, made on
     * first use) and each fragment's fields, its e a buffer of its own */
    float *snap_anchor, *snap_velocity, *snap_shift, *snap_ebar;
    struct frag *snap_frag;
    /* the snapshot's vectors equal the live ones: nothing changed them
     * since the last take or restore (between syncs, every step's ring
     * boundary would otherwise copy the model-sized vectors again) */
    bool snap_current;
    bool snap_saving;   /* s_snap_save's state_save: of the snapshot */
    uint64_t saved_d2h; /* bytes a state_save copied to the host */
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

static const char *
s_check_fragments(const rumor_gossip *g)
{
    const struct rumor_gossip_opts *o = &g->opts;
    if (o->fragments == 0)
        return "fragments must be at least 1";
    if (o->fragments > o->period)
        return "fragments (F) must be at most period (H): each fragment "
               "syncs once per period, at its own step";
    if (o->fragments > g->numel)
        return "fragments (F) must be at most the model's elements";
    return NULL;
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
    else
        why = s_check_fragments(g);
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag, "", 0, 0, "localsgd: %s", why);
    return RUMOR_EINVAL;
}

/* c of p = Delta + c e, read from the memory's own correction: a memory
 * of one element whose e is 1 corrects 0 to c. */
static rumor_err
s_ef_coefficient(const rumor_gossip *g, float *c)
{
    rumor_ef *probe = NULL;
    float one = 1.0f, zero = 0.0f;
    rumor_err rc = rumor_ef_new(s_ef_spec(g), 1, &probe, NULL);
    if (rc == RUMOR_OK) {
        *rumor_ef_residual(probe, NULL) = one;
        rc = rumor_ef_corrected(probe, &zero, 1, c);
    }
    rumor_ef_destroy(&probe);
    return rc;
}

/* The fragment's mixer, over its copy of the elements (flat like the
 * model, so F = 1 mixes the same bits as a mixer on the model would). */
static rumor_err
s_make_mixer(rumor_gossip *g, struct frag *fr, struct rumor_diag *diag)
{
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
    rumor_err rc = g->be->alloc(fr->len * sizeof(float), (void **)&fr->buf);
    if (rc != RUMOR_OK)
        return rc;
    struct rumor_tensor flat = {fr->buf, 1, {fr->len}};
    struct rumor_model model = {&flat, 1};
    return gossip_new_in(&inner,
                         g->topo,
                         g->self,
                         &model,
                         g->be,
                         &fr->mixer,
                         diag);
}

/* The codec, each fragment's error memory, and the all-gather sized for
 * the largest fragment's payload. */
static rumor_err
s_make_codec(rumor_gossip *g, struct rumor_diag *diag)
{
    struct localsgd *s = g->state;
    rumor_err rc = rumor_codec_new(g->opts.delta_codec, &s->codec, diag);
    if (rc == RUMOR_OK)
        rc = gossip_codec_unshared(g, s->codec, diag);
    if (rc == RUMOR_OK)
        rc = gossip_codec_on_device(g, s->codec, diag);
    size_t cap = 0, largest = 0;
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++) {
        struct frag *fr = &s->frag[f];
        rc = rumor_ef_new(s_ef_spec(g), fr->len, &fr->ef, diag);
        if (rc == RUMOR_OK)
            rc = g->be->alloc(fr->len * sizeof(float), (void **)&fr->e);
        if (rc == RUMOR_OK && rumor_ef_momentum(fr->ef, NULL) != NULL)
            rc = g->be->alloc(fr->len * sizeof(float), (void **)&fr->u);
        largest = fr->len > largest ? fr->len : largest;
        if (rc == RUMOR_OK && !rumor_ef_codec_fits(fr->ef, s->codec)) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "localsgd: ef %s selects by count: it needs a "
                           "topk, randk or dgc delta codec (dgc with a "
                           "warm-up), not %s",
                           g->opts.ef,
                           g->opts.delta_codec);
            return RUMOR_EINVAL;
        }
        size_t need = 0;
        if (rc == RUMOR_OK)
            rc = rumor_ef_encoded_size(fr->ef, s->codec, fr->len, &need);
        cap = need > cap ? need : cap;
    }
    bool dgc = rc == RUMOR_OK && s->frag[0].u != NULL;
    if (rc == RUMOR_OK) {
        rc = dgc ? RUMOR_OK : s_ef_coefficient(g, &s->ef_c);
        if (rc == RUMOR_OK)
            rc = g->be->alloc(largest * sizeof(float), (void **)&s->undo.e);
    }
    if (rc == RUMOR_OK && dgc)
        rc = g->be->alloc(largest * sizeof(float), (void **)&s->undo.u);
    if (rc == RUMOR_OK && dgc)
        rc = g->be->alloc(largest * sizeof(float), (void **)&s->un);
    if (rc == RUMOR_OK)
        rc = gossip_gather_init(&s->gather, g, cap + ANCHOR_CRC);
    return rc;
}

static rumor_err
s_make_frags(rumor_gossip *g, struct rumor_diag *diag)
{
    struct localsgd *s = g->state;
    s->frag_n = g->opts.fragments;
    s->frag = calloc(s->frag_n, sizeof *s->frag);
    if (s->frag == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++) {
        struct frag *fr = &s->frag[f];
        fr->off = f * g->numel / s->frag_n;
        fr->len = (f + 1) * g->numel / s->frag_n - fr->off;
        rc = s_make_mixer(g, fr, diag);
    }
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
        rc = gossip_saef_init(&s->saef, g, diag);
    if (rc == RUMOR_OK)
        rc = s_make_frags(g, diag);
    if (rc == RUMOR_OK && g->opts.delta_codec[0] != '\0')
        rc = s_make_codec(g, diag);
    /* zeroed: shift and velocity are saved in checkpoints */
    float **vec[] = {&s->shift, &s->anchor, &s->x, &s->velocity, &s->acc};
    for (size_t v = 0; v < sizeof vec / sizeof vec[0] && rc == RUMOR_OK; v++)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)vec[v]);
    if (rc == RUMOR_OK && s->codec != NULL) /* the tentative anchors */
        rc = gossip_model_read(g, 0, g->numel, s->anchor, GOSSIP_ON_DEVICE);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t f = 0; f < s->frag_n; f++) {
        s->frag[f].have_anchor = s->codec != NULL;
        s->frag[f].tentative = s->codec != NULL;
    }
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    if (s == NULL)
        return;
    for (size_t f = 0; s->frag != NULL && f < s->frag_n; f++) {
        rumor_gossip_destroy(&s->frag[f].mixer);
        rumor_ef_destroy(&s->frag[f].ef);
        g->be->release(s->frag[f].buf);
        g->be->release(s->frag[f].e);
        g->be->release(s->frag[f].u);
    }
    free(s->frag);
    rumor_codec_destroy(&s->codec);
    gossip_saef_free(&s->saef, g);
    gossip_gather_free(&s->gather);
    g->be->release(s->shift);
    g->be->release(s->anchor);
    g->be->release(s->x);
    g->be->release(s->velocity);
    g->be->release(s->acc);
    g->be->release(s->undo.e);
    g->be->release(s->undo.u);
    g->be->release(s->un);
    for (size_t f = 0; s->snap_frag != NULL && f < s->frag_n; f++) {
        g->be->release(s->snap_frag[f].e);
        g->be->release(s->snap_frag[f].u);
    }
    free(s->snap_frag);
    g->be->release(s->snap_anchor);
    g->be->release(s->snap_velocity);
    g->be->release(s->snap_shift);
    g->be->release(s->snap_ebar);
    free(s);
    g->state = NULL;
}

static bool
s_uses_ring(const rumor_gossip *g)
{
    return g->opts.gossip_rounds == 0;
}

/* The fragment that syncs at step: the f with f * period / F equal to
 * step % period (the least f with f * period / F >= r is ceil(r F /
 * period)), or NULL. */
static struct frag *
s_frag_at(const rumor_gossip *g, uint64_t step)
{
    const struct localsgd *s = g->state;
    uint64_t period = g->opts.period, n = s->frag_n;
    uint64_t r = step % period, f = (r * n + period - 1) / period;
    return f < n && f * period / n == r ? &s->frag[f] : NULL;
}

/* Whether a fragment syncs at step: s_frag_at from the options alone
 * (rumor_gossip_exchanges may ask while another thread runs g). */
static bool
s_exchanges(const rumor_gossip *g, uint64_t step)
{
    uint64_t period = g->opts.period;
    uint64_t n = g->opts.fragments > 0 ? g->opts.fragments : 1;
    uint64_t r = step % period, f = (r * n + period - 1) / period;
    return f < n && f * period / n == r;
}

/* Rounds of the mixer: k gossip rounds (dpsgd mixes once per round), or
 * the all-reduce's own count. */
static uint32_t
s_mixer_rounds(const rumor_gossip *g, const struct frag *fr, uint64_t step)
{
    return g->opts.gossip_rounds > 0 ? g->opts.gossip_rounds
                                     : rumor_gossip_rounds(fr->mixer, step);
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    const struct localsgd *s = g->state;
    const struct frag *fr = s_frag_at(g, step);
    if (fr == NULL || (g->ring_n < 2 && s_uses_ring(g)))
        return 0;
    if (s->codec != NULL && fr->have_anchor)
        return (uint32_t)(g->ring_n - 1) +
               (gossip_saef_exchanges(&s->saef, g) ? 1 : 0);
    return s_mixer_rounds(g, fr, step);
}

/* Keeps what the encode of fr's delta changes, for a discard. */
static rumor_err
s_undo_keep(rumor_gossip *g, const struct frag *fr)
{
    struct localsgd *s = g->state;
    struct undo *u = &s->undo;
    u->ahead = fr->ahead;
    u->ahead_nbr = fr->ahead_nbr;
    u->have_ebar = fr->have_ebar;
    u->discard = false;
    u->e_steps = fr->e_steps;
    rumor_err rc = gossip_mem_copy(g,
                                   u->e,
                                   fr->e,
                                   fr->len * sizeof(float),
                                   GOSSIP_ON_DEVICE);
    return rc == RUMOR_OK && fr->u != NULL
               ? gossip_mem_copy(g,
                                 u->u,
                                 fr->u,
                                 fr->len * sizeof(float),
                                 GOSSIP_ON_DEVICE)
               : rc;
}

/* The crc32c of the fragment's anchor (its float bits), where it is: a
 * device copies one checksum per GOSSIP_CRC_CHUNK bytes to the host. */
static rumor_err
s_anchor_crc(rumor_gossip *g, const struct frag *fr, uint32_t *crc)
{
    const struct localsgd *s = g->state;
    size_t bytes = fr->len * sizeof(float);
    if (!g->be->host_memory)
        g->pcie_d2h += 4 * ((bytes + GOSSIP_CRC_CHUNK - 1) / GOSSIP_CRC_CHUNK);
    return g->be->crc32c(s->anchor + fr->off, bytes, crc);
}

/* The fragment's memory through the table: its residual and dgc's
 * momentum, and the instance's PCIe counters. */
static struct gossip_ef_mem
s_mem(rumor_gossip *g, struct frag *fr)
{
    struct localsgd *s = g->state;
    return (struct gossip_ef_mem){
        .be = g->be,
        .codec = s->codec,
        .e = fr->e,
        .steps = &fr->e_steps,
        .dgc = fr->ef,
        .u = fr->u,
        .un = s->un,
        .pcie_h2d = &g->pcie_h2d,
        .pcie_d2h = &g->pcie_d2h,
    };
}

/* rumor_ef_encode of Delta (acc, changed) through the table: p = Delta
 * (saef) or Delta + c e (ef, ef-decay) is encoded, and e = p - C(p) with
 * C(p) decoded from the payload (what every receiver decodes), as
 * compress/errfb.c does with the codec's approx; dgc's memory as the
 * compressed all-reduce's, v in acc. */
static rumor_err
s_encode_device(rumor_gossip *g,
                struct frag *fr,
                float *acc,
                uint64_t seed,
                uint64_t step,
                uint8_t *out,
                size_t cap,
                size_t *len)
{
    struct localsgd *s = g->state;
    const struct gossip_backend_i *be = g->be;
    struct gossip_ef_mem mem = s_mem(g, fr);
    rumor_err rc = RUMOR_OK;
    if (fr->u != NULL)
        return gossip_ef_dgc_encode(&mem,
                                    acc,
                                    acc,
                                    fr->len,
                                    seed,
                                    step,
                                    out,
                                    cap,
                                    len);
    if (!s_saef(g)) /* saef: p = Delta (not Delta + 0 e: -0 + 0 is +0) */
        rc = be->add_scaled(acc, acc, s->ef_c, fr->e, fr->len);
    if (rc == RUMOR_OK)
        rc = be->encode(s->codec, acc, fr->len, seed, step, out, cap, len);
    if (rc != RUMOR_OK)
        return rc;
    g->pcie_d2h += be->host_memory ? 0 : *len;
    return gossip_ef_residual(&mem, acc, fr->len, out, *len);
}

/* The fragment's delta since its last sync, compressed with error
 * feedback (acc[off, off + len)), then the crc32c of the anchor. */
static rumor_err
s_encode_delta(rumor_gossip *g, struct frag *fr, uint64_t step)
{
    struct localsgd *s = g->state;
    const struct gossip_backend_i *be = g->be;
    float *x = s->x + fr->off, *acc = s->acc + fr->off;
    rumor_err rc = s_undo_keep(g, fr);
    if (rc == RUMOR_OK)
        rc = gossip_model_read(g, fr->off, fr->len, x, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK) /* anchor - x */
        rc = be->add_scaled(acc, s->anchor + fr->off, -1.0f, x, fr->len);
    /* Delta = anchor - x + (1 - alpha) e, or anchor - x - alpha e_bar + e:
     * e + the local update. */
    if (rc == RUMOR_OK && fr->ahead_nbr)
        rc = be->add_scaled(acc, acc, -1.0f, s->shift + fr->off, fr->len);
    float own = fr->ahead_nbr ? 1.0f : 1.0f - fr->ahead;
    if (rc == RUMOR_OK && s_saef(g))
        rc = be->add_scaled(acc, acc, own, fr->e, fr->len);
    if (rc == RUMOR_OK) /* DGC's clip: N is the ring's */
        rc = rumor_ef_set_nodes(fr->ef, g->ring_n);
    if (rc != RUMOR_OK)
        return rc;
    uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, 0x10ca1);
    uint8_t *out = s->gather.payload[g->ring_pos];
    size_t *len = &s->gather.len[g->ring_pos], cap = s->gather.cap - ANCHOR_CRC;
    rc = s_encode_device(g, fr, acc, seed, step, out, cap, len);
    uint32_t crc = 0;
    if (rc == RUMOR_OK)
        rc = s_anchor_crc(g, fr, &crc);
    if (rc != RUMOR_OK)
        return rc;
    for (unsigned b = 0; b < ANCHOR_CRC; b++)
        out[(*len)++] = (uint8_t)(crc >> (8 * b));
    /* e_bar belonged to the errors just resent */
    fr->ahead = 0;
    fr->ahead_nbr = false;
    fr->have_ebar = false;
    return RUMOR_OK;
}

/* True for the error round that ends a compressed sync (saef.c). */
static bool
s_error_round(const rumor_gossip *g, uint32_t round)
{
    const struct localsgd *s = g->state;
    return round + 1 == g->ring_n && gossip_saef_exchanges(&s->saef, g);
}

static rumor_err
s_emit_mixer(rumor_gossip *g, struct frag *fr, uint64_t step, uint32_t round)
{
    rumor_err rc = RUMOR_OK;
    if (round == 0)
        rc = gossip_model_read(g, fr->off, fr->len, fr->buf, GOSSIP_ON_DEVICE);
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0;
    if (rc == RUMOR_OK)
        rc = rumor_gossip_emit(fr->mixer, step, round, &msgs, &count);
    if (rc == RUMOR_OK)
        rc = gossip_out_reserve(g, count);
    if (rc == RUMOR_OK)
        memcpy(g->out, msgs, count * sizeof *msgs);
    return rc;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    struct localsgd *s = g->state;
    struct frag *fr = s_frag_at(g, step);
    if (fr == NULL)
        return RUMOR_EINVAL;
    s->snap_current = false;
    if (round == 0) {
        s->compressed_sync = s->codec != NULL && fr->have_anchor;
        s->last = (size_t)(fr - s->frag);
    }
    if (!s->compressed_sync)
        return s_emit_mixer(g, fr, step, round);
    if (s_error_round(g, round))
        return gossip_saef_emit(&s->saef, g, step, fr->e, fr->len);
    rumor_err rc = round == 0 ? s_encode_delta(g, fr, step) : RUMOR_OK;
    return rc == RUMOR_OK ? gossip_gather_emit(g, &s->gather, round) : rc;
}

/* x = anchor - lr (d + mu v) with v = mu v + d, d the averaged delta
 * (already in acc), over the fragment; then its anchor moves to x. */
static rumor_err
s_outer_step(rumor_gossip *g, const struct frag *fr)
{
    struct localsgd *s = g->state;
    float lr = (float)g->opts.outer_lr, mu = (float)g->opts.outer_momentum;
    size_t o = fr->off;
    rumor_err rc = g->be->outer(s->x + o,
                                s->anchor + o,
                                s->velocity + o,
                                s->acc + o,
                                lr,
                                mu,
                                fr->len);
    return rc == RUMOR_OK
               ? gossip_model_write(g, o, fr->len, s->x + o, GOSSIP_ON_DEVICE)
               : rc;
}

/* After the mixer: the mean of the fragment is in its buffer. */
static rumor_err
s_after_mix(rumor_gossip *g, struct frag *fr)
{
    struct localsgd *s = g->state;
    float *x = s->x + fr->off, *anchor = s->anchor + fr->off;
    size_t bytes = fr->len * sizeof(float);
    rumor_err rc = gossip_mem_copy(g, x, fr->buf, bytes, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK && fr->have_anchor && s_outer(g)) {
        rc = g->be->add_scaled(s->acc + fr->off, anchor, -1.0f, x, fr->len);
        return rc == RUMOR_OK ? s_outer_step(g, fr) : rc;
    }
    if (rc == RUMOR_OK)
        rc = gossip_model_write(g, fr->off, fr->len, x, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = gossip_mem_copy(g, anchor, x, bytes, GOSSIP_ON_DEVICE);
    fr->have_anchor = g->opts.gossip_rounds == 0;
    return rc;
}

/* The crc32c that ends payload j (its length checked by the caller). */
static uint32_t
s_payload_crc(const struct localsgd *s, size_t j)
{
    const uint8_t *p = s->gather.payload[j] + s->gather.len[j] - ANCHOR_CRC;
    uint32_t crc = 0;
    for (unsigned b = 0; b < ANCHOR_CRC; b++)
        crc |= (uint32_t)p[b] << (8 * b);
    return crc;
}

/* The anchors differ (the member at position j is the first whose
 * checksum is not position 0's): the sync is discarded as every member
 * discards it, the error memory and look-ahead are as before it, and the
 * fragment's anchor is dropped when the sync ends (s_sync_end). */
static rumor_err
s_discard(rumor_gossip *g, struct frag *fr, size_t j)
{
    struct localsgd *s = g->state;
    struct undo *u = &s->undo;
    rumor_err rc = RUMOR_OK;
    if (fr->e != NULL) {
        fr->e_steps = u->e_steps;
        rc = gossip_mem_copy(g,
                             fr->e,
                             u->e,
                             fr->len * sizeof(float),
                             GOSSIP_ON_DEVICE);
    }
    if (rc == RUMOR_OK && fr->u != NULL)
        rc = gossip_mem_copy(g,
                             fr->u,
                             u->u,
                             fr->len * sizeof(float),
                             GOSSIP_ON_DEVICE);
    fr->ahead = u->ahead;
    fr->ahead_nbr = u->ahead_nbr;
    fr->have_ebar = u->have_ebar;
    u->discard = true;
    bool first = fr->tentative && !s->warned;
    s->warned = s->warned || fr->tentative;
    rumor_log(first || !fr->tentative ? RUMOR_LOG_WARN : RUMOR_LOG_INFO,
              "gossip localsgd: node %u: %s (fragment %zu of %zu: anchor "
              "crc32c %08x at node %u, %08x at node %u): the sync is "
              "discarded on every node, the fragment's next sync averages "
              "the models exactly",
              g->self,
              fr->tentative ? "the nodes started from different models"
                            : "the nodes' anchors differ",
              (size_t)(fr - s->frag),
              s->frag_n,
              s_payload_crc(s, 0),
              g->ring[0],
              s_payload_crc(s, j),
              g->ring[j]);
    return rc;
}

/* Every payload decoded in node order (the members' positions): the same
 * bits on every member; first their anchors' checksums, the same verdict
 * on every member. */
static rumor_err
s_after_gather(rumor_gossip *g, struct frag *fr)
{
    struct localsgd *s = g->state;
    size_t differs = 0;
    for (size_t j = 0; j < g->ring_n; j++) {
        if (s->gather.len[j] < ANCHOR_CRC) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip localsgd: node %u: the delta of node %u has "
                      "no anchor checksum (%zu bytes)",
                      g->self,
                      g->ring[j],
                      s->gather.len[j]);
            return RUMOR_EPROTO;
        }
        if (differs == 0 && s_payload_crc(s, j) != s_payload_crc(s, 0))
            differs = j;
    }
    if (differs > 0)
        return s_discard(g, fr, differs);
    float *acc = s->acc + fr->off;
    rumor_err rc = g->be->zero(acc, fr->len * sizeof(float));
    float inv = 1.0f / (float)g->ring_n;
    for (size_t j = 0; j < g->ring_n && rc == RUMOR_OK; j++) {
        size_t len = s->gather.len[j] - ANCHOR_CRC;
        rc = g->be->decode_add(s->codec,
                               s->gather.payload[j],
                               len,
                               inv,
                               acc,
                               fr->len);
        g->pcie_h2d += g->be->host_memory ? 0 : len;
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
    if (rc == RUMOR_OK)
        rc = s_outer_step(g, fr);
    fr->tentative = fr->tentative && rc != RUMOR_OK;
    return rc;
}

/* After a compressed sync's last round: a discarded sync leaves the
 * fragment without an anchor (its next sync is exact), on every member
 * at the same step, so the rounds stay the same everywhere. */
static void
s_sync_end(struct localsgd *s, struct frag *fr)
{
    if (s->undo.discard) {
        fr->have_anchor = false;
        fr->tentative = false;
    }
    s->undo.discard = false;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    struct localsgd *s = g->state;
    struct frag *fr = s_frag_at(g, step);
    if (fr == NULL)
        return RUMOR_EINVAL;
    s->snap_current = false;
    if (s->compressed_sync && s_error_round(g, round)) {
        rumor_err rc = gossip_saef_absorb(&s->saef,
                                          g,
                                          step,
                                          fr->e,
                                          fr->off,
                                          fr->len,
                                          msgs,
                                          count);
        fr->have_ebar = rc == RUMOR_OK;
        if (rc == RUMOR_OK)
            s_sync_end(s, fr);
        return rc;
    }
    if (s->compressed_sync) {
        bool complete = false;
        rumor_err rc =
            gossip_gather_absorb(g, &s->gather, round, msgs, count, &complete);
        if (rc == RUMOR_OK && complete)
            rc = s_after_gather(g, fr);
        if (rc == RUMOR_OK && complete && !gossip_saef_exchanges(&s->saef, g))
            s_sync_end(s, fr);
        return rc;
    }
    rumor_err rc = rumor_gossip_absorb(fr->mixer, step, round, msgs, count);
    if (rc == RUMOR_OK && round + 1 == s_mixer_rounds(g, fr, step))
        rc = s_after_mix(g, fr);
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
    const struct frag *fr = s_frag_at(g, step);
    if (fr == NULL)
        return 0;
    if (s->codec != NULL && fr->have_anchor && s_error_round(g, round))
        return gossip_saef_expected(g, step, peers, cap);
    if (s->codec != NULL && fr->have_anchor)
        return gossip_expected_prev(g, step, round, peers, cap);
    size_t count = 0;
    rumor_gossip_expected(fr->mixer, step, round, peers, cap, &count);
    return count;
}

/* Every fragment's mixer's ring is this instance's. The members were
 * checked by the caller, so a mixer can only fail for memory: the
 * fragments set before it keep the new ring. */
static rumor_err
s_members(rumor_gossip *g, const uint32_t *members, size_t count)
{
    struct localsgd *s = g->state;
    s->snap_current = false;
    rumor_err rc = RUMOR_OK;
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++)
        rc = rumor_gossip_members_set(s->frag[f].mixer, members, count);
    return rc;
}

/* The look-ahead of one fragment, once after each of its syncs. */
static rumor_err
s_step_ahead_frag(rumor_gossip *g, struct frag *fr, float alpha)
{
    struct localsgd *s = g->state;
    const struct gossip_backend_i *be = g->be;
    if (!fr->have_anchor || fr->ahead != 0 || fr->ahead_nbr)
        return RUMOR_OK;
    s->snap_current = false;
    float *x = s->x + fr->off, *shift = s->shift + fr->off;
    rumor_err rc = gossip_model_read(g, fr->off, fr->len, x, GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK && fr->have_ebar) { /* the neighbourhood form */
        rc =
            be->add_scaled(shift, NULL, alpha, s->saef.ebar + fr->off, fr->len);
        if (rc == RUMOR_OK)
            rc = be->add_scaled(x, x, -1.0f, shift, fr->len);
    } else if (rc == RUMOR_OK) {
        rc = be->add_scaled(x, x, -alpha, fr->e, fr->len);
    }
    if (rc == RUMOR_OK)
        rc = gossip_model_write(g, fr->off, fr->len, x, GOSSIP_ON_DEVICE);
    if (rc != RUMOR_OK)
        return rc;
    fr->ahead_nbr = fr->have_ebar;
    fr->ahead = fr->have_ebar ? fr->ahead : alpha;
    return RUMOR_OK;
}

static rumor_err
s_step_ahead(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    float alpha = (float)g->opts.ef_alpha;
    if (s->codec == NULL || alpha == 0)
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++)
        rc = s_step_ahead_frag(g, &s->frag[f], alpha);
    return rc;
}

/* n floats of the model's memory into a state (a device's through a
 * host copy). */
static rumor_err
s_write_vec(const rumor_gossip *g,
            struct rumor_buf *out,
            const float *v,
            size_t n)
{
    if (g->be->host_memory)
        return gossip_write_f32(out, v, n);
    struct localsgd *s = g->state;
    s->saved_d2h += n * sizeof(float);
    float *host = malloc((n + 1) * sizeof *host);
    rumor_err rc = host != NULL
                       ? g->be->copy(host, v, n * sizeof *host, GOSSIP_TO_HOST)
                       : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, host, n);
    free(host);
    return rc;
}

/* n floats of a state into the model's memory (r->err first). */
static rumor_err
s_read_vec(const rumor_gossip *g, struct gossip_reader *r, float *v, size_t n)
{
    if (g->be->host_memory) {
        gossip_read_f32(r, v, n);
        return r->err;
    }
    float *host = malloc((n + 1) * sizeof *host);
    if (host == NULL)
        return RUMOR_ENOMEM;
    gossip_read_f32(r, host, n);
    rumor_err rc =
        r->err == RUMOR_OK
            ? g->be->copy(v, host, n * sizeof *host, GOSSIP_TO_DEVICE)
            : r->err;
    free(host);
    return rc;
}

/* The residual (and dgc's momentum) into the memory that saves it. */
static rumor_err
s_ef_to_host(const rumor_gossip *g, const struct frag *fr)
{
    struct localsgd *s = g->state;
    s->saved_d2h += fr->len * sizeof(float);
    rumor_ef_set_steps(fr->ef, fr->e_steps);
    rumor_err rc = g->be->copy(rumor_ef_residual(fr->ef, NULL),
                               fr->e,
                               fr->len * sizeof(float),
                               GOSSIP_TO_HOST);
    if (rc != RUMOR_OK || fr->u == NULL)
        return rc;
    s->saved_d2h += fr->len * sizeof(float);
    return g->be->copy(rumor_ef_momentum(fr->ef, NULL),
                       fr->u,
                       fr->len * sizeof(float),
                       GOSSIP_TO_HOST);
}

/* A restored memory's residual (and momentum) to the backend's. */
static rumor_err
s_ef_to_device(const rumor_gossip *g, struct frag *fr)
{
    size_t n = 0;
    const float *e = rumor_ef_error(fr->ef, &n);
    fr->e_steps = rumor_ef_steps(fr->ef);
    rumor_err rc = g->be->copy(fr->e, e, n * sizeof *e, GOSSIP_TO_DEVICE);
    return rc == RUMOR_OK && fr->u != NULL
               ? g->be->copy(fr->u,
                             rumor_ef_momentum(fr->ef, NULL),
                             n * sizeof *e,
                             GOSSIP_TO_DEVICE)
               : rc;
}

/* A u64-length blob of a fragment's error memory (empty without a delta
 * codec). */
static rumor_err
s_save_ef(const rumor_gossip *g, const struct frag *fr, struct rumor_buf *out)
{
    size_t ef_len = fr->ef != NULL ? rumor_ef_state_size(fr->ef) : 0;
    rumor_err rc = fr->e != NULL ? s_ef_to_host(g, fr) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, ef_len);
    if (rc == RUMOR_OK && ef_len > 0)
        rc = rumor_buf_reserve(out, ef_len);
    size_t written = 0;
    if (rc == RUMOR_OK && ef_len > 0)
        rc = rumor_ef_save(fr->ef, out->data + out->len, ef_len, &written);
    out->len += rc == RUMOR_OK ? written : 0;
    return rc;
}

/* A u64-length blob of a fragment's mixer state. */
static rumor_err
s_save_mixer(const rumor_gossip *g,
             const struct frag *fr,
             struct rumor_buf *out)
{
    const struct localsgd *s = g->state;
    size_t at = out->len;
    rumor_err rc = gossip_write_u64(out, 0); /* the length, patched */
    /* swapped in by s_snap_save: the mixer's snapshot */
    if (rc == RUMOR_OK)
        rc = s->snap_saving ? rumor_gossip_snapshot_save(fr->mixer, out)
                            : rumor_gossip_state_save(fr->mixer, out);
    if (rc == RUMOR_OK) {
        uint64_t len = out->len - at - 8;
        memcpy(out->data + at, &len, 8);
    }
    return rc;
}

/* Flag of the fragmented layout in the state's first word. */
#define FRAGMENTED 8u

/* A fragment's flags in a state: 1 have_anchor, 2 ahead_nbr, 4
 * have_ebar, 16 tentative (with 1; 8 alone is FRAGMENTED). */
#define TENTATIVE 16u

static uint32_t
s_flags(const rumor_gossip *g, const struct frag *fr)
{
    const struct localsgd *s = g->state;
    bool ebar = fr->have_ebar && s->saef.ebar != NULL;
    return (fr->have_anchor ? 1u : 0u) | (fr->ahead_nbr ? 2u : 0u) |
           (ebar ? 4u : 0u) | (fr->tentative ? TENTATIVE : 0u);
}

/* Flags a state may hold: the known bits, tentative only with an anchor
 * and a delta codec. */
static bool
s_flags_fit(const rumor_gossip *g, uint32_t flags)
{
    const struct localsgd *s = g->state;
    if ((flags & ~(7u | TENTATIVE)) != 0)
        return false;
    return (flags & TENTATIVE) == 0 || ((flags & 1u) != 0 && s->codec != NULL);
}

static rumor_err
s_save_one(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct localsgd *s = g->state;
    const struct frag *fr = &s->frag[0];
    bool ebar = (s_flags(g, fr) & 4u) != 0;
    rumor_err rc = gossip_write_u32(out, s_flags(g, fr));
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, &fr->ahead, 1);
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->anchor, g->numel);
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->velocity, g->numel);
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->shift, g->numel);
    if (rc == RUMOR_OK)
        rc = s_save_ef(g, fr, out);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, ebar ? g->numel : 0);
    if (rc == RUMOR_OK && ebar)
        rc = s_write_vec(g, out, s->saef.ebar, g->numel);
    return rc == RUMOR_OK ? s_save_mixer(g, fr, out) : rc;
}

/* Between steps: the anchor (the model of the last sync, or the initial
 * one while tentative), the outer momentum, the look-ahead applied since
 * the sync (alpha, or the shift of the neighbourhood form), the error
 * memory, the neighbourhood's e_bar and the mixer's own state. Layout
 * with one fragment: u32 flags (1 have_anchor, 2 ahead_nbr, 4 have_ebar,
 * 16 tentative), f32 ahead, anchor, velocity, shift (numel floats each),
 * the error memory as a u64-length blob
 * (rumor_ef_save; empty without a delta codec), u64 ebar floats (0 or
 * numel) and e_bar, the mixer's state as a blob. With F > 1 fragments:
 * u32 FRAGMENTED, u32 F, then per fragment u32 flags (as above, the
 * fragment's), f32 ahead, its error memory and mixer blobs; then anchor,
 * velocity, shift (numel floats each), u64 ebar floats (numel when a
 * fragment's flags have 4, else 0) and e_bar. */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct localsgd *s = g->state;
    if (s->frag_n == 1)
        return s_save_one(g, out);
    rumor_err rc = gossip_write_u32(out, FRAGMENTED);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, (uint32_t)s->frag_n);
    bool ebar = false;
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++) {
        const struct frag *fr = &s->frag[f];
        ebar = ebar || (s_flags(g, fr) & 4u) != 0;
        rc = gossip_write_u32(out, s_flags(g, fr));
        if (rc == RUMOR_OK)
            rc = gossip_write_f32(out, &fr->ahead, 1);
        if (rc == RUMOR_OK)
            rc = s_save_ef(g, fr, out);
        if (rc == RUMOR_OK)
            rc = s_save_mixer(g, fr, out);
    }
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->anchor, g->numel);
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->velocity, g->numel);
    if (rc == RUMOR_OK)
        rc = s_write_vec(g, out, s->shift, g->numel);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, ebar ? g->numel : 0);
    if (rc == RUMOR_OK && ebar)
        rc = s_write_vec(g, out, s->saef.ebar, g->numel);
    return rc;
}

/* A fragment's error memory bytes: checked on a scratch memory, or
 * restored (a load; an adopt keeps the own memory). */
static rumor_err
s_state_ef(rumor_gossip *g,
           struct frag *fr,
           const uint8_t *p,
           size_t len,
           enum gossip_state_mode mode)
{
    if ((fr->ef == NULL) != (len == 0))
        return RUMOR_EPROTO;
    if (len == 0 || mode == GOSSIP_STATE_ADOPT)
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    if (mode == GOSSIP_STATE_LOAD) {
        rc = rumor_ef_restore(fr->ef, p, len);
        return rc == RUMOR_OK && fr->e != NULL ? s_ef_to_device(g, fr) : rc;
    }
    rumor_ef *scratch = NULL;
    rc = rumor_ef_new(s_ef_spec(g), fr->len, &scratch, NULL);
    if (rc == RUMOR_OK)
        rc = rumor_ef_restore(scratch, p, len);
    rumor_ef_destroy(&scratch);
    return rc;
}

/* A fragment's error memory and mixer (mode as state_load's). */
static rumor_err
s_load_inner(rumor_gossip *g,
             struct frag *fr,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    size_t ef_len = 0, mix_len = 0;
    const uint8_t *ef = gossip_read_blob(r, &ef_len);
    const uint8_t *mix = gossip_read_blob(r, &mix_len);
    if (r->err != RUMOR_OK)
        return r->err;
    const char *why = "";
    rumor_err rc = s_state_ef(g, fr, ef, ef_len, mode);
    if (rc == RUMOR_OK)
        rc = gossip_state_read(fr->mixer, mix, mix_len, mode, r->peer, &why);
    if (rc != RUMOR_OK)
        gossip_reader_fail(r, rc, "an error memory or mixer that does not fit");
    return rc;
}

/* A fragment's flags, as the one-fragment layout's (an adopt keeps the
 * own e_bar). */
static void
s_set_flags(struct frag *fr, uint32_t flags, enum gossip_state_mode mode)
{
    fr->have_anchor = (flags & 1u) != 0;
    fr->tentative = (flags & TENTATIVE) != 0;
    fr->ahead_nbr = (flags & 2u) != 0;
    if (mode == GOSSIP_STATE_LOAD)
        fr->have_ebar = (flags & 4u) != 0;
}

/* The fragmented layout (its first word read): checked whole, then, for a
 * load or an adopt, applied fragment by fragment (a check came first, so
 * nothing fails half-way). */
static rumor_err
s_load_frags(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct localsgd *s = g->state;
    if (gossip_read_u32(r) != s->frag_n && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "another number of fragments");
    bool ebar = false;
    for (size_t f = 0; f < s->frag_n && r->err == RUMOR_OK; f++) {
        struct frag *fr = &s->frag[f];
        uint32_t flags = gossip_read_u32(r);
        float ahead = 0;
        gossip_read_f32(r, &ahead, 1);
        if (r->err == RUMOR_OK && !s_flags_fit(g, flags))
            gossip_reader_fail(r, RUMOR_EPROTO, "unknown fragment flags");
        ebar = ebar || (flags & 4u) != 0;
        /* the blobs are read the same in every mode */
        if (r->err != RUMOR_OK || s_load_inner(g, fr, r, mode) != RUMOR_OK)
            return r->err;
        if (mode != GOSSIP_STATE_CHECK) {
            s_set_flags(fr, flags, mode);
            fr->ahead = ahead;
        }
    }
    struct gossip_reader vectors = *r; /* read again once all fits */
    gossip_read_f32(r, NULL, 3 * g->numel);
    uint64_t ebar_len = gossip_read_u64(r);
    if (r->err == RUMOR_OK &&
        (ebar_len != (ebar ? g->numel : 0) || (ebar && s->saef.ebar == NULL)))
        gossip_reader_fail(r, RUMOR_EPROTO, "an e_bar that does not fit");
    gossip_read_f32(r, NULL, ebar ? g->numel : 0);
    if (r->err != RUMOR_OK || mode == GOSSIP_STATE_CHECK)
        return r->err;
    rumor_err rc = s_read_vec(g, &vectors, s->anchor, g->numel);
    if (rc == RUMOR_OK)
        rc = s_read_vec(g, &vectors, s->velocity, g->numel);
    if (rc == RUMOR_OK)
        rc = s_read_vec(g, &vectors, s->shift, g->numel);
    gossip_read_u64(&vectors);
    if (rc == RUMOR_OK && ebar && mode == GOSSIP_STATE_LOAD)
        rc = s_read_vec(g, &vectors, s->saef.ebar, g->numel);
    return rc;
}

/* The one-fragment layout (its first word and ahead read). */
static rumor_err
s_load_one(rumor_gossip *g,
           struct gossip_reader *r,
           uint32_t flags,
           enum gossip_state_mode mode)
{
    struct localsgd *s = g->state;
    struct frag *fr = &s->frag[0];
    float ahead = 0;
    gossip_read_f32(r, &ahead, 1);
    if (r->err == RUMOR_OK && s->frag_n != 1)
        gossip_reader_fail(r, RUMOR_EPROTO, "another number of fragments");
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
    rumor_err rc = s_state_ef(g, fr, ef, ef_len, mode);
    if (rc == RUMOR_OK)
        rc = gossip_state_read(fr->mixer, mix, mix_len, mode, r->peer, &why);
    if (rc != RUMOR_OK)
        gossip_reader_fail(r, rc, "an error memory or mixer that does not fit");
    if (rc != RUMOR_OK || mode == GOSSIP_STATE_CHECK)
        return rc;
    rc = s_read_vec(g, &vectors, s->anchor, g->numel);
    if (rc == RUMOR_OK)
        rc = s_read_vec(g, &vectors, s->velocity, g->numel);
    if (rc == RUMOR_OK)
        rc = s_read_vec(g, &vectors, s->shift, g->numel);
    s_set_flags(fr, flags, mode);
    fr->ahead = ahead;
    if (rc == RUMOR_OK && ebar && mode == GOSSIP_STATE_LOAD)
        rc = s_read_vec(g, &ebar_at, s->saef.ebar, g->numel);
    return rc;
}

/* An adopt takes what goes with the member's model (anchor, outer
 * velocity, the look-ahead applied to it) and keeps the own error memory
 * and e_bar (the neighbourhood's errors as this node weighs them). A
 * state of another number of fragments is refused: its schedule and
 * ranges differ. */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct localsgd *s = g->state;
    s->snap_current = s->snap_current && mode == GOSSIP_STATE_CHECK;
    uint32_t flags = gossip_read_u32(r);
    if (r->err == RUMOR_OK && flags == FRAGMENTED)
        return s_load_frags(g, r, mode);
    if (r->err == RUMOR_OK && !s_flags_fit(g, flags))
        gossip_reader_fail(r, RUMOR_EPROTO, "unknown flags");
    return s_load_one(g, r, flags, mode);
}

/* One vector device to device: into the snapshot (take, made on first
 * use) or back; nothing where the live one is absent or both are equal. */
static rumor_err
s_snap_vec(rumor_gossip *g, float *live, float **snap, size_t n, bool take)
{
    const struct localsgd *s = g->state;
    if (live == NULL || (s->snap_current && *snap != NULL))
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    if (*snap == NULL)
        rc = g->be->alloc(n * sizeof(float), (void **)snap);
    if (rc != RUMOR_OK)
        return rc;
    return take ? gossip_mem_copy(g,
                                  *snap,
                                  live,
                                  n * sizeof(float),
                                  GOSSIP_ON_DEVICE)
                : gossip_mem_copy(g,
                                  live,
                                  *snap,
                                  n * sizeof(float),
                                  GOSSIP_ON_DEVICE);
}

/* The state one way: the vectors and residuals device to device, the
 * fragments' fields and the mixers' own snapshots. */
static rumor_err
s_snap_move(rumor_gossip *g, bool take)
{
    struct localsgd *s = g->state;
    rumor_err rc = s_snap_vec(g, s->anchor, &s->snap_anchor, g->numel, take);
    if (rc == RUMOR_OK)
        rc = s_snap_vec(g, s->velocity, &s->snap_velocity, g->numel, take);
    if (rc == RUMOR_OK)
        rc = s_snap_vec(g, s->shift, &s->snap_shift, g->numel, take);
    if (rc == RUMOR_OK)
        rc = s_snap_vec(g, s->saef.ebar, &s->snap_ebar, g->numel, take);
    for (size_t f = 0; f < s->frag_n && rc == RUMOR_OK; f++) {
        struct frag *fr = &s->frag[f], *sn = &s->snap_frag[f];
        float *e = sn->e, *live_e = fr->e, *u = sn->u, *live_u = fr->u;
        rc = s_snap_vec(g, fr->e, &e, fr->len, take);
        if (rc == RUMOR_OK)
            rc = s_snap_vec(g, fr->u, &u, fr->len, take);
        if (rc == RUMOR_OK && take) {
            *sn = *fr;
            sn->e = e;
            sn->u = u;
        } else if (rc == RUMOR_OK) {
            *fr = *sn;
            fr->e = live_e;
            fr->u = live_u;
        }
        if (rc == RUMOR_OK)
            rc = take ? rumor_gossip_snapshot(fr->mixer)
                      : rumor_gossip_snapshot_restore(fr->mixer);
    }
    s->snap_current = rc == RUMOR_OK;
    return rc;
}

static rumor_err
s_snap_take(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    if (s->snap_frag == NULL)
        s->snap_frag = calloc(s->frag_n, sizeof *s->snap_frag);
    if (s->snap_frag == NULL)
        return RUMOR_ENOMEM;
    return s_snap_move(g, true);
}

static rumor_err
s_snap_restore(rumor_gossip *g)
{
    return s_snap_move(g, false);
}

static void
s_swap_vec(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

/* The snapshot and the live state exchanged (pointers and fields). */
static void
s_snap_swap(struct localsgd *s)
{
    s_swap_vec(&s->anchor, &s->snap_anchor);
    s_swap_vec(&s->velocity, &s->snap_velocity);
    s_swap_vec(&s->shift, &s->snap_shift);
    s_swap_vec(&s->saef.ebar, &s->snap_ebar);
    for (size_t f = 0; f < s->frag_n; f++) {
        struct frag t = s->frag[f];
        s->frag[f] = s->snap_frag[f];
        s->snap_frag[f] = t;
    }
    s->snap_saving = !s->snap_saving;
}

/* state_save with the snapshot swapped in for the live state (a step may
 * be open: nothing runs in between), and back. */
static rumor_err
s_snap_save(const rumor_gossip *g, struct rumor_buf *out)
{
    struct localsgd *s = g->state;
    s_snap_swap(s);
    rumor_err rc = s_state_save(g, out);
    s_snap_swap(s);
    return rc;
}

/* The mixers' steps end with this one's. */
static void
s_abandon(rumor_gossip *g)
{
    struct localsgd *s = g->state;
    s->snap_current = false;
    for (size_t f = 0; f < s->frag_n; f++)
        rumor_gossip_step_abandon(s->frag[f].mixer);
    s->compressed_sync = false;
    s->undo.discard = false;
}

void
gossip_localsgd_screen(const rumor_gossip *g,
                       struct rumor_gossip_screen_stats *out)
{
    const struct localsgd *s = g->state;
    for (size_t f = 0; s != NULL && s->frag != NULL && f < s->frag_n; f++) {
        const rumor_gossip *mixer = s->frag[f].mixer;
        if (mixer == NULL)
            continue;
        out->nonfinite += mixer->screen.nonfinite;
        out->malformed += mixer->screen.malformed;
        out->clipped += mixer->screen.clipped;
        out->screened += mixer->screen.screened;
        out->outsized += mixer->screen.outsized;
        if (f == s->last)
            out->clip_radius = mixer->screen.clip_radius;
    }
}

/* The mixers' copies (the model's fragments to and from the host when
 * averaging exactly) and the error round's payloads. */
static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    const struct localsgd *s = g->state;
    for (size_t f = 0; f < s->frag_n; f++) {
        uint64_t in = 0, out = 0;
        rumor_gossip_pcie_bytes(s->frag[f].mixer, &in, &out);
        *h2d += in;
        *d2h += out;
    }
    *h2d += s->saef.pcie_h2d;
    *d2h += s->saef.pcie_d2h + s->saved_d2h;
}

const struct gossip_algo_i gossip_localsgd = {
    .name = "localsgd",
    .pcie = s_pcie,
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .exchanges = s_exchanges,
    .emit = s_emit,
    .expected = s_expected,
    .uses_ring = s_uses_ring,
    .absorb = s_absorb,
    .step_ahead = s_step_ahead,
    .members = s_members,
    .state_save = s_state_save,
    .state_load = s_state_load,
    .abandon = s_abandon,
    .snap_take = s_snap_take,
    .snap_restore = s_snap_restore,
    .snap_save = s_snap_save,
};
