// The CUDA backend of gossip/backend.h. Every kernel's launch and every
// copy is on the calling thread's stream (core/cuda_stream.h: the legacy
// stream, or Rumor's own under a Peer),
// so they are ordered among themselves; copies between host and device go chunk
// by chunk (gossip_copy_chunk_at) through two pinned staging buffers with
// cudaMemcpyAsync, so that chunk i + 1's DMA overlaps the host's memcpy of
// chunk i, and return once the last chunk is through (an algorithm reads a
// payload right after its copy). The peer orders the stream against the
// caller's before the step starts. Each kernel does, per
// element, what its twin in gossip/ref.c does, with the _rn intrinsics so
// that nvcc contracts nothing into an FMA: the same bits as the host.
#include "core/cuda_stream.h"
#include "core/philox.h"
#include "gossip/backend.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t
s_stream(void)
{
    return (cudaStream_t)core_cuda_stream();
}

static rumor_err
s_alloc(size_t bytes, void **out)
{
    *out = NULL;
    void *p = NULL;
    if (cudaMalloc(&p, bytes + 1) != cudaSuccess) {
        rumor_log(RUMOR_LOG_ERROR,
                  "gossip: cudaMalloc of %zu bytes failed",
                  bytes + 1);
        return RUMOR_ENOMEM;
    }
    if (cudaMemsetAsync(p, 0, bytes + 1, s_stream()) != cudaSuccess) {
        cudaFree(p);
        return RUMOR_EBACKEND;
    }
    *out = p;
    return RUMOR_OK;
}

static void
s_release(void *p)
{
    if (p != NULL)
        cudaFree(p);
}

// The pinned staging buffers, one pair for the process (the table has no
// context; the overlapped DiLoCo thread copies beside the step's), made at
// the first copy and kept: each buffer's event marks its last DMA done.
static struct {
    pthread_mutex_t lock;
    void *buf[2];
    cudaEvent_t done[2];
} s_stage = {PTHREAD_MUTEX_INITIALIZER, {NULL, NULL}, {NULL, NULL}};

static cudaError_t
s_stage_ready(void)
{
    for (int b = 0; b < 2; b++) {
        if (s_stage.buf[b] != NULL)
            continue;
        cudaError_t err =
            cudaEventCreateWithFlags(&s_stage.done[b], cudaEventDisableTiming);
        if (err != cudaSuccess)
            return err;
        err = cudaHostAlloc(&s_stage.buf[b],
                            GOSSIP_COPY_CHUNK,
                            cudaHostAllocDefault);
        if (err != cudaSuccess) {
            cudaEventDestroy(s_stage.done[b]);
            s_stage.buf[b] = NULL;
            return err;
        }
    }
    return cudaSuccess;
}

// Chunk i + 1's DMA is queued before the host copies chunk i out.
static cudaError_t
s_copy_to_host(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    size_t n = gossip_copy_chunks(bytes);
    cudaError_t err = cudaSuccess;
    for (size_t i = 0; i <= n && err == cudaSuccess; i++) {
        if (i < n) {
            struct gossip_copy_chunk c = gossip_copy_chunk_at(bytes, i);
            err = cudaMemcpyAsync(s_stage.buf[c.buffer],
                                  src + c.offset,
                                  c.bytes,
                                  cudaMemcpyDeviceToHost,
                                  s_stream());
            if (err == cudaSuccess)
                err = cudaEventRecord(s_stage.done[c.buffer], s_stream());
        }
        if (i > 0 && err == cudaSuccess) {
            struct gossip_copy_chunk c = gossip_copy_chunk_at(bytes, i - 1);
            err = cudaEventSynchronize(s_stage.done[c.buffer]);
            if (err == cudaSuccess)
                memcpy(dst + c.offset, s_stage.buf[c.buffer], c.bytes);
        }
    }
    return err;
}

