/*
 * libFuzzer harness for the net frame decoder (R12.1) and the payload
 * decoders behind it, chosen by the frame's kind as a receiver does: HELLO
 * and HELLO_OK, REFUSE, and the edge acknowledgement (ACK); the bytes a
 * peer controls after the CURVE handshake. Two properties trap when
 * broken: a frame the decoder accepts re-encodes to the same bytes (each
 * header field has one meaning, none is dropped), and its kind is one
 * this version knows. Deterministic, no sockets (R12.4). With gcc it is
 * linked with replay_main.c and replays tests/fuzz/corpus/frame/.
 */
#include "rumor/gossip.h"
#include "rumor/net.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_payload(uint8_t kind, const uint8_t *payload, uint32_t len)
{
    volatile uint8_t sink = 0;
    if (kind == RUMOR_NET_KIND_HELLO || kind == RUMOR_NET_KIND_HELLO_OK) {
        struct rumor_net_hello hello;
        if (rumor_net_hello_decode(payload, len, &hello) == RUMOR_OK)
            for (size_t i = 0; i < hello.desc_len; i++)
                sink ^= hello.desc[i]; /* the description is borrowed */
    } else if (kind == RUMOR_NET_KIND_REFUSE) {
        uint32_t reason;
        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        if (rumor_net_refuse_decode(payload, len, &reason, text) == RUMOR_OK)
            sink ^= (uint8_t)strlen(text);
    } else if (kind == RUMOR_NET_KIND_ACK) {
        struct rumor_gossip_ack ack;
        if (rumor_gossip_ack_decode(payload, len, &ack) == RUMOR_OK &&
            ack.count > RUMOR_GOSSIP_ACK_MAX_STEPS)
            abort();
    }
    (void)sink;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rumor_net_header h;
    const uint8_t *payload = NULL;
    /* a small cap too, so that the cap branch is reachable */
    size_t caps[2] = {RUMOR_NET_MESSAGE_MAX, 4096};
    for (int c = 0; c < 2; c++) {
        if (rumor_net_frame_decode(data, size, caps[c], &h, &payload) !=
            RUMOR_OK)
            continue;
        if (strcmp(rumor_net_kind_name(h.kind), "unknown") == 0)
            abort();
        /* touch every borrowed byte so ASan sees a bad bound */
        volatile uint8_t sink = 0;
        for (uint32_t i = 0; i < h.payload_len; i++)
            sink ^= payload[i];
        (void)sink;
        s_payload(h.kind, payload, h.payload_len);
        uint8_t *again = malloc(size);
        size_t w = 0;
        if (again == NULL)
            return 0;
        if (rumor_net_frame_encode(&h, payload, again, size, &w) != RUMOR_OK ||
            w != size || memcmp(again, data, size) != 0)
            abort();
        free(again);
    }
    return 0;
}
