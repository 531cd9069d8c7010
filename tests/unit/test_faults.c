/*
 * Skipping neighbours (gossip/edges.c) in one process: D-PSGD, PowerGossip,
 * CHOCO and DeepSqueeze nodes (Moniqua: loss-free bits only) driven by hand
 * round by round, with messages and acknowledgements dropped at random. The
 * network average must stay where it was (1e-6) however many are lost, and a
 * control run that applies every term it receives without waiting for the
 * acknowledgement must lose it (so the check can fail). For PowerGossip and
 * CHOCO the per-edge state (factors, copies) must stay equal at both ends too,
 * or their terms stop cancelling: the same average check sees it, and the
 * models must still come together after the losses. Also: the ack codec,
 * loss-free bits equal to the simulator, screening (NaN, Inf, wrong size,
 * clipping), and the state-sync codec.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/node.h"

#include "node/faults.h"
#include "node/statesync.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DIM  24
#define ROWS 4 /* the model: a ROWS x COLS matrix and a ROWS bias */
#define COLS 5

struct net {
    rumor_topology *topo;
    size_t n;
    float **x;
    rumor_gossip **g;
};

static struct rumor_gossip_opts
s_opts(const char *algo, double clip)
{
    struct rumor_gossip_opts opts;
    rumor_gossip_opts_default(&opts);
    opts.clip_norm = clip;
    /* The ledger keeps the average exactly; the adaptive radius differs
     * between an edge's ends and would move it (tests/unit/test_robust.c
     * covers robust mixing): a fixed radius or none here. */
    snprintf(opts.robust, sizeof opts.robust, "off");
    snprintf(opts.algo, sizeof opts.algo, "%s", algo);
    if (strcmp(algo, "choco") == 0 || strcmp(algo, "deepsqueeze") == 0)
        opts.gamma = 0.5;
    opts.theta = 30; /* moniqua: the models start up to 24 apart */
    return opts;
}

static void
s_net_new_opts(struct net *c,
               const char *spec,
               const struct rumor_gossip_opts *opts)
{
    memset(c, 0, sizeof *c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &c->topo, &diag),
                     RUMOR_OK);
    c->n = rumor_topology_nodes(c->topo);
    c->x = calloc(c->n, sizeof *c->x);
    c->g = calloc(c->n, sizeof *c->g);
    for (size_t i = 0; i < c->n; i++) {
        c->x[i] = malloc(DIM * sizeof(float));
        struct rumor_rng rng;
        rumor_rng_init(&rng, 7, i);
        for (size_t e = 0; e < DIM; e++)
            c->x[i][e] = (float)(rumor_rng_normal(&rng) + 3.0 * (double)i);
        struct rumor_tensor t[2] = {{c->x[i], 2, {ROWS, COLS}},
                                    {c->x[i] + ROWS * COLS, 1, {ROWS}}};
        struct rumor_model m = {t, 2};
        assert_int_equal(
            rumor_gossip_new(opts, c->topo, (uint32_t)i, &m, &c->g[i], &diag),
            RUMOR_OK);
    }
}

static void
s_net_new_algo(struct net *c, const char *spec, double clip, const char *algo)
{
    struct rumor_gossip_opts opts = s_opts(algo, clip);
    s_net_new_opts(c, spec, &opts);
}

static void
s_net_new(struct net *c, const char *spec, double clip)
{
    s_net_new_algo(c, spec, clip, "dpsgd");
}

static void
s_net_free(struct net *c)
{
    for (size_t i = 0; i < c->n; i++) {
        rumor_gossip_destroy(&c->g[i]);
        free(c->x[i]);
    }
    free(c->x);
    free(c->g);
    rumor_topology_destroy(&c->topo);
}

/* The network average of element e, in double. */
static double
s_mean(const struct net *c, size_t e)
{
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += c->x[i][e];
    return s / (double)c->n;
}

static double
s_spread(const struct net *c)
{
    double worst = 0;
    for (size_t e = 0; e < DIM; e++)
        for (size_t i = 0; i < c->n; i++)
            worst = fmax(worst, fabs(c->x[i][e] - s_mean(c, e)));
    return worst;
}

static bool
s_drop(struct rumor_rng *rng, double p)
{
    return rumor_rng_uniform_double(rng) < p;
}

/* One step with each message and each ack lost with probability p. With
 * trust_receipt, a node settles its terms as if every ack said "held"
 * (the naive rule the protocol replaces). early: each message is staged
 * alone as it "comes" (rumor_gossip_absorb_one, last sender first), then
 * the round closes with the same messages, which it must not take twice. */
