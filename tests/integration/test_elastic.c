/*
 * Elastic rings over real processes (issue 23; docs/reliability.md,
 * "Elastic rings: the design"): 8 `rumor node` processes on loopback with
 * CURVE, least squares, a ring algorithm (all-reduce, PowerSGD rank 1,
 * exact local SGD with period 4, streaming local SGD with fp4 deltas).
 *   - kill -9 of one node (and of two non-adjacent ones) mid-run: the
 *     survivors install an epoch without it (members 7, or 6) within two
 *     deadlines plus a view change, the killed nodes come back with
 *     --join and are taken in (members 8), every node finishes in the
 *     error band of an undisturbed run and with the members' model;
 *   - SIGSTOP of a node past the deadline, then SIGCONT: the others show
 *     members 7 then 8, and the stopped node ends with their model;
 *   - a partition (5 nodes in one network namespace, 3 in the other, link
 *     down): the majority installs an epoch of 5 and goes on, the minority
 *     makes no step and installs nothing while cut, and after the link is
 *     back all 8 are one ring with one model.
 * PowerSGD's and stale local SGD's kill -9 and join run once more with
 * the model in the reference device's memory (RUMOR_NODE_DEVICE=ref):
 * the STATE goes through a host copy, the same checks.
 * In every case no epoch is ever seen with two different member counts
 * across the nodes' metrics rows (the rows carry the count, not the list:
 * the unit test test_membership.c checks the lists themselves).
 * The harness runs a gossip algorithm too (D-PSGD: neighbours mark the
 * dead node down and readmit it, models agree to the undisturbed spread),
 * which proves it where the ring algorithms cannot run yet.
 * Every wait has a deadline and fails as soon as a node that should run
 * has exited; every process started is killed and waited for, the
 * temporary directory and the namespaces removed.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include "rumor/core.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES       8
#define LIMIT_MS    60000 /* only a broken build waits this long */
#define DEADLINE_MS 1000
#define DEADLINE    "1000"
/* The added one-way delay of every message (--delay-ms): it sets a floor
 * under a step's time, so that a run lasts about as long on a quiet
 * machine as on a busy one and a restarted node still finds the others
 * running (without it an all-reduce step of lsq takes 2-3 ms). */
#define DELAY_MS  "2"
#define KILL_STEP 30 /* faults start once every node made this many steps */
/* The view change's part of a survivor's longest step, on top of the two
 * deadlines (the one that expired, and the step redone or completed over
 * the new ring waiting at most one more). With membership.c's defaults a
 * view change whose proposer is alive costs its grace (100 ms) and two
 * round trips, plus a resend (200 ms) per phase whose message came late;
 * the step of the new ring takes 30-60 ms here. The rest of the 1500 ms
 * is head room for 8 processes on two busy cores (the launcher test
 * allows 5 deadlines for the same reason). It does not cover a dead
 * proposer (another membership timeout, 1000 ms): no test kills node 0,
 * the first proposer. */
#define VIEW_CHANGE_MS 1500
#define STEP_BOUND_S   ((2.0 * DEADLINE_MS + VIEW_CHANGE_MS) / 1000)

/* An undisturbed run of an algorithm, for the bands: measured once per
 * test binary and algorithm. */
struct base {
    bool done;
    double error;  /* worst final lsq optimum error */
    double spread; /* max |x_i - mean| over nodes and elements */
};

struct algo {
    const char *name;
    const char *args[12]; /* NULL-terminated */
    const char *steps;    /* of every run: about 10 s at DELAY_MS */
    bool ring;            /* elastic: epoch and members in the metrics */
    bool same_bits;       /* members end with bit-identical models */
    struct base base;
};

static struct algo s_allreduce =
    {"allreduce", {"--algo", "allreduce", NULL}, "400", true, true, {0}};
static struct algo s_powersgd = {"powersgd",
                                 {"--algo", "powersgd", "--rank", "1", NULL},
                                 "200",
                                 true,
                                 true,
                                 {0}};
/* PowerSGD with the model in the reference device's memory
 * (RUMOR_NODE_DEVICE=ref, the node's test hook): the ring's STATE goes
 * through the host copy, the snapshot stays in device memory */
static struct algo s_powersgd_ref = {
    "powersgd on the reference device",
    {"--algo", "powersgd", "--rank", "1", "--log-level", "info", NULL},
    "200",
    true,
    true,
    {0}};
/* exact local SGD: its models differ by the local steps after the last
 * sync even undisturbed, so they are held to the undisturbed spread */
