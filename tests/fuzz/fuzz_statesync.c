/*
 * libFuzzer harness for the decoders of fault handling (R12.1): the edge
 * acknowledgement (gossip/edges.c), SYNC and STATE (node/statesync.c),
 * all bytes a neighbour controls. STATE is decoded against a fixed model
 * of two tensors; a rejected STATE must leave the model untouched (the
 * harness traps otherwise). With gcc it is linked with replay_main.c and
 * replays tests/fuzz/corpus/statesync/.
 */
#include "node/statesync.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rumor_gossip_ack ack;
    if (rumor_gossip_ack_decode(data, size, &ack) == RUMOR_OK &&
        ack.count > RUMOR_GOSSIP_ACK_MAX_STEPS)
        abort();
    struct node_sync sync;
    (void)node_sync_decode(data, size, &sync);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {7, 8, 9};
    float a0[6], b0[3];
    memcpy(a0, a, sizeof a);
    memcpy(b0, b, sizeof b);
    struct rumor_tensor t[2] = {{a, 2, {2, 3}}, {b, 1, {3}}};
    struct rumor_model m = {t, 2};
    uint64_t step = 0;
    struct node_state_optim optim;
    rumor_err rc = node_state_decode(data, size, &m, &step, &optim);
    if (rc != RUMOR_OK &&
        (memcmp(a, a0, sizeof a) != 0 || memcmp(b, b0, sizeof b) != 0 ||
         optim.data != NULL || optim.len != 0))
        abort();
    /* the optimizer part lies inside the message, at its end */
    if (rc == RUMOR_OK && optim.len > 0 &&
        (optim.data < data || optim.data + optim.len != data + size))
        abort();
    return 0;
}
