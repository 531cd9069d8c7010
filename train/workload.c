/*
 * train/workload.c: the built-in training workloads as seen by the node
 * runtime: a model (struct rumor_model of parameter tensors), the loss and
 * gradient of a minibatch, and evaluation on the held-out split.
 *
 * Construction: the dataset (the embedded digits by default) is split into
 * training and held-out parts by a seeded permutation, identical on every
 * node; the training part is sharded (dataset_shard.c) and this node keeps
 * its own shard. Parameters start from the run seed alone, so all nodes
 * start from the same point as decentralized SGD analyses assume
 * (Koloskova et al. 2020, "A unified theory of decentralized SGD").
 * Weights are uniform in +-1/sqrt(fan_in) (PyTorch's nn.Linear bound),
 * biases zero; least squares starts at W = 0.
 *
 * Minibatches are a pure function of (seed, node, step): `batch` indices
 * drawn with replacement on the Philox stream (node, step), so a restarted
 * node replays the same batches and no sampler state needs checkpointing.
 * Rejected: per-epoch permutations (state across steps, and batches that
 * straddle epochs).
 *
 * Compute: train_cpu_pass (OpenBLAS) or, when want_cuda and a GPU is
 * usable, train_cuda_pass (cuBLAS); the model stays in host memory, where
 * gossip and the optimizer work on it, unless train_workload_place moved
 * it into a device's (then train_cuda_pass_resident).
 */
#include "rumor/train.h"

#include "gossip/backend.h"
#include "train/train_impl.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_INIT  0x494e4954u /* "INIT" */
#define SEED_BATCH 0x42415443u /* "BATC" */
#define EVAL_CHUNK 256         /* rows per evaluation pass */

struct rumor_workload {
    struct train_net net;
    uint64_t seed;
    uint32_t node;
    size_t batch;                /* 0 = whole shard */
    struct rumor_dataset *train; /* this node's shard */
    struct rumor_dataset *test;  /* held-out split */
    struct rumor_tensor tensors[2 * TRAIN_MAX_LAYERS];
    struct rumor_model model;
    float *params;                     /* one block for all tensors */
    size_t floats;                     /* in params */
    const struct gossip_backend_i *be; /* params' memory; NULL: host */
    uint64_t h2d, d2h;                 /* bytes copied to / from be */
    struct rumor_model *optimum;       /* lsq W*, or NULL */
    rumor_device device;
    train_cuda *cuda; /* when device is CUDA */
    size_t rows_max;  /* rows per pass (batch buffers) */
    float *xb;        /* rows_max x width[0] */
    int32_t *yb;      /* rows_max labels */
    float *tb;        /* rows_max x outputs (lsq) */
    float *scratch;   /* train_cpu_scratch_floats(rows_max) */
    size_t *idx;      /* rows_max minibatch indices */
};

/* --- names ---------------------------------------------------------------- */

rumor_err
rumor_workload_kind_parse(const char *name, rumor_workload_kind *out)
{
    assert(name != NULL);
    assert(out != NULL);
    if (strcmp(name, "lsq") == 0)
        *out = RUMOR_WORKLOAD_LSQ;
    else if (strcmp(name, "logreg") == 0)
        *out = RUMOR_WORKLOAD_LOGREG;
    else if (strcmp(name, "mlp") == 0)
        *out = RUMOR_WORKLOAD_MLP;
    else
        return RUMOR_EINVAL;
    return RUMOR_OK;
}

const char *
rumor_workload_kind_name(rumor_workload_kind kind)
{
    switch (kind) {
    case RUMOR_WORKLOAD_LSQ:
        return "lsq";
    case RUMOR_WORKLOAD_LOGREG:
        return "logreg";
    case RUMOR_WORKLOAD_MLP:
        return "mlp";
    }
    return "?";
}

