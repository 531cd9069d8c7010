/*
 * The node's options two ways (node/config.c): a C caller who fills struct
 * rumor_node_opts itself gets the checks of the values only, while a
 * rumor_node_config, set by name, also knows what was given and refuses an
 * option that does not apply (docs/node.md, "The C API").
 */
#include "tests/cmocka_compat.h"

#include "rumor/node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void
s_set(rumor_node_config *c, const char *name, const char *value)
{
    struct rumor_diag diag = {0};
    if (rumor_node_config_set(c, name, value, &diag) != RUMOR_OK)
        fail_msg("--%s %s: %s", name, value, diag.msg);
}

static void
test_opts_filled_directly__value_check__refuses_only_contradictions(void **s)
{
    (void)s;
    struct rumor_node_opts o;
    rumor_node_opts_default(&o);
    snprintf(o.topology, sizeof o.topology, "ring.topo");
    o.insecure = true;
    /* the default algorithm is dpsgd: a rank written into the struct is
     * unused, not refused (nothing was given by name), and id 0 is an id */
    o.gossip.rank = 4;
    struct rumor_diag diag = {0};
    if (rumor_node_opts_check(&o, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    o.exchange = RUMOR_NODE_EXCHANGE_GRADIENT;
    assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--exchange gradient needs"));
    o.exchange = RUMOR_NODE_EXCHANGE_AUTO;
    snprintf(o.key, sizeof o.key, "keys/node-0");
    assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--key and --insecure contradict"));
    o.insecure = false;
    o.topology[0] = '\0';
    assert_int_equal(rumor_node_opts_check(&o, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--topology is required"));
}

static void
test_config__given_but_inapplicable__refused(void **s)
{
    (void)s;
    rumor_node_config *c = NULL;
    assert_int_equal(rumor_node_config_new(&c), RUMOR_OK);
    s_set(c, "topology", "ring.topo");
    s_set(c, "insecure", "");
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "--id is required"));
    s_set(c, "id", "0");
    /* the same rank as the struct's above, now written through the
     * pointer: still not given */
    rumor_node_config_opts(c)->gossip.rank = 4;
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    s_set(c, "rank", "4");
    assert_int_equal(rumor_node_config_check(c, &diag), RUMOR_EINVAL);
    assert_string_equal(diag.msg, "--rank does not apply to --algo dpsgd");
    /* the value check of the same options does not know it was given */
    if (rumor_node_opts_check(rumor_node_config_opts(c), &diag) != RUMOR_OK)
        fail_msg("value check: %s", diag.msg);
    s_set(c, "algo", "powergossip");
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    rumor_node_config_destroy(&c);
    rumor_node_config_destroy(&c);
    assert_null(c);
}

/* A refused value or file gives nothing: a later check does not find the
 * option given. */
static void
test_config__refused_set_or_file__marks_nothing_given(void **s)
{
    (void)s;
    rumor_node_config *c = NULL;
    assert_int_equal(rumor_node_config_new(&c), RUMOR_OK);
    s_set(c, "topology", "ring.topo");
    s_set(c, "id", "1");
    s_set(c, "insecure", "");
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_set(c, "rank", "0", &diag),
                     RUMOR_EINVAL);
    static const char ini[] = "rank = 2\nlr = fast\n";
    assert_int_equal(rumor_node_config_parse_ini(c,
                                                 "r.ini",
                                                 (const uint8_t *)ini,
                                                 strlen(ini),
                                                 &diag),
                     RUMOR_EINVAL);
    assert_int_equal(diag.line, 2);
    if (rumor_node_config_check(c, &diag) != RUMOR_OK)
        fail_msg("check: %s", diag.msg);
    rumor_node_config_destroy(&c);
}

/* A --config file with no setting (empty: the read buffer is then NULL,
 * which memchr must not see; or only comments and blank lines) sets
 * nothing and is no error; one with bytes that are not text says so. */
static void
test_config_file__empty_or_only_comments__sets_nothing(void **s)
{
    (void)s;
    static const char *const texts[] = {"",
                                        "# nothing\n\n; nor here\n",
                                        "\n\n\n",
                                        "   \n\t\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char path[] = "/tmp/rumor-config-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        size_t len = strlen(texts[i]);
        assert_int_equal(write(fd, texts[i], len), (ssize_t)len);
        close(fd);
        rumor_node_config *c = NULL;
        assert_int_equal(rumor_node_config_new(&c), RUMOR_OK);
        struct rumor_node_opts before = *rumor_node_config_opts(c);
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_node_config_load(c, path, &diag);
        unlink(path);
        if (rc != RUMOR_OK)
            fail_msg("text %zu: %s", i, diag.msg);
        assert_memory_equal(&before, rumor_node_config_opts(c), sizeof before);
        s_set(c, "topology", "ring.topo");
        s_set(c, "id", "0");
        s_set(c, "insecure", "");
        if (rumor_node_config_check(c, &diag) != RUMOR_OK)
            fail_msg("text %zu: check: %s", i, diag.msg);
        rumor_node_config_destroy(&c);
    }
    rumor_node_config *c = NULL;
    assert_int_equal(rumor_node_config_new(&c), RUMOR_OK);
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_node_config_parse_ini(c, "none", NULL, 0, &diag),
                     RUMOR_OK);
    static const uint8_t nul[] = {'r', 'a', 'n', 'k', '\0', '\n'};
    assert_int_equal(
        rumor_node_config_parse_ini(c, "bin", nul, sizeof nul, &diag),
        RUMOR_EINVAL);
    assert_string_equal(diag.msg, "not a text file (a NUL byte)");
    rumor_node_config_destroy(&c);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_opts_filled_directly__value_check__refuses_only_contradictions),
        cmocka_unit_test(test_config__given_but_inapplicable__refused),
        cmocka_unit_test(test_config__refused_set_or_file__marks_nothing_given),
        cmocka_unit_test(
            test_config_file__empty_or_only_comments__sets_nothing),
    };
    return cmocka_run_group_tests_name("node_config", tests, NULL, NULL);
}
