/*
 * PowerSGD's adaptive rank (issue #12, docs/adaptive.md): the reported
 * approximation error against the Eckart-Young bound on matrices of known
 * singular values; the rule raising the rank under a tight error budget
 * and lowering it under a loose one, every node choosing the same rank at
 * every step; the fixed controller giving the same bits as a run without
 * adaptation; and a run resumed from saved states continuing bit for bit
 * as the uninterrupted one (rank, error memories, warm start, the error
 * memory of a tensor the rank left uncompressed).
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 64 x 48 matrix (compressed up to rank 13), a vector, and a 48 x 10
 * matrix (compressed up to rank 4, so rank changes move its error memory
 * in and out of the compressor). */
#define S_LAYERS 3
static const size_t s_shape[S_LAYERS][2] = {{64, 48}, {48, 1}, {48, 10}};
#define S_SPECTRUM 16 /* singular directions of the shared gradient */

struct cluster {
    rumor_topology *topo;
    size_t n;
    float **x; /* per node: every layer, flat */
    size_t numel;
    rumor_gossip **g;
    rumor_sim *sim;
};

static size_t
s_numel(void)
{
    size_t n = 0;
    for (size_t t = 0; t < S_LAYERS; t++)
        n += s_shape[t][0] * s_shape[t][1];
    return n;
}

static void
s_make_node(struct cluster *c, size_t i, const struct rumor_gossip_opts *o)
{
    struct rumor_tensor ts[S_LAYERS];
    size_t at = 0;
    for (size_t t = 0; t < S_LAYERS; t++) {
        size_t rows = s_shape[t][0], cols = s_shape[t][1];
        ts[t] = (struct rumor_tensor){c->x[i] + at, cols > 1 ? 2 : 1, {0}};
        ts[t].shape[0] = rows;
        ts[t].shape[1] = cols > 1 ? cols : 0;
        at += rows * cols;
    }
    struct rumor_model m = {ts, S_LAYERS};
    struct rumor_diag diag = {0};
    assert_int_equal(
        rumor_gossip_new(o, c->topo, (uint32_t)i, &m, &c->g[i], &diag),
        RUMOR_OK);
}

static void
s_cluster_new(struct cluster *c,
              const char *topo,
              const struct rumor_gossip_opts *o)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(topo, 1, &c->topo, &diag),
                     RUMOR_OK);
    c->n = rumor_topology_nodes(c->topo);
    c->numel = s_numel();
    c->x = calloc(c->n, sizeof *c->x);
    c->g = calloc(c->n, sizeof *c->g);
    assert_true(c->x && c->g);
    for (size_t i = 0; i < c->n; i++) {
        c->x[i] = calloc(c->numel, sizeof(float));
        assert_non_null(c->x[i]);
        s_make_node(c, i, o);
    }
    assert_int_equal(rumor_sim_new(c->g, c->n, &c->sim), RUMOR_OK);
}

static void
s_cluster_free(struct cluster *c)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++) {
        rumor_gossip_destroy(&c->g[i]);
        free(c->x[i]);
    }
    free(c->x);
    free(c->g);
    rumor_topology_destroy(&c->topo);
}

/* Node i's gradient at step: a shared matrix sum_k u_k v_k^T / (k + 1)
 * per matrix layer, plus node noise of scale 0.01 (a function of node and
 * step only, so a resumed run sees the same values). */
static void
s_gradient(float *x, size_t node, uint64_t step)
{
    size_t at = 0;
    for (size_t t = 0; t < S_LAYERS; t++) {
        size_t rows = s_shape[t][0], cols = s_shape[t][1];
        float u[64], v[48];
        memset(x + at, 0, rows * cols * sizeof(float));
        for (size_t k = 0; k < S_SPECTRUM && cols > 1; k++) {
            rumor_rng_fill_uniform(900 + t, 2 * k, -1, u, rows);
            rumor_rng_fill_uniform(900 + t, 2 * k + 1, -1, v, cols);
            for (size_t r = 0; r < rows; r++)
                for (size_t q = 0; q < cols; q++)
                    x[at + r * cols + q] += u[r] * v[q] / (float)(k + 1);
        }
        float noise[64 * 48];
        rumor_rng_fill_uniform(77 + node,
                               step * S_LAYERS + t,
                               -1,
                               noise,
                               rows * cols);
        for (size_t e = 0; e < rows * cols; e++)
            x[at + e] += 0.01f * noise[e];
        at += rows * cols;
    }
}

static void
s_step(struct cluster *c, uint64_t step)
{
    for (size_t i = 0; i < c->n; i++)
        s_gradient(c->x[i], i, step);
    assert_int_equal(rumor_sim_step(c->sim, step), RUMOR_OK);
}

static void
s_opts(struct rumor_gossip_opts *o, const char *ctl, size_t rank, double err)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "powersgd");
    snprintf(o->adapt, sizeof o->adapt, "%s", ctl);
    o->rank = rank;
    o->adapt_error = err;
    o->adapt_rank_min = 1;
    o->adapt_rank_max = 8;
}

