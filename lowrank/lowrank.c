/*
 * lowrank: PowerSGD on top of a compute backend.
 *
 * PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) follows PyTorch's
 * powerSGD_hook.py step for step, so the hook is the test oracle: with
 * error feedback M = g + e; Q (warm from the last step, or drawn from the
 * shared seed) is orthogonalized; P = M Q is summed over nodes; P is
 * orthogonalized; Q = M^T P is averaged; approx = P Q^T; e = M - approx.
 * The two all-reduces are the caller's (gossip/): _begin and _next hand
 * out the host buffers to reduce, so the compressor never talks to a
 * network. Error feedback is fused into the first product (the error
 * memory becomes M in the same pass that multiplies it), which saves a
 * full pass over the model. Tensors that are 1-D or too small to gain
 * ((n + m) r rate >= n m) are the caller's to average uncompressed. The
 * matrices are kept grouped by shape in the hook's order (first
 * appearance), which gives the hook's P/Q memory layout and lets a
 * backend batch each group in one call.
 * The one-sided variant is epfml/powersgd's BasicPowerSGD: iteration t
 * orthogonalizes one factor, computes the other (Q = M^T P on even t,
 * P = M Q on odd t), averages it, and deflates M by the rank-r piece
 * found, so later iterations of a step look at what is left; which
 * matrices it compresses follows epfml's PowerSGD wrapper, which counts
 * the iters / 2 factors a step sends on average (rumor_lowrank_psgd_worth).
 *
 * PowerGossip's edge is lowrank/edge.c.
 *
 * Random factors are standard normals from the counter-based Philox
 * stream (core), so identical on every node, but not the same numbers as
 * torch.randn: reference tests pass the initial Q explicitly.
 */
#include "rumor/lowrank.h"

#include "lowrank/backend.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- shared helpers ------------------------------------------------------- */

size_t
lowrank_rank_for(size_t n, size_t m, size_t r)
{
    size_t k = r < n ? r : n;
    return k < m ? k : m;
}

rumor_lowrank_orth
lowrank_orth_resolve(rumor_lowrank_orth method, size_t r)
{
    if (method == RUMOR_LOWRANK_ORTH_AUTO)
        return r <= 2 ? RUMOR_LOWRANK_ORTH_GS : RUMOR_LOWRANK_ORTH_QR;
    return method;
}

rumor_err
rumor_lowrank_matricize(const struct rumor_lowrank_shape *shape,
                        size_t *rows,
                        size_t *cols)
{
    if (shape == NULL || shape->ndim == 0 ||
        shape->ndim > RUMOR_LOWRANK_MAX_DIMS)
        return RUMOR_EINVAL;
    size_t rest = 1;
    for (size_t d = 0; d < shape->ndim; d++) {
        if (shape->dims[d] == 0)
            return RUMOR_EINVAL;
        if (d == 0)
            continue;
        if (rest > SIZE_MAX / shape->dims[d])
            return RUMOR_EINVAL;
        rest *= shape->dims[d];
    }
    if (rest > SIZE_MAX / shape->dims[0])
        return RUMOR_EINVAL;
    *rows = shape->dims[0];
    *cols = rest;
    return RUMOR_OK;
}

bool
rumor_lowrank_worth(size_t rows, size_t cols, size_t rank, double min_rate)
{
    double r = (double)lowrank_rank_for(rows, cols, rank);
    return ((double)rows + (double)cols) * r * min_rate <
           (double)rows * (double)cols;
}

rumor_err
rumor_lowrank_count_floats(const struct rumor_lowrank_shape *shapes,
                           size_t count,
                           size_t rank,
                           struct rumor_lowrank_count *out)
{
    memset(out, 0, sizeof *out);
    if ((shapes == NULL && count > 0) || rank == 0)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        rumor_err rc = rumor_lowrank_matricize(&shapes[i], &n, &m);
        if (rc != RUMOR_OK)
            return rc;
        out->params += (uint64_t)n * m;
        if (shapes[i].ndim >= 2) {
            out->floats_sent +=
                (uint64_t)(n + m) * lowrank_rank_for(n, m, rank);
            out->compressed++;
        } else {
            out->floats_sent += n;
        }
    }
    return RUMOR_OK;
}

/* --- shape files ---------------------------------------------------------- */

static bool
s_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

rumor_err
rumor_lowrank_shapes_parse(const char *text,
                           size_t len,
                           const char *file,
                           struct rumor_lowrank_shape **out,
                           size_t *count_out,
                           struct rumor_diag *diag)
{
    *out = NULL;
    *count_out = 0;
    struct rumor_lowrank_shape *shapes = NULL;
    size_t count = 0, alloc = 0;
    rumor_err rc = RUMOR_OK;
    size_t pos = 0;
    int line = 0;
    const char *name = file != NULL ? file : "";
    while (pos < len) {
        line++;
        size_t start = pos;
        while (pos < len && text[pos] != '\n')
            pos++;
        size_t end = pos;
        if (pos < len)
            pos++;
        for (size_t k = start; k < end; k++)
            if (text[k] == '#') {
                end = k;
                break;
            }
        size_t k = start;
        while (k < end && s_is_space(text[k]))
            k++;
        if (k == end)
            continue;
        while (k < end && !s_is_space(text[k])) /* the tensor's name */
            k++;
        struct rumor_lowrank_shape shape = {0};
        for (;;) {
            while (k < end && s_is_space(text[k]))
                k++;
            if (k == end)
                break;
            size_t col = k - start + 1;
            uint64_t v = 0;
            bool digits = false;
            while (k < end && text[k] >= '0' && text[k] <= '9') {
                unsigned d = (unsigned)(text[k] - '0');
                if (v > (UINT32_MAX - d) / 10) {
                    rumor_diag_set(diag,
                                   name,
                                   line,
                                   (int)col,
                                   "dimension too large");
                    rc = RUMOR_EPROTO;
                    goto done;
                }
                v = v * 10 + d;
                digits = true;
                k++;
            }
            if (!digits || (k < end && !s_is_space(text[k])) || v == 0) {
                rumor_diag_set(diag,
                               name,
                               line,
                               (int)col,
                               "expected a positive whole dimension");
                rc = RUMOR_EPROTO;
                goto done;
            }
            if (shape.ndim == RUMOR_LOWRANK_MAX_DIMS) {
                rumor_diag_set(diag,
                               name,
                               line,
                               (int)col,
                               "more than %d dimensions",
                               RUMOR_LOWRANK_MAX_DIMS);
                rc = RUMOR_EPROTO;
                goto done;
            }
            shape.dims[shape.ndim++] = (size_t)v;
        }
        if (shape.ndim == 0) {
            rumor_diag_set(diag,
                           name,
                           line,
                           (int)(k - start + 1),
                           "a tensor needs at least one dimension");
            rc = RUMOR_EPROTO;
            goto done;
        }
        size_t rows = 0, cols = 0;
        if (rumor_lowrank_matricize(&shape, &rows, &cols) != RUMOR_OK) {
            rumor_diag_set(diag, name, line, 1, "tensor too large");
            rc = RUMOR_EPROTO;
            goto done;
        }
        if (count == RUMOR_LOWRANK_MAX_TENSORS) {
            rumor_diag_set(diag,
                           name,
                           line,
                           1,
                           "more than %d tensors",
                           RUMOR_LOWRANK_MAX_TENSORS);
            rc = RUMOR_ETOOBIG;
            goto done;
        }
        if (count == alloc) {
            size_t grown = alloc == 0 ? 64 : alloc * 2;
            struct rumor_lowrank_shape *more =
                realloc(shapes, grown * sizeof *shapes);
            if (more == NULL) {
                rc = RUMOR_ENOMEM;
                goto done;
            }
            shapes = more;
            alloc = grown;
        }
        shapes[count++] = shape;
    }
    *out = shapes;
    *count_out = count;
    shapes = NULL;
done:
    free(shapes);
    return rc;
}

