/*
 * Errors and logs a user can act on (issue 18, section 4), with real
 * `rumor` processes over CURVE on loopback:
 *   - two nodes whose models differ (another hidden width) or whose
 *     settings differ (another algorithm) stop at the handshake, both of
 *     them, well before the 30 s connect time-out, with one error that
 *     names the first difference in the same words on both nodes;
 *   - a clean `rumor launch` run prints progress and the result, and no
 *     warning, error or transport line (a neighbour that finishes first
 *     closes its connections: that is not news).
 * Every process started here is waited for with a deadline and killed if
 * it passes it.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/integration/test_node_common.h"

#include <ftw.h>
#include <stdbool.h>
#include <string.h>

#define LIMIT_MS 20000 /* below the 30 s connect time-out of the old way */

struct t_dir {
    char dir[256];
    char topo[300];
    char key[2][300];
    char out[2][300];
};

static void
t_dir_new(struct t_dir *d, const char *nodes)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/rumor-errors-test-XXXXXX");
    assert_non_null(mkdtemp(d->dir));
    /* a copy: gcc -O1 (make asan) cannot tell d->key[i] from d->dir */
    char dir[sizeof d->dir];
    memcpy(dir, d->dir, sizeof dir);
    snprintf(d->topo, sizeof d->topo, "%s/ring.topo", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(d->key[i], sizeof d->key[i], "%s/keys/node-%d", dir, i);
        snprintf(d->out[i], sizeof d->out[i], "%s/node-%d.out", dir, i);
    }
    const char *args[] =
        {"topo", "gen", "ring", nodes, "--local", "--out", d->topo, NULL};
    assert_int_equal(tnc_wait(tnc_start(args, d->out[0]), LIMIT_MS), 0);
    unlink(d->out[0]);
}

static void
t_dir_free(struct t_dir *d)
{
    nftw(d->dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole of a (small) output file, NUL-terminated, in buf. */
static void
t_read(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f != NULL)
        fclose(f);
}

/* Two nodes, node i with its extra options (two or three words); both must fail
 * at the handshake with `cannot gossip with node J: want`, and exit 2, the
 * status of a configuration that cannot run (the launcher does not
 * restart it). */
static void
t_refused_pair(const char *const extra[2][3], const char *want)
{
    struct t_dir d;
    t_dir_new(&d, "2");
    pid_t pid[2];
    uint64_t t0 = rumor_clock_ns();
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"node",
                              "--topology",
                              d.topo,
                              "--id",
                              i == 0 ? "0" : "1",
                              "--key",
                              d.key[i],
                              "--steps",
                              "20",
                              extra[i][0],
                              extra[i][1],
                              extra[i][2],
                              NULL};
        pid[i] = tnc_start(args, d.out[i]);
    }
    int status[2];
    for (int i = 0; i < 2; i++)
        status[i] = tnc_wait(pid[i], LIMIT_MS);
    double seconds = (double)(rumor_clock_ns() - t0) * 1e-9;
    for (int i = 0; i < 2; i++) {
        char out[8192], line[512];
        t_read(d.out[i], out, sizeof out);
        snprintf(line,
                 sizeof line,
                 "rumor node: cannot gossip with node %d: %s\n",
                 1 - i,
                 want);
        if (status[i] != 2 || strstr(out, line) == NULL) {
            tnc_show(d.out[i]);
            fail_msg("node %d: exit %d, no \"%s\"", i, status[i], line);
        }
    }
    /* both processes, starting included, in well under the 30 s the
     * links would otherwise be waited for */
    if (seconds > 10.0)
        fail_msg("the refusal took %.1f s", seconds);
    t_dir_free(&d);
}

static void
test_handshake__other_hidden_width__both_name_the_tensor(void **state)
{
    (void)state;
    const char *const extra[2][3] = {{"--hidden", "32"}, {"--hidden", "48"}};
    t_refused_pair(extra,
                   "models differ at tensor 0: node 0 has float32 [32, 64], "
                   "node 1 has float32 [48, 64]");
}

static void
test_handshake__other_algorithm__both_name_the_setting(void **state)
{
    (void)state;
    const char *const extra[2][3] = {{"--algo", "choco"}, {"--algo", "dpsgd"}};
    t_refused_pair(extra,
                   "settings differ: node 0 has algo=choco, node 1 has "
                   "algo=dpsgd");
}

