/*
 * node: the runtime a user runs. This header has three parts, in order:
 *   1. datasets: the embedded digits, MNIST IDX, CIFAR-10 binary, CSV and
 *      seeded synthetic data, the held-out split and the per-node shards;
 *   2. workloads: least squares, logistic regression and an MLP whose
 *      parameters are a struct rumor_model (weights [out, in], biases [out]),
 *      with minibatch gradients and held-out evaluation on CPU or CUDA;
 *   3. optimizers: SGD, heavy-ball momentum, Nesterov, weight decay, and a
 *      warm-up + step-decay learning-rate schedule, with byte checkpoints;
 *   4. the node runtime (process, loop, metrics) is added after them.
 *
 * Thread safety: an object is used by one thread at a time; distinct
 * objects may be used concurrently.
 * Ownership: every object is owned by its creator and freed with its
 * _destroy(&p); borrowed pointers are named in each contract.
 */
#ifndef RUMOR_NODE_H
#define RUMOR_NODE_H

#include "rumor/core.h"
#include "rumor/gossip.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================================================================
 * 1. datasets
 * ====================================================================== */

/* Caps checked before any allocation sized by a file (R5.5). */
#define RUMOR_DATASET_MAX_SAMPLES    (1u << 22)   /* 4 Mi samples */
#define RUMOR_DATASET_MAX_FEATURES   65536u       /* per sample */
#define RUMOR_DATASET_MAX_VALUES     (1ull << 28) /* samples * features */
#define RUMOR_DATASET_MAX_CLASSES    1024u
#define RUMOR_DATASET_MAX_FILE_BYTES (1ull << 31) /* any one input file */
#define RUMOR_DATASET_NAME_BYTES     64

/* A dataset in memory: classification (y != NULL, classes > 0) or
 * regression (target != NULL, outputs > 0). Plain data, owned by whoever
 * created it; free with rumor_dataset_destroy. */
struct rumor_dataset {
    size_t n;       /* samples */
    size_t dim;     /* features per sample */
    size_t classes; /* label values are in [0, classes); 0 for regression */
    size_t outputs; /* regression targets per sample; 0 for classification */
    size_t test_n;  /* the last test_n samples are the dataset's own
                       held-out set (MNIST's t10k files); 0: none */
    float *x;       /* n * dim features, row-major */
    int32_t *y;     /* n labels, or NULL */
    float *target;  /* n * outputs targets, or NULL */
    char name[RUMOR_DATASET_NAME_BYTES]; /* "digits", a file name, ... */
};

/* Allocates a zero-filled dataset of n samples of dim features with
 * labels (classes > 0) or targets (outputs > 0; exactly one of the two is
 * non-zero). RUMOR_ETOOBIG past the caps, RUMOR_EINVAL for bad shapes. */
RUMOR_API rumor_err rumor_dataset_new(size_t n,
                                      size_t dim,
                                      size_t classes,
                                      size_t outputs,
                                      struct rumor_dataset **out);

/* Frees and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_dataset_destroy(struct rumor_dataset **self_p);

/* The embedded default: UCI "Optical Recognition of Handwritten Digits" as
 * distributed by scikit-learn (data/digits.csv, see data/README.md): 1797
 * samples, 64 features scaled from 0..16 to [0, 1], 10 classes. */
RUMOR_API rumor_err rumor_dataset_load_digits(struct rumor_dataset **out);

/* MNIST IDX: an images file (magic 0x00000803, ubyte, n x rows x cols) and
 * a labels file (magic 0x00000801, ubyte, n), each plain or gzip-compressed
 * (recognised by its first two bytes, not its name; inflated with zlib).
 * Pixels are scaled to [0, 1]; classes = largest label + 1. Every count is
 * checked against the caps and the file length; RUMOR_EPROTO with diag
 * naming the file and the problem (bad magic, counts that disagree, gzip
 * data truncated or corrupt), RUMOR_ETOOBIG past a cap (gzip data that
 * inflates past one too), RUMOR_ENOTFOUND / RUMOR_EIO for the system. */
RUMOR_API rumor_err rumor_dataset_load_idx(const char *images_path,
                                           const char *labels_path,
                                           struct rumor_dataset **out,
                                           struct rumor_diag *diag);

/* The same from memory (pure: used by the fuzz harness). The names are
 * used in diagnostics only. */
RUMOR_API rumor_err rumor_dataset_parse_idx(const uint8_t *images,
                                            size_t images_len,
                                            const char *images_name,
                                            const uint8_t *labels,
                                            size_t labels_len,
                                            const char *labels_name,
                                            struct rumor_dataset **out,
                                            struct rumor_diag *diag);

/* CIFAR-10 binary batch (data_batch_N.bin, test_batch.bin): records of
 * 1 label byte (0..9) + 3072 pixel bytes (R, G, B planes of 32 x 32).
 * dim = 3072 in the file's order, scaled to [0, 1]; classes = 10. */
RUMOR_API rumor_err rumor_dataset_load_cifar10(const char *path,
                                               struct rumor_dataset **out,
                                               struct rumor_diag *diag);
RUMOR_API rumor_err rumor_dataset_parse_cifar10(const uint8_t *data,
                                                size_t len,
                                                const char *name,
                                                struct rumor_dataset **out,
                                                struct rumor_diag *diag);

#define RUMOR_DATASET_CSV_FIELD_BYTES 64 /* longest number accepted */

/* CSV for users' own data: one sample per line, the integer class label
 * first, then the features, separated by commas (spaces around fields are
 * allowed). Blank lines and lines starting with '#' are skipped; a first
 * line whose label field is not a number is a header and is skipped.
 * Every row must have the same number of fields. classes = largest label
 * + 1. Errors are RUMOR_EPROTO with diag at file:line:col. */
