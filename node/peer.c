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
 * after the same step (docs/reliability.md). This file stages tensors
 * and counts steps, and for a ring algorithm's elastic ring (node/elastic.c)
 * keeps what the runtime's own loop need not: the tensors after each step
 * (what a member that missed the step takes), the inputs of the step in
 * flight (what a dropped step runs again from) and the caller's state for
 * a joiner (docs/reliability.md, "Elastic rings under the peer API").
 * Those copies live where the tensors do: on the GPU when the algorithm
 * runs there, crossing to the host only for a view change's STATE.
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
 * CUDA tensors are copied by node/peer_cuda.cu between device memory and
 * page-locked host buffers, asynchronously on a stream of the peer's,
 * ordered against the caller's stream by events (rumor_peer_set_stream);
 * the downloads of a call are queued together, a tensor converted while
 * the later ones run, and a tensor's upload runs while the next one is
 * converted. The bytes moved are counted each way (rumor_peer_stats, the
 * metrics line).
 *
 * average() is an exact ring all-reduce over the same transport (the
 * runtime links the ring successor for peers), the synchronisation step of
 * local SGD whatever gossip algorithm the peer runs otherwise.
 *
 * Buckets (rumor_peer_buckets_set) cut a gradient exchange into
 * exchanges of consecutive tensors, one after another within a step, so
 * that a caller can start the first while its backward pass still
 * computes the others' gradients (rumor.torch, as DDP's buckets). Each
 * bucket is the algorithm on its own tensors (its own instance, so
 * PowerSGD's P and Q all-reduces, warm-start Q and error memories, and
 * the codecs' error memories stay per tensor, as whole), with the random
 * streams of the whole model's tensors (gossip opts tensor_base), and its
 * rounds travel after the earlier buckets' (node_gossip_bucket): a
 * neighbour a bucket ahead never meets the wrong message. What differs
 * from the whole exchange is the ring's chunking: a chunk is cut from the
 * bucket's floats, so an element's n partial sums are added in another
 * order for n >= 3 (the same bits for 2 nodes, where a + b = b + a, and
 * for allreduce-f64 and the codecs, whose sums are exact or per element
 * in node order). The first bucket begins the step (links, stop plan),
 * the last one ends it.
 *
 * Stale exchanges (opts.gossip.stale = S > 0, a model exchange) run as
 * `rumor node --stale` runs them (node/stale.c): the node's algorithm,
 * fault path and elastic ring work on a copy of the tensors (node->mix)
 * that only the exchange's thread touches, and each gossip() lands the
 * exchanges of S steps ago on the (staged) tensors and queues its own on
 * a snapshot of them, so the caller's loop never waits for the network
 * unless an exchange due is late. What needs the exchange on the
 * caller's thread is refused: buckets, average(), join (docs/python.md).
 */
#include "rumor/node.h"

#include "core/cuda_stream.h"
#include "gossip/gossip_impl.h"
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
/* with buckets: "RUMORPB1", the next step, u64 buckets, then per bucket
 * u64 first, u64 count, u64 length and its gossip state */
#define PEER_BUCKETS_MAGIC "RUMORPB1"

struct s_slot {
    struct rumor_peer_tensor t; /* the caller's */
    size_t numel;
    float *stage; /* float32 host copy; NULL when gossiped in place */
    void *raw;    /* CUDA, not float32: host copy of the device bytes */
    void *pinned; /* CUDA: stage or raw, page-locked (what is copied) */
};

/* Tensors [first, first + count) as one exchange of their own. */
struct s_bucket {
    size_t first, count;
    struct rumor_model model; /* those tensors */
    rumor_gossip *g;          /* the algorithm on them */
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
    node_peer_cuda *cuda;        /* copies of the CUDA tensors; NULL: none */
    uint64_t pcie_h2d, pcie_d2h; /* bytes those copies moved */
    /* the algorithms run on the CUDA tensors where they are (s_direct) */
    bool direct;
    /* a direct step's caller's-stream order is taken, not yet given back
     * (node/peer_cuda.h direct_begin, direct_end) */
    bool direct_open;
    /* the tensors' memory (gossip/backend.h): the host's, or with direct
     * the GPU's (the reference device's in the tests); the elastic ring's
     * models live there too */
    const struct gossip_backend_i *mem;
    struct rumor_model host;         /* direct: a host copy, made when asked */
    struct rumor_gossip_opts gossip; /* the divergence error, the look-ahead */
    uint64_t seed;                   /* the run seed of the algorithm */
    struct s_bucket *buckets;        /* NULL: every tensor in one exchange */
    size_t nbuckets;
    size_t bucket_next;   /* the bucket the step in flight exchanges next */
    uint32_t round_next;  /* its first round on the wire */
    uint64_t bucket_step; /* the step in flight */
    bool bucket_stop;     /* it is the agreed stop: buckets do nothing */
    bool bucket_first;    /* it is the peer's first step */
    /* an elastic ring (node/elastic.c) */
    node_elastic *elastic;         /* the node's; NULL: none */
    struct node_elastic_algo ring; /* what a view change does here */
    struct rumor_model *held;      /* the tensors after the last step */
    struct rumor_model *kept;      /* the inputs of the step in flight */
    bool *is_kept;                 /* per tensor: kept holds its input */
    uint32_t *members;             /* the ring's, for an instance made later */
    size_t nmembers;               /* 0: every node */
    bool settled;                  /* the step in flight is the held result */
    bool failed;    /* the last step failed: no longer a member */
    bool gradients; /* the tensors are gradients, not the model */
    rumor_peer_state_fn state_source; /* the caller's state, for a joiner */
    void *state_arg;
    rumor_buf joined_state; /* a member's caller state, taken at a join */
    bool joined;            /* a join since rumor_peer_joined */
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

/* Bytes of the caller's tensor, what a copy of it moves. */
static size_t
s_bytes(const struct s_slot *s)
{
    return s->numel * rumor_dtype_size(s->t.dtype);
}

/* Queues the downloads of the CUDA tensors among [first, first + count)
 * after the caller's writes (node/peer_cuda.h), tensor k's marked k. */
static rumor_err
s_download(rumor_peer *peer, size_t first, size_t count)
{
    if (peer->cuda == NULL)
        return RUMOR_OK;
    rumor_err rc = node_peer_cuda_read_begin(peer->cuda);
    for (size_t k = first; k < first + count && rc == RUMOR_OK; k++) {
        const struct s_slot *s = &peer->slots[k];
        if (s->pinned == NULL)
            continue;
        rc = node_peer_cuda_download(peer->cuda,
                                     k,
                                     s->pinned,
                                     s->t.data,
                                     s_bytes(s));
        peer->pcie_d2h += rc == RUMOR_OK ? s_bytes(s) : 0;
    }
    return rc;
}

/* Tensor k into its float32 staging: a host tensor converted, a CUDA
 * one's raw bytes converted once its own download is done, while later
 * ones are still under way (a float32 one lands in the staging). */
static rumor_err
s_stage_in(rumor_peer *peer, size_t k)
{
    const struct s_slot *s = &peer->slots[k];
    if (s->stage == NULL)
        return RUMOR_OK;
    if (s->t.device != RUMOR_DEVICE_CUDA) {
        s_to_f32(s->t.data, s->t.dtype, s->numel, s->stage);
        return RUMOR_OK;
    }
    if (s->raw == NULL)
        return RUMOR_OK;
    rumor_err rc = node_peer_cuda_downloaded(peer->cuda, k);
    if (rc == RUMOR_OK)
        s_to_f32(s->raw, s->t.dtype, s->numel, s->stage);
    return rc;
}

/* The float32 staging back into the caller's host tensor, or into the
 * pinned buffer its upload reads, then the upload queued: converting
 * tensor k + 1 overlaps the upload of tensor k. */
static rumor_err
s_stage_out(rumor_peer *peer, const struct s_slot *s)
{
    if (s->stage == NULL)
        return RUMOR_OK;
    if (s->t.device != RUMOR_DEVICE_CUDA) {
        s_from_f32(s->stage, s->numel, s->t.dtype, s->t.data);
        return RUMOR_OK;
    }
    if (s->raw != NULL)
        s_from_f32(s->stage, s->numel, s->t.dtype, s->raw);
    rumor_err rc =
        node_peer_cuda_upload(peer->cuda, s->t.data, s->pinned, s_bytes(s));
    peer->pcie_h2d += rc == RUMOR_OK ? s_bytes(s) : 0;
    return rc;
}

/* Before the host writes staging buffers outside a staged step: the
 * uploads that read them are done. */
static rumor_err
s_staging_free(rumor_peer *peer)
{
    return peer->cuda != NULL ? node_peer_cuda_idle(peer->cuda) : RUMOR_OK;
}

static rumor_err
s_upload(rumor_peer *peer, size_t first, size_t count)
{
    rumor_err rc = s_staging_free(peer);
    for (size_t k = first; k < first + count && rc == RUMOR_OK; k++)
        rc = s_stage_out(peer, &peer->slots[k]);
    /* after a failed upload too: the caller's stream still waits for
     * those queued before it */
    rumor_err end =
        peer->cuda != NULL ? node_peer_cuda_write_end(peer->cuda) : RUMOR_OK;
    return rc != RUMOR_OK ? rc : end;
}

/* A direct step's order against the caller's stream (node/peer_cuda.h):
 * in, the caller's writes done and the tensors' device current; out, the
 * caller's stream after the algorithm's work. The reference device of the
 * tests is host memory: nothing to order. */
static rumor_err
s_direct_order(rumor_peer *peer, bool in)
{
    if (peer->cuda == NULL)
        return RUMOR_OK;
    peer->direct_open = in;
    return in ? node_peer_cuda_direct_begin(peer->cuda)
              : node_peer_cuda_direct_end(peer->cuda);
}

/* A public entry's device work goes on Rumor's stream when the
 * algorithm runs on the tensors' device (core/cuda_stream.h: a direct
 * peer's every piece of device work on the one stream, met by the
 * caller's through events only); returns the thread's setting before,
 * for s_own_end. */
static bool
s_own_begin(const rumor_peer *peer)
{
    return core_cuda_own_stream(peer->direct || core_cuda_own_stream_on());
}

/* The entry's end: a direct step a failure left open gives its order
 * back (the caller's stream waits for the algorithm's work, which may
 * have written the tensors), and the thread's setting is restored. */
static rumor_err
s_own_end(rumor_peer *peer, bool was, rumor_err rc)
{
    if (peer->direct_open) {
        rumor_err end = s_direct_order(peer, false);
        rc = rc != RUMOR_OK ? rc : end;
    }
    core_cuda_own_stream(was);
    return rc;
}

/* Tensors [first, first + count) into (in) or out of their staging. */
static rumor_err
s_stage_range(rumor_peer *peer, size_t first, size_t count, bool in)
{
    uint64_t t0 = rumor_clock_ns();
    rumor_err rc = RUMOR_OK;
    if (peer->direct) {
        rc = s_direct_order(peer, in);
    } else if (in) {
        rc = s_download(peer, first, count);
        for (size_t k = first; k < first + count && rc == RUMOR_OK; k++)
            rc = s_stage_in(peer, k);
        /* every download done: the staging is the host's */
        if (rc == RUMOR_OK && peer->cuda != NULL)
            rc = node_peer_cuda_read_end(peer->cuda);
    } else {
        rc = s_upload(peer, first, count);
    }
    peer->t_copy += (double)(rumor_clock_ns() - t0) * 1e-9;
    return rc;
}

static rumor_err
s_stage_all(rumor_peer *peer, bool in)
{
    return s_stage_range(peer, 0, peer->count, in);
}

/* --- an elastic ring ----------------------------------------------------- */

/* Tensors [first, first + count) of src into dst (same shapes), both in
 * the tensors' memory: on the GPU, a device copy queued after the
 * algorithm's work, never through the host. */
static rumor_err
s_copy(const rumor_peer *peer,
       struct rumor_model *dst,
       const struct rumor_model *src,
       size_t first,
       size_t count)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = first; k < first + count && rc == RUMOR_OK; k++)
        rc = peer->mem->copy(dst->tensors[k].data,
                             src->tensors[k].data,
                             rumor_tensor_numel(&src->tensors[k]) *
                                 sizeof(float),
                             GOSSIP_ON_DEVICE);
    return rc;
}

