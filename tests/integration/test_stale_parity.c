/*
 * Stale exchanges (--stale S, docs/gossip.md "Stale exchanges") give the
 * same bits in the simulator and on the network: `rumor sim train
 * --save-models` against `rumor launch` of `rumor node` processes on a
 * loopback ring of 4 (CURVE, `rumor topo gen ring 4 --local`), least
 * squares with full batches, 23 steps (exchanges still in flight at the
 * end): each node's final model file ends with the floats the simulator
 * computed for that node, for D-PSGD and PowerGossip with S = 2, CHOCO
 * with S = 1, overlapped DiLoCo with S = H = 4 and streaming DiLoCo
 * (fragments, qsgd and fp4 deltas, whose first syncs are compressed too).
 * The landing step is fixed, so the network's timing cannot change a
 * number. Every process is waited for with a deadline and killed past
 * it.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES        4
#define NUMEL        (32 * 8) /* lsq's default W: 8 outputs x 32 features */
#define RUN_LIMIT_MS 60000 /* generous: only a broken build waits this long */
#define ARGS_MAX     40

static const char *const s_algos[][16] = {
    {"--algo", "dpsgd", "--stale", "2", NULL},
    {"--algo", "powergossip", "--stale", "2", NULL},
    {"--algo", "choco", "--codec", "topk:ratio=0.25", "--stale", "1", NULL},
    {"--algo",
     "localsgd",
     "--period",
     "4",
     "--outer-lr",
     "0.7",
     "--outer-momentum",
     "0.9",
     "--stale",
     "4",
     NULL},
    /* streaming DiLoCo: two fragments in flight at once, qsgd deltas */
    {"--algo",
     "localsgd",
     "--period",
     "4",
     "--fragments",
     "2",
     "--delta-codec",
     "qsgd:bits=4",
     "--stale",
     "3",
     NULL},
    /* streaming DiLoCo with fp4 deltas: the nodes start from the same
     * model, so every fragment's first sync is a compressed outer step */
    {"--algo",
     "localsgd",
     "--period",
     "8",
     "--fragments",
     "4",
     "--delta-codec",
     "fp4",
     "--outer-lr",
     "0.7",
     "--outer-momentum",
     "0.9",
     "--stale",
     "6",
     NULL},
};

/* args[0 .. n) then the algorithm's options; returns the new count. */
static size_t
s_add_algo(const char **args, size_t n, const char *const *algo)
{
    for (size_t k = 0; algo[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = algo[k];
    args[n] = NULL;
    return n;
}

/* `rumor sim train` of the same run: every node's final model. */
static void
s_sim(const char *dir, const char *const *algo, float x[NODES][NUMEL])
{
    char models[128], out[128];
    snprintf(models, sizeof models, "%s/sim.models", dir);
    snprintf(out, sizeof out, "%s/sim.out", dir);
    const char *args[ARGS_MAX] = {"sim",
                                  "train",
                                  "--topology",
                                  "ring:4",
                                  "--workload",
                                  "lsq",
                                  "--batch",
                                  "0",
                                  "--optim",
                                  "sgd",
                                  "--lr",
                                  "0.3",
                                  "--steps",
                                  "23",
                                  "--every",
                                  "23",
                                  "--save-models",
                                  models};
    s_add_algo(args, 18, algo);
    if (tnc_wait(tnc_start(args, out), RUN_LIMIT_MS) != 0) {
        tnc_show(out);
        fail_msg("rumor sim train failed");
    }
    FILE *f = fopen(models, "rb");
    assert_non_null(f);
    assert_int_equal(fread(x, sizeof(float), NODES * NUMEL, f), NODES * NUMEL);
    fclose(f);
}

/* `rumor launch` of 4 nodes into DIR/run. */
static void
s_launch(const char *dir, const char *topo, const char *const *algo)
{
    char metrics[128], out[128];
    snprintf(metrics, sizeof metrics, "%s/run", dir);
    snprintf(out, sizeof out, "%s/launch.out", dir);
    const char *args[ARGS_MAX] = {"launch",
                                  "--topology",
                                  topo,
                                  "--metrics-dir",
                                  metrics,
                                  "--workload",
                                  "lsq",
                                  "--batch",
                                  "0",
                                  "--optimizer",
                                  "sgd",
                                  "--lr",
                                  "0.3",
                                  "--steps",
                                  "23"};
    s_add_algo(args, 15, algo);
    if (tnc_wait(tnc_start(args, out), RUN_LIMIT_MS) != 0) {
        tnc_show(out);
        fail_msg("rumor launch failed");
    }
}

/* The last NUMEL floats of DIR/run/node-I.model (its one tensor). */
static void
s_node_model(const char *dir, int i, float x[NUMEL])
{
    char path[160];
    snprintf(path, sizeof path, "%s/run/node-%d.model", dir, i);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("no model file %s", path);
    assert_int_equal(fseek(f, -(long)(NUMEL * sizeof(float)), SEEK_END), 0);
    assert_int_equal(fread(x, sizeof(float), NUMEL, f), NUMEL);
    fclose(f);
}

static void
test_ring4_stale__simulator_and_network_same_bits(void **state)
{
    (void)state;
    for (size_t a = 0; a < sizeof s_algos / sizeof s_algos[0]; a++) {
        char dir[64] = "/tmp/rumor-stale-parity-XXXXXX", topo[128];
        tnc_ring4_local(dir, topo, sizeof topo);
        static float sim[NODES][NUMEL];
        float net[NUMEL];
        s_sim(dir, s_algos[a], sim);
        s_launch(dir, topo, s_algos[a]);
        for (int i = 0; i < NODES; i++) {
            s_node_model(dir, i, net);
            if (memcmp(net, sim[i], sizeof net) != 0)
                fail_msg("%s: node %d's model is not the simulator's",
                         s_algos[a][1],
                         i);
        }
        printf("%s: the same bits on all %d nodes\n", s_algos[a][1], NODES);
        tnc_dir_done(dir);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring4_stale__simulator_and_network_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
