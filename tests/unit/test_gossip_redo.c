/*
 * Elastic rings' step redo and state adoption (docs/reliability.md,
 * "Elastic rings: the design"): rumor_gossip_step_abandon,
 * rumor_gossip_state_load of the state saved before the step, and
 * rumor_gossip_state_adopt.
 *   - Redo: on 4 nodes, steps 0..k-1; every node saves its state (and the
 *     caller keeps its model); step k runs part way on every node (every
 *     cut: k's rounds 0..cut-1, then round cut's emit); every node
 *     abandons and loads what it saved; the survivors (3 of them, or all
 *     4) run step k again and two more. The survivors' models and saved
 *     states are bit for bit those of a reference cluster that ran steps
 *     0..k-1 on 4 and then went straight to the survivors' ring: for
 *     allreduce, allreduce-f64, PowerSGD (default, rank 2 one-sided with
 *     1 and 3 iterations, no error feedback, no warm start, the adaptive
 *     rank), exact local SGD (period 1 with an outer step, period 3, and
 *     a top-k delta with the neighbourhood look-ahead) and the compressed
 *     all-reduce with error feedback (QSGD with ef, top-k with DGC).
 *   - Adopt: a fresh PowerSGD node that takes a member's state (and
 *     model) runs the next steps with the others to the same bits, its
 *     error memory zero until its first step; a node that adopts keeps
 *     its own error memory; the adaptive rank comes over; local SGD's
 *     anchor comes over and its error memory stays; the compressed
 *     all-reduce keeps every memory; bad bytes and algorithms without a
 *     ring are refused with nothing changed.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES   4
#define ROWS    16
#define COLS    12
#define BIAS    5
#define NUMEL   (ROWS * COLS + BIAS)
#define ALGO_AT 8 /* the algorithm's name in a state: after magic, version */
#define SELF_AT (ALGO_AT + RUMOR_GOSSIP_ALGO_BYTES)
/* the header: magic, version, name, self, nodes, numel, the robust
 * history (steps, EMA), body length */
#define HEADER (SELF_AT + 8 + 8 + 16 + 8)

static const uint32_t s_all[] = {0, 1, 2, 3};
static const uint32_t s_three[] = {0, 1, 3};

struct cluster {
    rumor_topology *topo;
    float x[NODES][NUMEL];
    rumor_gossip *g[NODES];
};

static void
s_new_node(struct cluster *c, const struct rumor_gossip_opts *o, uint32_t i)
{
    struct rumor_diag diag = {0};
    struct rumor_tensor tensors[2] = {
        {c->x[i], 2, {ROWS, COLS}},
        {c->x[i] + ROWS * COLS, 1, {BIAS}},
    };
    struct rumor_model model = {tensors, 2};
    rumor_gossip_destroy(&c->g[i]);
    if (rumor_gossip_new(o, c->topo, i, &model, &c->g[i], &diag) != RUMOR_OK)
        fail_msg("gossip_new: %s", diag.msg);
}

static struct cluster *
s_cluster_new(const struct rumor_gossip_opts *o)
{
    struct cluster *c = calloc(1, sizeof *c);
    assert_non_null(c);
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &c->topo, NULL),
                     RUMOR_OK);
    for (uint32_t i = 0; i < NODES; i++)
        s_new_node(c, o, i);
    return c;
}

static void
s_cluster_free(struct cluster *c)
{
    for (size_t i = 0; i < NODES; i++)
        rumor_gossip_destroy(&c->g[i]);
    rumor_topology_destroy(&c->topo);
    free(c);
}

static void
s_opts(struct rumor_gossip_opts *o, const char *algo)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "%s", algo);
    o->rank = 1; /* the layouts below are rank 1's (powersgd's default: 4) */
}

/* What a node does before a step's exchange: the look-ahead, then local
 * training (step 0 sets a model that depends on the node). */
static void
s_prepare(struct cluster *c, const uint32_t *m, size_t k, uint64_t step)
{
    for (size_t i = 0; i < k; i++) {
        float *x = c->x[m[i]];
        assert_int_equal(rumor_gossip_step_ahead(c->g[m[i]]), RUMOR_OK);
        struct rumor_rng rng;
        rumor_rng_init(&rng, 42, step * 64 + m[i]);
        for (size_t e = 0; e < NUMEL; e++) {
            double noise = rumor_rng_normal(&rng);
            x[e] = step == 0 ? (float)noise + (float)m[i]
                             : x[e] + 0.05f * (float)noise - 0.01f * x[e];
        }
    }
}

