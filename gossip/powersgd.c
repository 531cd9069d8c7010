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
 * round leaves it unchanged (the one-sided variant's later iterations
 * write into it mid-step: an abandoned step puts it back). A dropped step
 * (rumor_gossip_step_abandon, then a load of the state saved before it)
 * gets a new compressor from the state: its begin had already changed
 * the memories and factors. Needs at least 2 nodes.
 *
 * The options are PyTorch PowerSGDState's (docs/gossip.md, "PowerSGD
 * options"): for the first start_iter steps one phase all-reduces the
 * whole tensors (the hook's vanilla all-reduce); min_compression_rate,
 * use_error_feedback, warm_start, the orthogonalization epsilon and
 * batching go to the compressor as they are. one_sided selects
 * epfml/powersgd's variant: opts.iterations phases per step, each one
 * averaged product (the first rides with the uncompressed tensors, as P
 * does).
 *
 * Adaptive rank (opts.adapt "rule", issue #12, docs/adaptive.md): the
 * rank follows the relative approximation error
 * sqrt(sum_i ||M_i - P Q_i^T||^2 / sum_i ||M_i||^2). With P orthonormal
 * and Q_i = M_i^T P (node i's Q before averaging) the error term is
 * ||M_i||^2 - ||Q_i||^2, so each node needs only ||Q_i||^2 (free at
 * phase A's end) and ||M_i||^2 = ||e_i + P Q^T||^2 after the step. Those
 * two floats ride with the next step's P (two more floats in phase A, no
 * extra round), so every node reads the same sums and applies the same
 * deterministic rule: double the rank above adapt-error, lower it by one
 * below half of it, then hold for GOSSIP_PSGD_HOLD steps (the next sums
 * still describe the old rank). A new rank means a new compressor: the
 * error memories move over unchanged (a tensor that stops being
 * compressed at the new rank gets its memory added to its next value),
 * warm-start Q keeps its first columns and new ones are drawn from the
 * shared seed, so every node's factors stay identical. "fixed" keeps the
 * rank, sends nothing more (the run is bit for bit the run without
 * adapt) and reports this node's own error.
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GOSSIP_PSGD_HOLD  2   /* decisions skipped after a rank change */
#define GOSSIP_PSGD_LOWER 0.5 /* lower the rank below this x adapt-error */
#define GOSSIP_PSGD_STATS 2   /* floats appended to P: error, norm */

struct powersgd {
    rumor_lowrank_psgd *psgd;
    struct gossip_ring ring;
    float **data;      /* tensor data pointers, for the compressor */
    float *held;       /* uncompressed tensors' average, until the end */
    size_t unc_floats; /* floats in the uncompressed tensors */
    struct rumor_lowrank_xchg x; /* the exchange in flight */
    bool active;                 /* this step is compressed */
    bool open;   /* the compressor's step begun, not ended (abandon) */
    float *orig; /* one-sided with iterations > 1: the model at the step's
                    start (its iterations write the approximation into the
                    tensors mid-step); numel, made on use */
    /* adaptive rank (opts.adapt) */
    struct rumor_lowrank_shape *shapes;   /* the model's, for a new rank */
    struct rumor_lowrank_psgd_opts popts; /* rank: the current one */
    bool measure; /* opts.adapt set: the error is measured */
    bool rule;    /* "rule": the rank follows the error */
    size_t rank_min, rank_max;
    double q2;                     /* this step: sum ||Q_i||^2 of the local Q */
    float pend[GOSSIP_PSGD_STATS]; /* last step's error and norm sums */
    double rel_error;              /* last error seen (< 0: none yet) */
    uint64_t hold;                 /* decisions left to skip */
    uint64_t changes;              /* rank changes so far */
    size_t want;                   /* rank for the next step (0: keep) */
    float *carry;        /* numel: memories of tensors no longer compressed */
    float *scratch;      /* one tensor */
    uint64_t retired[2]; /* PCIe bytes of compressors replaced (h2d, d2h) */
    /* adaptive rank under an elastic ring: the host values of the
     * snapshot's boundary, and the compressor a rank change replaced
     * since (its own snapshot is the boundary's) */
    struct {
        bool held;
        struct rumor_lowrank_psgd_opts popts;
        double q2, rel_error;
        float pend[GOSSIP_PSGD_STATS];
        uint64_t hold, changes;
        size_t want;
        float *carry;             /* numel, or NULL: none */
        rumor_lowrank_psgd *psgd; /* NULL: no rank change since */
    } snap;
};

static bool
s_compressed(const rumor_gossip *g, size_t t)
{
    const struct powersgd *s = g->state;
    return rumor_lowrank_psgd_compressed(s->psgd, t);
}

/* Sizes the uncompressed part for the current compressor. */
static rumor_err
s_unc_setup(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    s->unc_floats = 0;
    for (size_t t = 0; t < g->tensor_count; t++)
        if (!s_compressed(g, t))
            s->unc_floats += rumor_tensor_numel(&g->tensors[t]);
    free(s->held);
    s->held = malloc((s->unc_floats + 1) * sizeof(float));
    return s->held == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

/* The adaptive rank's options: adapt "fixed" or "rule" (adapt.c refuses
 * the others), bounds around the configured rank. */
static rumor_err
s_adapt_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct powersgd *s = g->state;
    s->rel_error = -1;
    s->measure = g->opts.adapt[0] != '\0';
    s->rule = strcmp(g->opts.adapt, "rule") == 0;
    s->rank_min = g->opts.adapt_rank_min > 0 ? g->opts.adapt_rank_min : 1;
    s->rank_max =
        g->opts.adapt_rank_max > 0 ? g->opts.adapt_rank_max : 4 * g->opts.rank;
    if (s->rank_max > RUMOR_LOWRANK_MAX_RANK)
        s->rank_max = RUMOR_LOWRANK_MAX_RANK;
    bool inside = s->rank_min <= g->opts.rank && g->opts.rank <= s->rank_max;
    if (s->rule && !inside) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "powersgd: --rank %zu outside --adapt-rank-min %zu "
                       ".. --adapt-rank-max %zu",
                       g->opts.rank,
                       s->rank_min,
                       s->rank_max);
        return RUMOR_EINVAL;
    }
    size_t most = 1;
    for (size_t t = 0; t < g->tensor_count; t++)
        if (rumor_tensor_numel(&g->tensors[t]) > most)
            most = rumor_tensor_numel(&g->tensors[t]);
    /* a rank change's and an adopt's move of the own memories */
    s->scratch = malloc(most * sizeof(float));
    return s->scratch == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

/* The PowerSGD options (docs/gossip.md, "PowerSGD options"), refused
 * with a reason where lowrank/ would only say RUMOR_EINVAL. */
static rumor_err
s_opts_check(rumor_gossip *g, struct rumor_diag *diag)
{
    const struct rumor_gossip_opts *o = &g->opts;
    const char *why = NULL;
    if (!(o->min_compression_rate >= 0 && o->min_compression_rate <= 1e9))
        why = "min_compression_rate must be in [0, 1e9]";
    else if (!(o->orth_eps >= 0 && o->orth_eps <= 1))
        why = "the orthogonalization epsilon must be in [0, 1]";
    else if (o->one_sided && !o->use_error_feedback)
        why = "the one-sided variant needs error feedback (its deflation "
              "leaves the error in the memory)";
    else if (o->one_sided && o->adapt[0] != '\0')
        why = "adapt measures the hook variant's error; not one-sided";
    else if (!o->one_sided && o->iterations != 1)
        why = "iterations apply to the one-sided variant (the hook's step "
              "is one P and one Q)";
    else if (o->iterations == 0 || o->iterations > 1000)
        why = "iterations must be in [1, 1000]";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag, "", 0, 0, "powersgd: %s", why);
    return RUMOR_EINVAL;
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
    s->shapes = calloc(g->tensor_count + 1, sizeof *s->shapes);
    s->data = calloc(g->tensor_count + 1, sizeof *s->data);
    if (s->shapes == NULL || s->data == NULL)
        return RUMOR_ENOMEM;
    for (size_t t = 0; t < g->tensor_count; t++) {
        s->shapes[t].ndim = g->tensors[t].ndim;
        memcpy(s->shapes[t].dims,
               g->tensors[t].shape,
               g->tensors[t].ndim * sizeof(size_t));
        s->data[t] = g->tensors[t].data;
    }
    rumor_err rc = s_opts_check(g, diag);
    if (rc == RUMOR_OK)
        rc = s_adapt_init(g, diag);
    if (rc != RUMOR_OK)
        return rc;
    rumor_lowrank_psgd_opts_default(&s->popts);
    s->popts.rank = g->opts.rank;
    s->popts.seed = g->opts.seed;
    s->popts.start_iter = g->opts.start_iter;
    s->popts.min_rate = g->opts.min_compression_rate;
    s->popts.error_feedback = g->opts.use_error_feedback;
    s->popts.warm_start = g->opts.warm_start;
    s->popts.eps = (float)g->opts.orth_eps;
    s->popts.batch = g->opts.batch_same_shape;
    s->popts.one_sided = g->opts.one_sided;
    s->popts.iters = g->opts.one_sided ? g->opts.iterations : 1;
    s->popts.tensor_base = g->opts.tensor_base;
    s->popts.want_cuda = g->be->cuda;
    rc =
        rumor_lowrank_psgd_new(&s->psgd, s->shapes, g->tensor_count, &s->popts);
    if (rc == RUMOR_OK && g->be->cuda &&
        rumor_lowrank_psgd_device(s->psgd) != RUMOR_DEVICE_CUDA)
        rc = RUMOR_ENOTSUP; /* the cuda backend failed: it logged why */
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag, "", 0, 0, "powersgd: %s", rumor_strerror(rc));
        return rc;
    }
    rc = s_unc_setup(g);
    if (rc != RUMOR_OK)
        return rc;
    return gossip_ring_init(&s->ring, g->numel);
}

