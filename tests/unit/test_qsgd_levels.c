/*
 * QSGD with any number of levels s (`qsgd:levels=S`) and the QSGD paper's
 * Elias coding (`code=elias`, section 3.2): for each non-zero, the Elias
 * omega code of its distance from the previous one, a sign bit, the omega
 * code of its level; a bucket ends with the distance to one past its end.
 * Checked on a hand-coded sparse vector (bit count and bytes), against the
 * omega lengths of Elias's table, for unbiasedness over many seeds, and
 * for refusal of hostile payloads and bad specs.
 */
#include "tests/cmocka_compat.h"

#include "rumor/compress.h"

#include "compress/compress_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static rumor_codec *
s_codec(const char *spec)
{
    rumor_codec *c = NULL;
    assert_int_equal(rumor_codec_new(spec, &c, NULL), RUMOR_OK);
    return c;
}

/* Encodes x into a fresh buffer of encoded_size bytes; *len the payload. */
static uint8_t *
s_encode(const rumor_codec *c,
         const float *x,
         size_t n,
         uint64_t counter,
         size_t *len,
         float *approx)
{
    size_t cap = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(
        rumor_codec_encode(c, x, n, 5, counter, buf, cap, len, approx),
        RUMOR_OK);
    assert_true(*len <= cap);
    return buf;
}

/* Omega lengths from Elias (1975), table of omega: 1 -> "0", 2 -> "100",
 * 3 -> "110", 4 -> "101000", 7 -> "101110", 8 -> "1110000", 16 ->
 * "10100100000" (11 bits), 100 -> 1 + 7 + 3 + 2 bits. */
static void
test_omega_len__elias_table__lengths(void **state)
{
    (void)state;
    const uint32_t k[] = {1, 2, 3, 4, 7, 8, 15, 16, 100};
    const unsigned want[] = {1, 3, 3, 6, 6, 7, 7, 11, 13};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        assert_int_equal(compress_omega_len(k[i]), want[i]);
}

/* x = (0, -3, 0, 0, 0, 0, 4, 0), norm 5, s = 5: the levels 3 and 4 are
 * exact (|v| s / norm is an integer: no draw can move them). Stream:
 * omega(2) = 100 (first non-zero at 1), sign 1, omega(3) = 110, omega(5)
 * = 101010 (6 - 1), sign 0, omega(4) = 101000, omega(2) = 100 (the end,
 * 8 - 6): 3+1+3+6+1+6+3 = 23 bits, 3 bytes, LSB-first 0xb9 0x4a 0x11.
 * Payload 12 (header) + 4 (norm) + 4 (s) + 3 = 23 bytes. The fixed form
 * has 3 + 1 bits per value: 12 + 4 + 4 + 4 = 24 bytes. */
static void
test_qsgd_elias__hand_sparse_vector__bit_count_and_bytes(void **state)
{
    (void)state;
    const float x[8] = {0, -3, 0, 0, 0, 0, 4, 0};
    const uint8_t body[3] = {0xb9, 0x4a, 0x11};
    float y[8];
    rumor_codec *c = s_codec("qsgd:levels=5,bucket=8,code=elias");
    for (uint64_t t = 0; t < 20; t++) {
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, 8, t, &len, NULL);
        assert_int_equal(len, 23);
        assert_int_equal(buf[2], 0); /* p0: the levels format */
        assert_int_equal(buf[3], 2); /* p1: gap coding */
        assert_int_equal(core_get_u32(buf + 16), 5);
        assert_memory_equal(buf + 20, body, 3);
        assert_int_equal(rumor_codec_decode(c, buf, len, y, 8), RUMOR_OK);
        assert_memory_equal(x, y, sizeof x);
        free(buf);
    }
    rumor_codec_destroy(&c);
    c = s_codec("qsgd:levels=5,bucket=8");
    size_t len = 0;
    uint8_t *buf = s_encode(c, x, 8, 0, &len, NULL);
    assert_int_equal(len, 24);
    assert_int_equal(rumor_codec_decode(c, buf, len, y, 8), RUMOR_OK);
    assert_memory_equal(x, y, sizeof x);
    free(buf);
    rumor_codec_destroy(&c);
}

