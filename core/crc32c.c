/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI and ext4
 * use: it guards frame payloads and checkpoint sections. With SSE4.2 the
 * crc32 instruction does 8 bytes per cycle-ish; otherwise slicing-by-8
 * tables. Both paths are tested against the standard check value
 * crc32c("123456789") = 0xE3069283 and against each other.
 */
#include "core/cpu.h"
#include "rumor/core.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u

static uint32_t s_table[8][256];
static int s_table_ready;

static void
s_build_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        s_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            s_table[t][n] =
                (s_table[t - 1][n] >> 8) ^ s_table[0][s_table[t - 1][n] & 0xff];
    __atomic_store_n(&s_table_ready, 1, __ATOMIC_RELEASE);
}

/* Exposed to the tests through #include of this file (R10.6). */
static uint32_t
s_crc32c_table(uint32_t crc, const uint8_t *p, size_t len)
{
    if (!__atomic_load_n(&s_table_ready, __ATOMIC_ACQUIRE))
        s_build_table(); /* idempotent: racing builders write equal values */
    crc = ~crc;
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc;
        crc =
            s_table[7][word & 0xff] ^ s_table[6][(word >> 8) & 0xff] ^
            s_table[5][(word >> 16) & 0xff] ^ s_table[4][(word >> 24) & 0xff] ^
            s_table[3][(word >> 32) & 0xff] ^ s_table[2][(word >> 40) & 0xff] ^
            s_table[1][(word >> 48) & 0xff] ^ s_table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ s_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
s_crc32c_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

uint32_t
rumor_crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
    if (core_cpu()->sse42)
        return s_crc32c_sse42(crc, data, len);
#endif
    return s_crc32c_table(crc, data, len);
}
