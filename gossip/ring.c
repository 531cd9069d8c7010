/*
 * The ring all-reduce engine (Patarasuk and Yuan, 2009), shared by the
 * exact-average baseline and PowerSGD. A buffer of len floats is cut into
 * n chunks (chunk c = [c len / n, (c + 1) len / n)). In the n - 1
 * reduce-scatter rounds node i sends chunk (i - r) mod n to i + 1 and adds
 * the chunk it receives from i - 1; then node i holds the full sum of
 * chunk (i + 1) mod n, optionally scales it by 1 / n, and the n - 1
 * all-gather rounds pass the finished chunks around. Each node sends
 * 2 (n - 1) / n of the buffer, the optimum for a ring, and every node ends
 * with the same bits. The ring is logical (i to i + 1 mod n), whatever the
 * topology's edges: a network driver connects ring neighbours for it.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

static size_t
s_chunk_start(const struct gossip_ring *r, size_t c)
{
    return (size_t)((unsigned __int128)r->len * c / r->n);
}

static size_t
s_chunk_len(const struct gossip_ring *r, size_t c)
{
    return s_chunk_start(r, c + 1) - s_chunk_start(r, c);
}

/* The chunk node `node` sends in round `round`. */
static size_t
s_chunk_sent(const struct gossip_ring *r, size_t node, uint32_t round)
{
    size_t n = r->n;
    if (round < n - 1)
        return (node + n - round % n) % n;
    size_t k = round - (n - 1);
    return (node + 1 + n - k % n) % n;
}

rumor_err
gossip_ring_init(struct gossip_ring *r, uint32_t self, size_t n, size_t cap)
{
    memset(r, 0, sizeof *r);
    r->self = self;
    r->n = n;
    r->cap = cap;
    r->work = malloc((cap + 1) * sizeof(float));
    r->sendbuf = malloc((cap / n + 2) * sizeof(float));
    return r->work && r->sendbuf ? RUMOR_OK : RUMOR_ENOMEM;
}

void
gossip_ring_free(struct gossip_ring *r)
{
    free(r->work);
    free(r->sendbuf);
    memset(r, 0, sizeof *r);
}

uint32_t
gossip_ring_rounds(const struct gossip_ring *r)
{
    return (uint32_t)(2 * (r->n - 1));
}

void
gossip_ring_start(struct gossip_ring *r, size_t len, bool average)
{
    r->len = len;
    r->average = average;
}

void
gossip_ring_emit(struct gossip_ring *r,
                 uint32_t round,
                 struct rumor_gossip_msg *out)
{
    size_t n = r->n;
    if (round == n - 1 && r->average) {
        size_t mine = (r->self + 1) % n;
        float *chunk = r->work + s_chunk_start(r, mine);
        for (size_t e = 0; e < s_chunk_len(r, mine); e++)
            chunk[e] /= (float)n;
    }
    size_t c = s_chunk_sent(r, r->self, round), len = s_chunk_len(r, c);
    memcpy(r->sendbuf, r->work + s_chunk_start(r, c), len * sizeof(float));
    *out = (struct rumor_gossip_msg){(uint32_t)((r->self + 1) % n),
                                     (const uint8_t *)r->sendbuf,
                                     len * sizeof(float)};
}

rumor_err
gossip_ring_absorb(const rumor_gossip *g,
                   struct gossip_ring *r,
                   uint32_t round,
                   const struct rumor_gossip_msg *msgs,
                   size_t count)
{
    size_t n = r->n;
    uint32_t prev = (uint32_t)((r->self + n - 1) % n);
    size_t c = s_chunk_sent(r, prev, round), len = s_chunk_len(r, c);
    const struct rumor_gossip_msg *slot = NULL;
    rumor_err rc = gossip_match_inbox(g,
                                      &prev,
                                      1,
                                      msgs,
                                      count,
                                      len * sizeof(float),
                                      &slot);
    if (rc == RUMOR_OK)
        rc = gossip_check_finite(g, slot);
    if (rc != RUMOR_OK)
        return rc;
    float *chunk = r->work + s_chunk_start(r, c);
    if (round < n - 1) {
        for (size_t e = 0; e < len; e++) {
            float v;
            memcpy(&v, slot->data + e * sizeof v, sizeof v);
            chunk[e] += v;
        }
    } else {
        memcpy(chunk, slot->data, slot->len);
    }
    return RUMOR_OK;
}