static struct algo s_localsgd = {"localsgd",
                                 {"--algo", "localsgd", "--period", "4", NULL},
                                 "1000",
                                 true,
                                 false,
                                 {0}};
/* DiLoCo whose synchronizations land 3 steps late (--stale): a node
 * killed with one in flight, and the ring's recovery, run on the
 * exchange's thread */
static struct algo s_localsgd_stale = {
    "localsgd-stale",
    {"--algo", "localsgd", "--period", "4", "--stale", "3", NULL},
    "1000",
    true,
    false,
    {0}};
static struct algo s_localsgd_stale_ref = {"localsgd-stale on the reference "
                                           "device",
                                           {"--algo",
                                            "localsgd",
                                            "--period",
                                            "4",
                                            "--stale",
                                            "3",
                                            "--log-level",
                                            "info",
                                            NULL},
                                           "1000",
                                           true,
                                           false,
                                           {0}};
/* streaming DiLoCo: two fragments, fp4 deltas whose checksummed
 * anchors a joiner takes from a member, stale syncs */
static struct algo s_localsgd_stream = {"localsgd-stream",
                                        {"--algo",
                                         "localsgd",
                                         "--period",
                                         "4",
                                         "--fragments",
                                         "2",
                                         "--delta-codec",
                                         "fp4",
                                         "--stale",
                                         "2",
                                         NULL},
                                        "1000",
                                        true,
                                        false,
                                        {0}};
/* compressed data-parallel SGD: top-k with an error-feedback memory,
 * which a dropped step must roll back and a joiner starts at zero */
static struct algo s_codec = {
    "allreduce-topk",
    {"--algo", "allreduce", "--codec", "topk:ratio=0.25", "--ef", "ef", NULL},
    "400",
    true,
    true,
    {0}};
static struct algo s_dpsgd =
    {"dpsgd", {"--algo", "dpsgd", NULL}, "600", false, false, {0}};

struct cluster {
    char dir[256];
    char topo[300];
    char run[300];
    char ns[2][32]; /* the partition test's namespaces */
    int first_b;    /* nodes from this id on run in ns[1]; 0: no netns */
    const struct algo *algo;
    const char *steps; /* of the current run */
    pid_t pid[NODES];
};

/* The cluster of the running test: the teardown stops what it started
 * even when an assertion ended the test early. */
static struct cluster s_c;

