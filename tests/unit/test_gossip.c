/*
 * gossip: ring all-reduce against the arithmetic mean (float64 reference)
 * for 2..9 nodes and sizes not divisible by the node count; D-PSGD keeping
 * the network average and reaching consensus on ring, torus, complete and
 * time-varying graphs; rejection of bad inboxes with the model unchanged;
 * byte accounting of the simulator.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

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
        struct rumor_tensor tensors[2] = {
            {c->x[i], 2, {rows, cols}},
            {c->x[i] + rows * cols, 1, {bias}},
        };
        struct rumor_model model = {tensors, bias ? 2 : 1};
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
        s_cluster_new(&c, specs[s], "dpsgd", 10, 10, 3);
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
    assert_int_equal(rumor_gossip_wire_bytes(0), RUMOR_NET_HEADER_BYTES);
    assert_int_equal(rumor_gossip_wire_bytes(100),
                     100 + RUMOR_NET_HEADER_BYTES);
    assert_int_equal(rumor_gossip_wire_bytes(RUMOR_NET_CHUNK_MAX + 1),
                     RUMOR_NET_CHUNK_MAX + 1 + 2 * RUMOR_NET_HEADER_BYTES);
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
        cmocka_unit_test(test_wire_bytes__chunks__one_header_each),
        cmocka_unit_test(
            test_choco__codecs_on_graphs__average_kept_error_falls),
        cmocka_unit_test(test_choco__lossless_codec_gamma_1__equals_dpsgd),
        cmocka_unit_test(
            test_powergossip__ring_torus_complete__average_kept_error_falls),
        cmocka_unit_test(test_powergossip__bytes__rank_times_side_plus_vectors),
        cmocka_unit_test(test_powersgd__first_step__equals_single_node_on_mean),
        cmocka_unit_test(test_localsgd__h1_exact__equals_synchronous_sgd),
        cmocka_unit_test(
            test_localsgd__lossless_delta_codec__equals_uncompressed),
        cmocka_unit_test(test_localsgd__outer_nesterov__hand_computed),
        cmocka_unit_test(
            test_deepsqueeze__qsgd_ring__average_kept_error_plateaus_low),
        cmocka_unit_test(test_moniqua__close_models__unbiased_gossip_step),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip", tests, NULL, NULL);
}