static void
s_step_how(struct net *c,
           uint64_t step,
           struct rumor_rng *rng,
           double p,
           bool trust_receipt,
           bool early)
{
    const struct rumor_gossip_msg *out[64];
    size_t outn[64];
    for (size_t i = 0; i < c->n; i++)
        assert_int_equal(rumor_gossip_emit(c->g[i], step, 0, &out[i], &outn[i]),
                         RUMOR_OK);
    for (size_t i = 0; i < c->n; i++) {
        struct rumor_gossip_msg inbox[64];
        size_t got = 0;
        for (size_t j = 0; j < c->n; j++)
            for (size_t m = 0; m < outn[j]; m++)
                if (out[j][m].peer == i && !s_drop(rng, p)) {
                    inbox[got] = out[j][m];
                    inbox[got].peer = (uint32_t)j;
                    got++;
                }
        for (size_t m = got; early && m > 0; m--)
            assert_int_equal(
                rumor_gossip_absorb_one(c->g[i], step, &inbox[m - 1]),
                RUMOR_OK);
        assert_int_equal(
            rumor_gossip_absorb_partial(c->g[i], step, 0, inbox, got),
            RUMOR_OK);
    }
    /* every neighbour of the step gets an ack, sent to or not (as
     * node/faults.c) */
    size_t phase = rumor_topology_phase_at(c->topo, step);
    for (size_t i = 0; i < c->n; i++) {
        size_t peers = 0;
        const uint32_t *nbr =
            rumor_topology_neighbors(c->topo, phase, (uint32_t)i, &peers, NULL);
        for (size_t m = 0; m < peers; m++) {
            uint32_t j = nbr[m];
            struct rumor_gossip_ack a;
            assert_int_equal(rumor_gossip_ack_make(c->g[i], j, &a), RUMOR_OK);
            if (trust_receipt) {
                /* j pretends i holds everything j staged */
                a.count = 0;
                uint64_t oldest = 0;
                (void)rumor_gossip_pending(c->g[j], (uint32_t)i, &oldest);
                for (uint64_t s = oldest; s <= step && s != UINT64_MAX; s++)
                    a.held[a.count++] = s;
                a.upto = step + 1;
            } else if (s_drop(rng, p)) {
                continue;
            }
            /* through the codec, as on the wire */
            uint8_t wire[RUMOR_GOSSIP_ACK_BYTES_MAX];
            size_t len = rumor_gossip_ack_encode(&a, wire, sizeof wire);
            struct rumor_gossip_ack back;
            assert_int_equal(rumor_gossip_ack_decode(wire, len, &back),
                             RUMOR_OK);
            assert_int_equal(rumor_gossip_ack_take(c->g[j], (uint32_t)i, &back),
                             RUMOR_OK);
        }
    }
    for (size_t i = 0; i < c->n; i++) {
        size_t applied = 0;
        assert_int_equal(rumor_gossip_commit(c->g[i], &applied), RUMOR_OK);
    }
}

static void
s_step(struct net *c,
       uint64_t step,
       struct rumor_rng *rng,
       double p,
       bool trust_receipt)
{
    s_step_how(c, step, rng, p, trust_receipt, false);
}

static void
test_ack__round_trip_and_bad_inputs__rejected(void **state)
{
    (void)state;
    struct rumor_gossip_ack a = {.upto = 100, .count = 3, .held = {4, 50, 99}};
    uint8_t buf[RUMOR_GOSSIP_ACK_BYTES_MAX];
    size_t len = rumor_gossip_ack_encode(&a, buf, sizeof buf);
    assert_int_equal(len, RUMOR_GOSSIP_ACK_HEADER_BYTES + 24);
    struct rumor_gossip_ack b;
    assert_int_equal(rumor_gossip_ack_decode(buf, len, &b), RUMOR_OK);
    assert_int_equal(b.upto, 100);
    assert_int_equal(b.count, 3);
    assert_int_equal(b.held[2], 99);
    assert_int_equal(rumor_gossip_ack_decode(buf, len - 1, &b), RUMOR_EPROTO);
    assert_int_equal(b.count, 0);
    assert_int_equal(rumor_gossip_ack_decode(buf, 3, &b), RUMOR_EPROTO);
    a.held[2] = 100; /* not decided yet */
    len = rumor_gossip_ack_encode(&a, buf, sizeof buf);
    assert_int_equal(rumor_gossip_ack_decode(buf, len, &b), RUMOR_EPROTO);
    a.held[2] = 50; /* not ascending */
    len = rumor_gossip_ack_encode(&a, buf, sizeof buf);
    assert_int_equal(rumor_gossip_ack_decode(buf, len, &b), RUMOR_EPROTO);
    buf[4] = 200; /* count over the cap */
    assert_int_equal(rumor_gossip_ack_decode(buf, len, &b), RUMOR_EPROTO);
    assert_int_equal(rumor_gossip_ack_encode(&a, buf, 10), 0);
}

/* 600 steps losing 30 % of messages and acks, then loss-free ones until
 * every edge has been active twice (acks go to the step's neighbours, so a
 * term staged on an edge settles when the edge is next active): nothing
 * left staged, the average where it was (1e-6), the spread down by the
 * factor given. */
static void
s_drops_with(const struct rumor_gossip_opts *opts,
             const char *spec,
             uint64_t seed,
             double shrink)
{
    const char *algo = opts->algo;
    struct net c;
    s_net_new_opts(&c, spec, opts);
    double mean0[DIM];
    for (size_t e = 0; e < DIM; e++)
        mean0[e] = s_mean(&c, e);
    double spread0 = s_spread(&c);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 99, seed);
    uint64_t step = 0;
    for (; step < 600; step++)
        s_step(&c, step, &rng, 0.3, false);
    for (size_t k = 0; k < 2 * rumor_topology_phases(c.topo); k++, step++)
        s_step(&c, step, &rng, 0, false);
    for (size_t i = 0; i < c.n; i++) {
        uint64_t oldest = 0;
        for (uint32_t j = 0; j < c.n; j++)
            assert_int_equal(rumor_gossip_pending(c.g[i], j, &oldest), 0);
    }
    for (size_t e = 0; e < DIM; e++)
        if (fabs(s_mean(&c, e) - mean0[e]) > 1e-6 * fmax(1, fabs(mean0[e])))
            fail_msg("%s %s: element %zu: mean %.9g, was %.9g",
                     algo,
                     spec,
                     e,
                     s_mean(&c, e),
                     mean0[e]);
    /* and the gossip did work: the models came together */
    if (!(s_spread(&c) < shrink * spread0))
        fail_msg("%s %s: spread %g from %g", algo, spec, s_spread(&c), spread0);
    s_net_free(&c);
}

