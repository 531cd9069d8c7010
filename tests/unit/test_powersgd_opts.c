/*
 * PowerSGD's options in the algorithm (gossip/powersgd.c), on the
 * in-process simulator: start_iter (plain all-reduce first), the
 * one-sided variant over the ring, use_error_feedback, warm_start,
 * min_compression_rate, and the refusals. The reference for a compressed
 * step is lowrank/'s compressor run alone on the nodes' sum (the hook
 * variant, which sums P) or mean (one-sided, which averages): P and Q are
 * linear in M, so with the same Q every node's reduced factors equal the
 * single compressor's (docs/gossip.md, "PowerSGD options").
 * The compressor itself is checked against PyTorch's hook in
 * test_lowrank.c.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/lowrank.h"
#include "rumor/topology.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS  12
#define COLS  9
#define BIAS  3
#define NUMEL (ROWS * COLS + BIAS)

struct cluster {
    rumor_topology *topo;
    size_t n;
    float **x; /* per node: the ROWS x COLS matrix, then the bias */
    rumor_gossip **nodes;
    rumor_sim *sim;
};

/* Nodes of spec with opts; node i's values are normals + i. Returns the
 * error of rumor_gossip_new (node 0's), with its message in diag. */
static rumor_err
s_cluster_new(struct cluster *c,
              const char *spec,
              const struct rumor_gossip_opts *opts,
              struct rumor_diag *diag)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(rumor_topology_from_spec(spec, 1, &c->topo, diag), 0);
    c->n = rumor_topology_nodes(c->topo);
    c->x = calloc(c->n, sizeof *c->x);
    c->nodes = calloc(c->n, sizeof *c->nodes);
    assert_true(c->x != NULL && c->nodes != NULL);
    for (size_t i = 0; i < c->n; i++) {
        c->x[i] = malloc(NUMEL * sizeof(float));
        assert_non_null(c->x[i]);
        struct rumor_rng rng;
        rumor_rng_init(&rng, 42, i);
        for (size_t e = 0; e < NUMEL; e++)
            c->x[i][e] = (float)rumor_rng_normal(&rng) + (float)i;
        struct rumor_tensor tensors[2] = {
            {c->x[i], 2, {ROWS, COLS}},
            {c->x[i] + ROWS * COLS, 1, {BIAS}},
        };
        struct rumor_model model = {tensors, 2};
        rumor_err rc = rumor_gossip_new(opts,
                                        c->topo,
                                        (uint32_t)i,
                                        &model,
                                        &c->nodes[i],
                                        diag);
        if (rc != RUMOR_OK)
            return rc;
    }
    assert_int_equal(rumor_sim_new(c->nodes, c->n, &c->sim), RUMOR_OK);
    return RUMOR_OK;
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

static void
s_mean(const struct cluster *c, float *mean)
{
    for (size_t e = 0; e < NUMEL; e++) {
        double sum = 0;
        for (size_t i = 0; i < c->n; i++)
            sum += c->x[i][e];
        mean[e] = (float)(sum / (double)c->n);
    }
}

static void
s_psgd_opts(struct rumor_gossip_opts *o)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "powersgd");
    o->rank = 2;
}

/* One compressed step of the single compressor on m (in place). */
static void
s_reference_step(rumor_lowrank_psgd *one, float *m)
{
    float *grads[2] = {m, NULL};
    struct rumor_lowrank_xchg x;
    bool done = false;
    assert_true(rumor_lowrank_psgd_active(one));
    assert_int_equal(rumor_lowrank_psgd_begin(one, grads, &x), RUMOR_OK);
    while (!done)
        assert_int_equal(rumor_lowrank_psgd_next(one, &x, &done), RUMOR_OK);
    assert_int_equal(rumor_lowrank_psgd_end(one, grads), RUMOR_OK);
}

static rumor_lowrank_psgd *
s_reference_new(const struct rumor_gossip_opts *g)
{
    const struct rumor_lowrank_shape shapes[2] = {{2, {ROWS, COLS}},
                                                  {1, {BIAS}}};
    struct rumor_lowrank_psgd_opts po;
    rumor_lowrank_psgd_opts_default(&po);
    po.rank = g->rank;
    po.seed = g->seed;
    po.start_iter = g->start_iter;
    po.min_rate = g->min_compression_rate;
    po.error_feedback = g->use_error_feedback;
    po.warm_start = g->warm_start;
    po.eps = (float)g->orth_eps;
    po.one_sided = g->one_sided;
    po.iters = g->one_sided ? g->iterations : 1;
    rumor_lowrank_psgd *one = NULL;
    assert_int_equal(rumor_lowrank_psgd_new(&one, shapes, 2, &po), RUMOR_OK);
    return one;
}

