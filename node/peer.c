/*
 * The peer API: Rumor's decentralized averaging under a training loop the
 * caller owns (PyTorch, through python/rumor). Users keep their model,
 * data loader and optimizer and call rumor_peer_gossip after each
 * optimizer step, as they would call a DDP hook; nothing here computes a
 * gradient.
 *
 * A peer is a node runtime (node/runtime.c) built on the caller's tensors
 * instead of a workload (node_new_model): the same options, topology and
 * key loading, HELLO fingerprint, transport, rounds, per-step deadlines,
 * liveness checks, byte counters and metrics lines as `rumor node`, so a
 * Python loop that computes the same gradients as the runtime sends the
 * same bytes and reaches the same numbers (tests/python checks this). Each
 * step goes through the runtime's step sequence (node_step_begin,
 * node_gossip_step), so the fault path is the runtime's too: for an
 * algorithm that can skip, a dead neighbour is skipped and probed, a
 * returning one is re-admitted, opts.join fetches a neighbour's model and
 * step at the first step, a state loaded from a checkpoint meets its
 * neighbours as a restarted node, and a stop request ends every node
 * after the same step (docs/reliability.md). This file only stages
 * tensors and counts steps.
 *
 * Zero-copy: gossip algorithms work on float32 host memory, so float32
 * CPU tensors are gossiped where they lie (PyTorch parameters and numpy
 * arrays alike). Other dtypes (float64, float16, bfloat16) and CUDA memory
 * get a float32 host staging buffer per tensor: copied and converted in
 * before a step, written back after it (only when the step succeeded, so a
 * failed step leaves the caller's tensors unchanged as the algorithms
 * promise). Conversions round to nearest even; float16 saturates at
 * +-65504 on the way back, since averaging cannot leave the range of its
 * inputs but extrapolating algorithms (CHOCO's gamma > 1) could. Integer
 * tensors are refused: averaging them has no meaning a user would want.
 *
 * average() is an exact ring all-reduce over the same transport (the
 * runtime links the ring successor for peers), the synchronisation step of
 * local SGD whatever gossip algorithm the peer runs otherwise.
 */
#include "rumor/node.h"

#include "node/peer_cuda.h"
#include "node/runtime_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEER_MS 1000000ull
/* state: "RUMORPS1", then the next step (u64 LE), then the gossip state */
#define PEER_STATE_MAGIC "RUMORPS1"
#define PEER_STATE_HEAD  16

struct s_slot {
    struct rumor_peer_tensor t; /* the caller's */
    size_t numel;
    float *stage; /* float32 host copy; NULL when gossiped in place */
    void *raw;    /* CUDA, not float32: host copy of the device bytes */
};

struct rumor_peer {
    rumor_node *node;
    struct s_slot *slots;
    size_t count;
    struct rumor_tensor *tensors; /* what the algorithms see */
    struct rumor_model model;
    rumor_gossip *avg; /* all-reduce for average(), made on first use */
    uint64_t step;     /* next step number (gossip and average share it) */
    bool started;      /* links waited for (and joined) */
    bool stopped;      /* the run's agreed stop is reached */
    uint64_t last_end; /* rumor_clock_ns when the last step returned */
    uint32_t id;       /* this node */
    uint32_t connect_ms;
    double t_copy;
    struct rumor_gossip_opts gossip; /* the divergence error, the look-ahead */
};

/* --- conversions ------------------------------------------------------- */

/* Exact: normals by moving the exponent, subnormals are m 2^-24. */
static float
s_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu, bits = 0;
    if (em >= 0x7c00u) { /* Inf, NaN */
        bits = 0x7f800000u | (em & 0x3ffu) << 13;
    } else if (em >= 0x0400u) {
        bits = (em << 13) + ((127u - 15u) << 23);
    } else {
        float f = (float)em * 0x1p-24f;
        memcpy(&bits, &f, sizeof bits);
    }
    bits |= sign;
    float f = 0;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even by integer rounding of the bits (F. Giesen's
 * float_to_half_fast3_rtne); finite inputs saturate at +-65504. */
static uint16_t
s_f32_to_f16(float f)
{
    uint32_t x = 0;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN stays NaN */
    if (x >= 0x477fe000u)                  /* >= 65504, and Inf */
        return (uint16_t)(sign | 0x7bffu);
    if (x < 0x38800000u) { /* below 2^-14: subnormal or zero */
        /* adding 0.5 aligns the ten mantissa bits at the bottom; the
         * float addition rounds to nearest even */
        float a = 0, magic = 0.5f;
        uint32_t magic_bits = 0;
        memcpy(&a, &x, sizeof a);
        memcpy(&magic_bits, &magic, sizeof magic_bits);
        a += magic;
        memcpy(&x, &a, sizeof x);
        return (uint16_t)(sign | (x - magic_bits));
    }
    uint32_t odd = (x >> 13) & 1u;
    x += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (x >> 13));
}