/* Round r of a step on the members: every member emits; with absorb,
 * each then takes the messages addressed to it. */
static void
s_round(struct cluster *c,
        const uint32_t *m,
        size_t k,
        uint64_t step,
        uint32_t r,
        bool absorb)
{
    const struct rumor_gossip_msg *sent[NODES] = {0};
    size_t count[NODES] = {0};
    for (size_t i = 0; i < k; i++)
        assert_int_equal(
            rumor_gossip_emit(c->g[m[i]], step, r, &sent[m[i]], &count[m[i]]),
            RUMOR_OK);
    for (size_t i = 0; i < k && absorb; i++) {
        struct rumor_gossip_msg inbox[NODES];
        size_t got = 0;
        for (size_t j = 0; j < k; j++)
            for (size_t q = 0; q < count[m[j]]; q++)
                if (sent[m[j]][q].peer == m[i]) {
                    inbox[got] = sent[m[j]][q];
                    inbox[got++].peer = m[j];
                }
        assert_int_equal(rumor_gossip_absorb(c->g[m[i]], step, r, inbox, got),
                         RUMOR_OK);
    }
}

static void
s_step(struct cluster *c, const uint32_t *m, size_t k, uint64_t step)
{
    uint32_t rounds = rumor_gossip_rounds(c->g[m[0]], step);
    for (uint32_t r = 0; r < rounds; r++)
        s_round(c, m, k, step, r, true);
}

static void
s_save(const rumor_gossip *g, rumor_buf *b)
{
    rumor_buf_init(b, (size_t)1 << 26);
    assert_int_equal(rumor_gossip_state_save(g, b), RUMOR_OK);
}

static void
s_members(struct cluster *c, const uint32_t *m, size_t k)
{
    for (size_t i = 0; i < k; i++)
        assert_int_equal(rumor_gossip_members_set(c->g[m[i]], m, k), RUMOR_OK);
}

/* The members of a and b have the same models and save the same bytes. */
static void
s_same(struct cluster *a, struct cluster *b, const uint32_t *m, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        assert_memory_equal(a->x[m[i]], b->x[m[i]], sizeof a->x[0]);
        rumor_buf sa, sb;
        s_save(a->g[m[i]], &sa);
        s_save(b->g[m[i]], &sb);
        assert_int_equal(sa.len, sb.len);
        assert_memory_equal(sa.data, sb.data, sa.len);
        rumor_buf_free(&sa);
        rumor_buf_free(&sb);
    }
}

/* Step k cut after `cut` rounds (and round cut's emit) on every node,
 * abandoned, the saved states loaded (nodes 1 and 3 without abandoning
 * first: the load abandons), and run again by the survivors m, against a
 * cluster that ran step k on m straight away; then two more steps on m.
 * Before the result (every cut here), the step has left each model as it
 * was. */
static void
s_redo_at(const struct rumor_gossip_opts *o,
          uint64_t k,
          uint32_t cut,
          const uint32_t *m,
          size_t mk)
{
    struct cluster *a = s_cluster_new(o), *b = s_cluster_new(o);
    for (uint64_t step = 0; step <= k; step++) {
        s_prepare(a, s_all, NODES, step);
        s_prepare(b, s_all, NODES, step);
        if (step < k) {
            s_step(a, s_all, NODES, step);
            s_step(b, s_all, NODES, step);
        }
    }
    rumor_buf saved[NODES];
    for (uint32_t i = 0; i < NODES; i++)
        s_save(a->g[i], &saved[i]);
    for (uint32_t r = 0; r <= cut; r++)
        s_round(a, s_all, NODES, k, r, r < cut);
    struct rumor_diag diag = {0};
    for (uint32_t i = 0; i < NODES; i++) {
        if (i % 2 == 0)
            rumor_gossip_step_abandon(a->g[i]);
        assert_int_equal(rumor_gossip_state_load(a->g[i],
                                                 saved[i].data,
                                                 saved[i].len,
                                                 &diag),
                         RUMOR_OK);
        assert_memory_equal(a->x[i], b->x[i], sizeof a->x[i]);
        rumor_buf_free(&saved[i]);
    }
    s_members(a, m, mk);
    s_members(b, m, mk);
    for (uint64_t step = k; step < k + 3; step++) {
        if (step > k) {
            s_prepare(a, m, mk, step);
            s_prepare(b, m, mk, step);
        }
        s_step(a, m, mk, step);
        s_step(b, m, mk, step);
        s_same(a, b, m, mk);
    }
    s_cluster_free(a);
    s_cluster_free(b);
}