/* --- orthogonalization ---------------------------------------------------- */

/* --- backend choice ------------------------------------------------------- */

rumor_err
lowrank_backend_open(bool want_cuda,
                     struct lowrank_backend_i *be,
                     void **ctx,
                     rumor_device *device)
{
    *device = rumor_device_select(want_cuda);
    if (*device == RUMOR_DEVICE_CUDA) {
        rumor_err rc = lowrank_cuda_init(be, ctx);
        if (rc == RUMOR_OK)
            return RUMOR_OK;
        rumor_log(RUMOR_LOG_INFO,
                  "lowrank: cuda backend unavailable (%s), "
                  "using cpu",
                  rumor_strerror(rc));
        *device = RUMOR_DEVICE_CPU;
    }
    return lowrank_cpu_init(be, ctx);
}

void
lowrank_fill_normal(float *host, size_t n, uint64_t seed, uint64_t stream)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, stream);
    for (size_t i = 0; i < n; i++)
        host[i] = (float)rumor_rng_normal(&rng);
}

/* --- PowerSGD ------------------------------------------------------------- */

struct psgd_mat {
    size_t tensor;  /* index in the model */
    size_t n, m, r; /* rows, cols, rank used */
    size_t p_off;   /* offset in the packed P buffer (floats) */
    size_t q_off;   /* offset in the packed Q buffer (floats) */
    float *p;       /* device, n x r */
    float *q;       /* device, m x r */
    float *e;       /* device, n x m error memory, in errors (or NULL) */
    float *pd;      /* device, the last step's P while e's update waits */
    float *qd;      /* device, the last step's Q, likewise */
    bool deferred;  /* the error memory is e - pd qd^T (see _end) */
    float *mat;     /* device, M of the open step (borrowed or e) */
    float *grad;    /* device, the grads of the open step (borrowed) */
};

/* Pointer arrays a batched backend call takes at most (project_right_ef:
 * mats, adds, pds, qds, qs, ps). */
#define PSGD_PTR_ARRAYS 6

/* Matrices of one shape, contiguous in mats: one batched call each. */
struct psgd_group {
    size_t first; /* index in mats */
    size_t count; /* matrices in the group */
};

/* A copy of the state between steps kept in the backend's memory
 * (rumor_lowrank_psgd_snapshot): the buffers as the compressor's, NULL
 * until the first snapshot (or where the compressor has none). */
struct psgd_snap {
    float *p_all, *q_all, *pd_all, *qd_all, *errors;
    bool *deferred; /* per matrix */
    uint64_t step;
    bool have_q;
    bool taken;
};

enum psgd_phase {
    PSGD_IDLE = 0,
    PSGD_SUMMING_P,   /* hook: P handed out to be summed */
    PSGD_AVERAGING_Q, /* hook: Q handed out to be averaged */
    PSGD_ONE_SIDED,   /* one-sided: a product handed out to be averaged */
    PSGD_DONE         /* every exchange reduced, _end next */
};

struct rumor_lowrank_psgd {
    struct rumor_lowrank_psgd_opts opts;
    struct lowrank_backend_i be;
    void *ctx;
    rumor_device device;
    size_t count;   /* tensors in the model */
    size_t *mat_of; /* tensor -> index in mats, SIZE_MAX if none */
    struct psgd_mat *mats;
    size_t nmats;
    struct psgd_group *groups;
    size_t ngroups;
    float **ptrs; /* PSGD_PTR_ARRAYS * nmats host slots for batched calls */
    struct lowrank_orth_item *orth_items; /* nmats, for orthogonalize_list */
    struct lowrank_mat_item *mat_items;   /* nmats, for the product lists */
    float *p_all, *q_all;   /* device, every P and Q (s_psgd_factors_alloc) */
    float *pd_all, *qd_all; /* device, their deferred copies (or NULL) */
    float *errors; /* device, every error memory (s_psgd_errors_alloc) */
    float *p_host; /* packed P (host), p_floats */
    float *q_host; /* packed Q (host), q_floats */
    size_t p_floats, q_floats;
    uint64_t step;               /* steps counted (compressed or skipped) */
    uint64_t pcie_h2d, pcie_d2h; /* factor bytes copied each way */
    bool have_q;                 /* warm-start factors exist */
    struct psgd_snap snap;       /* rumor_lowrank_psgd_snapshot's */
    enum psgd_phase phase;
    size_t iter; /* one-sided: iteration within the step */
    float *view; /* device, _error_mem's scratch (view_bytes), or NULL */
    size_t view_bytes;
};

void
rumor_lowrank_psgd_opts_default(struct rumor_lowrank_psgd_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->rank = 1;
    opts->min_rate = 2;
    opts->eps = 0;
    opts->orth = RUMOR_LOWRANK_ORTH_AUTO;
    opts->error_feedback = true;
    opts->warm_start = true;
    opts->iters = 1;
    opts->batch = true;
}

bool
rumor_lowrank_psgd_worth(const struct rumor_lowrank_psgd_opts *opts,
                         size_t rows,
                         size_t cols)
{
    double rate = opts->min_rate;
    if (opts->one_sided) /* epfml's avg_compressed_size: iters / 2 sides */
        rate *= 0.5 * (double)opts->iters;
    return rumor_lowrank_worth(rows, cols, opts->rank, rate);
}

static rumor_err
s_psgd_check(const struct rumor_lowrank_shape *shapes,
             size_t count,
             const struct rumor_lowrank_psgd_opts *opts)
{
    if ((shapes == NULL && count > 0) || count > RUMOR_LOWRANK_MAX_TENSORS ||
        opts == NULL)
        return RUMOR_EINVAL;
    if (opts->rank == 0 || opts->rank > RUMOR_LOWRANK_MAX_RANK ||
        !(opts->min_rate >= 0) || !(opts->eps >= 0) ||
        opts->orth > RUMOR_LOWRANK_ORTH_CHOLQR2)
        return RUMOR_EINVAL;
    if (opts->one_sided && (!opts->error_feedback || opts->iters == 0))
        return RUMOR_EINVAL;
    return RUMOR_OK;
}

/* Orders the compressed matrices as the hook lays out its P and Q memory:
 * grouped by matrix shape in order of first appearance, model order within
 * a shape. The same order makes the shape groups contiguous for batching. */
struct psgd_key {
    size_t n, m;  /* matrix shape */
    size_t first; /* model-order index of the shape's first matrix */
    size_t index; /* model-order index of this matrix */
};

