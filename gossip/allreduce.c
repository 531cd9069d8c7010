/*
 * Exact average by ring all-reduce (gossip/ring.c): the baseline every
 * compressed algorithm is compared with. Work happens on a private flat
 * copy; the model is written only after the last round, so a failed round
 * leaves it as it was.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    (void)diag;
    struct gossip_ring *r = calloc(1, sizeof *r);
    if (r == NULL)
        return RUMOR_ENOMEM;
    g->state = r;
    return gossip_ring_init(r, g->self, g->nodes, g->numel);
}

static void
s_free(rumor_gossip *g)
{
    if (g->state == NULL)
        return;
    gossip_ring_free(g->state);
    free(g->state);
    g->state = NULL;
}

static uint32_t
s_rounds(const rumor_gossip *g, uint64_t step)
{
    (void)step;
    return gossip_ring_rounds(g->state);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)step;
    struct gossip_ring *r = g->state;
    if (round == 0) {
        gossip_ring_start(r, g->numel, true);
        gossip_flat_get(g, 0, g->numel, r->work);
    }
    rumor_err rc = gossip_out_reserve(g, 1);
    if (rc == RUMOR_OK)
        gossip_ring_emit(r, round, &g->out[0]);
    return rc;
}

static rumor_err
s_absorb(rumor_gossip *g,
         uint64_t step,
         uint32_t round,
         const struct rumor_gossip_msg *msgs,
         size_t count)
{
    (void)step;
    struct gossip_ring *r = g->state;
    rumor_err rc = gossip_ring_absorb(g, r, round, msgs, count);
    if (rc == RUMOR_OK && round + 1 == gossip_ring_rounds(r))
        gossip_flat_put(g, 0, g->numel, r->work);
    return rc;
}

const struct gossip_algo_i gossip_allreduce = {
    .name = "allreduce",
    .init = s_init,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = gossip_expected_prev,
    .uses_ring = gossip_always_ring,
    .absorb = s_absorb,
};
