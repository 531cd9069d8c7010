/*
 * Stale exchanges (--stale S, node/stale.c) end to end: real `rumor`
 * processes on loopback with CURVE (`rumor topo gen ring 4 --local`, then
 * `rumor launch`), least squares with a known optimum W* (noise 0, full
 * batches), checked through the final model files and metrics lines.
 *   - The exchange of step t lands at the fixed step t + S, so a run's
 *     numbers cannot depend on the network's timing: DiLoCo with S = 3
 *     ends with the same bits on every node whether the links add 0 or
 *     20 ms of delay, and with other bits than S = 0 (the option acts);
 *   - DiLoCo, PowerGossip and CHOCO with stale exchanges still reach W*;
 *   - what cannot run stale is refused with the reason: PowerSGD (it
 *     averages gradients, which its optimizer step needs at once) and
 *     localsgd with S above its period.
 * Every process is waited for with a deadline and killed past it.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"
#include "tests/integration/test_node_common.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES        4
#define RUN_LIMIT_MS 60000 /* generous: only a broken build waits this long */
#define ARGS_MAX     48
#define LSQ_TOL      1e-4

struct ring {
    char dir[64];
    char topo[128];
    char out[128];
};

static void
s_ring_new(struct ring *r)
{
    snprintf(r->dir, sizeof r->dir, "/tmp/rumor-stale-XXXXXX");
    tnc_ring4_local(r->dir, r->topo, sizeof r->topo);
    snprintf(r->out, sizeof r->out, "%s/launch.out", r->dir);
}

/* `rumor launch` of least squares into DIR/run, then the algorithm's
 * options and extra ones (each NULL-terminated; extra may be NULL);
 * returns the exit status. */