static float
s_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f = 0;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t
s_f32_to_bf16(float f)
{
    uint32_t bits = 0;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u); /* NaN stays NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);       /* round to nearest even */
    return (uint16_t)(bits >> 16);
}

/* src (numel elements of dtype, host memory) -> float32 dst; one loop per
 * dtype so that each one vectorises. */
static void
s_to_f32(const void *src, rumor_dtype dtype, size_t numel, float *dst)
{
    const double *d = src;
    const uint16_t *h = src;
    switch (dtype) {
    case RUMOR_DTYPE_F64:
        for (size_t i = 0; i < numel; i++)
            dst[i] = (float)d[i];
        break;
    case RUMOR_DTYPE_F16:
        for (size_t i = 0; i < numel; i++)
            dst[i] = s_f16_to_f32(h[i]);
        break;
    case RUMOR_DTYPE_BF16:
        for (size_t i = 0; i < numel; i++)
            dst[i] = s_bf16_to_f32(h[i]);
        break;
    case RUMOR_DTYPE_F32:
        memcpy(dst, src, numel * sizeof(float));
        break;
    }
}

static void
s_from_f32(const float *src, size_t numel, rumor_dtype dtype, void *dst)
{
    double *d = dst;
    uint16_t *h = dst;
    switch (dtype) {
    case RUMOR_DTYPE_F64:
        for (size_t i = 0; i < numel; i++)
            d[i] = (double)src[i];
        break;
    case RUMOR_DTYPE_F16:
        for (size_t i = 0; i < numel; i++)
            h[i] = s_f32_to_f16(src[i]);
        break;
    case RUMOR_DTYPE_BF16:
        for (size_t i = 0; i < numel; i++)
            h[i] = s_f32_to_bf16(src[i]);
        break;
    case RUMOR_DTYPE_F32:
        memcpy(dst, src, numel * sizeof(float));
        break;
    }
}

/* --- staging ----------------------------------------------------------- */

static rumor_err
s_stage_in(const struct s_slot *s)
{
    if (s->stage == NULL)
        return RUMOR_OK;
    size_t bytes = s->numel * rumor_dtype_size(s->t.dtype);
    if (s->t.device != RUMOR_DEVICE_CUDA) {
        s_to_f32(s->t.data, s->t.dtype, s->numel, s->stage);
        return RUMOR_OK;
    }
    void *host = s->raw != NULL ? s->raw : (void *)s->stage;
    rumor_err rc = node_peer_cuda_copy(host, s->t.data, bytes, false);
    if (rc == RUMOR_OK && s->raw != NULL)
        s_to_f32(s->raw, s->t.dtype, s->numel, s->stage);
    return rc;
}

static rumor_err
s_stage_out(const struct s_slot *s)
{
    if (s->stage == NULL)
        return RUMOR_OK;
    size_t bytes = s->numel * rumor_dtype_size(s->t.dtype);
    if (s->t.device != RUMOR_DEVICE_CUDA) {
        s_from_f32(s->stage, s->numel, s->t.dtype, s->t.data);
        return RUMOR_OK;
    }
    if (s->raw != NULL)
        s_from_f32(s->stage, s->numel, s->t.dtype, s->raw);
    const void *host = s->raw != NULL ? s->raw : (const void *)s->stage;
    return node_peer_cuda_copy(s->t.data, host, bytes, true);
}

static rumor_err
s_stage_all(rumor_peer *peer, bool in)
{
    uint64_t t0 = rumor_clock_ns();
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < peer->count && rc == RUMOR_OK; k++)
        rc = in ? s_stage_in(&peer->slots[k]) : s_stage_out(&peer->slots[k]);
    peer->t_copy += (double)(rumor_clock_ns() - t0) * 1e-9;
    return rc;
}

/* --- building ---------------------------------------------------------- */

