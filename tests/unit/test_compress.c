/*
 * compress: spec parsing, every codec's round trip, error bounds and
 * unbiasedness, top-k against a sort-based reference, fast kernels against
 * their plain-C references, NaN/Inf rejection, malformed payloads, golden
 * known-answer bytes (tests/data/compress/, regenerated only on purpose
 * with RUMOR_COMPRESS_REGEN=1), the Huffman stage, and the error-feedback
 * memories with save/restore.
 */
#include "tests/cmocka_compat.h"

#include "rumor/compress.h"

#include "compress/compress_impl.h"
#include "compress/huffman.h"
#include "core/bits.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers ------------------------------------------------------------- */

/* Every codec and a few compositions, with non-default parameters. */
static const char *const s_specs[] = {
    "fp32",
    "fp16",
    "bf16",
    "qsgd:bits=4,bucket=512",
    "qsgd:bits=2,bucket=64,elias=1",
    "qsgd:bits=8,bucket=100",
    "qsgd:bits=1,bucket=33",
    "qsgd:levels=6,bucket=33,code=elias",
    "qsgd:levels=5,bucket=64",
    "terngrad:bucket=64,clip=2.5",
    "terngrad:bucket=128",
    "sign:bucket=100",
    "sign:bucket=512",
    "natural",
    "fp8",
    "fp4",
    "fp8:bias=real",
    "fp4:bias=real",
    "huffman",
    "topk:ratio=0.05",
    "topk:k=7|qsgd:bits=4",
    "randk:ratio=0.1,scale=1",
    "randk:k=5|fp16",
    "threshold:t=0.5",
    "dgc:ratio=0.02",
    "dgc:ratio=0.05|terngrad",
};
#define SPEC_COUNT (sizeof s_specs / sizeof s_specs[0])

static rumor_codec *
s_codec(const char *spec)
{
    rumor_codec *c = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    rumor_err rc = rumor_codec_new(spec, &c, &diag);
    if (rc != RUMOR_OK)
        fail_msg("rumor_codec_new(%s): %s", spec, diag.msg);
    return c;
}

/* Gaussian values with zeros, negative zero, denormals and a few larger
 * ones mixed in, from a fixed seed. */
static float *
s_data(size_t n, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 99);
    for (size_t i = 0; i < n; i++) {
        double g = rumor_rng_normal(&rng);
        switch (i % 17) {
        case 3:
            x[i] = 0.0f;
            break;
        case 5:
            x[i] = -0.0f;
            break;
        case 7:
            x[i] = (float)g * 1e-40f; /* denormal */
            break;
        case 11:
            x[i] = (float)(g * 10.0);
            break;
        default:
            x[i] = (float)g;
            break;
        }
    }
    return x;
}

static uint8_t *
s_encode(const rumor_codec *c,
         const float *x,
         size_t n,
         uint64_t seed,
         uint64_t counter,
         size_t *len,
         float *approx)
{
    size_t bound = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &bound, &exact), RUMOR_OK);
    uint8_t *buf = malloc(bound);
    assert_non_null(buf);
    rumor_err rc =
        rumor_codec_encode(c, x, n, seed, counter, buf, bound, len, approx);
    if (rc != RUMOR_OK)
        fail_msg("encode %s n=%zu: %s",
                 rumor_codec_spec(c),
                 n,
                 rumor_errname(rc));
    if (exact)
        assert_int_equal(*len, bound);
    else
        assert_true(*len <= bound);
    return buf;
}

/* --- spec parsing ----------------------------------------------------------
 */

static void
test_codec_new__every_spec__canonical_text_round_trips(void **state)
{
    (void)state;
    for (size_t i = 0; i < SPEC_COUNT; i++) {
        rumor_codec *a = s_codec(s_specs[i]);
        rumor_codec *b = s_codec(rumor_codec_spec(a));
        assert_string_equal(rumor_codec_spec(a), rumor_codec_spec(b));
        assert_int_equal(rumor_codec_id_of(a), rumor_codec_id_of(b));
        rumor_codec_destroy(&a);
        rumor_codec_destroy(&b);
        assert_null(a);
        rumor_codec_destroy(&a); /* twice is fine */
    }
    rumor_codec *c = s_codec("qsgd");
    assert_string_equal(rumor_codec_spec(c),
                        "qsgd:bits=4,bucket=512,elias=0,biased=0");
    assert_true(rumor_codec_is_stochastic(c));
    rumor_codec_destroy(&c);
    c = s_codec("topk:ratio=0.01|qsgd:bits=4");
    assert_string_equal(rumor_codec_spec(c),
                        "topk:ratio=0.01|qsgd:bits=4,bucket=512,elias=0,"
                        "biased=0");
    assert_int_equal(rumor_codec_id_of(c), RUMOR_CODEC_TOPK);
    assert_true(rumor_codec_is_stochastic(c)); /* through qsgd */
    rumor_codec_destroy(&c);
    c = s_codec("terngrad:share=1,clip=2.5");
    assert_string_equal(rumor_codec_spec(c),
                        "terngrad:bucket=512,clip=2.5,share=1");
    rumor_codec_destroy(&c);
    c = s_codec("sign");
    assert_false(rumor_codec_is_stochastic(c));
    rumor_codec_destroy(&c);
}

static void
test_codec_new__bad_specs__einval_naming_the_problem(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        const char *in_msg;
    } rows[] = {
        {"qsgd:bitz=4", "bitz"},
        {"qsgd:bits=9", "bits"},
        {"qsgd:bits=0", "bits"},
        {"qsgd:bits=4x", "4x"},
        {"qsgd:bucket=0", "bucket"},
        {"nosuch", "nosuch"},
        {"nosuch:a=1", "nosuch"},
        {"topk:ratio=0", "ratio"},
        {"topk:ratio=1.5", "ratio"},
        {"topk:ratio=nan", "ratio"},
        {"topk:scale=1", "scale"},
        {"fp32:bits=4", "bits"},
        {"sign:bucket", "bucket"},
        {"qsgd|topk", "SPARSE|DENSE"},
        {"topk|topk", "SPARSE|DENSE"},
        {"topk|fp16|fp32", "two"},
        {"threshold:t=-1", "t"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        rumor_codec *c = (rumor_codec *)1;
        struct rumor_diag diag;
        memset(&diag, 0, sizeof diag);
        assert_int_equal(rumor_codec_new(rows[i].spec, &c, &diag),
                         RUMOR_EINVAL);
        assert_null(c);
        if (strstr(diag.msg, rows[i].in_msg) == NULL)
            fail_msg("spec '%s': message '%s' lacks '%s'",
                     rows[i].spec,
                     diag.msg,
                     rows[i].in_msg);
    }
}

static void
test_codec_name__every_id__known_and_stable(void **state)
{
    (void)state;
    assert_string_equal(rumor_codec_name(RUMOR_CODEC_FP32), "fp32");
    assert_string_equal(rumor_codec_name(RUMOR_CODEC_QSGD), "qsgd");
    assert_string_equal(rumor_codec_name(RUMOR_CODEC_DGC), "dgc");
    for (int id = 1; id <= RUMOR_CODEC_ID_MAX; id++)
        assert_non_null(rumor_codec_name((rumor_codec_id)id));
    assert_null(rumor_codec_name((rumor_codec_id)0));
    assert_null(rumor_codec_name((rumor_codec_id)(RUMOR_CODEC_ID_MAX + 1)));
}

/* --- generic properties of every codec ----------------------------------- */

/* The rounding rule at its boundary, on every tier: TernGrad buckets
 * whose max is 1 (inv = 1 exactly) and values x = (65535.5 - r) 2^-16
 * with r the value's draw, for which x + (r + 0.5) 2^-16 is exactly 1
 * (level 1), or 2^-17 less (level 0). A draw taken from the wrong place,
 * a wrong offset or a rounding of the sum would flip levels. */
/* Encodes x with spec, (seed, counter) on every tier and decodes: the
 * result must be want exactly. */
static void
s_decode_on_every_tier__equals(const char *spec,
                               const float *x,
                               size_t n,
                               uint64_t seed,
                               uint64_t counter,
                               const float *want)
{
    rumor_codec *c = s_codec(spec);
    float *y = malloc(n * sizeof *y);
    for (int simd = 0; simd < 3; simd++) {
        if (compress_set_simd(simd) != simd)
            continue; /* a tier this CPU lacks */
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, seed, counter, &len, NULL);
        assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
        for (size_t i = 0; i < n; i++)
            if (y[i] != want[i])
                fail_msg("%s tier %d i=%zu: %g, want %g",
                         spec,
                         simd,
                         i,
                         (double)y[i],
                         (double)want[i]);
        free(buf);
    }
    compress_set_simd(2);
    rumor_codec_destroy(&c);
    free(y);
}

/* Natural compression at its boundary, on every tier: a mantissa one
 * above (draw 2^7 + 2^6) rounds up to 2, one equal to it rounds down to
 * 1. */
static void
test_natural__mantissas_at_a_draw_boundary__round_exactly_as_defined(
    void **state)
{
    (void)state;
    const size_t n = 2 * 4096 + 520;
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    uint16_t *r = malloc(n * sizeof *r);
    compress_draws_ref(8, 13, 0, r, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t mant = ((uint32_t)r[i] << 7 | 0x40u) + !(i & 1);
        x[i] = compress_u2f(0x3f800000u | mant);
        want[i] = i & 1 ? 1.0f : 2.0f;
    }
    s_decode_on_every_tier__equals("natural", x, n, 8, 13, want);
    free(x);
    free(want);
    free(r);
}

/* The rounding rule at its boundary, on every tier: TernGrad buckets
 * whose max is 1 (inv = 1 exactly) and values x = (65535.5 - r) 2^-16
 * with r the value's draw, for which x + (r + 0.5) 2^-16 is exactly 1
 * (level 1), or 2^-17 less (level 0). A draw taken from the wrong place,
 * a wrong offset or a rounding of the sum would flip levels. */
static void
test_terngrad__values_at_a_draw_boundary__round_exactly_as_defined(void **state)
{
    (void)state;
    const size_t n = 2 * 4096 + 520, bucket = 512;
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    uint16_t *r = malloc(n * sizeof *r);
    compress_draws_ref(31, 5, 0, r, n);
    for (size_t i = 0; i < n; i++) {
        float sign = i % 3 ? 1.0f : -1.0f;
        bool below = i & 1;
        x[i] =
            (65535.5f - (float)r[i] - 0.5f * (float)below) * 0x1.0p-16f * sign;
        want[i] = below ? 0.0f : sign;
        if (i % bucket == 0)
            x[i] = want[i] = 1.0f;
    }
    s_decode_on_every_tier__equals("terngrad:bucket=512", x, n, 31, 5, want);
    free(x);
    free(want);
    free(r);
}

/* Long vectors (several draw windows, buckets that straddle them, the
 * fused and the joined bucket paths, a last partial bucket): the same
 * bytes on every tier as on the plain-C one. */
static void
test_encode__stochastic_codecs_long_vectors__same_bytes_on_every_tier(
    void **state)
{
    (void)state;
    static const char *const specs[] = {"qsgd:bits=4",
                                        "qsgd:bits=2,bucket=72",
                                        "qsgd:bits=3,bucket=4096",
                                        "qsgd:bits=8,bucket=100",
                                        "terngrad:bucket=8",
                                        "terngrad",
                                        "natural"};
    const size_t n = 3 * 4096 + 1003;
    float *x = s_data(n, 77);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        rumor_codec *c = s_codec(specs[s]);
        size_t len0 = 0;
        compress_set_simd(0);
        uint8_t *plain = s_encode(c, x, n, 9, 4, &len0, NULL);
        for (int simd = 1; simd < 3; simd++) {
            if (compress_set_simd(simd) != simd)
                continue; /* a tier this CPU lacks */
            size_t len = 0;
            uint8_t *fast = s_encode(c, x, n, 9, 4, &len, NULL);
            assert_int_equal(len, len0);
            if (memcmp(fast, plain, len) != 0)
                fail_msg("%s: tier %d bytes differ from plain C",
                         specs[s],
                         simd);
            free(fast);
        }
        free(plain);
        rumor_codec_destroy(&c);
    }
    compress_set_simd(2);
    free(x);
}

static void
test_encode__every_codec__approx_equals_decode_and_decode_add(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 7, 64, 1000, 4099};
    /* On the plain-C paths (a CPU without AVX2) and on the fast ones. */
    for (int simd = 0; simd < 3; simd++)
        for (size_t s = 0; s < SPEC_COUNT; s++) {
            if (compress_set_simd(simd) != simd)
                continue; /* a tier this CPU lacks */
            rumor_codec *c = s_codec(s_specs[s]);
            for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
                size_t n = sizes[t], len = 0, len2 = 0;
                float *x = s_data(n, 1000 + t);
                float *approx = calloc(n + 1, sizeof *approx);
                float *y = calloc(n + 1, sizeof *y);
                float *z = calloc(n + 1, sizeof *z);
                uint8_t *buf = s_encode(c, x, n, 42, 7, &len, approx);
                uint8_t *again = s_encode(c, x, n, 42, 7, &len2, NULL);
                assert_int_equal(len, len2); /* deterministic */
                assert_memory_equal(buf, again, len);
                rumor_codec_id id;
                size_t pn = 0;
                assert_int_equal(rumor_codec_peek(buf, len, &id, &pn),
                                 RUMOR_OK);
                assert_int_equal(id, rumor_codec_id_of(c));
                assert_int_equal(pn, n);
                for (size_t i = 0; i < n; i++)
                    y[i] = 123.0f;
                assert_int_equal(rumor_codec_decode(c, buf, len, y, n),
                                 RUMOR_OK);
                for (size_t i = 0; i < n; i++)
                    if (compress_f2u(y[i]) != compress_f2u(approx[i]))
                        fail_msg("%s n=%zu i=%zu: decode %a approx %a",
                                 s_specs[s],
                                 n,
                                 i,
                                 (double)y[i],
                                 (double)approx[i]);
                for (size_t i = 0; i < n; i++)
                    z[i] = (float)i;
                assert_int_equal(
                    rumor_codec_decode_add(c, buf, len, -0.5f, z, n),
                    RUMOR_OK);
                for (size_t i = 0; i < n; i++)
                    assert_true(z[i] == (float)i + -0.5f * approx[i]);
                free(x);
                free(approx);
                free(y);
                free(z);
                free(buf);
                free(again);
            }
            rumor_codec_destroy(&c);
        }
}

