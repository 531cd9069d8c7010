/*
 * compress module-private inline bit writer and reader (LSB-first, the
 * same bit order as core's rumor_bitw/rumor_bitr, so payloads can be read
 * by either), specialised for the hot loops of the codecs: 32-bit stores
 * instead of byte-at-a-time draining, and a 64-bit window refilled eight
 * bytes at a time when that many are left. Writes past the end set a
 * sticky overflow flag; reads past the end return zeros and set overrun.
 */
#ifndef RUMOR_COMPRESS_BITS_H
#define RUMOR_COMPRESS_BITS_H

#include "compress/compress_impl.h"

struct compress_bw {
    uint8_t *p;    /* next byte to store */
    uint8_t *end;  /* one past the last writable byte */
    uint64_t acc;  /* pending bits */
    unsigned nacc; /* pending bit count (< 32 between calls) */
    bool overflow;
};

static inline void
compress_bw_init(struct compress_bw *w, uint8_t *out, size_t cap)
{
    w->p = out;
    w->end = out + cap;
    w->acc = 0;
    w->nacc = 0;
    w->overflow = false;
}

/* Appends the low nbits (<= 32) of v; v has no bits above nbits. */
static inline void
compress_bw_put(struct compress_bw *w, uint64_t v, unsigned nbits)
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
compress_bw_at_byte(struct compress_bw *w)
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
compress_bw_finish(struct compress_bw *w, const uint8_t *out)
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

struct compress_br {
    const uint8_t *p;   /* next byte to load */
    const uint8_t *end; /* one past the last byte */
    uint64_t acc;       /* window, next bit in bit 0 */
    unsigned nacc;      /* valid bits in acc */
    bool overrun;
};

static inline void
compress_br_init(struct compress_br *r, const uint8_t *in, size_t len)
{
    r->p = in;
    r->end = in + len;
    r->acc = 0;
    r->nacc = 0;
    r->overrun = false;
}

/* Tops the window up to at least 57 bits when the input has them. */
static inline void
compress_br_refill(struct compress_br *r)
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
compress_br_peek(struct compress_br *r, unsigned nbits)
{
    if (r->nacc < nbits)
        compress_br_refill(r);
    return r->acc & ((1ull << nbits) - 1);
}

/* Consumes nbits; sets overrun when fewer were left. */
static inline void
compress_br_skip(struct compress_br *r, unsigned nbits)
{
    if (r->nacc < nbits) {
        compress_br_refill(r);
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
compress_br_get(struct compress_br *r, unsigned nbits)
{
    uint64_t v = compress_br_peek(r, nbits);
    compress_br_skip(r, nbits);
    return r->overrun ? 0 : v;
}

/* Bytes consumed so far, counting a partly used byte as consumed. */
static inline size_t
compress_br_used(const struct compress_br *r, const uint8_t *in)
{
    return (size_t)(r->p - in) - r->nacc / 8;
}

#endif /* RUMOR_COMPRESS_BITS_H */
