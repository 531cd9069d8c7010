/*
 * Claims from peers (docs/reliability.md): a 4-node loopback ring with
 * CURVE, logistic regression on the embedded digits, D-PSGD (the fault
 * path that SYNC, DONE and STATE belong to), whose node 3 is the insider
 * tests/tools/rumor-attack (RUMOR_ATTACK) holding node 3's listed key and
 * lying about steps (tests/tools/attack_step.c):
 *   - a GOSSIP claiming step 150 of 200, or step 2^62;
 *   - every GOSSIP from step 20 on saying stop = 1;
 *   - a SYNC saying its next step is 150;
 *   - a SYNC with DONE (step 200: "I ran the last step") at step 20;
 *   - a STATE of step 2^62 to a node that joins (--join) after a kill -9,
 *     the honest nodes' links delayed 25 ms (--delay-ms) so that the lie
 *     is the first answer the joiner gets.
 * Each runs next to an undisturbed run (node 3 honest) in the same test:
 * every honest node runs every step (one metrics line per step, the last
 * one step 200), ends within ACC_BAND of its undisturbed accuracy, the run
 * within TIME_FACTOR of the undisturbed time (plus one deadline), and the
 * neighbours of node 3 log a line naming it.
 * Then `rumor launch`: one node stopped early (SIGTERM to that node
 * alone, so every node stops together after a few steps and exits 0):
 * the launcher says which nodes did not run every step, exits 1 and
 * evaluates no average model.
 * Every process started is killed and waited for, the directory removed;
 * waits poll files with a deadline.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include "rumor/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES       4
#define LIAR        3
#define STEPS       "200"
#define STEPS_N     200
#define LIMIT_MS    60000 /* only a broken build (or a believed lie) */
#define DEADLINE_MS 1000
#define ACC_BAND    0.03 /* accuracy, absolute, of the undisturbed run's */
#define TIME_FACTOR 3.0  /* of the undisturbed run's wall time */

struct ring {
    char dir[256];
    char topo[300];
    const char *delay_ms; /* --delay-ms of the honest nodes' links */
    pid_t pid[NODES + 1]; /* the nodes; [NODES]: a launcher */
};

static struct ring s_ring;

/* Whatever a test left: nodes and a launcher (whose nodes then stop by
 * themselves, PR_SET_PDEATHSIG, and are reaped by nobody here). */
static int
s_teardown(void **state)
{
    (void)state;
    struct ring *r = &s_ring;
    for (int i = 0; i <= NODES; i++)
        if (r->pid[i] > 0) {
            kill(r->pid[i], SIGCONT);
            kill(r->pid[i], SIGKILL);
            waitpid(r->pid[i], NULL, 0);
            r->pid[i] = 0;
        }
    tnc_dir_done(r->dir);
    return 0;
}

static void
s_ring_new(struct ring *r)
{
    memset(r, 0, sizeof *r);
    r->delay_ms = "0";
    snprintf(r->dir, sizeof r->dir, "/tmp/rumor-trust-XXXXXX");
    tnc_ring4_local(r->dir, r->topo, sizeof r->topo);
}

static const char *
s_attack_bin(void)
{
    const char *bin = getenv("RUMOR_ATTACK");
    if (bin == NULL)
        fail_msg("RUMOR_ATTACK is not set (make check sets it)");
    return bin;
}

/* DIR/NAME-ID.out, the output of node id in run `name`. */
static void
s_out(const struct ring *r, const char *name, int id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s-%d.out", r->dir, name, id);
}

/* Node id of run `name` (metrics in DIR/name), options then extra
 * (NULL-terminated, may be NULL); node LIAR runs `rumor-attack attack
 * aopts... --`, the same node options in --name=value form. */