void
rumor_workload_opts_default(struct rumor_workload_opts *opts)
{
    assert(opts != NULL);
    memset(opts, 0, sizeof *opts);
    opts->kind = RUMOR_WORKLOAD_MLP;
    opts->hidden[0] = 32;
    opts->hidden_count = 1;
    opts->nodes = 1;
    opts->shard = RUMOR_SHARD_IID;
    opts->alpha = 0.5;
    opts->batch = 32;
    opts->test_fraction = 0.2;
    opts->seed = 1;
    opts->lsq_samples = 512;
    opts->lsq_features = 32;
    opts->lsq_outputs = 8;
}

/* --- models -------------------------------------------------------------- */

static bool
s_same_shape(const struct rumor_model *a, const struct rumor_model *b)
{
    assert(a != NULL);
    assert(b != NULL);
    if (a->count != b->count)
        return false;
    for (size_t i = 0; i < a->count; i++) {
        const struct rumor_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (x->ndim != y->ndim)
            return false;
        for (size_t d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d])
                return false;
    }
    return true;
}

rumor_err
rumor_model_clone(const struct rumor_model *src, struct rumor_model **out)
{
    assert(src != NULL);
    assert(out != NULL);
    *out = NULL;
    if (src->count > RUMOR_GOSSIP_MAX_TENSORS)
        return RUMOR_ETOOBIG;
    size_t floats = 0;
    for (size_t i = 0; i < src->count; i++)
        floats += rumor_tensor_numel(&src->tensors[i]);
    size_t head =
        sizeof(struct rumor_model) + src->count * sizeof(struct rumor_tensor);
    head = (head + 63) / 64 * 64;
    /* On huge pages where the system allows: the compressors stream the
     * gradient and mixing copies every step, and on 4 KiB pages a core
     * reads them at about 60 % of the rate (docs/internals/lowrank.md). */
    uint8_t *mem = rumor_mem_alloc_large(head + floats * sizeof(float));
    if (mem == NULL)
        return RUMOR_ENOMEM;
    memset(mem, 0, head);
    struct rumor_model *m = (struct rumor_model *)mem;
    m->tensors = (struct rumor_tensor *)(mem + sizeof *m);
    m->count = src->count;
    float *data = (float *)(mem + head);
    for (size_t i = 0; i < src->count; i++) {
        size_t n = rumor_tensor_numel(&src->tensors[i]);
        m->tensors[i] = src->tensors[i];
        m->tensors[i].data = data;
        if (n > 0)
            memcpy(data, src->tensors[i].data, n * sizeof *data);
        data += n;
    }
    *out = m;
    return RUMOR_OK;
}

void
rumor_model_free(struct rumor_model **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    free(*self_p);
    *self_p = NULL;
}

/* --- construction ------------------------------------------------------ */

static rumor_err
s_check_opts(const struct rumor_workload_opts *o, struct rumor_diag *diag)
{
    if (o->kind != RUMOR_WORKLOAD_LSQ && o->kind != RUMOR_WORKLOAD_LOGREG &&
        o->kind != RUMOR_WORKLOAD_MLP) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "unknown workload kind %d",
                       (int)o->kind);
        return RUMOR_EINVAL;
    }
    if (o->nodes == 0 || o->node >= o->nodes) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "node %u is not in 0..%u",
                       o->node,
                       o->nodes ? o->nodes - 1 : 0);
        return RUMOR_EINVAL;
    }
    if (o->kind == RUMOR_WORKLOAD_MLP &&
        (o->hidden_count == 0 || o->hidden_count > RUMOR_WORKLOAD_MAX_HIDDEN)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "mlp needs 1..%d hidden layers",
                       RUMOR_WORKLOAD_MAX_HIDDEN);
        return RUMOR_EINVAL;
    }
    for (size_t i = 0; o->kind == RUMOR_WORKLOAD_MLP && i < o->hidden_count;
         i++)
        if (o->hidden[i] == 0 || o->hidden[i] > RUMOR_WORKLOAD_MAX_WIDTH) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "hidden layer %zu has %zu units (1..%u)",
                           i + 1,
                           o->hidden[i],
                           RUMOR_WORKLOAD_MAX_WIDTH);
            return RUMOR_EINVAL;
        }
    if (o->batch > RUMOR_WORKLOAD_MAX_BATCH) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "batch %zu exceeds %u",
                       o->batch,
                       RUMOR_WORKLOAD_MAX_BATCH);
        return RUMOR_EINVAL;
    }
    if (!(o->test_fraction > 0 && o->test_fraction < 1)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "test fraction %g is not in (0, 1)",
                       o->test_fraction);
        return RUMOR_EINVAL;
    }
    if (o->shard == RUMOR_SHARD_DIRICHLET &&
        (!(o->alpha > 0) || !isfinite(o->alpha))) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "dirichlet alpha %g must be > 0",
                       o->alpha);
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

