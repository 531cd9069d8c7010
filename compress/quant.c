/*
 * Per-bucket stochastic and scaled quantizers: QSGD, TernGrad, scaled sign
 * and natural compression.
 *
 * QSGD (Alistarh et al. 2017, section 3.1): per bucket the 2-norm ||v||,
 * and per value the sign and a level l in 0..s (s = 2^bits - 1) drawn by
 * stochastic rounding of |v| s / ||v||, so E[l] ||v|| / s = |v| (unbiased).
 * Levels are packed at bits+1 bits (sign above the level) or, with
 * elias=1, Elias-gamma coded (l + 1) followed by a sign bit when l > 0
 * (the "Elias coding" of the paper's section 3.2: small levels dominate).
 * TernGrad (Wen et al. 2017): the same rounding with s = 1 and the bucket's
 * max |v| as scale, 2 bits per value (00 zero, 01 +1, 11 -1; a sign bit
 * with level 0 is rejected as non-canonical, in QSGD too).
 * Scaled sign (EF-signSGD, Karimireddy et al. 2019): sign bits plus the
 * bucket's mean |v|; deterministic and biased, meant for error feedback.
 * Natural compression (Horvath et al. 2019): |v| in [2^e, 2^(e+1)) goes to
 * 2^e or 2^(e+1) with probabilities that make it unbiased; the result is
 * the float exponent byte plus a sign bit (9 bits per value). On the float
 * bit pattern this is "add 1 to the exponent field with probability
 * mantissa / 2^23", which also covers subnormals (0 or 2^-126).
 *
 * Random numbers: value i of the vector rounds with draw i of
 * compress_draws (seed, counter) (kernels.c: a Philox byte per value as
 * the high byte, a low byte shared by 16 values), so the bytes depend only
 * on (x, seed, counter). Limits: a bucket whose norm or max overflows float
 * is clamped to FLT_MAX, and natural compression of |v| >= 2^127 returns
 * 2^127 (the next power is Inf); both are then biased, and both are
 * unreachable for gradients.
 */
#include "compress/bits.h"
#include "compress/compress_impl.h"

#include <math.h>

#define S_CHUNK 4096

/* --- shared -------------------------------------------------------------- */

/* A window of the draw stream (seed, counter): draws lo .. hi - 1 in r.
 * Buckets take their draws from it in order; it is refilled S_CHUNK draws
 * at a time, so small buckets do not each pay a generator call (the
 * vector generator works in groups of 256). */
struct s_drawbuf {
    uint64_t seed, counter;
    size_t lo, hi;
    uint16_t r[S_CHUNK + 16];
};

static void
s_drawbuf_init(struct s_drawbuf *d, uint64_t seed, uint64_t counter)
{
    d->seed = seed;
    d->counter = counter;
    d->lo = 0;
    d->hi = 0;
}

/* Draws start .. start + m - 1 (m <= S_CHUNK - 16) of the stream, within
 * n draws; returns the pointer to draw start. */
static const uint16_t *
s_draws(struct s_drawbuf *d, size_t start, size_t m, size_t n)
{
    if (start < d->lo || start + m > d->hi) {
        size_t lo = start & ~(size_t)15;
        size_t hi = lo + S_CHUNK;
        size_t end = (n + 15) & ~(size_t)15;
        hi = hi < end ? hi : end;
        compress_draws(d->seed, d->counter, lo, d->r, hi - lo);
        d->lo = lo;
        d->hi = hi;
    }
    return d->r + (start - d->lo);
}

/* Asks for x[from .. to) in cache ahead of use: the bucket loops compute
 * for a while between reads, so the hardware prefetcher (driven by the
 * reads) falls behind and each bucket would start with a DRAM stall. */
static void
s_prefetch(const float *x, size_t from, size_t to)
{
    for (size_t i = from & ~(size_t)15; i < to; i += 16)
        __builtin_prefetch(x + i);
}

/* Values read ahead of the bucket being quantized. */
#define S_AHEAD 2048

