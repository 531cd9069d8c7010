/*
 * --ef and the compressed all-reduce as `rumor node` options
 * (node/config.c): the command-line and INI spellings reach the gossip
 * options (--codec with --algo allreduce turns on the compressed
 * exchange), and --ef is refused, naming it and why, where it does not
 * apply (docs/gossip.md, "Error feedback").
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
test_ef_options__command_line_and_ini__reach_the_gossip_options(void **s)
{
    (void)s;
    rumor_node_config *c = NULL;
    s_base(&c);
    const struct rumor_node_opts *o = rumor_node_config_opts(c);
    assert_false(o->gossip.compressed);
    assert_string_equal(o->gossip.ef, "");
    s_set(c, "algo", "allreduce");
    s_set(c, "codec", "topk:ratio=0.01");
    s_set(c, "ef", "dgc:0.9");
    struct rumor_diag diag = {0};
    /* DGC's memory carries the momentum: plain SGD unless one is named */
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_int_equal(o->optim.kind, RUMOR_OPTIM_SGD);
    assert_true(o->gossip.compressed);
    assert_string_equal(o->gossip.ef, "dgc:0.9");
    /* a momentum optimizer named on top of DGC's: refused */
    s_set(c, "optimizer", "momentum");
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "use --optimizer sgd"));
    s_base(&c);
    s_set(c, "algo", "allreduce");
    s_set(c, "codec", "topk:ratio=0.01");
    s_set(c, "optimizer", "nesterov");
    s_set(c, "ef", "dgc:0.9");
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
    static const char ini[] = "algo = localsgd\n"
                              "delta-codec = qsgd:bits=4\n"
                              "ef = ef-decay:0.7\n";
    s_base(&c);
    o = rumor_node_config_opts(c);
    if (rumor_node_config_parse_ini(c,
                                    "e.ini",
                                    (const uint8_t *)ini,
                                    strlen(ini),
                                    &diag))
        fail_msg("ini: %s", diag.msg);
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_string_equal(o->gossip.ef, "ef-decay:0.7");
    assert_false(o->gossip.compressed);
    rumor_node_config_destroy(&c);
}

static void
test_ef_options__misapplied__refused_naming_the_option(void **s)
{
    (void)s;
    static const struct {
        const char *algo, *name, *value, *says;
    } rows[] = {
        {"choco",
         "codec",
         "topk:ratio=0.1",
         "--ef ef does not apply to "
         "--algo choco: its public"},
        {"allreduce",
         NULL,
         NULL,
         "--ef ef does not apply to --algo "
         "allreduce: it needs a codec (--codec)"},
        {"localsgd", NULL, NULL, "it needs a delta codec (--delta-codec)"},
        {"powersgd", NULL, NULL, "its own memory (use_error_feedback)"},
        {"dpsgd", NULL, NULL, "--ef ef does not apply to --algo dpsgd"},
    };
    rumor_node_config *c = NULL;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        s_base(&c);
        s_set(c, "algo", rows[k].algo);
        if (rows[k].name != NULL)
            s_set(c, rows[k].name, rows[k].value);
        s_set(c, "ef", "ef");
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
        if (strstr(diag.msg, rows[k].says) == NULL)
            fail_msg("row %zu: '%s' does not say '%s'",
                     k,
                     diag.msg,
                     rows[k].says);
    }
    rumor_node_config_destroy(&c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_ef_options__command_line_and_ini__reach_the_gossip_options),
        cmocka_unit_test(
            test_ef_options__misapplied__refused_naming_the_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