static int
s_teardown(void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    (void)unsetenv("RUMOR_NODE_DEVICE"); /* a failed device case's */
    for (int i = 0; i < NODES; i++)
        if (c->pid[i] > 0) {
            kill(c->pid[i], SIGCONT);
            kill(c->pid[i], SIGKILL);
            waitpid(c->pid[i], NULL, 0);
            c->pid[i] = 0;
        }
    for (int k = 0; k < 2; k++)
        if (c->ns[k][0] != '\0') {
            tnc_sh("ip netns del %s 2>/dev/null%s", c->ns[k], "");
            c->ns[k][0] = '\0';
        }
    /* RUMOR_TEST_KEEP=1 keeps the logs and metrics for a post-mortem */
    if (c->dir[0] != '\0' && getenv("RUMOR_TEST_KEEP") == NULL)
        nftw(c->dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
    else if (c->dir[0] != '\0')
        printf("kept %s\n", c->dir);
    c->dir[0] = '\0';
    return 0;
}

static void
s_cluster_new(struct cluster *c, struct algo *algo)
{
    memset(c, 0, sizeof *c);
    c->algo = algo;
    snprintf(c->dir, sizeof c->dir, "/tmp/rumor-elastic-XXXXXX");
    assert_non_null(mkdtemp(c->dir));
    snprintf(c->topo, sizeof c->topo, "%s/ring.topo", c->dir);
    char out[400];
    snprintf(out, sizeof out, "%s/gen.out", c->dir);
    const char *argv[] = {"rumor",
                          "topo",
                          "gen",
                          "ring",
                          "8",
                          "--local",
                          "--out",
                          c->topo,
                          NULL};
    assert_int_equal(tnc_wait(tnc_spawn(argv, out), LIMIT_MS), 0);
}

/* Starts node id of the current run (c->run, c->steps); join: --join. */
static void
s_node(struct cluster *c, int id, bool join)
{
    char sid[16], key[400], out[400];
    snprintf(sid, sizeof sid, "%d", id);
    snprintf(key, sizeof key, "%s/keys/node-%d", c->dir, id);
    snprintf(out, sizeof out, "%s/node-%d.out", c->dir, id);
    const char *ns = c->first_b > 0 ? c->ns[id >= c->first_b] : NULL;
    const char *argv[TNC_ARGS_MAX] = {
        "node", "--topology",    c->topo,  "--id",
        sid,    "--key",         key,      "--workload",
        "lsq",  "--optimizer",   "sgd",    "--lr",
        "0.05", "--steps",       c->steps, "--eval-every",
        "0",    "--deadline-ms", DEADLINE, "--down-after",
        "2",    "--delay-ms",    DELAY_MS, "--metrics-dir",
        c->run, "--log-level",   "warn"};
    size_t n = 0;
    while (argv[n] != NULL)
        n++;
    for (size_t k = 0; c->algo->args[k] != NULL; k++)
        argv[n++] = c->algo->args[k];
    if (join)
        argv[n++] = "--join";
    argv[n] = NULL;
    c->pid[id] = tnc_start_ns(ns, argv, out, NULL);
}

/* Starts all nodes on a run of their own, in c->dir/NAME. */
static void
s_start(struct cluster *c, const char *name, const char *steps)
{
    snprintf(c->run, sizeof c->run, "%s/%s", c->dir, name);
    c->steps = steps;
    for (int i = 0; i < NODES; i++)
        s_node(c, i, false);
}

/* What the metrics rows of one node say. */
struct scan {
    size_t rows;
    cJSON *last;  /* the last row (caller frees), NULL when none */
    double gap;   /* longest "seconds" between rows after `from` */
    bool down_up; /* a row with members below NODES, then one with NODES */
};

/* Reads RUN/node-ID.jsonl; fails on a non-finite loss, and on an epoch
 * whose member count differs from the one in epochs[] (-1: not seen yet;
 * may be NULL). */
static void
s_scan(const struct cluster *c,
       int id,
       double from,
       struct scan *s,
       double *epochs)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node-%d.jsonl", c->run, id);
    FILE *f = fopen(path, "r");
    static char line[1 << 16];
    double prev = NAN;
    bool shrunk = false;
    double steps = c->steps != NULL ? strtod(c->steps, NULL) : INFINITY;
    memset(s, 0, sizeof *s);
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            break; /* a line being written */
        }
        s->rows++;
        if (!isfinite(tnc_num(o, "loss")))
            fail_msg("%s:%zu: loss is not finite", path, s->rows);
        double t = tnc_num(o, "seconds");
        /* the last row's time includes the run's end (with D-PSGD the
         * even ids wait 5 s there in an undisturbed run too): only the
         * steps before it count */
        if (prev >= from && tnc_num(o, "step") < steps)
            s->gap = fmax(s->gap, t - prev);
        prev = t;
        double e = tnc_num(o, "epoch"), m = tnc_num(o, "members");
        shrunk |= m < NODES;
        s->down_up |= shrunk && m == NODES;
        if (epochs != NULL && e >= 0 && e < 4096) {
            double *seen = &epochs[(size_t)e];
            if (*seen >= 0 && *seen != m)
                fail_msg("%s:%zu: epoch %g with %g members, another node's "
                         "rows have it with %g: two member lists for one "
                         "epoch",
                         path,
                         s->rows,
                         e,
                         m,
                         *seen);
            *seen = m;
        }
        cJSON_Delete(s->last);
        s->last = o;
    }
    if (f != NULL)
        fclose(f);
}

/* A field of node id's last complete row (NAN when none). Only that row
 * is parsed: the waits call this every few milliseconds. */
