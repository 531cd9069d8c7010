/*
 * The device codecs' CUDA kernels (compress/cuda.cu) against their plain-C
 * twins (compress/ref.c) and the CPU codecs: on a GPU the payload of
 * rumor_codec_encode_device equals both byte for byte, decode-add into
 * device memory equals both float for float, each kernel's own output
 * equals its twin's (the scaled sign's partial sums included), and
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
    rumor_codec *c = NULL;
    assert_int_equal(rumor_codec_new("fp16", &c, NULL), RUMOR_OK);
    s_dev_fill(x, n, 5);
    size_t w = 0;
    assert_int_equal(
        rumor_codec_encode(c, x, n, 1, 2, out, sizeof out, &w, NULL),
        RUMOR_OK);
    out[12 + 2 * 999 + 1] = 0x7c; /* the last half: Inf */
    out[12 + 2 * 999] = 0;
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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_kernels__every_codec_and_size__equal_twin_and_cpu),
        cmocka_unit_test(test_kernels__sign_partial_sums__equal_twin),
        cmocka_unit_test(test_kernels__nonfinite__refused_and_y_untouched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