RUMOR_API rumor_err rumor_dataset_load_csv(const char *path,
                                           struct rumor_dataset **out,
                                           struct rumor_diag *diag);
RUMOR_API rumor_err rumor_dataset_parse_csv(const uint8_t *data,
                                            size_t len,
                                            const char *name,
                                            struct rumor_dataset **out,
                                            struct rumor_diag *diag);

/* Seeded Gaussian clusters for scale: class c has a mean drawn from
 * N(0, separation^2 I) and samples mean + N(0, I). The same options give
 * the same bits on every machine. */
struct rumor_synth_opts {
    size_t n;          /* samples */
    size_t dim;        /* features */
    size_t classes;    /* clusters, >= 2 */
    double separation; /* scale of the cluster means (default 2) */
    uint64_t seed;
};
RUMOR_API void rumor_synth_opts_default(struct rumor_synth_opts *opts);
RUMOR_API rumor_err rumor_dataset_synthetic(const struct rumor_synth_opts *o,
                                            struct rumor_dataset **out);

/* Least-squares data with a known optimum: features A ~ N(0, 1),
 * W* ~ N(0, 1/dim) of shape [outputs, dim], targets A W*^T + noise N(0, 1).
 * *w_star (outputs * dim floats, malloc'd, caller frees) receives W*; with
 * noise 0 it is the exact minimiser of the squared error on any subset of
 * at least dim samples in general position. */
RUMOR_API rumor_err rumor_dataset_least_squares(size_t n,
                                                size_t dim,
                                                size_t outputs,
                                                double noise,
                                                uint64_t seed,
                                                struct rumor_dataset **out,
                                                float **w_star);

/* Opens a dataset named by a spec, the form the node's options use:
 *   "digits"                          the embedded default
 *   "synthetic[:n=N,dim=D,classes=C,separation=S]"  Gaussian clusters
 *                                     drawn from seed (defaults as
 *                                     rumor_synth_opts_default)
 *   "fashion-mnist"                   Debian's dataset-fashion-mnist files
 *                                     (/usr/share/datasets/fashion-mnist)
 *   "fashion-mnist:DIR", "mnist:DIR"  a directory of IDX files named as
 *                                     published: train-images-idx3-ubyte,
 *                                     train-labels-idx1-ubyte and, when
 *                                     present, the t10k-* pair, each file
 *                                     plain or with .gz; the t10k samples
 *                                     come last and are counted in test_n
 *   "mnist:IMAGES,LABELS"             an IDX pair (plain or gzip)
 *   "cifar10:BATCH[,BATCH...]"        CIFAR-10 binary batches, joined
 *   "csv:PATH"                        a CSV file
 * RUMOR_EINVAL with diag for an unknown kind or a bad parameter;
 * RUMOR_ENOTFOUND with diag naming what is missing (for fashion-mnist:
 * the package to install); loader errors as above. */
#define RUMOR_DATASET_SPEC_MAX 4096
RUMOR_API rumor_err rumor_dataset_open(const char *spec,
                                       uint64_t seed,
                                       struct rumor_dataset **out,
                                       struct rumor_diag *diag);

/* Splits all into a training and a held-out part. A dataset with its own
 * held-out set (test_n > 0) is cut there: its last test_n samples go to
 * *test, the others to *train, and test_fraction and seed are not used.
 * Otherwise a seeded permutation sends round(test_fraction * n) samples to
 * *test; the same (n, fraction, seed) gives the same split on every node.
 * Both outputs are copies (with test_n 0). */
RUMOR_API rumor_err rumor_dataset_split(const struct rumor_dataset *all,
                                        double test_fraction,
                                        uint64_t seed,
                                        struct rumor_dataset **train,
                                        struct rumor_dataset **test);

/* Copies the samples idx[0..count) of src into a new dataset. */
RUMOR_API rumor_err rumor_dataset_subset(const struct rumor_dataset *src,
                                         const size_t *idx,
                                         size_t count,
                                         struct rumor_dataset **out);

/* --- sharding across nodes --- */

typedef enum rumor_shard_mode {
    RUMOR_SHARD_IID = 0,      /* a seeded permutation cut in equal parts */
    RUMOR_SHARD_DIRICHLET = 1 /* per class, Dirichlet(alpha) proportions */
} rumor_shard_mode;

/* Parses "iid" or "dirichlet"; RUMOR_EINVAL otherwise. */
RUMOR_API rumor_err rumor_shard_mode_parse(const char *name,
                                           rumor_shard_mode *out);

/* The indices (ascending) of the samples of data that node `node` of
 * `nodes` trains on. Every node computing this with the same arguments
 * gets a partition of [0, n): disjoint shards covering every sample.
 * Dirichlet mode needs labels; with small alpha label histograms are
 * skewed, with large alpha near uniform. Draws are redone (up to 64
 * times, deterministic) until no shard is empty; RUMOR_EINVAL if that
 * fails or n < nodes. *idx is malloc'd (caller frees), *count its length. */
RUMOR_API rumor_err rumor_shard_indices(const struct rumor_dataset *data,
                                        rumor_shard_mode mode,
                                        double alpha,
                                        uint64_t seed,
                                        uint32_t node,
                                        uint32_t nodes,
                                        size_t **idx,
                                        size_t *count);

/* One Gamma(shape, 1) draw (Marsaglia & Tsang 2000; shape < 1 by the
 * U^(1/shape) boost); shape > 0. Exposed for tests. */
RUMOR_API double rumor_rng_gamma(struct rumor_rng *rng, double shape);

/* ======================================================================
 * 2. workloads
 * ====================================================================== */

