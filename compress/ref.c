/*
 * Plain-C reference kernels (R7.4): the slow, obvious versions of what
 * kernels.c and the codecs do fast. They are the fallback on CPUs without
 * AVX2 and the oracles the unit tests compare the fast paths with, bit for
 * bit (top-k: index for index against a full sort).
 */
#include "compress/compress_impl.h"
#include "compress/device.h"

#include <math.h>
#include <stdlib.h>

/* Group g of the byte stream: its 16 blocks, word-major. */
static void
s_stream_group(uint64_t seed, uint64_t stream, uint64_t g, uint8_t out[256])
{
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (unsigned b = 0; b < 16; b++) {
        uint64_t block = 16 * g + b;
        const uint32_t ctr[4] = {(uint32_t)block,
                                 (uint32_t)(block >> 32),
                                 (uint32_t)stream,
                                 (uint32_t)(stream >> 32)};
        uint32_t w[4];
        rumor_philox4x32_10(ctr, key, w);
        for (unsigned j = 0; j < 4; j++)
            for (unsigned k = 0; k < 4; k++)
                out[64 * j + 4 * b + k] = (uint8_t)(w[j] >> (8 * k));
    }
}

void
compress_stream_bytes_ref(uint64_t seed,
                          uint64_t stream,
                          uint64_t first,
                          uint8_t *out,
                          size_t n)
{
    uint8_t group[256];
    for (size_t i = 0; i < n;) {
        uint64_t g = (first + i) / 256;
        s_stream_group(seed, stream, g, group);
        for (; i < n && (first + i) / 256 == g; i++)
            out[i] = group[(first + i) % 256];
    }
}

void
compress_draws_ref(uint64_t seed,
                   uint64_t stream,
                   uint64_t first,
                   uint16_t *out,
                   size_t n)
{
    uint8_t hi[256], lo[1];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        compress_stream_bytes_ref(seed, stream, first + i, hi, m);
        for (size_t t = 0; t < m; t++) {
            uint64_t at = COMPRESS_DRAW_LOW + (first + i + t) / 16;
            compress_stream_bytes_ref(seed, stream, at, lo, 1);
            out[i + t] = (uint16_t)(hi[t] << 8 | lo[0]);
        }
    }
}

