/*
 * `rumor node`: one node process. Options come from an optional INI file
 * (--config FILE, applied first) and the command line (applied after, so
 * the command line wins); both go through rumor_node_config_set, so a key in
 * the file and a long option are the same thing. SIGINT and SIGTERM ask
 * the run to stop (the handler only stores an atomic flag, which is
 * async-signal-safe): every node of the run stops after the same step,
 * writes a final checkpoint when --checkpoint-dir is set, joins its
 * threads and closes its sockets. SIGTERM is how supervisors (Slurm,
 * Kubernetes, rumor launch on a failure) end a job in order, so it exits
 * 0; SIGINT is a person's Ctrl-C and exits 130 as shells expect.
 * Exit status: 0 done or stopped by SIGTERM, 1 the run failed (a
 * neighbour missed a deadline, I/O, the topology file), 2 bad options or
 * a refusal at the handshake, 3 divergence, 130 interrupted by SIGINT.
 * The soft descriptor limit is raised to the hard one (at most 65536):
 * libzmq accepts every connection to the node's port, idle ones too, and
 * each holds a descriptor, so the usual soft limit of 1024 is a few
 * hundred idle connections away from a node that cannot write its files.
 */
#include "rumor/node.h"

#include "cli/cli.h"
#include "node/runtime_impl.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define NODE_NOFILE_MAX 65536 /* a raised soft limit, at most */

static rumor_node *volatile s_running;
static volatile sig_atomic_t s_signal; /* the first stop signal */

void
cli_node_help(FILE *out)
{
    fprintf(out,
            "usage: rumor node --topology FILE --id N --key DIR/NAME "
            "[options]\n"
            "       rumor node --config FILE [options]\n\n"
            "Runs one node of a decentralized training run. Main options:\n"
            "  --workload lsq|logreg|mlp   --hidden 64,32   --dataset SPEC\n"
            "  --shard iid|dirichlet:ALPHA --batch N        --seed S\n"
            "  --optimizer sgd|momentum|nesterov  --lr X  --momentum X\n"
            "  --weight-decay X  --warmup N  --decay-every N  --decay-factor "
            "X\n"
            "  --algo dpsgd|choco|powergossip|powersgd|allreduce|localsgd|\n"
            "         deepsqueeze|moniqua  --codec SPEC  --gamma G  --rank R\n"
            "  --iterations I  --period H  --exchange auto|model|gradient\n"
            "  --steps N  --deadline-ms MS  --connect-timeout-ms MS\n"
            "  --no-overlap  --consensus-every K  --ef-alpha A\n"
            "  --ef ef|ef-decay:BETA|dgc:MU[,CLIP][,WARMUP]|saef (allreduce\n"
            "    with --codec: compressed data-parallel SGD; localsgd with\n"
            "    --delta-codec)\n"
            "  --fragments F (localsgd: the model synced in F parts at "
            "staggered steps)\n"
            "  --stale S (the exchange of step t lands at step t + S, the "
            "steps\n"
            "    in between computed meanwhile; localsgd: S <= period)\n"
            "  --eval-every K  --metrics-dir DIR  --log-level LEVEL\n"
            "  --rate BITS/S  --delay-ms MS  --insecure  --progress "
            "auto|on|off\n"
            "  --deadline-factor F  --down-after K  --clip-norm X  --join\n"
            "  --robust clip|off  --clip-quantile Q  --clip-factor F\n"
            "  powersgd: --start-powersgd-iter N  --min-compression-rate X\n"
            "  --no-use-error-feedback  --no-warm-start  --one-sided\n"
            "  --orthogonalization-epsilon E  "
            "--no-batch-tensors-with-same-shape\n"
            "  powergossip: --no-warm-start (a fresh factor every "
            "iteration)\n\n"
            "Flags: --insecure, --cuda, --join, --one-sided, --overlap, "
            "--use-error-feedback,\n--warm-start, "
            "--batch-tensors-with-same-shape (the last four on; --no-NAME).\n"
            "Every option name (also the keys of the --config INI file):");
    node_opts_print(out);
    fprintf(out, "\nSee docs/node.md for defaults and the metrics format.\n");
}

/* As Go's runtime does at start (and for the reason in the comment at the
 * top); a failure leaves the limit as it was. */
static void
s_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > NODE_NOFILE_MAX
                      ? NODE_NOFILE_MAX
                      : rl.rlim_max;
    if (want <= rl.rlim_cur)
        return;
    rl.rlim_cur = want;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

static void
s_on_signal(int sig)
{
    if (s_signal == 0)
        s_signal = sig;
    rumor_node *node = s_running;
    if (node != NULL)
        rumor_node_stop(node);
}

