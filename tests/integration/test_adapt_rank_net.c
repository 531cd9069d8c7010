/*
 * PowerSGD's adaptive rank over real processes (issue #12,
 * docs/adaptive.md): `rumor launch` starts four `rumor node` processes on
 * a loopback ring with CURVE keys (`rumor topo gen ring 4 --local`),
 * training the MLP on the embedded digits with --algo powersgd --adapt
 * rule. Every node's metrics line of every step must carry the same
 * "adapt_rank" object (the nodes choose from the same all-reduced sums,
 * so rank, error and change count agree bit for bit); under a tight
 * error budget the rank rises to the bound and never falls, under a loose
 * one it falls to the lower bound (adapt-error 3: rho <= 1 is always
 * below half of it). `rumor launch` stops its nodes when it ends; the
 * test waits for it with a deadline and its teardown removes the
 * directory.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/integration/test_node_common.h"

#include <cjson/cJSON.h>
#include <string.h>

#define NODES    4
#define STEPS    20
#define ARGS_MAX 48
/* generous: only a broken build waits this long */
#define RUN_LIMIT_MS 120000

struct run {
    char dir[64];
    char topo[128];
    char metrics[128];
    char out[128]; /* the processes' stdout and stderr */
};

/* Runs `rumor args...` (output appended to r->out) until it exits; kills
 * it and fails past RUN_LIMIT_MS. Returns its exit status. */
static int
s_run(const struct run *r, const char *const *args)
{
    return tnc_wait(tnc_start(args, r->out), RUN_LIMIT_MS);
}

static char s_dir[64]; /* the running test's directory ("" when none) */

/* Removes the test's directory, also after a failed assertion. */
static int
s_teardown(void **state)
{
    (void)state;
    if (s_dir[0] != '\0')
        nftw(s_dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
    s_dir[0] = '\0';
    return 0;
}

/* Trains STEPS steps with the extra node options; fills ranks[node][step]
 * and checks that every node's adapt_rank equals node 0's at every step. */
static void
s_train(const char *const *extra, size_t ranks[NODES][STEPS])
{
    struct run r;
    snprintf(r.dir, sizeof r.dir, "/tmp/rumor-adapt-rank-XXXXXX");
    assert_non_null(mkdtemp(r.dir));
    snprintf(s_dir, sizeof s_dir, "%s", r.dir);
    snprintf(r.topo, sizeof r.topo, "%s/ring.topo", r.dir);
    snprintf(r.metrics, sizeof r.metrics, "%s/run", r.dir);
    snprintf(r.out, sizeof r.out, "%s/out.log", r.dir);
    const char *gen[] =
        {"topo", "gen", "ring", "4", "--local", "--out", r.topo, NULL};
    assert_int_equal(s_run(&r, gen), 0);
    const char *args[ARGS_MAX] = {"launch",
                                  "--topology",
                                  r.topo,
                                  "--metrics-dir",
                                  r.metrics,
                                  "--steps",
                                  "20",
                                  "--workload",
                                  "mlp",
                                  "--dataset",
                                  "digits",
                                  "--algo",
                                  "powersgd",
                                  "--adapt",
                                  "rule"};
    size_t n = 15;
    for (size_t k = 0; extra[k] != NULL && n < ARGS_MAX - 1; k++)
        args[n++] = extra[k];
    args[n] = NULL;
    int status = s_run(&r, args);
    if (status != 0) {
        tnc_show(r.out);
        fail_msg("rumor launch exited %d", status);
    }
    char *first[STEPS] = {NULL};
    for (int i = 0; i < NODES; i++) {
        char path[192], line[1 << 14];
        snprintf(path, sizeof path, "%s/node-%d.jsonl", r.metrics, i);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        size_t step = 0;
        while (step < STEPS && fgets(line, sizeof line, f) != NULL) {
            cJSON *o = cJSON_Parse(line);
            cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "adapt_rank");
            cJSON *rk = cJSON_GetObjectItemCaseSensitive(k, "rank");
            assert_true(cJSON_IsNumber(rk));
            ranks[i][step] = (size_t)rk->valuedouble;
            char *text = cJSON_PrintUnformatted(k);
            assert_non_null(text);
            if (i == 0)
                first[step] = text;
            else {
                assert_string_equal(text, first[step]);
                free(text);
            }
            cJSON_Delete(o);
            step++;
        }
        fclose(f);
        assert_int_equal(step, STEPS);
    }
    for (size_t s = 0; s < STEPS; s++)
        free(first[s]);
}

static void
test_powersgd_rule__tight_budget__rank_rises_same_on_every_node(void **state)
{
    (void)state;
    const char *extra[] =
        {"--rank", "1", "--adapt-error", "0.3", "--adapt-rank-max", "8", NULL};
    size_t ranks[NODES][STEPS];
    s_train(extra, ranks);
    assert_int_equal(ranks[0][0], 1);
    for (size_t s = 1; s < STEPS; s++)
        assert_true(ranks[0][s] >= ranks[0][s - 1]);
    assert_int_equal(ranks[0][STEPS - 1], 8);
}

static void
test_powersgd_rule__loose_budget__rank_falls_same_on_every_node(void **state)
{
    (void)state;
    const char *extra[] = {"--rank", "4", "--adapt-error", "3", NULL};
    size_t ranks[NODES][STEPS];
    s_train(extra, ranks);
    assert_int_equal(ranks[0][0], 4);
    for (size_t s = 1; s < STEPS; s++)
        assert_true(ranks[0][s] <= ranks[0][s - 1]);
    assert_int_equal(ranks[0][STEPS - 1], 1);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_powersgd_rule__tight_budget__rank_rises_same_on_every_node,
            s_teardown),
        cmocka_unit_test_teardown(
            test_powersgd_rule__loose_budget__rank_falls_same_on_every_node,
            s_teardown),
    };
    return cmocka_run_group_tests_name("adapt_rank_net", tests, NULL, NULL);
}