/* Loads or generates the full dataset this workload trains on. */
static rumor_err
s_dataset(const struct rumor_workload_opts *o,
          rumor_workload *w,
          struct rumor_dataset **owned,
          const struct rumor_dataset **all,
          struct rumor_diag *diag)
{
    *owned = NULL;
    *all = o->dataset;
    if (o->dataset != NULL) {
        bool regression = o->dataset->target != NULL;
        if (regression != (o->kind == RUMOR_WORKLOAD_LSQ)) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "workload %s needs a %s dataset, '%s' is not one",
                           rumor_workload_kind_name(o->kind),
                           regression ? "labelled" : "regression",
                           o->dataset->name);
            return RUMOR_EINVAL;
        }
        if (!regression && o->dataset->classes < 2) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "dataset '%s' has %zu class; a classifier needs 2 "
                           "or more",
                           o->dataset->name,
                           o->dataset->classes);
            return RUMOR_EINVAL;
        }
        for (size_t i = 0; !regression && i < o->dataset->n; i++)
            if (o->dataset->y[i] < 0 ||
                (size_t)o->dataset->y[i] >= o->dataset->classes) {
                rumor_diag_set(diag,
                               "",
                               0,
                               0,
                               "dataset '%s': sample %zu has label %d, not "
                               "in 0..%zu",
                               o->dataset->name,
                               i,
                               (int)o->dataset->y[i],
                               o->dataset->classes - 1);
                return RUMOR_EINVAL;
            }
        return RUMOR_OK;
    }
    rumor_err rc;
    if (o->kind == RUMOR_WORKLOAD_LSQ) {
        float *w_star = NULL;
        rc = rumor_dataset_least_squares(o->lsq_samples,
                                         o->lsq_features,
                                         o->lsq_outputs,
                                         o->lsq_noise,
                                         o->seed,
                                         owned,
                                         &w_star);
        if (rc != RUMOR_OK) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "least squares %zu x %zu x %zu: %s",
                           o->lsq_samples,
                           o->lsq_features,
                           o->lsq_outputs,
                           rumor_strerror(rc));
            return rc;
        }
        struct rumor_tensor t = {w_star, 2, {o->lsq_outputs, o->lsq_features}};
        struct rumor_model m = {&t, 1};
        rc = rumor_model_clone(&m, &w->optimum);
        free(w_star);
    } else {
        rc = rumor_dataset_load_digits(owned);
    }
    *all = *owned;
    return rc;
}

static rumor_err
s_build_model(rumor_workload *w)
{
    struct train_net *net = &w->net;
    size_t count = 0, floats = 0;
    for (size_t l = 0; l < net->layers; l++) {
        size_t in = net->width[l], o = net->width[l + 1];
        w->tensors[count++] = (struct rumor_tensor){NULL, 2, {o, in}};
        floats += o * in;
        if (net->bias) {
            w->tensors[count++] = (struct rumor_tensor){NULL, 1, {o}};
            floats += o;
        }
    }
    w->floats = floats;
    w->params = calloc(floats, sizeof *w->params);
    if (w->params == NULL)
        return RUMOR_ENOMEM;
    float *p = w->params;
    uint64_t s = rumor_seed_derive(w->seed, SEED_INIT, 0);
    for (size_t i = 0; i < count; i++) {
        struct rumor_tensor *t = &w->tensors[i];
        size_t n = rumor_tensor_numel(t);
        t->data = p;
        p += n;
        if (t->ndim != 2 || net->kind == RUMOR_WORKLOAD_LSQ)
            continue;
        rumor_rng_fill_uniform(s, i, 0, t->data, n);
        float bound = 1.0f / sqrtf((float)t->shape[1]);
        for (size_t j = 0; j < n; j++)
            t->data[j] = (2.0f * t->data[j] - 1.0f) * bound;
    }
    w->model.tensors = w->tensors;
    w->model.count = count;
    return RUMOR_OK;
}

