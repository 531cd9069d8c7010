/*
 * Step-ahead error feedback with the neighbourhood's errors (gossip/saef.c,
 * localsgd's compressed-delta path):
 *   - e_bar on a 4-node star equals the W-weighted average worked by hand
 *     (Metropolis weights 1/4 and 3/4), for the neighbourhood scope, the
 *     own error for the self scope, and the missing neighbour's weight
 *     moved to the self term when one error message is dropped;
 *   - the error round's bytes are counted on the topology's edges;
 *   - the scope is read from a node's INI file and options;
 *   - alpha 0 gives the bits of a plain error-feedback loop written here
 *     with compress/'s "ef" memory, for both scopes;
 *   - on heterogeneous least squares at large step sizes with aggressive
 *     codecs (top-k 1 %, sign, 2-bit QSGD) the neighbourhood form ends
 *     closer to the optimum (solved here by LAPACK's dgesv) than plain
 *     EF.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/node.h"

#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX 8

/* n nodes of a topology, each with a one-tensor model of dim floats that
 * starts at 0, in the simulator. */
struct run {
    rumor_topology *topo;
    size_t n, dim;
    float *x[NODES_MAX];
    rumor_gossip *g[NODES_MAX];
    rumor_sim *sim;
};

static struct rumor_gossip_opts
s_opts(const char *codec, double alpha, const char *scope)
{
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    snprintf(o.algo, sizeof o.algo, "localsgd");
    snprintf(o.delta_codec, sizeof o.delta_codec, "%s", codec);
    snprintf(o.saef_scope, sizeof o.saef_scope, "%s", scope);
    o.ef_alpha = alpha;
    return o;
}

static void
s_run_new(struct run *r,
          const char *spec,
          const struct rumor_gossip_opts *o,
          size_t dim)
{
    memset(r, 0, sizeof *r);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &r->topo, &diag),
                     RUMOR_OK);
    r->n = rumor_topology_nodes(r->topo);
    r->dim = dim;
    assert_true(r->n <= NODES_MAX);
    for (size_t i = 0; i < r->n; i++) {
        r->x[i] = calloc(dim, sizeof(float));
        struct rumor_tensor t = {r->x[i], 1, {dim}};
        struct rumor_model m = {&t, 1};
        if (rumor_gossip_new(o, r->topo, (uint32_t)i, &m, &r->g[i], &diag) !=
            RUMOR_OK)
            fail_msg("gossip_new: %s", diag.msg);
    }
    assert_int_equal(rumor_sim_new(r->g, r->n, &r->sim), RUMOR_OK);
}

static void
s_run_free(struct run *r)
{
    rumor_sim_destroy(&r->sim);
    for (size_t i = 0; i < r->n; i++) {
        rumor_gossip_destroy(&r->g[i]);
        free(r->x[i]);
    }
    rumor_topology_destroy(&r->topo);
}

/* --- e_bar on a star, by hand ------------------------------------------- */

/* star:4: node 0 is the centre. Metropolis weights: w_0j = 1/4 for every
 * j (the centre's own weight 1/4 too), a leaf's own weight 3/4. Each node's
 * model moves by -u_i before step 2's sync, so Delta_i = u_i; top-1 of 4
 * keeps the largest entry and the error e_i is the rest (one entry):
 *   u_0 = (8, 4, 0, 0)   e_0 = (0, 4, 0, 0)
 *   u_1 = (0, 8, 4, 0)   e_1 = (0, 0, 4, 0)
 *   u_2 = (0, 0, 8, -4)  e_2 = (0, 0, 0, -4)
 *   u_3 = (4, 0, 0, 8)   e_3 = (4, 0, 0, 0)
 * e_bar_0 = (e_0 + e_1 + e_2 + e_3) / 4 = (1, 1, 1, -1);
 * e_bar_j = 3/4 e_j + 1/4 e_0 for a leaf:
 *   e_bar_1 = (0, 1, 3, 0), e_bar_2 = (0, 1, 0, -3), e_bar_3 = (3, 1, 0, 0).
 * Each error has one non-zero, which top-1 sends exactly. */