static void
s_free(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    if (s == NULL)
        return;
    rumor_lowrank_psgd_destroy(&s->psgd);
    rumor_lowrank_psgd_destroy(&s->snap.psgd);
    free(s->snap.carry);
    gossip_ring_free(&s->ring);
    free(s->data);
    free(s->held);
    free(s->shapes);
    free(s->carry);
    free(s->scratch);
    g->be->release(s->orig);
    free(s);
    g->state = NULL;
}

/* Exchanges of a compressed step: the hook's P and Q, or the one-sided
 * variant's one product per iteration. */
static uint32_t
s_exchanges(const struct powersgd *s)
{
    return s->popts.one_sided ? (uint32_t)s->popts.iters : 2;
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    (void)step;
    const struct powersgd *s = g->state;
    uint32_t one = gossip_ring_rounds(g);
    return rumor_lowrank_psgd_active(s->psgd) ? s_exchanges(s) * one : one;
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
    return gossip_ring_init(&s->ring, len);
}

/* Copies the uncompressed tensors to or from a packed host buffer: the
 * part of the payload that crosses from and to model memory. */
static rumor_err
s_unc_copy(rumor_gossip *g, float *packed, bool to_model)
{
    rumor_err rc = RUMOR_OK;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        if (s_compressed(g, t))
            continue;
        size_t bytes = rumor_tensor_numel(&g->tensors[t]) * sizeof(float);
        float *data = g->tensors[t].data;
        rc = to_model
                 ? gossip_mem_copy(g, data, packed, bytes, GOSSIP_TO_DEVICE)
                 : gossip_mem_copy(g, packed, data, bytes, GOSSIP_TO_HOST);
        packed += bytes / sizeof(float);
    }
    return rc;
}

