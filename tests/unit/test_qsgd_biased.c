/*
 * ChocoSGD's biased QSGD (`qsgd:...,biased=1`; epfml/ChocoSGD
 * QuantizationCompressor.get_qsgd with is_biased): the decoded values times
 * 1 / tau, tau = 1 + min(d / s^2, sqrt(d) / s), d the values under one
 * norm (a bucket), s = 2^bits - 1. Checked on hand-computed unit vectors
 * (deterministic levels), against the reference's formula applied to the
 * unscaled quantizer's output on the same draws, and through gamma auto,
 * which must measure the rescaled codec (a 2-bit QSGD it refuses unscaled
 * becomes usable).
 */
#include "tests/cmocka_compat.h"

#include "rumor/compress.h"
#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A standard normal sample by Box-Muller on a permutation of the
 * quantiles (e * 2654435761 mod n is one for odd multipliers and n
 * coprime to it), so every bucket sees the whole distribution. */
static void
s_normal(float *x, size_t n)
{
    for (size_t e = 0; e < n; e++) {
        double u = ((double)((e * 2654435761u) % n) + 0.5) / (double)n;
        x[e] = (float)(sqrt(-2 * log(u)) * cos(2.399963 * (double)e));
    }
}

/* Encodes x with spec; returns the decoded vector in y and checks that
 * the encoder's approximation holds the decoder's bits. */
static void
s_roundtrip(const char *spec, const float *x, size_t n, float *y)
{
    rumor_codec *c = NULL;
    assert_int_equal(rumor_codec_new(spec, &c, NULL), RUMOR_OK);
    size_t cap = 0, written = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    uint8_t *buf = malloc(cap);
    float *approx = malloc(n * sizeof *approx);
    assert_non_null(buf);
    assert_non_null(approx);
    assert_int_equal(
        rumor_codec_encode(c, x, n, 7, 3, buf, cap, &written, approx),
        RUMOR_OK);
    assert_int_equal(rumor_codec_decode(c, buf, written, y, n), RUMOR_OK);
    assert_memory_equal(approx, y, n * sizeof *y);
    free(buf);
    free(approx);
    rumor_codec_destroy(&c);
}

/* A unit coordinate in a bucket is quantized to level s exactly (s |v| /
 * ||v|| = s: no rounding), so the decoded value is 1 / tau. Buckets of
 * 16 and a last one of 4 (n = 20): with bits 1 (s = 1) tau = 1 + min(16,
 * 4) = 5 and 1 + min(4, 2) = 3; bits 2 (s = 3): 1 + min(16/9, 4/3) = 7/3
 * and 1 + min(4/9, 2/3) = 13/9; bits 4 (s = 15): 1 + 16/225 and 1 +
 * 4/225. Fixed-width codes and Elias codes (another encoder path). */
static void
test_qsgd_biased__unit_coordinates__decoded_one_over_tau_by_hand(void **state)
{
    (void)state;
    const struct {
        const char *spec;
        double first, last; /* 1 / tau of the 16- and the 4-value bucket */
    } cases[] = {
        {"qsgd:bits=1,bucket=16,biased=1", 1.0 / 5, 1.0 / 3},
        {"qsgd:bits=2,bucket=16,biased=1", 3.0 / 7, 9.0 / 13},
        {"qsgd:bits=4,bucket=16,biased=1", 225.0 / 241, 225.0 / 229},
        {"qsgd:bits=2,bucket=16,elias=1,biased=1", 3.0 / 7, 9.0 / 13},
        {"qsgd:bits=2,bucket=16", 1, 1},
    };
    float x[20] = {0}, y[20];
    x[5] = 1;
    x[17] = -1;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        s_roundtrip(cases[k].spec, x, 20, y);
        printf("%s: %.9g %.9g\n", cases[k].spec, y[5], y[17]);
        assert_float_equal(y[5], cases[k].first, 1e-6);
        assert_float_equal(y[17], -cases[k].last, 1e-6);
        for (size_t e = 0; e < 20; e++)
            if (e != 5 && e != 17)
                assert_true(y[e] == 0);
    }
}

