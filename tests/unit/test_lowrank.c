/*
 * lowrank: every cpu kernel against the plain-C _ref oracle on odd shapes
 * (both the AVX2 path and the BLAS path), orthogonalization (Gram-Schmidt,
 * LAPACK QR, CholeskyQR2, zero columns), approximation quality against the
 * truncated SVD from LAPACKE_sgesvd, PowerSGD against PyTorch's own hook
 * run through /usr/bin/python3 (skipped with a reason when python3-torch
 * is missing), PowerGossip's update rule and average preservation, the
 * paper's float counting on the shipped shape files, the shape parser,
 * and cuda against cpu (skipped with a reason without a GPU).
 */
#include "tests/cmocka_compat.h"

#include "rumor/lowrank.h"

#include "lowrank/backend.h"

#include <lapacke.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- helpers -------------------------------------------------------------- */

static float *
s_randn(size_t n, uint64_t seed)
{
    float *x = malloc((n > 0 ? n : 1) * sizeof *x);
    assert_non_null(x);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rumor_rng_normal(&rng);
    return x;
}

static float *
s_dup(const float *x, size_t n)
{
    float *y = malloc((n > 0 ? n : 1) * sizeof *y);
    assert_non_null(y);
    if (n > 0)
        memcpy(y, x, n * sizeof *y);
    return y;
}

/* ||a - b|| / max(||b||, tiny): the normwise relative error. */
static double
s_rel(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d) / (s > 1e-30 ? sqrt(s) : 1e-15);
}

static void
s_assert_close(const float *got,
               const float *want,
               size_t n,
               double tol,
               const char *what)
{
    double rel = s_rel(got, want, n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(got[i]))
            fail_msg("%s: element %zu is not finite", what, i);
    if (!(rel <= tol))
        fail_msg("%s: relative error %.3g > %.3g", what, rel, tol);
}

/* The cpu backend's orthogonalization, as PowerSGD calls it. */
static rumor_err
s_orthogonalize(float *p, size_t n, size_t r, rumor_lowrank_orth how, float eps)
{
    struct lowrank_backend_i be;
    void *ctx = NULL;
    rumor_err rc = lowrank_cpu_init(&be, &ctx);
    if (rc == RUMOR_OK)
        rc = be.orthogonalize(ctx, p, n, r, how, eps);
    if (ctx != NULL)
        be.free(ctx);
    return rc;
}

/* ||Q^T Q - I||_max for a row-major n x r matrix. */
static double
s_orth_defect(const float *q, size_t n, size_t r)
{
    double worst = 0;
    for (size_t a = 0; a < r; a++)
        for (size_t b = 0; b < r; b++) {
            double s = 0;
            for (size_t i = 0; i < n; i++)
                s += (double)q[i * r + a] * q[i * r + b];
            double d = fabs(s - (a == b ? 1.0 : 0.0));
            if (d > worst)
                worst = d;
        }
    return worst;
}

/* --- kernels: cpu against ref --------------------------------------------- */

static const size_t s_odd_shapes[][2] = {
    {1, 1},
    {1, 13},
    {13, 1},
    {2, 3},
    {7, 9},
    {9, 7},
    {17, 33},
    {33, 65},
    {100, 31},
    {64, 64},
    {5, 200},
};
static const size_t s_ranks[] = {1, 2, 3, 4, 5, 7, 8, 9, 16};

static void
s_kernels_match_ref(bool force_blas)
{
    if (force_blas)
        setenv("RUMOR_LOWRANK_NO_AVX2", "1", 1);
    struct lowrank_backend_i cpu;
    void *ctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &ctx), RUMOR_OK);
    unsetenv("RUMOR_LOWRANK_NO_AVX2");
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof s_odd_shapes / sizeof s_odd_shapes[0]; s++)
        for (size_t k = 0; k < sizeof s_ranks / sizeof s_ranks[0]; k++) {
            size_t n = s_odd_shapes[s][0], m = s_odd_shapes[s][1];
            size_t r = s_ranks[k];
            float *mat = s_randn(n * m, seed++);
            float *add = s_randn(n * m, seed++);
            float *q = s_randn(m * r, seed++);
            float *p = s_randn(n * r, seed++);
            float *m1 = s_dup(mat, n * m), *m2 = s_dup(mat, n * m);
            float *p1 = calloc(n * r, sizeof *p1), *p2 = calloc(n * r, 4);
            float *q1 = calloc(m * r, sizeof *q1), *q2 = calloc(m * r, 4);
            char what[96];
            snprintf(what, sizeof what, "%s %zux%zu r%zu", cpu.name, n, m, r);

            /* P = (M + add) Q with the fused error-feedback add. */
            assert_int_equal(cpu.project_right(ctx, m1, add, n, m, q, r, p1),
                             RUMOR_OK);
            lowrank_ref_project_right(m2, add, n, m, q, r, p2);
            s_assert_close(m1, m2, n * m, 0, what);
            s_assert_close(p1, p2, n * r, 1e-5, what);
            /* P = M Q without it. */
            assert_int_equal(cpu.project_right(ctx, m1, NULL, n, m, q, r, p1),
                             RUMOR_OK);
            lowrank_ref_project_right(m2, NULL, n, m, q, r, p2);
            s_assert_close(p1, p2, n * r, 1e-5, what);
            /* Q = M^T P. */
            assert_int_equal(cpu.project_left(ctx, m1, NULL, n, m, p, r, q1),
                             RUMOR_OK);
            lowrank_ref_project_left(m2, NULL, n, m, p, r, q2);
            s_assert_close(q1, q2, m * r, 1e-5, what);
            /* e -= a P Q^T and out = P Q^T (beta 0), then out += (beta 1). */
            float *e1 = s_dup(add, n * m), *e2 = s_dup(add, n * m);
            float *o1 = s_randn(n * m, seed++), *o2 = s_dup(o1, n * m);
            assert_int_equal(
                cpu.reconstruct(ctx, n, m, r, p, q, 0.5f, e1, o1, 0.0f),
                RUMOR_OK);
            lowrank_ref_reconstruct(n, m, r, p, q, 0.5f, e2, o2, 0.0f);
            s_assert_close(e1, e2, n * m, 1e-5, what);
            s_assert_close(o1, o2, n * m, 1e-5, what);
            assert_int_equal(
                cpu.reconstruct(ctx, n, m, r, p, q, -1.5f, NULL, o1, 1.0f),
                RUMOR_OK);
            lowrank_ref_reconstruct(n, m, r, p, q, -1.5f, NULL, o2, 1.0f);
            s_assert_close(o1, o2, n * m, 1e-5, what);
            free(mat), free(add), free(q), free(p), free(m1), free(m2);
            free(p1), free(p2), free(q1), free(q2), free(e1), free(e2);
            free(o1), free(o2);
        }
    cpu.free(ctx);
}

static void
test_cpu_kernels__odd_shapes_and_ranks__match_ref(void **state)
{
    (void)state;
    s_kernels_match_ref(false);
}

static void
test_cpu_kernels__blas_path__match_ref(void **state)
{
    (void)state;
    s_kernels_match_ref(true);
}

/* Outputs past 8 MiB take the streaming-store path of the cpu kernel. */
static void
test_cpu_reconstruct__large_aligned_output__streamed_matches_ref(void **s)
{
    (void)s;
    const size_t n = 1025, m = 2048; /* odd row count: the 1-row tail too */
    struct lowrank_backend_i cpu;
    void *ctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &ctx), RUMOR_OK);
    for (size_t r = 1; r <= 8; r *= 2) {
        float *p = s_randn(n * r, 31 + r), *q = s_randn(m * r, 32 + r);
        float *e1 = s_randn(n * m, 33), *e2 = s_dup(e1, n * m);
        float *o1 = NULL, *o2 = malloc(n * m * sizeof *o2);
        assert_int_equal(cpu.alloc(ctx, n * m * sizeof *o1, &o1), 0);
        assert_true(((uintptr_t)o1 & 31) == 0);
        assert_int_equal(
            cpu.reconstruct(ctx, n, m, r, p, q, 0.75f, e1, o1, 0.0f),
            0);
        lowrank_ref_reconstruct(n, m, r, p, q, 0.75f, e2, o2, 0.0f);
        s_assert_close(e1, e2, n * m, 1e-5, "streamed e");
        s_assert_close(o1, o2, n * m, 1e-5, "streamed out");
        cpu.release(ctx, o1);
        free(p), free(q), free(e1), free(e2), free(o2);
    }
    cpu.free(ctx);
}

/* With the step hint past the caches even small outputs are streamed,
 * and rows need not be 32-byte aligned (a malloc'd model is 16-byte
 * aligned): the head and tail columns go through masked stores. Every
 * offset from a 32-byte boundary gives the values of the plain-store path
 * (beta 1 on a zeroed out: 0 + y), bit for bit, writes nothing outside
 * out, and matches ref. */
static void
test_cpu_reconstruct__misaligned_stream__equals_plain_stores(void **s)
{
    (void)s;
    const size_t n = 67, ms[] = {8, 24, 520}, guard = 16;
    struct lowrank_backend_i cpu;
    void *ctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &ctx), RUMOR_OK);
    assert_non_null(cpu.step_floats);
    cpu.step_floats(ctx, (size_t)1 << 24);
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t r = 1; r <= 4; r++)
            for (size_t off = 0; off < 8; off++) {
                size_t m = ms[mi], len = n * m + off + guard;
                float *p = s_randn(n * r, 41 + r), *q = s_randn(m * r, 42);
                float *e1 = s_randn(n * m, 43), *e2 = s_dup(e1, n * m);
                float *e3 = s_dup(e1, n * m), *o3 = malloc(n * m * sizeof *o3);
                float *b1 = NULL, *b2 = NULL;
                assert_int_equal(cpu.alloc(ctx, len * sizeof *b1, &b1), 0);
                assert_int_equal(cpu.alloc(ctx, len * sizeof *b2, &b2), 0);
                for (size_t i = 0; i < len; i++)
                    b1[i] = b2[i] = (i < off || i >= off + n * m) ? 7.0f : 0;
                float *o1 = b1 + off, *o2 = b2 + off;
                assert_int_equal(
                    cpu.reconstruct(ctx, n, m, r, p, q, 0.75f, e1, o1, 0),
                    0);
                assert_int_equal(
                    cpu.reconstruct(ctx, n, m, r, p, q, 0.75f, e2, o2, 1),
                    0);
                lowrank_ref_reconstruct(n, m, r, p, q, 0.75f, e3, o3, 0);
                for (size_t i = 0; i < n * m; i++) {
                    assert_true(o1[i] == o2[i]);
                    assert_true(e1[i] == e2[i]);
                }
                for (size_t i = 0; i < len; i++)
                    if (i < off || i >= off + n * m)
                        assert_true(b1[i] == 7.0f);
                s_assert_close(o1, o3, n * m, 1e-5, "misaligned out");
                s_assert_close(e1, e3, n * m, 1e-5, "misaligned e");
                cpu.release(ctx, b1);
                cpu.release(ctx, b2);
                free(p), free(q), free(e1), free(e2), free(e3), free(o3);
            }
    cpu.free(ctx);
}

/* --- orthogonalization ---------------------------------------------------- */