bool
compress_all_finite_ref(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

struct s_pair {
    uint32_t key; /* |x| bit pattern: orders like |x| for finite floats */
    uint32_t index;
};

static int
s_by_key_desc_index_asc(const void *a, const void *b)
{
    const struct s_pair *p = a, *q = b;
    if (p->key != q->key)
        return p->key > q->key ? -1 : 1;
    return p->index < q->index ? -1 : p->index > q->index;
}

static int
s_u32_asc(const void *a, const void *b)
{
    uint32_t p = *(const uint32_t *)a, q = *(const uint32_t *)b;
    return p < q ? -1 : p > q;
}

rumor_err
compress_topk_select_ref(const float *x, size_t n, size_t k, uint32_t *idx)
{
    struct s_pair *pairs = malloc((n ? n : 1) * sizeof *pairs);
    if (pairs == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        pairs[i].key = compress_f2u(x[i]) & 0x7fffffffu;
        pairs[i].index = (uint32_t)i;
    }
    qsort(pairs, n, sizeof *pairs, s_by_key_desc_index_asc);
    for (size_t i = 0; i < k; i++)
        idx[i] = pairs[i].index;
    qsort(idx, k, sizeof *idx, s_u32_asc);
    free(pairs);
    return RUMOR_OK;
}

/* Eight lane sums over whole groups of eight, combined pairwise, then the
 * tail in order: the order the AVX2 kernels use (compress_impl.h). */
static double
s_lanes_sum(const double lane[8], double tail)
{
    return (((lane[0] + lane[4]) + (lane[1] + lane[5])) +
            ((lane[2] + lane[6]) + (lane[3] + lane[7]))) +
           tail;
}

double
compress_sign_bucket_ref(const float *x, size_t n, uint8_t *bits)
{
    double lane[8] = {0}, tail = 0;
    size_t whole = n & ~(size_t)7;
    memset(bits, 0, (n + 7) / 8);
    for (size_t i = 0; i < n; i++) {
        if (i < whole)
            lane[i % 8] += fabs((double)x[i]);
        else
            tail += fabs((double)x[i]);
        if (signbit(x[i]))
            bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    return s_lanes_sum(lane, tail);
}

double
compress_sumsq_wide(const float *x, size_t n)
{
    double lane[32] = {0}, tail = 0;
    size_t whole = n & ~(size_t)31;
    for (size_t i = 0; i < whole; i++)
        lane[i % 32] += (double)x[i] * x[i];
    for (size_t i = whole; i < n; i++)
        tail += (double)x[i] * x[i];
    for (size_t w = 16; w >= 1; w /= 2)
        for (size_t j = 0; j < w; j++)
            lane[j] += lane[j + w];
    return lane[0] + tail;
}

double
compress_sumsq_ref(const float *x, size_t n)
{
    float lane[64] = {0}, tail = 0;
    size_t whole = n & ~(size_t)63;
    for (size_t i = 0; i < whole; i++)
        lane[i % 64] = fmaf(x[i], x[i], lane[i % 64]);
    for (size_t i = whole; i < n; i++)
        tail = fmaf(x[i], x[i], tail);
    /* Halving: lane j += lane j + w for w = 32, 16, 8, 4, 2, 1. */
    for (size_t w = 32; w >= 1; w /= 2)
        for (size_t j = 0; j < w; j++)
            lane[j] += lane[j + w];
    return compress_sumsq_finish(lane[0] + tail, x, n);
}

void
compress_levels_ref(const float *x,
                    size_t n,
                    float inv,
                    uint32_t s,
                    unsigned b,
                    const uint16_t *r,
                    uint8_t *codes)
{
    for (size_t i = 0; i < n; i++)
        codes[i] = (uint8_t)compress_level_code(x[i], inv, r[i], s, b);
}

bool
compress_quant_buckets_ref(const struct compress_bucket_run *run)
{
    const float *x = run->x;
    size_t m = run->m;
    unsigned b = run->b, w = b + 1;
    uint32_t s = run->s;
    memset(run->out, 0, run->nbk * m / 8 * w);
    for (size_t k = 0, t = 0; k < run->nbk; k++, x += m) {
        uint32_t top = 0; /* max |x| as a bit pattern, as compress_maxabs */
        for (size_t i = 0; run->tern && i < m; i++) {
            uint32_t key = compress_f2u(x[i]) & 0x7fffffffu;
            top = key > top ? key : top;
        }
        double acc = run->tern ? (double)compress_u2f(top)
                               : sqrt(compress_sumsq_ref(x, m));
        float norm = 0, inv = 0;
        if (!compress_bucket_scale(acc, s, &norm, &inv))
            return false;
        compress_put_f32(run->norms + 4 * k, norm);
        float scale = norm / (float)s;
        for (size_t i = 0; i < m; i++, t++) {
            uint16_t r = (uint16_t)(run->hi[t] << 8 | run->lo[t / 16]);
            uint32_t code = compress_level_code(x[i], inv, r, s, b);
            for (unsigned j = 0; j < w; j++) /* LSB-first, as core/bits.h */
                run->out[(t * w + j) / 8] |=
                    (uint8_t)(((code >> j) & 1u) << ((t * w + j) % 8));
            float q = (float)(code & s) * scale;
            if (run->approx != NULL)
                run->approx[t] = code >> b ? -q : q;
        }
    }
    return true;
}

bool
compress_natural_ref(const float *x,
                     size_t n,
                     const uint8_t *hi,
                     const uint8_t *lo,
                     uint8_t *expo,
                     uint8_t *signs)
{
    bool finite = true;
    memset(signs, 0, n / 8);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = compress_f2u(x[i]);
        uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
        finite = finite && e != 255;
        uint32_t draw = (uint32_t)hi[i] << 8 | lo[i / 16];
        uint32_t up = ((draw << 7) | 0x40u) < mant;
        uint32_t E = e + up;
        expo[i] = (uint8_t)(E > 254 ? 254 : E);
        signs[i / 8] |= (uint8_t)((u >> 31) << (i % 8));
    }
    return finite;
}

void
compress_natural_expand_ref(const uint8_t *expo,
                            const uint8_t *signs,
                            size_t n,
                            bool add,
                            float alpha,
                            float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t sign = (uint32_t)((signs[i / 8] >> (i % 8)) & 1u) << 31;
        float q = compress_u2f(sign | (uint32_t)expo[i] << 23);
        y[i] = add ? y[i] + alpha * q : q;
    }
}

bool
compress_f32_to_f16_ref(const float *x, size_t n, uint16_t *h)
{
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        finite = finite && isfinite(x[i]);
        uint32_t u = compress_f2u(x[i]);
        uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
        float a = fminf(fabsf(x[i]), 65504.0f);
        uint32_t ua = compress_f2u(a);
        uint32_t mag;
        if (ua >= 0x38800000u) {              /* >= 2^-14: a normal half */
            ua += 0xfffu + ((ua >> 13) & 1u); /* round to nearest even */
            mag = (ua >> 13) - (112u << 10);  /* rebias 127 -> 15 */
        } else {                              /* subnormal: m * 2^-24 */
            mag = (uint32_t)nearbyintf(a * 16777216.0f);
        }
        h[i] = (uint16_t)(sign | mag);
    }
    return finite;
}

