/*
 * Algorithms on a model in device memory (issue #31), run on the CPU:
 * gossip_backend_ref is host memory that gossip/ reaches only through the
 * model-memory table, counting every copy to and from the host as PCIe
 * traffic. PowerSGD on it must give the host path's bits on every node,
 * in a ring of ref nodes and in a ring that mixes ref and host nodes, and
 * copy exactly its payloads: per compressed step P, Q and the uncompressed
 * tensors each way; per warm-up step the whole model each way. Algorithms
 * that keep host state are refused with the reason.
 */
#include "tests/cmocka_compat.h"

#include "gossip/adapt.h"
#include "gossip/gossip_impl.h"
#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NODES 4
#define S_RANK  2
#define S_STEPS 6
/* two matrices and a bias: the bias is never compressed */
#define S_LAYERS 3
static const size_t s_small[S_LAYERS][2] = {{64, 32}, {32, 16}, {32, 1}};
/* past gossip_apply_terms's chunk: a term applied in pieces */
static const size_t s_wide[S_LAYERS][2] = {{171, 101}, {101, 16}, {101, 1}};
/* rows wider than half a chunk: a chunk of two rows */
static const size_t s_wider[S_LAYERS][2] = {{7, 5001}, {5001, 3}, {5001, 1}};
static const size_t (*s_shape)[2] = s_small;

struct ring {
    rumor_topology *topo;
    float *x[S_NODES];
    const struct gossip_backend_i *mem[S_NODES];
    rumor_gossip *g[S_NODES];
    rumor_sim *sim;
    size_t numel;
};

static size_t
s_numel(void)
{
    size_t n = 0;
    for (size_t t = 0; t < S_LAYERS; t++)
        n += s_shape[t][0] * s_shape[t][1];
    return n;
}

/* The P (side 0) or Q (side 1) floats of one compressed step. */
static size_t
s_factor_floats(size_t side)
{
    size_t f = 0;
    for (size_t t = 0; t < S_LAYERS; t++)
        if (s_shape[t][1] > 1)
            f += s_shape[t][side] * S_RANK;
    return f;
}

static size_t
s_bias_floats(void)
{
    return s_shape[S_LAYERS - 1][0];
}

static void
s_dpsgd_opts(struct rumor_gossip_opts *o, double clip)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "dpsgd");
    o->clip_norm = clip;
}

static void
s_choco_opts(struct rumor_gossip_opts *o, const char *codec)
{
    s_dpsgd_opts(o, 0);
    snprintf(o->algo, sizeof o->algo, "choco");
    snprintf(o->codec, sizeof o->codec, "%s", codec);
}

static void
s_powergossip_opts(struct rumor_gossip_opts *o, double clip)
{
    s_dpsgd_opts(o, clip);
    snprintf(o->algo, sizeof o->algo, "powergossip");
    o->rank = 1;
}

static void
s_opts(struct rumor_gossip_opts *o, uint64_t start_iter, bool one_sided)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "powersgd");
    o->rank = S_RANK;
    o->start_iter = start_iter;
    o->one_sided = one_sided;
    o->iterations = one_sided ? 2 : 1;
}

/* device[i]: node i's model lives in dev memory, else in host memory. */
static void
s_ring_on(struct ring *r,
          const struct rumor_gossip_opts *o,
          const bool device[S_NODES],
          const struct gossip_backend_i *dev)
{
    memset(r, 0, sizeof *r);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &r->topo, &diag),
                     RUMOR_OK);
    r->numel = s_numel();
    for (size_t i = 0; i < S_NODES; i++) {
        const struct gossip_backend_i *mem =
            device[i] ? dev : &gossip_backend_host;
        r->mem[i] = mem;
        assert_int_equal(
            mem->alloc(r->numel * sizeof(float), (void **)&r->x[i]),
            RUMOR_OK);
        struct rumor_tensor ts[S_LAYERS];
        size_t at = 0;
        for (size_t t = 0; t < S_LAYERS; t++) {
            size_t rows = s_shape[t][0], cols = s_shape[t][1];
            ts[t] = (struct rumor_tensor){r->x[i] + at, cols > 1 ? 2 : 1, {0}};
            ts[t].shape[0] = rows;
            ts[t].shape[1] = cols > 1 ? cols : 0;
            at += rows * cols;
        }
        struct rumor_model m = {ts, S_LAYERS};
        assert_int_equal(
            gossip_new_in(o, r->topo, (uint32_t)i, &m, mem, &r->g[i], &diag),
            RUMOR_OK);
    }
    assert_int_equal(rumor_sim_new(r->g, S_NODES, &r->sim), RUMOR_OK);
}

static void
s_ring_new(struct ring *r,
           const struct rumor_gossip_opts *o,
           const bool device[S_NODES])
{
    s_ring_on(r, o, device, &gossip_backend_ref);
}

static void
s_ring_free(struct ring *r)
{
    rumor_sim_destroy(&r->sim);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_gossip_destroy(&r->g[i]);
        r->mem[i]->release(r->x[i]);
    }
    rumor_topology_destroy(&r->topo);
}

/* Node i's gradient at step: a shared low-rank part and node noise, from
 * a hash of (node, step, element), the same on every run. */
static float
s_value(size_t i, uint64_t step, size_t e)
{
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^
                 (step + 7) * 0xbf58476d1ce4e5b9ull ^ e * 0x94d049bb133111ebull;
    h ^= h >> 31;
    h *= 0xd6e8feb86659d5b9ull;
    h ^= h >> 29;
    double noise = (double)(h >> 11) / 9007199254740992.0 - 0.5;
    return (float)(0.1 * noise + 0.5 * ((double)(e % 7) - 3.0) *
                                     ((double)(e % 5) - 2.0) / 6.0);
}

/* Runs S_STEPS steps; out[step][node] receives each node's tensors
 * (the test's own copies are not counted: they are the training's). */
static void
s_run(struct ring *r, float *out)
{
    float *in = malloc(r->numel * sizeof(float));
    assert_non_null(in);
    for (uint64_t step = 0; step < S_STEPS; step++) {
        for (size_t i = 0; i < S_NODES; i++) {
            for (size_t e = 0; e < r->numel; e++)
                in[e] = s_value(i, step, e);
            assert_int_equal(r->mem[i]->copy(r->x[i],
                                             in,
                                             r->numel * sizeof(float),
                                             GOSSIP_TO_DEVICE),
                             RUMOR_OK);
        }
        assert_int_equal(rumor_sim_step(r->sim, step), RUMOR_OK);
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(
                r->mem[i]->copy(out + (step * S_NODES + i) * r->numel,
                                r->x[i],
                                r->numel * sizeof(float),
                                GOSSIP_TO_HOST),
                RUMOR_OK);
    }
    free(in);
}

static void
s_compare(const struct rumor_gossip_opts *o, const bool device[S_NODES])
{
    static const bool host[S_NODES] = {false, false, false, false};
    struct ring a, b;
    s_ring_new(&a, o, host);
    s_ring_new(&b, o, device);
    size_t floats = (size_t)S_STEPS * S_NODES * a.numel;
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    s_run(&a, ya);
    s_run(&b, yb);
    assert_memory_equal(ya, yb, floats * sizeof(float));
    /* and the step did something (PowerSGD: the nodes agree) */
    if (strcmp(o->algo, "powersgd") == 0)
        assert_memory_equal(ya, ya + a.numel, a.numel * sizeof(float));
    assert_true(ya[0] != s_value(0, 0, 0) || ya[1] != s_value(0, 0, 1));
    free(ya);
    free(yb);
    s_ring_free(&a);
    s_ring_free(&b);
}

static void
test_device_ring_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 2, false);
    static const bool all[S_NODES] = {true, true, true, true};
    s_compare(&o, all);
}

static void
test_mixed_ring_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 1, false);
    static const bool mixed[S_NODES] = {true, false, true, false};
    s_compare(&o, mixed);
}

static void
test_one_sided_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 0, true);
    static const bool mixed[S_NODES] = {false, true, true, false};
    s_compare(&o, mixed);
}

static void
test_adapt_rule_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 0, false);
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.adapt_error = 0.05;
    static const bool all[S_NODES] = {true, true, true, true};
    s_compare(&o, all);
}

/* Only payloads cross: per warm-up step the model each way; per
 * compressed step the bias each way, and P and Q, which the compressor
 * copies and counts itself only where its backend has memory of its own
 * (CUDA; on the ref memory it runs the cpu backend in place). A host
 * model copies nothing. */
static void
test_pcie_bytes_are_the_payloads(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 1, false);
    static const bool mixed[S_NODES] = {true, false, false, false};
    struct ring r;
    s_ring_new(&r, &o, mixed);
    float *y = malloc((size_t)S_STEPS * S_NODES * r.numel * sizeof(float));
    assert_non_null(y);
    s_run(&r, y);
    uint64_t want = 4 * (r.numel + (S_STEPS - 1) * s_bias_floats());
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
    assert_int_equal(h2d, want);
    assert_int_equal(d2h, want);
    rumor_gossip_pcie_bytes(r.g[1], &h2d, &d2h);
    assert_int_equal(h2d, 0);
    assert_int_equal(d2h, 0);
    free(y);
    s_ring_free(&r);
}

/* PowerSGD's adaptive rank measures its error where the model is (the
 * backend's sumsq_add over the compressor's error memories): a mixed ring
 * computes the host's bits, and a device node copies only the payloads,
 * as without --adapt (the error sums ride the ring from host memory),
 * through a rank change. */
static void
test_adapt_rule_pcie_bytes_are_the_payloads(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 1, false);
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.adapt_error = 1e-3;
    o.adapt_rank_max = 4 * S_RANK;
    static const bool mixed[S_NODES] = {true, false, true, false};
    s_compare(&o, mixed);
    struct ring r;
    s_ring_new(&r, &o, mixed);
    float *y = malloc((size_t)S_STEPS * S_NODES * r.numel * sizeof(float));
    assert_non_null(y);
    s_run(&r, y);
    struct rumor_gossip_rank_report rep;
    assert_true(rumor_gossip_adapt_rank(r.g[0], &rep));
    assert_true(rep.changes >= 1 && rep.rel_error > 0);
    uint64_t want = 4 * (r.numel + (S_STEPS - 1) * s_bias_floats());
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
    assert_int_equal(h2d, want);
    assert_int_equal(d2h, want);
    free(y);
    s_ring_free(&r);
}

/* One-sided iterations write the model mid-step: an abandoned step puts
 * the device model back as it was. */
static void
test_abandon_restores_device_model(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 0, true);
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring r;
    s_ring_new(&r, &o, all);
    for (size_t i = 0; i < S_NODES; i++)
        for (size_t e = 0; e < r.numel; e++)
            r.x[i][e] = s_value(i, 0, e);
    float *before = malloc(r.numel * sizeof(float));
    assert_non_null(before);
    memcpy(before, r.x[0], r.numel * sizeof(float));
    /* every round of the step but the last */
    uint32_t rounds = rumor_gossip_rounds(r.g[0], 0);
    assert_true(rounds > 2);
    const struct rumor_gossip_msg *out[S_NODES];
    size_t count[S_NODES];
    for (uint32_t k = 0; k + 1 < rounds; k++) {
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(
                rumor_gossip_emit(r.g[i], 0, k, &out[i], &count[i]),
                RUMOR_OK);
        for (size_t i = 0; i < S_NODES; i++) {
            size_t from = (i + S_NODES - 1) % S_NODES;
            struct rumor_gossip_msg m = out[from][0];
            m.peer = (uint32_t)from;
            assert_int_equal(rumor_gossip_absorb(r.g[i], 0, k, &m, 1),
                             RUMOR_OK);
        }
    }
    assert_memory_not_equal(before, r.x[0], r.numel * sizeof(float));
    rumor_gossip_step_abandon(r.g[0]);
    assert_memory_equal(before, r.x[0], r.numel * sizeof(float));
    free(before);
    s_ring_free(&r);
}

/* The host's one-pass term (diff_sq), written in three pieces as
 * PowerGossip writes a term tensor by tensor, gives the bits of the
 * device path's diff then norm; the values span 12 decades, so a sum in
 * any other order than element order would differ (checked). */
static void
test_term_diff_sq__in_pieces__bits_of_diff_then_norm(void **state)
{
    (void)state;
    enum { N = 3001 };
    static float a[N], b[N];
    static double d_one[N], d_ref[N];
    struct rumor_rng rng;
    rumor_rng_init(&rng, 5, 0);
    for (size_t e = 0; e < N; e++) {
        a[e] =
            (float)(rumor_rng_normal(&rng) * pow(10.0, (double)(e % 13) - 6));
        b[e] = (float)rumor_rng_normal(&rng);
    }
    static const size_t cut[] = {0, 1000, 1017, N};
    for (int with_b = 0; with_b < 2; with_b++) {
        const float *bb = with_b ? b : NULL;
        double sq = 0;
        for (size_t k = 0; k + 1 < 4; k++)
            assert_int_equal(
                gossip_backend_host.diff_sq(d_one + cut[k],
                                            a + cut[k],
                                            bb ? bb + cut[k] : NULL,
                                            cut[k + 1] - cut[k],
                                            &sq),
                RUMOR_OK);
        double norm = 0;
        assert_null(gossip_backend_ref.diff_sq);
        assert_int_equal(gossip_backend_ref.diff(d_ref, a, bb, N), RUMOR_OK);
        assert_int_equal(gossip_backend_ref.norm(d_ref, N, &norm), RUMOR_OK);
        assert_memory_equal(d_one, d_ref, sizeof d_ref);
        assert_true(sqrt(sq) == norm);
        double backwards = 0;
        for (size_t e = N; e-- > 0;)
            backwards += d_ref[e] * d_ref[e];
        assert_true(sqrt(backwards) != norm);
    }
}

static void
test_dpsgd_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 0);
    static const bool mixed[S_NODES] = {true, false, true, true};
    s_compare(&o, mixed);
}

