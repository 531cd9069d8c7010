/*
 * `rumor launch`: a local cluster from one topology file. For every node
 * whose endpoint is on this machine (tcp://127.x, localhost, [::1] or
 * ipc://) it starts a child `rumor node --topology FILE --id N --key
 * KEYS/node-N ...` (the same binary, through /proc/self/exe, so each node
 * shows as such in ps), merges the child's stdout and stderr into a pipe,
 * and copies every line to the terminal prefixed by "[node N] " and,
 * unprefixed, to DIR/node-N.log.
 *
 * Keys: the topology's directory holds keys/node-N.{key,pub} (as `rumor
 * topo gen --local` writes them). A local node without a public key in the
 * file gets a fresh keypair (or the one already in keys/) and the file is
 * rewritten with it; a node whose key is listed but whose secret is
 * missing is an error before anything starts.
 *
 * Children never outlive the launcher: SIGINT and SIGTERM are forwarded to
 * every child; when a child fails the others are sent SIGTERM (a
 * synchronous run cannot go on without it); children still alive a grace
 * period after a signal are killed; and each child asks the kernel for
 * SIGTERM should the launcher die (PR_SET_PDEATHSIG). The launcher exits
 * 0 when every node finished, 130 when interrupted, 1 otherwise.
 */
#include "rumor/net.h"
#include "rumor/node.h"
#include "rumor/topology.h"

#include "node/cli.h"
#include "node/runtime_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LAUNCH_MAX_NODES   256
#define LAUNCH_LINE_MAX    4096
#define LAUNCH_GRACE_MS    15000 /* after a signal, before SIGKILL */
#define LAUNCH_DEFAULT_DIR "rumor-run"

struct s_child {
    uint32_t id;
    pid_t pid;  /* 0 once reaped */
    int fd;     /* read end of its output pipe, -1 at EOF */
    FILE *log;  /* DIR/node-N.log */
    int status; /* wait status */
    char line[LAUNCH_LINE_MAX];
    size_t len;
};

static int s_sigpipe[2] = {-1, -1};

void
cli_launch_help(FILE *out)
{
    fprintf(out,
            "usage: rumor launch --topology FILE [--steps N] "
            "[--metrics-dir DIR] [node options]\n\n"
            "Starts one `rumor node` child per topology node whose endpoint "
            "is local\n"
            "(127.x, localhost, [::1], ipc://), with the keys in "
            "keys/node-N next to\n"
            "the topology file (generated when missing), prefixes their "
            "output with\n"
            "[node N], stores it in DIR/node-N.log, forwards Ctrl-C, and "
            "exits non-zero\n"
            "when a node failed. DIR defaults to ./" LAUNCH_DEFAULT_DIR
            ". Every other option goes to\n"
            "each node (see 'rumor help node').\n");
}

static void
s_on_signal(int sig)
{
    unsigned char b = (unsigned char)sig;
    int saved = errno;
    if (write(s_sigpipe[1], &b, 1) < 0) {
        /* the pipe is full: a signal is already pending */
    }
    errno = saved;
}

static bool
s_is_local(const char *endpoint)
{
    return strncmp(endpoint, "tcp://127.", 10) == 0 ||
           strncmp(endpoint, "tcp://localhost:", 16) == 0 ||
           strncmp(endpoint, "tcp://[::1]:", 12) == 0 ||
           strncmp(endpoint, "ipc://", 6) == 0;
}

static void
s_dirname(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(out, cap, ".");
        return;
    }
    size_t len = (size_t)(slash - path);
    snprintf(out, cap, "%.*s", (int)(len == 0 ? 1 : len), path);
}

static bool
s_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Makes sure every local node has a key; rewrites the file when keys were
 * added. Returns 0 or an exit status. */