/* Runs steps 1..steps of the cluster and of the single compressor on the
 * mean (scaled, see below), and checks after each that every node holds
 * the same model: the mean itself on a skipped step, else the
 * compressor's approximation of the matrix and the exact mean of the
 * bias. */
static void
s_check_against_mean(const struct rumor_gossip_opts *o, uint64_t steps)
{
    struct cluster c;
    struct rumor_diag diag = {0};
    if (s_cluster_new(&c, "ring:4", o, &diag) != RUMOR_OK)
        fail_msg("gossip_new: %s", diag.msg);
    rumor_lowrank_psgd *one = s_reference_new(o);
    uint32_t ring = 2 * ((uint32_t)c.n - 1);
    /* The hook variant orthogonalizes the summed P, which the epsilon
     * tells from the mean's: its reference runs on the sum, n times the
     * mean (n = 4: exact in floats), and its approximation is n times the
     * network's. The one-sided variant averages every product. */
    float scale = o->one_sided ? 1.0f : (float)c.n;
    float want[NUMEL];
    for (uint64_t step = 1; step <= steps; step++) {
        bool plain = step <= o->start_iter;
        uint32_t phases = plain ? 1 : o->one_sided ? o->iterations : 2;
        assert_int_equal(rumor_gossip_rounds(c.nodes[0], step), phases * ring);
        s_mean(&c, want);
        for (size_t e = 0; e < NUMEL; e++)
            want[e] *= scale;
        if (plain)
            rumor_lowrank_psgd_skip(one);
        else
            s_reference_step(one, want);
        for (size_t e = 0; e < NUMEL; e++)
            want[e] /= scale;
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        for (size_t i = 0; i < c.n; i++)
            for (size_t e = 0; e < NUMEL; e++)
                if (!(fabsf(c.x[i][e] - want[e]) <=
                      1e-5f * (1 + fabsf(want[e]))))
                    fail_msg("step %llu node %zu element %zu: %g, want %g",
                             (unsigned long long)step,
                             i,
                             e,
                             c.x[i][e],
                             want[e]);
    }
    rumor_lowrank_psgd_destroy(&one);
    s_cluster_free(&c);
}

/* Whether node 0's matrix is not the mean (a compressed step leaves a
 * rank-r approximation of it). */
static bool
s_differs_from_mean(const struct cluster *c, const float *mean)
{
    double d = 0;
    for (size_t e = 0; e < ROWS * COLS; e++)
        d += fabs((double)c->x[0][e] - mean[e]);
    return d > 1e-3;
}

static void
test_start_iter__plain_all_reduce_first_then_compressed(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o);
    o.start_iter = 2; /* the hook's start_powerSGD_iter */
    s_check_against_mean(&o, 4);
    /* and without it the first step is compressed, not the mean */
    s_psgd_opts(&o);
    struct cluster c;
    struct rumor_diag diag = {0};
    assert_int_equal(s_cluster_new(&c, "ring:4", &o, &diag), RUMOR_OK);
    float mean[NUMEL];
    s_mean(&c, mean);
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    assert_true(s_differs_from_mean(&c, mean));
    s_cluster_free(&c);
}

/* Node i's values after step k's local work: a fresh draw, as a new
 * gradient would be (the same in every cluster). */
static void
s_new_values(struct cluster *c, uint64_t step)
{
    for (size_t i = 0; i < c->n; i++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, 1000 + step, i);
        for (size_t e = 0; e < NUMEL; e++)
            c->x[i][e] = (float)rumor_rng_normal(&rng) + (float)i;
    }
}

/* Until start_iter PowerSGD is the allreduce algorithm on the same
 * inputs, bit for bit and round for round; the step after, it
 * compresses (the matrix is no longer the exact average). */
