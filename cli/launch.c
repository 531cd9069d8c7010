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
 * A local node that fails (killed, or a non-zero exit) is restarted, up
 * to --restart times (default 3), while the others train on: gossip
 * nodes skip a dead neighbour and take it back when it returns, the ring
 * algorithms (all-reduce, PowerSGD, exact local SGD, the compressed
 * all-reduce) re-form their ring without it and admit it again
 * (docs/reliability.md, "Elastic rings"). It restarts with --resume when
 * it has a good checkpoint in --checkpoint-dir, else with --join (a
 * neighbour's or a member's model and step). That needs an algorithm that
 * skips a missing node or runs on the ring (rumor_gossip_can_skip,
 * rumor_gossip_uses_ring, asked on node 0's model at the first failure);
 * with the others (PowerGossip with several iterations, CHOCO with
 * --adapt, local SGD averaging by gossip rounds) and with --restart 0 a
 * failure stops the whole run, as does a failure of an ssh node. A node
 * that exits 0 stays so; it has finished only when its metrics' last step
 * is the run's --steps: one that exits 0 sooner (stopped by a peer's
 * plan, or misled by a peer's claims) is a failure, said so, and left out
 * of the average model.
 *
 * Children never outlive the launcher: SIGINT and SIGTERM are forwarded to
 * every child and cancel pending restarts; children still alive a grace
 * period after a signal are killed; and each child asks the kernel for
 * SIGTERM should the launcher die (PR_SET_PDEATHSIG). The launcher exits
 * 0 when every node ran every step, 130 when interrupted, 1 otherwise.
 *
 * With --hosts FILE the nodes run on other machines over ssh (the same
 * rumor binary path on each): node i goes to the next free slot of the
 * host list, its endpoint becomes tcp://HOST:BASE_PORT+i (distinct ports,
 * so several slots or host aliases of one machine never collide), and
 * one `ssh -T HOST sh -c SCRIPT` per node carries, on its stdin, the
 * node's secret key and the derived topology into the remote run
 * directory, then stays open as a lifeline: ssh without a terminal
 * forwards no signals, so the remote script sends SIGTERM to its node when
 * that stdin closes, which is how the launcher stops a remote node (and
 * what happens when the launcher or its ssh dies). Output and logs are
 * handled as for local nodes; metrics stay in the remote directory.
 */
#include "rumor/net.h"
#include "rumor/node.h"
#include "rumor/topology.h"

#include "cli/cli.h"
#include "cli/launch.h"
#include "node/runtime_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#define LAUNCH_DRAIN_MS    5000  /* output still open after the last exit */
#define LAUNCH_DEFAULT_DIR "rumor-run"
#define LAUNCH_BASE_PORT   7000u
#define LAUNCH_HOST_BYTES  256
#define LAUNCH_RESTARTS    3    /* --restart: restarts per node */
#define LAUNCH_BACKOFF_MS  1000 /* more per further restart of a node */

struct s_child {
    uint32_t id;
    pid_t pid;         /* 0 once reaped */
    int fd;            /* read end of its output pipe, -1 at EOF */
    int in_fd;         /* ssh: write end of its stdin (the lifeline), else -1 */
    bool remote;       /* an ssh child */
    size_t local;      /* its index among its host's children */
    FILE *log;         /* DIR/node-N.log */
    int status;        /* wait status */
    bool short_run;    /* exited 0 before the run's last step */
    unsigned restarts; /* restarts so far */
    uint64_t restart_at; /* when the pending restart is due; 0: none */
    const char *mode;    /* of the pending restart: --resume or --join */
    char line[LAUNCH_LINE_MAX];
    size_t len;
};

static int s_sigpipe[2] = {-1, -1};

void
cli_launch_help(FILE *out)
{
    fprintf(out,
            "usage: rumor launch --topology FILE [--steps N] "
            "[--metrics-dir DIR] [--restart N]\n"
            "                    [node options]\n"
            "       rumor launch --nodes N [...]  (a ring of N local "
            "nodes, in DIR/ring.topo)\n"
            "       rumor launch [...] -- PROG [ARGS]  (a worker per node, "
            "e.g. python3 train.py)\n"
            "       rumor launch --hosts HOSTFILE --topology FILE "
            "[--base-port P]\n"
            "                    [--remote-dir DIR] [--rumor-path PATH] "
            "[node options]\n\n"
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
            "each node (see 'rumor help node').\n\n"
            "--restart N: a local node that dies is restarted up to N "
            "times (default %d)\n"
            "while the others train on, with --resume when it has a "
            "checkpoint in\n"
            "--checkpoint-dir, else --join (ring algorithms re-form "
            "without it and take\n"
            "it back). 0, an ssh node, or an algorithm that neither skips "
            "a node nor runs\n"
            "on the ring (powergossip with --iterations > 1, choco "
            "--adapt): a failure\n"
            "stops the run.\n\n"
            "-- PROG ARGS: each node is a worker running PROG (a "
            "training script with\n"
            "rumor.Peer.from_env()) instead of `rumor node`; it finds "
            "its identity in\n"
            "RUMOR_TOPOLOGY, RUMOR_NODE_ID, RUMOR_NODES, RUMOR_LOCAL_ID, "
            "RUMOR_KEY,\n"
            "RUMOR_METRICS_DIR and the node options given here in "
            "RUMOR_OPTIONS; a\n"
            "restarted worker gets RUMOR_RESTART=K and RUMOR_JOIN=1 "
            "(docs/python.md).\n\n"
            "--hosts: every node runs over ssh on the hosts of HOSTFILE "
            "(lines\n"
            "'[USER@]HOST [slots=N] [addr=ADDRESS]', # comments), filled in "
            "order,\n"
            "listening on tcp://ADDRESS:P+N (P = --base-port, default "
            "%u). Each\n"
            "host needs the same rumor binary at --rumor-path (default: "
            "this one's\n"
            "path); the key and the topology travel over ssh into "
            "--remote-dir\n"
            "(default: DIR's absolute path), where metrics stay.\n",
            LAUNCH_RESTARTS,
            LAUNCH_BASE_PORT);
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

/* Makes sure every local node has a key; rewrites the file at path when
 * keys were added and rewrite is set. Returns 0 or an exit status. */
static int
s_prepare_keys(rumor_topology *t,
               const char *path,
               const char *keydir,
               const bool *local,
               bool rewrite)
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
    if (!changed || !rewrite)
        return 0;
    return cli_topology_write(t,
                              "# keys added by rumor launch\n",
                              path,
                              NULL) != 0;
}

