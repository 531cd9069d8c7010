/*
 * Private to the CUDA sources (lowrank/cuda.cu, train/workload_cuda.cu):
 * the checks around CUDA runtime, cuBLAS and cuSOLVER calls, written
 * once. Each one runs `call`; on failure it logs the call's text and the
 * status under the prefix `what` ("lowrank cuda", ...), sets the
 * caller's `rumor_err rc` to RUMOR_EBACKEND and jumps to the caller's
 * cleanup label (R4.6: every error is handled where it happens). Macros
 * only: they expand where rumor/core.h and the CUDA headers are already
 * included, so this header includes nothing (the .cu files include C
 * headers in their own extern "C" ways).
 */
#ifndef RUMOR_CORE_CUDA_CHECK_H
#define RUMOR_CORE_CUDA_CHECK_H

#define CORE_CUDA_TRY(what, call, label)              \
    do {                                              \
        cudaError_t cuda_err_ = (call);               \
        if (cuda_err_ != cudaSuccess) {               \
            rumor_log(RUMOR_LOG_ERROR,                \
                      "%s: %s: %s",                   \
                      what,                           \
                      #call,                          \
                      cudaGetErrorString(cuda_err_)); \
            rc = RUMOR_EBACKEND;                      \
            goto label;                               \
        }                                             \
    } while (0)

/* cuBLAS and cuSOLVER report a status number. */
#define CORE_CUDA_STATUS_TRY(what, type, ok, call, label) \
    do {                                                  \
        type cuda_st_ = (call);                           \
        if (cuda_st_ != (ok)) {                           \
            rumor_log(RUMOR_LOG_ERROR,                    \
                      "%s: %s: status %d",                \
                      what,                               \
                      #call,                              \
                      (int)cuda_st_);                     \
            rc = RUMOR_EBACKEND;                          \
            goto label;                                   \
        }                                                 \
    } while (0)

#define CORE_CUBLAS_TRY(what, call, label)      \
    CORE_CUDA_STATUS_TRY(what,                  \
                         cublasStatus_t,        \
                         CUBLAS_STATUS_SUCCESS, \
                         call,                  \
                         label)
#define CORE_CUSOLVER_TRY(what, call, label)      \
    CORE_CUDA_STATUS_TRY(what,                    \
                         cusolverStatus_t,        \
                         CUSOLVER_STATUS_SUCCESS, \
                         call,                    \
                         label)

#endif
