// train/workload_cuda.cu: the CUDA forward and backward pass of the
// built-in workloads, the same contract as train_cpu_pass (workload_cpu.c).
//
// Two modes over one pass (s_run): train_cuda_pass takes a model in host
// memory, so it copies the parameters and the batch to the device, runs
// the layers, and copies the gradients back; train_cuda_pass_resident
// takes parameters and gradients already in device memory
// (train_workload_place), so only the batch goes up and the loss and
// count come down.
//
// Products are cuBLAS SGEMMs: a row-major [rows, cols] matrix is cuBLAS's
// column-major [cols, rows] matrix, so forward Z^T = W A^T, dW^T = A^T dZ
// and dA^T = W^T dZ^T need no transposed copies. Own kernels add biases
// and apply ReLU, compute the softmax cross-entropy (or squared error)
// head one row per thread with log-sum-exp, reduce bias gradients one
// column per thread, and mask deltas by the stored activations. Losses are
// summed with double atomics (sm_60+).
//
// Errors: CUDA_TRY / CUBLAS_TRY set rc and jump to the label written at
// the call site (R4.6). Only extern "C" entry points leave this file.
// Limit: tested against the CPU pass by test_cuda__gradients__match_cpu,
// which has not yet run on a GPU (none on the development machine).
extern "C" {
#include "train/train_impl.h"
}

#include "core/cuda_check.h"
#include "core/cuda_stream.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdlib.h>

#define CUDA_TRY(call, label)   CORE_CUDA_TRY("workload cuda", call, label)
#define CUBLAS_TRY(call, label) CORE_CUBLAS_TRY("workload cuda", call, label)

#define THREADS 256

// Every launch, copy and SGEMM on the thread's stream (core/cuda_stream.h;
// the node's is the legacy stream), with the exchange's work on the model.
static cudaStream_t
s_stream(void)
{
    return (cudaStream_t)core_cuda_stream();
}

struct train_cuda {
    struct train_net net;
    size_t max_batch;
    size_t param_floats;
    cublasHandle_t blas;
    float *params; // device copy of the parameters, model tensor order
    float *grads;  // device gradients, same layout
    float *x;      // max_batch x width[0]
    float *t;      // max_batch x width[layers] (lsq targets)
    int *y;        // max_batch labels
    float *act;    // activations of every layer
    float *ping;   // two delta buffers of max_batch x widest
    float *pong;
    double *loss;                // one double
    unsigned long long *correct; // one counter
};

// --- kernels ---------------------------------------------------------------

__global__ void
k_bias_act(float *z, const float *bias, size_t rows, size_t cols, int relu)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols)
        return;
    float v = z[i] + (bias != NULL ? bias[i % cols] : 0.0f);
    z[i] = relu && v < 0 ? 0.0f : v;
}

__global__ void
k_head(float *z,
       const int *y,
       const float *t,
       size_t rows,
       size_t k,
       int lsq,
       float inv,
       double *loss,
       unsigned long long *correct)
{
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows)
        return;
    float *row = z + r * k;
    if (lsq) {
        double sq = 0;
        for (size_t j = 0; j < k; j++) {
            float d = row[j] - t[r * k + j];
            sq += (double)d * d;
            row[j] = d * inv;
        }
        atomicAdd(loss, 0.5 * sq);
        return;
    }
    size_t arg = 0;
    float mx = row[0];
    for (size_t j = 1; j < k; j++)
        if (row[j] > mx) {
            mx = row[j];
            arg = j;
        }
    double sum = 0;
    for (size_t j = 0; j < k; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    size_t label = (size_t)y[r];
    atomicAdd(loss, log(sum) - log((double)row[label]));
    if (arg == label)
        atomicAdd(correct, 1ull);
    float isum = (float)(1.0 / sum);
    for (size_t j = 0; j < k; j++)
        row[j] = (row[j] * isum - (j == label ? 1.0f : 0.0f)) * inv;
}

