/*
 * Adaptive compression (issue #12): per-layer statistics against a plain
 * double reference; the codec settings read back from payload headers
 * (round trip and truncation); the link estimator on a fake feed; the
 * rule and learned controllers meeting their byte budgets within 5 % on
 * a stationary modelled link and following a 10x rate drop within a few
 * steps; per-link codecs keeping the network average; and the fixed
 * controller giving the same bits as a run without adaptation.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- statistics ---------------------------------------------------------- */

static void
s_fill_random(float *x, size_t n, uint64_t seed)
{
    rumor_rng_fill_uniform(seed, 0, 0, x, n);
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] * 2.0f - 0.7f;
}

static void
test_stats__random_vector__match_double_reference(void **state)
{
    (void)state;
    size_t n = 1037; /* not a multiple of the 8 lanes */
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    s_fill_random(x, n, 5);
    double sum = 0, sq = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        mx = fabs(x[i]) > mx ? fabs(x[i]) : mx;
    }
    double mean = sum / (double)n, var = 0;
    for (size_t i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean) / (double)n;
    struct rumor_layer_stats st;
    rumor_layer_stats_compute(x, n, &st);
    /* float sums within blocks of 1024 (compress/stats.c): float
     * rounding of 64 terms per lane, far below what a controller needs */
    assert_true(fabs(st.norm - sqrt(sq)) < 1e-6 * sqrt(sq));
    assert_true(st.max_abs == mx);
    assert_true(fabs(st.mean - mean) < 1e-6);
    assert_true(fabs(st.var - var) < 1e-6 * var);
    rumor_layer_stats_compute(x, 0, &st);
    assert_true(st.norm == 0 && st.var == 0 && st.mean == 0);
    free(x);
}

static void
test_rel_error__known_vectors__total_and_support(void **state)
{
    (void)state;
    const float x[4] = {3, 4, 0, 1};
    const float a[4] = {3, 3, 0, 0};
    double support = -1;
    /* ||x - a|| = sqrt(1 + 1) over ||x|| = sqrt(26); support: elements
     * 0 and 1, error 1 over sqrt(25). */
    double e = rumor_layer_rel_error(x, a, 4, &support);
    assert_true(fabs(e - sqrt(2.0 / 26.0)) < 1e-12);
    assert_true(fabs(support - 0.2) < 1e-12);
    const float z[2] = {0, 0};
    assert_true(rumor_layer_rel_error(z, z, 2, NULL) == 0);
    assert_true(rumor_layer_rel_error(z, x, 2, NULL) == 1);
}

/* --- settings in the header ----------------------------------------------- */

static const char *const s_specs[] = {
    "qsgd:bits=3,bucket=128",
    "qsgd:bits=8,bucket=7,elias=1",
    "topk:k=7|qsgd:bits=5,bucket=128",
    "topk:k=3|fp32",
    "topk:ratio=0.2|fp16",
    "fp32",
    "fp16",
    "bf16",
    "sign:bucket=64",
    "terngrad:bucket=32",
    "natural",
    "fp8",
    "dgc:ratio=0.1",
    "threshold:t=0.5|bf16",
};

static void
test_spec_of_payload__every_codec__decodes_same_values(void **state)
{
    (void)state;
    size_t n = 300;
    float x[300], want[300], got[300];
    uint8_t buf[4096];
    s_fill_random(x, n, 9);
    for (size_t s = 0; s < sizeof s_specs / sizeof s_specs[0]; s++) {
        rumor_codec *c = NULL, *d = NULL;
        char spec[RUMOR_COMPRESS_SPEC_MAX];
        size_t len = 0;
        assert_int_equal(rumor_codec_new(s_specs[s], &c, NULL), RUMOR_OK);
        assert_int_equal(
            rumor_codec_encode(c, x, n, 3, 4, buf, sizeof buf, &len, want),
            RUMOR_OK);
        assert_int_equal(rumor_codec_spec_of_payload(buf, len, spec, 256),
                         RUMOR_OK);
        assert_int_equal(rumor_codec_new(spec, &d, NULL), RUMOR_OK);
        assert_int_equal(rumor_codec_decode(d, buf, len, got, n), RUMOR_OK);
        assert_memory_equal(want, got, n * sizeof(float));
        /* every truncation of a sparse payload's headers is refused or
         * names a codec that then rejects the bytes: never a crash */
        for (size_t cut = 0; cut < len && cut < 64; cut++) {
            rumor_err rc = rumor_codec_spec_of_payload(buf, cut, spec, 256);
            assert_true(rc == RUMOR_OK || rc == RUMOR_EPROTO);
        }
        assert_int_equal(rumor_codec_spec_of_payload(buf, len, spec, 3),
                         RUMOR_ETOOBIG);
        rumor_codec_destroy(&c);
        rumor_codec_destroy(&d);
    }
}