/* Clipping on (a fixed radius small enough to clip): the norms, the
 * radius and the scaled differences go through the backend too. */
static void
test_dpsgd_clipped_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 1.0);
    static const bool all[S_NODES] = {true, true, true, true};
    s_compare(&o, all);
}

/* The network driver's lossy path: messages and acks dropped by the same
 * draws in both rings, terms staged in the ledger, settled by acks and
 * committed later. */
static void
s_lossy_step(struct ring *r, uint64_t step, struct rumor_rng *rng)
{
    const struct rumor_gossip_msg *out[S_NODES];
    size_t outn[S_NODES];
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(rumor_gossip_emit(r->g[i], step, 0, &out[i], &outn[i]),
                         RUMOR_OK);
    for (size_t i = 0; i < S_NODES; i++) {
        struct rumor_gossip_msg inbox[S_NODES];
        size_t got = 0;
        for (size_t j = 0; j < S_NODES; j++)
            for (size_t m = 0; m < outn[j]; m++)
                if (out[j][m].peer == i &&
                    rumor_rng_uniform_double(rng) >= 0.3) {
                    inbox[got] = out[j][m];
                    inbox[got++].peer = (uint32_t)j;
                }
        assert_int_equal(
            rumor_gossip_absorb_partial(r->g[i], step, 0, inbox, got),
            RUMOR_OK);
    }
    for (size_t i = 0; i < S_NODES; i++)
        for (size_t j = 0; j < S_NODES; j++) {
            struct rumor_gossip_ack a;
            if (j == i || rumor_rng_uniform_double(rng) < 0.3)
                continue;
            assert_int_equal(rumor_gossip_ack_make(r->g[i], (uint32_t)j, &a),
                             RUMOR_OK);
            assert_int_equal(rumor_gossip_ack_take(r->g[j], (uint32_t)i, &a),
                             RUMOR_OK);
        }
    for (size_t i = 0; i < S_NODES; i++) {
        size_t applied = 0;
        assert_int_equal(rumor_gossip_commit(r->g[i], &applied), RUMOR_OK);
    }
}

static void
s_lossy_run(struct ring *r, float *out)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, 11, 0);
    float *in = malloc(r->numel * sizeof(float));
    assert_non_null(in);
    for (size_t i = 0; i < S_NODES; i++) {
        for (size_t e = 0; e < r->numel; e++)
            in[e] = s_value(i, 0, e);
        assert_int_equal(r->mem[i]->copy(r->x[i],
                                         in,
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_DEVICE),
                         RUMOR_OK);
    }
    for (uint64_t step = 0; step < 3 * S_STEPS; step++)
        s_lossy_step(r, step, &rng);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(r->mem[i]->copy(out + i * r->numel,
                                         r->x[i],
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_HOST),
                         RUMOR_OK);
    free(in);
}

static void
s_lossy_compare(const struct rumor_gossip_opts *o)
{
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {true, true, false, true};
    struct ring a, b;
    s_ring_new(&a, o, host);
    s_ring_new(&b, o, mixed);
    size_t floats = S_NODES * a.numel;
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    s_lossy_run(&a, ya);
    s_lossy_run(&b, yb);
    assert_memory_equal(ya, yb, floats * sizeof(float));
    /* terms were committed: the nodes moved towards each other */
    assert_true(ya[0] != s_value(0, 0, 0));
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_true(h2d > 0 && d2h > 0);
    free(ya);
    free(yb);
    s_ring_free(&a);
    s_ring_free(&b);
}

static void
test_dpsgd_lossy_ledger_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 1.0);
    s_lossy_compare(&o);
}

/* The exact averages: the model is their payload, down and up once. */
static void
test_allreduce_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 0);
    static const bool mixed[S_NODES] = {true, false, false, true};
    for (int wide = 0; wide < 2; wide++) {
        snprintf(o.algo, sizeof o.algo, wide ? "allreduce-f64" : "allreduce");
        s_compare(&o, mixed);
    }
    struct ring r;
    s_ring_new(&r, &o, mixed);
    float *y = malloc((size_t)S_STEPS * S_NODES * r.numel * sizeof(float));
    assert_non_null(y);
    s_run(&r, y);
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
    assert_int_equal(h2d, (uint64_t)S_STEPS * 4 * r.numel);
    assert_int_equal(d2h, (uint64_t)S_STEPS * 4 * r.numel);
    free(y);
    s_ring_free(&r);
}

static void
test_powergossip_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_powergossip_opts(&o, 0);
    static const bool mixed[S_NODES] = {false, true, true, false};
    s_compare(&o, mixed);
    s_powergossip_opts(&o, 0.5);
    static const bool all[S_NODES] = {true, true, true, true};
    s_compare(&o, all);
}

/* A matrix of 171 x 101 spans three chunks of gossip_apply_terms, one of
 * 7 x 5001 four: the host's terms, rebuilt from their factors a chunk of
 * rows at a time, give the bits of the device's terms, written whole
 * (rank 3: the cpu kernel's pairs of rows). */
static void
test_powergossip_chunked_terms_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    static const bool mixed[S_NODES] = {false, true, true, false};
    for (size_t k = 0; k < 8; k++) {
        s_shape = k < 4 ? s_wide : s_wider;
        s_powergossip_opts(&o, k % 2 == 0 ? 0 : 0.5);
        o.rank = k % 4 < 2 ? 1 : 3;
        s_compare(&o, mixed);
    }
}

/* Back to the small model, even after a failed assertion. */
static int
s_shape_small(void **state)
{
    (void)state;
    s_shape = s_small;
    return 0;
}

/* CHOCO's copies, the codec's vectors and the mixing on the device: a
 * stochastic codec (qsgd) and a sparse one (topk), strict and lossy. */
static void
test_choco_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    static const bool mixed[S_NODES] = {true, false, true, true};
    s_choco_opts(&o, "qsgd:bits=4");
    s_compare(&o, mixed);
    s_choco_opts(&o, "topk:ratio=0.1");
    s_compare(&o, mixed);
    s_lossy_compare(&o);
}

/* DeepSqueeze's error and its codec's vectors on the device. */
static void
test_deepsqueeze_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    static const bool mixed[S_NODES] = {false, true, true, false};
    s_choco_opts(&o, "qsgd:bits=4");
    snprintf(o.algo, sizeof o.algo, "deepsqueeze");
    s_compare(&o, mixed);
    s_lossy_compare(&o);
}

/* A state saved from a device instance (its copies through the host)
 * loads into a host one, and back, to the same bytes. */
static void
s_state_moves(const struct rumor_gossip_opts *o)
{
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring a, b;
    s_ring_new(&a, o, all);
    s_ring_new(&b, o, host);
    float *y = malloc((size_t)S_STEPS * S_NODES * a.numel * sizeof(float));
    assert_non_null(y);
    s_run(&a, y);
    struct rumor_buf sa, sb;
    rumor_buf_init(&sa, RUMOR_GOSSIP_STATE_MAX);
    rumor_buf_init(&sb, RUMOR_GOSSIP_STATE_MAX);
    assert_int_equal(rumor_gossip_state_save(a.g[1], &sa), RUMOR_OK);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_state_load(b.g[1], sa.data, sa.len, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(b.g[1], &sb), RUMOR_OK);
    assert_int_equal(sa.len, sb.len);
    assert_memory_equal(sa.data, sb.data, sa.len);
    rumor_buf_reset(&sa);
    assert_int_equal(rumor_gossip_state_load(a.g[1], sb.data, sb.len, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(a.g[1], &sa), RUMOR_OK);
    assert_memory_equal(sa.data, sb.data, sa.len);
    rumor_buf_free(&sa);
    rumor_buf_free(&sb);
    free(y);
    s_ring_free(&a);
    s_ring_free(&b);
}

static void
test_choco_state_moves_between_backends(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_choco_opts(&o, "qsgd:bits=4");
    s_state_moves(&o);
}

/* Skipped edges keep their factors until the ledger's verdict (the
 * per-edge commit): the same on the device. */
static void
test_powergossip_lossy_ledger_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_powergossip_opts(&o, 0);
    s_lossy_compare(&o);
}

/* The CUDA backend, or a skip with the reason (never a silent pass). */
static const struct gossip_backend_i *
s_cuda_or_skip(void)
{
    const struct gossip_backend_i *cuda = NULL;
    const char *why = NULL;
    if (gossip_backend_cuda(&cuda, &why) != RUMOR_OK) {
        printf("skipped: %s\n", why);
        skip();
    }
    return cuda;
}

/* Runs o on an all-host ring and on one whose nodes 0 and 1 keep their
 * model in CUDA memory; returns the largest difference relative to the
 * largest value. */
static double
s_cuda_mixed(const struct rumor_gossip_opts *o, struct ring *b)
{
    const struct gossip_backend_i *cuda = s_cuda_or_skip();
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {true, true, false, false};
    struct ring a;
    s_ring_on(&a, o, host, &gossip_backend_host);
    s_ring_on(b, o, mixed, cuda);
    size_t floats = (size_t)S_STEPS * S_NODES * a.numel;
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    s_run(&a, ya);
    s_run(b, yb);
    double most = 0, worst = 0;
    for (size_t k = 0; k < floats; k++) {
        most = fmax(most, fabs(ya[k]));
        worst = fmax(worst, fabs((double)ya[k] - yb[k]));
    }
    printf("%s, cuda mixed ring: max |diff| %.3g of max |x| %.3g\n",
           o->algo,
           worst,
           most);
    free(ya);
    free(yb);
    s_ring_free(&a);
    return worst / most;
}

/* On a GPU: PowerSGD with two nodes in CUDA memory trains like an all-host
 * ring within float tolerance (cuBLAS sums in another order), and the GPU
 * nodes copy P, Q and the bias each way per compressed step, nothing
 * more. */
static void
test_cuda_powersgd_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 1, false);
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) <= 1e-4);
    uint64_t per_step =
        4 * (s_factor_floats(0) + s_factor_floats(1) + s_bias_floats());
    uint64_t want = 4 * b.numel + (S_STEPS - 1) * per_step;
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    /* and once, the first Q, drawn on the host (warm start keeps it) */
    assert_int_equal(h2d, want + 4 * s_factor_floats(1));
    assert_int_equal(d2h, want);
    s_ring_free(&b);
}

/* On a GPU: D-PSGD's kernels round as the host does, so a mixed ring
 * computes the host's bits; per step the snapshot goes down once and each
 * of the two neighbours' messages up once. */
static void
test_cuda_dpsgd_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 0);
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) == 0);
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_int_equal(d2h, (uint64_t)S_STEPS * 4 * b.numel);
    assert_int_equal(h2d, (uint64_t)S_STEPS * 2 * 4 * b.numel);
    s_ring_free(&b);
}

/* On a GPU: PowerGossip's products run on cuBLAS (float tolerance); per
 * step the 1-D tensors go down once, each neighbour's message's factor
 * part down and up once and its 1-D part up once. */
static void
test_cuda_powergossip_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_powergossip_opts(&o, 0);
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) <= 1e-4);
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_true(h2d > 0 && d2h > 0);
    assert_true(h2d < (uint64_t)S_STEPS * 4 * b.numel);
    s_ring_free(&b);
}

/* On a GPU: CHOCO with top-k (exact arithmetic: the device payload is the
 * host's bytes) computes the host's bits in a mixed ring; a codec without a
 * device path (huffman) is refused with the reason. */
static void
test_cuda_choco_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_choco_opts(&o, "topk:ratio=0.1");
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) == 0);
    s_ring_free(&b);
}

static void
s_moniqua_opts(struct rumor_gossip_opts *o, double clip)
{
    s_dpsgd_opts(o, clip);
    snprintf(o->algo, sizeof o->algo, "moniqua");
    o->theta = 0.2;
}

/* Moniqua's noise, levels and decoded terms on the device: strict (with
 * and without clipping) and lossy; per step only the levels cross, this
 * node's down once and each of its two neighbours' up once. */
static void
test_moniqua_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    static const bool mixed[S_NODES] = {true, false, true, true};
    s_moniqua_opts(&o, 0);
    s_compare(&o, mixed);
    s_lossy_compare(&o);
    s_moniqua_opts(&o, 0.5);
    static const bool all[S_NODES] = {true, true, true, true};
    s_compare(&o, all);
    struct ring r;
    s_ring_new(&r, &o, mixed);
    float *y = malloc((size_t)S_STEPS * S_NODES * r.numel * sizeof(float));
    assert_non_null(y);
    s_run(&r, y);
    uint64_t levels = (r.numel + 3) / 4, h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
    assert_int_equal(d2h, (uint64_t)S_STEPS * levels);
    assert_int_equal(h2d, (uint64_t)S_STEPS * 2 * levels);
    rumor_gossip_pcie_bytes(r.g[1], &h2d, &d2h);
    assert_int_equal(h2d + d2h, 0);
    free(y);
    s_ring_free(&r);
}

/* Equal bits, or both NaN: the GPU's NaN is the canonical one, x86's
 * carries an operand's payload or sign. */
static void
s_same_or_nan(const void *got, const void *want, size_t n, bool wide)
{
    for (size_t e = 0; e < n; e++) {
        double g = wide ? ((const double *)got)[e] : ((const float *)got)[e];
        double w = wide ? ((const double *)want)[e] : ((const float *)want)[e];
        size_t size = wide ? sizeof(double) : sizeof(float);
        if (!(isnan(g) && isnan(w)))
            assert_memory_equal((const char *)got + e * size,
                                (const char *)want + e * size,
                                size);
    }
}

/* Moniqua's three operations on be against their twins on the host, value
 * for value: the noise from an odd offset of the stream, the levels of a
 * length that ends mid-byte and their decoded terms, on inputs that
 * include bucket edges, signed zeros, a subnormal, huge values, Inf and
 * NaN. */