static rumor_err
s_buffers(rumor_workload *w)
{
    size_t rows =
        w->batch == 0 || w->batch > w->train->n ? w->train->n : w->batch;
    if (rows < EVAL_CHUNK)
        rows = EVAL_CHUNK;
    w->rows_max = rows;
    size_t k = w->net.width[w->net.layers];
    w->xb = malloc(rows * w->net.width[0] * sizeof *w->xb);
    w->yb = malloc(rows * sizeof *w->yb);
    w->tb = malloc(rows * k * sizeof *w->tb);
    w->scratch =
        malloc(train_cpu_scratch_floats(&w->net, rows) * sizeof *w->scratch);
    w->idx = malloc(rows * sizeof *w->idx);
    if (w->xb == NULL || w->yb == NULL || w->tb == NULL || w->scratch == NULL ||
        w->idx == NULL)
        return RUMOR_ENOMEM;
    return RUMOR_OK;
}

rumor_err
rumor_workload_new(const struct rumor_workload_opts *opts,
                   rumor_workload **out,
                   struct rumor_diag *diag)
{
    assert(opts != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_err rc = s_check_opts(opts, diag);
    if (rc != RUMOR_OK)
        return rc;
    struct rumor_dataset *owned = NULL, *train_all = NULL;
    const struct rumor_dataset *all = NULL;
    size_t *idx = NULL, count = 0;
    rumor_workload *w = calloc(1, sizeof *w);
    if (w == NULL)
        return RUMOR_ENOMEM;
    w->seed = opts->seed;
    w->node = opts->node;
    w->batch = opts->batch;
    rc = s_dataset(opts, w, &owned, &all, diag);
    if (rc != RUMOR_OK)
        goto done;
    rc = rumor_dataset_split(all,
                             opts->test_fraction,
                             opts->seed,
                             &train_all,
                             &w->test);
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "cannot split %zu samples with test fraction %g",
                       all->n,
                       opts->test_fraction);
        goto done;
    }
    rc = rumor_shard_indices(train_all,
                             opts->shard,
                             opts->alpha,
                             opts->seed,
                             opts->node,
                             opts->nodes,
                             &idx,
                             &count);
    if (rc == RUMOR_OK)
        rc = rumor_dataset_subset(train_all, idx, count, &w->train);
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "cannot shard %zu training samples over %u nodes: %s",
                       train_all->n,
                       opts->nodes,
                       rumor_strerror(rc));
        goto done;
    }
    struct train_net *net = &w->net;
    net->kind = opts->kind;
    net->bias = opts->kind != RUMOR_WORKLOAD_LSQ;
    net->width[0] = all->dim;
    net->layers = 1;
    if (opts->kind == RUMOR_WORKLOAD_MLP) {
        for (size_t i = 0; i < opts->hidden_count; i++)
            net->width[1 + i] = opts->hidden[i];
        net->layers = opts->hidden_count + 1;
    }
    net->width[net->layers] =
        opts->kind == RUMOR_WORKLOAD_LSQ ? all->outputs : all->classes;
    rc = s_build_model(w);
    if (rc == RUMOR_OK)
        rc = s_buffers(w);
    if (rc != RUMOR_OK)
        goto done;
    w->device = rumor_device_select(opts->want_cuda);
    if (w->device == RUMOR_DEVICE_CUDA) {
        rc = train_cuda_new(net, w->rows_max, &w->cuda);
        if (rc != RUMOR_OK) {
            rumor_log(RUMOR_LOG_WARN,
                      "workload: CUDA unavailable (%s), CPU",
                      rumor_strerror(rc));
            w->device = RUMOR_DEVICE_CPU;
            rc = RUMOR_OK;
        }
    }
    rumor_log(RUMOR_LOG_DEBUG,
              "workload: forward and backward on the %s",
              rumor_device_name(w->device));