static void
test_decode__truncated_or_padded_payload__rejected_y_unchanged(void **state)
{
    (void)state;
    const size_t n = 300;
    for (size_t s = 0; s < SPEC_COUNT; s++) {
        rumor_codec *c = s_codec(s_specs[s]);
        float *x = s_data(n, 5);
        float y[300];
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, 1, 2, &len, NULL);
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *part = malloc(cut ? cut : 1);
            memcpy(part, buf, cut);
            for (size_t i = 0; i < n; i++)
                y[i] = 1.0f;
            rumor_err rc = rumor_codec_decode_add(c, part, cut, 2.0f, y, n);
            if (rc == RUMOR_OK)
                fail_msg("%s: truncated at %zu of %zu accepted",
                         s_specs[s],
                         cut,
                         len);
            for (size_t i = 0; i < n; i++)
                assert_true(y[i] == 1.0f);
            free(part);
        }
        uint8_t *longer = malloc(len + 1);
        memcpy(longer, buf, len);
        longer[len] = 0;
        assert_int_not_equal(rumor_codec_decode(c, longer, len + 1, y, n),
                             RUMOR_OK);
        /* Wrong element count, version and codec id. */
        assert_int_equal(rumor_codec_decode(c, buf, len, y, n - 1),
                         RUMOR_EPROTO);
        buf[1] ^= 0x40;
        assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_EPROTO);
        buf[1] ^= 0x40;
        buf[0] = (uint8_t)(buf[0] == 1 ? 2 : 1);
        assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_EPROTO);
        free(longer);
        free(buf);
        free(x);
        rumor_codec_destroy(&c);
    }
}

/* A level-0 code with its sign bit ("-0") is never written, so a decoder
 * that met one would accept two encodings of one vector: rejected at
 * every width, on every tier, at the start, middle and end of a chunk. */
static void
test_qsgd_decode__minus_zero_code__rejected_every_width(void **state)
{
    (void)state;
    static const char *const specs[] = {"terngrad",
                                        "qsgd:bits=2",
                                        "qsgd:bits=4",
                                        "qsgd:bits=7",
                                        "qsgd:bits=8"};
    static const size_t at[] = {0, 4095, 4097, 5000};
    const size_t n = 5001;
    float *x = s_data(n, 12), *y = malloc(n * sizeof *y);
    for (size_t a = 0; a < 4; a++)
        x[at[a]] = 0.0f;
    for (int simd = 0; simd < 3; simd++)
        for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
            if (compress_set_simd(simd) != simd)
                continue; /* a tier this CPU lacks */
            rumor_codec *c = s_codec(specs[s]);
            size_t len = 0;
            uint8_t *buf = s_encode(c, x, n, 3, 4, &len, NULL);
            unsigned b = s == 0 ? 1 : buf[2], w = b + 1;
            size_t body = RUMOR_COMPRESS_HEADER_BYTES + 4 * ((n + 511) / 512);
            assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
            for (size_t a = 0; a < 4; a++) {
                size_t bit = at[a] * w + b;
                buf[body + bit / 8] ^= (uint8_t)(1u << (bit % 8));
                if (rumor_codec_decode(c, buf, len, y, n) != RUMOR_EPROTO)
                    fail_msg("%s tier %d: -0 at %zu accepted",
                             specs[s],
                             simd,
                             at[a]);
                buf[body + bit / 8] ^= (uint8_t)(1u << (bit % 8));
            }
            free(buf);
            rumor_codec_destroy(&c);
        }
    compress_set_simd(2);
    free(x);
    free(y);
}

static void
test_decode__random_byte_flips__never_crash(void **state)
{
    (void)state;
    const size_t n = 200;
    struct rumor_rng rng;
    rumor_rng_init(&rng, 77, 0);
    for (size_t s = 0; s < SPEC_COUNT; s++) {
        rumor_codec *c = s_codec(s_specs[s]);
        float *x = s_data(n, 6);
        float y[200];
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, 1, 2, &len, NULL);
        for (int trial = 0; trial < 300; trial++) {
            size_t at = RUMOR_COMPRESS_HEADER_BYTES / 2 +
                        rumor_rng_below(&rng, (uint32_t)(len - 6));
            uint8_t old = buf[at];
            buf[at] ^= (uint8_t)(1u << rumor_rng_below(&rng, 8));
            rumor_err rc = rumor_codec_decode(c, buf, len, y, n);
            assert_true(rc == RUMOR_OK || rc == RUMOR_EPROTO ||
                        rc == RUMOR_ENUMERIC);
            for (size_t i = 0; rc == RUMOR_OK && i < n; i++)
                if (!isfinite(y[i]))
                    fail_msg("%s: byte %zu flipped: decoded a non-finite",
                             s_specs[s],
                             at);
            buf[at] = old;
        }
        free(buf);
        free(x);
        rumor_codec_destroy(&c);
    }
}

static void
test_encode__nan_or_inf_anywhere__enumeric(void **state)
{
    (void)state;
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t n = 1500;
    for (size_t s = 0; s < SPEC_COUNT; s++) {
        rumor_codec *c = s_codec(s_specs[s]);
        size_t bound = 0;
        bool exact = false;
        assert_int_equal(rumor_codec_encoded_size(c, n, &bound, &exact),
                         RUMOR_OK);
        uint8_t *buf = malloc(bound);
        for (size_t b = 0; b < 3; b++) {
            for (size_t at = 0; at < n; at += 499) {
                float *x = s_data(n, 8);
                x[at] = bad[b];
                size_t len = 99;
                rumor_err rc =
                    rumor_codec_encode(c, x, n, 1, 1, buf, bound, &len, NULL);
                if (rc != RUMOR_ENUMERIC)
                    fail_msg("%s: %f at %zu gave %s",
                             s_specs[s],
                             (double)bad[b],
                             at,
                             rumor_errname(rc));
                assert_int_equal(len, 0);
                free(x);
            }
        }
        free(buf);
        rumor_codec_destroy(&c);
    }
}

static void
test_encode__cap_too_small__etoobig(void **state)
{
    (void)state;
    const size_t n = 1000;
    float *x = s_data(n, 9);
    for (size_t s = 0; s < SPEC_COUNT; s++) {
        rumor_codec *c = s_codec(s_specs[s]);
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, 3, 4, &len, NULL);
        size_t got = 0;
        assert_int_equal(
            rumor_codec_encode(c, x, n, 3, 4, buf, len - 1, &got, NULL),
            RUMOR_ETOOBIG);
        size_t bytes = 1;
        bool exact = true;
        assert_int_equal(rumor_codec_encoded_size(c,
                                                  RUMOR_COMPRESS_MAX_ELEMS + 1,
                                                  &bytes,
                                                  &exact),
                         RUMOR_ETOOBIG);
        assert_int_equal(bytes, 0);
        assert_int_equal(rumor_codec_encode(c,
                                            x,
                                            RUMOR_COMPRESS_MAX_ELEMS + 1,
                                            3,
                                            4,
                                            buf,
                                            len,
                                            &got,
                                            NULL),
                         RUMOR_ETOOBIG);
        free(buf);
        rumor_codec_destroy(&c);
    }
    free(x);
}

/* Builds a payload with a codec's header and then a body of non-finite
 * values where the codec carries floats. */
static void
test_decode__non_finite_values_in_payload__enumeric(void **state)
{
    (void)state;
    float x[8] = {1, -2, 3, 0.5f, 0, 1, 1, -1}, y[8];
    size_t len = 0;
    const char *specs[] = {"fp32", "fp16", "bf16", "qsgd", "sign", "natural"};
    for (size_t s = 0; s < 6; s++) {
        rumor_codec *c = s_codec(specs[s]);
        uint8_t *buf = s_encode(c, x, 8, 1, 1, &len, NULL);
        uint8_t *p = buf + RUMOR_COMPRESS_HEADER_BYTES;
        switch (rumor_codec_id_of(c)) {
        case RUMOR_CODEC_FP32:
        case RUMOR_CODEC_QSGD: /* the bucket norm */
        case RUMOR_CODEC_SIGN: /* the bucket scale */
            compress_put_f32(p, INFINITY);
            break;
        case RUMOR_CODEC_FP16:
            p[1] = 0x7c;
            break;
        case RUMOR_CODEC_BF16:
            p[1] = 0x7f;
            p[0] = 0x80;
            break;
        default: /* natural: exponent byte 255 */
            p[0] = 255;
            break;
        }
        assert_int_equal(rumor_codec_decode(c, buf, len, y, 8), RUMOR_ENUMERIC);
        free(buf);
        rumor_codec_destroy(&c);
    }
}

/* --- known answers ------------------------------------------------------- */

static void
test_fp32__payload_layout__matches_hand_written_bytes(void **state)
{
    (void)state;
    rumor_codec *c = s_codec("fp32");
    float x[2] = {1.0f, -2.0f};
    uint8_t buf[64];
    size_t len = 0;
    assert_int_equal(rumor_codec_encode(c, x, 2, 0, 0, buf, 64, &len, NULL),
                     RUMOR_OK);
    static const uint8_t want[] = {1, 1, 0, 0, 2,    0,    0, 0, 0, 0,
                                   0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0};
    assert_int_equal(len, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    rumor_codec_destroy(&c);
}

static void
test_sign__hand_computed_bucket__scaled_signs(void **state)
{
    (void)state;
    rumor_codec *c = s_codec("sign:bucket=4");
    float x[6] = {1, -3, 0, 4, -2, 0.5f}, approx[6];
    uint8_t buf[64];
    size_t len = 0;
    assert_int_equal(rumor_codec_encode(c, x, 6, 0, 0, buf, 64, &len, approx),
                     RUMOR_OK);
    /* bucket 0: mean |x| = 2, bucket 1: 1.25; sign bits 0b010010 */
    const float want[6] = {2, -2, 2, 2, -1.25f, 1.25f};
    assert_memory_equal(approx, want, sizeof want);
    assert_int_equal(len, 12 + 8 + 1);
    assert_int_equal(buf[20], 0x12);
    rumor_codec_destroy(&c);
}

static void
test_bf16__hand_computed_rounding__nearest_even_and_saturating(void **state)
{
    (void)state;
    rumor_codec *c = s_codec("bf16");
    float x[5] = {1.0f + 0x1.0p-8f,             /* tie: stays at 1 (even) */
                  1.0f + 0x1.8p-8f,             /* above the tie: up */
                  1.0f + 0x1.0p-7f + 0x1.0p-8f, /* tie: up to even */
                  FLT_MAX,
                  -FLT_MAX};
    float q[5];
    uint8_t buf[64];
    size_t len = 0;
    assert_int_equal(rumor_codec_encode(c, x, 5, 0, 0, buf, 64, &len, q),
                     RUMOR_OK);
    assert_true(q[0] == 1.0f);
    assert_true(q[1] == 1.0f + 0x1.0p-7f);
    assert_true(q[2] == 1.0f + 0x1.0p-6f);
    assert_true(q[3] == compress_u2f(0x7f7f0000u));
    assert_true(q[4] == -compress_u2f(0x7f7f0000u));
    rumor_codec_destroy(&c);
}

static void
s_golden_name(const char *spec, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; spec[i] && j + 5 < cap; i++) {
        char ch = spec[i];
        out[j++] =
            (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ? ch : '_';
    }
    out[j] = '\0';
}

static void
test_golden__every_codec__bytes_match_known_answer_files(void **state)
{
    (void)state;
    bool regen = getenv("RUMOR_COMPRESS_REGEN") != NULL;
    const size_t n = 96;
    float *x = s_data(n, 2024);
    /* Twice: the fast paths and the plain-C paths a CPU without AVX2 runs
     * must give the same bytes (regeneration uses the plain-C paths). */
    for (int simd = 0; simd < 3; simd++)
        for (size_t s = 0; s < SPEC_COUNT; s++) {
            if (compress_set_simd(simd) != simd)
                continue; /* a tier this CPU lacks */
            rumor_codec *c = s_codec(s_specs[s]);
            size_t len = 0;
            uint8_t *buf = s_encode(c, x, n, 0x5eed, 3, &len, NULL);
            char name[128], path[256];
            s_golden_name(s_specs[s], name, sizeof name);
            snprintf(path, sizeof path, "tests/data/compress/%s.exp", name);
            if (regen && simd == 0) {
                FILE *f = fopen(path, "w");
                assert_non_null(f);
                fprintf(f, "# %s, n=96, seed=0x5eed, counter=3\n", s_specs[s]);
                for (size_t i = 0; i < len; i++)
                    fprintf(f, "%02x%s", buf[i], i % 32 == 31 ? "\n" : "");
                fprintf(f, "\n");
                fclose(f);
            }
            FILE *f = fopen(path, "r");
            if (f == NULL)
                fail_msg(
                    "missing golden file %s (run from the repository root)",
                    path);
            char line[512];
            assert_non_null(fgets(line, sizeof line, f)); /* comment */
            size_t got = 0;
            int ch, hi = -1;
            uint8_t *want = malloc(len + 4096);
            while ((ch = fgetc(f)) != EOF) {
                int v = ch >= '0' && ch <= '9'   ? ch - '0'
                        : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                                 : -1;
                if (v < 0)
                    continue;
                if (hi < 0) {
                    hi = v;
                } else {
                    if (got < len + 4096)
                        want[got] = (uint8_t)(hi << 4 | v);
                    got++;
                    hi = -1;
                }
            }
            fclose(f);
            if (got != len || memcmp(want, buf, len) != 0)
                fail_msg("%s (%s paths): bytes differ from %s (format change?)",
                         s_specs[s],
                         simd ? "fast" : "plain-C",
                         path);
            free(want);
            free(buf);
            rumor_codec_destroy(&c);
        }
    free(x);
}

/* --- error bounds and unbiasedness ------------------------------------------
 */

static void
test_fp16_bf16__fast_paths__bit_equal_to_reference_incl_subnormals(void **state)
{
    (void)state;
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x);
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 3, 3);
    for (size_t i = 0; i < N; i++) {
        /* Every exponent from far below half subnormals to above 65504. */
        int e = (int)rumor_rng_below(&rng, 50) - 34;
        x[i] =
            ldexpf(1.0f + rumor_rng_uniform(&rng), e) * (i & 1 ? -1.0f : 1.0f);
    }
    x[0] = 65504.0f;
    x[1] = 65519.0f;
    x[2] = 0x1.0p-24f;
    x[3] = 0x1.0p-25f; /* tie to zero */
    x[4] = 0x1.8p-25f;
    x[5] = -0.0f;
    assert_true(compress_f32_to_f16(x, N, a));
    assert_true(compress_f32_to_f16_ref(x, N, b));
    assert_memory_equal(a, b, N * sizeof *a);
    for (size_t i = 0; i < N; i++) {
        float q = compress_f16_to_f32_ref(a[i]);
        float ax = fabsf(x[i]);
        if (ax > 65504.0f)
            assert_true(fabsf(q) == 65504.0f);
        else if (ax >= 0x1.0p-14f)
            assert_true(fabsf(q - x[i]) <= ax * 0x1.0p-11f);
        else
            assert_true(fabsf(q - x[i]) <= 0x1.0p-25f);
    }
    float y[8];
    compress_f16_to_f32(a, 8, y);
    for (size_t i = 0; i < 8; i++)
        assert_true(y[i] == compress_f16_to_f32_ref(a[i]));
    /* Large vectors take the non-temporal store paths: every alignment of
     * the output against the reference. */
    const size_t big = ((size_t)1 << 20) + 5;
    float *bx = s_data(big, 12), *by = malloc((big + 8) * sizeof *by);
    uint8_t *bytes = malloc(2 * big + 16);
    uint16_t *ref = malloc(big * sizeof *ref);
    assert_true(compress_f32_to_f16_ref(bx, big, ref));
    for (size_t off = 0; off < 3; off++) {
        assert_true(compress_f32_to_half_bytes(bx, big, false, bytes + off));
        for (size_t i = 0; i < big; i++)
            assert_int_equal(bytes[off + 2 * i] | bytes[off + 2 * i + 1] << 8,
                             ref[i]);
        assert_true(
            compress_half_bytes_to_f32(bytes + off, big, false, by + off));
        for (size_t i = 0; i < big; i += 1)
            assert_true(compress_f2u(by[off + i]) ==
                        compress_f2u(compress_f16_to_f32_ref(ref[i])));
    }
    /* bf16, same paths: against the reference rounding, and widening is
     * h << 16 exactly. */
    assert_true(compress_f32_to_bf16_ref(bx, big, ref));
    for (size_t off = 0; off < 3; off++) {
        assert_true(compress_f32_to_half_bytes(bx, big, true, bytes + off));
        for (size_t i = 0; i < big; i++)
            assert_int_equal(bytes[off + 2 * i] | bytes[off + 2 * i + 1] << 8,
                             ref[i]);
        assert_true(
            compress_half_bytes_to_f32(bytes + off, big, true, by + off));
        for (size_t i = 0; i < big; i++)
            assert_true(compress_f2u(by[off + i]) == (uint32_t)ref[i] << 16);
    }
    /* bf16 rounding ties, saturation and every exponent, 8 at a time
     * through the vector path; NaN/Inf anywhere is reported. */
    for (size_t i = 0; i < N; i++)
        x[i] = compress_u2f((uint32_t)rumor_rng_u32(&rng) & 0xff7fffffu);
    x[0] = 0x1.fffffep127f; /* rounds past the largest bf16: saturates */
    x[1] = -0x1.ff0000p127f;
    x[2] = compress_u2f(0x3f808000u); /* tie, even below: stays */
    x[3] = compress_u2f(0x3f818000u); /* tie, odd below: rounds up */
    assert_true(compress_f32_to_bf16_ref(x, N, b));
    assert_true(compress_f32_to_half_bytes(x, N, true, (uint8_t *)a));
    for (size_t i = 0; i < N; i++)
        assert_int_equal(((uint8_t *)a)[2 * i] | ((uint8_t *)a)[2 * i + 1] << 8,
                         b[i]);
    assert_int_equal(b[0], 0x7f7f);
    assert_int_equal(b[1], 0xff7f);
    assert_int_equal(b[2], 0x3f80);
    assert_int_equal(b[3], 0x3f82);
    x[40] = NAN;
    assert_false(compress_f32_to_half_bytes(x, N, true, (uint8_t *)a));
    x[40] = 1.0f;
    x[N - 1] = -INFINITY;
    assert_false(compress_f32_to_half_bytes(x, N, true, (uint8_t *)a));
    free(bx);
    free(by);
    free(bytes);
    free(ref);
    free(x);
    free(a);
    free(b);
}

