/*
 * The environment of a worker of `rumor launch ... -- PROG ARGS`, which is
 * how rumor.Peer.from_env() (python/rumor/peer.py) learns who it is
 * (docs/python.md, "Launching a training script"):
 *
 *   RUMOR_TOPOLOGY     the topology file (absolute)
 *   RUMOR_NODE_ID      this worker's node id
 *   RUMOR_NODES        the number of nodes in the topology
 *   RUMOR_LOCAL_ID     its index among the workers of its host (a GPU)
 *   RUMOR_KEY          its CURVE key base (absent with --insecure)
 *   RUMOR_METRICS_DIR  the run directory (absolute)
 *   RUMOR_OPTIONS      the node options given to launch, NAME=VALUE lines
 *   RUMOR_RESTART      how often the launcher restarted it
 *   RUMOR_JOIN         1 on a restart: take a live neighbour's model
 *   RUMOR_METRICS_LISTEN  launch's --metrics-listen, its port plus the id
 */
#include "cli/launch.h"

#include "rumor/core.h"

#include "cli/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKER_ENV_MAX 11

static int
s_add_option(void *ctx,
             const char *name,
             const char *value,
             struct rumor_diag *diag)
{
    (void)diag;
    struct launch_worker *w = ((void **)ctx)[0];
    FILE *out = ((void **)ctx)[1];
    char path[PATH_MAX];
    if (strcmp(name, "metrics-listen") == 0) { /* per worker: shifted */
        w->metrics_listen = value;
        return 0;
    }
    if (strcmp(name, "config") == 0 && realpath(value, path) != NULL)
        value = path;
    if (strchr(value, '\n') != NULL) {
        rumor_diag_set(diag, "", 0, 0, "--%s: a value with a newline", name);
        return -1;
    }
    fprintf(out, "%s=%s\n", name, value);
    return 0;
}

/* What launch was given that changes how it runs the workers: an
 * algorithm (else the Peer's default), --steps (each must run them). */
static int
s_note_given(void *ctx,
             const char *name,
             const char *value,
             struct rumor_diag *diag)
{
    (void)value;
    (void)diag;
    struct launch_worker *w = ctx;
    if (strcmp(name, "algo") == 0)
        w->algo_given = true;
    if (strcmp(name, "steps") == 0)
        w->steps_given = true;
    return 0;
}

int
launch_worker_options(struct launch_worker *w, char **pass, size_t npass)
{
    /* cli_node_each_option reads argv[1..argc) */
    char **argv = calloc(npass + 2, sizeof *argv);
    size_t len = 0;
    FILE *out = open_memstream(&w->options, &len);
    if (argv == NULL || out == NULL) {
        free(argv);
        if (out != NULL)
            fclose(out);
        return 1;
    }
    argv[0] = "launch";
    memcpy(argv + 1, pass, npass * sizeof *pass);
    struct rumor_diag diag = {0};
    void *ctx[2] = {w, out};
    int rc =
        cli_node_each_option((int)npass + 1, argv, s_add_option, ctx, &diag);
    if (rc == 0)
        rc = cli_node_each_option((int)npass + 1, argv, s_note_given, w, &diag);
    if (fclose(out) != 0 && rc == 0)
        rc = -1;
    free(argv);
    if (rc != 0)
        fprintf(stderr,
                "rumor launch: %s\n",
                diag.msg[0] != '\0' ? diag.msg : "out of memory");
    return rc != 0 ? 2 : 0;
}

static int
s_absolute(const char *path, char *out, const char *what)
{
    if (realpath(path, out) != NULL)
        return 0;
    fprintf(stderr, "rumor launch: %s %s: cannot resolve it\n", what, path);
    return 1;
}

int
launch_worker_paths(struct launch_worker *w,
                    const char *topology,
                    const char *metrics_dir,
                    const char *keydir)
{
    if (s_absolute(topology, w->topology, "topology") != 0 ||
        s_absolute(metrics_dir, w->metrics_dir, "metrics directory") != 0)
        return 1;
    if (w->insecure) {
        w->keydir[0] = '\0';
        return 0;
    }
    return s_absolute(keydir, w->keydir, "key directory");
}

static int
s_put(char **env, size_t *n, const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 2;
    char *entry = malloc(len);
    if (entry == NULL)
        return -1;
    snprintf(entry, len, "%s=%s", name, value);
    env[(*n)++] = entry;
    return 0;
}

static int
s_put_number(char **env, size_t *n, const char *name, size_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%zu", value);
    return s_put(env, n, name, text);
}

char **
launch_worker_env(const struct launch_worker *w,
                  size_t id,
                  size_t local,
                  unsigned restarts,
                  bool remote)
{
    char **env = calloc(WORKER_ENV_MAX + 1, sizeof *env);
    if (env == NULL)
        return NULL;
    size_t n = 0;
    int failed = 0;
    if (!remote) {
        char key[PATH_MAX + 32];
        snprintf(key, sizeof key, "%s/node-%zu", w->keydir, id);
        failed |= s_put(env, &n, "RUMOR_TOPOLOGY", w->topology);
        failed |= s_put(env, &n, "RUMOR_METRICS_DIR", w->metrics_dir);
        failed |= s_put_number(env, &n, "RUMOR_NODE_ID", id);
        if (!w->insecure)
            failed |= s_put(env, &n, "RUMOR_KEY", key);
    }
    failed |= s_put_number(env, &n, "RUMOR_NODES", w->nodes);
    failed |= s_put_number(env, &n, "RUMOR_LOCAL_ID", local);
    failed |= s_put(env, &n, "RUMOR_OPTIONS", w->options);
    failed |= s_put_number(env, &n, "RUMOR_RESTART", restarts);
    failed |= s_put(env, &n, "RUMOR_JOIN", restarts > 0 ? "1" : "0");
    char listen[300];
    if (w->metrics_listen != NULL &&
        launch_listen_shift(w->metrics_listen, id, listen, sizeof listen) == 0)
        failed |= s_put(env, &n, "RUMOR_METRICS_LISTEN", listen);
    if (failed) {
        launch_worker_env_free(env);
        return NULL;
    }
    return env;
}

int
launch_listen_shift(const char *spec, size_t id, char *out, size_t cap)
{
    const char *colon = strrchr(spec, ':');
    const char *port = colon != NULL ? colon + 1 : spec;
    char *end = NULL;
    unsigned long p = strtoul(port, &end, 10);
    if (*port == '\0' || *end != '\0' || p + id > 65535)
        return -1;
    int len = snprintf(out,
                       cap,
                       "%.*s%lu",
                       (int)(port - spec),
                       spec,
                       p + (unsigned long)id);
    return len < 0 || (size_t)len >= cap ? -1 : 0;
}

void
launch_worker_env_free(char **env)
{
    for (size_t k = 0; env != NULL && env[k] != NULL; k++)
        free(env[k]);
    free(env);
}

void
launch_worker_free(struct launch_worker *w)
{
    free(w->options);
    w->options = NULL;
}
