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
 *
 * Where the model is (gossip/backend.h; the GPU too): the memories of ef
 * and ef-decay (rumor_ef_decay: p = x + decay e, e = p - C(p), the
 * memory's own roundings), the vectors the codec encodes and decodes and
 * the mean. C(p) is decoded from the bytes sent, as every node decodes
 * them. Only the payloads cross PCIe: this node's down once, and up again
 * with every other node's. DGC's memory (rumor_ef_dgc) steps there too
 * (gossip/ef_table.c, as local SGD's compressed deltas do): the clip's
 * sum of squares (sumsq_add), u' and v (dgc_step), v's payload, e = v -
 * C(v) as a decode_add of it into v (C(v) is 0 where nothing was sent),
 * and u = u' but 0 at the payload's own index list, which goes down; in
 * the warm-up the count is the memory's (encode_k). A state goes
 * through the host at save and load time, as rumor_ef_save's record, so it
 * moves between backends. TernGrad's scalers are computed where the model
 * is (of p, after the memory's correction) and cross PCIe as the scaler
 * message, 4 bytes each way a bucket: down to travel the ring, the agreed
 * ones up for the encode there. (saef is refused here: rumor_gossip_ef_check.)
 */
#include "core/le.h"
#include "gossip/ef_table.h"
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cdp {
    struct gossip_packer pack; /* codec; scratch: p, then each decode */
    float *e; /* ef, ef-decay, dgc: the residuals, numel, backend; or NULL */
    rumor_ef *dgc;     /* dgc: its parameters; or NULL */
    float *u, *u_snap; /* and its momentum, numel, backend */
    float *un;         /* u' of one tensor, backend */
    uint64_t *steps;   /* and each tensor's steps (rumor_ef_steps) */
    float *e_snap;     /* rumor_gossip_snapshot's e (backend) and steps */
    uint64_t *steps_snap;
    uint64_t saved_d2h; /* residual bytes a state_save copied to the host */
    float decay;        /* p = x + decay e */
    struct gossip_gather gather; /* every node's payload */
    size_t payload_cap;
    double *sum;         /* numel, backend */
    float *scalers;      /* share=1: the running max of the scalers */
    size_t nscalers;     /* over every bucket of every tensor; 0: no sharing */
    uint8_t *scaler_msg; /* 4 nscalers: the scalers on the wire */
};

/* A memory of g's spec for tensor t (checked against the codec), and the
 * payload bound it adds. */
static rumor_err
s_memory_new(rumor_gossip *g, size_t t, rumor_ef **out, struct rumor_diag *diag)
{
    struct cdp *s = g->state;
    size_t n = rumor_tensor_numel(&g->tensors[t]), bytes = 0;
    rumor_err rc = rumor_ef_new(g->opts.ef, n, out, diag);
    if (rc == RUMOR_OK && !rumor_ef_codec_fits(*out, s->pack.codec)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "allreduce: ef %s selects by count: it needs a topk, "
                       "randk or dgc codec (dgc with a warm-up), not %s",
                       g->opts.ef,
                       g->opts.codec);
        return RUMOR_EINVAL;
    }
    if (rc == RUMOR_OK)
        rc = rumor_ef_encoded_size(*out, s->pack.codec, n, &bytes);
    s->payload_cap += 4 + bytes;
    return rc;
}

static rumor_err
s_make_memories(rumor_gossip *g, struct rumor_diag *diag)
{
    struct cdp *s = g->state;
    rumor_ef *mem = NULL;
    rumor_err rc = RUMOR_OK;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        rc = s_memory_new(g, t, &mem, diag);
        /* ef, ef-decay: p = x + decay e; dgc keeps its parameters */
        if (rc == RUMOR_OK && t == 0 &&
            rumor_ef_decay(mem, &s->decay) != RUMOR_OK)
            s->dgc = mem;
        else
            rumor_ef_destroy(&mem);
    }
    if (rc != RUMOR_OK)
        return rc;
    size_t largest = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        largest = n > largest ? n : largest;
    }
    s->steps = calloc(g->tensor_count + 1, sizeof *s->steps);
    rc = s->steps != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->e);
    if (rc == RUMOR_OK && s->dgc != NULL)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->u);
    return rc == RUMOR_OK && s->dgc != NULL
               ? g->be->alloc(largest * sizeof(float), (void **)&s->un)
               : rc;
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
    for (size_t t = 0; rc == RUMOR_OK && t < g->tensor_count; t++)
        s->nscalers +=
            rumor_codec_scaler_count(s->pack.codec,
                                     rumor_tensor_numel(&g->tensors[t]));
    if (rc == RUMOR_OK && g->opts.ef[0] != '\0')
        rc = s_make_memories(g, diag);
    else
        s->payload_cap = s->pack.cap;
    if (rc != RUMOR_OK)
        return rc;
    rc = gossip_gather_init(&s->gather, g, s->payload_cap);
    if (rc != RUMOR_OK)
        return rc;
    rc = g->be->alloc(g->numel * sizeof(double), (void **)&s->sum);
    if (rc == RUMOR_OK && s->nscalers > 0) {
        s->scalers = malloc(s->nscalers * sizeof *s->scalers);
        s->scaler_msg = malloc(4 * s->nscalers);
        if (s->scalers == NULL || s->scaler_msg == NULL)
            return RUMOR_ENOMEM;
    }
    return rc;
}

