/*
 * gossip: ring all-reduce against the arithmetic mean (float64 reference)
 * for 2..9 nodes and sizes not divisible by the node count; D-PSGD keeping
 * the network average and reaching consensus on ring, torus, complete and
 * time-varying graphs; rejection of bad inboxes with the model unchanged;
 * byte accounting of the simulator.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/lowrank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n nodes, each with a model of two tensors (a matrix and a vector). */
struct cluster {
    rumor_topology *topo;
    size_t n, rows, cols, bias;
    float **x; /* per node: rows * cols + bias floats, both tensors */
    rumor_gossip **nodes;
    rumor_sim *sim;
};

static void s_cluster_new_opts(struct cluster *c,
                               const char *spec,
                               const struct rumor_gossip_opts *opts,
                               size_t rows,
                               size_t cols,
                               size_t bias);

static void
s_cluster_new(struct cluster *c,
              const char *spec,
              const char *algo,
              size_t rows,
              size_t cols,
              size_t bias)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "%s", algo);
    s_cluster_new_opts(c, spec, &opts, rows, cols, bias);
}

/* Robust mixing off: the checks of an exactly kept average. The adaptive
 * radius differs between an edge's two ends, so an honest difference it
 * clips (models started at random are apart by very different distances)
 * moves the average (tests/unit/test_robust.c covers the clip;
 * test_every_algorithm__... runs with it on). */
static void
s_exact(struct rumor_gossip_opts *opts)
{
    snprintf(opts->robust, sizeof opts->robust, "off");
}

static void
s_cluster_new_exact(struct cluster *c,
                    const char *spec,
                    const char *algo,
                    size_t rows,
                    size_t cols,
                    size_t bias)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "%s", algo);
    s_exact(&opts);
    s_cluster_new_opts(c, spec, &opts, rows, cols, bias);
}

/* The instances over the models c->x, and the simulator. */
static void
s_cluster_nodes(struct cluster *c, const struct rumor_gossip_opts *opts)
{
    struct rumor_diag diag = {0};
    for (size_t i = 0; i < c->n; i++) {
        struct rumor_tensor tensors[2] = {
            {c->x[i], 2, {c->rows, c->cols}},
            {c->x[i] + c->rows * c->cols, 1, {c->bias}},
        };
        struct rumor_model model = {tensors, c->bias ? 2 : 1};
        rumor_err rc = rumor_gossip_new(opts,
                                        c->topo,
                                        (uint32_t)i,
                                        &model,
                                        &c->nodes[i],
                                        &diag);
        if (rc != RUMOR_OK)
            fail_msg("gossip_new: %s", diag.msg);
    }
    assert_int_equal(rumor_sim_new(c->nodes, c->n, &c->sim), RUMOR_OK);
}

static void
s_cluster_new_opts(struct cluster *c,
                   const char *spec,
                   const struct rumor_gossip_opts *opts,
                   size_t rows,
                   size_t cols,
                   size_t bias)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &c->topo, &diag),
                     RUMOR_OK);
    c->n = rumor_topology_nodes(c->topo);
    c->rows = rows;
    c->cols = cols;
    c->bias = bias;
    c->x = calloc(c->n, sizeof *c->x);
    c->nodes = calloc(c->n, sizeof *c->nodes);
    for (size_t i = 0; i < c->n; i++) {
        size_t numel = rows * cols + bias;
        c->x[i] = malloc(numel * sizeof(float));
        struct rumor_rng rng;
        rumor_rng_init(&rng, 42, i);
        for (size_t e = 0; e < numel; e++)
            c->x[i][e] = (float)rumor_rng_normal(&rng) + (float)i;
    }
    s_cluster_nodes(c, opts);
}

/* The instances made again over the models as they are now (the model an
 * instance is made with is localsgd's tentative anchor). */
static void
s_cluster_renew(struct cluster *c, const struct rumor_gossip_opts *opts)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++)
        rumor_gossip_destroy(&c->nodes[i]);
    s_cluster_nodes(c, opts);
}

static void
s_cluster_free(struct cluster *c)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++) {
        rumor_gossip_destroy(&c->nodes[i]);
        free(c->x[i]);
    }
    free(c->x);
    free(c->nodes);
    rumor_topology_destroy(&c->topo);
}

static size_t
s_numel(const struct cluster *c)
{
    return c->rows * c->cols + c->bias;
}

static double *
s_mean(const struct cluster *c)
{
    double *mean = calloc(s_numel(c), sizeof *mean);
    for (size_t e = 0; e < s_numel(c); e++) {
        for (size_t i = 0; i < c->n; i++)
            mean[e] += c->x[i][e];
        mean[e] /= (double)c->n;
    }
    return mean;
}

static double
s_consensus_error(const struct cluster *c)
{
    double *mean = s_mean(c), total = 0;
    for (size_t i = 0; i < c->n; i++)
        for (size_t e = 0; e < s_numel(c); e++)
            total += (c->x[i][e] - mean[e]) * (c->x[i][e] - mean[e]);
    free(mean);
    return total / (double)c->n;
}

static void
test_allreduce__2_to_9_nodes_odd_sizes__equals_mean(void **state)
{
    (void)state;
    for (int n = 2; n <= 9; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "ring:%d", n);
        struct cluster c;
        s_cluster_new(&c, spec, "allreduce", 7, 13, 5); /* 96 = not k*n */
        double *want = s_mean(&c);
        assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
        for (size_t i = 0; i < c.n; i++) {
            for (size_t e = 0; e < s_numel(&c); e++) {
                double err = fabs(c.x[i][e] - want[e]);
                if (err > 1e-6 * (1 + fabs(want[e])))
                    fail_msg("n=%d node %zu elem %zu: %.9g vs mean %.9g",
                             n,
                             i,
                             e,
                             c.x[i][e],
                             want[e]);
            }
            /* Every node ends with the same bits. */
            assert_memory_equal(c.x[i], c.x[0], s_numel(&c) * sizeof(float));
        }
        free(want);
        s_cluster_free(&c);
    }
}

static void
test_allreduce__bytes__two_n_minus_1_over_n_of_model(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "ring:4", "allreduce", 10, 10, 0);
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    /* 6 rounds, each one chunk of 25 floats plus a 64-byte header. */
    assert_int_equal(rumor_sim_bytes_sent(c.sim, 0), 6 * (25 * 4 + 64));
    s_cluster_free(&c);
}

