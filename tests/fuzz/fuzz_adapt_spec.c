/*
 * libFuzzer harness (R12.1) for rumor_codec_spec_of_payload (issue #12):
 * the receiver of an adaptive message builds its decoder from the
 * payload's headers. Any input must give RUMOR_OK, RUMOR_EPROTO or
 * RUMOR_ETOOBIG; a spec it returns must parse, and decoding the payload
 * with that codec must not crash and must give finite values. Replayed
 * from tests/fuzz/corpus/adapt_spec/ by `make test`.
 */
#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>

#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char spec[RUMOR_COMPRESS_SPEC_MAX];
    rumor_err rc = rumor_codec_spec_of_payload(data, size, spec, sizeof spec);
    if (rc != RUMOR_OK && rc != RUMOR_EPROTO && rc != RUMOR_ETOOBIG)
        __builtin_trap();
    if (rc != RUMOR_OK)
        return 0;
    rumor_codec *c = NULL;
    if (rumor_codec_new(spec, &c, NULL) != RUMOR_OK)
        __builtin_trap(); /* a spec we wrote must parse */
    rumor_codec_id id;
    size_t n = 0;
    if (rumor_codec_peek(data, size, &id, &n) != RUMOR_OK)
        __builtin_trap(); /* spec_of_payload peeked it already */
    float *y = n <= FUZZ_MAX_ELEMS ? malloc((n + 1) * sizeof *y) : NULL;
    if (y != NULL && rumor_codec_decode(c, data, size, y, n) == RUMOR_OK)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(y[i]))
                __builtin_trap();
    free(y);
    rumor_codec_destroy(&c);
    return 0;
}
