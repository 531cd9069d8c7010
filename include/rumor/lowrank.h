/*
 * lowrank: power-iteration factors for PowerSGD (Vogels et al. 2019) and
 * PowerGossip (Vogels et al. 2020), the orthogonalization they need, and
 * the paper's way of counting the floats they send.
 *
 * Every tensor of two or more dimensions is viewed as the row-major matrix
 * (shape[0], numel / shape[0]); factors are row-major too: P is rows x r,
 * Q is cols x r (the memory layout of the PyTorch hook's p and q).
 *
 * Thread safety: an object is used by one thread at a time; distinct
 * objects may be used concurrently.
 * Ownership: objects own their state; model tensors are borrowed for the
 * duration of a call and live in the memory of the object's device (host
 * memory for RUMOR_DEVICE_CPU, CUDA device memory for RUMOR_DEVICE_CUDA);
 * exchange buffers handed out are host memory owned by the object.
 */
#ifndef RUMOR_LOWRANK_H
#define RUMOR_LOWRANK_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUMOR_LOWRANK_MAX_DIMS    8     /* dimensions of one tensor */
#define RUMOR_LOWRANK_MAX_RANK    256   /* largest rank accepted */
#define RUMOR_LOWRANK_MAX_TENSORS 65536 /* tensors in one model */

/* The shape of one tensor: ndim in 1..RUMOR_LOWRANK_MAX_DIMS, dims > 0. */
struct rumor_lowrank_shape {
    size_t ndim;
    size_t dims[RUMOR_LOWRANK_MAX_DIMS];
};

typedef enum rumor_lowrank_orth {
    RUMOR_LOWRANK_ORTH_AUTO = 0,   /* Gram-Schmidt for rank <= 2, QR above */
    RUMOR_LOWRANK_ORTH_GS = 1,     /* modified Gram-Schmidt, any rank */
    RUMOR_LOWRANK_ORTH_QR = 2,     /* Householder QR (LAPACK / cuSOLVER) */
    RUMOR_LOWRANK_ORTH_CHOLQR2 = 3 /* CholeskyQR2; GS when P^T P is singular */
} rumor_lowrank_orth;

/* --- shapes and counting ------------------------------------------------ */

/* Views shape as a matrix: rows = dims[0], cols = numel / dims[0].
 * RUMOR_EINVAL for ndim 0, ndim > RUMOR_LOWRANK_MAX_DIMS, a zero dimension
 * or a numel that overflows size_t. A 1-D tensor gives cols = 1. */
RUMOR_API rumor_err
rumor_lowrank_matricize(const struct rumor_lowrank_shape *shape,
                        size_t *rows,
                        size_t *cols);

/* True when a rows x cols matrix gains from rank-r factors at the given
 * minimum compression rate: (rows + cols) min(r, rows, cols) rate <
 * rows cols, the PyTorch hook's _should_compress. */
RUMOR_API bool
rumor_lowrank_worth(size_t rows, size_t cols, size_t rank, double min_rate);

struct rumor_lowrank_count {
    uint64_t params;      /* all elements of all tensors */
    uint64_t floats_sent; /* per step, counted as below */
    uint64_t compressed;  /* tensors sent as factors */
};

/* Counts as the PowerSGD paper's code does: every tensor of two or more
 * dimensions sends (n + m) min(r, n, m) floats, every 1-D tensor is sent
 * whole. The ratio is params / floats_sent. RUMOR_EINVAL on a bad shape
 * or rank 0. */
RUMOR_API rumor_err
rumor_lowrank_count_floats(const struct rumor_lowrank_shape *shapes,
                           size_t count,
                           size_t rank,
                           struct rumor_lowrank_count *out);

/* Parses a shape file: one tensor per line, "NAME DIM [DIM...]", '#'
 * starts a comment, blank lines are skipped. On success *shapes_out is a
 * malloc'ed array of *count_out shapes (owned by the caller, free()).
 * RUMOR_EPROTO with diag set (file:line:col) on a malformed line,
 * RUMOR_ETOOBIG past RUMOR_LOWRANK_MAX_TENSORS, RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_lowrank_shapes_parse(const char *text,
                                               size_t len,
                                               const char *file,
                                               struct rumor_lowrank_shape **out,
                                               size_t *count_out,
                                               struct rumor_diag *diag);

/* --- PowerSGD ----------------------------------------------------------------
 */