// The host fills chunk i + 1 while chunk i's DMA runs; a buffer is filled
// again only after its previous DMA is done.
static cudaError_t
s_copy_to_device(uint8_t *dst, const uint8_t *src, size_t bytes)
{
    cudaError_t err = cudaSuccess;
    for (size_t i = 0; i < gossip_copy_chunks(bytes) && err == cudaSuccess;
         i++) {
        struct gossip_copy_chunk c = gossip_copy_chunk_at(bytes, i);
        err = cudaEventSynchronize(s_stage.done[c.buffer]);
        if (err != cudaSuccess)
            break;
        memcpy(s_stage.buf[c.buffer], src + c.offset, c.bytes);
        err = cudaMemcpyAsync(dst + c.offset,
                              s_stage.buf[c.buffer],
                              c.bytes,
                              cudaMemcpyHostToDevice,
                              s_stream());
        if (err == cudaSuccess)
            err = cudaEventRecord(s_stage.done[c.buffer], s_stream());
    }
    for (int b = 0; b < 2 && err == cudaSuccess; b++)
        err = cudaEventSynchronize(s_stage.done[b]);
    return err;
}

static rumor_err
s_copy(void *dst, const void *src, size_t bytes, enum gossip_copy kind)
{
    if (bytes == 0)
        return RUMOR_OK;
    cudaError_t err;
    if (kind == GOSSIP_ON_DEVICE) {
        err = cudaMemcpyAsync(dst,
                              src,
                              bytes,
                              cudaMemcpyDeviceToDevice,
                              s_stream());
    } else {
        pthread_mutex_lock(&s_stage.lock);
        err = s_stage_ready();
        if (err == cudaSuccess && kind == GOSSIP_TO_HOST)
            err = s_copy_to_host((uint8_t *)dst, (const uint8_t *)src, bytes);
        else if (err == cudaSuccess)
            err = s_copy_to_device((uint8_t *)dst, (const uint8_t *)src, bytes);
        pthread_mutex_unlock(&s_stage.lock);
    }
    if (err == cudaSuccess)
        return RUMOR_OK;
    rumor_log(RUMOR_LOG_ERROR,
              "gossip: copy of %zu bytes: %s",
              bytes,
              cudaGetErrorString(err));
    return RUMOR_EBACKEND;
}

#define S_THREADS 256

// Enough blocks to cover n with grid-stride loops, and at most 4096.
static unsigned
s_blocks(size_t n)
{
    size_t b = (n + S_THREADS - 1) / S_THREADS;
    return (unsigned)(b == 0 ? 1 : b < 4096 ? b : 4096);
}

static rumor_err
s_launched(const char *what)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess)
        return RUMOR_OK;
    rumor_log(RUMOR_LOG_ERROR,
              "gossip cuda %s: %s",
              what,
              cudaGetErrorString(err));
    return RUMOR_EBACKEND;
}

// Element e of n, grid-stride: what the twin's loop does at e.
#define S_EACH(e, n)                                                        \
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (n); \
         e += (size_t)gridDim.x * blockDim.x)

__global__ void
k_diff(double *d, const float *a, const float *b, size_t n)
{
    S_EACH(e, n)
    d[e] = __dsub_rn((double)a[e], b != NULL ? (double)b[e] : 0.0);
}

__global__ void
k_sub(double *d, const double *a, const double *b, size_t n)
{
    S_EACH(e, n) d[e] = __dsub_rn(a[e], b[e]);
}

__global__ void
k_axpy(double *acc, double c, const double *d, size_t n)
{
    S_EACH(e, n) acc[e] = __dadd_rn(acc[e], __dmul_rn(d[e], c));
}

__global__ void
k_apply(float *out,
        const float *base,
        double gamma,
        const double *acc,
        size_t n)
{
    S_EACH(e, n)
    out[e] =
        __double2float_rn(__dadd_rn((double)base[e], __dmul_rn(gamma, acc[e])));
}

