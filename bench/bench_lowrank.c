/* Placeholder owned by the lowrank work in progress; replaced before commit. */
#include "bench/bench.h"

int bench_lowrank_main(int argc, char **argv);

int
bench_lowrank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rumor bench lowrank: not built yet\n");
    return 1;
}
