/*
 * The node's options: one table maps every long option name to a field of
 * struct rumor_node_opts and a parser, so the command line (`--lr 0.1`),
 * the INI config file (`lr = 0.1`, read with Debian's libinih) and the
 * Python binding all go through rumor_node_config_set and spell options the
 * same way. The config handle keeps a bit per option that was given, so
 * rumor_node_config_check can refuse options that do not apply to the
 * chosen workload, optimizer or algorithm instead of ignoring them silently
 * (a `--rank 4` with `--algo choco` is a user's mistake worth reporting).
 * The bits stay in the handle rather than in struct rumor_node_opts: a
 * caller who fills the struct directly has given nothing by name, and
 * rumor_node_opts_check checks only what the values say.
 *
 * Alternatives rejected: getopt_long (no shared table with the config file
 * and the binding, and its error messages cannot name the file line);
 * accepting and ignoring inapplicable options (experiments then run with
 * settings other than the ones a person believes).
 */
#include "rumor/node.h"

#include "node/runtime_impl.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- types ------------------------------------------------------------ */

typedef enum s_kind {
    S_STR,      /* char array of size `size` */
    S_U64,      /* uint64_t in [lo, hi] */
    S_U32,      /* uint32_t in [lo, hi] */
    S_SIZE,     /* size_t in [lo, hi] */
    S_DBL,      /* double in [lo, hi] */
    S_BOOL,     /* bool; a flag on the command line */
    S_WORKLOAD, /* rumor_workload_kind */
    S_HIDDEN,   /* "64,32" */
    S_SHARD,    /* iid | dirichlet:ALPHA */
    S_OPTIM,    /* rumor_optim_kind */
    S_EXCHANGE, /* auto | model | gradient */
    S_LOGLEVEL, /* error | warn | info | debug */
    S_RATE,     /* bits per second with an optional k, M or G suffix */
    S_PROGRESS, /* auto | on | off */
    S_GAMMA,    /* auto | a double in [lo, hi] */
    S_CODEC     /* as S_STR; a given codec also sets gossip.compressed (the
                   compressed all-reduce) */
} s_kind;

struct s_opt {
    const char *name;
    s_kind kind;
    size_t off;  /* offset of the field in struct rumor_node_opts */
    size_t size; /* S_STR: array size */
    double lo, hi;
};

#define F(field) offsetof(struct rumor_node_opts, field)
#define A(field) sizeof(((struct rumor_node_opts *)0)->field)