// Sum of squares: per block a shared-memory tree, then one atomic add.
__global__ void
k_sumsq(const double *d, size_t n, double *out)
{
    __shared__ double part[S_THREADS];
    double sq = 0;
    S_EACH(e, n) sq = __dadd_rn(sq, __dmul_rn(d[e], d[e]));
    part[threadIdx.x] = sq;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

__global__ void
k_sub_round(float *out, const float *x, const double *xhat, size_t n)
{
    S_EACH(e, n) out[e] = __double2float_rn(__dsub_rn((double)x[e], xhat[e]));
}

__global__ void
k_accum(double *acc, double c, const float *x, size_t n)
{
    S_EACH(e, n) acc[e] = __dadd_rn(acc[e], __dmul_rn(c, (double)x[e]));
}

__global__ void
k_add(float *out, const float *a, const float *b, size_t n)
{
    S_EACH(e, n) out[e] = __fadd_rn(a[e], b[e]);
}

__global__ void
k_add_scaled(float *out, const float *a, float c, const float *b, size_t n)
{
    S_EACH(e, n)
    out[e] =
        a != NULL ? __fadd_rn(a[e], __fmul_rn(c, b[e])) : __fmul_rn(c, b[e]);
}

__global__ void
k_div_round(float *out, const double *acc, double c, size_t n)
{
    S_EACH(e, n) out[e] = __double2float_rn(__ddiv_rn(acc[e], c));
}

__global__ void
k_sgd(float *p,
      const float *g,
      float *b,
      float lr,
      float wd,
      float mu,
      bool nesterov,
      size_t n)
{
    S_EACH(e, n)
    {
        float u = __fadd_rn(g[e], __fmul_rn(wd, p[e])), d = u;
        if (b != NULL) {
            float v = __fadd_rn(__fmul_rn(mu, b[e]), u);
            b[e] = v;
            d = nesterov ? __fadd_rn(u, __fmul_rn(mu, v)) : v;
        }
        p[e] = __fsub_rn(p[e], __fmul_rn(lr, d));
    }
}

__global__ void
k_outer(float *x,
        float *anchor,
        float *v,
        const float *d,
        float lr,
        float mu,
        size_t n)
{
    S_EACH(e, n)
    {
        float ve = __fadd_rn(__fmul_rn(mu, v[e]), d[e]);
        float xe = __fsub_rn(anchor[e],
                             __fmul_rn(lr, __fadd_rn(d[e], __fmul_rn(mu, ve))));
        v[e] = ve;
        x[e] = xe;
        anchor[e] = xe;
    }
}

// crc32c of each GOSSIP_CRC_CHUNK bytes of p (the last one shorter), one
// thread per chunk, bytewise with the reflected table each block builds.
__global__ void
k_crc_chunks(const uint8_t *p, size_t bytes, uint32_t *part, size_t parts)
{
    __shared__ uint32_t table[256];
    for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
    __syncthreads();
    S_EACH(c, parts)
    {
        size_t at = c * GOSSIP_CRC_CHUNK;
        size_t end =
            bytes - at < GOSSIP_CRC_CHUNK ? bytes : at + GOSSIP_CRC_CHUNK;
        uint32_t crc = 0xffffffffu;
        for (size_t b = at; b < end; b++)
            crc = table[(crc ^ p[b]) & 0xffu] ^ (crc >> 8);
        part[c] = ~crc;
    }
}

// rumor_rng_fill_uniform: element i is word (index + i) % 4 of the
// Philox block (index + i) / 4.
__global__ void
k_uniform(float *out, uint64_t seed, uint64_t stream, uint64_t index, size_t n)
{
    S_EACH(i, n)
    {
        uint64_t at = index + i;
        uint32_t w[4];
        philox_block_device(at >> 2, stream, seed, w);
        out[i] = (float)(w[at & 3] >> 8) * 0x1.0p-24f;
    }
}

// gossip/ref.c's s_mod; floor is exact on the device, as s_floor is.
__device__ static double
d_mod(double x, double a, double inv_a)
{
    double k = floor(__dadd_rn(__dmul_rn(x, inv_a), 0.5));
    return __dsub_rn(x, __dmul_rn(a, k));
}

__device__ static double
d_moniqua_q(unsigned l)
{
    return __dsub_rn(__dmul_rn((double)l, GOSSIP_MONIQUA_DELTA), 0.5);
}

// One thread per byte of levels: its four elements.
__global__ void
k_moniqua_levels(uint8_t *levels,
                 float *xhat,
                 const float *x,
                 const float *noise,
                 double bound,
                 double inv_b,
                 size_t n)
{
    S_EACH(byte, (n + 3) / 4)
    {
        unsigned packed = 0;
        for (size_t e = 4 * byte; e < 4 * byte + 4 && e < n; e++) {
            double v =
                __dadd_rn(d_mod(__dmul_rn((double)x[e], inv_b), 1.0, 1.0), 0.5);
            double level =
                floor(__dadd_rn(__dmul_rn(v, 3.0), (double)noise[e]));
            level = level > 0 ? level : 0;
            level = level < 3 ? level : 3;
            unsigned l = (unsigned)level;
            packed |= l << (2 * (e % 4));
            xhat[e] =
                __double2float_rn(__dsub_rn(__dmul_rn(d_moniqua_q(l), bound),
                                            d_mod((double)x[e], bound, inv_b)));
        }
        levels[byte] = (uint8_t)packed;
    }
}

__global__ void
k_moniqua_term(double *d,
               const uint8_t *levels,
               const float *x,
               const float *xhat,
               double bound,
               double inv_b,
               size_t n)
{
    S_EACH(e, n)
    {
        unsigned l = (levels[e / 4] >> (2 * (e % 4))) & 3u;
        double t = __dsub_rn(__dmul_rn(d_moniqua_q(l), bound), (double)x[e]);
        d[e] = __dsub_rn(d_mod(t, bound, inv_b), (double)xhat[e]);
    }
}

// The block's total of every thread's v, in thread 0 (part is free again
// when it returns).
__device__ static double
d_block_total(double v, double *part)
{
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    double total = part[0];
    __syncthreads();
    return total;
}

// rumor_layer_stats_compute's sums: out[0] the sum, out[1] the sum of
// squares, out[2]'s low word the largest |x| as bits (non-negative floats,
// NaN's above Inf's, order as their bits do).
__global__ void
k_stats(const float *x, size_t n, double *out)
{
    __shared__ double part[S_THREADS];
    double sum = 0, sq = 0;
    unsigned mx = 0;
    S_EACH(e, n)
    {
        double v = x[e];
        sum = __dadd_rn(sum, v);
        sq = __dadd_rn(sq, __dmul_rn(v, v));
        unsigned bits = __float_as_uint(x[e]) & 0x7fffffffu;
        mx = bits > mx ? bits : mx;
    }
    sum = d_block_total(sum, part);
    sq = d_block_total(sq, part);
    if (threadIdx.x == 0) {
        atomicAdd(&out[0], sum);
        atomicAdd(&out[1], sq);
    }
    atomicMax((unsigned *)&out[2], mx);
}

// rumor_layer_rel_error's sums: the squared error and norm over all
// elements, then over those where approx is not zero.
__global__ void
k_rel_error(const float *x, const float *approx, size_t n, double *out)
{
    __shared__ double part[S_THREADS];
    double acc[4] = {0, 0, 0, 0};
    S_EACH(e, n)
    {
        double v = x[e], d = __dsub_rn(v, (double)approx[e]);
        double dd = __dmul_rn(d, d), vv = __dmul_rn(v, v);
        acc[0] = __dadd_rn(acc[0], dd);
        acc[1] = __dadd_rn(acc[1], vv);
        if (approx[e] != 0.0f) {
            acc[2] = __dadd_rn(acc[2], dd);
            acc[3] = __dadd_rn(acc[3], vv);
        }
    }
    for (int k = 0; k < 4; k++) {
        double total = d_block_total(acc[k], part);
        if (threadIdx.x == 0)
            atomicAdd(&out[k], total);
    }
}

// PowerSGD's adaptive rank: the sum of ((double)a + b)^2; b NULL (DGC's
// clip): of (double)a^2.
__global__ void
k_sumsq_add(const float *a, const float *b, size_t n, double *out)
{
    __shared__ double part[S_THREADS];
    double sq = 0;
    S_EACH(e, n)
    {
        double v =
            b != NULL ? __dadd_rn((double)a[e], (double)b[e]) : (double)a[e];
        sq = __dadd_rn(sq, __dmul_rn(v, v));
    }
    sq = d_block_total(sq, part);
    if (threadIdx.x == 0)
        atomicAdd(out, sq);
}

static rumor_err
s_zero(void *p, size_t bytes)
{
    return cudaMemsetAsync(p, 0, bytes, s_stream()) == cudaSuccess
               ? RUMOR_OK
               : RUMOR_EBACKEND;
}

static rumor_err
s_diff(double *d, const float *a, const float *b, size_t n)
{
    k_diff<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(d, a, b, n);
    return s_launched("diff");
}

static rumor_err
s_sub(double *d, const double *a, const double *b, size_t n)
{
    k_sub<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(d, a, b, n);
    return s_launched("sub");
}

static rumor_err
s_axpy(double *acc, double c, const double *d, size_t n)
{
    k_axpy<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(acc, c, d, n);
    return s_launched("axpy");
}

static rumor_err
s_apply(float *out,
        const float *base,
        double gamma,
        const double *acc,
        size_t n)
{
    k_apply<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out,
                                                       base,
                                                       gamma,
                                                       acc,
                                                       n);
    return s_launched("apply");
}