static pid_t
s_start(struct ring *r,
        const char *name,
        int id,
        const char *attack,
        const char *const *aopts,
        const char *const *extra)
{
    char sid[16], key[1024], out[1024], run[1024];
    snprintf(sid, sizeof sid, "%d", id);
    snprintf(key, sizeof key, "%s/keys/node-%d", r->dir, id);
    snprintf(run, sizeof run, "%s/%s", r->dir, name);
    s_out(r, name, id, out, sizeof out);
    const char *opts[TNC_ARGS_MAX] = {
        "topology",    r->topo,
        "id",          sid,
        "key",         key,
        "workload",    "logreg",
        "steps",       STEPS,
        "eval-every",  "0",
        "deadline-ms", "1000",
        "down-after",  "2",
        "metrics-dir", run,
        "log-level",   "info",
        "delay-ms",    id == LIAR ? "0" : r->delay_ms,
        NULL};
    if (id != LIAR) {
        static char flags[32][48];
        const char *argv[TNC_ARGS_MAX] = {"node"};
        size_t n = 1;
        for (size_t k = 0; opts[k] != NULL; k += 2) {
            snprintf(flags[k / 2], sizeof flags[0], "--%s", opts[k]);
            argv[n++] = flags[k / 2];
            argv[n++] = opts[k + 1];
        }
        for (size_t k = 0; extra != NULL && extra[k] != NULL; k++)
            argv[n++] = extra[k];
        argv[n] = NULL;
        return tnc_start(argv, out);
    }
    static char kv[32][512];
    const char *argv[TNC_ARGS_MAX] = {"rumor-attack", attack};
    size_t n = 2;
    for (size_t k = 0; aopts != NULL && aopts[k] != NULL; k++)
        argv[n++] = aopts[k];
    argv[n++] = "--";
    for (size_t k = 0; opts[k] != NULL; k += 2) {
        snprintf(kv[k / 2], sizeof kv[0], "--%s=%s", opts[k], opts[k + 1]);
        argv[n++] = kv[k / 2];
    }
    argv[n] = NULL;
    return tnc_spawn_path(s_attack_bin(), argv, out, NULL);
}

/* What a node's metrics say at its end. */
struct s_end {
    size_t lines;
    double step, accuracy;
};

static struct s_end
s_end_of(const struct ring *r, const char *name, int id)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/node-%d.jsonl", r->dir, name, id);
    FILE *f = fopen(path, "r");
    static char line[1 << 16];
    struct s_end e = {0, NAN, NAN};
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (cJSON_IsObject(o)) {
            e.lines++;
            e.step = tnc_num(o, "step");
            if (!isnan(tnc_num(o, "accuracy")))
                e.accuracy = tnc_num(o, "accuracy");
        }
        cJSON_Delete(o);
    }
    if (f != NULL)
        fclose(f);
    return e;
}

/* Waits for every node of the run; each must exit 0. */
static void
s_wait_all(struct ring *r, const char *name)
{
    for (int i = 0; i < NODES; i++) {
        int st = tnc_wait(r->pid[i], LIMIT_MS);
        r->pid[i] = 0;
        if (st != 0) {
            char out[1024];
            s_out(r, name, i, out, sizeof out);
            tnc_show(out);
            fail_msg("%s: node %d exited %d", name, i, st);
        }
    }
}

/* The whole run `name`, node LIAR running attack with aopts; its wall
 * time in seconds. */
static double
s_run(struct ring *r,
      const char *name,
      const char *attack,
      const char *const *aopts)
{
    uint64_t t0 = rumor_clock_ns();
    for (int i = 0; i < NODES; i++)
        r->pid[i] = s_start(r, name, i, attack, aopts, NULL);
    s_wait_all(r, name);
    return (double)(rumor_clock_ns() - t0) * 1e-9;
}

/* Honest node id of run `name` ran every step (lines: the metrics lines
 * it must have, 0 for one per step) and ends within ACC_BAND of the
 * undisturbed run. */
static void
s_check_node(const struct ring *r, const char *name, int id, size_t lines)
{
    struct s_end base = s_end_of(r, "base", id);
    struct s_end e = s_end_of(r, name, id);
    if (lines == 0)
        lines = STEPS_N;
    printf("%s: node %d: %zu metrics lines, last step %g, accuracy %.4f "
           "(undisturbed %.4f)\n",
           name,
           id,
           e.lines,
           e.step,
           e.accuracy,
           base.accuracy);
    if (e.step != STEPS_N || e.lines != lines)
        fail_msg("%s: node %d ran %zu steps to step %g, not %d",
                 name,
                 id,
                 e.lines,
                 e.step,
                 STEPS_N);
    if (!(fabs(e.accuracy - base.accuracy) <= ACC_BAND))
        fail_msg("%s: node %d accuracy %.4f, undisturbed %.4f",
                 name,
                 id,
                 e.accuracy,
                 base.accuracy);
}

/* Node id's output in run `name` has a line with needle. */
static void
s_logged(const struct ring *r, const char *name, int id, const char *needle)
{
    char out[1024];
    s_out(r, name, id, out, sizeof out);
    if (!tnc_contains(out, needle)) {
        tnc_show(out);
        fail_msg("%s: node %d never logged '%s'", name, id, needle);
    }
}

/* The undisturbed run, then the attack; checks every honest node, the
 * time, and that node 3's neighbours named it in a line with needle. */
