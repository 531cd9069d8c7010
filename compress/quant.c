/*
 * Per-bucket stochastic and scaled quantizers: QSGD, TernGrad, scaled sign
 * and natural compression.
 *
 * QSGD (Alistarh et al. 2017, section 3.1): per bucket the 2-norm ||v||,
 * and per value the sign and a level l in 0..s (s = 2^bits - 1) drawn by
 * stochastic rounding of |v| s / ||v||, so E[l] ||v|| / s = |v| (unbiased).
 * Levels are packed at bits+1 bits (sign above the level) or, with
 * elias=1 (code=gamma), Elias-gamma coded (l + 1) followed by a sign bit
 * when l > 0 (small levels dominate; the paper's own Elias code of the gaps
 * between non-zeros, and any s, are code=elias and levels= in
 * qsgd_levels.c).
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
 * Random numbers: value i of the vector rounds with draw i of the stream
 * (seed, counter) (compress_impl.h, compress_draw_bytes: a Philox byte per
 * value as the high byte, a low byte shared by 16 values), so the bytes
 * depend only on (x, seed, counter). Limits: a bucket whose norm or max
 * overflows float is clamped to FLT_MAX, and natural compression of |v| >=
 * 2^127 returns 2^127 (the next power is Inf); both are then biased, and both
 * are unreachable for gradients.
 *
 * Speed: whole buckets go to the fused kernel (kernels.c), with the
 * decoded values too when error feedback asks for them, and for 9-bit
 * codes (bits = 8) on the AVX-512 tier. Elias codes are written from a
 * table of every code's bits (one look-up and one unconditional 8-byte
 * store per value) and read through a table of every 12-bit window (one
 * look-up per code of up to 12 bits, the general rule for longer and for
 * invalid ones), built once per process (4-6x the bit-by-bit coder).
 */
#include "compress/compress_impl.h"
#include "core/bits.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#define S_CHUNK 4096

/* --- shared -------------------------------------------------------------- */

/* A window of the draw stream (seed, counter): two halves of S_CHUNK
 * draws, each from a multiple of S_CHUNK, as the generator's bytes (high,
 * low: whole groups of the byte stream, so nothing is generated twice),
 * joined into 16-bit draws in r only when a kernel without a byte path
 * asks. Callers walk forward, asking for at most S_CHUNK draws at a time,
 * which two halves always cover; moving on by one half keeps the second
 * (a 4 KiB copy instead of generating it again). */
struct s_drawbuf {
    uint64_t seed, counter;
    size_t lo, hi; /* the window holds draws lo .. hi - 1 */
    bool joined;
    uint8_t high[2 * S_CHUNK];
    uint8_t low[2 * S_CHUNK / 16];
    uint16_t r[2 * S_CHUNK];
};

static void
s_drawbuf_init(struct s_drawbuf *d, uint64_t seed, uint64_t counter)
{
    d->seed = seed;
    d->counter = counter;
    d->lo = 0;
    d->hi = 0;
    d->joined = false;
}

/* Half `half` of the window: draws at .. at + S_CHUNK - 1, up to end. */
static void
s_fill_half(struct s_drawbuf *d, unsigned half, size_t at, size_t end)
{
    if (at >= end)
        return;
    size_t m = end - at < S_CHUNK ? end - at : S_CHUNK;
    compress_draw_bytes(d->seed,
                        d->counter,
                        at,
                        d->high + half * S_CHUNK,
                        d->low + half * S_CHUNK / 16,
                        m);
}

/* Makes the window hold draws start .. start + m - 1 (m <= S_CHUNK) of
 * the stream's n draws. */
static void
s_window(struct s_drawbuf *d, size_t start, size_t m, size_t n)
{
    if (start >= d->lo && start + m <= d->hi)
        return;
    size_t base = start / S_CHUNK * S_CHUNK;
    size_t end = (n + 15) & ~(size_t)15;
    if (d->hi == d->lo + 2 * S_CHUNK && base == d->lo + S_CHUNK) {
        memcpy(d->high, d->high + S_CHUNK, S_CHUNK);
        memcpy(d->low, d->low + S_CHUNK / 16, S_CHUNK / 16);
    } else {
        s_fill_half(d, 0, base, end);
    }
    s_fill_half(d, 1, base + S_CHUNK, end);
    d->lo = base;
    d->hi = base + 2 * S_CHUNK < end ? base + 2 * S_CHUNK : end;
    d->joined = false;
}