static void
s_free(rumor_gossip *g)
{
    struct cdp *s = g->state;
    if (s == NULL)
        return;
    free(s->steps);
    free(s->steps_snap);
    g->be->release(s->e);
    g->be->release(s->e_snap);
    rumor_ef_destroy(&s->dgc);
    g->be->release(s->u);
    g->be->release(s->u_snap);
    g->be->release(s->un);
    g->be->release(s->sum);
    gossip_packer_free(&s->pack);
    gossip_gather_free(&s->gather);
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
    return s->dgc != NULL ? rumor_ef_set_nodes(s->dgc, g->ring_n) : RUMOR_OK;
}

/* This node's own scalers of what each tensor's encode will get: p = x +
 * decay e through the table (x without a memory), the scalers copied
 * down. */
static rumor_err
s_own_scalers(rumor_gossip *g)
{
    struct cdp *s = g->state;
    const struct gossip_backend_i *be = g->be;
    size_t base = 0, at = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        size_t count = rumor_codec_scaler_count(s->pack.codec, n);
        const float *v = g->tensors[t].data;
        float *p = s->pack.scratch;
        rumor_err rc = RUMOR_OK;
        if (s->e != NULL)
            rc = be->add_scaled(p, v, s->decay, s->e + base, n);
        v = s->e != NULL ? p : v;
        if (rc == RUMOR_OK)
            rc = be->scalers(s->pack.codec, v, n, s->scalers + at);
        if (rc != RUMOR_OK)
            return rc;
        s->pack.pcie_d2h += be->host_memory ? 0 : 4 * count;
        at += count;
        base += n;
    }
    return RUMOR_OK;
}

/* Tensor t's memory through the table: its slice of the memories, and
 * the packer's PCIe counters. */
static struct gossip_ef_mem
s_mem(rumor_gossip *g, size_t t, size_t base)
{
    struct cdp *s = g->state;
    return (struct gossip_ef_mem){
        .be = g->be,
        .codec = s->pack.codec,
        .e = s->e + base,
        .steps = &s->steps[t],
        .dgc = s->dgc,
        .u = s->dgc != NULL ? s->u + base : NULL,
        .un = s->un,
        .pcie_h2d = &s->pack.pcie_h2d,
        .pcie_d2h = &s->pack.pcie_d2h,
    };
}

/* Tensor t's payload through the table: p = x + decay e (x itself
 * without a memory), encoded at the agreed scalers when shared (they go
 * up), then e = p - C(p), C(p) decoded from the bytes. */
static rumor_err
s_encode_table(rumor_gossip *g,
               size_t t,
               size_t base,
               const float *shared,
               uint64_t seed,
               uint64_t step,
               uint8_t *dst,
               size_t cap,
               size_t *written)
{
    struct cdp *s = g->state;
    const struct gossip_backend_i *be = g->be;
    const float *x = g->tensors[t].data;
    float *p = s->pack.scratch;
    size_t n = rumor_tensor_numel(&g->tensors[t]);
    if (s->dgc != NULL) { /* v in p, u' in un */
        struct gossip_ef_mem dgc = s_mem(g, t, base);
        return gossip_ef_dgc_encode(&dgc,
                                    p,
                                    x,
                                    n,
                                    seed,
                                    step,
                                    dst,
                                    cap,
                                    written);
    }
    rumor_err rc = s->e != NULL ? be->add_scaled(p, x, s->decay, s->e + base, n)
                                : RUMOR_OK;
    const float *v = s->e != NULL ? p : x;
    if (rc == RUMOR_OK && shared != NULL) {
        rc = be->encode_shared(s->pack.codec,
                               v,
                               n,
                               shared,
                               seed,
                               step,
                               dst,
                               cap,
                               written);
        s->pack.pcie_h2d +=
            be->host_memory ? 0
                            : 4 * rumor_codec_scaler_count(s->pack.codec, n);
    } else if (rc == RUMOR_OK) {
        rc = be->encode(s->pack.codec, v, n, seed, step, dst, cap, written);
    }
    s->pack.pcie_d2h += be->host_memory || rc != RUMOR_OK ? 0 : *written;
    if (rc != RUMOR_OK || s->e == NULL)
        return rc;
    struct gossip_ef_mem mem = s_mem(g, t, base);
    return gossip_ef_residual(&mem, p, n, dst, *written);
}