/* Stochastic rounding of a = |v| * inv to floor(a + u), u in (0, 1) from
 * the 16-bit draw r, clamped to s: compress_levels_ref's arithmetic. */
static inline uint32_t
s_round(float v, float inv, uint16_t r, uint32_t s)
{
    float a = fabsf(v) * inv + ((float)r + 0.5f) * 0x1.0p-16f;
    uint32_t l = (uint32_t)a;
    return l > s ? s : l;
}

static bool
s_check_bucket(uint32_t bucket)
{
    return bucket >= 1 && bucket <= (1u << 24);
}

/* --- QSGD and TernGrad (one implementation, two scale rules) -------------- */

static unsigned
s_qsgd_width(const rumor_codec *c)
{
    return c->id == RUMOR_CODEC_TERNGRAD ? 2 : c->bits + 1;
}

static void
s_qsgd_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    size_t nb = compress_buckets(n, c->bucket);
    size_t bits_per = s_qsgd_width(c);
    *exact = true;
    if (c->id == RUMOR_CODEC_QSGD && c->elias) {
        bits_per = 2 * c->bits + 2; /* gamma(l+1) <= 2 bits + 1, sign */
        *exact = false;
    }
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 * nb + (n * bits_per + 7) / 8;
}

/* Codes waiting to be packed: whole groups of eight go out as soon as they
 * are complete, so the stream position of codes[0] is always a multiple of
 * eight values (byte-aligned: eight w-bit codes are w bytes). */
struct s_packer {
    uint8_t codes[S_CHUNK + 8];
    size_t pending;     /* codes waiting */
    uint8_t *out;       /* where the next group goes */
    const uint8_t *end; /* end of the payload buffer */
    unsigned w;         /* bits per code (<= 8) */
};

static void
s_packer_flush(struct s_packer *p, bool last)
{
    size_t groups = p->pending / 8;
    compress_pack(p->codes, groups, p->w, p->out, p->end);
    p->out += groups * p->w;
    size_t rest = p->pending - groups * 8;
    memmove(p->codes, p->codes + groups * 8, rest);
    p->pending = rest;
    if (last && rest > 0) {
        uint64_t bits = 0;
        for (size_t j = 0; j < rest; j++)
            bits |= (uint64_t)p->codes[j] << (j * p->w);
        size_t nbytes = (rest * p->w + 7) / 8;
        for (size_t k = 0; k < nbytes; k++)
            p->out[k] = (uint8_t)(bits >> (8 * k));
        p->out += nbytes;
        p->pending = 0;
    }
}

/* Elias-gamma code of l + 1 (L zeros, a one, the low L bits), then the
 * sign bit when l > 0. */
static void
s_put_elias(struct compress_bw *w, uint32_t l, uint32_t neg)
{
    uint32_t g = l + 1;
    unsigned L = 31u - (unsigned)__builtin_clz(g);
    compress_bw_put(w, 1u << L, L + 1);
    compress_bw_put(w, g & ((1u << L) - 1), L);
    if (l > 0)
        compress_bw_put(w, neg, 1);
}

/* Whole buckets of `bucket` values among the `left` values from a
 * bucket start that one call of compress_quant_buckets takes (their draws
 * fit one window of the draw buffer); 0 when the bucket does not suit it
 * (not a multiple of 8 values, or longer than a window). */
static size_t
s_fused_buckets(uint32_t bucket, size_t left)
{
    if (bucket % 8 != 0 || bucket > S_CHUNK - 16)
        return 0;
    size_t fit = (S_CHUNK - 16) / bucket, whole = left / bucket;
    return whole < fit ? whole : fit;
}

