/* Placeholder owned by the keygen work in progress; replaced before commit. */
#include "node/cli.h"

int
cli_keygen_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rumor keygen: not built yet\n");
    return 1;
}

void
cli_keygen_help(FILE *out)
{
    fprintf(out, "usage: rumor keygen (not built yet)\n");
}
