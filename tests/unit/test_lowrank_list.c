/*
 * lowrank's work lists (backend.h, "work lists"): the tile plan covers
 * every matrix once; each kernel twin of ref.c against the cpu backend
 * (OpenBLAS / LAPACK and its own kernels) on one list of mixed shapes
 * (1-row matrices, n < requested rank, partial warps, strips of several
 * tiles) at ranks 1, 2, 4, 8 and 16; the compressor on the twin backend
 * (its list path) against the cpu compressor; that a step is one list
 * call per phase whatever the shapes (none above rank 16); and on a GPU
 * the cuda list kernels against the twins (skipped with the runtime's reason
 * without one).
 * Tolerances: products within 1e-5 relative (float sums in another order),
 * orthogonal factors within 1e-5 per element (entries are at most 1 in
 * magnitude; 4.3e-7 measured, on the square 16 x 16) with every column's sign
 * equal, kernels against twins within 1e-6 relative (they do the same
 * arithmetic in the same order; any difference is reported).
 */
#include "tests/cmocka_compat.h"

#include "rumor/lowrank.h"

#include "lowrank/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCT_TOL 1e-5
#define ORTH_TOL    1e-5
#define KERNEL_TOL  1e-6

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
    if (x == NULL)
        return NULL;
    float *y = malloc((n > 0 ? n : 1) * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

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
    for (size_t i = 0; i < n; i++)
        if (!isfinite(got[i]))
            fail_msg("%s: element %zu is not finite", what, i);
    double rel = s_rel(got, want, n);
    if (!(rel <= tol))
        fail_msg("%s: relative error %.3g > %.3g", what, rel, tol);
}

/* Matrices (n, m) of one list: a 1-row matrix, fewer rows or columns than
 * the highest rank, widths that leave a warp partly idle, and heights of
 * one, two and three left-product tiles per strip. */
static const size_t s_shapes[][2] = {
    {1, 40},
    {5, 3},
    {7, 1},
    {16, 16},
    {33, 70},
    {300, 45},
    {600, 17},
    {257, 33},
};
#define NSHAPES (sizeof s_shapes / sizeof s_shapes[0])

static const size_t s_ranks[] = {1, 2, 4, 8, 16};
#define NRANKS (sizeof s_ranks / sizeof s_ranks[0])

/* A list's host buffers; items point into them. */
struct list {
    struct lowrank_mat_item items[NSHAPES];
};

/* Fills every buffer from seed; with_pd: every other matrix has deferred
 * factors, every third no add. */
static void
s_list_new(struct list *l, size_t rank, bool with_pd, uint64_t seed)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        size_t n = s_shapes[i][0], m = s_shapes[i][1];
        size_t r = lowrank_rank_for(n, m, rank);
        uint64_t s = seed + 16 * i;
        l->items[i] = (struct lowrank_mat_item){
            .mat = s_randn(n * m, s),
            .add = i % 3 != 2 ? s_randn(n * m, s + 1) : NULL,
            .pd = with_pd && i % 2 == 0 ? s_randn(n * r, s + 2) : NULL,
            .qd = with_pd && i % 2 == 0 ? s_randn(m * r, s + 3) : NULL,
            .p = s_randn(n * r, s + 4),
            .q = s_randn(m * r, s + 5),
            .out = s_randn(n * m, s + 6),
            .n = n,
            .m = m,
            .r = r,
        };
    }
}

static void
s_list_dup(struct list *dst, const struct list *src)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        const struct lowrank_mat_item *a = &src->items[i];
        size_t nm = a->n * a->m;
        dst->items[i] = (struct lowrank_mat_item){
            .mat = s_dup(a->mat, nm),
            .add = s_dup(a->add, nm),
            .pd = s_dup(a->pd, a->n * a->r),
            .qd = s_dup(a->qd, a->m * a->r),
            .p = s_dup(a->p, a->n * a->r),
            .q = s_dup(a->q, a->m * a->r),
            .out = s_dup(a->out, nm),
            .n = a->n,
            .m = a->m,
            .r = a->r,
        };
    }
}

static void
s_list_free(struct list *l)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        struct lowrank_mat_item *it = &l->items[i];
        free(it->mat);
        free((float *)it->add);
        free((float *)it->pd);
        free((float *)it->qd);
        free(it->p);
        free(it->q);
        free(it->out);
    }
}

static void
s_list_close(const struct list *got,
             const struct list *want,
             double tol,
             const char *what)
{
    char name[96];
    for (size_t i = 0; i < NSHAPES; i++) {
        const struct lowrank_mat_item *g = &got->items[i], *w = &want->items[i];
        snprintf(name,
                 sizeof name,
                 "%s %zux%zu r%zu M",
                 what,
                 w->n,
                 w->m,
                 w->r);
        s_assert_close(g->mat, w->mat, w->n * w->m, tol, name);
        snprintf(name,
                 sizeof name,
                 "%s %zux%zu r%zu P",
                 what,
                 w->n,
                 w->m,
                 w->r);
        s_assert_close(g->p, w->p, w->n * w->r, tol, name);
        snprintf(name,
                 sizeof name,
                 "%s %zux%zu r%zu Q",
                 what,
                 w->n,
                 w->m,
                 w->r);
        s_assert_close(g->q, w->q, w->m * w->r, tol, name);
        snprintf(name,
                 sizeof name,
                 "%s %zux%zu r%zu out",
                 what,
                 w->n,
                 w->m,
                 w->r);
        s_assert_close(g->out, w->out, w->n * w->m, tol, name);
    }
}

