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
 * a host copy) and PowerGossip without overlap; the consensus probe reads
 * a host copy and leaves the model on the device, with the same bits; a
 * run that checkpoints, ends, and resumes for more steps (CHOCO with
 * top-k and Nesterov; PowerGossip with momentum) ends with the same bits
 * on the reference device as on the host, and as an uninterrupted run;
 * --stale 1 / 2 (D-PSGD, PowerGossip, local SGD with gossip rounds) keep
 * the stale queue on the device, the same bits, overlapped DiLoCo's ring
 * too; a node killed with -9 and restarted with
 * --join on the reference device takes a neighbour's model into its
 * device model and ends in the band of least squares; the gradient
 * exchange (all-reduce with Nesterov, PowerSGD rank 2 with momentum, the
 * QSGD all-reduce with ef, the top-k all-reduce with DGC's clipped memory)
 * mixes the gradient in device memory, the same bits; an option the
 * device refuses (TernGrad's shared scalers) keeps the model on the host,
 * said in one line. The CUDA case runs
 * `--cuda` resident against `--cuda` staged (RUMOR_NODE_DEVICE=host; the same
 * kernels): it skips without a GPU, and has never run on one. Every process is
 * waited for with a deadline and killed past it.
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

/* `rumor launch` of 4 nodes for `steps` into DIR/NAME, its output in
 * DIR/NAME.out. */
static void
s_launch_steps(const char *dir,
               const char *topo,
               const char *name,
               const char *steps,
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
                                  steps};
    size_t n = 7;
    for (size_t k = 0; opts[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = opts[k];
    if (tnc_wait(tnc_start(args, out), RUN_LIMIT_MS) != 0) {
        tnc_show(out);
        fail_msg("rumor launch %s failed", name);
    }
}

static void
s_launch(const char *dir,
         const char *topo,
         const char *name,
         const char *const *opts)
{
    s_launch_steps(dir, topo, name, "25", opts);
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
test_ring4_ref_device__consensus_probe__stays_on_device(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "dpsgd",
                          "--workload",
                          "mlp",
                          "--consensus-every",
                          "5",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

/* --cuda with the model (and under --stale the queue) on the GPU against
 * the same run staged (RUMOR_NODE_DEVICE=host keeps it on the host): the
 * same CUDA pass, optimizer and gossip kernels, whose twins are the
 * host's. Never run on a GPU. */
static void
s_cuda_resident_as_staged(const char *const *resident)
{
    const char *why = NULL;
    if (!rumor_cuda_built() || rumor_cuda_device_count(&why) <= 0) {
        print_message("skip: no CUDA build or device: %s\n",
                      why != NULL ? why : "built without CUDA");
        skip();
    }
    char dir[64] = "/tmp/rumor-node-cuda-XXXXXX", topo[128], out[128];
    tnc_ring4_local(dir, topo, sizeof topo);
    s_launch(dir, topo, "resident", resident);
    assert_int_equal(setenv("RUMOR_NODE_DEVICE", "host", 1), 0);
    s_launch(dir, topo, "staged", resident);
    assert_int_equal(unsetenv("RUMOR_NODE_DEVICE"), 0);
    snprintf(out, sizeof out, "%s/resident.out", dir);
    assert_true(tnc_contains(out, "optimizer are in cuda memory"));
    s_same_models(dir, "staged", "resident");
    tnc_dir_done(dir);
}

static void
test_ring4_cuda__resident__same_bits_as_staged(void **state)
{
    (void)state;
    const char *resident[] =
        {"--cuda", "--algo", "choco", "--codec", "topk:ratio=0.25", NULL};
    s_cuda_resident_as_staged(resident);
}

/* 12 steps that end with a checkpoint, then --resume to 25, into
 * DIR/NAME (the checkpoints in DIR/NAME-ck). */
static void
s_stop_and_resume(const char *dir,
                  const char *topo,
                  const char *name,
                  const char *const *opts)
{
    char ck[128];
    snprintf(ck, sizeof ck, "%s/%s-ck", dir, name);
    const char *args[ARGS_MAX];
    size_t n = 0;
    for (; opts[n] != NULL && n < ARGS_MAX - 4; n++)
        args[n] = opts[n];
    args[n++] = "--checkpoint-dir";
    args[n++] = ck;
    args[n] = NULL;
    s_launch_steps(dir, topo, name, "12", args);
    args[n++] = "--resume";
    args[n] = NULL;
    s_launch_steps(dir, topo, name, "25", args);
}

/* An uninterrupted run on the host; the same stopped and resumed on the
 * host and on the reference device: the three the same bits. */
static void
s_resume_host_and_ref(const char *const *opts)
{
    char dir[64] = "/tmp/rumor-node-device-XXXXXX", topo[128], out[128];
    tnc_ring4_local(dir, topo, sizeof topo);
    s_launch(dir, topo, "whole", opts);
    s_stop_and_resume(dir, topo, "host", opts);
    assert_int_equal(setenv("RUMOR_NODE_DEVICE", "ref", 1), 0);
    s_stop_and_resume(dir, topo, "ref", opts);
    assert_int_equal(unsetenv("RUMOR_NODE_DEVICE"), 0);
    snprintf(out, sizeof out, "%s/ref.out", dir);
    assert_true(tnc_contains(out, "optimizer are in ref memory"));
    assert_false(tnc_contains(out, "stays in host memory"));
    s_same_models(dir, "host", "ref");
    s_same_models(dir, "whole", "host");
    printf("%s: checkpoint and --resume on the reference device: the same "
           "bits on all %d nodes as on the host and uninterrupted\n",
           opts[1],
           NODES);
    tnc_dir_done(dir);
}

static void
test_ring4_ref_device__choco_checkpoint_resume__same_bits(void **state)
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
                          NULL};
    s_resume_host_and_ref(opts);
}

static void
test_ring4_ref_device__powergossip_checkpoint_resume__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "powergossip",
                          "--workload",
                          "logreg",
                          "--optimizer",
                          "momentum",
                          NULL};
    s_resume_host_and_ref(opts);
}

#define JOIN_STEPS   "1200"
#define JOIN_STEPS_N 1200

/* The join test's processes: its teardown stops what it started even
 * when an assertion ended the test early. */
static pid_t s_pid[NODES];

static int
s_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        if (s_pid[i] > 0) {
            kill(s_pid[i], SIGKILL);
            waitpid(s_pid[i], NULL, 0);
            s_pid[i] = 0;
        }
    return 0;
}

