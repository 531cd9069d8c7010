/*
 * The cpu backend: OpenBLAS and LAPACKE, plus our own AVX2/FMA kernels for
 * the tall-skinny products of ranks 1-8.
 *
 * Why own kernels: a PowerSGD step reads M three times (P = M Q,
 * Q = M^T P, e = M - P Q^T) and each pass is a matrix times a handful of
 * columns. Such a product is bound by the read of M, but OpenBLAS's sgemm
 * and sgemv reach only about a quarter of the memory bandwidth on these
 * shapes (packing overhead for a 1-8 wide operand). The kernels here
 * stream M once per pass:
 *  - right product: one row of M against a transposed Q^T (r x m, small
 *    enough for L1/L2) with r accumulators; error feedback is fused into
 *    the same pass (m = e + g is stored while it is multiplied);
 *  - left product: eight rows at a time, accumulating r rows of Q^T in
 *    two FMA chains, so Q^T is loaded and stored once per eight rows of
 *    M; it walks M from the last row to the first, so it starts on the
 *    rows the right product left in the last-level cache, and the
 *    reconstruction (first to last) starts on the rows it left there;
 *  - reconstruction: y = P Q^T row by row, then e -= y and out = y in the
 *    same pass.
 * Each kernel reads a block of rows (2 or 8) as interleaved streams and
 * prefetches the next block into L2 in address order (_MM_HINT_T1), which
 * measured 5-15 % faster per pass on this EPYC than the hardware
 * prefetcher alone.
 * The rank is a compile-time constant inside each kernel (a switch picks
 * the instance) so the accumulators stay in registers. GCC at -O2 does not
 * unroll the loops over a block's rows and the rank on its own (it would
 * grow the code), and then keeps the rows' vectors in memory: with
 * `#pragma GCC unroll` the left product went from 20-22 to 26-28 GB/s and
 * the reconstruction from 21 to 27 GB/s (4096 x 4096, rank 2, against a
 * 31-34 GB/s read floor). The same pragma on the right products measured
 * slower, so they have none. The AVX2 path is
 * chosen at run time (core/cpu.h's probe); without AVX2/FMA, or
 * above rank 8, cblas_sgemm does the work. Orthogonalization: modified
 * Gram-Schmidt (the PyTorch hook's algorithm, dots in double), LAPACK
 * sgeqrf + sorgqr, or CholeskyQR2 (ssyrk, spotrf, strsm, twice; falls back
 * to Gram-Schmidt when P^T P is not positive definite).
 * Memory of a huge page or more (the error memories) is put on transparent
 * huge pages, where one core streams twice as fast (s_alloc).
 * Single-threaded by design: gossip overlaps compression with the network
 * and the backward pass, and one core already saturates memory here.
 */
#include "core/cpu.h"
#include "lowrank/backend.h"

#include <cblas.h>
#include <lapacke.h>

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CPU_FAST_RANK 8 /* largest rank with an own kernel */
/* Outputs of at least this many floats (1 MiB, the per-core L2 here), or
 * of any size when the whole step writes at least as many (step_floats),
 * are written with streaming stores: a plain store first reads the line
 * it overwrites, and the caller reads the output only on a later pass. */
#define CPU_STREAM_MIN ((size_t)1 << 18)
/* Largest rank whose deferred error-feedback product takes rows in pairs:
 * at rank 4 two rows' accumulators and factors no longer fit the 16 AVX2
 * registers and the pair measured about twice as slow as single rows. */
#define CPU_EF_PAIR_RANK 3

struct cpu_ctx {
    float *scratch; /* Q^T and similar, grows as needed */
    size_t cap;     /* floats at scratch */
    bool avx2;      /* AVX2 and FMA usable */
    size_t step;    /* floats a step writes over all matrices (0: unknown) */
};

/* --- helpers -------------------------------------------------------------- */

static rumor_err
s_scratch(struct cpu_ctx *c, size_t floats, float **out)
{
    if (floats > c->cap) {
        float *grown = NULL;
        size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
        if (posix_memalign((void **)&grown, 64, bytes) != 0)
            return RUMOR_ENOMEM;
        free(c->scratch);
        c->scratch = grown;
        c->cap = floats;
    }
    *out = c->scratch;
    return RUMOR_OK;
}

static void
s_transpose(const float *q, size_t m, size_t r, float *qt)
{
    for (size_t j = 0; j < m; j++)
        for (size_t k = 0; k < r; k++)
            qt[k * m + j] = q[j * r + k];
}

__attribute__((target("avx2,fma"))) static inline float
s_hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* --- AVX2 kernels --------------------------------------------------------- */

