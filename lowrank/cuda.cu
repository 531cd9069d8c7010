// The cuda backend: cuBLAS for the products, cuSOLVER geqrf/orgqr for QR
// above rank 16,
// own kernels for the rest. Every operation exists batched over matrices
// of one shape (the compressor groups them, as the hook's
// batch_tensors_with_same_shape does): one launch per group, matrices
// selected by blockIdx.y from device arrays of pointers; the single-matrix
// slots are batches of one.
//
// - P = (M [+= g]) Q for r <= 8: own kernel, one warp per row of M, which
//   streams the row once, stores M = e + g (error feedback fused into the
//   product) and keeps r dot products in registers; above rank 8 an add
//   kernel and cublasSgemmBatched.
// - Q = M^T P: cublasSgemmBatched (row-major M is cuBLAS's column-major
//   M^T, so both products need no copies).
// - e -= P Q^T and out = P Q^T: own kernel, one pass over M.
// - The deferred error update (the cpu backend's algorithm, see
//   backend.h): M' = (e - Pd Qd^T) + g and P = M' Q in one pass, one warp
//   per row as in the right product, so a step moves 20 bytes per element
//   of M (12 here, 4 for Q = M^T P, 4 for writing the approximation)
//   instead of 28. Its arithmetic is the two kernels' it replaces, with
//   the same explicit fmaf order in all three, so both paths give the same
//   bits.
// - Gram-Schmidt (rank <= 2 by default): one block per matrix, block
//   reductions in double, the hook's column order; a zero column stays
//   zero. Up to rank 16 every method is the work lists' orthogonalization
//   kernel (below), also for one matrix or one shape group (k_orth_one,
//   k_orth_group). Above: P transposed to column-major with cublasSgeam,
//   cuSOLVER geqrf + orgqr, transposed back. CholeskyQR2 is served by QR
//   with the columns flipped to R's positive diagonal: the Q CholeskyQR2
//   gives on the cpu backend, so mixed cpu/cuda nodes agree on the factor.
// - Work lists (the *_list slots, ranks <= 16, what the compressor uses
//   when they apply): every matrix of a step, of any shapes, in one
//   launch per phase, and no cuSOLVER call and no host synchronization
//   once a list's device copy and tile plan are kept (struct cuda_plan):
//   k_orth_list (one block per matrix: Gram-Schmidt, or Householder
//   geqr2 + org2r with LAPACK's signs, flipped to R's positive diagonal
//   for CHOLQR2), k_right_list (a warp per row, the error-feedback add
//   and the deferred error update fused), k_left_list (warp-wide column
//   strips, row chunks reduced by the last block in a fixed order) and
//   k_recon_list (memory update and output in one pass). Each has a twin
//   in ref.c with the same per-thread arithmetic; they have never run on
//   a GPU (tests/unit/test_lowrank_list.c compares them with the twins).
// Everything runs on the calling thread's stream of the current device
// (core/cuda_stream.h: the legacy stream, or Rumor's own), cuBLAS and cuSOLVER
// included: a pointer array's or plan's upload is ordered after the kernels
// that used the slot before, and the host waits only for that stream where it
// reads a result. Errors: CUDA_TRY / CUBLAS_TRY / CUSOLVER_TRY set rc and jump
// to the label written at the call site (R4.6); nothing else hides control
// flow. Only extern "C" entry points leave this file (R1.1). The tests compare
// every operation and the whole compressor against the cpu backend
// (tests/unit/test_lowrank.c); they have not run on a GPU yet.
#include "core/cuda_check.h"
#include "core/cuda_stream.h"
#include "lowrank/backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t
s_stream(void)
{
    return (cudaStream_t)core_cuda_stream();
}

#define CUDA_TRY(call, label)     CORE_CUDA_TRY("lowrank cuda", call, label)
#define CUBLAS_TRY(call, label)   CORE_CUBLAS_TRY("lowrank cuda", call, label)
#define CUSOLVER_TRY(call, label) CORE_CUSOLVER_TRY("lowrank cuda", call, label)

#define GS_THREADS      512
#define CUDA_PTR_ARRAYS 6   // pointer arrays of one batched call, at most
#define CUDA_PTR_CACHE  256 // pointer lists kept on the device
#define CUDA_PLAN_CACHE 32  // work lists kept on the device

struct cuda_plan;

// A batched call needs its matrices' addresses in device memory. PowerSGD
// passes the same lists every step, so they are uploaded once and found
// again by content: a synchronous upload per call cost more than the
// kernels on ResNet-sized models (45x the copy floor at rank 1 on an
// H100, docs/benchmarks.md).
struct cuda_ptrs {
    size_t len;    // pointers in the list (0: slot unused)
    uint64_t hash; // of the list, to skip most comparisons
    uint64_t used; // the call count when last used (least recent goes)
    void **host;   // the list
    void **dev;    // its device copy
};

struct cuda_ctx {
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    float *scratch; // device, QR transpose + workspace + tau
    size_t cap;     // floats at scratch
    int *info;      // device, cuSOLVER status
    void **key;     // host, the list being looked up
    size_t key_cap; // pointers at key
    uint64_t calls;
    struct cuda_ptrs ptrs[CUDA_PTR_CACHE];
    uint64_t *plan_key;      // host, the work list being looked up
    size_t plan_cap;         // words at plan_key
    struct cuda_plan *plans; // CUDA_PLAN_CACHE work lists kept on the device
};

// --- kernels -----------------------------------------------------------

// Batched kernels take device arrays of device pointers, one matrix per
// blockIdx.y (a group of same-shaped matrices in one launch).

__global__ static void
k_add(float *const *mats, const float *const *adds, size_t count)
{
    float *mat = mats[blockIdx.y];
    const float *add = adds[blockIdx.y];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < count; i += stride)
        mat[i] += add[i];
}

// Sums each of a warp's R partial dot products and stores them (row of P).
template <int R>
__device__ __forceinline__ static void
d_store_row(float *acc, unsigned lane, float *prow)
{
    for (int k = 0; k < R; k++)
        for (int off = 16; off > 0; off >>= 1)
            acc[k] += __shfl_down_sync(0xffffffffu, acc[k], off);
    if (lane == 0)
        for (int k = 0; k < R; k++)
            prow[k] = acc[k];
}

// P = (M [+= add]) Q for rank R <= 8: one warp per row of M streams the
// row once (storing M + add when fusing error feedback) and keeps R dot
// products in registers; Q (m x R) is small and stays in L2.
template <int R>
__global__ static void
k_right_fused(float *const *mats,
              const float *const *adds,
              size_t n,
              size_t m,
              const float *const *qs,
              float *const *ps)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    unsigned lane = threadIdx.x % 32;
    if (row >= n)
        return;
    float *mrow = mats[blockIdx.y] + row * m;
    const float *arow = adds != NULL ? adds[blockIdx.y] + row * m : NULL;
    const float *q = qs[blockIdx.y];
    float acc[R];
    for (int k = 0; k < R; k++)
        acc[k] = 0;
    for (size_t j = lane; j < m; j += 32) {
        float x = mrow[j];
        if (arow != NULL) {
            x += arow[j];
            mrow[j] = x;
        }
        for (int k = 0; k < R; k++)
            acc[k] = __fmaf_rn(x, q[j * R + k], acc[k]);
    }
    d_store_row<R>(acc, lane, ps[blockIdx.y] + row * R);
}

// The deferred error update fused into the right product: per element
// y = Pd Qd^T as k_reconstruct forms it, M' = (M - y) + add stored, and
// P = M' Q accumulated as k_right_fused does; one warp per row.
template <int R>
__global__ static void
k_right_ef(float *const *mats,
           const float *const *adds,
           size_t n,
           size_t m,
           const float *const *pds,
           const float *const *qds,
           const float *const *qs,
           float *const *ps)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    unsigned lane = threadIdx.x % 32;
    if (row >= n)
        return;
    float *mrow = mats[blockIdx.y] + row * m;
    const float *arow = adds != NULL ? adds[blockIdx.y] + row * m : NULL;
    const float *pd = pds[blockIdx.y] + row * R;
    const float *qd = qds[blockIdx.y];
    const float *q = qs[blockIdx.y];
    float pk[R], acc[R];
    for (int k = 0; k < R; k++) {
        pk[k] = pd[k];
        acc[k] = 0;
    }
    for (size_t j = lane; j < m; j += 32) {
        float y = 0;
        for (int k = 0; k < R; k++)
            y = __fmaf_rn(pk[k], qd[j * R + k], y);
        float x = mrow[j] - y;
        if (arow != NULL)
            x += arow[j];
        mrow[j] = x;
        for (int k = 0; k < R; k++)
            acc[k] = __fmaf_rn(x, q[j * R + k], acc[k]);
    }
    d_store_row<R>(acc, lane, ps[blockIdx.y] + row * R);
}

