/*
 * Synchronous data-parallel SGD with compressed gradients, the exchange
 * of the top-k, DGC, QSGD and CO3 papers ("allreduce" with
 * opts.compressed): every node encodes its vector (the gradient, under
 * `rumor node`) tensor by tensor with opts.codec, through its error
 * feedback memory (opts.ef: ef, ef-decay, dgc; none when ""), the
 * payloads travel the ring in an all-gather (n - 1 rounds, each node
 * forwarding what it got the round before), and every node decodes all n
 * of them in node order and writes their mean: the same bits on every
 * node, so the models that the averaged gradient updates stay identical.
 *
 * All-gather rather than a ring all-reduce of the messages: the sum of two
 * top-k or QSGD messages is not a message of the same codec (supports and
 * scales differ), and re-encoding partial sums at each hop would compound
 * the error. The codecs that are linear (fp32, where this is the plain
 * all-reduce) gain nothing from it here.
 *
 * Payload: for each tensor, a little-endian u32 length and the codec's
 * bytes (gossip/payload.c's format). Per tensor, as DGC and QSGD select
 * and scale per layer.
 *
 * TernGrad's scaler sharing (terngrad:share=1; Wen et al. 2017, Algorithm
 * 1, the reference's max_scalers): n - 1 rounds before the payloads carry
 * a running max around the ring, the scalers of every bucket of every
 * tensor as little-endian float32 (4 bytes each, nothing else), so that
 * after them every node holds the max over nodes of each node's own
 * scalers, of the vector it encodes (after its error memory's
 * correction). Every node then ternarizes with those: its payload carries
 * the shared scalers, and the memory keeps the error at the shared scale.
 * A running max in n - 1 rounds rather than a reduce-scatter: the vector
 * is one float per bucket, so rounds cost more than bytes.
 *
 * Over a ring of fewer members (rumor_gossip_members_set) both all-gathers
 * run over those members, the mean divides by their count and DGC's clip
 * takes it as its N; the codecs' seeds stay those of the node ids.
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cdp {
    struct gossip_packer pack;   /* codec, decode scratch */
    rumor_ef **ef;               /* one memory per tensor; NULL without */
    struct gossip_gather gather; /* every node's payload */
    size_t payload_cap;
    double *sum;         /* numel */
    float *x;            /* numel: the vector to encode */
    float *scalers;      /* share=1: the running max of the scalers */
    size_t nscalers;     /* over every bucket of every tensor; 0: no sharing */
    uint8_t *scaler_msg; /* 4 nscalers: the scalers on the wire */
};

static rumor_err
s_make_memories(rumor_gossip *g, struct rumor_diag *diag)
{
    struct cdp *s = g->state;
    s->ef = calloc(g->tensor_count, sizeof *s->ef);
    if (s->ef == NULL)
        return RUMOR_ENOMEM;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]), bytes = 0;
        rumor_err rc = rumor_ef_new(g->opts.ef, n, &s->ef[t], diag);
        if (rc == RUMOR_OK && !rumor_ef_codec_fits(s->ef[t], s->pack.codec)) {
            rumor_diag_set(
                diag,
                "",
                0,
                0,
                "allreduce: ef %s selects by count: it needs a topk, randk or "
                "dgc codec (dgc with a warm-up), not %s",
                g->opts.ef,
                g->opts.codec);
            return RUMOR_EINVAL;
        }
        if (rc == RUMOR_OK)
            rc = rumor_ef_encoded_size(s->ef[t], s->pack.codec, n, &bytes);
        if (rc != RUMOR_OK)
            return rc;
        s->payload_cap += 4 + bytes;
    }
    return RUMOR_OK;
}

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct cdp *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    g->state = s;
    if (g->nodes < 2) {
        rumor_diag_set(diag, "", 0, 0, "allreduce: needs 2 or more nodes");
        return RUMOR_EINVAL;
    }
    rumor_err rc = gossip_packer_init(&s->pack, g, g->opts.codec, diag);
    if (rc == RUMOR_OK && g->opts.ef[0] != '\0')
        rc = s_make_memories(g, diag);
    else
        s->payload_cap = s->pack.cap;
    if (rc != RUMOR_OK)
        return rc;
    rc = gossip_gather_init(&s->gather, g, s->payload_cap);
    if (rc != RUMOR_OK)
        return rc;
    s->sum = malloc(g->numel * sizeof *s->sum);
    s->x = malloc(g->numel * sizeof *s->x);
    if (!s->sum || !s->x)
        return RUMOR_ENOMEM;
    for (size_t t = 0; t < g->tensor_count; t++)
        s->nscalers +=
            rumor_codec_scaler_count(s->pack.codec,
                                     rumor_tensor_numel(&g->tensors[t]));
    if (s->nscalers > 0) {
        s->scalers = malloc(s->nscalers * sizeof *s->scalers);
        s->scaler_msg = malloc(4 * s->nscalers);
        if (s->scalers == NULL || s->scaler_msg == NULL)
            return RUMOR_ENOMEM;
    }
    return RUMOR_OK;
}

