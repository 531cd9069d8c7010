/*
 * libFuzzer harness (R12.1) for fp8 and fp4 payloads with their Huffman stage:
 * the first input byte picks the codec spec, the rest is the payload. The
 * decoded vector must be finite, and decode_add must leave y unchanged when it
 * fails. Replayed from tests/fuzz/corpus/fp8/ by `make test`: integer-bias
 * payloads (seed-*), real-bias ones with their f field (real-*, fit-*,
 * gennorm-*) and malformed f fields and flags (badf-*, badflag-*).
 */
#include "tests/fuzz/fuzz_codec.h"

static const char *const s_specs[] = {"fp8", "fp4"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_codec_decode(s_specs,
                             sizeof s_specs / sizeof s_specs[0],
                             data,
                             size);
}
