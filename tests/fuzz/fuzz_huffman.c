/*
 * libFuzzer harness (R12.1) for the canonical Huffman stage alone
 * (rumor_huffman_decode) and the lossless `huffman` codec: the first input
 * byte picks the target, the next two give the symbol count for the byte
 * API, the rest is the stream. Replayed from tests/fuzz/corpus/huffman/.
 */
#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>

#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    bool codec = data[0] & 1;
    size_t n = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    if (!codec) {
        uint8_t *out = malloc(n + 1);
        if (out == NULL)
            return 0;
        rumor_err rc = rumor_huffman_decode(data, size, out, n);
        unsigned sum = 0;
        for (size_t i = 0; rc == RUMOR_OK && i < n; i++)
            sum += out[i]; /* touch every decoded byte */
        free(out);
        return (int)(sum & 0);
    }
    rumor_codec *c = NULL;
    if (rumor_codec_new("huffman", &c, NULL) != RUMOR_OK)
        __builtin_trap();
    rumor_codec_id id;
    if (rumor_codec_peek(data, size, &id, &n) != RUMOR_OK || n > FUZZ_MAX_ELEMS)
        n = 16;
    float *y = malloc((n + 1) * sizeof *y);
    if (y != NULL) {
        rumor_err rc = rumor_codec_decode(c, data, size, y, n);
        for (size_t i = 0; rc == RUMOR_OK && i < n; i++)
            if (!isfinite(y[i]))
                __builtin_trap();
    }
    free(y);
    rumor_codec_destroy(&c);
    return 0;
}
