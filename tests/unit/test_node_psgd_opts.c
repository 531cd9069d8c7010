/*
 * PowerSGD's options as `rumor node` options (node/config.c): every name
 * reaches its field from the command-line spelling and from the INI file,
 * options that do not apply to the algorithm or contradict one another are
 * refused with a message naming them (docs/node.md).
 */
#include "tests/cmocka_compat.h"

#include "rumor/node.h"

#include <stdio.h>
#include <string.h>

/* A fresh config in *c (the old one freed) with the required options. */
static void
s_base(rumor_node_config **c)
{
    struct rumor_diag diag = {0};
    rumor_node_config_destroy(c);
    assert_int_equal(rumor_node_config_new(c), RUMOR_OK);
    assert_int_equal(rumor_node_config_set(*c, "topology", "t.topo", &diag), 0);
    assert_int_equal(rumor_node_config_set(*c, "id", "0", &diag), 0);
    assert_int_equal(rumor_node_config_set(*c, "insecure", "", &diag), 0);
}

static void
s_set(rumor_node_config *c, const char *name, const char *value)
{
    struct rumor_diag diag = {0};
    if (rumor_node_config_set(c, name, value, &diag) != RUMOR_OK)
        fail_msg("--%s %s: %s", name, value, diag.msg);
}

static void
s_check_fields(rumor_node_config *c)
{
    struct rumor_diag diag = {0};
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    const struct rumor_gossip_opts *g = &rumor_node_config_opts(c)->gossip;
    assert_int_equal(g->start_iter, 100);
    assert_float_equal(g->min_compression_rate, 1.5, 0);
    assert_false(g->use_error_feedback);
    assert_false(g->warm_start);
    assert_float_equal(g->orth_eps, 1e-8, 0);
    assert_false(g->batch_same_shape);
    assert_false(g->one_sided);
}

static void
test_powersgd_options__command_line_names__reach_the_gossip_options(void **s)
{
    (void)s;
    rumor_node_config *c = NULL;
    s_base(&c);
    const struct rumor_gossip_opts *g = &rumor_node_config_opts(c)->gossip;
    /* the defaults: PyTorch's, but start 0 and rank 4 (docs/gossip.md):
     * the rank is left to the algorithm, so a --rank given equal to it
     * makes the same HELLO settings */
    assert_int_equal(g->start_iter, 0);
    assert_int_equal(g->rank, 0);
    assert_float_equal(g->min_compression_rate, 2, 0);
    assert_true(g->use_error_feedback && g->warm_start);
    assert_true(g->batch_same_shape);
    assert_false(g->one_sided);
    s_set(c, "algo", "powersgd");
    assert_int_equal(rumor_gossip_rank(g), 4);
    s_set(c, "start-powersgd-iter", "100");
    s_set(c, "min-compression-rate", "1.5");
    s_set(c, "use-error-feedback", "false");
    s_set(c, "warm-start", "false");
    s_set(c, "orthogonalization-epsilon", "1e-8");
    s_set(c, "batch-tensors-with-same-shape", "false");
    s_check_fields(c);

    s_base(&c);
    s_set(c, "algo", "powersgd");
    s_set(c, "one-sided", "");
    s_set(c, "iterations", "4");
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_OK);
    assert_true(rumor_node_config_opts(c)->gossip.one_sided);
    assert_int_equal(rumor_node_config_opts(c)->gossip.iterations, 4);
    rumor_node_config_destroy(&c);
}

static void
test_powersgd_options__ini_keys__same_as_the_command_line(void **s)
{
    (void)s;
    static const char ini[] = "[node]\n"
                              "algo = powersgd\n"
                              "start-powersgd-iter = 100\n"
                              "min-compression-rate = 1.5\n"
                              "use-error-feedback = false\n"
                              "warm-start = no\n"
                              "orthogonalization-epsilon = 1e-8\n"
                              "batch-tensors-with-same-shape = off\n";
    rumor_node_config *c = NULL;
    s_base(&c);
    struct rumor_diag diag = {0};
    if (rumor_node_config_parse_ini(c,
                                    "p.ini",
                                    (const uint8_t *)ini,
                                    strlen(ini),
                                    &diag) != RUMOR_OK)
        fail_msg("ini: %s", diag.msg);
    s_check_fields(c);
    rumor_node_config_destroy(&c);
}

