/*
 * `rumor sim consensus`: the reference consensus experiment of the
 * PowerGossip paper (Vogels et al. 2020, section 5.1; epfml/powergossip):
 * every node starts from its own random matrix (standard normal entries),
 * there are no gradients, and each step runs one gossip step of the chosen
 * algorithm in the in-process simulator. It prints, per reported step, the
 * bits each node has sent so far (headers included) and two consensus
 * errors relative to step 0: mean_i ||x_i - m||^2 with m the mean of the
 * starting matrices (the reference's, gossip_run.py), then with m the
 * current mean (Rumor's before; blind to a drifting mean, which Moniqua
 * from far-apart starts and float rounding cause). --gamma-grid tunes gamma
 * as the references do (the grid of gossip_run.py, the choice of
 * ChocoSGD's tune_consensus_stepsize.py).
 *
 * `rumor sim train`: the same simulator with a training workload of the
 * node module (least squares with a known optimum, logistic regression,
 * an MLP on the embedded digits). Each step, every node takes the
 * step-ahead look-ahead (a no-op unless localsgd uses SAEF), computes its
 * minibatch gradient at x_t, the network gossips, and every node applies
 * its optimizer step with that gradient: the reference's training loop
 * (epfml/powergossip train.py, DPSGD with overlapping = True). It prints
 * the mean minibatch loss and, for least squares, the distance of the
 * nodes to the optimum, else the held-out accuracy of the nodes' average.
 * --edge-bytes writes the per-edge byte table at the end of either run.
 */
#include "rumor/gossip.h"
#include "rumor/node.h"

#include "cli/cli.h"
#include "cli/sim_stale.h"
#include "node/runtime_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sim_args {
    const char *topology;
    struct rumor_gossip_opts gossip;
    size_t rows, cols;
    unsigned long long steps, every, seed;
    bool json;
    bool gamma_grid;        /* consensus: the reference's grid of gamma */
    const char *edge_bytes; /* a path, or NULL */
    bool warm_start_given;  /* --warm-start: powergossip or powersgd only */
    /* train */
    bool train;
    struct rumor_workload_opts work;
    struct rumor_optim_opts optim;
    bool optim_given;    /* --optim: else sgd with --ef dgc */
    const char *dataset; /* a dataset spec, or NULL */
    /* adaptive compression: modelled links (docs/adaptive.md) */
    struct rumor_simlink_opts link;
    const char *adapt_trace; /* a path, or NULL */
    const char *save_models; /* a path, or NULL */
};

void
cli_sim_help(FILE *out)
{
    fprintf(
        out,
        "usage: rumor sim consensus --topology SPEC|FILE [--algo NAME]\n"
        "           [--size RxC] [--steps N] [--every K] [--seed S] "
        "[--json]\n"
        "           [--codec SPEC] [--ef SPEC] [--gamma G|auto] [--rank R] "
        "[--iterations I] [--theta T]\n"
        "           [--period H] [--gossip-rounds K] [--delta-codec "
        "SPEC]\n"
        "           [--outer-lr LR] [--outer-momentum MU] [--ef-alpha A]\n"
        "           [--fragments F]\n"
        "           [--saef-scope self|neighbourhood[:CODEC]]\n"
        "           [--edge-bytes PATH] [--gamma-grid] [--warm-start B]\n"
        "           [--robust clip|off] [--clip-quantile Q] [--clip-factor F]\n"
        "           [--stale S]\n"
        "       rumor sim train --topology SPEC|FILE [the options above]\n"
        "           [--workload lsq|logreg|mlp] [--hidden W] [--batch B]\n"
        "           [--dataset SPEC] [--shard iid|dirichlet] "
        "[--dirichlet-alpha A]\n"
        "           [--optim sgd|momentum|nesterov] [--lr LR] "
        "[--momentum MU]\n"
        "           [--weight-decay WD] [--lsq-features D] "
        "[--lsq-outputs K]\n"
        "           [--lsq-samples N] [--lsq-noise S] [--save-models PATH]\n"
        "           [--adapt fixed|rule|learned] [--comm-share S]\n"
        "           [--adapt-density D] [--adapt-error E] "
        "[--adapt-lambda L]\n"
        "           [--adapt-rank-min R] [--adapt-rank-max R]\n"
        "           [--link-rate RATE[,RATE...]] [--link-latency-ms MS]\n"
        "           [--compute-ms MS] [--rate-drop STEP:FACTOR] "
        "[--adapt-trace PATH]\n"
        "           powersgd: [--start-powersgd-iter N] "
        "[--min-compression-rate X]\n"
        "           [--use-error-feedback B] [--one-sided B]\n"
        "           [--orthogonalization-epsilon E] "
        "[--batch-tensors-with-same-shape B]\n\n"
        "SPEC is a generator (ring:8, torus:4x4, complete:8, ...) or a\n"
        "topology file. Algorithms: dpsgd (default; --gamma), allreduce,\n"
        "allreduce-f64, choco and deepsqueeze (--codec, e.g. "
        "topk:ratio=0.01 or\n"
        "qsgd:bits=4; --gamma), moniqua (--theta, --gamma), powergossip\n"
        "(--rank, --iterations, --gamma), powersgd (--rank), localsgd\n"
        "(--period, --gossip-rounds, --delta-codec, --outer-lr,\n"
        "--outer-momentum). --gamma auto (the default) chooses it per\n"
        "algorithm from the topology and the codec (docs/gossip.md,\n"
        "\"Defaults\"); the value goes to stderr.\n"
        "allreduce --codec SPEC: compressed data-parallel SGD (each node's\n"
        "gradient as SPEC's message, all-gathered and averaged).\n"
        "--ef ef|ef-decay:BETA|dgc:MU[,CLIP][,WARMUP]|saef: the error\n"
        "feedback memory of allreduce --codec and localsgd --delta-codec.\n"
        "--ef-alpha: localsgd with --delta-codec, step-ahead error\n"
        "feedback (0 plain EF, 1 SAEF); --saef-scope self|neighbourhood\n"
        "[:CODEC]: look ahead by the own error or by the W-weighted\n"
        "average of the neighbours' errors (default; sent compressed).\n"
        "--fragments F: localsgd syncs the model in F contiguous parts,\n"
        "part f at the steps t with t %% H == f H / F (streaming DiLoCo;\n"
        "about 1/F of the model per sync).\n"
        "--warm-start true|false: powergossip and powersgd start each\n"
        "power iteration from the last factor (default) or from one\n"
        "drawn afresh from the seed.\n"
        "--stale S: the exchange of step t runs on a copy of the model\n"
        "and lands at the start of step t + S (x += G_t - s_t), the\n"
        "steps in between computed meanwhile (docs/gossip.md, \"Stale\n"
        "exchanges\"); 0 (the default): before step t + 1.\n"
        "consensus prints CSV 'step,bits_per_node,rel_error,\n"
        "rel_error_current_mean' (or JSON lines with the same keys) every\n"
        "K steps (default 1) and at the last one: mean_i ||x_i - m||^2\n"
        "relative to step 0, m the starting mean (the reference's) or\n"
        "the current one. --gamma-grid runs --steps steps at each of the\n"
        "reference's 20 gammas (1e-4 to 1.308, log-spaced) and prints\n"
        "'gamma,bits_per_node,rel_error,rel_error_current_mean,best',\n"
        "best = 1 on the lowest final rel_error.\n"
        "train prints 'step,bits_per_node,loss,dist_opt' for lsq\n"
        "(relative RMS distance of the nodes to the optimum) or\n"
        "'step,bits_per_node,loss,test_accuracy' (of the nodes' average\n"
        "model) for the classifiers. --edge-bytes writes\n"
        "'from,to,bytes,messages' per directed edge at the end;\n"
        "--save-models the nodes' final models (raw float32, node\n"
        "after node).\n"
        "Adaptive compression (choco; powersgd: the rank, fixed|rule;\n"
        "docs/adaptive.md): --link-rate\n"
        "models the links (bit/s, k/M/G; edge {i,j} takes rate (i+j) mod\n"
        "count) and adds a 'seconds' column (modelled wall clock).\n");
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

/* --stale S: 0 (the exchange lands before the next step) or more. */
static int
s_parse_stale(const char *text, unsigned *out)
{
    unsigned long long v = 0;
    int rc = cli_parse_u64(text, "--stale", 0, 1000000, &v);
    *out = (unsigned)v;
    return rc;
}

static int
s_unknown(const char *opt)
{
    fprintf(stderr, "rumor sim: unknown option %s\n", opt);
    return -1;
}

/* RATE[,RATE...] in bit/s with an optional k, M or G suffix. */
static int
s_parse_rates(const char *val, struct rumor_simlink_opts *l)
{
    const char *p = val;
    l->rate_count = 0;
    while (*p != '\0' && l->rate_count < 8) {
        char *end = NULL;
        double r = strtod(p, &end);
        double mult = *end == 'k'   ? 1e3
                      : *end == 'M' ? 1e6
                      : *end == 'G' ? 1e9
                                    : 1;
        end += mult > 1;
        if (end == p || !(r > 0) || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "rumor sim: bad --link-rate '%s'\n", val);
            return -1;
        }
        l->rates[l->rate_count++] = r * mult;
        p = *end == ',' ? end + 1 : end;
    }
    return *p == '\0' ? 0 : -1;
}