static void
test_orthogonalize__gram_schmidt__matches_ref_and_is_orthonormal(void **s)
{
    (void)s;
    const size_t cases[][2] = {{1, 1}, {9, 1}, {9, 2}, {50, 3}, {300, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = cases[c][0], r = cases[c][1];
        float *a = s_randn(n * r, 7 + c), *b = s_dup(a, n * r);
        assert_int_equal(s_orthogonalize(a, n, r, RUMOR_LOWRANK_ORTH_GS, 0.0f),
                         RUMOR_OK);
        lowrank_ref_gram_schmidt(b, n, r, 0.0f);
        s_assert_close(a, b, n * r, 1e-6, "gram-schmidt");
        assert_true(s_orth_defect(a, n, r) < 1e-5);
        free(a), free(b);
    }
}

static void
test_orthogonalize__lapack_qr__matches_householder_ref(void **s)
{
    (void)s;
    const size_t cases[][2] = {{3, 3}, {10, 3}, {64, 4}, {257, 8}, {40, 33}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = cases[c][0], r = cases[c][1];
        float *a = s_randn(n * r, 70 + c), *b = s_dup(a, n * r);
        assert_int_equal(s_orthogonalize(a, n, r, RUMOR_LOWRANK_ORTH_QR, 0.0f),
                         RUMOR_OK);
        assert_int_equal(lowrank_ref_householder(b, n, r), RUMOR_OK);
        /* Same sign convention as LAPACK, so the same columns. */
        s_assert_close(a, b, n * r, 1e-5, "householder");
        assert_true(s_orth_defect(a, n, r) < 1e-5);
        free(a), free(b);
    }
}

static void
test_orthogonalize__cholesky_qr2__orthonormal_same_span_positive_r(void **s)
{
    (void)s;
    size_t n = 200, r = 6;
    float *a = s_randn(n * r, 900), *orig = s_dup(a, n * r);
    float *h = s_dup(a, n * r);
    assert_int_equal(s_orthogonalize(a, n, r, RUMOR_LOWRANK_ORTH_CHOLQR2, 0.0f),
                     RUMOR_OK);
    assert_true(s_orth_defect(a, n, r) < 1e-5);
    /* CholeskyQR2's R has a positive diagonal; Householder's Q differs from
     * it only by column signs. */
    assert_int_equal(lowrank_ref_householder(h, n, r), RUMOR_OK);
    for (size_t k = 0; k < r; k++) {
        double dot = 0;
        for (size_t i = 0; i < n; i++)
            dot += (double)a[i * r + k] * orig[i * r + k];
        assert_true(dot > 0); /* r_kk > 0 */
        double sign = 0;
        for (size_t i = 0; i < n; i++)
            sign += (double)a[i * r + k] * h[i * r + k];
        assert_true(fabs(fabs(sign) - 1.0) < 1e-4);
    }
    free(a), free(orig), free(h);
}

static void
test_orthogonalize__zero_columns__never_nan(void **s)
{
    (void)s;
    const rumor_lowrank_orth methods[] = {RUMOR_LOWRANK_ORTH_GS,
                                          RUMOR_LOWRANK_ORTH_QR,
                                          RUMOR_LOWRANK_ORTH_CHOLQR2,
                                          RUMOR_LOWRANK_ORTH_AUTO};
    const float epss[] = {0.0f, 1e-8f};
    for (size_t mi = 0; mi < 4; mi++)
        for (size_t ei = 0; ei < 2; ei++)
            for (size_t r = 1; r <= 4; r++) {
                size_t n = 20;
                float *a = s_randn(n * r, 5);
                for (size_t i = 0; i < n; i++)
                    a[i * r + (r - 1)] = 0;          /* last column zero */
                float *z = calloc(n * r, sizeof *z); /* all zero */
                assert_int_equal(
                    s_orthogonalize(a, n, r, methods[mi], epss[ei]),
                    RUMOR_OK);
                assert_int_equal(
                    s_orthogonalize(z, n, r, methods[mi], epss[ei]),
                    RUMOR_OK);
                for (size_t i = 0; i < n * r; i++) {
                    assert_true(isfinite(a[i]));
                    assert_true(isfinite(z[i]));
                }
                free(a), free(z);
            }
}

/* --- approximation quality against LAPACK SVD ----------------------------- */

static void
test_psgd__warm_started_iterations__within_one_percent_of_svd(void **s)
{
    (void)s;
    const size_t n = 80, m = 60;
    /* A matrix with a decaying spectrum: sum of random rank-1 terms. */
    float *mat = calloc(n * m, sizeof *mat);
    for (size_t k = 0; k < 20; k++) {
        float *u = s_randn(n, 300 + k), *v = s_randn(m, 400 + k);
        float sk = powf(0.6f, (float)k);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++)
                mat[i * m + j] += sk * u[i] * v[j];
        free(u), free(v);
    }
    float *a = s_dup(mat, n * m);
    float sv[60], superb[60];
    assert_int_equal(LAPACKE_sgesvd(LAPACK_ROW_MAJOR,
                                    'N',
                                    'N',
                                    (int)n,
                                    (int)m,
                                    a,
                                    (int)m,
                                    sv,
                                    NULL,
                                    1,
                                    NULL,
                                    1,
                                    superb),
                     0);
    free(a);
    const size_t ranks[] = {1, 2, 4};
    for (size_t ri = 0; ri < 3; ri++) {
        size_t r = ranks[ri];
        double best = 0;
        for (size_t k = r; k < 60; k++)
            best += (double)sv[k] * sv[k];
        best = sqrt(best);
        struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {n, m}};
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = r;
        o.error_feedback = false;
        o.seed = 11;
        rumor_lowrank_psgd *c = NULL;
        assert_int_equal(rumor_lowrank_psgd_new(&c, &shape, 1, &o), RUMOR_OK);
        float *out = calloc(n * m, sizeof *out);
        double err = 0;
        for (int it = 0; it < 40; it++) {
            float *g[1] = {mat};
            float *o1[1] = {out};
            struct rumor_lowrank_xchg x;
            bool done = false;
            assert_int_equal(rumor_lowrank_psgd_begin(c, g, &x), RUMOR_OK);
            assert_false(x.average);
            assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
            assert_false(done);
            assert_true(x.average);
            assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
            assert_true(done);
            assert_int_equal(rumor_lowrank_psgd_end(c, o1), RUMOR_OK);
            err = 0;
            for (size_t i = 0; i < n * m; i++)
                err += ((double)mat[i] - out[i]) * ((double)mat[i] - out[i]);
            err = sqrt(err);
        }
        if (!(err <= 1.01 * best))
            fail_msg("rank %zu: error %.6g, truncated SVD %.6g", r, err, best);
        free(out);
        rumor_lowrank_psgd_destroy(&c);
        assert_null(c);
    }
    free(mat);
}

/* --- against PyTorch's hook ----------------------------------------------- */

static const char *s_python = "/usr/bin/python3";

static bool
s_torch_missing(const char **why)
{
    if (access(s_python, X_OK) != 0) {
        *why = "/usr/bin/python3 not found";
        return true;
    }
    int rc = system("/usr/bin/python3 -c 'import torch, numpy' "
                    ">/dev/null 2>&1");
    if (rc != 0) {
        *why = "python3-torch / python3-numpy not installed (scripts/deps.sh)";
        return true;
    }
    return false;
}

static void
s_put(FILE *f, const void *x, size_t bytes)
{
    assert_int_equal(fwrite(x, 1, bytes, f), bytes);
}

/* The PowerSGDState fields a comparison with the hook sets. */
struct s_hook {
    size_t rank;
    float eps;
    uint64_t start_iter;
    float min_rate;
    bool ef;   /* use_error_feedback */
    bool warm; /* warm_start */
};

static struct s_hook
s_hook_plain(size_t rank, float eps)
{
    return (struct s_hook){rank, eps, 0, 2.0f, true, true};
}

/* The Q the compressor draws at step st (lowrank.c s_psgd_randomize:
 * Philox stream 2 i of rumor_seed_derive(seed, st, "PSG") per tensor i),
 * in the hook's q memory layout: what the hook gets for its torch.randn. */
static void
s_hook_draw(const rumor_lowrank_psgd *c,
            const struct rumor_lowrank_shape *shapes,
            size_t count,
            uint64_t seed,
            uint64_t st,
            float *q)
{
    uint64_t step_seed = rumor_seed_derive(seed, st, 0x505347);
    for (size_t i = 0; i < count; i++) {
        size_t off = 0, r = 0, n = 0, m = 0;
        if (rumor_lowrank_psgd_q_slot(c, i, &off, &r) != RUMOR_OK)
            continue;
        assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
        struct rumor_rng rng;
        rumor_rng_init(&rng, step_seed, 2 * i);
        for (size_t k = 0; k < m * r; k++)
            q[off + k] = (float)rumor_rng_normal(&rng);
    }
}

/* Writes hook_ref.py's input (see its docstring) and runs it; *out holds
 * what it wrote. */
static void
s_hook_run(const struct s_hook *h,
           const struct rumor_lowrank_shape *shapes,
           size_t count,
           int steps,
           const float *draws,
           int32_t qsets,
           size_t qf,
           const float *grads,
           size_t numel,
           rumor_buf *out)
{
    char in_path[] = "/tmp/rumor-lowrank-in-XXXXXX";
    char out_path[] = "/tmp/rumor-lowrank-out-XXXXXX";
    int fd_in = mkstemp(in_path), fd_out = mkstemp(out_path);
    assert_true(fd_in >= 0 && fd_out >= 0);
    close(fd_out);
    FILE *f = fdopen(fd_in, "wb");
    assert_non_null(f);
    int32_t hdr[8] = {(int32_t)h->rank,
                      0,
                      steps,
                      (int32_t)count,
                      (int32_t)h->start_iter,
                      0,
                      h->ef,
                      h->warm};
    memcpy(&hdr[1], &h->eps, sizeof h->eps);
    memcpy(&hdr[5], &h->min_rate, sizeof h->min_rate);
    s_put(f, hdr, sizeof hdr);
    for (size_t i = 0; i < count; i++) {
        int32_t nd = (int32_t)shapes[i].ndim;
        s_put(f, &nd, 4);
        for (size_t d = 0; d < shapes[i].ndim; d++) {
            int32_t v = (int32_t)shapes[i].dims[d];
            s_put(f, &v, 4);
        }
    }
    s_put(f, &qsets, 4);
    s_put(f, draws, (size_t)qsets * qf * sizeof(float));
    s_put(f, grads, numel * (size_t)steps * sizeof(float));
    fclose(f);

    char cmd[512];
    snprintf(cmd,
             sizeof cmd,
             "%s tests/lowrank/hook_ref.py %s %s",
             s_python,
             in_path,
             out_path);
    int rc = system(cmd);
    unlink(in_path);
    if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0)) {
        unlink(out_path);
        fail_msg("hook_ref.py failed (status %d): %s", rc, cmd);
    }
    rumor_buf_init(out, (size_t)1 << 30);
    assert_int_equal(rumor_buf_read_file(out, out_path), RUMOR_OK);
    unlink(out_path);
}

/* Runs the compressor and PyTorch's hook with the options h on the same
 * gradients for steps steps, one node, the hook's random Q replaced by
 * the compressor's own draws, and compares P, Q (warm start), every
 * approximation and error memory (error feedback); before start_iter the
 * compressor must be inactive, as the hook runs plain all-reduce. */
static void
s_hook_case(const struct s_hook *h,
            const struct rumor_lowrank_shape *shapes,
            size_t count,
            int steps)
{
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = h->rank;
    o.eps = h->eps;
    o.start_iter = h->start_iter;
    o.min_rate = h->min_rate;
    o.error_feedback = h->ef;
    o.warm_start = h->warm;
    o.seed = 11;
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&c, shapes, count, &o), RUMOR_OK);
    size_t numel = 0, offs[16];
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
        offs[i] = numel;
        numel += n * m;
    }
    size_t qf = rumor_lowrank_psgd_q_floats(c);
    float *draws = malloc(((size_t)steps * qf + 1) * sizeof *draws);
    assert_non_null(draws);
    int32_t qsets = 0;
    for (int st = (int)h->start_iter; st < steps; st++)
        if (!h->warm || st == (int)h->start_iter)
            s_hook_draw(c,
                        shapes,
                        count,
                        o.seed,
                        (uint64_t)st,
                        draws + qf * (size_t)qsets++);
    float *grads = s_randn(numel * (size_t)steps, 78 + h->rank);
    rumor_buf hook;
    s_hook_run(h, shapes, count, steps, draws, qsets, qf, grads, numel, &hook);

    size_t pf = 0;
    for (size_t i = 0; i < count; i++)
        if (rumor_lowrank_psgd_compressed(c, i)) {
            size_t n = 0, m = 0;
            assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
            pf += n * lowrank_rank_for(n, m, h->rank);
        }
    size_t skipped =
        h->start_iter < (uint64_t)steps ? h->start_iter : (size_t)steps;
    size_t per_step = pf + (h->warm ? qf : 0) + numel + (h->ef ? numel : 0);
    assert_int_equal(hook.len,
                     (skipped * numel + per_step * ((size_t)steps - skipped)) *
                         sizeof(float));
    float *buf = malloc(numel * sizeof *buf);
    float *err = malloc(numel * sizeof *err);
    float *qnow = malloc((qf + 1) * sizeof *qnow);
    const float *h_at = (const float *)hook.data;
    for (int st = 0; st < steps; st++) {
        memcpy(buf, grads + numel * (size_t)st, numel * sizeof *buf);
        char what[96];
        if ((uint64_t)st < h->start_iter) { /* the hook's all-reduce */
            assert_false(rumor_lowrank_psgd_active(c));
            rumor_lowrank_psgd_skip(c);
            snprintf(what, sizeof what, "step %d: all-reduced", st);
            s_assert_close(buf, h_at, numel, 0, what);
            h_at += numel;
            continue;
        }
        const float *h_p = h_at, *h_q = h_at + pf;
        const float *h_out = h_q + (h->warm ? qf : 0);
        const float *h_err = h_out + numel;
        h_at += per_step;
        float *ptrs[16];
        for (size_t i = 0; i < count; i++)
            ptrs[i] = buf + offs[i];
        struct rumor_lowrank_xchg x;
        bool done = false;
        assert_true(rumor_lowrank_psgd_active(c));
        assert_int_equal(rumor_lowrank_psgd_begin(c, ptrs, &x), RUMOR_OK);
        assert_int_equal(x.floats, pf);
        snprintf(what, sizeof what, "rank %zu step %d: P", h->rank, st);
        s_assert_close(x.data, h_p, pf, 1e-5, what);
        assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
        assert_int_equal(x.floats, qf);
        assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
        assert_true(done);
        assert_int_equal(rumor_lowrank_psgd_end(c, ptrs), RUMOR_OK);
        if (h->warm) {
            assert_int_equal(rumor_lowrank_psgd_q_get(c, qnow), RUMOR_OK);
            snprintf(what, sizeof what, "rank %zu step %d: Q", h->rank, st);
            s_assert_close(qnow, h_q, qf, 1e-5, what);
        }
        for (size_t i = 0; i < count; i++) {
            size_t n = 0, m = 0;
            assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
            if (!rumor_lowrank_psgd_compressed(c, i))
                continue; /* the caller's: the hook averages it */
            snprintf(what,
                     sizeof what,
                     "rank %zu step %d: approx %zu",
                     h->rank,
                     st,
                     i);
            s_assert_close(buf + offs[i], h_out + offs[i], n * m, 1e-5, what);
            if (!h->ef) {
                assert_int_equal(rumor_lowrank_psgd_error_get(c, i, err),
                                 RUMOR_EINVAL);
                const float *mem = NULL;
                assert_int_equal(rumor_lowrank_psgd_error_mem(c, i, &mem),
                                 RUMOR_EINVAL);
                continue;
            }
            assert_int_equal(rumor_lowrank_psgd_error_get(c, i, err), 0);
            /* the memory in place (deferred: formed in scratch), bit for
             * bit the copy */
            const float *mem = NULL;
            assert_int_equal(rumor_lowrank_psgd_error_mem(c, i, &mem), 0);
            assert_memory_equal(mem, err, n * m * sizeof(float));
            snprintf(what,
                     sizeof what,
                     "rank %zu step %d: error %zu",
                     h->rank,
                     st,
                     i);
            s_assert_close(err, h_err + offs[i], n * m, 1e-5, what);
        }
    }
    free(buf), free(err), free(qnow), free(draws), free(grads);
    rumor_buf_free(&hook);
    rumor_lowrank_psgd_destroy(&c);
}

