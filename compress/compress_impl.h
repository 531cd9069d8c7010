/*
 * compress module-private interface: the codec object, the per-codec
 * operation table, the shared payload header, little-endian helpers and
 * the kernels shared between codecs (Philox random words, finite checks,
 * top-k selection). Not installed; tests include it to reach the
 * reference kernels.
 */
#ifndef RUMOR_COMPRESS_IMPL_H
#define RUMOR_COMPRESS_IMPL_H

#include "core/le.h"
#include "rumor/compress.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* --- codec object ------------------------------------------------------ */

struct compress_ops {
    /* Size for n elements (n <= RUMOR_COMPRESS_MAX_ELEMS). */
    void (*size)(const rumor_codec *c, size_t n, size_t *bytes, bool *exact);
    /* x is finite (checked by the caller) and cap >= header; writes the
     * whole payload including the header. approx may be NULL. */
    rumor_err (*encode)(const rumor_codec *c,
                        const float *x,
                        size_t n,
                        uint64_t seed,
                        uint64_t counter,
                        uint8_t *out,
                        size_t cap,
                        size_t *written,
                        float *approx);
    /* The header was checked for id, version and n. add false: y =
     * decoded; add true: y += alpha * decoded. */
    /* The encoder checks x for NaN/Inf itself (fused into its pass). */
    bool checks_finite;
    rumor_err (*decode)(const rumor_codec *c,
                        const uint8_t *in,
                        size_t len,
                        bool add,
                        float alpha,
                        float *y,
                        size_t n);
};

/* fp8/fp4 exponent bias: real b by search (eq. 12 with b real), integer b by
 * search (the format before 2026-11), or the paper's fits (eqs. 15-16). */
enum compress_fp_bias {
    COMPRESS_BIAS_REAL,
    COMPRESS_BIAS_INT,
    COMPRESS_BIAS_FIT
};
/* fp8/fp4 Huffman code: from the message's histogram, or from the GenNorm
 * model of the layer (CO3 section IV-A). */
enum compress_fp_code { COMPRESS_CODE_MESSAGE, COMPRESS_CODE_GENNORM };

/* qsgd level coding, the payload's p1: fixed width, Elias-gamma levels
 * (elias=1), or the paper's Elias-omega gaps between non-zeros. */
enum compress_qsgd_code {
    COMPRESS_QCODE_FIXED,
    COMPRESS_QCODE_GAMMA,
    COMPRESS_QCODE_ELIAS
};

/* Most qsgd levels s (omega codes of levels stay below 2^25). */
#define COMPRESS_QSGD_MAX_LEVELS (1u << 24)

struct rumor_codec {
    const struct compress_ops *ops;
    rumor_codec_id id;
    unsigned bits;   /* qsgd: level bits (levels 0..2^bits-1); 0: the levels
                        format of qsgd_levels.c */
    uint32_t levels; /* qsgd: s, levels 0..s */
    enum compress_qsgd_code qcode; /* qsgd: how levels are coded */
    bool biased;     /* qsgd: decoded values scaled by 1/tau (ChocoSGD) */
    size_t bucket;   /* qsgd, terngrad, sign: values per bucket */
    double clip;     /* terngrad: clip to +-clip sigma first (0: off) */
    bool share;      /* terngrad: scalers agreed between nodes (share=1) */
    double ratio;    /* topk, randk, dgc: kept fraction of n */
    size_t k;        /* topk, randk: fixed count when > 0 (overrides) */
    float threshold; /* threshold: keep |v| >= threshold */
    bool scale;      /* randk: multiply kept values by the block size */
    enum compress_fp_bias fp_bias; /* fp8, fp4: how the encoder picks b */
    enum compress_fp_code
        fp_code;        /* fp8, fp4: where the Huffman code is from */
    rumor_codec *inner; /* sparse codecs: dense codec of kept values, owned */
    char spec[RUMOR_COMPRESS_SPEC_MAX];
};

/* Values per piece of TernGrad's clip sums (quant.c s_clip_sum): each
 * piece summed in order, the pieces in order, the same on a device. */
#define COMPRESS_CLIP_PIECE 16384

