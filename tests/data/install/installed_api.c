/* Built by tests/python/test_install.py against an installed Rumor, with
 * nothing but `pkg-config --cflags --libs rumor`: prints the library's
 * version and the spectral gap of the ring in argv[1] (LAPACK, through
 * librumor). */
#include <rumor/core.h>
#include <rumor/topology.h>
/* not used: here so that the installed parts of these headers
 * (rumor/gossip/, rumor/node/) are compiled from the installed tree */
#include <rumor/gossip.h>
#include <rumor/node.h>

#include <stdio.h>

int
main(int argc, char **argv)
{
    rumor_topology *ring = NULL;
    struct rumor_diag diag = {0};
    double gap = 0;
    if (argc != 2 ||
        rumor_topology_from_spec(argv[1], 1, &ring, &diag) != RUMOR_OK ||
        rumor_topology_spectral_gap(ring, &gap) != RUMOR_OK) {
        fprintf(stderr, "installed_api: %s\n", diag.msg);
        return 1;
    }
    printf("%s %zu %.12f\n", rumor_version(), rumor_topology_nodes(ring), gap);
    rumor_topology_destroy(&ring);
    return 0;
}
