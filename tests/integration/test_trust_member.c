/*
 * Membership and state forgeries by an insider (issue 33; docs/
 * reliability.md, "Elastic rings": what a listed attacker can do): 4
 * `rumor node` processes on loopback with CURVE and least squares, one of
 * them the attacker, `rumor-attack` (tests/tools/attack_member.c) holding
 * that node's key and running it for real besides its forgery:
 *   - a COMMIT of epoch 1 without nodes 1 and 2, with the attacker's vote
 *     only, to nodes 0 and 3 (all-reduce, an elastic ring): refused by
 *     both, naming the sender; no epoch is installed, every node runs
 *     every step and ends with the undisturbed run's error;
 *   - a JOIN in live node 1's name to node 0 (the lowest member): refused
 *     (not signed by its joiner), no view change, the same ends;
 *   - a restart of node 2 with --join (D-PSGD on the ring: its neighbours
 *     are 1, the attacker, and 3) where the attacker's STATE is all 3.0:
 *     node 2 finds the two states disagree and takes neither; where it is
 *     for step 2^62: refused as past the run, node 3's state taken, node 2
 *     runs to the last step. The honest nodes run every step, within the
 *     error band of the undisturbed run.
 * Every wait has a deadline; every process started is killed and waited
 * for, the temporary directory removed.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include "rumor/core.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES       4
#define LIMIT_MS    60000 /* only a broken build waits this long */
#define DEADLINE    "1000"
#define DELAY_MS    "2"
#define STRIKE_STEP "20"
/* The band of the attacked runs' final error: the undisturbed run's,
 * times this (D-PSGD loses a node's steps to the restart). */
#define BAND 4.0

struct cluster {
    char dir[256], topo[300], run[300];
    const char *algo, *steps;
    pid_t pid[NODES];
};

static struct cluster s_c;

static int
s_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        if (s_c.pid[i] > 0) {
            kill(s_c.pid[i], SIGKILL);
            waitpid(s_c.pid[i], NULL, 0);
            s_c.pid[i] = 0;
        }
    tnc_dir_done(s_c.dir);
    return 0;
}

static void
s_cluster_new(struct cluster *c, const char *algo, const char *steps)
{
    memset(c, 0, sizeof *c);
    c->algo = algo;
    c->steps = steps;
    snprintf(c->dir, sizeof c->dir, "/tmp/rumor-member-attack-XXXXXX");
    tnc_ring4_local(c->dir, c->topo, sizeof c->topo);
}

/* Node id's options, `rumor node` style (--name=value), into argv from
 * argv[n] on; returns the new count. */
static size_t
s_node_args(struct cluster *c, int id, bool join, const char **argv, size_t n)
{
    static char buf[NODES][6][1024];
    char(*b)[1024] = buf[id];
    snprintf(b[0], 1024, "--topology=%s", c->topo);
    snprintf(b[1], 1024, "--id=%d", id);
    snprintf(b[2], 1024, "--key=%s/keys/node-%d", c->dir, id);
    snprintf(b[3], 1024, "--steps=%s", c->steps);
    snprintf(b[4], 1024, "--metrics-dir=%s", c->run);
    snprintf(b[5], 1024, "--algo=%s", c->algo);
    for (int k = 0; k < 6; k++)
        argv[n++] = b[k];
    const char *fixed[] = {"--workload=lsq",
                           "--optimizer=sgd",
                           "--lr=0.05",
                           "--eval-every=0",
                           "--deadline-ms=" DEADLINE,
                           "--down-after=2",
                           "--delay-ms=" DELAY_MS,
                           "--connect-timeout-ms=8000",
                           "--log-level=info",
                           NULL};
    for (int k = 0; fixed[k] != NULL; k++)
        argv[n++] = fixed[k];
    if (join)
        argv[n++] = "--join";
    return n;
}

/* Starts node id as `rumor node`, or, with attack (the attack's argv,
 * NULL-terminated), as rumor-attack running that node. */
static void
s_node(struct cluster *c, int id, bool join, const char *const *attack)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/node-%d.out", c->dir, id);
    const char *argv[TNC_ARGS_MAX];
    size_t n = 0;
    const char *path = tnc_bin();
    if (attack != NULL) {
        path = getenv("RUMOR_ATTACK");
        if (path == NULL)
            fail_msg("RUMOR_ATTACK (tests/tools/rumor-attack) is not set");
        argv[n++] = "rumor-attack";
        for (size_t k = 0; attack[k] != NULL; k++)
            argv[n++] = attack[k];
        argv[n++] = "--";
    } else {
        argv[n++] = "rumor";
        argv[n++] = "node";
    }
    n = s_node_args(c, id, join, argv, n);
    argv[n] = NULL;
    c->pid[id] = tnc_spawn_path(path, argv, out, NULL);
}