static rumor_err
s_qsgd_encode(const rumor_codec *c,
              const float *x,
              size_t n,
              uint64_t seed,
              uint64_t counter,
              uint8_t *out,
              size_t cap,
              size_t *written,
              float *approx)
{
    bool tern = c->id == RUMOR_CODEC_TERNGRAD;
    bool elias = c->elias && !tern;
    uint32_t s = tern ? 1u : (1u << c->bits) - 1;
    unsigned b = tern ? 1 : c->bits;
    unsigned w = b + 1;
    size_t nb = compress_buckets(n, c->bucket);
    size_t head = RUMOR_COMPRESS_HEADER_BYTES + 4 * nb;
    size_t need = 0;
    bool exact = false;
    s_qsgd_size(c, n, &need, &exact);
    if (cap < (exact ? need : head))
        return RUMOR_ETOOBIG;
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                (uint8_t)(tern ? 0 : c->bits),
                                (uint8_t)elias,
                                (uint32_t)n,
                                (uint32_t)c->bucket};
    compress_header_write(out, &h);
    /* With bits = 8 a code has 9 bits: the bit writer; other fixed widths
     * go through the group packer, Elias codes through the bit writer. */
    struct s_packer pk;
    pk.pending = 0;
    pk.out = out + head;
    pk.end = out + cap;
    pk.w = w;
    struct compress_bw w9;
    compress_bw_init(&w9, out + head, cap - head);
    struct s_drawbuf draws;
    s_drawbuf_init(&draws, seed, counter);
    size_t ahead = 0; /* x[0 .. ahead) was asked for */
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * c->bucket;
        size_t m = n - start < c->bucket ? n - start : c->bucket;
        const float *v = x + start;
        /* Runs of whole buckets with packed output: the fused kernel. */
        size_t run = elias || approx != NULL || b == 8 || pk.pending != 0
                         ? 0
                         : s_fused_buckets(c->bucket, n - start);
        if (run > 0) {
            const uint16_t *r = s_draws(&draws, start, run * c->bucket, n);
            if (!compress_quant_buckets(v,
                                        run,
                                        c->bucket,
                                        s,
                                        b,
                                        tern,
                                        r,
                                        out + RUMOR_COMPRESS_HEADER_BYTES +
                                            4 * k,
                                        pk.out,
                                        pk.end))
                return RUMOR_ENUMERIC;
            pk.out += run * c->bucket / 8 * w;
            k += run - 1;
            continue;
        }
        size_t want = start + m + S_AHEAD < n ? start + m + S_AHEAD : n;
        if (want > ahead) {
            s_prefetch(x, ahead > start + m ? ahead : start + m, want);
            ahead = want;
        }
        double acc =
            tern ? (double)compress_maxabs(v, m) : sqrt(compress_sumsq(v, m));
        float norm = 0, inv = 0;
        if (!compress_bucket_scale(acc, s, &norm, &inv))
            return RUMOR_ENUMERIC;
        compress_put_f32(out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k, norm);
        float scale = norm / (float)s;
        for (size_t i0 = 0; i0 < m; i0 += S_CHUNK - 16) {
            size_t mm = m - i0 < S_CHUNK - 16 ? m - i0 : S_CHUNK - 16;
            const uint16_t *r = s_draws(&draws, start + i0, mm, n);
            float *ap = approx != NULL ? approx + start + i0 : NULL;
            if (b == 8) { /* 9-bit codes do not fit the byte kernels */
                for (size_t i = 0; i < mm; i++) {
                    uint32_t l = s_round(v[i0 + i], inv, r[i], s);
                    uint32_t neg = l > 0 && signbit(v[i0 + i]);
                    if (elias)
                        s_put_elias(&w9, l, neg);
                    else
                        compress_bw_put(&w9, l | neg << 8, 9);
                    if (ap != NULL) {
                        float q = (float)l * scale;
                        ap[i] = neg ? -q : q;
                    }
                }
                continue;
            }
            /* Byte-aligned whole groups with no approximation wanted
             * (buckets of a multiple of 8): levels straight to bits; a
             * last partial group goes through the packer. */
            size_t whole = mm & ~(size_t)7;
            if (!elias && ap == NULL && pk.pending == 0 &&
                (start + i0) % 8 == 0) {
                compress_levels_packed(v + i0,
                                       whole,
                                       inv,
                                       s,
                                       b,
                                       r,
                                       pk.out,
                                       pk.end);
                pk.out += whole / 8 * w;
                compress_levels(v + i0 + whole,
                                mm - whole,
                                inv,
                                s,
                                b,
                                r + whole,
                                pk.codes);
                pk.pending = mm - whole;
                continue;
            }
            uint8_t *codes = pk.codes + pk.pending;
            compress_levels(v + i0, mm, inv, s, b, r, codes);
            if (ap != NULL)
                for (size_t i = 0; i < mm; i++) {
                    float q = (float)(codes[i] & s) * scale;
                    ap[i] = codes[i] >> b ? -q : q;
                }
            if (elias) {
                for (size_t i = 0; i < mm; i++)
                    s_put_elias(&w9, codes[i] & s, codes[i] >> b);
            } else {
                pk.pending += mm;
                s_packer_flush(&pk, false);
            }
        }
    }
    size_t body = 0;
    if (elias || w == 9) {
        body = compress_bw_finish(&w9, out + head);
        if (body == SIZE_MAX)
            return RUMOR_ETOOBIG;
    } else {
        s_packer_flush(&pk, true);
        body = (size_t)(pk.out - (out + head));
    }
    *written = head + body;
    return RUMOR_OK;
}

