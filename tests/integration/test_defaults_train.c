/*
 * Defaults that train (issue 18): every algorithm with no gossip option
 * but --algo trains `rumor node`'s default workload (the MLP on the
 * embedded digits, with the node's default optimizer, learning rate,
 * batch and steps, read from rumor_node_opts_default) on a ring, a torus
 * and a complete graph, in `rumor sim train` ($RUMOR_BIN), which runs the
 * node's step (gradient, gossip, optimizer; powersgd and allreduce
 * average gradients). Each run must exit 0 with finite losses, end with
 * a minibatch loss below 0.5 and below half its value at step 50, and
 * reach a held-out accuracy of the nodes' average model of at least 0.9
 * and within 3 points of all-reduce on the same graph. With the defaults
 * of before (gamma 1 for every algorithm, Moniqua's theta 2, PowerGossip
 * factors stuck at zero) choco, deepsqueeze and moniqua diverged and
 * powergossip ended 4 points below all-reduce on 32 nodes.
 *
 * A diverging run stops with an error naming --gamma, --lr and --codec
 * (test_sim_train__diverging__error_names_the_options).
 */
#include "rumor/node.h"

#include "tests/cmocka_compat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *const s_algos[] = {"allreduce",
                                      "dpsgd",
                                      "choco",
                                      "deepsqueeze",
                                      "moniqua",
                                      "powergossip",
                                      "powersgd",
                                      "localsgd"};
#define ALGOS (sizeof s_algos / sizeof s_algos[0])

static const char *const s_graphs[] = {"ring:32", "torus:4x4", "complete:8"};
#define GRAPHS (sizeof s_graphs / sizeof s_graphs[0])

static const char *
s_bin(void)
{
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    return bin;
}

/* The node's defaults as `rumor sim train` options (the gossip options
 * are rumor_gossip_opts_default in both). */
static void
s_node_defaults(char *out, size_t cap)
{
    static const char *const optim[] = {"sgd", "momentum", "nesterov"};
    struct rumor_node_opts d;
    rumor_node_opts_default(&d);
    assert_int_equal(d.workload.hidden_count, 1);
    assert_int_equal(d.optim.warmup_steps, 0);
    assert_int_equal(d.optim.decay_every, 0);
    snprintf(out,
             cap,
             "--workload %s --hidden %zu --batch %zu --optim %s --lr %.17g "
             "--momentum %.17g --weight-decay %.17g --steps %llu --every 50",
             rumor_workload_kind_name(d.workload.kind),
             d.workload.hidden[0],
             d.workload.batch,
             optim[d.optim.kind],
             d.optim.lr,
             d.optim.momentum,
             d.optim.weight_decay,
             (unsigned long long)d.steps);
}

struct run {
    int status;
    double loss50, loss, accuracy;
    bool finite;
};

/* Runs one algorithm on one graph; CSV step,bits,loss,test_accuracy. */
/* step,bits,loss,accuracy: four numbers and nothing else (the header and
 * log lines are not). */
static bool
s_csv_row(const char *line, double row[4])
{
    const char *at = line;
    for (int k = 0; k < 4; k++) {
        char *end = NULL;
        row[k] = strtod(at, &end);
        if (end == at || *end != (k < 3 ? ',' : '\n'))
            return false;
        at = end + 1;
    }
    return true;
}

static struct run
s_train(const char *bin, const char *algo, const char *graph)
{
    char defaults[512], cmd[1024], line[512];
    s_node_defaults(defaults, sizeof defaults);
    snprintf(cmd,
             sizeof cmd,
             "%s sim train --topology %s --algo %s %s 2>/dev/null",
             bin,
             graph,
             algo,
             defaults);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    struct run r = {.loss50 = NAN, .loss = NAN, .finite = true};
    while (fgets(line, sizeof line, p) != NULL) {
        double row[4];
        if (!s_csv_row(line, row))
            continue;
        double step = row[0], loss = row[2], acc = row[3];
        r.finite &= isfinite(loss) && isfinite(acc);
        if (step == 50)
            r.loss50 = loss;
        r.loss = loss;
        r.accuracy = acc;
    }
    int status = pclose(p);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

static void
test_every_algorithm__ring_torus_complete__defaults_train(void **state)
{
    (void)state;
    const char *bin = s_bin();
    int failures = 0;
    for (size_t gi = 0; gi < GRAPHS; gi++) {
        double base = NAN;
        for (size_t ai = 0; ai < ALGOS; ai++) {
            struct run r = s_train(bin, s_algos[ai], s_graphs[gi]);
            if (ai == 0)
                base = r.accuracy; /* allreduce */
            bool ok = r.status == 0 && r.finite && r.loss < 0.5 &&
                      r.loss < 0.5 * r.loss50 && r.accuracy >= 0.9 &&
                      r.accuracy >= base - 0.03;
            printf("%-10s %-12s status %d loss@50 %.4f loss %.4f "
                   "accuracy %.4f (allreduce %.4f)%s\n",
                   s_graphs[gi],
                   s_algos[ai],
                   r.status,
                   r.loss50,
                   r.loss,
                   r.accuracy,
                   base,
                   ok ? "" : "  <-- FAILS");
            failures += !ok;
        }
    }
    if (failures > 0)
        fail_msg("%d algorithm x graph runs did not train with defaults",
                 failures);
}

static void
test_sim_train__diverging__error_names_the_options(void **state)
{
    (void)state;
    const char *bin = s_bin();
    char defaults[512], cmd[1024], text[4096] = "";
    s_node_defaults(defaults, sizeof defaults);
    /* gamma 1 with 4-bit QSGD: CHOCO's copies drift apart (the old
     * default); stderr only */
    snprintf(cmd,
             sizeof cmd,
             "%s sim train --topology ring:6 --algo choco --gamma 1 %s "
             "2>&1 >/dev/null",
             bin,
             defaults);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(text, 1, sizeof text - 1, p);
    text[len] = '\0';
    int status = pclose(p);
    printf("%s", text);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    assert_non_null(strstr(text, "training diverged"));
    assert_non_null(strstr(text, "--gamma 1"));
    struct rumor_node_opts d;
    rumor_node_opts_default(&d);
    char lr[64];
    snprintf(lr, sizeof lr, "--lr %g", d.optim.lr);
    assert_non_null(strstr(text, lr));
    assert_non_null(strstr(text, "--codec qsgd:bits=4"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_every_algorithm__ring_torus_complete__defaults_train),
        cmocka_unit_test(test_sim_train__diverging__error_names_the_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