typedef enum rumor_workload_kind {
    RUMOR_WORKLOAD_LSQ = 0,    /* least squares, W [outputs, dim] */
    RUMOR_WORKLOAD_LOGREG = 1, /* multiclass softmax regression */
    RUMOR_WORKLOAD_MLP = 2     /* ReLU MLP, softmax cross-entropy */
} rumor_workload_kind;

/* Parses "lsq", "logreg" or "mlp". */
RUMOR_API rumor_err rumor_workload_kind_parse(const char *name,
                                              rumor_workload_kind *out);
RUMOR_API const char *rumor_workload_kind_name(rumor_workload_kind kind);

#define RUMOR_WORKLOAD_MAX_HIDDEN 8      /* hidden layers */
#define RUMOR_WORKLOAD_MAX_WIDTH  65536u /* units per layer */
#define RUMOR_WORKLOAD_MAX_BATCH  65536u

struct rumor_workload_opts {
    rumor_workload_kind kind;
    size_t hidden[RUMOR_WORKLOAD_MAX_HIDDEN]; /* MLP hidden widths */
    size_t hidden_count;                      /* MLP: >= 1 */
    const struct rumor_dataset *dataset; /* borrowed during _new only; NULL:
                                            digits (classifiers) or
                                            generated data (lsq) */
    uint32_t node;                       /* this node, < nodes */
    uint32_t nodes;         /* how many nodes share the training split */
    rumor_shard_mode shard; /* how the training split is shared */
    double alpha;           /* Dirichlet concentration */
    size_t batch;           /* minibatch size; 0 = the whole shard */
    double test_fraction;   /* held-out share of the dataset (unused
                               when it has its own: test_n > 0) */
    uint64_t seed;          /* run seed, equal on every node */
    bool want_cuda;         /* use CUDA when a GPU is usable */
    /* lsq with dataset == NULL: generated problem */
    size_t lsq_samples;  /* samples (before the split) */
    size_t lsq_features; /* dim */
    size_t lsq_outputs;  /* rows of W */
    double lsq_noise;    /* target noise standard deviation */
};

/* Defaults: mlp, one hidden layer of 32, dataset NULL, node 0 of 1, iid,
 * alpha 0.5, batch 32, test_fraction 0.2, seed 1, want_cuda false; lsq
 * 512 samples, 32 features, 8 outputs, noise 0. */
RUMOR_API void rumor_workload_opts_default(struct rumor_workload_opts *opts);

typedef struct rumor_workload rumor_workload;

/* Builds the workload: splits the dataset (rumor_dataset_split), takes
 * this node's shard of the training split, and initialises parameters
 * from the seed (the same on every node: weights uniform in
 * +-1/sqrt(fan_in) as PyTorch's nn.Linear, zero biases; lsq starts at 0).
 * RUMOR_EINVAL with diag for bad options. */
RUMOR_API rumor_err rumor_workload_new(const struct rumor_workload_opts *opts,
                                       rumor_workload **out,
                                       struct rumor_diag *diag);

/* Frees and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_workload_destroy(rumor_workload **self_p);

/* The parameters (owned by w, valid for its life; the caller, an
 * optimizer or gossip may change the numbers in place). */
RUMOR_API struct rumor_model *rumor_workload_model(rumor_workload *w);

/* The device chosen at creation. */
RUMOR_API rumor_device rumor_workload_device(const rumor_workload *w);

/* Samples in this node's shard and in the held-out split. */
RUMOR_API size_t rumor_workload_train_size(const rumor_workload *w);
RUMOR_API size_t rumor_workload_test_size(const rumor_workload *w);

/* This node's training shard and the held-out split (owned by w, valid
 * for its life; for inspection: label histograms, sizes). */
RUMOR_API const struct rumor_dataset *
rumor_workload_train(const rumor_workload *w);
RUMOR_API const struct rumor_dataset *
rumor_workload_test(const rumor_workload *w);

/* The known optimum W* of a generated lsq problem (a model of one
 * tensor, owned by w); RUMOR_ENOTSUP for other workloads or lsq on a
 * given dataset. */
RUMOR_API rumor_err rumor_workload_optimum(const rumor_workload *w,
                                           const struct rumor_model **out);

/* Loss and gradient of the minibatch of step `step` at the current
 * parameters. The minibatch is a pure function of (seed, node, step):
 * `batch` indices drawn with replacement from the shard (the whole shard,
 * in order, when batch is 0 or at least the shard size). grad must have
 * the model's shapes (RUMOR_EINVAL otherwise); its numbers are
 * overwritten. Losses are means over the batch: lsq 1/2 ||W a - t||^2,
 * classifiers softmax cross-entropy. *loss may be NULL. */
RUMOR_API rumor_err rumor_workload_grad(rumor_workload *w,
                                        uint64_t step,
                                        const struct rumor_model *grad,
                                        double *loss);

typedef enum rumor_eval_split {
    RUMOR_EVAL_TEST = 0, /* the held-out split */
    RUMOR_EVAL_TRAIN = 1 /* this node's shard */
} rumor_eval_split;

struct rumor_eval {
    double loss;     /* mean loss over the split */
    double accuracy; /* share classified right; NAN for lsq */
    size_t n;        /* samples evaluated */
};

/* Evaluates params (NULL: the workload's own; otherwise a model with the
 * same shapes, e.g. the average of all nodes) on a split. */
RUMOR_API rumor_err rumor_workload_eval(rumor_workload *w,
                                        const struct rumor_model *params,
                                        rumor_eval_split split,
                                        struct rumor_eval *out);

/* A new model with src's shapes, numbers copied (zero when src's data
 * pointers are NULL is not supported: src must be complete). One
 * allocation; free with rumor_model_free. */
RUMOR_API rumor_err rumor_model_clone(const struct rumor_model *src,
                                      struct rumor_model **out);

