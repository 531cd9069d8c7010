/*
 * Private to lowrank/: the compute backend interface (ggml style, R7.1).
 * A backend is a table of function pointers plus a context. Pointers
 * named "device" live in the backend's memory (host memory for cpu and
 * ref, CUDA device memory for cuda); host pointers are always host.
 * Matrices are row-major: M is n x m, P is n x r, Q is m x r.
 */
#ifndef RUMOR_LOWRANK_BACKEND_H
#define RUMOR_LOWRANK_BACKEND_H

/* The public headers are C; the .cu file includes this one. */
#ifdef __cplusplus
extern "C" {
#endif

#include "rumor/lowrank.h"

struct lowrank_backend_i {
    const char *name;
    /* Allocates bytes of zeroed device memory into *out. */
    rumor_err (*alloc)(void *ctx, size_t bytes, float **out);
    /* Frees device memory from alloc; NULL is ignored. */
    void (*release)(void *ctx, float *ptr);
    /* Copies bytes host -> device and device -> host. */
    rumor_err (*upload)(void *ctx, float *dst, const float *src, size_t bytes);
    rumor_err (*download)(void *ctx,
                          float *dst,
                          const float *src,
                          size_t bytes);
    /* P = M Q. When add != NULL, first M += add in the same pass (error
     * feedback fused into the product: m holds e and becomes g + e). */
    rumor_err (*project_right)(void *ctx,
                               float *mat,
                               const float *add,
                               size_t n,
                               size_t m,
                               const float *q,
                               size_t r,
                               float *p);
    /* Q = M^T P, with the same optional fused M += add. */
    rumor_err (*project_left)(void *ctx,
                              float *mat,
                              const float *add,
                              size_t n,
                              size_t m,
                              const float *p,
                              size_t r,
                              float *q);
    /* Orthonormalizes the columns of P (n x r) in place. */
    rumor_err (*orthogonalize)(void *ctx,
                               float *p,
                               size_t n,
                               size_t r,
                               rumor_lowrank_orth method,
                               float eps);
    /* Y = alpha P Q^T; when e != NULL: e -= Y; when out != NULL:
     * out = beta out + Y (beta is 0 or 1; beta 0 never reads out). */
    rumor_err (*reconstruct)(void *ctx,
                             size_t n,
                             size_t m,
                             size_t r,
                             const float *p,
                             const float *q,
                             float alpha,
                             float *e,
                             float *out,
                             float beta);
    /* Frees the context. */
    void (*free)(void *ctx);
    /* (optional) The operations above over count matrices of one shape,
     * given as host arrays of device pointers (the backend copies them
     * where it needs to); adds, es or outs may be NULL as a whole. NULL
     * slots: the caller loops over the single-matrix operations. */
    rumor_err (*project_right_batch)(void *ctx,
                                     float *const *mats,
                                     const float *const *adds,
                                     size_t n,
                                     size_t m,
                                     const float *const *qs,
                                     size_t r,
                                     float *const *ps,
                                     size_t count);
    rumor_err (*project_left_batch)(void *ctx,
                                    float *const *mats,
                                    const float *const *adds,
                                    size_t n,
                                    size_t m,
                                    const float *const *ps,
                                    size_t r,
                                    float *const *qs,
                                    size_t count);
    rumor_err (*orthogonalize_batch)(void *ctx,
                                     float *const *ps,
                                     size_t n,
                                     size_t r,
                                     rumor_lowrank_orth method,
                                     float eps,
                                     size_t count);
    rumor_err (*reconstruct_batch)(void *ctx,
                                   size_t n,
                                   size_t m,
                                   size_t r,
                                   const float *const *ps,
                                   const float *const *qs,
                                   float alpha,
                                   float *const *es,
                                   float *const *outs,
                                   float beta,
                                   size_t count);
    /* (optional, with copy) P = M' Q where M' = (mat - pd qd^T) + add is
     * stored in mat in the same pass: the previous step's error update
     * e = M - Pd Qd^T (pd n x r, qd m x r, device), deferred into this
     * step's first product, so M is read and written once instead of
     * twice. mat ends equal, bit for bit, to reconstruct(e = mat, alpha
     * 1) followed by project_right(mat, add). NULL: the caller runs those
     * two operations and never defers. */
    rumor_err (*project_right_ef)(void *ctx,
                                  float *mat,
                                  const float *add,
                                  size_t n,
                                  size_t m,
                                  const float *pd,
                                  const float *qd,
                                  const float *q,
                                  size_t r,
                                  float *p);
    /* (optional) project_right_ef over count matrices of one shape, as
     * the other *_batch slots; NULL: the caller loops. */
    rumor_err (*project_right_ef_batch)(void *ctx,
                                        float *const *mats,
                                        const float *const *adds,
                                        size_t n,
                                        size_t m,
                                        const float *const *pds,
                                        const float *const *qds,
                                        const float *const *qs,
                                        size_t r,
                                        float *const *ps,
                                        size_t count);
    /* Copies bytes device -> device (required where project_right_ef is
     * set: the deferred update keeps copies of the step's factors). */
    rumor_err (*copy)(void *ctx, float *dst, const float *src, size_t bytes);
    /* Device memory is host memory (cpu, ref): host code may read and
     * write it directly. */
    bool host_memory;
    /* (optional) The floats one step writes over all of a compressor's
     * matrices, told once by the compressor: the cpu backend writes every
     * fresh output with streaming stores when this total is beyond its
     * caches, not only the outputs of large matrices (by the time the
     * caller reads a small matrix's output, the rest of the model has
     * pushed it out of the cache). NULL: not needed. */
    void (*step_floats)(void *ctx, size_t floats);
};

/* Each fills *iface and *ctx; the context is freed with iface->free. */
rumor_err lowrank_cpu_init(struct lowrank_backend_i *iface, void **ctx);
rumor_err lowrank_ref_init(struct lowrank_backend_i *iface, void **ctx);
/* RUMOR_ENOTSUP in CPU-only builds or without a usable GPU. */
rumor_err lowrank_cuda_init(struct lowrank_backend_i *iface, void **ctx);

/* Plain-C reference kernels (ref.c), the test oracle for every backend.
 * Arguments as in the interface. */
void lowrank_ref_project_right(float *mat,
                               const float *add,
                               size_t n,
                               size_t m,
                               const float *q,
                               size_t r,
                               float *p);
void lowrank_ref_project_left(float *mat,
                              const float *add,
                              size_t n,
                              size_t m,
                              const float *p,
                              size_t r,
                              float *q);
void lowrank_ref_gram_schmidt(float *p, size_t n, size_t r, float eps);
rumor_err lowrank_ref_householder(float *p, size_t n, size_t r);
void lowrank_ref_reconstruct(size_t n,
                             size_t m,
                             size_t r,
                             const float *p,
                             const float *q,
                             float alpha,
                             float *e,
                             float *out,
                             float beta);

/* The rank used for a matrix: min(r, n, m). */
size_t lowrank_rank_for(size_t n, size_t m, size_t r);

/* The method AUTO resolves to for rank r. */
rumor_lowrank_orth lowrank_orth_resolve(rumor_lowrank_orth method, size_t r);

/* Creates a PowerSGD compressor on a given backend (tests use ref). The
 * backend is owned by the compressor on success and on failure. */
rumor_err lowrank_psgd_new_on(rumor_lowrank_psgd **out,
                              const struct rumor_lowrank_shape *shapes,
                              size_t count,
                              const struct rumor_lowrank_psgd_opts *opts,
                              const struct lowrank_backend_i *iface,
                              void *ctx);

#ifdef __cplusplus
}
#endif

#endif