static const struct s_opt s_opts[] = {
    {"topology", S_STR, F(topology), A(topology), 0, 0},
    {"id", S_U32, F(id), 0, 0, 65535},
    {"key", S_STR, F(key), A(key), 0, 0},
    {"insecure", S_BOOL, F(insecure), 0, 0, 0},
    {"workload", S_WORKLOAD, F(workload.kind), 0, 0, 0},
    {"hidden", S_HIDDEN, F(workload.hidden), 0, 0, 0},
    {"dataset", S_STR, F(dataset), A(dataset), 0, 0},
    {"shard", S_SHARD, F(workload.shard), 0, 0, 0},
    {"test-fraction", S_DBL, F(workload.test_fraction), 0, 0.01, 0.9},
    {"batch", S_SIZE, F(workload.batch), 0, 0, RUMOR_WORKLOAD_MAX_BATCH},
    {"lsq-samples", S_SIZE, F(workload.lsq_samples), 0, 2, 1 << 22},
    {"lsq-features", S_SIZE, F(workload.lsq_features), 0, 1, 65536},
    {"lsq-outputs", S_SIZE, F(workload.lsq_outputs), 0, 1, 65536},
    {"lsq-noise", S_DBL, F(workload.lsq_noise), 0, 0, 1e6},
    {"cuda", S_BOOL, F(workload.want_cuda), 0, 0, 0},
    {"optimizer", S_OPTIM, F(optim.kind), 0, 0, 0},
    {"lr", S_DBL, F(optim.lr), 0, 1e-12, 1e6},
    {"momentum", S_DBL, F(optim.momentum), 0, 0, 0.999999},
    {"weight-decay", S_DBL, F(optim.weight_decay), 0, 0, 1e6},
    {"warmup", S_U64, F(optim.warmup_steps), 0, 0, 1e15},
    {"decay-every", S_U64, F(optim.decay_every), 0, 0, 1e15},
    {"decay-factor", S_DBL, F(optim.decay_factor), 0, 1e-12, 1},
    {"algo", S_STR, F(gossip.algo), A(gossip.algo), 0, 0},
    {"codec", S_CODEC, F(gossip.codec), A(gossip.codec), 0, 0},
    {"ef", S_STR, F(gossip.ef), A(gossip.ef), 0, 0},
    {"gamma", S_GAMMA, F(gossip.gamma), 0, 1e-9, RUMOR_GOSSIP_GAMMA_MAX},
    {"rank", S_SIZE, F(gossip.rank), 0, 1, 4096},
    {"iterations", S_U32, F(gossip.iterations), 0, 1, 1000},
    {"period", S_U32, F(gossip.period), 0, 1, 1000000},
    {"gossip-rounds", S_U32, F(gossip.gossip_rounds), 0, 0, 1000},
    {"delta-codec", S_STR, F(gossip.delta_codec), A(gossip.delta_codec), 0, 0},
    {"outer-lr", S_DBL, F(gossip.outer_lr), 0, 1e-9, 100},
    {"outer-momentum", S_DBL, F(gossip.outer_momentum), 0, 0, 0.999999},
    {"fragments", S_U32, F(gossip.fragments), 0, 1, 4096},
    {"stale", S_U32, F(gossip.stale), 0, 0, 1000000},
    {"theta", S_DBL, F(gossip.theta), 0, 1e-9, 1e9},
    {"ef-alpha", S_DBL, F(gossip.ef_alpha), 0, 0, 1},
    {"saef-scope", S_STR, F(gossip.saef_scope), A(gossip.saef_scope), 0, 0},
    {"adapt", S_STR, F(gossip.adapt), A(gossip.adapt), 0, 0},
    {"comm-share", S_DBL, F(gossip.comm_share), 0, 0, 0.99},
    {"adapt-density", S_DBL, F(gossip.adapt_density), 0, 1e-6, 1},
    {"adapt-error", S_DBL, F(gossip.adapt_error), 0, 1e-6, 100},
    {"adapt-lambda", S_DBL, F(gossip.adapt_lambda), 0, 0, 1e6},
    {"adapt-rank-min", S_SIZE, F(gossip.adapt_rank_min), 0, 1, 256},
    {"adapt-rank-max", S_SIZE, F(gossip.adapt_rank_max), 0, 1, 256},
    {"start-powersgd-iter", S_U64, F(gossip.start_iter), 0, 0, 1e15},
    {"min-compression-rate", S_DBL, F(gossip.min_compression_rate), 0, 0, 1e9},
    {"use-error-feedback", S_BOOL, F(gossip.use_error_feedback), 0, 0, 0},
    {"warm-start", S_BOOL, F(gossip.warm_start), 0, 0, 0},
    {"orthogonalization-epsilon", S_DBL, F(gossip.orth_eps), 0, 0, 1},
    {"batch-tensors-with-same-shape",
     S_BOOL,
     F(gossip.batch_same_shape),
     0,
     0,
     0},
    {"one-sided", S_BOOL, F(gossip.one_sided), 0, 0, 0},
    {"exchange", S_EXCHANGE, F(exchange), 0, 0, 0},
    {"overlap", S_BOOL, F(overlap), 0, 0, 0},
    {"seed", S_U64, F(workload.seed), 0, 0, 1.8e19},
    {"steps", S_U64, F(steps), 0, 1, 1e12},
    {"deadline-ms", S_U32, F(deadline_ms), 0, 1, 86400000},
    {"deadline-factor", S_DBL, F(deadline_factor), 0, 0, 1000},
    {"down-after", S_U32, F(down_after), 0, 1, RUMOR_GOSSIP_DOWN_AFTER_MAX},
    {"clip-norm", S_DBL, F(gossip.clip_norm), 0, 0, 1e30},
    {"robust", S_STR, F(gossip.robust), A(gossip.robust), 0, 0},
    {"clip-quantile", S_DBL, F(gossip.clip_quantile), 0, 0.01, 1},
    {"clip-factor", S_DBL, F(gossip.clip_factor), 0, 1, 1e6},
    {"join", S_BOOL, F(join), 0, 0, 0},
    {"connect-timeout-ms", S_U32, F(connect_ms), 0, 1, 86400000},
    {"eval-every", S_U64, F(eval_every), 0, 0, 1e12},
    {"consensus-every", S_U64, F(consensus_every), 0, 0, 1e12},
    {"metrics-dir", S_STR, F(metrics_dir), A(metrics_dir), 0, 0},
    {"metrics-listen", S_STR, F(metrics_listen), A(metrics_listen), 0, 0},
    {"log-level", S_LOGLEVEL, F(log_level), 0, 0, 0},
    {"rate", S_RATE, F(rate_bits), 0, 0, 0},
    {"delay-ms", S_U32, F(delay_ms), 0, 0, 60000},
    {"progress", S_PROGRESS, F(progress), 0, 0, 0},
    {"checkpoint-dir", S_STR, F(checkpoint_dir), A(checkpoint_dir), 0, 0},
    {"checkpoint-every", S_U64, F(checkpoint_every), 0, 0, 1e12},
    {"checkpoint-keep", S_U32, F(checkpoint_keep), 0, 1, 1000000},
    {"resume", S_BOOL, F(resume), 0, 0, 0},
};

