/*
 * libFuzzer harness for the membership messages of elastic rings
 * (node/membership_wire.c, R12.1) and the state machine behind them
 * (node/membership.c): bytes a ring member controls. Traps when broken: a
 * message the decoder accepts re-encodes to the same bytes (every field
 * has one meaning, none is dropped); the state machine, fed the input as
 * a message in each of its states (a member, a member in a view change, a
 * joiner), answers only with messages that decode. Deterministic, no
 * sockets (R12.4). With gcc it is linked with replay_main.c and replays
 * tests/fuzz/corpus/membership/.
 */
#include "node/membership.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING 5

static struct node_member_msg s_msg;
static uint8_t s_again[NODE_MEMBER_MSG_MAX];

static void
s_check_round_trip(const uint8_t *data, size_t size, uint32_t n)
{
    if (node_member_decode(data, size, n, &s_msg) != RUMOR_OK)
        return;
    size_t len = node_member_encode(&s_msg, s_again, sizeof s_again);
    if (len != size || memcmp(s_again, data, size) != 0)
        abort();
}

/* Feeds the input to a node of a ring of RING in one of three states,
 * from a member or from the node outside the ring, and checks what it
 * sends. */
static void
s_feed(const uint8_t *data, size_t size, int how, uint32_t from)
{
    struct node_member_opts opts;
    node_member_opts_default(&opts);
    node_member *m = NULL;
    if (node_member_new(&m, 1, RING, &opts) != RUMOR_OK)
        return;
    const uint32_t ring[4] = {0, 1, 2, 3}; /* 4 is outside */
    uint32_t three = 3, zero = 0;
    if (how == 2) {
        (void)node_member_join_request(m, &zero, 1, 5, 0);
    } else {
        (void)node_member_start(m, ring, 4, 10);
        if (how == 1)
            (void)node_member_suspect(m, &three, 1, 0);
    }
    (void)node_member_on_msg(m, from, data, size, 1);
    node_member_tick(m, 100000);
    uint32_t to;
    const uint8_t *bytes;
    size_t len;
    while (node_member_pop(m, &to, &bytes, &len))
        if (to >= RING || node_member_decode(bytes, len, RING, &s_msg) != 0)
            abort();
    struct node_member_event ev;
    while (node_member_event(m, &ev))
        if (ev.epoch != node_member_view_of(m)->epoch)
            abort();
    node_member_destroy(&m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_check_round_trip(data, size, NODE_MEMBER_MAX);
    s_check_round_trip(data, size, RING); /* ids out of range are reachable */
    for (int how = 0; how < 3; how++) {
        s_feed(data, size, how, 0);
        s_feed(data, size, how, 4);
    }
    return 0;
}
