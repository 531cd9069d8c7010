/*
 * Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
 * Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011), checked
 * against Random123's published known-answer vectors in tests/unit.
 *
 * Why counter-based: stochastic rounding, random-k indices and PowerGossip's
 * shared factors must be reproducible across machines and computable by
 * both ends of a link from a seed alone. Element i of stream s under seed k
 * is word (i mod 4) of Philox(counter = (i / 4, s), key = k): a pure
 * function, so codecs can generate any slice in any order (and vectorise).
 * Alternatives rejected: xorshift/PCG need sequential state; a hash per
 * element (splitmix) is fast but has no published test vectors.
 */
#include "core/philox.h"
#include "rumor/core.h"

#include <math.h>

static inline void
s_philox_round(uint32_t ctr[4], const uint32_t key[2])
{
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    ctr[0] = hi1 ^ ctr[1] ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ ctr[3] ^ key[1];
    ctr[3] = lo0;
}

void
rumor_philox4x32_10(const uint32_t ctr[4],
                    const uint32_t key[2],
                    uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        s_philox_round(c, k);
    }
    for (int i = 0; i < 4; i++)
        out[i] = c[i];
}

static void
s_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4])
{
    const uint32_t ctr[4] = {(uint32_t)block,
                             (uint32_t)(block >> 32),
                             (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    rumor_philox4x32_10(ctr, key, out);
}

void
rumor_rng_init(struct rumor_rng *rng, uint64_t seed, uint64_t stream)
{
    rng->seed = seed;
    rng->stream = stream;
    rng->index = 0;
    rng->block_at = UINT64_MAX;
}

uint32_t
rumor_rng_u32(struct rumor_rng *rng)
{
    uint64_t at = rng->index & ~(uint64_t)3;
    if (at != rng->block_at) {
        s_block(rng->seed, rng->stream, rng->index >> 2, rng->block);
        rng->block_at = at;
    }
    return rng->block[rng->index++ & 3];
}

uint64_t
rumor_rng_u64(struct rumor_rng *rng)
{
    uint64_t lo = rumor_rng_u32(rng);
    return lo | (uint64_t)rumor_rng_u32(rng) << 32;
}

float
rumor_rng_uniform(struct rumor_rng *rng)
{
    return (float)(rumor_rng_u32(rng) >> 8) * 0x1.0p-24f;
}

double
rumor_rng_uniform_double(struct rumor_rng *rng)
{
    return (double)(rumor_rng_u64(rng) >> 11) * 0x1.0p-53;
}

uint32_t
rumor_rng_below(struct rumor_rng *rng, uint32_t bound)
{
    /* Lemire's multiply-and-reject: unbiased, one division at most. */
    uint64_t m = (uint64_t)rumor_rng_u32(rng) * bound;
    uint32_t low = (uint32_t)m;
    if (low < bound) {
        uint32_t threshold = (uint32_t)-bound % bound;
        while (low < threshold) {
            m = (uint64_t)rumor_rng_u32(rng) * bound;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double
rumor_rng_normal(struct rumor_rng *rng)
{
    double u1 = 1.0 - rumor_rng_uniform_double(rng); /* (0, 1]: log is finite */
    double u2 = rumor_rng_uniform_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void
rumor_rng_fill_uniform(uint64_t seed,
                       uint64_t stream,
                       uint64_t index,
                       float *out,
                       size_t n)
{
    uint32_t words[4];
    size_t i = 0;
    while (i < n) {
        uint64_t at = index + i;
        s_block(seed, stream, at >> 2, words);
        for (unsigned w = (unsigned)(at & 3); w < 4 && i < n; w++, i++)
            out[i] = (float)(words[w] >> 8) * 0x1.0p-24f;
    }
}

uint64_t
rumor_seed_derive(uint64_t seed, uint64_t a, uint64_t b)
{
    const uint32_t ctr[4] = {(uint32_t)a,
                             (uint32_t)(a >> 32),
                             (uint32_t)b,
                             (uint32_t)(b >> 32)};
    const uint32_t key[2] = {(uint32_t)seed ^ 0x5eedu, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    rumor_philox4x32_10(ctr, key, out);
    return (uint64_t)out[0] | (uint64_t)out[1] << 32;
}