/* Adaptive compression and the modelled links (docs/adaptive.md). */
static int
s_parse_adapt_opt(const char *opt, const char *val, struct sim_args *a)
{
    struct rumor_gossip_opts *g = &a->gossip;
    struct rumor_simlink_opts *l = &a->link;
    double ms = 0;
    int rc = 0;
    if (strcmp(opt, "--adapt") == 0) {
        snprintf(g->adapt, sizeof g->adapt, "%s", val);
    } else if (strcmp(opt, "--comm-share") == 0) {
        rc = cli_parse_double(val, opt, 0, 0.99, &g->comm_share);
    } else if (strcmp(opt, "--adapt-density") == 0) {
        rc = cli_parse_double(val, opt, 1e-6, 1, &g->adapt_density);
    } else if (strcmp(opt, "--adapt-error") == 0) {
        rc = cli_parse_double(val, opt, 1e-6, 100, &g->adapt_error);
    } else if (strcmp(opt, "--adapt-lambda") == 0) {
        rc = cli_parse_double(val, opt, 0, 1e6, &g->adapt_lambda);
    } else if (strcmp(opt, "--adapt-rank-min") == 0) {
        rc = s_parse_size_t(val, opt, &g->adapt_rank_min);
    } else if (strcmp(opt, "--adapt-rank-max") == 0) {
        rc = s_parse_size_t(val, opt, &g->adapt_rank_max);
    } else if (strcmp(opt, "--link-rate") == 0) {
        rc = s_parse_rates(val, l);
    } else if (strcmp(opt, "--link-latency-ms") == 0) {
        rc = cli_parse_double(val, opt, 0, 1e5, &ms);
        l->latency_s = ms * 1e-3;
    } else if (strcmp(opt, "--compute-ms") == 0) {
        rc = cli_parse_double(val, opt, 1e-3, 1e7, &ms);
        l->compute_s = ms * 1e-3;
    } else if (strcmp(opt, "--rate-drop") == 0) {
        char *end = NULL;
        l->drop_step = strtoull(val, &end, 10);
        l->drop_factor = *end == ':' ? strtod(end + 1, NULL) : 0;
        rc = l->drop_step > 0 && l->drop_factor > 0 ? 0 : -1;
        if (rc != 0)
            fprintf(stderr, "rumor sim: --rate-drop wants STEP:FACTOR\n");
    } else if (strcmp(opt, "--adapt-trace") == 0) {
        a->adapt_trace = val;
    } else {
        rc = s_unknown(opt);
    }
    return rc;
}

/* "true" or "false" for a PowerSGD switch. */
static int
s_parse_switch(const char *val, const char *opt, bool *out)
{
    if (strcmp(val, "true") != 0 && strcmp(val, "false") != 0) {
        fprintf(stderr, "rumor sim: %s wants true or false\n", opt);
        return -1;
    }
    *out = strcmp(val, "true") == 0;
    return 0;
}

/* PowerSGD's options, named as in `rumor node` (docs/gossip.md,
 * "PowerSGD options"); the rest goes to the adaptive ones. */
static int
s_parse_psgd_opt(const char *opt, const char *val, struct sim_args *a)
{
    struct rumor_gossip_opts *g = &a->gossip;
    unsigned long long v = 0;
    if (strcmp(opt, "--start-powersgd-iter") == 0) {
        int rc = cli_parse_u64(val, opt, 0, 1ull << 40, &v);
        g->start_iter = v;
        return rc;
    }
    if (strcmp(opt, "--min-compression-rate") == 0)
        return cli_parse_double(val, opt, 0, 1e9, &g->min_compression_rate);
    if (strcmp(opt, "--orthogonalization-epsilon") == 0)
        return cli_parse_double(val, opt, 0, 1, &g->orth_eps);
    if (strcmp(opt, "--use-error-feedback") == 0)
        return s_parse_switch(val, opt, &g->use_error_feedback);
    if (strcmp(opt, "--batch-tensors-with-same-shape") == 0)
        return s_parse_switch(val, opt, &g->batch_same_shape);
    if (strcmp(opt, "--one-sided") == 0)
        return s_parse_switch(val, opt, &g->one_sided);
    return s_parse_adapt_opt(opt, val, a);
}