typedef struct rumor_lowrank_psgd rumor_lowrank_psgd;

struct rumor_lowrank_psgd_opts {
    size_t rank;             /* r (default 1) */
    double min_rate;         /* compress only where it gains this much (2) */
    float eps;               /* orthogonalization epsilon (0, as the hook) */
    rumor_lowrank_orth orth; /* (AUTO) */
    bool error_feedback;     /* keep e = M - approx (true) */
    bool warm_start;         /* reuse Q between steps (true) */
    uint64_t start_iter;     /* steps of plain averaging first (0) */
    uint64_t seed;           /* shared by every node: same first Q (0) */
    bool one_sided;          /* epfml variant: one product per iteration,
                                alternating sides, local deflation; needs
                                error_feedback (false) */
    size_t iters;            /* products per step in the one-sided
                                variant (1) */
    bool batch;              /* one backend call per group of same-shape
                                matrices where the backend has batched
                                kernels; false: one call per matrix, the
                                hook's batch_tensors_with_same_shape (true) */
    bool want_cuda;          /* use the CUDA backend when usable (false) */
    size_t tensor_base;      /* stream of tensor t's random factors:
                                tensor_base + t, for a compressor on a part
                                of a model (0) */
};

/* Fills opts with the defaults written above. */
RUMOR_API void
rumor_lowrank_psgd_opts_default(struct rumor_lowrank_psgd_opts *opts);

/* True when a compressor with these options sends a rows x cols matrix
 * (of a tensor with two or more dimensions) as factors: the hook's rule
 * rumor_lowrank_worth(rows, cols, rank, min_rate), or for the one-sided
 * variant epfml/powersgd's, which counts the iters / 2 factors a step
 * sends on average: (rows + cols) min(r, rows, cols) iters / 2 min_rate <
 * rows cols. */
RUMOR_API bool
rumor_lowrank_psgd_worth(const struct rumor_lowrank_psgd_opts *opts,
                         size_t rows,
                         size_t cols);

/* Creates a compressor for a model of count tensors with these shapes
 * (copied). Tensors that are 1-D or do not gain (rumor_lowrank_psgd_worth)
 * are left to the caller, who averages them uncompressed. *out is set to
 * NULL on entry and filled on success. RUMOR_EINVAL on bad shapes or
 * options, RUMOR_ENOMEM, RUMOR_EBACKEND. */
RUMOR_API rumor_err
rumor_lowrank_psgd_new(rumor_lowrank_psgd **out,
                       const struct rumor_lowrank_shape *shapes,
                       size_t count,
                       const struct rumor_lowrank_psgd_opts *opts);

/* Frees the compressor and sets *self_p to NULL; safe on NULL. */
RUMOR_API void rumor_lowrank_psgd_destroy(rumor_lowrank_psgd **self_p);

/* The device the compressor computes on. */
RUMOR_API rumor_device
rumor_lowrank_psgd_device(const rumor_lowrank_psgd *self);

/* Bytes copied host -> device (*to_device) and back (*to_host): the
 * factors of the compressor's steps and the state the _get / _set calls
 * below read and write (Q, P, error memories); 0 on a backend whose
 * memory is the host's. The _get calls count, so they take a mutable
 * compressor. */
RUMOR_API void rumor_lowrank_psgd_pcie_bytes(const rumor_lowrank_psgd *self,
                                             uint64_t *to_device,
                                             uint64_t *to_host);

/* True when tensor i is sent as factors (false: the caller averages it). */
RUMOR_API bool rumor_lowrank_psgd_compressed(const rumor_lowrank_psgd *self,
                                             size_t i);

/* True once start_iter steps have passed: compress this step. */
RUMOR_API bool rumor_lowrank_psgd_active(const rumor_lowrank_psgd *self);

/* Counts a step of plain averaging (before start_iter). */
RUMOR_API void rumor_lowrank_psgd_skip(rumor_lowrank_psgd *self);

