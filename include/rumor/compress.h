/*
 * compress: vector codecs (float32[] -> bytes -> float32[]) and
 * error-feedback memories.
 *
 * A codec is made from a spec string ("qsgd:bits=4,bucket=512",
 * "topk:ratio=0.01|qsgd:bits=4"). Every payload starts with a 12-byte
 * header (codec id, version, parameters, element count) so a decoder can
 * validate it alone; the byte layouts are in docs/protocol.md ("Codec
 * payloads"), the contracts in docs/internals/compress.md.
 *
 * Thread safety: a codec is immutable after rumor_codec_new and may be used
 * from several threads at once. An error-feedback memory belongs to one
 * thread at a time.
 * Ownership: codecs and memories are owned by the caller; every pointer
 * argument is borrowed for the duration of the call only.
 */
#ifndef RUMOR_COMPRESS_H
#define RUMOR_COMPRESS_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stable codec ids (one byte on the wire, also in the net/ frame header).
 * Append-only: never renumber. */
typedef enum rumor_codec_id {
    RUMOR_CODEC_FP32 = 1,
    RUMOR_CODEC_FP16 = 2,
    RUMOR_CODEC_BF16 = 3,
    RUMOR_CODEC_QSGD = 4,
    RUMOR_CODEC_TERNGRAD = 5,
    RUMOR_CODEC_SIGN = 6,
    RUMOR_CODEC_NATURAL = 7,
    RUMOR_CODEC_FP8 = 8,
    RUMOR_CODEC_FP4 = 9,
    RUMOR_CODEC_HUFFMAN = 10,
    RUMOR_CODEC_TOPK = 11,
    RUMOR_CODEC_RANDK = 12,
    RUMOR_CODEC_THRESHOLD = 13,
    RUMOR_CODEC_DGC = 14
} rumor_codec_id;

#define RUMOR_CODEC_ID_MAX 14

/* Bytes of the header every payload starts with. */
#define RUMOR_COMPRESS_HEADER_BYTES 12
/* Payload format version carried in byte 1 of the header. */
#define RUMOR_COMPRESS_VERSION 1
/* Largest element count a payload may carry (the header field is 32-bit). */
#define RUMOR_COMPRESS_MAX_ELEMS ((size_t)1 << 30)
/* Longest spec string accepted by rumor_codec_new. */
#define RUMOR_COMPRESS_SPEC_MAX 256

typedef struct rumor_codec rumor_codec;

/* Makes a codec from spec: "NAME[:KEY=VALUE[,KEY=VALUE...]]", optionally
 * "SPARSE|DENSE" (a sparsifier whose kept values go through a dense
 * codec). Names: fp32 fp16 bf16 qsgd terngrad sign natural fp8 fp4
 * huffman topk randk threshold dgc (fp8/fp4 keys: bias=real|int|fit, the
 * exponent bias search of CO3 eq. 12 or its fits; code=message|gennorm,
 * where the Huffman code comes from; docs/internals/compress.md). *out is
 * an output slot (NULL on error).
 * RUMOR_EINVAL for an unknown name or key or a bad value, with the
 * offending text named in diag (may be NULL); RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_codec_new(const char *spec,
                                                    rumor_codec **out,
                                                    struct rumor_diag *diag);

/* Frees *codec_p and sets it to NULL; safe on NULL and twice. */
RUMOR_API void rumor_codec_destroy(rumor_codec **codec_p);

/* The codec's wire id (of the outer codec for a composition). */
RUMOR_API rumor_codec_id rumor_codec_id_of(const rumor_codec *codec);

/* Canonical spec text with every parameter spelled out; borrowed, valid
 * while the codec lives. */
RUMOR_API const char *rumor_codec_spec(const rumor_codec *codec);

/* Short name of a codec id ("qsgd"), or NULL for an unknown id. */
RUMOR_API const char *rumor_codec_name(rumor_codec_id id);

/* True for codecs that use (seed, counter) (stochastic rounding, random
 * indices, sampling). */
RUMOR_API bool rumor_codec_is_stochastic(const rumor_codec *codec);

/* Payload size for n elements: *exact is true when every encoding of n
 * elements has exactly *bytes bytes, false when *bytes is an upper bound.
 * RUMOR_ETOOBIG when n > RUMOR_COMPRESS_MAX_ELEMS. */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encoded_size(const rumor_codec *codec,
                         size_t n,
                         size_t *bytes,
                         bool *exact);