/* Elias-gamma level stream: decodes (or with dry, only validates). */
static rumor_err
s_elias_pass(const uint8_t *in,
             size_t len,
             size_t head,
             unsigned b,
             uint32_t bucket,
             bool dry,
             bool add,
             float alpha,
             float *y,
             size_t n)
{
    uint32_t s = (1u << b) - 1;
    size_t nb = compress_buckets(n, bucket);
    struct compress_br r;
    compress_br_init(&r, in + head, len - head);
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * bucket;
        size_t m = n - start < bucket ? n - start : bucket;
        float scale =
            compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k) /
            (float)s;
        for (size_t i = 0; i < m; i++) {
            uint64_t win = compress_br_peek(&r, 32);
            unsigned L = win == 0 ? 32u : (unsigned)__builtin_ctzll(win);
            if (L > b)
                return RUMOR_EPROTO;
            compress_br_skip(&r, L + 1);
            uint32_t l = ((1u << L) | (uint32_t)compress_br_get(&r, L)) - 1;
            if (l > s)
                return RUMOR_EPROTO;
            uint32_t neg = l > 0 ? (uint32_t)compress_br_get(&r, 1) : 0;
            if (r.overrun)
                return RUMOR_EPROTO;
            float q = (float)l * scale;
            q = neg ? -q : q;
            if (!isfinite(q)) /* level times a norm near FLT_MAX */
                return RUMOR_ENUMERIC;
            if (!dry)
                y[start + i] = add ? y[start + i] + alpha * q : q;
        }
    }
    if (compress_br_used(&r, in + head) != len - head)
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

/* Fixed-width stream: unpacks chunk by chunk, rejects the "-0" code
 * (level 0 with the sign bit: never written), and (unless dry) writes y. */
