/*
 * `rumor bench PART`: each part prints its figures next to a reference
 * measured in the same run (memory bandwidth, a library, plain TCP).
 */
#ifndef RUMOR_BENCH_H
#define RUMOR_BENCH_H

#include <stdio.h>

int bench_main(int argc, char **argv);
void bench_help(FILE *out);

/* Single-core memory read bandwidth in GB/s (1e9 bytes/s): the median of
 * several passes summing a buffer much larger than the last-level cache. */
double bench_mem_read_gbps(void);

/* Single-core float32 FMA rate in GFLOP/s (2 flops per lane per FMA):
 * the median of several passes of independent AVX2 FMA chains. */
double bench_fma_gflops(void);

#endif
