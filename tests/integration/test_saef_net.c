/*
 * Step-ahead error feedback with the neighbourhood's errors over net/:
 * every node is a thread with its own CURVE transport on loopback (real
 * ZeroMQ sockets), running local SGD with a compressed delta, alpha 1 and
 * the neighbourhood scope, so each sync ends with the extra round that
 * sends the compression errors to the topology's neighbours. Each step:
 * look ahead, a local update that depends on the model (so the look-ahead
 * changes what is sent), then rumor_gossip_net_step. The models must be
 * bit-identical to the same run in the simulator.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/net.h"

#include "tests/integration/test_net_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SN_NODES 6
#define SN_DIM   40
#define SN_STEPS 6

struct sn_cluster {
    rumor_topology *topo;
    size_t n;
    struct rumor_gossip_opts opts;
    rumor_net_keypair *keys[SN_NODES];
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

static rumor_err
s_gossip(const struct sn_cluster *c, uint32_t id, float *x, rumor_gossip **g)
{
    struct rumor_tensor t = {x, 1, {SN_DIM}};
    struct rumor_model m = {&t, 1};
    struct rumor_diag diag = {0};
    return rumor_gossip_new(&c->opts, c->topo, id, &m, g, &diag);
}

/* Links to every topology neighbour and to the ring successor (the
 * all-gather's), each past HELLO before the first step. */
static rumor_err
s_transport(const struct sn_cluster *c, uint32_t id, rumor_net **out)
{
    struct rumor_net_peer peers[SN_NODES];
    size_t count = 0;
    rumor_err rc =
        rumor_net_peers_from_topology(c->topo, id, peers, SN_NODES, &count);
    for (size_t k = 0; k < count; k++)
        peers[k].link |= peers[k].id == (id + 1) % c->n;
    struct rumor_net_opts o;
    rumor_net_opts_default(&o);
    o.self = id;
    o.endpoint = rumor_topology_endpoint(c->topo, id);
    o.keys = c->keys[id];
    o.peers = peers;
    o.npeers = count;
    if (rc == RUMOR_OK)
        rc = rumor_net_new(&o, out);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        if (peers[k].link)
            rc = rumor_net_wait_ready(*out,
                                      peers[k].id,
                                      t_deadline(T_DEADLINE_MS));
    return rc;
}

static void *
s_node_thread(void *p)
{
    struct sn_thread *a = p;
    struct sn_cluster *c = a->c;
    float *x = c->net_x[a->id];
    rumor_gossip *g = NULL;
    rumor_net *net = NULL;
    rumor_err rc = s_gossip(c, a->id, x, &g);
    if (rc == RUMOR_OK)
        rc = s_transport(c, a->id, &net);
    pthread_barrier_wait(&c->barrier);
    for (uint64_t step = 0; step < SN_STEPS && rc == RUMOR_OK; step++) {
        rc = rumor_gossip_step_ahead(g);
        s_train_step(x, a->id);
        if (rc == RUMOR_OK)
            rc = rumor_gossip_net_step(g, net, step, t_deadline(T_DEADLINE_MS));
    }
    /* Everyone done before any transport goes away. */
    pthread_barrier_wait(&c->barrier);
    rumor_net_destroy(&net);
    rumor_gossip_destroy(&g);
    c->rc[a->id] = rc;
    return NULL;
}

/* The same run in the simulator, into x. */
static void
s_simulate(struct sn_cluster *c, float x[][SN_DIM])
{
    rumor_gossip *g[SN_NODES] = {0};
    for (uint32_t i = 0; i < c->n; i++)
        assert_int_equal(s_gossip(c, i, x[i], &g[i]), RUMOR_OK);
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(g, c->n, &sim), RUMOR_OK);
    for (uint64_t step = 0; step < SN_STEPS; step++) {
        for (uint32_t i = 0; i < c->n; i++) {
            assert_int_equal(rumor_gossip_step_ahead(g[i]), RUMOR_OK);
            s_train_step(x[i], i);
        }
        assert_int_equal(rumor_sim_step(sim, step), RUMOR_OK);
    }
    rumor_sim_destroy(&sim);
    for (uint32_t i = 0; i < c->n; i++)
        rumor_gossip_destroy(&g[i]);
}

static void
s_check(const char *spec, const char *codec, const char *scope)
{
    static struct sn_cluster c;
    memset(&c, 0, sizeof c);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &c.topo, &diag),
                     RUMOR_OK);
    c.n = rumor_topology_nodes(c.topo);
    assert_true(c.n <= SN_NODES);
    rumor_gossip_opts_default(&c.opts);
    snprintf(c.opts.algo, sizeof c.opts.algo, "localsgd");
    snprintf(c.opts.delta_codec, sizeof c.opts.delta_codec, "%s", codec);
    snprintf(c.opts.saef_scope, sizeof c.opts.saef_scope, "%s", scope);
    c.opts.ef_alpha = 1;
    for (size_t i = 0; i < c.n; i++) {
        char endpoint[64];
        snprintf(endpoint,
                 sizeof endpoint,
                 "tcp://127.0.0.1:%d",
                 t_free_port());
        assert_int_equal(rumor_net_keypair_generate(&c.keys[i]), RUMOR_OK);
        assert_int_equal(
            rumor_topology_set_node(c.topo,
                                    i,
                                    endpoint,
                                    rumor_net_keypair_public(c.keys[i]),
                                    &diag),
            RUMOR_OK);
    }
    pthread_t threads[SN_NODES];
    struct sn_thread args[SN_NODES];
    pthread_barrier_init(&c.barrier, NULL, (unsigned)c.n);
    for (size_t i = 0; i < c.n; i++) {
        args[i] = (struct sn_thread){&c, (uint32_t)i};
        assert_int_equal(
            pthread_create(&threads[i], NULL, s_node_thread, &args[i]),
            0);
    }
    for (size_t i = 0; i < c.n; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&c.barrier);
    s_simulate(&c, c.sim_x);
    /* The errors' round matters: looking ahead by the own errors ends
     * elsewhere. */
    static float own_x[SN_NODES][SN_DIM];
    snprintf(c.opts.saef_scope, sizeof c.opts.saef_scope, "self");
    s_simulate(&c, own_x);
    assert_true(memcmp(own_x, c.sim_x, c.n * sizeof own_x[0]) != 0);
    for (size_t i = 0; i < c.n; i++) {
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
        rumor_net_keypair_destroy(&c.keys[i]);
    }
    rumor_topology_destroy(&c.topo);
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