/* Frees a model made by rumor_model_clone and sets *self_p to NULL. */
RUMOR_API void rumor_model_free(struct rumor_model **self_p);

/* True when a and b have the same count and shapes. */
RUMOR_API bool rumor_model_same_shape(const struct rumor_model *a,
                                      const struct rumor_model *b);

/* ======================================================================
 * 3. optimizers (PyTorch torch.optim.SGD update rules, dampening 0)
 * ====================================================================== */

typedef enum rumor_optim_kind {
    RUMOR_OPTIM_SGD = 0,      /* p -= lr g */
    RUMOR_OPTIM_MOMENTUM = 1, /* b = mu b + g; p -= lr b */
    RUMOR_OPTIM_NESTEROV = 2  /* b = mu b + g; p -= lr (g + mu b) */
} rumor_optim_kind;

/* Parses "sgd", "momentum" or "nesterov". */
RUMOR_API rumor_err rumor_optim_kind_parse(const char *name,
                                           rumor_optim_kind *out);

struct rumor_optim_opts {
    rumor_optim_kind kind;
    double lr;             /* base learning rate */
    double momentum;       /* mu for momentum / nesterov, in [0, 1) */
    double weight_decay;   /* L2: g += wd p before the momentum */
    uint64_t warmup_steps; /* linear warm-up over the first steps */
    uint64_t decay_every;  /* step decay period; 0 = none */
    double decay_factor;   /* lr *= factor every decay_every steps */
};

/* Defaults: sgd, lr 0.1, momentum 0.9, wd 0, no warm-up, no decay
 * (decay_factor 0.1 when decay_every is set). */
RUMOR_API void rumor_optim_opts_default(struct rumor_optim_opts *opts);

typedef struct rumor_optim rumor_optim;

/* An optimizer for parameters shaped like params (the shapes are copied;
 * the model itself is not kept). RUMOR_EINVAL for bad options. */
RUMOR_API rumor_err rumor_optim_new(const struct rumor_optim_opts *opts,
                                    const struct rumor_model *params,
                                    rumor_optim **out);
RUMOR_API void rumor_optim_destroy(rumor_optim **self_p);

/* Learning rate at step (0-based): base * min(1, (step + 1) / warmup)
 * * factor^floor(step / decay_every). */
RUMOR_API double rumor_optim_lr(const rumor_optim *o, uint64_t step);

/* One update of params with grads (same shapes as at creation, else
 * RUMOR_EINVAL) at step's learning rate. grads is not modified. */
RUMOR_API rumor_err rumor_optim_step(rumor_optim *o,
                                     uint64_t step,
                                     const struct rumor_model *params,
                                     const struct rumor_model *grads);

/* Bytes rumor_optim_save writes. */
RUMOR_API size_t rumor_optim_state_bytes(const rumor_optim *o);

/* Writes the state (kind, momentum buffers; little-endian) into
 * out[0..cap); *len receives the size. RUMOR_ETOOBIG when cap is short. */
RUMOR_API rumor_err rumor_optim_save(const rumor_optim *o,
                                     uint8_t *out,
                                     size_t cap,
                                     size_t *len);

/* Restores a state written by rumor_optim_save for the same kind and
 * shapes; RUMOR_EPROTO (state unchanged) when the bytes do not match. */
RUMOR_API rumor_err rumor_optim_load(rumor_optim *o,
                                     const uint8_t *in,
                                     size_t len);

/* ======================================================================
 * 4. node runtime (issue 7; added by the node process work)
 * ====================================================================== */

/*
 * A node process (`rumor node`): one workload, one optimizer, one gossip
 * algorithm and one transport, training for a number of steps with its
 * neighbours on the topology and writing metrics. The loop follows the
 * reference: gradient at x_t, gossip, then the optimizer step with that
 * gradient. docs/node.md documents every option; docs/internals/node.md
 * section 4 the loop.
 */

#define RUMOR_NODE_PATH_MAX     1024 /* topology, key and metrics paths */
#define RUMOR_NODE_LISTEN_BYTES 280  /* --metrics-listen: host and port */

typedef enum rumor_node_exchange {
    RUMOR_NODE_EXCHANGE_AUTO = 0,    /* gradient for powersgd and allreduce,
                                        model for the others */
    RUMOR_NODE_EXCHANGE_MODEL = 1,   /* gossip the parameters x_t */
    RUMOR_NODE_EXCHANGE_GRADIENT = 2 /* average the gradients (data-parallel;
                                        powersgd and allreduce only) */
} rumor_node_exchange;