static void
test_psgd__same_m_and_first_q__matches_pytorch_hook(void **s)
{
    (void)s;
    const char *why = NULL;
    if (s_torch_missing(&why)) {
        printf("[  SKIP    ] PyTorch hook comparison: %s\n", why);
        skip();
    }
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {48, 40}},
        {.ndim = 1, .dims = {7}},
        {.ndim = 4, .dims = {16, 8, 3, 3}},
        {.ndim = 2, .dims = {6, 4}},
        {.ndim = 2, .dims = {33, 129}},
        {.ndim = 3, .dims = {20, 5, 7}},
        /* Repeated matrix shapes: the hook groups its P and Q memory by
         * shape (first appearance), and so must we. */
        {.ndim = 2, .dims = {48, 40}},
        {.ndim = 2, .dims = {16, 72}},
    };
    struct s_hook h = s_hook_plain(1, 0.0f);
    s_hook_case(&h, shapes, 8, 3);
    h = s_hook_plain(2, 0.0f);
    s_hook_case(&h, shapes, 8, 3);
    h = s_hook_plain(4, 0.0f); /* QR: LAPACK on both sides */
    s_hook_case(&h, shapes, 8, 3);
    h = s_hook_plain(2, 1e-8f);
    s_hook_case(&h, shapes, 8, 2);
}

/* The model of the hook comparisons: repeated shapes, a 1-D tensor, a
 * tensor too small to gain at rank 2. */
static const struct rumor_lowrank_shape s_hook_shapes[] = {
    {.ndim = 2, .dims = {48, 40}},
    {.ndim = 1, .dims = {7}},
    {.ndim = 4, .dims = {16, 8, 3, 3}},
    {.ndim = 2, .dims = {6, 4}},
    {.ndim = 2, .dims = {33, 129}},
    {.ndim = 2, .dims = {48, 40}},
};

#define S_HOOK_COUNT (sizeof s_hook_shapes / sizeof s_hook_shapes[0])

static void
s_skip_without_torch(void)
{
    const char *why = NULL;
    if (s_torch_missing(&why)) {
        printf("[  SKIP    ] PyTorch hook comparison: %s\n", why);
        skip();
    }
}

static void
test_psgd__start_iter__all_reduce_first_then_matches_pytorch_hook(void **s)
{
    (void)s;
    s_skip_without_torch();
    struct s_hook h = s_hook_plain(2, 0.0f);
    h.start_iter = 2; /* the hook's start_powerSGD_iter */
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 4);
}

static void
test_psgd__min_compression_rate__same_tensors_as_pytorch_hook(void **s)
{
    (void)s;
    s_skip_without_torch();
    /* rank 1, rate 15: only 48x40 and 33x129 gain enough; rank 2, rate 1:
     * 6x4 gains too ((6 + 4) 2 < 24), which it does not at the default 2 */
    struct s_hook h = s_hook_plain(1, 0.0f);
    h.min_rate = 15;
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 2);
    h = s_hook_plain(2, 0.0f);
    h.min_rate = 1;
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 2);
}

static void
test_psgd__no_error_feedback__matches_pytorch_hook(void **s)
{
    (void)s;
    s_skip_without_torch();
    struct s_hook h = s_hook_plain(2, 0.0f);
    h.ef = false; /* use_error_feedback=False */
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 3);
}

static void
test_psgd__no_warm_start__fresh_q_each_step_matches_pytorch_hook(void **s)
{
    (void)s;
    s_skip_without_torch();
    struct s_hook h = s_hook_plain(2, 0.0f);
    h.warm = false; /* warm_start=False */
    h.start_iter = 1;
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 3);
    h.ef = false;
    s_hook_case(&h, s_hook_shapes, S_HOOK_COUNT, 2);
}

/* epfml/powersgd's PowerSGD._should_compress: numel / (0.5 iters r (n +
 * m)) > min_compression_rate, for the one-sided variant; the hook's
 * (n + m) r rate < n m otherwise. */
static void
test_psgd__one_sided_selection__epfml_rule(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {10, 10}};
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = 2; /* hook: 20 * 2 * 2 = 80 < 100, compressed */
    assert_true(rumor_lowrank_psgd_worth(&o, 10, 10));
    o.one_sided = true;
    /* epfml, iters 2: 100 / (0.5 * 2 * 2 * 20) = 2.5 > 2, compressed;
     * iters 3: 100 / 60 = 1.67, all-reduced */
    const struct {
        size_t iters;
        bool compressed;
    } rows[] = {{1, true}, {2, true}, {3, false}};
    for (size_t k = 0; k < 3; k++) {
        o.iters = rows[k].iters;
        assert_int_equal(rumor_lowrank_psgd_worth(&o, 10, 10),
                         rows[k].compressed);
        rumor_lowrank_psgd *c = NULL;
        assert_int_equal(rumor_lowrank_psgd_new(&c, &shape, 1, &o), 0);
        assert_int_equal(rumor_lowrank_psgd_compressed(c, 0),
                         rows[k].compressed);
        rumor_lowrank_psgd_destroy(&c);
    }
}

static size_t s_orth_batches; /* calls of s_counting_orth_batch */
static rumor_err (*s_orth_one)(void *ctx,
                               float *p,
                               size_t n,
                               size_t r,
                               rumor_lowrank_orth method,
                               float eps);

/* A batched orthogonalization for the ref backend: counts its calls and
 * runs the single-matrix one on each. */
static rumor_err
s_counting_orth_batch(void *ctx,
                      float *const *ps,
                      size_t n,
                      size_t r,
                      rumor_lowrank_orth method,
                      float eps,
                      size_t count)
{
    s_orth_batches++;
    for (size_t i = 0; i < count; i++) {
        rumor_err rc = s_orth_one(ctx, ps[i], n, r, method, eps);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

/* batch_tensors_with_same_shape: on, a backend's batched kernels take a
 * shape group per call; off, one call per matrix; the numbers are the
 * same (the same operations in the same order). */
static void
test_psgd__batch_off__per_matrix_calls_same_numbers(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shapes[] = {{.ndim = 2, .dims = {30, 20}},
                                                 {.ndim = 2, .dims = {10, 50}},
                                                 {.ndim = 2, .dims = {30, 20}}};
    size_t numel = 600 + 500 + 600;
    float *out[2] = {NULL, NULL};
    size_t calls[2] = {0, 0};
    for (int batch = 0; batch < 2; batch++) {
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = 2;
        o.batch = batch;
        struct lowrank_backend_i be;
        void *ctx = NULL;
        assert_int_equal(lowrank_ref_init(&be, &ctx), RUMOR_OK);
        s_orth_one = be.orthogonalize;
        be.orthogonalize_batch = s_counting_orth_batch;
        rumor_lowrank_psgd *c = NULL;
        assert_int_equal(lowrank_psgd_new_on(&c, shapes, 3, &o, &be, ctx), 0);
        s_orth_batches = 0;
        out[batch] = s_randn(numel, 91);
        float *ptr[3] = {out[batch], out[batch] + 600, out[batch] + 1100};
        struct rumor_lowrank_xchg x;
        bool done = false;
        assert_int_equal(rumor_lowrank_psgd_begin(c, ptr, &x), RUMOR_OK);
        while (!done)
            assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), 0);
        assert_int_equal(rumor_lowrank_psgd_end(c, ptr), RUMOR_OK);
        calls[batch] = s_orth_batches;
        rumor_lowrank_psgd_destroy(&c);
    }
    assert_int_equal(calls[0], 0);
    assert_int_equal(calls[1], 4); /* Q then P, of the two shape groups */
    assert_memory_equal(out[0], out[1], numel * sizeof(float));
    free(out[0]), free(out[1]);
}

/* --- PowerSGD mechanics --------------------------------------------------- */

static void
test_psgd__error_feedback__approx_plus_error_equals_m(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {30, 50}};
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = 3;
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&c, &shape, 1, &o), RUMOR_OK);
    float *e_old = calloc(1500, sizeof *e_old), *e_new = malloc(6000);
    for (int st = 0; st < 3; st++) {
        float *g = s_randn(1500, 40 + st), *g0 = s_dup(g, 1500);
        float *ptr[1] = {g};
        struct rumor_lowrank_xchg x;
        bool done = false;
        assert_int_equal(rumor_lowrank_psgd_begin(c, ptr, &x), RUMOR_OK);
        while (!done)
            assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
        assert_int_equal(rumor_lowrank_psgd_end(c, ptr), RUMOR_OK);
        assert_int_equal(rumor_lowrank_psgd_error_get(c, 0, e_new), RUMOR_OK);
        for (size_t i = 0; i < 1500; i++)
            assert_float_equal(g[i] + e_new[i], g0[i] + e_old[i], 1e-5);
        memcpy(e_old, e_new, 6000);
        free(g), free(g0);
    }
    assert_int_equal(rumor_lowrank_psgd_step(c), 3);
    free(e_old), free(e_new);
    rumor_lowrank_psgd_destroy(&c);
}

static void
test_psgd__cpu_backend__matches_ref_backend_over_steps(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {70, 90}},
        {.ndim = 4, .dims = {32, 16, 3, 3}}};
    for (int one_sided = 0; one_sided < 2; one_sided++)
        for (size_t r = 1; r <= 6; r += 5) {
            struct rumor_lowrank_psgd_opts o;
            rumor_lowrank_psgd_opts_default(&o);
            o.rank = r;
            o.one_sided = one_sided;
            o.iters = one_sided ? 2 : 1;
            o.eps = 1e-8f;
            o.seed = 5;
            struct lowrank_backend_i be;
            void *ctx = NULL;
            rumor_lowrank_psgd *a = NULL, *b = NULL;
            assert_int_equal(rumor_lowrank_psgd_new(&a, shapes, 2, &o), 0);
            assert_int_equal(lowrank_ref_init(&be, &ctx), RUMOR_OK);
            assert_int_equal(lowrank_psgd_new_on(&b, shapes, 2, &o, &be, ctx),
                             RUMOR_OK);
            for (int st = 0; st < 3; st++) {
                float *ga = s_randn(6300 + 4608, 60 + st);
                float *gb = s_dup(ga, 6300 + 4608);
                float *pa[2] = {ga, ga + 6300}, *pb[2] = {gb, gb + 6300};
                struct rumor_lowrank_xchg xa, xb;
                bool da = false, db = false;
                assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
                assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
                while (!da) {
                    assert_int_equal(xa.floats, xb.floats);
                    s_assert_close(xa.data, xb.data, xa.floats, 1e-4, "xchg");
                    assert_int_equal(rumor_lowrank_psgd_next(a, &xa, &da), 0);
                    assert_int_equal(rumor_lowrank_psgd_next(b, &xb, &db), 0);
                    assert_int_equal(da, db);
                }
                assert_int_equal(rumor_lowrank_psgd_end(a, pa), 0);
                assert_int_equal(rumor_lowrank_psgd_end(b, pb), 0);
                s_assert_close(ga, gb, 6300 + 4608, 1e-4, "approx");
                free(ga), free(gb);
            }
            rumor_lowrank_psgd_destroy(&a);
            rumor_lowrank_psgd_destroy(&b);
        }
}

typedef rumor_err (*s_backend_init)(struct lowrank_backend_i *iface,
                                    void **ctx);

