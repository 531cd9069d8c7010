/*
 * fp8/fp4 exponent bias and Huffman code options (CO3, issue 20 defect 4):
 * the real bias against a brute-force fine grid search of eq. 12 computed
 * here (nearest representable value by bisection, no codec code), the
 * paper's fits (eqs. 15-16) against the printed polynomials, the GenNorm
 * estimates against known distributions, round trips of every option,
 * malformed real-bias payloads, and a table of L2 error ratios and bits
 * per value (printed; docs/internals/compress.md records it).
 */
#include "tests/cmocka_compat.h"

#include "rumor/compress.h"
#include "rumor/gossip.h"
#include "rumor/train.h"

#include "compress/compress_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- data and brute force ------------------------------------------------ */

static float *
s_gauss(size_t n, uint64_t seed, double sigma)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 1);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sigma * rumor_rng_normal(&rng));
    return x;
}

/* Laplace with standard deviation sigma (scale sigma / sqrt 2). */
static float *
s_laplace(size_t n, uint64_t seed, double sigma)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 2);
    for (size_t i = 0; i < n; i++) {
        double u = rumor_rng_uniform_double(&rng) - 0.5;
        double m = -log1p(-2 * fabs(u)) * sigma / sqrt(2.0);
        x[i] = (float)(u < 0 ? -m : m);
    }
    return x;
}

/* Magnitudes of format (M mantissa, E exponent bits) at bias 0, ascending. */
static int
s_mags(unsigned M, unsigned E, double *mag)
{
    int count = 1 << (E + M);
    for (int c = 0; c < count; c++) {
        int e = c >> M, m = c & ((1 << M) - 1);
        mag[c] =
            e == 0 ? ldexp(m, 1 - (int)M) : ldexp((1 << M) + m, e - (int)M);
    }
    return count;
}

/* Eq. 12's objective by brute force: the sum over x of the squared
 * distance to the nearest value of mag * 2^b. */
static double
s_bf_err(const float *x, size_t n, unsigned M, unsigned E, double b)
{
    double mag[128], s = exp2(b), err = 0;
    int count = s_mags(M, E, mag);
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)x[i]);
        int lo = 0, hi = count - 1;
        while (hi - lo > 1) {
            int mid = (lo + hi) / 2;
            if (mag[mid] * s <= a)
                lo = mid;
            else
                hi = mid;
        }
        double d = fmin(fabs(a - mag[lo] * s), fabs(a - mag[hi] * s));
        err += d * d;
    }
    return err;
}

/* Best real b on a grid of step 1/256 over [centre - 4, centre + 3] and
 * best integer b over the same range. */
static void
s_bf_best(const float *x,
          size_t n,
          unsigned M,
          unsigned E,
          double centre,
          double *real_err,
          double *int_err)
{
    *real_err = *int_err = INFINITY;
    double c0 = floor(centre);
    for (int j = -4 * 256; j <= 3 * 256; j++) {
        double e = s_bf_err(x, n, M, E, c0 + j / 256.0);
        *real_err = fmin(*real_err, e);
        if (j % 256 == 0)
            *int_err = fmin(*int_err, e);
    }
}

static rumor_codec *
s_codec(const char *spec)
{
    rumor_codec *c = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    if (rumor_codec_new(spec, &c, &diag) != RUMOR_OK)
        fail_msg("rumor_codec_new(%s): %s", spec, diag.msg);
    return c;
}

struct s_run {
    double err;  /* sum of squared errors of the decoded vector */
    double bits; /* payload bits per value */
    double b;    /* k + log2 f read from the payload */
};