struct rumor_node_opts {
    char topology[RUMOR_NODE_PATH_MAX];   /* topology file (endpoints, keys) */
    uint32_t id;                          /* this node */
    char key[RUMOR_NODE_PATH_MAX];        /* key base: DIR/NAME(.key, .pub) */
    bool insecure;                        /* plain TCP, no CURVE */
    struct rumor_workload_opts workload;  /* node, nodes, dataset set by new */
    char dataset[RUMOR_DATASET_SPEC_MAX]; /* rumor_dataset_open spec; "" =
                                             default for the workload */
    struct rumor_optim_opts optim;
    struct rumor_gossip_opts gossip;
    rumor_node_exchange exchange;
    bool overlap;         /* model exchange: compute the gradient in a second
                             thread while the gossip runs (same numbers) */
    uint64_t steps;       /* training steps */
    uint32_t deadline_ms; /* per gossip step */
    uint32_t connect_ms;  /* waiting for the links to come up, and the
                             deadline of the first step */
    uint64_t eval_every; /* held-out evaluation period in steps; 0 = end only */
    uint64_t consensus_every; /* period of the consensus probe (full models
                                 exchanged with the neighbours, counted
                                 apart from the gossip bytes); 0 = off */
    char metrics_dir[RUMOR_NODE_PATH_MAX]; /* "" = no metrics file */
    /* "" (off), or PORT, :PORT or ADDR:PORT: the counters for Prometheus
     * at http://ADDR:PORT/metrics, on loopback unless ADDR is given */
    char metrics_listen[RUMOR_NODE_LISTEN_BYTES];
    rumor_log_level log_level;
    uint64_t rate_bits; /* link shaping: bit/s per link, 0 = none */
    uint32_t delay_ms;  /* link shaping: one-way delay */
    int progress;       /* -1: when stdout is a terminal; 0 off; 1 on */
    char checkpoint_dir[RUMOR_NODE_PATH_MAX]; /* "" = no checkpoints */
    uint64_t checkpoint_every; /* steps between checkpoints; 0 = only the
                                  final one on a stop */
    uint32_t checkpoint_keep;  /* newest files kept (default 3) */
    bool resume;               /* continue from the newest good checkpoint */
    uint32_t down_after;       /* dpsgd: missed steps before a neighbour is
                                  marked down and probed (1..32, default 3) */
    double deadline_factor;    /* adaptive step deadline: min(deadline_ms,
                                  max(2 s, factor * longest recent wait));
                                  0 = always deadline_ms (default 8) */
    bool join; /* fetch the model and step from a live neighbour first */
    uint64_t given[2]; /* internal: bit k % 64 of word k / 64 set when
                          option k was given */
};

/* Defaults: see docs/node.md (mlp 64-32-10 on the digits, momentum SGD
 * lr 0.05, dpsgd, 300 steps, deadline 10 s, connect 30 s, eval every 50). */
RUMOR_API void rumor_node_opts_default(struct rumor_node_opts *opts);

/* Sets one option by its long name without the dashes ("lr", "algo",
 * "hidden", ...) from its text value (booleans: "true"/"false"/"1"/"0";
 * "" for a flag means true). RUMOR_EINVAL with diag for an unknown name
 * or a bad value; opts is unchanged then. */
RUMOR_API rumor_err rumor_node_opts_set(struct rumor_node_opts *opts,
                                        const char *name,
                                        const char *value,
                                        struct rumor_diag *diag);

/* True when name is an option rumor_node_opts_set knows. */
RUMOR_API bool rumor_node_opts_known(const char *name);

/* True when name is a flag (an option that takes no value on a command
 * line: insecure, cuda). */
RUMOR_API bool rumor_node_opts_is_flag(const char *name);

/* Applies an INI file (keys = long option names, an optional [node]
 * section; other sections are refused). Errors: RUMOR_ENOTFOUND /
 * RUMOR_EIO, RUMOR_EINVAL with diag at file:line. */
RUMOR_API rumor_err rumor_node_opts_load(struct rumor_node_opts *opts,
                                         const char *path,
                                         struct rumor_diag *diag);

#define RUMOR_NODE_CONFIG_MAX (1 << 20) /* bytes of a config file */

/* The parse behind rumor_node_opts_load, a pure function of the bytes
 * text[0..len) (name is only used in diag): all options applied, or none
 * (opts unchanged) and RUMOR_EINVAL with diag at name:line. Text with a
 * NUL byte or longer than RUMOR_NODE_CONFIG_MAX is refused. */
RUMOR_API rumor_err rumor_node_opts_parse_ini(struct rumor_node_opts *opts,
                                              const char *name,
                                              const uint8_t *text,
                                              size_t len,
                                              struct rumor_diag *diag);

/* Checks that the options fit together (an option that does not apply to
 * the chosen workload, optimizer or algorithm is refused, as are missing
 * required ones). RUMOR_EINVAL with diag naming the options. */
RUMOR_API rumor_err rumor_node_opts_check(const struct rumor_node_opts *opts,
                                          struct rumor_diag *diag);

/* True when the run averages gradients instead of gossiping the model
 * (--exchange, with auto resolved by the algorithm: powersgd and
 * allreduce): what a training loop hands the peer. */
RUMOR_API bool
rumor_node_opts_gradient_exchange(const struct rumor_node_opts *opts);

typedef struct rumor_node rumor_node;

/* Builds everything a run needs: loads the topology and this node's key,
 * the dataset and shard, the optimizer, the gossip algorithm, starts the
 * transport and opens DIR/node-N.jsonl. *out is set on success only.
 * Errors: RUMOR_EINVAL (options, with diag), loader and transport errors
 * as they come. */
RUMOR_API rumor_err rumor_node_new(const struct rumor_node_opts *opts,
                                   rumor_node **out,
                                   struct rumor_diag *diag);

/* Stops the transport, closes the metrics file, frees everything and sets
 * *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_node_destroy(rumor_node **self_p);

/* Runs the training: waits for the links (connect_ms), then opts.steps
 * steps, evaluating every eval_every steps and at the end. Every wait has
 * a deadline: a neighbour that misses one gives RUMOR_ETIMEDOUT (logged
 * with the peers and their liveness) and the run stops with the model of
 * the last good step. After rumor_node_stop the run ends after the
 * current step and returns RUMOR_OK with summary.stopped set. Transport
 * errors come back as they are. */
RUMOR_API rumor_err rumor_node_run(rumor_node *node, struct rumor_diag *diag);

/* Asks a running rumor_node_run to stop after its current step. Only sets
 * an atomic flag: safe from a signal handler and from another thread. */
RUMOR_API void rumor_node_stop(rumor_node *node);