/* Runs steps of a compressor and its twin on the same grads (in each
 * backend's memory); the twin runs on the same backend without the fused
 * deferred error update, so every exchange, approximation and error memory
 * must be equal bit for bit. */
static void
s_defer_steps(s_backend_init init,
              const struct rumor_lowrank_shape *shapes,
              size_t count,
              size_t numel,
              size_t rank)
{
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = rank;
    o.seed = 11;
    struct lowrank_backend_i be, plain;
    void *ctx = NULL, *ctx2 = NULL;
    rumor_lowrank_psgd *a = NULL, *b = NULL;
    assert_int_equal(init(&be, &ctx), RUMOR_OK);
    assert_non_null(be.project_right_ef);
    assert_int_equal(lowrank_psgd_new_on(&a, shapes, count, &o, &be, ctx), 0);
    assert_int_equal(init(&plain, &ctx2), RUMOR_OK);
    plain.project_right_ef = NULL;
    plain.project_right_ef_batch = NULL;
    assert_int_equal(lowrank_psgd_new_on(&b, shapes, count, &o, &plain, ctx2),
                     0);
    float **pa = calloc(count, sizeof *pa), **pb = calloc(count, sizeof *pb);
    float *ea = malloc(numel * sizeof *ea), *eb = malloc(numel * sizeof *eb);
    float *dga = NULL, *dgb = NULL; /* the grads in backend memory */
    assert_true(pa != NULL && pb != NULL && ea != NULL && eb != NULL);
    assert_int_equal(be.alloc(ctx, numel * sizeof(float), &dga), 0);
    assert_int_equal(plain.alloc(ctx2, numel * sizeof(float), &dgb), 0);
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
        pa[i] = dga + at;
        pb[i] = dgb + at;
        at += n * m;
    }
    for (int st = 0; st < 4; st++) {
        float *ga = s_randn(numel, 90 + (uint64_t)st);
        float *gb = s_dup(ga, numel);
        assert_int_equal(be.upload(ctx, dga, ga, numel * sizeof(float)), 0);
        assert_int_equal(plain.upload(ctx2, dgb, gb, numel * sizeof(float)), 0);
        struct rumor_lowrank_xchg xa, xb;
        bool da = false, db = false;
        assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
        assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
        while (!da) {
            assert_int_equal(xa.floats, xb.floats);
            assert_memory_equal(xa.data, xb.data, xa.floats * sizeof(float));
            assert_int_equal(rumor_lowrank_psgd_next(a, &xa, &da), 0);
            assert_int_equal(rumor_lowrank_psgd_next(b, &xb, &db), 0);
            assert_int_equal(da, db);
        }
        assert_int_equal(rumor_lowrank_psgd_end(a, pa), 0);
        assert_int_equal(rumor_lowrank_psgd_end(b, pb), 0);
        assert_int_equal(be.download(ctx, ga, dga, numel * sizeof(float)), 0);
        assert_int_equal(plain.download(ctx2, gb, dgb, numel * sizeof(float)),
                         0);
        assert_memory_equal(ga, gb, numel * sizeof(float));
        for (size_t i = 0; i < count; i++) {
            if (!rumor_lowrank_psgd_compressed(a, i))
                continue;
            size_t n = 0, m = 0;
            assert_int_equal(rumor_lowrank_matricize(&shapes[i], &n, &m), 0);
            assert_int_equal(rumor_lowrank_psgd_error_get(a, i, ea), 0);
            assert_int_equal(rumor_lowrank_psgd_error_get(b, i, eb), 0);
            assert_memory_equal(ea, eb, n * m * sizeof(float));
            /* Setting the memory replaces the pending update too (and
             * leaves a group partly deferred: the unbatched path). */
            if (st == 2 && i % 2 == 0)
                assert_int_equal(rumor_lowrank_psgd_error_set(a, i, eb), 0);
        }
        free(ga), free(gb);
    }
    be.release(ctx, dga);
    plain.release(ctx2, dgb);
    free(pa), free(pb), free(ea), free(eb);
    rumor_lowrank_psgd_destroy(&a);
    rumor_lowrank_psgd_destroy(&b);
}

/* Odd row counts (the reconstruction's unpaired last row), columns not a
 * multiple of 8, a repeated shape (a batch on cuda), ranks on both sides
 * of the paired-row limits and above the own kernels' rank 8. */
static void
s_defer_all_ranks(s_backend_init init)
{
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {71, 90}},
        {.ndim = 4, .dims = {32, 16, 3, 3}},
        {.ndim = 1, .dims = {10}},
        {.ndim = 2, .dims = {40, 37}},
        {.ndim = 4, .dims = {32, 16, 3, 3}}};
    size_t numel = 71 * 90 + 32 * 144 + 10 + 40 * 37 + 32 * 144;
    const size_t ranks[] = {1, 2, 3, 4, 5, 6, 9};
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++)
        s_defer_steps(init, shapes, 5, numel, ranks[k]);
}

static void
test_psgd__deferred_error_update__equals_the_two_pass_update(void **s)
{
    (void)s;
    s_defer_all_ranks(lowrank_cpu_init);
}

static void
test_psgd__selection_and_start_iter__as_the_hook(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 1, .dims = {100}},     /* 1-D: never */
        {.ndim = 2, .dims = {6, 4}},    /* (6+4)*1*2 = 20 < 24: yes */
        {.ndim = 2, .dims = {5, 4}},    /* 18 < 20: yes */
        {.ndim = 2, .dims = {4, 4}},    /* 16 < 16: no */
        {.ndim = 2, .dims = {1, 1000}}, /* 1002*1*2 > 1000: no */
    };
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.start_iter = 2;
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&c, shapes, 5, &o), RUMOR_OK);
    const bool want[] = {false, true, true, false, false};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(rumor_lowrank_psgd_compressed(c, i), want[i]);
    assert_false(rumor_lowrank_psgd_compressed(c, 5));
    float g1[24] = {0}, g2[20] = {0};
    float *ptrs[5] = {NULL, g1, g2, NULL, NULL};
    struct rumor_lowrank_xchg x;
    assert_false(rumor_lowrank_psgd_active(c));
    assert_int_equal(rumor_lowrank_psgd_begin(c, ptrs, &x), RUMOR_EINVAL);
    rumor_lowrank_psgd_skip(c);
    rumor_lowrank_psgd_skip(c);
    assert_true(rumor_lowrank_psgd_active(c));
    assert_int_equal(rumor_lowrank_psgd_begin(c, ptrs, &x), RUMOR_OK);
    assert_int_equal(x.floats, 6 + 5);
    /* A second begin while a step is open is the caller's bug. */
    assert_int_equal(rumor_lowrank_psgd_begin(c, ptrs, &x), RUMOR_EINVAL);
    assert_int_equal(rumor_lowrank_psgd_end(c, ptrs), RUMOR_EINVAL);
    rumor_lowrank_psgd_destroy(&c);
    rumor_lowrank_psgd_destroy(&c); /* twice is safe */

    o.one_sided = true;
    o.error_feedback = false;
    assert_int_equal(rumor_lowrank_psgd_new(&c, shapes, 5, &o), RUMOR_EINVAL);
    assert_null(c);
}

static void
test_psgd__same_seed__same_first_q_on_every_node(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {40, 30}};
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = 2;
    o.seed = 1234;
    rumor_lowrank_psgd *a = NULL, *b = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&a, &shape, 1, &o), 0);
    assert_int_equal(rumor_lowrank_psgd_new(&b, &shape, 1, &o), 0);
    float *ga = s_randn(1200, 1), *gb = s_randn(1200, 2);
    float *pa[1] = {ga}, *pb[1] = {gb};
    struct rumor_lowrank_xchg xa, xb;
    assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
    assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
    /* Different gradients, same Q: P is linear in M with the same Q, so
     * P_a + P_b equals (M_a + M_b) Q with the Q node a drew. */
    float *sum = malloc(1200 * sizeof *sum), *ps = malloc(80 * 4);
    for (size_t i = 0; i < 1200; i++)
        sum[i] = ga[i] + gb[i];
    /* A third node with the same seed, on the summed gradient. */
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&c, &shape, 1, &o), 0);
    float *gc = s_dup(sum, 1200), *pc[1] = {gc};
    struct rumor_lowrank_xchg xc;
    assert_int_equal(rumor_lowrank_psgd_begin(c, pc, &xc), 0);
    for (size_t i = 0; i < 80; i++)
        ps[i] = xa.data[i] + xb.data[i];
    s_assert_close(ps, xc.data, 80, 1e-5, "P sum with a shared Q");
    free(ga), free(gb), free(gc), free(sum), free(ps);
    rumor_lowrank_psgd_destroy(&a);
    rumor_lowrank_psgd_destroy(&b);
    rumor_lowrank_psgd_destroy(&c);
}

/* Two nodes exchanging through the API sum P and average Q exactly as an
 * all-reduce would, and both end with the same approximation. */
static void
test_psgd__two_nodes_reducing__agree_on_the_approximation(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {25, 35}};
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = 2;
    rumor_lowrank_psgd *a = NULL, *b = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&a, &shape, 1, &o), 0);
    assert_int_equal(rumor_lowrank_psgd_new(&b, &shape, 1, &o), 0);
    for (int st = 0; st < 3; st++) {
        float *ga = s_randn(875, 10 + st), *gb = s_randn(875, 20 + st);
        float *pa[1] = {ga}, *pb[1] = {gb};
        struct rumor_lowrank_xchg xa, xb;
        bool da = false, db = false;
        assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
        assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
        while (!da) {
            for (size_t i = 0; i < xa.floats; i++) {
                float v = xa.data[i] + xb.data[i];
                if (xa.average)
                    v /= 2;
                xa.data[i] = v;
                xb.data[i] = v;
            }
            assert_int_equal(rumor_lowrank_psgd_next(a, &xa, &da), 0);
            assert_int_equal(rumor_lowrank_psgd_next(b, &xb, &db), 0);
        }
        assert_int_equal(rumor_lowrank_psgd_end(a, pa), 0);
        assert_int_equal(rumor_lowrank_psgd_end(b, pb), 0);
        assert_memory_equal(ga, gb, 875 * sizeof(float));
        free(ga), free(gb);
    }
    rumor_lowrank_psgd_destroy(&a);
    rumor_lowrank_psgd_destroy(&b);
}

/* --- PowerGossip ---------------------------------------------------------- */

static void
s_edge_pair(const struct rumor_lowrank_shape *shapes,
            size_t count,
            size_t rank,
            rumor_lowrank_edge **lo,
            rumor_lowrank_edge **hi)
{
    struct rumor_lowrank_edge_opts o;
    rumor_lowrank_edge_opts_default(&o);
    o.rank = rank;
    o.seed = 99;
    o.self_id = 2;
    o.peer_id = 5;
    assert_int_equal(rumor_lowrank_edge_new(lo, shapes, count, &o), 0);
    o.self_id = 5;
    o.peer_id = 2;
    assert_int_equal(rumor_lowrank_edge_new(hi, shapes, count, &o), 0);
}

/* The factor iteration t draws without warm start, as lowrank.h gives
 * it: column c of the first compressed tensor from stream (t << 24) | c
 * of the pair's seed (s_edge_pair's: 99, ids 2 and 5). */
static void
s_fresh_factor(float *f, size_t rows, size_t r, uint64_t t)
{
    uint64_t seed = rumor_seed_derive(99, 2, 5);
    for (size_t c = 0; c < r; c++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, seed, (t << 24) | c);
        for (size_t k = 0; k < rows; k++)
            f[k * r + c] = (float)rumor_rng_normal(&rng);
    }
}

/* Four iterations by hand with the ref kernels, as algorithms.py writes
 * them: t odd: orthogonalize q, p = (x_hi - x_lo) q, x_lo += w p q^T,
 * x_hi -= w p q^T; t even: the same with p and q swapped; with warm start
 * p and q carry over, without it (warm_start=False) the factor to
 * orthogonalize is first drawn afresh. Both ends must hold the same
 * factors as the reference after every iteration, and move as it does. */
