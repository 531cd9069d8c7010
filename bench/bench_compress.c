/* Placeholder owned by the compress work in progress; replaced before commit. */
#include "bench/bench.h"

int bench_compress_main(int argc, char **argv);

int
bench_compress_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rumor bench compress: not built yet\n");
    return 1;
}