static void
test_dpsgd__symmetric_w__average_kept_consensus_reached(void **state)
{
    (void)state;
    const char *specs[] = {"ring:8", "torus:3x4", "complete:6", "star:7"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        struct cluster c;
        s_cluster_new_exact(&c, specs[s], "dpsgd", 10, 10, 3);
        double *mean0 = s_mean(&c), e0 = s_consensus_error(&c), prev = e0;
        for (uint64_t step = 1; step <= 1000; step++) {
            assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
            if (step <= 5) {
                /* Strictly decreasing until it reaches rounding level
                 * (the complete graph gets there in one step). */
                double e = s_consensus_error(&c);
                if (prev > 1e-12 * e0 && !(e < prev))
                    fail_msg("%s step %llu: error %.3g after %.3g",
                             specs[s],
                             (unsigned long long)step,
                             e,
                             prev);
                prev = e;
            }
        }
        double *mean = s_mean(&c), norm = 0, drift = 0;
        for (size_t e = 0; e < s_numel(&c); e++) {
            norm += mean0[e] * mean0[e];
            drift += (mean[e] - mean0[e]) * (mean[e] - mean0[e]);
        }
        if (sqrt(drift / norm) > 1e-6)
            fail_msg("%s: average drifted by %.3g relative",
                     specs[s],
                     sqrt(drift / norm));
        assert_true(s_consensus_error(&c) < 1e-10 * e0);
        free(mean0);
        free(mean);
        s_cluster_free(&c);
    }
}

static void
test_dpsgd__one_peer_exp__exact_average_after_one_period(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "one-peer-exp:8", "dpsgd", 4, 4, 0);
    double *want = s_mean(&c);
    for (uint64_t step = 0; step < 3; step++)
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
    for (size_t i = 0; i < c.n; i++)
        for (size_t e = 0; e < s_numel(&c); e++)
            assert_float_equal(c.x[i][e], want[e], 1e-5);
    free(want);
    s_cluster_free(&c);
}

/* Runs node 1 of a 3-ring by hand with a doctored inbox. */
static void
test_absorb__bad_inboxes__rejected_model_unchanged(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "ring:3", "dpsgd", 2, 2, 0);
    const struct rumor_gossip_msg *out = NULL;
    size_t count = 0;
    float good[4] = {1, 2, 3, 4}, nan[4] = {1, NAN, 3, 4};
    float before[4];
    memcpy(before, c.x[1], sizeof before);
    assert_int_equal(rumor_gossip_emit(c.nodes[1], 0, 0, &out, &count),
                     RUMOR_OK);
    assert_int_equal(count, 2);
    const uint8_t *g = (const uint8_t *)good, *b = (const uint8_t *)nan;
    const struct {
        struct rumor_gossip_msg msgs[3];
        size_t count;
        rumor_err rc;
    } cases[] = {
        {{{0, g, 16}}, 1, RUMOR_ETIMEDOUT},                      /* 2 missing */
        {{{0, g, 16}, {2, b, 16}}, 2, RUMOR_ENUMERIC},           /* NaN */
        {{{0, g, 16}, {2, g, 12}}, 2, RUMOR_EPROTO},             /* short */
        {{{0, g, 16}, {0, g, 16}}, 2, RUMOR_EPROTO},             /* duplicate */
        {{{0, g, 16}, {2, g, 16}, {1, g, 16}}, 3, RUMOR_EPROTO}, /* self */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rumor_err rc = rumor_gossip_absorb(c.nodes[1],
                                           0,
                                           0,
                                           cases[k].msgs,
                                           cases[k].count);
        if (rc != cases[k].rc)
            fail_msg("case %zu: %s, want %s",
                     k,
                     rumor_errname(rc),
                     rumor_errname(cases[k].rc));
        assert_memory_equal(c.x[1], before, sizeof before);
    }
    struct rumor_gossip_msg ok[2] = {{2, g, 16}, {0, g, 16}};
    assert_int_equal(rumor_gossip_absorb(c.nodes[1], 0, 0, ok, 2), RUMOR_OK);
    /* Ring of 3 with weights 1/3: (x + 2 * good) / 3. */
    for (int e = 0; e < 4; e++)
        assert_float_equal(c.x[1][e], (before[e] + 2 * good[e]) / 3, 1e-6);
    s_cluster_free(&c);
}

/* gamma auto for CHOCO = min(1, (1 / sqrt(omega) - 1) / (2 beta)). For
 * top-k at ratio 0.01 of standard normals, omega is 1 minus the share of
 * E x^2 above the 99.5 % quantile t = 2.5758: 2 (t phi(t) + 1 - Phi(t)) =
 * 0.08450, omega = 0.91550 (the tail formula, not the codec). beta =
 * 1 - lambda_min(W): 4/3 on an even ring with weights 1/3 (lambda_min =
 * 1/3 - 2/3), 1 on a complete graph (W = J / n). So 0.01692 and 0.02257,
 * within 3 % (one 100 x 100 sample); a lossless codec gets 1; dpsgd,
 * powergossip 1 and moniqua 0.2 whatever the codec; an explicit gamma
 * is kept. */
static double
s_gamma_of(const char *algo, const char *codec, const char *spec, double g)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    assert_true(opts.gamma == RUMOR_GOSSIP_GAMMA_AUTO);
    snprintf(opts.algo, sizeof opts.algo, "%s", algo);
    snprintf(opts.codec, sizeof opts.codec, "%s", codec);
    opts.gamma = g;
    struct cluster c;
    s_cluster_new_opts(&c, spec, &opts, 100, 100, 0);
    double gamma = rumor_gossip_gamma(c.nodes[0]);
    for (size_t i = 1; i < c.n; i++) /* the same on every node */
        assert_true(rumor_gossip_gamma(c.nodes[i]) == gamma);
    s_cluster_free(&c);
    return gamma;
}

static void
test_gamma_auto__topk_ring_complete__matches_tail_formula(void **state)
{
    (void)state;
    double omega = 1 - 0.08450;
    double ring = (1 / sqrt(omega) - 1) / (2 * 4.0 / 3);
    double complete = (1 / sqrt(omega) - 1) / 2;
    const char *topk = "topk:ratio=0.01";
    assert_float_equal(s_gamma_of("choco", topk, "ring:6", 0),
                       ring,
                       0.03 * ring);
    assert_float_equal(s_gamma_of("deepsqueeze", topk, "complete:8", 0),
                       complete,
                       0.03 * complete);
    assert_float_equal(s_gamma_of("choco", "fp32", "ring:6", 0), 1, 0);
    assert_float_equal(s_gamma_of("dpsgd", topk, "ring:6", 0), 1, 0);
    assert_float_equal(s_gamma_of("powergossip", topk, "ring:6", 0), 1, 0);
    assert_float_equal(s_gamma_of("moniqua", topk, "ring:6", 0), 0.2, 0);
    assert_float_equal(s_gamma_of("choco", topk, "ring:6", 0.7), 0.7, 0);
}