bool
compress_f32_to_bf16_ref(const float *x, size_t n, uint16_t *h)
{
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        finite = finite && isfinite(x[i]);
        uint32_t u = compress_f2u(x[i]);
        uint32_t r = u + 0x7fffu + ((u >> 16) & 1u); /* nearest even */
        if ((r & 0x7f800000u) == 0x7f800000u)        /* rounded up to Inf */
            r = (u & 0x80000000u) | 0x7f7f0000u;     /* saturate */
        h[i] = (uint16_t)(r >> 16);
    }
    return finite;
}

float
compress_f16_to_f32_ref(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1.0p-24f;
        return sign ? -v : v;
    }
    if (e == 31)
        return compress_u2f(sign | 0x7f800000u | m << 13);
    return compress_u2f(sign | (e + 112u) << 23 | m << 13);
}

/* Tails and fallbacks of kernels.c's scans and half conversions. */

size_t
compress_select_ge_ref(const float *x,
                       size_t n,
                       uint32_t tkey,
                       uint32_t *idx,
                       uint32_t *bits,
                       size_t cap,
                       size_t count,
                       size_t base,
                       uint32_t *top)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = compress_f2u(x[i]), key = u & 0x7fffffffu;
        *top = key > *top ? key : *top;
        if (key >= tkey) {
            if (count < cap) {
                idx[count] = (uint32_t)(base + i);
                if (bits != NULL)
                    bits[count] = u;
            }
            count++;
        }
    }
    return count;
}

size_t
compress_select_range_ref(const uint32_t *bits,
                          const uint32_t *tag,
                          size_t m,
                          uint32_t lo,
                          uint32_t span,
                          uint32_t *out_tag,
                          float *out_vals,
                          size_t cap,
                          size_t count)
{
    for (size_t i = 0; i < m; i++) {
        uint32_t u = bits[i];
        if ((u & 0x7fffffffu) - lo < span) {
            if (count < cap) {
                out_tag[count] = tag[i];
                if (out_vals != NULL)
                    out_vals[count] = compress_u2f(u);
            }
            count++;
        }
    }
    return count;
}

/* Scalar conversions of n < 8 (or any n) values to and from bytes. */
bool
compress_to_half_bytes_ref(const float *x, size_t n, bool bf16, uint8_t *out)
{
    bool finite = true;
    uint16_t h[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        finite = (bf16 ? compress_f32_to_bf16_ref(x + i, m, h)
                       : compress_f32_to_f16_ref(x + i, m, h)) &&
                 finite;
        for (size_t j = 0; j < m; j++) {
            out[2 * (i + j)] = (uint8_t)h[j];
            out[2 * (i + j) + 1] = (uint8_t)(h[j] >> 8);
        }
    }
    return finite;
}

bool
compress_half_bytes_ref(const uint8_t *in, size_t n, bool bf16, float *y)
{
    bool finite = true;
    uint16_t expo = bf16 ? 0x7f80u : 0x7c00u;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(in[2 * i] | in[2 * i + 1] << 8);
        finite = finite && (h & expo) != expo;
        y[i] =
            bf16 ? compress_u2f((uint32_t)h << 16) : compress_f16_to_f32_ref(h);
    }
    return finite;
}

/* --- the device kernels' twins (compress/device.h) -------------------------
 * Each loop runs the kernel's threads in order; the body of the loop is one
 * thread's work, in the kernel's arithmetic (compress/cuda.cu). */

static rumor_err
s_dev_alloc(size_t bytes, void **p, void *stream)
{
    (void)stream;
    *p = malloc(bytes ? bytes : 1);
    return *p == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

static void
s_dev_release(void *p, void *stream)
{
    (void)stream;
    free(p);
}

static rumor_err
s_dev_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes > 0)
        memcpy(dst, src, bytes);
    return RUMOR_OK;
}

static void
s_dev_zero(void *p, size_t bytes, void *stream)
{
    (void)stream;
    memset(p, 0, bytes);
}

static rumor_err
s_dev_finish(void *stream)
{
    (void)stream;
    return RUMOR_OK;
}

static void
s_dev_finite(const float *x, size_t n, uint32_t *flag, void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++)
        if ((compress_f2u(x[i]) & 0x7f800000u) == 0x7f800000u)
            *flag = 1;
}