#undef F
#undef A

#define S_OPT_COUNT (sizeof s_opts / sizeof s_opts[0])

struct rumor_node_config {
    struct rumor_node_opts opts;
    uint64_t given[(S_OPT_COUNT + 63) / 64]; /* bit k % 64 of word k / 64
                                                set when option k was set */
};

/* --- static helpers --------------------------------------------------- */

static int
s_find(const char *name)
{
    for (size_t i = 0; i < S_OPT_COUNT; i++)
        if (strcmp(s_opts[i].name, name) == 0)
            return (int)i;
    return -1;
}

static rumor_err
s_bad(struct rumor_diag *diag,
      const char *name,
      const char *value,
      const char *want)
{
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "--%s: expected %s, got '%s'",
                   name,
                   want,
                   value);
    return RUMOR_EINVAL;
}

static rumor_err
s_parse_u64(const char *v,
            const struct s_opt *o,
            unsigned long long *out,
            struct rumor_diag *diag)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 ||
        (double)x < o->lo || (double)x > o->hi) {
        char want[96];
        snprintf(want,
                 sizeof want,
                 "a whole number in [%.0f, %.0f]",
                 o->lo,
                 o->hi);
        return s_bad(diag, o->name, v, want);
    }
    *out = x;
    return RUMOR_OK;
}

static rumor_err
s_parse_double(const char *v,
               const char *name,
               double lo,
               double hi,
               double *out,
               struct rumor_diag *diag)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !isfinite(x) || x < lo ||
        x > hi) {
        char want[96];
        snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
        return s_bad(diag, name, v, want);
    }
    *out = x;
    return RUMOR_OK;
}

static rumor_err
s_parse_hidden(const char *v,
               struct rumor_workload_opts *w,
               struct rumor_diag *diag)
{
    size_t hidden[RUMOR_WORKLOAD_MAX_HIDDEN];
    size_t count = 0;
    const char *p = v;
    for (;;) {
        char *end = NULL;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (*p < '0' || *p > '9' || errno != 0 || x < 1 ||
            x > RUMOR_WORKLOAD_MAX_WIDTH || count == RUMOR_WORKLOAD_MAX_HIDDEN)
            return s_bad(diag,
                         "hidden",
                         v,
                         "1 to 8 widths in [1, 65536] separated by commas");
        hidden[count++] = (size_t)x;
        if (*end == '\0')
            break;
        if (*end != ',')
            return s_bad(diag, "hidden", v, "widths separated by commas");
        p = end + 1;
    }
    memcpy(w->hidden, hidden, count * sizeof hidden[0]);
    w->hidden_count = count;
    return RUMOR_OK;
}

static rumor_err
s_parse_shard(const char *v,
              struct rumor_workload_opts *w,
              struct rumor_diag *diag)
{
    if (strcmp(v, "iid") == 0) {
        w->shard = RUMOR_SHARD_IID;
        return RUMOR_OK;
    }
    if (strncmp(v, "dirichlet:", 10) != 0)
        return s_bad(diag, "shard", v, "iid or dirichlet:ALPHA");
    double alpha = 0;
    rumor_err rc = s_parse_double(v + 10, "shard", 1e-6, 1e9, &alpha, diag);
    if (rc != RUMOR_OK)
        return rc;
    w->shard = RUMOR_SHARD_DIRICHLET;
    w->alpha = alpha;
    return RUMOR_OK;
}

