/*
 * Adaptive compression (issue #12; docs/adaptive.md): the per-link byte
 * budget, the message codec that lets every layer of every message use
 * its own settings, and the public reporting functions. The controllers
 * themselves are in adapt_ctl.c.
 *
 * Link estimation uses the gossip traffic only (no probes): a driver
 * reports, for each neighbour's message of a round, how many bytes it
 * carried and how long after this node's own send of that round it
 * arrived. Alone, that elapsed time mixes the link with the skew of the
 * two nodes (a neighbour that started late looks like a slow link, one
 * that started early like an infinitely fast one). So a per-link message
 * starts with a 12-byte link header carrying the sender's own last
 * measurement on that link (docs/protocol.md, "Adaptive messages"): with
 * tau_i = s_j - s_i + a + L_j / r and tau_j = s_i - s_j + a + L_i / r,
 * the pair's sum 2a + (L_i + L_j) / r has no skew, and one sample is
 * (L_i + L_j bytes, tau_i + tau_j seconds). Until a peer's report arrives
 * (and for the fixed controller, whose messages must stay the packer's
 * bytes) a sample is this node's side alone. Over the last
 * GOSSIP_ADAPT_WINDOW samples the throughput is the ratio of sums (bytes
 * / seconds: robust to one sample that is off) and the round-trip time
 * the smallest sample time. The budget of a message is
 *     B = rate * T_comm,   T_comm = share / (1 - share) * T_compute,
 * so that communication takes the share `comm_share` of the step, but
 * never less than the latency the window shows (see the floor below:
 * sending less than a latency's worth saves no time). Because
 * a sample's elapsed includes the link latency a, the loop B -> bytes ->
 * rate settles at B = r (T_comm - a): latency is paid out of the budget
 * without being modelled. A budget follows a rate change within the
 * window (4 steps).
 *
 * Settings travel in each payload's own header; the receiver builds its
 * decoder from that header (rumor_codec_spec_of_payload), caching the last
 * codec per layer, so decoding never depends on the receiver's options.
 */
#include "gossip/adapt.h"
#include "core/le.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_COMPUTE_EMA 0.3 /* weight of a new compute-time sample */
#define S_CORR_MIN    0.25
#define S_CORR_MAX    4.0
#define S_OVER        1.02 /* bytes over budget that trigger a trim */
#define S_UNDER       0.97 /* bytes under budget that trigger a fill */
#define S_TRIMS       2    /* re-encodes at most per message */
#define S_GROWTH      2.0  /* a budget grows at most this much per step */

static const struct gossip_ctl_i *const s_ctls[] = {
    &gossip_ctl_fixed,
    &gossip_ctl_rule,
    &gossip_ctl_learned,
};

static rumor_err
s_links(struct gossip_adapt *a, const rumor_gossip *g)
{
    size_t peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, 0, g->self, &peers, &w);
    a->nlinks = peers;
    /* A node without neighbours still encodes: one link for it. */
    a->links = calloc(peers > 0 ? peers : 1, sizeof *a->links);
    if (a->links == NULL)
        return RUMOR_ENOMEM;
    for (size_t l = 0; l < (peers > 0 ? peers : 1); l++) {
        struct gossip_link *k = &a->links[l];
        k->peer = peers > 0 ? nbr[l] : g->self;
        k->corr = 1.0;
        k->layers = calloc(a->layers, sizeof *k->layers);
        if (k->layers == NULL)
            return RUMOR_ENOMEM;
        for (size_t t = 0; t < a->layers; t++) {
            struct gossip_layer *y = &k->layers[t];
            y->n = rumor_tensor_numel(&g->tensors[t]);
            /* qsgd's error bound for one bucket, until observed */
            double m =
                (double)(y->n < GOSSIP_ADAPT_BUCKET ? y->n
                                                    : GOSSIP_ADAPT_BUCKET);
            y->cal = sqrt(m / 6.0);
            y->var_ema = -1; /* none yet */
        }
    }
    return RUMOR_OK;
}