int
cli_topology_write(const rumor_topology *t,
                   const char *header,
                   const char *path,
                   rumor_buf *keep)
{
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    rumor_err rc = header != NULL
                       ? rumor_buf_append(&buf, header, strlen(header))
                       : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = rumor_topology_format(t, &buf);
    FILE *f = rc == RUMOR_OK ? fopen(path, "w") : NULL;
    int failed = f == NULL;
    if (f != NULL) {
        failed |= fwrite(buf.data, 1, buf.len, f) != buf.len;
        failed |= fclose(f) != 0;
    }
    if (failed && rc == RUMOR_OK)
        cli_io_error("launch",
                     path,
                     f ? "cannot write" : "cannot open for writing");
    else if (failed)
        fprintf(stderr,
                "rumor: cannot write %s: %s\n",
                path,
                rumor_strerror(rc));
    if (keep != NULL && !failed)
        *keep = buf;
    else
        rumor_buf_free(&buf);
    return failed ? -1 : 0;
}

/* Starts prog (NULL: this binary) with stdout and stderr on out_fd, env
 * ("NAME=VALUE", NULL-terminated, or NULL) added to the environment and,
 * when in_fd >= 0, stdin on in_fd in a process group of its own, so a
 * Ctrl-C at the terminal reaches only the launcher, which stops an ssh
 * child by closing its stdin. */
static pid_t
s_spawn(const char *prog,
        char *const *argv,
        char *const *env,
        int out_fd,
        int in_fd,
        pid_t parent)
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
    /* a node whose launcher died must stop through that SIGTERM (in step
     * with its neighbours, with a final checkpoint), not be killed by the
     * next line it writes to the reader-less pipe */
    signal(SIGPIPE, prog == NULL ? SIG_IGN : SIG_DFL);
    if (in_fd >= 0) {
        setpgid(0, 0);
        dup2(in_fd, STDIN_FILENO);
        close(in_fd);
    }
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    close(out_fd);
    for (size_t k = 0; env != NULL && env[k] != NULL; k++)
        putenv(env[k]);
    if (prog == NULL)
        execv("/proc/self/exe", argv);
    else
        execvp(prog, argv);
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

/* ssh carries no signal to the remote node: closing its stdin stops it,
 * and only SIGKILL goes to the ssh process itself. */
static void
s_signal_all(struct s_child *kids, size_t count, int sig)
{
    for (size_t k = 0; k < count; k++) {
        if (kids[k].remote && kids[k].in_fd >= 0 && sig != SIGKILL) {
            close(kids[k].in_fd);
            kids[k].in_fd = -1;
        } else if (kids[k].pid > 0 && (!kids[k].remote || sig == SIGKILL))
            kill(kids[k].pid, sig);
    }
}

static size_t
s_close_outputs(struct s_child *kids, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        if (kids[k].fd < 0)
            continue;
        if (kids[k].len > 0)
            s_emit_line(&kids[k]);
        close(kids[k].fd);
        kids[k].fd = -1;
    }
    return 0;
}

struct s_host {
    char dest[LAUNCH_HOST_BYTES]; /* what ssh is given: [USER@]HOST */
    char addr[LAUNCH_HOST_BYTES]; /* the address peers connect to */
    unsigned long long slots;
};

struct s_args {
    struct rumor_node_opts opts; /* as node 0 would get them */
    char topology[RUMOR_NODE_PATH_MAX];
    char metrics_dir[RUMOR_NODE_PATH_MAX];
    char **pass; /* node options passed through, NULL-terminated */
    size_t npass;
    bool insecure;
    /* --hosts */
    const char *hosts_file;
    unsigned long long base_port;
    const char *remote_dir;
    const char *remote_bin;
    unsigned long long restart; /* restarts per local node (--restart) */
    struct s_host *hosts;
    size_t nhosts;
    size_t *host_of; /* node -> index in hosts */
    rumor_buf topo;  /* the derived topology sent to every host */
    /* --nodes N: a generated ring of N local nodes */
    unsigned long long nodes;
    /* -- PROG ARGS: workers instead of `rumor node` */
    bool workers;
    struct launch_worker w;
};

/* Every node ran here: evaluate the average of the final models of
 * those that exited 0 after the run's last step (a node that stopped
 * sooner left a model of another run length, or none). */
static void
s_average(const struct s_args *a,
          uint32_t n,
          const struct s_child *kids,
          size_t count)
{
    bool use[LAUNCH_MAX_NODES] = {false};
    uint32_t used = 0;
    for (size_t k = 0; k < count; k++) {
        const struct s_child *c = &kids[k];
        use[c->id] = WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0 &&
                     !c->short_run;
        used += use[c->id];
    }
    if (used == 0) {
        printf("[launch] average model: not evaluated: no node ran every "
               "step\n");
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!use[i])
            printf("[launch] average model: node %u left out (it did not "
                   "run every step)\n",
                   i);
    struct node_average avg;
    struct rumor_diag diag = {0};
    rumor_err rc =
        node_average_evaluate(&a->opts, n, use, a->metrics_dir, &avg, &diag);
    n = used;
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

/* Takes launch's own --hosts options out of argv, in place; returns the
 * new argc, or -1 after a message. */
static int
s_take_own(int argc, char **argv, struct s_args *a)
{
    static const char *const names[] = {"--restart",
                                        "--hosts",
                                        "--base-port",
                                        "--remote-dir",
                                        "--rumor-path",
                                        "--nodes"};
    const size_t count = sizeof names / sizeof names[0];
    int out = 1, hosts_opts = 0;
    a->base_port = LAUNCH_BASE_PORT;
    a->restart = LAUNCH_RESTARTS;
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        while (k < count && strcmp(argv[i], names[k]) != 0)
            k++;
        if (k == count) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            fprintf(stderr, "rumor launch: %s needs a value\n", argv[i]);
            return -1;
        }
        const char *v = argv[++i];
        hosts_opts += k > 1 && k < 5;
        if (k == 0 && cli_parse_u64(v, "--restart", 0, 1000, &a->restart))
            return -1;
        else if (k == 1)
            a->hosts_file = v;
        else if (k == 3)
            a->remote_dir = v;
        else if (k == 4)
            a->remote_bin = v;
        else if (k == 5 &&
                 cli_parse_u64(v, "--nodes", 2, LAUNCH_MAX_NODES, &a->nodes))
            return -1;
        else if (k == 2 &&
                 cli_parse_u64(v, "--base-port", 1, 65535, &a->base_port))
            return -1;
    }
    if (a->hosts_file == NULL && hosts_opts > 0) {
        fprintf(stderr,
                "rumor launch: --base-port, --remote-dir and --rumor-path "
                "need --hosts\n");
        return -1;
    }
    return out;
}