static void
test_start_iter__plain_steps_are_allreduce_bits_then_compressed(void **s)
{
    (void)s;
    struct rumor_gossip_opts po, ao;
    s_psgd_opts(&po);
    po.start_iter = 3;
    rumor_gossip_opts_default(&ao);
    snprintf(ao.algo, sizeof ao.algo, "allreduce");
    struct cluster p, a;
    struct rumor_diag diag = {0};
    assert_int_equal(s_cluster_new(&p, "ring:4", &po, &diag), RUMOR_OK);
    assert_int_equal(s_cluster_new(&a, "ring:4", &ao, &diag), RUMOR_OK);
    for (uint64_t step = 1; step <= po.start_iter + 1; step++) {
        s_new_values(&p, step);
        s_new_values(&a, step);
        bool plain = step <= po.start_iter;
        if (plain)
            assert_int_equal(rumor_gossip_rounds(p.nodes[0], step),
                             rumor_gossip_rounds(a.nodes[0], step));
        assert_int_equal(rumor_sim_step(p.sim, step), RUMOR_OK);
        assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
        for (size_t i = 0; i < p.n; i++) {
            bool same = memcmp(p.x[i], a.x[i], NUMEL * sizeof(float)) == 0;
            if (same != plain)
                fail_msg("step %llu node %zu: %s the all-reduce",
                         (unsigned long long)step,
                         i,
                         same ? "still" : "not");
        }
    }
    /* the bias is all-reduced on a compressed step too */
    for (size_t i = 0; i < p.n; i++)
        assert_memory_equal(p.x[i] + ROWS * COLS,
                            a.x[i] + ROWS * COLS,
                            BIAS * sizeof(float));
    s_cluster_free(&p);
    s_cluster_free(&a);
}

/* No rank given: powersgd runs at RUMOR_GOSSIP_PSGD_RANK, powergossip at
 * 1; a rank given is kept. */
static void
test_default_rank__powersgd_4__as_if_given(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    assert_int_equal(o.rank, 0);
    snprintf(o.algo, sizeof o.algo, "powergossip");
    assert_int_equal(rumor_gossip_rank(&o), 1);
    snprintf(o.algo, sizeof o.algo, "powersgd");
    assert_int_equal(rumor_gossip_rank(&o), 4);
    o.rank = 2;
    assert_int_equal(rumor_gossip_rank(&o), 2);
    /* a 12 x 9 matrix at rank 4 is left to the all-reduce ((12 + 9) 4 x 2
     * >= 108), at rank 1 or 2 compressed: the default runs as rank 4 */
    struct cluster d, given, r1;
    struct rumor_diag diag = {0};
    o.rank = 0;
    assert_int_equal(s_cluster_new(&d, "ring:4", &o, &diag), RUMOR_OK);
    o.rank = 4;
    assert_int_equal(s_cluster_new(&given, "ring:4", &o, &diag), RUMOR_OK);
    o.rank = 1;
    assert_int_equal(s_cluster_new(&r1, "ring:4", &o, &diag), RUMOR_OK);
    float mean[NUMEL];
    s_mean(&d, mean);
    assert_int_equal(rumor_sim_step(d.sim, 1), RUMOR_OK);
    assert_int_equal(rumor_sim_step(given.sim, 1), RUMOR_OK);
    assert_int_equal(rumor_sim_step(r1.sim, 1), RUMOR_OK);
    assert_memory_equal(d.x[0], given.x[0], NUMEL * sizeof(float));
    assert_false(s_differs_from_mean(&d, mean));
    assert_true(s_differs_from_mean(&r1, mean));
    s_cluster_free(&d);
    s_cluster_free(&given);
    s_cluster_free(&r1);
}

static void
test_one_sided__iterations_per_step__equal_one_compressor_on_the_mean(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o);
    o.one_sided = true; /* epfml/powersgd's PowerSGD */
    o.iterations = 3;   /* its num_iters_per_step */
    o.start_iter = 1;
    s_check_against_mean(&o, 3);
    o.iterations = 1;
    s_check_against_mean(&o, 2);
}

static void
test_no_error_feedback_no_warm_start_eps__equal_one_compressor(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o);
    o.use_error_feedback = false;
    o.warm_start = false;
    o.orth_eps = 1e-3;
    s_check_against_mean(&o, 3);
    s_psgd_opts(&o);
    o.use_error_feedback = false;
    s_check_against_mean(&o, 3);
}

