/*
 * `rumor launch` keeps the cluster alive (docs/node.md, "rumor launch";
 * docs/reliability.md): a real launcher and its `rumor node` children on a
 * 6-node loopback ring with CURVE, the MLP on the embedded digits, D-PSGD.
 *   - kill -9 of node 2 mid-run with checkpoints: the launcher restarts it
 *     with --resume from its newest checkpoint, the survivors keep stepping
 *     (their longest step after the kill is printed), and every node ends
 *     at the last step, exit 0, the average model evaluated;
 *   - the same without --checkpoint-dir: restarted with --join;
 *   - --restart 1 and node 2 killed twice: the launcher gives up on it, the
 *     others finish without it, exit 1;
 *   - --restart 0: fail-fast as before (every node stopped, exit 1);
 *   - --algo allreduce, a ring algorithm: the ring re-forms without node
 *     2 (issue 23), the launcher restarts it with --join and no other
 *     node, every node ends at the last step in a ring of all 6 (epoch 2
 *     or more), exit 0;
 *   - PowerGossip with 2 iterations, which neither skips a node nor
 *     re-forms: a message that names the algorithm, every node stopped,
 *     exit 1;
 *   - SIGINT (Ctrl-C) to the launcher while node 2 is being restarted, and
 *     SIGTERM during a run: every node stops without being killed at the
 *     grace deadline, exit 130;
 *   - SIGKILL of the launcher: its nodes stop on their own
 *     (PR_SET_PDEATHSIG).
 * No orphan: this process is a child subreaper, so a node that outlived
 * its launcher becomes a child of the test. After a launcher exits,
 * nothing may be left to wait for (after SIGKILL of the launcher: every
 * node must exit by itself within the limit). The teardown kills and
 * waits for whatever a failed test left.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include "rumor/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES       6
#define VICTIM      2
#define LIMIT_MS    90000 /* only a broken build waits this long */
#define STEPS       "1500"
#define STEPS_N     1500
#define KILL_STEP   100    /* node 2 is killed after this step */
#define DEADLINE    "1000" /* --deadline-ms */
#define DEADLINE_MS 1000

struct run {
    char dir[256];
    char topo[300];
    char run[300];
    char ckpt[300];
    char out[300]; /* the launcher's output */
    pid_t launch;
};

static struct run s_run;

/* The parent of process pid (a name in /proc), or -1. */
static long
s_parent(const char *pid)
{
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    /* "PID (COMM) S PPID ..." */
    const char *paren = strrchr(buf, ')');
    return paren != NULL ? strtol(paren + 4, NULL, 10) : -1;
}

/* Stops whatever a test left: the launcher, then its nodes, which are
 * this subreaper's children once the launcher is gone. */
static void
s_kill_all(void)
{
    if (s_run.launch > 0) {
        kill(s_run.launch, SIGKILL);
        waitpid(s_run.launch, NULL, 0);
        s_run.launch = 0;
    }
    for (;;) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);
        if (pid < 0)
            return; /* no child left */
        if (pid > 0)
            continue;
        DIR *d = opendir("/proc");
        for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL;
             e = readdir(d))
            if (s_parent(e->d_name) == getpid())
                kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL);
        if (d != NULL)
            closedir(d);
        tnc_pause_us(10000);
    }
}

