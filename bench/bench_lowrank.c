/*
 * `rumor bench lowrank [--steps N] [--no-torch]`: seconds per PowerSGD step
 * with error feedback (M = g + e, P = M Q, orthogonalize, Q = M^T P,
 * approx = P Q^T, e = M - approx; one node, so the all-reduces are
 * identities) for one 4096 x 4096 matrix and for the ResNet-18 shapes of
 * tests/data/resnet18_cifar10.shapes, at ranks 1, 2, 4, on the cpu backend
 * (and on cuda when a GPU is usable).
 *
 * Each figure is printed with two same-run references:
 *  - the memory-traffic floor: 16 bytes per element of the compressed
 *    matrices (read g, read e, write e, write the approximation) at the
 *    single-core read bandwidth measured by bench_mem_read_gbps(). The
 *    bandwidth is measured again between rows and each row's floor uses
 *    the higher of the two measurements around it, so a slow moment of a
 *    shared machine neither flatters nor hurts one row alone. The rate,
 *    the gradients and the error memories are all on transparent huge
 *    pages where the system allows them (rumor_mem_alloc_large);
 *  - PyTorch's own hook (tests/lowrank/bench_hook.py through
 *    /usr/bin/python3, python3-torch, one thread, CPU) on the same shapes.
 * Two last rows at rank 2: "2/1s", epfml's one-sided variant (one product
 * per step, alternating sides), which PyTorch has no hook for, and "2/4K",
 * the two-sided step on gradients from plain malloc (4 KiB pages where THP is
 * "madvise", 16-byte aligned), as a model allocated without huge-page
 * advice has them; its floor is still the huge-page rate, so the row
 * shows what such a model loses (the error memories stay on huge pages).
 * The step is the median of N timed steps after one warm-up step. Threads
 * are printed: the cpu kernels are single-threaded, OpenBLAS (QR at rank
 * 4, and any rank above 8) runs with what `rumor` set (one thread unless
 * OPENBLAS_NUM_THREADS says otherwise), the hook with torch's one.
 */
#include "bench/bench.h"

#include "rumor/lowrank.h"

#include <cblas.h>

#include <stdlib.h>
#include <string.h>

#define LR_BENCH_SHAPES    "tests/data/resnet18_cifar10.shapes"
#define LR_BENCH_HOOK      "tests/lowrank/bench_hook.py"
#define LR_BENCH_MAX_STEPS 100
#define LR_BENCH_RANKS     3

int bench_lowrank_main(int argc, char **argv);

static const size_t s_ranks[LR_BENCH_RANKS] = {1, 2, 4};

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds per step of the compressor on grads (host or device). */
static rumor_err
s_time_steps(rumor_lowrank_psgd *c, float **grads, int steps, double *out)
{
    double t[LR_BENCH_MAX_STEPS + 1];
    for (int s = 0; s <= steps; s++) {
        struct rumor_lowrank_xchg x;
        bool done = false;
        uint64_t t0 = rumor_clock_ns();
        rumor_err rc = rumor_lowrank_psgd_begin(c, grads, &x);
        while (rc == RUMOR_OK && !done)
            rc = rumor_lowrank_psgd_next(c, &x, &done);
        if (rc == RUMOR_OK)
            rc = rumor_lowrank_psgd_end(c, grads);
        if (rc != RUMOR_OK)
            return rc;
        t[s] = (double)(rumor_clock_ns() - t0) * 1e-9;
    }
    qsort(t + 1, (size_t)steps, sizeof t[0], s_cmp_double);
    *out = t[1 + steps / 2];
    return RUMOR_OK;
}

