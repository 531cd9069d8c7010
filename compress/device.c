/*
 * The device codec path (compress/device.h): the payload is assembled in
 * device memory by kernels and copied to the host once; the headers, the
 * size and every check a header allows are done here on the host, as the
 * CPU codecs do them, so a device payload is the CPU codec's byte for byte.
 * Done: fp32, fp16, bf16, sign, natural, qsgd (fixed-width codes, any
 * levels, biased or not; also gamma and Elias codes, coded on the host over
 * the fixed codes made on the device, and decoded there),
 * terngrad (clip too; share=1's scalers and encode at agreed scalers
 * too), fp8 and fp4 (every bias; their
 * Huffman stage on the host, over symbols made on the device), and randk, topk,
 * threshold and dgc whose values codec is one of these (a coded one, fp8 /
 * fp4 or gamma / Elias qsgd, made after the selection with its own wait;
 * fp8 / fp4 values decoded on the host, k of them); not the lossless
 * huffman. Everything is ordered
 * on the caller's stream; the one wait is the stream's own, for the bytes and
 * the NaN/Inf flag to land (threshold waits once more, for its count, which
 * sizes the rest; dgc once per try). The sparse codecs decode their Rice-coded
 * index list on the host, where the payload is.
 */
#include "compress/device.h"

#include "compress/compress_impl.h"
#include "core/bits.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#define S_RANDK_SEEDS 16 /* seed and counter after a random-k header */

/* The codecs with kernels (a random-k codec's values codec among them). */
static bool
s_dense(const rumor_codec *c)
{
    switch (c->id) {
    case RUMOR_CODEC_FP32:
    case RUMOR_CODEC_FP16:
    case RUMOR_CODEC_BF16:
    case RUMOR_CODEC_SIGN:
    case RUMOR_CODEC_NATURAL:
        return true;
    case RUMOR_CODEC_QSGD: /* bits = 0: qsgd_levels.c's format */
        return c->qcode == COMPRESS_QCODE_FIXED;
    case RUMOR_CODEC_TERNGRAD: /* share=1: its own encode is share=0's */
        return true;
    default:
        return false;
    }
}

/* The sparse codecs whose selection the device makes (sparse.c's format:
 * a Rice-coded index list, then the values' payload). */
static bool
s_sparse(const rumor_codec *c)
{
    return c->id == RUMOR_CODEC_TOPK || c->id == RUMOR_CODEC_THRESHOLD ||
           c->id == RUMOR_CODEC_DGC;
}

/* fp8 and fp4 (top level only: their Huffman stage runs on the host). */
static bool
s_fp8(const rumor_codec *c)
{
    return c->id == RUMOR_CODEC_FP8 || c->id == RUMOR_CODEC_FP4;
}

/* qsgd with gamma or Elias codes (top level only: the variable-length
 * stage runs on the host, over the fixed-width codes the device makes). */
static bool
s_vlc(const rumor_codec *c)
{
    return c->id == RUMOR_CODEC_QSGD && c->qcode != COMPRESS_QCODE_FIXED;
}

/* fp8, fp4 and the coded qsgd: their last stage runs on the host, so
 * their length is known only once they are made. (The lossless huffman,
 * which codes every byte of the floats themselves, has no device path:
 * the list leaves it out, and a device would only copy the whole
 * vector down for it.) */
static bool
s_coded(const rumor_codec *c)
{
    return s_fp8(c) || s_vlc(c);
}

bool
rumor_codec_device_supported(const rumor_codec *codec)
{
    if (codec->id == RUMOR_CODEC_RANDK || s_sparse(codec))
        return s_dense(codec->inner) || s_coded(codec->inner);
    return s_coded(codec) || s_dense(codec);
}

static bool
s_quant(rumor_codec_id id)
{
    return id == RUMOR_CODEC_QSGD || id == RUMOR_CODEC_TERNGRAD;
}

/* The shape of a QSGD / TernGrad payload: levels 0..s, codes of b + 1
 * bits with b the bits of s (s = 1 for TernGrad, 2^bits - 1 for quant.c's
 * QSGD, any for the levels format). */
static struct compress_dev_quant
s_quant_shape(bool tern, uint32_t s, bool levels, size_t n, size_t bucket)
{
    unsigned b = 32u - (unsigned)__builtin_clz(s);
    struct compress_dev_quant q = {n, bucket, s, b, tern, levels};
    return q;
}

/* The shape of codec c's payload of n values. */
static struct compress_dev_quant
s_quant_of(const rumor_codec *c, size_t n)
{
    bool tern = c->id == RUMOR_CODEC_TERNGRAD, levels = !tern && c->bits == 0;
    uint32_t s = tern ? 1 : levels ? c->levels : (1u << c->bits) - 1;
    return s_quant_shape(tern, s, levels, n, c->bucket);
}

/* Bytes before a QSGD / TernGrad payload's codes: the header, the norms
 * and, in the levels format, s. */
static size_t
s_quant_head(const struct compress_dev_quant *q)
{
    return RUMOR_COMPRESS_HEADER_BYTES + 4 * compress_buckets(q->n, q->bucket) +
           (q->levels ? 4 : 0);
}

static enum compress_dev_fmt
s_fmt(rumor_codec_id id)
{
    return id == RUMOR_CODEC_FP32   ? COMPRESS_DEV_FP32
           : id == RUMOR_CODEC_FP16 ? COMPRESS_DEV_FP16
                                    : COMPRESS_DEV_BF16;
}

/* Body bytes of n elements of the codecs with headers of zeros: the
 * dense formats, natural compression (exponent bytes, then sign bits). */
static size_t
s_plain_body(rumor_codec_id id, size_t n)
{
    if (id == RUMOR_CODEC_NATURAL)
        return n + (n + 7) / 8;
    return (id == RUMOR_CODEC_FP32 ? 4 : 2) * n;
}

/* Payload bytes of n elements (exact for every supported codec). */
static size_t
s_need(const rumor_codec *c, size_t n)
{
    if (c->id == RUMOR_CODEC_RANDK)
        return RUMOR_COMPRESS_HEADER_BYTES + S_RANDK_SEEDS +
               s_need(c->inner, compress_sparse_k(c, n));
    if (c->id == RUMOR_CODEC_SIGN)
        return RUMOR_COMPRESS_HEADER_BYTES +
               4 * compress_buckets(n, c->bucket) + (n + 7) / 8;
    if (s_quant(c->id)) {
        struct compress_dev_quant q = s_quant_of(c, n);
        return s_quant_head(&q) + (n * (q.b + 1) + 7) / 8;
    }
    return RUMOR_COMPRESS_HEADER_BYTES + s_plain_body(c->id, n);
}

/* Payload bytes of n elements at most: exact for the kernels' codecs,
 * the CPU codec's bound for a coded one. */
static size_t
s_room(const rumor_codec *c, size_t n)
{
    size_t bound = 0;
    bool exact = false;
    if (!s_coded(c))
        return s_need(c, n);
    c->ops->size(c, n, &bound, &exact);
    return bound;
}

/* The headers the CPU codecs write (dense.c, quant.c, sparse.c), and
 * what quant.c changes once the body is written: biased QSGD's norms. */
