/*
 * The `rumor` binary as a user runs it: `topo gen`, `topo check` on valid
 * and broken files (exit codes, the spectral gap line, FILE:LINE:COL
 * diagnostics), `topo dot`, `--help`, `help topo`, unknown commands.
 * The binary comes from RUMOR_BIN (set by make check).
 */
#include "tests/cmocka_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OUTPUT_BYTES 65536

struct run {
    int status; /* exit status, or -1 when the command did not exit */
    char out[OUTPUT_BYTES]; /* stdout and stderr together */
};

static char s_dir[] = "/tmp/rumor-cli-XXXXXX";

static void
s_run(struct run *r, const char *fmt, ...)
{
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL)
        fail_msg("RUMOR_BIN is not set (run through make check)");
    /* timeout(1) bounds a hang so the suite fails instead of stalling. */
    snprintf(cmd, sizeof cmd, "timeout 60 %s %s 2>&1", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(r->out, 1, sizeof r->out - 1, p);
    r->out[len] = '\0';
    int status = pclose(p);
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void
s_write_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int
s_setup(void **state)
{
    (void)state;
    return mkdtemp(s_dir) == NULL ? -1 : 0;
}

static int
s_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void
test_topo_check__generated_torus__prints_spectral_gap(void **state)
{
    (void)state;
    static struct run r;
    s_run(&r, "topo gen torus 4 4 --out %s/torus.topo", s_dir);
    assert_int_equal(r.status, 0);
    s_run(&r, "topo check %s/torus.topo", s_dir);
    if (r.status != 0)
        fail_msg("exit %d: %s", r.status, r.out);
    assert_non_null(strstr(r.out, "nodes: 16\n"));
    assert_non_null(strstr(r.out, "edges: 32\n"));
    assert_non_null(strstr(r.out, "degree: 4..4\n"));
    assert_non_null(strstr(r.out, "doubly stochastic"));
    assert_non_null(strstr(r.out, "spectral gap: 0.400000\n"));
}

static void
test_topo_check__broken_file__line_accurate_error_exit_1(void **state)
{
    (void)state;
    static struct run r;
    s_write_file("broken.topo", "# three nodes\nnodes 3\nedge 0 1\nedge 1 5\n");
    s_run(&r, "topo check %s/broken.topo", s_dir);
    assert_int_equal(r.status, 1);
    char want[300];
    snprintf(want,
             sizeof want,
             "%s/broken.topo:4:8: node id 5 out of range (3 nodes: 0..2)\n",
             s_dir);
    assert_string_equal(r.out, want);
}

static void
test_topo_check__missing_file__names_it(void **state)
{
    (void)state;
    static struct run r;
    s_run(&r, "topo check %s/absent.topo", s_dir);
    assert_int_equal(r.status, 1);
    assert_non_null(
        strstr(r.out,
               "absent.topo: cannot read: No such file or directory (ENOENT)"));
}

static void
test_topo_gen__stdout_and_seed__reproducible(void **state)
{
    (void)state;
    static struct run a, b, c;
    s_run(&a, "topo gen random-regular 12 3 --seed 9");
    s_run(&b, "topo gen random-regular 12 3 --seed 9");
    s_run(&c, "topo gen random-regular 12 3 --seed 10");
    assert_int_equal(a.status, 0);
    assert_string_equal(a.out, b.out);
    assert_string_not_equal(a.out, c.out);
    assert_non_null(strstr(a.out, "nodes 12\n"));
}

static void
test_topo_gen__bad_arguments__usage_exit_2(void **state)
{
    (void)state;
    static struct run r;
    s_run(&r, "topo gen hypercube 6");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "N must be a power of 2"));
    s_run(&r, "topo gen ring 8 --colour red");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "unknown option --colour"));
}

static void
test_topo_dot__ring__graphviz_text(void **state)
{
    (void)state;
    static struct run r;
    s_run(&r, "topo gen ring 4 --out %s/ring.topo", s_dir);
    assert_int_equal(r.status, 0);
    s_run(&r, "topo dot %s/ring.topo", s_dir);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "graph rumor {"));
    assert_non_null(strstr(r.out, "2 -- 3 [label=\"0.333\""));
}

static void
test_help__top_level_and_subcommand__exit_0(void **state)
{
    (void)state;
    static struct run r;
    s_run(&r, "--help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  topo "));
    s_run(&r, "help topo");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rumor topo check FILE"));
    s_run(&r, "frobnicate");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "'frobnicate' is not a rumor command"));
    s_run(&r, "version");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "cuda backend:"));
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topo_check__generated_torus__prints_spectral_gap),
        cmocka_unit_test(
            test_topo_check__broken_file__line_accurate_error_exit_1),
        cmocka_unit_test(test_topo_check__missing_file__names_it),
        cmocka_unit_test(test_topo_gen__stdout_and_seed__reproducible),
        cmocka_unit_test(test_topo_gen__bad_arguments__usage_exit_2),
        cmocka_unit_test(test_topo_dot__ring__graphviz_text),
        cmocka_unit_test(test_help__top_level_and_subcommand__exit_0),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("cli_topo", tests, s_setup, s_teardown);
}
