/*
 * libFuzzer harness for the decoders of fault handling (R12.1): the edge
 * acknowledgement (gossip/edges.c), SYNC and STATE (node/statesync.c),
 * all bytes a neighbour controls. STATE is decoded against a fixed model
 * of two tensors; a rejected STATE must leave the model untouched and
 * return nothing, an accepted one must return parts that lie inside the
 * message where its version puts them (the harness traps otherwise). With
 * gcc it is linked with replay_main.c and replays
 * tests/fuzz/corpus/statesync/.
 */
#include "node/statesync.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An accepted STATE's parts lie where its version puts them: the last one
 * (version 1's optimizer part, version 2's gossip part) ends the message,
 * version 2's optimizer part ends at the gossip part's length; before
 * version 2 there is no gossip part and the epoch is 0. */
static bool
s_in_place(const uint8_t *data, size_t size, const struct node_state_parts *p)
{
    uint8_t version = data[4];
    const uint8_t *end = data + size;
    const uint8_t *optim_end = version == 1 ? end : end - 8 - p->gossip_len;
    if (version < 2 && (p->epoch != 0 || p->gossip_len != 0))
        return false;
    if (version == 0 && p->optim_len != 0)
        return false;
    return (p->optim_len == 0 ||
            (p->optim >= data && p->optim + p->optim_len == optim_end)) &&
           (p->gossip_len == 0 ||
            (p->gossip >= data && p->gossip + p->gossip_len == end)) &&
           p->gossip_len <= RUMOR_GOSSIP_STATE_MAX;
}

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
    struct node_state_parts parts;
    rumor_err rc = node_state_decode(data, size, &m, &parts);
    if (rc != RUMOR_OK &&
        (memcmp(a, a0, sizeof a) != 0 || memcmp(b, b0, sizeof b) != 0 ||
         parts.step != 0 || parts.epoch != 0 || parts.optim != NULL ||
         parts.optim_len != 0 || parts.gossip != NULL || parts.gossip_len != 0))
        abort();
    if (rc == RUMOR_OK && !s_in_place(data, size, &parts))
        abort();
    /* node_state_check says what decode says, and the joiner's distance
     * (issue 33) of an accepted state to itself is 0 */
    struct node_state_parts again;
    if (node_state_check(data, size, &m, &again) != rc)
        abort();
    if (rc == RUMOR_OK && node_state_distance(data, data, m.count) != 0)
        abort();
    return 0;
}