/* This node's payload, tensor by tensor. */
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
        rumor_err rc =
            s_encode_table(g, t, base, shared, seed, step, dst, cap, &written);
        if (rc != RUMOR_OK)
            return rc;
        sc += rumor_codec_scaler_count(s->pack.codec, n);
        core_put_u32(out + at, (uint32_t)written);
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
    if (round == 0)
        rc = s_memories_nodes(g);
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

/* Every payload decoded in node order, where the model is: the same bits
 * on every node. The model is written only when all decode. */
static rumor_err
s_average(rumor_gossip *g)
{
    struct cdp *s = g->state;
    rumor_err rc = g->be->zero(s->sum, g->numel * sizeof *s->sum);
    for (size_t j = 0; j < g->ring_n && rc == RUMOR_OK; j++) {
        rc = gossip_packer_stage(&s->pack,
                                 g,
                                 s->gather.payload[j],
                                 s->gather.len[j],
                                 1.0,
                                 s->sum);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "gossip allreduce: node %u: the payload of node %u "
                      "does not decode: %s",
                      g->self,
                      g->ring[j],
                      rumor_strerror(rc));
    }
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        rc = g->be->div_round(g->tensors[t].data,
                              s->sum + base,
                              (double)g->ring_n,
                              n);
        base += n;
    }
    return rc;
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
 * (rumor_ef_save), after a u32 count (0 without opts.ef). A residual
 * kept where the model is goes through a memory made for the record. */
static rumor_err
s_save_one(const rumor_gossip *g,
           const float *e,
           const float *u,
           const uint64_t *steps,
           size_t t,
           size_t base,
           struct rumor_buf *out)
{
    struct cdp *s = g->state;
    size_t n = rumor_tensor_numel(&g->tensors[t]), written = 0;
    rumor_ef *mem = NULL;
    rumor_err rc = rumor_ef_new(g->opts.ef, n, &mem, NULL);
    if (rc == RUMOR_OK) {
        rumor_ef_set_steps(mem, steps[t]);
        rc = g->be->copy(rumor_ef_residual(mem, NULL),
                         e + base,
                         n * sizeof(float),
                         GOSSIP_TO_HOST);
        s->saved_d2h += g->be->host_memory ? 0 : n * sizeof(float);
    }
    if (rc == RUMOR_OK && s->dgc != NULL) {
        rc = g->be->copy(rumor_ef_momentum(mem, NULL),
                         u + base,
                         n * sizeof(float),
                         GOSSIP_TO_HOST);
        s->saved_d2h += g->be->host_memory ? 0 : n * sizeof(float);
    }
    size_t len = rc == RUMOR_OK ? rumor_ef_state_size(mem) : 0;
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, len);
    if (rc == RUMOR_OK)
        rc = rumor_buf_reserve(out, len);
    if (rc == RUMOR_OK)
        rc = rumor_ef_save(mem, out->data + out->len, len, &written);
    out->len += rc == RUMOR_OK ? written : 0;
    rumor_ef_destroy(&mem);
    return rc;
}

/* The memories as e and steps hold them (the live ones or the
 * snapshot's). */
static rumor_err
s_save_from(const rumor_gossip *g,
            const float *e,
            const float *u,
            const uint64_t *steps,
            struct rumor_buf *out)
{
    const struct cdp *s = g->state;
    size_t count = s->e != NULL ? g->tensor_count : 0;
    rumor_err rc = gossip_write_u32(out, (uint32_t)count);
    for (size_t t = 0, base = 0; t < count && rc == RUMOR_OK; t++) {
        rc = s_save_one(g, e, u, steps, t, base, out);
        base += rumor_tensor_numel(&g->tensors[t]);
    }
    return rc;
}

static rumor_err
s_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct cdp *s = g->state;
    return s_save_from(g, s->e, s->u, s->steps, out);
}

/* The residuals (and DGC's momenta) copied where they are, device to
 * device, and their step counts. */
