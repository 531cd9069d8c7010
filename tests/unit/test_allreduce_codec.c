/*
 * Compressed data-parallel SGD ("allreduce" with a codec and error
 * feedback) against hand references: the mean of every node's top-k of
 * its vector, with plain error feedback (e = p - topk(p)) and with DGC's
 * momentum correction and masking, per tensor, computed here by a plain
 * selection (not the codec); every node ends with the same bits; the
 * memories survive a state save and load; --ef is refused where it does
 * not apply.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES 3
#define ROWS  4
#define COLS  5
#define BIAS  6
#define NUMEL (ROWS * COLS + BIAS)
#define K     3 /* topk:k=3 per tensor */

struct cluster {
    rumor_topology *topo;
    float x[NODES][NUMEL];
    rumor_gossip *nodes[NODES];
    rumor_sim *sim;
};

static void
s_opts(struct rumor_gossip_opts *o, const char *ef)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "allreduce");
    snprintf(o->codec, sizeof o->codec, "topk:k=%d", K);
    snprintf(o->ef, sizeof o->ef, "%s", ef);
    o->compressed = true;
}

static void
s_cluster_new(struct cluster *c, const char *ef)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    struct rumor_gossip_opts o;
    s_opts(&o, ef);
    assert_int_equal(rumor_topology_from_spec("ring:3", 1, &c->topo, &diag),
                     RUMOR_OK);
    for (size_t i = 0; i < NODES; i++) {
        struct rumor_tensor t[2] = {{c->x[i], 2, {ROWS, COLS}},
                                    {c->x[i] + ROWS * COLS, 1, {BIAS}}};
        struct rumor_model m = {t, 2};
        if (rumor_gossip_new(&o, c->topo, (uint32_t)i, &m, &c->nodes[i], &diag))
            fail_msg("gossip_new: %s", diag.msg);
    }
    assert_int_equal(rumor_sim_new(c->nodes, NODES, &c->sim), RUMOR_OK);
}

static void
s_cluster_free(struct cluster *c)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < NODES; i++)
        rumor_gossip_destroy(&c->nodes[i]);
    rumor_topology_destroy(&c->topo);
}

/* Gradients of step s: Gaussian, distinct magnitudes almost surely. */
static void
s_grads(float g[NODES][NUMEL], uint64_t s)
{
    for (size_t i = 0; i < NODES; i++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, 7 + s, i);
        for (size_t e = 0; e < NUMEL; e++)
            g[i][e] = (float)rumor_rng_normal(&rng);
    }
}

/* keep[e] = 1 for the K largest |v| of v[lo, hi), by repeated scans. */
static void
s_topk_mask(const float *v, size_t lo, size_t hi, int *keep)
{
    for (size_t e = lo; e < hi; e++)
        keep[e] = 0;
    for (int k = 0; k < K; k++) {
        size_t best = hi;
        for (size_t e = lo; e < hi; e++)
            if (!keep[e] && (best == hi || fabsf(v[e]) > fabsf(v[best])))
                best = e;
        keep[best] = 1;
    }
}

static void
s_topk(const float *v, int *keep)
{
    s_topk_mask(v, 0, ROWS * COLS, keep);
    s_topk_mask(v, ROWS * COLS, NUMEL, keep);
}

/* One step: nodes hold g; afterwards every node must hold the mean of
 * sent[i] (the reference's messages), bit for bit the same. */
static void
s_step_and_check(struct cluster *c,
                 float g[NODES][NUMEL],
                 float sent[NODES][NUMEL],
                 uint64_t step)
{
    memcpy(c->x, g, sizeof c->x);
    assert_int_equal(rumor_sim_step(c->sim, step), RUMOR_OK);
    for (size_t e = 0; e < NUMEL; e++) {
        double sum = 0;
        for (size_t i = 0; i < NODES; i++)
            sum += sent[i][e];
        assert_true(fabs(c->x[0][e] - sum / NODES) <= 1e-6);
    }
    for (size_t i = 1; i < NODES; i++)
        assert_memory_equal(c->x[i], c->x[0], sizeof c->x[0]);
}

static void
test_topk_without_memory__mean_of_each_nodes_topk(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "");
    float g[NODES][NUMEL], sent[NODES][NUMEL];
    int keep[NUMEL];
    s_grads(g, 0);
    for (size_t i = 0; i < NODES; i++) {
        s_topk(g[i], keep);
        for (size_t e = 0; e < NUMEL; e++)
            sent[i][e] = keep[e] ? g[i][e] : 0.0f;
    }
    s_step_and_check(&c, g, sent, 0);
    s_cluster_free(&c);
}