/* --- the plan ------------------------------------------------------------- */

/* Every element (reconstruction), row (right product) and row of every
 * column strip (left product) belongs to exactly one tile; a strip's parts
 * are consecutive and its partial sums a region of its own. */
static void
test_tiles_plan__covers_every_matrix_once(void **state)
{
    (void)state;
    struct list l;
    s_list_new(&l, 16, false, 1);
    const enum lowrank_phase phases[] = {LOWRANK_PHASE_RIGHT,
                                         LOWRANK_PHASE_LEFT,
                                         LOWRANK_PHASE_RECON};
    for (size_t ph = 0; ph < 3; ph++) {
        size_t strips = 0, scratch = 0;
        size_t nt = lowrank_tiles_plan(phases[ph],
                                       l.items,
                                       NSHAPES,
                                       NULL,
                                       &strips,
                                       &scratch);
        struct lowrank_tile *t = calloc(nt, sizeof *t);
        assert_non_null(t);
        assert_int_equal(lowrank_tiles_plan(phases[ph],
                                            l.items,
                                            NSHAPES,
                                            t,
                                            &strips,
                                            &scratch),
                         nt);
        size_t want_strips = 0, want_scratch = 0;
        for (size_t i = 0; i < NSHAPES; i++) {
            const struct lowrank_mat_item *it = &l.items[i];
            size_t cells = phases[ph] == LOWRANK_PHASE_RECON   ? it->n * it->m
                           : phases[ph] == LOWRANK_PHASE_RIGHT ? it->n
                                                               : it->n * it->m;
            unsigned char *seen = calloc(cells, 1);
            assert_non_null(seen);
            for (size_t k = 0; k < nt; k++) {
                if (t[k].item != i)
                    continue;
                assert_true(t[k].lo < t[k].hi);
                if (phases[ph] != LOWRANK_PHASE_LEFT) {
                    assert_true(t[k].hi <= cells);
                    if (phases[ph] == LOWRANK_PHASE_RIGHT)
                        assert_true(t[k].hi - t[k].lo <= LOWRANK_RIGHT_ROWS);
                    for (size_t c = t[k].lo; c < t[k].hi; c++)
                        seen[c]++;
                    continue;
                }
                assert_true(t[k].hi <= it->n);
                assert_true(t[k].hi - t[k].lo <= LOWRANK_LEFT_ROWS);
                assert_true(t[k].part < t[k].parts);
                if (t[k].part > 0) { /* the previous tile: same strip */
                    assert_int_equal(t[k - 1].strip, t[k].strip);
                    assert_int_equal(t[k - 1].part + 1, t[k].part);
                    assert_int_equal(t[k - 1].partial, t[k].partial);
                }
                for (size_t row = t[k].lo; row < t[k].hi; row++)
                    for (size_t c = t[k].col;
                         c < it->m && c < t[k].col + LOWRANK_WARP;
                         c++)
                        seen[row * it->m + c]++;
            }
            for (size_t c = 0; c < cells; c++)
                assert_int_equal(seen[c], 1);
            free(seen);
            size_t parts = (it->n + LOWRANK_LEFT_ROWS - 1) / LOWRANK_LEFT_ROWS;
            size_t nstrips = (it->m + LOWRANK_WARP - 1) / LOWRANK_WARP;
            want_strips += nstrips;
            if (parts > 1)
                want_scratch += nstrips * parts * LOWRANK_WARP * it->r;
        }
        if (phases[ph] == LOWRANK_PHASE_LEFT) {
            assert_int_equal(strips, want_strips);
            assert_int_equal(scratch, want_scratch);
        } else {
            assert_int_equal(strips, 0);
            assert_int_equal(scratch, 0);
        }
        free(t);
    }
    s_list_free(&l);
}

/* --- twins against the cpu backend ---------------------------------------- */

/* The factor P (n x r) of every list shape, orthogonalized by the twin in
 * one list call and by the cpu backend matrix by matrix: close, and every
 * column with the same sign (a mixed GPU/CPU ring must agree). */
static void
s_orth_case(rumor_lowrank_orth method, size_t rank)
{
    static const size_t rows[] = {1, 2, 5, 16, 33, 300, 700};
    enum { N = sizeof rows / sizeof rows[0] };
    struct lowrank_backend_i cpu, twin;
    void *cctx = NULL, *tctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &cctx), RUMOR_OK);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    struct lowrank_orth_item items[N];
    float *want[N];
    for (size_t i = 0; i < N; i++) {
        size_t r = rank < rows[i] ? rank : rows[i];
        items[i] = (struct lowrank_orth_item){s_randn(rows[i] * r, 50 + i),
                                              rows[i],
                                              r};
        want[i] = s_dup(items[i].p, rows[i] * r);
        assert_int_equal(
            cpu.orthogonalize(cctx, want[i], rows[i], r, method, 0),
            RUMOR_OK);
    }
    assert_int_equal(twin.orthogonalize_list(tctx, items, N, method, 0),
                     RUMOR_OK);
    for (size_t i = 0; i < N; i++) {
        size_t n = items[i].n, r = items[i].r;
        double worst = 0;
        for (size_t c = 0; c < r; c++) {
            double dot = 0;
            for (size_t k = 0; k < n; k++) {
                double a = items[i].p[k * r + c], b = want[i][k * r + c];
                dot += a * b;
                worst = fmax(worst, fabs(a - b));
            }
            if (!(dot > 0))
                fail_msg("method %d rank %zu, %zu x %zu: column %zu's sign "
                         "differs",
                         (int)method,
                         rank,
                         n,
                         r,
                         c);
        }
        if (!(worst <= ORTH_TOL))
            fail_msg(
                "method %d rank %zu, %zu x %zu: max difference %.3g > %.3g",
                (int)method,
                rank,
                n,
                r,
                worst,
                ORTH_TOL);
        free(items[i].p);
        free(want[i]);
    }
    cpu.free(cctx);
    twin.free(tctx);
}

