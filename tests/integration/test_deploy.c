/*
 * Deployment end to end, with the real `rumor` binary (RUMOR_BIN):
 *   - `rumor compose` for a ring, a torus and a hand-written topology
 *     (explicit weights, endpoints to replace): the file passes
 *     `docker-compose config` (Debian's docker-compose; no engine needed;
 *     skipped visibly when it is missing) and the normalised result keeps
 *     the invariants: one service per node, its --id, its own key as a
 *     docker secret and no secret anywhere in the file or an environment,
 *     no image built from the tree, the generated topology with service
 *     endpoints, the public keys of the secret files and the source's
 *     weights; keys are reused by a second run; shaping and GPU options
 *     reach the services; odd characters survive YAML quoting; bad options
 *     are refused with nothing printed;
 *   - docker/check-dockerfile.sh passes both Dockerfiles and reports every
 *     rule on files that break them all;
 *   - scripts/rumor-slurm.sh's parsing of the allocation, with faked
 *     SLURM_* variables and a local host list (plain comma form, and a
 *     FAKE scontrol for a two-host "2(x2)"), starts 4 tasks that train and
 *     exit 0; a task that never comes ends the others by their deadline; a
 *     task placed on another host is refused;
 *   - with the private one-host cluster of scripts/with-slurm.sh
 *     (RUMOR_SLURM_DIR; `make cluster-test`, as root; skipped, saying so,
 *     without it), docker/README.md's job script through `sbatch --wait`:
 *     its 8 tasks train to the accuracy of a local run and the job
 *     completes with exit 0:0 (srun's exit is its tasks' highest);
 *   - with the private sshd of scripts/with-sshd.sh (RUMOR_SSHD_*; the
 *     same), `rumor launch --hosts` logs in by key as its test user: a
 *     4-node ring trains, and Ctrl-C stops every process, remote ones
 *     included; too few slots are refused (no ssh needed);
 *   - tests/integration/docker_crash_check.sh, the crash checks of `make
 *     deploy-test`, on hand-made cluster directories: a neighbour that
 *     marked the crashed node down and re-admitted it and one that never
 *     had to both pass; no gossip after the restart, a node left down, a
 *     missing handshake and a restarted survivor are each reported;
 *   (real containers: `make deploy-test`, tests/integration/docker_e2e.sh,
 *   which needs a Docker engine and minutes.)
 * Every process started here is waited for with a deadline; waits poll.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/cmocka_compat.h"

#include "rumor/net.h"
#include "rumor/topology.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LIMIT_MS 60000 /* generous: only a broken build waits this long */
#define NODES    4
#define STEPS    "20"
#define ARGS_MAX 64

struct s_tmp {
    char dir[256];
    char out[300]; /* stdout and stderr of what ran */
};

/* --- processes ---------------------------------------------------------- */

/* RUMOR_BIN as an absolute path: commands here run in other directories. */
static const char *
s_bin(void)
{
    static char path[PATH_MAX];
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL || realpath(bin, path) == NULL)
        fail_msg("RUMOR_BIN is not set to the rumor binary");
    return path;
}

static void
s_pause_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t
s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Starts argv (a program name without '/' is looked up on PATH) in cwd
 * (NULL: here), env entries "K=V" added, stdout to out (appended) or to
 * stdout_path when given. */
static pid_t
s_spawn(const char *const *argv,
        const char *const *env,
        const char *cwd,
        const char *out,
        const char *stdout_path)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int so = stdout_path != NULL
                     ? open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                     : fd;
        if (fd < 0 || so < 0 || (cwd != NULL && chdir(cwd) != 0))
            _exit(126);
        dup2(so, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        for (size_t k = 0; env != NULL && env[k] != NULL; k++)
            putenv((char *)env[k]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    assert_true(pid > 0);
    return pid;
}

/* Waits for pid until limit_ms; past that kills it and returns -1. */
static int
s_wait_or_kill(pid_t pid, uint64_t limit_ms)
{
    uint64_t deadline = s_now_ms() + limit_ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (s_now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr,
                    "process %d still running after %llu ms: killed\n",
                    (int)pid,
                    (unsigned long long)limit_ms);
            return -1;
        }
        s_pause_ms(2);
    }
}

static int
s_wait(pid_t pid, uint64_t limit_ms)
{
    int status = s_wait_or_kill(pid, limit_ms);
    if (status < 0)
        fail_msg("process %d ran past its limit", (int)pid);
    return status;
}

static int
s_run(const char *const *argv, const char *cwd, const struct s_tmp *t)
{
    return s_wait(s_spawn(argv, NULL, cwd, t->out, NULL), LIMIT_MS);
}

/* `rumor ARGS...` in dir, stdout to dir/docker-compose.yml. */
static int
s_rumor_compose(const struct s_tmp *t, const char *const *args)
{
    const char *argv[ARGS_MAX] = {s_bin(), "compose"};
    size_t n = 2;
    for (size_t k = 0; args[k] != NULL && n < ARGS_MAX - 1; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    char yml[PATH_MAX + 32];
    snprintf(yml, sizeof yml, "%s/docker-compose.yml", t->dir);
    return s_wait(s_spawn(argv, NULL, t->dir, t->out, yml), LIMIT_MS);
}

/* --- files -------------------------------------------------------------- */

static int
s_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void
s_tmp_new(struct s_tmp *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/rumor-deploy-test-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->out, sizeof t->out, "%s/out.txt", t->dir);
}