static void
s_moniqua_ops_equal_twins(const struct gossip_backend_i *be)
{
    enum { N = 1027, BYTES = (N + 3) / 4 };
    const double b = 0.6;
    static float x[N], y[N], noise[N], xhat[N], got_f[N];
    static double d[N], got_d[N];
    static uint8_t levels[BYTES], theirs[BYTES], got_b[BYTES];
    static const float edge[] = {0.0f,
                                 -0.0f,
                                 0.3f,
                                 -0.3f,
                                 0.6f,
                                 -0.6f,
                                 0.9f,
                                 1e30f,
                                 -1e30f,
                                 1e-40f,
                                 INFINITY,
                                 -INFINITY,
                                 NAN};
    size_t edges = sizeof edge / sizeof edge[0];
    for (size_t e = 0; e < N; e++) {
        x[e] = e < edges ? edge[e] : 4 * s_value(0, 0, e);
        y[e] = e < edges ? edge[edges - 1 - e] : 4 * s_value(1, 0, e);
    }
    rumor_rng_fill_uniform(9, 4, 5, noise, N);
    gossip_ref_moniqua_levels(levels, xhat, x, noise, b, N);
    float *dx = NULL, *dnoise = NULL, *dxhat = NULL;
    uint8_t *dlevels = NULL;
    double *dd = NULL;
    assert_int_equal(be->alloc(sizeof x, (void **)&dx), RUMOR_OK);
    assert_int_equal(be->alloc(sizeof noise, (void **)&dnoise), RUMOR_OK);
    assert_int_equal(be->alloc(sizeof xhat, (void **)&dxhat), RUMOR_OK);
    assert_int_equal(be->alloc(BYTES, (void **)&dlevels), RUMOR_OK);
    assert_int_equal(be->alloc(sizeof d, (void **)&dd), RUMOR_OK);
    assert_int_equal(be->uniform(dnoise, 9, 4, 5, N), RUMOR_OK);
    assert_int_equal(be->copy(got_f, dnoise, sizeof noise, GOSSIP_TO_HOST),
                     RUMOR_OK);
    assert_memory_equal(got_f, noise, sizeof noise);
    assert_int_equal(be->copy(dx, x, sizeof x, GOSSIP_TO_DEVICE), RUMOR_OK);
    assert_int_equal(be->moniqua_levels(dlevels, dxhat, dx, dnoise, b, N),
                     RUMOR_OK);
    assert_int_equal(be->copy(got_b, dlevels, BYTES, GOSSIP_TO_HOST), RUMOR_OK);
    assert_memory_equal(got_b, levels, BYTES);
    assert_int_equal(be->copy(got_f, dxhat, sizeof xhat, GOSSIP_TO_HOST),
                     RUMOR_OK);
    s_same_or_nan(got_f, xhat, N, false);
    /* a neighbour's levels, decoded against x and xhat */
    gossip_ref_moniqua_levels(theirs, got_f, y, noise, b, N);
    gossip_ref_moniqua_term(d, theirs, x, xhat, b, N);
    assert_int_equal(be->copy(dlevels, theirs, BYTES, GOSSIP_TO_DEVICE),
                     RUMOR_OK);
    assert_int_equal(be->moniqua_term(dd, dlevels, dx, dxhat, b, N), RUMOR_OK);
    assert_int_equal(be->copy(got_d, dd, sizeof d, GOSSIP_TO_HOST), RUMOR_OK);
    s_same_or_nan(got_d, d, N, true);
    be->release(dx);
    be->release(dnoise);
    be->release(dxhat);
    be->release(dlevels);
    be->release(dd);
}

/* On a GPU: Moniqua's kernels compute their twins' values. */
static void
test_cuda_moniqua_kernels_equal_twins(void **state)
{
    (void)state;
    s_moniqua_ops_equal_twins(s_cuda_or_skip());
}

/* On a GPU: Moniqua in a mixed ring computes the host's bits; per step
 * its levels go down once and each neighbour's come up once. */
static void
test_cuda_moniqua_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_moniqua_opts(&o, 0);
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) == 0);
    uint64_t levels = (b.numel + 3) / 4, h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_int_equal(d2h, (uint64_t)S_STEPS * levels);
    assert_int_equal(h2d, (uint64_t)S_STEPS * 2 * levels);
    s_ring_free(&b);
}

/* S_STEPS steps of CHOCO --adapt over modelled links (their rates set the
 * budgets); out[node] receives the models, *pcie node 0's bytes. */
static void
s_adapt_run(const struct rumor_gossip_opts *o,
            const bool device[S_NODES],
            float *out,
            struct rumor_buf *saved,
            uint64_t pcie[2])
{
    struct ring r;
    s_ring_new(&r, o, device);
    struct rumor_simlink_opts lo = {.compute_s = 0.01,
                                    .rates = {1e6, 2e7, 4e6},
                                    .rate_count = 3};
    rumor_simlink *links = NULL;
    assert_int_equal(rumor_simlink_new(r.sim, r.g, S_NODES, &lo, &links),
                     RUMOR_OK);
    float *in = malloc(r.numel * sizeof(float));
    assert_non_null(in);
    for (uint64_t step = 0; step < 2 * S_STEPS; step++) {
        for (size_t i = 0; i < S_NODES; i++) {
            for (size_t e = 0; e < r.numel; e++)
                in[e] = s_value(i, step, e);
            assert_int_equal(r.mem[i]->copy(r.x[i],
                                            in,
                                            r.numel * sizeof(float),
                                            GOSSIP_TO_DEVICE),
                             RUMOR_OK);
        }
        assert_int_equal(rumor_sim_step(r.sim, step), RUMOR_OK);
        (void)rumor_simlink_step(links, step);
    }
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(r.mem[i]->copy(out + i * r.numel,
                                        r.x[i],
                                        r.numel * sizeof(float),
                                        GOSSIP_TO_HOST),
                         RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(r.g[0], saved), RUMOR_OK);
    rumor_gossip_pcie_bytes(r.g[0], &pcie[0], &pcie[1]);
    free(in);
    rumor_simlink_destroy(&links);
    s_ring_free(&r);
}

/* CHOCO's adaptive controllers on the device: the vectors they measure,
 * their statistics and errors, the per-link copies and sums through the
 * table, bit for bit the host's, and the state the same bytes (a device's
 * copies through the host); payloads cross (a device node's own back up
 * once, its C(x) decoded from the bytes), a host node copies nothing. */
static void
test_choco_adapt_bits_equal_host(void **state)
{
    (void)state;
    static const char *const ctl[] = {"fixed", "rule", "learned"};
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {true, false, true, true};
    size_t floats = S_NODES * s_numel();
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    for (size_t c = 0; c < sizeof ctl / sizeof ctl[0]; c++) {
        struct rumor_gossip_opts o;
        s_choco_opts(&o, "qsgd:bits=4");
        snprintf(o.adapt, sizeof o.adapt, "%s", ctl[c]);
        o.gamma = 0.5;
        o.comm_share = 0.3;
        struct rumor_buf sa, sb;
        rumor_buf_init(&sa, RUMOR_GOSSIP_STATE_MAX);
        rumor_buf_init(&sb, RUMOR_GOSSIP_STATE_MAX);
        uint64_t pa[2], pb[2];
        s_adapt_run(&o, host, ya, &sa, pa);
        s_adapt_run(&o, mixed, yb, &sb, pb);
        assert_memory_equal(ya, yb, floats * sizeof(float));
        assert_true(ya[0] != s_value(0, 2 * S_STEPS - 1, 0));
        assert_int_equal(sa.len, sb.len);
        assert_memory_equal(sa.data, sb.data, sa.len);
        assert_int_equal(pa[0] + pa[1], 0);
        assert_true(pb[0] > 0 && pb[1] > 0);
        printf("choco --adapt %s: device node 0 copied %llu bytes up, "
               "%llu down in %d steps (its model: %zu bytes)\n",
               ctl[c],
               (unsigned long long)pb[0],
               (unsigned long long)pb[1],
               2 * S_STEPS,
               s_numel() * sizeof(float));
        rumor_buf_free(&sa);
        rumor_buf_free(&sb);
    }
    free(ya);
    free(yb);
    /* every codec the per-link controllers choose has device kernels */
    for (unsigned bits = GOSSIP_ADAPT_MIN_BITS; bits <= 32; bits++) {
        if (bits > GOSSIP_ADAPT_MAX_BITS && bits < 32)
            continue;
        char dense[64], spec[96];
        if (bits == 32)
            snprintf(dense, sizeof dense, "fp32");
        else
            snprintf(dense,
                     sizeof dense,
                     "qsgd:bits=%u,bucket=%d",
                     bits,
                     GOSSIP_ADAPT_BUCKET);
        for (int sparse = 0; sparse < 2; sparse++) {
            snprintf(spec,
                     sizeof spec,
                     "%s%s",
                     sparse ? "topk:k=3|" : "",
                     dense);
            rumor_codec *codec = NULL;
            assert_int_equal(rumor_codec_new(spec, &codec, NULL), RUMOR_OK);
            assert_true(rumor_codec_device_supported(codec));
            rumor_codec_destroy(&codec);
        }
    }
}

/* On a GPU: the controllers' reductions agree with the host's within
 * float rounding (the host sums 64 terms per float lane, the kernels in
 * double), the largest magnitude exactly, over several blocks; PowerSGD
 * --adapt's sumsq_add (double on both sides, in another order) within
 * double rounding, and DGC's (b NULL). */
static void
test_cuda_adapt_reductions_match_host(void **state)
{
    (void)state;
    const struct gossip_backend_i *cuda = s_cuda_or_skip();
    enum { N = 70001 };
    float *x = malloc(N * sizeof(float)), *ap = malloc(N * sizeof(float));
    assert_true(x && ap);
    for (size_t e = 0; e < N; e++) {
        x[e] = 3 * s_value(2, 1, e) + 0.25f;
        ap[e] = e % 3 == 0 ? 0.0f : x[e] * 0.9f; /* a sparse C(x) */
    }
    struct rumor_layer_stats want, got;
    rumor_layer_stats_compute(x, N, &want);
    double support_want = 0;
    double err_want = rumor_layer_rel_error(x, ap, N, &support_want);
    float *dx = NULL, *dap = NULL;
    assert_int_equal(cuda->alloc(N * sizeof(float), (void **)&dx), RUMOR_OK);
    assert_int_equal(cuda->alloc(N * sizeof(float), (void **)&dap), RUMOR_OK);
    assert_int_equal(cuda->copy(dx, x, N * sizeof(float), GOSSIP_TO_DEVICE),
                     RUMOR_OK);
    assert_int_equal(cuda->copy(dap, ap, N * sizeof(float), GOSSIP_TO_DEVICE),
                     RUMOR_OK);
    assert_int_equal(cuda->stats(dx, N, &got), RUMOR_OK);
    assert_true(fabs(got.norm - want.norm) <= 1e-6 * want.norm);
    assert_true(got.max_abs == want.max_abs);
    assert_true(fabs(got.mean - want.mean) <= 1e-6 * fabs(want.mean));
    assert_true(fabs(got.var - want.var) <= 1e-5 * want.var);
    double err = 0, support = 0;
    assert_int_equal(cuda->rel_error(dx, dap, N, &err, &support), RUMOR_OK);
    assert_true(fabs(err - err_want) <= 1e-5 * err_want);
    assert_true(fabs(support - support_want) <= 1e-5 * support_want);
    /* PowerSGD --adapt's sum, onto a running total */
    double sq_want = 2.5, sq = 2.5;
    gossip_ref_sumsq_add(x, ap, N, &sq_want);
    assert_int_equal(cuda->sumsq_add(dx, dap, N, &sq), RUMOR_OK);
    assert_true(fabs(sq - sq_want) <= 1e-10 * sq_want);
    /* DGC's clip: b NULL, the sum of x^2 */
    sq_want = 0;
    sq = 0;
    gossip_ref_sumsq_add(x, NULL, N, &sq_want);
    assert_int_equal(cuda->sumsq_add(dx, NULL, N, &sq), RUMOR_OK);
    assert_true(fabs(sq - sq_want) <= 1e-10 * sq_want);
    cuda->release(dx);
    cuda->release(dap);
    free(x);
    free(ap);
}

/* Without a GPU, CUDA memory is refused with the runtime's reason. */
static void
test_cuda_memory_refused_without_gpu(void **state)
{
    (void)state;
    struct rumor_diag diag = {0};
    rumor_topology *topo = NULL;
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &topo, &diag),
                     RUMOR_OK);
    float x[8] = {0};
    struct rumor_tensor t = {x, 1, {8}};
    struct rumor_model m = {&t, 1};
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    rumor_gossip *g = NULL;
    /* without a GPU, CUDA memory is refused with the runtime's reason */
    diag.msg[0] = '\0';
    snprintf(o.algo, sizeof o.algo, "powersgd");
    if (rumor_cuda_device_count(NULL) == 0) {
        assert_int_equal(
            rumor_gossip_new_on(&o, topo, 0, &m, RUMOR_DEVICE_CUDA, &g, &diag),
            RUMOR_ENOTSUP);
        assert_null(g);
        assert_non_null(strstr(diag.msg, "GPU"));
    }
    rumor_topology_destroy(&topo);
}

/* --- localsgd / DiLoCo -------------------------------------------------- */

/* Local SGD every period steps, the delta compressed by codec ("" for
 * exact averaging), DiLoCo's outer step with lr and mu. */
static void
s_lsgd_opts(struct rumor_gossip_opts *o,
            const char *codec,
            double lr,
            double mu,
            unsigned fragments)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "localsgd");
    snprintf(o->delta_codec, sizeof o->delta_codec, "%s", codec);
    o->period = 3;
    o->outer_lr = lr;
    o->outer_momentum = mu;
    o->fragments = fragments;
}

/* A ring whose nodes start from the same model, or (distinct) from models
 * that differ by node: made before the instances, which take a delta
 * codec's tentative anchor from it. */