/* --nodes N: a ring of N nodes on free local ports, with fresh keys, in
 * DIR/ring.topo (DIR/keys). */
static int
s_generate_topology(struct s_args *a,
                    rumor_node_config *cfg,
                    struct rumor_diag *diag)
{
    if (a->nodes == 0)
        return 0;
    if (a->topology[0] != '\0') {
        fprintf(stderr,
                "rumor launch: --nodes and --topology exclude each "
                "other\n");
        return 2;
    }
    if (a->hosts_file != NULL) {
        fprintf(stderr, "rumor launch: --hosts needs --topology FILE\n");
        return 2;
    }
    if (node_mkdirs(a->metrics_dir) != 0) {
        cli_io_error("launch", a->metrics_dir, "cannot create the directory");
        return 1;
    }
    char count[24];
    snprintf(count, sizeof count, "%llu", a->nodes);
    int len = snprintf(a->topology,
                       sizeof a->topology,
                       "%s/ring.topo",
                       a->metrics_dir);
    if (len < 0 || (size_t)len >= sizeof a->topology) {
        fprintf(stderr, "rumor launch: %s: too long\n", a->metrics_dir);
        return 2;
    }
    const char *args[] = {count};
    int status = cli_topo_gen_write("ring", args, 1, 1, true, a->topology);
    if (status == 0 &&
        rumor_node_config_set(cfg, "topology", a->topology, diag) != RUMOR_OK) {
        s_print_diag(diag);
        status = 2;
    }
    if (status == 0)
        printf("[launch] %s: a ring of %llu local nodes, keys in %s/keys\n",
               a->topology,
               a->nodes,
               a->metrics_dir);
    return status;
}

/* A worker's algorithm is the Peer's default (powergossip) unless launch
 * names one: what the restart policy asks about (s_can_continue). */
static int
s_worker_algo(struct s_args *a, rumor_node_config *cfg, struct rumor_diag *diag)
{
    if (a->w.algo_given)
        return 0;
    if (rumor_node_config_set(cfg, "algo", "powergossip", diag) == RUMOR_OK)
        return 0;
    s_print_diag(diag);
    return 2;
}

/* The node options of launch's command line into a->opts, checked as
 * node 0 would check them: 0, or an exit status. */
static int
s_parse_node(int argc, char **argv, struct s_args *a, rumor_node_config *cfg)
{
    const struct rumor_node_opts *opts = rumor_node_config_opts(cfg);
    struct rumor_diag diag = {0};
    if (cli_node_parse(argc, argv, cfg, &diag) != 0) {
        s_print_diag(&diag);
        return 2;
    }
    if (opts->metrics_dir[0] != '\0')
        snprintf(a->metrics_dir,
                 sizeof a->metrics_dir,
                 "%s",
                 opts->metrics_dir);
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
    a->insecure = opts->insecure;
    snprintf(a->topology, sizeof a->topology, "%s", opts->topology);
    int status = s_generate_topology(a, cfg, &diag);
    if (status != 0)
        return status;
    if (a->topology[0] == '\0') {
        fprintf(stderr,
                "rumor launch: --topology FILE or --nodes N is required\n");
        return 2;
    }
    a->w.insecure = a->insecure;
    if (a->workers && (launch_worker_options(&a->w, a->pass, a->npass) != 0 ||
                       s_worker_algo(a, cfg, &diag) != 0))
        return 2;
    /* check the node options as node 0 would, before starting anything */
    if (rumor_node_config_set(cfg, "id", "0", &diag) != RUMOR_OK ||
        (!opts->insecure &&
         rumor_node_config_set(cfg, "key", "keys/node-0", &diag) != RUMOR_OK) ||
        rumor_node_config_check(cfg, &diag) != RUMOR_OK) {
        s_print_diag(&diag);
        return 2;
    }
    a->opts = *opts;
    return 0;
}

static int
s_parse(int argc, char **argv, struct s_args *a)
{
    argc = s_take_own(argc, argv, a);
    if (argc < 0)
        return 2;
    snprintf(a->metrics_dir, sizeof a->metrics_dir, "%s", LAUNCH_DEFAULT_DIR);
    rumor_node_config *cfg = NULL;
    if (rumor_node_config_new(&cfg) != RUMOR_OK) {
        fprintf(stderr, "rumor launch: %s\n", rumor_strerror(RUMOR_ENOMEM));
        return 1;
    }
    int status = s_parse_node(argc, argv, a, cfg);
    rumor_node_config_destroy(&cfg);
    return status;
}

/* --- --hosts ------------------------------------------------------------ */

static int
s_host_bad(const struct s_args *a, int lineno, const char *what)
{
    fprintf(stderr, "%s:%d: %s\n", a->hosts_file, lineno, what);
    return 2;
}

/* One host line: [USER@]HOST [slots=N] [addr=ADDRESS]. */
static int
s_host_line(struct s_args *a, char *line, int lineno)
{
    static const char ws[] = " \t\r";
    char *p = line + strspn(line, ws);
    if (*p == '\0')
        return 0;
    if (a->nhosts == LAUNCH_MAX_NODES)
        return s_host_bad(a, lineno, "too many hosts");
    struct s_host *h = &a->hosts[a->nhosts];
    h->slots = 1;
    for (int field = 0; *p != '\0'; field++) {
        size_t len = strcspn(p, ws);
        char tok[LAUNCH_HOST_BYTES];
        if (len >= sizeof tok)
            return s_host_bad(a, lineno, "a field is too long");
        memcpy(tok, p, len);
        tok[len] = '\0';
        p += len;
        p += strspn(p, ws);
        if (field == 0 && tok[0] != '-')
            memcpy(h->dest, tok, len + 1);
        else if (field > 0 && strncmp(tok, "slots=", 6) == 0) {
            if (cli_parse_u64(tok + 6,
                              "slots",
                              1,
                              LAUNCH_MAX_NODES,
                              &h->slots) != 0)
                return s_host_bad(a, lineno, "bad slots=");
        } else if (field > 0 && strncmp(tok, "addr=", 5) == 0 && tok[5] != '\0')
            memcpy(h->addr, tok + 5, len - 4);
        else
            return s_host_bad(a,
                              lineno,
                              "expected [USER@]HOST [slots=N] [addr=ADDRESS]");
    }
    if (h->addr[0] == '\0') {
        const char *at = strrchr(h->dest, '@');
        snprintf(h->addr, sizeof h->addr, "%s", at != NULL ? at + 1 : h->dest);
    }
    a->nhosts++;
    return 0;
}