static void
s_tmp_free(struct s_tmp *t)
{
    nftw(t->dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file as a string (caller frees), or NULL. */
static char *
s_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char buf[4096];
    size_t got;
    while (mem != NULL && (got = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, got, mem);
    fclose(f);
    if (mem != NULL)
        fclose(mem);
    return text;
}

static void
s_show(const struct s_tmp *t)
{
    char *text = s_read(t->out);
    fprintf(stderr, "---- output ----\n%s----\n", text ? text : "(none)");
    free(text);
}

static void
s_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Copies a test script to dir/bin/NAME, executable. */
static void
s_install_fake(const struct s_tmp *t, const char *src, const char *name)
{
    char bin[PATH_MAX + 8], dst[PATH_MAX + 64];
    snprintf(bin, sizeof bin, "%s/bin", t->dir);
    mkdir(bin, 0755);
    snprintf(dst, sizeof dst, "%s/%s", bin, name);
    char *text = s_read(src);
    assert_non_null(text);
    s_write(dst, text);
    free(text);
    assert_int_equal(chmod(dst, 0755), 0);
}

/* The number `key` of the last line of a metrics file, -1 when none. */
static double
s_last_field(const char *path, const char *key)
{
    char *text = s_read(path);
    if (text == NULL)
        return -1;
    size_t len = strlen(text);
    while (len > 0 && text[len - 1] == '\n')
        text[--len] = '\0';
    char *last = strrchr(text, '\n');
    cJSON *j = cJSON_Parse(last != NULL ? last + 1 : text);
    free(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    double out = cJSON_IsNumber(v) ? v->valuedouble : -1;
    cJSON_Delete(j);
    return out;
}

static long
s_last_step(const char *path)
{
    return (long)s_last_field(path, "step");
}

/* n consecutive TCP ports free on 127.0.0.1 (bound together, then let go). */
static unsigned
s_free_ports(unsigned n)
{
    for (unsigned attempt = 0; attempt < 200; attempt++) {
        unsigned base =
            20000 + (unsigned)((getpid() * 7919u + attempt * 104729u) % 30000u);
        int fds[16];
        unsigned ok = 0;
        for (; ok < n && ok < 16; ok++) {
            struct sockaddr_in a = {0};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((uint16_t)(base + ok));
            fds[ok] = socket(AF_INET, SOCK_STREAM, 0);
            if (fds[ok] < 0 ||
                bind(fds[ok], (struct sockaddr *)&a, sizeof a) != 0) {
                if (fds[ok] >= 0)
                    close(fds[ok]);
                break;
            }
        }
        for (unsigned k = 0; k < ok; k++)
            close(fds[k]);
        if (ok == n)
            return base;
    }
    fail_msg("no %u consecutive free ports", n);
    return 0;
}

/* Processes whose command line contains needle. */
static int
s_procs_with(const char *needle)
{
    DIR *d = opendir("/proc");
    int count = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        for (ssize_t k = 0; k < got; k++)
            if (buf[k] == '\0')
                buf[k] = ' ';
        buf[got > 0 ? got : 0] = '\0';
        count += strstr(buf, needle) != NULL;
    }
    if (d != NULL)
        closedir(d);
    return count;
}

/* --- compose: validation and invariants ---------------------------------- */

static bool
s_have_compose(void)
{
    if (system("command -v docker-compose >/dev/null 2>&1 && "
               "/usr/bin/python3 -c 'import yaml' >/dev/null 2>&1") == 0)
        return true;
    printf("skipped: docker-compose (Debian package docker-compose, with "
           "python3-yaml) is not installed: compose files not validated\n");
    return false;
}

/* `docker-compose config` of dir/docker-compose.yml, as JSON. */
static cJSON *
s_config(const struct s_tmp *t)
{
    const char *argv[] = {
        "sh",
        "-c",
        "docker-compose -f docker-compose.yml config >config.yml && "
        "/usr/bin/python3 -c 'import json, sys, yaml; "
        "json.dump(yaml.safe_load(sys.stdin), sys.stdout)' "
        "<config.yml >config.json",
        NULL};
    int status = s_run(argv, t->dir, t);
    if (status != 0)
        s_show(t);
    assert_int_equal(status, 0);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", t->dir);
    char *text = s_read(path);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    assert_non_null(cfg);
    return cfg;
}

static const cJSON *
s_get(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL)
        fail_msg("no '%s' in %s", key, o->string ? o->string : "object");
    return v;
}

/* The value after flag in a service's command, or NULL. */
static const char *
s_arg(const cJSON *svc, const char *flag)
{
    const cJSON *cmd = s_get(svc, "command");
    const cJSON *prev = NULL, *a;
    cJSON_ArrayForEach(a, cmd)
    {
        if (prev != NULL && strcmp(prev->valuestring, flag) == 0)
            return a->valuestring;
        prev = a;
    }
    return NULL;
}

static bool
s_has_arg(const cJSON *svc, const char *word)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, s_get(svc, "command"))
    {
        if (strcmp(a->valuestring, word) == 0)
            return true;
    }
    return false;
}

/* The bind mount of a service at target, or fail. */
static const cJSON *
s_volume(const cJSON *svc, const char *target)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, s_get(svc, "volumes"))
    {
        if (strcmp(s_get(v, "target")->valuestring, target) == 0)
            return v;
    }
    fail_msg("%s mounts nothing at %s", svc->string, target);
    return NULL;
}

static void
s_path(char *out, const struct s_tmp *t, const char *rel)
{
    char joined[2 * PATH_MAX];
    snprintf(joined, sizeof joined, "%s/%s", t->dir, rel);
    if (realpath(joined, out) == NULL)
        fail_msg("%s does not exist", joined);
}

/* A service: its id, its secret, its mounts, nothing secret inline. */
static void
s_check_service(const struct s_tmp *t,
                const cJSON *svc,
                size_t i,
                const char *restart)
{
    char want[64], path[PATH_MAX];
    assert_null(cJSON_GetObjectItemCaseSensitive(svc, "build"));
    assert_null(cJSON_GetObjectItemCaseSensitive(svc, "environment"));
    assert_null(cJSON_GetObjectItemCaseSensitive(svc, "cap_add"));
    assert_string_equal(s_get(svc, "restart")->valuestring, restart);
    const char *user = s_get(svc, "user")->valuestring;
    assert_true(strncmp(user, "0:", 2) != 0 && strncmp(user, "root", 4) != 0);
    snprintf(want, sizeof want, "%zu", i);
    assert_string_equal(s_arg(svc, "--id"), want);
    snprintf(want, sizeof want, "/run/secrets/node-%zu", i);
    assert_string_equal(s_arg(svc, "--key"), want);
    assert_string_equal(s_arg(svc, "--topology"), "/etc/rumor/topology");
    assert_string_equal(s_arg(svc, "--checkpoint-dir"),
                        "/var/lib/rumor/checkpoints");
    const cJSON *entry = s_get(svc, "entrypoint");
    assert_int_equal(cJSON_GetArraySize(entry), 4);
    assert_non_null(
        strstr(cJSON_GetArrayItem(entry, 2)->valuestring, "\"$$@\" --resume"));
    const cJSON *secrets = s_get(svc, "secrets");
    assert_int_equal(cJSON_GetArraySize(secrets), 1);
    snprintf(want, sizeof want, "node-%zu-key", i);
    assert_string_equal(s_get(secrets->child, "source")->valuestring, want);
    snprintf(want, sizeof want, "node-%zu.key", i);
    assert_string_equal(s_get(secrets->child, "target")->valuestring, want);
    const cJSON *topo = s_volume(svc, "/etc/rumor/topology");
    s_path(path, t, "compose.topo");
    assert_string_equal(s_get(topo, "source")->valuestring, path);
    assert_true(cJSON_IsTrue(s_get(topo, "read_only")));
    snprintf(want, sizeof want, "rumor-state/node-%zu", i);
    s_path(path, t, want);
    assert_string_equal(
        s_get(s_volume(svc, "/var/lib/rumor/checkpoints"), "source")
            ->valuestring,
        path);
}

/* The generated topology: the source's graph and weights, service
 * endpoints, and the public keys of the secret files. */
static void
s_check_topology(const struct s_tmp *t, const char *src, size_t n)
{
    char path[PATH_MAX + 64];
    rumor_topology *s = NULL, *g = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_load_file(src, &s, &diag), RUMOR_OK);
    snprintf(path, sizeof path, "%s/compose.topo", t->dir);
    assert_int_equal(rumor_topology_load_file(path, &g, &diag), RUMOR_OK);
    assert_int_equal(rumor_topology_nodes(s), n);
    assert_int_equal(rumor_topology_nodes(g), n);
    assert_int_equal(rumor_topology_phases(g), rumor_topology_phases(s));
    for (size_t p = 0; p < rumor_topology_phases(s); p++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                assert_true(fabs(rumor_topology_weight(s, p, i, j) -
                                 rumor_topology_weight(g, p, i, j)) < 1e-12);
    for (size_t i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof want, "tcp://node-%zu:7000", i);
        assert_string_equal(rumor_topology_endpoint(g, i), want);
        snprintf(path, sizeof path, "%s/keys/node-%zu", t->dir, i);
        rumor_net_keypair *kp = NULL;
        assert_int_equal(rumor_net_keypair_load(path, &kp), RUMOR_OK);
        assert_string_equal(rumor_topology_key(g, i),
                            rumor_net_keypair_public(kp));
        rumor_net_keypair_destroy(&kp);
    }
    rumor_topology_destroy(&s);
    rumor_topology_destroy(&g);
}

/* No secret key text in the compose file or its normalised form. */
static void
s_check_no_secret(const struct s_tmp *t, const cJSON *cfg, size_t n)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/docker-compose.yml", t->dir);
    char *yml = s_read(path);
    char *json = cJSON_PrintUnformatted(cfg);
    assert_non_null(yml);
    assert_non_null(json);
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/keys/node-%zu.key", t->dir, i);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 077, 0);
        char *secret = s_read(path);
        assert_non_null(secret);
        secret[strcspn(secret, "\n")] = '\0';
        assert_int_equal(strlen(secret), RUMOR_NET_ID_TEXT_BYTES);
        assert_null(strstr(yml, secret));
        assert_null(strstr(json, secret));
        free(secret);
    }
    free(json);
    free(yml);
}

