/*
 * core: errors, rng known answers and statistics, crc32c, bit I/O, capped
 * buffers, diagnostics, logging levels, clock, device probe.
 */
#include "tests/cmocka_compat.h"

#include "rumor/core.h"

#include "../../core/crc32c.c"
#include "core/bits.h"
#include "core/cuda_stream.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void
test_strerror__every_code__has_distinct_text(void **state)
{
    (void)state;
    for (int a = 0; a < RUMOR_ERR_COUNT; a++) {
        assert_non_null(rumor_strerror((rumor_err)a));
        assert_string_not_equal(rumor_strerror((rumor_err)a), "unknown error");
        for (int b = a + 1; b < RUMOR_ERR_COUNT; b++)
            assert_string_not_equal(rumor_strerror((rumor_err)a),
                                    rumor_strerror((rumor_err)b));
    }
    assert_string_equal(rumor_strerror((rumor_err)999), "unknown error");
    assert_string_equal(rumor_errname(RUMOR_ENUMERIC), "RUMOR_ENUMERIC");
    assert_int_equal(RUMOR_OK, 0);
}

/* Random123 tests/kat_vectors for philox4x32_10. */
static void
test_philox__random123_known_answers__match(void **state)
{
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0},
         {0, 0},
         {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        rumor_philox4x32_10(kat[i].ctr, kat[i].key, out);
        assert_memory_equal(out, kat[i].out, sizeof out);
    }
}

static void
test_rng__same_seed_and_stream__same_numbers_any_order(void **state)
{
    (void)state;
    struct rumor_rng a, b;
    rumor_rng_init(&a, 42, 7);
    float seq[103];
    for (int i = 0; i < 103; i++)
        seq[i] = rumor_rng_uniform(&a);
    float slice[50];
    rumor_rng_fill_uniform(42, 7, 53, slice, 50);
    assert_memory_equal(slice, seq + 53, sizeof slice);
    rumor_rng_init(&b, 42, 8);
    assert_true(rumor_rng_uniform(&b) != seq[0]);
}

static void
test_rng__uniform_and_normal__moments_within_bounds(void **state)
{
    (void)state;
    enum { N = 200000 };
    struct rumor_rng rng;
    rumor_rng_init(&rng, 1, 0);
    double sum = 0, sum2 = 0, nsum = 0, nsum2 = 0;
    for (int i = 0; i < N; i++) {
        double u = rumor_rng_uniform(&rng);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        sum2 += u * u;
        double z = rumor_rng_normal(&rng);
        nsum += z;
        nsum2 += z * z;
    }
    /* Six standard errors: sd(u) = 0.2887, sd(u^2) = 0.2981, sd(z^2) = 1.41. */
    assert_true(fabs(sum / N - 0.5) < 6 * 0.2887 / sqrt(N));
    assert_true(fabs(sum2 / N - 1.0 / 3) < 6 * 0.2981 / sqrt(N));
    assert_true(fabs(nsum / N) < 6.0 / sqrt(N));
    assert_true(fabs(nsum2 / N - 1.0) < 6 * 1.4142 / sqrt(N));
}

static void
test_rng_below__small_bound__every_value_equally_often(void **state)
{
    (void)state;
    enum { BOUND = 7, N = 70000 };
    int hits[BOUND] = {0};
    struct rumor_rng rng;
    rumor_rng_init(&rng, 9, 3);
    for (int i = 0; i < N; i++) {
        uint32_t v = rumor_rng_below(&rng, BOUND);
        assert_true(v < BOUND);
        hits[v]++;
    }
    /* Chi-square with 6 degrees of freedom: 22.46 is the 0.001 quantile. */
    double chi2 = 0;
    for (int v = 0; v < BOUND; v++) {
        double d = hits[v] - (double)N / BOUND;
        chi2 += d * d / ((double)N / BOUND);
    }
    assert_true(chi2 < 22.46);
}

static void
test_seed_derive__edge_order_matters_inputs_separate(void **state)
{
    (void)state;
    assert_true(rumor_seed_derive(1, 2, 3) == rumor_seed_derive(1, 2, 3));
    assert_true(rumor_seed_derive(1, 2, 3) != rumor_seed_derive(1, 3, 2));
    assert_true(rumor_seed_derive(1, 2, 3) != rumor_seed_derive(2, 2, 3));
}

