/*
 * The device codecs' plain-C twins (compress/ref.c, run through the host
 * assembly of compress/device.c) against the CPU codecs: the same payload
 * byte for byte, the same decode-add float for float, the same refusals
 * (NaN/Inf in x or in a payload, malformed payloads), on both CPU kernel
 * tiers. That the CUDA kernels equal these twins is test_codec_device.c's
 * part (on a GPU).
 */
#include "tests/cmocka_compat.h"

#include "compress/compress_impl.h"
#include "compress/device.h"
#include "tests/unit/codec_device_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_SEED    0x5eed1234abcdull
#define S_COUNTER 42u

static rumor_codec *
s_codec(const char *spec)
{
    rumor_codec *c = NULL;
    assert_int_equal(rumor_codec_new(spec, &c, NULL), RUMOR_OK);
    return c;
}

static size_t
s_cap(const rumor_codec *c, size_t n)
{
    size_t bytes = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &bytes, &exact), RUMOR_OK);
    return bytes + 64;
}

/* One spec and input: the twin's payload and decode-add equal the CPU's. */
static void
s_check_case_x(const char *spec, const float *x, size_t n)
{
    rumor_codec *c = s_codec(spec);
    size_t cap = s_cap(c, n);
    float *y1 = malloc((n + 1) * sizeof *y1),
          *y2 = malloc((n + 1) * sizeof *y2);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    assert_non_null(y1);
    assert_non_null(y2);
    assert_non_null(a);
    assert_non_null(b);
    size_t wa = 0, wb = 0;
    assert_int_equal(
        rumor_codec_encode(c, x, n, S_SEED, S_COUNTER, a, cap, &wa, NULL),
        RUMOR_OK);
    assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                         c,
                                         x,
                                         n,
                                         S_SEED,
                                         S_COUNTER,
                                         b,
                                         cap,
                                         &wb,
                                         NULL),
                     RUMOR_OK);
    if (wa != wb || memcmp(a, b, wa) != 0)
        fail_msg("%s n=%zu: payloads differ (%zu vs %zu bytes)",
                 spec,
                 n,
                 wa,
                 wb);
    s_dev_fill(y1, n, 99);
    memcpy(y2, y1, n * sizeof *y1);
    assert_int_equal(rumor_codec_decode_add(c, a, wa, 0.37f, y1, n), RUMOR_OK);
    assert_int_equal(compress_dev_decode_add(&compress_dev_ref,
                                             c,
                                             a,
                                             wa,
                                             0.37f,
                                             y2,
                                             n,
                                             NULL),
                     RUMOR_OK);
    if (n > 0 && memcmp(y1, y2, n * sizeof *y1) != 0)
        fail_msg("%s n=%zu: decode-add differs", spec, n);
    free(y1);
    free(y2);
    free(a);
    free(b);
    rumor_codec_destroy(&c);
}

/* One spec and size over s_dev_fill's values. */
static void
s_check_case(const char *spec, size_t n)
{
    float *x = malloc((n + 1) * sizeof *x);
    assert_non_null(x);
    s_dev_fill(x, n, n + 1);
    s_check_case_x(spec, x, n);
    free(x);
}

static void
test_ref_twins__every_codec_and_size__cpu_bytes_and_sums(void **state)
{
    (void)state;
    int top = compress_simd_level();
    for (int level = 0; level <= top; level += top > 0 ? top : 1) {
        compress_set_simd(level);
        for (size_t s = 0; s < S_DEV_NSPECS; s++)
            for (size_t z = 0; z < S_DEV_NSIZES; z++)
                s_check_case(s_dev_specs[s], s_dev_sizes[z]);
    }
    compress_set_simd(top);
}

/* NaN or Inf at the first, a middle and the last element: both refuse
 * with RUMOR_ENUMERIC. */
static void
test_ref_twins__nonfinite_x__refused_as_the_cpu_codec(void **state)
{
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t n = 1000, at[] = {0, 517, 999};
    float x[1000];
    for (size_t s = 0; s < S_DEV_NSPECS; s++) {
        rumor_codec *c = s_codec(s_dev_specs[s]);
        size_t cap = s_cap(c, n), w = 0;
        uint8_t *out = malloc(cap);
        assert_non_null(out);
        for (size_t b = 0; b < 3; b++)
            for (size_t p = 0; p < 3; p++) {
                s_dev_fill(x, n, 5);
                x[at[p]] = bad[b];
                assert_int_equal(
                    rumor_codec_encode(c, x, n, 1, 2, out, cap, &w, NULL),
                    RUMOR_ENUMERIC);
                assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                                     c,
                                                     x,
                                                     n,
                                                     1,
                                                     2,
                                                     out,
                                                     cap,
                                                     &w,
                                                     NULL),
                                 RUMOR_ENUMERIC);
                assert_int_equal(w, 0);
            }
        free(out);
        rumor_codec_destroy(&c);
    }
}

