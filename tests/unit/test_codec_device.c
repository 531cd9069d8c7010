/*
 * The device codecs' CUDA kernels (compress/cuda.cu) against their plain-C
 * twins (compress/ref.c) and the CPU codecs: on a GPU the payload of
 * rumor_codec_encode_device equals both byte for byte, decode-add into
 * device memory equals both float for float, each kernel's own output
 * equals its twin's (the scaled sign's partial sums, the sparse
 * selection's steps and DGC's sample included), and
 * NaN/Inf is refused. Without a device (or in a CPU-only build) every
 * test skips with the CUDA runtime's reason printed.
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

/* The CUDA table, or a skip with the reason (never a silent pass). */
static const struct compress_dev_i *
s_cuda_or_skip(void)
{
    const struct compress_dev_i *d = NULL;
    const char *why = NULL;
    if (compress_dev_cuda(&d, &why) == RUMOR_OK)
        return d;
    printf("[  SKIP    ] device codecs: %s (%d devices)\n",
           why,
           rumor_cuda_device_count(NULL));
    skip();
    return NULL;
}

/* n floats (or bytes) on the device, copied from src. */
static void *
s_up(const struct compress_dev_i *d, const void *src, size_t bytes)
{
    void *p = NULL;
    assert_int_equal(d->alloc(bytes, &p, NULL), RUMOR_OK);
    if (bytes > 0)
        assert_int_equal(d->upload(p, src, bytes, NULL), RUMOR_OK);
    return p;
}

static void
s_down(const struct compress_dev_i *d, void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        assert_int_equal(d->download(dst, src, bytes, NULL), RUMOR_OK);
    assert_int_equal(d->finish(NULL), RUMOR_OK);
}

static void
s_check_case(const struct compress_dev_i *d, const char *spec, size_t n)
{
    rumor_codec *c = NULL;
    assert_int_equal(rumor_codec_new(spec, &c, NULL), RUMOR_OK);
    size_t cap = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact), RUMOR_OK);
    cap += 64;
    float *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
    float *ycpu = malloc((n + 1) * sizeof *y),
          *yref = malloc((n + 1) * sizeof *y);
    uint8_t *cpu = malloc(cap), *ref = malloc(cap), *dev = malloc(cap);
    assert_true(x && y && ycpu && yref && cpu && ref && dev);
    s_dev_fill(x, n, n + 1);
    size_t wc = 0, wr = 0, wd = 0;
    assert_int_equal(
        rumor_codec_encode(c, x, n, S_SEED, S_COUNTER, cpu, cap, &wc, NULL),
        RUMOR_OK);
    assert_int_equal(compress_dev_encode(&compress_dev_ref,
                                         c,
                                         x,
                                         n,
                                         S_SEED,
                                         S_COUNTER,
                                         ref,
                                         cap,
                                         &wr,
                                         NULL),
                     RUMOR_OK);
    float *dx = s_up(d, x, n * sizeof *x);
    assert_int_equal(rumor_codec_encode_device(c,
                                               dx,
                                               n,
                                               S_SEED,
                                               S_COUNTER,
                                               dev,
                                               cap,
                                               &wd,
                                               NULL),
                     RUMOR_OK);
    if (wd != wr || memcmp(dev, ref, wr) != 0)
        fail_msg("%s n=%zu: kernel payload differs from the twin's", spec, n);
    if (wd != wc || memcmp(dev, cpu, wc) != 0)
        fail_msg("%s n=%zu: kernel payload differs from the CPU's", spec, n);
    s_dev_fill(ycpu, n, 99);
    memcpy(yref, ycpu, n * sizeof *y);
    float *dy = s_up(d, ycpu, n * sizeof *y);
    assert_int_equal(rumor_codec_decode_add(c, cpu, wc, 0.37f, ycpu, n),
                     RUMOR_OK);
    assert_int_equal(compress_dev_decode_add(&compress_dev_ref,
                                             c,
                                             cpu,
                                             wc,
                                             0.37f,
                                             yref,
                                             n,
                                             NULL),
                     RUMOR_OK);
    assert_int_equal(
        rumor_codec_decode_add_device(c, cpu, wc, 0.37f, dy, n, NULL),
        RUMOR_OK);
    s_down(d, y, dy, n * sizeof *y);
    if (n > 0 && (memcmp(y, yref, n * sizeof *y) != 0 ||
                  memcmp(y, ycpu, n * sizeof *y) != 0))
        fail_msg("%s n=%zu: decode-add differs", spec, n);
    d->release(dx, NULL);
    d->release(dy, NULL);
    free(x);
    free(y);
    free(ycpu);
    free(yref);
    free(cpu);
    free(ref);
    free(dev);
    rumor_codec_destroy(&c);
}