/* Encodes, checks that decode and decode_add reproduce approx exactly. */
static struct s_run
s_run(const char *spec, const float *x, size_t n)
{
    rumor_codec *c = s_codec(spec);
    size_t cap = 0, len = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    uint8_t *buf = malloc(cap);
    float *q = malloc((n + 1) * sizeof *q), *y = malloc((n + 1) * sizeof *y);
    assert_true(buf && q && y);
    assert_int_equal(rumor_codec_encode(c, x, n, 1, 2, buf, cap, &len, q),
                     RUMOR_OK);
    assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
    assert_memory_equal(q, y, n * sizeof *q);
    memset(y, 0, n * sizeof *y);
    assert_int_equal(rumor_codec_decode_add(c, buf, len, 1.0f, y, n), RUMOR_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(q[i] == y[i]); /* 0 + -0 is +0: compare values */
    struct s_run r = {0, 8.0 * (double)len / (double)(n ? n : 1), 0};
    for (size_t i = 0; i < n; i++)
        r.err += ((double)q[i] - x[i]) * ((double)q[i] - x[i]);
    int32_t k = (int32_t)core_get_u32(buf + 8);
    r.b = k + (buf[3] ? log2((double)compress_get_f32(buf + 12)) : 0);
    free(buf);
    free(q);
    free(y);
    rumor_codec_destroy(&c);
    return r;
}

/* --- real bias against the brute force ------------------------------------ */

/* Paper-claim check (issue 20): fp4 on unit Gaussian data, the best integer
 * b costs 1.58x the L2 error of the best real b; the codec finds the real
 * optimum to within 0.2 %. */
static void
test_real_bias__fp4_gaussian__best_integer_costs_over_1_5x(void **state)
{
    (void)state;
    const size_t n = 8192;
    float *x = s_gauss(n, 7, 1.0);
    double real_err = 0, int_err = 0;
    s_bf_best(x, n, 2, 1, 0, &real_err, &int_err);
    assert_true(int_err / real_err > 1.5);
    struct s_run r = s_run("fp4:bias=real", x, n), ri = s_run("fp4", x, n);
    assert_true(r.err <= real_err * 1.002);
    assert_true(fabs(ri.err / int_err - 1) < 1e-6);
    free(x);
}

/* fp8 on Laplace data: how much the integer costs depends on where the
 * optimum falls between integers, i.e. on the scale; over eight scales an
 * eighth of an octave apart the worst is over 2x (the 2.34x), and the
 * codec's real b is within 2 % of the grid optimum at every one (the
 * optimum can sit in a notch narrower than the codec's search grid, where
 * the largest values just stop being clipped). */
static void
test_real_bias__fp8_laplace__best_integer_costs_over_2x_at_worst(void **state)
{
    (void)state;
    const size_t n = 8192;
    double worst = 0;
    for (int j = 0; j < 8; j++) {
        double sigma = exp2(j / 8.0);
        float *x = s_laplace(n, 11, sigma);
        double real_err = 0, int_err = 0;
        s_bf_best(x, n, 5, 2, log2(sigma) - 1, &real_err, &int_err);
        worst = fmax(worst, int_err / real_err);
        struct s_run r = s_run("fp8:bias=real", x, n);
        assert_true(r.err <= real_err * 1.02);
        free(x);
    }
    assert_true(worst > 2.0);
}

/* --- the paper's fits and the GenNorm model ------------------------------- */

static void
test_paper_bias__eqs_15_16__match_printed_polynomials(void **state)
{
    (void)state;
    /* By hand: eq. 15 at beta 1: 0.46 - 2.85 + 5.37 - 2.85 + 0.52; at 2:
     * 0.46 - 5.7 + 21.48 - 22.8 + 8.32. Eq. 16 at 1 and 2 likewise. */
    assert_true(fabs(compress_gennorm_paper_bias(2, 1.0) - 0.65) < 1e-12);
    assert_true(fabs(compress_gennorm_paper_bias(2, 2.0) - 1.76) < 1e-12);
    assert_true(fabs(compress_gennorm_paper_bias(5, 1.0) - 2933.4) < 1e-9);
    assert_true(fabs(compress_gennorm_paper_bias(5, 2.0) - 8270.0) < 1e-9);
}

static void
test_gennorm_fit__gaussian_and_laplace__shape_2_and_1(void **state)
{
    (void)state;
    const size_t n = 1 << 16;
    float *g = s_gauss(n, 3, 0.5), *l = s_laplace(n, 4, 2.0);
    struct compress_gennorm fg, fl;
    compress_gennorm_fit(g, n, &fg);
    compress_gennorm_fit(l, n, &fl);
    assert_true(fabs(fg.beta - 2) < 0.1 && fabs(fl.beta - 1) < 0.1);
    assert_true(fabs(sqrt(fg.var) - 0.5) < 0.01);
    assert_true(fabs(sqrt(fl.var) - 2.0) < 0.04);
    /* CDF at known points: Phi(1) for the normal, 1 - e^-1 / 2 for the
     * Laplace one scale (alpha) above its mean. */
    struct compress_gennorm norm = {0, sqrt(2.0), 2, 1};
    struct compress_gennorm lap = {1, 3, 1, 18};
    assert_true(fabs(compress_gennorm_cdf(&norm, 1) - 0.841344746) < 1e-8);
    assert_true(fabs(compress_gennorm_cdf(&norm, -1) - 0.158655254) < 1e-8);
    assert_true(fabs(compress_gennorm_cdf(&lap, 4) - (1 - exp(-1) / 2)) <
                1e-10);
    assert_true(compress_gennorm_cdf(&lap, INFINITY) == 1);
    free(g);
    free(l);
}

/* bias=fit sends eq. 15 divided by sigma, with beta from the data. */
static void
test_fit_bias__fp4_gaussian__sends_eq_15_over_sigma(void **state)
{
    (void)state;
    const size_t n = 1 << 14;
    float *x = s_gauss(n, 5, 1.0);
    struct compress_gennorm g;
    compress_gennorm_fit(x, n, &g);
    double want = compress_gennorm_paper_bias(2, g.beta) / sqrt(g.var);
    struct s_run r = s_run("fp4:bias=fit", x, n);
    assert_true(fabs(r.b - want) < 1.0 / 1024);
    assert_true(fabs(want - 1.76) < 0.1);
    free(x);
}

/* --- round trips, spec, malformed payloads -------------------------------- */

static void
test_options__every_combination__round_trips_and_spells_out(void **state)
{
    (void)state;
    const char *names[] = {"fp8", "fp4"};
    const char *bias[] = {"real", "int", "fit"};
    const char *code[] = {"message", "gennorm"};
    const size_t sizes[] = {0, 1, 5, 300, 20000};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) {
                char spec[64];
                snprintf(spec,
                         sizeof spec,
                         "%s:bias=%s,code=%s",
                         names[a],
                         bias[b],
                         code[c]);
                rumor_codec *cc = s_codec(spec);
                assert_string_equal(rumor_codec_spec(cc), spec);
                rumor_codec_destroy(&cc);
                for (size_t s = 0; s < 5; s++) {
                    float *x = s_laplace(sizes[s] + 1, s, 1e-3);
                    x[0] = 0; /* a zero and a one-value vector */
                    (void)s_run(spec, x, sizes[s]);
                    free(x);
                }
            }
    /* Extremes: near FLT_MAX, denormals, zeros of both signs. */
    const float ext[6] = {3e38f, -1e-40f, 0.0f, -0.0f, 1e-3f, -2e38f};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++) {
                char spec[64];
                snprintf(spec,
                         sizeof spec,
                         "%s:bias=%s,code=%s",
                         names[a],
                         bias[b],
                         code[c]);
                (void)s_run(spec, ext, 6);
                (void)s_run(spec, ext + 1, 1);
            }
    rumor_codec *bad = NULL;
    assert_int_equal(rumor_codec_new("fp8:bias=2", &bad, NULL), RUMOR_EINVAL);
    assert_int_equal(rumor_codec_new("fp4:code=lz", &bad, NULL), RUMOR_EINVAL);
    assert_int_equal(rumor_codec_new("fp8:bits=4", &bad, NULL), RUMOR_EINVAL);
    rumor_codec *def = s_codec("fp8");
    assert_string_equal(rumor_codec_spec(def), "fp8:bias=int,code=message");
    rumor_codec_destroy(&def);
}