static rumor_err
s_check_opts(const struct rumor_gossip_opts *o, struct rumor_diag *diag)
{
    if (!(o->comm_share >= 0 && o->comm_share < 1)) {
        rumor_diag_set(diag, "", 0, 0, "adapt: comm_share must be in [0, 1)");
        return RUMOR_EINVAL;
    }
    if (!(o->adapt_density > 0 && o->adapt_density <= 1) ||
        !(o->adapt_error > 0) || !(o->adapt_lambda >= 0)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "adapt: density must be in (0, 1], error > 0, "
                       "lambda >= 0");
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

rumor_err
gossip_adapt_new(const rumor_gossip *g,
                 struct gossip_adapt **out,
                 struct rumor_diag *diag)
{
    *out = NULL;
    const struct gossip_ctl_i *ctl = NULL;
    for (size_t i = 0; i < sizeof s_ctls / sizeof s_ctls[0]; i++)
        if (strcmp(s_ctls[i]->name, g->opts.adapt) == 0)
            ctl = s_ctls[i];
    if (ctl == NULL) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "unknown controller '%s' (fixed, rule, learned)",
                       g->opts.adapt);
        return RUMOR_EINVAL;
    }
    rumor_err rc = s_check_opts(&g->opts, diag);
    if (rc != RUMOR_OK)
        return rc;
    struct gossip_adapt *a = calloc(1, sizeof *a);
    if (a == NULL)
        return RUMOR_ENOMEM;
    a->ctl = ctl;
    a->opts = &g->opts;
    a->layers = g->tensor_count;
    a->dense_bytes = 4 * g->numel;
    a->enc = calloc(a->layers, sizeof *a->enc);
    a->dec = calloc(a->layers, sizeof *a->dec);
    a->enc_spec = calloc(a->layers, sizeof *a->enc_spec);
    a->dec_spec = calloc(a->layers, sizeof *a->dec_spec);
    a->be = g->be;
    size_t floats = g->numel * sizeof(float);
    rc = a->enc && a->dec && a->enc_spec && a->dec_spec ? RUMOR_OK
                                                        : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = a->be->alloc(floats, (void **)&a->vec);
    if (rc == RUMOR_OK)
        rc = a->be->alloc(floats, (void **)&a->approx);
    if (rc == RUMOR_OK)
        rc = a->be->alloc(floats, (void **)&a->scratch);
    if (rc == RUMOR_OK)
        rc = rumor_codec_new(g->opts.codec, &a->base, diag);
    if (rc == RUMOR_OK)
        rc = s_links(a, g);
    if (rc != RUMOR_OK) {
        gossip_adapt_destroy(&a);
        return rc;
    }
    *out = a;
    return RUMOR_OK;
}

void
gossip_adapt_destroy(struct gossip_adapt **a_p)
{
    struct gossip_adapt *a = *a_p;
    if (a == NULL)
        return;
    for (size_t t = 0; t < a->layers; t++) {
        if (a->enc != NULL)
            rumor_codec_destroy(&a->enc[t]);
        if (a->dec != NULL)
            rumor_codec_destroy(&a->dec[t]);
    }
    for (size_t l = 0; a->links != NULL && l < (a->nlinks ? a->nlinks : 1);
         l++) {
        free(a->links[l].layers);
        free(a->links[l].buf);
    }
    rumor_codec_destroy(&a->base);
    free(a->links);
    free(a->enc);
    free(a->dec);
    free(a->enc_spec);
    free(a->dec_spec);
    if (a->be != NULL) {
        a->be->release(a->vec);
        a->be->release(a->approx);
        a->be->release(a->scratch);
    }
    free(a);
    *a_p = NULL;
}

rumor_err
gossip_adapt_attach(rumor_gossip *g, struct rumor_diag *diag)
{
    /* PowerSGD adapts its rank inside powersgd.c (one rank for all nodes,
     * chosen from all-reduced errors), with no per-link machinery. */
    bool psgd_ctl = strcmp(g->opts.adapt, "fixed") == 0 ||
                    strcmp(g->opts.adapt, "rule") == 0;
    if (g->algo == &gossip_powersgd && psgd_ctl)
        return RUMOR_OK;
    if (g->algo != &gossip_choco) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "adaptive compression applies to --algo choco "
                       "(fixed, rule, learned) and powersgd (fixed, rule)");
        return RUMOR_EINVAL;
    }
    rumor_err rc = gossip_adapt_new(g, &g->adapt, diag);
    if (rc == RUMOR_OK && g->adapt->ctl->per_link)
        g->algo = &gossip_choco_edge;
    return rc;
}