static int
s_prepare_keys(rumor_topology *t,
               const char *path,
               const char *keydir,
               const bool *local)
{
    bool changed = false;
    size_t n = rumor_topology_nodes(t);
    for (size_t i = 0; i < n; i++) {
        if (!local[i])
            continue;
        char base[RUMOR_NODE_PATH_MAX + 64], file[RUMOR_NODE_PATH_MAX + 72];
        snprintf(base, sizeof base, "%s/node-%zu", keydir, i);
        snprintf(file, sizeof file, "%s.key", base);
        if (rumor_topology_key(t, i) != NULL) {
            if (!s_exists(file)) {
                fprintf(stderr,
                        "rumor launch: node %zu has a public key in %s but "
                        "%s is missing\n",
                        i,
                        path,
                        file);
                return 2;
            }
            continue;
        }
        rumor_net_keypair *kp = NULL;
        rumor_err rc = RUMOR_OK;
        if (node_mkdirs(keydir) != 0)
            rc = RUMOR_EIO;
        else if (s_exists(file))
            rc = rumor_net_keypair_load(base, &kp);
        else {
            rc = rumor_net_keypair_generate(&kp);
            if (rc == RUMOR_OK)
                rc = rumor_net_keypair_save(kp, base);
        }
        struct rumor_diag diag = {0};
        if (rc == RUMOR_OK)
            rc = rumor_topology_set_node(t,
                                         i,
                                         NULL,
                                         rumor_net_keypair_public(kp),
                                         &diag);
        rumor_net_keypair_destroy(&kp);
        if (rc != RUMOR_OK) {
            fprintf(stderr,
                    "rumor launch: key for node %zu (%s): %s\n",
                    i,
                    base,
                    rumor_strerror(rc));
            return 1;
        }
        printf("[launch] node %zu: new key %s\n", i, base);
        changed = true;
    }
    if (!changed)
        return 0;
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    rumor_err rc = rumor_buf_append(&buf, "# keys added by rumor launch\n", 29);
    if (rc == RUMOR_OK)
        rc = rumor_topology_format(t, &buf);
    FILE *f = rc == RUMOR_OK ? fopen(path, "w") : NULL;
    int failed = f == NULL;
    if (f != NULL) {
        failed |= fwrite(buf.data, 1, buf.len, f) != buf.len;
        failed |= fclose(f) != 0;
    }
    rumor_buf_free(&buf);
    if (failed)
        fprintf(stderr, "rumor launch: cannot rewrite %s\n", path);
    return failed;
}

static pid_t
s_spawn(char *const *argv, int out_fd, pid_t parent)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* child: die with the launcher, even if it is killed outright */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    close(out_fd);
    execv("/proc/self/exe", argv);
    _exit(127);
}

static void
s_emit_line(struct s_child *c)
{
    c->line[c->len] = '\0';
    printf("[node %u] %s\n", c->id, c->line);
    if (c->log != NULL)
        fprintf(c->log, "%s\n", c->line);
    c->len = 0;
}

static void
s_drain(struct s_child *c)
{
    char buf[4096];
    ssize_t got = read(c->fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR)
        return;
    if (got <= 0) {
        if (c->len > 0)
            s_emit_line(c);
        close(c->fd);
        c->fd = -1;
        fflush(stdout);
        return;
    }
    for (ssize_t k = 0; k < got; k++) {
        char ch = buf[k];
        if (ch == '\n' || ch == '\r') {
            if (c->len > 0 || ch == '\n')
                s_emit_line(c);
        } else {
            c->line[c->len++] = ch;
            if (c->len == LAUNCH_LINE_MAX - 1)
                s_emit_line(c);
        }
    }
    fflush(stdout);
    if (c->log != NULL)
        fflush(c->log);
}

static void
s_signal_all(struct s_child *kids, size_t count, int sig)
{
    for (size_t k = 0; k < count; k++)
        if (kids[k].pid > 0)
            kill(kids[k].pid, sig);
}

/* Runs the children until every one is reaped; returns the exit status. */
static int
s_supervise(struct s_child *kids, size_t count)
{
    struct pollfd fds[LAUNCH_MAX_NODES + 1];
    size_t alive = count, open = count;
    bool interrupted = false, failed = false;
    uint64_t kill_at = UINT64_MAX;
    while (alive > 0 || open > 0) {
        size_t nfds = 0;
        fds[nfds++] = (struct pollfd){s_sigpipe[0], POLLIN, 0};
        for (size_t k = 0; k < count; k++)
            if (kids[k].fd >= 0)
                fds[nfds++] = (struct pollfd){kids[k].fd, POLLIN, 0};
        int ready = poll(fds, (nfds_t)nfds, 100);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
            unsigned char sig = 0;
            if (read(s_sigpipe[0], &sig, 1) == 1) {
                printf("[launch] signal %d: forwarding to the nodes\n", sig);
                s_signal_all(kids, count, sig);
                interrupted = true;
                if (kill_at == UINT64_MAX)
                    kill_at = rumor_clock_ns() + LAUNCH_GRACE_MS * 1000000ull;
            }
        }
        for (size_t k = 0, f = 1; k < count; k++) {
            if (kids[k].fd < 0)
                continue;
            if (f < nfds && fds[f].fd == kids[k].fd &&
                (fds[f].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
                s_drain(&kids[k]);
                if (kids[k].fd < 0)
                    open--;
            }
            f++;
        }
        for (size_t k = 0; k < count; k++) {
            if (kids[k].pid <= 0)
                continue;
            int st = 0;
            pid_t r = waitpid(kids[k].pid, &st, WNOHANG);
            if (r != kids[k].pid)
                continue;
            kids[k].pid = 0;
            kids[k].status = st;
            alive--;
            bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
            if (WIFEXITED(st))
                printf("[launch] node %u exited with status %d\n",
                       kids[k].id,
                       WEXITSTATUS(st));
            else
                printf("[launch] node %u killed by signal %d\n",
                       kids[k].id,
                       WTERMSIG(st));
            if (!ok && !interrupted && !failed) {
                failed = true;
                printf("[launch] node %u failed: stopping the others\n",
                       kids[k].id);
                s_signal_all(kids, count, SIGTERM);
                kill_at = rumor_clock_ns() + LAUNCH_GRACE_MS * 1000000ull;
            }
            fflush(stdout);
        }
        if (alive > 0 && rumor_clock_ns() >= kill_at) {
            printf("[launch] nodes still running after %d ms: killing them\n",
                   LAUNCH_GRACE_MS);
            s_signal_all(kids, count, SIGKILL);
            kill_at = UINT64_MAX - 1;
        }
    }
    int status = 0;
    for (size_t k = 0; k < count; k++) {
        int st = kids[k].status;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            status = 1;
    }
    if (interrupted)
        status = 130;
    return status;
}

