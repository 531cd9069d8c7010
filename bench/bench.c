/*
 * `rumor bench [PART|all]`. Each part prints, for every figure, the same-run
 * reference it is compared with (memory bandwidth, a library, raw TCP) and
 * the ratio, plus the absolute number: a figure alone says little on a
 * shared 2-core machine, a ratio to a reference measured seconds earlier on
 * the same machine says much more.
 */
#include "bench/bench.h"

#include "rumor/core.h"

#include <stdlib.h>
#include <string.h>

int bench_core_main(int argc, char **argv);
int bench_compress_main(int argc, char **argv);
int bench_lowrank_main(int argc, char **argv);
int bench_net_main(int argc, char **argv);
int bench_gossip_main(int argc, char **argv);
int bench_scaling_main(int argc, char **argv);

static const struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} s_parts[] = {
    {"core",
     "rng and crc32c throughput against memory read bandwidth",
     bench_core_main},
    {"compress",
     "codec encode/decode GB/s against memory read bandwidth",
     bench_compress_main},
    {"lowrank",
     "PowerSGD step time against the memory floor and PyTorch",
     bench_lowrank_main},
    {"net",
     "raw TCP, plain ZeroMQ, CURVE and the cipher ceiling",
     bench_net_main},
    {"gossip",
     "seconds and bytes per gossip step, 8 simulated nodes",
     bench_gossip_main},
    {"scaling",
     "gossip step cost against node count and model size (simulator)",
     bench_scaling_main},
};

#define PART_COUNT (sizeof s_parts / sizeof s_parts[0])

void
bench_help(FILE *out)
{
    fprintf(out,
            "usage: rumor bench PART [ARGS...] | rumor bench all\n\nparts:\n");
    for (size_t i = 0; i < PART_COUNT; i++)
        fprintf(out, "  %-9s %s\n", s_parts[i].name, s_parts[i].summary);
}

int
bench_main(int argc, char **argv)
{
    if (argc < 2) {
        bench_help(stderr);
        return 2;
    }
    if (strcmp(argv[1], "all") == 0) {
        int status = 0;
        for (size_t i = 0; i < PART_COUNT; i++) {
            char *part_argv[] = {(char *)s_parts[i].name, NULL};
            printf("== rumor bench %s\n", s_parts[i].name);
            fflush(stdout);
            if (s_parts[i].run(1, part_argv) != 0)
                status = 1;
        }
        return status;
    }
    for (size_t i = 0; i < PART_COUNT; i++)
        if (strcmp(argv[1], s_parts[i].name) == 0)
            return s_parts[i].run(argc - 1, argv + 1);
    fprintf(stderr, "rumor bench: no part '%s'\n", argv[1]);
    bench_help(stderr);
    return 2;
}