/* A model of src's shapes and numbers in the tensors' memory (one
 * allocation); free with s_model_free. */
static rumor_err
s_model_new(const rumor_peer *peer,
            const struct rumor_model *src,
            struct rumor_model **out)
{
    if (!peer->direct)
        return rumor_model_clone(src, out);
    struct rumor_model *m = calloc(1, sizeof *m);
    struct rumor_tensor *ts = calloc(src->count, sizeof *ts);
    size_t floats = 0;
    for (size_t k = 0; k < src->count; k++)
        floats += rumor_tensor_numel(&src->tensors[k]);
    void *data = NULL;
    rumor_err rc = m != NULL && ts != NULL
                       ? peer->mem->alloc(floats * sizeof(float), &data)
                       : RUMOR_ENOMEM;
    float *at = data;
    for (size_t k = 0; k < src->count && rc == RUMOR_OK; k++) {
        ts[k] = src->tensors[k];
        ts[k].data = at;
        at += rumor_tensor_numel(&src->tensors[k]);
    }
    if (rc == RUMOR_OK) {
        *m = (struct rumor_model){ts, src->count};
        rc = s_copy(peer, m, src, 0, src->count);
    }
    if (rc != RUMOR_OK) {
        peer->mem->release(data);
        free(ts);
        free(m);
        return rc;
    }
    *out = m;
    return RUMOR_OK;
}

static void
s_model_free(const rumor_peer *peer, struct rumor_model **m)
{
    if (!peer->direct || *m == NULL) {
        rumor_model_free(m);
        return;
    }
    peer->mem->release((*m)->tensors[0].data);
    free((*m)->tensors);
    free(*m);
    *m = NULL;
}

/* The inputs of tensors [first, first + count) for an attempt at the step
 * in flight: kept at the first attempt, put back at a redo (the exchange
 * works in place). */
static rumor_err
s_inputs(rumor_peer *peer, size_t first, size_t count)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = first;
         peer->kept != NULL && k < first + count && rc == RUMOR_OK;
         k++) {
        if (peer->is_kept[k])
            rc = s_copy(peer, &peer->model, peer->kept, k, 1);
        else
            rc = s_copy(peer, peer->kept, &peer->model, k, 1);
        peer->is_kept[k] = rc == RUMOR_OK;
    }
    return rc;
}

/* The tensors' result of a step that succeeded, held for a member that
 * misses the next one (a settled step's result is held already). Before
 * the tensors go back to the caller, who may write them at once: on the
 * GPU the copy is queued before the event the caller's stream waits on. */
static rumor_err
s_hold(rumor_peer *peer)
{
    if (peer->held == NULL || peer->settled)
        return RUMOR_OK;
    return s_copy(peer, peer->held, &peer->model, 0, peer->count);
}

/* What view changes handed this node. The ring's result of the steps it
 * missed settles the step in flight (*step becomes the last of them); a
 * joiner takes the member's caller state and, when the tensors are the
 * model, the member's model, from which the step in flight runs. */
static rumor_err
s_after_view(rumor_peer *peer, uint64_t *step)
{
    unsigned took =
        peer->elastic != NULL ? node_elastic_taken(peer->elastic) : 0;
    rumor_err rc = RUMOR_OK;
    if ((took & NODE_ELASTIC_TOOK_JOINED) != 0) {
        peer->joined = true;
        for (size_t k = 0; !peer->gradients && k < peer->count; k++) {
            rc = rc == RUMOR_OK ? s_copy(peer, peer->kept, peer->held, k, 1)
                                : rc;
            peer->is_kept[k] = true;
        }
    } else if ((took & NODE_ELASTIC_TOOK_RESULT) != 0) {
        peer->settled = true;
        *step -= 1; /* a member completed it, so it is not step 0 */
    }
    return rc;
}

/* After the exchange of step *step failed with *rc: in an elastic ring,
 * the view change seen through (node_step_retry) and the new ring's step
 * begun; true when the step in flight goes on (run again, unless the view
 * change settled it or reached the agreed stop). */