/* Runs the hook script; fills secs[k] for each rank (0 when missing). */
static void
s_torch_times(const char *what,
              int steps,
              double secs[LR_BENCH_RANKS],
              const char **why)
{
    memset(secs, 0, LR_BENCH_RANKS * sizeof secs[0]);
    char cmd[512];
    snprintf(cmd,
             sizeof cmd,
             "/usr/bin/python3 %s %s %d 1 2 4 2>/dev/null",
             LR_BENCH_HOOK,
             what,
             steps);
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
        *why = "cannot start /usr/bin/python3";
        return;
    }
    char line[256];
    while (fgets(line, sizeof line, p) != NULL) {
        char *end = NULL;
        if (strncmp(line, "rank ", 5) != 0)
            continue;
        long rank = strtol(line + 5, &end, 10);
        const char *key = " seconds_per_step ";
        if (end == NULL || strncmp(end, key, strlen(key)) != 0)
            continue;
        double v = strtod(end + strlen(key), NULL);
        for (int k = 0; k < LR_BENCH_RANKS; k++)
            if ((long)s_ranks[k] == rank)
                secs[k] = v;
    }
    if (pclose(p) != 0 && secs[0] == 0)
        *why = "python3-torch missing or the hook script failed";
}

static int
s_workload(const char *label,
           const char *torch_arg,
           const struct rumor_lowrank_shape *shapes,
           size_t count,
           int steps,
           bool torch)
{
    size_t numel = 0, *offs = calloc(count, sizeof *offs);
    if (offs == NULL)
        return 1;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        if (rumor_lowrank_matricize(&shapes[i], &n, &m) != RUMOR_OK) {
            free(offs);
            return 1;
        }
        offs[i] = numel;
        numel += n * m;
    }
    /* On huge pages like the floor's buffer (bench/membw.c), as a model
     * allocated with rumor_mem_alloc_large, or by PyTorch where THP is
     * "always", is. */
    float *data = rumor_mem_alloc_large(numel * sizeof *data);
    /* The last row's gradients: plain malloc, so 4 KiB pages where THP is
     * "madvise" and 16-byte alignment, as a model from calloc (e.g.
     * rumor_model_clone) or from an allocator without THP advice has. */
    float *plain = malloc(numel * sizeof *plain);
    float **ptrs = calloc(count, sizeof *ptrs);
    float **plain_ptrs = calloc(count, sizeof *plain_ptrs);
    int status = 1;
    if (data == NULL || plain == NULL || ptrs == NULL || plain_ptrs == NULL)
        goto done;
    struct rumor_rng rng;
    rumor_rng_init(&rng, 7, 0);
    for (size_t i = 0; i < numel; i++)
        data[i] = rumor_rng_uniform(&rng) - 0.5f;
    memcpy(plain, data, numel * sizeof *plain);
    for (size_t i = 0; i < count; i++) {
        ptrs[i] = data + offs[i];
        plain_ptrs[i] = plain + offs[i];
    }
    double torch_s[LR_BENCH_RANKS] = {0};
    const char *why = "--no-torch";
    if (torch)
        s_torch_times(torch_arg, steps, torch_s, &why);
    printf("\n%s: %zu tensors, %zu parameters\n", label, count, numel);
    printf("%4s %12s %12s %9s %12s %9s\n",
           "rank",
           "s/step",
           "floor s",
           "x floor",
           "torch s",
           "speedup");
    /* Two extra rows at rank 2: epfml's one-sided variant (one product
     * per step, so two passes over M instead of three), and the step on
     * gradients in plain malloc'd memory (the floor stays the huge-page
     * rate: what the same step loses on 4 KiB pages). */
    double gbps_before = bench_mem_read_gbps();
    for (int k = 0; k <= LR_BENCH_RANKS + 1; k++) {
        bool one_sided = k == LR_BENCH_RANKS;
        bool small_pages = k == LR_BENCH_RANKS + 1;
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = k >= LR_BENCH_RANKS ? 2 : s_ranks[k];
        o.one_sided = one_sided;
        rumor_lowrank_psgd *c = NULL;
        rumor_err rc = rumor_lowrank_psgd_new(&c, shapes, count, &o);
        double secs = 0;
        if (rc == RUMOR_OK)
            rc = s_time_steps(c, small_pages ? plain_ptrs : ptrs, steps, &secs);
        size_t compressed = 0;
        for (size_t i = 0; rc == RUMOR_OK && i < count; i++)
            if (rumor_lowrank_psgd_compressed(c, i)) {
                size_t n = 0, m = 0;
                rc = rumor_lowrank_matricize(&shapes[i], &n, &m);
                compressed += n * m;
            }
        rumor_lowrank_psgd_destroy(&c);
        if (rc != RUMOR_OK) {
            fprintf(stderr, "bench lowrank: %s\n", rumor_strerror(rc));
            goto done;
        }
        double gbps_after = bench_mem_read_gbps();
        double gbps = gbps_after > gbps_before ? gbps_after : gbps_before;
        gbps_before = gbps_after;
        double floor_s = 16.0 * (double)compressed / (gbps * 1e9);
        char row[16];
        snprintf(row,
                 sizeof row,
                 "%zu%s",
                 o.rank,
                 one_sided     ? "/1s"
                 : small_pages ? "/4K"
                               : "");
        printf("%4s %12.6f %12.6f %8.2fx", row, secs, floor_s, secs / floor_s);
        if (k < LR_BENCH_RANKS && torch_s[k] > 0)
            printf(" %12.6f %8.2fx\n", torch_s[k], torch_s[k] / secs);
        else
            printf(" %12s %9s\n", "-", "-");
    }
    if (torch && torch_s[0] == 0)
        printf("(PyTorch reference skipped: %s)\n", why);
    status = 0;