static void
test_spec_of_payload__bad_headers__rejected(void **state)
{
    (void)state;
    char spec[RUMOR_COMPRESS_SPEC_MAX];
    uint8_t h[32] = {RUMOR_CODEC_QSGD, 1, 9, 0, 10, 0, 0, 0, 128, 0, 0, 0};
    /* bits 9 */
    assert_int_equal(rumor_codec_spec_of_payload(h, 32, spec, 256),
                     RUMOR_EPROTO);
    h[2] = 4;
    h[8] = 0; /* bucket 0 */
    assert_int_equal(rumor_codec_spec_of_payload(h, 32, spec, 256),
                     RUMOR_EPROTO);
    h[0] = RUMOR_CODEC_RANDK; /* no spec can describe its seed */
    assert_int_equal(rumor_codec_spec_of_payload(h, 32, spec, 256),
                     RUMOR_EPROTO);
    h[0] = RUMOR_CODEC_TOPK; /* k 0 of 10, index length past the end */
    h[12] = 200;
    assert_int_equal(rumor_codec_spec_of_payload(h, 32, spec, 256),
                     RUMOR_EPROTO);
}

/* --- a cluster of gossip instances ---------------------------------------- */

#define S_LAYERS 4

static const size_t s_shape[S_LAYERS][2] = {{64, 48},
                                            {48, 1},
                                            {48, 10},
                                            {10, 1}};

struct cluster {
    rumor_topology *topo;
    size_t n;
    float **x; /* per node: every layer, flat */
    size_t numel;
    rumor_gossip **g;
    rumor_sim *sim;
    rumor_simlink *links;
};

/* Makes node i's instance on its model c->x[i]. */
static void
s_node_new(struct cluster *c, size_t i, const struct rumor_gossip_opts *o)
{
    struct rumor_tensor ts[S_LAYERS];
    size_t at = 0;
    for (size_t t = 0; t < S_LAYERS; t++) {
        ts[t] = (struct rumor_tensor){c->x[i] + at, 2, {0}};
        ts[t].shape[0] = s_shape[t][0];
        ts[t].shape[1] = s_shape[t][1];
        at += s_shape[t][0] * s_shape[t][1];
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
              const struct rumor_gossip_opts *o,
              const struct rumor_simlink_opts *lo)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(topo, 1, &c->topo, &diag),
                     RUMOR_OK);
    c->n = rumor_topology_nodes(c->topo);
    for (size_t t = 0; t < S_LAYERS; t++)
        c->numel += s_shape[t][0] * s_shape[t][1];
    c->x = calloc(c->n, sizeof *c->x);
    c->g = calloc(c->n, sizeof *c->g);
    assert_true(c->x && c->g);
    for (size_t i = 0; i < c->n; i++) {
        c->x[i] = malloc(c->numel * sizeof(float));
        assert_non_null(c->x[i]);
        s_fill_random(c->x[i], c->numel, 100 + i);
        s_node_new(c, i, o);
    }
    assert_int_equal(rumor_sim_new(c->g, c->n, &c->sim), RUMOR_OK);
    if (lo != NULL)
        assert_int_equal(rumor_simlink_new(c->sim, c->g, c->n, lo, &c->links),
                         RUMOR_OK);
}

static void
s_cluster_free(struct cluster *c)
{
    rumor_simlink_destroy(&c->links);
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++) {
        rumor_gossip_destroy(&c->g[i]);
        free(c->x[i]);
    }
    free(c->x);
    free(c->g);
    rumor_topology_destroy(&c->topo);
}