static rumor_err
s_fixed_pass(const uint8_t *in,
             size_t len,
             size_t head,
             unsigned b,
             uint32_t bucket,
             bool dry,
             bool add,
             float alpha,
             float *y,
             size_t n)
{
    uint32_t s = (1u << b) - 1;
    unsigned w = b + 1;
    const uint8_t *body = in + head, *end = in + len;
    uint8_t codes[S_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += S_CHUNK) {
        size_t mm = n - i0 < S_CHUNK ? n - i0 : S_CHUNK;
        const uint8_t *at = body + i0 / 8 * w;
        if (w == 9) { /* bits = 8: a 9-bit code, the scalar reader */
            struct compress_br r;
            compress_br_init(&r, at, (size_t)(end - at));
            for (size_t i = 0; i < mm; i++) {
                uint32_t code = (uint32_t)compress_br_get(&r, 9);
                size_t j = i0 + i;
                if (code == 256u) /* "-0": not canonical */
                    return RUMOR_EPROTO;
                float norm = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES +
                                              4 * (j / bucket));
                float q = (float)(code & s) * (norm / (float)s);
                q = code >> 8 ? -q : q;
                if (!isfinite(q))
                    return RUMOR_ENUMERIC;
                if (!dry)
                    y[j] = add ? y[j] + alpha * q : q;
            }
            continue;
        }
        size_t groups = (mm + 7) / 8;
        compress_unpack(at, end, groups, w, codes);
        if (memchr(codes, 1 << b, mm) != NULL) /* "-0": not canonical */
            return RUMOR_EPROTO;
        /* Walk the bucket segments of this chunk. */
        for (size_t i = 0; i < mm;) {
            size_t j = i0 + i, kb = j / bucket;
            size_t seg = (kb + 1) * (size_t)bucket - j;
            seg = seg < mm - i ? seg : mm - i;
            float norm =
                compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * kb);
            float scale = norm / (float)s;
            if (!isfinite((float)s * scale))
                return RUMOR_ENUMERIC;
            if (!dry)
                compress_dequant(codes + i, seg, b, scale, add, alpha, y + j);
            i += seg;
        }
    }
    return RUMOR_OK;
}

static rumor_err
s_qsgd_decode(const rumor_codec *c,
              const uint8_t *in,
              size_t len,
              bool add,
              float alpha,
              float *y,
              size_t n)
{
    bool tern = c->id == RUMOR_CODEC_TERNGRAD;
    uint32_t bucket = compress_get_u32(in + 8);
    if (!s_check_bucket(bucket) || in[3] > (tern ? 0 : 1) ||
        (tern ? in[2] != 0 : (in[2] < 1 || in[2] > 8)))
        return RUMOR_EPROTO;
    unsigned b = tern ? 1 : in[2];
    size_t nb = compress_buckets(n, bucket);
    if ((len - RUMOR_COMPRESS_HEADER_BYTES) / 4 < nb)
        return RUMOR_EPROTO;
    for (size_t k = 0; k < nb; k++) {
        float norm = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k);
        if (!isfinite(norm))
            return RUMOR_ENUMERIC;
        if (norm < 0)
            return RUMOR_EPROTO;
    }
    size_t head = RUMOR_COMPRESS_HEADER_BYTES + 4 * nb;
    bool elias = !tern && in[3] == 1;
    if (elias) {
        /* Validate first when adding, so y is unchanged on error. */
        rumor_err rc = RUMOR_OK;
        if (add)
            rc = s_elias_pass(in, len, head, b, bucket, true, add, alpha, y, n);
        if (rc == RUMOR_OK)
            rc =
                s_elias_pass(in, len, head, b, bucket, false, add, alpha, y, n);
        return rc;
    }
    if (len - head != (n * (b + 1) + 7) / 8)
        return RUMOR_EPROTO;
    rumor_err rc = RUMOR_OK;
    if (add) /* validate first, so y is unchanged on error */
        rc = s_fixed_pass(in, len, head, b, bucket, true, add, alpha, y, n);
    if (rc == RUMOR_OK)
        rc = s_fixed_pass(in, len, head, b, bucket, false, add, alpha, y, n);
    return rc;
}

const struct compress_ops compress_qsgd_ops = {s_qsgd_size,
                                               s_qsgd_encode,
                                               true,
                                               s_qsgd_decode};
const struct compress_ops compress_terngrad_ops = {s_qsgd_size,
                                                   s_qsgd_encode,
                                                   true,
                                                   s_qsgd_decode};

/* --- scaled sign ------------------------------------------------------------
 */

static void
s_sign_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 * compress_buckets(n, c->bucket) +
             (n + 7) / 8;
    *exact = true;
}

