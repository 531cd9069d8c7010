/*
 * Fuzz target: the topology file parser and everything it builds (checks,
 * weights, formatting). A parsed topology is formatted and parsed again:
 * the second parse must succeed, since the formatter only writes what the
 * parser accepts.
 */
#include "rumor/topology.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag;
    if (rumor_topology_parse((const char *)data, size, "fuzz", &t, &diag) !=
        RUMOR_OK)
        return 0;
    rumor_buf buf;
    rumor_buf_init(&buf, 64u << 20);
    if (rumor_topology_format(t, &buf) == RUMOR_OK) {
        rumor_topology *again = NULL;
        rumor_err rc = rumor_topology_parse((const char *)buf.data,
                                            buf.len,
                                            "again",
                                            &again,
                                            &diag);
        if (rc != RUMOR_OK && rc != RUMOR_ENOMEM)
            abort(); /* the formatter wrote something the parser refuses */
        rumor_topology_destroy(&again);
    }
    rumor_buf_free(&buf);
    rumor_topology_destroy(&t);
    return 0;
}
