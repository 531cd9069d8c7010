/*
 * fp8 and fp4 with Huffman coding, as in CO3 (Chen, Hernandez, Huang, Rini,
 * "Convert, Compress, Correct", section IV-A and IV-B, eq. 12).
 *
 * Formats [sign, mantissa, exponent] = [1, 5, 2] (fp8) and [1, 2, 1]
 * (fp4). A magnitude code c = E << M | m (M mantissa bits) means
 * m 2^(1-M) for E = 0 (subnormal, includes 0) and (2^M + m) 2^(E-M)
 * otherwise, all times 2^b with b the per-tensor exponent bias. Codes are
 * monotonic in magnitude, so rounding carries from mantissa into exponent
 * by plain integer addition, and the largest code saturates. Values round
 * to nearest (ties to even), deterministic: the "closest quantization
 * representative" of eq. 12.
 *
 * The bias (spec key bias): eq. 12 asks for the real b minimising the L2
 * error. bias=real searches it: the six integers from the one
 * that just fits max |x| downwards (smaller b trades clipping of the few
 * largest values for resolution of the many small ones), then real b within
 * one of the best integer, measuring the squared error on a strided sample
 * of at most 16384 values (all values when n is smaller). The real part
 * travels as f = 2^(b - k) in [1, 2), a float32 after the header, on a
 * dyadic grid, so the bytes need no libm. bias=int (default, for its
 * speed: docs/internals/compress.md) stops at the integer
 * (the format before 2026-11: no f field; the best integer costs 1.59x the
 * error of the best real b for fp4 on unit Gaussian data, docs/internals/
 * compress.md). bias=fit takes the paper's fits instead (eqs. 15-16, b =
 * poly(beta) / sigma as printed, beta from the sample's kurtosis): no
 * search, but they were fit to the paper's fp conversion, not this one, and
 * eq. 16 as printed gives b in the thousands; kept to measure them.
 *
 * The code (spec key code): code=message (default) is the Huffman code of
 * the message's own histogram; code=gennorm builds it from the GenNorm
 * model of the layer (CO3 IV-A: "a different code in each DNN layer"),
 * mean, variance and shape estimated per message. Either way the lengths
 * travel in the payload, so decoders do not depend on how they were made
 * (sending the model's parameters instead would save 128 bytes a message
 * but make decoding depend on every machine computing tgamma and pow to
 * the same last bit).
 *
 * Symbols (sign << (E+M) | c, one byte each) then go through the canonical
 * Huffman coder (huffman.c) whose code lengths travel in the payload.
 */
#include "compress/compress_impl.h"
#include "compress/huffman.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S_SAMPLE   COMPRESS_FP8_SAMPLE
#define S_BIAS_MAX 200 /* |k| bound accepted from the wire */
#define S_BIAS_FIT 120 /* |b| bound of the fitted bias: finite values */

struct s_fmt {
    unsigned M;    /* mantissa bits */
    unsigned E;    /* exponent bits */
    unsigned S;    /* symbol bits: 1 + E + M */
    uint32_t cmax; /* largest magnitude code */
};

static struct s_fmt
s_format(rumor_codec_id id)
{
    struct s_fmt f;
    f.M = id == RUMOR_CODEC_FP8 ? 5 : 2;
    f.E = id == RUMOR_CODEC_FP8 ? 2 : 1;
    f.S = 1 + f.E + f.M;
    f.cmax = (1u << (f.E + f.M)) - 1;
    return f;
}

/* Magnitude code of a >= 0 (already scaled by 2^-b), rounded to nearest. */
static inline uint32_t
s_code(float a, const struct s_fmt *f)
{
    uint32_t c;
    if (a < 2.0f) {
        c = (uint32_t)nearbyintf(a * (float)(1u << (f->M - 1)));
    } else {
        uint32_t u = compress_f2u(a);
        unsigned sh = 23 - f->M;
        u += ((1u << (sh - 1)) - 1) + ((u >> sh) & 1u);
        c = (u >> sh) - (127u << f->M);
    }
    return c > f->cmax ? f->cmax : c;
}

/* The decoded value of every symbol under bias b = k + log2 fr: the
 * magnitude (at most M + 1 significant bits) times fr (24 bits) is exact in
 * double, so the one rounding to float is the same on every machine. */
