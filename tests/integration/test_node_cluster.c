/*
 * The node runtime end to end: real `rumor` processes (RUMOR_BIN) on
 * loopback with CURVE, set up as a user would (`rumor topo gen ring 4
 * --local`, then `rumor launch`), checked through their metrics files.
 *   - least squares with a known optimum W* (noise 0, full batches, iid
 *     shards: W* minimises every node's loss, so exact decentralized
 *     methods reach it): every node ends with max |W - W*| < 1e-4 with
 *     PowerGossip, CHOCO top-k, CHOCO QSGD, PowerSGD and local SGD (exact,
 *     and with a top-k delta and step-ahead error feedback, set in a
 *     config file), and so does the average of the nodes' models (the
 *     start is W = 0, about 0.5 away);
 *   - the MLP on the embedded digits with PowerGossip reaches >= 90 %
 *     held-out accuracy on every node and with the average model, and
 *     `rumor plot` draws its six PNG plots;
 *   - bytes (PowerGossip with the gradient computed in a second thread
 *     while the gossip runs, CHOCO top-k without; 40 steps): the test
 *     replays the same training in this process (workloads, optimizers,
 *     the algorithm in the simulator); the gossip bytes each node counted equal
 * the simulator's count for that node and the last minibatch losses agree (1e-9
 * relative); the gossip bytes all nodes received equal those sent; each node's
 * transport counters are exactly its gossip and consensus-probe frames plus
 * the handshake and 64-byte heartbeats, and on every line at least the
 * gossip and probe bytes (docs/node.md, "Metrics"); the probe's consensus
 * distance equals the one of the replayed models;
 *   - every metrics line is a JSON object with consecutive steps;
 *   - options that contradict each other are refused;
 *   - `rumor launch` forwards SIGINT to its nodes and leaves none behind
 *     (a node that dies: test_launch_restart.c).
 * Every process started here is waited for with a deadline and killed if
 * it passes it; waits poll a condition, they never sleep to synchronise.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include "rumor/gossip.h"
#include "rumor/net.h"
#include "rumor/node.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES        4
#define RUN_LIMIT_MS 60000 /* generous: only a broken build waits this long */
#define ARGS_MAX     64
#define LSQ_TOL      1e-4

struct cluster {
    char dir[256];
    char topo[300];
    char run[300];
    char out[300]; /* launch's stdout and stderr */
};

/* --- helpers ---------------------------------------------------------- */

