/*
 * libFuzzer harness (R12.1) for random-k payloads (indices regenerated from the
 * carried seed): the first input byte picks the codec spec, the rest is the
 * payload. The decoded vector must be finite, and decode_add must leave y
 * unchanged when it fails. Replayed from tests/fuzz/corpus/randk/ by `make
 * test`.
 */
#include "tests/fuzz/fuzz_codec.h"

static const char *const s_specs[] = {"randk:ratio=0.1",
                                      "randk:k=3,scale=1|sign"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_codec_decode(s_specs,
                             sizeof s_specs / sizeof s_specs[0],
                             data,
                             size);
}