/* P = (M [+= add]) Q for a fixed rank R, with Q^T (R x m) at qt. Two rows
 * at a time for R <= 4: each load of Q^T serves both rows and the two
 * rows' accumulators are independent FMA chains. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_right_avx2(float *mat,
             const float *add,
             size_t n,
             size_t m,
             const float *qt,
             float *p,
             const int R)
{
    const size_t rows = R <= 4 ? 2 : 1;
    size_t i = 0;
    for (; i + rows <= n; i += rows) {
        __m256 acc[2][CPU_FAST_RANK];
        for (size_t h = 0; h < rows; h++)
            for (int k = 0; k < R; k++)
                acc[h][k] = _mm256_setzero_ps();
        /* Two rows x 32 bytes per iteration: the same bytes of the next
         * two rows are fetched in address order (as in the left product). */
        const char *next_m = NULL, *next_a = NULL;
        if (rows == 2 && i + 4 <= n) {
            next_m = (const char *)(mat + (i + 2) * m);
            next_a = add != NULL ? (const char *)(add + (i + 2) * m) : NULL;
        }
        size_t j = 0;
        for (; j + 8 <= m; j += 8) {
            __m256 x[2];
            if (next_m != NULL) {
                _mm_prefetch(next_m + j * 8, _MM_HINT_T1);
                if (next_a != NULL)
                    _mm_prefetch(next_a + j * 8, _MM_HINT_T1);
            }
            for (size_t h = 0; h < rows; h++) {
                float *row = mat + (i + h) * m;
                x[h] = _mm256_loadu_ps(row + j);
                if (add != NULL) {
                    x[h] =
                        _mm256_add_ps(x[h],
                                      _mm256_loadu_ps(add + (i + h) * m + j));
                    _mm256_storeu_ps(row + j, x[h]);
                }
            }
            for (int k = 0; k < R; k++) {
                __m256 qk = _mm256_loadu_ps(qt + (size_t)k * m + j);
                for (size_t h = 0; h < rows; h++)
                    acc[h][k] = _mm256_fmadd_ps(x[h], qk, acc[h][k]);
            }
        }
        for (size_t h = 0; h < rows; h++) {
            float *row = mat + (i + h) * m;
            const float *arow = add != NULL ? add + (i + h) * m : NULL;
            float tail[CPU_FAST_RANK] = {0};
            for (size_t jj = j; jj < m; jj++) {
                float x = row[jj];
                if (arow != NULL) {
                    x += arow[jj];
                    row[jj] = x;
                }
                for (int k = 0; k < R; k++)
                    tail[k] += x * qt[(size_t)k * m + jj];
            }
            for (int k = 0; k < R; k++)
                p[(i + h) * (size_t)R + k] = s_hsum(acc[h][k]) + tail[k];
        }
    }
    for (; i < n; i++) { /* the odd last row when rows == 2 */
        float *row = mat + i * m;
        const float *arow = add != NULL ? add + i * m : NULL;
        __m256 acc[CPU_FAST_RANK];
        for (int k = 0; k < R; k++)
            acc[k] = _mm256_setzero_ps();
        size_t j = 0;
        for (; j + 8 <= m; j += 8) {
            __m256 x = _mm256_loadu_ps(row + j);
            if (arow != NULL) {
                x = _mm256_add_ps(x, _mm256_loadu_ps(arow + j));
                _mm256_storeu_ps(row + j, x);
            }
            for (int k = 0; k < R; k++)
                acc[k] =
                    _mm256_fmadd_ps(x,
                                    _mm256_loadu_ps(qt + (size_t)k * m + j),
                                    acc[k]);
        }
        float tail[CPU_FAST_RANK] = {0};
        for (; j < m; j++) {
            float x = row[j];
            if (arow != NULL) {
                x += arow[j];
                row[j] = x;
            }
            for (int k = 0; k < R; k++)
                tail[k] += x * qt[(size_t)k * m + j];
        }
        for (int k = 0; k < R; k++)
            p[i * (size_t)R + k] = s_hsum(acc[k]) + tail[k];
    }
}