size_t
gossip_adapt_link_of(const struct gossip_adapt *a, uint32_t peer)
{
    for (size_t l = 0; l < a->nlinks; l++)
        if (a->links[l].peer == peer)
            return l;
    return a->nlinks;
}

double
gossip_adapt_budget(const struct gossip_adapt *a, const struct gossip_link *l)
{
    size_t m =
        l->samples < GOSSIP_ADAPT_WINDOW ? l->samples : GOSSIP_ADAPT_WINDOW;
    if (a->opts->comm_share <= 0 || m == 0 || a->compute_s <= 0)
        return 0;
    double bytes = 0, secs = 0;
    for (size_t i = 0; i < m; i++) {
        bytes += l->rate[i] * l->tau[i];
        secs += l->tau[i];
    }
    if (secs <= 0)
        return 0;
    double share = a->opts->comm_share;
    double t_comm = share / (1 - share) * a->compute_s;
    /* The latency floor: a sample's time beyond what its bytes take at
     * the window's rate (zero when all samples are alike; the latency
     * shows when the sizes differ). Below it a smaller message saves no
     * time, so a step whose compute is shorter than the latency does not
     * starve its messages. */
    double floor = secs;
    for (size_t i = 0; i < m; i++) {
        double extra = l->tau[i] - l->rate[i] * l->tau[i] * secs / bytes;
        floor = fmin(floor, fmax(extra, 0));
    }
    return bytes / secs * fmax(t_comm, floor);
}

/* --- link measurements ---------------------------------------------------- */

static void
s_sample(struct gossip_link *k, double bytes, double tau)
{
    size_t i = k->samples % GOSSIP_ADAPT_WINDOW;
    k->tau[i] = tau;
    k->rate[i] = bytes / tau;
    k->samples++;
}

/* The link header: the tag, elapsed (us) and bytes of this node's last
 * measurement on the link (zeros before the first). */
static void
s_link_header(const struct gossip_link *k, uint8_t *out)
{
    uint32_t tag = 0, us = 0, bytes = 0;
    if (k->sent > 0 && k->mine[k->sent % 4].tag == k->sent) {
        double t = k->mine[k->sent % 4].tau * 1e6;
        tag = k->sent;
        us = t >= UINT32_MAX ? UINT32_MAX : (uint32_t)t;
        bytes = k->mine[k->sent % 4].bytes;
    }
    core_put_u32(out, tag);
    core_put_u32(out + 4, us);
    core_put_u32(out + 8, bytes);
}

static void
s_spec_of(const struct gossip_choice *c, size_t n, char *spec, size_t cap)
{
    char values[64];
    if (c->bits >= 32)
        snprintf(values, sizeof values, "fp32");
    else
        snprintf(values,
                 sizeof values,
                 "qsgd:bits=%u,bucket=%d",
                 c->bits,
                 GOSSIP_ADAPT_BUCKET);
    if (c->k >= n)
        snprintf(spec, cap, "%s", values);
    else
        snprintf(spec, cap, "topk:k=%zu|%s", c->k, values);
}

/* The codec of a choice for layer t, reusing the last one when the same. */
static rumor_err
s_encoder(struct gossip_adapt *a,
          size_t t,
          const struct gossip_choice *c,
          size_t n,
          const rumor_codec **out)
{
    if (c->k == 0) {
        *out = a->base;
        return RUMOR_OK;
    }
    char spec[RUMOR_COMPRESS_SPEC_MAX];
    s_spec_of(c, n, spec, sizeof spec);
    if (a->enc[t] == NULL || strcmp(spec, a->enc_spec[t]) != 0) {
        rumor_codec_destroy(&a->enc[t]);
        rumor_err rc = rumor_codec_new(spec, &a->enc[t], NULL);
        if (RUMOR_NEVER(rc != RUMOR_OK))
            return rc; /* our own spec text always parses */
        snprintf(a->enc_spec[t], sizeof a->enc_spec[t], "%s", spec);
    }
    *out = a->enc[t];
    return RUMOR_OK;
}