/* 2-bit QSGD on buckets of 512 errs by more than the value (omega =
 * sqrt(512) / 3 or so, unscaled): refused, naming --codec and --gamma. */
static void
test_gamma_auto__codec_too_coarse__refused_naming_options(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "choco");
    snprintf(opts.codec, sizeof opts.codec, "qsgd:bits=2");
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, &diag), 0);
    float x[4096] = {0};
    struct rumor_tensor tensor = {x, 2, {64, 64}};
    struct rumor_model model = {&tensor, 1};
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&opts, t, 0, &model, &g, &diag),
                     RUMOR_EINVAL);
    assert_null(g);
    assert_non_null(strstr(diag.msg, "--codec"));
    assert_non_null(strstr(diag.msg, "--gamma"));
    assert_non_null(strstr(diag.msg, "qsgd:bits=2"));
    rumor_topology_destroy(&t);
}

static void
test_gossip_new__unknown_algorithm__named_in_error(void **state)
{
    (void)state;
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, &diag),
                     RUMOR_OK);
    float x[4] = {0};
    struct rumor_tensor tensor = {x, 1, {4}};
    struct rumor_model model = {&tensor, 1};
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "telepathy");
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&opts, t, 0, &model, &g, &diag),
                     RUMOR_EINVAL);
    assert_null(g);
    assert_non_null(strstr(diag.msg, "'telepathy'"));
    rumor_topology_destroy(&t);
}

static void
test_wire_bytes__chunks__one_header_each(void **state)
{
    (void)state;
    assert_int_equal(rumor_gossip_wire_bytes(0), RUMOR_FRAME_HEADER_BYTES);
    assert_int_equal(rumor_gossip_wire_bytes(100),
                     100 + RUMOR_FRAME_HEADER_BYTES);
    assert_int_equal(rumor_gossip_wire_bytes(RUMOR_FRAME_CHUNK_MAX + 1),
                     RUMOR_FRAME_CHUNK_MAX + 1 + 2 * RUMOR_FRAME_HEADER_BYTES);
}

/* Runs `steps` steps; returns the relative drift of the network average
 * and the final consensus error relative to the start. */
static void
s_run(struct cluster *c, uint64_t steps, double *drift, double *rel_error)
{
    double *mean0 = s_mean(c), e0 = s_consensus_error(c);
    for (uint64_t step = 1; step <= steps; step++) {
        rumor_err rc = rumor_sim_step(c->sim, step);
        if (rc != RUMOR_OK)
            fail_msg("step %llu: %s",
                     (unsigned long long)step,
                     rumor_errname(rc));
    }
    double *mean = s_mean(c), norm = 0, d = 0;
    for (size_t e = 0; e < s_numel(c); e++) {
        norm += mean0[e] * mean0[e];
        d += (mean[e] - mean0[e]) * (mean[e] - mean0[e]);
    }
    *drift = sqrt(d / norm);
    *rel_error = s_consensus_error(c) / e0;
    free(mean0);
    free(mean);
}

static void
test_choco__codecs_on_graphs__average_kept_error_falls(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *codec;
        double gamma;
    } cases[] = {
        {"ring:8", "qsgd:bits=4", 0.5},
        {"torus:3x3", "topk:ratio=0.05", 0.1},
        {"complete:5", "sign", 0.1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct rumor_gossip_opts opts;
        rumor_gossip_opts_default(&opts);
        snprintf(opts.algo, sizeof opts.algo, "choco");
        snprintf(opts.codec, sizeof opts.codec, "%s", cases[k].codec);
        opts.gamma = cases[k].gamma;
        s_exact(&opts);
        struct cluster c;
        s_cluster_new_opts(&c, cases[k].spec, &opts, 10, 10, 4);
        double drift = 0, rel = 0;
        s_run(&c, 1000, &drift, &rel);
        if (drift > 1e-6 || !(rel < 1e-3))
            fail_msg("%s %s: drift %.3g, consensus error %.3g",
                     cases[k].spec,
                     cases[k].codec,
                     drift,
                     rel);
        s_cluster_free(&c);
    }
}

static void
test_choco__lossless_codec_gamma_1__equals_dpsgd(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "choco");
    snprintf(opts.codec, sizeof opts.codec, "fp32");
    struct cluster a, b;
    s_cluster_new_opts(&a, "ring:6", &opts, 5, 5, 2);
    s_cluster_new(&b, "ring:6", "dpsgd", 5, 5, 2);
    double d1, r1, d2, r2;
    s_run(&a, 20, &d1, &r1);
    s_run(&b, 20, &d2, &r2);
    for (size_t i = 0; i < a.n; i++)
        for (size_t e = 0; e < s_numel(&a); e++)
            assert_float_equal(a.x[i][e], b.x[i][e], 1e-5);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

static void
test_powergossip__ring_torus_complete__average_kept_error_falls(void **state)
{
    (void)state;
    const char *specs[] = {"ring:8", "torus:3x3", "complete:5"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        struct rumor_gossip_opts opts;
        rumor_gossip_opts_default(&opts);
        snprintf(opts.algo, sizeof opts.algo, "powergossip");
        s_exact(&opts);
        struct cluster c;
        s_cluster_new_opts(&c, specs[k], &opts, 12, 9, 5);
        double drift = 0, rel = 0;
        s_run(&c, 1000, &drift, &rel);
        if (drift > 1e-6 || !(rel < 0.05))
            fail_msg("%s: drift %.3g, consensus error %.3g",
                     specs[k],
                     drift,
                     rel);
        s_cluster_free(&c);
    }
}

/* On one-peer-exp:4 each edge moves every second step and on
 * one-peer-exp:16 every fourth. With the side of the power iteration taken
 * from the step such an edge always got the same parity, one factor was
 * never refreshed, and the error stalled (0.98 here); the side follows
 * each edge's own iteration count, as the reference's global count does on
 * its static graphs. */
