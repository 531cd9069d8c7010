/*
 * QSGD with any number of levels s (Alistarh et al. 2017, section 3.1:
 * level l in 0..s by stochastic rounding of |v| s / ||v||) and the paper's
 * Elias coding of the quantized vector (section 3.2, "Code_s"): for each
 * non-zero entry, the Elias recursive (omega) code of its distance from
 * the previous non-zero (from one before the bucket's start for the
 * first), a sign bit, and the omega code of its level. A bucket ends with
 * the omega code of the distance to the position one past its end (the
 * paper leaves the end implicit; the decoder needs it). The fixed-width
 * form packs l | sign << W in W + 1 bits, W = bits of s.
 *
 * Plain C, one value at a time: the formats with s = 2^b - 1 (b <= 8) and
 * no gap coding keep quant.c's vector kernels and bytes; this path takes
 * what they cannot. The level is computed in double, so a large s keeps
 * the draw's 16 bits of resolution (float's 24 bits would leave 24 -
 * log2 s).
 */
#include "compress/compress_impl.h"
#include "core/bits.h"

#include <math.h>
#include <stdlib.h>

/* Omega codes here carry values below 2^25 (positions, levels). */
#define S_OMEGA_MAX_BITS 25

static unsigned
s_bitlen(uint32_t v)
{
    return 32u - (unsigned)__builtin_clz(v);
}

/* The len bits of v, most significant first into the LSB-first stream. */
static void
s_put_msb(struct core_bw *w, uint32_t v, unsigned len)
{
    uint32_t rev = 0;
    for (unsigned i = 0; i < len; i++)
        rev |= ((v >> i) & 1u) << (len - 1 - i);
    core_bw_put(w, rev, len);
}

unsigned
compress_omega_len(uint32_t k)
{
    unsigned len = 1;
    for (; k > 1; k = s_bitlen(k) - 1)
        len += s_bitlen(k);
    return len;
}

/* Elias omega of k >= 1: the groups k, bitlen(k) - 1, ... down to a group
 * for 2 or 3, each in binary, written outermost last, then a 0. */
static void
s_put_omega(struct core_bw *w, uint32_t k)
{
    uint32_t groups[8];
    unsigned ng = 0;
    for (; k > 1; k = s_bitlen(k) - 1)
        groups[ng++] = k;
    while (ng > 0) {
        ng--;
        s_put_msb(w, groups[ng], s_bitlen(groups[ng]));
    }
    core_bw_put(w, 0, 1);
}

/* Bit reader that counts what it consumed (for the canonical-end check). */
struct s_reader {
    struct core_br br;
    size_t used;
};

static uint32_t
s_get_msb(struct s_reader *r, unsigned len)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < len; i++)
        v = v << 1 | (uint32_t)core_br_get(&r->br, 1);
    r->used += len;
    return v;
}

/* One omega code: false on overrun or a value of more than 25 bits. */
static bool
s_get_omega(struct s_reader *r, uint32_t *k)
{
    uint32_t v = 1;
    while (s_get_msb(r, 1) == 1) {
        if (v >= S_OMEGA_MAX_BITS)
            return false;
        v = 1u << v | s_get_msb(r, v);
    }
    *k = v;
    return !r->br.overrun;
}

/* Layout of a levels payload (p0 = 0): nb norms, then s, then bits. */
static size_t
s_head(size_t n, size_t bucket)
{
    return RUMOR_COMPRESS_HEADER_BYTES + 4 * compress_buckets(n, bucket) + 4;
}

void
compress_qsgd_levels_size(const rumor_codec *c,
                          size_t n,
                          size_t *bytes,
                          bool *exact)
{
    size_t nb = compress_buckets(n, c->bucket), bits = 0;
    if (c->qcode == COMPRESS_QCODE_ELIAS) {
        /* A gap g costs at most g + 2 bits (omega), the gaps of a bucket
         * of m values sum to m + 1, a level at most omega(s): at most
         * m (4 + omega(s)) + 3 bits per bucket (docs/protocol.md). */
        bits = n * (4 + compress_omega_len(c->levels)) + 3 * nb;
        *exact = false;
    } else {
        bits = n * (s_bitlen(c->levels) + 1);
        *exact = true;
    }
    *bytes = s_head(n, c->bucket) + (bits + 7) / 8;
}

/* Draws first .. first + m - 1 of the stream (seed, counter) into r, by
 * the vector generator a window at a time (the reference would spend
 * 30x the quantizer's time on them). */
static void
s_fill_draws(uint64_t seed,
             uint64_t counter,
             size_t first,
             uint16_t *r,
             size_t m)
{
    enum { W = 4096 };
    uint8_t hi[W + 16], lo[(W + 16) / 16 + 1];
    for (size_t i0 = 0; i0 < m; i0 += W) {
        size_t mm = m - i0 < W ? m - i0 : W;
        size_t at = first + i0, base = at & ~(size_t)15, phase = at - base;
        compress_draw_bytes(seed, counter, base, hi, lo, mm + phase);
        compress_join_draws(hi + phase, lo, phase, mm, r + i0);
    }
}