static bool
s_retry(rumor_peer *peer, rumor_err *rc, uint64_t *step, bool *stop)
{
    if (!node_step_retry(peer->node, rc, step))
        return false;
    if (*rc == RUMOR_OK)
        *rc = s_after_view(peer, step);
    if (*rc == RUMOR_OK && !peer->settled) {
        *rc = node_step_begin(peer->node, step, stop);
        if (*rc == RUMOR_OK)
            *rc = s_after_view(peer, step);
    }
    return *rc == RUMOR_OK;
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
    bool in_place = peer->direct || (t->dtype == RUMOR_DTYPE_F32 &&
                                     t->device == RUMOR_DEVICE_CPU);
    if (in_place) {
        rt->data = t->data;
        return RUMOR_OK;
    }
    /* one extra element so that empty tensors get a real pointer; a
     * CUDA tensor's copies go to and from page-locked memory: the float32
     * staging itself, or the raw bytes its conversions read and write */
    bool cuda = t->device == RUMOR_DEVICE_CUDA;
    size_t f32_bytes = (s->numel + 1) * sizeof(float);
    rumor_err rc = RUMOR_OK;
    if (cuda && t->dtype == RUMOR_DTYPE_F32) {
        rc = node_peer_cuda_host_alloc(peer->cuda, f32_bytes, &s->pinned);
        s->stage = s->pinned;
    } else {
        s->stage = malloc(f32_bytes);
        rc = s->stage != NULL ? RUMOR_OK : RUMOR_ENOMEM;
        if (rc == RUMOR_OK && cuda)
            rc = node_peer_cuda_host_alloc(peer->cuda,
                                           (s->numel + 1) *
                                               rumor_dtype_size(t->dtype),
                                           &s->pinned);
        s->raw = s->pinned;
    }
    rt->data = s->stage;
    return rc;
}

/* The copy engine on the device of the CUDA tensors (one device per
 * peer: the engine's stream, events and pinned buffers belong to it). */
static rumor_err
s_cuda_new(rumor_peer *peer,
           const struct rumor_peer_tensor *tensors,
           size_t count,
           struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        const void *data = tensors[k].data;
        if (tensors[k].device != RUMOR_DEVICE_CUDA)
            continue;
        if (peer->cuda == NULL)
            rc = node_peer_cuda_new(data, count, &peer->cuda);
        else if (!node_peer_cuda_same_device(peer->cuda, data))
            rc = RUMOR_EINVAL;
        if (rc != RUMOR_OK)
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "tensor %zu: %s",
                           k,
                           rc == RUMOR_EINVAL
                               ? "on another CUDA device than the peer's "
                                 "first CUDA tensor (one device per peer)"
                               : "not CUDA device memory of a device this "
                                 "process can use (see the log)");
    }
    return rc;
}

/* --- the algorithm on the GPU (gossip/backend.h) ------------------------- */

/* Why a peer whose tensors are device memory (CUDA's; the host's that the
 * tests treat as the reference device's) copies them to the host for its
 * algorithm, or NULL: the algorithm runs on them where they are. The
 * model crosses to the host only where it must: a join's incoming model
 * arrives in a host copy and is copied in (s_to_device). An elastic
 * ring's held models stay on the device and cross to the host only for
 * a view change's STATE (s_ring_model_out / _in); stale exchanges keep
 * their snapshots on the device too (node/stale.c), except under a ring
 * algorithm, whose exchange thread's ring packs its model on the host
 * (the node refuses it, RUMOR_ENOTSUP: the peer stages). */
static const char *
s_direct_refused(const struct rumor_peer_tensor *t,
                 size_t count,
                 rumor_device where)
{
    for (size_t k = 0; k < count; k++)
        if (t[k].device != where || t[k].dtype != RUMOR_DTYPE_F32)
            return "not every tensor is float32 in CUDA memory";
    return NULL;
}

/* True when the algorithm runs on the CUDA tensors; logs why not when
 * some are CUDA memory. */
static bool
s_direct(const struct rumor_node_opts *o,
         const struct rumor_peer_tensor *t,
         size_t count)
{
    bool cuda = false;
    for (size_t k = 0; k < count; k++)
        cuda = cuda || t[k].device == RUMOR_DEVICE_CUDA;
    const char *why = s_direct_refused(t, count, RUMOR_DEVICE_CUDA);
    if (cuda && why != NULL)
        rumor_log(RUMOR_LOG_INFO,
                  "peer: CUDA tensors copied to host memory for %s each "
                  "step: %s (docs/python.md)",
                  o->gossip.algo,
                  why);
    return cuda && why == NULL;
}

/* Where the tensors are and the algorithms run: on the device with
 * direct (be: the tests' reference device; NULL: CUDA's when s_direct
 * says so), else on the host after the staging. */
static rumor_err
s_memory(rumor_peer *peer,
         const struct rumor_node_opts *o,
         const struct rumor_peer_tensor *t,
         size_t count,
         const struct gossip_backend_i *be,
         bool stage,
         struct rumor_diag *diag)
{
    const char *why = NULL;
    rumor_err rc = RUMOR_OK;
    if (be != NULL) {
        why = s_direct_refused(t, count, RUMOR_DEVICE_CPU);
        rc = why != NULL ? RUMOR_EINVAL : RUMOR_OK;
    } else if (!stage && s_direct(o, t, count)) {
        rc = gossip_backend_cuda(&be, &why);
    }
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag, "", 0, 0, "a model on the device: %s", why);
        return rc;
    }
    peer->direct = be != NULL;
    peer->mem = be != NULL ? be : &gossip_backend_host;
    return RUMOR_OK;
}

/* direct: the host copy of the model (peer->host), made on first use. */
static rumor_err
s_host_new(rumor_peer *peer)
{
    if (peer->host.tensors != NULL)
        return RUMOR_OK;
    peer->host.tensors = calloc(peer->count, sizeof *peer->host.tensors);
    peer->host.count = peer->count;
    rumor_err rc = peer->host.tensors != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; k < peer->count && rc == RUMOR_OK; k++) {
        peer->host.tensors[k] = peer->tensors[k];
        peer->host.tensors[k].data =
            malloc((peer->slots[k].numel + 1) * sizeof(float));
        rc = peer->host.tensors[k].data != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    }
    return rc;
}

/* The host copy from (to_host) or into a model in the tensors' memory,
 * counted. With CUDA the tensors' device made current first: the copies
 * run on Rumor's stream there (core/cuda_stream.h), after the caller's
 * writes, the algorithm's work and the held model's copies. */
static rumor_err
s_host_move(rumor_peer *peer, struct rumor_model *dev, bool to_host)
{
    rumor_err rc = s_host_new(peer);
    if (rc == RUMOR_OK && peer->cuda != NULL)
        rc = node_peer_cuda_direct_begin(peer->cuda);
    for (size_t k = 0; k < peer->count && rc == RUMOR_OK; k++) {
        void *host = peer->host.tensors[k].data;
        size_t bytes = s_bytes(&peer->slots[k]);
        rc = to_host ? peer->mem->copy(host,
                                       dev->tensors[k].data,
                                       bytes,
                                       GOSSIP_TO_HOST)
                     : peer->mem->copy(dev->tensors[k].data,
                                       host,
                                       bytes,
                                       GOSSIP_TO_DEVICE);
        *(to_host ? &peer->pcie_d2h : &peer->pcie_h2d) +=
            rc == RUMOR_OK ? bytes : 0;
    }
    return rc;
}

/* node_model_src.to_host: the tensors copied into the host copy (a STATE
 * for a restarted neighbour, which is rare; no elastic ring then, whose
 * STATEs use the same host copy). */
static rumor_err
s_to_host(void *arg, const struct rumor_model **host)
{
    rumor_peer *peer = arg;
    *host = &peer->host;
    return s_host_move(peer, &peer->model, true);
}

/* node_model_src.to_device: a joiner's model into the tensors, through
 * the host copy (once per join). */
static rumor_err
s_to_device(void *arg, const struct rumor_model *host)
{
    rumor_peer *peer = arg;
    rumor_err rc = s_host_new(peer);
    for (size_t k = 0; k < peer->count && rc == RUMOR_OK; k++)
        memcpy(peer->host.tensors[k].data,
               host->tensors[k].data,
               s_bytes(&peer->slots[k]));
    return rc == RUMOR_OK ? s_host_move(peer, &peer->model, false) : rc;
}

static void
s_host_free(rumor_peer *peer)
{
    for (size_t k = 0; peer->host.tensors != NULL && k < peer->count; k++)
        free(peer->host.tensors[k].data);
    free(peer->host.tensors);
}

/* The peer's copies each way, and those of its algorithms on the GPU. */
static void
s_pcie(const rumor_peer *peer, uint64_t *h2d, uint64_t *d2h)
{
    *h2d = peer->pcie_h2d;
    *d2h = peer->pcie_d2h;
    rumor_gossip *g[2] = {node_gossip(peer->node), peer->avg};
    for (size_t k = 0; peer->direct && k < 2 + peer->nbuckets; k++) {
        rumor_gossip *one = k < 2 ? g[k] : peer->buckets[k - 2].g;
        uint64_t up = 0, down = 0;
        if (one != NULL)
            rumor_gossip_pcie_bytes(one, &up, &down);
        *h2d += up;
        *d2h += down;
    }
}