/* Encodes x[0..n) into out (cap bytes), writing the size to *written.
 * Stochastic codecs draw from the Philox stream (seed, counter), so the
 * same inputs give the same bytes on every machine. approx (n floats, may
 * be NULL) receives C(x), bit-identical to what decode produces, so that
 * error feedback needs no decode. RUMOR_ENUMERIC when x holds NaN or Inf
 * (nothing useful is written), RUMOR_ETOOBIG when cap is too small or n
 * exceeds RUMOR_COMPRESS_MAX_ELEMS, RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_codec_encode(const rumor_codec *codec,
                                                       const float *x,
                                                       size_t n,
                                                       uint64_t seed,
                                                       uint64_t counter,
                                                       uint8_t *out,
                                                       size_t cap,
                                                       size_t *written,
                                                       float *approx);

/* TernGrad's scaler sharing (Wen et al. 2017, Algorithm 1; terngrad with
 * share=1): the nodes of a synchronous exchange agree on one scaler per
 * bucket, the max over nodes of each node's own, before they ternarize,
 * so every message has the same scale. rumor_codec_scaler_count gives
 * how many scalers n values need (0 for a codec without share=1);
 * rumor_codec_scalers writes this node's own (the bucket's max |x| after
 * the clip), RUMOR_EINVAL without share=1, RUMOR_ENUMERIC for NaN or Inf;
 * rumor_codec_encode_shared encodes as rumor_codec_encode with the agreed
 * scalers in place of the buckets' own (a value beyond its bucket's
 * scaler goes to +-scaler; scalers NULL: rumor_codec_encode), RUMOR_EINVAL
 * without share=1 or for a scaler that is negative or not finite. The
 * payload is an ordinary terngrad payload carrying the agreed scalers. */
RUMOR_API size_t rumor_codec_scaler_count(const rumor_codec *codec, size_t n);
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_scalers(const rumor_codec *codec,
                    const float *x,
                    size_t n,
                    float *out);
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encode_shared(const rumor_codec *codec,
                          const float *x,
                          size_t n,
                          const float *scalers,
                          uint64_t seed,
                          uint64_t counter,
                          uint8_t *out,
                          size_t cap,
                          size_t *written,
                          float *approx);

/* Decodes a payload of len bytes into y[0..n). A pure function: checks
 * every length against what is left before use and never asserts on
 * content. RUMOR_EPROTO for malformed bytes (wrong id for this codec,
 * unknown version, element count other than n, truncation, trailing
 * bytes, invalid codes), RUMOR_ENUMERIC when the payload carries NaN or
 * Inf, RUMOR_ENOMEM. On error y is left in an unspecified state. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_codec_decode(const rumor_codec *codec,
                                                       const uint8_t *in,
                                                       size_t len,
                                                       float *y,
                                                       size_t n);

/* y += alpha * decode(in), without a temporary vector of n floats; same
 * checks as rumor_codec_decode. On error y is unchanged: the payload is
 * validated completely before y is touched (streams that can fail midway
 * get a first validation pass). */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_decode_add(const rumor_codec *codec,
                       const uint8_t *in,
                       size_t len,
                       float alpha,
                       float *y,
                       size_t n);

/* Reads the header of a payload: codec id and element count.
 * RUMOR_EPROTO when len is shorter than the header, the version is not
 * RUMOR_COMPRESS_VERSION or the id is unknown. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_codec_peek(const uint8_t *in,
                                                     size_t len,
                                                     rumor_codec_id *id,
                                                     size_t *n);

/* --- codecs on a CUDA device (issue #31, the first part) --------------- */

/* Whether the device path has this codec: fp32, fp16, bf16, sign,
 * natural, qsgd with fixed-width codes (bits= or levels=, biased or not),
 * terngrad (clip too; share=1 through rumor_codec_scalers_device and
 * rumor_codec_encode_shared_device), randk, topk, threshold and dgc whose
 * values codec is one of those; on their own, qsgd with elias=1 or
 * code=elias and fp8 and fp4 (every bias); the others: not yet. */
RUMOR_API bool rumor_codec_device_supported(const rumor_codec *codec);