/* Steps taken so far (compressed or skipped). */
RUMOR_API uint64_t rumor_lowrank_psgd_step(const rumor_lowrank_psgd *self);

/* One exchange point: a host buffer the caller all-reduces in place. */
struct rumor_lowrank_xchg {
    float *data;   /* owned by the compressor; valid until the next call */
    size_t floats; /* length of data */
    bool average;  /* false: sum over nodes; true: sum, then divide by the
                      number of nodes */
};

/* Starts a compressed step on grads[i] (device memory, tensor i of the
 * shapes; entries of uncompressed tensors are ignored and may be NULL).
 * With error feedback M = g + e is formed inside the first product and
 * kept in the error memory; without it M is grads itself, which must not
 * change until _end (the one-sided variant deflates it in place).
 * Fills *x with the first exchange (P, summed, for the hook's variant).
 * RUMOR_EINVAL when not active or a step is already open. */
RUMOR_API rumor_err rumor_lowrank_psgd_begin(rumor_lowrank_psgd *self,
                                             float *const *grads,
                                             struct rumor_lowrank_xchg *x);

/* Call after the caller has reduced *x. Either fills *x with the next
 * exchange and sets *done = false (Q, averaged, for the hook's variant),
 * or sets *done = true: then call _end. */
RUMOR_API rumor_err rumor_lowrank_psgd_next(rumor_lowrank_psgd *self,
                                            struct rumor_lowrank_xchg *x,
                                            bool *done);

/* Writes the approximation P Q^T into out[i] (device memory; may be the
 * grads of _begin) for every compressed tensor, updates the error memory
 * e = M - approx, keeps Q for the warm start, and counts the step. The
 * one-sided variant accumulates its approximation in the grads of _begin
 * (consumed into the error memory by the first product), so there out
 * must be those grads (RUMOR_EINVAL otherwise). */
RUMOR_API rumor_err rumor_lowrank_psgd_end(rumor_lowrank_psgd *self,
                                           float *const *out);

/* Floats in all warm-start Q factors (the state a checkpoint keeps). */
RUMOR_API size_t rumor_lowrank_psgd_q_floats(const rumor_lowrank_psgd *self);

/* Copies the warm-start Q factors (tensor order, each cols x r row-major)
 * to host memory q[0..q_floats). RUMOR_EINVAL when none exist yet. */
RUMOR_API rumor_err rumor_lowrank_psgd_q_get(rumor_lowrank_psgd *self,
                                             float *q);

/* Replaces the warm-start Q factors with q (host, layout as _q_get), as
 * when restoring a checkpoint or to start from a given Q. */
RUMOR_API rumor_err rumor_lowrank_psgd_q_set(rumor_lowrank_psgd *self,
                                             const float *q);

/* Where tensor i's Q lies in the _q_get layout (packed by shape group,
 * not always in tensor order): *offset in floats and *rank, its columns
 * (min(r, rows, cols)). For moving warm-start factors to a compressor of
 * another rank. RUMOR_EINVAL when i is not compressed. */
RUMOR_API rumor_err rumor_lowrank_psgd_q_slot(const rumor_lowrank_psgd *self,
                                              size_t i,
                                              size_t *offset,
                                              size_t *rank);

/* Floats in all P factors, and copies of them (layout as Q's, rows x r
 * each). Only the one-sided variant carries P from step to step, so only
 * its checkpoints need them. */
RUMOR_API size_t rumor_lowrank_psgd_p_floats(const rumor_lowrank_psgd *self);
RUMOR_API rumor_err rumor_lowrank_psgd_p_get(rumor_lowrank_psgd *self,
                                             float *p);
RUMOR_API rumor_err rumor_lowrank_psgd_p_set(rumor_lowrank_psgd *self,
                                             const float *p);

/* Copies tensor i's error memory (rows x cols) to host memory out.
 * RUMOR_EINVAL when i is not compressed or no memory exists yet. */
RUMOR_API rumor_err rumor_lowrank_psgd_error_get(rumor_lowrank_psgd *self,
                                                 size_t i,
                                                 float *out);

