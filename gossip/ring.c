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
 * Positions are those of the instance's member list
 * (rumor_gossip_members_set, every node by default): position i is node
 * members[i], so a ring re-formed over the live members of an epoch
 * (docs/reliability.md, "Elastic rings") runs the same schedule over
 * k = |members| positions, and its averages divide by k. The list is read
 * when a reduction starts; it changes only between steps.
 * A wide ring carries float64 partial sums (twice the bytes): sums of
 * float32 inputs are then exact in practice, so the result is the
 * correctly rounded mean, independent of the order of additions (the
 * allreduce-f64 algorithm, and the exactness test of the schedule).
 * Here too: the all-gather of payloads that cannot be summed on the way,
 * shared by compressed local SGD and compressed data-parallel SGD.
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* How many times this node's own chunk one member's part of a sum may be
 * (robust mixing's ring screen). Honest members' gradients, factors and
 * models are usually within a small factor of each other, but a refused
 * chunk fails the step, and a node whose shard it has nearly learned has
 * far smaller gradients than the others: only the absurd is refused
 * (docs/gossip.md, "Robust mixing", says what this can and cannot catch). */
#define RING_SCREEN_FACTOR 1e4

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

static size_t
s_elem(const struct gossip_ring *r)
{
    return r->wide ? sizeof(double) : sizeof(float);
}

static rumor_err
s_init(struct gossip_ring *r, size_t cap, bool wide)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    r->wide = wide;
    if (wide)
        r->work64 = malloc((cap + 1) * sizeof(double));
    else
        r->work = malloc((cap + 1) * sizeof(float));
    return r->work || r->work64 ? RUMOR_OK : RUMOR_ENOMEM;
}

rumor_err
gossip_ring_init(struct gossip_ring *r, size_t cap)
{
    return s_init(r, cap, false);
}

rumor_err
gossip_ring_init_wide(struct gossip_ring *r, size_t cap)
{
    return s_init(r, cap, true);
}

void
gossip_ring_free(struct gossip_ring *r)
{
    free(r->work);
    free(r->work64);
    free(r->sendbuf);
    free(r->own);
    memset(r, 0, sizeof *r);
}

uint32_t
gossip_ring_rounds(const rumor_gossip *g)
{
    return g->ring_n < 2 ? 0 : (uint32_t)(2 * (g->ring_n - 1));
}

rumor_err
gossip_ring_start(struct gossip_ring *r,
                  const rumor_gossip *g,
                  size_t len,
                  bool average)
{
    r->self = g->ring_pos;
    r->n = g->ring_n;
    r->len = len;
    r->average = average;
    /* a chunk is at most len / n + 1 elements; a smaller ring has larger
     * chunks, so the buffer grows when the ring shrinks */
    size_t want = r->cap / r->n + 2;
    if (want <= r->send_cap)
        return RUMOR_OK;
    void *buf = realloc(r->sendbuf, want * s_elem(r));
    if (buf == NULL)
        return RUMOR_ENOMEM;
    r->sendbuf = buf;
    r->send_cap = want;
    return RUMOR_OK;
}

/* The norm of len elements at data (float or double, unaligned). */
static double
s_norm(const struct gossip_ring *r, const uint8_t *data, size_t len)
{
    double sq = 0;
    for (size_t e = 0; e < len; e++) {
        double v;
        if (r->wide) {
            memcpy(&v, data + e * sizeof v, sizeof v);
        } else {
            float f;
            memcpy(&f, data + e * sizeof f, sizeof f);
            v = f;
        }
        sq += v * v;
    }
    return sqrt(sq);
}

/* This node's chunks' norms, before any is summed: the screen's yardstick. */
static rumor_err
s_own_norms(struct gossip_ring *r)
{
    if (r->n > r->own_cap) {
        double *own = realloc(r->own, r->n * sizeof *own);
        if (own == NULL)
            return RUMOR_ENOMEM;
        r->own = own;
        r->own_cap = r->n;
    }
    double sq = 0;
    for (size_t c = 0; c < r->n; c++) {
        const uint8_t *at =
            r->wide ? (const uint8_t *)(r->work64 + s_chunk_start(r, c))
                    : (const uint8_t *)(r->work + s_chunk_start(r, c));
        r->own[c] = s_norm(r, at, s_chunk_len(r, c));
        sq += r->own[c] * r->own[c];
    }
    r->own_total = sqrt(sq);
    return RUMOR_OK;
}

/* Refuses a chunk larger than its members could honestly sum to: each at
 * most RING_SCREEN_FACTOR times this node's own chunk (or, for a chunk
 * this node holds little of, its share of this node's whole vector). */