/* One row of the deferred error-feedback product from column j on (the
 * scalar tail): x = (row - pd qd^T) + add, stored, and acc[k] += x q_k,
 * with s_recon_tail's and s_right_avx2's arithmetic. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_right_ef_tail(size_t j,
                size_t m,
                float *row,
                const float *arow,
                const float *pd,
                const float *qdt,
                const float *qt,
                float *acc,
                const int R)
{
    for (; j < m; j++) {
        float y = 0;
        for (int k = 0; k < R; k++)
            y += pd[k] * qdt[(size_t)k * m + j];
        float x = row[j] - y;
        if (arow != NULL)
            x += arow[j];
        row[j] = x;
        for (int k = 0; k < R; k++)
            acc[k] += x * qt[(size_t)k * m + j];
    }
}

/* Eight values of y = pd Qd^T from column j with s_recon_tail's scalar
 * arithmetic. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256
s_recon8(size_t j, size_t m, const float *pd, const float *qdt, const int R)
{
    float y[8];
    for (int t = 0; t < 8; t++) {
        y[t] = 0;
        for (int k = 0; k < R; k++)
            y[t] += pd[k] * qdt[(size_t)k * m + j + (size_t)t];
    }
    return _mm256_loadu_ps(y);
}

/* One row i of the deferred error-feedback product (see s_right_ef_avx2);
 * recon8: y is formed with s_recon_tail's scalar arithmetic, as
 * s_recon_avx2 forms it for the odd last row. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_right_ef_row(float *mat,
               const float *add,
               size_t i,
               size_t n,
               size_t m,
               const float *pd,
               const float *qdt,
               const float *qt,
               float *p,
               bool recon8,
               const int R)
{
    float *row = mat + i * m;
    const float *arow = add != NULL ? add + i * m : NULL;
    const float *pdi = pd + i * (size_t)R;
    __m256 acc[CPU_FAST_RANK], pk[CPU_FAST_RANK];
    for (int k = 0; k < R; k++) {
        acc[k] = _mm256_setzero_ps();
        pk[k] = _mm256_set1_ps(pdi[k]);
    }
    const char *next_m = i + 1 < n ? (const char *)(row + m) : NULL;
    const char *next_a =
        arow != NULL && i + 1 < n ? (const char *)(arow + m) : NULL;
    size_t j = 0;
    for (; j + 8 <= m; j += 8) {
        if (next_m != NULL && j % 16 == 0) {
            _mm_prefetch(next_m + j * 4, _MM_HINT_T1);
            if (next_a != NULL)
                _mm_prefetch(next_a + j * 4, _MM_HINT_T1);
        }
        __m256 y = _mm256_mul_ps(pk[0], _mm256_loadu_ps(qdt + j));
        for (int k = 1; k < R; k++)
            y = _mm256_fmadd_ps(pk[k],
                                _mm256_loadu_ps(qdt + (size_t)k * m + j),
                                y);
        if (recon8)
            y = s_recon8(j, m, pdi, qdt, R);
        __m256 x = _mm256_sub_ps(_mm256_loadu_ps(row + j), y);
        if (arow != NULL)
            x = _mm256_add_ps(x, _mm256_loadu_ps(arow + j));
        _mm256_storeu_ps(row + j, x);
        for (int k = 0; k < R; k++)
            acc[k] = _mm256_fmadd_ps(x,
                                     _mm256_loadu_ps(qt + (size_t)k * m + j),
                                     acc[k]);
    }
    float tail[CPU_FAST_RANK] = {0};
    s_right_ef_tail(j, m, row, arow, pdi, qdt, qt, tail, R);
    for (int k = 0; k < R; k++)
        p[i * (size_t)R + k] = s_hsum(acc[k]) + tail[k];
}

/* Rows i and i + 1 of the deferred error-feedback product (R up to
 * CPU_EF_PAIR_RANK): each
 * load of Qd^T and Q^T serves both rows, the two rows are four streams
 * (M and add of each) for the memory system instead of two, and the next
 * pair is prefetched in address order, as s_right_avx2 does. Per row the
 * arithmetic is s_right_ef_row's, so the values are the same. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_right_ef_pair(float *mat,
                const float *add,
                size_t i,
                size_t n,
                size_t m,
                const float *pd,
                const float *qdt,
                const float *qt,
                float *p,
                const int R)
{
    float *row[2] = {mat + i * m, mat + (i + 1) * m};
    const float *arow[2] = {add != NULL ? add + i * m : NULL,
                            add != NULL ? add + (i + 1) * m : NULL};
    __m256 acc[2][CPU_FAST_RANK], pk[2][CPU_FAST_RANK];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < R; k++) {
            acc[h][k] = _mm256_setzero_ps();
            pk[h][k] = _mm256_set1_ps(pd[(i + (size_t)h) * (size_t)R + k]);
        }
    const char *next_m = i + 4 <= n ? (const char *)(row[1] + m) : NULL;
    const char *next_a =
        add != NULL && next_m != NULL ? (const char *)(arow[1] + m) : NULL;
    size_t j = 0;
    for (; j + 8 <= m; j += 8) {
        if (next_m != NULL) {
            _mm_prefetch(next_m + j * 8, _MM_HINT_T1);
            if (next_a != NULL)
                _mm_prefetch(next_a + j * 8, _MM_HINT_T1);
        }
        __m256 qd0 = _mm256_loadu_ps(qdt + j), y[2], x[2];
        for (int h = 0; h < 2; h++)
            y[h] = _mm256_mul_ps(pk[h][0], qd0);
        for (int k = 1; k < R; k++) {
            __m256 qdk = _mm256_loadu_ps(qdt + (size_t)k * m + j);
            for (int h = 0; h < 2; h++)
                y[h] = _mm256_fmadd_ps(pk[h][k], qdk, y[h]);
        }
        for (int h = 0; h < 2; h++) {
            x[h] = _mm256_sub_ps(_mm256_loadu_ps(row[h] + j), y[h]);
            if (arow[h] != NULL)
                x[h] = _mm256_add_ps(x[h], _mm256_loadu_ps(arow[h] + j));
            _mm256_storeu_ps(row[h] + j, x[h]);
        }
        for (int k = 0; k < R; k++) {
            __m256 qk = _mm256_loadu_ps(qt + (size_t)k * m + j);
            for (int h = 0; h < 2; h++)
                acc[h][k] = _mm256_fmadd_ps(x[h], qk, acc[h][k]);
        }
    }
    for (int h = 0; h < 2; h++) {
        const float *pdi = pd + (i + (size_t)h) * (size_t)R;
        float tail[CPU_FAST_RANK] = {0};
        s_right_ef_tail(j, m, row[h], arow[h], pdi, qdt, qt, tail, R);
        for (int k = 0; k < R; k++)
            p[(i + (size_t)h) * (size_t)R + k] = s_hsum(acc[h][k]) + tail[k];
    }
}

/* P = M' Q with M' = (M - Pd Qd^T) + add stored in M: the previous step's
 * error update fused into this step's first product (one read and one
 * write of M instead of two of each). y = Pd Qd^T is formed exactly as
 * s_recon_avx2 forms it (a product, then FMAs in k order; rows in pairs
 * for R <= 4, the odd last row with the scalar tail) and M' as
 * s_right_avx2 adds, so the result equals those two passes bit for bit.
 * Qd^T and Q^T (R x m each) stay in L2; the next rows are prefetched. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_right_ef_avx2(float *mat,
                const float *add,
                size_t n,
                size_t m,
                const float *pd,
                const float *qdt,
                const float *qt,
                float *p,
                const int R)
{
    size_t i = 0;
    if (R <= CPU_EF_PAIR_RANK)
        for (; i + 2 <= n; i += 2)
            s_right_ef_pair(mat, add, i, n, m, pd, qdt, qt, p, R);
    bool odd_last = R <= 4 && n % 2 != 0;
    for (; i < n; i++)
        s_right_ef_row(mat,
                       add,
                       i,
                       n,
                       m,
                       pd,
                       qdt,
                       qt,
                       p,
                       odd_last && i + 1 == n,
                       R);
}

/* Q^T (R x m, at qt) += (M^T P)^T over B (8 or 1) rows of M starting at
 * row i; with add, M += add is stored in the same pass. Even and odd rows
 * feed two accumulators per column (two FMA chains instead of one of
 * length B), so each load and store of Q^T serves eight rows of M. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_left_rows(float *mat,
            const float *add,
            size_t i,
            size_t m,
            const float *p,
            float *qt,
            const char *next,
            const int B,
            const int R)
{
    float *rows[8];
    const float *pi = p + i * (size_t)R;
    for (int h = 0; h < B; h++)
        rows[h] = mat + (i + (size_t)h) * m;
    size_t j = 0;
    for (; j + 8 <= m; j += 8) {
        __m256 x[8];
        if (next != NULL) {
            /* 8 rows x 32 bytes are consumed per iteration: fetch as many
             * bytes of the next block, in address order, into L2. */
            const char *at = next + j * 32;
            _mm_prefetch(at, _MM_HINT_T1);
            _mm_prefetch(at + 64, _MM_HINT_T1);
            _mm_prefetch(at + 128, _MM_HINT_T1);
            _mm_prefetch(at + 192, _MM_HINT_T1);
        }