static int
s_parse_train_opt(const char *opt, const char *val, struct sim_args *a)
{
    struct rumor_workload_opts *w = &a->work;
    struct rumor_optim_opts *o = &a->optim;
    unsigned long long v = 0;
    int rc = 0;
    if (strcmp(opt, "--workload") == 0) {
        if (rumor_workload_kind_parse(val, &w->kind) != RUMOR_OK) {
            fprintf(stderr, "rumor sim: unknown workload '%s'\n", val);
            rc = -1;
        }
    } else if (strcmp(opt, "--optim") == 0) {
        a->optim_given = true;
        if (rumor_optim_kind_parse(val, &o->kind) != RUMOR_OK) {
            fprintf(stderr, "rumor sim: unknown optimizer '%s'\n", val);
            rc = -1;
        }
    } else if (strcmp(opt, "--shard") == 0) {
        if (rumor_shard_mode_parse(val, &w->shard) != RUMOR_OK) {
            fprintf(stderr, "rumor sim: unknown shard mode '%s'\n", val);
            rc = -1;
        }
    } else if (strcmp(opt, "--hidden") == 0) {
        rc = cli_parse_u64(val, opt, 1, RUMOR_WORKLOAD_MAX_WIDTH, &v);
        w->hidden[0] = (size_t)v;
        w->hidden_count = 1;
    } else if (strcmp(opt, "--batch") == 0) {
        rc = cli_parse_u64(val, opt, 0, RUMOR_WORKLOAD_MAX_BATCH, &v);
        w->batch = (size_t)v;
    } else if (strcmp(opt, "--dataset") == 0) {
        a->dataset = val;
    } else if (strcmp(opt, "--save-models") == 0) {
        a->save_models = val;
    } else if (strcmp(opt, "--dirichlet-alpha") == 0) {
        rc = cli_parse_double(val, opt, 1e-3, 1e6, &w->alpha);
    } else if (strcmp(opt, "--lr") == 0) {
        rc = cli_parse_double(val, opt, 0, 100, &o->lr);
    } else if (strcmp(opt, "--momentum") == 0) {
        rc = cli_parse_double(val, opt, 0, 0.999, &o->momentum);
    } else if (strcmp(opt, "--weight-decay") == 0) {
        rc = cli_parse_double(val, opt, 0, 1, &o->weight_decay);
    } else if (strcmp(opt, "--lsq-features") == 0) {
        rc = cli_parse_u64(val, opt, 1, 65536, &v);
        w->lsq_features = (size_t)v;
    } else if (strcmp(opt, "--lsq-outputs") == 0) {
        rc = cli_parse_u64(val, opt, 1, 65536, &v);
        w->lsq_outputs = (size_t)v;
    } else if (strcmp(opt, "--lsq-samples") == 0) {
        rc = cli_parse_u64(val, opt, 1, RUMOR_DATASET_MAX_SAMPLES, &v);
        w->lsq_samples = (size_t)v;
    } else if (strcmp(opt, "--lsq-noise") == 0) {
        rc = cli_parse_double(val, opt, 0, 1e3, &w->lsq_noise);
    } else {
        rc = s_parse_psgd_opt(opt, val, a);
    }
    return rc;
}

static int
s_parse_args(int argc, char **argv, struct sim_args *a)
{
    rumor_gossip_opts_default(&a->gossip);
    a->link.compute_s = 0.05;
    a->link.latency_s = 0.001;
    rumor_workload_opts_default(&a->work);
    a->work.kind = RUMOR_WORKLOAD_LSQ;
    rumor_optim_opts_default(&a->optim);
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
        if (strcmp(opt, "--gamma-grid") == 0 && !a->train) {
            a->gamma_grid = true;
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
        else if (strcmp(opt, "--codec") == 0) {
            snprintf(a->gossip.codec, sizeof a->gossip.codec, "%s", val);
            a->gossip.compressed = true;
        } else if (strcmp(opt, "--ef") == 0)
            snprintf(a->gossip.ef, sizeof a->gossip.ef, "%s", val);
        else if (strcmp(opt, "--gamma") == 0 && strcmp(val, "auto") == 0)
            a->gossip.gamma = RUMOR_GOSSIP_GAMMA_AUTO;
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
        else if (strcmp(opt, "--robust") == 0)
            snprintf(a->gossip.robust, sizeof a->gossip.robust, "%s", val);
        else if (strcmp(opt, "--clip-quantile") == 0)
            rc = cli_parse_double(val, opt, 0.01, 1, &a->gossip.clip_quantile);
        else if (strcmp(opt, "--clip-factor") == 0)
            rc = cli_parse_double(val, opt, 1, 1e6, &a->gossip.clip_factor);
        else if (strcmp(opt, "--period") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.period);
        else if (strcmp(opt, "--fragments") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.fragments);
        else if (strcmp(opt, "--gossip-rounds") == 0)
            rc = s_parse_unsigned(val, opt, &a->gossip.gossip_rounds);
        else if (strcmp(opt, "--stale") == 0)
            rc = s_parse_stale(val, &a->gossip.stale);
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
        else if (strcmp(opt, "--ef-alpha") == 0)
            rc = cli_parse_double(val, opt, 0, 1, &a->gossip.ef_alpha);
        else if (strcmp(opt, "--saef-scope") == 0)
            snprintf(a->gossip.saef_scope,
                     sizeof a->gossip.saef_scope,
                     "%s",
                     val);
        else if (strcmp(opt, "--edge-bytes") == 0)
            a->edge_bytes = val;
        else if (strcmp(opt, "--warm-start") == 0) {
            rc = s_parse_switch(val, opt, &a->gossip.warm_start);
            a->warm_start_given = true;
        } else if (strcmp(opt, "--size") == 0)
            rc = s_parse_size(val, a);
        else if (strcmp(opt, "--steps") == 0)
            rc = cli_parse_u64(val, opt, 0, 1ull << 40, &a->steps);
        else if (strcmp(opt, "--every") == 0)
            rc = cli_parse_u64(val, opt, 1, 1ull << 40, &a->every);
        else if (strcmp(opt, "--seed") == 0)
            rc = cli_parse_u64(val, opt, 0, UINT64_MAX, &a->seed);
        else if (a->train)
            rc = s_parse_train_opt(opt, val, a);
        else
            rc = s_unknown(opt);
        if (rc != 0)
            return -1;
    }
    if (a->topology == NULL) {
        fprintf(stderr, "rumor sim: --topology is required\n");
        return -1;
    }
    if (a->warm_start_given && strcmp(a->gossip.algo, "powergossip") != 0 &&
        strcmp(a->gossip.algo, "powersgd") != 0) {
        fprintf(stderr,
                "rumor sim: --warm-start applies to --algo powergossip or "
                "powersgd, not %s\n",
                a->gossip.algo);
        return -1;
    }
    a->gossip.seed = a->seed;
    a->work.seed = a->seed;
    return 0;
}

