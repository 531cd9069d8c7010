/*
 * Fuzz target: rumor_gossip_state_load and rumor_gossip_state_adopt, the
 * decoder of an algorithm's state (from a checkpoint, or from a peer). The
 * first byte picks the algorithm (bit 0x40: choco and powersgd with the
 * adaptive "rule" controller; bit 0x80: localsgd with SAEF, allreduce
 * compressed with DGC's memory; bit 0x10: localsgd in 3 streaming
 * fragments) and, with bit 0x20, an adopt instead of a
 * load; the rest is the state, loaded into node 1 of a 4-node ring with a
 * small two-tensor model. A refused state must leave the instance as it
 * was; an accepted one must save back to bytes that load again and save
 * to the same bytes (a load is exact), and adopting them changes nothing
 * (what an adopt takes is what the instance has already).
 */
#include "rumor/gossip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const s_algos[] = {"choco",
                                      "deepsqueeze",
                                      "powergossip",
                                      "powersgd",
                                      "localsgd",
                                      "dpsgd",
                                      "allreduce",
                                      "moniqua"};

static void
s_save(const rumor_gossip *g, rumor_buf *b)
{
    rumor_buf_init(b, 1u << 24);
    if (rumor_gossip_state_save(g, b) != RUMOR_OK)
        abort();
}

static bool
s_same(const rumor_buf *a, const rumor_buf *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t pick = data[0] % (sizeof s_algos / sizeof s_algos[0]);
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    snprintf(o.algo, sizeof o.algo, "%s", s_algos[pick]);
    if (pick == 4 && (data[0] & 0x80) != 0) /* localsgd with SAEF */
        snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.3");
    o.ef_alpha = o.delta_codec[0] != '\0' ? 1.0 : 0.0;
    if (pick == 4 && (data[0] & 0x10) != 0) { /* streaming fragments */
        o.fragments = 3;
        o.period = 3;
    }
    if (pick == 6 && (data[0] & 0x80) != 0) { /* compressed, with DGC */
        snprintf(o.codec, sizeof o.codec, "dgc:ratio=0.3");
        snprintf(o.ef, sizeof o.ef, "dgc:0.9,1,3");
        o.compressed = true;
    }
    o.gamma = 0.5;
    o.rank = 1; /* the corpus's (powersgd's default, 4, compresses no 6 x 5) */
    if ((pick == 0 || pick == 3) && (data[0] & 0x40) != 0) /* adaptive */
        snprintf(o.adapt, sizeof o.adapt, "rule");
    rumor_topology *t = NULL;
    if (rumor_topology_from_spec("ring:4", 1, &t, NULL) != RUMOR_OK)
        abort();
    float x[6 * 5 + 3] = {0};
    struct rumor_tensor ts[2] = {{x, 2, {6, 5, 0, 0, 0, 0, 0, 0}},
                                 {x + 30, 1, {3, 0, 0, 0, 0, 0, 0, 0}}};
    struct rumor_model m = {ts, 2};
    rumor_gossip *g = NULL;
    if (rumor_gossip_new(&o, t, 1, &m, &g, NULL) != RUMOR_OK)
        abort();
    rumor_buf before, after;
    s_save(g, &before);
    bool adopt = (data[0] & 0x20) != 0;
    rumor_err rc = adopt ? rumor_gossip_state_adopt(g, data + 1, size - 1, NULL)
                         : rumor_gossip_state_load(g, data + 1, size - 1, NULL);
    s_save(g, &after);
    if (rc != RUMOR_OK && !s_same(&before, &after))
        abort(); /* a refused state changed the instance */
    if (adopt && rc == RUMOR_OK && !rumor_gossip_uses_ring(g))
        abort(); /* only a ring's members share a state */
    if (rc == RUMOR_OK) {
        rumor_buf again, kept;
        if (rumor_gossip_state_load(g, after.data, after.len, NULL) != RUMOR_OK)
            abort(); /* its own state refused */
        s_save(g, &again);
        if (!s_same(&after, &again))
            abort();
        if (adopt && rumor_gossip_state_adopt(g, after.data, after.len, NULL) !=
                         RUMOR_OK)
            abort();
        s_save(g, &kept);
        if (!s_same(&after, &kept))
            abort();
        rumor_buf_free(&again);
        rumor_buf_free(&kept);
    }
    rumor_buf_free(&before);
    rumor_buf_free(&after);
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&t);
    return 0;
}