static void
s_pcie_report(rumor_peer *peer)
{
    uint64_t h2d = 0, d2h = 0;
    s_pcie(peer, &h2d, &d2h);
    node_pcie_set(peer->node, h2d, d2h);
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

/* The start of a step as rumor_node_run makes it (node/runtime.c): the
 * links at the first, then the fault path's handshakes and the stop plan
 * (node_step_begin), which may move *step on or set *stop. */
static rumor_err
s_step_begin(rumor_peer *peer,
             uint64_t *step,
             bool *stop,
             struct rumor_diag *diag)
{
    *step = peer->step;
    *stop = false;
    /* the caller's training between two steps is the compute time the
     * adaptive link budgets aim at (a no-op without --adapt) */
    if (peer->last_end != 0)
        rumor_gossip_compute_observe(node_gossip(peer->node),
                                     rumor_clock_ns() - peer->last_end);
    rumor_err rc = peer->started ? RUMOR_OK : s_start(peer, step, diag);
    if (rc == RUMOR_OK)
        rc = node_step_begin(peer->node, step, stop);
    if (rc == RUMOR_OK)
        rc = s_after_view(peer, step);
    return rc;
}

/* rc, or RUMOR_EPROTO when a neighbour refused this node during its
 * first step (node_check_refusals says why in diag). */
static rumor_err
s_refusals(rumor_peer *peer, bool first, rumor_err rc, struct rumor_diag *diag)
{
    if (first && (rc == RUMOR_OK || rc == RUMOR_EPROTO) &&
        node_check_refusals(peer->node, diag) != RUMOR_OK)
        return RUMOR_EPROTO;
    return rc;
}

/* The end of a step whose exchange gave rc: a step that succeeded
 * counts; diag says why one failed. */
static rumor_err
s_step_end(rumor_peer *peer,
           uint64_t step,
           bool stop,
           rumor_err rc,
           struct rumor_diag *diag)
{
    if (rc == RUMOR_OK) {
        peer->stopped = stop;
        peer->step = stop ? step : step + 1;
        s_pcie_report(peer);
        rc = node_report_step(peer->node, peer->step, NULL);
    }
    peer->settled = false;
    peer->failed = rc != RUMOR_OK;
    for (size_t k = 0; peer->is_kept != NULL && k < peer->count; k++)
        peer->is_kept[k] = false;
    peer->last_end = rumor_clock_ns();
    if (rc != RUMOR_OK)
        s_step_error(peer, step, rc, diag);
    return rc;
}

/* A joiner of a gradient exchange takes the ring's model before its next
 * step: its own, which its gradients would come from, is not the ring's. */
static rumor_err
s_joined_unread(rumor_peer *peer, struct rumor_diag *diag)
{
    if (!peer->joined || !peer->gradients)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "this node was taken into the ring at step %llu and its "
                   "tensors are gradients: load the ring's model first (the "
                   "state a member's save_state gave: Python's peer.join() "
                   "or peer.joined_state(), C's rumor_peer_joined; "
                   "rumor.torch.GossipModel does it)",
                   (unsigned long long)peer->step + 1);
    peer->failed = true;
    return RUMOR_EINVAL;
}

/* One step of g (NULL: the node's algorithm) on every tensor. Staged
 * tensors are staged before the links (a join writes into them) and
 * written back only when the whole step succeeded. */
static rumor_err
s_step(rumor_peer *peer, rumor_gossip *g, struct rumor_diag *diag)
{
    if (peer->stopped)
        return RUMOR_OK;
    uint64_t step = peer->step;
    bool stop = false, first = !peer->started;
    rumor_err rc = s_joined_unread(peer, diag);
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, true);
    if (rc == RUMOR_OK)
        rc = s_step_begin(peer, &step, &stop, diag);
    while (rc == RUMOR_OK && !stop && !peer->settled) {
        rc = s_inputs(peer, 0, peer->count);
        if (rc == RUMOR_OK)
            rc = node_gossip_step(peer->node,
                                  g,
                                  step,
                                  rumor_clock_ns() +
                                      node_step_span(peer->node, step));
        if (rc == RUMOR_OK || !s_retry(peer, &rc, &step, &stop))
            break;
    }
    if (rc == RUMOR_OK && peer->settled)
        rc = s_copy(peer, &peer->model, peer->held, 0, peer->count);
    rc = s_refusals(peer, first, rc, diag);
    if (rc == RUMOR_OK)
        rc = s_hold(peer);
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    return s_step_end(peer, step, stop, rc, diag);
}

/* --- stale exchanges ---------------------------------------------------- */

/* A step with stale exchanges (opts.gossip.stale = S > 0): the exchanges
 * of step step - S and before land on the caller's tensors, then this
 * step's own (when the algorithm exchanges at it) is queued on a snapshot
 * of them and runs on the exchange's thread (node/stale.h) while the
 * caller trains on; nothing here waits for the network unless an
 * exchange due now is still under way. */
static rumor_err
s_stale_step(rumor_peer *peer, struct rumor_diag *diag)
{
    if (peer->stopped)
        return RUMOR_OK;
    uint64_t step = peer->step;
    bool stop = false, first = !peer->started;
    rumor_err rc = s_stage_all(peer, true);
    if (rc == RUMOR_OK && first)
        rc = s_start(peer, &step, diag);
    if (rc == RUMOR_OK)
        rc = node_stale_step(peer->node, &peer->model, step, &stop);
    rc = s_refusals(peer, first, rc, diag);
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    return s_step_end(peer, step, stop, rc, diag);
}

/* Why opts cannot run stale under the peer API, or NULL. */
static const char *
s_stale_refused(const struct rumor_node_opts *opts)
{
    if (opts->gossip.stale == 0)
        return NULL;
    if (opts->join)
        return "join: a joiner takes a neighbour's model at its first "
               "step, which the exchange's thread would have to hand to "
               "the caller's tensors (start it with stale 0)";
    return NULL;
}

/* RUMOR_EINVAL with diag when exchanges are queued or under way: their
 * corrections are neither in the caller's tensors nor in a state. */
static rumor_err
s_stale_idle(const rumor_peer *peer, const char *what, struct rumor_diag *diag)
{
    if (!node_stale_busy(peer->node))
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "%s at step %llu: a stale exchange is in flight (it "
                   "lands %u steps after it started); do it after the gossip() "
                   "of a step t with none in flight (localsgd: t %% period "
                   ">= stale) or after flush()",
                   what,
                   (unsigned long long)peer->step,
                   peer->gossip.stale);
    return RUMOR_EINVAL;
}

/* --- buckets ------------------------------------------------------------ */

/* The bucket's exchange in the step in flight, its rounds after those of
 * the buckets before it. Its staged tensors are written back when it
 * succeeded. */
static rumor_err
s_bucket_exchange(rumor_peer *peer,
                  const struct s_bucket *b,
                  struct rumor_diag *diag)
{
    uint64_t step = peer->bucket_step;
    uint32_t rounds = rumor_gossip_rounds(b->g, step);
    if (rounds > UINT32_MAX - peer->round_next) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "step %llu: the buckets need more than %u rounds: use "
                       "fewer buckets (a larger bucket_cap_mb)",
                       (unsigned long long)step + 1,
                       UINT32_MAX);
        return RUMOR_EINVAL;
    }
    rumor_err rc = s_stage_range(peer, b->first, b->count, true);
    if (rc == RUMOR_OK)
        rc = s_inputs(peer, b->first, b->count);
    if (rc == RUMOR_OK)
        rc = node_gossip_bucket(peer->node,
                                b->g,
                                step,
                                peer->round_next,
                                rumor_clock_ns() +
                                    node_step_span(peer->node, step));
    peer->round_next += rounds;
    /* the last bucket's success ends the step */
    if (rc == RUMOR_OK && b == &peer->buckets[peer->nbuckets - 1])
        rc = s_hold(peer);
    if (rc == RUMOR_OK)
        rc = s_stage_range(peer, b->first, b->count, false);
    return rc;
}

/* Buckets [first, last] of a step the ring settled: its result, as the
 * exchange would have left it. */
static rumor_err
s_buckets_settle(rumor_peer *peer, size_t first, size_t last)
{
    /* buckets exchanged before may still be uploading */
    rumor_err rc = s_staging_free(peer);
    for (size_t k = first; k <= last && rc == RUMOR_OK; k++) {
        const struct s_bucket *b = &peer->buckets[k];
        rc = s_copy(peer, &peer->model, peer->held, b->first, b->count);
        if (rc == RUMOR_OK)
            rc = s_stage_range(peer, b->first, b->count, false);
    }
    return rc;
}