static void
s_dev_dense_encode(const float *x,
                   size_t n,
                   enum compress_dev_fmt fmt,
                   uint8_t *body,
                   uint32_t *flag,
                   void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = compress_f2u(x[i]);
        if ((u & 0x7f800000u) == 0x7f800000u)
            *flag = 1;
        if (fmt == COMPRESS_DEV_FP32) {
            core_put_u32(body + 4 * i, u);
            continue;
        }
        uint16_t h = 0;
        if (fmt == COMPRESS_DEV_FP16)
            (void)compress_f32_to_f16_ref(x + i, 1, &h);
        else
            (void)compress_f32_to_bf16_ref(x + i, 1, &h);
        body[2 * i] = (uint8_t)h;
        body[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* Element i of a dense body as a float bit pattern (fp16 widened). */
static uint32_t
s_dev_dense_get(const uint8_t *body, size_t i, enum compress_dev_fmt fmt)
{
    if (fmt == COMPRESS_DEV_FP32)
        return core_get_u32(body + 4 * i);
    uint16_t h = (uint16_t)(body[2 * i] | body[2 * i + 1] << 8);
    if (fmt == COMPRESS_DEV_BF16)
        return (uint32_t)h << 16;
    return compress_f2u(compress_f16_to_f32_ref(h));
}

static void
s_dev_dense_check(const uint8_t *body,
                  size_t n,
                  enum compress_dev_fmt fmt,
                  uint32_t *flag,
                  void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++)
        if ((s_dev_dense_get(body, i, fmt) & 0x7f800000u) == 0x7f800000u)
            *flag = 1;
}

static void
s_dev_dense_decode(const uint8_t *body,
                   size_t n,
                   enum compress_dev_fmt fmt,
                   bool add,
                   float alpha,
                   float *y,
                   const uint32_t *flag,
                   void *stream)
{
    (void)stream;
    for (size_t i = 0; *flag == 0 && i < n; i++) {
        float v = compress_u2f(s_dev_dense_get(body, i, fmt));
        y[i] = add ? y[i] + alpha * v : v;
    }
}

/* Chunk c of bucket k: [*at, *at + *m). */
static void
s_dev_chunk(size_t n, size_t bucket, size_t k, size_t c, size_t *at, size_t *m)
{
    size_t start = k * bucket, end = start + bucket < n ? start + bucket : n;
    *at = start + c * COMPRESS_DEV_SIGN_CHUNK;
    size_t left = *at < end ? end - *at : 0;
    *m = left < COMPRESS_DEV_SIGN_CHUNK ? left : COMPRESS_DEV_SIGN_CHUNK;
}

static void
s_dev_sign_sums(const float *x,
                size_t n,
                size_t bucket,
                double *part,
                void *stream)
{
    (void)stream;
    size_t per = compress_buckets(bucket, COMPRESS_DEV_SIGN_CHUNK);
    for (size_t t = 0; t < compress_buckets(n, bucket) * per; t++) {
        size_t at = 0, m = 0;
        s_dev_chunk(n, bucket, t / per, t % per, &at, &m);
        double lane[8] = {0}, tail = 0;
        size_t whole = m & ~(size_t)7;
        for (size_t i = 0; i < whole; i++)
            lane[i % 8] += fabs((double)x[at + i]);
        for (size_t i = whole; at % 8 != 0 && i < m; i++)
            tail += fabs((double)x[at + i]);
        part[t] = s_lanes_sum(lane, tail);
    }
}

static void
s_dev_sign_scales(const float *x,
                  size_t n,
                  size_t bucket,
                  const double *part,
                  uint8_t *scales,
                  uint32_t *flag,
                  void *stream)
{
    (void)stream;
    size_t per = compress_buckets(bucket, COMPRESS_DEV_SIGN_CHUNK);
    for (size_t k = 0; k < compress_buckets(n, bucket); k++) {
        double sum = 0;
        size_t start = k * bucket, m = n - start < bucket ? n - start : bucket;
        for (size_t c = 0; c < per; c++) {
            size_t at = 0, mm = 0;
            s_dev_chunk(n, bucket, k, c, &at, &mm);
            sum += part[k * per + c];
            for (size_t i = mm & ~(size_t)7; at % 8 == 0 && i < mm; i++)
                sum += fabs((double)x[at + i]);
        }
        if (!isfinite(sum))
            *flag = 1;
        compress_put_f32(scales + 4 * k, (float)(sum / (double)m));
    }
}

static void
s_dev_sign_bits(const float *x, size_t n, uint8_t *bits, void *stream)
{
    (void)stream;
    for (size_t j = 0; j < (n + 7) / 8; j++) {
        uint8_t byte = 0;
        for (size_t i = 8 * j; i < 8 * j + 8 && i < n; i++)
            byte |= (uint8_t)((compress_f2u(x[i]) >> 31) << (i % 8));
        bits[j] = byte;
    }
}

static void
s_dev_sign_decode(const uint8_t *scales,
                  const uint8_t *bits,
                  size_t n,
                  size_t bucket,
                  bool add,
                  float alpha,
                  float *y,
                  const uint32_t *flag,
                  void *stream)
{
    (void)stream;
    for (size_t i = 0; *flag == 0 && i < n; i++) {
        float s = compress_get_f32(scales + 4 * (i / bucket));
        float q = (bits[i / 8] >> (i % 8)) & 1u ? -s : s;
        y[i] = add ? y[i] + alpha * q : q;
    }
}

/* Byte j of the stochastic-rounding stream (compress_stream_bytes_ref's
 * layout) from its one Philox block. */
static uint8_t
s_dev_stream_byte(uint64_t seed, uint64_t stream, uint64_t j)
{
    uint64_t o = j % 256, block = 16 * (j / 256) + (o / 4) % 16;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)block,
                             (uint32_t)(block >> 32),
                             (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    uint32_t w[4];
    rumor_philox4x32_10(ctr, key, w);
    return (uint8_t)(w[o / 64] >> (8 * (o % 4)));
}

static void
s_dev_quant_scales(const float *x,
                   const struct compress_dev_quant *q,
                   uint8_t *scales,
                   float *inv,
                   uint32_t *flag,
                   void *stream)
{
    (void)stream;
    for (size_t k = 0; k < compress_buckets(q->n, q->bucket); k++) {
        size_t start = k * q->bucket;
        size_t m = q->n - start < q->bucket ? q->n - start : q->bucket;
        uint32_t top = 0;
        for (size_t i = 0; q->tern && i < m; i++) {
            uint32_t key = compress_f2u(x[start + i]) & 0x7fffffffu;
            top = key > top ? key : top;
        }
        double acc = q->tern ? (double)compress_u2f(top)
                             : sqrt(compress_sumsq_ref(x + start, m));
        float norm = 0, iv = 0;
        if (!compress_bucket_scale(acc, q->s, &norm, &iv))
            *flag |= COMPRESS_DEV_NUMERIC;
        compress_put_f32(scales + 4 * k, norm);
        inv[k] = iv;
    }
}

/* Element i's code: quant.c's float level, or qsgd_levels.c's double one
 * from the bucket's norm. */
static uint32_t
s_dev_quant_code(const float *x,
                 size_t i,
                 const struct compress_dev_quant *q,
                 const uint8_t *scales,
                 const float *inv,
                 uint16_t r)
{
    if (!q->levels)
        return compress_level_code(x[i], inv[i / q->bucket], r, q->s, q->b);
    float norm = compress_get_f32(scales + 4 * (i / q->bucket));
    double dinv = norm >= COMPRESS_NORM_MIN ? (double)q->s / (double)norm : 0;
    uint32_t l = compress_qsgd_level(x[i], dinv, r, q->s);
    return l | (uint32_t)(l > 0 && signbit(x[i])) << q->b;
}

static void
s_dev_quant_codes(const float *x,
                  const struct compress_dev_quant *q,
                  const uint8_t *scales,
                  const float *inv,
                  uint64_t seed,
                  uint64_t counter,
                  uint8_t *codes,
                  void *stream)
{
    (void)stream;
    unsigned w = q->b + 1;
    size_t bytes = (q->n * w + 7) / 8;
    for (size_t g = 0; g < (q->n + 7) / 8; g++) {
        uint8_t buf[26] = {0}; /* b + 1 <= 26 bytes: s < 2^25 */
        for (size_t t = 0; t < 8 && 8 * g + t < q->n; t++) {
            size_t i = 8 * g + t;
            uint16_t r =
                (uint16_t)(s_dev_stream_byte(seed, counter, i) << 8 |
                           s_dev_stream_byte(seed,
                                             counter,
                                             COMPRESS_DRAW_LOW + i / 16));
            uint32_t code = s_dev_quant_code(x, i, q, scales, inv, r);
            for (unsigned j = 0; j < w; j++)
                buf[(t * w + j) / 8] |=
                    (uint8_t)(((code >> j) & 1u) << ((t * w + j) % 8));
        }
        for (unsigned j = 0; j < w && g * w + j < bytes; j++)
            codes[g * w + j] = buf[j];
    }
}

/* Code i of a packed stream of (n w + 7) / 8 bytes (w <= 26: within the
 * five bytes from the one holding its first bit). */
static uint32_t
s_dev_code(const uint8_t *codes, size_t n, unsigned w, size_t i)
{
    size_t bit = i * w, at = bit / 8, bytes = (n * w + 7) / 8;
    uint64_t v = 0;
    for (unsigned j = 0; j < 5 && at + j < bytes; j++)
        v |= (uint64_t)codes[at + j] << (8 * j);
    return (uint32_t)(v >> (bit % 8)) & ((1u << w) - 1);
}

static void
s_dev_quant_check(const uint8_t *codes,
                  const struct compress_dev_quant *q,
                  uint32_t *flag,
                  void *stream)
{
    (void)stream;
    for (size_t i = 0; i < q->n; i++) {
        uint32_t code = s_dev_code(codes, q->n, q->b + 1, i);
        uint32_t l = code & ((1u << q->b) - 1);
        if (l > q->s || (l == 0 && code >> q->b))
            *flag |= COMPRESS_DEV_PROTO;
    }
}

static void
s_dev_quant_decode(const uint8_t *scales,
                   const uint8_t *codes,
                   const struct compress_dev_quant *q,
                   bool add,
                   float alpha,
                   float *y,
                   const uint32_t *flag,
                   void *stream)
{
    (void)stream;
    for (size_t i = 0; *flag == 0 && i < q->n; i++) {
        uint32_t code = s_dev_code(codes, q->n, q->b + 1, i);
        float scale =
            compress_get_f32(scales + 4 * (i / q->bucket)) / (float)q->s;
        float v = (float)(code & ((1u << q->b) - 1)) * scale;
        v = code >> q->b ? -v : v;
        y[i] = add ? y[i] + alpha * v : v;
    }
}

/* random-k's index of block j of k over n (sparse.c's s_randk_indices:
 * the 64-bit draw j is words 2 j, 2 j + 1 of the stream) and the block's
 * size. */
static size_t
s_dev_randk_index(size_t n,
                  size_t k,
                  size_t j,
                  uint64_t seed,
                  uint64_t counter,
                  size_t *size)
{
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t block = j / 2;
    const uint32_t ctr[4] = {(uint32_t)block,
                             (uint32_t)(block >> 32),
                             (uint32_t)counter,
                             (uint32_t)(counter >> 32)};
    uint32_t w[4];
    rumor_philox4x32_10(ctr, key, w);
    uint64_t r = w[2 * (j % 2)] | (uint64_t)w[2 * (j % 2) + 1] << 32;
    *size = (size_t)(hi - lo);
    return (size_t)(lo + (uint64_t)(((unsigned __int128)r * (hi - lo)) >> 64));
}

static void
s_dev_randk_gather(const float *x,
                   size_t n,
                   size_t k,
                   uint64_t seed,
                   uint64_t counter,
                   bool scale,
                   float *vals,
                   void *stream)
{
    (void)stream;
    for (size_t j = 0; j < k; j++) {
        size_t size = 0;
        size_t i = s_dev_randk_index(n, k, j, seed, counter, &size);
        vals[j] = scale ? x[i] * (float)size : x[i];
    }
}

static void
s_dev_randk_scatter(const float *vals,
                    size_t n,
                    size_t k,
                    uint64_t seed,
                    uint64_t counter,
                    float alpha,
                    float *y,
                    const uint32_t *flag,
                    void *stream)
{
    (void)stream;
    for (size_t j = 0; *flag == 0 && j < k; j++) {
        size_t size = 0;
        size_t i = s_dev_randk_index(n, k, j, seed, counter, &size);
        y[i] = y[i] + alpha * vals[j];
    }
}

/* The key of x_i: |x_i| as a bit pattern. */
static uint32_t
s_dev_key(const float *x, size_t i)
{
    return compress_f2u(x[i]) & 0x7fffffffu;
}

/* select_kth's one-thread kernel after the histogram of the digit at sh:
 * the digit where the k-th largest key lies joins the prefix (kept in
 * sel->eq), the keys in higher bins join the count above (sel->count). */
static void
s_dev_select_pick(struct compress_dev_sel *sel, unsigned sh, size_t k)
{
    for (uint32_t bin = 255;; bin--) {
        if (sel->count + sel->hist[bin] >= k || bin == 0) {
            sel->eq |= bin << sh;
            break;
        }
        sel->count += sel->hist[bin];
    }
    if (sh == 0) {
        sel->lo = sel->eq + 1;
        sel->ties = (uint32_t)k - sel->count;
    }
}

static void
s_dev_select_kth(const float *x,
                 size_t n,
                 size_t k,
                 struct compress_dev_sel *sel,
                 void *stream)
{
    (void)stream;
    memset(sel, 0, sizeof *sel);
    for (unsigned sh = 24;; sh -= 8) {
        uint32_t high = sh == 24 ? 0 : ~0u << (sh + 8);
        memset(sel->hist, 0, sizeof sel->hist);
        for (size_t i = 0; i < n; i++)
            if (((s_dev_key(x, i) ^ sel->eq) & high) == 0)
                sel->hist[(s_dev_key(x, i) >> sh) & 0xffu]++;
        s_dev_select_pick(sel, sh, k);
        if (sh == 0)
            break;
    }
}

/* The counts of element i: taken by lo (high word), equal to eq (low). */
static uint64_t
s_dev_sel_counts(const float *x, size_t i, const struct compress_dev_sel *sel)
{
    uint32_t key = s_dev_key(x, i);
    return (uint64_t)(key >= sel->lo) << 32 | (key == sel->eq);
}

static void
s_dev_select_scan(const float *x,
                  size_t n,
                  struct compress_dev_sel *sel,
                  uint64_t *offs,
                  void *stream)
{
    (void)stream;
    size_t nb = compress_buckets(n, COMPRESS_DEV_SEL_BLOCK);
    uint64_t acc = 0;
    for (size_t b = 0; b < nb; b++) {
        offs[b] = acc;
        size_t end = (b + 1) * COMPRESS_DEV_SEL_BLOCK;
        for (size_t i = b * COMPRESS_DEV_SEL_BLOCK; i < n && i < end; i++)
            acc += s_dev_sel_counts(x, i, sel);
    }
    offs[nb] = acc;
    uint32_t eq = (uint32_t)acc;
    sel->count = (uint32_t)(acc >> 32) + (eq < sel->ties ? eq : sel->ties);
}

static void
s_dev_select_emit(const float *x,
                  size_t n,
                  const struct compress_dev_sel *sel,
                  const uint64_t *offs,
                  uint32_t *idx,
                  float *vals,
                  void *stream)
{
    (void)stream;
    uint64_t before = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % COMPRESS_DEV_SEL_BLOCK == 0)
            before = offs[i / COMPRESS_DEV_SEL_BLOCK];
        uint64_t mine = s_dev_sel_counts(x, i, sel);
        uint32_t gt = (uint32_t)(before >> 32), eq = (uint32_t)before;
        if ((mine >> 32) != 0 || ((uint32_t)mine != 0 && eq < sel->ties)) {
            size_t slot = gt + (eq < sel->ties ? eq : sel->ties);
            idx[slot] = (uint32_t)i;
            vals[slot] = x[i];
        }
        before += mine;
    }
}