/* Whether the algorithm takes a consensus step size. */
static bool
s_uses_gamma(const char *algo)
{
    static const char *const uses[] = {"dpsgd",
                                       "choco",
                                       "deepsqueeze",
                                       "moniqua",
                                       "powergossip"};
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++)
        if (strcmp(algo, uses[i]) == 0)
            return true;
    return false;
}

/* Says which gamma "auto" chose (stderr: stdout is the data). */
static void
s_say_gamma(const struct sim_args *a, rumor_gossip *node0)
{
    if (s_uses_gamma(a->gossip.algo) &&
        a->gossip.gamma == RUMOR_GOSSIP_GAMMA_AUTO)
        fprintf(stderr,
                "rumor sim: %s gamma %.4g (auto)\n",
                a->gossip.algo,
                rumor_gossip_gamma(node0));
}

/* mean_i ||x_i - target||^2 in double; target NULL: the current mean. */
static double
s_consensus_error(float *const *x, size_t n, size_t numel, const double *target)
{
    double total = 0;
    for (size_t e = 0; e < numel; e++) {
        double mean = 0;
        for (size_t i = 0; target == NULL && i < n; i++)
            mean += x[i][e];
        mean = target == NULL ? mean / (double)n : target[e];
        for (size_t i = 0; i < n; i++) {
            double d = x[i][e] - mean;
            total += d * d;
        }
    }
    return total / (double)n;
}

/* The errors of one reported step, relative to step 0: to the starting
 * mean (the reference's, gossip_run.py GossipProblem.error) and to the
 * current mean (the spread alone; it ignores a drifting mean). */
struct sim_errors {
    double start, current;
};

static void
s_report(const struct sim_args *a,
         uint64_t step,
         double bits,
         struct sim_errors rel)
{
    if (a->json)
        printf("{\"step\": %llu, \"bits_per_node\": %.0f, \"rel_error\": "
               "%.9g, \"rel_error_current_mean\": %.9g}\n",
               (unsigned long long)step,
               bits,
               rel.start,
               rel.current);
    else
        printf("%llu,%.0f,%.9g,%.9g\n",
               (unsigned long long)step,
               bits,
               rel.start,
               rel.current);
}

struct sim_run {
    rumor_topology *topo;
    size_t n, numel;
    float **x;
    double *start_mean; /* the nodes' mean at step 0 */
    double e0;          /* mean_i ||x_i - start_mean||^2 at step 0 */
    rumor_gossip **nodes;
    rumor_sim *sim;
    struct rumor_tensor *tensor;       /* per node: x[i] as one tensor */
    struct rumor_model *model, **live; /* per node: x[i] as a model */
    struct sim_stale *stale;           /* --stale S > 0: per node, else NULL */
};

/* The model node i's gossip instance works on: the live one, or with
 * --stale the exchange's copy (its queue made in stale[i]). */
static rumor_err
s_exchange_model(struct sim_stale *stale,
                 size_t i,
                 unsigned s,
                 const struct rumor_model *live,
                 const struct rumor_model **out)
{
    *out = live;
    if (stale == NULL)
        return RUMOR_OK;
    rumor_err rc = sim_stale_init(&stale[i], s, live);
    *out = stale[i].copy;
    return rc;
}

static void
s_stale_free(struct sim_stale **stale, size_t n)
{
    for (size_t i = 0; *stale != NULL && i < n; i++)
        sim_stale_free(&(*stale)[i]);
    free(*stale);
    *stale = NULL;
}

static void
s_run_free(struct sim_run *r)
{
    for (size_t i = 0; r->nodes != NULL && i < r->n; i++)
        rumor_gossip_destroy(&r->nodes[i]);
    s_stale_free(&r->stale, r->n);
    free(r->tensor);
    free(r->model);
    free(r->live);
    for (size_t i = 0; r->x != NULL && i < r->n; i++)
        free(r->x[i]);
    rumor_sim_destroy(&r->sim);
    free(r->nodes);
    free(r->x);
    free(r->start_mean);
    rumor_topology_destroy(&r->topo);
}

/* The mean of the starting matrices, the reference's target. */
static rumor_err
s_run_start_mean(struct sim_run *r)
{
    r->start_mean = calloc(r->numel, sizeof *r->start_mean);
    if (r->start_mean == NULL)
        return RUMOR_ENOMEM;
    for (size_t e = 0; e < r->numel; e++) {
        for (size_t i = 0; i < r->n; i++)
            r->start_mean[e] += r->x[i][e];
        r->start_mean[e] /= (double)r->n;
    }
    r->e0 = s_consensus_error(r->x, r->n, r->numel, r->start_mean);
    return RUMOR_OK;
}

static struct sim_errors
s_run_errors(const struct sim_run *r)
{
    struct sim_errors rel = {0, 0};
    if (r->e0 > 0) {
        rel.start =
            s_consensus_error(r->x, r->n, r->numel, r->start_mean) / r->e0;
        rel.current = s_consensus_error(r->x, r->n, r->numel, NULL) / r->e0;
    }
    return rel;
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
    r->tensor = calloc(r->n, sizeof *r->tensor);
    r->model = calloc(r->n, sizeof *r->model);
    r->live = calloc(r->n, sizeof *r->live);
    if (a->gossip.stale > 0)
        r->stale = calloc(r->n, sizeof *r->stale);
    if (r->x == NULL || r->nodes == NULL || r->tensor == NULL ||
        r->model == NULL || r->live == NULL ||
        (a->gossip.stale > 0 && r->stale == NULL))
        return RUMOR_ENOMEM;
    rc = rumor_gossip_stale_check(&a->gossip, false, diag);
    for (size_t i = 0; i < r->n && rc == RUMOR_OK; i++) {
        r->x[i] = malloc(r->numel * sizeof(float));
        if (r->x[i] == NULL)
            return RUMOR_ENOMEM;
        struct rumor_rng rng;
        rumor_rng_init(&rng, a->seed, 1000 + i);
        for (size_t e = 0; e < r->numel; e++)
            r->x[i][e] = (float)rumor_rng_normal(&rng);
        r->tensor[i] = (struct rumor_tensor){r->x[i], 2, {a->rows, a->cols}};
        r->model[i] = (struct rumor_model){&r->tensor[i], 1};
        r->live[i] = &r->model[i];
        const struct rumor_model *m = NULL;
        rc = s_exchange_model(r->stale, i, a->gossip.stale, r->live[i], &m);
        if (rc == RUMOR_OK)
            rc = rumor_gossip_new(&a->gossip,
                                  r->topo,
                                  (uint32_t)i,
                                  m,
                                  &r->nodes[i],
                                  diag);
    }
    if (rc == RUMOR_OK)
        rc = rumor_sim_new(r->nodes, r->n, &r->sim);
    if (rc == RUMOR_OK)
        rc = s_run_start_mean(r);
    return rc;
}

