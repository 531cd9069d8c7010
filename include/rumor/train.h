/*
 * train: what a node trains, apart from how it talks to other nodes.
 * Three parts, in order:
 *   1. datasets: the embedded digits, MNIST IDX, CIFAR-10 binary, CSV and
 *      seeded synthetic data, the held-out split and the per-node shards;
 *   2. workloads: least squares, logistic regression and an MLP whose
 *      parameters are a struct rumor_model (weights [out, in], biases [out]),
 *      with minibatch gradients and held-out evaluation on CPU or CUDA;
 *   3. optimizers: SGD, heavy-ball momentum, Nesterov, weight decay, and a
 *      warm-up + step-decay learning-rate schedule, with byte checkpoints.
 * The node runtime (rumor/node.h) and `rumor sim train` drive them; nothing
 * here touches the network.
 *
 * Thread safety: an object is used by one thread at a time; distinct
 * objects may be used concurrently.
 * Ownership: every object is owned by its creator and freed with its
 * _destroy(&p); borrowed pointers are named in each contract.
 */
#ifndef RUMOR_TRAIN_H
#define RUMOR_TRAIN_H

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

/* The same from memory, for bytes the caller already holds: a pure
 * function of them (rumor_dataset_load_idx reads the files and calls it).
 * The names are used in diagnostics only. */
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

/* Samples in this node's shard and in the held-out split. */
RUMOR_API size_t rumor_workload_train_size(const rumor_workload *w);
RUMOR_API size_t rumor_workload_test_size(const rumor_workload *w);

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

#endif /* RUMOR_TRAIN_H */
