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