static rumor_err
s_decode_patched(const uint8_t *buf,
                 size_t len,
                 size_t at,
                 const void *bytes,
                 size_t count)
{
    uint8_t *m = malloc(len);
    memcpy(m, buf, len);
    memcpy(m + at, bytes, count);
    rumor_codec *c = s_codec("fp8:bias=real");
    float y[64];
    rumor_err rc = rumor_codec_decode(c, m, len, y, 64);
    rumor_codec_destroy(&c);
    free(m);
    return rc;
}

static void
test_real_bias__malformed_payloads__rejected(void **state)
{
    (void)state;
    float *x = s_gauss(64, 9, 1.0);
    rumor_codec *c = s_codec("fp8:bias=real");
    uint8_t buf[512];
    size_t len = 0;
    float y[64];
    assert_int_equal(
        rumor_codec_encode(c, x, 64, 0, 0, buf, sizeof buf, &len, NULL),
        RUMOR_OK);
    assert_int_equal(buf[3], 1);
    assert_int_equal(s_decode_patched(buf, len, 0, "", 0), RUMOR_OK);
    const float nan = NAN, inf = INFINITY, half = 0.5f, two = 2.0f, one = 1.0f;
    assert_int_equal(s_decode_patched(buf, len, 12, &nan, 4), RUMOR_ENUMERIC);
    assert_int_equal(s_decode_patched(buf, len, 12, &inf, 4), RUMOR_ENUMERIC);
    assert_int_equal(s_decode_patched(buf, len, 12, &half, 4), RUMOR_EPROTO);
    assert_int_equal(s_decode_patched(buf, len, 12, &two, 4), RUMOR_EPROTO);
    assert_int_equal(s_decode_patched(buf, len, 12, &one, 4), RUMOR_OK);
    const uint8_t flag2 = 2, flag0 = 0;
    assert_int_equal(s_decode_patched(buf, len, 3, &flag2, 1), RUMOR_EPROTO);
    /* Without the flag the f bytes are read as the Huffman table. */
    assert_int_not_equal(s_decode_patched(buf, len, 3, &flag0, 1), RUMOR_OK);
    for (size_t cut = 0; cut < len; cut++)
        assert_int_not_equal(rumor_codec_decode(c, buf, cut, y, 64), RUMOR_OK);
    /* A bias whose values overflow float: f just below 2 at k = 124. */
    const uint8_t big[4] = {124, 0, 0, 0};
    const float top = 1.99f;
    uint8_t m[512];
    memcpy(m, buf, len);
    memcpy(m + 8, big, 4);
    memcpy(m + 12, &top, 4);
    assert_int_equal(rumor_codec_decode(c, m, len, y, 64), RUMOR_ENUMERIC);
    rumor_codec_destroy(&c);
    free(x);
}