static int
s_teardown(void **state)
{
    (void)state;
    s_kill_all();
    if (s_run.dir[0] != '\0' && getenv("RUMOR_TEST_KEEP") == NULL)
        nftw(s_run.dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
    else if (s_run.dir[0] != '\0')
        printf("kept %s\n", s_run.dir);
    s_run.dir[0] = '\0';
    return 0;
}

static void
s_setup(struct run *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/rumor-launch-XXXXXX");
    assert_non_null(mkdtemp(r->dir));
    snprintf(r->topo, sizeof r->topo, "%s/ring.topo", r->dir);
    snprintf(r->run, sizeof r->run, "%s/run", r->dir);
    snprintf(r->ckpt, sizeof r->ckpt, "%s/ckpt", r->dir);
    snprintf(r->out, sizeof r->out, "%s/launch.out", r->dir);
    const char *args[] =
        {"topo", "gen", "ring", "6", "--local", "--out", r->topo, NULL};
    assert_int_equal(tnc_wait(tnc_start(args, r->out), LIMIT_MS), 0);
}

/* `rumor launch` on the ring with the common options, then extra. */
static void
s_launch(struct run *r, const char *steps, const char *const *extra)
{
    const char *args[TNC_ARGS_MAX] = {"launch",
                                      "--topology",
                                      r->topo,
                                      "--metrics-dir",
                                      r->run,
                                      "--steps",
                                      steps,
                                      "--eval-every",
                                      "0",
                                      "--deadline-ms",
                                      DEADLINE,
                                      "--down-after",
                                      "2",
                                      "--log-level",
                                      "warn"};
    size_t n = 15;
    for (size_t k = 0; extra != NULL && extra[k] != NULL; k++)
        args[n++] = extra[k];
    args[n] = NULL;
    r->launch = tnc_start(args, r->out);
}

/* The launcher's exit status; no process of its tree may be left. */
static int
s_wait_launch(struct run *r)
{
    int status = tnc_wait(r->launch, LIMIT_MS);
    r->launch = 0;
    pid_t left = waitpid(-1, NULL, WNOHANG);
    if (left >= 0) {
        tnc_show(r->out);
        fail_msg("a process outlived the launcher (%d)", (int)left);
    }
    return status;
}

/* The pid of the child of parent that runs `rumor node ... --id id`,
 * or 0. */
static pid_t
s_node_pid(pid_t parent, int id)
{
    DIR *d = opendir("/proc");
    pid_t found = 0;
    char want[16];
    snprintf(want, sizeof want, "%d", id);
    assert_non_null(d);
    for (struct dirent *e = readdir(d); e != NULL && found == 0;
         e = readdir(d)) {
        if (s_parent(e->d_name) != parent)
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = '\0';
        for (size_t k = 0; k + 5 < got; k += strlen(buf + k) + 1)
            if (strcmp(buf + k, "--id") == 0 && strcmp(buf + k + 5, want) == 0)
                found = (pid_t)strtol(e->d_name, NULL, 10);
    }
    closedir(d);
    return found;
}

/* Polls until node id of the launcher runs as a process other than
 * before (0: any). */
static pid_t
s_until_node(const struct run *r, int id, pid_t before)
{
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    for (;;) {
        pid_t pid = s_node_pid(r->launch, id);
        if (pid > 0 && pid != before)
            return pid;
        if (rumor_clock_ns() > end) {
            tnc_show(r->out);
            fail_msg("node %d never ran (again)", id);
        }
        tnc_pause_us(2000);
    }
}

/* The metrics of node id: the number of lines, the last line's step and
 * the longest gap in "seconds" between two lines (steps take
 * milliseconds here: the longest is the one that waited for a dead
 * neighbour). The last step's line is left out of the gaps: it is
 * written after the run's end (the final evaluation and the flush of
 * sends to neighbours still running), which is not a step waiting for
 * node 2. */
static void
s_metrics(const struct run *r, int id, size_t *lines, double *step, double *gap)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node-%d.jsonl", r->run, id);
    FILE *f = fopen(path, "r");
    static char line[1 << 16];
    double prev = -1;
    *lines = 0;
    *step = 0;
    *gap = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "seconds");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(t)) {
            (*lines)++;
            *step = s->valuedouble;
            if (prev >= 0 && s->valuedouble < STEPS_N &&
                t->valuedouble - prev > *gap)
                *gap = t->valuedouble - prev;
            prev = t->valuedouble;
        }
        cJSON_Delete(o);
    }
    if (f != NULL)
        fclose(f);
}

static bool
s_has_checkpoint(const struct run *r, int id)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "node-%d.step-", id);
    DIR *d = opendir(r->ckpt);
    bool found = false;
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL && !found;
         e = readdir(d))
        found = strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return found;
}

/* Polls until node id has made `step` steps and, with want_ckpt, has a
 * checkpoint (named node-N.step-S.ckpt once complete). */
static void
s_until_step(const struct run *r, int id, double step, bool want_ckpt)
{
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    for (;;) {
        size_t lines = 0;
        double at = 0, gap = 0;
        s_metrics(r, id, &lines, &at, &gap);
        if (at >= step && (!want_ckpt || s_has_checkpoint(r, id)))
            return;
        if (rumor_clock_ns() > end) {
            tnc_show(r->out);
            fail_msg("node %d did not reach step %g", id, step);
        }
        tnc_pause_us(2000);
    }
}