/* One bucket's codes into w; approx (may be NULL) gets the decoded values. */
static void
s_encode_bucket(const rumor_codec *c,
                const float *v,
                size_t m,
                float norm,
                const uint16_t *r,
                struct core_bw *w,
                float *approx)
{
    uint32_t s = c->levels;
    unsigned width = s_bitlen(s);
    double inv = norm >= COMPRESS_NORM_MIN ? (double)s / (double)norm : 0;
    float scale = norm / (float)s;
    size_t prev = 0; /* one past the last non-zero (the first gap from 0) */
    for (size_t i = 0; i < m; i++) {
        uint32_t l = compress_qsgd_level(v[i], inv, r[i], s);
        uint32_t neg = l > 0 && signbit(v[i]);
        if (approx != NULL) {
            float q = (float)l * scale;
            approx[i] = neg ? -q : q;
        }
        if (c->qcode != COMPRESS_QCODE_ELIAS) {
            core_bw_put(w, l | neg << width, width + 1);
        } else if (l > 0) {
            s_put_omega(w, (uint32_t)(i + 1 - prev));
            core_bw_put(w, neg, 1);
            s_put_omega(w, l);
            prev = i + 1;
        }
    }
    if (c->qcode == COMPRESS_QCODE_ELIAS)
        s_put_omega(w, (uint32_t)(m + 1 - prev));
}

void
compress_qsgd_omega_recode(const rumor_codec *c,
                           const uint8_t *fixed,
                           size_t n,
                           struct core_bw *w)
{
    unsigned width = s_bitlen(c->levels);
    struct core_br r;
    core_br_init(&r, fixed, (n * (width + 1) + 7) / 8);
    for (size_t start = 0; start < n; start += c->bucket) {
        size_t m = n - start < c->bucket ? n - start : c->bucket, prev = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t code = (uint32_t)core_br_peek(&r, width + 1);
            core_br_skip(&r, width + 1);
            uint32_t l = code & ((1u << width) - 1);
            if (l > 0) {
                s_put_omega(w, (uint32_t)(i + 1 - prev));
                core_bw_put(w, code >> width, 1);
                s_put_omega(w, l);
                prev = i + 1;
            }
        }
        s_put_omega(w, (uint32_t)(m + 1 - prev));
    }
}

rumor_err
compress_qsgd_levels_encode(const rumor_codec *c,
                            const float *x,
                            size_t n,
                            uint64_t seed,
                            uint64_t counter,
                            uint8_t *out,
                            size_t cap,
                            size_t *written,
                            float *approx)
{
    size_t nb = compress_buckets(n, c->bucket), head = s_head(n, c->bucket);
    size_t need = 0;
    bool exact = false;
    compress_qsgd_levels_size(c, n, &need, &exact);
    if (cap < (exact ? need : head))
        return RUMOR_ETOOBIG;
    uint16_t *r = malloc((c->bucket < n ? c->bucket : n) * sizeof *r + 1);
    if (r == NULL)
        return RUMOR_ENOMEM;
    struct core_bw w;
    core_bw_init(&w, out + head, cap - head);
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < nb && rc == RUMOR_OK; k++) {
        size_t start = k * c->bucket;
        size_t m = n - start < c->bucket ? n - start : c->bucket;
        float norm = 0, inv = 0;
        if (!compress_bucket_scale(sqrt(compress_sumsq(x + start, m)),
                                   c->levels,
                                   &norm,
                                   &inv)) {
            rc = RUMOR_ENUMERIC;
            break;
        }
        compress_put_f32(out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k, norm);
        s_fill_draws(seed, counter, start, r, m);
        s_encode_bucket(c,
                        x + start,
                        m,
                        norm,
                        r,
                        &w,
                        approx != NULL ? approx + start : NULL);
    }
    free(r);
    if (rc != RUMOR_OK)
        return rc;
    size_t body = core_bw_finish(&w, out + head);
    if (body == SIZE_MAX)
        return RUMOR_ETOOBIG;
    core_put_u32(out + head - 4, c->levels);
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                0,
                                (uint8_t)c->qcode,
                                (uint32_t)n,
                                (uint32_t)c->bucket};
    compress_header_write(out, &h);
    *written = head + body;
    return RUMOR_OK;
}

/* y[i] (= or +=) alpha * (+-l scale), unless dry. */
static void
s_put_value(float *y,
            uint32_t l,
            uint32_t neg,
            float scale,
            bool add,
            float alpha)
{
    float q = (float)l * scale;
    q = neg ? -q : q;
    *y = add ? *y + alpha * q : q;
}

/* One fixed-width bucket: false on a level above s or a "-0". */
static bool
s_fixed_bucket(struct s_reader *rd,
               uint32_t s,
               float scale,
               bool dry,
               bool add,
               float alpha,
               float *y,
               size_t m)
{
    unsigned width = s_bitlen(s);
    for (size_t i = 0; i < m; i++) {
        uint32_t l = (uint32_t)core_br_get(&rd->br, width);
        uint32_t neg = (uint32_t)core_br_get(&rd->br, 1);
        rd->used += width + 1;
        if (l > s || (l == 0 && neg))
            return false;
        if (!dry)
            s_put_value(y + i, l, neg, scale, add, alpha);
    }
    return !rd->br.overrun;
}