static int
s_load_hosts(struct s_args *a)
{
    FILE *f = fopen(a->hosts_file, "r");
    if (f == NULL) {
        cli_io_error("launch", a->hosts_file, "cannot open");
        return 2;
    }
    a->hosts = calloc(LAUNCH_MAX_NODES, sizeof *a->hosts);
    if (a->hosts == NULL) {
        fprintf(stderr, "rumor launch: out of memory\n");
        fclose(f);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, status = 0;
    while (status == 0 && getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "#\n")] = '\0';
        status = s_host_line(a, line, lineno);
    }
    free(line);
    fclose(f);
    if (status == 0 && a->nhosts == 0)
        status = s_host_bad(a, lineno, "no hosts");
    return status;
}

/* Node i goes to the next free slot; its endpoint is ADDRESS:BASE+i. */
static int
s_assign_hosts(struct s_args *a, rumor_topology *t)
{
    size_t n = rumor_topology_nodes(t), h = 0, used = 0;
    a->host_of = calloc(n, sizeof *a->host_of);
    if (a->host_of == NULL)
        return 1;
    for (size_t i = 0; i < n; i++) {
        while (h < a->nhosts && used == a->hosts[h].slots) {
            h++;
            used = 0;
        }
        if (h == a->nhosts || a->base_port + i > 65535) {
            fprintf(stderr,
                    "rumor launch: %s has too few slots (or ports from %llu) "
                    "for %zu nodes\n",
                    a->hosts_file,
                    a->base_port,
                    n);
            return 2;
        }
        a->host_of[i] = h;
        used++;
        const char *addr = a->hosts[h].addr;
        bool v6 = strchr(addr, ':') != NULL && addr[0] != '[';
        char endpoint[LAUNCH_HOST_BYTES + 32];
        snprintf(endpoint,
                 sizeof endpoint,
                 "tcp://%s%s%s:%llu",
                 v6 ? "[" : "",
                 addr,
                 v6 ? "]" : "",
                 a->base_port + i);
        struct rumor_diag diag = {0};
        if (rumor_topology_set_node(t, i, endpoint, NULL, &diag) != RUMOR_OK) {
            fprintf(stderr, "rumor launch: %s: %s\n", endpoint, diag.msg);
            return 2;
        }
    }
    return 0;
}

/* The derived topology: kept for the hosts and saved as DIR/hosts.topo. */
static int
s_derive_topology(struct s_args *a, const rumor_topology *t)
{
    char path[RUMOR_NODE_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hosts.topo", a->metrics_dir);
    return cli_topology_write(t, NULL, path, &a->topo) != 0;
}

/* Defaults of the remote directory and binary: this side's paths. */
static int
s_remote_paths(struct s_args *a, char *dir, char *bin)
{
    if (a->remote_dir == NULL) {
        if (realpath(a->metrics_dir, dir) == NULL)
            return 1;
        a->remote_dir = dir;
    }
    if (a->remote_bin == NULL) {
        if (realpath("/proc/self/exe", bin) == NULL)
            return 1;
        a->remote_bin = bin;
    }
    return 0;
}

/* Runs on each host under `sh -c`: $1 run directory, $2 node id, $3 the
 * binary, then node options (a worker: $3 is unused, then `env
 * NAME=VALUE... PROG ARGS`). stdin brings the secret key line (empty with
 * --insecure), the topology's size and the topology, then stays open: its
 * end (fd 3, as an asynchronous list's stdin is /dev/null) stops the
 * node. */
#define REMOTE_SETUP                                                          \
    "set -e; d=$1; id=$2; bin=$3; shift 3; umask 077; mkdir -p \"$d\"; "      \
    "IFS= read -r key; IFS= read -r size; k=; "                               \
    "if [ -n \"$key\" ]; then printf '%s\\n' \"$key\" >\"$d/node-$id.key\"; " \
    "k=\"$d/node-$id\"; fi; "                                                 \
    "head -c \"$size\" >\"$d/topology-$id\"; exec 3<&0; "
#define REMOTE_WAIT                                        \
    "</dev/null & pid=$!; "                                \
    "{ cat <&3; kill -TERM \"$pid\"; } >/dev/null 2>&1 & " \
    "exec 3<&-; set +e; wait \"$pid\"; exit $?"

static const char s_remote_script[] =
    REMOTE_SETUP "\"$bin\" node --topology \"$d/topology-$id\" --id \"$id\" "
                 "--metrics-dir \"$d\" ${k:+--key \"$k\"} \"$@\" " REMOTE_WAIT;

static const char s_remote_worker_script[] = REMOTE_SETUP
    "RUMOR_TOPOLOGY=\"$d/topology-$id\" RUMOR_NODE_ID=\"$id\" "
    "RUMOR_METRICS_DIR=\"$d\" RUMOR_KEY=\"$k\" \"$@\" " REMOTE_WAIT;

/* Appends text quoted for a POSIX shell ('...', with ' as '\''). */
static void
s_shell_quote(FILE *out, const char *text)
{
    fputc('\'', out);
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == '\'')
            fputs("'\\''", out);
        else
            fputc(*p, out);
    }
    fputc('\'', out);
}

/* Which of its host's slots node i takes. */
static size_t
s_host_slot(const struct s_args *a, size_t i)
{
    size_t slot = 0;
    for (size_t j = 0; j < i; j++)
        slot += a->host_of[j] == a->host_of[i];
    return slot;
}

/* `env NAME=VALUE... PROG ARGS` of a remote worker (not restarted: ssh
 * nodes never are). */
static int
s_remote_worker_args(FILE *out, const struct s_args *a, size_t node)
{
    char **env = launch_worker_env(&a->w, node, s_host_slot(a, node), 0, true);
    if (env == NULL)
        return -1;
    fputs(" env", out);
    for (size_t k = 0; env != NULL && env[k] != NULL; k++) {
        fputc(' ', out);
        s_shell_quote(out, env[k]);
    }
    for (size_t k = 0; a->w.argv[k] != NULL; k++) {
        fputc(' ', out);
        s_shell_quote(out, a->w.argv[k]);
    }
    launch_worker_env_free(env);
    return 0;
}

/* The command line ssh hands to the remote login shell. */
static char *
s_remote_command(const struct s_args *a, size_t node)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
        return NULL;
    fputs("sh -c ", out);
    s_shell_quote(out, a->workers ? s_remote_worker_script : s_remote_script);
    fputs(" rumor-launch ", out);
    s_shell_quote(out, a->remote_dir);
    fprintf(out, " %zu ", node);
    s_shell_quote(out, a->remote_bin);
    int failed = a->workers && s_remote_worker_args(out, a, node) != 0;
    for (size_t k = 0; !a->workers && k < a->npass; k++) {
        fputc(' ', out);
        s_shell_quote(out, a->pass[k]);
    }
    if (fclose(out) != 0 || failed) {
        free(text);
        return NULL;
    }
    return text;
}