struct s_args {
    struct rumor_node_opts opts; /* as node 0 would get them */
    char topology[RUMOR_NODE_PATH_MAX];
    char metrics_dir[RUMOR_NODE_PATH_MAX];
    char **pass; /* node options passed through, NULL-terminated */
    size_t npass;
    bool insecure;
};

/* Every node ran here: evaluate the average of their final models. */
static void
s_average(const struct s_args *a, uint32_t n)
{
    struct node_average avg;
    struct rumor_diag diag = {0};
    rumor_err rc =
        node_average_evaluate(&a->opts, n, a->metrics_dir, &avg, &diag);
    if (rc == RUMOR_OK)
        rc = node_average_write(a->metrics_dir, n, &avg);
    if (rc != RUMOR_OK) {
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        printf("[launch] average model: not evaluated: %s\n",
               text[0] != '\0' ? text : rumor_strerror(rc));
    } else if (!isnan(avg.accuracy))
        printf("[launch] average model of the %u nodes: held-out accuracy "
               "%.2f%%, loss %.4f\n",
               n,
               100 * avg.accuracy,
               avg.test_loss);
    else
        printf("[launch] average model of the %u nodes: held-out loss %.6g, "
               "max |x - x*| %.3g\n",
               n,
               avg.test_loss,
               avg.optimum_error);
}

static void
s_print_diag(const struct rumor_diag *diag)
{
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    rumor_diag_format(diag, text, sizeof text);
    fprintf(stderr, "rumor launch: %s\n", text);
}

static int
s_parse(int argc, char **argv, struct s_args *a)
{
    snprintf(a->metrics_dir, sizeof a->metrics_dir, "%s", LAUNCH_DEFAULT_DIR);
    struct rumor_node_opts opts;
    rumor_node_opts_default(&opts);
    struct rumor_diag diag = {0};
    if (cli_node_parse(argc, argv, &opts, &diag) != 0) {
        s_print_diag(&diag);
        return 2;
    }
    if (opts.metrics_dir[0] != '\0')
        snprintf(a->metrics_dir, sizeof a->metrics_dir, "%s", opts.metrics_dir);
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--topology") == 0 ||
             strcmp(argv[i], "--metrics-dir") == 0) &&
            i + 1 < argc) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--topology=", 11) == 0 ||
            strncmp(argv[i], "--metrics-dir=", 14) == 0)
            continue;
        if (strcmp(argv[i], "--id") == 0 || strcmp(argv[i], "--key") == 0 ||
            strncmp(argv[i], "--id=", 5) == 0 ||
            strncmp(argv[i], "--key=", 6) == 0) {
            fprintf(stderr,
                    "rumor launch: %s is set by launch for each node "
                    "(use --topology FILE and --metrics-dir DIR)\n",
                    argv[i]);
            return 2;
        }
        a->pass[a->npass++] = argv[i];
    }
    a->insecure = opts.insecure;
    snprintf(a->topology, sizeof a->topology, "%s", opts.topology);
    if (a->topology[0] == '\0') {
        fprintf(stderr, "rumor launch: --topology FILE is required\n");
        return 2;
    }
    /* check the node options as node 0 would, before starting anything */
    if (rumor_node_opts_set(&opts, "id", "0", &diag) != RUMOR_OK ||
        (!opts.insecure &&
         rumor_node_opts_set(&opts, "key", "keys/node-0", &diag) != RUMOR_OK) ||
        rumor_node_opts_check(&opts, &diag) != RUMOR_OK) {
        s_print_diag(&diag);
        return 2;
    }
    a->opts = opts;
    return 0;
}

