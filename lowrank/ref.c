/*
 * Plain-C reference kernels and the "ref" backend: the test oracle for the
 * cpu and cuda backends (R7.4, the ggml `_ref` idea). Every product is a
 * straightforward loop accumulating in double, so its own rounding error
 * is far below float's and a test can attribute any difference to the
 * backend under test. Gram-Schmidt follows the PyTorch hook's
 * _orthogonalize_gram_schmidt column by column (normalize, then remove the
 * column from every later one); the QR is unblocked Householder with
 * LAPACK's sign convention (slarfg: beta = -sign(alpha) |x|), so its Q
 * equals sgeqrf + sorgqr's up to rounding, columns included.
 * Speed is not a goal here.
 */
#include "lowrank/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- kernels -------------------------------------------------------------- */

void
lowrank_ref_project_right(float *mat,
                          const float *add,
                          size_t n,
                          size_t m,
                          const float *q,
                          size_t r,
                          float *p)
{
    for (size_t i = 0; i < n; i++) {
        float *row = mat + i * m;
        if (add != NULL)
            for (size_t j = 0; j < m; j++)
                row[j] += add[i * m + j];
        for (size_t k = 0; k < r; k++) {
            double s = 0;
            for (size_t j = 0; j < m; j++)
                s += (double)row[j] * q[j * r + k];
            p[i * r + k] = (float)s;
        }
    }
}

void
lowrank_ref_project_left(float *mat,
                         const float *add,
                         size_t n,
                         size_t m,
                         const float *p,
                         size_t r,
                         float *q)
{
    if (add != NULL)
        for (size_t i = 0; i < n * m; i++)
            mat[i] += add[i];
    for (size_t j = 0; j < m; j++)
        for (size_t k = 0; k < r; k++) {
            double s = 0;
            for (size_t i = 0; i < n; i++)
                s += (double)mat[i * m + j] * p[i * r + k];
            q[j * r + k] = (float)s;
        }
}

void
lowrank_ref_gram_schmidt(float *p, size_t n, size_t r, float eps)
{
    for (size_t c = 0; c < r; c++) {
        double ss = 0;
        for (size_t i = 0; i < n; i++)
            ss += (double)p[i * r + c] * p[i * r + c];
        float norm = (float)sqrt(ss);
        float div = norm + eps;
        /* A zero column stays zero rather than becoming 0/0 = NaN. */
        if (div > 0)
            for (size_t i = 0; i < n; i++)
                p[i * r + c] /= div;
        for (size_t d = c + 1; d < r; d++) {
            double dot = 0;
            for (size_t i = 0; i < n; i++)
                dot += (double)p[i * r + c] * p[i * r + d];
            for (size_t i = 0; i < n; i++)
                p[i * r + d] -= (float)dot * p[i * r + c];
        }
    }
}