/* The draws from start (a multiple of 16) on as bytes: *hi the high
 * bytes, *lo the low byte of each run of 16. */
static void
s_draw_bytes(struct s_drawbuf *d,
             size_t start,
             size_t m,
             size_t n,
             const uint8_t **hi,
             const uint8_t **lo)
{
    s_window(d, start, m, n);
    *hi = d->high + (start - d->lo);
    *lo = d->low + (start - d->lo) / 16;
}

/* Draws start .. start + m - 1 joined; returns the pointer to draw start. */
static const uint16_t *
s_draws(struct s_drawbuf *d, size_t start, size_t m, size_t n)
{
    s_window(d, start, m, n);
    if (!d->joined)
        compress_join_draws(d->high, d->low, 0, d->hi - d->lo, d->r);
    d->joined = true;
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
    if (c->id == RUMOR_CODEC_QSGD && c->bits == 0) {
        compress_qsgd_levels_size(c, n, bytes, exact);
        return;
    }
    if (c->id == RUMOR_CODEC_QSGD && c->qcode == COMPRESS_QCODE_GAMMA) {
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
 * sign bit when l > 0, as bits LSB-first; *len its length (<= 2 L + 2,
 * at most 18 bits for l < 256). */
static uint32_t
s_elias_bits(uint32_t l, uint32_t neg, unsigned *len)
{
    uint32_t g = l + 1;
    unsigned L = 31u - (unsigned)__builtin_clz(g);
    uint32_t v = 1u << L | (g & ((1u << L) - 1)) << (L + 1);
    *len = 2 * L + 1 + (l > 0);
    return l > 0 ? v | neg << (2 * L + 1) : v;
}

static void
s_put_elias(struct core_bw *w, uint32_t l, uint32_t neg)
{
    unsigned len = 0;
    uint32_t v = s_elias_bits(l, neg, &len);
    core_bw_put(w, v, len);
}

void
compress_qsgd_gamma_recode(unsigned b,
                           const uint8_t *fixed,
                           size_t n,
                           struct core_bw *w)
{
    struct core_br r;
    core_br_init(&r, fixed, (n * (b + 1) + 7) / 8);
    for (size_t i = 0; i < n; i++) {
        uint32_t code = (uint32_t)core_br_peek(&r, b + 1);
        core_br_skip(&r, b + 1);
        s_put_elias(w, code & ((1u << b) - 1), code >> b);
    }
}

/* The Elias codes of every code byte (level | sign << b, b <= 7). */
struct s_elias_table {
    uint32_t bits[256];
    uint8_t len[256];
};

static void
s_elias_table(unsigned b, struct s_elias_table *t)
{
    for (uint32_t code = 0; code < 2u << b; code++) {
        unsigned len = 0;
        t->bits[code] = s_elias_bits(code & ((1u << b) - 1), code >> b, &len);
        t->len[code] = (uint8_t)len;
    }
}

/* Appends the Elias codes of codes[0 .. n): while 16 bytes of room are
 * left, each code is one table look-up and one unconditional 8-byte store
 * of the pending bits (no branch on how many bits are pending: that
 * branch follows the data and mispredicts); the rest bit by bit. */
static void
s_put_elias_codes(struct core_bw *w,
                  const struct s_elias_table *t,
                  const uint8_t *codes,
                  size_t n)
{
    size_t i = 0;
    for (; i < n && w->end - w->p >= 16 && w->nacc < 8; i++) {
        w->acc |= (uint64_t)t->bits[codes[i]] << w->nacc;
        w->nacc += t->len[codes[i]];
        memcpy(w->p, &w->acc, 8); /* little-endian host: LSB first */
        unsigned whole = w->nacc & ~7u;
        w->p += whole / 8;
        w->acc >>= whole;
        w->nacc -= whole;
    }
    for (; i < n; i++)
        core_bw_put(w, t->bits[codes[i]], t->len[codes[i]]);
}

/* Whole buckets of `bucket` values among the `left` values from a
 * bucket start that one call of compress_quant_buckets takes (their draws
 * fit one window of the draw buffer); 0 when the bucket does not suit it
 * (not a multiple of 8 values, or longer than a window). */
static size_t
s_fused_buckets(uint32_t bucket, size_t left)
{
    if (bucket % 8 != 0 || bucket > S_CHUNK)
        return 0;
    size_t fit = S_CHUNK / bucket, whole = left / bucket;
    return whole < fit ? whole : fit;
}

/* shared: TernGrad's agreed scalers, one per bucket, in place of the
 * buckets' own (NULL: their own). */
static rumor_err
s_qsgd_encode(const rumor_codec *c,
              const float *x,
              size_t n,
              const float *shared,
              uint64_t seed,
              uint64_t counter,
              uint8_t *out,
              size_t cap,
              size_t *written,
              float *approx)
{
    bool tern = c->id == RUMOR_CODEC_TERNGRAD;
    bool elias = c->qcode == COMPRESS_QCODE_GAMMA && !tern;
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
    struct core_bw w9;
    core_bw_init(&w9, out + head, cap - head);
    struct s_drawbuf draws;
    s_drawbuf_init(&draws, seed, counter);
    struct s_elias_table etab;
    if (elias && b < 8)
        s_elias_table(b, &etab);
    size_t ahead = 0; /* x[0 .. ahead) was asked for */
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * c->bucket;
        size_t m = n - start < c->bucket ? n - start : c->bucket;
        const float *v = x + start;
        /* Runs of whole buckets with packed output: the fused kernel. */
        bool wide = b == 8; /* 9-bit codes: written by w9 */
        bool aligned = wide ? compress_quant_buckets_wide(c->bucket) &&
                                  core_bw_at_byte(&w9)
                            : pk.pending == 0;
        size_t run = elias || !aligned || start % 16 != 0 || shared != NULL
                         ? 0
                         : s_fused_buckets(c->bucket, n - start);
        if (run > 0) {
            uint8_t **to = wide ? &w9.p : &pk.out;
            struct compress_bucket_run job = {
                .x = v,
                .nbk = run,
                .m = c->bucket,
                .s = s,
                .b = b,
                .tern = tern,
                .norms = out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k,
                .out = *to,
                .end = wide ? w9.end : pk.end,
                .approx = approx != NULL ? approx + start : NULL};
            if ((size_t)(job.end - job.out) < run * c->bucket / 8 * w)
                return RUMOR_ETOOBIG;
            s_draw_bytes(&draws, start, run * c->bucket, n, &job.hi, &job.lo);
            if (!compress_quant_buckets(&job))
                return RUMOR_ENUMERIC;
            *to += run * c->bucket / 8 * w;
            k += run - 1;
            continue;
        }
        size_t want = start + m + S_AHEAD < n ? start + m + S_AHEAD : n;
        if (want > ahead) {
            s_prefetch(x, ahead > start + m ? ahead : start + m, want);
            ahead = want;
        }
        double acc = shared != NULL ? (double)shared[k]
                     : tern         ? (double)compress_maxabs(v, m)
                                    : sqrt(compress_sumsq(v, m));
        float norm = 0, inv = 0;
        if (!compress_bucket_scale(acc, s, &norm, &inv))
            return RUMOR_ENUMERIC;
        compress_put_f32(out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k, norm);
        float scale = norm / (float)s;
        for (size_t i0 = 0; i0 < m; i0 += S_CHUNK) {
            size_t mm = m - i0 < S_CHUNK ? m - i0 : S_CHUNK;
            const uint16_t *r = s_draws(&draws, start + i0, mm, n);
            float *ap = approx != NULL ? approx + start + i0 : NULL;
            if (b == 8) { /* 9-bit codes do not fit the byte kernels */
                for (size_t i = 0; i < mm; i++) {
                    uint32_t code =
                        compress_level_code(v[i0 + i], inv, r[i], s, 8);
                    uint32_t l = code & 0xffu, neg = code >> 8;
                    if (elias)
                        s_put_elias(&w9, l, neg);
                    else
                        core_bw_put(&w9, l | neg << 8, 9);
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
            if (ap != NULL) /* the decoder's own kernel: the same bits */
                compress_dequant(codes, mm, b, scale, false, 1.0f, ap);
            if (elias) {
                s_put_elias_codes(&w9, &etab, codes, mm);
            } else {
                pk.pending += mm;
                s_packer_flush(&pk, false);
            }
        }
    }
    size_t body = 0;
    if (elias || w == 9) {
        body = core_bw_finish(&w9, out + head);
        if (body == SIZE_MAX)
            return RUMOR_ETOOBIG;
    } else {
        s_packer_flush(&pk, true);
        body = (size_t)(pk.out - (out + head));
    }
    *written = head + body;
    return RUMOR_OK;
}

/* Window of the Elias decode table: codes up to 12 bits (every code for
 * bits <= 5) are one look-up. */
#define S_ELIAS_PEEK 12

/* Decode table: entry w (the next t bits) = len << 9 | code (level |
 * sign << 8) when w starts with a whole valid code of len <= t bits, 0
 * when it does not (a longer code, or an invalid one: the general rule
 * decides). */
struct s_elias_dec {
    unsigned t;
    uint16_t e[1u << S_ELIAS_PEEK];
};

static struct s_elias_dec s_elias_tables[9]; /* by b, 1 .. 8 */
static pthread_once_t s_elias_once = PTHREAD_ONCE_INIT;

static void
s_elias_dec_table(unsigned b, struct s_elias_dec *d)
{
    uint32_t s = (1u << b) - 1;
    d->t = 2 * b + 2 < S_ELIAS_PEEK ? 2 * b + 2 : S_ELIAS_PEEK;
    for (uint32_t w = 0; w < 1u << d->t; w++) {
        d->e[w] = 0;
        unsigned L = w == 0 ? 32u : (unsigned)__builtin_ctz(w);
        if (L > b)
            continue; /* no valid code starts so */
        uint32_t l = ((1u << L) | ((w >> (L + 1)) & ((1u << L) - 1))) - 1;
        unsigned len = 2 * L + 1 + (l > 0);
        if (l > s || len > d->t)
            continue;
        uint32_t neg = l > 0 ? (w >> (2 * L + 1)) & 1u : 0;
        d->e[w] = (uint16_t)(len << 9 | l | neg << 8);
    }
}

static void
s_elias_tables_init(void)
{
    for (unsigned b = 1; b <= 8; b++)
        s_elias_dec_table(b, &s_elias_tables[b]);
}

/* One code by the general rule: false on an invalid code or overrun. */
static bool
s_elias_get(struct core_br *r, unsigned b, uint16_t *code)
{
    uint64_t win = core_br_peek(r, 32);
    unsigned L = win == 0 ? 32u : (unsigned)__builtin_ctzll(win);
    if (L > b)
        return false;
    core_br_skip(r, L + 1);
    uint32_t l = ((1u << L) | (uint32_t)core_br_get(r, L)) - 1;
    if (l > (1u << b) - 1)
        return false;
    uint32_t neg = l > 0 ? (uint32_t)core_br_get(r, 1) : 0;
    *code = (uint16_t)(l | neg << 8);
    return !r->overrun;
}

/* Codes (level | sign << 8) of m values: by table, the general rule where
 * the table has no entry. */
static bool
s_elias_codes(struct core_br *r,
              unsigned b,
              const struct s_elias_dec *d,
              size_t m,
              uint16_t *codes)
{
    for (size_t i = 0; i < m; i++) {
        uint32_t e = d->e[core_br_peek(r, d->t)];
        if (e != 0) {
            core_br_skip(r, e >> 9);
            codes[i] = (uint16_t)(e & 0x1ffu);
        } else if (!s_elias_get(r, b, &codes[i])) {
            return false;
        }
    }
    return !r->overrun;
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
    struct core_br r;
    core_br_init(&r, in + head, len - head);
    (void)pthread_once(&s_elias_once, s_elias_tables_init);
    const struct s_elias_dec *table = &s_elias_tables[b];
    uint16_t codes[S_CHUNK];
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * bucket;
        size_t m = n - start < bucket ? n - start : bucket;
        float scale =
            compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k) /
            (float)s;
        for (size_t i0 = 0; i0 < m; i0 += S_CHUNK) {
            size_t mm = m - i0 < S_CHUNK ? m - i0 : S_CHUNK;
            if (!s_elias_codes(&r, b, table, mm, codes))
                return RUMOR_EPROTO;
            /* level times a norm near FLT_MAX */
            for (size_t i = 0; !isfinite((float)s * scale) && i < mm; i++)
                if (!isfinite((float)(codes[i] & 0xffu) * scale))
                    return RUMOR_ENUMERIC;
            if (!dry)
                compress_dequant9(codes, mm, scale, add, alpha, y + start + i0);
        }
    }
    if (core_br_used(&r, in + head) != len - head)
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
    uint16_t wide[S_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += S_CHUNK) {
        size_t mm = n - i0 < S_CHUNK ? n - i0 : S_CHUNK;
        const uint8_t *at = body + i0 / 8 * w;
        size_t groups = (mm + 7) / 8;
        if (w == 9) /* bits = 8: 9-bit codes, 16 bits each in wide */
            compress_unpack9(at, end, groups, wide);
        else
            compress_unpack(at, end, groups, w, codes);
        if (w == 9 ? compress_has_u16(wide, mm, 256)
                   : memchr(codes, 1 << b, mm) != NULL)
            return RUMOR_EPROTO; /* "-0": not canonical */
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
            if (!dry && w == 9)
                compress_dequant9(wide + i, seg, scale, add, alpha, y + j);
            else if (!dry)
                compress_dequant(codes + i, seg, b, scale, add, alpha, y + j);
            i += seg;
        }
    }
    return RUMOR_OK;
}