static int
s_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t put = write(fd, p, len);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        p += put;
        len -= (size_t)put;
    }
    return 0;
}

/* Sends node i's secret key line, the topology's size and the topology. */
static int
s_send_payload(const struct s_args *a, int fd, const char *keydir, size_t i)
{
    char path[RUMOR_NODE_PATH_MAX + 64], head[64];
    rumor_buf key;
    rumor_buf_init(&key, 256);
    int failed = 0;
    if (!a->insecure) {
        snprintf(path, sizeof path, "%s/node-%zu.key", keydir, i);
        failed = rumor_buf_read_file(&key, path) != RUMOR_OK;
        while (!failed && key.len > 0 &&
               (key.data[key.len - 1] == '\n' || key.data[key.len - 1] == '\r'))
            key.len--;
        failed |= key.len != RUMOR_NET_ID_TEXT_BYTES ||
                  memchr(key.data, '\n', key.len) != NULL;
        failed |= s_write_all(fd, key.data, key.len);
    }
    int n = snprintf(head, sizeof head, "\n%zu\n", a->topo.len);
    failed |= s_write_all(fd, head, (size_t)n);
    failed |= s_write_all(fd, a->topo.data, a->topo.len);
    for (volatile uint8_t *p = key.data; p != NULL && p < key.data + key.alloc;
         p++)
        *p = 0; /* the secret leaves no copy behind */
    rumor_buf_free(&key);
    return failed;
}

static int
s_start_remote(const struct s_args *a,
               struct s_child *c,
               const char *keydir,
               size_t i,
               pid_t self)
{
    const struct s_host *h = &a->hosts[a->host_of[i]];
    char *cmd = s_remote_command(a, i);
    int out[2] = {-1, -1}, in[2] = {-1, -1};
    if (cmd == NULL || pipe(out) != 0 || pipe(in) != 0) {
        free(cmd);
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        fcntl(out[k], F_SETFD, FD_CLOEXEC);
        fcntl(in[k], F_SETFD, FD_CLOEXEC);
    }
    char *argv[] =
        {"ssh", "-o", "BatchMode=yes", "-T", (char *)h->dest, cmd, NULL};
    fflush(stdout);
    c->pid = s_spawn("ssh", argv, NULL, out[1], in[0], self);
    close(out[1]);
    close(in[0]);
    free(cmd);
    c->fd = out[0];
    c->in_fd = in[1];
    c->remote = true;
    if (c->pid < 0)
        return 1;
    printf("[launch] node %zu: ssh %s (pid %d), listening on %s\n",
           i,
           h->dest,
           (int)c->pid,
           h->addr);
    if (s_send_payload(a, c->in_fd, keydir, i) != 0)
        printf("[launch] node %zu: could not send its key and topology to "
               "%s\n",
               i,
               h->dest);
    return 0;
}

/* --- local children ------------------------------------------------------ */

/* Starts local node i; a restart (mode "--resume" or "--join") comes
 * last on the command line, so it overrides a --resume or --join the
 * node options (or their config file) may hold. */
/* A worker of -- PROG ARGS, with its identity in the environment. */
static int
s_start_worker(const struct s_args *a, struct s_child *c, pid_t self)
{
    char **env = launch_worker_env(&a->w, c->id, c->local, c->restarts, false);
    int fds[2];
    if (env == NULL || pipe(fds) != 0) {
        launch_worker_env_free(env);
        return 1;
    }
    fflush(stdout);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    c->pid = s_spawn(a->w.argv[0], a->w.argv, env, fds[1], -1, self);
    close(fds[1]);
    c->fd = fds[0];
    launch_worker_env_free(env);
    if (c->pid < 0)
        return 1;
    if (c->restarts == 0)
        printf("[launch] node %u: %s, pid %d\n",
               c->id,
               a->w.argv[0],
               (int)c->pid);
    else
        printf("[launch] node %u restarted with RUMOR_JOIN=1: pid %d\n",
               c->id,
               (int)c->pid);
    return 0;
}

static int
s_start_local(const struct s_args *a,
              struct s_child *c,
              const char *keydir,
              size_t i,
              pid_t self,
              const char *mode)
{
    if (a->workers)
        return s_start_worker(a, c, self);
    char id[24], key[RUMOR_NODE_PATH_MAX + 64];
    snprintf(id, sizeof id, "%zu", i);
    snprintf(key, sizeof key, "%s/node-%zu", keydir, i);
    char **argv2 = calloc(a->npass + 16, sizeof *argv2);
    int fds[2];
    if (argv2 == NULL || pipe(fds) != 0) {
        free(argv2);
        return 1;
    }
    size_t k = 0;
    argv2[k++] = "rumor";
    argv2[k++] = "node";
    argv2[k++] = "--topology";
    argv2[k++] = (char *)a->topology;
    argv2[k++] = "--id";
    argv2[k++] = id;
    if (!a->insecure) {
        argv2[k++] = "--key";
        argv2[k++] = key;
    }
    argv2[k++] = "--metrics-dir";
    argv2[k++] = (char *)a->metrics_dir;
    for (size_t p = 0; p < a->npass; p++)
        argv2[k++] = a->pass[p];
    char listen[RUMOR_NODE_LISTEN_BYTES + 32];
    if (a->opts.metrics_listen[0] != '\0' &&
        launch_listen_shift(a->opts.metrics_listen, i, listen, sizeof listen) ==
            0) {
        argv2[k++] = "--metrics-listen";
        argv2[k++] = listen;
    }
    bool resume = mode != NULL && strcmp(mode, "--resume") == 0;
    if (mode != NULL)
        argv2[k++] = resume ? "--no-join" : "--join";
    /* --no-resume alone would need --checkpoint-dir */
    if (mode != NULL && (resume || a->opts.checkpoint_dir[0] != '\0'))
        argv2[k++] = resume ? "--resume" : "--no-resume";
    fflush(stdout);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    c->pid = s_spawn(NULL, argv2, NULL, fds[1], -1, self);
    close(fds[1]);
    c->fd = fds[0];
    free(argv2);
    if (c->pid < 0)
        return 1;
    if (mode == NULL)
        printf("[launch] node %zu: pid %d\n", i, (int)c->pid);
    else
        printf("[launch] node %zu restarted with %s: pid %d\n",
               i,
               mode,
               (int)c->pid);
    return 0;
}

/* --- supervision ------------------------------------------------------- */