static rumor_err
s_parse_rate(const char *v, uint64_t *out, struct rumor_diag *diag)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    double scale = 1;
    if (end != v && *end != '\0' && end[1] == '\0') {
        scale = *end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 0;
        end++;
    }
    if (end == v || *end != '\0' || errno != 0 || !isfinite(x) || x < 0 ||
        scale == 0 || x * scale > 1e13)
        return s_bad(diag,
                     "rate",
                     v,
                     "bits per second, e.g. 100M (suffix k, M or G; 0 = off)");
    *out = (uint64_t)(x * scale);
    return RUMOR_OK;
}

static rumor_err
s_parse_bool(const char *v,
             bool *out,
             const char *name,
             struct rumor_diag *diag)
{
    if (v[0] == '\0' || strcmp(v, "true") == 0 || strcmp(v, "1") == 0 ||
        strcmp(v, "yes") == 0 || strcmp(v, "on") == 0) {
        *out = true;
        return RUMOR_OK;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 ||
        strcmp(v, "no") == 0 || strcmp(v, "off") == 0) {
        *out = false;
        return RUMOR_OK;
    }
    return s_bad(diag, name, v, "true or false");
}

/* Applies one option to a scratch copy, so a bad value leaves opts as it
 * was. */
static rumor_err
s_apply(struct rumor_node_opts *o,
        const struct s_opt *d,
        const char *v,
        struct rumor_diag *diag)
{
    char *field = (char *)o + d->off;
    unsigned long long u = 0;
    double x = 0;
    rumor_err rc = RUMOR_OK;
    switch (d->kind) {
    case S_CODEC:
        o->gossip.compressed = true;
        /* fall through */
    case S_STR:
        if (strlen(v) >= d->size)
            return s_bad(diag, d->name, v, "a shorter value");
        memcpy(field, v, strlen(v) + 1);
        return RUMOR_OK;
    case S_U64:
        rc = s_parse_u64(v, d, &u, diag);
        if (rc == RUMOR_OK)
            *(uint64_t *)(void *)field = u;
        return rc;
    case S_U32:
        rc = s_parse_u64(v, d, &u, diag);
        if (rc == RUMOR_OK)
            *(uint32_t *)(void *)field = (uint32_t)u;
        return rc;
    case S_SIZE:
        rc = s_parse_u64(v, d, &u, diag);
        if (rc == RUMOR_OK)
            *(size_t *)(void *)field = (size_t)u;
        return rc;
    case S_DBL:
        rc = s_parse_double(v, d->name, d->lo, d->hi, &x, diag);
        if (rc == RUMOR_OK)
            *(double *)(void *)field = x;
        return rc;
    case S_GAMMA:
        if (strcmp(v, "auto") == 0) {
            *(double *)(void *)field = RUMOR_GOSSIP_GAMMA_AUTO;
            return RUMOR_OK;
        }
        rc = s_parse_double(v, d->name, d->lo, d->hi, &x, diag);
        if (rc == RUMOR_OK)
            *(double *)(void *)field = x;
        return rc;
    case S_BOOL:
        return s_parse_bool(v, (bool *)(void *)field, d->name, diag);
    case S_WORKLOAD:
        if (rumor_workload_kind_parse(v, &o->workload.kind) != RUMOR_OK)
            return s_bad(diag, d->name, v, "lsq, logreg or mlp");
        return RUMOR_OK;
    case S_HIDDEN:
        return s_parse_hidden(v, &o->workload, diag);
    case S_SHARD:
        return s_parse_shard(v, &o->workload, diag);
    case S_OPTIM:
        if (rumor_optim_kind_parse(v, &o->optim.kind) != RUMOR_OK)
            return s_bad(diag, d->name, v, "sgd, momentum or nesterov");
        return RUMOR_OK;
    case S_EXCHANGE:
        if (strcmp(v, "auto") == 0)
            o->exchange = RUMOR_NODE_EXCHANGE_AUTO;
        else if (strcmp(v, "model") == 0)
            o->exchange = RUMOR_NODE_EXCHANGE_MODEL;
        else if (strcmp(v, "gradient") == 0)
            o->exchange = RUMOR_NODE_EXCHANGE_GRADIENT;
        else
            return s_bad(diag, d->name, v, "auto, model or gradient");
        return RUMOR_OK;
    case S_LOGLEVEL:
        if (rumor_log_parse_level(v, &o->log_level) != RUMOR_OK)
            return s_bad(diag, d->name, v, "error, warn, info or debug");
        return RUMOR_OK;
    case S_RATE:
        return s_parse_rate(v, &o->rate_bits, diag);
    case S_PROGRESS:
        if (strcmp(v, "auto") == 0)
            o->progress = -1;
        else if (strcmp(v, "on") == 0)
            o->progress = 1;
        else if (strcmp(v, "off") == 0)
            o->progress = 0;
        else
            return s_bad(diag, d->name, v, "auto, on or off");
        return RUMOR_OK;
    }
    return RUMOR_EINVAL;
}