/* Every node reports the same rank; returns it. */
static size_t
s_agreed_rank(const struct cluster *c)
{
    struct rumor_gossip_rank_report r0, ri;
    assert_true(rumor_gossip_adapt_rank(c->g[0], &r0));
    for (size_t i = 1; i < c->n; i++) {
        assert_true(rumor_gossip_adapt_rank(c->g[i], &ri));
        assert_int_equal(ri.rank, r0.rank);
        assert_int_equal(ri.changes, r0.changes);
        assert_true(ri.rel_error == r0.rel_error);
    }
    return r0.rank;
}

/* --- the measured error against an independent bound ---------------------- */

/* Two nodes holding the same diagonal 8 x 6 matrix with singular values
 * sv: after one step at rank 1, the reported error must be at least the
 * Eckart-Young bound sqrt(sum_{k>1} sv_k^2 / sum sv_k^2) and at most 1. */
static double
s_rank1_error(const float *sv, size_t count)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:2", 1, &t, &diag),
                     RUMOR_OK);
    float x[2][48];
    rumor_gossip *g[2] = {NULL, NULL};
    struct rumor_gossip_opts o;
    s_opts(&o, "fixed", 1, 0.25);
    for (size_t i = 0; i < 2; i++) {
        memset(x[i], 0, sizeof x[i]);
        for (size_t k = 0; k < count; k++)
            x[i][k * 6 + k] = sv[k];
        struct rumor_tensor ts = {x[i], 2, {8, 6}};
        struct rumor_model m = {&ts, 1};
        assert_int_equal(rumor_gossip_new(&o, t, (uint32_t)i, &m, &g[i], &diag),
                         RUMOR_OK);
    }
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(g, 2, &sim), RUMOR_OK);
    struct rumor_gossip_rank_report r;
    assert_true(rumor_gossip_adapt_rank(g[0], &r));
    assert_true(r.rel_error < 0); /* nothing measured yet */
    assert_int_equal(rumor_sim_step(sim, 0), RUMOR_OK);
    assert_true(rumor_gossip_adapt_rank(g[0], &r));
    assert_int_equal(r.rank, 1);
    rumor_sim_destroy(&sim);
    rumor_gossip_destroy(&g[0]);
    rumor_gossip_destroy(&g[1]);
    rumor_topology_destroy(&t);
    return r.rel_error;
}

static void
test_error__known_spectra__within_eckart_young_bounds(void **state)
{
    (void)state;
    const float one[1] = {3.0f};
    assert_true(s_rank1_error(one, 1) < 1e-3); /* rank 1 is exact */
    const float two[3] = {2.0f, 1.0f, 0.5f};
    double bound = sqrt((1.0 + 0.25) / (4.0 + 1.0 + 0.25));
    double e = s_rank1_error(two, 3);
    assert_true(e >= bound - 1e-4);
    assert_true(e <= 1.0 + 1e-6);
}

/* --- the rule --------------------------------------------------------------
 */

static void
test_rule__tight_budget__rank_rises_and_nodes_agree(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", 1, 0.05);
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o);
    size_t last = 1, most = 1;
    for (uint64_t step = 0; step < 16; step++) {
        s_step(&c, step);
        size_t r = s_agreed_rank(&c);
        assert_true(r >= last); /* never lowered under a tight budget */
        last = r;
        most = r > most ? r : most;
    }
    assert_int_equal(most, 8); /* rose to the bound: 1, 2, 4, 8 */
    s_cluster_free(&c);
}

static void
test_rule__loose_budget__rank_falls_and_nodes_agree(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", 4, 1.5); /* any error is well below 1.5 */
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o);
    size_t last = 4;
    for (uint64_t step = 0; step < 16; step++) {
        s_step(&c, step);
        size_t r = s_agreed_rank(&c);
        assert_true(r <= last);
        last = r;
    }
    assert_int_equal(last, 1);
    struct rumor_gossip_rank_report r;
    assert_true(rumor_gossip_adapt_rank(c.g[0], &r));
    assert_int_equal(r.changes, 3);
    s_cluster_free(&c);
}

/* --- the fixed controller ------------------------------------------------- */

static void
test_fixed__powersgd__same_bits_as_no_adapt(void **state)
{
    (void)state;
    struct rumor_gossip_opts plain, fixed;
    s_opts(&plain, "", 2, 0.25);
    s_opts(&fixed, "fixed", 2, 0.25);
    struct cluster a, b;
    s_cluster_new(&a, "ring:3", &plain);
    s_cluster_new(&b, "ring:3", &fixed);
    for (uint64_t step = 0; step < 8; step++) {
        s_step(&a, step);
        s_step(&b, step);
        for (size_t i = 0; i < a.n; i++)
            assert_memory_equal(a.x[i], b.x[i], a.numel * sizeof(float));
    }
    for (size_t i = 0; i < a.n; i++)
        assert_int_equal(rumor_sim_bytes_sent(a.sim, i),
                         rumor_sim_bytes_sent(b.sim, i));
    struct rumor_gossip_rank_report r;
    assert_false(rumor_gossip_adapt_rank(a.g[0], &r));
    assert_true(rumor_gossip_adapt_rank(b.g[0], &r));
    assert_int_equal(r.rank, 2);
    assert_int_equal(r.changes, 0);
    assert_true(r.rel_error > 0 && r.rel_error < 1);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

/* --- checkpoints ------------------------------------------------------------
 */

/* Saves every node's state, makes new instances from the options and
 * loads the states into them. */
static void
s_resume(struct cluster *c, const struct rumor_gossip_opts *o)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++) {
        rumor_buf b;
        rumor_buf_init(&b, 1u << 26);
        assert_int_equal(rumor_gossip_state_save(c->g[i], &b), RUMOR_OK);
        rumor_gossip_destroy(&c->g[i]);
        s_make_node(c, i, o);
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_gossip_state_load(c->g[i], b.data, b.len, &diag),
                         RUMOR_OK);
        rumor_buf_free(&b);
    }
    assert_int_equal(rumor_sim_new(c->g, c->n, &c->sim), RUMOR_OK);
}

