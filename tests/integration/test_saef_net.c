/*
 * Step-ahead error feedback with the neighbourhood's errors over the
 * network: every node is a thread with a rumor_peer (the exchange driver
 * of `rumor node` and the Python Peer) and its own CURVE transport on
 * loopback, running local SGD with a compressed delta, alpha 1 and the
 * neighbourhood scope, so each sync ends with the extra round that sends
 * the compression errors to the topology's neighbours. Each step:
 * rumor_peer_step_ahead, a local update that depends on the model (so the
 * look-ahead changes what is sent), then rumor_peer_gossip. The models
 * must be bit-identical to the same run in the simulator.
 */
#include "tests/cmocka_compat.h"

#include "tests/integration/test_peer_cluster.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SN_NODES 6
#define SN_DIM   40
#define SN_STEPS 6

struct sn_cluster {
    struct tpc c;
    const char *codec, *scope;
    float net_x[SN_NODES][SN_DIM], sim_x[SN_NODES][SN_DIM];
    rumor_err rc[SN_NODES];
    pthread_barrier_t barrier;
};

struct sn_thread {
    struct sn_cluster *c;
    uint32_t id;
};

/* A gradient step on f_i(x) = 1/2 ||x - t_i||^2 with a node-specific
 * target t_i: the update depends on where the model is. */
static void
s_train_step(float *x, uint32_t id)
{
    for (size_t e = 0; e < SN_DIM; e++) {
        float target = (float)((id * 7 + e * 3) % 11) - 5.0f;
        x[e] -= 0.4f * (x[e] - target);
    }
}

static void
s_node_opts(const struct sn_cluster *c,
            uint32_t id,
            const char *scope,
            struct rumor_node_opts *o)
{
    const char *extra[] = {"algo",
                           "localsgd",
                           "delta-codec",
                           c->codec,
                           "saef-scope",
                           scope,
                           "ef-alpha",
                           "1",
                           NULL};
    tpc_opts(&c->c, id, extra, o);
}

/* The simulator's instance: the options the node makes of the same
 * settings. */
static rumor_err
s_gossip(const struct sn_cluster *c,
         uint32_t id,
         const char *scope,
         float *x,
         rumor_gossip **g)
{
    struct rumor_node_opts o;
    s_node_opts(c, id, scope, &o);
    o.gossip.seed = o.workload.seed;
    struct rumor_tensor t = {x, 1, {SN_DIM}};
    struct rumor_model m = {&t, 1};
    struct rumor_diag diag = {0};
    return rumor_gossip_new(&o.gossip, c->c.t, id, &m, g, &diag);
}

static void *
s_node_thread(void *p)
{
    struct sn_thread *a = p;
    struct sn_cluster *c = a->c;
    float *x = c->net_x[a->id];
    struct rumor_node_opts o;
    s_node_opts(c, a->id, c->scope, &o);
    struct rumor_peer_tensor t = tpc_tensor(x, 1, (const size_t[]){SN_DIM});
    rumor_peer *peer = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_peer_new(&o, &t, 1, &peer, &diag);
    if (rc == RUMOR_OK && !rumor_peer_looks_ahead(peer))
        rc = RUMOR_EINVAL;
    for (uint64_t step = 0; step < SN_STEPS && rc == RUMOR_OK; step++) {
        rc = rumor_peer_step_ahead(peer, &diag);
        s_train_step(x, a->id);
        if (rc == RUMOR_OK)
            rc = rumor_peer_gossip(peer, &diag);
    }
    if (rc != RUMOR_OK)
        fprintf(stderr, "node %u: %s\n", a->id, diag.msg);
    /* Everyone done before any transport goes away. */
    pthread_barrier_wait(&c->barrier);
    rumor_peer_destroy(&peer);
    c->rc[a->id] = rc;
    return NULL;
}

/* The same run in the simulator, into x. */
static void
s_simulate(struct sn_cluster *c, const char *scope, float x[][SN_DIM])
{
    rumor_gossip *g[SN_NODES] = {0};
    for (uint32_t i = 0; i < c->c.n; i++)
        assert_int_equal(s_gossip(c, i, scope, x[i], &g[i]), RUMOR_OK);
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(g, c->c.n, &sim), RUMOR_OK);
    for (uint64_t step = 0; step < SN_STEPS; step++) {
        for (uint32_t i = 0; i < c->c.n; i++) {
            assert_int_equal(rumor_gossip_step_ahead(g[i]), RUMOR_OK);
            s_train_step(x[i], i);
        }
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
    }
    rumor_sim_destroy(&sim);
    for (uint32_t i = 0; i < c->c.n; i++)
        rumor_gossip_destroy(&g[i]);
}

static void
s_check(const char *spec, const char *codec, const char *scope)
{
    static struct sn_cluster c;
    memset(&c, 0, sizeof c);
    tpc_setup(&c.c, spec);
    c.codec = codec;
    c.scope = scope;
    size_t n = c.c.n;
    assert_true(n <= SN_NODES);
    pthread_t threads[SN_NODES];
    struct sn_thread args[SN_NODES];
    pthread_barrier_init(&c.barrier, NULL, (unsigned)n);
    for (size_t i = 0; i < n; i++) {
        args[i] = (struct sn_thread){&c, (uint32_t)i};
        assert_int_equal(
            pthread_create(&threads[i], NULL, s_node_thread, &args[i]),
            0);
    }
    for (size_t i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&c.barrier);
    s_simulate(&c, scope, c.sim_x);
    /* The errors' round matters: looking ahead by the own errors ends
     * elsewhere. */
    static float own_x[SN_NODES][SN_DIM];
    s_simulate(&c, "self", own_x);
    assert_true(memcmp(own_x, c.sim_x, n * sizeof own_x[0]) != 0);
    for (size_t i = 0; i < n; i++) {
        if (c.rc[i] != RUMOR_OK)
            fail_msg("%s %s: node %zu: %s",
                     spec,
                     codec,
                     i,
                     rumor_errname(c.rc[i]));
        if (memcmp(c.net_x[i], c.sim_x[i], sizeof c.sim_x[i]) != 0)
            fail_msg("%s %s %s: node %zu differs from the simulator",
                     spec,
                     codec,
                     scope,
                     i);
    }
    tpc_free(&c.c);
}

/* A 2x3 torus (3 neighbours each, two of them off the ring all-gather's
 * path) with a stochastic codec, and a star with a cheaper error codec. */
static void
test_net_step__neighbourhood_saef__bit_identical_to_simulator(void **state)
{
    (void)state;
    s_check("torus:2x3", "qsgd:bits=2,bucket=16", "neighbourhood");
    s_check("star:4", "topk:ratio=0.1", "neighbourhood:sign");
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_net_step__neighbourhood_saef__bit_identical_to_simulator),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("saef_net", tests, NULL, NULL);
}