static void
s_lsgd_ring(struct ring *r,
            const struct rumor_gossip_opts *o,
            const bool device[S_NODES],
            const struct gossip_backend_i *dev,
            bool distinct)
{
    memset(r, 0, sizeof *r);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &r->topo, &diag),
                     RUMOR_OK);
    r->numel = s_numel();
    float *in = malloc(r->numel * sizeof(float));
    assert_non_null(in);
    for (size_t i = 0; i < S_NODES; i++) {
        r->mem[i] = device[i] ? dev : &gossip_backend_host;
        assert_int_equal(
            r->mem[i]->alloc(r->numel * sizeof(float), (void **)&r->x[i]),
            RUMOR_OK);
        for (size_t e = 0; e < r->numel; e++)
            in[e] = s_value(distinct ? i : 0, 1000, e);
        assert_int_equal(r->mem[i]->copy(r->x[i],
                                         in,
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_DEVICE),
                         RUMOR_OK);
        struct rumor_tensor ts[S_LAYERS];
        size_t at = 0;
        for (size_t t = 0; t < S_LAYERS; t++) {
            size_t rows = s_shape[t][0], cols = s_shape[t][1];
            ts[t] = (struct rumor_tensor){r->x[i] + at, cols > 1 ? 2 : 1, {0}};
            ts[t].shape[0] = rows;
            ts[t].shape[1] = cols > 1 ? cols : 0;
            at += rows * cols;
        }
        struct rumor_model m = {ts, S_LAYERS};
        assert_int_equal(gossip_new_in(o,
                                       r->topo,
                                       (uint32_t)i,
                                       &m,
                                       r->mem[i],
                                       &r->g[i],
                                       &diag),
                         RUMOR_OK);
    }
    free(in);
    assert_int_equal(rumor_sim_new(r->g, S_NODES, &r->sim), RUMOR_OK);
}

/* Steps of a local SGD run: several syncs of every fragment. */
#define S_LSGD_STEPS 14

/* Trains: per step the look-ahead (rumor_gossip_step_ahead), a local
 * step x -= 0.05 g on the host (the training's copies, not counted), then
 * the step's exchange; out[step][node] receives the models. */
static void
s_lsgd_run(struct ring *r, float *out, uint64_t from, uint64_t to)
{
    float *x = malloc(r->numel * sizeof(float));
    assert_non_null(x);
    size_t bytes = r->numel * sizeof(float);
    for (uint64_t step = from; step < to; step++) {
        for (size_t i = 0; i < S_NODES; i++) {
            assert_int_equal(rumor_gossip_step_ahead(r->g[i]), RUMOR_OK);
            assert_int_equal(r->mem[i]->copy(x, r->x[i], bytes, GOSSIP_TO_HOST),
                             RUMOR_OK);
            for (size_t e = 0; e < r->numel; e++)
                x[e] -= 0.05f * s_value(i, step, e);
            assert_int_equal(
                r->mem[i]->copy(r->x[i], x, bytes, GOSSIP_TO_DEVICE),
                RUMOR_OK);
        }
        assert_int_equal(rumor_sim_step(r->sim, step), RUMOR_OK);
        for (size_t i = 0; out != NULL && i < S_NODES; i++)
            assert_int_equal(
                r->mem[i]->copy(out + (step * S_NODES + i) * r->numel,
                                r->x[i],
                                bytes,
                                GOSSIP_TO_HOST),
                RUMOR_OK);
    }
    free(x);
}

/* An all-host ring and one that mixes ref-device and host nodes train to
 * the same bits at every step; the nodes agree after a sync of the whole
 * model (one fragment, exact averaging or every delta decoded). */
static void
s_lsgd_compare(const struct rumor_gossip_opts *o, bool distinct)
{
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {true, false, true, true};
    struct ring a, b;
    s_lsgd_ring(&a, o, host, &gossip_backend_ref, distinct);
    s_lsgd_ring(&b, o, mixed, &gossip_backend_ref, distinct);
    size_t floats = (size_t)S_LSGD_STEPS * S_NODES * a.numel;
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    s_lsgd_run(&a, ya, 0, S_LSGD_STEPS);
    s_lsgd_run(&b, yb, 0, S_LSGD_STEPS);
    assert_memory_equal(ya, yb, floats * sizeof(float));
    if (o->fragments == 1 && o->gossip_rounds == 0) {
        /* step 12 syncs; every node holds the same model after it */
        const float *at = ya + (size_t)12 * S_NODES * a.numel;
        for (size_t i = 1; i < S_NODES; i++)
            assert_memory_equal(at, at + i * a.numel, a.numel * sizeof(float));
    }
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_true(h2d > 0 && d2h > 0);
    rumor_gossip_pcie_bytes(b.g[1], &h2d, &d2h);
    assert_true(h2d == 0 && d2h == 0);
    free(ya);
    free(yb);
    s_ring_free(&a);
    s_ring_free(&b);
}

/* Exact local SGD, DiLoCo's outer Nesterov step, and k gossip rounds: the
 * anchor, the outer velocity and the mixer's buffer on the device. */
static void
test_localsgd_exact_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "", 1.0, 0.0, 1);
    s_lsgd_compare(&o, true);
    s_lsgd_opts(&o, "", 0.7, 0.9, 1);
    s_lsgd_compare(&o, true);
    s_lsgd_opts(&o, "", 1.0, 0.0, 1);
    o.gossip_rounds = 2;
    s_lsgd_compare(&o, true);
}

/* Exact averaging moves the fragment to the host and back once per sync
 * (the all-reduce's payload), and nothing else crosses. */
static void
test_localsgd_exact_pcie_is_the_model_per_sync(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "", 0.7, 0.9, 1);
    static const bool mixed[S_NODES] = {true, false, false, false};
    struct ring r;
    s_lsgd_ring(&r, &o, mixed, &gossip_backend_ref, false);
    s_lsgd_run(&r, NULL, 0, S_LSGD_STEPS);
    uint64_t syncs = (S_LSGD_STEPS + o.period - 1) / o.period;
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
    assert_int_equal(h2d, syncs * 4 * r.numel);
    assert_int_equal(d2h, syncs * 4 * r.numel);
    s_ring_free(&r);
}

/* A compressed sync crosses with its payloads: the own one down, and up
 * again with every member's to decode; and the anchor's crc32c per
 * GOSSIP_CRC_CHUNK bytes. fp16 payloads have one size. */
static void
test_localsgd_compressed_pcie_is_the_payloads(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "fp16", 0.7, 0.9, 1);
    static const bool mixed[S_NODES] = {false, true, false, false};
    struct ring r;
    s_lsgd_ring(&r, &o, mixed, &gossip_backend_ref, false);
    s_lsgd_run(&r, NULL, 0, S_LSGD_STEPS);
    rumor_codec *codec = NULL;
    size_t payload = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_new("fp16", &codec, NULL), RUMOR_OK);
    assert_int_equal(rumor_codec_encoded_size(codec, r.numel, &payload, &exact),
                     RUMOR_OK);
    assert_true(exact);
    rumor_codec_destroy(&codec);
    uint64_t syncs = (S_LSGD_STEPS + o.period - 1) / o.period;
    uint64_t h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(r.g[1], &h2d, &d2h);
    uint64_t chunks = (4 * r.numel + GOSSIP_CRC_CHUNK - 1) / GOSSIP_CRC_CHUNK;
    assert_true(chunks > 1);
    assert_int_equal(d2h, syncs * (payload + 4 * chunks));
    assert_int_equal(h2d, syncs * (1 + S_NODES) * payload);
    s_ring_free(&r);
}

/* Compressed deltas with error feedback: a stochastic codec and a sparse
 * one, the memories saef, ef and ef-decay, with the outer step; nodes that
 * start apart discard the first sync (the anchors' checksums) on every node. */
static void
test_localsgd_compressed_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "qsgd:bits=4", 1.0, 0.0, 1);
    s_lsgd_compare(&o, false);
    s_lsgd_opts(&o, "topk:ratio=0.1", 0.7, 0.9, 1);
    s_lsgd_compare(&o, false);
    snprintf(o.ef, sizeof o.ef, "ef");
    s_lsgd_compare(&o, false);
    snprintf(o.ef, sizeof o.ef, "ef-decay:0.7");
    s_lsgd_compare(&o, false);
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 1);
    s_lsgd_compare(&o, true);
}

/* Step-ahead error feedback: the own error (self) and the neighbourhood's
 * e_bar, sent in the extra round with the delta's codec or another. */
static void
test_localsgd_saef_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "topk:ratio=0.1", 1.0, 0.0, 1);
    o.ef_alpha = 0.5;
    snprintf(o.saef_scope, sizeof o.saef_scope, "self");
    s_lsgd_compare(&o, false);
    o.ef_alpha = 1.0;
    snprintf(o.saef_scope, sizeof o.saef_scope, "neighbourhood");
    s_lsgd_compare(&o, false);
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 1);
    o.ef_alpha = 0.7;
    snprintf(o.saef_scope, sizeof o.saef_scope, "neighbourhood:fp16");
    s_lsgd_compare(&o, false);
}

/* Streaming DiLoCo: three fragments syncing at their own steps, exact and
 * compressed (with the neighbourhood's look-ahead), nodes that start apart
 * too. */
static void
test_localsgd_fragments_bits_equal_host(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "", 0.7, 0.9, 3);
    s_lsgd_compare(&o, true);
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 3);
    s_lsgd_compare(&o, true);
    o.ef_alpha = 1.0;
    s_lsgd_compare(&o, false);
}

/* A state saved mid-run on a device instance (anchor, velocity, shift,
 * e_bar and each fragment's error memory through the host) is the host
 * instance's, byte for byte; loaded with the models into fresh instances
 * on the other backend, the run goes on to the same bits. */
static void
s_lsgd_state_moves(struct rumor_gossip_opts o)
{
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool all[S_NODES] = {true, true, true, true};
    for (unsigned frags = 1; frags <= 3; frags += 2) {
        o.fragments = frags;
        /* a, b: the first part on the device, on the host; c, d: fresh
         * instances on the device, on the host, that take b's and a's */
        struct ring a, b, c, d;
        s_lsgd_ring(&a, &o, all, &gossip_backend_ref, false);
        s_lsgd_ring(&b, &o, host, &gossip_backend_ref, false);
        s_lsgd_ring(&c, &o, all, &gossip_backend_ref, true);
        s_lsgd_ring(&d, &o, host, &gossip_backend_ref, true);
        s_lsgd_run(&a, NULL, 0, 8);
        s_lsgd_run(&b, NULL, 0, 8);
        struct rumor_buf sa, sb;
        rumor_buf_init(&sa, RUMOR_GOSSIP_STATE_MAX);
        rumor_buf_init(&sb, RUMOR_GOSSIP_STATE_MAX);
        struct rumor_diag diag = {0};
        size_t bytes = a.numel * sizeof(float);
        for (size_t i = 0; i < S_NODES; i++) {
            rumor_buf_reset(&sa);
            rumor_buf_reset(&sb);
            assert_int_equal(rumor_gossip_state_save(a.g[i], &sa), RUMOR_OK);
            assert_int_equal(rumor_gossip_state_save(b.g[i], &sb), RUMOR_OK);
            assert_int_equal(sa.len, sb.len);
            assert_memory_equal(sa.data, sb.data, sa.len);
            assert_int_equal(
                rumor_gossip_state_load(c.g[i], sb.data, sb.len, &diag),
                RUMOR_OK);
            assert_int_equal(
                rumor_gossip_state_load(d.g[i], sa.data, sa.len, &diag),
                RUMOR_OK);
            assert_memory_equal(a.x[i], b.x[i], bytes);
            memcpy(c.x[i], b.x[i], bytes); /* ref memory is host memory */
            memcpy(d.x[i], a.x[i], bytes);
            rumor_buf_reset(&sa);
            assert_int_equal(rumor_gossip_state_save(c.g[i], &sa), RUMOR_OK);
            assert_memory_equal(sa.data, sb.data, sa.len);
        }
        size_t floats = (size_t)S_LSGD_STEPS * S_NODES * a.numel;
        float *yb = calloc(floats, sizeof(float));
        float *yc = calloc(floats, sizeof(float));
        float *yd = calloc(floats, sizeof(float));
        assert_true(yb && yc && yd);
        s_lsgd_run(&b, yb, 8, S_LSGD_STEPS);
        s_lsgd_run(&c, yc, 8, S_LSGD_STEPS);
        s_lsgd_run(&d, yd, 8, S_LSGD_STEPS);
        assert_memory_equal(yb, yc, floats * sizeof(float));
        assert_memory_equal(yb, yd, floats * sizeof(float));
        free(yb);
        free(yc);
        free(yd);
        rumor_buf_free(&sa);
        rumor_buf_free(&sb);
        s_ring_free(&a);
        s_ring_free(&b);
        s_ring_free(&c);
        s_ring_free(&d);
    }
}

/* SAEF's memory with the look-ahead, and a clipped dgc memory (e and u). */
static void
test_localsgd_state_moves_between_backends(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 3);
    o.ef_alpha = 1.0;
    s_lsgd_state_moves(o);
    s_lsgd_opts(&o, "topk:ratio=0.1", 0.7, 0.9, 3);
    snprintf(o.ef, sizeof o.ef, "dgc:momentum=0.9,clip=0.5");
    s_lsgd_state_moves(o);
}

/* Overlapped DiLoCo as the node runs it (--stale S, docs/gossip.md):
 * the instance's model is a snapshot of the live one taken at each sync
 * step, and the sync's change G - snapshot lands on the live model S
 * steps later while the live model trains on. The live model and the
 * landing are the training's (host arrays here); the instance, on the
 * device or the host, sees only the snapshot. out[node] receives the live
 * models at the end. */