/* Rounds of a step after the one that applies its result: local SGD's
 * error round (its neighbourhood look-ahead). A node past the result
 * holds it: the view change completes that step, never drops it. */
static uint32_t
s_after_result(const struct rumor_gossip_opts *o)
{
    return o->delta_codec[0] != '\0' && o->ef_alpha > 0 ? 1 : 0;
}

/* Every cut of step k before its result, redone by 3 survivors and by
 * all 4. */
static void
s_redo(const struct rumor_gossip_opts *o, uint64_t k)
{
    struct cluster *c = s_cluster_new(o);
    for (uint64_t step = 0; step < k; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    uint32_t rounds = rumor_gossip_rounds(c->g[0], k) - s_after_result(o);
    s_cluster_free(c);
    assert_true(rounds > 1);
    for (uint32_t cut = 0; cut < rounds; cut++) {
        s_redo_at(o, k, cut, s_three, 3);
        s_redo_at(o, k, cut, s_all, NODES);
    }
}

static void
test_redo__allreduce__bits_of_the_direct_run(void **state)
{
    (void)state;
    const char *algos[] = {"allreduce", "allreduce-f64"};
    for (size_t a = 0; a < 2; a++) {
        struct rumor_gossip_opts o;
        s_opts(&o, algos[a]);
        s_redo(&o, 2);
    }
}

static void
test_redo__powersgd__bits_of_the_direct_run(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd"); /* rank 1, error feedback, warm start */
    s_redo(&o, 0);          /* the first step draws Q and makes memories */
    s_redo(&o, 2);
    s_opts(&o, "powersgd");
    o.rank = 2;
    o.one_sided = true;
    s_redo(&o, 2);
    o.iterations = 3; /* writes into the model mid-step */
    s_redo(&o, 2);
    s_opts(&o, "powersgd");
    o.use_error_feedback = false;
    s_redo(&o, 2);
    s_opts(&o, "powersgd");
    o.warm_start = false;
    s_redo(&o, 2);
    s_opts(&o, "powersgd");
    o.start_iter = 2; /* a plain step, then the first compressed one */
    s_redo(&o, 1);
    s_redo(&o, 2);
}

/* The rule decides at phase A's end and changes the rank at the step's
 * end: an abandoned step must leave neither. */
static void
test_redo__powersgd_adaptive_rank__bits_of_the_direct_run(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.adapt_error = 0.05; /* every step above it: the rank doubles */
    o.adapt_rank_max = 4;
    for (uint64_t k = 1; k <= 4; k++)
        s_redo(&o, k);
}

/* The rank after step 1 run on the members m (step 0 on all). */
static size_t
s_rank_after_step_1(const struct rumor_gossip_opts *o,
                    const uint32_t *m,
                    size_t mk)
{
    struct cluster *c = s_cluster_new(o);
    s_prepare(c, s_all, NODES, 0);
    s_step(c, s_all, NODES, 0);
    s_prepare(c, s_all, NODES, 1);
    s_members(c, m, mk);
    s_step(c, m, mk, 1);
    struct rumor_gossip_rank_report r;
    assert_true(rumor_gossip_adapt_rank(c->g[0], &r));
    s_cluster_free(c);
    return r.rank;
}

/* A budget under which the 4 nodes' attempt at step 1 decides a new rank
 * and the 3 survivors' redo keeps it: the attempt's decision must not
 * outlive its abandon. */
static void
test_redo__powersgd_rule_attempt_decides_otherwise(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.rank = 2;
    bool found = false;
    for (o.adapt_error = 0.02; o.adapt_error < 4 && !found;
         o.adapt_error *= 1.01)
        found = s_rank_after_step_1(&o, s_all, NODES) != o.rank &&
                s_rank_after_step_1(&o, s_three, 3) == o.rank;
    assert_true(found);
    o.adapt_error /= 1.01;
    s_redo(&o, 1);
}

static void
test_redo__localsgd__bits_of_the_direct_run(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "localsgd");
    o.outer_lr = 0.7;
    o.outer_momentum = 0.6;
    s_redo(&o, 0); /* the first sync makes the anchor */
    s_redo(&o, 2);
    s_opts(&o, "localsgd");
    o.period = 3;
    s_redo(&o, 3);
    s_opts(&o, "localsgd");
    o.ef_alpha = 0.5; /* neighbourhood look-ahead: an error round */
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    s_redo(&o, 2);
    o.period = 2;
    s_redo(&o, 4);
    /* streaming fragments: a fragment's first sync and a later one, exact
     * and compressed (own-error look-ahead) */
    s_opts(&o, "localsgd");
    o.period = 3;
    o.fragments = 3;
    o.outer_lr = 0.7;
    o.outer_momentum = 0.6;
    s_redo(&o, 1);
    s_redo(&o, 4);
    s_opts(&o, "localsgd");
    o.period = 2;
    o.fragments = 2;
    o.ef_alpha = 0.5;
    snprintf(o.saef_scope, sizeof o.saef_scope, "self");
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    s_redo(&o, 3);
    snprintf(o.saef_scope, sizeof o.saef_scope, "neighbourhood");
    s_redo(&o, 3);
    s_redo(&o, 4);
}