static int
s_fail(const char *what, const struct rumor_diag *diag, rumor_err rc)
{
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    if (diag->msg[0] != '\0')
        rumor_diag_format(diag, text, sizeof text);
    else
        snprintf(text, sizeof text, "%s", rumor_strerror(rc));
    fprintf(stderr, "rumor %s: %s\n", what, text);
    return rc == RUMOR_EINVAL ? 2 : 1;
}

int
cli_node_each_option(int argc,
                     char **argv,
                     int (*fn)(void *ctx,
                               const char *name,
                               const char *value,
                               struct rumor_diag *diag),
                     void *ctx,
                     struct rumor_diag *diag)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            rumor_diag_set(diag, "", 0, 0, "unexpected argument '%s'", arg);
            return -1;
        }
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        size_t len = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (len >= sizeof name) {
            rumor_diag_set(diag, "", 0, 0, "unknown option %s", arg);
            return -1;
        }
        memcpy(name, arg + 2, len);
        name[len] = '\0';
        const char *value = eq != NULL ? eq + 1 : NULL;
        if (value == NULL && strncmp(name, "no-", 3) == 0 &&
            rumor_node_opts_is_flag(name + 3)) {
            /* --no-overlap: a flag turned off */
            memmove(name, name + 3, strlen(name + 3) + 1);
            value = "false";
        } else if (value == NULL && rumor_node_opts_is_flag(name))
            value = "";
        else if (value == NULL &&
                 (rumor_node_opts_known(name) || strcmp(name, "config") == 0)) {
            if (i + 1 >= argc) {
                rumor_diag_set(diag, "", 0, 0, "--%s needs a value", name);
                return -1;
            }
            value = argv[++i];
        } else if (value == NULL) {
            value = "";
        }
        if (fn(ctx, name, value, diag) != 0)
            return -1;
    }
    return 0;
}

static int
s_set_option(void *ctx,
             const char *name,
             const char *value,
             struct rumor_diag *diag)
{
    if (strcmp(name, "config") == 0)
        return 0;
    return rumor_node_config_set(ctx, name, value, diag) == RUMOR_OK ? 0 : -1;
}

int
cli_node_parse(int argc,
               char **argv,
               rumor_node_config *cfg,
               struct rumor_diag *diag)
{
    /* the file first, so the command line overrides it */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                rumor_diag_set(diag, "", 0, 0, "--config needs a FILE");
                return -1;
            }
            if (rumor_node_config_load(cfg, argv[i + 1], diag) != RUMOR_OK)
                return -1;
        }
    return cli_node_each_option(argc, argv, s_set_option, cfg, diag);
}

/* The options of the command line, checked; *opts is only set on
 * success. */
static rumor_err
s_node_opts(int argc,
            char **argv,
            struct rumor_node_opts *opts,
            struct rumor_diag *diag)
{
    rumor_node_config *cfg = NULL;
    rumor_err rc = rumor_node_config_new(&cfg);
    if (rc != RUMOR_OK)
        return rc;
    if (cli_node_parse(argc, argv, cfg, diag) != 0)
        rc = RUMOR_EINVAL;
    else
        rc = rumor_node_config_check(cfg, diag);
    if (rc == RUMOR_OK)
        *opts = *rumor_node_config_opts(cfg);
    rumor_node_config_destroy(&cfg);
    return rc;
}

int
cli_node_main(int argc, char **argv)
{
    struct rumor_node_opts opts;
    struct rumor_diag diag = {0};
    rumor_err rc = s_node_opts(argc, argv, &opts, &diag);
    if (rc != RUMOR_OK)
        return s_fail("node", &diag, rc);
    s_raise_nofile();
    /* before the node exists, so a signal during its set-up is kept */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rumor_node *node = NULL;
    rc = rumor_node_new(&opts, &node, &diag);
    if (rc != RUMOR_OK)
        return s_fail("node", &diag, rc);
    s_running = node;
    if (s_signal != 0)
        rumor_node_stop(node);
    rc = rumor_node_run(node, &diag);
    struct rumor_node_summary sum;
    rumor_node_summary(node, &sum);
    s_running = NULL;
    rumor_node_destroy(&node);
    if (rc != RUMOR_OK && sum.refused) /* another node's configuration */
        return s_fail("node", &diag, RUMOR_EINVAL);
    if (rc != RUMOR_OK && sum.diverged) {
        s_fail("node", &diag, rc);
        return CLI_EXIT_DIVERGED;
    }
    if (rc != RUMOR_OK)
        return s_fail("node", &diag, rc == RUMOR_EINVAL ? RUMOR_EIO : rc);
    if (sum.stopped && s_signal == SIGINT)
        return 130;
    return 0;
}