/* rumor_codec_encode of d_x[0..n) in device memory: the payload is
 * assembled on the device and copied once into out (host memory), byte
 * for byte what rumor_codec_encode writes for the same x, seed and
 * counter. The work is ordered on stream (a cudaStream_t; NULL: the
 * default stream), and the call waits on that stream alone for the bytes
 * and the NaN/Inf verdict (threshold and dgc also for their counts).
 * RUMOR_ENOTSUP in a CPU-only build, without a device (the reason:
 * rumor_cuda_device_count's) or for a codec the device path has not;
 * RUMOR_ENUMERIC, RUMOR_ETOOBIG (cap is checked before x is read; topk,
 * threshold and dgc want rumor_codec_encoded_size's bound) and RUMOR_EINVAL as
 * rumor_codec_encode; RUMOR_EBACKEND for a CUDA failure; RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encode_device(const rumor_codec *codec,
                          const float *d_x,
                          size_t n,
                          uint64_t seed,
                          uint64_t counter,
                          uint8_t *out,
                          size_t cap,
                          size_t *written,
                          void *stream);

/* rumor_codec_scalers and rumor_codec_encode_shared (share=1) of d_x in
 * device memory: the scalers computed there and copied into out (host, 4
 * bytes each), the payload made there at the agreed scalers (host,
 * copied up), both the CPU's bits; errors and stream as above. */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_scalers_device(const rumor_codec *codec,
                           const float *d_x,
                           size_t n,
                           float *out,
                           void *stream);
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encode_shared_device(const rumor_codec *codec,
                                 const float *d_x,
                                 size_t n,
                                 const float *scalers,
                                 uint64_t seed,
                                 uint64_t counter,
                                 uint8_t *out,
                                 size_t cap,
                                 size_t *written,
                                 void *stream);
/* A dgc codec's payload keeping k of n values rather than its own count
 * (DGC's warm-up, rumor_ef_dgc_count), on the host or of d_x in device
 * memory (as rumor_codec_encode_device), the same bytes; cap at least
 * rumor_ef_encoded_size's bound. RUMOR_EINVAL for k > n or another codec
 * (RUMOR_ENOTSUP on the device). */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encode_k(const rumor_codec *codec,
                     const float *x,
                     size_t n,
                     size_t k,
                     uint64_t seed,
                     uint64_t counter,
                     uint8_t *out,
                     size_t cap,
                     size_t *written);
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_encode_device_k(const rumor_codec *codec,
                            const float *d_x,
                            size_t n,
                            size_t k,
                            uint64_t seed,
                            uint64_t counter,
                            uint8_t *out,
                            size_t cap,
                            size_t *written,
                            void *stream);

/* rumor_codec_decode_add into d_y[0..n) in device memory: d_y += alpha *
 * decode(in), in (host memory) copied to the device once, with the
 * same checks and the same float results as rumor_codec_decode_add; on
 * error d_y is unchanged. Ordered on stream as above; RUMOR_ENOTSUP as
 * above, also for a qsgd payload in the levels or Elias-gamma format. */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_decode_add_device(const rumor_codec *codec,
                              const uint8_t *in,
                              size_t len,
                              float alpha,
                              float *d_y,
                              size_t n,
                              void *stream);

/* --- byte-level canonical Huffman (the entropy stage of fp8/fp4) ------- */

/* Upper bound of rumor_huffman_encode's output for n input bytes. */
RUMOR_API size_t rumor_huffman_bound(size_t n);

/* Canonical Huffman code of n bytes: code lengths (<= 12) in a 128-byte
 * table, then four bit streams (docs/protocol.md). RUMOR_ETOOBIG when cap
 * is too small. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_huffman_encode(const uint8_t *in,
                                                         size_t n,
                                                         uint8_t *out,
                                                         size_t cap,
                                                         size_t *written);

/* Decodes exactly n bytes from a stream of len bytes made by
 * rumor_huffman_encode; RUMOR_EPROTO for a malformed stream (bad length
 * table, truncation, trailing bytes). A pure function. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_huffman_decode(const uint8_t *in,
                                                         size_t len,
                                                         uint8_t *out,
                                                         size_t n);

/* --- error-feedback memories ------------------------------------------- */

/*
 * Kinds (spec "KIND[:KEY=VALUE,...]"; values without a key fill the
 * positional ones: "ef-decay:BETA", "dgc:MOMENTUM[,CLIP][,WARMUP]"):
 *   ef        p = g + e; send C(p); e = p - C(p)       (Karimireddy 2019)
 *   ef-decay  v = g + gamma m; q = C(v); m = gamma m + g - q   (CO3)
 *             key gamma (default 0.9)
 *   dgc       clip g to norm clip / sqrt(N) (0: off; N from
 *             rumor_ef_set_nodes); u = mu u + g; v += u; send the top of v
 *             (the codec's count; without a codec the memory's own DGC
 *             sparsifier keeps ratio; a warm-up schedule starts from 25 %
 *             density and decays geometrically to it over warmup steps);
 *             clear u and v where selected (Lin et al. 2018)
 *             keys momentum (0.9), ratio (0.001), clip (0), warmup (0),
 *             values (dense codec name for the kept values, fp32)
 *   saef      step-ahead EF pieces (Xu et al. 2021): the caller forms
 *             Delta = e_bar + x_half - x_new; encode sends C(Delta) and
 *             keeps e = Delta - C(Delta); rumor_ef_apply_error gives the
 *             look-ahead x_half = x - alpha * e_bar.
 */