static void
test_redo__allreduce_codec_ef__bits_of_the_direct_run(void **state)
{
    (void)state;
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
        s_redo(&o, 2);
    }
}

/* --- adopt ----------------------------------------------------------------
 * PowerSGD's body without adapt: u64 step, u64 q floats, Q, u64 p floats,
 * P, then the matrix's u64 floats (0: none yet) and its error memory. */

static uint64_t
s_u64(const rumor_buf *b, size_t at)
{
    uint64_t v = 0;
    assert_true(at + 8 <= b->len);
    memcpy(&v, b->data + at, 8);
    return v;
}

/* Where the shared part of a PowerSGD state ends (the matrix's memory
 * block starts). */
static size_t
s_psgd_shared_end(const rumor_buf *b)
{
    size_t at = HEADER + 8;
    at += 8 + 4 * s_u64(b, at);
    at += 8 + 4 * s_u64(b, at);
    return at;
}

/* The matrix's error memory of g (zeros when it has none yet). */
static void
s_psgd_memory(const rumor_gossip *g, float *e)
{
    rumor_buf b;
    s_save(g, &b);
    size_t at = s_psgd_shared_end(&b);
    uint64_t n = s_u64(&b, at);
    assert_true(n == 0 || n == ROWS * COLS);
    memset(e, 0, ROWS * COLS * sizeof *e);
    if (n > 0)
        memcpy(e, b.data + at + 8, ROWS * COLS * sizeof *e);
    rumor_buf_free(&b);
}

/* The shared parts (after the header) of two PowerSGD states are equal. */
static void
s_psgd_same_shared(const rumor_gossip *a, const rumor_gossip *b)
{
    rumor_buf sa, sb;
    s_save(a, &sa);
    s_save(b, &sb);
    size_t end = s_psgd_shared_end(&sa);
    assert_int_equal(s_psgd_shared_end(&sb), end);
    assert_memory_equal(sa.data + HEADER, sb.data + HEADER, end - HEADER);
    rumor_buf_free(&sa);
    rumor_buf_free(&sb);
}

static void
s_adopt(rumor_gossip *to, const rumor_gossip *from)
{
    rumor_buf b;
    s_save(from, &b);
    struct rumor_diag diag = {0};
    if (rumor_gossip_state_adopt(to, b.data, b.len, &diag) != RUMOR_OK)
        fail_msg("adopt: %s", diag.msg);
    rumor_buf_free(&b);
}

/* Node 2 restarts after step k - 1 (a fresh instance), takes node 1's
 * state and model and runs on with the others: every model the same bits
 * at every step; node 2's memory is zero after the adopt; node 3, which
 * adopts node 0's state too, keeps its own memory. */