static void
test_orth_twin__every_method_and_rank__matches_cpu_signs_included(void **s)
{
    (void)s;
    const rumor_lowrank_orth methods[] = {RUMOR_LOWRANK_ORTH_AUTO,
                                          RUMOR_LOWRANK_ORTH_GS,
                                          RUMOR_LOWRANK_ORTH_QR,
                                          RUMOR_LOWRANK_ORTH_CHOLQR2};
    for (size_t m = 0; m < 4; m++)
        for (size_t r = 0; r < NRANKS; r++)
            s_orth_case(methods[m], s_ranks[r]);
}

/* A zero column stays zero under the twin's Gram-Schmidt (never NaN), and
 * its Householder gives LAPACK's Q of a matrix with a zero column. */
static void
test_orth_twin__zero_column__as_cpu(void **s)
{
    (void)s;
    struct lowrank_backend_i cpu, twin;
    void *cctx = NULL, *tctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &cctx), RUMOR_OK);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    const size_t n = 40, r = 4;
    const rumor_lowrank_orth methods[] = {RUMOR_LOWRANK_ORTH_GS,
                                          RUMOR_LOWRANK_ORTH_QR};
    for (size_t k = 0; k < 2; k++) {
        float *p = s_randn(n * r, 9);
        for (size_t i = 0; i < n; i++)
            p[i * r + 1] = 0;
        float *want = s_dup(p, n * r);
        struct lowrank_orth_item it = {p, n, r};
        assert_int_equal(cpu.orthogonalize(cctx, want, n, r, methods[k], 1e-8f),
                         RUMOR_OK);
        assert_int_equal(
            twin.orthogonalize_list(tctx, &it, 1, methods[k], 1e-8f),
            RUMOR_OK);
        s_assert_close(p, want, n * r, ORTH_TOL, "zero column");
        free(p);
        free(want);
    }
    cpu.free(cctx);
    twin.free(tctx);
}

/* Column c of p (n x r) against the others: *norm its norm, *off the
 * largest |dot| with another column. */
static void
s_column_check(const float *p,
               size_t n,
               size_t r,
               size_t c,
               double *norm,
               double *off)
{
    *off = 0;
    for (size_t d = 0; d < r; d++) {
        double dot = 0;
        for (size_t i = 0; i < n; i++)
            dot += (double)p[i * r + c] * p[i * r + d];
        if (d == c)
            *norm = sqrt(dot);
        else
            *off = fmax(*off, fabs(dot));
    }
}

/* CholeskyQR2 on a rank-deficient P. A zero column: P^T P has a zero
 * pivot, exactly, on both sides, so the twin's Cholesky test (k_orth_list's)
 * falls back to Gram-Schmidt with eps where the cpu's spotrf fails: the
 * cpu's result, its zero column kept, the others orthonormal. Duplicated
 * columns (one repeats column 0, one is twice column 1): the pivot is
 * round-off whose sign the summation order decides (the cpu's float
 * Cholesky may pass where the twin's double one fails); here the twin
 * falls back (its Gram-Schmidt's bits), its leading columns are the
 * cpu's and every value is finite; the dependent columns are Gram-Schmidt's
 * normalized round-off on either side, not comparable. */