static rumor_err
s_reserve(struct gossip_link *l, size_t need)
{
    if (need <= l->cap)
        return RUMOR_OK;
    size_t cap = need + need / 2;
    uint8_t *b = realloc(l->buf, cap);
    if (b == NULL)
        return RUMOR_ENOMEM;
    l->buf = b;
    l->cap = cap;
    return RUMOR_OK;
}

/* Fills a->vec with the message's vector and the layers' statistics
 * (in the backend's memory, its reduction). */
static rumor_err
s_measure(struct gossip_adapt *a,
          const rumor_gossip *g,
          struct gossip_link *l,
          gossip_fill_fn fill,
          void *arg)
{
    size_t base = 0;
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        rumor_err rc = fill(g, t, base, a->vec + base, arg);
        if (rc != RUMOR_OK)
            return rc;
        rc = a->be->stats(a->vec + base, y->n, &y->st);
        if (rc != RUMOR_OK)
            return rc;
        y->var_ema =
            y->var_ema < 0 ? y->st.var : 0.8 * y->var_ema + 0.2 * y->st.var;
        base += y->n;
    }
    return RUMOR_OK;
}

/* One layer of a->vec encoded into out and its C(x) into a->approx: on
 * the host by the encode itself, on a device by decoding the bytes (the
 * same values: rumor_codec_encode's approx is what decode produces). */
static rumor_err
s_encode_one(struct gossip_adapt *a,
             const rumor_codec *codec,
             size_t base,
             size_t n,
             uint64_t seed,
             uint64_t step,
             uint8_t *out,
             size_t cap,
             size_t *written)
{
    if (a->be->host_memory)
        return rumor_codec_encode(codec,
                                  a->vec + base,
                                  n,
                                  seed,
                                  step,
                                  out,
                                  cap,
                                  written,
                                  a->approx + base);
    rumor_err rc =
        a->be->encode(codec, a->vec + base, n, seed, step, out, cap, written);
    if (rc == RUMOR_OK) {
        a->pcie_d2h += *written;
        a->pcie_h2d += *written;
        rc = a->be->decode(codec, out, *written, a->approx + base, n);
    }
    return rc;
}

static rumor_err
s_encode_layers(struct gossip_adapt *a,
                const rumor_gossip *g,
                struct gossip_link *l,
                bool broadcast,
                uint64_t step)
{
    size_t at = broadcast ? 0 : GOSSIP_ADAPT_LINK_HEADER, base = 0;
    rumor_err rc0 = s_reserve(l, at);
    if (rc0 != RUMOR_OK)
        return rc0;
    if (!broadcast)
        s_link_header(l, l->buf);
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        const rumor_codec *codec = NULL;
        size_t bound = 0, written = 0;
        bool exact = false;
        rumor_err rc = s_encoder(a, t, &y->c, y->n, &codec);
        if (rc == RUMOR_OK)
            rc = rumor_codec_encoded_size(codec, y->n, &bound, &exact);
        if (rc == RUMOR_OK)
            rc = s_reserve(l, at + 4 + bound);
        /* Broadcast: the packer's seeds, so fixed runs keep their bits. */
        uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, t);
        if (!broadcast)
            seed = rumor_seed_derive(seed, l->peer, 1);
        if (rc == RUMOR_OK)
            rc = s_encode_one(a,
                              codec,
                              base,
                              y->n,
                              seed,
                              step,
                              l->buf + at + 4,
                              l->cap - at - 4,
                              &written);
        if (rc == RUMOR_OK)
            rc = a->be->rel_error(a->vec + base,
                                  a->approx + base,
                                  y->n,
                                  &y->err,
                                  &y->q_err);
        if (rc != RUMOR_OK)
            return rc;
        core_put_u32(l->buf + at, (uint32_t)written);
        at += 4 + written;
        base += y->n;
    }
    l->len = at;
    return RUMOR_OK;
}

/* Moves the bytes model's correction towards what the budget asked for,
 * when the budget (not a layer's dense size) limited the message. */
