/*
 * The node's files when the system says no (issue 33): a full device
 * (/dev/full, behind a symlink where the node expects its file), a file
 * size limit (RLIMIT_FSIZE, in a child, so a write stops part-way as on a
 * disk that fills up) and no descriptor left (RLIMIT_NOFILE used up, in a
 * child). Every failure names the file and errno; the metrics file never
 * keeps a torn line; a resumed run drops one left by an older build.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"

#include "rumor/node.h"

#include "node/checkpoint_impl.h"
#include "node/runtime_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct t_dir {
    char path[64];
};

static void
t_dir_new(struct t_dir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/rumor-node-io-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static int
t_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
t_dir_free(struct t_dir *d)
{
    nftw(d->path, t_rm, 8, FTW_DEPTH | FTW_PHYS);
}

static struct node_metrics_row
t_row(uint64_t step)
{
    return (struct node_metrics_row){.step = step,
                                     .loss = 1.0 / (double)(step + 1),
                                     .lr = 0.1,
                                     .test_loss = NAN,
                                     .accuracy = NAN,
                                     .optimum_error = NAN,
                                     .bytes_sent = 1000 * step,
                                     .consensus = NAN,
                                     .seconds = 0.01 * (double)step};
}

/* Every line of the file is a whole metrics line (ends with a newline and
 * parses, steps 1, 2, ...); returns how many. */
static size_t
t_whole_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    size_t n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n')
            fail_msg("%s: line %zu is torn: \"%s\"", path, n + 1, line);
        cJSON *o = cJSON_Parse(line);
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (!cJSON_IsNumber(step) || step->valuedouble != (double)(n + 1))
            fail_msg("%s: line %zu is not step %zu", path, n + 1, n + 1);
        cJSON_Delete(o);
        n++;
    }
    fclose(f);
    return n;
}

/* A full device: the write fails saying which file and ENOSPC. */
static void
test_metrics_write__device_full__names_file_and_enospc(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/node-0.jsonl", d.path);
    assert_int_equal(symlink("/dev/full", path), 0);
    node_metrics *m = NULL;
    struct rumor_diag diag = {0};
    if (node_metrics_open_mode(d.path, 0, true, &m, &diag) != RUMOR_OK)
        fail_msg("open: %s", diag.msg);
    struct node_metrics_row row = t_row(1);
    assert_int_equal(node_metrics_write(m, &row, &diag), RUMOR_EIO);
    assert_string_equal(diag.file, path);
    assert_string_equal(diag.msg,
                        "cannot write: No space left on device (ENOSPC)");
    node_metrics_close(&m);
    t_dir_free(&d);
}

/* In a child with a file size limit a little over what fits: the write
 * that crosses it stops part-way; the child reports the error text on
 * fd 3 (a pipe) and the file must hold only whole lines. */
static void
test_metrics_write__stops_part_way__no_torn_line_left(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    const rlim_t limit = 2000;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN); /* the write then fails with EFBIG */
        struct rlimit rl = {limit, limit};
        node_metrics *m = NULL;
        struct rumor_diag diag = {0};
        rumor_err rc = setrlimit(RLIMIT_FSIZE, &rl) == 0
                           ? node_metrics_open(d.path, 0, &m, &diag)
                           : RUMOR_EINVAL;
        for (uint64_t step = 1; rc == RUMOR_OK && step < 1000; step++) {
            struct node_metrics_row row = t_row(step);
            rc = node_metrics_write(m, &row, &diag);
        }
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        ssize_t w = write(fds[1], text, strlen(text));
        _exit(rc == RUMOR_EIO && w > 0 ? 0 : 1);
    }
    close(fds[1]);
    char text[1024] = "";
    ssize_t got = read(fds[0], text, sizeof text - 1);
    text[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child: status %d, \"%s\"", st, text);
    char path[128];
    snprintf(path, sizeof path, "%s/node-0.jsonl", d.path);
    char want[256];
    snprintf(want,
             sizeof want,
             "%s: cannot write: File too large (EFBIG)",
             path);
    assert_string_equal(text, want);
    size_t lines = t_whole_lines(path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    /* cut back to the last whole line, which is within one line of the
     * limit */
    assert_true(lines > 0);
    assert_true((rlim_t)sb.st_size <= limit);
    assert_true((rlim_t)sb.st_size > limit / 2);
    t_dir_free(&d);
}

/* A file left with a torn last line (by a build before whole-line
 * writes): a resumed run's trim drops it, so its first line starts a line
 * of its own. */
static void
test_trim_metrics__torn_last_line__dropped(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    char path[128];
    snprintf(path, sizeof path, "%s/node-0.jsonl", d.path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":0.5}\n"
          "{\"step\":3,\"lo",
          f);
    fclose(f);
    struct rumor_diag diag = {0};
    if (node_ckpt_trim_metrics(d.path, 0, 10, &diag) != RUMOR_OK)
        fail_msg("trim: %s", diag.msg);
    assert_int_equal(t_whole_lines(path), 2);
    t_dir_free(&d);
}