static void
s_dev_rice_write(const uint32_t *idx,
                 size_t k,
                 unsigned r,
                 uint32_t *words,
                 uint64_t *bits,
                 void *stream)
{
    (void)stream;
    uint64_t start = 0;
    for (size_t j = 0; j < k; j++) {
        uint64_t gap = j == 0 ? idx[0] : (uint64_t)(idx[j] - idx[j - 1] - 1);
        /* q zeros, a one, then the gap's low r bits: at most 62 bits from
         * the word holding the one, so two word ORs (r <= 30). */
        uint64_t at = start + (gap >> r);
        uint64_t v = ((gap & ((1ull << r) - 1)) << 1 | 1u) << (at % 32);
        words[at / 32] |= (uint32_t)v;
        if (v >> 32 != 0)
            words[at / 32 + 1] |= (uint32_t)(v >> 32);
        start += (gap >> r) + 1 + r;
    }
    *bits = start;
}

static void
s_dev_natural_expo(const float *x,
                   size_t n,
                   uint64_t seed,
                   uint64_t counter,
                   uint8_t *expo,
                   uint32_t *flag,
                   void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = compress_f2u(x[i]);
        uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
        if (e == 255)
            *flag |= COMPRESS_DEV_NUMERIC;
        uint32_t draw =
            (uint32_t)s_dev_stream_byte(seed, counter, i) << 8 |
            s_dev_stream_byte(seed, counter, COMPRESS_DRAW_LOW + i / 16);
        uint32_t E = e + (((draw << 7) | 0x40u) < mant);
        expo[i] = (uint8_t)(E > 254 ? 254 : E);
    }
}