static rumor_err
s_check_tensor(const struct rumor_peer_tensor *t,
               size_t k,
               struct rumor_diag *diag)
{
    if (t->data == NULL || rumor_dtype_size(t->dtype) == 0 ||
        t->ndim > RUMOR_GOSSIP_MAX_DIMS ||
        (t->device != RUMOR_DEVICE_CPU && t->device != RUMOR_DEVICE_CUDA)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "tensor %zu: NULL data, unknown dtype or device, or "
                       "more than %d dimensions",
                       k,
                       RUMOR_GOSSIP_MAX_DIMS);
        return RUMOR_EINVAL;
    }
    if (t->device == RUMOR_DEVICE_CUDA && !rumor_cuda_built()) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "tensor %zu is in CUDA memory, but this librumor was "
                       "built without CUDA (rebuild with nvcc: make "
                       "USE_CUDA=yes), or move it to the CPU",
                       k);
        return RUMOR_ENOTSUP;
    }
    return RUMOR_OK;
}

static rumor_err
s_add_slot(rumor_peer *peer, size_t k, const struct rumor_peer_tensor *t)
{
    struct s_slot *s = &peer->slots[k];
    struct rumor_tensor *rt = &peer->tensors[k];
    s->t = *t;
    rt->ndim = t->ndim;
    memcpy(rt->shape, t->shape, sizeof rt->shape);
    s->numel = rumor_tensor_numel(rt);
    bool in_place =
        t->dtype == RUMOR_DTYPE_F32 && t->device == RUMOR_DEVICE_CPU;
    if (in_place) {
        rt->data = t->data;
        return RUMOR_OK;
    }
    /* one extra element so that empty tensors get a real pointer */
    s->stage = malloc((s->numel + 1) * sizeof(float));
    if (t->device == RUMOR_DEVICE_CUDA && t->dtype != RUMOR_DTYPE_F32)
        s->raw = malloc((s->numel + 1) * rumor_dtype_size(t->dtype));
    rt->data = s->stage;
    bool short_raw = t->device == RUMOR_DEVICE_CUDA &&
                     t->dtype != RUMOR_DTYPE_F32 && s->raw == NULL;
    return s->stage == NULL || short_raw ? RUMOR_ENOMEM : RUMOR_OK;
}

/* The first call: the links, then (with join) a neighbour's model and
 * step into the staged tensors. */
static rumor_err
s_start(rumor_peer *peer, uint64_t *step, struct rumor_diag *diag)
{
    node_start_clock(peer->node);
    rumor_err rc =
        node_wait_links(peer->node,
                        rumor_clock_ns() + peer->connect_ms * PEER_MS,
                        diag);
    if (rc == RUMOR_OK)
        rc = node_join(peer->node, step, diag);
    peer->started = rc == RUMOR_OK;
    return rc;
}

/* The error of a failed step in diag, unless a deeper layer wrote one. */
static void
s_step_error(rumor_peer *peer,
             uint64_t step,
             rumor_err rc,
             struct rumor_diag *diag)
{
    if (diag == NULL || diag->msg[0] != '\0')
        return;
    /* the caller's model is no longer finite: its encode failed */
    if (rc == RUMOR_ENUMERIC) {
        char text[sizeof diag->msg];
        node_diverge_message(&peer->gossip,
                             rumor_gossip_gamma(node_gossip(peer->node)),
                             -1,
                             step + 1,
                             NAN,
                             text,
                             sizeof text);
        rumor_diag_set(diag, "", 0, 0, "%s", text);
        return;
    }
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "step %llu: %s",
                   (unsigned long long)step + 1,
                   rumor_strerror(rc));
}

/* One step as rumor_node_run makes it (node/runtime.c): the fault path's
 * handshakes and the stop plan before it (node_step_begin), then the
 * rounds. Staged tensors are written back only when the whole step
 * succeeded. */
static rumor_err
s_step(rumor_peer *peer, rumor_gossip *g, struct rumor_diag *diag)
{
    if (peer->stopped)
        return RUMOR_OK;
    uint64_t step = peer->step;
    bool stop = false;
    /* the caller's training between two steps is the compute time the
     * adaptive link budgets aim at (a no-op without --adapt) */
    if (peer->last_end != 0)
        rumor_gossip_compute_observe(node_gossip(peer->node),
                                     rumor_clock_ns() - peer->last_end);
    rumor_err rc = s_stage_all(peer, true);
    bool first = !peer->started;
    if (rc == RUMOR_OK && first)
        rc = s_start(peer, &step, diag);
    if (rc == RUMOR_OK)
        rc = node_step_begin(peer->node, &step, &stop);
    if (rc == RUMOR_OK && !stop)
        rc = node_gossip_step(peer->node,
                              g,
                              step,
                              rumor_clock_ns() +
                                  node_step_span(peer->node, step));
    if (first && (rc == RUMOR_OK || rc == RUMOR_EPROTO) &&
        node_check_refusals(peer->node, diag) != RUMOR_OK)
        rc = RUMOR_EPROTO;
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    if (rc == RUMOR_OK) {
        peer->stopped = stop;
        peer->step = stop ? step : step + 1;
        rc = node_report_step(peer->node, peer->step, NULL);
    }
    peer->last_end = rumor_clock_ns();
    if (rc != RUMOR_OK)
        s_step_error(peer, step, rc, diag);
    return rc;
}

