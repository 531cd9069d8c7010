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

static void
s_base(struct rumor_node_opts *o)
{
    struct rumor_diag diag = {0};
    rumor_node_opts_default(o);
    assert_int_equal(rumor_node_opts_set(o, "topology", "t.topo", &diag), 0);
    assert_int_equal(rumor_node_opts_set(o, "id", "0", &diag), 0);
    assert_int_equal(rumor_node_opts_set(o, "insecure", "", &diag), 0);
}

static void
s_set(struct rumor_node_opts *o, const char *name, const char *value)
{
    struct rumor_diag diag = {0};
    if (rumor_node_opts_set(o, name, value, &diag) != RUMOR_OK)
        fail_msg("--%s %s: %s", name, value, diag.msg);
}

static void
test_ef_options__command_line_and_ini__reach_the_gossip_options(void **s)
{
    (void)s;
    struct rumor_node_opts o;
    s_base(&o);
    assert_false(o.gossip.compressed);
    assert_string_equal(o.gossip.ef, "");
    s_set(&o, "algo", "allreduce");
    s_set(&o, "codec", "topk:ratio=0.01");
    s_set(&o, "ef", "dgc:0.9");
    struct rumor_diag diag = {0};
    /* DGC's memory carries the momentum: plain SGD unless one is named */
    if (rumor_node_opts_check(&o, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_int_equal(o.optim.kind, RUMOR_OPTIM_SGD);
    assert_true(o.gossip.compressed);
    assert_string_equal(o.gossip.ef, "dgc:0.9");
    /* a momentum optimizer named on top of DGC's: refused */
    s_set(&o, "optimizer", "momentum");
    assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "use --optimizer sgd"));
    s_base(&o);
    s_set(&o, "algo", "allreduce");
    s_set(&o, "codec", "topk:ratio=0.01");
    s_set(&o, "optimizer", "nesterov");
    s_set(&o, "ef", "dgc:0.9");
    assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
    static const char ini[] = "algo = localsgd\n"
                              "delta-codec = qsgd:bits=4\n"
                              "ef = ef-decay:0.7\n";
    s_base(&o);
    if (rumor_node_opts_parse_ini(&o,
                                  "e.ini",
                                  (const uint8_t *)ini,
                                  strlen(ini),
                                  &diag))
        fail_msg("ini: %s", diag.msg);
    if (rumor_node_opts_check(&o, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    assert_string_equal(o.gossip.ef, "ef-decay:0.7");
    assert_false(o.gossip.compressed);
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
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        struct rumor_node_opts o;
        s_base(&o);
        s_set(&o, "algo", rows[k].algo);
        if (rows[k].name != NULL)
            s_set(&o, rows[k].name, rows[k].value);
        s_set(&o, "ef", "ef");
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
        if (strstr(diag.msg, rows[k].says) == NULL)
            fail_msg("row %zu: '%s' does not say '%s'",
                     k,
                     diag.msg,
                     rows[k].says);
    }
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