/* Adds the error memories a rank change left without a compressor (only
 * tensors that are now uncompressed have one) to their values in packed
 * (the uncompressed part of phase A): they are sent exactly, so nothing
 * is lost. The carry is dropped when the step ends, so a failed step
 * leaves it (and the model) as it was. */
static void
s_carry_add(rumor_gossip *g, float *packed)
{
    struct powersgd *s = g->state;
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count && s->carry != NULL; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        if (!s_compressed(g, t)) {
            for (size_t e = 0; e < n; e++)
                packed[e] += s->carry[base + e];
            packed += n;
        }
        base += n;
    }
}

/* The one-sided variant's later iterations write into the tensors before
 * the step ends: a copy of the model lets an abandoned step restore it. */
static rumor_err
s_keep_model(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    if (!s->popts.one_sided || s->popts.iters < 2)
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    if (s->orig == NULL)
        rc = g->be->alloc(g->numel * sizeof *s->orig, (void **)&s->orig);
    return rc == RUMOR_OK
               ? gossip_model_read(g, 0, g->numel, s->orig, GOSSIP_ON_DEVICE)
               : rc;
}

static rumor_err
s_start_step(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    s->active = rumor_lowrank_psgd_active(s->psgd);
    if (!s->active) {
        rumor_err rc =
            gossip_model_read(g, 0, g->numel, s->ring.work, GOSSIP_TO_HOST);
        return rc == RUMOR_OK ? gossip_ring_start(&s->ring, g, g->numel, true)
                              : rc;
    }
    rumor_err rc = s_keep_model(g);
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_psgd_begin(s->psgd, s->data, &s->x);
    s->open = rc == RUMOR_OK;
    size_t stats = s->rule ? GOSSIP_PSGD_STATS : 0;
    if (rc == RUMOR_OK)
        rc = s_ring_fit(g, s->x.floats + s->unc_floats + stats);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(s->ring.work, s->x.data, s->x.floats * sizeof(float));
    rc = s_unc_copy(g, s->ring.work + s->x.floats, false);
    if (rc != RUMOR_OK)
        return rc;
    s_carry_add(g, s->ring.work + s->x.floats);
    memcpy(s->ring.work + s->x.floats + s->unc_floats,
           s->pend,
           stats * sizeof(float));
    return gossip_ring_start(&s->ring,
                             g,
                             s->x.floats + s->unc_floats + stats,
                             false);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)step;
    struct powersgd *s = g->state;
    rumor_err rc = round == 0 ? s_start_step(g) : RUMOR_OK;
    return rc == RUMOR_OK
               ? gossip_ring_emit(g, &s->ring, round % gossip_ring_rounds(g))
               : rc;
}