static void
s_lsgd_stale_run(struct ring *r, unsigned stale, float *out)
{
    size_t n = r->numel, bytes = n * sizeof(float);
    float *live = calloc(S_NODES * n, sizeof(float));
    float *snap = malloc(bytes);
    float *land = calloc((size_t)S_LSGD_STEPS * S_NODES * n, sizeof(float));
    assert_true(live && snap && land);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(
            r->mem[i]->copy(live + i * n, r->x[i], bytes, GOSSIP_TO_HOST),
            RUMOR_OK);
    for (uint64_t t = 0; t < S_LSGD_STEPS + stale; t++) {
        for (size_t i = 0; t >= stale && i < S_NODES; i++)
            for (size_t e = 0; e < n; e++)
                live[i * n + e] += land[((t - stale) * S_NODES + i) * n + e];
        if (t >= S_LSGD_STEPS)
            continue;
        for (size_t i = 0; i < S_NODES; i++)
            for (size_t e = 0; e < n; e++)
                live[i * n + e] -= 0.05f * s_value(i, t, e);
        if (!rumor_gossip_exchanges(r->g[0], t))
            continue;
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(
                r->mem[i]->copy(r->x[i], live + i * n, bytes, GOSSIP_TO_DEVICE),
                RUMOR_OK);
        assert_int_equal(rumor_sim_step(r->sim, t), RUMOR_OK);
        for (size_t i = 0; i < S_NODES; i++) {
            float *d = land + (t * S_NODES + i) * n;
            assert_int_equal(
                r->mem[i]->copy(snap, r->x[i], bytes, GOSSIP_TO_HOST),
                RUMOR_OK);
            for (size_t e = 0; e < n; e++)
                d[e] = snap[e] - live[i * n + e];
        }
    }
    memcpy(out, live, S_NODES * bytes);
    free(live);
    free(snap);
    free(land);
}

/* Overlapped DiLoCo (S = 2), exact, and overlapped streaming DiLoCo with
 * compressed deltas: a mixed ring gives the all-host ring's bits, and the
 * sync changed the models. */
static void
test_localsgd_overlapped_bits_equal_host(void **state)
{
    (void)state;
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {false, true, true, false};
    struct rumor_gossip_opts o[2];
    s_lsgd_opts(&o[0], "", 0.7, 0.9, 1);
    s_lsgd_opts(&o[1], "qsgd:bits=4", 0.7, 0.9, 3);
    for (size_t k = 0; k < 2; k++) {
        struct ring a, b;
        s_lsgd_ring(&a, &o[k], host, &gossip_backend_ref, k == 0);
        s_lsgd_ring(&b, &o[k], mixed, &gossip_backend_ref, k == 0);
        size_t floats = S_NODES * a.numel;
        float *ya = malloc(floats * sizeof(float));
        float *yb = malloc(floats * sizeof(float));
        float *y0 = malloc(floats * sizeof(float));
        assert_true(ya && yb && y0);
        s_lsgd_stale_run(&a, 2, ya);
        s_lsgd_stale_run(&b, 2, yb);
        assert_memory_equal(ya, yb, floats * sizeof(float));
        /* without the syncs' landing the models would be y0 */
        for (size_t i = 0; i < S_NODES; i++)
            for (size_t e = 0; e < a.numel; e++) {
                float x = s_value(k == 0 ? i : 0, 1000, e);
                for (uint64_t t = 0; t < S_LSGD_STEPS; t++)
                    x -= 0.05f * s_value(i, t, e);
                y0[i * a.numel + e] = x;
            }
        assert_memory_not_equal(ya, y0, floats * sizeof(float));
        free(ya);
        free(yb);
        free(y0);
        s_ring_free(&a);
        s_ring_free(&b);
    }
}

/* The device's crc32c, per chunk and joined on the host (its twin), is
 * rumor_crc32c's at every length around the chunk's. */
static void
test_crc32c_chunks_join_to_the_whole(void **state)
{
    (void)state;
    const size_t most = 5 * GOSSIP_CRC_CHUNK + 7;
    uint8_t *p = malloc(most);
    assert_non_null(p);
    for (size_t b = 0; b < most; b++)
        p[b] = (uint8_t)(s_value(0, 3, b) * 1000.0f);
    static const size_t lens[] = {0,
                                  1,
                                  9,
                                  GOSSIP_CRC_CHUNK - 1,
                                  GOSSIP_CRC_CHUNK,
                                  GOSSIP_CRC_CHUNK + 1,
                                  3 * GOSSIP_CRC_CHUNK,
                                  5 * GOSSIP_CRC_CHUNK + 7};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        uint32_t crc = 0;
        assert_int_equal(gossip_backend_ref.crc32c(p, lens[k], &crc), RUMOR_OK);
        assert_int_equal(crc, rumor_crc32c(0, p, lens[k]));
    }
    /* "123456789": CRC-32C's check value */
    assert_int_equal(gossip_ref_crc32c("123456789", 9), 0xe3069283u);
    free(p);
}

/* sumsq_add with b NULL (DGC's clip) adds the sum of the squares in
 * double onto the total, on the host and the reference device: 4097^2 =
 * 2^24 + 2^13 + 1 needs 25 bits (a float product would round it), -0
 * adds +0; the same as b all +0. */
static void
test_sumsq_add_without_b_is_the_squares(void **state)
{
    (void)state;
    static const float a[] = {3.0f, -0.0f, 0.5f, -2.0f, 4097.0f};
    static const float zeros[5] = {0};
    /* 1.25 + 9 + 0 + 0.25 + 4 + 16785409 */
    const double want = 16785423.5;
    const struct gossip_backend_i *bes[] = {&gossip_backend_host,
                                            &gossip_backend_ref};
    for (size_t k = 0; k < 2; k++) {
        float *d = NULL, *z = NULL;
        assert_int_equal(bes[k]->alloc(sizeof a, (void **)&d), RUMOR_OK);
        assert_int_equal(bes[k]->alloc(sizeof zeros, (void **)&z), RUMOR_OK);
        assert_int_equal(bes[k]->copy(d, a, sizeof a, GOSSIP_TO_DEVICE),
                         RUMOR_OK);
        double sq = 1.25, sq0 = 1.25;
        assert_int_equal(bes[k]->sumsq_add(d, NULL, 5, &sq), RUMOR_OK);
        assert_true(sq == want);
        assert_int_equal(bes[k]->sumsq_add(d, z, 5, &sq0), RUMOR_OK);
        assert_true(sq0 == want);
        bes[k]->release(d);
        bes[k]->release(z);
    }
}

/* dgc's memory on a device: top-k and DGC's own threshold, with momentum
 * and the outer step, clipped or not, with a warm-up, in one fragment and
 * three, nodes that start apart (a discarded sync restores e and u):
 * bit-equal to the host ring. */
static void
test_localsgd_dgc_bits_equal_host(void **state)
{
    (void)state;
    static const char *const setups[][2] = {
        {"topk:ratio=0.1", "dgc"},
        {"dgc:ratio=0.1", "dgc:0.8"},
        {"topk:ratio=0.1", "dgc:momentum=0.9,clip=0.5"},
        {"dgc:ratio=0.1", "dgc:momentum=0.9,warmup=3"}};
    for (size_t k = 0; k < 4; k++) {
        struct rumor_gossip_opts o;
        s_lsgd_opts(&o, setups[k][0], 0.7, 0.9, 1);
        snprintf(o.ef, sizeof o.ef, "%s", setups[k][1]);
        s_lsgd_compare(&o, false);
        s_lsgd_compare(&o, true);
        o.fragments = 3;
        s_lsgd_compare(&o, false);
    }
}

/* On a GPU: DiLoCo with top-k deltas (exact arithmetic: the device
 * payload is the host's bytes) and SAEF or dgc computes the host's bits
 * with two nodes in CUDA memory; exact averaging too. */
static void
test_cuda_localsgd_mixed_ring(void **state)
{
    (void)state;
    const struct gossip_backend_i *cuda = s_cuda_or_skip();
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool mixed[S_NODES] = {true, true, false, false};
    struct rumor_gossip_opts o[3];
    s_lsgd_opts(&o[0], "", 0.7, 0.9, 3);
    s_lsgd_opts(&o[1], "topk:ratio=0.1", 0.7, 0.9, 1);
    o[1].ef_alpha = 1.0;
    /* dgc without a clip (its sum's order is the kernel's) */
    s_lsgd_opts(&o[2], "topk:ratio=0.1", 0.7, 0.9, 1);
    snprintf(o[2].ef, sizeof o[2].ef, "dgc:0.9");
    for (size_t k = 0; k < 3; k++) {
        struct ring a, b;
        s_lsgd_ring(&a, &o[k], host, &gossip_backend_host, false);
        s_lsgd_ring(&b, &o[k], mixed, cuda, false);
        size_t floats = (size_t)S_LSGD_STEPS * S_NODES * a.numel;
        float *ya = malloc(floats * sizeof(float));
        float *yb = malloc(floats * sizeof(float));
        assert_true(ya && yb);
        s_lsgd_run(&a, ya, 0, S_LSGD_STEPS);
        s_lsgd_run(&b, yb, 0, S_LSGD_STEPS);
        assert_memory_equal(ya, yb, floats * sizeof(float));
        free(ya);
        free(yb);
        s_ring_free(&a);
        s_ring_free(&b);
    }
}

/* The compressed all-reduce with error feedback, or none (ef ""). */
static void
s_codec_opts(struct rumor_gossip_opts *o, const char *codec, const char *ef)
{
    s_choco_opts(o, codec);
    snprintf(o->algo, sizeof o->algo, "allreduce");
    snprintf(o->ef, sizeof o->ef, "%s", ef);
    o->compressed = true;
}

/* The reference of s_run for the compressed all-reduce, from compress/
 * alone: every node's payload per tensor by rumor_ef_encode (or the
 * codec), decoded and summed in node order in double, the mean on every
 * node. */
static void
s_codec_reference(const struct rumor_gossip_opts *o, float *out)
{
    size_t numel = s_numel(), cap = 0;
    rumor_codec *codec = NULL;
    rumor_ef *ef[S_NODES][S_LAYERS] = {{NULL}};
    assert_int_equal(rumor_codec_new(o->codec, &codec, NULL), RUMOR_OK);
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(codec, numel, &cap, &exact),
                     RUMOR_OK);
    for (size_t i = 0; i < S_NODES && o->ef[0] != '\0'; i++)
        for (size_t t = 0; t < S_LAYERS; t++) {
            assert_int_equal(rumor_ef_new(o->ef,
                                          s_shape[t][0] * s_shape[t][1],
                                          &ef[i][t],
                                          NULL),
                             RUMOR_OK);
            /* DGC's clip is per node of the ring */
            assert_int_equal(rumor_ef_set_nodes(ef[i][t], S_NODES), RUMOR_OK);
        }
    uint8_t *buf = malloc(cap);
    float *x = malloc(numel * sizeof(float)), *dec = malloc(numel * 4);
    double *sum = malloc(numel * sizeof(double));
    assert_true(buf && x && dec && sum);
    for (uint64_t step = 0; step < S_STEPS; step++) {
        memset(sum, 0, numel * sizeof(double));
        for (size_t i = 0; i < S_NODES; i++) {
            for (size_t e = 0; e < numel; e++)
                x[e] = s_value(i, step, e);
            for (size_t t = 0, at = 0; t < S_LAYERS; t++) {
                size_t n = s_shape[t][0] * s_shape[t][1], len = 0;
                uint64_t seed = rumor_seed_derive(o->seed, i, t);
                rumor_err rc = ef[i][t] != NULL ? rumor_ef_encode(ef[i][t],
                                                                  codec,
                                                                  x + at,
                                                                  n,
                                                                  seed,
                                                                  step,
                                                                  buf,
                                                                  cap,
                                                                  &len,
                                                                  NULL)
                                                : rumor_codec_encode(codec,
                                                                     x + at,
                                                                     n,
                                                                     seed,
                                                                     step,
                                                                     buf,
                                                                     cap,
                                                                     &len,
                                                                     NULL);
                assert_int_equal(rc, RUMOR_OK);
                assert_int_equal(rumor_codec_decode(codec, buf, len, dec, n),
                                 RUMOR_OK);
                for (size_t e = 0; e < n; e++)
                    sum[at + e] += 1.0 * dec[e];
                at += n;
            }
        }
        for (size_t i = 0; i < S_NODES; i++)
            for (size_t e = 0; e < numel; e++)
                out[(step * S_NODES + i) * numel + e] =
                    (float)(sum[e] / S_NODES);
    }
    for (size_t i = 0; i < S_NODES; i++)
        for (size_t t = 0; t < S_LAYERS; t++)
            rumor_ef_destroy(&ef[i][t]);
    rumor_codec_destroy(&codec);
    free(buf);
    free(x);
    free(dec);
    free(sum);
}

/* Payload bytes of one node's step (a codec of exact sizes). */
static uint64_t
s_codec_payload(const char *spec)
{
    rumor_codec *codec = NULL;
    assert_int_equal(rumor_codec_new(spec, &codec, NULL), RUMOR_OK);
    uint64_t total = 0;
    for (size_t t = 0; t < S_LAYERS; t++) {
        size_t bytes = 0;
        bool exact = false;
        assert_int_equal(rumor_codec_encoded_size(codec,
                                                  s_shape[t][0] * s_shape[t][1],
                                                  &bytes,
                                                  &exact),
                         RUMOR_OK);
        assert_true(exact);
        total += bytes;
    }
    rumor_codec_destroy(&codec);
    return total;
}

/* The compressed all-reduce where the model is: QSGD (stochastic) with
 * ef, without a memory, and top-k with ef-decay, in rings of ref nodes
 * and rings mixing them with host nodes, bit-equal to the all-host ring
 * and to compress/'s own error feedback; only payloads cross: a device
 * node's own down once, and every node's up once (its own twice with a
 * memory: C(p) is decoded from the bytes sent). */
