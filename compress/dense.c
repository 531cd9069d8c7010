/*
 * Dense float codecs: fp32 (lossless), fp16 (IEEE binary16) and bf16
 * (bfloat16), little-endian after the 12-byte header.
 *
 * Both narrow formats round to nearest even and saturate at their largest
 * finite value instead of producing Inf (a diff of 1e5 sent as fp16 arrives
 * as 65504, never as a poison value the receiver must reject). fp16 keeps
 * subnormals (F16C does, and the reference does the same), so values down
 * to 2^-24 survive. Both share one codec implementation over the kernels
 * of kernels.c (F16C for fp16, integer rounding for bf16) with a fused
 * NaN/Inf check, so encoding is one pass over x.
 *
 * Decoders reject payload values with an all-ones exponent (Inf/NaN) with
 * RUMOR_ENUMERIC before touching y (R8.4).
 */
#include "compress/compress_impl.h"

#include <stdlib.h>

#define S_CHUNK 4096

static void
s_size_fixed(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    size_t width = c->id == RUMOR_CODEC_FP32 ? 4 : 2;
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + width * n;
    *exact = true;
}

static void
s_header(const rumor_codec *c, size_t n, uint8_t *out)
{
    struct compress_header h =
        {(uint8_t)c->id, RUMOR_COMPRESS_VERSION, 0, 0, (uint32_t)n, 0};
    compress_header_write(out, &h);
}

/* Checks the header's parameter fields (all zero for these codecs) and the
 * exact length. */
static rumor_err
s_check_fixed(const uint8_t *in, size_t len, size_t n, size_t width)
{
    if (in[2] != 0 || in[3] != 0 || core_get_u32(in + 8) != 0)
        return RUMOR_EPROTO;
    if (len - RUMOR_COMPRESS_HEADER_BYTES != width * n)
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

/* --- fp32 ------------------------------------------------------------------
 */

static rumor_err
s_fp32_encode(const rumor_codec *c,
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
    size_t need = RUMOR_COMPRESS_HEADER_BYTES + 4 * n;
    if (cap < need)
        return RUMOR_ETOOBIG;
    s_header(c, n, out);
    uint8_t *p = out + RUMOR_COMPRESS_HEADER_BYTES;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n > 0)
        memcpy(p, x, 4 * n);
#else
    for (size_t i = 0; i < n; i++)
        compress_put_f32(p + 4 * i, x[i]);
#endif
    if (approx != NULL && n > 0)
        memcpy(approx, x, n * sizeof *x);
    *written = need;
    return RUMOR_OK;
}

static rumor_err
s_fp32_decode(const rumor_codec *c,
              const uint8_t *in,
              size_t len,
              bool add,
              float alpha,
              float *y,
              size_t n)
{
    (void)c;
    rumor_err rc = s_check_fixed(in, len, n, 4);
    if (rc != RUMOR_OK)
        return rc;
    const uint8_t *p = in + RUMOR_COMPRESS_HEADER_BYTES;
    float v[S_CHUNK];
    /* Adding: check everything before touching y. */
    for (size_t i = 0; add && i < n; i += S_CHUNK) {
        size_t m = n - i < S_CHUNK ? n - i : S_CHUNK;
        for (size_t j = 0; j < m; j++)
            v[j] = compress_get_f32(p + 4 * (i + j));
        if (!compress_all_finite(v, m))
            return RUMOR_ENUMERIC;
    }
    for (size_t i = 0; i < n; i += S_CHUNK) {
        size_t m = n - i < S_CHUNK ? n - i : S_CHUNK;
        float *dst = add ? v : y + i;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, p + 4 * i, 4 * m);
#else
        for (size_t j = 0; j < m; j++)
            dst[j] = compress_get_f32(p + 4 * (i + j));
#endif
        if (!add && !compress_all_finite(dst, m))
            return RUMOR_ENUMERIC;
        for (size_t j = 0; add && j < m; j++)
            y[i + j] += alpha * v[j];
    }
    return RUMOR_OK;
}

const struct compress_ops compress_fp32_ops = {s_size_fixed,
                                               s_fp32_encode,
                                               false,
                                               s_fp32_decode};

/* --- fp16 and bf16 ----------------------------------------------------------
 */

/* One implementation for both narrow formats: the kernels take the format
 * (compress_f32_to_half_bytes, compress_half_bytes_to_f32), with the
 * NaN/Inf check fused into the conversion pass. */
static rumor_err
s_half_encode(const rumor_codec *c,
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
    bool bf16 = c->id == RUMOR_CODEC_BF16;
    size_t need = RUMOR_COMPRESS_HEADER_BYTES + 2 * n;
    if (cap < need)
        return RUMOR_ETOOBIG;
    uint8_t *p = out + RUMOR_COMPRESS_HEADER_BYTES;
    if (!compress_f32_to_half_bytes(x, n, bf16, p))
        return RUMOR_ENUMERIC;
    if (approx != NULL) /* finite: checked on x */
        (void)compress_half_bytes_to_f32(p, n, bf16, approx);
    s_header(c, n, out);
    *written = need;
    return RUMOR_OK;
}

static rumor_err
s_half_decode(const rumor_codec *c,
              const uint8_t *in,
              size_t len,
              bool add,
              float alpha,
              float *y,
              size_t n)
{
    bool bf16 = c->id == RUMOR_CODEC_BF16;
    rumor_err rc = s_check_fixed(in, len, n, 2);
    if (rc != RUMOR_OK)
        return rc;
    const uint8_t *p = in + RUMOR_COMPRESS_HEADER_BYTES;
    /* Halves with an all-ones exponent (Inf, NaN) are rejected, checked
     * during the conversion. */
    if (!add)
        return compress_half_bytes_to_f32(p, n, bf16, y) ? RUMOR_OK
                                                         : RUMOR_ENUMERIC;
    float v[S_CHUNK];
    for (int pass = 0; pass < 2; pass++) { /* check all, then add */
        for (size_t i = 0; i < n; i += S_CHUNK) {
            size_t m = n - i < S_CHUNK ? n - i : S_CHUNK;
            if (!compress_half_bytes_to_f32(p + 2 * i, m, bf16, v))
                return RUMOR_ENUMERIC;
            for (size_t j = 0; pass == 1 && j < m; j++)
                y[i + j] += alpha * v[j];
        }
    }
    return RUMOR_OK;
}

const struct compress_ops compress_fp16_ops = {s_size_fixed,
                                               s_half_encode,
                                               true,
                                               s_half_decode};
const struct compress_ops compress_bf16_ops = {s_size_fixed,
                                               s_half_encode,
                                               true,
                                               s_half_decode};