static void
s_start(struct cluster *c, const char *name, int attacker, const char *const *a)
{
    snprintf(c->run, sizeof c->run, "%s/%s", c->dir, name);
    for (int i = 0; i < NODES; i++)
        s_node(c, i, false, i == attacker ? a : NULL);
}

/* A field of node id's last complete metrics row (NAN when none). */
static double
s_last(const struct cluster *c, int id, const char *field)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/node-%d.jsonl", c->run, id);
    FILE *f = fopen(path, "r");
    static char line[2][1 << 16];
    int cur = 0, done = -1;
    while (f != NULL && fgets(line[cur], sizeof line[cur], f) != NULL) {
        if (strchr(line[cur], '\n') == NULL)
            break;
        done = cur;
        cur ^= 1;
    }
    if (f != NULL)
        fclose(f);
    cJSON *o = done >= 0 ? cJSON_Parse(line[done]) : NULL;
    double v = o != NULL ? tnc_num(o, field) : NAN;
    cJSON_Delete(o);
    return v;
}

/* Waits until node id's last row has step >= step. */
static void
s_until_step(struct cluster *c, int id, double step)
{
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    while (!(s_last(c, id, "step") >= step)) {
        int st = 0;
        if (waitpid(c->pid[id], &st, WNOHANG) == c->pid[id]) {
            c->pid[id] = 0;
            fail_msg("%s: node %d exited before step %g", c->algo, id, step);
        }
        if (rumor_clock_ns() > end)
            fail_msg("%s: node %d never reached step %g", c->algo, id, step);
        tnc_pause_us(20000);
    }
}

/* Node id exits 0 at the last step, and never left epoch 0's ring of 4
 * (elastic: ring). Returns its final lsq error. */
static double
s_finish_node(struct cluster *c, int id, bool ring)
{
    int st = tnc_wait(c->pid[id], LIMIT_MS);
    c->pid[id] = 0;
    char out[1200];
    snprintf(out, sizeof out, "%s/node-%d.out", c->dir, id);
    if (st != 0) {
        tnc_show(out);
        fail_msg("%s: node %d exited %d", c->algo, id, st);
    }
    double step = s_last(c, id, "step");
    double error = s_last(c, id, "optimum_error");
    if (step != strtod(c->steps, NULL) || isnan(error))
        fail_msg("%s: node %d ended at step %g of %s",
                 c->algo,
                 id,
                 step,
                 c->steps);
    if (ring && (s_last(c, id, "epoch") != 0 || s_last(c, id, "members") != 4))
        fail_msg("%s: node %d ended in epoch %g with %g members, not the "
                 "start's ring of 4",
                 c->algo,
                 id,
                 s_last(c, id, "epoch"),
                 s_last(c, id, "members"));
    return error;
}

static double
s_finish_all(struct cluster *c, bool ring)
{
    double worst = 0;
    for (int i = 0; i < NODES; i++)
        worst = fmax(worst, s_finish_node(c, i, ring));
    return worst;
}

static void
s_log_says(const struct cluster *c, int id, const char *needle)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/node-%d.out", c->dir, id);
    if (!tnc_contains(out, needle)) {
        tnc_show(out);
        fail_msg("node %d's log does not say \"%s\"", id, needle);
    }
}

/* The undisturbed run's worst final error. */
static double
s_baseline(struct cluster *c, bool ring)
{
    s_start(c, "base", -1, NULL);
    return s_finish_all(c, ring);
}

static void
test_ring4_allreduce__forged_commit__refused_ring_finishes(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    s_cluster_new(c, "allreduce", "300");
    double base = s_baseline(c, true);
    const char *attack[] = {"forged-commit",
                            "--at=" STRIKE_STEP,
                            "--members=0,3",
                            "--to=0,3",
                            NULL};
    s_start(c, "attacked", 1, attack);
    double worst = s_finish_all(c, true);
    const char *refused = "a membership message from node 1 refused: a "
                          "COMMIT without a majority's votes";
    s_log_says(c, 1, "sent a forged COMMIT to node 0: success");
    s_log_says(c, 0, refused);
    s_log_says(c, 3, refused);
    printf("forged COMMIT: refused by nodes 0 and 3; optimum error %.3g "
           "(undisturbed %.3g)\n",
           worst,
           base);
    assert_true(worst <= BAND * base + 1e-9);
    s_teardown(NULL);
}

static void
test_ring4_allreduce__forged_join_for_live_node__refused(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    s_cluster_new(c, "allreduce", "300");
    double base = s_baseline(c, true);
    const char *attack[] = {"forged-join",
                            "--at=" STRIKE_STEP,
                            "--victim=1",
                            "--to=0,1,2",
                            NULL};
    s_start(c, "attacked", 3, attack);
    double worst = s_finish_all(c, true);
    s_log_says(c, 3, "sent a forged JOIN to node 0: success");
    s_log_says(c,
               0,
               "a membership message from node 3 refused: a forwarded "
               "JOIN not signed by its joiner");
    printf("forged JOIN for node 1: refused; optimum error %.3g (undisturbed "
           "%.3g)\n",
           worst,
           base);
    assert_true(worst <= BAND * base + 1e-9);
    s_teardown(NULL);
}