/* One consensus step; with --stale the exchange of step t lands at the
 * start of step t + S, and the last step lands every pending one. */
static rumor_err
s_run_step(struct sim_run *r, uint64_t step, bool last)
{
    if (r->stale == NULL)
        return rumor_sim_step(r->sim, step);
    bool exchanged = false;
    sim_stale_land_nodes(r->stale, r->live, r->n, step);
    rumor_err rc = sim_stale_exchange(r->stale,
                                      r->live,
                                      r->sim,
                                      r->nodes,
                                      r->n,
                                      step,
                                      &exchanged);
    for (size_t i = 0; last && rc == RUMOR_OK && i < r->n; i++)
        sim_stale_land_all(&r->stale[i], r->live[i]);
    return rc;
}

/* from,to,bytes,messages for every directed edge that carried anything. */
static int
s_write_edges(const char *path, const rumor_sim *sim, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return cli_io_error("sim", path, "cannot open for writing");
    fprintf(f, "from,to,bytes,messages\n");
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (rumor_sim_messages_edge(sim, i, j) > 0)
                fprintf(f,
                        "%zu,%zu,%llu,%llu\n",
                        i,
                        j,
                        (unsigned long long)rumor_sim_bytes_edge(sim, i, j),
                        (unsigned long long)rumor_sim_messages_edge(sim, i, j));
    return fclose(f) == 0 ? 0 : cli_io_error("sim", path, "cannot write");
}

static double
s_bits_per_node(const rumor_sim *sim, size_t n)
{
    double bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += 8.0 * (double)rumor_sim_bytes_sent(sim, i);
    return bits / (double)n;
}

struct train_run {
    rumor_topology *topo;
    size_t n;
    struct rumor_dataset *data;
    rumor_workload **work;
    rumor_optim **optim;
    struct rumor_model **grad, *avg;
    rumor_gossip **nodes;
    rumor_sim *sim;
    bool grad_x;               /* the gossip averages gradients (as the node) */
    double first_loss;         /* the first step's mean loss */
    rumor_simlink *links;      /* --link-rate: modelled links */
    double seconds;            /* their modelled wall clock */
    FILE *trace;               /* --adapt-trace */
    struct rumor_model **live; /* per node: the workload's model */
    struct sim_stale *stale;   /* --stale S > 0: per node, else NULL */
    /* --stale with modelled links: one exchange at a time on the links,
     * the exchange of step t ending at done[t % S] */
    double compute_s, link_free, *done;
    uint64_t *done_step; /* per slot: its t, or UINT64_MAX */
};

static void
s_train_free(struct train_run *r)
{
    rumor_simlink_destroy(&r->links);
    if (r->trace != NULL)
        fclose(r->trace);
    rumor_sim_destroy(&r->sim);
    for (size_t i = 0; i < r->n; i++) {
        if (r->nodes != NULL)
            rumor_gossip_destroy(&r->nodes[i]);
        if (r->stale != NULL)
            sim_stale_free(&r->stale[i]);
        if (r->optim != NULL)
            rumor_optim_destroy(&r->optim[i]);
        if (r->grad != NULL)
            rumor_model_free(&r->grad[i]);
        if (r->work != NULL)
            rumor_workload_destroy(&r->work[i]);
    }
    rumor_model_free(&r->avg);
    free(r->stale);
    free(r->live);
    free(r->done);
    free(r->done_step);
    free(r->nodes);
    free(r->optim);
    free(r->grad);
    free(r->work);
    rumor_dataset_destroy(&r->data);
    rumor_topology_destroy(&r->topo);
}

/* --stale S > 0: the queues, and the clock of the modelled links. */
static rumor_err
s_stale_clock_new(struct train_run *r, const struct sim_args *a)
{
    unsigned s = a->gossip.stale;
    if (s == 0)
        return RUMOR_OK;
    r->stale = calloc(r->n, sizeof *r->stale);
    r->done = calloc(s, sizeof *r->done);
    r->done_step = malloc(s * sizeof *r->done_step);
    if (r->stale == NULL || r->done == NULL || r->done_step == NULL)
        return RUMOR_ENOMEM;
    for (unsigned k = 0; k < s; k++)
        r->done_step[k] = UINT64_MAX;
    r->compute_s = a->link.compute_s;
    return RUMOR_OK;
}

static rumor_err
s_train_node(struct sim_args *a,
             struct train_run *r,
             size_t i,
             struct rumor_diag *diag)
{
    a->work.node = (uint32_t)i;
    a->work.nodes = (uint32_t)r->n;
    a->work.dataset = r->data;
    rumor_err rc = rumor_workload_new(&a->work, &r->work[i], diag);
    if (rc != RUMOR_OK)
        return rc;
    struct rumor_model *model = rumor_workload_model(r->work[i]);
    const struct rumor_model *m = model;
    r->live[i] = model;
    rc = rumor_model_clone(model, &r->grad[i]);
    if (rc == RUMOR_OK)
        rc = rumor_optim_new(&a->optim, model, &r->optim[i]);
    if (rc == RUMOR_OK && !r->grad_x)
        rc = s_exchange_model(r->stale, i, a->gossip.stale, model, &m);
    if (rc == RUMOR_OK)
        rc = rumor_gossip_new(&a->gossip,
                              r->topo,
                              (uint32_t)i,
                              r->grad_x ? r->grad[i] : m,
                              &r->nodes[i],
                              diag);
    return rc;
}

