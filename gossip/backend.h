/*
 * Private to gossip/: the compute backend of an instance (issue #31, as
 * ggml's backends): where the model's tensors live and the vector
 * operations on that memory. An algorithm that runs on a device (the
 * `device` flag of its gossip_algo_i) reaches the tensors, allocates its
 * model-sized state and does its per-element arithmetic only through this
 * table, so it is written once for the host (gossip/backend.c) and CUDA
 * (gossip/backend_cuda.cu). What crosses between host and device is
 * counted, so the metrics can show that only payloads do.
 *
 * The operations' arithmetic is the same on every backend, operation by
 * operation, rounding by rounding (the kernels use the _rn intrinsics, so
 * nothing is contracted into an FMA; gossip/ref.c holds the plain-C twin
 * of each kernel): a ring that mixes GPU and CPU nodes computes the same
 * bits, except for norm, a reduction whose order differs (it only sizes
 * clipping and detects non-finite values).
 *
 * gossip_backend_ref is host memory that the code treats as a device's:
 * every access goes through the table and is counted. The CPU tests run
 * the device path on it and compare it, bit for bit, with the host path.
 */
#ifndef RUMOR_GOSSIP_BACKEND_H
#define RUMOR_GOSSIP_BACKEND_H

/* The public headers are C; the .cu file includes this one. */
#ifdef __cplusplus
extern "C" {
#endif

#include "rumor/compress.h"
#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>

/* Moniqua's quantization step: levels 0..3 of delta = 1/3. */
#define GOSSIP_MONIQUA_DELTA (1.0 / 3.0)

enum gossip_copy {
    GOSSIP_TO_DEVICE, /* host -> model memory */
    GOSSIP_TO_HOST,   /* model memory -> host */
    GOSSIP_ON_DEVICE  /* model memory -> model memory */
};

struct gossip_backend_i {
    const char *name;
    /* Host code may read and write the memory directly. */
    bool host_memory;
    /* The low-rank products run on the CUDA backend (the memory is
     * CUDA's). */
    bool cuda;
    /* bytes of model memory (zeroed) into *out; RUMOR_ENOMEM or
     * RUMOR_EBACKEND (logged). */
    rumor_err (*alloc)(size_t bytes, void **out);
    void (*release)(void *p); /* NULL is ignored */
    rumor_err (*copy)(void *dst,
                      const void *src,
                      size_t bytes,
                      enum gossip_copy kind);
    /* The vector operations, on backend memory (n elements). */
    rumor_err (*zero)(void *p, size_t bytes);
    /* d = (double)a - (double)b; b NULL: d = (double)a */
    rumor_err (*diff)(double *d, const float *a, const float *b, size_t n);
    /* (optional, NULL: diff, then norm) diff, and *sq += d[e] * d[e] in
     * element order in the same pass: norm's sum, so a host term is
     * written and sized in one pass over memory (gossip/edges.c) */
    rumor_err (*diff_sq)(double *d,
                         const float *a,
                         const float *b,
                         size_t n,
                         double *sq);
    /* d = a - b, in double */
    rumor_err (*sub)(double *d, const double *a, const double *b, size_t n);
    /* acc += d * c (the product rounded, then the sum) */
    rumor_err (*axpy)(double *acc, double c, const double *d, size_t n);
    /* out = (float)(base + gamma * acc); out may be base */
    rumor_err (*apply)(float *out,
                       const float *base,
                       double gamma,
                       const double *acc,
                       size_t n);
    /* *norm = the Euclidean norm of d (host memory) */
    rumor_err (*norm)(const double *d, size_t n, double *norm);
    /* out = (float)((double)x - xhat) */
    rumor_err (*sub_round)(float *out,
                           const float *x,
                           const double *xhat,
                           size_t n);
    /* acc += c * (double)x */
    rumor_err (*accum)(double *acc, double c, const float *x, size_t n);
    /* out = a + b, in float */
    rumor_err (*add)(float *out, const float *a, const float *b, size_t n);
    /* rumor_codec_encode of x (backend memory) into out (host), the same
     * bytes on every backend (the device codecs' promise) */
    rumor_err (*encode)(const rumor_codec *codec,
                        const float *x,
                        size_t n,
                        uint64_t seed,
                        uint64_t counter,
                        uint8_t *out,
                        size_t cap,
                        size_t *written);
    /* rumor_codec_decode of in (host) into y (backend memory); on the
     * device 0 + decode, so a -0 comes out +0 */
    rumor_err (*decode)(const rumor_codec *codec,
                        const uint8_t *in,
                        size_t len,
                        float *y,
                        size_t n);
    /* float arithmetic of the compressed all-reduce's error feedback
     * (allreduce_codec.c) and of localsgd: out = a + c * b (the product
     * rounded, then the sum); a NULL: out = c * b; out may be a or b */
    rumor_err (*add_scaled)(float *out,
                            const float *a,
                            float c,
                            const float *b,
                            size_t n);
    /* the compressed all-reduce's mean: out = (float)(acc / c) (a
     * division: a product by 1 / c rounds otherwise) */
    rumor_err (*div_round)(float *out, const double *acc, double c, size_t n);
    /* DiLoCo's outer step: v = mu v + d; x = anchor - lr (d + mu v);
     * anchor = x */
    rumor_err (*outer)(float *x,
                       float *anchor,
                       float *v,
                       const float *d,
                       float lr,
                       float mu,
                       size_t n);
    /* rumor_codec_decode_add of in (host) into y (backend memory): y +=
     * alpha * decode(in), y unchanged on error */
    rumor_err (*decode_add)(const rumor_codec *codec,
                            const uint8_t *in,
                            size_t len,
                            float alpha,
                            float *y,
                            size_t n);
    /* *crc = rumor_crc32c(0, p, bytes) of backend memory: on a device
     * per GOSSIP_CRC_CHUNK bytes there, joined on the host
     * (gossip_ref_crc32c_join), so only the chunks' checksums cross */
    rumor_err (*crc32c)(const void *p, size_t bytes, uint32_t *crc);
    /* Moniqua (gossip/moniqua.c). */
    /* out = elements [index, index + n) of the Philox stream (seed,
     * stream) as uniform floats: rumor_rng_fill_uniform's values, drawn by
     * element index where out is */
    rumor_err (*uniform)(float *out,
                         uint64_t seed,
                         uint64_t stream,
                         uint64_t index,
                         size_t n);
    /* The modulo quantization of x (bound B, rounding noise in [0, 1)):
     * levels receives the 2-bit levels, four to a byte ((n + 3) / 4 bytes,
     * all written), xhat = q B - mod(x, B) */
    rumor_err (*moniqua_levels)(uint8_t *levels,
                                float *xhat,
                                const float *x,
                                const float *noise,
                                double bound,
                                size_t n);
    /* The decoded term of a neighbour's levels:
     * d = mod(q B - x, B) - xhat */
    rumor_err (*moniqua_term)(double *d,
                              const uint8_t *levels,
                              const float *x,
                              const float *xhat,
                              double bound,
                              size_t n);
    /* CHOCO's adaptive compression (gossip/adapt.c): reductions, whose
     * order on CUDA differs from the host's in the last bits, as norm's. */
    /* *out = rumor_layer_stats_compute of x */
    rumor_err (*stats)(const float *x, size_t n, struct rumor_layer_stats *out);
    /* *err = rumor_layer_rel_error(x, approx, n, support) */
    rumor_err (*rel_error)(const float *x,
                           const float *approx,
                           size_t n,
                           double *err,
                           double *support);
    /* PowerSGD's adaptive rank (gossip/powersgd.c), a reduction as norm:
     * *acc += the sum of ((double)a + b)^2, element by element in order on
     * the host; a is the compressor's memory (the error memory), b the
     * model's tensor. b NULL: the sum of (double)a * a (DGC's clip,
     * gossip/ef_table.c, errfb.c's sum; the same as b all +0, as x + +0
     * is x for every double x but -0, whose square is +0 either way) */
    rumor_err (*sumsq_add)(const float *a,
                           const float *b,
                           size_t n,
                           double *acc);
    /* The train module's optimizer (train/optim.c), one pass:
     * u = g + wd p; b NULL (sgd): d = u; else b = mu b + u and
     * d = nesterov ? u + mu b : b; then p = p - lr d */
    rumor_err (*sgd)(float *p,
                     const float *g,
                     float *b,
                     float lr,
                     float wd,
                     float mu,
                     bool nesterov,
                     size_t n);
    /* TernGrad's scaler sharing (the compressed all-reduce):
     * rumor_codec_scalers of x (backend memory) into out (host), and
     * rumor_codec_encode_shared of x at the agreed scalers (host) into out
     * (host), the same bits on every backend */
    rumor_err (*scalers)(const rumor_codec *codec,
                         const float *x,
                         size_t n,
                         float *out);
    rumor_err (*encode_shared)(const rumor_codec *codec,
                               const float *x,
                               size_t n,
                               const float *scalers,
                               uint64_t seed,
                               uint64_t counter,
                               uint8_t *out,
                               size_t cap,
                               size_t *written);
    /* DGC's memory (allreduce_codec.c, rumor_ef_dgc), in float as
     * errfb.c: u_new = mu u + scale g (each product rounded, then the
     * sum), v = e + u_new; v may be g (element by element) */
    rumor_err (*dgc_step)(float *u_new,
                          float *v,
                          const float *e,
                          const float *u,
                          const float *g,
                          float mu,
                          float scale,
                          size_t n);
    /* u[idx[j]] = 0 for j < k: idx (host memory, ascending, each below u's
     * length) goes down first on a device */
    rumor_err (*zero_at)(float *u, const uint32_t *idx, size_t k);
    /* encode's rumor_codec_encode_k: a dgc codec keeping k of n (DGC's
     * warm-up) */
    rumor_err (*encode_k)(const rumor_codec *codec,
                          const float *x,
                          size_t n,
                          size_t k,
                          uint64_t seed,
                          uint64_t counter,
                          uint8_t *out,
                          size_t cap,
                          size_t *written);
};

/* The chunk of a device's crc32c: one thread's bytes. */
#define GOSSIP_CRC_CHUNK 4096u

/* The plain-C twins of the CUDA kernels (gossip/ref.c), one loop over the
 * kernels' threads each: the host backend's operations. */
void gossip_ref_diff(double *d, const float *a, const float *b, size_t n);
void gossip_ref_diff_sq(double *d,
                        const float *a,
                        const float *b,
                        size_t n,
                        double *sq);
void gossip_ref_sub(double *d, const double *a, const double *b, size_t n);
void gossip_ref_axpy(double *acc, double c, const double *d, size_t n);
/* gossip_ref_axpy over the doubles of y: acc += (double)y * c (host
 * memory; PowerGossip's factored terms, term_add). */
void gossip_ref_axpy_f(double *acc, double c, const float *y, size_t n);
void gossip_ref_apply(float *out,
                      const float *base,
                      double gamma,
                      const double *acc,
                      size_t n);
double gossip_ref_norm(const double *d, size_t n);
void
gossip_ref_sub_round(float *out, const float *x, const double *xhat, size_t n);
void gossip_ref_accum(double *acc, double c, const float *x, size_t n);
void gossip_ref_add(float *out, const float *a, const float *b, size_t n);
void gossip_ref_add_scaled(float *out,
                           const float *a,
                           float c,
                           const float *b,
                           size_t n);
void gossip_ref_div_round(float *out, const double *acc, double c, size_t n);
/* The crc32c of bytes bytes from the crc32c of each GOSSIP_CRC_CHUNK
 * (the last one shorter), in order: CRC's linearity (zlib's
 * crc32_combine), one matrix for the common chunk length. */
uint32_t gossip_ref_crc32c_join(const uint32_t *part, size_t bytes);
/* The twin of the device's crc32c: per chunk, then joined. */
uint32_t gossip_ref_crc32c(const void *p, size_t bytes);
void gossip_ref_moniqua_levels(uint8_t *levels,
                               float *xhat,
                               const float *x,
                               const float *noise,
                               double bound,
                               size_t n);
void gossip_ref_moniqua_term(double *d,
                             const uint8_t *levels,
                             const float *x,
                             const float *xhat,
                             double bound,
                             size_t n);
void gossip_ref_outer(float *x,
                      float *anchor,
                      float *v,
                      const float *d,
                      float lr,
                      float mu,
                      size_t n);

/* *acc += sum ((double)a[e] + b[e])^2, in element order; b NULL:
 * sum (double)a[e] * a[e] */
void
gossip_ref_sumsq_add(const float *a, const float *b, size_t n, double *acc);
void gossip_ref_sgd(float *p,
                    const float *g,
                    float *b,
                    float lr,
                    float wd,
                    float mu,
                    bool nesterov,
                    size_t n);
void gossip_ref_dgc_step(float *u_new,
                         float *v,
                         const float *e,
                         const float *u,
                         const float *g,
                         float mu,
                         float scale,
                         size_t n);
void gossip_ref_zero_at(float *u, const uint32_t *idx, size_t k);
extern const struct gossip_backend_i gossip_backend_host;
extern const struct gossip_backend_i gossip_backend_ref;

/* How many allocations, copies and fills the reference device has made
 * from a thread with Rumor's own CUDA stream off (core/cuda_stream.h).
 * On a GPU such work would go on the legacy stream, unordered against
 * the peer's work on its own: a peer on the reference device must add
 * none (tests/integration/test_peer_ref.c); a node or a bare instance,
 * which stay on the legacy stream, count here. */
uint64_t gossip_ref_unordered(void);

/* The CUDA table; RUMOR_ENOTSUP with *why in CPU-only builds or without a
 * usable GPU. */
rumor_err gossip_backend_cuda(const struct gossip_backend_i **out,
                              const char **why);

/* A copy to the host in chunks through two staging buffers (issue #31:
 * chunk i + 1's DMA overlaps chunk i's copy out of its staging buffer).
 * Chunk i covers [i * GOSSIP_COPY_CHUNK, min(bytes, (i + 1) *
 * GOSSIP_COPY_CHUNK)) and goes through staging buffer i % 2; the chunks
 * are copied in order. Both backends copy by this plan, so the reference
 * device's tests see the order the CUDA backend uses. */
#define GOSSIP_COPY_CHUNK ((size_t)4 << 20)
struct gossip_copy_chunk {
    size_t offset;
    size_t bytes;
    unsigned buffer; /* 0 or 1 */
};
/* The number of chunks of a copy of bytes bytes (0 for 0). */
size_t gossip_copy_chunks(size_t bytes);
/* Chunk i (< gossip_copy_chunks(bytes)) of a copy of bytes bytes. */
struct gossip_copy_chunk gossip_copy_chunk_at(size_t bytes, size_t i);

#ifdef __cplusplus
}
#endif

#endif