static void
s_expect(const struct run *r, const char *needle)
{
    if (!tnc_contains(r->out, needle)) {
        tnc_show(r->out);
        fail_msg("the launcher did not say \"%s\"", needle);
    }
}

/* Every node ended at the last step; returns the survivors' longest
 * step. */
static double
s_all_at_last_step(const struct run *r)
{
    double longest = 0;
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        double step = 0, gap = 0;
        s_metrics(r, i, &lines, &step, &gap);
        if (step != STEPS_N) {
            tnc_show(r->out);
            fail_msg("node %d ended at step %g of %d", i, step, STEPS_N);
        }
        if (i != VICTIM && gap > longest)
            longest = gap;
    }
    return longest;
}

static size_t
s_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    size_t n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* kill -9 of node 2 after KILL_STEP steps of a run with the options algo
 * (NULL-terminated, may be NULL): the launcher restarts it (the line it
 * prints says how) and the run ends as if nothing had happened. */
static void
s_kill_and_restart(bool checkpoints,
                   const char *restarting,
                   const char *const *algo)
{
    struct run *r = &s_run;
    s_setup(r);
    const char *extra[16] = {NULL};
    size_t n = 0;
    for (size_t k = 0; algo != NULL && algo[k] != NULL; k++)
        extra[n++] = algo[k];
    if (checkpoints) {
        extra[n++] = "--checkpoint-dir";
        extra[n++] = r->ckpt;
        extra[n++] = "--checkpoint-every";
        extra[n++] = "25";
    }
    extra[n] = NULL;
    uint64_t t0 = rumor_clock_ns();
    s_launch(r, STEPS, extra);
    pid_t victim = s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, checkpoints);
    assert_int_equal(kill(victim, SIGKILL), 0);
    uint64_t killed = rumor_clock_ns();
    pid_t again = s_until_node(r, VICTIM, victim);
    double back = (double)(rumor_clock_ns() - killed) / 1e9;
    int status = s_wait_launch(r);
    if (status != 0) {
        tnc_show(r->out);
        fail_msg("launch exited %d", status);
    }
    s_expect(r, "node 2 killed by signal 9: restarting it with");
    s_expect(r, restarting);
    s_expect(r, "node 2 restarted with");
    s_expect(r, "average model of the 6 nodes");
    /* the others went on: restarting them all (as after a ring that
     * could not re-form) would also end with every node at the last step,
     * their metrics rewritten by the new processes */
    if (s_count(r->out, "restarting it with") != 1) {
        tnc_show(r->out);
        fail_msg("a node other than node 2 failed and was restarted");
    }
    double longest = s_all_at_last_step(r);
    printf("node 2 (pid %d) running again as pid %d %.2f s after the kill; "
           "run %.1f s; survivors' longest step %.3f s (deadline %.1f s)\n",
           (int)victim,
           (int)again,
           back,
           (double)(rumor_clock_ns() - t0) / 1e9,
           longest,
           DEADLINE_MS / 1000.0);
    /* the survivors went on: they waited for node 2 a deadline or two,
     * never for its restart (head room for a loaded machine) */
    if (longest > 5.0 * DEADLINE_MS / 1000)
        fail_msg("a survivor's step took %.2f s", longest);
}

static void
test_launch__kill9_with_checkpoint__restarted_with_resume_all_finish(
    void **state)
{
    (void)state;
    s_kill_and_restart(true, "restarting it with --resume from step", NULL);
}

static void
test_launch__kill9_without_checkpoint__restarted_with_join_all_finish(
    void **state)
{
    (void)state;
    s_kill_and_restart(false, "restarting it with --join (attempt 1/3)", NULL);
}

/* Polls until the launcher has said needle. */
static void
s_until_said(const struct run *r, const char *needle)
{
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    while (!tnc_contains(r->out, needle)) {
        if (rumor_clock_ns() > end) {
            tnc_show(r->out);
            fail_msg("the launcher never said \"%s\"", needle);
        }
        tnc_pause_us(2000);
    }
}