static double
s_last(const struct cluster *c, int id, const char *field)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node-%d.jsonl", c->run, id);
    FILE *f = fopen(path, "r");
    static char line[2][1 << 16];
    int cur = 0, done = -1;
    while (f != NULL && fgets(line[cur], sizeof line[cur], f) != NULL) {
        if (strchr(line[cur], '\n') == NULL)
            break; /* a line being written */
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

/* Fails when a node that should be running has exited. */
static void
s_all_running(struct cluster *c, const char *waiting_for)
{
    for (int i = 0; i < NODES; i++) {
        int st = 0;
        if (c->pid[i] <= 0 || waitpid(c->pid[i], &st, WNOHANG) != c->pid[i])
            continue;
        c->pid[i] = 0;
        char out[400];
        snprintf(out, sizeof out, "%s/node-%d.out", c->dir, i);
        tnc_show(out);
        fail_msg("%s: node %d exited (%s %d) while waiting for %s",
                 c->algo->name,
                 i,
                 WIFEXITED(st) ? "status" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
                 waiting_for);
    }
}

/* Polls until the last row of every node in ids[0..n) has field within
 * [lo, hi], or fails with what. */
static void
s_until(struct cluster *c,
        const int *ids,
        int n,
        const char *field,
        double lo,
        double hi,
        const char *what)
{
    uint64_t end = rumor_clock_ns() + LIMIT_MS * 1000000ull;
    for (int k = 0; k < n;) {
        double v = s_last(c, ids[k], field);
        if (v >= lo && v <= hi) {
            k++;
            continue;
        }
        s_all_running(c, what);
        if (rumor_clock_ns() > end)
            fail_msg("%s: node %d %s (%s stayed at %g)",
                     c->algo->name,
                     ids[k],
                     what,
                     field,
                     v);
        tnc_pause_us(20000);
    }
}

/* ids[] = every node but those in skip[0..k); returns how many. */
static int
s_others(const int *skip, int k, int *ids)
{
    int n = 0;
    for (int i = 0; i < NODES; i++) {
        bool out = false;
        for (int j = 0; j < k; j++)
            out |= skip[j] == i;
        if (!out)
            ids[n++] = i;
    }
    return n;
}

static const int s_every[NODES] = {0, 1, 2, 3, 4, 5, 6, 7};

/* The elastic metrics are there from the first row: without them (a
 * build whose ring algorithms stop on a death) say so at once rather
 * than at the first wait's limit. */
static void
s_require_elastic(struct cluster *c)
{
    if (!c->algo->ring)
        return;
    for (int i = 0; i < NODES; i++)
        if (isnan(s_last(c, i, "epoch")) || isnan(s_last(c, i, "members")))
            fail_msg("%s: node %d's metrics rows have no \"epoch\" and "
                     "\"members\": this build's ring algorithms do not "
                     "re-form around a dead node (issue 23's elastic wiring "
                     "of node/exchange.c is missing)",
                     c->algo->name,
                     i);
    /* a fault counts from a ring of all NODES (a node too slow under load
     * could have been removed already) */
    s_until(c,
            s_every,
            NODES,
            "members",
            NODES,
            NODES,
            "is not in a ring of all the nodes before the fault");
}

/* The flat floats of RUN/node-ID.model (node_model_save's format: "RMDL",
 * version, tensor count, then per tensor its numel and floats); *bytes:
 * the file's raw bytes (both freed by the caller). */
static float *
s_model(const struct cluster *c,
        int id,
        size_t *count,
        char **bytes,
        size_t *len)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node-%d.model", c->run, id);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("%s: node %d wrote no model (%s)", c->algo->name, id, path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    assert_true(size >= 12);
    *bytes = malloc((size_t)size);
    assert_non_null(*bytes);
    assert_int_equal(fread(*bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    float *x = malloc((size_t)size);
    assert_non_null(x);
    uint32_t tensors = 0;
    memcpy(&tensors, *bytes + 8, 4);
    size_t at = 12;
    *count = 0;
    for (uint32_t t = 0; t < tensors; t++) {
        uint64_t numel = 0;
        assert_true(at + 8 <= *len);
        memcpy(&numel, *bytes + at, 8);
        at += 8;
        assert_true(numel <= (*len - at) / sizeof(float));
        memcpy(x + *count, *bytes + at, numel * sizeof(float));
        at += numel * sizeof(float);
        *count += numel;
    }
    return x;
}

/* max over nodes and elements of |x_i - mean|; with want_same, fails
 * unless every node's model file is node 0's, byte for byte. */
static double
s_spread(const struct cluster *c, bool want_same)
{
    float *x[NODES];
    char *raw[NODES];
    size_t count[NODES], len[NODES];
    for (int i = 0; i < NODES; i++) {
        x[i] = s_model(c, i, &count[i], &raw[i], &len[i]);
        assert_int_equal(count[i], count[0]);
    }
    int differs = -1;
    for (int i = 1; i < NODES && differs < 0; i++)
        if (len[i] != len[0] || memcmp(raw[i], raw[0], len[0]) != 0)
            differs = i;
    double spread = 0;
    for (size_t e = 0; e < count[0]; e++) {
        double mean = 0;
        for (int i = 0; i < NODES; i++)
            mean += x[i][e] / (double)NODES;
        for (int i = 0; i < NODES; i++)
            spread = fmax(spread, fabs(x[i][e] - mean));
    }
    for (int i = 0; i < NODES; i++) {
        free(x[i]);
        free(raw[i]);
    }
    if (want_same && differs >= 0)
        fail_msg("%s: node %d's final model differs from node 0's (max "
                 "|x - mean| %.3g): the members must end bit-identical",
                 c->algo->name,
                 differs,
                 spread);
    return spread;
}

/* Waits for every node to exit 0 at the last step; returns the worst
 * final lsq error. */
static double
s_finish(struct cluster *c)
{
    int steps = (int)strtol(c->steps, NULL, 10);
    double worst = 0;
    for (int i = 0; i < NODES; i++) {
        int st = tnc_wait(c->pid[i], LIMIT_MS);
        c->pid[i] = 0;
        if (st != 0) {
            char out[400];
            snprintf(out, sizeof out, "%s/node-%d.out", c->dir, i);
            tnc_show(out);
            fail_msg("%s: node %d exited %d", c->algo->name, i, st);
        }
        double step = s_last(c, i, "step");
        double error = s_last(c, i, "optimum_error");
        if (step != steps || isnan(error))
            fail_msg("%s: node %d ended at step %g of %d (error %g)",
                     c->algo->name,
                     i,
                     step,
                     steps,
                     error);
        worst = fmax(worst, error);
    }
    return worst;
}

/* The undisturbed run of c's algorithm (once per binary). */
static const struct base *
s_baseline(struct cluster *c)
{
    struct algo *a = (struct algo *)c->algo;
    if (a->base.done)
        return &a->base;
    uint64_t t0 = rumor_clock_ns();
    s_start(c, "base", a->steps);
    s_until(c, s_every, NODES, "step", 1, INFINITY, "did not train");
    s_require_elastic(c);
    a->base.error = s_finish(c);
    a->base.spread = s_spread(c, a->same_bits);
    a->base.done = true;
    printf("%s: undisturbed run of %s steps in %.1f s: optimum error %.3g, "
           "model spread %.3g\n",
           a->name,
           a->steps,
           (double)(rumor_clock_ns() - t0) / 1e9,
           a->base.error,
           a->base.spread);
    return &a->base;
}

/* The "seconds" of each node's last row now (from which gaps count). */
static void
s_now(const struct cluster *c, double *at)
{
    for (int i = 0; i < NODES; i++)
        at[i] = s_last(c, i, "seconds");
}

/* The longest step of the nodes ids[0..n) after at[id]; fails past
 * STEP_BOUND_S. */
static double
s_longest(const struct cluster *c, const int *ids, int n, const double *at)
{
    double longest = 0;
    for (int k = 0; k < n; k++) {
        struct scan s;
        s_scan(c, ids[k], at[ids[k]], &s, NULL);
        cJSON_Delete(s.last);
        if (s.gap > STEP_BOUND_S)
            fail_msg("%s: node %d: a step took %.2f s after the fault "
                     "(bound: 2 deadlines + %d ms of view change = %.2f s)",
                     c->algo->name,
                     ids[k],
                     s.gap,
                     VIEW_CHANGE_MS,
                     STEP_BOUND_S);
        longest = fmax(longest, s.gap);
    }
    return longest;
}

/* After a run that was disturbed: every node's error in the band of the
 * undisturbed run, the models the members' (bit-identical, or within the
 * undisturbed spread), and for a ring every node's last row at the same
 * epoch with all NODES members, no epoch seen with two counts, and (when
 * down_up) each of ids[0..n) saw the ring shrink and grow back. */
static void
s_check_end(struct cluster *c,
            const struct base *b,
            double worst,
            const int *ids,
            int n,
            bool down_up)
{
    const struct algo *a = c->algo;
    /* the same 8 nodes as the undisturbed run: the killed ones are back
     * for all but a few seconds of it, and lsq without noise has the
     * same optimum on every shard, so 7 would not be a tighter band */
    if (!(worst <= fmax(1e-4, 2 * b->error)))
        fail_msg("%s: optimum error %.3g, undisturbed %.3g",
                 a->name,
                 worst,
                 b->error);
    double spread = s_spread(c, a->same_bits);
    if (!a->same_bits && !(spread <= 2 * b->spread + 1e-6))
        fail_msg("%s: the final models spread %.3g, undisturbed %.3g",
                 a->name,
                 spread,
                 b->spread);
    if (!a->ring)
        return;
    double epochs[4096];
    for (size_t e = 0; e < 4096; e++)
        epochs[e] = -1;
    double last_epoch = NAN;
    for (int i = 0; i < NODES; i++) {
        struct scan s;
        s_scan(c, i, INFINITY, &s, epochs);
        double e = tnc_num(s.last, "epoch"), m = tnc_num(s.last, "members");
        cJSON_Delete(s.last);
        if (m != NODES || (i > 0 && e != last_epoch))
            fail_msg("%s: node %d ended at epoch %g with %g members, the "
                     "nodes before it at epoch %g",
                     a->name,
                     i,
                     e,
                     m,
                     last_epoch);
        last_epoch = e;
    }
    for (int k = 0; down_up && k < n; k++) {
        struct scan s;
        s_scan(c, ids[k], INFINITY, &s, NULL);
        cJSON_Delete(s.last);
        if (!s.down_up)
            fail_msg("%s: node %d's rows never show fewer members, then %d",
                     a->name,
                     ids[k],
                     NODES);
    }
    printf("%s: every node ends at epoch %g with %d members\n",
           a->name,
           last_epoch,
           NODES);
}

/* The gossip neighbours of victims[0..k) on the ring of 8, into nbr. */
static int
s_neighbours(const int *victims, int k, int *nbr)
{
    int n = 0;
    for (int j = 0; j < k; j++) {
        nbr[n++] = (victims[j] + NODES - 1) % NODES;
        nbr[n++] = (victims[j] + 1) % NODES;
    }
    return n;
}

/* kill -9 of victims[0..k) at once after KILL_STEP steps, then each
 * restarted with --join: see the file's comment. */
static void
s_kill_join(struct algo *algo, const int *victims, int k)
{
    struct cluster *c = &s_c;
    s_cluster_new(c, algo);
    const struct base *b = s_baseline(c);
    uint64_t t0 = rumor_clock_ns();
    s_start(c, "run", algo->steps);
    s_until(c, s_every, NODES, "step", KILL_STEP, INFINITY, "did not train");
    s_require_elastic(c);
    int alive[NODES], nbr[2 * NODES];
    int n = s_others(victims, k, alive);
    int nn = s_neighbours(victims, k, nbr);
    double at[NODES];
    s_now(c, at);
    for (int j = 0; j < k; j++)
        assert_int_equal(kill(c->pid[victims[j]], SIGKILL), 0);
    for (int j = 0; j < k; j++) {
        assert_int_equal(tnc_wait(c->pid[victims[j]], LIMIT_MS), 128 + SIGKILL);
        c->pid[victims[j]] = 0;
    }
    uint64_t killed = rumor_clock_ns();
    if (algo->ring)
        s_until(c,
                alive,
                n,
                "members",
                n,
                n,
                "never installed an epoch without the killed nodes");
    else
        s_until(c, nbr, nn, "peers_down", 1, INFINITY, "never marked down");
    double reformed = (double)(rumor_clock_ns() - killed) / 1e9;
    for (int j = 0; j < k; j++)
        s_node(c, victims[j], true);
    if (algo->ring)
        s_until(c,
                s_every,
                NODES,
                "members",
                NODES,
                NODES,
                "never took the restarted nodes back in");
    else
        s_until(c, nbr, nn, "readmitted", 1, INFINITY, "never readmitted");
    double worst = s_finish(c);
    double longest = s_longest(c, alive, n, at);
    printf("%s: %d killed; survivors re-formed %.2f s after the kill, "
           "longest step %.3f s (bound %.2f s); run %.1f s; optimum error "
           "%.3g (undisturbed %.3g)\n",
           algo->name,
           k,
           reformed,
           longest,
           STEP_BOUND_S,
           (double)(rumor_clock_ns() - t0) / 1e9,
           worst,
           b->error);
    s_check_end(c, b, worst, alive, n, true);
}

/* SIGSTOP of node 3 until the others are past it, then SIGCONT. */
static void
s_stop_cont(struct algo *algo)
{
    struct cluster *c = &s_c;
    s_cluster_new(c, algo);
    const struct base *b = s_baseline(c);
    const int victim = 3;
    s_start(c, "run", algo->steps);
    s_until(c, s_every, NODES, "step", KILL_STEP, INFINITY, "did not train");
    s_require_elastic(c);
    int alive[NODES], nbr[2];
    int n = s_others(&victim, 1, alive);
    s_neighbours(&victim, 1, nbr);
    double at[NODES];
    s_now(c, at);
    assert_int_equal(kill(c->pid[victim], SIGSTOP), 0);
    if (algo->ring)
        s_until(c,
                alive,
                n,
                "members",
                n,
                n,
                "never installed an epoch without the stopped node");
    else
        s_until(c, nbr, 2, "peers_down", 1, INFINITY, "never marked down");
    assert_int_equal(kill(c->pid[victim], SIGCONT), 0);
    if (algo->ring)
        s_until(c,
                s_every,
                NODES,
                "members",
                NODES,
                NODES,
                "never took the stopped node back in");
    else
        s_until(c, nbr, 2, "readmitted", 1, INFINITY, "never readmitted");
    double worst = s_finish(c);
    double longest = s_longest(c, alive, n, at);
    printf("%s: node %d stopped past the deadline and continued; the "
           "others' longest step %.3f s; optimum error %.3g (undisturbed "
           "%.3g)\n",
           algo->name,
           victim,
           longest,
           worst,
           b->error);
    s_check_end(c, b, worst, alive, n, true);
}

static void
test_ring8_allreduce__kill9_one_join__reformed_in_bound_rejoined_same_model(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_allreduce, victim, 1);
}

static void
test_ring8_powersgd__kill9_one_join__reformed_in_bound_rejoined_same_model(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_powersgd, victim, 1);
}

