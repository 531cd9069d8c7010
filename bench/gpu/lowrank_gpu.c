/*
 * bench/gpu/lowrank_gpu.c: the PowerSGD step of lowrank/ on the cuda
 * backend (issue 4's H200 target, issue 11's GPU tier), built and run on a
 * lent GPU by bench/gpu/run.sh; not part of the `rumor` binary (it needs
 * the CUDA runtime and a GPU, which CI machines lack).
 *
 * Reference measured in the same run: the device-to-device copy bandwidth
 * (cudaMemcpy of 1 GiB, bytes read + written, the way the H200's 4.3 TB/s
 * is quoted), giving the step's floor of 16 bytes per element of the
 * compressed matrices (read g, read e, write e, write the approximation),
 * as the CPU benchmark's floor. Correctness: one step on the same input
 * with the cpu backend and the cuda backend (same seed, so the same first
 * Q) must give approximations within a relative Frobenius distance of
 * 1e-3 (fp32, different summation orders); the program exits 1 otherwise.
 *
 * Two paths are timed: the compressor as built (ranks up to 16: the work
 * lists, one launch per phase over every matrix, lowrank/cuda.cu) and,
 * for comparison, the same backend with the list slots removed (one
 * batched launch per group of same-shaped matrices), the path measured
 * before the lists existed, except that its orthogonalization up to rank
 * 16 is now the lists' kernel (no cuSOLVER) and its factors move in one
 * copy per phase.
 *
 * usage: lowrank_gpu [STEPS [SHAPES...]]   (from the repository root; the
 * shapes files default to ResNet-18's)
 */
#include "rumor/core.h"
#include "rumor/lowrank.h"