/* given == NULL (options filled in directly): nothing was given by name. */
static bool
s_given(const uint64_t *given, const char *name)
{
    int k = s_find(name);
    return given != NULL && k >= 0 && (given[k / 64] >> (k % 64) & 1u) != 0;
}

static bool
s_algo_is(const struct rumor_node_opts *o, const char *a, const char *b)
{
    return strcmp(o->gossip.algo, a) == 0 ||
           (b != NULL && strcmp(o->gossip.algo, b) == 0);
}

/* Options that only apply to some algorithms: name and the algorithms. */
struct s_applies {
    const char *name;
    const char *algos[5];
};

static const struct s_applies s_algo_opts[] = {
    {"codec", {"choco", "deepsqueeze", "allreduce", NULL}},
    {"gamma", {"dpsgd", "choco", "powergossip", "deepsqueeze", "moniqua"}},
    {"rank", {"powergossip", "powersgd", NULL, NULL}},
    {"iterations", {"powergossip", "powersgd", NULL, NULL}},
    {"period", {"localsgd", NULL, NULL, NULL}},
    {"gossip-rounds", {"localsgd", NULL, NULL, NULL}},
    {"delta-codec", {"localsgd", NULL, NULL, NULL}},
    {"outer-lr", {"localsgd", NULL, NULL, NULL}},
    {"outer-momentum", {"localsgd", NULL, NULL, NULL}},
    {"fragments", {"localsgd", NULL, NULL, NULL}},
    {"theta", {"moniqua", NULL, NULL, NULL}},
    {"ef-alpha", {"localsgd", NULL, NULL, NULL}},
    {"saef-scope", {"localsgd", NULL, NULL, NULL}},
    {"adapt", {"choco", "powersgd", NULL, NULL}},
    {"start-powersgd-iter", {"powersgd", NULL, NULL, NULL}},
    {"min-compression-rate", {"powersgd", NULL, NULL, NULL}},
    {"use-error-feedback", {"powersgd", NULL, NULL, NULL}},
    {"warm-start", {"powersgd", "powergossip", NULL, NULL}},
    {"orthogonalization-epsilon", {"powersgd", NULL, NULL, NULL}},
    {"batch-tensors-with-same-shape", {"powersgd", NULL, NULL, NULL}},
    {"one-sided", {"powersgd", NULL, NULL, NULL}},
};

/* PowerSGD's options that need one another (the algorithm's own check,
 * gossip/powersgd.c, says the same at run time; this one names the
 * options as the user spelled them). */
static rumor_err
s_psgd_check(const struct rumor_node_opts *o,
             const uint64_t *given,
             struct rumor_diag *diag)
{
    const struct rumor_gossip_opts *g = &o->gossip;
    const char *why = NULL;
    if (!s_algo_is(o, "powersgd", NULL))
        return RUMOR_OK;
    if (s_given(given, "iterations") && !g->one_sided)
        why = "--iterations applies to --algo powersgd with --one-sided "
              "(the hook's step is one P and one Q)";
    else if (g->one_sided && !g->use_error_feedback)
        why = "--one-sided needs --use-error-feedback (epfml's variant "
              "always keeps the error)";
    else if (g->one_sided && g->adapt[0] != '\0')
        why = "--adapt needs the hook variant, not --one-sided";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag, "", 0, 0, "%s", why);
    return RUMOR_EINVAL;
}

/* Options of the wrong workload, optimizer, algorithm or feature: given
 * by name but unused by what was chosen. */