static void
s_dev_natural_check(const uint8_t *expo, size_t n, uint32_t *flag, void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++)
        if (expo[i] == 255)
            *flag |= COMPRESS_DEV_NUMERIC;
}

static void
s_dev_natural_decode(const uint8_t *expo,
                     const uint8_t *bits,
                     size_t n,
                     bool add,
                     float alpha,
                     float *y,
                     const uint32_t *flag,
                     void *stream)
{
    (void)stream;
    if (*flag == 0) /* the CPU decoder's own reference, the kernel's steps */
        compress_natural_expand_ref(expo, bits, n, add, alpha, y);
}

static void
s_dev_maxabs(const float *x, size_t n, uint32_t *key, void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++)
        *key = s_dev_key(x, i) > *key ? s_dev_key(x, i) : *key;
}

static void
s_dev_sample(const float *x, size_t n, size_t m, float *sample, void *stream)
{
    (void)stream;
    for (size_t j = 0; j < m; j++)
        sample[j] = x[(size_t)((uint64_t)j * n / m)];
}

static void
s_dev_fp8_symbols(const float *x,
                  size_t n,
                  float s1,
                  float s2,
                  unsigned M,
                  unsigned E,
                  uint8_t *sym,
                  void *stream)
{
    (void)stream;
    compress_fp8_symbols_ref(x, n, s1, s2, M, E, sym); /* one value a step */
}