static void
s_edge_reference_run(bool warm)
{
    const size_t n = 12, m = 9, r = 2;
    const struct rumor_lowrank_shape shapes[] = {{.ndim = 1, .dims = {5}},
                                                 {.ndim = 2, .dims = {n, m}}};
    struct rumor_lowrank_edge_opts o;
    rumor_lowrank_edge_opts_default(&o);
    o.rank = r;
    o.seed = 99;
    o.warm_start = warm;
    rumor_lowrank_edge *lo = NULL, *hi = NULL;
    o.self_id = 2;
    o.peer_id = 5;
    assert_int_equal(rumor_lowrank_edge_new(&lo, shapes, 2, &o), 0);
    o.self_id = 5;
    o.peer_id = 2;
    assert_int_equal(rumor_lowrank_edge_new(&hi, shapes, 2, &o), 0);
    float *xl = s_randn(n * m, 1), *xh = s_randn(n * m, 2);
    /* The shared initial factors, drawn as the edge draws them. */
    uint64_t seed = rumor_seed_derive(99, 2, 5);
    float *p = malloc(n * r * 4), *q = malloc(m * r * 4);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 2);
    for (size_t i = 0; i < n * r; i++)
        p[i] = (float)rumor_rng_normal(&rng);
    rumor_rng_init(&rng, seed, 3);
    for (size_t i = 0; i < m * r; i++)
        q[i] = (float)rumor_rng_normal(&rng);
    float *el = s_dup(xl, n * m), *eh = s_dup(xh, n * m);
    float *d = malloc(n * m * 4);
    float *sl = malloc((n + m) * r * 4), *sh = malloc((n + m) * r * 4);
    const float w = 0.3f;
    for (uint64_t t = 1; t <= 4; t++) {
        float *pl[2] = {NULL, xl}, *ph[2] = {NULL, xh};
        size_t fl = rumor_lowrank_edge_msg_floats(lo, t);
        assert_int_equal(fl, (t % 2 ? n : m) * r);
        float *ml = malloc(fl * 4), *mh = malloc(fl * 4);
        assert_int_equal(rumor_lowrank_edge_product(lo, pl, t, ml), 0);
        assert_int_equal(rumor_lowrank_edge_product(hi, ph, t, mh), 0);
        assert_int_equal(rumor_lowrank_edge_combine(lo, mh), 0);
        assert_int_equal(rumor_lowrank_edge_combine(hi, ml), 0);
        assert_int_equal(rumor_lowrank_edge_apply(lo, pl, w), 0);
        assert_int_equal(rumor_lowrank_edge_apply(hi, ph, w), 0);
        /* Expected, by hand. */
        for (size_t i = 0; i < n * m; i++)
            d[i] = eh[i] - el[i];
        if (t % 2) {
            if (!warm)
                s_fresh_factor(q, m, r, t);
            lowrank_ref_gram_schmidt(q, m, r, 1e-8f);
            lowrank_ref_project_right(d, NULL, n, m, q, r, p);
        } else {
            if (!warm)
                s_fresh_factor(p, n, r, t);
            lowrank_ref_gram_schmidt(p, n, r, 1e-8f);
            lowrank_ref_project_left(d, NULL, n, m, p, r, q);
        }
        lowrank_ref_reconstruct(n, m, r, p, q, w, NULL, el, 1.0f);
        lowrank_ref_reconstruct(n, m, r, p, q, -w, NULL, eh, 1.0f);
        assert_int_equal(rumor_lowrank_edge_state_get(lo, sl), 0);
        assert_int_equal(rumor_lowrank_edge_state_get(hi, sh), 0);
        assert_memory_equal(sl, sh, (n + m) * r * 4); /* both ends agree */
        s_assert_close(sl, p, n * r, 1e-5, "p");
        s_assert_close(sl + n * r, q, m * r, 1e-5, "q");
        s_assert_close(xl, el, n * m, 1e-5, "low end");
        s_assert_close(xh, eh, n * m, 1e-5, "high end");
        free(ml), free(mh);
    }
    free(xl), free(xh), free(p), free(q), free(el), free(eh), free(d);
    free(sl), free(sh);
    rumor_lowrank_edge_destroy(&lo);
    rumor_lowrank_edge_destroy(&hi);
    assert_null(lo);
}

static void
test_edge__iterations__follow_the_reference_update(void **s)
{
    (void)s;
    s_edge_reference_run(true);
}

static void
test_edge__no_warm_start__each_iteration_from_a_fresh_factor(void **s)
{
    (void)s;
    s_edge_reference_run(false);
}

static void
test_edge__ring_of_four__preserves_average_and_shrinks_differences(void **s)
{
    (void)s;
    enum { N = 4, R = 20, C = 16 };
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {R, C}};
    float *x[N], avg0[R * C] = {0};
    rumor_lowrank_edge *edges[N][2]; /* [node][0: left, 1: right] */
    for (int i = 0; i < N; i++) {
        x[i] = s_randn(R * C, 500 + (uint64_t)i);
        for (int k = 0; k < R * C; k++)
            avg0[k] += x[i][k] / N;
        for (int side = 0; side < 2; side++) {
            struct rumor_lowrank_edge_opts o;
            rumor_lowrank_edge_opts_default(&o);
            o.rank = 2;
            o.seed = 3;
            o.self_id = (uint64_t)i;
            o.peer_id = (uint64_t)((i + (side ? 1 : N - 1)) % N);
            assert_int_equal(
                rumor_lowrank_edge_new(&edges[i][side], &shape, 1, &o),
                0);
        }
    }
    double dist0 = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < R * C; k++)
            dist0 += (x[i][k] - avg0[k]) * (x[i][k] - avg0[k]);
    float msg[N][2][R * 2 > C * 2 ? R * 2 : C * 2];
    for (uint64_t t = 1; t <= 200; t++) {
        for (int i = 0; i < N; i++)
            for (int side = 0; side < 2; side++) {
                float *pp[1] = {x[i]};
                assert_int_equal(rumor_lowrank_edge_product(edges[i][side],
                                                            pp,
                                                            t,
                                                            msg[i][side]),
                                 0);
            }
        for (int i = 0; i < N; i++) {
            /* node i's left neighbour sent on its right edge, and back. */
            int left = (i + N - 1) % N, right = (i + 1) % N;
            assert_int_equal(
                rumor_lowrank_edge_combine(edges[i][0], msg[left][1]),
                0);
            assert_int_equal(
                rumor_lowrank_edge_combine(edges[i][1], msg[right][0]),
                0);
        }
        for (int i = 0; i < N; i++)
            for (int side = 0; side < 2; side++) {
                float *pp[1] = {x[i]};
                assert_int_equal(
                    rumor_lowrank_edge_apply(edges[i][side], pp, 1.0f / 3),
                    0);
            }
    }
    double dist = 0;
    for (int k = 0; k < R * C; k++) {
        double avg = 0;
        for (int i = 0; i < N; i++)
            avg += x[i][k] / N;
        assert_float_equal(avg, avg0[k], 1e-4);
        for (int i = 0; i < N; i++)
            dist += (x[i][k] - avg) * (x[i][k] - avg);
    }
    if (!(dist < 1e-3 * dist0))
        fail_msg("consensus distance %.3g from %.3g", dist, dist0);
    for (int i = 0; i < N; i++) {
        free(x[i]);
        rumor_lowrank_edge_destroy(&edges[i][0]);
        rumor_lowrank_edge_destroy(&edges[i][1]);
    }
}

/* Nodes that start from the same seed have equal models at step 0: the
 * first products are zero, and a zero factor orthogonalizes to zero. The
 * edge must still mix once the models differ (it used to stay at zero
 * for good: PowerGossip then never mixed a matrix, issue 18). Two equal
 * models for 4 iterations, then node hi's gets a random offset; after 60
 * more iterations with weight 1/3 their difference must have shrunk
 * below 1e-3 of the offset, and the models must not move while they are
 * equal. */
static void
test_edge__equal_models_first__mixes_once_they_differ(void **s)
{
    (void)s;
    enum { R = 20, C = 16 };
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {R, C}};
    rumor_lowrank_edge *lo = NULL, *hi = NULL;
    s_edge_pair(&shape, 1, 2, &lo, &hi);
    float *a = s_randn(R * C, 71), *b = malloc(R * C * sizeof *b);
    float *offset = s_randn(R * C, 72), msg_lo[R * 2], msg_hi[R * 2];
    assert_non_null(b);
    memcpy(b, a, R * C * sizeof *b);
    double d0 = 0;
    for (uint64_t t = 1; t <= 64; t++) {
        if (t == 5)
            for (int k = 0; k < R * C; k++) {
                assert_float_equal(a[k], b[k], 0); /* nothing moved */
                b[k] += offset[k];
                d0 += (double)offset[k] * offset[k];
            }
        float *pa[1] = {a}, *pb[1] = {b};
        assert_int_equal(rumor_lowrank_edge_product(lo, pa, t, msg_lo), 0);
        assert_int_equal(rumor_lowrank_edge_product(hi, pb, t, msg_hi), 0);
        assert_int_equal(rumor_lowrank_edge_combine(lo, msg_hi), 0);
        assert_int_equal(rumor_lowrank_edge_combine(hi, msg_lo), 0);
        assert_int_equal(rumor_lowrank_edge_apply(lo, pa, 1.0f / 3), 0);
        assert_int_equal(rumor_lowrank_edge_apply(hi, pb, 1.0f / 3), 0);
    }
    double d = 0;
    for (int k = 0; k < R * C; k++)
        d += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
    if (!(d < 1e-3 * d0))
        fail_msg("difference %.3g from %.3g: the edge did not mix", d, d0);
    free(a);
    free(b);
    free(offset);
    rumor_lowrank_edge_destroy(&lo);
    rumor_lowrank_edge_destroy(&hi);
}

/* _write stores what _apply adds to a zeroed matrix, and never reads the
 * target: two identical edge pairs, one applying into zeros, one writing
 * over NaN, over four iterations, for an odd small shape (scalar tails
 * and masked columns) and one of 2^18 elements with m % 8 == 0 (the
 * streamed stores). Equal as floats (+0 and -0 alike), so equal bits
 * everywhere else. */
static void
s_edge_write_case(size_t n, size_t m, size_t rank)
{
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {n, m}};
    rumor_lowrank_edge *lo[2], *hi[2];
    for (int k = 0; k < 2; k++)
        s_edge_pair(&shape, 1, rank, &lo[k], &hi[k]);
    float *a = s_randn(n * m, 81), *b = s_randn(n * m, 82);
    float *za = malloc(n * m * sizeof *za), *zb = malloc(n * m * sizeof *zb);
    float *wa = malloc(n * m * sizeof *wa), *wb = malloc(n * m * sizeof *wb);
    float *msg_lo = malloc((n > m ? n : m) * rank * sizeof *msg_lo);
    float *msg_hi = malloc((n > m ? n : m) * rank * sizeof *msg_hi);
    assert_true(za && zb && wa && wb && msg_lo && msg_hi);
    for (uint64_t t = 1; t <= 4; t++) {
        memset(za, 0, n * m * sizeof *za);
        memset(zb, 0, n * m * sizeof *zb);
        for (size_t e = 0; e < n * m; e++)
            wa[e] = wb[e] = NAN;
        float *pa[1] = {a}, *pb[1] = {b};
        float *out_lo[2][1] = {{za}, {wa}}, *out_hi[2][1] = {{zb}, {wb}};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(rumor_lowrank_edge_product(lo[k], pa, t, msg_lo),
                             0);
            assert_int_equal(rumor_lowrank_edge_product(hi[k], pb, t, msg_hi),
                             0);
            assert_int_equal(rumor_lowrank_edge_combine(lo[k], msg_hi), 0);
            assert_int_equal(rumor_lowrank_edge_combine(hi[k], msg_lo), 0);
        }
        assert_int_equal(rumor_lowrank_edge_apply(lo[0], out_lo[0], 0.3f), 0);
        assert_int_equal(rumor_lowrank_edge_apply(hi[0], out_hi[0], 0.3f), 0);
        assert_int_equal(rumor_lowrank_edge_write(lo[1], out_lo[1], 0.3f), 0);
        assert_int_equal(rumor_lowrank_edge_write(hi[1], out_hi[1], 0.3f), 0);
        size_t moved = 0;
        for (size_t e = 0; e < n * m; e++) {
            if (!(za[e] == wa[e] && zb[e] == wb[e]))
                fail_msg("%zu x %zu, t %llu, element %zu: applied %g %g, "
                         "written %g %g",
                         n,
                         m,
                         (unsigned long long)t,
                         e,
                         za[e],
                         zb[e],
                         wa[e],
                         wb[e]);
            moved += za[e] != 0;
            a[e] += za[e];
            b[e] += zb[e];
        }
        assert_true(moved > n * m / 2); /* the step did move the models */
    }
    free(a), free(b), free(za), free(zb), free(wa), free(wb);
    free(msg_lo), free(msg_hi);
    for (int k = 0; k < 2; k++) {
        rumor_lowrank_edge_destroy(&lo[k]);
        rumor_lowrank_edge_destroy(&hi[k]);
    }
}

static void
test_edge__write__stores_what_apply_adds_to_zeros(void **s)
{
    (void)s;
    s_edge_write_case(13, 11, 2);
    s_edge_write_case(512, 512, 1);
}

/* _rows from the factors (_close, _state_get) against _write of the same
 * iteration, both ends, every row window of 3 and one odd window, over
 * three iterations: the same floats; and _sq_norm against the written
 * elements' squares summed in double. */