/* Everything a compose file of n nodes from src must hold. */
static void
s_check_compose(const struct s_tmp *t, const char *src, size_t n)
{
    cJSON *cfg = s_config(t);
    const cJSON *services = s_get(cfg, "services");
    assert_int_equal(cJSON_GetArraySize(services), n);
    const cJSON *secrets = s_get(cfg, "secrets");
    assert_int_equal(cJSON_GetArraySize(secrets), n);
    for (size_t i = 0; i < n; i++) {
        char name[64], path[PATH_MAX];
        snprintf(name, sizeof name, "node-%zu", i);
        /* a finished node exits 0 and stays down; a crashed one returns */
        s_check_service(t, s_get(services, name), i, "on-failure");
        snprintf(name, sizeof name, "node-%zu-key", i);
        snprintf(path, sizeof path, "keys/node-%zu.key", i);
        char abs[PATH_MAX];
        s_path(abs, t, path);
        assert_string_equal(s_get(s_get(secrets, name), "file")->valuestring,
                            abs);
    }
    s_check_topology(t, src, n);
    s_check_no_secret(t, cfg, n);
    cJSON_Delete(cfg);
}

/* `rumor topo gen KIND ARGS --out dir/NAME`. */
static void
s_gen(const struct s_tmp *t, const char *name, const char *const *kind)
{
    const char *argv[16] = {s_bin(), "topo", "gen"};
    size_t n = 3;
    for (size_t k = 0; kind[k] != NULL; k++)
        argv[n++] = kind[k];
    argv[n++] = "--out";
    argv[n++] = name;
    argv[n] = NULL;
    assert_int_equal(s_run(argv, t->dir, t), 0);
}

/* --- tests: compose ------------------------------------------------------- */

/* A generated topology through compose, then every invariant. */
static void
s_compose_generated(const char *const *kind, size_t n)
{
    if (!s_have_compose())
        skip();
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "gen.topo", kind);
    const char *args[] = {"--topology", "gen.topo", "--steps", STEPS, NULL};
    int status = s_rumor_compose(&t, args);
    if (status != 0)
        s_show(&t);
    assert_int_equal(status, 0);
    char src[PATH_MAX + 16];
    snprintf(src, sizeof src, "%s/gen.topo", t.dir);
    s_check_compose(&t, src, n);
    s_tmp_free(&t);
}

static void
test_compose__ring__valid_config_and_invariants(void **state)
{
    (void)state;
    s_compose_generated((const char *[]){"ring", "4", NULL}, 4);
}

static void
test_compose__torus__valid_config_and_invariants(void **state)
{
    (void)state;
    s_compose_generated((const char *[]){"torus", "3", "3", NULL}, 9);
}

static void
test_compose__hand_written_weights__kept_with_service_endpoints(void **state)
{
    (void)state;
    if (!s_have_compose())
        skip();
    struct s_tmp t;
    s_tmp_new(&t);
    char src[PATH_MAX];
    assert_non_null(realpath("tests/data/deploy/hand.topo", src));
    const char *args[] = {"--topology", src, NULL};
    assert_int_equal(s_rumor_compose(&t, args), 0);
    s_check_compose(&t, src, 5);
    s_tmp_free(&t);
}

static void
test_compose__second_run__same_keys(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    const char *args[] = {"--topology", "ring.topo", NULL};
    assert_int_equal(s_rumor_compose(&t, args), 0);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/compose.topo", t.dir);
    char *first = s_read(path);
    assert_int_equal(s_rumor_compose(&t, args), 0);
    char *second = s_read(path);
    assert_non_null(first);
    assert_non_null(second);
    assert_string_equal(first, second);
    free(first);
    free(second);
    s_tmp_free(&t);
}

static void
test_compose__listed_key_without_secret__refused(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    const char *first[] = {"--topology", "ring.topo", NULL};
    assert_int_equal(s_rumor_compose(&t, first), 0);
    /* compose.topo now lists keys whose secrets are not in other-keys */
    const char *args[] = {"--topology",
                          "compose.topo",
                          "--keys-dir",
                          "other-keys",
                          "--topology-out",
                          "again.topo",
                          NULL};
    assert_int_not_equal(s_rumor_compose(&t, args), 0);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/docker-compose.yml", t.dir);
    char *yml = s_read(path);
    assert_string_equal(yml, "");
    free(yml);
    char *out = s_read(t.out);
    assert_non_null(strstr(out, "is missing"));
    free(out);
    s_tmp_free(&t);
}

static void
test_compose__shaping_and_gpus__reach_the_services(void **state)
{
    (void)state;
    if (!s_have_compose())
        skip();
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    const char *args[] = {"--topology",
                          "ring.topo",
                          "--link-rate",
                          "100mbit",
                          "--link-delay",
                          "10ms",
                          "--gpus",
                          "--gpu-count",
                          "2",
                          NULL};
    assert_int_equal(s_rumor_compose(&t, args), 0);
    cJSON *cfg = s_config(&t);
    const cJSON *services = s_get(cfg, "services");
    for (size_t i = 0; i < 4; i++) {
        char name[32], gpu[8];
        snprintf(name, sizeof name, "node-%zu", i);
        const cJSON *svc = s_get(services, name);
        assert_string_equal(s_arg(svc, "--rate"), "100000000");
        assert_string_equal(s_arg(svc, "--delay-ms"), "10");
        assert_true(s_has_arg(svc, "--cuda"));
        assert_string_equal(s_get(svc, "image")->valuestring, "rumor:cuda");
        assert_null(cJSON_GetObjectItemCaseSensitive(svc, "cap_add"));
        const cJSON *dev = s_get(
            s_get(s_get(s_get(svc, "deploy"), "resources"), "reservations"),
            "devices");
        assert_int_equal(cJSON_GetArraySize(dev), 1);
        snprintf(gpu, sizeof gpu, "%zu", i % 2);
        assert_string_equal(s_get(dev->child, "device_ids")->child->valuestring,
                            gpu);
        assert_string_equal(
            s_get(dev->child, "capabilities")->child->valuestring,
            "gpu");
    }
    cJSON_Delete(cfg);
    s_tmp_free(&t);
}

static void
test_compose__odd_characters__survive_yaml_quoting(void **state)
{
    (void)state;
    if (!s_have_compose())
        skip();
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    static const char odd[] = "csv:/data/a b: \"q\" 'x' $HOME ${X} #c \\ "
                              "- [1] {k: v} \xc3\xa9";
    const char *args[] = {"--topology", "ring.topo", "--dataset", odd, NULL};
    assert_int_equal(s_rumor_compose(&t, args), 0);
    cJSON *cfg = s_config(&t);
    const char *got =
        s_arg(s_get(s_get(cfg, "services"), "node-2"), "--dataset");
    assert_non_null(got);
    /* `docker-compose config` writes a literal '$' escaped as "$$" */
    char unescaped[sizeof odd + 8];
    size_t k = 0;
    for (const char *p = got; *p != '\0' && k < sizeof unescaped - 1; p++) {
        unescaped[k++] = *p;
        if (p[0] == '$' && p[1] == '$')
            p++;
    }
    unescaped[k] = '\0';
    assert_string_equal(unescaped, odd);
    cJSON_Delete(cfg);
    s_tmp_free(&t);
}