static void
test_launch__restart_1_killed_twice__gives_up_others_finish(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    const char *extra[] = {"--restart", "1", NULL};
    s_launch(r, STEPS, extra);
    pid_t victim = s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, false);
    assert_int_equal(kill(victim, SIGKILL), 0);
    pid_t again = s_until_node(r, VICTIM, victim);
    assert_int_equal(kill(again, SIGKILL), 0);
    int status = s_wait_launch(r);
    s_expect(r,
             "node 2 killed by signal 9: restarting it with --join "
             "(attempt 1/1)");
    s_expect(r,
             "node 2 killed by signal 9: gave up after 1 restart; the "
             "others go on without it");
    if (status != 1) {
        tnc_show(r->out);
        fail_msg("launch exited %d", status);
    }
    for (int i = 0; i < NODES; i++) {
        size_t lines = 0;
        double step = 0, gap = 0;
        s_metrics(r, i, &lines, &step, &gap);
        if (i != VICTIM && step != STEPS_N)
            fail_msg("node %d ended at step %g of %d", i, step, STEPS_N);
    }
}

/* A run that would last for ever, node 2 killed after KILL_STEP steps;
 * returns the launcher's exit status. */
static int
s_kill_one(struct run *r, const char *const *extra)
{
    s_launch(r, "100000000", extra);
    pid_t victim = s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, false);
    assert_int_equal(kill(victim, SIGKILL), 0);
    return s_wait_launch(r);
}

static void
test_launch__restart_0__kill9_stops_every_node(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    const char *extra[] = {"--restart", "0", NULL};
    int status = s_kill_one(r, extra);
    s_expect(r, "node 2 killed by signal 9");
    s_expect(r, "node 2 failed: stopping the others");
    s_expect(r, "a node failed");
    if (status != 1 || tnc_contains(r->out, "restarting")) {
        tnc_show(r->out);
        fail_msg("launch exited %d", status);
    }
}

/* A ring algorithm re-forms its ring without the dead node and admits it
 * again (issue 23): the launcher restarts it as it does a gossip node. */
static void
test_launch__allreduce_kill9__restarted_with_join_all_finish(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "allreduce", NULL};
    s_kill_and_restart(false, "restarting it with --join (attempt 1/3)", algo);
    /* the ring re-formed (once, when the restart's JOIN came before the
     * deadline: the new incarnation replaces the old; else twice, without
     * node 2 and then with it again) and every node ends in it, at one
     * epoch */
    double first_epoch = -1;
    for (int i = 0; i < NODES; i++) {
        char path[400];
        snprintf(path, sizeof path, "%s/node-%d.jsonl", s_run.run, i);
        FILE *f = fopen(path, "r");
        static char line[1 << 16], last[1 << 16];
        last[0] = '\0';
        while (f != NULL && fgets(line, sizeof line, f) != NULL)
            memcpy(last, line, strlen(line) + 1);
        if (f != NULL)
            fclose(f);
        cJSON *o = cJSON_Parse(last);
        double epoch = tnc_num(o, "epoch"), members = tnc_num(o, "members");
        cJSON_Delete(o);
        if (i == 0)
            first_epoch = epoch;
        if (!(epoch >= 1 && epoch == first_epoch && members == NODES))
            fail_msg("node %d ended at epoch %g with %g members (want node "
                     "0's epoch %g >= 1 and %d)",
                     i,
                     epoch,
                     members,
                     first_epoch,
                     NODES);
    }
}

/* PowerGossip with several iterations per step neither skips a node nor
 * runs on a ring: a restarted node could not be used, so the run stops. */
static void
test_launch__powergossip_2_iterations_kill9__cannot_continue_every_node_stops(
    void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    const char *extra[] = {"--algo", "powergossip", "--iterations", "2", NULL};
    int status = s_kill_one(r, extra);
    s_expect(r, "--algo powergossip cannot continue without node 2");
    if (status != 1 || tnc_contains(r->out, "restarting")) {
        tnc_show(r->out);
        fail_msg("launch exited %d", status);
    }
}

/* CHOCO at gamma 1 with 4-bit QSGD diverges within a few dozen steps
 * (issue 18): the nodes stop with exit 3, and since a restart would
 * diverge again the launcher stops the others instead. */
static void
test_launch__diverging_run__not_restarted_every_node_stops(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    const char *extra[] = {"--algo", "choco", "--gamma", "1", NULL};
    s_launch(r, "2000", extra);
    int status = s_wait_launch(r);
    s_expect(r, "training diverged");
    s_expect(r, "exited with status 3");
    s_expect(r, "restarting it would not help");
    if (status != 1 || tnc_contains(r->out, "restarting it with")) {
        tnc_show(r->out);
        fail_msg("launch exited %d", status);
    }
}

