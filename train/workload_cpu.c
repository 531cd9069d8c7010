/*
 * train/workload_cpu.c: the CPU forward and backward pass shared by all
 * built-in workloads (least squares, softmax regression, ReLU MLP).
 *
 * Every workload is a stack of affine maps z = a W^T + b with ReLU between
 * them and one of two heads: squared error 1/2 ||z - t||^2 (least
 * squares) or softmax cross-entropy (classifiers). Treating logistic
 * regression as a zero-hidden-layer MLP and least squares as one linear
 * layer keeps one code path to test. Rows are samples, so each layer is
 * one cblas_sgemm (OpenBLAS) forward and two backward (dW = dZ^T A,
 * dA = dZ W), as in any textbook backprop (Goodfellow et al., Deep
 * Learning, 6.5). The ReLU mask is recovered from the stored activation
 * (relu(z) > 0 iff z > 0), so only post-activations are kept.
 *
 * Losses are accumulated in double; the softmax subtracts the row max
 * before exp (log-sum-exp) so large logits do not overflow. Gradients are
 * of the mean over `denom` rows so evaluation and large batches can be
 * processed in chunks with the same result.
 */
#include "rumor/train.h"

#include "train/train_impl.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

size_t
train_cpu_scratch_floats(const struct train_net *net, size_t b)
{
    size_t total = 0, widest = 0;
    for (size_t l = 1; l <= net->layers; l++) {
        total += b * net->width[l];
        if (net->width[l] > widest)
            widest = net->width[l];
    }
    if (net->width[0] > widest)
        widest = net->width[0];
    /* activations of every layer + two ping-pong delta buffers */
    return total + 2 * b * widest;
}

/* Loss of the head on z (b x k) into *loss_sum / *correct; z becomes the
 * gradient of the summed loss with respect to z, divided by denom. */
static void
s_head(const struct train_net *net,
       float *z,
       const int32_t *y,
       const float *t,
       size_t b,
       size_t denom,
       double *loss_sum,
       size_t *correct)
{
    size_t k = net->width[net->layers];
    float inv = 1.0f / (float)denom;
    for (size_t r = 0; r < b; r++) {
        float *row = z + r * k;
        if (net->kind == RUMOR_WORKLOAD_LSQ) {
            const float *tr = t + r * k;
            double sq = 0;
            for (size_t j = 0; j < k; j++) {
                float d = row[j] - tr[j];
                sq += (double)d * d;
                row[j] = d * inv;
            }
            *loss_sum += 0.5 * sq;
            continue;
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
        /* -log softmax[label] = log(sum) - (z_label - mx) */
        *loss_sum += log(sum) - log((double)row[label]);
        *correct += arg == label;
        float isum = (float)(1.0 / sum);
        for (size_t j = 0; j < k; j++)
            row[j] = (row[j] * isum - (j == label ? 1.0f : 0.0f)) * inv;
    }
}

void
train_cpu_pass(const struct train_net *net,
               const struct rumor_model *params,
               const float *x,
               const int32_t *y,
               const float *t,
               size_t b,
               size_t denom,
               const struct rumor_model *grad,
               float *scratch,
               double *loss_sum,
               size_t *correct)
{
    size_t step = net->bias ? 2 : 1;
    const float *act[TRAIN_MAX_LAYERS + 1];
    float *out[TRAIN_MAX_LAYERS + 1] = {NULL};
    act[0] = x;
    float *s = scratch;
    for (size_t l = 0; l < net->layers; l++) {
        size_t in = net->width[l], o = net->width[l + 1];
        const float *w = params->tensors[l * step].data;
        float *z = s;
        s += b * o;
        cblas_sgemm(CblasRowMajor,
                    CblasNoTrans,
                    CblasTrans,
                    (int)b,
                    (int)o,
                    (int)in,
                    1.0f,
                    act[l],
                    (int)in,
                    w,
                    (int)in,
                    0.0f,
                    z,
                    (int)o);
        if (net->bias) {
            const float *bias = params->tensors[l * step + 1].data;
            for (size_t r = 0; r < b; r++)
                for (size_t j = 0; j < o; j++)
                    z[r * o + j] += bias[j];
        }
        if (l + 1 < net->layers)
            for (size_t i = 0; i < b * o; i++)
                z[i] = z[i] > 0 ? z[i] : 0;
        out[l + 1] = z;
        act[l + 1] = z;
    }
    float *dz = out[net->layers];
    s_head(net, dz, y, t, b, denom, loss_sum, correct);
    if (grad == NULL)
        return;
    size_t widest = 0;
    for (size_t l = 0; l <= net->layers; l++)
        if (net->width[l] > widest)
            widest = net->width[l];
    float *ping = s;
    float *pong = s + b * widest;
    for (size_t l = net->layers; l-- > 0;) {
        size_t in = net->width[l], o = net->width[l + 1];
        float *gw = grad->tensors[l * step].data;
        cblas_sgemm(CblasRowMajor,
                    CblasTrans,
                    CblasNoTrans,
                    (int)o,
                    (int)in,
                    (int)b,
                    1.0f,
                    dz,
                    (int)o,
                    act[l],
                    (int)in,
                    0.0f,
                    gw,
                    (int)in);
        if (net->bias) {
            float *gb = grad->tensors[l * step + 1].data;
            memset(gb, 0, o * sizeof *gb);
            for (size_t r = 0; r < b; r++)
                for (size_t j = 0; j < o; j++)
                    gb[j] += dz[r * o + j];
        }
        if (l == 0)
            break;
        /* dA = dZ W, then through the ReLU of layer l's output. */
        float *da = dz == ping ? pong : ping;
        const float *w = params->tensors[l * step].data;
        cblas_sgemm(CblasRowMajor,
                    CblasNoTrans,
                    CblasNoTrans,
                    (int)b,
                    (int)in,
                    (int)o,
                    1.0f,
                    dz,
                    (int)o,
                    w,
                    (int)in,
                    0.0f,
                    da,
                    (int)in);
        const float *a = act[l];
        for (size_t i = 0; i < b * in; i++)
            if (!(a[i] > 0))
                da[i] = 0;
        dz = da;
    }
}
