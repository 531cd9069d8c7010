/*
 * rumor_gossip_members_set (gossip/ring.c): the ring algorithms over a
 * sorted subset of the topology's nodes, the ring of an elastic epoch
 * (docs/reliability.md, "Elastic rings: the design"). Every run here is
 * driven member by member (emit, then absorb what was addressed to each,
 * as rumor_sim does), and the driver fails the test on a message to, or
 * an expected sender that is, a node outside the members.
 *   - allreduce and allreduce-f64 over {0, 2, 3} of 4: the bits of the
 *     same ring on a 3-node topology with those inputs, the mean of the
 *     three inputs (allreduce-f64: bit for bit the correctly rounded one,
 *     formed here), node 1 untouched;
 *   - PowerSGD (rank 1 and 2, error feedback) over {0, 1, 3} of 4 for four
 *     steps: bit for bit the run of a 3-node topology (the same
 *     positions, chunks and divisions: the same arithmetic);
 *   - 4 -> 3 -> 4 members between steps: allreduce-f64 gives the correctly
 *     rounded mean of the current members at every step; PowerSGD's
 *     output is at every step the mean over the current members of
 *     g + e_old - e_new (what error feedback conserves: a division by
 *     another count breaks it), the same bits and the same Q on every
 *     member; the returning node takes step, Q and P from a member (the
 *     design's re-admission) and keeps its own error memory;
 *   - exact local SGD (outer Nesterov) and top-k-delta local SGD over
 *     {0, 2, 3}: the bits of a 3-node topology; with the neighbourhood
 *     look-ahead, errors go to member neighbours only;
 *   - the compressed all-reduce: QSGD over {0, 2, 3} is bit for bit the
 *     mean of each member's payload, encoded and decoded here with the
 *     seed of its node id; QSGD with ef and top-k with DGC's clip (N = the
 *     members) over {0, 1, 2}: the bits of a 3-node topology;
 *   - a lone member: no round; bad lists, an algorithm without a ring and
 *     a step in progress are refused with nothing changed.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX 4
/* rumor_gossip_state_save's header: magic, version, algorithm name, self,
 * nodes, numel, the robust history (steps, EMA), body length */
#define STATE_HEADER (8 + RUMOR_GOSSIP_ALGO_BYTES + 8 + 8 + 16 + 8)

static const uint32_t s_all[] = {0, 1, 2, 3};

/* The nodes of a topology, each with a matrix and a vector (bias). */
struct cluster {
    rumor_topology *topo;
    size_t n, rows, cols, bias, numel;
    float *x[NODES_MAX];
    rumor_gossip *g[NODES_MAX];
};

static void
s_cluster_new(struct cluster *c,
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
    assert_true(c->n <= NODES_MAX);
    c->rows = rows;
    c->cols = cols;
    c->bias = bias;
    c->numel = rows * cols + bias;
    for (size_t i = 0; i < c->n; i++) {
        c->x[i] = calloc(c->numel, sizeof(float));
        struct rumor_tensor tensors[2] = {
            {c->x[i], 2, {rows, cols}},
            {c->x[i] + rows * cols, 1, {bias}},
        };
        struct rumor_model model = {tensors, bias ? 2 : 1};
        if (rumor_gossip_new(opts,
                             c->topo,
                             (uint32_t)i,
                             &model,
                             &c->g[i],
                             &diag) != RUMOR_OK)
            fail_msg("gossip_new: %s", diag.msg);
    }
}

static void
s_cluster_free(struct cluster *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rumor_gossip_destroy(&c->g[i]);
        free(c->x[i]);
    }
    rumor_topology_destroy(&c->topo);
}

static void
s_opts(struct rumor_gossip_opts *o, const char *algo)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "%s", algo);
}

static bool
s_in(const uint32_t *members, size_t k, uint32_t node)
{
    for (size_t i = 0; i < k; i++)
        if (members[i] == node)
            return true;
    return false;
}

/* The input of step `step` for the node called `label` (a node keeps its
 * label in the reference topology, where its id may differ). */