rumor_err
compress_quant_header(bool tern,
                      const uint8_t *in,
                      size_t len,
                      size_t n,
                      unsigned *b,
                      uint32_t *bucket,
                      size_t *head)
{
    *bucket = core_get_u32(in + 8);
    if (!s_check_bucket(*bucket) || in[3] > (tern ? 0 : 1) ||
        (tern ? in[2] != 0 : (in[2] < 1 || in[2] > 8)))
        return RUMOR_EPROTO;
    *b = tern ? 1 : in[2];
    size_t nb = compress_buckets(n, *bucket);
    if ((len - RUMOR_COMPRESS_HEADER_BYTES) / 4 < nb)
        return RUMOR_EPROTO;
    *head = RUMOR_COMPRESS_HEADER_BYTES + 4 * nb;
    return compress_norms_check(in, nb);
}

rumor_err
compress_norms_check(const uint8_t *in, size_t nb)
{
    for (size_t k = 0; k < nb; k++) {
        float norm = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k);
        if (!isfinite(norm))
            return RUMOR_ENUMERIC;
        if (norm < 0)
            return RUMOR_EPROTO;
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
    if (!tern && in[2] == 0)
        return compress_qsgd_levels_decode(in, len, add, alpha, y, n);
    unsigned b = 0;
    uint32_t bucket = 0;
    size_t head = 0;
    rumor_err hrc = compress_quant_header(tern, in, len, n, &b, &bucket, &head);
    if (hrc != RUMOR_OK)
        return hrc;
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

/* ChocoSGD's biased QSGD (`is_biased`, epfml/ChocoSGD
 * QuantizationCompressor.get_qsgd): the decoded values times 1 / tau,
 * tau = 1 + min(d / s^2, sqrt(d) / s) with d the values under one norm
 * (here the bucket's length) and s the levels. tau bounds QSGD's second
 * moment (Alistarh et al. 2017, Lemma 3.1: E||Q(v)||^2 <= tau ||v||^2), so
 * E||Q(v) / tau - v||^2 <= (1 - 1 / tau) ||v||^2: a compression operator
 * in CHOCO's sense (relative error below 1) at any bits, where the
 * unscaled quantizer's error exceeds ||v||^2 when buckets are long. The
 * factor rides on each bucket's stored norm, so the payload format and
 * the decoder are unchanged; approx is decoded from the payload, so it
 * holds the decoder's bits. */
void
compress_qsgd_rescale_norms(const rumor_codec *c, uint8_t *out, size_t n)
{
    double s = (double)c->levels;
    size_t nb = compress_buckets(n, c->bucket);
    for (size_t k = 0; k < nb; k++) {
        size_t start = k * c->bucket;
        double d = (double)(n - start < c->bucket ? n - start : c->bucket);
        double tau = 1 + fmin(d / (s * s), sqrt(d) / s);
        uint8_t *p = out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k;
        compress_put_f32(p, (float)(compress_get_f32(p) / tau));
    }
}

static rumor_err
s_qsgd_rescale(const rumor_codec *c,
               uint8_t *out,
               size_t len,
               size_t n,
               float *approx)
{
    compress_qsgd_rescale_norms(c, out, n);
    if (approx == NULL)
        return RUMOR_OK;
    return s_qsgd_decode(c, out, len, false, 1.0f, approx, n);
}

static rumor_err
s_qsgd_encode_scaled(const rumor_codec *c,
                     const float *x,
                     size_t n,
                     uint64_t seed,
                     uint64_t counter,
                     uint8_t *out,
                     size_t cap,
                     size_t *written,
                     float *approx)
{
    rumor_err rc = c->bits == 0 ? compress_qsgd_levels_encode(c,
                                                              x,
                                                              n,
                                                              seed,
                                                              counter,
                                                              out,
                                                              cap,
                                                              written,
                                                              approx)
                                : s_qsgd_encode(c,
                                                x,
                                                n,
                                                NULL,
                                                seed,
                                                counter,
                                                out,
                                                cap,
                                                written,
                                                approx);
    if (rc != RUMOR_OK || !c->biased)
        return rc;
    return s_qsgd_rescale(c, out, *written, n, approx);
}

const struct compress_ops compress_qsgd_ops = {s_qsgd_size,
                                               s_qsgd_encode_scaled,
                                               true,
                                               s_qsgd_decode};
/* Sum over x[0..n) in double, COMPRESS_CLIP_PIECE values per piece: each
 * piece in order from 0, the pieces added in order (of (x - mean)^2 when
 * sq). Pieces, not one sequential sum, so a device repeats it bit for bit
 * with a thread per piece (compress/device.h clip_parts). */
static double
s_clip_sum(const float *x, size_t n, bool sq, double mean)
{
    double sum = 0;
    for (size_t at = 0; at < n; at += COMPRESS_CLIP_PIECE) {
        size_t m = n - at < COMPRESS_CLIP_PIECE ? n - at : COMPRESS_CLIP_PIECE;
        double piece = 0;
        for (size_t i = at; i < at + m; i++) {
            double d = (double)x[i] - mean;
            piece += sq ? d * d : (double)x[i];
        }
        sum += piece;
    }
    return sum;
}

/* TernGrad's gradient clipping (Wen et al. 2017, section 3.3; the
 * reference's clip_gradients_by_stddev): every value clipped to [-c sigma,
 * c sigma], sigma the population standard deviation about the mean of the
 * whole vector (the layer), before the per-bucket ternarization. The
 * decoder is unchanged: the payload is a TernGrad payload of the clipped
 * vector, unbiased for it (not for x: clipping is the bias the paper
 * trades for a smaller scaler). *t receives c sigma; false when x holds
 * NaN or Inf (finite floats cannot overflow a double sum). */
static bool
s_clip_at(const rumor_codec *c, const float *x, size_t n, float *t)
{
    double sum = s_clip_sum(x, n, false, 0);
    if (!isfinite(sum))
        return false;
    double mean = sum / (double)n;
    double dev = s_clip_sum(x, n, true, mean);
    *t = (float)(c->clip * sqrt(dev / (double)n));
    return true;
}

static rumor_err
s_terngrad_encode(const rumor_codec *c,
                  const float *x,
                  size_t n,
                  uint64_t seed,
                  uint64_t counter,
                  uint8_t *out,
                  size_t cap,
                  size_t *written,
                  float *approx)
{
    float t = 0;
    if (c->clip == 0 || n == 0)
        return s_qsgd_encode(c,
                             x,
                             n,
                             NULL,
                             seed,
                             counter,
                             out,
                             cap,
                             written,
                             approx);
    if (!s_clip_at(c, x, n, &t))
        return RUMOR_ENUMERIC;
    float *v = malloc(n * sizeof *v);
    if (v == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = fminf(fmaxf(x[i], -t), t);
    rumor_err rc =
        s_qsgd_encode(c, v, n, NULL, seed, counter, out, cap, written, approx);
    free(v);
    return rc;
}

/* The bucket's max |clipped value| is min(max |x|, c sigma): clipping
 * keeps order and is exact, so no clipped copy is needed. */
void
compress_terngrad_scalers(const rumor_codec *c,
                          const float *x,
                          size_t n,
                          float *out)
{
    float t = INFINITY;
    if (c->clip > 0 && n > 0)
        (void)s_clip_at(c, x, n, &t); /* x is finite */
    for (size_t k = 0; k < compress_buckets(n, c->bucket); k++) {
        size_t start = k * c->bucket;
        size_t m = n - start < c->bucket ? n - start : c->bucket;
        out[k] = fminf(compress_maxabs(x + start, m), t);
    }
}

rumor_err
compress_terngrad_encode_shared(const rumor_codec *c,
                                const float *x,
                                size_t n,
                                const float *scalers,
                                uint64_t seed,
                                uint64_t counter,
                                uint8_t *out,
                                size_t cap,
                                size_t *written,
                                float *approx)
{
    return s_qsgd_encode(c,
                         x,
                         n,
                         scalers,
                         seed,
                         counter,
                         out,
                         cap,
                         written,
                         approx);
}

const struct compress_ops compress_terngrad_ops = {s_qsgd_size,
                                                   s_terngrad_encode,
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

/* y[start .. start + m) (= or +=) alpha * (+-s), the signs from bits:
 * whole bytes by the vector kernel, the edges one by one. */
static void
s_sign_values(const uint8_t *bits,
              size_t start,
              size_t m,
              float s,
              bool add,
              float alpha,
              float *y)
{
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
        if (approx != NULL) /* the decoder's own loop: the same bits */
            s_sign_values(bits, start, m, scale, false, 1.0f, approx);
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
    uint32_t bucket = core_get_u32(in + 8);
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
        s_sign_values(bits,
                      start,
                      m,
                      compress_get_f32(scales + 4 * k),
                      add,
                      alpha,
                      y);
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
    for (size_t i0 = 0; i0 < n; i0 += S_CHUNK) {
        size_t m = n - i0 < S_CHUNK ? n - i0 : S_CHUNK;
        size_t whole = m & ~(size_t)7;
        const uint8_t *hi = NULL, *lo = NULL;
        s_draw_bytes(&draws, i0, m, n, &hi, &lo);
        s_prefetch(x, i0 + m, i0 + m + S_AHEAD < n ? i0 + m + S_AHEAD : n);
        if (!compress_natural(x + i0, whole, hi, lo, expo + i0, bits + i0 / 8))
            return RUMOR_ENUMERIC;
        for (size_t i = whole; i < m; i++) { /* the last partial byte */
            uint32_t u = compress_f2u(x[i0 + i]);
            uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
            if (e == 255)
                return RUMOR_ENUMERIC;
            uint32_t draw = (uint32_t)hi[i] << 8 | lo[i / 16];
            uint32_t up = ((draw << 7) | 0x40u) < mant;
            uint32_t E = e + up;
            expo[i0 + i] = (uint8_t)(E > 254 ? 254 : E);
            bits[(i0 + i) / 8] |= (uint8_t)((u >> 31) << ((i0 + i) % 8));
        }
        if (approx != NULL) /* the decoder's own kernel: the same bits */
            compress_natural_expand(expo + i0,
                                    bits + i0 / 8,
                                    m,
                                    false,
                                    1.0f,
                                    approx + i0);
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
    if (in[2] != 0 || in[3] != 0 || core_get_u32(in + 8) != 0 ||
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
