/*
 * train/train_impl.h: module-private pieces shared by the dataset,
 * workload and CUDA files of train/ (R2.4). Not installed.
 */
#ifndef RUMOR_TRAIN_IMPL_H
#define RUMOR_TRAIN_IMPL_H

#include "rumor/train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* perm[0..n) = a seeded uniform permutation of [0, n) (Fisher-Yates on
 * the Philox stream (seed, stream)); the same on every machine. */
void train_permutation(uint64_t seed, uint64_t stream, size_t *perm, size_t n);

#define TRAIN_MAX_LAYERS (RUMOR_WORKLOAD_MAX_HIDDEN + 1)

/* The shape of a workload's network: `layers` affine maps, layer l from
 * width[l] to width[l + 1] units, ReLU between them. Parameters in a
 * rumor_model are W0 [width[1], width[0]], b0 [width[1]], W1, b1, ...;
 * lsq has no biases (one tensor). */
struct train_net {
    rumor_workload_kind kind;
    size_t layers;                      /* affine maps, >= 1 */
    size_t width[TRAIN_MAX_LAYERS + 1]; /* width[0] = features */
    bool bias;                          /* false for lsq */
};

/* Floats of scratch train_cpu_pass needs for a batch of b rows. */
size_t train_cpu_scratch_floats(const struct train_net *net, size_t b);

/* Forward (and, when grad is not NULL, backward) pass on the CPU over b
 * rows x (b x width[0]); classifiers read labels y, lsq reads targets t
 * (b x width[layers]). Adds the summed loss to *loss_sum and the number
 * of correctly classified rows to *correct. Gradients are of the MEAN
 * loss over `denom` rows (denom >= b, so a caller may split a batch).
 * scratch holds train_cpu_scratch_floats(net, b) floats. */
void train_cpu_pass(const struct train_net *net,
                    const struct rumor_model *params,
                    const float *x,
                    const int32_t *y,
                    const float *t,
                    size_t b,
                    size_t denom,
                    const struct rumor_model *grad,
                    float *scratch,
                    double *loss_sum,
                    size_t *correct);

/* --- CUDA backend (train/workload_cuda.cu; the stub answers ENOTSUP) --- */

struct gossip_backend_i; /* gossip/backend.h */

typedef struct train_cuda train_cuda;

/* Device buffers for batches of up to max_batch rows of net. ENOTSUP
 * without a usable GPU or in a CPU-only build. */
rumor_err
train_cuda_new(const struct train_net *net, size_t max_batch, train_cuda **out);
void train_cuda_destroy(train_cuda **self_p);

/* The same contract as train_cpu_pass, with host pointers: parameters and
 * the batch are copied to the device, gradients copied back. */
rumor_err train_cuda_pass(train_cuda *cu,
                          const struct rumor_model *params,
                          const float *x,
                          const int32_t *y,
                          const float *t,
                          size_t b,
                          size_t denom,
                          const struct rumor_model *grad,
                          double *loss_sum,
                          size_t *correct);

/* --- the optimizer on a compute backend (train/optim.c) --- */

/* rumor_optim_new whose momentum buffer and scratch live in be's memory:
 * rumor_optim_step then takes parameters and gradients in that memory and
 * copies nothing; rumor_optim_save / _load cross through a host copy
 * (counted). rumor_optim_new is this on gossip_backend_host. */
rumor_err train_optim_new_in(const struct rumor_optim_opts *opts,
                             const struct rumor_model *params,
                             const struct gossip_backend_i *be,
                             rumor_optim **out);

/* Bytes the optimizer's state copied to (h2d) and from (d2h) its
 * backend's memory; 0 on the host. */
void train_optim_pcie(const rumor_optim *o, uint64_t *h2d, uint64_t *d2h);

/* The same on a model already in device memory (params and grad point
 * there, tensors in the workload's order): only the batch is copied up,
 * the loss and the count down. */
rumor_err train_cuda_pass_resident(train_cuda *cu,
                                   const struct rumor_model *params,
                                   const float *x,
                                   const int32_t *y,
                                   const float *t,
                                   size_t b,
                                   size_t denom,
                                   const struct rumor_model *grad,
                                   double *loss_sum,
                                   size_t *correct);

/* Moves w's parameters into be's memory (issue #31): rumor_workload_model
 * then hands out tensors there, rumor_workload_grad takes a gradient
 * there (allocate it with be) and rumor_workload_eval reads parameters
 * there, and a pass copies only the batch up and its loss down. On CUDA
 * the pass is train_cuda_pass_resident; on a device that is not CUDA
 * (gossip_backend_ref, the tests' device) the CPU pass reads its memory,
 * which is host memory, in place. RUMOR_ENOTSUP when be is CUDA and w
 * computes on the CPU or the other way round, RUMOR_EINVAL when w was
 * placed already or be is host memory. */
rumor_err train_workload_place(rumor_workload *w,
                               const struct gossip_backend_i *be);

/* Bytes copied into w's device memory (the parameters when placed, then
 * every pass's batch) and out of it (every pass's loss and count); both 0
 * while the model is in host memory. */
void train_workload_pcie(const rumor_workload *w, uint64_t *h2d, uint64_t *d2h);

/* --- for the tests (tests/unit/test_train.c, test_dataset_gz.c) --- */

/* One Gamma(shape, 1) draw (Marsaglia & Tsang 2000; shape < 1 by the
 * U^(1/shape) boost); shape > 0. The Dirichlet shards' proportions. */
double train_rng_gamma(struct rumor_rng *rng, double shape);

/* The device chosen at creation. */
rumor_device train_workload_device(const rumor_workload *w);

/* This node's training shard and the held-out split (owned by w, valid
 * for its life). */
const struct rumor_dataset *train_workload_shard(const rumor_workload *w);
const struct rumor_dataset *train_workload_heldout(const rumor_workload *w);

#endif /* RUMOR_TRAIN_IMPL_H */