static void
s_fill(float *x, size_t numel, uint64_t step, uint32_t label)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, 42, step * 64 + label);
    for (size_t e = 0; e < numel; e++)
        x[e] = (float)rumor_rng_normal(&rng) + (float)label;
}

/* Local training between syncs: the input of step 0, then a small step
 * that depends on the label. */
static void
s_train(float *x, size_t numel, uint64_t step, uint32_t label)
{
    if (step == 0)
        s_fill(x, numel, 0, label);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 7, step * 64 + label);
    for (size_t e = 0; e < numel; e++)
        x[e] += 0.05f * (float)rumor_rng_normal(&rng) - 0.01f * x[e];
}

/* Sets every member's ring. */
static void
s_members(struct cluster *c, const uint32_t *members, size_t k)
{
    for (size_t i = 0; i < k; i++)
        assert_int_equal(rumor_gossip_members_set(c->g[members[i]], members, k),
                         RUMOR_OK);
}

/* One step of the members' instances, round by round: every member
 * emits, then each absorbs the messages addressed to it. */
static rumor_err
s_step(struct cluster *c, const uint32_t *members, size_t k, uint64_t step)
{
    uint32_t rounds = rumor_gossip_rounds(c->g[members[0]], step);
    for (size_t i = 1; i < k; i++)
        assert_int_equal(rumor_gossip_rounds(c->g[members[i]], step), rounds);
    for (uint32_t r = 0; r < rounds; r++) {
        const struct rumor_gossip_msg *sent[NODES_MAX] = {0};
        size_t count[NODES_MAX] = {0};
        for (size_t i = 0; i < k; i++) {
            uint32_t id = members[i];
            rumor_err rc =
                rumor_gossip_emit(c->g[id], step, r, &sent[id], &count[id]);
            if (rc != RUMOR_OK)
                return rc;
            for (size_t m = 0; m < count[id]; m++)
                assert_true(s_in(members, k, sent[id][m].peer));
        }
        for (size_t i = 0; i < k; i++) {
            uint32_t to = members[i], want[NODES_MAX];
            struct rumor_gossip_msg inbox[NODES_MAX];
            size_t got = 0, expected = 0;
            for (size_t j = 0; j < k; j++)
                for (size_t m = 0; m < count[members[j]]; m++)
                    if (sent[members[j]][m].peer == to) {
                        inbox[got] = sent[members[j]][m];
                        inbox[got++].peer = members[j];
                    }
            assert_int_equal(
                rumor_gossip_expected(c->g[to], step, r, want, 4, &expected),
                RUMOR_OK);
            for (size_t e = 0; e < expected; e++)
                assert_true(s_in(members, k, want[e]));
            rumor_err rc = rumor_gossip_absorb(c->g[to], step, r, inbox, got);
            if (rc != RUMOR_OK)
                return rc;
        }
    }
    return RUMOR_OK;
}

/* The bits of node a of c equal those of node b of d. */
static void
s_same(const struct cluster *c, uint32_t a, const struct cluster *d, uint32_t b)
{
    assert_memory_equal(c->x[a], d->x[b], c->numel * sizeof(float));
}

/* --- allreduce ------------------------------------------------------------ */