/* The children and what it takes to restart one. */
struct s_sup {
    const struct s_args *a;
    const rumor_topology *t;
    const char *keydir;
    pid_t self;
    struct s_child *kids;
    size_t count;
    size_t alive;   /* children not reaped */
    size_t open;    /* output pipes not at EOF */
    size_t pending; /* restarts not yet due */
    bool interrupted, failed;
    int can_continue; /* the algorithm goes on without a node; -1: not
                         asked */
    uint64_t kill_at;
};

/* Whether the nodes' algorithm goes on without a node, on the model node
 * 0 trains: a gossip algorithm that skips it (rumor_gossip_can_skip, what
 * the fault path asks) or a ring algorithm, whose ring re-forms over the
 * live members (issue 23; a Python worker's too). Asked once, at the first
 * failure. A model that cannot be built here counts as an algorithm that cannot
 * go on: the run stops as without restarts. */
static bool
s_can_continue(struct s_sup *s)
{
    if (s->can_continue >= 0)
        return s->can_continue > 0;
    const struct rumor_node_opts *o = &s->a->opts;
    struct rumor_dataset *data = NULL;
    rumor_workload *w = NULL;
    rumor_gossip *g = NULL;
    struct rumor_diag diag = {0};
    struct rumor_workload_opts wo = o->workload;
    rumor_err rc = RUMOR_OK;
    if (o->dataset[0] != '\0')
        rc = rumor_dataset_open(o->dataset, wo.seed, &data, &diag);
    wo.dataset = data;
    wo.node = 0;
    wo.nodes = (uint32_t)rumor_topology_nodes(s->t);
    wo.want_cuda = false;
    if (rc == RUMOR_OK)
        rc = rumor_workload_new(&wo, &w, &diag);
    struct rumor_gossip_opts go = o->gossip;
    go.seed = o->workload.seed;
    if (rc == RUMOR_OK)
        rc = rumor_gossip_new(&go, s->t, 0, rumor_workload_model(w), &g, &diag);
    s->can_continue = rc == RUMOR_OK &&
                      (rumor_gossip_can_skip(g) || rumor_gossip_uses_ring(g));
    rumor_gossip_destroy(&g);
    rumor_workload_destroy(&w);
    rumor_dataset_destroy(&data);
    return s->can_continue > 0;
}

/* Ends the run: every child gets sig, pending restarts are dropped, and
 * the children still alive after the grace period will be killed. */
static void
s_stop_all(struct s_sup *s, int sig)
{
    for (size_t k = 0; k < s->count; k++)
        if (s->kids[k].restart_at != 0) {
            s->kids[k].restart_at = 0;
            s->pending--;
        }
    s_signal_all(s->kids, s->count, sig);
    if (s->kill_at == UINT64_MAX)
        s->kill_at = rumor_clock_ns() + LAUNCH_GRACE_MS * 1000000ull;
}

/* --resume when node c has a good checkpoint (*step: its step), else
 * --join. */
static const char *
s_restart_mode(const struct s_sup *s, const struct s_child *c, uint64_t *step)
{
    const char *dir = s->a->opts.checkpoint_dir;
    *step = 0;
    /* a worker's checkpoints are its script's: it resumes from them
     * itself (RUMOR_RESTART), or joins */
    if (dir[0] == '\0' || s->a->workers)
        return "--join";
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    struct rumor_checkpoint ck;
    char path[RUMOR_NODE_PATH_MAX + 64];
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_checkpoint_read_newest(dir,
                                                c->id,
                                                &buf,
                                                &ck,
                                                path,
                                                sizeof path,
                                                &diag);
    if (rc == RUMOR_OK)
        *step = ck.step;
    rumor_buf_free(&buf);
    return rc == RUMOR_OK ? "--resume" : "--join";
}

/* Schedules the restart of node c, which failed (what: how). The first
 * restart is immediate; each further one waits LAUNCH_BACKOFF_MS more, so
 * a node that cannot start does not spin. */
static void
s_schedule_restart(struct s_sup *s, struct s_child *c, const char *what)
{
    uint64_t step = 0;
    c->mode = s_restart_mode(s, c, &step);
    c->restart_at = rumor_clock_ns() + 1 +
                    (uint64_t)c->restarts * LAUNCH_BACKOFF_MS * 1000000ull;
    c->restarts++;
    s->pending++;
    printf("[launch] node %u %s: restarting it with %s", c->id, what, c->mode);
    if (step > 0)
        printf(" from step %llu", (unsigned long long)step);
    printf(" (attempt %u/%llu)\n", c->restarts, s->a->restart);
}

/* Node c failed (what: how) in a run whose algorithm goes on without a
 * node: restart it, unless it has had its restarts or nobody is left to
 * take it back; either way the others go on. */
static void
s_retry(struct s_sup *s, struct s_child *c, const char *what)
{
    if (c->restarts < s->a->restart && s->alive > 0)
        s_schedule_restart(s, c, what);
    else if (c->restarts < s->a->restart)
        printf("[launch] node %u %s: not restarted, no other node is "
               "running\n",
               c->id,
               what);
    else
        printf("[launch] node %u %s: gave up after %u restart%s; the "
               "others go on without it\n",
               c->id,
               what,
               c->restarts,
               c->restarts == 1 ? "" : "s");
}

/* The step of the last line of DIR/node-ID.jsonl (0 when none); *found:
 * whether the file has a line with one. */
static uint64_t
s_last_step(const char *dir, uint32_t id, bool *found)
{
    char path[RUMOR_NODE_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/node-%u.jsonl", dir, id);
    FILE *f = fopen(path, "re");
    static char line[1 << 16];
    uint64_t step = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
            step = (uint64_t)v->valuedouble;
            *found = true;
        }
        cJSON_Delete(o);
    }
    if (f != NULL)
        fclose(f);
    return step;
}

/* Whether child c, which exited 0, stopped before the run's last step
 * by its metrics (a node without any did too; an ssh node's stay on its
 * host; a worker's steps are its script's unless launch was given
 * --steps, and a worker that writes no metrics says nothing); said,
 * unless the launcher stopped it. */
static bool
s_ran_short(const struct s_sup *s, const struct s_child *c)
{
    const struct s_args *a = s->a;
    if (c->remote || (a->workers && !a->w.steps_given))
        return false;
    bool found = false;
    uint64_t last = s_last_step(a->metrics_dir, c->id, &found);
    if (last >= a->opts.steps || (a->workers && !found))
        return false;
    if (!s->interrupted && !s->failed)
        printf("[launch] node %u exited 0 after step %llu of %llu: it did "
               "not run every step (a stop, or a peer's claim; see its "
               "log): a failure, left out of the average model\n",
               c->id,
               (unsigned long long)last,
               (unsigned long long)a->opts.steps);
    return true;
}

