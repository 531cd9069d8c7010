/*
 * compress module-private: the device codec path (issue #31, its first
 * part). The host side (compress/device.c) checks arguments and headers,
 * sizes the payload and writes the headers; the per-element work runs as
 * kernels behind a table, so one assembly serves two tables: the CUDA
 * kernels (compress/cuda.cu) and their plain-C twins (compress/ref.c),
 * each twin a loop over the kernel's threads doing that thread's work in
 * the same arithmetic. The twins run on host memory; the tests compare
 * them with the CPU codecs (byte for byte) and, on a GPU, the kernels
 * with them.
 *
 * Flags: every kernel that may meet NaN or Inf (or, decoding, an all-ones
 * exponent) sets *flag = 1; decode kernels that write y do nothing when
 * *flag is set, so y is untouched by a refused payload.
 */
#ifndef RUMOR_COMPRESS_DEVICE_H
#define RUMOR_COMPRESS_DEVICE_H

#include "rumor/compress.h"

/* Dense element formats on the wire. */
enum compress_dev_fmt {
    COMPRESS_DEV_FP32,
    COMPRESS_DEV_FP16,
    COMPRESS_DEV_BF16
};

/* Values per partial sum of the scaled sign (quant.c's chunk). */
#define COMPRESS_DEV_SIGN_CHUNK 4096

/* A QSGD (fixed-width codes) or TernGrad payload's shape: n values in
 * buckets, levels 0..s, codes of b + 1 bits (sign at bit b; b the bits
 * of s). levels: qsgd_levels.c's format (any s, stored after the norms;
 * the level rounded in double) instead of quant.c's (s = 2^b - 1). */
struct compress_dev_quant {
    size_t n, bucket;
    uint32_t s;
    unsigned b;
    bool tern; /* scale: max |v| (TernGrad) instead of the 2-norm */
    bool levels;
};

/* A sparse selection (top-k, threshold, DGC): element i is taken when its key
 * (|x_i| as a bit pattern, which orders like |x_i|) is >= lo, or equals
 * eq and is among the first ties such keys by index, as the CPU's top-k
 * breaks ties (compress/topk.c). Device memory. */
struct compress_dev_sel {
    uint32_t lo, eq, ties;
    uint32_t count;     /* taken in all (select_scan) */
    uint32_t hist[256]; /* select_kth's digit histogram */
};

/* Elements per slot of select_scan's offsets (a kernel's block). */
#define COMPRESS_DEV_SEL_BLOCK 256

/* Decode flags: an Inf/NaN value, a non-canonical code. */
#define COMPRESS_DEV_NUMERIC 1u
#define COMPRESS_DEV_PROTO   2u

struct compress_dev_i {
    const char *name;
    /* Memory on the device (host memory for ref). */
    rumor_err (*alloc)(size_t bytes, void **p, void *stream);
    void (*release)(void *p, void *stream);
    rumor_err (*upload)(void *dst, const void *src, size_t bytes, void *stream);
    rumor_err (*download)(void *dst,
                          const void *src,
                          size_t bytes,
                          void *stream);
    void (*zero)(void *p, size_t bytes, void *stream);
    /* Waits for the stream's work so far (downloads landed); reports a
     * launch or execution error as RUMOR_EBACKEND. */
    rumor_err (*finish)(void *stream);