done:
    free(offs);
    free(data);
    free(plain);
    free(ptrs);
    free(plain_ptrs);
    return status;
}

int
bench_lowrank_main(int argc, char **argv)
{
    int steps = 11;
    bool torch = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (end == NULL || *end != '\0' || v < 1 ||
                v > LR_BENCH_MAX_STEPS) {
                fprintf(stderr,
                        "bench lowrank: --steps 1..%d\n",
                        LR_BENCH_MAX_STEPS);
                return 2;
            }
            steps = (int)v;
        } else if (strcmp(argv[i], "--no-torch") == 0) {
            torch = false;
        } else {
            fprintf(stderr,
                    "usage: rumor bench lowrank [--steps N] [--no-torch]\n");
            return 2;
        }
    }
    double gbps = bench_mem_read_gbps();
    printf("memory read (1 core) %.2f GB/s: the floor is 16 bytes per "
           "element of M at this rate (measured again between rows; each "
           "row uses the higher rate around it)\n",
           gbps);
    printf("(the rate, the gradients and the error memories are on "
           "transparent huge pages where THP allows; row 2/4K: gradients "
           "from plain malloc)\n");
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    printf("threads: cpu kernels 1, OpenBLAS %d (OPENBLAS_NUM_THREADS=%s), "
           "PyTorch hook on CPU 1 (torch.set_num_threads); median of %d "
           "steps\n",
           openblas_get_num_threads(),
           env != NULL ? env : "unset",
           steps);
    const struct rumor_lowrank_shape big = {.ndim = 2, .dims = {4096, 4096}};
    if (s_workload("4096 x 4096", "4096x4096", &big, 1, steps, torch) != 0)
        return 1;
    rumor_buf text;
    rumor_buf_init(&text, 1 << 20);
    struct rumor_lowrank_shape *shapes = NULL;
    size_t count = 0;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_buf_read_file(&text, LR_BENCH_SHAPES);
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_shapes_parse((const char *)text.data,
                                        text.len,
                                        LR_BENCH_SHAPES,
                                        &shapes,
                                        &count,
                                        &diag);
    rumor_buf_free(&text);
    if (rc != RUMOR_OK) {
        fprintf(stderr,
                "bench lowrank: %s: %s (run from the repository "
                "root)\n",
                LR_BENCH_SHAPES,
                rumor_strerror(rc));
        return 1;
    }
    int status = s_workload("ResNet-18 (CIFAR-10)",
                            LR_BENCH_SHAPES,
                            shapes,
                            count,
                            steps,
                            torch);
    free(shapes);
    return status;
}