/* Mean of T draws of decode(encode(x)) with counters 0..T-1 for a
 * stochastic codec; checks |mean - x| <= 5 sigma_max / sqrt(T) per value,
 * where sigma_max = step / 2 bounds the standard deviation of one draw
 * that rounds between two levels step apart (Popoviciu). With 64 values
 * the chance of a false alarm is below 64 * 6e-7. */
static void
s_check_unbiased(const char *spec,
                 const float *x,
                 size_t n,
                 double (*step)(const float *, size_t, size_t))
{
    enum { T = 4000 };
    rumor_codec *c = s_codec(spec);
    double *sum = calloc(n, sizeof *sum);
    float *q = malloc(n * sizeof *q);
    size_t bound = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &bound, &exact), RUMOR_OK);
    uint8_t *buf = malloc(bound);
    for (int t = 0; t < T; t++) {
        size_t len = 0;
        assert_int_equal(
            rumor_codec_encode(c, x, n, 11, (uint64_t)t, buf, bound, &len, q),
            RUMOR_OK);
        for (size_t i = 0; i < n; i++)
            sum[i] += q[i];
    }
    for (size_t i = 0; i < n; i++) {
        double mean = sum[i] / T;
        double tol = 5.0 * step(x, n, i) / 2.0 / sqrt((double)T) + 1e-7;
        if (fabs(mean - x[i]) > tol)
            fail_msg("%s: value %zu = %g, mean of %d draws %g, bound %g",
                     spec,
                     i,
                     (double)x[i],
                     T,
                     mean,
                     tol);
    }
    free(sum);
    free(q);
    free(buf);
    rumor_codec_destroy(&c);
}

static double
s_step_qsgd4_b16(const float *x, size_t n, size_t i)
{
    size_t b0 = i / 16 * 16;
    double sq = 0;
    for (size_t j = b0; j < b0 + 16 && j < n; j++)
        sq += (double)x[j] * x[j];
    return sqrt(sq) / 15.0;
}

static double
s_step_tern_b16(const float *x, size_t n, size_t i)
{
    size_t b0 = i / 16 * 16;
    double mx = 0;
    for (size_t j = b0; j < b0 + 16 && j < n; j++)
        mx = fmax(mx, fabs(x[j]));
    return mx;
}

static double
s_step_natural(const float *x, size_t n, size_t i)
{
    (void)n;
    if (fabsf(x[i]) < FLT_MIN) /* subnormal: 0 or 2^-126 */
        return FLT_MIN;
    int e = 0;
    frexp(fabs(x[i]), &e);
    return ldexp(1.0, e - 1); /* 2^(e+1) - 2^e with |x| in [2^e, 2^(e+1)) */
}

static double
s_step_randk(const float *x, size_t n, size_t i)
{
    (void)n;
    return 2.0 * 4.0 * fabs(x[i]); /* 0 or 4 x: spread 4 |x| */
}

static void
test_stochastic_quantizers__mean_of_draws__unbiased_within_5_sigma(void **state)
{
    (void)state;
    enum { N = 64 };
    float x[N];
    struct rumor_rng rng;
    rumor_rng_init(&rng, 5, 5);
    for (size_t i = 0; i < N; i++)
        x[i] = (float)rumor_rng_normal(&rng);
    x[3] = 0;
    x[9] = 1e-39f; /* subnormal: natural rounds to 0 or 2^-126 */
    s_check_unbiased("qsgd:bits=4,bucket=16", x, N, s_step_qsgd4_b16);
    s_check_unbiased("qsgd:bits=4,bucket=16,elias=1", x, N, s_step_qsgd4_b16);
    s_check_unbiased("terngrad:bucket=16", x, N, s_step_tern_b16);
    s_check_unbiased("natural", x, N, s_step_natural);
    s_check_unbiased("randk:k=16,scale=1", x, N, s_step_randk);
}

/* --- TernGrad's scaler sharing (share=1) ---------------------------------- */

#define TS_N 40 /* buckets of 16, 16 and 8 */

/* Payload bucket k's scaler (header, then one float32 per bucket). */
static float
s_payload_scaler(const uint8_t *buf, size_t k)
{
    return compress_get_f32(buf + RUMOR_COMPRESS_HEADER_BYTES + 4 * k);
}

/* With scalers agreed between nodes (each >= the bucket's own max, as the
 * max over nodes is), every decoded value is 0 or +-S of its bucket, the
 * payload carries S, and the mean of T draws is x within 5 sigma, sigma^2
 * = |x| (S - |x|) / T (value S with probability |x| / S). A value beyond
 * its scaler (clipped at another node's smaller one) goes to +-S. */
static void
test_terngrad_shared_scalers__unbiased_at_one_scale_per_bucket(void **state)
{
    (void)state;
    enum { T = 4000 };
    rumor_codec *c = s_codec("terngrad:bucket=16,share=1");
    float x[TS_N], S[3], q[TS_N];
    double sum[TS_N] = {0};
    struct rumor_rng rng;
    rumor_rng_init(&rng, 8, 8);
    for (size_t i = 0; i < TS_N; i++)
        x[i] = (float)rumor_rng_normal(&rng);
    assert_int_equal(rumor_codec_scaler_count(c, TS_N), 3);
    assert_int_equal(rumor_codec_scalers(c, x, TS_N, S), RUMOR_OK);
    S[0] *= 1.5f; /* another node's larger gradients */
    S[1] *= 3.0f;
    uint8_t buf[128];
    size_t len = 0;
    for (uint64_t t = 0; t < T; t++) {
        assert_int_equal(rumor_codec_encode_shared(c,
                                                   x,
                                                   TS_N,
                                                   S,
                                                   11,
                                                   t,
                                                   buf,
                                                   sizeof buf,
                                                   &len,
                                                   q),
                         RUMOR_OK);
        for (size_t i = 0; i < TS_N; i++) {
            float s = S[i / 16];
            assert_true(q[i] == 0.0f || q[i] == copysignf(s, x[i]));
            sum[i] += q[i];
        }
    }
    for (size_t k = 0; k < 3; k++)
        assert_true(s_payload_scaler(buf, k) == S[k]);
    for (size_t i = 0; i < TS_N; i++) {
        double a = fabs(x[i]), s = S[i / 16];
        double tol = 5.0 * sqrt(a * (s - a) / T) + 1e-7;
        if (fabs(sum[i] / T - x[i]) > tol)
            fail_msg("value %zu = %g: mean of %d draws %g, bound %g",
                     i,
                     (double)x[i],
                     T,
                     sum[i] / T,
                     tol);
    }
    S[2] = fabsf(x[33]) / 2; /* bucket 2 clipped below |x[33]| */
    assert_int_equal(rumor_codec_encode_shared(c,
                                               x,
                                               TS_N,
                                               S,
                                               11,
                                               0,
                                               buf,
                                               sizeof buf,
                                               &len,
                                               q),
                     RUMOR_OK);
    assert_true(q[33] == copysignf(S[2], x[33]));
    rumor_codec_destroy(&c);
}

/* sum over x in pieces of 16384 values (each from 0, in order; the
 * pieces in order), of (x - mean)^2 when sq: the clip's documented order. */
static double
s_piece_sum(const float *x, size_t n, bool sq, double mean)
{
    double total = 0;
    for (size_t at = 0; at < n; at += 16384) {
        double piece = 0;
        for (size_t i = at; i < n && i < at + 16384; i++)
            piece += sq ? ((double)x[i] - mean) * ((double)x[i] - mean) : x[i];
        total += piece;
    }
    return total;
}

/* TernGrad's clip threshold C sigma on a vector of several pieces (so a
 * device can repeat it, docs/gossip.md): one bucket holding a value far
 * past C sigma, so its scaler is the threshold itself, bit for bit. */
static void
test_terngrad_clip__sigma_summed_in_pieces__exact_threshold(void **state)
{
    (void)state;
    const size_t n = 3 * 16384 + 1001;
    float *x = s_data(n, 31), S[1];
    x[n / 2] = 1e4f;
    rumor_codec *c = s_codec("terngrad:bucket=100000,clip=2,share=1");
    double mean = s_piece_sum(x, n, false, 0) / (double)n;
    float t = (float)(2.0 * sqrt(s_piece_sum(x, n, true, mean) / (double)n));
    assert_int_equal(rumor_codec_scalers(c, x, n, S), RUMOR_OK);
    assert_true(t < 1e4f);
    assert_true(S[0] == t);
    rumor_codec_destroy(&c);
    free(x);
}

/* A node's own scalers are what its own encode writes: the bucket's max
 * |x|, after TernGrad's clip at C sigma (computed here in double); the
 * share=1 codec alone writes the bytes of the codec without it. */