static void
test_allreduce_codec_bits_equal_host(void **state)
{
    (void)state;
    static const char *const setups[][2] = {{"qsgd:bits=4", "ef"},
                                            {"qsgd:bits=4", ""},
                                            {"topk:ratio=0.1", "ef-decay:0.7"}};
    static const bool all[S_NODES] = {true, true, true, true};
    static const bool mixed[S_NODES] = {true, false, true, false};
    size_t floats = (size_t)S_STEPS * S_NODES * s_numel();
    float *want = malloc(floats * sizeof(float));
    float *y = malloc(floats * sizeof(float));
    assert_true(want && y);
    for (size_t k = 0; k < 3; k++) {
        struct rumor_gossip_opts o;
        s_codec_opts(&o, setups[k][0], setups[k][1]);
        s_compare(&o, all);
        s_compare(&o, mixed);
        s_codec_reference(&o, want);
        struct ring r;
        s_ring_new(&r, &o, mixed);
        s_run(&r, y);
        assert_memory_equal(want, y, floats * sizeof(float));
        uint64_t h2d = 0, d2h = 0;
        rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
        if (k < 2) {
            uint64_t p = s_codec_payload(setups[k][0]);
            uint64_t ups = S_NODES + (setups[k][1][0] != '\0');
            assert_int_equal(d2h, S_STEPS * p);
            assert_int_equal(h2d, S_STEPS * ups * p);
        }
        assert_true(d2h > 0 && d2h < (uint64_t)S_STEPS * 4 * r.numel / 4);
        rumor_gossip_pcie_bytes(r.g[1], &h2d, &d2h);
        assert_int_equal(h2d + d2h, 0);
        s_ring_free(&r);
    }
    free(want);
    free(y);
}

/* One vector of S_BIG values per node (device[i]: node i's in dev
 * memory), over two 16384-value samples and a tail, so fp8 / fp4
 * bias=real's encoder checks its real b on all of x (on a GPU, a piece
 * per thread). S_STEPS steps of o; out[step][node] receives each node's
 * vector. */
#define S_BIG 40000
static void
s_big_run(const struct rumor_gossip_opts *o,
          const bool device[S_NODES],
          const struct gossip_backend_i *dev,
          float *out)
{
    struct rumor_diag diag = {0};
    rumor_topology *topo = NULL;
    rumor_gossip *g[S_NODES] = {NULL};
    const struct gossip_backend_i *mem[S_NODES];
    float *x[S_NODES], *in = malloc(S_BIG * sizeof *in);
    rumor_sim *sim = NULL;
    assert_non_null(in);
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &topo, &diag),
                     RUMOR_OK);
    for (size_t i = 0; i < S_NODES; i++) {
        mem[i] = device[i] ? dev : &gossip_backend_host;
        assert_int_equal(mem[i]->alloc(S_BIG * sizeof(float), (void **)&x[i]),
                         RUMOR_OK);
        struct rumor_tensor t = {x[i], 1, {S_BIG}};
        struct rumor_model m = {&t, 1};
        assert_int_equal(
            gossip_new_in(o, topo, (uint32_t)i, &m, mem[i], &g[i], &diag),
            RUMOR_OK);
    }
    assert_int_equal(rumor_sim_new(g, S_NODES, &sim), RUMOR_OK);
    for (uint64_t step = 0; step < S_STEPS; step++) {
        for (size_t i = 0; i < S_NODES; i++) {
            for (size_t e = 0; e < S_BIG; e++)
                in[e] = s_value(i, step, e);
            assert_int_equal(
                mem[i]->copy(x[i], in, S_BIG * sizeof(float), GOSSIP_TO_DEVICE),
                RUMOR_OK);
        }
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(mem[i]->copy(out + (step * S_NODES + i) * S_BIG,
                                          x[i],
                                          S_BIG * sizeof(float),
                                          GOSSIP_TO_HOST),
                             RUMOR_OK);
    }
    rumor_sim_destroy(&sim);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_gossip_destroy(&g[i]);
        mem[i]->release(x[i]);
    }
    rumor_topology_destroy(&topo);
    free(in);
}

/* CHOCO and the compressed all-reduce with error feedback under fp8 and
 * fp4 bias=real, S_BIG values a node, on a ring whose device[] nodes
 * keep their model in dev memory: bit-equal to the all-host ring. */
static void
s_big_compare(const bool device[S_NODES], const struct gossip_backend_i *dev)
{
    static const char *const codecs[] = {"fp8:bias=real", "fp4:bias=real"};
    static const bool host[S_NODES] = {false, false, false, false};
    size_t floats = (size_t)S_STEPS * S_NODES * S_BIG;
    float *ya = malloc(floats * sizeof(float));
    float *yb = malloc(floats * sizeof(float));
    assert_true(ya && yb);
    for (size_t c = 0; c < 2; c++)
        for (int ar = 0; ar < 2; ar++) {
            struct rumor_gossip_opts o;
            if (ar)
                s_codec_opts(&o, codecs[c], "ef");
            else
                s_choco_opts(&o, codecs[c]);
            s_big_run(&o, host, &gossip_backend_host, ya);
            s_big_run(&o, device, dev, yb);
            if (memcmp(ya, yb, floats * sizeof(float)) != 0)
                fail_msg("%s %s on %s: the mixed ring is not the host's",
                         o.algo,
                         codecs[c],
                         dev->name);
            assert_true(ya[0] != s_value(0, 0, 0));
        }
    free(ya);
    free(yb);
}

/* fp8 / fp4 with bias=real where the model is (it was refused on a device
 * before): CHOCO and the compressed all-reduce on the small model and on
 * S_BIG values, reference-device nodes mixed with host ones, bit-equal to
 * the all-host ring. (The reference backend encodes with the CPU codec;
 * the device assembly of bias=real is test_codec_device_ref.c's part.) */
static void
test_fp8_real_bias_bits_equal_host(void **state)
{
    (void)state;
    static const bool mixed[S_NODES] = {true, false, true, true};
    struct rumor_gossip_opts o;
    s_choco_opts(&o, "fp8:bias=real");
    s_compare(&o, mixed);
    s_codec_opts(&o, "fp4:bias=real", "ef");
    s_compare(&o, mixed);
    s_big_compare(mixed, &gossip_backend_ref);
}

/* On a GPU: the same with two nodes in CUDA memory, whose encoders run
 * bias=real's check on all of x as one kernel thread per piece. */
static void
test_cuda_fp8_real_bias_mixed_ring(void **state)
{
    (void)state;
    static const bool mixed[S_NODES] = {true, true, false, false};
    s_big_compare(mixed, s_cuda_or_skip());
}

/* The error memories go through the host at save and load: the same
 * record as a host node's, and it moves between backends. */
static void
test_allreduce_codec_state_moves_between_backends(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_codec_opts(&o, "qsgd:bits=4", "ef-decay:0.7");
    s_state_moves(&o);
    static const bool host[S_NODES] = {false, false, false, false};
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring a, b;
    s_ring_new(&a, &o, all);
    s_ring_new(&b, &o, host);
    size_t floats = (size_t)S_STEPS * S_NODES * a.numel;
    float *y = malloc(floats * sizeof(float));
    assert_non_null(y);
    s_run(&a, y);
    s_run(&b, y);
    struct rumor_buf sa, sb;
    rumor_buf_init(&sa, RUMOR_GOSSIP_STATE_MAX);
    rumor_buf_init(&sb, RUMOR_GOSSIP_STATE_MAX);
    assert_int_equal(rumor_gossip_state_save(a.g[2], &sa), RUMOR_OK);
    assert_int_equal(rumor_gossip_state_save(b.g[2], &sb), RUMOR_OK);
    assert_int_equal(sa.len, sb.len);
    assert_true(sa.len > 4 * a.numel); /* the residuals are in it */
    assert_memory_equal(sa.data, sb.data, sa.len);
    rumor_buf_free(&sa);
    rumor_buf_free(&sb);
    free(y);
    s_ring_free(&a);
    s_ring_free(&b);
}

/* DGC's memory where the model is: top-k, random-k and DGC's own sampled
 * threshold, with momentum, with the clip (active: the values' norm is
 * far above clip / sqrt 4) and DGC's warm-up (the memory's counts,
 * encode_k), in rings of ref nodes and rings mixing them
 * with host nodes, bit-equal to the all-host ring and to compress/'s own
 * memory. Only payloads and the sent indices cross: over the all-ref
 * ring, every node's payload up to every node and its own once more,
 * plus 4 bytes an index sent (k of each tensor: 205 + 52 + 4 at ratio
 * 0.1; DGC's threshold sends between half and twice that). */
static void
test_allreduce_dgc_bits_equal_host(void **state)
{
    (void)state;
    static const char *const setups[][2] = {
        {"topk:ratio=0.1", "dgc:momentum=0.9"},
        {"topk:ratio=0.1", "dgc:momentum=0.8,clip=0.5"},
        {"dgc:ratio=0.1", "dgc:0.9,2"},
        {"randk:ratio=0.1", "dgc"},
        {"dgc:ratio=0.1", "dgc:momentum=0.9,clip=2,warmup=3"}};
    static const bool all[S_NODES] = {true, true, true, true};
    static const bool mixed[S_NODES] = {false, true, true, false};
    size_t floats = (size_t)S_STEPS * S_NODES * s_numel();
    float *want = malloc(floats * sizeof(float));
    float *y = malloc(floats * sizeof(float));
    assert_true(want && y);
    for (size_t k = 0; k < 5; k++) {
        struct rumor_gossip_opts o;
        s_codec_opts(&o, setups[k][0], setups[k][1]);
        s_compare(&o, mixed);
        s_codec_reference(&o, want);
        struct ring r;
        s_ring_new(&r, &o, all);
        s_run(&r, y);
        assert_memory_equal(want, y, floats * sizeof(float));
        uint64_t h2d_all = 0, d2h_all = 0;
        for (size_t i = 0; i < S_NODES; i++) {
            uint64_t h2d = 0, d2h = 0;
            rumor_gossip_pcie_bytes(r.g[i], &h2d, &d2h);
            h2d_all += h2d;
            d2h_all += d2h;
        }
        assert_true(d2h_all > 0);
        uint64_t idx = h2d_all - (S_NODES + 1) * d2h_all;
        if (k < 2 || k == 3) /* DGC's sampled threshold sends about k */
            assert_int_equal(idx, S_NODES * S_STEPS * 4 * (205 + 52 + 4));
        assert_true(idx % 4 == 0 && idx > S_NODES * S_STEPS * 2 * 261);
        /* the warm-up sends more: 25 % of the values at step 0 */
        assert_true(k == 4 || idx < S_NODES * S_STEPS * 8 * 261);
        s_ring_free(&r);
    }
    free(want);
    free(y);
}

/* One node's scalers of tensor t at a step (after its memory's
 * correction), into s. */
static void
s_share_own(rumor_ef *ef,
            const rumor_codec *codec,
            const float *x,
            size_t n,
            float *p,
            float *s)
{
    if (ef != NULL)
        assert_int_equal(rumor_ef_corrected(ef, x, n, p), RUMOR_OK);
    assert_int_equal(rumor_codec_scalers(codec, ef != NULL ? p : x, n, s),
                     RUMOR_OK);
}

/* The reference of s_run for TernGrad's scaler sharing, from compress/
 * alone: per tensor the max over nodes of each node's scalers, every
 * node's payload at those (rumor_ef_encode_shared or the codec's), decoded
 * and summed in node order in double, the mean on every node. */
static void
s_share_reference(const struct rumor_gossip_opts *o, float *out)
{
    size_t numel = s_numel(), cap = 0;
    rumor_codec *codec = NULL;
    rumor_ef *ef[S_NODES][S_LAYERS] = {{NULL}};
    assert_int_equal(rumor_codec_new(o->codec, &codec, NULL), RUMOR_OK);
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(codec, numel, &cap, &exact),
                     RUMOR_OK);
    for (size_t i = 0; i < S_NODES && o->ef[0] != '\0'; i++)
        for (size_t t = 0; t < S_LAYERS; t++)
            assert_int_equal(rumor_ef_new(o->ef,
                                          s_shape[t][0] * s_shape[t][1],
                                          &ef[i][t],
                                          NULL),
                             RUMOR_OK);
    uint8_t *buf = malloc(cap);
    float *x = malloc(S_NODES * numel * sizeof(float)),
          *dec = malloc(numel * 4);
    float *p = malloc(numel * 4), *mine = malloc(numel * 4),
          *agreed = malloc(numel * 4);
    double *sum = malloc(numel * sizeof(double));
    assert_true(buf && x && dec && p && mine && agreed && sum);
    for (uint64_t step = 0; step < S_STEPS; step++) {
        memset(sum, 0, numel * sizeof(double));
        for (size_t i = 0; i < S_NODES; i++)
            for (size_t e = 0; e < numel; e++)
                x[i * numel + e] = s_value(i, step, e);
        for (size_t t = 0, at = 0; t < S_LAYERS; t++) {
            size_t n = s_shape[t][0] * s_shape[t][1];
            size_t ns = rumor_codec_scaler_count(codec, n);
            for (size_t i = 0; i < S_NODES; i++) {
                s_share_own(ef[i][t], codec, x + i * numel + at, n, p, mine);
                for (size_t k = 0; k < ns; k++)
                    agreed[k] = i == 0 ? mine[k] : fmaxf(agreed[k], mine[k]);
            }
            for (size_t i = 0; i < S_NODES; i++) {
                size_t len = 0;
                uint64_t seed = rumor_seed_derive(o->seed, i, t);
                const float *xi = x + i * numel + at;
                rumor_err rc = ef[i][t] != NULL
                                   ? rumor_ef_encode_shared(ef[i][t],
                                                            codec,
                                                            xi,
                                                            n,
                                                            agreed,
                                                            seed,
                                                            step,
                                                            buf,
                                                            cap,
                                                            &len,
                                                            NULL)
                                   : rumor_codec_encode_shared(codec,
                                                               xi,
                                                               n,
                                                               agreed,
                                                               seed,
                                                               step,
                                                               buf,
                                                               cap,
                                                               &len,
                                                               NULL);
                assert_int_equal(rc, RUMOR_OK);
                assert_int_equal(rumor_codec_decode(codec, buf, len, dec, n),
                                 RUMOR_OK);
                for (size_t e = 0; e < n; e++)
                    sum[at + e] += 1.0 * dec[e];
            }
            at += n;
        }
        for (size_t i = 0; i < S_NODES; i++)
            for (size_t e = 0; e < numel; e++)
                out[(step * S_NODES + i) * numel + e] =
                    (float)(sum[e] / S_NODES);
    }
    for (size_t i = 0; i < S_NODES; i++)
        for (size_t t = 0; t < S_LAYERS; t++)
            rumor_ef_destroy(&ef[i][t]);
    rumor_codec_destroy(&codec);
    free(buf);
    free(x);
    free(dec);
    free(p);
    free(mine);
    free(agreed);
    free(sum);
}