// A zeroed device scratch of k doubles for a reduction, stream-ordered as
// the device codecs' scratch: cudaMalloc and cudaFree would synchronize
// the device at every neighbour's norm.
static rumor_err
s_scratch(size_t k, double **out)
{
    *out = NULL;
    if (cudaMallocAsync((void **)out, k * sizeof **out, s_stream()) !=
        cudaSuccess)
        return RUMOR_ENOMEM;
    return cudaMemsetAsync(*out, 0, k * sizeof **out, s_stream()) == cudaSuccess
               ? RUMOR_OK
               : RUMOR_EBACKEND;
}

// The reduction's k doubles to the host (after the launch's check), and
// the scratch freed.
static rumor_err
s_scratch_done(rumor_err rc,
               const char *what,
               double *d,
               double *host,
               size_t k)
{
    if (rc == RUMOR_OK)
        rc = s_launched(what);
    if (rc == RUMOR_OK)
        rc = s_copy(host, d, k * sizeof *host, GOSSIP_TO_HOST);
    (void)cudaFreeAsync(d, s_stream());
    return rc;
}

static rumor_err
s_norm(const double *d, size_t n, double *norm)
{
    double *sum = NULL, sq = 0;
    rumor_err rc = s_scratch(1, &sum);
    if (rc == RUMOR_OK)
        k_sumsq<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(d, n, sum);
    rc = s_scratch_done(rc, "norm", sum, &sq, 1);
    *norm = sqrt(sq);
    return rc;
}

