/*
 * Per-layer statistics for the adaptive compression controllers (issue
 * #12; the seed paper, docs/adaptive.md): the controllers read each
 * layer's l2 norm and max (the learned bit-width model's inputs), a
 * variance estimate (the sparsity rule's input), and the relative
 * compression error ||x - C(x)|| / ||x|| of the codec in use (the
 * learned model's training signal and the budget's feedback).
 *
 * They are computed every step on every message, so they must cost little
 * next to the encode itself: one pass over the vector computes all four
 * moments at once (the sum, the sum of squares and the max share a load),
 * with sixteen independent float accumulator lanes so the compiler's SLP
 * pass vectorises the loop at -O2 without -ffast-math (a single running
 * sum would be a serial dependency chain). Each block of 1024 elements is
 * summed in float (64 terms per lane) and added to double totals: a float
 * sum of 10^6 squares would lose the digits the variance needs (var =
 * E[x^2] - mean^2 cancels), doubles in the inner loop cost 5x (measured:
 * 2.6 ms for 2^20 elements with double lanes).
 * The relative error reads x and C(x) once; C(x) comes from the codec's
 * approx output, so no decode is needed.
 */
#include "rumor/compress.h"

#include <math.h>
#include <string.h>

#define S_LANES     16   /* float lanes: the compiler's SLP pass packs them */
#define S_ERR_LANES 8    /* four sums: 16 lanes each would spill registers */
#define S_BLOCK     1024 /* elements summed in float before the double total */

/* Sums of one block of m <= S_BLOCK elements in float lanes (vectorised:
 * no loop-carried dependency across lanes, max as a compare-select). */
static void
s_block_stats(const float *x, size_t m, double *sum, double *sq, float *mx)
{
    float s[S_LANES] = {0}, q[S_LANES] = {0}, a[S_LANES] = {0};
    size_t i = 0;
    for (; i + S_LANES <= m; i += S_LANES)
        for (size_t l = 0; l < S_LANES; l++) {
            float v = x[i + l], av = v < 0 ? -v : v;
            s[l] += v;
            q[l] += v * v;
            a[l] = av > a[l] ? av : a[l];
        }
    for (size_t l = 0; i < m; i++, l++) {
        float v = x[i], av = v < 0 ? -v : v;
        s[l] += v;
        q[l] += v * v;
        a[l] = av > a[l] ? av : a[l];
    }
    for (size_t l = 0; l < S_LANES; l++) {
        *sum += s[l];
        *sq += q[l];
        *mx = a[l] > *mx || a[l] != a[l] ? a[l] : *mx;
    }
}

void
rumor_layer_stats_compute(const float *x,
                          size_t n,
                          struct rumor_layer_stats *out)
{
    double sum = 0, sq = 0;
    float mx = 0;
    for (size_t at = 0; at < n; at += S_BLOCK)
        s_block_stats(x + at,
                      n - at < S_BLOCK ? n - at : S_BLOCK,
                      &sum,
                      &sq,
                      &mx);
    *out = (struct rumor_layer_stats){0};
    if (n == 0)
        return;
    out->norm = sqrt(sq);
    out->max_abs = mx;
    out->mean = sum / (double)n;
    double var = sq / (double)n - out->mean * out->mean;
    out->var = var > 0 ? var : 0; /* cancellation can go below 0 */
}

/* 1 when v is not zero (+0 or -0), else 0, in integer arithmetic without
 * a compare: GCC -O2 does not vectorise the loop around a compare. */
static inline float
s_nonzero(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    uint32_t t = b << 1; /* drop the sign: -0 is zero too */
    return (float)((t | (0u - t)) >> 31);
}

/* Squared error and squared norm, over all elements and over those where
 * approx is not zero, of one block, in float lanes. */
static void
s_block_err(const float *x, const float *ap, size_t m, double *acc)
{
    float e[S_ERR_LANES] = {0}, q[S_ERR_LANES] = {0}, es[S_ERR_LANES] = {0},
          qs[S_ERR_LANES] = {0};
    size_t i = 0;
    for (; i + S_ERR_LANES <= m; i += S_ERR_LANES)
        for (size_t l = 0; l < S_ERR_LANES; l++) {
            float v = x[i + l], d = v - ap[i + l];
            float on = s_nonzero(ap[i + l]);
            e[l] += d * d;
            q[l] += v * v;
            es[l] += on * d * d;
            qs[l] += on * v * v;
        }
    for (size_t l = 0; i < m; i++, l++) {
        float v = x[i], d = v - ap[i], on = s_nonzero(ap[i]);
        e[l] += d * d;
        q[l] += v * v;
        es[l] += on * d * d;
        qs[l] += on * v * v;
    }
    for (size_t l = 0; l < S_ERR_LANES; l++) {
        acc[0] += e[l];
        acc[1] += q[l];
        acc[2] += es[l];
        acc[3] += qs[l];
    }
}

static double
s_ratio(double err, double sq)
{
    if (sq == 0)
        return err == 0 ? 0.0 : 1.0;
    return sqrt(err / sq);
}

double
rumor_layer_rel_error(const float *x,
                      const float *approx,
                      size_t n,
                      double *support_err)
{
    double acc[4] = {0};
    for (size_t at = 0; at < n; at += S_BLOCK)
        s_block_err(x + at,
                    approx + at,
                    n - at < S_BLOCK ? n - at : S_BLOCK,
                    acc);
    if (support_err != NULL)
        *support_err = s_ratio(acc[2], acc[3]);
    return s_ratio(acc[0], acc[1]);
}