static void
s_drops_on(const char *algo, const char *spec, uint64_t seed, double shrink)
{
    struct rumor_gossip_opts opts = s_opts(algo, 0);
    s_drops_with(&opts, spec, seed, shrink);
}

static void
s_drops_keep_average(const char *algo, double shrink)
{
    const char *specs[] = {"ring:8", "torus:3x3", "complete:5"};
    for (size_t s = 0; s < 3; s++)
        s_drops_on(algo, specs[s], s, shrink);
}

static void
test_skip__random_drops_600_steps__average_kept_to_1e6(void **state)
{
    (void)state;
    s_drops_keep_average("dpsgd", 1e-3);
}

static void
test_skip_powergossip__random_drops_600_steps__average_kept_to_1e6(void **state)
{
    (void)state;
    s_drops_keep_average("powergossip", 1e-3);
}

/* On a time-varying graph an edge moves only in its phases, and the side
 * of its power iteration follows its own count of iterations both ends
 * took: a skipped round must advance neither end's count, or the two ends
 * compute different sides, their terms stop cancelling and the average
 * moves. One-peer-exp:4 and :8 (2 and 3 phases). */
static void
test_skip_powergossip__one_peer_exp_drops__average_kept_models_meet(
    void **state)
{
    (void)state;
    s_drops_on("powergossip", "one-peer-exp:4", 0, 1e-3);
    s_drops_on("powergossip", "one-peer-exp:8", 1, 1e-3);
}

/* Without warm start each iteration draws its factor from the edge's
 * seed and its own count: a skipped round must advance neither end's
 * count, or the two ends draw different factors, their terms stop
 * cancelling and the average moves. */
static void
test_skip_powergossip_no_warm_start__drops__average_kept_models_meet(
    void **state)
{
    (void)state;
    struct rumor_gossip_opts opts = s_opts("powergossip", 0);
    opts.warm_start = false;
    s_drops_with(&opts, "one-peer-exp:4", 0, 1e-3);
    s_drops_with(&opts, "ring:8", 2, 1e-3);
}

static void
test_skip_choco__random_drops_600_steps__average_kept_to_1e6(void **state)
{
    (void)state;
    s_drops_keep_average("choco", 1e-3);
}

static void
test_skip_deepsqueeze__random_drops_600_steps__average_kept_to_1e6(void **state)
{
    (void)state;
    /* DeepSqueeze with qsgd at 4 bits plateaus (test_gossip.c): 6.6x
     * down in these 600 steps */
    s_drops_keep_average("deepsqueeze", 0.3);
}

/* Loss-free, the staged path gives the simulator's bits. */
static void
s_same_bits_as_simulator(const char *algo)
{
    struct net a, b;
    s_net_new_algo(&a, "torus:3x3", 0, algo);
    s_net_new_algo(&b, "torus:3x3", 0, algo);
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(b.g, b.n, &sim), RUMOR_OK);
    struct rumor_rng rng;
    rumor_rng_init(&rng, 1, 1);
    for (uint64_t step = 0; step < 20; step++) {
        s_step(&a, step, &rng, 0, false);
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
    }
    for (size_t i = 0; i < a.n; i++)
        assert_memory_equal(a.x[i], b.x[i], DIM * sizeof(float));
    rumor_sim_destroy(&sim);
    s_net_free(&a);
    s_net_free(&b);
}

static const char *const s_algos[] = {"dpsgd",
                                      "powergossip",
                                      "choco",
                                      "deepsqueeze",
                                      "moniqua"};
#define ALGOS (sizeof s_algos / sizeof s_algos[0])
/* Moniqua keeps the average only as well as its quantization noise lets
 * it (test_gossip.c), so the control cannot tell a drift from it: the
 * control runs the others. */
#define ALGOS_EXACT (ALGOS - 1)

static void
test_skip__applying_on_receipt__average_drifts(void **state)
{
    (void)state;
    for (size_t k = 0; k < ALGOS_EXACT; k++) {
        struct net c;
        s_net_new_algo(&c, "ring:8", 0, s_algos[k]);
        double mean0[DIM], worst = 0;
        for (size_t e = 0; e < DIM; e++)
            mean0[e] = s_mean(&c, e);
        struct rumor_rng rng;
        rumor_rng_init(&rng, 99, 0);
        for (uint64_t step = 0; step < 50; step++)
            s_step(&c, step, &rng, 0.3, true);
        for (size_t e = 0; e < DIM; e++)
            worst = fmax(worst, fabs(s_mean(&c, e) - mean0[e]));
        /* the naive rule loses the average by far more than the
         * tolerance */
        if (!(worst > 1e-2))
            fail_msg("%s: drift %g: the control did not break the average",
                     s_algos[k],
                     worst);
        s_net_free(&c);
    }
}

/* Staging each message as it comes (a stale exchange's early ACKs) gives
 * the bits of staging the round at once, with messages and acks lost; an
 * edge whose step is decided takes no second message of it, and a node
 * that is not a neighbour none. */