static void
s_cluster_new(struct cluster *c)
{
    snprintf(c->dir, sizeof c->dir, "/tmp/rumor-node-test-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(c->topo, sizeof c->topo, "%s/ring.topo", c->dir);
    snprintf(c->run, sizeof c->run, "%s/run", c->dir);
    snprintf(c->out, sizeof c->out, "%s/launch.out", c->dir);
    const char *args[] =
        {"topo", "gen", "ring", "4", "--local", "--out", c->topo, NULL};
    assert_int_equal(tnc_wait(tnc_start(args, c->out), RUN_LIMIT_MS), 0);
}

static void
s_cluster_free(struct cluster *c)
{
    nftw(c->dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* `rumor launch --topology T --metrics-dir RUN extra...`; returns status. */
static int
s_launch(const struct cluster *c, const char *const *extra)
{
    const char *args[ARGS_MAX] = {"launch",
                                  "--topology",
                                  c->topo,
                                  "--metrics-dir",
                                  c->run};
    size_t n = 5;
    for (size_t k = 0; extra[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = extra[k];
    args[n] = NULL;
    return tnc_wait(tnc_start(args, c->out), RUN_LIMIT_MS);
}

static double
s_num(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* A counter of fault handling (acks and syncs, docs/reliability.md);
 * 0 for algorithms that do not skip neighbours (no such field). */
static double
s_control(const cJSON *o, const char *name)
{
    double v = s_num(o, name);
    return isnan(v) ? 0 : v;
}

/* Reads DIR/node-ID.jsonl, checking every line (a JSON object with
 * consecutive steps from 1, the required numbers, counters that never
 * go down); returns the last line (caller frees) and the line count. */
static cJSON *
s_metrics(const struct cluster *c, int id, size_t *lines)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node-%d.jsonl", c->run, id);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("no metrics file %s", path);
    static char line[1 << 16];
    cJSON *last = NULL;
    double sent = 0, recv = 0;
    *lines = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o))
            fail_msg("%s:%zu: not a JSON object: %s", path, *lines + 1, line);
        (*lines)++;
        if (s_num(o, "step") != (double)*lines)
            fail_msg("%s:%zu: step %g", path, *lines, s_num(o, "step"));
        /* the transport counts a message when it takes it, so it never
         * lags the node's own count of what it sent */
        double own = s_num(o, "gossip_bytes_sent") +
                     s_num(o, "consensus_bytes_sent") +
                     s_control(o, "control_bytes_sent");
        if (isnan(s_num(o, "loss")) || s_num(o, "bytes_sent") < sent ||
            s_num(o, "bytes_recv") < recv || s_num(o, "bytes_sent") < own)
            fail_msg("%s:%zu: loss or byte counters wrong", path, *lines);
        sent = s_num(o, "bytes_sent");
        recv = s_num(o, "bytes_recv");
        cJSON_Delete(last);
        last = o;
    }
    fclose(f);
    if (last == NULL)
        fail_msg("%s is empty", path);
    return last;
}

/* A number from RUN/average.json (the average model, by rumor launch). */
static double
s_average(const struct cluster *c, const char *name)
{
    char path[400], text[1024] = {0};
    snprintf(path, sizeof path, "%s/average.json", c->run);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("no %s", path);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = '\0';
    cJSON *o = cJSON_Parse(text);
    double v = s_num(o, name);
    cJSON_Delete(o);
    if (isnan(v))
        fail_msg("%s has no number '%s': %s", path, name, text);
    return v;
}

/* Least squares on the cluster: every node ends within LSQ_TOL of W*. */
static void
s_check_lsq(const char *const *algo)
{
    struct cluster c;
    s_cluster_new(&c);
    const char *args[ARGS_MAX] = {"--workload",
                                  "lsq",
                                  "--batch",
                                  "0",
                                  "--optimizer",
                                  "sgd",
                                  "--lr",
                                  "0.3",
                                  "--steps",
                                  "300",
                                  "--eval-every",
                                  "100"};
    size_t n = 12;
    for (size_t k = 0; algo[k] != NULL; k++)
        args[n++] = algo[k];
    args[n] = NULL;
    int status = s_launch(&c, args);
    if (status != 0) {
        tnc_show(c.out);
        fail_msg("%s: launch exited %d", algo[1], status);
    }
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        cJSON *last = s_metrics(&c, i, &lines);
        double err = s_num(last, "optimum_error");
        cJSON_Delete(last);
        assert_int_equal(lines, 300);
        if (!(err < LSQ_TOL))
            fail_msg("%s: node %d ends %g from W* (tolerance %g)",
                     algo[1],
                     i,
                     err,
                     LSQ_TOL);
    }
    double avg = s_average(&c, "optimum_error");
    if (!(avg < LSQ_TOL))
        fail_msg("%s: the average model ends %g from W*", algo[1], avg);
    s_cluster_free(&c);
}

static void s_expect_refused(const char *const *args, const char *needle);

/* --- tests: topo gen --local ------------------------------------------ */

static void
test_topo_gen_local__endpoints_and_keys__ready_for_launch(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c);
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_load_file(c.topo, &t, &diag), RUMOR_OK);
    assert_int_equal(rumor_topology_nodes(t), NODES);
    for (size_t i = 0; i < NODES; i++) {
        const char *ep = rumor_topology_endpoint(t, i);
        assert_non_null(ep);
        assert_int_equal(strncmp(ep, "tcp://127.0.0.1:", 16), 0);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(ep, rumor_topology_endpoint(t, j));
        char base[400], keyfile[420];
        snprintf(base, sizeof base, "%s/keys/node-%zu", c.dir, i);
        rumor_net_keypair *kp = NULL;
        assert_int_equal(rumor_net_keypair_load(base, &kp), RUMOR_OK);
        assert_string_equal(rumor_net_keypair_public(kp),
                            rumor_topology_key(t, i));
        rumor_net_keypair_destroy(&kp);
        snprintf(keyfile, sizeof keyfile, "%s.key", base);
        struct stat st;
        assert_int_equal(stat(keyfile, &st), 0);
        assert_int_equal(st.st_mode & 077, 0);
    }
    rumor_topology_destroy(&t);
    const char *a[] = {"topo", "gen", "ring", "4", "--local", NULL};
    s_expect_refused(a, "--local needs --out FILE");
    s_cluster_free(&c);
}

/* --- tests: training -------------------------------------------------- */

static void
test_lsq__powergossip_ring__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "powergossip", "--rank", "1", NULL};
    s_check_lsq(algo);
}

