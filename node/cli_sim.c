/*
 * `rumor sim consensus`: the reference consensus experiment of the
 * PowerGossip paper (Vogels et al. 2020, section 5.1; epfml/powergossip):
 * every node starts from its own random matrix (standard normal entries),
 * there are no gradients, and each step runs one gossip step of the chosen
 * algorithm in the in-process simulator. It prints, per reported step, the
 * bits each node has sent so far (headers included) and the consensus
 * error mean_i ||x_i - x_bar||^2 relative to step 0.
 */
#include "rumor/gossip.h"

#include "node/cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sim_args {
    const char *topology;
    struct rumor_gossip_opts gossip;
    size_t rows, cols;
    unsigned long long steps, every, seed;
    bool json;
};

void
cli_sim_help(FILE *out)
{
    fprintf(out,
            "usage: rumor sim consensus --topology SPEC|FILE [--algo NAME]\n"
            "           [--size RxC] [--steps N] [--every K] [--seed S] "
            "[--json]\n"
            "           [--codec SPEC] [--gamma G] [--rank R] "
            "[--iterations I] [--theta T]\n"
            "           [--period H] [--gossip-rounds K] [--delta-codec "
            "SPEC]\n"
            "           [--outer-lr LR] [--outer-momentum MU]\n\n"
            "SPEC is a generator (ring:8, torus:4x4, complete:8, ...) or a\n"
            "topology file. Algorithms: dpsgd (default; --gamma), allreduce,\n"
            "choco and deepsqueeze (--codec, e.g. topk:ratio=0.01 or\n"
            "qsgd:bits=4; --gamma), moniqua (--theta, --gamma), powergossip\n"
            "(--rank, --iterations, --gamma), powersgd (--rank), localsgd\n"
            "(--period, --gossip-rounds, --delta-codec, --outer-lr,\n"
            "--outer-momentum).\n"
            "Prints CSV 'step,bits_per_node,rel_error' (or JSON lines with\n"
            "the same keys) every K steps (default 1) and at the last one.\n");
}

static int
s_parse_size(const char *text, struct sim_args *a)
{
    char rows[32], *x = NULL;
    snprintf(rows, sizeof rows, "%s", text);
    x = strchr(rows, 'x');
    unsigned long long r = 0, c = 1;
    if (x != NULL)
        *x = '\0';
    if (cli_parse_u64(rows, "--size", 1, 1u << 20, &r) != 0 ||
        (x != NULL && cli_parse_u64(x + 1, "--size", 1, 1u << 20, &c) != 0))
        return -1;
    if (r * c > (1ull << 26)) {
        fprintf(stderr, "rumor sim: --size %s is above 2^26 elements\n", text);
        return -1;
    }
    a->rows = r;
    a->cols = c;
    return 0;
}

static int
s_parse_size_t(const char *text, const char *what, size_t *out)
{
    unsigned long long v = 0;
    int rc = cli_parse_u64(text, what, 1, 256, &v);
    *out = (size_t)v;
    return rc;
}

static int
s_parse_unsigned(const char *text, const char *what, unsigned *out)
{
    unsigned long long v = 0;
    int rc = cli_parse_u64(text, what, 1, 1000, &v);
    *out = (unsigned)v;
    return rc;
}

static int
s_parse_args(int argc, char **argv, struct sim_args *a)
{
    rumor_gossip_opts_default(&a->gossip);
    a->rows = a->cols = 100;
    a->steps = 100;
    a->every = 1;
    a->seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(opt, "--json") == 0) {
            a->json = true;
            continue;
        }
        if (val == NULL) {
            fprintf(stderr, "rumor sim: %s needs a value\n", opt);
            return -1;
        }
        i++;
        if (strcmp(opt, "--topology") == 0)
            a->topology = val;
        else if (strcmp(opt, "--algo") == 0)
            snprintf(a->gossip.algo, sizeof a->gossip.algo, "%s", val);
        else if (strcmp(opt, "--codec") == 0)
            snprintf(a->gossip.codec, sizeof a->gossip.codec, "%s", val);
        else if (strcmp(opt, "--gamma") == 0)
            rc = cli_parse_double(val,
                                  opt,
                                  1e-9,
                                  RUMOR_GOSSIP_GAMMA_MAX,
                                  &a->gossip.gamma);
        else if (strcmp(opt, "--rank") == 0)
            rc = s_parse_size_t(val, opt, &a->gossip.rank);
        else if (strcmp(opt, "--iterations") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.iterations);
        else if (strcmp(opt, "--theta") == 0)
            rc = cli_parse_double(val, opt, 1e-6, 1e5, &a->gossip.theta);
        else if (strcmp(opt, "--period") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.period);
        else if (strcmp(opt, "--gossip-rounds") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.gossip_rounds);
        else if (strcmp(opt, "--delta-codec") == 0)
            snprintf(a->gossip.delta_codec,
                     sizeof a->gossip.delta_codec,
                     "%s",
                     val);
        else if (strcmp(opt, "--outer-lr") == 0)
            rc = cli_parse_double(val, opt, 1e-6, 10, &a->gossip.outer_lr);
        else if (strcmp(opt, "--outer-momentum") == 0)
            rc =
                cli_parse_double(val, opt, 0, 0.999, &a->gossip.outer_momentum);
        else if (strcmp(opt, "--size") == 0)
            rc = s_parse_size(val, a);
        else if (strcmp(opt, "--steps") == 0)
            rc = cli_parse_u64(val, opt, 0, 1ull << 40, &a->steps);
        else if (strcmp(opt, "--every") == 0)
            rc = cli_parse_u64(val, opt, 1, 1ull << 40, &a->every);
        else if (strcmp(opt, "--seed") == 0)
            rc = cli_parse_u64(val, opt, 0, UINT64_MAX, &a->seed);
        else {
            fprintf(stderr, "rumor sim: unknown option %s\n", opt);
            return -1;
        }
        if (rc != 0)
            return -1;
    }
    if (a->topology == NULL) {
        fprintf(stderr, "rumor sim: --topology is required\n");
        return -1;
    }
    a->gossip.seed = a->seed;
    return 0;
}

