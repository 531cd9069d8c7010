/*
 * libFuzzer harness (R12.1) for rumor_ef_restore, the decoder of
 * error-feedback checkpoint records: the first input byte picks the memory
 * kind, the record's own n field (capped) sizes the memory, the rest is
 * the record. Replayed from tests/fuzz/corpus/ef/.
 */
#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>

#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

static const char *const s_specs[] = {"ef",
                                      "ef-decay:gamma=0.7",
                                      "dgc:ratio=0.05",
                                      "saef"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *spec = s_specs[data[0] % 4];
    data++;
    size--;
    size_t n = 4;
    if (size >= 16) {
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--)
            v = v << 8 | data[8 + i];
        n = v <= FUZZ_MAX_ELEMS ? (size_t)v : 4;
    }
    rumor_ef *ef = NULL;
    if (rumor_ef_new(spec, n, &ef, NULL) != RUMOR_OK)
        __builtin_trap();
    if (rumor_ef_restore(ef, data, size) == RUMOR_OK) {
        size_t m = 0;
        const float *e = rumor_ef_error(ef, &m);
        for (size_t i = 0; i < m; i++)
            if (!isfinite(e[i])) /* restore must reject NaN and Inf */
                __builtin_trap();
    }
    rumor_ef_destroy(&ef);
    return 0;
}