/* The rule, on the sums of every node's last error and norm (the same
 * bits on every node, so the same choice): sets s->want. */
static void
s_decide(rumor_gossip *g, const float *sums)
{
    struct powersgd *s = g->state;
    if (!(sums[1] > 0))
        return; /* no step measured yet */
    s->rel_error = sqrt(fmax(sums[0], 0) / sums[1]);
    if (s->hold > 0) {
        s->hold--;
        return;
    }
    size_t r = s->popts.rank, want = r;
    double budget = g->opts.adapt_error;
    if (s->rel_error > budget && r < s->rank_max)
        want = 2 * r < s->rank_max ? 2 * r : s->rank_max;
    else if (s->rel_error < GOSSIP_PSGD_LOWER * budget && r > s->rank_min)
        want = r - 1;
    if (want != r) {
        s->want = want;
        s->hold = GOSSIP_PSGD_HOLD;
    }
}

/* This node's error and norm sums of the step just ended (see the top),
 * over the compressed tensors: ||M_i||^2 = ||e_i + P Q^T||^2, the error
 * ||M_i||^2 - ||Q_i||^2. The sum runs where the model is (the backend's
 * reduction over the compressor's memory): only the two floats cross. */
static rumor_err
s_measure(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    double m2 = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        if (!s_compressed(g, t))
            continue;
        const float *e = NULL;
        rumor_err rc = rumor_lowrank_psgd_error_mem(s->psgd, t, &e);
        if (rc == RUMOR_OK)
            rc = g->be->sumsq_add(e,
                                  g->tensors[t].data,
                                  rumor_tensor_numel(&g->tensors[t]),
                                  &m2);
        if (rc != RUMOR_OK)
            return rc;
    }
    double err = fmax(m2 - s->q2, 0);
    s->pend[0] = (float)err;
    s->pend[1] = (float)m2;
    if (!s->rule && m2 > 0)
        s->rel_error = sqrt(err / m2);
    return RUMOR_OK;
}

/* Tensor t's warm-start Q at next's rank: the old columns it had, then
 * columns drawn from the shared seed (the same on every node). */
static rumor_err
s_move_q_one(const struct powersgd *s,
             const rumor_lowrank_psgd *next,
             size_t t,
             const float *old,
             float *q,
             uint64_t seed)
{
    size_t off = 0, r = 0, old_off = 0, old_r = 0, rows = 0, cols = 0;
    if (rumor_lowrank_psgd_q_slot(next, t, &off, &r) != RUMOR_OK)
        return RUMOR_OK; /* not compressed at the new rank */
    if (rumor_lowrank_psgd_q_slot(s->psgd, t, &old_off, &old_r) != RUMOR_OK)
        old_r = 0;
    rumor_err rc = rumor_lowrank_matricize(&s->shapes[t], &rows, &cols);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, s->popts.tensor_base + t);
    for (size_t j = 0; rc == RUMOR_OK && j < cols; j++)
        for (size_t c = 0; c < r; c++)
            q[off + j * r + c] = c < old_r ? old[old_off + j * old_r + c]
                                           : (float)rumor_rng_normal(&rng);
    return rc;
}

static rumor_err
s_move_q(rumor_gossip *g, rumor_lowrank_psgd *next)
{
    struct powersgd *s = g->state;
    float *old =
        malloc((rumor_lowrank_psgd_q_floats(s->psgd) + 1) * sizeof *old);
    float *q = malloc((rumor_lowrank_psgd_q_floats(next) + 1) * sizeof *q);
    rumor_err rc = old == NULL || q == NULL ? RUMOR_ENOMEM : RUMOR_OK;
    /* no Q yet: next draws its own from the seed at its first step */
    bool have =
        rc == RUMOR_OK && rumor_lowrank_psgd_q_get(s->psgd, old) == RUMOR_OK;
    uint64_t seed = rumor_seed_derive(g->opts.seed,
                                      rumor_lowrank_psgd_step(s->psgd),
                                      0x52414e4b);
    for (size_t t = 0; have && rc == RUMOR_OK && t < g->tensor_count; t++)
        rc = s_move_q_one(s, next, t, old, q, seed);
    if (have && rc == RUMOR_OK)
        rc = rumor_lowrank_psgd_q_set(next, q);
    free(old);
    free(q);
    return rc;
}

/* Every error memory moves to next unchanged, or into s->carry when next
 * does not compress its tensor. */