static void
test_lsq__choco_topk_ring__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] = {"--algo",
                          "choco",
                          "--codec",
                          "topk:ratio=0.1",
                          "--gamma",
                          "0.2",
                          NULL};
    s_check_lsq(algo);
}

static void
test_lsq__choco_qsgd_ring__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] =
        {"--algo", "choco", "--codec", "qsgd:bits=4", "--gamma", "0.5", NULL};
    s_check_lsq(algo);
}

static void
test_lsq__powersgd_ring__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "powersgd", "--rank", "2", NULL};
    s_check_lsq(algo);
}

static void
test_lsq__localsgd_ring__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "localsgd", "--period", "5", NULL};
    s_check_lsq(algo);
}

/* Streaming local SGD: 2 fragments syncing at staggered steps, their
 * top-k deltas with the neighbourhood's look-ahead. */
static void
test_lsq__localsgd_fragments__reaches_optimum(void **state)
{
    (void)state;
    const char *algo[] = {"--algo",
                          "localsgd",
                          "--period",
                          "4",
                          "--fragments",
                          "2",
                          "--delta-codec",
                          "topk:ratio=0.25",
                          "--ef-alpha",
                          "1",
                          NULL};
    s_check_lsq(algo);
}

/* Local SGD with a top-k compressed delta and step-ahead error feedback,
 * its options given in a config file. */
static void
test_lsq__localsgd_saef_from_config_file__reaches_optimum(void **state)
{
    (void)state;
    char path[] = "/tmp/rumor-node-test-ini-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char ini[] = "# local SGD, synchronised every 5 steps\n[node]\n"
                       "algo = localsgd\nperiod = 5\n"
                       "delta-codec = topk:ratio=0.25\nef-alpha = 1\n";
    assert_int_equal(write(fd, ini, sizeof ini - 1), (ssize_t)sizeof ini - 1);
    close(fd);
    const char *algo[] = {"--config", path, NULL};
    s_check_lsq(algo);
    unlink(path);
}

/* `rumor plot RUN`: six PNG files (checked by their signature). */
static void
s_check_plot(const struct cluster *c)
{
    const char *args[] = {"plot", c->run, NULL};
    int status = tnc_wait(tnc_start(args, c->out), RUN_LIMIT_MS);
    if (status != 0) {
        tnc_show(c->out);
        fail_msg("rumor plot exited %d", status);
    }
    static const char *const names[] = {"loss-vs-steps",
                                        "loss-vs-bytes",
                                        "loss-vs-seconds",
                                        "accuracy-vs-steps",
                                        "accuracy-vs-bytes",
                                        "accuracy-vs-seconds"};
    for (size_t k = 0; k < 6; k++) {
        char path[400];
        unsigned char sig[8] = {0};
        snprintf(path, sizeof path, "%s/plots/%s.png", c->run, names[k]);
        FILE *f = fopen(path, "rb");
        size_t got = f != NULL ? fread(sig, 1, sizeof sig, f) : 0;
        if (f != NULL)
            fclose(f);
        if (got != 8 || memcmp(sig, "\x89PNG\r\n\x1a\n", 8) != 0)
            fail_msg("%s is not a PNG file", path);
    }
}

/* The MLP on the embedded digits with algo: >= 90 % held-out accuracy on
 * every node and with the average model; same_model: every node holds
 * the same model (exact averages), so the same accuracy. */
static void
s_check_digits(const char *const *algo, bool same_model, bool plot)
{
    struct cluster c;
    s_cluster_new(&c);
    const char *args[ARGS_MAX] =
        {"--workload", "mlp", "--hidden", "32", "--steps", "300"};
    size_t n = 6;
    for (size_t k = 0; algo[k] != NULL; k++)
        args[n++] = algo[k];
    args[n] = NULL;
    int status = s_launch(&c, args);
    if (status != 0) {
        tnc_show(c.out);
        fail_msg("%s: launch exited %d", algo[1], status);
    }
    double first = NAN;
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        cJSON *last = s_metrics(&c, i, &lines);
        double acc = s_num(last, "accuracy");
        cJSON_Delete(last);
        if (!(acc >= 0.90))
            fail_msg("%s: node %d: held-out accuracy %.4f < 0.90",
                     algo[1],
                     i,
                     acc);
        first = i == 0 ? acc : first;
        if (same_model && acc != first)
            fail_msg("%s: node %d: accuracy %.6f, node 0 %.6f",
                     algo[1],
                     i,
                     acc,
                     first);
    }
    double avg = s_average(&c, "accuracy");
    if (!(avg >= 0.90))
        fail_msg("%s: the average model: held-out accuracy %.4f < 0.90",
                 algo[1],
                 avg);
    if (plot)
        s_check_plot(&c);
    s_cluster_free(&c);
}