typedef struct rumor_ef rumor_ef;

/* Makes a memory for vectors of n elements (zero state). *out is an output
 * slot. RUMOR_EINVAL (bad kind, key or value; named in diag),
 * RUMOR_ETOOBIG, RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_new(const char *spec,
                                                 size_t n,
                                                 rumor_ef **out,
                                                 struct rumor_diag *diag);

/* Frees *ef_p and sets it to NULL; safe on NULL and twice. */
RUMOR_API void rumor_ef_destroy(rumor_ef **ef_p);

/* DGC's clip applies to the sum of nodes gradients: each node clips its
 * own at clip / sqrt(nodes) (Lin et al. 2018, section 3.4). Default 1;
 * RUMOR_EINVAL for 0. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_set_nodes(rumor_ef *ef,
                                                       size_t nodes);

/* Whether encode takes codec: every codec but for dgc, which needs a
 * selection by count (topk, randk or dgc; with a warm-up only dgc, whose
 * messages carry any count). */
RUMOR_API bool rumor_ef_codec_fits(const rumor_ef *ef,
                                   const rumor_codec *codec);

/* The largest payload rumor_ef_encode writes for n elements through
 * codec (dgc: whatever its warm-up count). */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_ef_encoded_size(const rumor_ef *ef,
                      const rumor_codec *codec,
                      size_t n,
                      size_t *bytes);

/* One compression step of g[0..n) with the memory's correction, sending
 * through codec (for dgc, NULL selects with the memory's own sparsifier,
 * or a topk, randk or dgc codec whose count the memory keeps). The
 * payload goes to out as with rumor_codec_encode; sent
 * (n floats, may be NULL) receives what the receiver will decode. The
 * state is updated only on success. RUMOR_EINVAL (n mismatch, codec
 * missing or given wrongly), RUMOR_ENUMERIC, RUMOR_ETOOBIG, RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_encode(rumor_ef *ef,
                                                    const rumor_codec *codec,
                                                    const float *g,
                                                    size_t n,
                                                    uint64_t seed,
                                                    uint64_t counter,
                                                    uint8_t *out,
                                                    size_t cap,
                                                    size_t *written,
                                                    float *sent);

/* Scaler sharing through a memory (rumor_codec_encode_shared): p gets the
 * vector the next encode hands the codec (ef: g + e, ef-decay: g + gamma
 * m, saef: g), whose own scalers a node contributes; encode_shared is
 * rumor_ef_encode with the agreed scalers, so the memory keeps the error
 * of the message sent at the shared scale. RUMOR_EINVAL for dgc (it
 * selects by count: nothing to share) and an n mismatch. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_corrected(const rumor_ef *ef,
                                                       const float *g,
                                                       size_t n,
                                                       float *p);
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_ef_encode_shared(rumor_ef *ef,
                       const rumor_codec *codec,
                       const float *g,
                       size_t n,
                       const float *scalers,
                       uint64_t seed,
                       uint64_t counter,
                       uint8_t *out,
                       size_t cap,
                       size_t *written,
                       float *sent);

/* The memory's current residual (e for ef and saef, m for ef-decay, v for
 * dgc): n floats, borrowed, valid until the next call on ef. */
RUMOR_API const float *rumor_ef_error(const rumor_ef *ef, size_t *n);