static void
test_powergossip__one_peer_exp_4_and_16__error_below_1e3_in_2000_steps(
    void **state)
{
    (void)state;
    const char *specs[] = {"one-peer-exp:4", "one-peer-exp:16"};
    for (size_t k = 0; k < 2; k++) {
        struct cluster c;
        s_cluster_new_exact(&c, specs[k], "powergossip", 20, 16, 4);
        double drift = 0, rel = 0;
        s_run(&c, 2000, &drift, &rel);
        print_message("%s: consensus error %.3g, drift %.3g\n",
                      specs[k],
                      rel,
                      drift);
        if (drift > 1e-6 || !(rel < 1e-3))
            fail_msg("%s: drift %.3g, consensus error %.3g",
                     specs[k],
                     drift,
                     rel);
        s_cluster_free(&c);
    }
}

static void
test_powergossip__bytes__rank_times_side_plus_vectors(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "powergossip");
    opts.rank = 2;
    struct cluster c;
    s_cluster_new_opts(&c, "ring:4", &opts, 12, 9, 5);
    assert_int_equal(rumor_sim_step(c.sim, 0), RUMOR_OK); /* t = 1: M q */
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK); /* t = 2: M^T p */
    /* Per neighbour: rank * (rows, then cols) floats + 5 bias floats. */
    uint64_t want = 2 * (rumor_gossip_wire_bytes((2 * 12 + 5) * 4) +
                         rumor_gossip_wire_bytes((2 * 9 + 5) * 4));
    assert_int_equal(rumor_sim_bytes_sent(c.sim, 0), want);
    s_cluster_free(&c);
}

/* At step 1 (no error memory yet) the network's P = sum_i M_i Q and
 * Q = mean_i M_i^T orth(P) equal one compressor's on the mean matrix, so a
 * single-node run on the mean is an independent reference. */
static void
test_powersgd__first_step__equals_single_node_on_mean(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "powersgd");
    opts.rank = 2;
    struct cluster c;
    s_cluster_new_opts(&c, "ring:5", &opts, 12, 9, 3);
    double *mean = s_mean(&c);
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    for (size_t i = 1; i < c.n; i++)
        assert_memory_equal(c.x[i], c.x[0], s_numel(&c) * sizeof(float));

    float m[12 * 9];
    for (size_t e = 0; e < 12 * 9; e++)
        m[e] = (float)mean[e];
    struct rumor_lowrank_shape shape = {2, {12, 9}};
    struct rumor_lowrank_psgd_opts po;
    rumor_lowrank_psgd_opts_default(&po);
    po.rank = 2;
    po.seed = opts.seed;
    rumor_lowrank_psgd *one = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&one, &shape, 1, &po), RUMOR_OK);
    float *grads[1] = {m};
    struct rumor_lowrank_xchg x;
    bool done = false;
    assert_int_equal(rumor_lowrank_psgd_begin(one, grads, &x), RUMOR_OK);
    assert_int_equal(rumor_lowrank_psgd_next(one, &x, &done), RUMOR_OK);
    assert_false(done);
    assert_int_equal(rumor_lowrank_psgd_next(one, &x, &done), RUMOR_OK);
    assert_true(done);
    assert_int_equal(rumor_lowrank_psgd_end(one, grads), RUMOR_OK);
    for (size_t e = 0; e < 12 * 9; e++)
        assert_float_equal(c.x[0][e], m[e], 1e-5 * (1 + fabsf(m[e])));
    /* The bias is averaged exactly. */
    for (size_t e = 12 * 9; e < s_numel(&c); e++)
        assert_float_equal(c.x[0][e], mean[e], 1e-6 * (1 + fabs(mean[e])));
    rumor_lowrank_psgd_destroy(&one);
    free(mean);
    s_cluster_free(&c);
}

/* The float64 ring on float32 inputs: the partial sums are exact, so the
 * result is bit for bit the float32 rounding of the float64 mean formed by
 * a plain sequential sum (an independent reference), for every node
 * count and a size that no node count divides evenly. */
static void
test_allreduce_f64__2_to_9_nodes__bitwise_correctly_rounded_mean(void **state)
{
    (void)state;
    for (int n = 2; n <= 9; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "ring:%d", n);
        struct cluster c;
        s_cluster_new(&c, spec, "allreduce-f64", 7, 13, 6); /* 97 prime */
        float *want = malloc(s_numel(&c) * sizeof *want);
        for (size_t e = 0; e < s_numel(&c); e++) {
            double sum = 0;
            for (size_t i = 0; i < c.n; i++)
                sum += c.x[i][e];
            want[e] = (float)(sum / (double)c.n);
        }
        assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
        for (size_t i = 0; i < c.n; i++)
            if (memcmp(c.x[i], want, s_numel(&c) * sizeof *want) != 0)
                fail_msg("n=%d node %zu differs from the rounded mean", n, i);
        /* Twice the bytes of the float32 ring: 2 (n - 1) chunks. */
        uint64_t bytes = 0;
        for (int r = 0; r < 2 * (n - 1); r++) {
            int c0 = r < n - 1 ? (0 + n - r % n) % n
                               : (0 + 1 + n - (r - (n - 1)) % n) % n;
            size_t len = (size_t)(97 * (c0 + 1) / n - 97 * c0 / n);
            bytes += rumor_gossip_wire_bytes(len * sizeof(double));
        }
        assert_int_equal(rumor_sim_bytes_sent(c.sim, 0), bytes);
        free(want);
        s_cluster_free(&c);
    }
}

/* Per-edge accounting: only the graph's edges carry bytes, each edge
 * carries one full-model message per step for D-PSGD, and the rows sum to
 * the node totals, for every algorithm's message pattern checked here. */
static void
test_sim__bytes_per_edge__on_edges_only_and_sum_to_node_totals(void **state)
{
    (void)state;
    const char *algos[] = {"dpsgd", "powergossip", "choco", "allreduce"};
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        struct cluster c;
        s_cluster_new(&c, "torus:3x3", algos[a], 6, 5, 2);
        for (uint64_t step = 1; step <= 3; step++)
            assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        for (size_t i = 0; i < c.n; i++) {
            uint64_t row = 0;
            for (size_t j = 0; j < c.n; j++) {
                uint64_t b = rumor_sim_bytes_edge(c.sim, i, j);
                bool edge =
                    strcmp(algos[a], "allreduce") == 0
                        ? j == (i + 1) % c.n
                        : rumor_topology_weight(c.topo, 0, i, j) > 0 && i != j;
                if ((b > 0) != edge)
                    fail_msg("%s: edge %zu->%zu carries %llu bytes",
                             algos[a],
                             i,
                             j,
                             (unsigned long long)b);
                if (strcmp(algos[a], "dpsgd") == 0 && edge) {
                    assert_int_equal(b, 3 * rumor_gossip_wire_bytes(32 * 4));
                    assert_int_equal(rumor_sim_messages_edge(c.sim, i, j), 3);
                }
                row += b;
            }
            assert_int_equal(row, rumor_sim_bytes_sent(c.sim, i));
        }
        assert_int_equal(rumor_sim_bytes_edge(c.sim, c.n, 0), 0);
        s_cluster_free(&c);
    }
}

