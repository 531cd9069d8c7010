/*
 * Little-endian loads and stores for every byte format Rumor writes (frames,
 * codec payloads, checkpoints, optimizer state): the bytes are the same on
 * every host. Byte shifts rather than memcpy so the code does not depend on
 * the host's order; compilers turn them into single loads and stores.
 */
#ifndef RUMOR_CORE_LE_H
#define RUMOR_CORE_LE_H

#include <stdint.h>

static inline void
core_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t
core_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline void
core_put_u64(uint8_t *p, uint64_t v)
{
    core_put_u32(p, (uint32_t)v);
    core_put_u32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t
core_get_u64(const uint8_t *p)
{
    return (uint64_t)core_get_u32(p) | (uint64_t)core_get_u32(p + 4) << 32;
}

#endif
