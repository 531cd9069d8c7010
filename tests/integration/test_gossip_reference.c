/*
 * PowerGossip against the reference's consensus experiment (issue 6):
 * `rumor sim consensus` (PowerGossip rank 1, 8-ring, 100x100, 5000 steps)
 * must reach at least the error reduction of the reference curve at every
 * checkpoint. The reference curves in tests/data/gossip/ were made by
 * tests/gossip/powergossip_ref.py, a single-process PyTorch
 * re-implementation of epfml/powergossip's PowerGossip and consensus
 * problem (see that file and docs/gossip.md); when /usr/bin/python3 has
 * torch, the script is run again for 300 steps to check that it still
 * reproduces the recorded curve. Without warm start (the reference's
 * warm_start=False, the script's --no-warm-start) both sides draw their
 * own random factors every iteration, so the curves can only agree
 * statistically: within 10 % at every checkpoint (measured: 2 %), where
 * the warm-started curve is 2 to 23 times lower.
 */
#include "tests/cmocka_compat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CURVE_MAX 128

struct curve {
    unsigned long long step[CURVE_MAX];
    double rel[CURVE_MAX];
    size_t count;
};

/* Reads "step,bits_per_node,rel_error" lines (the header is skipped). */
static void
s_read_curve(FILE *f, struct curve *c)
{
    char line[256];
    c->count = 0;
    while (fgets(line, sizeof line, f) != NULL && c->count < CURVE_MAX) {
        char *end = NULL;
        unsigned long long step = strtoull(line, &end, 10);
        if (end == line || *end != ',')
            continue; /* the header */
        char *bits = end + 1;
        char *comma = strchr(bits, ',');
        if (comma == NULL)
            continue;
        c->step[c->count] = step;
        c->rel[c->count] = strtod(comma + 1, NULL);
        c->count++;
    }
}

static double
s_at(const struct curve *c, unsigned long long step)
{
    for (size_t k = 0; k < c->count; k++)
        if (c->step[k] == step)
            return c->rel[k];
    fail_msg("step %llu is not in the curve", step);
    return NAN;
}

static void
s_load_reference(const char *gamma, const char *variant, struct curve *c)
{
    char path[256];
    snprintf(path,
             sizeof path,
             "tests/data/gossip/powergossip_ref_ring8_100x100_gamma%s%s.csv",
             gamma,
             variant);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot open %s (run from the repository root)", path);
    s_read_curve(f, c);
    fclose(f);
    assert_true(c->count > 50);
}

/* Rumor's curve at gamma (warm: "true" or "false") against the recorded
 * reference: at or below it (tolerance 1), or within the factor
 * tolerance either way (> 1). */
static void
s_check_gamma(const char *bin,
              const char *gamma,
              const char *warm,
              double tolerance,
              const char *robust)
{
    struct curve ref, ours;
    s_load_reference(gamma, strcmp(warm, "true") == 0 ? "" : "_nowarm", &ref);
    char cmd[512];
    snprintf(cmd,
             sizeof cmd,
             "%s sim consensus --topology ring:8 --algo powergossip --rank 1 "
             "--gamma %s --size 100x100 --steps 5000 --every 100 "
             "--warm-start %s --robust %s",
             bin,
             gamma,
             warm,
             robust);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    s_read_curve(p, &ours);
    assert_int_equal(pclose(p), 0);
    const unsigned long long checks[] =
        {100, 500, 1000, 2000, 3000, 4000, 5000};
    for (size_t k = 0; k < sizeof checks / sizeof checks[0]; k++) {
        double r = s_at(&ref, checks[k]), o = s_at(&ours, checks[k]);
        printf("gamma %s warm start %s robust %s step %llu: reference "
               "%.4g, rumor %.4g\n",
               gamma,
               warm,
               robust,
               checks[k],
               r,
               o);
        if (!(o <= r * tolerance && (tolerance == 1 || o >= r / tolerance)))
            fail_msg("gamma %s warm start %s step %llu: rel_error %.4g, "
                     "the reference's %.4g (tolerance %g)",
                     gamma,
                     warm,
                     checks[k],
                     o,
                     r,
                     tolerance);
    }
}

static void
test_sim_consensus__powergossip_ring8__at_least_reference_reduction(
    void **state)
{
    (void)state;
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    /* option for option: the reference does not clip */
    s_check_gamma(bin, "1.308", "true", 1, "off");
    s_check_gamma(bin, "1.0", "true", 1, "off");
    /* robust mixing on (the default) meets it too */
    s_check_gamma(bin, "1.308", "true", 1, "clip");
}

static void
test_sim_consensus__powergossip_no_warm_start__reference_curve_within_10pc(
    void **state)
{
    (void)state;
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    s_check_gamma(bin, "1.308", "false", 1.1, "off");
    s_check_gamma(bin, "1.0", "false", 1.1, "off");
}

static void
test_reference_script__torch__reproduces_recorded_curve(void **state)
{
    (void)state;
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("skipped: /usr/bin/python3 cannot import torch\n");
        skip();
    }
    struct curve ref, run;
    s_load_reference("1.308", "", &ref);
    FILE *p = popen("/usr/bin/python3 tests/gossip/powergossip_ref.py "
                    "--gamma 1.308 --steps 300 --every 100",
                    "r");
    assert_non_null(p);
    s_read_curve(p, &run);
    assert_int_equal(pclose(p), 0);
    for (unsigned long long step = 100; step <= 300; step += 100) {
        double r = s_at(&ref, step), o = s_at(&run, step);
        /* Same script, same torch: equal up to BLAS summation order. */
        if (fabs(o - r) > 1e-4 * r)
            fail_msg("step %llu: script gives %.9g, recorded %.9g", step, o, r);
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_sim_consensus__powergossip_ring8__at_least_reference_reduction),
        cmocka_unit_test(
            test_sim_consensus__powergossip_no_warm_start__reference_curve_within_10pc),
        cmocka_unit_test(
            test_reference_script__torch__reproduces_recorded_curve),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("gossip_reference", tests, NULL, NULL);
}
