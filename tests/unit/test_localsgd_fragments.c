/*
 * localsgd's streaming fragments (opts.fragments F, docs/gossip.md): the
 * exact path against a reference written out here (per fragment: its
 * anchor, the mean of the models over the nodes, DiLoCo's outer Nesterov
 * step), on a model of three tensors that the fragments cut across; only
 * the syncing fragment's elements change at its step; the compressed
 * path's bytes per sync are about 1/F of a whole-model sync's; k rounds
 * of gossip mix a fragment as plain D-PSGD mixes those elements; a state
 * saved mid-run resumes bit for bit; a state of another fragment count
 * (the layout before fragments included) and bad options are refused.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES 4

/* NODES nodes on ring:NODES, each with a model of three tensors: a
 * rows x cols matrix and two vectors of b1 and b2 elements. */
struct cluster {
    rumor_topology *topo;
    size_t numel;
    float *x[NODES];
    rumor_gossip *g[NODES];
    rumor_sim *sim;
};

/* With same, every node starts from node 0's model (a delta codec's
 * first sync is then the compressed one, from that model as the anchor);
 * else each from its own. */
static void
s_new(struct cluster *c,
      const struct rumor_gossip_opts *o,
      bool same,
      size_t rows,
      size_t cols,
      size_t b1,
      size_t b2)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &c->topo, &diag),
                     RUMOR_OK);
    c->numel = rows * cols + b1 + b2;
    for (size_t i = 0; i < NODES; i++) {
        c->x[i] = malloc(c->numel * sizeof(float));
        for (size_t e = 0; e < c->numel; e++)
            c->x[i][e] = (float)((e * 7 + (same ? 0 : i) * 13) % 11) / 3.0f;
        struct rumor_tensor t[3] = {
            {c->x[i], 2, {rows, cols}},
            {c->x[i] + rows * cols, 1, {b1}},
            {c->x[i] + rows * cols + b1, 1, {b2}},
        };
        struct rumor_model m = {t, 3};
        if (rumor_gossip_new(o, c->topo, (uint32_t)i, &m, &c->g[i], &diag) !=
            RUMOR_OK)
            fail_msg("gossip_new: %s", diag.msg);
    }
    assert_int_equal(rumor_sim_new(c->g, NODES, &c->sim), RUMOR_OK);
}

static void
s_free(struct cluster *c)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < NODES; i++) {
        rumor_gossip_destroy(&c->g[i]);
        free(c->x[i]);
    }
    rumor_topology_destroy(&c->topo);
}

/* The inner steps of node i: a pull towards its own target, in float. */
static void
s_local(float *x, size_t numel, size_t i, uint64_t step)
{
    for (size_t e = 0; e < numel; e++) {
        float target = (float)((e * 5 + i * 3 + step) % 9) - 4.0f;
        x[e] -= 0.1f * (x[e] - target);
    }
}

/* One step of every node: look-ahead, inner step. */
static void
s_train(struct cluster *c, uint64_t step)
{
    for (size_t i = 0; i < NODES; i++) {
        assert_int_equal(rumor_gossip_step_ahead(c->g[i]), RUMOR_OK);
        s_local(c->x[i], c->numel, i, step);
    }
}

static void
s_opts(struct rumor_gossip_opts *o, unsigned period, unsigned fragments)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "localsgd");
    o->period = period;
    o->fragments = fragments;
}

/* SPEC: fragment f = [f numel / F, (f + 1) numel / F), syncing at the steps
 * with step % period == f period / F; -1 when none syncs. */
static int
s_frag_of_step(uint64_t step, size_t period, size_t frags)
{
    for (size_t f = 0; f < frags; f++)
        if (step % period == f * period / frags)
            return (int)f;
    return -1;
}

static void
s_range(size_t f, size_t numel, size_t frags, size_t *lo, size_t *hi)
{
    *lo = f * numel / frags;
    *hi = (f + 1) * numel / frags;
}