/* Payloads the CPU decoder refuses: an Inf or NaN element (dense), a
 * negative or infinite scale (sign), a wrong k, a cut and a lengthened
 * payload; the twin gives the same code and leaves y untouched. at < 0
 * counts from the payload's end. */
static void
s_check_refusal(const char *spec,
                size_t n,
                long at,
                const uint8_t *patch,
                size_t plen,
                long grow)
{
    rumor_codec *c = s_codec(spec);
    size_t cap = s_cap(c, n), w = 0;
    float x[300], y1[300], y2[300];
    uint8_t *buf = calloc(cap + 8, 1);
    assert_non_null(buf);
    s_dev_fill(x, n, 3);
    assert_int_equal(rumor_codec_encode(c, x, n, 9, 9, buf, cap, &w, NULL),
                     RUMOR_OK);
    memcpy(buf + (at < 0 ? (long)w + at : at), patch, plen);
    size_t len = (size_t)((long)w + grow);
    s_dev_fill(y1, n, 4);
    memcpy(y2, y1, sizeof y1);
    rumor_err want = rumor_codec_decode_add(c, buf, len, 1.0f, y1, n);
    assert_int_not_equal(want, RUMOR_OK);
    assert_int_equal(compress_dev_decode_add(&compress_dev_ref,
                                             c,
                                             buf,
                                             len,
                                             1.0f,
                                             y2,
                                             n,
                                             NULL),
                     want);
    float y0[300];
    s_dev_fill(y0, n, 4);
    assert_memory_equal(y2, y0, n * sizeof *y2);
    free(buf);
    rumor_codec_destroy(&c);
}