static void
test_skip__staged_as_they_come__same_bits_as_round_at_once(void **state)
{
    (void)state;
    for (size_t k = 0; k < ALGOS_EXACT; k++) {
        struct net a, b;
        s_net_new_algo(&a, "ring:8", 0, s_algos[k]);
        s_net_new_algo(&b, "ring:8", 0, s_algos[k]);
        struct rumor_rng ra, rb;
        rumor_rng_init(&ra, 99, 0);
        rumor_rng_init(&rb, 99, 0);
        for (uint64_t step = 0; step < 30; step++) {
            s_step_how(&a, step, &ra, 0.3, false, false);
            s_step_how(&b, step, &rb, 0.3, false, true);
            for (size_t i = 0; i < a.n; i++)
                if (memcmp(a.x[i], b.x[i], DIM * sizeof(float)) != 0)
                    fail_msg("%s: step %llu: node %zu differs",
                             s_algos[k],
                             (unsigned long long)step,
                             i);
        }
        const struct rumor_gossip_msg *out = NULL, *own = NULL;
        size_t n = 0, m = 0;
        assert_int_equal(rumor_gossip_emit(b.g[0], 30, 0, &own, &n), RUMOR_OK);
        assert_int_equal(rumor_gossip_emit(b.g[1], 30, 0, &out, &n), RUMOR_OK);
        while (m < n && out[m].peer != 0)
            m++;
        assert_true(m < n);
        struct rumor_gossip_msg from1 = {1, out[m].data, out[m].len};
        struct rumor_gossip_msg from4 = {4, out[m].data, out[m].len};
        struct rumor_gossip_ack ack;
        assert_int_equal(rumor_gossip_absorb_one(b.g[0], 30, &from1), RUMOR_OK);
        assert_int_equal(rumor_gossip_ack_make(b.g[0], 1, &ack), RUMOR_OK);
        assert_int_equal(ack.upto, 31);
        assert_int_equal(rumor_gossip_ack_make(b.g[0], 7, &ack), RUMOR_OK);
        assert_int_equal(ack.upto, 30); /* node 7's step 30 is open */
        assert_int_equal(rumor_gossip_absorb_one(b.g[0], 30, &from1),
                         RUMOR_EINVAL);
        assert_int_equal(rumor_gossip_absorb_one(b.g[0], 30, &from4),
                         RUMOR_EINVAL);
        s_net_free(&a);
        s_net_free(&b);
    }
}

static void
test_skip__no_loss__same_bits_as_simulator(void **state)
{
    (void)state;
    for (size_t k = 0; k < ALGOS; k++)
        s_same_bits_as_simulator(s_algos[k]);
}

/* Node 0 of a 3-ring receives msg as node 1's message and a copy of
 * node 2's own model; both acks say everything is held. */
static void
s_poison(struct net *c, const float *msg, size_t len)
{
    const struct rumor_gossip_msg *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
        assert_int_equal(rumor_gossip_emit(c->g[i], 0, 0, &out, &n), RUMOR_OK);
    struct rumor_gossip_msg inbox[2] = {
        {1, (const uint8_t *)msg, len},
        {2, (const uint8_t *)c->x[2], DIM * sizeof(float)},
    };
    assert_int_equal(rumor_gossip_absorb_partial(c->g[0], 0, 0, inbox, 2),
                     RUMOR_OK);
    struct rumor_gossip_ack all = {.upto = 1, .count = 1, .held = {0}};
    for (uint32_t j = 1; j < 3; j++)
        assert_int_equal(rumor_gossip_ack_take(c->g[0], j, &all), RUMOR_OK);
    size_t applied = 0;
    assert_int_equal(rumor_gossip_commit(c->g[0], &applied), RUMOR_OK);
}

static void
test_screen__nan_inf_wrong_size__rejected_counted_rest_applied(void **state)
{
    (void)state;
    float bad[DIM + 1];
    for (int kind = 0; kind < 3; kind++) {
        struct net c;
        s_net_new(&c, "ring:3", 0);
        float before[DIM], x2[DIM];
        memcpy(before, c.x[0], sizeof before);
        memcpy(x2, c.x[2], sizeof x2);
        memcpy(bad, c.x[1], DIM * sizeof(float));
        bad[5] = kind == 0 ? NAN : INFINITY;
        size_t len = (DIM + (kind == 2)) * sizeof(float);
        s_poison(&c, bad, len);
        /* only node 2's term moved node 0: w = 1/3, gamma = 1 */
        for (size_t e = 0; e < DIM; e++) {
            double want = before[e] + (1.0 / 3) * ((double)x2[e] - before[e]);
            assert_true(fabs(c.x[0][e] - want) < 1e-5 * fmax(1, fabs(want)));
        }
        struct rumor_gossip_screen_stats st;
        rumor_gossip_screen_stats(c.g[0], &st);
        assert_int_equal(st.nonfinite, kind < 2 ? 1 : 0);
        assert_int_equal(st.malformed, kind == 2 ? 1 : 0);
        assert_int_equal(st.clipped, 0);
        s_net_free(&c);
    }
}

static void
test_screen__huge_norm_with_clip__moves_at_most_gamma_w_tau(void **state)
{
    (void)state;
    const double tau = 0.5;
    struct net c;
    s_net_new(&c, "ring:3", tau);
    float before[DIM], huge[DIM];
    memcpy(before, c.x[0], sizeof before);
    /* node 2 sends node 0's own model back: no pull from it */
    memcpy(c.x[2], c.x[0], sizeof before);
    for (size_t e = 0; e < DIM; e++)
        huge[e] = before[e] + 1e6f;
    s_poison(&c, huge, sizeof huge);
    double moved = 0;
    for (size_t e = 0; e < DIM; e++)
        moved +=
            ((double)c.x[0][e] - before[e]) * ((double)c.x[0][e] - before[e]);
    moved = sqrt(moved);
    /* gamma 1, w 1/3: the clipped pull has norm tau / 3 exactly */
    assert_true(fabs(moved - tau / 3) < 1e-5);
    struct rumor_gossip_screen_stats st;
    rumor_gossip_screen_stats(c.g[0], &st);
    assert_int_equal(st.clipped, 1);
    assert_int_equal(st.nonfinite, 0);
    s_net_free(&c);
}

