/* Placeholder owned by the net work in progress; replaced before commit. */
#include "bench/bench.h"

int bench_net_main(int argc, char **argv);

int
bench_net_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rumor bench net: not built yet\n");
    return 1;
}