static rumor_err
s_train_setup(struct sim_args *a, struct train_run *r, struct rumor_diag *diag)
{
    rumor_err rc =
        rumor_topology_from_spec(a->topology, a->seed, &r->topo, diag);
    if (rc != RUMOR_OK)
        return rc;
    r->n = rumor_topology_nodes(r->topo);
    if (strncmp(a->gossip.ef, "dgc", 3) == 0 && !a->optim_given)
        a->optim.kind = RUMOR_OPTIM_SGD; /* as rumor node: DGC's momentum */
    rc = node_ef_optim_check(&a->gossip, a->optim.kind, "--optim", diag);
    if (rc != RUMOR_OK)
        return rc;
    /* powersgd and allreduce average gradients, as `rumor node` does */
    struct rumor_node_opts no;
    rumor_node_opts_default(&no);
    no.gossip = a->gossip;
    r->grad_x = rumor_node_opts_gradient_exchange(&no);
    rc = rumor_gossip_stale_check(&a->gossip, r->grad_x, diag);
    if (rc == RUMOR_OK && a->dataset != NULL)
        rc = rumor_dataset_open(a->dataset, a->seed, &r->data, diag);
    r->work = calloc(r->n, sizeof *r->work);
    r->optim = calloc(r->n, sizeof *r->optim);
    r->grad = calloc(r->n, sizeof *r->grad);
    r->nodes = calloc(r->n, sizeof *r->nodes);
    r->live = calloc(r->n, sizeof *r->live);
    if (!r->work || !r->optim || !r->grad || !r->nodes || !r->live ||
        s_stale_clock_new(r, a) != RUMOR_OK)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < r->n && rc == RUMOR_OK; i++)
        rc = s_train_node(a, r, i, diag);
    if (rc == RUMOR_OK)
        rc = rumor_model_clone(rumor_workload_model(r->work[0]), &r->avg);
    if (rc == RUMOR_OK)
        rc = rumor_sim_new(r->nodes, r->n, &r->sim);
    if (rc == RUMOR_OK && a->link.rate_count > 0)
        rc = rumor_simlink_new(r->sim, r->nodes, r->n, &a->link, &r->links);
    if (rc == RUMOR_OK && a->adapt_trace != NULL) {
        r->trace = fopen(a->adapt_trace, "w");
        if (r->trace == NULL)
            rc = rumor_diag_errno(diag,
                                  a->adapt_trace,
                                  "cannot open for writing");
        else if (strcmp(a->gossip.algo, "powersgd") == 0)
            fprintf(r->trace, "step,node,rank,rel_error,changes\n");
        else
            fprintf(r->trace,
                    "step,node,peer,rate_bps,est_bps,budget,bytes,layers\n");
    }
    return rc;
}

/* sqrt(mean_i ||x_i - x*||^2) / ||x*||. */
static double
s_dist_opt(const struct train_run *r, const struct rumor_model *opt)
{
    double d = 0, norm = 0;
    for (size_t t = 0; t < opt->count; t++) {
        size_t numel = rumor_tensor_numel(&opt->tensors[t]);
        for (size_t e = 0; e < numel; e++) {
            double o = opt->tensors[t].data[e];
            norm += o * o;
            for (size_t i = 0; i < r->n; i++) {
                const struct rumor_model *m = rumor_workload_model(r->work[i]);
                double diff = m->tensors[t].data[e] - o;
                d += diff * diff / (double)r->n;
            }
        }
    }
    return norm > 0 ? sqrt(d / norm) : sqrt(d);
}

/* Held-out accuracy of the nodes' average model. */
static rumor_err
s_test_accuracy(struct train_run *r, double *acc)
{
    for (size_t t = 0; t < r->avg->count; t++) {
        size_t numel = rumor_tensor_numel(&r->avg->tensors[t]);
        for (size_t e = 0; e < numel; e++) {
            double sum = 0;
            for (size_t i = 0; i < r->n; i++)
                sum += rumor_workload_model(r->work[i])->tensors[t].data[e];
            r->avg->tensors[t].data[e] = (float)(sum / (double)r->n);
        }
    }
    struct rumor_eval ev;
    rumor_err rc =
        rumor_workload_eval(r->work[0], r->avg, RUMOR_EVAL_TEST, &ev);
    *acc = ev.accuracy;
    return rc;
}

static void
s_train_report(const struct sim_args *a,
               uint64_t step,
               double bits,
               double loss,
               const char *key,
               double metric,
               double seconds)
{
    if (a->json)
        printf("{\"step\": %llu, \"bits_per_node\": %.0f, \"loss\": %.9g, "
               "\"%s\": %.9g",
               (unsigned long long)step,
               bits,
               loss,
               key,
               metric);
    else
        printf("%llu,%.0f,%.9g,%.9g",
               (unsigned long long)step,
               bits,
               loss,
               metric);
    /* modelled links: the modelled wall clock as a last field */
    if (a->link.rate_count > 0)
        printf(a->json ? ", \"seconds\": %.9g" : ",%.9g", seconds);
    printf(a->json ? "}\n" : "\n");
}

/* --adapt-trace: per node and link, the modelled rate, the estimate, the
 * budget and bytes of the step's message, and its layers' k/bits; for
 * powersgd per node the rank, its error and the changes so far. */
static void
s_trace(const struct train_run *r, uint64_t step)
{
    struct rumor_gossip_link_report lr[64];
    struct rumor_gossip_layer_report y[16];
    struct rumor_gossip_rank_report rk;
    for (size_t i = 0; i < r->n; i++) {
        if (rumor_gossip_adapt_rank(r->nodes[i], &rk)) /* powersgd */
            fprintf(r->trace,
                    "%llu,%zu,%zu,%.6g,%llu\n",
                    (unsigned long long)step + 1,
                    i,
                    rk.rank,
                    rk.rel_error,
                    (unsigned long long)rk.changes);
        size_t links = rumor_gossip_adapt_links(r->nodes[i], lr, 64);
        for (size_t l = 0; l < links && l < 64; l++) {
            double rate =
                r->links != NULL
                    ? rumor_simlink_rate(r->links, i, lr[l].peer, step)
                    : 0;
            fprintf(r->trace,
                    "%llu,%zu,%u,%.6g,%.6g,%llu,%llu,",
                    (unsigned long long)step + 1,
                    i,
                    lr[l].peer,
                    rate,
                    8 * lr[l].rate_bytes_s,
                    (unsigned long long)lr[l].budget,
                    (unsigned long long)lr[l].bytes);
            size_t layers = rumor_gossip_adapt_layers(r->nodes[i], l, y, 16);
            for (size_t t = 0; t < layers && t < 16; t++)
                fprintf(r->trace, "%s%zu/%u", t ? ";" : "", y[t].k, y[t].bits);
            fprintf(r->trace, "\n");
        }
    }
}

/* The modelled wall clock with --stale: the step waits for the exchange
 * that lands at its start, then computes; its own exchange starts at its
 * start once the links are free (one exchange at a time), so a step
 * costs max(compute, exchange) when each exchange has S steps to go. */
static void
s_stale_clock(struct train_run *r, uint64_t u, double step_s, bool exchanged)
{
    unsigned s = r->stale[0].s;
    double start = r->seconds;
    if (u >= s && r->done_step[(u - s) % s] == u - s)
        start = fmax(start, r->done[(u - s) % s]);
    if (exchanged) {
        r->link_free = fmax(start, r->link_free) + (step_s - r->compute_s);
        r->done[u % s] = r->link_free;
        r->done_step[u % s] = u;
    }
    r->seconds = start + r->compute_s;
}

/* After the last optimizer step: every pending exchange lands (and the
 * clock waits for it). */
static void
s_stale_finish(struct train_run *r)
{
    for (size_t i = 0; r->stale != NULL && i < r->n; i++)
        sim_stale_land_all(&r->stale[i], r->live[i]);
    for (unsigned k = 0; r->stale != NULL && k < r->stale[0].s; k++)
        if (r->done_step[k] != UINT64_MAX)
            r->seconds = fmax(r->seconds, r->done[k]);
}