static void
test_allreduce__members_0_2_3_of_4__mean_of_the_three(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 2, 3};
    const char *algos[] = {"allreduce", "allreduce-f64"};
    for (size_t a = 0; a < 2; a++) {
        struct rumor_gossip_opts o;
        s_opts(&o, algos[a]);
        struct cluster c, ref;
        s_cluster_new(&c, "ring:4", &o, 13, 7, 4); /* 95: 3 does not divide */
        s_cluster_new(&ref, "ring:3", &o, 13, 7, 4);
        for (uint32_t i = 0; i < 4; i++)
            s_fill(c.x[i], c.numel, 0, i);
        for (uint32_t j = 0; j < 3; j++)
            s_fill(ref.x[j], ref.numel, 0, members[j]);
        float *before = malloc(c.numel * sizeof *before);
        memcpy(before, c.x[1], c.numel * sizeof *before);
        s_members(&c, members, 3);
        assert_int_equal(rumor_gossip_rounds(c.g[0], 0), 4);
        assert_int_equal(s_step(&c, members, 3, 0), RUMOR_OK);
        assert_int_equal(s_step(&ref, s_all, 3, 0), RUMOR_OK);
        for (uint32_t j = 0; j < 3; j++)
            s_same(&c, members[j], &ref, j);
        assert_memory_equal(c.x[1], before, c.numel * sizeof *before);
        for (size_t e = 0; e < c.numel; e++) {
            float in[3];
            for (uint32_t j = 0; j < 3; j++) {
                float v[95];
                s_fill(v, c.numel, 0, members[j]);
                in[j] = v[e];
            }
            double sum = (double)in[0] + (double)in[1] + (double)in[2];
            float mean = (float)(sum / 3.0);
            if (a == 1)
                assert_true(c.x[0][e] == mean);
            else
                assert_float_equal(c.x[0][e], mean, 1e-6 * (1 + fabsf(mean)));
        }
        free(before);
        s_cluster_free(&c);
        s_cluster_free(&ref);
    }
}

/* --- PowerSGD --------------------------------------------------------------
 * The state's body without opts.adapt: u64 step, u64 q floats, Q, u64 p
 * floats, P, then per compressed tensor u64 floats (0: none yet) and the
 * error memory (gossip/powersgd.c, s_state_save). */

static void
s_state(const rumor_gossip *g, rumor_buf *b)
{
    rumor_buf_init(b, (size_t)1 << 30);
    assert_int_equal(rumor_gossip_state_save(g, b), RUMOR_OK);
}

static uint64_t
s_u64(const rumor_buf *b, size_t at)
{
    uint64_t v = 0;
    assert_true(at + 8 <= b->len);
    memcpy(&v, b->data + at, 8);
    return v;
}

/* Where the matrix's error memory (the one compressed tensor) starts, and
 * its length through *n (0: none yet). */
static size_t
s_memory_at(const rumor_buf *b, uint64_t *n)
{
    size_t at = STATE_HEADER + 8;
    at += 8 + 4 * s_u64(b, at);
    at += 8 + 4 * s_u64(b, at);
    *n = s_u64(b, at);
    return at + 8;
}

/* The matrix's error memory of g into e (rows * cols floats, zeros
 * before the first step). */
static void
s_psgd_memory(const rumor_gossip *g, float *e, size_t len)
{
    rumor_buf b;
    s_state(g, &b);
    uint64_t n = 0;
    size_t at = s_memory_at(&b, &n);
    assert_true(n == 0 || n == len);
    memset(e, 0, len * sizeof *e);
    if (n == len)
        memcpy(e, b.data + at, len * sizeof *e);
    rumor_buf_free(&b);
}

/* Step, Q and P of every member are the same bits. */
static void
s_psgd_same_q(const struct cluster *c, const uint32_t *members, size_t k)
{
    rumor_buf first, other;
    s_state(c->g[members[0]], &first);
    uint64_t qf = s_u64(&first, STATE_HEADER + 8);
    assert_true(qf > 0);
    for (size_t i = 1; i < k; i++) {
        s_state(c->g[members[i]], &other);
        assert_memory_equal(first.data + STATE_HEADER,
                            other.data + STATE_HEADER,
                            16 + 4 * qf);
        rumor_buf_free(&other);
    }
    rumor_buf_free(&first);
}

/* A returning member takes step, Q and P from a member, as re-admission
 * does (docs/reliability.md), and keeps its own error memory. */
static void
s_psgd_take_q(rumor_gossip *to, const rumor_gossip *from)
{
    rumor_buf b;
    s_state(from, &b);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_state_adopt(to, b.data, b.len, &diag),
                     RUMOR_OK);
    rumor_buf_free(&b);
}

static void
s_psgd_opts(struct rumor_gossip_opts *o, size_t rank)
{
    s_opts(o, "powersgd");
    o->rank = rank;
    o->use_error_feedback = true;
}