static void
test_ring8_localsgd__kill9_one_join__reformed_in_bound_rejoined_same_band(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_localsgd, victim, 1);
}

static void
test_ring8_localsgd_stale__kill9_one_join__reformed_in_bound_rejoined_same_band(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_localsgd_stale, victim, 1);
}

/* s_kill_join of node 2 with the models in the reference device's memory
 * (RUMOR_NODE_DEVICE=ref): the STATE goes through a host copy. */
static void
s_kill_join_ref(struct algo *algo)
{
    const int victim[] = {2};
    char out[400];
    assert_int_equal(setenv("RUMOR_NODE_DEVICE", "ref", 1), 0);
    s_kill_join(algo, victim, 1);
    assert_int_equal(unsetenv("RUMOR_NODE_DEVICE"), 0);
    for (int i = 0; i < 3; i++) { /* the victim's restart among them */
        snprintf(out, sizeof out, "%s/node-%d.out", s_c.dir, i);
        if (!tnc_contains(out, "optimizer are in ref memory"))
            fail_msg("node %d's model is not on the reference device", i);
    }
}

static void
test_ring8_powersgd_ref_device__kill9_one_join__reformed_rejoined_same_model(
    void **state)
{
    (void)state;
    s_kill_join_ref(&s_powersgd_ref);
}