static void
test_ref_twins__malformed_payloads__refused_as_the_cpu_codec(void **state)
{
    (void)state;
    const uint8_t inf16[] = {0x00, 0x7c}, nan16[] = {0x01, 0xfe};
    const uint8_t infbf[] = {0x80, 0x7f}, inf32[] = {0, 0, 0x80, 0x7f};
    const uint8_t neg[] = {0, 0, 0x80, 0xbf}, k9[] = {9, 0, 0, 0};
    const uint8_t p1[] = {1};
    s_check_refusal("fp16", 300, 12 + 2 * 299, inf16, 2, 0);
    s_check_refusal("fp16", 300, 12 + 2 * 17, nan16, 2, 0);
    s_check_refusal("bf16", 300, 12, infbf, 2, 0);
    s_check_refusal("fp32", 300, 12 + 4 * 100, inf32, 4, 0);
    s_check_refusal("sign:bucket=100", 300, 12 + 4, neg, 4, 0);
    s_check_refusal("sign:bucket=100", 300, 12 + 8, inf32, 4, 0);
    s_check_refusal("sign:bucket=100", 300, 3, p1, 1, 0);
    s_check_refusal("fp16", 300, 0, p1, 0, -1);
    s_check_refusal("sign", 300, 0, p1, 0, 1);
    s_check_refusal("randk:ratio=0.1", 300, 8, k9, 4, 0);
    s_check_refusal("randk:ratio=0.1|fp16", 300, 12 + 16 + 12, inf16, 2, 0);
    s_check_refusal("randk:ratio=0.1|sign:bucket=3",
                    300,
                    12 + 16 + 12,
                    neg,
                    4,
                    0);
    s_check_refusal("randk:ratio=0.1", 300, 0, p1, 0, -3);
    /* "-0": level 0 with the sign, code 1 << bits (2 for terngrad). */
    const uint8_t minus0q[] = {0x10}, minus0t[] = {0x02}, minus0q2[] = {0x04};
    s_check_refusal("qsgd:bucket=100", 300, 12 + 12, minus0q, 1, 0);
    s_check_refusal("qsgd:bucket=100", 300, 12 + 8, neg, 4, 0);
    s_check_refusal("qsgd:bucket=100", 300, 12 + 4, inf32, 4, 0);
    s_check_refusal("qsgd:bucket=100", 300, 0, p1, 0, 1);
    s_check_refusal("terngrad:bucket=100", 300, 12 + 12, minus0t, 1, 0);
    s_check_refusal("terngrad:bucket=100", 300, 3, p1, 1, 0);
    s_check_refusal("randk:ratio=0.1|qsgd:bits=2,bucket=8",
                    300,
                    12 + 16 + 12 + 16,
                    minus0q2,
                    1,
                    0);
    /* Gamma and Elias codes (the CPU decoder's checks): a cut, a
     * lengthened payload, an infinite norm, an unknown code. */
    const uint8_t p3[] = {3};
    s_check_refusal("qsgd:bits=4,elias=1,bucket=100", 300, 0, p1, 0, -1);
    s_check_refusal("qsgd:bits=4,elias=1,bucket=100", 300, 0, p1, 0, 2);
    s_check_refusal("qsgd:bits=2,elias=1,bucket=100", 300, 16, inf32, 4, 0);
    s_check_refusal("qsgd:levels=6,code=elias,bucket=100", 300, 0, p1, 0, -1);
    s_check_refusal("qsgd:levels=6,code=elias,bucket=100", 300, 12, neg, 4, 0);
    s_check_refusal("qsgd:levels=6,code=elias,bucket=100", 300, 3, p3, 1, 0);
    /* Sparse: a wrong k, an index list longer than the payload, an index
     * past n (a long run of zero bits), a cut, the last value Inf. */
    const uint8_t big[] = {0xff, 0xff, 0xff, 0x7f}, zeros[] = {0, 0, 0, 0};
    s_check_refusal("topk:ratio=0.1", 300, 8, k9, 4, 0);
    s_check_refusal("topk:ratio=0.1", 300, 12, big, 4, 0);
    s_check_refusal("topk:ratio=0.1", 300, 16, zeros, 4, 0);
    s_check_refusal("topk:ratio=0.1", 300, 0, p1, 0, -1);
    s_check_refusal("topk:ratio=0.1|fp16", 300, -2, inf16, 2, 0);
    s_check_refusal("topk:ratio=0.2|sign:bucket=7", 300, -12, neg, 4, 0);
    s_check_refusal("threshold:t=1", 300, 12, big, 4, 0);
    s_check_refusal("threshold:t=1", 300, 3, p1, 1, 0);
    s_check_refusal("threshold:t=1|bf16", 300, -2, infbf, 2, 0);
    s_check_refusal("threshold:t=0.5", 300, 0, p1, 0, 1);
    /* qsgd's levels format: a level above s (6: 0b110 > 5), a "-0", a
     * padding bit set, a negative norm, s out of range, a cut. */
    const uint8_t l6[] = {0x06}, m0l[] = {0x08}, pad[] = {0x80};
    const uint8_t s0[] = {0, 0, 0, 0};
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 12 + 12 + 4, l6, 1, 0);
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 12 + 12 + 4, m0l, 1, 0);
    s_check_refusal("qsgd:levels=5,bucket=100", 299, -1, pad, 1, 0);
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 12 + 4, neg, 4, 0);
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 12 + 12, s0, 4, 0);
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 0, p1, 0, -1);
    s_check_refusal("qsgd:levels=5,bucket=100", 300, 12 + 8, inf32, 4, 0);
    /* fp8 / fp4: a wrong symbol width, a bias out of range, a cut, a
     * lengthened payload. */
    const uint8_t k255[] = {0xff, 0, 0, 0};
    s_check_refusal("fp8", 300, 2, p1, 1, 0);
    s_check_refusal("fp4", 300, 8, k255, 4, 0);
    s_check_refusal("fp8", 300, 0, p1, 0, -1);
    s_check_refusal("fp4:code=gennorm", 300, 0, p1, 0, 2);
    /* natural: an exponent 255 (Inf/NaN), a cut, a stray header byte. */
    const uint8_t e255[] = {0xff};
    s_check_refusal("natural", 300, 12 + 299, e255, 1, 0);
    s_check_refusal("natural", 300, 0, p1, 0, -1);
    s_check_refusal("natural", 300, 2, p1, 1, 0);
    s_check_refusal("randk:ratio=0.1|natural", 300, 12 + 16 + 12, e255, 1, 0);
    s_check_refusal("dgc:ratio=0.1", 300, 12, big, 4, 0);
    s_check_refusal("dgc:ratio=0.1|fp16", 300, -2, inf16, 2, 0);
}

/* Magnitudes from {0, 1, 2} with either sign: most keys tie, so the
 * selection rests on breaking ties by index as the CPU's top-k does (DGC:
 * a third of the values reach the sample's threshold, too many, and
 * twice it none, so it tries both ways, then falls back to top-k). */