/* Tensor i's error memory where the compressor keeps it (device memory
 * on the cuda backend) into *e, valid until the next call on self, with
 * nothing copied to the host: the memory itself, or (an update still
 * deferred) the value _error_get gives, formed in the compressor's own
 * scratch. RUMOR_EINVAL as _error_get. */
RUMOR_API rumor_err rumor_lowrank_psgd_error_mem(rumor_lowrank_psgd *self,
                                                 size_t i,
                                                 const float **e);

/* Replaces tensor i's error memory with in (host, rows x cols), as when
 * restoring a checkpoint. RUMOR_EINVAL as _error_get, RUMOR_ENUMERIC when
 * in holds NaN or Inf. */
RUMOR_API rumor_err rumor_lowrank_psgd_error_set(rumor_lowrank_psgd *self,
                                                 size_t i,
                                                 const float *in);

/* Sets the step counter (a checkpoint's): it decides start_iter, the
 * one-sided variant's side and the stream of fresh random factors.
 * RUMOR_EINVAL while a step is open. */
RUMOR_API rumor_err rumor_lowrank_psgd_step_set(rumor_lowrank_psgd *self,
                                                uint64_t step);

/* A copy of the state between steps (Q, P, error memories, step) kept in
 * the backend's memory, device to device: nothing crosses PCIe. For a
 * ring that may drop a step and go back to its start (elastic rings).
 * RUMOR_EINVAL while a step is open or on a backend without copies. */
RUMOR_API rumor_err rumor_lowrank_psgd_snapshot(rumor_lowrank_psgd *self);

/* Back to the last snapshot, whatever phase a step left the compressor
 * in (it is idle after). RUMOR_EINVAL without a snapshot. */
RUMOR_API rumor_err
rumor_lowrank_psgd_snapshot_restore(rumor_lowrank_psgd *self);

/* Exchanges the state and the snapshot (no copy), whatever the phase;
 * twice puts both back. The getters then read the snapshot, for saving
 * it while a step is open (nothing else may run in between).
 * RUMOR_EINVAL without a snapshot. */
RUMOR_API rumor_err rumor_lowrank_psgd_snapshot_swap(rumor_lowrank_psgd *self);

/* --- PowerGossip edge state ---------------------------------------------- */

typedef struct rumor_lowrank_edge rumor_lowrank_edge;

struct rumor_lowrank_edge_opts {
    uint64_t self_id; /* this node */
    uint64_t peer_id; /* the neighbour; != self_id */
    uint64_t seed;    /* the run seed; the edge derives (seed, min, max) */
    size_t rank;      /* r (default 1) */
    float eps;        /* Gram-Schmidt epsilon (1e-8, as the reference) */
    bool warm_start;  /* iteration t starts from the factor iteration t - 1
                         left (true); false: that factor is drawn afresh
                         from the pair's seed and t, the reference's
                         warm_start=False */
    bool want_cuda;   /* (false) */
};

/* Fills opts with the defaults written above, self_id 0, peer_id 1 and
 * seed 0; the caller sets the ids and the run seed. */
RUMOR_API void
rumor_lowrank_edge_opts_default(struct rumor_lowrank_edge_opts *opts);

/* Creates the state of one edge for a model with these shapes: for every
 * tensor of two or more dimensions, p (rows x r) and q (cols x r), filled
 * from the edge's shared seed so both ends hold the same values. 1-D
 * tensors are left to the caller (plain gossip). *out as usual. */
RUMOR_API rumor_err
rumor_lowrank_edge_new(rumor_lowrank_edge **out,
                       const struct rumor_lowrank_shape *shapes,
                       size_t count,
                       const struct rumor_lowrank_edge_opts *opts);

RUMOR_API void rumor_lowrank_edge_destroy(rumor_lowrank_edge **self_p);

/* Floats in the message of iteration t (sum of cols r on even t, of
 * rows r on odd t, over the compressed tensors). */
RUMOR_API size_t rumor_lowrank_edge_msg_floats(const rumor_lowrank_edge *self,
                                               uint64_t t);