static const float s_u[4][4] = {{8, 4, 0, 0},
                                {0, 8, 4, 0},
                                {0, 0, 8, -4},
                                {4, 0, 0, 8}};
static const float s_ebar[4][4] = {{1, 1, 1, -1},
                                   {0, 1, 3, 0},
                                   {0, 1, 0, -3},
                                   {3, 1, 0, 0}};
static const float s_own[4][4] = {{0, 4, 0, 0},
                                  {0, 0, 4, 0},
                                  {0, 0, 0, -4},
                                  {4, 0, 0, 0}};

/* The look-ahead of node i after the syncs: the step it takes. */
static void
s_look_ahead(struct run *r, size_t i, float *moved)
{
    float before[4];
    memcpy(before, r->x[i], sizeof before);
    assert_int_equal(rumor_gossip_step_ahead(r->g[i]), RUMOR_OK);
    for (int d = 0; d < 4; d++)
        moved[d] = before[d] - r->x[i][d];
}

/* The nodes start at 0, their anchor (localsgd.c: the initial model, the
 * same on every node); step 2's sync, the first, sends Delta_i = u_i. */
static void
s_star_syncs(struct run *r)
{
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(rumor_gossip_step_ahead(r->g[i]), RUMOR_OK);
        for (int d = 0; d < 4; d++)
            r->x[i][d] -= s_u[i][d];
    }
    assert_int_equal(rumor_sim_step(r->sim, 2), RUMOR_OK);
}

static void
test_ebar__star4_top1__hand_computed_weighted_average(void **state)
{
    (void)state;
    const char *scopes[3] = {"neighbourhood", "neighbourhood:fp32", "self"};
    for (int k = 0; k < 3; k++) {
        struct rumor_gossip_opts o = s_opts("topk:ratio=0.25", 1.0, scopes[k]);
        struct run r;
        s_run_new(&r, "star:4", &o, 4);
        s_star_syncs(&r);
        for (size_t i = 0; i < 4; i++) {
            float moved[4];
            s_look_ahead(&r, i, moved);
            const float *want = k < 2 ? s_ebar[i] : s_own[i];
            for (int d = 0; d < 4; d++)
                if (moved[d] != want[d])
                    fail_msg("%s: node %zu e_bar[%d] = %g, want %g",
                             scopes[k],
                             i,
                             d,
                             (double)moved[d],
                             (double)want[d]);
        }
        s_run_free(&r);
    }
}

/* With alpha 0.5 the look-ahead is half of e_bar. */
static void
test_ebar__alpha_half__half_the_average(void **state)
{
    (void)state;
    struct rumor_gossip_opts o = s_opts("topk:ratio=0.25", 0.5, "");
    struct run r;
    s_run_new(&r, "star:4", &o, 4);
    s_star_syncs(&r);
    float moved[4];
    s_look_ahead(&r, 1, moved);
    for (int d = 0; d < 4; d++)
        assert_true(moved[d] == 0.5f * s_ebar[1][d]);
    s_run_free(&r);
}

/* The error round sends one message on each topology edge (both ways),
 * of the size of the top-1 payload of the error: the difference to the
 * self scope on the edge 1 -> 0, which the ring all-gather never uses
 * (it sends 1 -> 2). */