static void
test_mlp_digits__powergossip_ring__reaches_90_percent(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "powergossip", "--rank", "1", NULL};
    s_check_digits(algo, false, true);
}

/* Compressed data-parallel SGD as in DGC (Lin et al. 2018): 1 % top-k
 * of each layer's gradient with momentum correction and masking, in the
 * band of the exact all-reduce (0.955 with the default momentum 0.9 at
 * lr 0.05; DGC's memory carries that momentum, so plain SGD steps). */
static void
test_mlp_digits__allreduce_topk_dgc__reaches_90_percent(void **state)
{
    (void)state;
    const char *algo[] = {"--algo",
                          "allreduce",
                          "--codec",
                          "topk:ratio=0.01",
                          "--ef",
                          "dgc:0.9",
                          "--optimizer",
                          "sgd",
                          NULL};
    s_check_digits(algo, true, false);
}

/* TernGrad with scaler sharing (Wen et al. 2017, Algorithm 1): every
 * node's gradient ternarized at the max over nodes of the buckets'
 * scalers, in the band of the exact all-reduce, every node the same
 * model. */
static void
test_mlp_digits__allreduce_terngrad_share__reaches_90_percent(void **state)
{
    (void)state;
    const char *algo[] = {"--algo",
                          "allreduce",
                          "--codec",
                          "terngrad:share=1",
                          NULL};
    s_check_digits(algo, true, false);
}

/* --- tests: bytes ------------------------------------------------------ */

/* The same training in this process: the lsq workload of each node, its
 * optimizer (sgd, lr 0.1), and the gossip algorithm in the simulator, in
 * the loop the node runs (gradient at x_t, gossip, optimizer step).
 * bytes[i] gets what the simulator counts for node i, loss[i] node i's
 * minibatch loss at the last step. */
static void
s_replay(const struct rumor_gossip_opts *go,
         uint64_t steps,
         double *bytes,
         double *loss,
         double *consensus)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &t, &diag),
                     RUMOR_OK);
    rumor_workload *w[NODES] = {0};
    rumor_gossip *g[NODES] = {0};
    rumor_optim *o[NODES] = {0};
    struct rumor_model *grad[NODES] = {0};
    struct rumor_optim_opts oo;
    rumor_optim_opts_default(&oo);
    oo.kind = RUMOR_OPTIM_SGD;
    oo.lr = 0.1;
    for (uint32_t i = 0; i < NODES; i++) {
        struct rumor_workload_opts wo;
        rumor_workload_opts_default(&wo);
        wo.kind = RUMOR_WORKLOAD_LSQ;
        wo.node = i;
        wo.nodes = NODES;
        assert_int_equal(rumor_workload_new(&wo, &w[i], &diag), RUMOR_OK);
        struct rumor_model *m = rumor_workload_model(w[i]);
        assert_int_equal(rumor_model_clone(m, &grad[i]), RUMOR_OK);
        assert_int_equal(rumor_optim_new(&oo, m, &o[i]), RUMOR_OK);
        assert_int_equal(rumor_gossip_new(go, t, i, m, &g[i], &diag), RUMOR_OK);
    }
    rumor_sim *sim = NULL;
    assert_int_equal(rumor_sim_new(g, NODES, &sim), RUMOR_OK);
    for (uint64_t s = 0; s < steps; s++) {
        for (uint32_t i = 0; i < NODES; i++) {
            assert_int_equal(rumor_gossip_step_ahead(g[i]), RUMOR_OK);
            assert_int_equal(rumor_workload_grad(w[i], s, grad[i], &loss[i]),
                             RUMOR_OK);
        }
        assert_int_equal(rumor_sim_step(sim, s), RUMOR_OK);
        for (uint32_t i = 0; i < NODES; i++)
            assert_int_equal(
                rumor_optim_step(o[i], s, rumor_workload_model(w[i]), grad[i]),
                RUMOR_OK);
    }
    for (uint32_t i = 0; i < NODES; i++) {
        bytes[i] = (double)rumor_sim_bytes_sent(sim, i);
        /* mean squared distance to the ring neighbours i - 1 and i + 1 */
        consensus[i] = 0;
        for (uint32_t d = 1; d < NODES; d += 2) {
            const struct rumor_model *a = rumor_workload_model(w[i]);
            const struct rumor_model *b =
                rumor_workload_model(w[(i + d) % NODES]);
            const struct rumor_tensor *ta = &a->tensors[0];
            for (size_t e = 0; e < rumor_tensor_numel(ta); e++) {
                double diff = (double)ta->data[e] - b->tensors[0].data[e];
                consensus[i] += diff * diff / 2;
            }
        }
    }
    rumor_sim_destroy(&sim);
    for (uint32_t i = 0; i < NODES; i++) {
        rumor_gossip_destroy(&g[i]);
        rumor_optim_destroy(&o[i]);
        rumor_model_free(&grad[i]);
        rumor_workload_destroy(&w[i]);
    }
    rumor_topology_destroy(&t);
}