__global__ static void
k_reconstruct(size_t n,
              size_t m,
              size_t r,
              const float *const *ps,
              const float *const *qs,
              float alpha,
              float *const *es,
              float *const *outs,
              float beta)
{
    const float *p = ps[blockIdx.y];
    const float *q = qs[blockIdx.y];
    float *e = es != NULL ? es[blockIdx.y] : NULL;
    float *out = outs != NULL ? outs[blockIdx.y] : NULL;
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < n * m; idx += stride) {
        size_t i = idx / m, j = idx % m;
        float y = 0;
        for (size_t k = 0; k < r; k++)
            y = __fmaf_rn(p[i * r + k], q[j * r + k], y);
        y *= alpha;
        if (e != NULL)
            e[idx] -= y;
        if (out != NULL)
            out[idx] = (beta != 0 ? out[idx] : 0.0f) + y;
    }
}

__device__ static double
d_block_sum(double v, double *shared)
{
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads();
    return total;
}

// One block per matrix: modified Gram-Schmidt on a row-major n x r matrix.
__global__ static void
k_gram_schmidt(float *const *ps, size_t n, size_t r, float eps)
{
    __shared__ double shared[GS_THREADS];
    float *p = ps[blockIdx.x];
    for (size_t c = 0; c < r; c++) {
        double ss = 0;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x)
            ss += (double)p[i * r + c] * p[i * r + c];
        float div = (float)sqrt(d_block_sum(ss, shared)) + eps;
        if (div > 0) // a zero column stays zero, never NaN
            for (size_t i = threadIdx.x; i < n; i += blockDim.x)
                p[i * r + c] /= div;
        __syncthreads();
        for (size_t d = c + 1; d < r; d++) {
            double dot = 0;
            for (size_t i = threadIdx.x; i < n; i += blockDim.x)
                dot += (double)p[i * r + c] * p[i * r + d];
            float f = (float)d_block_sum(dot, shared);
            for (size_t i = threadIdx.x; i < n; i += blockDim.x)
                p[i * r + d] -= f * p[i * r + c];
            __syncthreads();
        }
    }
}

// --- work-list kernels (the *_list slots) --------------------------------
// Each has a plain-C twin in ref.c doing the same per-thread arithmetic
// (explicit fma, the same rows per thread, the same reduction tree); a
// change here is a change there. One block per orthogonalized matrix, one
// block per tile of the products (lowrank_tiles_plan); any shapes and
// ranks up to LOWRANK_LIST_MAX_RANK in one launch.

#define LIST_T   LOWRANK_LIST_THREADS
#define LIST_MAX LOWRANK_LIST_MAX_RANK

// The reduction ref.c's s_block_sums emulates: each thread's nv sums (nv
// <= LIST_MAX, uniform over the block), a shuffle-down tree in each warp,
// the warps' results added in warp order; out (shared) has the totals.
__device__ static void
d_block_sums(double *v, int nv, double *shared, double *out)
{
    unsigned lane = threadIdx.x % LOWRANK_WARP, w = threadIdx.x / LOWRANK_WARP;
#pragma unroll
    for (int k = 0; k < LIST_MAX; k++)
        if (k < nv)
            for (int off = LOWRANK_WARP / 2; off > 0; off >>= 1)
                v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < LIST_MAX; k++)
            if (k < nv)
                shared[w * LIST_MAX + k] = v[k];
    }
    __syncthreads();
    if ((int)threadIdx.x < nv) {
        double s = shared[threadIdx.x];
        for (int ww = 1; ww < LOWRANK_LIST_WARPS; ww++)
            s += shared[ww * LIST_MAX + threadIdx.x];
        out[threadIdx.x] = s;
    }
    __syncthreads();
}

// This thread's sums over its rows i > skip (all rows: SIZE_MAX) of
// column c times the columns c0 .. c0 + nv - 1 (ref.c's s_thread_dots).
__device__ static void
d_thread_dots(const float *p,
              size_t n,
              size_t r,
              size_t skip,
              size_t c,
              size_t c0,
              int nv,
              double *acc)
{
#pragma unroll
    for (int k = 0; k < LIST_MAX; k++)
        acc[k] = 0;
    for (size_t i = threadIdx.x; i < n; i += LIST_T) {
        if (skip != SIZE_MAX && i <= skip)
            continue;
        double x = p[i * r + c];
#pragma unroll
        for (int k = 0; k < LIST_MAX; k++)
            if (k < nv)
                acc[k] = __fma_rn(x, (double)p[i * r + c0 + k], acc[k]);
    }
}

struct cuda_red {
    double shared[LOWRANK_LIST_WARPS * LIST_MAX];
    double sums[LIST_MAX];
    double tau[LIST_MAX], w[LIST_MAX];
    double beta, scale;
    bool flip[LIST_MAX];
    double gram[LIST_MAX * LIST_MAX]; // P^T P's upper triangle, then R
    bool chol_ok;
};

// Gram-Schmidt in the ref's column order (ref.c's s_twin_gram_schmidt).
__device__ static void
d_gram_schmidt(float *p, size_t n, size_t r, float eps, struct cuda_red *s)
{
    double acc[LIST_MAX];
    for (size_t c = 0; c < r; c++) {
        d_thread_dots(p, n, r, SIZE_MAX, c, c, 1, acc);
        d_block_sums(acc, 1, s->shared, s->sums);
        float div = __fadd_rn((float)__dsqrt_rn(s->sums[0]), eps);
        if (div > 0) // a zero column stays zero
            for (size_t i = threadIdx.x; i < n; i += LIST_T)
                p[i * r + c] = __fdiv_rn(p[i * r + c], div);
        __syncthreads();
        int nv = (int)(r - c - 1);
        if (nv == 0)
            continue;
        d_thread_dots(p, n, r, SIZE_MAX, c, c + 1, nv, acc);
        d_block_sums(acc, nv, s->shared, s->sums);
        for (size_t i = threadIdx.x; i < n; i += LIST_T)
            for (int k = 0; k < nv; k++)
                p[i * r + c + 1 + k] = __fmaf_rn(-(float)s->sums[k],
                                                 p[i * r + c],
                                                 p[i * r + c + 1 + k]);
        __syncthreads();
    }
}

// Thread 0: reflector k's scalars (ref.c's s_reflector).
__device__ static void
d_reflector(const float *a, size_t r, size_t k, struct cuda_red *s)
{
    double alpha = a[k * r + k];
    if (s->sums[0] == 0) {
        s->tau[k] = 0;
        s->beta = alpha;
        return;
    }
    s->beta = -copysign(__dsqrt_rn(__fma_rn(alpha, alpha, s->sums[0])), alpha);
    s->tau[k] = __ddiv_rn(s->beta - alpha, s->beta);
    s->scale = __ddiv_rn(1.0, alpha - s->beta);
    for (size_t c = k + 1; c < r; c++)
        s->w[c] =
            __dmul_rn(s->tau[k],
                      __fma_rn(s->scale, s->sums[c - k], (double)a[k * r + c]));
}