#pragma GCC unroll 8
        for (int h = 0; h < B; h++) {
            x[h] = _mm256_loadu_ps(rows[h] + j);
            if (add != NULL) {
                x[h] = _mm256_add_ps(
                    x[h],
                    _mm256_loadu_ps(add + (i + (size_t)h) * m + j));
                _mm256_storeu_ps(rows[h] + j, x[h]);
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < R; k++) {
            float *qk = qt + (size_t)k * m + j;
            __m256 even = _mm256_loadu_ps(qk);
            __m256 odd = _mm256_setzero_ps();
#pragma GCC unroll 8
            for (int h = 0; h + 1 < B; h += 2) {
                even =
                    _mm256_fmadd_ps(x[h], _mm256_set1_ps(pi[h * R + k]), even);
                odd = _mm256_fmadd_ps(x[h + 1],
                                      _mm256_set1_ps(pi[(h + 1) * R + k]),
                                      odd);
            }
            if (B % 2 != 0)
                even = _mm256_fmadd_ps(x[B - 1],
                                       _mm256_set1_ps(pi[(B - 1) * R + k]),
                                       even);
            _mm256_storeu_ps(qk, _mm256_add_ps(even, odd));
        }
    }
    for (; j < m; j++)
        for (int h = 0; h < B; h++) {
            float x = rows[h][j];
            if (add != NULL) {
                x += add[(i + (size_t)h) * m + j];
                rows[h][j] = x;
            }
            for (int k = 0; k < R; k++)
                qt[(size_t)k * m + j] += x * pi[h * R + k];
        }
}

