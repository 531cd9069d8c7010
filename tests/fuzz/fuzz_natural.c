/*
 * libFuzzer harness (R12.1) for natural-compression payloads: the first input
 * byte picks the codec spec, the rest is the payload. The decoded vector must
 * be finite, and decode_add must leave y unchanged when it fails. Replayed from
 * tests/fuzz/corpus/natural/ by `make test`.
 */
#include "tests/fuzz/fuzz_codec.h"

static const char *const s_specs[] = {"natural"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_codec_decode(s_specs,
                             sizeof s_specs / sizeof s_specs[0],
                             data,
                             size);
}