#include "lowrank/backend.h" /* linked with librumor.a: the grouped path */

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_SHAPES    "tests/data/resnet18_cifar10.shapes"
#define GPU_COPY_SIZE ((size_t)1 << 30)
#define GPU_MAX_STEPS 50
#define GPU_TOLERANCE 1e-3

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CUDA_OK(call) s_cuda_ok((call), #call)

static int
s_cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "lowrank_gpu: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* Device-to-device copy bandwidth in GB/s, bytes read + written. */
static double
s_copy_gbps(void)
{
    void *a = NULL, *b = NULL;
    double t[7];
    if (!CUDA_OK(cudaMalloc(&a, GPU_COPY_SIZE)) ||
        !CUDA_OK(cudaMalloc(&b, GPU_COPY_SIZE)))
        return 0;
    cudaMemset(a, 1, GPU_COPY_SIZE);
    cudaMemcpy(b, a, GPU_COPY_SIZE, cudaMemcpyDeviceToDevice);
    cudaDeviceSynchronize();
    for (int i = 0; i < 7; i++) {
        uint64_t t0 = rumor_clock_ns();
        cudaMemcpy(b, a, GPU_COPY_SIZE, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        t[i] = 2.0 * GPU_COPY_SIZE / (double)(rumor_clock_ns() - t0);
    }
    cudaFree(a);
    cudaFree(b);
    qsort(t, 7, sizeof t[0], s_cmp_double);
    return t[3];
}

/* One full step (begin, next..., end) on grads; identity all-reduces. */
static rumor_err
s_step(rumor_lowrank_psgd *c, float **grads, float **out)
{
    struct rumor_lowrank_xchg x;
    bool done = false;
    rumor_err rc = rumor_lowrank_psgd_begin(c, grads, &x);
    while (rc == RUMOR_OK && !done)
        rc = rumor_lowrank_psgd_next(c, &x, &done);
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_psgd_end(c, out);
    return rc;
}

struct gpu_model {
    const char *label;
    struct rumor_lowrank_shape *shapes;
    size_t count, numel, *offs;
};

/* The cuda backend without its list slots: the per-shape-group path. */
static rumor_err
s_new_grouped(const struct gpu_model *m,
              const struct rumor_lowrank_psgd_opts *o,
              rumor_lowrank_psgd **c)
{
    struct lowrank_backend_i be;
    void *ctx = NULL;
    rumor_err rc = lowrank_cuda_init(&be, &ctx);
    if (rc != RUMOR_OK)
        return rc;
    be.orthogonalize_list = NULL;
    be.project_right_list = NULL;
    be.project_left_list = NULL;
    be.reconstruct_list = NULL;
    return lowrank_psgd_new_on(c, m->shapes, m->count, o, &be, ctx);
}

static rumor_err
s_new(const struct gpu_model *m, size_t rank, bool cuda, rumor_lowrank_psgd **c)
{
    struct rumor_lowrank_psgd_opts o;
    rumor_lowrank_psgd_opts_default(&o);
    o.rank = rank;
    o.want_cuda = cuda;
    rumor_err rc = rumor_lowrank_psgd_new(c, m->shapes, m->count, &o);
    if (rc == RUMOR_OK && cuda &&
        rumor_lowrank_psgd_device(*c) != RUMOR_DEVICE_CUDA) {
        fprintf(stderr, "lowrank_gpu: the cuda backend is not usable\n");
        rumor_lowrank_psgd_destroy(c);
        return RUMOR_EINVAL;
    }
    return rc;
}

/* Relative Frobenius distance of the cuda step's output to the cpu one. */
static int
s_check(const struct gpu_model *m, size_t rank, const float *host, float *dev)
{
    size_t bytes = m->numel * sizeof(float);
    float *cpu = malloc(bytes), *gpu = malloc(bytes);
    float **hp = calloc(m->count, sizeof *hp),
          **dp = calloc(m->count, sizeof *dp);
    rumor_lowrank_psgd *c = NULL, *g = NULL;
    int ok = 0;
    if (cpu == NULL || gpu == NULL || hp == NULL || dp == NULL)
        goto done;
    memcpy(cpu, host, bytes);
    cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    for (size_t i = 0; i < m->count; i++) {
        hp[i] = cpu + m->offs[i];
        dp[i] = dev + m->offs[i];
    }
    if (s_new(m, rank, false, &c) != RUMOR_OK ||
        s_new(m, rank, true, &g) != RUMOR_OK || s_step(c, hp, hp) != RUMOR_OK ||
        s_step(g, dp, dp) != RUMOR_OK)
        goto done;
    cudaDeviceSynchronize();
    cudaMemcpy(gpu, dev, bytes, cudaMemcpyDeviceToHost);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < m->count; i++) {
        if (!rumor_lowrank_psgd_compressed(c, i))
            continue;
        size_t n = 0, k = 0;
        rumor_lowrank_matricize(&m->shapes[i], &n, &k);
        for (size_t j = 0; j < n * k; j++) {
            double d = (double)cpu[m->offs[i] + j] - gpu[m->offs[i] + j];
            diff += d * d;
            norm += (double)cpu[m->offs[i] + j] * cpu[m->offs[i] + j];
        }
    }
    double rel = sqrt(diff / (norm > 0 ? norm : 1));
    ok = rel <= GPU_TOLERANCE;
    printf("  check rank %zu: cuda vs cpu relative distance %.2e (%s)\n",
           rank,
           rel,
           ok ? "ok" : "FAILED");
done:
    rumor_lowrank_psgd_destroy(&c);
    rumor_lowrank_psgd_destroy(&g);
    free(cpu);
    free(gpu);
    free(hp);
    free(dp);
    return ok;
}

/* The median seconds of a step over steps timed steps after one warm-up
 * (which uploads the work lists); 0 on failure. */
static double
s_time(rumor_lowrank_psgd *c, float **dp, int steps)
{
    double t[GPU_MAX_STEPS + 1];
    rumor_err rc = RUMOR_OK;
    for (int s = 0; s <= steps && rc == RUMOR_OK; s++) {
        cudaDeviceSynchronize();
        uint64_t t0 = rumor_clock_ns();
        rc = s_step(c, dp, dp);
        cudaDeviceSynchronize();
        t[s] = (double)(rumor_clock_ns() - t0) * 1e-9;
    }
    if (rc != RUMOR_OK) {
        fprintf(stderr, "lowrank_gpu: %s\n", rumor_strerror(rc));
        return 0;
    }
    qsort(t + 1, (size_t)steps, sizeof t[0], s_cmp_double);
    return t[1 + steps / 2];
}

static int
s_bench(const struct gpu_model *m, int steps, double copy_gbps)
{
    size_t bytes = m->numel * sizeof(float);
    float *host = malloc(bytes), *dev = NULL;
    float **dp = calloc(m->count, sizeof *dp);
    int status = 1;
    if (host == NULL || dp == NULL ||
        !CUDA_OK(cudaMalloc((void **)&dev, bytes)))
        goto done;
    struct rumor_rng rng;
    rumor_rng_init(&rng, 7, 0);
    for (size_t i = 0; i < m->numel; i++)
        host[i] = rumor_rng_uniform(&rng) - 0.5f;
    for (size_t i = 0; i < m->count; i++)
        dp[i] = dev + m->offs[i];
    printf("\n%s: %zu tensors, %zu parameters\n", m->label, m->count, m->numel);
    printf("%4s %12s %12s %9s %12s %9s\n",
           "rank",
           "s/step",
           "floor s",
           "x floor",
           "grouped s",
           "x floor");
    static const size_t ranks[] = {1, 2, 4};
    for (size_t k = 0; k < 3; k++) {
        if (!s_check(m, ranks[k], host, dev))
            goto done;
        rumor_lowrank_psgd *c = NULL, *g = NULL;
        struct rumor_lowrank_psgd_opts o;
        rumor_lowrank_psgd_opts_default(&o);
        o.rank = ranks[k];
        if (s_new(m, ranks[k], true, &c) != RUMOR_OK ||
            s_new_grouped(m, &o, &g) != RUMOR_OK) {
            rumor_lowrank_psgd_destroy(&c);
            goto done;
        }
        size_t compressed = 0;
        for (size_t i = 0; i < m->count; i++)
            if (rumor_lowrank_psgd_compressed(c, i)) {
                size_t n = 0, q = 0;
                rumor_lowrank_matricize(&m->shapes[i], &n, &q);
                compressed += n * q;
            }
        double secs = s_time(c, dp, steps), grouped = s_time(g, dp, steps);
        rumor_lowrank_psgd_destroy(&c);
        rumor_lowrank_psgd_destroy(&g);
        if (secs <= 0 || grouped <= 0)
            goto done;
        double floor_s = 16.0 * (double)compressed / (copy_gbps * 1e9);
        printf("%4zu %12.6f %12.6f %8.2fx %12.6f %8.2fx\n",
               ranks[k],
               secs,
               floor_s,
               secs / floor_s,
               grouped,
               grouped / floor_s);
    }
    status = 0;
done:
    cudaFree(dev);
    free(host);
    free(dp);
    return status;
}

static int
s_model(struct gpu_model *m)
{
    m->offs = calloc(m->count, sizeof *m->offs);
    if (m->offs == NULL)
        return 1;
    m->numel = 0;
    for (size_t i = 0; i < m->count; i++) {
        size_t n = 0, k = 0;
        if (rumor_lowrank_matricize(&m->shapes[i], &n, &k) != RUMOR_OK)
            return 1;
        m->offs[i] = m->numel;
        m->numel += n * k;
    }
    return 0;
}

/* Reads a shapes file (docs/internals/lowrank.md) into m->shapes. */
static int
s_shapes_load(const char *path, struct gpu_model *m)
{
    rumor_buf text;
    rumor_buf_init(&text, 1 << 20);
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_buf_read_file(&text, path);
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_shapes_parse((const char *)text.data,
                                        text.len,
                                        path,
                                        &m->shapes,
                                        &m->count,
                                        &diag);
    rumor_buf_free(&text);
    if (rc != RUMOR_OK)
        fprintf(stderr,
                "lowrank_gpu: %s: %s %s\n",
                path,
                rumor_strerror(rc),
                diag.msg);
    return rc == RUMOR_OK ? 0 : 1;
}

int
main(int argc, char **argv)
{
    int steps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 11;
    if (steps < 1 || steps > GPU_MAX_STEPS)
        steps = 11;
    struct cudaDeviceProp prop;
    if (!CUDA_OK(cudaGetDeviceProperties(&prop, 0)))
        return 1;
    double copy = s_copy_gbps();
    printf("GPU %s, %d SMs; device-to-device copy %.1f GB/s (read + written, "
           "median of 7 copies of 1 GiB): the floor is 16 bytes per element at "
           "this rate\n",
           prop.name,
           prop.multiProcessorCount,
           copy);
    struct rumor_lowrank_shape big = {.ndim = 2, .dims = {4096, 4096}};
    struct gpu_model square = {"4096 x 4096", &big, 1, 0, NULL};
    int status = s_model(&square) != 0 || s_bench(&square, steps, copy) != 0;
    free(square.offs);
    int files = argc > 2 ? argc - 2 : 1;
    for (int f = 0; f < files; f++) {
        const char *path = argc > 2 ? argv[2 + f] : GPU_SHAPES;
        struct gpu_model m = {path, NULL, 0, 0, NULL};
        if (s_shapes_load(path, &m) != 0 || s_model(&m) != 0 ||
            s_bench(&m, steps, copy) != 0)
            status = 1;
        free(m.shapes);
        free(m.offs);
    }
    return status;
}