/* A training-like step: every node's model moves by its own noise (as a
 * gradient step would), then one gossip step. */
static void
s_cluster_step(struct cluster *c, uint64_t step)
{
    float *noise = malloc(c->numel * sizeof *noise);
    assert_non_null(noise);
    for (size_t i = 0; i < c->n; i++) {
        rumor_rng_fill_uniform(7 + i, step, 0, noise, c->numel);
        for (size_t e = 0; e < c->numel; e++)
            c->x[i][e] += 0.01f * (noise[e] - 0.5f);
    }
    free(noise);
    assert_int_equal(rumor_sim_step(c->sim, step), RUMOR_OK);
    if (c->links != NULL)
        (void)rumor_simlink_step(c->links, step);
}

static void
s_opts(struct rumor_gossip_opts *o, const char *ctl, const char *codec)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "choco");
    snprintf(o->codec, sizeof o->codec, "%s", codec);
    snprintf(o->adapt, sizeof o->adapt, "%s", ctl);
    o->gamma = 0.5;
}

/* --- link estimator on a fake feed -----------------------------------------
 */

static void
test_link__fake_feed__rate_is_ratio_of_sums(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", "qsgd:bits=4");
    o.comm_share = 0.5;
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, NULL);
    rumor_gossip *g = c.g[0];
    struct rumor_gossip_link_report lr[4];
    assert_int_equal(rumor_gossip_adapt_links(g, lr, 4), 2);
    assert_true(lr[0].rate_bytes_s == 0); /* nothing measured yet */
    /* 1000 B in 1 ms and 3000 B in 2 ms: 4000 B / 3 ms */
    rumor_gossip_link_observe(g, lr[0].peer, 1000, 1000000);
    rumor_gossip_link_observe(g, lr[0].peer, 3000, 2000000);
    rumor_gossip_link_observe(g, 2, 5, 1); /* not a neighbour: ignored */
    rumor_gossip_adapt_links(g, lr, 4);
    assert_true(fabs(lr[0].rate_bytes_s - 4000 / 3e-3) < 1e-6);
    assert_true(fabs(lr[0].rtt_s - 1e-3) < 1e-12);
    assert_true(lr[1].rate_bytes_s == 0);
    s_cluster_free(&c);
}

/* --- budgets ----------------------------------------------------------------
 */

/* Expected budget of a link of `bps` bit/s: rate * share / (1 - share) *
 * compute, with no latency. */
static double
s_expected(double bps, double share, double compute)
{
    return bps / 8 * share / (1 - share) * compute;
}

static void
s_check_budget(const char *ctl, const char *topo)
{
    struct rumor_gossip_opts o;
    s_opts(&o, ctl, "qsgd:bits=4");
    o.comm_share = 0.2;
    struct rumor_simlink_opts lo = {.compute_s = 0.02,
                                    .rates = {2e6},
                                    .rate_count = 1};
    struct cluster c;
    s_cluster_new(&c, topo, &o, &lo);
    double want = s_expected(2e6, 0.2, 0.02); /* 1250 bytes */
    double worst = 0;
    for (uint64_t step = 0; step < 40; step++) {
        s_cluster_step(&c, step);
        if (step < 10) /* the estimator and the bytes model settle */
            continue;
        for (size_t i = 0; i < c.n; i++) {
            struct rumor_gossip_link_report lr[8];
            size_t links = rumor_gossip_adapt_links(c.g[i], lr, 8);
            for (size_t l = 0; l < links; l++) {
                assert_true(fabs((double)lr[l].budget - want) <= 1.0);
                double off = fabs((double)lr[l].bytes - want) / want;
                worst = off > worst ? off : worst;
            }
        }
    }
    printf("    %s on %s: worst |bytes - budget| / budget = %.3f\n",
           ctl,
           topo,
           worst);
    assert_true(worst <= 0.05);
    s_cluster_free(&c);
}

static void
test_budget__rule_stationary_link__met_within_5_percent(void **state)
{
    (void)state;
    s_check_budget("rule", "ring:6");
}