static void
test_terngrad_scalers__own_encode_scale_with_and_without_clip(void **state)
{
    (void)state;
    static const char *const specs[][2] = {
        {"terngrad:bucket=16,share=1", "terngrad:bucket=16"},
        {"terngrad:bucket=16,clip=1.5,share=1", "terngrad:bucket=16,clip=1.5"},
    };
    float *x = s_data(TS_N, 5), S[3];
    for (size_t r = 0; r < 2; r++) {
        rumor_codec *c = s_codec(specs[r][0]), *plain = s_codec(specs[r][1]);
        double mean = 0, dev = 0, t = INFINITY;
        for (size_t i = 0; i < TS_N; i++)
            mean += x[i] / (double)TS_N;
        for (size_t i = 0; i < TS_N; i++)
            dev += (x[i] - mean) * (x[i] - mean) / TS_N;
        t = r == 1 ? 1.5 * sqrt(dev) : t;
        assert_int_equal(rumor_codec_scalers(c, x, TS_N, S), RUMOR_OK);
        size_t len = 0, len2 = 0;
        uint8_t *own = s_encode(c, x, TS_N, 3, 4, &len, NULL);
        uint8_t *old = s_encode(plain, x, TS_N, 3, 4, &len2, NULL);
        assert_int_equal(len, len2);
        assert_memory_equal(own, old, len);
        bool clipped = false;
        for (size_t k = 0; k < 3; k++) {
            double m = 0;
            for (size_t i = 16 * k; i < TS_N && i < 16 * k + 16; i++) {
                m = fmax(m, fmin(fabs(x[i]), t));
                clipped |= fabs(x[i]) > t;
            }
            assert_true(S[k] == s_payload_scaler(own, k));
            assert_true(fabs(S[k] - m) <= 1e-6 * m);
        }
        assert_true(clipped == (r == 1)); /* the clip bites */
        free(own);
        free(old);
        rumor_codec_destroy(&c);
        rumor_codec_destroy(&plain);
    }
    free(x);
}

/* The shared path (no fused kernel) gives the same bytes on every tier,
 * over several draw windows and a last partial bucket. */
static void
test_terngrad_shared_scalers__same_bytes_on_every_tier(void **state)
{
    (void)state;
    const size_t n = 3 * 4096 + 1003;
    rumor_codec *c = s_codec("terngrad:share=1");
    float *x = s_data(n, 78);
    size_t ns = rumor_codec_scaler_count(c, n), bound = 0, len0 = 0;
    bool exact = false;
    float *S = malloc(ns * sizeof *S);
    assert_int_equal(rumor_codec_scalers(c, x, n, S), RUMOR_OK);
    for (size_t k = 0; k < ns; k += 2)
        S[k] *= 1.25f;
    assert_int_equal(rumor_codec_encoded_size(c, n, &bound, &exact), RUMOR_OK);
    uint8_t *plain = malloc(bound), *fast = malloc(bound);
    compress_set_simd(0);
    assert_int_equal(
        rumor_codec_encode_shared(c, x, n, S, 9, 4, plain, bound, &len0, NULL),
        RUMOR_OK);
    for (int simd = 1; simd < 3; simd++) {
        if (compress_set_simd(simd) != simd)
            continue; /* a tier this CPU lacks */
        size_t len = 0;
        assert_int_equal(rumor_codec_encode_shared(c,
                                                   x,
                                                   n,
                                                   S,
                                                   9,
                                                   4,
                                                   fast,
                                                   bound,
                                                   &len,
                                                   NULL),
                         RUMOR_OK);
        assert_int_equal(len, len0);
        if (memcmp(fast, plain, len) != 0)
            fail_msg("tier %d bytes differ from plain C", simd);
    }
    compress_set_simd(2);
    free(plain);
    free(fast);
    free(S);
    free(x);
    rumor_codec_destroy(&c);
}

/* Refusals: no scalers without share=1, bad scalers, NaN input. */
static void
test_terngrad_shared_scalers__refusals(void **state)
{
    (void)state;
    rumor_codec *plain = s_codec("terngrad:bucket=16");
    rumor_codec *c = s_codec("terngrad:bucket=16,share=1");
    float x[TS_N] = {1.0f}, S[3] = {1.0f, 1.0f, 1.0f};
    uint8_t buf[128];
    size_t len = 0;
    assert_int_equal(rumor_codec_scaler_count(plain, TS_N), 0);
    assert_int_equal(rumor_codec_scalers(plain, x, TS_N, S), RUMOR_EINVAL);
    assert_int_equal(rumor_codec_encode_shared(plain,
                                               x,
                                               TS_N,
                                               S,
                                               1,
                                               1,
                                               buf,
                                               sizeof buf,
                                               &len,
                                               NULL),
                     RUMOR_EINVAL);
    S[1] = -1.0f;
    assert_int_equal(rumor_codec_encode_shared(c,
                                               x,
                                               TS_N,
                                               S,
                                               1,
                                               1,
                                               buf,
                                               sizeof buf,
                                               &len,
                                               NULL),
                     RUMOR_EINVAL);
    S[1] = NAN;
    assert_int_equal(rumor_codec_encode_shared(c,
                                               x,
                                               TS_N,
                                               S,
                                               1,
                                               1,
                                               buf,
                                               sizeof buf,
                                               &len,
                                               NULL),
                     RUMOR_EINVAL);
    S[1] = 1.0f;
    x[5] = NAN;
    assert_int_equal(rumor_codec_encode_shared(c,
                                               x,
                                               TS_N,
                                               S,
                                               1,
                                               1,
                                               buf,
                                               sizeof buf,
                                               &len,
                                               NULL),
                     RUMOR_ENUMERIC);
    assert_int_equal(rumor_codec_scalers(c, x, TS_N, S), RUMOR_ENUMERIC);
    rumor_codec_destroy(&c);
    rumor_codec_destroy(&plain);
}

static void
test_quantizers__one_draw__within_one_level_of_input(void **state)
{
    (void)state;
    const size_t n = 5000;
    float *x = s_data(n, 31), *q = malloc(n * sizeof *q);
    struct {
        const char *spec;
        double (*step)(const float *, size_t, size_t);
    } rows[] = {{"qsgd:bits=4,bucket=16", s_step_qsgd4_b16},
                {"terngrad:bucket=16", s_step_tern_b16},
                {"natural", s_step_natural}};
    for (size_t r = 0; r < 3; r++) {
        rumor_codec *c = s_codec(rows[r].spec);
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, 1, 1, &len, q);
        for (size_t i = 0; i < n; i++) {
            double err = fabs((double)q[i] - x[i]);
            double step = rows[r].step(x, n, i);
            if (err > step * (1 + 1e-6) + 1e-38)
                fail_msg("%s: |q - x| = %g > step %g at %zu",
                         rows[r].spec,
                         err,
                         step,
                         i);
            assert_true(signbit(q[i]) == signbit(x[i]) || q[i] == 0);
        }
        free(buf);
        rumor_codec_destroy(&c);
    }
    free(x);
    free(q);
}

static void
test_fp8_fp4__values_in_range__within_half_a_step(void **state)
{
    (void)state;
    const size_t n = 8000;
    float *x = s_data(n, 41), *q = malloc(n * sizeof *q);
    const char *specs[] = {"fp8:bias=real", "fp4:bias=real", "fp8", "fp4"};
    const int M[] = {5, 2, 5, 2}, E[] = {2, 1, 2, 1};
    for (int s = 0; s < 4; s++) {
        rumor_codec *c = s_codec(specs[s]);
        size_t len = 0;
        uint8_t *buf = s_encode(c, x, n, 1, 1, &len, q);
        /* b = k + log2 f: f after the header when p1 = 1, else 1. */
        int b = (int32_t)core_get_u32(buf + 8);
        double f = buf[3] ? (double)compress_get_f32(buf + 12) : 1.0;
        assert_int_equal(buf[3], s < 2 ? 1 : 0);
        /* Largest magnitude: (2 - 2^-M) 2^(2^E - 1 + b). */
        double top = (2.0 - ldexp(1, -M[s])) * ldexp(f, (1 << E[s]) - 1 + b);
        for (size_t i = 0; i < n; i++) {
            double a = fabs((double)x[i]), err = fabs((double)q[i] - x[i]);
            if (a >= top) {
                assert_true(fabs((double)q[i]) == (float)top);
                continue;
            }
            int e = 0;
            frexp(a / f, &e);
            int ex = e - 1 - b; /* exponent relative to the bias */
            double step = ldexp(f, (ex < 1 ? 1 : ex) - M[s] + b);
            if (err > step / 2 * (1 + 1e-6))
                fail_msg("%s: x=%g q=%g err %g > half step %g",
                         specs[s],
                         (double)x[i],
                         (double)q[i],
                         err,
                         step / 2);
        }
        free(buf);
        rumor_codec_destroy(&c);
    }
    free(x);
    free(q);
}

/* The chosen bias must give the smallest L2 error among its neighbours
 * (n <= 16384: the encoder's sample is the whole vector). */
static void
test_fp8__exponent_bias__minimises_l2_error(void **state)
{
    (void)state;
    const size_t n = 4096;
    float *x = s_data(n, 51), *q = malloc(n * sizeof *q);
    rumor_codec *c = s_codec("fp8");
    size_t len = 0;
    uint8_t *buf = s_encode(c, x, n, 1, 1, &len, q);
    int b = (int32_t)core_get_u32(buf + 8);
    double best = 0;
    for (size_t i = 0; i < n; i++)
        best += ((double)q[i] - x[i]) * ((double)q[i] - x[i]);
    for (int d = -3; d <= 3; d++) {
        if (d == 0)
            continue;
        /* Nearest representable value under bias b + d, by search. */
        double err = 0;
        float val[256];
        for (int sym = 0; sym < 256; sym++) {
            int cc = sym & 127, Ee = cc >> 5, m = cc & 31;
            double mag = Ee == 0 ? ldexp(m, -4) : ldexp(32 + m, Ee - 5);
            val[sym] = (float)ldexp(sym & 128 ? -mag : mag, b + d);
        }
        for (size_t i = 0; i < n; i++) {
            double e2 = INFINITY;
            for (int sym = 0; sym < 256; sym++) {
                double dd = (double)val[sym] - x[i];
                e2 = fmin(e2, dd * dd);
            }
            err += e2;
        }
        assert_true(best <= err * (1 + 1e-9));
    }
    free(buf);
    free(x);
    free(q);
    rumor_codec_destroy(&c);
}

/* --- sparsifiers
 * --------------------------------------------------------------- */

static void
s_check_topk(const float *x, size_t n, size_t k)
{
    uint32_t *a = malloc((k ? k : 1) * sizeof *a);
    uint32_t *b = malloc((k ? k : 1) * sizeof *b);
    float *v = malloc((k ? k : 1) * sizeof *v);
    assert_int_equal(compress_topk_select(x, n, k, a, v), RUMOR_OK);
    assert_int_equal(compress_topk_select_ref(x, n, k, b), RUMOR_OK);
    for (size_t i = 0; i < k; i++) {
        if (a[i] != b[i])
            fail_msg("top-k n=%zu k=%zu: index %zu is %u, reference %u",
                     n,
                     k,
                     i,
                     a[i],
                     b[i]);
        assert_true(compress_f2u(v[i]) == compress_f2u(x[a[i]]));
    }
    free(v);
    free(a);
    free(b);
}

static void
test_topk__random_ties_zeros_denormals__equals_sort_reference(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 10, 1000, 70000, 300000};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t];
        float *x = s_data(n, 60 + t);
        float *ties = malloc(n * sizeof *ties);
        float *zeros = calloc(n, sizeof *zeros);
        float *den = malloc(n * sizeof *den);
        struct rumor_rng rng;
        rumor_rng_init(&rng, 61, t);
        for (size_t i = 0; i < n; i++) {
            /* Few distinct magnitudes: ties at every threshold. */
            ties[i] = (float)(rumor_rng_below(&rng, 7)) *
                      (rumor_rng_below(&rng, 2) ? -1.0f : 1.0f);
            den[i] = compress_u2f(rumor_rng_below(&rng, 1000)) *
                     (i & 1 ? -1.0f : 1.0f);
            if (i % 101 == 0)
                zeros[i] = -1.0f;
        }
        const float *sets[] = {x, ties, zeros, den};
        size_t ks[] = {1, n / 100, n / 10, n / 2, n - 1, n};
        for (size_t s = 0; s < 4; s++)
            for (size_t j = 0; j < 6; j++)
                s_check_topk(sets[s], n, ks[j]);
        free(x);
        free(ties);
        free(zeros);
        free(den);
    }
}

/* The fast path of the top-k (sample, threshold scan, candidate select)
 * on each tier this CPU has, plain C included, against the sort
 * reference: distinct values; magnitudes on a 1/64 grid (a hundred ties
 * at the threshold among the candidates); and two vectors that mislead the
 * sample (large values only outside the runs it reads, or only in them:
 * far too many candidates, or too few), so the exact fallbacks run too. */
static void
test_topk__every_simd_tier__equals_sort_reference(void **state)
{
    (void)state;
    const size_t n = 300007;
    float *sets[4] = {s_data(n, 90), NULL, NULL, NULL};
    for (size_t s = 1; s < 4; s++)
        sets[s] = malloc(n * sizeof *sets[s]);
    /* The values a sample of 256 runs of 256, spread evenly (topk.c),
     * reads. */
    bool *sampled = calloc(n, sizeof *sampled);
    for (size_t b = 0; b < 256; b++)
        for (size_t j = 0; j < 256; j++)
            sampled[b * (n - 256) / 255 + j] = true;
    for (size_t i = 0; i < n; i++) {
        float g = sets[0][i];
        sets[1][i] = roundf(g * 64.0f) / 64.0f;
        sets[2][i] = sampled[i] ? g : g * 8.0f;
        sets[3][i] = sampled[i] ? g * 8.0f : g;
    }
    free(sampled);
    const size_t ks[] = {1, n / 100, n / 8};
    uint32_t *want = malloc(n / 8 * sizeof *want);
    uint32_t *got = malloc(n / 8 * sizeof *got);
    float *vals = malloc(n / 8 * sizeof *vals);
    for (size_t s = 0; s < 4; s++)
        for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
            size_t k = ks[j];
            assert_int_equal(compress_topk_select_ref(sets[s], n, k, want),
                             RUMOR_OK);
            for (int level = 0; level <= 2; level++) {
                if (compress_set_simd(level) != level)
                    continue;
                assert_int_equal(compress_topk_select(sets[s], n, k, got, vals),
                                 RUMOR_OK);
                assert_memory_equal(got, want, k * sizeof *got);
                for (size_t i = 0; i < k; i++)
                    assert_true(compress_f2u(vals[i]) ==
                                compress_f2u(sets[s][got[i]]));
            }
        }
    compress_set_simd(2);
    for (size_t s = 0; s < 4; s++)
        free(sets[s]);
    free(want);
    free(got);
    free(vals);
}