rumor_err
lowrank_ref_householder(float *p, size_t n, size_t r)
{
    double *a = calloc(n * r, sizeof *a); /* column-major n x r */
    double *tau = calloc(r, sizeof *tau);
    double *qm = calloc(n * r, sizeof *qm);
    rumor_err rc = RUMOR_OK;
    if (a == NULL || tau == NULL || qm == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r; k++)
            a[k * n + i] = p[i * r + k];
    for (size_t k = 0; k < r; k++) {
        double *col = a + k * n;
        double xnorm = 0;
        for (size_t i = k + 1; i < n; i++)
            xnorm += col[i] * col[i];
        xnorm = sqrt(xnorm);
        if (xnorm == 0) {
            tau[k] = 0; /* H = I, as slarfg */
            continue;
        }
        double alpha = col[k];
        double beta = -copysign(sqrt(alpha * alpha + xnorm * xnorm), alpha);
        tau[k] = (beta - alpha) / beta;
        double scale = 1.0 / (alpha - beta);
        for (size_t i = k + 1; i < n; i++)
            col[i] *= scale;
        col[k] = beta;
        /* Apply H = I - tau v v^T (v = [1, col[k+1..]]) to later columns. */
        for (size_t c = k + 1; c < r; c++) {
            double *x = a + c * n;
            double w = x[k];
            for (size_t i = k + 1; i < n; i++)
                w += col[i] * x[i];
            w *= tau[k];
            x[k] -= w;
            for (size_t i = k + 1; i < n; i++)
                x[i] -= w * col[i];
        }
    }
    /* Q = H_0 H_1 ... H_{r-1} applied to the first r columns of I. */
    for (size_t k = 0; k < r; k++)
        qm[k * n + k] = 1;
    for (size_t kk = r; kk-- > 0;) {
        const double *v = a + kk * n;
        for (size_t c = 0; c < r; c++) {
            double *x = qm + c * n;
            double w = x[kk];
            for (size_t i = kk + 1; i < n; i++)
                w += v[i] * x[i];
            w *= tau[kk];
            x[kk] -= w;
            for (size_t i = kk + 1; i < n; i++)
                x[i] -= w * v[i];
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r; k++)
            p[i * r + k] = (float)qm[k * n + i];
done:
    free(a);
    free(tau);
    free(qm);
    return rc;
}

void
lowrank_ref_reconstruct(size_t n,
                        size_t m,
                        size_t r,
                        const float *p,
                        const float *q,
                        float alpha,
                        float *e,
                        float *out,
                        float beta)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) {
            double s = 0;
            for (size_t k = 0; k < r; k++)
                s += (double)p[i * r + k] * q[j * r + k];
            float y = alpha * (float)s;
            if (e != NULL)
                e[i * m + j] -= y;
            if (out != NULL)
                out[i * m + j] = (beta != 0 ? out[i * m + j] : 0.0f) + y;
        }
}

/* --- the list kernels' twins (cuda.cu) ------------------------------------
 * Each performs one block of its kernel as a loop: thread t of a block
 * owns rows t, t + LOWRANK_LIST_THREADS, ... (orthogonalization) or lane
 * l of a warp the columns l, l + LOWRANK_WARP, ... of a row (right
 * product); products are explicit fmaf / fma as in the kernels, so
 * neither compiler contracts them differently. */

/* The plan's tiles: right products a warp per row, reconstructions a
 * fixed run of elements, left products a warp-wide column strip cut into
 * row chunks (see backend.h). */
static size_t
s_emit(struct lowrank_tile *tiles, size_t at, struct lowrank_tile t)
{
    if (tiles != NULL)
        tiles[at] = t;
    return at + 1;
}

size_t
lowrank_tiles_plan(enum lowrank_phase phase,
                   const struct lowrank_mat_item *items,
                   size_t count,
                   struct lowrank_tile *tiles,
                   size_t *strips,
                   size_t *scratch)
{
    size_t nt = 0, ns = 0, floats = 0;
    for (size_t i = 0; i < count; i++) {
        const struct lowrank_mat_item *it = &items[i];
        struct lowrank_tile t = {.item = (uint32_t)i, .parts = 1};
        if (phase == LOWRANK_PHASE_RIGHT) {
            for (size_t lo = 0; lo < it->n; lo += LOWRANK_RIGHT_ROWS) {
                t.lo = lo;
                t.hi = it->n - lo < LOWRANK_RIGHT_ROWS
                           ? it->n
                           : lo + LOWRANK_RIGHT_ROWS;
                nt = s_emit(tiles, nt, t);
            }
            continue;
        }
        if (phase == LOWRANK_PHASE_RECON) {
            size_t all = it->n * it->m;
            for (size_t lo = 0; lo < all; lo += LOWRANK_RECON_ELEMS) {
                t.lo = lo;
                t.hi = all - lo < LOWRANK_RECON_ELEMS
                           ? all
                           : lo + LOWRANK_RECON_ELEMS;
                nt = s_emit(tiles, nt, t);
            }
            continue;
        }
        size_t parts = (it->n + LOWRANK_LEFT_ROWS - 1) / LOWRANK_LEFT_ROWS;
        for (size_t col = 0; col < it->m; col += LOWRANK_WARP) {
            t.strip = (uint32_t)ns++;
            t.parts = (uint32_t)parts;
            t.col = col;
            t.partial = floats;
            for (size_t part = 0; part < parts; part++) {
                t.part = (uint32_t)part;
                t.lo = part * LOWRANK_LEFT_ROWS;
                t.hi = it->n - t.lo < LOWRANK_LEFT_ROWS
                           ? it->n
                           : t.lo + LOWRANK_LEFT_ROWS;
                nt = s_emit(tiles, nt, t);
            }
            if (parts > 1)
                floats += parts * LOWRANK_WARP * it->r;
        }
    }
    *strips = ns;
    *scratch = floats;
    return nt;
}

