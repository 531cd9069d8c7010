/*
 * Process helpers shared by the integration tests that run `rumor`
 * processes (test_node_checkpoint.c, test_node_cluster.c,
 * test_node_faults.c, test_elastic.c, test_adapt_rank_net.c): start one with
 * its output in a file, wait for it with a limit, remove a temporary tree,
 * show a log, read a metrics field, and split a local topology across two
 * network namespaces joined by one veth pair (the partition tests). Static
 * inline, so a test that does not use one does not warn. Waits poll with a
 * deadline; nothing here sleeps to synchronise.
 */
#ifndef RUMOR_TEST_NODE_COMMON_H
#define RUMOR_TEST_NODE_COMMON_H

#include "tests/cmocka_compat.h"

#include "rumor/core.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TNC_ARGS_MAX 64

/* RUMOR_BIN, the rumor binary under test (the test fails without it). */
static inline const char *
tnc_bin(void)
{
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL)
        fail_msg("RUMOR_BIN is not set");
    return bin;
}

static inline void
tnc_pause_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Runs the program at path with argv (argv[0] included, NULL-terminated),
 * stdout and stderr appended to the file out; env, when not NULL, is one
 * "NAME=VALUE" set in the child. */
static inline pid_t
tnc_spawn_path(const char *path,
               const char *const *argv,
               const char *out,
               const char *env)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        if (env != NULL)
            putenv((char *)env);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    assert_true(pid > 0);
    return pid;
}

/* Runs RUMOR_BIN with argv (argv[0] included, NULL-terminated), stdout
 * and stderr appended to the file out. */
static inline pid_t
tnc_spawn(const char *const *argv, const char *out)
{
    return tnc_spawn_path(tnc_bin(), argv, out, NULL);
}

/* `rumor args...` (args NULL-terminated, "rumor" not included) in the
 * network namespace ns (through `ip netns exec`; NULL: this one), with
 * env as tnc_spawn_path's, output appended to out. */
static inline pid_t
tnc_start_ns(const char *ns,
             const char *const *args,
             const char *out,
             const char *env)
{
    const char *argv[TNC_ARGS_MAX] = {"ip", "netns", "exec", ns};
    size_t n = ns != NULL ? 4 : 0;
    argv[n++] = ns != NULL ? tnc_bin() : "rumor";
    for (size_t k = 0; args[k] != NULL && n < TNC_ARGS_MAX - 1; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    return tnc_spawn_path(ns != NULL ? "/usr/sbin/ip" : tnc_bin(),
                          argv,
                          out,
                          env);
}

/* `rumor args...` (args NULL-terminated), output appended to out. */
static inline pid_t
tnc_start(const char *const *args, const char *out)
{
    const char *argv[TNC_ARGS_MAX] = {"rumor"};
    size_t n = 1;
    for (; args[n - 1] != NULL && n < TNC_ARGS_MAX - 1; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    return tnc_spawn(argv, out);
}

/* Exit status (128 + signal when killed); past limit_ms the process is
 * killed and the test fails. */
static inline int
tnc_wait(pid_t pid, uint64_t limit_ms)
{
    uint64_t deadline = rumor_clock_ns() + limit_ms * 1000000ull;
    for (;;) {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (rumor_clock_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("process %d still running after %llu ms",
                     (int)pid,
                     (unsigned long long)limit_ms);
        }
        tnc_pause_us(500);
    }
}

/* nftw callback: removes every entry of a tree (FTW_DEPTH | FTW_PHYS). */
static inline int
tnc_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* A new directory from tmpl ("/tmp/rumor-NAME-XXXXXX", rewritten in
 * place) holding a ring of 4 local nodes (`rumor topo gen ring 4
 * --local`): its topology at topo, the keys in dir/keys. */
static inline void
tnc_ring4_local(char *tmpl, char *topo, size_t topo_cap)
{
    assert_non_null(mkdtemp(tmpl));
    snprintf(topo, topo_cap, "%s/ring.topo", tmpl);
    char out[1200];
    snprintf(out, sizeof out, "%s/gen.out", tmpl);
    const char *args[] =
        {"topo", "gen", "ring", "4", "--local", "--out", topo, NULL};
    assert_int_equal(tnc_wait(tnc_start(args, out), 30000), 0);
}

/* Removes a test's directory, or with RUMOR_TEST_KEEP set keeps it and
 * says where; dir becomes "". */
static inline void
tnc_dir_done(char *dir)
{
    if (dir[0] != '\0' && getenv("RUMOR_TEST_KEEP") == NULL)
        nftw(dir, tnc_rm, 16, FTW_DEPTH | FTW_PHYS);
    else if (dir[0] != '\0')
        printf("kept %s\n", dir);
    dir[0] = '\0';
}

/* Copies a log to stderr, indented, for a failure's post-mortem. */
static inline void
tnc_show(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        fprintf(stderr, "  | %s", line);
    if (f != NULL)
        fclose(f);
}

/* Whether a line of the file at path contains needle. */
static inline bool
tnc_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* A number field of a metrics row, NAN when absent. */
static inline double
tnc_num(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Runs a shell command of a test's own namespace set-up (fmt takes two
 * strings). */
static inline int
tnc_sh(const char *fmt, const char *a, const char *b)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd, fmt, a, b);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1;
    return system(cmd);
}