#define BYTES_STEPS 40

static void
s_check_bytes(const struct rumor_gossip_opts *go, const char *const *algo)
{
    struct cluster c;
    s_cluster_new(&c);
    const char *args[ARGS_MAX] = {"--workload",
                                  "lsq",
                                  "--optimizer",
                                  "sgd",
                                  "--lr",
                                  "0.1",
                                  "--steps",
                                  "40",
                                  "--consensus-every",
                                  "10"};
    size_t n = 10;
    for (size_t k = 0; algo[k] != NULL; k++)
        args[n++] = algo[k];
    args[n] = NULL;
    int status = s_launch(&c, args);
    if (status != 0) {
        tnc_show(c.out);
        fail_msg("%s: launch exited %d", go->algo, status);
    }
    double sim[NODES], loss[NODES];
    double consensus[NODES];
    s_replay(go, BYTES_STEPS, sim, loss, consensus);
    double sent_all = 0, recv_all = 0;
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        cJSON *m = s_metrics(&c, i, &lines);
        assert_int_equal(lines, BYTES_STEPS);
        double gsent = s_num(m, "gossip_bytes_sent");
        if (gsent != sim[i])
            fail_msg("%s node %d: counted %.0f gossip bytes, simulator %.0f",
                     go->algo,
                     i,
                     gsent,
                     sim[i]);
        double node_loss = s_num(m, "loss");
        if (!(fabs(node_loss - loss[i]) <= 1e-9 * fabs(loss[i])))
            fail_msg("%s node %d: last loss %.17g, in-process loop %.17g",
                     go->algo,
                     i,
                     node_loss,
                     loss[i]);
        sent_all += gsent;
        recv_all += s_num(m, "gossip_bytes_recv");
        /* the transport: gossip frames + the handshake (a HELLO and a
         * HELLO_OK at least per link, two links on a ring; 88 bytes and
         * more each) + 64-byte heartbeats, nothing else */
        double hs_frames = s_num(m, "handshake_frames_sent");
        double hs_bytes = s_num(m, "handshake_bytes_sent");
        double extra = s_num(m, "bytes_sent") - gsent -
                       s_num(m, "consensus_bytes_sent") -
                       s_control(m, "control_bytes_sent") - hs_bytes;
        double frames = s_num(m, "frames_sent") -
                        s_num(m, "gossip_frames_sent") -
                        s_num(m, "consensus_frames_sent") -
                        s_control(m, "control_frames_sent") - hs_frames;
        double cons = s_num(m, "consensus_edge_sq");
        if (!(fabs(cons - consensus[i]) <= 1e-6 * consensus[i] + 1e-12))
            fail_msg("%s node %d: consensus %.9g, in-process %.9g",
                     go->algo,
                     i,
                     cons,
                     consensus[i]);
        if (extra != 64 * frames || hs_frames < 4 || hs_bytes < 88 * hs_frames)
            fail_msg("%s node %d: %.0f bytes in %.0f frames besides gossip "
                     "and %.0f handshake frames (%.0f bytes) are not "
                     "heartbeats",
                     go->algo,
                     i,
                     extra,
                     frames,
                     hs_frames,
                     hs_bytes);
        cJSON_Delete(m);
    }
    assert_true(sent_all > 0);
    if (sent_all != recv_all)
        fail_msg("%s: %.0f gossip bytes sent, %.0f received",
                 go->algo,
                 sent_all,
                 recv_all);
    s_cluster_free(&c);
}