// Householder QR in place, geqr2 then org2r (ref.c's s_twin_householder).
__device__ static void
d_householder(float *a, size_t n, size_t r, bool positive, struct cuda_red *s)
{
    double acc[LIST_MAX];
    for (size_t k = 0; k < r; k++) {
        d_thread_dots(a, n, r, k, k, k, (int)(r - k), acc);
        d_block_sums(acc, (int)(r - k), s->shared, s->sums);
        if (threadIdx.x == 0) {
            d_reflector(a, r, k, s);
            s->flip[k] = positive && s->beta < 0;
        }
        __syncthreads();
        if (s->tau[k] != 0)
            for (size_t i = threadIdx.x; i < n; i += LIST_T) {
                if (i < k)
                    continue;
                if (i == k) {
                    for (size_t c = k + 1; c < r; c++)
                        a[k * r + c] = (float)((double)a[k * r + c] - s->w[c]);
                    a[k * r + k] = (float)s->beta;
                    continue;
                }
                double v = __dmul_rn((double)a[i * r + k], s->scale);
                for (size_t c = k + 1; c < r; c++)
                    a[i * r + c] =
                        (float)__fma_rn(-s->w[c], v, (double)a[i * r + c]);
                a[i * r + k] = (float)v;
            }
        __syncthreads();
    }
    for (size_t k = r; k-- > 0;) {
        int nv = (int)(r - 1 - k);
        if (nv > 0) {
            d_thread_dots(a, n, r, k, k, k + 1, nv, acc);
            d_block_sums(acc, nv, s->shared, s->sums);
            if (threadIdx.x == 0)
                for (size_t c = k + 1; c < r; c++) // v_k = 1
                    s->w[c] =
                        __dmul_rn(s->tau[k],
                                  (double)a[k * r + c] + s->sums[c - k - 1]);
            __syncthreads();
        }
        for (size_t i = threadIdx.x; i < n; i += LIST_T) {
            if (i < k) {
                a[i * r + k] = 0;
            } else if (i == k) {
                for (size_t c = k + 1; c < r; c++)
                    a[k * r + c] = (float)((double)a[k * r + c] - s->w[c]);
                a[k * r + k] = (float)(1.0 - s->tau[k]);
            } else {
                double vi = a[i * r + k];
                for (size_t c = k + 1; c < r; c++)
                    a[i * r + c] =
                        (float)__fma_rn(-s->w[c], vi, (double)a[i * r + c]);
                a[i * r + k] = (float)__dmul_rn(-s->tau[k], vi);
            }
        }
        __syncthreads();
    }
    for (size_t i = threadIdx.x; i < n; i += LIST_T)
        for (size_t c = 0; c < r; c++)
            if (s->flip[c])
                a[i * r + c] = -a[i * r + c];
}

// The device form of an orthogonalization item: the method resolved for
// its rank on the host (lowrank_orth_resolve), as a CUDA_ORTH_* value.
struct cuda_orth_item {
    float *p;
    uint64_t n, r, how;
};
#define CUDA_ORTH_GS  0
#define CUDA_ORTH_QR  1
#define CUDA_ORTH_POS 2 // QR, R's diagonal positive (CholeskyQR2's Q)

// The Cholesky test of g = P^T P, one thread (ref.c's s_twin_cholesky):
// a pivot not above zero fails, as spotrf's.
__device__ static bool
d_cholesky(double *g, size_t r)
{
    for (size_t k = 0; k < r; k++) {
        double d = g[k * r + k];
        for (size_t i = 0; i < k; i++)
            d = __dsub_rn(d, __dmul_rn(g[i * r + k], g[i * r + k]));
        if (!(d > 0))
            return false;
        double rkk = __dsqrt_rn(d);
        g[k * r + k] = rkk;
        for (size_t j = k + 1; j < r; j++) {
            double v = g[k * r + j];
            for (size_t i = 0; i < k; i++)
                v = __dsub_rn(v, __dmul_rn(g[i * r + k], g[i * r + j]));
            g[k * r + j] = __ddiv_rn(v, rkk);
        }
    }
    return true;
}

// Whether P^T P, summed in double, has a Cholesky factor (ref.c's
// s_twin_cholesky_ok): CholeskyQR2's fallback decision.
__device__ static bool
d_cholesky_ok(const float *p, size_t n, size_t r, struct cuda_red *s)
{
    double acc[LIST_MAX];
    for (size_t c = 0; c < r; c++) {
        d_thread_dots(p, n, r, SIZE_MAX, c, c, (int)(r - c), acc);
        d_block_sums(acc, (int)(r - c), s->shared, s->gram + c * r + c);
    }
    if (threadIdx.x == 0)
        s->chol_ok = d_cholesky(s->gram, r);
    __syncthreads();
    return s->chol_ok;
}

// One block's matrix (ref.c's lowrank_ref_orth_block).
__device__ static void
d_orth(float *p,
       size_t n,
       size_t r,
       uint64_t how,
       float eps,
       struct cuda_red *s)
{
    if (how == CUDA_ORTH_POS && !d_cholesky_ok(p, n, r, s))
        how = CUDA_ORTH_GS; // the cpu backend's fallback when spotrf fails
    if (how == CUDA_ORTH_GS)
        d_gram_schmidt(p, n, r, eps, s);
    else
        d_householder(p, n, r, how == CUDA_ORTH_POS, s);
}

// One block per matrix of a work list.
__global__ static void
k_orth_list(const struct cuda_orth_item *items, float eps)
{
    __shared__ struct cuda_red s;
    struct cuda_orth_item it = items[blockIdx.x];
    d_orth(it.p, it.n, it.r, it.how, eps, &s);
}

// One block per matrix of a group of one shape (orthogonalize_batch and
// the single-matrix slot, which PowerGossip calls): the same code, so no
// rank up to 16 goes through cuSOLVER and its blocking status read.
__global__ static void
k_orth_group(float *const *ps, size_t n, size_t r, uint64_t how, float eps)
{
    __shared__ struct cuda_red s;
    d_orth(ps[blockIdx.x], n, r, how, eps, &s);
}

// One matrix, its address a kernel argument: no pointer list to upload.
__global__ static void
k_orth_one(float *p, size_t n, size_t r, uint64_t how, float eps)
{
    __shared__ struct cuda_red s;
    d_orth(p, n, r, how, eps, &s);
}

// The CUDA_ORTH_* value of a method at rank r.
static uint64_t
s_orth_how(rumor_lowrank_orth method, size_t r)
{
    rumor_lowrank_orth how = lowrank_orth_resolve(method, r);
    if (how == RUMOR_LOWRANK_ORTH_GS)
        return CUDA_ORTH_GS;
    return how == RUMOR_LOWRANK_ORTH_CHOLQR2 ? CUDA_ORTH_POS : CUDA_ORTH_QR;
}

// P = M' Q over tiles of LOWRANK_RIGHT_ROWS rows, a warp per row, R >=
// every item's rank (ref.c's lowrank_ref_right_tile): M' = (M - Pd Qd^T)
// + add, stored when either is there, as k_right_ef / k_right_fused.
template <int R>
__global__ static void
k_right_list(const struct lowrank_mat_item *items,
             const struct lowrank_tile *tiles)
{
    const struct lowrank_tile t = tiles[blockIdx.x];
    const struct lowrank_mat_item it = items[t.item];
    size_t row = t.lo + threadIdx.x / LOWRANK_WARP;
    unsigned lane = threadIdx.x % LOWRANK_WARP;
    if (row >= t.hi)
        return;
    int r = (int)it.r;
    size_t m = it.m;
    float *mrow = it.mat + row * m;
    const float *arow = it.add != NULL ? it.add + row * m : NULL;
    bool store = it.pd != NULL || arow != NULL;
    float pk[R], acc[R];
#pragma unroll
    for (int k = 0; k < R; k++) {
        acc[k] = 0;
        pk[k] = it.pd != NULL && k < r ? it.pd[row * r + k] : 0.0f;
    }
    for (size_t j = lane; j < m; j += LOWRANK_WARP) {
        float x = mrow[j];
        if (it.pd != NULL) {
            float y = 0;
#pragma unroll
            for (int k = 0; k < R; k++)
                if (k < r)
                    y = __fmaf_rn(pk[k], it.qd[j * r + k], y);
            x = __fsub_rn(x, y);
        }
        if (arow != NULL)
            x = __fadd_rn(x, arow[j]);
        if (store)
            mrow[j] = x;
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < r)
                acc[k] = __fmaf_rn(x, it.q[j * r + k], acc[k]);
    }
