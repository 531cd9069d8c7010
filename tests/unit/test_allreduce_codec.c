/*
 * Compressed data-parallel SGD ("allreduce" with a codec and error
 * feedback) against hand references: the mean of every node's top-k of
 * its vector, with plain error feedback (e = p - topk(p)) and with DGC's
 * momentum correction and masking, per tensor, computed here by a plain
 * selection (not the codec); every node ends with the same bits; the
 * memories survive a state save and load; --ef is refused where it does
 * not apply. TernGrad's scaler sharing (terngrad:share=1): the mean of
 * every node's ternarization at the max over nodes of the buckets' max
 * |p|, with the same rounding rule and draws, without and with error
 * feedback, and its scaler rounds counted in the bytes.
 */
#include "tests/cmocka_compat.h"

#include "compress/compress_impl.h"
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

#define TOPK "topk:k=3" /* K per tensor */

static void
s_opts(struct rumor_gossip_opts *o, const char *codec, const char *ef)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "allreduce");
    snprintf(o->codec, sizeof o->codec, "%s", codec);
    snprintf(o->ef, sizeof o->ef, "%s", ef);
    o->compressed = true;
}

static void
s_cluster_codec(struct cluster *c, const char *codec, const char *ef)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    struct rumor_gossip_opts o;
    s_opts(&o, codec, ef);
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
s_cluster_new(struct cluster *c, const char *ef)
{
    s_cluster_codec(c, TOPK, ef);
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
        s_opts(&o, TOPK, "ef");
        snprintf(o.algo, sizeof o.algo, "%s", algos[a]);
        assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_EINVAL);
        assert_non_null(strstr(diag.msg, "--ef ef does not apply"));
    }
    s_opts(&o, TOPK, "ef");
    o.compressed = false;
    assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--codec"));
    s_opts(&o, TOPK, "saef");
    assert_int_equal(rumor_gossip_ef_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "use ef or ef-decay"));
    s_opts(&o, TOPK, "dgc:0.9");
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

/* --- TernGrad's scaler sharing -------------------------------------- */

#define TB    8 /* terngrad bucket: tensor 0 in buckets of 8, 8, 4; bias 6 */
#define SHARE "terngrad:bucket=8,share=1"

/* The end of the bucket that holds flat element e. */
static size_t
s_bucket_end(size_t e)
{
    size_t base = e < ROWS * COLS ? 0 : ROWS * COLS;
    size_t end = base + ((e - base) / TB + 1) * TB;
    size_t top = e < ROWS * COLS ? ROWS * COLS : NUMEL;
    return end < top ? end : top;
}

/* S[e] = the shared scaler of e's bucket: the max over nodes of each
 * node's own scaler, the bucket's max |p_i|. */
static void
s_shared_scalers(float p[NODES][NUMEL], float *S)
{
    for (size_t lo = 0; lo < NUMEL;) {
        size_t hi = s_bucket_end(lo);
        float m = 0;
        for (size_t i = 0; i < NODES; i++)
            for (size_t e = lo; e < hi; e++)
                m = fmaxf(m, fabsf(p[i][e]));
        for (size_t e = lo; e < hi; e++)
            S[e] = m;
        lo = hi;
    }
}

/* Node i's message at step: value e goes to S sign(p) when |p| / S +
 * (r + 0.5) 2^-16 >= 1, r its draw in the stream (seed of node i and
 * tensor, step), else to 0 (the rounding rule of compress_levels). A
 * value within 1e-5 of the boundary would make the hand value depend on
 * float rounding: the test then says so instead of guessing. */
static void
s_tern_hand(const float *p, const float *S, size_t i, uint64_t step, float *out)
{
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    uint16_t r[NUMEL];
    compress_draws_ref(rumor_seed_derive(o.seed, i, 0),
                       step,
                       0,
                       r,
                       ROWS * COLS);
    compress_draws_ref(rumor_seed_derive(o.seed, i, 1),
                       step,
                       0,
                       r + ROWS * COLS,
                       BIAS);
    for (size_t e = 0; e < NUMEL; e++) {
        double a = fabs(p[e]) / S[e] + ((double)r[e] + 0.5) / 65536.0;
        if (fabs(a - 1.0) < 1e-5)
            fail_msg("node %zu value %zu: %.9g is at the boundary", i, e, a);
        out[e] = a >= 1.0 ? copysignf(S[e], p[e]) : 0.0f;
    }
}

/* Three nodes, one step, no memory: every node holds the mean of the
 * three ternarizations at the shared scalers (every non-zero of node i's
 * message is +-S, also for the nodes whose own max is smaller). */