static void
s_edge_rows_case(size_t n, size_t m, size_t rank)
{
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {n, m}};
    rumor_lowrank_edge *e[2][2]; /* [copy][lo, hi]: write, rows */
    for (int k = 0; k < 2; k++)
        s_edge_pair(&shape, 1, rank, &e[k][0], &e[k][1]);
    float *x[2] = {s_randn(n * m, 91), s_randn(n * m, 92)};
    float *w = malloc(n * m * sizeof *w), *rows = malloc(n * m * sizeof *w);
    size_t side = n > m ? n : m;
    float *msg[2] = {malloc(side * rank * 4), malloc(side * rank * 4)};
    float *fac = malloc((n + m) * rank * sizeof *fac);
    assert_true(w && rows && msg[0] && msg[1] && fac);
    for (uint64_t t = 1; t <= 3; t++)
        for (int end = 0; end < 2; end++) {
            for (int k = 0; k < 2; k++) {
                float *pa[1] = {x[0]}, *pb[1] = {x[1]};
                assert_int_equal(
                    rumor_lowrank_edge_product(e[k][0], pa, t, msg[0]),
                    0);
                assert_int_equal(
                    rumor_lowrank_edge_product(e[k][1], pb, t, msg[1]),
                    0);
                assert_int_equal(rumor_lowrank_edge_combine(e[k][0], msg[1]),
                                 0);
                assert_int_equal(rumor_lowrank_edge_combine(e[k][1], msg[0]),
                                 0);
            }
            float *out[1] = {w};
            for (int k = 0; k < 2; k++) {
                rumor_lowrank_edge *wr = e[0][k], *rd = e[1][k];
                assert_int_equal(rumor_lowrank_edge_write(wr, out, 1.0f), 0);
                assert_int_equal(rumor_lowrank_edge_close(rd), 0);
                assert_int_equal(rumor_lowrank_edge_state_get(rd, fac), 0);
                for (size_t r0 = 0; r0 < n; r0 += 3) {
                    size_t cnt = n - r0 < 3 ? n - r0 : 3;
                    assert_int_equal(
                        rumor_lowrank_edge_rows(rd, fac, 0, r0, cnt, rows),
                        0);
                    assert_memory_equal(rows, w + r0 * m, cnt * m * 4);
                }
                assert_int_equal(
                    rumor_lowrank_edge_rows(rd, fac, 0, 1, n - 1, rows),
                    0);
                assert_memory_equal(rows, w + m, (n - 1) * m * 4);
                double sq = 0;
                for (size_t i = 0; i < n * m; i++)
                    sq += (double)w[i] * w[i];
                double got = rumor_lowrank_edge_sq_norm(rd, fac);
                assert_true(sq > 0);
                assert_true(fabs(got - sq) <= 1e-5 * sq);
            }
            (void)end;
        }
    free(x[0]), free(x[1]), free(w), free(rows), free(msg[0]), free(msg[1]);
    free(fac);
    for (int k = 0; k < 2; k++) {
        rumor_lowrank_edge_destroy(&e[k][0]);
        rumor_lowrank_edge_destroy(&e[k][1]);
    }
}

static void
test_edge__rows_from_factors__the_bits_write_stores(void **s)
{
    (void)s;
    s_edge_rows_case(13, 11, 2);
    s_edge_rows_case(9, 1000, 1);
    s_edge_rows_case(40, 24, 4);
    s_edge_rows_case(17, 33, 7);
    s_edge_rows_case(20, 30, 12); /* past the fast kernels: sgemm */
}

/* A product past float's range has no finite norm; zero factors give 0;
 * _rows and _close refuse what they cannot serve. */
static void
test_edge__sq_norm_and_rows__edges_of_their_range(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shapes[] = {{.ndim = 1, .dims = {5}},
                                                 {.ndim = 2, .dims = {6, 4}}};
    rumor_lowrank_edge *lo = NULL, *hi = NULL;
    s_edge_pair(shapes, 2, 1, &lo, &hi);
    float fac[10], out[24];
    for (size_t i = 0; i < 10; i++)
        fac[i] = 0;
    assert_true(rumor_lowrank_edge_sq_norm(lo, fac) == 0);
    for (size_t i = 0; i < 10; i++)
        fac[i] = i == 0 ? -3 : 1;
    /* row 0 of p q^T is -3 x (1,1,1,1), the others (1,1,1,1): 36 + 20 */
    assert_true(rumor_lowrank_edge_sq_norm(lo, fac) == 56);
    fac[0] = 1e20f, fac[6] = 1e20f;
    assert_true(isinf(rumor_lowrank_edge_sq_norm(lo, fac)));
    assert_int_equal(rumor_lowrank_edge_rows(lo, fac, 0, 0, 1, out),
                     RUMOR_EINVAL); /* a 1-D tensor */
    assert_int_equal(rumor_lowrank_edge_rows(lo, fac, 1, 5, 2, out),
                     RUMOR_EINVAL); /* past the last row */
    assert_int_equal(rumor_lowrank_edge_close(lo), RUMOR_EINVAL);
    rumor_lowrank_edge_destroy(&lo);
    rumor_lowrank_edge_destroy(&hi);
}

static void
test_edge__nan_message_or_misuse__rejected(void **s)
{
    (void)s;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {4, 3}};
    rumor_lowrank_edge *lo = NULL, *hi = NULL;
    s_edge_pair(&shape, 1, 1, &lo, &hi);
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float *pp[1] = {x};
    float msg[4];
    assert_int_equal(rumor_lowrank_edge_product(lo, pp, 0, msg), RUMOR_EINVAL);
    assert_int_equal(rumor_lowrank_edge_apply(lo, pp, 0.5f), RUMOR_EINVAL);
    assert_int_equal(rumor_lowrank_edge_product(lo, pp, 1, msg), RUMOR_OK);
    float bad[4] = {1, NAN, 0, 0};
    assert_int_equal(rumor_lowrank_edge_combine(lo, bad), RUMOR_ENUMERIC);
    bad[1] = INFINITY;
    assert_int_equal(rumor_lowrank_edge_combine(lo, bad), RUMOR_ENUMERIC);
    assert_int_equal(rumor_lowrank_edge_combine(lo, msg), RUMOR_OK);
    assert_int_equal(rumor_lowrank_edge_apply(lo, pp, 0.5f), RUMOR_OK);
    for (int i = 0; i < 12; i++)
        assert_float_equal(x[i], (float)(i + 1), 0); /* own - own = 0 */
    struct rumor_lowrank_edge_opts o;
    rumor_lowrank_edge_opts_default(&o);
    o.self_id = o.peer_id = 3;
    rumor_lowrank_edge *e = NULL;
    assert_int_equal(rumor_lowrank_edge_new(&e, &shape, 1, &o), RUMOR_EINVAL);
    rumor_lowrank_edge_destroy(&lo);
    rumor_lowrank_edge_destroy(&hi);
}

/* --- counting, shape files, CLI ------------------------------------------- */

static void
s_load_shapes(const char *path,
              struct rumor_lowrank_shape **shapes,
              size_t *count)
{
    rumor_buf b;
    rumor_buf_init(&b, 1 << 20);
    assert_int_equal(rumor_buf_read_file(&b, path), RUMOR_OK);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_lowrank_shapes_parse((const char *)b.data,
                                                b.len,
                                                path,
                                                shapes,
                                                count,
                                                &diag),
                     RUMOR_OK);
    rumor_buf_free(&b);
}

static void
test_count__resnet18_cifar10__paper_ratios(void **s)
{
    (void)s;
    struct rumor_lowrank_shape *shapes = NULL;
    size_t count = 0;
    s_load_shapes("tests/data/resnet18_cifar10.shapes", &shapes, &count);
    assert_int_equal(count, 62);
    /* PowerSGD paper, Table 3 / 4: 243x, 136x, 72x at ranks 1, 2, 4. */
    const struct {
        size_t rank;
        uint64_t sent;
        int ratio;
    } want[] = {{1, 45935, 243}, {2, 82260, 136}, {4, 154910, 72}};
    for (size_t i = 0; i < 3; i++) {
        struct rumor_lowrank_count c;
        assert_int_equal(
            rumor_lowrank_count_floats(shapes, count, want[i].rank, &c),
            0);
        assert_int_equal(c.params, 11173962);
        assert_int_equal(c.floats_sent, want[i].sent);
        assert_int_equal((int)lround((double)c.params / c.floats_sent),
                         want[i].ratio);
    }
    free(shapes);
    s_load_shapes("tests/data/lstm_powersgd.shapes", &shapes, &count);
    struct rumor_lowrank_count c;
    assert_int_equal(rumor_lowrank_count_floats(shapes, count, 1, &c), 0);
    assert_int_equal(c.params, 28949319);
    free(shapes);
}

static void
test_shapes_parse__malformed_lines__rejected_with_position(void **s)
{
    (void)s;
    static const struct {
        const char *text;
        rumor_err rc;
        int line, col;
        size_t count;
    } rows[] = {
        {"a 3 4\n# c\n\nb 5 # bias\n", RUMOR_OK, 0, 0, 2},
        {"a\n", RUMOR_EPROTO, 1, 2, 0},
        {"a 3 x\n", RUMOR_EPROTO, 1, 5, 0},
        {"a 3 0\n", RUMOR_EPROTO, 1, 5, 0},
        {"a 3 -4\n", RUMOR_EPROTO, 1, 5, 0},
        {"a 3 4\nb 99999999999\n", RUMOR_EPROTO, 2, 3, 0},
        {"a 1 1 1 1 1 1 1 1 1\n", RUMOR_EPROTO, 1, 19, 0},
        {"a 3 4x\n", RUMOR_EPROTO, 1, 5, 0},
        {"", RUMOR_OK, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct rumor_lowrank_shape *sh = NULL;
        size_t count = 99;
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_lowrank_shapes_parse(rows[i].text,
                                                  strlen(rows[i].text),
                                                  "t",
                                                  &sh,
                                                  &count,
                                                  &diag);
        if (rc != rows[i].rc)
            fail_msg("row %zu: got %s", i, rumor_errname(rc));
        if (rc == RUMOR_OK) {
            assert_int_equal(count, rows[i].count);
        } else {
            assert_null(sh);
            assert_int_equal(count, 0);
            assert_int_equal(diag.line, rows[i].line);
            if (diag.col != rows[i].col)
                fail_msg("row %zu: col %d, want %d", i, diag.col, rows[i].col);
        }
        free(sh);
    }
}

static void
test_cli_ratio__resnet18__prints_paper_ratios(void **s)
{
    (void)s;
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL) {
        printf("[  SKIP    ] RUMOR_BIN not set (run through make check)\n");
        skip();
    }
    char cmd[512];
    snprintf(cmd,
             sizeof cmd,
             "%s lowrank ratio --model tests/data/resnet18_cifar10.shapes "
             "--rank 1 --rank 2 --rank 4",
             bin);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[4096];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    assert_int_equal(pclose(p), 0);
    assert_non_null(strstr(out, "243"));
    assert_non_null(strstr(out, "136"));
    assert_non_null(strstr(out, " 72"));
    assert_non_null(strstr(out, "11173962"));
}

/* --- cuda against cpu ----------------------------------------------------- */

/* Opens the cuda backend, or skips the test with the CUDA runtime's reason
 * printed (never a silent pass without a GPU). */
static void
s_cuda_or_skip(const char *what, struct lowrank_backend_i *cu, void **ctx)
{
    rumor_err rc = lowrank_cuda_init(cu, ctx);
    if (rc == RUMOR_OK)
        return;
    const char *why = NULL;
    int devices = rumor_cuda_device_count(&why);
    printf("[  SKIP    ] %s: %s (%s; %d devices)\n",
           what,
           rumor_strerror(rc),
           rumor_cuda_built() ? why : "CPU-only build",
           devices);
    skip();
}

/* CHOLQR2 on cuda (QR with a positive R diagonal) gives the cpu
 * CholeskyQR2's Q, signs included: nodes of a mixed run must agree. */
static void
s_cuda_cholqr2_matches_cpu(const struct lowrank_backend_i *cu,
                           void *cctx,
                           const struct lowrank_backend_i *cpu,
                           void *pctx)
{
    const size_t n = 300, r = 6;
    float *p = s_randn(n * r, 77), *got = malloc(n * r * 4), *dp = NULL;
    assert_int_equal(cu->alloc(cctx, n * r * 4, &dp), 0);
    assert_int_equal(cu->upload(cctx, dp, p, n * r * 4), 0);
    assert_int_equal(
        cu->orthogonalize(cctx, dp, n, r, RUMOR_LOWRANK_ORTH_CHOLQR2, 0),
        0);
    assert_int_equal(
        cpu->orthogonalize(pctx, p, n, r, RUMOR_LOWRANK_ORTH_CHOLQR2, 0),
        0);
    assert_int_equal(cu->download(cctx, got, dp, n * r * 4), 0);
    s_assert_close(got, p, n * r, 1e-4, "cuda CHOLQR2");
    cu->release(cctx, dp);
    free(p), free(got);
}