#pragma unroll
    for (int k = 0; k < R; k++)
        for (int off = LOWRANK_WARP / 2; off > 0; off >>= 1)
            acc[k] += __shfl_down_sync(0xffffffffu, acc[k], off);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < R; k++) // unrolled: acc stays in registers
            if (k < r)
                it.p[row * r + k] = acc[k];
    }
}

// Q = M'^T P over tiles of a warp-wide column strip and LOWRANK_LEFT_ROWS
// rows (ref.c's lowrank_ref_left_tile): lane = column, warps split the
// rows, the warps' sums added in warp order; a strip of several tiles
// leaves partial sums in scratch and the last tile to finish (a counter
// per strip, reset for the next launch) adds them in tile order.
template <int R>
__global__ static void
k_left_list(const struct lowrank_mat_item *items,
            const struct lowrank_tile *tiles,
            float *scratch,
            unsigned *counters)
{
    __shared__ float part[LOWRANK_LIST_WARPS][LOWRANK_WARP][R];
    __shared__ bool last;
    const struct lowrank_tile t = tiles[blockIdx.x];
    const struct lowrank_mat_item it = items[t.item];
    unsigned lane = threadIdx.x % LOWRANK_WARP, w = threadIdx.x / LOWRANK_WARP;
    int r = (int)it.r;
    size_t m = it.m, j = t.col + lane;
    float acc[R];
#pragma unroll
    for (int k = 0; k < R; k++)
        acc[k] = 0;
    if (j < m)
        for (size_t i = t.lo + w; i < t.hi; i += LOWRANK_LIST_WARPS) {
            float x = it.mat[i * m + j];
            if (it.add != NULL) {
                x = __fadd_rn(x, it.add[i * m + j]);
                it.mat[i * m + j] = x;
            }
#pragma unroll
            for (int k = 0; k < R; k++)
                if (k < r)
                    acc[k] = __fmaf_rn(x, it.p[i * r + k], acc[k]);
        }
#pragma unroll
    for (int k = 0; k < R; k++)
        part[w][lane][k] = acc[k];
    __syncthreads();
    float *all = scratch + t.partial;
    if (w == 0 && j < m)
        for (int k = 0; k < r; k++) {
            float s = part[0][lane][k];
            for (int ww = 1; ww < LOWRANK_LIST_WARPS; ww++)
                s = __fadd_rn(s, part[ww][lane][k]);
            if (t.parts == 1)
                it.q[j * r + k] = s;
            else
                all[((size_t)t.part * LOWRANK_WARP + lane) * r + k] = s;
        }
    if (t.parts == 1)
        return;
    __threadfence(); // the partial sums before the count
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&counters[t.strip], 1u) == t.parts - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (w == 0 && j < m)
        for (int k = 0; k < r; k++) {
            float s = __ldcg(&all[lane * r + k]);
            for (unsigned q = 1; q < t.parts; q++)
                s = __fadd_rn(s,
                              __ldcg(&all[(q * LOWRANK_WARP + lane) * r + k]));
            it.q[j * r + k] = s;
        }
    if (threadIdx.x == 0)
        counters[t.strip] = 0;
}

// Y = P Q^T over tiles of elements; with_e: M -= Y; out = beta out + Y
// (ref.c's lowrank_ref_recon_tile).
__global__ static void
k_recon_list(const struct lowrank_mat_item *items,
             const struct lowrank_tile *tiles,
             bool with_e,
             float beta)
{
    const struct lowrank_tile t = tiles[blockIdx.x];
    const struct lowrank_mat_item it = items[t.item];
    size_t m = it.m, r = it.r;
    size_t idx = t.lo + threadIdx.x;
    // Row and column by division once per thread, then stepped: a 64-bit
    // division per element would cost as much as the element's traffic.
    size_t i = idx / m, j = idx % m;
    const size_t di = LIST_T / m, dj = LIST_T % m;
    for (; idx < t.hi; idx += LIST_T) {
        float y = 0;
        for (size_t k = 0; k < r; k++)
            y = __fmaf_rn(it.p[i * r + k], it.q[j * r + k], y);
        if (with_e)
            it.mat[idx] = __fsub_rn(it.mat[idx], y);
        if (it.out != NULL)
            it.out[idx] = __fadd_rn(beta != 0 ? it.out[idx] : 0.0f, y);
        i += di;
        j += dj;
        if (j >= m) {
            j -= m;
            i++;
        }
    }
}

static unsigned
s_blocks(size_t count)
{
    size_t b = (count + 255) / 256;
    if (b < 1)
        b = 1;
    return b > 65535 ? 65535u : (unsigned)b;
}

static uint64_t
s_hash_ptrs(void *const *list, size_t len)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a over the addresses
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint64_t)(uintptr_t)list[i]) * 1099511628211ull;
    return h;
}

// The cached device copy of key[0..len), uploaded on a miss into the
// least recently used slot (cudaFree of its old copy waits for the kernels
// that may still read it).
static rumor_err
s_ptrs_lookup(struct cuda_ctx *c, size_t len, void ***dev)
{
    rumor_err rc = RUMOR_OK;
    uint64_t hash = s_hash_ptrs(c->key, len);
    struct cuda_ptrs *slot = &c->ptrs[0];
    c->calls++;
    for (int i = 0; i < CUDA_PTR_CACHE; i++) {
        struct cuda_ptrs *e = &c->ptrs[i];
        if (e->len == len && e->hash == hash &&
            memcmp(e->host, c->key, len * sizeof *c->key) == 0) {
            e->used = c->calls;
            *dev = e->dev;
            return RUMOR_OK;
        }
        if (e->used < slot->used)
            slot = e;
    }
    free(slot->host);
    cudaFree(slot->dev);
    *slot = (struct cuda_ptrs){0};
    slot->host = (void **)malloc(len * sizeof *slot->host);
    if (slot->host == NULL)
        return RUMOR_ENOMEM;
    CUDA_TRY(cudaMalloc((void **)&slot->dev, len * sizeof *slot->dev), done);
    CUDA_TRY(cudaMemcpyAsync(slot->dev,
                             c->key,
                             len * sizeof *c->key,
                             cudaMemcpyHostToDevice,
                             s_stream()),
             done);
    memcpy(slot->host, c->key, len * sizeof *c->key);
    slot->len = len;
    slot->hash = hash;
    slot->used = c->calls;
    *dev = slot->dev;
done:
    if (rc != RUMOR_OK) {
        free(slot->host);
        cudaFree(slot->dev);
        *slot = (struct cuda_ptrs){0};
    }
    return rc;
}

// The device copies of up to CUDA_PTR_ARRAYS host arrays of count device
// pointers (one cached list for the call); out[a] is NULL where hs[a] is.
static rumor_err
s_ptrs(struct cuda_ctx *c,
       const void *const *const *hs,
       int arrays,
       size_t count,
       void **out[CUDA_PTR_ARRAYS])
{
    size_t len = (size_t)arrays * count;
    if (len > c->key_cap) {
        void **grown = (void **)realloc(c->key, len * sizeof *grown);
        if (grown == NULL)
            return RUMOR_ENOMEM;
        c->key = grown;
        c->key_cap = len;
    }
    for (int a = 0; a < arrays; a++)
        for (size_t i = 0; i < count; i++)
            c->key[a * count + i] = hs[a] != NULL ? (void *)hs[a][i] : NULL;
    void **dev = NULL;
    rumor_err rc = s_ptrs_lookup(c, len, &dev);
    for (int a = 0; a < arrays; a++)
        out[a] = rc == RUMOR_OK && hs[a] != NULL ? dev + a * count : NULL;
    return rc;
}

// --- interface ------------------------------------------------------------

static rumor_err
s_alloc(void *ctx, size_t bytes, float **out)
{
    (void)ctx;
    rumor_err rc = RUMOR_OK;
    void *mem = NULL;
    *out = NULL;
    CUDA_TRY(cudaMalloc(&mem, bytes > 0 ? bytes : 4), fail);
    CUDA_TRY(cudaMemsetAsync(mem, 0, bytes > 0 ? bytes : 4, s_stream()), fail);
    *out = (float *)mem;
    return RUMOR_OK;
fail:
    cudaFree(mem);
    return rc == RUMOR_EBACKEND ? RUMOR_ENOMEM : rc;
}