/* Sets each step's model: fresh inputs (s_fill) or training (s_train). */
typedef void (*input_fn)(float *x, size_t numel, uint64_t step, uint32_t label);

/* opts over the members of ring:4 and over ring:3, whose node j has the
 * inputs of member j: the same bits after every step (for PowerSGD, the
 * same Q on every member too). */
static void
s_vs_three(const struct rumor_gossip_opts *o,
           const uint32_t *members,
           uint64_t steps,
           input_fn input)
{
    struct cluster c, ref;
    s_cluster_new(&c, "ring:4", o, 16, 12, 5);
    s_cluster_new(&ref, "ring:3", o, 16, 12, 5);
    s_members(&c, members, 3);
    for (uint64_t step = 0; step < steps; step++) {
        for (uint32_t j = 0; j < 3; j++) {
            input(c.x[members[j]], c.numel, step, members[j]);
            input(ref.x[j], ref.numel, step, members[j]);
        }
        assert_int_equal(s_step(&c, members, 3, step), RUMOR_OK);
        assert_int_equal(s_step(&ref, s_all, 3, step), RUMOR_OK);
        for (uint32_t j = 0; j < 3; j++)
            s_same(&c, members[j], &ref, j);
        if (strcmp(o->algo, "powersgd") == 0)
            s_psgd_same_q(&c, members, 3);
    }
    s_cluster_free(&c);
    s_cluster_free(&ref);
}

static void
test_powersgd__members_0_1_3_of_4__bits_of_three_nodes(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 1, 3};
    for (size_t rank = 1; rank <= 2; rank++) {
        struct rumor_gossip_opts o;
        s_psgd_opts(&o, rank);
        s_vs_three(&o, members, 4, s_fill);
    }
}

/* The members of each step of the shrink-and-grow runs. */
static void
s_epoch(uint64_t step, const uint32_t **members, size_t *k)
{
    static const uint32_t three[] = {0, 1, 3};
    *members = step >= 2 && step < 4 ? three : s_all;
    *k = step >= 2 && step < 4 ? 3 : 4;
}

static void
test_allreduce_f64__4_3_4_members__mean_of_the_current_ones(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "allreduce-f64");
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, 9, 5, 2);
    for (uint64_t step = 0; step < 6; step++) {
        const uint32_t *m = NULL;
        size_t k = 0;
        s_epoch(step, &m, &k);
        s_members(&c, m, k);
        double sum[47] = {0};
        for (size_t j = 0; j < k; j++) {
            s_fill(c.x[m[j]], c.numel, step, m[j]);
            for (size_t e = 0; e < c.numel; e++)
                sum[e] += c.x[m[j]][e];
        }
        assert_int_equal(s_step(&c, m, k, step), RUMOR_OK);
        for (size_t j = 0; j < k; j++)
            for (size_t e = 0; e < c.numel; e++)
                assert_true(c.x[m[j]][e] == (float)(sum[e] / (double)k));
    }
    s_cluster_free(&c);
}

/* PowerSGD's output at a step, against the members' inputs g and
 * memories before and after: out = mean_i (g_i + e_old_i - e_new_i) on
 * the matrix, the mean of the inputs on the bias. */
static void
s_psgd_check_mean(const struct cluster *c,
                  const uint32_t *m,
                  size_t k,
                  float *const *in,
                  float *const *e_old)
{
    size_t mat = c->rows * c->cols;
    float *e_new = malloc(mat * sizeof *e_new);
    double *ref = calloc(c->numel, sizeof *ref);
    for (size_t j = 0; j < k; j++) {
        s_psgd_memory(c->g[m[j]], e_new, mat);
        for (size_t e = 0; e < c->numel; e++)
            ref[e] += e < mat ? (double)in[j][e] + e_old[j][e] - e_new[e]
                              : (double)in[j][e];
    }
    for (size_t e = 0; e < c->numel; e++) {
        double want = ref[e] / (double)k;
        assert_float_equal(c->x[m[0]][e], want, 2e-5 * (1 + fabs(want)));
    }
    for (size_t j = 1; j < k; j++)
        s_same(c, m[j], c, m[0]);
    free(ref);
    free(e_new);
}