/* Q^T (R x m, at qt) = (M^T P)^T, eight rows of M at a time; error
 * feedback (M += add) fused. The rows are visited from the last to the
 * first: the right product and the reconstruction run first to last, so
 * this pass starts on the rows the previous pass left in the last-level
 * cache and the next pass starts on the rows this one leaves there. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_left_avx2(float *mat,
            const float *add,
            size_t n,
            size_t m,
            const float *p,
            float *qt,
            const int R)
{
    memset(qt, 0, (size_t)R * m * sizeof(float));
    size_t i = n;
    for (; i % 8 != 0; i--)
        s_left_rows(mat, add, i - 1, m, p, qt, NULL, 1, R);
    for (; i >= 8; i -= 8) {
        /* The next block (eight rows above) is read while this one is
         * computed: one sequential stream for the memory controller
         * instead of eight interleaved ones. */
        const char *next = i >= 16 ? (const char *)(mat + (i - 16) * m) : NULL;
        s_left_rows(mat, add, i - 8, m, p, qt, next, 8, R);
    }
}

/* One row of y = alpha P Q^T from column j on (the scalar tail). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_recon_tail(size_t j,
             size_t m,
             const float *ps,
             const float *qt,
             float *erow,
             float *orow,
             float beta,
             const int R)
{
    for (; j < m; j++) {
        float y = 0;
        for (int k = 0; k < R; k++)
            y += ps[k] * qt[(size_t)k * m + j];
        if (erow != NULL)
            erow[j] -= y;
        if (orow != NULL)
            orow[j] = (beta != 0 ? orow[j] : 0.0f) + y;
    }
}

/* How s_recon_cols writes its columns. */
enum cpu_store {
    CPU_STORE_PLAIN,  /* e and out with ordinary stores */
    CPU_STORE_STREAM, /* out with non-temporal stores (32-byte aligned) */
    CPU_STORE_MASKED  /* only the lanes of mask, e and out */
};

/* Columns j..j+7 of one block of rows (1 or 2) of y = P Q^T (pk: the
 * rows' alpha P, broadcast): e -= y and out = beta out + y. Every column
 * gets the same arithmetic whatever the store, so where the grid of
 * columns starts changes no value. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_recon_cols(size_t j,
             size_t m,
             const float *qt,
             __m256 pk[2][CPU_FAST_RANK],
             size_t rows,
             float *const *erow,
             float *const *orow,
             float beta,
             enum cpu_store how,
             __m256i mask,
             const int R)
{
    __m256 y[2];
    __m256 q0 = _mm256_loadu_ps(qt + j);
#pragma GCC unroll 8
    for (size_t h = 0; h < rows; h++)
        y[h] = _mm256_mul_ps(pk[h][0], q0);
#pragma GCC unroll 8
    for (int k = 1; k < R; k++) {
        __m256 qk = _mm256_loadu_ps(qt + (size_t)k * m + j);
#pragma GCC unroll 8
        for (size_t h = 0; h < rows; h++)
            y[h] = _mm256_fmadd_ps(pk[h][k], qk, y[h]);
    }
#pragma GCC unroll 8
    for (size_t h = 0; h < rows; h++) {
        if (erow[h] != NULL) {
            __m256 v = _mm256_sub_ps(_mm256_loadu_ps(erow[h] + j), y[h]);
            if (how == CPU_STORE_MASKED)
                _mm256_maskstore_ps(erow[h] + j, mask, v);
            else
                _mm256_storeu_ps(erow[h] + j, v);
        }
        if (orow[h] == NULL)
            continue;
        if (how == CPU_STORE_STREAM) {
            _mm256_stream_ps(orow[h] + j, y[h]);
        } else {
            __m256 v = y[h];
            if (beta != 0)
                v = _mm256_add_ps(_mm256_loadu_ps(orow[h] + j), v);
            if (how == CPU_STORE_MASKED)
                _mm256_maskstore_ps(orow[h] + j, mask, v);
            else
                _mm256_storeu_ps(orow[h] + j, v);
        }
    }
}

/* Lanes lo <= lane < hi set. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256i
s_lanes(int lo, int hi)
{
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i ge = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1));
    __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx);
    return _mm256_and_si256(ge, lt);
}

/* y = alpha P Q^T; e -= y; out = beta out + y. Two rows at a time for
 * R <= 4, so each load of Q^T serves both. With stream set (a fresh out
 * of a step much larger than the caches, m a multiple of 8 and at least
 * 8) out is written with non-temporal stores: a plain store first reads
 * the line it overwrites, a third more memory traffic in this pass. Rows
 * need not be 32-byte aligned (a malloc'd model is 16-byte aligned): the
 * columns before the first aligned one, and as many at the end, are
 * written with masked stores, every row alike since m % 8 == 0. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
s_recon_avx2(size_t n,
             size_t m,
             const float *p,
             const float *qt,
             float alpha,
             float *e,
             float *out,
             float beta,
             bool stream,
             const int R)
{
    const size_t rows = R <= 4 ? 2 : 1;
    size_t head = 0; /* columns before out's first 32-byte aligned one */
    if (stream)
        head = ((32 - ((uintptr_t)out & 31)) & 31) / sizeof(float);
    __m256i none = _mm256_setzero_si256();
    __m256i head_mask = s_lanes(0, (int)head);
    __m256i tail_mask = s_lanes((int)head, 8);
    enum cpu_store body = stream ? CPU_STORE_STREAM : CPU_STORE_PLAIN;
    size_t i = 0;
    for (; i + rows <= n; i += rows) {
        __m256 pk[2][CPU_FAST_RANK];
        float ps[2][CPU_FAST_RANK];
        float *erow[2], *orow[2];
        for (size_t h = 0; h < rows; h++) {
            for (int k = 0; k < R; k++) {
                ps[h][k] = alpha * p[(i + h) * (size_t)R + k];
                pk[h][k] = _mm256_set1_ps(ps[h][k]);
            }
            erow[h] = e != NULL ? e + (i + h) * m : NULL;
            orow[h] = out != NULL ? out + (i + h) * m : NULL;
        }
        const char *next_e = rows == 2 && e != NULL && i + 4 <= n
                                 ? (const char *)(e + (i + 2) * m)
                                 : NULL;
        /* Columns are independent: the masked ones (before out's first
         * aligned column, and as many at the end) go first. */
        for (int t = 0; head > 0 && t < 2; t++)
            s_recon_cols(t == 0 ? 0 : m - 8,
                         m,
                         qt,
                         pk,
                         rows,
                         erow,
                         orow,
                         beta,
                         CPU_STORE_MASKED,
                         t == 0 ? head_mask : tail_mask,
                         R);
        size_t j = head;
        for (; j + 8 <= m; j += 8) {
            if (next_e != NULL)
                _mm_prefetch(next_e + j * 8, _MM_HINT_T1);
            s_recon_cols(j, m, qt, pk, rows, erow, orow, beta, body, none, R);
        }
        if (head > 0)
            j = m;
        for (size_t h = 0; h < rows; h++)
            s_recon_tail(j, m, ps[h], qt, erow[h], orow[h], beta, R);
    }
    for (; i < n; i++) { /* the odd last row when rows == 2 */
        float ps[CPU_FAST_RANK];
        for (int k = 0; k < R; k++)
            ps[k] = alpha * p[i * (size_t)R + k];
        s_recon_tail(0,
                     m,
                     ps,
                     qt,
                     e != NULL ? e + i * m : NULL,
                     out != NULL ? out + i * m : NULL,
                     beta,
                     R);
    }
    if (stream)
        _mm_sfence(); /* streamed stores are visible before we return */
}