/* The exchange thread's copy in device memory, its ring's STATE through
 * a host copy of its own. */
static void
test_ring8_localsgd_stale_ref_device__kill9_one_join__rejoined_same_band(
    void **state)
{
    (void)state;
    s_kill_join_ref(&s_localsgd_stale_ref);
}

static void
test_ring8_allreduce__kill9_two_apart_join__reformed_rejoined_same_model(
    void **state)
{
    (void)state;
    const int victims[] = {2, 5};
    s_kill_join(&s_allreduce, victims, 2);
}

static void
test_ring8_powersgd__kill9_two_apart_join__reformed_rejoined_same_model(
    void **state)
{
    (void)state;
    const int victims[] = {2, 5};
    s_kill_join(&s_powersgd, victims, 2);
}

static void
test_ring8_localsgd_stream__kill9_one_join__reformed_in_bound_rejoined_same_band(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_localsgd_stream, victim, 1);
}

static void
test_ring8_localsgd__kill9_two_apart_join__reformed_rejoined_same_band(
    void **state)
{
    (void)state;
    const int victims[] = {2, 5};
    s_kill_join(&s_localsgd, victims, 2);
}

static void
test_ring8_allreduce_topk_ef__kill9_one_join__reformed_rejoined_same_model(
    void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_codec, victim, 1);
}

