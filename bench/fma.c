/*
 * The compute ceiling the kernel tier is read against next to the memory
 * floor of membw.c: single-core float32 FMA rate, 8-wide AVX2 FMA (the
 * instructions our lowrank and codec kernels use) in 12 independent
 * accumulator chains, enough to cover the FMA latency (4 cycles) times the
 * two FMA pipes of current x86 cores, so the loop is bound by issue width,
 * not by a dependency chain. Median of 5 passes; no memory traffic. Without
 * AVX2/FMA the scalar loop (4 chains) gives the plain rate instead.
 */
#include "bench/bench.h"

#include "rumor/core.h"

#include <stdlib.h>

#define FMA_ITERS  (1u << 22)
#define FMA_PASSES 5
#define FMA_CHAINS 12

typedef float fma_v8 __attribute__((vector_size(32)));

__attribute__((target("avx2,fma"))) static float
s_fma_avx2(float seed, uint64_t *flops)
{
    fma_v8 acc[FMA_CHAINS];
    fma_v8 mul = {0}, add = {0};
    for (int k = 0; k < 8; k++) {
        mul[k] = 0.999999f;
        add[k] = seed * 1e-7f;
    }
    for (int c = 0; c < FMA_CHAINS; c++)
        acc[c] = add + (float)c;
    /* Unrolled so the chains live in registers, not in the array. */
    for (uint32_t i = 0; i < FMA_ITERS; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; c++)
            acc[c] = __builtin_ia32_vfmaddps256(acc[c], mul, add);
    }
    fma_v8 s = {0};
    for (int c = 0; c < FMA_CHAINS; c++)
        s += acc[c];
    *flops = (uint64_t)FMA_ITERS * FMA_CHAINS * 8 * 2;
    return s[0] + s[7];
}

static float
s_fma_plain(float seed, uint64_t *flops)
{
    float a = seed, b = seed + 1, c = seed + 2, d = seed + 3;
    for (uint32_t i = 0; i < FMA_ITERS; i++) {
        a = a * 0.999999f + 1e-7f;
        b = b * 0.999999f + 1e-7f;
        c = c * 0.999999f + 1e-7f;
        d = d * 0.999999f + 1e-7f;
    }
    *flops = (uint64_t)FMA_ITERS * 4 * 2;
    return a + b + c + d;
}

static int
s_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
bench_fma_gflops(void)
{
    bool vec = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    double rate[FMA_PASSES];
    volatile float sink = 0;
    for (int pass = 0; pass < FMA_PASSES; pass++) {
        uint64_t flops = 0;
        uint64_t t0 = rumor_clock_ns();
        sink += vec ? s_fma_avx2((float)pass, &flops)
                    : s_fma_plain((float)pass, &flops);
        rate[pass] = (double)flops / (double)(rumor_clock_ns() - t0);
    }
    (void)sink;
    qsort(rate, FMA_PASSES, sizeof rate[0], s_compare_double);
    return rate[FMA_PASSES / 2];
}