static void
test_crc32c__check_value_and_both_paths__agree(void **state)
{
    (void)state;
    assert_int_equal(rumor_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(s_crc32c_table(0, (const uint8_t *)"123456789", 9),
                     0xE3069283u);
    uint8_t data[1000];
    for (int i = 0; i < 1000; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    for (size_t len = 0; len < 1000; len += 37) {
        uint32_t whole = rumor_crc32c(0, data, len);
        assert_int_equal(whole, s_crc32c_table(0, data, len));
        uint32_t split = rumor_crc32c(rumor_crc32c(0, data, len / 3),
                                      data + len / 3,
                                      len - len / 3);
        assert_int_equal(whole, split);
    }
    /* RFC 3720 B.4: 32 bytes of zeros. */
    uint8_t zeros[32] = {0};
    assert_int_equal(rumor_crc32c(0, zeros, 32), 0x8A9136AAu);
}

static void
test_bitio__mixed_widths__round_trip(void **state)
{
    (void)state;
    uint8_t buf[256];
    struct core_bw w;
    core_bw_init(&w, buf, sizeof buf);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 5, 5);
    uint64_t values[200];
    unsigned widths[200];
    size_t bits = 0;
    for (int i = 0; i < 200 && bits + 32 < 8 * sizeof buf; i++) {
        widths[i] = 1 + rumor_rng_below(&rng, 32);
        values[i] = rumor_rng_u64(&rng) & ((1ull << widths[i]) - 1);
        core_bw_put(&w, values[i], widths[i]);
        bits += widths[i];
    }
    size_t len = core_bw_finish(&w, buf);
    assert_int_equal(len, (bits + 7) / 8);
    /* LSB-first: bit k of the stream is bit k % 8 of byte k / 8 */
    size_t at = 0;
    for (int i = 0; at < bits; i++) {
        for (unsigned b = 0; b < widths[i]; b++, at++)
            assert_int_equal(buf[at / 8] >> (at % 8) & 1u, values[i] >> b & 1u);
    }
    struct core_br r;
    core_br_init(&r, buf, len);
    size_t seen = 0;
    for (int i = 0; seen < bits; i++) {
        assert_true(core_br_get(&r, widths[i]) == values[i]);
        seen += widths[i];
    }
    assert_false(r.overrun);
    assert_int_equal(core_br_used(&r, buf), len);
}

static void
test_bitio__past_the_end__flags_instead_of_reading(void **state)
{
    (void)state;
    uint8_t buf[2];
    struct core_bw w;
    core_bw_init(&w, buf, sizeof buf);
    core_bw_put(&w, 0x1ff, 9);
    core_bw_put(&w, 0xff, 8);
    assert_int_equal(core_bw_finish(&w, buf), SIZE_MAX);
    assert_true(w.overflow);

    const uint8_t in[1] = {0xa5};
    struct core_br r;
    core_br_init(&r, in, 1);
    assert_int_equal(core_br_get(&r, 4), 0x5);
    assert_false(r.overrun);
    assert_int_equal(core_br_get(&r, 5), 0);
    assert_true(r.overrun);
}

static void
test_buf__growth_past_cap__refused_contents_kept(void **state)
{
    (void)state;
    rumor_buf buf;
    rumor_buf_init(&buf, 100);
    char chunk[40];
    memset(chunk, 'x', sizeof chunk);
    assert_int_equal(rumor_buf_append(&buf, chunk, 40), RUMOR_OK);
    assert_int_equal(rumor_buf_append(&buf, chunk, 40), RUMOR_OK);
    assert_int_equal(rumor_buf_append(&buf, chunk, 40), RUMOR_ETOOBIG);
    assert_int_equal(buf.len, 80);
    assert_true(buf.alloc <= 100);
    assert_int_equal(rumor_buf_reserve(&buf, SIZE_MAX), RUMOR_ETOOBIG);
    rumor_buf_free(&buf);
    assert_null(buf.data);
}

static void
test_buf_read_file__missing_and_oversized__distinct_errors(void **state)
{
    (void)state;
    rumor_buf buf;
    rumor_buf_init(&buf, 4);
    assert_int_equal(rumor_buf_read_file(&buf, "/nonexistent/rumor"),
                     RUMOR_ENOTFOUND);
    char path[] = "/tmp/rumor-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello", 5), 5);
    close(fd);
    assert_int_equal(rumor_buf_read_file(&buf, path), RUMOR_ETOOBIG);
    rumor_buf_free(&buf);
    rumor_buf_init(&buf, 64);
    assert_int_equal(rumor_buf_read_file(&buf, path), RUMOR_OK);
    assert_memory_equal(buf.data, "hello", 5);
    rumor_buf_free(&buf);
    unlink(path);
}