/* --- STATE messages ------------------------------------------------------ */

/* The model every STATE test sends: a 2 x 3 matrix and a 3-vector. */
static const float s_a[6] = {1, 2, 3, 4, 5, 6}, s_b[3] = {7, 8, 9};

/* A receiver's model of the same shapes, zeroed. */
struct into {
    float c[6], d[3];
    struct rumor_tensor u[2];
    struct rumor_model m;
};

static void
s_into_init(struct into *in)
{
    memset(in, 0, sizeof *in);
    in->u[0] = (struct rumor_tensor){in->c, 2, {2, 3}};
    in->u[1] = (struct rumor_tensor){in->d, 1, {3}};
    in->m = (struct rumor_model){in->u, 2};
}

static void
s_assert_untouched(const struct into *in, const struct node_state_parts *p)
{
    for (int k = 0; k < 6; k++)
        assert_true(in->c[k] == 0);
    for (int k = 0; k < 3; k++)
        assert_true(in->d[k] == 0);
    assert_int_equal(p->step, 0);
    assert_int_equal(p->epoch, 0);
    assert_null(p->optim);
    assert_int_equal(p->optim_len, 0);
    assert_null(p->gossip);
    assert_int_equal(p->gossip_len, 0);
}

/* Encodes {s_a, s_b} with p into out (cap bytes); returns the length. */
static size_t
s_state_of(const struct node_state_parts *p, uint8_t *out, size_t cap)
{
    float a[6], b[3];
    memcpy(a, s_a, sizeof a);
    memcpy(b, s_b, sizeof b);
    struct rumor_tensor t[2] = {{a, 2, {2, 3}}, {b, 1, {3}}};
    struct rumor_model m = {t, 2};
    size_t len = node_state_encode(&m, p, out, cap);
    assert_int_equal(len, node_state_bytes(&m, p));
    return len;
}

static size_t
s_le(uint8_t *out, uint64_t v, int bytes)
{
    for (int b = 0; b < bytes; b++)
        out[b] = (uint8_t)(v >> (8 * b));
    return (size_t)bytes;
}

/* A version 0 or 1 STATE message of {s_a, s_b}, byte by byte as
 * docs/protocol.md writes it (the optimizer part only in version 1). */
static size_t
s_state_v01(uint8_t *out,
            uint32_t version,
            uint64_t step,
            const uint8_t *optim,
            size_t optim_len)
{
    size_t at = 0;
    at += s_le(out + at, 0x54535352u, 4); /* "RSST" */
    at += s_le(out + at, version, 4);
    at += s_le(out + at, step, 8);
    at += s_le(out + at, 2, 8);
    at += s_le(out + at, 6, 8);
    memcpy(out + at, s_a, sizeof s_a);
    at += sizeof s_a;
    at += s_le(out + at, 3, 8);
    memcpy(out + at, s_b, sizeof s_b);
    at += sizeof s_b;
    if (version == 1) {
        at += s_le(out + at, optim_len, 8);
        if (optim_len > 0) /* memcpy's source may not be NULL, even for 0 */
            memcpy(out + at, optim, optim_len);
        at += optim_len;
    }
    return at;
}

static void
test_state__round_trip_then_bad_shapes_and_nan__rejected_unchanged(void **state)
{
    (void)state;
    uint8_t buf[256];
    struct node_state_parts p = {.step = 41}, got;
    size_t len = s_state_of(&p, buf, sizeof buf);
    float a[6], b[3];
    struct rumor_tensor t[2] = {{a, 2, {2, 3}}, {b, 1, {3}}};
    struct rumor_model m = {t, 2};
    assert_int_equal(node_state_encode(&m, &p, buf, len - 1), 0);
    struct into in;
    s_into_init(&in);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_int_equal(got.step, 41);
    assert_int_equal(got.epoch, 0);
    assert_null(got.optim);
    assert_int_equal(got.optim_len, 0);
    assert_null(got.gossip);
    assert_int_equal(got.gossip_len, 0);
    assert_memory_equal(in.c, s_a, sizeof s_a);
    assert_memory_equal(in.d, s_b, sizeof s_b);
    /* a model of another shape, a truncated message, a NaN, an unknown
     * version: refused, nothing copied */
    float e[5] = {0}, keep[5] = {0};
    struct rumor_tensor v[2] = {{e, 1, {5}}, {in.d, 1, {3}}};
    struct rumor_model other = {v, 2};
    assert_int_equal(node_state_decode(buf, len, &other, &got), RUMOR_EPROTO);
    assert_memory_equal(e, keep, sizeof e);
    s_into_init(&in);
    assert_int_equal(node_state_decode(buf, len - 4, &in.m, &got),
                     RUMOR_EPROTO);
    s_assert_untouched(&in, &got);
    float nan = NAN;
    memcpy(buf + len - 16 - 4, &nan, 4); /* the last float */
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_ENUMERIC);
    s_assert_untouched(&in, &got);
    memcpy(buf + len - 16 - 4, &s_b[2], 4);
    buf[4] = 3;
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_EPROTO);
    s_assert_untouched(&in, &got);
}

/* Version 2 carries the epoch and both parts, each possibly empty,
 * borrowed from the message where they lie: the optimizer part after the
 * model, the gossip part at the end. */
