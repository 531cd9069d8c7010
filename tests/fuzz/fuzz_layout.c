/*
 * libFuzzer harness for the HELLO description (node/layout.c, R12.1): the
 * bytes after a HELLO's fixed part, which a peer controls. The input is
 * checked, and explained against a fixed description and against itself
 * (which names a difference only past a cut list); an explanation must be
 * printable text inside its buffer, and none may come from bytes the
 * checker refuses (the harness traps otherwise). With
 * gcc it is linked with replay_main.c and replays tests/fuzz/corpus/layout/.
 */
#include "node/layout.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_printable_or_trap(const char *text, size_t cap)
{
    size_t n = strnlen(text, cap);
    if (n == cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if (text[i] < 0x20 || text[i] >= 0x7f)
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool ok = node_layout_check(data, size) == RUMOR_OK;
    float unused = 0;
    struct rumor_tensor t[2] = {{&unused, 2, {3, 4}}, {&unused, 1, {5}}};
    struct rumor_model m = {t, 2};
    uint8_t ref[256];
    size_t rlen =
        node_layout_encode("algo=dpsgd gamma=1", &m, NULL, ref, sizeof ref);
    char text[201];
    bool told =
        node_layout_explain(ref, rlen, 0, data, size, 1, text, sizeof text);
    if (told && !ok)
        abort();
    s_printable_or_trap(text, sizeof text);
    told = node_layout_explain(data, size, 7, data, size, 3, text, sizeof text);
    if (told && !ok)
        abort();
    s_printable_or_trap(text, sizeof text);
    return 0;
}