static void
s_values(const struct s_fmt *f, int k, float fr, float *val)
{
    for (uint32_t c = 0; c <= f->cmax; c++) {
        uint32_t E = c >> f->M, m = c & ((1u << f->M) - 1);
        double mag =
            E == 0 ? ldexp((double)m, 1 - (int)f->M)
                   : ldexp((double)((1u << f->M) + m), (int)E - (int)f->M);
        float v = (float)ldexp(mag * (double)fr, k);
        val[c] = v;
        val[c | (1u << (f->E + f->M))] = -v;
    }
}

/* Factors whose product is 2^-k / f (b = k + log2 f): two powers of two,
 * each a normal float, the second divided by f in [1, 2). */
static void
s_scales(int k, float f, float *s1, float *s2)
{
    int h = -k / 2;
    *s1 = ldexpf(1.0f, h);
    *s2 = ldexpf(1.0f, -k - h) / f;
}

static inline uint8_t
s_symbol(float v, float s1, float s2, const struct s_fmt *f)
{
    uint32_t c = s_code(fabsf(v) * s1 * s2, f);
    return (uint8_t)(c | (compress_f2u(v) >> 31) << (f->E + f->M));
}

void
compress_fp8_symbols_ref(const float *x,
                         size_t n,
                         float s1,
                         float s2,
                         unsigned M,
                         unsigned E,
                         uint8_t *sym)
{
    struct s_fmt f = {M, E, 1 + E + M, (1u << (E + M)) - 1};
    for (size_t i = 0; i < n; i++)
        sym[i] = s_symbol(x[i], s1, s2, &f);
}

/* The encoder's view of x: a strided sample of at most S_SAMPLE values
 * (all of x when n is smaller), with room for its symbols. */
struct s_sample {
    float x[S_SAMPLE];
    uint8_t sym[S_SAMPLE];
    size_t m;
};

size_t
compress_fp8_sample(const float *x, size_t n, float *sample)
{
    size_t m = n < S_SAMPLE ? n : S_SAMPLE;
    for (size_t j = 0; j < m; j++)
        sample[j] = x[(size_t)((uint64_t)j * n / m)];
    return m;
}

/* Squared error of the sample under bias b = k + log2 f; infinite when
 * any value of the format overflows (decoders reject such a payload even
 * when no element uses the overflowing codes). */
static double
s_error(struct s_sample *s, const struct s_fmt *f, int k, float fr)
{
    float s1, s2, val[256];
    s_scales(k, fr, &s1, &s2);
    s_values(f, k, fr, val);
    if (!compress_all_finite(val, 2u << (f->E + f->M)))
        return INFINITY;
    compress_fp8_symbols(s->x, s->m, s1, s2, f->M, f->E, s->sym);
    double err = 0;
    for (size_t j = 0; j < s->m; j++) {
        double d = (double)s->x[j] - val[s->sym[j]];
        err += d * d;
    }
    return err;
}

/* Squared error of all of x under bias b = k + log2 f, in sample-sized
 * pieces through the sample's buffers. */
static double
s_error_all(const float *x,
            size_t n,
            struct s_sample *s,
            const struct s_fmt *f,
            int k,
            float fr)
{
    double err = 0;
    for (size_t at = 0; at < n; at += S_SAMPLE) {
        s->m = n - at < S_SAMPLE ? n - at : S_SAMPLE;
        memcpy(s->x, x + at, s->m * sizeof *x);
        err += s_error(s, f, k, fr);
    }
    return err;
}

/* Integer b from the one that just fits max |x| downwards: six candidates. */
static int
s_search_int(struct s_sample *s, const struct s_fmt *f, float mx)
{
    int e = 0;
    frexpf(mx, &e); /* mx in [2^(e-1), 2^e) */
    /* The largest code is just under 2^(2^E + 1) 2^b (E exponent bits):
     * b_fit makes max |x| fit without clipping. */
    int b_fit = e - (1 << f->E);
    double best = INFINITY;
    int best_b = b_fit;
    for (int b = b_fit + 1; b >= b_fit - 4; b--) {
        double err = s_error(s, f, b, 1.0f);
        if (err < best) {
            best = err;
            best_b = b;
        }
    }
    return best_b;
}