/* sig to the launcher: every node stops before the grace deadline (no
 * SIGKILL), exit 130; returns the seconds it took. */
static double
s_interrupt(struct run *r, int sig)
{
    uint64_t t0 = rumor_clock_ns();
    assert_int_equal(kill(r->launch, sig), 0);
    int status = s_wait_launch(r);
    double took = (double)(rumor_clock_ns() - t0) / 1e9;
    s_expect(r, "forwarding to the nodes");
    if (status != 130 || tnc_contains(r->out, "killing them")) {
        tnc_show(r->out);
        fail_msg("launch exited %d after signal %d", status, sig);
    }
    return took;
}

/* Ctrl-C while node 2 waits for its second restart (1 s of back-off):
 * the restart is dropped and the others stop. */
static void
test_launch__sigint_while_restart_pending__all_stop_none_restarted(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    s_launch(r, "100000000", NULL);
    pid_t victim = s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, false);
    assert_int_equal(kill(victim, SIGKILL), 0);
    pid_t again = s_until_node(r, VICTIM, victim);
    assert_int_equal(kill(again, SIGKILL), 0);
    s_until_said(r, "(attempt 2/3)");
    double took = s_interrupt(r, SIGINT);
    assert_int_equal(s_count(r->out, "node 2 restarted with"), 1);
    printf("SIGINT with a restart pending: every process gone in %.2f s\n",
           took);
}

/* SIGTERM while node 2's new process starts up. */
static void
test_launch__sigterm_while_node_restarts__all_stop(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    s_launch(r, "100000000", NULL);
    pid_t victim = s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, false);
    assert_int_equal(kill(victim, SIGKILL), 0);
    s_until_node(r, VICTIM, victim);
    double took = s_interrupt(r, SIGTERM);
    printf("SIGTERM during a restart: every process gone in %.2f s\n", took);
}

/* kill -9 of the launcher: the kernel sends each node SIGTERM
 * (PR_SET_PDEATHSIG); they stop on their own and, orphaned, are reaped
 * here. */
static void
test_launch__launcher_killed__nodes_stop_by_themselves(void **state)
{
    (void)state;
    struct run *r = &s_run;
    s_setup(r);
    s_launch(r, "100000000", NULL);
    s_until_node(r, VICTIM, 0);
    s_until_step(r, VICTIM, KILL_STEP, false);
    uint64_t t0 = rumor_clock_ns();
    assert_int_equal(kill(r->launch, SIGKILL), 0);
    assert_int_equal(tnc_wait(r->launch, LIMIT_MS), 128 + SIGKILL);
    r->launch = 0;
    uint64_t end = t0 + LIMIT_MS * 1000000ull;
    int reaped = 0;
    while (reaped < NODES) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0)
            break;
        if (pid > 0) {
            reaped++;
            /* stopped by the SIGTERM, as a node stops (exit 0) */
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fail_msg("an orphaned node ended with wait status %#x", st);
        } else if (rumor_clock_ns() > end)
            fail_msg("%d of %d nodes still running after their launcher "
                     "died",
                     NODES - reaped,
                     NODES);
        else
            tnc_pause_us(2000);
    }
    assert_int_equal(reaped, NODES);
    assert_true(waitpid(-1, NULL, WNOHANG) < 0);
    printf("launcher killed: its %d nodes gone %.2f s later\n",
           NODES,
           (double)(rumor_clock_ns() - t0) / 1e9);
}

int
main(int argc, char **argv)
{
    /* orphans become children of this process, so the tests see them */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("PR_SET_CHILD_SUBREAPER");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_launch__kill9_with_checkpoint__restarted_with_resume_all_finish,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__kill9_without_checkpoint__restarted_with_join_all_finish,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__restart_1_killed_twice__gives_up_others_finish,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__restart_0__kill9_stops_every_node,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__allreduce_kill9__restarted_with_join_all_finish,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__powergossip_2_iterations_kill9__cannot_continue_every_node_stops,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__diverging_run__not_restarted_every_node_stops,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__sigint_while_restart_pending__all_stop_none_restarted,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__sigterm_while_node_restarts__all_stop,
            s_teardown),
        cmocka_unit_test_teardown(
            test_launch__launcher_killed__nodes_stop_by_themselves,
            s_teardown),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("launch_restart", tests, NULL, NULL);
}