/* What to do about child c that ended with wait status ws. */
static void
s_on_exit(struct s_sup *s, struct s_child *c, int ws)
{
    char what[64];
    if (WIFEXITED(ws))
        snprintf(what, sizeof what, "exited with status %d", WEXITSTATUS(ws));
    else
        snprintf(what, sizeof what, "killed by signal %d", WTERMSIG(ws));
    bool ok = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    c->short_run = ok && s_ran_short(s, c);
    bool restartable = !c->remote && s->a->restart > 0;
    /* rumor node's statuses for options it refused, a neighbour that
     * refused it at the handshake, and a diverged run: the same
     * configuration would fail the same way again. */
    bool misconfigured =
        WIFEXITED(ws) &&
        (WEXITSTATUS(ws) == 2 || WEXITSTATUS(ws) == CLI_EXIT_DIVERGED);
    if (!ok && !s->interrupted && !s->failed && restartable && !misconfigured &&
        s_can_continue(s)) {
        s_retry(s, c, what);
        return;
    }
    printf("[launch] node %u %s\n", c->id, what);
    if (ok || s->interrupted || s->failed)
        return;
    if (misconfigured)
        printf("[launch] node %u %s (see its error above); restarting it "
               "would not help: stopping the others\n",
               c->id,
               WEXITSTATUS(ws) == 2 ? "was refused its configuration"
                                    : "diverged");
    else if (restartable)
        printf("[launch] --algo %s cannot continue without node %u (it "
               "neither skips a missing node nor re-forms a ring without "
               "it): stopping the others\n",
               s->a->opts.gossip.algo,
               c->id);
    else
        printf("[launch] node %u failed: stopping the others\n", c->id);
    s->failed = true;
    s_stop_all(s, SIGTERM);
}

/* What is left in the pipe of a dead incarnation, before the next one
 * gets a pipe of its own. */
static void
s_flush_output(struct s_sup *s, struct s_child *c)
{
    while (c->fd >= 0) {
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) {
            if (c->len > 0)
                s_emit_line(c);
            close(c->fd);
            c->fd = -1;
        } else
            s_drain(c);
        if (c->fd < 0)
            s->open--;
    }
}

static void
s_restart_due(struct s_sup *s)
{
    uint64_t now = rumor_clock_ns();
    for (size_t k = 0; k < s->count; k++) {
        struct s_child *c = &s->kids[k];
        if (c->restart_at == 0 || now < c->restart_at)
            continue;
        c->restart_at = 0;
        s->pending--;
        s_flush_output(s, c);
        int rc = s_start_local(s->a, c, s->keydir, c->id, s->self, c->mode);
        if (rc != 0 || c->pid <= 0) {
            printf("[launch] node %u: cannot restart it: %s\n",
                   c->id,
                   strerror(errno));
            c->pid = 0;
            if (c->fd >= 0)
                close(c->fd);
            c->fd = -1;
            continue;
        }
        s->alive++;
        s->open++;
    }
}

/* Reaps the children that ended and acts on each. */
static void
s_reap(struct s_sup *s)
{
    for (size_t k = 0; k < s->count; k++) {
        struct s_child *c = &s->kids[k];
        int st = 0;
        if (c->pid <= 0 || waitpid(c->pid, &st, WNOHANG) != c->pid)
            continue;
        c->pid = 0;
        c->status = st;
        s->alive--;
        if (c->in_fd >= 0)
            close(c->in_fd);
        c->in_fd = -1;
        s_on_exit(s, c, st);
        fflush(stdout);
    }
}

static void
s_read_outputs(struct s_sup *s, const struct pollfd *fds, size_t nfds)
{
    for (size_t k = 0, f = 1; k < s->count; k++) {
        struct s_child *c = &s->kids[k];
        if (c->fd < 0)
            continue;
        if (f < nfds && fds[f].fd == c->fd &&
            (fds[f].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            s_drain(c);
            if (c->fd < 0)
                s->open--;
        }
        f++;
    }
}

/* Runs the children, restarting those that fail when the run allows it,
 * until every one is reaped; returns the exit status. */
static int
s_supervise(struct s_sup *s)
{
    struct pollfd fds[LAUNCH_MAX_NODES + 1];
    uint64_t drain_until = 0;
    while (s->alive > 0 || s->open > 0 || s->pending > 0) {
        size_t nfds = 0;
        fds[nfds++] = (struct pollfd){s_sigpipe[0], POLLIN, 0};
        for (size_t k = 0; k < s->count; k++)
            if (s->kids[k].fd >= 0)
                fds[nfds++] = (struct pollfd){s->kids[k].fd, POLLIN, 0};
        int ready = poll(fds, (nfds_t)nfds, 100);
        if (ready < 0 && errno != EINTR)
            break;
        unsigned char sig = 0;
        if (ready > 0 && (fds[0].revents & POLLIN) != 0 &&
            read(s_sigpipe[0], &sig, 1) == 1) {
            printf("[launch] signal %d: forwarding to the nodes\n", sig);
            s->interrupted = true;
            s_stop_all(s, sig);
        }
        s_read_outputs(s, fds, ready > 0 ? nfds : 0);
        s_reap(s);
        s_restart_due(s);
        if (s->alive > 0 && rumor_clock_ns() >= s->kill_at) {
            printf("[launch] nodes still running after %d ms: killing them\n",
                   LAUNCH_GRACE_MS);
            s_signal_all(s->kids, s->count, SIGKILL);
            s->kill_at = UINT64_MAX - 1;
        }
        /* every child is reaped: output still open belongs to something
         * they left behind, which gets a short while to finish */
        bool over = s->alive == 0 && s->pending == 0;
        if (over && drain_until == 0)
            drain_until = rumor_clock_ns() + LAUNCH_DRAIN_MS * 1000000ull;
        if (over && rumor_clock_ns() >= drain_until)
            s->open = s_close_outputs(s->kids, s->count);
    }
    int status = 0;
    for (size_t k = 0; k < s->count; k++) {
        int st = s->kids[k].status;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || s->kids[k].short_run)
            status = 1;
    }
    return s->interrupted ? 130 : status;
}

/* --- main ------------------------------------------------------------------
 */

static int
s_load_topology(const struct s_args *a, rumor_topology **t)
{
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_load_file(a->topology, t, &diag);
    if (rc != RUMOR_OK) {
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        fprintf(stderr, "rumor launch: %s\n", text);
        return 2;
    }
    if (rumor_topology_nodes(*t) > LAUNCH_MAX_NODES) {
        fprintf(stderr, "rumor launch: more than %d nodes\n", LAUNCH_MAX_NODES);
        return 2;
    }
    return 0;
}