static void
test_bytes__powergossip_and_choco__equal_simulator_and_transport(void **state)
{
    (void)state;
    struct rumor_gossip_opts go;
    rumor_gossip_opts_default(&go);
    snprintf(go.algo, sizeof go.algo, "powergossip");
    const char *pg[] = {"--algo", "powergossip", NULL};
    s_check_bytes(&go, pg);
    snprintf(go.algo, sizeof go.algo, "choco");
    snprintf(go.codec, sizeof go.codec, "topk:ratio=0.1");
    go.gamma = 0.2;
    const char *ch[] = {"--algo",
                        "choco",
                        "--codec",
                        "topk:ratio=0.1",
                        "--gamma",
                        "0.2",
                        "--no-overlap",
                        NULL};
    s_check_bytes(&go, ch);
}

/* --- tests: options ---------------------------------------------------- */

static void
s_expect_refused(const char *const *args, const char *needle)
{
    char out[] = "/tmp/rumor-node-test-out-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    int status = tnc_wait(tnc_start(args, out), RUN_LIMIT_MS);
    FILE *f = fopen(out, "r");
    char text[2048] = {0};
    size_t got = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = '\0';
    if (f != NULL)
        fclose(f);
    unlink(out);
    if (status != 2 || strstr(text, needle) == NULL)
        fail_msg("expected exit 2 and '%s', got %d: %s", needle, status, text);
}

/* rumor_node_config_set / _check in this process, table-driven: each row
 * is "name=value" settings applied in order (after topology, id and
 * insecure), the expected result, and a piece of the message. */
struct opts_case {
    const char *set[4];
    rumor_err want;
    const char *msg;
};

static const struct opts_case s_opts_cases[] = {
    {{"lr=0.5", NULL}, RUMOR_OK, ""},
    {{"lr=abc", NULL}, RUMOR_EINVAL, "--lr: expected a number"},
    {{"lr=0", NULL}, RUMOR_EINVAL, "--lr: expected a number"},
    {{"steps=12x", NULL}, RUMOR_EINVAL, "--steps: expected a whole number"},
    {{"nosuch=1", NULL}, RUMOR_EINVAL, "unknown option --nosuch"},
    {{"hidden=64,32", NULL}, RUMOR_OK, ""},
    {{"hidden=64,,32", NULL}, RUMOR_EINVAL, "--hidden"},
    {{"hidden=0", NULL}, RUMOR_EINVAL, "--hidden"},
    {{"workload=lsq", "hidden=8", NULL}, RUMOR_EINVAL, "mlp only"},
    {{"workload=mlp", "lsq-noise=1", NULL}, RUMOR_EINVAL, "lsq only"},
    {{"shard=dirichlet:0.3", NULL}, RUMOR_OK, ""},
    {{"shard=dirichlet:", NULL}, RUMOR_EINVAL, "--shard"},
    {{"shard=random", NULL}, RUMOR_EINVAL, "iid or dirichlet:ALPHA"},
    {{"optimizer=adam", NULL}, RUMOR_EINVAL, "sgd, momentum or nesterov"},
    {{"decay-factor=0.5", NULL}, RUMOR_EINVAL, "needs --decay-every"},
    {{"decay-every=100", "decay-factor=0.5", NULL}, RUMOR_OK, ""},
    {{"algo=powergossip", "rank=2", "iterations=2", NULL}, RUMOR_OK, ""},
    {{"algo=dpsgd", "codec=topk:k=3", NULL}, RUMOR_EINVAL, "--codec"},
    {{"algo=allreduce", "gamma=0.5", NULL}, RUMOR_EINVAL, "--gamma"},
    {{"algo=localsgd", "ef-alpha=1", NULL}, RUMOR_EINVAL, "--delta-codec"},
    {{"algo=dpsgd", "exchange=gradient", NULL}, RUMOR_EINVAL, "powersgd"},
    {{"algo=powersgd", "exchange=model", NULL}, RUMOR_EINVAL, "gradients"},
    {{"rate=100M", "delay-ms=5", NULL}, RUMOR_OK, ""},
    {{"rate=100X", NULL}, RUMOR_EINVAL, "--rate"},
    {{"progress=sometimes", NULL}, RUMOR_EINVAL, "auto, on or off"},
    {{"log-level=loud", NULL}, RUMOR_EINVAL, "--log-level"},
};