static void
test_topk_codec__kept_values__largest_exact_and_rest_zero(void **state)
{
    (void)state;
    const size_t n = 20000, k = 200;
    float *x = s_data(n, 70), *y = malloc(n * sizeof *y);
    rumor_codec *c = s_codec("topk:ratio=0.01");
    size_t len = 0;
    uint8_t *buf = s_encode(c, x, n, 1, 1, &len, NULL);
    assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
    uint32_t idx[200];
    assert_int_equal(compress_topk_select_ref(x, n, k, idx), RUMOR_OK);
    size_t at = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (at < k && idx[at] == i) {
            assert_true(y[i] == x[i]);
            at++;
            kept++;
        } else {
            assert_true(y[i] == 0.0f);
        }
    }
    assert_int_equal(kept, k);
    /* Rice-coded gaps: well under 32 bits an index. */
    assert_true(len < RUMOR_COMPRESS_HEADER_BYTES * 2 + 4 + k * 12 / 8 + 4 * k);
    free(buf);
    free(x);
    free(y);
    rumor_codec_destroy(&c);
}

static void
test_randk__indices_from_seed__no_index_bytes_one_per_block(void **state)
{
    (void)state;
    const size_t n = 1003, k = 10;
    float *x = s_data(n, 71), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f + (float)i; /* all nonzero */
    rumor_codec *c = s_codec("randk:k=10");
    size_t len = 0;
    uint8_t *buf = s_encode(c, x, n, 9, 9, &len, NULL);
    assert_int_equal(len, 12 + 16 + 12 + 4 * k);
    assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
    for (size_t j = 0; j < k; j++) {
        size_t lo = j * n / k, hi = (j + 1) * n / k, hits = 0;
        for (size_t i = lo; i < hi; i++)
            if (y[i] != 0) {
                assert_true(y[i] == x[i]);
                hits++;
            }
        assert_int_equal(hits, 1);
    }
    free(buf);
    free(x);
    free(y);
    rumor_codec_destroy(&c);
}

static void
test_threshold_and_dgc__selection__counts_as_specified(void **state)
{
    (void)state;
    const size_t n = 100000;
    float *x = s_data(n, 72), *y = malloc(n * sizeof *y);
    rumor_codec *c = s_codec("threshold:t=2");
    size_t len = 0;
    uint8_t *buf = s_encode(c, x, n, 1, 1, &len, y);
    for (size_t i = 0; i < n; i++)
        assert_true(y[i] == (fabsf(x[i]) >= 2.0f ? x[i] : 0.0f));
    free(buf);
    rumor_codec_destroy(&c);
    c = s_codec("dgc:ratio=0.01");
    for (uint64_t ctr = 0; ctr < 5; ctr++) {
        buf = s_encode(c, x, n, 1, ctr, &len, y);
        size_t count = core_get_u32(buf + 8), nz = 0;
        assert_true(count >= 700 && count <= 1300);
        float smallest = INFINITY;
        for (size_t i = 0; i < n; i++)
            if (y[i] != 0) {
                nz++;
                smallest = fminf(smallest, fabsf(y[i]));
            }
        assert_true(nz <= count);
        /* The kept values are the largest: nothing dropped exceeds them. */
        for (size_t i = 0; i < n; i++)
            if (y[i] == 0)
                assert_true(fabsf(x[i]) <= smallest);
        free(buf);
    }
    rumor_codec_destroy(&c);
    free(x);
    free(y);
}

static void
test_composition__topk_then_qsgd__quantized_values_at_topk_indices(void **state)
{
    (void)state;
    const size_t n = 10000;
    float *x = s_data(n, 73), *y = malloc(n * sizeof *y);
    rumor_codec *c = s_codec("topk:ratio=0.01|qsgd:bits=4,bucket=512");
    size_t len = 0, plain_len = 0;
    uint8_t *buf = s_encode(c, x, n, 1, 1, &len, NULL);
    assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
    uint32_t idx[100];
    assert_int_equal(compress_topk_select_ref(x, n, 100, idx), RUMOR_OK);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (at < 100 && idx[at] == i) {
            at++;
            assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) + 1e-6f);
        } else {
            assert_true(y[i] == 0.0f);
        }
    }
    rumor_codec *plain = s_codec("topk:ratio=0.01");
    uint8_t *pbuf = s_encode(plain, x, n, 1, 1, &plain_len, NULL);
    assert_true(len < plain_len); /* 5 bits instead of 32 per value */
    free(pbuf);
    free(buf);
    free(x);
    free(y);
    rumor_codec_destroy(&c);
    rumor_codec_destroy(&plain);
}

/* --- kernels against references
 * ------------------------------------------------ */

/* Byte j of the rounding byte stream (seed, stream), straight from
 * core's Philox and the layout's definition: group j / 256, offset o = j
 * % 256 is byte o % 4 of word o / 64 of block 16 (j / 256) + (o / 4) %
 * 16. */
static uint8_t
s_philox_byte(uint64_t seed, uint64_t stream, uint64_t j)
{
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint64_t o = j % 256, block = 16 * (j / 256) + (o / 4) % 16;
    const uint32_t ctr[4] = {(uint32_t)block,
                             (uint32_t)(block >> 32),
                             (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    uint32_t w[4];
    rumor_philox4x32_10(ctr, key, w);
    return (uint8_t)(w[o / 64] >> (8 * (o % 4)));
}

/* The byte stream: vector generator and reference equal at aligned and
 * unaligned starts, lengths with partial groups at both ends, a start
 * near 2^63 (the low bytes' region); both as defined. */
static void
s_stream_bytes__fast_and_reference__as_defined_once(void)
{
    enum { N = 4096 + 300 };
    static uint8_t a[N], b[N];
    static const uint64_t firsts[] = {0, 16, 256 * 7, 1000, (1ull << 63) + 48};
    static const size_t lens[] = {N, 256, 255, 17, 2 * 256 + 1};
    for (size_t f = 0; f < 5; f++)
        for (size_t l = 0; l < 5; l++) {
            memset(a, 0, sizeof a);
            memset(b, 1, sizeof b);
            compress_stream_bytes(0x0123456789abcdefull,
                                  77,
                                  firsts[f],
                                  a,
                                  lens[l]);
            compress_stream_bytes_ref(0x0123456789abcdefull,
                                      77,
                                      firsts[f],
                                      b,
                                      lens[l]);
            assert_memory_equal(a, b, lens[l]);
            for (size_t i = 0; i < lens[l]; i += 13)
                assert_int_equal(
                    a[i],
                    s_philox_byte(0x0123456789abcdefull, 77, firsts[f] + i));
        }
}

/* The rounding draws: fast path and reference equal, both as defined (a
 * high byte per draw, a low byte per 16 from 2^63 on), across pieces and
 * at a first near 2^36. */
static void
s_draws__fast_and_reference__as_defined_once(void)
{
    enum { N = 4096 + 80 };
    static uint16_t a[N], b[N];
    static uint8_t hi[N], lo[N / 16 + 1];
    static const uint64_t firsts[] = {0, 16, 4096 * 3, 0xfffffffcull * 16};
    for (size_t f = 0; f < 4; f++) {
        compress_draw_bytes(0x0123456789abcdefull, 77, firsts[f], hi, lo, N);
        compress_join_draws(hi, lo, 0, N, a);
        compress_draws_ref(0x0123456789abcdefull, 77, firsts[f], b, N);
        assert_memory_equal(a, b, sizeof a);
        for (size_t i = 0; i < N; i += 37) {
            uint64_t j = firsts[f] + i;
            uint8_t h = s_philox_byte(0x0123456789abcdefull, 77, j);
            uint8_t l =
                s_philox_byte(0x0123456789abcdefull, 77, (1ull << 63) + j / 16);
            assert_int_equal(a[i], h << 8 | l);
        }
        /* Joined from a phase: the run of 16 hi[0] sits in. */
        for (size_t phase = 1; phase < 16; phase += 7) {
            compress_join_draws(hi + phase, lo, phase, N - 16, a);
            assert_memory_equal(a, b + phase, (N - 16) * sizeof *a);
        }
    }
}

/* On every fast tier this CPU has (AVX2, AVX-512). */
static void
test_stream_bytes__vector_generator__equals_reference_and_definition(
    void **state)
{
    (void)state;
    for (int level = 1; level <= 2; level++)
        if (compress_set_simd(level) == level) {
            s_stream_bytes__fast_and_reference__as_defined_once();
            s_draws__fast_and_reference__as_defined_once();
        }
    compress_set_simd(2);
}

static void
s_kernels__finite_select_sign__equal_references_once(void)
{
    const size_t n = 10007;
    float *x = s_data(n, 80);
    assert_true(compress_all_finite(x, n));
    for (size_t at = 0; at < n; at += 997) {
        float old = x[at];
        x[at] = at % 2 ? NAN : -INFINITY;
        assert_false(compress_all_finite(x, n));
        assert_false(compress_all_finite_ref(x, n));
        x[at] = old;
    }
    uint32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    size_t ca = compress_select_ge(x, n, 1.5f, a, NULL, n, NULL), cb = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) >= 1.5f)
            b[cb++] = (uint32_t)i;
    assert_int_equal(ca, cb);
    assert_memory_equal(a, b, ca * sizeof *a);
    /* A small cap: the count is still exact, the first cap are written. */
    uint32_t few[37], fbits[37];
    assert_int_equal(compress_select_ge(x, n, 1.5f, few, fbits, 37, NULL), cb);
    assert_memory_equal(few, b, sizeof few);
    for (size_t i = 0; i < 37; i++)
        assert_int_equal(fbits[i], compress_f2u(x[b[i]]));
    assert_int_equal(compress_select_ge(x, n, 1.5f, NULL, NULL, 0, NULL), cb);
    bool finite = false;
    compress_select_ge(x, n, 1.5f, NULL, NULL, 0, &finite);
    assert_true(finite);
    x[n - 2] = INFINITY;
    compress_select_ge(x, n, 1.5f, NULL, NULL, 0, &finite);
    assert_false(finite);
    x[n - 2] = 0;
    uint8_t ba[2000], bb[2000];
    for (size_t m = 0; m <= 520; m += 13) {
        memset(ba, 0xff, sizeof ba);
        double sa = compress_sign_bucket(x + 3, m, ba);
        double sb = compress_sign_bucket_ref(x + 3, m, bb);
        assert_true(sa == sb); /* same summation order: bit-exact */
        assert_memory_equal(ba, bb, (m + 7) / 8);
    }
    free(a);
    free(b);
    free(x);
}

/* The threshold scan on a long vector against a plain loop: every cap
 * from none to more than enough, uniform and skewed data, the top key. */
static void
s_select_ge__long_vectors__equal_plain_loop_once(void)
{
    const size_t n = 300007;
    float *x = s_data(n, 82);
    uint32_t *want = malloc(n * sizeof *want), *wbits = malloc(n * 4);
    uint32_t *got = malloc(n * sizeof *got), *gbits = malloc(n * 4);
    for (int skew = 0; skew < 2; skew++) {
        for (size_t i = 0; skew && i < n / 4; i++)
            x[i] *= 4.0f; /* most hits in the first quarter */
        size_t count = 0;
        uint32_t top = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t key = compress_f2u(x[i]) & 0x7fffffffu;
            top = key > top ? key : top;
            if (fabsf(x[i]) >= 1.5f) {
                want[count] = (uint32_t)i;
                wbits[count++] = compress_f2u(x[i]);
            }
        }
        const size_t caps[] = {0, 37, count / 2, count - 1, count, count + 99};
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            uint32_t gtop = 0;
            memset(got, 0xff, n * sizeof *got);
            size_t cap = caps[c], k = cap < count ? cap : count;
            assert_int_equal(
                compress_select_ge_top(x, n, 1.5f, got, gbits, cap, &gtop),
                count);
            assert_int_equal(gtop, top);
            assert_memory_equal(got, want, k * sizeof *got);
            assert_memory_equal(gbits, wbits, k * sizeof *got);
            assert_int_equal(got[cap], UINT32_MAX); /* nothing past cap */
        }
    }
    /* Threshold 0: every value is a hit, so every chunk of the scan is
     * full of them. */
    for (size_t half = 0; half < 2; half++) {
        size_t cap = half ? n / 2 : n;
        uint32_t gtop = 0;
        assert_int_equal(
            compress_select_ge_top(x, n, 0.0f, got, gbits, cap, &gtop),
            n);
        for (size_t i = 0; i < cap; i++) {
            assert_int_equal(got[i], i);
            assert_int_equal(gbits[i], compress_f2u(x[i]));
        }
    }
    free(want);
    free(wbits);
    free(got);
    free(gbits);
    free(x);
}

/* On every fast tier this CPU has (AVX2, AVX-512). */
static void
test_kernels__finite_select_sign__equal_references(void **state)
{
    (void)state;
    for (int level = 1; level <= 2; level++)
        if (compress_set_simd(level) == level) {
            s_kernels__finite_select_sign__equal_references_once();
            s_select_ge__long_vectors__equal_plain_loop_once();
        }
    compress_set_simd(2);
}

/* compress_select_range on each tier (plain C included) against a plain
 * loop: ranges that take nothing, some keys, every key; caps from none to
 * more than enough; the output without values; in place. */
