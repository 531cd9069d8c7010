/*
 * Bit writer and reader for packed codec payloads. Bits go LSB-first into a
 * 64-bit accumulator that is stored little-endian, so the byte stream is the
 * same on every host. Writes past the capacity set a sticky overflow flag
 * and reads past the end a sticky overrun flag (returning zeros): decoders
 * check one flag at the end instead of a branch per field, and can never
 * touch memory outside the buffer.
 */
#include "rumor/core.h"

void
rumor_bitw_init(struct rumor_bitw *w, uint8_t *out, size_t cap)
{
    w->out = out;
    w->cap = cap;
    w->pos = 0;
    w->acc = 0;
    w->nacc = 0;
    w->overflow = false;
}

static void
s_bitw_drain(struct rumor_bitw *w, unsigned keep_bits)
{
    while (w->nacc >= 8 && w->nacc > keep_bits) {
        if (w->pos >= w->cap) {
            w->overflow = true;
            return;
        }
        w->out[w->pos++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc -= 8;
    }
}

void
rumor_bitw_put(struct rumor_bitw *w, uint64_t value, unsigned nbits)
{
    if (w->overflow || nbits == 0)
        return;
    uint64_t mask = nbits >= 64 ? ~0ull : (1ull << nbits) - 1;
    w->acc |= (value & mask) << w->nacc;
    w->nacc += nbits;
    s_bitw_drain(w, 7);
}

size_t
rumor_bitw_finish(struct rumor_bitw *w, rumor_err *err)
{
    if (w->nacc > 0 && !w->overflow) {
        w->nacc = (w->nacc + 7) & ~7u;
        s_bitw_drain(w, 0);
    }
    if (err != NULL)
        *err = w->overflow ? RUMOR_ETOOBIG : RUMOR_OK;
    return w->pos;
}

void
rumor_bitr_init(struct rumor_bitr *r, const uint8_t *in, size_t len)
{
    r->in = in;
    r->len = len;
    r->pos = 0;
    r->acc = 0;
    r->nacc = 0;
    r->overrun = false;
}

uint64_t
rumor_bitr_get(struct rumor_bitr *r, unsigned nbits)
{
    if (nbits == 0)
        return 0;
    while (r->nacc < nbits && r->pos < r->len) {
        r->acc |= (uint64_t)r->in[r->pos++] << r->nacc;
        r->nacc += 8;
    }
    if (r->nacc < nbits) {
        r->overrun = true;
        r->acc = 0;
        r->nacc = 0;
        return 0;
    }
    uint64_t value = r->acc & ((1ull << nbits) - 1);
    r->acc >>= nbits;
    r->nacc -= nbits;
    return value;
}