static void
test_kernels__every_codec_and_size__equal_twin_and_cpu(void **state)
{
    (void)state;
    const struct compress_dev_i *d = s_cuda_or_skip();
    for (size_t s = 0; s < S_DEV_NSPECS; s++)
        for (size_t z = 0; z < S_DEV_NSIZES; z++)
            s_check_case(d, s_dev_specs[s], s_dev_sizes[z]);
}

/* The scaled sign's first pass alone: the partial sums, bit for bit, for
 * buckets that start on and off a byte and span several chunks. */
static void
test_kernels__sign_partial_sums__equal_twin(void **state)
{
    (void)state;
    const struct compress_dev_i *d = s_cuda_or_skip();
    const size_t n = 70001, buckets[] = {13, 512, 4099, 8200, 70001};
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    s_dev_fill(x, n, 11);
    float *dx = s_up(d, x, n * sizeof *x);
    for (size_t b = 0; b < sizeof buckets / sizeof buckets[0]; b++) {
        size_t per = compress_buckets(buckets[b], COMPRESS_DEV_SIGN_CHUNK);
        size_t slots = compress_buckets(n, buckets[b]) * per;
        double *want = malloc(slots * sizeof *want);
        double *got = malloc(slots * sizeof *got);
        assert_true(want && got);
        compress_dev_ref.sign_sums(x, n, buckets[b], want, NULL);
        void *dpart = NULL;
        assert_int_equal(d->alloc(slots * sizeof *got, &dpart, NULL), RUMOR_OK);
        d->sign_sums(dx, n, buckets[b], dpart, NULL);
        s_down(d, got, dpart, slots * sizeof *got);
        assert_memory_equal(got, want, slots * sizeof *got);
        d->release(dpart, NULL);
        free(want);
        free(got);
    }
    d->release(dx, NULL);
    free(x);
}

/* TernGrad's scaler sharing on the device: the scalers (after the clip,
 * whose sigma sums run in pieces) and the payload at agreed scalers
 * (some below the own ones, so values saturate) equal the CPU's. */