static void
s_correct(const struct gossip_adapt *a, struct gossip_link *l, double budget)
{
    bool limited = false;
    for (size_t t = 0; t < a->layers; t++)
        limited |= l->layers[t].c.k < l->layers[t].n ||
                   l->layers[t].c.bits < GOSSIP_ADAPT_MAX_BITS;
    if (!limited || l->len == 0 || budget <= 0)
        return;
    double c = l->corr * budget / (double)l->len;
    l->corr = c < S_CORR_MIN ? S_CORR_MIN : c > S_CORR_MAX ? S_CORR_MAX : c;
}

/* After an encode more than S_OVER over or S_UNDER under its budget (the
 * bytes model is an estimate: the Rice stream's length depends on the
 * gaps), moves the difference into or out of the sparse layer with the
 * most kept elements; false when none is sparse or nothing would change. */
static bool
s_refit(struct gossip_link *l, size_t layers, double budget)
{
    bool over = (double)l->len > budget * S_OVER;
    if (!over && (double)l->len >= budget * S_UNDER)
        return false;
    struct gossip_layer *big = NULL;
    for (size_t t = 0; t < layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        if (y->c.k > 1 && y->c.k < y->n && (big == NULL || y->c.k > big->c.k))
            big = y;
    }
    if (big == NULL)
        return false;
    double per = gossip_adapt_layer_bytes(big->n, big->c.k, big->c.bits) /
                 (double)big->c.k;
    size_t k = big->c.k;
    if (over) {
        size_t dk = (size_t)(((double)l->len - budget) / per) + 1;
        big->c.k = dk < k ? k - dk : 1;
    } else {
        size_t dk = (size_t)((budget - (double)l->len) / per);
        big->c.k = dk < big->n - k ? k + dk : big->n - 1;
    }
    return big->c.k != k;
}

rumor_err
gossip_adapt_encode(struct gossip_adapt *a,
                    const rumor_gossip *g,
                    size_t link,
                    uint64_t step,
                    gossip_fill_fn fill,
                    void *arg,
                    const uint8_t **data,
                    size_t *len)
{
    bool all = link == GOSSIP_ADAPT_ALL;
    struct gossip_link *l = &a->links[all ? 0 : link];
    rumor_err rc = s_measure(a, g, l, fill, arg);
    if (rc != RUMOR_OK)
        return rc;
    double budget = gossip_adapt_budget(a, l);
    double start = a->opts->adapt_density * (double)a->dense_bytes;
    if (budget <= 0)
        budget = start;
    /* At most S_GROWTH times the last message: one sample whose reply
     * was already waiting (elapsed ~ 0) must not send the whole model;
     * decreases apply at once. */
    if (l->bytes > 0 && budget > S_GROWTH * (double)l->bytes)
        budget = fmax(S_GROWTH * (double)l->bytes, start);
    a->ctl->choose(a, l, budget * (a->ctl->per_link ? l->corr : 1.0));
    rc = s_encode_layers(a, g, l, all, step);
    for (int again = 0; again < S_TRIMS && rc == RUMOR_OK && a->ctl->per_link &&
                        s_refit(l, a->layers, budget);
         again++)
        rc = s_encode_layers(a, g, l, all, step);
    if (rc != RUMOR_OK)
        return rc;
    if (a->ctl->per_link)
        s_correct(a, l, budget);
    if (a->ctl->learn != NULL)
        a->ctl->learn(a, l);
    l->budget = (uint64_t)budget;
    l->bytes = l->len;
    l->sent++;
    for (size_t k = 1; all && k < a->nlinks; k++) {
        struct gossip_link *o = &a->links[k];
        memcpy(o->layers, l->layers, a->layers * sizeof *l->layers);
        o->budget = (uint64_t)gossip_adapt_budget(a, o);
        o->bytes = l->len;
        o->sent++;
    }
    *data = l->buf;
    *len = l->len;
    return RUMOR_OK;
}

/* The decoder of a payload of layer t: the cached one when its header
 * names the same settings. */