static void
s_attack_test(const char *attack, const char *const *aopts, const char *needle)
{
    struct ring *r = &s_ring;
    s_ring_new(r);
    double base = s_run(r, "base", "honest", NULL);
    double took = s_run(r, attack, attack, aopts);
    printf("%s: %.2f s, undisturbed %.2f s\n", attack, took, base);
    for (int i = 0; i < NODES; i++)
        if (i != LIAR)
            s_check_node(r, attack, i, 0);
    if (took > TIME_FACTOR * base + DEADLINE_MS / 1000.0)
        fail_msg("%s took %.2f s, undisturbed %.2f s", attack, took, base);
    s_logged(r, attack, 0, needle);
    s_logged(r, attack, 2, needle);
}

static void
test_gossip_claims_step_150__ignored_every_step_run(void **state)
{
    (void)state;
    const char *aopts[] = {"--step=149", "--at=20", NULL};
    s_attack_test("gossip-step",
                  aopts,
                  "node 3 claims to be at step 150 while this node is at");
}

static void
test_gossip_claims_step_2_62__ignored_every_step_run(void **state)
{
    (void)state;
    const char *aopts[] = {"--step=0x4000000000000000", "--at=20", NULL};
    s_attack_test("gossip-step",
                  aopts,
                  "node 3 claims step 4611686018427387905 in a gossip "
                  "message, past the run's 200 steps: ignored");
}

static void
test_gossip_stop_1__ignored_every_step_run(void **state)
{
    (void)state;
    const char *aopts[] = {"--at=20", "--stop=1", NULL};
    s_attack_test("gossip-stop",
                  aopts,
                  "node 3 says the run stops after step 21, which no node "
                  "could have planned");
}

static void
test_sync_claims_step_150__ignored_every_step_run(void **state)
{
    (void)state;
    const char *aopts[] = {"--step=149", "--at=20", NULL};
    s_attack_test("sync-step",
                  aopts,
                  "node 3 claims to be at step 151 while this node is at");
}

static void
test_sync_done_mid_run__ignored_edge_kept(void **state)
{
    (void)state;
    const char *aopts[] = {"--step=" STEPS, "--at=20", NULL};
    s_attack_test("sync-done",
                  aopts,
                  "node 3 says it ran the last step (200) while it gossips "
                  "with this node");
    /* the edge stayed: the liar's own node was never dropped by its
     * neighbours, so it skipped none of them (a dropped edge: ~2 per
     * step from step 20 on) */
    char path[1024];
    snprintf(path, sizeof path, "%s/sync-done/node-3.jsonl", s_ring.dir);
    FILE *f = fopen(path, "r");
    static char line[1 << 16];
    double skipped = NAN;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (!isnan(tnc_num(o, "skipped")))
            skipped = tnc_num(o, "skipped");
        cJSON_Delete(o);
    }
    if (f != NULL)
        fclose(f);
    printf("sync-done: node 3 skipped %g (peer, step) pairs\n", skipped);
    assert_true(skipped <= 4);
}

static void
test_state_step_2_62_to_a_joiner__refused_joins_honestly(void **state)
{
    (void)state;
    struct ring *r = &s_ring;
    s_ring_new(r);
    /* the honest nodes' sends take 25 ms more than the liar's: the others
     * are still running when the joiner comes back, and the liar's STATE
     * comes before its honest neighbour's */
    r->delay_ms = "25";
    double base = s_run(r, "base", "honest", NULL);
    const char *aopts[] = {"--step=0x4000000000000000", NULL};
    uint64_t t0 = rumor_clock_ns();
    for (int i = 0; i < NODES; i++)
        r->pid[i] = s_start(r, "state", i, "state-step", aopts, NULL);
    /* node 0 dies at step 10 and joins again */
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    while (s_end_of(r, "state", 0).lines < 10 && rumor_clock_ns() < end)
        tnc_pause_us(2000);
    assert_int_equal(kill(r->pid[0], SIGKILL), 0);
    assert_int_equal(tnc_wait(r->pid[0], LIMIT_MS), 128 + SIGKILL);
    const char *join[] = {"--join", NULL};
    r->pid[0] = s_start(r, "joined", 0, NULL, NULL, join);
    for (int i = 0; i < NODES; i++) {
        int st = tnc_wait(r->pid[i], LIMIT_MS);
        r->pid[i] = 0;
        if (st != 0)
            fail_msg("node %d exited %d", i, st);
    }
    double took = (double)(rumor_clock_ns() - t0) * 1e-9;
    printf("state-step: %.2f s, undisturbed %.2f s\n", took, base);
    s_logged(r,
             "joined",
             0,
             "node 3 sent a state of step 4611686018427387905, past the "
             "run's 200 steps: refused");
    s_logged(r, "joined", 0, "joined: model and optimizer state of node 1");
    /* the joiner ran from the step it joined at to the end; the others
     * reached the last step */
    struct s_end joined = s_end_of(r, "joined", 0);
    s_check_node(r, "joined", 0, joined.lines);
    assert_true(joined.lines > 0 && joined.lines < STEPS_N);
    for (int i = 1; i < NODES; i++)
        if (i != LIAR)
            s_check_node(r, "state", i, 0);
    /* the rejoin costs deadlines, not the run */
    if (took > TIME_FACTOR * base + 4 * DEADLINE_MS / 1000.0)
        fail_msg("took %.2f s, undisturbed %.2f s", took, base);
}

