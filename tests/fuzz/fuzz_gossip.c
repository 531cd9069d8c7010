/*
 * libFuzzer harness (R12.1) for the gossip absorb paths, which take bytes
 * from the network: node 1 of a 3-ring (model: a 4x3 matrix and a bias of
 * 2) emits round 0 of a step, then absorbs two messages built from the
 * input as if its neighbours 0 and 2 had sent them. Input: byte 0 picks
 * the algorithm, byte 1 the step (0..3; bit 0x80: allreduce compressed
 * with top-k and error feedback), bytes 2-3 the length of the
 * message from node 0 (little-endian, capped by what is left), the rest
 * of the input is that message followed by the message from node 2.
 * Bit 0x40 with allreduce: TernGrad with scaler sharing and error
 * feedback, driven through every round of a step (two of scalers, two of
 * payloads), each from node 0, its ring predecessor: the first message
 * in the scaler rounds, the second in the payload rounds.
 * Invariant (R8.4): absorb never crashes, and when it fails the model is
 * unchanged. Replayed from tests/fuzz/corpus/gossip/.
 */
#include "rumor/gossip.h"

#include <stdio.h>
#include <string.h>

struct fuzz_algo {
    const char *algo, *codec, *delta_codec;
};

static const struct fuzz_algo s_algos[] = {
    {"dpsgd", "", ""},
    {"choco", "qsgd:bits=4", ""},
    {"choco", "topk:ratio=0.25", ""},
    {"deepsqueeze", "sign", ""},
    {"moniqua", "", ""},
    {"powergossip", "", ""},
    {"allreduce", "", ""},
    {"allreduce-f64", "", ""},
    {"powersgd", "", ""},
    {"localsgd", "", "topk:ratio=0.5"},
};

#define ALGOS (sizeof s_algos / sizeof s_algos[0])
#define NUMEL 14

/* Every round of a step of the shared-scaler all-reduce, node 0 sending
 * a to node 1 while scalers travel, then b; a failed round must leave the
 * model as it was (it is written only after the last). */
static void
s_shared_step(rumor_gossip *g,
              uint64_t step,
              struct rumor_gossip_msg a,
              struct rumor_gossip_msg b,
              const float *x)
{
    float before[NUMEL];
    memcpy(before, x, sizeof before);
    uint32_t rounds = rumor_gossip_rounds(g, step);
    for (uint32_t r = 0; r < rounds; r++) {
        const struct rumor_gossip_msg *out = NULL;
        size_t count = 0;
        if (rumor_gossip_emit(g, step, r, &out, &count) != RUMOR_OK)
            __builtin_trap();
        if (rumor_gossip_absorb(g, step, r, r < rounds / 2 ? &a : &b, 1) !=
            RUMOR_OK) {
            if (memcmp(before, x, sizeof before) != 0)
                __builtin_trap(); /* a rejected round changed the model */
            return;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const struct fuzz_algo *a = &s_algos[data[0] % ALGOS];
    uint64_t step = data[1] % 4;
    bool compressed = (data[1] & 0x80) != 0, shared = (data[1] & 0x40) != 0;
    size_t len_a = (size_t)data[2] | (size_t)data[3] << 8;
    data += 4;
    size -= 4;
    if (len_a > size)
        len_a = size;
    rumor_topology *topo = NULL;
    if (rumor_topology_from_spec("ring:3", 1, &topo, NULL) != RUMOR_OK)
        __builtin_trap();
    float x[NUMEL], before[NUMEL];
    for (int e = 0; e < NUMEL; e++)
        x[e] = (float)(e % 5) * 0.25f - 0.5f;
    struct rumor_tensor tensors[2] = {{x, 2, {4, 3}}, {x + 12, 1, {2}}};
    struct rumor_model model = {tensors, 2};
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "%s", a->algo);
    if (a->codec[0])
        snprintf(opts.codec, sizeof opts.codec, "%s", a->codec);
    snprintf(opts.delta_codec, sizeof opts.delta_codec, "%s", a->delta_codec);
    shared = shared && strcmp(a->algo, "allreduce") == 0;
    if (strcmp(a->algo, "allreduce") == 0 && (compressed || shared)) {
        snprintf(opts.codec,
                 sizeof opts.codec,
                 "%s",
                 shared ? "terngrad:bucket=4,share=1" : "topk:ratio=0.25");
        snprintf(opts.ef, sizeof opts.ef, "ef");
        opts.compressed = true;
    }
    rumor_gossip *g = NULL;
    if (rumor_gossip_new(&opts, topo, 1, &model, &g, NULL) != RUMOR_OK)
        __builtin_trap();
    if (shared) {
        s_shared_step(g,
                      step,
                      (struct rumor_gossip_msg){0, data, len_a},
                      (struct rumor_gossip_msg){0, data + len_a, size - len_a},
                      x);
    } else if (rumor_gossip_rounds(g, step) > 0) {
        const struct rumor_gossip_msg *out = NULL;
        size_t count = 0;
        if (rumor_gossip_emit(g, step, 0, &out, &count) != RUMOR_OK)
            __builtin_trap();
        memcpy(before, x, sizeof before);
        struct rumor_gossip_msg in[2] = {{0, data, len_a},
                                         {2, data + len_a, size - len_a}};
        if (rumor_gossip_absorb(g, step, 0, in, 2) != RUMOR_OK &&
            memcmp(before, x, sizeof before) != 0)
            __builtin_trap(); /* a rejected round changed the model */
    }
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&topo);
    return 0;
}