static void
test_budget__learned_stationary_link__met_within_5_percent(void **state)
{
    (void)state;
    s_check_budget("learned", "torus:3x3");
}

static void
test_budget__rate_drops_10x__budget_follows_within_5_steps(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", "qsgd:bits=4");
    o.comm_share = 0.25;
    struct rumor_simlink_opts lo = {.compute_s = 0.02,
                                    .rates = {8e6},
                                    .rate_count = 1,
                                    .drop_step = 20,
                                    .drop_factor = 10};
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, &lo);
    double before = s_expected(8e6, 0.25, 0.02);
    double after = before / 10;
    for (uint64_t step = 0; step < 40; step++) {
        s_cluster_step(&c, step);
        struct rumor_gossip_link_report lr[2];
        rumor_gossip_adapt_links(c.g[0], lr, 2);
        /* the budget of the message of step + 1 */
        double b = (double)lr[0].budget;
        if (step >= 10 && step < 20)
            assert_true(fabs(b - before) / before < 0.01);
        if (step >= 20 + 5) /* 4 samples in the window, one step late */
            assert_true(fabs(b - after) / after < 0.05);
        if (step >= 20 + 5)
            assert_true(fabs((double)lr[0].bytes - after) / after <= 0.05 ||
                        step < 30);
    }
    s_cluster_free(&c);
}

/* --- per-link codecs -------------------------------------------------------
 */

static double
s_mean(const struct cluster *c)
{
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        for (size_t e = 0; e < c->numel; e++)
            s += c->x[i][e];
    return s / (double)(c->n * c->numel);
}

static void
test_per_link__mixed_rates__messages_differ_and_average_kept(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", "qsgd:bits=4");
    o.comm_share = 0.3;
    struct rumor_simlink_opts lo = {.compute_s = 0.01,
                                    .rates = {1e6, 2e7, 4e6},
                                    .rate_count = 3};
    struct cluster c;
    s_cluster_new(&c, "ring:6", &o, &lo);
    double m0 = s_mean(&c);
    for (uint64_t step = 0; step < 30; step++) {
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        (void)rumor_simlink_step(c.links, step);
    }
    /* without noise the average is what gossip keeps */
    assert_true(fabs(s_mean(&c) - m0) < 1e-5);
    struct rumor_gossip_link_report lr[2];
    rumor_gossip_adapt_links(c.g[0], lr, 2);
    /* node 0's links 0-1 (rate 2e7) and 0-5 (rate 4e6) */
    assert_int_equal(lr[0].peer, 1);
    printf("    node 0: %llu bytes to node 1, %llu to node 5\n",
           (unsigned long long)lr[0].bytes,
           (unsigned long long)lr[1].bytes);
    assert_true(lr[0].bytes > 2 * lr[1].bytes);
    struct rumor_gossip_layer_report y[S_LAYERS];
    assert_int_equal(rumor_gossip_adapt_layers(c.g[0], 0, y, S_LAYERS),
                     S_LAYERS);
    assert_true(y[0].n == 64 * 48 && y[0].k >= 1 && y[0].k <= y[0].n);
    s_cluster_free(&c);
}

/* --- fixed controller
 * --------------------------------------------------------- */