static rumor_err
s_sub_round(float *out, const float *x, const double *xhat, size_t n)
{
    k_sub_round<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out, x, xhat, n);
    return s_launched("sub_round");
}

static rumor_err
s_accum(double *acc, double c, const float *x, size_t n)
{
    k_accum<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(acc, c, x, n);
    return s_launched("accum");
}

static rumor_err
s_add(float *out, const float *a, const float *b, size_t n)
{
    k_add<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out, a, b, n);
    return s_launched("add");
}

static rumor_err
s_add_scaled(float *out, const float *a, float c, const float *b, size_t n)
{
    k_add_scaled<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out, a, c, b, n);
    return s_launched("add_scaled");
}

static rumor_err
s_div_round(float *out, const double *acc, double c, size_t n)
{
    k_div_round<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out, acc, c, n);
    return s_launched("div_round");
}

// The device codecs, on the same stream as the rest.
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
    return rumor_codec_encode_device(codec,
                                     x,
                                     n,
                                     seed,
                                     counter,
                                     out,
                                     cap,
                                     written,
                                     s_stream());
}

static rumor_err
s_decode(const rumor_codec *codec,
         const uint8_t *in,
         size_t len,
         float *y,
         size_t n)
{
    rumor_err rc = s_zero(y, n * sizeof *y);
    return rc == RUMOR_OK
               ? rumor_codec_decode_add_device(codec, in, len, 1.0f, y, n, NULL)
               : rc;
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
    k_outer<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(x,
                                                       anchor,
                                                       v,
                                                       d,
                                                       lr,
                                                       mu,
                                                       n);
    return s_launched("outer");
}

static rumor_err
s_decode_add(const rumor_codec *codec,
             const uint8_t *in,
             size_t len,
             float alpha,
             float *y,
             size_t n)
{
    return rumor_codec_decode_add_device(codec,
                                         in,
                                         len,
                                         alpha,
                                         y,
                                         n,
                                         s_stream());
}