/* One instance per rank so R is a constant inside each kernel. */
#define CPU_RANK_SWITCH(r, CALL) \
    switch (r) {                 \
    case 1:                      \
        CALL(1);                 \
        break;                   \
    case 2:                      \
        CALL(2);                 \
        break;                   \
    case 3:                      \
        CALL(3);                 \
        break;                   \
    case 4:                      \
        CALL(4);                 \
        break;                   \
    case 5:                      \
        CALL(5);                 \
        break;                   \
    case 6:                      \
        CALL(6);                 \
        break;                   \
    case 7:                      \
        CALL(7);                 \
        break;                   \
    default:                     \
        CALL(8);                 \
        break;                   \
    }

__attribute__((target("avx2,fma"))) static void
s_right_fast(float *mat,
             const float *add,
             size_t n,
             size_t m,
             const float *qt,
             size_t r,
             float *p)
{
#define CPU_CALL(R) s_right_avx2(mat, add, n, m, qt, p, R)
    CPU_RANK_SWITCH(r, CPU_CALL)
#undef CPU_CALL
}

__attribute__((target("avx2,fma"))) static void
s_right_ef_fast(float *mat,
                const float *add,
                size_t n,
                size_t m,
                const float *pd,
                const float *qdt,
                const float *qt,
                size_t r,
                float *p)
{
#define CPU_CALL(R) s_right_ef_avx2(mat, add, n, m, pd, qdt, qt, p, R)
    CPU_RANK_SWITCH(r, CPU_CALL)
#undef CPU_CALL
}

__attribute__((target("avx2,fma"))) static void
s_left_fast(float *mat,
            const float *add,
            size_t n,
            size_t m,
            const float *p,
            size_t r,
            float *qt)
{
#define CPU_CALL(R) s_left_avx2(mat, add, n, m, p, qt, R)
    CPU_RANK_SWITCH(r, CPU_CALL)
#undef CPU_CALL
}

__attribute__((target("avx2,fma"))) static void
s_recon_fast(const struct cpu_ctx *c,
             size_t n,
             size_t m,
             size_t r,
             const float *p,
             const float *qt,
             float alpha,
             float *e,
             float *out,
             float beta)
{
    /* Streaming needs every row of out at the same offset from a 32-byte
     * boundary, and a whole vector per row. */
    bool big = n * m >= CPU_STREAM_MIN || c->step >= CPU_STREAM_MIN;
    bool stream = out != NULL && beta == 0 && big && m % 8 == 0 && m >= 8;
#define CPU_CALL(R) s_recon_avx2(n, m, p, qt, alpha, e, out, beta, stream, R)
    CPU_RANK_SWITCH(r, CPU_CALL)
#undef CPU_CALL
}