static void
s_psgd_rejoin(const struct rumor_gossip_opts *o, uint64_t k)
{
    struct cluster *c = s_cluster_new(o);
    for (uint64_t step = 0; step < k; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    s_new_node(c, o, 2);
    s_adopt(c->g[2], c->g[1]);
    memcpy(c->x[2], c->x[1], sizeof c->x[1]);
    float e[ROWS * COLS], before[ROWS * COLS], zero[ROWS * COLS] = {0};
    s_psgd_memory(c->g[2], e);
    assert_memory_equal(e, zero, sizeof e);
    s_psgd_memory(c->g[3], before);
    s_adopt(c->g[3], c->g[0]);
    s_psgd_memory(c->g[3], e);
    assert_memory_equal(e, before, sizeof e);
    for (uint32_t i = 0; i < NODES; i++)
        s_psgd_same_shared(c->g[i], c->g[0]);
    for (uint64_t step = k; step < k + 3; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
        for (uint32_t i = 1; i < NODES; i++) {
            assert_memory_equal(c->x[i], c->x[0], sizeof c->x[0]);
            s_psgd_same_shared(c->g[i], c->g[0]);
        }
    }
    s_cluster_free(c);
}

static void
test_adopt__powersgd__same_model_own_memory(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    s_psgd_rejoin(&o, 3);
    o.rank = 2;
    o.one_sided = true;
    s_psgd_rejoin(&o, 3);
}

static void
test_adopt__powersgd_adaptive_rank__the_rank_comes_over(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    snprintf(o.adapt, sizeof o.adapt, "rule");
    o.adapt_error = 0.05;
    o.adapt_rank_max = 4;
    struct cluster *c = s_cluster_new(&o);
    for (uint64_t step = 0; step < 4; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    struct rumor_gossip_rank_report r0, r2;
    assert_true(rumor_gossip_adapt_rank(c->g[0], &r0));
    assert_true(r0.rank > 1);
    s_new_node(c, &o, 2);
    s_adopt(c->g[2], c->g[1]);
    memcpy(c->x[2], c->x[1], sizeof c->x[1]);
    assert_true(rumor_gossip_adapt_rank(c->g[2], &r2));
    assert_int_equal(r2.rank, r0.rank);
    assert_int_equal(r2.changes, r0.changes);
    /* its own error sums (after u64 rank, hold, changes, f64 error) are
     * zero: it has measured nothing */
    rumor_buf b;
    s_save(c->g[2], &b);
    float sums[2];
    memcpy(sums, b.data + HEADER + 32, sizeof sums);
    assert_true(sums[0] == 0 && sums[1] == 0);
    rumor_buf_free(&b);
    for (uint64_t step = 4; step < 7; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
        for (uint32_t i = 1; i < NODES; i++)
            assert_memory_equal(c->x[i], c->x[0], sizeof c->x[0]);
    }
    s_cluster_free(c);
}

/* local SGD's state: u32 flags (1 anchor, 2 look-ahead by e_bar, 4 have
 * e_bar), f32 ahead, anchor, velocity, shift; then what is the node's own:
 * the error memory, e_bar, and the (stateless) mixer's state. */
#define LSGD_AHEAD (HEADER + 4)
#define LSGD_OWN   (LSGD_AHEAD + 4 + 3 * 4 * NUMEL)

static uint32_t
s_flags(const rumor_buf *b)
{
    uint32_t v = 0;
    memcpy(&v, b->data + HEADER, 4);
    return v;
}

/* to, after adopting from's state, has from's shared part and own's own
 * part (own: to's state before). */
static void
s_lsgd_adopted(const rumor_buf *to, const rumor_buf *from, const rumor_buf *own)
{
    assert_int_equal(s_flags(to) & 3u, s_flags(from) & 3u);
    assert_int_equal(s_flags(to) & 4u, s_flags(own) & 4u);
    assert_memory_equal(to->data + LSGD_AHEAD,
                        from->data + LSGD_AHEAD,
                        LSGD_OWN - LSGD_AHEAD);
    assert_int_equal(to->len, own->len);
    assert_memory_equal(to->data + LSGD_OWN,
                        own->data + LSGD_OWN,
                        own->len - LSGD_OWN);
}

/* Node 3 adopts node 0's state, a fresh node 2 node 1's (and its model):
 * anchor, velocity and look-ahead come over, error memory and e_bar stay
 * (zero and none for the fresh one), and the syncs go on with the same
 * model on every node. */
static void
test_adopt__localsgd__anchor_comes_over_memory_stays(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "localsgd");
    o.outer_lr = 0.7;
    o.outer_momentum = 0.6;
    o.ef_alpha = 0.5;
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    struct cluster *c = s_cluster_new(&o);
    for (uint64_t step = 0; step < 3; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    rumor_buf own, from, fresh, now;
    s_save(c->g[3], &own);
    s_save(c->g[0], &from);
    assert_true(s_flags(&own) & 4u); /* it has an e_bar to keep */
    s_adopt(c->g[3], c->g[0]);
    s_save(c->g[3], &now);
    s_lsgd_adopted(&now, &from, &own);
    rumor_buf_free(&own);
    rumor_buf_free(&from);
    rumor_buf_free(&now);
    s_new_node(c, &o, 2);
    s_save(c->g[2], &fresh);
    s_save(c->g[1], &from);
    s_adopt(c->g[2], c->g[1]);
    memcpy(c->x[2], c->x[1], sizeof c->x[1]);
    s_save(c->g[2], &now);
    s_lsgd_adopted(&now, &from, &fresh);
    rumor_buf_free(&fresh);
    rumor_buf_free(&from);
    rumor_buf_free(&now);
    for (uint64_t step = 3; step < 6; step++) { /* the syncs agree */
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
        for (uint32_t i = 1; i < NODES; i++)
            assert_memory_equal(c->x[i], c->x[0], sizeof c->x[0]);
    }
    s_cluster_free(c);
}

/* With fragments, node 3 adopts node 0's state (and model): the anchor,
 * velocity and shift (after the fragments' blobs) come over, the error
 * memories stay (the states still differ), and each fragment's syncs
 * agree on its elements. */
static void
test_adopt__localsgd_fragments__anchor_comes_over(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "localsgd");
    o.period = 2;
    o.fragments = 2;
    o.outer_lr = 0.7;
    o.outer_momentum = 0.6;
    o.ef_alpha = 0.5;
    snprintf(o.saef_scope, sizeof o.saef_scope, "self");
    snprintf(o.delta_codec, sizeof o.delta_codec, "topk:ratio=0.25");
    struct cluster *c = s_cluster_new(&o);
    for (uint64_t step = 0; step < 4; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    rumor_buf from, now;
    s_adopt(c->g[3], c->g[0]);
    memcpy(c->x[3], c->x[0], sizeof c->x[0]);
    s_save(c->g[0], &from);
    s_save(c->g[3], &now);
    size_t tail = 3 * NUMEL * sizeof(float) + 8; /* and no e_bar */
    assert_int_equal(now.len, from.len);
    assert_memory_equal(now.data + now.len - tail,
                        from.data + from.len - tail,
                        tail);
    assert_true(memcmp(now.data, from.data, now.len - tail) != 0);
    rumor_buf_free(&from);
    rumor_buf_free(&now);
    for (uint64_t step = 4; step < 8; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
        size_t lo = step % 2 * NUMEL / 2, hi = (step % 2 + 1) * NUMEL / 2;
        for (uint32_t i = 1; i < NODES; i++)
            assert_memory_equal(c->x[i] + lo,
                                c->x[0] + lo,
                                (hi - lo) * sizeof(float));
    }
    s_cluster_free(c);
}

/* Only error memories: an adopt changes nothing. */
static void
test_adopt__allreduce_codec_ef__own_memories_stay(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "allreduce");
    o.compressed = true;
    snprintf(o.codec, sizeof o.codec, "topk:ratio=0.25");
    snprintf(o.ef, sizeof o.ef, "dgc:momentum=0.9,clip=2");
    struct cluster *c = s_cluster_new(&o);
    for (uint64_t step = 0; step < 2; step++) {
        s_prepare(c, s_all, NODES, step);
        s_step(c, s_all, NODES, step);
    }
    rumor_buf before, after;
    s_save(c->g[3], &before);
    s_adopt(c->g[3], c->g[0]);
    s_save(c->g[3], &after);
    assert_int_equal(before.len, after.len);
    assert_memory_equal(before.data, after.data, before.len);
    rumor_buf_free(&before);
    rumor_buf_free(&after);
    s_cluster_free(c);
}

/* err from an adopt of len bytes of data into g, which stays as it was. */
static void
s_refused(rumor_gossip *g, const uint8_t *data, size_t len, rumor_err err)
{
    rumor_buf before, after;
    s_save(g, &before);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_state_adopt(g, data, len, &diag), err);
    assert_true(diag.msg[0] != '\0');
    s_save(g, &after);
    assert_int_equal(before.len, after.len);
    assert_memory_equal(before.data, after.data, before.len);
    rumor_buf_free(&before);
    rumor_buf_free(&after);
}