/* Every algorithm with settings that suit it. */
struct algo_case {
    const char *label, *algo, *codec, *delta_codec;
    double gamma;
    unsigned period, gossip_rounds;
    bool time_varying; /* works on a time-varying topology */
};

static const struct algo_case s_all_algos[] = {
    {"allreduce", "allreduce", "", "", 1, 1, 0, true},
    {"allreduce-f64", "allreduce-f64", "", "", 1, 1, 0, true},
    {"dpsgd", "dpsgd", "", "", 1, 1, 0, true},
    {"choco qsgd", "choco", "qsgd:bits=4", "", 0.5, 1, 0, false},
    {"choco topk", "choco", "topk:ratio=0.1", "", 0.1, 1, 0, false},
    {"deepsqueeze", "deepsqueeze", "qsgd:bits=4", "", 0.2, 1, 0, true},
    {"moniqua", "moniqua", "", "", 0.005, 1, 0, true},
    {"powergossip", "powergossip", "", "", 1, 1, 0, true},
    {"powersgd", "powersgd", "", "", 1, 1, 0, true},
    {"localsgd exact", "localsgd", "", "", 1, 2, 0, true},
    {"localsgd k=2", "localsgd", "", "", 1, 2, 2, true},
    {"localsgd topk delta", "localsgd", "", "topk:ratio=0.2", 1, 1, 0, true},
};

static void
s_algo_cluster(struct cluster *c, const char *spec, const struct algo_case *k)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "%s", k->algo);
    if (k->codec[0])
        snprintf(opts.codec, sizeof opts.codec, "%s", k->codec);
    snprintf(opts.delta_codec, sizeof opts.delta_codec, "%s", k->delta_codec);
    opts.gamma = k->gamma;
    opts.period = k->period;
    opts.gossip_rounds = k->gossip_rounds;
    opts.theta = 1.0;
    s_cluster_new_opts(c, spec, &opts, 10, 10, 4);
    if (strcmp(k->algo, "moniqua") == 0) {
        /* Moniqua needs neighbours within theta of each other: models
         * start N(0, 0.1^2) apart per element around a shared random
         * point (6 standard deviations of a difference: 0.85 < theta).
         * Its rounding noise has a step of 2 theta whatever the models,
         * so only a small gamma (noise ~ gamma^2, contraction ~ gamma)
         * lets the error fall. */
        struct rumor_rng rng;
        rumor_rng_init(&rng, 5, 5);
        for (size_t e = 0; e < s_numel(c); e++) {
            float base = (float)rumor_rng_normal(&rng);
            for (size_t i = 0; i < c->n; i++)
                c->x[i][e] = base + 0.1f * (float)rumor_rng_normal(&rng);
        }
    }
}

/* Consensus error after 2, 10 and 100 steps: below the start and falling
 * (unless already at exact consensus: the all-reduces after one step). */
static void
s_check_error_falls(const char *spec, const struct algo_case *k)
{
    struct cluster c;
    s_algo_cluster(&c, spec, k);
    double e0 = s_consensus_error(&c), prev = e0;
    uint64_t step = 0;
    const uint64_t checks[] = {2, 10, 100};
    for (size_t m = 0; m < 3; m++) {
        while (step < checks[m]) {
            step++;
            rumor_err rc = rumor_sim_step(c.sim, step);
            if (rc != RUMOR_OK)
                fail_msg("%s on %s step %llu: %s",
                         k->label,
                         spec,
                         (unsigned long long)step,
                         rumor_errname(rc));
        }
        double e = s_consensus_error(&c);
        bool exact = prev < 1e-20 * e0; /* already at consensus */
        if (!(e < e0) || (!exact && !(e < prev)))
            fail_msg("%s on %s: error %.3g after %llu steps (before %.3g, "
                     "start %.3g)",
                     k->label,
                     spec,
                     e,
                     (unsigned long long)step,
                     prev,
                     e0);
        prev = e;
    }
    s_cluster_free(&c);
}

static void
test_every_algorithm__ring_torus_complete__consensus_error_falls(void **state)
{
    (void)state;
    const char *specs[] = {"ring:8", "torus:3x3", "complete:6"};
    for (size_t k = 0; k < sizeof s_all_algos / sizeof s_all_algos[0]; k++)
        for (size_t g = 0; g < 3; g++)
            s_check_error_falls(specs[g], &s_all_algos[k]);
}

static void
test_time_varying__one_peer_exp__algorithms_that_allow_it_converge(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof s_all_algos / sizeof s_all_algos[0]; k++) {
        if (s_all_algos[k].time_varying)
            s_check_error_falls("one-peer-exp:8", &s_all_algos[k]);
    }
    /* CHOCO keeps a running sum over a fixed neighbourhood: refused. */
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("one-peer-exp:8", 1, &t, &diag),
                     RUMOR_OK);
    float x[4] = {0};
    struct rumor_tensor tensor = {x, 1, {4}};
    struct rumor_model model = {&tensor, 1};
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "choco");
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&opts, t, 0, &model, &g, &diag),
                     RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "static topology"));
    rumor_topology_destroy(&t);
}

/* --- step-ahead error feedback on least squares ------------------------ */

#define SQ_NODES 4
#define SQ_ROWS  40
#define SQ_DIM   24

struct sq_problem {
    double a[SQ_NODES][SQ_ROWS][SQ_DIM], b[SQ_NODES][SQ_ROWS];
    double opt[SQ_DIM]; /* the minimiser of sum_i f_i */
};

/* Solves sum_i A_i^T A_i x = sum_i A_i^T b_i by Gaussian elimination with
 * partial pivoting: the reference optimum. */