static void
test_powersgd__4_3_4_members__mean_of_the_current_ones_same_q(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_psgd_opts(&o, 2);
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, 16, 12, 5);
    float *in[NODES_MAX], *e_old[NODES_MAX];
    for (size_t i = 0; i < NODES_MAX; i++) {
        in[i] = malloc(c.numel * sizeof(float));
        e_old[i] = malloc(c.rows * c.cols * sizeof(float));
    }
    for (uint64_t step = 0; step < 6; step++) {
        const uint32_t *m = NULL;
        size_t k = 0;
        s_epoch(step, &m, &k);
        if (step == 4) /* node 2 returns */
            s_psgd_take_q(c.g[2], c.g[1]);
        s_members(&c, m, k);
        for (size_t j = 0; j < k; j++) {
            s_fill(c.x[m[j]], c.numel, step, m[j]);
            memcpy(in[j], c.x[m[j]], c.numel * sizeof(float));
            s_psgd_memory(c.g[m[j]], e_old[j], c.rows * c.cols);
        }
        assert_int_equal(s_step(&c, m, k, step), RUMOR_OK);
        s_psgd_check_mean(&c, m, k, in, e_old);
        s_psgd_same_q(&c, m, k);
    }
    for (size_t i = 0; i < NODES_MAX; i++) {
        free(in[i]);
        free(e_old[i]);
    }
    s_cluster_free(&c);
}

/* --- local SGD ------------------------------------------------------------ */

static void
test_localsgd__members_0_2_3_of_4__bits_of_three_nodes(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 2, 3};
    struct rumor_gossip_opts o;
    s_opts(&o, "localsgd");
    o.period = 2;
    o.outer_lr = 0.7;
    o.outer_momentum = 0.6;
    s_vs_three(&o, members, 7, s_train);
    /* top-k draws nothing: the node ids' seeds do not matter */
    s_opts(&o, "localsgd");
    o.period = 2;
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    s_vs_three(&o, members, 7, s_train);
    /* streaming fragments: the ring reaches every fragment's mixer */
    for (int coded = 0; coded < 2; coded++) {
        s_opts(&o, "localsgd");
        o.period = 3;
        o.fragments = 3;
        o.outer_lr = 0.7;
        o.outer_momentum = 0.6;
        if (coded)
            snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
        s_vs_three(&o, members, 7, s_train);
    }
}

/* With the neighbourhood look-ahead, the error round of ring:4 over
 * {0, 2, 3} reaches member neighbours only (the driver checks it), and
 * every member leaves a sync with the same model (with 2 streaming
 * fragments, the same syncing fragment). */
static void
test_localsgd__saef_neighbourhood__errors_to_members_only(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 2, 3};
    for (unsigned frags = 1; frags <= 2; frags++) {
        struct rumor_gossip_opts o;
        s_opts(&o, "localsgd");
        o.period = 2;
        o.fragments = frags;
        o.ef_alpha = 0.5;
        snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
        struct cluster c;
        s_cluster_new(&c, "ring:4", &o, 8, 6, 3);
        s_members(&c, members, 3);
        for (uint64_t step = 0; step < 7; step++) {
            for (uint32_t j = 0; j < 3; j++) {
                assert_int_equal(rumor_gossip_step_ahead(c.g[members[j]]),
                                 RUMOR_OK);
                s_train(c.x[members[j]], c.numel, step, members[j]);
            }
            bool sync = frags == 2 || step % 2 == 0;
            if (step >= 2 && sync) /* a compressed sync: + errors */
                assert_int_equal(rumor_gossip_rounds(c.g[0], step), 3);
            assert_int_equal(s_step(&c, members, 3, step), RUMOR_OK);
            size_t f = frags == 2 ? step % 2 : 0;
            size_t lo = f * c.numel / frags, hi = (f + 1) * c.numel / frags;
            for (uint32_t j = 1; j < 3 && sync; j++)
                assert_memory_equal(c.x[members[j]] + lo,
                                    c.x[members[0]] + lo,
                                    (hi - lo) * sizeof(float));
        }
        s_cluster_free(&c);
    }
}

