/*
 * The host tables of gossip/backend.h: plain host memory, and the
 * reference "device" whose memory is host memory reached only through the
 * table. Both compute with the kernels' twins (gossip/ref.c).
 */
#include "gossip/backend.h"

#include "core/cuda_stream.h"

#include <stdlib.h>
#include <string.h>

static rumor_err
s_alloc(size_t bytes, void **out)
{
    /* one byte more: an empty model still gets a real pointer */
    *out = calloc(1, bytes + 1);
    return *out == NULL ? RUMOR_ENOMEM : RUMOR_OK;
}

static void
s_release(void *p)
{
    free(p);
}

static rumor_err
s_copy(void *dst, const void *src, size_t bytes, enum gossip_copy kind)
{
    if (kind == GOSSIP_ON_DEVICE) {
        if (bytes > 0)
            memmove(dst, src, bytes);
        return RUMOR_OK;
    }
    /* Across the "bus" chunk by chunk in the CUDA backend's order. */
    for (size_t i = 0; i < gossip_copy_chunks(bytes); i++) {
        struct gossip_copy_chunk c = gossip_copy_chunk_at(bytes, i);
        memmove((uint8_t *)dst + c.offset,
                (const uint8_t *)src + c.offset,
                c.bytes);
    }
    return RUMOR_OK;
}

static rumor_err
s_zero(void *p, size_t bytes)
{
    memset(p, 0, bytes);
    return RUMOR_OK;
}

static rumor_err
s_diff(double *d, const float *a, const float *b, size_t n)
{
    gossip_ref_diff(d, a, b, n);
    return RUMOR_OK;
}

static rumor_err
s_sub(double *d, const double *a, const double *b, size_t n)
{
    gossip_ref_sub(d, a, b, n);
    return RUMOR_OK;
}

static rumor_err
s_axpy(double *acc, double c, const double *d, size_t n)
{
    gossip_ref_axpy(acc, c, d, n);
    return RUMOR_OK;
}

static rumor_err
s_apply(float *out,
        const float *base,
        double gamma,
        const double *acc,
        size_t n)
{
    gossip_ref_apply(out, base, gamma, acc, n);
    return RUMOR_OK;
}

static rumor_err
s_diff_sq(double *d, const float *a, const float *b, size_t n, double *sq)
{
    gossip_ref_diff_sq(d, a, b, n, sq);
    return RUMOR_OK;
}

static rumor_err
s_norm(const double *d, size_t n, double *norm)
{
    *norm = gossip_ref_norm(d, n);
    return RUMOR_OK;
}

static rumor_err
s_sub_round(float *out, const float *x, const double *xhat, size_t n)
{
    gossip_ref_sub_round(out, x, xhat, n);
    return RUMOR_OK;
}

static rumor_err
s_accum(double *acc, double c, const float *x, size_t n)
{
    gossip_ref_accum(acc, c, x, n);
    return RUMOR_OK;
}

static rumor_err
s_add(float *out, const float *a, const float *b, size_t n)
{
    gossip_ref_add(out, a, b, n);
    return RUMOR_OK;
}

static rumor_err
s_encode(const rumor_codec *codec,
         const float *x,
         size_t n,
         uint64_t seed,
         uint64_t counter,
         uint8_t *out,
         size_t cap,
         size_t *written)
{
    return rumor_codec_encode(codec,
                              x,
                              n,
                              seed,
                              counter,
                              out,
                              cap,
                              written,
                              NULL);
}

static rumor_err
s_decode(const rumor_codec *codec,
         const uint8_t *in,
         size_t len,
         float *y,
         size_t n)
{
    return rumor_codec_decode(codec, in, len, y, n);
}

static rumor_err
s_add_scaled(float *out, const float *a, float c, const float *b, size_t n)
{
    gossip_ref_add_scaled(out, a, c, b, n);
    return RUMOR_OK;
}

static rumor_err
s_div_round(float *out, const double *acc, double c, size_t n)
{
    gossip_ref_div_round(out, acc, c, n);
    return RUMOR_OK;
}

static rumor_err
s_outer(float *x,
        float *anchor,
        float *v,
        const float *d,
        float lr,
        float mu,
        size_t n)
{
    gossip_ref_outer(x, anchor, v, d, lr, mu, n);
    return RUMOR_OK;
}

static rumor_err
s_decode_add(const rumor_codec *codec,
             const uint8_t *in,
             size_t len,
             float alpha,
             float *y,
             size_t n)
{
    return rumor_codec_decode_add(codec, in, len, alpha, y, n);
}

static rumor_err
s_crc32c(const void *p, size_t bytes, uint32_t *crc)
{
    *crc = rumor_crc32c(0, p, bytes);
    return RUMOR_OK;
}

/* The device's way: per chunk, then joined. */
static rumor_err
s_crc32c_chunked(const void *p, size_t bytes, uint32_t *crc)
{
    *crc = gossip_ref_crc32c(p, bytes);
    return RUMOR_OK;
}

static rumor_err
s_uniform(float *out, uint64_t seed, uint64_t stream, uint64_t index, size_t n)
{
    rumor_rng_fill_uniform(seed, stream, index, out, n);
    return RUMOR_OK;
}