struct rumor_node_summary {
    uint64_t steps;       /* steps completed */
    bool stopped;         /* ended early by rumor_node_stop */
    double loss;          /* last minibatch loss */
    double test_loss;     /* last held-out evaluation (NAN if none) */
    double accuracy;      /* last held-out accuracy (NAN if none or lsq) */
    double optimum_error; /* lsq: max |W - W*| of the last evaluation */
    double consensus;     /* last probe: mean over the neighbours j of
                             ||x_i - x_j||^2 (NAN if none) */
    uint64_t bytes_sent;  /* transport totals, headers in */
    uint64_t bytes_recv;
    uint64_t gossip_bytes_sent; /* wire bytes of the gossip messages sent */
    uint64_t gossip_bytes_recv; /* and received */
    bool refused;               /* a neighbour's settings or model differ:
                                   refused at the handshake, before the
                                   first step (a restart cannot help) */
    bool diverged;              /* training diverged (the run's error
                                   names the options that control it) */
};

/* What the run has done so far. */
RUMOR_API void rumor_node_summary(const rumor_node *node,
                                  struct rumor_node_summary *out);

/* The model (borrowed, valid for the node's life). */
RUMOR_API struct rumor_model *rumor_node_model(rumor_node *node);

/* ======================================================================
 * 5. peer: Rumor under the caller's own training loop (node/peer.c; the
 *    python/rumor package is built on it, see docs/python.md)
 * ====================================================================== */

/*
 * A peer is a node runtime without workload, optimizer or loop: the
 * caller owns the model (e.g. a PyTorch module's parameters) and calls
 * rumor_peer_gossip after each optimizer step. Its options are those of
 * `rumor node` (struct rumor_node_opts, set by name with
 * rumor_node_opts_set; the workload, optimizer and step options are
 * unused), its transport, rounds, deadlines and byte counters are the
 * runtime's. Float32 tensors in host memory are gossiped in place
 * (zero-copy); float64, float16 and bfloat16 tensors, and tensors in CUDA
 * memory (CUDA builds only), go through a float32 staging copy that is
 * written back after each step.
 */

typedef enum rumor_dtype {
    RUMOR_DTYPE_F32 = 0,
    RUMOR_DTYPE_F64 = 1,
    RUMOR_DTYPE_F16 = 2, /* IEEE binary16 */
    RUMOR_DTYPE_BF16 = 3 /* bfloat16 */
} rumor_dtype;

/* Bytes of one element of dtype (0 for an unknown value). */
RUMOR_API size_t rumor_dtype_size(rumor_dtype dtype);

/* One caller-owned tensor: data stays the caller's and must stay valid
 * and unmoved for the peer's life; row-major and contiguous. */
struct rumor_peer_tensor {
    void *data; /* host memory, or CUDA device memory */
    rumor_dtype dtype;
    rumor_device device; /* RUMOR_DEVICE_CUDA needs a CUDA build */
    size_t ndim;         /* <= RUMOR_GOSSIP_MAX_DIMS */
    size_t shape[RUMOR_GOSSIP_MAX_DIMS];
};

struct rumor_peer_stats {
    uint64_t steps;      /* gossip and average steps done */
    uint64_t bytes_sent; /* transport totals, headers in */
    uint64_t bytes_recv;
    uint64_t gossip_bytes_sent; /* wire bytes of the gossip messages */
    uint64_t gossip_bytes_recv;
    uint64_t gossip_frames_sent;
    double seconds;        /* since the first step began */
    double seconds_gossip; /* encode and decode (emit, absorb) */
    double seconds_wait;   /* sending and waiting for neighbours */
    double seconds_copy;   /* staging copies and conversions */
};

/* Options with the defaults of rumor_node_opts_default on the heap, for
 * callers that cannot hold the struct (a foreign-function binding). */
RUMOR_API rumor_err rumor_node_opts_new(struct rumor_node_opts **out);
RUMOR_API void rumor_node_opts_destroy(struct rumor_node_opts **self_p);

typedef struct rumor_peer rumor_peer;

/* Builds a peer for tensors[0..count) (the array is copied, the memory it
 * points to is borrowed): checks the options (rumor_node_opts_check),
 * loads the topology and key, creates the algorithm on the tensors and
 * starts the transport; the links are waited for by the first step.
 * Every node of the run must register the same shapes in the same order
 * (the HELLO fingerprint refuses a peer that does not). Errors:
 * RUMOR_EINVAL with diag (options, shapes, dtypes, NULL data),
 * RUMOR_ENOTSUP with diag for CUDA tensors in a CPU-only build, loader and
 * transport errors as rumor_node_new. *out is set on success only. */
RUMOR_API rumor_err rumor_peer_new(const struct rumor_node_opts *opts,
                                   const struct rumor_peer_tensor *tensors,
                                   size_t count,
                                   rumor_peer **out,
                                   struct rumor_diag *diag);

/* Stops the transport (after waiting, bounded, for queued sends) and
 * frees everything but the caller's tensors; *self_p = NULL; safe twice. */
RUMOR_API void rumor_peer_destroy(rumor_peer **self_p);

/* One step of the configured algorithm over the network on the tensors,
 * in place, as a step of `rumor node`. The first step also waits for the
 * links (connect_ms) and has connect_ms as its deadline (with opts.join it
 * first takes a live neighbour's model and step instead). For algorithms
 * that can skip (rumor_gossip_can_skip) a neighbour that misses the
 * deadline is skipped, marked down after down_after steps and re-admitted
 * when it returns, and the step may jump ahead to meet neighbours
 * (rumor_peer_stats' steps tells where the peer is); for the others it
 * gives RUMOR_ETIMEDOUT with the tensors unchanged. diag says which step
 * failed and why. Once the run's agreed stop is reached (rumor_peer_stop)
 * it does nothing and rumor_peer_stopped is true. */
RUMOR_API rumor_err rumor_peer_gossip(rumor_peer *peer,
                                      struct rumor_diag *diag);