static void
test_ref_twins__topk_ties__broken_by_index_as_the_cpu(void **state)
{
    (void)state;
    const char *specs[] = {"topk:ratio=0.1",
                           "topk:ratio=0.5",
                           "topk:k=1",
                           "dgc:ratio=0.01",
                           "threshold:t=1"};
    const size_t sizes[] = {1, 2, 257, 4097, 70000};
    for (size_t s = 0; s < 5; s++)
        for (size_t z = 0; z < 5; z++) {
            size_t n = sizes[z], w1 = 0, w2 = 0;
            rumor_codec *c = s_codec(specs[s]);
            size_t cap = s_cap(c, n);
            float *x = malloc(n * sizeof *x);
            uint8_t *a = malloc(cap), *b = malloc(cap);
            assert_true(x && a && b);
            for (size_t i = 0; i < n; i++)
                x[i] = (float)((i * 7919u) % 3) * (i % 4 ? 1.0f : -1.0f);
            assert_int_equal(
                rumor_codec_encode(c, x, n, 1, 2, a, cap, &w1, NULL),
                RUMOR_OK);
            assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                                 c,
                                                 x,
                                                 n,
                                                 1,
                                                 2,
                                                 b,
                                                 cap,
                                                 &w2,
                                                 NULL),
                             RUMOR_OK);
            if (w1 != w2 || memcmp(a, b, w1) != 0)
                fail_msg("%s n=%zu: payloads differ", specs[s], n);
            free(x);
            free(a);
            free(b);
            rumor_codec_destroy(&c);
        }
}

/* fp8 / fp4 bias=real data: Gaussian (the real b found on the sample holds
 * on all of x) or Gaussian with outliers of 3000 at odd indices, which
 * the sample (x[j n / m], every other value when n = 2m) misses, so on all
 * of x the integer b the search started from wins. */
static void
s_real_fill(float *x, size_t n, bool outliers)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, n, 3);
    for (size_t i = 0; i < n; i++)
        x[i] =
            outliers && i % 64 == 1 ? 3000.0f : (float)rumor_rng_normal(&rng);
}

/* Whether bias=real's check on all of x took the integer b: the payload's
 * (k, f) is not what the search on the sample alone finds. */
static bool
s_real_reverted(const rumor_codec *c,
                const float *x,
                size_t n,
                const uint8_t *payload)
{
    int32_t kp = (int32_t)core_get_u32(payload + 8);
    float fr = compress_get_f32(payload + RUMOR_COMPRESS_HEADER_BYTES);
    float *sample = malloc(COMPRESS_FP8_SAMPLE * sizeof *sample);
    assert_non_null(sample);
    size_t m = compress_fp8_sample(x, n, sample);
    int k = 0;
    float f = 1.0f;
    assert_int_equal(compress_fp8_bias(c,
                                       sample,
                                       m,
                                       compress_maxabs(x, n),
                                       m,
                                       NULL,
                                       NULL,
                                       &k,
                                       &f),
                     RUMOR_OK);
    free(sample);
    return kp != k || fr != f;
}

/* bias=real over more than one sample reads all of x on the device (one
 * error per 16384-value piece, added in order on the host): the CPU's
 * payload byte for byte, whole pieces and a tail, the check keeping the
 * real b and reverting it; NaN in the tail piece refused. */
static void
test_ref_twins__fp8_real_bias_all_of_x__cpu_bytes_both_ways(void **state)
{
    (void)state;
    const char *specs[] = {"fp8:bias=real",
                           "fp4:bias=real",
                           "fp4:bias=real,code=gennorm"};
    const size_t sizes[] = {16385, 32768, 50001};
    unsigned kept = 0, reverted = 0;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
            for (int o = 0; o < 2; o++) {
                size_t n = sizes[z];
                float *x = malloc(n * sizeof *x);
                assert_non_null(x);
                s_real_fill(x, n, o == 1);
                s_check_case_x(specs[s], x, n);
                rumor_codec *c = s_codec(specs[s]);
                size_t cap = s_cap(c, n), w = 0;
                uint8_t *out = malloc(cap);
                assert_non_null(out);
                assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                                     c,
                                                     x,
                                                     n,
                                                     1,
                                                     2,
                                                     out,
                                                     cap,
                                                     &w,
                                                     NULL),
                                 RUMOR_OK);
                if (s_real_reverted(c, x, n, out))
                    reverted++;
                else
                    kept++;
                x[n - 1] = NAN;
                assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                                     c,
                                                     x,
                                                     n,
                                                     1,
                                                     2,
                                                     out,
                                                     cap,
                                                     &w,
                                                     NULL),
                                 RUMOR_ENUMERIC);
                free(out);
                free(x);
                rumor_codec_destroy(&c);
            }
    print_message("bias=real on all of x: real b kept %u times, integer "
                  "taken %u times\n",
                  kept,
                  reverted);
    assert_true(kept > 0 && reverted > 0);
}

