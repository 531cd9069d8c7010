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
 * The bias: eq. 12 asks for the b minimising the L2 error; the paper fits
 * polynomials in the GenNorm shape (eqs. 15, 16) to avoid the search. We
 * search instead, over integer b from the one that just fits max |x|
 * downwards (smaller b trades clipping of the few largest values for
 * resolution of the many small ones), measuring the squared error on a
 * strided sample of at most 16384 values (all values when n is smaller):
 * exact, cheap (six candidates), and with no distribution assumption.
 *
 * Symbols (sign << (E+M) | c, one byte each) then go through the canonical
 * Huffman coder (huffman.c) whose code lengths travel in the payload.
 */
#include "compress/compress_impl.h"
#include "compress/huffman.h"

#include <math.h>
#include <stdlib.h>

#define S_SAMPLE   16384
#define S_BIAS_MAX 200 /* |b| bound accepted from the wire */

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

/* The decoded value of every symbol under bias b. */
static void
s_values(const struct s_fmt *f, int b, float *val)
{
    for (uint32_t c = 0; c <= f->cmax; c++) {
        uint32_t E = c >> f->M, m = c & ((1u << f->M) - 1);
        double mag =
            E == 0 ? ldexp((double)m, 1 - (int)f->M)
                   : ldexp((double)((1u << f->M) + m), (int)E - (int)f->M);
        float v = (float)ldexp(mag, b);
        val[c] = v;
        val[c | (1u << (f->E + f->M))] = -v;
    }
}

/* Two power-of-two factors whose product is 2^-b, each a normal float. */
static void
s_scales(int b, float *s1, float *s2)
{
    int h = -b / 2;
    *s1 = ldexpf(1.0f, h);
    *s2 = ldexpf(1.0f, -b - h);
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

static int
s_choose_bias(const float *x, size_t n, const struct s_fmt *f)
{
    float mx = compress_maxabs(x, n);
    if (mx == 0)
        return 0;
    int e = 0;
    frexpf(mx, &e); /* mx in [2^(e-1), 2^e) */
    /* The largest code is just under 2^(2^E + 1) 2^b (E exponent bits):
     * b_fit makes max |x| fit without clipping. */
    int b_fit = e - (1 << f->E);
    size_t m = n < S_SAMPLE ? n : S_SAMPLE;
    double best = INFINITY;
    int best_b = b_fit;
    float val[256];
    for (int b = b_fit + 1; b >= b_fit - 4; b--) {
        float s1, s2;
        s_scales(b, &s1, &s2);
        s_values(f, b, val);
        double err = 0;
        for (size_t j = 0; j < m; j++) {
            float v = x[(size_t)((uint64_t)j * n / m)];
            double d = (double)v - val[s_symbol(v, s1, s2, f)];
            err += d * d;
        }
        if (err < best) {
            best = err;
            best_b = b;
        }
    }
    return best_b;
}

static void
s_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    struct s_fmt f = s_format(c->id);
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + huffman_bound(n, 1u << f.S);
    *exact = false;
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
    struct s_fmt f = s_format(c->id);
    uint8_t *sym = malloc(n ? n : 1);
    if (sym == NULL)
        return RUMOR_ENOMEM;
    int b = s_choose_bias(x, n, &f);
    float s1, s2, val[256];
    s_scales(b, &s1, &s2);
    s_values(&f, b, val);
    compress_fp8_symbols(x, n, s1, s2, f.M, f.E, sym);
    size_t got = 0;
    rumor_err rc = huffman_encode(sym,
                                  n,
                                  1u << f.S,
                                  out + RUMOR_COMPRESS_HEADER_BYTES,
                                  cap - RUMOR_COMPRESS_HEADER_BYTES,
                                  &got);
    if (rc == RUMOR_OK) {
        struct compress_header h = {(uint8_t)c->id,
                                    RUMOR_COMPRESS_VERSION,
                                    (uint8_t)f.S,
                                    0,
                                    (uint32_t)n,
                                    (uint32_t)(int32_t)b};
        compress_header_write(out, &h);
        *written = RUMOR_COMPRESS_HEADER_BYTES + got;
        if (approx != NULL)
            for (size_t i = 0; i < n; i++)
                approx[i] = val[sym[i]];
    }
    free(sym);
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
    struct s_fmt f = s_format(c->id);
    int32_t b = (int32_t)compress_get_u32(in + 8);
    if (in[2] != f.S || in[3] != 0 || b < -S_BIAS_MAX || b > S_BIAS_MAX)
        return RUMOR_EPROTO;
    /* Every symbol takes at least one bit: a cheap bound before the
     * allocation sized by n. */
    size_t body = len - RUMOR_COMPRESS_HEADER_BYTES;
    size_t table = (1u << f.S) / 2 + 4 * (HUFFMAN_STREAMS - 1);
    if (body < table || body - table < n / 8)
        return RUMOR_EPROTO;
    uint8_t *sym = malloc(n ? n : 1);
    if (sym == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = huffman_decode(in + RUMOR_COMPRESS_HEADER_BYTES,
                                  body,
                                  1u << f.S,
                                  sym,
                                  n);
    float val[256];
    s_values(&f, b, val);
    if (rc == RUMOR_OK && !compress_all_finite(val, 2u << (f.E + f.M)))
        rc = RUMOR_ENUMERIC; /* a bias too large for float */
    if (rc == RUMOR_OK) {
        if (add)
            for (size_t i = 0; i < n; i++)
                y[i] += alpha * val[sym[i]];
        else
            for (size_t i = 0; i < n; i++)
                y[i] = val[sym[i]];
    }
    free(sym);
    return rc;
}

const struct compress_ops compress_fp8_ops = {s_size,
                                              s_encode,
                                              false,
                                              s_decode};