static rumor_err
s_decoder(struct gossip_adapt *a,
          size_t t,
          const uint8_t *in,
          size_t len,
          const rumor_codec **out)
{
    char spec[RUMOR_COMPRESS_SPEC_MAX];
    rumor_err rc = rumor_codec_spec_of_payload(in, len, spec, sizeof spec);
    if (rc != RUMOR_OK)
        return RUMOR_EPROTO;
    if (a->dec[t] == NULL || strcmp(spec, a->dec_spec[t]) != 0) {
        rumor_codec_destroy(&a->dec[t]);
        a->dec_spec[t][0] = '\0';
        rc = rumor_codec_new(spec, &a->dec[t], NULL);
        if (rc != RUMOR_OK)
            return rc == RUMOR_ENOMEM ? rc : RUMOR_EPROTO;
        snprintf(a->dec_spec[t], sizeof a->dec_spec[t], "%s", spec);
    }
    *out = a->dec[t];
    return RUMOR_OK;
}

rumor_err
gossip_adapt_stage(struct gossip_adapt *a,
                   const rumor_gossip *g,
                   const uint8_t *data,
                   size_t len,
                   double weight,
                   double *into)
{
    size_t at = 0, base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        if (len - at < 4)
            return RUMOR_EPROTO;
        uint32_t plen = core_get_u32(data + at);
        at += 4;
        if (plen > len - at)
            return RUMOR_EPROTO;
        const rumor_codec *codec = NULL;
        rumor_err rc = s_decoder(a, t, data + at, plen, &codec);
        if (rc == RUMOR_OK)
            rc = a->be->decode(codec, data + at, plen, a->scratch, n);
        if (rc == RUMOR_OK)
            rc = a->be->accum(into + base, weight, a->scratch, n);
        if (rc != RUMOR_OK)
            return rc;
        if (!a->be->host_memory)
            a->pcie_h2d += plen;
        at += plen;
        base += n;
    }
    return at == len ? RUMOR_OK : RUMOR_EPROTO;
}

void
gossip_adapt_pcie(const struct gossip_adapt *a, uint64_t *h2d, uint64_t *d2h)
{
    *h2d += a->pcie_h2d;
    *d2h += a->pcie_d2h;
}

rumor_err
gossip_adapt_body(const uint8_t *data,
                  size_t len,
                  const uint8_t **body,
                  size_t *blen)
{
    if (len < GOSSIP_ADAPT_LINK_HEADER)
        return RUMOR_EPROTO;
    *body = data + GOSSIP_ADAPT_LINK_HEADER;
    *blen = len - GOSSIP_ADAPT_LINK_HEADER;
    return RUMOR_OK;
}

void
gossip_adapt_peer_report(struct gossip_adapt *a,
                         size_t link,
                         const uint8_t *data,
                         size_t len)
{
    if (link >= a->nlinks || len < GOSSIP_ADAPT_LINK_HEADER)
        return;
    struct gossip_link *k = &a->links[link];
    uint32_t tag = core_get_u32(data), us = core_get_u32(data + 4);
    uint32_t bytes = core_get_u32(data + 8);
    if (tag == 0 || us == 0 || k->mine[tag % 4].tag != tag)
        return; /* nothing measured yet, or a pair this node lost */
    k->sym = true;
    double tau = k->mine[tag % 4].tau + (double)us * 1e-6;
    if (tau > 0)
        s_sample(k, (double)bytes + (double)k->mine[tag % 4].bytes, tau);
}

/* --- checkpoints ------------------------------------------------------ */

/* Per link: u32 peer, f64 rate[W], f64 tau[W], u64 samples, 4 x (u32
 * tag, f64 tau, u32 bytes), u32 sent, u32 sym, f64 corr, u64 budget, u64
 * bytes, then per layer f64 var_ema, cal, err, q_err, u64 k, u32 bits. */