static rumor_err
s_crc32c(const void *p, size_t bytes, uint32_t *crc)
{
    size_t parts = (bytes + GOSSIP_CRC_CHUNK - 1) / GOSSIP_CRC_CHUNK;
    *crc = 0;
    if (parts == 0)
        return RUMOR_OK;
    uint32_t *d_part = NULL;
    uint32_t *part = (uint32_t *)malloc(parts * sizeof *part);
    if (part == NULL ||
        cudaMallocAsync((void **)&d_part, parts * sizeof *d_part, s_stream()) !=
            cudaSuccess) {
        free(part);
        return RUMOR_ENOMEM;
    }
    k_crc_chunks<<<s_blocks(parts), S_THREADS, 0, s_stream()>>>(
        (const uint8_t *)p,
        bytes,
        d_part,
        parts);
    rumor_err rc = s_launched("crc32c");
    if (rc == RUMOR_OK)
        rc = s_copy(part, d_part, parts * sizeof *part, GOSSIP_TO_HOST);
    (void)cudaFreeAsync(d_part, s_stream());
    if (rc == RUMOR_OK)
        *crc = gossip_ref_crc32c_join(part, bytes);
    free(part);
    return rc;
}

static rumor_err
s_uniform(float *out, uint64_t seed, uint64_t stream, uint64_t index, size_t n)
{
    k_uniform<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(out,
                                                         seed,
                                                         stream,
                                                         index,
                                                         n);
    return s_launched("uniform");
}

// 1 / B on the host, as the twin divides: the same double.
static rumor_err
s_moniqua_levels(uint8_t *levels,
                 float *xhat,
                 const float *x,
                 const float *noise,
                 double bound,
                 size_t n)
{
    k_moniqua_levels<<<s_blocks((n + 3) / 4), S_THREADS, 0, s_stream()>>>(
        levels,
        xhat,
        x,
        noise,
        bound,
        1.0 / bound,
        n);
    return s_launched("moniqua_levels");
}

static rumor_err
s_moniqua_term(double *d,
               const uint8_t *levels,
               const float *x,
               const float *xhat,
               double bound,
               size_t n)
{
    k_moniqua_term<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(d,
                                                              levels,
                                                              x,
                                                              xhat,
                                                              bound,
                                                              1.0 / bound,
                                                              n);
    return s_launched("moniqua_term");
}

static rumor_err
s_stats(const float *x, size_t n, struct rumor_layer_stats *out)
{
    double *d = NULL, sums[3] = {0, 0, 0};
    rumor_err rc = s_scratch(3, &d);
    if (rc == RUMOR_OK)
        k_stats<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(x, n, d);
    rc = s_scratch_done(rc, "stats", d, sums, 3);
    *out = (struct rumor_layer_stats){0};
    if (rc != RUMOR_OK || n == 0)
        return rc;
    uint32_t bits = 0;
    float mx = 0;
    memcpy(&bits, &sums[2], sizeof bits); // the low word: little-endian
    memcpy(&mx, &bits, sizeof mx);
    out->norm = sqrt(sums[1]);
    out->max_abs = mx;
    out->mean = sums[0] / (double)n;
    double var = sums[1] / (double)n - out->mean * out->mean;
    out->var = var > 0 ? var : 0; // as compress/stats.c: cancellation
    return RUMOR_OK;
}

// compress/stats.c's ratio: 0 for x and its error both zero, 1 for x zero
// alone.
static double
s_ratio(double err, double sq)
{
    if (sq == 0)
        return err == 0 ? 0.0 : 1.0;
    return sqrt(err / sq);
}

static rumor_err
s_rel_error(const float *x,
            const float *approx,
            size_t n,
            double *err,
            double *support)
{
    double *d = NULL, sums[4] = {0, 0, 0, 0};
    rumor_err rc = s_scratch(4, &d);
    if (rc == RUMOR_OK)
        k_rel_error<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(x, approx, n, d);
    rc = s_scratch_done(rc, "rel_error", d, sums, 4);
    *err = s_ratio(sums[0], sums[1]);
    if (support != NULL)
        *support = s_ratio(sums[2], sums[3]);
    return rc;
}