/* `algo` on the ring with node `attacker` the attacker: node 2 is
 * killed at the strike step and restarted with --join; the state it is
 * sent goes through `attack`. Returns the others' worst final error. */
static double
s_poisoned_join(struct cluster *c,
                const char *algo,
                const char *steps,
                int attacker,
                const char *const *attack,
                double *base)
{
    bool ring = strcmp(algo, "allreduce") == 0;
    s_cluster_new(c, algo, steps);
    *base = s_baseline(c, ring);
    s_start(c, "attacked", attacker, attack);
    s_until_step(c, 2, strtod(STRIKE_STEP, NULL));
    kill(c->pid[2], SIGKILL);
    waitpid(c->pid[2], NULL, 0);
    s_node(c, 2, true, NULL);
    double worst = 0;
    for (int i = 0; i < NODES; i++)
        if (i != 2)
            worst = fmax(worst, s_finish_node(c, i, false));
    return worst;
}

static void
test_ring4_dpsgd__joiner_sent_all_3__neither_state_taken(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    const char *attack[] = {"state-poison", "--value=3.0", NULL};
    double base = 0;
    double worst = s_poisoned_join(c, "dpsgd", "400", 1, attack, &base);
    /* the joiner waits its --connect-ms for two states that agree */
    int st = tnc_wait(c->pid[2], LIMIT_MS);
    c->pid[2] = 0;
    s_log_says(c, 1, "a poisoned STATE");
    s_log_says(c, 2, "the states of nodes 1 and 3 disagree");
    char out[1200];
    snprintf(out, sizeof out, "%s/node-2.out", c->dir);
    if (tnc_contains(out, "joined: model")) {
        tnc_show(out);
        fail_msg("node 2 took a state its two neighbours disagree on");
    }
    assert_int_not_equal(st, 0);
    printf("STATE of all 3.0: not taken (joiner exit %d); the others' "
           "optimum error %.3g (undisturbed %.3g)\n",
           st,
           worst,
           base);
    assert_true(worst <= BAND * base + 1e-9);
    s_teardown(NULL);
}

static void
test_ring4_dpsgd__joiner_sent_step_2_62__refused_joins_from_3(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    const char *attack[] = {"state-poison", "--step=4611686018427387904", NULL};
    double base = 0;
    double worst = s_poisoned_join(c, "dpsgd", "400", 1, attack, &base);
    double joiner = s_finish_node(c, 2, false);
    s_log_says(c,
               2,
               "node 1 sent a state of step 4611686018427387905, past "
               "the run's 400 steps: refused");
    s_log_says(c, 2, "joined: model");
    s_log_says(c, 2, "of node 3");
    printf("STATE for step 2^62: refused, node 3's taken; optimum error %.3g, "
           "the joiner's %.3g (undisturbed %.3g)\n",
           worst,
           joiner,
           base);
    assert_true(worst <= BAND * base + 1e-9);
    assert_true(joiner <= BAND * base + 1e-9);
    s_teardown(NULL);
}

/* All-reduce, an elastic ring: node 0, the attacker, is the holder of
 * the view that takes node 2 back, and sends it (it alone: a member behind
 * by a completed step takes the holder's state unvouched, reliability.md)
 * a model of all 3.0; node 1's own state of that step does not vouch for
 * it, so node 2 refuses it and gives up, and the ring goes on without
 * it. */
static void
test_ring4_allreduce__holder_sends_joiner_all_3__not_vouched(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    const char *attack[] = {"state-poison", "--value=3.0", "--to=2", NULL};
    double base = 0;
    double worst = s_poisoned_join(c, "allreduce", "300", 0, attack, &base);
    int st = tnc_wait(c->pid[2], LIMIT_MS);
    c->pid[2] = 0;
    /* the holder of the view is node 0 (the liar: its state refused) or
     * node 1 (then the liar is the voucher, its own state as poisoned,
     * and the honest holder's is refused): either way nothing of the
     * poison is taken and the joiner gives up */
    s_log_says(c, 2, "refused: not vouched for by node ");
    assert_int_not_equal(st, 0);
    printf("holder's STATE of all 3.0 to an elastic joiner: refused (joiner "
           "exit %d); the others' optimum error %.3g (undisturbed %.3g)\n",
           st,
           worst,
           base);
    assert_true(worst <= BAND * base + 1e-9);
    s_teardown(NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_ring4_allreduce__forged_commit__refused_ring_finishes,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring4_allreduce__forged_join_for_live_node__refused,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring4_dpsgd__joiner_sent_all_3__neither_state_taken,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring4_dpsgd__joiner_sent_step_2_62__refused_joins_from_3,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring4_allreduce__holder_sends_joiner_all_3__not_vouched,
            s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