done:
    free(idx);
    rumor_dataset_destroy(&train_all);
    rumor_dataset_destroy(&owned);
    if (rc != RUMOR_OK)
        rumor_workload_destroy(&w);
    *out = w;
    return rc;
}

void
rumor_workload_destroy(rumor_workload **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_workload *w = *self_p;
    train_cuda_destroy(&w->cuda);
    rumor_dataset_destroy(&w->train);
    rumor_dataset_destroy(&w->test);
    rumor_model_free(&w->optimum);
    if (w->be != NULL)
        w->be->release(w->params);
    else
        free(w->params);
    free(w->xb);
    free(w->yb);
    free(w->tb);
    free(w->scratch);
    free(w->idx);
    free(w);
    *self_p = NULL;
}

/* --- accessors ------------------------------------------------------------ */

struct rumor_model *
rumor_workload_model(rumor_workload *w)
{
    assert(w != NULL);
    return &w->model;
}

rumor_err
train_workload_place(rumor_workload *w, const struct gossip_backend_i *be)
{
    assert(w != NULL);
    assert(be != NULL);
    if (w->be != NULL || be->host_memory)
        return RUMOR_EINVAL;
    if (be->cuda != (w->device == RUMOR_DEVICE_CUDA))
        return RUMOR_ENOTSUP;
    size_t bytes = w->floats * sizeof *w->params;
    float *d = NULL;
    rumor_err rc = be->alloc(bytes, (void **)&d);
    if (rc == RUMOR_OK)
        rc = be->copy(d, w->params, bytes, GOSSIP_TO_DEVICE);
    if (rc != RUMOR_OK) {
        be->release(d);
        return rc;
    }
    w->h2d += bytes;
    for (size_t i = 0; i < w->model.count; i++)
        w->tensors[i].data = d + (w->tensors[i].data - w->params);
    free(w->params);
    w->params = d;
    w->be = be;
    return RUMOR_OK;
}

void
train_workload_pcie(const rumor_workload *w, uint64_t *h2d, uint64_t *d2h)
{
    assert(w != NULL);
    *h2d = w->h2d;
    *d2h = w->d2h;
}

rumor_device
train_workload_device(const rumor_workload *w)
{
    assert(w != NULL);
    return w->device;
}

size_t
rumor_workload_train_size(const rumor_workload *w)
{
    assert(w != NULL);
    return w->train->n;
}

size_t
rumor_workload_test_size(const rumor_workload *w)
{
    assert(w != NULL);
    return w->test->n;
}

const struct rumor_dataset *
train_workload_shard(const rumor_workload *w)
{
    assert(w != NULL);
    return w->train;
}

const struct rumor_dataset *
train_workload_heldout(const rumor_workload *w)
{
    assert(w != NULL);
    return w->test;
}

rumor_err
rumor_workload_optimum(const rumor_workload *w, const struct rumor_model **out)
{
    assert(w != NULL);
    assert(out != NULL);
    *out = w->optimum;
    return w->optimum != NULL ? RUMOR_OK : RUMOR_ENOTSUP;
}

/* --- compute ---------------------------------------------------------------
 */

/* Copies rows idx[0..b) (or rows [first, first + b) when idx is NULL) of
 * d into the batch buffers. */
static void
s_gather(rumor_workload *w,
         const struct rumor_dataset *d,
         const size_t *idx,
         size_t first,
         size_t b)
{
    size_t dim = d->dim, k = d->outputs;
    for (size_t r = 0; r < b; r++) {
        size_t i = idx != NULL ? idx[r] : first + r;
        memcpy(w->xb + r * dim, d->x + i * dim, dim * sizeof *w->xb);
        if (d->y != NULL)
            w->yb[r] = d->y[i];
        else
            memcpy(w->tb + r * k, d->target + i * k, k * sizeof *w->tb);
    }
}

