/* CPU-only build: the workload CUDA backend does not exist (R7.2), so
 * train_cuda_new answers RUMOR_ENOTSUP and workloads stay on the CPU. */
#include "train/train_impl.h"

#include <stddef.h>

rumor_err
train_cuda_new(const struct train_net *net, size_t max_batch, train_cuda **out)
{
    (void)net;
    (void)max_batch;
    *out = NULL;
    return RUMOR_ENOTSUP;
}

void
train_cuda_destroy(train_cuda **self_p)
{
    if (self_p != NULL)
        *self_p = NULL;
}

rumor_err
train_cuda_pass(train_cuda *cu,
                const struct rumor_model *params,
                const float *x,
                const int32_t *y,
                const float *t,
                size_t b,
                size_t denom,
                const struct rumor_model *grad,
                double *loss_sum,
                size_t *correct)
{
    (void)cu;
    (void)params;
    (void)x;
    (void)y;
    (void)t;
    (void)b;
    (void)denom;
    (void)grad;
    (void)loss_sum;
    (void)correct;
    return RUMOR_ENOTSUP;
}

rumor_err
train_cuda_pass_resident(train_cuda *cu,
                         const struct rumor_model *params,
                         const float *x,
                         const int32_t *y,
                         const float *t,
                         size_t b,
                         size_t denom,
                         const struct rumor_model *grad,
                         double *loss_sum,
                         size_t *correct)
{
    return train_cuda_pass(cu,
                           params,
                           x,
                           y,
                           t,
                           b,
                           denom,
                           grad,
                           loss_sum,
                           correct);
}
