/*
 * The body the codec harnesses share (R12.1): the first input byte picks
 * one of the harness's codec specs, the rest is the payload. The decoded
 * vector must be finite, and decode_add must leave its vector unchanged
 * when it fails. Each harness lists its specs and calls
 * fuzz_codec_decode.
 */
#ifndef RUMOR_TESTS_FUZZ_CODEC_H
#define RUMOR_TESTS_FUZZ_CODEC_H

#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>

#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

static int
fuzz_codec_decode(const char *const *specs,
                  size_t count,
                  const uint8_t *data,
                  size_t size)
{
    rumor_codec *c = NULL;
    float *y = NULL, *z = NULL;
    if (size < 1)
        return 0;
    const char *spec = specs[data[0] % count];
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

#endif /* RUMOR_TESTS_FUZZ_CODEC_H */