static void
test_cuda_kernels__against_cpu__within_1e5(void **s)
{
    (void)s;
    struct lowrank_backend_i cu, cpu;
    void *cctx = NULL, *pctx = NULL;
    s_cuda_or_skip("cuda backend", &cu, &cctx);
    assert_int_equal(lowrank_cpu_init(&cpu, &pctx), RUMOR_OK);
    uint64_t seed = 1;
    for (size_t sh = 0; sh < sizeof s_odd_shapes / sizeof s_odd_shapes[0]; sh++)
        for (size_t k = 0; k < sizeof s_ranks / sizeof s_ranks[0]; k++) {
            size_t n = s_odd_shapes[sh][0], m = s_odd_shapes[sh][1];
            size_t r = s_ranks[k];
            float *mat = s_randn(n * m, seed++), *add = s_randn(n * m, seed++);
            float *q = s_randn(m * r, seed++);
            float *dm = NULL, *da = NULL, *dq = NULL, *dp = NULL, *dq2 = NULL;
            assert_int_equal(cu.alloc(cctx, n * m * 4, &dm), 0);
            assert_int_equal(cu.alloc(cctx, n * m * 4, &da), 0);
            assert_int_equal(cu.alloc(cctx, m * r * 4, &dq), 0);
            assert_int_equal(cu.alloc(cctx, m * r * 4, &dq2), 0);
            assert_int_equal(cu.alloc(cctx, n * r * 4, &dp), 0);
            assert_int_equal(cu.upload(cctx, dm, mat, n * m * 4), 0);
            assert_int_equal(cu.upload(cctx, da, add, n * m * 4), 0);
            assert_int_equal(cu.upload(cctx, dq, q, m * r * 4), 0);
            float *p1 = malloc(n * r * 4), *p2 = malloc(n * r * 4);
            float *q1 = malloc(m * r * 4), *q2 = malloc(m * r * 4);
            float *m1 = malloc(n * m * 4), *e2 = s_dup(add, n * m);
            assert_int_equal(cu.project_right(cctx, dm, da, n, m, dq, r, dp),
                             0);
            assert_int_equal(cpu.project_right(pctx, mat, add, n, m, q, r, p2),
                             0);
            assert_int_equal(cu.download(cctx, p1, dp, n * r * 4), 0);
            s_assert_close(p1, p2, n * r, 1e-5, "cuda P");
            size_t rr = r <= n ? r : n;
            assert_int_equal(cu.orthogonalize(cctx,
                                              dp,
                                              n,
                                              rr,
                                              RUMOR_LOWRANK_ORTH_AUTO,
                                              1e-8f),
                             0);
            assert_int_equal(cu.download(cctx, p1, dp, n * rr * 4), 0);
            memcpy(p2, p1, n * rr * 4);
            /* P = M Q has rank at most m: Gram-Schmidt (rank <= 2) cannot
             * make its dependent columns orthonormal, on either backend
             * (PyTorch's hook neither) */
            assert_true(s_orth_defect(p1, n, rr) < 1e-4 || m < rr);
            assert_int_equal(cu.project_left(cctx, dm, NULL, n, m, dp, rr, dq2),
                             0);
            assert_int_equal(
                cpu.project_left(pctx, mat, NULL, n, m, p2, rr, q2),
                0);
            assert_int_equal(cu.download(cctx, q1, dq2, m * rr * 4), 0);
            s_assert_close(q1, q2, m * rr, 1e-5, "cuda Q");
            assert_int_equal(
                cu.reconstruct(cctx, n, m, rr, dp, dq2, 1.0f, da, NULL, 0.0f),
                0);
            assert_int_equal(
                cpu.reconstruct(pctx, n, m, rr, p2, q2, 1.0f, e2, NULL, 0.0f),
                0);
            assert_int_equal(cu.download(cctx, m1, da, n * m * 4), 0);
            s_assert_close(m1, e2, n * m, 1e-5, "cuda e");
            /* The deferred update fused into the right product:
             * e' = (e - P Q^T) + M and P' = e' Q. */
            float *dp3 = NULL, *p3 = malloc(n * rr * 4);
            assert_int_equal(cu.alloc(cctx, n * rr * 4, &dp3), 0);
            assert_int_equal(
                cu.project_right_ef(cctx, da, dm, n, m, dp, dq2, dq, rr, dp3),
                0);
            assert_int_equal(
                cpu.project_right_ef(pctx, e2, mat, n, m, p2, q2, q, rr, p3),
                0);
            assert_int_equal(cu.download(cctx, p1, dp3, n * rr * 4), 0);
            s_assert_close(p1, p3, n * rr, 1e-5, "cuda deferred P");
            assert_int_equal(cu.download(cctx, m1, da, n * m * 4), 0);
            s_assert_close(m1, e2, n * m, 1e-5, "cuda deferred e");
            cu.release(cctx, dp3);
            free(p3);
            cu.release(cctx, dm), cu.release(cctx, da), cu.release(cctx, dq);
            cu.release(cctx, dq2), cu.release(cctx, dp);
            free(mat), free(add), free(q), free(p1), free(p2), free(q1);
            free(q2), free(m1), free(e2);
        }
    s_cuda_cholqr2_matches_cpu(&cu, cctx, &cpu, pctx);
    cu.free(cctx);
    cpu.free(pctx);
}

/* The cuda backend's deferred error update (k_right_ef) against its own
 * two-pass update, bit for bit, as the cpu backend's. */
static void
test_psgd__cuda_deferred_error_update__equals_the_two_pass_update(void **s)
{
    (void)s;
    struct lowrank_backend_i cu;
    void *cctx = NULL;
    s_cuda_or_skip("cuda deferred update", &cu, &cctx);
    cu.free(cctx);
    s_defer_all_ranks(lowrank_cuda_init);
}

/* epfml's one-sided step, checked by hand: on even steps the output is
 * P P^T M with the orthonormalized P, on odd steps M Q Q^T with the
 * orthonormalized Q (both read back after the step), and e = M - out. */
static void
test_psgd__one_sided_steps__project_onto_the_orthonormal_side(void **state)
{
    (void)state;
    const size_t n = 36, m = 28, r = 3;
    const struct rumor_lowrank_shape shape = {.ndim = 2, .dims = {n, m}};
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = r;
    o.one_sided = true;
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&c, &shape, 1, &o), 0);
    float *e_old = calloc(n * m, sizeof *e_old);
    float *e = malloc(n * m * sizeof *e), *want = malloc(n * m * sizeof *e);
    float *p = malloc(n * r * sizeof *p), *q = malloc(m * r * sizeof *q);
    for (int st = 0; st < 4; st++) {
        float *g = s_randn(n * m, 1000 + (uint64_t)st);
        float *mat = s_dup(g, n * m);
        for (size_t i = 0; i < n * m; i++)
            mat[i] += e_old[i];
        float *ptr[1] = {g};
        struct rumor_lowrank_xchg x;
        bool done = false;
        assert_int_equal(rumor_lowrank_psgd_begin(c, ptr, &x), 0);
        assert_int_equal(x.floats, st % 2 == 0 ? m * r : n * r);
        assert_true(x.average);
        assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), 0);
        assert_true(done);
        assert_int_equal(rumor_lowrank_psgd_end(c, ptr), 0);
        assert_int_equal(rumor_lowrank_psgd_p_get(c, p), 0);
        assert_int_equal(rumor_lowrank_psgd_q_get(c, q), 0);
        float *side = st % 2 == 0 ? p : q;
        assert_true(s_orth_defect(side, st % 2 == 0 ? n : m, r) < 1e-5);
        /* want = P (P^T M) on even steps, (M Q) Q^T on odd steps. */
        float *t = malloc((n > m ? n : m) * r * sizeof *t);
        float *scratch = s_dup(mat, n * m);
        if (st % 2 == 0) {
            lowrank_ref_project_left(scratch, NULL, n, m, p, r, t);
            lowrank_ref_reconstruct(n, m, r, p, t, 1.0f, NULL, want, 0.0f);
        } else {
            lowrank_ref_project_right(scratch, NULL, n, m, q, r, t);
            lowrank_ref_reconstruct(n, m, r, t, q, 1.0f, NULL, want, 0.0f);
        }
        s_assert_close(g, want, n * m, 1e-5, "one-sided approx");
        assert_int_equal(rumor_lowrank_psgd_error_get(c, 0, e), 0);
        for (size_t i = 0; i < n * m; i++)
            assert_float_equal(e[i] + g[i], mat[i], 1e-5);
        memcpy(e_old, e, n * m * sizeof *e);
        free(g), free(mat), free(t), free(scratch);
    }
    free(e_old), free(e), free(want), free(p), free(q);
    rumor_lowrank_psgd_destroy(&c);
}

static void
s_psgd_step(rumor_lowrank_psgd *c, float *g)
{
    float *ptr[2] = {g, g + 2400};
    struct rumor_lowrank_xchg x;
    bool done = false;
    assert_int_equal(rumor_lowrank_psgd_begin(c, ptr, &x), RUMOR_OK);
    while (!done)
        assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), RUMOR_OK);
    assert_int_equal(rumor_lowrank_psgd_end(c, ptr), RUMOR_OK);
}

/* A checkpoint (Q, error memories, step) restored into a fresh compressor
 * continues exactly as the original. */
static void
test_psgd__state_saved_and_restored__continues_identically(void **state)
{
    (void)state;
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {60, 40}},
        {.ndim = 3, .dims = {30, 10, 4}}};
    for (int one_sided = 0; one_sided < 2; one_sided++) {
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = 3;
        o.one_sided = one_sided;
        rumor_lowrank_psgd *a = NULL, *b = NULL;
        assert_int_equal(rumor_lowrank_psgd_new(&a, shapes, 2, &o), 0);
        assert_int_equal(rumor_lowrank_psgd_new(&b, shapes, 2, &o), 0);
        /* The one-sided variant resumes on an even step, which needs the
         * carried P as well as Q. */
        for (int st = 0; st < 3 - one_sided; st++) {
            float *g = s_randn(3600, 800 + (uint64_t)st);
            s_psgd_step(a, g);
            free(g);
        }
        size_t qf = rumor_lowrank_psgd_q_floats(a);
        float *q = malloc(qf * sizeof *q), *e = malloc(2400 * sizeof *e);
        assert_int_equal(rumor_lowrank_psgd_q_get(a, q), 0);
        assert_int_equal(rumor_lowrank_psgd_q_set(b, q), 0);
        size_t pf = rumor_lowrank_psgd_p_floats(a);
        float *p = malloc(pf * sizeof *p);
        assert_int_equal(rumor_lowrank_psgd_p_get(a, p), 0);
        assert_int_equal(rumor_lowrank_psgd_p_set(b, p), 0);
        free(p);
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(rumor_lowrank_psgd_error_get(a, i, e), 0);
            assert_int_equal(rumor_lowrank_psgd_error_set(b, i, e), 0);
        }
        assert_int_equal(
            rumor_lowrank_psgd_step_set(b, rumor_lowrank_psgd_step(a)),
            0);
        e[5] = NAN;
        assert_int_equal(rumor_lowrank_psgd_error_set(b, 0, e), RUMOR_ENUMERIC);
        for (int st = 0; st < 2; st++) {
            float *ga = s_randn(3600, 900 + (uint64_t)st);
            float *gb = s_dup(ga, 3600);
            s_psgd_step(a, ga);
            s_psgd_step(b, gb);
            assert_memory_equal(ga, gb, 3600 * sizeof(float));
            free(ga), free(gb);
        }
        free(q), free(e);
        rumor_lowrank_psgd_destroy(&a);
        rumor_lowrank_psgd_destroy(&b);
    }
}

/* On a backend whose memory is not the host's, the state a checkpoint
 * reads and writes (Q, P, error memories) crosses PCIe and is counted,
 * byte for byte, as the steps' factors are. The reference backend's
 * memory flagged as a device's stands in for one (its copies are the
 * copies a device would make). */
static void
test_psgd__state_get_and_set_on_a_device__counted_in_pcie_bytes(void **state)
{
    (void)state;
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {60, 40}},
        {.ndim = 3, .dims = {30, 10, 4}}};
    const size_t numel[2] = {2400, 1200}; /* 60 x 40 and 30 x 40 */
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = 3;
    o.one_sided = true; /* carries P as well */
    struct lowrank_backend_i be;
    void *ctx = NULL;
    assert_int_equal(lowrank_ref_init(&be, &ctx), RUMOR_OK);
    be.host_memory = false;
    rumor_lowrank_psgd *c = NULL;
    assert_int_equal(lowrank_psgd_new_on(&c, shapes, 2, &o, &be, ctx), 0);
    for (int st = 0; st < 3; st++) {
        float *g = s_randn(3600, 700 + (uint64_t)st);
        s_psgd_step(c, g);
        free(g);
    }
    uint64_t h2d0 = 0, d2h0 = 0, h2d = 0, d2h = 0;
    rumor_lowrank_psgd_pcie_bytes(c, &h2d0, &d2h0);
    assert_true(h2d0 > 0 && d2h0 > 0); /* the steps' factors */
    size_t qf = rumor_lowrank_psgd_q_floats(c);
    size_t pf = rumor_lowrank_psgd_p_floats(c);
    assert_int_equal(qf, 40 * 3 + 40 * 3);
    assert_int_equal(pf, 60 * 3 + 30 * 3);
    float *q = malloc(qf * sizeof *q), *p = malloc(pf * sizeof *p);
    float *e = malloc(numel[0] * sizeof *e);
    assert_int_equal(rumor_lowrank_psgd_q_get(c, q), 0);
    assert_int_equal(rumor_lowrank_psgd_p_get(c, p), 0);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(rumor_lowrank_psgd_error_get(c, i, e), 0);
    rumor_lowrank_psgd_pcie_bytes(c, &h2d, &d2h);
    uint64_t bytes = (qf + pf + numel[0] + numel[1]) * sizeof(float);
    assert_int_equal(h2d, h2d0);
    assert_int_equal(d2h, d2h0 + bytes);
    assert_int_equal(rumor_lowrank_psgd_q_set(c, q), 0);
    assert_int_equal(rumor_lowrank_psgd_p_set(c, p), 0);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(rumor_lowrank_psgd_error_get(c, i, e), 0);
        assert_int_equal(rumor_lowrank_psgd_error_set(c, i, e), 0);
    }
    rumor_lowrank_psgd_pcie_bytes(c, &h2d, &d2h);
    assert_int_equal(h2d, h2d0 + bytes);
    assert_int_equal(d2h, d2h0 + bytes + (numel[0] + numel[1]) * sizeof(float));
    free(q), free(p), free(e);
    rumor_lowrank_psgd_destroy(&c);
}