static void
test_compose__bad_options__refused_with_nothing_printed(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    const char *const cases[][4] = {
        {"--link-rate", "10parsec", NULL},
        {"--link-delay", "1.5ms", NULL},
        {"--id", "3", NULL},
        {"--rate", "5M", NULL},
        {"--restart", "sometimes", NULL},
        {"--rank", "2", NULL}, /* not for the default dpsgd */
        {"--port", "0", NULL},
    };
    char yml[PATH_MAX + 32];
    snprintf(yml, sizeof yml, "%s/docker-compose.yml", t.dir);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *args[] = {"--topology",
                              "ring.topo",
                              cases[c][0],
                              cases[c][1],
                              NULL};
        assert_int_equal(s_rumor_compose(&t, args), 2);
        char *text = s_read(yml);
        assert_string_equal(text, "");
        free(text);
    }
    const char *none[] = {"--image", "x:1", NULL};
    assert_int_equal(s_rumor_compose(&t, none), 2);
    s_tmp_free(&t);
}

/* text with every from[k] replaced by to[k] (caller frees). */
static char *
s_subst(const char *text,
        const char *const *from,
        const char *const *to,
        size_t pairs)
{
    char *out = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&out, &len);
    assert_non_null(mem);
    for (const char *p = text; *p != '\0';) {
        size_t k = 0;
        while (k < pairs && strncmp(p, from[k], strlen(from[k])) != 0)
            k++;
        if (k < pairs) {
            fputs(to[k], mem);
            p += strlen(from[k]);
        } else
            fputc(*p++, mem);
    }
    fclose(mem);
    return out;
}

/* Runs every service of cfg as a local process: the container paths
 * mapped to the files compose wrote, node-N resolved to 127.0.0.1:PORT+N
 * (in dir/local.topo), "$$" unescaped as compose does. */