static void
test_error_round__star4__bytes_on_topology_edges(void **state)
{
    (void)state;
    struct run nb, self;
    struct rumor_gossip_opts o = s_opts("topk:ratio=0.25", 1.0, "");
    s_run_new(&nb, "star:4", &o, 4);
    o = s_opts("topk:ratio=0.25", 1.0, "self");
    s_run_new(&self, "star:4", &o, 4);
    s_star_syncs(&nb);
    s_star_syncs(&self);
    rumor_codec *codec = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_codec_new("topk:ratio=0.25", &codec, &diag),
                     RUMOR_OK);
    uint8_t buf[256];
    size_t len = 0;
    assert_int_equal(rumor_codec_encode(codec,
                                        s_own[1],
                                        4,
                                        0,
                                        0,
                                        buf,
                                        sizeof buf,
                                        &len,
                                        NULL),
                     RUMOR_OK);
    assert_int_equal(rumor_sim_messages_edge(self.sim, 1, 0), 0);
    assert_int_equal(rumor_sim_messages_edge(nb.sim, 1, 0), 1);
    assert_int_equal(rumor_sim_bytes_edge(nb.sim, 1, 0),
                     rumor_gossip_wire_bytes(len));
    assert_int_equal(rumor_sim_messages_edge(nb.sim, 0, 3), 1);
    assert_int_equal(rumor_sim_messages_edge(nb.sim, 1, 3), 0);
    /* node 0 has 3 neighbours, a leaf 1 */
    assert_int_equal(rumor_sim_bytes_sent(nb.sim, 2) -
                         rumor_sim_bytes_sent(self.sim, 2),
                     rumor_gossip_wire_bytes(len));
    rumor_codec_destroy(&codec);
    s_run_free(&nb);
    s_run_free(&self);
}

/* One gossip step driven by hand, as the simulator does, except that the
 * message from drop_from to drop_to in the last round is lost. */
static void
s_step_dropping(struct run *r,
                uint64_t step,
                uint32_t drop_from,
                uint32_t drop_to)
{
    uint32_t rounds = rumor_gossip_rounds(r->g[0], step);
    for (uint32_t round = 0; round < rounds; round++) {
        const struct rumor_gossip_msg *out[NODES_MAX];
        size_t count[NODES_MAX];
        for (size_t i = 0; i < r->n; i++)
            assert_int_equal(
                rumor_gossip_emit(r->g[i], step, round, &out[i], &count[i]),
                RUMOR_OK);
        for (size_t to = 0; to < r->n; to++) {
            struct rumor_gossip_msg inbox[NODES_MAX];
            size_t got = 0;
            for (size_t from = 0; from < r->n; from++)
                for (size_t m = 0; m < count[from]; m++) {
                    bool lost = round + 1 == rounds && from == drop_from &&
                                to == drop_to;
                    if (out[from][m].peer != to || lost)
                        continue;
                    inbox[got] = out[from][m];
                    inbox[got++].peer = (uint32_t)from;
                }
            assert_int_equal(
                rumor_gossip_absorb(r->g[to], step, round, inbox, got),
                RUMOR_OK);
        }
    }
}

/* Node 1's error never reaches node 0: its weight 1/4 joins node 0's own,
 * e_bar_0 = 1/2 e_0 + 1/4 (e_2 + e_3) = (1, 2, 0, -1). Everyone else as
 * before. */
static void
test_ebar__missing_neighbour__weight_goes_to_self(void **state)
{
    (void)state;
    struct rumor_gossip_opts o = s_opts("topk:ratio=0.25", 1.0, "");
    struct run r;
    s_run_new(&r, "star:4", &o, 4);
    s_step_dropping(&r, 1, 9, 9);
    for (size_t i = 0; i < 4; i++)
        for (int d = 0; d < 4; d++)
            r.x[i][d] -= s_u[i][d];
    s_step_dropping(&r, 2, 1, 0);
    const float want0[4] = {1, 2, 0, -1};
    for (size_t i = 0; i < 4; i++) {
        float moved[4];
        s_look_ahead(&r, i, moved);
        for (int d = 0; d < 4; d++)
            assert_true(moved[d] == (i == 0 ? want0[d] : s_ebar[i][d]));
    }
    s_run_free(&r);
}