static void
test_kernels__terngrad_share__cpu_scalers_and_bytes(void **state)
{
    (void)state;
    const struct compress_dev_i *d = s_cuda_or_skip();
    static const char *const specs[] = {"terngrad:share=1,bucket=100",
                                        "terngrad:share=1,clip=2.5"};
    for (size_t s = 0; s < 2; s++)
        for (size_t z = 0; z < S_DEV_NSIZES; z++) {
            size_t n = s_dev_sizes[z], cap = 0, wa = 0, wb = 0;
            rumor_codec *c = NULL;
            assert_int_equal(rumor_codec_new(specs[s], &c, NULL), RUMOR_OK);
            bool exact = false;
            assert_int_equal(rumor_codec_encoded_size(c, n, &cap, &exact),
                             RUMOR_OK);
            size_t nb = rumor_codec_scaler_count(c, n);
            float *x = malloc((n + 1) * 4), *sa = malloc((nb + 1) * 4),
                  *sb = malloc((nb + 1) * 4);
            uint8_t *a = malloc(cap), *b = malloc(cap);
            assert_true(x && sa && sb && a && b);
            s_dev_fill(x, n, n + 5);
            float *dx = s_up(d, x, n * sizeof *x);
            assert_int_equal(rumor_codec_scalers(c, x, n, sa), RUMOR_OK);
            assert_int_equal(rumor_codec_scalers_device(c, dx, n, sb, NULL),
                             RUMOR_OK);
            if (nb > 0 && memcmp(sa, sb, nb * 4) != 0)
                fail_msg("%s n=%zu: scalers differ", specs[s], n);
            for (size_t k = 0; k < nb; k++)
                sa[k] *= k % 2 ? 0.5f : 1.25f;
            assert_int_equal(
                rumor_codec_encode_shared(c, x, n, sa, 7, 9, a, cap, &wa, NULL),
                RUMOR_OK);
            assert_int_equal(rumor_codec_encode_shared_device(c,
                                                              dx,
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
                fail_msg("%s n=%zu: shared payloads differ", specs[s], n);
            d->release(dx, NULL);
            free(x);
            free(sa);
            free(sb);
            free(a);
            free(b);
            rumor_codec_destroy(&c);
        }
}

/* The sparse selection's kernels alone against their twins on tie-heavy
 * keys (magnitudes from {0, 1, 2}, either sign) and on s_dev_fill's: the
 * radix select's result, the block offsets, the indices and values, and
 * the Rice stream, bit for bit. */
static void
s_check_select(const struct compress_dev_i *d,
               const float *x,
               size_t n,
               size_t k)
{
    size_t nb = compress_buckets(n, COMPRESS_DEV_SEL_BLOCK);
    struct compress_dev_sel want, got;
    uint64_t *offs = malloc((nb + 1) * sizeof *offs),
             *doffs_h = malloc((nb + 1) * sizeof *offs);
    uint32_t *idx = malloc(k * sizeof *idx), *gidx = malloc(k * sizeof *idx);
    float *vals = malloc(k * sizeof *vals), *gvals = malloc(k * sizeof *vals);
    size_t room = (k * 31 + n + 64) / 32 + 1;
    uint32_t *words = calloc(room, 4), *gwords = calloc(room, 4);
    uint64_t bits = 0, gbits = 0;
    assert_true(offs && doffs_h && idx && gidx && vals && gvals && words &&
                gwords);
    unsigned r = compress_sparse_rice_param(n, k);
    compress_dev_ref.select_kth(x, n, k, &want, NULL);
    compress_dev_ref.select_scan(x, n, &want, offs, NULL);
    compress_dev_ref.select_emit(x, n, &want, offs, idx, vals, NULL);
    compress_dev_ref.rice_write(idx, k, r, words, &bits, NULL);
    float *dx = s_up(d, x, n * sizeof *x);
    void *dsel = NULL, *doffs = NULL, *didx = NULL, *dvals = NULL,
         *dwords = NULL, *dbits = NULL;
    assert_int_equal(d->alloc(sizeof got, &dsel, NULL), RUMOR_OK);
    assert_int_equal(d->alloc((nb + 1) * 8, &doffs, NULL), RUMOR_OK);
    assert_int_equal(d->alloc(k * 4, &didx, NULL), RUMOR_OK);
    assert_int_equal(d->alloc(k * 4, &dvals, NULL), RUMOR_OK);
    assert_int_equal(d->alloc(room * 4, &dwords, NULL), RUMOR_OK);
    assert_int_equal(d->alloc(8, &dbits, NULL), RUMOR_OK);
    d->zero(dwords, room * 4, NULL);
    d->select_kth(dx, n, k, dsel, NULL);
    d->select_scan(dx, n, dsel, doffs, NULL);
    d->select_emit(dx, n, dsel, doffs, didx, dvals, NULL);
    d->rice_write(didx, k, r, dwords, dbits, NULL);
    s_down(d, &got, dsel, sizeof got);
    s_down(d, doffs_h, doffs, (nb + 1) * 8);
    s_down(d, gidx, didx, k * 4);
    s_down(d, gvals, dvals, k * 4);
    s_down(d, gwords, dwords, room * 4);
    s_down(d, &gbits, dbits, 8);
    assert_memory_equal(&got, &want, sizeof got);
    assert_memory_equal(doffs_h, offs, (nb + 1) * 8);
    assert_memory_equal(gidx, idx, k * 4);
    assert_memory_equal(gvals, vals, k * 4);
    assert_int_equal(gbits, bits);
    assert_memory_equal(gwords, words, room * 4);
    void *dev[] = {dx, dsel, doffs, didx, dvals, dwords, dbits};
    for (size_t i = 0; i < 7; i++)
        d->release(dev[i], NULL);
    free(offs);
    free(doffs_h);
    free(idx);
    free(gidx);
    free(vals);
    free(gvals);
    free(words);
    free(gwords);
}

/* DGC's sample: the draws' indices and keys, bit for bit. */
static void
s_check_dgc_sample(const struct compress_dev_i *d, const float *x, size_t n)
{
    size_t m = n / 100 > 0 ? n / 100 : 1;
    float *want = malloc(m * sizeof *want), *got = malloc(m * sizeof *got);
    assert_true(want && got);
    compress_dev_ref.dgc_sample(x, n, m, S_SEED, want, NULL);
    float *dx = s_up(d, x, n * sizeof *x);
    void *ds = NULL;
    assert_int_equal(d->alloc(m * sizeof *got, &ds, NULL), RUMOR_OK);
    d->dgc_sample(dx, n, m, S_SEED, ds, NULL);
    s_down(d, got, ds, m * sizeof *got);
    assert_memory_equal(got, want, m * sizeof *got);
    d->release(ds, NULL);
    d->release(dx, NULL);
    free(want);
    free(got);
}

static void
test_kernels__sparse_selection__equal_twin(void **state)
{
    (void)state;
    const struct compress_dev_i *d = s_cuda_or_skip();
    const size_t sizes[] = {1, 256, 257, 70001, 1u << 20};
    for (size_t z = 0; z < 5; z++) {
        size_t n = sizes[z];
        float *x = malloc(n * sizeof *x);
        assert_non_null(x);
        for (int tie = 0; tie < 2; tie++) {
            if (tie)
                for (size_t i = 0; i < n; i++)
                    x[i] = (float)((i * 7919u) % 3) * (i % 4 ? 1.0f : -1.0f);
            else
                s_dev_fill(x, n, 17);
            size_t ks[] = {1, (n + 99) / 100, (n + 1) / 2, n};
            for (size_t j = 0; j < 4; j++)
                s_check_select(d, x, n, ks[j]);
            s_check_dgc_sample(d, x, n);
        }
        free(x);
    }
}

static void
test_kernels__nonfinite__refused_and_y_untouched(void **state)
{
    (void)state;
    const struct compress_dev_i *d = s_cuda_or_skip();
    const size_t n = 1000;
    float x[1000], y[1000], y0[1000];
    uint8_t out[8192];
    for (size_t s = 0; s < S_DEV_NSPECS; s++) {
        rumor_codec *c = NULL;
        assert_int_equal(rumor_codec_new(s_dev_specs[s], &c, NULL), RUMOR_OK);
        s_dev_fill(x, n, 5);
        x[n - 1] = NAN;
        size_t w = 0;
        float *dx = s_up(d, x, sizeof x);
        assert_int_equal(rumor_codec_encode_device(c,
                                                   dx,
                                                   n,
                                                   1,
                                                   2,
                                                   out,
                                                   sizeof out,
                                                   &w,
                                                   NULL),
                         RUMOR_ENUMERIC);
        assert_int_equal(w, 0);
        d->release(dx, NULL);
        rumor_codec_destroy(&c);
    }
    /* The last value Inf (a half, or natural's exponent 255) in payloads
     * whose other values are fine: refused, y untouched. */
    const char *specs[] = {"fp16", "topk:ratio=0.1|fp16", "natural"};
    const size_t back[] = {1, 1, 1000 / 8 + 1};
    const uint8_t patch[] = {0x7c, 0x7c, 0xff};
    for (size_t s = 0; s < 3; s++) {
        rumor_codec *c = NULL;
        assert_int_equal(rumor_codec_new(specs[s], &c, NULL), RUMOR_OK);
        s_dev_fill(x, n, 5);
        size_t w = 0;
        assert_int_equal(
            rumor_codec_encode(c, x, n, 1, 2, out, sizeof out, &w, NULL),
            RUMOR_OK);
        out[w - back[s]] = patch[s];
        s_dev_fill(y0, n, 6);
        float *dy = s_up(d, y0, sizeof y0);
        assert_int_equal(
            rumor_codec_decode_add_device(c, out, w, 1.0f, dy, n, NULL),
            RUMOR_ENUMERIC);
        s_down(d, y, dy, sizeof y);
        assert_memory_equal(y, y0, sizeof y);
        d->release(dy, NULL);
        rumor_codec_destroy(&c);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_kernels__every_codec_and_size__equal_twin_and_cpu),
        cmocka_unit_test(test_kernels__sign_partial_sums__equal_twin),
        cmocka_unit_test(test_kernels__terngrad_share__cpu_scalers_and_bytes),
        cmocka_unit_test(test_kernels__sparse_selection__equal_twin),
        cmocka_unit_test(test_kernels__nonfinite__refused_and_y_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
