/*
 * lowrank: the PowerGossip edge (Vogels et al., NeurIPS 2020;
 * epfml/powergossip algorithms.py, class PowerGossip): p and q per edge
 * and matrix, filled from a seed both ends derive from (run seed, min id,
 * max id). Iteration t alternates sides, starting from the factor
 * iteration t - 1 left (warm start) or from one drawn afresh from that
 * seed and t (the reference's warm_start=False); the exchanged products
 * become the product of x_hi - x_lo, and both ends apply the same rank-r
 * matrix with opposite signs, which preserves the network average
 * exactly.
 *
 * Every p of the edge lives in one allocation and every q in another, in
 * the message's layout, so a half-round moves its factors in one copy
 * each way. On a backend with the work-list slots (cuda; ranks up to
 * LOWRANK_LIST_MAX_RANK) a half-round is one launch per phase over every
 * matrix of the model (orthogonalization, product; the apply's
 * reconstruction), with no host synchronization but the message's copy;
 * elsewhere the matrices go one at a time.
 */
#include "rumor/lowrank.h"

#include "lowrank/backend.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct edge_mat {
    size_t tensor;  /* index in the model */
    size_t n, m, r; /* rows, cols, rank used */
    size_t p_off;   /* offset in a packed p message (floats) */
    size_t q_off;   /* offset in a packed q message (floats) */
    float *p;       /* device, n x r, in p_all */
    float *q;       /* device, m x r, in q_all */
    bool redraw;    /* the factor may have a zero column: s_edge_redraw */
};

struct rumor_lowrank_edge {
    struct rumor_lowrank_edge_opts opts;
    struct lowrank_backend_i be;
    void *ctx;
    rumor_device device;
    struct edge_mat *mats;
    size_t nmats;
    size_t p_floats, q_floats;
    float *p_all, *q_all; /* device: every p, every q */
    float *scaled;        /* device: the combined factor times the step */
    bool list;            /* the backend's work-list slots serve the edge */
    struct lowrank_orth_item *orth_items; /* the list calls' items */
    struct lowrank_mat_item *mat_items;
    float *host;  /* own products, max(p_floats, q_floats) */
    float *spare; /* host: the scaled factor on its way to the device */
    bool higher;  /* self_id > peer_id */
    bool pending; /* a product awaits _combine */
    bool ready;   /* combined, not yet applied */
    bool odd;     /* parity of the pending or last iteration */
};

/* True when a column of the n x r row-major factor f is exactly zero. */
static bool
s_zero_column(const float *f, size_t n, size_t r)
{
    for (size_t c = 0; c < r; c++) {
        bool zero = true;
        for (size_t k = 0; k < n && zero; k++)
            zero = f[k * r + c] == 0.0f;
        if (zero)
            return true;
    }
    return false;
}

/* A factor column that is exactly zero (the two models were equal in that
 * matrix, as every node's are at step 0 when they start from the same
 * seed) would stay zero for good: orthogonalizing it gives zero, so does
 * every later product, and the edge would never mix that matrix again.
 * Before iteration t orthogonalizes such a factor, its zero columns are
 * drawn afresh from the pair's seed and t; both ends hold the same factor
 * at the same t, so they draw the same columns. The product of this
 * iteration's apply is not touched: a zero difference still moves
 * nothing. Without warm start (all) every column is drawn so: t is the
 * edge's own iteration count, which both ends keep equal. */
static rumor_err
s_edge_redraw(rumor_lowrank_edge *self,
              struct edge_mat *mt,
              size_t i,
              uint64_t t,
              float *f,
              size_t rows)
{
    bool all = !self->opts.warm_start;
    size_t bytes = rows * mt->r * sizeof(float);
    rumor_err rc =
        all ? RUMOR_OK : self->be.download(self->ctx, self->host, f, bytes);
    uint64_t lo = self->higher ? self->opts.peer_id : self->opts.self_id;
    uint64_t hi = self->higher ? self->opts.self_id : self->opts.peer_id;
    uint64_t seed = rumor_seed_derive(self->opts.seed, lo, hi);
    for (size_t c = 0; c < mt->r && rc == RUMOR_OK; c++) {
        bool zero = true;
        for (size_t k = 0; k < rows && zero && !all; k++)
            zero = self->host[k * mt->r + c] == 0.0f;
        struct rumor_rng rng;
        rumor_rng_init(&rng, seed, (t << 24) | (i * mt->r + c));
        for (size_t k = 0; k < rows && zero; k++)
            self->host[k * mt->r + c] = (float)rumor_rng_normal(&rng);
    }
    if (rc == RUMOR_OK)
        rc = self->be.upload(self->ctx, f, self->host, bytes);
    mt->redraw = false;
    return rc;
}