/* TernGrad's scaler sharing (quant.c; x finite, checked by the caller):
 * this node's scalers of x, one per bucket (max |v| after the clip, the
 * scale its own encode would write), and the encode that uses the agreed
 * scalers instead (no clip: values beyond a bucket's scaler saturate to
 * +-scaler, as the reference's ternarizer does). */
void compress_terngrad_scalers(const rumor_codec *c,
                               const float *x,
                               size_t n,
                               float *out);
rumor_err compress_terngrad_encode_shared(const rumor_codec *c,
                                          const float *x,
                                          size_t n,
                                          const float *scalers,
                                          uint64_t seed,
                                          uint64_t counter,
                                          uint8_t *out,
                                          size_t cap,
                                          size_t *written,
                                          float *approx);

/* --- header ------------------------------------------------------------ */

struct compress_header {
    uint8_t id;
    uint8_t version;
    uint8_t p0;  /* codec parameter byte (bits, format, rice parameter) */
    uint8_t p1;  /* codec flag byte */
    uint32_t n;  /* element count */
    uint32_t p2; /* codec parameter word (bucket, k, bias) */
};

static inline void
compress_put_f32(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    core_put_u32(p, u);
}

static inline float
compress_get_f32(const uint8_t *p)
{
    uint32_t u = core_get_u32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

static inline uint32_t
compress_f2u(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

static inline float
compress_u2f(uint32_t u)
{
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Writes the 12-byte header (out has room: checked by the caller). */
void compress_header_write(uint8_t *out, const struct compress_header *h);

/* Parses and checks the header: version, id == want, n == n_want (any n
 * when n_want is SIZE_MAX). RUMOR_EPROTO otherwise. */
rumor_err compress_header_read(const uint8_t *in,
                               size_t len,
                               rumor_codec_id want,
                               size_t n_want,
                               struct compress_header *h);

/* Number of buckets of size bucket covering n. */
static inline size_t
compress_buckets(size_t n, size_t bucket)
{
    return n == 0 ? 0 : (n - 1) / bucket + 1;
}

/* --- codec tables (one per file) ---------------------------------------- */

extern const struct compress_ops compress_fp32_ops;
extern const struct compress_ops compress_fp16_ops;
extern const struct compress_ops compress_bf16_ops;
extern const struct compress_ops compress_qsgd_ops;
extern const struct compress_ops compress_terngrad_ops;
extern const struct compress_ops compress_sign_ops;
extern const struct compress_ops compress_natural_ops;
extern const struct compress_ops compress_fp8_ops;
extern const struct compress_ops compress_huffman_ops;
extern const struct compress_ops compress_sparse_ops;

/* The checks of a QSGD (fixed-width bits, p0 >= 1) or TernGrad payload
 * that need no pass over the codes, shared by the CPU decoder and the
 * device's (device.c), so both refuse alike: bucket, p0 and p1, room for
 * the norms, each norm finite (else RUMOR_ENUMERIC) and not negative.
 * Gives the level bits, the bucket and the offset of the codes. */
rumor_err compress_quant_header(bool tern,
                                const uint8_t *in,
                                size_t len,
                                size_t n,
                                unsigned *b,
                                uint32_t *bucket,
                                size_t *head);
/* Biased QSGD's factor 1 / tau on each bucket's norm of a payload of n
 * values (quant.c; the device path applies it to its downloaded bytes). */
void compress_qsgd_rescale_norms(const rumor_codec *c, uint8_t *out, size_t n);
/* The device path's variable-length codes: the n fixed-width codes of a
 * qsgd payload's body (level | sign << b, b + 1 bits each, LSB first), as
 * the CPU encoder codes them into w: gamma (quant.c's format, bits = b)
 * and Elias omega with gaps (the levels format, c's levels and bucket). */
struct core_bw;
void compress_qsgd_gamma_recode(unsigned b,
                                const uint8_t *fixed,
                                size_t n,
                                struct core_bw *w);
void compress_qsgd_omega_recode(const rumor_codec *c,
                                const uint8_t *fixed,
                                size_t n,
                                struct core_bw *w);
/* The positions of the non-zero levels of an Elias levels payload of n
 * values that compress_qsgd_levels_decode accepted, into idx; returns
 * their number. Adding, that decoder leaves y alone at the zeros. */
size_t compress_qsgd_omega_positions(const uint8_t *in,
                                     size_t len,
                                     size_t n,
                                     uint32_t *idx);
/* Each of nb norms after the header finite (else RUMOR_ENUMERIC) and not
 * negative (else RUMOR_EPROTO). */
rumor_err compress_norms_check(const uint8_t *in, size_t nb);

/* --- qsgd with any levels (qsgd_levels.c) -------------------------------- */

/* Bits of the Elias omega code of k >= 1. */
unsigned compress_omega_len(uint32_t k);

/* The levels format (p0 = 0, p1 = fixed or elias, p2 = bucket): nb
 * float32 norms, uint32 s, then the bit stream (docs/protocol.md). Used
 * for codecs with bits == 0. */
void compress_qsgd_levels_size(const rumor_codec *c,
                               size_t n,
                               size_t *bytes,
                               bool *exact);
rumor_err compress_qsgd_levels_encode(const rumor_codec *c,
                                      const float *x,
                                      size_t n,
                                      uint64_t seed,
                                      uint64_t counter,
                                      uint8_t *out,
                                      size_t cap,
                                      size_t *written,
                                      float *approx);
/* The header was checked for id and n; p0 == 0. */
rumor_err compress_qsgd_levels_decode(const uint8_t *in,
                                      size_t len,
                                      bool add,
                                      float alpha,
                                      float *y,
                                      size_t n);

/* The checks of a levels payload's header (p0 == 0; the decoder's and
 * the device's): bucket, p1, room for the norms and s, s in range, each
 * norm finite (else RUMOR_ENUMERIC) and not negative. Gives s, the bucket
 * and the offset of the level stream. */
rumor_err compress_qsgd_levels_header(const uint8_t *in,
                                      size_t len,
                                      size_t n,
                                      uint32_t *s,
                                      uint32_t *bucket,
                                      size_t *head);
/* The level of v with inv = s / norm (0 below COMPRESS_NORM_MIN) and the
 * draw r, in double: a large s keeps the draw's 16 bits of resolution. */
uint32_t compress_qsgd_level(float v, double inv, uint16_t r, uint32_t s);

/* --- GenNorm model (gennorm.c) ------------------------------------------ */

/* GenNorm(mu, alpha, beta) of CO3 eq. 9, with the variance it was fit to. */
struct compress_gennorm {
    double mu, alpha, beta, var;
};

/* Moment estimate of x[0..n): mean, variance, beta from the kurtosis (eq.
 * 10c, beta clamped to [0.1, 20]), alpha from the variance (eq. 10b). */
void compress_gennorm_fit(const float *x, size_t n, struct compress_gennorm *g);

/* P(X <= x) under g (x may be +-Inf). */
double compress_gennorm_cdf(const struct compress_gennorm *g, double x);

/* CO3's fitted exponent bias at unit variance: eq. 15 for 2 mantissa bits
 * (fp4), eq. 16 otherwise (fp8), a quartic in beta as printed. */
double compress_gennorm_paper_bias(unsigned mantissa_bits, double beta);

/* Sparse codecs (topk, randk, threshold, dgc) with an explicit count,
 * used by the dgc memory's warm-up; k <= n. selected (n bytes, may be
 * NULL) receives 1 where an element was sent, whatever its value decodes
 * to (a kept value may quantize to 0), else 0. */
rumor_err compress_sparse_encode_k(const rumor_codec *c,
                                   const float *x,
                                   size_t n,
                                   size_t k,
                                   uint64_t seed,
                                   uint64_t counter,
                                   uint8_t *out,
                                   size_t cap,
                                   size_t *written,
                                   float *approx,
                                   uint8_t *selected);

/* DGC's selection for k of n values (0 < k < n), shared by the CPU
 * codec and the device's so they decide alike: m sampled keys, the
 * sample's ks-th largest the first threshold, a count in [lo, hi] taken
 * as it is, more than hi but at most cap cut to the exact top-k; else the
 * threshold doubles or halves, COMPRESS_DGC_TRIES times at most. */
struct compress_dgc_plan {
    size_t m, ks, cap, lo, hi;
};
#define COMPRESS_DGC_TRIES 16
struct compress_dgc_plan compress_dgc_plan(size_t n, size_t k);
/* The seed of DGC's sample: draw j is word j of its Philox stream 0,
 * index (draw n) >> 32. */
uint64_t compress_dgc_seed(uint64_t seed, uint64_t counter);

/* The Golomb-Rice parameter of k ascending indices below n (sparse.c). */
unsigned compress_sparse_rice_param(size_t n, size_t k);

/* A sparse payload's header checks and its index list, read as the CPU
 * decoder reads them (the device decoder shares them): *idx (k entries,
 * the caller frees it), *k, and *at, the offset of the values' payload,
 * whose header was checked for id and k. */
rumor_err compress_sparse_indices(const rumor_codec *c,
                                  const uint8_t *in,
                                  size_t len,
                                  size_t n,
                                  uint32_t **idx,
                                  size_t *k,
                                  size_t *at);

/* The count a topk, randk or dgc codec keeps of n elements. */
size_t compress_sparse_k(const rumor_codec *c, size_t n);
/* A bound on compress_sparse_encode_k's payload for any k <= n. */
size_t compress_sparse_size_any(const rumor_codec *c, size_t n);

/* --- kernels (kernels.c: dispatching fast paths; ref.c: plain C) ------- */

/* The byte stream of stochastic rounding, (seed, stream): byte j is in
 * group g = j / 256, the 16 Philox blocks 16 g .. 16 g + 15 (block c =
 * Philox4x32-10(counter = (c, stream), key = seed), core/rng.c) stored
 * word-major: offset o = j % 256 holds byte o % 4 (little-endian) of word
 * o / 64 of block 16 g + (o / 4) % 16. The layout is the vector
 * generator's registers stored as they are (no transpose), and any 16
 * consecutive bytes from a multiple of 16 on are one register's lanes.
 * out[i] = byte first + i, for any first and n. */
void compress_stream_bytes(uint64_t seed,
                           uint64_t stream,
                           uint64_t first,
                           uint8_t *out,
                           size_t n);
void compress_stream_bytes_ref(uint64_t seed,
                               uint64_t stream,
                               uint64_t first,
                               uint8_t *out,
                               size_t n);

/* Where the shared low bytes of the draws start in the byte stream. */
#define COMPRESS_DRAW_LOW (1ull << 63)

/* The draws of stochastic rounding: draw i = 256 S(i) + S(2^63 + i / 16)
 * with S(j) byte j of compress_stream_bytes (seed, stream). Each draw is
 * uniform on 16 bits; the low byte (needed only when the high byte ties
 * with the top 8 bits of the rounded fraction, 1 time in 256) is shared
 * by 16 consecutive draws, so the generator makes 8.5 bits per draw
 * instead of 16. compress_draw_bytes writes the two parts of draws first
 * .. first + n - 1 (first a multiple of 16): hi[i] = S(first + i), lo[q]
 * = S(2^63 + first / 16 + q) for q < ceil(n / 16); the kernels take them
 * so, with no joined copy. */
void compress_draw_bytes(uint64_t seed,
                         uint64_t stream,
                         uint64_t first,
                         uint8_t *hi,
                         uint8_t *lo,
                         size_t n);
/* The draws joined: out[i] = hi[i] 256 + lo[(phase + i) / 16] (phase <
 * 16: where hi[0] sits in its run of 16). */
void compress_join_draws(const uint8_t *hi,
                         const uint8_t *lo,
                         size_t phase,
                         size_t n,
                         uint16_t *out);
/* The oracle: out[i] = draw first + i, straight from the definition. */
void compress_draws_ref(uint64_t seed,
                        uint64_t stream,
                        uint64_t first,
                        uint16_t *out,
                        size_t n);

/* True when every x[i] is finite. */
bool compress_all_finite(const float *x, size_t n);
bool compress_all_finite_ref(const float *x, size_t n);

/* Exact top-k by magnitude: writes the k indices (ascending) of the k
 * largest |x[i]|; among equal magnitudes the lower index wins. Checks x
 * for NaN/Inf on the way (its one full pass): RUMOR_ENUMERIC, RUMOR_ENOMEM.
 * vals (may be NULL) receives x[idx[j]], gathered during the scan. */
rumor_err compress_topk_select(const float *x,
                               size_t n,
                               size_t k,
                               uint32_t *idx,
                               float *vals);
/* Sort-based reference with the same tie rule. */
rumor_err
compress_topk_select_ref(const float *x, size_t n, size_t k, uint32_t *idx);

/* Indices (ascending) of |x[i]| >= t (t >= 0), at most cap of them;
 * returns the count found, which may exceed cap (then only cap were
 * written). bits (may be NULL) receives the bit patterns of the selected
 * values. *finite (may be NULL) tells whether every x[i] was finite. */
size_t compress_select_ge(const float *x,
                          size_t n,
                          float t,
                          uint32_t *idx,
                          uint32_t *bits,
                          size_t cap,
                          bool *finite);
/* compress_select_ge with *top the largest |x[i]| bit pattern (sign
 * cleared: >= 0x7f800000 when x holds NaN or Inf), which bounds the keys
 * of the selected values from above. */
size_t compress_select_ge_top(const float *x,
                              size_t n,
                              float t,
                              uint32_t *idx,
                              uint32_t *bits,
                              size_t cap,
                              uint32_t *top);
/* The entries i < m whose magnitude key (bits[i] with the sign cleared)
 * lies in [lo, lo + span) (the unsigned difference key - lo is below span),
 * in order: tag[i] into out_tag and, when out_vals is not NULL, bits[i] as
 * a float into out_vals. Writes no slot at or past cap (but may overwrite
 * slots past the last entry below cap); returns how many entries there
 * are, which may exceed cap. out_tag may be tag (compaction in place). */
size_t compress_select_range(const uint32_t *bits,
                             const uint32_t *tag,
                             size_t m,
                             uint32_t lo,
                             uint32_t span,
                             uint32_t *out_tag,
                             float *out_vals,
                             size_t cap);
/* The references of the two scans, also their tails: they continue a scan
 * that has count entries so far (base: the index of x[0]; *top: the
 * largest key so far). */
size_t compress_select_ge_ref(const float *x,
                              size_t n,
                              uint32_t tkey,
                              uint32_t *idx,
                              uint32_t *bits,
                              size_t cap,
                              size_t count,
                              size_t base,
                              uint32_t *top);
size_t compress_select_range_ref(const uint32_t *bits,
                                 const uint32_t *tag,
                                 size_t m,
                                 uint32_t lo,
                                 uint32_t span,
                                 uint32_t *out_tag,
                                 float *out_vals,
                                 size_t cap,
                                 size_t count);

/* Scaled sign of one bucket: sum of |x| (double) and sign bits (bit i of
 * bits = x[i] < 0, or -0.0) for n <= 512 values; bits has (n + 7) / 8
 * bytes, zero-padded. Returns the sum. */
double compress_sign_bucket(const float *x, size_t n, uint8_t *bits);
double compress_sign_bucket_ref(const float *x, size_t n, uint8_t *bits);

/* fp16 conversions (round to nearest even, saturating at +-65504). The
 * encoder returns false when x holds NaN or Inf (h is then garbage). */
bool compress_f32_to_f16(const float *x, size_t n, uint16_t *h);
bool compress_f32_to_f16_ref(const float *x, size_t n, uint16_t *h);
float compress_f16_to_f32_ref(uint16_t h);
/* Converts n halves (exponent 31 gives Inf/NaN, for the caller to check). */
void compress_f16_to_f32(const uint16_t *h, size_t n, float *y);

/* bf16 rounding (nearest even, saturating at +-0x1.fep127); false when x
 * holds NaN or Inf. A bf16 h widens exactly to the float h << 16. */
bool compress_f32_to_bf16_ref(const float *x, size_t n, uint16_t *h);

/* The conversions of fp16 (bf16 false) or bf16 (bf16 true) on
 * little-endian byte streams (2 n bytes), straight from and into a
 * payload; both return false when a value is not finite (decoding: a
 * half with an all-ones exponent). */
bool
compress_f32_to_half_bytes(const float *x, size_t n, bool bf16, uint8_t *out);
bool
compress_half_bytes_to_f32(const uint8_t *in, size_t n, bool bf16, float *y);
bool
compress_to_half_bytes_ref(const float *x, size_t n, bool bf16, uint8_t *out);
bool compress_half_bytes_ref(const uint8_t *in, size_t n, bool bf16, float *y);

/* Sum of x[i]^2 in a fixed order, so that the fast paths and the
 * reference agree bit for bit on every machine: in float, 64 lane sums
 * over whole groups of 64 (lane j takes x[64 g + j], each step one FMA),
 * folded by halving (lane j += lane j + w for w = 32, 16, 8, 4, 2, 1),
 * plus the tail summed in order with FMAs. 64 float lanes are four
 * 16-wide (eight 8-wide) independent chains: the sum runs at load speed.
 * A float sum that is not normal and above 2^-100 (overflow, NaN or Inf
 * in x, or so small that float's range loses digits) is replaced by
 * compress_sumsq_wide's, so the result is as good as double's. */
double compress_sumsq(const float *x, size_t n);
double compress_sumsq_ref(const float *x, size_t n);

/* The same sum in double: 32 lanes over whole groups of 32, halving
 * (w = 16 .. 1), plus the tail in order. */
double compress_sumsq_wide(const float *x, size_t n);

/* The rule above: sum as computed in float, or the wide sum. */
static inline double
compress_sumsq_finish(float sum, const float *x, size_t n)
{
    if (sum >= 0x1.0p-100f && sum <= 0x1.fffffep127f)
        return (double)sum;
    return compress_sumsq_wide(x, n);
}

/* Largest |x[i]| (0 for n == 0); Inf or NaN when x holds one. */
float compress_maxabs(const float *x, size_t n);

/* Stochastic levels: codes[i] = l | neg << b with l = min(s,
 * floor(|x[i]| inv + (r[i] + 0.5) 2^-16)) and neg = (x[i] < 0 && l > 0);
 * s < 2^b <= 128. */
void compress_levels(const float *x,
                     size_t n,
                     float inv,
                     uint32_t s,
                     unsigned b,
                     const uint16_t *r,
                     uint8_t *codes);
void compress_levels_ref(const float *x,
                         size_t n,
                         float inv,
                         uint32_t s,
                         unsigned b,
                         const uint16_t *r,
                         uint8_t *codes);

/* compress_levels then compress_pack at width b + 1 in one pass (the
 * codes never leave registers): n a multiple of 8, out the byte where the
 * first group goes, end bounds the output; b <= 7. */
void compress_levels_packed(const float *x,
                            size_t n,
                            float inv,
                            uint32_t s,
                            unsigned b,
                            const uint16_t *r,
                            uint8_t *out,
                            const uint8_t *end);

/* Norms below this are sent as zero: s / norm must stay finite. */
#define COMPRESS_NORM_MIN 1e-30f

/* The scale of a QSGD or TernGrad bucket from acc, its 2-norm or max |v|:
 * false when acc is not finite (the bucket holds NaN or Inf: a finite
 * bucket's sum of squares cannot overflow a double); else the norm sent
 * (clamped to FLT_MAX) and inv = s / norm (0 for a norm below
 * COMPRESS_NORM_MIN). */
static inline bool
compress_bucket_scale(double acc, uint32_t s, float *norm, float *inv)
{
    if (!isfinite(acc))
        return false;
    *norm = acc > FLT_MAX ? FLT_MAX : (float)acc;
    *inv = *norm >= COMPRESS_NORM_MIN ? (float)s / *norm : 0.0f;
    return true;
}

/* The code of one value under stochastic rounding: level l = min(s,
 * floor(fma(|v|, inv, (r + 0.5) 2^-16))) with the 16-bit draw r, and the
 * sign at bit b when l > 0 (compress_levels, the reference arithmetic). */
static inline uint32_t
compress_level_code(float v, float inv, uint16_t r, uint32_t s, unsigned b)
{
    float a = fmaf(fabsf(v), inv, ((float)r + 0.5f) * 0x1.0p-16f);
    uint32_t l = (uint32_t)a;
    l = l > s ? s : l;
    return l | (uint32_t)(l > 0 && signbit(v)) << b;
}

/* Values one compress_quant_buckets call takes at most. */
#define COMPRESS_FUSED_MAX 4096

/* A run of whole QSGD (tern false: 2-norm) or TernGrad (tern true, s = b
 * = 1: max |v|) buckets for compress_quant_buckets: nbk buckets of m
 * values from x (m a multiple of 8, nbk m <= COMPRESS_FUSED_MAX), s < 2^b
 * <= 256; value t takes draw hi[t] 256 + lo[t / 16] (compress_draw_bytes
 * from a multiple of 16). Outputs: per bucket the norm as little-endian
 * float32 at norms + 4 k, the codes of compress_levels packed at width b +
 * 1 from out on (end bounds the output), and when approx is not NULL the
 * decoded values (approx[t] = +-l (norm / s), as the decoder computes
 * them). */
struct compress_bucket_run {
    const float *x;
    size_t nbk, m;
    uint32_t s;
    unsigned b;
    bool tern;
    const uint8_t *hi, *lo;
    uint8_t *norms, *out;
    const uint8_t *end;
    float *approx;
};

/* Quantizes a run, one pass per bucket while it is in L1. False (output
 * unspecified) when x holds NaN or Inf. b = 8 (9-bit codes) only where
 * compress_quant_buckets_wide says so. */
bool compress_quant_buckets(const struct compress_bucket_run *run);
/* True when compress_quant_buckets takes 9-bit codes (b = 8) for buckets
 * of m values on this CPU (the AVX-512 byte kernel, m a multiple of 16). */
bool compress_quant_buckets_wide(size_t m);
bool compress_quant_buckets_ref(const struct compress_bucket_run *run);

/* Packs groups of eight w-bit codes (w <= 8, bytes < 2^w) into w bytes
 * each, LSB-first (the bit order of core/bits.h); end bounds the output. */
void compress_pack(const uint8_t *codes,
                   size_t groups,
                   unsigned w,
                   uint8_t *out,
                   const uint8_t *end);
/* The inverse: groups of w bytes to eight codes; reads stop at end (a
 * last partial group reads as zero-padded). */
void compress_unpack(const uint8_t *in,
                     const uint8_t *end,
                     size_t groups,
                     unsigned w,
                     uint8_t *codes);

/* compress_unpack for 9-bit codes (qsgd bits = 8): groups of eight
 * codes in 9 bytes each, to 16-bit codes. */
void compress_unpack9(const uint8_t *in,
                      const uint8_t *end,
                      size_t groups,
                      uint16_t *codes);
/* True when one of a[0 .. n) equals v (memchr for 16-bit codes). */
bool compress_has_u16(const uint16_t *a, size_t n, uint16_t v);
/* compress_dequant of 9-bit codes: level in bits 0-7, sign in bit 8. */
void compress_dequant9(const uint16_t *codes,
                       size_t n,
                       float scale,
                       bool add,
                       float alpha,
                       float *y);

/* y[i] (= or +=) alpha * (+-)(code & s) * scale, the sign from bit b. */
void compress_dequant(const uint8_t *codes,
                      size_t n,
                      unsigned b,
                      float scale,
                      bool add,
                      float alpha,
                      float *y);

/* Natural compression of n values (n a multiple of 8): exponent bytes and
 * sign bits (n / 8 bytes), value t with draw hi[t] 256 + lo[t / 16]
 * (compress_draw_bytes from a multiple of 16); false when x holds NaN or
 * Inf. */
bool compress_natural(const float *x,
                      size_t n,
                      const uint8_t *hi,
                      const uint8_t *lo,
                      uint8_t *expo,
                      uint8_t *signs);
bool compress_natural_ref(const float *x,
                          size_t n,
                          const uint8_t *hi,
                          const uint8_t *lo,
                          uint8_t *expo,
                          uint8_t *signs);

/* Natural compression decoded: y[i] (= or +=) alpha * q with q the float
 * of sign bit i of signs (LSB first), exponent field expo[i] (< 255) and
 * a zero mantissa; y + alpha q as a product then a sum. */
void compress_natural_expand(const uint8_t *expo,
                             const uint8_t *signs,
                             size_t n,
                             bool add,
                             float alpha,
                             float *y);
void compress_natural_expand_ref(const uint8_t *expo,
                                 const uint8_t *signs,
                                 size_t n,
                                 bool add,
                                 float alpha,
                                 float *y);

/* Scaled signs of 8 nbytes values: y = (or +=) alpha * (bit ? -scale :
 * scale), scale >= 0. */
void compress_sign_expand(const uint8_t *bits,
                          size_t nbytes,
                          float scale,
                          bool add,
                          float alpha,
                          float *y);

/* fp8/fp4's encoder and decoder in steps (fp8.c), so the device path
 * (device.c) makes the CPU's decisions: the strided sample (at most
 * COMPRESS_FP8_SAMPLE values, x[j n / m]; returns m), the bias from it and
 * max |x| (bias=real, when n > m, also asks all(ctx, k, fr, &err) for
 * the error on all n values of x: see compress_fp8_error_ref), the
 * symbols' scales and format, then the Huffman stage and the headers over
 * the symbols. compress_fp8_read makes every check of a payload and gives
 * its symbols (*sym, n bytes, the caller frees it) and their values. */
#define COMPRESS_FP8_SAMPLE 16384
typedef rumor_err (*compress_fp8_err_fn)(void *ctx,
                                         int k,
                                         float fr,
                                         double *err);
size_t compress_fp8_sample(const float *x, size_t n, float *sample);
rumor_err compress_fp8_bias(const rumor_codec *c,
                            const float *sample,
                            size_t m,
                            float mx,
                            size_t n,
                            compress_fp8_err_fn all,
                            void *ctx,
                            int *k,
                            float *fr);
/* The 256 decoded values under bias k + log2 fr; false when one is not
 * finite (the error of every piece is then infinite). */
bool compress_fp8_values(const rumor_codec *c, int k, float fr, float val[256]);
/* bias=real's error on one piece of at most COMPRESS_FP8_SAMPLE values:
 * the sum, in index order, in double, of (x_i - val[symbol of x_i])^2.
 * The error on all of x is the pieces' errors added in order from 0 (the
 * CPU's order, which the device reproduces bit for bit). */
double compress_fp8_error_ref(const float *x,
                              size_t n,
                              float s1,
                              float s2,
                              unsigned M,
                              unsigned E,
                              const float *val);
void compress_fp8_scales(const rumor_codec *c,
                         int k,
                         float fr,
                         float *s1,
                         float *s2,
                         unsigned *M,
                         unsigned *E);
rumor_err compress_fp8_write(const rumor_codec *c,
                             const uint8_t *sym,
                             size_t n,
                             int k,
                             float fr,
                             const float *sample,
                             size_t m,
                             uint8_t *out,
                             size_t cap,
                             size_t *written);
rumor_err compress_fp8_read(const rumor_codec *c,
                            const uint8_t *in,
                            size_t len,
                            size_t n,
                            uint8_t **sym,
                            float val[256]);

/* fp8/fp4 symbols (fp8.c): sign << (E + M) | magnitude code of
 * |x| * s1 * s2 rounded to nearest even, saturated (M mantissa bits, E
 * exponent bits). */
void compress_fp8_symbols(const float *x,
                          size_t n,
                          float s1,
                          float s2,
                          unsigned M,
                          unsigned E,
                          uint8_t *sym);
void compress_fp8_symbols_ref(const float *x,
                              size_t n,
                              float s1,
                              float s2,
                              unsigned M,
                              unsigned E,
                              uint8_t *sym);

/* True when the CPU has AVX2, FMA, F16C and BMI2 (fast paths in use). */
bool compress_have_avx2(void);

/* The kernel tier in use: 0 plain C, 1 AVX2 (+FMA, F16C, BMI2), 2 AVX2
 * plus AVX-512 F/VL/BW/DQ. */
int compress_simd_level(void);

/* Tests only: uses tier min(level, what the CPU has) (0: the plain-C
 * paths a CPU without AVX2 runs) and returns it. Not thread-safe. */
int compress_set_simd(int level);

#endif /* RUMOR_COMPRESS_IMPL_H */