/* Every node's elements outside [lo, hi) are the bits of before[]. */
static void
s_outside_same(const struct cluster *c,
               float *const *before,
               size_t lo,
               size_t hi)
{
    for (size_t i = 0; i < NODES; i++) {
        assert_memory_equal(c->x[i], before[i], lo * sizeof(float));
        assert_memory_equal(c->x[i] + hi,
                            before[i] + hi,
                            (c->numel - hi) * sizeof(float));
    }
}

/* The reference: each node's model, and per element the anchor and the
 * outer velocity, per fragment whether it has its anchor. */
struct ref {
    float x[NODES][64];
    double anchor[64], v[64];
    bool have[8];
};

/* Fragment [lo, hi) syncs on the reference: the first sync averages the
 * models, later ones take d = anchor - mean, v = mu v + d, x = anchor -
 * lr (d + mu v), and the anchor moves to x. */
static void
s_ref_sync(struct ref *r, size_t f, size_t lo, size_t hi, double lr, double mu)
{
    for (size_t e = lo; e < hi; e++) {
        double mean = 0;
        for (size_t i = 0; i < NODES; i++)
            mean += r->x[i][e];
        mean /= NODES;
        double x = mean;
        if (r->have[f]) {
            double d = r->anchor[e] - mean;
            r->v[e] = mu * r->v[e] + d;
            x = r->anchor[e] - lr * (d + mu * r->v[e]);
        }
        r->anchor[e] = x;
        for (size_t i = 0; i < NODES; i++)
            r->x[i][e] = (float)x;
    }
    r->have[f] = true;
}

/* The exact path of (period, F), or with a lossless delta codec the
 * compressed one, against the reference for 30 steps: the same bits
 * outside the syncing fragment, and within 1e-5 relative inside (the ring
 * sums in float, in another order). With the codec every node starts from
 * the same model, every fragment's anchor from the first sync on. */
static void
s_exact_vs_ref(unsigned period,
               unsigned frags,
               double lr,
               double mu,
               const char *codec)
{
    struct rumor_gossip_opts o;
    s_opts(&o, period, frags);
    o.outer_lr = lr;
    o.outer_momentum = mu;
    snprintf(o.delta_codec, sizeof o.delta_codec, "%s", codec);
    bool same = codec[0] != '\0';
    struct cluster c;
    s_new(&c, &o, same, 3, 4, 5, 6); /* 23 elements: tensors end at 12, 17 */
    static struct ref r;
    memset(&r, 0, sizeof r);
    for (size_t i = 0; i < NODES; i++)
        memcpy(r.x[i], c.x[i], c.numel * sizeof(float));
    for (size_t e = 0; e < c.numel && same; e++)
        r.anchor[e] = c.x[0][e];
    for (size_t f = 0; f < frags && same; f++)
        r.have[f] = true;
    float *before[NODES];
    for (size_t i = 0; i < NODES; i++)
        before[i] = malloc(c.numel * sizeof(float));
    for (uint64_t step = 1; step <= 30; step++) {
        s_train(&c, step);
        for (size_t i = 0; i < NODES; i++) {
            s_local(r.x[i], c.numel, i, step);
            memcpy(before[i], c.x[i], c.numel * sizeof(float));
        }
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        int f = s_frag_of_step(step, period, frags);
        size_t lo = 0, hi = 0;
        if (f >= 0) {
            s_range((size_t)f, c.numel, frags, &lo, &hi);
            s_ref_sync(&r, (size_t)f, lo, hi, lr, mu);
        }
        s_outside_same(&c, before, lo, hi);
        for (size_t i = 0; i < NODES; i++)
            for (size_t e = 0; e < c.numel; e++)
                if (fabsf(c.x[i][e] - r.x[i][e]) >
                    1e-5f * (1 + fabsf(r.x[i][e])))
                    fail_msg("period %u F %u step %llu node %zu element %zu: "
                             "%.9g, reference %.9g",
                             period,
                             frags,
                             (unsigned long long)step,
                             i,
                             e,
                             c.x[i][e],
                             r.x[i][e]);
    }
    for (size_t i = 0; i < NODES; i++)
        free(before[i]);
    s_free(&c);
}