static void
s_release(void *ctx, float *ptr)
{
    (void)ctx;
    if (ptr != NULL)
        cudaFree(ptr);
}

// A copy between host and device that is done when it returns, as a
// cudaMemcpy left it (the source reusable, the destination readable).
static rumor_err
s_copy_done(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    rumor_err rc = RUMOR_OK;
    if (bytes == 0)
        return RUMOR_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, s_stream()), done);
    CUDA_TRY(cudaStreamSynchronize(s_stream()), done);
done:
    return rc;
}

static rumor_err
s_upload(void *ctx, float *dst, const float *src, size_t bytes)
{
    (void)ctx;
    return s_copy_done(dst, src, bytes, cudaMemcpyHostToDevice);
}

static rumor_err
s_download(void *ctx, float *dst, const float *src, size_t bytes)
{
    (void)ctx;
    return s_copy_done(dst, src, bytes, cudaMemcpyDeviceToHost);
}

// cuBLAS and cuSOLVER queue on the thread's stream of the current device
// (a handle keeps the stream last set; the caller's thread may have moved).
static rumor_err
s_bind(struct cuda_ctx *c)
{
    rumor_err rc = RUMOR_OK;
    CUBLAS_TRY(cublasSetStream(c->blas, s_stream()), done);
    CUSOLVER_TRY(cusolverDnSetStream(c->solver, s_stream()), done);
done:
    return rc;
}

#define CUDA_MAX_BATCH 65535 // gridDim.y limit; larger groups go in chunks

static rumor_err
s_project_right_batch(void *ctx,
                      float *const *mats,
                      const float *const *adds,
                      size_t n,
                      size_t m,
                      const float *const *qs,
                      size_t r,
                      float *const *ps,
                      size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = s_bind(c);
    if (rc != RUMOR_OK)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    for (size_t at = 0; at < count; at += CUDA_MAX_BATCH) {
        size_t b = count - at < CUDA_MAX_BATCH ? count - at : CUDA_MAX_BATCH;
        void **d[CUDA_PTR_ARRAYS];
        const void *const *h[4] = {
            (const void *const *)(mats + at),
            adds != NULL ? (const void *const *)(adds + at) : NULL,
            (const void *const *)(qs + at),
            (const void *const *)(ps + at)};
        rc = s_ptrs(c, h, 4, b, d);
        if (rc != RUMOR_OK)
            goto done;
        float *const *dm = (float *const *)d[0];
        const float *const *da = (const float *const *)d[1];
        const float *const *dq = (const float *const *)d[2];
        float *const *dp = (float *const *)d[3];
        if (r <= 8) {
            dim3 grid((unsigned)((n + 7) / 8), (unsigned)b);
            switch (r) {
            case 1:
                k_right_fused<1>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 2:
                k_right_fused<2>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 3:
                k_right_fused<3>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 4:
                k_right_fused<4>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 5:
                k_right_fused<5>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 6:
                k_right_fused<6>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            case 7:
                k_right_fused<7>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            default:
                k_right_fused<8>
                    <<<grid, 256, 0, s_stream()>>>(dm, da, n, m, dq, dp);
                break;
            }
            CUDA_TRY(cudaGetLastError(), done);
            continue;
        }
        if (da != NULL) {
            k_add<<<dim3(s_blocks(n * m), (unsigned)b), 256, 0, s_stream()>>>(
                dm,
                da,
                n * m);
            CUDA_TRY(cudaGetLastError(), done);
        }
        // Column-major view: P^T (r x n) = Q^T (r x m) * M^T (m x n).
        CUBLAS_TRY(cublasSgemmBatched(c->blas,
                                      CUBLAS_OP_N,
                                      CUBLAS_OP_N,
                                      (int)r,
                                      (int)n,
                                      (int)m,
                                      &one,
                                      dq,
                                      (int)r,
                                      (const float *const *)dm,
                                      (int)m,
                                      &zero,
                                      (float *const *)dp,
                                      (int)r,
                                      (int)b),
                   done);
    }
done:
    return rc;
}

static rumor_err
s_project_left_batch(void *ctx,
                     float *const *mats,
                     const float *const *adds,
                     size_t n,
                     size_t m,
                     const float *const *ps,
                     size_t r,
                     float *const *qs,
                     size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = s_bind(c);
    if (rc != RUMOR_OK)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    for (size_t at = 0; at < count; at += CUDA_MAX_BATCH) {
        size_t b = count - at < CUDA_MAX_BATCH ? count - at : CUDA_MAX_BATCH;
        void **d[CUDA_PTR_ARRAYS];
        const void *const *h[4] = {
            (const void *const *)(mats + at),
            adds != NULL ? (const void *const *)(adds + at) : NULL,
            (const void *const *)(ps + at),
            (const void *const *)(qs + at)};
        rc = s_ptrs(c, h, 4, b, d);
        if (rc != RUMOR_OK)
            goto done;
        if (d[1] != NULL) {
            k_add<<<dim3(s_blocks(n * m), (unsigned)b), 256, 0, s_stream()>>>(
                (float *const *)d[0],
                (const float *const *)d[1],
                n * m);
            CUDA_TRY(cudaGetLastError(), done);
        }
        // Column-major view: Q^T (r x m) = P^T (r x n) * M (n x m), M
        // stored as its transpose (m x n), hence OP_T.
        CUBLAS_TRY(cublasSgemmBatched(c->blas,
                                      CUBLAS_OP_N,
                                      CUBLAS_OP_T,
                                      (int)r,
                                      (int)m,
                                      (int)n,
                                      &one,
                                      (const float *const *)d[2],
                                      (int)r,
                                      (const float *const *)d[0],
                                      (int)m,
                                      &zero,
                                      (float *const *)d[3],
                                      (int)r,
                                      (int)b),
                   done);
    }
done:
    return rc;
}

// signs[c] = the sign of R's diagonal entry c (column-major a, n x r,
// after geqrf: R is its upper triangle).
__global__ static void
k_diag_signs(const float *a, size_t n, size_t r, float *signs)
{
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c < r)
        signs[c] = a[c * n + c] < 0 ? -1.0f : 1.0f;
}

// Column c of the column-major Q (n x r) times signs[c].
__global__ static void
k_scale_columns(float *a, size_t n, size_t r, const float *signs)
{
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < n * r; idx += stride)
        a[idx] *= signs[idx / n];
}