/* Bucket k of the step in flight. In an elastic ring a view change that
 * drops the step runs buckets 0 to k again in the new ring (the later
 * ones follow as the caller hands them over, as every member's do); one
 * that settles it writes the ring's result into them. */
static rumor_err
s_bucket_run(rumor_peer *peer, size_t k, struct rumor_diag *diag)
{
    size_t j = k;
    rumor_err rc = RUMOR_OK;
    while (rc == RUMOR_OK && j <= k && !peer->bucket_stop) {
        if (peer->settled)
            return s_buckets_settle(peer, j, k);
        rc = s_bucket_exchange(peer, &peer->buckets[j], diag);
        if (rc == RUMOR_OK) {
            j++;
        } else if (s_retry(peer, &rc, &peer->bucket_step, &peer->bucket_stop)) {
            j = 0;
            peer->round_next = 0;
        }
    }
    return rc;
}

/* Bucket k of the step in flight: the first begins the step, the last
 * ends it, a failure ends it at once (the next call is bucket 0 of the
 * same step). */
static rumor_err
s_bucket(rumor_peer *peer, size_t k, struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    if (k == 0) {
        rc = s_joined_unread(peer, diag);
        if (rc != RUMOR_OK)
            return rc;
        peer->bucket_first = !peer->started;
        peer->round_next = 0;
        rc = s_step_begin(peer, &peer->bucket_step, &peer->bucket_stop, diag);
    }
    if (rc == RUMOR_OK && !peer->bucket_stop)
        rc = s_bucket_run(peer, k, diag);
    rc = s_refusals(peer, peer->bucket_first, rc, diag);
    bool last = k + 1 == peer->nbuckets;
    peer->bucket_next = rc == RUMOR_OK && !last ? k + 1 : 0;
    if (rc == RUMOR_OK && !last)
        return RUMOR_OK;
    return s_step_end(peer, peer->bucket_step, peer->bucket_stop, rc, diag);
}

static void
s_buckets_free(rumor_peer *peer)
{
    for (size_t k = 0; k < peer->nbuckets; k++)
        rumor_gossip_destroy(&peer->buckets[k].g);
    free(peer->buckets);
    peer->buckets = NULL;
    peer->nbuckets = 0;
}

/* Why the node's algorithm cannot be cut into buckets, or NULL. */
static const char *
s_buckets_refused(rumor_peer *peer)
{
    if (peer->gossip.stale > 0)
        return "stale exchanges run whole on their own thread, and buckets "
               "are for a gradient exchange, which cannot run stale";
    if (rumor_gossip_can_skip(node_gossip(peer->node)))
        return "it gossips the model through the fault path (it can skip "
               "a late neighbour); buckets are for a gradient exchange "
               "(allreduce, powersgd): exchange it whole";
    if (strcmp(peer->gossip.algo, "powersgd") == 0 &&
        peer->gossip.adapt[0] != '\0')
        return "adapt measures the whole model's approximation error: "
               "exchange it whole (rumor.torch: overlap=False)";
    return NULL;
}

/* The ranges cover every tensor exactly once, none empty. */
static rumor_err
s_buckets_check(const rumor_peer *peer,
                const struct rumor_peer_bucket *ranges,
                size_t count,
                struct rumor_diag *diag)
{
    bool *seen = calloc(peer->count, sizeof *seen);
    if (seen == NULL)
        return RUMOR_ENOMEM;
    size_t covered = 0, bad = count;
    for (size_t k = 0; k < count && bad == count; k++) {
        size_t first = ranges[k].first, n = ranges[k].count;
        if (n == 0 || first >= peer->count || n > peer->count - first)
            bad = k;
        for (size_t t = first; bad == count && t < first + n; t++) {
            bad = seen[t] ? k : bad;
            seen[t] = true;
        }
        covered += n;
    }
    free(seen);
    if (bad == count && covered == peer->count)
        return RUMOR_OK;
    char where[64];
    if (bad < count)
        snprintf(where, sizeof where, "bucket %zu does not fit", bad);
    else
        snprintf(where, sizeof where, "they hold %zu", covered);
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "buckets: each must be a non-empty range of the %zu "
                   "tensors, and together they must hold every tensor once "
                   "(%s)",
                   peer->count,
                   where);
    return RUMOR_EINVAL;
}

static rumor_err
s_bucket_new(rumor_peer *peer,
             struct s_bucket *b,
             const struct rumor_peer_bucket *range,
             struct rumor_diag *diag)
{
    struct rumor_gossip_opts go = peer->gossip;
    go.seed = peer->seed;
    go.tensor_base = range->first;
    b->first = range->first;
    b->count = range->count;
    b->model = (struct rumor_model){peer->tensors + b->first, b->count};
    return gossip_new_in(&go,
                         node_topology(peer->node),
                         peer->id,
                         &b->model,
                         peer->mem,
                         &b->g,
                         diag);
}

static void
s_put_u64(uint8_t *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t
s_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)p[b] << (8 * b);
    return v;
}

/* After the head: the buckets' ranges and states, as save writes them
 * (rumor_gossip_state_save, or rumor_gossip_snapshot_save). */
static rumor_err
s_buckets_write(const rumor_peer *peer,
                rumor_err (*save)(const rumor_gossip *, rumor_buf *),
                rumor_buf *out)
{
    uint8_t word[8];
    s_put_u64(word, peer->nbuckets);
    rumor_err rc = rumor_buf_append(out, word, sizeof word);
    for (size_t k = 0; k < peer->nbuckets && rc == RUMOR_OK; k++) {
        const struct s_bucket *b = &peer->buckets[k];
        uint8_t head[24];
        s_put_u64(head, b->first);
        s_put_u64(head + 8, b->count);
        size_t at = out->len;
        rc = rumor_buf_append(out, head, sizeof head);
        if (rc == RUMOR_OK)
            rc = save(b->g, out);
        if (rc == RUMOR_OK)
            s_put_u64(out->data + at + 16, out->len - at - sizeof head);
    }
    return rc;
}

static rumor_err
s_buckets_save(const rumor_peer *peer, rumor_buf *out)
{
    return s_buckets_write(peer, rumor_gossip_state_save, out);
}

/* Where bucket k's state lies in a state's body (after the head), or
 * RUMOR_EPROTO with diag when the body does not hold this peer's buckets. */
static rumor_err
s_buckets_find(const rumor_peer *peer,
               const uint8_t *p,
               size_t len,
               const uint8_t **at,
               size_t *at_len,
               struct rumor_diag *diag)
{
    const char *why = len < 8 || s_get_u64(p) != peer->nbuckets
                          ? "another number of buckets"
                          : NULL;
    size_t off = 8;
    for (size_t k = 0; k < peer->nbuckets && why == NULL; k++) {
        const struct s_bucket *b = &peer->buckets[k];
        if (len - off < 24) {
            why = "truncated";
            break;
        }
        uint64_t n = s_get_u64(p + off + 16);
        if (s_get_u64(p + off) != b->first ||
            s_get_u64(p + off + 8) != b->count)
            why = "other buckets";
        else if (n > len - off - 24)
            why = "truncated";
        at[k] = p + off + 24;
        at_len[k] = (size_t)n;
        off += why == NULL ? 24 + (size_t)n : 0;
    }
    if (why == NULL && off != len)
        why = "bytes after the buckets";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "peer state with buckets: %s (give the peer the buckets "
                   "it was saved with: rumor.torch's bucket_cap_mb)",
                   why);
    return RUMOR_EPROTO;
}

/* Loads every bucket's state, or none: the states before a failing one
 * are put back from a copy taken first. */
static rumor_err
s_buckets_load(rumor_peer *peer,
               const uint8_t *p,
               size_t len,
               struct rumor_diag *diag)
{
    const uint8_t **at = calloc(peer->nbuckets, sizeof *at);
    size_t *at_len = calloc(peer->nbuckets, sizeof *at_len);
    rumor_buf old;
    rumor_buf_init(&old, RUMOR_GOSSIP_STATE_MAX);
    rumor_err rc = at != NULL && at_len != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_buckets_find(peer, p, len, at, at_len, diag);
    if (rc == RUMOR_OK)
        rc = s_buckets_save(peer, &old);
    size_t done = 0;
    for (; done < peer->nbuckets && rc == RUMOR_OK; done++)
        rc = rumor_gossip_state_load(peer->buckets[done].g,
                                     at[done],
                                     at_len[done],
                                     diag);
    if (rc != RUMOR_OK && done > 1) {
        const uint8_t **back = at;
        if (s_buckets_find(peer, old.data, old.len, back, at_len, NULL) ==
            RUMOR_OK)
            for (size_t k = 0; k + 1 < done; k++)
                (void)rumor_gossip_state_load(peer->buckets[k].g,
                                              back[k],
                                              at_len[k],
                                              NULL);
    }
    rumor_buf_free(&old);
    free(at);
    free(at_len);
    return rc;
}