/* 2^b = 2^(k0 - 1) t with t = u / 1024 in [1, 4): u picks (k, f). */
static void
s_split(int k0, int u, int *k, float *fr)
{
    *k = u < 2048 ? k0 - 1 : k0;
    *fr = u < 2048 ? (float)u / 1024.0f : (float)u / 2048.0f;
}

/* Real b in [k0 - 1, k0 + 1) around the best integer k0: a grid of 96
 * scales (b steps of at most 0.045), then halving steps down to scale steps
 * of 1/1024 (b steps of at most 0.0014) around the best point. The scale
 * grid is dyadic, so f travels exactly and no libm call decides a byte.
 * Candidates whose largest value overflows have infinite error. */
static void
s_search_real(struct s_sample *s,
              const struct s_fmt *f,
              int k0,
              int *k,
              float *fr)
{
    int best_u = 2048;
    double best = INFINITY;
    for (int u = 1024; u < 4096; u += 32) {
        int kk;
        float ff;
        s_split(k0, u, &kk, &ff);
        double err = s_error(s, f, kk, ff);
        if (err < best) {
            best = err;
            best_u = u;
        }
    }
    for (int step = 16; step >= 1; step /= 2) {
        int centre = best_u;
        for (int d = -1; d <= 1; d += 2) {
            int u = centre + d * step, kk;
            float ff;
            if (u < 1024 || u >= 4096)
                continue;
            s_split(k0, u, &kk, &ff);
            double err = s_error(s, f, kk, ff);
            if (err < best) {
                best = err;
                best_u = u;
            }
        }
    }
    s_split(k0, best_u, k, fr);
}

/* CO3's fitted b (eqs. 15-16, b = poly(beta) / sigma as printed), clamped
 * so that every value stays a finite float, on the 1/1024 grid of f. */
static void
s_paper_bias(const struct s_sample *s, const struct s_fmt *f, int *k, float *fr)
{
    struct compress_gennorm g;
    compress_gennorm_fit(s->x, s->m, &g);
    double b =
        g.var > 0 ? compress_gennorm_paper_bias(f->M, g.beta) / sqrt(g.var) : 0;
    b = fmin(fmax(b, -S_BIAS_FIT), S_BIAS_FIT);
    double kf = floor(b);
    double u = nearbyint(exp2(b - kf) * 1024.0);
    if (u >= 2048) {
        kf += 1;
        u = 1024;
    }
    *k = (int)kf;
    *fr = (float)(u / 1024.0);
}

/* A sample misses most of a heavy tail's largest values, whose clipping the
 * real search can trade too far: on all of x, the real b must beat the
 * integer k0 it started from. */
static rumor_err
s_check_real(compress_fp8_err_fn all, void *ctx, int k0, int *k, float *fr)
{
    double at_k0 = 0, at_real = 0;
    rumor_err rc = all(ctx, k0, 1.0f, &at_k0);
    if (rc == RUMOR_OK)
        rc = all(ctx, *k, *fr, &at_real);
    if (rc == RUMOR_OK && at_k0 < at_real) {
        *k = k0;
        *fr = 1.0f;
    }
    return rc;
}

rumor_err
compress_fp8_bias(const rumor_codec *c,
                  const float *sample,
                  size_t m,
                  float mx,
                  size_t n,
                  compress_fp8_err_fn all,
                  void *ctx,
                  int *k,
                  float *fr)
{
    struct s_fmt f = s_format(c->id);
    *k = 0;
    *fr = 1.0f;
    if (mx == 0)
        return RUMOR_OK;
    struct s_sample *s = malloc(sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    memcpy(s->x, sample, m * sizeof *sample);
    s->m = m;
    rumor_err rc = RUMOR_OK;
    if (c->fp_bias == COMPRESS_BIAS_FIT) {
        s_paper_bias(s, &f, k, fr);
    } else {
        int k0 = s_search_int(s, &f, mx);
        *k = k0;
        if (c->fp_bias == COMPRESS_BIAS_REAL) {
            s_search_real(s, &f, k0, k, fr);
            if (n > s->m)
                rc = s_check_real(all, ctx, k0, k, fr);
        }
    }
    free(s);
    return rc;
}

bool
compress_fp8_values(const rumor_codec *c, int k, float fr, float val[256])
{
    struct s_fmt f = s_format(c->id);
    s_values(&f, k, fr, val);
    return compress_all_finite(val, 2u << (f.E + f.M));
}

double
compress_fp8_error_ref(const float *x,
                       size_t n,
                       float s1,
                       float s2,
                       unsigned M,
                       unsigned E,
                       const float *val)
{
    double err = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t sym;
        compress_fp8_symbols_ref(x + i, 1, s1, s2, M, E, &sym);
        double d = (double)x[i] - val[sym];
        err += d * d;
    }
    return err;
}