// Householder QR of P (n x r, row-major) in place. positive: flip the
// columns whose R diagonal entry is negative, which gives the QR with a
// positive diagonal, the one CholeskyQR2 computes on the cpu backend, so
// nodes of a mixed cpu/cuda run orthogonalize to the same factor.
static rumor_err
s_qr(struct cuda_ctx *c, float *p, size_t n, size_t r, bool positive)
{
    rumor_err rc = s_bind(c);
    if (rc != RUMOR_OK)
        return rc;
    const float one = 1.0f, zero = 0.0f;
    int lwork_geqrf = 0, lwork_orgqr = 0, info = 0;
    float *a = NULL, *tau = NULL, *signs = NULL, *work = NULL;
    size_t need = 0;
    CUSOLVER_TRY(cusolverDnSgeqrf_bufferSize(c->solver,
                                             (int)n,
                                             (int)r,
                                             p,
                                             (int)n,
                                             &lwork_geqrf),
                 done);
    CUSOLVER_TRY(cusolverDnSorgqr_bufferSize(c->solver,
                                             (int)n,
                                             (int)r,
                                             (int)r,
                                             p,
                                             (int)n,
                                             p,
                                             &lwork_orgqr),
                 done);
    need = n * r + 2 * r +
           (size_t)(lwork_geqrf > lwork_orgqr ? lwork_geqrf : lwork_orgqr);
    if (need > c->cap) {
        void *grown = NULL;
        CUDA_TRY(cudaMalloc(&grown, need * sizeof(float)), done);
        cudaFree(c->scratch);
        c->scratch = (float *)grown;
        c->cap = need;
    }
    a = c->scratch;
    tau = a + n * r;
    signs = tau + r;
    work = signs + r;
    // Row-major P (n x r) is column-major P^T (r x n): transpose to A.
    CUBLAS_TRY(cublasSgeam(c->blas,
                           CUBLAS_OP_T,
                           CUBLAS_OP_N,
                           (int)n,
                           (int)r,
                           &one,
                           p,
                           (int)r,
                           &zero,
                           a,
                           (int)n,
                           a,
                           (int)n),
               done);
    CUSOLVER_TRY(cusolverDnSgeqrf(c->solver,
                                  (int)n,
                                  (int)r,
                                  a,
                                  (int)n,
                                  tau,
                                  work,
                                  lwork_geqrf,
                                  c->info),
                 done);
    if (positive) {
        k_diag_signs<<<(unsigned)((r + 31) / 32), 32, 0, s_stream()>>>(a,
                                                                       n,
                                                                       r,
                                                                       signs);
        CUDA_TRY(cudaGetLastError(), done);
    }
    CUSOLVER_TRY(cusolverDnSorgqr(c->solver,
                                  (int)n,
                                  (int)r,
                                  (int)r,
                                  a,
                                  (int)n,
                                  tau,
                                  work,
                                  lwork_orgqr,
                                  c->info),
                 done);
    rc = s_copy_done(&info, c->info, sizeof info, cudaMemcpyDeviceToHost);
    if (rc != RUMOR_OK)
        goto done;
    if (info != 0) {
        rc = RUMOR_EBACKEND;
        goto done;
    }
    if (positive) {
        k_scale_columns<<<s_blocks(n * r), 256, 0, s_stream()>>>(a,
                                                                 n,
                                                                 r,
                                                                 signs);
        CUDA_TRY(cudaGetLastError(), done);
    }
    CUBLAS_TRY(cublasSgeam(c->blas,
                           CUBLAS_OP_T,
                           CUBLAS_OP_N,
                           (int)r,
                           (int)n,
                           &one,
                           a,
                           (int)n,
                           &zero,
                           p,
                           (int)r,
                           p,
                           (int)r),
               done);
done:
    return rc;
}

static rumor_err
s_orthogonalize_batch(void *ctx,
                      float *const *ps,
                      size_t n,
                      size_t r,
                      rumor_lowrank_orth method,
                      float eps,
                      size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = RUMOR_OK;
    rumor_lowrank_orth how = lowrank_orth_resolve(method, r);
    bool own = r <= LIST_MAX && r <= n; // k_orth_group's range
    if (how != RUMOR_LOWRANK_ORTH_GS && !own) {
        for (size_t i = 0; rc == RUMOR_OK && i < count; i++)
            rc = s_qr(c, ps[i], n, r, how == RUMOR_LOWRANK_ORTH_CHOLQR2);
        return rc;
    }
    for (size_t at = 0; at < count; at += CUDA_MAX_BATCH) {
        size_t b = count - at < CUDA_MAX_BATCH ? count - at : CUDA_MAX_BATCH;
        void **d[CUDA_PTR_ARRAYS];
        const void *const *h[1] = {(const void *const *)(ps + at)};
        rc = s_ptrs(c, h, 1, b, d);
        if (rc != RUMOR_OK)
            goto done;
        if (own)
            k_orth_group<<<(unsigned)b, LIST_T, 0, s_stream()>>>(
                (float *const *)d[0],
                n,
                r,
                s_orth_how(method, r),
                eps);
        else
            k_gram_schmidt<<<(unsigned)b, GS_THREADS, 0, s_stream()>>>(
                (float *const *)d[0],
                n,
                r,
                eps);
        CUDA_TRY(cudaGetLastError(), done);
    }
done:
    return rc;
}

static rumor_err
s_reconstruct_batch(void *ctx,
                    size_t n,
                    size_t m,
                    size_t r,
                    const float *const *ps,
                    const float *const *qs,
                    float alpha,
                    float *const *es,
                    float *const *outs,
                    float beta,
                    size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = RUMOR_OK;
    for (size_t at = 0; at < count; at += CUDA_MAX_BATCH) {
        size_t b = count - at < CUDA_MAX_BATCH ? count - at : CUDA_MAX_BATCH;
        void **d[CUDA_PTR_ARRAYS];
        const void *const *h[4] = {
            (const void *const *)(ps + at),
            (const void *const *)(qs + at),
            es != NULL ? (const void *const *)(es + at) : NULL,
            outs != NULL ? (const void *const *)(outs + at) : NULL};
        rc = s_ptrs(c, h, 4, b, d);
        if (rc != RUMOR_OK)
            goto done;
        k_reconstruct<<<dim3(s_blocks(n * m), (unsigned)b),
                        256,
                        0,
                        s_stream()>>>(n,
                                      m,
                                      r,
                                      (const float *const *)d[0],
                                      (const float *const *)d[1],
                                      alpha,
                                      (float *const *)d[2],
                                      (float *const *)d[3],
                                      beta);
        CUDA_TRY(cudaGetLastError(), done);
    }
done:
    return rc;
}

// The deferred error update and the right product in one pass (r <= 8);
// above, the two operations it stands for.
static rumor_err
s_project_right_ef_batch(void *ctx,
                         float *const *mats,
                         const float *const *adds,
                         size_t n,
                         size_t m,
                         const float *const *pds,
                         const float *const *qds,
                         const float *const *qs,
                         size_t r,
                         float *const *ps,
                         size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = RUMOR_OK;
    if (r > 8) {
        rc = s_reconstruct_batch(ctx,
                                 n,
                                 m,
                                 r,
                                 pds,
                                 qds,
                                 1.0f,
                                 mats,
                                 NULL,
                                 0.0f,
                                 count);
        if (rc == RUMOR_OK)
            rc = s_project_right_batch(ctx, mats, adds, n, m, qs, r, ps, count);
        return rc;
    }
    for (size_t at = 0; at < count; at += CUDA_MAX_BATCH) {
        size_t b = count - at < CUDA_MAX_BATCH ? count - at : CUDA_MAX_BATCH;
        void **d[CUDA_PTR_ARRAYS];
        const void *const *h[6] = {
            (const void *const *)(mats + at),
            adds != NULL ? (const void *const *)(adds + at) : NULL,
            (const void *const *)(pds + at),
            (const void *const *)(qds + at),
            (const void *const *)(qs + at),
            (const void *const *)(ps + at)};
        rc = s_ptrs(c, h, 6, b, d);
        if (rc != RUMOR_OK)
            goto done;
        dim3 grid((unsigned)((n + 7) / 8), (unsigned)b);
#define CUDA_EF_CASE(R)                                                \
    case R:                                                            \
        k_right_ef<R>                                                  \
            <<<grid, 256, 0, s_stream()>>>((float *const *)d[0],       \
                                           (const float *const *)d[1], \
                                           n,                          \
                                           m,                          \
                                           (const float *const *)d[2], \
                                           (const float *const *)d[3], \
                                           (const float *const *)d[4], \
                                           (float *const *)d[5]);      \
        break;
        switch (r) {
            CUDA_EF_CASE(1)
            CUDA_EF_CASE(2)
            CUDA_EF_CASE(3)
            CUDA_EF_CASE(4)
            CUDA_EF_CASE(5)
            CUDA_EF_CASE(6)
            CUDA_EF_CASE(7)
        default:
            CUDA_EF_CASE(8)
        }
#undef CUDA_EF_CASE
        CUDA_TRY(cudaGetLastError(), done);
    }
done:
    return rc;
}

static rumor_err
s_copy(void *ctx, float *dst, const float *src, size_t bytes)
{
    (void)ctx;
    rumor_err rc = RUMOR_OK;
    if (bytes > 0 && dst != src)
        CUDA_TRY(cudaMemcpyAsync(dst,
                                 src,
                                 bytes,
                                 cudaMemcpyDeviceToDevice,
                                 s_stream()),
                 done);
done:
    return rc;
}

// Single-matrix operations: batches of one.