static void
test_orth_twin__rank_deficient_cholqr2__cpu_fallback(void **s)
{
    (void)s;
    struct lowrank_backend_i cpu, twin;
    void *cctx = NULL, *tctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &cctx), RUMOR_OK);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    const size_t n = 40, r = 4;
    const float eps = 1e-8f;
    for (int dup = 0; dup < 2; dup++) {
        float *p = s_randn(n * r, 11);
        for (size_t i = 0; i < n; i++) {
            if (dup) {
                p[i * r + 2] = p[i * r + 0];
                p[i * r + 3] = 2 * p[i * r + 1];
            } else {
                p[i * r + 1] = 0;
            }
        }
        float *want = s_dup(p, n * r);
        float *gs = s_dup(p, n * r);
        float *in = s_dup(p, n * r);
        struct lowrank_orth_item it = {p, n, r};
        assert_int_equal(cpu.orthogonalize(cctx,
                                           want,
                                           n,
                                           r,
                                           RUMOR_LOWRANK_ORTH_CHOLQR2,
                                           eps),
                         RUMOR_OK);
        assert_int_equal(
            cpu.orthogonalize(cctx, gs, n, r, RUMOR_LOWRANK_ORTH_GS, eps),
            RUMOR_OK);
        assert_int_equal(twin.orthogonalize_list(tctx,
                                                 &it,
                                                 1,
                                                 RUMOR_LOWRANK_ORTH_CHOLQR2,
                                                 eps),
                         RUMOR_OK);
        if (!dup) {
            /* the cpu fell back, and so did the twin */
            s_assert_close(want, gs, n * r, 0, "cpu's fallback");
            s_assert_close(p, want, n * r, ORTH_TOL, "zero column");
        } else {
            float *twin_gs = s_dup(in, n * r);
            struct lowrank_orth_item g = {twin_gs, n, r};
            assert_int_equal(twin.orthogonalize_list(tctx,
                                                     &g,
                                                     1,
                                                     RUMOR_LOWRANK_ORTH_GS,
                                                     eps),
                             RUMOR_OK);
            assert_memory_equal(p, twin_gs, n * r * sizeof(float));
            for (size_t i = 0; i < n * r; i++)
                assert_true(isfinite(p[i]));
            free(twin_gs);
        }
        for (size_t i = 0; dup && i < n; i++)
            for (size_t c = 0; c < 2; c++)
                if (!(fabs(p[i * r + c] - want[i * r + c]) <= ORTH_TOL))
                    fail_msg("duplicated columns: leading column %zu row "
                             "%zu: %g, cpu %g",
                             c,
                             i,
                             p[i * r + c],
                             want[i * r + c]);
        for (size_t c = 0; !dup && c < r; c++) {
            double norm = 0, off = 0;
            s_column_check(p, n, r, c, &norm, &off);
            bool unit = fabs(norm - 1) <= 1e-4, zero = norm == 0;
            if (!(unit || zero) || !(off <= 1e-3))
                fail_msg("zero column: column %zu norm %g, largest dot %g",
                         c,
                         norm,
                         off);
            assert_true((c == 1) == zero);
        }
        free(p);
        free(want);
        free(gs);
        free(in);
    }
    cpu.free(cctx);
    twin.free(tctx);
}

/* Right product (with the fused add and, for some matrices, the deferred
 * error update), left product (fused add) and reconstruction (memory
 * update and output, beta 0 and 1): the twin backend's list calls against
 * the cpu backend's single-matrix operations. */
static void
s_products_case(size_t rank)
{
    struct lowrank_backend_i cpu, twin;
    void *cctx = NULL, *tctx = NULL;
    assert_int_equal(lowrank_cpu_init(&cpu, &cctx), RUMOR_OK);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    struct list got, want;
    s_list_new(&got, rank, true, 100 * rank);
    s_list_dup(&want, &got);
    assert_int_equal(twin.project_right_list(tctx, got.items, NSHAPES), 0);
    assert_int_equal(twin.project_left_list(tctx, got.items, NSHAPES), 0);
    assert_int_equal(twin.reconstruct_list(tctx, got.items, NSHAPES, true, 0),
                     0);
    assert_int_equal(twin.reconstruct_list(tctx, got.items, NSHAPES, false, 1),
                     0);
    for (size_t i = 0; i < NSHAPES; i++) {
        struct lowrank_mat_item *w = &want.items[i];
        size_t n = w->n, m = w->m, r = w->r;
        if (w->pd != NULL)
            assert_int_equal(cpu.project_right_ef(cctx,
                                                  w->mat,
                                                  w->add,
                                                  n,
                                                  m,
                                                  w->pd,
                                                  w->qd,
                                                  w->q,
                                                  r,
                                                  w->p),
                             0);
        else
            assert_int_equal(
                cpu.project_right(cctx, w->mat, w->add, n, m, w->q, r, w->p),
                0);
        assert_int_equal(
            cpu.project_left(cctx, w->mat, w->add, n, m, w->p, r, w->q),
            0);
        assert_int_equal(
            cpu.reconstruct(cctx, n, m, r, w->p, w->q, 1, w->mat, w->out, 0),
            0);
        assert_int_equal(
            cpu.reconstruct(cctx, n, m, r, w->p, w->q, 1, NULL, w->out, 1),
            0);
    }
    s_list_close(&got, &want, PRODUCT_TOL, "twin products");
    s_list_free(&got);
    s_list_free(&want);
    cpu.free(cctx);
    twin.free(tctx);
}

static void
test_product_twins__mixed_shapes_every_rank__match_cpu(void **s)
{
    (void)s;
    for (size_t r = 0; r < NRANKS; r++)
        s_products_case(s_ranks[r]);
}

/* --- the compressor's list path ------------------------------------------- */

static const struct rumor_lowrank_shape s_model[] = {
    {.ndim = 4, .dims = {64, 32, 3, 3}},
    {.ndim = 1, .dims = {64}},
    {.ndim = 2, .dims = {300, 200}},
    {.ndim = 2, .dims = {10, 1000}},
    {.ndim = 2, .dims = {3, 700}},
    {.ndim = 4, .dims = {64, 32, 3, 3}},
};
#define NMODEL (sizeof s_model / sizeof s_model[0])

static size_t
s_model_floats(size_t *offs)
{
    size_t total = 0;
    for (size_t i = 0; i < NMODEL; i++) {
        size_t n = 1;
        for (size_t d = 0; d < s_model[i].ndim; d++)
            n *= s_model[i].dims[d];
        offs[i] = total;
        total += n;
    }
    offs[NMODEL] = total;
    return total;
}

/* Steps of a compressor on the twin backend (every phase one list call)
 * and on the cpu backend: exchanged factors, approximations and error
 * memories agree, the error update deferred (hook variant) or not
 * (one-sided). */