static rumor_err
s_check_applies(const struct rumor_node_opts *o,
                const uint64_t *given,
                struct rumor_diag *diag)
{
    bool lsq = o->workload.kind == RUMOR_WORKLOAD_LSQ;
    static const char *const lsq_only[] = {"lsq-samples",
                                           "lsq-features",
                                           "lsq-outputs",
                                           "lsq-noise"};
    for (size_t i = 0; i < sizeof lsq_only / sizeof lsq_only[0]; i++)
        if (!lsq && s_given(given, lsq_only[i])) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "--%s applies to --workload lsq only",
                           lsq_only[i]);
            return RUMOR_EINVAL;
        }
    if (lsq && (s_given(given, "dataset") || s_given(given, "shard"))) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--workload lsq trains on a generated problem with a "
                       "known optimum: --dataset and --shard do not apply");
        return RUMOR_EINVAL;
    }
    if (o->workload.kind != RUMOR_WORKLOAD_MLP && s_given(given, "hidden")) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--hidden applies to --workload mlp only");
        return RUMOR_EINVAL;
    }
    if (o->optim.kind == RUMOR_OPTIM_SGD && s_given(given, "momentum")) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--momentum needs --optimizer momentum or nesterov");
        return RUMOR_EINVAL;
    }
    if (o->optim.decay_every == 0 && s_given(given, "decay-factor")) {
        rumor_diag_set(diag, "", 0, 0, "--decay-factor needs --decay-every");
        return RUMOR_EINVAL;
    }
    for (size_t i = 0; i < sizeof s_algo_opts / sizeof s_algo_opts[0]; i++) {
        const struct s_applies *a = &s_algo_opts[i];
        if (!s_given(given, a->name))
            continue;
        bool fits = false;
        for (size_t k = 0;
             k < sizeof a->algos / sizeof a->algos[0] && a->algos[k] != NULL;
             k++)
            fits |= strcmp(o->gossip.algo, a->algos[k]) == 0;
        if (!fits) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "--%s does not apply to --algo %s",
                           a->name,
                           o->gossip.algo);
            return RUMOR_EINVAL;
        }
    }
    static const char *const ckpt_opts[] = {"checkpoint-every",
                                            "checkpoint-keep",
                                            "resume"};
    for (size_t i = 0; i < 3; i++)
        if (o->checkpoint_dir[0] == '\0' && s_given(given, ckpt_opts[i])) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "--%s needs --checkpoint-dir DIR",
                           ckpt_opts[i]);
            return RUMOR_EINVAL;
        }
    static const char *const adapt_opts[] = {"comm-share",
                                             "adapt-density",
                                             "adapt-error",
                                             "adapt-lambda",
                                             "adapt-rank-min",
                                             "adapt-rank-max"};
    for (size_t i = 0; i < sizeof adapt_opts / sizeof adapt_opts[0]; i++)
        if (o->gossip.adapt[0] == '\0' && s_given(given, adapt_opts[i])) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "--%s needs --adapt fixed|rule|learned",
                           adapt_opts[i]);
            return RUMOR_EINVAL;
        }
    return RUMOR_OK;
}

/* The checks behind rumor_node_opts_check (given == NULL) and
 * rumor_node_config_check, in one order so each reports the same first
 * problem. */
static rumor_err
s_check(const struct rumor_node_opts *o,
        const uint64_t *given,
        struct rumor_diag *diag)
{
    if (o->topology[0] == '\0') {
        rumor_diag_set(diag, "", 0, 0, "--topology is required");
        return RUMOR_EINVAL;
    }
    if (given != NULL && !s_given(given, "id")) {
        rumor_diag_set(diag, "", 0, 0, "--id is required");
        return RUMOR_EINVAL;
    }
    if (o->insecure && o->key[0] != '\0') {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--key and --insecure contradict each other");
        return RUMOR_EINVAL;
    }
    if (!o->insecure && o->key[0] == '\0') {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--key DIR/NAME is required (or --insecure)");
        return RUMOR_EINVAL;
    }
    if (s_check_applies(o, given, diag) != RUMOR_OK)
        return RUMOR_EINVAL;
    if (s_psgd_check(o, given, diag) != RUMOR_OK)
        return RUMOR_EINVAL;
    if (rumor_gossip_ef_check(&o->gossip, diag) != RUMOR_OK)
        return RUMOR_EINVAL;
    if (node_ef_optim_check(&o->gossip, o->optim.kind, "--optimizer", diag) !=
        RUMOR_OK)
        return RUMOR_EINVAL;
    if (s_given(given, "ef-alpha") && o->gossip.delta_codec[0] == '\0') {
        rumor_diag_set(diag, "", 0, 0, "--ef-alpha needs --delta-codec");
        return RUMOR_EINVAL;
    }
    if (o->exchange == RUMOR_NODE_EXCHANGE_GRADIENT &&
        !s_algo_is(o, "powersgd", "allreduce")) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--exchange gradient needs --algo powersgd or allreduce "
                       "(exact averages keep the models identical)");
        return RUMOR_EINVAL;
    }
    if (o->exchange == RUMOR_NODE_EXCHANGE_MODEL &&
        s_algo_is(o, "powersgd", NULL)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--algo powersgd compresses gradients: --exchange model "
                       "does not apply");
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