/* ef: p = g + e; send topk(p); e = p - topk(p). Three steps. */
static void
test_topk_with_ef__hand_error_feedback(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "ef");
    float g[NODES][NUMEL], sent[NODES][NUMEL], e[NODES][NUMEL] = {{0}};
    int keep[NUMEL];
    for (uint64_t s = 0; s < 3; s++) {
        s_grads(g, s);
        for (size_t i = 0; i < NODES; i++) {
            float p[NUMEL];
            for (size_t k = 0; k < NUMEL; k++)
                p[k] = g[i][k] + e[i][k];
            s_topk(p, keep);
            for (size_t k = 0; k < NUMEL; k++) {
                sent[i][k] = keep[k] ? p[k] : 0.0f;
                e[i][k] = p[k] - sent[i][k];
            }
        }
        s_step_and_check(&c, g, sent, s);
    }
    s_cluster_free(&c);
}

/* dgc:0.9: u = 0.9 u + g; v = v + u; send topk(v); u = v = 0 where
 * selected. Three steps, then a state saved after step 1 and loaded into
 * a fresh cluster continues identically. */
static void
test_topk_with_dgc__momentum_correction_and_masking(void **state)
{
    (void)state;
    struct cluster c, d;
    s_cluster_new(&c, "dgc:0.9");
    s_cluster_new(&d, "dgc:0.9");
    float g[NODES][NUMEL], sent[NODES][NUMEL];
    float u[NODES][NUMEL] = {{0}}, v[NODES][NUMEL] = {{0}};
    int keep[NUMEL];
    struct rumor_buf saved[NODES];
    for (uint64_t s = 0; s < 3; s++) {
        s_grads(g, s);
        for (size_t i = 0; i < NODES; i++) {
            for (size_t k = 0; k < NUMEL; k++) {
                u[i][k] = 0.9f * u[i][k] + g[i][k];
                v[i][k] = v[i][k] + u[i][k];
            }
            s_topk(v[i], keep);
            for (size_t k = 0; k < NUMEL; k++) {
                sent[i][k] = keep[k] ? v[i][k] : 0.0f;
                u[i][k] = keep[k] ? 0.0f : u[i][k];
                v[i][k] = keep[k] ? 0.0f : v[i][k];
            }
        }
        s_step_and_check(&c, g, sent, s);
        for (size_t i = 0; s == 1 && i < NODES; i++) {
            rumor_buf_init(&saved[i], RUMOR_GOSSIP_STATE_MAX);
            assert_int_equal(rumor_gossip_state_save(c.nodes[i], &saved[i]),
                             RUMOR_OK);
        }
    }
    struct rumor_diag diag = {0};
    for (size_t i = 0; i < NODES; i++) {
        assert_int_equal(rumor_gossip_state_load(d.nodes[i],
                                                 saved[i].data,
                                                 saved[i].len,
                                                 &diag),
                         RUMOR_OK);
        rumor_buf_free(&saved[i]);
    }
    memcpy(d.x, g, sizeof d.x); /* step 2's gradients */
    assert_int_equal(rumor_sim_step(d.sim, 2), RUMOR_OK);
    assert_memory_equal(d.x, c.x, sizeof c.x);
    s_cluster_free(&c);
    s_cluster_free(&d);
}

static void
test_ef__refused_where_it_does_not_apply(void **state)
{
    (void)state;
    const char *algos[] = {"choco", "dpsgd", "powersgd", "allreduce-f64"};
    struct rumor_gossip_opts o;
    struct rumor_diag diag = {0};
    for (size_t a = 0; a < 4; a++) {
        s_opts(&o, "ef");
        snprintf(o.algo, sizeof o.algo, "%s", algos[a]);
        assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_EINVAL);
        assert_non_null(strstr(diag.msg, "--ef ef does not apply"));
    }
    s_opts(&o, "ef");
    o.compressed = false;
    assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--codec"));
    s_opts(&o, "dgc:0.9");
    assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_OK);
    /* dgc needs a selection by count */
    snprintf(o.codec, sizeof o.codec, "qsgd:bits=4");
    rumor_topology *t = NULL;
    assert_int_equal(rumor_topology_from_spec("ring:3", 1, &t, &diag),
                     RUMOR_OK);
    float x[4] = {0};
    struct rumor_tensor ten = {x, 1, {4}};
    struct rumor_model m = {&ten, 1};
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "topk, randk or dgc"));
    rumor_topology_destroy(&t);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topk_without_memory__mean_of_each_nodes_topk),
        cmocka_unit_test(test_topk_with_ef__hand_error_feedback),
        cmocka_unit_test(test_topk_with_dgc__momentum_correction_and_masking),
        cmocka_unit_test(test_ef__refused_where_it_does_not_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
