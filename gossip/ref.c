/*
 * The plain-C twins of gossip/backend_cuda.cu's kernels: element e of a
 * loop is what thread e computes there, in the same roundings (the
 * kernels use the _rn intrinsics; this code is C11 without
 * -ffp-contract, so nothing here is fused either). norm sums in element
 * order; the kernel's tree order differs in the last bits.
 */
#include "gossip/backend.h"

#include <math.h>

void
gossip_ref_diff(double *d, const float *a, const float *b, size_t n)
{
    if (b == NULL) /* a - 0.0 is a, exactly */
        for (size_t e = 0; e < n; e++)
            d[e] = (double)a[e];
    else
        for (size_t e = 0; e < n; e++)
            d[e] = (double)a[e] - (double)b[e];
}

void
gossip_ref_sub(double *d, const double *a, const double *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        d[e] = a[e] - b[e];
}

void
gossip_ref_axpy(double *acc, double c, const double *d, size_t n)
{
    for (size_t e = 0; e < n; e++)
        acc[e] += d[e] * c;
}

void
gossip_ref_scale(double *d, double c, size_t n)
{
    for (size_t e = 0; e < n; e++)
        d[e] *= c;
}

void
gossip_ref_apply(float *out,
                 const float *base,
                 double gamma,
                 const double *acc,
                 size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = (float)(base[e] + gamma * acc[e]);
}

double
gossip_ref_norm(const double *d, size_t n)
{
    double sq = 0;
    for (size_t e = 0; e < n; e++)
        sq += d[e] * d[e];
    return sqrt(sq);
}

void
gossip_ref_sub_round(float *out, const float *x, const double *xhat, size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = (float)(x[e] - xhat[e]);
}

void
gossip_ref_accum(double *acc, double c, const float *x, size_t n)
{
    for (size_t e = 0; e < n; e++)
        acc[e] += c * x[e];
}

void
gossip_ref_add(float *out, const float *a, const float *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = a[e] + b[e];
}

void
gossip_ref_add_scaled(float *out,
                      const float *a,
                      float c,
                      const float *b,
                      size_t n)
{
    if (a == NULL) /* not 0 + c b: that makes a -0 product +0 */
        for (size_t e = 0; e < n; e++)
            out[e] = c * b[e];
    else
        for (size_t e = 0; e < n; e++)
            out[e] = a[e] + c * b[e];
}

void
gossip_ref_outer(float *x,
                 float *anchor,
                 float *v,
                 const float *d,
                 float lr,
                 float mu,
                 size_t n)
{
    for (size_t e = 0; e < n; e++) {
        v[e] = mu * v[e] + d[e];
        x[e] = anchor[e] - lr * (d[e] + mu * v[e]);
        anchor[e] = x[e];
    }
}