static void
s_select_range__caps_and_ranges__equal_plain_loop_once(void)
{
    const size_t m = 10007;
    float *x = s_data(m, 92);
    uint32_t *bits = malloc(m * 4), *tag = malloc(m * 4);
    uint32_t *want = malloc(m * 4), *wbits = malloc(m * 4);
    uint32_t *got = malloc((m + 1) * 4), *back = malloc(m * 4);
    float *gvals = malloc((m + 1) * sizeof *gvals);
    for (size_t i = 0; i < m; i++) {
        bits[i] = compress_f2u(x[i]);
        tag[i] = (uint32_t)i * 2654435761u;
    }
    uint32_t one = compress_f2u(1.0f), half = compress_f2u(0.5f);
    const uint32_t ranges[][2] = {
        {0, 0},                   /* nothing */
        {0, 0x80000000u},         /* every key */
        {one, 0x80000000u - one}, /* key >= 1.0: the top-k emit */
        {half, compress_f2u(1.5f) - half},
        {0, 0x00800000u}, /* zeros and denormals */
    };
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        uint32_t lo = ranges[r][0], span = ranges[r][1];
        size_t count = 0;
        for (size_t i = 0; i < m; i++)
            if ((bits[i] & 0x7fffffffu) - lo < span) {
                want[count] = tag[i];
                wbits[count++] = bits[i];
            }
        const size_t caps[] = {0, 1, 15, 16, 17, count / 2, count, m};
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            size_t cap = caps[c], k = cap < count ? cap : count;
            memset(got, 0xff, (m + 1) * 4);
            assert_int_equal(
                compress_select_range(bits, tag, m, lo, span, got, gvals, cap),
                count);
            assert_memory_equal(got, want, k * 4);
            assert_memory_equal(gvals, wbits, k * 4);
            assert_int_equal(got[cap], UINT32_MAX); /* nothing past cap */
            assert_int_equal(
                compress_select_range(bits, tag, m, lo, span, got, NULL, cap),
                count);
            assert_memory_equal(got, want, k * 4);
        }
        memcpy(back, bits, m * 4);
        assert_int_equal(
            compress_select_range(back, back, m, lo, span, back, NULL, m),
            count);
        assert_memory_equal(back, wbits, count * 4);
    }
    free(x);
    free(bits);
    free(tag);
    free(want);
    free(wbits);
    free(got);
    free(back);
    free(gvals);
}

static void
test_select_range__every_simd_tier__equals_plain_loop(void **state)
{
    (void)state;
    for (int level = 0; level <= 2; level++)
        if (compress_set_simd(level) == level)
            s_select_range__caps_and_ranges__equal_plain_loop_once();
    compress_set_simd(2);
}

static void
s_kernels__levels_pack_natural_sums__bit_equal_to_references_once(void)
{
    const size_t n = 4099;
    float *x = s_data(n, 81);
    uint16_t *r = malloc((n + 16) * sizeof *r);
    uint8_t *ca = malloc(n + 8), *cb = malloc(n + 8), *back = malloc(n + 8);
    uint8_t *hi = malloc(n + 16), lo[(4099 + 15) / 16];
    compress_draw_bytes(1, 2, 0, hi, lo, n);
    compress_join_draws(hi, lo, 0, n, r);
    for (unsigned b = 1; b <= 7; b++) {
        uint32_t s = (1u << b) - 1;
        float inv = (float)s / 3.0f;
        compress_levels(x, n, inv, s, b, r, ca);
        compress_levels_ref(x, n, inv, s, b, r, cb);
        assert_memory_equal(ca, cb, n);
        /* Pack and unpack 512 groups at width b + 1, with a tight end. */
        size_t groups = n / 8, bytes = groups * (b + 1);
        uint8_t *packed = malloc(bytes);
        compress_pack(ca, groups, b + 1, packed, packed + bytes);
        compress_unpack(packed, packed + bytes, groups, b + 1, back);
        assert_memory_equal(ca, back, groups * 8);
        /* Fused levels and packing: the same bytes. */
        uint8_t *fused = malloc(bytes);
        compress_levels_packed(x,
                               groups * 8,
                               inv,
                               s,
                               b,
                               r,
                               fused,
                               fused + bytes);
        assert_memory_equal(fused, packed, bytes);
        free(fused);
        /* Same bits as the generic bit writer. */
        uint8_t *ref = malloc(bytes + 8);
        struct core_bw w;
        core_bw_init(&w, ref, bytes + 8);
        for (size_t i = 0; i < groups * 8; i++)
            core_bw_put(&w, ca[i], b + 1);
        assert_int_equal(core_bw_finish(&w, ref), bytes);
        assert_memory_equal(packed, ref, bytes);
        float *ya = malloc(n * sizeof *ya), *yb = malloc(n * sizeof *yb);
        compress_dequant(ca, n, b, 0.25f, false, 1, ya);
        for (size_t i = 0; i < n; i++) {
            float q = (float)(ca[i] & s) * 0.25f;
            yb[i] = ca[i] >> b ? -q : q;
        }
        assert_memory_equal(ya, yb, n * sizeof *ya);
        free(ya);
        free(yb);
        free(ref);
        free(packed);
    }
    for (size_t m = 0; m < 200; m += 7)
        assert_true(compress_sumsq(x + 1, m) == compress_sumsq_ref(x + 1, m));
    assert_true(compress_sumsq(x, n) == compress_sumsq_ref(x, n));
    /* Largest magnitude, NaN/Inf showing through. */
    for (size_t m = 0; m < 300; m += 37) {
        uint32_t best = 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t key = compress_f2u(x[3 + i]) & 0x7fffffffu;
            best = key > best ? key : best;
        }
        assert_int_equal(compress_f2u(compress_maxabs(x + 3, m)), best);
    }
    float keep = x[200];
    x[200] = -INFINITY;
    assert_true(isinf(compress_maxabs(x, 300)));
    x[200] = NAN;
    assert_true(isnan(compress_maxabs(x, 300)));
    x[200] = keep;
    /* Sums float cannot hold well (overflow, below 2^-100) take the
     * double sum, on every path alike. */
    float big[200], tiny[200];
    for (size_t i = 0; i < 200; i++) {
        big[i] = x[i] * 3e19f;
        tiny[i] = x[i] * 1e-26f;
    }
    for (size_t m = 1; m <= 200; m += 67) {
        assert_true(compress_sumsq(big, m) == compress_sumsq_ref(big, m));
        assert_true(compress_sumsq(big, m) == compress_sumsq_wide(big, m));
        assert_true(compress_sumsq(tiny, m) == compress_sumsq_wide(tiny, m));
    }
    double wide = compress_sumsq_wide(x, n), fast = compress_sumsq(x, n);
    assert_true(fabs(fast - wide) <= 1e-5 * wide);
    size_t whole = n & ~(size_t)7;
    uint8_t sa[600], sb[600];
    compress_natural(x, whole, hi, lo, ca, sa);
    compress_natural_ref(x, whole, hi, lo, cb, sb);
    assert_memory_equal(ca, cb, whole);
    assert_memory_equal(sa, sb, whole / 8);
    float *ya = malloc(n * sizeof *ya);
    compress_sign_expand(sa, whole / 8, 2.0f, false, 1, ya);
    for (size_t i = 0; i < whole; i++)
        assert_true(ya[i] == (signbit(x[i]) ? -2.0f : 2.0f));
    free(ya);
    /* fp8 / fp4 symbols over many magnitudes, both formats, three biases,
     * including exact ties (k + 0.5 steps). */
    for (int f = 0; f < 2; f++) {
        unsigned M = f ? 2 : 5, E = f ? 1 : 2;
        for (int bias = -9; bias <= 9; bias += 9) {
            float s1 = ldexpf(1.0f, -bias / 2),
                  s2 = ldexpf(1.0f, -bias + bias / 2);
            for (size_t i = 0; i < n; i++)
                x[i] = ldexpf((float)(i % 97) + (i % 3 ? 0.5f : 0.37f),
                              (int)(i % 23) - 14 + bias) *
                       (i & 1 ? -1.0f : 1.0f);
            compress_fp8_symbols(x, n, s1, s2, M, E, ca);
            compress_fp8_symbols_ref(x, n, s1, s2, M, E, cb);
            assert_memory_equal(ca, cb, n);
        }
    }
    free(x);
    free(r);
    free(hi);
    free(ca);
    free(cb);
    free(back);
}

/* The fused bucket kernel against its reference: bucket lengths of whole
 * (512) and half (72) 16-value steps, every width, TernGrad, a zero bucket
 * (inv 0), with and without the decoded values, and a NaN (false); then
 * natural compression's decoder kernel. */
static void
s_quant_buckets_natural__fused__bit_equal_to_references_once(void)
{
    const size_t total = 3 * 512, ms[] = {64, 512, 72};
    float *x = s_data(total, 93);
    uint8_t *hi = malloc(total), lo[3 * 512 / 16];
    uint8_t *pa = malloc(2 * total), *pb = malloc(2 * total);
    uint8_t na[4 * 24], nb[4 * 24];
    float *aa = malloc(total * sizeof *aa), *ab = malloc(total * sizeof *ab);
    compress_draw_bytes(5, 6, 0, hi, lo, total);
    for (size_t i = 64; i < 128; i++)
        x[i] = 0; /* bucket 1 of the 64-value runs */
    for (size_t t = 0; t < 6; t++)
        for (unsigned b = 0; b <= 8; b++) {
            bool tern = b == 0; /* b = 0 stands for TernGrad */
            unsigned bb = tern ? 1 : b;
            size_t m = ms[t % 3], nbk = total / m < 24 ? total / m : 24;
            if (b == 8 && !compress_quant_buckets_wide(m))
                continue; /* 9-bit codes: the AVX-512 kernel only */
            size_t bytes = nbk * m / 8 * (bb + 1);
            struct compress_bucket_run run = {.x = x,
                                              .nbk = nbk,
                                              .m = m,
                                              .s = tern ? 1 : (1u << b) - 1,
                                              .b = bb,
                                              .tern = tern,
                                              .hi = hi,
                                              .lo = lo,
                                              .norms = na,
                                              .out = pa,
                                              .end = pa + bytes,
                                              .approx = t < 3 ? NULL : aa};
            memset(pa, 0xAA, 2 * total);
            memset(pb, 0x55, 2 * total);
            memset(aa, 0xAA, total * sizeof *aa);
            memset(ab, 0x55, total * sizeof *ab);
            assert_true(compress_quant_buckets(&run));
            run.norms = nb;
            run.out = pb;
            run.approx = t < 3 ? NULL : ab;
            assert_true(compress_quant_buckets_ref(&run));
            assert_memory_equal(na, nb, 4 * nbk);
            assert_memory_equal(pa, pb, bytes);
            if (t >= 3)
                assert_memory_equal(aa, ab, nbk * m * sizeof *aa);
        }
    /* Natural compression's decoder kernel, set and add, odd lengths. */
    uint8_t *expo = malloc(total);
    float *ya = malloc(total * sizeof *ya), *yb = malloc(total * sizeof *yb);
    for (size_t i = 0; i < total; i++) {
        expo[i] = (uint8_t)(hi[i] % 255);
        ya[i] = yb[i] = x[i];
    }
    for (size_t len = 0; len <= total; len += 203) {
        compress_natural_expand(expo, pa, len, true, 0.75f, ya);
        compress_natural_expand_ref(expo, pa, len, true, 0.75f, yb);
        assert_memory_equal(ya, yb, total * sizeof *ya);
        compress_natural_expand(expo, pa, len, false, 1, ya);
        compress_natural_expand_ref(expo, pa, len, false, 1, yb);
        assert_memory_equal(ya, yb, total * sizeof *ya);
    }
    free(expo);
    free(ya);
    free(yb);
    x[700] = NAN;
    struct compress_bucket_run bad = {.x = x,
                                      .nbk = 3,
                                      .m = 512,
                                      .s = 15,
                                      .b = 4,
                                      .hi = hi,
                                      .lo = lo,
                                      .norms = na,
                                      .out = pa,
                                      .end = pa + 960};
    assert_false(compress_quant_buckets(&bad));
    assert_false(compress_quant_buckets_ref(&bad));
    free(aa);
    free(ab);
    free(pa);
    free(pb);
    free(hi);
    free(x);
}

/* On every fast tier this CPU has (AVX2, AVX-512). */
static void
test_quant_buckets_natural__fused_kernels__bit_equal_to_references(void **state)
{
    (void)state;
    for (int level = 0; level <= 2; level++)
        if (compress_set_simd(level) == level)
            s_quant_buckets_natural__fused__bit_equal_to_references_once();
    compress_set_simd(2);
}

/* On every fast tier this CPU has (AVX2, AVX-512). */
static void
test_kernels__levels_pack_natural_sums__bit_equal_to_references(void **state)
{
    (void)state;
    for (int level = 1; level <= 2; level++)
        if (compress_set_simd(level) == level)
            s_kernels__levels_pack_natural_sums__bit_equal_to_references_once();
    compress_set_simd(2);
}

/* --- Huffman
 * ---------------------------------------------------------------------- */

static void
test_huffman__skewed_bytes__round_trip_near_entropy(void **state)
{
    (void)state;
    const size_t n = 200000;
    uint8_t *in = malloc(n), *back = malloc(n);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 90, 0);
    for (size_t i = 0; i < n; i++) /* geometric-ish over 40 symbols */
        in[i] = (uint8_t)(fabs(rumor_rng_normal(&rng)) * 8.0);
    size_t cap = rumor_huffman_bound(n), len = 0;
    uint8_t *out = malloc(cap);
    assert_int_equal(rumor_huffman_encode(in, n, out, cap, &len), RUMOR_OK);
    assert_int_equal(rumor_huffman_decode(out, len, back, n), RUMOR_OK);
    assert_memory_equal(in, back, n);
    uint64_t count[256];
    huffman_histogram(in, n, count);
    double bits = 0;
    for (int s = 0; s < 256; s++)
        if (count[s])
            bits -= (double)count[s] * log2((double)count[s] / (double)n);
    /* Huffman is within one bit per symbol of the entropy; for this
     * source it is within 3 %. */
    assert_true((double)(len - 140) * 8 <= bits * 1.03);
    assert_true((double)(len - 140) * 8 >= bits);
    /* One symbol and no symbol at all. */
    memset(in, 42, 1000);
    assert_int_equal(rumor_huffman_encode(in, 1000, out, cap, &len), RUMOR_OK);
    assert_int_equal(len, 128 + 12 + 4 * 32); /* 250 bits a stream */
    assert_int_equal(rumor_huffman_decode(out, len, back, 1000), RUMOR_OK);
    assert_memory_equal(in, back, 1000);
    assert_int_equal(rumor_huffman_encode(in, 0, out, cap, &len), RUMOR_OK);
    assert_int_equal(rumor_huffman_decode(out, len, back, 0), RUMOR_OK);
    free(in);
    free(back);
    free(out);
}