/* A scope that is neither is refused with the reason. */
static void
test_scope__unknown__refused(void **state)
{
    (void)state;
    const char *bad[3] = {"everyone", "neighbourhood:", "neighbourhood:nope"};
    rumor_topology *topo = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:3", 1, &topo, &diag),
                     RUMOR_OK);
    float x[4] = {0};
    struct rumor_tensor t = {x, 1, {4}};
    struct rumor_model m = {&t, 1};
    for (int k = 0; k < 3; k++) {
        struct rumor_gossip_opts o = s_opts("sign", 1.0, bad[k]);
        rumor_gossip *g = NULL;
        memset(&diag, 0, sizeof diag);
        assert_int_equal(rumor_gossip_new(&o, topo, 0, &m, &g, &diag),
                         RUMOR_EINVAL);
        assert_null(g);
        assert_true(diag.msg[0] != '\0');
    }
    rumor_topology_destroy(&topo);
}

/* --- heterogeneous least squares ----------------------------------------- */

#define HL_NODES 8
#define HL_DIM   100
#define HL_ROWS  200

/* f_i(x) = 1/2 ||A_i x - b_i||^2 with b_i = A_i (x0 + z_i): every node
 * has its own minimiser x0 + z_i, so local gradients stay large at the
 * common optimum and the compressed deltas never vanish. */
struct hl_problem {
    double a[HL_NODES][HL_ROWS][HL_DIM], b[HL_NODES][HL_ROWS];
    double opt[HL_DIM]; /* the minimiser of sum_i f_i */
};

/* Normal equations sum_i A_i^T A_i x = sum_i A_i^T b_i, solved by
 * LAPACK (dgesv): the reference optimum. */
static void
s_hl_init(struct hl_problem *q)
{
    static double m[HL_DIM][HL_DIM], rhs[HL_DIM];
    memset(m, 0, sizeof m);
    memset(rhs, 0, sizeof rhs);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 2008, 5823);
    double x0[HL_DIM], z[HL_DIM];
    for (int k = 0; k < HL_DIM; k++)
        x0[k] = rumor_rng_normal(&rng);
    for (int i = 0; i < HL_NODES; i++) {
        for (int k = 0; k < HL_DIM; k++)
            z[k] = rumor_rng_normal(&rng);
        for (int r = 0; r < HL_ROWS; r++) {
            double b = 0;
            for (int k = 0; k < HL_DIM; k++) {
                q->a[i][r][k] = rumor_rng_normal(&rng) / sqrt(HL_ROWS);
                b += q->a[i][r][k] * (x0[k] + z[k]);
            }
            q->b[i][r] = b;
            for (int k = 0; k < HL_DIM; k++) {
                for (int l = 0; l < HL_DIM; l++)
                    m[k][l] += q->a[i][r][k] * q->a[i][r][l];
                rhs[k] += q->a[i][r][k] * b;
            }
        }
    }
    lapack_int piv[HL_DIM];
    assert_int_equal(LAPACKE_dgesv(LAPACK_ROW_MAJOR,
                                   HL_DIM,
                                   1,
                                   &m[0][0],
                                   HL_DIM,
                                   piv,
                                   rhs,
                                   1),
                     0);
    memcpy(q->opt, rhs, sizeof rhs);
}

/* x -= lr grad f_i(x), the gradient in double. */
static void
s_hl_sgd(const struct hl_problem *q, size_t i, float *x, double lr)
{
    double g[HL_DIM] = {0};
    for (int r = 0; r < HL_ROWS; r++) {
        double res = -q->b[i][r];
        for (int k = 0; k < HL_DIM; k++)
            res += q->a[i][r][k] * x[k];
        for (int k = 0; k < HL_DIM; k++)
            g[k] += q->a[i][r][k] * res;
    }
    for (int k = 0; k < HL_DIM; k++)
        x[k] = (float)(x[k] - lr * g[k]);
}

/* sqrt(mean_i ||x_i - x*||^2) / ||x*||; a diverged run is +Inf. */
static double
s_hl_dist(const struct hl_problem *q, float *const *x, size_t n)
{
    double d = 0, norm = 0;
    for (int k = 0; k < HL_DIM; k++)
        norm += q->opt[k] * q->opt[k];
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < HL_DIM; k++)
            d += (x[i][k] - q->opt[k]) * (x[i][k] - q->opt[k]);
    double rel = sqrt(d / (double)n / norm);
    return isfinite(rel) ? rel : INFINITY;
}

