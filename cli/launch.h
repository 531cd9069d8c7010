/*
 * `rumor launch ... -- PROG ARGS`: one worker process (a training script
 * that makes a rumor.Peer) per node, where a plain launch starts `rumor
 * node`. Private to the `rumor` binary (cli/launch.c, cli/launch_worker.c).
 */
#ifndef RUMOR_CLI_LAUNCH_H
#define RUMOR_CLI_LAUNCH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

struct launch_worker {
    char **argv;   /* PROG ARGS, NULL-terminated (borrowed) */
    char *options; /* RUMOR_OPTIONS: the node options, NAME=VALUE lines */
    bool algo_given;
    bool steps_given; /* --steps: the launcher holds each worker to them */
    char topology[PATH_MAX]; /* absolute paths, for a script that cds */
    char metrics_dir[PATH_MAX];
    char keydir[PATH_MAX];
    size_t nodes;
    bool insecure;
    const char *metrics_listen; /* --metrics-listen given to launch, or NULL */
};

/* --metrics-listen SPEC for node id under launch: its port plus id, so the
 * nodes of one host do not collide. 0, or -1 when SPEC has no port. */
int launch_listen_shift(const char *spec, size_t id, char *out, size_t cap);

/* RUMOR_OPTIONS from the node options passed to every node (pass[0..npass),
 * as on `rumor node`'s command line; a --config FILE becomes absolute).
 * 0, or 2 after a message. */
int launch_worker_options(struct launch_worker *w, char **pass, size_t npass);

/* The absolute paths; after the topology, keys and metrics directory
 * exist. 0, or 1 after a message. */
int launch_worker_paths(struct launch_worker *w,
                        const char *topology,
                        const char *metrics_dir,
                        const char *keydir);

/* Worker id's environment additions, "NAME=VALUE" strings, NULL-terminated
 * (free with launch_worker_env_free); local: its index among this host's
 * workers; restarts: how often it was restarted (RUMOR_JOIN=1 when > 0);
 * remote: without the paths, which the remote script sets. NULL when out
 * of memory. */
char **launch_worker_env(const struct launch_worker *w,
                         size_t id,
                         size_t local,
                         unsigned restarts,
                         bool remote);
void launch_worker_env_free(char **env);

void launch_worker_free(struct launch_worker *w);

#endif