/* On a standard normal vector (one bucket of 1000 values, as the
 * reference takes one norm per tensor) the biased codec gives the
 * unscaled codec's output over the reference's tau, value for value (the
 * same draws); the unscaled 2-bit quantizer errs by more than the vector
 * (omega > 1), the scaled one by less (omega <= 1 - 1 / tau in
 * expectation). */
static void
test_qsgd_biased__gaussian__unbiased_output_over_reference_tau(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N], plain[N], biased[N];
    s_normal(x, N);
    s_roundtrip("qsgd:bits=2,bucket=1000", x, N, plain);
    s_roundtrip("qsgd:bits=2,bucket=1000,biased=1", x, N, biased);
    double s = 3, d = N;
    double tau = 1 + fmin(d / (s * s), sqrt(d) / s); /* the reference's */
    double err_plain = 0, err_biased = 0, norm = 0;
    for (size_t e = 0; e < N; e++) {
        assert_float_equal(biased[e], plain[e] / tau, 1e-6 * fabs(plain[e]));
        err_plain += (plain[e] - x[e]) * (double)(plain[e] - x[e]);
        err_biased += (biased[e] - x[e]) * (double)(biased[e] - x[e]);
        norm += (double)x[e] * x[e];
    }
    printf("tau %.6g omega unscaled %.4g, biased %.4g (bound %.4g)\n",
           tau,
           err_plain / norm,
           err_biased / norm,
           1 - 1 / tau);
    assert_true(err_plain / norm > 1);
    assert_true(err_biased / norm < 1);
}

/* gamma auto measures the codec as used: choco with 2-bit QSGD on buckets
 * of 512 is refused unscaled (omega > 1) and with biased=1 gets gamma =
 * (1 / sqrt(omega) - 1) / (2 beta), beta = 4/3 on a 4-ring, with omega
 * the rescaled codec's: the omega that gamma implies matches the one
 * measured here on another normal sample within 2 % (two samples of 4096
 * values differ by about 1 %; gamma itself moves 7 times as much). */
static void
test_gamma_auto__biased_qsgd__measures_the_rescaled_codec(void **state)
{
    (void)state;
    enum { N = 4096 };
    static float x[N], y[N];
    s_normal(x, N);
    const char *spec = "qsgd:bits=2,biased=1";
    s_roundtrip(spec, x, N, y);
    double err = 0, norm = 0;
    for (size_t e = 0; e < N; e++) {
        err += (y[e] - x[e]) * (double)(y[e] - x[e]);
        norm += (double)x[e] * x[e];
    }
    double omega = err / norm, beta = 4.0 / 3;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "choco");
    snprintf(opts.codec, sizeof opts.codec, "%s", spec);
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, &diag), 0);
    static float model_x[N];
    struct rumor_tensor tensor = {model_x, 2, {64, 64}};
    struct rumor_model model = {&tensor, 1};
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&opts, t, 0, &model, &g, &diag),
                     RUMOR_OK);
    double gamma = rumor_gossip_gamma(g);
    double implied = 1 / ((1 + 2 * beta * gamma) * (1 + 2 * beta * gamma));
    printf("gamma auto %.4g: omega %.4g, measured here %.4g\n",
           gamma,
           implied,
           omega);
    assert_true(gamma < 1);
    assert_float_equal(implied, omega, 0.02 * omega);
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&t);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_qsgd_biased__unit_coordinates__decoded_one_over_tau_by_hand),
        cmocka_unit_test(
            test_qsgd_biased__gaussian__unbiased_output_over_reference_tau),
        cmocka_unit_test(
            test_gamma_auto__biased_qsgd__measures_the_rescaled_codec),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("qsgd_biased", tests, NULL, NULL);
}