static void
s_headers(const rumor_codec *c,
          size_t n,
          uint64_t seed,
          uint64_t counter,
          uint8_t *out)
{
    struct compress_header h =
        {(uint8_t)c->id, RUMOR_COMPRESS_VERSION, 0, 0, (uint32_t)n, 0};
    if (c->id == RUMOR_CODEC_SIGN || s_quant(c->id))
        h.p2 = (uint32_t)c->bucket;
    if (c->id == RUMOR_CODEC_QSGD)
        h.p0 = (uint8_t)c->bits;
    if (c->id == RUMOR_CODEC_QSGD && c->bits == 0) /* s after the norms */
        core_put_u32(out + RUMOR_COMPRESS_HEADER_BYTES +
                         4 * compress_buckets(n, c->bucket),
                     c->levels);
    if (c->id == RUMOR_CODEC_QSGD && c->biased) /* on the norms sent */
        compress_qsgd_rescale_norms(c, out, n);
    if (c->id == RUMOR_CODEC_RANDK) {
        size_t k = compress_sparse_k(c, n);
        h.p1 = (uint8_t)c->scale;
        h.p2 = (uint32_t)k;
        core_put_u64(out + RUMOR_COMPRESS_HEADER_BYTES, seed);
        core_put_u64(out + RUMOR_COMPRESS_HEADER_BYTES + 8, counter);
        if (!s_coded(c->inner)) /* a coded one wrote its own */
            s_headers(c->inner,
                      k,
                      0,
                      0,
                      out + RUMOR_COMPRESS_HEADER_BYTES + S_RANDK_SEEDS);
    }
    compress_header_write(out, &h);
}

/* TernGrad's clip (quant.c s_clip_at): v = x clipped to +-c sigma, the
 * mean and the deviation summed in quant.c's pieces, in its order. */
static rumor_err
s_clip(const struct compress_dev_i *d,
       const rumor_codec *c,
       const float *x,
       size_t n,
       float *v,
       uint32_t *flag,
       void *stream)
{
    size_t np = compress_buckets(n, COMPRESS_CLIP_PIECE);
    void *part = NULL;
    /* np partial sums, then the mean, then t */
    rumor_err rc = d->alloc((np + 2) * sizeof(double), &part, stream);
    if (rc != RUMOR_OK)
        return rc;
    double *mean = (double *)part + np;
    float *t = (float *)(mean + 1);
    d->clip_parts(x, n, NULL, part, stream);
    d->clip_moment(part, n, c->clip, mean, NULL, flag, stream);
    d->clip_parts(x, n, mean, part, stream);
    d->clip_moment(part, n, c->clip, NULL, t, flag, stream);
    d->clip_apply(x, n, t, v, stream);
    d->release(part, stream);
    return RUMOR_OK;
}

/* The quantized body of x (QSGD, TernGrad; clipped first when asked). */
static rumor_err
s_quant_body(const struct compress_dev_i *d,
             const rumor_codec *c,
             const float *x,
             size_t n,
             uint64_t seed,
             uint64_t counter,
             uint8_t *pay,
             uint32_t *flag,
             void *stream)
{
    struct compress_dev_quant q = s_quant_of(c, n);
    size_t nb = compress_buckets(n, c->bucket);
    bool clip = c->id == RUMOR_CODEC_TERNGRAD && c->clip > 0 && n > 0;
    void *inv = NULL, *v = NULL;
    rumor_err rc = d->alloc((nb ? nb : 1) * sizeof(float), &inv, stream);
    if (rc == RUMOR_OK && clip)
        rc = d->alloc(n * sizeof(float), &v, stream);
    if (rc == RUMOR_OK && clip)
        rc = s_clip(d, c, x, n, v, flag, stream);
    if (rc == RUMOR_OK) {
        const float *src = clip ? v : x;
        uint8_t *body = pay + RUMOR_COMPRESS_HEADER_BYTES;
        d->quant_scales(src, &q, body, inv, flag, stream);
        d->quant_codes(src,
                       &q,
                       body,
                       inv,
                       seed,
                       counter,
                       pay + s_quant_head(&q),
                       stream);
    }
    if (v != NULL)
        d->release(v, stream);
    if (inv != NULL)
        d->release(inv, stream);
    return rc;
}

/* Writes the payload of x (its body; headers are the host's) from pay
 * on, in device memory. */
static rumor_err
s_encode_body(const struct compress_dev_i *d,
              const rumor_codec *c,
              const float *x,
              size_t n,
              uint64_t seed,
              uint64_t counter,
              uint8_t *pay,
              uint32_t *flag,
              void *stream)
{
    uint8_t *body = pay + RUMOR_COMPRESS_HEADER_BYTES;
    if (c->id == RUMOR_CODEC_SIGN) {
        size_t nb = compress_buckets(n, c->bucket);
        size_t per = compress_buckets(c->bucket, COMPRESS_DEV_SIGN_CHUNK);
        void *part = NULL;
        rumor_err rc =
            d->alloc((nb ? nb * per : 1) * sizeof(double), &part, stream);
        if (rc != RUMOR_OK)
            return rc;
        d->sign_sums(x, n, c->bucket, part, stream);
        d->sign_scales(x, n, c->bucket, part, body, flag, stream);
        d->sign_bits(x, n, body + 4 * nb, stream);
        d->release(part, stream);
        return RUMOR_OK;
    }
    if (s_quant(c->id))
        return s_quant_body(d, c, x, n, seed, counter, pay, flag, stream);
    if (c->id == RUMOR_CODEC_NATURAL) {
        d->natural_expo(x, n, seed, counter, body, flag, stream);
        d->sign_bits(x, n, body + n, stream);
        return RUMOR_OK;
    }
    if (c->id != RUMOR_CODEC_RANDK) {
        d->dense_encode(x, n, s_fmt(c->id), body, flag, stream);
        return RUMOR_OK;
    }
    /* random-k reads only k values, but refuses NaN/Inf anywhere (and a
     * scaled value that overflows). */
    size_t k = compress_sparse_k(c, n);
    void *vals = NULL;
    rumor_err rc = d->alloc((k ? k : 1) * sizeof(float), &vals, stream);
    if (rc != RUMOR_OK)
        return rc;
    d->finite(x, n, flag, stream);
    d->randk_gather(x, n, k, seed, counter, c->scale, vals, stream);
    d->finite(vals, k, flag, stream);
    /* The values' rounding draws from a seed of their own (sparse.c). */
    rc = s_encode_body(d,
                       c->inner,
                       vals,
                       k,
                       rumor_seed_derive(seed, counter, 0x1e),
                       0,
                       body + S_RANDK_SEEDS,
                       flag,
                       stream);
    d->release(vals, stream);
    return rc;
}

/* Device buffers of one call, released together. */
struct s_bufs {
    void *p[12];
    size_t used;
};

static rumor_err
s_get(const struct compress_dev_i *d,
      struct s_bufs *b,
      size_t bytes,
      void **out,
      void *stream)
{
    if (b->used == sizeof b->p / sizeof b->p[0])
        return RUMOR_ENOMEM;
    rumor_err rc = d->alloc(bytes ? bytes : 1, out, stream);
    if (rc == RUMOR_OK)
        b->p[b->used++] = *out;
    return rc;
}

static void
s_put_all(const struct compress_dev_i *d, struct s_bufs *b, void *stream)
{
    while (b->used > 0)
        d->release(b->p[--b->used], stream);
}

/* The selection of the keys >= lo (threshold; DGC's tries), scanned; its
 * count sizes what follows, so this waits for it. */
