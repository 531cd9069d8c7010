/*
 * bench core: crc32c (guards every frame and checkpoint section) and the
 * Philox generator (stochastic rounding, random-k) in GB/s of data they
 * cover, each against this machine's single-core memory read bandwidth.
 */
#include "bench/bench.h"

#include "rumor/core.h"

#include <stdlib.h>

#define CORE_BENCH_BYTES (64u << 20)
#define CORE_BENCH_REPS  5

static double
s_best_gbps(void (*fn)(void *arg), void *arg, size_t bytes)
{
    double best = 0;
    for (int r = 0; r < CORE_BENCH_REPS; r++) {
        uint64_t t0 = rumor_clock_ns();
        fn(arg);
        double gbps = (double)bytes / (double)(rumor_clock_ns() - t0);
        if (gbps > best)
            best = gbps;
    }
    return best;
}

static volatile uint32_t s_sink;

static void
s_run_crc(void *arg)
{
    s_sink = rumor_crc32c(0, arg, CORE_BENCH_BYTES);
}

static void
s_run_rng(void *arg)
{
    rumor_rng_fill_uniform(1, 2, 0, arg, CORE_BENCH_BYTES / sizeof(float));
}

int
bench_core_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    uint8_t *data = malloc(CORE_BENCH_BYTES);
    if (data == NULL) {
        fprintf(stderr, "bench core: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < CORE_BENCH_BYTES; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 24);
    double floor = bench_mem_read_gbps();
    double crc = s_best_gbps(s_run_crc, data, CORE_BENCH_BYTES);
    double rng = s_best_gbps(s_run_rng, data, CORE_BENCH_BYTES);
    printf("memory read (1 core)     %7.2f GB/s  reference\n", floor);
    printf("fp32 FMA (1 core, AVX2)  %7.2f GFLOP/s  compute ceiling\n",
           bench_fma_gflops());
    printf("crc32c                   %7.2f GB/s  %.2fx of memory read\n",
           crc,
           crc / floor);
    printf("philox uniform floats    %7.2f GB/s  %.2fx of memory read\n",
           rng,
           rng / floor);
    free(data);
    return 0;
}