void
rumor_lowrank_edge_opts_default(struct rumor_lowrank_edge_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->rank = 1;
    opts->eps = 1e-8f;
    opts->peer_id = 1;
    opts->warm_start = true;
}

/* The matrices of the model (1-D tensors are the caller's), their ranks
 * and offsets in the packed factors; whether the list slots serve them. */
static rumor_err
s_edge_layout(rumor_lowrank_edge *self,
              const struct rumor_lowrank_shape *shapes,
              size_t count)
{
    self->mats = calloc(count > 0 ? count : 1, sizeof *self->mats);
    self->orth_items = calloc(count > 0 ? count : 1, sizeof *self->orth_items);
    self->mat_items = calloc(count > 0 ? count : 1, sizeof *self->mat_items);
    if (self->mats == NULL || self->orth_items == NULL ||
        self->mat_items == NULL)
        return RUMOR_ENOMEM;
    bool fits = true;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        rumor_err rc = rumor_lowrank_matricize(&shapes[i], &n, &m);
        if (rc != RUMOR_OK)
            return rc;
        if (shapes[i].ndim < 2)
            continue;
        struct edge_mat *mt = &self->mats[self->nmats++];
        mt->tensor = i;
        mt->n = n;
        mt->m = m;
        mt->r = lowrank_rank_for(n, m, self->opts.rank);
        mt->p_off = self->p_floats;
        mt->q_off = self->q_floats;
        self->p_floats += n * mt->r;
        self->q_floats += m * mt->r;
        fits = fits && mt->r <= LOWRANK_LIST_MAX_RANK;
    }
    self->list = fits && self->be.orthogonalize_list != NULL &&
                 self->be.project_right_list != NULL &&
                 self->be.project_left_list != NULL &&
                 self->be.reconstruct_list != NULL;
    return RUMOR_OK;
}

/* p_all, q_all (and the apply's scratch on the list path) on the device,
 * the host buffers, and the factors drawn from the pair's seed. */
static rumor_err
s_edge_alloc(rumor_lowrank_edge *self)
{
    size_t most =
        self->p_floats > self->q_floats ? self->p_floats : self->q_floats;
    rumor_err rc = RUMOR_OK;
    if (most > 0) {
        rc = self->be.alloc(self->ctx,
                            self->p_floats * sizeof(float),
                            &self->p_all);
        if (rc == RUMOR_OK)
            rc = self->be.alloc(self->ctx,
                                self->q_floats * sizeof(float),
                                &self->q_all);
        if (rc == RUMOR_OK && self->list)
            rc = self->be.alloc(self->ctx, most * sizeof(float), &self->scaled);
        if (rc != RUMOR_OK)
            return rc;
    }
    self->host = malloc((most + 1) * sizeof(float));
    self->spare = malloc((most + 1) * sizeof(float));
    if (self->host == NULL || self->spare == NULL)
        return RUMOR_ENOMEM;
    /* Both ends derive the same seed: (run seed, min id, max id). */
    uint64_t lo = self->higher ? self->opts.peer_id : self->opts.self_id;
    uint64_t hi = self->higher ? self->opts.self_id : self->opts.peer_id;
    uint64_t seed = rumor_seed_derive(self->opts.seed, lo, hi);
    for (size_t i = 0; i < self->nmats; i++) {
        struct edge_mat *mt = &self->mats[i];
        mt->p = self->p_all + mt->p_off;
        mt->q = self->q_all + mt->q_off;
        lowrank_fill_normal(self->spare + mt->p_off,
                            mt->n * mt->r,
                            seed,
                            2 * mt->tensor);
        lowrank_fill_normal(self->host + mt->q_off,
                            mt->m * mt->r,
                            seed,
                            2 * mt->tensor + 1);
    }
    if (most == 0)
        return RUMOR_OK;
    rc = self->be.upload(self->ctx,
                         self->p_all,
                         self->spare,
                         self->p_floats * sizeof(float));
    return rc != RUMOR_OK ? rc
                          : self->be.upload(self->ctx,
                                            self->q_all,
                                            self->host,
                                            self->q_floats * sizeof(float));
}