static rumor_err
s_select_ge(const struct compress_dev_i *d,
            const float *x,
            size_t n,
            uint32_t lo,
            struct compress_dev_sel *sel,
            uint64_t *offs,
            size_t *count,
            void *stream)
{
    struct compress_dev_sel fixed = {lo, UINT32_MAX, 0, 0, {0}};
    uint32_t taken = 0;
    rumor_err rc = d->upload(sel, &fixed, sizeof fixed, stream);
    if (rc != RUMOR_OK)
        return rc;
    d->select_scan(x, n, sel, offs, stream);
    rc = d->download(&taken, &sel->count, sizeof taken, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    *count = taken;
    return rc;
}

/* top-k's selection (its radix select), scanned; k = 0 only when n = 0. */
static void
s_select_topk(const struct compress_dev_i *d,
              const float *x,
              size_t n,
              size_t k,
              struct compress_dev_sel *sel,
              uint64_t *offs,
              size_t *count,
              void *stream)
{
    if (k > 0)
        d->select_kth(x, n, k, sel, stream);
    else
        d->zero(sel, sizeof *sel, stream);
    d->select_scan(x, n, sel, offs, stream);
    *count = k;
}

/* DGC's sampled threshold with the CPU's decisions on the same counts
 * (sparse.c, compress_dgc_plan). The cut to top-k among too many
 * candidates is the top-k of x: they hold its k largest keys, and ties go
 * to the lowest index either way. Waits once for the sample's threshold
 * and once per try. */
static rumor_err
s_select_dgc(const struct compress_dev_i *d,
             const float *x,
             size_t n,
             size_t k,
             uint64_t seed,
             uint64_t counter,
             struct compress_dev_sel *sel,
             uint64_t *offs,
             size_t *count,
             void *stream)
{
    struct compress_dgc_plan p = compress_dgc_plan(n, k);
    void *sample = NULL;
    uint32_t T = 0;
    rumor_err rc = d->alloc(p.m * sizeof(float), &sample, stream);
    if (rc != RUMOR_OK)
        return rc;
    d->dgc_sample(x, n, p.m, compress_dgc_seed(seed, counter), sample, stream);
    d->select_kth(sample, p.m, p.ks, sel, stream);
    rc = d->download(&T, &sel->eq, sizeof T, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    d->release(sample, stream);
    float t = compress_u2f(T);
    for (int tries = 0; rc == RUMOR_OK && tries < COMPRESS_DGC_TRIES; tries++) {
        size_t got = 0;
        rc = s_select_ge(d, x, n, compress_f2u(t), sel, offs, &got, stream);
        if (rc != RUMOR_OK || (got >= p.lo && got <= p.hi)) {
            *count = got;
            return rc;
        }
        if (got > p.hi && got <= p.cap)
            break;
        t = got > p.hi ? t * 2.0f : t * 0.5f;
        if (!isfinite(t))
            break;
    }
    if (rc == RUMOR_OK)
        s_select_topk(d, x, n, k, sel, offs, count, stream);
    return rc;
}

/* The selection of the codec's indices (k of them, threshold aside) and
 * its scan; *count their number. */
static rumor_err
s_select(const struct compress_dev_i *d,
         const rumor_codec *c,
         const float *x,
         size_t n,
         size_t k,
         uint64_t seed,
         uint64_t counter,
         struct compress_dev_sel *sel,
         uint64_t *offs,
         size_t *count,
         void *stream)
{
    if (c->id == RUMOR_CODEC_THRESHOLD)
        return s_select_ge(d,
                           x,
                           n,
                           compress_f2u(c->threshold),
                           sel,
                           offs,
                           count,
                           stream);
    if (c->id == RUMOR_CODEC_DGC && k > 0 && k < n)
        return s_select_dgc(d,
                            x,
                            n,
                            k,
                            seed,
                            counter,
                            sel,
                            offs,
                            count,
                            stream);
    s_select_topk(d, x, n, k, sel, offs, count, stream);
    return RUMOR_OK;
}

/* The Rice stream's bound for k indices below n (sparse.c's size): the
 * gaps sum to at most n, so their quotients to at most n >> r. */
static size_t
s_rice_room(size_t n, size_t k, unsigned r)
{
    return (size_t)(((uint64_t)k * (r + 1) + (n >> r) + 7) / 8);
}

/* One sparse encode's shape: count indices, Rice parameter r, room bytes
 * for the stream (its bound), inner bytes of values' payload. */
struct s_sparse {
    size_t count, room, inner;
    unsigned r;
};

/* Queues the indices, their Rice stream and the values' payload, and
 * their downloads: the stream's bound from out, the values' payload after
 * it, the stream's length in bits into *nbits. A coded values codec is
 * made here, its host stage included (one wait more), and sp->inner
 * becomes its length. */
static rumor_err
s_sparse_queue(const struct compress_dev_i *d,
               const rumor_codec *c,
               const float *x,
               size_t n,
               uint64_t seed,
               uint64_t counter,
               void *const sel_offs_flag[3],
               struct s_sparse *sp,
               struct s_bufs *b,
               uint8_t *out,
               uint64_t *nbits,
               void *stream)
{
    void *idx = NULL, *vals = NULL, *words = NULL, *bits = NULL, *pay = NULL;
    size_t wbytes = (sp->room + 3) / 4 * 4;
    rumor_err rc = s_get(d, b, sp->count * sizeof(uint32_t), &idx, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, b, sp->count * sizeof(float), &vals, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, b, wbytes, &words, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, b, sizeof *nbits, &bits, stream);
    if (rc == RUMOR_OK && !s_coded(c->inner))
        rc = s_get(d, b, sp->inner, &pay, stream);
    if (rc != RUMOR_OK)
        return rc;
    d->select_emit(x, n, sel_offs_flag[0], sel_offs_flag[1], idx, vals, stream);
    d->zero(words, wbytes, stream);
    d->rice_write(idx, sp->count, sp->r, words, bits, stream);
    /* The values' rounding draws from a seed of their own (sparse.c). */
    uint64_t vseed = rumor_seed_derive(seed, counter, 0x1e);
    if (s_coded(c->inner))
        rc = compress_dev_encode(d,
                                 c->inner,
                                 vals,
                                 sp->count,
                                 vseed,
                                 0,
                                 out + sp->room,
                                 sp->inner,
                                 &sp->inner,
                                 stream);
    else
        rc = s_encode_body(d,
                           c->inner,
                           vals,
                           sp->count,
                           vseed,
                           0,
                           pay,
                           sel_offs_flag[2],
                           stream);
    if (rc == RUMOR_OK)
        rc = d->download(out, words, sp->room, stream);
    if (rc == RUMOR_OK && pay != NULL)
        rc = d->download(out + sp->room, pay, sp->inner, stream);
    if (rc == RUMOR_OK)
        rc = d->download(nbits, bits, sizeof *nbits, stream);
    return rc;
}

/* After the wait: the values' payload moved down to the stream's end,
 * the headers written (sparse.c's); returns the payload's length. */
static size_t
s_sparse_close(const rumor_codec *c,
               size_t n,
               const struct s_sparse *sp,
               uint64_t nbits,
               uint8_t *out)
{
    size_t at = RUMOR_COMPRESS_HEADER_BYTES + 4, ilen = (nbits + 7) / 8;
    memmove(out + at + ilen, out + at + sp->room, sp->inner);
    if (!s_coded(c->inner)) /* a coded one wrote its own */
        s_headers(c->inner, sp->count, 0, 0, out + at + ilen);
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                (uint8_t)sp->r,
                                0,
                                (uint32_t)n,
                                (uint32_t)sp->count};
    compress_header_write(out, &h);
    core_put_u32(out + RUMOR_COMPRESS_HEADER_BYTES, (uint32_t)ilen);
    return at + ilen + sp->inner;
}

/* top-k, threshold and dgc: the selection, the Rice stream of the gaps
 * and the values' payload are made on the device. The stream's length is
 * known only after the wait, so the values' payload lands after the
 * stream's bound and is moved down on the host. */
static rumor_err
s_encode_sparse(const struct compress_dev_i *d,
                const rumor_codec *c,
                const float *x,
                size_t n,
                size_t k,
                uint64_t seed,
                uint64_t counter,
                uint8_t *out,
                size_t cap,
                size_t *written,
                void *stream)
{
    struct s_bufs b = {{NULL}, 0};
    void *sof[3] = {NULL, NULL, NULL}; /* sel, offs, flag */
    size_t nb = compress_buckets(n, COMPRESS_DEV_SEL_BLOCK);
    struct s_sparse sp = {0, 0, 0, 0};
    uint32_t bad = 0;
    uint64_t nbits = 0;
    rumor_err rc =
        s_get(d, &b, sizeof(struct compress_dev_sel), &sof[0], stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, (nb + 1) * sizeof(uint64_t), &sof[1], stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, sizeof(uint32_t), &sof[2], stream);
    if (rc != RUMOR_OK)
        goto done;
    d->zero(sof[2], sizeof(uint32_t), stream);
    d->finite(x, n, sof[2], stream);
    rc = s_select(d,
                  c,
                  x,
                  n,
                  k,
                  seed,
                  counter,
                  sof[0],
                  sof[1],
                  &sp.count,
                  stream);
    if (rc != RUMOR_OK)
        goto done;
    sp.r = compress_sparse_rice_param(n, sp.count);
    sp.room = s_rice_room(n, sp.count, sp.r);
    sp.inner = s_room(c->inner, sp.count);
    size_t at = RUMOR_COMPRESS_HEADER_BYTES + 4;
    if (cap - at < sp.room || cap - at - sp.room < sp.inner) {
        rc = RUMOR_ETOOBIG;
        goto done;
    }
    rc = s_sparse_queue(d,
                        c,
                        x,
                        n,
                        seed,
                        counter,
                        sof,
                        &sp,
                        &b,
                        out + at,
                        &nbits,
                        stream);
    if (rc == RUMOR_OK)
        rc = d->download(&bad, sof[2], sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    if (rc == RUMOR_OK)
        *written = s_sparse_close(c, n, &sp, nbits, out);
done:
    s_put_all(d, &b, stream);
    return rc;
}

/* bias=real's error on all of x, x on the device: the pieces' errors
 * there, added in order on the host (fp8.c's order). One wait a call. */
struct s_fp8_all {
    const struct compress_dev_i *d;
    const rumor_codec *c;
    const float *x;
    size_t n;
    struct s_bufs *b;
    void *stream;
};

static rumor_err
s_fp8_error_all(void *ctx, int k, float fr, double *err)
{
    const struct s_fp8_all *a = ctx;
    size_t pieces = (a->n + COMPRESS_FP8_SAMPLE - 1) / COMPRESS_FP8_SAMPLE;
    float val[256], s1, s2;
    unsigned M, E;
    void *dval = NULL, *derr = NULL;
    *err = INFINITY; /* fp8.c's error when a value overflows */
    if (!compress_fp8_values(a->c, k, fr, val))
        return RUMOR_OK;
    double *part = malloc(pieces * sizeof *part);
    rumor_err rc = part ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_get(a->d, a->b, sizeof val, &dval, a->stream);
    if (rc == RUMOR_OK)
        rc = s_get(a->d, a->b, pieces * sizeof *part, &derr, a->stream);
    if (rc == RUMOR_OK)
        rc = a->d->upload(dval, val, sizeof val, a->stream);
    if (rc == RUMOR_OK) {
        compress_fp8_scales(a->c, k, fr, &s1, &s2, &M, &E);
        a->d->fp8_error(a->x, a->n, s1, s2, M, E, dval, derr, a->stream);
        rc = a->d->download(part, derr, pieces * sizeof *part, a->stream);
    }
    if (rc == RUMOR_OK)
        rc = a->d->finish(a->stream);
    if (rc == RUMOR_OK) {
        *err = 0;
        for (size_t p = 0; p < pieces; p++)
            *err += part[p];
    }
    free(part);
    return rc;
}

/* fp8 / fp4 (fp8.c's steps): max |x| and the sample on the device, the
 * bias from them on the host (the CPU's search; bias=real's check on all
 * of x by s_fp8_error_all), the symbols on the device, the Huffman stage
 * on the host over them. Two waits, two more for bias=real over more
 * than a sample. */
static rumor_err
s_encode_fp8(const struct compress_dev_i *d,
             const rumor_codec *c,
             const float *x,
             size_t n,
             uint8_t *out,
             size_t cap,
             size_t *written,
             void *stream)
{
    struct s_bufs b = {{NULL}, 0};
    void *flag = NULL, *key = NULL, *dsample = NULL, *dsym = NULL;
    size_t m = n < COMPRESS_FP8_SAMPLE ? n : COMPRESS_FP8_SAMPLE;
    float *sample = malloc((m ? m : 1) * sizeof *sample);
    uint8_t *sym = malloc(n ? n : 1);
    uint32_t bad = 0, top = 0;
    rumor_err rc = sample && sym ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, 2 * sizeof(uint32_t), &flag, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, m * sizeof *sample, &dsample, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, n, &dsym, stream);
    if (rc != RUMOR_OK)
        goto done;
    key = (uint32_t *)flag + 1;
    d->zero(flag, 2 * sizeof(uint32_t), stream);
    d->finite(x, n, flag, stream);
    d->maxabs(x, n, key, stream);
    d->sample(x, n, m, dsample, stream);
    rc = d->download(sample, dsample, m * sizeof *sample, stream);
    if (rc == RUMOR_OK)
        rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->download(&top, key, sizeof top, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    int k = 0;
    unsigned M = 0, E = 0;
    float fr = 1.0f, s1 = 0, s2 = 0;
    struct s_fp8_all all = {d, c, x, n, &b, stream};
    if (rc == RUMOR_OK)
        rc = compress_fp8_bias(c,
                               sample,
                               m,
                               compress_u2f(top),
                               n,
                               s_fp8_error_all,
                               &all,
                               &k,
                               &fr);
    if (rc != RUMOR_OK)
        goto done;
    compress_fp8_scales(c, k, fr, &s1, &s2, &M, &E);
    d->fp8_symbols(x, n, s1, s2, M, E, dsym, stream);
    rc = d->download(sym, dsym, n, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK)
        rc = compress_fp8_write(c, sym, n, k, fr, sample, m, out, cap, written);
done:
    s_put_all(d, &b, stream);
    free(sample);
    free(sym);
    return rc;
}

/* fp8 / fp4: the symbols are Huffman-decoded on the host, where the
 * payload is (fp8.c's own checks), and uploaded with their 256 values;
 * the device adds them. Pageable uploads are staged before the call
 * returns, so both may be freed at once. */
static rumor_err
s_decode_fp8(const struct compress_dev_i *d,
             const rumor_codec *c,
             const uint8_t *in,
             size_t len,
             size_t n,
             float alpha,
             float *y,
             uint32_t *flag,
             void *stream)
{
    uint8_t *sym = NULL;
    float val[256];
    rumor_err rc = compress_fp8_read(c, in, len, n, &sym, val);
    if (rc != RUMOR_OK)
        return rc;
    struct s_bufs b = {{NULL}, 0};
    void *dsym = NULL, *dval = NULL;
    rc = s_get(d, &b, n, &dsym, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, sizeof val, &dval, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(dsym, sym, n, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(dval, val, sizeof val, stream);
    if (rc == RUMOR_OK)
        d->fp8_decode(dsym, dval, n, alpha, y, flag, stream);
    s_put_all(d, &b, stream);
    free(sym);
    return rc;
}

/* qsgd with gamma or Elias codes: the payload of the same codec with
 * fixed codes made on the device (its levels, signs, norms and headers),
 * its codes then coded on the host as the CPU codes them. */
static rumor_err
s_encode_vlc(const struct compress_dev_i *d,
             const rumor_codec *c,
             const float *x,
             size_t n,
             uint64_t seed,
             uint64_t counter,
             uint8_t *out,
             size_t cap,
             size_t *written,
             void *stream)
{
    rumor_codec f = *c;
    f.qcode = COMPRESS_QCODE_FIXED;
    struct compress_dev_quant q = s_quant_of(&f, n);
    size_t need = s_need(&f, n), head = s_quant_head(&q), got = 0;
    uint8_t *fixed = malloc(need);
    if (fixed == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = compress_dev_encode(d,
                                       &f,
                                       x,
                                       n,
                                       seed,
                                       counter,
                                       fixed,
                                       need,
                                       &got,
                                       stream);
    if (rc == RUMOR_OK) {
        struct core_bw w;
        memcpy(out, fixed, head);
        out[3] = (uint8_t)c->qcode; /* the header's p1: the code */
        core_bw_init(&w, out + head, cap - head);
        if (q.levels)
            compress_qsgd_omega_recode(c, fixed + head, n, &w);
        else
            compress_qsgd_gamma_recode(q.b, fixed + head, n, &w);
        size_t body = core_bw_finish(&w, out + head);
        rc = body == SIZE_MAX ? RUMOR_ETOOBIG : RUMOR_OK;
        *written = rc == RUMOR_OK ? head + body : 0;
    }
    free(fixed);
    return rc;
}

/* random-k whose values codec is a coded one: the gather on the device,
 * then the values made as that codec's own payload after the seeds. */
static rumor_err
s_encode_randk_coded(const struct compress_dev_i *d,
                     const rumor_codec *c,
                     const float *x,
                     size_t n,
                     uint64_t seed,
                     uint64_t counter,
                     uint8_t *out,
                     size_t cap,
                     size_t *written,
                     void *stream)
{
    size_t k = compress_sparse_k(c, n),
           at = RUMOR_COMPRESS_HEADER_BYTES + S_RANDK_SEEDS, w = 0;
    struct s_bufs b = {{NULL}, 0};
    void *vals = NULL, *flag = NULL;
    uint32_t bad = 0;
    rumor_err rc = s_get(d, &b, sizeof bad, &flag, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, (k ? k : 1) * sizeof(float), &vals, stream);
    if (rc != RUMOR_OK)
        goto done;
    /* NaN/Inf anywhere in x is refused, and a scaled value's overflow */
    d->zero(flag, sizeof bad, stream);
    d->finite(x, n, flag, stream);
    d->randk_gather(x, n, k, seed, counter, c->scale, vals, stream);
    d->finite(vals, k, flag, stream);
    rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    if (rc == RUMOR_OK)
        rc = compress_dev_encode(d,
                                 c->inner,
                                 vals,
                                 k,
                                 rumor_seed_derive(seed, counter, 0x1e),
                                 0,
                                 out + at,
                                 cap - at,
                                 &w,
                                 stream);
    if (rc == RUMOR_OK) {
        s_headers(c, n, seed, counter, out);
        *written = at + w;
    }
done:
    s_put_all(d, &b, stream);
    return rc;
}

rumor_err
compress_dev_encode(const struct compress_dev_i *d,
                    const rumor_codec *c,
                    const float *x,
                    size_t n,
                    uint64_t seed,
                    uint64_t counter,
                    uint8_t *out,
                    size_t cap,
                    size_t *written,
                    void *stream)
{
    *written = 0;
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    if (n > 0 && x == NULL)
        return RUMOR_EINVAL;
    if (!rumor_codec_device_supported(c))
        return RUMOR_ENOTSUP;
    bool randk_coded = c->id == RUMOR_CODEC_RANDK && s_coded(c->inner);
    if (s_sparse(c) || s_coded(c) || randk_coded) {
        size_t bound = 0;
        bool exact = false;
        c->ops->size(c, n, &bound, &exact);
        if (out == NULL || cap < bound)
            return RUMOR_ETOOBIG;
        if (s_fp8(c))
            return s_encode_fp8(d, c, x, n, out, cap, written, stream);
        if (s_vlc(c))
            return s_encode_vlc(d,
                                c,
                                x,
                                n,
                                seed,
                                counter,
                                out,
                                cap,
                                written,
                                stream);
        if (randk_coded)
            return s_encode_randk_coded(d,
                                        c,
                                        x,
                                        n,
                                        seed,
                                        counter,
                                        out,
                                        cap,
                                        written,
                                        stream);
        return s_encode_sparse(d,
                               c,
                               x,
                               n,
                               compress_sparse_k(c, n),
                               seed,
                               counter,
                               out,
                               cap,
                               written,
                               stream);
    }
    size_t need = s_need(c, n);
    if (out == NULL || cap < need)
        return RUMOR_ETOOBIG;
    void *pay = NULL, *flag = NULL;
    uint32_t bad = 0;
    rumor_err rc = d->alloc(sizeof(uint32_t), &flag, stream);
    if (rc == RUMOR_OK)
        rc = d->alloc(need, &pay, stream);
    if (rc != RUMOR_OK)
        goto done;
    d->zero(flag, sizeof(uint32_t), stream);
    rc = s_encode_body(d, c, x, n, seed, counter, pay, flag, stream);
    if (rc == RUMOR_OK)
        rc = d->download(out, pay, need, stream);
    if (rc == RUMOR_OK)
        rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    if (rc == RUMOR_OK) {
        s_headers(c, n, seed, counter, out);
        *written = need;
    }
done:
    if (pay != NULL)
        d->release(pay, stream);
    if (flag != NULL)
        d->release(flag, stream);
    return rc;
}

rumor_err
compress_dev_encode_k(const struct compress_dev_i *d,
                      const rumor_codec *c,
                      const float *x,
                      size_t n,
                      size_t k,
                      uint64_t seed,
                      uint64_t counter,
                      uint8_t *out,
                      size_t cap,
                      size_t *written,
                      void *stream)
{
    *written = 0;
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    if ((n > 0 && x == NULL) || k > n)
        return RUMOR_EINVAL;
    if (c->id != RUMOR_CODEC_DGC || !rumor_codec_device_supported(c))
        return RUMOR_ENOTSUP;
    if (out == NULL || cap < compress_sparse_size_any(c, n))
        return RUMOR_ETOOBIG;
    return s_encode_sparse(d,
                           c,
                           x,
                           n,
                           k,
                           seed,
                           counter,
                           out,
                           cap,
                           written,
                           stream);
}

/* The checks of a sign payload's header, length and scales (quant.c). */
static rumor_err
s_check_sign(const uint8_t *in, size_t len, size_t n)
{
    uint32_t bucket = core_get_u32(in + 8);
    if (bucket < 1 || bucket > (1u << 24) || in[2] != 0 || in[3] != 0)
        return RUMOR_EPROTO;
    size_t nb = compress_buckets(n, bucket);
    size_t body = len - RUMOR_COMPRESS_HEADER_BYTES;
    if (body / 4 < nb || body - 4 * nb != (n + 7) / 8)
        return RUMOR_EPROTO;
    for (size_t k = 0; k < nb; k++) {
        float s = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k);
        if (!isfinite(s))
            return RUMOR_ENUMERIC;
        if (s < 0)
            return RUMOR_EPROTO;
    }
    return RUMOR_OK;
}

/* Each bucket's level times its norm / s finite, as the CPU decoders ask. */
static rumor_err
s_check_range(const uint8_t *in, const struct compress_dev_quant *q)
{
    for (size_t k = 0; k < compress_buckets(q->n, q->bucket); k++) {
        float norm = compress_get_f32(in + RUMOR_COMPRESS_HEADER_BYTES + 4 * k);
        if (!isfinite((float)q->s * (norm / (float)q->s)))
            return RUMOR_ENUMERIC;
    }
    return RUMOR_OK;
}

/* The checks of a QSGD / TernGrad payload that need no pass over the codes
 * (the CPU decoders' own header checks, then the length and the range of
 * level times norm, in the order each decoder meets them: quant.c's
 * measures the codes first, qsgd_levels.c reads bucket by bucket and
 * checks the stream's end, padding included, last), and its shape.
 * Fixed codes only: the caller takes the others to the host. */
static rumor_err
s_check_quant(bool tern,
              const uint8_t *in,
              size_t len,
              size_t n,
              struct compress_dev_quant *q)
{
    bool levels = !tern && in[2] == 0;
    unsigned b = 0;
    uint32_t s = 0, bucket = 0;
    size_t head = 0;
    rumor_err rc =
        levels ? compress_qsgd_levels_header(in, len, n, &s, &bucket, &head)
               : compress_quant_header(tern, in, len, n, &b, &bucket, &head);
    if (rc != RUMOR_OK)
        return rc;
    *q = s_quant_shape(tern, levels ? s : (1u << b) - 1, levels, n, bucket);
    size_t bits = n * (q->b + 1);
    bool pad = levels && bits % 8 != 0 && in[len - 1] >> (bits % 8) != 0;
    if (levels && (rc = s_check_range(in, q)) != RUMOR_OK)
        return rc;
    if (len - head != (bits + 7) / 8 || pad)
        return RUMOR_EPROTO;
    return s_check_range(in, q);
}

/* Checks the header fields of a random-k payload (sparse.c) and of its
 * values' header. */
static rumor_err
s_check_randk(const rumor_codec *c, const uint8_t *in, size_t len, size_t n)
{
    size_t k = core_get_u32(in + 8);
    if (k > n || in[2] != 0 || in[3] > 1 || k != compress_sparse_k(c, n))
        return RUMOR_EPROTO;
    size_t at = RUMOR_COMPRESS_HEADER_BYTES + S_RANDK_SEEDS;
    if (len - RUMOR_COMPRESS_HEADER_BYTES < S_RANDK_SEEDS)
        return RUMOR_EPROTO;
    struct compress_header ih;
    return compress_header_read(in + at, len - at, c->inner->id, k, &ih);
}

/* An Elias levels payload's decoded values v (zeros included) added
 * where its levels are not zero, as its decoder adds them: the zeros
 * leave y alone (-0 stays -0). v is compacted in place. */
static rumor_err
s_add_nonzeros(const struct compress_dev_i *d,
               const uint8_t *in,
               size_t len,
               size_t n,
               float *v,
               float alpha,
               float *y,
               uint32_t *flag,
               void *stream)
{
    struct s_bufs b = {{NULL}, 0};
    void *didx = NULL, *dval = NULL;
    uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (idx == NULL)
        return RUMOR_ENOMEM;
    size_t k = compress_qsgd_omega_positions(in, len, n, idx);
    for (size_t j = 0; j < k; j++)
        v[j] = v[idx[j]];
    rumor_err rc = s_get(d, &b, k * sizeof *idx, &didx, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, k * sizeof *v, &dval, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(didx, idx, k * sizeof *idx, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(dval, v, k * sizeof *v, stream);
    if (rc == RUMOR_OK)
        d->idx_scatter(dval, didx, k, alpha, y, flag, stream);
    s_put_all(d, &b, stream);
    free(idx);
    return rc;
}

/* Decoded values v (float32) added to y (or written, add false) on the
 * device as the CPU decoders add theirs: y + alpha v. */
static rumor_err
s_add_all(const struct compress_dev_i *d,
          const float *v,
          size_t n,
          bool add,
          float alpha,
          float *y,
          uint32_t *flag,
          void *stream)
{
    struct s_bufs b = {{NULL}, 0};
    void *dv = NULL;
    rumor_err rc = s_get(d, &b, n * sizeof *v, &dv, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(dv, v, n * sizeof *v, stream);
    if (rc == RUMOR_OK)
        d->dense_decode(dv, n, COMPRESS_DEV_FP32, add, alpha, y, flag, stream);
    s_put_all(d, &b, stream);
    return rc;
}

/* qsgd with gamma or Elias codes: decoded on the host by the CPU decoder
 * (its checks, its values), the values uploaded and added on the device
 * where that decoder adds them. Pageable uploads are staged before the
 * call returns, so the host copies may be freed at once. */
static rumor_err
s_decode_vlc(const struct compress_dev_i *d,
             const rumor_codec *c,
             const uint8_t *in,
             size_t len,
             size_t n,
             bool add,
             float alpha,
             float *y,
             uint32_t *flag,
             void *stream)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    rumor_err rc = v != NULL ? c->ops->decode(c, in, len, false, 1.0f, v, n)
                             : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = add && in[2] == 0 /* the levels format: Elias gaps */
                 ? s_add_nonzeros(d, in, len, n, v, alpha, y, flag, stream)
                 : s_add_all(d, v, n, add, alpha, y, flag, stream);
    free(v);
    return rc;
}

static rumor_err s_decode_body(const struct compress_dev_i *d,
                               const rumor_codec *c,
                               const uint8_t *in,
                               const uint8_t *dev,
                               size_t len,
                               size_t n,
                               bool add,
                               float alpha,
                               float *y,
                               uint32_t *flag,
                               void *stream);

/* fp8 / fp4 values of a sparse payload: decoded by the CPU decoder (its
 * checks; its -0s, which a decode-add into zeros would lose), then
 * uploaded (pageable: staged before the call returns). */
static rumor_err
s_values_on_host(const struct compress_dev_i *d,
                 const rumor_codec *c,
                 const uint8_t *in,
                 size_t len,
                 size_t k,
                 float *vals,
                 void *stream)
{
    float *v = malloc((k ? k : 1) * sizeof *v);
    rumor_err rc = v != NULL ? c->ops->decode(c, in, len, false, 1.0f, v, k)
                             : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = d->upload(vals, v, k * sizeof *v, stream);
    free(v);
    return rc;
}

/* Queues the decode of a sparse payload's k values (their payload at
 * offset at) into vals. */
static rumor_err
s_decode_values(const struct compress_dev_i *d,
                const rumor_codec *c,
                const uint8_t *in,
                const uint8_t *dev,
                size_t len,
                size_t at,
                size_t k,
                float *vals,
                uint32_t *flag,
                void *stream)
{
    if (s_fp8(c->inner))
        return s_values_on_host(d,
                                c->inner,
                                in + at,
                                len - at,
                                k,
                                vals,
                                stream);
    return s_decode_body(d,
                         c->inner,
                         in + at,
                         dev + at,
                         len - at,
                         k,
                         false,
                         1.0f,
                         vals,
                         flag,
                         stream);
}

/* top-k, threshold and dgc: the index list is a serial Rice stream, so the
 * host reads it (the CPU decoder's own reading and checks) and uploads
 * the indices; the values are decoded on the device, then added. The
 * upload is from pageable memory, staged before the call returns, so idx
 * may be freed at once. */
static rumor_err
s_decode_sparse(const struct compress_dev_i *d,
                const rumor_codec *c,
                const uint8_t *in,
                const uint8_t *dev,
                size_t len,
                size_t n,
                float alpha,
                float *y,
                uint32_t *flag,
                void *stream)
{
    uint32_t *idx = NULL;
    size_t k = 0, at = 0;
    rumor_err rc = compress_sparse_indices(c, in, len, n, &idx, &k, &at);
    if (rc != RUMOR_OK)
        return rc;
    struct s_bufs b = {{NULL}, 0};
    void *didx = NULL, *vals = NULL;
    rc = s_get(d, &b, k * sizeof *idx, &didx, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, k * sizeof(float), &vals, stream);
    if (rc == RUMOR_OK)
        rc = d->upload(didx, idx, k * sizeof *idx, stream);
    if (rc == RUMOR_OK)
        rc = s_decode_values(d, c, in, dev, len, at, k, vals, flag, stream);
    if (rc == RUMOR_OK)
        d->idx_scatter(vals, didx, k, alpha, y, flag, stream);
    s_put_all(d, &b, stream);
    free(idx);
    return rc;
}

/* Checks a payload whose header was read (id and n), then queues its
 * decode from dev (the same bytes in device memory) into y. */
static rumor_err
s_decode_body(const struct compress_dev_i *d,
              const rumor_codec *c,
              const uint8_t *in,
              const uint8_t *dev,
              size_t len,
              size_t n,
              bool add,
              float alpha,
              float *y,
              uint32_t *flag,
              void *stream)
{
    const uint8_t *body = dev + RUMOR_COMPRESS_HEADER_BYTES;
    rumor_err rc = RUMOR_OK;
    if (s_sparse(c))
        return s_decode_sparse(d, c, in, dev, len, n, alpha, y, flag, stream);
    if (s_fp8(c))
        return s_decode_fp8(d, c, in, len, n, alpha, y, flag, stream);
    if (c->id == RUMOR_CODEC_SIGN) {
        rc = s_check_sign(in, len, n);
        if (rc == RUMOR_OK) {
            size_t nb = compress_buckets(n, core_get_u32(in + 8));
            d->sign_decode(body,
                           body + 4 * nb,
                           n,
                           core_get_u32(in + 8),
                           add,
                           alpha,
                           y,
                           flag,
                           stream);
        }
        return rc;
    }
    if (c->id == RUMOR_CODEC_QSGD && in[3] != COMPRESS_QCODE_FIXED)
        return s_decode_vlc(d, c, in, len, n, add, alpha, y, flag, stream);
    if (s_quant(c->id)) {
        struct compress_dev_quant q;
        rc = s_check_quant(c->id == RUMOR_CODEC_TERNGRAD, in, len, n, &q);
        if (rc != RUMOR_OK)
            return rc;
        const uint8_t *codes = dev + s_quant_head(&q);
        d->quant_check(codes, &q, flag, stream);
        d->quant_decode(body, codes, &q, add, alpha, y, flag, stream);
        return RUMOR_OK;
    }
    if (c->id != RUMOR_CODEC_RANDK) {
        if (in[2] != 0 || in[3] != 0 || core_get_u32(in + 8) != 0 ||
            len - RUMOR_COMPRESS_HEADER_BYTES != s_plain_body(c->id, n))
            return RUMOR_EPROTO;
        if (c->id == RUMOR_CODEC_NATURAL) {
            d->natural_check(body, n, flag, stream);
            d->natural_decode(body, body + n, n, add, alpha, y, flag, stream);
            return RUMOR_OK;
        }
        d->dense_check(body, n, s_fmt(c->id), flag, stream);
        d->dense_decode(body, n, s_fmt(c->id), add, alpha, y, flag, stream);
        return RUMOR_OK;
    }
    rc = s_check_randk(c, in, len, n);
    if (rc != RUMOR_OK)
        return rc;
    size_t k = core_get_u32(in + 8),
           at = RUMOR_COMPRESS_HEADER_BYTES + S_RANDK_SEEDS;
    void *vals = NULL;
    rc = d->alloc((k ? k : 1) * sizeof(float), &vals, stream);
    if (rc != RUMOR_OK)
        return rc;
    rc = s_decode_values(d, c, in, dev, len, at, k, vals, flag, stream);
    if (rc == RUMOR_OK)
        d->randk_scatter(vals,
                         n,
                         k,
                         core_get_u64(in + RUMOR_COMPRESS_HEADER_BYTES),
                         core_get_u64(in + RUMOR_COMPRESS_HEADER_BYTES + 8),
                         alpha,
                         y,
                         flag,
                         stream);
    d->release(vals, stream);
    return rc;
}

rumor_err
compress_dev_decode_add(const struct compress_dev_i *d,
                        const rumor_codec *c,
                        const uint8_t *in,
                        size_t len,
                        float alpha,
                        float *y,
                        size_t n,
                        void *stream)
{
    if (n > RUMOR_COMPRESS_MAX_ELEMS || (n > 0 && y == NULL))
        return RUMOR_EINVAL;
    if (in == NULL)
        return RUMOR_EPROTO;
    struct compress_header h;
    rumor_err rc = compress_header_read(in, len, c->id, n, &h);
    if (rc != RUMOR_OK)
        return rc;
    if (!rumor_codec_device_supported(c))
        return RUMOR_ENOTSUP;
    void *dev = NULL, *flag = NULL;
    uint32_t bad = 0;
    rc = d->alloc(sizeof(uint32_t), &flag, stream);
    if (rc == RUMOR_OK)
        rc = d->alloc(len, &dev, stream);
    if (rc != RUMOR_OK)
        goto done;
    d->zero(flag, sizeof(uint32_t), stream);
    rc = d->upload(dev, in, len, stream);
    if (rc == RUMOR_OK)
        rc = s_decode_body(d, c, in, dev, len, n, true, alpha, y, flag, stream);
    if (rc == RUMOR_OK)
        rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = bad & COMPRESS_DEV_PROTO ? RUMOR_EPROTO : RUMOR_ENUMERIC;
done:
    if (dev != NULL)
        d->release(dev, stream);
    if (flag != NULL)
        d->release(flag, stream);
    return rc;
}

/* TernGrad's own scalers (compress_terngrad_scalers): the norms its own
 * encode writes, the bucket's max |v| of the clipped v, downloaded. */
rumor_err
compress_dev_scalers(const struct compress_dev_i *d,
                     const rumor_codec *c,
                     const float *x,
                     size_t n,
                     float *out,
                     void *stream)
{
    if (c->id != RUMOR_CODEC_TERNGRAD || !c->share ||
        n > RUMOR_COMPRESS_MAX_ELEMS || (n > 0 && (x == NULL || out == NULL)))
        return RUMOR_EINVAL;
    struct compress_dev_quant q = s_quant_of(c, n);
    size_t nb = compress_buckets(n, c->bucket);
    bool clip = c->clip > 0 && n > 0;
    struct s_bufs b = {{NULL}, 0};
    void *flag = NULL, *scales = NULL, *inv = NULL, *v = NULL;
    uint8_t *host = malloc(4 * nb + 1);
    uint32_t bad = 0;
    rumor_err rc = host != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, sizeof(uint32_t), &flag, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, 4 * nb, &scales, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, nb * sizeof(float), &inv, stream);
    if (rc == RUMOR_OK && clip)
        rc = s_get(d, &b, n * sizeof(float), &v, stream);
    if (rc == RUMOR_OK) {
        d->zero(flag, sizeof(uint32_t), stream);
        d->finite(x, n, flag, stream);
    }
    if (rc == RUMOR_OK && clip)
        rc = s_clip(d, c, x, n, v, flag, stream);
    if (rc == RUMOR_OK) {
        d->quant_scales(clip ? v : x, &q, scales, inv, flag, stream);
        rc = d->download(host, scales, 4 * nb, stream);
    }
    if (rc == RUMOR_OK)
        rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    for (size_t k = 0; rc == RUMOR_OK && k < nb; k++)
        out[k] = compress_get_f32(host + 4 * k);
    s_put_all(d, &b, stream);
    free(host);
    return rc;
}

/* The norms are the agreed scalers themselves (compress_bucket_scale of a
 * float <= FLT_MAX), so the host writes them and they cross as the
 * scaler message; no clip (values past a scaler saturate). */
rumor_err
compress_dev_encode_shared(const struct compress_dev_i *d,
                           const rumor_codec *c,
                           const float *x,
                           size_t n,
                           const float *scalers,
                           uint64_t seed,
                           uint64_t counter,
                           uint8_t *out,
                           size_t cap,
                           size_t *written,
                           void *stream)
{
    *written = 0;
    if (c->id != RUMOR_CODEC_TERNGRAD || !c->share ||
        n > RUMOR_COMPRESS_MAX_ELEMS || (n > 0 && x == NULL))
        return RUMOR_EINVAL;
    size_t nb = compress_buckets(n, c->bucket), need = s_need(c, n);
    for (size_t k = 0; k < nb; k++)
        if (!(scalers[k] >= 0 && scalers[k] <= FLT_MAX))
            return RUMOR_EINVAL;
    if (out == NULL || cap < need)
        return RUMOR_ETOOBIG;
    struct compress_dev_quant q = s_quant_of(c, n);
    struct s_bufs b = {{NULL}, 0};
    void *flag = NULL, *pay = NULL, *inv = NULL;
    uint32_t bad = 0;
    for (size_t k = 0; k < nb; k++) /* the norms, staged in out */
        compress_put_f32(out + RUMOR_COMPRESS_HEADER_BYTES + 4 * k, scalers[k]);
    rumor_err rc = s_get(d, &b, sizeof(uint32_t), &flag, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, need, &pay, stream);
    if (rc == RUMOR_OK)
        rc = s_get(d, &b, nb * sizeof(float), &inv, stream);
    uint8_t *scales = NULL;
    if (rc == RUMOR_OK) {
        scales = (uint8_t *)pay + RUMOR_COMPRESS_HEADER_BYTES;
        d->zero(flag, sizeof(uint32_t), stream);
        d->finite(x, n, flag, stream);
        rc = d->upload(scales,
                       out + RUMOR_COMPRESS_HEADER_BYTES,
                       4 * nb,
                       stream);
    }
    if (rc == RUMOR_OK) {
        d->quant_inv(scales, &q, inv, stream);
        d->quant_codes(x,
                       &q,
                       scales,
                       inv,
                       seed,
                       counter,
                       (uint8_t *)pay + s_quant_head(&q),
                       stream);
        rc = d->download(out, pay, need, stream);
    }
    if (rc == RUMOR_OK)
        rc = d->download(&bad, flag, sizeof bad, stream);
    if (rc == RUMOR_OK)
        rc = d->finish(stream);
    if (rc == RUMOR_OK && bad != 0)
        rc = RUMOR_ENUMERIC;
    if (rc == RUMOR_OK) {
        s_headers(c, n, seed, counter, out);
        *written = need;
    }
    s_put_all(d, &b, stream);
    return rc;
}

/* The table to use, or RUMOR_ENOTSUP with the reason logged once per call
 * (a caller without a device keeps the CPU codec). */
static rumor_err
s_cuda(const struct compress_dev_i **d)
{
    const char *why = NULL;
    rumor_err rc = compress_dev_cuda(d, &why);
    if (rc != RUMOR_OK)
        rumor_log(RUMOR_LOG_DEBUG, "device codec unavailable: %s", why);
    return rc;
}

rumor_err
rumor_codec_encode_device(const rumor_codec *codec,
                          const float *d_x,
                          size_t n,
                          uint64_t seed,
                          uint64_t counter,
                          uint8_t *out,
                          size_t cap,
                          size_t *written,
                          void *stream)
{
    const struct compress_dev_i *d = NULL;
    *written = 0;
    rumor_err rc = s_cuda(&d);
    if (rc != RUMOR_OK)
        return rc;
    return compress_dev_encode(d,
                               codec,
                               d_x,
                               n,
                               seed,
                               counter,
                               out,
                               cap,
                               written,
                               stream);
}

rumor_err
rumor_codec_encode_device_k(const rumor_codec *codec,
                            const float *d_x,
                            size_t n,
                            size_t k,
                            uint64_t seed,
                            uint64_t counter,
                            uint8_t *out,
                            size_t cap,
                            size_t *written,
                            void *stream)
{
    const struct compress_dev_i *d = NULL;
    *written = 0;
    rumor_err rc = s_cuda(&d);
    if (rc != RUMOR_OK)
        return rc;
    return compress_dev_encode_k(d,
                                 codec,
                                 d_x,
                                 n,
                                 k,
                                 seed,
                                 counter,
                                 out,
                                 cap,
                                 written,
                                 stream);
}

rumor_err
rumor_codec_decode_add_device(const rumor_codec *codec,
                              const uint8_t *in,
                              size_t len,
                              float alpha,
                              float *d_y,
                              size_t n,
                              void *stream)
{
    const struct compress_dev_i *d = NULL;
    rumor_err rc = s_cuda(&d);
    if (rc != RUMOR_OK)
        return rc;
    return compress_dev_decode_add(d, codec, in, len, alpha, d_y, n, stream);
}

rumor_err
rumor_codec_scalers_device(const rumor_codec *codec,
                           const float *d_x,
                           size_t n,
                           float *out,
                           void *stream)
{
    const struct compress_dev_i *d = NULL;
    rumor_err rc = s_cuda(&d);
    return rc == RUMOR_OK ? compress_dev_scalers(d, codec, d_x, n, out, stream)
                          : rc;
}

rumor_err
rumor_codec_encode_shared_device(const rumor_codec *codec,
                                 const float *d_x,
                                 size_t n,
                                 const float *scalers,
                                 uint64_t seed,
                                 uint64_t counter,
                                 uint8_t *out,
                                 size_t cap,
                                 size_t *written,
                                 void *stream)
{
    const struct compress_dev_i *d = NULL;
    *written = 0;
    rumor_err rc = s_cuda(&d);
    if (rc != RUMOR_OK)
        return rc;
    return compress_dev_encode_shared(d,
                                      codec,
                                      d_x,
                                      n,
                                      scalers,
                                      seed,
                                      counter,
                                      out,
                                      cap,
                                      written,
                                      stream);
}