/* Tensors [first, first + count) of the peer's, exchanged as one bucket. */
struct rumor_peer_bucket {
    size_t first;
    size_t count;
};

/* Cuts the exchange into buckets, exchanged in the order given (e.g. the
 * reverse of the tensors', as a backward pass produces gradients), each
 * as the algorithm's own exchange of its tensors: PowerSGD's P and Q
 * all-reduces per bucket, its warm-start Q and the error memories per
 * tensor as before; the random streams are those of the whole model. The
 * result is the whole exchange's bit for bit where the sums do not depend
 * on where the ring cuts its chunks: 2 nodes (a + b = b + a),
 * allreduce-f64 (exact sums) and allreduce with a codec (per element, in
 * node order). With 3 or more nodes the float ring of allreduce and of
 * PowerSGD's P and Q cuts its chunks from the bucket instead of the
 * model, so an element's n terms may be added in another order: a
 * difference of a few float32 roundings, at most about (n - 1) 2^-24
 * times the sum of the terms' magnitudes. Every node must set the same
 * buckets.
 * Call before the first step; then rumor_peer_gossip exchanges every
 * bucket in turn, and rumor_peer_gossip_bucket one at a time. Errors:
 * RUMOR_EINVAL with diag for ranges that do not cover every tensor once,
 * after the first step, and for algorithms that gossip the model through
 * the fault path (rumor_gossip_can_skip) or PowerSGD with adapt (its
 * error is the whole model's); rumor_gossip_new's errors. */
RUMOR_API rumor_err
rumor_peer_buckets_set(rumor_peer *peer,
                       const struct rumor_peer_bucket *buckets,
                       size_t count,
                       struct rumor_diag *diag);

/* The number of buckets (0: none set). */
RUMOR_API size_t rumor_peer_buckets(const rumor_peer *peer);

/* The exchange of bucket `bucket` of the step, in place: every step
 * exchanges buckets 0, 1, ... in order, each once (RUMOR_EINVAL with diag
 * otherwise). Bucket 0 begins the step as rumor_peer_gossip does (the
 * links at the first step, the stop plan; after the agreed stop every
 * bucket does nothing); the last ends it (the step count, metrics). Its
 * messages carry rounds after the earlier buckets' of the step, so a
 * neighbour a bucket ahead is never mistaken for this one. The caller's
 * other tensors are not touched: a thread may exchange bucket k while
 * the caller computes the gradients of the next buckets' tensors (no two
 * calls on one peer may overlap). A failed bucket fails the step (errors
 * as rumor_peer_gossip; the buckets already done keep their result), and
 * the next call is bucket 0 of the same step. */
RUMOR_API rumor_err rumor_peer_gossip_bucket(rumor_peer *peer,
                                             size_t bucket,
                                             struct rumor_diag *diag);

/* Step-ahead error feedback (localsgd with delta_codec and ef_alpha > 0,
 * rumor_gossip_step_ahead): moves the tensors to the look-ahead point
 * where the caller then computes its gradient, as `rumor node` does before
 * each gradient. Call once per step, before the gradient; a no-op for
 * every other configuration (rumor_peer_looks_ahead says which).
 * RUMOR_ENUMERIC with diag for a non-finite model. */
RUMOR_API rumor_err rumor_peer_step_ahead(rumor_peer *peer,
                                          struct rumor_diag *diag);

/* True when rumor_peer_step_ahead moves the tensors. */
RUMOR_API bool rumor_peer_looks_ahead(const rumor_peer *peer);

/* Asks the run to stop as SIGTERM asks `rumor node`: the request travels
 * with the gossip and every node stops after the same step. Safe in a
 * signal handler. */
RUMOR_API void rumor_peer_stop(rumor_peer *peer);

/* True once the agreed stop is reached (rumor_peer_gossip did nothing). */
RUMOR_API bool rumor_peer_stopped(const rumor_peer *peer);

/* The exact average of the tensors over all nodes (a ring all-reduce,
 * whatever the algorithm), in place: the synchronisation of local SGD.
 * Uses the next step number, like rumor_peer_gossip; every node must make
 * the same sequence of gossip and average calls. Errors as
 * rumor_peer_gossip. */
RUMOR_API rumor_err rumor_peer_average(rumor_peer *peer,
                                       struct rumor_diag *diag);

/* Writes a metrics line (the node's JSON-lines format, with the caller's
 * minibatch loss and held-out loss and accuracy; NAN leaves a number out)
 * when metrics_dir was set, and refreshes the transport totals
 * rumor_peer_stats reports. RUMOR_EIO when the write fails. */
RUMOR_API rumor_err rumor_peer_report(rumor_peer *peer,
                                      double loss,
                                      double test_loss,
                                      double accuracy);

/* Counters so far (transport totals as of the last step or report). */
RUMOR_API void rumor_peer_stats(const rumor_peer *peer,
                                struct rumor_peer_stats *out);

/* Nodes in the topology. */
RUMOR_API uint32_t rumor_peer_nodes(const rumor_peer *peer);

/* Appends the peer's state to out: a magic, the next step number and the
 * algorithm's state (rumor_gossip_state_save; with buckets, each
 * bucket's range and state), little-endian. With the
 * caller's tensors saved beside it (e.g. a PyTorch state_dict), a new
 * peer made with the same options and shapes continues exactly. Call
 * between steps. RUMOR_ETOOBIG / RUMOR_ENOMEM from the buffer. */
RUMOR_API rumor_err rumor_peer_state_save(const rumor_peer *peer,
                                          rumor_buf *out);