static rumor_err
s_snap_take(rumor_gossip *g)
{
    struct cdp *s = g->state;
    if (s->e == NULL)
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    if (s->e_snap == NULL)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->e_snap);
    if (rc == RUMOR_OK && s->u != NULL && s->u_snap == NULL)
        rc = g->be->alloc(g->numel * sizeof(float), (void **)&s->u_snap);
    if (rc == RUMOR_OK && s->steps_snap == NULL) {
        s->steps_snap = calloc(g->tensor_count + 1, sizeof *s->steps_snap);
        rc = s->steps_snap != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    }
    if (rc == RUMOR_OK)
        rc = gossip_mem_copy(g,
                             s->e_snap,
                             s->e,
                             g->numel * sizeof(float),
                             GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK && s->u != NULL)
        rc = gossip_mem_copy(g,
                             s->u_snap,
                             s->u,
                             g->numel * sizeof(float),
                             GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        memcpy(s->steps_snap, s->steps, g->tensor_count * sizeof *s->steps);
    return rc;
}

static rumor_err
s_snap_restore(rumor_gossip *g)
{
    struct cdp *s = g->state;
    if (s->e == NULL)
        return RUMOR_OK;
    memcpy(s->steps, s->steps_snap, g->tensor_count * sizeof *s->steps);
    rumor_err rc = gossip_mem_copy(g,
                                   s->e,
                                   s->e_snap,
                                   g->numel * sizeof(float),
                                   GOSSIP_ON_DEVICE);
    return rc == RUMOR_OK && s->u != NULL
               ? gossip_mem_copy(g,
                                 s->u,
                                 s->u_snap,
                                 g->numel * sizeof(float),
                                 GOSSIP_ON_DEVICE)
               : rc;
}

static rumor_err
s_snap_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct cdp *s = g->state;
    return s_save_from(g, s->e_snap, s->u_snap, s->steps_snap, out);
}

/* Memory t from its record, checked first on a memory of the same spec,
 * so that a bad state changes nothing. */
static rumor_err
s_load_one(rumor_gossip *g,
           size_t t,
           size_t base,
           const uint8_t *p,
           size_t len,
           bool apply)
{
    struct cdp *s = g->state;
    size_t n = rumor_tensor_numel(&g->tensors[t]);
    rumor_ef *check = NULL;
    rumor_err rc = rumor_ef_new(g->opts.ef, n, &check, NULL);
    if (rc == RUMOR_OK)
        rc = rumor_ef_restore(check, p, len);
    if (rc == RUMOR_OK && apply)
        rc = gossip_mem_copy(g,
                             s->e + base,
                             rumor_ef_residual(check, NULL),
                             n * sizeof(float),
                             GOSSIP_TO_DEVICE);
    if (rc == RUMOR_OK && apply && s->u != NULL)
        rc = gossip_mem_copy(g,
                             s->u + base,
                             rumor_ef_momentum(check, NULL),
                             n * sizeof(float),
                             GOSSIP_TO_DEVICE);
    if (rc == RUMOR_OK && apply)
        s->steps[t] = rumor_ef_steps(check);
    rumor_ef_destroy(&check);
    return rc;
}

/* The memories are each node's own: an adopt only checks them. */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct cdp *s = g->state;
    size_t count = s->e != NULL ? g->tensor_count : 0;
    if (gossip_read_u32(r) != count && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "error memories that do not fit");
    for (size_t t = 0, base = 0; t < count && r->err == RUMOR_OK; t++) {
        size_t len = 0;
        const uint8_t *p = gossip_read_blob(r, &len);
        rumor_err rc =
            r->err == RUMOR_OK
                ? s_load_one(g, t, base, p, len, mode == GOSSIP_STATE_LOAD)
                : r->err;
        if (rc != RUMOR_OK)
            gossip_reader_fail(r, rc, "an error memory that does not fit");
        base += rumor_tensor_numel(&g->tensors[t]);
    }
    return r->err;
}

static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    const struct cdp *s = g->state;
    gossip_packer_pcie(&s->pack, h2d, d2h);
    *d2h += s->saved_d2h;
}

const struct gossip_algo_i gossip_allreduce_codec = {
    .name = "allreduce",
    .pcie = s_pcie,
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = gossip_expected_prev,
    .uses_ring = gossip_always_ring,
    .absorb = s_absorb,
    .state_save = s_state_save,
    .state_load = s_state_load,
    .snap_take = s_snap_take,
    .snap_restore = s_snap_restore,
    .snap_save = s_snap_save,
};