static void
s_sq_init(struct sq_problem *q)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, 11, 3);
    double m[SQ_DIM][SQ_DIM + 1] = {{0}};
    for (int i = 0; i < SQ_NODES; i++)
        for (int r = 0; r < SQ_ROWS; r++) {
            for (int k = 0; k < SQ_DIM; k++)
                q->a[i][r][k] = rumor_rng_normal(&rng) / sqrt(SQ_ROWS);
            q->b[i][r] = rumor_rng_normal(&rng);
            for (int k = 0; k < SQ_DIM; k++) {
                for (int l = 0; l < SQ_DIM; l++)
                    m[k][l] += q->a[i][r][k] * q->a[i][r][l];
                m[k][SQ_DIM] += q->a[i][r][k] * q->b[i][r];
            }
        }
    for (int c = 0; c < SQ_DIM; c++) {
        int piv = c;
        for (int r = c + 1; r < SQ_DIM; r++)
            if (fabs(m[r][c]) > fabs(m[piv][c]))
                piv = r;
        for (int l = 0; l <= SQ_DIM; l++) {
            double t = m[c][l];
            m[c][l] = m[piv][l];
            m[piv][l] = t;
        }
        for (int r = 0; r < SQ_DIM; r++) {
            if (r == c)
                continue;
            double f = m[r][c] / m[c][c];
            for (int l = c; l <= SQ_DIM; l++)
                m[r][l] -= f * m[c][l];
        }
    }
    for (int k = 0; k < SQ_DIM; k++)
        q->opt[k] = m[k][SQ_DIM] / m[k][k];
}

/* Runs `steps` of: look-ahead, gradient of f_i, x_i -= lr g, sync (local
 * SGD with H = 1, the delta compressed with error feedback). Returns the
 * distance of node 0's model (all nodes hold the same after a sync) to
 * the optimum, relative to the optimum's norm. */
static double
s_sq_run(const struct sq_problem *q,
         const char *codec,
         double alpha,
         double lr,
         uint64_t steps)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "localsgd");
    snprintf(opts.delta_codec, sizeof opts.delta_codec, "%s", codec);
    opts.ef_alpha = alpha;
    /* the own-error form, as measured below (the neighbourhood form:
     * tests/unit/test_saef.c) */
    snprintf(opts.saef_scope, sizeof opts.saef_scope, "self");
    struct cluster c;
    s_cluster_new_opts(&c, "ring:4", &opts, SQ_DIM, 1, 0);
    for (size_t i = 0; i < c.n; i++)
        memset(c.x[i], 0, SQ_DIM * sizeof(float));
    for (uint64_t step = 1; step <= steps; step++) {
        for (size_t i = 0; i < c.n; i++) {
            assert_int_equal(rumor_gossip_step_ahead(c.nodes[i]), RUMOR_OK);
            double g[SQ_DIM] = {0};
            for (int r = 0; r < SQ_ROWS; r++) {
                double res = -q->b[i][r];
                for (int k = 0; k < SQ_DIM; k++)
                    res += q->a[i][r][k] * c.x[i][k];
                for (int k = 0; k < SQ_DIM; k++)
                    g[k] += q->a[i][r][k] * res;
            }
            for (int k = 0; k < SQ_DIM; k++)
                c.x[i][k] = (float)(c.x[i][k] - lr * g[k]);
        }
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
    }
    double d = 0, norm = 0;
    for (int k = 0; k < SQ_DIM; k++) {
        d += (c.x[0][k] - q->opt[k]) * (c.x[0][k] - q->opt[k]);
        norm += q->opt[k] * q->opt[k];
    }
    s_cluster_free(&c);
    return sqrt(d / norm);
}

/* Heterogeneous least squares (each node its own A_i, b_i), local SGD
 * with H = 1 and the delta compressed with error feedback, at a step size
 * large enough for EF's gradient mismatch to show (lr 0.7; at 0.9 plain
 * EF diverges): SAEF (alpha 1) and alpha 0.5
 * end closer to the optimum than plain EF (alpha 0) for a sparsifier, a
 * sign codec and a 2-bit quantizer. Measured after 400 steps (relative
 * distance): topk 1.00 / 0.44 / 0.48, sign 0.77 / 0.43 / 0.48, qsgd:bits=2
 * 1.21 / 0.44 / 0.41 (EF / 0.5 / SAEF). At small steps (lr <= 0.1) plain EF
 * ends closer (e.g. topk lr 0.1: 0.089 vs 0.18): each node looks ahead by
 * its own error, not the network's average (gossip/localsgd.c). */
static void
test_saef__least_squares_large_steps__beats_plain_ef(void **state)
{
    (void)state;
    static struct sq_problem q;
    s_sq_init(&q);
    const char *codecs[] = {"topk:ratio=0.1", "sign", "qsgd:bits=2"};
    for (size_t k = 0; k < 3; k++) {
        double ef = s_sq_run(&q, codecs[k], 0.0, 0.7, 400);
        double half = s_sq_run(&q, codecs[k], 0.5, 0.7, 400);
        double sa = s_sq_run(&q, codecs[k], 1.0, 0.7, 400);
        if (!(sa < 0.7 * ef && half < 0.7 * ef))
            fail_msg("%s: distance to the optimum: EF %.3g, alpha 0.5 %.3g, "
                     "SAEF %.3g",
                     codecs[k],
                     ef,
                     half,
                     sa);
    }
    /* A lossless codec: the look-ahead changes nothing at the end. */
    assert_float_equal(s_sq_run(&q, "fp32", 1.0, 0.1, 300),
                       s_sq_run(&q, "fp32", 0.0, 0.1, 300),
                       1e-6);
}

/* Two identical nodes (so each node's error is the network's average
 * error), f(x) = 1/2 ||x - (4, 2)||^2, lr 0.5, delta codec top-1 of 2,
 * worked by hand. Both start at (0, 0), the anchor. Step 1 (e = 0):
 * x = (2, 1), Delta = (-2, -1), sent (-2, 0), e = (0, -1), model (2, 0).
 * Step 2, SAEF: look-ahead (2, 1), x = (3, 1.5), Delta = (-1, -1.5),
 * sent (0, -1.5), e = (-1, 0), model (2, 1.5). Step 3: look-ahead
 * (3, 1.5), x = (3.5, 1.75), Delta = (-1.5, -0.25), sent (-1.5, 0):
 * model (3.5, 1.5). Plain EF: step 2 from (2, 0): x = (3, 1), Delta =
 * (-1, -1) + e = (-1, -2), sent (0, -2), e = (-1, 0), model (2, 2); step
 * 3: x = (3, 2), Delta = (-1, 0) + e = (-2, 0), sent: model (4, 2). */