/* --- public API -------------------------------------------------------- */

size_t
rumor_dtype_size(rumor_dtype dtype)
{
    switch (dtype) {
    case RUMOR_DTYPE_F32:
        return 4;
    case RUMOR_DTYPE_F64:
        return 8;
    case RUMOR_DTYPE_F16:
    case RUMOR_DTYPE_BF16:
        return 2;
    }
    return 0;
}

rumor_err
rumor_node_opts_new(struct rumor_node_opts **out)
{
    *out = malloc(sizeof **out);
    if (*out == NULL)
        return RUMOR_ENOMEM;
    rumor_node_opts_default(*out);
    return RUMOR_OK;
}

void
rumor_node_opts_destroy(struct rumor_node_opts **self_p)
{
    free(*self_p);
    *self_p = NULL;
}

rumor_err
rumor_peer_new(const struct rumor_node_opts *opts,
               const struct rumor_peer_tensor *tensors,
               size_t count,
               rumor_peer **out,
               struct rumor_diag *diag)
{
    *out = NULL;
    if (count == 0 || count > RUMOR_GOSSIP_MAX_TENSORS) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "a peer needs 1 to %d tensors, not %zu",
                       RUMOR_GOSSIP_MAX_TENSORS,
                       count);
        return RUMOR_EINVAL;
    }
    for (size_t k = 0; k < count; k++) {
        rumor_err rc = s_check_tensor(&tensors[k], k, diag);
        if (rc != RUMOR_OK)
            return rc;
    }
    rumor_peer *peer = calloc(1, sizeof *peer);
    if (peer == NULL)
        return RUMOR_ENOMEM;
    peer->slots = calloc(count, sizeof *peer->slots);
    peer->tensors = calloc(count, sizeof *peer->tensors);
    rumor_err rc = peer->slots && peer->tensors ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        peer->count = k + 1;
        rc = s_add_slot(peer, k, &tensors[k]);
    }
    peer->model = (struct rumor_model){peer->tensors, count};
    peer->id = opts->id;
    peer->connect_ms = opts->connect_ms;
    peer->gossip = opts->gossip;
    /* the algorithm's state starts from the caller's numbers */
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, true);
    /* for the HELLO description: a peer whose model differs is told
     * which tensor, with the caller's dtypes */
    rumor_dtype *dtypes = calloc(count, sizeof *dtypes);
    if (dtypes == NULL && rc == RUMOR_OK)
        rc = RUMOR_ENOMEM;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        dtypes[k] = tensors[k].dtype;
    if (rc == RUMOR_OK)
        rc = node_new_model(opts, &peer->model, dtypes, &peer->node, diag);
    free(dtypes);
    if (rc != RUMOR_OK) {
        rumor_peer_destroy(&peer);
        return rc;
    }
    *out = peer;
    return RUMOR_OK;
}

void
rumor_peer_destroy(rumor_peer **self_p)
{
    rumor_peer *peer = *self_p;
    if (peer == NULL)
        return;
    if (peer->node != NULL && peer->started)
        node_flush(peer->node);
    rumor_gossip_destroy(&peer->avg);
    rumor_node_destroy(&peer->node);
    for (size_t k = 0; k < peer->count; k++) {
        free(peer->slots[k].stage);
        free(peer->slots[k].raw);
    }
    free(peer->slots);
    free(peer->tensors);
    free(peer);
    *self_p = NULL;
}

rumor_err
rumor_peer_gossip(rumor_peer *peer, struct rumor_diag *diag)
{
    return s_step(peer, NULL, diag);
}

rumor_err
rumor_peer_step_ahead(rumor_peer *peer, struct rumor_diag *diag)
{
    if (!rumor_peer_looks_ahead(peer))
        return RUMOR_OK;
    rumor_err rc = s_stage_all(peer, true);
    if (rc == RUMOR_OK)
        rc = rumor_gossip_step_ahead(node_gossip(peer->node));
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    if (rc != RUMOR_OK)
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "step %llu: step ahead: %s",
                       (unsigned long long)peer->step + 1,
                       rumor_strerror(rc));
    return rc;
}