/* --- an elastic ring's algorithms -------------------------------------- */

static rumor_err
s_ring_save(void *arg, rumor_buf *out)
{
    rumor_peer *peer = arg;
    return peer->buckets != NULL
               ? s_buckets_save(peer, out)
               : rumor_gossip_state_save(node_gossip(peer->node), out);
}

static rumor_err
s_ring_load(void *arg, const uint8_t *p, size_t len)
{
    rumor_peer *peer = arg;
    return peer->buckets != NULL
               ? s_buckets_load(peer, p, len, NULL)
               : rumor_gossip_state_load(node_gossip(peer->node), p, len, NULL);
}

/* The snapshot of each instance the state holds (the buckets', or the
 * node's), where its state is; RUMOR_ENOTSUP when one has none (then the
 * elastic ring saves them all). */
static rumor_err
s_ring_snapshot(void *arg)
{
    rumor_peer *peer = arg;
    if (peer->buckets == NULL)
        return rumor_gossip_snapshot(node_gossip(peer->node));
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < peer->nbuckets && rc == RUMOR_OK; k++)
        rc = rumor_gossip_snapshot(peer->buckets[k].g);
    return rc;
}

static rumor_err
s_ring_snapshot_restore(void *arg)
{
    rumor_peer *peer = arg;
    if (peer->buckets == NULL)
        return rumor_gossip_snapshot_restore(node_gossip(peer->node));
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < peer->nbuckets && rc == RUMOR_OK; k++)
        rc = rumor_gossip_snapshot_restore(peer->buckets[k].g);
    return rc;
}

static rumor_err
s_ring_snapshot_save(void *arg, rumor_buf *out)
{
    rumor_peer *peer = arg;
    return peer->buckets != NULL
               ? s_buckets_write(peer, rumor_gossip_snapshot_save, out)
               : rumor_gossip_snapshot_save(node_gossip(peer->node), out);
}

static rumor_err
s_ring_adopt(void *arg, const uint8_t *p, size_t len, struct rumor_diag *diag)
{
    rumor_peer *peer = arg;
    if (peer->buckets == NULL)
        return rumor_gossip_state_adopt(node_gossip(peer->node), p, len, diag);
    const uint8_t **at = calloc(peer->nbuckets, sizeof *at);
    size_t *at_len = calloc(peer->nbuckets, sizeof *at_len);
    rumor_err rc = at != NULL && at_len != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_buckets_find(peer, p, len, at, at_len, diag);
    /* a failure half-way is undone by the view change after it, which
     * loads the snapshot again */
    for (size_t k = 0; k < peer->nbuckets && rc == RUMOR_OK; k++)
        rc = rumor_gossip_state_adopt(peer->buckets[k].g,
                                      at[k],
                                      at_len[k],
                                      diag);
    free(at);
    free(at_len);
    return rc;
}

/* Instance k < nbuckets + 2 of the peer: its algorithm's (0), its
 * buckets' (1 to nbuckets), average()'s (NULL before the first one). */
static rumor_gossip *
s_instance(rumor_peer *peer, size_t k)
{
    if (k == 0)
        return node_gossip(peer->node);
    return k <= peer->nbuckets ? peer->buckets[k - 1].g : peer->avg;
}

static rumor_err
s_ring_members_set(void *arg, const uint32_t *ids, size_t count)
{
    rumor_peer *peer = arg;
    memcpy(peer->members, ids, count * sizeof *ids);
    peer->nmembers = count;
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < peer->nbuckets + 2 && rc == RUMOR_OK; k++)
        if (s_instance(peer, k) != NULL)
            rc = rumor_gossip_members_set(s_instance(peer, k), ids, count);
    return rc;
}

static void
s_ring_abandon(void *arg)
{
    rumor_peer *peer = arg;
    for (size_t k = 0; k < peer->nbuckets + 2; k++)
        if (s_instance(peer, k) != NULL)
            rumor_gossip_step_abandon(s_instance(peer, k));
}

static void
s_ring_fast_forward(void *arg, uint64_t step)
{
    rumor_peer *peer = arg;
    for (size_t k = 0; k < peer->nbuckets + 2; k++)
        if (s_instance(peer, k) != NULL)
            rumor_gossip_fast_forward(s_instance(peer, k), step);
}

/* For a joiner only: a member behind by a step takes the step's result,
 * and its own caller state is that of the step's start, as the holder's. */
static rumor_err
s_ring_extra_save(void *arg, bool joiner, rumor_buf *out)
{
    rumor_peer *peer = arg;
    if (!joiner || peer->state_source == NULL)
        return RUMOR_OK;
    rumor_err rc = peer->state_source(peer->state_arg, out);
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "elastic: the caller's state for a joiner not saved (%s): "
                  "it gets none",
                  rumor_strerror(rc));
        rumor_buf_reset(out);
    }
    return RUMOR_OK;
}

static rumor_err
s_ring_extra_load(void *arg, const uint8_t *p, size_t len)
{
    rumor_peer *peer = arg;
    rumor_buf_reset(&peer->joined_state);
    return rumor_buf_append(&peer->joined_state, p, len);
}

/* direct: the held model to and from the host copy a STATE is packed from
 * or decoded into, at a view change only. */
static rumor_err
s_ring_model_out(void *arg)
{
    rumor_peer *peer = arg;
    return s_host_move(peer, peer->held, true);
}

static rumor_err
s_ring_model_in(void *arg)
{
    rumor_peer *peer = arg;
    return s_host_move(peer, peer->held, false);
}

static const struct node_elastic_algo s_ring = {
    .save = s_ring_save,
    .load = s_ring_load,
    .adopt = s_ring_adopt,
    .members_set = s_ring_members_set,
    .abandon = s_ring_abandon,
    .fast_forward = s_ring_fast_forward,
    .extra_save = s_ring_extra_save,
    .extra_load = s_ring_extra_load,
    .model_out = s_ring_model_out,
    .model_in = s_ring_model_in,
    .snapshot = s_ring_snapshot,
    .snapshot_restore = s_ring_snapshot_restore,
    .snapshot_save = s_ring_snapshot_save,
};

/* The tensors after each step (what a member that missed one takes) and
 * the inputs of the step in flight (what a dropped step runs again from)
 * for the node's elastic ring, where the tensors are: with direct on the
 * device, the ring given the host copy, which the held model fills for a
 * STATE sent and takes from one received. */
static rumor_err
s_elastic_new(rumor_peer *peer, const struct rumor_node_opts *opts)
{
    peer->gradients = rumor_node_opts_gradient_exchange(opts);
    rumor_buf_init(&peer->joined_state, RUMOR_GOSSIP_STATE_MAX);
    rumor_err rc = s_model_new(peer, &peer->model, &peer->held);
    if (rc == RUMOR_OK)
        rc = s_model_new(peer, &peer->model, &peer->kept);
    if (rc == RUMOR_OK && peer->direct)
        rc = s_host_new(peer);
    peer->is_kept = calloc(peer->count, sizeof *peer->is_kept);
    peer->members = calloc(rumor_peer_nodes(peer), sizeof *peer->members);
    if (rc == RUMOR_OK && (peer->is_kept == NULL || peer->members == NULL))
        rc = RUMOR_ENOMEM;
    peer->ring = s_ring;
    peer->ring.arg = peer;
    if (!peer->direct) {
        peer->ring.model_out = NULL;
        peer->ring.model_in = NULL;
    }
    if (rc == RUMOR_OK)
        rc = node_elastic_attach(peer->node,
                                 peer->direct ? &peer->host : peer->held,
                                 &peer->ring);
    peer->elastic = node_elastic_of(peer->node);
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
rumor_peer_new(const struct rumor_node_opts *opts,
               const struct rumor_peer_tensor *tensors,
               size_t count,
               rumor_peer **out,
               struct rumor_diag *diag)
{
    return node_peer_new_in(opts, tensors, count, NULL, out, diag);
}

static rumor_err s_peer_make(const struct rumor_node_opts *opts,
                             const struct rumor_peer_tensor *tensors,
                             size_t count,
                             const struct gossip_backend_i *be,
                             bool stage,
                             rumor_peer **out,
                             struct rumor_diag *diag);

rumor_err
node_peer_new_in(const struct rumor_node_opts *opts,
                 const struct rumor_peer_tensor *tensors,
                 size_t count,
                 const struct gossip_backend_i *be,
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
    const char *why = s_stale_refused(opts);
    if (why != NULL) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "stale %u with %s",
                       opts->gossip.stale,
                       why);
        return RUMOR_EINVAL;
    }
    rumor_err rc = s_peer_make(opts, tensors, count, be, false, out, diag);
    if (rc != RUMOR_ENOTSUP || diag->msg[0] == '\0' ||
        (be == NULL && !s_direct(opts, tensors, count)))
        return rc;
    /* an option the device refuses (a codec without a device path, a
     * host-side memory): the instance said why; stage instead (the
     * reference device's tensors are host memory: the host's path) */
    rumor_log(RUMOR_LOG_INFO,
              "peer: %s tensors copied to host memory for %s each step: %s "
              "(docs/python.md)",
              be != NULL ? be->name : "CUDA",
              opts->gossip.algo,
              diag->msg);
    diag->msg[0] = '\0';
    return s_peer_make(opts, tensors, count, NULL, true, out, diag);
}