static void
test_adopt__bad_bytes_and_no_ring__refused_unchanged(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    struct cluster *c = s_cluster_new(&o);
    s_prepare(c, s_all, NODES, 0);
    s_step(c, s_all, NODES, 0);
    rumor_buf b;
    s_save(c->g[1], &b);
    for (size_t cut = 1; cut < b.len; cut += 7)
        s_refused(c->g[2], b.data, b.len - cut, RUMOR_EPROTO);
    memset(b.data + HEADER + 8 + 8, 0xff, 4); /* Q's first float: a NaN */
    s_refused(c->g[2], b.data, b.len, RUMOR_ENUMERIC);
    rumor_buf_free(&b);
    /* another algorithm's (ring) state */
    struct rumor_gossip_opts ar;
    s_opts(&ar, "allreduce");
    struct cluster *d = s_cluster_new(&ar);
    s_save(d->g[1], &b);
    s_refused(c->g[2], b.data, b.len, RUMOR_EPROTO);
    rumor_buf_free(&b);
    /* another topology's */
    s_save(c->g[1], &b);
    b.data[SELF_AT + 4] = 5;
    s_refused(c->g[2], b.data, b.len, RUMOR_EPROTO);
    rumor_buf_free(&b);
    s_cluster_free(d);
    /* no ring: a node's state is its own */
    struct rumor_gossip_opts ch;
    s_opts(&ch, "choco");
    d = s_cluster_new(&ch);
    s_save(d->g[1], &b);
    s_refused(d->g[2], b.data, b.len, RUMOR_EINVAL);
    rumor_buf_free(&b);
    s_cluster_free(d);
    s_cluster_free(c);
}

