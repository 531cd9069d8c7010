/*
 * bench scaling: how the cost of a simulated gossip step grows with the
 * number of nodes (ring of 4, 8, 16, 32 nodes, one 1000 x 1000 matrix) and
 * with the model size (ring of 4, one square matrix of 1e5 to 1e8
 * parameters), per algorithm (issue 11). All nodes run in one process on
 * one core (rumor_sim_step), so seconds per step are the sum over nodes;
 * the per-node figure divides by the node count. The reference measured
 * in the same run is the single-core memory read rate: streaming every
 * node's model once, the floor of any step that mixes whole models
 * (x stream = seconds / that floor). Timing in-process (median of steps
 * after a warm-up step), not of whole commands, so set-up does not count.
 *
 * usage: rumor bench scaling [--max-params N]   (default 1e8; memory:
 * about 4 nodes x N x 4 bytes x the algorithm's copies, some GB at 1e8)
 *
 * Each size-sweep row runs in a child process, so its peak memory is its
 * own (wait4's ru_maxrss). A row is skipped, with a line that says why,
 * when its algorithm's peak at the previous size, scaled by the growth in
 * parameters, would not fit in the memory available: CHOCO at 1e8 needs
 * more than a 24 GiB host has, and the kernel's OOM killer would
 * otherwise end the whole sweep.
 */
#include "bench/bench.h"
#include "bench/bench_gossip.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int bench_scaling_main(int argc, char **argv);

static const struct bench_algo s_algos[] = {
    {"allreduce", "allreduce", "", 1.0},
    {"dpsgd", "dpsgd", "", 1.0},
    {"choco topk:ratio=0.01", "choco", "topk:ratio=0.01", 0.1},
    {"powergossip rank 1", "powergossip", "", 1.0},
    {"powersgd rank 1", "powersgd", "", 1.0},
};

#define ALGO_COUNT (sizeof s_algos / sizeof s_algos[0])

/* One table row: algorithm, nodes, parameters, s/step, per node, bytes. */
static int
s_row(const struct bench_algo *a, size_t nodes, size_t side, double gbps)
{
    struct rumor_lowrank_shape shape = {2, {side, side}};
    struct bench_model m = {"square", &shape, 1, side * side};
    char spec[32];
    snprintf(spec, sizeof spec, "ring:%zu", nodes);
    rumor_topology *topo = NULL;
    struct rumor_diag diag = {0};
    if (rumor_topology_from_spec(spec, 1, &topo, &diag) != RUMOR_OK)
        return 1;
    double s = 0, bytes = 0;
    int steps = m.numel >= 50000000 ? 1 : 3;
    int rc = bench_gossip_cost(a, &m, topo, steps, &s, &bytes);
    rumor_topology_destroy(&topo);
    if (rc != 0)
        return 1;
    double floor_s = (double)nodes * (double)m.numel * 4.0 / (gbps * 1e9);
    printf("%-24s %6zu %11zu %11.6f %13.3f %15.0f %9.1fx\n",
           a->label,
           nodes,
           m.numel,
           s,
           1e9 * s / ((double)nodes * (double)m.numel),
           bytes,
           s / floor_s);
    fflush(stdout);
    return 0;
}

static void
s_header(const char *title, double gbps)
{
    printf("\n%s; memory read %.2f GB/s\n", title, gbps);
    printf("%-24s %6s %11s %11s %13s %15s %10s\n",
           "algorithm",
           "nodes",
           "parameters",
           "s/step",
           "ns/param/node",
           "bytes/node/step",
           "x stream");
}

/* MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read. */
static double
s_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    static const char key[] = "MemAvailable:";
    char line[128];
    double kib = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, sizeof key - 1) == 0) {
            kib = strtod(line + sizeof key - 1, NULL);
            break;
        }
    fclose(f);
    return kib * 1024;
}

/* s_row in a child process; *peak: the child's peak resident bytes. */
static int
s_row_apart(const struct bench_algo *a, size_t side, double gbps, double *peak)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return s_row(a, 4, side, gbps);
    if (pid == 0)
        _exit(s_row(a, 4, side, gbps));
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid)
        return 1;
    *peak = (double)ru.ru_maxrss * 1024;
    if (WIFSIGNALED(status))
        printf("%-24s %6d %11zu killed by signal %d\n",
               a->label,
               4,
               side * side,
               WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* The size sweep; an algorithm's rows stop at the first size its
 * extrapolated peak does not fit. */
static int
s_size_sweep(const size_t *sides, size_t count, size_t max_params, double gbps)
{
    int status = 0;
    double peak[ALGO_COUNT] = {0};
    bool stopped[ALGO_COUNT] = {false};
    for (size_t k = 0; k < count && sides[k] * sides[k] <= max_params; k++) {
        size_t params = sides[k] * sides[k];
        double grow =
            k == 0 ? 0 : (double)params / (double)(sides[k - 1] * sides[k - 1]);
        for (size_t a = 0; a < ALGO_COUNT; a++) {
            double need = peak[a] * grow, avail = s_mem_available();
            if (!stopped[a] && avail > 0 && need > 0.9 * avail) {
                printf("%-24s %6d %11zu skipped: needs about %.1f GB "
                       "(%.2f GB at the size before), %.1f GB available\n",
                       s_algos[a].label,
                       4,
                       params,
                       need / 1e9,
                       peak[a] / 1e9,
                       avail / 1e9);
                stopped[a] = true;
            }
            if (!stopped[a])
                status |= s_row_apart(&s_algos[a], sides[k], gbps, &peak[a]);
        }
    }
    return status;
}

int
bench_scaling_main(int argc, char **argv)
{
    size_t max_params = 100000000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--max-params") == 0 && i + 1 < argc) {
            max_params = (size_t)strtod(argv[++i], NULL);
        } else {
            fprintf(stderr, "bench scaling: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    static const size_t node_counts[] = {4, 8, 16, 32};
    static const size_t sides[] = {316, 1000, 3162, 10000};
    int status = 0;
    double gbps = bench_mem_read_gbps();
    s_header("nodes: ring:N, one 1000 x 1000 matrix, simulator, one core",
             gbps);
    for (size_t k = 0; k < sizeof node_counts / sizeof node_counts[0]; k++)
        for (size_t a = 0; a < ALGO_COUNT; a++)
            status |= s_row(&s_algos[a], node_counts[k], 1000, gbps);
    gbps = bench_mem_read_gbps();
    s_header("model size: ring:4, one square matrix, simulator, one core",
             gbps);
    return status | s_size_sweep(sides,
                                 sizeof sides / sizeof sides[0],
                                 max_params,
                                 gbps);
}
