/*
 * The `rumor` command: one binary with subcommands, as git or docker. This
 * file only dispatches; each subcommand lives in its own file with its help.
 * exit() is used here only (R4.8): subcommands return a status.
 */
#include "rumor/core.h"

#include "bench/bench.h"
#include "cli/cli.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_help_main(int argc, char **argv);
static void s_help_help(FILE *out);
static int s_version_main(int argc, char **argv);

static const struct cli_command s_commands[] = {
    {"topo",
     "generate, check and draw topologies",
     cli_topo_main,
     cli_topo_help},
    {"keygen",
     "make a CURVE keypair for a node",
     cli_keygen_main,
     cli_keygen_help},
    {"ping", "exchange checked messages", cli_ping_main, cli_ping_help},
    {"lowrank",
     "low-rank compression ratios for a model's shapes",
     cli_lowrank_main,
     cli_lowrank_help},
    {"sim",
     "run gossip algorithms on a topology in one process",
     cli_sim_main,
     cli_sim_help},
    {"node", "run one node of a training run", cli_node_main, cli_node_help},
    {"launch",
     "run every local node of a topology as child processes",
     cli_launch_main,
     cli_launch_help},
    {"compose",
     "a docker-compose file for a topology",
     cli_compose_main,
     cli_compose_help},
    {"plot",
     "PNG plots of a run's metrics (gnuplot)",
     cli_plot_main,
     cli_plot_help},
    {"bench",
     "run benchmarks against same-run references",
     bench_main,
     bench_help},
    {"version",
     "print the version and the compute backends",
     s_version_main,
     NULL},
    {"help", "show help for a subcommand", s_help_main, s_help_help},
};

#define COMMAND_COUNT (sizeof s_commands / sizeof s_commands[0])

static void
s_usage(FILE *out)
{
    fprintf(out,
            "usage: rumor [--help] [--version] COMMAND [ARGS...]\n\n"
            "Decentralized training with compressed gossip.\n\ncommands:\n");
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        fprintf(out, "  %-9s %s\n", s_commands[i].name, s_commands[i].summary);
    fprintf(out, "\nSee 'rumor help COMMAND' for one command's options.\n");
}

static const struct cli_command *
s_find(const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; i++)
        if (strcmp(s_commands[i].name, name) == 0)
            return &s_commands[i];
    return NULL;
}

static void
s_help_help(FILE *out)
{
    fprintf(out, "usage: rumor help [COMMAND]\n");
}

static int
s_help_main(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stdout);
        return 0;
    }
    const struct cli_command *cmd = s_find(argv[1]);
    if (cmd == NULL) {
        fprintf(stderr, "rumor: no such command '%s'\n", argv[1]);
        return 2;
    }
    if (cmd->help != NULL)
        cmd->help(stdout);
    else
        printf("usage: rumor %s\n%s\n", cmd->name, cmd->summary);
    return 0;
}

static int
s_version_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const char *why = NULL;
    int gpus = rumor_cuda_device_count(&why);
    printf("rumor %s\n", rumor_version());
    printf("cpu backend: OpenBLAS/LAPACKE\n");
    if (!rumor_cuda_built())
        printf("cuda backend: not built (%s)\n", why);
    else if (gpus == 0)
        printf("cuda backend: built; no usable GPU (%s): the CPU path runs\n",
               why);
    else
        printf("cuda backend: built; %d GPU(s)\n", gpus);
    return 0;
}

int
main(int argc, char **argv)
{
    /* OpenBLAS's thread pool spins on sched_yield between calls and takes
     * the cores that the other node processes on this host and the
     * transport's I/O threads need; one BLAS thread per process is the
     * default, OPENBLAS_NUM_THREADS overrides it. */
    if (getenv("OPENBLAS_NUM_THREADS") == NULL)
        openblas_set_num_threads(1);
    if (argc < 2) {
        s_usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        s_usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0)
        name = "version";
    const struct cli_command *cmd = s_find(name);
    if (cmd == NULL) {
        fprintf(stderr,
                "rumor: '%s' is not a rumor command; see 'rumor --help'\n",
                name);
        return 2;
    }
    if (argc >= 3 &&
        (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0) &&
        cmd->help != NULL) {
        cmd->help(stdout);
        return 0;
    }
    int status = cmd->run(argc - 1, argv + 1);
    exit(status);
}
