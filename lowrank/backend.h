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

#include <stdbool.h>
#include <stdint.h>

/* --- work lists ----------------------------------------------------------
 * The cuda backend's list kernels and their plain-C twins (ref.c) share
 * the definitions below: a twin performs its kernel's per-thread
 * arithmetic as a loop (explicit fmaf / fma, the same partition of rows
 * among threads, the same reduction tree), so a GPU test can compare the
 * two closely and CPU tests check the twins against the cpu backend. */

/* Largest rank of a matrix in a work list. */
#define LOWRANK_LIST_MAX_RANK 16
/* Threads of a list kernel's block, in warps of LOWRANK_WARP. */
#define LOWRANK_LIST_THREADS 256
#define LOWRANK_WARP         32
#define LOWRANK_LIST_WARPS   (LOWRANK_LIST_THREADS / LOWRANK_WARP)
/* Rows of M a right-product tile covers: one warp per row. */
#define LOWRANK_RIGHT_ROWS LOWRANK_LIST_WARPS
/* Rows of a left-product tile: its columns are one warp wide (a row's
 * 128 bytes per load), its rows split among the warps; a column strip of
 * a taller matrix is cut into several tiles whose partial sums the last
 * one to finish adds in tile order (deterministic, one launch). */
#define LOWRANK_LEFT_ROWS 256
/* Elements of M a reconstruction tile covers. */
#define LOWRANK_RECON_ELEMS (LOWRANK_LIST_THREADS * 16)

/* One factor to orthogonalize (device p, row-major n x r). */
struct lowrank_orth_item {
    float *p;
    size_t n;
    size_t r;
};

/* One matrix of a product phase (device pointers; see the slots). */
struct lowrank_mat_item {
    float *mat;       /* n x m: M, or the error memory e */
    const float *add; /* n x m or NULL: mat += add in the same pass */
    const float *pd;  /* n x r or NULL: the deferred error update's P */
    const float *qd;  /* m x r or NULL: its Q */
    float *p;         /* n x r */
    float *q;         /* m x r */
    float *out;       /* n x m or NULL: the reconstruction's output */
    size_t n, m, r;
};

enum lowrank_phase {
    LOWRANK_PHASE_RIGHT, /* p = M q */
    LOWRANK_PHASE_LEFT,  /* q = M^T p */
    LOWRANK_PHASE_RECON  /* e -= p q^T, out = p q^T */
};

/* A block's share of one matrix: rows [lo, hi) (right, left) or elements
 * [lo, hi) (reconstruction). A left tile covers the columns [col, col +
 * LOWRANK_WARP) and is part `part` of `parts` of its column strip `strip`,
 * whose partial sums (parts x LOWRANK_WARP x r floats) start at float
 * `partial` of the plan's scratch. */
struct lowrank_tile {
    uint32_t item;
    uint32_t strip;
    uint32_t part;
    uint32_t parts;
    uint64_t lo, hi;
    uint64_t col;
    uint64_t partial;
};

/* The tiles of a phase over items, in item order (a strip's parts
 * consecutive): writes them to tiles when not NULL, returns how many;
 * *strips and *scratch (floats) are what the left product's reduction
 * needs (0 for the other phases). */
size_t lowrank_tiles_plan(enum lowrank_phase phase,
                          const struct lowrank_mat_item *items,
                          size_t count,
                          struct lowrank_tile *tiles,
                          size_t *strips,
                          size_t *scratch);

/* The twins (host memory): one kernel block's work each. */
void lowrank_ref_orth_block(const struct lowrank_orth_item *item,
                            rumor_lowrank_orth method,
                            float eps);
void lowrank_ref_right_tile(const struct lowrank_mat_item *item,
                            const struct lowrank_tile *tile);
/* scratch: the plan's; the tile that completes a strip writes q. */
void lowrank_ref_left_tile(const struct lowrank_mat_item *item,
                           const struct lowrank_tile *tile,
                           float *scratch);
void lowrank_ref_recon_tile(const struct lowrank_mat_item *item,
                            const struct lowrank_tile *tile,
                            bool with_e,
                            float beta);

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
    /* (optional) The work-list slots: every matrix of a step, of any
     * shapes and ranks up to LOWRANK_LIST_MAX_RANK, in one launch per
     * phase, with no host synchronization once a list has been seen (the
     * cuda backend keeps each list's device copy and tile plan). items is
     * a host array; its pointers are device pointers. The caller uses
     * them when set and its rank is at most LOWRANK_LIST_MAX_RANK. */
    /* Orthogonalizes every item's p (n x r, r <= n) as orthogonalize. */
    rumor_err (*orthogonalize_list)(void *ctx,
                                    const struct lowrank_orth_item *items,
                                    size_t count,
                                    rumor_lowrank_orth method,
                                    float eps);
    /* p = M' q per item, M' = (mat - pd qd^T) + add stored in mat (pd,
     * qd and add may each be NULL: project_right_ef / project_right). */
    rumor_err (*project_right_list)(void *ctx,
                                    const struct lowrank_mat_item *items,
                                    size_t count);
    /* q = M'^T p per item, M' = mat + add stored in mat (add may be NULL;
     * pd, qd unused). */
    rumor_err (*project_left_list)(void *ctx,
                                   const struct lowrank_mat_item *items,
                                   size_t count);
    /* Y = p q^T per item; with_e: mat -= Y; out != NULL: out = beta out + Y
     * (beta 0 never reads out), as reconstruct with alpha 1. */
    rumor_err (*reconstruct_list)(void *ctx,
                                  const struct lowrank_mat_item *items,
                                  size_t count,
                                  bool with_e,
                                  float beta);
};

/* Each fills *iface and *ctx; the context is freed with iface->free. */
rumor_err lowrank_cpu_init(struct lowrank_backend_i *iface, void **ctx);
rumor_err lowrank_ref_init(struct lowrank_backend_i *iface, void **ctx);
/* The ref backend with the list slots served by the twins: the list path
 * of the compressor on the CPU. */
rumor_err lowrank_twin_init(struct lowrank_backend_i *iface, void **ctx);
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

/* The cuda backend when want_cuda finds a usable GPU (*device CUDA), the
 * cpu backend otherwise (logged at INFO when CUDA was wanted). */
rumor_err lowrank_backend_open(bool want_cuda,
                               struct lowrank_backend_i *be,
                               void **ctx,
                               rumor_device *device);

/* Fills host[0..n) with standard normals of stream (seed, stream). */
void lowrank_fill_normal(float *host, size_t n, uint64_t seed, uint64_t stream);

/* Creates a PowerGossip edge on a given backend (tests use the twins),
 * owned by the edge on success and on failure. */
rumor_err lowrank_edge_new_on(rumor_lowrank_edge **out,
                              const struct rumor_lowrank_shape *shapes,
                              size_t count,
                              const struct rumor_lowrank_edge_opts *opts,
                              const struct lowrank_backend_i *iface,
                              void *ctx);

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
