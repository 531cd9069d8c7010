/* CPU-only build: the workload CUDA backend does not exist (R7.2), so
 * node_cuda_new answers RUMOR_ENOTSUP and workloads stay on the CPU. */
#include "node/workload_impl.h"

#include <stddef.h>

rumor_err
node_cuda_new(const struct node_net *net, size_t max_batch, node_cuda **out)
{
    (void)net;
    (void)max_batch;
    *out = NULL;
    return RUMOR_ENOTSUP;
}

void
node_cuda_destroy(node_cuda **self_p)
{
    if (self_p != NULL)
        *self_p = NULL;
}

rumor_err
node_cuda_pass(node_cuda *cu,
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