static void
test_diag__format__file_line_col_message(void **state)
{
    (void)state;
    struct rumor_diag d;
    char out[128];
    rumor_diag_set(&d, "ring.topo", 3, 7, "bad %s", "thing");
    rumor_diag_format(&d, out, sizeof out);
    assert_string_equal(out, "ring.topo:3:7: bad thing");
    rumor_diag_set(&d, "", 0, 0, "plain");
    rumor_diag_format(&d, out, sizeof out);
    assert_string_equal(out, "plain");
    rumor_diag_set(NULL, "x", 1, 1, "ignored");
}

static void
test_log_level__names__parse_and_reject(void **state)
{
    (void)state;
    rumor_log_level level;
    assert_int_equal(rumor_log_parse_level("debug", &level), RUMOR_OK);
    assert_int_equal(level, RUMOR_LOG_DEBUG);
    assert_int_equal(rumor_log_parse_level("WARN", &level), RUMOR_OK);
    assert_int_equal(level, RUMOR_LOG_WARN);
    assert_int_equal(rumor_log_parse_level("loud", &level), RUMOR_EINVAL);
}

static void
test_clock__monotonic__never_goes_back(void **state)
{
    (void)state;
    uint64_t prev = rumor_clock_ns();
    for (int i = 0; i < 1000; i++) {
        uint64_t now = rumor_clock_ns();
        assert_true(now >= prev);
        prev = now;
    }
}

static void
test_device_select__no_gpu_here__falls_back_to_cpu(void **state)
{
    (void)state;
    assert_int_equal(rumor_device_select(false), RUMOR_DEVICE_CPU);
    const char *why = NULL;
    int count = rumor_cuda_device_count(&why);
    if (count > 0)
        skip(); /* a GPU host: the fallback cannot be observed here */
    assert_non_null(why);
    assert_int_equal(rumor_device_select(true), RUMOR_DEVICE_CPU);
    assert_string_equal(rumor_device_name(RUMOR_DEVICE_CPU), "cpu");
}

static void *
t_own_stream_of_new_thread(void *arg)
{
    *(bool *)arg = core_cuda_own_stream_on();
    return NULL;
}

/* The own-stream choice is the thread's: set and given back here, off in
 * a thread started meanwhile (the stale exchanges' thread takes the
 * queuing thread's explicitly), and without it the legacy stream. */
static void
test_cuda_own_stream__per_thread__set_and_restored(void **state)
{
    (void)state;
    assert_false(core_cuda_own_stream_on());
    assert_false(core_cuda_own_stream(true));
    assert_true(core_cuda_own_stream_on());
    bool other = true;
    pthread_t th;
    assert_int_equal(
        pthread_create(&th, NULL, t_own_stream_of_new_thread, &other),
        0);
    pthread_join(th, NULL);
    assert_false(other);
    assert_true(core_cuda_own_stream(false));
    assert_false(core_cuda_own_stream_on());
    assert_null(core_cuda_stream());
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror__every_code__has_distinct_text),
        cmocka_unit_test(test_philox__random123_known_answers__match),
        cmocka_unit_test(
            test_rng__same_seed_and_stream__same_numbers_any_order),
        cmocka_unit_test(test_rng__uniform_and_normal__moments_within_bounds),
        cmocka_unit_test(
            test_rng_below__small_bound__every_value_equally_often),
        cmocka_unit_test(test_seed_derive__edge_order_matters_inputs_separate),
        cmocka_unit_test(test_crc32c__check_value_and_both_paths__agree),
        cmocka_unit_test(test_bitio__mixed_widths__round_trip),
        cmocka_unit_test(test_bitio__past_the_end__flags_instead_of_reading),
        cmocka_unit_test(test_buf__growth_past_cap__refused_contents_kept),
        cmocka_unit_test(
            test_buf_read_file__missing_and_oversized__distinct_errors),
        cmocka_unit_test(test_diag__format__file_line_col_message),
        cmocka_unit_test(test_log_level__names__parse_and_reject),
        cmocka_unit_test(test_clock__monotonic__never_goes_back),
        cmocka_unit_test(test_device_select__no_gpu_here__falls_back_to_cpu),
        cmocka_unit_test(test_cuda_own_stream__per_thread__set_and_restored),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