/* The step's gossip: in place on the live models, or with --stale the
 * landing due at its start and its own exchange on the copies. */
static rumor_err
s_train_gossip(struct train_run *r, uint64_t step)
{
    bool exchanged = true;
    rumor_err rc = r->stale == NULL ? rumor_sim_step(r->sim, step)
                                    : sim_stale_exchange(r->stale,
                                                         r->live,
                                                         r->sim,
                                                         r->nodes,
                                                         r->n,
                                                         step,
                                                         &exchanged);
    if (rc != RUMOR_OK || r->links == NULL)
        return rc;
    double step_s = rumor_simlink_step(r->links, step);
    if (r->stale == NULL)
        r->seconds += step_s;
    else
        s_stale_clock(r, step, step_s, exchanged);
    return RUMOR_OK;
}

/* One training step of every node: look-ahead, gradient, gossip, update
 * (with --stale what lands first). *loss receives the mean minibatch loss
 * over the nodes. */
static rumor_err
s_train_step(struct train_run *r, uint64_t step, double *loss)
{
    rumor_err rc = RUMOR_OK;
    *loss = 0;
    if (r->stale != NULL)
        sim_stale_land_nodes(r->stale, r->live, r->n, step);
    for (size_t i = 0; i < r->n && rc == RUMOR_OK; i++) {
        double l = 0;
        rc = rumor_gossip_step_ahead(r->nodes[i]);
        if (rc == RUMOR_OK)
            rc = rumor_workload_grad(r->work[i], step, r->grad[i], &l);
        *loss += l / (double)r->n;
    }
    if (rc == RUMOR_OK)
        rc = s_train_gossip(r, step);
    if (rc == RUMOR_OK && r->trace != NULL)
        s_trace(r, step);
    for (size_t i = 0; i < r->n && rc == RUMOR_OK; i++)
        rc = rumor_optim_step(r->optim[i],
                              step,
                              rumor_workload_model(r->work[i]),
                              r->grad[i]);
    return rc;
}

/* --save-models: every node's final model, node after node, its tensors
 * in order, as raw float32 in the host's byte order. */
static int
s_save_models(const char *path, const struct train_run *r)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return cli_io_error("sim", path, "cannot open for writing");
    bool ok = true;
    for (size_t i = 0; i < r->n; i++)
        for (size_t t = 0; t < r->live[i]->count; t++) {
            const struct rumor_tensor *x = &r->live[i]->tensors[t];
            size_t numel = rumor_tensor_numel(x);
            ok = ok && fwrite(x->data, sizeof(float), numel, f) == numel;
        }
    return fclose(f) == 0 && ok ? 0 : cli_io_error("sim", path, "cannot write");
}

/* A diverged run (a non-finite model fails the gossip's encode with
 * RUMOR_ENUMERIC before its loss is seen) stops with the options that
 * control it. */
static bool
s_train_diverged(const struct sim_args *a,
                 struct train_run *r,
                 rumor_err rc,
                 uint64_t done,
                 double loss)
{
    if (rc == RUMOR_OK && done == 1)
        r->first_loss = loss;
    if (rc != RUMOR_ENUMERIC &&
        (rc != RUMOR_OK || !node_diverged(loss, r->first_loss)))
        return false;
    char text[512];
    node_diverge_message(&a->gossip,
                         rumor_gossip_gamma(r->nodes[0]),
                         rumor_optim_lr(r->optim[0], done - 1),
                         done,
                         loss,
                         text,
                         sizeof text);
    fprintf(stderr, "rumor sim: %s\n", text);
    return true;
}

static int
s_train(int argc, char **argv)
{
    struct sim_args a = {0};
    a.train = true;
    if (s_parse_args(argc, argv, &a) != 0)
        return 2;
    struct train_run r = {0};
    struct rumor_diag diag = {0};
    rumor_err rc = s_train_setup(&a, &r, &diag);
    const struct rumor_model *opt = NULL;
    if (rc == RUMOR_OK && a.work.kind == RUMOR_WORKLOAD_LSQ &&
        rumor_workload_optimum(r.work[0], &opt) != RUMOR_OK) {
        rumor_diag_set(&diag,
                       "",
                       0,
                       0,
                       "lsq on a dataset has no known optimum");
        rc = RUMOR_EINVAL;
    }
    if (rc != RUMOR_OK) {
        char text[600];
        rumor_diag_format(&diag, text, sizeof text);
        fprintf(stderr,
                "rumor sim: %s\n",
                diag.msg[0] ? text : rumor_strerror(rc));
        s_train_free(&r);
        return rc == RUMOR_EINVAL || rc == RUMOR_EPROTO ? 2 : 1;
    }
    s_say_gamma(&a, r.nodes[0]);
    const char *key = opt != NULL ? "dist_opt" : "test_accuracy";
    if (!a.json)
        printf("step,bits_per_node,loss,%s%s\n",
               key,
               a.link.rate_count > 0 ? ",seconds" : "");
    for (uint64_t step = 0; step < a.steps && rc == RUMOR_OK; step++) {
        double loss = 0, metric = 0;
        rc = s_train_step(&r, step, &loss);
        uint64_t done = step + 1;
        if (rc == RUMOR_OK && done == a.steps)
            s_stale_finish(&r);
        if (s_train_diverged(&a, &r, rc, done, loss)) {
            s_train_free(&r);
            return CLI_EXIT_DIVERGED;
        }
        if (rc != RUMOR_OK || (done % a.every != 0 && done != a.steps))
            continue;
        if (opt != NULL)
            metric = s_dist_opt(&r, opt);
        else
            rc = s_test_accuracy(&r, &metric);
        s_train_report(&a,
                       done,
                       s_bits_per_node(r.sim, r.n),
                       loss,
                       key,
                       metric,
                       r.seconds);
    }
    if (rc != RUMOR_OK)
        fprintf(stderr, "rumor sim: step failed: %s\n", rumor_strerror(rc));
    int status = rc == RUMOR_OK ? 0 : 1;
    if (status == 0 && a.edge_bytes != NULL &&
        s_write_edges(a.edge_bytes, r.sim, r.n) != 0)
        status = 1;
    if (status == 0 && a.save_models != NULL &&
        s_save_models(a.save_models, &r) != 0)
        status = 1;
    s_train_free(&r);
    return status;
}

/* Prints why a run could not start; returns its exit status. */
static int
s_setup_failed(rumor_err rc, const struct rumor_diag *diag)
{
    char text[600];
    rumor_diag_format(diag, text, sizeof text);
    fprintf(stderr,
            "rumor sim: %s\n",
            diag->msg[0] ? text : rumor_strerror(rc));
    return rc == RUMOR_EINVAL || rc == RUMOR_EPROTO ? 2 : 1;
}