static void
test_saef__two_nodes_top1__hand_computed_look_ahead(void **state)
{
    (void)state;
    const double alphas[2] = {1.0, 0.0};
    const float want[2][2] = {{3.5f, 1.5f}, {4.0f, 2.0f}};
    for (int k = 0; k < 2; k++) {
        struct rumor_gossip_opts opts;
        rumor_gossip_opts_default(&opts);
        snprintf(opts.algo, sizeof opts.algo, "localsgd");
        snprintf(opts.delta_codec, sizeof opts.delta_codec, "topk:ratio=0.5");
        opts.ef_alpha = alphas[k];
        struct cluster c;
        s_cluster_new_opts(&c, "ring:2", &opts, 2, 1, 0);
        for (size_t i = 0; i < 2; i++)
            c.x[i][0] = c.x[i][1] = 0;
        s_cluster_renew(&c, &opts);
        const float target[2] = {4, 2};
        for (uint64_t step = 1; step <= 3; step++) {
            for (size_t i = 0; i < 2; i++) {
                assert_int_equal(rumor_gossip_step_ahead(c.nodes[i]), RUMOR_OK);
                for (int d = 0; d < 2; d++)
                    c.x[i][d] -= 0.5f * (c.x[i][d] - target[d]);
            }
            assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        }
        for (size_t i = 0; i < 2; i++) {
            assert_float_equal(c.x[i][0], want[k][0], 1e-6);
            assert_float_equal(c.x[i][1], want[k][1], 1e-6);
        }
        s_cluster_free(&c);
    }
}

/* Without an error memory the look-ahead is a no-op; ef_alpha needs one. */
static void
test_step_ahead__no_error_memory__noop_and_alpha_checked(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c, "ring:3", "dpsgd", 2, 2, 0);
    float before[4];
    memcpy(before, c.x[0], sizeof before);
    assert_int_equal(rumor_gossip_step_ahead(c.nodes[0]), RUMOR_OK);
    assert_memory_equal(c.x[0], before, sizeof before);
    struct rumor_tensor tensor = {before, 1, {4}};
    struct rumor_model model = {&tensor, 1};
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "localsgd");
    opts.ef_alpha = 1;
    rumor_gossip *g = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_new(&opts, c.topo, 0, &model, &g, &diag),
                     RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "delta_codec"));
    snprintf(opts.delta_codec, sizeof opts.delta_codec, "sign");
    opts.ef_alpha = 1.5;
    assert_int_equal(rumor_gossip_new(&opts, c.topo, 0, &model, &g, &diag),
                     RUMOR_EINVAL);
    s_cluster_free(&c);
}

/* Least squares per node: f_i(x) = 1/2 ||A_i x - b_i||^2, A_i 10 x 6. */
struct lsq {
    double a[4][10][6], b[4][10];
};

static void
s_lsq_init(struct lsq *q)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, 7, 7);
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < 10; r++) {
            for (int k = 0; k < 6; k++)
                q->a[i][r][k] = rumor_rng_normal(&rng) / 3;
            q->b[i][r] = rumor_rng_normal(&rng);
        }
}

/* grad of f_i at x (6 values, float or double through double). */
static void
s_lsq_grad(const struct lsq *q, int i, const double *x, double *g)
{
    for (int k = 0; k < 6; k++)
        g[k] = 0;
    for (int r = 0; r < 10; r++) {
        double res = -q->b[i][r];
        for (int k = 0; k < 6; k++)
            res += q->a[i][r][k] * x[k];
        for (int k = 0; k < 6; k++)
            g[k] += q->a[i][r][k] * res;
    }
}

static void
s_local_sgd_step(const struct lsq *q, struct cluster *c, double lr)
{
    for (size_t i = 0; i < c->n; i++) {
        double x[6], g[6];
        for (int k = 0; k < 6; k++)
            x[k] = c->x[i][k];
        s_lsq_grad(q, (int)i, x, g);
        for (int k = 0; k < 6; k++)
            c->x[i][k] = (float)(x[k] - lr * g[k]);
    }
}

static void
s_localsgd_cluster(struct cluster *c, unsigned period, const char *codec)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "localsgd");
    snprintf(opts.delta_codec, sizeof opts.delta_codec, "%s", codec);
    opts.period = period;
    s_cluster_new_opts(c, "ring:4", &opts, 6, 1, 0);
    for (size_t i = 0; i < c->n; i++)
        for (int k = 0; k < 6; k++)
            c->x[i][k] = 0.1f * (float)k;
    s_cluster_renew(c, &opts); /* every node starts from that model */
}

static void
test_localsgd__h1_exact__equals_synchronous_sgd(void **state)
{
    (void)state;
    struct lsq q;
    s_lsq_init(&q);
    struct cluster c;
    s_localsgd_cluster(&c, 1, "");
    double ref[6], g[6], mean[6];
    for (int k = 0; k < 6; k++)
        ref[k] = 0.1 * k;
    for (uint64_t step = 1; step <= 50; step++) {
        for (int k = 0; k < 6; k++)
            mean[k] = 0;
        for (int i = 0; i < 4; i++) {
            s_lsq_grad(&q, i, ref, g);
            for (int k = 0; k < 6; k++)
                mean[k] += g[k] / 4;
        }
        for (int k = 0; k < 6; k++)
            ref[k] -= 0.05 * mean[k];
        s_local_sgd_step(&q, &c, 0.05);
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
    }
    for (size_t i = 0; i < c.n; i++)
        for (int k = 0; k < 6; k++)
            assert_float_equal(c.x[i][k], ref[k], 1e-5 * (1 + fabs(ref[k])));
    s_cluster_free(&c);
}