static void
test_node_opts__table__accepted_or_refused_with_reason(void **state)
{
    (void)state;
    for (size_t r = 0; r < sizeof s_opts_cases / sizeof s_opts_cases[0]; r++) {
        const struct opts_case *c = &s_opts_cases[r];
        rumor_node_config *cfg = NULL;
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_node_config_new(&cfg), RUMOR_OK);
        const struct rumor_node_opts *o = rumor_node_config_opts(cfg);
        assert_int_equal(rumor_node_config_set(cfg, "topology", "t", &diag), 0);
        assert_int_equal(rumor_node_config_set(cfg, "id", "1", &diag), 0);
        assert_int_equal(rumor_node_config_set(cfg, "insecure", "", &diag), 0);
        rumor_err rc = RUMOR_OK;
        for (size_t k = 0; k < 4 && c->set[k] != NULL && rc == RUMOR_OK; k++) {
            char name[64];
            const char *eq = strchr(c->set[k], '=');
            snprintf(name,
                     sizeof name,
                     "%.*s",
                     (int)(eq - c->set[k]),
                     c->set[k]);
            struct rumor_node_opts before = *o;
            rc = rumor_node_config_set(cfg, name, eq + 1, &diag);
            if (rc != RUMOR_OK && memcmp(&before, o, sizeof *o) != 0)
                fail_msg("row %zu: a refused value changed the options", r);
        }
        if (rc == RUMOR_OK)
            rc = rumor_node_config_check(cfg, &diag);
        rumor_node_config_destroy(&cfg);
        if (rc != c->want || strstr(diag.msg, c->msg) == NULL)
            fail_msg("row %zu (%s): got %s '%s'",
                     r,
                     c->set[0],
                     rumor_errname(rc),
                     diag.msg);
    }
}

/* An INI file: a bad line is reported with its line number. */
static void
test_node_opts__config_file_bad_key__file_and_line(void **state)
{
    (void)state;
    char path[] = "/tmp/rumor-node-test-ini-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char ini[] = "[node]\nlr = 0.1\n\nlearning-rate = 0.1\n";
    assert_int_equal(write(fd, ini, sizeof ini - 1), (ssize_t)sizeof ini - 1);
    close(fd);
    rumor_node_config *cfg = NULL;
    assert_int_equal(rumor_node_config_new(&cfg), RUMOR_OK);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_load(cfg, path, &diag), RUMOR_EINVAL);
    assert_int_equal(diag.line, 4);
    assert_non_null(strstr(diag.msg, "unknown option --learning-rate"));
    /* unchanged: the file is refused whole */
    assert_true(rumor_node_config_opts(cfg)->optim.lr == 0.05);
    const char sect[] = "[training]\nlr = 0.1\n";
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, sect, sizeof sect - 1),
                     (ssize_t)sizeof sect - 1);
    close(fd);
    assert_int_equal(rumor_node_config_load(cfg, path, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "unknown section [training]"));
    unlink(path);
    assert_int_equal(rumor_node_config_load(cfg, path, &diag), RUMOR_ENOTFOUND);
    rumor_node_config_destroy(&cfg);
}

static void
test_node_options__contradictions_and_unknown__refused(void **state)
{
    (void)state;
    const char *a[] = {"node",
                       "--topology",
                       "x",
                       "--id",
                       "0",
                       "--insecure",
                       "--algo",
                       "choco",
                       "--rank",
                       "4",
                       NULL};
    s_expect_refused(a, "--rank does not apply to --algo choco");
    const char *b[] = {"node",
                       "--topology",
                       "x",
                       "--id",
                       "0",
                       "--insecure",
                       "--lr-typo",
                       "1",
                       NULL};
    s_expect_refused(b, "unknown option --lr-typo");
    const char *d[] = {"node",
                       "--topology",
                       "x",
                       "--id",
                       "0",
                       "--insecure",
                       "--optimizer",
                       "sgd",
                       "--momentum",
                       "0.9",
                       NULL};
    s_expect_refused(d, "--momentum needs --optimizer momentum or nesterov");
    const char *e[] = {"node",
                       "--topology",
                       "x",
                       "--id",
                       "0",
                       "--key",
                       "k",
                       "--insecure",
                       NULL};
    s_expect_refused(e, "--key and --insecure contradict");
    const char *f[] = {"launch",
                       "--topology",
                       "x",
                       "--workload",
                       "lsq",
                       "--dataset",
                       "digits",
                       NULL};
    s_expect_refused(f, "--dataset and --shard do not apply");
}

/* --- tests: launch ----------------------------------------------------- */