    /* Sets *flag when x[0..n) holds NaN or Inf. */
    void (*finite)(const float *x, size_t n, uint32_t *flag, void *stream);
    /* body[w i ..] = x[i] in fmt, little-endian (w = 2 or 4). */
    void (*dense_encode)(const float *x,
                         size_t n,
                         enum compress_dev_fmt fmt,
                         uint8_t *body,
                         uint32_t *flag,
                         void *stream);
    /* Sets *flag when an element of body has an all-ones exponent. */
    void (*dense_check)(const uint8_t *body,
                        size_t n,
                        enum compress_dev_fmt fmt,
                        uint32_t *flag,
                        void *stream);
    /* y[i] = v or y[i] + alpha v (a product then a sum) with v element i of
     * body; nothing when *flag. */
    void (*dense_decode)(const uint8_t *body,
                         size_t n,
                         enum compress_dev_fmt fmt,
                         bool add,
                         float alpha,
                         float *y,
                         const uint32_t *flag,
                         void *stream);
    /* Scaled sign, pass 1: one thread per chunk of COMPRESS_DEV_SIGN_CHUNK
     * values of a bucket: its sum of |x| in double in quant.c's order
     * (eight lanes over whole groups of eight, combined pairwise; the tail
     * added in order when the chunk starts mid-byte, else left to pass 2).
     * part has nb * ceil(bucket / CHUNK) slots. */
    void (*sign_sums)(const float *x,
                      size_t n,
                      size_t bucket,
                      double *part,
                      void *stream);
    /* Pass 2: one thread per bucket: the chunks' sums in order (and the
     * tails pass 1 left), the mean |x| as little-endian float32 at scales
     * + 4 k; *flag when a sum is not finite. */
    void (*sign_scales)(const float *x,
                        size_t n,
                        size_t bucket,
                        const double *part,
                        uint8_t *scales,
                        uint32_t *flag,
                        void *stream);
    /* Sign bits, LSB first, one thread per byte; padding bits zero. */
    void (*sign_bits)(const float *x, size_t n, uint8_t *bits, void *stream);
    /* y[i] = q or y[i] + alpha q with q = +-scale of i's bucket (scales
     * checked by the host); nothing when *flag. */
    void (*sign_decode)(const uint8_t *scales,
                        const uint8_t *bits,
                        size_t n,
                        size_t bucket,
                        bool add,
                        float alpha,
                        float *y,
                        const uint32_t *flag,
                        void *stream);
    /* QSGD / TernGrad, pass 1: one thread per bucket: its 2-norm (the
     * float sum of squares of compress_sumsq_ref, the double one where
     * that one is out of range) or max |v|, written as the norm sent
     * (little-endian float32 at scales + 4 k) and inv = s / norm (0 below
     * COMPRESS_NORM_MIN); *flag when the scale is not finite. */
    void (*quant_scales)(const float *x,
                         const struct compress_dev_quant *q,
                         uint8_t *scales,
                         float *inv,
                         uint32_t *flag,
                         void *stream);
    /* Pass 2: one thread per group of eight values: their codes
     * (compress_level_code with draw i of (seed, counter), or with levels
     * compress_qsgd_level from the bucket's norm in scales), packed LSB
     * first into the group's b + 1 bytes. */
    void (*quant_codes)(const float *x,
                        const struct compress_dev_quant *q,
                        const uint8_t *scales,
                        const float *inv,
                        uint64_t seed,
                        uint64_t counter,
                        uint8_t *codes,
                        void *stream);
    /* Sets COMPRESS_DEV_PROTO in *flag for a code "-0" (level 0, sign)
     * or a level above s. */
    void (*quant_check)(const uint8_t *codes,
                        const struct compress_dev_quant *q,
                        uint32_t *flag,
                        void *stream);
    /* y[i] = v or y[i] + alpha v, v = +-level (norm / s) (norms checked by
     * the host); nothing when *flag. */
    void (*quant_decode)(const uint8_t *scales,
                         const uint8_t *codes,
                         const struct compress_dev_quant *q,
                         bool add,
                         float alpha,
                         float *y,
                         const uint32_t *flag,
                         void *stream);
    /* random-k: one thread per block j of k: its index from words 2 j and
     * 2 j + 1 of the Philox stream (seed, counter), vals[j] = x[idx] (times
     * the block's size when scale). */
    void (*randk_gather)(const float *x,
                         size_t n,
                         size_t k,
                         uint64_t seed,
                         uint64_t counter,
                         bool scale,
                         float *vals,
                         void *stream);
    /* y[idx_j] += alpha vals[j] for the same indices; nothing when *flag. */
    void (*randk_scatter)(const float *vals,
                          size_t n,
                          size_t k,
                          uint64_t seed,
                          uint64_t counter,
                          float alpha,
                          float *y,
                          const uint32_t *flag,
                          void *stream);
    /* Top-k, for 1 <= k <= n: lo = T + 1, eq = T, ties = k - #(key > T)
     * with T the k-th largest key. Radix select: four passes of 8-bit
     * digits from the top, each a histogram of the digit over the keys
     * whose digits above it are T's found so far, then one thread picks
     * the digit where the k-th key lies. */
    void (*select_kth)(const float *x,
                       size_t n,
                       size_t k,
                       struct compress_dev_sel *sel,
                       void *stream);
    /* offs[b] = (taken-by-lo << 32 | key == eq) counts of the elements
     * before block b of COMPRESS_DEV_SEL_BLOCK (an exclusive scan of each
     * block's counts; offs has a slot per block and one more), sel->count
     * the number taken. */
    void (*select_scan)(const float *x,
                        size_t n,
                        struct compress_dev_sel *sel,
                        uint64_t *offs,
                        void *stream);
    /* One thread per element: a taken i goes to slot (taken-by-lo before
     * it) + min(eq before it, ties) of idx (i) and vals (x_i): ascending. */
    void (*select_emit)(const float *x,
                        size_t n,
                        const struct compress_dev_sel *sel,
                        const uint64_t *offs,
                        uint32_t *idx,
                        float *vals,
                        void *stream);
    /* The Golomb-Rice codes (parameter r) of the gaps of idx[0..k) (the
     * first index, then differences minus one), LSB first as core/bits.h
     * writes them, or-ed into words (zeroed); *bits = their length. One
     * thread per index: its code's length, an exclusive scan, then its
     * bits at its offset. */
    void (*rice_write)(const uint32_t *idx,
                       size_t k,
                       unsigned r,
                       uint32_t *words,
                       uint64_t *bits,
                       void *stream);
    /* Natural compression (quant.c): one thread per value, its exponent
     * rounded up when the draw (stream bytes i and COMPRESS_DRAW_LOW +
     * i / 16) falls below its mantissa, capped at 254; *flag on NaN/Inf.
     * The signs are sign_bits'. */
    void (*natural_expo)(const float *x,
                         size_t n,
                         uint64_t seed,
                         uint64_t counter,
                         uint8_t *expo,
                         uint32_t *flag,
                         void *stream);
    /* Sets COMPRESS_DEV_NUMERIC in *flag for an exponent 255 (Inf/NaN). */
    void (*natural_check)(const uint8_t *expo,
                          size_t n,
                          uint32_t *flag,
                          void *stream);
    /* y[i] = q or y[i] + alpha q, q = +-2^(expo - 127); nothing when
     * *flag. */
    void (*natural_decode)(const uint8_t *expo,
                           const uint8_t *bits,
                           size_t n,
                           bool add,
                           float alpha,
                           float *y,
                           const uint32_t *flag,
                           void *stream);
    /* *key = max of the keys (|x| bit patterns) of x and *key. */
    void (*maxabs)(const float *x, size_t n, uint32_t *key, void *stream);
    /* fp8 / fp4's strided sample: sample[j] = x[j n / m], j < m <= n. */
    void (*sample)(const float *x,
                   size_t n,
                   size_t m,
                   float *sample,
                   void *stream);
    /* fp8 / fp4's symbols (compress_fp8_symbols_ref's rule). */
    void (*fp8_symbols)(const float *x,
                        size_t n,
                        float s1,
                        float s2,
                        unsigned M,
                        unsigned E,
                        uint8_t *sym,
                        void *stream);
    /* y[i] += alpha val[sym[i]]; nothing when *flag. */
    void (*fp8_decode)(const uint8_t *sym,
                       const float *val,
                       size_t n,
                       float alpha,
                       float *y,
                       const uint32_t *flag,
                       void *stream);
    /* DGC's sample (sparse.c): one thread per draw j < m, sample[j] the
     * key of x[(u32 draw j of (seed, stream 0)) n >> 32] as a float. */
    void (*dgc_sample)(const float *x,
                       size_t n,
                       size_t m,
                       uint64_t seed,
                       float *sample,
                       void *stream);
    /* y[idx_j] += alpha vals[j] (distinct indices); nothing when *flag. */
    void (*idx_scatter)(const float *vals,
                        const uint32_t *idx,
                        size_t k,
                        float alpha,
                        float *y,
                        const uint32_t *flag,
                        void *stream);
    /* fp8 / fp4 bias=real's error on all of x: one thread per piece p of
     * COMPRESS_FP8_SAMPLE values (the last one shorter),
     * err[p] = compress_fp8_error_ref of that piece (its own order, double,
     * no fused multiply-add); the host adds the pieces in order. */
    void (*fp8_error)(const float *x,
                      size_t n,
                      float s1,
                      float s2,
                      unsigned M,
                      unsigned E,
                      const float *val,
                      double *err,
                      void *stream);
    /* TernGrad's clip, pass 1: one thread per piece of COMPRESS_CLIP_PIECE
     * values: its sum in double in order from 0 of x (mean NULL) or of
     * (x - *mean)^2 (quant.c s_clip_sum); part has ceil(n / PIECE) slots. */
    void (*clip_parts)(const float *x,
                       size_t n,
                       const double *mean,
                       double *part,
                       void *stream);
    /* Pass 2: one thread: the pieces' sums in order, then *mean = sum / n
     * (t NULL; *flag when the sum is not finite) or *t = (float)(clip *
     * sqrt(sum / n)), c sigma. */
    void (*clip_moment)(const double *part,
                        size_t n,
                        double clip,
                        double *mean,
                        float *t,
                        uint32_t *flag,
                        void *stream);
    /* v[i] = min(max(x[i], -*t), *t). */
    void (*clip_apply)(const float *x,
                       size_t n,
                       const float *t,
                       float *v,
                       void *stream);
    /* TernGrad with agreed scalers (the norms at scales, written by the
     * host): one thread per bucket, inv = s / norm (0 below
     * COMPRESS_NORM_MIN), for quant_codes. */
    void (*quant_inv)(const uint8_t *scales,
                      const struct compress_dev_quant *q,
                      float *inv,
                      void *stream);
};