/* --- INI -------------------------------------------------------------- */

struct s_ini {
    rumor_node_config *cfg;
    struct rumor_diag *diag;
    rumor_err rc;
};

static int
s_ini_handler(void *user,
              const char *section,
              const char *name,
              const char *value)
{
    struct s_ini *ini = user;
    if (ini->rc != RUMOR_OK)
        return 0;
    if (section[0] != '\0' && strcmp(section, "node") != 0) {
        rumor_diag_set(ini->diag,
                       "",
                       0,
                       0,
                       "unknown section [%s] (only [node])",
                       section);
        ini->rc = RUMOR_EINVAL;
        return 0;
    }
    if (strcmp(name, "config") == 0) {
        rumor_diag_set(ini->diag,
                       "",
                       0,
                       0,
                       "'config' cannot be set inside a config file");
        ini->rc = RUMOR_EINVAL;
        return 0;
    }
    ini->rc = rumor_node_config_set(ini->cfg, name, value, ini->diag);
    return ini->rc == RUMOR_OK;
}

/* --- public API ------------------------------------------------------- */

void
rumor_node_opts_default(struct rumor_node_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    rumor_workload_opts_default(&opts->workload);
    opts->workload.hidden[0] = 32;
    opts->workload.hidden_count = 1;
    rumor_optim_opts_default(&opts->optim);
    opts->optim.kind = RUMOR_OPTIM_MOMENTUM;
    opts->optim.lr = 0.05;
    rumor_gossip_opts_default(&opts->gossip);
    opts->exchange = RUMOR_NODE_EXCHANGE_AUTO;
    opts->overlap = true;
    opts->steps = 300;
    opts->deadline_ms = 10000;
    opts->deadline_factor = 8;
    opts->down_after = 3;
    opts->connect_ms = 30000;
    opts->eval_every = 50;
    opts->log_level = RUMOR_LOG_INFO;
    opts->progress = -1;
    opts->checkpoint_keep = 3;
}

bool
rumor_node_opts_known(const char *name)
{
    return s_find(name) >= 0;
}

bool
rumor_node_opts_is_flag(const char *name)
{
    int k = s_find(name);
    return k >= 0 && s_opts[k].kind == S_BOOL;
}

rumor_err
rumor_node_opts_check(const struct rumor_node_opts *opts,
                      struct rumor_diag *diag)
{
    return s_check(opts, NULL, diag);
}

rumor_err
rumor_node_config_new(rumor_node_config **out)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return RUMOR_ENOMEM;
    rumor_node_opts_default(&(*out)->opts);
    return RUMOR_OK;
}

void
rumor_node_config_destroy(rumor_node_config **self_p)
{
    free(*self_p);
    *self_p = NULL;
}

struct rumor_node_opts *
rumor_node_config_opts(rumor_node_config *cfg)
{
    return &cfg->opts;
}

rumor_err
rumor_node_config_set(rumor_node_config *cfg,
                      const char *name,
                      const char *value,
                      struct rumor_diag *diag)
{
    int k = s_find(name);
    if (k < 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "unknown option --%s (see 'rumor help node')",
                       name);
        return RUMOR_EINVAL;
    }
    struct rumor_node_opts scratch = cfg->opts;
    rumor_err rc = s_apply(&scratch, &s_opts[k], value, diag);
    if (rc != RUMOR_OK)
        return rc;
    /* DGC's memory carries the momentum (its momentum correction): with
     * --ef dgc the optimizer is plain SGD unless one is named */
    if (strcmp(name, "ef") == 0 && strncmp(scratch.gossip.ef, "dgc", 3) == 0 &&
        !s_given(cfg->given, "optimizer"))
        scratch.optim.kind = RUMOR_OPTIM_SGD;
    cfg->opts = scratch;
    cfg->given[k / 64] |= 1ull << (k % 64);
    return RUMOR_OK;
}