/* The kernels' block reduction (d_block_sums) of v values per thread in
 * part (LOWRANK_LIST_THREADS x v, consumed): a shuffle-down tree in each
 * warp, then the warps' sums added in warp order. */
static void
s_block_sums(double *part, size_t v, double *out)
{
    for (size_t w = 0; w < LOWRANK_LIST_WARPS; w++) {
        double *lanes = part + w * LOWRANK_WARP * v;
        for (size_t off = LOWRANK_WARP / 2; off > 0; off >>= 1)
            for (size_t l = 0; l < off; l++)
                for (size_t k = 0; k < v; k++)
                    lanes[l * v + k] += lanes[(l + off) * v + k];
    }
    for (size_t k = 0; k < v; k++) {
        double s = part[k];
        for (size_t w = 1; w < LOWRANK_LIST_WARPS; w++)
            s += part[w * LOWRANK_WARP * v + k];
        out[k] = s;
    }
}

/* Thread t's sums over its rows i > skip of column c's products with the
 * columns c0 .. c0 + v - 1 (column c with itself: the squared norm). */
static void
s_thread_dots(const float *p,
              size_t n,
              size_t r,
              size_t skip,
              size_t c,
              size_t c0,
              size_t v,
              double *part)
{
    for (size_t t = 0; t < LOWRANK_LIST_THREADS; t++) {
        double *acc = part + t * v;
        for (size_t k = 0; k < v; k++)
            acc[k] = 0;
        for (size_t i = t; i < n; i += LOWRANK_LIST_THREADS) {
            if (skip != SIZE_MAX && i <= skip)
                continue;
            double x = p[i * r + c];
            for (size_t k = 0; k < v; k++)
                acc[k] = fma(x, (double)p[i * r + c0 + k], acc[k]);
        }
    }
}

/* k_orth_list's Gram-Schmidt: the ref's column order, each column's dots
 * with the later ones in one reduction. */
static void
s_twin_gram_schmidt(float *p, size_t n, size_t r, float eps)
{
    double part[LOWRANK_LIST_THREADS * LOWRANK_LIST_MAX_RANK];
    double sums[LOWRANK_LIST_MAX_RANK];
    for (size_t c = 0; c < r; c++) {
        s_thread_dots(p, n, r, SIZE_MAX, c, c, 1, part);
        s_block_sums(part, 1, sums);
        float div = (float)sqrt(sums[0]) + eps;
        if (div > 0) /* a zero column stays zero */
            for (size_t i = 0; i < n; i++)
                p[i * r + c] /= div;
        size_t v = r - c - 1;
        if (v == 0)
            continue;
        s_thread_dots(p, n, r, SIZE_MAX, c, c + 1, v, part);
        s_block_sums(part, v, sums);
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < v; k++)
                p[i * r + c + 1 + k] =
                    fmaf(-(float)sums[k], p[i * r + c], p[i * r + c + 1 + k]);
    }
}

/* Step k of k_orth_list's Householder factorization (LAPACK's slarfg
 * convention, beta = -sign(alpha) |x|): the reflector's scalars from the
 * reduced sums (sums[0] = |x below the diagonal|^2, sums[1..] the raw
 * dots with the later columns), as the block's thread 0 computes them. */
