// The device codecs' kernels (compress/device.h): the host assembly in
// compress/device.c calls them through the table at the end. Each kernel
// does per thread what its twin in compress/ref.c does per loop step, in
// the same arithmetic: products and sums are written __fmul_rn /
// __fadd_rn so nvcc never contracts them into an FMA the CPU does not do,
// the scaled sign's double sums keep quant.c's order (eight lanes per
// chunk, one thread per chunk, the chunks in order per bucket), QSGD's
// sum of squares keeps compress_sumsq_ref's (64 FMA lanes, halving fold),
// the rounding draws are the CPU's bytes by element index, and the
// conversions are the integer rounding of ref.c. So a payload equals the
// CPU codec's byte for byte, and decode-add the CPU's float for float.
// Memory is stream-ordered (cudaMallocAsync / cudaFreeAsync); nothing
// synchronizes the device, only the caller's stream.
// Errors: CUDA_TRY sets rc and jumps to the label written at the call
// site (R4.6). Only extern "C" entry points leave this file (R1.1).
// Limit: tests/unit/test_codec_device.c compares these kernels with their
// twins and the CPU codecs; it has not yet run on a GPU.
extern "C" {
#include "compress/compress_impl.h"
#include "compress/device.h"
}

#include "core/cuda_check.h"
#include "core/philox.h"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <stdint.h>

#define CUDA_TRY(call, label) CORE_CUDA_TRY("compress cuda", call, label)

#define THREADS    256
#define MAX_BLOCKS 4096

#define GRID_STRIDE(i, n)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

static cudaStream_t
s_stream(void *stream)
{
    return (cudaStream_t)stream;
}

static unsigned
s_blocks(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

// --- memory ---------------------------------------------------------------

static rumor_err
s_alloc(size_t bytes, void **p, void *stream)
{
    rumor_err rc = RUMOR_OK;
    *p = NULL;
    CUDA_TRY(cudaMallocAsync(p, bytes ? bytes : 1, s_stream(stream)), fail);
    return RUMOR_OK;
fail:
    *p = NULL;
    return rc;
}

static void
s_release(void *p, void *stream)
{
    (void)cudaFreeAsync(p, s_stream(stream));
}

static rumor_err
s_upload(void *dst, const void *src, size_t bytes, void *stream)
{
    rumor_err rc = RUMOR_OK;
    if (bytes > 0)
        CUDA_TRY(cudaMemcpyAsync(dst,
                                 src,
                                 bytes,
                                 cudaMemcpyHostToDevice,
                                 s_stream(stream)),
                 fail);
fail:
    return rc;
}

static rumor_err
s_download(void *dst, const void *src, size_t bytes, void *stream)
{
    rumor_err rc = RUMOR_OK;
    if (bytes > 0)
        CUDA_TRY(cudaMemcpyAsync(dst,
                                 src,
                                 bytes,
                                 cudaMemcpyDeviceToHost,
                                 s_stream(stream)),
                 fail);
fail:
    return rc;
}

static void
s_zero(void *p, size_t bytes, void *stream)
{
    (void)cudaMemsetAsync(p, 0, bytes, s_stream(stream));
}

static rumor_err
s_finish(void *stream)
{
    rumor_err rc = RUMOR_OK;
    CUDA_TRY(cudaStreamSynchronize(s_stream(stream)), fail);
    CUDA_TRY(cudaGetLastError(), fail);
fail:
    return rc;
}

// --- element arithmetic (ref.c's, on the device) ----------------------------

__device__ static bool
d_nonfinite(uint32_t u)
{
    return (u & 0x7f800000u) == 0x7f800000u;
}

__device__ static uint16_t
d_to_f16(float x)
{
    uint32_t u = __float_as_uint(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    float a = fminf(fabsf(x), 65504.0f);
    uint32_t ua = __float_as_uint(a), mag;
    if (ua >= 0x38800000u) { // a normal half
        ua += 0xfffu + ((ua >> 13) & 1u);
        mag = (ua >> 13) - (112u << 10);
    } else { // subnormal: m 2^-24, the product exact
        mag = (uint32_t)rintf(__fmul_rn(a, 16777216.0f));
    }
    return (uint16_t)(sign | mag);
}

__device__ static uint16_t
d_to_bf16(uint32_t u)
{
    uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
    if ((r & 0x7f800000u) == 0x7f800000u) // rounded up to Inf: saturate
        r = (u & 0x80000000u) | 0x7f7f0000u;
    return (uint16_t)(r >> 16);
}

__device__ static uint32_t
d_f16_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0)
        return sign | __float_as_uint(__fmul_rn((float)m, 0x1.0p-24f));
    if (e == 31)
        return sign | 0x7f800000u | m << 13;
    return sign | (e + 112u) << 23 | m << 13;
}

__device__ static uint32_t
d_dense_get(const uint8_t *body, size_t i, enum compress_dev_fmt fmt)
{
    if (fmt == COMPRESS_DEV_FP32)
        return (uint32_t)body[4 * i] | (uint32_t)body[4 * i + 1] << 8 |
               (uint32_t)body[4 * i + 2] << 16 |
               (uint32_t)body[4 * i + 3] << 24;
    uint16_t h = (uint16_t)(body[2 * i] | body[2 * i + 1] << 8);
    return fmt == COMPRESS_DEV_BF16 ? (uint32_t)h << 16 : d_f16_bits(h);
}

__device__ static float
d_axpy(float y, float alpha, float v)
{
    return __fadd_rn(y, __fmul_rn(alpha, v));
}

// --- dense ------------------------------------------------------------------

__global__ static void
k_finite(const float *x, size_t n, uint32_t *flag)
{
    GRID_STRIDE(i, n)
    {
        if (d_nonfinite(__float_as_uint(x[i])))
            atomicOr(flag, 1u);
    }
}