/* node_peer_new_in after the checks; stage: the algorithm on host copies
 * of CUDA tensors even where it could run on them. */
static rumor_err
s_peer_make(const struct rumor_node_opts *opts,
            const struct rumor_peer_tensor *tensors,
            size_t count,
            const struct gossip_backend_i *be,
            bool stage,
            rumor_peer **out,
            struct rumor_diag *diag)
{
    rumor_peer *peer = calloc(1, sizeof *peer);
    if (peer == NULL)
        return RUMOR_ENOMEM;
    peer->slots = calloc(count, sizeof *peer->slots);
    peer->tensors = calloc(count, sizeof *peer->tensors);
    rumor_err rc = peer->slots && peer->tensors ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_cuda_new(peer, tensors, count, diag);
    if (rc == RUMOR_OK)
        rc = s_memory(peer, opts, tensors, count, be, stage, diag);
    bool was = s_own_begin(peer);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        peer->count = k + 1;
        rc = s_add_slot(peer, k, &tensors[k]);
    }
    peer->model = (struct rumor_model){peer->tensors, count};
    peer->id = opts->id;
    peer->connect_ms = opts->connect_ms;
    peer->gossip = opts->gossip;
    peer->seed = opts->workload.seed; /* as the node's algorithm */
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
    struct node_model_src src = {.be = peer->direct ? peer->mem : NULL,
                                 .to_host = peer->direct ? s_to_host : NULL,
                                 .to_device = peer->direct ? s_to_device : NULL,
                                 .arg = peer};
    if (rc == RUMOR_OK)
        rc =
            node_new_model(opts, &peer->model, dtypes, &src, &peer->node, diag);
    free(dtypes);
    /* stale: the node's ring, on the exchange thread's copy */
    if (rc == RUMOR_OK && node_elastic_wanted(peer->node) &&
        opts->gossip.stale == 0)
        rc = s_elastic_new(peer, opts);
    rc = s_own_end(peer, was, rc);
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
    bool was = s_own_begin(peer);
    /* a ring's members may still need this node's last state; a node
     * whose last step failed leaves without a word (they go on without
     * it) */
    if (peer->node != NULL)
        node_stale_end(peer->node); /* before the links close */
    if (peer->node != NULL && peer->started &&
        node_elastic_of(peer->node) != NULL && peer->step > 0 && !peer->failed)
        node_finish(peer->node, peer->step - 1);
    else if (peer->node != NULL && peer->started)
        node_flush(peer->node);
    rumor_gossip_destroy(&peer->avg);
    s_buckets_free(peer);
    rumor_node_destroy(&peer->node);
    s_model_free(peer, &peer->held);
    s_model_free(peer, &peer->kept);
    free(peer->is_kept);
    free(peer->members);
    rumor_buf_free(&peer->joined_state);
    for (size_t k = 0; k < peer->count; k++) {
        struct s_slot *s = &peer->slots[k];
        if (s->stage != s->pinned)
            free(s->stage);
        node_peer_cuda_host_free(peer->cuda, s->pinned);
    }
    s_host_free(peer);
    node_peer_cuda_destroy(&peer->cuda);
    free(peer->slots);
    free(peer->tensors);
    free(peer);
    *self_p = NULL;
    core_cuda_own_stream(was);
}

/* RUMOR_EINVAL with diag when a step of buckets is in flight. */
static rumor_err
s_between_steps(const rumor_peer *peer, struct rumor_diag *diag)
{
    if (peer->bucket_next == 0)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "step %llu: bucket %zu of %zu is next; a step of buckets "
                   "must end before another exchange",
                   (unsigned long long)peer->bucket_step + 1,
                   peer->bucket_next,
                   peer->nbuckets);
    return RUMOR_EINVAL;
}

static rumor_err
s_gossip(rumor_peer *peer, struct rumor_diag *diag)
{
    rumor_err rc = s_between_steps(peer, diag);
    if (rc == RUMOR_OK && peer->gossip.stale > 0)
        return s_stale_step(peer, diag);
    if (rc != RUMOR_OK || peer->buckets == NULL)
        return rc == RUMOR_OK ? s_step(peer, NULL, diag) : rc;
    for (size_t k = 0; k < peer->nbuckets && rc == RUMOR_OK; k++)
        rc = peer->stopped ? RUMOR_OK : s_bucket(peer, k, diag);
    return rc;
}

rumor_err
rumor_peer_gossip(rumor_peer *peer, struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_gossip(peer, diag));
}

static rumor_err
s_buckets_set(rumor_peer *peer,
              const struct rumor_peer_bucket *buckets,
              size_t count,
              struct rumor_diag *diag)
{
    const char *why = s_buckets_refused(peer);
    if (why == NULL && (peer->started || peer->step != 0))
        why = "set them before the first step (a new bucket starts with no "
              "state)";
    if (why != NULL) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "buckets with %s: %s",
                       peer->gossip.algo,
                       why);
        return RUMOR_EINVAL;
    }
    rumor_err rc = s_buckets_check(peer, buckets, count, diag);
    if (rc != RUMOR_OK)
        return rc;
    s_buckets_free(peer);
    peer->buckets = calloc(count, sizeof *peer->buckets);
    if (peer->buckets == NULL)
        return RUMOR_ENOMEM;
    peer->nbuckets = count;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        rc = s_bucket_new(peer, &peer->buckets[k], &buckets[k], diag);
    if (rc != RUMOR_OK)
        s_buckets_free(peer);
    return rc;
}

rumor_err
rumor_peer_buckets_set(rumor_peer *peer,
                       const struct rumor_peer_bucket *buckets,
                       size_t count,
                       struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_buckets_set(peer, buckets, count, diag));
}

size_t
rumor_peer_buckets(const rumor_peer *peer)
{
    return peer->nbuckets;
}

static rumor_err
s_gossip_bucket(rumor_peer *peer, size_t bucket, struct rumor_diag *diag)
{
    if (peer->buckets == NULL || bucket != peer->bucket_next) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "bucket %zu: %s",
                       bucket,
                       peer->buckets == NULL
                           ? "the peer has no buckets (rumor_peer_buckets_set)"
                           : "buckets go in order, each once per step");
        return RUMOR_EINVAL;
    }
    return peer->stopped ? RUMOR_OK : s_bucket(peer, bucket, diag);
}

rumor_err
rumor_peer_gossip_bucket(rumor_peer *peer,
                         size_t bucket,
                         struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_gossip_bucket(peer, bucket, diag));
}

static rumor_err
s_step_ahead(rumor_peer *peer, struct rumor_diag *diag)
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

rumor_err
rumor_peer_step_ahead(rumor_peer *peer, struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_step_ahead(peer, diag));
}

bool
rumor_peer_looks_ahead(const rumor_peer *peer)
{
    const struct rumor_gossip_opts *g = &peer->gossip;
    return strcmp(g->algo, "localsgd") == 0 && g->delta_codec[0] != '\0' &&
           g->ef_alpha > 0;
}

