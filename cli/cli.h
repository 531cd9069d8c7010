/*
 * Private to the `rumor` binary: each subcommand is a function with the
 * usual argc/argv (argv[0] is the subcommand name) returning the process
 * exit status; `help` text lives next to each implementation.
 */
#ifndef RUMOR_CLI_H
#define RUMOR_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* `rumor node`'s exit status for a run that diverged (2 is a refused
 * configuration): `rumor launch` restarts neither. */
#define CLI_EXIT_DIVERGED 3

struct cli_command {
    const char *name;
    const char *summary;               /* one line for `rumor --help` */
    int (*run)(int argc, char **argv); /* exit status */
    void (*help)(FILE *out);           /* `rumor help NAME` */
};

int cli_topo_main(int argc, char **argv);
void cli_topo_help(FILE *out);
/* `rumor topo gen KIND ARGS [--local] [--out FILE]`: the generated graph
 * to out_path (NULL: stdout); local: free 127.0.0.1 ports and fresh keys
 * in keys/ next to out_path. 0, or an exit status after a message. */
int cli_topo_gen_write(const char *kind,
                       const char *const *args,
                       size_t nargs,
                       uint64_t seed,
                       bool local,
                       const char *out_path);
int cli_keygen_main(int argc, char **argv);
void cli_keygen_help(FILE *out);
int cli_ping_main(int argc, char **argv);
void cli_ping_help(FILE *out);
int cli_sim_main(int argc, char **argv);
void cli_sim_help(FILE *out);
int cli_lowrank_main(int argc, char **argv);
void cli_lowrank_help(FILE *out);
int cli_node_main(int argc, char **argv);
void cli_node_help(FILE *out);
int cli_launch_main(int argc, char **argv);
void cli_launch_help(FILE *out);
int cli_compose_main(int argc, char **argv);
void cli_compose_help(FILE *out);

struct rumor_topology;
struct rumor_buf;
/* Writes header (may be NULL) and t in file format to path; hands the text
 * to *keep when keep is not NULL (caller frees). 0, or -1 after a message
 * (cli/launch.c; used by launch and compose). */
int cli_topology_write(const struct rumor_topology *t,
                       const char *header,
                       const char *path,
                       struct rumor_buf *keep);

int cli_plot_main(int argc, char **argv);
void cli_plot_help(FILE *out);

struct rumor_diag;
typedef struct rumor_node_config rumor_node_config;
/* Applies `rumor node` arguments argv[1..argc) (after --config FILE, when
 * given) to cfg; returns 0, or -1 with diag. */
int cli_node_parse(int argc,
                   char **argv,
                   rumor_node_config *cfg,
                   struct rumor_diag *diag);
/* Calls fn(ctx, NAME, VALUE) for each `rumor node` argument of
 * argv[1..argc), as cli_node_parse reads them ("--flag": "", "--no-flag":
 * "false", --config FILE included); stops at fn's first non-zero. 0, or
 * -1 with diag. */
int cli_node_each_option(int argc,
                         char **argv,
                         int (*fn)(void *ctx,
                                   const char *name,
                                   const char *value,
                                   struct rumor_diag *diag),
                         void *ctx,
                         struct rumor_diag *diag);

/* Prints "rumor CMD: PATH: WHAT: <strerror(errno)> (<ENAME>)" to stderr
 * for a file operation that just failed; returns -1. */
int cli_io_error(const char *cmd, const char *path, const char *what);

/* Parses a whole decimal number into [min, max]; returns 0 or -1 after
 * printing "rumor: WHAT: ..." to stderr. */
int cli_parse_u64(const char *text,
                  const char *what,
                  unsigned long long min,
                  unsigned long long max,
                  unsigned long long *out);

/* Parses a finite double in [min, max]; returns 0 or -1 with a message. */
int cli_parse_double(const char *text,
                     const char *what,
                     double min,
                     double max,
                     double *out);

#endif
