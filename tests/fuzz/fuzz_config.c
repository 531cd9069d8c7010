/*
 * Fuzz target: the node's config file parser (libinih through
 * rumor_node_config_parse_ini, a pure function of the bytes) and the option
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
    rumor_node_config *cfg = NULL;
    if (rumor_node_config_new(&cfg) != RUMOR_OK)
        return 0;
    const struct rumor_node_opts *opts = rumor_node_config_opts(cfg);
    struct rumor_node_opts before = *opts;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_node_config_parse_ini(cfg, "fuzz", data, size, &diag);
    if (rc != RUMOR_OK && memcmp(opts, &before, sizeof before) != 0)
        abort(); /* a refused file changed the options */
    if (rc == RUMOR_OK)
        (void)rumor_node_config_check(cfg, &diag);
    rumor_node_config_destroy(&cfg);
    return 0;
}