static void
s_run_services(const struct s_tmp *t,
               const cJSON *cfg,
               unsigned port,
               const char *bin,
               int *st)
{
    char path[PATH_MAX + 32], topo[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/compose.topo", t->dir);
    snprintf(topo, sizeof topo, "%s/local.topo", t->dir);
    char *text = s_read(path);
    assert_non_null(text);
    char eps[NODES][40], locals[NODES][40];
    const char *from[NODES], *to[NODES];
    for (unsigned i = 0; i < NODES; i++) {
        snprintf(eps[i], sizeof eps[i], "tcp://node-%u:7000", i);
        snprintf(locals[i], sizeof locals[i], "tcp://127.0.0.1:%u", port + i);
        from[i] = eps[i];
        to[i] = locals[i];
    }
    char *local = s_subst(text, from, to, NODES);
    s_write(topo, local);
    free(local);
    free(text);
    pid_t pids[NODES];
    for (unsigned i = 0; i < NODES; i++) {
        char name[32], key[PATH_MAX + 32], ckpt[PATH_MAX + 32],
            metrics[PATH_MAX + 32];
        snprintf(name, sizeof name, "node-%u", i);
        snprintf(key, sizeof key, "%s/keys/node-%u", t->dir, i);
        snprintf(ckpt, sizeof ckpt, "%s/rumor-state/node-%u", t->dir, i);
        snprintf(metrics, sizeof metrics, "%s/rumor-state/metrics", t->dir);
        const char *cfrom[] = {"$$",
                               "/usr/local/bin/rumor",
                               "/etc/rumor/topology",
                               "/var/lib/rumor/checkpoints",
                               "/var/lib/rumor/metrics",
                               "/run/secrets/node-0",
                               "/run/secrets/node-1",
                               "/run/secrets/node-2",
                               "/run/secrets/node-3"};
        const char *cto[] = {"$", bin, topo, ckpt, metrics, key, key, key, key};
        const cJSON *svc = s_get(s_get(cfg, "services"), name);
        char *argv[ARGS_MAX] = {NULL};
        size_t n = 0;
        const cJSON *lists[] = {s_get(svc, "entrypoint"),
                                s_get(svc, "command")};
        for (size_t l = 0; l < 2; l++) {
            const cJSON *a;
            cJSON_ArrayForEach(a, lists[l])
            {
                assert_true(n < ARGS_MAX - 1);
                argv[n++] = s_subst(a->valuestring, cfrom, cto, 9);
            }
        }
        char echo[PATH_MAX + 32];
        snprintf(echo, sizeof echo, "%s/%s.args", t->dir, name);
        pids[i] = s_spawn((const char *const *)argv,
                          NULL,
                          NULL,
                          t->out,
                          strcmp(bin, "echo") == 0 ? echo : NULL);
        for (size_t k = 0; k < n; k++)
            free(argv[k]);
    }
    for (unsigned i = 0; i < NODES; i++)
        st[i] = s_wait(pids[i], LIMIT_MS);
}

static void
test_compose__service_commands__cluster_trains_with_checkpoints(void **state)
{
    (void)state;
    if (!s_have_compose())
        skip();
    struct s_tmp t;
    s_tmp_new(&t);
    s_gen(&t, "ring.topo", (const char *[]){"ring", "4", NULL});
    const char *args[] = {"--topology",
                          "ring.topo",
                          "--workload",
                          "lsq",
                          "--steps",
                          STEPS,
                          "--checkpoint-every",
                          "10",
                          "--progress",
                          "off",
                          NULL};
    assert_int_equal(s_rumor_compose(&t, args), 0);
    cJSON *cfg = s_config(&t);
    unsigned port = s_free_ports(NODES);
    int st[NODES];
    s_run_services(&t, cfg, port, s_bin(), st);
    char path[PATH_MAX + 64];
    for (unsigned i = 0; i < NODES; i++) {
        if (st[i] != 0)
            s_show(&t);
        assert_int_equal(st[i], 0);
        snprintf(path,
                 sizeof path,
                 "%s/rumor-state/metrics/node-%u.jsonl",
                 t.dir,
                 i);
        assert_int_equal(s_last_step(path), 20);
        snprintf(path,
                 sizeof path,
                 "%s/rumor-state/node-%u/node-%u.step-%012d.ckpt",
                 t.dir,
                 i,
                 i,
                 10);
        assert_int_equal(access(path, R_OK), 0);
    }
    /* a restart: the entrypoint (run with echo for rumor) adds --resume
     * where the node's checkpoint directory holds a checkpoint */
    snprintf(path,
             sizeof path,
             "%s/rumor-state/node-1/node-1.step-%012d.ckpt",
             t.dir,
             10);
    assert_int_equal(unlink(path), 0);
    snprintf(path,
             sizeof path,
             "%s/rumor-state/node-1/node-1.step-%012d.ckpt",
             t.dir,
             20);
    unlink(path);
    s_run_services(&t, cfg, port, "echo", st);
    for (unsigned i = 0; i < NODES; i++) {
        assert_int_equal(st[i], 0);
        snprintf(path, sizeof path, "%s/node-%u.args", t.dir, i);
        char *line = s_read(path);
        assert_non_null(line);
        assert_non_null(strstr(line, "node --topology "));
        if (i == 1)
            assert_null(strstr(line, "--resume"));
        else
            assert_non_null(strstr(line, " --resume\n"));
        free(line);
    }
    cJSON_Delete(cfg);
    s_tmp_free(&t);
}

/* --- tests: Dockerfiles -------------------------------------------------- */

static void
test_dockerfiles__mechanical_review__no_problem(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    const char *argv[] = {"sh",
                          "docker/check-dockerfile.sh",
                          "docker/Dockerfile",
                          "docker/Dockerfile.cuda",
                          NULL};
    int status = s_run(argv, NULL, &t);
    s_show(&t);
    assert_int_equal(status, 0);
    /* the context root's: both builders read it (BuildKit and the legacy
     * builder of Debian's docker.io) */
    char *ignore = s_read(".dockerignore");
    assert_non_null(ignore);
    assert_non_null(strstr(ignore, "\n**\n")); /* allow-list */
    assert_non_null(strstr(ignore, "\n**/*.key\n"));
    assert_null(strstr(ignore, "!keys"));
    free(ignore);
    s_tmp_free(&t);
}

static void
test_dockerfile_check__rule_breaker__every_rule_reported(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    const char *argv[] = {"sh",
                          "docker/check-dockerfile.sh",
                          "tests/data/deploy/bad.Dockerfile",
                          "tests/data/deploy/bad-arg.Dockerfile",
                          NULL};
    assert_int_equal(s_run(argv, NULL, &t), 1);
    char *out = s_read(t.out);
    static const char *const rules[] = {":2: D1:",
                                        ":3: D1:",
                                        ":4: D3:",
                                        ":5: D3:",
                                        ":6: D3:",
                                        ":7: D3:",
                                        ":8: D3:",
                                        ":9: D4:",
                                        "bad-arg.Dockerfile:3: D1:",
                                        "D2:",
                                        "D6:",
                                        "D7:"};
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (strstr(out, rules[k]) == NULL)
            fail_msg("'%s' not reported:\n%s", rules[k], out);
    assert_true(strstr(out, "no-such-package-rumor") != NULL ||
                strstr(out, "D5 skipped") != NULL);
    free(out);
    s_tmp_free(&t);
}

/* --- tests: Slurm --------------------------------------------------------- */

struct s_slurm {
    const char *nodelist;
    const char *tasks_per_node;
    const char *hostnames;       /* fake scontrol's answer, or NULL: none */
    const char *nodename[NODES]; /* SLURMD_NODENAME per task, or NULL */
    unsigned ntasks, started;
    const char *wait_s;
};

static void
s_slurm_env(const struct s_tmp *t,
            const struct s_slurm *s,
            unsigned id,
            char env[][PATH_MAX + 64],
            const char **ptrs)
{
    size_t k = 0;
    snprintf(env[k++], PATH_MAX, "SLURM_PROCID=%u", id);
    snprintf(env[k++], PATH_MAX, "SLURM_NTASKS=%u", s->ntasks);
    snprintf(env[k++], PATH_MAX, "SLURM_JOB_NODELIST=%s", s->nodelist);
    snprintf(env[k++], PATH_MAX, "SLURM_TASKS_PER_NODE=%s", s->tasks_per_node);
    snprintf(env[k++], PATH_MAX, "SLURM_JOB_ID=%d", (int)getpid());
    snprintf(env[k++], PATH_MAX, "SLURM_STEP_ID=0");
    if (s->nodename[id] != NULL)
        snprintf(env[k++], PATH_MAX, "SLURMD_NODENAME=%s", s->nodename[id]);
    if (s->hostnames != NULL) {
        snprintf(env[k++],
                 PATH_MAX + 64,
                 "PATH=%s/bin:%s",
                 t->dir,
                 getenv("PATH"));
        snprintf(env[k++],
                 PATH_MAX + 64,
                 "FAKE_SCONTROL_HOSTS=%s/hosts",
                 t->dir);
    }
    for (size_t j = 0; j < k; j++)
        ptrs[j] = env[j];
    ptrs[k] = NULL;
}

/* Starts the script for tasks 0..started-1 at once; returns the statuses. */
static void
s_slurm_run(const struct s_tmp *t, const struct s_slurm *s, int *status)
{
    if (s->hostnames != NULL) {
        s_install_fake(t, "tests/data/deploy/fake-scontrol", "scontrol");
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/hosts", t->dir);
        s_write(path, s->hostnames);
    }
    char dir[PATH_MAX + 16], port[16];
    snprintf(dir, sizeof dir, "%s/shared", t->dir);
    snprintf(port, sizeof port, "%u", s_free_ports(s->ntasks));
    const char *argv[] = {"sh",
                          "scripts/rumor-slurm.sh",
                          "--dir",
                          dir,
                          "--rumor",
                          s_bin(),
                          "--port-base",
                          port,
                          "--wait",
                          s->wait_s,
                          "--",
                          "--workload",
                          "lsq",
                          "--steps",
                          STEPS,
                          "--progress",
                          "off",
                          NULL};
    pid_t pids[NODES];
    for (unsigned id = 0; id < s->started; id++) {
        char env[12][PATH_MAX + 64];
        const char *ptrs[13];
        s_slurm_env(t, s, id, env, ptrs);
        pids[id] = s_spawn(argv, ptrs, NULL, t->out, NULL);
    }
    for (unsigned id = 0; id < s->started; id++)
        status[id] = s_wait(pids[id], LIMIT_MS);
}

static void
s_slurm_trains(const struct s_slurm *s)
{
    struct s_tmp t;
    s_tmp_new(&t);
    int status[NODES];
    s_slurm_run(&t, s, status);
    for (unsigned id = 0; id < NODES; id++) {
        if (status[id] != 0)
            s_show(&t);
        assert_int_equal(status[id], 0);
        char path[PATH_MAX + 96];
        snprintf(path,
                 sizeof path,
                 "%s/shared/%d.0/metrics/node-%u.jsonl",
                 t.dir,
                 (int)getpid(),
                 id);
        assert_int_equal(s_last_step(path), 20);
    }
    s_tmp_free(&t);
}

static void
test_slurm__comma_nodelist__cluster_trains(void **state)
{
    (void)state;
    struct s_slurm s = {"localhost", "4", NULL, {NULL}, NODES, NODES, "60"};
    s_slurm_trains(&s);
}

static void
test_slurm__scontrol_hostnames__cluster_trains(void **state)
{
    (void)state;
    struct s_slurm s = {"fake[1-2]",
                        "2(x2)",
                        "localhost\n127.0.0.1\n",
                        {"localhost", "localhost", "127.0.0.1", "127.0.0.1"},
                        NODES,
                        NODES,
                        "60"};
    s_slurm_trains(&s);
}

static void
test_slurm__task_never_comes__others_stop_by_deadline(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    struct s_slurm s = {"localhost", "2", NULL, {NULL}, 2, 1, "1"};
    int status[NODES];
    s_slurm_run(&t, &s, status);
    assert_int_equal(status[0], 2);
    char *out = s_read(t.out);
    assert_non_null(strstr(out, "only 1 of 2 tasks"));
    free(out);
    s_tmp_free(&t);
}

static void
test_slurm__task_on_another_host__refused(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    struct s_slurm s =
        {"localhost,127.0.0.1", "1(x2)", NULL, {"127.0.0.1"}, 2, 1, "1"};
    int status[NODES];
    s_slurm_run(&t, &s, status);
    assert_int_equal(status[0], 2);
    char *out = s_read(t.out);
    assert_non_null(strstr(out, "--distribution=block"));
    free(out);
    s_tmp_free(&t);
}

/* --- tests: a real Slurm cluster and a real sshd (make cluster-test) ------ */

#define REAL_LIMIT_MS 300000 /* a job or a launch that hangs fails here */
#define ACC_MIN       0.9    /* digits, 10 classes: chance is 0.1 */

/* A real test's directory and the launcher it may leave running: the
 * teardown removes and stops them, after a failure too. */
struct s_real {
    struct s_tmp t;
    pid_t pid; /* 0: none left to wait for */
};

static int
s_real_setup(void **state)
{
    struct s_real *x = calloc(1, sizeof *x);
    if (x == NULL)
        return -1;
    s_tmp_new(&x->t);
    *state = x;
    return 0;
}

/* A killed launcher's closed lifelines stop its remote nodes. */
static int
s_real_teardown(void **state)
{
    struct s_real *x = *state;
    if (x->pid > 0) {
        kill(x->pid, SIGKILL);
        waitpid(x->pid, NULL, 0);
    }
    s_tmp_free(&x->t);
    free(x);
    return 0;
}

/* The daemons of scripts/with-slurm.sh or with-sshd.sh, named by the
 * variable they export, or false after saying how to get them. */
static bool
s_have_daemons(const char *var, const char *script)
{
    if (getenv(var) != NULL)
        return true;
    printf("skipped: no %s: needs the daemons of %s (make cluster-test, as "
           "root)\n",
           var,
           script);
    return false;
}

/* The job script of docker/README.md's section "Slurm" (caller frees). */
static char *
s_readme_job(void)
{
    char *md = s_read("docker/README.md");
    assert_non_null(md);
    const char *sec = strstr(md, "\n## Slurm\n");
    const char *begin = sec != NULL ? strstr(sec, "```sh\n") : NULL;
    const char *end = begin != NULL ? strstr(begin, "\n```\n") : NULL;
    if (end == NULL)
        fail_msg("docker/README.md: no ```sh block in the section Slurm");
    begin += strlen("```sh\n");
    char *job = strndup(begin, (size_t)(end + 1 - begin));
    free(md);
    assert_non_null(job);
    return job;
}

/* `scontrol show job ID` as text (caller frees). */
static char *
s_scontrol_job(const struct s_tmp *t, long job)
{
    char id[32], path[PATH_MAX + 32];
    snprintf(id, sizeof id, "%ld", job);
    snprintf(path, sizeof path, "%s/scontrol.txt", t->dir);
    const char *argv[] = {"scontrol", "show", "job", id, NULL};
    assert_int_equal(s_wait(s_spawn(argv, NULL, NULL, t->out, path), LIMIT_MS),
                     0);
    return s_read(path);
}

/* The README's job (a torus:2x4 of 8 tasks, powergossip, 2000 steps), with
 * this machine's run directory, binary and a free port base for the site's,
 * on the one host of scripts/with-slurm.sh: its 4 nodes x 2 tasks become
 * 1 x 8 (the node has CPUs=8). */
#define JOB_TASKS 8
#define JOB_STEPS 2000

static void
test_slurm_real__readme_job__every_task_trains(void **state)
{
    /* not SLURM_CONF: a user's own cluster is not this test's */
    if (!s_have_daemons("RUMOR_SLURM_DIR", "scripts/with-slurm.sh")) {
        skip();
        return;
    }
    struct s_real *x = *state;
    struct s_tmp *t = &x->t;
    char runs[PATH_MAX], script[PATH_MAX + 64], cwd[PATH_MAX];
    unsigned port = s_free_ports(JOB_TASKS);
    snprintf(runs, sizeof runs, "%s/runs", t->dir);
    snprintf(script,
             sizeof script,
             "scripts/rumor-slurm.sh --port-base %u",
             port);
    assert_non_null(getcwd(cwd, sizeof cwd));
    char *readme = s_readme_job();
    const char *from[] = {"/shared/rumor-runs",
                          "/opt/rumor/bin/rumor",
                          "scripts/rumor-slurm.sh"};
    const char *to[] = {runs, s_bin(), script};
    char *job = s_subst(readme, from, to, 3);
    if (strstr(job, runs) == NULL || strstr(job, s_bin()) == NULL ||
        strstr(job, "torus:2x4") == NULL || strstr(job, "--steps 2000") == NULL)
        fail_msg("docker/README.md's job script changed: update this test\n%s",
                 readme);
    char path[PATH_MAX + 32], output[PATH_MAX + 32], ids[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/job.sh", t->dir);
    s_write(path, job);
    free(job);
    free(readme);
    snprintf(output, sizeof output, "--output=%s/job-%%j.out", t->dir);
    snprintf(ids, sizeof ids, "%s/sbatch.txt", t->dir);
    const char *argv[] = {"sbatch",
                          "--wait",
                          "--parsable",
                          "--nodes=1",
                          "--ntasks-per-node=8",
                          "--chdir",
                          cwd,
                          output,
                          path,
                          NULL};
    uint64_t t0 = s_now_ms();
    int status = s_wait(s_spawn(argv, NULL, NULL, t->out, ids), REAL_LIMIT_MS);
    printf("[time] sbatch --wait of the README's job: %.1f s\n",
           (double)(s_now_ms() - t0) / 1000.0);
    char *text = s_read(ids);
    long id = text != NULL ? strtol(text, NULL, 10) : 0;
    free(text);
    snprintf(path, sizeof path, "%s/job-%ld.out", t->dir, id);
    char *out = s_read(path);
    if (status != 0 || out == NULL || strstr(out, "srun: error") != NULL) {
        s_show(t);
        fail_msg("sbatch exit %d, job %ld's output:\n%s",
                 status,
                 id,
                 out != NULL ? out : "(none)");
    }
    /* srun's exit is its tasks' highest; the job's is srun's */
    char *shown = s_scontrol_job(t, id);
    assert_non_null(shown);
    if (strstr(shown, "JobState=COMPLETED") == NULL ||
        strstr(shown, " ExitCode=0:0") == NULL)
        fail_msg("job %ld did not end well:\n%s", id, shown);
    free(shown);
    for (unsigned i = 0; i < JOB_TASKS; i++) {
        char want[96];
        snprintf(want,
                 sizeof want,
                 "rumor-slurm[%u]: node %u of %d on localhost "
                 "(tcp://localhost:%u)",
                 i,
                 i,
                 JOB_TASKS,
                 port + i);
        if (strstr(out, want) == NULL)
            fail_msg("no '%s' in the job's output:\n%s", want, out);
        snprintf(path,
                 sizeof path,
                 "%s/%ld.0/metrics/node-%u.jsonl",
                 runs,
                 id,
                 i);
        double acc = s_last_field(path, "accuracy");
        printf("task %u: step %ld, accuracy %.3f\n", i, s_last_step(path), acc);
        assert_int_equal(s_last_step(path), JOB_STEPS);
        assert_true(acc >= ACC_MIN);
    }
    free(out);
}

/* --- tests: launch --hosts -------------------------------------------------
 */

/* digits: 0.97 accuracy at step 200 (rumor launch --nodes 4 --steps 200) */
#define SSH_STEPS     "200"
#define SSH_STEPS_NUM 200

/* Where the ssh user of scripts/with-sshd.sh runs: a copy of the rumor
 * binary it can execute (--rumor-path) and the remote directory. */
struct s_remote {
    char bin[PATH_MAX];
    char dir[PATH_MAX];
};

static void
s_remote_new(const struct s_tmp *t, struct s_remote *r)
{
    const char *home = getenv("RUMOR_SSHD_HOME");
    snprintf(r->bin, sizeof r->bin, "%s/rumor-%d", home, (int)getpid());
    snprintf(r->dir, sizeof r->dir, "%s/run-%d", home, (int)getpid());
    const char *argv[] = {"cp", s_bin(), r->bin, NULL};
    assert_int_equal(s_run(argv, NULL, t), 0);
}

static void
s_remote_free(const struct s_remote *r)
{
    nftw(r->dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    remove(r->bin);
}

/* A ring of 4 and a host file; its hosts are the sshd's alias. */
static unsigned
s_hosts_setup(const struct s_tmp *t, const char *hosts)
{
    s_gen(t, "ring.topo", (const char *[]){"ring", "4", NULL});
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hosts", t->dir);
    s_write(path, hosts);
    return s_free_ports(NODES);
}

/* `rumor launch --hosts` with the ssh of scripts/with-sshd.sh first on
 * PATH and r's binary and directory (r NULL: refused before any ssh). */
static pid_t
s_hosts_launch(const struct s_tmp *t,
               unsigned port,
               const char *steps,
               const struct s_remote *r)
{
    char base[16], path[PATH_MAX + 64];
    snprintf(base, sizeof base, "%u", port);
    const char *ssh_dir = getenv("RUMOR_SSHD_PATH");
    snprintf(path,
             sizeof path,
             "PATH=%s:%s",
             ssh_dir != NULL ? ssh_dir : "",
             getenv("PATH"));
    const char *env[] = {path, NULL};
    const char *argv[ARGS_MAX] = {s_bin(),
                                  "launch",
                                  "--hosts",
                                  "hosts",
                                  "--topology",
                                  "ring.topo",
                                  "--base-port",
                                  base,
                                  "--metrics-dir",
                                  "run",
                                  "--steps",
                                  steps,
                                  "--progress",
                                  "off"};
    size_t n = 14;
    if (r != NULL) {
        argv[n++] = "--rumor-path";
        argv[n++] = r->bin;
        argv[n++] = "--remote-dir";
        argv[n++] = r->dir;
    }
    argv[n] = NULL;
    return s_spawn(argv, env, t->dir, t->out, NULL);
}

/* "ALIAS slots=2 addr=localhost" and "USER@ALIAS slots=2 addr=127.0.0.1":
 * both log in through the sshd; peers connect to the address. */
static void
s_sshd_hosts(char *out, size_t size)
{
    const char *host = getenv("RUMOR_SSHD_HOST");
    snprintf(out,
             size,
             "# two entries for the one sshd\n"
             "%s slots=2 addr=localhost\n"
             "%s@%s slots=2 addr=127.0.0.1\n",
             host,
             getenv("RUMOR_SSHD_USER"),
             host);
}

static void
test_launch_hosts_real__sshd__cluster_trains(void **state)
{
    if (!s_have_daemons("RUMOR_SSHD_HOST", "scripts/with-sshd.sh")) {
        skip();
        return;
    }
    struct s_real *x = *state;
    struct s_tmp *t = &x->t;
    struct s_remote r;
    s_remote_new(t, &r);
    char hosts[512];
    s_sshd_hosts(hosts, sizeof hosts);
    unsigned port = s_hosts_setup(t, hosts);
    uint64_t t0 = s_now_ms();
    x->pid = s_hosts_launch(t, port, SSH_STEPS, &r);
    int status = s_wait(x->pid, REAL_LIMIT_MS);
    x->pid = 0;
    printf("[time] rumor launch --hosts over sshd, 4 nodes: %.1f s\n",
           (double)(s_now_ms() - t0) / 1000.0);
    if (status != 0)
        s_show(t);
    assert_int_equal(status, 0);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/run/hosts.topo", t->dir);
    rumor_topology *g = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_load_file(path, &g, &diag), RUMOR_OK);
    uid_t user = getpwnam(getenv("RUMOR_SSHD_USER"))->pw_uid;
    for (unsigned i = 0; i < NODES; i++) {
        char want[64];
        snprintf(want,
                 sizeof want,
                 "tcp://%s:%u",
                 i < 2 ? "localhost" : "127.0.0.1",
                 port + i);
        assert_string_equal(rumor_topology_endpoint(g, i), want);
        snprintf(path, sizeof path, "%s/keys/node-%u.pub", t->dir, i);
        char *pub = s_read(path);
        assert_non_null(pub);
        pub[strcspn(pub, "\n")] = '\0';
        assert_string_equal(rumor_topology_key(g, i), pub);
        free(pub);
        /* the node ran as the ssh user, where its metrics stay */
        snprintf(path, sizeof path, "%s/node-%u.jsonl", r.dir, i);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_uid, user);
        double acc = s_last_field(path, "accuracy");
        printf("node %u: step %ld, accuracy %.3f\n", i, s_last_step(path), acc);
        assert_int_equal(s_last_step(path), SSH_STEPS_NUM);
        assert_true(acc >= ACC_MIN);
        snprintf(path, sizeof path, "%s/run/node-%u.log", t->dir, i);
        char *log = s_read(path);
        assert_non_null(log);
        assert_non_null(strstr(log, "step " SSH_STEPS "/" SSH_STEPS));
        free(log);
    }
    rumor_topology_destroy(&g);
    char *out = s_read(t->out);
    assert_non_null(strstr(out, "[node 3] "));
    assert_non_null(strstr(out, "all nodes finished (exit 0)"));
    free(out);
    s_remote_free(&r);
}

/* Ctrl-C: ssh forwards no signal; the closed lifeline must stop the remote
 * nodes, through the real sshd, and every ssh. */
static void
test_launch_hosts_real__sigint__every_process_stopped(void **state)
{
    if (!s_have_daemons("RUMOR_SSHD_HOST", "scripts/with-sshd.sh")) {
        skip();
        return;
    }
    struct s_real *x = *state;
    struct s_tmp *t = &x->t;
    struct s_remote r;
    s_remote_new(t, &r);
    char hosts[512];
    s_sshd_hosts(hosts, sizeof hosts);
    unsigned port = s_hosts_setup(t, hosts);
    x->pid = s_hosts_launch(t, port, "1000000", &r);
    /* training: every node is past step 5 */
    uint64_t deadline = s_now_ms() + LIMIT_MS;
    for (unsigned i = 0; i < NODES; i++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/node-%u.jsonl", r.dir, i);
        while (s_last_step(path) < 5 && s_now_ms() < deadline)
            s_pause_ms(10);
    }
    /* each node: its ssh, the remote shell and rumor name the directory */
    assert_true(s_procs_with(r.dir) >= 2 * NODES);
    uint64_t t0 = s_now_ms();
    assert_int_equal(kill(x->pid, SIGINT), 0);
    int status = s_wait_or_kill(x->pid, LIMIT_MS);
    x->pid = 0;
    if (status != 130)
        s_show(t);
    assert_int_equal(status, 130);
    deadline = s_now_ms() + 10000;
    while (s_procs_with(r.dir) > 0 && s_now_ms() < deadline)
        s_pause_ms(10);
    assert_int_equal(s_procs_with(r.dir), 0);
    printf("[time] Ctrl-C to the last remote process gone: %.1f s\n",
           (double)(s_now_ms() - t0) / 1000.0);
    s_remote_free(&r);
}

static void
test_launch_hosts__too_few_slots__refused(void **state)
{
    (void)state;
    struct s_tmp t;
    s_tmp_new(&t);
    unsigned port = s_hosts_setup(&t, "localhost slots=3\n");
    assert_int_equal(s_wait(s_hosts_launch(&t, port, STEPS, NULL), LIMIT_MS),
                     2);
    char *out = s_read(t.out);
    assert_non_null(strstr(out, "too few slots"));
    free(out);
    s_tmp_free(&t);
}

/* --- tests: the crash checks of make deploy-test ------------------------- */

#define CRASH_STEPS  300
#define CRASH_KILLED 160 /* node 2's step when its rumor was killed */
#define CRASH_CKPT   100 /* the checkpoint it resumed from */

/* What the cluster did after node 2's crash. */
enum s_crash {
    CRASH_MARKED_DOWN_READMITTED, /* down after 3 misses, back */
    CRASH_BACK_IN_TIME,           /* back before a neighbour marked it down */
    CRASH_NOT_GOSSIPED,           /* handshakes, then nothing received */
    CRASH_NEVER_READMITTED,       /* marked down and left down */
    CRASH_NO_HANDSHAKE,           /* node 3 never answered its SYNC */
    CRASH_SURVIVOR_RESTARTED,     /* node 0 was restarted at step 200 */
};

/* node N's log, as `compose logs` prints it, with the given lines. */
static void
s_crash_log(const struct s_tmp *t, unsigned node, const char *const *lines)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/node-%u.log", t->dir, node);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "node-%u_1  | [rumor] node %u: 4 nodes\n", node, node);
    for (size_t k = 0; lines[k] != NULL; k++)
        fprintf(f, "node-%u_1  | [rumor] %s\n", node, lines[k]);
    fclose(f);
}