static rumor_err
s_move_errors(rumor_gossip *g, rumor_lowrank_psgd *next)
{
    struct powersgd *s = g->state;
    rumor_err rc = RUMOR_OK;
    size_t base = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        bool had = s_compressed(g, t);
        if (had)
            rc = rumor_lowrank_psgd_error_get(s->psgd, t, s->scratch);
        if (rc == RUMOR_OK && had && rumor_lowrank_psgd_compressed(next, t))
            rc = rumor_lowrank_psgd_error_set(next, t, s->scratch);
        else if (rc == RUMOR_OK && had) {
            if (s->carry == NULL)
                s->carry = calloc(g->numel, sizeof *s->carry);
            if (s->carry == NULL)
                rc = RUMOR_ENOMEM;
            else
                memcpy(s->carry + base, s->scratch, n * sizeof(float));
        }
        base += n;
    }
    if (rc != RUMOR_OK) {
        free(s->carry);
        s->carry = NULL;
    }
    return rc;
}

/* What s_rerank moves to the new compressor. */
#define KEEP_Q      1u /* the warm-start Q */
#define KEEP_ERRORS 2u /* the error memories */
#define KEEP_SNAP   4u /* the old compressor, when a snapshot holds it */

/* Replaces the compressor by one of the given rank, idle, at the same
 * step. A rank change keeps Q and the error memories; a state load keeps
 * nothing (it fills the new one), an adopt this node's memories. */
static rumor_err
s_rerank(rumor_gossip *g, size_t rank, unsigned keep)
{
    struct powersgd *s = g->state;
    struct rumor_lowrank_psgd_opts o = s->popts;
    o.rank = rank;
    rumor_lowrank_psgd *next = NULL;
    rumor_err rc =
        rumor_lowrank_psgd_new(&next, s->shapes, g->tensor_count, &o);
    if (rc == RUMOR_OK)
        rc =
            rumor_lowrank_psgd_step_set(next, rumor_lowrank_psgd_step(s->psgd));
    if (rc == RUMOR_OK && (keep & KEEP_Q))
        rc = s_move_q(g, next);
    if (rc == RUMOR_OK && (keep & KEEP_ERRORS))
        rc = s_move_errors(g, next);
    if (rc != RUMOR_OK) {
        rumor_lowrank_psgd_destroy(&next);
        return rc;
    }
    uint64_t h2d = 0, d2h = 0;
    rumor_lowrank_psgd_pcie_bytes(s->psgd, &h2d, &d2h);
    s->retired[0] += h2d;
    s->retired[1] += d2h;
    /* a rank change after the boundary keeps the boundary's compressor
     * for a restore; a load or an adopt leaves no snapshot */
    if (!(keep & KEEP_SNAP)) {
        rumor_lowrank_psgd_destroy(&s->snap.psgd);
        s->snap.held = false;
    }
    if ((keep & KEEP_SNAP) && s->snap.held && s->snap.psgd == NULL)
        s->snap.psgd = s->psgd;
    else
        rumor_lowrank_psgd_destroy(&s->psgd);
    s->psgd = next;
    s->popts = o;
    return s_unc_setup(g);
}

/* Every exchange of the step is reduced: the approximation goes into the
 * tensors, the uncompressed average beside it. */
static rumor_err
s_step_end(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    rumor_err rc = rumor_lowrank_psgd_end(s->psgd, s->data);
    if (rc == RUMOR_OK) {
        s->open = false;
        rc = s_unc_copy(g, s->held, true);
        free(s->carry); /* sent with this step */
        s->carry = NULL;
    }
    if (rc == RUMOR_OK && s->measure)
        rc = s_measure(g);
    if (rc == RUMOR_OK && s->want != 0) {
        rc = s_rerank(g, s->want, KEEP_Q | KEEP_ERRORS | KEEP_SNAP);
        s->changes += rc == RUMOR_OK;
        s->want = 0;
    }
    return rc;
}

/* Exchange k of the step is reduced (its values in s->x.data): hands it
 * back to the compressor, then starts the ring on the next exchange or
 * ends the step. The compressor must want exactly s_exchanges of them,
 * the rounds the step was given. */
static rumor_err
s_exchange_done(rumor_gossip *g, uint32_t k)
{
    struct powersgd *s = g->state;
    bool done = false, last = k + 1 == s_exchanges(s);
    rumor_err rc = rumor_lowrank_psgd_next(s->psgd, &s->x, &done);
    if (rc == RUMOR_OK && done != last)
        rc = RUMOR_EBACKEND;
    if (rc != RUMOR_OK || done)
        return rc == RUMOR_OK ? s_step_end(g) : rc;
    if (k == 0 && s->measure) { /* the hook's Q of this node alone */
        s->q2 = 0;
        for (size_t e = 0; e < s->x.floats; e++)
            s->q2 += (double)s->x.data[e] * s->x.data[e];
    }
    rc = s_ring_fit(g, s->x.floats);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(s->ring.work, s->x.data, s->x.floats * sizeof(float));
    return gossip_ring_start(&s->ring, g, s->x.floats, s->x.average);
}