static void
test_fragments__exact_outer_nesterov__matches_reference(void **state)
{
    (void)state;
    /* F = 1 (today's schedule), fragments that divide the period or not,
     * one fragment per step */
    static const unsigned cases[][2] = {{6, 1}, {6, 2}, {6, 3}, {5, 3}, {4, 4}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        s_exact_vs_ref(cases[k][0], cases[k][1], 0.7, 0.9, "");
        s_exact_vs_ref(cases[k][0], cases[k][1], 1.0, 0.0, ""); /* averaging */
    }
}

/* A lossless delta codec (fp32) takes the compressed path (all-gather of
 * each fragment's delta) to the reference's numbers: from the same start,
 * the first sync of each fragment is already the outer step from the
 * initial model. */
static void
test_fragments__lossless_codec__matches_reference(void **state)
{
    (void)state;
    static const unsigned cases[][2] = {{6, 1}, {6, 3}, {5, 3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        s_exact_vs_ref(cases[k][0], cases[k][1], 0.8, 0.5, "fp32");
        s_exact_vs_ref(cases[k][0], cases[k][1], 1.0, 0.0, "fp32");
    }
}

/* Payload bytes node 0 sent at step (wire bytes less one header per
 * message), given the counters before it. */
static uint64_t
s_payload(const struct cluster *c, uint64_t *bytes, uint64_t *msgs)
{
    uint64_t b = rumor_sim_bytes_sent(c->sim, 0), m = 0;
    for (size_t j = 0; j < NODES; j++)
        m += rumor_sim_messages_edge(c->sim, 0, j);
    uint64_t payload = (b - *bytes) - (m - *msgs) * RUMOR_FRAME_HEADER_BYTES;
    *bytes = b;
    *msgs = m;
    return payload;
}

/* The compressed path with codec on a model of 9999 elements, F = 1 and
 * F = 4 (period 4): a sync step (the error round included) changes only
 * its fragment's elements, and the payload bytes of each compressed
 * fragment sync are within 5% of 1/4 of the whole model's (the 4
 * together within 5% of it). */
static void
s_compressed_bytes(const char *codec, double alpha, const char *scope)
{
    uint64_t whole = 0, parts[4] = {0};
    for (unsigned frags = 1; frags <= 4; frags += 3) {
        struct rumor_gossip_opts o;
        s_opts(&o, 4, frags);
        snprintf(o.delta_codec, sizeof o.delta_codec, "%s", codec);
        snprintf(o.saef_scope, sizeof o.saef_scope, "%s", scope);
        o.ef_alpha = alpha;
        struct cluster c;
        s_new(&c, &o, true, 100, 90, 500, 499);
        float *before[NODES];
        for (size_t i = 0; i < NODES; i++)
            before[i] = malloc(c.numel * sizeof(float));
        uint64_t bytes = 0, msgs = 0;
        /* steps 0..3 are each fragment's first sync (compressed too: the
         * nodes start from the same model) */
        for (uint64_t step = 0; step < 8; step++) {
            s_train(&c, step);
            for (size_t i = 0; i < NODES; i++)
                memcpy(before[i], c.x[i], c.numel * sizeof(float));
            assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
            uint64_t payload = s_payload(&c, &bytes, &msgs);
            int f = s_frag_of_step(step, 4, frags);
            size_t lo = 0, hi = 0;
            if (f >= 0)
                s_range((size_t)f, c.numel, frags, &lo, &hi);
            s_outside_same(&c, before, lo, hi);
            assert_true(f < 0 || memcmp(c.x[0] + lo,
                                        before[0] + lo,
                                        (hi - lo) * sizeof(float)) != 0);
            if (step >= 4 && f >= 0 && frags == 1)
                whole = payload;
            else if (step >= 4 && f >= 0)
                parts[f] = payload;
        }
        for (size_t i = 0; i < NODES; i++)
            free(before[i]);
        s_free(&c);
    }
    uint64_t sum = 0;
    for (size_t f = 0; f < 4; f++) {
        double ratio = (double)parts[f] * 4 / (double)whole;
        if (!(ratio > 0.95 && ratio < 1.05))
            fail_msg("%s: fragment %zu sends %llu payload bytes, the whole "
                     "model %llu",
                     codec,
                     f,
                     (unsigned long long)parts[f],
                     (unsigned long long)whole);
        sum += parts[f];
    }
    assert_true(sum > 0.95 * (double)whole && sum < 1.05 * (double)whole);
}

static void
test_fragments__compressed__own_elements_only_quarter_bytes(void **state)
{
    (void)state;
    s_compressed_bytes("qsgd:bits=4", 0, "self");
    /* SAEF's look-ahead, by the own error and by the neighbourhood's (its
     * error round's C(e) to the neighbours is the fragment's too) */
    s_compressed_bytes("topk:ratio=0.05", 0.5, "self");
    s_compressed_bytes("topk:ratio=0.05", 0.5, "neighbourhood");
}

/* With gossip_rounds 1, a fragment's sync is one D-PSGD round on its
 * elements: the bits a plain dpsgd instance gives those elements of the
 * same models at the same step (robust mixing off: its radius is a norm
 * over what is mixed). */
static void
test_fragments__gossip_rounds__fragment_mixes_as_dpsgd(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 3, 3);
    o.gossip_rounds = 1;
    snprintf(o.robust, sizeof o.robust, "off");
    struct cluster c, d;
    s_new(&c, &o, false, 3, 4, 5, 6);
    rumor_gossip_opts_default(&o);
    snprintf(o.algo, sizeof o.algo, "dpsgd");
    snprintf(o.robust, sizeof o.robust, "off");
    s_new(&d, &o, false, 3, 4, 5, 6);
    for (uint64_t step = 0; step < 9; step++) {
        s_train(&c, step);
        float *before[NODES];
        for (size_t i = 0; i < NODES; i++) {
            memcpy(d.x[i], c.x[i], c.numel * sizeof(float));
            before[i] = d.x[i];
        }
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        size_t lo = 0, hi = 0;
        s_range(step % 3, c.numel, 3, &lo, &hi);
        s_outside_same(&c, before, lo, hi);
        assert_int_equal(rumor_sim_step(d.sim, step), RUMOR_OK);
        for (size_t i = 0; i < NODES; i++)
            assert_memory_equal(c.x[i] + lo,
                                d.x[i] + lo,
                                (hi - lo) * sizeof(float));
    }
    s_free(&c);
    s_free(&d);
}

