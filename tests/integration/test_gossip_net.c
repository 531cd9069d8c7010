/*
 * gossip over net/: N nodes, each a thread with its own CURVE transport on
 * loopback (real ZeroMQ sockets, keys generated here), run a few steps of
 * an algorithm with rumor_gossip_net_step; the models must be bit-identical
 * to the same run in the in-process simulator, and a node whose neighbour
 * never answers gets RUMOR_ETIMEDOUT by its deadline with its model
 * unchanged.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/net.h"

#include "tests/integration/test_net_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES_MAX 8
#define ROWS      6
#define COLS      5
#define BIAS      3
#define NUMEL     (ROWS * COLS + BIAS)
#define STEPS     4

struct net_run {
    rumor_topology *topo;
    size_t n;
    struct rumor_gossip_opts opts;
    rumor_net_keypair *keys[NODES_MAX];
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
        x[e] += 0.01f * (float)((node + 1) * step % 7) - 0.03f;
}

static rumor_err
s_make_gossip(struct net_run *run, uint32_t id, float *x, rumor_gossip **out)
{
    struct rumor_tensor t[2] = {{x, 2, {ROWS, COLS}},
                                {x + ROWS * COLS, 1, {BIAS}}};
    struct rumor_model model = {t, 2};
    struct rumor_diag diag = {0};
    return rumor_gossip_new(&run->opts, run->topo, id, &model, out, &diag);
}

static rumor_err
s_make_net(struct net_run *run, uint32_t id, bool ring, rumor_net **out)
{
    struct rumor_net_peer peers[NODES_MAX];
    size_t count = 0;
    rumor_err rc =
        rumor_net_peers_from_topology(run->topo, id, peers, NODES_MAX, &count);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t k = 0; k < count && ring; k++)
        if (peers[k].id == (id + 1) % run->n)
            peers[k].link = true;
    struct rumor_net_opts opts;
    rumor_net_opts_default(&opts);
    opts.self = id;
    opts.endpoint = rumor_topology_endpoint(run->topo, id);
    opts.keys = run->keys[id];
    opts.peers = peers;
    opts.npeers = count;
    return rumor_net_new(&opts, out);
}

/* Every outgoing link past HELLO before the first step: a message sent
 * while a link is still being set up may be lost to a reconnect, which is
 * a timeout by design, not what the bit-identity tests are about. */
static rumor_err
s_wait_links(struct net_run *run, uint32_t id, bool ring, rumor_net *net)
{
    struct rumor_net_peer peers[NODES_MAX];
    size_t count = 0;
    rumor_err rc =
        rumor_net_peers_from_topology(run->topo, id, peers, NODES_MAX, &count);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        if (peers[k].link || (ring && peers[k].id == (id + 1) % run->n))
            rc = rumor_net_wait_ready(net,
                                      peers[k].id,
                                      t_deadline(T_DEADLINE_MS));
    return rc;
}

static void *
s_node(void *p)
{
    struct node_arg *a = p;
    struct net_run *run = a->run;
    rumor_gossip *g = NULL;
    rumor_net *net = NULL;
    rumor_err rc = s_make_gossip(run, a->id, run->x[a->id], &g);
    if (rc == RUMOR_OK)
        rc = s_make_net(run, a->id, rumor_gossip_uses_ring(g), &net);
    if (rc == RUMOR_OK)
        rc = s_wait_links(run, a->id, rumor_gossip_uses_ring(g), net);
    pthread_barrier_wait(&run->ready);
    for (uint64_t step = 1; step <= STEPS && rc == RUMOR_OK; step++) {
        s_local_update(run->x[a->id], a->id, step);
        rc = rumor_gossip_net_step(g, net, step, t_deadline(T_DEADLINE_MS));
    }
    /* Keep the transport up until every node is done, so late readers
     * still get their last messages. */
    pthread_barrier_wait(&run->ready);
    rumor_net_destroy(&net);
    rumor_gossip_destroy(&g);
    run->rc[a->id] = rc;
    return NULL;
}