/* TernGrad's scaler sharing where the model is, with and without a
 * memory (and with the clip): rings of ref nodes and mixed rings
 * bit-equal to the all-host ring and to compress/'s own sharing; a device
 * node's scalers cross PCIe as the message, 4 bytes a bucket each way. */
static void
test_allreduce_codec_terngrad_share_bits_equal_host(void **state)
{
    (void)state;
    static const char *const setups[][2] = {
        {"terngrad:share=1,bucket=16", ""},
        {"terngrad:share=1,bucket=16", "ef"},
        {"terngrad:share=1,bucket=16,clip=1.5", "ef-decay:0.7"}};
    static const bool all[S_NODES] = {true, true, true, true};
    static const bool mixed[S_NODES] = {true, false, true, false};
    size_t floats = (size_t)S_STEPS * S_NODES * s_numel();
    float *want = malloc(floats * sizeof(float));
    float *y = malloc(floats * sizeof(float));
    assert_true(want && y);
    rumor_codec *codec = NULL;
    assert_int_equal(rumor_codec_new(setups[0][0], &codec, NULL), RUMOR_OK);
    uint64_t scalers = 0;
    for (size_t t = 0; t < S_LAYERS; t++)
        scalers +=
            4 * rumor_codec_scaler_count(codec, s_shape[t][0] * s_shape[t][1]);
    rumor_codec_destroy(&codec);
    for (size_t k = 0; k < 3; k++) {
        struct rumor_gossip_opts o;
        s_codec_opts(&o, setups[k][0], setups[k][1]);
        s_compare(&o, all);
        s_compare(&o, mixed);
        s_share_reference(&o, want);
        struct ring r;
        s_ring_new(&r, &o, mixed);
        s_run(&r, y);
        assert_memory_equal(want, y, floats * sizeof(float));
        uint64_t h2d = 0, d2h = 0, p = s_codec_payload(setups[k][0]);
        uint64_t ups = S_NODES + (setups[k][1][0] != '\0');
        rumor_gossip_pcie_bytes(r.g[0], &h2d, &d2h);
        assert_int_equal(d2h, S_STEPS * (p + scalers));
        assert_int_equal(h2d, S_STEPS * (ups * p + scalers));
        rumor_gossip_pcie_bytes(r.g[1], &h2d, &d2h);
        assert_int_equal(h2d + d2h, 0);
        s_ring_free(&r);
    }
    free(want);
    free(y);
}

/* On a GPU: the compressed all-reduce with QSGD, top-k and TernGrad with
 * shared scalers, error feedback (ef, ef-decay, dgc) on the device,
 * computes the host's bits in a mixed ring (the device codecs write the
 * host's bytes); a GPU node copies its payload down and every node's up,
 * its own twice. */
static void
test_cuda_allreduce_codec_mixed_ring(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_codec_opts(&o, "qsgd:bits=4", "ef");
    struct ring b;
    assert_true(s_cuda_mixed(&o, &b) == 0);
    uint64_t p = s_codec_payload("qsgd:bits=4"), h2d = 0, d2h = 0;
    rumor_gossip_pcie_bytes(b.g[0], &h2d, &d2h);
    assert_int_equal(d2h, S_STEPS * p);
    assert_int_equal(h2d, S_STEPS * (S_NODES + 1) * p);
    s_ring_free(&b);
    s_codec_opts(&o, "topk:ratio=0.1", "ef-decay:0.7");
    assert_true(s_cuda_mixed(&o, &b) == 0);
    s_ring_free(&b);
    /* TernGrad's scaler sharing: scalers down, agreed ones up */
    s_codec_opts(&o, "terngrad:share=1,bucket=16,clip=1.5", "ef");
    assert_true(s_cuda_mixed(&o, &b) == 0);
    s_ring_free(&b);
    /* DGC's memory without a clip (the clip's sum is a reduction in the
     * kernel's order: its scale may differ in the last bit) */
    s_codec_opts(&o, "topk:ratio=0.1", "dgc:momentum=0.9");
    assert_true(s_cuda_mixed(&o, &b) == 0);
    s_ring_free(&b);
    /* the lossless huffman has no device code: refused, with the reason */
    s_codec_opts(&o, "huffman", "ef");
    float *x = NULL;
    const struct gossip_backend_i *cuda = s_cuda_or_skip();
    assert_int_equal(cuda->alloc(64 * sizeof(float), (void **)&x), RUMOR_OK);
    struct rumor_tensor t = {x, 1, {64}};
    struct rumor_model m = {&t, 1};
    struct rumor_diag diag = {0};
    rumor_topology *topo = NULL;
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &topo, &diag),
                     RUMOR_OK);
    rumor_gossip *g = NULL;
    assert_int_equal(gossip_new_in(&o, topo, 0, &m, cuda, &g, &diag),
                     RUMOR_ENOTSUP);
    assert_non_null(strstr(diag.msg, "has no device path"));
    rumor_topology_destroy(&topo);
    cuda->release(x);
}

/* --- messages handed over as they are made (rumor_gossip_emit_each) ---
 * The node's driver queues each message to the transport when the
 * instance hands it over; the bytes the instance had copied to the host
 * at each handing say whether message k went before k + 1's copy. */
#define S_HANDS 8

struct s_hands {
    const rumor_gossip *g;
    size_t n;
    struct rumor_gossip_msg m[S_HANDS];
    uint64_t d2h[S_HANDS]; /* copied to the host when m[k] was handed */
    size_t made[S_HANDS];  /* messages the instance had made by then */
};

static void
s_hand(void *arg, const struct rumor_gossip_msg *m)
{
    struct s_hands *h = arg;
    assert_true(h->n < S_HANDS);
    uint64_t h2d = 0;
    rumor_gossip_pcie_bytes(h->g, &h2d, &h->d2h[h->n]);
    h->made[h->n] = h->g->out_count;
    h->m[h->n++] = *m;
}

static void
s_ring_fill(struct ring *r)
{
    float *in = malloc(r->numel * sizeof(float));
    assert_non_null(in);
    for (size_t i = 0; i < S_NODES; i++) {
        for (size_t e = 0; e < r->numel; e++)
            in[e] = s_value(i, 0, e);
        assert_int_equal(r->mem[i]->copy(r->x[i],
                                         in,
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_DEVICE),
                         RUMOR_OK);
    }
    free(in);
}

/* Node 0 on the reference device emits step 0 through emit_each: every
 * message is handed once, in order, with the host emit's bytes; per_edge
 * (an algorithm that makes a message per neighbour): each is handed
 * before the next one is made, and, copied (its payload's copy to the
 * host is counted here; PowerGossip's edge products run on the host's
 * low-rank backend for this device), before the next one's payload is
 * copied, nothing being copied after the last; otherwise all are handed
 * when the emit ends. */
static void
s_emit_order(const struct rumor_gossip_opts *o, bool per_edge, bool copied)
{
    const bool dev[S_NODES] = {true, true, true, true};
    const bool host[S_NODES] = {false, false, false, false};
    struct ring d, h;
    s_ring_new(&d, o, dev);
    s_ring_new(&h, o, host);
    s_ring_fill(&d);
    s_ring_fill(&h);
    struct s_hands got = {.g = d.g[0]};
    uint64_t h2d = 0, before = 0, after = 0;
    rumor_gossip_pcie_bytes(d.g[0], &h2d, &before);
    const struct rumor_gossip_msg *msgs = NULL, *want = NULL;
    size_t count = 0, want_count = 0;
    assert_int_equal(
        rumor_gossip_emit_each(d.g[0], 0, 0, s_hand, &got, &msgs, &count),
        RUMOR_OK);
    rumor_gossip_pcie_bytes(d.g[0], &h2d, &after);
    assert_int_equal(count, 2); /* ring:4: two neighbours */
    assert_int_equal(got.n, count);
    assert_int_equal(rumor_gossip_emit(h.g[0], 0, 0, &want, &want_count),
                     RUMOR_OK);
    assert_int_equal(want_count, count);
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(got.m[k].peer, msgs[k].peer);
        assert_ptr_equal(got.m[k].data, msgs[k].data);
        assert_int_equal(got.m[k].len, msgs[k].len);
        assert_int_equal(msgs[k].peer, want[k].peer);
        assert_int_equal(msgs[k].len, want[k].len);
        assert_memory_equal(msgs[k].data, want[k].data, want[k].len);
    }
    assert_true(after > before); /* the payloads came from the device */
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(got.made[k], per_edge ? k + 1 : count);
        if (!per_edge)
            assert_true(got.d2h[k] == after);
        else if (copied && k + 1 < count)
            assert_true(got.d2h[k] < got.d2h[k + 1]);
    }
    if (per_edge && copied)
        assert_true(got.d2h[0] > before && got.d2h[count - 1] == after);
    s_ring_free(&d);
    s_ring_free(&h);
}

static void
test_choco_hands_each_message_before_the_next_copy(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_choco_opts(&o, "topk:ratio=0.1");
    s_emit_order(&o, true, true);
    s_choco_opts(&o, "qsgd:bits=4");
    s_emit_order(&o, true, true);
    snprintf(o.adapt, sizeof o.adapt, "fixed"); /* adapt_choco.c */
    o.gamma = 0.5;
    o.comm_share = 0.3;
    s_emit_order(&o, true, true);
}

static void
test_dpsgd_hands_its_messages_when_the_emit_ends(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 0);
    s_emit_order(&o, false, true);
}

static void
test_powergossip_hands_each_message_before_the_next_product(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_powergossip_opts(&o, 0);
    s_emit_order(&o, true, false);
}

/* Node i's inputs of step written into its model (not counted: the
 * training's own). */
static void
s_feed(struct ring *r, uint64_t step, float *in)
{
    for (size_t i = 0; i < S_NODES; i++) {
        for (size_t e = 0; e < r->numel; e++)
            in[e] = s_value(i, step, e);
        assert_int_equal(r->mem[i]->copy(r->x[i],
                                         in,
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_DEVICE),
                         RUMOR_OK);
    }
}

/* Every node's model after step (the test's copies, not counted). */
static void
s_take(struct ring *r, uint64_t step, float *in, float *out)
{
    s_feed(r, step, in);
    assert_int_equal(rumor_sim_step(r->sim, step), RUMOR_OK);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(r->mem[i]->copy(out + i * r->numel,
                                         r->x[i],
                                         r->numel * sizeof(float),
                                         GOSSIP_TO_HOST),
                         RUMOR_OK);
}

/* An elastic ring's snapshot on the reference device: taking it and going
 * back to it copy nothing to or from the host; its bytes (saved after a
 * step, and mid-step) are state_save's at the boundary; after going back
 * to it (from mid-step), the steps run again give the bits and the state
 * of the first run. */
static void
s_snapshot_check(const struct rumor_gossip_opts *o, uint64_t boundary)
{
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring r;
    s_ring_new(&r, o, all);
    float *in = malloc(r.numel * sizeof(float));
    size_t floats = 2 * S_NODES * r.numel;
    float *first = malloc(floats * sizeof(float));
    float *again = malloc(floats * sizeof(float));
    assert_true(in && first && again);
    for (uint64_t step = 0; step < boundary; step++)
        s_take(&r, step, in, first);
    rumor_buf want[S_NODES], after[S_NODES], got;
    rumor_buf_init(&got, RUMOR_GOSSIP_STATE_MAX);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_init(&want[i], RUMOR_GOSSIP_STATE_MAX);
        rumor_buf_init(&after[i], RUMOR_GOSSIP_STATE_MAX);
        assert_int_equal(rumor_gossip_state_save(r.g[i], &want[i]), RUMOR_OK);
        assert_int_equal(rumor_gossip_snapshot(r.g[i]), RUMOR_OK);
    }
    s_take(&r, boundary, in, first);
    s_take(&r, boundary + 1, in, first + S_NODES * r.numel);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(rumor_gossip_state_save(r.g[i], &after[i]), RUMOR_OK);
    /* mid-step: node 0 emitted the next step's first round */
    s_feed(&r, boundary + 2, in);
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0;
    assert_int_equal(rumor_gossip_emit(r.g[0], boundary + 2, 0, &msgs, &count),
                     RUMOR_OK);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_reset(&got);
        assert_int_equal(rumor_gossip_snapshot_save(r.g[i], &got), RUMOR_OK);
        assert_int_equal(got.len, want[i].len);
        assert_memory_equal(got.data, want[i].data, got.len);
        assert_int_equal(rumor_gossip_snapshot_restore(r.g[i]), RUMOR_OK);
        rumor_buf_reset(&got);
        assert_int_equal(rumor_gossip_state_save(r.g[i], &got), RUMOR_OK);
        assert_int_equal(got.len, want[i].len);
        assert_memory_equal(got.data, want[i].data, got.len);
        /* going back to the snapshot and taking it move nothing */
        uint64_t up = 0, down = 0, up2 = 0, down2 = 0;
        rumor_gossip_pcie_bytes(r.g[i], &up, &down);
        assert_int_equal(rumor_gossip_snapshot_restore(r.g[i]), RUMOR_OK);
        assert_int_equal(rumor_gossip_snapshot(r.g[i]), RUMOR_OK);
        rumor_gossip_pcie_bytes(r.g[i], &up2, &down2);
        assert_int_equal(up2, up);
        assert_int_equal(down2, down);
    }
    s_take(&r, boundary, in, again);
    s_take(&r, boundary + 1, in, again + S_NODES * r.numel);
    assert_memory_equal(again, first, floats * sizeof(float));
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_reset(&got);
        assert_int_equal(rumor_gossip_state_save(r.g[i], &got), RUMOR_OK);
        assert_int_equal(got.len, after[i].len);
        assert_memory_equal(got.data, after[i].data, got.len);
        rumor_buf_free(&want[i]);
        rumor_buf_free(&after[i]);
    }
    rumor_buf_free(&got);
    free(in);
    free(first);
    free(again);
    s_ring_free(&r);
}