/* Every node with the same model and the same inner steps: every node's
 * error is the same, so the neighbourhood's W-weighted average of the
 * errors (sent losslessly, neighbourhood:fp32) is the own error, and its
 * look-ahead, formed per fragment, gives the own form's numbers (within
 * 1e-6: e_bar is summed in double and rounded); alpha 0 gives others. */
static void
s_same_nodes(const char *scope, double alpha, struct cluster *c)
{
    struct rumor_gossip_opts o;
    s_opts(&o, 2, 2);
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    snprintf(o.saef_scope, sizeof o.saef_scope, "%s", scope);
    o.ef_alpha = alpha;
    s_new(c, &o, true, 3, 4, 5, 6);
    for (uint64_t step = 0; step < 12; step++) {
        for (size_t i = 0; i < NODES; i++) {
            assert_int_equal(rumor_gossip_step_ahead(c->g[i]), RUMOR_OK);
            s_local(c->x[i], c->numel, 0, step);
        }
        assert_int_equal(rumor_sim_step(c->sim, step), RUMOR_OK);
    }
}

static void
test_fragments__neighbourhood_same_nodes__own_error_look_ahead(void **state)
{
    (void)state;
    struct cluster own, nbr, plain;
    s_same_nodes("self", 1, &own);
    s_same_nodes("neighbourhood:fp32", 1, &nbr);
    s_same_nodes("self", 0, &plain);
    double apart = 0;
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < own.numel; e++) {
            assert_float_equal(nbr.x[i][e], own.x[i][e], 1e-6);
            apart = fmax(apart, fabs(own.x[i][e] - plain.x[i][e]));
        }
    assert_true(apart > 1e-3);
    s_free(&own);
    s_free(&nbr);
    s_free(&plain);
}

static void
s_save(const rumor_gossip *g, rumor_buf *b)
{
    rumor_buf_init(b, 1u << 20);
    assert_int_equal(rumor_gossip_state_save(g, b), RUMOR_OK);
}