static void
s_run_setup(struct net_run *run, const char *spec, const char *algo)
{
    memset(run, 0, sizeof *run);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &run->topo, &diag),
                     RUMOR_OK);
    run->n = rumor_topology_nodes(run->topo);
    assert_true(run->n <= NODES_MAX);
    for (size_t i = 0; i < run->n; i++) {
        char endpoint[64];
        snprintf(endpoint,
                 sizeof endpoint,
                 "tcp://127.0.0.1:%d",
                 t_free_port());
        assert_int_equal(rumor_net_keypair_generate(&run->keys[i]), RUMOR_OK);
        assert_int_equal(
            rumor_topology_set_node(run->topo,
                                    i,
                                    endpoint,
                                    rumor_net_keypair_public(run->keys[i]),
                                    &diag),
            RUMOR_OK);
        s_initial_model(run->x[i], i);
    }
    rumor_gossip_opts_default(&run->opts);
    snprintf(run->opts.algo, sizeof run->opts.algo, "%s", algo);
    run->opts.gamma = 0.5;
}

static void
s_run_free(struct net_run *run)
{
    for (size_t i = 0; i < run->n; i++)
        rumor_net_keypair_destroy(&run->keys[i]);
    rumor_topology_destroy(&run->topo);
}

/* The same steps in the simulator, from the same initial models. */
static void
s_simulate(struct net_run *run, float sim_x[][NUMEL])
{
    rumor_gossip *nodes[NODES_MAX] = {0};
    for (size_t i = 0; i < run->n; i++) {
        s_initial_model(sim_x[i], i);
        assert_int_equal(s_make_gossip(run, (uint32_t)i, sim_x[i], &nodes[i]),
                         RUMOR_OK);
    }
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(nodes, run->n, &sim), RUMOR_OK);
    for (uint64_t step = 1; step <= STEPS; step++) {
        for (size_t i = 0; i < run->n; i++)
            s_local_update(sim_x[i], i, step);
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
    }
    rumor_sim_destroy(&sim);
    for (size_t i = 0; i < run->n; i++)
        rumor_gossip_destroy(&nodes[i]);
}

/* delta_codec: NULL, or localsgd's codec for compressed deltas. */
static void
s_check_net_equals_sim_codec(const char *spec,
                             const char *algo,
                             const char *delta_codec)
{
    static struct net_run run;
    s_run_setup(&run, spec, algo);
    if (delta_codec != NULL)
        snprintf(run.opts.delta_codec,
                 sizeof run.opts.delta_codec,
                 "%s",
                 delta_codec);
    pthread_t threads[NODES_MAX];
    struct node_arg args[NODES_MAX];
    pthread_barrier_init(&run.ready, NULL, (unsigned)run.n);
    for (size_t i = 0; i < run.n; i++) {
        args[i] = (struct node_arg){&run, (uint32_t)i};
        assert_int_equal(pthread_create(&threads[i], NULL, s_node, &args[i]),
                         0);
    }
    for (size_t i = 0; i < run.n; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&run.ready);
    static float sim_x[NODES_MAX][NUMEL];
    s_simulate(&run, sim_x);
    for (size_t i = 0; i < run.n; i++) {
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
test_net_step__silent_neighbours__timeout_model_unchanged(void **state)
{
    (void)state;
    static struct net_run run;
    s_run_setup(&run, "ring:3", "dpsgd");
    rumor_gossip *g = NULL;
    rumor_net *net = NULL;
    assert_int_equal(s_make_gossip(&run, 0, run.x[0], &g), RUMOR_OK);
    assert_int_equal(s_make_net(&run, 0, false, &net), RUMOR_OK);
    float before[NUMEL];
    memcpy(before, run.x[0], sizeof before);
    uint64_t t0 = rumor_clock_ns();
    rumor_err rc = rumor_gossip_net_step(g, net, 1, t_deadline(300));
    uint64_t waited_ms = (rumor_clock_ns() - t0) / 1000000;
    assert_true(rc == RUMOR_ETIMEDOUT);
    assert_true(waited_ms < 5000); /* bounded by the deadline, not a hang */
    assert_memory_equal(run.x[0], before, sizeof before);
    rumor_net_destroy(&net);
    rumor_gossip_destroy(&g);
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
            test_net_step__silent_neighbours__timeout_model_unchanged),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip_net", tests, NULL, NULL);
}