static void
s_dev_fp8_decode(const uint8_t *sym,
                 const float *val,
                 size_t n,
                 float alpha,
                 float *y,
                 const uint32_t *flag,
                 void *stream)
{
    (void)stream;
    for (size_t i = 0; *flag == 0 && i < n; i++)
        y[i] = y[i] + alpha * val[sym[i]];
}

static void
s_dev_dgc_sample(const float *x,
                 size_t n,
                 size_t m,
                 uint64_t seed,
                 float *sample,
                 void *stream)
{
    (void)stream;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (size_t j = 0; j < m; j++) {
        const uint32_t ctr[4] = {(uint32_t)(j / 4),
                                 (uint32_t)((uint64_t)j / 4 >> 32),
                                 0,
                                 0};
        uint32_t w[4];
        rumor_philox4x32_10(ctr, key, w);
        size_t at = (size_t)(((uint64_t)w[j % 4] * n) >> 32);
        sample[j] = compress_u2f(s_dev_key(x, at));
    }
}

static void
s_dev_idx_scatter(const float *vals,
                  const uint32_t *idx,
                  size_t k,
                  float alpha,
                  float *y,
                  const uint32_t *flag,
                  void *stream)
{
    (void)stream;
    for (size_t j = 0; *flag == 0 && j < k; j++)
        y[idx[j]] = y[idx[j]] + alpha * vals[j];
}

