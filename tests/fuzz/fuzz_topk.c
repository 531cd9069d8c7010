/*
 * libFuzzer harness (R12.1) for top-k, threshold and DGC index lists
 * (Rice-coded gaps) with their values payloads: the first input byte picks the
 * codec spec, the rest is the payload. The decoded vector must be finite,
 * and decode_add must leave y unchanged when it fails. Replayed from
 * tests/fuzz/corpus/topk/ by `make test`.
 */
#include "tests/fuzz/fuzz_codec.h"

static const char *const s_specs[] = {"topk:ratio=0.1",
                                      "topk:k=3|qsgd:bits=4",
                                      "threshold:t=0.5",
                                      "dgc:ratio=0.1|fp16",
                                      "dgc:ratio=0.1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_codec_decode(s_specs,
                             sizeof s_specs / sizeof s_specs[0],
                             data,
                             size);
}