/* Local SGD with H = 1 on a ring of 8, the delta compressed with error
 * feedback: step 0 makes the anchor, then each step looks ahead, takes a
 * gradient step and syncs. The models end in out (n * HL_DIM floats, may
 * be NULL); returns the distance to the optimum, +Inf once diverged. */
static double
s_hl_run(const struct hl_problem *q,
         const struct rumor_gossip_opts *o,
         double lr,
         uint64_t steps,
         float *out,
         uint64_t *bytes)
{
    struct run r;
    s_run_new(&r, "ring:8", o, HL_DIM);
    assert_int_equal(rumor_sim_step(r.sim, 0), RUMOR_OK);
    rumor_err rc = RUMOR_OK;
    for (uint64_t step = 1; step <= steps && rc == RUMOR_OK; step++) {
        for (size_t i = 0; i < r.n; i++) {
            assert_int_equal(rumor_gossip_step_ahead(r.g[i]), RUMOR_OK);
            s_hl_sgd(q, i, r.x[i], lr);
        }
        rc = rumor_sim_step(r.sim, step);
    }
    double d = rc == RUMOR_OK ? s_hl_dist(q, r.x, r.n) : INFINITY;
    for (size_t i = 0; out != NULL && i < r.n; i++)
        memcpy(out + i * HL_DIM, r.x[i], HL_DIM * sizeof(float));
    if (bytes != NULL)
        *bytes = rumor_sim_bytes_sent(r.sim, 0);
    s_run_free(&r);
    return d;
}

/* Plain error feedback written here with compress/'s "ef" memory: each
 * node sends C(anchor - x + e) (e = what C left out last time); every node
 * adds the decoded payloads in node order with weight 1/n and moves to
 * anchor - that mean, which becomes the anchor. Deterministic codecs only
 * (no seeds to agree on). */
static void
s_plain_ef(const struct hl_problem *q,
           const char *spec,
           double lr,
           uint64_t steps,
           float *out)
{
    rumor_codec *codec = NULL;
    rumor_ef *ef[HL_NODES] = {0};
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_codec_new(spec, &codec, &diag), RUMOR_OK);
    size_t cap = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(codec, HL_DIM, &cap, &exact),
                     RUMOR_OK);
    static uint8_t payload[HL_NODES][4096];
    size_t len[HL_NODES];
    assert_true(cap <= sizeof payload[0]);
    float anchor[HL_DIM] = {0}, delta[HL_DIM], acc[HL_DIM], velocity[HL_DIM];
    for (size_t i = 0; i < HL_NODES; i++) {
        assert_int_equal(rumor_ef_new("ef", HL_DIM, &ef[i], &diag), RUMOR_OK);
        memset(out + i * HL_DIM, 0, HL_DIM * sizeof(float));
    }
    memset(velocity, 0, sizeof velocity);
    for (uint64_t step = 1; step <= steps; step++) {
        for (size_t i = 0; i < HL_NODES; i++) {
            float *x = out + i * HL_DIM;
            s_hl_sgd(q, i, x, lr);
            for (int k = 0; k < HL_DIM; k++)
                delta[k] = anchor[k] - x[k];
            assert_int_equal(rumor_ef_encode(ef[i],
                                             codec,
                                             delta,
                                             HL_DIM,
                                             0,
                                             step,
                                             payload[i],
                                             cap,
                                             &len[i],
                                             NULL),
                             RUMOR_OK);
        }
        memset(acc, 0, sizeof acc);
        for (size_t j = 0; j < HL_NODES; j++)
            assert_int_equal(rumor_codec_decode_add(codec,
                                                    payload[j],
                                                    len[j],
                                                    1.0f / HL_NODES,
                                                    acc,
                                                    HL_DIM),
                             RUMOR_OK);
        /* the outer step with lr 1 and momentum 0, as written in localsgd */
        for (int k = 0; k < HL_DIM; k++) {
            velocity[k] = 0.0f * velocity[k] + acc[k];
            anchor[k] = anchor[k] - 1.0f * (acc[k] + 0.0f * velocity[k]);
        }
        for (size_t i = 0; i < HL_NODES; i++)
            memcpy(out + i * HL_DIM, anchor, sizeof anchor);
    }
    for (size_t i = 0; i < HL_NODES; i++)
        rumor_ef_destroy(&ef[i]);
    rumor_codec_destroy(&codec);
}