static void
test_state__v2_epoch_and_parts__round_trip_borrowed(void **state)
{
    (void)state;
    const uint8_t optim[10] = "ROPT-bytes", gossip[13] = "RGST-q-anchor";
    uint8_t buf[256];
    struct node_state_parts p = {.step = 5,
                                 .epoch = 9,
                                 .optim = optim,
                                 .optim_len = sizeof optim,
                                 .gossip = gossip,
                                 .gossip_len = sizeof gossip},
                            got;
    size_t len = s_state_of(&p, buf, sizeof buf);
    struct into in;
    s_into_init(&in);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_int_equal(got.step, 5);
    assert_int_equal(got.epoch, 9);
    assert_ptr_equal(got.optim, buf + len - 13 - 8 - 10);
    assert_int_equal(got.optim_len, sizeof optim);
    assert_memory_equal(got.optim, optim, sizeof optim);
    assert_ptr_equal(got.gossip, buf + len - 13);
    assert_int_equal(got.gossip_len, sizeof gossip);
    assert_memory_equal(got.gossip, gossip, sizeof gossip);
    assert_memory_equal(in.c, s_a, sizeof s_a);
    assert_memory_equal(in.d, s_b, sizeof s_b);
    /* a gossip part without an optimizer part, and the reverse */
    p.optim_len = 0;
    len = s_state_of(&p, buf, sizeof buf);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_null(got.optim);
    assert_int_equal(got.optim_len, 0);
    assert_int_equal(got.gossip_len, sizeof gossip);
    assert_memory_equal(got.gossip, gossip, sizeof gossip);
    p.optim_len = sizeof optim;
    p.gossip_len = 0;
    len = s_state_of(&p, buf, sizeof buf);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_int_equal(got.optim_len, sizeof optim);
    assert_memory_equal(got.optim, optim, sizeof optim);
    assert_null(got.gossip);
    assert_int_equal(got.gossip_len, 0);
}

/* Messages of versions 0 and 1 (from nodes built before version 2) are
 * read as they were, with epoch 0 and no gossip part; their lengths are
 * still exact. */
static void
test_state__versions_0_and_1__still_read(void **state)
{
    (void)state;
    const uint8_t optim[5] = "ROPT!";
    uint8_t buf[256];
    struct node_state_parts got;
    struct into in;
    s_into_init(&in);
    size_t len = s_state_v01(buf, 0, 17, NULL, 0);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_int_equal(got.step, 17);
    assert_int_equal(got.epoch, 0);
    assert_null(got.optim);
    assert_null(got.gossip);
    assert_int_equal(got.gossip_len, 0);
    assert_memory_equal(in.c, s_a, sizeof s_a);
    assert_memory_equal(in.d, s_b, sizeof s_b);
    s_into_init(&in);
    assert_int_equal(node_state_decode(buf, len + 1, &in.m, &got),
                     RUMOR_EPROTO);
    s_assert_untouched(&in, &got);

    len = s_state_v01(buf, 1, 18, optim, sizeof optim);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_int_equal(got.step, 18);
    assert_int_equal(got.epoch, 0);
    assert_ptr_equal(got.optim, buf + len - sizeof optim);
    assert_int_equal(got.optim_len, sizeof optim);
    assert_null(got.gossip);
    assert_int_equal(got.gossip_len, 0);
    assert_memory_equal(in.c, s_a, sizeof s_a);
    /* version 1's optimizer part runs to the end exactly */
    s_into_init(&in);
    assert_int_equal(node_state_decode(buf, len - 1, &in.m, &got),
                     RUMOR_EPROTO);
    s_assert_untouched(&in, &got);
    assert_int_equal(node_state_decode(buf, len + 1, &in.m, &got),
                     RUMOR_EPROTO);
    s_assert_untouched(&in, &got);
    len = s_state_v01(buf, 1, 18, NULL, 0);
    assert_int_equal(node_state_decode(buf, len, &in.m, &got), RUMOR_OK);
    assert_null(got.optim);
    assert_int_equal(got.optim_len, 0);
}

/* Decodes a copy of msg[0..len) in a heap block of exactly len bytes, so
 * that a read past the end is an error under the sanitizers; expects a
 * refusal that leaves the model and *got untouched. */
static void
s_assert_refused(const uint8_t *msg, size_t len, struct into *in)
{
    uint8_t *copy = malloc(len > 0 ? len : 1);
    assert_non_null(copy);
    memcpy(copy, msg, len);
    struct node_state_parts got;
    assert_int_equal(node_state_decode(copy, len, &in->m, &got), RUMOR_EPROTO);
    s_assert_untouched(in, &got);
    free(copy);
}

/* Every length of a version 2 message that disagrees with the message is
 * refused before anything is copied: each truncation, a byte too many,
 * an optimizer length that runs into or past the gossip part's length, a
 * gossip length short of or past the end. */
static void
test_state__v2_bad_lengths__refused_model_untouched(void **state)
{
    (void)state;
    const uint8_t optim[10] = "ROPT-bytes", gossip[13] = "RGST-q-anchor";
    uint8_t buf[256], bad[256];
    struct node_state_parts p = {.step = 5,
                                 .epoch = 9,
                                 .optim = optim,
                                 .optim_len = sizeof optim,
                                 .gossip = gossip,
                                 .gossip_len = sizeof gossip};
    size_t len = s_state_of(&p, buf, sizeof buf);
    size_t optlen_at = len - 13 - 8 - 10 - 8, gslen_at = len - 13 - 8;
    struct into in;
    s_into_init(&in);
    for (size_t cut = 0; cut < len; cut++)
        s_assert_refused(buf, cut, &in);
    memcpy(bad, buf, len);
    bad[len] = 0;
    s_assert_refused(bad, len + 1, &in);
    const struct {
        size_t at;
        uint64_t value;
    } cases[] = {
        {optlen_at, 11},              /* misplaces the gossip length */
        {optlen_at, 10 + 8 + 13},     /* the rest, as version 1 */
        {optlen_at, 10 + 8 + 13 + 1}, /* past the end */
        {optlen_at, 8 + 10 + 8 + 13}, /* past it by its own length */
        {optlen_at, UINT64_MAX},      /* wraps an unchecked sum */
        {gslen_at, 12},               /* a byte left over */
        {gslen_at, 14},               /* past the end */
        {gslen_at, UINT64_MAX},       /* wraps an unchecked sum */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(bad, buf, len);
        s_le(bad + cases[k].at, cases[k].value, 8);
        s_assert_refused(bad, len, &in);
    }
}

