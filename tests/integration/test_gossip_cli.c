/*
 * `rumor sim` end to end ($RUMOR_BIN): `sim train` on least squares gets
 * close to the known optimum with D-PSGD and with compressed local SGD
 * (plain EF and SAEF); `sim consensus --edge-bytes` writes a per-edge
 * table whose rows add up to the bits per node it printed; `--json` lines
 * carry the documented keys; bad options exit with status 2.
 */
#include "tests/cmocka_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Runs cmd; returns the last line of its output in last (and the exit
 * status of the command). */
static int
s_run_last(const char *cmd, char *last, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    last[0] = '\0';
    while (fgets(line, sizeof line, p) != NULL)
        snprintf(last, cap, "%s", line);
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last CSV field of a line. */
static double
s_last_field(const char *line)
{
    const char *comma = strrchr(line, ',');
    assert_non_null(comma);
    return strtod(comma + 1, NULL);
}

static void
test_sim_train__least_squares__reaches_known_optimum(void **state)
{
    (void)state;
    const char *bin = s_bin();
    const char *algos[] = {
        "--algo dpsgd --lr 0.05",
        "--algo localsgd --delta-codec topk:ratio=0.1 --ef-alpha 0 --lr 0.05",
        "--algo localsgd --delta-codec topk:ratio=0.1 --ef-alpha 1 --lr 0.05",
    };
    for (size_t k = 0; k < sizeof algos / sizeof algos[0]; k++) {
        char cmd[512], last[512];
        snprintf(cmd,
                 sizeof cmd,
                 "%s sim train --topology ring:8 %s --steps 300 --every 100",
                 bin,
                 algos[k]);
        assert_int_equal(s_run_last(cmd, last, sizeof last), 0);
        double dist = s_last_field(last);
        printf("%s: %s", algos[k], last);
        if (!(dist < 1e-3))
            fail_msg("%s: distance to the optimum %.3g", algos[k], dist);
    }
}

static void
test_sim_consensus__edge_bytes__rows_sum_to_bits_per_node(void **state)
{
    (void)state;
    const char *bin = s_bin();
    char path[] = "/tmp/rumor-edges-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char cmd[512], last[512];
    snprintf(cmd,
             sizeof cmd,
             "%s sim consensus --topology torus:3x3 --algo powergossip "
             "--size 20x10 --steps 7 --edge-bytes %s",
             bin,
             path);
    assert_int_equal(s_run_last(cmd, last, sizeof last), 0);
    unsigned long long step = 0;
    double bits = 0;
    char *end = NULL;
    step = strtoull(last, &end, 10);
    assert_int_equal(step, 7);
    bits = strtod(end + 1, NULL);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    double total = 0;
    size_t rows = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long from = 0, to = 0;
        char *p = line;
        if (strncmp(line, "from", 4) == 0)
            continue;
        from = strtoul(p, &p, 10);
        to = strtoul(p + 1, &p, 10);
        double bytes = strtod(p + 1, &p);
        unsigned long long msgs = strtoull(p + 1, NULL, 10);
        assert_true(from < 9 && to < 9 && from != to);
        assert_int_equal(msgs, 7); /* one message per step on each edge */
        total += bytes;
        rows++;
    }
    fclose(f);
    remove(path);
    assert_int_equal(rows, 9 * 4); /* every node has 4 neighbours */
    assert_float_equal(total * 8 / 9, bits, 0.5);
}

static void
test_sim__json_and_bad_options(void **state)
{
    (void)state;
    const char *bin = s_bin();
    char cmd[512], last[512];
    snprintf(cmd,
             sizeof cmd,
             "%s sim train --topology ring:4 --workload logreg --steps 5 "
             "--json",
             bin);
    assert_int_equal(s_run_last(cmd, last, sizeof last), 0);
    assert_non_null(strstr(last, "\"step\": 5"));
    assert_non_null(strstr(last, "\"bits_per_node\": "));
    assert_non_null(strstr(last, "\"loss\": "));
    assert_non_null(strstr(last, "\"test_accuracy\": "));
    const char *bad[] = {
        "sim train --topology ring:4 --workload nope",
        "sim consensus --topology ring:4 --algo nope",
        "sim consensus --topology ring:4 --ef-alpha 2",
        "sim train --topology one-peer-exp:8 --algo choco",
        "sim",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", bin, bad[k]);
        if (s_run_last(cmd, last, sizeof last) != 2)
            fail_msg("'%s' did not exit with status 2", bad[k]);
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_train__least_squares__reaches_known_optimum),
        cmocka_unit_test(
            test_sim_consensus__edge_bytes__rows_sum_to_bits_per_node),
        cmocka_unit_test(test_sim__json_and_bad_options),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip_cli", tests, NULL, NULL);
}