static rumor_err
s_link_save(const struct gossip_adapt *a,
            const struct gossip_link *k,
            struct rumor_buf *out)
{
    rumor_err rc = gossip_write_u32(out, k->peer);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, k->rate, GOSSIP_ADAPT_WINDOW);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, k->tau, GOSSIP_ADAPT_WINDOW);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, k->samples);
    for (size_t i = 0; i < 4 && rc == RUMOR_OK; i++) {
        rc = gossip_write_u32(out, k->mine[i].tag);
        if (rc == RUMOR_OK)
            rc = gossip_write_f64(out, &k->mine[i].tau, 1);
        if (rc == RUMOR_OK)
            rc = gossip_write_u32(out, k->mine[i].bytes);
    }
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, k->sent);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, k->sym ? 1 : 0);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, &k->corr, 1);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, k->budget);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, k->bytes);
    for (size_t t = 0; t < a->layers && rc == RUMOR_OK; t++) {
        const struct gossip_layer *y = &k->layers[t];
        double v[4] = {y->var_ema, y->cal, y->err, y->q_err};
        rc = gossip_write_f64(out, v, 4);
        if (rc == RUMOR_OK)
            rc = gossip_write_u64(out, y->c.k);
        if (rc == RUMOR_OK)
            rc = gossip_write_u32(out, y->c.bits);
    }
    return rc;
}

/* f64 compute_s, f64 theta[GOSSIP_ADAPT_FEATURES], u64 links, u64
 * layers, then every link. */
rumor_err
gossip_adapt_state_save(const struct gossip_adapt *a, struct rumor_buf *out)
{
    rumor_err rc = gossip_write_f64(out, &a->compute_s, 1);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, a->theta, GOSSIP_ADAPT_FEATURES);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, a->nlinks);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, a->layers);
    for (size_t l = 0; l < a->nlinks && rc == RUMOR_OK; l++)
        rc = s_link_save(a, &a->links[l], out);
    return rc;
}

/* One layer: a choice beyond the layer's size, or bits that no codec of
 * a controller uses, is refused. */
static void
s_layer_load(struct gossip_reader *r, struct gossip_layer *y, bool apply)
{
    double v[4] = {0};
    gossip_read_f64(r, v, 4);
    uint64_t kk = gossip_read_u64(r);
    uint32_t bits = gossip_read_u32(r);
    bool bits_ok =
        bits == 0 || bits == 32 ||
        (bits >= GOSSIP_ADAPT_MIN_BITS && bits <= GOSSIP_ADAPT_MAX_BITS);
    if (kk > y->n || !bits_ok)
        gossip_reader_fail(r, RUMOR_EPROTO, "a layer setting out of range");
    if (!apply || r->err != RUMOR_OK)
        return;
    y->var_ema = v[0];
    y->cal = v[1];
    y->err = v[2];
    y->q_err = v[3];
    y->c.k = (size_t)kk;
    y->c.bits = bits;
}

static void
s_link_load(struct gossip_adapt *a,
            struct gossip_reader *r,
            struct gossip_link *k,
            bool apply)
{
    struct gossip_link in = {0};
    if (gossip_read_u32(r) != k->peer)
        gossip_reader_fail(r, RUMOR_EPROTO, "a link to another peer");
    gossip_read_f64(r, in.rate, GOSSIP_ADAPT_WINDOW);
    gossip_read_f64(r, in.tau, GOSSIP_ADAPT_WINDOW);
    in.samples = gossip_read_u64(r);
    for (size_t i = 0; i < 4; i++) {
        in.mine[i].tag = gossip_read_u32(r);
        gossip_read_f64(r, &in.mine[i].tau, 1);
        in.mine[i].bytes = gossip_read_u32(r);
    }
    in.sent = gossip_read_u32(r);
    uint32_t sym = gossip_read_u32(r);
    gossip_read_f64(r, &in.corr, 1);
    in.budget = gossip_read_u64(r);
    in.bytes = gossip_read_u64(r);
    if (sym > 1 || !(in.corr >= S_CORR_MIN && in.corr <= S_CORR_MAX))
        gossip_reader_fail(r, RUMOR_EPROTO, "a link estimate out of range");
    for (size_t t = 0; t < a->layers; t++)
        s_layer_load(r, &k->layers[t], apply);
    if (!apply || r->err != RUMOR_OK)
        return;
    memcpy(k->rate, in.rate, sizeof k->rate);
    memcpy(k->tau, in.tau, sizeof k->tau);
    k->samples = in.samples;
    memcpy(k->mine, in.mine, sizeof k->mine);
    k->sent = in.sent;
    k->sym = sym == 1;
    k->corr = in.corr;
    k->budget = in.budget;
    k->bytes = in.bytes;
}