/* Phase A (the first exchange, summed with the uncompressed tensors) is
 * done: keep the uncompressed average, scale the exchange as asked. */
static rumor_err
s_phase_a_done(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    float n = (float)g->ring_n;
    float *work = s->ring.work;
    for (size_t e = 0; e < s->x.floats; e++)
        s->x.data[e] = s->x.average ? work[e] / n : work[e];
    for (size_t e = 0; e < s->unc_floats; e++)
        s->held[e] = work[s->x.floats + e] / n;
    if (s->rule)
        s_decide(g, work + s->x.floats + s->unc_floats);
    return s_exchange_done(g, 0);
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
    uint32_t one = gossip_ring_rounds(g);
    rumor_err rc = gossip_ring_absorb(g, &s->ring, round % one, msgs, count);
    if (rc != RUMOR_OK || round % one != one - 1)
        return rc;
    if (!s->active) {
        rc = gossip_model_write(g, 0, g->numel, s->ring.work, GOSSIP_TO_DEVICE);
        if (rc == RUMOR_OK)
            rumor_lowrank_psgd_skip(s->psgd);
        return rc;
    }
    if (round < one)
        return s_phase_a_done(g);
    memcpy(s->x.data, s->ring.work, s->x.floats * sizeof(float));
    return s_exchange_done(g, round / one);
}

/* With opts.adapt the state opens with the rank's: u64 rank, u64 hold,
 * u64 changes, f64 rel_error, f32 error and norm sums to send, u64 carry
 * floats (0 or numel) and the carry. The rank decides the sizes after. */
static rumor_err
s_adapt_save(const rumor_gossip *g, struct rumor_buf *out)
{
    const struct powersgd *s = g->state;
    rumor_err rc = gossip_write_u64(out, s->popts.rank);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, s->hold);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, s->changes);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, &s->rel_error, 1);
    if (rc == RUMOR_OK)
        rc = gossip_write_f32(out, s->pend, GOSSIP_PSGD_STATS);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, s->carry != NULL ? g->numel : 0);
    if (rc == RUMOR_OK && s->carry != NULL)
        rc = gossip_write_f32(out, s->carry, g->numel);
    return rc;
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
    rumor_err rc = s->measure ? s_adapt_save(g, out) : RUMOR_OK;
    if (rc != RUMOR_OK)
        return rc;
    size_t qf = rumor_lowrank_psgd_q_floats(s->psgd);
    size_t pf = rumor_lowrank_psgd_p_floats(s->psgd);
    size_t most = qf > pf ? qf : pf;
    for (size_t t = 0; t < g->tensor_count; t++)
        if (rumor_tensor_numel(&g->tensors[t]) > most)
            most = rumor_tensor_numel(&g->tensors[t]);
    float *f = malloc((most + 1) * sizeof *f);
    if (f == NULL)
        return RUMOR_ENOMEM;
    rc = gossip_write_u64(out, rumor_lowrank_psgd_step(s->psgd));
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

/* Whether a compressor of the given rank compresses tensor t (lowrank's
 * rule: two or more dimensions and rumor_lowrank_psgd_worth), adding its Q and
 * P floats to *q and *p: the sizes of a state, without making one. */
static bool
s_comp_at(const struct powersgd *s, size_t t, size_t rank, size_t *q, size_t *p)
{
    size_t n = 0, m = 0;
    struct rumor_lowrank_psgd_opts o = s->popts;
    o.rank = rank;
    if (s->shapes[t].ndim < 2 ||
        rumor_lowrank_matricize(&s->shapes[t], &n, &m) != RUMOR_OK ||
        !rumor_lowrank_psgd_worth(&o, n, m))
        return false;
    size_t used = rank < n ? rank : n;
    used = used < m ? used : m;
    *q += m * used;
    *p += n * used;
    return true;
}

/* The rank's block (s_adapt_save): *rank receives the rank. A load takes
 * the rest into s; an adopt only what every member has the same (the
 * rank's hold and changes, and with "rule" the error read from the
 * all-reduced sums): this node's sums to send, its carry and, with
 * "fixed", its own error stay. A rank outside the instance's bounds (or,
 * with "fixed", another rank) is refused. */