/* `rumor node` id of the ring at DIR/ring.topo on least squares, its
 * metrics in DIR/RUN, its output in DIR/RUN-ID.out; env: one NAME=VALUE
 * for it, or NULL. */
static pid_t
s_node(const char *dir,
       int id,
       const char *run,
       const char *const *extra,
       const char *env)
{
    char sid[16], topo[128], key[128], metrics[128], out[160];
    snprintf(sid, sizeof sid, "%d", id);
    snprintf(topo, sizeof topo, "%s/ring.topo", dir);
    snprintf(key, sizeof key, "%s/keys/node-%d", dir, id);
    snprintf(metrics, sizeof metrics, "%s/%s", dir, run);
    snprintf(out, sizeof out, "%s/%s-%d.out", dir, run, id);
    const char *argv[ARGS_MAX] = {
        "node",     "--topology",   topo,   "--id",
        sid,        "--key",        key,    "--algo",
        "dpsgd",    "--workload",   "lsq",  "--optimizer",
        "sgd",      "--lr",         "0.05", "--steps",
        JOIN_STEPS, "--eval-every", "0",    "--deadline-ms",
        "1000",     "--down-after", "2",    "--metrics-dir",
        metrics};
    size_t n = 0;
    while (argv[n] != NULL)
        n++;
    for (size_t k = 0; extra != NULL && extra[k] != NULL; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    return tnc_start_ns(NULL, argv, out, env);
}

/* DIR/RUN/node-ID.jsonl: its complete lines, and the last (caller frees;
 * NULL when none); *first_loss: the first line's loss. */
static cJSON *
s_lines(const char *dir,
        const char *run,
        int id,
        size_t *lines,
        double *first_loss)
{
    char path[160];
    static char line[1 << 16];
    snprintf(path, sizeof path, "%s/%s/node-%d.jsonl", dir, run, id);
    FILE *f = fopen(path, "r");
    cJSON *last = NULL;
    *lines = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            break; /* a line being written */
        }
        if ((*lines)++ == 0 && first_loss != NULL)
            *first_loss = tnc_num(o, "loss");
        cJSON_Delete(last);
        last = o;
    }
    if (f != NULL)
        fclose(f);
    return last;
}

/* Kill -9 of node 3 of a D-PSGD ring on least squares (the host's), and
 * its restart with --join on the reference device: it takes a
 * neighbour's model (and optimizer state) through the host copy into its
 * device model, and every node ends in the band of least squares. */