/* --- the compressed all-reduce ------------------------------------------- */

static void
test_allreduce_qsgd__members_0_2_3__mean_of_their_payloads(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 2, 3};
    struct rumor_gossip_opts o;
    s_opts(&o, "allreduce");
    o.compressed = true;
    snprintf(o.codec, sizeof o.codec, "qsgd:bits=4");
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, 10, 6, 4);
    s_members(&c, members, 3);
    rumor_codec *codec = NULL;
    assert_int_equal(rumor_codec_new(o.codec, &codec, NULL), RUMOR_OK);
    size_t cap = 0, written = 0;
    bool exact = false;
    assert_int_equal(rumor_codec_encoded_size(codec, 60, &cap, &exact),
                     RUMOR_OK);
    uint8_t *buf = malloc(cap);
    float dec[60];
    for (uint64_t step = 0; step < 3; step++) {
        double sum[64] = {0};
        for (uint32_t j = 0; j < 3; j++) {
            float *x = c.x[members[j]];
            s_fill(x, c.numel, step, members[j]);
            size_t base = 0, len[2] = {60, 4};
            for (size_t t = 0; t < 2; t++) {
                uint64_t seed = rumor_seed_derive(o.seed, members[j], t);
                assert_int_equal(rumor_codec_encode(codec,
                                                    x + base,
                                                    len[t],
                                                    seed,
                                                    step,
                                                    buf,
                                                    cap,
                                                    &written,
                                                    NULL),
                                 RUMOR_OK);
                assert_int_equal(
                    rumor_codec_decode(codec, buf, written, dec, len[t]),
                    RUMOR_OK);
                for (size_t e = 0; e < len[t]; e++)
                    sum[base + e] += 1.0 * dec[e];
                base += len[t];
            }
        }
        assert_int_equal(s_step(&c, members, 3, step), RUMOR_OK);
        for (uint32_t j = 0; j < 3; j++)
            for (size_t e = 0; e < c.numel; e++)
                assert_true(c.x[members[j]][e] == (float)(sum[e] / 3.0));
    }
    free(buf);
    rumor_codec_destroy(&codec);
    s_cluster_free(&c);
}

/* Error memories over {0, 1, 2} of 4 (the ids, so the seeds, of a 3-node
 * topology): ef with QSGD, and DGC whose clip divides by sqrt(N), N the
 * members. */
static void
test_allreduce_codec_ef__members_0_1_2__bits_of_three_nodes(void **state)
{
    (void)state;
    static const uint32_t members[] = {0, 1, 2};
    static const char *const setups[][2] = {
        {"qsgd:bits=4", "ef"},
        {"topk:ratio=0.25", "dgc:momentum=0.9,clip=2"},
    };
    for (size_t s = 0; s < 2; s++) {
        struct rumor_gossip_opts o;
        s_opts(&o, "allreduce");
        o.compressed = true;
        snprintf(o.codec, sizeof o.codec, "%s", setups[s][0]);
        snprintf(o.ef, sizeof o.ef, "%s", setups[s][1]);
        s_vs_three(&o, members, 4, s_fill);
    }
}

/* --- a lone member, refusals ---------------------------------------------- */

static void
test_members__lone_member__no_round(void **state)
{
    (void)state;
    static const uint32_t lone[] = {2};
    const char *algos[] = {"allreduce",
                           "allreduce-f64",
                           "powersgd",
                           "localsgd"};
    for (size_t a = 0; a < 4; a++) {
        struct rumor_gossip_opts o;
        s_opts(&o, algos[a]);
        struct cluster c;
        s_cluster_new(&c, "ring:4", &o, 6, 4, 2);
        assert_true(rumor_gossip_rounds(c.g[2], 0) > 0);
        assert_int_equal(rumor_gossip_members_set(c.g[2], lone, 1), RUMOR_OK);
        assert_int_equal(rumor_gossip_rounds(c.g[2], 0), 0);
        assert_int_equal(rumor_gossip_members_set(c.g[2], s_all, 4), RUMOR_OK);
        assert_true(rumor_gossip_rounds(c.g[2], 0) > 0);
        s_cluster_free(&c);
    }
}