/* Which nodes start here (all of them with --hosts), their keys, the run
 * directory and, with --hosts, the endpoints and the derived topology. */
static int
s_setup(struct s_args *a, rumor_topology *t, bool *start, const char *keydir)
{
    size_t n = rumor_topology_nodes(t), count = 0;
    bool hosts = a->hosts_file != NULL;
    int status = hosts ? s_load_hosts(a) : 0;
    if (status == 0 && hosts)
        status = s_assign_hosts(a, t);
    for (size_t i = 0; i < n && status == 0; i++) {
        const char *ep = rumor_topology_endpoint(t, i);
        start[i] = hosts || (ep != NULL && s_is_local(ep));
        count += start[i];
    }
    if (status == 0 && count == 0) {
        fprintf(stderr,
                "rumor launch: no node of %s has a local endpoint\n",
                a->topology);
        status = 2;
    }
    if (status == 0 && !a->insecure)
        status = s_prepare_keys(t, a->topology, keydir, start, !hosts);
    if (status == 0 && node_mkdirs(a->metrics_dir) != 0) {
        cli_io_error("launch", a->metrics_dir, "cannot create the directory");
        status = 1;
    }
    if (status == 0 && hosts)
        status = s_derive_topology(a, t);
    return status;
}

static void
s_catch_signals(void)
{
    fcntl(s_sigpipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(s_sigpipe[1], F_SETFD, FD_CLOEXEC);
    fcntl(s_sigpipe[1], F_SETFL, O_NONBLOCK);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* a remote node that died closes its ssh: a write then fails, and the
     * supervision reports the exit */
    signal(SIGPIPE, SIG_IGN);
}

/* Starts every node marked in start, then supervises; returns the status. */
static int
s_run(struct s_args *a,
      const rumor_topology *t,
      const bool *start,
      const char *keydir)
{
    size_t n = rumor_topology_nodes(t);
    struct s_child *kids = calloc(n, sizeof *kids);
    if (kids == NULL || pipe(s_sigpipe) != 0) {
        free(kids);
        return 1;
    }
    for (size_t k = 0; k < n; k++)
        kids[k].fd = kids[k].in_fd = -1;
    s_catch_signals();
    char rdir[PATH_MAX], rbin[PATH_MAX];
    if (a->hosts_file != NULL && s_remote_paths(a, rdir, rbin) != 0) {
        fprintf(stderr, "rumor launch: cannot resolve the remote paths\n");
        free(kids);
        return 1;
    }
    printf("[launch] %s node(s) of %s; logs in %s\n",
           a->hosts_file != NULL ? "ssh" : "local",
           a->topology,
           a->metrics_dir);
    size_t started = 0, count = 0;
    int status = 0;
    pid_t self = getpid();
    for (size_t i = 0; i < n && status == 0; i++) {
        if (!start[i])
            continue;
        count++;
        struct s_child *c = &kids[started];
        char logp[RUMOR_NODE_PATH_MAX + 64];
        snprintf(logp, sizeof logp, "%s/node-%zu.log", a->metrics_dir, i);
        c->id = (uint32_t)i;
        c->local = a->hosts_file != NULL ? s_host_slot(a, i) : started;
        c->log = fopen(logp, "we");
        if (c->log == NULL) /* the node's lines still reach the terminal */
            cli_io_error("launch", logp, "cannot open for writing");
        status = a->hosts_file != NULL
                     ? s_start_remote(a, c, keydir, i, self)
                     : s_start_local(a, c, keydir, i, self, NULL);
        if (c->pid > 0)
            started++;
        else if (c->fd >= 0)
            close(c->fd);
        if (status != 0)
            fprintf(stderr,
                    "rumor launch: cannot start node %zu: %s\n",
                    i,
                    strerror(errno));
    }
    fflush(stdout);
    struct s_sup sup = {.a = a,
                        .t = t,
                        .keydir = keydir,
                        .self = self,
                        .kids = kids,
                        .count = started,
                        .alive = started,
                        .open = started,
                        .failed = status != 0,
                        .can_continue = -1,
                        .kill_at = UINT64_MAX};
    if (status != 0)
        s_stop_all(&sup, SIGTERM);
    int run_status = s_supervise(&sup);
    if (status == 0)
        status = run_status;
    if (status != 2 && !sup.interrupted && count == n &&
        a->hosts_file == NULL && !a->workers)
        s_average(a, (uint32_t)n, kids, started);
    for (size_t k = 0; k < n; k++) {
        if (kids[k].log != NULL)
            fclose(kids[k].log);
        if (kids[k].in_fd >= 0)
            close(kids[k].in_fd);
    }
    free(kids);
    return status;
}

int
cli_launch_main(int argc, char **argv)
{
    struct s_args a = {0};
    a.pass = calloc((size_t)argc + 1, sizeof *a.pass);
    if (a.pass == NULL)
        return 1;
    /* -- PROG ARGS: the workers' command line */
    for (int i = 1; i < argc && !a.workers; i++)
        if (strcmp(argv[i], "--") == 0) {
            a.workers = true;
            a.w.argv = argv + i + 1;
            argc = i;
        }
    int status = 0;
    if (a.workers && a.w.argv[0] == NULL) {
        fprintf(stderr,
                "rumor launch: nothing after --: give the worker's "
                "command, e.g. -- python3 train.py\n");
        status = 2;
    }
    if (status == 0)
        status = s_parse(argc, argv, &a);
    rumor_topology *t = NULL;
    bool start[LAUNCH_MAX_NODES] = {false};
    char keydir[RUMOR_NODE_PATH_MAX + 8];
    char dir[RUMOR_NODE_PATH_MAX];
    s_dirname(a.topology[0] != '\0' ? a.topology : ".", dir, sizeof dir);
    snprintf(keydir, sizeof keydir, "%s/keys", dir);
    if (status == 0)
        status = s_load_topology(&a, &t);
    if (status == 0)
        status = s_setup(&a, t, start, keydir);
    if (status == 0 && a.workers) {
        a.w.nodes = rumor_topology_nodes(t);
        status = launch_worker_paths(&a.w, a.topology, a.metrics_dir, keydir);
    }
    if (status == 0) {
        status = s_run(&a, t, start, keydir);
        printf("[launch] %s (exit %d)\n",
               status == 0     ? "all nodes finished"
               : status == 130 ? "interrupted"
                               : "a node failed",
               status);
    }
    rumor_topology_destroy(&t);
    launch_worker_free(&a.w);
    rumor_buf_free(&a.topo);
    free(a.host_of);
    free(a.hosts);
    free(a.pass);
    return status;
}