static rumor_err
s_project_right_ef(void *ctx,
                   float *mat,
                   const float *add,
                   size_t n,
                   size_t m,
                   const float *pd,
                   const float *qd,
                   const float *q,
                   size_t r,
                   float *p)
{
    return s_project_right_ef_batch(ctx,
                                    &mat,
                                    add != NULL ? &add : NULL,
                                    n,
                                    m,
                                    &pd,
                                    &qd,
                                    &q,
                                    r,
                                    &p,
                                    1);
}

static rumor_err
s_project_right(void *ctx,
                float *mat,
                const float *add,
                size_t n,
                size_t m,
                const float *q,
                size_t r,
                float *p)
{
    return s_project_right_batch(ctx,
                                 &mat,
                                 add != NULL ? &add : NULL,
                                 n,
                                 m,
                                 &q,
                                 r,
                                 &p,
                                 1);
}

static rumor_err
s_project_left(void *ctx,
               float *mat,
               const float *add,
               size_t n,
               size_t m,
               const float *p,
               size_t r,
               float *q)
{
    return s_project_left_batch(ctx,
                                &mat,
                                add != NULL ? &add : NULL,
                                n,
                                m,
                                &p,
                                r,
                                &q,
                                1);
}

static rumor_err
s_orthogonalize(void *ctx,
                float *p,
                size_t n,
                size_t r,
                rumor_lowrank_orth method,
                float eps)
{
    rumor_err rc = RUMOR_OK;
    if (r > LIST_MAX || r > n)
        return s_orthogonalize_batch(ctx, &p, n, r, method, eps, 1);
    k_orth_one<<<1, LIST_T, 0, s_stream()>>>(p,
                                             n,
                                             r,
                                             s_orth_how(method, r),
                                             eps);
    CUDA_TRY(cudaGetLastError(), done);
done:
    return rc;
}

static rumor_err
s_reconstruct(void *ctx,
              size_t n,
              size_t m,
              size_t r,
              const float *p,
              const float *q,
              float alpha,
              float *e,
              float *out,
              float beta)
{
    return s_reconstruct_batch(ctx,
                               n,
                               m,
                               r,
                               &p,
                               &q,
                               alpha,
                               e != NULL ? &e : NULL,
                               out != NULL ? &out : NULL,
                               beta,
                               1);
}

// --- work-list slots ------------------------------------------------------

// A work list's device form, kept from call to call and found again by
// its key (the list's bytes and a tag): PowerSGD passes the same lists
// every step, so after the first step a phase is one launch with no
// upload and no host synchronization.
struct cuda_plan {
    size_t words;  // of the key (0: slot unused)
    uint64_t hash; // of the key
    uint64_t used; // the call count when last used
    uint64_t *key; // host copy of the key
    char *dev;     // items, then tiles, counters and partial sums
    size_t ntiles; // tiles (products) or items (orthogonalization)
    int rmax;      // largest rank in the list
    size_t tiles_at, counters_at, scratch_at; // byte offsets in dev
};

#define CUDA_PLAN_TAG_ORTH 0x4f525448u // a key's first word: its kind
#define CUDA_PLAN_TAG_MAT  0x4d415453u

static uint64_t
s_hash_words(const uint64_t *w, size_t words)
{
    uint64_t h = 1469598103934665603ull; // FNV-1a over the words
    for (size_t i = 0; i < words; i++)
        h = (h ^ w[i]) * 1099511628211ull;
    return h;
}

static void
s_plan_clear(struct cuda_plan *p)
{
    free(p->key);
    cudaFree(p->dev);
    *p = (struct cuda_plan){0};
}

// The plan stored under c->key[0..words), or a cleared least recently
// used slot with the key copied in (*fresh: the caller fills it).
static rumor_err
s_plan_slot(struct cuda_ctx *c,
            size_t words,
            struct cuda_plan **out,
            bool *fresh)
{
    uint64_t hash = s_hash_words(c->plan_key, words);
    struct cuda_plan *slot = &c->plans[0];
    c->calls++;
    for (int i = 0; i < CUDA_PLAN_CACHE; i++) {
        struct cuda_plan *e = &c->plans[i];
        if (e->words == words && e->hash == hash &&
            memcmp(e->key, c->plan_key, words * sizeof *e->key) == 0) {
            e->used = c->calls;
            *out = e;
            *fresh = false;
            return RUMOR_OK;
        }
        if (e->used < slot->used)
            slot = e;
    }
    s_plan_clear(slot); // cudaFree waits for kernels still reading it
    slot->key = (uint64_t *)malloc(words * sizeof *slot->key);
    if (slot->key == NULL)
        return RUMOR_ENOMEM;
    memcpy(slot->key, c->plan_key, words * sizeof *slot->key);
    slot->words = words;
    slot->hash = hash;
    slot->used = c->calls;
    *out = slot;
    *fresh = true;
    return RUMOR_OK;
}

static rumor_err
s_plan_key(struct cuda_ctx *c, size_t words)
{
    if (words <= c->plan_cap)
        return RUMOR_OK;
    uint64_t *grown = (uint64_t *)realloc(c->plan_key, words * sizeof *grown);
    if (grown == NULL)
        return RUMOR_ENOMEM;
    c->plan_key = grown;
    c->plan_cap = words;
    return RUMOR_OK;
}

static_assert(sizeof(struct cuda_orth_item) == 4 * sizeof(uint64_t),
              "orth items are keyed as words");
static_assert(sizeof(struct lowrank_mat_item) % sizeof(uint64_t) == 0,
              "mat items are keyed as words");

static rumor_err
s_orthogonalize_list(void *ctx,
                     const struct lowrank_orth_item *items,
                     size_t count,
                     rumor_lowrank_orth method,
                     float eps)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    rumor_err rc = RUMOR_OK;
    struct cuda_plan *plan = NULL;
    bool fresh = false;
    size_t bytes = count * sizeof(struct cuda_orth_item);
    if (count == 0)
        return RUMOR_OK;
    rc = s_plan_key(c, 1 + bytes / sizeof(uint64_t));
    if (rc != RUMOR_OK)
        return rc;
    c->plan_key[0] = CUDA_PLAN_TAG_ORTH;
    struct cuda_orth_item *dst = (struct cuda_orth_item *)(c->plan_key + 1);
    for (size_t i = 0; i < count; i++) {
        size_t r = items[i].r;
        if (r == 0 || r > LIST_MAX || r > items[i].n)
            return RUMOR_EINVAL;
        dst[i] = (struct cuda_orth_item){items[i].p,
                                         items[i].n,
                                         r,
                                         s_orth_how(method, r)};
    }
    rc = s_plan_slot(c, 1 + bytes / sizeof(uint64_t), &plan, &fresh);
    if (rc != RUMOR_OK)
        return rc;
    if (fresh) {
        CUDA_TRY(cudaMalloc((void **)&plan->dev, bytes), fail);
        CUDA_TRY(cudaMemcpyAsync(plan->dev,
                                 dst,
                                 bytes,
                                 cudaMemcpyHostToDevice,
                                 s_stream()),
                 fail);
        plan->ntiles = count;
    }
    k_orth_list<<<(unsigned)plan->ntiles, LIST_T, 0, s_stream()>>>(
        (const struct cuda_orth_item *)plan->dev,
        eps);
    CUDA_TRY(cudaGetLastError(), done);
done:
    return rc;
fail:
    s_plan_clear(plan);
    return rc;
}