static void
s_free(rumor_gossip *g)
{
    struct cdp *s = g->state;
    if (s == NULL)
        return;
    gossip_packer_free(&s->pack);
    for (size_t t = 0; s->ef != NULL && t < g->tensor_count; t++)
        rumor_ef_destroy(&s->ef[t]);
    gossip_gather_free(&s->gather);
    free(s->ef);
    free(s->sum);
    free(s->x);
    free(s->scalers);
    free(s->scaler_msg);
    free(s);
    g->state = NULL;
}

/* Rounds that agree on the scalers before the payloads' n - 1. */
static uint32_t
s_scaler_rounds(const rumor_gossip *g)
{
    const struct cdp *s = g->state;
    return s->nscalers > 0 ? (uint32_t)(g->ring_n - 1) : 0;
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    (void)step;
    return s_scaler_rounds(g) + (uint32_t)(g->ring_n - 1);
}

/* DGC's clip is per member of the step's ring (its N): set at the step's
 * start, before the scalers or the payload read the memory. */
static rumor_err
s_memories_nodes(rumor_gossip *g)
{
    struct cdp *s = g->state;
    rumor_err rc = RUMOR_OK;
    for (size_t t = 0; s->ef != NULL && t < g->tensor_count && rc == RUMOR_OK;
         t++)
        rc = rumor_ef_set_nodes(s->ef[t], g->ring_n);
    return rc;
}

/* This node's own scalers of what each tensor's encode will get. */
static rumor_err
s_own_scalers(rumor_gossip *g)
{
    struct cdp *s = g->state;
    size_t base = 0, at = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        const float *v = s->x + base;
        rumor_err rc = RUMOR_OK;
        if (s->ef != NULL) {
            rc = rumor_ef_corrected(s->ef[t], v, n, s->pack.scratch);
            v = s->pack.scratch;
        }
        if (rc == RUMOR_OK)
            rc = rumor_codec_scalers(s->pack.codec, v, n, s->scalers + at);
        if (rc != RUMOR_OK)
            return rc;
        at += rumor_codec_scaler_count(s->pack.codec, n);
        base += n;
    }
    return RUMOR_OK;
}

/* This node's payload: each tensor through its memory (or the codec),
 * with the agreed scalers when they are shared. */
static rumor_err
s_encode(rumor_gossip *g, uint64_t step)
{
    struct cdp *s = g->state;
    uint8_t *out = s->gather.payload[g->ring_pos];
    size_t at = 0, base = 0, sc = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]), written = 0;
        uint64_t seed =
            rumor_seed_derive(g->opts.seed, g->self, g->opts.tensor_base + t);
        uint8_t *dst = out + at + 4;
        size_t cap = s->payload_cap - at - 4;
        const float *shared = s->scalers != NULL ? s->scalers + sc : NULL;
        rumor_err rc = s->ef != NULL ? rumor_ef_encode_shared(s->ef[t],
                                                              s->pack.codec,
                                                              s->x + base,
                                                              n,
                                                              shared,
                                                              seed,
                                                              step,
                                                              dst,
                                                              cap,
                                                              &written,
                                                              NULL)
                                     : rumor_codec_encode_shared(s->pack.codec,
                                                                 s->x + base,
                                                                 n,
                                                                 shared,
                                                                 seed,
                                                                 step,
                                                                 dst,
                                                                 cap,
                                                                 &written,
                                                                 NULL);
        if (rc != RUMOR_OK)
            return rc;
        sc += rumor_codec_scaler_count(s->pack.codec, n);
        for (int b = 0; b < 4; b++)
            out[at + (size_t)b] = (uint8_t)(written >> (8 * b));
        at += 4 + written;
        base += n;
    }
    s->gather.len[g->ring_pos] = at;
    return RUMOR_OK;
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    struct cdp *s = g->state;
    uint32_t sr = s_scaler_rounds(g), to = gossip_ring_next(g);
    rumor_err rc = RUMOR_OK;
    if (round == 0) {
        gossip_flat_get(g, 0, g->numel, s->x);
        rc = s_memories_nodes(g);
    }
    if (rc == RUMOR_OK && round == 0 && sr > 0)
        rc = s_own_scalers(g);
    if (rc == RUMOR_OK && round == sr)
        rc = s_encode(g, step);
    if (rc != RUMOR_OK || round >= sr)
        return rc == RUMOR_OK ? gossip_gather_emit(g, &s->gather, round - sr)
                              : rc;
    rc = gossip_out_reserve(g, 1);
    if (rc == RUMOR_OK) { /* a copy: absorb updates the max on the way */
        memcpy(s->scaler_msg, s->scalers, 4 * s->nscalers);
        g->out[0] =
            (struct rumor_gossip_msg){to, s->scaler_msg, 4 * s->nscalers};
    }
    return rc;
}

