/*
 * libFuzzer harness (R12.1) for QSGD payloads, fixed-width and Elias-gamma
 * levels, and the levels format (any s; fixed width or Elias-omega gaps): the
 * first input byte picks the codec spec, the rest is the payload. The decoded
 * vector must be finite, and decode_add must leave y unchanged when it fails.
 * Replayed from tests/fuzz/corpus/qsgd/ by `make test`.
 */
#include "tests/fuzz/fuzz_codec.h"

static const char *const s_specs[] = {"qsgd",
                                      "qsgd:bits=2,elias=1",
                                      "qsgd:bits=8,bucket=7",
                                      "qsgd:bits=6,elias=1,bucket=33",
                                      "qsgd:levels=5,bucket=8,code=elias",
                                      "qsgd:levels=2,code=elias",
                                      "qsgd:levels=6,bucket=33"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_codec_decode(s_specs,
                             sizeof s_specs / sizeof s_specs[0],
                             data,
                             size);
}