/* E[decode(encode(x))] = x: the mean of T draws is within 5 standard
 * errors of x, the error of one draw being at most one level, norm / s. */
static void
s_check_unbiased(const char *spec, size_t bucket, uint32_t s)
{
    enum { N = 96, T = 4000 };
    float x[N], q[N];
    double sum[N] = {0};
    for (size_t i = 0; i < N; i++) /* sparse-ish: a third are zeros */
        x[i] = i % 3 == 0 ? 0.0f : (float)sin(1.7 * (double)i) * 2.0f;
    rumor_codec *c = s_codec(spec);
    for (uint64_t t = 0; t < T; t++) {
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, N, t, &len, NULL);
        assert_int_equal(rumor_codec_decode(c, buf, len, q, N), RUMOR_OK);
        for (size_t i = 0; i < N; i++)
            sum[i] += q[i];
        free(buf);
    }
    for (size_t i = 0; i < N; i++) {
        size_t b0 = i / bucket * bucket;
        double sq = 0;
        for (size_t j = b0; j < b0 + bucket && j < N; j++)
            sq += (double)x[j] * x[j];
        double tol = 5.0 * sqrt(sq) / s / 2.0 / sqrt((double)T) + 1e-7;
        double mean = sum[i] / T;
        if (fabs(mean - x[i]) > tol)
            fail_msg("%s: x[%zu] = %g, mean %g, bound %g",
                     spec,
                     i,
                     (double)x[i],
                     mean,
                     tol);
    }
    rumor_codec_destroy(&c);
}

static void
test_qsgd_levels__many_seeds__unbiased(void **state)
{
    (void)state;
    s_check_unbiased("qsgd:levels=2,bucket=96,code=elias", 96, 2);
    s_check_unbiased("qsgd:levels=1,bucket=32,code=elias", 32, 1);
    s_check_unbiased("qsgd:levels=16,bucket=20,code=elias", 20, 16);
    s_check_unbiased("qsgd:levels=5,bucket=17", 17, 5);
    s_check_unbiased("qsgd:levels=1000,bucket=96", 96, 1000);
}

/* The approximation the encoder returns is the decoder's output, and
 * decode_add adds alpha times it. */
static void
test_qsgd_levels__approx_and_decode_add__match_decode(void **state)
{
    (void)state;
    enum { N = 300 };
    float x[N], a[N], y[N], z[N];
    for (size_t i = 0; i < N; i++)
        x[i] = (float)cos(0.37 * (double)i * i);
    const char *specs[] = {"qsgd:levels=3,bucket=64,code=elias",
                           "qsgd:levels=9,bucket=7",
                           "qsgd:levels=4,bucket=512,code=elias,biased=1"};
    for (size_t s = 0; s < 3; s++) {
        rumor_codec *c = s_codec(specs[s]);
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, N, 2, &len, a);
        assert_int_equal(rumor_codec_decode(c, buf, len, y, N), RUMOR_OK);
        assert_memory_equal(a, y, sizeof y);
        for (size_t i = 0; i < N; i++)
            z[i] = 1.0f;
        assert_int_equal(rumor_codec_decode_add(c, buf, len, 0.5f, z, N),
                         RUMOR_OK);
        for (size_t i = 0; i < N; i++)
            assert_true(z[i] == 1.0f + 0.5f * y[i]);
        free(buf);
        rumor_codec_destroy(&c);
    }
}

/* Truncated or extended streams, a gap past the bucket's end, a level
 * above s, an omega code of more than 25 bits, s = 0: refused, and
 * decode_add leaves y as it was. */
