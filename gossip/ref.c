/*
 * The plain-C twins of gossip/backend_cuda.cu's kernels: element e of a
 * loop is what thread e computes there, in the same roundings (the
 * kernels use the _rn intrinsics; this code is C11 without
 * -ffp-contract, so nothing here is fused either). norm sums in element
 * order; the kernel's tree order differs in the last bits. k_uniform's
 * twin is core's rumor_rng_fill_uniform itself; the reductions stats and
 * rel_error have compress's own functions (rumor_layer_stats_compute,
 * rumor_layer_rel_error) as theirs.
 */
#include "gossip/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The element loops also built for AVX2, picked at load time where the CPU
 * has it: twice the elements per instruction, and the double loops of a
 * gossip step's apply are bound by arithmetic, not memory. "avx2" enables
 * no FMA, so every element's roundings are the baseline build's. */
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define S_WIDE __attribute__((target_clones("avx2", "default")))
#else
#define S_WIDE
#endif

S_WIDE void
gossip_ref_diff(double *d, const float *a, const float *b, size_t n)
{
    if (b == NULL) /* a - 0.0 is a, exactly */
        for (size_t e = 0; e < n; e++)
            d[e] = (double)a[e];
    else
        for (size_t e = 0; e < n; e++)
            d[e] = (double)a[e] - (double)b[e];
}

/* sq carried in: a term written in pieces, in element order, sums as
 * gossip_ref_norm over the whole does. */
S_WIDE void
gossip_ref_diff_sq(double *d,
                   const float *a,
                   const float *b,
                   size_t n,
                   double *sq)
{
    double s = *sq;
    if (b == NULL)
        for (size_t e = 0; e < n; e++) {
            d[e] = (double)a[e];
            s += d[e] * d[e];
        }
    else
        for (size_t e = 0; e < n; e++) {
            d[e] = (double)a[e] - (double)b[e];
            s += d[e] * d[e];
        }
    *sq = s;
}

S_WIDE void
gossip_ref_sub(double *d, const double *a, const double *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        d[e] = a[e] - b[e];
}

S_WIDE void
gossip_ref_axpy(double *acc, double c, const double *d, size_t n)
{
    for (size_t e = 0; e < n; e++)
        acc[e] += d[e] * c;
}

S_WIDE void
gossip_ref_axpy_f(double *acc, double c, const float *y, size_t n)
{
    for (size_t e = 0; e < n; e++)
        acc[e] += (double)y[e] * c;
}

S_WIDE void
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

S_WIDE void
gossip_ref_sub_round(float *out, const float *x, const double *xhat, size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = (float)(x[e] - xhat[e]);
}

S_WIDE void
gossip_ref_accum(double *acc, double c, const float *x, size_t n)
{
    for (size_t e = 0; e < n; e++)
        acc[e] += c * x[e];
}

S_WIDE void
gossip_ref_add(float *out, const float *a, const float *b, size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = a[e] + b[e];
}

S_WIDE void
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

S_WIDE void
gossip_ref_div_round(float *out, const double *acc, double c, size_t n)
{
    for (size_t e = 0; e < n; e++)
        out[e] = (float)(acc[e] / c);
}

S_WIDE void
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

/* The kernel's branches hoisted out of the loop, so each loop
 * vectorizes; the arithmetic is the kernel's. */
S_WIDE void
gossip_ref_sgd(float *p,
               const float *g,
               float *b,
               float lr,
               float wd,
               float mu,
               bool nesterov,
               size_t n)
{
    if (b == NULL)
        for (size_t e = 0; e < n; e++)
            p[e] = p[e] - lr * (g[e] + wd * p[e]);
    else if (!nesterov)
        for (size_t e = 0; e < n; e++) {
            b[e] = mu * b[e] + (g[e] + wd * p[e]);
            p[e] = p[e] - lr * b[e];
        }
    else
        for (size_t e = 0; e < n; e++) {
            float u = g[e] + wd * p[e];
            b[e] = mu * b[e] + u;
            p[e] = p[e] - lr * (u + mu * b[e]);
        }
}

/* CRC-32C's polynomial, bit-reflected (core/crc32c.c's). */
#define S_CRC_POLY 0x82f63b78u

/* mat (32 columns) times vec over GF(2). */
static uint32_t
s_gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec != 0; vec >>= 1, mat++)
        if (vec & 1u)
            sum ^= *mat;
    return sum;
}

static void
s_gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = s_gf2_times(mat, mat[n]);
}

/* The operator that appends len zero bytes to a crc's register. */
static void
s_zeros_operator(uint32_t *op, size_t len)
{
    uint32_t odd[32], even[32], row = 1;
    odd[0] = S_CRC_POLY; /* one zero bit */
    for (int n = 1; n < 32; n++, row <<= 1)
        odd[n] = row;
    for (int n = 0; n < 32; n++) /* the identity */
        op[n] = 1u << n;
    s_gf2_square(even, odd); /* two zero bits */
    s_gf2_square(odd, even); /* four */
    /* odd is now the operator of half a byte; square to one byte, then
     * per bit of len */
    s_gf2_square(even, odd);
    uint32_t *power = even, *next = odd, tmp[32];
    for (; len != 0; len >>= 1) {
        if (len & 1) {
            for (int n = 0; n < 32; n++)
                tmp[n] = s_gf2_times(power, op[n]);
            memcpy(op, tmp, sizeof tmp);
        }
        s_gf2_square(next, power);
        uint32_t *swap = power;
        power = next;
        next = swap;
    }
}

