/*
 * The generalized normal (GenNorm) model of a layer that CO3 builds on
 * (Chen, Hernandez, Huang, Rini, "Convert, Compress, Correct", eqs. 9-10,
 * 15-16): parameter estimates, the probability of an interval, and the
 * paper's polynomial fits of the fp exponent bias.
 *
 * Estimation is by moments, as the paper's kurtosis discussion suggests:
 * the kurtosis of GenNorm depends on the shape beta alone (eq. 10c) and
 * decreases in it (Laplace 6, normal 3, uniform 1.8), so beta comes from the
 * sample kurtosis by bisection and the scale alpha from the variance (eq.
 * 10b). Maximum likelihood was rejected: an iterative fit over all n values
 * per message, for a code whose efficiency changes in the third digit.
 *
 * tgamma, not lgamma: lgamma writes the global signgam, a data race when
 * several threads encode at once; the arguments here stay below 50, far
 * from tgamma's overflow.
 */
#include "compress/compress_impl.h"

#include <math.h>

#define S_BETA_MIN 0.1
#define S_BETA_MAX 20.0

/* Kurtosis of GenNorm with shape beta (eq. 10c). */
static double
s_kurtosis(double beta)
{
    double g3 = tgamma(3 / beta);
    return tgamma(5 / beta) * tgamma(1 / beta) / (g3 * g3);
}

void
compress_gennorm_fit(const float *x, size_t n, struct compress_gennorm *g)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += x[i];
    double mu = n ? sum / (double)n : 0, m2 = 0, m4 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = ((double)x[i] - mu) * ((double)x[i] - mu);
        m2 += d;
        m4 += d * d;
    }
    g->mu = mu;
    g->var = n ? m2 / (double)n : 0;
    g->beta = 2;
    if (m2 > 0) {
        double k = m4 * (double)n / (m2 * m2), lo = S_BETA_MIN, hi = S_BETA_MAX;
        /* Kurtosis falls as beta grows: keep kurt(lo) >= k >= kurt(hi). */
        for (int it = 0; it < 60; it++) {
            double mid = 0.5 * (lo + hi);
            if (s_kurtosis(mid) > k)
                lo = mid;
            else
                hi = mid;
        }
        g->beta = 0.5 * (lo + hi);
    }
    g->alpha = sqrt(g->var * tgamma(1 / g->beta) / tgamma(3 / g->beta));
}

/* Regularized lower incomplete gamma P(a, x) (series for x < a + 1, the
 * continued fraction of Q otherwise; Numerical Recipes 6.2). */
static double
s_gamma_p(double a, double x)
{
    if (x <= 0)
        return 0;
    double lead = exp(-x + a * log(x) - log(tgamma(a)));
    if (x < a + 1) {
        double ap = a, del = 1 / a, sum = del;
        for (int i = 0; i < 500 && fabs(del) > fabs(sum) * 1e-15; i++) {
            ap += 1;
            del *= x / ap;
            sum += del;
        }
        return sum * lead;
    }
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 500; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < tiny ? tiny : d;
        c = b + an / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return 1 - lead * h;
}

double
compress_gennorm_cdf(const struct compress_gennorm *g, double x)
{
    if (isinf(x))
        return x > 0 ? 1 : 0;
    if (g->alpha <= 0)
        return x >= g->mu ? 1 : 0;
    double t = fabs(x - g->mu) / g->alpha;
    double p = 0.5 * s_gamma_p(1 / g->beta, pow(t, g->beta));
    return x >= g->mu ? 0.5 + p : 0.5 - p;
}

double
compress_gennorm_paper_bias(unsigned mantissa_bits, double beta)
{
    /* Eq. 15 (fp4, [1, 2, 1]) and eq. 16 (fp8, [1, 5, 2]) at unit
     * variance, coefficients of beta^0 .. beta^4 as printed. */
    static const double fp4[5] = {0.46, -2.85, 5.37, -2.85, 0.52};
    static const double fp8[5] = {-5793, 35605.5, -76511.8, 68153, -18520.3};
    const double *k = mantissa_bits == 2 ? fp4 : fp8;
    return k[0] + beta * (k[1] + beta * (k[2] + beta * (k[3] + beta * k[4])));
}