/* The final model into a full device: the error names the file and
 * ENOSPC, and the temporary file is gone. */
static void
test_model_save__device_full__names_file_and_enospc(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    char tmp[128], path[128];
    snprintf(tmp, sizeof tmp, "%s/.node-0.model.tmp", d.path);
    snprintf(path, sizeof path, "%s/node-0.model", d.path);
    assert_int_equal(symlink("/dev/full", tmp), 0);
    int fd = open(tmp, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    float w[6] = {1, 2, 3, 4, 5, 6};
    struct rumor_tensor t = {.data = w, .ndim = 2, .shape = {2, 3}};
    struct rumor_model m = {.tensors = &t, .count = 1};
    struct rumor_diag diag = {0};
    assert_int_equal(node_model_save(fd, tmp, path, &m, &diag), RUMOR_EIO);
    assert_string_equal(diag.file, tmp);
    assert_string_equal(diag.msg,
                        "cannot write: No space left on device (ENOSPC)");
    struct stat sb;
    assert_int_equal(lstat(tmp, &sb), -1);
    assert_int_equal(lstat(path, &sb), -1);
    t_dir_free(&d);
}

/* The average of a local run with one node's model missing: the error
 * names that file and ENOENT (not "not this run's model"). */
static void
test_average__model_file_missing__names_file_and_enoent(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    struct rumor_node_opts o;
    rumor_node_opts_default(&o);
    o.workload.kind = RUMOR_WORKLOAD_LSQ;
    struct rumor_workload_opts wo = o.workload;
    wo.nodes = 2;
    rumor_workload *w = NULL;
    struct rumor_diag diag = {0};
    if (rumor_workload_new(&wo, &w, &diag) != RUMOR_OK)
        fail_msg("workload: %s", diag.msg);
    char tmp[128], path[128];
    snprintf(tmp, sizeof tmp, "%s/.node-0.model.tmp", d.path);
    snprintf(path, sizeof path, "%s/node-0.model", d.path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    if (node_model_save(fd, tmp, path, rumor_workload_model(w), &diag) !=
        RUMOR_OK)
        fail_msg("save: %s", diag.msg);
    rumor_workload_destroy(&w);
    struct node_average avg;
    const bool use[2] = {true, true};
    assert_int_equal(node_average_evaluate(&o, 2, use, d.path, &avg, &diag),
                     RUMOR_ENOTFOUND);
    snprintf(path, sizeof path, "%s/node-1.model", d.path);
    assert_string_equal(diag.file, path);
    assert_string_equal(diag.msg,
                        "cannot read: No such file or directory (ENOENT)");
    t_dir_free(&d);
}

/* No descriptor left (in a child that used them all up): a checkpoint
 * cannot be written, and the error says EMFILE with the file. */
static void
test_checkpoint_write__no_descriptor_left__names_emfile(void **state)
{
    (void)state;
    struct t_dir d;
    t_dir_new(&d);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct rlimit rl = {64, 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        while (open("/dev/null", O_RDONLY) >= 0)
            continue;
        uint8_t payload[16] = {1, 2, 3};
        struct rumor_checkpoint c = {.node = 0, .step = 5, .count = 1};
        c.sections[0] = (struct rumor_checkpoint_section){RUMOR_CHECKPOINT_META,
                                                          payload,
                                                          sizeof payload};
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_checkpoint_write(d.path, &c, 2, &diag);
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        ssize_t w = write(fds[1], text, strlen(text));
        _exit(rc == RUMOR_EIO && w > 0 ? 0 : 1);
    }
    close(fds[1]);
    char text[1024] = "";
    ssize_t got = read(fds[0], text, sizeof text - 1);
    text[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child: status %d, \"%s\"", st, text);
    if (strstr(text, d.path) == NULL ||
        strstr(text, ": Too many open files (EMFILE)") == NULL)
        fail_msg("got \"%s\"", text);
    t_dir_free(&d);
}

int
main(int argc, char **argv)
{
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_metrics_write__device_full__names_file_and_enospc),
        cmocka_unit_test(test_metrics_write__stops_part_way__no_torn_line_left),
        cmocka_unit_test(test_trim_metrics__torn_last_line__dropped),
        cmocka_unit_test(test_model_save__device_full__names_file_and_enospc),
        cmocka_unit_test(
            test_average__model_file_missing__names_file_and_enoent),
        cmocka_unit_test(
            test_checkpoint_write__no_descriptor_left__names_emfile),
    };
    return cmocka_run_group_tests_name("node_io", tests, NULL, NULL);
}