static rumor_err
s_pass(rumor_workload *w,
       const struct rumor_model *params,
       size_t b,
       size_t denom,
       const struct rumor_model *grad,
       double *loss_sum,
       size_t *correct)
{
    if (w->be != NULL) {
        /* what a resident pass copies: the batch up, loss and count down
         * (on the ref device the CPU pass below reads the batch where it
         * is, and the count stands for the CUDA pass's copies) */
        size_t k = w->net.width[w->net.layers];
        w->h2d += b * w->net.width[0] * sizeof *w->xb +
                  (w->net.kind == RUMOR_WORKLOAD_LSQ ? b * k * sizeof *w->tb
                                                     : b * sizeof *w->yb);
        w->d2h += sizeof(double) + sizeof(unsigned long long);
    }
    if (w->device == RUMOR_DEVICE_CUDA && w->be != NULL)
        return train_cuda_pass_resident(w->cuda,
                                        params,
                                        w->xb,
                                        w->yb,
                                        w->tb,
                                        b,
                                        denom,
                                        grad,
                                        loss_sum,
                                        correct);
    if (w->device == RUMOR_DEVICE_CUDA)
        return train_cuda_pass(w->cuda,
                               params,
                               w->xb,
                               w->yb,
                               w->tb,
                               b,
                               denom,
                               grad,
                               loss_sum,
                               correct);
    train_cpu_pass(&w->net,
                   params,
                   w->xb,
                   w->yb,
                   w->tb,
                   b,
                   denom,
                   grad,
                   w->scratch,
                   loss_sum,
                   correct);
    return RUMOR_OK;
}

rumor_err
rumor_workload_grad(rumor_workload *w,
                    uint64_t step,
                    const struct rumor_model *grad,
                    double *loss)
{
    assert(w != NULL);
    assert(grad != NULL);
    if (!s_same_shape(&w->model, grad))
        return RUMOR_EINVAL;
    const struct rumor_dataset *d = w->train;
    size_t b = w->batch == 0 || w->batch >= d->n ? d->n : w->batch;
    double loss_sum = 0;
    size_t correct = 0;
    rumor_err rc;
    if (b == d->n) {
        /* Full batch: the whole shard, in order. */
        s_gather(w, d, NULL, 0, b);
    } else {
        struct rumor_rng rng;
        rumor_rng_init(&rng,
                       rumor_seed_derive(w->seed, SEED_BATCH, w->node),
                       step);
        for (size_t r = 0; r < b; r++)
            w->idx[r] = rumor_rng_below(&rng, (uint32_t)d->n);
        s_gather(w, d, w->idx, 0, b);
    }
    rc = s_pass(w, &w->model, b, b, grad, &loss_sum, &correct);
    if (loss != NULL)
        *loss = loss_sum / (double)b;
    return rc;
}

rumor_err
rumor_workload_eval(rumor_workload *w,
                    const struct rumor_model *params,
                    rumor_eval_split split,
                    struct rumor_eval *out)
{
    assert(w != NULL);
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    if (params == NULL)
        params = &w->model;
    if (!s_same_shape(&w->model, params))
        return RUMOR_EINVAL;
    if (split != RUMOR_EVAL_TEST && split != RUMOR_EVAL_TRAIN)
        return RUMOR_EINVAL;
    const struct rumor_dataset *d =
        split == RUMOR_EVAL_TEST ? w->test : w->train;
    double loss_sum = 0;
    size_t correct = 0;
    for (size_t first = 0; first < d->n; first += w->rows_max) {
        size_t b = d->n - first < w->rows_max ? d->n - first : w->rows_max;
        s_gather(w, d, NULL, first, b);
        rumor_err rc = s_pass(w, params, b, d->n, NULL, &loss_sum, &correct);
        if (rc != RUMOR_OK)
            return rc;
    }
    out->n = d->n;
    out->loss = loss_sum / (double)d->n;
    out->accuracy = w->net.kind == RUMOR_WORKLOAD_LSQ
                        ? NAN
                        : (double)correct / (double)d->n;
    return RUMOR_OK;
}