rumor_err
gossip_adapt_state_load(struct gossip_adapt *a,
                        struct gossip_reader *r,
                        bool apply)
{
    double compute_s = 0, theta[GOSSIP_ADAPT_FEATURES] = {0};
    gossip_read_f64(r, &compute_s, 1);
    gossip_read_f64(r, theta, GOSSIP_ADAPT_FEATURES);
    gossip_read_len(r, a->nlinks, "another number of links");
    gossip_read_len(r, a->layers, "another number of layers");
    for (size_t l = 0; l < a->nlinks && r->err == RUMOR_OK; l++)
        s_link_load(a, r, &a->links[l], apply);
    if (apply && r->err == RUMOR_OK) {
        a->compute_s = compute_s;
        memcpy(a->theta, theta, sizeof theta);
    }
    return r->err;
}

/* --- public API ------------------------------------------------------- */

void
rumor_gossip_link_observe(rumor_gossip *g,
                          uint32_t peer,
                          uint64_t recv_bytes,
                          uint64_t elapsed_ns)
{
    struct gossip_adapt *a = g->adapt;
    if (a == NULL || elapsed_ns == 0)
        return;
    size_t l = gossip_adapt_link_of(a, peer);
    if (l == a->nlinks)
        return;
    struct gossip_link *k = &a->links[l];
    double tau = (double)elapsed_ns * 1e-9;
    k->mine[k->sent % 4].tag = k->sent;
    k->mine[k->sent % 4].tau = tau;
    k->mine[k->sent % 4].bytes =
        recv_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)recv_bytes;
    if (!k->sym)
        s_sample(k, (double)recv_bytes, tau);
}

void
rumor_gossip_compute_observe(rumor_gossip *g, uint64_t compute_ns)
{
    struct gossip_adapt *a = g->adapt;
    if (a == NULL)
        return;
    double s = (double)compute_ns * 1e-9;
    a->compute_s = a->compute_s <= 0
                       ? s
                       : (1 - S_COMPUTE_EMA) * a->compute_s + S_COMPUTE_EMA * s;
}

size_t
rumor_gossip_adapt_links(const rumor_gossip *g,
                         struct rumor_gossip_link_report *out,
                         size_t cap)
{
    const struct gossip_adapt *a = g->adapt;
    if (a == NULL)
        return 0;
    for (size_t l = 0; l < a->nlinks && l < cap; l++) {
        const struct gossip_link *k = &a->links[l];
        size_t m =
            k->samples < GOSSIP_ADAPT_WINDOW ? k->samples : GOSSIP_ADAPT_WINDOW;
        double bytes = 0, secs = 0, rtt = m > 0 ? k->tau[0] : 0;
        for (size_t i = 0; i < m; i++) {
            bytes += k->rate[i] * k->tau[i];
            secs += k->tau[i];
            rtt = fmin(rtt, k->tau[i]);
        }
        out[l] = (struct rumor_gossip_link_report){
            .peer = k->peer,
            .rate_bytes_s = secs > 0 ? bytes / secs : 0,
            .rtt_s = rtt,
            .budget = k->budget,
            .bytes = k->bytes,
        };
    }
    return a->nlinks;
}

size_t
rumor_gossip_adapt_layers(const rumor_gossip *g,
                          size_t link,
                          struct rumor_gossip_layer_report *out,
                          size_t cap)
{
    const struct gossip_adapt *a = g->adapt;
    if (a == NULL || link >= a->nlinks)
        return 0;
    const struct gossip_link *k = &a->links[link];
    for (size_t t = 0; t < a->layers && t < cap; t++) {
        const struct gossip_layer *y = &k->layers[t];
        out[t] = (struct rumor_gossip_layer_report){
            .n = y->n,
            .k = y->c.k == 0 ? y->n : y->c.k,
            .bits = y->c.k == 0 ? 0 : y->c.bits,
            .rel_error = y->err,
        };
    }
    return a->layers;
}