/* Compressed all-reduce: a node with CO3's decayed memory beside one
 * with plain error feedback would average gradients of two methods. */
static void
test_handshake__error_feedback_differs__both_name_the_setting(void **s)
{
    (void)s;
    const char *const extra[2][3] = {
        {"--algo=allreduce", "--codec=topk:ratio=0.1", "--ef=ef-decay:0.5"},
        {"--algo=allreduce", "--codec=topk:ratio=0.1", "--ef=ef"}};
    t_refused_pair(extra,
                   "settings differ: node 0 has ef=ef-decay:0.5, node 1 has "
                   "ef=ef");
}

/* TernGrad's scaler sharing: a node that waits for scalers beside one
 * that sends its payload at once would read a payload as scalers. */
static void
test_handshake__terngrad_share_differs__both_name_the_setting(void **s)
{
    (void)s;
    const char *const extra[2][3] = {
        {"--algo=allreduce", "--codec=terngrad:share=1"},
        {"--algo=allreduce", "--codec=terngrad"}};
    t_refused_pair(extra,
                   "settings differ: node 0 has codec=terngrad:share=1, node "
                   "1 has codec=terngrad");
}

/* PowerSGD sums P over the nodes: a node drawing a fresh Q every step
 * beside one that reuses its last Q would sum projections on two bases. */
static void
test_handshake__powersgd_warm_start_differs__both_name_the_setting(void **s)
{
    (void)s;
    const char *const extra[2][3] = {{"--algo=powersgd", "--no-warm-start"},
                                     {"--algo=powersgd", "--warm-start"}};
    t_refused_pair(extra,
                   "settings differ: node 0 has warm-start=0, node 1 has "
                   "warm-start=1");
}

/* PowerGossip: the two ends of an edge must start each power iteration
 * from the same factor; one drawing a fresh one beside one that keeps the
 * last would send products of two different vectors. */
static void
test_handshake__powergossip_warm_start_differs__both_name_the_setting(void **s)
{
    (void)s;
    const char *const extra[2][3] = {{"--algo=powergossip", "--warm-start"},
                                     {"--algo=powergossip", "--no-warm-start"}};
    t_refused_pair(extra,
                   "settings differ: node 0 has warm-start=1, node 1 has "
                   "warm-start=0");
}

static void
test_launch__clean_run__only_progress_and_result(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d, "4");
    char run[320];
    snprintf(run, sizeof run, "%s/run", d.dir);
    const char *args[] = {"launch",
                          "--topology",
                          d.topo,
                          "--metrics-dir",
                          run,
                          "--steps",
                          "100",
                          NULL};
    int status = tnc_wait(tnc_start(args, d.out[0]), 60000);
    static char out[1 << 16];
    t_read(d.out[0], out, sizeof out);
    /* the lines a normal end used to print, and any warning or error */
    static const char *const noise[] = {"size cap",
                                        "rebuilding",
                                        "disconnected",
                                        "is late",
                                        "is down",
                                        " WARN ",
                                        " ERROR "};
    bool clean = status == 0 && strstr(out, "all nodes finished") != NULL &&
                 strstr(out, "step 100/100") != NULL;
    for (size_t k = 0; k < sizeof noise / sizeof noise[0]; k++)
        clean = clean && strstr(out, noise[k]) == NULL;
    if (!clean) {
        tnc_show(d.out[0]);
        fail_msg("launch exited %d; its output is not only progress and the "
                 "result",
                 status);
    }
    t_dir_free(&d);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_handshake__other_hidden_width__both_name_the_tensor),
        cmocka_unit_test(
            test_handshake__other_algorithm__both_name_the_setting),
        cmocka_unit_test(
            test_handshake__powersgd_warm_start_differs__both_name_the_setting),
        cmocka_unit_test(
            test_handshake__powergossip_warm_start_differs__both_name_the_setting),
        cmocka_unit_test(
            test_handshake__error_feedback_differs__both_name_the_setting),
        cmocka_unit_test(
            test_handshake__terngrad_share_differs__both_name_the_setting),
        cmocka_unit_test(test_launch__clean_run__only_progress_and_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