static void
s_compressor_case(size_t rank, bool one_sided)
{
    size_t offs[NMODEL + 1];
    size_t total = s_model_floats(offs);
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = rank;
    o.eps = 1e-8f;
    o.seed = 5;
    o.one_sided = one_sided;
    o.min_rate = 0;
    struct lowrank_backend_i be;
    void *ctx = NULL;
    rumor_lowrank_psgd *a = NULL, *b = NULL;
    assert_int_equal(lowrank_twin_init(&be, &ctx), RUMOR_OK);
    assert_int_equal(lowrank_psgd_new_on(&a, s_model, NMODEL, &o, &be, ctx), 0);
    assert_int_equal(rumor_lowrank_psgd_new(&b, s_model, NMODEL, &o), 0);
    for (int st = 0; st < 3; st++) {
        float *ga = s_randn(total, 700 + (uint64_t)st + 10 * rank);
        float *gb = s_dup(ga, total), *g0 = s_dup(ga, total);
        float *pa[NMODEL], *pb[NMODEL];
        for (size_t i = 0; i < NMODEL; i++) {
            pa[i] = ga + offs[i];
            pb[i] = gb + offs[i];
        }
        struct rumor_lowrank_xchg xa, xb;
        bool da = false, db = false;
        assert_int_equal(rumor_lowrank_psgd_begin(a, pa, &xa), 0);
        assert_int_equal(rumor_lowrank_psgd_begin(b, pb, &xb), 0);
        while (!da) {
            assert_int_equal(xa.floats, xb.floats);
            s_assert_close(xa.data, xb.data, xa.floats, 1e-4, "twin xchg");
            assert_int_equal(rumor_lowrank_psgd_next(a, &xa, &da), 0);
            assert_int_equal(rumor_lowrank_psgd_next(b, &xb, &db), 0);
            assert_true(da == db);
        }
        assert_int_equal(rumor_lowrank_psgd_end(a, pa), 0);
        assert_int_equal(rumor_lowrank_psgd_end(b, pb), 0);
        for (size_t i = 0; i < NMODEL; i++) {
            size_t size = offs[i + 1] - offs[i];
            if (!rumor_lowrank_psgd_compressed(b, i))
                continue;
            s_assert_close(pa[i], pb[i], size, 1e-4, "twin approximation");
            float *ea = malloc(size * 4), *eb = malloc(size * 4);
            assert_int_equal(rumor_lowrank_psgd_error_get(a, i, ea), 0);
            assert_int_equal(rumor_lowrank_psgd_error_get(b, i, eb), 0);
            /* Against the gradient's norm: a matrix of rank <= r has an
             * error of rounding noise only. */
            double d = 0, g2 = 0;
            for (size_t k = 0; k < size; k++) {
                d += ((double)ea[k] - eb[k]) * ((double)ea[k] - eb[k]);
                g2 += (double)g0[offs[i] + k] * g0[offs[i] + k];
            }
            if (!(sqrt(d) <= 1e-4 * sqrt(g2)))
                fail_msg("twin error memory of tensor %zu: %.3g > 1e-4 |g|",
                         i,
                         sqrt(d / g2));
            free(ea), free(eb);
        }
        free(ga), free(gb), free(g0);
    }
    rumor_lowrank_psgd_destroy(&a);
    rumor_lowrank_psgd_destroy(&b);
}

static void
test_psgd_twin_backend__list_path__matches_cpu_over_steps(void **s)
{
    (void)s;
    for (size_t r = 0; r < NRANKS; r++) {
        s_compressor_case(s_ranks[r], false);
        s_compressor_case(s_ranks[r], true);
    }
}

/* Calls of each backend operation in a step: the list slots wrapped,
 * every single-matrix one counted as "other". */
static struct {
    size_t orth, right, left, recon, other;
} s_calls;
static struct lowrank_backend_i s_inner; /* the wrapped twin backend */

static rumor_err
s_count_orth(void *ctx,
             const struct lowrank_orth_item *items,
             size_t count,
             rumor_lowrank_orth method,
             float eps)
{
    s_calls.orth++;
    return s_inner.orthogonalize_list(ctx, items, count, method, eps);
}

static rumor_err
s_count_right(void *ctx, const struct lowrank_mat_item *items, size_t count)
{
    s_calls.right++;
    return s_inner.project_right_list(ctx, items, count);
}

static rumor_err
s_count_left(void *ctx, const struct lowrank_mat_item *items, size_t count)
{
    s_calls.left++;
    return s_inner.project_left_list(ctx, items, count);
}

static rumor_err
s_count_recon(void *ctx,
              const struct lowrank_mat_item *items,
              size_t count,
              bool with_e,
              float beta)
{
    s_calls.recon++;
    return s_inner.reconstruct_list(ctx, items, count, with_e, beta);
}

static rumor_err
s_count_other_right(void *ctx,
                    float *mat,
                    const float *add,
                    size_t n,
                    size_t m,
                    const float *q,
                    size_t r,
                    float *p)
{
    s_calls.other++;
    return s_inner.project_right(ctx, mat, add, n, m, q, r, p);
}

static rumor_err
s_count_other_orth(void *ctx,
                   float *p,
                   size_t n,
                   size_t r,
                   rumor_lowrank_orth method,
                   float eps)
{
    s_calls.other++;
    return s_inner.orthogonalize(ctx, p, n, r, method, eps);
}