static void
test_huffman__length_tables__incomplete_or_oversubscribed_rejected(void **state)
{
    (void)state;
    uint8_t len[256] = {0};
    uint16_t table[1u << HUFFMAN_MAX_BITS];
    len[0] = 1;
    len[1] = 2;
    assert_int_equal(huffman_table(len, 256, table), RUMOR_EPROTO); /* 3/4 */
    len[2] = 2;
    assert_int_equal(huffman_table(len, 256, table), RUMOR_OK);
    len[3] = 2;
    assert_int_equal(huffman_table(len, 256, table), RUMOR_EPROTO); /* 5/4 */
    memset(len, 0, sizeof len);
    len[9] = 1;
    assert_int_equal(huffman_table(len, 256, table), RUMOR_OK); /* single */
    len[9] = 2;
    assert_int_equal(huffman_table(len, 256, table), RUMOR_EPROTO);
    /* Lengths of a code over rare symbols stay <= 12 and complete. */
    uint64_t count[256];
    for (int s = 0; s < 256; s++)
        count[s] = (uint64_t)1 << (s / 8);
    uint8_t got[256];
    huffman_lengths(count, 256, got);
    for (int s = 0; s < 256; s++)
        assert_true(got[s] >= 1 && got[s] <= HUFFMAN_MAX_BITS);
    assert_int_equal(huffman_table(got, 256, table), RUMOR_OK);
}

static void
test_fp8__gaussian__huffman_size_within_one_percent_of_entropy(void **state)
{
    (void)state;
    const size_t n = 1 << 18;
    float *x = malloc(n * sizeof *x);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 91, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rumor_rng_normal(&rng) * 1e-3f;
    rumor_codec *c = s_codec("fp8");
    size_t len = 0;
    float *q = malloc(n * sizeof *q);
    uint8_t *buf = s_encode(c, x, n, 1, 1, &len, q);
    /* The symbols, straight from the payload's Huffman stream. */
    uint8_t *sym = malloc(n);
    size_t off = buf[3] ? 16 : 12; /* header, then f when b is real */
    assert_int_equal(huffman_decode(buf + off, len - off, 256, sym, n),
                     RUMOR_OK);
    uint64_t count[256];
    huffman_histogram(sym, n, count);
    free(sym);
    double bits = 0;
    for (int s = 0; s < 256; s++)
        if (count[s])
            bits -= (double)count[s] * log2((double)count[s] / (double)n);
    double body = (double)(len - off - 140) * 8;
    assert_true(body <= bits * 1.01);
    free(buf);
    free(q);
    free(x);
    rumor_codec_destroy(&c);
}

/* --- error feedback
 * ------------------------------------------------------------------ */

static rumor_ef *
s_ef(const char *spec, size_t n)
{
    rumor_ef *ef = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    rumor_err rc = rumor_ef_new(spec, n, &ef, &diag);
    if (rc != RUMOR_OK)
        fail_msg("rumor_ef_new(%s): %s", spec, diag.msg);
    return ef;
}

static void
test_ef__topk_steps__sent_plus_error_equals_sum_of_gradients(void **state)
{
    (void)state;
    const size_t n = 2000, steps = 20;
    rumor_ef *ef = s_ef("ef", n);
    rumor_codec *c = s_codec("topk:ratio=0.02");
    double *total_g = calloc(n, sizeof *total_g);
    double *total_s = calloc(n, sizeof *total_s);
    float *sent = malloc(n * sizeof *sent);
    size_t cap = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    uint8_t *buf = malloc(cap);
    for (size_t t = 0; t < steps; t++) {
        float *g = s_data(n, 100 + t);
        size_t len = 0;
        assert_int_equal(
            rumor_ef_encode(ef, c, g, n, 1, t, buf, cap, &len, sent),
            RUMOR_OK);
        float *y = malloc(n * sizeof *y);
        assert_int_equal(rumor_codec_decode(c, buf, len, y, n), RUMOR_OK);
        assert_memory_equal(y, sent, n * sizeof *y);
        for (size_t i = 0; i < n; i++) {
            total_g[i] += g[i];
            total_s[i] += sent[i];
        }
        free(y);
        free(g);
    }
    size_t en = 0;
    const float *e = rumor_ef_error(ef, &en);
    assert_int_equal(en, n);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(total_s[i] + e[i] - total_g[i]) <= 1e-4);
    assert_int_equal(rumor_ef_steps(ef), steps);
    /* Misuse: wrong n, and a codec for a dgc memory. */
    size_t len = 0;
    assert_int_equal(
        rumor_ef_encode(ef, c, sent, n - 1, 0, 0, buf, cap, &len, NULL),
        RUMOR_EINVAL);
    assert_int_equal(
        rumor_ef_encode(ef, NULL, sent, n, 0, 0, buf, cap, &len, NULL),
        RUMOR_EINVAL);
    free(total_g);
    free(total_s);
    free(sent);
    free(buf);
    rumor_codec_destroy(&c);
    rumor_ef_destroy(&ef);
    assert_null(ef);
}

static void
test_ef_decay__one_step__matches_co3_recurrence(void **state)
{
    (void)state;
    const size_t n = 500;
    rumor_ef *ef = s_ef("ef-decay:gamma=0.5", n);
    rumor_codec *c = s_codec("sign:bucket=50");
    float *m = calloc(n, sizeof *m), *q = malloc(n * sizeof *q);
    float *v = malloc(n * sizeof *v), *ref = malloc(n * sizeof *ref);
    uint8_t buf[4096];
    for (int t = 0; t < 3; t++) {
        float *g = s_data(n, 200 + (uint64_t)t);
        for (size_t i = 0; i < n; i++)
            v[i] = g[i] + 0.5f * m[i];
        size_t len = 0;
        assert_int_equal(
            rumor_codec_encode(c, v, n, 0, 0, buf, sizeof buf, &len, ref),
            RUMOR_OK);
        assert_int_equal(
            rumor_ef_encode(ef, c, g, n, 0, 0, buf, sizeof buf, &len, q),
            RUMOR_OK);
        assert_memory_equal(q, ref, n * sizeof *q);
        for (size_t i = 0; i < n; i++)
            m[i] = 0.5f * m[i] + g[i] - q[i];
        assert_memory_equal(rumor_ef_error(ef, NULL), m, n * sizeof *m);
        free(g);
    }
    free(m);
    free(q);
    free(v);
    free(ref);
    rumor_codec_destroy(&c);
    rumor_ef_destroy(&ef);
}

static void
test_dgc_memory__masking_momentum_clipping_warmup__as_specified(void **state)
{
    (void)state;
    const size_t n = 10000;
    rumor_ef *ef = s_ef("dgc:momentum=0.9,ratio=0.01,clip=10,warmup=4", n);
    float *sent = malloc(n * sizeof *sent);
    size_t cap = 12 + 4 + n / 4 + 12 + 4 * n;
    uint8_t *buf = malloc(cap);
    double density[6];
    for (int t = 0; t < 6; t++) {
        float *g = s_data(n, 300 + (uint64_t)t);
        size_t len = 0;
        assert_int_equal(rumor_ef_encode(ef,
                                         NULL,
                                         g,
                                         n,
                                         3,
                                         (uint64_t)t,
                                         buf,
                                         cap,
                                         &len,
                                         sent),
                         RUMOR_OK);
        size_t count = core_get_u32(buf + 8);
        density[t] = (double)count / (double)n;
        const float *v = rumor_ef_error(ef, NULL);
        for (size_t i = 0; i < n; i++)
            if (sent[i] != 0)
                assert_true(v[i] == 0.0f); /* masked (fp32 values) */
        free(g);
    }
    /* Warm-up: 25 % at step 0 decaying to 1 % from step 4 (DGC's count
     * lands within [0.7, 1.3] of the target). */
    assert_true(density[0] >= 0.7 * 0.25 && density[0] <= 1.3 * 0.25);
    assert_true(density[4] >= 0.007 && density[4] <= 0.013);
    assert_true(density[1] < density[0] && density[2] < density[1]);
    /* Clipping: a huge gradient enters with norm <= clip. */
    rumor_ef *fresh = s_ef("dgc:momentum=0,ratio=1,clip=1", 4);
    float g[4] = {300, 400, 0, 0}, s4[4];
    uint8_t small[256];
    size_t len = 0;
    assert_int_equal(
        rumor_ef_encode(fresh, NULL, g, 4, 0, 0, small, sizeof small, &len, s4),
        RUMOR_OK);
    assert_true(fabsf(s4[0] - 0.6f) < 1e-6f && fabsf(s4[1] - 0.8f) < 1e-6f);
    rumor_ef_destroy(&fresh);
    free(sent);
    free(buf);
    rumor_ef_destroy(&ef);
}

/* DGC's factor masking clears u and v where a value was selected, even
 * when the selected value decodes to 0 (here 1e-9, below fp16's
 * smallest subnormal): masking by approx != 0 would keep u = 1e-9 and
 * send 1.9e-9 worth of error at the next step. */
static void
test_dgc_memory__selected_value_decoding_to_zero__is_masked(void **state)
{
    (void)state;
    rumor_ef *ef = s_ef("dgc:momentum=0.9,ratio=1,values=fp16", 2);
    float g[2] = {1.0f, 1e-9f}, zero[2] = {0, 0}, sent[2];
    uint8_t buf[256];
    size_t len = 0;
    assert_int_equal(
        rumor_ef_encode(ef, NULL, g, 2, 0, 0, buf, sizeof buf, &len, sent),
        RUMOR_OK);
    assert_true(sent[0] == 1.0f && sent[1] == 0.0f);
    assert_int_equal(
        rumor_ef_encode(ef, NULL, zero, 2, 0, 1, buf, sizeof buf, &len, sent),
        RUMOR_OK);
    /* u was cleared: v = e = 1e-9 (selected again, decoded to 0 again) */
    assert_true(rumor_ef_error(ef, NULL)[1] == 1e-9f);
    rumor_ef_destroy(&ef);
}

/* Section 3.4: the clip applies to the sum over N nodes, so each clips
 * at clip N^-1/2: N = 4, clip 1 -> norm 0.5. */
static void
test_dgc_memory__clip__scaled_by_inverse_sqrt_nodes(void **state)
{
    (void)state;
    rumor_ef *ef = s_ef("dgc:momentum=0,ratio=1,clip=1", 4);
    assert_int_equal(rumor_ef_set_nodes(ef, 0), RUMOR_EINVAL);
    assert_int_equal(rumor_ef_set_nodes(ef, 4), RUMOR_OK);
    float g[4] = {300, 400, 0, 0}, s4[4];
    uint8_t buf[256];
    size_t len = 0;
    assert_int_equal(
        rumor_ef_encode(ef, NULL, g, 4, 0, 0, buf, sizeof buf, &len, s4),
        RUMOR_OK);
    assert_true(fabsf(s4[0] - 0.3f) < 1e-6f && fabsf(s4[1] - 0.4f) < 1e-6f);
    rumor_ef_destroy(&ef);
}

/* "dgc:MOMENTUM[,CLIP][,WARMUP]" and "ef-decay:BETA" are the keyed specs
 * (the saved state holds every parameter); a dgc memory takes a topk
 * codec's count and refuses a codec that does not select by count. */
static void
test_ef_spec__positional_values_and_dgc_codec(void **state)
{
    (void)state;
    const char *pairs[][2] = {
        {"dgc:0.5,2,10", "dgc:momentum=0.5,clip=2,warmup=10"},
        {"dgc:0.5", "dgc:momentum=0.5"},
        {"dgc:0.5,ratio=0.01", "dgc:momentum=0.5,ratio=0.01"},
        {"ef-decay:0.7", "ef-decay:gamma=0.7"}};
    for (size_t i = 0; i < 4; i++) {
        rumor_ef *a = s_ef(pairs[i][0], 8), *b = s_ef(pairs[i][1], 8);
        uint8_t sa[256], sb[256];
        size_t la = 0, lb = 0;
        assert_int_equal(rumor_ef_save(a, sa, sizeof sa, &la), RUMOR_OK);
        assert_int_equal(rumor_ef_save(b, sb, sizeof sb, &lb), RUMOR_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(sa, sb, la);
        rumor_ef_destroy(&a);
        rumor_ef_destroy(&b);
    }
    rumor_ef *bad = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_ef_new("dgc:0.5,1,2,3", 8, &bad, &diag),
                     RUMOR_EINVAL);
    assert_int_equal(rumor_ef_new("ef:0.5", 8, &bad, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "unknown key '0.5'"));
    rumor_ef *ef = s_ef("dgc:0", 100);
    rumor_codec *topk = s_codec("topk:k=3"), *q = s_codec("qsgd:bits=4");
    assert_false(rumor_ef_codec_fits(ef, q));
    float g[100], sent[100];
    for (size_t i = 0; i < 100; i++)
        g[i] = (float)i;
    uint8_t buf[2048];
    size_t len = 0, kept = 0;
    assert_int_equal(
        rumor_ef_encode(ef, q, g, 100, 0, 0, buf, sizeof buf, &len, sent),
        RUMOR_EINVAL);
    assert_int_equal(
        rumor_ef_encode(ef, topk, g, 100, 0, 0, buf, sizeof buf, &len, sent),
        RUMOR_OK);
    for (size_t i = 0; i < 100; i++)
        kept += sent[i] != 0;
    assert_int_equal(kept, 3);
    assert_true(sent[99] == 99.0f && sent[98] == 98.0f && sent[97] == 97.0f);
    rumor_codec_destroy(&topk);
    rumor_codec_destroy(&q);
    rumor_ef_destroy(&ef);
}

