/*
 * The exchange driver over the network against the simulator: N nodes,
 * each a thread with a rumor_peer (node/exchange.c, what `rumor node` and
 * the Python Peer run) and its own CURVE transport on loopback, run a few
 * steps of an algorithm; the models must be bit-identical to the same run
 * in the in-process simulator. A node whose neighbours never start gets
 * an error by its connect deadline with its model unchanged.
 */
#include "tests/cmocka_compat.h"

#include "tests/integration/test_peer_cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX TPC_NODES_MAX
#define ROWS      6
#define COLS      5
#define BIAS      3
#define NUMEL     (ROWS * COLS + BIAS)
#define STEPS     4

struct net_run {
    struct tpc c;
    const char *algo;
    const char *delta_codec; /* localsgd: NULL or its codec */
    const char *fragments;   /* localsgd: NULL, or F with period 2 */
    float x[NODES_MAX][NUMEL];
    rumor_err rc[NODES_MAX];
    pthread_barrier_t ready;
};

struct node_arg {
    struct net_run *run;
    uint32_t id;
};

static void
s_initial_model(float *x, size_t node)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, 99, node);
    for (size_t e = 0; e < NUMEL; e++)
        x[e] = (float)rumor_rng_normal(&rng);
}

/* A stand-in for a local training step, the same in both runs, so that
 * algorithms which send model changes (local SGD's deltas) have some. */
static void
s_local_update(float *x, size_t node, uint64_t step)
{
    for (size_t e = 0; e < NUMEL; e++)
        x[e] += 0.01f * (float)((node + 1) * (step + 1) % 7) - 0.03f;
}

/* gamma 0.5 where the algorithm has one (a node refuses it elsewhere) */
static bool
s_has_gamma(const char *algo)
{
    static const char *const with[] = {"dpsgd",
                                       "choco",
                                       "powergossip",
                                       "deepsqueeze",
                                       "moniqua"};
    for (size_t k = 0; k < sizeof with / sizeof with[0]; k++)
        if (strcmp(algo, with[k]) == 0)
            return true;
    return false;
}

static void
s_node_opts(const struct net_run *run, uint32_t id, struct rumor_node_opts *o)
{
    const char *extra[11] = {"algo", run->algo, NULL};
    size_t k = 2;
    if (s_has_gamma(run->algo)) {
        extra[k++] = "gamma";
        extra[k++] = "0.5";
    }
    if (run->delta_codec != NULL) {
        extra[k++] = "delta-codec";
        extra[k++] = run->delta_codec;
    }
    if (run->fragments != NULL) {
        extra[k++] = "period";
        extra[k++] = "2";
        extra[k++] = "fragments";
        extra[k++] = run->fragments;
    }
    extra[k] = NULL;
    tpc_opts(&run->c, id, extra, o);
}

/* The simulator's options: what the node makes of the same settings. */
static void
s_sim_opts(const struct net_run *run, struct rumor_gossip_opts *g)
{
    struct rumor_node_opts o;
    s_node_opts(run, 0, &o);
    *g = o.gossip;
    g->seed = o.workload.seed;
}

static rumor_err
s_make_gossip(const struct net_run *run,
              uint32_t id,
              float *x,
              rumor_gossip **out)
{
    struct rumor_tensor t[2] = {{x, 2, {ROWS, COLS}},
                                {x + ROWS * COLS, 1, {BIAS}}};
    struct rumor_model model = {t, 2};
    struct rumor_gossip_opts g;
    s_sim_opts(run, &g);
    struct rumor_diag diag = {0};
    return rumor_gossip_new(&g, run->c.t, id, &model, out, &diag);
}

static rumor_err
s_make_peer(struct net_run *run, uint32_t id, rumor_peer **out)
{
    struct rumor_node_opts o;
    s_node_opts(run, id, &o);
    float *x = run->x[id];
    struct rumor_peer_tensor t[2] = {
        tpc_tensor(x, 2, (const size_t[]){ROWS, COLS}),
        tpc_tensor(x + ROWS * COLS, 1, (const size_t[]){BIAS})};
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_peer_new(&o, t, 2, out, &diag);
    if (rc != RUMOR_OK)
        fprintf(stderr, "node %u: %s\n", id, diag.msg);
    return rc;
}

static void *
s_node(void *p)
{
    struct node_arg *a = p;
    struct net_run *run = a->run;
    rumor_peer *peer = NULL;
    rumor_err rc = s_make_peer(run, a->id, &peer);
    struct rumor_diag diag = {0};
    for (uint64_t step = 0; step < STEPS && rc == RUMOR_OK; step++) {
        s_local_update(run->x[a->id], a->id, step);
        rc = rumor_peer_gossip(peer, &diag);
    }
    if (rc != RUMOR_OK)
        fprintf(stderr, "node %u: %s\n", a->id, diag.msg);
    /* Keep the transport up until every node is done, so late readers
     * still get their last messages. */
    pthread_barrier_wait(&run->ready);
    rumor_peer_destroy(&peer);
    run->rc[a->id] = rc;
    return NULL;
}

static void
s_run_setup(struct net_run *run, const char *spec, const char *algo)
{
    memset(run, 0, sizeof *run);
    tpc_setup(&run->c, spec);
    run->algo = algo;
    for (size_t i = 0; i < run->c.n; i++)
        s_initial_model(run->x[i], i);
}

static void
s_run_free(struct net_run *run)
{
    tpc_free(&run->c);
}