/* A hook-variant step over a model of many shapes is one list call per
 * phase (Q and P orthogonalized, P = M Q with the deferred update, Q =
 * M^T P, the reconstruction), never a call per matrix or shape group;
 * above rank 16 the compressor leaves the lists. */
static void
test_psgd_list_path__one_call_per_phase(void **s)
{
    (void)s;
    size_t offs[NMODEL + 1];
    size_t total = s_model_floats(offs);
    const size_t ranks[] = {2, 16, 17};
    for (size_t k = 0; k < 3; k++) {
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = ranks[k];
        o.min_rate = 0;
        struct lowrank_backend_i be;
        void *ctx = NULL;
        assert_int_equal(lowrank_twin_init(&be, &ctx), RUMOR_OK);
        s_inner = be;
        be.orthogonalize_list = s_count_orth;
        be.project_right_list = s_count_right;
        be.project_left_list = s_count_left;
        be.reconstruct_list = s_count_recon;
        be.project_right = s_count_other_right;
        be.orthogonalize = s_count_other_orth;
        rumor_lowrank_psgd *c = NULL;
        assert_int_equal(lowrank_psgd_new_on(&c, s_model, NMODEL, &o, &be, ctx),
                         0);
        float *g = s_randn(total, 31);
        float *ptrs[NMODEL];
        for (size_t i = 0; i < NMODEL; i++)
            ptrs[i] = g + offs[i];
        for (int st = 0; st < 2; st++) { /* the second with a deferred update */
            memset(&s_calls, 0, sizeof s_calls);
            struct rumor_lowrank_xchg x;
            bool done = false;
            assert_int_equal(rumor_lowrank_psgd_begin(c, ptrs, &x), 0);
            while (!done)
                assert_int_equal(rumor_lowrank_psgd_next(c, &x, &done), 0);
            assert_int_equal(rumor_lowrank_psgd_end(c, ptrs), 0);
            bool lists = ranks[k] <= LOWRANK_LIST_MAX_RANK;
            assert_int_equal(s_calls.orth, lists ? 2 : 0);
            assert_int_equal(s_calls.right, lists ? 1 : 0);
            assert_int_equal(s_calls.left, lists ? 1 : 0);
            assert_int_equal(s_calls.recon, lists ? 1 : 0);
            if (lists)
                assert_int_equal(s_calls.other, 0);
            else
                assert_true(s_calls.other > 0);
        }
        free(g);
        rumor_lowrank_psgd_destroy(&c);
    }
}

/* One half-round of an edge pair: both products, both combines, both
 * applies (step 0.5). The messages go to msgs[0..1]. */
static void
s_edge_round(rumor_lowrank_edge *const *e,
             float *const *const *params,
             uint64_t t,
             float **msgs)
{
    for (int k = 0; k < 2; k++)
        assert_int_equal(
            rumor_lowrank_edge_product(e[k], params[k], t, msgs[k]),
            RUMOR_OK);
    for (int k = 0; k < 2; k++)
        assert_int_equal(rumor_lowrank_edge_combine(e[k], msgs[1 - k]),
                         RUMOR_OK);
    for (int k = 0; k < 2; k++)
        assert_int_equal(rumor_lowrank_edge_apply(e[k], params[k], 0.5f),
                         RUMOR_OK);
}

/* A PowerGossip edge pair on the twin backend (the list path), its list
 * slots counted, against the same pair on the cpu backend over iterations
 * of both parities: each half-round is one list call per phase and no
 * call per matrix; messages, models and the edges' states agree within
 * rounding. Matrix 0 starts equal at both ends, so its factor comes out
 * zero and is redrawn. Ranks 1 and 4, three half-rounds: later, a matrix
 * of rank at most r has been averaged, its difference is rounding noise
 * and so are the factors orthogonalized from it (their product is not). */