/* Two network namespaces a and b joined by one veth pair (interfaces
 * named a and b): 10.77.0.1 in a, 10.77.0.2 in b, loopback and the pair
 * up. 1: `ip netns add` was refused (no root or CAP_SYS_ADMIN: the caller
 * skips); 0: done; else a later step failed. The caller deletes both
 * namespaces (which deletes the pair). */
static inline int
tnc_netns_pair(const char *a, const char *b)
{
    if (tnc_sh("ip netns add %s 2>/dev/null && ip netns add %s", a, b) != 0)
        return 1;
    int rc = tnc_sh("ip link add %s type veth peer name %s", a, b);
    rc |= tnc_sh("ip link set %s netns %s", a, a);
    rc |= tnc_sh("ip link set %s netns %s", b, b);
    rc |= tnc_sh("ip -n %s addr add 10.77.0.1/24 dev %s", a, a);
    rc |= tnc_sh("ip -n %s addr add 10.77.0.2/24 dev %s", b, b);
    rc |= tnc_sh("ip -n %s link set lo up && ip -n %s link set lo up", a, b);
    rc |= tnc_sh("ip -n %s link set %s up", a, a);
    rc |= tnc_sh("ip -n %s link set %s up", b, b);
    return rc == 0 ? 0 : -1;
}

/* Rewrites the endpoints of a `topo gen --local` file: nodes below
 * first_b listen on 10.77.0.1 (namespace a of tnc_netns_pair), the others
 * on 10.77.0.2 (namespace b), each on its own port as before. */
static inline void
tnc_split_topology(const char *topo, int first_b)
{
    FILE *f = fopen(topo, "r");
    assert_non_null(f);
    char out[1 << 14] = "", line[512];
    size_t used = 0;
    while (fgets(line, sizeof line, f) != NULL && used < sizeof out) {
        int id = -1;
        char *at = strstr(line, "tcp://127.0.0.1:");
        if (strncmp(line, "node ", 5) == 0)
            id = (int)strtol(line + 5, NULL, 10);
        int n;
        if (at != NULL && id >= 0)
            n = snprintf(out + used,
                         sizeof out - used,
                         "%.*stcp://10.77.0.%d:%s",
                         (int)(at - line),
                         line,
                         id < first_b ? 1 : 2,
                         at + strlen("tcp://127.0.0.1:"));
        else
            n = snprintf(out + used, sizeof out - used, "%s", line);
        assert_true(n >= 0 && (size_t)n < sizeof out - used);
        used += (size_t)n;
    }
    fclose(f);
    f = fopen(topo, "w");
    assert_non_null(f);
    fputs(out, f);
    fclose(f);
}

#endif