static rumor_err
s_average(rumor_peer *peer, struct rumor_diag *diag)
{
    if (peer->gossip.stale > 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "average() with stale %u: it exchanges the caller's "
                       "tensors at once, on links the stale exchanges' "
                       "thread uses; use one or the other (localsgd with "
                       "stale is the overlapped form of periodic averaging)",
                       peer->gossip.stale);
        return RUMOR_EINVAL;
    }
    if (peer->avg == NULL) {
        struct rumor_gossip_opts go;
        rumor_gossip_opts_default(&go);
        snprintf(go.algo, sizeof go.algo, "allreduce");
        rumor_err rc = gossip_new_in(&go,
                                     node_topology(peer->node),
                                     peer->id,
                                     &peer->model,
                                     peer->mem,
                                     &peer->avg,
                                     diag);
        /* an elastic ring re-formed before: its members */
        if (rc == RUMOR_OK && peer->nmembers > 0)
            rc = rumor_gossip_members_set(peer->avg,
                                          peer->members,
                                          peer->nmembers);
        if (rc != RUMOR_OK) {
            rumor_gossip_destroy(&peer->avg);
            return rc;
        }
    }
    rumor_err rc = s_between_steps(peer, diag);
    return rc == RUMOR_OK ? s_step(peer, peer->avg, diag) : rc;
}

rumor_err
rumor_peer_average(rumor_peer *peer, struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_average(peer, diag));
}

rumor_err
rumor_peer_report(rumor_peer *peer,
                  double loss,
                  double test_loss,
                  double accuracy)
{
    struct node_report r = {loss, test_loss, accuracy};
    s_pcie_report(peer);
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
        .gossip_bytes_sent = c.gossip_bytes_sent,
        .gossip_bytes_recv = c.gossip_bytes_recv,
        .gossip_frames_sent = c.gossip_frames_sent,
        .seconds = c.seconds,
        .seconds_gossip = c.seconds_gossip,
        .seconds_wait = c.seconds_wait,
        .seconds_copy = peer->t_copy,
    };
    s_pcie(peer, &out->pcie_h2d_bytes, &out->pcie_d2h_bytes);
}

rumor_err
rumor_peer_set_stream(rumor_peer *peer,
                      void *cuda_stream,
                      struct rumor_diag *diag)
{
    rumor_err rc = s_between_steps(peer, diag);
    if (rc != RUMOR_OK || (cuda_stream == NULL && peer->cuda == NULL))
        return rc;
    const char *why = NULL;
    if (!rumor_cuda_built()) {
        rc = RUMOR_ENOTSUP;
        why = "this librumor was built without CUDA (rebuild with nvcc: "
              "make USE_CUDA=yes); only NULL, the default, is accepted";
    } else if (peer->cuda == NULL) {
        rc = RUMOR_EINVAL;
        why = "none of the peer's tensors is in CUDA memory: there are no "
              "copies to order (pass NULL, or none)";
    } else {
        rc = node_peer_cuda_set_stream(peer->cuda, cuda_stream);
        why = "not a CUDA stream of the tensors' device, or CUDA failed "
              "(see the log)";
    }
    if (rc != RUMOR_OK)
        rumor_diag_set(diag, "", 0, 0, "set stream %p: %s", cuda_stream, why);
    return rc;
}

uint32_t
rumor_peer_nodes(const rumor_peer *peer)
{
    return (uint32_t)rumor_topology_nodes(node_topology(peer->node));
}

static rumor_err
s_state_save(const rumor_peer *peer, rumor_buf *out)
{
    /* the algorithm's state is the exchange thread's while one runs */
    struct rumor_diag why = {0};
    if (s_stale_idle(peer, "state save", &why) != RUMOR_OK) {
        rumor_log(RUMOR_LOG_ERROR, "%s", why.msg);
        return RUMOR_EINVAL;
    }
    uint8_t head[PEER_STATE_HEAD];
    memcpy(head, peer->buckets ? PEER_BUCKETS_MAGIC : PEER_STATE_MAGIC, 8);
    s_put_u64(head + 8, peer->step);
    rumor_err rc = rumor_buf_append(out, head, sizeof head);
    if (rc == RUMOR_OK && peer->buckets != NULL)
        rc = s_buckets_save(peer, out);
    else if (rc == RUMOR_OK)
        rc = rumor_gossip_state_save(node_gossip(peer->node), out);
    return rc;
}

rumor_err
rumor_peer_state_save(const rumor_peer *peer, rumor_buf *out)
{
    bool was = s_own_begin(peer);
    rumor_err rc = s_state_save(peer, out);
    core_cuda_own_stream(was);
    return rc;
}

static rumor_err
s_state_load(rumor_peer *peer,
             const uint8_t *data,
             size_t len,
             struct rumor_diag *diag)
{
    if (s_stale_idle(peer, "state load", diag) != RUMOR_OK)
        return RUMOR_EINVAL;
    bool plain =
        len >= PEER_STATE_HEAD && memcmp(data, PEER_STATE_MAGIC, 8) == 0;
    bool bucketed =
        len >= PEER_STATE_HEAD && memcmp(data, PEER_BUCKETS_MAGIC, 8) == 0;
    if (!plain && !bucketed) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "not a Rumor peer state (%zu bytes, no magic)",
                       len);
        return RUMOR_EPROTO;
    }
    if (bucketed != (peer->buckets != NULL)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "a peer state saved %s buckets, loaded into a peer "
                       "%s: both need the same buckets (rumor.torch: the "
                       "same overlap and bucket_cap_mb)",
                       bucketed ? "with" : "without",
                       bucketed ? "without" : "with");
        return RUMOR_EPROTO;
    }
    uint64_t step = s_get_u64(data + 8);
    rumor_err rc = bucketed ? s_buckets_load(peer,
                                             data + PEER_STATE_HEAD,
                                             len - PEER_STATE_HEAD,
                                             diag)
                            : rumor_gossip_state_load(node_gossip(peer->node),
                                                      data + PEER_STATE_HEAD,
                                                      len - PEER_STATE_HEAD,
                                                      diag);
    if (rc == RUMOR_OK) {
        peer->step = step;
        node_restarted(peer->node, step);
    }
    return rc;
}

rumor_err
rumor_peer_state_load(rumor_peer *peer,
                      const uint8_t *data,
                      size_t len,
                      struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_state_load(peer, data, len, diag));
}

void
rumor_peer_state_source(rumor_peer *peer, rumor_peer_state_fn save, void *arg)
{
    peer->state_source = save;
    peer->state_arg = arg;
}

bool
rumor_peer_joined(rumor_peer *peer, const uint8_t **data, size_t *len)
{
    bool joined = peer->joined;
    peer->joined = false;
    *data = joined ? peer->joined_state.data : NULL;
    *len = joined ? peer->joined_state.len : 0;
    return joined;
}

static rumor_err
s_join(rumor_peer *peer, struct rumor_diag *diag)
{
    rumor_err rc = s_between_steps(peer, diag);
    if (rc != RUMOR_OK || peer->started)
        return rc;
    uint64_t step = peer->step;
    rc = s_stage_all(peer, true);
    if (rc == RUMOR_OK)
        rc = s_start(peer, &step, diag);
    if (rc == RUMOR_OK)
        rc = s_after_view(peer, &step);
    /* no step in flight: a joiner's model goes to the caller now */
    if (rc == RUMOR_OK && peer->joined && !peer->gradients)
        rc = s_copy(peer, &peer->model, peer->held, 0, peer->count);
    for (size_t k = 0; peer->is_kept != NULL && k < peer->count; k++)
        peer->is_kept[k] = false;
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    if (rc == RUMOR_OK)
        peer->step = step;
    return rc;
}

rumor_err
rumor_peer_join(rumor_peer *peer, struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_join(peer, diag));
}

static rumor_err
s_flush(rumor_peer *peer, struct rumor_diag *diag)
{
    if (!node_stale_busy(peer->node))
        return RUMOR_OK;
    bool stop = false;
    rumor_err rc = s_stage_all(peer, true);
    if (rc == RUMOR_OK)
        rc = node_stale_land_all(peer->node, &peer->model, &stop);
    if (rc == RUMOR_OK)
        rc = s_stage_all(peer, false);
    peer->stopped = peer->stopped || stop;
    peer->failed = peer->failed || rc != RUMOR_OK;
    if (rc != RUMOR_OK)
        s_step_error(peer, peer->step, rc, diag);
    return rc;
}

rumor_err
rumor_peer_flush(rumor_peer *peer, struct rumor_diag *diag)
{
    bool was = s_own_begin(peer);
    return s_own_end(peer, was, s_flush(peer, diag));
}

bool
rumor_peer_in_flight(const rumor_peer *peer)
{
    return node_stale_busy(peer->node);
}

uint32_t
rumor_peer_stale(const rumor_peer *peer)
{
    return peer->gossip.stale;
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
