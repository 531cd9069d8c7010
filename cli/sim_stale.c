/*
 * The exchanges in flight of one simulated node (cli/sim_stale.h). The
 * simulator finishes an exchange within its step; what makes it stale is
 * when it lands: at the start of step t + S, the same fixed step the
 * network runtime lands it at, so both give the same bits. The result is
 * kept as G_t - s_t, rounded to float as the landing rounds it
 * (SPEC: d = G_t[e] - s_t[e]; x[e] = x[e] + d).
 */
#include "cli/sim_stale.h"
#include "rumor/train.h"

#include <stdlib.h>
#include <string.h>

rumor_err
sim_stale_init(struct sim_stale *q, unsigned s, const struct rumor_model *live)
{
    memset(q, 0, sizeof *q);
    q->s = s;
    for (size_t t = 0; t < live->count; t++)
        q->numel += rumor_tensor_numel(&live->tensors[t]);
    q->delta = malloc((size_t)s * (q->numel + 1) * sizeof *q->delta);
    q->step = malloc((size_t)s * sizeof *q->step);
    if (q->delta == NULL || q->step == NULL)
        return RUMOR_ENOMEM;
    for (unsigned k = 0; k < s; k++)
        q->step[k] = UINT64_MAX;
    return rumor_model_clone(live, &q->copy);
}

void
sim_stale_free(struct sim_stale *q)
{
    rumor_model_free(&q->copy);
    free(q->delta);
    free(q->step);
    memset(q, 0, sizeof *q);
}

void
sim_stale_snapshot(struct sim_stale *q, const struct rumor_model *live)
{
    for (size_t t = 0; t < live->count; t++)
        memcpy(q->copy->tensors[t].data,
               live->tensors[t].data,
               rumor_tensor_numel(&live->tensors[t]) * sizeof(float));
}

void
sim_stale_take(struct sim_stale *q, const struct rumor_model *live, uint64_t t)
{
    unsigned k = (unsigned)(t % q->s);
    float *d = q->delta + (size_t)k * q->numel;
    for (size_t i = 0; i < live->count; i++) {
        const float *x = live->tensors[i].data, *g = q->copy->tensors[i].data;
        size_t n = rumor_tensor_numel(&live->tensors[i]);
        for (size_t e = 0; e < n; e++)
            d[e] = g[e] - x[e];
        d += n;
    }
    q->step[k] = t;
}

/* x += the delta of slot k; the slot is free again. */
static void
s_land_slot(struct sim_stale *q, struct rumor_model *live, unsigned k)
{
    const float *d = q->delta + (size_t)k * q->numel;
    for (size_t i = 0; i < live->count; i++) {
        float *x = live->tensors[i].data;
        size_t n = rumor_tensor_numel(&live->tensors[i]);
        for (size_t e = 0; e < n; e++)
            x[e] = x[e] + d[e];
        d += n;
    }
    q->step[k] = UINT64_MAX;
}

void
sim_stale_land(struct sim_stale *q, struct rumor_model *live, uint64_t u)
{
    unsigned k = (unsigned)((u - q->s) % q->s);
    if (u >= q->s && q->step[k] == u - q->s)
        s_land_slot(q, live, k);
}

void
sim_stale_land_all(struct sim_stale *q, struct rumor_model *live)
{
    for (;;) {
        unsigned first = q->s;
        for (unsigned k = 0; k < q->s; k++)
            if (q->step[k] != UINT64_MAX &&
                (first == q->s || q->step[k] < q->step[first]))
                first = k;
        if (first == q->s)
            return;
        s_land_slot(q, live, first);
    }
}

void
sim_stale_land_nodes(struct sim_stale *q,
                     struct rumor_model *const *live,
                     size_t n,
                     uint64_t u)
{
    for (size_t i = 0; i < n; i++)
        sim_stale_land(&q[i], live[i], u);
}

rumor_err
sim_stale_exchange(struct sim_stale *q,
                   struct rumor_model *const *live,
                   rumor_sim *sim,
                   rumor_gossip *const *nodes,
                   size_t n,
                   uint64_t u,
                   bool *exchanged)
{
    *exchanged = rumor_gossip_exchanges(nodes[0], u);
    if (!*exchanged)
        return RUMOR_OK;
    for (size_t i = 0; i < n; i++)
        sim_stale_snapshot(&q[i], live[i]);
    rumor_err rc = rumor_sim_step(sim, u);
    for (size_t i = 0; i < n && rc == RUMOR_OK; i++)
        sim_stale_take(&q[i], live[i], u);
    return rc;
}