/* Node i's metrics: every node receives 1000 gossip bytes a step; node 2's
 * file holds its first run's steps up to the checkpoint (the rest is
 * trimmed when it resumes) and then its second run's, `seconds` from 0. */
static void
s_crash_metrics(const struct s_tmp *t, unsigned i, enum s_crash c)
{
    char path[PATH_MAX];
    snprintf(path,
             sizeof path,
             "%s/rumor-state/metrics/node-%u.jsonl",
             t->dir,
             i);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    bool neighbour = i == 1 || i == 3;
    for (unsigned s = 1; s <= CRASH_STEPS; s++) {
        double recv = 1000.0 * s, sec = 0.05 * s;
        if (i == 2 && s > CRASH_CKPT) {
            sec = 0.05 * (s - CRASH_CKPT);
            if (c == CRASH_NOT_GOSSIPED)
                recv = 1000.0 * CRASH_CKPT + 40.0 * (s - CRASH_CKPT);
        }
        if (i == 0 && c == CRASH_SURVIVOR_RESTARTED && s > 200)
            sec = 0.05 * (s - 200);
        bool was_down =
            neighbour && s > CRASH_KILLED + 3 &&
            (c == CRASH_MARKED_DOWN_READMITTED || c == CRASH_NEVER_READMITTED);
        bool is_down =
            was_down && (c == CRASH_NEVER_READMITTED || s <= CRASH_KILLED + 6);
        fprintf(f,
                "{\"step\":%u,\"loss\":0.5,\"gossip_bytes_recv\":%.0f,"
                "\"seconds\":%.2f,\"seconds_wait\":0.01,\"peers_down\":%d,"
                "\"readmitted\":%d}\n",
                s,
                recv,
                sec,
                is_down,
                was_down && c == CRASH_MARKED_DOWN_READMITTED);
    }
    fclose(f);
}