static int
s_launch(const struct ring *r,
         const char *run,
         const char *const *algo,
         const char *const *extra)
{
    char metrics[160];
    snprintf(metrics, sizeof metrics, "%s/%s", r->dir, run);
    const char *args[ARGS_MAX] = {"launch",
                                  "--topology",
                                  r->topo,
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
                                  "300",
                                  "--eval-every",
                                  "100"};
    size_t n = 17;
    for (size_t k = 0; algo[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = algo[k];
    for (size_t k = 0; extra != NULL && extra[k] != NULL && n < ARGS_MAX - 1;
         k++)
        args[n++] = extra[k];
    args[n] = NULL;
    return tnc_wait(tnc_start(args, r->out), RUN_LIMIT_MS);
}

static void
s_launch_ok(const struct ring *r,
            const char *run,
            const char *const *algo,
            const char *const *extra)
{
    int status = s_launch(r, run, algo, extra);
    if (status != 0) {
        tnc_show(r->out);
        fail_msg("%s: launch exited %d", run, status);
    }
}

/* The last metrics line of node id in DIR/run (caller frees). */
static cJSON *
s_last_row(const struct ring *r, const char *run, int id)
{
    char path[200];
    snprintf(path, sizeof path, "%s/%s/node-%d.jsonl", r->dir, run, id);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("no metrics file %s", path);
    static char line[1 << 16], last[1 << 16];
    last[0] = '\0';
    while (fgets(line, sizeof line, f) != NULL)
        memcpy(last, line, sizeof line);
    fclose(f);
    cJSON *o = cJSON_Parse(last);
    if (!cJSON_IsObject(o))
        fail_msg("%s: last line is not a JSON object", path);
    return o;
}

/* Every node of the run ends within LSQ_TOL of W*, after 300 steps. */
static void
s_check_optimum(const struct ring *r, const char *run)
{
    for (int i = 0; i < NODES; i++) {
        cJSON *last = s_last_row(r, run, i);
        double step = tnc_num(last, "step");
        double err = tnc_num(last, "optimum_error");
        cJSON_Delete(last);
        assert_true(step == 300);
        if (!(err < LSQ_TOL))
            fail_msg("%s: node %d ends %g from W* (tolerance %g)",
                     run,
                     i,
                     err,
                     LSQ_TOL);
    }
}

/* The bytes of node id's final model file in DIR/run (caller frees). */
static unsigned char *
s_model(const struct ring *r, const char *run, int id, long *len)
{
    char path[200];
    snprintf(path, sizeof path, "%s/%s/node-%d.model", r->dir, run, id);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("no model file %s", path);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)*len + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return p;
}

/* Whether every node's final model is the same file in runs a and b. */
static bool
s_same_models(const struct ring *r, const char *a, const char *b)
{
    bool same = true;
    for (int i = 0; i < NODES; i++) {
        long la = 0, lb = 0;
        unsigned char *pa = s_model(r, a, i, &la);
        unsigned char *pb = s_model(r, b, i, &lb);
        same = same && la == lb && memcmp(pa, pb, (size_t)la) == 0;
        free(pa);
        free(pb);
    }
    return same;
}

/* Every node of DIR/run logged that its stale queue held `in_flight`
 * exchanges at most: it keeps that many snapshot pairs, not S. */
static void
s_check_in_flight(const struct ring *r, const char *run, int in_flight)
{
    char want[64];
    snprintf(want, sizeof want, "at most %d in flight,", in_flight);
    for (int i = 0; i < NODES; i++) {
        char path[200];
        snprintf(path, sizeof path, "%s/%s/node-%d.log", r->dir, run, i);
        if (!tnc_contains(path, want)) {
            tnc_show(path);
            fail_msg("%s: node %d's log does not say \"%s\"", run, i, want);
        }
    }
}

/* --- tests ------------------------------------------------------------- */

static void
test_ring4_diloco_stale3__delay_0_or_20ms__same_bits_at_optimum(void **state)
{
    (void)state;
    struct ring r;
    s_ring_new(&r);
    const char *diloco[] = {"--algo",
                            "localsgd",
                            "--period",
                            "5",
                            "--outer-lr",
                            "0.7",
                            "--outer-momentum",
                            "0.9",
                            NULL};
    const char *fast[] = {"--stale", "3", NULL};
    const char *slow[] = {"--stale", "3", "--delay-ms", "20", NULL};
    s_launch_ok(&r, "fast", diloco, fast);
    s_launch_ok(&r, "slow", diloco, slow);
    s_launch_ok(&r, "blocking", diloco, NULL);
    s_check_optimum(&r, "fast");
    s_check_optimum(&r, "slow");
    if (!s_same_models(&r, "fast", "slow"))
        fail_msg("the delay of the links changed a stale run's models");
    if (s_same_models(&r, "fast", "blocking"))
        fail_msg("--stale 3 gave the models of --stale 0");
    /* a sync every 5 steps lands 3 later: one in flight at a time */
    s_check_in_flight(&r, "fast", 1);
    tnc_dir_done(r.dir);
}

static void
test_ring4_powergossip_stale2__reaches_optimum(void **state)
{
    (void)state;
    struct ring r;
    s_ring_new(&r);
    const char *algo[] = {"--algo", "powergossip", "--stale", "2", NULL};
    s_launch_ok(&r, "pg", algo, NULL);
    s_check_optimum(&r, "pg");
    s_check_in_flight(&r, "pg", 2); /* an exchange every step */
    tnc_dir_done(r.dir);
}

static void
test_ring4_choco_topk_stale1__reaches_optimum(void **state)
{
    (void)state;
    struct ring r;
    s_ring_new(&r);
    const char *algo[] = {"--algo",
                          "choco",
                          "--codec",
                          "topk:ratio=0.1",
                          "--gamma",
                          "0.2",
                          "--stale",
                          "1",
                          NULL};
    s_launch_ok(&r, "choco", algo, NULL);
    s_check_optimum(&r, "choco");
    tnc_dir_done(r.dir);
}

/* A refused option: launch fails and its output says why. */
static void
s_check_refused(const char *const *algo, const char *why)
{
    struct ring r;
    s_ring_new(&r);
    int status = s_launch(&r, "refused", algo, NULL);
    bool said = tnc_contains(r.out, why);
    if (status == 0 || !said) {
        tnc_show(r.out);
        fail_msg("%s --stale: exit %d, expected a failure saying \"%s\"",
                 algo[1],
                 status,
                 why);
    }
    tnc_dir_done(r.dir);
}

static void
test_powersgd_stale__refused_with_reason(void **state)
{
    (void)state;
    const char *algo[] = {"--algo", "powersgd", "--stale", "1", NULL};
    s_check_refused(algo, "--stale needs the model exchange");
}

static void
test_localsgd_stale_above_period__refused_with_reason(void **state)
{
    (void)state;
    const char *algo[] =
        {"--algo", "localsgd", "--period", "4", "--stale", "5", NULL};
    s_check_refused(algo, "must be at most period");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_ring4_diloco_stale3__delay_0_or_20ms__same_bits_at_optimum),
        cmocka_unit_test(test_ring4_powergossip_stale2__reaches_optimum),
        cmocka_unit_test(test_ring4_choco_topk_stale1__reaches_optimum),
        cmocka_unit_test(test_powersgd_stale__refused_with_reason),
        cmocka_unit_test(test_localsgd_stale_above_period__refused_with_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