static void
test_qsgd_elias__hostile_payloads__refused(void **state)
{
    (void)state;
    const float x[8] = {0, -3, 0, 0, 0, 0, 4, 0};
    rumor_codec *c = s_codec("qsgd:levels=5,bucket=8,code=elias");
    size_t len = 0;
    uint8_t *good = s_encode(c, x, 8, 0, &len, NULL);
    uint8_t bad[64];
    float y[8] = {1, 2, 3, 4, 5, 6, 7, 8}, keep[8];
    memcpy(keep, y, sizeof y);
    for (size_t cut = 12; cut < len; cut++)
        assert_int_equal(rumor_codec_decode_add(c, good, cut, 1.0f, y, 8),
                         RUMOR_EPROTO);
    memcpy(bad, good, len);
    bad[len] = 0;
    assert_int_equal(rumor_codec_decode_add(c, bad, len + 1, 1.0f, y, 8),
                     RUMOR_EPROTO);
    memcpy(bad, good, len);
    bad[22] |= 0x80; /* a one in the padding */
    assert_int_equal(rumor_codec_decode_add(c, bad, len, 1.0f, y, 8),
                     RUMOR_EPROTO);
    memcpy(bad, good, len);
    core_put_u32(bad + 16, 3); /* s = 3 < level 4 */
    assert_int_equal(rumor_codec_decode_add(c, bad, len, 1.0f, y, 8),
                     RUMOR_EPROTO);
    core_put_u32(bad + 16, 0);
    assert_int_equal(rumor_codec_decode_add(c, bad, len, 1.0f, y, 8),
                     RUMOR_EPROTO);
    memcpy(bad, good, 20);
    memset(bad + 20, 0xff, 8); /* omega codes that never end */
    assert_int_equal(rumor_codec_decode_add(c, bad, 28, 1.0f, y, 8),
                     RUMOR_EPROTO);
    memcpy(bad, good, 20);
    bad[20] = 0x27; /* omega(9) = 1110010: the end of an all-zero bucket */
    assert_int_equal(rumor_codec_decode_add(c, bad, 21, 1.0f, y, 8), RUMOR_OK);
    memcpy(y, keep, sizeof y);
    bad[20] = 0x17; /* omega(10) = 1110100: position 9, past the end (8) */
    assert_int_equal(rumor_codec_decode_add(c, bad, 21, 1.0f, y, 8),
                     RUMOR_EPROTO);
    assert_memory_equal(y, keep, sizeof y);
    free(good);
    rumor_codec_destroy(&c);
}

static void
test_qsgd_levels__bad_specs__named(void **state)
{
    (void)state;
    const char *bad[] = {"qsgd:levels=0",
                         "qsgd:levels=16777217",
                         "qsgd:code=huffman",
                         "qsgd:levels=5,code=gamma",
                         "qsgd:levels=4,elias=1",
                         "terngrad:clip=-1",
                         "sign:clip=2.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rumor_codec *c = NULL;
        struct rumor_diag d = {0};
        assert_int_equal(rumor_codec_new(bad[i], &c, &d), RUMOR_EINVAL);
        assert_null(c);
        assert_true(d.msg[0] != '\0');
    }
    rumor_codec *c = s_codec("qsgd:levels=15,elias=1");
    assert_string_equal(rumor_codec_spec(c),
                        "qsgd:bits=4,bucket=512,elias=1,biased=0");
    rumor_codec_destroy(&c);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_omega_len__elias_table__lengths),
        cmocka_unit_test(
            test_qsgd_elias__hand_sparse_vector__bit_count_and_bytes),
        cmocka_unit_test(test_qsgd_levels__many_seeds__unbiased),
        cmocka_unit_test(test_qsgd_levels__approx_and_decode_add__match_decode),
        cmocka_unit_test(test_qsgd_elias__hostile_payloads__refused),
        cmocka_unit_test(test_qsgd_levels__bad_specs__named),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("qsgd_levels", tests, NULL, NULL);
}