static rumor_err
s_sumsq_add(const float *a, const float *b, size_t n, double *acc)
{
    double *d = NULL, sum = 0;
    rumor_err rc = s_scratch(1, &d);
    if (rc == RUMOR_OK)
        k_sumsq_add<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(a, b, n, d);
    rc = s_scratch_done(rc, "sumsq_add", d, &sum, 1);
    *acc += sum;
    return rc;
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
    k_sgd<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(p,
                                                     g,
                                                     b,
                                                     lr,
                                                     wd,
                                                     mu,
                                                     nesterov,
                                                     n);
    return s_launched("sgd");
}

static rumor_err
s_scalers(const rumor_codec *codec, const float *x, size_t n, float *out)
{
    return rumor_codec_scalers_device(codec, x, n, out, s_stream());
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
    return rumor_codec_encode_shared_device(codec,
                                            x,
                                            n,
                                            scalers,
                                            seed,
                                            counter,
                                            out,
                                            cap,
                                            written,
                                            s_stream());
}

__global__ void
k_dgc_step(float *u_new,
           float *v,
           const float *e,
           const float *u,
           const float *g,
           float mu,
           float scale,
           size_t n)
{
    S_EACH(i, n)
    {
        float un = __fadd_rn(__fmul_rn(mu, u[i]), __fmul_rn(scale, g[i]));
        u_new[i] = un;
        v[i] = __fadd_rn(e[i], un);
    }
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
    k_dgc_step<<<s_blocks(n), S_THREADS, 0, s_stream()>>>(u_new,
                                                          v,
                                                          e,
                                                          u,
                                                          g,
                                                          mu,
                                                          scale,
                                                          n);
    return s_launched("dgc_step");
}

__global__ void
k_zero_at(float *u, const uint32_t *idx, size_t k)
{
    S_EACH(j, k) u[idx[j]] = 0.0f;
}

static rumor_err
s_zero_at(float *u, const uint32_t *idx, size_t k)
{
    if (k == 0)
        return RUMOR_OK;
    uint32_t *d = NULL;
    rumor_err rc = s_alloc(k * sizeof *idx, (void **)&d);
    if (rc == RUMOR_OK)
        rc = s_copy(d, idx, k * sizeof *idx, GOSSIP_TO_DEVICE);
    if (rc == RUMOR_OK) {
        k_zero_at<<<s_blocks(k), S_THREADS, 0, s_stream()>>>(u, d, k);
        rc = s_launched("zero_at");
    }
    s_release(d);
    return rc;
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
    return rumor_codec_encode_device_k(codec,
                                       x,
                                       n,
                                       k,
                                       seed,
                                       counter,
                                       out,
                                       cap,
                                       written,
                                       s_stream());
}

static const struct gossip_backend_i s_cuda = {
    .name = "cuda",
    .host_memory = false,
    .cuda = true,
    .alloc = s_alloc,
    .release = s_release,
    .copy = s_copy,
    .zero = s_zero,
    .diff = s_diff,
    .sub = s_sub,
    .axpy = s_axpy,
    .apply = s_apply,
    .norm = s_norm,
    .sub_round = s_sub_round,
    .accum = s_accum,
    .add = s_add,
    .encode = s_encode,
    .decode = s_decode,
    .add_scaled = s_add_scaled,
    .div_round = s_div_round,
    .outer = s_outer,
    .decode_add = s_decode_add,
    .crc32c = s_crc32c,
    .uniform = s_uniform,
    .moniqua_levels = s_moniqua_levels,
    .moniqua_term = s_moniqua_term,
    .stats = s_stats,
    .rel_error = s_rel_error,
    .sumsq_add = s_sumsq_add,
    .sgd = s_sgd,
    .scalers = s_scalers,
    .encode_shared = s_encode_shared,
    .dgc_step = s_dgc_step,
    .zero_at = s_zero_at,
    .encode_k = s_encode_k,
};

extern "C" rumor_err
gossip_backend_cuda(const struct gossip_backend_i **out, const char **why)
{
    *out = NULL;
    if (rumor_cuda_device_count(why) == 0)
        return RUMOR_ENOTSUP;
    *out = &s_cuda;
    return RUMOR_OK;
}
