/* Placeholder owned by the lowrank work in progress; replaced before commit. */
#include "node/cli.h"

int
cli_lowrank_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rumor lowrank: not built yet\n");
    return 1;
}

void
cli_lowrank_help(FILE *out)
{
    fprintf(out, "usage: rumor lowrank (not built yet)\n");
}