/* crc(A B) from crc(A), crc(B) and B's length: the pre- and
 * post-conditioning cancel, so appending B is shifting crc(A) by |B|
 * zero bytes and adding crc(B). */
uint32_t
gossip_ref_crc32c_join(const uint32_t *part, size_t bytes)
{
    if (bytes == 0)
        return 0;
    size_t parts = (bytes + GOSSIP_CRC_CHUNK - 1) / GOSSIP_CRC_CHUNK;
    size_t last = bytes - (parts - 1) * GOSSIP_CRC_CHUNK;
    uint32_t full[32], tail[32];
    s_zeros_operator(full, GOSSIP_CRC_CHUNK);
    s_zeros_operator(tail, last);
    uint32_t crc = part[0];
    for (size_t c = 1; c + 1 < parts; c++)
        crc = s_gf2_times(full, crc) ^ part[c];
    return parts > 1 ? s_gf2_times(tail, crc) ^ part[parts - 1] : crc;
}

uint32_t
gossip_ref_crc32c(const void *p, size_t bytes)
{
    size_t parts = (bytes + GOSSIP_CRC_CHUNK - 1) / GOSSIP_CRC_CHUNK;
    uint32_t *part = malloc((parts + 1) * sizeof *part);
    if (part == NULL) /* the twin's own scratch; the whole is the same */
        return rumor_crc32c(0, p, bytes);
    const uint8_t *b = p;
    for (size_t c = 0; c < parts; c++) {
        size_t at = c * GOSSIP_CRC_CHUNK;
        size_t len =
            bytes - at < GOSSIP_CRC_CHUNK ? bytes - at : GOSSIP_CRC_CHUNK;
        part[c] = rumor_crc32c(0, b + at, len);
    }
    uint32_t crc = gossip_ref_crc32c_join(part, bytes);
    free(part);
    return crc;
}

/* floor without a libm call (baseline x86-64 has no rounding
 * instruction, so floor() is a call): truncation is exact below 2^52,
 * where every double is already an integer anyway. The kernels' floor()
 * gives the same values (a -0 aside, which no argument here can be). */
static inline double
s_floor(double v)
{
    if (!(fabs(v) < 4503599627370496.0))
        return v;
    double t = (double)(int64_t)v;
    return t - (double)(t > v); /* branch-free: the sign is random */
}

/* Moniqua's mod(x, a) = x - a floor(x/a + 1/2), in [-a/2, a/2): the
 * reference's fmod(x + sign(x) a/2, a) - sign(x) a/2 without fmod and
 * without a branch on the sign (they differ only for x/a exactly half an
 * odd integer below zero, where this gives -a/2 and the reference +a/2,
 * and by the rounding of x/a within an ulp of a bucket edge). glibc's
 * fmod is an exact remainder loop: with it a step of 8 nodes at ResNet-18
 * size took 5 s. */
static inline double
s_mod(double x, double a, double inv_a)
{
    return x - a * s_floor(x * inv_a + 0.5);
}

/* The value of level l: q = l delta - 1/2. */
static inline double
s_moniqua_q(unsigned l)
{
    return l * GOSSIP_MONIQUA_DELTA - 0.5;
}

/* One thread per byte of levels: its four elements. */
void
gossip_ref_moniqua_levels(uint8_t *levels,
                          float *xhat,
                          const float *x,
                          const float *noise,
                          double bound,
                          size_t n)
{
    double inv_b = 1.0 / bound;
    for (size_t byte = 0; byte < (n + 3) / 4; byte++) {
        unsigned packed = 0;
        for (size_t e = 4 * byte; e < 4 * byte + 4 && e < n; e++) {
            double v = s_mod(x[e] * inv_b, 1.0, 1.0) + 0.5;
            double level = s_floor(v * 3.0 + noise[e]); /* v / delta */
            level = level > 0 ? level : 0; /* maxsd / minsd, no branches */
            level = level < 3 ? level : 3;
            unsigned l = (unsigned)level;
            packed |= l << (2 * (e % 4));
            xhat[e] =
                (float)(s_moniqua_q(l) * bound - s_mod(x[e], bound, inv_b));
        }
        levels[byte] = (uint8_t)packed;
    }
}

void
gossip_ref_moniqua_term(double *d,
                        const uint8_t *levels,
                        const float *x,
                        const float *xhat,
                        double bound,
                        size_t n)
{
    double inv_b = 1.0 / bound;
    for (size_t e = 0; e < n; e++) {
        unsigned l = (levels[e / 4] >> (2 * (e % 4))) & 3u;
        d[e] = s_mod(s_moniqua_q(l) * bound - x[e], bound, inv_b) - xhat[e];
    }
}

/* The host's order: the kernel sums per thread and block, so its last
 * bits differ, as norm's. b NULL adds nothing: (double)a, exact. */
void
gossip_ref_sumsq_add(const float *a, const float *b, size_t n, double *acc)
{
    double m2 = *acc;
    for (size_t e = 0; e < n; e++) {
        double v = b != NULL ? (double)a[e] + b[e] : (double)a[e];
        m2 += v * v;
    }
    *acc = m2;
}

S_WIDE void
gossip_ref_dgc_step(float *u_new,
                    float *v,
                    const float *e,
                    const float *u,
                    const float *g,
                    float mu,
                    float scale,
                    size_t n)
{
    for (size_t i = 0; i < n; i++) {
        u_new[i] = mu * u[i] + scale * g[i];
        v[i] = e[i] + u_new[i];
    }
}

void
gossip_ref_zero_at(float *u, const uint32_t *idx, size_t k)
{
    for (size_t j = 0; j < k; j++)
        u[idx[j]] = 0.0f;
}