/* A snapshot in the backend's memory, steps (the last one left open, as a
 * dropped step leaves it), restore: the compressor continues bit for bit
 * as one that never left the snapshot's boundary, and neither the
 * snapshot nor the restore moves a byte over PCIe. Two-sided (deferred
 * error updates on the reference backend) and one-sided (P carried). */
static void
test_psgd__snapshot_steps_restore__continues_as_from_the_boundary(void **st)
{
    (void)st;
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 2, .dims = {60, 40}},
        {.ndim = 3, .dims = {30, 10, 4}}};
    for (int one_sided = 0; one_sided < 2; one_sided++) {
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = 3;
        o.one_sided = one_sided;
        struct lowrank_backend_i be;
        void *ctx = NULL, *ctx2 = NULL;
        rumor_lowrank_psgd *a = NULL, *b = NULL;
        assert_int_equal(lowrank_ref_init(&be, &ctx), RUMOR_OK);
        be.host_memory = false;
        assert_int_equal(lowrank_psgd_new_on(&a, shapes, 2, &o, &be, ctx), 0);
        assert_int_equal(lowrank_ref_init(&be, &ctx2), RUMOR_OK);
        assert_int_equal(lowrank_psgd_new_on(&b, shapes, 2, &o, &be, ctx2), 0);
        assert_int_equal(rumor_lowrank_psgd_snapshot_restore(a), RUMOR_EINVAL);
        for (int s = 0; s < 3; s++) {
            float *ga = s_randn(3600, 600 + (uint64_t)s);
            float *gb = s_dup(ga, 3600);
            s_psgd_step(a, ga);
            s_psgd_step(b, gb);
            free(ga), free(gb);
        }
        uint64_t h2d0 = 0, d2h0 = 0, h2d = 0, d2h = 0;
        rumor_lowrank_psgd_pcie_bytes(a, &h2d0, &d2h0);
        assert_int_equal(rumor_lowrank_psgd_snapshot(a), RUMOR_OK);
        rumor_lowrank_psgd_pcie_bytes(a, &h2d, &d2h);
        assert_true(h2d == h2d0 && d2h == d2h0);
        for (int s = 0; s < 2; s++) { /* steps the restore drops */
            float *g = s_randn(3600, 650 + (uint64_t)s);
            s_psgd_step(a, g);
            free(g);
        }
        float *g = s_randn(3600, 660);
        float *ptr[2] = {g, g + 2400};
        struct rumor_lowrank_xchg x;
        assert_int_equal(rumor_lowrank_psgd_begin(a, ptr, &x), RUMOR_OK);
        assert_int_equal(rumor_lowrank_psgd_snapshot(a), RUMOR_EINVAL);
        rumor_lowrank_psgd_pcie_bytes(a, &h2d0, &d2h0);
        assert_int_equal(rumor_lowrank_psgd_snapshot_restore(a), RUMOR_OK);
        rumor_lowrank_psgd_pcie_bytes(a, &h2d, &d2h);
        assert_true(h2d == h2d0 && d2h == d2h0);
        free(g);
        assert_int_equal(rumor_lowrank_psgd_step(a),
                         rumor_lowrank_psgd_step(b));
        for (int s = 0; s < 2; s++) {
            float *ga = s_randn(3600, 700 + (uint64_t)s);
            float *gb = s_dup(ga, 3600);
            s_psgd_step(a, ga);
            s_psgd_step(b, gb);
            assert_memory_equal(ga, gb, 3600 * sizeof(float));
            free(ga), free(gb);
        }
        float *ea = malloc(2400 * sizeof *ea), *eb = malloc(2400 * sizeof *eb);
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(rumor_lowrank_psgd_error_get(a, i, ea), 0);
            assert_int_equal(rumor_lowrank_psgd_error_get(b, i, eb), 0);
            assert_memory_equal(ea, eb, (i == 0 ? 2400 : 1200) * sizeof *ea);
        }
        free(ea), free(eb);
        rumor_lowrank_psgd_destroy(&a);
        rumor_lowrank_psgd_destroy(&b);
    }
}

/* The whole compressor on cuda (batched over repeated shapes) against the
 * cpu compressor, over warm-started steps with error feedback. */
static void
test_psgd__cuda_backend__matches_cpu_over_steps(void **state)
{
    (void)state;
    struct lowrank_backend_i cu;
    void *cctx = NULL;
    s_cuda_or_skip("cuda compressor", &cu, &cctx);
    const struct rumor_lowrank_shape shapes[] = {
        {.ndim = 4, .dims = {64, 32, 3, 3}},
        {.ndim = 1, .dims = {64}},
        {.ndim = 4, .dims = {64, 32, 3, 3}},
        {.ndim = 2, .dims = {300, 200}},
        {.ndim = 4, .dims = {64, 32, 3, 3}},
        {.ndim = 2, .dims = {10, 1000}},
    };
    const size_t sizes[] = {18432, 64, 18432, 60000, 18432, 10000};
    size_t total = 0, offs[6];
    for (size_t i = 0; i < 6; i++) {
        offs[i] = total;
        total += sizes[i];
    }
    const size_t ranks[] = {1, 2, 4, 9};
    for (size_t ri = 0; ri < 4; ri++) {
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = ranks[ri];
        o.eps = 1e-8f;
        o.seed = 3;
        struct lowrank_backend_i be;
        void *ctx = NULL;
        rumor_lowrank_psgd *a = NULL, *b = NULL;
        assert_int_equal(lowrank_cuda_init(&be, &ctx), RUMOR_OK);
        assert_int_equal(lowrank_psgd_new_on(&a, shapes, 6, &o, &be, ctx), 0);
        assert_int_equal(rumor_lowrank_psgd_new(&b, shapes, 6, &o), 0);
        float *dev = NULL;
        assert_int_equal(cu.alloc(cctx, total * sizeof(float), &dev), 0);
        for (int st = 0; st < 3; st++) {
            float *host = s_randn(total, 700 + (uint64_t)st);
            float *back = malloc(total * sizeof *back);
            assert_int_equal(cu.upload(cctx, dev, host, total * 4), 0);
            float *pa[6], *pb[6];
            for (size_t i = 0; i < 6; i++) {
                pa[i] = dev + offs[i];
                pb[i] = host + offs[i];
            }
            struct rumor_lowrank_xchg xa, xb;
            bool da = false, db = false;
            assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
            assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
            while (!da) {
                assert_int_equal(xa.floats, xb.floats);
                s_assert_close(xa.data, xb.data, xa.floats, 1e-4, "cuda xchg");
                assert_int_equal(rumor_lowrank_psgd_next(a, &xa, &da), 0);
                assert_int_equal(rumor_lowrank_psgd_next(b, &xb, &db), 0);
            }
            assert_int_equal(rumor_lowrank_psgd_end(a, pa), 0);
            assert_int_equal(rumor_lowrank_psgd_end(b, pb), 0);
            assert_int_equal(cu.download(cctx, back, dev, total * 4), 0);
            for (size_t i = 0; i < 6; i++)
                if (rumor_lowrank_psgd_compressed(b, i))
                    s_assert_close(back + offs[i],
                                   host + offs[i],
                                   sizes[i],
                                   1e-4,
                                   "cuda approx");
            /* The error memory, with the update still deferred on both. */
            for (size_t i = 0; i < 6; i++) {
                if (!rumor_lowrank_psgd_compressed(b, i))
                    continue;
                float *ea = malloc(sizes[i] * 4), *eb = malloc(sizes[i] * 4);
                assert_int_equal(rumor_lowrank_psgd_error_get(a, i, ea), 0);
                assert_int_equal(rumor_lowrank_psgd_error_get(b, i, eb), 0);
                s_assert_close(ea, eb, sizes[i], 1e-4, "cuda error memory");
                free(ea), free(eb);
            }
            free(host), free(back);
        }
        cu.release(cctx, dev);
        rumor_lowrank_psgd_destroy(&a);
        rumor_lowrank_psgd_destroy(&b);
    }
    cu.free(cctx);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_kernels__odd_shapes_and_ranks__match_ref),
        cmocka_unit_test(test_cpu_kernels__blas_path__match_ref),
        cmocka_unit_test(
            test_cpu_reconstruct__large_aligned_output__streamed_matches_ref),
        cmocka_unit_test(
            test_cpu_reconstruct__misaligned_stream__equals_plain_stores),
        cmocka_unit_test(
            test_orthogonalize__gram_schmidt__matches_ref_and_is_orthonormal),
        cmocka_unit_test(
            test_orthogonalize__lapack_qr__matches_householder_ref),
        cmocka_unit_test(
            test_orthogonalize__cholesky_qr2__orthonormal_same_span_positive_r),
        cmocka_unit_test(test_orthogonalize__zero_columns__never_nan),
        cmocka_unit_test(
            test_psgd__warm_started_iterations__within_one_percent_of_svd),
        cmocka_unit_test(test_psgd__same_m_and_first_q__matches_pytorch_hook),
        cmocka_unit_test(
            test_psgd__start_iter__all_reduce_first_then_matches_pytorch_hook),
        cmocka_unit_test(
            test_psgd__min_compression_rate__same_tensors_as_pytorch_hook),
        cmocka_unit_test(test_psgd__no_error_feedback__matches_pytorch_hook),
        cmocka_unit_test(
            test_psgd__no_warm_start__fresh_q_each_step_matches_pytorch_hook),
        cmocka_unit_test(test_psgd__one_sided_selection__epfml_rule),
        cmocka_unit_test(test_psgd__batch_off__per_matrix_calls_same_numbers),
        cmocka_unit_test(test_psgd__error_feedback__approx_plus_error_equals_m),
        cmocka_unit_test(
            test_psgd__cpu_backend__matches_ref_backend_over_steps),
        cmocka_unit_test(
            test_psgd__deferred_error_update__equals_the_two_pass_update),
        cmocka_unit_test(test_psgd__selection_and_start_iter__as_the_hook),
        cmocka_unit_test(test_psgd__same_seed__same_first_q_on_every_node),
        cmocka_unit_test(
            test_psgd__two_nodes_reducing__agree_on_the_approximation),
        cmocka_unit_test(test_edge__iterations__follow_the_reference_update),
        cmocka_unit_test(
            test_edge__no_warm_start__each_iteration_from_a_fresh_factor),
        cmocka_unit_test(
            test_edge__ring_of_four__preserves_average_and_shrinks_differences),
        cmocka_unit_test(test_edge__equal_models_first__mixes_once_they_differ),
        cmocka_unit_test(test_edge__write__stores_what_apply_adds_to_zeros),
        cmocka_unit_test(test_edge__rows_from_factors__the_bits_write_stores),
        cmocka_unit_test(test_edge__sq_norm_and_rows__edges_of_their_range),
        cmocka_unit_test(test_edge__nan_message_or_misuse__rejected),
        cmocka_unit_test(test_count__resnet18_cifar10__paper_ratios),
        cmocka_unit_test(
            test_shapes_parse__malformed_lines__rejected_with_position),
        cmocka_unit_test(test_cli_ratio__resnet18__prints_paper_ratios),
        cmocka_unit_test(test_cuda_kernels__against_cpu__within_1e5),
        cmocka_unit_test(
            test_psgd__one_sided_steps__project_onto_the_orthonormal_side),
        cmocka_unit_test(
            test_psgd__state_saved_and_restored__continues_identically),
        cmocka_unit_test(test_psgd__cuda_backend__matches_cpu_over_steps),
        cmocka_unit_test(
            test_psgd__cuda_deferred_error_update__equals_the_two_pass_update),
        cmocka_unit_test(
            test_psgd__state_get_and_set_on_a_device__counted_in_pcie_bytes),
        cmocka_unit_test(
            test_psgd__snapshot_steps_restore__continues_as_from_the_boundary),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("lowrank", tests, NULL, NULL);
}
