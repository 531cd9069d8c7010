/*
 * libFuzzer harness for the net frame decoder (R12.1) and the HELLO and
 * REFUSE payload decoders behind it: the bytes a peer controls after the
 * CURVE handshake. Deterministic, no sockets (R12.4). With gcc it is
 * linked with replay_main.c and replays tests/fuzz/corpus/frame/.
 */
#include "rumor/net.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        /* touch every borrowed byte so ASan sees a bad bound */
        volatile uint8_t sink = 0;
        for (uint32_t i = 0; i < h.payload_len; i++)
            sink ^= payload[i];
        (void)sink;
        struct rumor_net_hello hello;
        if (rumor_net_hello_decode(payload, h.payload_len, &hello) == RUMOR_OK)
            for (size_t i = 0; i < hello.desc_len; i++)
                sink ^= hello.desc[i]; /* the description is borrowed too */
        uint32_t reason;
        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        if (rumor_net_refuse_decode(payload, h.payload_len, &reason, text) ==
            RUMOR_OK)
            sink ^= (uint8_t)strlen(text);
    }
    return 0;
}
