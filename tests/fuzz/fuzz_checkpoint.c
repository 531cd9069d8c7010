/*
 * Fuzz target: checkpoint files. rumor_checkpoint_decode (the container:
 * header, sections, crc32c, trailer) on the bytes; a file that decodes is
 * encoded again, which must give the same bytes, and its sections are
 * applied to a node's parts (a least-squares model of one 4 x 3 tensor,
 * momentum SGD, CHOCO, --stale 2 so a section of exchanges in flight is
 * checked too), which must refuse a checkpoint that does not fit without
 * changing the model. Crafted inputs get past the crc32c checks
 * because the seed corpus holds valid files and libFuzzer's CMP tracing
 * learns the sums.
 */
#include "rumor/node.h"

#include "node/checkpoint_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_apply(const struct rumor_checkpoint *c)
{
    rumor_topology *t = NULL;
    if (rumor_topology_from_spec("ring:4", 1, &t, NULL) != RUMOR_OK)
        abort();
    float x[12] = {0}, before[12];
    struct rumor_tensor ts[1] = {{x, 2, {4, 3, 0, 0, 0, 0, 0, 0}}};
    struct rumor_model m = {ts, 1};
    struct rumor_gossip_opts go;
    rumor_gossip_opts_default(&go);
    snprintf(go.algo, sizeof go.algo, "choco");
    rumor_gossip *g = NULL;
    struct rumor_optim_opts oo;
    rumor_optim_opts_default(&oo);
    oo.kind = RUMOR_OPTIM_MOMENTUM;
    rumor_optim *opt = NULL;
    if (rumor_gossip_new(&go, t, 1, &m, &g, NULL) != RUMOR_OK ||
        rumor_optim_new(&oo, &m, &opt) != RUMOR_OK)
        abort();
    struct node_ckpt_counters k = {0};
    struct node_ckpt_parts p = {.node = 1,
                                .nodes = 4,
                                .seed = 1,
                                .algo = "choco",
                                .model = &m,
                                .optim = opt,
                                .gossip = g,
                                .counters = &k,
                                .stale = 2}; /* so the stale section is read */
    memcpy(before, x, sizeof x);
    if (node_ckpt_apply(c, &p, NULL) != RUMOR_OK &&
        memcmp(before, x, sizeof x) != 0)
        abort(); /* a refused checkpoint changed the model */
    rumor_optim_destroy(&opt);
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&t);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rumor_checkpoint c;
    if (rumor_checkpoint_decode(data, size, &c, NULL) != RUMOR_OK)
        return 0;
    rumor_buf img;
    rumor_buf_init(&img, (size_t)1 << 32);
    if (rumor_checkpoint_encode(&c, &img) != RUMOR_OK || img.len != size ||
        memcmp(img.data, data, size) != 0)
        abort(); /* decode and encode disagree */
    rumor_buf_free(&img);
    s_apply(&c);
    return 0;
}
