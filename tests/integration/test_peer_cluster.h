/*
 * A cluster of rumor_peer nodes, one thread each, on loopback with CURVE
 * keys: the exchange driver every entry point uses (node/exchange.c), for
 * the tests that compare it with the in-process simulator. The topology
 * and keys are written to a temporary directory, as a user's would be.
 */
#ifndef RUMOR_TESTS_PEER_CLUSTER_H
#define RUMOR_TESTS_PEER_CLUSTER_H

#include "rumor/gossip.h"
#include "rumor/node.h"

#include "tests/integration/test_net_common.h"

#include <stdlib.h>
#include <unistd.h>

#define TPC_NODES_MAX 8

struct tpc {
    char dir[64];
    char topo[96];
    rumor_topology *t; /* the graph, for the simulator side */
    size_t n;
};

/* The graph of spec on free loopback ports, a fresh keypair per node in
 * DIR/node-I.{key,pub}, written to DIR/topo. */
static inline void
tpc_setup(struct tpc *c, const char *spec)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/rumor-tpc-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(c->topo, sizeof c->topo, "%s/topo", c->dir);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec(spec, 1, &c->t, &diag), RUMOR_OK);
    c->n = rumor_topology_nodes(c->t);
    assert_true(c->n <= TPC_NODES_MAX);
    for (size_t i = 0; i < c->n; i++) {
        char endpoint[64], base[128];
        snprintf(endpoint,
                 sizeof endpoint,
                 "tcp://127.0.0.1:%d",
                 t_free_port());
        snprintf(base, sizeof base, "%s/node-%zu", c->dir, i);
        rumor_net_keypair *kp = NULL;
        assert_int_equal(rumor_net_keypair_generate(&kp), RUMOR_OK);
        assert_int_equal(rumor_net_keypair_save(kp, base), RUMOR_OK);
        assert_int_equal(rumor_topology_set_node(c->t,
                                                 i,
                                                 endpoint,
                                                 rumor_net_keypair_public(kp),
                                                 &diag),
                         RUMOR_OK);
        rumor_net_keypair_destroy(&kp);
    }
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    assert_int_equal(rumor_topology_format(c->t, &buf), RUMOR_OK);
    FILE *f = fopen(c->topo, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(buf.data, 1, buf.len, f), buf.len);
    fclose(f);
    rumor_buf_free(&buf);
}

/* Node id's options: the cluster's topology and key, then extra NAME,
 * VALUE pairs (NULL-terminated) as `rumor node --NAME VALUE`, checked as
 * `rumor node` checks them. */
static inline void
tpc_opts(const struct tpc *c,
         uint32_t id,
         const char *const *extra,
         struct rumor_node_opts *o)
{
    char text[32], key[128];
    snprintf(text, sizeof text, "%u", id);
    snprintf(key, sizeof key, "%s/node-%u", c->dir, id);
    struct rumor_diag diag = {0};
    rumor_node_config *cfg = NULL;
    assert_int_equal(rumor_node_config_new(&cfg), RUMOR_OK);
    assert_int_equal(rumor_node_config_set(cfg, "topology", c->topo, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_node_config_set(cfg, "id", text, &diag), RUMOR_OK);
    assert_int_equal(rumor_node_config_set(cfg, "key", key, &diag), RUMOR_OK);
    for (size_t k = 0; extra != NULL && extra[k] != NULL; k += 2)
        if (rumor_node_config_set(cfg, extra[k], extra[k + 1], &diag) !=
            RUMOR_OK)
            fail_msg("--%s %s: %s", extra[k], extra[k + 1], diag.msg);
    if (rumor_node_config_check(cfg, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    *o = *rumor_node_config_opts(cfg);
    rumor_node_config_destroy(&cfg);
}

/* A float32 CPU tensor of the caller's memory. */
static inline struct rumor_peer_tensor
tpc_tensor(float *x, size_t ndim, const size_t *shape)
{
    struct rumor_peer_tensor t = {x,
                                  RUMOR_DTYPE_F32,
                                  RUMOR_DEVICE_CPU,
                                  ndim,
                                  {0}};
    for (size_t d = 0; d < ndim; d++)
        t.shape[d] = shape[d];
    return t;
}

static inline void
tpc_free(struct tpc *c)
{
    char path[160];
    for (size_t i = 0; i < c->n; i++) {
        snprintf(path, sizeof path, "%s/node-%zu.key", c->dir, i);
        unlink(path);
        snprintf(path, sizeof path, "%s/node-%zu.pub", c->dir, i);
        unlink(path);
    }
    unlink(c->topo);
    rmdir(c->dir);
    rumor_topology_destroy(&c->t);
}

#endif
