/*
 * `rumor topo gen|check|dot`: write, verify and draw topology files.
 * `check` is what a person runs on a hand-written file before an
 * experiment: it prints what the runtime will use (nodes, edges, degrees,
 * whether W is doubly stochastic, the spectral gap that predicts consensus
 * speed) or the first problem as FILE:LINE:COL: message, with exit code 1.
 */
#include "rumor/net.h"
#include "rumor/topology.h"

#include "cli/cli.h"
#include "node/runtime_impl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TOPO_GEN_MAX_ARGS 8

void
cli_topo_help(FILE *out)
{
    fprintf(out,
            "usage: rumor topo gen KIND ARGS... [--seed S] [--out FILE] "
            "[--local]\n"
            "       rumor topo check FILE\n"
            "       rumor topo dot FILE [--out FILE]\n\n"
            "kinds: ring N | torus R C | complete N | star N |\n"
            "       hypercube N | random-regular N D | watts-strogatz N K P |\n"
            "       exponential N | one-peer-exp N (time-varying)\n\n"
            "Weights not written in a file are Metropolis-Hastings:\n"
            "w_ij = 1/(1+max(d_i,d_j)), w_ii = 1 - sum_j w_ij.\n\n"
            "--local (needs --out FILE): endpoints on 127.0.0.1 on free "
            "ports, a CURVE\n"
            "keypair per node in keys/node-N.{key,pub} next to FILE, and "
            "the public\n"
            "keys in the file: ready for 'rumor launch --topology FILE'.\n");
}

static void
s_print_diag(const char *cmd, const struct rumor_diag *diag, rumor_err rc)
{
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    if (diag->msg[0] == '\0') {
        fprintf(stderr, "rumor topo %s: %s\n", cmd, rumor_strerror(rc));
        return;
    }
    rumor_diag_format(diag, text, sizeof text);
    fprintf(stderr, "%s\n", text);
}

static int
s_write(const rumor_buf *buf, const char *path)
{
    FILE *f = path ? fopen(path, "w") : stdout;
    if (f == NULL) {
        cli_io_error("topo", path, "cannot open for writing");
        return 1;
    }
    size_t wrote = fwrite(buf->data, 1, buf->len, f);
    int failed = wrote != buf->len;
    if (path != NULL)
        failed |= fclose(f) != 0;
    else
        failed |= fflush(f) != 0;
    if (failed)
        cli_io_error("topo", path ? path : "stdout", "cannot write");
    return failed;
}

/* A port the kernel gives on 127.0.0.1: *fd keeps it bound until the
 * caller closes it, so the next call gets another one. Another program
 * could take it between the close and the node's bind, which is unlikely
 * in the kernel's ephemeral range and shows as a bind error. */
static int
s_free_port(int *fd)
{
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (*fd >= 0 && bind(*fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(*fd, (struct sockaddr *)&a, &len) == 0)
        return ntohs(a.sin_port);
    return -1;
}

/* One node of --local: a port and a fresh keypair in keydir. */
static int
s_local_node(rumor_topology *t, const char *keydir, size_t i, int *fd)
{
    int port = s_free_port(fd);
    if (port < 0) {
        fprintf(stderr, "rumor topo gen: no free port on 127.0.0.1\n");
        return 1;
    }
    char endpoint[64], base[1100], keyfile[1110], pubfile[1110];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    snprintf(base, sizeof base, "%s/node-%zu", keydir, i);
    snprintf(keyfile, sizeof keyfile, "%s.key", base);
    snprintf(pubfile, sizeof pubfile, "%s.pub", base);
    /* a new topology gets new keys: old ones would not match it */
    unlink(keyfile);
    unlink(pubfile);
    rumor_net_keypair *kp = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_net_keypair_generate(&kp);
    if (rc == RUMOR_OK)
        rc = rumor_net_keypair_save(kp, base);
    if (rc == RUMOR_OK)
        rc = rumor_topology_set_node(t,
                                     i,
                                     endpoint,
                                     rumor_net_keypair_public(kp),
                                     &diag);
    rumor_net_keypair_destroy(&kp);
    if (rc != RUMOR_OK) {
        fprintf(stderr,
                "rumor topo gen: node %zu (%s): %s\n",
                i,
                base,
                diag.msg[0] != '\0' ? diag.msg : rumor_strerror(rc));
        return 1;
    }
    return 0;
}

/* --local: endpoints on distinct free ports and fresh keys in keys/ next
 * to out_path. */
static int
s_make_local(rumor_topology *t, const char *out_path)
{
    char keydir[1024];
    const char *slash = strrchr(out_path, '/');
    if (slash == NULL)
        snprintf(keydir, sizeof keydir, "keys");
    else
        snprintf(keydir,
                 sizeof keydir,
                 "%.*s/keys",
                 (int)(slash - out_path),
                 out_path);
    if (node_mkdirs(keydir) != 0) {
        cli_io_error("topo gen", keydir, "cannot create the directory");
        return 1;
    }
    size_t n = rumor_topology_nodes(t);
    int *fds = malloc(n * sizeof *fds);
    if (fds == NULL)
        return 1;
    size_t held = 0;
    int status = 0;
    for (size_t i = 0; i < n && status == 0; i++, held++)
        status = s_local_node(t, keydir, i, &fds[i]);
    for (size_t i = 0; i < held; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return status;
}

static int
s_gen(int argc, char **argv)
{
    const char *args[TOPO_GEN_MAX_ARGS];
    size_t nargs = 0;
    const char *out_path = NULL;
    unsigned long long seed = 1;
    bool local = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--local") == 0) {
            local = true;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out_path = argv[++i];
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (cli_parse_u64(argv[++i], "--seed", 0, UINT64_MAX, &seed) != 0)
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "rumor topo gen: unknown option %s\n", argv[i]);
            return 2;
        } else if (nargs < TOPO_GEN_MAX_ARGS) {
            args[nargs++] = argv[i];
        }
    }
    if (argc < 2) {
        cli_topo_help(stderr);
        return 2;
    }
    if (local && out_path == NULL) {
        fprintf(stderr,
                "rumor topo gen: --local needs --out FILE (the keys "
                "go in keys/ next to it)\n");
        return 2;
    }
    return cli_topo_gen_write(argv[1], args, nargs, seed, local, out_path);
}