// Fills a fresh product plan: items, the phase's tiles (lowrank_tiles_plan,
// host code the CPU tests cover), zeroed strip counters and partial sums.
static rumor_err
s_plan_fill(struct cuda_plan *plan,
            enum lowrank_phase phase,
            const struct lowrank_mat_item *items,
            size_t count)
{
    rumor_err rc = RUMOR_OK;
    size_t strips = 0, floats = 0;
    size_t nt = lowrank_tiles_plan(phase, items, count, NULL, &strips, &floats);
    size_t ibytes = count * sizeof *items;
    size_t tbytes = nt * sizeof(struct lowrank_tile);
    size_t cbytes = (strips * sizeof(unsigned) + 255) / 256 * 256;
    struct lowrank_tile *tiles =
        (struct lowrank_tile *)malloc((nt > 0 ? nt : 1) * sizeof *tiles);
    if (tiles == NULL)
        return RUMOR_ENOMEM;
    lowrank_tiles_plan(phase, items, count, tiles, &strips, &floats);
    plan->ntiles = nt;
    plan->rmax = 1;
    for (size_t i = 0; i < count; i++)
        if ((int)items[i].r > plan->rmax)
            plan->rmax = (int)items[i].r;
    plan->tiles_at = (ibytes + 255) / 256 * 256;
    plan->counters_at = plan->tiles_at + (tbytes + 255) / 256 * 256;
    plan->scratch_at = plan->counters_at + cbytes;
    size_t all = plan->scratch_at + floats * sizeof(float);
    CUDA_TRY(cudaMalloc((void **)&plan->dev, all), done);
    CUDA_TRY(cudaMemsetAsync(plan->dev, 0, all, s_stream()), done);
    CUDA_TRY(cudaMemcpyAsync(plan->dev,
                             items,
                             ibytes,
                             cudaMemcpyHostToDevice,
                             s_stream()),
             done);
    if (tbytes > 0)
        CUDA_TRY(cudaMemcpyAsync(plan->dev + plan->tiles_at,
                                 tiles,
                                 tbytes,
                                 cudaMemcpyHostToDevice,
                                 s_stream()),
                 done);
done:
    free(tiles);
    return rc;
}

// The plan of a phase over items: found again, or made and kept.
static rumor_err
s_plan_mat(struct cuda_ctx *c,
           enum lowrank_phase phase,
           const struct lowrank_mat_item *items,
           size_t count,
           struct cuda_plan **out)
{
    size_t words = 2 + count * sizeof *items / sizeof(uint64_t);
    bool fresh = false;
    *out = NULL;
    for (size_t i = 0; i < count; i++)
        if (items[i].r == 0 || items[i].r > LIST_MAX)
            return RUMOR_EINVAL;
    rumor_err rc = s_plan_key(c, words);
    if (rc != RUMOR_OK)
        return rc;
    c->plan_key[0] = CUDA_PLAN_TAG_MAT;
    c->plan_key[1] = (uint64_t)phase;
    memcpy(c->plan_key + 2, items, count * sizeof *items);
    rc = s_plan_slot(c, words, out, &fresh);
    if (rc == RUMOR_OK && fresh) {
        rc = s_plan_fill(*out, phase, items, count);
        if (rc != RUMOR_OK)
            s_plan_clear(*out);
    }
    return rc;
}

#define CUDA_RANK_CASES(X) X(1) X(2) X(4) X(8) X(16)

static rumor_err
s_project_right_list(void *ctx,
                     const struct lowrank_mat_item *items,
                     size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    struct cuda_plan *plan = NULL;
    rumor_err rc = count > 0
                       ? s_plan_mat(c, LOWRANK_PHASE_RIGHT, items, count, &plan)
                       : RUMOR_OK;
    if (rc != RUMOR_OK || plan == NULL || plan->ntiles == 0)
        return rc;
    const struct lowrank_mat_item *di =
        (const struct lowrank_mat_item *)plan->dev;
    const struct lowrank_tile *dt =
        (const struct lowrank_tile *)(plan->dev + plan->tiles_at);
    unsigned grid = (unsigned)plan->ntiles;
#define CUDA_RIGHT(R)         \
    else if (plan->rmax <= R) \
        k_right_list<R><<<grid, LIST_T, 0, s_stream()>>>(di, dt);
    if (false) {
    }
    CUDA_RANK_CASES(CUDA_RIGHT)
#undef CUDA_RIGHT
    CUDA_TRY(cudaGetLastError(), done);
done:
    return rc;
}

static rumor_err
s_project_left_list(void *ctx,
                    const struct lowrank_mat_item *items,
                    size_t count)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    struct cuda_plan *plan = NULL;
    rumor_err rc = count > 0
                       ? s_plan_mat(c, LOWRANK_PHASE_LEFT, items, count, &plan)
                       : RUMOR_OK;
    if (rc != RUMOR_OK || plan == NULL || plan->ntiles == 0)
        return rc;
    const struct lowrank_mat_item *di =
        (const struct lowrank_mat_item *)plan->dev;
    const struct lowrank_tile *dt =
        (const struct lowrank_tile *)(plan->dev + plan->tiles_at);
    unsigned *counters = (unsigned *)(plan->dev + plan->counters_at);
    float *scratch = (float *)(plan->dev + plan->scratch_at);
    unsigned grid = (unsigned)plan->ntiles;
#define CUDA_LEFT(R)                         \
    else if (plan->rmax <= R) k_left_list<R> \
        <<<grid, LIST_T, 0, s_stream()>>>(di, dt, scratch, counters);
    if (false) {
    }
    CUDA_RANK_CASES(CUDA_LEFT)
#undef CUDA_LEFT
    CUDA_TRY(cudaGetLastError(), done);
done:
    return rc;
}

static rumor_err
s_reconstruct_list(void *ctx,
                   const struct lowrank_mat_item *items,
                   size_t count,
                   bool with_e,
                   float beta)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    struct cuda_plan *plan = NULL;
    rumor_err rc = count > 0
                       ? s_plan_mat(c, LOWRANK_PHASE_RECON, items, count, &plan)
                       : RUMOR_OK;
    if (rc != RUMOR_OK || plan == NULL || plan->ntiles == 0)
        return rc;
    k_recon_list<<<(unsigned)plan->ntiles, LIST_T, 0, s_stream()>>>(
        (const struct lowrank_mat_item *)plan->dev,
        (const struct lowrank_tile *)(plan->dev + plan->tiles_at),
        with_e,
        beta);
    CUDA_TRY(cudaGetLastError(), done);
done:
    return rc;
}

static void
s_free(void *ctx)
{
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    if (c == NULL)
        return;
    if (c->blas != NULL)
        cublasDestroy(c->blas);
    if (c->solver != NULL)
        cusolverDnDestroy(c->solver);
    cudaFree(c->scratch);
    cudaFree(c->info);
    for (int i = 0; i < CUDA_PTR_CACHE; i++) {
        free(c->ptrs[i].host);
        cudaFree(c->ptrs[i].dev);
    }
    free(c->key);
    for (int i = 0; c->plans != NULL && i < CUDA_PLAN_CACHE; i++)
        s_plan_clear(&c->plans[i]);
    free(c->plans);
    free(c->plan_key);
    free(c);
}

extern "C" rumor_err
lowrank_cuda_init(struct lowrank_backend_i *iface, void **ctx)
{
    static const struct lowrank_backend_i cuda = {
        "cuda",
        s_alloc,
        s_release,
        s_upload,
        s_download,
        s_project_right,
        s_project_left,
        s_orthogonalize,
        s_reconstruct,
        s_free,
        s_project_right_batch,
        s_project_left_batch,
        s_orthogonalize_batch,
        s_reconstruct_batch,
        s_project_right_ef,
        s_project_right_ef_batch,
        s_copy,
        false, // device memory is not host memory
        NULL,  // step_floats: no cache to steer
        s_orthogonalize_list,
        s_project_right_list,
        s_project_left_list,
        s_reconstruct_list,
    };
    rumor_err rc = RUMOR_OK;
    struct cuda_ctx *c = NULL;
    *ctx = NULL;
    if (rumor_cuda_device_count(NULL) <= 0)
        return RUMOR_ENOTSUP;
    c = (struct cuda_ctx *)calloc(1, sizeof *c);
    if (c == NULL)
        return RUMOR_ENOMEM;
    CUBLAS_TRY(cublasCreate(&c->blas), fail);
    CUSOLVER_TRY(cusolverDnCreate(&c->solver), fail);
    CUDA_TRY(cudaMalloc((void **)&c->info, sizeof(int)), fail);
    c->plans = (struct cuda_plan *)calloc(CUDA_PLAN_CACHE, sizeof *c->plans);
    if (c->plans == NULL) {
        rc = RUMOR_ENOMEM;
        goto fail;
    }
    *iface = cuda;
    *ctx = c;
    return RUMOR_OK;
fail:
    s_free(c);
    return rc;
}