static rumor_err
s_moniqua_levels(uint8_t *levels,
                 float *xhat,
                 const float *x,
                 const float *noise,
                 double bound,
                 size_t n)
{
    gossip_ref_moniqua_levels(levels, xhat, x, noise, bound, n);
    return RUMOR_OK;
}

static rumor_err
s_moniqua_term(double *d,
               const uint8_t *levels,
               const float *x,
               const float *xhat,
               double bound,
               size_t n)
{
    gossip_ref_moniqua_term(d, levels, x, xhat, bound, n);
    return RUMOR_OK;
}

static rumor_err
s_stats(const float *x, size_t n, struct rumor_layer_stats *out)
{
    rumor_layer_stats_compute(x, n, out);
    return RUMOR_OK;
}

static rumor_err
s_rel_error(const float *x,
            const float *approx,
            size_t n,
            double *err,
            double *support)
{
    *err = rumor_layer_rel_error(x, approx, n, support);
    return RUMOR_OK;
}

static rumor_err
s_sumsq_add(const float *a, const float *b, size_t n, double *acc)
{
    gossip_ref_sumsq_add(a, b, n, acc);
    return RUMOR_OK;
}

static rumor_err
s_sgd(float *p,
      const float *g,
      float *b,
      float lr,
      float wd,
      float mu,
      bool nesterov,
      size_t n)
{
    gossip_ref_sgd(p, g, b, lr, wd, mu, nesterov, n);
    return RUMOR_OK;
}

static rumor_err
s_scalers(const rumor_codec *codec, const float *x, size_t n, float *out)
{
    return rumor_codec_scalers(codec, x, n, out);
}

static rumor_err
s_encode_shared(const rumor_codec *codec,
                const float *x,
                size_t n,
                const float *scalers,
                uint64_t seed,
                uint64_t counter,
                uint8_t *out,
                size_t cap,
                size_t *written)
{
    return rumor_codec_encode_shared(codec,
                                     x,
                                     n,
                                     scalers,
                                     seed,
                                     counter,
                                     out,
                                     cap,
                                     written,
                                     NULL);
}

static rumor_err
s_dgc_step(float *u_new,
           float *v,
           const float *e,
           const float *u,
           const float *g,
           float mu,
           float scale,
           size_t n)
{
    gossip_ref_dgc_step(u_new, v, e, u, g, mu, scale, n);
    return RUMOR_OK;
}

static rumor_err
s_zero_at(float *u, const uint32_t *idx, size_t k)
{
    gossip_ref_zero_at(u, idx, k);
    return RUMOR_OK;
}

static rumor_err
s_encode_k(const rumor_codec *codec,
           const float *x,
           size_t n,
           size_t k,
           uint64_t seed,
           uint64_t counter,
           uint8_t *out,
           size_t cap,
           size_t *written)
{
    return rumor_codec_encode_k(codec,
                                x,
                                n,
                                k,
                                seed,
                                counter,
                                out,
                                cap,
                                written);
}

#define S_HOST_OPS                                                          \
    .release = s_release, .diff = s_diff, .sub = s_sub, .axpy = s_axpy,     \
    .apply = s_apply, .norm = s_norm, .sub_round = s_sub_round,             \
    .accum = s_accum, .add = s_add, .encode = s_encode, .decode = s_decode, \
    .add_scaled = s_add_scaled, .div_round = s_div_round, .outer = s_outer, \
    .decode_add = s_decode_add, .uniform = s_uniform,                       \
    .moniqua_levels = s_moniqua_levels, .moniqua_term = s_moniqua_term,     \
    .stats = s_stats, .rel_error = s_rel_error, .sumsq_add = s_sumsq_add,   \
    .sgd = s_sgd, .scalers = s_scalers, .encode_shared = s_encode_shared,   \
    .dgc_step = s_dgc_step, .zero_at = s_zero_at, .encode_k = s_encode_k

const struct gossip_backend_i gossip_backend_host = {
    .name = "host",
    .host_memory = true,
    S_HOST_OPS,
    .diff_sq = s_diff_sq, /* the devices' path (ref's too): diff, norm */
    .alloc = s_alloc,
    .copy = s_copy,
    .zero = s_zero,
    .crc32c = s_crc32c,
};

/* The reference device's allocations, copies and fills made by a thread
 * with Rumor's own stream off (core/cuda_stream.h). */
static uint64_t s_ref_unordered;

static void
s_ref_access(void)
{
    if (!core_cuda_own_stream_on())
        __atomic_fetch_add(&s_ref_unordered, 1, __ATOMIC_RELAXED);
}

uint64_t
gossip_ref_unordered(void)
{
    return __atomic_load_n(&s_ref_unordered, __ATOMIC_RELAXED);
}

static rumor_err
s_ref_alloc(size_t bytes, void **out)
{
    s_ref_access();
    return s_alloc(bytes, out);
}

static rumor_err
s_ref_copy(void *dst, const void *src, size_t bytes, enum gossip_copy kind)
{
    s_ref_access();
    return s_copy(dst, src, bytes, kind);
}

static rumor_err
s_ref_zero(void *p, size_t bytes)
{
    s_ref_access();
    return s_zero(p, bytes);
}

const struct gossip_backend_i gossip_backend_ref = {
    .name = "ref",
    .host_memory = false,
    S_HOST_OPS,
    .alloc = s_ref_alloc,
    .copy = s_ref_copy,
    .zero = s_ref_zero,
    .crc32c = s_crc32c_chunked,
};