static void
s_dev_fp8_error(const float *x,
                size_t n,
                float s1,
                float s2,
                unsigned M,
                unsigned E,
                const float *val,
                double *err,
                void *stream)
{
    (void)stream;
    for (size_t at = 0, p = 0; at < n; at += COMPRESS_FP8_SAMPLE, p++) {
        size_t m = n - at < COMPRESS_FP8_SAMPLE ? n - at : COMPRESS_FP8_SAMPLE;
        err[p] = compress_fp8_error_ref(x + at, m, s1, s2, M, E, val);
    }
}

static void
s_dev_clip_parts(const float *x,
                 size_t n,
                 const double *mean,
                 double *part,
                 void *stream)
{
    (void)stream;
    for (size_t j = 0; j < compress_buckets(n, COMPRESS_CLIP_PIECE); j++) {
        size_t at = j * COMPRESS_CLIP_PIECE;
        size_t m = n - at < COMPRESS_CLIP_PIECE ? n - at : COMPRESS_CLIP_PIECE;
        double sum = 0;
        for (size_t i = at; i < at + m; i++) {
            double d = mean != NULL ? (double)x[i] - *mean : (double)x[i];
            sum += mean != NULL ? d * d : d;
        }
        part[j] = sum;
    }
}

static void
s_dev_clip_moment(const double *part,
                  size_t n,
                  double clip,
                  double *mean,
                  float *t,
                  uint32_t *flag,
                  void *stream)
{
    (void)stream;
    double sum = 0;
    for (size_t j = 0; j < compress_buckets(n, COMPRESS_CLIP_PIECE); j++)
        sum += part[j];
    if (t != NULL) {
        *t = (float)(clip * sqrt(sum / (double)n));
        return;
    }
    if (!isfinite(sum))
        *flag |= COMPRESS_DEV_NUMERIC;
    *mean = sum / (double)n;
}

static void
s_dev_clip_apply(const float *x,
                 size_t n,
                 const float *t,
                 float *v,
                 void *stream)
{
    (void)stream;
    for (size_t i = 0; i < n; i++)
        v[i] = fminf(fmaxf(x[i], -*t), *t);
}

static void
s_dev_quant_inv(const uint8_t *scales,
                const struct compress_dev_quant *q,
                float *inv,
                void *stream)
{
    (void)stream;
    for (size_t k = 0; k < compress_buckets(q->n, q->bucket); k++) {
        float norm = compress_get_f32(scales + 4 * k);
        inv[k] = norm >= COMPRESS_NORM_MIN ? (float)q->s / norm : 0.0f;
    }
}

const struct compress_dev_i compress_dev_ref = {"ref",
                                                s_dev_alloc,
                                                s_dev_release,
                                                s_dev_copy,
                                                s_dev_copy,
                                                s_dev_zero,
                                                s_dev_finish,
                                                s_dev_finite,
                                                s_dev_dense_encode,
                                                s_dev_dense_check,
                                                s_dev_dense_decode,
                                                s_dev_sign_sums,
                                                s_dev_sign_scales,
                                                s_dev_sign_bits,
                                                s_dev_sign_decode,
                                                s_dev_quant_scales,
                                                s_dev_quant_codes,
                                                s_dev_quant_check,
                                                s_dev_quant_decode,
                                                s_dev_randk_gather,
                                                s_dev_randk_scatter,
                                                s_dev_select_kth,
                                                s_dev_select_scan,
                                                s_dev_select_emit,
                                                s_dev_rice_write,
                                                s_dev_natural_expo,
                                                s_dev_natural_check,
                                                s_dev_natural_decode,
                                                s_dev_maxabs,
                                                s_dev_sample,
                                                s_dev_fp8_symbols,
                                                s_dev_fp8_decode,
                                                s_dev_dgc_sample,
                                                s_dev_idx_scatter,
                                                s_dev_fp8_error,
                                                s_dev_clip_parts,
                                                s_dev_clip_moment,
                                                s_dev_clip_apply,
                                                s_dev_quant_inv};