static rumor_err
s_sign_encode(const rumor_codec *c,
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
    size_t need = 0;
    bool exact = false;
    s_sign_size(c, n, &need, &exact);
    if (cap < need)
        return RUMOR_ETOOBIG;
    size_t nb = compress_buckets(n, c->bucket);
    uint8_t *scales = out + RUMOR_COMPRESS_HEADER_BYTES;
    uint8_t *bits = scales + 4 * nb;
    uint8_t tail[S_CHUNK / 8 + 1];
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * c->bucket;
        size_t m = n - start < c->bucket ? n - start : c->bucket;
        double sum = 0;
        /* Sign bits of a bucket start mid-byte unless start % 8 == 0: pack
         * whole bytes directly, the rest through tail. */
        for (size_t i0 = 0; i0 < m; i0 += S_CHUNK) {
            size_t mm = m - i0 < S_CHUNK ? m - i0 : S_CHUNK;
            size_t at = start + i0;
            if (at % 8 == 0) {
                size_t whole = mm & ~(size_t)7;
                sum += compress_sign_bucket(x + at, whole, bits + at / 8);
                for (size_t i = whole; i < mm; i++) {
                    sum += fabs((double)x[at + i]);
                    if (signbit(x[at + i]))
                        bits[(at + i) / 8] |= (uint8_t)(1u << ((at + i) % 8));
                    else
                        bits[(at + i) / 8] &= (uint8_t) ~(1u << ((at + i) % 8));
                }
            } else {
                sum += compress_sign_bucket(x + at, mm, tail);
                for (size_t i = 0; i < mm; i++) {
                    size_t j = at + i;
                    uint8_t bit = (uint8_t)((tail[i / 8] >> (i % 8)) & 1u);
                    bits[j / 8] = (uint8_t)((bits[j / 8] & ~(1u << (j % 8))) |
                                            bit << (j % 8));
                }
            }
        }
        if (!isfinite(sum)) /* a finite bucket cannot overflow a double */
            return RUMOR_ENUMERIC;
        float scale = (float)(sum / (double)m);
        compress_put_f32(scales + 4 * k, scale);
        if (approx != NULL)
            for (size_t i = 0; i < m; i++)
                approx[start + i] = signbit(x[start + i]) ? -scale : scale;
    }
    if (n % 8 != 0) /* zero the padding bits: canonical bytes */
        bits[n / 8] &= (uint8_t)((1u << (n % 8)) - 1);
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                0,
                                0,
                                (uint32_t)n,
                                (uint32_t)c->bucket};
    compress_header_write(out, &h);
    *written = need;
    return RUMOR_OK;
}

static rumor_err
s_sign_decode(const rumor_codec *c,
              const uint8_t *in,
              size_t len,
              bool add,
              float alpha,
              float *y,
              size_t n)
{
    (void)c;
    uint32_t bucket = compress_get_u32(in + 8);
    if (!s_check_bucket(bucket) || in[2] != 0 || in[3] != 0)
        return RUMOR_EPROTO;
    size_t nb = compress_buckets(n, bucket);
    size_t body = len - RUMOR_COMPRESS_HEADER_BYTES;
    if (body / 4 < nb || body - 4 * nb != (n + 7) / 8)
        return RUMOR_EPROTO;
    const uint8_t *scales = in + RUMOR_COMPRESS_HEADER_BYTES;
    const uint8_t *bits = scales + 4 * nb;
    for (size_t k = 0; k < nb; k++) {
        float s = compress_get_f32(scales + 4 * k);
        if (!isfinite(s))
            return RUMOR_ENUMERIC;
        if (s < 0)
            return RUMOR_EPROTO;
    }
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * bucket;
        size_t m = n - start < bucket ? n - start : bucket;
        float s = compress_get_f32(scales + 4 * k);
        size_t i = start, stop = start + m;
        for (; i < stop && i % 8 != 0; i++) { /* up to a byte boundary */
            float q = (bits[i / 8] >> (i % 8)) & 1u ? -s : s;
            y[i] = add ? y[i] + alpha * q : q;
        }
        size_t whole = (stop - i) / 8;
        compress_sign_expand(bits + i / 8, whole, s, add, alpha, y + i);
        for (i += 8 * whole; i < stop; i++) {
            float q = (bits[i / 8] >> (i % 8)) & 1u ? -s : s;
            y[i] = add ? y[i] + alpha * q : q;
        }
    }
    return RUMOR_OK;
}