/* PowerGossip shares warm-start (its reference's warm_start), from the
 * command line and the INI file; it is on by default. */
static void
test_powergossip_warm_start__command_line_and_ini__reach_the_option(void **s)
{
    (void)s;
    rumor_node_config *c = NULL;
    s_base(&c);
    s_set(c, "algo", "powergossip");
    s_set(c, "warm-start", "false");
    struct rumor_diag diag = {0};
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_false(rumor_node_config_opts(c)->gossip.warm_start);
    static const char ini[] = "[node]\n"
                              "algo = powergossip\n"
                              "warm-start = off\n";
    s_base(&c);
    assert_true(rumor_node_config_opts(c)->gossip.warm_start);
    assert_int_equal(rumor_node_config_parse_ini(c,
                                                 "g.ini",
                                                 (const uint8_t *)ini,
                                                 strlen(ini),
                                                 &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_OK);
    assert_false(rumor_node_config_opts(c)->gossip.warm_start);
    rumor_node_config_destroy(&c);
}

static void
test_powersgd_options__misapplied__refused_naming_the_option(void **s)
{
    (void)s;
    static const struct {
        const char *algo, *name, *value, *name2, *value2, *says;
    } rows[] = {
        {"dpsgd",
         "warm-start",
         "false",
         NULL,
         NULL,
         "--warm-start does not apply to --algo dpsgd"},
        {"powergossip",
         "start-powersgd-iter",
         "5",
         NULL,
         NULL,
         "--start-powersgd-iter does not apply to --algo powergossip"},
        {"allreduce",
         "min-compression-rate",
         "4",
         NULL,
         NULL,
         "--min-compression-rate does not apply to --algo allreduce"},
        {"choco",
         "one-sided",
         "",
         NULL,
         NULL,
         "--one-sided does not apply to --algo choco"},
        {"powersgd",
         "iterations",
         "2",
         NULL,
         NULL,
         "--iterations applies to --algo powersgd with --one-sided"},
        {"powersgd",
         "one-sided",
         "",
         "use-error-feedback",
         "false",
         "--one-sided needs --use-error-feedback"},
        {"powersgd",
         "one-sided",
         "",
         "adapt",
         "fixed",
         "--adapt needs the hook variant"},
    };
    rumor_node_config *c = NULL;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        s_base(&c);
        s_set(c, "algo", rows[k].algo);
        s_set(c, rows[k].name, rows[k].value);
        if (rows[k].name2 != NULL)
            s_set(c, rows[k].name2, rows[k].value2);
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
        if (strstr(diag.msg, rows[k].says) == NULL)
            fail_msg("row %zu: '%s' does not say '%s'",
                     k,
                     diag.msg,
                     rows[k].says);
    }
    /* out of range values, at once */
    s_base(&c);
    struct rumor_diag diag = {0};
    assert_int_equal(
        rumor_node_config_set(c, "orthogonalization-epsilon", "-1", &diag),
        RUMOR_EINVAL);
    assert_int_equal(
        rumor_node_config_set(c, "min-compression-rate", "x", &diag),
        RUMOR_EINVAL);
    rumor_node_config_destroy(&c);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_powersgd_options__command_line_names__reach_the_gossip_options),
        cmocka_unit_test(
            test_powersgd_options__ini_keys__same_as_the_command_line),
        cmocka_unit_test(
            test_powergossip_warm_start__command_line_and_ini__reach_the_option),
        cmocka_unit_test(
            test_powersgd_options__misapplied__refused_naming_the_option),
    };
    return cmocka_run_group_tests_name("node_psgd_opts", tests, NULL, NULL);
}