/* The gossip part is bounded by RUMOR_GOSSIP_STATE_MAX, the cap of
 * rumor_gossip_state_load, as well as by the message: a message that
 * holds cap + 1 bytes is still refused. The 64 GiB message is a mapping
 * nobody writes past its first page, so it costs no memory. */
static void
test_state__gossip_part_over_cap__refused(void **state)
{
    (void)state;
    uint8_t head[256];
    struct node_state_parts p = {.step = 3}, got;
    size_t head_len = s_state_of(&p, head, sizeof head);
    size_t map_len = head_len + RUMOR_GOSSIP_STATE_MAX + 1;
    uint8_t *msg = mmap(NULL,
                        map_len,
                        PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1,
                        0);
    if (msg == MAP_FAILED) {
        printf("skipped: no 64 GiB of address space to map here (mmap "
               "with MAP_NORESERVE failed)\n");
        skip();
    }
    memcpy(msg, head, head_len);
    struct into in;
    s_into_init(&in);
    s_le(msg + head_len - 8, RUMOR_GOSSIP_STATE_MAX, 8);
    assert_int_equal(node_state_decode(msg, map_len - 1, &in.m, &got),
                     RUMOR_OK);
    assert_ptr_equal(got.gossip, msg + head_len);
    assert_int_equal(got.gossip_len, RUMOR_GOSSIP_STATE_MAX);
    s_into_init(&in);
    s_le(msg + head_len - 8, RUMOR_GOSSIP_STATE_MAX + 1, 8);
    assert_int_equal(node_state_decode(msg, map_len, &in.m, &got),
                     RUMOR_EPROTO);
    s_assert_untouched(&in, &got);
    munmap(msg, map_len);
}

/* --join takes the momentum buffer with the model: a STATE message from
 * a node that has stepped carries its optimizer state, which a fresh
 * optimizer of the same kind loads to the same bytes; one of another
 * kind refuses it; a length that disagrees with the message is refused. */
static void
test_state__momentum_buffer__carried_and_loaded_same_bytes(void **state)
{
    (void)state;
    float w[6] = {1, 2, 3, 4, 5, 6}, gw[6] = {1, -1, 2, -2, 3, -3};
    struct rumor_tensor t = {w, 2, {2, 3}}, gt = {gw, 2, {2, 3}};
    struct rumor_model m = {&t, 1}, grads = {&gt, 1};
    struct rumor_optim_opts oo;
    rumor_optim_opts_default(&oo);
    oo.kind = RUMOR_OPTIM_MOMENTUM;
    rumor_optim *sender = NULL, *joiner = NULL, *other = NULL;
    assert_int_equal(rumor_optim_new(&oo, &m, &sender), RUMOR_OK);
    assert_int_equal(rumor_optim_new(&oo, &m, &joiner), RUMOR_OK);
    for (uint64_t s = 0; s < 3; s++)
        assert_int_equal(rumor_optim_step(sender, s, &m, &grads), RUMOR_OK);
    uint8_t ob[256], ob2[256], buf[512];
    size_t olen = 0, olen2 = 0;
    assert_int_equal(rumor_optim_save(sender, ob, sizeof ob, &olen), RUMOR_OK);
    struct node_state_parts parts = {.step = 7, .optim = ob, .optim_len = olen};
    size_t len = node_state_encode(&m, &parts, buf, sizeof buf);
    assert_int_equal(len, node_state_bytes(&m, &parts));
    float c[6] = {0};
    struct rumor_tensor u = {c, 2, {2, 3}};
    struct rumor_model into = {&u, 1};
    struct node_state_parts opt;
    assert_int_equal(node_state_decode(buf, len, &into, &opt), RUMOR_OK);
    assert_int_equal(opt.optim_len, olen);
    assert_int_equal(rumor_optim_load(joiner, opt.optim, opt.optim_len),
                     RUMOR_OK);
    assert_int_equal(rumor_optim_save(joiner, ob2, sizeof ob2, &olen2),
                     RUMOR_OK);
    assert_int_equal(olen2, olen);
    assert_memory_equal(ob2, ob, olen);
    /* the momentum really is there: not the zeros of a fresh buffer */
    rumor_optim *fresh = NULL;
    assert_int_equal(rumor_optim_new(&oo, &m, &fresh), RUMOR_OK);
    assert_int_equal(rumor_optim_save(fresh, ob2, sizeof ob2, &olen2),
                     RUMOR_OK);
    assert_true(memcmp(ob2, ob, olen) != 0);
    oo.kind = RUMOR_OPTIM_SGD;
    assert_int_equal(rumor_optim_new(&oo, &m, &other), RUMOR_OK);
    assert_int_equal(rumor_optim_load(other, opt.optim, opt.optim_len),
                     RUMOR_EPROTO);
    /* an optimizer length into the gossip part's: refused, nothing
     * copied */
    buf[len - 8 - olen - 8] = (uint8_t)(olen + 1);
    memset(c, 0, sizeof c);
    assert_int_equal(node_state_decode(buf, len, &into, &opt), RUMOR_EPROTO);
    assert_null(opt.optim);
    for (int k = 0; k < 6; k++)
        assert_true(c[k] == 0);
    rumor_optim_destroy(&sender);
    rumor_optim_destroy(&joiner);
    rumor_optim_destroy(&fresh);
    rumor_optim_destroy(&other);
}