/* A load still wants the node's own state; abandon between steps is a
 * no-op, and mid-step it lets the members change. */
static void
test_abandon__members_accepted_load_still_own(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, "powersgd");
    struct cluster *c = s_cluster_new(&o);
    s_prepare(c, s_all, NODES, 0);
    s_step(c, s_all, NODES, 0);
    rumor_buf b;
    s_save(c->g[1], &b);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_gossip_state_load(c->g[2], b.data, b.len, &diag),
                     RUMOR_EPROTO);
    rumor_buf_free(&b);
    rumor_buf before, after;
    s_save(c->g[0], &before);
    rumor_gossip_step_abandon(c->g[0]);
    s_save(c->g[0], &after);
    assert_memory_equal(before.data, after.data, before.len);
    rumor_buf_free(&after);
    s_round(c, s_all, NODES, 1, 0, true);
    assert_int_equal(rumor_gossip_members_set(c->g[0], s_three, 3),
                     RUMOR_EINVAL);
    rumor_gossip_step_abandon(c->g[0]);
    assert_int_equal(rumor_gossip_members_set(c->g[0], s_three, 3), RUMOR_OK);
    rumor_buf_free(&before);
    s_cluster_free(c);
    /* exact local SGD: its mixer's step ends too */
    s_opts(&o, "localsgd");
    c = s_cluster_new(&o);
    s_prepare(c, s_all, NODES, 0);
    s_round(c, s_all, NODES, 0, 0, true);
    assert_int_equal(rumor_gossip_members_set(c->g[0], s_three, 3),
                     RUMOR_EINVAL);
    rumor_gossip_step_abandon(c->g[0]);
    assert_int_equal(rumor_gossip_members_set(c->g[0], s_three, 3), RUMOR_OK);
    s_cluster_free(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redo__allreduce__bits_of_the_direct_run),
        cmocka_unit_test(test_redo__powersgd__bits_of_the_direct_run),
        cmocka_unit_test(
            test_redo__powersgd_adaptive_rank__bits_of_the_direct_run),
        cmocka_unit_test(test_redo__powersgd_rule_attempt_decides_otherwise),
        cmocka_unit_test(test_redo__localsgd__bits_of_the_direct_run),
        cmocka_unit_test(test_redo__allreduce_codec_ef__bits_of_the_direct_run),
        cmocka_unit_test(test_adopt__powersgd__same_model_own_memory),
        cmocka_unit_test(
            test_adopt__powersgd_adaptive_rank__the_rank_comes_over),
        cmocka_unit_test(test_adopt__localsgd__anchor_comes_over_memory_stays),
        cmocka_unit_test(test_adopt__localsgd_fragments__anchor_comes_over),
        cmocka_unit_test(test_adopt__allreduce_codec_ef__own_memories_stay),
        cmocka_unit_test(test_adopt__bad_bytes_and_no_ring__refused_unchanged),
        cmocka_unit_test(test_abandon__members_accepted_load_still_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