rumor_err
rumor_node_config_parse_ini(rumor_node_config *cfg,
                            const char *name,
                            const uint8_t *text,
                            size_t len,
                            struct rumor_diag *diag)
{
    /* an empty file (text may then be NULL: an empty rumor_buf) sets
     * nothing, as one of only comments does */
    if (len > RUMOR_NODE_CONFIG_MAX ||
        (len > 0 && memchr(text, '\0', len) != NULL)) {
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       len > RUMOR_NODE_CONFIG_MAX
                           ? "larger than %d bytes"
                           : "not a text file (a NUL byte)",
                       RUMOR_NODE_CONFIG_MAX);
        return RUMOR_EINVAL;
    }
    char *copy = malloc(len + 1); /* libinih wants a C string */
    if (copy == NULL)
        return RUMOR_ENOMEM;
    if (len > 0)
        memcpy(copy, text, len);
    copy[len] = '\0';
    rumor_node_config scratch = *cfg;
    struct rumor_diag inner = {0};
    struct s_ini ini = {&scratch, &inner, RUMOR_OK};
    int line = ini_parse_string(copy, s_ini_handler, &ini);
    free(copy);
    if (line == 0 && ini.rc == RUMOR_OK) {
        *cfg = scratch;
        return RUMOR_OK;
    }
    if (ini.rc == RUMOR_OK)
        rumor_diag_set(&inner, "", 0, 0, "not an INI line (key = value)");
    rumor_diag_set(diag, name, line > 0 ? line : 0, 0, "%s", inner.msg);
    return ini.rc == RUMOR_ENOMEM ? RUMOR_ENOMEM : RUMOR_EINVAL;
}

rumor_err
rumor_node_config_load(rumor_node_config *cfg,
                       const char *path,
                       struct rumor_diag *diag)
{
    rumor_buf buf;
    rumor_buf_init(&buf, RUMOR_NODE_CONFIG_MAX + 1);
    rumor_err rc = rumor_buf_read_file(&buf, path);
    if (rc == RUMOR_OK)
        rc = rumor_node_config_parse_ini(cfg, path, buf.data, buf.len, diag);
    else if (rc == RUMOR_ETOOBIG)
        rumor_diag_set(diag,
                       path,
                       0,
                       0,
                       "larger than %d bytes",
                       RUMOR_NODE_CONFIG_MAX);
    else if (rc == RUMOR_EIO || rc == RUMOR_ENOTFOUND)
        (void)rumor_diag_errno(diag, path, "cannot read");
    else
        rumor_diag_set(diag, path, 0, 0, "cannot read: %s", rumor_strerror(rc));
    rumor_buf_free(&buf);
    return rc == RUMOR_ETOOBIG ? RUMOR_EINVAL : rc;
}

rumor_err
rumor_node_config_check(const rumor_node_config *cfg, struct rumor_diag *diag)
{
    return s_check(&cfg->opts, cfg->given, diag);
}

rumor_err
node_ef_optim_check(const struct rumor_gossip_opts *g,
                    rumor_optim_kind kind,
                    const char *flag,
                    struct rumor_diag *diag)
{
    if (strncmp(g->ef, "dgc", 3) != 0 || kind == RUMOR_OPTIM_SGD)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "--ef %s carries the momentum (DGC's momentum "
                   "correction): use %s sgd (the default with --ef dgc)",
                   g->ef,
                   flag);
    return RUMOR_EINVAL;
}

bool
rumor_node_opts_gradient_exchange(const struct rumor_node_opts *o)
{
    if (o->exchange == RUMOR_NODE_EXCHANGE_AUTO)
        return s_algo_is(o, "powersgd", "allreduce");
    return o->exchange == RUMOR_NODE_EXCHANGE_GRADIENT;
}

void
node_opts_print(FILE *out)
{
    for (size_t i = 0; i < S_OPT_COUNT; i++)
        fprintf(out, "%s%s", i % 6 == 0 ? "\n  " : " ", s_opts[i].name);
    fprintf(out, "\n");
}