static void
test_ef_save_restore__continues_identically_and_rejects_bad_state(void **state)
{
    (void)state;
    const char *specs[] = {"ef",
                           "ef-decay:gamma=0.7",
                           "dgc:ratio=0.05",
                           "saef"};
    const size_t n = 3000;
    for (int s = 0; s < 4; s++) {
        bool dgc = s == 2;
        rumor_codec *c = dgc ? NULL : s_codec("qsgd:bits=2");
        rumor_ef *a = s_ef(specs[s], n), *b = s_ef(specs[s], n);
        size_t cap = 12 + 4 + n + 12 + 4 * n + 4 * n, len = 0, len2 = 0;
        uint8_t *buf = malloc(cap), *buf2 = malloc(cap);
        float *g = s_data(n, 400);
        for (int t = 0; t < 3; t++)
            assert_int_equal(rumor_ef_encode(a,
                                             c,
                                             g,
                                             n,
                                             1,
                                             (uint64_t)t,
                                             buf,
                                             cap,
                                             &len,
                                             NULL),
                             RUMOR_OK);
        size_t ssize = rumor_ef_state_size(a), w = 0;
        uint8_t *st = malloc(ssize + 1);
        assert_int_equal(rumor_ef_save(a, st, ssize - 1, &w), RUMOR_ETOOBIG);
        assert_int_equal(rumor_ef_save(a, st, ssize, &w), RUMOR_OK);
        assert_int_equal(w, ssize);
        assert_int_equal(rumor_ef_restore(b, st, ssize), RUMOR_OK);
        assert_int_equal(rumor_ef_steps(b), 3);
        assert_int_equal(
            rumor_ef_encode(a, c, g, n, 1, 9, buf, cap, &len, NULL),
            RUMOR_OK);
        assert_int_equal(
            rumor_ef_encode(b, c, g, n, 1, 9, buf2, cap, &len2, NULL),
            RUMOR_OK);
        assert_int_equal(len, len2);
        assert_memory_equal(buf, buf2, len);
        /* Truncated, wrong kind, NaN: rejected, memory unchanged. */
        assert_int_equal(rumor_ef_restore(b, st, ssize - 1), RUMOR_EPROTO);
        st[5] ^= 7;
        assert_int_equal(rumor_ef_restore(b, st, ssize), RUMOR_EPROTO);
        st[5] ^= 7;
        compress_put_f32(st + 48 + 4 * 17, NAN);
        assert_int_equal(rumor_ef_restore(b, st, ssize), RUMOR_ENUMERIC);
        rumor_ef *other = s_ef(specs[s], n - 1);
        assert_int_equal(rumor_ef_restore(other, st, ssize), RUMOR_EPROTO);
        rumor_ef_destroy(&other);
        free(st);
        free(g);
        free(buf);
        free(buf2);
        rumor_ef_destroy(&a);
        rumor_ef_destroy(&b);
        rumor_codec_destroy(&c);
    }
}

static void
test_saef__lookahead_and_error__as_in_xu_et_al(void **state)
{
    (void)state;
    const size_t n = 100;
    rumor_ef *ef = s_ef("saef", n);
    rumor_codec *c = s_codec("sign:bucket=100");
    float *delta = s_data(n, 500), sent[100], x[100];
    uint8_t buf[512];
    size_t len = 0;
    assert_int_equal(
        rumor_ef_encode(ef, c, delta, n, 0, 0, buf, sizeof buf, &len, sent),
        RUMOR_OK);
    const float *e = rumor_ef_error(ef, NULL);
    for (size_t i = 0; i < n; i++) {
        assert_true(e[i] == delta[i] - sent[i]);
        x[i] = 1.0f;
    }
    /* Look-ahead x_{t+1/2} = x_t - alpha e with alpha = 0.5. */
    assert_int_equal(rumor_ef_apply_error(ef, -0.5f, x, n), RUMOR_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(x[i] == 1.0f + -0.5f * e[i]);
    assert_int_equal(rumor_ef_apply_error(ef, 1, x, n + 1), RUMOR_EINVAL);
    struct rumor_diag diag;
    rumor_ef *bad = NULL;
    assert_int_equal(rumor_ef_new("ef:gamma=1", n, &bad, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "gamma"));
    assert_int_equal(rumor_ef_new("nope", n, &bad, &diag), RUMOR_EINVAL);
    assert_int_equal(rumor_ef_new("ef-decay:gamma=2", n, &bad, &diag),
                     RUMOR_EINVAL);
    assert_null(bad);
    free(delta);
    rumor_codec_destroy(&c);
    rumor_ef_destroy(&ef);
}

/* A memory kept elsewhere (gossip's compressed all-reduce on a GPU): the
 * step as vector operations with rumor_ef_decay's factor, the codec and a
 * decode sends the bytes rumor_ef_encode sends and keeps its residual,
 * bit for bit (zeros, -0 and denormals among the values); with
 * rumor_ef_residual and rumor_ef_set_steps a fresh memory saves the same
 * record, which restores the steps. dgc and saef have no such step. */
static void
test_ef_decay__outside_step__same_bytes_residual_and_record(void **state)
{
    (void)state;
    const size_t n = 1000, steps = 5;
    static const char *const specs[] = {"ef", "ef-decay:0.7"};
    rumor_codec *c = s_codec("qsgd:bits=4");
    size_t cap = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    uint8_t *want = malloc(cap), *got = malloc(cap);
    float *e = calloc(n, sizeof *e), *p = malloc(n * sizeof *p);
    float *q = malloc(n * sizeof *q);
    assert_true(want && got && e && p && q);
    for (size_t k = 0; k < 2; k++) {
        rumor_ef *mem = s_ef(specs[k], n), *fresh = s_ef(specs[k], n);
        float decay = 0;
        assert_int_equal(rumor_ef_decay(mem, &decay), RUMOR_OK);
        assert_true(decay == (k == 0 ? 1.0f : 0.7f));
        memset(e, 0, n * sizeof *e);
        for (size_t t = 0; t < steps; t++) {
            float *g = s_data(n, 300 + t);
            size_t wlen = 0, glen = 0;
            assert_int_equal(
                rumor_ef_encode(mem, c, g, n, 5, t, want, cap, &wlen, NULL),
                RUMOR_OK);
            for (size_t i = 0; i < n; i++)
                p[i] = g[i] + decay * e[i];
            assert_int_equal(
                rumor_codec_encode(c, p, n, 5, t, got, cap, &glen, NULL),
                RUMOR_OK);
            assert_int_equal(glen, wlen);
            assert_memory_equal(got, want, wlen);
            assert_int_equal(rumor_codec_decode(c, got, glen, q, n), RUMOR_OK);
            for (size_t i = 0; i < n; i++)
                e[i] = p[i] - q[i];
            free(g);
        }
        assert_memory_equal(e, rumor_ef_error(mem, NULL), n * sizeof *e);
        size_t rn = 0;
        memcpy(rumor_ef_residual(fresh, &rn), e, n * sizeof *e);
        assert_int_equal(rn, n);
        rumor_ef_set_steps(fresh, steps);
        size_t len = rumor_ef_state_size(mem), wa = 0, wb = 0;
        uint8_t *ra = malloc(len), *rb = malloc(len);
        assert_true(ra && rb);
        assert_int_equal(rumor_ef_save(mem, ra, len, &wa), RUMOR_OK);
        assert_int_equal(rumor_ef_save(fresh, rb, len, &wb), RUMOR_OK);
        assert_memory_equal(ra, rb, len);
        rumor_ef *back = s_ef(specs[k], n);
        assert_int_equal(rumor_ef_restore(back, rb, wb), RUMOR_OK);
        assert_int_equal(rumor_ef_steps(back), steps);
        assert_memory_equal(rumor_ef_residual(back, NULL), e, n * sizeof *e);
        rumor_ef_destroy(&back);
        rumor_ef_destroy(&fresh);
        rumor_ef_destroy(&mem);
        free(ra);
        free(rb);
    }
    static const char *const own[] = {"dgc", "saef"};
    for (size_t k = 0; k < 2; k++) {
        rumor_ef *mem = s_ef(own[k], n);
        float decay = 0;
        assert_int_equal(rumor_ef_decay(mem, &decay), RUMOR_EINVAL);
        rumor_ef_destroy(&mem);
    }
    free(want);
    free(got);
    free(e);
    free(p);
    free(q);
    rumor_codec_destroy(&c);
}

/* A residual written from outside (a device's) is what the memory then
 * saves, restores and encodes with. */
static void
test_ef_residual_written__saved_restored_and_used(void **state)
{
    (void)state;
    const size_t n = 5;
    float e[5] = {0.5f, -1.25f, 0.0f, 3.0f, -0.125f};
    rumor_ef *a = NULL, *b = NULL;
    assert_int_equal(rumor_ef_new("ef", n, &a, NULL), RUMOR_OK);
    assert_int_equal(rumor_ef_new("ef", n, &b, NULL), RUMOR_OK);
    size_t an = 0;
    memcpy(rumor_ef_residual(a, &an), e, sizeof e);
    assert_int_equal(an, n);
    rumor_ef_set_steps(a, 7);
    uint8_t buf[256];
    size_t len = 0, got = 0;
    assert_int_equal(rumor_ef_save(a, buf, sizeof buf, &len), RUMOR_OK);
    assert_int_equal(rumor_ef_restore(b, buf, len), RUMOR_OK);
    assert_int_equal(rumor_ef_steps(b), 7);
    assert_memory_equal(rumor_ef_error(b, &got), e, sizeof e);
    assert_int_equal(got, n);
    /* ef's next encode sends g + e: with g = 0 and fp32, exactly e */
    rumor_codec *fp32 = NULL;
    assert_int_equal(rumor_codec_new("fp32", &fp32, NULL), RUMOR_OK);
    float g[5] = {0}, sent[5];
    uint8_t out[256];
    assert_int_equal(
        rumor_ef_encode(b, fp32, g, n, 1, 0, out, sizeof out, &len, sent),
        RUMOR_OK);
    assert_memory_equal(sent, e, sizeof e);
    assert_int_equal(rumor_ef_steps(b), 8);
    rumor_codec_destroy(&fp32);
    rumor_ef_destroy(&a);
    rumor_ef_destroy(&b);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_codec_new__every_spec__canonical_text_round_trips),
        cmocka_unit_test(test_codec_new__bad_specs__einval_naming_the_problem),
        cmocka_unit_test(test_codec_name__every_id__known_and_stable),
        cmocka_unit_test(
            test_encode__stochastic_codecs_long_vectors__same_bytes_on_every_tier),
        cmocka_unit_test(
            test_terngrad__values_at_a_draw_boundary__round_exactly_as_defined),
        cmocka_unit_test(
            test_natural__mantissas_at_a_draw_boundary__round_exactly_as_defined),
        cmocka_unit_test(
            test_encode__every_codec__approx_equals_decode_and_decode_add),
        cmocka_unit_test(
            test_decode__truncated_or_padded_payload__rejected_y_unchanged),
        cmocka_unit_test(
            test_qsgd_decode__minus_zero_code__rejected_every_width),
        cmocka_unit_test(test_decode__random_byte_flips__never_crash),
        cmocka_unit_test(test_encode__nan_or_inf_anywhere__enumeric),
        cmocka_unit_test(test_encode__cap_too_small__etoobig),
        cmocka_unit_test(test_decode__non_finite_values_in_payload__enumeric),
        cmocka_unit_test(test_fp32__payload_layout__matches_hand_written_bytes),
        cmocka_unit_test(test_sign__hand_computed_bucket__scaled_signs),
        cmocka_unit_test(
            test_bf16__hand_computed_rounding__nearest_even_and_saturating),
        cmocka_unit_test(
            test_golden__every_codec__bytes_match_known_answer_files),
        cmocka_unit_test(
            test_fp16_bf16__fast_paths__bit_equal_to_reference_incl_subnormals),
        cmocka_unit_test(
            test_stochastic_quantizers__mean_of_draws__unbiased_within_5_sigma),
        cmocka_unit_test(
            test_terngrad_shared_scalers__unbiased_at_one_scale_per_bucket),
        cmocka_unit_test(
            test_terngrad_scalers__own_encode_scale_with_and_without_clip),
        cmocka_unit_test(
            test_terngrad_clip__sigma_summed_in_pieces__exact_threshold),
        cmocka_unit_test(
            test_terngrad_shared_scalers__same_bytes_on_every_tier),
        cmocka_unit_test(test_terngrad_shared_scalers__refusals),
        cmocka_unit_test(test_quantizers__one_draw__within_one_level_of_input),
        cmocka_unit_test(test_fp8_fp4__values_in_range__within_half_a_step),
        cmocka_unit_test(test_fp8__exponent_bias__minimises_l2_error),
        cmocka_unit_test(
            test_topk__random_ties_zeros_denormals__equals_sort_reference),
        cmocka_unit_test(test_topk__every_simd_tier__equals_sort_reference),
        cmocka_unit_test(
            test_topk_codec__kept_values__largest_exact_and_rest_zero),
        cmocka_unit_test(
            test_randk__indices_from_seed__no_index_bytes_one_per_block),
        cmocka_unit_test(
            test_threshold_and_dgc__selection__counts_as_specified),
        cmocka_unit_test(
            test_composition__topk_then_qsgd__quantized_values_at_topk_indices),
        cmocka_unit_test(
            test_stream_bytes__vector_generator__equals_reference_and_definition),
        cmocka_unit_test(test_kernels__finite_select_sign__equal_references),
        cmocka_unit_test(test_select_range__every_simd_tier__equals_plain_loop),
        cmocka_unit_test(
            test_kernels__levels_pack_natural_sums__bit_equal_to_references),
        cmocka_unit_test(
            test_quant_buckets_natural__fused_kernels__bit_equal_to_references),
        cmocka_unit_test(test_huffman__skewed_bytes__round_trip_near_entropy),
        cmocka_unit_test(
            test_huffman__length_tables__incomplete_or_oversubscribed_rejected),
        cmocka_unit_test(
            test_fp8__gaussian__huffman_size_within_one_percent_of_entropy),
        cmocka_unit_test(
            test_ef__topk_steps__sent_plus_error_equals_sum_of_gradients),
        cmocka_unit_test(test_ef_decay__one_step__matches_co3_recurrence),
        cmocka_unit_test(
            test_dgc_memory__masking_momentum_clipping_warmup__as_specified),
        cmocka_unit_test(
            test_dgc_memory__selected_value_decoding_to_zero__is_masked),
        cmocka_unit_test(test_dgc_memory__clip__scaled_by_inverse_sqrt_nodes),
        cmocka_unit_test(test_ef_spec__positional_values_and_dgc_codec),
        cmocka_unit_test(
            test_ef_save_restore__continues_identically_and_rejects_bad_state),
        cmocka_unit_test(test_saef__lookahead_and_error__as_in_xu_et_al),
        cmocka_unit_test(
            test_ef_decay__outside_step__same_bytes_residual_and_record),
        cmocka_unit_test(test_ef_residual_written__saved_restored_and_used),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("compress", tests, NULL, NULL);
}
