/*
 * Philox4x32-10's constants (Salmon et al., SC 2011, and Random123): the
 * round multipliers and the Weyl increments of the key. core/rng.c's
 * scalar generator, the codecs' vector kernels (compress/kernels.c) and
 * the CUDA kernels (the block function below) all take them from here, so
 * they cannot drift apart; the tests compare the vector streams with the
 * scalar one bit for bit.
 */
#ifndef RUMOR_CORE_PHILOX_H
#define RUMOR_CORE_PHILOX_H

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

#ifdef __CUDACC__
#include <stdint.h>

/* Philox4x32-10 of counter (block, stream), key seed (core/rng.c's
 * block), for the kernels that draw the CPU's streams by element index
 * (compress/cuda.cu, gossip/backend_cuda.cu). */
__device__ static inline void
philox_block_device(uint64_t block,
                    uint64_t stream,
                    uint64_t seed,
                    uint32_t w[4])
{
    uint32_t c[4] = {(uint32_t)block,
                     (uint32_t)(block >> 32),
                     (uint32_t)stream,
                     (uint32_t)(stream >> 32)};
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint32_t hi0 = __umulhi(PHILOX_M0, c[0]), lo0 = PHILOX_M0 * c[0];
        uint32_t hi1 = __umulhi(PHILOX_M1, c[2]), lo1 = PHILOX_M1 * c[2];
        c[0] = hi1 ^ c[1] ^ k0;
        c[1] = lo1;
        c[2] = hi0 ^ c[3] ^ k1;
        c[3] = lo0;
    }
    for (int i = 0; i < 4; i++)
        w[i] = c[i];
}
#endif

#endif