/* One gap-coded bucket: false on a position past the end or a level
 * above s. Zeros between the non-zeros are written (not added). */
static bool
s_gap_bucket(struct s_reader *rd,
             uint32_t s,
             float scale,
             bool dry,
             bool add,
             float alpha,
             float *y,
             size_t m)
{
    size_t at = 0; /* next position not yet written */
    for (;;) {
        uint32_t g = 0, l = 0;
        if (!s_get_omega(rd, &g) || g > m + 1 - at)
            return false;
        size_t i = at + g - 1;
        if (!dry && !add)
            memset(y + at, 0, (i - at) * sizeof *y);
        if (i == m)
            return true;
        uint32_t neg = s_get_msb(rd, 1);
        if (!s_get_omega(rd, &l) || l > s)
            return false;
        if (!dry)
            s_put_value(y + i, l, neg, scale, add, alpha);
        at = i + 1;
    }
}

static rumor_err
s_levels_pass(const uint8_t *in,
              size_t len,
              bool dry,
              bool add,
              float alpha,
              float *y,
              size_t n)
{
    uint32_t bucket = core_get_u32(in + 8);
    size_t nb = compress_buckets(n, bucket), head = s_head(n, bucket);
    uint32_t s = core_get_u32(in + head - 4);
    struct s_reader rd = {.used = 0};
    core_br_init(&rd.br, in + head, len - head);
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * bucket;
        size_t m = n - start < bucket ? n - start : bucket;
        float scale =
            compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k) /
            (float)s;
        if (!isfinite((float)s * scale))
            return RUMOR_ENUMERIC;
        bool ok =
            in[3] == COMPRESS_QCODE_ELIAS
                ? s_gap_bucket(&rd, s, scale, dry, add, alpha, y + start, m)
                : s_fixed_bucket(&rd, s, scale, dry, add, alpha, y + start, m);
        if (!ok)
            return RUMOR_EPROTO;
    }
    /* Canonical end: the stream fills its last byte, zero-padded. */
    if ((rd.used + 7) / 8 != len - head ||
        (rd.used % 8 != 0 && in[len - 1] >> (rd.used % 8) != 0))
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

rumor_err
compress_qsgd_levels_header(const uint8_t *in,
                            size_t len,
                            size_t n,
                            uint32_t *s,
                            uint32_t *bucket,
                            size_t *head)
{
    *bucket = core_get_u32(in + 8);
    if (*bucket < 1 || *bucket > (1u << 24) ||
        (in[3] != COMPRESS_QCODE_FIXED && in[3] != COMPRESS_QCODE_ELIAS))
        return RUMOR_EPROTO;
    size_t nb = compress_buckets(n, *bucket);
    if ((len - RUMOR_COMPRESS_HEADER_BYTES) / 4 < nb + 1)
        return RUMOR_EPROTO;
    *head = s_head(n, *bucket);
    *s = core_get_u32(in + *head - 4);
    if (*s < 1 || *s > COMPRESS_QSGD_MAX_LEVELS)
        return RUMOR_EPROTO;
    return compress_norms_check(in, nb);
}

size_t
compress_qsgd_omega_positions(const uint8_t *in,
                              size_t len,
                              size_t n,
                              uint32_t *idx)
{
    uint32_t bucket = core_get_u32(in + 8);
    size_t nb = compress_buckets(n, bucket), head = s_head(n, bucket), k = 0;
    struct s_reader rd = {.used = 0};
    core_br_init(&rd.br, in + head, len - head);
    for (size_t b = 0; b < nb; b++) {
        size_t start = b * bucket;
        size_t m = n - start < bucket ? n - start : bucket, at = 0;
        for (;;) {
            uint32_t g = 0, l = 0;
            (void)s_get_omega(&rd, &g); /* the decoder accepted the stream */
            size_t i = at + g - 1;
            if (i == m)
                break;
            (void)s_get_msb(&rd, 1);
            (void)s_get_omega(&rd, &l);
            idx[k++] = (uint32_t)(start + i);
            at = i + 1;
        }
    }
    return k;
}

uint32_t
compress_qsgd_level(float v, double inv, uint16_t r, uint32_t s)
{
    double a = fabs((double)v) * inv + ((double)r + 0.5) * 0x1.0p-16;
    return a >= (double)s ? s : (uint32_t)a;
}

rumor_err
compress_qsgd_levels_decode(const uint8_t *in,
                            size_t len,
                            bool add,
                            float alpha,
                            float *y,
                            size_t n)
{
    uint32_t s = 0, bucket = 0;
    size_t head = 0;
    rumor_err hrc = compress_qsgd_levels_header(in, len, n, &s, &bucket, &head);
    if (hrc != RUMOR_OK)
        return hrc;
    /* Validate first when adding, so y is unchanged on error. */
    rumor_err rc =
        add ? s_levels_pass(in, len, true, add, alpha, y, n) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = s_levels_pass(in, len, false, add, alpha, y, n);
    return rc;
}