static void
test_edge_twin_backend__list_path__matches_cpu(void **s)
{
    (void)s;
    size_t offs[NMODEL + 1];
    size_t total = s_model_floats(offs);
    const size_t ranks[] = {1, 4};
    for (size_t ri = 0; ri < 2; ri++) {
        rumor_lowrank_edge *twin[2], *cpu[2];
        float *x[2][2], *ptrs[2][2][NMODEL], *msg[2][2];
        for (int k = 0; k < 2; k++) {
            struct rumor_lowrank_edge_opts o;
            rumor_lowrank_edge_opts_default(&o);
            o.rank = ranks[ri];
            o.seed = 3;
            o.self_id = (uint32_t)k;
            o.peer_id = (uint32_t)(1 - k);
            struct lowrank_backend_i be;
            void *ctx = NULL;
            assert_int_equal(lowrank_twin_init(&be, &ctx), RUMOR_OK);
            s_inner = be;
            be.orthogonalize_list = s_count_orth;
            be.project_right_list = s_count_right;
            be.project_left_list = s_count_left;
            be.reconstruct_list = s_count_recon;
            be.project_right = s_count_other_right;
            be.orthogonalize = s_count_other_orth;
            assert_int_equal(
                lowrank_edge_new_on(&twin[k], s_model, NMODEL, &o, &be, ctx),
                RUMOR_OK);
            assert_int_equal(
                rumor_lowrank_edge_new(&cpu[k], s_model, NMODEL, &o),
                RUMOR_OK);
            x[0][k] = s_randn(total, 50 + (uint64_t)k);
            if (k == 1) /* matrix 0 equal at both ends */
                memcpy(x[0][1], x[0][0], (offs[1] - offs[0]) * sizeof(float));
            x[1][k] = s_dup(x[0][k], total);
            for (int b = 0; b < 2; b++) {
                for (size_t i = 0; i < NMODEL; i++)
                    ptrs[b][k][i] = x[b][k] + offs[i];
                msg[b][k] = malloc((total + 1) * sizeof(float));
            }
        }
        float *const *tp[2] = {ptrs[0][0], ptrs[0][1]};
        float *const *cp[2] = {ptrs[1][0], ptrs[1][1]};
        for (uint64_t t = 1; t <= 3; t++) {
            memset(&s_calls, 0, sizeof s_calls);
            s_edge_round(twin, tp, t, msg[0]);
            assert_int_equal(s_calls.orth, 2);
            assert_int_equal(s_calls.right + s_calls.left, 2);
            assert_int_equal(s_calls.recon, 2);
            assert_int_equal(s_calls.other, 0);
            s_edge_round(cpu, cp, t, msg[1]);
            size_t floats = rumor_lowrank_edge_msg_floats(cpu[0], t);
            for (int k = 0; k < 2; k++) {
                s_assert_close(msg[0][k], msg[1][k], floats, 1e-4, "edge msg");
                s_assert_close(x[0][k], x[1][k], total, 1e-5, "edge model");
            }
        }
        size_t sf = rumor_lowrank_edge_state_floats(cpu[0]);
        for (int k = 0; k < 2; k++) {
            float *a = malloc(sf * sizeof *a), *b = malloc(sf * sizeof *b);
            assert_int_equal(rumor_lowrank_edge_state_get(twin[k], a), 0);
            assert_int_equal(rumor_lowrank_edge_state_get(cpu[k], b), 0);
            s_assert_close(a, b, sf, 1e-4, "edge state");
            free(a), free(b);
            rumor_lowrank_edge_destroy(&twin[k]);
            rumor_lowrank_edge_destroy(&cpu[k]);
            for (int b2 = 0; b2 < 2; b2++)
                free(x[b2][k]), free(msg[b2][k]);
        }
    }
}

/* --- cuda kernels against their twins ------------------------------------- */

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

/* A device copy of a host buffer (NULL stays NULL). */
static float *
s_up(const struct lowrank_backend_i *cu, void *ctx, const float *x, size_t n)
{
    if (x == NULL)
        return NULL;
    float *d = NULL;
    assert_int_equal(cu->alloc(ctx, n * sizeof *d, &d), RUMOR_OK);
    assert_int_equal(cu->upload(ctx, d, x, n * sizeof *d), RUMOR_OK);
    return d;
}

static void
s_down(const struct lowrank_backend_i *cu,
       void *ctx,
       float *dst,
       float *d,
       size_t n)
{
    if (d == NULL)
        return;
    assert_int_equal(cu->download(ctx, dst, d, n * sizeof *dst), RUMOR_OK);
    cu->release(ctx, d);
}

/* Every list kernel on the same input as its twin, three times (later
 * calls find the kept plan; the orthogonalization AUTO, then CHOLQR2,
 * then GS at every rank), at every rank. */