static rumor_err
s_screen(rumor_gossip *g,
         const struct gossip_ring *r,
         uint32_t round,
         size_t c,
         const struct rumor_gossip_msg *m)
{
    size_t n = r->n, len = s_chunk_len(r, c);
    if (!gossip_robust_on(g) || !(r->own_total > 0))
        return RUMOR_OK; /* off, or nothing to measure against */
    /* the members summed into it: round + 1 in the reduce-scatter, all n
     * in the all-gather, then divided by n when averaging */
    double members = round < n - 1 ? (double)round + 1
                     : r->average  ? 1
                                   : (double)n;
    double mine = r->own_total * sqrt((double)len / (double)r->len);
    double bound = members * RING_SCREEN_FACTOR * fmax(r->own[c], mine);
    double norm = s_norm(r, m->data, len);
    g->screen.screened++;
    if (norm <= bound)
        return RUMOR_OK;
    g->screen.outsized++;
    rumor_log(RUMOR_LOG_WARN,
              "gossip %s: node %u rejected the chunk from %u: norm %g over "
              "the bound %g of %.0f members' sum (the step fails)",
              g->algo->name,
              g->self,
              m->peer,
              norm,
              bound,
              members);
    return RUMOR_EPROTO;
}

rumor_err
gossip_ring_emit(rumor_gossip *g, struct gossip_ring *r, uint32_t round)
{
    rumor_err rc = gossip_out_reserve(g, 1);
    if (rc == RUMOR_OK && round == 0)
        rc = s_own_norms(r);
    if (rc != RUMOR_OK)
        return rc;
    size_t n = r->n;
    if (round == n - 1 && r->average) {
        size_t mine = (r->self + 1) % n, at = s_chunk_start(r, mine);
        for (size_t e = 0; e < s_chunk_len(r, mine); e++) {
            if (r->wide)
                r->work64[at + e] /= (double)n;
            else
                r->work[at + e] /= (float)n;
        }
    }
    size_t c = s_chunk_sent(r, r->self, round), len = s_chunk_len(r, c);
    const void *src = r->wide ? (const void *)(r->work64 + s_chunk_start(r, c))
                              : (const void *)(r->work + s_chunk_start(r, c));
    memcpy(r->sendbuf, src, len * s_elem(r));
    g->out[0] = (struct rumor_gossip_msg){gossip_ring_next(g),
                                          (const uint8_t *)r->sendbuf,
                                          len * s_elem(r)};
    return RUMOR_OK;
}

static rumor_err
s_check_finite64(const rumor_gossip *g, const struct rumor_gossip_msg *msg)
{
    for (size_t i = 0; i < msg->len / sizeof(double); i++) {
        double v;
        memcpy(&v, msg->data + i * sizeof v, sizeof v);
        if (!isfinite(v)) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u rejected a message from %u: "
                      "non-finite value at %zu",
                      g->algo->name,
                      g->self,
                      msg->peer,
                      i);
            return RUMOR_ENUMERIC;
        }
    }
    return RUMOR_OK;
}

static void
s_absorb_wide(struct gossip_ring *r,
              size_t c,
              size_t len,
              bool add,
              const uint8_t *data)
{
    double *chunk = r->work64 + s_chunk_start(r, c);
    if (!add) {
        memcpy(chunk, data, len * sizeof(double));
        return;
    }
    for (size_t e = 0; e < len; e++) {
        double v;
        memcpy(&v, data + e * sizeof v, sizeof v);
        chunk[e] += v;
    }
}