/* The same steps in the simulator, from the same initial models. */
static void
s_simulate(struct net_run *run, float sim_x[][NUMEL])
{
    rumor_gossip *nodes[NODES_MAX] = {0};
    size_t n = run->c.n;
    for (size_t i = 0; i < n; i++) {
        s_initial_model(sim_x[i], i);
        assert_int_equal(s_make_gossip(run, (uint32_t)i, sim_x[i], &nodes[i]),
                         RUMOR_OK);
    }
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(nodes, n, &sim), RUMOR_OK);
    for (uint64_t step = 0; step < STEPS; step++) {
        for (size_t i = 0; i < n; i++)
            s_local_update(sim_x[i], i, step);
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
    }
    rumor_sim_destroy(&sim);
    for (size_t i = 0; i < n; i++)
        rumor_gossip_destroy(&nodes[i]);
}

/* delta_codec: NULL, or localsgd's codec for compressed deltas;
 * fragments: NULL, or localsgd's streaming fragments (period 2). */
static void
s_check_net_equals_sim_frag(const char *spec,
                            const char *algo,
                            const char *delta_codec,
                            const char *fragments)
{
    static struct net_run run;
    s_run_setup(&run, spec, algo);
    run.delta_codec = delta_codec;
    run.fragments = fragments;
    size_t n = run.c.n;
    pthread_t threads[NODES_MAX];
    struct node_arg args[NODES_MAX];
    pthread_barrier_init(&run.ready, NULL, (unsigned)n);
    for (size_t i = 0; i < n; i++) {
        args[i] = (struct node_arg){&run, (uint32_t)i};
        assert_int_equal(pthread_create(&threads[i], NULL, s_node, &args[i]),
                         0);
    }
    for (size_t i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&run.ready);
    static float sim_x[NODES_MAX][NUMEL];
    s_simulate(&run, sim_x);
    for (size_t i = 0; i < n; i++) {
        if (run.rc[i] != RUMOR_OK)
            fail_msg("%s %s: node %zu failed: %s",
                     spec,
                     algo,
                     i,
                     rumor_errname(run.rc[i]));
        if (memcmp(run.x[i], sim_x[i], sizeof sim_x[i]) != 0)
            fail_msg("%s %s: node %zu differs from the simulator",
                     spec,
                     algo,
                     i);
    }
    s_run_free(&run);
}

static void
s_check_net_equals_sim_codec(const char *spec,
                             const char *algo,
                             const char *delta_codec)
{
    s_check_net_equals_sim_frag(spec, algo, delta_codec, NULL);
}

static void
s_check_net_equals_sim(const char *spec, const char *algo)
{
    s_check_net_equals_sim_codec(spec, algo, NULL);
}

/* Every other algorithm, so each one has run over net/ at least once. */
static void
test_net_step__remaining_algorithms__bit_identical_to_simulator(void **state)
{
    (void)state;
    s_check_net_equals_sim("ring:4", "allreduce-f64");
    s_check_net_equals_sim("ring:3", "powersgd");
    s_check_net_equals_sim("ring:3", "localsgd");
    /* Compressed deltas travel the ring as an all-gather of payloads. */
    s_check_net_equals_sim_codec("ring:4", "localsgd", "qsgd:bits=4");
    /* Streaming fragments: each step syncs half of the model. */
    s_check_net_equals_sim_frag("ring:3", "localsgd", NULL, "2");
    s_check_net_equals_sim_frag("ring:4", "localsgd", "qsgd:bits=4", "2");
    s_check_net_equals_sim("torus:2x2", "deepsqueeze");
    s_check_net_equals_sim("ring:4", "moniqua");
}

static void
test_net_step__dpsgd_ring__bit_identical_to_simulator(void **state)
{
    (void)state;
    s_check_net_equals_sim("ring:4", "dpsgd");
}

static void
test_net_step__powergossip_torus__bit_identical_to_simulator(void **state)
{
    (void)state;
    s_check_net_equals_sim("torus:2x3", "powergossip");
}

static void
test_net_step__choco_and_allreduce__bit_identical_to_simulator(void **state)
{
    (void)state;
    s_check_net_equals_sim("ring:3", "choco");
    s_check_net_equals_sim("star:4", "allreduce");
}

/* Node 0 runs alone: its neighbours never start. */
static void
test_net_step__silent_neighbours__error_model_unchanged(void **state)
{
    (void)state;
    static struct net_run run;
    s_run_setup(&run, "ring:3", "dpsgd");
    struct rumor_node_opts o;
    s_node_opts(&run, 0, &o);
    o.connect_ms = 300; /* --connect-timeout-ms */
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor t =
        tpc_tensor(run.x[0], 1, (const size_t[]){NUMEL});
    rumor_peer *peer = NULL;
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_OK);
    float before[NUMEL];
    memcpy(before, run.x[0], sizeof before);
    uint64_t t0 = rumor_clock_ns();
    rumor_err rc = rumor_peer_gossip(peer, &diag);
    uint64_t waited_ms = (rumor_clock_ns() - t0) / 1000000;
    assert_true(rc != RUMOR_OK);
    assert_true(waited_ms < 5000); /* bounded by the deadline, not a hang */
    assert_memory_equal(run.x[0], before, sizeof before);
    rumor_peer_destroy(&peer);
    s_run_free(&run);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_net_step__dpsgd_ring__bit_identical_to_simulator),
        cmocka_unit_test(
            test_net_step__powergossip_torus__bit_identical_to_simulator),
        cmocka_unit_test(
            test_net_step__choco_and_allreduce__bit_identical_to_simulator),
        cmocka_unit_test(
            test_net_step__remaining_algorithms__bit_identical_to_simulator),
        cmocka_unit_test(
            test_net_step__silent_neighbours__error_model_unchanged),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip_net", tests, NULL, NULL);
}