static void
test_ring4_ref_device__kill9_then_join__model_taken_into_device(void **state)
{
    (void)state;
    char dir[64] = "/tmp/rumor-node-join-XXXXXX", topo[128], out[160];
    tnc_ring4_local(dir, topo, sizeof topo);
    for (int i = 0; i < NODES; i++)
        s_pid[i] = s_node(dir, i, "run", NULL, NULL);
    uint64_t end = rumor_clock_ns() + RUN_LIMIT_MS * 1000000ull;
    size_t lines = 0;
    double first = NAN, joined = NAN;
    while (cJSON_Delete(s_lines(dir, "run", 1, &lines, &first)), lines < 50) {
        if (rumor_clock_ns() > end)
            fail_msg("node 1 did not start training");
        tnc_pause_us(2000);
    }
    assert_int_equal(kill(s_pid[3], SIGKILL), 0);
    assert_int_equal(tnc_wait(s_pid[3], RUN_LIMIT_MS), 128 + SIGKILL);
    const char *join[] = {"--join", NULL};
    s_pid[3] = s_node(dir, 3, "rerun", join, "RUMOR_NODE_DEVICE=ref");
    for (int i = 0; i < NODES; i++) {
        const char *run = i == 3 ? "rerun" : "run";
        int st = tnc_wait(s_pid[i], RUN_LIMIT_MS);
        s_pid[i] = 0;
        if (st != 0)
            fail_msg("node %d exited %d", i, st);
        cJSON *last = s_lines(dir, run, i, &lines, i == 3 ? &joined : NULL);
        assert_non_null(last);
        assert_int_equal((int)tnc_num(last, "step"), JOIN_STEPS_N);
        double err = tnc_num(last, "optimum_error");
        cJSON_Delete(last);
        /* the band of the cluster tests: lsq solved to 1e-4 */
        if (!(err <= 1e-4))
            fail_msg("node %d: optimum error %.3g", i, err);
        if (i == 3) /* joined mid-run: fewer lines than steps */
            assert_true(lines < JOIN_STEPS_N);
    }
    /* its first step starts from the neighbour's model: the loss is far
     * below that of an initial model (4.3 against 0.03 when written) */
    if (!(joined < 0.1 * first))
        fail_msg("joiner's first loss %.3g, a fresh node's %.3g",
                 joined,
                 first);
    snprintf(out, sizeof out, "%s/rerun-3.out", dir);
    assert_true(tnc_contains(out, "optimizer are in ref memory"));
    assert_true(tnc_contains(out, "joined: model"));
    printf("--join on the reference device: the neighbour's model taken, "
           "every node in the band\n");
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

/* Overlapped DiLoCo averages on the ring: the exchange thread's copy is
 * on the device too, its elastic ring's STATE through a host copy of its
 * own; the same bits. */
static void
test_ring4_ref_device__diloco_ring_stale1__same_bits(void **state)
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
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_cuda__stale2_resident__same_bits_as_staged(void **state)
{
    (void)state;
    const char *resident[] =
        {"--cuda", "--algo", "powergossip", "--stale", "2", NULL};
    s_cuda_resident_as_staged(resident);
}

/* The gradient exchange (all-reduce, PowerSGD): the gradient is what the
 * algorithm mixes, in device memory, and the elastic ring's STATE goes
 * through the host copy; the same bits as the host. */
static void
test_ring4_ref_device__allreduce_gradient__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "allreduce",
                          "--workload",
                          "mlp",
                          "--optimizer",
                          "nesterov",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__powersgd_gradient__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "powersgd",
                          "--rank",
                          "2",
                          "--workload",
                          "mlp",
                          "--optimizer",
                          "momentum",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__allreduce_qsgd_ef__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "allreduce",
                          "--codec",
                          "qsgd:bits=4",
                          "--ef",
                          "ef",
                          "--workload",
                          "logreg",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

static void
test_ring4_ref_device__allreduce_dgc_warmup__same_bits(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "allreduce",
                          "--codec",
                          "dgc:ratio=0.25",
                          "--ef",
                          "dgc:momentum=0.9,clip=1,warmup=3",
                          "--workload",
                          "logreg",
                          NULL};
    s_host_and_ref(opts, true, NULL);
}

/* An option the device refuses (a codec without a device path, the lossless
 * huffman): the model stays in host memory, said in one line with the
 * algorithm's reason, and the run is the host's. */
static void
test_ring4_ref_device__refused_option__stays_on_host(void **state)
{
    (void)state;
    const char *opts[] = {"--algo",
                          "allreduce",
                          "--codec",
                          "topk:ratio=0.25|huffman",
                          "--workload",
                          "logreg",
                          NULL};
    s_host_and_ref(opts,
                   false,
                   "stays in host memory: allreduce: the codec topk");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring4_ref_device__choco_topk_overlap__same_bits),
        cmocka_unit_test(test_ring4_ref_device__dpsgd_lsq__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__powergossip_no_overlap__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__consensus_probe__stays_on_device),
        cmocka_unit_test(test_ring4_cuda__resident__same_bits_as_staged),
        cmocka_unit_test(
            test_ring4_ref_device__choco_checkpoint_resume__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__powergossip_checkpoint_resume__same_bits),
        cmocka_unit_test_teardown(
            test_ring4_ref_device__kill9_then_join__model_taken_into_device,
            s_teardown),
        cmocka_unit_test(test_ring4_ref_device__dpsgd_stale1__same_bits),
        cmocka_unit_test(test_ring4_ref_device__powergossip_stale2__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__localsgd_gossip_stale2__same_bits),
        cmocka_unit_test(test_ring4_ref_device__diloco_ring_stale1__same_bits),
        cmocka_unit_test(test_ring4_cuda__stale2_resident__same_bits_as_staged),
        cmocka_unit_test(test_ring4_ref_device__allreduce_gradient__same_bits),
        cmocka_unit_test(test_ring4_ref_device__powersgd_gradient__same_bits),
        cmocka_unit_test(test_ring4_ref_device__allreduce_qsgd_ef__same_bits),
        cmocka_unit_test(
            test_ring4_ref_device__allreduce_dgc_warmup__same_bits),
        cmocka_unit_test(test_ring4_ref_device__refused_option__stays_on_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