const struct compress_ops compress_sign_ops = {s_sign_size,
                                               s_sign_encode,
                                               true,
                                               s_sign_decode};

/* --- natural compression
 * ------------------------------------------------------ */

static void
s_natural_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    (void)c;
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + n + (n + 7) / 8;
    *exact = true;
}

static rumor_err
s_natural_encode(const rumor_codec *c,
                 const float *x,
                 size_t n,
                 uint64_t seed,
                 uint64_t counter,
                 uint8_t *out,
                 size_t cap,
                 size_t *written,
                 float *approx)
{
    size_t need = 0;
    bool exact = false;
    s_natural_size(c, n, &need, &exact);
    if (cap < need)
        return RUMOR_ETOOBIG;
    uint8_t *expo = out + RUMOR_COMPRESS_HEADER_BYTES;
    uint8_t *bits = expo + n;
    memset(bits, 0, (n + 7) / 8);
    struct s_drawbuf draws;
    s_drawbuf_init(&draws, seed, counter);
    for (size_t i0 = 0; i0 < n; i0 += S_CHUNK - 16) {
        size_t m = n - i0 < S_CHUNK - 16 ? n - i0 : S_CHUNK - 16;
        size_t whole = m & ~(size_t)7;
        const uint16_t *r = s_draws(&draws, i0, m, n);
        s_prefetch(x, i0 + m, i0 + m + S_AHEAD < n ? i0 + m + S_AHEAD : n);
        if (!compress_natural(x + i0, whole, r, expo + i0, bits + i0 / 8))
            return RUMOR_ENUMERIC;
        for (size_t i = whole; i < m; i++) { /* the last partial byte */
            uint32_t u = compress_f2u(x[i0 + i]);
            uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
            if (e == 255)
                return RUMOR_ENUMERIC;
            uint32_t up = (((uint32_t)r[i] << 7) | 0x40u) < mant;
            uint32_t E = e + up;
            expo[i0 + i] = (uint8_t)(E > 254 ? 254 : E);
            bits[(i0 + i) / 8] |= (uint8_t)((u >> 31) << ((i0 + i) % 8));
        }
        if (approx != NULL)
            for (size_t i = 0; i < m; i++) {
                uint32_t sign = compress_f2u(x[i0 + i]) & 0x80000000u;
                approx[i0 + i] =
                    compress_u2f(sign | (uint32_t)expo[i0 + i] << 23);
            }
    }
    struct compress_header h =
        {(uint8_t)c->id, RUMOR_COMPRESS_VERSION, 0, 0, (uint32_t)n, 0};
    compress_header_write(out, &h);
    *written = need;
    return RUMOR_OK;
}

static rumor_err
s_natural_decode(const rumor_codec *c,
                 const uint8_t *in,
                 size_t len,
                 bool add,
                 float alpha,
                 float *y,
                 size_t n)
{
    (void)c;
    if (in[2] != 0 || in[3] != 0 || compress_get_u32(in + 8) != 0 ||
        len - RUMOR_COMPRESS_HEADER_BYTES != n + (n + 7) / 8)
        return RUMOR_EPROTO;
    const uint8_t *expo = in + RUMOR_COMPRESS_HEADER_BYTES;
    const uint8_t *bits = expo + n;
    if (memchr(expo, 255, n) != NULL) /* Inf or NaN: checked before y */
        return RUMOR_ENUMERIC;
    compress_natural_expand(expo, bits, n, add, alpha, y);
    return RUMOR_OK;
}

const struct compress_ops compress_natural_ops = {s_natural_size,
                                                  s_natural_encode,
                                                  true,
                                                  s_natural_decode};