static void
test_ring8_allreduce__sigstop_past_deadline__removed_readmitted_same_model(
    void **state)
{
    (void)state;
    s_stop_cont(&s_allreduce);
}

/* The harness on a gossip algorithm, which skips a dead neighbour today:
 * neighbours mark the killed node down and readmit it, the run ends in
 * the band and the models within the undisturbed spread. */
static void
test_ring8_dpsgd__kill9_one_join__harness_sanity(void **state)
{
    (void)state;
    const int victim[] = {2};
    s_kill_join(&s_dpsgd, victim, 1);
}

/* The largest step among nodes ids[0..n). */
static double
s_max_step(const struct cluster *c, const int *ids, int n)
{
    double most = 0;
    for (int k = 0; k < n; k++)
        most = fmax(most, s_last(c, ids[k], "step"));
    return most;
}

static void
test_ring8_allreduce_netns_5_3__majority_goes_on_minority_waits_heals(
    void **state)
{
    (void)state;
    struct cluster *c = &s_c;
    s_cluster_new(c, &s_allreduce);
    snprintf(c->ns[0], sizeof c->ns[0], "rea%d", (int)getpid());
    snprintf(c->ns[1], sizeof c->ns[1], "reb%d", (int)getpid());
    int rc = tnc_netns_pair(c->ns[0], c->ns[1]);
    if (rc == 1) {
        printf("skipped: network namespaces are not allowed here "
               "(ip netns add failed; needs root or CAP_SYS_ADMIN)\n");
        skip();
    }
    assert_int_equal(rc, 0);
    const struct base *b = s_baseline(c); /* on loopback */
    /* nodes 0-4 on one side, 5-7 on the other: the ring's edges 4-5 and
     * 7-0 cross the cut */
    c->first_b = 5;
    tnc_split_topology(c->topo, c->first_b);
    const int major[] = {0, 1, 2, 3, 4}, minor[] = {5, 6, 7};
    /* longer than the others: the minority, backing off between its
     * attempts at a view change, may take a few seconds to hear of the
     * healed link (the band stays the 400-step run's: looser, as more
     * steps solve lsq further) */
    s_start(c, "run", "600");
    s_until(c, s_every, NODES, "step", KILL_STEP, INFINITY, "did not train");
    s_require_elastic(c);
    double at[NODES];
    s_now(c, at);
    assert_int_equal(tnc_sh("ip -n %s link set %s down", c->ns[0], c->ns[0]),
                     0);
    s_until(c, major, 5, "members", 5, 5, "never installed an epoch of 5");
    /* a step in flight at the cut may still end; none after the majority
     * has moved on */
    double cut = s_max_step(c, minor, 3);
    s_until(c,
            major,
            5,
            "step",
            s_last(c, 0, "step") + 20,
            INFINITY,
            "stopped training after the cut");
    double minor_step = s_max_step(c, minor, 3);
    for (int k = 0; k < 3; k++)
        if (s_last(c, minor[k], "epoch") != 0)
            fail_msg("node %d installed epoch %g on the minority side",
                     minor[k],
                     s_last(c, minor[k], "epoch"));
    if (minor_step > cut)
        fail_msg("the minority stepped from %g to %g while cut",
                 cut,
                 minor_step);
    s_all_running(c, "the link to come back");
    double longest = s_longest(c, major, 5, at);
    assert_int_equal(tnc_sh("ip -n %s link set %s up", c->ns[0], c->ns[0]), 0);
    s_until(c,
            s_every,
            NODES,
            "members",
            NODES,
            NODES,
            "never back in one ring after the link came back");
    double worst = s_finish(c);
    printf("partition 5/3: the majority's longest step %.3f s; the minority "
           "stayed at step %g; optimum error %.3g (undisturbed %.3g)\n",
           longest,
           cut,
           worst,
           b->error);
    s_check_end(c, b, worst, major, 5, true);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_ring8_dpsgd__kill9_one_join__harness_sanity,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_allreduce__kill9_one_join__reformed_in_bound_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_powersgd__kill9_one_join__reformed_in_bound_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_localsgd__kill9_one_join__reformed_in_bound_rejoined_same_band,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_localsgd_stale__kill9_one_join__reformed_in_bound_rejoined_same_band,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_localsgd_stream__kill9_one_join__reformed_in_bound_rejoined_same_band,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_allreduce__kill9_two_apart_join__reformed_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_powersgd__kill9_two_apart_join__reformed_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_localsgd__kill9_two_apart_join__reformed_rejoined_same_band,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_allreduce_topk_ef__kill9_one_join__reformed_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_allreduce__sigstop_past_deadline__removed_readmitted_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_powersgd_ref_device__kill9_one_join__reformed_rejoined_same_model,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_localsgd_stale_ref_device__kill9_one_join__rejoined_same_band,
            s_teardown),
        cmocka_unit_test_teardown(
            test_ring8_allreduce_netns_5_3__majority_goes_on_minority_waits_heals,
            s_teardown),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("elastic", tests, NULL, NULL);
}
