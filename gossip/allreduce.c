/*
 * Exact average by ring all-reduce (gossip/ring.c): the baseline every
 * compressed algorithm is compared with. Work happens on a private flat
 * copy; the model is written only after the last round, so a failed round
 * leaves it as it was. "allreduce-f64" runs the same schedule on float64
 * partial sums (twice the bytes): the sums of float32 models are then
 * exact, so every node gets the correctly rounded mean, bit for bit the
 * value a sequential float64 sum divided by n rounds to. Over a ring of
 * fewer members (rumor_gossip_members_set) both average those members.
 * On a model in device memory the model is the payload: it goes to the
 * host once and comes back once per step, and the ring sums what it
 * receives where it receives it, on the host.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>

static rumor_err
s_init(rumor_gossip *g, struct rumor_diag *diag)
{
    struct gossip_ring *r = calloc(1, sizeof *r);
    if (r == NULL)
        return RUMOR_ENOMEM;
    (void)diag;
    g->state = r;
    return gossip_ring_init(r, g->numel);
}

static rumor_err
s_init_f64(rumor_gossip *g, struct rumor_diag *diag)
{
    rumor_err rc = s_init(g, diag);
    if (rc != RUMOR_OK)
        return rc;
    gossip_ring_free(g->state);
    return gossip_ring_init_wide(g->state, g->numel);
}

/* The flat model to and from a wide ring's float64 work buffer. */
static rumor_err
s_wide_io(rumor_gossip *g, struct gossip_ring *r, bool to_model)
{
    float *tmp = malloc((g->numel + 1) * sizeof *tmp);
    if (tmp == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    if (to_model) {
        for (size_t e = 0; e < g->numel; e++)
            tmp[e] = (float)r->work64[e];
        rc = gossip_model_write(g, 0, g->numel, tmp, GOSSIP_TO_DEVICE);
    } else {
        rc = gossip_model_read(g, 0, g->numel, tmp, GOSSIP_TO_HOST);
        for (size_t e = 0; e < g->numel; e++)
            r->work64[e] = tmp[e];
    }
    free(tmp);
    return rc;
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
    return gossip_ring_rounds(g);
}

static rumor_err
s_emit(rumor_gossip *g, uint64_t step, uint32_t round)
{
    (void)step;
    struct gossip_ring *r = g->state;
    rumor_err rc = RUMOR_OK;
    if (round == 0)
        rc = gossip_ring_start(r, g, g->numel, true);
    if (round == 0 && rc == RUMOR_OK) {
        if (r->wide)
            rc = s_wide_io(g, r, false);
        else
            rc = gossip_model_read(g, 0, g->numel, r->work, GOSSIP_TO_HOST);
    }
    return rc == RUMOR_OK ? gossip_ring_emit(g, r, round) : rc;
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
    if (rc != RUMOR_OK || round + 1 != gossip_ring_rounds(g))
        return rc;
    if (r->wide)
        return s_wide_io(g, r, true);
    return gossip_model_write(g, 0, g->numel, r->work, GOSSIP_TO_DEVICE);
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

const struct gossip_algo_i gossip_allreduce_f64 = {
    .name = "allreduce-f64",
    .init = s_init_f64,
    .free = s_free,
    .rounds = s_rounds,
    .emit = s_emit,
    .expected = gossip_expected_prev,
    .uses_ring = gossip_always_ring,
    .absorb = s_absorb,
};