__global__ static void
k_dense_encode(const float *x,
               size_t n,
               enum compress_dev_fmt fmt,
               uint8_t *body,
               uint32_t *flag)
{
    GRID_STRIDE(i, n)
    {
        uint32_t u = __float_as_uint(x[i]);
        if (d_nonfinite(u))
            atomicOr(flag, 1u);
        if (fmt == COMPRESS_DEV_FP32) {
            for (int b = 0; b < 4; b++)
                body[4 * i + b] = (uint8_t)(u >> (8 * b));
            continue;
        }
        uint16_t h = fmt == COMPRESS_DEV_FP16 ? d_to_f16(x[i]) : d_to_bf16(u);
        body[2 * i] = (uint8_t)h;
        body[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

__global__ static void
k_dense_check(const uint8_t *body,
              size_t n,
              enum compress_dev_fmt fmt,
              uint32_t *flag)
{
    GRID_STRIDE(i, n)
    {
        if (d_nonfinite(d_dense_get(body, i, fmt)))
            atomicOr(flag, 1u);
    }
}

__global__ static void
k_dense_decode(const uint8_t *body,
               size_t n,
               enum compress_dev_fmt fmt,
               bool add,
               float alpha,
               float *y,
               const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(i, n)
    {
        float v = __uint_as_float(d_dense_get(body, i, fmt));
        y[i] = add ? d_axpy(y[i], alpha, v) : v;
    }
}

// --- scaled sign ------------------------------------------------------------

__device__ static void
d_chunk(size_t n, size_t bucket, size_t k, size_t c, size_t *at, size_t *m)
{
    size_t start = k * bucket, end = start + bucket < n ? start + bucket : n;
    *at = start + c * COMPRESS_DEV_SIGN_CHUNK;
    size_t left = *at < end ? end - *at : 0;
    *m = left < COMPRESS_DEV_SIGN_CHUNK ? left : COMPRESS_DEV_SIGN_CHUNK;
}

__global__ static void
k_sign_sums(const float *x, size_t n, size_t bucket, size_t per, double *part)
{
    size_t nb = (n + bucket - 1) / bucket;
    GRID_STRIDE(t, nb * per)
    {
        size_t at = 0, m = 0;
        d_chunk(n, bucket, t / per, t % per, &at, &m);
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
        size_t whole = m & ~(size_t)7;
        for (size_t i = 0; i < whole; i++)
            lane[i % 8] = __dadd_rn(lane[i % 8], fabs((double)x[at + i]));
        for (size_t i = whole; at % 8 != 0 && i < m; i++)
            tail = __dadd_rn(tail, fabs((double)x[at + i]));
        part[t] = __dadd_rn(
            __dadd_rn(__dadd_rn(lane[0], lane[4]), __dadd_rn(lane[1], lane[5])),
            __dadd_rn(__dadd_rn(lane[2], lane[6]),
                      __dadd_rn(lane[3], lane[7])));
        part[t] = __dadd_rn(part[t], tail);
    }
}

__global__ static void
k_sign_scales(const float *x,
              size_t n,
              size_t bucket,
              size_t per,
              const double *part,
              uint8_t *scales,
              uint32_t *flag)
{
    GRID_STRIDE(k, (n + bucket - 1) / bucket)
    {
        double sum = 0;
        size_t start = k * bucket, m = n - start < bucket ? n - start : bucket;
        for (size_t c = 0; c < per; c++) {
            size_t at = 0, mm = 0;
            d_chunk(n, bucket, k, c, &at, &mm);
            sum = __dadd_rn(sum, part[k * per + c]);
            for (size_t i = mm & ~(size_t)7; at % 8 == 0 && i < mm; i++)
                sum = __dadd_rn(sum, fabs((double)x[at + i]));
        }
        if (!isfinite(sum))
            atomicOr(flag, 1u);
        uint32_t s =
            __float_as_uint(__double2float_rn(__ddiv_rn(sum, (double)m)));
        for (int b = 0; b < 4; b++)
            scales[4 * k + b] = (uint8_t)(s >> (8 * b));
    }
}

__global__ static void
k_sign_bits(const float *x, size_t n, uint8_t *bits)
{
    GRID_STRIDE(j, (n + 7) / 8)
    {
        uint32_t byte = 0;
        for (size_t i = 8 * j; i < 8 * j + 8 && i < n; i++)
            byte |= (__float_as_uint(x[i]) >> 31) << (i % 8);
        bits[j] = (uint8_t)byte;
    }
}

__global__ static void
k_sign_decode(const uint8_t *scales,
              const uint8_t *bits,
              size_t n,
              size_t bucket,
              bool add,
              float alpha,
              float *y,
              const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(i, n)
    {
        const uint8_t *p = scales + 4 * (i / bucket);
        float s = __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                  (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        float q = (bits[i / 8] >> (i % 8)) & 1u ? -s : s;
        y[i] = add ? d_axpy(y[i], alpha, q) : q;
    }
}

// --- random-k ---------------------------------------------------------------

__device__ static size_t
d_randk_index(size_t n,
              size_t k,
              size_t j,
              uint64_t seed,
              uint64_t counter,
              size_t *size)
{
    uint64_t lo = (uint64_t)j * n / k, hi = (uint64_t)(j + 1) * n / k;
    uint32_t w[4];
    philox_block_device(j / 2, counter, seed, w);
    uint64_t r = w[2 * (j % 2)] | (uint64_t)w[2 * (j % 2) + 1] << 32;
    *size = (size_t)(hi - lo);
    return (size_t)(lo + __umul64hi(r, hi - lo));
}

__global__ static void
k_randk_gather(const float *x,
               size_t n,
               size_t k,
               uint64_t seed,
               uint64_t counter,
               bool scale,
               float *vals)
{
    GRID_STRIDE(j, k)
    {
        size_t size = 0;
        size_t i = d_randk_index(n, k, j, seed, counter, &size);
        vals[j] = scale ? __fmul_rn(x[i], (float)size) : x[i];
    }
}

__global__ static void
k_randk_scatter(const float *vals,
                size_t n,
                size_t k,
                uint64_t seed,
                uint64_t counter,
                float alpha,
                float *y,
                const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(j, k)
    {
        size_t size = 0;
        size_t i = d_randk_index(n, k, j, seed, counter, &size);
        y[i] = d_axpy(y[i], alpha, vals[j]);
    }
}

// --- QSGD and TernGrad -------------------------------------------------------

// compress_sumsq_ref: 64 float lanes by FMA over whole groups of 64,
// folded by halving, the tail in order; out of float's good range, the
// double sum of compress_sumsq_wide (each product exact in double).
__device__ static double
d_sumsq(const float *x, size_t n)
{
    float lane[64], tail = 0;
    for (int j = 0; j < 64; j++)
        lane[j] = 0;
    size_t whole = n & ~(size_t)63;
    for (size_t i = 0; i < whole; i++)
        lane[i % 64] = fmaf(x[i], x[i], lane[i % 64]);
    for (size_t i = whole; i < n; i++)
        tail = fmaf(x[i], x[i], tail);
    for (int w = 32; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            lane[j] = __fadd_rn(lane[j], lane[j + w]);
    float sum = __fadd_rn(lane[0], tail);
    if (sum >= 0x1.0p-100f && sum <= 0x1.fffffep127f)
        return (double)sum;
    double wide[32], wtail = 0;
    for (int j = 0; j < 32; j++)
        wide[j] = 0;
    size_t whole32 = n & ~(size_t)31;
    for (size_t i = 0; i < whole32; i++)
        wide[i % 32] =
            __dadd_rn(wide[i % 32], __dmul_rn((double)x[i], (double)x[i]));
    for (size_t i = whole32; i < n; i++)
        wtail = __dadd_rn(wtail, __dmul_rn((double)x[i], (double)x[i]));
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            wide[j] = __dadd_rn(wide[j], wide[j + w]);
    return __dadd_rn(wide[0], wtail);
}

__global__ static void
k_quant_scales(const float *x,
               struct compress_dev_quant q,
               uint8_t *scales,
               float *inv,
               uint32_t *flag)
{
    GRID_STRIDE(k, (q.n + q.bucket - 1) / q.bucket)
    {
        size_t start = k * q.bucket;
        size_t m = q.n - start < q.bucket ? q.n - start : q.bucket;
        uint32_t top = 0;
        for (size_t i = 0; q.tern && i < m; i++) {
            uint32_t key = __float_as_uint(x[start + i]) & 0x7fffffffu;
            top = key > top ? key : top;
        }
        double acc = q.tern ? (double)__uint_as_float(top)
                            : __dsqrt_rn(d_sumsq(x + start, m));
        float norm = 0, iv = 0;
        if (!isfinite(acc)) {
            atomicOr(flag, COMPRESS_DEV_NUMERIC);
        } else {
            norm = acc > FLT_MAX ? FLT_MAX : __double2float_rn(acc);
            iv = norm >= COMPRESS_NORM_MIN ? __fdiv_rn((float)q.s, norm) : 0;
        }
        uint32_t u = __float_as_uint(norm);
        for (int b = 0; b < 4; b++)
            scales[4 * k + b] = (uint8_t)(u >> (8 * b));
        inv[k] = iv;
    }
}

// Byte j of the stochastic-rounding stream (compress_impl.h's layout).
__device__ static uint32_t
d_stream_byte(uint64_t seed, uint64_t stream, uint64_t j)
{
    uint64_t o = j % 256, block = 16 * (j / 256) + (o / 4) % 16;
    uint32_t w[4];
    philox_block_device(block, stream, seed, w);
    return (w[o / 64] >> (8 * (o % 4))) & 0xffu;
}

__device__ static float
d_get_f32(const uint8_t *p)
{
    return __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                           (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

// Element i's code: quant.c's float level (one FMA, as its kernels), or
// qsgd_levels.c's double one from the bucket's norm.
__device__ static uint32_t
d_quant_code(float v,
             size_t i,
             const struct compress_dev_quant &q,
             const uint8_t *scales,
             const float *inv,
             uint32_t r)
{
    uint32_t l;
    if (q.levels) {
        float norm = d_get_f32(scales + 4 * (i / q.bucket));
        double di = norm >= COMPRESS_NORM_MIN
                        ? __ddiv_rn((double)q.s, (double)norm)
                        : 0;
        double a = __dadd_rn(__dmul_rn(fabs((double)v), di),
                             __dmul_rn(__dadd_rn((double)r, 0.5), 0x1.0p-16));
        l = a >= (double)q.s ? q.s : (uint32_t)a;
    } else {
        float a = fmaf(fabsf(v),
                       inv[i / q.bucket],
                       __fmul_rn(__fadd_rn((float)r, 0.5f), 0x1.0p-16f));
        l = (uint32_t)a;
        l = l > q.s ? q.s : l;
    }
    return l | (uint32_t)(l > 0 && signbit(v)) << q.b;
}

__global__ static void
k_quant_codes(const float *x,
              struct compress_dev_quant q,
              const uint8_t *scales,
              const float *inv,
              uint64_t seed,
              uint64_t counter,
              uint8_t *codes)
{
    unsigned w = q.b + 1;
    size_t bytes = (q.n * w + 7) / 8;
    GRID_STRIDE(g, (q.n + 7) / 8)
    {
        uint8_t buf[26] = {0}; // b + 1 <= 26 bytes: s < 2^25
        for (size_t t = 0; t < 8 && 8 * g + t < q.n; t++) {
            size_t i = 8 * g + t;
            uint32_t r =
                d_stream_byte(seed, counter, i) << 8 |
                d_stream_byte(seed, counter, COMPRESS_DRAW_LOW + i / 16);
            uint32_t code = d_quant_code(x[i], i, q, scales, inv, r);
            for (unsigned j = 0; j < w; j++)
                buf[(t * w + j) / 8] |=
                    (uint8_t)(((code >> j) & 1u) << ((t * w + j) % 8));
        }
        for (unsigned j = 0; j < w && g * w + j < bytes; j++)
            codes[g * w + j] = buf[j];
    }
}

// Code i of (n w + 7) / 8 bytes: w <= 26, so within five bytes.
__device__ static uint32_t
d_code(const uint8_t *codes, size_t n, unsigned w, size_t i)
{
    size_t bit = i * w, at = bit / 8, bytes = (n * w + 7) / 8;
    uint64_t v = 0;
    for (unsigned j = 0; j < 5 && at + j < bytes; j++)
        v |= (uint64_t)codes[at + j] << (8 * j);
    return (uint32_t)(v >> (bit % 8)) & ((1u << w) - 1);
}

__global__ static void
k_quant_check(const uint8_t *codes, struct compress_dev_quant q, uint32_t *flag)
{
    GRID_STRIDE(i, q.n)
    {
        uint32_t code = d_code(codes, q.n, q.b + 1, i);
        uint32_t l = code & ((1u << q.b) - 1);
        if (l > q.s || (l == 0 && code >> q.b))
            atomicOr(flag, COMPRESS_DEV_PROTO);
    }
}

__global__ static void
k_quant_decode(const uint8_t *scales,
               const uint8_t *codes,
               struct compress_dev_quant q,
               bool add,
               float alpha,
               float *y,
               const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(i, q.n)
    {
        uint32_t code = d_code(codes, q.n, q.b + 1, i);
        float norm = d_get_f32(scales + 4 * (i / q.bucket));
        float v = __fmul_rn((float)(code & ((1u << q.b) - 1)),
                            __fdiv_rn(norm, (float)q.s));
        v = code >> q.b ? -v : v;
        y[i] = add ? d_axpy(y[i], alpha, v) : v;
    }
}

// --- sparse selection (top-k, threshold) -----------------------------------

#define SEL COMPRESS_DEV_SEL_BLOCK

__device__ static uint32_t
d_key(const float *x, size_t i)
{
    return __float_as_uint(x[i]) & 0x7fffffffu;
}

// One pass of the radix select: the digit at sh of the keys whose digits
// above it are the prefix found so far (sel->eq). Counted in the block's
// shared bins first, so the global atomics are 256 a block, not one a key.
__global__ static void
k_select_hist(const float *x,
              size_t n,
              unsigned sh,
              struct compress_dev_sel *sel)
{
    __shared__ uint32_t bins[256];
    for (unsigned t = threadIdx.x; t < 256; t += blockDim.x)
        bins[t] = 0;
    __syncthreads();
    uint32_t prefix = sel->eq, high = sh == 24 ? 0 : ~0u << (sh + 8);
    GRID_STRIDE(i, n)
    {
        uint32_t key = d_key(x, i);
        if (((key ^ prefix) & high) == 0)
            atomicAdd(&bins[(key >> sh) & 0xffu], 1u);
    }
    __syncthreads();
    for (unsigned t = threadIdx.x; t < 256; t += blockDim.x)
        if (bins[t] != 0)
            atomicAdd(&sel->hist[t], bins[t]);
}

// One thread: the digit where the k-th largest key lies joins the prefix,
// the keys in higher bins the count above (sel->count), as ref.c's pick.
__global__ static void
k_select_pick(struct compress_dev_sel *sel, unsigned sh, size_t k)
{
    uint32_t above = sel->count;
    for (uint32_t bin = 255;; bin--) {
        if (above + sel->hist[bin] >= k || bin == 0) {
            sel->eq |= bin << sh;
            break;
        }
        above += sel->hist[bin];
    }
    sel->count = above;
    if (sh == 0) {
        sel->lo = sel->eq + 1;
        sel->ties = (uint32_t)k - above;
    }
}

__device__ static unsigned long long
d_sel_counts(const float *x, size_t i, const struct compress_dev_sel *sel)
{
    uint32_t key = d_key(x, i);
    return (unsigned long long)(key >= sel->lo) << 32 | (key == sel->eq);
}

// Block b's counts, one element a thread (the packed sum cannot carry:
// the low half counts at most n < 2^32).
__global__ static void
k_select_counts(const float *x,
                size_t n,
                const struct compress_dev_sel *sel,
                unsigned long long *counts)
{
    typedef cub::BlockReduce<unsigned long long, SEL> reduce;
    __shared__ typename reduce::TempStorage tmp;
    size_t i = (size_t)blockIdx.x * SEL + threadIdx.x;
    unsigned long long mine = i < n ? d_sel_counts(x, i, sel) : 0;
    unsigned long long sum = reduce(tmp).Sum(mine);
    if (threadIdx.x == 0)
        counts[blockIdx.x] = sum;
}

__global__ static void
k_select_total(const unsigned long long *total, struct compress_dev_sel *sel)
{
    uint32_t eq = (uint32_t)*total;
    sel->count = (uint32_t)(*total >> 32) + (eq < sel->ties ? eq : sel->ties);
}

__global__ static void
k_select_emit(const float *x,
              size_t n,
              const struct compress_dev_sel *sel,
              const unsigned long long *offs,
              uint32_t *idx,
              float *vals)
{
    typedef cub::BlockScan<unsigned long long, SEL> scan;
    __shared__ typename scan::TempStorage tmp;
    size_t i = (size_t)blockIdx.x * SEL + threadIdx.x;
    unsigned long long mine = i < n ? d_sel_counts(x, i, sel) : 0, before;
    scan(tmp).ExclusiveSum(mine, before);
    before += offs[blockIdx.x];
    uint32_t gt = (uint32_t)(before >> 32), eq = (uint32_t)before;
    uint32_t ties = sel->ties;
    if ((mine >> 32) != 0 || ((uint32_t)mine != 0 && eq < ties)) {
        size_t slot = gt + (eq < ties ? eq : ties);
        idx[slot] = (uint32_t)i;
        vals[slot] = x[i];
    }
}

__device__ static uint64_t
d_gap(const uint32_t *idx, size_t j)
{
    return j == 0 ? idx[0] : (uint64_t)(idx[j] - idx[j - 1] - 1);
}

__global__ static void
k_rice_lengths(const uint32_t *idx,
               size_t k,
               unsigned r,
               unsigned long long *len)
{
    GRID_STRIDE(j, k)
    {
        len[j] = (d_gap(idx, j) >> r) + 1 + r;
    }
}

// Code j after its q zeros: a one, then the gap's low r bits; at most 62
// bits from the word holding its first, so two word ORs.
__global__ static void
k_rice_bits(const uint32_t *idx,
            size_t k,
            unsigned r,
            const unsigned long long *offs,
            uint32_t *words)
{
    GRID_STRIDE(j, k)
    {
        uint64_t gap = d_gap(idx, j), at = offs[j] + (gap >> r);
        uint64_t v = ((gap & ((1ull << r) - 1)) << 1 | 1u) << (at % 32);
        atomicOr(&words[at / 32], (uint32_t)v);
        if (v >> 32 != 0)
            atomicOr(&words[at / 32 + 1], (uint32_t)(v >> 32));
    }
}

// --- natural compression ----------------------------------------------------

__global__ static void
k_natural_expo(const float *x,
               size_t n,
               uint64_t seed,
               uint64_t counter,
               uint8_t *expo,
               uint32_t *flag)
{
    GRID_STRIDE(i, n)
    {
        uint32_t u = __float_as_uint(x[i]);
        uint32_t e = (u >> 23) & 0xffu, mant = u & 0x7fffffu;
        if (e == 255)
            atomicOr(flag, COMPRESS_DEV_NUMERIC);
        uint32_t draw =
            d_stream_byte(seed, counter, i) << 8 |
            d_stream_byte(seed, counter, COMPRESS_DRAW_LOW + i / 16);
        uint32_t E = e + (((draw << 7) | 0x40u) < mant);
        expo[i] = (uint8_t)(E > 254 ? 254 : E);
    }
}

__global__ static void
k_natural_check(const uint8_t *expo, size_t n, uint32_t *flag)
{
    GRID_STRIDE(i, n)
    {
        if (expo[i] == 255)
            atomicOr(flag, COMPRESS_DEV_NUMERIC);
    }
}

__global__ static void
k_natural_decode(const uint8_t *expo,
                 const uint8_t *bits,
                 size_t n,
                 bool add,
                 float alpha,
                 float *y,
                 const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(i, n)
    {
        uint32_t sign = (uint32_t)((bits[i / 8] >> (i % 8)) & 1u) << 31;
        float q = __uint_as_float(sign | (uint32_t)expo[i] << 23);
        y[i] = add ? d_axpy(y[i], alpha, q) : q;
    }
}

// --- fp8 / fp4 ---------------------------------------------------------------

__global__ static void
k_maxabs(const float *x, size_t n, uint32_t *key)
{
    uint32_t best = 0;
    GRID_STRIDE(i, n)
    {
        uint32_t k = d_key(x, i);
        best = k > best ? k : best;
    }
    if (best != 0) // one atomic per thread, not per value
        atomicMax(key, best);
}

__global__ static void
k_sample(const float *x, size_t n, size_t m, float *sample)
{
    GRID_STRIDE(j, m)
    {
        sample[j] = x[(size_t)((uint64_t)j * n / m)];
    }
}

// fp8.c's s_symbol: the magnitude code of |v| s1 s2 (two products, in
// that order), rounded to nearest even, saturated; the sign above it.
__device__ static uint8_t
d_fp8_symbol(float v, float s1, float s2, unsigned M, unsigned E)
{
    float a = __fmul_rn(__fmul_rn(fabsf(v), s1), s2);
    uint32_t c, cmax = (1u << (E + M)) - 1;
    if (a < 2.0f) {
        c = (uint32_t)rintf(__fmul_rn(a, (float)(1u << (M - 1))));
    } else {
        uint32_t u = __float_as_uint(a);
        unsigned sh = 23 - M;
        u += ((1u << (sh - 1)) - 1) + ((u >> sh) & 1u);
        c = (u >> sh) - (127u << M);
    }
    c = c > cmax ? cmax : c;
    return (uint8_t)(c | (__float_as_uint(v) >> 31) << (E + M));
}

__global__ static void
k_fp8_symbols(const float *x,
              size_t n,
              float s1,
              float s2,
              unsigned M,
              unsigned E,
              uint8_t *sym)
{
    GRID_STRIDE(i, n)
    {
        sym[i] = d_fp8_symbol(x[i], s1, s2, M, E);
    }
}

__global__ static void
k_fp8_decode(const uint8_t *sym,
             const float *val,
             size_t n,
             float alpha,
             float *y,
             const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(i, n)
    {
        y[i] = d_axpy(y[i], alpha, val[sym[i]]);
    }
}

// bias=real's error on all of x: one thread per COMPRESS_FP8_SAMPLE piece,
// the CPU's order within it and no fused multiply-add, so each piece's sum
// is compress_fp8_error_ref's bits (a piece's reads are strided across
// threads: the CPU's order costs coalescing).
__global__ static void
k_fp8_error(const float *x,
            size_t n,
            float s1,
            float s2,
            unsigned M,
            unsigned E,
            const float *val,
            double *err)
{
    size_t pieces = (n + COMPRESS_FP8_SAMPLE - 1) / COMPRESS_FP8_SAMPLE;
    GRID_STRIDE(p, pieces)
    {
        size_t at = p * COMPRESS_FP8_SAMPLE;
        size_t end =
            n - at < COMPRESS_FP8_SAMPLE ? n : at + COMPRESS_FP8_SAMPLE;
        double sum = 0;
        for (size_t i = at; i < end; i++) {
            double d = __dsub_rn((double)x[i],
                                 (double)val[d_fp8_symbol(x[i], s1, s2, M, E)]);
            sum = __dadd_rn(sum, __dmul_rn(d, d));
        }
        err[p] = sum;
    }
}

__global__ static void
k_dgc_sample(const float *x, size_t n, size_t m, uint64_t seed, float *sample)
{
    GRID_STRIDE(j, m)
    {
        uint32_t w[4];
        philox_block_device(j / 4, 0, seed, w);
        size_t at = (size_t)(((uint64_t)w[j % 4] * n) >> 32);
        sample[j] = __uint_as_float(d_key(x, at));
    }
}

__global__ static void
k_idx_scatter(const float *vals,
              const uint32_t *idx,
              size_t k,
              float alpha,
              float *y,
              const uint32_t *flag)
{
    if (*flag != 0)
        return;
    GRID_STRIDE(j, k)
    {
        y[idx[j]] = d_axpy(y[idx[j]], alpha, vals[j]);
    }
}

// TernGrad's clip (quant.c s_clip_sum, s_clip_at): rounded operations
// only, so no contraction changes the CPU's sums.
__global__ static void
k_clip_parts(const float *x, size_t n, const double *mean, double *part)
{
    GRID_STRIDE(j, (n + COMPRESS_CLIP_PIECE - 1) / COMPRESS_CLIP_PIECE)
    {
        size_t at = j * COMPRESS_CLIP_PIECE;
        size_t m = n - at < COMPRESS_CLIP_PIECE ? n - at : COMPRESS_CLIP_PIECE;
        double sum = 0;
        for (size_t i = at; i < at + m; i++) {
            double d = (double)x[i];
            if (mean != NULL) {
                d = __dsub_rn(d, *mean);
                d = __dmul_rn(d, d);
            }
            sum = __dadd_rn(sum, d);
        }
        part[j] = sum;
    }
}

__global__ static void
k_clip_moment(const double *part,
              size_t n,
              double clip,
              double *mean,
              float *t,
              uint32_t *flag)
{
    GRID_STRIDE(one, 1) // one thread: the pieces in order
    {
        double sum = 0;
        size_t np = (n + COMPRESS_CLIP_PIECE - 1) / COMPRESS_CLIP_PIECE;
        for (size_t j = 0; j < np; j++)
            sum = __dadd_rn(sum, part[j]);
        if (t != NULL) {
            *t = __double2float_rn(
                __dmul_rn(clip, __dsqrt_rn(__ddiv_rn(sum, (double)n))));
        } else {
            if (!isfinite(sum))
                atomicOr(flag, COMPRESS_DEV_NUMERIC);
            *mean = __ddiv_rn(sum, (double)n);
        }
    }
}

__global__ static void
k_clip_apply(const float *x, size_t n, const float *t, float *v)
{
    GRID_STRIDE(i, n)
    {
        v[i] = fminf(fmaxf(x[i], -*t), *t);
    }
}

__global__ static void
k_quant_inv(const uint8_t *scales, struct compress_dev_quant q, float *inv)
{
    GRID_STRIDE(k, (q.n + q.bucket - 1) / q.bucket)
    {
        uint32_t u = 0;
        for (int b = 0; b < 4; b++)
            u |= (uint32_t)scales[4 * k + b] << (8 * b);
        float norm = __uint_as_float(u);
        inv[k] = norm >= COMPRESS_NORM_MIN ? __fdiv_rn((float)q.s, norm) : 0.0f;
    }
}

// --- launchers --------------------------------------------------------------

// Launches k with a thread per item of count (grid-stride past MAX_BLOCKS
// blocks) on the caller's stream; nothing for count 0.
template <typename... P, typename... A>
static void
s_launch(void (*k)(P...), size_t count, void *stream, A... a)
{
    if (count > 0)
        k<<<s_blocks(count), THREADS, 0, s_stream(stream)>>>(a...);
}

static void
s_finite(const float *x, size_t n, uint32_t *flag, void *stream)
{
    s_launch(k_finite, n, stream, x, n, flag);
}

static void
s_dense_encode(const float *x,
               size_t n,
               enum compress_dev_fmt fmt,
               uint8_t *body,
               uint32_t *flag,
               void *stream)
{
    s_launch(k_dense_encode, n, stream, x, n, fmt, body, flag);
}

static void
s_dense_check(const uint8_t *body,
              size_t n,
              enum compress_dev_fmt fmt,
              uint32_t *flag,
              void *stream)
{
    s_launch(k_dense_check, n, stream, body, n, fmt, flag);
}

static void
s_dense_decode(const uint8_t *body,
               size_t n,
               enum compress_dev_fmt fmt,
               bool add,
               float alpha,
               float *y,
               const uint32_t *flag,
               void *stream)
{
    s_launch(k_dense_decode, n, stream, body, n, fmt, add, alpha, y, flag);
}

static size_t
s_per(size_t bucket)
{
    return (bucket + COMPRESS_DEV_SIGN_CHUNK - 1) / COMPRESS_DEV_SIGN_CHUNK;
}

static void
s_sign_sums(const float *x, size_t n, size_t bucket, double *part, void *stream)
{
    size_t threads = (n + bucket - 1) / bucket * s_per(bucket);
    s_launch(k_sign_sums, threads, stream, x, n, bucket, s_per(bucket), part);
}

static void
s_sign_scales(const float *x,
              size_t n,
              size_t bucket,
              const double *part,
              uint8_t *scales,
              uint32_t *flag,
              void *stream)
{
    size_t nb = (n + bucket - 1) / bucket;
    s_launch(k_sign_scales,
             nb,
             stream,
             x,
             n,
             bucket,
             s_per(bucket),
             part,
             scales,
             flag);
}

static void
s_sign_bits(const float *x, size_t n, uint8_t *bits, void *stream)
{
    s_launch(k_sign_bits, (n + 7) / 8, stream, x, n, bits);
}

static void
s_sign_decode(const uint8_t *scales,
              const uint8_t *bits,
              size_t n,
              size_t bucket,
              bool add,
              float alpha,
              float *y,
              const uint32_t *flag,
              void *stream)
{
    s_launch(k_sign_decode,
             n,
             stream,
             scales,
             bits,
             n,
             bucket,
             add,
             alpha,
             y,
             flag);
}

static void
s_quant_scales(const float *x,
               const struct compress_dev_quant *q,
               uint8_t *scales,
               float *inv,
               uint32_t *flag,
               void *stream)
{
    size_t nb = (q->n + q->bucket - 1) / q->bucket;
    s_launch(k_quant_scales, nb, stream, x, *q, scales, inv, flag);
}

static void
s_quant_codes(const float *x,
              const struct compress_dev_quant *q,
              const uint8_t *scales,
              const float *inv,
              uint64_t seed,
              uint64_t counter,
              uint8_t *codes,
              void *stream)
{
    size_t groups = (q->n + 7) / 8;
    s_launch(k_quant_codes,
             groups,
             stream,
             x,
             *q,
             scales,
             inv,
             seed,
             counter,
             codes);
}

static void
s_quant_check(const uint8_t *codes,
              const struct compress_dev_quant *q,
              uint32_t *flag,
              void *stream)
{
    s_launch(k_quant_check, q->n, stream, codes, *q, flag);
}

static void
s_quant_decode(const uint8_t *scales,
               const uint8_t *codes,
               const struct compress_dev_quant *q,
               bool add,
               float alpha,
               float *y,
               const uint32_t *flag,
               void *stream)
{
    s_launch(k_quant_decode,
             q->n,
             stream,
             scales,
             codes,
             *q,
             add,
             alpha,
             y,
             flag);
}

static void
s_randk_gather(const float *x,
               size_t n,
               size_t k,
               uint64_t seed,
               uint64_t counter,
               bool scale,
               float *vals,
               void *stream)
{
    s_launch(k_randk_gather, k, stream, x, n, k, seed, counter, scale, vals);
}

static void
s_randk_scatter(const float *vals,
                size_t n,
                size_t k,
                uint64_t seed,
                uint64_t counter,
                float alpha,
                float *y,
                const uint32_t *flag,
                void *stream)
{
    s_launch(k_randk_scatter,
             k,
             stream,
             vals,
             n,
             k,
             seed,
             counter,
             alpha,
             y,
             flag);
}

static void
s_select_kth(const float *x,
             size_t n,
             size_t k,
             struct compress_dev_sel *sel,
             void *stream)
{
    cudaStream_t st = s_stream(stream);
    (void)cudaMemsetAsync(sel, 0, sizeof *sel, st);
    for (unsigned sh = 24;; sh -= 8) {
        (void)cudaMemsetAsync(sel->hist, 0, sizeof sel->hist, st);
        s_launch(k_select_hist, n, stream, x, n, sh, sel);
        k_select_pick<<<1, 1, 0, st>>>(sel, sh, k);
        if (sh == 0)
            break;
    }
}

// out[0..m] = the exclusive sums of in[0..m) and their total (in[m] must
// be 0). A failed allocation leaves the error for s_finish to report.
static void
s_exclusive_sum(unsigned long long *in,
                unsigned long long *out,
                size_t m,
                cudaStream_t st)
{
    void *tmp = NULL;
    size_t bytes = 0;
    if (cub::DeviceScan::ExclusiveSum(NULL, bytes, in, out, m + 1, st) !=
            cudaSuccess ||
        cudaMallocAsync(&tmp, bytes ? bytes : 1, st) != cudaSuccess)
        return;
    (void)cub::DeviceScan::ExclusiveSum(tmp, bytes, in, out, m + 1, st);
    (void)cudaFreeAsync(tmp, st);
}

static void
s_select_scan(const float *x,
              size_t n,
              struct compress_dev_sel *sel,
              uint64_t *offs,
              void *stream)
{
    cudaStream_t st = s_stream(stream);
    size_t nb = (n + SEL - 1) / SEL;
    unsigned long long *counts = NULL, *o = (unsigned long long *)offs;
    if (cudaMallocAsync((void **)&counts, (nb + 1) * sizeof *counts, st) !=
        cudaSuccess)
        return;
    (void)cudaMemsetAsync(counts + nb, 0, sizeof *counts, st);
    if (nb > 0)
        k_select_counts<<<(unsigned)nb, SEL, 0, st>>>(x, n, sel, counts);
    s_exclusive_sum(counts, o, nb, st);
    k_select_total<<<1, 1, 0, st>>>(o + nb, sel);
    (void)cudaFreeAsync(counts, st);
}

static void
s_select_emit(const float *x,
              size_t n,
              const struct compress_dev_sel *sel,
              const uint64_t *offs,
              uint32_t *idx,
              float *vals,
              void *stream)
{
    size_t nb = (n + SEL - 1) / SEL;
    if (nb > 0)
        k_select_emit<<<(unsigned)nb, SEL, 0, s_stream(stream)>>>(
            x,
            n,
            sel,
            (const unsigned long long *)offs,
            idx,
            vals);
}

static void
s_rice_write(const uint32_t *idx,
             size_t k,
             unsigned r,
             uint32_t *words,
             uint64_t *bits,
             void *stream)
{
    cudaStream_t st = s_stream(stream);
    unsigned long long *len = NULL, *offs = NULL;
    if (cudaMallocAsync((void **)&len, 2 * (k + 1) * sizeof *len, st) !=
        cudaSuccess)
        return;
    offs = len + k + 1;
    (void)cudaMemsetAsync(len + k, 0, sizeof *len, st);
    s_launch(k_rice_lengths, k, stream, idx, k, r, len);
    s_exclusive_sum(len, offs, k, st);
    s_launch(k_rice_bits,
             k,
             stream,
             idx,
             k,
             r,
             (const unsigned long long *)offs,
             words);
    (void)cudaMemcpyAsync(bits,
                          offs + k,
                          sizeof *bits,
                          cudaMemcpyDeviceToDevice,
                          st);
    (void)cudaFreeAsync(len, st);
}

static void
s_natural_expo(const float *x,
               size_t n,
               uint64_t seed,
               uint64_t counter,
               uint8_t *expo,
               uint32_t *flag,
               void *stream)
{
    s_launch(k_natural_expo, n, stream, x, n, seed, counter, expo, flag);
}

static void
s_natural_check(const uint8_t *expo, size_t n, uint32_t *flag, void *stream)
{
    s_launch(k_natural_check, n, stream, expo, n, flag);
}

static void
s_natural_decode(const uint8_t *expo,
                 const uint8_t *bits,
                 size_t n,
                 bool add,
                 float alpha,
                 float *y,
                 const uint32_t *flag,
                 void *stream)
{
    s_launch(k_natural_decode, n, stream, expo, bits, n, add, alpha, y, flag);
}

static void
s_maxabs(const float *x, size_t n, uint32_t *key, void *stream)
{
    s_launch(k_maxabs, n, stream, x, n, key);
}

static void
s_sample(const float *x, size_t n, size_t m, float *sample, void *stream)
{
    s_launch(k_sample, m, stream, x, n, m, sample);
}

static void
s_fp8_symbols(const float *x,
              size_t n,
              float s1,
              float s2,
              unsigned M,
              unsigned E,
              uint8_t *sym,
              void *stream)
{
    s_launch(k_fp8_symbols, n, stream, x, n, s1, s2, M, E, sym);
}

static void
s_fp8_decode(const uint8_t *sym,
             const float *val,
             size_t n,
             float alpha,
             float *y,
             const uint32_t *flag,
             void *stream)
{
    s_launch(k_fp8_decode, n, stream, sym, val, n, alpha, y, flag);
}

static void
s_dgc_sample(const float *x,
             size_t n,
             size_t m,
             uint64_t seed,
             float *sample,
             void *stream)
{
    s_launch(k_dgc_sample, m, stream, x, n, m, seed, sample);
}

static void
s_idx_scatter(const float *vals,
              const uint32_t *idx,
              size_t k,
              float alpha,
              float *y,
              const uint32_t *flag,
              void *stream)
{
    s_launch(k_idx_scatter, k, stream, vals, idx, k, alpha, y, flag);
}

static void
s_fp8_error(const float *x,
            size_t n,
            float s1,
            float s2,
            unsigned M,
            unsigned E,
            const float *val,
            double *err,
            void *stream)
{
    size_t pieces = (n + COMPRESS_FP8_SAMPLE - 1) / COMPRESS_FP8_SAMPLE;
    s_launch(k_fp8_error, pieces, stream, x, n, s1, s2, M, E, val, err);
}

static void
s_clip_parts(const float *x,
             size_t n,
             const double *mean,
             double *part,
             void *stream)
{
    size_t np = (n + COMPRESS_CLIP_PIECE - 1) / COMPRESS_CLIP_PIECE;
    s_launch(k_clip_parts, np, stream, x, n, mean, part);
}

static void
s_clip_moment(const double *part,
              size_t n,
              double clip,
              double *mean,
              float *t,
              uint32_t *flag,
              void *stream)
{
    s_launch(k_clip_moment, 1, stream, part, n, clip, mean, t, flag);
}

static void
s_clip_apply(const float *x, size_t n, const float *t, float *v, void *stream)
{
    s_launch(k_clip_apply, n, stream, x, n, t, v);
}

static void
s_quant_inv(const uint8_t *scales,
            const struct compress_dev_quant *q,
            float *inv,
            void *stream)
{
    s_launch(k_quant_inv,
             (q->n + q->bucket - 1) / q->bucket,
             stream,
             scales,
             *q,
             inv);
}

extern "C" rumor_err
compress_dev_cuda(const struct compress_dev_i **out, const char **why)
{
    static const struct compress_dev_i cuda = {
        "cuda",          s_alloc,        s_release,       s_upload,
        s_download,      s_zero,         s_finish,        s_finite,
        s_dense_encode,  s_dense_check,  s_dense_decode,  s_sign_sums,
        s_sign_scales,   s_sign_bits,    s_sign_decode,   s_quant_scales,
        s_quant_codes,   s_quant_check,  s_quant_decode,  s_randk_gather,
        s_randk_scatter, s_select_kth,   s_select_scan,   s_select_emit,
        s_rice_write,    s_natural_expo, s_natural_check, s_natural_decode,
        s_maxabs,        s_sample,       s_fp8_symbols,   s_fp8_decode,
        s_dgc_sample,    s_idx_scatter,  s_fp8_error,     s_clip_parts,
        s_clip_moment,   s_clip_apply,   s_quant_inv,
    };
    *out = NULL;
    if (rumor_cuda_device_count(why) <= 0)
        return RUMOR_ENOTSUP;
    *out = &cuda;
    return RUMOR_OK;
}