/* A run stopped after step 8 (some fragments with anchors, errors in the
 * memories, look-aheads applied) and resumed in fresh instances from the
 * saved states and models ends with the uninterrupted run's bits; from
 * the same start (anchors confirmed by compressed syncs) and from
 * different ones (the first compressed syncs discarded, anchors made by
 * exact ones), stopped after step 8 and after step 2 (fragment 2 of 3
 * still tentative). */
static void
test_fragments__state_saved_mid_run__resumes_bit_identically(void **state)
{
    (void)state;
    const char *codecs[] = {"", "topk:ratio=0.25", "qsgd:bits=4", "sign"};
    for (size_t k = 0; k < 4 * 4; k++) {
        bool same = (k / 4) % 2 == 1;
        uint64_t stop = k / 8 == 0 ? 8 : 2;
        const char *codec = codecs[k % 4];
        struct rumor_gossip_opts o;
        s_opts(&o, 6, 3);
        snprintf(o.delta_codec, sizeof o.delta_codec, "%s", codec);
        /* sign: the neighbourhood's look-ahead (e_bar in the state) */
        snprintf(o.saef_scope,
                 sizeof o.saef_scope,
                 "%s",
                 k % 4 == 3 ? "neighbourhood" : "self");
        o.ef_alpha = codec[0] != '\0' ? 0.5 : 0;
        o.outer_lr = 0.8;
        o.outer_momentum = 0.5;
        struct cluster a, b;
        /* b's own tentative anchors differ from a's: the state's count */
        s_new(&a, &o, same, 3, 4, 5, 6);
        s_new(&b, &o, !same, 3, 4, 5, 6);
        for (uint64_t step = 1; step <= stop; step++) {
            s_train(&a, step);
            assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
        }
        for (size_t i = 0; i < NODES; i++) {
            rumor_buf st;
            s_save(a.g[i], &st);
            assert_int_equal(
                rumor_gossip_state_load(b.g[i], st.data, st.len, NULL),
                RUMOR_OK);
            memcpy(b.x[i], a.x[i], a.numel * sizeof(float));
            rumor_buf_free(&st);
        }
        for (uint64_t step = stop + 1; step <= 20; step++) {
            s_train(&a, step);
            s_train(&b, step);
            assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
            assert_int_equal(rumor_sim_step(b.sim, step), RUMOR_OK);
        }
        for (size_t i = 0; i < NODES; i++)
            assert_memory_equal(a.x[i], b.x[i], a.numel * sizeof(float));
        s_free(&a);
        s_free(&b);
    }
}

/* The load of `st` into an instance of F fragments on the fuzz corpus's
 * model (node 1 of ring:4, 6 x 5 and 3 floats, top-k delta with SAEF);
 * with `same`, a loaded state saves back to the same bytes (a state of
 * the current version). */
static rumor_err
s_load_into(unsigned frags, const uint8_t *st, size_t len, bool same, char *why)
{
    struct rumor_gossip_opts o;
    s_opts(&o, 4, frags);
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.3");
    if (frags > 1) /* the neighbourhood form needs one fragment */
        snprintf(o.saef_scope, sizeof o.saef_scope, "self");
    o.ef_alpha = 1;
    rumor_topology *t = NULL;
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, NULL), RUMOR_OK);
    float x[33] = {0};
    struct rumor_tensor ts[2] = {{x, 2, {6, 5}}, {x + 30, 1, {3}}};
    struct rumor_model m = {ts, 2};
    rumor_gossip *g = NULL;
    struct rumor_diag diag = {0};
    if (rumor_gossip_new(&o, t, 1, &m, &g, &diag) != RUMOR_OK)
        fail_msg("gossip_new: %s", diag.msg);
    rumor_err rc = rumor_gossip_state_load(g, st, len, &diag);
    snprintf(why, 256, "%s", diag.msg);
    if (rc == RUMOR_OK && same) {
        rumor_buf back;
        s_save(g, &back);
        assert_int_equal(back.len, len);
        assert_memory_equal(back.data, st, len);
        rumor_buf_free(&back);
    }
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&t);
    return rc;
}