static void
test_terngrad_share__mean_of_ternarizations_at_the_max_scaler(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_codec(&c, SHARE, "");
    float g[NODES][NUMEL], sent[NODES][NUMEL], S[NUMEL];
    s_grads(g, 0);
    g[1][3] = 9.0f; /* node 1 alone sets the first bucket's scaler */
    s_shared_scalers(g, S);
    assert_true(S[0] == 9.0f && fabsf(g[0][0]) < 9.0f);
    for (size_t i = 0; i < NODES; i++)
        s_tern_hand(g[i], S, i, 0, sent[i]);
    s_step_and_check(&c, g, sent, 0);
    s_cluster_free(&c);
}

/* ef: p = g + e; S from every node's p; send tern_S(p); e = p - sent.
 * Three steps: the memory keeps the error at the shared scale. */
static void
test_terngrad_share_with_ef__memory_keeps_the_shared_scale_error(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_codec(&c, SHARE, "ef");
    float g[NODES][NUMEL], p[NODES][NUMEL], sent[NODES][NUMEL], S[NUMEL];
    float e[NODES][NUMEL] = {{0}};
    for (uint64_t s = 0; s < 3; s++) {
        s_grads(g, s);
        for (size_t i = 0; i < NODES; i++)
            for (size_t k = 0; k < NUMEL; k++)
                p[i][k] = g[i][k] + e[i][k];
        s_shared_scalers(p, S);
        for (size_t i = 0; i < NODES; i++) {
            s_tern_hand(p[i], S, i, s, sent[i]);
            for (size_t k = 0; k < NUMEL; k++)
                e[i][k] = p[i][k] - sent[i][k];
        }
        s_step_and_check(&c, g, sent, s);
    }
    s_cluster_free(&c);
}

/* The scalers' rounds are gossip bytes: n - 1 messages of 4 bytes per
 * bucket (3 + 1 buckets) on top of the same payloads. */
static void
test_terngrad_share__scaler_rounds_counted_in_the_bytes(void **state)
{
    (void)state;
    struct cluster own, shared;
    s_cluster_codec(&own, "terngrad:bucket=8", "");
    s_cluster_codec(&shared, SHARE, "");
    float g[NODES][NUMEL];
    s_grads(g, 0);
    memcpy(own.x, g, sizeof g);
    memcpy(shared.x, g, sizeof g);
    assert_int_equal(rumor_sim_step(own.sim, 0), RUMOR_OK);
    assert_int_equal(rumor_sim_step(shared.sim, 0), RUMOR_OK);
    assert_int_equal(rumor_gossip_rounds(shared.nodes[0], 0), 2 * (NODES - 1));
    for (size_t i = 0; i < NODES; i++)
        assert_int_equal(rumor_sim_bytes_sent(shared.sim, i) -
                             rumor_sim_bytes_sent(own.sim, i),
                         (NODES - 1) * rumor_gossip_wire_bytes(4 * 4));
    s_cluster_free(&own);
    s_cluster_free(&shared);
}

/* share=1 only where nodes agree on scalers, with the reason. */
static void
test_terngrad_share__refused_outside_the_compressed_allreduce(void **state)
{
    (void)state;
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:3", 1, &t, &diag),
                     RUMOR_OK);
    float x[4] = {0};
    struct rumor_tensor ten = {x, 1, {4}};
    struct rumor_model m = {&ten, 1};
    rumor_gossip *g = NULL;
    struct rumor_gossip_opts o;
    s_opts(&o, SHARE, "");
    snprintf(o.algo, sizeof o.algo, "choco");
    o.compressed = false;
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "choco: terngrad:bucket=8,share=1"));
    assert_non_null(strstr(diag.msg, "--algo allreduce --codec"));
    s_opts(&o, "qsgd:bits=4", "");
    snprintf(o.algo, sizeof o.algo, "localsgd");
    snprintf(o.delta_codec, sizeof o.delta_codec, "%s", SHARE);
    o.compressed = false;
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "localsgd: "));
    s_opts(&o, "topk:k=1|terngrad:share=1", "");
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "not the values of a sparse one"));
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
        cmocka_unit_test(
            test_terngrad_share__mean_of_ternarizations_at_the_max_scaler),
        cmocka_unit_test(
            test_terngrad_share_with_ef__memory_keeps_the_shared_scale_error),
        cmocka_unit_test(
            test_terngrad_share__scaler_rounds_counted_in_the_bytes),
        cmocka_unit_test(
            test_terngrad_share__refused_outside_the_compressed_allreduce),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