static void
test_sync__round_trip_and_bad_flags_or_lengths__rejected(void **state)
{
    (void)state;
    struct node_sync s = {.flags = NODE_SYNC_JOIN | NODE_SYNC_WANT_STATE |
                                   NODE_SYNC_DONE,
                          .step = 1234,
                          .ack = {.upto = 9, .count = 2, .held = {3, 8}}};
    uint8_t buf[NODE_SYNC_BYTES_MAX];
    size_t len = node_sync_encode(&s, buf, sizeof buf);
    assert_int_equal(len, NODE_SYNC_HEADER_BYTES + 16 + 16);
    struct node_sync back;
    assert_int_equal(node_sync_decode(buf, len, &back), RUMOR_OK);
    assert_int_equal(back.step, 1234);
    assert_int_equal(back.flags, s.flags);
    assert_int_equal(back.ack.count, 2);
    assert_int_equal(back.ack.held[1], 8);
    assert_int_equal(node_sync_decode(buf, len + 1, &back), RUMOR_EPROTO);
    assert_int_equal(node_sync_decode(buf, 10, &back), RUMOR_EPROTO);
    buf[4] = 0x08; /* the first unknown flag */
    assert_int_equal(node_sync_decode(buf, len, &back), RUMOR_EPROTO);
    assert_int_equal(back.step, 0);
}

/* The codec a GOSSIP frame names (rumor_gossip_codec): the algorithm's
 * codec, localsgd's delta codec, none for raw vectors; a receiver refuses
 * a message in another (node_gossip_codec_check). */
static void
test_codec__per_algorithm__other_codec_refused(void **state)
{
    (void)state;
    static const struct {
        const char *algo, *codec, *delta;
        bool compressed;
        uint8_t want;
    } rows[] = {
        {"dpsgd", "", "", false, 0},
        {"choco", "qsgd:bits=4", "", false, 4},
        {"deepsqueeze", "sign", "", false, 6},
        {"allreduce", "terngrad", "", true, 5},
        {"allreduce", "terngrad", "", false, 0},
        {"localsgd", "", "natural", false, 7},
        {"powergossip", "", "", false, 0},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        struct rumor_gossip_opts opts = s_opts(rows[r].algo, 0);
        if (rows[r].codec[0] != '\0')
            snprintf(opts.codec, sizeof opts.codec, "%s", rows[r].codec);
        snprintf(opts.delta_codec,
                 sizeof opts.delta_codec,
                 "%s",
                 rows[r].delta);
        opts.compressed = rows[r].compressed;
        struct net c;
        s_net_new_opts(&c, "ring:3", &opts);
        uint8_t got = rumor_gossip_codec(c.g[0]);
        if (got != rows[r].want)
            fail_msg("%s %s: codec %u, want %u",
                     rows[r].algo,
                     rows[r].codec,
                     got,
                     rows[r].want);
        struct rumor_net_msg m = {
            .hdr = {.kind = RUMOR_NET_KIND_GOSSIP, .codec = rows[r].want}};
        assert_int_equal(node_gossip_codec_check(c.g[0], &m, 1), RUMOR_OK);
        m.hdr.codec = rows[r].want == 4 ? 6 : 4;
        assert_int_equal(node_gossip_codec_check(c.g[0], &m, 1), RUMOR_EPROTO);
        s_net_free(&c);
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack__round_trip_and_bad_inputs__rejected),
        cmocka_unit_test(test_codec__per_algorithm__other_codec_refused),
        cmocka_unit_test(
            test_skip__random_drops_600_steps__average_kept_to_1e6),
        cmocka_unit_test(
            test_skip_powergossip__random_drops_600_steps__average_kept_to_1e6),
        cmocka_unit_test(
            test_skip_powergossip__one_peer_exp_drops__average_kept_models_meet),
        cmocka_unit_test(
            test_skip_powergossip_no_warm_start__drops__average_kept_models_meet),
        cmocka_unit_test(
            test_skip_choco__random_drops_600_steps__average_kept_to_1e6),
        cmocka_unit_test(
            test_skip_deepsqueeze__random_drops_600_steps__average_kept_to_1e6),

        cmocka_unit_test(test_skip__applying_on_receipt__average_drifts),
        cmocka_unit_test(test_skip__no_loss__same_bits_as_simulator),
        cmocka_unit_test(
            test_skip__staged_as_they_come__same_bits_as_round_at_once),
        cmocka_unit_test(
            test_screen__nan_inf_wrong_size__rejected_counted_rest_applied),
        cmocka_unit_test(
            test_screen__huge_norm_with_clip__moves_at_most_gamma_w_tau),
        cmocka_unit_test(
            test_state__round_trip_then_bad_shapes_and_nan__rejected_unchanged),
        cmocka_unit_test(test_state__v2_epoch_and_parts__round_trip_borrowed),
        cmocka_unit_test(test_state__versions_0_and_1__still_read),
        cmocka_unit_test(test_state__v2_bad_lengths__refused_model_untouched),
        cmocka_unit_test(test_state__gossip_part_over_cap__refused),
        cmocka_unit_test(
            test_state__momentum_buffer__carried_and_loaded_same_bytes),
        cmocka_unit_test(
            test_sync__round_trip_and_bad_flags_or_lengths__rejected),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("faults", tests, NULL, NULL);
}
