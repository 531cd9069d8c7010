/*
 * The memory-read floor every kernel benchmark is compared with: one core
 * summing a 256 MiB buffer (far beyond any last-level cache) with 4
 * independent 256-bit accumulators where AVX2 exists, so the loop is bound
 * by memory, not by the adder. The median of 5 passes is reported. The sum
 * loops need n to be a multiple of 32 floats, which MEMBW_BYTES is. The
 * buffer is on transparent huge pages where the system allows them
 * (rumor_mem_alloc_large): on 4 KiB pages the prefetcher stops at every
 * page and one core reads at about 17 GB/s here against 30 GB/s, and a
 * floor must be the fastest the machine streams, not the slower case.
 */
#include "bench/bench.h"

#include "rumor/core.h"

#include <stdlib.h>
#include <string.h>

#define MEMBW_BYTES  (256u << 20)
#define MEMBW_PASSES 5

__attribute__((target("avx2"))) static double
s_sum_avx2(const float *x, size_t n)
{
    typedef float v8 __attribute__((vector_size(32)));
    v8 a = {0}, b = {0}, c = {0}, d = {0};
    size_t i = 0;
    for (; i < n; i += 32) {
        v8 xa, xb, xc, xd;
        memcpy(&xa, x + i, 32);
        memcpy(&xb, x + i + 8, 32);
        memcpy(&xc, x + i + 16, 32);
        memcpy(&xd, x + i + 24, 32);
        a += xa;
        b += xb;
        c += xc;
        d += xd;
    }
    v8 s = a + b + c + d;
    double total = 0;
    for (int k = 0; k < 8; k++)
        total += s[k];
    return total;
}

static double
s_sum_plain(const float *x, size_t n)
{
    float a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i += 4) {
        a += x[i];
        b += x[i + 1];
        c += x[i + 2];
        d += x[i + 3];
    }
    return (double)a + b + c + d;
}

static int
s_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
bench_mem_read_gbps(void)
{
    size_t n = MEMBW_BYTES / sizeof(float);
    float *x = rumor_mem_alloc_large(MEMBW_BYTES);
    if (x == NULL)
        return 0.0;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i & 1023);
    bool avx2 = __builtin_cpu_supports("avx2");
    double gbps[MEMBW_PASSES];
    volatile double sink = 0;
    for (int pass = 0; pass < MEMBW_PASSES; pass++) {
        uint64_t t0 = rumor_clock_ns();
        sink += avx2 ? s_sum_avx2(x, n) : s_sum_plain(x, n);
        uint64_t t1 = rumor_clock_ns();
        gbps[pass] = (double)MEMBW_BYTES / (double)(t1 - t0);
    }
    (void)sink;
    free(x);
    qsort(gbps, MEMBW_PASSES, sizeof gbps[0], s_compare_double);
    return gbps[MEMBW_PASSES / 2];
}