static struct hl_problem s_hl;

static int
s_hl_setup(void **state)
{
    (void)state;
    s_hl_init(&s_hl);
    return 0;
}

/* alpha 0 is plain EF, bit for bit, in either scope, and the
 * neighbourhood scope sends nothing extra then. */
static void
test_alpha0__both_scopes__plain_ef_bit_for_bit(void **state)
{
    (void)state;
    const char *codecs[2] = {"topk:ratio=0.01", "sign"};
    static float ref[HL_NODES * HL_DIM], nb[HL_NODES * HL_DIM],
        self[HL_NODES * HL_DIM];
    for (int k = 0; k < 2; k++) {
        uint64_t nb_bytes = 0, self_bytes = 0;
        struct rumor_gossip_opts o = s_opts(codecs[k], 0.0, "neighbourhood");
        s_hl_run(&s_hl, &o, 0.3, 40, nb, &nb_bytes);
        o = s_opts(codecs[k], 0.0, "self");
        s_hl_run(&s_hl, &o, 0.3, 40, self, &self_bytes);
        s_plain_ef(&s_hl, codecs[k], 0.3, 40, ref);
        assert_memory_equal(nb, self, sizeof nb);
        for (size_t e = 0; e < HL_NODES * HL_DIM; e++)
            if (!(nb[e] == ref[e]))
                fail_msg("%s: element %zu: %.9g, plain EF %.9g",
                         codecs[k],
                         e,
                         (double)nb[e],
                         (double)ref[e]);
        assert_int_equal(nb_bytes, self_bytes);
    }
}

#define HL_SEEDS 4

/* The distance after 300 steps; for a stochastic codec the mean over
 * HL_SEEDS run seeds, so that the comparison does not hang on one draw of
 * the random stream. */
static double
s_hl_mean(const char *codec, double alpha, const char *scope, double lr)
{
    struct rumor_gossip_opts o = s_opts(codec, alpha, scope);
    int seeds = strncmp(codec, "qsgd", 4) == 0 ? HL_SEEDS : 1;
    double sum = 0;
    for (int k = 0; k < seeds; k++) {
        o.seed = 1 + (uint64_t)k;
        sum += s_hl_run(&s_hl, &o, lr, 300, NULL, NULL);
    }
    return sum / seeds;
}

/* Heterogeneous least squares at large step sizes (0.6, 0.8) with
 * aggressive codecs: the look-ahead by the neighbourhood's errors ends
 * closer to the optimum than plain EF, by at least 10 %. lr 0.1 is run
 * for the record, not asserted (there plain EF is as good or better with
 * sign and QSGD). The table (distance relative to ||x*|| after 300
 * steps; QSGD: mean of 4 seeds) is printed, with the own-error form.
 * Measured (EF / own / neighbourhood):
 *   topk 1 %    lr 0.1: 0.723 / 0.263 / 0.272   lr 0.6: 7.88 / 0.413 / 0.379
 *               lr 0.8: 25.8 / diverges / 0.404
 *   sign        lr 0.1: 0.0531 / 0.099 / 0.0706 lr 0.6: 0.364 / 0.244 / 0.242
 *               lr 0.8: 0.513 / 0.268 / 0.264
 *   qsgd 2-bit  lr 0.1: 0.0234 / 0.0237 / 0.0242
 *               lr 0.6: 0.192 / 0.129 / 0.143   lr 0.8: 0.283 / 0.195 / 0.214
 * (bucket 16; with QSGD's default bucket of 512 every form diverges). */