/* --- the GenNorm code ---------------------------------------------------- */

/* On data that is GenNorm the model's code is within 1 % of the
 * message's own (which is optimal for the message, so never worse). */
static void
test_gennorm_code__gaussian__within_1_percent_of_message_code(void **state)
{
    (void)state;
    const size_t n = 1 << 17;
    float *x = s_gauss(n, 13, 1e-3);
    struct s_run m = s_run("fp8", x, n), g = s_run("fp8:code=gennorm", x, n);
    assert_true(m.err == g.err);
    assert_true(g.bits >= m.bits * (1 - 1e-9) && g.bits <= m.bits * 1.01);
    free(x);
}

/* --- the table of docs/internals/compress.md ------------------------------ */

/* One layer's gradient: the MLP (64-256-10) on the embedded digits at
 * step `step` of plain SGD (lr 0.1), first weight matrix, 16384 values. */
static float *
s_mlp_grad(uint64_t steps, size_t *n)
{
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.hidden[0] = 256;
    rumor_workload *w = NULL;
    assert_int_equal(rumor_workload_new(&o, &w, NULL), RUMOR_OK);
    struct rumor_model *model = rumor_workload_model(w), *grad = NULL;
    assert_int_equal(rumor_model_clone(model, &grad), RUMOR_OK);
    for (uint64_t s = 0; s <= steps; s++) {
        assert_int_equal(rumor_workload_grad(w, s, grad, NULL), RUMOR_OK);
        for (size_t t = 0; s < steps && t < model->count; t++)
            for (size_t i = 0; i < rumor_tensor_numel(&model->tensors[t]); i++)
                model->tensors[t].data[i] -= 0.1f * grad->tensors[t].data[i];
    }
    *n = rumor_tensor_numel(&grad->tensors[0]);
    float *x = malloc(*n * sizeof *x);
    memcpy(x, grad->tensors[0].data, *n * sizeof *x);
    rumor_model_free(&grad);
    rumor_workload_destroy(&w);
    return x;
}