static void
test_min_compression_rate__matrix_below_it_all_reduced(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o);
    /* 12 x 9 at rank 2: (12 + 9) 2 = 42 floats for 108; a rate of 3
     * (126 >= 108) leaves it to the all-reduce */
    o.min_compression_rate = 3;
    struct cluster c;
    struct rumor_diag diag = {0};
    assert_int_equal(s_cluster_new(&c, "ring:4", &o, &diag), RUMOR_OK);
    float mean[NUMEL];
    s_mean(&c, mean);
    assert_int_equal(rumor_sim_step(c.sim, 1), RUMOR_OK);
    for (size_t i = 0; i < c.n; i++)
        for (size_t e = 0; e < NUMEL; e++)
            assert_float_equal(c.x[i][e], mean[e], 1e-6 * (1 + fabsf(mean[e])));
    s_cluster_free(&c);
    o.min_compression_rate = 2; /* 84 < 108: compressed */
    s_check_against_mean(&o, 2);
}

/* The one-sided variant carries P from step to step: a cluster restored
 * from its states (and models) after step 1 continues as the original. */
static void
test_one_sided__state_restored__continues_identically(void **s)
{
    (void)s;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o);
    o.one_sided = true;
    o.iterations = 3;
    struct cluster a, b;
    struct rumor_diag diag = {0};
    assert_int_equal(s_cluster_new(&a, "ring:4", &o, &diag), RUMOR_OK);
    assert_int_equal(s_cluster_new(&b, "ring:4", &o, &diag), RUMOR_OK);
    assert_int_equal(rumor_sim_step(a.sim, 1), RUMOR_OK);
    for (size_t i = 0; i < a.n; i++) {
        rumor_buf st;
        rumor_buf_init(&st, (size_t)1 << 24);
        assert_int_equal(rumor_gossip_state_save(a.nodes[i], &st), 0);
        if (rumor_gossip_state_load(b.nodes[i], st.data, st.len, &diag) != 0)
            fail_msg("node %zu: %s", i, diag.msg);
        rumor_buf_free(&st);
        memcpy(b.x[i], a.x[i], NUMEL * sizeof(float));
    }
    for (uint64_t step = 2; step <= 3; step++) {
        assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
        assert_int_equal(rumor_sim_step(b.sim, step), RUMOR_OK);
    }
    for (size_t i = 0; i < a.n; i++)
        assert_memory_equal(a.x[i], b.x[i], NUMEL * sizeof(float));
    s_cluster_free(&a);
    s_cluster_free(&b);
}

static void
test_options_that_contradict__refused_with_a_reason(void **s)
{
    (void)s;
    static const struct {
        bool one_sided, ef;
        unsigned iterations;
        const char *adapt, *why;
    } rows[] = {
        {true, false, 1, "", "needs error feedback"},
        {false, true, 2, "", "iterations apply to the one-sided variant"},
        {true, true, 2, "fixed", "adapt measures the hook variant"},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        struct rumor_gossip_opts o;
        s_psgd_opts(&o);
        o.one_sided = rows[k].one_sided;
        o.use_error_feedback = rows[k].ef;
        o.iterations = rows[k].iterations;
        snprintf(o.adapt, sizeof o.adapt, "%s", rows[k].adapt);
        struct cluster c;
        struct rumor_diag diag = {0};
        assert_int_equal(s_cluster_new(&c, "ring:4", &o, &diag), RUMOR_EINVAL);
        if (strstr(diag.msg, rows[k].why) == NULL)
            fail_msg("row %zu: '%s' does not say '%s'",
                     k,
                     diag.msg,
                     rows[k].why);
        s_cluster_free(&c);
    }
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_start_iter__plain_all_reduce_first_then_compressed),
        cmocka_unit_test(
            test_start_iter__plain_steps_are_allreduce_bits_then_compressed),
        cmocka_unit_test(test_default_rank__powersgd_4__as_if_given),
        cmocka_unit_test(
            test_one_sided__iterations_per_step__equal_one_compressor_on_the_mean),
        cmocka_unit_test(
            test_no_error_feedback_no_warm_start_eps__equal_one_compressor),
        cmocka_unit_test(
            test_min_compression_rate__matrix_below_it_all_reduced),
        cmocka_unit_test(test_one_sided__state_restored__continues_identically),
        cmocka_unit_test(test_options_that_contradict__refused_with_a_reason),
    };
    return cmocka_run_group_tests_name("powersgd_opts", tests, NULL, NULL);
}
