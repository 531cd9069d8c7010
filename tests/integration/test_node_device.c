/*
 * `rumor node` with its model in device memory (issue #31): the model,
 * the gradient, the optimizer's state and the algorithm's state stay in
 * the device's memory, and the run is the same bits as one on the host.
 * Without a GPU the device is the reference one (RUMOR_NODE_DEVICE=ref,
 * the node's test hook: host memory reached only through the backend
 * table, with the CPU pass): `rumor launch` of a loopback ring of 4
 * (CURVE, `rumor topo gen ring 4 --local`) on the host and on the
 * reference device, every node's final model file compared byte for
 * byte, for CHOCO with top-k and Nesterov under the default overlap,
 * D-PSGD on least squares (its fault path's STATE reads the model through
 * a host copy) and PowerGossip without overlap; a feature that reads the
 * model on the host (the consensus probe) keeps it there, said in one
 * line, with the same bits. --stale 1 / 2 (D-PSGD, PowerGossip, local
 * SGD with gossip rounds) keep the stale queue on the device, the same
 * bits; overlapped DiLoCo's ring keeps the model on the host. The CUDA case
 * runs `--cuda` resident against
 * `--cuda` staged (checkpoints keep the model on the host; the same
 * kernels): it skips without a GPU, and has never run on one. Every
 * process is waited for with a deadline and killed past it.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES        4
#define RUN_LIMIT_MS 60000 /* generous: only a broken build waits this long */
#define ARGS_MAX     40

