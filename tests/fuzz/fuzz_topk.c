/*
 * libFuzzer harness (R12.1) for top-k, threshold and DGC index lists
 * (Rice-coded gaps) with their values payloads: the first input byte picks the
 * codec spec, the rest is the payload. The decoded vector must be finite,
 * and decode_add must leave y unchanged when it fails. Replayed from
 * tests/fuzz/corpus/topk/ by `make test`.
 */
#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

static const char *const s_specs[] = {"topk:ratio=0.1",
                                      "topk:k=3|qsgd:bits=4",
                                      "threshold:t=0.5",
                                      "dgc:ratio=0.1|fp16",
                                      "dgc:ratio=0.1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rumor_codec *c = NULL;
    float *y = NULL, *z = NULL;
    if (size < 1)
        return 0;
    const char *spec = s_specs[data[0] % (sizeof s_specs / sizeof s_specs[0])];
    data++;
    size--;
    if (rumor_codec_new(spec, &c, NULL) != RUMOR_OK)
        __builtin_trap();
    rumor_codec_id id;
    size_t n = 16;
    if (rumor_codec_peek(data, size, &id, &n) != RUMOR_OK || n > FUZZ_MAX_ELEMS)
        n = 16;
    y = malloc((n + 1) * sizeof *y);
    z = malloc((n + 1) * sizeof *z);
    if (y == NULL || z == NULL)
        goto done;
    rumor_err rc = rumor_codec_decode(c, data, size, y, n);
    for (size_t i = 0; rc == RUMOR_OK && i < n; i++)
        if (!isfinite(y[i]))
            __builtin_trap();
    for (size_t i = 0; i < n; i++)
        z[i] = (float)i;
    rc = rumor_codec_decode_add(c, data, size, 0.5f, z, n);
    for (size_t i = 0; rc != RUMOR_OK && i < n; i++)
        if (z[i] != (float)i)
            __builtin_trap();
done:
    free(y);
    free(z);
    rumor_codec_destroy(&c);
    return 0;
}