/* The plain-C twins (ref.c), on host memory; the stream is ignored. */
extern const struct compress_dev_i compress_dev_ref;

/* The CUDA kernels (cuda.cu): RUMOR_ENOTSUP with *why (a static string)
 * in a CPU-only build or without a usable device. */
rumor_err compress_dev_cuda(const struct compress_dev_i **out,
                            const char **why);

/* The assembly behind rumor_codec_encode_device and
 * rumor_codec_decode_add_device, over either table (x and y in the
 * table's memory; out and in on the host). */
rumor_err compress_dev_encode(const struct compress_dev_i *d,
                              const rumor_codec *c,
                              const float *x,
                              size_t n,
                              uint64_t seed,
                              uint64_t counter,
                              uint8_t *out,
                              size_t cap,
                              size_t *written,
                              void *stream);
/* TernGrad's scaler sharing on the device (rumor_codec_scalers and
 * rumor_codec_encode_shared's twins): this node's scalers of x into out
 * (host), and the payload of x at the agreed scalers (host) with the
 * CPU's bytes; the scalers cross as 4 bytes each. */
rumor_err compress_dev_scalers(const struct compress_dev_i *d,
                               const rumor_codec *c,
                               const float *x,
                               size_t n,
                               float *out,
                               void *stream);
rumor_err compress_dev_encode_shared(const struct compress_dev_i *d,
                                     const rumor_codec *c,
                                     const float *x,
                                     size_t n,
                                     const float *scalers,
                                     uint64_t seed,
                                     uint64_t counter,
                                     uint8_t *out,
                                     size_t cap,
                                     size_t *written,
                                     void *stream);
/* compress_dev_encode of a dgc codec keeping k of n (k <= n; DGC's
 * warm-up counts), compress_sparse_encode_k's bytes; cap at least
 * compress_sparse_size_any's bound. */
rumor_err compress_dev_encode_k(const struct compress_dev_i *d,
                                const rumor_codec *c,
                                const float *x,
                                size_t n,
                                size_t k,
                                uint64_t seed,
                                uint64_t counter,
                                uint8_t *out,
                                size_t cap,
                                size_t *written,
                                void *stream);
rumor_err compress_dev_decode_add(const struct compress_dev_i *d,
                                  const rumor_codec *c,
                                  const uint8_t *in,
                                  size_t len,
                                  float alpha,
                                  float *y,
                                  size_t n,
                                  void *stream);

#endif /* RUMOR_COMPRESS_DEVICE_H */