static void
s_adapt_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode,
             size_t *rank)
{
    struct powersgd *s = g->state;
    uint64_t rk = gossip_read_u64(r);
    uint64_t hold = gossip_read_u64(r);
    uint64_t changes = gossip_read_u64(r);
    double rel = 0;
    float pend[GOSSIP_PSGD_STATS] = {0};
    gossip_read_f64(r, &rel, 1);
    gossip_read_f32(r, pend, GOSSIP_PSGD_STATS);
    uint64_t carry = gossip_read_u64(r);
    bool rank_ok =
        s->rule ? rk >= s->rank_min && rk <= s->rank_max : rk == g->opts.rank;
    if (!rank_ok || hold > GOSSIP_PSGD_HOLD)
        gossip_reader_fail(r, RUMOR_EPROTO, "a rank outside the bounds");
    if (carry != 0 && carry != g->numel)
        gossip_reader_fail(r, RUMOR_EPROTO, "a carry of another size");
    float *c = NULL;
    bool load = mode == GOSSIP_STATE_LOAD;
    if (load && carry != 0 && r->err == RUMOR_OK) {
        c = malloc(g->numel * sizeof *c);
        if (c == NULL)
            gossip_reader_fail(r, RUMOR_ENOMEM, "out of memory");
    }
    gossip_read_f32(r, c, r->err == RUMOR_OK ? carry : 0);
    *rank = (size_t)rk;
    if (mode == GOSSIP_STATE_CHECK || r->err != RUMOR_OK) {
        free(c);
        return;
    }
    s->hold = hold;
    s->changes = changes;
    if (load || s->rule)
        s->rel_error = rel;
    if (!load)
        return;
    memcpy(s->pend, pend, sizeof pend);
    free(s->carry);
    s->carry = c;
}

/* A load or an adopt rebuilds the compressor (idle, whatever phase an
 * abandoned step left it in; what a step's begin wrote into its memories
 * and factors is gone), then fills it: step, Q and P from the state, the
 * error memories from it too (load) or moved over from this node's
 * compressor (adopt). */
static rumor_err
s_state_load(rumor_gossip *g,
             struct gossip_reader *r,
             enum gossip_state_mode mode)
{
    struct powersgd *s = g->state;
    bool apply = mode != GOSSIP_STATE_CHECK;
    size_t rank = s->popts.rank;
    if (s->measure)
        s_adapt_load(g, r, mode, &rank);
    rumor_err rc = r->err;
    if (rc == RUMOR_OK && apply)
        rc = s_rerank(g, rank, mode == GOSSIP_STATE_ADOPT ? KEEP_ERRORS : 0);
    size_t qf = 0, pf = 0, unused = 0;
    for (size_t t = 0; t < g->tensor_count; t++)
        s_comp_at(s, t, rank, &qf, &pf);
    if (apply) { /* the compressor's own sizes, if lowrank's rule moved */
        qf = rumor_lowrank_psgd_q_floats(s->psgd);
        pf = rumor_lowrank_psgd_p_floats(s->psgd);
    }
    uint64_t step = gossip_read_u64(r);
    if (rc == RUMOR_OK)
        rc = r->err;
    if (rc == RUMOR_OK && apply)
        rc = rumor_lowrank_psgd_step_set(s->psgd, step);
    if (rc == RUMOR_OK)
        rc = s_state_block(r, qf, apply, s->psgd, 0, s_set_q);
    if (rc == RUMOR_OK)
        rc = s_state_block(r, pf, apply, s->psgd, 0, s_set_p);
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        bool comp = apply ? s_compressed(g, t)
                          : s_comp_at(s, t, rank, &unused, &unused);
        if (comp)
            rc = s_state_block(r,
                               rumor_tensor_numel(&g->tensors[t]),
                               mode == GOSSIP_STATE_LOAD,
                               s->psgd,
                               t,
                               rumor_lowrank_psgd_error_set);
    }
    return rc;
}

/* The compressor's step stays open (state_load rebuilds it); what the
 * step wrote outside the state goes: the model of one-sided iterations,
 * a rank decided for its end, the exchange in flight. */
static void
s_abandon(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    if (s->open && s->orig != NULL)
        (void)gossip_model_write(g, 0, g->numel, s->orig, GOSSIP_ON_DEVICE);
    s->open = false;
    s->active = false;
    s->want = 0;
    memset(&s->x, 0, sizeof s->x);
}

bool
rumor_gossip_adapt_rank(const rumor_gossip *g,
                        struct rumor_gossip_rank_report *out)
{
    if (g == NULL || out == NULL || g->algo != &gossip_powersgd ||
        g->state == NULL)
        return false;
    const struct powersgd *s = g->state;
    if (!s->measure)
        return false;
    out->rank = s->popts.rank;
    out->rel_error = s->rel_error;
    out->changes = s->changes;
    return true;
}

/* The adaptive rank's host values into (to_snap) or out of the
 * snapshot's; the carry is copied (host memory, no PCIe). */