rumor_err
lowrank_edge_new_on(rumor_lowrank_edge **out,
                    const struct rumor_lowrank_shape *shapes,
                    size_t count,
                    const struct rumor_lowrank_edge_opts *opts,
                    const struct lowrank_backend_i *iface,
                    void *ctx)
{
    *out = NULL;
    rumor_lowrank_edge *self = calloc(1, sizeof *self);
    if (self == NULL) {
        if (iface->free != NULL)
            iface->free(ctx);
        return RUMOR_ENOMEM;
    }
    self->be = *iface;
    self->ctx = ctx;
    self->opts = *opts;
    self->higher = opts->self_id > opts->peer_id;
    rumor_err rc = s_edge_layout(self, shapes, count);
    if (rc == RUMOR_OK)
        rc = s_edge_alloc(self);
    if (rc != RUMOR_OK) {
        rumor_lowrank_edge_destroy(&self);
        return rc;
    }
    *out = self;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_edge_new(rumor_lowrank_edge **out,
                       const struct rumor_lowrank_shape *shapes,
                       size_t count,
                       const struct rumor_lowrank_edge_opts *opts)
{
    *out = NULL;
    if ((shapes == NULL && count > 0) || count > RUMOR_LOWRANK_MAX_TENSORS ||
        opts == NULL || opts->rank == 0 ||
        opts->rank > RUMOR_LOWRANK_MAX_RANK || !(opts->eps >= 0) ||
        opts->self_id == opts->peer_id)
        return RUMOR_EINVAL;
    struct lowrank_backend_i be;
    void *ctx = NULL;
    rumor_device device = RUMOR_DEVICE_CPU;
    rumor_err rc = lowrank_backend_open(opts->want_cuda, &be, &ctx, &device);
    if (rc != RUMOR_OK)
        return rc;
    rc = lowrank_edge_new_on(out, shapes, count, opts, &be, ctx);
    if (rc == RUMOR_OK)
        (*out)->device = device;
    return rc;
}

void
rumor_lowrank_edge_destroy(rumor_lowrank_edge **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_lowrank_edge *self = *self_p;
    self->be.release(self->ctx, self->p_all);
    self->be.release(self->ctx, self->q_all);
    self->be.release(self->ctx, self->scaled);
    if (self->be.free != NULL)
        self->be.free(self->ctx);
    free(self->mats);
    free(self->orth_items);
    free(self->mat_items);
    free(self->host);
    free(self->spare);
    free(self);
    *self_p = NULL;
}

rumor_device
rumor_lowrank_edge_device(const rumor_lowrank_edge *self)
{
    return self->device;
}

size_t
rumor_lowrank_edge_msg_floats(const rumor_lowrank_edge *self, uint64_t t)
{
    return t % 2 == 0 ? self->q_floats : self->p_floats;
}

/* Every matrix's item of a product or reconstruction list: M (params),
 * its p and q, and out (the reconstruction's, else NULL). */
static rumor_err
s_edge_items(rumor_lowrank_edge *self,
             float *const *params,
             const float *p_all,
             const float *q_all,
             bool recon)
{
    for (size_t i = 0; i < self->nmats; i++) {
        const struct edge_mat *mt = &self->mats[i];
        float *mat = params[mt->tensor];
        if (mat == NULL)
            return RUMOR_EINVAL;
        self->mat_items[i] = (struct lowrank_mat_item){
            .mat = mat,
            .p = (float *)(p_all + mt->p_off),
            .q = (float *)(q_all + mt->q_off),
            .out = recon ? mat : NULL,
            .n = mt->n,
            .m = mt->m,
            .r = mt->r,
        };
    }
    return RUMOR_OK;
}

/* Even t: orthogonalize p, q = M^T p; odd t: orthogonalize q, p = M q;
 * every matrix in one launch per phase. */
static rumor_err
s_edge_product_list(rumor_lowrank_edge *self, float *const *params, bool odd)
{
    for (size_t i = 0; i < self->nmats; i++) {
        const struct edge_mat *mt = &self->mats[i];
        self->orth_items[i] = (struct lowrank_orth_item){odd ? mt->q : mt->p,
                                                         odd ? mt->m : mt->n,
                                                         mt->r};
    }
    rumor_err rc = s_edge_items(self, params, self->p_all, self->q_all, false);
    if (rc == RUMOR_OK)
        rc = self->be.orthogonalize_list(self->ctx,
                                         self->orth_items,
                                         self->nmats,
                                         RUMOR_LOWRANK_ORTH_GS,
                                         self->opts.eps);
    if (rc != RUMOR_OK)
        return rc;
    return odd ? self->be.project_right_list(self->ctx,
                                             self->mat_items,
                                             self->nmats)
               : self->be.project_left_list(self->ctx,
                                            self->mat_items,
                                            self->nmats);
}

/* The same, one matrix at a time. */
static rumor_err
s_edge_product_each(rumor_lowrank_edge *self, float *const *params, bool odd)
{
    for (size_t i = 0; i < self->nmats; i++) {
        struct edge_mat *mt = &self->mats[i];
        float *mat = params[mt->tensor];
        if (mat == NULL)
            return RUMOR_EINVAL;
        rumor_err rc = self->be.orthogonalize(self->ctx,
                                              odd ? mt->q : mt->p,
                                              odd ? mt->m : mt->n,
                                              mt->r,
                                              RUMOR_LOWRANK_ORTH_GS,
                                              self->opts.eps);
        if (rc == RUMOR_OK)
            rc = odd ? self->be.project_right(self->ctx,
                                              mat,
                                              NULL,
                                              mt->n,
                                              mt->m,
                                              mt->q,
                                              mt->r,
                                              mt->p)
                     : self->be.project_left(self->ctx,
                                             mat,
                                             NULL,
                                             mt->n,
                                             mt->m,
                                             mt->p,
                                             mt->r,
                                             mt->q);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_edge_product(rumor_lowrank_edge *self,
                           float *const *params,
                           uint64_t t,
                           float *msg)
{
    if (t == 0 || msg == NULL || (params == NULL && self->nmats > 0))
        return RUMOR_EINVAL;
    bool odd = t % 2 == 1;
    for (size_t i = 0; i < self->nmats; i++) {
        struct edge_mat *mt = &self->mats[i];
        if (!mt->redraw && self->opts.warm_start)
            continue;
        rumor_err rc = odd ? s_edge_redraw(self, mt, i, t, mt->q, mt->m)
                           : s_edge_redraw(self, mt, i, t, mt->p, mt->n);
        if (rc != RUMOR_OK)
            return rc;
    }
    rumor_err rc = self->list ? s_edge_product_list(self, params, odd)
                              : s_edge_product_each(self, params, odd);
    size_t floats = rumor_lowrank_edge_msg_floats(self, t);
    if (rc == RUMOR_OK && floats > 0)
        rc = self->be.download(self->ctx,
                               msg,
                               odd ? self->p_all : self->q_all,
                               floats * sizeof(float));
    if (rc != RUMOR_OK)
        return rc;
    if (floats > 0)
        memcpy(self->host, msg, floats * sizeof(float));
    self->odd = odd;
    self->pending = true;
    return RUMOR_OK;
}

rumor_err
rumor_lowrank_edge_combine(rumor_lowrank_edge *self, const float *msg)
{
    if (!self->pending || msg == NULL)
        return RUMOR_EINVAL;
    size_t floats = self->odd ? self->p_floats : self->q_floats;
    for (size_t i = 0; i < floats; i++)
        if (!isfinite(msg[i]))
            return RUMOR_ENUMERIC;
    /* Oriented from the higher id to the lower: (x_hi - x_lo) times the
     * orthogonalized factor, identical at both ends. */
    for (size_t i = 0; i < floats; i++)
        self->host[i] =
            self->higher ? self->host[i] - msg[i] : msg[i] - self->host[i];
    for (size_t i = 0; i < self->nmats; i++) {
        struct edge_mat *mt = &self->mats[i];
        mt->redraw = self->odd
                         ? s_zero_column(self->host + mt->p_off, mt->n, mt->r)
                         : s_zero_column(self->host + mt->q_off, mt->m, mt->r);
    }
    if (floats > 0) {
        rumor_err rc = self->be.upload(self->ctx,
                                       self->odd ? self->p_all : self->q_all,
                                       self->host,
                                       floats * sizeof(float));
        if (rc != RUMOR_OK)
            return rc;
    }
    self->pending = false;
    self->ready = true;
    return RUMOR_OK;
}

/* params = beta params + alpha p q^T (beta 0 or 1; 0 never reads params)
 * in one launch: the list's reconstruction has no alpha, so the factor
 * just combined (still in host) goes up scaled. */
static rumor_err
s_edge_apply_list(rumor_lowrank_edge *self,
                  float *const *params,
                  float alpha,
                  float beta)
{
    size_t floats = self->odd ? self->p_floats : self->q_floats;
    for (size_t i = 0; i < floats; i++)
        self->spare[i] = alpha * self->host[i];
    rumor_err rc = floats == 0 ? RUMOR_OK
                               : self->be.upload(self->ctx,
                                                 self->scaled,
                                                 self->spare,
                                                 floats * sizeof(float));
    if (rc == RUMOR_OK)
        rc = s_edge_items(self,
                          params,
                          self->odd ? self->scaled : self->p_all,
                          self->odd ? self->q_all : self->scaled,
                          true);
    return rc != RUMOR_OK ? rc
                          : self->be.reconstruct_list(self->ctx,
                                                      self->mat_items,
                                                      self->nmats,
                                                      false,
                                                      beta);
}

static rumor_err
s_edge_apply_each(rumor_lowrank_edge *self,
                  float *const *params,
                  float alpha,
                  float beta)
{
    for (size_t i = 0; i < self->nmats; i++) {
        const struct edge_mat *mt = &self->mats[i];
        float *mat = params[mt->tensor];
        if (mat == NULL)
            return RUMOR_EINVAL;
        rumor_err rc = self->be.reconstruct(self->ctx,
                                            mt->n,
                                            mt->m,
                                            mt->r,
                                            mt->p,
                                            mt->q,
                                            alpha,
                                            NULL,
                                            mat,
                                            beta);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

static rumor_err
s_edge_reconstruct(rumor_lowrank_edge *self,
                   float *const *params,
                   float step,
                   float beta)
{
    if (!self->ready || (params == NULL && self->nmats > 0) || !isfinite(step))
        return RUMOR_EINVAL;
    float alpha = self->higher ? -step : step;
    rumor_err rc = self->list ? s_edge_apply_list(self, params, alpha, beta)
                              : s_edge_apply_each(self, params, alpha, beta);
    if (rc == RUMOR_OK)
        self->ready = false;
    return rc;
}

rumor_err
rumor_lowrank_edge_apply(rumor_lowrank_edge *self,
                         float *const *params,
                         float step)
{
    return s_edge_reconstruct(self, params, step, 1.0f);
}

rumor_err
rumor_lowrank_edge_write(rumor_lowrank_edge *self,
                         float *const *params,
                         float step)
{
    return s_edge_reconstruct(self, params, step, 0.0f);
}

rumor_err
rumor_lowrank_edge_close(rumor_lowrank_edge *self)
{
    if (!self->ready)
        return RUMOR_EINVAL;
    self->ready = false;
    return RUMOR_OK;
}

static const struct edge_mat *
s_edge_mat_of(const rumor_lowrank_edge *self, size_t tensor)
{
    for (size_t i = 0; i < self->nmats; i++)
        if (self->mats[i].tensor == tensor)
            return &self->mats[i];
    return NULL;
}

static rumor_err
s_edge_rows_at(rumor_lowrank_edge *self,
               const float *factors,
               const struct edge_mat *mt,
               size_t row,
               size_t rows,
               float *out)
{
    return self->be.reconstruct(self->ctx,
                                rows,
                                mt->m,
                                mt->r,
                                factors + mt->p_off + row * mt->r,
                                factors + self->p_floats + mt->q_off,
                                self->higher ? -1.0f : 1.0f,
                                NULL,
                                out,
                                0.0f);
}

rumor_err
rumor_lowrank_edge_rows(rumor_lowrank_edge *self,
                        const float *factors,
                        size_t tensor,
                        size_t row,
                        size_t rows,
                        float *out)
{
    const struct edge_mat *mt = s_edge_mat_of(self, tensor);
    if (!self->be.host_memory)
        return RUMOR_ENOTSUP;
    if (mt == NULL || factors == NULL || row > mt->n || rows > mt->n - row)
        return RUMOR_EINVAL;
    if (rows == 0)
        return RUMOR_OK;
    /* The cpu kernel forms rows in pairs (0, 1), (2, 3), ... and an odd
     * last row with other roundings (lowrank/cpu.c, s_recon_avx2), so a
     * window is widened to whole pairs to get _write's bits. */
    size_t lo = row - row % 2, hi = row + rows;
    if (hi % 2 == 1 && hi < mt->n)
        hi++;
    if (lo == row && hi == row + rows)
        return s_edge_rows_at(self, factors, mt, row, rows, out);
    float *wide = malloc((hi - lo) * mt->m * sizeof *wide);
    if (wide == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = s_edge_rows_at(self, factors, mt, lo, hi - lo, wide);
    if (rc == RUMOR_OK)
        memcpy(out, wide + (row - lo) * mt->m, rows * mt->m * sizeof *out);
    free(wide);
    return rc;
}

/* Column k of a (rows x r, row-major) dotted with its column l, in
 * double. */
static double
s_col_dot(const float *a, size_t rows, size_t r, size_t k, size_t l)
{
    double d = 0;
    for (size_t i = 0; i < rows; i++)
        d += (double)a[i * r + k] * a[i * r + l];
    return d;
}

/* sum_k max_i |a_ik| max_j |b_jk|: no element of a b^T is larger. */
static double
s_product_bound(const float *a, size_t n, const float *b, size_t m, size_t r)
{
    double bound = 0;
    for (size_t k = 0; k < r; k++) {
        double ma = 0, mb = 0;
        for (size_t i = 0; i < n; i++)
            ma = fmax(ma, fabs((double)a[i * r + k]));
        for (size_t j = 0; j < m; j++)
            mb = fmax(mb, fabs((double)b[j * r + k]));
        bound += ma * mb;
    }
    return bound;
}

double
rumor_lowrank_edge_sq_norm(const rumor_lowrank_edge *self, const float *factors)
{
    double sq = 0;
    for (size_t i = 0; i < self->nmats; i++) {
        const struct edge_mat *mt = &self->mats[i];
        const float *p = factors + mt->p_off;
        const float *q = factors + self->p_floats + mt->q_off;
        /* half of float's range: the float products and their sums
         * round up by far less */
        if (s_product_bound(p, mt->n, q, mt->m, mt->r) > 0.5 * FLT_MAX)
            return INFINITY;
        /* |p q^T|^2 = trace(P^T P Q^T Q), both Gram matrices symmetric */
        for (size_t k = 0; k < mt->r; k++)
            for (size_t l = k; l < mt->r; l++)
                sq += (k == l ? 1.0 : 2.0) * s_col_dot(p, mt->n, mt->r, k, l) *
                      s_col_dot(q, mt->m, mt->r, k, l);
    }
    return sq > 0 ? sq : 0; /* rounding may leave a zero product below 0 */
}

size_t
rumor_lowrank_edge_state_floats(const rumor_lowrank_edge *self)
{
    return self->p_floats + self->q_floats;
}

rumor_err
rumor_lowrank_edge_state_get(const rumor_lowrank_edge *self, float *out)
{
    if (self->pending || self->ready || out == NULL)
        return RUMOR_EINVAL;
    if (self->p_floats == 0)
        return RUMOR_OK;
    rumor_err rc = self->be.download(self->ctx,
                                     out,
                                     self->p_all,
                                     self->p_floats * sizeof(float));
    return rc != RUMOR_OK ? rc
                          : self->be.download(self->ctx,
                                              out + self->p_floats,
                                              self->q_all,
                                              self->q_floats * sizeof(float));
}

rumor_err
rumor_lowrank_edge_state_set(rumor_lowrank_edge *self, const float *in)
{
    if (self->pending || self->ready || in == NULL)
        return RUMOR_EINVAL;
    size_t total = self->p_floats + self->q_floats;
    for (size_t i = 0; i < total; i++)
        if (!isfinite(in[i]))
            return RUMOR_ENUMERIC;
    for (size_t i = 0; i < self->nmats; i++) {
        struct edge_mat *mt = &self->mats[i];
        mt->redraw =
            s_zero_column(in + mt->p_off, mt->n, mt->r) ||
            s_zero_column(in + self->p_floats + mt->q_off, mt->m, mt->r);
    }
    if (self->p_floats == 0)
        return RUMOR_OK;
    rumor_err rc = self->be.upload(self->ctx,
                                   self->p_all,
                                   in,
                                   self->p_floats * sizeof(float));
    return rc != RUMOR_OK ? rc
                          : self->be.upload(self->ctx,
                                            self->q_all,
                                            in + self->p_floats,
                                            self->q_floats * sizeof(float));
}
