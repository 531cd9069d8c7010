/*
 * Robust mixing against a poisoned model (issue 33; docs/reliability.md,
 * "Robust mixing"): a 4-node D-PSGD ring of `rumor node` processes on
 * loopback with CURVE (the digits MLP), node 1 run by the attacker tool
 * (tests/tools/rumor-attack gossip-huge: its own node, whose GOSSIP frames
 * from step ATTACK_AT on carry 1e30 in every float, 20 of them). Before,
 * such frames diverged every node within 2 steps. Now:
 *   - the honest nodes (0, 2, 3) finish every step, exit 0;
 *   - each one's held-out accuracy is within ACC_BAND of the same node's
 *     in an undisturbed run of the same ring (run first, in the test);
 *   - nodes 0 and 2 (node 1's neighbours) clipped at least the 10 frames
 *     each received, and their logs name the sender;
 * and the control: the same attack with --robust off stops an honest node
 * or takes it out of the band. Every wait has a deadline; every process
 * started is killed and waited for, the temporary directory removed.
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

#define NODES     4
#define ATTACKER  1
#define STEPS     "1500"
#define STEPS_N   1500
#define DEADLINE  "2000"
#define LIMIT_MS  180000 /* only a broken build waits this long */
#define ATTACK_AT "20"
#define FRAMES    "20"
#define ACC_BAND  0.02

struct ring {
    char dir[256];
    char topo[300];
    pid_t pid[NODES];
};

/* The ring of the running test, for the teardown. */
static struct ring s_ring;

static int
s_teardown(void **state)
{
    (void)state;
    struct ring *r = &s_ring;
    for (int i = 0; i < NODES; i++)
        if (r->pid[i] > 0) {
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
    snprintf(r->dir, sizeof r->dir, "/tmp/rumor-robust-attack-XXXXXX");
    tnc_ring4_local(r->dir, r->topo, sizeof r->topo);
}

/* Node 1 under the attacker tool, the node options as --name=value. */
static pid_t
s_attacker(const struct ring *r, const char *run, const char *robust)
{
    const char *tool = getenv("RUMOR_ATTACK");
    if (tool == NULL)
        fail_msg("RUMOR_ATTACK is not set");
    char topo[640], key[640], dir[640], out[640], rob[32];
    snprintf(topo, sizeof topo, "--topology=%s", r->topo);
    snprintf(key, sizeof key, "--key=%s/keys/node-%d", r->dir, ATTACKER);
    snprintf(dir, sizeof dir, "--metrics-dir=%s/%s", r->dir, run);
    snprintf(out, sizeof out, "%s/%s-node-%d.out", r->dir, run, ATTACKER);
    snprintf(rob, sizeof rob, "--robust=%s", robust);
    const char *argv[] = {"rumor-attack",
                          "gossip-huge",
                          "--from=" ATTACK_AT,
                          "--count=" FRAMES,
                          "--",
                          topo,
                          "--id=1",
                          key,
                          "--algo=dpsgd",
                          "--steps=" STEPS,
                          "--eval-every=0",
                          "--deadline-ms=" DEADLINE,
                          dir,
                          "--log-level=warn",
                          rob,
                          NULL};
    return tnc_spawn_path(tool, argv, out, NULL);
}

/* Starts the ring of run: node 1 the attacker's when attack. */
static void
s_start(struct ring *r, const char *run, bool attack, const char *robust)
{
    for (int id = 0; id < NODES; id++) {
        if (attack && id == ATTACKER) {
            r->pid[id] = s_attacker(r, run, robust);
            continue;
        }
        char sid[16], key[640], out[640], dir[640];
        snprintf(sid, sizeof sid, "%d", id);
        snprintf(key, sizeof key, "%s/keys/node-%d", r->dir, id);
        snprintf(out, sizeof out, "%s/%s-node-%d.out", r->dir, run, id);
        snprintf(dir, sizeof dir, "%s/%s", r->dir, run);
        const char *argv[] = {"node",   "--topology",
                              r->topo,  "--id",
                              sid,      "--key",
                              key,      "--algo",
                              "dpsgd",  "--steps",
                              STEPS,    "--eval-every",
                              "0",      "--deadline-ms",
                              DEADLINE, "--metrics-dir",
                              dir,      "--log-level",
                              "warn",   "--robust",
                              robust,   NULL};
        r->pid[id] = tnc_start(argv, out);
    }
}

/* The last row of run/node-id.jsonl (caller frees; NULL when none). */
static cJSON *
s_last(const struct ring *r, const char *run, int id)
{
    char path[640];
    snprintf(path, sizeof path, "%s/%s/node-%d.jsonl", r->dir, run, id);
    FILE *f = fopen(path, "r");
    static char line[1 << 16];
    cJSON *last = NULL;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            break;
        }
        cJSON_Delete(last);
        last = o;
    }
    if (f != NULL)
        fclose(f);
    return last;
}

