/*
 * Experiment (not linked into the product): seconds of each cpu backend
 * operation of a PowerSGD step on one 4096 x 4096 matrix, to see which
 * pass is far from memory bandwidth. Build from the repository root:
 *   cc -O2 -std=c11 -D_DEFAULT_SOURCE -Iinclude -I. lowrank/dev/phase_bench.c \
 *      build/h-lowrank-cpu/lib/librumor.a -lopenblas -llapacke -lm \
 *      -o /tmp/phase_bench && /tmp/phase_bench [rank]
 */
#include "lowrank/backend.h"

#include <stdio.h>
#include <stdlib.h>

#define N 4096

static double
s_now(void)
{
    return (double)rumor_clock_ns() * 1e-9;
}

int
main(int argc, char **argv)
{
    size_t r = argc > 1 ? strtoul(argv[1], NULL, 10) : 2;
    struct lowrank_backend_i be;
    void *ctx = NULL;
    if (lowrank_cpu_init(&be, &ctx) != RUMOR_OK)
        return 1;
    float *m = NULL, *g = NULL, *out = NULL, *p = NULL, *q = NULL;
    be.alloc(ctx, (size_t)N * N * 4, &m);
    be.alloc(ctx, (size_t)N * N * 4, &g);
    be.alloc(ctx, (size_t)N * N * 4, &out);
    be.alloc(ctx, N * r * 4, &p);
    be.alloc(ctx, N * r * 4, &q);
    for (size_t i = 0; i < (size_t)N * N; i++)
        g[i] = (float)(i % 7) - 3;
    for (size_t i = 0; i < N * r; i++)
        q[i] = (float)(i % 5) - 2;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = s_now();
        be.project_right(ctx, m, g, N, N, q, r, p);
        double t1 = s_now();
        be.orthogonalize(ctx, p, N, r, RUMOR_LOWRANK_ORTH_AUTO, 0);
        double t2 = s_now();
        be.project_left(ctx, m, NULL, N, N, p, r, q);
        double t3 = s_now();
        be.reconstruct(ctx, N, N, r, p, q, 1.0f, m, out, 0.0f);
        double t4 = s_now();
        double mb = (double)N * N * 4 / 1e9;
        printf("r=%zu right+EF %.4f s (%.1f GB/s of 12 B/elt) orth %.5f "
               "left %.4f s (%.1f GB/s) recon %.4f s (%.1f GB/s of 12 B/elt)\n",
               r,
               t1 - t0,
               3 * mb / (t1 - t0),
               t2 - t1,
               t3 - t2,
               mb / (t3 - t2),
               t4 - t3,
               3 * mb / (t4 - t3));
    }
    be.free(ctx);
    return 0;
}