/* The directory docker_e2e.sh leaves after a crash of node 2 at
 * CRASH_KILLED on a 4-node ring. */
static void
s_crash_cluster(const struct s_tmp *t, enum s_crash c)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rumor-state", t->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/rumor-state/metrics", t->dir);
    assert_int_equal(mkdir(path, 0700), 0);
    for (unsigned i = 0; i < NODES; i++)
        s_crash_metrics(t, i, c);
    const char *victim[] = {
        "resumed from /var/lib/rumor/checkpoints/node-2.step-000100.ckpt "
        "(step 100)",
        "node 1 is back (handshake done); gossiping from step 101",
        c == CRASH_NO_HANDSHAKE
            ? "node 1 is at step 170: jumping from step 101"
            : "node 3 is back (handshake done); gossiping from step 101",
        "node 1 is at step 170: jumping from step 101",
        NULL};
    const char *down_back[] = {
        "step 164: node 2 is down (missed its deadlines); skipping it and "
        "probing",
        c == CRASH_NEVER_READMITTED
            ? NULL
            : "node 2 is back (handshake done); gossiping from step 167",
        NULL};
    /* the transport saying a peer is down is not the fault path marking
     * it down (a neighbour that stalled with it and jumped never does) */
    const char *plain[] = {"net: node 2 is down (was late)",
                           "step 300/300 loss 0.1 accuracy 0.97",
                           NULL};
    bool down =
        c == CRASH_MARKED_DOWN_READMITTED || c == CRASH_NEVER_READMITTED;
    s_crash_log(t, 0, plain);
    s_crash_log(t, 1, down ? down_back : plain);
    s_crash_log(t, 2, victim);
    s_crash_log(t, 3, down ? down_back : plain);
}