/* Code lengths from the GenNorm model of x (CO3 IV-A): each symbol's
 * probability is the model's mass on the interval that rounds to it (edges
 * at midpoints between neighbouring values); every symbol gets a count of
 * at least one, so any value the encoder meets has a code. */
static void
s_gennorm_lengths(const float *sample,
                  size_t m,
                  const struct s_fmt *f,
                  const float *val,
                  uint8_t *len)
{
    struct compress_gennorm g;
    compress_gennorm_fit(sample, m, &g);
    uint64_t count[256];
    unsigned sign = 1u << (f->E + f->M);
    for (uint32_t c = 0; c <= f->cmax; c++) {
        double lo = c == 0 ? 0 : 0.5 * ((double)val[c - 1] + val[c]);
        double hi =
            c == f->cmax ? INFINITY : 0.5 * ((double)val[c] + val[c + 1]);
        double pos =
            compress_gennorm_cdf(&g, hi) - compress_gennorm_cdf(&g, lo);
        double neg =
            compress_gennorm_cdf(&g, -lo) - compress_gennorm_cdf(&g, -hi);
        count[c] = 1 + (uint64_t)(fmax(pos, 0) * 0x1p40);
        count[c | sign] = 1 + (uint64_t)(fmax(neg, 0) * 0x1p40);
    }
    huffman_lengths(count, 2 * sign, len);
}

static void
s_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    struct s_fmt f = s_format(c->id);
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 + huffman_bound(n, 1u << f.S);
    *exact = false;
}

void
compress_fp8_scales(const rumor_codec *c,
                    int k,
                    float fr,
                    float *s1,
                    float *s2,
                    unsigned *M,
                    unsigned *E)
{
    struct s_fmt f = s_format(c->id);
    s_scales(k, fr, s1, s2);
    *M = f.M;
    *E = f.E;
}

rumor_err
compress_fp8_write(const rumor_codec *c,
                   const uint8_t *sym,
                   size_t n,
                   int k,
                   float fr,
                   const float *sample,
                   size_t m,
                   uint8_t *out,
                   size_t cap,
                   size_t *written)
{
    struct s_fmt f = s_format(c->id);
    /* Integer b keeps the original layout (p1 = 0, no f field). */
    bool real = c->fp_bias != COMPRESS_BIAS_INT;
    size_t head = RUMOR_COMPRESS_HEADER_BYTES + (real ? 4 : 0), got = 0;
    if (cap < head)
        return RUMOR_ETOOBIG;
    rumor_err rc;
    if (c->fp_code == COMPRESS_CODE_GENNORM && n > 0) {
        float val[256];
        uint8_t len[256];
        s_values(&f, k, fr, val);
        s_gennorm_lengths(sample, m, &f, val, len);
        rc = huffman_encode_lengths(sym,
                                    n,
                                    1u << f.S,
                                    len,
                                    out + head,
                                    cap - head,
                                    &got);
    } else {
        rc = huffman_encode(sym, n, 1u << f.S, out + head, cap - head, &got);
    }
    if (rc != RUMOR_OK)
        return rc;
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                (uint8_t)f.S,
                                real ? 1 : 0,
                                (uint32_t)n,
                                (uint32_t)(int32_t)k};
    compress_header_write(out, &h);
    if (real)
        compress_put_f32(out + RUMOR_COMPRESS_HEADER_BYTES, fr);
    *written = head + got;
    return RUMOR_OK;
}

/* bias=real's error on all of x where x is on the host. */
struct s_host_all {
    const rumor_codec *c;
    const float *x;
    size_t n;
};