static int
s_key_by_shape(const void *a, const void *b)
{
    const struct psgd_key *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int
s_key_by_first(const void *a, const void *b)
{
    const struct psgd_key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static rumor_err
s_psgd_layout(rumor_lowrank_psgd *self)
{
    size_t k = self->nmats;
    struct psgd_key *keys = malloc((k > 0 ? k : 1) * sizeof *keys);
    struct psgd_mat *sorted = malloc((k > 0 ? k : 1) * sizeof *sorted);
    rumor_err rc = RUMOR_OK;
    if (keys == NULL || sorted == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < k; i++)
        keys[i] = (struct psgd_key){self->mats[i].n, self->mats[i].m, 0, i};
    qsort(keys, k, sizeof *keys, s_key_by_shape);
    for (size_t i = 0; i < k; i++)
        keys[i].first =
            i > 0 && keys[i].n == keys[i - 1].n && keys[i].m == keys[i - 1].m
                ? keys[i - 1].first
                : keys[i].index;
    qsort(keys, k, sizeof *keys, s_key_by_first);
    self->ngroups = 0;
    self->p_floats = 0;
    self->q_floats = 0;
    for (size_t i = 0; i < k; i++) {
        struct psgd_mat mt = self->mats[keys[i].index];
        mt.p_off = self->p_floats;
        mt.q_off = self->q_floats;
        self->p_floats += mt.n * mt.r;
        self->q_floats += mt.m * mt.r;
        sorted[i] = mt;
        self->mat_of[mt.tensor] = i;
        if (i == 0 || keys[i].first != keys[i - 1].first)
            self->groups[self->ngroups++] = (struct psgd_group){i, 0};
        self->groups[self->ngroups - 1].count++;
    }
    if (k > 0)
        memcpy(self->mats, sorted, k * sizeof *sorted);
done:
    free(keys);
    free(sorted);
    return rc;
}

/* Whether the error update e = M - P Q^T is deferred into the next step's
 * first product (hook variant with error feedback, on a backend with the
 * fused kernel): M is then read twice per step and written once, instead
 * of three reads and two writes; the values are the same bit for bit. */
static bool
s_psgd_defers(const rumor_lowrank_psgd *self)
{
    return self->opts.error_feedback && !self->opts.one_sided &&
           self->be.project_right_ef != NULL && self->be.copy != NULL;
}

/* Bytes of the error memories' allocation (s_psgd_errors_alloc cuts it). */
static size_t
s_psgd_errors_bytes(const rumor_lowrank_psgd *self)
{
    const size_t align = 256 / sizeof(float);
    size_t floats = 0;
    for (size_t i = 0; i < self->nmats; i++)
        floats +=
            (self->mats[i].n * self->mats[i].m + align - 1) / align * align;
    return floats * sizeof(float);
}

/* The error memories, one allocation cut in the order a step visits the
 * matrices: the cpu backend puts an allocation of 2 MiB or more on huge
 * pages, so every matrix's memory is there once the model's together
 * reach 2 MiB (one by one, the many small matrices of a CNN were on 4 KiB
 * pages), and a pass runs from one matrix's memory straight into the
 * next one's. Each starts on a 256-byte boundary (cudaMalloc's). */
static rumor_err
s_psgd_errors_alloc(rumor_lowrank_psgd *self)
{
    const size_t align = 256 / sizeof(float);
    rumor_err rc =
        self->be.alloc(self->ctx, s_psgd_errors_bytes(self), &self->errors);
    for (size_t i = 0, at = 0; rc == RUMOR_OK && i < self->nmats; i++) {
        struct psgd_mat *mt = &self->mats[i];
        mt->e = self->errors + at;
        at += (mt->n * mt->m + align - 1) / align * align;
    }
    return rc;
}

/* The factors P and Q of every matrix (and the deferred update's copies),
 * each kind one allocation in the packed order of the exchange (p_off,
 * q_off): moving a step's P or Q between the backend and the host, or
 * keeping the deferred copies, is one call, not one per matrix (on cuda a
 * synchronous copy each, which dominated steps of models with many small
 * matrices). */
static rumor_err
s_psgd_factors_alloc(rumor_lowrank_psgd *self)
{
    size_t pb = (self->p_floats + 1) * sizeof(float);
    size_t qb = (self->q_floats + 1) * sizeof(float);
    rumor_err rc = self->be.alloc(self->ctx, pb, &self->p_all);
    if (rc == RUMOR_OK)
        rc = self->be.alloc(self->ctx, qb, &self->q_all);
    if (rc == RUMOR_OK && s_psgd_defers(self))
        rc = self->be.alloc(self->ctx, pb, &self->pd_all);
    if (rc == RUMOR_OK && s_psgd_defers(self))
        rc = self->be.alloc(self->ctx, qb, &self->qd_all);
    for (size_t i = 0; rc == RUMOR_OK && i < self->nmats; i++) {
        struct psgd_mat *mt = &self->mats[i];
        mt->p = self->p_all + mt->p_off;
        mt->q = self->q_all + mt->q_off;
        mt->pd = self->pd_all != NULL ? self->pd_all + mt->p_off : NULL;
        mt->qd = self->qd_all != NULL ? self->qd_all + mt->q_off : NULL;
    }
    return rc;
}

/* Tells the backend how many floats a step writes (the approximation of
 * every compressed matrix), for its choice of streaming stores. */
static void
s_psgd_step_hint(rumor_lowrank_psgd *self)
{
    if (self->be.step_floats == NULL)
        return;
    size_t floats = 0;
    for (size_t i = 0; i < self->nmats; i++)
        floats += self->mats[i].n * self->mats[i].m;
    self->be.step_floats(self->ctx, floats);
}

rumor_err
lowrank_psgd_new_on(rumor_lowrank_psgd **out,
                    const struct rumor_lowrank_shape *shapes,
                    size_t count,
                    const struct rumor_lowrank_psgd_opts *opts,
                    const struct lowrank_backend_i *iface,
                    void *ctx)
{
    *out = NULL;
    rumor_lowrank_psgd *self = NULL;
    rumor_err rc = s_psgd_check(shapes, count, opts);
    if (rc != RUMOR_OK) {
        iface->free(ctx);
        return rc;
    }
    self = calloc(1, sizeof *self);
    if (self == NULL) {
        iface->free(ctx);
        return RUMOR_ENOMEM;
    }
    self->be = *iface;
    self->ctx = ctx;
    self->opts = *opts;
    if (!opts->batch) { /* the loops every backend without them runs */
        self->be.project_right_batch = NULL;
        self->be.project_left_batch = NULL;
        self->be.orthogonalize_batch = NULL;
        self->be.reconstruct_batch = NULL;
        self->be.project_right_ef_batch = NULL;
    }
    /* The lists' kernels stop at LOWRANK_LIST_MAX_RANK. */
    if (!opts->batch || opts->rank > LOWRANK_LIST_MAX_RANK) {
        self->be.orthogonalize_list = NULL;
        self->be.project_right_list = NULL;
        self->be.project_left_list = NULL;
        self->be.reconstruct_list = NULL;
    }
    self->count = count;
    size_t slots = count > 0 ? count : 1;
    self->mat_of = malloc(slots * sizeof *self->mat_of);
    self->mats = calloc(slots, sizeof *self->mats);
    self->groups = calloc(slots, sizeof *self->groups);
    self->ptrs = calloc(PSGD_PTR_ARRAYS * slots, sizeof *self->ptrs);
    self->orth_items = calloc(slots, sizeof *self->orth_items);
    self->mat_items = calloc(slots, sizeof *self->mat_items);
    if (self->mat_of == NULL || self->mats == NULL || self->groups == NULL ||
        self->ptrs == NULL || self->orth_items == NULL ||
        self->mat_items == NULL) {
        rc = RUMOR_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        self->mat_of[i] = SIZE_MAX;
        rc = rumor_lowrank_matricize(&shapes[i], &n, &m);
        if (rc != RUMOR_OK)
            goto fail;
        if (shapes[i].ndim < 2 || !rumor_lowrank_psgd_worth(opts, n, m))
            continue;
        struct psgd_mat *mt = &self->mats[self->nmats++];
        mt->tensor = i;
        mt->n = n;
        mt->m = m;
        mt->r = lowrank_rank_for(n, m, opts->rank);
    }
    rc = s_psgd_layout(self);
    if (rc == RUMOR_OK)
        rc = s_psgd_factors_alloc(self);
    if (rc == RUMOR_OK && opts->error_feedback)
        rc = s_psgd_errors_alloc(self);
    if (rc != RUMOR_OK)
        goto fail;
    s_psgd_step_hint(self);
    self->p_host = malloc((self->p_floats + 1) * sizeof(float));
    self->q_host = malloc((self->q_floats + 1) * sizeof(float));
    if (self->p_host == NULL || self->q_host == NULL) {
        rc = RUMOR_ENOMEM;
        goto fail;
    }
    *out = self;
    return RUMOR_OK;
fail:
    rumor_lowrank_psgd_destroy(&self);
    return rc;
}

rumor_err
rumor_lowrank_psgd_new(rumor_lowrank_psgd **out,
                       const struct rumor_lowrank_shape *shapes,
                       size_t count,
                       const struct rumor_lowrank_psgd_opts *opts)
{
    *out = NULL;
    rumor_err rc = s_psgd_check(shapes, count, opts);
    if (rc != RUMOR_OK)
        return rc;
    struct lowrank_backend_i be;
    void *ctx = NULL;
    rumor_device device = RUMOR_DEVICE_CPU;
    rc = lowrank_backend_open(opts->want_cuda, &be, &ctx, &device);
    if (rc != RUMOR_OK)
        return rc;
    rc = lowrank_psgd_new_on(out, shapes, count, opts, &be, ctx);
    if (rc == RUMOR_OK)
        (*out)->device = device;
    return rc;
}

void
rumor_lowrank_psgd_destroy(rumor_lowrank_psgd **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_lowrank_psgd *self = *self_p;
    self->be.release(self->ctx, self->p_all);
    self->be.release(self->ctx, self->q_all);
    self->be.release(self->ctx, self->pd_all);
    self->be.release(self->ctx, self->qd_all);
    self->be.release(self->ctx, self->errors);
    self->be.release(self->ctx, self->snap.p_all);
    self->be.release(self->ctx, self->snap.q_all);
    self->be.release(self->ctx, self->snap.pd_all);
    self->be.release(self->ctx, self->snap.qd_all);
    self->be.release(self->ctx, self->snap.errors);
    self->be.release(self->ctx, self->view);
    free(self->snap.deferred);
    self->be.free(self->ctx);
    free(self->mats);
    free(self->mat_of);
    free(self->groups);
    free(self->ptrs);
    free(self->orth_items);
    free(self->mat_items);
    free(self->p_host);
    free(self->q_host);
    free(self);
    *self_p = NULL;
}

rumor_device
rumor_lowrank_psgd_device(const rumor_lowrank_psgd *self)
{
    return self->device;
}

bool
rumor_lowrank_psgd_compressed(const rumor_lowrank_psgd *self, size_t i)
{
    return i < self->count && self->mat_of[i] != SIZE_MAX;
}

bool
rumor_lowrank_psgd_active(const rumor_lowrank_psgd *self)
{
    return self->step >= self->opts.start_iter;
}

void
rumor_lowrank_psgd_skip(rumor_lowrank_psgd *self)
{
    self->step++;
}

uint64_t
rumor_lowrank_psgd_step(const rumor_lowrank_psgd *self)
{
    return self->step;
}

size_t
rumor_lowrank_psgd_q_floats(const rumor_lowrank_psgd *self)
{
    return self->q_floats;
}

/* --- PowerSGD: the operations, one list or a shape group at a time ------- */

/* Counts bytes copied between host and a device (none on a backend whose
 * memory is the host's). */
static void
s_psgd_moved(rumor_lowrank_psgd *self, size_t bytes, bool to_device)
{
    if (!self->be.host_memory)
        *(to_device ? &self->pcie_h2d : &self->pcie_d2h) += bytes;
}

/* Counts a step's factor copies between host and a device. */
static void
s_psgd_count(rumor_lowrank_psgd *self, bool want_p, bool to_device)
{
    size_t floats = want_p ? self->p_floats : self->q_floats;
    s_psgd_moved(self, floats * sizeof(float), to_device);
}

void
rumor_lowrank_psgd_pcie_bytes(const rumor_lowrank_psgd *self,
                              uint64_t *to_device,
                              uint64_t *to_host)
{
    *to_device = self->pcie_h2d;
    *to_host = self->pcie_d2h;
}

/* Copies the backend's factors (P when want_p, else Q) to the host
 * buffer: they are packed in the same order (s_psgd_factors_alloc). */
static rumor_err
s_psgd_download(rumor_lowrank_psgd *self, bool want_p)
{
    s_psgd_count(self, want_p, false);
    return want_p ? self->be.download(self->ctx,
                                      self->p_host,
                                      self->p_all,
                                      self->p_floats * sizeof(float))
                  : self->be.download(self->ctx,
                                      self->q_host,
                                      self->q_all,
                                      self->q_floats * sizeof(float));
}

static rumor_err
s_psgd_upload(rumor_lowrank_psgd *self, bool want_p)
{
    s_psgd_count(self, want_p, true);
    return want_p ? self->be.upload(self->ctx,
                                    self->p_all,
                                    self->p_host,
                                    self->p_floats * sizeof(float))
                  : self->be.upload(self->ctx,
                                    self->q_all,
                                    self->q_host,
                                    self->q_floats * sizeof(float));
}

/* Orthogonalizes P (want_p) or Q of every matrix. */
static rumor_err
s_psgd_orth(rumor_lowrank_psgd *self, bool want_p)
{
    if (self->be.orthogonalize_list != NULL) {
        for (size_t i = 0; i < self->nmats; i++) {
            const struct psgd_mat *mt = &self->mats[i];
            self->orth_items[i] =
                (struct lowrank_orth_item){want_p ? mt->p : mt->q,
                                           want_p ? mt->n : mt->m,
                                           mt->r};
        }
        return self->be.orthogonalize_list(self->ctx,
                                           self->orth_items,
                                           self->nmats,
                                           self->opts.orth,
                                           self->opts.eps);
    }
    for (size_t g = 0; g < self->ngroups; g++) {
        const struct psgd_group *gr = &self->groups[g];
        const struct psgd_mat *m0 = &self->mats[gr->first];
        size_t rows = want_p ? m0->n : m0->m;
        rumor_err rc = RUMOR_OK;
        if (self->be.orthogonalize_batch != NULL) {
            for (size_t i = 0; i < gr->count; i++) {
                const struct psgd_mat *mt = &self->mats[gr->first + i];
                self->ptrs[i] = want_p ? mt->p : mt->q;
            }
            rc = self->be.orthogonalize_batch(self->ctx,
                                              self->ptrs,
                                              rows,
                                              m0->r,
                                              self->opts.orth,
                                              self->opts.eps,
                                              gr->count);
        } else {
            for (size_t i = 0; rc == RUMOR_OK && i < gr->count; i++) {
                const struct psgd_mat *mt = &self->mats[gr->first + i];
                rc = self->be.orthogonalize(self->ctx,
                                            want_p ? mt->p : mt->q,
                                            rows,
                                            mt->r,
                                            self->opts.orth,
                                            self->opts.eps);
            }
        }
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* Every matrix as a product list's item: M, grads (fuse), the deferred
 * factors of the matrices waiting for their error update, P, Q, and the
 * reconstruction's output (outs[tensor], or the grads when outs is NULL). */
static void
s_psgd_mat_items(rumor_lowrank_psgd *self, bool fuse, float *const *outs)
{
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        self->mat_items[i] = (struct lowrank_mat_item){
            .mat = mt->mat,
            .add = fuse ? mt->grad : NULL,
            .pd = mt->deferred ? mt->pd : NULL,
            .qd = mt->deferred ? mt->qd : NULL,
            .p = mt->p,
            .q = mt->q,
            .out = outs != NULL ? outs[mt->tensor] : mt->grad,
            .n = mt->n,
            .m = mt->m,
            .r = mt->r,
        };
    }
}

/* P = M Q (right) or Q = M^T P (left) for every matrix; fuse: M += grads
 * in the same pass (error feedback). The left product visits the matrices
 * from the last to the first (as the cpu kernel visits rows): the right
 * product and the reconstruction go first to last, so each pass starts on
 * the matrices the previous one left in the last-level cache. The order
 * changes no result: every matrix is computed on its own. */
static rumor_err
s_psgd_project(rumor_lowrank_psgd *self, bool right, bool fuse)
{
    if (right ? self->be.project_right_list != NULL
              : self->be.project_left_list != NULL) {
        s_psgd_mat_items(self, fuse, NULL);
        return right ? self->be.project_right_list(self->ctx,
                                                   self->mat_items,
                                                   self->nmats)
                     : self->be.project_left_list(self->ctx,
                                                  self->mat_items,
                                                  self->nmats);
    }
    for (size_t gi = 0; gi < self->ngroups; gi++) {
        size_t g = right ? gi : self->ngroups - 1 - gi;
        const struct psgd_group *gr = &self->groups[g];
        const struct psgd_mat *m0 = &self->mats[gr->first];
        rumor_err rc = RUMOR_OK;
        bool batched = right ? self->be.project_right_batch != NULL
                             : self->be.project_left_batch != NULL;
        if (batched) {
            float **mats = self->ptrs, **adds = mats + gr->count;
            float **ins = adds + gr->count, **outs = ins + gr->count;
            for (size_t i = 0; i < gr->count; i++) {
                const struct psgd_mat *mt = &self->mats[gr->first + i];
                mats[i] = mt->mat;
                adds[i] = mt->grad;
                ins[i] = right ? mt->q : mt->p;
                outs[i] = right ? mt->p : mt->q;
            }
            const float *const *cadds =
                fuse ? (const float *const *)adds : NULL;
            rc = right ? self->be.project_right_batch(self->ctx,
                                                      mats,
                                                      cadds,
                                                      m0->n,
                                                      m0->m,
                                                      (const float *const *)ins,
                                                      m0->r,
                                                      outs,
                                                      gr->count)
                       : self->be.project_left_batch(self->ctx,
                                                     mats,
                                                     cadds,
                                                     m0->n,
                                                     m0->m,
                                                     (const float *const *)ins,
                                                     m0->r,
                                                     outs,
                                                     gr->count);
        } else {
            for (size_t i = 0; rc == RUMOR_OK && i < gr->count; i++) {
                size_t at = right ? i : gr->count - 1 - i;
                const struct psgd_mat *mt = &self->mats[gr->first + at];
                const float *add = fuse ? mt->grad : NULL;
                rc = right ? self->be.project_right(self->ctx,
                                                    mt->mat,
                                                    add,
                                                    mt->n,
                                                    mt->m,
                                                    mt->q,
                                                    mt->r,
                                                    mt->p)
                           : self->be.project_left(self->ctx,
                                                   mt->mat,
                                                   add,
                                                   mt->n,
                                                   mt->m,
                                                   mt->p,
                                                   mt->r,
                                                   mt->q);
            }
        }
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* The right product of one shape group where some matrices wait for their
 * deferred error update: one batched call when the backend has one and the
 * whole group waits (the case after every _end), else matrix by matrix. */
static rumor_err
s_psgd_project_ef_group(rumor_lowrank_psgd *self,
                        const struct psgd_group *gr,
                        bool fuse)
{
    struct psgd_mat *first = &self->mats[gr->first];
    bool all = true;
    for (size_t i = 0; i < gr->count; i++)
        all = all && first[i].deferred;
    if (all && self->be.project_right_ef_batch != NULL) {
        float **mats = self->ptrs, **adds = mats + gr->count;
        float **pds = adds + gr->count, **qds = pds + gr->count;
        float **qs = qds + gr->count, **ps = qs + gr->count;
        for (size_t i = 0; i < gr->count; i++) {
            mats[i] = first[i].mat;
            adds[i] = first[i].grad;
            pds[i] = first[i].pd;
            qds[i] = first[i].qd;
            qs[i] = first[i].q;
            ps[i] = first[i].p;
        }
        rumor_err rc = self->be.project_right_ef_batch(
            self->ctx,
            mats,
            fuse ? (const float *const *)adds : NULL,
            first->n,
            first->m,
            (const float *const *)pds,
            (const float *const *)qds,
            (const float *const *)qs,
            first->r,
            ps,
            gr->count);
        for (size_t i = 0; rc == RUMOR_OK && i < gr->count; i++)
            first[i].deferred = false;
        return rc;
    }
    for (size_t i = 0; i < gr->count; i++) {
        struct psgd_mat *mt = &first[i];
        const float *add = fuse ? mt->grad : NULL;
        rumor_err rc = mt->deferred ? self->be.project_right_ef(self->ctx,
                                                                mt->mat,
                                                                add,
                                                                mt->n,
                                                                mt->m,
                                                                mt->pd,
                                                                mt->qd,
                                                                mt->q,
                                                                mt->r,
                                                                mt->p)
                                    : self->be.project_right(self->ctx,
                                                             mt->mat,
                                                             add,
                                                             mt->n,
                                                             mt->m,
                                                             mt->q,
                                                             mt->r,
                                                             mt->p);
        if (rc != RUMOR_OK)
            return rc;
        mt->deferred = false;
    }
    return RUMOR_OK;
}

/* P = M Q with M += grads fused (fuse), for every matrix; a matrix whose
 * error update is deferred gets it in the same pass (M = (e - Pd Qd^T) +
 * grads). */
static rumor_err
s_psgd_project_ef(rumor_lowrank_psgd *self, bool fuse)
{
    bool any = false;
    for (size_t i = 0; i < self->nmats; i++)
        any = any || self->mats[i].deferred;
    if (!any)
        return s_psgd_project(self, true, fuse);
    if (self->be.project_right_list != NULL) {
        s_psgd_mat_items(self, fuse, NULL);
        rumor_err rc = self->be.project_right_list(self->ctx,
                                                   self->mat_items,
                                                   self->nmats);
        for (size_t i = 0; rc == RUMOR_OK && i < self->nmats; i++)
            self->mats[i].deferred = false;
        return rc;
    }
    for (size_t g = 0; g < self->ngroups; g++) {
        rumor_err rc = s_psgd_project_ef_group(self, &self->groups[g], fuse);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* Keeps this step's factors so that e = M - P Q^T can be applied in the
 * next step's first product (s_psgd_defers): device copies, since Q is
 * orthogonalized in place and P overwritten by the next step. */
static rumor_err
s_psgd_defer(rumor_lowrank_psgd *self)
{
    rumor_err rc = self->be.copy(self->ctx,
                                 self->pd_all,
                                 self->p_all,
                                 self->p_floats * sizeof(float));
    if (rc == RUMOR_OK)
        rc = self->be.copy(self->ctx,
                           self->qd_all,
                           self->q_all,
                           self->q_floats * sizeof(float));
    for (size_t i = 0; rc == RUMOR_OK && i < self->nmats; i++)
        self->mats[i].deferred = true;
    return rc;
}

/* Y = P Q^T per matrix; e (the error memory or M, when with_e) -= Y;
 * out = beta out + Y where out is outs[tensor] (or each matrix's grads
 * when outs is NULL). */
static rumor_err
s_psgd_reconstruct(rumor_lowrank_psgd *self,
                   float *const *outs,
                   bool with_e,
                   float beta)
{
    if (self->be.reconstruct_list != NULL) {
        s_psgd_mat_items(self, false, outs);
        return self->be.reconstruct_list(self->ctx,
                                         self->mat_items,
                                         self->nmats,
                                         with_e,
                                         beta);
    }
    for (size_t g = 0; g < self->ngroups; g++) {
        const struct psgd_group *gr = &self->groups[g];
        const struct psgd_mat *m0 = &self->mats[gr->first];
        rumor_err rc = RUMOR_OK;
        if (self->be.reconstruct_batch != NULL) {
            float **ps = self->ptrs, **qs = ps + gr->count;
            float **es = qs + gr->count, **os = es + gr->count;
            for (size_t i = 0; i < gr->count; i++) {
                const struct psgd_mat *mt = &self->mats[gr->first + i];
                ps[i] = mt->p;
                qs[i] = mt->q;
                es[i] = mt->mat;
                os[i] = outs != NULL ? outs[mt->tensor] : mt->grad;
            }
            rc = self->be.reconstruct_batch(self->ctx,
                                            m0->n,
                                            m0->m,
                                            m0->r,
                                            (const float *const *)ps,
                                            (const float *const *)qs,
                                            1.0f,
                                            with_e ? es : NULL,
                                            os,
                                            beta,
                                            gr->count);
        } else {
            for (size_t i = 0; rc == RUMOR_OK && i < gr->count; i++) {
                const struct psgd_mat *mt = &self->mats[gr->first + i];
                float *o = outs != NULL ? outs[mt->tensor] : mt->grad;
                rc = self->be.reconstruct(self->ctx,
                                          mt->n,
                                          mt->m,
                                          mt->r,
                                          mt->p,
                                          mt->q,
                                          1.0f,
                                          with_e ? mt->mat : NULL,
                                          o,
                                          beta);
            }
        }
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* Draws fresh factors from the shared seed: Q (and P for the one-sided
 * variant), one Philox stream per (step, tensor, side). */
static rumor_err
s_psgd_randomize(rumor_lowrank_psgd *self)
{
    uint64_t seed = rumor_seed_derive(self->opts.seed, self->step, 0x505347);
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        uint64_t t = self->opts.tensor_base + mt->tensor;
        lowrank_fill_normal(self->q_host + mt->q_off,
                            mt->m * mt->r,
                            seed,
                            2 * t);
        lowrank_fill_normal(self->p_host + mt->p_off,
                            mt->n * mt->r,
                            seed,
                            2 * t + 1);
    }
    rumor_err rc = s_psgd_upload(self, false);
    if (rc == RUMOR_OK && self->opts.one_sided)
        rc = s_psgd_upload(self, true);
    return rc;
}

static bool
s_psgd_even(const rumor_lowrank_psgd *self)
{
    uint64_t done_steps = self->step - self->opts.start_iter;
    return (done_steps * self->opts.iters + self->iter) % 2 == 0;
}

/* One-sided iteration: orthogonalize one side, compute the other. */
static rumor_err
s_psgd_one_sided_product(rumor_lowrank_psgd *self,
                         bool fuse_grads,
                         struct rumor_lowrank_xchg *x)
{
    bool even = s_psgd_even(self);
    rumor_err rc = s_psgd_orth(self, even);
    if (rc == RUMOR_OK)
        rc = s_psgd_project(self, !even, fuse_grads);
    if (rc == RUMOR_OK)
        rc = s_psgd_download(self, !even);
    if (rc != RUMOR_OK)
        return rc;
    x->data = even ? self->q_host : self->p_host;
    x->floats = even ? self->q_floats : self->p_floats;
    x->average = true;
    self->phase = PSGD_ONE_SIDED;
    return RUMOR_OK;
}

/* --- PowerSGD: the step --------------------------------------------------- */

rumor_err
rumor_lowrank_psgd_begin(rumor_lowrank_psgd *self,
                         float *const *grads,
                         struct rumor_lowrank_xchg *x)
{
    memset(x, 0, sizeof *x);
    if (self->phase != PSGD_IDLE || !rumor_lowrank_psgd_active(self) ||
        (grads == NULL && self->nmats > 0))
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->nmats; i++)
        if (grads[self->mats[i].tensor] == NULL)
            return RUMOR_EINVAL;
    rumor_err rc = RUMOR_OK;
    if (!self->have_q || !self->opts.warm_start) {
        rc = s_psgd_randomize(self);
        if (rc != RUMOR_OK)
            return rc;
        self->have_q = true;
    }
    for (size_t i = 0; i < self->nmats; i++) {
        struct psgd_mat *mt = &self->mats[i];
        mt->grad = grads[mt->tensor];
        mt->mat = mt->e != NULL ? mt->e : mt->grad;
    }
    bool fuse = self->opts.error_feedback;
    if (self->opts.one_sided) {
        self->iter = 0;
        return s_psgd_one_sided_product(self, fuse, x);
    }
    rc = s_psgd_orth(self, false);
    if (rc == RUMOR_OK)
        rc = s_psgd_project_ef(self, fuse);
    if (rc == RUMOR_OK)
        rc = s_psgd_download(self, true);
    if (rc != RUMOR_OK)
        return rc;
    x->data = self->p_host;
    x->floats = self->p_floats;
    x->average = false;
    self->phase = PSGD_SUMMING_P;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_next(rumor_lowrank_psgd *self,
                        struct rumor_lowrank_xchg *x,
                        bool *done)
{
    memset(x, 0, sizeof *x);
    *done = false;
    rumor_err rc = RUMOR_OK;
    switch (self->phase) {
    case PSGD_SUMMING_P:
        rc = s_psgd_upload(self, true);
        if (rc == RUMOR_OK)
            rc = s_psgd_orth(self, true);
        if (rc == RUMOR_OK)
            rc = s_psgd_project(self, false, false);
        if (rc == RUMOR_OK)
            rc = s_psgd_download(self, false);
        if (rc != RUMOR_OK)
            return rc;
        x->data = self->q_host;
        x->floats = self->q_floats;
        x->average = true;
        self->phase = PSGD_AVERAGING_Q;
        return RUMOR_OK;
    case PSGD_AVERAGING_Q:
        rc = s_psgd_upload(self, false);
        if (rc != RUMOR_OK)
            return rc;
        self->phase = PSGD_DONE;
        *done = true;
        return RUMOR_OK;
    case PSGD_ONE_SIDED:
        rc = s_psgd_upload(self, !s_psgd_even(self));
        if (rc != RUMOR_OK)
            return rc;
        if (self->iter + 1 == self->opts.iters) {
            self->phase = PSGD_DONE;
            *done = true;
            return RUMOR_OK;
        }
        /* Local deflation: M -= P Q^T; the approximation accumulates in
         * the grads buffer (already consumed into M by the first pass). */
        rc = s_psgd_reconstruct(self, NULL, true, self->iter > 0 ? 1.0f : 0);
        if (rc != RUMOR_OK)
            return rc;
        self->iter++;
        return s_psgd_one_sided_product(self, false, x);
    default:
        return RUMOR_EINVAL;
    }
}

rumor_err
rumor_lowrank_psgd_end(rumor_lowrank_psgd *self, float *const *out)
{
    if (self->phase != PSGD_DONE || (out == NULL && self->nmats > 0))
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        float *o = out[mt->tensor];
        if (o == NULL || (self->opts.one_sided && o != mt->grad))
            return RUMOR_EINVAL;
    }
    float beta = self->opts.one_sided && self->iter > 0 ? 1.0f : 0.0f;
    /* With error feedback e = M - approx (now, or deferred into the next
     * step's first product); without it M is the caller's and only the
     * approximation is written. */
    bool defer = s_psgd_defers(self);
    rumor_err rc = s_psgd_reconstruct(self,
                                      out,
                                      self->opts.error_feedback && !defer,
                                      beta);
    if (rc == RUMOR_OK && defer)
        rc = s_psgd_defer(self);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < self->nmats; i++) {
        self->mats[i].grad = NULL;
        self->mats[i].mat = NULL;
    }
    self->phase = PSGD_IDLE;
    self->step++;
    if (!self->opts.warm_start)
        self->have_q = false;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_q_get(rumor_lowrank_psgd *self, float *q)
{
    if (!self->have_q || q == NULL)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        rumor_err rc = self->be.download(self->ctx,
                                         q + mt->q_off,
                                         mt->q,
                                         mt->m * mt->r * sizeof(float));
        if (rc != RUMOR_OK)
            return rc;
    }
    s_psgd_count(self, false, false);
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_q_set(rumor_lowrank_psgd *self, const float *q)
{
    if (q == NULL || self->phase != PSGD_IDLE)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->q_floats; i++)
        if (!isfinite(q[i]))
            return RUMOR_ENUMERIC;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        rumor_err rc = self->be.upload(self->ctx,
                                       mt->q,
                                       q + mt->q_off,
                                       mt->m * mt->r * sizeof(float));
        if (rc != RUMOR_OK)
            return rc;
    }
    s_psgd_count(self, false, true);
    self->have_q = true;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_q_slot(const rumor_lowrank_psgd *self,
                          size_t i,
                          size_t *offset,
                          size_t *rank)
{
    if (!rumor_lowrank_psgd_compressed(self, i) || offset == NULL ||
        rank == NULL)
        return RUMOR_EINVAL;
    const struct psgd_mat *mt = &self->mats[self->mat_of[i]];
    *offset = mt->q_off;
    *rank = mt->r;
    return RUMOR_OK;
}

size_t
rumor_lowrank_psgd_p_floats(const rumor_lowrank_psgd *self)
{
    return self->p_floats;
}

rumor_err
rumor_lowrank_psgd_p_get(rumor_lowrank_psgd *self, float *p)
{
    if (!self->have_q || p == NULL)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        rumor_err rc = self->be.download(self->ctx,
                                         p + mt->p_off,
                                         mt->p,
                                         mt->n * mt->r * sizeof(float));
        if (rc != RUMOR_OK)
            return rc;
    }
    s_psgd_count(self, true, false);
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_p_set(rumor_lowrank_psgd *self, const float *p)
{
    if (p == NULL || self->phase != PSGD_IDLE)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < self->p_floats; i++)
        if (!isfinite(p[i]))
            return RUMOR_ENUMERIC;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct psgd_mat *mt = &self->mats[i];
        rumor_err rc = self->be.upload(self->ctx,
                                       mt->p,
                                       p + mt->p_off,
                                       mt->n * mt->r * sizeof(float));
        if (rc != RUMOR_OK)
            return rc;
    }
    s_psgd_count(self, true, true);
    return RUMOR_OK;
}

/* The error memory of a matrix whose update is still deferred, on a
 * device backend: e - Pd Qd^T formed in device scratch by the backend's
 * own reconstruction (the operation the next step applies), then
 * downloaded; the compressor's state is left as it is. */
static rumor_err
s_psgd_error_pending(rumor_lowrank_psgd *self,
                     const struct psgd_mat *mt,
                     float *out)
{
    size_t bytes = mt->n * mt->m * sizeof(float);
    float *tmp = NULL;
    rumor_err rc = self->be.alloc(self->ctx, bytes, &tmp);
    if (rc == RUMOR_OK)
        rc = self->be.copy(self->ctx, tmp, mt->e, bytes);
    if (rc == RUMOR_OK)
        rc = self->be.reconstruct(self->ctx,
                                  mt->n,
                                  mt->m,
                                  mt->r,
                                  mt->pd,
                                  mt->qd,
                                  1.0f,
                                  tmp,
                                  NULL,
                                  0);
    if (rc == RUMOR_OK)
        rc = self->be.download(self->ctx, out, tmp, bytes);
    if (rc == RUMOR_OK)
        s_psgd_moved(self, bytes, false);
    self->be.release(self->ctx, tmp);
    return rc;
}

rumor_err
rumor_lowrank_psgd_error_get(rumor_lowrank_psgd *self, size_t i, float *out)
{
    if (!rumor_lowrank_psgd_compressed(self, i) || out == NULL)
        return RUMOR_EINVAL;
    const struct psgd_mat *mt = &self->mats[self->mat_of[i]];
    if (mt->e == NULL)
        return RUMOR_EINVAL;
    if (mt->deferred && !self->be.host_memory)
        return s_psgd_error_pending(self, mt, out);
    rumor_err rc =
        self->be.download(self->ctx, out, mt->e, mt->n * mt->m * sizeof(float));
    if (rc == RUMOR_OK)
        s_psgd_moved(self, mt->n * mt->m * sizeof(float), false);
    /* A deferred update: the same operation the next step would apply
     * (host-memory backend, so out is the backend's memory too). */
    if (rc == RUMOR_OK && mt->deferred)
        rc = self->be.reconstruct(self->ctx,
                                  mt->n,
                                  mt->m,
                                  mt->r,
                                  mt->pd,
                                  mt->qd,
                                  1.0f,
                                  out,
                                  NULL,
                                  0);
    return rc;
}

/* The deferred update formed in self->view (grown on need), as
 * s_psgd_error_pending forms it, without the download. */
static rumor_err
s_psgd_error_view(rumor_lowrank_psgd *self, const struct psgd_mat *mt)
{
    size_t bytes = mt->n * mt->m * sizeof(float);
    rumor_err rc = RUMOR_OK;
    if (self->view_bytes < bytes) {
        self->be.release(self->ctx, self->view);
        self->view = NULL;
        self->view_bytes = 0;
        rc = self->be.alloc(self->ctx, bytes, &self->view);
        if (rc == RUMOR_OK)
            self->view_bytes = bytes;
    }
    if (rc == RUMOR_OK)
        rc = self->be.copy(self->ctx, self->view, mt->e, bytes);
    if (rc == RUMOR_OK)
        rc = self->be.reconstruct(self->ctx,
                                  mt->n,
                                  mt->m,
                                  mt->r,
                                  mt->pd,
                                  mt->qd,
                                  1.0f,
                                  self->view,
                                  NULL,
                                  0);
    return rc;
}

rumor_err
rumor_lowrank_psgd_error_mem(rumor_lowrank_psgd *self,
                             size_t i,
                             const float **e)
{
    if (!rumor_lowrank_psgd_compressed(self, i) || e == NULL)
        return RUMOR_EINVAL;
    const struct psgd_mat *mt = &self->mats[self->mat_of[i]];
    if (mt->e == NULL)
        return RUMOR_EINVAL;
    *e = mt->e;
    if (!mt->deferred)
        return RUMOR_OK;
    rumor_err rc = s_psgd_error_view(self, mt);
    *e = self->view;
    return rc;
}

rumor_err
rumor_lowrank_psgd_error_set(rumor_lowrank_psgd *self,
                             size_t i,
                             const float *in)
{
    if (!rumor_lowrank_psgd_compressed(self, i) || in == NULL ||
        self->phase != PSGD_IDLE)
        return RUMOR_EINVAL;
    const struct psgd_mat *mt = &self->mats[self->mat_of[i]];
    if (mt->e == NULL)
        return RUMOR_EINVAL;
    for (size_t k = 0; k < mt->n * mt->m; k++)
        if (!isfinite(in[k]))
            return RUMOR_ENUMERIC;
    rumor_err rc =
        self->be.upload(self->ctx, mt->e, in, mt->n * mt->m * sizeof(float));
    if (rc == RUMOR_OK)
        s_psgd_moved(self, mt->n * mt->m * sizeof(float), true);
    if (rc == RUMOR_OK)
        self->mats[self->mat_of[i]].deferred = false;
    return rc;
}

rumor_err
rumor_lowrank_psgd_step_set(rumor_lowrank_psgd *self, uint64_t step)
{
    if (self->phase != PSGD_IDLE)
        return RUMOR_EINVAL;
    self->step = step;
    return RUMOR_OK;
}

/* --- PowerSGD: a snapshot in the backend's memory ------------------------ */

/* One buffer device to device (to the snapshot with take, else back),
 * allocating the snapshot's on first use; nothing where src has none. */
static rumor_err
s_psgd_snap_one(rumor_lowrank_psgd *self,
                float *live,
                float **shadow,
                size_t bytes,
                bool take)
{
    if (live == NULL)
        return RUMOR_OK;
    rumor_err rc = RUMOR_OK;
    if (*shadow == NULL)
        rc = self->be.alloc(self->ctx, bytes, shadow);
    if (rc != RUMOR_OK)
        return rc;
    return take ? self->be.copy(self->ctx, *shadow, live, bytes)
                : self->be.copy(self->ctx, live, *shadow, bytes);
}

/* Every device buffer of the state one way; no byte crosses PCIe. */
static rumor_err
s_psgd_snap_move(rumor_lowrank_psgd *self, bool take)
{
    struct psgd_snap *sn = &self->snap;
    size_t pb = (self->p_floats + 1) * sizeof(float);
    size_t qb = (self->q_floats + 1) * sizeof(float);
    rumor_err rc = s_psgd_snap_one(self, self->p_all, &sn->p_all, pb, take);
    if (rc == RUMOR_OK)
        rc = s_psgd_snap_one(self, self->q_all, &sn->q_all, qb, take);
    if (rc == RUMOR_OK)
        rc = s_psgd_snap_one(self, self->pd_all, &sn->pd_all, pb, take);
    if (rc == RUMOR_OK)
        rc = s_psgd_snap_one(self, self->qd_all, &sn->qd_all, qb, take);
    if (rc == RUMOR_OK)
        rc = s_psgd_snap_one(self,
                             self->errors,
                             &sn->errors,
                             s_psgd_errors_bytes(self),
                             take);
    return rc;
}

rumor_err
rumor_lowrank_psgd_snapshot(rumor_lowrank_psgd *self)
{
    struct psgd_snap *sn = &self->snap;
    if (self->phase != PSGD_IDLE || self->be.copy == NULL)
        return RUMOR_EINVAL;
    if (sn->deferred == NULL)
        sn->deferred = calloc(self->nmats + 1, sizeof *sn->deferred);
    if (sn->deferred == NULL)
        return RUMOR_ENOMEM;
    sn->taken = false;
    rumor_err rc = s_psgd_snap_move(self, true);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < self->nmats; i++)
        sn->deferred[i] = self->mats[i].deferred;
    sn->step = self->step;
    sn->have_q = self->have_q;
    sn->taken = true;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_psgd_snapshot_restore(rumor_lowrank_psgd *self)
{
    const struct psgd_snap *sn = &self->snap;
    if (!sn->taken)
        return RUMOR_EINVAL;
    rumor_err rc = s_psgd_snap_move(self, false);
    if (rc != RUMOR_OK)
        return rc;
    /* whatever phase a step left the compressor in, it is idle again */
    for (size_t i = 0; i < self->nmats; i++) {
        self->mats[i].deferred = sn->deferred[i];
        self->mats[i].grad = NULL;
        self->mats[i].mat = NULL;
    }
    self->step = sn->step;
    self->have_q = sn->have_q;
    self->phase = PSGD_IDLE;
    self->iter = 0;
    return RUMOR_OK;
}

/* Points the matrices at the state's buffers (after a swap). */
static void
s_psgd_rebind(rumor_lowrank_psgd *self)
{
    for (size_t i = 0; i < self->nmats; i++) {
        struct psgd_mat *mt = &self->mats[i];
        mt->e = self->errors + (mt->e - self->snap.errors);
        mt->p = self->p_all + mt->p_off;
        mt->q = self->q_all + mt->q_off;
        mt->pd = self->pd_all != NULL ? self->pd_all + mt->p_off : NULL;
        mt->qd = self->qd_all != NULL ? self->qd_all + mt->q_off : NULL;
    }
}

static void
s_swap_ptr(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

rumor_err
rumor_lowrank_psgd_snapshot_swap(rumor_lowrank_psgd *self)
{
    struct psgd_snap *sn = &self->snap;
    if (!sn->taken)
        return RUMOR_EINVAL;
    s_swap_ptr(&self->p_all, &sn->p_all);
    s_swap_ptr(&self->q_all, &sn->q_all);
    s_swap_ptr(&self->pd_all, &sn->pd_all);
    s_swap_ptr(&self->qd_all, &sn->qd_all);
    s_swap_ptr(&self->errors, &sn->errors);
    s_psgd_rebind(self);
    for (size_t i = 0; i < self->nmats; i++) {
        bool d = self->mats[i].deferred;
        self->mats[i].deferred = sn->deferred[i];
        sn->deferred[i] = d;
    }
    uint64_t step = self->step;
    self->step = sn->step;
    sn->step = step;
    bool have_q = self->have_q;
    self->have_q = sn->have_q;
    sn->have_q = have_q;
    return RUMOR_OK;
}