/* One share=1 spec and size: the twin's own scalers are the CPU's, and
 * its payload at agreed scalers (own ones moved up and down, so values
 * saturate) is the CPU's byte for byte; NaN in x refused by both. */
static void
s_check_shared(const char *spec, size_t n)
{
    rumor_codec *c = s_codec(spec);
    size_t cap = s_cap(c, n), nb = rumor_codec_scaler_count(c, n);
    size_t wa = 0, wb = 0;
    float *x = malloc((n + 1) * sizeof *x), *sa = malloc((nb + 1) * 4),
          *sb = malloc((nb + 1) * 4);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    assert_true(x != NULL && sa != NULL && sb != NULL && a && b);
    s_dev_fill(x, n, n + 5);
    assert_int_equal(rumor_codec_scalers(c, x, n, sa), RUMOR_OK);
    assert_int_equal(compress_dev_scalers(&compress_dev_ref, c, x, n, sb, NULL),
                     RUMOR_OK);
    if (nb > 0 && memcmp(sa, sb, nb * sizeof *sa) != 0)
        fail_msg("%s n=%zu: scalers differ", spec, n);
    for (size_t k = 0; k < nb; k++)
        sa[k] *= k % 3 == 0 ? 0.5f : k % 3 == 1 ? 1.0f : 1.75f;
    assert_int_equal(
        rumor_codec_encode_shared(c, x, n, sa, 7, 9, a, cap, &wa, NULL),
        RUMOR_OK);
    assert_int_equal(compress_dev_encode_shared(&compress_dev_ref,
                                                c,
                                                x,
                                                n,
                                                sa,
                                                7,
                                                9,
                                                b,
                                                cap,
                                                &wb,
                                                NULL),
                     RUMOR_OK);
    if (wa != wb || memcmp(a, b, wa) != 0)
        fail_msg("%s n=%zu: shared payloads differ", spec, n);
    if (n > 0) {
        x[n / 2] = NAN;
        assert_int_equal(
            compress_dev_scalers(&compress_dev_ref, c, x, n, sb, NULL),
            RUMOR_ENUMERIC);
        assert_int_equal(compress_dev_encode_shared(&compress_dev_ref,
                                                    c,
                                                    x,
                                                    n,
                                                    sa,
                                                    7,
                                                    9,
                                                    b,
                                                    cap,
                                                    &wb,
                                                    NULL),
                         RUMOR_ENUMERIC);
    }
    free(x);
    free(sa);
    free(sb);
    free(a);
    free(b);
    rumor_codec_destroy(&c);
}

static void
test_ref_twins__terngrad_share__cpu_scalers_and_bytes(void **state)
{
    (void)state;
    static const char *const specs[] = {"terngrad:share=1",
                                        "terngrad:share=1,bucket=100",
                                        "terngrad:share=1,bucket=7,clip=1",
                                        "terngrad:share=1,clip=2.5"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t z = 0; z < S_DEV_NSIZES; z++)
            s_check_shared(specs[s], s_dev_sizes[z]);
}

/* The codec the device path leaves out (the lossless huffman, alone or
 * as a sparse codec's values codec), and the CUDA table: RUMOR_ENOTSUP
 * with a reason where there is no device (always in a CPU-only build). */
static void
test_device_path__not_done_or_no_device__enotsup(void **state)
{
    (void)state;
    const char *not_done[] = {"huffman",
                              "topk|huffman",
                              "randk:ratio=0.1|huffman"};
    float x[16] = {0};
    uint8_t out[512];
    size_t w = 0;
    for (size_t s = 0; s < sizeof not_done / sizeof not_done[0]; s++) {
        rumor_codec *c = s_codec(not_done[s]);
        assert_false(rumor_codec_device_supported(c));
        assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                             c,
                                             x,
                                             16,
                                             0,
                                             0,
                                             out,
                                             sizeof out,
                                             &w,
                                             NULL),
                         RUMOR_ENOTSUP);
        rumor_codec_destroy(&c);
    }
    const struct compress_dev_i *d = NULL;
    const char *why = NULL;
    if (compress_dev_cuda(&d, &why) == RUMOR_OK)
        return; /* a device: test_codec_device.c's part */
    assert_non_null(why);
    printf("device codecs unavailable here: %s\n", why);
    rumor_codec *c = s_codec("fp16");
    assert_int_equal(
        rumor_codec_encode_device(c, x, 16, 0, 0, out, sizeof out, &w, NULL),
        RUMOR_ENOTSUP);
    assert_int_equal(
        rumor_codec_decode_add_device(c, out, 44, 1.0f, x, 16, NULL),
        RUMOR_ENOTSUP);
    rumor_codec_destroy(&c);
}