int
cli_launch_main(int argc, char **argv)
{
    struct s_args a = {0};
    a.pass = calloc((size_t)argc + 1, sizeof *a.pass);
    if (a.pass == NULL)
        return 1;
    int status = s_parse(argc, argv, &a);
    rumor_topology *t = NULL;
    struct s_child *kids = NULL;
    size_t count = 0;
    bool local[LAUNCH_MAX_NODES] = {false};
    char keydir[RUMOR_NODE_PATH_MAX + 8];
    if (status == 0) {
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_topology_load_file(a.topology, &t, &diag);
        if (rc != RUMOR_OK) {
            char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
            rumor_diag_format(&diag, text, sizeof text);
            fprintf(stderr, "rumor launch: %s\n", text);
            status = 2;
        } else if (rumor_topology_nodes(t) > LAUNCH_MAX_NODES) {
            fprintf(stderr,
                    "rumor launch: more than %d nodes\n",
                    LAUNCH_MAX_NODES);
            status = 2;
        }
    }
    size_t n = t != NULL ? rumor_topology_nodes(t) : 0;
    for (size_t i = 0; i < n && status == 0; i++) {
        const char *ep = rumor_topology_endpoint(t, i);
        local[i] = ep != NULL && s_is_local(ep);
        count += local[i];
    }
    if (status == 0 && count == 0) {
        fprintf(stderr,
                "rumor launch: no node of %s has a local endpoint\n",
                a.topology);
        status = 2;
    }
    char dir[RUMOR_NODE_PATH_MAX];
    s_dirname(a.topology[0] != '\0' ? a.topology : ".", dir, sizeof dir);
    snprintf(keydir, sizeof keydir, "%s/keys", dir);
    if (status == 0 && !a.insecure)
        status = s_prepare_keys(t, a.topology, keydir, local);
    if (status == 0 && node_mkdirs(a.metrics_dir) != 0) {
        fprintf(stderr, "rumor launch: cannot create %s\n", a.metrics_dir);
        status = 1;
    }
    if (status == 0) {
        kids = calloc(count, sizeof *kids);
        status = kids == NULL;
    }
    if (status == 0 && pipe(s_sigpipe) != 0)
        status = 1;
    if (status != 0)
        goto done;
    fcntl(s_sigpipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(s_sigpipe[1], F_SETFD, FD_CLOEXEC);
    fcntl(s_sigpipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("[launch] %zu local node(s) of %s; logs and metrics in %s\n",
           count,
           a.topology,
           a.metrics_dir);
    fflush(stdout);
    size_t started = 0;
    pid_t self = getpid();
    for (size_t i = 0; i < n; i++) {
        if (!local[i])
            continue;
        struct s_child *c = &kids[started];
        char id[24], key[RUMOR_NODE_PATH_MAX + 64],
            logp[RUMOR_NODE_PATH_MAX + 64];
        snprintf(id, sizeof id, "%zu", i);
        snprintf(key, sizeof key, "%s/node-%zu", keydir, i);
        snprintf(logp, sizeof logp, "%s/node-%zu.log", a.metrics_dir, i);
        char **argv2 = calloc(a.npass + 12, sizeof *argv2);
        int fds[2];
        if (argv2 == NULL || pipe(fds) != 0) {
            free(argv2);
            status = 1;
            break;
        }
        size_t k = 0;
        argv2[k++] = "rumor";
        argv2[k++] = "node";
        argv2[k++] = "--topology";
        argv2[k++] = a.topology;
        argv2[k++] = "--id";
        argv2[k++] = id;
        if (!a.insecure) {
            argv2[k++] = "--key";
            argv2[k++] = key;
        }
        argv2[k++] = "--metrics-dir";
        argv2[k++] = a.metrics_dir;
        for (size_t p = 0; p < a.npass; p++)
            argv2[k++] = a.pass[p];
        fflush(stdout);
        c->id = (uint32_t)i;
        c->log = fopen(logp, "we");
        fcntl(fds[0], F_SETFD, FD_CLOEXEC);
        fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        c->pid = s_spawn(argv2, fds[1], self);
        close(fds[1]);
        c->fd = fds[0];
        free(argv2);
        if (c->pid < 0) {
            close(c->fd);
            fprintf(stderr, "rumor launch: fork: %s\n", strerror(errno));
            status = 1;
            break;
        }
        printf("[launch] node %zu: pid %d\n", i, (int)c->pid);
        started++;
    }
    fflush(stdout);
    if (status != 0)
        s_signal_all(kids, started, SIGTERM);
    int run_status = s_supervise(kids, started);
    if (status == 0)
        status = run_status;
    if (status == 0 && count == n)
        s_average(&a, (uint32_t)n);
    for (size_t k = 0; k < started; k++)
        if (kids[k].log != NULL)
            fclose(kids[k].log);
    printf("[launch] %s (exit %d)\n",
           status == 0     ? "all nodes finished"
           : status == 130 ? "interrupted"
                           : "a node failed",
           status);
done:
    free(kids);
    rumor_topology_destroy(&t);
    free(a.pass);
    return status;
}