/* Every payload decoded in node order: the same bits on every node. The
 * model is written only when all decode. */
static rumor_err
s_average(rumor_gossip *g)
{
    struct cdp *s = g->state;
    memset(s->sum, 0, g->numel * sizeof *s->sum);
    for (size_t j = 0; j < g->ring_n; j++) {
        rumor_err rc = gossip_packer_stage(&s->pack,
                                           g,
                                           s->gather.payload[j],
                                           s->gather.len[j],
                                           1.0,
                                           s->sum);
        if (rc != RUMOR_OK) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip allreduce: node %u: the payload of node %u "
                      "does not decode: %s",
                      g->self,
                      g->ring[j],
                      rumor_strerror(rc));
            return rc;
        }
    }
    for (size_t e = 0; e < g->numel; e++)
        s->x[e] = (float)(s->sum[e] / (double)g->ring_n);
    gossip_flat_put(g, 0, g->numel, s->x);
    return RUMOR_OK;
}

/* The predecessor's running max: every scaler a float >= 0 (checked
 * before any is taken), each kept where larger. */
static rumor_err
s_absorb_scalers(rumor_gossip *g,
                 uint32_t prev,
                 const struct rumor_gossip_msg *msgs,
                 size_t count)
{
    struct cdp *s = g->state;
    const struct rumor_gossip_msg *slot = NULL;
    rumor_err rc =
        gossip_match_inbox(g, &prev, 1, msgs, count, 4 * s->nscalers, &slot);
    if (rc != RUMOR_OK) /* logged there */
        return rc;
    float v = 0;
    for (size_t k = 0; k < s->nscalers && rc == RUMOR_OK; k++) {
        memcpy(&v, slot->data + 4 * k, 4);
        rc = !isfinite(v) ? RUMOR_ENUMERIC : v < 0 ? RUMOR_EPROTO : RUMOR_OK;
    }
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip allreduce: node %u rejected the scalers of %u: %s",
                  g->self,
                  prev,
                  rumor_strerror(rc));
        return rc;
    }
    for (size_t k = 0; k < s->nscalers; k++) {
        memcpy(&v, slot->data + 4 * k, 4);
        s->scalers[k] = fmaxf(s->scalers[k], v);
    }
    return RUMOR_OK;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)step;
    struct cdp *s = g->state;
    uint32_t prev = gossip_ring_prev(g), sr = s_scaler_rounds(g);
    if (round < sr)
        return s_absorb_scalers(g, prev, msgs, count);
    bool complete = false;
    rumor_err rc =
        gossip_gather_absorb(g, &s->gather, round - sr, msgs, count, &complete);
    return rc == RUMOR_OK && complete ? s_average(g) : rc;
}

/* Between steps: the error memories, each as a u64-length blob
 * (rumor_ef_save), after a u32 count (0 without opts.ef). */
static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct cdp *s = g->state;
    size_t count = s->ef != NULL ? g->tensor_count : 0;
    rumor_err rc = gossip_write_u32(out, (uint32_t)count);
    for (size_t t = 0; t < count && rc == RUMOR_OK; t++) {
        size_t len = rumor_ef_state_size(s->ef[t]), written = 0;
        rc = gossip_write_u64(out, len);
        if (rc == RUMOR_OK)
            rc = rumor_buf_reserve(out, len);
        if (rc == RUMOR_OK)
            rc = rumor_ef_save(s->ef[t], out->data + out->len, len, &written);
        out->len += rc == RUMOR_OK ? written : 0;
    }
    return rc;
}

/* Checks each memory's bytes on a scratch memory of the same spec first,
 * so a bad state changes nothing. The memories are each node's own: an
 * adopt only checks them. */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct cdp *s = g->state;
    size_t count = s->ef != NULL ? g->tensor_count : 0;
    if (gossip_read_u32(r) != count && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "error memories that do not fit");
    for (size_t t = 0; t < count && r->err == RUMOR_OK; t++) {
        size_t len = 0;
        const uint8_t *p = gossip_read_blob(r, &len);
        rumor_ef *check = NULL;
        rumor_err rc = r->err;
        if (rc == RUMOR_OK)
            rc = rumor_ef_new(g->opts.ef,
                              rumor_tensor_numel(&g->tensors[t]),
                              &check,
                              NULL);
        if (rc == RUMOR_OK)
            rc = rumor_ef_restore(mode == GOSSIP_STATE_LOAD ? s->ef[t] : check,
                                  p,
                                  len);
        rumor_ef_destroy(&check);
        if (rc != RUMOR_OK)
            gossip_reader_fail(r, rc, "an error memory that does not fit");
    }
    return r->err;
}

const struct gossip_algo_i gossip_allreduce_codec = {
    .name = "allreduce",
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