/* The state of the build before fragments (tests/fuzz/corpus's seed; its
 * first byte picks the fuzzer's algorithm) still loads with F = 1; a
 * state of another fragment count is refused, naming it. */
static void
test_fragments__state_of_other_fragment_count__refused(void **state)
{
    (void)state;
    FILE *f = fopen("tests/fuzz/corpus/gossip_state/localsgd_saef", "rb");
    assert_non_null(f);
    static uint8_t old[1 << 14];
    size_t len = fread(old, 1, sizeof old, f);
    fclose(f);
    assert_true(len > 1 && len < sizeof old);
    char why[256];
    assert_int_equal(s_load_into(1, old + 1, len - 1, false, why), RUMOR_OK);
    assert_int_equal(s_load_into(2, old + 1, len - 1, false, why),
                     RUMOR_EPROTO);
    assert_non_null(strstr(why, "fragments"));

    /* an F = 3 state (after a few syncs) into F = 3, 2 and 1 */
    struct rumor_gossip_opts o;
    s_opts(&o, 4, 3);
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.3");
    snprintf(o.saef_scope, sizeof o.saef_scope, "self");
    o.ef_alpha = 1;
    struct cluster c;
    s_new(&c, &o, false, 6, 5, 2, 1); /* 33 elements, as the corpus's */
    for (uint64_t step = 0; step < 6; step++) {
        s_train(&c, step);
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
    }
    rumor_buf st;
    s_save(c.g[1], &st);
    assert_int_equal(s_load_into(3, st.data, st.len, true, why), RUMOR_OK);
    assert_int_equal(s_load_into(2, st.data, st.len, true, why), RUMOR_EPROTO);
    assert_non_null(strstr(why, "fragments"));
    assert_int_equal(s_load_into(1, st.data, st.len, true, why), RUMOR_EPROTO);
    assert_non_null(strstr(why, "fragments"));
    rumor_buf_free(&st);
    s_free(&c);
}

/* rumor_gossip_new's answer and diag for F fragments with period H. */
static rumor_err
s_new_one(struct rumor_gossip_opts *o, size_t numel, char *why)
{
    rumor_topology *t = NULL;
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, NULL), RUMOR_OK);
    float x[16] = {0};
    struct rumor_tensor ts = {x, 1, {numel}};
    struct rumor_model m = {&ts, 1};
    rumor_gossip *g = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_gossip_new(o, t, 0, &m, &g, &diag);
    snprintf(why, 256, "%s", diag.msg);
    rumor_gossip_destroy(&g);
    rumor_topology_destroy(&t);
    return rc;
}

static void
test_fragments__bad_options__refused_naming_them(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    char why[256];
    s_opts(&o, 6, 0);
    assert_int_equal(s_new_one(&o, 16, why), RUMOR_EINVAL);
    assert_non_null(strstr(why, "fragments must be at least 1"));
    s_opts(&o, 6, 7);
    assert_int_equal(s_new_one(&o, 16, why), RUMOR_EINVAL);
    assert_non_null(strstr(why, "at most period"));
    s_opts(&o, 8, 5);
    assert_int_equal(s_new_one(&o, 4, why), RUMOR_EINVAL);
    assert_non_null(strstr(why, "at most the model's elements"));
    s_opts(&o, 6, 6); /* F = period = numel, and by gossip */
    o.gossip_rounds = 2;
    assert_int_equal(s_new_one(&o, 6, why), RUMOR_OK);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_fragments__exact_outer_nesterov__matches_reference),
        cmocka_unit_test(test_fragments__lossless_codec__matches_reference),
        cmocka_unit_test(
            test_fragments__compressed__own_elements_only_quarter_bytes),
        cmocka_unit_test(
            test_fragments__gossip_rounds__fragment_mixes_as_dpsgd),
        cmocka_unit_test(
            test_fragments__neighbourhood_same_nodes__own_error_look_ahead),
        cmocka_unit_test(
            test_fragments__state_saved_mid_run__resumes_bit_identically),
        cmocka_unit_test(
            test_fragments__state_of_other_fragment_count__refused),
        cmocka_unit_test(test_fragments__bad_options__refused_naming_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