static void
s_row(const char *name, const float *x, size_t n)
{
    double err_int[2], err_real[2], err_fit[2], bits[2][3];
    const char *fmt[] = {"fp4", "fp8"};
    for (int f = 0; f < 2; f++) {
        char spec[64];
        snprintf(spec, sizeof spec, "%s:bias=int", fmt[f]);
        struct s_run ri = s_run(spec, x, n);
        err_int[f] = ri.err;
        bits[f][2] = ri.bits;
        snprintf(spec, sizeof spec, "%s:bias=fit", fmt[f]);
        err_fit[f] = s_run(spec, x, n).err;
        snprintf(spec, sizeof spec, "%s:bias=real", fmt[f]);
        struct s_run m = s_run(spec, x, n);
        err_real[f] = m.err;
        bits[f][0] = m.bits;
        snprintf(spec, sizeof spec, "%s:bias=real,code=gennorm", fmt[f]);
        bits[f][1] = s_run(spec, x, n).bits;
    }
    printf("| %s | %.3f | %.3f | %.3g | %.3g | %.3f | %.3f | %.3f | %.3f | "
           "%.3f | %.3f |\n",
           name,
           err_int[0] / err_real[0],
           err_int[1] / err_real[1],
           err_fit[0] / err_real[0],
           err_fit[1] / err_real[1],
           bits[0][2],
           bits[0][0],
           bits[0][1],
           bits[1][2],
           bits[1][0],
           bits[1][1]);
}

static void
test_table__int_fit_real_bias_and_both_codes__printed(void **state)
{
    (void)state;
    const size_t n = 1 << 16;
    printf("| data (n) | L2 int/real fp4 | L2 int/real fp8 | L2 fit/real "
           "fp4 | L2 fit/real fp8 | fp4 bits: int b | real b | real b, "
           "GenNorm code | fp8 bits: int b | real b | real b, GenNorm code "
           "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    float *x = s_gauss(n, 21, 1.0);
    s_row("Gaussian, sigma 1 (65536)", x, n);
    free(x);
    x = s_gauss(n, 21, exp2(-0.5));
    s_row("Gaussian, sigma 2^-0.5 (65536)", x, n);
    free(x);
    x = s_laplace(n, 22, 1.0);
    s_row("Laplace, sigma 1 (65536)", x, n);
    free(x);
    x = s_laplace(n, 22, exp2(-0.5));
    s_row("Laplace, sigma 2^-0.5 (65536)", x, n);
    free(x);
    size_t m = 0;
    x = s_mlp_grad(0, &m);
    s_row("MLP digits layer 1 grad, step 0 (16384)", x, m);
    free(x);
    x = s_mlp_grad(200, &m);
    s_row("MLP digits layer 1 grad, step 200 (16384)", x, m);
    free(x);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_real_bias__fp4_gaussian__best_integer_costs_over_1_5x),
        cmocka_unit_test(
            test_real_bias__fp8_laplace__best_integer_costs_over_2x_at_worst),
        cmocka_unit_test(test_paper_bias__eqs_15_16__match_printed_polynomials),
        cmocka_unit_test(test_gennorm_fit__gaussian_and_laplace__shape_2_and_1),
        cmocka_unit_test(test_fit_bias__fp4_gaussian__sends_eq_15_over_sigma),
        cmocka_unit_test(
            test_options__every_combination__round_trips_and_spells_out),
        cmocka_unit_test(test_real_bias__malformed_payloads__rejected),
        cmocka_unit_test(
            test_gennorm_code__gaussian__within_1_percent_of_message_code),
        cmocka_unit_test(test_table__int_fit_real_bias_and_both_codes__printed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