/* Node 0's ring is still every node: 6 rounds, node 3 expected. */
static void
s_unchanged(rumor_gossip *g)
{
    uint32_t peer = 0;
    size_t count = 0;
    assert_int_equal(rumor_gossip_rounds(g, 0), 6);
    assert_int_equal(rumor_gossip_expected(g, 0, 0, &peer, 1, &count),
                     RUMOR_OK);
    assert_int_equal(count, 1);
    assert_int_equal(peer, 3);
}

static void
test_members__bad_lists_no_ring_mid_step__refused(void **state)
{
    (void)state;
    static const uint32_t unsorted[] = {2, 0, 3}, twice[] = {0, 0, 2},
                          outside[] = {0, 4}, without[] = {1, 2},
                          three[] = {0, 1, 2};
    struct rumor_gossip_opts o;
    s_opts(&o, "allreduce");
    struct cluster c;
    s_cluster_new(&c, "ring:4", &o, 6, 4, 2);
    rumor_gossip *g = c.g[0];
    assert_int_equal(rumor_gossip_members_set(g, unsorted, 3), RUMOR_EINVAL);
    assert_int_equal(rumor_gossip_members_set(g, twice, 3), RUMOR_EINVAL);
    assert_int_equal(rumor_gossip_members_set(g, outside, 2), RUMOR_EINVAL);
    assert_int_equal(rumor_gossip_members_set(g, without, 2), RUMOR_EINVAL);
    assert_int_equal(rumor_gossip_members_set(g, three, 0), RUMOR_EINVAL);
    assert_int_equal(rumor_gossip_members_set(g, NULL, 1), RUMOR_EINVAL);
    s_unchanged(g);
    /* in a step: refused until one of its calls fails */
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0;
    assert_int_equal(rumor_gossip_emit(g, 0, 0, &msgs, &count), RUMOR_OK);
    assert_int_equal(rumor_gossip_members_set(g, three, 3), RUMOR_EINVAL);
    s_unchanged(g);
    assert_int_equal(rumor_gossip_absorb(g, 0, 0, NULL, 0), RUMOR_ETIMEDOUT);
    assert_int_equal(rumor_gossip_members_set(g, three, 3), RUMOR_OK);
    assert_int_equal(rumor_gossip_rounds(g, 0), 4);
    s_cluster_free(&c);
    /* algorithms without a ring */
    const char *gossip[] = {"dpsgd", "localsgd"};
    for (size_t a = 0; a < 2; a++) {
        s_opts(&o, gossip[a]);
        o.gossip_rounds = 2; /* localsgd by plain gossip */
        s_cluster_new(&c, "ring:4", &o, 6, 4, 2);
        assert_int_equal(rumor_gossip_members_set(c.g[0], three, 3),
                         RUMOR_EINVAL);
        s_cluster_free(&c);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allreduce__members_0_2_3_of_4__mean_of_the_three),
        cmocka_unit_test(
            test_powersgd__members_0_1_3_of_4__bits_of_three_nodes),
        cmocka_unit_test(
            test_allreduce_f64__4_3_4_members__mean_of_the_current_ones),
        cmocka_unit_test(
            test_powersgd__4_3_4_members__mean_of_the_current_ones_same_q),
        cmocka_unit_test(
            test_localsgd__members_0_2_3_of_4__bits_of_three_nodes),
        cmocka_unit_test(
            test_localsgd__saef_neighbourhood__errors_to_members_only),
        cmocka_unit_test(
            test_allreduce_qsgd__members_0_2_3__mean_of_their_payloads),
        cmocka_unit_test(
            test_allreduce_codec_ef__members_0_1_2__bits_of_three_nodes),
        cmocka_unit_test(test_members__lone_member__no_round),
        cmocka_unit_test(test_members__bad_lists_no_ring_mid_step__refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