static void
s_check_fixed(const char *codec)
{
    struct rumor_gossip_opts plain, fixed;
    s_opts(&plain, "", codec);
    s_opts(&fixed, "fixed", codec);
    fixed.comm_share = 0.5;
    struct rumor_simlink_opts lo = {.compute_s = 0.01,
                                    .rates = {1e7},
                                    .rate_count = 1};
    struct cluster a, b;
    s_cluster_new(&a, "ring:5", &plain, NULL);
    s_cluster_new(&b, "ring:5", &fixed, &lo);
    for (uint64_t step = 0; step < 25; step++) {
        s_cluster_step(&a, step);
        s_cluster_step(&b, step);
    }
    for (size_t i = 0; i < a.n; i++)
        assert_memory_equal(a.x[i], b.x[i], a.numel * sizeof(float));
    for (size_t i = 0; i < a.n; i++)
        assert_int_equal(rumor_sim_bytes_sent(a.sim, i),
                         rumor_sim_bytes_sent(b.sim, i));
    /* the machinery ran: links measured, layers reported */
    struct rumor_gossip_link_report lr[2];
    assert_int_equal(rumor_gossip_adapt_links(b.g[0], lr, 2), 2);
    assert_true(lr[0].rate_bytes_s > 0 && lr[0].budget > 0);
    struct rumor_gossip_layer_report y[S_LAYERS];
    assert_int_equal(rumor_gossip_adapt_layers(b.g[0], 1, y, S_LAYERS),
                     S_LAYERS);
    assert_true(y[2].bits == 0 && y[2].rel_error > 0);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

static void
test_fixed__stochastic_and_sparse_codecs__same_bits_as_no_adapt(void **state)
{
    (void)state;
    s_check_fixed("qsgd:bits=4");
    s_check_fixed("topk:ratio=0.1|qsgd:bits=3");
    s_check_fixed("dgc:ratio=0.05");
}

/* --- checkpoints -------------------------------------------------------- */

/* Saves every node's state, makes new instances (with a new sim and new
 * modelled links) and loads the states into them. */
static void
s_cluster_resume(struct cluster *c,
                 const struct rumor_gossip_opts *o,
                 const struct rumor_simlink_opts *lo)
{
    rumor_simlink_destroy(&c->links);
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < c->n; i++) {
        rumor_buf b;
        rumor_buf_init(&b, 1u << 26);
        assert_int_equal(rumor_gossip_state_save(c->g[i], &b), RUMOR_OK);
        rumor_gossip_destroy(&c->g[i]);
        s_node_new(c, i, o);
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_gossip_state_load(c->g[i], b.data, b.len, &diag),
                         RUMOR_OK);
        rumor_buf_free(&b);
    }
    assert_int_equal(rumor_sim_new(c->g, c->n, &c->sim), RUMOR_OK);
    assert_int_equal(rumor_simlink_new(c->sim, c->g, c->n, lo, &c->links),
                     RUMOR_OK);
}

/* A run resumed from saved states (twice) against the uninterrupted one:
 * the same models, bytes per step and settings at every step. Without
 * the controller's state in the checkpoint the budgets restart from
 * adapt-density and the bytes differ. */
static void
s_check_resume(const char *ctl)
{
    struct rumor_gossip_opts o;
    s_opts(&o, ctl, "qsgd:bits=4");
    o.comm_share = 0.2;
    struct rumor_simlink_opts lo = {.compute_s = 0.005,
                                    .latency_s = 0.001,
                                    .rates = {1e7, 1e8},
                                    .rate_count = 2};
    struct cluster a, b;
    s_cluster_new(&a, "ring:4", &o, &lo);
    s_cluster_new(&b, "ring:4", &o, &lo);
    uint64_t sent_a = 0, sent_b = 0;
    for (uint64_t step = 0; step < 16; step++) {
        if (step == 6 || step == 11) {
            sent_b += rumor_sim_bytes_sent(b.sim, 0);
            s_cluster_resume(&b, &o, &lo);
        }
        s_cluster_step(&a, step);
        s_cluster_step(&b, step);
        for (size_t i = 0; i < a.n; i++)
            assert_memory_equal(a.x[i], b.x[i], a.numel * sizeof(float));
        struct rumor_gossip_link_report la[2], lb[2];
        assert_int_equal(rumor_gossip_adapt_links(a.g[0], la, 2), 2);
        assert_int_equal(rumor_gossip_adapt_links(b.g[0], lb, 2), 2);
        for (size_t l = 0; l < 2; l++) {
            assert_int_equal(la[l].budget, lb[l].budget);
            assert_int_equal(la[l].bytes, lb[l].bytes);
            assert_true(la[l].rate_bytes_s == lb[l].rate_bytes_s);
        }
    }
    sent_a = rumor_sim_bytes_sent(a.sim, 0);
    sent_b += rumor_sim_bytes_sent(b.sim, 0);
    assert_int_equal(sent_a, sent_b);
    s_cluster_free(&a);
    s_cluster_free(&b);
}

