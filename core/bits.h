/*
 * The bit writer and reader of every packed payload: bits go LSB-first
 * into a 64-bit accumulator stored little-endian, so the byte stream is the
 * same on every host. Inline, for the hot loops of the codecs: 32-bit
 * stores instead of byte-at-a-time draining, and a 64-bit window refilled
 * eight bytes at a time when that many are left. Writes past the end set a
 * sticky overflow flag and reads past the end return zeros and set
 * overrun: decoders check one flag at the end instead of a branch per
 * field, and never touch memory outside the buffer.
 */
#ifndef RUMOR_CORE_BITS_H
#define RUMOR_CORE_BITS_H

#include "core/le.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct core_bw {
    uint8_t *p;    /* next byte to store */
    uint8_t *end;  /* one past the last writable byte */
    uint64_t acc;  /* pending bits */
    unsigned nacc; /* pending bit count (< 32 between calls) */
    bool overflow;
};

static inline void
core_bw_init(struct core_bw *w, uint8_t *out, size_t cap)
{
    w->p = out;
    w->end = out + cap;
    w->acc = 0;
    w->nacc = 0;
    w->overflow = false;
}

/* Appends the low nbits (<= 32) of v; v has no bits above nbits. */
static inline void
core_bw_put(struct core_bw *w, uint64_t v, unsigned nbits)
{
    w->acc |= v << w->nacc;
    w->nacc += nbits;
    if (w->nacc >= 32) {
        if (w->end - w->p < 4) {
            w->overflow = true;
            w->p = w->end;
        } else {
            core_put_u32(w->p, (uint32_t)w->acc);
            w->p += 4;
        }
        w->acc >>= 32;
        w->nacc -= 32;
    }
}

/* Stores the whole pending bytes; true when no bit is left pending, so
 * that whole bytes may be written at w->p directly. */
static inline bool
core_bw_at_byte(struct core_bw *w)
{
    while (w->nacc >= 8 && w->p < w->end) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc -= 8;
    }
    return w->nacc == 0 && !w->overflow;
}

/* Flushes the pending bits, zero-padded to a byte; returns the bytes
 * written since out, or SIZE_MAX after an overflow. */
static inline size_t
core_bw_finish(struct core_bw *w, const uint8_t *out)
{
    while (w->nacc > 0 && !w->overflow) {
        if (w->p == w->end) {
            w->overflow = true;
            break;
        }
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc = w->nacc > 8 ? w->nacc - 8 : 0;
    }
    return w->overflow ? SIZE_MAX : (size_t)(w->p - out);
}

struct core_br {
    const uint8_t *p;   /* next byte to load */
    const uint8_t *end; /* one past the last byte */
    uint64_t acc;       /* window, next bit in bit 0 */
    unsigned nacc;      /* valid bits in acc */
    bool overrun;
};

static inline void
core_br_init(struct core_br *r, const uint8_t *in, size_t len)
{
    r->p = in;
    r->end = in + len;
    r->acc = 0;
    r->nacc = 0;
    r->overrun = false;
}

/* Tops the window up to at least 57 bits when the input has them. */
static inline void
core_br_refill(struct core_br *r)
{
    if (r->end - r->p >= 8) {
        r->acc |= core_get_u64(r->p) << r->nacc;
        r->p += (63 - r->nacc) >> 3;
        r->nacc |= 56;
        return;
    }
    while (r->nacc <= 56 && r->p < r->end) {
        r->acc |= (uint64_t)*r->p++ << r->nacc;
        r->nacc += 8;
    }
}

/* Returns the next nbits (<= 32) without consuming them (zeros past the
 * end). */
static inline uint64_t
core_br_peek(struct core_br *r, unsigned nbits)
{
    if (r->nacc < nbits)
        core_br_refill(r);
    return r->acc & ((1ull << nbits) - 1);
}

/* Consumes nbits; sets overrun when fewer were left. */
static inline void
core_br_skip(struct core_br *r, unsigned nbits)
{
    if (r->nacc < nbits) {
        core_br_refill(r);
        if (r->nacc < nbits) {
            r->overrun = true;
            r->acc = 0;
            r->nacc = 0;
            return;
        }
    }
    r->acc >>= nbits;
    r->nacc -= nbits;
}

static inline uint64_t
core_br_get(struct core_br *r, unsigned nbits)
{
    uint64_t v = core_br_peek(r, nbits);
    core_br_skip(r, nbits);
    return r->overrun ? 0 : v;
}

/* Bytes consumed so far, counting a partly used byte as consumed. */
static inline size_t
core_br_used(const struct core_br *r, const uint8_t *in)
{
    return (size_t)(r->p - in) - r->nacc / 8;
}

#endif /* RUMOR_CORE_BITS_H */