/* Taking the snapshot copies nothing to the host: the counts of a step
 * run with one taken before it are those of the step without. */
static void
s_snapshot_no_pcie(const struct rumor_gossip_opts *o)
{
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring a, b;
    s_ring_new(&a, o, all);
    s_ring_new(&b, o, all);
    float *in = malloc(a.numel * sizeof(float));
    float *out = malloc(S_NODES * a.numel * sizeof(float));
    assert_true(in && out);
    for (uint64_t step = 0; step < 4; step++) {
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(rumor_gossip_snapshot(b.g[i]), RUMOR_OK);
        s_take(&a, step, in, out);
        s_take(&b, step, in, out);
    }
    for (size_t i = 0; i < S_NODES; i++) {
        uint64_t ua = 0, da = 0, ub = 0, db = 0;
        rumor_gossip_pcie_bytes(a.g[i], &ua, &da);
        rumor_gossip_pcie_bytes(b.g[i], &ub, &db);
        assert_int_equal(ub, ua);
        assert_int_equal(db, da);
    }
    free(in);
    free(out);
    s_ring_free(&a);
    s_ring_free(&b);
}

static void
test_allreduce_codec_snapshot_on_device(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_codec_opts(&o, "qsgd:bits=4", "ef");
    s_snapshot_check(&o, 2);
    s_snapshot_no_pcie(&o);
    s_codec_opts(&o, "topk:ratio=0.1", "ef-decay:0.7");
    s_snapshot_check(&o, 1);
}

/* A clipped DGC memory's state (e and u) saved on a device loads into a
 * host node and back, the same record as a host node's; a snapshot
 * restores both vectors. */
static void
test_allreduce_dgc_state_on_device(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_codec_opts(&o, "topk:ratio=0.1", "dgc:momentum=0.9,clip=0.5");
    s_state_moves(&o);
    s_snapshot_check(&o, 1);
    s_snapshot_check(&o, 2);
}

static void
test_powersgd_snapshot_on_device(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 0, false);
    s_snapshot_check(&o, 2);
    s_snapshot_no_pcie(&o);
    s_opts(&o, 1, true);
    s_snapshot_check(&o, 0);
    s_snapshot_check(&o, 2);
}

static void
test_allreduce_snapshot_is_empty(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_dpsgd_opts(&o, 0);
    snprintf(o.algo, sizeof o.algo, "allreduce");
    s_snapshot_check(&o, 1);
}

/* Every node's model to (put) or from the test's host copies. */
static void
s_models(struct ring *r, float *host, bool put)
{
    size_t bytes = r->numel * sizeof(float);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(put ? r->mem[i]->copy(r->x[i],
                                               host + i * r->numel,
                                               bytes,
                                               GOSSIP_TO_DEVICE)
                             : r->mem[i]->copy(host + i * r->numel,
                                               r->x[i],
                                               bytes,
                                               GOSSIP_TO_HOST),
                         RUMOR_OK);
}

/* Every node's state is want's (state_save, or snapshot_save). */
static void
s_states_are(struct ring *r, rumor_buf *want, bool snap)
{
    rumor_buf got;
    rumor_buf_init(&got, RUMOR_GOSSIP_STATE_MAX);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_reset(&got);
        assert_int_equal(snap ? rumor_gossip_snapshot_save(r->g[i], &got)
                              : rumor_gossip_state_save(r->g[i], &got),
                         RUMOR_OK);
        assert_int_equal(got.len, want[i].len);
        assert_memory_equal(got.data, want[i].data, got.len);
    }
    rumor_buf_free(&got);
}

/* Local SGD's snapshot on the reference device, across syncs of every
 * fragment: its bytes after the steps and mid-step (a look-ahead applied,
 * a sync's first round emitted) are state_save's at the boundary; back
 * to it (with the models, which are the caller's), the steps run again to
 * the same bits and state; and taking one at every step moves nothing
 * to or from the host. */
static void
s_lsgd_snapshot_check(const struct rumor_gossip_opts *o, uint64_t boundary)
{
    static const bool all[S_NODES] = {true, true, true, true};
    const uint64_t span = 2 * o->period;
    struct ring r, plain;
    s_lsgd_ring(&r, o, all, &gossip_backend_ref, false);
    s_lsgd_ring(&plain, o, all, &gossip_backend_ref, false);
    size_t floats = (size_t)(boundary + span + 1) * S_NODES * r.numel;
    float *first = calloc(floats, sizeof(float));
    float *again = calloc(floats, sizeof(float));
    float *x0 = malloc(S_NODES * r.numel * sizeof(float));
    assert_true(first && again && x0);
    for (uint64_t t = 0; t < boundary; t++) {
        for (size_t i = 0; i < S_NODES; i++)
            assert_int_equal(rumor_gossip_snapshot(r.g[i]), RUMOR_OK);
        s_lsgd_run(&r, first, t, t + 1);
        s_lsgd_run(&plain, NULL, t, t + 1);
    }
    for (size_t i = 0; i < S_NODES; i++) {
        uint64_t ua = 0, da = 0, ub = 0, db = 0;
        rumor_gossip_pcie_bytes(r.g[i], &ua, &da);
        rumor_gossip_pcie_bytes(plain.g[i], &ub, &db);
        assert_int_equal(ua, ub);
        assert_int_equal(da, db);
    }
    rumor_buf want[S_NODES], after[S_NODES];
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_init(&want[i], RUMOR_GOSSIP_STATE_MAX);
        rumor_buf_init(&after[i], RUMOR_GOSSIP_STATE_MAX);
        assert_int_equal(rumor_gossip_state_save(r.g[i], &want[i]), RUMOR_OK);
        assert_int_equal(rumor_gossip_snapshot(r.g[i]), RUMOR_OK);
    }
    s_models(&r, x0, false);
    s_lsgd_run(&r, first, boundary, boundary + span);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(rumor_gossip_state_save(r.g[i], &after[i]), RUMOR_OK);
    s_states_are(&r, want, true);
    /* mid-step: the next sync's look-ahead and first round on node 0 */
    uint64_t t = boundary + span;
    while (!rumor_gossip_exchanges(r.g[0], t))
        t++;
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0;
    assert_int_equal(rumor_gossip_step_ahead(r.g[0]), RUMOR_OK);
    assert_int_equal(rumor_gossip_emit(r.g[0], t, 0, &msgs, &count), RUMOR_OK);
    s_states_are(&r, want, true);
    for (size_t i = 0; i < S_NODES; i++)
        assert_int_equal(rumor_gossip_snapshot_restore(r.g[i]), RUMOR_OK);
    s_states_are(&r, want, false);
    s_models(&r, x0, true);
    s_lsgd_run(&r, again, boundary, boundary + span);
    size_t from = (size_t)boundary * S_NODES * r.numel;
    assert_memory_equal(again + from,
                        first + from,
                        (size_t)span * S_NODES * r.numel * sizeof(float));
    s_states_are(&r, after, false);
    for (size_t i = 0; i < S_NODES; i++) {
        rumor_buf_free(&want[i]);
        rumor_buf_free(&after[i]);
    }
    free(first);
    free(again);
    free(x0);
    s_ring_free(&r);
    s_ring_free(&plain);
}

static void
test_localsgd_snapshot_on_device(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_lsgd_opts(&o, "", 0.7, 0.9, 1);
    s_lsgd_snapshot_check(&o, 2);
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 1);
    s_lsgd_snapshot_check(&o, 4);
    s_lsgd_opts(&o, "topk:ratio=0.1", 1.0, 0.0, 1);
    o.ef_alpha = 1.0;
    snprintf(o.saef_scope, sizeof o.saef_scope, "neighbourhood");
    /* from boundaries 5 and 6, a look-ahead (the shift moved) ran between
     * two of the snapshots taken at every step */
    for (uint64_t boundary = 4; boundary <= 6; boundary++)
        s_lsgd_snapshot_check(&o, boundary);
    s_lsgd_opts(&o, "qsgd:bits=4", 0.7, 0.9, 3);
    o.ef_alpha = 1.0;
    s_lsgd_snapshot_check(&o, 5);
}

/* PowerSGD's adaptive rank keeps its snapshot on the device too: the
 * compressor (device to device), the rank's host values, and across a
 * rank change after the boundary the compressor it replaced. A budget of
 * 1e-3 makes the rule double the rank at the end of step 1 (the first
 * step with the ring's error sums), inside the snapshot's steps from
 * boundary 1; from boundary 3 the rank holds. */
static void
test_powersgd_adapt_snapshot_on_device(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 0, false);
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.adapt_error = 1e-3;
    o.adapt_rank_max = 4 * S_RANK;
    s_snapshot_check(&o, 1);
    s_snapshot_check(&o, 3);
    s_snapshot_no_pcie(&o);
    /* the rank did change inside the first check's steps */
    static const bool all[S_NODES] = {true, true, true, true};
    struct ring r;
    s_ring_new(&r, &o, all);
    float *in = malloc(r.numel * sizeof(float));
    float *out = malloc(S_NODES * r.numel * sizeof(float));
    assert_true(in && out);
    struct rumor_gossip_rank_report rep;
    for (uint64_t step = 0; step < 3; step++)
        s_take(&r, step, in, out);
    assert_true(rumor_gossip_adapt_rank(r.g[0], &rep));
    assert_true(rep.changes >= 1 && rep.rank > S_RANK);
    free(in);
    free(out);
    s_ring_free(&r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_ring_bits_equal_host),
        cmocka_unit_test(test_mixed_ring_bits_equal_host),
        cmocka_unit_test(test_one_sided_bits_equal_host),
        cmocka_unit_test(test_adapt_rule_bits_equal_host),
        cmocka_unit_test(test_pcie_bytes_are_the_payloads),
        cmocka_unit_test(test_adapt_rule_pcie_bytes_are_the_payloads),
        cmocka_unit_test(test_abandon_restores_device_model),
        cmocka_unit_test(test_dpsgd_bits_equal_host),
        cmocka_unit_test(test_term_diff_sq__in_pieces__bits_of_diff_then_norm),
        cmocka_unit_test(test_dpsgd_clipped_bits_equal_host),
        cmocka_unit_test(test_dpsgd_lossy_ledger_bits_equal_host),
        cmocka_unit_test(test_allreduce_bits_equal_host),
        cmocka_unit_test(test_choco_bits_equal_host),
        cmocka_unit_test(test_choco_state_moves_between_backends),
        cmocka_unit_test(test_deepsqueeze_bits_equal_host),
        cmocka_unit_test(test_powergossip_bits_equal_host),
        cmocka_unit_test_teardown(
            test_powergossip_chunked_terms_bits_equal_host,
            s_shape_small),
        cmocka_unit_test(test_powergossip_lossy_ledger_bits_equal_host),
        cmocka_unit_test(test_cuda_powersgd_mixed_ring),
        cmocka_unit_test(test_cuda_powergossip_mixed_ring),
        cmocka_unit_test(test_cuda_dpsgd_mixed_ring),
        cmocka_unit_test(test_cuda_choco_mixed_ring),
        cmocka_unit_test(test_cuda_memory_refused_without_gpu),
        cmocka_unit_test(test_localsgd_exact_bits_equal_host),
        cmocka_unit_test(test_localsgd_exact_pcie_is_the_model_per_sync),
        cmocka_unit_test(test_localsgd_compressed_bits_equal_host),
        cmocka_unit_test(test_localsgd_saef_bits_equal_host),
        cmocka_unit_test(test_localsgd_fragments_bits_equal_host),
        cmocka_unit_test(test_localsgd_state_moves_between_backends),
        cmocka_unit_test(test_localsgd_dgc_bits_equal_host),
        cmocka_unit_test(test_cuda_localsgd_mixed_ring),
        cmocka_unit_test(test_localsgd_compressed_pcie_is_the_payloads),
        cmocka_unit_test(test_localsgd_overlapped_bits_equal_host),
        cmocka_unit_test(test_crc32c_chunks_join_to_the_whole),
        cmocka_unit_test(test_sumsq_add_without_b_is_the_squares),
        cmocka_unit_test(test_allreduce_codec_bits_equal_host),
        cmocka_unit_test(test_fp8_real_bias_bits_equal_host),
        cmocka_unit_test(test_cuda_fp8_real_bias_mixed_ring),
        cmocka_unit_test(test_allreduce_codec_state_moves_between_backends),
        cmocka_unit_test(test_allreduce_codec_terngrad_share_bits_equal_host),
        cmocka_unit_test(test_allreduce_dgc_bits_equal_host),
        cmocka_unit_test(test_allreduce_dgc_state_on_device),
        cmocka_unit_test(test_cuda_allreduce_codec_mixed_ring),
        cmocka_unit_test(test_moniqua_bits_equal_host),
        cmocka_unit_test(test_cuda_moniqua_kernels_equal_twins),
        cmocka_unit_test(test_cuda_moniqua_mixed_ring),
        cmocka_unit_test(test_choco_adapt_bits_equal_host),
        cmocka_unit_test(test_cuda_adapt_reductions_match_host),
        cmocka_unit_test(test_choco_hands_each_message_before_the_next_copy),
        cmocka_unit_test(test_dpsgd_hands_its_messages_when_the_emit_ends),
        cmocka_unit_test(
            test_powergossip_hands_each_message_before_the_next_product),
        cmocka_unit_test(test_allreduce_codec_snapshot_on_device),
        cmocka_unit_test(test_powersgd_snapshot_on_device),
        cmocka_unit_test(test_allreduce_snapshot_is_empty),
        cmocka_unit_test(test_localsgd_snapshot_on_device),
        cmocka_unit_test(test_powersgd_adapt_snapshot_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