static void
test_cuda_list_kernels__against_twins(void **s)
{
    (void)s;
    struct lowrank_backend_i cu, twin;
    void *cctx = NULL, *tctx = NULL;
    s_cuda_or_skip("cuda list kernels", &cu, &cctx);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    for (size_t ri = 0; ri < NRANKS; ri++) {
        struct list want, got, dev;
        s_list_new(&want, s_ranks[ri], true, 300 + ri);
        s_list_dup(&got, &want);
        for (size_t i = 0; i < NSHAPES; i++) {
            const struct lowrank_mat_item *h = &got.items[i];
            size_t nm = h->n * h->m;
            dev.items[i] = (struct lowrank_mat_item){
                .mat = s_up(&cu, cctx, h->mat, nm),
                .add = s_up(&cu, cctx, h->add, nm),
                .pd = s_up(&cu, cctx, h->pd, h->n * h->r),
                .qd = s_up(&cu, cctx, h->qd, h->m * h->r),
                .p = s_up(&cu, cctx, h->p, h->n * h->r),
                .q = s_up(&cu, cctx, h->q, h->m * h->r),
                .out = s_up(&cu, cctx, h->out, nm),
                .n = h->n,
                .m = h->m,
                .r = h->r,
            };
        }
        const rumor_lowrank_orth hows[] = {RUMOR_LOWRANK_ORTH_AUTO,
                                           RUMOR_LOWRANK_ORTH_CHOLQR2,
                                           RUMOR_LOWRANK_ORTH_GS};
        for (int rep = 0; rep < 3; rep++) {
            assert_int_equal(cu.project_right_list(cctx, dev.items, NSHAPES),
                             0);
            assert_int_equal(twin.project_right_list(tctx, want.items, NSHAPES),
                             0);
            assert_int_equal(cu.project_left_list(cctx, dev.items, NSHAPES), 0);
            assert_int_equal(twin.project_left_list(tctx, want.items, NSHAPES),
                             0);
            assert_int_equal(cu.reconstruct_list(cctx,
                                                 dev.items,
                                                 NSHAPES,
                                                 true,
                                                 rep > 0 ? 1.0f : 0.0f),
                             0);
            assert_int_equal(twin.reconstruct_list(tctx,
                                                   want.items,
                                                   NSHAPES,
                                                   true,
                                                   rep > 0 ? 1.0f : 0.0f),
                             0);
            struct lowrank_orth_item od[NSHAPES], oh[NSHAPES];
            for (size_t i = 0; i < NSHAPES; i++) {
                od[i] = (struct lowrank_orth_item){dev.items[i].p,
                                                   dev.items[i].n,
                                                   dev.items[i].r};
                oh[i] = (struct lowrank_orth_item){want.items[i].p,
                                                   want.items[i].n,
                                                   want.items[i].r};
            }
            rumor_lowrank_orth how = hows[rep];
            assert_int_equal(cu.orthogonalize_list(cctx, od, NSHAPES, how, 0),
                             0);
            assert_int_equal(twin.orthogonalize_list(tctx, oh, NSHAPES, how, 0),
                             0);
        }
        for (size_t i = 0; i < NSHAPES; i++) {
            struct lowrank_mat_item *d = &dev.items[i], *h = &got.items[i];
            size_t nm = h->n * h->m;
            s_down(&cu, cctx, h->mat, d->mat, nm);
            cu.release(cctx, (float *)d->add);
            cu.release(cctx, (float *)d->pd);
            cu.release(cctx, (float *)d->qd);
            s_down(&cu, cctx, h->p, d->p, h->n * h->r);
            s_down(&cu, cctx, h->q, d->q, h->m * h->r);
            s_down(&cu, cctx, h->out, d->out, nm);
        }
        size_t differ = 0, all = 0;
        for (size_t i = 0; i < NSHAPES; i++) {
            const struct lowrank_mat_item *g = &got.items[i],
                                          *w = &want.items[i];
            size_t nm = w->n * w->m;
            for (size_t k = 0; k < nm; k++)
                differ += g->mat[k] != w->mat[k] || g->out[k] != w->out[k];
            for (size_t k = 0; k < w->n * w->r; k++)
                differ += g->p[k] != w->p[k];
            for (size_t k = 0; k < w->m * w->r; k++)
                differ += g->q[k] != w->q[k];
            all += 2 * nm + (w->n + w->m) * w->r;
        }
        printf("[ INFO     ] rank %zu: %zu of %zu elements of M, out, P and Q "
               "differ from the twins' bits\n",
               s_ranks[ri],
               differ,
               all);
        s_list_close(&got, &want, KERNEL_TOL, "cuda list kernels");
        s_list_free(&got);
        s_list_free(&want);
    }
    cu.free(cctx);
    twin.free(tctx);
}

/* CholeskyQR2 on rank-deficient P (a zero column; a column repeating
 * another): the kernel's Cholesky test sums P^T P with the twin's tree
 * and decides as the twin does, so the fallback and the Q agree. */
static void
test_cuda_orth_rank_deficient__as_twin(void **s)
{
    (void)s;
    struct lowrank_backend_i cu, twin;
    void *cctx = NULL, *tctx = NULL;
    s_cuda_or_skip("cuda rank-deficient orthogonalization", &cu, &cctx);
    assert_int_equal(lowrank_twin_init(&twin, &tctx), RUMOR_OK);
    const size_t n = 300, r = 4;
    for (int dup = 0; dup < 2; dup++) {
        float *want = s_randn(n * r, 12);
        for (size_t i = 0; i < n; i++)
            want[i * r + 1] = dup ? want[i * r + 0] : 0;
        float *got = s_dup(want, n * r);
        struct lowrank_orth_item h = {want, n, r};
        struct lowrank_orth_item d = {s_up(&cu, cctx, got, n * r), n, r};
        assert_int_equal(cu.orthogonalize_list(cctx,
                                               &d,
                                               1,
                                               RUMOR_LOWRANK_ORTH_CHOLQR2,
                                               1e-8f),
                         RUMOR_OK);
        assert_int_equal(twin.orthogonalize_list(tctx,
                                                 &h,
                                                 1,
                                                 RUMOR_LOWRANK_ORTH_CHOLQR2,
                                                 1e-8f),
                         RUMOR_OK);
        s_down(&cu, cctx, got, d.p, n * r);
        s_assert_close(got, want, n * r, ORTH_TOL, "rank-deficient P");
        free(want);
        free(got);
    }
    cu.free(cctx);
    twin.free(tctx);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiles_plan__covers_every_matrix_once),
        cmocka_unit_test(
            test_orth_twin__every_method_and_rank__matches_cpu_signs_included),
        cmocka_unit_test(test_orth_twin__zero_column__as_cpu),
        cmocka_unit_test(test_orth_twin__rank_deficient_cholqr2__cpu_fallback),
        cmocka_unit_test(
            test_product_twins__mixed_shapes_every_rank__match_cpu),
        cmocka_unit_test(
            test_psgd_twin_backend__list_path__matches_cpu_over_steps),
        cmocka_unit_test(test_psgd_list_path__one_call_per_phase),
        cmocka_unit_test(test_edge_twin_backend__list_path__matches_cpu),
        cmocka_unit_test(test_cuda_list_kernels__against_twins),
        cmocka_unit_test(test_cuda_orth_rank_deficient__as_twin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