/* Waits for every process of run; for each node, its exit status, its
 * held-out accuracy and its clipped count (NaN when it has no last row at
 * step STEPS_N). */
static void
s_finish(struct ring *r,
         const char *run,
         int status[NODES],
         double acc[NODES],
         double clipped[NODES])
{
    for (int id = 0; id < NODES; id++) {
        status[id] = tnc_wait(r->pid[id], LIMIT_MS);
        r->pid[id] = 0;
        acc[id] = clipped[id] = NAN;
        cJSON *last = s_last(r, run, id);
        if (last != NULL && (int)tnc_num(last, "step") == STEPS_N) {
            acc[id] = tnc_num(last, "accuracy");
            clipped[id] = tnc_num(last, "clipped");
        }
        cJSON_Delete(last);
    }
}

static void
test_ring4_dpsgd__1e30_gossip_frames__honest_finish_same_band_sender_named(
    void **state)
{
    (void)state;
    struct ring *r = &s_ring;
    s_ring_new(r);
    int st[NODES];
    double calm[NODES], hit[NODES], clipped[NODES];
    s_start(r, "calm", false, "clip");
    s_finish(r, "calm", st, calm, clipped);
    for (int id = 0; id < NODES; id++)
        if (st[id] != 0 || isnan(calm[id]))
            fail_msg("undisturbed: node %d exited %d", id, st[id]);

    s_start(r, "attacked", true, "clip");
    s_finish(r, "attacked", st, hit, clipped);
    char out[640];
    snprintf(out, sizeof out, "%s/attacked-node-%d.out", r->dir, ATTACKER);
    if (!tnc_contains(out, "(" FRAMES " of " FRAMES ")")) {
        tnc_show(out);
        fail_msg("the attacker did not send its " FRAMES " frames");
    }
    for (int id = 0; id < NODES; id++) {
        if (id == ATTACKER)
            continue;
        printf("node %d: accuracy %.4f undisturbed, %.4f attacked; %g "
               "clipped\n",
               id,
               calm[id],
               hit[id],
               clipped[id]);
        snprintf(out, sizeof out, "%s/attacked-node-%d.out", r->dir, id);
        if (st[id] != 0 || isnan(hit[id])) {
            tnc_show(out);
            fail_msg("node %d exited %d before its last step", id, st[id]);
        }
        if (fabs(hit[id] - calm[id]) > ACC_BAND)
            fail_msg("node %d: accuracy %.4f, undisturbed %.4f (band %.2f)",
                     id,
                     hit[id],
                     calm[id],
                     ACC_BAND);
        if (id == 0 || id == 2) { /* node 1's neighbours */
            if (!(clipped[id] >= 10))
                fail_msg("node %d clipped %g differences", id, clipped[id]);
            if (!tnc_contains(out, "clipped the difference of 1 ")) {
                tnc_show(out);
                fail_msg("node %d's log does not name node 1", id);
            }
        }
    }

    /* the control: the same attack without robust mixing */
    s_start(r, "off", true, "off");
    s_finish(r, "off", st, hit, clipped);
    bool hurt = false;
    for (int id = 0; id < NODES; id++)
        if (id != ATTACKER)
            hurt = hurt || st[id] != 0 || isnan(hit[id]) ||
                   fabs(hit[id] - calm[id]) > ACC_BAND;
    printf("robust off: node 0 exited %d, node 2 exited %d\n", st[0], st[2]);
    assert_true(hurt);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_ring4_dpsgd__1e30_gossip_frames__honest_finish_same_band_sender_named,
            s_teardown),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("robust_attack", tests, NULL, NULL);
}