/* One consensus run at the options' gamma, reported every K steps. */
static int
s_consensus_curve(const struct sim_args *a)
{
    struct sim_run r = {0};
    struct rumor_diag diag = {0};
    rumor_err rc = s_run_setup(a, &r, &diag);
    if (rc != RUMOR_OK) {
        s_run_free(&r);
        return s_setup_failed(rc, &diag);
    }
    s_say_gamma(a, r.nodes[0]);
    if (!a->json)
        printf("step,bits_per_node,rel_error,rel_error_current_mean\n");
    s_report(a, 0, 0, (struct sim_errors){1, 1});
    for (uint64_t step = 1; step <= a->steps && rc == RUMOR_OK; step++) {
        rc = s_run_step(&r, step, step == a->steps);
        if (rc != RUMOR_OK || (step % a->every != 0 && step != a->steps))
            continue;
        s_report(a, step, s_bits_per_node(r.sim, r.n), s_run_errors(&r));
    }
    if (rc != RUMOR_OK)
        fprintf(stderr, "rumor sim: step failed: %s\n", rumor_strerror(rc));
    int status = rc == RUMOR_OK ? 0 : 1;
    if (status == 0 && a->edge_bytes != NULL &&
        s_write_edges(a->edge_bytes, r.sim, r.n) != 0)
        status = 1;
    s_run_free(&r);
    return status;
}

/* The reference's grid of diffusion rates (epfml/powergossip gossip_run.py,
 * hyperparameter_range_min/max, num_samples): np.exp(np.linspace(
 * np.log(1e-4), np.log(1.308), 20)), computed as numpy does (start + k
 * step, the last point exactly the end). */
#define SIM_GRID_COUNT 20
#define SIM_GRID_MIN   1e-4
#define SIM_GRID_MAX   1.308

static double
s_grid_gamma(int k)
{
    double lo = log(SIM_GRID_MIN), hi = log(SIM_GRID_MAX);
    double step = (hi - lo) / (SIM_GRID_COUNT - 1);
    return exp(k == SIM_GRID_COUNT - 1 ? hi : lo + k * step);
}

struct grid_point {
    double gamma, bits;
    struct sim_errors rel;
    bool finished; /* every step ran and the error is finite */
};

/* Runs --steps steps at one gamma; a run that fails on a non-finite
 * value (it diverged) is a point that did not finish, not an error. */
static rumor_err
s_grid_run(const struct sim_args *a,
           struct grid_point *p,
           struct rumor_diag *diag)
{
    struct sim_args one = *a;
    one.gossip.gamma = p->gamma;
    struct sim_run r = {0};
    rumor_err rc = s_run_setup(&one, &r, diag);
    for (uint64_t step = 1; step <= a->steps && rc == RUMOR_OK; step++)
        rc = s_run_step(&r, step, step == a->steps);
    if (rc == RUMOR_OK || rc == RUMOR_ENUMERIC) {
        p->bits = s_bits_per_node(r.sim, r.n);
        p->rel = s_run_errors(&r);
        p->finished = rc == RUMOR_OK && isfinite(p->rel.start) &&
                      isfinite(p->rel.current);
        rc = RUMOR_OK;
    }
    s_run_free(&r);
    return rc;
}

static void
s_json_number(const char *key, double v, const char *after)
{
    if (isfinite(v))
        printf("\"%s\": %.9g%s", key, v, after);
    else
        printf("\"%s\": null%s", key, after);
}

static void
s_grid_report(const struct sim_args *a, const struct grid_point *p, bool best)
{
    double start = p->finished ? p->rel.start : INFINITY;
    double current = p->finished ? p->rel.current : INFINITY;
    if (!a->json) {
        printf("%.17g,%.0f,%.9g,%.9g,%d\n",
               p->gamma,
               p->bits,
               start,
               current,
               best ? 1 : 0);
        return;
    }
    printf("{\"gamma\": %.17g, \"bits_per_node\": %.0f, ", p->gamma, p->bits);
    s_json_number("rel_error", start, ", ");
    s_json_number("rel_error_current_mean", current, ", ");
    printf("\"best\": %s}\n", best ? "true" : "false");
}

/* --gamma-grid: every gamma of the reference's grid for --steps steps from
 * the same starting matrices, and the one with the lowest error to the
 * starting mean at the end, as epfml/ChocoSGD's tune_consensus_stepsize
 * picks (min over the grid of the final error). */
static int
s_consensus_grid(const struct sim_args *a)
{
    struct grid_point pts[SIM_GRID_COUNT];
    int best = -1;
    for (int k = 0; k < SIM_GRID_COUNT; k++) {
        struct rumor_diag diag = {0};
        pts[k] = (struct grid_point){.gamma = s_grid_gamma(k)};
        rumor_err rc = s_grid_run(a, &pts[k], &diag);
        if (rc != RUMOR_OK)
            return s_setup_failed(rc, &diag);
        if (pts[k].finished &&
            (best < 0 || pts[k].rel.start < pts[best].rel.start))
            best = k;
    }
    if (!a->json)
        printf("gamma,bits_per_node,rel_error,rel_error_current_mean,best\n");
    for (int k = 0; k < SIM_GRID_COUNT; k++)
        s_grid_report(a, &pts[k], k == best);
    fflush(stdout); /* the rows before the verdict on a shared terminal */
    if (best < 0) {
        fprintf(stderr, "rumor sim: every gamma of the grid diverged\n");
        return 1;
    }
    fprintf(stderr,
            "rumor sim: %s best gamma %.17g (rel_error %.3g after %llu "
            "steps)\n",
            a->gossip.algo,
            pts[best].gamma,
            pts[best].rel.start,
            (unsigned long long)a->steps);
    return 0;
}

static int
s_consensus(int argc, char **argv)
{
    struct sim_args a = {0};
    if (s_parse_args(argc, argv, &a) != 0)
        return 2;
    if (!a.gamma_grid)
        return s_consensus_curve(&a);
    const char *why = NULL;
    if (!s_uses_gamma(a.gossip.algo))
        why = "the algorithm has no --gamma";
    else if (a.gossip.gamma != RUMOR_GOSSIP_GAMMA_AUTO)
        why = "it tries its own gammas: drop --gamma";
    else if (a.edge_bytes != NULL)
        why = "--edge-bytes needs a single run";
    if (why != NULL) {
        fprintf(stderr,
                "rumor sim: --gamma-grid with %s: %s\n",
                a.gossip.algo,
                why);
        return 2;
    }
    return s_consensus_grid(&a);
}

int
cli_sim_main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "consensus") == 0)
        return s_consensus(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return s_train(argc - 1, argv + 1);
    cli_sim_help(stderr);
    return 2;
}