static void
test_localsgd__lossless_delta_codec__equals_uncompressed(void **state)
{
    (void)state;
    struct lsq q;
    s_lsq_init(&q);
    struct cluster a, b;
    s_localsgd_cluster(&a, 4, "fp32");
    s_localsgd_cluster(&b, 4, "");
    for (uint64_t step = 1; step <= 40; step++) {
        s_local_sgd_step(&q, &a, 0.05);
        s_local_sgd_step(&q, &b, 0.05);
        assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
        assert_int_equal(rumor_sim_step(b.sim, step), RUMOR_OK);
    }
    for (size_t i = 0; i < a.n; i++)
        for (int k = 0; k < 6; k++)
            assert_float_equal(a.x[i][k], b.x[i][k], 1e-5);
    /* The compressed path sends n - 1 payloads, the ring 2 (n - 1) chunks. */
    assert_true(rumor_sim_bytes_sent(a.sim, 0) > 0);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

/* Two nodes, one value: the DiLoCo outer step worked by hand. */
static void
test_localsgd__outer_nesterov__hand_computed(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "localsgd");
    opts.outer_lr = 0.5;
    opts.outer_momentum = 0.5;
    struct cluster c;
    s_cluster_new_opts(&c, "ring:2", &opts, 1, 1, 0);
    c.x[0][0] = 1;
    c.x[1][0] = 3;
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    assert_float_equal(c.x[0][0], 2, 1e-6); /* first sync: the average */
    c.x[0][0] -= 1;                         /* local steps: 1 and -1 */
    c.x[1][0] -= 3;
    /* d = 2 - 0 = 2; v = 2; x = 2 - 0.5 (2 + 0.5 * 2) = 0.5 */
    assert_int_equal(rumor_sim_step(c.sim, 2), RUMOR_OK);
    assert_float_equal(c.x[0][0], 0.5, 1e-6);
    assert_float_equal(c.x[1][0], 0.5, 1e-6);
    c.x[0][0] -= 1;
    c.x[1][0] -= 1;
    /* d = 0.5 - (-0.5) = 1; v = 0.5 * 2 + 1 = 2; x = 0.5 - 0.5 (1 + 1) */
    assert_int_equal(rumor_sim_step(c.sim, 3), RUMOR_OK);
    assert_float_equal(c.x[0][0], -0.5, 1e-6);
    s_cluster_free(&c);
}

static void
test_deepsqueeze__qsgd_ring__average_kept_error_plateaus_low(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "deepsqueeze");
    snprintf(opts.codec, sizeof opts.codec, "qsgd:bits=4");
    opts.gamma = 0.2;
    s_exact(&opts);
    struct cluster c;
    s_cluster_new_opts(&c, "ring:8", &opts, 10, 10, 4);
    double drift = 0, rel = 0;
    s_run(&c, 300, &drift, &rel);
    /* It converges to a neighbourhood set by the compression error. */
    if (drift > 1e-5 || !(rel < 0.02))
        fail_msg("drift %.3g, consensus error %.3g", drift, rel);
    s_cluster_free(&c);
}

/* Two nodes 0.2 apart, well inside the modulo bound: one step moves each
 * by gamma w (x_j - x_i) in expectation (the rounding is unbiased). */
static void
test_moniqua__close_models__unbiased_gossip_step(void **state)
{
    (void)state;
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    snprintf(opts.algo, sizeof opts.algo, "moniqua");
    opts.theta = 1.0;
    opts.gamma = 1.0;
    struct cluster c;
    s_cluster_new_opts(&c, "ring:2", &opts, 200, 500, 0);
    for (size_t e = 0; e < s_numel(&c); e++) {
        c.x[0][e] = 0.3f;
        c.x[1][e] = 0.5f;
    }
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    double mean0 = 0, mean1 = 0;
    for (size_t e = 0; e < s_numel(&c); e++) {
        mean0 += c.x[0][e];
        mean1 += c.x[1][e];
    }
    mean0 /= (double)s_numel(&c);
    mean1 /= (double)s_numel(&c);
    /* w = 1/2: both move to 0.4. Each element's noise is at most
     * 2 * 2 theta w = 2, so six standard errors of the mean of 1e5 draws
     * are below 6 * 2 / sqrt(1e5) = 0.038. */
    assert_float_equal(mean0, 0.4, 0.038);
    assert_float_equal(mean1, 0.4, 0.038);
    s_cluster_free(&c);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce__2_to_9_nodes_odd_sizes__equals_mean),
        cmocka_unit_test(test_allreduce__bytes__two_n_minus_1_over_n_of_model),
        cmocka_unit_test(
            test_dpsgd__symmetric_w__average_kept_consensus_reached),
        cmocka_unit_test(
            test_dpsgd__one_peer_exp__exact_average_after_one_period),
        cmocka_unit_test(test_absorb__bad_inboxes__rejected_model_unchanged),
        cmocka_unit_test(test_gossip_new__unknown_algorithm__named_in_error),
        cmocka_unit_test(
            test_gamma_auto__topk_ring_complete__matches_tail_formula),
        cmocka_unit_test(
            test_gamma_auto__codec_too_coarse__refused_naming_options),
        cmocka_unit_test(test_wire_bytes__chunks__one_header_each),
        cmocka_unit_test(
            test_choco__codecs_on_graphs__average_kept_error_falls),
        cmocka_unit_test(test_choco__lossless_codec_gamma_1__equals_dpsgd),
        cmocka_unit_test(
            test_powergossip__ring_torus_complete__average_kept_error_falls),
        cmocka_unit_test(
            test_powergossip__one_peer_exp_4_and_16__error_below_1e3_in_2000_steps),
        cmocka_unit_test(test_powergossip__bytes__rank_times_side_plus_vectors),
        cmocka_unit_test(test_powersgd__first_step__equals_single_node_on_mean),
        cmocka_unit_test(test_localsgd__h1_exact__equals_synchronous_sgd),
        cmocka_unit_test(
            test_localsgd__lossless_delta_codec__equals_uncompressed),
        cmocka_unit_test(test_localsgd__outer_nesterov__hand_computed),
        cmocka_unit_test(
            test_deepsqueeze__qsgd_ring__average_kept_error_plateaus_low),
        cmocka_unit_test(test_moniqua__close_models__unbiased_gossip_step),
        cmocka_unit_test(
            test_allreduce_f64__2_to_9_nodes__bitwise_correctly_rounded_mean),
        cmocka_unit_test(test_saef__least_squares_large_steps__beats_plain_ef),
        cmocka_unit_test(test_saef__two_nodes_top1__hand_computed_look_ahead),
        cmocka_unit_test(
            test_step_ahead__no_error_memory__noop_and_alpha_checked),
        cmocka_unit_test(
            test_sim__bytes_per_edge__on_edges_only_and_sum_to_node_totals),
        cmocka_unit_test(
            test_every_algorithm__ring_torus_complete__consensus_error_falls),
        cmocka_unit_test(
            test_time_varying__one_peer_exp__algorithms_that_allow_it_converge),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip", tests, NULL, NULL);
}
