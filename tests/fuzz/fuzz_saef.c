/*
 * libFuzzer harness (R12.1) for the error round of step-ahead error
 * feedback (gossip/saef.c), which decodes the neighbours' compressed
 * errors from the network: three local-SGD nodes on a 3-ring (a 14-float
 * model, a top-k delta, alpha 1, the neighbourhood scope), made from the
 * same model (their anchor) and then moved apart, run the first sync and
 * the ring rounds of the second in the simulator's order; then
 * node 1 absorbs its error round from messages built from the input.
 * Input: byte 0 bit 0 set = start from the real messages of nodes 0 and 2
 * with the rest of the input XORed over them (cycled), else the rest is
 * split into the two messages at the length in bytes 1-2 (little-endian,
 * capped); bit 1 = the second message claims to come from node 0 too (a
 * duplicate), bit 2 = the first is left out (a missing neighbour).
 * Invariants: absorb never crashes, never touches the model, and the
 * look-ahead afterwards still works (own error on failure). Replayed from
 * tests/fuzz/corpus/saef/.
 */
#include "rumor/gossip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES 3
#define NUMEL 14

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct world {
    rumor_topology *topo;
    float x[NODES][NUMEL];
    rumor_gossip *g[NODES];
};

static void
s_world(struct world *w)
{
    if (rumor_topology_from_spec("ring:3", 1, &w->topo, NULL) != RUMOR_OK)
        __builtin_trap();
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    snprintf(o.algo, sizeof o.algo, "localsgd");
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    snprintf(o.saef_scope, sizeof o.saef_scope, "neighbourhood");
    o.ef_alpha = 1;
    for (uint32_t i = 0; i < NODES; i++) {
        for (int e = 0; e < NUMEL; e++) /* the same start: the anchor */
            w->x[i][e] = (float)((e * 5) % 7) * 0.25f - 0.75f;
        struct rumor_tensor t = {w->x[i], 1, {NUMEL}};
        struct rumor_model m = {&t, 1};
        if (rumor_gossip_new(&o, w->topo, i, &m, &w->g[i], NULL) != RUMOR_OK)
            __builtin_trap();
    }
    for (uint32_t i = 0; i < NODES; i++) /* then local updates apart */
        for (int e = 0; e < NUMEL; e++)
            w->x[i][e] = (float)((e * 5 + (int)i * 3) % 7) * 0.25f - 0.75f;
}

/* Rounds [0, last) of a step, every message delivered. */
static void
s_rounds(struct world *w, uint64_t step, uint32_t last)
{
    for (uint32_t r = 0; r < last; r++) {
        const struct rumor_gossip_msg *out[NODES];
        size_t count[NODES];
        for (int i = 0; i < NODES; i++)
            if (rumor_gossip_emit(w->g[i], step, r, &out[i], &count[i]))
                __builtin_trap();
        for (uint32_t to = 0; to < NODES; to++) {
            struct rumor_gossip_msg in[NODES * 2];
            size_t got = 0;
            for (uint32_t from = 0; from < NODES; from++)
                for (size_t m = 0; m < count[from]; m++)
                    if (out[from][m].peer == to) {
                        in[got] = out[from][m];
                        in[got++].peer = from;
                    }
            if (rumor_gossip_absorb(w->g[to], step, r, in, got) != RUMOR_OK)
                __builtin_trap();
        }
    }
}

/* The message node `from` emits to node 1 in the error round. */
static struct rumor_gossip_msg
s_real(struct world *w, uint32_t from, uint32_t round)
{
    const struct rumor_gossip_msg *out = NULL;
    size_t count = 0;
    if (rumor_gossip_emit(w->g[from], 1, round, &out, &count) != RUMOR_OK)
        __builtin_trap();
    for (size_t m = 0; m < count; m++)
        if (out[m].peer == 1)
            return (struct rumor_gossip_msg){from, out[m].data, out[m].len};
    __builtin_trap();
}

static uint8_t *
s_xor_copy(struct rumor_gossip_msg *m, const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(m->len + 1);
    if (copy == NULL)
        __builtin_trap();
    for (size_t k = 0; k < m->len; k++)
        copy[k] = m->data[k] ^ (size ? data[k % size] : 0);
    m->data = copy;
    return copy;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint8_t mode = data[0];
    size_t len_a = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    len_a = len_a < size ? len_a : size;
    struct world w;
    s_world(&w);
    s_rounds(&w, 0, rumor_gossip_rounds(w.g[0], 0));
    uint32_t rounds = rumor_gossip_rounds(w.g[0], 1);
    s_rounds(&w, 1, rounds - 1);
    struct rumor_gossip_msg in[2] = {{0, data, len_a},
                                     {2, data + len_a, size - len_a}};
    uint8_t *copies[2] = {NULL, NULL};
    if (mode & 1) {
        in[0] = s_real(&w, 0, rounds - 1);
        in[1] = s_real(&w, 2, rounds - 1);
        copies[0] = s_xor_copy(&in[0], data, size);
        copies[1] = s_xor_copy(&in[1], data, size);
    }
    const struct rumor_gossip_msg *out = NULL;
    size_t count = 0;
    if (rumor_gossip_emit(w.g[1], 1, rounds - 1, &out, &count) != RUMOR_OK)
        __builtin_trap();
    if (mode & 2)
        in[1].peer = 0;
    float before[NUMEL];
    memcpy(before, w.x[1], sizeof before);
    (void)rumor_gossip_absorb(w.g[1],
                              1,
                              rounds - 1,
                              (mode & 4) ? in + 1 : in,
                              (mode & 4) ? 1 : 2);
    if (memcmp(before, w.x[1], sizeof before) != 0)
        __builtin_trap(); /* the error round never moves the model */
    if (rumor_gossip_step_ahead(w.g[1]) != RUMOR_OK)
        __builtin_trap();
    free(copies[0]);
    free(copies[1]);
    for (int i = 0; i < NODES; i++)
        rumor_gossip_destroy(&w.g[i]);
    rumor_topology_destroy(&w.topo);
    return 0;
}