/* `rumor launch` of 4 nodes into DIR/NAME, its output in DIR/NAME.out. */
static void
s_launch(const char *dir,
         const char *topo,
         const char *name,
         const char *const *opts)
{
    char metrics[128], out[128];
    snprintf(metrics, sizeof metrics, "%s/%s", dir, name);
    snprintf(out, sizeof out, "%s/%s.out", dir, name);
    const char *args[ARGS_MAX] = {"launch",
                                  "--topology",
                                  topo,
                                  "--metrics-dir",
                                  metrics,
                                  "--steps",
                                  "25"};
    size_t n = 7;
    for (size_t k = 0; opts[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = opts[k];
    if (tnc_wait(tnc_start(args, out), RUN_LIMIT_MS) != 0) {
        tnc_show(out);
        fail_msg("rumor launch %s failed", name);
    }
}

/* The bytes of DIR/NAME/node-I.model into *buf (malloc'd); its length. */
static size_t
s_model_file(const char *dir, const char *name, int i, char **buf)
{
    char path[192];
    snprintf(path, sizeof path, "%s/%s/node-%d.model", dir, name, i);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("no model file %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    *buf = malloc((size_t)len);
    assert_non_null(*buf);
    assert_int_equal(fread(*buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return (size_t)len;
}

/* Every node's model of runs a and b, byte for byte. */
static void
s_same_models(const char *dir, const char *a, const char *b)
{
    for (int i = 0; i < NODES; i++) {
        char *x = NULL, *y = NULL;
        size_t nx = s_model_file(dir, a, i, &x);
        size_t ny = s_model_file(dir, b, i, &y);
        if (nx != ny || memcmp(x, y, nx) != 0)
            fail_msg("node %d: the %s model is not the %s one", i, b, a);
        free(x);
        free(y);
    }
}

/* The host run, then the same on the reference device; `placed`: the
 * model moves there (else the line saying why it stays, `stays`). */
static void
s_host_and_ref(const char *const *opts, bool placed, const char *stays)
{
    char dir[64] = "/tmp/rumor-node-device-XXXXXX", topo[128], out[128];
    tnc_ring4_local(dir, topo, sizeof topo);
    s_launch(dir, topo, "host", opts);
    assert_int_equal(setenv("RUMOR_NODE_DEVICE", "ref", 1), 0);
    s_launch(dir, topo, "ref", opts);
    assert_int_equal(unsetenv("RUMOR_NODE_DEVICE"), 0);
    snprintf(out, sizeof out, "%s/ref.out", dir);
    assert_true(tnc_contains(out, "optimizer are in ref memory") == placed);
    if (stays != NULL)
        assert_true(tnc_contains(out, stays));
    snprintf(out, sizeof out, "%s/host.out", dir);
    assert_false(tnc_contains(out, "optimizer are in"));
    s_same_models(dir, "host", "ref");
    printf("%s: the same bits on all %d nodes\n", opts[1], NODES);
    tnc_dir_done(dir);
}

static void
test_ring4_ref_device__choco_topk_overlap__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "choco",
                          "--codec",
                          "topk:ratio=0.25",
                          "--workload",
                          "mlp",
                          "--batch",
                          "32",
                          "--optimizer",
                          "nesterov",
                          "--lr",
                          "0.05",
                          "--weight-decay",
                          "0.0001",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__dpsgd_lsq__same_bits(void **state)
{
    (void)state;
    const char *opts[] =
        {"--algo", "dpsgd", "--workload", "lsq", "--lr", "0.3", NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__powergossip_no_overlap__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "powergossip",
                          "--workload",
                          "logreg",
                          "--optimizer",
                          "momentum",
                          "--no-overlap",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__consensus_probe__stays_on_host(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "dpsgd",
                          "--workload",
                          "mlp",
                          "--consensus-every",
                          "5",
                          NULL};
    s_host_and_ref(opts,
                   false,
                   "the model stays in host memory for the consensus probe");
}

/* --cuda with the model on the GPU against --cuda staged (checkpoints
 * keep it on the host): the same CUDA pass, optimizer and gossip kernels,
 * whose twins are the host's. Never run on a GPU. */
static void
test_ring4_cuda__resident__same_bits_as_staged(void **state)
{
    (void)state;
    const char *why = NULL;
    if (!rumor_cuda_built() || rumor_cuda_device_count(&why) <= 0) {
        print_message("skip: no CUDA build or device: %s\n",
                      why != NULL ? why : "built without CUDA");
        skip();
    }
    char dir[64] = "/tmp/rumor-node-cuda-XXXXXX", topo[128], out[128], ck[128];
    tnc_ring4_local(dir, topo, sizeof topo);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    const char *resident[] =
        {"--cuda", "--algo", "choco", "--codec", "topk:ratio=0.25", NULL};
    const char *staged[] = {"--cuda",
                            "--algo",
                            "choco",
                            "--codec",
                            "topk:ratio=0.25",
                            "--checkpoint-dir",
                            ck,
                            NULL};
    s_launch(dir, topo, "resident", resident);
    s_launch(dir, topo, "staged", staged);
    snprintf(out, sizeof out, "%s/resident.out", dir);
    assert_true(tnc_contains(out, "optimizer are in cuda memory"));
    s_same_models(dir, "staged", "resident");
    tnc_dir_done(dir);
}

/* --stale S: the queue's snapshots and copies in the reference device's
 * memory, landed there (node/stale.c), the same bits as on the host:
 * landing is at fixed steps, whatever the network does. */
static void
test_ring4_ref_device__dpsgd_stale1__same_bits(void **state)
{
    (void)state;
    const char *opts[] =
        {"--algo", "dpsgd", "--workload", "lsq", "--stale", "1", NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__powergossip_stale2__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "powergossip",
                          "--workload",
                          "logreg",
                          "--optimizer",
                          "momentum",
                          "--stale",
                          "2",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

/* Overlapped local SGD with gossip rounds (no ring, so no elastic ring
 * to keep the model on the host; DiLoCo's outer step needs the ring). */
static void
test_ring4_ref_device__localsgd_gossip_stale2__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "localsgd",
                          "--period",
                          "5",
                          "--gossip-rounds",
                          "2",
                          "--workload",
                          "lsq",
                          "--stale",
                          "2",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

/* Overlapped DiLoCo averages on the ring: its elastic ring keeps the
 * model on the host, said in one line, with the same bits. */
static void
test_ring4_ref_device__diloco_ring_stale1__stays_on_host(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "localsgd",
                          "--period",
                          "4",
                          "--outer-lr",
                          "0.7",
                          "--outer-momentum",
                          "0.9",
                          "--workload",
                          "lsq",
                          "--stale",
                          "1",
                          NULL};
    s_host_and_ref(opts,
                   false,
                   "the model stays in host memory for the elastic ring");
}

/* --cuda --stale 2 with the queue on the GPU against the same staged by
 * checkpoints (the queue then in host memory). Never run on a GPU. */
static void
test_ring4_cuda__stale2_resident__same_bits_as_staged(void **state)
{
    (void)state;
    const char *why = NULL;
    if (!rumor_cuda_built() || rumor_cuda_device_count(&why) <= 0) {
        print_message("skip: no CUDA build or device: %s\n",
                      why != NULL ? why : "built without CUDA");
        skip();
    }
    char dir[64] = "/tmp/rumor-node-cuda-XXXXXX", topo[128], out[128], ck[128];
    tnc_ring4_local(dir, topo, sizeof topo);
    snprintf(ck, sizeof ck, "%s/ck", dir);
    const char *resident[] =
        {"--cuda", "--algo", "powergossip", "--stale", "2", NULL};
    const char *staged[] = {"--cuda",
                            "--algo",
                            "powergossip",
                            "--stale",
                            "2",
                            "--checkpoint-dir",
                            ck,
                            NULL};
    s_launch(dir, topo, "resident", resident);
    s_launch(dir, topo, "staged", staged);
    snprintf(out, sizeof out, "%s/resident.out", dir);
    assert_true(tnc_contains(out, "optimizer are in cuda memory"));
    s_same_models(dir, "staged", "resident");
    tnc_dir_done(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring4_ref_device__choco_topk_overlap__same_bits),
        cmocka_unit_test(test_ring4_ref_device__dpsgd_lsq__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__powergossip_no_overlap__same_bits),
        cmocka_unit_test(test_ring4_ref_device__consensus_probe__stays_on_host),
        cmocka_unit_test(test_ring4_cuda__resident__same_bits_as_staged),
        cmocka_unit_test(test_ring4_ref_device__dpsgd_stale1__same_bits),
        cmocka_unit_test(test_ring4_ref_device__powergossip_stale2__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__localsgd_gossip_stale2__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__diloco_ring_stale1__stays_on_host),
        cmocka_unit_test(test_ring4_cuda__stale2_resident__same_bits_as_staged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