/* --- interface ------------------------------------------------------------ */

/* Large buffers (the error memories) go on transparent huge pages
 * (rumor_mem_alloc_large): one core streams M about twice as fast. */
static rumor_err
s_alloc(void *ctx, size_t bytes, float **out)
{
    (void)ctx;
    size_t rounded = ((bytes > 0 ? bytes : 1) + 63) & ~(size_t)63;
    *out = rumor_mem_alloc_large(rounded);
    if (*out == NULL)
        return RUMOR_ENOMEM;
    memset(*out, 0, rounded);
    return RUMOR_OK;
}

static void
s_release(void *ctx, float *ptr)
{
    (void)ctx;
    free(ptr);
}

static rumor_err
s_copy(void *ctx, float *dst, const float *src, size_t bytes)
{
    (void)ctx;
    if (bytes > 0 && dst != src)
        memmove(dst, src, bytes);
    return RUMOR_OK;
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
    struct cpu_ctx *c = ctx;
    if (c->avx2 && r <= CPU_FAST_RANK) {
        float *qt = NULL;
        rumor_err rc = s_scratch(c, r * m, &qt);
        if (rc != RUMOR_OK)
            return rc;
        s_transpose(q, m, r, qt);
        s_right_fast(mat, add, n, m, qt, r, p);
        return RUMOR_OK;
    }
    if (add != NULL)
        for (size_t i = 0; i < n * m; i++)
            mat[i] += add[i];
    cblas_sgemm(CblasRowMajor,
                CblasNoTrans,
                CblasNoTrans,
                (int)n,
                (int)r,
                (int)m,
                1.0f,
                mat,
                (int)m,
                q,
                (int)r,
                0.0f,
                p,
                (int)r);
    return RUMOR_OK;
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
    struct cpu_ctx *c = ctx;
    if (c->avx2 && r <= CPU_FAST_RANK) {
        float *qt = NULL;
        rumor_err rc = s_scratch(c, r * m, &qt);
        if (rc != RUMOR_OK)
            return rc;
        s_left_fast(mat, add, n, m, p, r, qt);
        for (size_t j = 0; j < m; j++)
            for (size_t k = 0; k < r; k++)
                q[j * r + k] = qt[k * m + j];
        return RUMOR_OK;
    }
    if (add != NULL)
        for (size_t i = 0; i < n * m; i++)
            mat[i] += add[i];
    cblas_sgemm(CblasRowMajor,
                CblasTrans,
                CblasNoTrans,
                (int)m,
                (int)r,
                (int)n,
                1.0f,
                mat,
                (int)m,
                p,
                (int)r,
                0.0f,
                q,
                (int)r);
    return RUMOR_OK;
}

static void
s_gram_schmidt(float *p, size_t n, size_t r, float eps)
{
    if (r == 1) {
        double ss = 0;
        for (size_t i = 0; i < n; i++)
            ss += (double)p[i] * p[i];
        float div = (float)sqrt(ss) + eps;
        if (div > 0) {
            float inv = 1.0f / div;
            for (size_t i = 0; i < n; i++)
                p[i] *= inv;
        }
        return;
    }
    lowrank_ref_gram_schmidt(p, n, r, eps);
}

static rumor_err
s_householder(float *p, size_t n, size_t r)
{
    float tau[RUMOR_LOWRANK_MAX_RANK];
    lapack_int info = LAPACKE_sgeqrf(LAPACK_ROW_MAJOR,
                                     (lapack_int)n,
                                     (lapack_int)r,
                                     p,
                                     (lapack_int)r,
                                     tau);
    if (info != 0)
        return info < 0 ? RUMOR_EINVAL : RUMOR_EBACKEND;
    info = LAPACKE_sorgqr(LAPACK_ROW_MAJOR,
                          (lapack_int)n,
                          (lapack_int)r,
                          (lapack_int)r,
                          p,
                          (lapack_int)r,
                          tau);
    if (info != 0)
        return info < 0 ? RUMOR_EINVAL : RUMOR_EBACKEND;
    return RUMOR_OK;
}

/* CholeskyQR2 (Fukaya et al. 2014): P = P R^{-1} with R from the Cholesky
 * factor of P^T P, done twice so the second pass repairs the first's loss
 * of orthogonality. Returns false when P^T P is not positive definite. */