static void
test_least_squares__large_steps_aggressive_codecs__neighbourhood_beats_ef(
    void **state)
{
    (void)state;
    const char *codecs[3] = {"topk:ratio=0.01",
                             "sign",
                             "qsgd:bits=2,bucket=16"};
    const double lrs[3] = {0.1, 0.6, 0.8};
    for (int c = 0; c < 3; c++)
        for (int l = 0; l < 3; l++) {
            double ef = s_hl_mean(codecs[c], 0.0, "self", lrs[l]);
            double own = s_hl_mean(codecs[c], 1.0, "self", lrs[l]);
            double nb = s_hl_mean(codecs[c], 1.0, "neighbourhood", lrs[l]);
            print_message("%-22s lr %.2f: EF %.3g, own-error SAEF %.3g, "
                          "neighbourhood SAEF %.3g\n",
                          codecs[c],
                          lrs[l],
                          ef,
                          own,
                          nb);
            if (lrs[l] > 0.5 && !(nb < 0.9 * ef))
                fail_msg("%s lr %g: neighbourhood SAEF %.3g is not below "
                         "0.9 x plain EF %.3g",
                         codecs[c],
                         lrs[l],
                         nb,
                         ef);
        }
}

/* The scope from a node's INI file and option table: the default is
 * "neighbourhood", a file can say "self", an option a codec, and the
 * option is refused for an algorithm without the look-ahead. */
static void
test_node_opts__saef_scope__ini_option_and_check(void **state)
{
    (void)state;
    rumor_node_config *c = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_new(&c), RUMOR_OK);
    const struct rumor_node_opts *o = rumor_node_config_opts(c);
    assert_string_equal(o->gossip.saef_scope, "neighbourhood");
    const char ini[] = "[node]\ntopology = ring.topo\nid = 0\ninsecure = 1\n"
                       "algo = localsgd\ndelta-codec = sign\n"
                       "ef-alpha = 1\nsaef-scope = self\n";
    assert_int_equal(rumor_node_config_parse_ini(c,
                                                 "test.ini",
                                                 (const uint8_t *)ini,
                                                 sizeof ini - 1,
                                                 &diag),
                     RUMOR_OK);
    assert_string_equal(o->gossip.saef_scope, "self");
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_int_equal(
        rumor_node_config_set(c, "saef-scope", "neighbourhood:sign", &diag),
        RUMOR_OK);
    assert_string_equal(o->gossip.saef_scope, "neighbourhood:sign");
    rumor_node_config *p = NULL;
    assert_int_equal(rumor_node_config_new(&p), RUMOR_OK);
    const char *set[5][2] = {{"topology", "ring.topo"},
                             {"id", "0"},
                             {"insecure", "1"},
                             {"algo", "dpsgd"},
                             {"saef-scope", "self"}};
    for (int k = 0; k < 5; k++)
        assert_int_equal(rumor_node_config_set(p, set[k][0], set[k][1], &diag),
                         RUMOR_OK);
    assert_int_equal(rumor_node_config_check(p, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "saef-scope"));
    rumor_node_config_destroy(&p);
    rumor_node_config_destroy(&c);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ebar__star4_top1__hand_computed_weighted_average),
        cmocka_unit_test(test_ebar__alpha_half__half_the_average),
        cmocka_unit_test(test_error_round__star4__bytes_on_topology_edges),
        cmocka_unit_test(test_ebar__missing_neighbour__weight_goes_to_self),
        cmocka_unit_test(test_scope__unknown__refused),
        cmocka_unit_test(test_node_opts__saef_scope__ini_option_and_check),
        cmocka_unit_test(test_alpha0__both_scopes__plain_ef_bit_for_bit),
        cmocka_unit_test(
            test_least_squares__large_steps_aggressive_codecs__neighbourhood_beats_ef),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("saef", tests, s_hl_setup, NULL);
}