/* The pid of the child of parent running `... --id id`, or 0. */
static pid_t
s_child_node(pid_t parent, int id)
{
    char want[16];
    snprintf(want, sizeof want, "%d", id);
    DIR *d = opendir("/proc");
    pid_t found = 0;
    assert_non_null(d);
    for (struct dirent *e = readdir(d); e != NULL && found == 0;
         e = readdir(d)) {
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t got = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f != NULL)
            fclose(f);
        buf[got] = '\0';
        const char *paren = strrchr(buf, ')');
        if (paren == NULL || strtol(paren + 4, NULL, 10) != parent)
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        f = fopen(path, "r");
        got = f != NULL ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f != NULL)
            fclose(f);
        buf[got] = '\0';
        for (size_t k = 0; k + 5 < got; k += strlen(buf + k) + 1)
            if (strcmp(buf + k, "--id") == 0 && strcmp(buf + k + 5, want) == 0)
                found = (pid_t)strtol(e->d_name, NULL, 10);
    }
    closedir(d);
    return found;
}

static void
test_launch_node_exits_0_early__failure_not_averaged(void **state)
{
    (void)state;
    struct ring *r = &s_ring;
    s_ring_new(r);
    char run[1024], out[1024], avg[1100];
    snprintf(run, sizeof run, "%s/launch", r->dir);
    snprintf(out, sizeof out, "%s/launch.out", r->dir);
    snprintf(avg, sizeof avg, "%s/average.json", run);
    const char *args[] = {"launch",
                          "--topology",
                          r->topo,
                          "--metrics-dir",
                          run,
                          "--workload",
                          "logreg",
                          "--steps",
                          "4000",
                          "--eval-every",
                          "0",
                          "--deadline-ms",
                          "1000",
                          "--log-level",
                          "warn",
                          NULL};
    r->pid[NODES] = tnc_start(args, out);
    /* node 2 alone is asked to stop: every node stops with it a few
     * steps later, long before step 4000, each exiting 0 */
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    pid_t node2 = 0;
    while (rumor_clock_ns() < end &&
           (node2 == 0 || s_end_of(r, "launch", 2).lines < 20)) {
        node2 = s_child_node(r->pid[NODES], 2);
        tnc_pause_us(2000);
    }
    assert_true(node2 > 0);
    assert_int_equal(kill(node2, SIGTERM), 0);
    int st = tnc_wait(r->pid[NODES], LIMIT_MS);
    r->pid[NODES] = 0;
    tnc_show(out);
    assert_int_equal(st, 1);
    for (int i = 0; i < NODES; i++) {
        struct s_end e = s_end_of(r, "launch", i);
        char line[160];
        snprintf(line,
                 sizeof line,
                 "[launch] node %d exited 0 after step %g of 4000: it did "
                 "not run every step",
                 i,
                 e.step);
        assert_true(e.step < 4000);
        if (!tnc_contains(out, line))
            fail_msg("the launcher never said '%s'", line);
    }
    assert_true(tnc_contains(out,
                             "average model: not evaluated: no node "
                             "ran every step"));
    assert_true(tnc_contains(out, "a node failed (exit 1)"));
    assert_int_equal(access(avg, F_OK), -1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_gossip_claims_step_150__ignored_every_step_run,
            s_teardown),
        cmocka_unit_test_teardown(
            test_gossip_claims_step_2_62__ignored_every_step_run,
            s_teardown),
        cmocka_unit_test_teardown(test_gossip_stop_1__ignored_every_step_run,
                                  s_teardown),
        cmocka_unit_test_teardown(
            test_sync_claims_step_150__ignored_every_step_run,
            s_teardown),
        cmocka_unit_test_teardown(test_sync_done_mid_run__ignored_edge_kept,
                                  s_teardown),
        cmocka_unit_test_teardown(
            test_state_step_2_62_to_a_joiner__refused_joins_honestly,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch_node_exits_0_early__failure_not_averaged,
            s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