static bool
s_cholqr2(float *p, size_t n, size_t r)
{
    float g[RUMOR_LOWRANK_MAX_RANK * 8];
    float *gram = g;
    float *heap = NULL;
    bool ok = false;
    if (r * r > sizeof g / sizeof g[0]) {
        heap = malloc(r * r * sizeof *heap);
        if (heap == NULL)
            return false;
        gram = heap;
    }
    for (int pass = 0; pass < 2; pass++) {
        cblas_ssyrk(CblasRowMajor,
                    CblasUpper,
                    CblasTrans,
                    (int)r,
                    (int)n,
                    1.0f,
                    p,
                    (int)r,
                    0.0f,
                    gram,
                    (int)r);
        if (LAPACKE_spotrf(LAPACK_ROW_MAJOR,
                           'U',
                           (lapack_int)r,
                           gram,
                           (lapack_int)r) != 0)
            goto done;
        cblas_strsm(CblasRowMajor,
                    CblasRight,
                    CblasUpper,
                    CblasNoTrans,
                    CblasNonUnit,
                    (int)n,
                    (int)r,
                    1.0f,
                    gram,
                    (int)r,
                    p,
                    (int)r);
    }
    ok = true;
done:
    free(heap);
    return ok;
}

static rumor_err
s_orthogonalize(void *ctx,
                float *p,
                size_t n,
                size_t r,
                rumor_lowrank_orth method,
                float eps)
{
    (void)ctx;
    switch (lowrank_orth_resolve(method, r)) {
    case RUMOR_LOWRANK_ORTH_QR:
        return s_householder(p, n, r);
    case RUMOR_LOWRANK_ORTH_CHOLQR2:
        /* Cholesky fails on (near) rank-deficient P; Gram-Schmidt with
         * eps handles zero columns without NaN. */
        if (!s_cholqr2(p, n, r))
            s_gram_schmidt(p, n, r, eps);
        return RUMOR_OK;
    default:
        s_gram_schmidt(p, n, r, eps);
        return RUMOR_OK;
    }
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
    struct cpu_ctx *c = ctx;
    if (c->avx2 && r <= CPU_FAST_RANK) {
        float *qt = NULL;
        rumor_err rc = s_scratch(c, r * m, &qt);
        if (rc != RUMOR_OK)
            return rc;
        s_transpose(q, m, r, qt);
        s_recon_fast(c, n, m, r, p, qt, alpha, e, out, beta);
        return RUMOR_OK;
    }
    if (e != NULL)
        cblas_sgemm(CblasRowMajor,
                    CblasNoTrans,
                    CblasTrans,
                    (int)n,
                    (int)m,
                    (int)r,
                    -alpha,
                    p,
                    (int)r,
                    q,
                    (int)r,
                    1.0f,
                    e,
                    (int)m);
    if (out != NULL)
        cblas_sgemm(CblasRowMajor,
                    CblasNoTrans,
                    CblasTrans,
                    (int)n,
                    (int)m,
                    (int)r,
                    alpha,
                    p,
                    (int)r,
                    q,
                    (int)r,
                    beta != 0 ? 1.0f : 0.0f,
                    out,
                    (int)m);
    return RUMOR_OK;
}

/* The deferred error update fused into the right product: one pass
 * with the own kernel; otherwise the two passes it stands for. */
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
    struct cpu_ctx *c = ctx;
    if (c->avx2 && r <= CPU_FAST_RANK) {
        float *qt = NULL;
        rumor_err rc = s_scratch(c, 2 * r * m, &qt);
        if (rc != RUMOR_OK)
            return rc;
        s_transpose(q, m, r, qt);
        s_transpose(qd, m, r, qt + r * m);
        s_right_ef_fast(mat, add, n, m, pd, qt + r * m, qt, r, p);
        return RUMOR_OK;
    }
    rumor_err rc = s_reconstruct(ctx, n, m, r, pd, qd, 1.0f, mat, NULL, 0);
    if (rc == RUMOR_OK)
        rc = s_project_right(ctx, mat, add, n, m, q, r, p);
    return rc;
}

static void
s_step_floats(void *ctx, size_t floats)
{
    struct cpu_ctx *c = ctx;
    c->step = floats;
}

static void
s_free(void *ctx)
{
    struct cpu_ctx *c = ctx;
    if (c == NULL)
        return;
    free(c->scratch);
    free(c);
}

rumor_err
lowrank_cpu_init(struct lowrank_backend_i *iface, void **ctx)
{
    static const struct lowrank_backend_i cpu = {
        .name = "cpu",
        .alloc = s_alloc,
        .release = s_release,
        .upload = s_copy,
        .download = s_copy,
        .project_right = s_project_right,
        .project_left = s_project_left,
        .orthogonalize = s_orthogonalize,
        .reconstruct = s_reconstruct,
        .free = s_free,
        .project_right_ef = s_project_right_ef,
        .copy = s_copy,
        .host_memory = true,
        .step_floats = s_step_floats,
    };
    *ctx = NULL;
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return RUMOR_ENOMEM;
    __builtin_cpu_init();
    c->avx2 = core_cpu()->avx2_fma;
    /* RUMOR_LOWRANK_NO_AVX2=1 forces the BLAS path (tests, comparisons). */
    const char *no_avx2 = getenv("RUMOR_LOWRANK_NO_AVX2");
    if (no_avx2 != NULL && no_avx2[0] == '1')
        c->avx2 = false;
    *iface = cpu;
    *ctx = c;
    return RUMOR_OK;
}
