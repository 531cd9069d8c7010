/*
 * Philox4x32-10's constants (Salmon et al., SC 2011, and Random123): the
 * round multipliers and the Weyl increments of the key. core/rng.c's
 * scalar generator and the codecs' vector kernels (compress/kernels.c)
 * both take them from here, so the two cannot drift apart; the tests
 * compare the vector streams with the scalar one bit for bit.
 */
#ifndef RUMOR_CORE_PHILOX_H
#define RUMOR_CORE_PHILOX_H

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

#endif
