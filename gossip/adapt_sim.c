/*
 * Modelled links for the simulator (issue #12, docs/adaptive.md). The
 * simulator has no clock, but adaptive compression sets its budgets from
 * link timings; this model gives it the timings a network of known rates
 * would show, from the bytes the simulator counted per directed edge in
 * the step: node i receives neighbour j's messages after
 *     tau_ij = messages_ji * latency + 8 * bytes_ji / rate_ij
 * (every node starts the step at the same time, so there is no skew), and
 * the step takes compute + max tau over the network (each node waits for
 * its slowest neighbour, and a node that waits delays its neighbours' next
 * step: over a run the network moves at its slowest link). Rates may drop
 * by a factor at a given step, the experiment of a link that degrades.
 * This is the same estimator input a real run gets (runtime.c measures
 * send-to-reply times), minus the noise of real clocks.
 */
#include "gossip/adapt.h"

#include <stdlib.h>

struct rumor_simlink {
    const rumor_sim *sim;
    rumor_gossip *const *nodes;
    size_t n;
    struct rumor_simlink_opts o;
    uint64_t *bytes, *msgs; /* per directed edge, at the last step */
};

rumor_err
rumor_simlink_new(const rumor_sim *sim,
                  rumor_gossip *const *nodes,
                  size_t n,
                  const struct rumor_simlink_opts *opts,
                  rumor_simlink **out)
{
    *out = NULL;
    bool ok = opts->rate_count >= 1 && opts->rate_count <= 8 &&
              opts->compute_s > 0 && opts->latency_s >= 0 &&
              (opts->drop_step == 0 || opts->drop_factor > 0);
    for (size_t r = 0; ok && r < opts->rate_count; r++)
        ok = opts->rates[r] > 0;
    if (!ok)
        return RUMOR_EINVAL;
    rumor_simlink *s = calloc(1, sizeof *s);
    if (s == NULL)
        return RUMOR_ENOMEM;
    s->sim = sim;
    s->nodes = nodes;
    s->n = n;
    s->o = *opts;
    s->bytes = calloc(n * n, sizeof *s->bytes);
    s->msgs = calloc(n * n, sizeof *s->msgs);
    if (s->bytes == NULL || s->msgs == NULL) {
        rumor_simlink_destroy(&s);
        return RUMOR_ENOMEM;
    }
    *out = s;
    return RUMOR_OK;
}

void
rumor_simlink_destroy(rumor_simlink **self_p)
{
    rumor_simlink *s = *self_p;
    if (s == NULL)
        return;
    free(s->bytes);
    free(s->msgs);
    free(s);
    *self_p = NULL;
}

double
rumor_simlink_rate(const rumor_simlink *s, size_t i, size_t j, uint64_t step)
{
    double r = s->o.rates[(i + j) % s->o.rate_count];
    if (s->o.drop_step > 0 && step >= s->o.drop_step)
        r /= s->o.drop_factor;
    return r;
}

double
rumor_simlink_step(rumor_simlink *s, uint64_t step)
{
    double slowest = 0;
    for (size_t i = 0; i < s->n; i++) {
        rumor_gossip_compute_observe(s->nodes[i],
                                     (uint64_t)(s->o.compute_s * 1e9));
        for (size_t j = 0; j < s->n; j++) {
            size_t e = j * s->n + i; /* j -> i */
            uint64_t b = rumor_sim_bytes_edge(s->sim, j, i);
            uint64_t m = rumor_sim_messages_edge(s->sim, j, i);
            uint64_t db = b - s->bytes[e], dm = m - s->msgs[e];
            s->bytes[e] = b;
            s->msgs[e] = m;
            if (dm == 0)
                continue;
            double tau = (double)dm * s->o.latency_s +
                         8.0 * (double)db / rumor_simlink_rate(s, i, j, step);
            rumor_gossip_link_observe(s->nodes[i],
                                      (uint32_t)j,
                                      db,
                                      (uint64_t)(tau * 1e9));
            slowest = tau > slowest ? tau : slowest;
        }
    }
    return s->o.compute_s + slowest;
}
