/*
 * Fuzz target: the node's config file parser (libinih through
 * rumor_node_opts_parse_ini, a pure function of the bytes) and the option
 * checks after it. A parse either applies every option or none: a refused
 * file must leave the options byte for byte as they were.
 */
#include "rumor/node.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rumor_node_opts opts, before;
    rumor_node_opts_default(&opts);
    before = opts;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_node_opts_parse_ini(&opts, "fuzz", data, size, &diag);
    if (rc != RUMOR_OK) {
        if (memcmp(&opts, &before, sizeof opts) != 0)
            abort(); /* a refused file changed the options */
        return 0;
    }
    (void)rumor_node_opts_check(&opts, &diag);
    return 0;
}