static rumor_err
s_host_error_all(void *ctx, int k, float fr, double *err)
{
    const struct s_host_all *h = ctx;
    struct s_fmt f = s_format(h->c->id);
    struct s_sample *s = malloc(sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    *err = s_error_all(h->x, h->n, s, &f, k, fr);
    free(s);
    return RUMOR_OK;
}

static rumor_err
s_encode(const rumor_codec *c,
         const float *x,
         size_t n,
         uint64_t seed,
         uint64_t counter,
         uint8_t *out,
         size_t cap,
         size_t *written,
         float *approx)
{
    (void)seed;
    (void)counter;
    if (cap <
        RUMOR_COMPRESS_HEADER_BYTES + (c->fp_bias != COMPRESS_BIAS_INT ? 4 : 0))
        return RUMOR_ETOOBIG;
    uint8_t *sym = malloc(n ? n : 1);
    float *sample = malloc(S_SAMPLE * sizeof *sample);
    int k = 0;
    unsigned M = 0, E = 0;
    float fr = 1.0f, s1, s2;
    rumor_err rc = sym && sample ? RUMOR_OK : RUMOR_ENOMEM;
    size_t m = rc == RUMOR_OK ? compress_fp8_sample(x, n, sample) : 0;
    struct s_host_all all = {c, x, n};
    if (rc == RUMOR_OK)
        rc = compress_fp8_bias(c,
                               sample,
                               m,
                               compress_maxabs(x, n),
                               n,
                               s_host_error_all,
                               &all,
                               &k,
                               &fr);
    if (rc == RUMOR_OK) {
        compress_fp8_scales(c, k, fr, &s1, &s2, &M, &E);
        compress_fp8_symbols(x, n, s1, s2, M, E, sym);
        rc = compress_fp8_write(c, sym, n, k, fr, sample, m, out, cap, written);
    }
    if (rc == RUMOR_OK && approx != NULL) {
        struct s_fmt f = s_format(c->id);
        float val[256];
        s_values(&f, k, fr, val);
        for (size_t i = 0; i < n; i++)
            approx[i] = val[sym[i]];
    }
    free(sym);
    free(sample);
    return rc;
}

rumor_err
compress_fp8_read(const rumor_codec *c,
                  const uint8_t *in,
                  size_t len,
                  size_t n,
                  uint8_t **sym_out,
                  float val[256])
{
    struct s_fmt f = s_format(c->id);
    int32_t k = (int32_t)core_get_u32(in + 8);
    *sym_out = NULL;
    if (in[2] != f.S || in[3] > 1 || k < -S_BIAS_MAX || k > S_BIAS_MAX)
        return RUMOR_EPROTO;
    size_t head = RUMOR_COMPRESS_HEADER_BYTES + (in[3] ? 4 : 0);
    if (len < head)
        return RUMOR_EPROTO;
    float fr = 1.0f;
    if (in[3]) {
        fr = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES);
        if (!isfinite(fr))
            return RUMOR_ENUMERIC;
        if (!(fr >= 1.0f && fr < 2.0f))
            return RUMOR_EPROTO;
    }
    /* Every symbol takes at least one bit: a cheap bound before the
     * allocation sized by n. */
    size_t body = len - head;
    size_t table = (1u << f.S) / 2 + 4 * (HUFFMAN_STREAMS - 1);
    if (body < table || body - table < n / 8)
        return RUMOR_EPROTO;
    uint8_t *sym = malloc(n ? n : 1);
    if (sym == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = huffman_decode(in + head, body, 1u << f.S, sym, n);
    s_values(&f, k, fr, val);
    if (rc == RUMOR_OK && !compress_all_finite(val, 2u << (f.E + f.M)))
        rc = RUMOR_ENUMERIC; /* a bias too large for float */
    if (rc != RUMOR_OK)
        free(sym);
    else
        *sym_out = sym;
    return rc;
}

static rumor_err
s_decode(const rumor_codec *c,
         const uint8_t *in,
         size_t len,
         bool add,
         float alpha,
         float *y,
         size_t n)
{
    uint8_t *sym = NULL;
    float val[256];
    rumor_err rc = compress_fp8_read(c, in, len, n, &sym, val);
    if (rc != RUMOR_OK)
        return rc;
    if (add)
        for (size_t i = 0; i < n; i++)
            y[i] += alpha * val[sym[i]];
    else
        for (size_t i = 0; i < n; i++)
            y[i] = val[sym[i]];
    free(sym);
    return RUMOR_OK;
}

const struct compress_ops compress_fp8_ops = {s_size,
                                              s_encode,
                                              false,
                                              s_decode};