/* Children of pid, from /proc (read before the signal). */
static size_t
s_children(pid_t parent, pid_t *out, size_t cap)
{
    DIR *d = opendir("/proc");
    size_t n = 0;
    struct dirent *e = NULL;
    assert_non_null(d);
    for (e = readdir(d); e != NULL && n < cap; e = readdir(d)) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *paren = strrchr(buf, ')');
        if (paren == NULL)
            continue;
        /* ") S PPID ..." */
        char *end = NULL;
        long ppid = strtol(paren + 4, &end, 10);
        if (ppid == parent)
            out[n++] = (pid_t)strtol(e->d_name, &end, 10);
    }
    closedir(d);
    return n;
}

/* Starts a long run and waits until every node has written `lines` lines
 * of metrics and launch has its NODES children. */
static pid_t
s_start_long_run(const struct cluster *c, const char *deadline_ms, pid_t *kids)
{
    const char *args[] = {"launch",
                          "--topology",
                          c->topo,
                          "--metrics-dir",
                          c->run,
                          "--workload",
                          "lsq",
                          "--optimizer",
                          "sgd",
                          "--lr",
                          "0.1",
                          "--steps",
                          "100000000",
                          "--eval-every",
                          "0",
                          "--deadline-ms",
                          deadline_ms,
                          NULL};
    pid_t launch = tnc_start(args, c->out);
    uint64_t deadline = rumor_clock_ns() + RUN_LIMIT_MS * 1000000ull;
    for (;;) {
        size_t ready = 0;
        for (int i = 0; i < NODES; i++) {
            char path[400];
            snprintf(path, sizeof path, "%s/node-%d.jsonl", c->run, i);
            FILE *f = fopen(path, "r");
            int ch = f != NULL ? fgetc(f) : EOF;
            ready += ch == '{';
            if (f != NULL)
                fclose(f);
        }
        if (ready == NODES && s_children(launch, kids, NODES) == NODES)
            return launch;
        if (rumor_clock_ns() > deadline) {
            kill(launch, SIGKILL);
            tnc_show(c->out);
            fail_msg("the nodes did not start training");
        }
        tnc_pause_us(1000);
    }
}

static void
s_expect_gone(const pid_t *kids, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (kill(kids[k], 0) == 0 || errno != ESRCH)
            fail_msg("node process %d is still there", (int)kids[k]);
}

static void
test_launch__sigint__forwarded_and_no_node_left(void **state)
{
    (void)state;
    struct cluster c;
    s_cluster_new(&c);
    pid_t kids[NODES];
    pid_t launch = s_start_long_run(&c, "10000", kids);
    assert_int_equal(kill(launch, SIGINT), 0);
    int status = tnc_wait(launch, RUN_LIMIT_MS);
    s_expect_gone(kids, NODES);
    if (status != 130 || !tnc_contains(c.out, "forwarding to the nodes") ||
        !tnc_contains(c.out, "exited with status 130")) {
        tnc_show(c.out);
        fail_msg("launch exited %d after SIGINT", status);
    }
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        cJSON_Delete(s_metrics(&c, i, &lines));
        assert_true(lines >= 1 && lines < 100000000);
    }
    s_cluster_free(&c);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_topo_gen_local__endpoints_and_keys__ready_for_launch),
        cmocka_unit_test(test_lsq__powergossip_ring__reaches_optimum),
        cmocka_unit_test(test_lsq__choco_topk_ring__reaches_optimum),
        cmocka_unit_test(test_lsq__choco_qsgd_ring__reaches_optimum),
        cmocka_unit_test(test_lsq__powersgd_ring__reaches_optimum),
        cmocka_unit_test(test_lsq__localsgd_ring__reaches_optimum),
        cmocka_unit_test(test_lsq__localsgd_fragments__reaches_optimum),
        cmocka_unit_test(
            test_lsq__localsgd_saef_from_config_file__reaches_optimum),
        cmocka_unit_test(test_mlp_digits__powergossip_ring__reaches_90_percent),
        cmocka_unit_test(
            test_mlp_digits__allreduce_topk_dgc__reaches_90_percent),
        cmocka_unit_test(
            test_mlp_digits__allreduce_terngrad_share__reaches_90_percent),
        cmocka_unit_test(
            test_bytes__powergossip_and_choco__equal_simulator_and_transport),
        cmocka_unit_test(
            test_node_options__contradictions_and_unknown__refused),
        cmocka_unit_test(
            test_node_opts__table__accepted_or_refused_with_reason),
        cmocka_unit_test(test_node_opts__config_file_bad_key__file_and_line),
        cmocka_unit_test(test_launch__sigint__forwarded_and_no_node_left),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("node_cluster", tests, NULL, NULL);
}