/* A memory kept elsewhere (gossip's compressed all-reduce and local SGD
 * keep their residuals where the model is, on a GPU too):
 * rumor_ef_decay gives the factor of its step, p = g + decay e in float
 * (1 for ef, gamma for ef-decay) for the codec, then e = p - C(p), the
 * roundings of rumor_ef_encode; RUMOR_EINVAL for dgc and saef, whose
 * steps are the memory's own. rumor_ef_residual is rumor_ef_error's
 * vector, writable, and rumor_ef_steps / rumor_ef_set_steps the count of
 * successful steps: with them a memory made for the occasion carries such
 * a state through rumor_ef_save and rumor_ef_restore. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_decay(const rumor_ef *ef,
                                                   float *decay);
RUMOR_API float *rumor_ef_residual(rumor_ef *ef, size_t *n);
RUMOR_API uint64_t rumor_ef_steps(const rumor_ef *ef);
RUMOR_API void rumor_ef_set_steps(rumor_ef *ef, uint64_t steps);

/* A dgc memory kept elsewhere steps as rumor_ef_encode does: scale = 1,
 * or clip / norm where the norm of g (its sum of squares in double, in
 * order) is above clip; u' = mu u + scale g and v = e + u' in float; the
 * codec's top of v; then u = 0 where the payload selected
 * (rumor_ef_dgc_sent), u' elsewhere, and e = v - C(v) (v where nothing
 * was sent, as C(v) is 0 there). rumor_ef_dgc gives mu, the clip of one
 * of the rumor_ef_set_nodes N (clip / sqrt N; 0: none) and the warm-up's
 * steps, RUMOR_EINVAL for other kinds. rumor_ef_momentum is u, writable
 * as rumor_ef_residual (NULL for other kinds). rumor_ef_dgc_sent gives
 * the index list of a topk, randk or dgc payload of n elements: *idx (*k
 * entries, ascending, the caller frees it); RUMOR_EPROTO for a malformed
 * one. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_dgc(const rumor_ef *ef,
                                                 float *mu,
                                                 double *clip,
                                                 uint64_t *warmup);
RUMOR_API float *rumor_ef_momentum(rumor_ef *ef, size_t *n);
/* The count a dgc memory selects of n at its rumor_ef_steps: the codec's,
 * or more in the warm-up. */
RUMOR_API size_t rumor_ef_dgc_count(const rumor_ef *ef,
                                    const rumor_codec *codec,
                                    size_t n);
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_dgc_sent(const rumor_codec *codec,
                                                      const uint8_t *in,
                                                      size_t len,
                                                      size_t n,
                                                      uint32_t **idx,
                                                      size_t *k);

/* x += alpha * residual (SAEF's look-ahead with alpha = -1, or mixing a
 * neighbour's error into e_bar). RUMOR_EINVAL when n differs. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_apply_error(const rumor_ef *ef,
                                                         float alpha,
                                                         float *x,
                                                         size_t n);

/* Bytes rumor_ef_save writes. */
RUMOR_API size_t rumor_ef_state_size(const rumor_ef *ef);

/* Writes the state (kind, parameters, step, vectors) for a checkpoint.
 * RUMOR_ETOOBIG when cap < rumor_ef_state_size. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_save(const rumor_ef *ef,
                                                  uint8_t *out,
                                                  size_t cap,
                                                  size_t *written);

/* Restores a state written by rumor_ef_save into a memory made with the
 * same spec and n. A pure check first: RUMOR_EPROTO for a malformed or
 * mismatching state (kind, parameters, n, length), RUMOR_ENUMERIC for
 * non-finite numbers; on error the memory is unchanged. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_ef_restore(rumor_ef *ef,
                                                     const uint8_t *in,
                                                     size_t len);

/* --- per-layer statistics and self-described payloads (issue #12) ----- */

/* Statistics of one layer's vector, for the adaptive controllers. */
struct rumor_layer_stats {
    double norm;    /* ||x||_2 */
    double max_abs; /* max_i |x_i| */
    double mean;    /* mean of the elements */
    double var;     /* variance of the elements (population, >= 0) */
};

/* One pass over x[0..n): norm, max |x|, mean and variance (all zero for
 * n == 0). Non-finite input gives non-finite statistics. */
RUMOR_API void rumor_layer_stats_compute(const float *x,
                                         size_t n,
                                         struct rumor_layer_stats *out);

/* Relative compression error ||x - approx|| / ||x|| (0 when x is zero and
 * approx equals it, 1 when x is zero and approx is not). support_err (may
 * be NULL) receives the same ratio over the elements where approx is not
 * zero only: for a sparsifier followed by a quantizer, the quantizer's
 * share of the error (values quantized to zero are not counted). */
RUMOR_API double rumor_layer_rel_error(const float *x,
                                       const float *approx,
                                       size_t n,
                                       double *support_err);

/* The spec of a codec that decodes exactly this payload, read from its
 * header(s) alone (a sparse payload's inner values header included), so a
 * receiver never guesses the settings a sender chose. A pure function:
 * every length is checked against len. RUMOR_EPROTO for a malformed or
 * truncated header or an id it cannot describe (randk), RUMOR_ETOOBIG when
 * cap is too small for the text. */
RUMOR_API RUMOR_NODISCARD rumor_err
rumor_codec_spec_of_payload(const uint8_t *in,
                            size_t len,
                            char *spec,
                            size_t cap);

#endif /* RUMOR_COMPRESS_H */