/* mean_i ||x_i - x_bar||^2, in double. */
static double
s_consensus_error(float *const *x, size_t n, size_t numel)
{
    double total = 0;
    for (size_t e = 0; e < numel; e++) {
        double mean = 0;
        for (size_t i = 0; i < n; i++)
            mean += x[i][e];
        mean /= (double)n;
        for (size_t i = 0; i < n; i++) {
            double d = x[i][e] - mean;
            total += d * d;
        }
    }
    return total / (double)n;
}

static void
s_report(const struct sim_args *a, uint64_t step, double bits, double rel)
{
    if (a->json)
        printf(
            "{\"step\": %llu, \"bits_per_node\": %.0f, \"rel_error\": %.9g}\n",
            (unsigned long long)step,
            bits,
            rel);
    else
        printf("%llu,%.0f,%.9g\n", (unsigned long long)step, bits, rel);
}

struct sim_run {
    rumor_topology *topo;
    size_t n, numel;
    float **x;
    rumor_gossip **nodes;
    rumor_sim *sim;
};

static void
s_run_free(struct sim_run *r)
{
    for (size_t i = 0; r->nodes != NULL && i < r->n; i++)
        rumor_gossip_destroy(&r->nodes[i]);
    for (size_t i = 0; r->x != NULL && i < r->n; i++)
        free(r->x[i]);
    rumor_sim_destroy(&r->sim);
    free(r->nodes);
    free(r->x);
    rumor_topology_destroy(&r->topo);
}

static rumor_err
s_run_setup(const struct sim_args *a,
            struct sim_run *r,
            struct rumor_diag *diag)
{
    rumor_err rc =
        rumor_topology_from_spec(a->topology, a->seed, &r->topo, diag);
    if (rc != RUMOR_OK)
        return rc;
    r->n = rumor_topology_nodes(r->topo);
    r->numel = a->rows * a->cols;
    r->x = calloc(r->n, sizeof *r->x);
    r->nodes = calloc(r->n, sizeof *r->nodes);
    if (r->x == NULL || r->nodes == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < r->n && rc == RUMOR_OK; i++) {
        r->x[i] = malloc(r->numel * sizeof(float));
        if (r->x[i] == NULL)
            return RUMOR_ENOMEM;
        struct rumor_rng rng;
        rumor_rng_init(&rng, a->seed, 1000 + i);
        for (size_t e = 0; e < r->numel; e++)
            r->x[i][e] = (float)rumor_rng_normal(&rng);
        struct rumor_tensor tensor = {r->x[i], 2, {a->rows, a->cols}};
        struct rumor_model model = {&tensor, 1};
        rc = rumor_gossip_new(&a->gossip,
                              r->topo,
                              (uint32_t)i,
                              &model,
                              &r->nodes[i],
                              diag);
    }
    if (rc == RUMOR_OK)
        rc = rumor_sim_new(r->nodes, r->n, &r->sim);
    return rc;
}

static int
s_consensus(int argc, char **argv)
{
    struct sim_args a = {0};
    if (s_parse_args(argc, argv, &a) != 0)
        return 2;
    struct sim_run r = {0};
    struct rumor_diag diag = {0};
    rumor_err rc = s_run_setup(&a, &r, &diag);
    if (rc != RUMOR_OK) {
        char text[600];
        rumor_diag_format(&diag, text, sizeof text);
        fprintf(stderr,
                "rumor sim: %s\n",
                diag.msg[0] ? text : rumor_strerror(rc));
        s_run_free(&r);
        return rc == RUMOR_EINVAL || rc == RUMOR_EPROTO ? 2 : 1;
    }
    double e0 = s_consensus_error(r.x, r.n, r.numel);
    if (!a.json)
        printf("step,bits_per_node,rel_error\n");
    s_report(&a, 0, 0, 1.0);
    for (uint64_t step = 1; step <= a.steps && rc == RUMOR_OK; step++) {
        rc = rumor_sim_step(r.sim, step);
        if (rc != RUMOR_OK || (step % a.every != 0 && step != a.steps))
            continue;
        double bits = 0;
        for (size_t i = 0; i < r.n; i++)
            bits += 8.0 * (double)rumor_sim_bytes_sent(r.sim, i);
        double rel = e0 > 0 ? s_consensus_error(r.x, r.n, r.numel) / e0 : 0;
        s_report(&a, step, bits / (double)r.n, rel);
    }
    if (rc != RUMOR_OK)
        fprintf(stderr, "rumor sim: step failed: %s\n", rumor_strerror(rc));
    s_run_free(&r);
    return rc == RUMOR_OK ? 0 : 1;
}

int
cli_sim_main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "consensus") == 0)
        return s_consensus(argc - 1, argv + 1);
    cli_sim_help(stderr);
    return 2;
}