static rumor_err
s_adapt_copy(rumor_gossip *g, bool to_snap)
{
    struct powersgd *s = g->state;
    float **dst = to_snap ? &s->snap.carry : &s->carry;
    const float *src = to_snap ? s->carry : s->snap.carry;
    if (src == NULL) {
        free(*dst);
        *dst = NULL;
    } else {
        if (*dst == NULL)
            *dst = malloc(g->numel * sizeof **dst);
        if (*dst == NULL)
            return RUMOR_ENOMEM;
        memcpy(*dst, src, g->numel * sizeof **dst);
    }
#define S_COPY(f)                                   \
    do {                                            \
        if (to_snap)                                \
            memcpy(&s->snap.f, &s->f, sizeof s->f); \
        else                                        \
            memcpy(&s->f, &s->snap.f, sizeof s->f); \
    } while (0)
    S_COPY(popts);
    S_COPY(q2);
    S_COPY(rel_error);
    S_COPY(pend);
    S_COPY(hold);
    S_COPY(changes);
    S_COPY(want);
#undef S_COPY
    return RUMOR_OK;
}

/* The compressor's own snapshot (device to device); with the adaptive
 * rank also its host values, and the compressor a rank change replaces
 * is kept until the next boundary (s_rerank). A load or an adopt
 * rebuilds the compressor, snapshot gone: a restore after one is
 * refused. */
static rumor_err
s_snap_take(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    rumor_err rc = RUMOR_OK;
    if (s->measure) {
        rumor_lowrank_psgd_destroy(&s->snap.psgd);
        rc = s_adapt_copy(g, true);
        s->snap.held = rc == RUMOR_OK;
    }
    return rc == RUMOR_OK ? rumor_lowrank_psgd_snapshot(s->psgd) : rc;
}

/* Back to the compressor a rank change replaced since the boundary: the
 * replacement's counts retire, the restored one's are live again. */
static rumor_err
s_snap_unrank(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    uint64_t h2d = 0, d2h = 0, back_h2d = 0, back_d2h = 0;
    rumor_lowrank_psgd_pcie_bytes(s->psgd, &h2d, &d2h);
    rumor_lowrank_psgd_pcie_bytes(s->snap.psgd, &back_h2d, &back_d2h);
    s->retired[0] += h2d - back_h2d;
    s->retired[1] += d2h - back_d2h;
    rumor_lowrank_psgd_destroy(&s->psgd);
    s->psgd = s->snap.psgd;
    s->snap.psgd = NULL;
    s->popts = s->snap.popts;
    return s_unc_setup(g);
}

static rumor_err
s_snap_restore(rumor_gossip *g)
{
    struct powersgd *s = g->state;
    if (s->measure && !s->snap.held)
        return RUMOR_ENOTSUP;
    rumor_err rc = s->snap.psgd != NULL ? s_snap_unrank(g) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_psgd_snapshot_restore(s->psgd);
    return rc == RUMOR_OK && s->measure ? s_adapt_copy(g, false) : rc;
}

static void
s_memswap(void *a, void *b, size_t n)
{
    unsigned char *x = a, *y = b;
    for (size_t k = 0; k < n; k++) {
        unsigned char t = x[k];
        x[k] = y[k];
        y[k] = t;
    }
}

/* The boundary's compressor and host values in place of the live ones,
 * or back. */
static void
s_snap_swap(struct powersgd *s)
{
    if (s->snap.psgd != NULL) {
        rumor_lowrank_psgd *p = s->psgd;
        s->psgd = s->snap.psgd;
        s->snap.psgd = p;
    }
#define S_SWAP(f) s_memswap(&s->f, &s->snap.f, sizeof s->f)
    S_SWAP(popts);
    S_SWAP(rel_error);
    S_SWAP(hold);
    S_SWAP(changes);
    S_SWAP(carry);
    S_SWAP(pend);
#undef S_SWAP
}

/* state_save with the snapshot swapped in for the live state, and back. */
static rumor_err
s_snap_save(const rumor_gossip *g, struct rumor_buf *out)
{
    struct powersgd *s = g->state;
    if (s->measure && !s->snap.held)
        return RUMOR_ENOTSUP;
    if (s->measure)
        s_snap_swap(s);
    rumor_err rc = rumor_lowrank_psgd_snapshot_swap(s->psgd);
    if (rc == RUMOR_OK) {
        rc = s_state_save(g, out);
        (void)rumor_lowrank_psgd_snapshot_swap(s->psgd);
    }
    if (s->measure)
        s_snap_swap(s);
    return rc;
}

static void
s_pcie(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h)
{
    const struct powersgd *s = g->state;
    uint64_t up = 0, down = 0;
    if (s->psgd != NULL)
        rumor_lowrank_psgd_pcie_bytes(s->psgd, &up, &down);
    *h2d += up + s->retired[0];
    *d2h += down + s->retired[1];
}

const struct gossip_algo_i gossip_powersgd = {
    .name = "powersgd",
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
    .abandon = s_abandon,
    .snap_take = s_snap_take,
    .snap_restore = s_snap_restore,
    .snap_save = s_snap_save,
};