/* DGC's warm-up counts (rumor_codec_encode_k): the twin's payload with
 * an explicit k is the CPU's, for counts from 1 to n (the sampled
 * threshold inside, the exact top-k at the ends), under fp32 and fp16
 * values; a count above n and another codec are refused. */
static void
test_ref_twins__dgc_count__cpu_bytes(void **state)
{
    (void)state;
    static const char *const specs[] = {"dgc:ratio=0.01",
                                        "dgc:ratio=0.01|fp16"};
    static const size_t sizes[] = {1000, 70001};
    for (size_t c = 0; c < 2; c++)
        for (size_t z = 0; z < 2; z++) {
            rumor_codec *codec = s_codec(specs[c]);
            size_t n = sizes[z];
            size_t counts[] = {1, n / 100, n / 10, n / 4, n - 1, n};
            size_t cap = compress_sparse_size_any(codec, n);
            float *x = malloc(n * sizeof *x);
            uint8_t *a = malloc(cap), *b = malloc(cap);
            assert_true(x && a && b);
            s_dev_fill(x, n, 7 + z);
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                size_t wa = 0, wb = 0;
                assert_int_equal(rumor_codec_encode_k(codec,
                                                      x,
                                                      n,
                                                      counts[k],
                                                      S_SEED,
                                                      S_COUNTER,
                                                      a,
                                                      cap,
                                                      &wa),
                                 RUMOR_OK);
                assert_int_equal(compress_dev_encode_k(&compress_dev_ref,
                                                       codec,
                                                       x,
                                                       n,
                                                       counts[k],
                                                       S_SEED,
                                                       S_COUNTER,
                                                       b,
                                                       cap,
                                                       &wb,
                                                       NULL),
                                 RUMOR_OK);
                if (wa != wb || memcmp(a, b, wa) != 0)
                    fail_msg("%s n=%zu k=%zu: payloads differ",
                             specs[c],
                             n,
                             counts[k]);
            }
            size_t w = 0;
            assert_int_equal(compress_dev_encode_k(&compress_dev_ref,
                                                   codec,
                                                   x,
                                                   n,
                                                   n + 1,
                                                   S_SEED,
                                                   S_COUNTER,
                                                   b,
                                                   cap,
                                                   &w,
                                                   NULL),
                             RUMOR_EINVAL);
            rumor_codec_destroy(&codec);
            free(x);
            free(a);
            free(b);
        }
    rumor_codec *topk = s_codec("topk:ratio=0.1");
    float x[16] = {0};
    uint8_t out[256];
    size_t w = 0;
    assert_int_equal(
        rumor_codec_encode_k(topk, x, 16, 4, S_SEED, 0, out, sizeof out, &w),
        RUMOR_EINVAL);
    assert_int_equal(compress_dev_encode_k(&compress_dev_ref,
                                           topk,
                                           x,
                                           16,
                                           4,
                                           S_SEED,
                                           0,
                                           out,
                                           sizeof out,
                                           &w,
                                           NULL),
                     RUMOR_ENOTSUP);
    rumor_codec_destroy(&topk);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_ref_twins__every_codec_and_size__cpu_bytes_and_sums),
        cmocka_unit_test(test_ref_twins__nonfinite_x__refused_as_the_cpu_codec),
        cmocka_unit_test(
            test_ref_twins__malformed_payloads__refused_as_the_cpu_codec),
        cmocka_unit_test(test_ref_twins__topk_ties__broken_by_index_as_the_cpu),
        cmocka_unit_test(test_ref_twins__dgc_count__cpu_bytes),
        cmocka_unit_test(
            test_ref_twins__fp8_real_bias_all_of_x__cpu_bytes_both_ways),
        cmocka_unit_test(test_ref_twins__terngrad_share__cpu_scalers_and_bytes),
        cmocka_unit_test(test_device_path__not_done_or_no_device__enotsup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