/* Restores a state written by rumor_peer_state_save (bounds-checked; the
 * peer is unchanged on error): RUMOR_EPROTO with diag for bytes that are
 * not such a state or do not fit this peer's algorithm, shapes and
 * buckets.
 * Without opts.join every node is taken to resume together, and the run
 * continues exactly. With opts.join (and an algorithm that can skip) the
 * peer is one restarted worker coming back into a running run, as
 * `rumor node --resume` after a crash: it keeps its restored model,
 * fetches none, and a handshake before its next step settles the edges
 * and jumps to the neighbours' step. */
RUMOR_API rumor_err rumor_peer_state_load(rumor_peer *peer,
                                          const uint8_t *data,
                                          size_t len,
                                          struct rumor_diag *diag);

/* The workload `rumor node` would train with these options: the dataset
 * (opts->dataset), this node's shard among the topology's nodes, the seed.
 * For callers that drive the built-in workloads from their own loop (the
 * Python binding's tests compare such a loop with `rumor node`). */
RUMOR_API rumor_err rumor_node_workload_new(const struct rumor_node_opts *opts,
                                            rumor_workload **out,
                                            struct rumor_diag *diag);

/* ======================================================================
 * 6. checkpoints (node/checkpoint.c; format in docs/protocol.md,
 *    "Checkpoint files", use in docs/node.md)
 * ====================================================================== */

/*
 * A checkpoint is a file of sections, each with its length and crc32c,
 * behind a header with a magic, a version, the node and the step. Files
 * are written to a temporary name, fsync'ed, renamed and the directory
 * fsync'ed, so a crash leaves either the previous set of files or the new
 * one, never a torn file under a checkpoint's name; the reader still
 * checks everything, and a damaged file is refused (naming the file and
 * the section) in favour of the previous good one.
 */

#define RUMOR_CHECKPOINT_VERSION       1
#define RUMOR_CHECKPOINT_MAX_SECTIONS  16
#define RUMOR_CHECKPOINT_FILE_MAX      ((size_t)1 << 40) /* read cap */
#define RUMOR_CHECKPOINT_HEADER_BYTES  32
#define RUMOR_CHECKPOINT_SECTION_BYTES 24 /* a section's own header */
#define RUMOR_CHECKPOINT_TRAILER_BYTES 8

/* Section ids written by `rumor node` (others are kept and ignored). */
typedef enum rumor_checkpoint_section_id {
    RUMOR_CHECKPOINT_META = 1,   /* node, nodes, seed, algorithm, sizes */
    RUMOR_CHECKPOINT_MODEL = 2,  /* shapes and float32 tensors */
    RUMOR_CHECKPOINT_OPTIM = 3,  /* rumor_optim_save */
    RUMOR_CHECKPOINT_GOSSIP = 4, /* rumor_gossip_state_save */
    RUMOR_CHECKPOINT_RUNTIME = 5 /* counters for the metrics */
} rumor_checkpoint_section_id;

struct rumor_checkpoint_section {
    uint32_t id;
    const uint8_t *data; /* borrowed */
    size_t len;
};

struct rumor_checkpoint {
    uint32_t node;
    uint64_t step; /* steps completed: the run continues at this step */
    size_t count;
    struct rumor_checkpoint_section sections[RUMOR_CHECKPOINT_MAX_SECTIONS];
};

/* "meta", "model", ... or "unknown". */
RUMOR_API const char *rumor_checkpoint_section_name(uint32_t id);

/* The section with that id, or NULL. */
RUMOR_API const struct rumor_checkpoint_section *
rumor_checkpoint_find(const struct rumor_checkpoint *c, uint32_t id);

/* Appends the file image of c to out. RUMOR_EINVAL for more than
 * RUMOR_CHECKPOINT_MAX_SECTIONS sections; buffer errors as they come. */
RUMOR_API rumor_err rumor_checkpoint_encode(const struct rumor_checkpoint *c,
                                            rumor_buf *out);

/* Decodes a file image: a pure function that checks the magic, version,
 * header crc, every section's header crc, length (against what is left)
 * and payload crc32c, and that nothing follows the trailer. Sections of
 * *out point into data. RUMOR_EPROTO with diag naming the section ("section
 * 2 (model): payload crc32c mismatch") on any damage. */
RUMOR_API rumor_err rumor_checkpoint_decode(const uint8_t *data,
                                            size_t len,
                                            struct rumor_checkpoint *out,
                                            struct rumor_diag *diag);

/* DIR/node-N.step-S.ckpt (S zero-padded to 12 digits) into path. */
RUMOR_API void rumor_checkpoint_path(const char *dir,
                                     uint32_t node,
                                     uint64_t step,
                                     char *path,
                                     size_t cap);

/* Writes c durably as rumor_checkpoint_path(dir, c->node, c->step):
 * creates dir, writes a temporary file, fsyncs it, renames it, fsyncs the
 * directory, then removes this node's oldest checkpoints beyond keep
 * (keep >= 1) and any temporary file a killed writer left. RUMOR_EIO with
 * diag naming the file and the system error. */
RUMOR_API rumor_err rumor_checkpoint_write(const char *dir,
                                           const struct rumor_checkpoint *c,
                                           uint32_t keep,
                                           struct rumor_diag *diag);

/* Reads node's newest checkpoint in dir that decodes, trying older ones
 * when the newest is damaged (each refusal logged as a warning naming the
 * file and the section). buf receives the file (c's sections point into
 * it), path its name. RUMOR_ENOTFOUND with diag when dir holds no good
 * checkpoint of node. */
RUMOR_API rumor_err rumor_checkpoint_read_newest(const char *dir,
                                                 uint32_t node,
                                                 rumor_buf *buf,
                                                 struct rumor_checkpoint *c,
                                                 char *path,
                                                 size_t cap,
                                                 struct rumor_diag *diag);

#endif /* RUMOR_NODE_H */