__global__ void
k_bias_grad(const float *dz, float *gb, size_t rows, size_t cols)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols)
        return;
    float s = 0;
    for (size_t r = 0; r < rows; r++)
        s += dz[r * cols + j];
    gb[j] = s;
}

__global__ void
k_relu_mask(float *da, const float *a, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(a[i] > 0))
        da[i] = 0;
}

static unsigned
s_blocks(size_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

// --- entry points ------------------------------------------------------------

extern "C" rumor_err
train_cuda_new(const struct train_net *net, size_t max_batch, train_cuda **out)
{
    rumor_err rc = RUMOR_OK;
    const char *why = NULL;
    size_t acts = 0, widest = net->width[0], pf = 0;
    train_cuda *cu = NULL;
    *out = NULL;
    if (rumor_cuda_device_count(&why) == 0)
        return RUMOR_ENOTSUP;
    cu = (train_cuda *)calloc(1, sizeof *cu);
    if (cu == NULL)
        return RUMOR_ENOMEM;
    cu->net = *net;
    cu->max_batch = max_batch;
    for (size_t l = 0; l < net->layers; l++) {
        size_t o = net->width[l + 1];
        pf += o * net->width[l] + (net->bias ? o : 0);
        acts += max_batch * o;
        widest = o > widest ? o : widest;
    }
    cu->param_floats = pf;
    CUBLAS_TRY(cublasCreate(&cu->blas), fail);
    CUDA_TRY(cudaMalloc((void **)&cu->params, pf * sizeof(float)), fail);
    CUDA_TRY(cudaMalloc((void **)&cu->grads, pf * sizeof(float)), fail);
    CUDA_TRY(
        cudaMalloc((void **)&cu->x, max_batch * net->width[0] * sizeof(float)),
        fail);
    CUDA_TRY(cudaMalloc((void **)&cu->t,
                        max_batch * net->width[net->layers] * sizeof(float)),
             fail);
    CUDA_TRY(cudaMalloc((void **)&cu->y, max_batch * sizeof(int)), fail);
    CUDA_TRY(cudaMalloc((void **)&cu->act, acts * sizeof(float)), fail);
    CUDA_TRY(
        cudaMalloc((void **)&cu->ping, 2 * max_batch * widest * sizeof(float)),
        fail);
    cu->pong = cu->ping + max_batch * widest;
    CUDA_TRY(cudaMalloc((void **)&cu->loss, sizeof(double)), fail);
    CUDA_TRY(cudaMalloc((void **)&cu->correct, sizeof(unsigned long long)),
             fail);
    *out = cu;
    return RUMOR_OK;
fail:
    train_cuda_destroy(&cu);
    return rc;
}

extern "C" void
train_cuda_destroy(train_cuda **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    train_cuda *cu = *self_p;
    if (cu->blas != NULL)
        cublasDestroy(cu->blas);
    cudaFree(cu->params);
    cudaFree(cu->grads);
    cudaFree(cu->x);
    cudaFree(cu->t);
    cudaFree(cu->y);
    cudaFree(cu->act);
    cudaFree(cu->ping);
    cudaFree(cu->loss);
    cudaFree(cu->correct);
    free(cu);
    *self_p = NULL;
}

// Where each layer's tensors are for one pass: the device copies of a
// staged pass, or the caller's device tensors.
struct s_layers {
    const float *w[TRAIN_MAX_LAYERS];
    const float *bias[TRAIN_MAX_LAYERS];
    float *gw[TRAIN_MAX_LAYERS];
    float *gb[TRAIN_MAX_LAYERS];
    bool grad;
};

// The pass on device tensors: uploads the batch, runs the layers (and the
// backward pass when L->grad), downloads the loss and the count.
static rumor_err
s_run(train_cuda *cu,
      const struct s_layers *L,
      const float *x,
      const int32_t *y,
      const float *t,
      size_t b,
      size_t denom,
      double *loss_sum,
      size_t *correct)
{
    rumor_err rc = RUMOR_OK;
    const struct train_net *net = &cu->net;
    size_t k = net->width[net->layers];
    const float one = 1.0f, zero = 0.0f;
    const float *act[TRAIN_MAX_LAYERS + 1];
    float *s = cu->act, *dz = NULL;
    double h_loss = 0;
    unsigned long long h_correct = 0;
    cudaStream_t st = s_stream();
    CUBLAS_TRY(cublasSetStream(cu->blas, st), done);
    // pageable sources: staged before each call returns
    CUDA_TRY(cudaMemcpyAsync(cu->x,
                             x,
                             b * net->width[0] * sizeof(float),
                             cudaMemcpyHostToDevice,
                             st),
             done);
    if (net->kind == RUMOR_WORKLOAD_LSQ)
        CUDA_TRY(cudaMemcpyAsync(cu->t,
                                 t,
                                 b * k * sizeof(float),
                                 cudaMemcpyHostToDevice,
                                 st),
                 done);
    else
        CUDA_TRY(cudaMemcpyAsync(cu->y,
                                 y,
                                 b * sizeof(int),
                                 cudaMemcpyHostToDevice,
                                 st),
                 done);
    CUDA_TRY(cudaMemsetAsync(cu->loss, 0, sizeof(double), st), done);
    CUDA_TRY(cudaMemsetAsync(cu->correct, 0, sizeof(unsigned long long), st),
             done);
    act[0] = cu->x;
    for (size_t l = 0; l < net->layers; l++) {
        size_t o = net->width[l + 1], in = net->width[l];
        float *z = s;
        s += b * o;
        CUBLAS_TRY(cublasSgemm(cu->blas,
                               CUBLAS_OP_T,
                               CUBLAS_OP_N,
                               (int)o,
                               (int)b,
                               (int)in,
                               &one,
                               L->w[l],
                               (int)in,
                               act[l],
                               (int)in,
                               &zero,
                               z,
                               (int)o),
                   done);
        k_bias_act<<<s_blocks(b * o), THREADS, 0, s_stream()>>>(
            z,
            L->bias[l],
            b,
            o,
            l + 1 < net->layers);
        CUDA_TRY(cudaGetLastError(), done);
        act[l + 1] = z;
        dz = z;
    }
    k_head<<<s_blocks(b), THREADS, 0, s_stream()>>>(dz,
                                                    cu->y,
                                                    cu->t,
                                                    b,
                                                    k,
                                                    net->kind ==
                                                        RUMOR_WORKLOAD_LSQ,
                                                    1.0f / (float)denom,
                                                    cu->loss,
                                                    cu->correct);
    CUDA_TRY(cudaGetLastError(), done);
    for (size_t l = net->layers; L->grad && l-- > 0;) {
        size_t o = net->width[l + 1], in = net->width[l];
        CUBLAS_TRY(cublasSgemm(cu->blas,
                               CUBLAS_OP_N,
                               CUBLAS_OP_T,
                               (int)in,
                               (int)o,
                               (int)b,
                               &one,
                               act[l],
                               (int)in,
                               dz,
                               (int)o,
                               &zero,
                               L->gw[l],
                               (int)in),
                   done);
        if (L->gb[l] != NULL) {
            k_bias_grad<<<s_blocks(o), THREADS, 0, s_stream()>>>(dz,
                                                                 L->gb[l],
                                                                 b,
                                                                 o);
            CUDA_TRY(cudaGetLastError(), done);
        }
        if (l == 0)
            break;
        float *da = dz == cu->ping ? cu->pong : cu->ping;
        CUBLAS_TRY(cublasSgemm(cu->blas,
                               CUBLAS_OP_N,
                               CUBLAS_OP_N,
                               (int)in,
                               (int)b,
                               (int)o,
                               &one,
                               L->w[l],
                               (int)in,
                               dz,
                               (int)o,
                               &zero,
                               da,
                               (int)in),
                   done);
        k_relu_mask<<<s_blocks(b * in), THREADS, 0, s_stream()>>>(da,
                                                                  act[l],
                                                                  b * in);
        CUDA_TRY(cudaGetLastError(), done);
        dz = da;
    }
    CUDA_TRY(cudaMemcpyAsync(&h_loss,
                             cu->loss,
                             sizeof h_loss,
                             cudaMemcpyDeviceToHost,
                             st),
             done);
    CUDA_TRY(cudaMemcpyAsync(&h_correct,
                             cu->correct,
                             sizeof h_correct,
                             cudaMemcpyDeviceToHost,
                             st),
             done);
    CUDA_TRY(cudaStreamSynchronize(st), done);
    *loss_sum += h_loss;
    *correct += (size_t)h_correct;
done:
    return rc;
}

// m's tensors laid out one after another from base, as views: where a
// staged pass keeps its device copies of the parameters and gradients.
static struct rumor_model
s_packed(const struct rumor_model *m, float *base, struct rumor_tensor *view)
{
    for (size_t i = 0; i < m->count; i++) {
        view[i] = m->tensors[i];
        view[i].data = base;
        base += rumor_tensor_numel(&m->tensors[i]);
    }
    return (struct rumor_model){view, m->count};
}

// The staged pass: the parameters up, the resident pass on the copies,
// the gradient down.
extern "C" rumor_err
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
    rumor_err rc = RUMOR_OK;
    struct rumor_tensor pv[2 * TRAIN_MAX_LAYERS], gv[2 * TRAIN_MAX_LAYERS];
    if (params->count > 2 * TRAIN_MAX_LAYERS)
        return RUMOR_EINVAL;
    struct rumor_model dp = s_packed(params, cu->params, pv);
    struct rumor_model dg = s_packed(params, cu->grads, gv);
    for (size_t i = 0; i < params->count; i++)
        CUDA_TRY(cudaMemcpyAsync(dp.tensors[i].data,
                                 params->tensors[i].data,
                                 rumor_tensor_numel(&params->tensors[i]) *
                                     sizeof(float),
                                 cudaMemcpyHostToDevice,
                                 s_stream()),
                 done);
    rc = train_cuda_pass_resident(cu,
                                  &dp,
                                  x,
                                  y,
                                  t,
                                  b,
                                  denom,
                                  grad != NULL ? &dg : NULL,
                                  loss_sum,
                                  correct);
    for (size_t i = 0; rc == RUMOR_OK && grad != NULL && i < grad->count; i++)
        CUDA_TRY(cudaMemcpyAsync(grad->tensors[i].data,
                                 dg.tensors[i].data,
                                 rumor_tensor_numel(&grad->tensors[i]) *
                                     sizeof(float),
                                 cudaMemcpyDeviceToHost,
                                 s_stream()),
                 done);
    if (rc == RUMOR_OK && grad != NULL)
        CUDA_TRY(cudaStreamSynchronize(s_stream()), done);
done:
    return rc;
}

extern "C" rumor_err
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
    const struct train_net *net = &cu->net;
    size_t step = net->bias ? 2 : 1;
    struct s_layers L = {};
    if (b > cu->max_batch)
        return RUMOR_EINVAL;
    L.grad = grad != NULL;
    for (size_t l = 0; l < net->layers; l++) {
        L.w[l] = params->tensors[l * step].data;
        L.gw[l] = grad != NULL ? grad->tensors[l * step].data : NULL;
        if (net->bias) {
            L.bias[l] = params->tensors[l * step + 1].data;
            L.gb[l] = grad != NULL ? grad->tensors[l * step + 1].data : NULL;
        }
    }
    return s_run(cu, &L, x, y, t, b, denom, loss_sum, correct);
}
