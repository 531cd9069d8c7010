/*
 * bench gossip: seconds per simulated gossip step for 8 nodes on a ring,
 * per algorithm, at 100x100 (the consensus experiment) and at the size of
 * ResNet-18 for CIFAR-10 (11.2 M parameters, shapes from
 * tests/data/resnet18_cifar10.shapes), with the bytes each node sends per
 * step (headers included). The reference, measured in the same run, is
 * the time to stream every node's model once at this machine's single-core
 * memory read bandwidth: a step that mixes models cannot be faster.
 */
#include "bench/bench_gossip.h"
#include "bench/bench.h"

#include <stdlib.h>
#include <string.h>

#define GOSSIP_BENCH_NODES 8
#define GOSSIP_BENCH_STEPS 3

static const struct bench_algo s_algos[] = {
    {"allreduce", "allreduce", "", 1.0},
    {"dpsgd", "dpsgd", "", 1.0},
    {"choco qsgd:bits=4", "choco", "qsgd:bits=4", 0.5},
    {"choco topk:ratio=0.01", "choco", "topk:ratio=0.01", 0.1},
    {"deepsqueeze qsgd:bits=4", "deepsqueeze", "qsgd:bits=4", 0.2},
    {"moniqua", "moniqua", "", 0.5},
    {"powergossip rank 1", "powergossip", "", 1.0},
    {"powersgd rank 1", "powersgd", "", 1.0},
};

static int
s_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int
bench_gossip_cost(const struct bench_algo *a,
                  const struct bench_model *m,
                  const rumor_topology *topo,
                  int steps,
                  double *seconds,
                  double *bytes_per_step)
{
    size_t n = rumor_topology_nodes(topo);
    float **data = calloc(n, sizeof *data);
    rumor_gossip **nodes = calloc(n, sizeof *nodes);
    double *times = calloc((size_t)steps, sizeof *times);
    struct rumor_tensor *tensors = calloc(m->count, sizeof *tensors);
    rumor_sim *sim = NULL;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "%s", a->algo);
    if (a->codec[0])
        snprintf(opts.codec, sizeof opts.codec, "%s", a->codec);
    opts.gamma = a->gamma;
    opts.rank = 1; /* the rows' names (powersgd's default is 4) */
    rumor_err rc = tensors && data && nodes && times ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t i = 0; i < n && rc == RUMOR_OK; i++) {
        data[i] = malloc(m->numel * sizeof(float));
        if (data[i] == NULL) {
            rc = RUMOR_ENOMEM;
            break;
        }
        rumor_rng_fill_uniform(7, i, 0, data[i], m->numel);
        size_t at = 0;
        for (size_t t = 0; t < m->count; t++) {
            tensors[t].data = data[i] + at;
            tensors[t].ndim = m->shapes[t].ndim;
            memcpy(tensors[t].shape,
                   m->shapes[t].dims,
                   m->shapes[t].ndim * sizeof(size_t));
            at += rumor_tensor_numel(&tensors[t]);
        }
        struct rumor_model model = {tensors, m->count};
        struct rumor_diag diag = {0};
        rc = rumor_gossip_new(&opts,
                              topo,
                              (uint32_t)i,
                              &model,
                              &nodes[i],
                              &diag);
    }
    if (rc == RUMOR_OK)
        rc = rumor_sim_new(nodes, n, &sim);
    uint64_t bytes0 = 0;
    for (uint64_t step = 1; step <= (uint64_t)steps + 1 && rc == RUMOR_OK;
         step++) {
        uint64_t t0 = rumor_clock_ns();
        rc = rumor_sim_step(sim, step);
        if (step == 1) /* warm-up: first touches, lazy state */
            bytes0 = rumor_sim_bytes_sent(sim, 0);
        else
            times[step - 2] = (double)(rumor_clock_ns() - t0) * 1e-9;
    }
    if (rc == RUMOR_OK) {
        qsort(times, (size_t)steps, sizeof times[0], s_compare_double);
        *seconds = times[steps / 2];
        *bytes_per_step =
            (double)(rumor_sim_bytes_sent(sim, 0) - bytes0) / steps;
    }
    rumor_sim_destroy(&sim);
    for (size_t i = 0; nodes && data && i < n; i++) {
        rumor_gossip_destroy(&nodes[i]);
        free(data[i]);
    }
    free(nodes);
    free(data);
    free(times);
    free(tensors);
    if (rc != RUMOR_OK)
        fprintf(stderr,
                "bench gossip: %s on %s: %s\n",
                a->label,
                m->name,
                rumor_strerror(rc));
    return rc == RUMOR_OK ? 0 : 1;
}

static int
s_load_resnet18(struct bench_model *m)
{
    const char *path = "tests/data/resnet18_cifar10.shapes";
    rumor_buf buf;
    rumor_buf_init(&buf, 1u << 20);
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_buf_read_file(&buf, path);
    if (rc == RUMOR_OK)
        rc = rumor_lowrank_shapes_parse((const char *)buf.data,
                                        buf.len,
                                        path,
                                        &m->shapes,
                                        &m->count,
                                        &diag);
    rumor_buf_free(&buf);
    if (rc != RUMOR_OK) {
        fprintf(stderr,
                "bench gossip: %s: %s (run from the repository root)\n",
                path,
                rumor_strerror(rc));
        return 1;
    }
    m->name = "resnet18";
    m->numel = 0;
    for (size_t t = 0; t < m->count; t++) {
        size_t numel = 1;
        for (size_t d = 0; d < m->shapes[t].ndim; d++)
            numel *= m->shapes[t].dims[d];
        m->numel += numel;
    }
    return 0;
}

int
bench_gossip_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static struct rumor_lowrank_shape square = {2, {100, 100}};
    struct bench_model models[2] = {{"100x100", &square, 1, 10000}, {0}};
    if (s_load_resnet18(&models[1]) != 0)
        return 1;
    rumor_topology *topo = NULL;
    struct rumor_diag diag = {0};
    if (rumor_topology_from_spec("ring:8", 1, &topo, &diag) != RUMOR_OK)
        return 1;
    double floor_gbps = bench_mem_read_gbps();
    printf("8 nodes on a ring, simulator, one core; memory read %.2f GB/s\n",
           floor_gbps);
    printf("%-26s %-9s %11s %15s %12s\n",
           "algorithm",
           "model",
           "s/step",
           "bytes/node/step",
           "x stream");
    int status = 0;
    for (size_t mi = 0; mi < 2; mi++) {
        /* Streaming every node's model once: the floor of any mixing step. */
        double floor_s =
            GOSSIP_BENCH_NODES * models[mi].numel * 4.0 / (floor_gbps * 1e9);
        for (size_t a = 0; a < sizeof s_algos / sizeof s_algos[0]; a++) {
            double s = 0, bytes = 0;
            if (bench_gossip_cost(&s_algos[a],
                                  &models[mi],
                                  topo,
                                  GOSSIP_BENCH_STEPS,
                                  &s,
                                  &bytes) != 0) {
                status = 1;
                continue;
            }
            printf("%-26s %-9s %11.6f %15.0f %11.1fx\n",
                   s_algos[a].label,
                   models[mi].name,
                   s,
                   bytes,
                   s / floor_s);
            fflush(stdout);
        }
    }
    free(models[1].shapes);
    rumor_topology_destroy(&topo);
    return status;
}