static void
s_reflector(const float *a,
            size_t r,
            size_t k,
            const double *sums,
            double *tau,
            double *beta,
            double *scale,
            double *w)
{
    double alpha = a[k * r + k];
    if (sums[0] == 0) { /* H = I, as slarfg */
        *tau = 0;
        *beta = alpha;
        *scale = 0;
        for (size_t c = k + 1; c < r; c++)
            w[c] = 0;
        return;
    }
    *beta = -copysign(sqrt(fma(alpha, alpha, sums[0])), alpha);
    *tau = (*beta - alpha) / *beta;
    *scale = 1.0 / (alpha - *beta);
    for (size_t c = k + 1; c < r; c++)
        w[c] = *tau * fma(*scale, sums[c - k], (double)a[k * r + c]);
}

/* k_orth_list's Householder QR in place (row-major a, n x r, r <= n):
 * unblocked geqr2, then org2r's in-place backward accumulation of Q;
 * positive: columns flipped to R's positive diagonal (CHOLQR2's Q). */
static void
s_twin_householder(float *a, size_t n, size_t r, bool positive)
{
    double part[LOWRANK_LIST_THREADS * LOWRANK_LIST_MAX_RANK];
    double sums[LOWRANK_LIST_MAX_RANK];
    double tau[LOWRANK_LIST_MAX_RANK], w[LOWRANK_LIST_MAX_RANK];
    bool flip[LOWRANK_LIST_MAX_RANK];
    for (size_t k = 0; k < r; k++) {
        double beta = 0, scale = 0;
        s_thread_dots(a, n, r, k, k, k, r - k, part);
        s_block_sums(part, r - k, sums);
        s_reflector(a, r, k, sums, &tau[k], &beta, &scale, w);
        flip[k] = positive && beta < 0;
        if (tau[k] == 0)
            continue;
        for (size_t c = k + 1; c < r; c++)
            a[k * r + c] = (float)((double)a[k * r + c] - w[c]);
        a[k * r + k] = (float)beta;
        for (size_t i = k + 1; i < n; i++) {
            double v = (double)a[i * r + k] * scale;
            for (size_t c = k + 1; c < r; c++)
                a[i * r + c] = (float)fma(-w[c], v, (double)a[i * r + c]);
            a[i * r + k] = (float)v;
        }
    }
    for (size_t k = r; k-- > 0;) {
        size_t v = r - 1 - k;
        if (v > 0) {
            s_thread_dots(a, n, r, k, k, k + 1, v, part);
            s_block_sums(part, v, sums);
            for (size_t c = k + 1; c < r; c++) /* v_k = 1 */
                w[c] = tau[k] * ((double)a[k * r + c] + sums[c - k - 1]);
        }
        for (size_t i = 0; i < k; i++)
            a[i * r + k] = 0;
        for (size_t c = k + 1; c < r; c++)
            a[k * r + c] = (float)((double)a[k * r + c] - w[c]);
        a[k * r + k] = (float)(1.0 - tau[k]);
        for (size_t i = k + 1; i < n; i++) {
            double vi = a[i * r + k];
            for (size_t c = k + 1; c < r; c++)
                a[i * r + c] = (float)fma(-w[c], vi, (double)a[i * r + c]);
            a[i * r + k] = (float)(-tau[k] * vi);
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < r; c++)
            if (flip[c])
                a[i * r + c] = -a[i * r + c];
}

/* k_orth_list's Cholesky test (the block's thread 0) on the upper
 * triangle of g = P^T P (r x r, row-major, overwritten by R): a pivot
 * that is not above zero fails, as spotrf's test. */
static bool
s_twin_cholesky(double *g, size_t r)
{
    for (size_t k = 0; k < r; k++) {
        double d = g[k * r + k];
        for (size_t i = 0; i < k; i++)
            d = d - g[i * r + k] * g[i * r + k];
        if (!(d > 0))
            return false;
        double rkk = sqrt(d);
        g[k * r + k] = rkk;
        for (size_t j = k + 1; j < r; j++) {
            double v = g[k * r + j];
            for (size_t i = 0; i < k; i++)
                v = v - g[i * r + k] * g[i * r + j];
            g[k * r + j] = v / rkk;
        }
    }
    return true;
}

/* Whether P^T P, summed in double by the block, has a Cholesky factor:
 * where it does not, CholeskyQR2's Q falls back to Gram-Schmidt with
 * eps, as the cpu backend's does when spotrf fails. */
static bool
s_twin_cholesky_ok(const float *p, size_t n, size_t r)
{
    double part[LOWRANK_LIST_THREADS * LOWRANK_LIST_MAX_RANK];
    double g[LOWRANK_LIST_MAX_RANK * LOWRANK_LIST_MAX_RANK];
    for (size_t c = 0; c < r; c++) {
        s_thread_dots(p, n, r, SIZE_MAX, c, c, r - c, part);
        s_block_sums(part, r - c, g + c * r + c);
    }
    return s_twin_cholesky(g, r);
}

void
lowrank_ref_orth_block(const struct lowrank_orth_item *item,
                       rumor_lowrank_orth method,
                       float eps)
{
    rumor_lowrank_orth how = lowrank_orth_resolve(method, item->r);
    if (how == RUMOR_LOWRANK_ORTH_CHOLQR2 &&
        !s_twin_cholesky_ok(item->p, item->n, item->r))
        how = RUMOR_LOWRANK_ORTH_GS;
    if (how == RUMOR_LOWRANK_ORTH_GS)
        s_twin_gram_schmidt(item->p, item->n, item->r, eps);
    else
        s_twin_householder(item->p,
                           item->n,
                           item->r,
                           how == RUMOR_LOWRANK_ORTH_CHOLQR2);
}

/* A warp's shuffle-down tree over its lanes' r sums; the result in lane 0. */
static void
s_warp_sums(float (*acc)[LOWRANK_LIST_MAX_RANK], size_t r)
{
    for (size_t off = LOWRANK_WARP / 2; off > 0; off >>= 1)
        for (size_t l = 0; l < off; l++)
            for (size_t k = 0; k < r; k++)
                acc[l][k] += acc[l + off][k];
}

void
lowrank_ref_right_tile(const struct lowrank_mat_item *it,
                       const struct lowrank_tile *tile)
{
    size_t m = it->m, r = it->r;
    for (size_t row = tile->lo; row < tile->hi; row++) {
        float acc[LOWRANK_WARP][LOWRANK_LIST_MAX_RANK];
        float *mrow = it->mat + row * m;
        const float *arow = it->add != NULL ? it->add + row * m : NULL;
        memset(acc, 0, sizeof acc);
        for (size_t lane = 0; lane < LOWRANK_WARP; lane++)
            for (size_t j = lane; j < m; j += LOWRANK_WARP) {
                float x = mrow[j];
                if (it->pd != NULL) {
                    float y = 0;
                    for (size_t k = 0; k < r; k++)
                        y = fmaf(it->pd[row * r + k], it->qd[j * r + k], y);
                    x -= y;
                }
                if (arow != NULL)
                    x += arow[j];
                if (it->pd != NULL || arow != NULL)
                    mrow[j] = x;
                for (size_t k = 0; k < r; k++)
                    acc[lane][k] = fmaf(x, it->q[j * r + k], acc[lane][k]);
            }
        s_warp_sums(acc, r);
        for (size_t k = 0; k < r; k++)
            it->p[row * r + k] = acc[0][k];
    }
}

void
lowrank_ref_left_tile(const struct lowrank_mat_item *it,
                      const struct lowrank_tile *tile,
                      float *scratch)
{
    float part[LOWRANK_LIST_WARPS][LOWRANK_WARP][LOWRANK_LIST_MAX_RANK];
    size_t m = it->m, r = it->r;
    size_t lanes = m - tile->col < LOWRANK_WARP ? m - tile->col : LOWRANK_WARP;
    memset(part, 0, sizeof part);
    for (size_t w = 0; w < LOWRANK_LIST_WARPS; w++)
        for (size_t lane = 0; lane < lanes; lane++) {
            size_t j = tile->col + lane;
            for (size_t i = tile->lo + w; i < tile->hi;
                 i += LOWRANK_LIST_WARPS) {
                float x = it->mat[i * m + j];
                if (it->add != NULL) {
                    x += it->add[i * m + j];
                    it->mat[i * m + j] = x;
                }
                for (size_t k = 0; k < r; k++)
                    part[w][lane][k] =
                        fmaf(x, it->p[i * r + k], part[w][lane][k]);
            }
        }
    float *mine = scratch + tile->partial + tile->part * LOWRANK_WARP * r;
    for (size_t lane = 0; lane < lanes; lane++)
        for (size_t k = 0; k < r; k++) {
            float s = part[0][lane][k];
            for (size_t w = 1; w < LOWRANK_LIST_WARPS; w++)
                s += part[w][lane][k];
            if (tile->parts == 1)
                it->q[(tile->col + lane) * r + k] = s;
            else
                mine[lane * r + k] = s;
        }
    /* The plan puts a strip's parts in order: the last completes it. */
    if (tile->parts == 1 || tile->part + 1 < tile->parts)
        return;
    const float *all = scratch + tile->partial;
    for (size_t lane = 0; lane < lanes; lane++)
        for (size_t k = 0; k < r; k++) {
            float s = all[lane * r + k];
            for (size_t q = 1; q < tile->parts; q++)
                s += all[(q * LOWRANK_WARP + lane) * r + k];
            it->q[(tile->col + lane) * r + k] = s;
        }
}

void
lowrank_ref_recon_tile(const struct lowrank_mat_item *it,
                       const struct lowrank_tile *tile,
                       bool with_e,
                       float beta)
{
    size_t m = it->m, r = it->r;
    for (size_t idx = tile->lo; idx < tile->hi; idx++) {
        size_t i = idx / m, j = idx % m;
        float y = 0;
        for (size_t k = 0; k < r; k++)
            y = fmaf(it->p[i * r + k], it->q[j * r + k], y);
        if (with_e)
            it->mat[idx] -= y;
        if (it->out != NULL)
            it->out[idx] = (beta != 0 ? it->out[idx] : 0.0f) + y;
    }
}

/* --- the ref backend ------------------------------------------------------ */

static rumor_err
s_alloc(void *ctx, size_t bytes, float **out)
{
    (void)ctx;
    *out = calloc(1, bytes > 0 ? bytes : 1);
    return *out == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

static void
s_release(void *ctx, float *ptr)
{
    (void)ctx;
    free(ptr);
}

static rumor_err
s_copy(void *ctx, float *dst, const float *src, size_t bytes)
{
    (void)ctx;
    if (bytes > 0)
        memmove(dst, src, bytes);
    return RUMOR_OK;
}

static rumor_err
s_project_right(void *ctx,
                float *mat,
                const float *add,
                size_t n,
                size_t m,
                const float *q,
                size_t r,
                float *p)
{
    (void)ctx;
    lowrank_ref_project_right(mat, add, n, m, q, r, p);
    return RUMOR_OK;
}

static rumor_err
s_project_left(void *ctx,
               float *mat,
               const float *add,
               size_t n,
               size_t m,
               const float *p,
               size_t r,
               float *q)
{
    (void)ctx;
    lowrank_ref_project_left(mat, add, n, m, p, r, q);
    return RUMOR_OK;
}

static rumor_err
s_orthogonalize(void *ctx,
                float *p,
                size_t n,
                size_t r,
                rumor_lowrank_orth method,
                float eps)
{
    (void)ctx;
    if (lowrank_orth_resolve(method, r) == RUMOR_LOWRANK_ORTH_GS) {
        lowrank_ref_gram_schmidt(p, n, r, eps);
        return RUMOR_OK;
    }
    /* QR and CholeskyQR2 both give the Q of the QR factorization; the
     * oracle is Householder (CholeskyQR2's signs are checked apart). */
    return lowrank_ref_householder(p, n, r);
}

static rumor_err
s_reconstruct(void *ctx,
              size_t n,
              size_t m,
              size_t r,
              const float *p,
              const float *q,
              float alpha,
              float *e,
              float *out,
              float beta)
{
    (void)ctx;
    lowrank_ref_reconstruct(n, m, r, p, q, alpha, e, out, beta);
    return RUMOR_OK;
}

/* The deferred error update: the two passes it stands for. */
static rumor_err
s_project_right_ef(void *ctx,
                   float *mat,
                   const float *add,
                   size_t n,
                   size_t m,
                   const float *pd,
                   const float *qd,
                   const float *q,
                   size_t r,
                   float *p)
{
    (void)ctx;
    lowrank_ref_reconstruct(n, m, r, pd, qd, 1.0f, mat, NULL, 0);
    lowrank_ref_project_right(mat, add, n, m, q, r, p);
    return RUMOR_OK;
}

static void
s_free(void *ctx)
{
    (void)ctx;
}

rumor_err
lowrank_ref_init(struct lowrank_backend_i *iface, void **ctx)
{
    static const struct lowrank_backend_i ref = {
        .name = "ref",
        .alloc = s_alloc,
        .release = s_release,
        .upload = s_copy,
        .download = s_copy,
        .project_right = s_project_right,
        .project_left = s_project_left,
        .orthogonalize = s_orthogonalize,
        .reconstruct = s_reconstruct,
        .free = s_free,
        .project_right_ef = s_project_right_ef,
        .copy = s_copy,
        .host_memory = true,
    };
    *iface = ref;
    *ctx = NULL;
    return RUMOR_OK;
}

/* --- the twin backend: ref with the list slots ---------------------------- */

static rumor_err
s_orthogonalize_list(void *ctx,
                     const struct lowrank_orth_item *items,
                     size_t count,
                     rumor_lowrank_orth method,
                     float eps)
{
    (void)ctx;
    for (size_t i = 0; i < count; i++)
        lowrank_ref_orth_block(&items[i], method, eps);
    return RUMOR_OK;
}

/* Every tile of a phase's plan, in plan order. */
static rumor_err
s_list(enum lowrank_phase phase,
       const struct lowrank_mat_item *items,
       size_t count,
       bool with_e,
       float beta)
{
    size_t strips = 0, floats = 0;
    size_t nt = lowrank_tiles_plan(phase, items, count, NULL, &strips, &floats);
    struct lowrank_tile *tiles = malloc((nt > 0 ? nt : 1) * sizeof *tiles);
    float *scratch = calloc(floats > 0 ? floats : 1, sizeof *scratch);
    if (tiles == NULL || scratch == NULL) {
        free(tiles);
        free(scratch);
        return RUMOR_ENOMEM;
    }
    lowrank_tiles_plan(phase, items, count, tiles, &strips, &floats);
    for (size_t t = 0; t < nt; t++) {
        const struct lowrank_mat_item *it = &items[tiles[t].item];
        if (phase == LOWRANK_PHASE_RIGHT)
            lowrank_ref_right_tile(it, &tiles[t]);
        else if (phase == LOWRANK_PHASE_LEFT)
            lowrank_ref_left_tile(it, &tiles[t], scratch);
        else
            lowrank_ref_recon_tile(it, &tiles[t], with_e, beta);
    }
    free(tiles);
    free(scratch);
    return RUMOR_OK;
}

static rumor_err
s_project_right_list(void *ctx,
                     const struct lowrank_mat_item *items,
                     size_t count)
{
    (void)ctx;
    return s_list(LOWRANK_PHASE_RIGHT, items, count, false, 0);
}

static rumor_err
s_project_left_list(void *ctx,
                    const struct lowrank_mat_item *items,
                    size_t count)
{
    (void)ctx;
    return s_list(LOWRANK_PHASE_LEFT, items, count, false, 0);
}

static rumor_err
s_reconstruct_list(void *ctx,
                   const struct lowrank_mat_item *items,
                   size_t count,
                   bool with_e,
                   float beta)
{
    (void)ctx;
    return s_list(LOWRANK_PHASE_RECON, items, count, with_e, beta);
}

rumor_err
lowrank_twin_init(struct lowrank_backend_i *iface, void **ctx)
{
    rumor_err rc = lowrank_ref_init(iface, ctx);
    iface->name = "twin";
    iface->orthogonalize_list = s_orthogonalize_list;
    iface->project_right_list = s_project_right_list;
    iface->project_left_list = s_project_left_list;
    iface->reconstruct_list = s_reconstruct_list;
    return rc;
}