rumor_err
gossip_ring_absorb(rumor_gossip *g,
                   struct gossip_ring *r,
                   uint32_t round,
                   const struct rumor_gossip_msg *msgs,
                   size_t count)
{
    size_t n = r->n, from = (r->self + n - 1) % n;
    uint32_t prev = gossip_ring_prev(g);
    size_t c = s_chunk_sent(r, from, round), len = s_chunk_len(r, c);
    const struct rumor_gossip_msg *slot = NULL;
    rumor_err rc =
        gossip_match_inbox(g, &prev, 1, msgs, count, len * s_elem(r), &slot);
    if (rc == RUMOR_OK)
        rc = r->wide ? s_check_finite64(g, slot) : gossip_check_finite(g, slot);
    if (rc == RUMOR_OK)
        rc = s_screen(g, r, round, c, slot);
    if (rc != RUMOR_OK)
        return rc;
    if (r->wide) {
        s_absorb_wide(r, c, len, round < n - 1, slot->data);
        return RUMOR_OK;
    }
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

rumor_err
gossip_gather_init(struct gossip_gather *a, const rumor_gossip *g, size_t cap)
{
    size_t n = g->nodes;
    *a = (struct gossip_gather){.slots = n, .cap = cap};
    a->payload = calloc(n, sizeof *a->payload);
    a->len = calloc(n, sizeof *a->len);
    if (a->payload == NULL || a->len == NULL)
        return RUMOR_ENOMEM;
    for (size_t j = 0; j < n; j++)
        if ((a->payload[j] = malloc(cap)) == NULL)
            return RUMOR_ENOMEM;
    return RUMOR_OK;
}

void
gossip_gather_free(struct gossip_gather *a)
{
    for (size_t j = 0; a->payload != NULL && j < a->slots; j++)
        free(a->payload[j]);
    free(a->payload);
    free(a->len);
    memset(a, 0, sizeof *a);
}

rumor_err
gossip_gather_emit(rumor_gossip *g,
                   const struct gossip_gather *a,
                   uint32_t round)
{
    rumor_err rc = gossip_out_reserve(g, 1);
    if (rc != RUMOR_OK)
        return rc;
    size_t n = g->ring_n, from = (g->ring_pos + n - round % n) % n;
    g->out[0] = (struct rumor_gossip_msg){gossip_ring_next(g),
                                          a->payload[from],
                                          a->len[from]};
    return RUMOR_OK;
}

rumor_err
gossip_gather_absorb(const rumor_gossip *g,
                     struct gossip_gather *a,
                     uint32_t round,
                     const struct rumor_gossip_msg *msgs,
                     size_t count,
                     bool *complete)
{
    size_t n = g->ring_n;
    uint32_t prev = gossip_ring_prev(g);
    const struct rumor_gossip_msg *slot = NULL;
    rumor_err rc = gossip_match_peers(g, &prev, 1, msgs, count, &slot);
    if (rc != RUMOR_OK)
        return rc;
    if (slot->len == 0 || slot->len > a->cap) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip %s: node %u rejected %zu bytes from %u (at most "
                  "%zu)",
                  g->algo->name,
                  g->self,
                  slot->len,
                  prev,
                  a->cap);
        return RUMOR_EPROTO;
    }
    size_t from = (g->ring_pos + 2 * n - 1 - round % n) % n;
    memcpy(a->payload[from], slot->data, slot->len);
    a->len[from] = slot->len;
    *complete = round + 2 == n;
    return RUMOR_OK;
}

/* --- the ring's members --------------------------------------------------- */

uint32_t
gossip_ring_next(const rumor_gossip *g)
{
    return g->ring[(g->ring_pos + 1) % g->ring_n];
}

uint32_t
gossip_ring_prev(const rumor_gossip *g)
{
    return g->ring[(g->ring_pos + g->ring_n - 1) % g->ring_n];
}

bool
gossip_ring_has(const rumor_gossip *g, uint32_t node)
{
    size_t lo = 0, hi = g->ring_n;
    while (lo < hi) { /* the list is sorted */
        size_t mid = lo + (hi - lo) / 2;
        if (g->ring[mid] < node)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g->ring_n && g->ring[lo] == node;
}

/* Why members[0..count) cannot be g's ring (NULL: it can); *pos receives
 * g's position in it. */
static const char *
s_members_check(const rumor_gossip *g,
                const uint32_t *members,
                size_t count,
                size_t *pos)
{
    *pos = count;
    if (!rumor_gossip_uses_ring(g))
        return "the algorithm has no ring";
    if (g->in_step)
        return "a step is in progress";
    if (members == NULL || count == 0)
        return "no member";
    for (size_t i = 0; i < count; i++) {
        if (members[i] >= g->nodes)
            return "a node outside the topology";
        if (i > 0 && members[i] <= members[i - 1])
            return "not sorted or not unique";
        if (members[i] == g->self)
            *pos = i;
    }
    return *pos == count ? "this node is not a member" : NULL;
}

rumor_err
rumor_gossip_members_set(rumor_gossip *g, const uint32_t *members, size_t count)
{
    size_t pos = 0;
    const char *why = s_members_check(g, members, count, &pos);
    if (why != NULL) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip %s: node %u refused a ring of %zu members: %s",
                  g->algo->name,
                  g->self,
                  count,
                  why);
        return RUMOR_EINVAL;
    }
    rumor_err rc = g->algo->members != NULL
                       ? g->algo->members(g, members, count)
                       : RUMOR_OK;
    if (rc != RUMOR_OK)
        return rc;
    memmove(g->ring, members, count * sizeof *members);
    g->ring_n = count;
    g->ring_pos = (uint32_t)pos;
    return RUMOR_OK;
}