int
cli_topo_gen_write(const char *kind,
                   const char *const *args,
                   size_t nargs,
                   uint64_t seed,
                   bool local,
                   const char *out_path)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_generate(kind, args, nargs, seed, &t, &diag);
    if (rc != RUMOR_OK) {
        fprintf(stderr, "rumor topo gen: %s\n", diag.msg);
        return 2;
    }
    if (local && s_make_local(t, out_path) != 0) {
        rumor_topology_destroy(&t);
        return 1;
    }
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    char header[160];
    int n = snprintf(header, sizeof header, "# rumor topo gen %s", kind);
    for (size_t i = 0; i < nargs && n > 0 && (size_t)n < sizeof header; i++)
        n += snprintf(header + n, sizeof header - (size_t)n, " %s", args[i]);
    rc = rumor_buf_append(&buf, header, strlen(header));
    if (rc == RUMOR_OK)
        rc = rumor_buf_append(&buf, "\n", 1);
    if (rc == RUMOR_OK)
        rc = rumor_topology_format(t, &buf);
    int status = rc == RUMOR_OK ? s_write(&buf, out_path) : 1;
    rumor_buf_free(&buf);
    rumor_topology_destroy(&t);
    return status;
}

static void
s_print_summary(const char *path, const rumor_topology *t)
{
    size_t n = rumor_topology_nodes(t), phases = rumor_topology_phases(t);
    size_t edges = 0, dmin = SIZE_MAX, dmax = 0, endpoints = 0, keys = 0;
    for (size_t p = 0; p < phases; p++) {
        edges += rumor_topology_edges(t, p);
        for (size_t i = 0; i < n; i++) {
            size_t d = 0;
            rumor_topology_neighbors(t, p, i, &d, NULL);
            dmin = d < dmin ? d : dmin;
            dmax = d > dmax ? d : dmax;
        }
    }
    for (size_t i = 0; i < n; i++) {
        endpoints += rumor_topology_endpoint(t, i) != NULL;
        keys += rumor_topology_key(t, i) != NULL;
    }
    printf("topology: %s\n", path);
    printf("nodes: %zu\n", n);
    printf("edges: %zu\n", edges);
    if (phases > 1)
        printf("phases: %zu (time-varying; step t uses phase t mod %zu)\n",
               phases,
               phases);
    printf("degree: %zu..%zu%s\n", dmin, dmax, phases > 1 ? " per phase" : "");
    printf("endpoints: %zu of %zu nodes, public keys: %zu\n",
           endpoints,
           n,
           keys);
}

static int
s_check(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: rumor topo check FILE\n");
        return 2;
    }
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_load_file(argv[1], &t, &diag);
    if (rc != RUMOR_OK) {
        s_print_diag("check", &diag, rc);
        return 1;
    }
    s_print_summary(argv[1], t);
    bool ds = rumor_topology_doubly_stochastic(t);
    printf("mixing matrix: %s\n",
           ds ? "symmetric, doubly stochastic (rows sum to 1 within 1e-6)"
              : "NOT doubly stochastic");
    double gap = 0;
    rc = rumor_topology_spectral_gap(t, &gap);
    if (rc == RUMOR_OK)
        printf("spectral gap: %.6f%s\n",
               gap,
               rumor_topology_phases(t) > 1 ? " (per period)" : "");
    else
        fprintf(stderr,
                "rumor topo check: spectral gap: %s\n",
                rumor_strerror(rc));
    rumor_topology_destroy(&t);
    return rc == RUMOR_OK && ds ? 0 : 1;
}

static int
s_dot(int argc, char **argv)
{
    const char *out_path = NULL;
    if (argc == 4 && strcmp(argv[2], "--out") == 0)
        out_path = argv[3];
    else if (argc != 2) {
        fprintf(stderr, "usage: rumor topo dot FILE [--out FILE]\n");
        return 2;
    }
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_load_file(argv[1], &t, &diag);
    if (rc != RUMOR_OK) {
        s_print_diag("dot", &diag, rc);
        return 1;
    }
    rumor_buf buf;
    rumor_buf_init(&buf, SIZE_MAX);
    rc = rumor_topology_format_dot(t, &buf);
    int status = rc == RUMOR_OK ? s_write(&buf, out_path) : 1;
    rumor_buf_free(&buf);
    rumor_topology_destroy(&t);
    return status;
}

int
cli_topo_main(int argc, char **argv)
{
    if (argc < 2) {
        cli_topo_help(stderr);
        return 2;
    }
    if (strcmp(argv[1], "gen") == 0)
        return s_gen(argc - 1, argv + 1);
    if (strcmp(argv[1], "check") == 0)
        return s_check(argc - 1, argv + 1);
    if (strcmp(argv[1], "dot") == 0)
        return s_dot(argc - 1, argv + 1);
    fprintf(stderr, "rumor topo: unknown subcommand '%s'\n", argv[1]);
    cli_topo_help(stderr);
    return 2;
}