/* Iteration t >= 1 (t = 0 is the reference's no-op): on even t
 * orthogonalizes p and computes q = M^T p, on odd t orthogonalizes q and
 * computes p = M q (without warm_start, p or q is first drawn afresh:
 * column c of compressed tensor i from rumor_rng stream (t << 24) |
 * (i r + c) of seed rumor_seed_derive(seed, min id, max id), so both ends
 * draw the same), for every compressed tensor of params (device
 * memory), and copies the packed products to msg (host,
 * _msg_floats(t) floats) to send to the neighbour. */
RUMOR_API rumor_err rumor_lowrank_edge_product(rumor_lowrank_edge *self,
                                               float *const *params,
                                               uint64_t t,
                                               float *msg);

/* Takes the neighbour's message of the same iteration and forms the
 * product of the difference oriented from the higher id to the lower:
 * own - theirs on the higher end, theirs - own on the lower. Rejects a
 * message with NaN or Inf (RUMOR_ENUMERIC) without changing state. */
RUMOR_API rumor_err rumor_lowrank_edge_combine(rumor_lowrank_edge *self,
                                               const float *msg);

/* params[i] += sign * step * p q^T with sign = -1 on the higher end, so
 * both ends move by the same rank-r matrix in opposite directions.
 * step is the edge weight times the consensus step size gamma. */
RUMOR_API rumor_err rumor_lowrank_edge_apply(rumor_lowrank_edge *self,
                                             float *const *params,
                                             float step);

/* The same as a store: params[i] = sign * step * p q^T, the bits of
 * _apply to a zeroed params[i] (a -0 may stay -0 where that gives +0),
 * without reading params[i] first. */
RUMOR_API rumor_err rumor_lowrank_edge_write(rumor_lowrank_edge *self,
                                             float *const *params,
                                             float step);

/* Ends the combined iteration without touching any tensor, for a caller
 * that forms the term itself from the factors (_state_get, then _rows). */
RUMOR_API rumor_err rumor_lowrank_edge_close(rumor_lowrank_edge *self);

/* Rows [row, row + rows) of tensor's sign * p q^T (step 1) from factors
 * laid out as _state_get's, into out (host, rows x cols floats): the bits
 * _write stores there when factors are the edge's own. Host-memory edges
 * only (RUMOR_ENOTSUP on a device); RUMOR_EINVAL for a tensor the edge
 * does not compress or rows past its end. */
RUMOR_API rumor_err rumor_lowrank_edge_rows(rumor_lowrank_edge *self,
                                            const float *factors,
                                            size_t tensor,
                                            size_t row,
                                            size_t rows,
                                            float *out);

/* The squared Frobenius norm of p q^T summed over the compressed tensors,
 * from factors laid out as _state_get's: the exact product's, in double,
 * from the r x r Gram matrices (no pass over the tensors). INFINITY where
 * an element of a product could leave float's range. */
RUMOR_API double rumor_lowrank_edge_sq_norm(const rumor_lowrank_edge *self,
                                            const float *factors);

/* The device the edge computes on (CUDA only when want_cuda found a
 * usable GPU). */
RUMOR_API rumor_device
rumor_lowrank_edge_device(const rumor_lowrank_edge *self);

/* Floats in the edge's factors: every p (packed as an odd message), then
 * every q (as an even one). They are the warm start of the next
 * iteration, the state a checkpoint keeps (the parity is the iteration
 * number's, which the caller counts per edge and keeps beside them). */
RUMOR_API size_t
rumor_lowrank_edge_state_floats(const rumor_lowrank_edge *self);

/* Copies the factors to host memory out[0..state_floats). RUMOR_EINVAL
 * while an iteration is open (after _product, before _apply). */
RUMOR_API rumor_err rumor_lowrank_edge_state_get(const rumor_lowrank_edge *self,
                                                 float *out);

/* Replaces the factors with in (layout as _state_get), as when restoring
 * a checkpoint. RUMOR_EINVAL while an iteration is open, RUMOR_ENUMERIC
 * (nothing changed) when in holds NaN or Inf. */
RUMOR_API rumor_err rumor_lowrank_edge_state_set(rumor_lowrank_edge *self,
                                                 const float *in);

#endif /* RUMOR_LOWRANK_H */