static void
test_state__rule_and_learned_resumed__bit_identical(void **state)
{
    (void)state;
    s_check_resume("rule");
    s_check_resume("learned");
}

/* A controller state that does not fit the instance is refused whole. */
static void
test_state__bad_controller_part__refused_and_unchanged(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", "qsgd:bits=4");
    o.comm_share = 0.2;
    struct rumor_simlink_opts lo = {.compute_s = 0.005,
                                    .rates = {1e7},
                                    .rate_count = 1};
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, &lo);
    for (uint64_t step = 0; step < 4; step++)
        s_cluster_step(&c, step);
    rumor_buf b, after;
    rumor_buf_init(&b, 1u << 26);
    rumor_buf_init(&after, 1u << 26);
    assert_int_equal(rumor_gossip_state_save(c.g[0], &b), RUMOR_OK);
    /* the controller's part starts after the header (80 bytes: 64 and the
     * robust history's 16) and the per-link copies and sums (4 x numel
     * doubles): compute_s, theta, the link count, the layer count, then
     * link 0's peer id */
    size_t at = 80 + 4 * c.numel * 8 + 8 + 8 * 5;
    uint64_t links = 0;
    memcpy(&links, b.data + at, 8);
    assert_int_equal(links, 2);
    uint32_t peer = 0, other = 3;
    memcpy(&peer, b.data + at + 16, 4);
    assert_int_equal(peer, 1);
    memcpy(b.data + at + 16, &other, 4); /* link 0 names node 3 */
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_state_load(c.g[0], b.data, b.len, &diag),
                     RUMOR_EPROTO);
    memcpy(b.data + at + 16, &peer, 4);
    assert_int_not_equal(
        rumor_gossip_state_load(c.g[0], b.data, b.len - 3, &diag),
        RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(c.g[0], &after), RUMOR_OK);
    assert_int_equal(after.len, b.len);
    assert_memory_equal(after.data, b.data, b.len);
    rumor_buf_free(&b);
    rumor_buf_free(&after);
    s_cluster_free(&c);
}

/* --- options
 * ------------------------------------------------------------------ */

static void
test_options__adapt_outside_choco_or_unknown__rejected(void **state)
{
    (void)state;
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, &diag),
                     RUMOR_OK);
    float x[8] = {0};
    struct rumor_tensor ts = {x, 1, {8}};
    struct rumor_model m = {&ts, 1};
    struct rumor_gossip_opts o;
    s_opts(&o, "rule", "qsgd:bits=4");
    snprintf(o.algo, sizeof o.algo, "dpsgd");
    rumor_gossip *g = NULL;
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    assert_null(g);
    s_opts(&o, "oracle", "qsgd:bits=4");
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    s_opts(&o, "rule", "qsgd:bits=4");
    o.comm_share = 1.0;
    assert_int_equal(rumor_gossip_new(&o, t, 0, &m, &g, &diag), RUMOR_EINVAL);
    rumor_topology_destroy(&t);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats__random_vector__match_double_reference),
        cmocka_unit_test(test_rel_error__known_vectors__total_and_support),
        cmocka_unit_test(
            test_spec_of_payload__every_codec__decodes_same_values),
        cmocka_unit_test(test_spec_of_payload__bad_headers__rejected),
        cmocka_unit_test(test_link__fake_feed__rate_is_ratio_of_sums),
        cmocka_unit_test(
            test_budget__rule_stationary_link__met_within_5_percent),
        cmocka_unit_test(
            test_budget__learned_stationary_link__met_within_5_percent),
        cmocka_unit_test(
            test_budget__rate_drops_10x__budget_follows_within_5_steps),
        cmocka_unit_test(
            test_per_link__mixed_rates__messages_differ_and_average_kept),
        cmocka_unit_test(
            test_fixed__stochastic_and_sparse_codecs__same_bits_as_no_adapt),
        cmocka_unit_test(test_state__rule_and_learned_resumed__bit_identical),
        cmocka_unit_test(
            test_state__bad_controller_part__refused_and_unchanged),
        cmocka_unit_test(
            test_options__adapt_outside_choco_or_unknown__rejected),
    };
    return cmocka_run_group_tests_name("adapt", tests, NULL, NULL);
}