static void
test_state__rule_resumed__bit_identical_to_uninterrupted(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", 1, 0.05);
    struct cluster a, b;
    s_cluster_new(&a, "ring:3", &o);
    s_cluster_new(&b, "ring:3", &o);
    /* resume at 4 (rank 2 just chosen), 7 (rank 4: the 48 x 10 matrix's
     * memory waits uncompressed) and 11 */
    const uint64_t at[3] = {4, 7, 11};
    size_t next = 0;
    for (uint64_t step = 0; step < 14; step++) {
        if (next < 3 && step == at[next]) {
            s_resume(&b, &o);
            next++;
        }
        s_step(&a, step);
        s_step(&b, step);
        for (size_t i = 0; i < a.n; i++)
            assert_memory_equal(a.x[i], b.x[i], a.numel * sizeof(float));
    }
    struct rumor_gossip_rank_report ra, rb;
    assert_true(rumor_gossip_adapt_rank(a.g[0], &ra));
    assert_true(rumor_gossip_adapt_rank(b.g[0], &rb));
    assert_int_equal(ra.rank, rb.rank);
    assert_int_equal(ra.changes, rb.changes);
    assert_true(ra.changes >= 3);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

/* A state whose rank is outside the instance's bounds, or truncated, is
 * refused and the instance keeps its own. */
static void
test_state__bad_rank_or_truncated__refused(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", 1, 0.05);
    struct cluster c;
    s_cluster_new(&c, "ring:2", &o);
    for (uint64_t step = 0; step < 6; step++)
        s_step(&c, step);
    rumor_buf b, after;
    rumor_buf_init(&b, 1u << 26);
    rumor_buf_init(&after, 1u << 26);
    assert_int_equal(rumor_gossip_state_save(c.g[0], &b), RUMOR_OK);
    struct rumor_diag diag = {0};
    /* the body starts after the 80-byte header (the robust history's
     * steps and EMA before the body length) with the u64 rank */
    const size_t rank_at = 4 + 4 + 32 + 4 + 4 + 8 + 16 + 8;
    uint64_t bad = 9, good = 0;
    memcpy(&good, b.data + rank_at, 8);
    assert_true(good >= 1 && good <= 8);
    memcpy(b.data + rank_at, &bad, 8);
    assert_int_equal(rumor_gossip_state_load(c.g[0], b.data, b.len, &diag),
                     RUMOR_EPROTO);
    memcpy(b.data + rank_at, &good, 8);
    assert_int_not_equal(
        rumor_gossip_state_load(c.g[0], b.data, b.len - 5, &diag),
        RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(c.g[0], &after), RUMOR_OK);
    assert_int_equal(after.len, b.len);
    assert_memory_equal(after.data, b.data, b.len);
    rumor_buf_free(&b);
    rumor_buf_free(&after);
    s_cluster_free(&c);
}

static void
test_options__rank_outside_bounds_or_learned__rejected(void **state)
{
    (void)state;
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:2", 1, &t, &diag),
                     RUMOR_OK);
    float x[48] = {0};
    struct rumor_tensor ts = {x, 2, {8, 6}};
    struct rumor_model m = {&ts, 1};
    struct rumor_gossip_opts o;
    rumor_gossip *g = NULL;
    s_opts(&o, "rule", 9, 0.25); /* above adapt_rank_max 8 */
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_null(g);
    s_opts(&o, "learned", 1, 0.25);
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_null(g);
    rumor_topology_destroy(&t);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error__known_spectra__within_eckart_young_bounds),
        cmocka_unit_test(test_rule__tight_budget__rank_rises_and_nodes_agree),
        cmocka_unit_test(test_rule__loose_budget__rank_falls_and_nodes_agree),
        cmocka_unit_test(test_fixed__powersgd__same_bits_as_no_adapt),
        cmocka_unit_test(
            test_state__rule_resumed__bit_identical_to_uninterrupted),
        cmocka_unit_test(test_state__bad_rank_or_truncated__refused),
        cmocka_unit_test(
            test_options__rank_outside_bounds_or_learned__rejected),
    };
    return cmocka_run_group_tests_name("adapt_rank", tests, NULL, NULL);
}