bool
rumor_peer_looks_ahead(const rumor_peer *peer)
{
    const struct rumor_gossip_opts *g = &peer->gossip;
    return strcmp(g->algo, "localsgd") == 0 && g->delta_codec[0] != '\0' &&
           g->ef_alpha > 0;
}

rumor_err
rumor_peer_average(rumor_peer *peer, struct rumor_diag *diag)
{
    if (peer->avg == NULL) {
        struct rumor_gossip_opts go;
        rumor_gossip_opts_default(&go);
        snprintf(go.algo, sizeof go.algo, "allreduce");
        rumor_err rc = rumor_gossip_new(&go,
                                        node_topology(peer->node),
                                        peer->id,
                                        &peer->model,
                                        &peer->avg,
                                        diag);
        if (rc != RUMOR_OK)
            return rc;
    }
    return s_step(peer, peer->avg, diag);
}

rumor_err
rumor_peer_report(rumor_peer *peer,
                  double loss,
                  double test_loss,
                  double accuracy)
{
    struct node_report r = {loss, test_loss, accuracy};
    return node_report_step(peer->node, peer->step, &r);
}

void
rumor_peer_stats(const rumor_peer *peer, struct rumor_peer_stats *out)
{
    struct rumor_node_summary sum;
    struct node_counters c;
    rumor_node_summary(peer->node, &sum);
    node_counters(peer->node, &c);
    *out = (struct rumor_peer_stats){
        .steps = peer->step,
        .bytes_sent = sum.bytes_sent,
        .bytes_recv = sum.bytes_recv,
        .gossip_bytes_sent = sum.gossip_bytes_sent,
        .gossip_bytes_recv = sum.gossip_bytes_recv,
        .gossip_frames_sent = c.gossip_frames_sent,
        .seconds = c.seconds,
        .seconds_gossip = c.seconds_gossip,
        .seconds_wait = c.seconds_wait,
        .seconds_copy = peer->t_copy,
    };
}

uint32_t
rumor_peer_nodes(const rumor_peer *peer)
{
    return (uint32_t)rumor_topology_nodes(node_topology(peer->node));
}

rumor_err
rumor_peer_state_save(const rumor_peer *peer, rumor_buf *out)
{
    uint8_t head[PEER_STATE_HEAD];
    memcpy(head, PEER_STATE_MAGIC, 8);
    for (int b = 0; b < 8; b++)
        head[8 + b] = (uint8_t)(peer->step >> (8 * b));
    rumor_err rc = rumor_buf_append(out, head, sizeof head);
    if (rc == RUMOR_OK)
        rc = rumor_gossip_state_save(node_gossip(peer->node), out);
    return rc;
}

rumor_err
rumor_peer_state_load(rumor_peer *peer,
                      const uint8_t *data,
                      size_t len,
                      struct rumor_diag *diag)
{
    if (len < PEER_STATE_HEAD || memcmp(data, PEER_STATE_MAGIC, 8) != 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "not a Rumor peer state (%zu bytes, no magic)",
                       len);
        return RUMOR_EPROTO;
    }
    uint64_t step = 0;
    for (int b = 0; b < 8; b++)
        step |= (uint64_t)data[8 + b] << (8 * b);
    rumor_err rc = rumor_gossip_state_load(node_gossip(peer->node),
                                           data + PEER_STATE_HEAD,
                                           len - PEER_STATE_HEAD,
                                           diag);
    if (rc == RUMOR_OK) {
        peer->step = step;
        node_restarted(peer->node, step);
    }
    return rc;
}

void
rumor_peer_stop(rumor_peer *peer)
{
    rumor_node_stop(peer->node);
}

bool
rumor_peer_stopped(const rumor_peer *peer)
{
    return peer->stopped;
}

rumor_err
rumor_node_workload_new(const struct rumor_node_opts *opts,
                        rumor_workload **out,
                        struct rumor_diag *diag)
{
    *out = NULL;
    rumor_topology *t = NULL;
    struct rumor_dataset *data = NULL;
    struct rumor_workload_opts wo = opts->workload;
    rumor_err rc = rumor_topology_load_file(opts->topology, &t, diag);
    if (rc == RUMOR_OK && opts->dataset[0] != '\0')
        rc = rumor_dataset_open(opts->dataset, wo.seed, &data, diag);
    if (rc == RUMOR_OK) {
        wo.dataset = data; /* borrowed during _new only */
        wo.node = opts->id;
        wo.nodes = (uint32_t)rumor_topology_nodes(t);
        rc = rumor_workload_new(&wo, out, diag);
    }
    rumor_dataset_destroy(&data);
    rumor_topology_destroy(&t);
    return rc;
}