/* tests/integration/docker_crash_check.sh on case c: its exit status, and
 * its output in *out (caller frees). */
static int
s_crash_check(enum s_crash c, char **out)
{
    struct s_tmp t;
    s_tmp_new(&t);
    s_crash_cluster(&t, c);
    char steps[16], killed[16];
    snprintf(steps, sizeof steps, "%d", CRASH_STEPS);
    snprintf(killed, sizeof killed, "%d", CRASH_KILLED);
    const char *argv[] = {"sh",
                          "tests/integration/docker_crash_check.sh",
                          t.dir,
                          steps,
                          killed,
                          "2",
                          "0",
                          "1",
                          "3",
                          NULL};
    int status = s_run(argv, NULL, &t);
    *out = s_read(t.out);
    assert_non_null(*out);
    s_tmp_free(&t);
    return status;
}

static void
test_crash_check__readmitted_or_back_in_time__both_pass(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(s_crash_check(CRASH_MARKED_DOWN_READMITTED, &out), 0);
    assert_non_null(strstr(out, "node-1 marked it down and re-admitted it"));
    assert_non_null(strstr(out, "node-3 marked it down and re-admitted it"));
    free(out);
    /* the path the first check (a `readmitted` count >= 1) refused */
    assert_int_equal(s_crash_check(CRASH_BACK_IN_TIME, &out), 0);
    assert_non_null(strstr(out, "node-1 never marked it down"));
    assert_non_null(strstr(out, "received 100000 -> 300000 gossip bytes"));
    free(out);
}

static void
test_crash_check__each_defect__reported(void **state)
{
    (void)state;
    static const struct {
        enum s_crash c;
        const char *says;
    } cases[] = {
        {CRASH_NOT_GOSSIPED,
         "node-2 received 100000 -> 108000 gossip bytes from step 100 to "
         "300, want at least half of node 0's rate"},
        {CRASH_NEVER_READMITTED,
         "node-1 marked node-2 down and never re-admitted it"},
        {CRASH_NEVER_READMITTED, "node-3: 1 peers down at its last step"},
        {CRASH_NO_HANDSHAKE, "node-2: no handshake with node 3"},
        {CRASH_SURVIVOR_RESTARTED,
         "node-0: its metrics show a stop or a restart"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *out = NULL;
        int status = s_crash_check(cases[k].c, &out);
        if (status != 1 || strstr(out, cases[k].says) == NULL)
            fail_msg("case %zu: status %d, want 1 and '%s':\n%s",
                     k,
                     status,
                     cases[k].says,
                     out);
        free(out);
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose__ring__valid_config_and_invariants),
        cmocka_unit_test(test_compose__torus__valid_config_and_invariants),
        cmocka_unit_test(
            test_compose__hand_written_weights__kept_with_service_endpoints),
        cmocka_unit_test(test_compose__second_run__same_keys),
        cmocka_unit_test(test_compose__listed_key_without_secret__refused),
        cmocka_unit_test(test_compose__shaping_and_gpus__reach_the_services),
        cmocka_unit_test(test_compose__odd_characters__survive_yaml_quoting),
        cmocka_unit_test(
            test_compose__bad_options__refused_with_nothing_printed),
        cmocka_unit_test(
            test_compose__service_commands__cluster_trains_with_checkpoints),
        cmocka_unit_test(test_dockerfiles__mechanical_review__no_problem),
        cmocka_unit_test(
            test_dockerfile_check__rule_breaker__every_rule_reported),
        cmocka_unit_test(test_slurm__comma_nodelist__cluster_trains),
        cmocka_unit_test(test_slurm__scontrol_hostnames__cluster_trains),
        cmocka_unit_test(test_slurm__task_never_comes__others_stop_by_deadline),
        cmocka_unit_test(test_slurm__task_on_another_host__refused),
        cmocka_unit_test_setup_teardown(
            test_slurm_real__readme_job__every_task_trains,
            s_real_setup,
            s_real_teardown),
        cmocka_unit_test_setup_teardown(
            test_launch_hosts_real__sshd__cluster_trains,
            s_real_setup,
            s_real_teardown),
        cmocka_unit_test_setup_teardown(
            test_launch_hosts_real__sigint__every_process_stopped,
            s_real_setup,
            s_real_teardown),
        cmocka_unit_test(test_launch_hosts__too_few_slots__refused),
        cmocka_unit_test(
            test_crash_check__readmitted_or_back_in_time__both_pass),
        cmocka_unit_test(test_crash_check__each_defect__reported),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("deploy", tests, NULL, NULL);
}
